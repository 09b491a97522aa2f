/* variant.c: valid float32 rewrites of ops (see variant.h). Each is what
 * some framework's code path does: another summation order or blocking,
 * float32 accumulation where the cpu backend sums in double, an explicit
 * FMA, another formula for the same function. They differ from the cpu
 * backend in the last bits, never by more than the admissible evaluations
 * of reference/oracle.c allow; tests/test_variant.c holds them to that.
 * Dimension letters: N rows (batch), F features, M/K/N of a matrix
 * product; images (N, C, H, W), filters (K, C, R, S). */
#include "variant.h"

#include <math.h>
#include <stdio.h>

#define VARIANT_OP(fn) static void fn(void *ctx, const struct graph *g, const struct node *nd, \
                                      backend_buf *outb, const backend_buf *const *inb,         \
                                      const struct backend_step *st)
#define OUT ((float *)outb)
#define IN(k) ((const float *)inb[k])
#define IN_SHAPE(k, d) (g->nodes[nd->inputs[k]].shape[d])

/* The K-blocking of variant_matmul and the leaf size of the pairwise sums:
 * any values are valid; these differ from OpenBLAS's and the cpu's. */
#define VARIANT_KB 16
#define VARIANT_LEAF 8

VARIANT_OP(variant_matmul)
{
    /* out (M,N) = op(A) (M,K) . op(B) (K,N): each block of VARIANT_KB
     * products accumulated by fmaf from 0, the blocks' sums added in order */
    int ta = nd->p.mm.ta, tb = nd->p.mm.tb;
    size_t m = nd->shape[0], n = nd->shape[1], k = ta ? IN_SHAPE(0, 0) : IN_SHAPE(0, 1);
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (size_t l0 = 0; l0 < k; l0 += VARIANT_KB) {
                float b = 0.0f;
                for (size_t l = l0; l < k && l < l0 + VARIANT_KB; l++)
                    b = fmaf(ta ? IN(0)[l * m + i] : IN(0)[i * k + l],
                             tb ? IN(1)[j * k + l] : IN(1)[l * n + j], b);
                s += b;
            }
            OUT[i * n + j] = s;
        }
}

VARIANT_OP(variant_bias_grad)
{
    /* out (F) = sum over rows of dy (N,F), last row first; out (C) = sum over
     * n, h, w of dy (N,C,H,W), last element first; float32 */
    const struct node *dy = &g->nodes[nd->inputs[0]];
    size_t rows = dy->shape[0], f = nd->shape[0];
    size_t hw = dy->ndim == 4 ? (size_t)dy->shape[2] * dy->shape[3] : 1;
    for (size_t j = 0; j < f; j++) {
        float s = 0.0f;
        for (size_t r = rows; r-- > 0;)
            for (size_t q = hw; q-- > 0;)
                s += IN(0)[(r * f + j) * hw + q];
        OUT[j] = s;
    }
}

VARIANT_OP(variant_sigmoid)
{
    /* XLA's logistic: 0.5 tanh(x / 2) + 0.5 */
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = 0.5f * tanhf(0.5f * IN(0)[i]) + 0.5f;
}

VARIANT_OP(variant_sigmoid_bwd)
{
    /* PyTorch's order: (dy (1 - y)) y; inputs y, dy */
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = (IN(1)[i] * (1.0f - IN(0)[i])) * IN(0)[i];
}

VARIANT_OP(variant_tanh)
{
    /* -e / (2 + e), e = expm1(-2|x|), with the sign of x (no overflow, no
     * cancellation near 0) */
    for (size_t i = 0; i < nd->count; i++) {
        float x = IN(0)[i], e = expm1f(-2.0f * fabsf(x));
        OUT[i] = copysignf(-e / (e + 2.0f), x);
    }
}

VARIANT_OP(variant_tanh_bwd)
{
    /* dy (1 - y y) with 1 - y y as one FMA; inputs y, dy */
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = IN(1)[i] * fmaf(-IN(0)[i], IN(0)[i], 1.0f);
}

/* The float32 pairwise sum of (p - t)^2 over [lo, hi). */
static float variant_pairwise_sq(const float *p, const float *t, size_t lo, size_t hi)
{
    if (hi - lo <= VARIANT_LEAF) {
        float s = 0.0f;
        for (size_t i = lo; i < hi; i++) {
            float d = p[i] - t[i];
            s += d * d;
        }
        return s;
    }
    size_t mid = lo + (hi - lo) / 2;
    return variant_pairwise_sq(p, t, lo, mid) + variant_pairwise_sq(p, t, mid, hi);
}

