/* test_stattest.c: the statistics of `divtrace report` against values
 * derived by hand (in the comments) and against independent computation:
 * the incomplete beta against its closed forms for a = 1 or b = 1, the t CDF
 * against its closed forms for 1 and 2 degrees of freedom and against
 * numeric integration of the t density, exact Mann-Whitney p-values against
 * enumeration of every rank assignment, the normal approximation with ties
 * by hand, effect sizes by hand, and the degenerate samples; the paired
 * t-test and the exact Wilcoxon signed-rank test against R's published
 * examples (the sleep data of ?t.test, the depression data of ?wilcox.test),
 * the signed-rank distribution against enumeration of every sign
 * assignment, the approximation with ties and zeros, the sign-test interval
 * of the median and Holm's adjustment by hand. */
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

static void test_t_quantile(void **state)
{
    (void)state;
    /* df = 1 (Cauchy): tan(pi (q - 1/2)); df = 2: (2q - 1) / sqrt(2 q (1 - q)) */
    const double q[] = {0.6, 0.9, 0.975, 0.995, 0.025};
    for (size_t i = 0; i < ARRAY_LEN(q); i++) {
        ts_close(stattest_t_quantile(q[i], 1), tan(M_PI * (q[i] - 0.5)), 1e-12, "t quantile, df 1");
        ts_close(stattest_t_quantile(q[i], 2), (2 * q[i] - 1) / sqrt(2 * q[i] * (1 - q[i])), 1e-12,
                 "t quantile, df 2");
    }
    /* the printed tables: t(0.975; 9) = 2.262157, t(0.975; 3) = 3.182446 */
    ts_close(stattest_t_quantile(0.975, 9), 2.262157, 1e-6, "t(0.975; 9)");
    ts_close(stattest_t_quantile(0.975, 3), 3.182446, 1e-6, "t(0.975; 3)");
    assert_true(isnan(stattest_t_quantile(1, 3)));
}

static void test_paired_t(void **state)
{
    (void)state;
    /* R's sleep data (?t.test): t.test(extra ~ group, paired = TRUE) prints
     * t = -4.0621, df = 9, p-value = 0.002833, 95 percent confidence interval
     * -2.4598858 -0.7001142, mean difference -1.58 */
    const double g1[] = {0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0};
    const double g2[] = {1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4};
    struct stattest_paired pt;
    stattest_paired_t(g1, g2, 10, &pt);
    assert_true(pt.ok);
    ts_close(pt.mean, -1.58, 1e-12, "sleep: mean difference");
    ts_close(pt.t, -4.0621, 5e-5, "sleep: t");
    ts_close(pt.df, 9, 0, "sleep: df");
    ts_close(pt.p, 0.002833, 5e-7, "sleep: p");
    ts_close(pt.lo, -2.4598858, 5e-8, "sleep: CI low");
    ts_close(pt.hi, -0.7001142, 5e-8, "sleep: CI high");

    /* by hand: differences 1, 2, 3, 4: mean 5/2, variance 5/3, se^2 = 5/12,
     * t = (5/2) / sqrt(5/12) = sqrt(15), df 3; g_z = (5/2) / sqrt(5/3) *
     * (1 - 3/11) = sqrt(15)/2 * 8/11; CI 5/2 -+ 3.182446 sqrt(5/12) */
    const double x[] = {11, 12, 13, 14}, y[] = {10, 10, 10, 10};
    stattest_paired_t(x, y, 4, &pt);
    assert_true(pt.ok);
    ts_close(pt.t, sqrt(15.0), 1e-14, "t by hand");
    ts_close(pt.p, 2 * ts_t_cdf_numeric(-sqrt(15.0), 3), 1e-9, "p by hand");
    ts_close(pt.g, sqrt(15.0) / 2 * 8 / 11, 1e-14, "Hedges' g_z by hand");
    ts_close(pt.lo, 2.5 - 3.182446 * sqrt(5.0 / 12), 1e-6, "CI low by hand");
    ts_close(pt.hi, 2.5 + 3.182446 * sqrt(5.0 / 12), 1e-6, "CI high by hand");

    /* degenerate: one pair; twelve bitwise copies of one pair (n = 1 when
     * counted as runs, and equal differences when counted as trials) */
    stattest_paired_t(x, y, 1, &pt);
    assert_false(pt.ok);
    assert_string_equal(pt.why, "fewer than 2 pairs");
    const double c1[] = {3, 3, 3}, c2[] = {1, 1, 1};
    stattest_paired_t(c1, c2, 3, &pt);
    assert_false(pt.ok);
    assert_string_equal(pt.why, "every difference equal, nonzero");
    stattest_paired_t(c1, c1, 3, &pt);
    assert_false(pt.ok);
    assert_string_equal(pt.why, "every difference zero");
}

