/* backend_cpu.c: the cpu backend: float32, OpenBLAS for matrix products
 * and convolutions (cpu_conv.c), plain sequential loops elsewhere (so every
 * reduction we own has one fixed order, whatever the thread count).
 * Dimension letters: N rows (batch), F features, M/K/N of a matrix product;
 * image tensors (N, C, H, W), filters (K, C, R, S). */
#include <math.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "conv_sets.h"
#include "cpu_blas.h"
#include "cpu_conv.h"
#include "cpu_maxpool.h"
#include "cpu_vmath.h"
#include "stats.h"
#include "util.h"

/* A set of convolutions run as one (conv_sets.h): the member that computed
 * the members after it in the last pass, and the count of ops entered then. */
struct cpu_set_pass {
    uint64_t dist[CONV_SET_MAX];
    uint64_t stamp;
    int from;                      /* -1: none yet */
};

struct cpu_ctx {
    int threads;
    char kernel[64];  /* requested kernel, or "" */
    struct cpu_conv_scratch conv;  /* im2col buffer shared by the conv kernels */
    struct cpu_gemm_mode gemm;     /* OpenBLAS's products or the fixed order */
    /* sets of convolutions run as one, with the fixed products only */
    const struct graph *plan;      /* the graph they were found in */
    struct conv_set *sets;
    struct cpu_set_pass *pass;
    int nsets;
    int *set_of;                   /* per node of plan: its set, or -1 */
    uint64_t enters;               /* ops entered by the executor */
    int entered;                   /* the last one, or -1 */
    float *stk;                    /* stacked inputs and outputs of a set */
    size_t stk_cap;
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
    c->gemm.fixed = opt->cpu_gemm && strcmp(opt->cpu_gemm, "fixed") == 0;
    c->gemm.threads = c->threads;
    c->conv.gemm = &c->gemm;
    c->entered = -1;
    /* the fixed products run on their own threads; OpenBLAS's would only
     * spin beside them */
    cpu_blas_set_threads(c->gemm.fixed ? 1 : c->threads);
    *ctx = c;
    return DT_OK;
}

static void cpu_sets_clear(struct cpu_ctx *c)
{
    free(c->sets);
    free(c->pass);
    free(c->set_of);
    c->sets = NULL;
    c->pass = NULL;
    c->set_of = NULL;
    c->nsets = 0;
    c->plan = NULL;
}

static void cpu_free(void *ctx)
{
    struct cpu_ctx *c = ctx;
    if (c) {
        cpu_conv_scratch_free(&c->conv);
        cpu_sets_clear(c);
        free(c->stk);
    }
    free(c);
}
static backend_buf *cpu_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return calloc(n ? n : 1, sizeof(float)); /* NULL: exhausted, reported by the executor */
}
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

/* The products' pool's workers, between jobs (cpu_pool_idle). */
static int cpu_lend_idle(void *ctx, int (*fn)(void *arg), void *arg)
{
    struct cpu_ctx *c = ctx;
    if (!fn) {
        cpu_pool_idle(NULL, arg);
        return 0;
    }
    return c->threads > 1 && cpu_pool_idle(fn, arg) == 0 ? c->threads - 1 : 0;
}

/* Fences of work that is done when each call returns: nothing to mark or
 * wait for. They let `record` run the same loop as on a GPU (the loss and
 * summary of a step read once the next step has run), which the cpu's
 * tests then cover. */
static void cpu_fence(void *ctx, int slot)
{
    (void)ctx;
    (void)slot;
}

static int cpu_fence_wait(void *ctx, int slot)
{
    (void)ctx;
    (void)slot;
    return DT_OK;
}

static void cpu_describe(void *ctx, struct trace_config *cfg)
{
    struct cpu_ctx *c = ctx;
    trace_config_setf(cfg, "threads", "%d", c->threads);
    trace_config_set(cfg, "cpu_kernel", c->kernel[0] ? c->kernel : "default");
    if (c->gemm.fixed) /* (absent: OpenBLAS's products, as in every earlier trace) */
        trace_config_set(cfg, "cpu_gemm", "fixed");
    trace_config_set(cfg, "openblas_core", cpu_blas_corename());
    trace_config_set(cfg, "openblas_config", cpu_blas_config());
}