VARIANT_OP(variant_mse)
{
    /* squares summed pairwise in float32, times 1/n */
    size_t n = g->nodes[nd->inputs[0]].count;
    OUT[0] = variant_pairwise_sq(IN(0), IN(1), 0, n) * (1.0f / (float)n);
}

VARIANT_OP(variant_mse_bwd)
{
    /* ((p - t) g) 2 / n per element, float32; inputs p, t [, g (1)] */
    float gv = nd->ninputs > 2 ? IN(2)[0] : 1.0f, n = (float)nd->count;
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = (IN(0)[i] - IN(1)[i]) * gv * 2.0f / n;
}

VARIANT_OP(variant_sgd)
{
    /* p - lr g as one FMA; inputs p, g */
    float lr = nd->p.sgd.lr;
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = fmaf(-lr, IN(1)[i], IN(0)[i]);
}

VARIANT_OP(variant_momentum)
{
    /* mu buf + g as one FMA; inputs buf, g */
    float mu = nd->p.momentum.mu;
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = fmaf(mu, IN(0)[i], IN(1)[i]);
}

VARIANT_OP(variant_adam_m)
{
    /* PyTorch's m.lerp_(g, 1 - b1): m + w (g - m), or g - (g - m)(1 - w)
     * for w >= 0.5; inputs m, g */
    float w = 1.0f - nd->p.adam.b1;
    for (size_t i = 0; i < nd->count; i++) {
        float m = IN(0)[i], gv = IN(1)[i];
        OUT[i] = fabsf(w) < 0.5f ? m + w * (gv - m) : gv - (gv - m) * (1.0f - w);
    }
}

VARIANT_OP(variant_adam_v)
{
    /* b2 v + c (g g) as one FMA, c = 1 - b2; inputs v, g */
    float b2 = nd->p.adam.b2, c = 1.0f - b2;
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = fmaf(b2, IN(0)[i], c * (IN(1)[i] * IN(1)[i]));
}

VARIANT_OP(variant_adam_p)
{
    /* the bias corrections folded into the step, lr sqrt(c2) / c1, with
     * eps scaled to match (Kingma and Ba's eps-hat = eps sqrt(c2)), and
     * b^t by powf in float32 as Keras computes it; inputs p, m, v */
    float t = (float)(st->step + 1);
    float c1 = 1.0f - powf(nd->p.adam.b1, t), c2 = 1.0f - powf(nd->p.adam.b2, t);
    float sc = sqrtf(c2), step = nd->p.adam.lr * sc / c1, eh = nd->p.adam.eps * sc;
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = IN(0)[i] - step * (IN(1)[i] / (sqrtf(IN(2)[i]) + eh));
}

VARIANT_OP(variant_hard_sigmoid)
{
    /* t = 0.2 x + 0.5 as one FMA, then the clip */
    for (size_t i = 0; i < nd->count; i++) {
        float t = fmaf(0.2f, IN(0)[i], 0.5f);
        OUT[i] = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
    }
}

VARIANT_OP(variant_hard_sigmoid_bwd)
{
    /* the mask on t = 0.2 x + 0.5 as one FMA (it may differ from op.h's
     * two roundings where t is within rounding of 0 or 1); inputs x, dy */
    for (size_t i = 0; i < nd->count; i++) {
        float t = fmaf(0.2f, IN(0)[i], 0.5f);
        OUT[i] = 0.0f <= t && t <= 1.0f ? 0.2f * IN(1)[i] : 0.0f;
    }
}

VARIANT_OP(variant_upsample2_bwd)
{
    /* in: dy (N,C,2H,2W); out (N,C,H,W): each 2x2 block as (a + c) + (b + d),
     * a b on the upper row, c d on the lower: the columns first */
    size_t planes = (size_t)nd->shape[0] * nd->shape[1], h = nd->shape[2], w = nd->shape[3];
    for (size_t p = 0; p < planes; p++)
        for (size_t i = 0; i < h; i++) {
            const float *up = IN(0) + (p * 2 * h + 2 * i) * 2 * w, *lo = up + 2 * w;
            for (size_t j = 0; j < w; j++)
                OUT[(p * h + i) * w + j] =
                    (up[2 * j] + lo[2 * j]) + (up[2 * j + 1] + lo[2 * j + 1]);
        }
}