/* P(W+ <= w) by trying all 2^n sign assignments of the ranks 1..n */
static double ts_signrank_enum(double w, int n)
{
    double below = 0;
    for (uint32_t mask = 0; mask < (1u << n); mask++) {
        int s = 0;
        for (int r = 1; r <= n; r++)
            if (mask >> (r - 1) & 1)
                s += r;
        below += s <= w;
    }
    return below / (double)(1u << n);
}

static void test_signrank_exact_distribution(void **state)
{
    (void)state;
    for (int n = 1; n <= 12; n++)
        for (int w = -1; w <= n * (n + 1) / 2 + 1; w++)
            ts_close(stattest_signrank_exact_cdf(w, (size_t)n), ts_signrank_enum(w, n), 1e-15,
                     "signed-rank cdf against enumeration");
    assert_true(isnan(stattest_signrank_exact_cdf(1, STATTEST_EXACT_MAX + 1)));
}

static void test_wilcoxon_exact(void **state)
{
    (void)state;
    /* R's ?wilcox.test (Hollander & Wolfe, depression scale): V = 40, and
     * one-sided p = 0.01953 = 10/512 (the 10 subsets of 1..9 summing to at
     * most 5), so two-sided 20/512. W- = 45 - 40 = 5: r = 35/45. The
     * differences sorted: -0.147 -0.08 0.01 0.43 0.49 0.59 0.62 0.952 1.022,
     * median 0.49; n = 9: P(Bin <= 1) = 10/512 <= 0.025 < P(Bin <= 2) =
     * 46/512, so k = 2: [-0.08, 0.952], coverage 1 - 20/512. */
    const double x[] = {1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30};
    const double y[] = {0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29};
    struct stattest_wilcoxon w;
    stattest_wilcoxon(x, y, 9, &w);
    assert_true(w.ok && w.exact && !w.ties);
    ts_close(w.w, 40, 0, "V");
    ts_close(w.p, 20.0 / 512, 1e-15, "exact p");
    ts_close(w.r, 35.0 / 45, 1e-15, "rank-biserial");
    ts_close(w.median, 0.49, 1e-12, "median difference");
    ts_close(w.lo, -0.08, 1e-12, "median CI low");
    ts_close(w.hi, 0.952, 1e-12, "median CI high");
    ts_close(w.conf, 1 - 20.0 / 512, 1e-12, "median CI coverage");
    /* x and y swapped: W+ = 5, the same p, r negated */
    stattest_wilcoxon(y, x, 9, &w);
    ts_close(w.w, 5, 0, "V swapped");
    ts_close(w.p, 20.0 / 512, 1e-15, "exact p swapped");
    ts_close(w.r, -35.0 / 45, 1e-15, "rank-biserial swapped");
}

