/* backend_gpu.cu: the two GPU backends' tables and what they share:
 * context, storage, transfers, tracing and the description in the trace
 * header. `cuda` runs every op with its own kernels and cuBLAS; `cudnn` is
 * the same with cuDNN's convolutions, pooling and activations in place of
 * those kernels (gpu_dnn.cu). cuBLAS runs in its pedantic math mode (float32
 * arithmetic, no TF32 or other reduced-precision tensor-core paths), on one
 * stream with a fixed workspace: the configuration cuBLAS documents as
 * bitwise reproducible run to run on one GPU model. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"


extern "C" {
#include "config.h"
}

void *gpu_scratch(struct gpu_ctx *c, size_t bytes)
{
    if (bytes <= c->scratch_bytes)
        return c->scratch;
    GPU_CHECK(cudaStreamSynchronize(c->stream));
    if (c->scratch)
        GPU_CHECK(cudaFree(c->scratch));
    size_t want = bytes + bytes / 4;
    GPU_CHECK(cudaMalloc(&c->scratch, want));
    c->scratch_bytes = want;
    return c->scratch;
}

/* ---- Adam's per-step bias corrections ---- */

static int gpu_adam_index(struct gpu_ctx *c, float b1, float b2)
{
    for (int k = 0; k < c->nadam; k++)
        if (c->adam_b[k][0] == b1 && c->adam_b[k][1] == b2)
            return k;
    DT_ASSERT(c->nadam < GPU_MAX_ADAM && c->capturing < 0,
              "more than %d Adam configurations, or a new one while a step is captured", GPU_MAX_ADAM);
    c->adam_b[c->nadam][0] = b1;
    c->adam_b[c->nadam][1] = b2;
    c->adam_step = UINT64_MAX;
    return c->nadam++;
}

/* d_adam <- the corrections of `step` for every known (b1, b2), computed as
 * the cpu does (in double, rounded to float once) */
static void gpu_adam_set(struct gpu_ctx *c, uint64_t step)
{
    if (c->nadam == 0 || c->adam_step == step)
        return;
    static __thread float host[2 * GPU_MAX_ADAM];
    double t = (double)step + 1.0;
    for (int k = 0; k < c->nadam; k++) {
        host[2 * k] = (float)(1.0 - pow(c->adam_b[k][0], t));
        host[2 * k + 1] = (float)(1.0 - pow(c->adam_b[k][1], t));
    }
    /* staged from pageable memory before the call returns; ordered on the stream */
    GPU_CHECK(cudaMemcpyAsync(c->d_adam, host, 2 * (size_t)c->nadam * sizeof(float),
                              cudaMemcpyHostToDevice, c->stream));
    c->adam_step = step;
}

const float *gpu_adam_corrections(struct gpu_ctx *c, float b1, float b2, uint64_t step)
{
    int k = gpu_adam_index(c, b1, b2);
    if (c->capturing < 0)
        gpu_adam_set(c, step);
    return c->d_adam + 2 * k;
}

static int gpu_fail(struct gpu_ctx *c, const char *what, const char *why)
{
    dt_error_set("--backend %s: %s: %s", c->dnn ? "cudnn" : "cuda", what, why);
    return DT_ERR;
}

static void gpu_free(void *ctx);


