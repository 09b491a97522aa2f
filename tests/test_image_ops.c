/* test_image_ops.c: the cpu kernels of PredNet's other image ops (op.h):
 * max pooling (each kernel form too), upsampling, channel concat and
 * slice, the elementwise ops, mean and per-channel bias, run through
 * graphs on backend_cpu and held to their op.h formulas bit for bit.
 * Dimension letters: N batch, C channels, H x W image. */
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
#include "cpu_maxpool.h"
#include "cpu_vmath.h"
#include "exec.h"
#include "graph.h"
#include "test_util.h"

/* ---- pooling and upsampling -------------------------------------------------- */

#define CT_QNAN 0x7fc00000u
#define CT_QNANP 0x7fc12345u  /* a payload */
#define CT_NNAN 0xffc00001u   /* negative, with a payload */
#define CT_SNAN 0x7f800001u   /* signalling */
#define CT_PINF 0x7f800000u
#define CT_NINF 0xff800000u
#define CT_PZ 0x00000000u
#define CT_NZ 0x80000000u
#define CT_DEN 0x00000001u
#define CT_F1 0x3f800000u
#define CT_F2 0x40000000u
#define CT_F3 0x40400000u
#define CT_F4 0x40800000u
#define CT_F5 0x40a00000u
#define CT_M1 0xbf800000u
#define CT_M2 0xc0000000u

/* 2x2 windows (top-left, top-right, bottom-left, bottom-right) as bit
 * patterns, and the position op.h's rule picks. */
static const struct {
    uint32_t v[4];
    int pick;
} ct_windows[] = {
    {{CT_F1, CT_F2, CT_F3, CT_F4}, 3},
    {{CT_F4, CT_F3, CT_F2, CT_F1}, 0},
    {{CT_F5, CT_F5, CT_F1, CT_F1}, 0},
    {{CT_F1, CT_F5, CT_F5, CT_F1}, 1},
    {{CT_F1, CT_F1, CT_F5, CT_F5}, 2},
    {{CT_NZ, CT_PZ, CT_M1, CT_M2}, 0},
    {{CT_PZ, CT_NZ, CT_M1, CT_M2}, 0},
    {{CT_M1, CT_NZ, CT_PZ, CT_M2}, 1},
    {{CT_M2, CT_M1, CT_PZ, CT_NZ}, 2},
    {{CT_NZ, CT_NZ, CT_PZ, CT_PZ}, 0},
    {{CT_QNAN, CT_F5, CT_NINF, CT_PINF}, 0},
    {{CT_F1, CT_QNANP, CT_F5, CT_QNAN}, 1},
    {{CT_PINF, CT_F2, CT_NNAN, CT_QNAN}, 2},
    {{CT_PINF, CT_F2, CT_F3, CT_QNANP}, 3},
    {{CT_F1, CT_SNAN, CT_F2, CT_F3}, 1},
    {{CT_NINF, CT_NINF, CT_NINF, CT_NINF}, 0},
    {{CT_NINF, CT_DEN, CT_NZ, CT_PZ}, 1},
    {{CT_F1, CT_F1, CT_F1, CT_F1}, 0},
    {{CT_M2, CT_M1, CT_M1, CT_M2}, 1},
    {{CT_M1, CT_M2, CT_M2, CT_PINF}, 3},
};
#define CT_NWINDOWS (sizeof ct_windows / sizeof ct_windows[0])

/* op.h's pick by another route: the first NaN, else the first element
 * comparing equal to the largest (fmaxf ignores no NaN here: none left). */
static int ct_pick(const float v[4])
{
    for (int j = 0; j < 4; j++)
        if (isnan(v[j]))
            return j;
    float m = fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3]));
    for (int j = 0; j < 4; j++)
        if (v[j] == m)
            return j;
    fail_msg("no maximum");
    return -1;
}

/* The pooling kernels' forms one by one (the vector form takes 8 windows
 * at a time, the rest one at a time): every case window at every lane of a
 * vector and in the tail, the pooled values and the gradient against the
 * picks, bit for bit. */
