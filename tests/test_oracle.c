/* test_oracle.c: the exact oracle (reference/oracle.h) against independent
 * MPFR evaluations written here (exact arithmetic at 2400 bits, or 600-bit
 * approximations whose rounding is checked to be decided), rounded to
 * binary32 by MPFR's own subnormal emulation; and the error bounds of
 * oracle_bound against the cpu backend's kernels run on one-op graphs.
 * Set TEST_ORACLE_VERBOSE=1 to print the observed error / bound ratios. */
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
#include "exec.h"
#include "graph.h"
#include "oracle.h"
#include "test_util.h"
#include "util.h"

#define REF_PREC 2400     /* exact for any sum of products of floats or doubles */
#define REF_APPROX 600    /* working precision of the transcendental references */

static int verbose;

/* ---- reference rounding: MPFR's emulation of subnormals --------------------- */

/* RN to p bits with exponents emin..emax (MPFR convention: 0.1b * 2^e):
 * round in the full range first, then check_range and subnormalize, which
 * use the ternary value, so nothing is rounded twice. */
static double ref_round(mpfr_srcptr x, mpfr_prec_t p, mpfr_exp_t emin, mpfr_exp_t emax)
{
    mpfr_t r;
    mpfr_init2(r, p);
    int t = mpfr_set(r, x, MPFR_RNDN);
    mpfr_exp_t omin = mpfr_get_emin(), omax = mpfr_get_emax();
    mpfr_set_emin(emin);
    mpfr_set_emax(emax);
    t = mpfr_check_range(r, t, MPFR_RNDN);
    mpfr_subnormalize(r, t, MPFR_RNDN);
    double d = mpfr_get_d(r, MPFR_RNDN); /* exact: r is a binary32 or binary64 value */
    mpfr_set_emin(omin);
    mpfr_set_emax(omax);
    mpfr_clear(r);
    return d;
}

static float ref_round32(mpfr_srcptr x) { return (float)ref_round(x, 24, -148, 128); }
static double ref_round64(mpfr_srcptr x) { return ref_round(x, 53, -1073, 1024); }

