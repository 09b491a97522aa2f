/* gpu_dnn_choose.cu: which of cuDNN's algorithms runs each convolution and
 * direction (--cudnn-algo: the deterministic rule, the engines of
 * deterministic-fast, the fastest mode's timing in a CUDA graph, or a
 * replay's recorded choice), and the call that runs it (gpu_dnn.cu holds
 * the plan around them and the op kernels). */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_dnn.h"

/* ---- convolution calls, one switch per direction ------------------------------ */

/* One convolution with algorithm algo: fwd y = conv(a = x, b = w); bwd_data
 * dx = (a = dy, b = w); bwd_filter dw = (a = x, b = dy). The status is
 * returned, not checked: prepare tries algorithms that may be unsupported. */
cudnnStatus_t dnn_conv_call(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d,
                            int algo, void *ws, size_t ws_bytes, const void *a, const void *b, void *out)
{
    if (algo == DNN_ALGO_ENGINE) { /* the engine's x, w, y */
        DT_ASSERT(cv->eng[d], "cudnn: %s: no engine", dnn_dir_name[d]);
        switch (d) {
        case DNN_FWD: return dnn_engine_exec(c, cv->eng[d], ws, a, b, out);
        case DNN_BWD_DATA: return dnn_engine_exec(c, cv->eng[d], ws, out, b, a);
        default: return dnn_engine_exec(c, cv->eng[d], ws, a, out, b);
        }
    }
    switch (d) {
    case DNN_FWD:
        return cudnnConvolutionForward(c->dnn_handle, &dnn_one, cv->x, a, cv->f, b, cv->conv,
                                       (cudnnConvolutionFwdAlgo_t)algo, ws, ws_bytes, &dnn_zero,
                                       cv->y, out);
    case DNN_BWD_DATA:
        return cudnnConvolutionBackwardData(c->dnn_handle, &dnn_one, cv->f, b, cv->y, a, cv->conv,
                                            (cudnnConvolutionBwdDataAlgo_t)algo, ws, ws_bytes,
                                            &dnn_zero, cv->x, out);
    case DNN_BWD_FILTER:
        return cudnnConvolutionBackwardFilter(c->dnn_handle, &dnn_one, cv->x, a, cv->y, b, cv->conv,
                                              (cudnnConvolutionBwdFilterAlgo_t)algo, ws, ws_bytes,
                                              &dnn_zero, cv->f, out);
    default:
        DT_ASSERT(0, "cudnn: direction %d", (int)d);
    }
}

