/* backend.h: a backend is data: a const table of functions (one kernel per
 * op type plus storage, transfer and tracing) and an opaque context. The
 * executor is the only caller of the op kernels. Only .cu files include CUDA
 * headers; a GPU backend's table is declared here like any other. */
#ifndef DT_BACKEND_H
#define DT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "graph.h"
#include "trace.h"

#define BACKEND_API_VERSION 1

/* A tensor's storage on a backend (float32 on cpu, device memory on a GPU,
 * MPFR numbers on mpfr): opaque outside the backend. */
typedef void backend_buf;

/* What a backend may need to know of the step being executed. */
struct backend_step {
    uint64_t step;      /* 0-based step number (Adam's t = step + 1) */
    /* every node's buffer in this pass (node index -> buffer), or NULL: a
     * kernel that computes several nodes in one call (cudnn's grouped
     * convolutions) reads and writes the other nodes' buffers here */
    backend_buf *const *bufs;
};

/* Options a user can give a backend. */
struct backend_options {
    int threads;            /* cpu: OpenBLAS threads (>= 1) */
    const char *cpu_kernel; /* cpu: requested OpenBLAS core type, or NULL */
    const char *cpu_gemm;   /* cpu: "fixed" (cpu_gemm.h's order) or NULL (OpenBLAS) */
    long precision;         /* mpfr: bits of precision (default 128) */
    const char *reduce;     /* cuda, cudnn: "tree" (fixed-order reductions, the
                             * default when NULL) or "atomic" (atomicAdd: bias
                             * gradients, losses and norms in arrival order) */
    const char *cudnn_algo; /* cudnn: "deterministic" (default when NULL),
                             * "deterministic-fast", "fastest" or an
                             * algorithm number */
    const char *cudnn_algos; /* cudnn: the algorithm of each convolution and
                             * direction, in the form of the trace header's
                             * cudnn_algos (a replay's); NULL: chosen anew */
    int device;             /* cuda, cudnn: the GPU's index (default 0) */
    int no_graph;           /* cuda, cudnn: run every op eagerly, no CUDA graph */
    int streams;            /* cuda, cudnn: CUDA streams that ops with no path
                             * between them may run on at once (0: the default) */
};

/* Run node nd of g: out is its output buffer, in[k] the buffer of input k
 * (whose shape is g->nodes[nd->inputs[k]].shape). */
typedef void (*backend_op_fn)(void *ctx, const struct graph *g, const struct node *nd,
                              backend_buf *out, const backend_buf *const *in,
                              const struct backend_step *st);