static int gpu_init_common(void **ctxp, const struct backend_options *opt, int dnn)
{
    struct gpu_ctx *c = (struct gpu_ctx *)dt_calloc(1, sizeof *c);
    c->dnn = dnn;
    *ctxp = NULL;
    if (opt->reduce && strcmp(opt->reduce, "tree") != 0 && strcmp(opt->reduce, "atomic") != 0) {
        dt_error_set("--reduce '%s': expected tree or atomic", opt->reduce);
        free(c);
        return DT_ERR;
    }
    c->atomic = opt->reduce && strcmp(opt->reduce, "atomic") == 0;
    c->nlanes = opt->streams ? opt->streams : GPU_DEFAULT_LANES;
    if (c->nlanes < 1 || c->nlanes > GPU_MAX_LANES) {
        dt_error_set("--streams %d: expected 1 to %d", opt->streams, GPU_MAX_LANES);
        free(c);
        return DT_ERR;
    }
    const char *algo = opt->cudnn_algo ? opt->cudnn_algo : "deterministic";
    if (strcmp(algo, "deterministic") == 0) {
        c->algo_mode = GPU_ALGO_DETERMINISTIC;
    } else if (strcmp(algo, "deterministic-fast") == 0) {
        c->algo_mode = GPU_ALGO_DETERMINISTIC_FAST;
    } else if (strcmp(algo, "fastest") == 0) {
        c->algo_mode = GPU_ALGO_FASTEST;
    } else {
        char *end;
        long v = strtol(algo, &end, 10);
        if (*algo == 0 || *end || v < 0 || v > 64) {
            dt_error_set("--cudnn-algo '%s': expected deterministic, deterministic-fast, fastest or an "
                         "algorithm number", algo);
            free(c);
            return DT_ERR;
        }
        c->algo_mode = GPU_ALGO_NUMBER;
        c->algo_number = (int)v;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        char why[256];
        snprintf(why, sizeof why, "no usable CUDA GPU on this machine (%s)",
                 e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || n == 0
                     ? "no GPU or no NVIDIA driver" : cudaGetErrorString(e));
        gpu_fail(c, "cannot run", why);
        free(c);
        return DT_ERR;
    }
    c->device = opt->device;
    if (c->device < 0 || c->device >= n) {
        dt_error_set("--device %d: this machine has %d GPU%s", c->device, n, n == 1 ? "" : "s");
        free(c);
        return DT_ERR;
    }
    cudaDeviceProp prop;
    int least = 0, greatest = 0;
    const char *prio = getenv("DIVTRACE_STREAM_PRIORITY");
    if ((e = cudaSetDevice(c->device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, c->device)) != cudaSuccess ||
        (e = cudaDeviceGetStreamPriorityRange(&least, &greatest)) != cudaSuccess ||
        (c->prio_step = prio && strcmp(prio, "equal") == 0 ? least : greatest, c->prio_trace = least,
         e = cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, c->prio_step)) != cudaSuccess) {
        gpu_fail(c, "cannot start the GPU", cudaGetErrorString(e));
        free(c);
        return DT_ERR;
    }
    snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
    c->sm_count = prop.multiProcessorCount;
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
        gpu_fail(c, "cannot start cuBLAS", "cublasCreate failed");
        gpu_free(c);
        return DT_ERR;
    }
    GPU_CHECK(cudaMalloc(&c->blas_ws, GPU_BLAS_WORKSPACE));
    gpu_blas_config(c->blas, c->stream, c->blas_ws);
    if (dnn) {
        cudnnStatus_t s = cudnnCreate(&c->dnn_handle);
        if (s != CUDNN_STATUS_SUCCESS) {
            gpu_fail(c, "cannot start cuDNN", cudnnGetErrorString(s));
            gpu_free(c);
            return DT_ERR;
        }
        GPU_DNN(cudnnSetStream(c->dnn_handle, c->stream));
    }
    c->lane[0].stream = c->stream;
    c->lane[0].blas = c->blas;
    c->lane[0].blas_ws = c->blas_ws;
    c->lane[0].dnn_handle = c->dnn_handle;
    c->lanes_made = 1;
    c->trace = gpu_trace_new(c->stream);
    for (int k = 0; k < 2; k++)
        c->gtrace[k] = gpu_trace_new(c->stream);
    c->replaying = -1;
    c->tpending = -1;
    GPU_CHECK(cudaMalloc(&c->d_adam, 2 * GPU_MAX_ADAM * sizeof(float)));
    c->adam_step = UINT64_MAX;
    c->capturing = -1;
    c->first_write = -1;
    c->entered = -1;
    c->graphs = !opt->no_graph;
    c->algos = opt->cudnn_algos ? dt_strdup(opt->cudnn_algos) : NULL;
    *ctxp = c;
    return DT_OK;
}