static cudnnStatus_t dnn_conv_ws(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d,
                                 int algo, size_t *bytes)
{
    *bytes = 0;
    switch (d) {
    case DNN_FWD:
        return cudnnGetConvolutionForwardWorkspaceSize(c->dnn_handle, cv->x, cv->f, cv->conv, cv->y,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    case DNN_BWD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(c->dnn_handle, cv->f, cv->y, cv->conv,
                                                            cv->x, (cudnnConvolutionBwdDataAlgo_t)algo,
                                                            bytes);
    case DNN_BWD_FILTER:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            c->dnn_handle, cv->x, cv->y, cv->conv, cv->f, (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
    default:
        DT_ASSERT(0, "cudnn: direction %d", (int)d);
    }
}

/* An entry of cuDNN's ranking, whatever the direction. */
struct dnn_cand {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnDeterminism_t det;
    cudnnMathType_t math;
    float time;         /* ms, cudnnFind only */
};

#define DNN_COPY_CANDS(perf, n, out)                                                        \
    for (int i_ = 0; i_ < (n); i_++) {                                                      \
        (out)[i_].algo = (int)(perf)[i_].algo;                                              \
        (out)[i_].status = (perf)[i_].status;                                               \
        (out)[i_].memory = (perf)[i_].memory;                                               \
        (out)[i_].det = (perf)[i_].determinism;                                             \
        (out)[i_].math = (perf)[i_].mathType;                                               \
        (out)[i_].time = (perf)[i_].time;                                                   \
    }

/* cuDNN's ranking of the algorithms for direction d, best first: its
 * heuristics (cudnnGet*Algorithm_v7: no timing, the same answer every run)
 * or, when `timed`, its measurements (cudnnFind*Algorithm: each algorithm run
 * and timed now, so the order may change from run to run). The count, or
 * -1 with dt_error set. */
static int dnn_conv_rank(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d, int timed,
                         struct dnn_cand *out)
{
    int n = 0;
    cudnnStatus_t s;
    switch (d) {
    case DNN_FWD: {
        cudnnConvolutionFwdAlgoPerf_t perf[DNN_MAX_CANDIDATES];
        s = timed ? cudnnFindConvolutionForwardAlgorithm(c->dnn_handle, cv->x, cv->f, cv->conv, cv->y,
                                                         DNN_MAX_CANDIDATES, &n, perf)
                  : cudnnGetConvolutionForwardAlgorithm_v7(c->dnn_handle, cv->x, cv->f, cv->conv,
                                                           cv->y, DNN_MAX_CANDIDATES, &n, perf);
        if (s == CUDNN_STATUS_SUCCESS)
            DNN_COPY_CANDS(perf, n, out);
        break;
    }
    case DNN_BWD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[DNN_MAX_CANDIDATES];
        s = timed ? cudnnFindConvolutionBackwardDataAlgorithm(c->dnn_handle, cv->f, cv->y, cv->conv,
                                                              cv->x, DNN_MAX_CANDIDATES, &n, perf)
                  : cudnnGetConvolutionBackwardDataAlgorithm_v7(c->dnn_handle, cv->f, cv->y, cv->conv,
                                                                cv->x, DNN_MAX_CANDIDATES, &n, perf);
        if (s == CUDNN_STATUS_SUCCESS)
            DNN_COPY_CANDS(perf, n, out);
        break;
    }
    case DNN_BWD_FILTER: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[DNN_MAX_CANDIDATES];
        s = timed ? cudnnFindConvolutionBackwardFilterAlgorithm(c->dnn_handle, cv->x, cv->y, cv->conv,
                                                                cv->f, DNN_MAX_CANDIDATES, &n, perf)
                  : cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->dnn_handle, cv->x, cv->y,
                                                                  cv->conv, cv->f,
                                                                  DNN_MAX_CANDIDATES, &n, perf);
        if (s == CUDNN_STATUS_SUCCESS)
            DNN_COPY_CANDS(perf, n, out);
        break;
    }
    default:
        DT_ASSERT(0, "cudnn: direction %d", (int)d);
    }
    if (s != CUDNN_STATUS_SUCCESS) {
        char shape[96];
        dnn_shape_str(shape, sizeof shape, cv);
        dt_error_set("cudnn: cannot rank the %s algorithms of %s (%s): %s", dnn_dir_name[d], shape,
                     timed ? "cudnnFind" : "cudnnGet_v7", cudnnGetErrorString(s));
        return DT_ERR;
    }
    DT_ASSERT(n >= 0 && n <= DNN_MAX_CANDIDATES, "cudnn: %d algorithms returned", n);
    return n;
}

/* Device buffers for a trial run of every chosen algorithm (zeros: the
 * values do not matter, only that cuDNN accepts and runs the call). */
struct dnn_trial {
    float *x, *y, *f;  /* (N,C,H,W), (N,K,H,W), (K,C,R,S) */
};

/* One call of algorithm algo for direction d of cv on the trial buffers,
 * each in the place that direction reads or writes it. */
