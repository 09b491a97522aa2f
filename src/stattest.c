/* stattest.c: Welch's t-test, the Mann-Whitney U test and the special
 * functions they need (see stattest.h). */
#include "stattest.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The continued fraction of I_x(a, b) (x^a (1-x)^b / (a B(a, b)) times
 * 1 / (1 + d1 / (1 + d2 / (1 + ...)))), with
 *   d(2m+1) = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)),
 *   d(2m)   = m (b - m) x / ((a + 2m - 1)(a + 2m)),
 * evaluated forward by the modified Lentz method. It converges fast for
 * x < (a + 1) / (a + b + 2); the caller uses I_x(a, b) = 1 - I_{1-x}(b, a)
 * beyond that. */
static double stattest_beta_cf(double a, double b, double x)
{
    const double tiny = 1e-300, eps = 1e-16;
    /* f = b0 + a1 / (b1 + a2 / (b2 + ...)) with b0 = 0, a1 = 1, b_j = 1 and
     * a_j = d(j - 1) for j >= 2 */
    double f = tiny, c = tiny, dd = 0;
    for (int j = 1; j <= 10000; j++) {
        double aj;
        if (j == 1) {
            aj = 1;
        } else {
            int k = j - 1; /* d(k) */
            int m = k / 2;
            if (k % 2)
                aj = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
            else
                aj = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
        }
        dd = 1 + aj * dd;
        if (fabs(dd) < tiny)
            dd = tiny;
        c = 1 + aj / c;
        if (fabs(c) < tiny)
            c = tiny;
        dd = 1 / dd;
        double delta = c * dd;
        f *= delta;
        if (fabs(delta - 1) < eps)
            break;
    }
    return f;
}

double stattest_betainc(double a, double b, double x)
{
    if (!(a > 0) || !(b > 0) || !(x >= 0) || !(x <= 1))
        return NAN;
    if (x == 0)
        return 0;
    if (x == 1)
        return 1;
    double lfront = a * log(x) + b * log1p(-x) - (lgamma(a) + lgamma(b) - lgamma(a + b));
    if (x < (a + 1) / (a + b + 2))
        return exp(lfront) / a * stattest_beta_cf(a, b, x);
    return 1 - exp(lfront) / b * stattest_beta_cf(b, a, 1 - x);
}

/* P(|T| >= |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2). */
double stattest_t_twosided(double t, double df)
{
    if (isnan(t) || !(df > 0))
        return NAN;
    if (isinf(t))
        return 0;
    return stattest_betainc(df / 2, 0.5, df / (df + t * t));
}

double stattest_t_cdf(double t, double df)
{
    double tail = stattest_t_twosided(t, df) / 2;
    return t > 0 ? 1 - tail : tail;
}

double stattest_normal_cdf(double z)
{
    return 0.5 * erfc(-z / sqrt(2.0));
}

void stattest_mean_sd(const double *x, size_t n, double *mean, double *sd)
{
    /* shifted by the first value: identical values give their value as the
     * mean and a standard deviation of exactly 0 (trials of a deterministic
     * condition), and nearby values lose no digits to the sum */
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m += x[i] - x[0];
    m = n ? x[0] + m / (double)n : NAN;
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (x[i] - m) * (x[i] - m);
    *mean = m;
    *sd = n >= 2 ? sqrt(ss / (double)(n - 1)) : NAN;
}

void stattest_welch(const double *x, size_t n1, const double *y, size_t n2,
                    struct stattest_welch *o)
{
    memset(o, 0, sizeof *o);
    o->n1 = n1;
    o->n2 = n2;
    stattest_mean_sd(x, n1, &o->mean1, &o->sd1);
    stattest_mean_sd(y, n2, &o->mean2, &o->sd2);
    o->t = o->df = o->p = o->d = o->g = NAN;
    if (n1 < 2 || n2 < 2) {
        o->why = "fewer than 2 values in a sample";
        return;
    }
    double v1 = o->sd1 * o->sd1, v2 = o->sd2 * o->sd2;
    if (v1 == 0 && v2 == 0) {
        o->why = o->mean1 == o->mean2 ? "zero variance in both samples, equal means"
                                      : "zero variance in both samples, different means";
        return;
    }
    double q1 = v1 / (double)n1, q2 = v2 / (double)n2;
    double se2 = q1 + q2;
    o->t = (o->mean1 - o->mean2) / sqrt(se2);
    o->df = se2 * se2 / (q1 * q1 / (double)(n1 - 1) + q2 * q2 / (double)(n2 - 1));
    o->p = stattest_t_twosided(o->t, o->df);
    double pooled = sqrt(((double)(n1 - 1) * v1 + (double)(n2 - 1) * v2) / (double)(n1 + n2 - 2));
    o->d = (o->mean1 - o->mean2) / pooled;
    o->g = o->d * (1 - 3.0 / (4.0 * (double)(n1 + n2) - 9));
    o->ok = 1;
    o->why = "";
}