/* A kernel on float32 buffers, and the table entry that unwraps them. */
#define CPU_OP(fn)                                                                              \
    static void fn##_f(struct cpu_ctx *ctx, const struct graph *g, const struct node *nd,      \
                       float *out, const float *const *in, const struct backend_step *st);      \
    static void fn(void *ctx, const struct graph *g, const struct node *nd, backend_buf *out,    \
                   const backend_buf *const *in, const struct backend_step *st)                 \
    {                                                                                           \
        fn##_f(ctx, g, nd, out, (const float *const *)in, st);                                  \
    }                                                                                           \
    static void fn##_f(struct cpu_ctx *ctx, const struct graph *g, const struct node *nd,      \
                       float *out, const float *const *in, const struct backend_step *st)
#define IN_SHAPE(k, d) (g->nodes[nd->inputs[k]].shape[d])

/* An elementwise kernel over elements [i0, i1), run in parts on the
 * products' threads when the tensor is large (each element is computed the
 * same way whichever thread computes it, so the bits do not depend on the
 * parts). */
typedef void cpu_span_fn(const struct graph *g, const struct node *nd, float *out, const float *const *in,
                         const struct backend_step *st, size_t i0, size_t i1);
#define CPU_SPAN_MIN 16384 /* elements a part, at least: a job costs the pool's wake-up */
struct cpu_span_job {
    cpu_span_fn *fn;
    const struct graph *g;
    const struct node *nd;
    float *out;
    const float *const *in;
    const struct backend_step *st;
    size_t n, align; /* units, and the parts' boundaries a multiple of align */
    int parts;
};

static void cpu_span_part(void *arg, int p, int thread)
{
    const struct cpu_span_job *j = arg;
    (void)thread;
    size_t i0, i1;
    cpu_pool_part(j->n, j->parts, p, j->align, &i0, &i1);
    j->fn(j->g, j->nd, j->out, j->in, j->st, i0, i1);
}

/* fn over n units: elements (unit 1; parts of whole 16-element blocks), or
 * rows, planes or columns of `unit` elements; an element costing `cost`
 * times an addition's (tanh, a pooling window), so that a part is worth a
 * wake-up of the pool */
static void cpu_spans_cost(const struct cpu_ctx *c, cpu_span_fn *fn, const struct graph *g,
                           const struct node *nd, float *out, const float *const *in,
                           const struct backend_step *st, size_t n, size_t unit, size_t cost)
{
    size_t align = unit == 1 ? 16 : 1, most = n * unit * cost / CPU_SPAN_MIN;
    size_t cap = (size_t)c->threads * CPU_POOL_PARTS;
    int parts = most < cap ? (int)most : (int)cap;
    if (c->threads <= 1 || parts <= 1 || n < (size_t)parts * align) {
        fn(g, nd, out, in, st, 0, n);
        return;
    }
    struct cpu_span_job j = {fn, g, nd, out, in, st, n, align, parts};
    cpu_pool_run(c->threads, parts, cpu_span_part, &j);
}

static void cpu_spans(const struct cpu_ctx *c, cpu_span_fn *fn, const struct graph *g, const struct node *nd,
                      float *out, const float *const *in, const struct backend_step *st, size_t n, size_t unit)
{
    cpu_spans_cost(c, fn, g, nd, out, in, st, n, unit, 1);
}

/* An elementwise op: its kernel over [i0, i1) of nd->count elements, each
 * costing `cost` additions (CPU_MAP: one). */
#define CPU_MAP_COST(fn, cost)                                                                   \
    static cpu_span_fn fn##_range;                                                                \
    CPU_OP(fn)                                                                                   \
    {                                                                                            \
        cpu_spans_cost(ctx, fn##_range, g, nd, out, in, st, nd->count, 1, cost);                  \
    }                                                                                            \
    static void fn##_range(const struct graph *g, const struct node *nd, float *out,              \
                          const float *const *in, const struct backend_step *st, size_t i0, size_t i1)
#define CPU_MAP(fn) CPU_MAP_COST(fn, 1)

CPU_OP(cpu_matmul)
{
    /* out (M,N) = op(A) (M,K) . op(B) (K,N), all row-major */
    int ta = nd->p.mm.ta, tb = nd->p.mm.tb;
    int m = (int)nd->shape[0], n = (int)nd->shape[1];
    int k = (int)(ta ? IN_SHAPE(0, 0) : IN_SHAPE(0, 1));
    cpu_gemm(&ctx->gemm, ta, tb, m, n, k, in[0], (int)IN_SHAPE(0, 1), in[1], (int)IN_SHAPE(1, 1),
             0, out, n);
}

