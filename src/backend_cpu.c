/* backend_cpu.c: the cpu backend: float32, OpenBLAS for matrix products,
 * plain sequential loops elsewhere (so every reduction we own has one fixed
 * order, whatever the thread count). Dimension letters: N rows (batch),
 * F features, M/K/N of a matrix product. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_blas.h"
#include "stats.h"
#include "util.h"

struct cpu_ctx {
    int threads;
    char kernel[64];  /* requested kernel, or "" */
};

static int cpu_init(void **ctx, const struct backend_options *opt)
{
    if (opt->threads < 1) {
        dt_error_set("--threads must be at least 1");
        return DT_ERR;
    }
    if (opt->cpu_kernel && cpu_blas_verify_kernel(opt->cpu_kernel) < 0)
        return DT_ERR;
    struct cpu_ctx *c = dt_calloc(1, sizeof *c);
    c->threads = opt->threads;
    if (opt->cpu_kernel)
        snprintf(c->kernel, sizeof c->kernel, "%s", opt->cpu_kernel);
    cpu_blas_set_threads(c->threads);
    *ctx = c;
    return DT_OK;
}

static void cpu_free(void *ctx) { free(ctx); }
static backend_buf *cpu_alloc(void *ctx, size_t n) { return dt_calloc(n, sizeof(float)); }
static void cpu_release(void *ctx, backend_buf *p) { free(p); }

static void cpu_upload(void *ctx, backend_buf *dst, const float *src, size_t n)
{
    memcpy(dst, src, n * sizeof *src);
}

static void cpu_download(void *ctx, float *dst, const backend_buf *src, size_t n)
{
    memcpy(dst, src, n * sizeof *dst);
}

static void cpu_trace(void *ctx, const backend_buf *buf, size_t n, struct trace_oprec *rec)
{
    stats_compute(buf, n, rec);
}

static void cpu_describe(void *ctx, struct trace_config *cfg)
{
    struct cpu_ctx *c = ctx;
    trace_config_setf(cfg, "threads", "%d", c->threads);
    trace_config_set(cfg, "cpu_kernel", c->kernel[0] ? c->kernel : "default");
    trace_config_set(cfg, "openblas_core", cpu_blas_corename());
    trace_config_set(cfg, "openblas_config", cpu_blas_config());
}

/* A kernel on float32 buffers, and the table entry that unwraps them. */
#define CPU_OP(fn)                                                                              \
    static void fn##_f(const struct graph *g, const struct node *nd, float *out,                \
                       const float *const *in, const struct backend_step *st);                  \
    static void fn(void *ctx, const struct graph *g, const struct node *nd, backend_buf *out,    \
                   const backend_buf *const *in, const struct backend_step *st)                 \
    {                                                                                           \
        fn##_f(g, nd, out, (const float *const *)in, st);                                       \
    }                                                                                           \
    static void fn##_f(const struct graph *g, const struct node *nd, float *out,                \
                       const float *const *in, const struct backend_step *st)
#define IN_SHAPE(k, d) (g->nodes[nd->inputs[k]].shape[d])

CPU_OP(cpu_matmul)
{
    /* out (M,N) = op(A) (M,K) . op(B) (K,N), all row-major */
    int ta = nd->p.mm.ta, tb = nd->p.mm.tb;
    int m = (int)nd->shape[0], n = (int)nd->shape[1];
    int k = (int)(ta ? IN_SHAPE(0, 0) : IN_SHAPE(0, 1));
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, 1.0f, in[0], (int)IN_SHAPE(0, 1), in[1], (int)IN_SHAPE(1, 1),
                0.0f, out, n);
}

CPU_OP(cpu_add_bias)
{
    /* out (N,F) = x (N,F) + b (F) */
    size_t rows = nd->shape[0], f = nd->shape[1];
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < f; j++)
            out[r * f + j] = in[0][r * f + j] + in[1][j];
}

CPU_OP(cpu_bias_grad)
{
    /* out (F) = sum over rows r = 0, 1, ... of dy (N,F), in float, in that order */
    size_t rows = IN_SHAPE(0, 0), f = nd->shape[0];
    memset(out, 0, f * sizeof *out);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < f; j++)
            out[j] += in[0][r * f + j];
}

CPU_OP(cpu_sigmoid)
{
    for (size_t i = 0; i < nd->count; i++)
        out[i] = 1.0f / (1.0f + expf(-in[0][i]));
}

CPU_OP(cpu_sigmoid_bwd)
{
    /* in: y, dy */
    for (size_t i = 0; i < nd->count; i++)
        out[i] = in[1][i] * in[0][i] * (1.0f - in[0][i]);
}

