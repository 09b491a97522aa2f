/* test_mpfr.c: the mpfr backend (reference/backend_mpfr.c, mpfr_dot.c):
 * float32 round trips and rounding; every op at 200 bits against an
 * independent 1000-bit evaluation of its op.h formula (its 200-bit values
 * and their float32 rounding), against the exact oracle, and against the
 * cpu backend as a sanity check; describe, trace and the precision option.
 * Training runs are in test_mpfr_train.c.
 * Dimension letters: M, K, N of a matrix product; R rows, F features;
 * N, C, H, W of an image, K, C, R, S of a filter.
 * Sources: this file (float32 in and out, matrix products, trace,
 * describe, options, and main) and test_mpfr_ops.c (the elementwise ops
 * and PredNet's); test_mpfr.h declares what they share. */
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
#include "stats.h"
#include "test_mpfr.h"
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
void tm_fill(float *a, size_t count, int kind, uint64_t *rng)
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