/* rows r0 .. r1 - 1 of (N,F), or planes (n, c) of (N,C,H,W) numbered n * C + c */
static void cpu_add_bias_rows(const struct graph *g, const struct node *nd, float *out,
                              const float *const *in, const struct backend_step *st, size_t r0, size_t r1)
{
    size_t f = nd->ndim == 2 ? nd->shape[1] : (size_t)nd->shape[2] * nd->shape[3];
    for (size_t r = r0; r < r1; r++) {
        const float *x = in[0] + r * f;
        float *y = out + r * f;
        if (nd->ndim == 2) {
            for (size_t j = 0; j < f; j++)
                y[j] = x[j] + in[1][j];
        } else {
            float b = in[1][r % nd->shape[1]];
            for (size_t j = 0; j < f; j++)
                y[j] = x[j] + b;
        }
    }
}

CPU_OP(cpu_add_bias)
{
    /* out (N,F) = x (N,F) + b (F); out (N,C,H,W) = x (N,C,H,W) + b (C) */
    if (nd->ndim == 2)
        cpu_spans(ctx, cpu_add_bias_rows, g, nd, out, in, st, nd->shape[0], nd->shape[1]);
    else
        cpu_spans(ctx, cpu_add_bias_rows, g, nd, out, in, st, (size_t)nd->shape[0] * nd->shape[1],
                  (size_t)nd->shape[2] * nd->shape[3]);
}

/* out[j0 .. j1 - 1]: out (F) = sum over rows r = 0, 1, ... of dy (N,F), in
 * float, in that order; out (C) = sum over n, then h, then w (that
 * nesting) of dy (N,C,H,W), likewise */
static void cpu_bias_grad_cols(const struct graph *g, const struct node *nd, float *out,
                               const float *const *in, const struct backend_step *st, size_t j0, size_t j1)
{
    memset(out + j0, 0, (j1 - j0) * sizeof *out);
    if (g->nodes[nd->inputs[0]].ndim == 2) {
        size_t rows = IN_SHAPE(0, 0), f = nd->shape[0];
        for (size_t r = 0; r < rows; r++)
            for (size_t j = j0; j < j1; j++)
                out[j] += in[0][r * f + j];
        return;
    }
    size_t n = IN_SHAPE(0, 0), c = IN_SHAPE(0, 1), hw = (size_t)IN_SHAPE(0, 2) * IN_SHAPE(0, 3);
    for (size_t i = 0; i < n; i++) {
        size_t k = j0;
        /* eight channels' sums side by side, each in its own order: one
         * chain of additions waits for each addition before it, eight
         * chains keep the adder busy */
        for (; k + 8 <= j1; k += 8) {
            const float *d = in[0] + (i * c + k) * hw;
            float s0 = out[k], s1 = out[k + 1], s2 = out[k + 2], s3 = out[k + 3];
            float s4 = out[k + 4], s5 = out[k + 5], s6 = out[k + 6], s7 = out[k + 7];
            for (size_t j = 0; j < hw; j++) {
                s0 += d[j];
                s1 += d[hw + j];
                s2 += d[2 * hw + j];
                s3 += d[3 * hw + j];
                s4 += d[4 * hw + j];
                s5 += d[5 * hw + j];
                s6 += d[6 * hw + j];
                s7 += d[7 * hw + j];
            }
            out[k] = s0, out[k + 1] = s1, out[k + 2] = s2, out[k + 3] = s3;
            out[k + 4] = s4, out[k + 5] = s5, out[k + 6] = s6, out[k + 7] = s7;
        }
        for (; k < j1; k++) {
            const float *d = in[0] + (i * c + k) * hw;
            float s = out[k];
            for (size_t j = 0; j < hw; j++)
                s += d[j];
            out[k] = s;
        }
    }
}

CPU_OP(cpu_bias_grad)
{
    const struct node *x = &g->nodes[nd->inputs[0]];
    cpu_spans(ctx, cpu_bias_grad_cols, g, nd, out, in, st, nd->shape[0], x->count / nd->shape[0]);
}

CPU_MAP(cpu_sigmoid)
{
    /* 1 / (1 + e^-x), with divtrace's expf (cpu_vmath.c) */
    cpu_sigmoid_span(CPU_VMATH_BEST, out + i0, in[0] + i0, i1 - i0);
}

CPU_MAP(cpu_sigmoid_bwd)
{
    /* in: y, dy */
    for (size_t i = i0; i < i1; i++)
        out[i] = in[1][i] * in[0][i] * (1.0f - in[0][i]);
}

CPU_MAP_COST(cpu_tanh, 16) /* the C library's tanhf: about 20 additions' time an element */
{
    for (size_t i = i0; i < i1; i++)
        out[i] = tanhf(in[0][i]);
}

