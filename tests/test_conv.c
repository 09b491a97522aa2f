/* test_conv.c: the cpu kernels of PredNet's convolutions (op.h), run
 * through graphs on backend_cpu: the convolution and its backward ops
 * against a direct double sum with a rigorous error bound (the other image
 * ops: test_image_ops.c). Dimension letters: N batch, C input channels,
 * K output channels, H x W image, R x S kernel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "conv_testutil.h"
#include "exec.h"
#include "graph.h"
#include "test_util.h"

/* ---- convolution ------------------------------------------------------------ */

struct ct_conv_shape {
    uint32_t n, c, h, w, k, r, s;
};

static const struct ct_conv_shape ct_conv_shapes[] = {
    {1, 1, 5, 7, 1, 3, 3},      /* C = K = 1, H != W, H*W odd */
    {3, 2, 7, 5, 3, 3, 3},      /* batch 3, 7x5 */
    {2, 64, 32, 32, 32, 3, 3},  /* large enough for OpenBLAS's blocking; the scratch grows */
    {1, 3, 6, 4, 2, 1, 1},      /* 1x1 kernel */
    {2, 4, 9, 8, 5, 5, 5},      /* 5x5 kernel */
    {1, 2, 3, 2, 2, 5, 5},      /* kernel larger than the image */
    {2, 3, 6, 7, 2, 3, 1},      /* R != S */
    {1, 2, 5, 6, 3, 1, 5},
    {3, 19, 8, 8, 16, 3, 3},    /* a PredNet layer */
    {1, 2, 64, 64, 2, 3, 3},    /* long sums over h, w in the filter gradient */
    {1, 1, 1, 1, 1, 3, 3},      /* 1x1 image: only the centre tap */
    {2, 3, 6, 5, 1, 5, 3},      /* K = 1: col2im's order is visible (ct_col2im_order) */
    {1, 19, 37, 30, 1, 3, 3},   /* forward in two bands of image rows (cpu_conv.c), K = 1 */
    {2, 8, 33, 32, 3, 5, 5},    /* two bands, 5x5 */
};
#define CT_NSHAPES (sizeof ct_conv_shapes / sizeof ct_conv_shapes[0])

/* A direct convolution sum: its value in double (products of floats are
 * exact; the sum's own rounding is part of the bound), the sum of |terms|,
 * and the number of terms that lie inside the image. */
struct ct_exact {
    double *v, *abs;
    int *k;
};

static void ct_exact_init(struct ct_exact *x, size_t n)
{
    x->v = calloc(n, sizeof *x->v);
    x->abs = calloc(n, sizeof *x->abs);
    x->k = calloc(n, sizeof *x->k);
    assert_true(x->v && x->abs && x->k);
}

static void ct_exact_free(struct ct_exact *x)
{
    free(x->v);
    free(x->abs);
    free(x->k);
}

/* Row-major index of (i0, i1, i2, i3) in a tensor of dimensions (., d1, d2, d3). */
static size_t ct_at(uint32_t d1, uint32_t d2, uint32_t d3, int i0, int i1, int i2, int i3)
{
    return (((size_t)i0 * d1 + (size_t)i1) * d2 + (size_t)i2) * d3 + (size_t)i3;
}

#define CT_X(a, i0, i1, i2, i3) a[ct_at(sh->c, sh->h, sh->w, i0, i1, i2, i3)] /* (N,C,H,W) */
#define CT_Y(a, i0, i1, i2, i3) a[ct_at(sh->k, sh->h, sh->w, i0, i1, i2, i3)] /* (N,K,H,W) */
#define CT_W(a, i0, i1, i2, i3) a[ct_at(sh->c, sh->r, sh->s, i0, i1, i2, i3)] /* (K,C,R,S) */

static int ct_inside(const struct ct_conv_shape *sh, int h, int w)
{
    return h >= 0 && h < (int)sh->h && w >= 0 && w < (int)sh->w;
}

