/* test_stattest.c: the statistics of `divtrace report` against values
 * derived by hand (in the comments) and against independent computation:
 * the incomplete beta against its closed forms for a = 1 or b = 1, the t CDF
 * against its closed forms for 1 and 2 degrees of freedom and against
 * numeric integration of the t density, exact Mann-Whitney p-values against
 * enumeration of every rank assignment, the normal approximation with ties
 * by hand, effect sizes by hand, and the degenerate samples. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stattest.h"
#include "test_util.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static void ts_close(double got, double want, double tol, const char *what)
{
    if (!(fabs(got - want) <= tol * (1 + fabs(want)))) {
        print_error("%s: got %.17g, want %.17g (tol %g)\n", what, got, want, tol);
        fail();
    }
}

/* The t density, written out from its definition. */
static double ts_t_density(double x, double df)
{
    return exp(lgamma((df + 1) / 2) - lgamma(df / 2)) / sqrt(df * M_PI) *
           pow(1 + x * x / df, -(df + 1) / 2);
}

/* P(T <= t) = 1/2 + integral of the density over [0, t], composite Simpson
 * with 20000 intervals (the density is smooth: error far below 1e-10). */
static double ts_t_cdf_numeric(double t, double df)
{
    const int n = 20000;
    double h = t / n, s = ts_t_density(0, df) + ts_t_density(t, df);
    for (int i = 1; i < n; i++)
        s += (i % 2 ? 4 : 2) * ts_t_density(i * h, df);
    return 0.5 + s * h / 3;
}

/* Phi(z) the same way, from the normal density. */
static double ts_normal_cdf_numeric(double z)
{
    const int n = 20000;
    double h = z / n;
    double s = 1 + exp(-z * z / 2);
    for (int i = 1; i < n; i++)
        s += (i % 2 ? 4 : 2) * exp(-(i * h) * (i * h) / 2);
    return 0.5 + s * h / 3 / sqrt(2 * M_PI);
}

static void test_betainc_closed_forms(void **state)
{
    (void)state;
    /* I_x(a, 1) = x^a and I_x(1, b) = 1 - (1 - x)^b */
    const double as[] = {0.5, 1, 2.5, 7, 40, 200};
    const double xs[] = {1e-6, 0.01, 0.2, 0.5, 0.77, 0.97, 0.999999};
    char what[96];
    for (size_t i = 0; i < ARRAY_LEN(as); i++)
        for (size_t j = 0; j < ARRAY_LEN(xs); j++) {
            double a = as[i], x = xs[j];
            snprintf(what, sizeof what, "I_%g(%g, 1)", x, a);
            ts_close(stattest_betainc(a, 1, x), pow(x, a), 1e-12, what);
            snprintf(what, sizeof what, "I_%g(1, %g)", x, a);
            ts_close(stattest_betainc(1, a, x), 1 - pow(1 - x, a), 1e-12, what);
        }
    /* I_x(a, b) = 1 - I_{1-x}(b, a); I_{1/2}(a, a) = 1/2 */
    ts_close(stattest_betainc(3.5, 0.5, 0.3) + stattest_betainc(0.5, 3.5, 0.7), 1, 1e-13, "reflection");
    ts_close(stattest_betainc(6.2, 6.2, 0.5), 0.5, 1e-13, "I_1/2(a, a)");
    /* I_x(2, 2) = 3x^2 - 2x^3 (integrate 6 t (1 - t)) */
    ts_close(stattest_betainc(2, 2, 0.3), 3 * 0.09 - 2 * 0.027, 1e-13, "I_0.3(2, 2)");
    assert_true(stattest_betainc(1, 1, 0) == 0);
    assert_true(stattest_betainc(1, 1, 1) == 1);
    assert_true(isnan(stattest_betainc(0, 1, 0.5)));
    assert_true(isnan(stattest_betainc(1, 1, 1.5)));
}