static int gpu_init_cuda(void **ctx, const struct backend_options *opt) { return gpu_init_common(ctx, opt, 0); }
static int gpu_init_cudnn(void **ctx, const struct backend_options *opt) { return gpu_init_common(ctx, opt, 1); }

static void gpu_free(void *ctx)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    if (!c)
        return;
    free(c->algos);
    gpu_lanes_free(c);
    cudaStreamSynchronize(c->stream);
    if (c->tstream)
        cudaStreamSynchronize(c->tstream);
    for (int k = 0; k < 2; k++) {
        if (c->graph[k])
            cudaGraphExecDestroy(c->graph[k]);
        if (c->tgraph[k])
            cudaGraphExecDestroy(c->tgraph[k]);
        if (c->tdone[k])
            cudaEventDestroy(c->tdone[k]);
    }
    if (c->stepdone)
        cudaEventDestroy(c->stepdone);
    for (int k = 0; k < 2; k++)
        if (c->fence[k])
            cudaEventDestroy(c->fence[k]);
    if (c->d_adam)
        cudaFree(c->d_adam);
    if (c->trace)
        gpu_trace_free(c->trace);
    for (int k = 0; k < 2; k++) {
        if (c->gtrace[k])
            gpu_trace_free(c->gtrace[k]);
        free(c->tbufs[k]);
        free(c->tcounts[k]);
    }
    if (c->plan)
        gpu_dnn_free(c);
    if (c->tstream)
        cudaStreamDestroy(c->tstream);
    gpu_green_free(c);
    /* the context's own lane (set up or not when a start failed) */
    struct gpu_lane own = {c->stream, c->blas, c->blas_ws, c->dnn_handle, c->scratch, c->scratch_bytes,
                           NULL, c->lane[0].fuse, c->lane[0].fuse_bytes};
    gpu_lane_destroy(&own);
#ifdef DT_PROFILE_STEP
    free(c->prof_skip);
#endif
    free(c);
}

static backend_buf *gpu_alloc(void *ctx, size_t count)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    void *p = NULL;
    size_t bytes = (count ? count : 1) * sizeof(float);
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* not sticky: clear it; the executor reports it */
        return NULL;
    }
    GPU_CHECK(e);
    GPU_CHECK(cudaMemsetAsync(p, 0, bytes, c->stream));
    return p;
}

static void gpu_release(void *ctx, backend_buf *buf)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    GPU_CHECK(cudaStreamSynchronize(c->stream));
    GPU_CHECK(cudaFree(buf));
}

static void gpu_upload(void *ctx, backend_buf *dst, const float *src, size_t count)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    gpu_lanes_settle(c);
    GPU_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyHostToDevice, c->stream));
    GPU_CHECK(cudaStreamSynchronize(c->stream));
}

/* Queued behind the step's work; a pinned src (gpu_host_alloc) is read by
 * the copy engine when the stream gets there, a pageable one is staged by
 * the driver before the call returns. Either way the caller keeps src
 * unchanged until its next sync or download. */
static void gpu_upload_async(void *ctx, backend_buf *dst, const float *src, size_t count)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    GPU_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyHostToDevice, c->stream));
}

/* Queued; dst (pinned) holds the values once the stream gets past it. */
static void gpu_download_async(void *ctx, float *dst, const backend_buf *src, size_t count)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    GPU_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
}

/* Pinned host memory, or NULL (the caller falls back to malloc). */
static void *gpu_host_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void gpu_host_free(void *ctx, void *p)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    GPU_CHECK(cudaStreamSynchronize(c->stream)); /* no queued copy still reads it */
    GPU_CHECK(cudaFreeHost(p));
}

static void gpu_download(void *ctx, float *dst, const backend_buf *src, size_t count)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    gpu_lanes_settle(c);
    GPU_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
    GPU_CHECK(cudaStreamSynchronize(c->stream));
}

