/* test_mpfr.c: the mpfr backend (reference/backend_mpfr.c, mpfr_dot.c):
 * float32 round trips and rounding; every op at 200 bits against an
 * independent 1000-bit evaluation of its op.h formula (its 200-bit values
 * and their float32 rounding), against the exact oracle, and against the
 * cpu backend as a sanity check; describe, trace and the precision option.
 * Training runs are in test_mpfr_train.c.
 * Dimension letters: M, K, N of a matrix product; R rows, F features;
 * N, C, H, W of an image, K, C, R, S of a filter. */
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
#include "stats.h"
#include "test_util.h"
#include "util.h"

/* ---- float32 in and out -------------------------------------------------------- */

static const uint32_t tm_special_bits[] = {
    0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x00000002u, 0x00000003u,
    0x007fffffu, 0x807fffffu, 0x00800000u, 0x80800000u, 0x00800001u, 0x00400000u,
    0x3f800000u, 0xbf800000u, 0x3f800001u, 0x3f7fffffu, 0x7f7fffffu, 0xff7fffffu,
    0x7f7ffffeu, 0x7f000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
    0x7f800001u, 0x7fbfffffu, 0x34000000u, 0x33800000u, 0x4b800000u, 0x4b7fffffu,
};

/* upload then download gives the same float back (NaN: a NaN). */
static void test_round_trip(void **state)
{
    (void)state;
    size_t n = 1 << 18;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    assert_true(x && y);
    size_t ns = sizeof tm_special_bits / sizeof tm_special_bits[0];
    uint64_t rng = 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        if (i < ns)
            b = tm_special_bits[i];
        else if (i < ns + 600)
            b = (uint32_t)((i - ns) / 2) << 23 | ((i & 1) ? 0x7fffffu : 0); /* every exponent */
        else if (i % 4 == 0)
            b = (uint32_t)tu_rand_u64(&rng) & 0x807fffffu;                   /* subnormals */
        else
            b = (uint32_t)tu_rand_u64(&rng);
        x[i] = tm_float(b);
    }
    long precs[] = {24, 53, 128, TM_PREC, 1000};
    for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
        void *ctx = tm_init(precs[p]);
        backend_buf *b = backend_mpfr.alloc(ctx, n);
        memset(y, 0xa5, n * sizeof *y);
        backend_mpfr.download(ctx, y, b, n);
        for (size_t i = 0; i < n; i++)
            if (tm_bits(y[i]) != 0)
                fail_msg("a fresh buffer at %ld bits holds %a at %zu, not +0", precs[p],
                         (double)y[i], i);
        backend_mpfr.upload(ctx, b, x, n);
        backend_mpfr.download(ctx, y, b, n);
        for (size_t i = 0; i < n; i++)
            if (!tm_same(x[i], y[i]))
                fail_msg("%ld bits: uploaded %a (%#x), downloaded %a (%#x)", precs[p],
                         (double)x[i], tm_bits(x[i]), (double)y[i], tm_bits(y[i]));
        backend_mpfr.release(ctx, b);
        backend_mpfr.free(ctx);
    }
    free(x);
    free(y);
}

/* Values v = x + h1 h2 + d1 d2 made by a matrix product (exact at 200 bits
 * for these), placed near the float32 rounding boundaries: midpoints of
 * normal and subnormal floats, the overflow threshold, half the least
 * subnormal, and beyond the range. Every element of the (T,T) product
 * [x h1 d1] [1 h2 d2]^T is checked, at several precisions, against the
 * independent rounding of RN_prec(v), and that rounding against
 * mpfr_get_flt. */
struct tm_target {
    float x, h1, h2, d1, d2;
};

/* 2^e (-298 <= e <= 254) as a product of two floats. */
static void tm_pow2(int e, float *a, float *b)
{
    int h = e / 2;
    *a = ldexpf(1.0f, h);
    *b = ldexpf(1.0f, e - h);
}

static int tm_half_ulp_exp(float x)
{
    int e;
    frexpf(x, &e);
    return fabsf(x) < FLT_MIN ? -150 : e - 25;
}

static void tm_target_add(struct tm_target *t, size_t *n, float x, int sh, int hexp, int sd,
                          int dexp)
{
    struct tm_target *o = &t[(*n)++];
    o->x = x;
    tm_pow2(hexp, &o->h1, &o->h2);
    o->h1 *= (float)sh;
    if (sd) {
        tm_pow2(dexp < -298 ? -298 : dexp, &o->d1, &o->d2);
        o->d1 *= (float)sd;
    } else {
        o->d1 = o->d2 = 0;
    }
}

