/* gpu_lanes.cu: the step's ops on several streams (lanes) for the cuda and
 * cudnn backends: the schedule that gives every op node a lane, the lanes'
 * streams, handles and scratch, the events between them, and the hooks
 * around each op (backend_gpu.cu's table holds them). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

/* Each op writes only its own output buffer, and every op's kernels are
 * fixed by its shapes and the plan (the algorithms, cuBLAS's pedantic math
 * and workspace, identical on every lane), so which lane runs an op, and
 * what runs beside it, changes no bit of any result. */

/* Make lane k the one ops use: its stream, handles and scratch. */
static void gpu_lane_use(struct gpu_ctx *c, int k)
{
    if (k == c->cur)
        return;
    struct gpu_lane *o = &c->lane[c->cur], *l = &c->lane[k];
    o->scratch = c->scratch; /* gpu_scratch may have grown it */
    o->scratch_bytes = c->scratch_bytes;
    c->stream = l->stream;
    c->blas = l->blas;
    c->dnn_handle = l->dnn_handle;
    c->scratch = l->scratch;
    c->scratch_bytes = l->scratch_bytes;
    c->cur = k;
}

/* Everything a lane holds, whichever parts exist (a lane half made, or the
 * context's own after a failed start). */
void gpu_lane_destroy(struct gpu_lane *l)
{
    if (l->stream)
        cudaStreamSynchronize(l->stream);
    if (l->dnn_handle)
        cudnnDestroy(l->dnn_handle);
    if (l->blas)
        cublasDestroy(l->blas);
    if (l->blas_ws)
        cudaFree(l->blas_ws);
    if (l->scratch)
        cudaFree(l->scratch);
    if (l->fuse)
        cudaFree(l->fuse);
    if (l->join)
        cudaEventDestroy(l->join);
    if (l->stream)
        cudaStreamDestroy(l->stream);
    memset(l, 0, sizeof *l);
}

/* cuBLAS as every lane runs it: pedantic float32 math (no TF32), no
 * atomics, a workspace of our own (fixed, for reproducibility, and
 * allocated before any step: cuBLAS must not allocate while a step is
 * captured as a graph). */