static void gpu_trace_one(void *ctx, const backend_buf *buf, size_t count, struct trace_oprec *rec)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    const float *p = (const float *)buf;
    gpu_lanes_settle(c);
    gpu_trace_batch(c->trace, &p, &count, 1, rec);
}

static void gpu_trace_many(void *ctx, const backend_buf *const *bufs, const size_t *counts, int n,
                           struct trace_oprec *rec)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    gpu_lanes_settle(c);
    gpu_trace_batch(c->trace, (const float *const *)bufs, counts, n, rec);
}

/* The step's records before step_end. While a step is captured, the
 * tracing work is captured with it (into the arrangement's own tracer),
 * so that each replay of the graph computes the records too; a replayed
 * step asking for the same buffers then only waits for them. Anything
 * else (an eager step, or a replay asked for other buffers, as when a
 * leaf was changed between steps) is traced at once, after the step's
 * work on the same stream. */
static int gpu_trace_async(void *ctx, const backend_buf *const *bufs, const size_t *counts, int n,
                           struct trace_oprec *rec)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    const float *const *p = (const float *const *)bufs;
    gpu_lanes_join(c);
    if (c->capturing >= 0) {
        int a = c->capturing;
        if (c->defer) {
            c->tlaunch = 1; /* captured into tgraph[a] at step_end */
        } else {
            int rc = gpu_trace_enqueue(c->gtrace[a], p, counts, n, 1);
            DT_ASSERT(rc == 0, "tracing %d buffers inside a captured step: scratch too small", n);
        }
        free(c->tbufs[a]);
        free(c->tcounts[a]);
        c->tbufs[a] = (const float **)dt_calloc((size_t)n, sizeof *c->tbufs[a]);
        c->tcounts[a] = (size_t *)dt_calloc((size_t)n, sizeof *c->tcounts[a]);
        memcpy(c->tbufs[a], p, (size_t)n * sizeof *p);
        memcpy(c->tcounts[a], counts, (size_t)n * sizeof *counts);
        c->tn[a] = n;
        c->tpending = a;
        return 1;
    }
    int a = c->replaying;
    if (a >= 0 && c->tn[a] == n && memcmp(c->tbufs[a], p, (size_t)n * sizeof *p) == 0 &&
        memcmp(c->tcounts[a], counts, (size_t)n * sizeof *counts) == 0) {
        c->tpending = a;
        c->tlaunch = c->defer;
        return 1;
    }
    gpu_trace_batch(c->trace, p, counts, n, rec);
    return 0;
}

static void gpu_trace_wait(void *ctx, struct trace_oprec *rec, int n)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    DT_ASSERT(c->tpending >= 0 && c->tn[c->tpending] == n, "trace records waited for without a request");
    if (c->capturing >= 0 && c->defer)
        /* no waiting while a step is captured: step_begin waited for the
         * trace stream before the capture began */
        gpu_trace_records(c->gtrace[c->tpending], rec, n);
    else
        gpu_trace_collect(c->gtrace[c->tpending], rec, n);
    c->tpending = -1;
}

/* Deferred records need the step as a graph: the trace graph's buffers
 * are the arrangement's, like the step's. DIVTRACE_TRACE_CAPS=L,R caps the
 * trace kernels' blocks (gpu_trace_set_caps), for measurements. Default:
 * no cap. On the H200, PredNet 1,16,32,64 at batch 1 (cudnn, 3 alternating
 * rounds of bench_gpu_step) traced at level op took +0.3% with no cap,
 * +1.6% with 2 leaf blocks an SM and a root block per 8 SMs, +1.8% with 8
 * and 33, +4.0% with 66 and 4: the trace is done sooner than the next
 * step's kernels need the SMs back. */
