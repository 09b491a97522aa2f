/* carry.h: carry faults read from a trace. A leaf (a parameter or optimizer
 * state) is hashed from its buffer at the start of every step, and names
 * the update that wrote it in the step before (TRACE_INPUT_PREV); a leaf
 * whose hash is not that update's was changed between the steps. `record`
 * stores an event for each such step; traces written through libdivtrace,
 * or events beyond the stored ones, are found from the records. */
#ifndef DT_CARRY_H
#define DT_CARRY_H

#include <stdint.h>

#include "trace.h"

struct carry_fault {
    uint64_t step;         /* the step that began with the changed leaf */
    uint32_t leaf;         /* op index of the leaf */
    uint32_t writer;       /* op index of the update that wrote it in step - 1 */
    int from_records;      /* 1: seen in the records; 0: from an event only */
};

struct carry_scan {
    int n, cap;
    struct carry_fault *f;       /* in step order, then op order */
    uint64_t nsteps;             /* steps with at least one */
    int checkable;               /* the records hold leaves and their updates */
};

/* Every carry fault of tf, from its events and its records. */
void carry_scan_trace(const struct trace_file *tf, struct carry_scan *out);
void carry_scan_free(struct carry_scan *c);
/* "step 12: L0.conv_i.W is not what L0.conv_i.W.update wrote in step 11" */
void carry_describe(const struct trace_file *tf, const struct carry_fault *f, char *out, size_t n);

#endif
