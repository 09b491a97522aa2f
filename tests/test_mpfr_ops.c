/* test_mpfr_ops.c: part of test_mpfr (main in test_mpfr.c): the elementwise
 * ops (activations, adds, mse, optimizers) and PredNet's ops (convolutions,
 * pooling, channels, activations, arithmetic) at 200 bits, through tm_check. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mpfr.h>

#include "backend.h"
#include "graph.h"
#include "mpfr_testutil.h"
#include "oracle.h"
#include "test_mpfr.h"
#include "test_util.h"
#include "util.h"

/* ---- elementwise ops ------------------------------------------------------------- */

/* Values every elementwise op sees besides random ones. */
static const float tm_edge[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 0x1p-149f, -0x1p-149f,
                                FLT_MIN, 1e-30f, -1e-30f, 17.0f, -17.0f, 88.0f, -88.0f, 104.0f,
                                -104.0f, 1e4f, -1e4f, 1e30f, -1e30f, FLT_MAX, -FLT_MAX,
                                INFINITY, -INFINITY, NAN};
#define TM_NEDGE (sizeof tm_edge / sizeof tm_edge[0])

/* x[i]: for the first TM_NEDGE^2 elements the edge value (i / stride) mod
 * TM_NEDGE (strides 1 and TM_NEDGE cross two inputs' edge values), random
 * in [lo, hi] after. */
void tm_fill_unary(float *x, size_t n, double lo, double hi, uint64_t *rng, size_t stride)
{
    for (size_t i = 0; i < n; i++)
        x[i] = i < TM_NEDGE * TM_NEDGE ? tm_edge[(i / stride) % TM_NEDGE] : tm_rand(rng, lo, hi);
}

static void tm_unary(void *ctx, enum op_type t, double lo, double hi, double tol, uint64_t seed)
{
    struct tm_case c;
    tm_case_init(&c, t, 64, 64);
    c.tol = tol;
    uint64_t rng = seed;
    tm_fill_unary(tm_case_input(&c, 64, 64), c.op.count, lo, hi, &rng, 1);
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
}

/* Two inputs: x with the edge values crossed with y's, then random. */
static void tm_binary(void *ctx, enum op_type t, double xlo, double xhi, double ylo, double yhi,
                      double tol, uint64_t seed, const union op_params *p, uint64_t step)
{
    struct tm_case c;
    tm_case_init(&c, t, 64, 64);
    c.tol = tol;
    c.step = step;
    if (p)
        c.op.p = *p;
    uint64_t rng = seed;
    float *x = tm_case_input(&c, 64, 64), *y = tm_case_input(&c, 64, 64);
    tm_fill_unary(x, c.op.count, xlo, xhi, &rng, TM_NEDGE);
    tm_fill_unary(y, c.op.count, ylo, yhi, &rng, 1);
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
}

void test_activations(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    tm_unary(ctx, OP_SIGMOID, -30, 30, 8, 11);
    tm_unary(ctx, OP_SIGMOID, -0.01, 0.01, 8, 12);
    tm_unary(ctx, OP_TANH, -10, 10, 8, 13);
    tm_unary(ctx, OP_TANH, -1e-3, 1e-3, 8, 14);
    tm_unary(ctx, OP_RELU, -1, 1, 0, 15);
    tm_binary(ctx, OP_SIGMOID_BWD, -0.1, 1.1, -2, 2, 8, 16, NULL, 0);
    tm_binary(ctx, OP_TANH_BWD, -1.1, 1.1, -2, 2, 8, 17, NULL, 0);
    tm_binary(ctx, OP_RELU_BWD, -1, 1, -2, 2, 0, 18, NULL, 0);
    /* y near 1 and near 0, where 1 - y and 1 - y y cancel */
    tm_binary(ctx, OP_SIGMOID_BWD, 0.999, 1.0, -1, 1, 8, 19, NULL, 0);
    tm_binary(ctx, OP_TANH_BWD, 0.999, 1.0, -1, 1, 8, 20, NULL, 0);
    tm_binary(ctx, OP_SIGMOID_BWD, 0, 1e-6, -1, 1, 8, 21, NULL, 0);
    backend_mpfr.free(ctx);
}