/* Bitwise equality, NaN equal to any NaN. */
static int same32(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

static int same64(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

/* RN32 of a value known as r with |r - exact| <= 2^err_exp (err_exp = LONG_MIN:
 * r is exact); fails the test when the error leaves the rounding undecided. */
static float ref_decide32(mpfr_srcptr r, long err_exp, const char *what)
{
    if (err_exp == LONG_MIN || !mpfr_number_p(r))
        return ref_round32(r);
    mpfr_t lo, hi;
    mpfr_inits2(REF_PREC * 2, lo, hi, (mpfr_ptr)0);
    mpfr_set(lo, r, MPFR_RNDN);
    mpfr_set(hi, r, MPFR_RNDN);
    mpfr_t e;
    mpfr_init2(e, 2);
    mpfr_set_ui_2exp(e, 1, err_exp, MPFR_RNDN);
    mpfr_sub(lo, lo, e, MPFR_RNDN);
    mpfr_add(hi, hi, e, MPFR_RNDN);
    float a = ref_round32(lo), b = ref_round32(hi);
    mpfr_clears(lo, hi, e, (mpfr_ptr)0);
    if (!same32(a, b))
        fail_msg("%s: reference rounding undecided", what);
    return a;
}

static float bits32(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static double bits64(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

/* ---- random inputs ---------------------------------------------------------- */

static uint64_t rng = 0x5eed;

static uint64_t r64(void) { return tu_rand_u64(&rng); }
static double runif(double lo, double hi) { return tu_rand_uniform(&rng, lo, hi); }

/* Input distributions: UNIT uniform in [-1, 1]; WIDE +-2^[-40, 40];
 * ALL any finite float (subnormals included); FEW floats with at most 8
 * significant bits (exact results are frequent); POS (0, 1); MANT +-[1, 2)
 * (sums of two have 25 bits: float32 ties are frequent). */
enum dist { D_UNIT, D_WIDE, D_ALL, D_FEW, D_POS, D_MANT, D_NDIST };

static float rfloat(enum dist d)
{
    switch (d) {
    case D_UNIT:
        return (float)runif(-1, 1);
    case D_WIDE:
        return (float)(ldexp(runif(1, 2), (int)(r64() % 81) - 40) * (r64() & 1 ? -1 : 1));
    case D_ALL: {
        uint32_t b;
        do
            b = (uint32_t)r64();
        while (((b >> 23) & 0xff) == 0xff);
        return bits32(b);
    }
    case D_FEW:
        return (float)ldexp((double)((int)(r64() % 511) - 255), (int)(r64() % 21) - 10);
    case D_POS:
        return (float)runif(0x1p-20, 1);
    case D_MANT:
        return (float)runif(1, 2) * (r64() & 1 ? -1.0f : 1.0f);
    default:
        return 0;
    }
}

/* A random double over the whole range (subnormals, huge, either sign). */
static double rdouble(void)
{
    uint64_t b;
    do {
        b = r64();
        int k = (int)(r64() % 4);
        if (k == 0) /* near 1 */
            b = (b & 0x800fffffffffffffull) | ((uint64_t)(1023 + (int)(r64() % 80) - 40) << 52);
        else if (k == 1) /* subnormal */
            b &= 0x800fffffffffffffull;
    } while (((b >> 52) & 0x7ff) == 0x7ff);
    return bits64(b);
}

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
        for (size_t i = 0; i < n; i++)
            x[i] = (double)rfloat((enum dist)(r64() % D_NDIST)) * rfloat(D_ALL);
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

/* ---- one-op graphs ------------------------------------------------------------------ */

struct tg {
    struct graph g;
    int nleaf, leaf[OP_MAX_INPUTS], op;
    float *val[OP_MAX_INPUTS];
    uint64_t step;
};

static void tg_init(struct tg *t)
{
    memset(t, 0, sizeof *t);
    graph_init(&t->g);
}

static void tg_free(struct tg *t)
{
    for (int k = 0; k < t->nleaf; k++)
        free(t->val[k]);
    graph_free(&t->g);
}

/* An input leaf of shape (d0) or (d0, d1), values left to the caller. */
static int tg_leaf(struct tg *t, uint32_t d0, uint32_t d1)
{
    char name[16];
    snprintf(name, sizeof name, "in%d", t->nleaf);
    uint32_t shape[2] = {d0, d1};
    int i = graph_input(&t->g, name, d1 ? 2 : 1, shape);
    t->leaf[t->nleaf] = i;
    t->val[t->nleaf] = calloc(t->g.nodes[i].count + 1, sizeof(float));
    assert_non_null(t->val[t->nleaf]);
    t->nleaf++;
    return i;
}

/* The op node over every leaf (graph.h builds only the forward ops, so the
 * node is a leaf turned into the op). */
static void tg_op(struct tg *t, enum op_type ty, const union op_params *p, uint32_t d0, uint32_t d1)
{
    uint32_t shape[2] = {d0, d1};
    int i = graph_input(&t->g, "op", d1 ? 2 : 1, shape);
    struct node *nd = &t->g.nodes[i];
    nd->type = ty;
    nd->kind = TRACE_KIND_FORWARD;
    nd->ninputs = t->nleaf;
    for (int k = 0; k < t->nleaf; k++)
        nd->inputs[k] = t->leaf[k];
    if (p)
        nd->p = *p;
    t->op = i;
}

static const struct node *tg_node(const struct tg *t) { return &t->g.nodes[t->op]; }
static size_t tg_count(const struct tg *t, int k) { return t->g.nodes[t->leaf[k]].count; }

static void tg_fill(struct tg *t, int k, enum dist d)
{
    for (size_t i = 0; i < tg_count(t, k); i++)
        t->val[k][i] = rfloat(d);
}

static float pick(const float *v, size_t n) { return v[r64() % n]; }

/* A random instance of op ty: shapes, parameters and inputs from d. */
static void tg_make(struct tg *t, enum op_type ty, enum dist d, uint32_t n)
{
    tg_init(t);
    union op_params p;
    memset(&p, 0, sizeof p);
    static const float lrs[] = {0.01f, 1e-3f, 0.5f, 1.0f, 3.0f, 0.1f};
    static const float b1s[] = {0.9f, 0.5f, 0.75f, 0.99f, 0.0f};
    static const float b2s[] = {0.999f, 0.5f, 0.9375f, 0.99f};
    static const float epss[] = {1e-8f, 0.0f, 1e-3f, 1e-6f};
    t->step = (uint64_t[]){0, 1, 9, 999}[r64() % 4];
    switch (ty) {
    case OP_MATMUL: {
        uint32_t m = 1 + (uint32_t)(r64() % 6), k = 1 + (uint32_t)(r64() % (n + 1)),
                 nn = 1 + (uint32_t)(r64() % 6);
        int ta = (int)(r64() % 2), tb = (int)(r64() % 2);
        int a = ta ? tg_leaf(t, k, m) : tg_leaf(t, m, k);
        int b = tb ? tg_leaf(t, nn, k) : tg_leaf(t, k, nn);
        tg_fill(t, 0, d);
        tg_fill(t, 1, d == D_ALL ? D_WIDE : d);
        t->op = graph_matmul(&t->g, "op", a, b, ta, tb);
        return;
    }
    case OP_ADD_BIAS: {
        uint32_t f = 1 + (uint32_t)(r64() % 7);
        int x = tg_leaf(t, 1 + n / f, f), b = tg_leaf(t, f, 0);
        tg_fill(t, 0, d);
        tg_fill(t, 1, d);
        t->op = graph_add_bias(&t->g, "op", x, b);
        return;
    }
    case OP_BIAS_GRAD: {
        uint32_t f = 1 + (uint32_t)(r64() % 7);
        tg_leaf(t, 1 + n / f, f);
        tg_fill(t, 0, d);
        tg_op(t, ty, &p, f, 0);
        return;
    }
    case OP_MSE:
        tg_leaf(t, n, 0);
        tg_leaf(t, n, 0);
        tg_fill(t, 0, d);
        tg_fill(t, 1, d);
        tg_op(t, ty, &p, 1, 0);
        return;
    case OP_MSE_BWD:
        tg_leaf(t, n, 0);
        tg_leaf(t, n, 0);
        tg_fill(t, 0, d);
        tg_fill(t, 1, d);
        if (r64() % 2) {
            tg_leaf(t, 1, 0);
            tg_fill(t, 2, d);
        }
        tg_op(t, ty, &p, n, 0);
        return;
    case OP_FILL:
        p.fill.value = rfloat(d);
        tg_op(t, ty, &p, n, 0);
        return;
    default:
        break;
    }
    int nin = ty == OP_SIGMOID || ty == OP_TANH || ty == OP_RELU ? 1 : ty == OP_ADAM_P ? 3 : 2;
    for (int k = 0; k < nin; k++) {
        tg_leaf(t, n, 0);
        tg_fill(t, k, d);
    }
    switch (ty) {
    case OP_SIGMOID_BWD: /* y a sigmoid output */
        tg_fill(t, 0, d == D_ALL || d == D_FEW ? d : D_POS);
        break;
    case OP_TANH_BWD: /* y a tanh output, some near +-1 where 1 - y^2 cancels */
        for (size_t i = 0; i < n; i++)
            t->val[0][i] = d == D_ALL || d == D_FEW ? t->val[0][i]
                         : r64() % 3 ? (float)runif(-1, 1)
                                     : (1 - (float)(r64() % 64) * 0x1p-24f) * (r64() % 2 ? 1 : -1);
        break;
    case OP_ADAM_V:
        for (size_t i = 0; i < n; i++)
            t->val[0][i] = fabsf(t->val[0][i]) * (d == D_UNIT ? 1e-3f : 1);
        break;
    case OP_ADAM_P:
        for (size_t i = 0; i < n; i++)
            t->val[2][i] = d == D_UNIT ? t->val[1][i] * t->val[1][i] : fabsf(t->val[2][i]);
        break;
    default:
        break;
    }
    if (ty == OP_SGD)
        p.sgd.lr = pick(lrs, 6);
    if (ty == OP_MOMENTUM)
        p.momentum.mu = r64() % 2 ? 0.9f : (float)runif(0, 1);
    if (ty == OP_ADAM_M || ty == OP_ADAM_V || ty == OP_ADAM_P) {
        p.adam.lr = pick(lrs, 6);
        p.adam.b1 = r64() % 4 ? pick(b1s, 5) : (float)runif(0, 1);
        p.adam.b2 = r64() % 4 ? pick(b2s, 4) : (float)runif(0, 1);
        p.adam.eps = pick(epss, 4);
    }
    tg_op(t, ty, &p, n, 0);
}

/* ---- the reference evaluation of one element ------------------------------------------
 * r = the exact value of element i (err = LONG_MIN), or an approximation
 * with |r - exact| <= 2^err. Every rational step is checked exact. */

#define X(call) assert_int_equal((call), 0)

static long ref_err(mpfr_srcptr r, long slack)
{
    return mpfr_regular_p(r) ? (long)mpfr_get_exp(r) + slack - REF_APPROX : LONG_MIN;
}

static void ref_elem(const struct tg *t, size_t i, mpfr_t r, long *err)
{
    const struct node *nd = tg_node(t);
    float *const *v = t->val;
    mpfr_t a, b, c;
    mpfr_inits2(REF_PREC, a, b, c, (mpfr_ptr)0);
    mpfr_set_prec(r, REF_PREC);
    *err = LONG_MIN;
    switch (nd->type) {
    case OP_MATMUL: {
        const struct node *na = &t->g.nodes[t->leaf[0]];
        int ta = nd->p.mm.ta, tb = nd->p.mm.tb;
        size_t m = nd->shape[0], n = nd->shape[1], k = ta ? na->shape[0] : na->shape[1];
        size_t row = i / n, col = i % n;
        mpfr_set_zero(r, 1);
        for (size_t l = 0; l < k; l++) {
            mpfr_set_flt(a, ta ? v[0][l * m + row] : v[0][row * k + l], MPFR_RNDN);
            X(mpfr_mul_d(a, a, tb ? v[1][col * k + l] : v[1][l * n + col], MPFR_RNDN));
            if (l == 0)
                mpfr_set(r, a, MPFR_RNDN);
            else
                X(mpfr_add(r, r, a, MPFR_RNDN));
        }
        break;
    }
    case OP_ADD_BIAS:
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        X(mpfr_add_d(r, r, v[1][i % nd->shape[1]], MPFR_RNDN));
        break;
    case OP_ADD:
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        X(mpfr_add_d(r, r, v[1][i], MPFR_RNDN));
        break;
    case OP_BIAS_GRAD: {
        size_t rows = t->g.nodes[t->leaf[0]].shape[0], f = nd->shape[0];
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        for (size_t k = 1; k < rows; k++)
            X(mpfr_add_d(r, r, v[0][k * f + i], MPFR_RNDN));
        break;
    }
    case OP_SIGMOID:
        mpfr_set_prec(r, REF_APPROX);
        mpfr_set_flt(r, -v[0][i], MPFR_RNDN);
        mpfr_exp(r, r, MPFR_RNDN);
        mpfr_add_ui(r, r, 1, MPFR_RNDN);
        mpfr_ui_div(r, 1, r, MPFR_RNDN);
        *err = ref_err(r, 3);
        break;
    case OP_TANH:
        mpfr_set_prec(r, REF_APPROX);
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        mpfr_tanh(r, r, MPFR_RNDN);
        *err = ref_err(r, 1);
        break;
    case OP_SIGMOID_BWD: /* dy y (1 - y) */
        mpfr_set_flt(r, v[1][i], MPFR_RNDN);
        X(mpfr_mul_d(r, r, v[0][i], MPFR_RNDN));
        mpfr_set_flt(a, v[0][i], MPFR_RNDN);
        X(mpfr_ui_sub(a, 1, a, MPFR_RNDN));
        X(mpfr_mul(r, r, a, MPFR_RNDN));
        break;
    case OP_TANH_BWD: /* dy (1 - y y) */
        mpfr_set_flt(a, v[0][i], MPFR_RNDN);
        X(mpfr_sqr(a, a, MPFR_RNDN));
        X(mpfr_ui_sub(a, 1, a, MPFR_RNDN));
        mpfr_set_flt(r, v[1][i], MPFR_RNDN);
        X(mpfr_mul(r, r, a, MPFR_RNDN));
        break;
    case OP_RELU:
        mpfr_set_flt(r, v[0][i] > 0 ? v[0][i] : 0.0f, MPFR_RNDN);
        break;
    case OP_RELU_BWD:
        mpfr_set_flt(r, v[0][i] > 0 ? v[1][i] : 0.0f, MPFR_RNDN);
        break;
    case OP_MSE_BWD:
    case OP_MSE: {
        size_t n = tg_count(t, 0);
        mpfr_set_zero(r, 1);
        for (size_t k = nd->type == OP_MSE ? 0 : i; k < (nd->type == OP_MSE ? n : i + 1); k++) {
            mpfr_set_flt(a, v[0][k], MPFR_RNDN);
            X(mpfr_sub_d(a, a, v[1][k], MPFR_RNDN));
            if (nd->type == OP_MSE) {
                X(mpfr_sqr(a, a, MPFR_RNDN));
                X(mpfr_add(r, r, a, MPFR_RNDN));
            } else {
                X(mpfr_mul_ui(r, a, 2, MPFR_RNDN));
                if (nd->ninputs > 2)
                    X(mpfr_mul_d(r, r, v[2][0], MPFR_RNDN));
            }
        }
        mpfr_set(a, r, MPFR_RNDN);
        mpfr_set_prec(r, REF_APPROX);
        if (mpfr_div_ui(r, a, (unsigned long)(nd->type == OP_MSE ? n : nd->count), MPFR_RNDN))
            *err = ref_err(r, 0);
        break;
    }
    case OP_SGD: /* p - lr g */
        mpfr_set_flt(a, nd->p.sgd.lr, MPFR_RNDN);
        X(mpfr_mul_d(a, a, v[1][i], MPFR_RNDN));
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        X(mpfr_sub(r, r, a, MPFR_RNDN));
        break;
    case OP_MOMENTUM: /* mu buf + g */
        mpfr_set_flt(r, nd->p.momentum.mu, MPFR_RNDN);
        X(mpfr_mul_d(r, r, v[0][i], MPFR_RNDN));
        X(mpfr_add_d(r, r, v[1][i], MPFR_RNDN));
        break;
    case OP_ADAM_M: /* b1 m + (1 - b1) g */
    case OP_ADAM_V: { /* b2 v + (1 - b2) g g */
        float bb = nd->type == OP_ADAM_M ? nd->p.adam.b1 : nd->p.adam.b2;
        mpfr_set_flt(r, bb, MPFR_RNDN);
        X(mpfr_mul_d(r, r, v[0][i], MPFR_RNDN));
        mpfr_set_flt(a, bb, MPFR_RNDN);
        X(mpfr_ui_sub(a, 1, a, MPFR_RNDN));
        X(mpfr_mul_d(a, a, v[1][i], MPFR_RNDN));
        if (nd->type == OP_ADAM_V)
            X(mpfr_mul_d(a, a, v[1][i], MPFR_RNDN));
        X(mpfr_add(r, r, a, MPFR_RNDN));
        break;
    }
    case OP_ADAM_P: { /* p - lr (m / c1) / (sqrt(v / c2) + eps), c = 1 - b^t exactly */
        unsigned long st = (unsigned long)t->step + 1;
        mpfr_t c1, c2, pw;
        mpfr_inits2(2, c1, c2, (mpfr_ptr)0);
        mpfr_init2(pw, (mpfr_prec_t)(24 * st + 64)); /* b^t exactly */
        for (int k = 0; k < 2; k++) {
            mpfr_ptr ck = k ? c2 : c1;
            mpfr_set_flt(pw, k ? nd->p.adam.b2 : nd->p.adam.b1, MPFR_RNDN);
            X(mpfr_pow_ui(pw, pw, st, MPFR_RNDN));
            long lsb = mpfr_regular_p(pw) ? (long)mpfr_get_exp(pw) - (long)mpfr_get_prec(pw) : 0;
            mpfr_set_prec(ck, (mpfr_prec_t)((lsb < 0 ? -lsb : 0) + 8)); /* 1 - b^t exactly */
            X(mpfr_ui_sub(ck, 1, pw, MPFR_RNDN));
        }
        mpfr_clear(pw);
        mpfr_set_prec(a, REF_APPROX);
        mpfr_set_prec(b, REF_APPROX);
        mpfr_set_prec(r, REF_APPROX);
        mpfr_set_flt(a, v[1][i], MPFR_RNDN);
        mpfr_div(a, a, c1, MPFR_RNDN);
        mpfr_mul_d(a, a, nd->p.adam.lr, MPFR_RNDN);
        mpfr_set_flt(b, v[2][i], MPFR_RNDN);
        mpfr_div(b, b, c2, MPFR_RNDN);
        mpfr_sqrt(b, b, MPFR_RNDN);
        mpfr_add_d(b, b, nd->p.adam.eps, MPFR_RNDN);
        mpfr_div(a, a, b, MPFR_RNDN); /* relative error < 8 2^-600 (eps >= 0) */
        mpfr_d_sub(r, v[0][i], a, MPFR_RNDN);
        if (mpfr_regular_p(a) && mpfr_number_p(r)) {
            long e = (long)mpfr_get_exp(a);
            if (mpfr_regular_p(r) && (long)mpfr_get_exp(r) > e)
                e = (long)mpfr_get_exp(r);
            *err = e + 5 - REF_APPROX;
        }
        mpfr_clears(c1, c2, (mpfr_ptr)0);
        break;
    }
    case OP_FILL:
        mpfr_set_flt(r, nd->p.fill.value, MPFR_RNDN);
        break;
    default:
        fail_msg("ref_elem: op %s", op_type_name(nd->type));
    }
    mpfr_clears(a, b, c, (mpfr_ptr)0);
}

/* oracle_op on t, in the default mode or with every element on the exact path. */
static float *tg_oracle(const struct tg *t, int exact)
{
    const struct node *nd = tg_node(t);
    float *out = malloc((nd->count + 1) * sizeof *out);
    assert_non_null(out);
    const float *in[OP_MAX_INPUTS];
    for (int k = 0; k < t->nleaf; k++)
        in[k] = t->val[k];
    struct backend_step st = {.step = t->step};
    if (exact)
        setenv("DIVTRACE_ORACLE_EXACT", "1", 1);
    int rc = oracle_op(&t->g, nd, out, in, &st);
    unsetenv("DIVTRACE_ORACLE_EXACT");
    assert_int_equal(rc, 0);
    return out;
}

/* Compare oracle_op (both modes) with the reference on every element. */
static long ops_check(const struct tg *t, const char *what)
{
    const struct node *nd = tg_node(t);
    float *fast = tg_oracle(t, 0), *slow = tg_oracle(t, 1);
    mpfr_t r;
    mpfr_init2(r, REF_PREC);
    for (size_t i = 0; i < nd->count; i++) {
        long err;
        ref_elem(t, i, r, &err);
        float want = ref_decide32(r, err, what);
        if (!same32(fast[i], want) || !same32(slow[i], want))
            fail_msg("%s %s[%zu]: default %a, exact path %a, want %a (step %llu)", what,
                     op_type_name(nd->type), i, (double)fast[i], (double)slow[i], (double)want,
                     (unsigned long long)t->step);
        if (isnan(fast[i]) && memcmp(&fast[i], &(uint32_t){0x7fc00000u}, 4) != 0)
            fail_msg("%s %s[%zu]: NaN is not canonical", what, op_type_name(nd->type), i);
    }
    mpfr_clear(r);
    long n = (long)nd->count;
    free(fast);
    free(slow);
    return n;
}

static const enum op_type ops_all[] = {
    OP_MATMUL, OP_ADD_BIAS, OP_BIAS_GRAD, OP_SIGMOID, OP_SIGMOID_BWD, OP_TANH, OP_TANH_BWD,
    OP_RELU, OP_RELU_BWD, OP_ADD, OP_MSE, OP_MSE_BWD, OP_SGD, OP_MOMENTUM, OP_ADAM_M,
    OP_ADAM_V, OP_ADAM_P, OP_FILL};
#define OPS_N (sizeof ops_all / sizeof ops_all[0])

/* Every op on random inputs of every distribution. */
static void test_ops_random(void **state)
{
    (void)state;
    long total = 0;
    for (size_t o = 0; o < OPS_N; o++)
        for (int d = 0; d < D_NDIST; d++)
            for (int rep = 0; rep < 20; rep++) {
                struct tg t;
                tg_make(&t, ops_all[o], (enum dist)d, 1 + (uint32_t)(r64() % 150));
                total += ops_check(&t, "random");
                tg_free(&t);
            }
    if (verbose)
        printf("ops_random: %ld elements\n", total);
}

/* NaN, Inf, zeros and subnormals mixed into every input. */
static void test_ops_special(void **state)
{
    (void)state;
    static const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 0x1p-149f, -0x1p-140f,
                               FLT_MAX, 1.0f, -1.0f, 0.5f};
    for (size_t o = 0; o < OPS_N; o++)
        for (int rep = 0; rep < 8; rep++) {
            struct tg t;
            tg_make(&t, ops_all[o], rep % 2 ? D_UNIT : D_WIDE, 1 + (uint32_t)(r64() % 40));
            for (int k = 0; k < t.nleaf; k++)
                for (size_t i = 0; i < tg_count(&t, k); i++)
                    if (r64() % 3 == 0)
                        t.val[k][i] = sp[r64() % (sizeof sp / sizeof sp[0])];
            ops_check(&t, "special");
            tg_free(&t);
        }
}

/* Exact float32 ties of the rational ops (the fast paths must see them and
 * defer): parameters that make two 24-bit terms meet in 25 bits. */
static void test_ops_ties(void **state)
{
    (void)state;
    static const enum op_type tie_ops[] = {OP_ADD, OP_ADD_BIAS, OP_SGD, OP_MOMENTUM, OP_ADAM_M,
                                           OP_ADAM_V, OP_SIGMOID_BWD, OP_TANH_BWD, OP_MSE_BWD};
    for (size_t o = 0; o < sizeof tie_ops / sizeof tie_ops[0]; o++)
        for (int rep = 0; rep < 10; rep++) {
            struct tg t;
            enum op_type ty = tie_ops[o];
            tg_make(&t, ty, D_MANT, ty == OP_MSE_BWD ? 2 : 64);
            struct node *nd = &t.g.nodes[t.op];
            if (ty == OP_SGD)
                nd->p.sgd.lr = -1.0f;
            if (ty == OP_MOMENTUM)
                nd->p.momentum.mu = 1.0f;
            if (ty == OP_ADAM_M || ty == OP_ADAM_V)
                nd->p.adam.b1 = nd->p.adam.b2 = 0.5f;
            if (ty == OP_ADAM_V)
                for (size_t i = 0; i < tg_count(&t, 1); i++)
                    t.val[1][i] = (float)(int)(r64() % 64) * 0x1p-3f; /* g^2 short */
            if (ty == OP_SIGMOID_BWD || ty == OP_TANH_BWD)
                for (size_t i = 0; i < tg_count(&t, 0); i++)
                    t.val[0][i] = ty == OP_SIGMOID_BWD ? 0.75f : 0.5f;
            if (ty == OP_MSE_BWD && nd->ninputs > 2)
                t.val[2][0] = 1.0f;
            if (ty == OP_MSE_BWD) /* p - t across binades: 25 bits */
                for (size_t i = 0; i < 2; i++)
                    t.val[1][i] = t.val[0][i] * 0.5f + (float)runif(0, 0x1p-23);
            ops_check(&t, "tie");
            tg_free(&t);
        }
}

/* Exact zeros take the sign IEEE arithmetic gives the formula. */
static float op1(enum op_type ty, const union op_params *p, uint64_t step, int n, ...)
{
    struct tg t;
    tg_init(&t);
    t.step = step;
    va_list ap;
    va_start(ap, n);
    for (int k = 0; k < n; k++) {
        tg_leaf(&t, 1, 0);
        t.val[k][0] = (float)va_arg(ap, double);
    }
    va_end(ap);
    tg_op(&t, ty, p, 1, 0);
    if (ty == OP_MSE_BWD || ty == OP_MSE) /* shapes of p, t and the scalar g all (1) */
        t.g.nodes[t.op].shape[0] = 1;
    ops_check(&t, "case");
    float *o = tg_oracle(&t, 0);
    float r = o[0];
    free(o);
    tg_free(&t);
    return r;
}

#define EXPECT32(got, want)                                                             \
    do {                                                                                \
        float g_ = (got), w_ = (want);                                                  \
        if (!same32(g_, w_))                                                            \
            fail_msg("%s = %a, want %a", #got, (double)g_, (double)w_);                 \
    } while (0)

static void test_ops_cases(void **state)
{
    (void)state;
    union op_params p;
    memset(&p, 0, sizeof p);
    p.sgd.lr = 0.1f;
    EXPECT32(op1(OP_SGD, &p, 0, 2, -0.0, 0.0), -0.0f);   /* -0 - (+0) */
    EXPECT32(op1(OP_SGD, &p, 0, 2, -0.0, -0.0), 0.0f);   /* -0 - (-0) */
    float pf = 0.1f * 3.0f; /* p - lr g: the rounding error of pf, a float */
    EXPECT32(op1(OP_SGD, &p, 0, 2, (double)pf, 3.0), (float)((double)pf - (double)0.1f * 3.0));
    p.momentum.mu = 0.9f;
    EXPECT32(op1(OP_MOMENTUM, &p, 0, 2, -0.0, -0.0), -0.0f);
    EXPECT32(op1(OP_MOMENTUM, &p, 0, 2, 0.0, -0.0), 0.0f);
    memset(&p, 0, sizeof p);
    p.adam.b1 = 0.9f;
    p.adam.b2 = 0.999f;
    p.adam.lr = 1e-3f;
    p.adam.eps = 1e-8f;
    EXPECT32(op1(OP_ADAM_M, &p, 0, 2, -0.0, -0.0), -0.0f);
    EXPECT32(op1(OP_ADAM_M, &p, 0, 2, 0.0, -0.0), 0.0f);
    EXPECT32(op1(OP_ADAM_V, &p, 0, 2, -0.0, -0.0), 0.0f); /* (1-b2) g g = +0 */
    EXPECT32(op1(OP_ADAM_P, &p, 0, 3, -0.0, 0.0, 0.0), -0.0f); /* p - (+0) */
    EXPECT32(op1(OP_ADAM_P, &p, 0, 3, 1.0, 0.0, 0.0), 1.0f);
    EXPECT32(op1(OP_SIGMOID_BWD, NULL, 0, 2, 0.5, -0.0), -0.0f);
    EXPECT32(op1(OP_SIGMOID_BWD, NULL, 0, 2, 1.0, 3.0), 0.0f);
    EXPECT32(op1(OP_SIGMOID_BWD, NULL, 0, 2, 2.0, 3.0), -6.0f);
    EXPECT32(op1(OP_TANH_BWD, NULL, 0, 2, -1.0, -2.0), -0.0f);
    EXPECT32(op1(OP_MSE_BWD, NULL, 0, 2, -0.0, 0.0), -0.0f); /* 2 (-0 - 0) / 1 */
    EXPECT32(op1(OP_MSE_BWD, NULL, 0, 2, 3.0, 2.0), 2.0f);
    EXPECT32(op1(OP_MSE, NULL, 0, 2, -0.0, 0.0), 0.0f);
    EXPECT32(op1(OP_MSE, NULL, 0, 2, 3.0, 1.0), 4.0f);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, -0.0, -0.0), -0.0f);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, 1.0, -1.0), 0.0f);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, 1.0, 0x1p-24), 1.0f);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, 1.0 + 0x1p-23, 0x1p-24), 1.0f + 0x1p-22f);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, (double)FLT_MAX, 0x1p103), INFINITY);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, 0x1p-149, -0x1p-149), 0.0f);
    EXPECT32(op1(OP_RELU, NULL, 0, 1, -0.0), 0.0f);
    EXPECT32(op1(OP_RELU, NULL, 0, 1, (double)NAN), 0.0f);
    EXPECT32(op1(OP_RELU_BWD, NULL, 0, 2, 1.0, -0.0), -0.0f);
    EXPECT32(op1(OP_SIGMOID, NULL, 0, 1, 0.0), 0.5f);
    EXPECT32(op1(OP_SIGMOID, NULL, 0, 1, -200.0), 0.0f);
    float sm = op1(OP_SIGMOID, NULL, 0, 1, -100.0); /* e^-100: subnormal */
    assert_true(sm > 0 && sm < 0x1p-140f);
    EXPECT32(op1(OP_SIGMOID, NULL, 0, 1, 20.0), 1.0f);
    EXPECT32(op1(OP_TANH, NULL, 0, 1, -0.0), -0.0f);
    EXPECT32(op1(OP_TANH, NULL, 0, 1, 0x1p-149), 0x1p-149f);
    EXPECT32(op1(OP_TANH, NULL, 0, 1, -10.0), -1.0f);
}