CPU_MAP(cpu_tanh_bwd)
{
    for (size_t i = i0; i < i1; i++)
        out[i] = in[1][i] * (1.0f - in[0][i] * in[0][i]);
}

CPU_MAP(cpu_relu)
{
    for (size_t i = i0; i < i1; i++)
        out[i] = in[0][i] > 0.0f ? in[0][i] : 0.0f;
}

CPU_MAP(cpu_relu_bwd)
{
    /* in: x, dy (read whatever x is, so that the loop has no branch and
     * runs in vectors: a select, the same bits) */
    for (size_t i = i0; i < i1; i++) {
        float d = in[1][i];
        out[i] = in[0][i] > 0.0f ? d : 0.0f;
    }
}

CPU_MAP(cpu_add)
{
    for (size_t i = i0; i < i1; i++)
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

CPU_MAP(cpu_mse_bwd)
{
    /* in: p, t [, g]: out = (2/n * g) * (p - t) */
    float scale = (float)(2.0 / (double)nd->count);
    if (nd->ninputs > 2)
        scale *= in[2][0];
    for (size_t i = i0; i < i1; i++)
        out[i] = scale * (in[0][i] - in[1][i]);
}

CPU_MAP(cpu_sgd)
{
    float lr = nd->p.sgd.lr;
    for (size_t i = i0; i < i1; i++)
        out[i] = in[0][i] - lr * in[1][i];
}

CPU_MAP(cpu_momentum)
{
    float mu = nd->p.momentum.mu;
    for (size_t i = i0; i < i1; i++)
        out[i] = mu * in[0][i] + in[1][i];
}

CPU_MAP(cpu_adam_m)
{
    float b1 = nd->p.adam.b1, c = 1.0f - b1;
    for (size_t i = i0; i < i1; i++)
        out[i] = b1 * in[0][i] + c * in[1][i];
}

CPU_MAP(cpu_adam_v)
{
    float b2 = nd->p.adam.b2, c = 1.0f - b2;
    for (size_t i = i0; i < i1; i++)
        out[i] = b2 * in[0][i] + c * in[1][i] * in[1][i];
}

CPU_MAP(cpu_adam_p)
{
    /* in: p, m', v'; bias corrections in double, rounded to float once */
    double t = (double)st->step + 1.0;
    float c1 = (float)(1.0 - pow(nd->p.adam.b1, t));
    float c2 = (float)(1.0 - pow(nd->p.adam.b2, t));
    float lr = nd->p.adam.lr, eps = nd->p.adam.eps;
    size_t i = i0;
#if defined(__SSE2__)
    /* four at a time: the same operations, each rounded once, as the loop
     * below (sqrtf's errno keeps the compiler from doing it) */
    const __m128 vc1 = _mm_set1_ps(c1), vc2 = _mm_set1_ps(c2), vlr = _mm_set1_ps(lr), veps = _mm_set1_ps(eps);
    for (; i + 4 <= i1; i += 4) {
        __m128 step = _mm_mul_ps(vlr, _mm_div_ps(_mm_loadu_ps(in[1] + i), vc1));
        __m128 den = _mm_add_ps(_mm_sqrt_ps(_mm_div_ps(_mm_loadu_ps(in[2] + i), vc2)), veps);
        _mm_storeu_ps(out + i, _mm_sub_ps(_mm_loadu_ps(in[0] + i), _mm_div_ps(step, den)));
    }
#endif
    for (; i < i1; i++)
        out[i] = in[0][i] - lr * (in[1][i] / c1) / (sqrtf(in[2][i] / c2) + eps);
}

CPU_MAP(cpu_fill)
{
    for (size_t i = i0; i < i1; i++)
        out[i] = nd->p.fill.value;
}

/* ---- image ops (PredNet) -------------------------------------------------- */

static struct cpu_conv_shape cpu_conv_shape_of(uint32_t n, uint32_t c, uint32_t h, uint32_t w,
                                               uint32_t k, uint32_t r, uint32_t s)
{
    return (struct cpu_conv_shape){(int)n, (int)c, (int)h, (int)w, (int)k, (int)r, (int)s};
}

/* ---- sets of convolutions run as one (the fixed products) ------------------ */

/* With the fixed products, the sets of conv_sets.h run as one product:
 * the forward of filters stacked along K, the filter gradient of output
 * gradients stacked along channels. Each element of a product is the same
 * chain of fused multiply-adds in the same order whatever the rows or
 * columns beside it (cpu_gemm.c), so every member's output has the bits of
 * its own convolution; what changes is the work: the im2col made and the
 * strips of B copied once for the set, and products tall enough for the
 * kernel's tiles and the threads' grid. DIVTRACE_CPU_CONV_SETS=0 runs each
 * convolution alone. */
static int cpu_prepare(void *ctx, const struct graph *g)
{
    struct cpu_ctx *c = ctx;
    cpu_sets_clear(c);
    const char *env = getenv("DIVTRACE_CPU_CONV_SETS");
    if (!c->gemm.fixed || (env && strcmp(env, "0") == 0))
        return 0;
    c->plan = g;
    c->nsets = conv_sets_find(g, NULL, NULL, NULL, &c->sets);
    c->pass = dt_calloc((size_t)(c->nsets ? c->nsets : 1), sizeof *c->pass);
    c->set_of = dt_calloc((size_t)(g->n ? g->n : 1), sizeof *c->set_of);
    for (int i = 0; i < g->n; i++)
        c->set_of[i] = -1;
    for (int s = 0; s < c->nsets; s++) {
        for (int k = 0; k < c->sets[s].nmem; k++)
            c->set_of[c->sets[s].mem[k]] = s;
        conv_set_dists(g, &c->sets[s], c->pass[s].dist);
        c->pass[s].from = -1;
    }
    return 0;
}

static void cpu_op_enter(void *ctx, const struct graph *g, int i)
{
    struct cpu_ctx *c = ctx;
    (void)g;
    c->entered = i;
    c->enters++;
}

int cpu_backend_conv_sets(void *ctx)
{
    return ((struct cpu_ctx *)ctx)->nsets;
}

static float *cpu_stack(struct cpu_ctx *c, size_t n)
{
    if (n > c->stk_cap) {
        free(c->stk);
        c->stk = dt_malloc(n * sizeof *c->stk);
        c->stk_cap = n;
    }
    return c->stk;
}

/* Members from .. nmem-1 of set s as one convolution: inputs stacked, the
 * product, each member's part copied to its buffer. */
static void cpu_set_run(struct cpu_ctx *c, const struct graph *g, const struct conv_set *s, int from,
                        backend_buf *const *bufs)
{
    const struct node *n0 = &g->nodes[s->mem[from]];
    const struct node *xn = &g->nodes[n0->inputs[0]], *bn = &g->nodes[n0->inputs[1]];
    size_t m = (size_t)(s->nmem - from);
    const float *x = bufs[n0->inputs[0]];
    if (s->type == OP_CONV2D) {
        /* x (N,C,H,W), w (K,C,R,S) -> y (N,K,H,W) */
        struct cpu_conv_shape sh = cpu_conv_shape_of(xn->shape[0], xn->shape[1], xn->shape[2], xn->shape[3],
                                                     bn->shape[0] * (uint32_t)m, bn->shape[2], bn->shape[3]);
        size_t filt = bn->count, part = (size_t)bn->shape[0] * xn->shape[2] * xn->shape[3];
        float *w = cpu_stack(c, m * filt + (size_t)sh.n * m * part), *y = w + m * filt;
        for (size_t j = 0; j < m; j++)
            memcpy(w + j * filt, bufs[g->nodes[s->mem[from + (int)j]].inputs[1]], filt * sizeof *w);
        cpu_conv_forward(&c->conv, y, x, w, &sh);
        for (size_t j = 0; j < m; j++)
            for (size_t n = 0; n < (size_t)sh.n; n++)
                memcpy((float *)bufs[s->mem[from + (int)j]] + n * part, y + (n * m + j) * part, part * sizeof *y);
        return;
    }
    /* x (N,C,H,W), dy (N,K,H,W) -> dw (K,C,R,S) */
    struct cpu_conv_shape sh = cpu_conv_shape_of(xn->shape[0], xn->shape[1], xn->shape[2], xn->shape[3],
                                                 bn->shape[1] * (uint32_t)m, n0->p.conv.r, n0->p.conv.s);
    size_t part = (size_t)bn->shape[1] * bn->shape[2] * bn->shape[3], filt = g->nodes[s->mem[from]].count;
    float *dy = cpu_stack(c, (size_t)sh.n * m * part + m * filt), *dw = dy + (size_t)sh.n * m * part;
    for (size_t j = 0; j < m; j++) {
        const float *src = bufs[g->nodes[s->mem[from + (int)j]].inputs[1]];
        for (size_t n = 0; n < (size_t)sh.n; n++)
            memcpy(dy + (n * m + j) * part, src + n * part, part * sizeof *dy);
    }
    cpu_conv_bwd_filter(&c->conv, dw, x, dy, &sh);
    for (size_t j = 0; j < m; j++)
        memcpy(bufs[s->mem[from + (int)j]], dw + j * filt, filt * sizeof *dw);
}

/* Node i's kernel when i is in a set: 1 when its output is made (by this
 * call, with the members after it, or by an earlier member in this pass),
 * 0 when it must run alone. In an executor's pass every op is entered in
 * graph order, so member k's output was made by member `from` of this pass
 * exactly when k comes after it and the count of entered ops moved by the
 * ops between them. Otherwise (the first member; with a fault that
 * replaces an earlier member's kernel, the first one called) it makes
 * itself and the members after it, never an earlier member's output (a
 * planted fault there stays); outside a pass (no op entered, or no
 * buffers) it runs alone. */
static int cpu_set_member(struct cpu_ctx *c, const struct graph *g, const struct node *nd,
                          const struct backend_step *st)
{
    int i = (int)(nd - g->nodes);
    if (g != c->plan || !c->set_of || c->set_of[i] < 0 || c->entered != i)
        return 0;
    const struct conv_set *s = &c->sets[c->set_of[i]];
    struct cpu_set_pass *p = &c->pass[c->set_of[i]];
    int k = 0;
    while (s->mem[k] != i)
        k++;
    if (p->from >= 0 && p->from < k && c->enters == p->stamp + (p->dist[k] - p->dist[p->from]))
        return 1;
    if (!st || !st->bufs || k == s->nmem - 1)
        return 0;
    cpu_set_run(c, g, s, k, st->bufs);
    p->from = k;
    p->stamp = c->enters;
    return 1;
}

CPU_OP(cpu_conv2d)
{
    /* in: x (N,C,H,W), w (K,C,R,S) */
    if (cpu_set_member(ctx, g, nd, st))
        return;
    struct cpu_conv_shape sh = cpu_conv_shape_of(IN_SHAPE(0, 0), IN_SHAPE(0, 1), IN_SHAPE(0, 2),
                                                 IN_SHAPE(0, 3), IN_SHAPE(1, 0), IN_SHAPE(1, 2),
                                                 IN_SHAPE(1, 3));
    cpu_conv_forward(&ctx->conv, out, in[0], in[1], &sh);
}

CPU_OP(cpu_conv2d_bwd_data)
{
    /* in: m pairs dy (N,K,H,W), w (K,C,R,S); out (N,C,H,W) */
    struct cpu_conv_shape sh = cpu_conv_shape_of(IN_SHAPE(0, 0), IN_SHAPE(1, 1), IN_SHAPE(0, 2),
                                                 IN_SHAPE(0, 3), IN_SHAPE(0, 1), IN_SHAPE(1, 2),
                                                 IN_SHAPE(1, 3));
    const float *dy[CPU_CONV_MAX_PAIRS], *w[CPU_CONV_MAX_PAIRS];
    int m = nd->ninputs / 2;
    for (int j = 0; j < m; j++) {
        dy[j] = in[2 * j];
        w[j] = in[2 * j + 1];
    }
    cpu_conv_bwd_data(&ctx->conv, out, dy, w, m, &sh);
}

CPU_OP(cpu_conv2d_bwd_filter)
{
    /* in: x (N,C,H,W), dy (N,K,H,W); out (K,C,R,S) */
    if (cpu_set_member(ctx, g, nd, st))
        return;
    struct cpu_conv_shape sh = cpu_conv_shape_of(IN_SHAPE(0, 0), IN_SHAPE(0, 1), IN_SHAPE(0, 2),
                                                 IN_SHAPE(0, 3), IN_SHAPE(1, 1), nd->p.conv.r,
                                                 nd->p.conv.s);
    cpu_conv_bwd_filter(&ctx->conv, out, in[0], in[1], &sh);
}

/* planes [p0, p1) of (N*C) */
static void cpu_maxpool2_span(const struct graph *g, const struct node *nd, float *out, const float *const *in,
                              const struct backend_step *st, size_t p0, size_t p1)
{
    size_t oh = nd->shape[2], ow = nd->shape[3];
    cpu_maxpool2_planes(CPU_VMATH_BEST, out + p0 * oh * ow, in[0] + p0 * 4 * oh * ow, p1 - p0, oh, ow);
}

CPU_OP(cpu_maxpool2)
{
    /* in: x (N,C,H,W); out (N,C,H/2,W/2), the chosen element copied bit for bit */
    cpu_spans_cost(ctx, cpu_maxpool2_span, g, nd, out, in, st, (size_t)nd->shape[0] * nd->shape[1],
                   (size_t)nd->shape[2] * nd->shape[3], 4);
}

static void cpu_maxpool2_bwd_span(const struct graph *g, const struct node *nd, float *out,
                                  const float *const *in, const struct backend_step *st, size_t p0, size_t p1)
{
    size_t oh = IN_SHAPE(1, 2), ow = IN_SHAPE(1, 3);
    cpu_maxpool2_bwd_planes(CPU_VMATH_BEST, out + p0 * 4 * oh * ow, in[0] + p0 * 4 * oh * ow, in[1] + p0 * oh * ow,
                            p1 - p0, oh, ow);
}

CPU_OP(cpu_maxpool2_bwd)
{
    /* in: x (N,C,H,W), dy (N,C,H/2,W/2); out (N,C,H,W): dy at each j*, +0 elsewhere */
    cpu_spans_cost(ctx, cpu_maxpool2_bwd_span, g, nd, out, in, st, (size_t)nd->shape[0] * nd->shape[1],
                   (size_t)nd->shape[2] * nd->shape[3], 2);
}

CPU_OP(cpu_upsample2)
{
    /* in: x (N,C,H,W); out (N,C,2H,2W) */
    size_t planes = (size_t)nd->shape[0] * nd->shape[1], h = IN_SHAPE(0, 2), w = IN_SHAPE(0, 3);
    for (size_t p = 0; p < planes; p++)
        for (size_t i = 0; i < 2 * h; i++) {
            const float *src = in[0] + (p * h + i / 2) * w;
            float *dst = out + (p * 2 * h + i) * 2 * w;
            for (size_t j = 0; j < 2 * w; j++)
                dst[j] = src[j / 2];
        }
}

CPU_OP(cpu_upsample2_bwd)
{
    /* in: dy (N,C,2H,2W); out (N,C,H,W) = ((a + b) + c) + d over each 2x2 block,
     * a b on the upper row, c d on the lower */
    size_t planes = (size_t)nd->shape[0] * nd->shape[1], h = nd->shape[2], w = nd->shape[3];
    for (size_t p = 0; p < planes; p++)
        for (size_t i = 0; i < h; i++) {
            const float *up = in[0] + (p * 2 * h + 2 * i) * 2 * w, *lo = up + 2 * w;
            float *dst = out + (p * h + i) * w;
            for (size_t j = 0; j < w; j++)
                dst[j] = ((up[2 * j] + up[2 * j + 1]) + lo[2 * j]) + lo[2 * j + 1];
        }
}

CPU_OP(cpu_concat)
{
    /* in: x_k (N,C_k,H,W), k = 0 .. ninputs-1; out (N, sum C_k, H, W) */
    size_t n = nd->shape[0], hw = (size_t)nd->shape[2] * nd->shape[3];
    float *dst = out;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < nd->ninputs; k++) {
            size_t len = (size_t)IN_SHAPE(k, 1) * hw;
            memcpy(dst, in[k] + i * len, len * sizeof *dst);
            dst += len;
        }
}