void test_add_ops(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    tm_binary(ctx, OP_ADD, -1, 1, -1, 1, 2, 31, NULL, 0);
    tm_binary(ctx, OP_ADD, -1, 1, -1e-6, 1e-6, 2, 32, NULL, 0);
    /* bias: x (R,F) + b (F) */
    struct tm_case c;
    tm_case_init(&c, OP_ADD_BIAS, 50, 80);
    float *x = tm_case_input(&c, 50, 80), *b = tm_case_input(&c, 80, 0);
    uint64_t rng = 33;
    for (size_t i = 0; i < c.op.count; i++)
        x[i] = i < TM_NEDGE * 80 ? tm_edge[i / 80] : tm_rand_wide(&rng, -30, 5);
    for (size_t j = 0; j < 80; j++)
        b[j] = j < TM_NEDGE ? tm_edge[j] : tm_rand_wide(&rng, -30, 5);
    c.tol = 2;
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
    /* bias gradient: column sums of dy (R,F); column 0 all -0, column 1 a
     * cancelling pair, column 2 holds an Inf, column 3 Inf and -Inf */
    tm_case_init(&c, OP_BIAS_GRAD, 80, 0);
    float *dy = tm_case_input(&c, 50, 80);
    for (size_t i = 0; i < 50 * 80; i++) {
        size_t j = i % 80;
        dy[i] = j == 0 ? -0.0f : tm_rand_wide(&rng, -40, 3);
        if (j == 1)
            dy[i] = i / 80 < 2 ? (i / 80 ? -3.0f : 3.0f) : 0.0f;
    }
    dy[2] = INFINITY;
    dy[3] = INFINITY;
    dy[80 + 3] = -INFINITY;
    c.tol = 60;
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
    /* a single row */
    tm_case_init(&c, OP_BIAS_GRAD, 7, 0);
    dy = tm_case_input(&c, 1, 7);
    for (size_t j = 0; j < 7; j++)
        dy[j] = tm_edge[j];
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
    backend_mpfr.free(ctx);
}

/* Loss: 300 cases of 1 to 70 elements (divided by n in one rounding, n a
 * power of two or not), large ones, and exact zeros, Inf and NaN. */
void test_mse(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    uint64_t rng = 41;
    for (int r = 0; r < 306; r++) {
        uint32_t n = r < 300 ? 1 + (uint32_t)(tu_rand_u64(&rng) % 70) : r < 303 ? 4096 : 4095;
        struct tm_case c;
        tm_case_init(&c, OP_MSE, 1, 0);
        float *p = tm_case_input(&c, n, 0), *t = tm_case_input(&c, n, 0);
        for (uint32_t i = 0; i < n; i++) {
            p[i] = r % 3 ? tm_rand(&rng, 0, 1) : tm_rand_wide(&rng, -80, 10);
            t[i] = r % 5 == 1 ? p[i] : r % 3 ? tm_rand(&rng, 0, 1) : tm_rand_wide(&rng, -80, 10);
        }
        if (r == 7)
            p[0] = INFINITY;
        if (r == 8)
            p[n - 1] = t[n - 1] = -INFINITY;
        if (r == 9)
            t[0] = NAN;
        c.tol = 4;
        tm_check(&c, ctx, TM_PREC, 0);
        tm_case_free(&c);
    }
    backend_mpfr.free(ctx);
}

static void tm_mse_bwd(void *ctx, uint32_t d0, uint32_t d1, int with_g, float gv, uint64_t seed)
{
    struct tm_case c;
    tm_case_init(&c, OP_MSE_BWD, d0, d1);
    float *p = tm_case_input(&c, d0, d1), *t = tm_case_input(&c, d0, d1);
    uint64_t rng = seed;
    for (size_t i = 0; i < c.op.count; i++) {
        p[i] = i < TM_NEDGE * TM_NEDGE ? tm_edge[i / TM_NEDGE] : tm_rand(&rng, -1, 2);
        t[i] = i < TM_NEDGE * TM_NEDGE ? tm_edge[i % TM_NEDGE]
             : i % 17 == 0             ? p[i]
                                       : tm_rand(&rng, 0, 1);
    }
    if (with_g)
        tm_case_input(&c, 1, 0)[0] = gv;
    c.tol = 6;
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
}

void test_mse_bwd(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    tm_mse_bwd(ctx, 63, 65, 0, 0, 51);        /* n = 4095 */
    tm_mse_bwd(ctx, 64, 64, 0, 0, 52);        /* n = 4096 */
    tm_mse_bwd(ctx, 63, 65, 1, 0.37f, 53);
    tm_mse_bwd(ctx, 30, 30, 1, -3e-5f, 54);
    tm_mse_bwd(ctx, 30, 30, 1, 0.0f, 55);
    tm_mse_bwd(ctx, 30, 30, 1, -0.0f, 56);
    tm_mse_bwd(ctx, 30, 30, 1, INFINITY, 57);
    backend_mpfr.free(ctx);
}