/* out (N,K,H,W) = sum over c, r, s of x[n,c,h+r-R/2,w+s-S/2] w[k,c,r,s] */
static void ct_ref_conv2d(struct ct_exact *out, const float *x, /* (N,C,H,W) */
                          const float *wt, /* (K,C,R,S) */ const struct ct_conv_shape *sh)
{
    int pr = (int)sh->r / 2, ps = (int)sh->s / 2;
    for (int n = 0; n < (int)sh->n; n++)
        for (int k = 0; k < (int)sh->k; k++)
            for (int h = 0; h < (int)sh->h; h++)
                for (int w = 0; w < (int)sh->w; w++) {
                    size_t o = (((size_t)n * sh->k + (size_t)k) * sh->h + (size_t)h) * sh->w + (size_t)w;
                    for (int c = 0; c < (int)sh->c; c++)
                        for (int r = 0; r < (int)sh->r; r++)
                            for (int s = 0; s < (int)sh->s; s++) {
                                int hh = h + r - pr, ww = w + s - ps;
                                if (!ct_inside(sh, hh, ww))
                                    continue;
                                double p = (double)CT_X(x, n, c, hh, ww) * (double)CT_W(wt, k, c, r, s);
                                out->v[o] += p;
                                out->abs[o] += fabs(p);
                                out->k[o]++;
                            }
                }
}

/* dx (N,C,H,W) = sum over k, r, s of dy[n,k,h-r+R/2,w-s+S/2] w[k,c,r,s] */
static void ct_ref_conv2d_bwd_data(struct ct_exact *out, const float *dy, /* (N,K,H,W) */
                                   const float *wt, /* (K,C,R,S) */ const struct ct_conv_shape *sh)
{
    int pr = (int)sh->r / 2, ps = (int)sh->s / 2;
    for (int n = 0; n < (int)sh->n; n++)
        for (int c = 0; c < (int)sh->c; c++)
            for (int h = 0; h < (int)sh->h; h++)
                for (int w = 0; w < (int)sh->w; w++) {
                    size_t o = (((size_t)n * sh->c + (size_t)c) * sh->h + (size_t)h) * sh->w + (size_t)w;
                    for (int k = 0; k < (int)sh->k; k++)
                        for (int r = 0; r < (int)sh->r; r++)
                            for (int s = 0; s < (int)sh->s; s++) {
                                int hh = h - r + pr, ww = w - s + ps;
                                if (!ct_inside(sh, hh, ww))
                                    continue;
                                double p = (double)CT_Y(dy, n, k, hh, ww) * (double)CT_W(wt, k, c, r, s);
                                out->v[o] += p;
                                out->abs[o] += fabs(p);
                                out->k[o]++;
                            }
                }
}

/* dw (K,C,R,S) = sum over n, h, w of dy[n,k,h,w] x[n,c,h+r-R/2,w+s-S/2] */
static void ct_ref_conv2d_bwd_filter(struct ct_exact *out, const float *x, /* (N,C,H,W) */
                                     const float *dy, /* (N,K,H,W) */ const struct ct_conv_shape *sh)
{
    int pr = (int)sh->r / 2, ps = (int)sh->s / 2;
    for (int k = 0; k < (int)sh->k; k++)
        for (int c = 0; c < (int)sh->c; c++)
            for (int r = 0; r < (int)sh->r; r++)
                for (int s = 0; s < (int)sh->s; s++) {
                    size_t o = (((size_t)k * sh->c + (size_t)c) * sh->r + (size_t)r) * sh->s + (size_t)s;
                    for (int n = 0; n < (int)sh->n; n++)
                        for (int h = 0; h < (int)sh->h; h++)
                            for (int w = 0; w < (int)sh->w; w++) {
                                int hh = h + r - pr, ww = w + s - ps;
                                if (!ct_inside(sh, hh, ww))
                                    continue;
                                double p = (double)CT_Y(dy, n, k, h, w) * (double)CT_X(x, n, c, hh, ww);
                                out->v[o] += p;
                                out->abs[o] += fabs(p);
                                out->k[o]++;
                            }
                }
}

/* With K = 1 the sgemm of conv2d_bwd_data has one product per element, so
 * the whole float32 order is cpu_conv.h's col2im: from +0, the in-image taps
 * in row-major (r, s) order. Bit for bit, except that a zero may have either
 * sign (sgemm may give 0 + -0). */