CPU_OP(cpu_slice)
{
    /* in: x (N,total,H,W); out (N,n,H,W) = channels c0 .. c0+n-1 */
    size_t n = nd->shape[0], hw = (size_t)nd->shape[2] * nd->shape[3];
    size_t total = IN_SHAPE(0, 1), c0 = nd->p.slice.c0, cn = nd->p.slice.n;
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * cn * hw, in[0] + (i * total + c0) * hw, cn * hw * sizeof *out);
}

CPU_OP(cpu_slice_bwd)
{
    /* in: dy (N,n,H,W); out (N,total,H,W): dy in channels c0 .. c0+n-1, +0 elsewhere */
    size_t n = nd->shape[0], hw = (size_t)nd->shape[2] * nd->shape[3];
    size_t total = nd->shape[1], c0 = nd->p.slice.c0, cn = nd->p.slice.n;
    memset(out, 0, nd->count * sizeof *out);
    for (size_t i = 0; i < n; i++)
        memcpy(out + (i * total + c0) * hw, in[0] + i * cn * hw, cn * hw * sizeof *out);
}

/* t = 0.2f x + 0.5f as two float32 roundings (-std=c11 keeps GCC from
 * contracting them into an fma). */
static float cpu_hard_sigmoid_t(float x)
{
    float t = 0.2f * x;
    t = t + 0.5f;
    return t;
}