/* Hard cases of rounding: at x = k 2^-24, sigmoid(x) = 1/2 + x/4 - x^3/48 + ...
 * rounds in double to a float32 midpoint while the exact value lies just
 * below it; rounding the double once more goes the wrong way for half of
 * them (66 such x among all floats). tanh(x) = x - x^3/3 near small x too. */
static void test_ops_hard(void **state)
{
    (void)state;
    struct tg t;
    tg_init(&t);
    tg_leaf(&t, 4000, 0);
    for (size_t i = 0; i < 4000; i++)
        t.val[0][i] = (float)ldexp((double)(i % 1000 + 1), -24 - 2 * (int)(i / 1000)) *
                      (i % 2 ? -1.0f : 1.0f);
    tg_op(&t, OP_SIGMOID, NULL, 4000, 0);
    ops_check(&t, "hard sigmoid");
    float *o = tg_oracle(&t, 0);
    for (size_t i = 0; i < 4000; i++)
        if (t.val[0][i] == 0x1.8p-22f)
            EXPECT32(o[i], 0x1.000002p-1f); /* not 0x1.000004p-1, the double's rounding */
    free(o);
    t.g.nodes[t.op].type = OP_TANH;
    ops_check(&t, "hard tanh");
    tg_free(&t);
}

/* adam_p values that are float32 ties or zeros although every step but the
 * last is inexact in binary: c1 = 3/4, c2 = 9/16, m = v = 1, eps = 0 give
 * y = lr (4/3) / (4/3) = lr exactly. */
