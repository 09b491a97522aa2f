/* escape.c: plateaus and escapes of a loss curve, robust to minibatch noise.
 *
 * The method (divtrace-escape(1) states the same rules for users):
 *  1. y[t] = ln loss[t] (a non-finite or non-positive loss takes the
 *     previous valid value). Log, so that thresholds are relative.
 *  2. z = centered moving mean (width w) of the centered moving median
 *     (width w) of y; windows are cut at the ends of the curve. The median
 *     removes outlier batches, the mean the remaining jitter.
 *  3. Slope s[t] = (z[t+h] - z[t-h]) / (2h), h = (w-1)/2, the indices
 *     clamped to the curve (the divisor is the clamped distance).
 *  4. Reference rate: E = ln(z[0] / z[N-1]) / ln N (0 if negative), the
 *     exponent of the power law through the curve's ends; at step t such a
 *     law falls by E / (t+1) per step. Noise: sigma = 1.4826 * median
 *     |y - median_w(y)|; the slope of step 3 then has a standard deviation
 *     of about 1.3 sigma / w^1.5 (a median of w points, differenced over w).
 *  5. Step t is flat when |s[t]| <= max(flat * E/(t+1), noise_k * 1.3 sigma
 *     / w^1.5, 1e-12). Comparing with a power law's rate, not a constant rate, is
 *     what keeps the tail of a pure power law from being called a plateau;
 *     the noise floor keeps noise from cutting a plateau into pieces.
 *  6. Maximal runs of flat steps; two runs merge when the gap between them
 *     is at most max_gap steps and z does not fall by drop or more across
 *     it. Runs shorter than min_len steps are dropped: the rest are plateaus.
 *  7. A plateau [a, b] with b < N-1 escapes when min z over (b, b+horizon]
 *     is at least ln(1/(1-drop)) below z[b] (a fall of drop, relative). The
 *     escape step is the first step after b where z reaches the middle (in
 *     log) between z[b] and that minimum: the centre of the drop.
 *  8. Phases = 1 + escapes: a plateau and its drop is biphasic, two
 *     escaped plateaus triphasic (plateau, drop, plateau, drop), none
 *     monophasic (also a constant curve: one plateau, never escaped). */
#include "escape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void escape_params_defaults(struct escape_params *p)
{
    *p = (struct escape_params){
        .window = 0, .min_len = 0, .max_gap = 0, .horizon = 0,
        .flat = 0.25, .noise_k = 3.0, .drop = 0.05,
    };
}

void escape_params_resolve(const struct escape_params *p, size_t n, struct escape_params *out)
{
    *out = *p;
    long w = p->window;
    if (w <= 0) {
        w = (long)(n / 25);
        if (w < 5)
            w = 5;
    }
    if ((size_t)w > n)
        w = (long)n;
    if (w % 2 == 0)
        w--;
    if (w < 3)
        w = 3;
    out->window = (int)w;
    if (out->min_len <= 0)
        out->min_len = 2 * out->window;
    if (out->max_gap <= 0)
        out->max_gap = out->window;
    if (out->horizon <= 0)
        out->horizon = 3 * out->window;
}

int escape_params_check(const struct escape_params *p, char *msg, size_t msglen)
{
    if (p->window != 0 && (p->window < 3 || p->window > 1000000))
        snprintf(msg, msglen, "--window %d: expected 3 to 1000000 (0: automatic)", p->window);
    else if (p->min_len < 0 || p->min_len > 100000000)
        snprintf(msg, msglen, "--min-len %d: expected 1 to 100000000 (0: automatic)", p->min_len);
    else if (p->max_gap < 0 || p->max_gap > 100000000)
        snprintf(msg, msglen, "--max-gap %d: expected 1 to 100000000 (0: automatic)", p->max_gap);
    else if (p->horizon < 0 || p->horizon > 100000000)
        snprintf(msg, msglen, "--horizon %d: expected 1 to 100000000 (0: automatic)", p->horizon);
    else if (!(p->flat > 0 && p->flat <= 100))
        snprintf(msg, msglen, "--flat %g: expected a number in (0, 100]", p->flat);
    else if (!(p->noise_k >= 0 && p->noise_k <= 100))
        snprintf(msg, msglen, "--noise %g: expected a number in [0, 100]", p->noise_k);
    else if (!(p->drop > 0 && p->drop < 1))
        snprintf(msg, msglen, "--drop %g: expected a number in (0, 1)", p->drop);
    else
        return 0;
    return -1;
}

