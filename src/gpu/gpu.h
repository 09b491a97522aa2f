/* gpu.h: what the .cu files of the GPU backends (cuda, cudnn) share: the
 * context, error checks and the entry points of each file. C++ (CUDA) only;
 * the C side sees backend.h alone. Every kernel runs on ctx->stream, so the
 * op order of the graph is the execution order on the device. */
#ifndef DT_GPU_H
#define DT_GPU_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

extern "C" {
#include "backend.h"
#include "util.h"
}

struct gpu_trace;    /* gpu_trace.cu; its kernels: gpu_trace_kern.cuh */
struct gpu_dnn_plan; /* gpu_dnn.cu */

enum gpu_algo_mode { GPU_ALGO_DETERMINISTIC, GPU_ALGO_DETERMINISTIC_FAST, GPU_ALGO_FASTEST, GPU_ALGO_NUMBER };

#define GPU_MAX_ADAM 4
#define GPU_BLAS_WORKSPACE ((size_t)32 << 20) /* cuBLAS's recommendation for Hopper */
/* A CUDA stream with the handles and scratch of its own that ops running
 * on it use (lane 0 is the context's own stream). */
#define GPU_MAX_LANES 8
#define GPU_DEFAULT_LANES 4
struct gpu_lane {
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;
    cudnnHandle_t dnn_handle;
    void *scratch;
    size_t scratch_bytes;
    cudaEvent_t join;             /* recorded on this lane when the step's ops are done */
    void *fuse;                   /* cudnn: stacked data of grouped convolutions */
    size_t fuse_bytes;
};

struct gpu_ctx {
    int device;
    int atomic;                   /* --reduce atomic */
    int dnn;                      /* the cudnn backend (else cuda) */
    enum gpu_algo_mode algo_mode; /* cudnn: --cudnn-algo */
    int algo_number;
    char *algos;                  /* cudnn: the algorithms to use (backend_options'
                                   * cudnn_algos), or NULL */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;                /* cuBLAS workspace, GPU_BLAS_WORKSPACE bytes */
    cudnnHandle_t dnn_handle;     /* cudnn backend only */
    void *scratch;                /* device scratch (im2col, cuDNN workspace) */
    size_t scratch_bytes;
    char device_name[256];
    int sm_count;
    struct gpu_trace *trace;
    struct gpu_dnn_plan *plan;
    /* Adam's bias corrections c1 = 1 - b1^t, c2 = 1 - b2^t for each (b1, b2)
     * of the graph, in device memory, set at the start of every step */
    int nadam;
    float adam_b[GPU_MAX_ADAM][2];
    float *d_adam;                /* 2 * GPU_MAX_ADAM floats */
    uint64_t adam_step;           /* the step d_adam holds, or UINT64_MAX */
    /* CUDA graphs: the whole step captured once for each arrangement of
     * the parameter buffers (they swap with their updates every step) */
    int graphs;                   /* enabled */
    cudaGraphExec_t graph[2];
    int capturing;                /* arrangement being captured, or -1 */
    int first_write;              /* first op that writes a buffer last step's leaf was in, or -1 */
    uint64_t eager_steps;         /* steps run without a graph so far */
    int replaying;                /* arrangement whose graph runs this step, or -1 */
    /* the trace records inside the graphs: per arrangement a tracer of its
     * own (its buffers are baked into the graph) and the buffers it was
     * captured with; tpending: the arrangement whose records are due */
    struct gpu_trace *gtrace[2];
    int tn[2];
    const float **tbufs[2];
    size_t *tcounts[2];
    int tpending;
    /* deferred records (trace_defer): a captured step's tracing is a graph
     * of its own (tgraph, per arrangement) on tstream, launched behind the
     * step's graph and run while the next step runs (its kernels capped by
     * gpu_trace_set_caps, if asked); the stream waits for it (tdone) before
     * the step after next reuses the arrangement's buffers */
    int defer;
    int tlaunch;                  /* this step's trace graph is to be launched at step_end */
    int tlaunched[2];             /* tgraph[a] runs; the stream has not waited for it yet */
    cudaStream_t tstream;
    /* the priorities of the step's streams and of tstream: the step's
     * kernels take free SMs before the trace's (DIVTRACE_STREAM_PRIORITY=
     * equal: both the default, for measurements) */
    int prio_step, prio_trace;
    /* tstream belongs to a green context of trace_sms SMs (tgreen, a
     * CUgreenCtx): half of them by default, DIVTRACE_TRACE_SMS=K; NULL:
     * none (=all, or the driver cannot), the stream may use every SM */
    void *tgreen;
    int trace_sms;
    cudaGraphExec_t tgraph[2];
    cudaEvent_t stepdone, tdone[2];
    cudaEvent_t fence[2];         /* backend fence slots (made at the first mark) */
    /* streams (--streams): the ops of a step are spread over nlanes lanes
     * by a schedule made once per graph (lane_of: the lane of each op
     * node, -1 for leaves); an op waits for the events of its inputs made
     * on other lanes (evneed: some consumer is elsewhere). c->stream,
     * blas, dnn_handle and scratch are those of lane `cur` while an op runs
     * and lane 0's otherwise; a bracketed step forks the lanes from lane 0
     * at its first op and joins them before tracing or step_end. */
    int nlanes;                   /* asked for */
    int lanes_made;               /* lanes 1 .. lanes_made-1 exist */
    struct gpu_lane lane[GPU_MAX_LANES];
    int cur;
    int in_step, forked;
    int *lane_of;
    unsigned char *evneed;
    cudaEvent_t *ev;              /* per node (where evneed) */
    int nnodes;
    cudaEvent_t fork;
    /* op_enter's count of the ops entered, and the op inside its bracket
     * (-1 outside one): how a grouped convolution's member knows that an
     * earlier member computed it in this pass (gpu_dnn_fuse.cu) */
    uint64_t enters;
    int entered;
#ifdef DT_PROFILE_STEP
    /* DT_PROFILE_SKIP_ELEM (a measurement build): the outputs of the own
     * elementwise and copying kernels of the step being captured, which
     * its trace then hashes as empty: what hashing them inside those
     * kernels could save at most (not the optimizer's, whose outputs
     * the carry check compares with the leaves it hashes) */
    const void **prof_skip;
    int prof_nskip, prof_cap;
#endif
};