static void test_download_rounding(void **state)
{
    (void)state;
    enum { TMAX = 512 };
    static const int below[] = {1, 2, 23, 24, 25, 60, 100, 150, 175, 190, 198, 199, 200, 201, 230};
    struct tm_target *t = calloc(TMAX, sizeof *t);
    assert_non_null(t);
    size_t nt = 0;
    uint64_t rng = 7;
    for (int i = 0; i < 100; i++) { /* normal floats of every magnitude */
        float x = tm_rand_wide(&rng, -125, 128);
        int j = (int)(tu_rand_u64(&rng) % 16);
        int sd = j == 15 ? 0 : (tu_rand_u64(&rng) & 1) ? 1 : -1;
        int hx = tm_half_ulp_exp(x);
        tm_target_add(t, &nt, x, (i & 1) ? 1 : -1, hx, sd, hx - below[j % 15]);
    }
    for (int i = 0; i < 60; i++) { /* subnormals, and the largest ones */
        uint32_t b = i < 10 ? 0x007fffffu - (uint32_t)i : (uint32_t)tu_rand_u64(&rng) & 0x007fffffu;
        float x = tm_float(b | ((i & 2) ? 0x80000000u : 0));
        int j = (int)(tu_rand_u64(&rng) % 16);
        int sd = j == 15 ? 0 : (tu_rand_u64(&rng) & 1) ? 1 : -1;
        tm_target_add(t, &nt, x, (i & 1) ? 1 : -1, -150, sd, -150 - below[j % 15]);
    }
    for (int s = -1; s <= 1; s += 2)
        for (int j = 0; j < 16; j++) {
            int sd = j == 15 ? 0 : (j & 1) ? 1 : -1;
            int jb = below[j % 15];
            /* the overflow threshold FLT_MAX + 2^103 */
            tm_target_add(t, &nt, (float)s * FLT_MAX, s, 103, sd, 103 - jb);
            /* the midpoint below FLT_MIN, and above it */
            tm_target_add(t, &nt, (float)s * FLT_MIN, -s, -150, sd, -150 - jb);
            tm_target_add(t, &nt, (float)s * FLT_MIN, s, -150, sd, -150 - jb);
            /* around half the least subnormal, and far below it */
            tm_target_add(t, &nt, 0.0f, s, -150, sd, -150 - jb);
            tm_target_add(t, &nt, 0.0f, s, -151, sd, -150);
            tm_target_add(t, &nt, 0.0f, s, -152 - jb, sd, -298);
            /* past the float range */
            tm_target_add(t, &nt, 0.0f, s, 128, sd, 104 - jb);
            tm_target_add(t, &nt, 0.0f, s, 150 + j * 6, sd, 100);
        }
    assert_true(nt <= TMAX);

    struct tm_case c;
    tm_case_init(&c, OP_MATMUL, (uint32_t)nt, (uint32_t)nt);
    c.op.p.mm.tb = 1;
    c.tol = 0;
    float *a = tm_case_input(&c, (uint32_t)nt, 3), *b = tm_case_input(&c, (uint32_t)nt, 3);
    for (size_t i = 0; i < nt; i++) {
        a[3 * i] = t[i].x;
        a[3 * i + 1] = t[i].h1;
        a[3 * i + 2] = t[i].d1;
        b[3 * i] = 1.0f;
        b[3 * i + 1] = t[i].h2;
        b[3 * i + 2] = t[i].d2;
    }
    long precs[] = {TM_PREC, 24, 25, 53, 64, 113, 128, 256, 300, 1000};
    for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
        void *ctx = tm_init(precs[p]);
        tm_check(&c, ctx, precs[p], 1);
        backend_mpfr.free(ctx);
    }
    /* The test's rounding against MPFR's own, on the same values. */
    mpfr_t *ref = malloc(c.op.count * sizeof *ref);
    double *mag = malloc(c.op.count * sizeof *mag);
    assert_true(ref && mag);
    for (size_t i = 0; i < c.op.count; i++)
        mpfr_init2(ref[i], TM_REF);
    tm_ref(&c, ref, mag);
    size_t ties = 0;
    for (size_t i = 0; i < c.op.count; i++) {
        double dist;
        float mine = tm_round_f32(ref[i], &dist), lib = mpfr_get_flt(ref[i], MPFR_RNDN);
        ties += dist == 0;
        if (!tm_same(mine, lib))
            fail_msg("rounding %zu: the test's %a, mpfr_get_flt's %a", i, (double)mine, (double)lib);
        mpfr_clear(ref[i]);
    }
    if (ties < 50)
        fail_msg("only %zu exact ties among the targets: the test lost its point", ties);
    free(ref);
    free(mag);
    tm_case_free(&c);
    free(t);
}