static int gpu_trace_defer(void *ctx, int on)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    if (!on) {
        /* before any step is captured: the tracing goes back into the step's graphs */
        if (c->tstream)
            GPU_CHECK(cudaStreamSynchronize(c->tstream));
        for (int k = 0; k < 2; k++) {
            gpu_trace_set_stream(c->gtrace[k], c->stream);
            gpu_trace_set_caps(c->gtrace[k], 0, 0);
        }
        c->defer = 0;
        return 0;
    }
    if (!c->graphs)
        return -1;
    if (!c->tstream) {
        /* With the next step queued before the host reads a step's loss
         * (run_overlap), the trace runs beside that step's kernels the
         * whole time. On the H200, PredNet at 64x64 (0.5 to 1.5 GB of op
         * outputs a step) and the KITTI-sized one (11 GB) lost least with
         * the trace kept to half of the SMs (tests/bench/RESULTS.md).
         * DIVTRACE_TRACE_SMS=K: K SMs; =all: every SM, in no green context. */
        const char *sms = getenv("DIVTRACE_TRACE_SMS");
        char *end = NULL;
        int given = sms && *sms;
        unsigned long k = (unsigned long)c->sm_count / 2;
        if (given && strcmp(sms, "all") == 0) {
            k = 0;
        } else if (given) {
            k = strtoul(sms, &end, 10);
            if (*end || k == 0 || k > (unsigned long)c->sm_count) {
                fprintf(stderr, "DIVTRACE_TRACE_SMS='%s': expected 1 to %d SMs, or all; the trace stream uses "
                        "every SM\n", sms, c->sm_count);
                k = 0;
            }
        }
        if (!(k && gpu_green_stream(c, (unsigned)k, !given) == 0))
            GPU_CHECK(cudaStreamCreateWithPriority(&c->tstream, cudaStreamNonBlocking, c->prio_trace));
        GPU_CHECK(cudaEventCreateWithFlags(&c->stepdone, cudaEventDisableTiming));
        for (int k = 0; k < 2; k++)
            GPU_CHECK(cudaEventCreateWithFlags(&c->tdone[k], cudaEventDisableTiming));
    }
    unsigned leaf = 0, root = 0;
    const char *caps = getenv("DIVTRACE_TRACE_CAPS");
    if (caps && *caps)
        sscanf(caps, "%u,%u", &leaf, &root);
    for (int k = 0; k < 2; k++) {
        gpu_trace_set_stream(c->gtrace[k], c->tstream);
        gpu_trace_set_caps(c->gtrace[k], leaf, root);
    }
    c->defer = 1;
    return 0;
}

static void gpu_describe(void *ctx, struct trace_config *cfg)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    int rt = 0, drv = 0, blas = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    cublasGetVersion(c->blas, &blas);
    trace_config_setf(cfg, "device_index", "%d", c->device);
    trace_config_setf(cfg, "device", "%s, %d SMs", c->device_name, c->sm_count);
    trace_config_setf(cfg, "cuda_runtime", "%d.%d", rt / 1000, rt % 1000 / 10);
    trace_config_setf(cfg, "cuda_driver", "%d.%d", drv / 1000, drv % 1000 / 10);
    trace_config_setf(cfg, "cublas", "%d (pedantic float32 math, no TF32; atomics not allowed)", blas);
    trace_config_set(cfg, "reduce", c->atomic ? "atomic" : "tree");
    trace_config_set(cfg, "cuda_graph", c->graphs ? "on" : "off");
    if (c->defer && c->tgreen)
        trace_config_setf(cfg, "trace_overlap", "on (a step's records are made while the next step runs, on %d SMs)",
                          c->trace_sms);
    else
        trace_config_set(cfg, "trace_overlap", c->defer ? "on (a step's records are made while the next step runs)"
                                                        : "off");
    trace_config_setf(cfg, "gpu_streams", "%d (%d used by the schedule)", c->nlanes, c->lanes_made);
    if (c->dnn) {
        size_t v = cudnnGetVersion();
        trace_config_setf(cfg, "cudnn", "%zu.%zu.%zu", v / 10000, v % 10000 / 100, v % 100);
        trace_config_set(cfg, "cudnn_algo",
                         c->algo_mode == GPU_ALGO_DETERMINISTIC        ? "deterministic"
                         : c->algo_mode == GPU_ALGO_DETERMINISTIC_FAST ? "deterministic-fast"
                         : c->algo_mode == GPU_ALGO_FASTEST            ? "fastest" : "number");
        if (c->algo_mode == GPU_ALGO_NUMBER)
            trace_config_setf(cfg, "cudnn_algo_number", "%d", c->algo_number);
        gpu_dnn_describe(c, cfg);
    }
}