/* A failed CUDA, cuBLAS or cuDNN call in a kernel wrapper cannot be handed
 * back through the op table: it is a fault of the program or the device,
 * reported with its place and the library's message, and the process ends. */
#define GPU_CHECK(call)                                                                     \
    do {                                                                                    \
        cudaError_t gpu_e_ = (call);                                                        \
        DT_ASSERT(gpu_e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(gpu_e_));       \
    } while (0)
#define GPU_BLAS(call)                                                                      \
    do {                                                                                    \
        cublasStatus_t gpu_s_ = (call);                                                     \
        DT_ASSERT(gpu_s_ == CUBLAS_STATUS_SUCCESS, "%s: cuBLAS status %d", #call, (int)gpu_s_); \
    } while (0)
#define GPU_DNN(call)                                                                       \
    do {                                                                                    \
        cudnnStatus_t gpu_s_ = (call);                                                      \
        DT_ASSERT(gpu_s_ == CUDNN_STATUS_SUCCESS, "%s: %s", #call, cudnnGetErrorString(gpu_s_)); \
    } while (0)
/* after a kernel launch */
#define GPU_LAUNCHED() GPU_CHECK(cudaGetLastError())

/* Device scratch of at least `bytes` (grown on demand, kept; synchronous
 * with the stream, so a kernel still using the old buffer has finished). */
void *gpu_scratch(struct gpu_ctx *c, size_t bytes);
/* The current lane's buffer for grouped convolutions' stacked data, of at
 * least `bytes` (grown on demand like gpu_scratch; the first, eager step
 * sizes it before any step is captured). */
void *gpu_fuse_scratch(struct gpu_ctx *c, size_t bytes);

/* The device address of the (c1, c2) pair of Adam with these betas for
 * `step`, computed as the cpu does (in double, rounded to float once) and
 * uploaded when the step begins (backend_gpu.cu). */
const float *gpu_adam_corrections(struct gpu_ctx *c, float b1, float b2, uint64_t step);

/* The op kernels: gpu_ops.cu and gpu_ops_image.cu (every op type, own
 * kernels and cuBLAS) and gpu_dnn.cu (cuDNN's convolutions, pooling and
 * activations). */
#define GPU_OP(name)                                                                        \
    void name(void *ctx, const struct graph *g, const struct node *nd, backend_buf *out,    \
              const backend_buf *const *in, const struct backend_step *st)
extern const backend_op_fn gpu_ops[OP_COUNT];     /* gpu_ops.cu: the cuda backend's table */
extern const backend_op_fn gpu_dnn_ops[OP_COUNT]; /* gpu_dnn.cu: entries cuDNN replaces, NULL elsewhere */
/* cudnn backend: descriptors and algorithms for every convolution of g;
 * 0, or -1 with dt_error set. */
int gpu_dnn_prepare(struct gpu_ctx *c, const struct graph *g);
void gpu_dnn_free(struct gpu_ctx *c);
/* The algorithms chosen, for the trace header ("fwd 4x19x64x64 k1 3x3: IMPLICIT_GEMM; ..."). */
void gpu_dnn_describe(struct gpu_ctx *c, struct trace_config *cfg);

/* The cuDNN algorithm of convolution node i of the prepared graph, or NULL
 * (not a convolution, or the cuda backend); *transform: whether it is an
 * FFT or Winograd algorithm (backend.h's op_algorithm). */
const char *gpu_dnn_op_algorithm(struct gpu_ctx *c, const struct graph *g, int i, int *transform);
/* The members of node i's group of convolutions run as one, the first of
 * which computes them all (gpu_dnn_fuse.cu): how many (0 when i is in no
 * group, or on the cuda backend), with *mem set to their node indices. */
int gpu_dnn_group_of(const struct gpu_ctx *c, int i, const int **mem);
/* The nodes op node i reads, into out (GPU_MAX_READS entries): its inputs,
 * or for a member of such a group the inputs of every member (the one
 * that runs computes them all); how many. */
#define GPU_MAX_READS (8 * OP_MAX_INPUTS)
int gpu_dnn_reads(const struct gpu_ctx *c, const struct graph *g, int i, int *out);

#ifdef DT_PROFILE_STEP
void gpu_prof_elem(struct gpu_ctx *c, const struct node *nd, const void *out);
#define GPU_PROF_ELEM(c, nd, out) gpu_prof_elem(c, nd, out)
#else
#define GPU_PROF_ELEM(c, nd, out) (void)0
#endif

/* gpu_lanes.cu: the step's ops on several streams. gpu_schedule: the lane
 * of every op node of g, the lanes it needs made, an event for every op
 * with a consumer on another lane (0, or -1 with dt_error set);
 * gpu_lanes_free undoes it. gpu_op_enter / gpu_op_leave: backend.h's hooks
 * around op i (fork at the step's first op, wait for inputs made on other
 * lanes, switch lanes; record i's event). gpu_lanes_settle: wait for every
 * lane (a host access in mid-step); gpu_lanes_join: lane 0 waits for the
 * others' work of the step. gpu_blas_config: cuBLAS as every lane runs it;
 * gpu_lane_destroy: whatever parts of a lane exist. */
int gpu_schedule(struct gpu_ctx *c, const struct graph *g);
void gpu_lanes_free(struct gpu_ctx *c);
void gpu_op_enter(void *ctx, const struct graph *g, int i);
void gpu_op_leave(void *ctx, const struct graph *g, int i);
void gpu_lanes_settle(struct gpu_ctx *c);
void gpu_lanes_join(struct gpu_ctx *c);
void gpu_blas_config(cublasHandle_t h, cudaStream_t s, void *ws);
void gpu_lane_destroy(struct gpu_lane *l);

/* gpu_green.cu: c->tstream made in a green context of at least sms SMs
 * (c->tgreen, c->trace_sms set): 0; -1, with one line on stderr, when the
 * driver or device cannot (the caller makes an ordinary stream). */
int gpu_green_stream(struct gpu_ctx *c, unsigned sms, int quiet);
/* The green context, if any (after its stream is destroyed). */
void gpu_green_free(struct gpu_ctx *c);

/* gpu_trace.cu, gpu_trace_one.cu: the tensor hash (hash.h's tree of XXH3-64
 * leaves) and statistics (stats.h) of many device buffers at once. */
struct gpu_trace *gpu_trace_new(cudaStream_t stream);
void gpu_trace_free(struct gpu_trace *t);
void gpu_trace_batch(struct gpu_trace *t, const float *const *bufs, const size_t *counts, int n,
                     struct trace_oprec *rec);
/* gpu_trace_batch in two halves, for a step captured as a CUDA graph:
 * enqueue queues the copy of the descriptors in and the kernels on t's
 * stream; the kernels write the records into t's pinned host buffer (with
 * `fixed`, for a capture, it allocates nothing, returns -1 when t's
 * buffers are too small, and leaves the descriptors' copy to
 * gpu_trace_upload); collect waits for the stream and copies the n
 * records out of t's pinned buffer (every field but op). */
int gpu_trace_enqueue(struct gpu_trace *t, const float *const *bufs, const size_t *counts, int n,
                      int fixed);
void gpu_trace_collect(struct gpu_trace *t, struct trace_oprec *rec, int n);
/* collect without the wait: the stream is known to have run the records */
void gpu_trace_records(const struct gpu_trace *t, struct trace_oprec *rec, int n);
/* After the capture of an enqueue made with `fixed`: its descriptors, to
 * the device once (a replay does not copy them again). */
void gpu_trace_upload(struct gpu_trace *t);
/* Make t's buffers at least as large as like's (before a capture). */
void gpu_trace_reserve_as(struct gpu_trace *t, const struct gpu_trace *like);
/* The stream t's work goes to from now on. */
void gpu_trace_set_stream(struct gpu_trace *t, cudaStream_t s);
/* At most leaf_blocks and root_blocks blocks of t's two kernels (0: as many
 * as there is work for): a trace that runs beside a step leaves most of
 * each SM to the step's kernels. The records do not change. */
void gpu_trace_set_caps(struct gpu_trace *t, unsigned leaf_blocks, unsigned root_blocks);
/* One buffer's record queued on stream s, nothing waited for (libdivtrace):
 * scratch of gpu_trace_one_bytes(count) bytes (256-aligned, 0: too large),
 * untouched until s has run it; the record lands in *drec (device or mapped
 * pinned memory),
 * the same as gpu_trace_batch's for that buffer. *ctr: a device counter
 * that is 0, and is 0 again once s has run the record (the record's blocks
 * count themselves in it); not shared with a record queued on another
 * stream. Returns the launch error. */
size_t gpu_trace_one_bytes(size_t count);
cudaError_t gpu_trace_one(void *scratch, const float *x, size_t count, struct trace_oprec *drec,
                          unsigned *ctr, cudaStream_t s);
/* n buffers' records in one batch queued on stream s, nothing waited for
 * (libdivtrace's deferred records): buffer k's record lands in
 * drec[out[k]] (device or mapped pinned memory), the same as
 * gpu_trace_batch's. scratch: dev_bytes of device memory (256-aligned),
 * staging: host_bytes of pinned memory (16-aligned), both untouched until
 * s has run the batch; gpu_trace_many_bytes gives the sizes (-1: too many
 * tiles). ctr: device counters by record index, as gpu_trace_one's (0, and
 * 0 again once s has run the batch); given, a batch of at most 128 buffers
 * of at most 480 KiB each is one launch with no copy, which writes each
 * record's first word last (after a system-wide fence: *ordered is set to
 * 1), so that a host reading mapped records sees a record whole once its
 * first word changed. loss_src (or NULL): a float copied to loss_dst
 * (pinned or mapped) in the batch's stream order. Returns the first CUDA
 * error of the copies or the launches. */
int gpu_trace_many_bytes(const size_t *counts, int n, size_t *dev_bytes, size_t *host_bytes);
cudaError_t gpu_trace_many(void *scratch, void *staging, const float *const *bufs, const size_t *counts,
                           const uint32_t *out, int n, struct trace_oprec *drec, unsigned *ctr,
                           const float *loss_src, float *loss_dst, int *ordered, cudaStream_t s);

#endif