static void test_adam_p_ties(void **state)
{
    (void)state;
    union op_params p;
    memset(&p, 0, sizeof p);
    p.adam.b1 = 0.25f;
    p.adam.b2 = 7.0f / 16;
    p.adam.eps = 0.0f;
    p.adam.lr = 0x1p-25f;
    for (int exact = 0; exact < 2; exact++) {
        if (exact)
            setenv("DIVTRACE_ORACLE_EXACT", "1", 1);
        /* 1 - 2^-25: the midpoint below 1, ties to 1 (even) */
        struct tg t;
        tg_init(&t);
        for (int k = 0; k < 3; k++)
            tg_leaf(&t, 3, 0);
        float vals[3][3] = {{1.0f, 0x1p-25f, 0x1.800002p-1f}, {1, 1, -1}, {1, 1, 1}};
        for (int k = 0; k < 3; k++)
            memcpy(t.val[k], vals[k], sizeof vals[k]);
        tg_op(&t, OP_ADAM_P, &p, 3, 0);
        float *o = tg_oracle(&t, exact);
        EXPECT32(o[0], 1.0f);                   /* 1 - 2^-25: tie, to even */
        EXPECT32(o[1], 0.0f);                   /* p - lr = +0 exactly */
        EXPECT32(o[2], 0x1.800004p-1f);         /* 0.75 + 2^-24 + 2^-25: tie, to even */
        free(o);
        tg_free(&t);
        /* sqrt(v / c2) + eps = 0 exactly (eps < 0): y = +Inf, out = -Inf */
        union op_params q = p;
        q.adam.b2 = 0.0f;
        q.adam.eps = -0.5f;
        q.adam.lr = 1.0f;
        tg_init(&t);
        for (int k = 0; k < 3; k++)
            tg_leaf(&t, 1, 0);
        t.val[0][0] = 1.0f, t.val[1][0] = 1.0f, t.val[2][0] = 0.25f;
        tg_op(&t, OP_ADAM_P, &q, 1, 0);
        o = tg_oracle(&t, exact);
        EXPECT32(o[0], -INFINITY);
        free(o);
        ops_check(&t, "adam_p d = 0");
        tg_free(&t);
        unsetenv("DIVTRACE_ORACLE_EXACT");
    }
}