void test_optimizers(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    union op_params p;
    memset(&p, 0, sizeof p);
    p.sgd.lr = 0.1f;
    tm_binary(ctx, OP_SGD, -1, 1, -1, 1, 2, 61, &p, 0);
    p.sgd.lr = 1.0f; /* p - g: exact cancellations among the edge values */
    tm_binary(ctx, OP_SGD, -1, 1, -1, 1, 2, 62, &p, 0);
    p.momentum.mu = 0.9f;
    tm_binary(ctx, OP_MOMENTUM, -1, 1, -1, 1, 2, 63, &p, 0);
    p.adam.lr = 1e-3f;
    p.adam.b1 = 0.9f;
    p.adam.b2 = 0.999f;
    p.adam.eps = 1e-8f;
    tm_binary(ctx, OP_ADAM_M, -0.1, 0.1, -1, 1, 2, 64, &p, 0);
    tm_binary(ctx, OP_ADAM_V, 0, 0.01, -1, 1, 3, 65, &p, 0);
    p.adam.b1 = 1e-3f; /* 1 - b1 not a float: must still be exact */
    p.adam.b2 = 0.3f;
    tm_binary(ctx, OP_ADAM_M, -0.1, 0.1, -1, 1, 0, 66, &p, 0);
    tm_binary(ctx, OP_ADAM_V, 0, 0.01, -1, 1, 0, 67, &p, 0);
    /* p - lr (m / c1) / (sqrt(v / c2) + eps) at t = 1, 10, 1000 */
    p.adam.b1 = 0.9f;
    p.adam.b2 = 0.999f;
    uint64_t steps[] = {0, 9, 999};
    for (int s = 0; s < 3; s++) {
        struct tm_case c;
        tm_case_init(&c, OP_ADAM_P, 64, 64);
        c.op.p = p;
        c.step = steps[s];
        c.stepwise = 1;
        c.tol = 16;
        float *pp = tm_case_input(&c, 64, 64), *m = tm_case_input(&c, 64, 64),
              *v = tm_case_input(&c, 64, 64);
        uint64_t rng = 70 + (uint64_t)s;
        for (size_t i = 0; i < c.op.count; i++) {
            pp[i] = i < TM_NEDGE ? tm_edge[i] : tm_rand(&rng, -1, 1);
            m[i] = i % 50 == 0 ? 0.0f : tm_rand(&rng, -0.1, 0.1);
            v[i] = i % 70 == 0 ? 0.0f : tm_rand(&rng, 0, 0.01);
        }
        size_t near = tm_check(&c, ctx, TM_PREC, 0);
        assert_true(near <= 1);
        tm_case_free(&c);
    }
    /* fill */
    const float fv[] = {1.0f, -0.0f, 0.3f, -FLT_MAX, 0x1p-149f};
    for (int i = 0; i < 5; i++) {
        struct tm_case c;
        tm_case_init(&c, OP_FILL, 3, 5);
        c.op.p.fill.value = fv[i];
        tm_check(&c, ctx, TM_PREC, 1);
        tm_case_free(&c);
    }
    backend_mpfr.free(ctx);
}

/* ---- PredNet's ops ------------------------------------------------------------------
 * The convolutions' sums are exact at 1000 bits, so every element must match;
 * the shapes include kernels wider than the image and 1x1 images, the value
 * kinds of tm_fill, the limb counts of several precisions, and Inf and NaN
 * next to taps outside the image (left out: no 0 Inf). conv2d_bwd_data
 * also with 2 and 4 pairs (dy_j, w_j), one sum over all of them. */

/* The conv2d_bwd_data case of tm_conv_case with m pairs: the inputs of all
 * pairs in c, filled from kind one after the other. */
static void tm_conv_pairs_inputs(struct tm_case *c, const uint32_t *ys, const uint32_t *ws,
                                 int m, int kind, uint64_t *rng)
{
    for (int j = 0; j < m; j++) {
        float *dy = tm_case_input_nd(c, 4, ys), *w = tm_case_input_nd(c, 4, ws);
        tm_fill(dy, c->g.nodes[c->op.inputs[2 * j]].count, kind, rng);
        tm_fill(w, c->g.nodes[c->op.inputs[2 * j + 1]].count, kind, rng);
    }
}

static void tm_conv_case(void *ctx, long prec, enum op_type t, const uint32_t *xs, uint32_t k,
                         uint32_t r, uint32_t s, int kind, uint64_t seed, int specials, int pairs)
{
    uint32_t ws[4] = {k, xs[1], r, s}, ys[4] = {xs[0], k, xs[2], xs[3]};
    struct tm_case c;
    float *a, *b;
    uint64_t rng = seed;
    if (t == OP_CONV2D) {
        tm_case_init_nd(&c, t, 4, ys);
        a = tm_case_input_nd(&c, 4, xs);
        b = tm_case_input_nd(&c, 4, ws);
    } else if (t == OP_CONV2D_BWD_DATA) {
        tm_case_init_nd(&c, t, 4, xs);
        if (pairs > 1)
            tm_conv_pairs_inputs(&c, ys, ws, pairs - 1, kind, &rng);
        a = tm_case_input_nd(&c, 4, ys); /* the last pair: the specials go there */
        b = tm_case_input_nd(&c, 4, ws);
    } else {
        tm_case_init_nd(&c, t, 4, ws);
        c.op.p.conv.r = r;
        c.op.p.conv.s = s;
        a = tm_case_input_nd(&c, 4, xs);
        b = tm_case_input_nd(&c, 4, ys);
    }
    int last = c.op.ninputs - 2;
    size_t na = c.g.nodes[c.op.inputs[last]].count, nb = c.g.nodes[c.op.inputs[last + 1]].count;
    tm_fill(a, na, kind, &rng);
    tm_fill(b, nb, kind, &rng);
    c.tol = kind == 0 && !specials ? 4 : 0;
    if (specials) { /* an Inf, a -Inf and a NaN in each operand, at its corners */
        const float sp[3] = {INFINITY, -INFINITY, NAN};
        a[0] = sp[seed % 3];
        a[na - 1] = sp[(seed + 1) % 3];
        b[nb - 1] = sp[(seed + 2) % 3];
        b[nb / 2] = 0.0f;
    }
    tm_check(&c, ctx, prec, 1);
    tm_case_free(&c);
}

