/* ranks.h: the traces of one data-parallel job's ranks, compared as
 * replicas (divtrace diff and divtrace explain given ranks; see RANKS in
 * divtrace-diff(1)). Replicas must hold bitwise equal parameters and
 * optimizer state at every step's start, gradients after the all-reduce,
 * updates, and checkpoint tensors; inputs, module outputs and losses are
 * each rank's own. Finds the first step, rank and tensor where they part,
 * and why: a tensor changed between steps, or another gradient or update. */
#ifndef DT_RANKS_H
#define DT_RANKS_H

#include <stdint.h>
#include <stdio.h>

#include "trace.h"

enum ranks_cause {
    RANKS_AGREE = 0,      /* nothing differs */
    RANKS_CAUSE_OPS,      /* the ranks record other parameters, gradients or updates */
    RANKS_CAUSE_START,    /* a leaf differs at the start of step 0 */
    RANKS_CAUSE_CHANGED,  /* a leaf changed between steps, after an update that agreed */
    RANKS_CAUSE_LEAF,     /* a leaf differs; no record of the update that wrote it */
    RANKS_CAUSE_GRAD,     /* another gradient, from parameters that agreed */
    RANKS_CAUSE_UPDATE,   /* another update, from inputs that agreed */
    RANKS_CAUSE_SKIPPED,  /* an update that left its leaf unchanged where the others' did not */
    RANKS_CAUSE_CKPT,     /* a checkpoint tensor differs where the records agree or are not kept */
};

enum ranks_basis {        /* how the odd ranks were told from the others */
    RANKS_BASIS_EVIDENCE, /* the update that wrote the leaf, or the leaf an update left as it was */
    RANKS_BASIS_MAJORITY, /* more ranks hold the reference value than any other */
    RANKS_BASIS_LOWEST,   /* no majority: the value of the lowest rank is the reference */
};

struct ranks_result {
    int n;                      /* traces, in command-line order */
    struct trace_file **tf;     /* not owned */
    int64_t *rank;              /* per trace */
    char (*label)[8];           /* per trace: "A", "B", ... (the command line's order) */
    const char *job;            /* dist_job */
    int64_t world;              /* world_size */
    uint64_t common;            /* steps every trace holds */
    uint32_t nkind[TRACE_KIND_COUNT]; /* replicated ops of the first trace, by kind */
    uint64_t nrecords;          /* records compared across ranks (one per op and step) */
    int nckpt;                  /* checkpoint steps every trace holds, compared */
    int compared;               /* some record or checkpoint compared */
    int agree;                  /* compared, and nothing differs */
    /* the first divergence (cause != RANKS_AGREE) */
    enum ranks_cause cause;
    enum ranks_basis basis;
    uint64_t step;
    int op;                     /* the first trace's op index, or -1 (checkpoint, op lists) */
    char name[256];             /* the tensor */
    uint8_t *odd;               /* per trace: 1 when it holds another value than the reference */
    int nodd;
    int ref;                    /* the trace of the lowest rank that holds the reference value */
    int have_elements;          /* a checkpoint at step holds the tensor: */
    uint64_t elements_differ, elements, max_ulp; /* the first odd rank's against ref's */
    uint64_t affected;          /* steps in which a replicated record differs */
    uint64_t first_affected, last_affected;
    int64_t ckpt_step;          /* the first checkpoint whose tensors differ, or -1 */
    char ckpt_tensor[256];
    int same_inputs;            /* input records compared, and all ranks read the same ones */
    char text[1024];            /* the finding for the first odd rank, "" when they agree */
};

/* Whether the n traces (n >= 2) are distinct ranks of one job (their
 * headers' dist_job and world_size equal, their rank keys different): 1,
 * or 0 when two traces are not (they compare as two runs), or -1 with
 * dt_error set when more than two are not, or a header's keys are bad. */
int ranks_detect(struct trace_file *const *tf, int n);

/* Compare the ranks (ranks_detect gave 1). 0, or -1 with dt_error set (an
 * unreadable checkpoint, a trace with no step); r is to be freed either way. */
int ranks_compare(struct trace_file **tf, int n, struct ranks_result *r);
void ranks_result_free(struct ranks_result *r);
/* The odd trace of the lowest rank (cause != RANKS_AGREE), whose finding
 * r->text is. */
int ranks_first_odd(const struct ranks_result *r);

/* The report: what was compared and where the replicas part, as text
 * (losses: each rank's final loss too), or as the JSON fields of an object
 * that the caller opens and closes. */
void ranks_print_text(FILE *f, const struct ranks_result *r, int losses);
void ranks_print_json(FILE *f, const struct ranks_result *r);

#endif