static void test_t_cdf(void **state)
{
    (void)state;
    const double ts[] = {-12, -3.1, -1, -0.2, 0, 0.4, 1.732, 2.5, 9};
    char what[96];
    for (size_t i = 0; i < ARRAY_LEN(ts); i++) {
        double t = ts[i];
        /* df = 1 (Cauchy): 1/2 + atan(t) / pi; df = 2: 1/2 + t / (2 sqrt(2 + t^2)) */
        snprintf(what, sizeof what, "t CDF(%g, 1)", t);
        ts_close(stattest_t_cdf(t, 1), 0.5 + atan(t) / M_PI, 1e-12, what);
        snprintf(what, sizeof what, "t CDF(%g, 2)", t);
        ts_close(stattest_t_cdf(t, 2), 0.5 + t / (2 * sqrt(2 + t * t)), 1e-12, what);
        /* fractional and larger df against the integrated density */
        const double dfs[] = {0.7, 4.4117647, 7.3, 30, 250};
        for (size_t j = 0; j < ARRAY_LEN(dfs); j++) {
            snprintf(what, sizeof what, "t CDF(%g, %g)", t, dfs[j]);
            ts_close(stattest_t_cdf(t, dfs[j]), ts_t_cdf_numeric(t, dfs[j]), 1e-9, what);
        }
    }
    ts_close(stattest_t_twosided(2.5, 7.3), 2 * (1 - ts_t_cdf_numeric(2.5, 7.3)), 1e-9, "two-sided");
    /* the normal CDF against its integrated density */
    const double zs[] = {-4, -1.5, 0, 0.3, 2};
    for (size_t i = 0; i < ARRAY_LEN(zs); i++)
        ts_close(stattest_normal_cdf(zs[i]), ts_normal_cdf_numeric(zs[i]), 1e-10, "normal CDF");
}

/* Twelve identical values (the trials of a deterministic condition): the
 * mean is that value and the standard deviation exactly 0, whatever
 * rounding the sum of twelve copies would do; values 1e-9 apart about
 * 0.06 keep their spread (a plain sum loses it to cancellation less, but
 * the shifted sum is exact here). */
static void test_mean_sd_identical(void **state)
{
    (void)state;
    double x[12], m, sd;
    for (int i = 0; i < 12; i++)
        x[i] = 0.060368123456789;
    stattest_mean_sd(x, 12, &m, &sd);
    assert_true(m == x[0]);
    assert_true(sd == 0.0);
    /* 0.06 + k 1e-9 for k = 0..3: mean 0.06 + 1.5e-9, sd 1e-9 sqrt(5/3) */
    double y[4] = {0.06, 0.06 + 1e-9, 0.06 + 2e-9, 0.06 + 3e-9};
    stattest_mean_sd(y, 4, &m, &sd);
    assert_true(fabs(m - (0.06 + 1.5e-9)) < 1e-17);
    assert_true(fabs(sd - 1e-9 * sqrt(5.0 / 3.0)) < 1e-15);
}

