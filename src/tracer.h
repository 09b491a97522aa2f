/* tracer.h: the executor's hook that turns every op output into a trace
 * record (hash and statistics, computed by the backend where the tensor
 * lives) and watches for the first non-finite value. Records can be made
 * off the executor's thread, so that tracing overlaps the next ops instead
 * of delaying them: by a worker thread of the tracer's own, and by the
 * backend's threads while they wait for its next job (backend_ops's
 * lend_idle); at the end of a step the caller's thread traces what they
 * have not reached, from the other end. The records are the same whoever
 * makes them (each is a function of the bytes). */
#ifndef DT_TRACER_H
#define DT_TRACER_H

#include <stdint.h>

#include "backend.h"
#include "graph.h"
#include "trace.h"

struct tracer;

/* cores: how many cores the process may run on. With more than one,
 * records are made off the caller's thread: by the backend's lent threads,
 * and by a worker of the tracer's own where those leave a core free. Below
 * 0 (for tests): queued, but made only by the caller's thread, at
 * tracer_sync (or, deferred, where the next step would overwrite them). */
struct tracer *tracer_new(const struct graph *g, const struct backend_ops *be, void *ctx,
                          int cores);
void tracer_free(struct tracer *t);

/* Start step `step` (before the executor runs it). */
void tracer_begin(struct tracer *t, uint64_t step);
/* The exec_hook_fn to install, with the tracer as its argument. */
void tracer_hook(void *arg, int i, const backend_buf *buf);
/* For exec's before_end: ask the backend for the step's records before it
 * ends the step (batch mode), so that they can be computed inside it. */
void tracer_before_end(void *arg);
/* Wait until every op of the step is traced; then the records are final. */
void tracer_sync(struct tracer *t);

/* This step's record of every node (after tracer_sync). */
const struct trace_oprec *tracer_records(const struct tracer *t);
/* Deferred records (call before the first step; 1 when on, 0 when not):
 * tracer_sync then leaves a step's records on their way while the next
 * step runs. The executor's buffers must not be reused by the next step
 * meanwhile (exec_double).
 * - Batch mode, on a backend with trace_defer: the records are taken (and
 *   watched for non-finite values) when the next step asks for its own,
 *   at the next tracer_sync of a step that is not run as a unit, or at
 *   tracer_flush.
 * - Records made off the caller's thread (the cpu backend with a second
 *   core), when a step's op outputs take at most 256 MiB: the takers go on
 *   with them in the next step, and the caller's thread makes what is left
 *   in tracer_hook before the next step's first update of a leaf (which
 *   overwrites the buffer a leaf's record reads), or at tracer_flush.
 * DIVTRACE_TRACE_DEFER=0 turns it off; =1 lifts the 256 MiB cap. */
int tracer_defer(struct tracer *t);
/* Take the records still on their way, if any. */
void tracer_flush(struct tracer *t);
/* The last step whose records are final (-1: none yet), and the records of
 * such a step: the last one, or the one before it. */
int64_t tracer_done(const struct tracer *t);
const struct trace_oprec *tracer_records_of(const struct tracer *t, uint64_t step);
/* The first op whose output held a NaN or Inf while its inputs were finite,
 * and its step; -1 if none so far. */
int tracer_nonfinite(const struct tracer *t, uint64_t *step);
/* The carry faults of a final step (tracer_done, or the step before it):
 * the leaves (parameters, optimizer state) whose bits at the start of the
 * step were not what their update wrote in the step before; their count,
 * *leaves pointing at their node indices (valid until the next step's
 * records are final). Every leaf is hashed from its buffer each step. */
int tracer_carry(const struct tracer *t, uint64_t step, const int **leaves);
int tracer_finite(const struct trace_oprec *r);

#endif
