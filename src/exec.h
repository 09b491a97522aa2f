/* exec.h: the executor: runs a graph's nodes in order on a backend, owns the
 * device buffers, and calls a hook after every op (the tracer). */
#ifndef DT_EXEC_H
#define DT_EXEC_H

#include <stdint.h>

#include "backend.h"
#include "graph.h"

/* Called after node i has run (or, for a leaf, at its place in the order). */
typedef void (*exec_hook_fn)(void *arg, int i, const backend_buf *buf);

struct exec {
    struct graph *g;
    const struct backend_ops *be;
    void *ctx;
    backend_buf **buf;         /* per node: its storage on the backend */
    backend_buf **alt;         /* per node: the other step's storage (exec_double), or NULL */
    exec_hook_fn hook;
    void *hook_arg;
    /* Faults injected on purpose (fault.h): a node's kernel replaced, and a
     * function that may change a node's output before the hook sees it. */
    backend_op_fn *override;   /* per node, NULL for the backend's kernel */
    void (*corrupt)(void *arg, int i, backend_buf *out);
    void *corrupt_arg;
    uint64_t advances;         /* exec_advance calls: their parity is the buffers' arrangement */
    /* optional: called after the last op's hook and before the backend's
     * step_end, when the backend runs the step as a unit (the tracer asks
     * for its records there, so that they can be part of a captured step) */
    void (*before_end)(void *arg);
    void *before_end_arg;
};

/* Allocate a buffer for every node. 0, or -1 with dt_error set if the
 * backend lacks a kernel for an op of the graph. */
int exec_init(struct exec *e, struct graph *g, const struct backend_ops *be, void *ctx);
void exec_free(struct exec *e);

void exec_set(struct exec *e, int i, const float *host);  /* upload node i */
void exec_get(struct exec *e, int i, float *host);        /* download node i */
/* Upload node i behind the queued work (the backend's upload_async, or
 * upload): host must stay unchanged until the next download or sync. */
void exec_set_async(struct exec *e, int i, const float *host);
/* Download node i behind the queued work (the backend's download_async, or
 * download): host (from the backend's host_alloc) is valid after the next
 * sync. Returns 1 when a sync is still needed, 0 when host is valid now. */
int exec_get_async(struct exec *e, int i, float *host);

/* Run every node once for step `step`. */
void exec_step(struct exec *e, uint64_t step);
/* Make every leaf's next value (node.next) its current value; with
 * exec_double, the other set of op outputs becomes the current one. */
void exec_advance(struct exec *e);
/* Give every node that is neither a leaf nor a leaf's update a second
 * buffer, used every other step (the parity of exec_advance, as the
 * leaves' arrangement): the outputs of one step stay intact while the
 * next step runs, so that they can be read (traced) meanwhile. The leaves'
 * buffers already alternate with their updates. Call before the first
 * step; it doubles the memory of the op outputs. */
int exec_double(struct exec *e); /* 0, or -1 with dt_error set (out of memory) */

#endif