static void test_op_leaves(void **state)
{
    (void)state;
    struct tg t;
    tg_init(&t);
    tg_leaf(&t, 4, 0);
    const struct node *nd = &t.g.nodes[t.leaf[0]];
    float out[4];
    double b[4];
    const float *in[1] = {t.val[0]};
    struct backend_step st = {0};
    assert_int_equal(oracle_op(&t.g, nd, out, in, &st), -1);
    assert_non_null(strstr(dt_error(), "not an op"));
    assert_int_equal(oracle_bound(&t.g, nd, b, in, &st), -1);
    assert_non_null(strstr(dt_error(), "not an op"));
    tg_free(&t);
}

/* ---- bounds against the cpu kernels --------------------------------------------------- */

static float *tg_cpu(struct tg *t)
{
    void *ctx = NULL;
    struct backend_options bo = {.threads = 1};
    assert_int_equal(backend_cpu.init(&ctx, &bo), 0);
    struct exec e;
    assert_int_equal(exec_init(&e, &t->g, &backend_cpu, ctx), 0);
    for (int k = 0; k < t->nleaf; k++)
        exec_set(&e, t->leaf[k], t->val[k]);
    exec_step(&e, t->step);
    float *out = malloc((tg_node(t)->count + 1) * sizeof *out);
    assert_non_null(out);
    exec_get(&e, t->op, out);
    exec_free(&e);
    backend_cpu.free(ctx);
    return out;
}