/* ---- matrix products ------------------------------------------------------------- */

/* Fill a (count) with: 0 uniform in [-1, 1]; 1 wide exponents (2^-60 ..
 * 2^60) with zeros and -0; 2 floats of every magnitude, subnormals
 * included, products within the float range's square. */
static void tm_fill(float *a, size_t count, int kind, uint64_t *rng)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t u = tu_rand_u64(rng);
        if (kind == 0)
            a[i] = tm_rand(rng, -1, 1);
        else if (u % 10 == 0)
            a[i] = (u & 16) ? -0.0f : 0.0f;
        else
            a[i] = kind == 1 ? tm_rand_wide(rng, -60, 60) : tm_rand_wide(rng, -149, 127);
    }
}

static void tm_matmul_case(void *ctx, long prec, uint32_t m, uint32_t k, uint32_t n, int ta,
                           int tb, int kind, uint64_t seed)
{
    struct tm_case c;
    tm_case_init(&c, OP_MATMUL, m, n);
    c.op.p.mm.ta = ta;
    c.op.p.mm.tb = tb;
    c.tol = kind == 0 ? 2 : 0;
    float *a = ta ? tm_case_input(&c, k, m) : tm_case_input(&c, m, k);
    float *b = tb ? tm_case_input(&c, n, k) : tm_case_input(&c, k, n);
    uint64_t rng = seed;
    tm_fill(a, (size_t)m * k, kind, &rng);
    tm_fill(b, (size_t)k * n, kind, &rng);
    tm_check(&c, ctx, prec, 1);
    tm_case_free(&c);
}

/* Every transposition on several shapes and value ranges at 200 bits; a
 * thin and a wide product; the limb counts of other precisions (1, 2, 3, 4
 * and 5+ limbs take different code). The 1000-bit sums are exact, so every
 * element must match. */
static void test_matmul(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    uint64_t seed = 100;
    for (int kind = 0; kind < 3; kind++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                tm_matmul_case(ctx, TM_PREC, 23, 41, 19, ta, tb, kind, seed++);
                tm_matmul_case(ctx, TM_PREC, 1, 7, 3, ta, tb, kind, seed++);
            }
    tm_matmul_case(ctx, TM_PREC, 5, 1, 6, 0, 0, 1, seed++);
    tm_matmul_case(ctx, TM_PREC, 3, 700, 4, 0, 1, 1, seed++);
    backend_mpfr.free(ctx);
    long precs[] = {24, 64, 65, 128, 150, 256, 300, 1000};
    for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
        ctx = tm_init(precs[p]);
        for (int kind = 0; kind < 3; kind++)
            tm_matmul_case(ctx, precs[p], 9, 33, 11, (int)p & 1, kind & 1, kind, seed++);
        backend_mpfr.free(ctx);
    }
}

/* Inf and NaN operands: IEEE's results (Inf - Inf and 0 Inf are NaN). */
static void test_matmul_special(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    const float sp[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1.0f, -2.5f, FLT_MAX};
    struct tm_case c;
    tm_case_init(&c, OP_MATMUL, 8, 8);
    c.tol = 0;
    float *a = tm_case_input(&c, 8, 3), *b = tm_case_input(&c, 3, 8);
    uint64_t rng = 5;
    for (int i = 0; i < 24; i++) {
        a[i] = sp[(i * 7 + 1) % 8];
        b[i] = (i % 5 == 0) ? sp[i % 8] : tm_rand(&rng, -1, 1);
    }
    tm_check(&c, ctx, TM_PREC, 1);
    tm_case_free(&c);
    backend_mpfr.free(ctx);
}

/* Operands beyond the float range, made by squaring on the backend: a row
 * [T 1 3] times a column [U 1 0.5] with T = 2^-e, U = 2^e is 3.5 exactly,
 * through the fixed-point accumulator for e = 400 and through mpfr_sum for
 * e = 12800 (an exponent spread past the accumulator's width). */
static void tm_run_node(void *ctx, struct graph *g, int i, backend_buf **buf)
{
    const backend_buf *in[OP_MAX_INPUTS];
    for (int k = 0; k < g->nodes[i].ninputs; k++)
        in[k] = buf[g->nodes[i].inputs[k]];
    struct backend_step st = {0};
    backend_mpfr.op[g->nodes[i].type](ctx, g, &g->nodes[i], buf[i], in, &st);
}

