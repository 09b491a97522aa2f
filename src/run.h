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
    float *loss_host;          /* the last run_step_exec's loss (host_alloc) */
    int loss_pending;          /* loss_host is valid after a sync */
    int pinned;                /* bits 0, 1, 2: bbuf[0], bbuf[1], loss_host came from host_alloc */
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
 * the step before it, or else by its begin. Exec with a `next` needs a
 * sync since the step before `step` began (run_loss of that step): the
 * buffer it writes was that step's upload. */
void run_step_begin(struct run *r, uint64_t step);
void run_step_exec(struct run *r, uint64_t step, uint64_t next);
/* Make step `step`'s batch in the host buffer of its parity. */
void run_prefetch(struct run *r, uint64_t step);
/* The loss of the last run_step_exec (waits for it on a GPU). */
double run_loss(struct run *r);

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