static void test_wilcoxon_normal(void **state)
{
    (void)state;
    /* differences 0, 1, -1, 2, 2, 3, 4, 5: the zero dropped, n = 7; |d|
     * ranks 1.5 1.5 3.5 3.5 5 6 7, W+ = 26.5, W- = 1.5, r = 25/28. Ties
     * (2 and 2): var = 7*8*15/24 - (6 + 6)/48 = 34.75, mean 14, z = (12.5 -
     * 0.5) / sqrt(34.75). Median of the 8 differences 2; n = 8: P(Bin <= 0)
     * = 1/256 <= 0.025 < P(Bin <= 1) = 9/256: k = 1, [-1, 5], 1 - 2/256. */
    const double x[] = {10, 11, 9, 12, 12, 13, 14, 15};
    const double y[] = {10, 10, 10, 10, 10, 10, 10, 10};
    struct stattest_wilcoxon w;
    stattest_wilcoxon(x, y, 8, &w);
    assert_true(w.ok && !w.exact && w.ties);
    assert_int_equal(w.nz, 7);
    ts_close(w.w, 26.5, 0, "W+ with ties");
    double z = 12 / sqrt(34.75);
    ts_close(w.z, z, 1e-14, "z with ties");
    ts_close(w.p, 2 * ts_normal_cdf_numeric(-z), 1e-9, "p with ties");
    ts_close(w.r, 25.0 / 28, 1e-15, "rank-biserial with ties");
    ts_close(w.median, 2, 0, "median");
    ts_close(w.lo, -1, 0, "median CI low");
    ts_close(w.hi, 5, 0, "median CI high");
    ts_close(w.conf, 1 - 2.0 / 256, 1e-15, "median CI coverage");

    /* every difference zero (bitwise copies in both conditions): no test */
    stattest_wilcoxon(y, y, 8, &w);
    assert_false(w.ok);
    assert_string_equal(w.why, "every difference zero");
    ts_close(w.median, 0, 0, "median of zeros");
    /* five pairs: no interval at 95% (P(Bin(5, 1/2) = 0) = 1/32 > 0.025) */
    stattest_wilcoxon(x, y, 5, &w);
    assert_true(isnan(w.lo) && isnan(w.hi));
    stattest_wilcoxon(x, y, 0, &w);
    assert_false(w.ok);
}

static void test_holm(void **state)
{
    (void)state;
    /* sorted 0.005 0.01 0.03 0.04, m = 4: 4*0.005 = 0.02, 3*0.01 = 0.03,
     * 2*0.03 = 0.06, max(0.06, 1*0.04) = 0.06 */
    const double p[] = {0.01, 0.04, 0.03, 0.005};
    const double want[] = {0.03, 0.06, 0.06, 0.02};
    double adj[4];
    stattest_holm(p, 4, adj);
    for (int i = 0; i < 4; i++)
        ts_close(adj[i], want[i], 1e-15, "Holm");
    /* capped at 1: 2*0.5 = 1, max(1, 0.6) */
    const double q[] = {0.6, 0.5};
    stattest_holm(q, 2, adj);
    ts_close(adj[0], 1, 0, "Holm capped");
    ts_close(adj[1], 1, 0, "Holm capped");
    /* a test not made is not in the family: m = 2 */
    double r[] = {NAN, 0.02, 0.01};
    stattest_holm(r, 3, r);
    assert_true(isnan(r[0]));
    ts_close(r[1], 0.02, 1e-15, "Holm with NaN");
    ts_close(r[2], 0.02, 1e-15, "Holm with NaN");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_betainc_closed_forms), cmocka_unit_test(test_t_cdf),
        cmocka_unit_test(test_mean_sd_identical),
        cmocka_unit_test(test_welch_by_hand),        cmocka_unit_test(test_welch_degenerate),
        cmocka_unit_test(test_mwu_exact_distribution), cmocka_unit_test(test_mwu_exact),
        cmocka_unit_test(test_mwu_normal),           cmocka_unit_test(test_mwu_degenerate),
        cmocka_unit_test(test_t_quantile),           cmocka_unit_test(test_paired_t),
        cmocka_unit_test(test_signrank_exact_distribution),
        cmocka_unit_test(test_wilcoxon_exact),       cmocka_unit_test(test_wilcoxon_normal),
        cmocka_unit_test(test_holm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