void test_conv2d(void **state)
{
    (void)state;
    static const enum op_type ops[3] = {OP_CONV2D, OP_CONV2D_BWD_DATA, OP_CONV2D_BWD_FILTER};
    static const uint32_t shapes[][7] = {
        /* N, C, H, W, K, R, S */
        {2, 3, 5, 6, 4, 3, 3}, {1, 2, 4, 4, 3, 1, 5}, {1, 1, 2, 3, 2, 5, 3},
        {3, 2, 1, 1, 2, 3, 3}, {1, 4, 8, 8, 2, 3, 3}, {2, 1, 3, 7, 1, 1, 1},
    };
    void *ctx = tm_init(TM_PREC);
    uint64_t seed = 200;
    for (int o = 0; o < 3; o++)
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
            for (int kind = 0; kind < 3; kind++) {
                const uint32_t *d = shapes[sh];
                tm_conv_case(ctx, TM_PREC, ops[o], d, d[4], d[5], d[6], kind, seed++, 0, 1);
            }
    for (int o = 0; o < 3; o++)
        for (int sp = 0; sp < 3; sp++)
            tm_conv_case(ctx, TM_PREC, ops[o], shapes[sp], shapes[sp][4], shapes[sp][5],
                         shapes[sp][6], 0, seed++, 1, 1);
    for (int m = 2; m <= 4; m += 2) /* conv2d_bwd_data of m pairs */
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
            for (int kind = 0; kind < 4; kind++) {
                const uint32_t *d = shapes[sh];
                tm_conv_case(ctx, TM_PREC, OP_CONV2D_BWD_DATA, d, d[4], d[5], d[6], kind % 3,
                             seed++, kind == 3, m);
            }
    /* x all -0, positive weights with an Inf top-left tap: where that tap is
     * outside the image the sum of -0 products is +0 (from +0), elsewhere
     * -0 Inf = NaN */
    struct tm_case c;
    uint32_t xs[4] = {1, 2, 3, 4}, ws[4] = {2, 2, 3, 3}, ys[4] = {1, 2, 3, 4};
    tm_case_init_nd(&c, OP_CONV2D, 4, ys);
    float *x = tm_case_input_nd(&c, 4, xs), *w = tm_case_input_nd(&c, 4, ws);
    for (size_t i = 0; i < 24; i++)
        x[i] = -0.0f;
    for (size_t i = 0; i < 36; i++)
        w[i] = i % 9 == 0 ? INFINITY : 0.5f + (float)i;
    c.tol = 0;
    tm_check(&c, ctx, TM_PREC, 1);
    tm_case_free(&c);
    backend_mpfr.free(ctx);
    long precs[] = {24, 64, 65, 128, 256, 300, 1000};
    for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
        ctx = tm_init(precs[p]);
        for (int o = 0; o < 3; o++)
            tm_conv_case(ctx, precs[p], ops[o], shapes[0], 4, 3, 3, (int)(p % 3), seed++, 0, 1);
        for (int m = 2; m <= 4; m += 2)
            tm_conv_case(ctx, precs[p], OP_CONV2D_BWD_DATA, shapes[0], 4, 3, 3, (int)(p % 3),
                         seed++, 0, m);
        backend_mpfr.free(ctx);
    }
}

/* conv2d_bwd_data of m = 2 and 4 pairs is one sum rounded once: at 24 bits
 * the backend's value is RN_24 of the exact sum of its m single-pair ops'
 * exact values (tm_ref of each pair alone, added exactly here) and the
 * oracle's is RN32 of it; adding the m single-pair 24-bit results instead,
 * rounding at each addition (a per-pair kernel), misses that on some
 * elements, which tm_check's comparison with RN_P would see. */