CPU_OP(cpu_tanh)
{
    for (size_t i = 0; i < nd->count; i++)
        out[i] = tanhf(in[0][i]);
}

CPU_OP(cpu_tanh_bwd)
{
    for (size_t i = 0; i < nd->count; i++)
        out[i] = in[1][i] * (1.0f - in[0][i] * in[0][i]);
}

CPU_OP(cpu_relu)
{
    for (size_t i = 0; i < nd->count; i++)
        out[i] = in[0][i] > 0.0f ? in[0][i] : 0.0f;
}

CPU_OP(cpu_relu_bwd)
{
    /* in: x, dy */
    for (size_t i = 0; i < nd->count; i++)
        out[i] = in[0][i] > 0.0f ? in[1][i] : 0.0f;
}

CPU_OP(cpu_add)
{
    for (size_t i = 0; i < nd->count; i++)
        out[i] = in[0][i] + in[1][i];
}

CPU_OP(cpu_mse)
{
    /* Squares summed in double in index order, rounded once to float. */
    size_t n = g->nodes[nd->inputs[0]].count;
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)in[0][i] - (double)in[1][i];
        s += d * d;
    }
    out[0] = (float)(s / (double)n);
}

CPU_OP(cpu_mse_bwd)
{
    /* in: p, t [, g]: out = (2/n * g) * (p - t) */
    float scale = (float)(2.0 / (double)nd->count);
    if (nd->ninputs > 2)
        scale *= in[2][0];
    for (size_t i = 0; i < nd->count; i++)
        out[i] = scale * (in[0][i] - in[1][i]);
}

CPU_OP(cpu_sgd)
{
    float lr = nd->p.sgd.lr;
    for (size_t i = 0; i < nd->count; i++)
        out[i] = in[0][i] - lr * in[1][i];
}

CPU_OP(cpu_momentum)
{
    float mu = nd->p.momentum.mu;
    for (size_t i = 0; i < nd->count; i++)
        out[i] = mu * in[0][i] + in[1][i];
}

CPU_OP(cpu_adam_m)
{
    float b1 = nd->p.adam.b1, c = 1.0f - b1;
    for (size_t i = 0; i < nd->count; i++)
        out[i] = b1 * in[0][i] + c * in[1][i];
}

CPU_OP(cpu_adam_v)
{
    float b2 = nd->p.adam.b2, c = 1.0f - b2;
    for (size_t i = 0; i < nd->count; i++)
        out[i] = b2 * in[0][i] + c * in[1][i] * in[1][i];
}

CPU_OP(cpu_adam_p)
{
    /* in: p, m', v'; bias corrections in double, rounded to float once */
    double t = (double)st->step + 1.0;
    float c1 = (float)(1.0 - pow(nd->p.adam.b1, t));
    float c2 = (float)(1.0 - pow(nd->p.adam.b2, t));
    float lr = nd->p.adam.lr, eps = nd->p.adam.eps;
    for (size_t i = 0; i < nd->count; i++)
        out[i] = in[0][i] - lr * (in[1][i] / c1) / (sqrtf(in[2][i] / c2) + eps);
}

CPU_OP(cpu_fill)
{
    for (size_t i = 0; i < nd->count; i++)
        out[i] = nd->p.fill.value;
}

const struct backend_ops backend_cpu = {
    .api_version = BACKEND_API_VERSION,
    .name = "cpu",
    .init = cpu_init,
    .free = cpu_free,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_upload,
    .download = cpu_download,
    .trace = cpu_trace,
    .describe = cpu_describe,
    .sync = NULL,
    .op = {
        [OP_MATMUL] = cpu_matmul,
        [OP_ADD_BIAS] = cpu_add_bias,
        [OP_BIAS_GRAD] = cpu_bias_grad,
        [OP_SIGMOID] = cpu_sigmoid,
        [OP_SIGMOID_BWD] = cpu_sigmoid_bwd,
        [OP_TANH] = cpu_tanh,
        [OP_TANH_BWD] = cpu_tanh_bwd,
        [OP_RELU] = cpu_relu,
        [OP_RELU_BWD] = cpu_relu_bwd,
        [OP_ADD] = cpu_add,
        [OP_MSE] = cpu_mse,
        [OP_MSE_BWD] = cpu_mse_bwd,
        [OP_SGD] = cpu_sgd,
        [OP_MOMENTUM] = cpu_momentum,
        [OP_ADAM_M] = cpu_adam_m,
        [OP_ADAM_V] = cpu_adam_v,
        [OP_ADAM_P] = cpu_adam_p,
        [OP_FILL] = cpu_fill,
    },
};