static cudnnStatus_t dnn_conv_trial_call(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d,
                                         int algo, void *w, size_t ws, const struct dnn_trial *t)
{
    switch (d) {
    case DNN_FWD: return dnn_conv_call(c, cv, d, algo, w, ws, t->x, t->f, t->y);
    case DNN_BWD_DATA: return dnn_conv_call(c, cv, d, algo, w, ws, t->y, t->f, t->x);
    default: return dnn_conv_call(c, cv, d, algo, w, ws, t->x, t->y, t->f);
    }
}

/* Whether algorithm algo runs for direction d of cv with a workspace of
 * *ws bytes (set), at most DNN_WORKSPACE_MAX: cuDNN reports some
 * combinations unsupported only when they are called. The status of the
 * first failure, or success. */
static cudnnStatus_t dnn_conv_try(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d,
                                  int algo, const struct dnn_trial *t, size_t *ws)
{
    cudnnStatus_t s = dnn_conv_ws(c, cv, d, algo, ws);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    if (*ws > DNN_WORKSPACE_MAX)
        return CUDNN_STATUS_NOT_SUPPORTED; /* the caller sees *ws */
    s = dnn_conv_trial_call(c, cv, d, algo, gpu_scratch(c, *ws), *ws, t);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    /* an error inside a kernel surfaces here (and would poison the context) */
    GPU_CHECK(cudaStreamSynchronize(c->stream));
    return CUDNN_STATUS_SUCCESS;
}

/* A math type that may use tensor cores: never taken (see dnn_conv_find). */
static int dnn_math_ok(cudnnMathType_t m) { return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH; }

/* Engine e as direction d's choice (cv takes it), if it runs on the trial
 * buffers; 1, or 0 (e freed). */
static int dnn_engine_take(struct gpu_ctx *c, struct gpu_dnn_conv *cv, enum dnn_dir d, const struct dnn_trial *t,
                           struct dnn_engine *e)
{
    size_t ws = dnn_engine_ws(e);
    /* x, w, y whatever the direction: the trial's zeros */
    if (dnn_engine_exec(c, e, gpu_scratch(c, ws), t->x, t->f, t->y) != CUDNN_STATUS_SUCCESS) {
        dnn_engine_free(e);
        return 0;
    }
    GPU_CHECK(cudaStreamSynchronize(c->stream)); /* a kernel's error surfaces here */
    dnn_engine_free(cv->eng[d]);
    cv->eng[d] = e;
    cv->algo[d] = DNN_ALGO_ENGINE;
    cv->ws[d] = ws;
    cv->det[d] = !dnn_engine_nondet(e);
    cv->time[d] = 0;
    return 1;
}

/* The GPU time of one call of algorithm algo for direction d of cv (its
 * workspace ws bytes, already known to run), in ms: the call captured
 * `reps` times into a CUDA graph, as the step runs it, launched once to warm
 * and then timed three times by events, the least kept. cudnnFind times
 * each call from the host, launch and synchronization included: at
 * PredNet's small shapes that is most of what it measures, and its ranking
 * then favours algorithms that are slower inside the step. -1 when the
 * graph cannot be made (the caller keeps cuDNN's time). */
static float dnn_conv_graph_time(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d, int algo,
                                 size_t ws, const struct dnn_trial *t, int reps)
{
    void *w = gpu_scratch(c, ws);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaEvent_t e0, e1;
    GPU_CHECK(cudaStreamSynchronize(c->stream));
    GPU_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    for (int r = 0; r < reps && s == CUDNN_STATUS_SUCCESS; r++)
        s = dnn_conv_trial_call(c, cv, d, algo, w, ws, t);
    cudaError_t ce = cudaStreamEndCapture(c->stream, &graph);
    if (s != CUDNN_STATUS_SUCCESS || ce != cudaSuccess ||
        cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
        cudaGetLastError();
        if (graph)
            cudaGraphDestroy(graph);
        return -1.0f;
    }
    GPU_CHECK(cudaEventCreate(&e0));
    GPU_CHECK(cudaEventCreate(&e1));
    GPU_CHECK(cudaGraphLaunch(exec, c->stream));
    float best = -1.0f;
    for (int k = 0; k < 3; k++) {
        float ms = 0;
        GPU_CHECK(cudaEventRecord(e0, c->stream));
        GPU_CHECK(cudaGraphLaunch(exec, c->stream));
        GPU_CHECK(cudaEventRecord(e1, c->stream));
        GPU_CHECK(cudaEventSynchronize(e1));
        GPU_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (best < 0 || ms < best)
            best = ms;
    }
    GPU_CHECK(cudaEventDestroy(e0));
    GPU_CHECK(cudaEventDestroy(e1));
    GPU_CHECK(cudaGraphExecDestroy(exec));
    GPU_CHECK(cudaGraphDestroy(graph));
    return best / (float)reps;
}