static int gpu_sync(void *ctx)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        dt_error_set("GPU: %s", cudaGetErrorString(e));
        return DT_ERR;
    }
    return DT_OK;
}

/* A mark behind the work queued on the stream so far: a step's lanes
 * joined the stream at step_end, and its loss's copy was queued after. */
static void gpu_fence(void *ctx, int slot)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    DT_ASSERT(slot == 0 || slot == 1, "fence slot %d", slot);
    if (!c->fence[slot])
        GPU_CHECK(cudaEventCreateWithFlags(&c->fence[slot], cudaEventDisableTiming));
    GPU_CHECK(cudaEventRecord(c->fence[slot], c->stream));
}

static int gpu_fence_wait(void *ctx, int slot)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    DT_ASSERT((slot == 0 || slot == 1) && c->fence[slot], "fence slot %d waited for before its mark", slot);
    cudaError_t e = cudaEventSynchronize(c->fence[slot]);
    if (e != cudaSuccess) {
        dt_error_set("GPU: %s", cudaGetErrorString(e));
        return DT_ERR;
    }
    return DT_OK;
}

static int gpu_prepare(void *ctx, const struct graph *g)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    /* a context may run one graph after another (tests do): the captured
     * steps belong to the last one */
    GPU_CHECK(cudaStreamSynchronize(c->stream));
    if (c->tstream)
        GPU_CHECK(cudaStreamSynchronize(c->tstream));
    for (int k = 0; k < 2; k++) {
        if (c->graph[k]) {
            GPU_CHECK(cudaGraphExecDestroy(c->graph[k]));
            c->graph[k] = NULL;
        }
        if (c->tgraph[k]) {
            GPU_CHECK(cudaGraphExecDestroy(c->tgraph[k]));
            c->tgraph[k] = NULL;
        }
        c->tlaunched[k] = 0;
    }
    c->tlaunch = 0;
    c->eager_steps = 0;
    for (int k = 0; k < 2; k++)
        c->tn[k] = 0; /* the graphs these belonged to are gone */
    c->nadam = 0;
    c->adam_step = UINT64_MAX;
    c->first_write = -1;
    for (int i = 0; i < g->n; i++) {
        int nx = g->nodes[i].next;
        if (nx >= 0 && (c->first_write < 0 || nx < c->first_write))
            c->first_write = nx;
    }
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].type == OP_ADAM_P)
            gpu_adam_index(c, g->nodes[i].p.adam.b1, g->nodes[i].p.adam.b2);
    if (c->dnn && gpu_dnn_prepare(c, g) < 0)
        return DT_ERR;
    return gpu_schedule(c, g);
}

/* ---- the step as a CUDA graph ----
 * The first step runs eagerly: it sizes every scratch buffer, so nothing is
 * allocated while a step is captured. Each later step with an arrangement
 * not captured yet is captured (its kernels are recorded, not run) and then
 * launched; after that, a step of that arrangement is one graph launch. The
 * per-step values (Adam's corrections) live in device memory and are set
 * before the launch. */
static int gpu_step_begin(void *ctx, uint64_t step, int arr)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    gpu_adam_set(c, step);
    c->forked = 0;
    c->in_step = 1;
    if (!c->graphs || c->eager_steps == 0)
        return 0;
    if (c->graph[arr]) {
        GPU_CHECK(cudaGraphLaunch(c->graph[arr], c->stream));
        c->replaying = arr;
        return 1;
    }
    /* nothing may be allocated during the capture: the arrangement's tracer
     * gets the buffers of the one that traced the eager step (every op) */
    gpu_trace_reserve_as(c->gtrace[arr], c->trace);
    if (c->tstream) /* a deferred trace's records are taken during the capture */
        GPU_CHECK(cudaStreamSynchronize(c->tstream));
    GPU_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = arr;