static void test_maxpool2_forms(void **state)
{
    (void)state;
    enum { P = 3, OH = 3, OW = 21, W = 2 * OW };
    size_t nwin = (size_t)P * OH * OW, nx = 4 * nwin;
    float *x = malloc(nx * sizeof *x), *dy = malloc(nwin * sizeof *dy), *out = malloc(nwin * sizeof *out);
    float *dx = malloc(nx * sizeof *dx), *want = malloc(nx * sizeof *want), *wantp = malloc(nwin * sizeof *wantp);
    assert_true(x && dy && out && dx && want && wantp);
    uint64_t rng = 77;
    memset(want, 0, nx * sizeof *want);
    for (size_t q = 0; q < nwin; q++) {
        size_t p = q / (OH * OW), i = q / OW % OH, j = q % OW;
        float v[4];
        for (int e = 0; e < 4; e++) {
            /* case (q + q / OW) % (cases + 1): each case at lanes that move from row to row */
            size_t c = (q + q / OW) % (CT_NWINDOWS + 1);
            v[e] = c < CT_NWINDOWS ? tu_bits_float(ct_windows[c].v[e]) : (float)tu_rand_uniform(&rng, -1, 1);
            x[(p * 2 * OH + 2 * i + (size_t)(e / 2)) * W + 2 * j + (size_t)(e % 2)] = v[e];
        }
        int pick = ct_pick(v);
        size_t at = (p * 2 * OH + 2 * i + (size_t)(pick / 2)) * W + 2 * j + (size_t)(pick % 2);
        dy[q] = q % 5 == 0 ? tu_bits_float(q % 10 ? CT_NZ : CT_QNANP) : (float)tu_rand_uniform(&rng, -1, 1);
        memcpy(&wantp[q], &x[at], sizeof *x);
        memcpy(&want[at], &dy[q], sizeof *x);
    }
    const int forms[] = {CPU_VMATH_SCALAR, CPU_VMATH_AVX2, CPU_VMATH_BEST};
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        if (forms[f] == CPU_VMATH_AVX2 && !cpu_vmath_has(CPU_VMATH_AVX2))
            continue;
        memset(out, 0xff, nwin * sizeof *out);
        memset(dx, 0xff, nx * sizeof *dx);
        cpu_maxpool2_planes(forms[f], out, x, P, OH, OW);
        cpu_maxpool2_bwd_planes(forms[f], dx, x, dy, P, OH, OW);
        ct_expect_bits("maxpool2 form", out, wantp, nwin);
        ct_expect_bits("maxpool2_bwd form", dx, want, nx);
    }
    free(x);
    free(dy);
    free(out);
    free(dx);
    free(want);
    free(wantp);
}

static void test_maxpool2(void **state)
{
    (void)state;
    const uint32_t N = 2, C = 3, H = 4, W = 6, OH = H / 2, OW = W / 2;
    size_t nwin = (size_t)N * C * OH * OW;
    assert_true(nwin >= CT_NWINDOWS + 4);
    struct ct t;
    ct_init(&t, 31);
    float *xv = malloc((size_t)N * C * H * W * sizeof *xv);
    int *pick = malloc(nwin * sizeof *pick);
    assert_true(xv && pick);
    /* window q (row-major over n, c, i, j) holds case q, then random values
     * (some rounded to tenths, for ties) */
    for (size_t q = 0; q < nwin; q++) {
        size_t p = q / (OH * OW), i = q / OW % OH, j = q % OW;
        float v[4];
        for (int e = 0; e < 4; e++) {
            if (q < CT_NWINDOWS) {
                v[e] = tu_bits_float(ct_windows[q].v[e]);
            } else {
                double u = tu_rand_uniform(&t.rng, -1, 1);
                v[e] = (float)(q % 2 ? round(u * 3) / 3 : u);
            }
            xv[(p * H + 2 * i + (size_t)(e / 2)) * W + 2 * j + (size_t)(e % 2)] = v[e];
        }
        pick[q] = q < CT_NWINDOWS ? ct_windows[q].pick : ct_pick(v);
        if (q < CT_NWINDOWS)
            assert_int_equal(ct_pick(v), pick[q]);
    }
    int x = ct_leaf4(&t, 1, "x", N, C, H, W, xv, 0);
    int y = graph_maxpool2(&t.g, "pool", x);
    /* dy with a -0 and a NaN among random values */
    float *dv = malloc(nwin * sizeof *dv);
    assert_non_null(dv);
    for (size_t q = 0; q < nwin; q++)
        dv[q] = (float)tu_rand_uniform(&t.rng, -1, 1);
    dv[0] = tu_bits_float(CT_NZ);
    dv[1] = tu_bits_float(CT_QNANP);
    ct_inject(&t, y, dv, 0);
    ct_run(&t);

    float *out = ct_get(&t, y), *dy = ct_get(&t, graph_grad_of(&t.g, y));
    float *dx = ct_get(&t, ct_grad(&t, x, OP_MAXPOOL2_BWD));
    float *want = calloc((size_t)N * C * H * W, sizeof *want);
    float *wantp = malloc(nwin * sizeof *wantp);
    assert_true(want && wantp);
    for (size_t q = 0; q < nwin; q++) {
        size_t p = q / (OH * OW), i = q / OW % OH, j = q % OW;
        size_t at = (p * H + 2 * i + (size_t)(pick[q] / 2)) * W + 2 * j + (size_t)(pick[q] % 2);
        wantp[q] = xv[at];
        want[at] = dy[q];
    }
    ct_expect_bits("maxpool2", out, wantp, nwin);
    ct_expect_bits("maxpool2_bwd", dx, want, (size_t)N * C * H * W);
    free(out);
    free(dy);
    free(dx);
    free(want);
    free(wantp);
    free(dv);
    free(xv);
    free(pick);
    ct_free(&t);
}

