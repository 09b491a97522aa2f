/* stattest.c: the two-sample and paired tests, their effect sizes and
 * intervals, Holm's correction and the special functions they need (see
 * stattest.h). */
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

double stattest_t_quantile(double q, double df)
{
    if (!(q > 0) || !(q < 1) || !(df > 0))
        return NAN;
    double lo = -1, hi = 1;
    while (stattest_t_cdf(lo, df) > q)
        lo *= 2;
    while (stattest_t_cdf(hi, df) < q)
        hi *= 2;
    for (int i = 0; i < 200 && hi - lo > 1e-15 * (1 + fabs(lo)); i++) {
        double mid = (lo + hi) / 2;
        if (stattest_t_cdf(mid, df) < q)
            lo = mid;
        else
            hi = mid;
    }
    return (lo + hi) / 2;
}

void stattest_paired_t(const double *x, const double *y, size_t n, struct stattest_paired *o)
{
    memset(o, 0, sizeof *o);
    o->n = n;
    o->mean = o->sd = o->t = o->df = o->p = o->lo = o->hi = o->g = NAN;
    if (n == 0) {
        o->why = "no pairs";
        return;
    }
    double *d = dt_malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i] - y[i];
    stattest_mean_sd(d, n, &o->mean, &o->sd);
    free(d);
    if (n < 2) {
        o->why = "fewer than 2 pairs";
        return;
    }
    if (o->sd == 0) {
        o->why = o->mean == 0 ? "every difference zero" : "every difference equal, nonzero";
        return;
    }
    double se = o->sd / sqrt((double)n);
    o->df = (double)(n - 1);
    o->t = o->mean / se;
    o->p = stattest_t_twosided(o->t, o->df);
    double q = stattest_t_quantile(0.975, o->df);
    o->lo = o->mean - q * se;
    o->hi = o->mean + q * se;
    o->g = o->mean / o->sd * (1 - 3 / (4 * o->df - 1));
    o->ok = 1;
    o->why = "";
}

/* Counts of the subsets of the ranks 1..n with rank sum s, built one rank
 * at a time; P(W+ <= w) is the share of the 2^n sign assignments. */
double stattest_signrank_exact_cdf(double w, size_t n)
{
    if (n < 1 || n > STATTEST_EXACT_MAX)
        return NAN;
    size_t smax = n * (n + 1) / 2;
    double *cnt = dt_calloc(smax + 1, sizeof *cnt);
    cnt[0] = 1;
    for (size_t r = 1; r <= n; r++)
        for (size_t s = smax; s >= r; s--)
            cnt[s] += cnt[s - r];
    double below = 0, total = 0;
    for (size_t s = 0; s <= smax; s++) {
        total += cnt[s];
        if ((double)s <= w + 1e-9)
            below += cnt[s];
    }
    free(cnt);
    return below / total;
}

/* P(Bin(n, 1/2) <= k), summed in logs (2^-n underflows past n = 1074). */
static double stattest_binom_half_cdf(size_t k, size_t n)
{
    double s = 0, ln = lgamma((double)n + 1) - (double)n * log(2.0);
    for (size_t i = 0; i <= k && i <= n; i++)
        s += exp(ln - lgamma((double)i + 1) - lgamma((double)(n - i) + 1));
    return s > 1 ? 1 : s;
}

/* The median of the differences and its sign-test interval (stattest.h). */
static void stattest_median_ci(double *d, size_t n, struct stattest_wilcoxon *o)
{
    qsort(d, n, sizeof *d, stattest_cmp);
    o->median = n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
    size_t k = 0;
    while (k + 1 <= n / 2 && stattest_binom_half_cdf(k, n) <= 0.025)
        k++; /* now P(Bin <= k - 1) <= 0.025 < P(Bin <= k), or k = n / 2 */
    if (k == 0)
        return;
    o->lo = d[k - 1];
    o->hi = d[n - k];
    o->conf = 1 - 2 * stattest_binom_half_cdf(k - 1, n);
}

/* |v| ordered, for ranking */
static int stattest_cmp_abs(const void *a, const void *b)
{
    double x = fabs(*(const double *)a), y = fabs(*(const double *)b);
    return (x > y) - (x < y);
}

void stattest_wilcoxon(const double *x, const double *y, size_t n, struct stattest_wilcoxon *o)
{
    memset(o, 0, sizeof *o);
    o->n = n;
    o->w = o->p = o->z = o->r = o->median = o->lo = o->hi = o->conf = NAN;
    if (n == 0) {
        o->why = "no pairs";
        return;
    }
    double *d = dt_malloc(n * sizeof *d);
    size_t nz = 0;
    for (size_t i = 0; i < n; i++)
        d[nz++] = x[i] - y[i];
    stattest_median_ci(d, n, o);
    nz = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            d[nz++] = x[i] - y[i];
    o->nz = nz;
    if (nz == 0) {
        free(d);
        o->why = "every difference zero";
        return;
    }
    qsort(d, nz, sizeof *d, stattest_cmp_abs);
    double wp = 0, tie_sum = 0;
    for (size_t i = 0; i < nz;) {
        size_t j = i;
        while (j < nz && fabs(d[j]) == fabs(d[i]))
            j++;
        double rank = (double)(i + 1 + j) / 2, t = (double)(j - i); /* mid-rank of i+1..j */
        for (size_t k = i; k < j; k++)
            if (d[k] > 0)
                wp += rank;
        tie_sum += t * t * t - t;
        i = j;
    }
    free(d);
    double m = (double)nz, total = m * (m + 1) / 2;
    o->w = wp;
    o->r = (wp - (total - wp)) / total;
    o->ties = tie_sum > 0;
    o->ok = 1;
    o->why = "";
    if (!o->ties && nz == n && nz <= STATTEST_EXACT_MAX) {
        double lo = stattest_signrank_exact_cdf(wp, nz);
        double hi = 1 - stattest_signrank_exact_cdf(wp - 1, nz); /* P(W+ >= w) */
        double p = 2 * (lo < hi ? lo : hi);
        o->p = p > 1 ? 1 : p;
        o->exact = 1;
        o->z = 0;
        return;
    }
    double var = m * (m + 1) * (2 * m + 1) / 24 - tie_sum / 48;
    double dev = fabs(wp - total / 2) - 0.5;
    if (dev < 0)
        dev = 0;
    o->z = (wp > total / 2 ? dev : -dev) / sqrt(var);
    o->p = erfc(dev / sqrt(var) / sqrt(2.0));
    if (o->p > 1)
        o->p = 1;
    o->exact = 0;
}

void stattest_holm(const double *p, size_t n, double *adj)
{
    size_t *idx = dt_malloc((n + 1) * sizeof *idx), m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(p[i]))
            idx[m++] = i;
    /* insertion sort by p (families are a few dozen tests); stable */
    for (size_t i = 1; i < m; i++)
        for (size_t j = i; j > 0 && p[idx[j]] < p[idx[j - 1]]; j--) {
            size_t t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    double *out = dt_malloc((n + 1) * sizeof *out), run = 0;
    for (size_t i = 0; i < n; i++)
        out[i] = NAN;
    for (size_t j = 0; j < m; j++) {
        double a = (double)(m - j) * p[idx[j]];
        if (a > 1)
            a = 1;
        if (a > run)
            run = a;
        out[idx[j]] = run;
    }
    memcpy(adj, out, n * sizeof *adj);
    free(out);
    free(idx);
}