/* Direction d of cv with the algorithm c->algos names for it (a replay
 * runs the recording's algorithms; a new search may choose others). */
static int dnn_conv_recorded(struct gpu_ctx *c, struct gpu_dnn_conv *cv, enum dnn_dir d,
                             const struct dnn_trial *t, const char *shape)
{
    int det = 0;
    const char *name;
    size_t nn;
    if (dnn_algos_entry(c->algos, d, shape, &name, &nn, &det) && nn > 6 && strncmp(name, "ENGINE", 6) == 0) {
        struct dnn_engine *e = dnn_engine_named(c, cv, d, name, nn, DNN_WORKSPACE_MAX);
        if (!e)
            return DT_ERR;
        if (!dnn_engine_take(c, cv, d, t, e)) {
            dt_error_set("cudnn: the recorded %s engine %.*s for %s does not run here", dnn_dir_name[d], (int)nn,
                         name, shape);
            return DT_ERR;
        }
        cv->det[d] = det;
        return DT_OK;
    }
    int a = dnn_algos_find(c->algos, d, shape, &det);
    if (a < 0) {
        dt_error_set("cudnn: the recorded algorithms (cudnn_algos) name none of this cuDNN's %s "
                     "algorithms for %s", dnn_dir_name[d], shape);
        return DT_ERR;
    }
    size_t ws = 0;
    cudnnStatus_t s = dnn_conv_try(c, cv, d, a, t, &ws);
    if (s != CUDNN_STATUS_SUCCESS) {
        dt_error_set("cudnn: the recorded %s algorithm %s for %s does not run here: %s", dnn_dir_name[d],
                     dnn_algo_name(d, a), shape,
                     ws > DNN_WORKSPACE_MAX ? "its workspace is over the limit" : cudnnGetErrorString(s));
        return DT_ERR;
    }
    cv->algo[d] = a;
    cv->ws[d] = ws;
    cv->det[d] = det;
    return DT_OK;
}

/* Calls per timing graph: about DNN_TIME_GRAPH_MS of cuDNN's own estimate,
 * at least 2 (one call alone is mostly the graph's launch), at most 16. */
#define DNN_TIME_GRAPH_MS 1.0f
/* A deterministic algorithm within this fraction of the fastest is taken
 * instead: timing noise is about that size, and a reproducible choice costs
 * nothing measurable then. */
#define DNN_DET_SLACK 0.02f
/* Candidates cuDNN times at over this multiple of its best are not timed
 * again: its host-side overhead compresses ratios, never widens them. */
#define DNN_FIND_CUT 4.0f

/* --cudnn-algo fastest for direction d of cv, given cuDNN's timed ranking
 * cand[0..n): each candidate that fits, runs and is within DNN_FIND_CUT of
 * cuDNN's best is timed again in a CUDA graph (dnn_conv_graph_time), and the
 * least time wins, a deterministic candidate within DNN_DET_SLACK of it
 * first. cv->time[d] is the winner's graph time (the grouping of
 * dnn_fuse_prune compares those). 0, or -1 with dt_error set. */