/* dy blocks on which the order ((a + b) + c) + d matters, and their sums */
static const struct {
    float v[4], sum;
} ct_blocks[] = {
    {{1.0f, 0x1p-24f, 0x1p-24f, 0x1p-24f}, 1.0f},               /* not 1 + 2^-23 */
    {{0x1p-24f, 0x1p-24f, 1.0f, 0.0f}, 1.0f + 0x1p-23f},         /* not 1 */
    {{1.0f, 1e30f, -1e30f, 1.0f}, 1.0f},                          /* not 2 */
    {{1e30f, 1.0f, 1.0f, -1e30f}, 0.0f},                          /* not 2 */
    {{0x1p-24f, 0x1p-24f, 1.0f, 0x1p-24f}, 1.0f + 0x1p-22f},     /* a tie to even */
    {{-0.0f, -0.0f, -0.0f, -0.0f}, -0.0f},
};

static void test_upsample2(void **state)
{
    (void)state;
    const uint32_t N = 2, C = 3, H = 3, W = 4;
    struct ct t;
    ct_init(&t, 41);
    int x = ct_leaf4(&t, 1, "x", N, C, H, W, NULL, 0);
    int y = graph_upsample2(&t.g, "up", x);
    size_t ny = (size_t)N * C * 4 * H * W, nx = (size_t)N * C * H * W;
    float *dv = malloc(ny * sizeof *dv);
    assert_non_null(dv);
    ct_fill(&t, dv, ny, 0);
    size_t nb = sizeof ct_blocks / sizeof ct_blocks[0];
    for (size_t b = 0; b < nb; b++) {
        /* block b of the flat (N*C, H, W) output grid */
        size_t p = b / (H * W), i = b / W % H, j = b % W;
        for (int e = 0; e < 4; e++)
            dv[(p * 2 * H + 2 * i + (size_t)(e / 2)) * 2 * W + 2 * j + (size_t)(e % 2)] =
                ct_blocks[b].v[e];
    }
    ct_inject(&t, y, dv, 0);
    ct_run(&t);

    const float *xv = ct_val(&t, x);
    float *out = ct_get(&t, y), *dx = ct_get(&t, ct_grad(&t, x, OP_UPSAMPLE2_BWD));
    float *dy = ct_get(&t, graph_grad_of(&t.g, y));
    ct_expect_bits("dy reaching upsample2", dy, dv, ny);
    float *want = malloc(ny * sizeof *want);
    assert_non_null(want);
    for (size_t p = 0; p < (size_t)N * C; p++)
        for (size_t i = 0; i < 2 * H; i++)
            for (size_t j = 0; j < 2 * W; j++)
                want[(p * 2 * H + i) * 2 * W + j] = xv[(p * H + i / 2) * W + j / 2];
    ct_expect_bits("upsample2", out, want, ny);
    for (size_t p = 0; p < (size_t)N * C; p++)
        for (size_t i = 0; i < H; i++)
            for (size_t j = 0; j < W; j++) {
                const float *u = dv + (p * 2 * H + 2 * i) * 2 * W + 2 * j, *l = u + 2 * W;
                float s = u[0] + u[1];
                s = s + l[0];
                s = s + l[1];
                want[(p * H + i) * W + j] = s;
            }
    for (size_t b = 0; b < nb; b++)
        if (tu_float_bits(want[b]) != tu_float_bits(ct_blocks[b].sum))
            fail_msg("test's own sum of block %zu: %.9g, want %.9g", b, (double)want[b],
                     (double)ct_blocks[b].sum);
    ct_expect_bits("upsample2_bwd", dx, want, nx);
    free(out);
    free(dx);
    free(dy);
    free(dv);
    free(want);
    ct_free(&t);
}