VARIANT_OP(variant_conv2d)
{
    /* in: x (N,C,H,W), w (K,C,R,S); out (N,K,H,W): direct loops, the taps
     * (r, s) outermost and channels innermost, float32 by fmaf */
    size_t n = IN_SHAPE(0, 0), c = IN_SHAPE(0, 1), h = IN_SHAPE(0, 2), w = IN_SHAPE(0, 3);
    size_t k = IN_SHAPE(1, 0), r = IN_SHAPE(1, 2), s = IN_SHAPE(1, 3);
    for (size_t b = 0; b < n; b++)
        for (size_t ko = 0; ko < k; ko++)
            for (size_t y = 0; y < h; y++)
                for (size_t x = 0; x < w; x++) {
                    float acc = 0.0f;
                    for (size_t i = 0; i < r; i++)
                        for (size_t j = 0; j < s; j++) {
                            long yy = (long)y + (long)i - (long)(r / 2);
                            long xq = (long)x + (long)j - (long)(s / 2);
                            if (yy < 0 || yy >= (long)h || xq < 0 || xq >= (long)w)
                                continue;
                            for (size_t ci = 0; ci < c; ci++)
                                acc = fmaf(IN(0)[((b * c + ci) * h + (size_t)yy) * w + (size_t)xq],
                                           IN(1)[((ko * c + ci) * r + i) * s + j], acc);
                        }
                    OUT[((b * k + ko) * h + y) * w + x] = acc;
                }
}

VARIANT_OP(variant_conv2d_bwd_data)
{
    /* in: m pairs dy (N,K,H,W), w (K,C,R,S); out (N,C,H,W): direct loops
     * over the pairs and k, both from the last, float32 */
    size_t n = nd->shape[0], c = nd->shape[1], h = nd->shape[2], w = nd->shape[3];
    size_t k = IN_SHAPE(1, 0), r = IN_SHAPE(1, 2), s = IN_SHAPE(1, 3), m = (size_t)nd->ninputs / 2;
    for (size_t b = 0; b < n; b++)
        for (size_t ci = 0; ci < c; ci++)
            for (size_t y = 0; y < h; y++)
                for (size_t x = 0; x < w; x++) {
                    float acc = 0.0f;
                    for (size_t q = m; q-- > 0;)
                        for (size_t ko = k; ko-- > 0;)
                            for (size_t i = 0; i < r; i++)
                                for (size_t j = 0; j < s; j++) {
                                    long yy = (long)y - (long)i + (long)(r / 2);
                                    long xq = (long)x - (long)j + (long)(s / 2);
                                    if (yy < 0 || yy >= (long)h || xq < 0 || xq >= (long)w)
                                        continue;
                                    acc += IN(2 * q)[((b * k + ko) * h + (size_t)yy) * w + (size_t)xq] *
                                           IN(2 * q + 1)[((ko * c + ci) * r + i) * s + j];
                                }
                    OUT[((b * c + ci) * h + y) * w + x] = acc;
                }
}

VARIANT_OP(variant_conv2d_bwd_filter)
{
    /* in: x (N,C,H,W), dy (N,K,H,W); out (K,C,R,S): direct loops over
     * (n, h, w) from the last, float32 */
    size_t n = IN_SHAPE(0, 0), c = IN_SHAPE(0, 1), h = IN_SHAPE(0, 2), w = IN_SHAPE(0, 3);
    size_t k = nd->shape[0], r = nd->shape[2], s = nd->shape[3];
    for (size_t ko = 0; ko < k; ko++)
        for (size_t ci = 0; ci < c; ci++)
            for (size_t i = 0; i < r; i++)
                for (size_t j = 0; j < s; j++) {
                    float acc = 0.0f;
                    for (size_t b = n; b-- > 0;)
                        for (size_t y = h; y-- > 0;)
                            for (size_t x = w; x-- > 0;) {
                                long yy = (long)y + (long)i - (long)(r / 2);
                                long xq = (long)x + (long)j - (long)(s / 2);
                                if (yy < 0 || yy >= (long)h || xq < 0 || xq >= (long)w)
                                    continue;
                                acc += IN(1)[((b * k + ko) * h + y) * w + x] *
                                       IN(0)[((b * c + ci) * h + (size_t)yy) * w + (size_t)xq];
                            }
                    OUT[((ko * c + ci) * r + i) * s + j] = acc;
                }
}

/* The float32 sum of x[lo, hi): blocks of VARIANT_LEAF summed in order,
 * the blocks' sums as a binary tree. */