static void test_welch_by_hand(void **state)
{
    (void)state;
    /* x = 1,2,3,4: mean 5/2, variance 5/3; y = 2,4,6,8: mean 5, variance 20/3.
     * se^2 = (5/3)/4 + (20/3)/4 = 25/12, t = -5/2 / sqrt(25/12) = -sqrt(3).
     * df = (25/12)^2 / ((5/12)^2/3 + (5/3)^2/3) = (625/144) / (425/432) = 75/17.
     * pooled variance (3 * 5/3 + 3 * 20/3) / 6 = 25/6: d = -(5/2) / sqrt(25/6)
     * = -sqrt(3/2); g = d (1 - 3 / (4 * 8 - 9)) = d * 20/23. */
    const double x[] = {1, 2, 3, 4}, y[] = {2, 4, 6, 8};
    struct stattest_welch w;
    stattest_welch(x, 4, y, 4, &w);
    assert_true(w.ok);
    ts_close(w.mean1, 2.5, 1e-15, "mean1");
    ts_close(w.sd2, sqrt(20.0 / 3), 1e-15, "sd2");
    ts_close(w.t, -sqrt(3.0), 1e-14, "t");
    ts_close(w.df, 75.0 / 17, 1e-14, "df");
    ts_close(w.p, 2 * ts_t_cdf_numeric(-sqrt(3.0), 75.0 / 17), 1e-9, "p");
    ts_close(w.d, -sqrt(1.5), 1e-14, "Cohen's d");
    ts_close(w.g, -sqrt(1.5) * 20 / 23, 1e-14, "Hedges' g");

    /* one sample constant is still a Welch test: x = 10,12,14 (mean 12,
     * variance 4), y = 11 x4: se^2 = 4/3, t = 1 / sqrt(4/3) = sqrt(3)/2,
     * df = (4/3)^2 / ((4/3)^2 / 2) = 2, so p = 1 - t / sqrt(2 + t^2) */
    const double a[] = {10, 12, 14}, b[] = {11, 11, 11, 11};
    stattest_welch(a, 3, b, 4, &w);
    assert_true(w.ok);
    double t = sqrt(3.0) / 2;
    ts_close(w.t, t, 1e-14, "t, one constant sample");
    ts_close(w.df, 2, 1e-14, "df, one constant sample");
    ts_close(w.p, 1 - t / sqrt(2 + t * t), 1e-12, "p, one constant sample");
    /* pooled variance (2 * 4 + 0) / 5 = 8/5: d = 1 / sqrt(8/5); g = d (1 - 3/19) */
    ts_close(w.d, 1 / sqrt(1.6), 1e-14, "d, one constant sample");
    ts_close(w.g, 1 / sqrt(1.6) * 16 / 19, 1e-14, "g, one constant sample");
}

static void test_welch_degenerate(void **state)
{
    (void)state;
    struct stattest_welch w;
    const double c1[] = {1, 1, 1}, c2[] = {2, 2}, c3[] = {1, 1};
    stattest_welch(c1, 3, c2, 2, &w);
    assert_false(w.ok);
    assert_true(isnan(w.p));
    assert_string_equal(w.why, "zero variance in both samples, different means");
    stattest_welch(c1, 3, c3, 2, &w);
    assert_false(w.ok);
    assert_string_equal(w.why, "zero variance in both samples, equal means");
    const double one[] = {3}, two[] = {1, 2};
    stattest_welch(one, 1, two, 2, &w);
    assert_false(w.ok);
    assert_string_equal(w.why, "fewer than 2 values in a sample");
    ts_close(w.mean1, 3, 0, "mean of a single value");
    assert_true(isnan(w.sd1));
    stattest_welch(two, 2, one, 0, &w);
    assert_false(w.ok);
}

/* The exact null distribution by brute force: every way to give n1 of the
 * ranks 1..n1+n2 to the first sample, U = its rank sum - n1 (n1 + 1) / 2.
 * counts[u] for u = 0..n1 n2; returns the number of assignments. */
static unsigned ts_enumerate_u(int n1, int n2, unsigned *counts)
{
    int n = n1 + n2;
    unsigned total = 0;
    memset(counts, 0, (size_t)(n1 * n2 + 1) * sizeof *counts);
    for (unsigned mask = 0; mask < (1u << n); mask++) {
        if (__builtin_popcount(mask) != n1)
            continue;
        int sum = 0;
        for (int r = 0; r < n; r++)
            if (mask & (1u << r))
                sum += r + 1;
        counts[sum - n1 * (n1 + 1) / 2]++;
        total++;
    }
    return total;
}