/* Number of ways to choose k of the ranks 1..N with rank sum s, for every
 * k <= n1 and s: cnt[k * (smax + 1) + s]. Built one rank at a time. */
double stattest_mwu_exact_cdf(double u, size_t n1, size_t n2)
{
    size_t nn = n1 + n2;
    if (nn > STATTEST_EXACT_MAX || n1 == 0 || n2 == 0)
        return NAN;
    size_t smax = nn * (nn + 1) / 2, w = smax + 1;
    double *cnt = dt_calloc((n1 + 1) * w, sizeof *cnt);
    cnt[0] = 1;
    for (size_t r = 1; r <= nn; r++)
        for (size_t k = (r < n1 ? r : n1); k >= 1; k--)
            for (size_t s = r; s <= smax; s++)
                cnt[k * w + s] += cnt[(k - 1) * w + s - r];
    double below = 0, total = 0;
    size_t base = n1 * (n1 + 1) / 2; /* the smallest rank sum: U = S - base */
    for (size_t s = base; s <= smax; s++) {
        double c = cnt[n1 * w + s];
        total += c;
        if ((double)(s - base) <= u + 1e-9)
            below += c;
    }
    free(cnt);
    return below / total;
}

static int stattest_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void stattest_mann_whitney(const double *x, size_t n1, const double *y, size_t n2,
                           struct stattest_mwu *o)
{
    memset(o, 0, sizeof *o);
    o->n1 = n1;
    o->n2 = n2;
    o->u = o->p = o->z = o->r = NAN;
    if (n1 < 1 || n2 < 1) {
        o->why = "an empty sample";
        return;
    }
    /* U by counting pairs (n1 n2 is small in a study) */
    double u = 0;
    for (size_t i = 0; i < n1; i++)
        for (size_t j = 0; j < n2; j++)
            u += x[i] > y[j] ? 1.0 : x[i] == y[j] ? 0.5 : 0.0;
    size_t nn = n1 + n2;
    double *all = dt_malloc(nn * sizeof *all);
    memcpy(all, x, n1 * sizeof *all);
    memcpy(all + n1, y, n2 * sizeof *all);
    qsort(all, nn, sizeof *all, stattest_cmp);
    double tie_sum = 0; /* sum over tie groups of t^3 - t */
    for (size_t i = 0; i < nn;) {
        size_t j = i;
        while (j < nn && all[j] == all[i])
            j++;
        double t = (double)(j - i);
        tie_sum += t * t * t - t;
        i = j;
    }
    free(all);
    double mn = (double)n1 * (double)n2;
    o->u = u;
    o->r = 2 * u / mn - 1;
    o->ties = tie_sum > 0;
    if (!o->ties && nn <= STATTEST_EXACT_MAX) {
        double lo = stattest_mwu_exact_cdf(u, n1, n2);
        double hi = 1 - stattest_mwu_exact_cdf(u - 1, n1, n2); /* P(U >= u) */
        double p = 2 * (lo < hi ? lo : hi);
        o->p = p > 1 ? 1 : p;
        o->exact = 1;
        o->z = 0;
        o->ok = 1;
        o->why = "";
        return;
    }
    double n = (double)nn;
    double var = mn / 12 * ((n + 1) - tie_sum / (n * (n - 1)));
    if (!(var > 0)) {
        o->why = "every value tied";
        return;
    }
    double dev = fabs(u - mn / 2) - 0.5;
    if (dev < 0)
        dev = 0;
    o->z = (u > mn / 2 ? dev : -dev) / sqrt(var);
    o->p = erfc(dev / sqrt(var) / sqrt(2.0));
    if (o->p > 1)
        o->p = 1;
    o->exact = 0;
    o->ok = 1;
    o->why = "";
}