struct ratio {
    double max, sum;
    long n, inf;
};

/* Every element of the cpu kernel's output within oracle_bound of the exact
 * value; error / bound ratios into rt. */
static void bound_check(struct tg *t, const char *what, struct ratio *rt)
{
    const struct node *nd = tg_node(t);
    float *cpu = tg_cpu(t);
    double *bound = malloc((nd->count + 1) * sizeof *bound);
    assert_non_null(bound);
    const float *in[OP_MAX_INPUTS];
    for (int k = 0; k < t->nleaf; k++)
        in[k] = t->val[k];
    struct backend_step st = {.step = t->step};
    assert_int_equal(oracle_bound(&t->g, nd, bound, in, &st), 0);
    mpfr_t r, d;
    mpfr_inits2(REF_PREC * 2, r, d, (mpfr_ptr)0);
    for (size_t i = 0; i < nd->count; i++) {
        long err;
        ref_elem(t, i, r, &err);
        if (!(bound[i] >= 0))
            fail_msg("%s %s[%zu]: bound %g", what, op_type_name(nd->type), i, bound[i]);
        if (isinf(bound[i])) {
            rt->inf++;
            continue;
        }
        if (!isfinite(cpu[i]) || !mpfr_number_p(r))
            fail_msg("%s %s[%zu]: finite bound %g, cpu %a, exact %s", what,
                     op_type_name(nd->type), i, bound[i], (double)cpu[i],
                     mpfr_number_p(r) ? "finite" : "not finite");
        mpfr_set_prec(d, mpfr_get_prec(r) + 300);
        mpfr_sub_d(d, r, cpu[i], MPFR_RNDN); /* exact */
        double e = fabs(mpfr_get_d(d, MPFR_RNDU)) * (1 + 0x1p-50);
        if (err != LONG_MIN)
            e += ldexp(1.0, (int)(err < -2000 ? -2000 : err));
        if (!(e <= bound[i]))
            fail_msg("%s %s[%zu] (step %llu): |cpu %a - exact %a| = %g > bound %g", what,
                     op_type_name(nd->type), i, (unsigned long long)t->step, (double)cpu[i],
                     mpfr_get_d(r, MPFR_RNDN), e, bound[i]);
        if (bound[i] > 0) {
            double q = e / bound[i];
            rt->max = q > rt->max ? q : rt->max;
            rt->sum += q;
            rt->n++;
        }
    }
    mpfr_clears(r, d, (mpfr_ptr)0);
    free(bound);
    free(cpu);
}