static void test_mwu_exact_distribution(void **state)
{
    (void)state;
    const int sizes[][2] = {{4, 4}, {4, 5}, {5, 5}, {3, 7}, {1, 6}};
    unsigned counts[64];
    char what[64];
    for (size_t k = 0; k < ARRAY_LEN(sizes); k++) {
        int n1 = sizes[k][0], n2 = sizes[k][1];
        unsigned total = ts_enumerate_u(n1, n2, counts), below = 0;
        for (int u = 0; u <= n1 * n2; u++) {
            below += counts[u];
            snprintf(what, sizeof what, "P(U <= %d), n = %d, %d", u, n1, n2);
            ts_close(stattest_mwu_exact_cdf(u, (size_t)n1, (size_t)n2), (double)below / total,
                     1e-15, what);
        }
    }
}

/* Two-sided exact p of an observed U by enumeration: 2 min(P(U <= u), P(U >= u)). */
static double ts_exact_p(int n1, int n2, int u)
{
    unsigned counts[64], lo = 0, hi = 0;
    unsigned total = ts_enumerate_u(n1, n2, counts);
    for (int v = 0; v <= n1 * n2; v++) {
        if (v <= u)
            lo += counts[v];
        if (v >= u)
            hi += counts[v];
    }
    double p = 2.0 * (lo < hi ? lo : hi) / total;
    return p > 1 ? 1 : p;
}

static void test_mwu_exact(void **state)
{
    (void)state;
    struct stattest_mwu m;
    /* complete separation, n = 4, 5: U = 0, one assignment in C(9,4) = 126
     * reaches it, p = 2/126; r = 2 * 0 / 20 - 1 = -1 */
    const double x1[] = {1, 2, 3, 4}, y1[] = {5, 6, 7, 8, 9};
    stattest_mann_whitney(x1, 4, y1, 5, &m);
    assert_true(m.ok && m.exact && !m.ties);
    ts_close(m.u, 0, 0, "U separated");
    ts_close(m.p, 2.0 / 126, 1e-15, "p separated");
    ts_close(m.r, -1, 0, "r separated");
    /* n = 2, 2: U takes 0,1,2,2,3,4 over the 6 assignments: P(U <= 0) = 1/6, p = 1/3 */
    const double x2[] = {1, 2}, y2[] = {3, 4};
    stattest_mann_whitney(x2, 2, y2, 2, &m);
    ts_close(m.p, 1.0 / 3, 1e-15, "p, n = 2, 2");
    /* x = 1.5, 3.2, 7, 8 against y = 2, 4, 5, 6, 9: x beats 0 + 1 + 4 + 4 = 9
     * of the 20 pairs: U = 9, r = 18/20 - 1 = -0.1 */
    const double x3[] = {1.5, 3.2, 7, 8}, y3[] = {2, 4, 5, 6, 9};
    stattest_mann_whitney(x3, 4, y3, 5, &m);
    assert_true(m.ok && m.exact);
    ts_close(m.u, 9, 0, "U mixed");
    ts_close(m.r, -0.1, 1e-15, "r mixed");
    ts_close(m.p, ts_exact_p(4, 5, 9), 1e-15, "p mixed against enumeration");
    /* the same samples swapped: U' = 20 - 9 = 11, the same p */
    stattest_mann_whitney(y3, 5, x3, 4, &m);
    ts_close(m.u, 11, 0, "U swapped");
    ts_close(m.p, ts_exact_p(5, 4, 11), 1e-15, "p swapped against enumeration");
    ts_close(m.r, 0.1, 1e-15, "r swapped");
    /* n = 5, 5 */
    const double x4[] = {0.3, 0.9, 1.4, 2.2, 5.0}, y4[] = {0.5, 1.0, 3.0, 3.3, 4.1};
    stattest_mann_whitney(x4, 5, y4, 5, &m);
    /* x beats 0 + 1 + 2 + 2 + 5 = 10 pairs */
    ts_close(m.u, 10, 0, "U, n = 5, 5");
    ts_close(m.p, ts_exact_p(5, 5, 10), 1e-15, "p, n = 5, 5 against enumeration");
}