/* ---- channel concat and slice ----------------------------------------------- */

/* out (N, sum C_k, H, W) from the inputs stacked along channels */
static void ct_stack(float *out, const float *const *xs, const uint32_t *cs, int n,
                     uint32_t N, size_t hw)
{
    for (uint32_t i = 0; i < N; i++)
        for (int k = 0; k < n; k++) {
            memcpy(out, xs[k] + i * cs[k] * hw, cs[k] * hw * sizeof *out);
            out += cs[k] * hw;
        }
}

static void test_concat(void **state)
{
    (void)state;
    const uint32_t N = 2, H = 3, W = 5;
    const size_t hw = (size_t)H * W;
    /* 1, 3 and 4 inputs; the 3-input concat gets a backward pass */
    static const uint32_t cs[3][4] = {{4}, {1, 3, 2}, {2, 1, 1, 3}};
    static const int ns[3] = {1, 3, 4};
    struct ct t;
    ct_init(&t, 51);
    int xs[3][4], y[3];
    for (int g = 0; g < 3; g++) {
        for (int k = 0; k < ns[g]; k++) {
            char name[32];
            snprintf(name, sizeof name, "x%d_%d", g, k);
            xs[g][k] = ct_leaf4(&t, g == 1, name, N, cs[g][k], H, W, NULL, 0);
        }
        char name[32];
        snprintf(name, sizeof name, "cat%d", g);
        y[g] = graph_concat(&t.g, name, ns[g], xs[g]);
    }
    ct_inject(&t, y[1], NULL, 0);
    ct_run(&t);

    for (int g = 0; g < 3; g++) {
        const float *in[4];
        for (int k = 0; k < ns[g]; k++)
            in[k] = ct_val(&t, xs[g][k]);
        size_t n = t.g.nodes[y[g]].count;
        float *want = malloc(n * sizeof *want), *out = ct_get(&t, y[g]);
        assert_non_null(want);
        ct_stack(want, in, cs[g], ns[g], N, hw);
        ct_expect_bits("concat", out, want, n);
        free(want);
        free(out);
    }
    /* each input's gradient: its channels of dy (a slice) */
    float *dy = ct_get(&t, graph_grad_of(&t.g, y[1]));
    uint32_t total = 6, c0 = 0;
    for (int k = 0; k < 3; k++) {
        size_t n = (size_t)N * cs[1][k] * hw;
        float *got = ct_get(&t, ct_grad(&t, xs[1][k], OP_SLICE));
        float *want = malloc(n * sizeof *want);
        assert_non_null(want);
        for (uint32_t i = 0; i < N; i++)
            memcpy(want + i * cs[1][k] * hw, dy + (i * total + c0) * hw, cs[1][k] * hw * sizeof *want);
        ct_expect_bits("concat's gradient slice", got, want, n);
        c0 += cs[1][k];
        free(got);
        free(want);
    }
    free(dy);
    ct_free(&t);
}