CPU_MAP(cpu_hard_sigmoid)
{
    for (size_t i = i0; i < i1; i++) {
        float t = cpu_hard_sigmoid_t(in[0][i]);
        out[i] = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
    }
}

CPU_MAP(cpu_hard_sigmoid_bwd)
{
    /* in: x, dy */
    size_t i = i0;
#if defined(__SSE2__)
    /* four at a time (the compiler keeps the loop's two compares as a
     * branch): t as two roundings, 0.2f dy where 0 <= t <= 1 (ordered
     * compares: false for NaN), +0 (no bits set) elsewhere */
    const __m128 k02 = _mm_set1_ps(0.2f), k05 = _mm_set1_ps(0.5f), zero = _mm_setzero_ps(),
                 one = _mm_set1_ps(1.0f);
    for (; i + 4 <= i1; i += 4) {
        __m128 t = _mm_add_ps(_mm_mul_ps(k02, _mm_loadu_ps(in[0] + i)), k05);
        __m128 in01 = _mm_and_ps(_mm_cmpge_ps(t, zero), _mm_cmple_ps(t, one));
        _mm_storeu_ps(out + i, _mm_and_ps(in01, _mm_mul_ps(k02, _mm_loadu_ps(in[1] + i))));
    }
#endif
    for (; i < i1; i++) {
        float t = cpu_hard_sigmoid_t(in[0][i]);
        out[i] = 0.0f <= t && t <= 1.0f ? 0.2f * in[1][i] : 0.0f;
    }
}

