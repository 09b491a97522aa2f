/* escape.c: plateaus and escapes of a loss curve, robust to minibatch noise.
 *
 * The method (divtrace-escape(1) states the same rules for users):
 *  1. y[t] = ln loss[t] (a non-finite or non-positive loss takes the
 *     previous valid value). Log, so that thresholds are relative.
 *  2. med = centered moving median (width w) of y, z = centered moving mean
 *     (width w) of med; windows are cut at the ends of the curve. The median
 *     removes outlier batches, the mean the remaining jitter.
 *  3. Slope s[t] = (z[c+h] - z[c-h]) / (2h), h = (w-1)/2, the centre c = t
 *     moved into [2h, N-1-2h]: z near an end is a mean over a cut window,
 *     which flattens a falling curve.
 *  4. Reference law: t0 = N/10, E = ln(z[0] / z[N-1]) / ln((N-1+t0) / t0)
 *     (0 if negative), the exponent of the power law (t+t0)^-E through the
 *     curve's ends. It falls by E / (t+t0) per step at step t and by R(a, b)
 *     = E ln((b+t0) / (a+t0)) over [a, b]. The offset keeps the first steps
 *     of a smooth fall, where (t+1)^-E would be steep, from looking flat.
 *     Noise: sigma = 1.4826 * median |y - med|; the slope of step 3 then
 *     has a standard deviation of about 1.3 sigma / w^1.5, z one of 0.92
 *     sigma / sqrt(w). A drop is a fall of z by D = max(ln(1/(1-drop)),
 *     noise_k sqrt(2) 0.92 sigma / sqrt(w)): by `drop`, beyond the noise.
 *  5. Step t is flat when |s[t]| <= max(flat * E/(t+t0), noise_k * 1.3
 *     sigma / w^1.5, 1e-12). Comparing with a power law's rate, not a
 *     constant rate, keeps the tail of a pure power law from being called a
 *     plateau; the noise floor keeps noise from cutting a plateau into
 *     pieces (step 7 then rejects what the floor let through).
 *  6. Maximal runs of flat steps; two runs merge when z does not fall by D
 *     across the gap between them and the gap is at most max_gap steps or
 *     the two together are level (step 7).
 *  7. A run of at least min_len steps is a plateau when it is level as a
 *     whole: the least squares line through med over it falls by F, with
 *     standard error SE = sigma sqrt(12 / len); level is |F| <= flat R + SE
 *     and, on a curve that falls by D overall, |F| + noise_k SE <= R (a
 *     stretch that could be the curve's own descent is not a plateau). A
 *     run that is not level often starts in the tail of a descent: its
 *     start moves to where two least squares lines fit the run best, and
 *     the rest is tested once more.
 *  8. A plateau [a, b] with b < N-1 escapes when min z over (b, b+horizon]
 *     is at least D below z[b]. The drop goes on while the slope is steeper
 *     than the flatness threshold and than a quarter of its steepest value
 *     since b (its foot); the escape step is the first step after b where
 *     z reaches the middle (in log) between z[b] and the lowest z up to the
 *     foot: the centre of the drop.
 *  9. Phases = 1 + escapes: a plateau and its drop is biphasic, two
 *     escaped plateaus triphasic (plateau, drop, plateau, drop), none
 *     monophasic (also a constant curve: one plateau, never escaped, and a
 *     curve with no plateau at all). */
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

/* The working arrays of one analysis. */
struct escape_work {
    size_t n, w, h;
    double t0;           /* the reference law's offset, N/10 */
    double floor_;       /* the flatness floor for noise, per step */
    int descends;        /* z falls by a drop over the whole curve */
    double *y, *med, *z, *tmp; /* (N) each; tmp (N+1) */
    double *pm, *ptm, *pmm; /* (N+1) prefix sums of v, t v, v^2; v = med[t] - med[0] */
};

/* The slope of z at t, (z[c+h] - z[c-h]) / 2h with the centre c = t moved
 * into [2h, N-1-2h], so that both ends are means over whole windows: near
 * an end of the curve z is a mean over a window cut on one side, which
 * flattens a falling curve, so the first and last 2h steps take the slope
 * of the nearest whole span. A curve too short for that uses windows cut to
 * the curve. */
static double escape_slope(const struct escape_work *k, size_t t)
{
    size_t n = k->n, h = k->h, lo, hi;
    if (4 * h + 1 <= n) {
        size_t c = t < 2 * h ? 2 * h : t > n - 1 - 2 * h ? n - 1 - 2 * h : t;
        lo = c - h;
        hi = c + h;
    } else {
        lo = t > h ? t - h : 0;
        hi = t + h < n ? t + h : n - 1;
    }
    return hi > lo ? (k->z[hi] - k->z[lo]) / (double)(hi - lo) : 0.0;
}