static void test_bounds(void **state)
{
    (void)state;
    for (size_t o = 0; o < OPS_N; o++) {
        struct ratio typ = {0}, all = {0};
        for (int d = 0; d < D_NDIST; d++)
            for (int rep = 0; rep < 20; rep++) {
                struct tg t;
                tg_make(&t, ops_all[o], (enum dist)d, 1 + (uint32_t)(r64() % 300));
                bound_check(&t, "bound", d == D_UNIT ? &typ : &all);
                tg_free(&t);
            }
        if (verbose)
            printf("%-12s unit inputs: max error/bound %.3g mean %.3g (%ld); other: max %.3g "
                   "mean %.3g (%ld, %ld infinite)\n",
                   op_type_name(ops_all[o]), typ.max, typ.n ? typ.sum / typ.n : 0, typ.n,
                   all.max, all.n ? all.sum / all.n : 0, all.n, all.inf);
        /* not absurdly loose: on plain inputs some element uses a fair part of
         * its bound (the exact ops have bound 0 and no ratio) */
        enum op_type ty = ops_all[o];
        if (ty != OP_RELU && ty != OP_RELU_BWD && ty != OP_FILL)
            assert_true(typ.max >= (ty == OP_MATMUL || ty == OP_BIAS_GRAD || ty == OP_MSE ? 1e-3 : 0.05));
    }
}