CPU_MAP(cpu_satlu)
{
    float m = nd->p.satlu.max;
    for (size_t i = i0; i < i1; i++)
        out[i] = in[0][i] > m ? m : in[0][i];
}

CPU_MAP(cpu_satlu_bwd)
{
    /* in: x, dy */
    float m = nd->p.satlu.max;
    for (size_t i = i0; i < i1; i++) {
        float d = in[1][i]; /* no branch: vectors */
        out[i] = in[0][i] <= m ? d : 0.0f;
    }
}

CPU_MAP(cpu_sub)
{
    for (size_t i = i0; i < i1; i++)
        out[i] = in[0][i] - in[1][i];
}

CPU_MAP(cpu_neg)
{
    /* the sign bit flipped, as a bit operation (NaN payloads kept) */
    for (size_t i = i0; i < i1; i++) {
        uint32_t u;
        memcpy(&u, &in[0][i], sizeof u);
        u ^= UINT32_C(0x80000000);
        memcpy(&out[i], &u, sizeof u);
    }
}

CPU_MAP(cpu_mul)
{
    for (size_t i = i0; i < i1; i++)
        out[i] = in[0][i] * in[1][i];
}

CPU_OP(cpu_mean)
{
    /* summed in double in index order, rounded to float once */
    size_t n = g->nodes[nd->inputs[0]].count;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)in[0][i];
    out[0] = (float)((double)nd->p.mean.scale * (s / (double)n));
}