static int dnn_conv_fastest(struct gpu_ctx *c, struct gpu_dnn_conv *cv, enum dnn_dir d, const struct dnn_trial *t,
                            const struct dnn_cand *cand, int n, const char *shape)
{
    float best_find = -1.0f, best = -1.0f, best_det = -1.0f;
    int pick = -1, pick_det = -1, pick_is_det = 0;
    size_t ws_pick = 0, ws_det = 0;
    for (int i = 0; i < n; i++) {
        const struct dnn_cand *k = &cand[i];
        size_t ws = 0;
        if (k->status != CUDNN_STATUS_SUCCESS || !dnn_math_ok(k->math) || k->memory > DNN_WORKSPACE_MAX ||
            k->algo < 0 || k->algo >= dnn_algo_count[d])
            continue;
        if (best_find >= 0 && k->time > DNN_FIND_CUT * best_find)
            continue;
        if (dnn_conv_try(c, cv, d, k->algo, t, &ws) != CUDNN_STATUS_SUCCESS)
            continue;
        if (best_find < 0 || k->time < best_find)
            best_find = k->time;
        int reps = k->time > 0 ? (int)(DNN_TIME_GRAPH_MS / k->time) : 16;
        reps = reps < 2 ? 2 : reps > 16 ? 16 : reps;
        float ms = dnn_conv_graph_time(c, cv, d, k->algo, ws, t, reps);
        if (ms < 0)
            ms = k->time;
        int det = k->det == CUDNN_DETERMINISTIC && !dnn_algo_documented_nondet(d, k->algo);
        if (pick < 0 || ms < best) {
            pick = k->algo;
            best = ms;
            ws_pick = ws;
            pick_is_det = det;
        }
        if (det && (pick_det < 0 || ms < best_det)) {
            pick_det = k->algo;
            best_det = ms;
            ws_det = ws;
        }
    }
    if (pick < 0) {
        dt_error_set("--cudnn-algo fastest: cuDNN offers no %s algorithm for %s within a %zu MiB workspace "
                     "(%d ranked)", dnn_dir_name[d], shape, DNN_WORKSPACE_MAX >> 20, n);
        return DT_ERR;
    }
    if (pick_det >= 0 && best_det <= best * (1.0f + DNN_DET_SLACK)) {
        pick = pick_det;
        best = best_det;
        ws_pick = ws_det;
        pick_is_det = 1;
    }
    cv->algo[d] = pick;
    cv->ws[d] = ws_pick;
    cv->det[d] = pick_is_det;
    cv->time[d] = best;
    return DT_OK;
}

/* Choose the algorithm of direction d of cv (--cudnn-algo):
 * deterministic: the first of cuDNN's heuristic ranking that cuDNN reports
 *   deterministic, that is not an FFT or Winograd transform, that fits
 *   DNN_WORKSPACE_MAX and that runs;
 * deterministic-fast: the first engine configuration of the heuristic
 *   ranking of cuDNN's backend API (gpu_dnn_engine.cu) that cuDNN does not
 *   call nondeterministic, that fits and that runs, transforms included
 *   (where none does, the first such legacy algorithm): no timing either,
 *   so every run chooses the same. Its filter gradients run a Winograd
 *   engine that cuDNN's notes do not mark as one (ENGINE17 on the H200 with
 *   cuDNN 9.14: nonzero results where every product is zero), so a replay
 *   holds every engine to the normwise bound (gpu_dnn_op_algorithm);
 * fastest: of cuDNN's timed ranking, the algorithm that fits, runs and
 *   takes least GPU time inside a CUDA graph (dnn_conv_fastest), whatever
 *   its determinism (as frameworks' autotuners do: the choice itself may
 *   change from run to run);
 * a number: that algorithm, refused if it does not run for this shape.
 * 0, or -1 with dt_error set. */