const char *escape_phase_name(int phases)
{
    static const char *names[] = {"empty", "monophasic", "biphasic", "triphasic", "tetraphasic",
                                  "pentaphasic"};
    if (phases >= 0 && phases < (int)(sizeof names / sizeof names[0]))
        return names[phases];
    return "multiphasic";
}

static int escape_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (reorders v). */
static double escape_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, escape_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* out[t] = median of y over [t-h, t+h] cut to [0, n); tmp holds 2h+1. */
static void escape_moving_median(double *out, /* (N) */
                                 double *tmp, const double *y, size_t n, size_t h)
{
    for (size_t t = 0; t < n; t++) {
        size_t lo = t > h ? t - h : 0, hi = t + h < n ? t + h : n - 1;
        memcpy(tmp, y + lo, (hi - lo + 1) * sizeof *tmp);
        out[t] = escape_median(tmp, hi - lo + 1);
    }
}

/* out[t] = mean of x over [t-h, t+h] cut to [0, n), by prefix sums. */
static void escape_moving_mean(double *out, /* (N) */
                               double *prefix, /* (N+1) */
                               const double *x, size_t n, size_t h)
{
    prefix[0] = 0;
    for (size_t t = 0; t < n; t++)
        prefix[t + 1] = prefix[t] + x[t];
    for (size_t t = 0; t < n; t++) {
        size_t lo = t > h ? t - h : 0, hi = t + h < n ? t + h : n - 1;
        out[t] = (prefix[hi + 1] - prefix[lo]) / (double)(hi - lo + 1);
    }
}

struct escape_run {
    size_t a, b; /* inclusive */
};

int escape_analyze(const double *loss, const double *gnorm, size_t n,
                   const struct escape_params *p, struct escape_result *r)
{
    memset(r, 0, sizeof *r);
    escape_params_resolve(p, n, &r->used);
    r->n = n;
    r->rate = 0;
    r->noise = 0;
    if (n == 0)
        return 0;
    r->phases = 1;
    const struct escape_params *q = &r->used;
    size_t w = (size_t)q->window, h = (w - 1) / 2;
    if (n < 3 || n < (size_t)q->min_len)
        return 0; /* too short for any plateau */

    double *y = dt_malloc(n * sizeof *y), *med = dt_malloc(n * sizeof *med);
    double *z = dt_malloc(n * sizeof *z), *tmp = dt_malloc((n + 1) * sizeof *tmp);
    unsigned char *flat = dt_malloc(n);

    /* 1. log loss, invalid values carried forward */
    size_t first = 0;
    while (first < n && !(isfinite(loss[first]) && loss[first] > 0))
        first++;
    double last = first < n ? log(loss[first]) : 0;
    for (size_t t = 0; t < n; t++) {
        if (isfinite(loss[t]) && loss[t] > 0)
            last = log(loss[t]);
        y[t] = last;
    }
    /* 2. median then mean */
    escape_moving_median(med, tmp, y, n, h);
    escape_moving_mean(z, tmp, med, n, h);
    /* 4. reference rate and noise */
    r->rate = fmax(0.0, (z[0] - z[n - 1]) / log((double)n));
    for (size_t t = 0; t < n; t++)
        tmp[t] = fabs(y[t] - med[t]);
    r->noise = 1.4826 * escape_median(tmp, n);
    /* 1e-12: rounding in the running sums, so that a constant curve is flat */
    double floor_ = fmax(q->noise_k * 1.3 * r->noise / pow((double)w, 1.5), 1e-12);
    /* 3, 5. slope and flatness */
    for (size_t t = 0; t < n; t++) {
        size_t lo = t > h ? t - h : 0, hi = t + h < n ? t + h : n - 1;
        double s = (z[hi] - z[lo]) / (double)(hi - lo);
        double thr = fmax(q->flat * r->rate / (double)(t + 1), floor_);
        flat[t] = fabs(s) <= thr;
    }
    /* 6. runs, merged across short wiggles without a drop */
    double fall = log(1.0 / (1.0 - q->drop));
    struct escape_run *runs = dt_malloc(n * sizeof *runs);
    size_t nruns = 0;
    for (size_t t = 0; t < n;) {
        if (!flat[t]) {
            t++;
            continue;
        }
        size_t a = t;
        while (t < n && flat[t])
            t++;
        struct escape_run cur = {a, t - 1};
        if (nruns > 0) {
            struct escape_run *prev = &runs[nruns - 1];
            size_t gap = cur.a - prev->b - 1;
            if (gap <= (size_t)q->max_gap && z[prev->b] - z[cur.a] < fall) {
                prev->b = cur.b;
                continue;
            }
        }
        runs[nruns++] = cur;
    }
    /* keep the long ones; 7. escapes */
    r->plateaus = dt_calloc(nruns ? nruns : 1, sizeof *r->plateaus);
    for (size_t i = 0; i < nruns; i++) {
        size_t a = runs[i].a, b = runs[i].b, len = b - a + 1;
        if (len < (size_t)q->min_len)
            continue;
        struct escape_plateau *pl = &r->plateaus[r->nplateaus++];
        pl->start = a;
        pl->end = b;
        for (size_t t = a; t <= b; t++)
            tmp[t - a] = loss[t];
        size_t nv = 0;
        for (size_t t = 0; t < len; t++) /* the valid losses only */
            if (isfinite(tmp[t]) && tmp[t] > 0)
                tmp[nv++] = tmp[t];
        pl->level = nv ? escape_median(tmp, nv) : NAN;
        double gs = 0;
        size_t gn = 0;
        for (size_t t = a; gnorm && t <= b; t++)
            if (isfinite(gnorm[t])) {
                gs += gnorm[t];
                gn++;
            }
        pl->grad_norm = gn ? gs / (double)gn : NAN;
        pl->drop = 0;
        if (b + 1 >= n)
            continue;
        size_t end = b + (size_t)q->horizon < n - 1 ? b + (size_t)q->horizon : n - 1;
        double zmin = z[b + 1];
        for (size_t t = b + 1; t <= end; t++)
            zmin = fmin(zmin, z[t]);
        pl->drop = fmax(0.0, 1.0 - exp(zmin - z[b]));
        if (z[b] - zmin < fall)
            continue;
        double mid = 0.5 * (z[b] + zmin);
        size_t e = b + 1;
        while (e < end && z[e] > mid)
            e++;
        pl->escaped = 1;
        pl->escape = e;
        r->nescapes++;
    }
    r->phases = 1 + (int)r->nescapes;
    free(runs);
    free(flat);
    free(tmp);
    free(z);
    free(med);
    free(y);
    if (r->nplateaus == 0) {
        free(r->plateaus);
        r->plateaus = NULL;
    }
    return 0;
}