CPU_OP(cpu_mean_bwd)
{
    /* in: g (1); out (shape of the mean's x) */
    float v = (float)((double)nd->p.mean.scale * (double)in[0][0] / (double)nd->count);
    for (size_t i = 0; i < nd->count; i++)
        out[i] = v;
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
    .fence = cpu_fence,
    .fence_wait = cpu_fence_wait,
    .prepare = cpu_prepare,
    .op_enter = cpu_op_enter,
    .lend_idle = cpu_lend_idle,
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
        [OP_CONV2D] = cpu_conv2d,
        [OP_CONV2D_BWD_DATA] = cpu_conv2d_bwd_data,
        [OP_CONV2D_BWD_FILTER] = cpu_conv2d_bwd_filter,
        [OP_MAXPOOL2] = cpu_maxpool2,
        [OP_MAXPOOL2_BWD] = cpu_maxpool2_bwd,
        [OP_UPSAMPLE2] = cpu_upsample2,
        [OP_UPSAMPLE2_BWD] = cpu_upsample2_bwd,
        [OP_CONCAT] = cpu_concat,
        [OP_SLICE] = cpu_slice,
        [OP_SLICE_BWD] = cpu_slice_bwd,
        [OP_HARD_SIGMOID] = cpu_hard_sigmoid,
        [OP_HARD_SIGMOID_BWD] = cpu_hard_sigmoid_bwd,
        [OP_SATLU] = cpu_satlu,
        [OP_SATLU_BWD] = cpu_satlu_bwd,
        [OP_SUB] = cpu_sub,
        [OP_NEG] = cpu_neg,
        [OP_MUL] = cpu_mul,
        [OP_MEAN] = cpu_mean,
        [OP_MEAN_BWD] = cpu_mean_bwd,
    },
};