static int dnn_conv_choose(struct gpu_ctx *c, struct gpu_dnn_conv *cv, enum dnn_dir d,
                           const struct dnn_trial *t)
{
    char shape[96];
    dnn_shape_str(shape, sizeof shape, cv);
    struct dnn_cand cand[DNN_MAX_CANDIDATES];
    size_t ws = 0;
    if (c->algos)
        return dnn_conv_recorded(c, cv, d, t, shape);
    if (c->algo_mode == GPU_ALGO_NUMBER) {
        int a = c->algo_number;
        if (a >= dnn_algo_count[d]) {
            dt_error_set("--cudnn-algo %d: cuDNN's %s convolution has algorithms 0 to %d", a,
                         dnn_dir_name[d], dnn_algo_count[d] - 1);
            return DT_ERR;
        }
        cudnnStatus_t s = dnn_conv_try(c, cv, d, a, t, &ws);
        if (s != CUDNN_STATUS_SUCCESS) {
            if (ws > DNN_WORKSPACE_MAX)
                dt_error_set("--cudnn-algo %d: %s %s (%s) needs a workspace of %zu MiB, over the "
                             "limit of %zu MiB", a, dnn_dir_name[d], dnn_algo_name(d, a), shape,
                             ws >> 20, DNN_WORKSPACE_MAX >> 20);
            else
                dt_error_set("--cudnn-algo %d: %s %s is not available for %s: %s", a,
                             dnn_dir_name[d], dnn_algo_name(d, a), shape, cudnnGetErrorString(s));
            return DT_ERR;
        }
        /* cuDNN's own determinism claim where its ranking lists the algorithm */
        int det = !dnn_algo_documented_nondet(d, a);
        int n = dnn_conv_rank(c, cv, d, 0, cand);
        for (int i = 0; i < n; i++)
            if (cand[i].algo == a && cand[i].status == CUDNN_STATUS_SUCCESS) {
                det = det && cand[i].det == CUDNN_DETERMINISTIC;
                break;
            }
        cv->algo[d] = a;
        cv->ws[d] = ws;
        cv->det[d] = det;
        return DT_OK;
    }
    int timed = c->algo_mode == GPU_ALGO_FASTEST, fast = c->algo_mode == GPU_ALGO_DETERMINISTIC_FAST;
    if (fast) {
        struct dnn_engine *e[DNN_MAX_CANDIDATES];
        int ne = dnn_engine_rank(c, cv, d, DNN_WORKSPACE_MAX, e, DNN_MAX_CANDIDATES), took = 0;
        for (int i = 0; i < ne; i++) {
            if (took || dnn_engine_nondet(e[i]))
                dnn_engine_free(e[i]);
            else
                took = dnn_engine_take(c, cv, d, t, e[i]); /* frees it when it does not run */
        }
        if (took)
            return DT_OK;
    }
    int n = dnn_conv_rank(c, cv, d, timed, cand);
    if (n < 0)
        return DT_ERR;
    if (timed)
        return dnn_conv_fastest(c, cv, d, t, cand, n, shape);
    for (int i = 0; i < n; i++) {
        const struct dnn_cand *k = &cand[i];
        if (k->status != CUDNN_STATUS_SUCCESS || !dnn_math_ok(k->math) || k->memory > DNN_WORKSPACE_MAX ||
            k->algo < 0 || k->algo >= dnn_algo_count[d])
            continue;
        if (!timed && (k->det != CUDNN_DETERMINISTIC || dnn_algo_documented_nondet(d, k->algo) ||
                       (!fast && dnn_algo_transform(d, k->algo))))
            continue;
        if (dnn_conv_try(c, cv, d, k->algo, t, &ws) != CUDNN_STATUS_SUCCESS)
            continue;
        cv->algo[d] = k->algo;
        cv->ws[d] = ws;
        cv->det[d] = k->det == CUDNN_DETERMINISTIC && !dnn_algo_documented_nondet(d, k->algo);
        cv->time[d] = timed ? k->time : 0;
        return DT_OK;
    }
    dt_error_set("--cudnn-algo %s: cuDNN offers no %s%s algorithm for %s within a %zu MiB workspace "
                 "(%d ranked)", timed ? "fastest" : fast ? "deterministic-fast" : "deterministic",
                 timed ? "" : "deterministic ", dnn_dir_name[d], shape, DNN_WORKSPACE_MAX >> 20, n);
    return DT_ERR;
}