struct backend_ops {
    int api_version;
    const char *name;
    /* Create a context; 0, or -1 with dt_error set (e.g. no GPU). */
    int (*init)(void **ctx, const struct backend_options *opt);
    void (*free)(void *ctx);
    /* Storage for `count` elements, zero-filled; NULL when the memory is
     * exhausted (the caller reports it). */
    backend_buf *(*alloc)(void *ctx, size_t count);
    void (*release)(void *ctx, backend_buf *buf);
    /* float32 in and out (upload is exact; download rounds to nearest even) */
    void (*upload)(void *ctx, backend_buf *dst, const float *src, size_t count);
    void (*download)(void *ctx, float *dst, const backend_buf *src, size_t count);
    /* Hash and statistics of a buffer, rounded to float32, into rec (all
     * fields but rec->op). */
    void (*trace)(void *ctx, const backend_buf *buf, size_t count, struct trace_oprec *rec);
    /* Add the backend's details (library versions, device, threads) to cfg. */
    void (*describe)(void *ctx, struct trace_config *cfg);
    /* optional: wait for queued work; NULL when every call is synchronous */
    int (*sync)(void *ctx);
    /* optional: mark the work queued so far as fence `slot` (0 or 1), and
     * wait until the work before a slot's last mark is done. The caller
     * can then queue step t + 1 before it waits for step t's results (its
     * loss). A backend whose calls finish before they return may give
     * empty ones, so that callers run one loop for every backend.
     * fence_wait returns 0, or -1 with dt_error set. */
    void (*fence)(void *ctx, int slot);
    int (*fence_wait)(void *ctx, int slot);
    /* optional: upload queued behind the work already asked for, returning
     * at once. src must stay as it is until the next sync or download (both
     * wait for the copy). NULL: upload is used. */
    void (*upload_async)(void *ctx, backend_buf *dst, const float *src, size_t count);
    /* optional: download queued behind the work already asked for; dst
     * (from host_alloc) holds the values after the next sync. NULL:
     * download is used. */
    void (*download_async)(void *ctx, float *dst, const backend_buf *src, size_t count);
    /* optional: host memory that upload_async copies from and
     * download_async copies to fastest (pinned on a GPU), and its release;
     * NULL, or NULL returned: malloc's. */
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p);
    /* optional (GPU backends): the records of n buffers at once, computed
     * where the buffers live in as few launches as the backend can, copied
     * to rec[k] (every field but op). Called once per step after its last
     * op, while every op's output is still in its buffer; when present the
     * tracer uses it instead of trace() per op. */
    void (*trace_batch)(void *ctx, const backend_buf *const *bufs, const size_t *counts, int n,
                        struct trace_oprec *rec);
    /* optional, with trace_batch: the same records, asked for before the
     * step ends (step_end not called yet), so that a backend that runs the
     * step as a captured graph can compute them inside it. Returns 0 when
     * rec is filled now, 1 when it is filled by trace_batch_wait, which the
     * tracer then calls after step_end. */
    int (*trace_batch_async)(void *ctx, const backend_buf *const *bufs, const size_t *counts,
                             int n, struct trace_oprec *rec);
    void (*trace_batch_wait)(void *ctx, struct trace_oprec *rec, int n);
    /* optional, with trace_batch_async: on = 1 lets the backend compute a
     * step's records while the next step runs (trace_batch_wait for step
     * t may then come after step t + 1 has begun, and always before step
     * t + 1's trace_batch_async); the caller keeps step t's buffers intact
     * through step t + 1 (exec_double). Called before the first step. 0,
     * or -1 when the backend cannot. */
    int (*trace_defer)(void *ctx, int on);
    /* optional: see the whole graph once before the first step (choose
     * algorithms, plan workspaces); 0, or -1 with dt_error set. */
    int (*prepare)(void *ctx, const struct graph *g);
    /* optional: bracket a step's ops (the executor calls them unless faults
     * are injected). `arrangement` is 0 or 1: which of the two ways the
     * parameter and optimizer-state buffers are paired with their nodes
     * (they swap with their updates every step). step_begin returns 1 when
     * the backend has run the step's work itself (a replayed graph): the
     * executor then only calls its hook for each op. */
    int (*step_begin)(void *ctx, uint64_t step, int arrangement);
    void (*step_end)(void *ctx, uint64_t step, int arrangement);
    /* optional: bracket each op node i's kernel (after its inputs' kernels
     * were called, in graph order), so that a backend can run ops with no
     * path between them at once; the bracket ends before the tracer's
     * records are asked for and before step_end. */
    void (*op_enter)(void *ctx, const struct graph *g, int i);
    void (*op_leave)(void *ctx, const struct graph *g, int i);
    /* optional: the name of the library algorithm that runs op node i of
     * the prepared graph g (cuDNN's, for a convolution), or NULL when the
     * backend's own kernel does. *transform is set to 1 when that
     * algorithm does not sum the op's products but multiplies in a
     * transformed domain (FFT, Winograd), 0 otherwise; replay then judges
     * the op by a normwise bound (divtrace-replay(1)). */
    const char *(*op_algorithm)(void *ctx, const struct graph *g, int i, int *transform);
    /* optional: lend the backend's threads, while they wait for its next
     * piece of work, to fn(arg), which makes one piece of other work and
     * returns 1, or returns 0 when there is none. Returns how many threads
     * may call it (0: none; fn is then not lent). fn NULL withdraws it and
     * returns once no thread is inside it. */
    int (*lend_idle)(void *ctx, int (*fn)(void *arg), void *arg);
    backend_op_fn op[OP_COUNT];
};

/* The table of a backend by name, or NULL (with dt_error set listing the
 * backends this build has). */
const struct backend_ops *backend_find(const char *name);
/* Comma-separated names of the backends in this build. */
const char *backend_list(void);

extern const struct backend_ops backend_cpu;
extern const struct backend_ops backend_mpfr; /* reference/backend_mpfr.c */
/* src/gpu/backend_gpu.cu, in builds with CUDA (config.h's HAVE_CUDA) */
extern const struct backend_ops backend_cuda;
extern const struct backend_ops backend_cudnn;

#endif