void escape_result_free(struct escape_result *r)
{
    free(r->plateaus);
    r->plateaus = NULL;
    r->nplateaus = 0;
}

double escape_corr_pearson(const double *x, const double *y, size_t n)
{
    if (n < 2)
        return NAN;
    double mx = 0, my = 0;
    for (size_t i = 0; i < n; i++) {
        mx += x[i];
        my += y[i];
    }
    mx /= (double)n;
    my /= (double)n;
    /* centred sums: no cancellation of large step numbers */
    double sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < n; i++) {
        double dx = x[i] - mx, dy = y[i] - my;
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if (!(sxx > 0 && syy > 0))
        return NAN;
    double r = sxy / sqrt(sxx * syy);
    return fmax(-1.0, fmin(1.0, r));
}

struct escape_ranked {
    double v;
    size_t i;
};

static int escape_cmp_ranked(const void *a, const void *b)
{
    const struct escape_ranked *x = a, *y = b;
    if (x->v != y->v)
        return (x->v > y->v) - (x->v < y->v);
    return (x->i > y->i) - (x->i < y->i);
}

/* rank[i] = 1-based rank of v[i]; a run of equal values gets the mean of
 * the ranks it spans. */
static void escape_ranks(double *rank, /* (n) */
                         const double *v, size_t n)
{
    struct escape_ranked *s = dt_malloc((n ? n : 1) * sizeof *s);
    for (size_t i = 0; i < n; i++)
        s[i] = (struct escape_ranked){v[i], i};
    qsort(s, n, sizeof *s, escape_cmp_ranked);
    for (size_t a = 0; a < n;) {
        size_t b = a;
        while (b + 1 < n && s[b + 1].v == s[a].v)
            b++;
        double mean = 0.5 * (double)(a + b) + 1.0; /* ranks a+1 .. b+1 */
        for (size_t k = a; k <= b; k++)
            rank[s[k].i] = mean;
        a = b + 1;
    }
    free(s);
}

double escape_corr_spearman(const double *x, const double *y, size_t n)
{
    if (n < 2)
        return NAN;
    double *rx = dt_malloc(n * sizeof *rx), *ry = dt_malloc(n * sizeof *ry);
    escape_ranks(rx, x, n);
    escape_ranks(ry, y, n);
    double r = escape_corr_pearson(rx, ry, n);
    free(rx);
    free(ry);
    return r;
}