/* With DIVTRACE_CUDNN_REPORT set in the environment: one line on stderr for
 * each direction of cv, the algorithm chosen and cuDNN's timed ranking
 * (algorithm, ms, D for the ones it calls deterministic), for benchmarks
 * that compare the choice with the fastest deterministic one. */
static void dnn_conv_report(struct gpu_ctx *c, const struct gpu_dnn_conv *cv)
{
    char shape[96];
    dnn_shape_str(shape, sizeof shape, cv);
    for (int d = 0; d < DNN_NDIR; d++) {
        if (!cv->used[d])
            continue;
        struct dnn_cand cand[DNN_MAX_CANDIDATES];
        int n = dnn_conv_rank(c, cv, (enum dnn_dir)d, 1, cand);
        fprintf(stderr, "cudnn-report: %s %s: chosen %s", dnn_dir_name[d], shape,
                dnn_cv_algo_name(cv, (enum dnn_dir)d));
        if (cv->time[d] > 0)
            fprintf(stderr, " (%.4f ms in a graph)", cv->time[d]);
        fputc(';', stderr);
        for (int i = 0; i < n; i++)
            if (cand[i].status == CUDNN_STATUS_SUCCESS)
                fprintf(stderr, " %s %.4f%s%s", dnn_algo_name((enum dnn_dir)d, cand[i].algo), cand[i].time,
                        cand[i].det == CUDNN_DETERMINISTIC ? " D" : "", dnn_math_ok(cand[i].math) ? "" : " TC");
        fputc('\n', stderr);
    }
}

/* Choose every used direction of cv, trying the calls on zero buffers. */
int dnn_conv_plan(struct gpu_ctx *c, struct gpu_dnn_conv *cv)
{
    struct dnn_trial t = {NULL, NULL, NULL};
    size_t nx = (size_t)cv->n * cv->c * cv->h * cv->w, ny = (size_t)cv->n * cv->k * cv->h * cv->w,
           nf = (size_t)cv->k * (cv->c / cv->groups) * cv->r * cv->s;
    int rc = DT_OK;
    cudaError_t e;
    if ((e = cudaMalloc(&t.x, nx * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc(&t.y, ny * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc(&t.f, nf * sizeof(float))) != cudaSuccess) {
        cudaGetLastError(); /* clear the (non-sticky) allocation error */
        dt_error_set("cudnn: no GPU memory to try the convolution algorithms: %s",
                     cudaGetErrorString(e));
        rc = DT_ERR;
    } else {
        GPU_CHECK(cudaMemsetAsync(t.x, 0, nx * sizeof(float), c->stream));
        GPU_CHECK(cudaMemsetAsync(t.y, 0, ny * sizeof(float), c->stream));
        GPU_CHECK(cudaMemsetAsync(t.f, 0, nf * sizeof(float), c->stream));
        for (int d = 0; d < DNN_NDIR && rc == DT_OK; d++)
            if (cv->used[d])
                rc = dnn_conv_choose(c, cv, (enum dnn_dir)d, &t);
        if (rc == DT_OK && getenv("DIVTRACE_CUDNN_REPORT"))
            dnn_conv_report(c, cv);
    }
    GPU_CHECK(cudaStreamSynchronize(c->stream));
    if (t.x)
        GPU_CHECK(cudaFree(t.x));
    if (t.y)
        GPU_CHECK(cudaFree(t.y));
    if (t.f)
        GPU_CHECK(cudaFree(t.f));
    return rc;
}