/* Step 7: whether [a, b] is level as a whole. Its fall F is that of the
 * least squares line through med over [a, b] (over the steps where med's
 * window is whole: a cut window lags), with standard error SE = sigma
 * sqrt(12 / len) (independent noise of standard deviation sigma); R is the
 * reference law's fall over [a, b]. Level: |F| <= flat R + SE (consistent
 * with a level stretch), and, on a curve that falls by a drop overall,
 * |F| + noise_k SE <= R (not consistent with the curve's own descent: a
 * short noisy stretch of a descent is not a plateau by chance). */
static int escape_level(const struct escape_work *k, const struct escape_result *r, size_t a,
                        size_t b)
{
    const struct escape_params *q = &r->used;
    double len = (double)(b - a + 1);
    size_t fa = a, fb = b;
    if (k->n > 2 * k->h + 3) {
        fa = a > k->h ? a : k->h;
        fb = b < k->n - 1 - k->h ? b : k->n - 1 - k->h;
        if (fb < fa + 2) {
            fa = a;
            fb = b;
        }
    }
    double m = (double)(fb - fa + 1), mt = 0.5 * (double)(fa + fb);
    double sy = k->pm[fb + 1] - k->pm[fa], sty = k->ptm[fb + 1] - k->ptm[fa];
    double sxx = m * (m * m - 1) / 12.0, sxy = sty - mt * sy;
    double fall = sxx > 0 ? fabs(sxy / sxx) * (len - 1) : 0.0;
    double ref = r->rate * log(((double)b + k->t0) / ((double)a + k->t0));
    double se = r->noise * sqrt(12.0 / len);
    if (k->descends && fall + q->noise_k * se > ref)
        return 0;
    return fall <= q->flat * ref + se + 1e-12;
}

/* The residual sum of squares of the least squares line through med over
 * [a, b] (prefix sums: O(1)). */
static double escape_rss(const struct escape_work *k, size_t a, size_t b)
{
    double m = (double)(b - a + 1), mt = 0.5 * (double)(a + b);
    double sy = k->pm[b + 1] - k->pm[a], sty = k->ptm[b + 1] - k->ptm[a];
    double syy = k->pmm[b + 1] - k->pmm[a] - sy * sy / m;
    double sxx = m * (m * m - 1) / 12.0, sxy = sty - mt * sy;
    return sxx > 0 ? fmax(0.0, syy - sxy * sxy / sxx) : 0.0;
}

/* A run [a, b] that is not level as a whole often starts in the tail of a
 * descent, flat enough for step 5 but not level: its start moves to the
 * split of [a, b] into two least squares lines of least total residual
 * (the plateau at least min_len long); 0 when [start, b] is not level. */
static int escape_trim(const struct escape_work *k, const struct escape_result *r, size_t *a,
                       size_t b)
{
    if (escape_level(k, r, *a, b))
        return 1;
    size_t ml = (size_t)r->used.min_len, best = SIZE_MAX;
    double brss = INFINITY;
    for (size_t x = *a + 2; x + ml <= b + 1; x++) {
        double rss = escape_rss(k, *a, x - 1) + escape_rss(k, x, b);
        if (rss < brss) {
            brss = rss;
            best = x;
        }
    }
    if (best == SIZE_MAX || !escape_level(k, r, best, b))
        return 0;
    *a = best;
    return 1;
}

/* Step 8: the escape from a plateau ending at b < N-1, if any; fall is D
 * of step 4. */
static void escape_find_escape(const struct escape_work *k, const struct escape_result *r,
                               struct escape_plateau *pl, double fall)
{
    const struct escape_params *q = &r->used;
    size_t b = pl->end, n = k->n;
    size_t end = b + (size_t)q->horizon < n - 1 ? b + (size_t)q->horizon : n - 1;
    double zmin = k->z[b + 1];
    for (size_t t = b + 1; t <= end; t++)
        zmin = fmin(zmin, k->z[t]);
    pl->drop = fmax(0.0, 1.0 - exp(zmin - k->z[b]));
    if (k->z[b] - zmin < fall)
        return;
    double peak = 0;
    size_t foot = b + 1;
    for (size_t t = b + 1; t < n; t++) {
        double d = -escape_slope(k, t);
        double thr = fmax(q->flat * r->rate / ((double)t + k->t0), k->floor_);
        peak = fmax(peak, d);
        /* the drop has begun (it reached `fall`) before its end counts */
        if (k->z[b] - k->z[t] >= fall && (d <= thr || d < 0.25 * peak))
            break;
        foot = t;
    }
    /* the lowest point up to the foot: a wiggle at the foot is not the drop */
    size_t lo = b + 1;
    for (size_t t = b + 1; t <= foot; t++)
        if (k->z[t] < k->z[lo])
            lo = t;
    double mid = 0.5 * (k->z[b] + k->z[lo]);
    size_t e = b + 1;
    while (e < lo && k->z[e] > mid)
        e++;
    pl->escaped = 1;
    pl->escape = e;
    pl->drop = 1.0 - exp(k->z[lo] - k->z[b]);
}