static void test_slice(void **state)
{
    (void)state;
    const uint32_t N = 2, C = 6, H = 3, W = 5, C0 = 2, CN = 3;
    const size_t hw = (size_t)H * W;
    struct ct t;
    ct_init(&t, 61);
    int x = ct_leaf4(&t, 1, "x", N, C, H, W, NULL, 0);
    int y = graph_slice(&t.g, "slice", x, C0, CN);
    /* dy with a -0 and a NaN */
    float dv[2 * 3 * 3 * 5];
    ct_fill(&t, dv, sizeof dv / sizeof dv[0], 0);
    dv[3] = tu_bits_float(CT_NZ);
    dv[7] = tu_bits_float(CT_QNANP);
    ct_inject(&t, y, dv, 0);
    ct_run(&t);

    const float *xv = ct_val(&t, x);
    float *out = ct_get(&t, y), *dx = ct_get(&t, ct_grad(&t, x, OP_SLICE_BWD));
    float *dy = ct_get(&t, graph_grad_of(&t.g, y));
    float want[2 * 6 * 3 * 5];
    for (uint32_t i = 0; i < N; i++)
        memcpy(want + i * CN * hw, xv + (i * C + C0) * hw, CN * hw * sizeof *want);
    ct_expect_bits("slice", out, want, (size_t)N * CN * hw);
    memset(want, 0, sizeof want);  /* +0 */
    for (uint32_t i = 0; i < N; i++)
        memcpy(want + (i * C + C0) * hw, dy + i * CN * hw, CN * hw * sizeof *want);
    ct_expect_bits("slice_bwd", dx, want, (size_t)N * C * hw);
    free(out);
    free(dx);
    free(dy);
    ct_free(&t);
}

/* ---- elementwise ops ------------------------------------------------------------ */

/* x: the listed values, then random ones in [lo, hi]; n in all */
static float *ct_values(struct ct *t, const float *special, size_t nspecial, size_t n,
                        double lo, double hi)
{
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t j = 0; j < n; j++)
        v[j] = j < nspecial ? special[j] : (float)tu_rand_uniform(&t->rng, lo, hi);
    return v;
}

/* op.h's t = 0.2f x + 0.5f, as two float32 roundings */
static float ct_hs_t(float x)
{
    float t = 0.2f * x;
    t = t + 0.5f;
    return t;
}

static void test_hard_sigmoid(void **state)
{
    (void)state;
    const float sp[] = {2.5f, -2.5f, 0.0f, -0.0f, 3.0f, -3.0f, INFINITY, -INFINITY, NAN,
                        1e30f, -1e30f, nextafterf(2.5f, 3), nextafterf(2.5f, 0),
                        nextafterf(-2.5f, -3), nextafterf(-2.5f, 0), 1.0f, -1.0f,
                        2.4999995f, -2.4999995f, 2.5000005f, -2.5000005f};
    const size_t nsp = sizeof sp / sizeof sp[0], n = 4 * 3 * 5;
    /* hand-checked values of the first nine */
    const float want_out[] = {1.0f, 0.0f, 0.5f, 0.5f, 1.0f, 0.0f, 1.0f, 0.0f, NAN};
    const int want_pass[] = {1, 1, 1, 1, 0, 0, 0, 0, 0};
    struct ct t;
    ct_init(&t, 71);
    float *xv = ct_values(&t, sp, nsp, n, -4, 4);
    uint32_t shape[4] = {1, 4, 3, 5};
    int x = ct_leaf(&t, 1, "x", 4, shape, xv, 0);
    int y = graph_hard_sigmoid(&t.g, "hs", x);
    ct_inject(&t, y, NULL, 0);
    ct_run(&t);

    float *out = ct_get(&t, y), *dx = ct_get(&t, ct_grad(&t, x, OP_HARD_SIGMOID_BWD));
    float *dy = ct_get(&t, graph_grad_of(&t.g, y));
    float want[4 * 3 * 5], wantd[4 * 3 * 5];
    for (size_t j = 0; j < n; j++) {
        float tj = ct_hs_t(xv[j]);
        want[j] = tj < 0 ? 0.0f : tj > 1 ? 1.0f : tj;
        wantd[j] = 0 <= tj && tj <= 1 ? 0.2f * dy[j] : 0.0f;
    }
    for (size_t j = 0; j < sizeof want_out / sizeof want_out[0]; j++) {
        if (isnan(want_out[j]) ? !isnan(want[j]) : tu_float_bits(want[j]) != tu_float_bits(want_out[j]))
            fail_msg("test's own hard_sigmoid(%g) = %g", (double)xv[j], (double)want[j]);
        if (tu_float_bits(wantd[j]) != tu_float_bits(want_pass[j] ? 0.2f * dy[j] : 0.0f))
            fail_msg("test's own hard_sigmoid_bwd at %g", (double)xv[j]);
    }
    /* NaN: any NaN will do for the value (op.h: NaN stays NaN) */
    for (size_t j = 0; j < n; j++)
        if (isnan(want[j]) && isnan(out[j]))
            out[j] = want[j];
    ct_expect_bits("hard_sigmoid", out, want, n);
    ct_expect_bits("hard_sigmoid_bwd", dx, wantd, n);
    free(xv);
    free(out);
    free(dx);
    free(dy);
    ct_free(&t);
}

