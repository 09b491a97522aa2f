/* test_oracle_acc.c: the oracle's exact accumulator, dot products and sums
 * (reference/oracle.h) against exact MPFR sums at REF_PREC bits, rounded to
 * binary32/64 by MPFR's subnormal emulation, itself checked against the hardware. */
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

#include "oracle.h"
#include "oracle_testutil.h"

/* ---- the reference rounding itself ---------------------------------------------
 * Against the hardware's double -> float conversion (round to nearest even,
 * with subnormals), on random doubles, midpoints and the overflow edge. */
static void test_ref_rounding(void **state)
{
    (void)state;
    mpfr_t x;
    mpfr_init2(x, 53);
    for (int i = 0; i < 200000; i++) {
        uint64_t b = r64();
        int e = 1023 - 160 + (int)(r64() % 300);
        b = (b & 0x800fffffffffffffull) | ((uint64_t)e << 52);
        if (i % 3 == 0) /* a float32 midpoint: the 29 low bits 1 then 28 zeros */
            b = (b & ~0x1fffffffull) | 0x10000000ull;
        if (i % 5 == 0 && e < 1023 - 126) /* a subnormal-range midpoint */
            b &= ~((1ull << (52 - (e - (1023 - 150)))) - 1);
        double d = bits64(b);
        mpfr_set_d(x, d, MPFR_RNDN);
        float want = (float)d, got = ref_round32(x);
        if (!same32(want, got))
            fail_msg("ref_round32(%a) = %a, hardware %a", d, (double)got, (double)want);
    }
    mpfr_set_d(x, 0x1p-150, MPFR_RNDN);
    assert_true(same32(ref_round32(x), 0.0f));
    mpfr_set_d(x, 0x1.8p-149, MPFR_RNDN);
    assert_true(same32(ref_round32(x), 0x1p-148f));
    mpfr_set_d(x, 0x1p128 - 0x1p103, MPFR_RNDN);
    assert_true(same32(ref_round32(x), INFINITY));
    mpfr_clear(x);
}

/* ---- the accumulator ----------------------------------------------------------- */

/* The exact sum of n doubles in MPFR (every addition exact at REF_PREC);
 * an empty sum is +0. */
static void ref_sum(mpfr_t s, const double *x, size_t n)
{
    mpfr_set_zero(s, 1);
    for (size_t i = 0; i < n; i++) {
        if (i == 0)
            mpfr_set_d(s, x[i], MPFR_RNDN);
        else
            assert_int_equal(mpfr_add_d(s, s, x[i], MPFR_RNDN), 0);
    }
}

/* Sum x[] with the accumulator and check both roundings and the exact value. */
static void acc_check(const double *x, size_t n, const char *what)
{
    struct oracle_acc *a = oracle_acc_new();
    for (size_t i = 0; i < n; i++)
        oracle_acc_add(a, x[i]);
    mpfr_t s, g;
    mpfr_init2(s, REF_PREC);
    mpfr_init2(g, 2);
    ref_sum(s, x, n);
    float f = oracle_acc_round_f32(a), wf = ref_round32(s);
    double d = oracle_acc_round_f64(a), wd = ref_round64(s);
    if (!same32(f, wf))
        fail_msg("%s: round_f32 %a, want %a", what, (double)f, (double)wf);
    if (!same64(d, wd))
        fail_msg("%s: round_f64 %a, want %a", what, d, wd);
    oracle_acc_get_mpfr(a, g);
    if (mpfr_nan_p(s) ? !mpfr_nan_p(g)
                      : mpfr_cmp(g, s) != 0 || mpfr_signbit(g) != mpfr_signbit(s))
        fail_msg("%s: get_mpfr differs from the exact sum", what);
    /* reading does not disturb: more terms still add up */
    oracle_acc_add(a, 1.0);
    mpfr_add_ui(s, s, 1, MPFR_RNDN);
    if (!same64(oracle_acc_round_f64(a), ref_round64(s)))
        fail_msg("%s: the accumulator changed when read", what);
    mpfr_clears(s, g, (mpfr_ptr)0);
    oracle_acc_free(a);
}