void test_conv2d_pairs(void **state)
{
    (void)state;
    uint32_t xs[4] = {2, 3, 5, 6}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 5, 6};
    void *ctx = tm_init(24);
    for (int m = 2; m <= 4; m += 2) {
        struct tm_case c;
        uint64_t rng = 500 + (uint64_t)m;
        tm_case_init_nd(&c, OP_CONV2D_BWD_DATA, 4, xs);
        tm_conv_pairs_inputs(&c, ys, ws, m, 0, &rng);
        size_t n = c.op.count;
        mpfr_t *full = malloc(n * sizeof *full), *part = malloc(n * sizeof *part);
        mpfr_t *naive = malloc(n * sizeof *naive), *sum = malloc(n * sizeof *sum);
        mpfr_t *ref = malloc(n * sizeof *ref), r24;
        float *got = malloc(n * sizeof *got), *orc = malloc(n * sizeof *orc);
        double *mag = malloc(n * sizeof *mag);
        assert_true(full && part && naive && sum && ref && got && orc && mag);
        mpfr_init2(r24, 24);
        for (size_t i = 0; i < n; i++) {
            mpfr_inits2(24, full[i], part[i], naive[i], (mpfr_ptr)0);
            mpfr_inits2(TM_REF, sum[i], ref[i], (mpfr_ptr)0);
            mpfr_set_zero(naive[i], 1);
            mpfr_set_zero(sum[i], 1);
        }
        tm_run(&backend_mpfr, ctx, &c, got, full);
        for (int j = 0; j < m; j++) {
            struct tm_case one;
            tm_case_init_nd(&one, OP_CONV2D_BWD_DATA, 4, xs);
            float *dy = tm_case_input_nd(&one, 4, ys), *w = tm_case_input_nd(&one, 4, ws);
            memcpy(dy, c.in[2 * j], (size_t)ys[0] * ys[1] * ys[2] * ys[3] * sizeof *dy);
            memcpy(w, c.in[2 * j + 1], (size_t)ws[0] * ws[1] * ws[2] * ws[3] * sizeof *w);
            tm_ref(&one, ref, mag);
            tm_run(&backend_mpfr, ctx, &one, got, part);
            for (size_t i = 0; i < n; i++) {
                assert_int_equal(mpfr_add(sum[i], sum[i], ref[i], MPFR_RNDN), 0); /* exact */
                mpfr_add(naive[i], naive[i], part[i], MPFR_RNDN);
            }
            tm_case_free(&one);
        }
        const float *fin[OP_MAX_INPUTS];
        for (int k = 0; k < c.op.ninputs; k++)
            fin[k] = c.in[k];
        if (oracle_op(&c.g, &c.op, orc, fin, &(struct backend_step){0}) != 0)
            fail_msg("oracle: %s", dt_error());
        size_t differ = 0;
        for (size_t i = 0; i < n; i++) {
            mpfr_set(r24, sum[i], MPFR_RNDN);
            if (!mpfr_equal_p(full[i], r24)) {
                char what[160];
                mpfr_snprintf(what, sizeof what, "%Ra, the single pairs' exact sum rounds to %Ra",
                              full[i], r24);
                fail_msg("%d pairs at 24 bits, element %zu: the backend gives %s", m, i, what);
            }
            if (!tm_same(orc[i], tm_round_f32(sum[i], NULL)))
                fail_msg("%d pairs, element %zu: the oracle gives %a, the single pairs' exact "
                         "sum rounds to %a", m, i, (double)orc[i],
                         (double)tm_round_f32(sum[i], NULL));
            differ += !mpfr_equal_p(naive[i], r24);
            mpfr_clears(full[i], part[i], naive[i], sum[i], ref[i], (mpfr_ptr)0);
        }
        if (differ == 0)
            fail_msg("%d pairs: the 24-bit single-pair results added at 24 bits are the whole "
                     "sum rounded once everywhere: the case cannot tell the two apart", m);
        mpfr_clear(r24);
        free(full);
        free(part);
        free(naive);
        free(sum);
        free(ref);
        free(got);
        free(orc);
        free(mag);
        tm_case_free(&c);
    }
    backend_mpfr.free(ctx);
}

/* maxpool2 and its backward on windows that test op.h's pick: ties (the
 * first wins), +0 and -0 (equal: the first wins, its sign kept), NaN (the
 * first NaN wins over anything), Inf, then random windows. */