static void test_satlu(void **state)
{
    (void)state;
    const float sp[] = {1.0f, nextafterf(1.0f, 2), nextafterf(1.0f, 0), -0.0f, 0.0f, -5.0f,
                        5.0f, INFINITY, -INFINITY, NAN, -0.25f, nextafterf(-0.25f, 0),
                        nextafterf(-0.25f, -1)};
    const size_t nsp = sizeof sp / sizeof sp[0], n = 2 * 3 * 4;
    const float maxes[3] = {1.0f, -0.25f, 0.0f};
    struct ct t;
    ct_init(&t, 81);
    float *xv = ct_values(&t, sp, nsp, n, -2, 2);
    int x = ct_leaf4(&t, 1, "x", 2, 3, 2, 2, xv, 0);
    int y[3];
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "sat%d", k + 1);
        y[k] = graph_satlu(&t.g, name, x, maxes[k]);
        ct_inject(&t, y[k], NULL, 0);
    }
    ct_run(&t);

    /* x gets three contributions (one satlu_bwd each) and their sum */
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "x.grad@sat%d", k + 1);
        int gi = graph_find(&t.g, name);
        assert_true(gi >= 0);
        assert_int_equal(t.g.nodes[gi].type, OP_SATLU_BWD);
        float *out = ct_get(&t, y[k]), *dx = ct_get(&t, gi), *dy = ct_get(&t, graph_grad_of(&t.g, y[k]));
        float want[2 * 3 * 4], wantd[2 * 3 * 4];
        float m = maxes[k];
        for (size_t j = 0; j < n; j++) {
            want[j] = xv[j] > m ? m : xv[j];
            wantd[j] = xv[j] <= m ? dy[j] : 0.0f;
        }
        /* hand-checked: at the bound x passes (and so does the gradient), above it m and +0 */
        if (k == 0)
            assert_true(want[0] == 1.0f && wantd[0] == dy[0] && want[1] == 1.0f &&
                        tu_float_bits(wantd[1]) == 0 && tu_float_bits(want[3]) == CT_NZ && isnan(want[9]) &&
                        tu_float_bits(wantd[9]) == 0);
        else if (k == 1)
            assert_true(want[10] == -0.25f && wantd[10] == dy[10] && want[11] == -0.25f &&
                        tu_float_bits(wantd[11]) == 0 && want[12] == xv[12]);
        else /* -0 is not above +0: it stays -0 */
            assert_true(tu_float_bits(want[3]) == CT_NZ && tu_float_bits(want[4]) == CT_PZ &&
                        wantd[3] == dy[3] && wantd[4] == dy[4]);
        ct_expect_bits("satlu", out, want, n);
        ct_expect_bits("satlu_bwd", dx, wantd, n);
        free(out);
        free(dx);
        free(dy);
    }
    free(xv);
    ct_free(&t);
}

