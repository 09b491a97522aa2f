/* bench_cudnn_engines.c: for each convolution of a PredNet configuration
 * and each direction, cuDNN's legacy algorithms (what the cudnn backend
 * chooses from: cudnnConvolution*, the algorithms cudnnFind ranks) against
 * the engine configurations of cuDNN's backend API (the ones its heuristics,
 * modes A and FALLBACK, list: what an autotuner on cuDNN's graph API
 * chooses from), with float32 data and arithmetic (no tensor-core or
 * down-converting engines), each under three rules: the fastest; divtrace's
 * deterministic mode (the first of the heuristic order that cuDNN does not
 * call nondeterministic, that is not an FFT or Winograd transform, and that
 * runs: no timing, so every run makes the same choice); the fastest such.
 * Each candidate runs in a CUDA graph of BENCH_REPS calls (no host time
 * between calls, as divtrace's steps run), timed over 3 launches (the
 * median). The step's sums (each convolution times its calls a step) say
 * how much of the step's convolution time each choice takes.
 * Usage: bench_cudnn_engines [pn1|pn4|kitti]... (default pn4 kitti) */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_REPS 10
#define WS_MAX ((size_t)1 << 30)
#define MAX_CFG 32 /* engine configurations timed per heuristics mode */

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bench_cudnn_engines: %s: %s\n", #x, cudaGetErrorString(e_));          \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)
#define DK(x)                                                                                      \
    do {                                                                                           \
        cudnnStatus_t s_ = (x);                                                                    \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                          \
            fprintf(stderr, "bench_cudnn_engines: %s: %s\n", #x, cudnnGetErrorString(s_));         \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

enum dir { FWD, BWD_DATA, BWD_FILTER, NDIR };
static const char *const dir_name[NDIR] = {"fwd", "bwd_data", "bwd_filter"};

struct conv {
    char what[48];
    int n, c, k, h, w, count; /* count: calls of each direction a step */
    int dirs;                 /* bit d: direction d is timed */
};

static cudnnHandle_t H;
static cudaStream_t S;
static void *ws;
static float *dx, *dw, *dy;

static double median3(double a, double b, double c)
{
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* ms per call of fn(arg) on the GPU, or NAN when it fails or cannot be
 * captured: BENCH_REPS calls captured in a CUDA graph (as divtrace's steps
 * run them: no host time between calls), the graph launched once, then
 * timed over 3 launches (the median); a candidate whose first timed launch
 * takes over 3 times `bound` a call (the best so far; NAN: none) is not
 * timed further. */
typedef cudnnStatus_t run_fn(void *arg);
static double time_calls(run_fn *fn, void *arg, double bound)
{
    if (fn(arg) != CUDNN_STATUS_SUCCESS || cudaStreamSynchronize(S) != cudaSuccess) {
        cudaGetLastError();
        return NAN;
    }
    cudaGraph_t gr = NULL;
    cudaGraphExec_t ex = NULL;
    int ok = 1;
    CK(cudaStreamBeginCapture(S, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < BENCH_REPS && ok; i++)
        ok = fn(arg) == CUDNN_STATUS_SUCCESS;
    if (cudaStreamEndCapture(S, &gr) != cudaSuccess || !ok ||
        cudaGraphInstantiate(&ex, gr, 0) != cudaSuccess) {
        cudaGetLastError();
        if (gr)
            cudaGraphDestroy(gr);
        return NAN;
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double m[3];
    CK(cudaGraphLaunch(ex, S));
    for (int r = 0; r < 3; r++) {
        float ms;
        CK(cudaEventRecord(e0, S));
        CK(cudaGraphLaunch(ex, S));
        CK(cudaEventRecord(e1, S));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        m[r] = ms / BENCH_REPS;
        if (r == 0 && !isnan(bound) && m[0] > 3 * bound) {
            m[1] = m[2] = m[0];
            break;
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ex);
    cudaGraphDestroy(gr);
    return median3(m[0], m[1], m[2]);
}

/* ---- the legacy API ---------------------------------------------------- */

struct legacy {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t f;
    cudnnConvolutionDescriptor_t conv;
    enum dir d;
    int algo;
    size_t wsb;
};

static cudnnStatus_t legacy_run(void *arg)
{
    struct legacy *l = arg;
    const float one = 1, zero = 0;
    switch (l->d) {
    case FWD:
        return cudnnConvolutionForward(H, &one, l->x, dx, l->f, dw, l->conv, (cudnnConvolutionFwdAlgo_t)l->algo,
                                       ws, l->wsb, &zero, l->y, dy);
    case BWD_DATA:
        return cudnnConvolutionBackwardData(H, &one, l->f, dw, l->y, dy, l->conv,
                                            (cudnnConvolutionBwdDataAlgo_t)l->algo, ws, l->wsb, &zero, l->x, dx);
    default:
        return cudnnConvolutionBackwardFilter(H, &one, l->x, dx, l->y, dy, l->conv,
                                              (cudnnConvolutionBwdFilterAlgo_t)l->algo, ws, l->wsb, &zero, l->f,
                                              dw);
    }
}

/* A candidate chosen by one rule: its ms per call, its id (legacy: the
 * algorithm's number; engines: the global index), its notes (N: cuDNN
 * calls it nondeterministic, T: a transform, FFT or Winograd). */
struct pick {
    double t;
    int id;
    char notes[4];
};
/* the rules: 0 the fastest; 1 divtrace's deterministic mode (the first of
 * cuDNN's heuristic order that is deterministic, not a transform, and
 * runs); 2 the fastest deterministic non-transform */
enum { FASTEST, DET_MODE, FASTEST_DET, NRULE };

static void pick_init(struct pick *p)
{
    for (int r = 0; r < NRULE; r++)
        p[r] = (struct pick){NAN, -1, ""};
}

/* candidate (t, id, nondet, transform) in heuristic order */
static void pick_offer(struct pick *p, double t, int id, int nondet, int transform)
{
    if (isnan(t))
        return;
    struct pick c = {t, id, ""};
    snprintf(c.notes, sizeof c.notes, "%s%s", nondet ? "N" : "", transform ? "T" : "");
    if (isnan(p[FASTEST].t) || t < p[FASTEST].t)
        p[FASTEST] = c;
    if (nondet || transform)
        return;
    if (p[DET_MODE].id < 0)
        p[DET_MODE] = c;
    if (isnan(p[FASTEST_DET].t) || t < p[FASTEST_DET].t)
        p[FASTEST_DET] = c;
}

static int legacy_transform(enum dir d, int a)
{
    return d == FWD ? a >= 4 : d == BWD_DATA ? a >= 2 : a == 2 || a == 5 || a == 6;
}

static int legacy_nondet(enum dir d, int a)
{
    return (d == BWD_DATA && a == 0) || (d == BWD_FILTER && (a == 0 || a == 3));
}

static void legacy_picks(const struct conv *cv, enum dir d, struct pick *p)
{
    struct legacy l = {.d = d};
    DK(cudnnCreateTensorDescriptor(&l.x));
    DK(cudnnCreateTensorDescriptor(&l.y));
    DK(cudnnCreateFilterDescriptor(&l.f));
    DK(cudnnCreateConvolutionDescriptor(&l.conv));
    DK(cudnnSetTensor4dDescriptor(l.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, cv->n, cv->c, cv->h, cv->w));
    DK(cudnnSetTensor4dDescriptor(l.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, cv->n, cv->k, cv->h, cv->w));
    DK(cudnnSetFilter4dDescriptor(l.f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, cv->k, cv->c, 3, 3));
    DK(cudnnSetConvolution2dDescriptor(l.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DK(cudnnSetConvolutionMathType(l.conv, CUDNN_FMA_MATH));
    int n = 0;
    struct {
        int algo, det;
        cudnnStatus_t st;
        size_t mem;
        cudnnMathType_t math;
    } c[16];
#define LEGACY_COPY(perf)                                                                          \
    for (int i = 0; i < n; i++) {                                                                  \
        c[i].algo = (int)perf[i].algo;                                                             \
        c[i].det = perf[i].determinism == CUDNN_DETERMINISTIC;                                     \
        c[i].st = perf[i].status;                                                                  \
        c[i].mem = perf[i].memory;                                                                 \
        c[i].math = perf[i].mathType;                                                              \
    }
    if (d == FWD) {
        cudnnConvolutionFwdAlgoPerf_t q[16];
        DK(cudnnGetConvolutionForwardAlgorithm_v7(H, l.x, l.f, l.conv, l.y, 16, &n, q));
        LEGACY_COPY(q);
    } else if (d == BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t q[16];
        DK(cudnnGetConvolutionBackwardDataAlgorithm_v7(H, l.f, l.y, l.conv, l.x, 16, &n, q));
        LEGACY_COPY(q);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t q[16];
        DK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(H, l.x, l.y, l.conv, l.f, 16, &n, q));
        LEGACY_COPY(q);
    }
    pick_init(p);
    for (int i = 0; i < n; i++) {
        if (c[i].st != CUDNN_STATUS_SUCCESS || c[i].mem > WS_MAX || c[i].math == CUDNN_TENSOR_OP_MATH ||
            c[i].math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
            continue;
        l.algo = c[i].algo;
        l.wsb = c[i].mem;
        double t = time_calls(legacy_run, &l, p[FASTEST].t);
        pick_offer(p, t, l.algo, !c[i].det || legacy_nondet(d, l.algo), legacy_transform(d, l.algo));
    }
    cudnnDestroyTensorDescriptor(l.x);
    cudnnDestroyTensorDescriptor(l.y);
    cudnnDestroyFilterDescriptor(l.f);
    cudnnDestroyConvolutionDescriptor(l.conv);
}

/* ---- the backend (graph) API ---------------------------------------------- */

static cudnnBackendDescriptor_t be_new(cudnnBackendDescriptorType_t t)
{
    cudnnBackendDescriptor_t d;
    DK(cudnnBackendCreateDescriptor(t, &d));
    return d;
}

static void be_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                   int64_t n, const void *v)
{
    DK(cudnnBackendSetAttribute(d, a, t, n, v));
}

static cudnnBackendDescriptor_t be_tensor(int64_t uid, int n, int c, int h, int w)
{
    cudnnBackendDescriptor_t t = be_new(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t dim[4] = {n, c, h, w}, str[4] = {(int64_t)c * h * w, (int64_t)h * w, w, 1}, align = 16;
    cudnnDataType_t dt = CUDNN_DATA_FLOAT;
    be_set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    be_set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
    be_set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
    be_set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    be_set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    DK(cudnnBackendFinalize(t));
    return t;
}

struct plan_run {
    cudnnBackendDescriptor_t plan, pack;
};

static cudnnStatus_t plan_exec(void *arg)
{
    struct plan_run *p = arg;
    return cudnnBackendExecute(H, p->plan, p->pack);
}

static int has_note(cudnnBackendDescriptor_t eng, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                    int note)
{
    int notes[32];
    int64_t n = 0;
    if (cudnnBackendGetAttribute(eng, a, t, 32, &n, notes) != CUDNN_STATUS_SUCCESS)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (notes[i] == note)
            return 1;
    return 0;
}

/* the engine configurations of heuristics modes A then FALLBACK, in their
 * order, offered to the rules; *ncfg: how many ran */
static void engine_picks(const struct conv *cv, enum dir d, struct pick *p, int *ncfg)
{
    cudnnBackendDescriptor_t x = be_tensor('x', cv->n, cv->c, cv->h, cv->w);
    cudnnBackendDescriptor_t y = be_tensor('y', cv->n, cv->k, cv->h, cv->w);
    cudnnBackendDescriptor_t f = be_tensor('w', cv->k, cv->c, 3, 3);
    cudnnBackendDescriptor_t conv = be_new(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    int64_t sd = 2, pad[2] = {1, 1}, one2[2] = {1, 1};
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    be_set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd);
    be_set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct);
    be_set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    be_set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    be_set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    be_set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2);
    be_set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one2);
    DK(cudnnBackendFinalize(conv));
    static const cudnnBackendDescriptorType_t optype[NDIR] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    cudnnBackendDescriptor_t op = be_new(optype[d]);
    float alpha = 1, beta = 0;
    const cudnnBackendAttributeType_t DT = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    if (d == FWD) {
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, DT, 1, &x);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, DT, 1, &f);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, DT, 1, &y);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, DT, 1, &conv);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    } else if (d == BWD_DATA) {
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, DT, 1, &x);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, DT, 1, &f);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, DT, 1, &y);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, DT, 1, &conv);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    } else {
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, DT, 1, &x);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, DT, 1, &f);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, DT, 1, &y);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, DT, 1, &conv);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        be_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    }
    DK(cudnnBackendFinalize(op));
    cudnnBackendDescriptor_t graph = be_new(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    be_set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, DT, 1, &op);
    be_set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &H);
    DK(cudnnBackendFinalize(graph));

    pick_init(p);
    *ncfg = 0;
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int mi = 0; mi < 2; mi++) {
        cudnnBackendDescriptor_t heur = be_new(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        be_set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, DT, 1, &graph);
        be_set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi]);
        if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) {
            cudnnBackendDestroyDescriptor(heur);
            continue;
        }
        int64_t n = 0;
        DK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, DT, 0, &n, NULL));
        if (n > MAX_CFG)
            n = MAX_CFG;
        cudnnBackendDescriptor_t cfg[MAX_CFG];
        for (int64_t i = 0; i < n; i++)
            cfg[i] = be_new(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        int64_t got = 0;
        DK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, DT, n, &got, cfg));
        for (int64_t i = 0; i < got; i++) {
            cudnnBackendDescriptor_t eng = be_new(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
            int64_t ne = 0, gidx = -1;
            if (cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, DT, 1, &ne, &eng) !=
                CUDNN_STATUS_SUCCESS)
                goto next;
            cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &ne, &gidx);
            if (has_note(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                         CUDNN_NUMERICAL_NOTE_TENSOR_CORE) ||
                has_note(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                         CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) ||
                has_note(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                         CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION))
                goto next;
            int nondet = has_note(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                  CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
            int transform = 0;
            static const int tn[] = {CUDNN_NUMERICAL_NOTE_FFT, CUDNN_NUMERICAL_NOTE_WINOGRAD,
                                     CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4, CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6,
                                     CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13};
            for (size_t q = 0; q < sizeof tn / sizeof tn[0]; q++)
                transform |= has_note(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, tn[q]);
            cudnnBackendDescriptor_t plan = be_new(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            be_set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &H);
            be_set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, DT, 1, &cfg[i]);
            int64_t wsb = 0;
            if (cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
                cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                         &ne, &wsb) == CUDNN_STATUS_SUCCESS &&
                (size_t)wsb <= WS_MAX) {
                cudnnBackendDescriptor_t pack = be_new(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
                void *ptr[3] = {dx, dw, dy};
                int64_t uid[3] = {'x', 'w', 'y'};
                be_set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptr);
                be_set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uid);
                be_set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
                DK(cudnnBackendFinalize(pack));
                struct plan_run pr = {plan, pack};
                double t = time_calls(plan_exec, &pr, p[FASTEST].t);
                *ncfg += !isnan(t);
                pick_offer(p, t, (int)gidx, nondet, transform);
                cudnnBackendDestroyDescriptor(pack);
            }
            cudnnBackendDestroyDescriptor(plan);
        next:
            cudnnBackendDestroyDescriptor(eng);
        }
        for (int64_t i = 0; i < n; i++)
            cudnnBackendDestroyDescriptor(cfg[i]);
        cudnnBackendDestroyDescriptor(heur);
    }
    cudnnBackendDestroyDescriptor(graph);
    cudnnBackendDestroyDescriptor(op);
    cudnnBackendDestroyDescriptor(conv);
    cudnnBackendDestroyDescriptor(x);
    cudnnBackendDestroyDescriptor(y);
    cudnnBackendDestroyDescriptor(f);
}

