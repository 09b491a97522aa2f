/* stattest.h: the tests of `divtrace report`: Welch's t-test and the
 * Mann-Whitney U test (two samples), the paired t-test and the Wilcoxon
 * signed-rank test (paired samples), all two-sided, their effect sizes and
 * confidence intervals, Holm's correction, and the special functions under
 * them (regularized incomplete beta, t and normal CDFs, t quantiles).
 * Pure functions, no I/O. Legend: n1, n2 = the two sample sizes; n = the
 * number of pairs. */
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

/* The q quantile of Student's t with df > 0 degrees of freedom (0 < q < 1;
 * NaN outside), by bisection on stattest_t_cdf. */
double stattest_t_quantile(double q, double df);

struct stattest_paired {
    int ok;
    const char *why;     /* "" when ok; "fewer than 2 pairs", ... */
    size_t n;            /* pairs */
    double mean, sd;     /* of the differences x - y */
    double t, df, p;     /* t = mean / (sd / sqrt(n)), df = n - 1, two-sided p */
    double lo, hi;       /* 95% confidence interval of the mean difference */
    double g;            /* Hedges' g_z: (mean / sd) (1 - 3 / (4 df - 1)) */
};

/* The paired t-test of x against y (n pairs, x[i] with y[i]). Fewer than 2
 * pairs, or differences all equal (zero variance): no test, and why says
 * whether they are all zero. mean and sd are set whenever n >= 1. */
void stattest_paired_t(const double *x, const double *y, size_t n, struct stattest_paired *out);

struct stattest_wilcoxon {
    int ok;
    const char *why;
    size_t n;            /* pairs */
    size_t nz;           /* pairs with a nonzero difference: the test's n */
    double w;            /* W+: the sum of the ranks of |x - y| over x > y */
    double p;            /* two-sided */
    int exact;           /* 1: exact distribution; 0: normal approximation */
    int ties;            /* some nonzero |differences| are tied */
    double z;            /* the approximation's z (0 when exact) */
    double r;            /* matched-pairs rank-biserial (W+ - W-) / (W+ + W-),
                          * positive when x tends to exceed y */
    double median;       /* the median of the n differences */
    double lo, hi;       /* the sign-test interval of the median: order
                          * statistics k and n + 1 - k of the differences, k
                          * the largest with P(Bin(n, 1/2) < k) <= 0.025; NaN
                          * when n < 6 */
    double conf;         /* its exact coverage, 1 - 2 P(Bin(n, 1/2) < k) >= 0.95 */
};

/* The Wilcoxon signed-rank test of x against y (n pairs). Zero differences
 * are dropped (Wilcoxon's convention, R's wilcox.test). Exact (enumerating
 * the signed-rank distribution) when no difference is zero, none of the
 * |differences| are tied and n <= STATTEST_EXACT_MAX; else the normal
 * approximation with the tie-corrected variance n(n+1)(2n+1)/24 -
 * sum(t^3 - t)/48 and a continuity correction of 1/2. No pairs, or every
 * difference zero: no test (the median and its interval are still given). */
void stattest_wilcoxon(const double *x, const double *y, size_t n, struct stattest_wilcoxon *out);

/* P(W+ <= w) under the null for n nonzero untied differences
 * (1 <= n <= STATTEST_EXACT_MAX; NaN otherwise). */
double stattest_signrank_exact_cdf(double w, size_t n);

/* Holm's step-down adjustment of the n p-values p into adj (adj may be p):
 * with the m finite p-values sorted, p(1) <= ... <= p(m), the adjusted
 * p(i) is max over j <= i of min(1, (m - j + 1) p(j)). Entries that are not
 * finite (tests not made) are left out of the family and stay NaN. */
void stattest_holm(const double *p, size_t n, double *adj);

#endif