static void test_sub_neg_mul(void **state)
{
    (void)state;
    const float sa[] = {0.0f, -0.0f, 0.0f, -0.0f, -0.0f, -2.0f, 1.0f, NAN, 3.0f, INFINITY};
    const float sb[] = {0.0f, 0.0f, -0.0f, -0.0f, 5.0f, 0.0f, 1.0f, 1.0f, -INFINITY, INFINITY};
    const size_t nsp = sizeof sa / sizeof sa[0], n = 3 * 2 * 5;
    struct ct t;
    ct_init(&t, 91);
    float *av = ct_values(&t, sa, nsp, n, -3, 3), *bv = ct_values(&t, sb, nsp, n, -3, 3);
    av[n - 1] = tu_bits_float(CT_NNAN);
    av[n - 2] = tu_bits_float(CT_SNAN);
    int a = ct_leaf4(&t, 0, "a", 3, 2, 1, 5, av, 0);
    int b = ct_leaf4(&t, 0, "b", 3, 2, 1, 5, bv, 0);
    int ys = graph_sub(&t.g, "sub", a, b);
    int yn = graph_neg(&t.g, "neg", a);
    int ym = graph_mul(&t.g, "mul", a, b);
    ct_run(&t);

    float *s = ct_get(&t, ys), *ng = ct_get(&t, yn), *m = ct_get(&t, ym);
    float ws[3 * 2 * 5], wn[3 * 2 * 5], wm[3 * 2 * 5];
    for (size_t j = 0; j < n; j++) {
        ws[j] = av[j] - bv[j];
        wn[j] = tu_bits_float(tu_float_bits(av[j]) ^ 0x80000000u);
        wm[j] = av[j] * bv[j];
    }
    /* hand-checked signs of zero */
    static const uint32_t zs[4] = {CT_PZ, CT_NZ, CT_PZ, CT_PZ}, zm[6] = {CT_PZ, CT_NZ, CT_NZ, CT_PZ, CT_NZ, CT_NZ};
    for (int j = 0; j < 4; j++)
        assert_int_equal(tu_float_bits(ws[j]), zs[j]);
    for (int j = 0; j < 6; j++)
        assert_int_equal(tu_float_bits(wm[j]), zm[j]);
    assert_int_equal(tu_float_bits(wn[0]), CT_NZ);
    assert_int_equal(tu_float_bits(wn[n - 1]), CT_NNAN ^ 0x80000000u);
    /* a NaN result may be any NaN; neg's must be the input's, sign flipped */
    for (size_t j = 0; j < n; j++) {
        if (isnan(ws[j]) && isnan(s[j]))
            s[j] = ws[j];
        if (isnan(wm[j]) && isnan(m[j]))
            m[j] = wm[j];
    }
    ct_expect_bits("sub", s, ws, n);
    ct_expect_bits("neg", ng, wn, n);
    ct_expect_bits("mul", m, wm, n);
    free(s);
    free(ng);
    free(m);
    free(av);
    free(bv);
    ct_free(&t);
}

/* ---- mean --------------------------------------------------------------------- */

static void test_mean(void **state)
{
    (void)state;
    const size_t n = 2 * 3 * 4 * 5;
    /* scale and upstream gradient of each mean */
    const float scale[4] = {0.37f, 3.0f, 1e-3f, -2.5f}, g[4] = {-1.7f, 0.1f, 7.3f, 1.0f / 3.0f};
    struct ct t;
    ct_init(&t, 101);
    /* large values that cancel: a float32 sum would lose the small ones */
    const float sp[] = {1e8f, 1.0f, -1e8f, 1.0f, 3e7f, 0.25f, -3e7f};
    float *xv = ct_values(&t, sp, sizeof sp / sizeof sp[0], n, -1, 1);
    int x = ct_leaf4(&t, 1, "x", 2, 3, 4, 5, xv, 0);
    int m[4];
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof name, "mean%d", k);
        m[k] = graph_mean(&t.g, name, x, scale[k]);
        ct_inject(&t, m[k], &g[k], 0);
    }
    ct_run(&t);

    double s = 0;
    float fs = 0;
    for (size_t j = 0; j < n; j++) {
        s += (double)xv[j];
        fs += xv[j];
    }
    int float_differs = 0;
    for (int k = 0; k < 4; k++) {
        float out, dg;
        exec_get(&t.e, m[k], &out);
        exec_get(&t.e, graph_grad_of(&t.g, m[k]), &dg);
        assert_int_equal(tu_float_bits(dg), tu_float_bits(g[k]));
        float want = (float)((double)scale[k] * (s / (double)n));
        assert_int_equal(tu_float_bits(out), tu_float_bits(want));
        /* the same sum in float32 differs: the double accumulation is tested */
        assert_true(tu_float_bits((float)((double)scale[k] * ((double)fs / (double)n))) != tu_float_bits(want));

        char name[32];
        snprintf(name, sizeof name, "x.grad@mean%d", k);
        int gi = graph_find(&t.g, name);
        assert_true(gi >= 0);
        assert_int_equal(t.g.nodes[gi].type, OP_MEAN_BWD);
        float *dx = ct_get(&t, gi);
        float wd = (float)((double)scale[k] * (double)g[k] / (double)n);
        for (size_t j = 0; j < n; j++)
            if (tu_float_bits(dx[j]) != tu_float_bits(wd))
                fail_msg("mean_bwd %d [%zu] = %.9g, want %.9g", k, j, (double)dx[j], (double)wd);
        float_differs |= tu_float_bits(scale[k] * g[k] / (float)n) != tu_float_bits(wd);
        free(dx);
    }
    /* so the cases tell op.h's double formula from a float32 one */
    assert_true(float_differs);
    free(xv);
    ct_free(&t);
}