int escape_analyze(const double *loss, const double *gnorm, size_t n,
                   const struct escape_params *p, struct escape_result *r)
{
    memset(r, 0, sizeof *r);
    escape_params_resolve(p, n, &r->used);
    r->n = n;
    if (n == 0)
        return 0;
    r->phases = 1;
    const struct escape_params *q = &r->used;
    if (n < 3 || n < (size_t)q->min_len)
        return 0; /* too short for any plateau */

    struct escape_work k = {.n = n, .w = (size_t)q->window};
    k.h = (k.w - 1) / 2;
    k.t0 = fmax(1.0, (double)n / 10.0);
    k.y = dt_malloc(n * sizeof *k.y);
    k.med = dt_malloc(n * sizeof *k.med);
    k.z = dt_malloc(n * sizeof *k.z);
    k.tmp = dt_malloc((n + 1) * sizeof *k.tmp);
    unsigned char *flat = dt_malloc(n);

    /* 1. log loss, invalid values carried forward */
    size_t first = 0;
    while (first < n && !(isfinite(loss[first]) && loss[first] > 0))
        first++;
    double last = first < n ? log(loss[first]) : 0;
    for (size_t t = 0; t < n; t++) {
        if (isfinite(loss[t]) && loss[t] > 0)
            last = log(loss[t]);
        k.y[t] = last;
    }
    /* 2. median then mean */
    escape_moving_median(k.med, k.tmp, k.y, n, k.h);
    escape_moving_mean(k.z, k.tmp, k.med, n, k.h);
    k.pm = dt_malloc((n + 1) * sizeof *k.pm);
    k.ptm = dt_malloc((n + 1) * sizeof *k.ptm);
    k.pmm = dt_malloc((n + 1) * sizeof *k.pmm);
    k.pm[0] = k.ptm[0] = k.pmm[0] = 0;
    for (size_t t = 0; t < n; t++) { /* about med[0]: less cancellation */
        double v = k.med[t] - k.med[0];
        k.pm[t + 1] = k.pm[t] + v;
        k.pmm[t + 1] = k.pmm[t] + v * v;
        k.ptm[t + 1] = k.ptm[t] + (double)t * v;
    }
    /* 4. reference rate, noise, the size of a drop */
    r->rate = fmax(0.0, (k.z[0] - k.z[n - 1]) / log(((double)n - 1 + k.t0) / k.t0));
    for (size_t t = 0; t < n; t++)
        k.tmp[t] = fabs(k.y[t] - k.med[t]);
    r->noise = 1.4826 * escape_median(k.tmp, n);
    double fall = fmax(log(1.0 / (1.0 - q->drop)),
                       q->noise_k * sqrt(2.0) * 0.92 * r->noise / sqrt((double)k.w));
    k.descends = k.z[0] - k.z[n - 1] >= fall;
    /* 1e-12: rounding in the running sums, so that a constant curve is flat */
    k.floor_ = fmax(q->noise_k * 1.3 * r->noise / pow((double)k.w, 1.5), 1e-12);
    /* 3, 5. slope and flatness */
    for (size_t t = 0; t < n; t++) {
        double thr = fmax(q->flat * r->rate / ((double)t + k.t0), k.floor_);
        flat[t] = fabs(escape_slope(&k, t)) <= thr;
    }
    /* 6. runs, merged across short wiggles without a drop */
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
            if (k.z[prev->b] - k.z[cur.a] < fall &&
                (gap <= (size_t)q->max_gap || escape_level(&k, r, prev->a, cur.b))) {
                prev->b = cur.b;
                continue;
            }
        }
        runs[nruns++] = cur;
    }
    /* 7. the runs at least min_len long that are level, their starts
     * trimmed; 8. escapes */
    r->plateaus = dt_calloc(nruns ? nruns : 1, sizeof *r->plateaus);
    for (size_t i = 0; i < nruns; i++) {
        size_t a = runs[i].a, b = runs[i].b;
        if (b - a + 1 < (size_t)q->min_len || !escape_trim(&k, r, &a, b))
            continue;
        size_t len = b - a + 1;
        struct escape_plateau *pl = &r->plateaus[r->nplateaus++];
        pl->start = a;
        pl->end = b;
        for (size_t t = a; t <= b; t++)
            k.tmp[t - a] = loss[t];
        size_t nv = 0;
        for (size_t t = 0; t < len; t++) /* the valid losses only */
            if (isfinite(k.tmp[t]) && k.tmp[t] > 0)
                k.tmp[nv++] = k.tmp[t];
        pl->level = nv ? escape_median(k.tmp, nv) : NAN;
        double gs = 0;
        size_t gn = 0;
        for (size_t t = a; gnorm && t <= b; t++)
            if (isfinite(gnorm[t])) {
                gs += gnorm[t];
                gn++;
            }
        pl->grad_norm = gn ? gs / (double)gn : NAN;
        pl->drop = 0;
        if (b + 1 < n)
            escape_find_escape(&k, r, pl, fall);
        r->nescapes += pl->escaped != 0;
    }
    r->phases = 1 + (int)r->nescapes;
    free(runs);
    free(flat);
    free(k.tmp);
    free(k.pm);
    free(k.ptm);
    free(k.pmm);
    free(k.z);
    free(k.med);
    free(k.y);
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