static float variant_tree_sum(const float *x, size_t lo, size_t hi)
{
    if (hi - lo <= VARIANT_LEAF) {
        float s = 0.0f;
        for (size_t i = lo; i < hi; i++)
            s += x[i];
        return s;
    }
    size_t nb = (hi - lo + VARIANT_LEAF - 1) / VARIANT_LEAF, mid = lo + nb / 2 * VARIANT_LEAF;
    return variant_tree_sum(x, lo, mid) + variant_tree_sum(x, mid, hi);
}

VARIANT_OP(variant_mean)
{
    /* out (1) = s (scale / n), s the float32 block-tree sum of x */
    size_t n = g->nodes[nd->inputs[0]].count;
    OUT[0] = variant_tree_sum(IN(0), 0, n) * (nd->p.mean.scale / (float)n);
}

VARIANT_OP(variant_mean_bwd)
{
    /* in: g (1); out = g (scale / count) in float32 everywhere */
    float v = IN(0)[0] * (nd->p.mean.scale / (float)nd->count);
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = v;
}

static const struct {
    enum op_type type;
    backend_op_fn fn;
    const char *what;
} variant_table[] = {
    {OP_MATMUL, variant_matmul, "matmul: blocks of 16 products by fmaf, float32"},
    {OP_BIAS_GRAD, variant_bias_grad, "bias_grad: the float32 sum from the last row"},
    {OP_SIGMOID, variant_sigmoid, "sigmoid: 0.5 tanh(x/2) + 0.5"},
    {OP_SIGMOID_BWD, variant_sigmoid_bwd, "sigmoid_bwd: (dy (1 - y)) y"},
    {OP_TANH, variant_tanh, "tanh: -e / (2 + e), e = expm1(-2|x|), with the sign of x"},
    {OP_TANH_BWD, variant_tanh_bwd, "tanh_bwd: dy fma(-y, y, 1)"},
    {OP_MSE, variant_mse, "mse: a float32 pairwise sum, times 1/n"},
    {OP_MSE_BWD, variant_mse_bwd, "mse_bwd: ((p - t) g) 2 / n in float32"},
    {OP_SGD, variant_sgd, "sgd: fma(-lr, g, p)"},
    {OP_MOMENTUM, variant_momentum, "momentum: fma(mu, buf, g)"},
    {OP_ADAM_M, variant_adam_m, "adam_m: PyTorch's lerp, m + (1 - b1)(g - m)"},
    {OP_ADAM_V, variant_adam_v, "adam_v: fma(b2, v, (1 - b2)(g g))"},
    {OP_ADAM_P, variant_adam_p,
     "adam_p: the corrections folded, lr sqrt(c2) / c1 and eps sqrt(c2), powf in float32"},
    {OP_HARD_SIGMOID, variant_hard_sigmoid, "hard_sigmoid: fma(0.2, x, 0.5), clipped"},
    {OP_HARD_SIGMOID_BWD, variant_hard_sigmoid_bwd,
     "hard_sigmoid_bwd: the mask on fma(0.2, x, 0.5)"},
    {OP_UPSAMPLE2_BWD, variant_upsample2_bwd, "upsample2_bwd: (a + c) + (b + d), columns first"},
    {OP_CONV2D, variant_conv2d, "conv2d: direct loops, taps outermost, fmaf in float32"},
    {OP_CONV2D_BWD_DATA, variant_conv2d_bwd_data,
     "conv2d_bwd_data: direct loops from the last k, float32"},
    {OP_CONV2D_BWD_FILTER, variant_conv2d_bwd_filter,
     "conv2d_bwd_filter: direct loops from the last (n, h, w), float32"},
    {OP_MEAN, variant_mean, "mean: float32 blocks of 8 summed as a tree, times scale / n"},
    {OP_MEAN_BWD, variant_mean_bwd, "mean_bwd: g (scale / n) in float32"},
};
#define VARIANT_N (sizeof variant_table / sizeof variant_table[0])

backend_op_fn variant_formula_for(enum op_type t)
{
    for (size_t k = 0; k < VARIANT_N; k++)
        if (variant_table[k].type == t)
            return variant_table[k].fn;
    return NULL;
}

const char *variant_formulas(void)
{
    static char text[4096];
    if (!text[0]) {
        size_t len = 0;
        for (size_t k = 0; k < VARIANT_N; k++)
            len += (size_t)snprintf(text + len, sizeof text - len, "%s%s", k ? "; " : "",
                                    variant_table[k].what);
    }
    return text;
}
