/* stattest.h: the two-sample tests of `divtrace report`: Welch's t-test and
 * the Mann-Whitney U test (two-sided), their effect sizes, and the special
 * functions under them (regularized incomplete beta, t and normal CDFs).
 * Pure functions, no I/O. Legend: n1, n2 = the two sample sizes. */
#ifndef DT_STATTEST_H
#define DT_STATTEST_H

#include <stddef.h>

/* Samples up to this total size without ties get the exact U distribution;
 * larger ones, or any with ties, the normal approximation. */
#define STATTEST_EXACT_MAX 50

/* I_x(a, b), the regularized incomplete beta function, for a, b > 0 and
 * 0 <= x <= 1 (NaN outside), by its continued fraction. */
double stattest_betainc(double a, double b, double x);
/* P(T <= t) for Student's t with df > 0 degrees of freedom (df need not be
 * an integer). */
double stattest_t_cdf(double t, double df);
/* P(|T| >= |t|): the two-sided tail, computed directly (no cancellation). */
double stattest_t_twosided(double t, double df);
/* P(Z <= z) for the standard normal, through erfc. */
double stattest_normal_cdf(double z);

/* Mean and sample standard deviation (n - 1 divisor; NaN when n < 2). */
void stattest_mean_sd(const double *x, size_t n, double *mean, double *sd);

struct stattest_welch {
    int ok;              /* the test was made; else why says why */
    const char *why;     /* "" when ok; "fewer than 2 values in a sample", ... */
    size_t n1, n2;
    double mean1, mean2, sd1, sd2;
    double t, df, p;     /* two-sided */
    double d;            /* Cohen's d: (mean1 - mean2) / pooled sd */
    double g;            /* Hedges' g: d * (1 - 3 / (4 (n1 + n2) - 9)) */
};

/* Welch's unequal-variance t-test of x (n1) against y (n2). Values that are
 * not finite must be left out by the caller. n < 2 in either sample: no
 * test. Zero variance in both: no test (why says whether the means differ).
 * Zero variance in one only is a valid Welch test. */
void stattest_welch(const double *x, size_t n1, const double *y, size_t n2,
                    struct stattest_welch *out);

struct stattest_mwu {
    int ok;
    const char *why;
    size_t n1, n2;
    double u;            /* U of the first sample: pairs with x > y, ties count 1/2 */
    double p;            /* two-sided */
    int exact;           /* 1: exact distribution; 0: normal approximation with
                          * tie and continuity correction */
    int ties;            /* some values are tied */
    double z;            /* the approximation's z (0 when exact) */
    double r;            /* rank-biserial correlation 2U/(n1 n2) - 1, in [-1, 1]:
                          * positive when x tends to exceed y */
};

/* The Mann-Whitney U test of x against y. Exact (enumerating the rank-sum
 * distribution) when there are no ties and n1 + n2 <= STATTEST_EXACT_MAX,
 * else the normal approximation with the tie-corrected variance and a
 * continuity correction of 1/2. n < 1 in either sample, or every value tied:
 * no test. */
void stattest_mann_whitney(const double *x, size_t n1, const double *y, size_t n2,
                           struct stattest_mwu *out);

/* P(U <= u) under the null for samples of sizes n1, n2 without ties
 * (n1 + n2 <= STATTEST_EXACT_MAX; NaN otherwise). */
double stattest_mwu_exact_cdf(double u, size_t n1, size_t n2);

#endif