void test_maxpool2(void **state)
{
    (void)state;
    static const float win[][4] = {
        {0.0f, -0.0f, 0.0f, -0.0f}, {-0.0f, 0.0f, -0.0f, 0.0f}, {1, 1, 1, 1}, {1, 2, 2, 1},
        {-1, -3, -1, -2}, {NAN, 1, 2, 3}, {1, NAN, 5, -NAN}, {-INFINITY, -INFINITY, -1e30f, NAN},
        {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, {5, INFINITY, INFINITY, 5},
        {0x1p-149f, -0.0f, 0.0f, 0x1p-149f}, {-0.0f, -0x1p-149f, -1, -0.0f},
    };
    const size_t nw = sizeof win / sizeof win[0];
    uint32_t xs[4] = {2, 3, 6, 8}, ys[4] = {2, 3, 3, 4};
    uint64_t rng = 300;
    void *ctx = tm_init(TM_PREC);
    for (int bwd = 0; bwd < 2; bwd++) {
        struct tm_case c;
        tm_case_init_nd(&c, bwd ? OP_MAXPOOL2_BWD : OP_MAXPOOL2, 4, bwd ? xs : ys);
        float *x = tm_case_input_nd(&c, 4, xs);
        size_t wi = 0;
        for (size_t p = 0; p < 6; p++)
            for (size_t y = 0; y < 6; y += 2)
                for (size_t z = 0; z < 8; z += 2, wi++) {
                    float v[4];
                    for (int q = 0; q < 4; q++)
                        v[q] = wi < nw ? win[wi][q] : tm_rand(&rng, -1, 1);
                    if (wi >= nw && wi % 3 == 0)
                        v[(wi / 3) % 4] = v[(wi / 3 + 1) % 4]; /* a random tie */
                    size_t i = (p * 6 + y) * 8 + z;
                    x[i] = v[0];
                    x[i + 1] = v[1];
                    x[i + 8] = v[2];
                    x[i + 9] = v[3];
                }
        if (bwd) {
            float *dy = tm_case_input_nd(&c, 4, ys);
            for (size_t i = 0; i < 72; i++)
                dy[i] = i % 7 == 0 ? -0.0f : tm_rand(&rng, -2, 2);
        }
        c.tol = 0;
        tm_check(&c, ctx, TM_PREC, 1);
        tm_case_free(&c);
    }
    backend_mpfr.free(ctx);
}

/* upsample2 and its backward: the four sums with IEEE's zero signs (-0 only
 * when all four are -0), cancellations, Inf and NaN, wide exponents. */
void test_upsample2(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    uint32_t xs[4] = {2, 3, 4, 5}, ys[4] = {2, 3, 8, 10};
    uint64_t rng = 400;
    struct tm_case c;
    tm_case_init_nd(&c, OP_UPSAMPLE2, 4, ys);
    float *x = tm_case_input_nd(&c, 4, xs);
    for (size_t i = 0; i < 120; i++)
        x[i] = i < TM_NEDGE ? tm_edge[i] : tm_rand_wide(&rng, -30, 30);
    c.tol = 0;
    tm_check(&c, ctx, TM_PREC, 1);
    tm_case_free(&c);
    static const float win[][4] = {
        {-0.0f, -0.0f, -0.0f, -0.0f}, {0.0f, -0.0f, -0.0f, -0.0f}, {-0.0f, -0.0f, -0.0f, 0.0f},
        {1, -1, -0.0f, -0.0f}, {1e30f, 1, -1e30f, 0x1p-149f}, {INFINITY, 1, -INFINITY, 2},
        {INFINITY, 1, NAN, 2}, {FLT_MAX, FLT_MAX, 1, -FLT_MAX}, {0x1p-149f, 0x1p-149f, 3, -3},
    };
    const size_t nw = sizeof win / sizeof win[0];
    for (int kind = 0; kind < 2; kind++) {
        tm_case_init_nd(&c, OP_UPSAMPLE2_BWD, 4, xs);
        float *dy = tm_case_input_nd(&c, 4, ys);
        for (size_t o = 0; o < 120; o++) {
            size_t p = o / 20, y = o / 5 % 4, z = o % 5, i = (p * 8 + 2 * y) * 10 + 2 * z;
            float v[4];
            for (int q = 0; q < 4; q++)
                v[q] = kind == 0 && o < nw ? win[o][q]
                     : kind == 0           ? tm_rand(&rng, -1, 1)
                                           : tm_rand_wide(&rng, -100, 100);
            dy[i] = v[0];
            dy[i + 1] = v[1];
            dy[i + 10] = v[2];
            dy[i + 11] = v[3];
        }
        c.tol = kind == 0 ? 4 : 0;
        tm_check(&c, ctx, TM_PREC, 1);
        tm_case_free(&c);
    }
    backend_mpfr.free(ctx);
}

/* concat of 1 to 4 inputs, slice at the start, middle and end, slice_bwd */
void test_channels(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    uint64_t rng = 500;
    static const uint32_t cs[4] = {2, 1, 3, 2};
    for (int nin = 1; nin <= 4; nin++) {
        uint32_t tot = 0;
        for (int k = 0; k < nin; k++)
            tot += cs[k];
        uint32_t os[4] = {3, tot, 2, 3};
        struct tm_case c;
        tm_case_init_nd(&c, OP_CONCAT, 4, os);
        for (int k = 0; k < nin; k++) {
            uint32_t is[4] = {3, cs[k], 2, 3};
            float *x = tm_case_input_nd(&c, 4, is);
            for (size_t i = 0; i < 3u * cs[k] * 6; i++)
                x[i] = (i + (size_t)k) % 9 == 0 ? tm_edge[(i + (size_t)k) % TM_NEDGE]
                                                : tm_rand(&rng, -1, 1);
        }
        c.tol = 0;
        tm_check(&c, ctx, TM_PREC, 1);
        tm_case_free(&c);
    }
    static const uint32_t sl[3][2] = {{0, 2}, {2, 3}, {4, 1}}; /* c0, n of 5 channels */
    for (int bwd = 0; bwd < 2; bwd++)
        for (int j = 0; j < 3; j++) {
            uint32_t whole[4] = {2, 5, 3, 2}, part[4] = {2, sl[j][1], 3, 2};
            struct tm_case c;
            tm_case_init_nd(&c, bwd ? OP_SLICE_BWD : OP_SLICE, 4, bwd ? whole : part);
            c.op.p.slice.c0 = sl[j][0];
            c.op.p.slice.n = sl[j][1];
            c.op.p.slice.total = 5;
            float *x = tm_case_input_nd(&c, 4, bwd ? part : whole);
            size_t nx = c.g.nodes[c.op.inputs[0]].count;
            for (size_t i = 0; i < nx; i++)
                x[i] = i < TM_NEDGE ? tm_edge[i] : tm_rand(&rng, -1, 1);
            c.tol = 0;
            tm_check(&c, ctx, TM_PREC, 1);
            tm_case_free(&c);
        }
    backend_mpfr.free(ctx);
}

/* x values at hard_sigmoid's clip bounds (x = +-2.5, where the exact t is
 * 1 + 7.5e-9 and -7.5e-9 but float32 rounds t onto the bound), their float
 * neighbours, satlu's bound m and its neighbours, and zeros. */
static void tm_fill_bounds(float *x, size_t n, float m, uint64_t *rng)
{
    const float v[] = {2.5f, -2.5f, nextafterf(2.5f, 0), nextafterf(2.5f, 3), nextafterf(-2.5f, 0),
                       nextafterf(-2.5f, -3), 2.4999995f, -2.4999995f, 2.5000002f, -2.5000005f,
                       m, nextafterf(m, -INFINITY), nextafterf(m, INFINITY), -m, 0.0f, -0.0f};
    const size_t nv = sizeof v / sizeof v[0];
    for (size_t i = 0; i < n; i++)
        x[i] = i < nv ? v[i] : i < nv + TM_NEDGE ? tm_edge[i - nv] : tm_rand(rng, -4, 4);
}

static void tm_bound_case(void *ctx, enum op_type t, float m, double tol, uint64_t seed)
{
    struct tm_case c;
    tm_case_init(&c, t, 24, 25);
    c.op.p.satlu.max = m;
    c.tol = tol;
    uint64_t rng = seed;
    tm_fill_bounds(tm_case_input(&c, 24, 25), c.op.count, m, &rng);
    if (t == OP_HARD_SIGMOID_BWD || t == OP_SATLU_BWD) {
        float *dy = tm_case_input(&c, 24, 25);
        for (size_t i = 0; i < c.op.count; i++)
            dy[i] = i % 11 == 5 ? tm_edge[i % TM_NEDGE] : tm_rand_wide(&rng, -20, 3);
    }
    tm_check(&c, ctx, TM_PREC, 1);
    tm_case_free(&c);
}

void test_prednet_activations(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    tm_bound_case(ctx, OP_HARD_SIGMOID, 1.0f, 4, 601);
    tm_bound_case(ctx, OP_HARD_SIGMOID_BWD, 1.0f, 2, 602);
    tm_unary(ctx, OP_HARD_SIGMOID, -3, 3, 4, 603);
    tm_unary(ctx, OP_HARD_SIGMOID, -1e-6, 1e-6, 4, 604);
    tm_binary(ctx, OP_HARD_SIGMOID_BWD, -3, 3, -2, 2, 2, 605, NULL, 0);
    const float ms[] = {1.0f, 0.0f, -0.0f, 0.75f, -2.0f, INFINITY};
    for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++) {
        tm_bound_case(ctx, OP_SATLU, ms[j], 1, 610 + j);
        tm_bound_case(ctx, OP_SATLU_BWD, ms[j], 1, 620 + j);
    }
    union op_params p;
    memset(&p, 0, sizeof p);
    p.satlu.max = 1.0f;
    tm_unary(ctx, OP_SATLU, -2, 2, 1, 630);
    tm_binary(ctx, OP_SATLU_BWD, -2, 2, -2, 2, 1, 631, &p, 0);
    backend_mpfr.free(ctx);
}