void gpu_blas_config(cublasHandle_t h, cudaStream_t s, void *ws)
{
    GPU_BLAS(cublasSetStream(h, s));
    GPU_BLAS(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
    GPU_BLAS(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
    GPU_BLAS(cublasSetWorkspace(h, ws, GPU_BLAS_WORKSPACE));
}

void gpu_lanes_free(struct gpu_ctx *c)
{
    gpu_lane_use(c, 0);
    for (int k = 1; k < c->lanes_made; k++)
        gpu_lane_destroy(&c->lane[k]);
    c->lanes_made = 1;
    if (c->lane[0].join)
        cudaEventDestroy(c->lane[0].join);
    c->lane[0].join = NULL;
    for (int i = 0; i < c->nnodes; i++)
        if (c->ev && c->ev[i])
            cudaEventDestroy(c->ev[i]);
    free(c->ev);
    free(c->lane_of);
    free(c->evneed);
    c->ev = NULL;
    c->lane_of = NULL;
    c->evneed = NULL;
    c->nnodes = 0;
    if (c->fork)
        cudaEventDestroy(c->fork);
    c->fork = NULL;
}

/* Lane k with handles configured as lane 0's; 0, or -1 with dt_error set. */
static int gpu_lane_make(struct gpu_ctx *c, int k)
{
    struct gpu_lane *l = &c->lane[k];
    cudaError_t e;
    if ((e = cudaStreamCreateWithPriority(&l->stream, cudaStreamNonBlocking, c->prio_step)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&l->join, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaMalloc(&l->blas_ws, GPU_BLAS_WORKSPACE)) != cudaSuccess) {
        cudaGetLastError();
        dt_error_set("GPU: cannot make stream %d of %d: %s", k + 1, c->nlanes, cudaGetErrorString(e));
        return DT_ERR;
    }
    if (cublasCreate(&l->blas) != CUBLAS_STATUS_SUCCESS) {
        dt_error_set("GPU: cannot start cuBLAS for stream %d", k + 1);
        return DT_ERR;
    }
    gpu_blas_config(l->blas, l->stream, l->blas_ws);
    if (c->dnn) {
        cudnnStatus_t st = cudnnCreate(&l->dnn_handle);
        if (st != CUDNN_STATUS_SUCCESS) {
            dt_error_set("GPU: cannot start cuDNN for stream %d: %s", k + 1, cudnnGetErrorString(st));
            return DT_ERR;
        }
        GPU_DNN(cudnnSetStream(l->dnn_handle, l->stream));
    }
    return DT_OK;
}

/* An op's weight in the schedule: image ops and products take longer. A
 * data gradient of several pairs weighs as one convolution, as a grouped
 * set's first member does: on cudnn it is one call of the stacked shape. */
static double gpu_op_cost(enum op_type t)
{
    switch (t) {
    case OP_CONV2D:
    case OP_CONV2D_BWD_DATA:
    case OP_CONV2D_BWD_FILTER: return 3.0;
    case OP_MATMUL: return 2.0;
    default: return 1.0;
    }
}

/* The lane of every op node: list scheduling in graph order, each op on
 * the lane where it could start first (on a tie, the lane whose last op
 * is one of its inputs, then the lowest), with the costs above. Then the
 * lanes it needs are made, and an event for every op with a consumer on
 * another lane. 0, or -1 with dt_error set. */
int gpu_schedule(struct gpu_ctx *c, const struct graph *g)
{
    gpu_lanes_free(c);
    if (c->nlanes == 1)
        return DT_OK;
    int n = g->n, used = 1;
    c->nnodes = n;
    c->lane_of = (int *)dt_calloc((size_t)n, sizeof *c->lane_of);
    c->evneed = (unsigned char *)dt_calloc((size_t)n, 1);
    c->ev = (cudaEvent_t *)dt_calloc((size_t)n, sizeof *c->ev);
    double *fin = (double *)dt_calloc((size_t)n, sizeof *fin), lfree[GPU_MAX_LANES] = {0};
    int tail[GPU_MAX_LANES];
    for (int k = 0; k < GPU_MAX_LANES; k++)
        tail[k] = -1;
    for (int i = 0; i < n; i++) {
        const struct node *nd = &g->nodes[i];
        if (nd->type == OP_INPUT || nd->type == OP_PARAM || nd->type == OP_STATE) {
            c->lane_of[i] = -1;
            continue;
        }
        /* a grouped convolution's members run where the first runs them all */
        const int *mem = NULL;
        int nmem = gpu_dnn_group_of(c, i, &mem);
        if (nmem > 0 && mem[0] != i) {
            c->lane_of[i] = c->lane_of[mem[0]];
            fin[i] = fin[mem[0]];
            continue;
        }
        double ready = 0;
        int rd[GPU_MAX_READS], nr = gpu_dnn_reads(c, g, i, rd);
        for (int q = 0; q < nr; q++)
            if (c->lane_of[rd[q]] >= 0 && fin[rd[q]] > ready)
                ready = fin[rd[q]];
        int best = 0, bchain = 0;
        double bstart = 0;
        for (int k = 0; k < c->nlanes; k++) {
            double start = lfree[k] > ready ? lfree[k] : ready;
            int chain = 0;
            for (int q = 0; q < nd->ninputs; q++)
                chain |= tail[k] >= 0 && nd->inputs[q] == tail[k];
            if (k == 0 || start < bstart || (start == bstart && chain && !bchain)) {
                best = k;
                bstart = start;
                bchain = chain;
            }
        }
        c->lane_of[i] = best;
        fin[i] = bstart + gpu_op_cost(nd->type);
        lfree[best] = fin[i];
        tail[best] = i;
        if (best + 1 > used)
            used = best + 1;
    }
    free(fin);
    for (int i = 0; i < n; i++) {
        int rd[GPU_MAX_READS], nr = c->lane_of[i] >= 0 ? gpu_dnn_reads(c, g, i, rd) : 0;
        for (int q = 0; q < nr; q++)
            if (c->lane_of[rd[q]] >= 0 && c->lane_of[rd[q]] != c->lane_of[i])
                c->evneed[rd[q]] = 1;
    }
    cudaError_t e;
    for (int i = 0; i < n; i++)
        if (c->evneed[i] && (e = cudaEventCreateWithFlags(&c->ev[i], cudaEventDisableTiming)) != cudaSuccess) {
            dt_error_set("GPU: cannot make the step's events: %s", cudaGetErrorString(e));
            return DT_ERR;
        }
    if ((e = cudaEventCreateWithFlags(&c->fork, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->lane[0].join, cudaEventDisableTiming)) != cudaSuccess) {
        dt_error_set("GPU: cannot make the step's events: %s", cudaGetErrorString(e));
        return DT_ERR;
    }
    for (int k = 1; k < used; k++) {
        c->lanes_made = k + 1;
        if (gpu_lane_make(c, k) < 0)
            return DT_ERR;
    }
    return DT_OK;
}

/* Every leaf is hashed from its buffer (a carry fault is a leaf that is
 * not what its update wrote). Between steps a leaf's buffer and its
 * update's swap, so the first update of a step writes the buffer that held
 * the last step's leaf, which that step's deferred trace may still be
 * reading on the trace stream: a captured step waits for it there, and
 * only there, so the trace still overlaps the step's forward and backward
 * ops. The wait is on the event the other arrangement's trace records
 * (external: recorded outside the capture, at each launch of that trace). */
static void gpu_wait_last_trace(struct gpu_ctx *c)
{
    cudaEvent_t ev = c->tdone[c->capturing ^ 1];
    if (!ev)
        return;
    if (c->forked)
        for (int k = 0; k < c->lanes_made; k++)
            GPU_CHECK(cudaStreamWaitEvent(c->lane[k].stream, ev, cudaEventWaitExternal));
    else
        GPU_CHECK(cudaStreamWaitEvent(c->stream, ev, cudaEventWaitExternal));
}

/* Before op i of a bracketed step: fork the lanes at the step's first op,
 * wait for the inputs made elsewhere, switch to i's lane. */
void gpu_op_enter(void *ctx, const struct graph *g, int i)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    c->enters++;
    c->entered = i;
    if (i == c->first_write && c->capturing >= 0 && c->defer)
        gpu_wait_last_trace(c);
    if (!c->in_step || c->lanes_made == 1 || !c->lane_of)
        return;
    if (!c->forked) {
        GPU_CHECK(cudaEventRecord(c->fork, c->lane[0].stream));
        for (int k = 1; k < c->lanes_made; k++)
            GPU_CHECK(cudaStreamWaitEvent(c->lane[k].stream, c->fork, 0));
        c->forked = 1;
    }
    int k = c->lane_of[i];
    int rd[GPU_MAX_READS], nr = gpu_dnn_reads(c, g, i, rd);
    for (int q = 0; q < nr; q++)
        if (c->lane_of[rd[q]] >= 0 && c->lane_of[rd[q]] != k)
            GPU_CHECK(cudaStreamWaitEvent(c->lane[k].stream, c->ev[rd[q]], 0));
    gpu_lane_use(c, k);
}

void gpu_op_leave(void *ctx, const struct graph *g, int i)
{
    (void)g;
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    c->entered = -1;
    if (!c->in_step || c->lanes_made == 1 || !c->lane_of)
        return;
    if (c->evneed[i])
        GPU_CHECK(cudaEventRecord(c->ev[i], c->stream));
    gpu_lane_use(c, 0);
}

/* A host read or write of a buffer in the middle of a step (a hook that
 * downloads each op's output as it is made, as replay's does): the op may
 * still be running on another lane, so wait for all of them. */
void gpu_lanes_settle(struct gpu_ctx *c)
{
    if (c->in_step && c->forked)
        for (int k = 1; k < c->lanes_made; k++)
            GPU_CHECK(cudaStreamSynchronize(c->lane[k].stream));
}

/* Lane 0 waits for every other lane's work of the step. */
void gpu_lanes_join(struct gpu_ctx *c)
{
    gpu_lane_use(c, 0);
    if (!c->forked)
        return;
    for (int k = 1; k < c->lanes_made; k++) {
        GPU_CHECK(cudaEventRecord(c->lane[k].join, c->lane[k].stream));
        GPU_CHECK(cudaStreamWaitEvent(c->lane[0].stream, c->lane[k].join, 0));
    }
    c->forked = 0;
}