static void test_mwu_normal(void **state)
{
    (void)state;
    struct stattest_mwu m;
    /* ties: x = 1,2,2,3 and y = 2,3,4,5. x beats: 1: 0; 2: tie with 2 (1/2);
     * 2: 1/2; 3: beats 2, ties 3: 3/2; U = 5/2, mean n1 n2 / 2 = 8.
     * Tie groups (pooled 1,2,2,2,3,3,4,5): 2 x3, 3 x2: sum t^3 - t = 24 + 6.
     * var = 16/12 ((8 + 1) - 30 / (8 * 7)) = 79/7. With the continuity
     * correction |U - 8| - 1/2 = 5: z = -5 / sqrt(79/7), p = 2 Phi(z).
     * r = 2 * 2.5 / 16 - 1 = -0.6875. */
    const double x[] = {1, 2, 2, 3}, y[] = {2, 3, 4, 5};
    stattest_mann_whitney(x, 4, y, 4, &m);
    assert_true(m.ok && !m.exact && m.ties);
    ts_close(m.u, 2.5, 0, "U with ties");
    ts_close(m.z, -5 / sqrt(79.0 / 7), 1e-14, "z with ties");
    ts_close(m.p, 2 * ts_normal_cdf_numeric(-5 / sqrt(79.0 / 7)), 1e-10, "p with ties");
    ts_close(m.r, -0.6875, 1e-15, "r with ties");
    /* 30 against 30 without ties is past STATTEST_EXACT_MAX: x_i = i and
     * y_j = j + 1/2 (i, j = 0..29): x_i beats j = 0..i-1, U = 0 + ... + 29
     * = 435; mean 450, var = 900/12 * 61 = 4575; |U - mean| - 1/2 = 14.5 */
    double a[30], b[30];
    for (int i = 0; i < 30; i++) {
        a[i] = i;
        b[i] = i + 0.5;
    }
    stattest_mann_whitney(a, 30, b, 30, &m);
    assert_true(m.ok && !m.exact && !m.ties);
    ts_close(m.u, 435, 0, "U large");
    ts_close(m.z, -14.5 / sqrt(4575.0), 1e-14, "z large");
    ts_close(m.p, 2 * ts_normal_cdf_numeric(-14.5 / sqrt(4575.0)), 1e-10, "p large");
    /* U at its mean: the continuity correction cannot push |dev| below 0, p = 1 */
    const double c[] = {1, 2, 2, 3}, d[] = {1, 2, 2, 3};
    stattest_mann_whitney(c, 4, d, 4, &m);
    ts_close(m.p, 1, 0, "p at the mean");
    ts_close(m.r, 0, 0, "r at the mean");
}

static void test_mwu_degenerate(void **state)
{
    (void)state;
    struct stattest_mwu m;
    const double same[] = {4, 4, 4}, same2[] = {4, 4};
    stattest_mann_whitney(same, 3, same2, 2, &m);
    assert_false(m.ok);
    assert_string_equal(m.why, "every value tied");
    stattest_mann_whitney(same, 3, same2, 0, &m);
    assert_false(m.ok);
    assert_string_equal(m.why, "an empty sample");
    /* one value each, different: exact, U = 1, p = 2 * 1/2 = 1 */
    const double one[] = {1}, two[] = {2};
    stattest_mann_whitney(two, 1, one, 1, &m);
    assert_true(m.ok && m.exact);
    ts_close(m.u, 1, 0, "U, n = 1, 1");
    ts_close(m.p, 1, 0, "p, n = 1, 1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_betainc_closed_forms), cmocka_unit_test(test_t_cdf),
        cmocka_unit_test(test_mean_sd_identical),
        cmocka_unit_test(test_welch_by_hand),        cmocka_unit_test(test_welch_degenerate),
        cmocka_unit_test(test_mwu_exact_distribution), cmocka_unit_test(test_mwu_exact),
        cmocka_unit_test(test_mwu_normal),           cmocka_unit_test(test_mwu_degenerate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
