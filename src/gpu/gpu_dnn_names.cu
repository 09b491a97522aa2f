/* gpu_dnn_names.cu: the cudnn backend's choices as text: the names of
 * cuDNN's legacy algorithms and what its documentation says of each, the
 * trace header's description of the plan (cudnn_algos and the rest) and the
 * reading of a recorded cudnn_algos list back, and the algorithm a replay
 * reports for a convolution op. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_dnn.h"

const char *const dnn_dir_name[DNN_NDIR] = {"fwd", "bwd_data", "bwd_filter"};
const int dnn_algo_count[DNN_NDIR] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                             CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                             CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
/* Indexed by the cudnnConvolution*Algo_t values (cudnn_ops.h). */
static const char *const dnn_fwd_names[CUDNN_CONVOLUTION_FWD_ALGO_COUNT] = {
    "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
    "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
static const char *const dnn_bwd_data_names[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT] = {
    "ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
static const char *const dnn_bwd_filter_names[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT] = {
    "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
static const char *const *const dnn_algo_names[DNN_NDIR] = {dnn_fwd_names, dnn_bwd_data_names,
                                                            dnn_bwd_filter_names};

const char *dnn_algo_name(enum dnn_dir d, int algo)
{
    return algo >= 0 && algo < dnn_algo_count[d] ? dnn_algo_names[d][algo] : "?";
}

/* The algorithms cuDNN's documentation ("Reproducibility") names as not
 * bitwise reproducible run to run: they sum with atomics. */
int dnn_algo_documented_nondet(enum dnn_dir d, int algo)
{
    return (d == DNN_BWD_DATA && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) ||
           (d == DNN_BWD_FILTER && (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
                                    algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3));
}

/* Algorithms that do not sum the convolution's products (FFT and Winograd
 * transforms): their rounding is not that of any summation order, so the
 * exact oracle's bound (divtrace-replay(1)) does not cover them. The
 * deterministic mode leaves them out; fastest and a number may use them. */
int dnn_algo_transform(enum dnn_dir d, int algo)
{
    switch (d) {
    case DNN_FWD:
        return algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT || algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    case DNN_BWD_DATA:
        return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
               algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
               algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
               algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    case DNN_BWD_FILTER:
        return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
               algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
               algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
    default:
        return 0;
    }
}

void dnn_shape_str(char *buf, size_t size, const struct gpu_dnn_conv *cv)
{
    int k = snprintf(buf, size, "%ux%ux%ux%u k%u %ux%u", cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s);
    if (cv->groups > 1 && k >= 0 && (size_t)k < size)
        snprintf(buf + k, size - (size_t)k, " g%u", cv->groups);
}

/* In a list of the trace header's cudnn_algos form ("fwd 1x19x64x64 k1
 * 3x3 IMPLICIT_GEMM det; bwd_data ..."), the entry of direction d of the
 * convolution of this shape: its algorithm's name and whether it was
 * recorded deterministic. */
int dnn_algos_entry(const char *list, enum dnn_dir d, const char *shape, const char **name, size_t *len,
                    int *det)
{
    char key[128];
    int nk = snprintf(key, sizeof key, "%s %s ", dnn_dir_name[d], shape);
    for (const char *e = list; e && *e;) {
        while (*e == ' ' || *e == ';')
            e++;
        size_t el = strcspn(e, ";");
        /* not the entry of a grouped shape that merely starts like this one
         * ("... 3x3 g4 ALGO_1"): no algorithm's name starts with 'g' */
        if (el > (size_t)nk && strncmp(e, key, (size_t)nk) == 0 && e[nk] != 'g') {
            *name = e + nk;
            *len = strcspn(*name, " ;");
            *det = strncmp(*name + *len, " det", 4) == 0;
            return 1;
        }
        e += el;
    }
    return 0;
}

/* The legacy algorithm such an entry names: its number, or -1 (no entry, an
 * engine, or a name this cuDNN does not have). */
int dnn_algos_find(const char *list, enum dnn_dir d, const char *shape, int *det)
{
    const char *name;
    size_t nn;
    if (!dnn_algos_entry(list, d, shape, &name, &nn, det))
        return -1;
    for (int a = 0; a < dnn_algo_count[d]; a++)
        if (strlen(dnn_algo_names[d][a]) == nn && strncmp(name, dnn_algo_names[d][a], nn) == 0)
            return a;
    return -1;
}

const char *dnn_cv_algo_name(const struct gpu_dnn_conv *cv, enum dnn_dir d)
{
    return cv->algo[d] == DNN_ALGO_ENGINE && cv->eng[d] ? dnn_engine_name(cv->eng[d]) : dnn_algo_name(d, cv->algo[d]);
}

/* A growing string for the description. */
struct dnn_str {
    char *s;
    size_t n, cap;
};

static void dnn_str_addf(struct dnn_str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dnn_str_addf(struct dnn_str *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    DT_ASSERT(k >= 0, "cudnn: bad format");
    if (b->n + (size_t)k + 1 > b->cap) {
        b->cap = 2 * (b->n + (size_t)k + 1);
        b->s = (char *)dt_realloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

void gpu_dnn_describe(struct gpu_ctx *c, struct trace_config *cfg)
{
    const struct gpu_dnn_plan *p = c->plan;
    struct dnn_str b = {NULL, 0, 0};
    for (int i = 0; p && i < p->nconv; i++) {
        const struct gpu_dnn_conv *cv = &p->conv[i];
        char shape[96];
        dnn_shape_str(shape, sizeof shape, cv);
        for (int d = 0; d < DNN_NDIR; d++)
            if (cv->used[d])
                dnn_str_addf(&b, "%s%s %s %s %s", b.n ? "; " : "", dnn_dir_name[d], shape,
                             dnn_cv_algo_name(cv, (enum dnn_dir)d), cv->det[d] ? "det" : "nondet");
    }
    trace_config_set(cfg, "cudnn_algos", b.n ? b.s : p ? "none (no convolutions)" : "none (not prepared)");
    int nset[DNN_NDIR] = {0, 0, 0};
    for (int i = 0; p && i < p->ngroup; i++)
        nset[p->group[i].d] += p->group[i].nmem > 0;
    trace_config_setf(cfg, "cudnn_grouped", "%d forward, %d filter-gradient and %d data-gradient sets of "
                      "convolutions, each run as one call%s", nset[DNN_FWD], nset[DNN_BWD_FILTER],
                      nset[DNN_BWD_DATA],
                      getenv("DIVTRACE_CUDNN_FUSE") && !strcmp(getenv("DIVTRACE_CUDNN_FUSE"), "0")
                          ? " (off: DIVTRACE_CUDNN_FUSE=0)" : "");
    free(b.s);
    trace_config_set(cfg, "cudnn_math", "CUDNN_FMA_MATH (float32 FMA kernels only: no TF32)");
    trace_config_set(cfg, "cudnn_pool_fwd", "cudnn (CUDNN_POOLING_MAX_DETERMINISTIC, NaN propagated)");
    trace_config_set(cfg, "cudnn_pool_bwd",
                     dnn_pool_bwd_is_cudnn(c) ? "cudnn (CUDNN_POOLING_MAX: documented nondeterministic, "
                                                "cuDNN's tie rule)"
                                              : "own kernel (first maximum)");
    trace_config_set(cfg, "cudnn_bias_grad",
                     dnn_bias_grad_is_cudnn(c) ? "cudnn (cudnnConvolutionBackwardBias) for rank 4"
                     : c->atomic               ? "own kernel (atomic)"
                                               : "own kernel (tree)");
    trace_config_set(cfg, "cudnn_activations",
                     "cudnn for rank 4: relu, tanh, sigmoid, tanh_bwd, sigmoid_bwd; "
                     "own kernel: relu_bwd and rank 2");
}

const char *gpu_dnn_op_algorithm(struct gpu_ctx *c, const struct graph *g, int i, int *transform)
{
    *transform = 0;
    const struct gpu_dnn_plan *p = c->plan;
    if (!c->dnn || !p || p->g != g || i < 0 || i >= p->n || p->node[i].conv < 0)
        return NULL;
    enum dnn_dir d;
    switch (g->nodes[i].type) {
    case OP_CONV2D: d = DNN_FWD; break;
    case OP_CONV2D_BWD_DATA: d = DNN_BWD_DATA; break;
    case OP_CONV2D_BWD_FILTER: d = DNN_BWD_FILTER; break;
    default: return NULL;
    }
    int ci = p->node[i].group >= 0 ? p->group[p->node[i].group].conv : p->node[i].conv;
    const struct gpu_dnn_conv *cv = &p->conv[ci];
    if (!cv->used[d] || cv->algo[d] < 0)
        return NULL;
    /* an engine's rounding is not known to be a summation's (dnn_conv_choose) */
    *transform = cv->algo[d] == DNN_ALGO_ENGINE || dnn_algo_transform(d, cv->algo[d]);
    return dnn_cv_algo_name(cv, d);
}