static void test_acc_random(void **state)
{
    (void)state;
    double x[400];
    for (int c = 0; c < 3000; c++) {
        size_t n = 1 + r64() % (c % 10 == 0 ? 400 : 20);
        for (size_t i = 0; i < n; i++) {
            x[i] = rdouble();
            if (i > 0 && r64() % 3 == 0)
                x[i] = -x[i - 1] * (r64() % 2 ? 1 : ldexp(1, (int)(r64() % 10))); /* cancel */
        }
        acc_check(x, n, "random doubles");
    }
    for (int c = 0; c < 2000; c++) { /* sums of float products: the dot product's terms */
        size_t n = 1 + r64() % 50;
        for (size_t i = 0; i < n; i++) {
            float a = rfloat((enum dist)(r64() % D_NDIST)); /* one draw a statement */
            x[i] = (double)a * rfloat(D_ALL);
        }
        acc_check(x, n, "float products");
    }
}

#define ACC_CASE(...)                                                  \
    do {                                                               \
        const double xs_[] = {__VA_ARGS__};                            \
        acc_check(xs_, sizeof xs_ / sizeof xs_[0], #__VA_ARGS__);       \
    } while (0)

/* The accumulator's exact results in closed form, and the edges. */
static void acc_expect(const double *x, size_t n, float want32, double want64, const char *what)
{
    struct oracle_acc *a = oracle_acc_new();
    for (size_t i = 0; i < n; i++)
        oracle_acc_add(a, x[i]);
    float f = oracle_acc_round_f32(a);
    double d = oracle_acc_round_f64(a);
    if (!same32(f, want32) || !same64(d, want64))
        fail_msg("%s: %a / %a, want %a / %a", what, (double)f, d, (double)want32, want64);
    oracle_acc_free(a);
    acc_check(x, n, what);
}

#define ACC_EXPECT(w32, w64, ...)                                               \
    do {                                                                        \
        const double xs_[] = {__VA_ARGS__};                                     \
        acc_expect(xs_, sizeof xs_ / sizeof xs_[0], w32, w64, #__VA_ARGS__);     \
    } while (0)

static void test_acc_edges(void **state)
{
    (void)state;
    const double tiny = 0x1p-1074, big = 0x1p1000;
    /* empty, zeros and their signs */
    acc_expect(NULL, 0, 0.0f, 0.0, "empty");
    ACC_EXPECT(-0.0f, -0.0, -0.0);
    ACC_EXPECT(-0.0f, -0.0, -0.0, -0.0, -0.0);
    ACC_EXPECT(0.0f, 0.0, -0.0, 0.0);
    ACC_EXPECT(0.0f, 0.0, 1.0, -1.0);
    ACC_EXPECT(0.0f, 0.0, -0.0, -1.0, 1.0);
    ACC_EXPECT(0.0f, 0.0, big, -big, -0.0);
    /* heavy cancellation: x and -x around a tiny term */
    ACC_EXPECT(0.0f, tiny, 1e30, tiny, -1e30);
    ACC_EXPECT(-0.0f, -tiny, big, -tiny, -big);
    ACC_EXPECT(0x1p-149f, 0x1p-149, 0x1p300, 0x1p-149, -0x1p300);
    ACC_EXPECT(0.0f, 0x1p-200, 1.0, 0x1p-200, -1.0);
    /* huge dynamic range */
    ACC_EXPECT(1e38f, 1e38 + 1e-38, 1e38, 1e-38);
    ACC_EXPECT(INFINITY, 0x1p1023 + 0x1p-1074 * 0 + 0x1p1022, 0x1p1023, 0x1p-1074, 0x1p1022);
    ACC_EXPECT(1.0f, 1.0, 1.0, -tiny);           /* 1 - 2^-1074: far below half an ulp */
    ACC_EXPECT(-1.0f, -1.0, -1.0, tiny);
    /* float32 ties, even and odd, built from split terms */
    ACC_EXPECT(1.0f, 1 + 0x1p-24, big, 1.0, -big, 0x1p-24);                 /* to 1 (even) */
    ACC_EXPECT(1 + 0x1p-22f, 1 + 0x3p-24, big, 1.0, -big, 0x3p-24);        /* odd: up */
    ACC_EXPECT(-1.0f, -1 - 0x1p-24, -1.0, 0x1p500, -0x1p-24, -0x1p500);
    ACC_EXPECT(1 + 0x1p-23f, 1 + 0x1p-24 + tiny, 1.0, 0x1p-24, tiny);       /* sticky: up */
    ACC_EXPECT(1.0f, 1 + 0x1p-24 - tiny * 0, 1.0, 0x1p-24, tiny, -tiny);
    ACC_EXPECT(1.0f, 1.0 + 0x1p-24, 1.0, 0x1p-24, 0x1p-900, -0x1p-900);
    ACC_EXPECT(1.0f, 1.0 + 0x1p-24 - 0x1p-76, 1.0, 0x1p-24, -0x1p-900, -0x1p-76, 0x1p-900);
    /* subnormal float32 results and ties */
    ACC_EXPECT(0.0f, 0x1p-150, 0x1p-151, 0x1p-151);                /* tie: to 0 */
    ACC_EXPECT(0x1p-148f, 0x3p-150, 0x1p-149, 0x1p-150);           /* tie 1.5: to 2 */
    ACC_EXPECT(0x1p-148f, 0x5p-150, 0x1p-148, 0x1p-150);           /* tie 2.5: to 2 */
    ACC_EXPECT(0x1p-149f, 0x1p-150 + tiny, 0x1p-150, tiny);         /* above the tie */
    ACC_EXPECT(-0.0f, -0x1p-150, -0x1p-150);
    ACC_EXPECT(0x1p-126f, 0x1.fffffep-127, 0x1.fffffcp-127, 0x1p-150); /* tie: to 2^-126 */
    /* double subnormals */
    ACC_EXPECT(0.0f, 2 * tiny, tiny, tiny);
    ACC_EXPECT(0.0f, 0x1p-1022, 0x1p-1022 - tiny, tiny);
    /* overflow */
    ACC_EXPECT(INFINITY, 0x1p128 - 0x1p103, (double)FLT_MAX, 0x1p103);            /* tie: Inf */
    ACC_EXPECT(FLT_MAX, 0x1p128 - 0x1p103 - 0x1p50, (double)FLT_MAX, 0x1p103, -0x1p50);
    ACC_EXPECT(-INFINITY, -0x1p128, -0x1p127, -0x1p127);
    ACC_EXPECT(INFINITY, INFINITY, DBL_MAX, DBL_MAX);
    ACC_EXPECT(INFINITY, INFINITY, DBL_MAX, 0x1p970);                              /* f64 tie */
    ACC_EXPECT(INFINITY, DBL_MAX, DBL_MAX, 0x1p970, -tiny);
    ACC_EXPECT(INFINITY, DBL_MAX, DBL_MAX, DBL_MAX, -DBL_MAX);
    ACC_EXPECT(-INFINITY, -INFINITY, -DBL_MAX, -DBL_MAX, -DBL_MAX, DBL_MAX * 0.5);
    /* NaN and Inf terms */
    ACC_EXPECT(INFINITY, INFINITY, 1.0, INFINITY, -DBL_MAX);
    ACC_EXPECT(-INFINITY, -INFINITY, -INFINITY, 5.0, -INFINITY);
    ACC_EXPECT(NAN, NAN, INFINITY, -INFINITY);
    ACC_EXPECT(NAN, NAN, 1.0, NAN);
    ACC_EXPECT(NAN, NAN, NAN, INFINITY);
    ACC_CASE(1.0, 0x1p-60, -1.0, 0x1p-1000, 0x1p-1074);
}

/* Many terms: the lazy carries (every 2^20 additions), with both signs. */
static void test_acc_carries(void **state)
{
    (void)state;
    struct oracle_acc *a = oracle_acc_new();
    mpfr_t s, t;
    mpfr_inits2(REF_PREC, s, t, (mpfr_ptr)0);
    const double x = 0x1.fffffffffffffp1000, y = -0x1.0000000000001p-1000;
    const unsigned long n = 3000001;
    for (unsigned long i = 0; i < n; i++) {
        oracle_acc_add(a, x);
        oracle_acc_add(a, y);
        oracle_acc_add(a, -0x1p-1074);
    }
    mpfr_set_d(s, x, MPFR_RNDN);
    mpfr_add_d(s, s, y, MPFR_RNDN);
    mpfr_sub_d(s, s, 0x1p-1074, MPFR_RNDN);
    mpfr_mul_ui(s, s, n, MPFR_RNDN);
    oracle_acc_get_mpfr(a, t);
    assert_int_equal(mpfr_cmp(s, t), 0);
    assert_true(same64(oracle_acc_round_f64(a), ref_round64(s)));
    assert_true(same32(oracle_acc_round_f32(a), ref_round32(s)));
    /* now take it all back: n x - n x leaves the small terms */
    oracle_acc_clear(a);
    for (unsigned long i = 0; i < 2100000; i++)
        oracle_acc_add(a, i % 2 ? -0x1p-1074 : 0x1p-1074 * 3);
    assert_true(same64(oracle_acc_round_f64(a), 0x1p-1074 * 2100000));
    for (unsigned long i = 0; i < 2100000; i++)
        oracle_acc_add(a, -0x1p-1074);
    assert_true(same64(oracle_acc_round_f64(a), 0.0));
    mpfr_clears(s, t, (mpfr_ptr)0);
    oracle_acc_free(a);
}

/* ---- dot products and sums ------------------------------------------------------- */

/* RN32 of sum x[i*incx] y[i*incy] (y NULL: sum x[i*incx]) in MPFR. */
static float ref_dot(const float *x, size_t incx, const float *y, size_t incy, size_t n)
{
    mpfr_t s, p;
    mpfr_init2(s, REF_PREC);
    mpfr_init2(p, 64);
    mpfr_set_zero(s, 1);
    for (size_t i = 0; i < n; i++) {
        mpfr_set_flt(p, x[i * incx], MPFR_RNDN);
        if (y)
            mpfr_mul_d(p, p, y[i * incy], MPFR_RNDN); /* exact: 48 bits */
        if (i == 0)
            mpfr_set(s, p, MPFR_RNDN);
        else
            assert_int_equal(mpfr_add(s, s, p, MPFR_RNDN), 0);
    }
    float r = ref_round32(s);
    mpfr_clears(s, p, (mpfr_ptr)0);
    return r;
}

static void dot_check(const float *x, size_t incx, const float *y, size_t incy, size_t n,
                      const char *what)
{
    float want = ref_dot(x, incx, y, incy, n);
    for (int mode = 0; mode < 2; mode++) {
        if (mode)
            setenv("DIVTRACE_ORACLE_EXACT", "1", 1);
        float got = y ? oracle_dot(x, incx, y, incy, n) : oracle_sum(x, incx, n);
        unsetenv("DIVTRACE_ORACLE_EXACT");
        if (!same32(got, want))
            fail_msg("%s (n %zu, %s path): %a, want %a", what, n, mode ? "exact" : "default",
                     (double)got, (double)want);
    }
}

static void test_dot_random(void **state)
{
    (void)state;
    size_t cap = 100000 * 3;
    float *x = malloc(cap * sizeof *x), *y = malloc(cap * sizeof *y);
    assert_true(x && y);
    for (int c = 0; c < 3000; c++) {
        size_t n = c == 0 ? 100000 : c < 5 ? 9000 + r64() % 4000 : r64() % (c % 7 ? 40 : 2000);
        size_t ix = 1 + r64() % 3 * (c % 4 == 1), iy = 1 + r64() % 2 * (c % 4 == 1);
        enum dist dx = (enum dist)(r64() % D_NDIST), dy = (enum dist)(r64() % D_NDIST);
        for (size_t i = 0; i < n; i++) {
            x[i * ix] = rfloat(dx);
            y[i * iy] = rfloat(dy);
            if (i > 0 && r64() % 4 == 0) { /* cancelling pairs */
                x[i * ix] = -x[(i - 1) * ix];
                y[i * iy] = y[(i - 1) * iy];
            }
            if (r64() % 50 == 0) /* zeros, subnormals */
                x[i * ix] = r64() % 2 ? 0.0f : bits32((uint32_t)r64() & 0x807fffffu);
        }
        dot_check(x, ix, y, iy, n, "random dot");
        dot_check(x, ix, NULL, 0, n, "random sum");
    }
    free(x);
    free(y);
}

static void test_dot_edges(void **state)
{
    (void)state;
    float x[1100] = {0}, y[1100] = {0};
    dot_check(x, 1, y, 1, 0, "empty");
    /* exact ties: a + b of two floats of one binade has 25 bits */
    for (int c = 0; c < 400; c++) {
        size_t n = c % 2 ? 2 : 1000;
        for (size_t i = 0; i < n; i++) {
            x[i] = (float)runif(-1, 1);
            y[i] = (float)runif(-1, 1);
        }
        for (size_t i = 0; i + 1 < n; i += 2) { /* pairs cancel */
            x[i + 1] = -x[i];
            y[i + 1] = y[i];
        }
        x[n - 2] = (float)runif(1, 2);
        x[n - 1] = (float)runif(1, 2) * (c % 3 ? 1 : -1);
        y[n - 2] = y[n - 1] = c % 5 ? 1.0f : 0x1p-140f;
        dot_check(x, 1, y, 1, n, "tie");
    }
    /* products far below the largest: the extraction's residuals */
    for (size_t i = 0; i < 1100; i++) {
        x[i] = (float)runif(-1, 1);
        y[i] = i % 3 ? x[i] : 0x1p-100f * (float)runif(1, 2);
    }
    dot_check(x, 1, y, 1, 1100, "wide products");
    x[0] = 0x1p100f, y[0] = 0x1p27f, x[1] = -0x1p100f, y[1] = 0x1p27f;
    dot_check(x, 1, y, 1, 1100, "wide products, cancelled");
    /* signed zeros */
    x[0] = -0.0f, y[0] = 1.0f, x[1] = 0.0f, y[1] = -1.0f;
    dot_check(x, 1, y, 1, 2, "-0 products");
    assert_true(same32(oracle_dot(x, 1, y, 1, 2), -0.0f));
    x[1] = 0.0f, y[1] = 1.0f;
    assert_true(same32(oracle_dot(x, 1, y, 1, 2), 0.0f));
    for (int i = 0; i < 600; i++)
        x[i] = -0.0f, y[i] = 2.0f;
    dot_check(x, 1, y, 1, 600, "600 -0 products");
    assert_true(same32(oracle_sum(x, 1, 600), -0.0f));
    /* NaN and Inf */
    for (int i = 0; i < 700; i++)
        x[i] = 1.0f, y[i] = 0.5f;
    x[3] = INFINITY;
    dot_check(x, 1, y, 1, 700, "Inf");
    y[5] = 0.0f, x[5] = INFINITY;
    dot_check(x, 1, y, 1, 700, "Inf * 0");
    y[5] = 1.0f, x[5] = -INFINITY;
    dot_check(x, 1, y, 1, 700, "Inf - Inf");
    x[5] = NAN;
    dot_check(x, 1, y, 1, 700, "NaN");
    /* subnormal products and sums */
    for (int i = 0; i < 700; i++) {
        x[i] = bits32((uint32_t)r64() & 0x807fffffu);
        y[i] = (float)runif(-2, 2);
    }
    dot_check(x, 1, y, 1, 700, "subnormal products");
    dot_check(x, 1, NULL, 0, 700, "subnormal sum");
    /* overflow */
    for (int i = 0; i < 4; i++)
        x[i] = FLT_MAX, y[i] = i < 2 ? 1.0f : -1.0f;
    y[3] = -0.5f;
    dot_check(x, 1, y, 1, 4, "FLT_MAX, no overflow");
    y[2] = 1.0f;
    dot_check(x, 1, y, 1, 4, "overflow");
}

static void test_ulp32(void **state)
{
    (void)state;
    assert_true(oracle_ulp32(1.0) == 0x1p-23);
    assert_true(oracle_ulp32(-1.5) == 0x1p-23);
    assert_true(oracle_ulp32(0x1.fffffep-1) == 0x1p-24);
    assert_true(oracle_ulp32(0.0) == 0x1p-149);
    assert_true(oracle_ulp32(0x1p-130) == 0x1p-149);
    assert_true(oracle_ulp32(0x1p-126) == 0x1p-149);
    assert_true(oracle_ulp32(FLT_MAX) == 0x1p104);
    assert_true(isinf(oracle_ulp32(INFINITY)));
    assert_true(isnan(oracle_ulp32(NAN)));
}

int main(void)
{
    unsetenv("DIVTRACE_ORACLE_EXACT");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_rounding),
        cmocka_unit_test(test_acc_random),
        cmocka_unit_test(test_acc_edges),
        cmocka_unit_test(test_acc_carries),
        cmocka_unit_test(test_dot_random),
        cmocka_unit_test(test_dot_edges),
        cmocka_unit_test(test_ulp32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