#ifdef DT_PROFILE_STEP
    c->prof_nskip = 0;
#endif
    return 0;
}

#ifdef DT_PROFILE_STEP
void gpu_prof_elem(struct gpu_ctx *c, const struct node *nd, const void *out)
{
    static int on = -1;
    if (on < 0)
        on = getenv("DT_PROFILE_SKIP_ELEM") != NULL;
    enum op_type t = nd->type;
    if (!on || c->capturing < 0 || t == OP_SGD || t == OP_MOMENTUM || t == OP_ADAM_M || t == OP_ADAM_V ||
        t == OP_ADAM_P)
        return;
    if (c->prof_nskip == c->prof_cap) {
        c->prof_cap = c->prof_cap ? 2 * c->prof_cap : 256;
        c->prof_skip = (const void **)dt_realloc(c->prof_skip, (size_t)c->prof_cap * sizeof *c->prof_skip);
    }
    c->prof_skip[c->prof_nskip++] = out;
}

/* The counts the captured step's trace hashes: its own, or with
 * DT_PROFILE_SKIP_ELEM those of the buffers gpu_prof_elem saw as 0 (the
 * bytes left out on stderr, once per arrangement). */
static const size_t *gpu_prof_counts(struct gpu_ctx *c, int arr, size_t **tmp)
{
    *tmp = NULL;
    if (!c->prof_nskip)
        return c->tcounts[arr];
    size_t *k = (size_t *)dt_calloc((size_t)c->tn[arr], sizeof *k);
    double all = 0, left = 0;
    for (int i = 0; i < c->tn[arr]; i++) {
        k[i] = c->tcounts[arr][i];
        all += 4.0 * (double)k[i];
        for (int q = 0; q < c->prof_nskip; q++)
            if (c->prof_skip[q] == (const void *)c->tbufs[arr][i]) {
                left += 4.0 * (double)k[i];
                k[i] = 0;
                break;
            }
    }
    fprintf(stderr, "profile: arrangement %d's trace leaves out %d own elementwise outputs, %.1f of %.1f MB\n",
            arr, c->prof_nskip, left / 1e6, all / 1e6);
    c->prof_nskip = 0;
    *tmp = k;
    return k;
}
#endif

/* Behind the step on the stream: its trace graph on the trace stream
 * (when the step asked for its records), and the stream's wait for the
 * other arrangement's trace, whose buffers the next step overwrites. */
static void gpu_trace_launch(struct gpu_ctx *c, int arr)
{
    if (c->tlaunch) {
        c->tlaunch = 0;
        GPU_CHECK(cudaEventRecord(c->stepdone, c->stream));
        GPU_CHECK(cudaStreamWaitEvent(c->tstream, c->stepdone, 0));
#ifdef DT_PROFILE_STEP
        static int nohash = -1; /* DT_PROFILE_NOHASH: no trace kernels (records left as they were) */
        if (nohash < 0)
            nohash = getenv("DT_PROFILE_NOHASH") != NULL;
        if (!nohash)
#endif
        GPU_CHECK(cudaGraphLaunch(c->tgraph[arr], c->tstream));
        GPU_CHECK(cudaEventRecord(c->tdone[arr], c->tstream));
        c->tlaunched[arr] = 1;
    }
    int o = arr ^ 1;
    if (c->tlaunched[o]) {
        GPU_CHECK(cudaStreamWaitEvent(c->stream, c->tdone[o], 0));
        c->tlaunched[o] = 0;
    }
}