/* sub, neg, mul (the edge values crossed), add_bias and bias_grad on
 * images, mean and mean_bwd */
void test_prednet_arith(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    tm_binary(ctx, OP_SUB, -1, 1, -1, 1, 2, 701, NULL, 0);
    tm_binary(ctx, OP_SUB, -1, 1, -1e-6, 1e-6, 2, 702, NULL, 0);
    tm_unary(ctx, OP_NEG, -1, 1, 1, 703);
    tm_binary(ctx, OP_MUL, -1, 1, -1, 1, 2, 704, NULL, 0);
    tm_binary(ctx, OP_MUL, -1e-20, 1e-20, -1e-20, 1e-20, 0, 705, NULL, 0);
    uint64_t rng = 710;
    uint32_t xs[4] = {3, 4, 5, 6}, bs[1] = {4};
    struct tm_case c;
    tm_case_init_nd(&c, OP_ADD_BIAS, 4, xs);
    float *x = tm_case_input_nd(&c, 4, xs), *b = tm_case_input_nd(&c, 1, bs);
    for (size_t i = 0; i < c.op.count; i++)
        x[i] = i < TM_NEDGE * 4 ? tm_edge[i / 4] : tm_rand_wide(&rng, -30, 5);
    for (size_t j = 0; j < 4; j++)
        b[j] = j == 3 ? -0.0f : tm_rand_wide(&rng, -30, 5);
    c.tol = 2;
    tm_check(&c, ctx, TM_PREC, 1);
    tm_case_free(&c);
    /* channel 0 all -0, channel 1 a cancelling pair, channel 2 an Inf,
     * channel 3 Inf and -Inf, channel 4 wide random */
    uint32_t ds[4] = {3, 5, 4, 3};
    tm_case_init(&c, OP_BIAS_GRAD, 5, 0);
    float *dy = tm_case_input_nd(&c, 4, ds);
    for (size_t i = 0; i < c.g.nodes[c.op.inputs[0]].count; i++) {
        size_t ch = i / 12 % 5;
        dy[i] = ch == 0 ? -0.0f : ch == 1 ? 0.0f : tm_rand_wide(&rng, ch == 4 ? -90 : -10, 3);
    }
    dy[12 + 1] = 3.0f;
    dy[60 + 12 + 7] = -3.0f;
    dy[24 + 5] = INFINITY;
    dy[36 + 2] = INFINITY;
    dy[60 + 36 + 11] = -INFINITY;
    c.tol = 0;
    tm_check(&c, ctx, TM_PREC, 1);
    tm_case_free(&c);
    /* mean: counts 1 to 70 and 4096, scales of either sign, zero, -0;
     * exact zero sums, Inf, NaN */
    const float scales[] = {1.0f, -0.5f, 0.3f, 0.0f, -0.0f, 3e-5f, INFINITY};
    for (int r = 0; r < 120; r++) {
        uint32_t n = r < 112 ? 1 + (uint32_t)(tu_rand_u64(&rng) % 70) : r < 116 ? 4096 : 4095;
        tm_case_init(&c, OP_MEAN, 1, 0);
        c.op.p.mean.scale = scales[r % 7];
        x = tm_case_input(&c, n, 0);
        for (uint32_t i = 0; i < n; i++)
            x[i] = r % 3 ? tm_rand(&rng, -1, 1) : tm_rand_wide(&rng, -80, 10);
        if (r % 10 == 1) /* an exact zero sum: x and -x */
            for (uint32_t i = 0; i + 1 < n; i += 2)
                x[i + 1] = -x[i];
        if (r % 10 == 1 && n % 2)
            x[n - 1] = r % 20 == 1 ? 0.0f : -0.0f;
        if (r % 10 == 3)
            for (uint32_t i = 0; i < n; i++)
                x[i] = -0.0f;
        if (r == 5)
            x[0] = INFINITY;
        if (r == 15)
            x[n - 1] = NAN;
        if (r == 25)
            x[0] = FLT_MAX, x[n - 1] = FLT_MAX;
        c.tol = fabsf(c.op.p.mean.scale) <= 1 ? 4 : 0;
        tm_check(&c, ctx, TM_PREC, 0);
        tm_case_free(&c);
    }
    const float gs[] = {1.0f, -0.0f, 0.37f, -3e-5f, INFINITY, NAN};
    for (int r = 0; r < 24; r++) {
        tm_case_init(&c, OP_MEAN_BWD, r % 2 ? 63 : 64, 65);
        c.op.p.mean.scale = scales[r % 7];
        tm_case_input(&c, 1, 0)[0] = gs[r % 6];
        c.tol = 4;
        tm_check(&c, ctx, TM_PREC, 0);
        tm_case_free(&c);
    }
    backend_mpfr.free(ctx);
}