static void ct_col2im_order(const float *got, /* (N,C,H,W) */ const float *dy, /* (N,1,H,W) */
                            const float *wt, /* (1,C,R,S) */ const struct ct_conv_shape *sh)
{
    int pr = (int)sh->r / 2, ps = (int)sh->s / 2;
    assert_int_equal(sh->k, 1);
    for (int n = 0; n < (int)sh->n; n++)
        for (int c = 0; c < (int)sh->c; c++)
            for (int h = 0; h < (int)sh->h; h++)
                for (int w = 0; w < (int)sh->w; w++) {
                    float acc = 0.0f;
                    for (int r = 0; r < (int)sh->r; r++)
                        for (int s = 0; s < (int)sh->s; s++) {
                            int hh = h - r + pr, ww = w - s + ps;
                            if (ct_inside(sh, hh, ww))
                                acc = acc + CT_Y(dy, n, 0, hh, ww) * CT_W(wt, 0, c, r, s);
                        }
                    float g = CT_X(got, n, c, h, w);
                    if (acc == 0 ? g != 0 : tu_float_bits(g) != tu_float_bits(acc))
                        fail_msg("conv2d_bwd_data (K = 1) [%d,%d,%d,%d] = %.9g, col2im order gives %.9g",
                                 n, c, h, w, (double)g, (double)acc);
                }
}

/* gamma_k = k u / (1 - k u): bounds the relative error of any summation of
 * k products, each path through it at most k roundings of unit u. */
static double ct_gamma(int k, double u)
{
    return (double)k * u / (1.0 - (double)k * u);
}

/* |got - exact| <= gamma_k(2^-24) sum |terms|, plus the double reference's
 * own gamma_k(2^-53) sum |terms|. With `integer` the sums are exact in any
 * order, so got must equal them bit for bit (a zero may have either sign:
 * op.h leaves the sign of an exact zero sum open). Counts in *inexact the
 * elements that differ from the exact sum rounded once. */
static void ct_check_sums(const char *what, const struct ct_conv_shape *sh, const float *got,
                          const struct ct_exact *ex, size_t n, int integer, size_t *inexact)
{
    for (size_t j = 0; j < n; j++) {
        double e = ex->v[j];
        double bound = (ct_gamma(ex->k[j], 0x1p-24) + ct_gamma(ex->k[j], 0x1p-53)) * ex->abs[j];
        if (!(fabs((double)got[j] - e) <= bound))
            fail_msg("%s (N%u C%u %ux%u K%u %ux%u) [%zu] = %.9g, exact %.17g, bound %.3g (%d terms)",
                     what, sh->n, sh->c, sh->h, sh->w, sh->k, sh->r, sh->s, j, (double)got[j], e,
                     bound, ex->k[j]);
        if (integer && (e == 0 ? got[j] != 0.0f : tu_float_bits(got[j]) != tu_float_bits((float)e)))
            fail_msg("%s (N%u C%u %ux%u K%u %ux%u) [%zu] = %.9g, integer sum %.17g", what, sh->n,
                     sh->c, sh->h, sh->w, sh->k, sh->r, sh->s, j, (double)got[j], e);
        if (got[j] != (float)e)
            (*inexact)++;
    }
}

/* Every shape of ct_conv_shapes in one graph (so one cpu context's scratch
 * serves them all, growing and shrinking in use): x and w parameters,
 * y = conv2d(x, w) with an injected dy; checks y, x.grad and w.grad.
 * inexact[0..2] count the elements of each op that differ from the exact
 * sum rounded once. */