static void gpu_step_end(void *ctx, uint64_t step, int arr)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    gpu_lanes_join(c);
    c->in_step = 0;
    c->replaying = -1;
    if (c->capturing < 0) {
        if (!c->graph[arr])
            c->eager_steps++;
        DT_PROF_MARK(t0);
        gpu_trace_launch(c, arr);
        DT_PROF_ADD(DT_PROF_LAUNCH, t0);
        return;
    }
    cudaGraph_t graph;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    c->capturing = -1;
    DT_ASSERT(e == cudaSuccess, "capturing step %llu as a CUDA graph: %s (run with --cuda-graph off)",
              (unsigned long long)step, cudaGetErrorString(e));
    GPU_CHECK(cudaGraphInstantiate(&c->graph[arr], graph, 0));
    GPU_CHECK(cudaGraphDestroy(graph));
    if (c->tlaunch) {
        /* the step's records as a graph of their own, on the trace stream */
        GPU_CHECK(cudaStreamBeginCapture(c->tstream, cudaStreamCaptureModeThreadLocal));
#ifdef DT_PROFILE_STEP
        size_t *tmp;
        const size_t *counts = gpu_prof_counts(c, arr, &tmp);
#else
        const size_t *counts = c->tcounts[arr];
#endif
        int rc = gpu_trace_enqueue(c->gtrace[arr], c->tbufs[arr], counts, c->tn[arr], 1);
#ifdef DT_PROFILE_STEP
        free(tmp);
#endif
        e = cudaStreamEndCapture(c->tstream, &graph);
        DT_ASSERT(rc == 0 && e == cudaSuccess, "capturing step %llu's tracing as a CUDA graph: %s",
                  (unsigned long long)step, rc ? "scratch too small" : cudaGetErrorString(e));
        if (c->tgraph[arr])
            GPU_CHECK(cudaGraphExecDestroy(c->tgraph[arr]));
        GPU_CHECK(cudaGraphInstantiate(&c->tgraph[arr], graph, 0));
        GPU_CHECK(cudaGraphDestroy(graph));
    }
    gpu_trace_upload(c->gtrace[arr]);
    GPU_CHECK(cudaGraphLaunch(c->graph[arr], c->stream));
    gpu_trace_launch(c, arr);
}

static const char *gpu_op_algorithm(void *ctx, const struct graph *g, int i, int *transform)
{
    return gpu_dnn_op_algorithm((struct gpu_ctx *)ctx, g, i, transform);
}

/* The two tables differ only in the entries cuDNN replaces. */
static struct backend_ops gpu_table(const char *name, int (*init)(void **, const struct backend_options *),
                                    int dnn)
{
    struct backend_ops b;
    memset(&b, 0, sizeof b);
    b.api_version = BACKEND_API_VERSION;
    b.name = name;
    b.init = init;
    b.free = gpu_free;
    b.alloc = gpu_alloc;
    b.release = gpu_release;
    b.upload = gpu_upload;
    b.download = gpu_download;
    b.upload_async = gpu_upload_async;
    b.host_alloc = gpu_host_alloc;
    b.host_free = gpu_host_free;
    b.download_async = gpu_download_async;
    b.trace = gpu_trace_one;
    b.describe = gpu_describe;
    b.sync = gpu_sync;
    b.fence = gpu_fence;
    b.fence_wait = gpu_fence_wait;
    b.trace_batch = gpu_trace_many;
    b.trace_batch_async = gpu_trace_async;
    b.trace_batch_wait = gpu_trace_wait;
    b.trace_defer = gpu_trace_defer;
    b.prepare = gpu_prepare;
    b.step_begin = gpu_step_begin;
    b.step_end = gpu_step_end;
    b.op_enter = gpu_op_enter;
    b.op_leave = gpu_op_leave;
    b.op_algorithm = gpu_op_algorithm;
    for (int t = 0; t < OP_COUNT; t++)
        b.op[t] = dnn && gpu_dnn_ops[t] ? gpu_dnn_ops[t] : gpu_ops[t];
    return b;
}

extern "C" const struct backend_ops backend_cuda = gpu_table("cuda", gpu_init_cuda, 0);
extern "C" const struct backend_ops backend_cudnn = gpu_table("cudnn", gpu_init_cudnn, 1);