/* ---- per-channel bias on images ---------------------------------------------- */

static void test_bias_4d(void **state)
{
    (void)state;
    /* 11 channels: the gradient sums eight channels side by side, and the
     * rest one at a time */
    const uint32_t N = 3, C = 11, H = 5, W = 3;
    const size_t hw = (size_t)H * W, n = (size_t)N * C * hw;
    struct ct t;
    ct_init(&t, 111);
    int x = ct_leaf4(&t, 0, "x", N, C, H, W, NULL, 0);
    uint32_t bshape[1] = {C};
    int b = ct_leaf(&t, 1, "b", 1, bshape, NULL, 0);
    int y = graph_add_bias(&t.g, "ab", x, b);
    /* dy of magnitudes 2^-10 .. 2^10, so the order of the sum matters */
    float *dv = malloc(n * sizeof *dv);
    assert_non_null(dv);
    for (size_t j = 0; j < n; j++)
        dv[j] = ldexpf((float)tu_rand_uniform(&t.rng, -1, 1), (int)(tu_rand_u64(&t.rng) % 21) - 10);
    ct_inject(&t, y, dv, 0);
    ct_run(&t);

    const float *xv = ct_val(&t, x), *bv = ct_val(&t, b);
    float *out = ct_get(&t, y), *db = ct_get(&t, ct_grad(&t, b, OP_BIAS_GRAD));
    float *want = malloc(n * sizeof *want);
    assert_non_null(want);
    for (size_t i = 0; i < N; i++)
        for (size_t c = 0; c < C; c++)
            for (size_t j = 0; j < hw; j++)
                want[(i * C + c) * hw + j] = xv[(i * C + c) * hw + j] + bv[c];
    ct_expect_bits("add_bias (N,C,H,W)", out, want, n);
    /* sum over n, then h, then w, from +0, in float32 */
    float wb[11];
    int order_matters = 0;
    for (size_t c = 0; c < C; c++) {
        float s = 0.0f, r = 0.0f;
        for (size_t i = 0; i < N; i++)
            for (size_t j = 0; j < hw; j++)
                s += dv[(i * C + c) * hw + j];
        for (size_t i = N; i-- > 0;)
            for (size_t j = hw; j-- > 0;)
                r += dv[(i * C + c) * hw + j];
        wb[c] = s;
        order_matters |= tu_float_bits(r) != tu_float_bits(s);
    }
    assert_true(order_matters);
    ct_expect_bits("bias_grad (N,C,H,W)", db, wb, C);
    free(out);
    free(db);
    free(want);
    free(dv);
    ct_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_maxpool2),
        cmocka_unit_test(test_maxpool2_forms),
        cmocka_unit_test(test_upsample2),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_hard_sigmoid),
        cmocka_unit_test(test_satlu),
        cmocka_unit_test(test_sub_neg_mul),
        cmocka_unit_test(test_mean),
        cmocka_unit_test(test_bias_4d),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