static void test_matmul_spread(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    for (int big = 0; big < 2; big++) {
        int squarings = big ? 7 : 2; /* 2^100 squared: 2^400 or 2^12800 */
        struct graph g;
        graph_init(&g);
        uint32_t s11[2] = {1, 1}, s12[2] = {1, 2}, s23[2] = {2, 3}, s32[2] = {3, 2}, s21[2] = {2, 1};
        int t = graph_input(&g, "t", 2, s11), u = graph_input(&g, "u", 2, s11);
        int tpad = graph_input(&g, "tpad", 2, s12);    /* [0 1] */
        int upad = graph_input(&g, "upad", 2, s21);    /* [0; 1] */
        int e1r = graph_input(&g, "e1r", 2, s12);      /* [1 0] */
        int e1c = graph_input(&g, "e1c", 2, s21);      /* [1; 0] */
        int sel_r = graph_input(&g, "sel_r", 2, s23);  /* [[1 0 0] [0 1 3]] */
        int sel_c = graph_input(&g, "sel_c", 2, s32);  /* [[1 0] [0 1] [0 0.5]] */
        int t0 = t, u0 = u, nleaf = g.n;
        for (int q = 0; q < squarings; q++) {
            char name[32];
            snprintf(name, sizeof name, "tsq%d", q);
            t = graph_matmul(&g, name, t, t, 0, 0);
            snprintf(name, sizeof name, "usq%d", q);
            u = graph_matmul(&g, name, u, u, 0, 0);
        }
        int t2 = graph_matmul(&g, "t2", t, e1r, 0, 0);        /* [T 0] */
        int tr = graph_add(&g, "tr", t2, tpad);               /* [T 1] */
        int u2 = graph_matmul(&g, "u2", e1c, u, 0, 0);        /* [U; 0] */
        int uc = graph_add(&g, "uc", u2, upad);               /* [U; 1] */
        int row = graph_matmul(&g, "row", tr, sel_r, 0, 0);   /* [T 1 3] */
        int col = graph_matmul(&g, "col", sel_c, uc, 0, 0);   /* [U; 1; 0.5] */
        int dot = graph_matmul(&g, "dot", row, col, 0, 0);
        int dotT = graph_matmul(&g, "dotT", col, row, 1, 1);  /* the same, transposed operands */
        backend_buf **buf;
        buf = calloc((size_t)g.n, sizeof *buf);
        assert_non_null(buf);
        for (int i = 0; i < g.n; i++)
            buf[i] = backend_mpfr.alloc(ctx, g.nodes[i].count);
        const float tv[] = {0x1p-100f}, uv[] = {0x1p100f}, tp[] = {0, 1}, up[] = {0, 1},
                    er[] = {1, 0}, ec[] = {1, 0}, sr[] = {1, 0, 0, 0, 1, 3},
                    sc[] = {1, 0, 0, 1, 0, 0.5f};
        backend_mpfr.upload(ctx, buf[t0], tv, 1);
        backend_mpfr.upload(ctx, buf[u0], uv, 1);
        backend_mpfr.upload(ctx, buf[tpad], tp, 2);
        backend_mpfr.upload(ctx, buf[upad], up, 2);
        backend_mpfr.upload(ctx, buf[e1r], er, 2);
        backend_mpfr.upload(ctx, buf[e1c], ec, 2);
        backend_mpfr.upload(ctx, buf[sel_r], sr, 6);
        backend_mpfr.upload(ctx, buf[sel_c], sc, 6);
        for (int i = nleaf; i < g.n; i++)
            tm_run_node(ctx, &g, i, buf);
        float r[3], tt, uu;
        backend_mpfr.download(ctx, &tt, buf[t], 1);
        backend_mpfr.download(ctx, &uu, buf[u], 1);
        assert_true(tt == 0.0f && isinf(uu)); /* beyond float32 both ways */
        backend_mpfr.download(ctx, r, buf[row], 3);
        assert_true(r[0] == 0.0f && r[1] == 1.0f && r[2] == 3.0f);
        backend_mpfr.download(ctx, r, buf[dot], 1);
        if (r[0] != 3.5f)
            fail_msg("[2^-%d 1 3] . [2^%d 1 0.5] = %a, expected 3.5", 100 << squarings,
                     100 << squarings, (double)r[0]);
        backend_mpfr.download(ctx, r, buf[dotT], 1);
        if (r[0] != 3.5f)
            fail_msg("transposed: %a, expected 3.5", (double)r[0]);
        for (int i = 0; i < g.n; i++)
            backend_mpfr.release(ctx, buf[i]);
        free(buf);
        graph_free(&g);
    }
    backend_mpfr.free(ctx);
}

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
static void tm_fill_unary(float *x, size_t n, double lo, double hi, uint64_t *rng, size_t stride)
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