/* the convolutions of PredNet (stack, size, nt, batch), as models/prednet.c
 * builds them: per layer the four gates as one (the cudnn backend's set,
 * PyTorch's fused gate convolution; forward and filter gradient), each
 * gate's data gradient alone (the cudnn backend's deterministic form) and
 * the four gates' data gradient as one call, Ahat, and A of the next layer */
static int prednet_convs(struct conv *out, const int *st, int nl, int h, int w, int nt, int n)
{
    int m = 0;
    for (int l = 0; l < nl; l++, h /= 2, w /= 2) {
        int cin = st[l] + 2 * st[l] + (l + 1 < nl ? st[l + 1] : 0);
        out[m++] = (struct conv){"", n, cin, 4 * st[l], h, w, nt, 1 << FWD | 1 << BWD_FILTER | 1 << BWD_DATA};
        snprintf(out[m - 1].what, sizeof out[m - 1].what, "L%d gates, four as one", l);
        out[m++] = (struct conv){"", n, cin, st[l], h, w, 4 * nt, 1 << BWD_DATA};
        snprintf(out[m - 1].what, sizeof out[m - 1].what, "L%d gates, one", l);
        out[m++] = (struct conv){"", n, st[l], st[l], h, w, nt, 7};
        snprintf(out[m - 1].what, sizeof out[m - 1].what, "L%d ahat", l);
        if (l + 1 < nl) {
            out[m++] = (struct conv){"", n, 2 * st[l], st[l + 1], h, w, nt, 7};
            snprintf(out[m - 1].what, sizeof out[m - 1].what, "L%d a", l);
        }
    }
    return m;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *key, *what;
        int st[4], h, w, nt, n;
    } confs[] = {
        {"pn1", "PredNet 1,16,32,64 @ 64x64, nt 20, batch 1", {1, 16, 32, 64}, 64, 64, 20, 1},
        {"pn4", "PredNet 1,16,32,64 @ 64x64, nt 20, batch 4", {1, 16, 32, 64}, 64, 64, 20, 4},
        {"kitti", "PredNet 3,48,96,192 @ 128x160, nt 10, batch 4", {3, 48, 96, 192}, 128, 160, 10, 4},
    };
    const char *want[8] = {"pn4", "kitti"};
    int nwant = 2;
    if (argc > 1) {
        nwant = 0;
        for (int a = 1; a < argc && nwant < 8; a++)
            want[nwant++] = argv[a];
    }
    CK(cudaStreamCreate(&S));
    DK(cudnnCreate(&H));
    DK(cudnnSetStream(H, S));
    size_t big = (size_t)64 << 20; /* floats: the largest tensor of these models is 2.4 M */
    CK(cudaMalloc((void **)&dx, big * 4));
    CK(cudaMalloc((void **)&dw, big * 4));
    CK(cudaMalloc((void **)&dy, big * 4));
    CK(cudaMemset(dx, 0, big * 4));
    CK(cudaMemset(dw, 0, big * 4));
    CK(cudaMemset(dy, 0, big * 4));
    CK(cudaMalloc(&ws, WS_MAX));
    int ver = (int)cudnnGetVersion();
    for (int wi = 0; wi < nwant; wi++) {
        int ci = -1;
        for (int k = 0; k < 3; k++)
            if (strcmp(want[wi], confs[k].key) == 0)
                ci = k;
        if (ci < 0) {
            fprintf(stderr, "bench_cudnn_engines: unknown configuration '%s' (pn1, pn4, kitti)\n", want[wi]);
            return 2;
        }
        struct conv cv[32];
        int m = prednet_convs(cv, confs[ci].st, 4, confs[ci].h, confs[ci].w, confs[ci].nt, confs[ci].n);
        printf("\n%s (cuDNN %d; ms per call, float32 arithmetic; engines: heuristics A and FALLBACK)\n\n",
               confs[ci].what, ver);
        printf("| convolution (N,C->K,HxW) | direction | calls a step | fastest, legacy (algo) | fastest, "
               "engines (index) | deterministic mode, legacy | deterministic mode, engines | fastest "
               "deterministic, legacy | fastest deterministic, engines | engine configurations run |\n");
        printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        /* sum[api][rule][form]: api 0 legacy, 1 engines; form 0 the gates'
         * data gradients one at a time, 1 four as one */
        double sum[2][NRULE][2] = {{{0}}};
        for (int i = 0; i < m; i++)
            for (int d = 0; d < NDIR; d++) {
                if (!(cv[i].dirs >> d & 1))
                    continue;
                struct pick pk[2][NRULE];
                int nc;
                legacy_picks(&cv[i], (enum dir)d, pk[0]);
                engine_picks(&cv[i], (enum dir)d, pk[1], &nc);
                printf("| %s (%d,%d->%d,%dx%d) | %s | %d", cv[i].what, cv[i].n, cv[i].c, cv[i].k, cv[i].h,
                       cv[i].w, dir_name[d], cv[i].count);
                for (int r = 0; r < NRULE; r++)
                    for (int api = 0; api < 2; api++)
                        printf(" | %.4f (%d%s%s)", pk[api][r].t, pk[api][r].id, pk[api][r].notes[0] ? " " : "",
                               pk[api][r].notes);
                printf(" | %d |\n", nc);
                fflush(stdout);
                int form = -1; /* -1: in both forms */
                if (d == BWD_DATA && strstr(cv[i].what, ", one"))
                    form = 0;
                if (d == BWD_DATA && strstr(cv[i].what, "four"))
                    form = 1;
                for (int api = 0; api < 2; api++)
                    for (int r = 0; r < NRULE; r++)
                        for (int f = 0; f < 2; f++)
                            if (form < 0 || form == f)
                                sum[api][r][f] += cv[i].count * (isnan(pk[api][r].t) ? 0 : pk[api][r].t);
            }
        printf("| the step's convolutions, gate data gradients one at a time | | |");
        for (int r = 0; r < NRULE; r++)
            printf(" %.2f | %.2f |", sum[0][r][0], sum[1][r][0]);
        printf(" |\n| the same, gate data gradients four as one | | |");
        for (int r = 0; r < NRULE; r++)
            printf(" %.2f | %.2f |", sum[0][r][1], sum[1][r][1]);
        printf(" |\n");
    }
    return 0;
}