static void ct_conv_run(int integer, uint64_t seed, size_t inexact[3])
{
    struct ct t;
    ct_init(&t, seed);
    int x[CT_NSHAPES], w[CT_NSHAPES], y[CT_NSHAPES], d[CT_NSHAPES];
    for (size_t i = 0; i < CT_NSHAPES; i++) {
        const struct ct_conv_shape *sh = &ct_conv_shapes[i];
        char name[32];
        snprintf(name, sizeof name, "x%zu", i);
        x[i] = ct_leaf4(&t, 1, name, sh->n, sh->c, sh->h, sh->w, NULL, integer);
        snprintf(name, sizeof name, "w%zu", i);
        w[i] = ct_leaf4(&t, 1, name, sh->k, sh->c, sh->r, sh->s, NULL, integer);
        snprintf(name, sizeof name, "y%zu", i);
        y[i] = graph_conv2d(&t.g, name, x[i], w[i]);
        d[i] = ct_inject(&t, y[i], NULL, integer);
    }
    ct_run(&t);
    for (size_t i = 0; i < CT_NSHAPES; i++) {
        const struct ct_conv_shape *sh = &ct_conv_shapes[i];
        const float *xv = ct_val(&t, x[i]), *wv = ct_val(&t, w[i]), *dv = ct_val(&t, d[i]);
        size_t nx = t.g.nodes[x[i]].count, nw = t.g.nodes[w[i]].count, ny = t.g.nodes[y[i]].count;

        /* the gradient reaching y is dy itself */
        float *dyv = ct_get(&t, graph_grad_of(&t.g, y[i]));
        ct_expect_bits("dy reaching conv2d", dyv, dv, ny);
        free(dyv);

        struct ct_exact ex;
        float *got = ct_get(&t, y[i]);
        ct_exact_init(&ex, ny);
        ct_ref_conv2d(&ex, xv, wv, sh);
        ct_check_sums("conv2d", sh, got, &ex, ny, integer, &inexact[0]);
        ct_exact_free(&ex);
        free(got);

        got = ct_get(&t, ct_grad(&t, x[i], OP_CONV2D_BWD_DATA));
        ct_exact_init(&ex, nx);
        ct_ref_conv2d_bwd_data(&ex, dv, wv, sh);
        ct_check_sums("conv2d_bwd_data", sh, got, &ex, nx, integer, &inexact[1]);
        if (sh->k == 1)
            ct_col2im_order(got, dv, wv, sh);
        ct_exact_free(&ex);
        free(got);

        got = ct_get(&t, ct_grad(&t, w[i], OP_CONV2D_BWD_FILTER));
        ct_exact_init(&ex, nw);
        ct_ref_conv2d_bwd_filter(&ex, xv, dv, sh);
        ct_check_sums("conv2d_bwd_filter", sh, got, &ex, nw, integer, &inexact[2]);
        ct_exact_free(&ex);
        free(got);
    }
    ct_free(&t);
}

static void test_conv2d_random(void **state)
{
    (void)state;
    size_t inexact[3] = {0, 0, 0};
    ct_conv_run(0, 3, inexact);
    /* float32 sums of random values must round differently from the exact
     * sum somewhere: if not, the kernels were not float32 sums at all, or
     * the check compared nothing */
    const char *op[3] = {"conv2d", "conv2d_bwd_data", "conv2d_bwd_filter"};
    for (int k = 0; k < 3; k++)
        if (inexact[k] == 0)
            fail_msg("%s: every element equals the exact sum rounded once", op[k]);
}

static void test_conv2d_integer(void **state)
{
    (void)state;
    size_t inexact[3] = {0, 0, 0};
    ct_conv_run(1, 5, inexact);
    assert_true(inexact[0] == 0 && inexact[1] == 0 && inexact[2] == 0);
}

/* Two identical convolutions around a larger one in one graph, and a second
 * run from a fresh context: bitwise the same (the scratch carries nothing). */
static void test_conv2d_repeat(void **state)
{
    (void)state;
    float *out[2][3];
    for (int run = 0; run < 2; run++) {
        struct ct t;
        ct_init(&t, 21);
        int xa = ct_leaf4(&t, 1, "xa", 2, 5, 9, 11, NULL, 0);
        int wa = ct_leaf4(&t, 1, "wa", 4, 5, 3, 3, NULL, 0);
        int xb = ct_leaf4(&t, 1, "xb", 1, 32, 16, 16, NULL, 0);
        int wb = ct_leaf4(&t, 1, "wb", 8, 32, 3, 3, NULL, 0);
        int y1 = graph_conv2d(&t.g, "y1", xa, wa);
        int yb = graph_conv2d(&t.g, "yb", xb, wb);
        int y2 = graph_conv2d(&t.g, "y2", xa, wa);
        (void)yb;
        ct_run(&t);
        out[run][0] = ct_get(&t, y1);
        out[run][1] = ct_get(&t, y2);
        out[run][2] = ct_get(&t, yb);
        size_t n = t.g.nodes[y1].count;
        ct_expect_bits("second conv2d of the same inputs", out[run][1], out[run][0], n);
        if (run == 1) {
            ct_expect_bits("conv2d in a fresh context", out[1][0], out[0][0], n);
            ct_expect_bits("conv2d in a fresh context", out[1][2], out[0][2], t.g.nodes[yb].count);
        }
        ct_free(&t);
    }
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < 3; k++)
            free(out[run][k]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d_random),
        cmocka_unit_test(test_conv2d_integer),
        cmocka_unit_test(test_conv2d_repeat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
