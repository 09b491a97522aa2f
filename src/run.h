/* run.h: one training run set up in memory: data, the step's op graph, a
 * backend, the executor and the tracer. `record` drives it and writes a
 * trace; `replay` rebuilds it from a trace's configuration and checkpoint. */
#ifndef DT_RUN_H
#define DT_RUN_H

#include <stdint.h>

#include "backend.h"
#include "data.h"
#include "exec.h"
#include "graph.h"
#include "trace.h"
#include "tracer.h"
#include "train.h"

struct run {
    const struct train_config *tc;
    struct data data;
    struct graph g;
    const struct backend_ops *be;
    void *ctx;
    struct exec e;
    struct tracer *tr;
    int *leaves;               /* nodes with a next value: parameters and state */
    int nleaves;
    int *inputs;               /* the data inputs: data.x, or data.tNN for each frame */
    int ninputs;
    float *host;               /* staging for the largest node */
    /* one step's data, all inputs one after the other (a video's frames
     * regrouped by time step), for two steps: bbuf[s & 1] holds step
     * bstep[s & 1]'s, so that the next step's batch is made while this
     * step runs, and uploaded from memory no queued copy still reads */
    float *bbuf[2];
    uint64_t bstep[2];
    size_t nbatch;
    /* step s's loss in loss_host[s & 1] (host_alloc), valid once
     * loss_pending[s & 1] is 0 (after a sync, or the wait for its fence) */
    float *loss_host[2];
    int loss_pending[2];
    int pinned;                /* bits 0 to 3: bbuf[0], bbuf[1], loss_host[0], [1] came from host_alloc */
    /* run_overlap: each run_step_exec marks its step with the backend's
     * fence of its parity (fstep: the step marked, fwait: waited for), so
     * that step s + 1 can be queued before step s is waited for */
    int overlap;
    uint64_t fstep[2];
    int fwait[2];
};

/* Set everything up (initial parameters from the init seed); 0, or -1 with
 * dt_error set on bad input. precision overrides tc's mpfr precision when
 * non-zero. With `traced`, the tracer hook is installed. */
int run_open(struct run *r, const struct train_config *tc, long precision, int traced);
void run_close(struct run *r);

/* The run's configuration as trace header keys. */
void run_describe(struct run *r, struct trace_config *cfg, uint64_t ckpt_every);

/* Bytes one checkpoint of this run takes (about). */
uint64_t run_ckpt_bytes(const struct run *r);
/* A checkpoint of the state before step `step` (free with trace_ckpt_free
 * after setting the names to NULL: they belong to the graph). */
void run_ckpt_take(struct run *r, uint64_t step, struct trace_ckpt *c);
void run_ckpt_release(struct trace_ckpt *c);
/* Set parameters and optimizer state from a checkpoint. 0, or -1 with
 * dt_error set when a tensor is missing or has another shape. */
int run_ckpt_load(struct run *r, const struct trace_ckpt *c);

/* Step `step` in two halves, so that a caller can change state between
 * them: begin queues the upload of the step's batch; exec runs every op,
 * makes the batch of step `next` on the host meanwhile (UINT64_MAX: none)
 * and waits for the tracer. A step's batch is made once: by the exec of
 * the step before it, or else by its begin. Exec with a `next` needs the
 * step before `step` done (its run_loss, or with run_overlap the wait
 * that exec makes itself): the buffer it writes was that step's upload. */
void run_step_begin(struct run *r, uint64_t step);
void run_step_exec(struct run *r, uint64_t step, uint64_t next);
/* Make step `step`'s batch in the host buffer of its parity. */
void run_prefetch(struct run *r, uint64_t step);
/* Let step s + 1 be queued before step s is waited for: 1 when the
 * backend has fences (the GPUs', and the cpu's empty ones), 0 when not.
 * Call before the first step. The caller then reads step s's loss after
 * step s + 1's exec, and changes no state between two steps without a
 * run_loss of the first (a sync) before. */
int run_overlap(struct run *r);
/* The loss of step `step`, one of the last two run_step_exec's (waits for
 * that step on a GPU, and with run_overlap for that step only). */
double run_loss(struct run *r, uint64_t step);

/* The summary of the step just executed: records kept at `level` (into
 * keep, one slot per node), the root hash over all op hashes (hashes: one
 * slot per node, scratch) and the gradient norm. */
void run_summarize(struct run *r, uint64_t step, double loss, enum trace_level level,
                   struct trace_oprec *keep, uint64_t *hashes, struct trace_step *ts);

/* A train_config from a trace header (strings point into cfg, which must
 * outlive tc; the data directory is kept in tc itself). 0, or -1
 * with dt_error set when a key is missing or malformed. */
int run_config_from_trace(struct train_config *tc, const struct trace_config *cfg);

#endif