static void test_activations(void **state)
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

static void test_add_ops(void **state)
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
static void test_mse(void **state)
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

static void test_mse_bwd(void **state)
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

static void test_optimizers(void **state)
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

static void test_conv2d(void **state)
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
static void test_conv2d_pairs(void **state)
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
static void test_maxpool2(void **state)
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
static void test_upsample2(void **state)
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
static void test_channels(void **state)
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

static void test_prednet_activations(void **state)
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
static void test_prednet_arith(void **state)
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

/* ---- trace, describe, options ----------------------------------------------------- */

static void test_trace_describe(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    struct trace_config cfg;
    memset(&cfg, 0, sizeof cfg);
    backend_mpfr.describe(ctx, &cfg);
    assert_non_null(trace_config_get(&cfg, "precision"));
    assert_string_equal(trace_config_get(&cfg, "precision"), "200");
    assert_non_null(trace_config_get(&cfg, "mpfr_version"));
    assert_string_equal(trace_config_get(&cfg, "mpfr_version"), mpfr_get_version());
    trace_config_free(&cfg);

    /* trace of a tensor that is not float32 (sigmoid outputs, with specials):
     * the record of its float32 rounding */
    struct tm_case c;
    tm_case_init(&c, OP_SIGMOID, 5000, 0);
    float *x = tm_case_input(&c, 5000, 0);
    uint64_t rng = 81;
    tm_fill_unary(x, 5000, -20, 20, &rng, 1);
    x[4000] = NAN;
    backend_buf *ib = backend_mpfr.alloc(ctx, 5000), *ob = backend_mpfr.alloc(ctx, 5000);
    backend_mpfr.upload(ctx, ib, x, 5000);
    const backend_buf *in[1] = {ib};
    backend_mpfr.op[OP_SIGMOID](ctx, &c.g, &c.op, ob, in, NULL);
    float *y = malloc(5000 * sizeof *y);
    assert_non_null(y);
    backend_mpfr.download(ctx, y, ob, 5000);
    struct trace_oprec r1, r2;
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    backend_mpfr.trace(ctx, ob, 5000, &r1);
    stats_compute(y, 5000, &r2);
    assert_memory_equal(&r1, &r2, sizeof r1);
    assert_true(r1.nan >= 1 && r1.inf == 0);
    free(y);
    backend_mpfr.release(ctx, ib);
    backend_mpfr.release(ctx, ob);
    tm_case_free(&c);
    backend_mpfr.free(ctx);

    ctx = tm_init(0); /* the default */
    memset(&cfg, 0, sizeof cfg);
    backend_mpfr.describe(ctx, &cfg);
    assert_string_equal(trace_config_get(&cfg, "precision"), "128");
    trace_config_free(&cfg);
    backend_mpfr.free(ctx);
}

static void test_precision_range(void **state)
{
    (void)state;
    const long bad[] = {23, 1, -5, 100001, 1L << 40};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct backend_options bo = {.threads = 1, .precision = bad[i]};
        void *ctx = NULL;
        dt_error_set("%s", "");
        assert_int_equal(backend_mpfr.init(&ctx, &bo), -1);
        assert_null(ctx);
        assert_true(strlen(dt_error()) > 0);
    }
    const long good[] = {24, 100000};
    for (size_t i = 0; i < 2; i++) {
        void *ctx = tm_init(good[i]);
        float x[3] = {0.1f, -0x1p-149f, 3e38f}, y[3];
        backend_buf *b = backend_mpfr.alloc(ctx, 3);
        backend_mpfr.upload(ctx, b, x, 3);
        backend_mpfr.download(ctx, y, b, 3);
        assert_memory_equal(x, y, sizeof x);
        backend_mpfr.release(ctx, b);
        backend_mpfr.free(ctx);
    }
    /* the generic limb path at 100000 bits: a small product */
    void *ctx = tm_init(100000);
    tm_matmul_case(ctx, 100000, 3, 5, 2, 0, 1, 1, 91);
    backend_mpfr.free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_download_rounding),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_special),
        cmocka_unit_test(test_matmul_spread),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_add_ops),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_mse_bwd),
        cmocka_unit_test(test_optimizers),
        cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_conv2d_pairs),
        cmocka_unit_test(test_maxpool2),
        cmocka_unit_test(test_upsample2),
        cmocka_unit_test(test_channels),
        cmocka_unit_test(test_prednet_activations),
        cmocka_unit_test(test_prednet_arith),
        cmocka_unit_test(test_trace_describe),
        cmocka_unit_test(test_precision_range),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mpfr_free_cache();
    return rc;
}