/* The adversarial cases of the bounds: cancellation in 1 - y^2 and in the
 * matrix product, huge ranges, subnormal products, sigmoid where expf
 * overflows or underflows, Adam with extreme steps. */
static void test_bounds_adversarial(void **state)
{
    (void)state;
    struct ratio rt = {0};
    struct tg t;
    /* matmul: a row that cancels to a tiny rest, K = 784 */
    tg_init(&t);
    int a = tg_leaf(&t, 3, 784), b = tg_leaf(&t, 784, 5);
    for (size_t i = 0; i < 3 * 784; i++)
        t.val[0][i] = i % 2 ? -t.val[0][i - 1] * (1 + 0x1p-20f) : (float)runif(-1, 1);
    for (size_t i = 0; i < 784 * 5; i++)
        t.val[1][i] = (float)runif(0.5, 1) * (i / 5 % 3 == 2 ? 0x1p-130f : 1.0f);
    t.op = graph_matmul(&t.g, "op", a, b, 0, 0);
    bound_check(&t, "matmul cancellation", &rt);
    ops_check(&t, "matmul cancellation");
    tg_free(&t);
    /* matmul of a layer's size, uniform inputs: how tight gamma_K is at K = 784 */
    struct ratio mm = {0};
    tg_init(&t);
    a = tg_leaf(&t, 16, 784);
    b = tg_leaf(&t, 784, 16);
    tg_fill(&t, 0, D_UNIT);
    tg_fill(&t, 1, D_POS);
    t.op = graph_matmul(&t.g, "op", a, b, 0, 0);
    bound_check(&t, "matmul 784", &mm);
    tg_free(&t);
    if (verbose)
        printf("matmul K = 784: max error/bound %.3g mean %.3g\n", mm.max, mm.sum / mm.n);
    /* sigmoid around expf's overflow and underflow, tanh near 0 and 9 */
    tg_init(&t);
    tg_leaf(&t, 4000, 0);
    for (size_t i = 0; i < 4000; i++)
        t.val[0][i] = i < 1000 ? (float)runif(-105, -80) : i < 2000 ? (float)runif(80, 110)
                    : i < 3000 ? (float)runif(-20, 20) : (float)ldexp(runif(-1, 1), -(int)(i % 140));
    t.val[0][3999] = 0x1.ddca18p-3f; /* glibc 2.36's tanhf errs by 2.19 ulp here */
    t.val[0][3998] = -0x1.ddca18p-3f;
    tg_op(&t, OP_SIGMOID, NULL, 4000, 0);
    bound_check(&t, "sigmoid range", &rt);
    ops_check(&t, "sigmoid range");
    t.g.nodes[t.op].type = OP_TANH;
    bound_check(&t, "tanh range", &rt);
    ops_check(&t, "tanh range");
    tg_free(&t);
    /* tanh_bwd with y a hair from +-1 */
    tg_init(&t);
    tg_leaf(&t, 2000, 0);
    tg_leaf(&t, 2000, 0);
    for (size_t i = 0; i < 2000; i++) {
        t.val[0][i] = (1.0f - (float)(i % 40) * 0x1p-24f) * (i % 2 ? -1 : 1);
        t.val[1][i] = (float)ldexp(runif(-1, 1), (int)(i % 300) - 150);
    }
    tg_op(&t, OP_TANH_BWD, NULL, 2000, 0);
    bound_check(&t, "tanh_bwd cancellation", &rt);
    ops_check(&t, "tanh_bwd cancellation");
    t.g.nodes[t.op].type = OP_SIGMOID_BWD;
    bound_check(&t, "sigmoid_bwd subnormal", &rt);
    ops_check(&t, "sigmoid_bwd subnormal");
    tg_free(&t);
    /* adam_p late and early, with b close to 1 */
    for (int rep = 0; rep < 20; rep++) {
        tg_make(&t, OP_ADAM_P, (enum dist)(rep % D_NDIST), 200);
        struct node *nd = &t.g.nodes[t.op];
        nd->p.adam.b2 = rep % 2 ? 1 - 0x1p-20f : 0.9999f;
        t.step = rep % 3 ? (uint64_t)(r64() % 5000) : 0;
        bound_check(&t, "adam_p", &rt);
        tg_free(&t);
    }
    if (verbose)
        printf("adversarial: max error/bound %.3g mean %.3g (%ld, %ld infinite)\n", rt.max,
               rt.n ? rt.sum / rt.n : 0, rt.n, rt.inf);
}

int main(void)
{
    const char *v = getenv("TEST_ORACLE_VERBOSE");
    verbose = v && *v && strcmp(v, "0") != 0;
    unsetenv("DIVTRACE_ORACLE_EXACT");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_rounding),
        cmocka_unit_test(test_acc_random),
        cmocka_unit_test(test_acc_edges),
        cmocka_unit_test(test_acc_carries),
        cmocka_unit_test(test_dot_random),
        cmocka_unit_test(test_dot_edges),
        cmocka_unit_test(test_ulp32),
        cmocka_unit_test(test_op_leaves),
        cmocka_unit_test(test_ops_random),
        cmocka_unit_test(test_ops_special),
        cmocka_unit_test(test_ops_ties),
        cmocka_unit_test(test_ops_cases),
        cmocka_unit_test(test_ops_hard),
        cmocka_unit_test(test_adam_p_ties),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_bounds_adversarial),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
