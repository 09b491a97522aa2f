/* report_plot.c: the PNGs of `divtrace report` in DIR/report/: every
 * condition's mean loss with a band, each condition's trials as small
 * multiples with escape markers, the first-escape steps of every condition
 * side by side, and each pair of conditions' parameter distance against
 * step (median and range). Drawn from the summaries (so they need no trace)
 * by gnuplot through plot.c's pipe (plot_open), data inline. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"
#include "report.h"
#include "util.h"

/* plot_finish: DT_OK, or DT_ERR with dt_error set. */
static int report_plot_close(FILE *g, FILE *err, const char *path)
{
    int st;
    char last[PLOT_LAST];
    if (plot_finish(g, err, &st, last) < 0) {
        dt_error_set("gnuplot failed to write %s%s%s", path, *last ? ": " : "", last);
        return DT_ERR;
    }
    return DT_OK;
}

static void report_plot_done(const char *name, const char *path, FILE *log, char ***written,
                             int *n)
{
    *written = dt_realloc(*written, (size_t)(*n + 1) * sizeof **written);
    (*written)[(*n)++] = dt_strdup(name);
    if (log)
        fprintf(log, "plot: %s\n", path);
}

/* Colours a reader tells apart (Okabe and Ito's palette, which survives
 * the common colour-vision deficiencies), yellow last. */
static const char *const report_colour[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                            "#E69F00", "#56B4E9", "#000000", "#F0E442"};
#define REPORT_NCOLOUR 8

static void report_plot_size(FILE *g, const char *path, int w, int h)
{
    fprintf(g, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "  set terminal pngcairo noenhanced size %d,%d\n"
               "} else {\n"
               "  set terminal png noenhanced size %d,%d\n"
               "}\nset output ", w, h, w, h);
    plot_str(g, path);
    fputc('\n', g);
}

static int report_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The loss curves of condition ci's summarized trials, cut to the steps
 * all of them have: curve[j][i] for trial j, step step[i]. */
struct report_curves {
    int n;                  /* trials */
    size_t len;             /* steps all of them have */
    double *step;           /* (len) */
    double **loss;          /* (n)(len) */
    const struct report_trial **tr;
};

static void report_curves_free(struct report_curves *c)
{
    for (int j = 0; j < c->n; j++)
        free(c->loss[j]);
    free(c->loss);
    free(c->step);
    free(c->tr);
    memset(c, 0, sizeof *c);
}

static int report_curves_load(const char *dir, const struct sweep_spec *s, int ci,
                              const struct report_trial *tr, int ntr, struct report_curves *c)
{
    memset(c, 0, sizeof *c);
    for (int k = 0; k < ntr; k++) {
        if (tr[k].ci != ci || tr[k].src == REPORT_SRC_NONE || tr[k].steps == 0)
            continue;
        double *st, *loss;
        size_t n;
        if (report_curve_load(dir, s, &tr[k], &st, &loss, &n) < 0) {
            report_curves_free(c);
            return DT_ERR;
        }
        if (c->n == 0 || n < c->len) {
            free(c->step);
            c->step = st;
            c->len = n;
        } else {
            free(st);
        }
        c->loss = dt_realloc(c->loss, (size_t)(c->n + 1) * sizeof *c->loss);
        c->tr = dt_realloc(c->tr, (size_t)(c->n + 1) * sizeof *c->tr);
        c->loss[c->n] = loss;
        c->tr[c->n++] = &tr[k];
    }
    return DT_OK;
}

/* A centred moving average of x over w points (w odd; fewer at the ends). */
static void report_smooth(const double *x, double *out, size_t n, size_t w)
{
    size_t h = w / 2;
    for (size_t i = 0; i < n; i++) {
        size_t a = i >= h ? i - h : 0, b = i + h < n ? i + h : n - 1;
        double sum = 0;
        size_t m = 0;
        for (size_t j = a; j <= b; j++)
            if (isfinite(x[j])) {
                sum += x[j];
                m++;
            }
        out[i] = m ? sum / (double)m : NAN;
    }
}

/* The window that smooths a curve of n steps to about 100 points' detail. */
static size_t report_window(size_t n)
{
    size_t w = n / 100;
    return w < 1 ? 1 : w | 1;
}

/* loss.png: each condition's mean loss curve with a band of one standard
 * deviation over its trials, smoothed, on a linear axis fitted to the
 * curves after their first 5% of steps. */
static int report_plot_means(const char *dir, const struct sweep_spec *s,
                             const struct report_trial *tr, int ntr, FILE *log, char ***w, int *nw)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/report/loss.png", dir);
    struct report_curves *cv = dt_calloc((size_t)s->ncond, sizeof *cv);
    double lo = INFINITY, hi = -INFINITY;
    size_t win = 1, maxlen = 0;
    int any = 0, rc = DT_ERR;
    for (int ci = 0; ci < s->ncond; ci++) {
        if (report_curves_load(dir, s, ci, tr, ntr, &cv[ci]) < 0)
            goto out;
        if (cv[ci].n && cv[ci].len > maxlen)
            maxlen = cv[ci].len;
    }
    win = report_window(maxlen);
    FILE *err = NULL, *g = NULL;
    for (int ci = 0; ci < s->ncond; ci++) {
        struct report_curves *c = &cv[ci];
        if (!c->n || !c->len)
            continue;
        double *mean = dt_calloc(c->len, sizeof *mean), *sd = dt_calloc(c->len, sizeof *sd);
        for (size_t i = 0; i < c->len; i++) {
            double sum = 0, sq = 0;
            int m = 0;
            for (int j = 0; j < c->n; j++)
                if (isfinite(c->loss[j][i])) {
                    sum += c->loss[j][i];
                    m++;
                }
            mean[i] = m ? sum / m : NAN;
            for (int j = 0; j < c->n; j++)
                if (isfinite(c->loss[j][i]))
                    sq += (c->loss[j][i] - mean[i]) * (c->loss[j][i] - mean[i]);
            sd[i] = m > 1 ? sqrt(sq / (m - 1)) : 0;
        }
        /* the smoothed mean and band go back into the curve's first rows */
        double *sm = dt_calloc(c->len, sizeof *sm), *ssd = dt_calloc(c->len, sizeof *ssd);
        report_smooth(mean, sm, c->len, win);
        report_smooth(sd, ssd, c->len, win);
        for (size_t i = 0; i < c->len; i++) {
            mean[i] = sm[i];
            sd[i] = ssd[i];
            if (i >= c->len / 20 && isfinite(sm[i])) {
                if (sm[i] - ssd[i] < lo)
                    lo = sm[i] - ssd[i];
                if (sm[i] + ssd[i] > hi)
                    hi = sm[i] + ssd[i];
            }
        }
        free(sm);
        free(ssd);
        free(c->loss[0]);
        c->loss[0] = mean;
        c->loss = dt_realloc(c->loss, (size_t)(c->n + 1) * sizeof *c->loss);
        c->loss[c->n] = sd; /* freed with the curves: n counts it below */
        c->n++;
        any = 1;
    }
    if (!any) {
        if (log)
            fprintf(log, "plot: %s skipped: no trial summarized\n", path);
        rc = DT_OK;
        goto out;
    }
    char title[300];
    snprintf(title, sizeof title,
             "mean loss of each condition's trials, band: one standard deviation%s", "");
    if (win > 1)
        snprintf(title + strlen(title), sizeof title - strlen(title),
                 "; moving average over %zu steps", win);
    g = plot_open(path, title, "step", "loss", &err);
    if (!g)
        goto out;
    report_plot_size(g, path, 1100, 650);
    fputs("set style fill transparent solid 0.2 noborder\nset key below\n", g);
    if (isfinite(lo) && hi > lo)
        fprintf(g, "set yrange [%.9g:%.9g]\n", lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo));
    for (int ci = 0; ci < s->ncond; ci++) {
        struct report_curves *c = &cv[ci];
        if (!c->n || !c->len)
            continue;
        fprintf(g, "$m%d << EOD\n", ci);
        for (size_t i = 0; i < c->len; i++)
            if (isfinite(c->loss[0][i]))
                fprintf(g, "%.17g %.9g %.9g %.9g\n", c->step[i], c->loss[0][i],
                        c->loss[0][i] - c->loss[c->n - 1][i], c->loss[0][i] + c->loss[c->n - 1][i]);
        fputs("EOD\n", g);
    }
    fputs("plot ", g);
    int first = 1;
    for (int ci = 0; ci < s->ncond; ci++) {
        if (!cv[ci].n || !cv[ci].len)
            continue;
        const char *col = report_colour[ci % REPORT_NCOLOUR];
        fprintf(g, "%s$m%d using 1:3:4 with filledcurves lc rgb '%s' notitle, $m%d using 1:2 with "
                   "lines lw 2 lc rgb '%s' title ",
                first ? "" : ", ", ci, col, ci, col);
        char t[600];
        snprintf(t, sizeof t, "%s (%d)", s->cond[ci].name, cv[ci].n - 1);
        plot_str(g, t);
        first = 0;
    }
    fputc('\n', g);
    if (report_plot_close(g, err, path) < 0)
        goto out;
    report_plot_done("loss.png", path, log, w, nw);
    rc = DT_OK;
out:
    for (int ci = 0; ci < s->ncond; ci++)
        report_curves_free(&cv[ci]);
    free(cv);
    return rc;
}

/* loss-COND.png: one small panel per trial (its curve, its escapes as black
 * points), every panel on the same axes, fitted to the curves after their
 * first 5% of steps (the 99th percentile, so that a spike does not flatten
 * the rest). */
static int report_plot_loss(const char *dir, const struct sweep_spec *s, int ci,
                            const struct report_trial *tr, int ntr, FILE *log, char ***w, int *nw)
{
    char name[512], path[4096], title[600];
    snprintf(name, sizeof name, "loss-%s.png", s->cond[ci].name);
    snprintf(path, sizeof path, "%s/report/%s", dir, name);
    struct report_curves c;
    if (report_curves_load(dir, s, ci, tr, ntr, &c) < 0)
        return DT_ERR;
    if (!c.n || !c.len) {
        report_curves_free(&c);
        if (log)
            fprintf(log, "plot: %s skipped: no trial summarized\n", path);
        return DT_OK;
    }
    size_t nv = 0, from = c.len / 20;
    double *v = dt_malloc((size_t)c.n * c.len * sizeof *v + sizeof *v);
    for (int j = 0; j < c.n; j++)
        for (size_t i = from; i < c.len; i++)
            if (isfinite(c.loss[j][i]))
                v[nv++] = c.loss[j][i];
    double lo = NAN, hi = NAN;
    if (nv) {
        qsort(v, nv, sizeof *v, report_cmp_double);
        lo = v[0];
        hi = v[(size_t)(0.99 * (double)(nv - 1))];
    }
    free(v);
    int cols = c.n <= 3 ? c.n : c.n <= 4 ? 2 : c.n <= 9 ? 3 : 4;
    int rows = (c.n + cols - 1) / cols;
    snprintf(title, sizeof title, "%s: the loss of each of %d trials (escapes: black points)",
             s->cond[ci].name, c.n);
    FILE *err, *g = plot_open(path, title, "step", "loss", &err);
    if (!g) {
        report_curves_free(&c);
        return DT_ERR;
    }
    report_plot_size(g, path, 300 * cols + 100, 220 * rows + 80);
    fprintf(g, "set key off\nset xrange [%.17g:%.17g]\n", c.step[0], c.step[c.len - 1]);
    if (isfinite(lo) && hi > lo)
        fprintf(g, "set yrange [%.9g:%.9g]\n", lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo));
    fputs("set xlabel ''\nset ylabel ''\nset format y '%.3g'\nset tics font ',8'\n", g);
    fprintf(g, "set multiplot layout %d,%d title ", rows, cols);
    plot_str(g, title);
    fputc('\n', g);
    fputs("unset title\n", g);
    for (int j = 0; j < c.n; j++) {
        const struct report_trial *t = c.tr[j];
        fprintf(g, "set title 't%02d' font ',9'\n$c << EOD\n", t->t);
        for (size_t i = 0; i < c.len; i++)
            if (isfinite(c.loss[j][i]))
                fprintf(g, "%.17g %.9g\n", c.step[i], c.loss[j][i]);
        fputs("EOD\n$e << EOD\n", g);
        int marks = 0;
        for (const char *p = t->escapes; p && *p;) {
            char *end;
            double e = strtod(p, &end);
            if (end == p)
                break;
            p = end;
            for (size_t i = 0; i < c.len; i++)
                if (c.step[i] == e && isfinite(c.loss[j][i])) {
                    fprintf(g, "%.17g %.9g\n", e, c.loss[j][i]);
                    marks++;
                }
        }
        if (!marks)
            fputs("0 NaN\n", g);
        fprintf(g, "EOD\nplot $c with lines lw 1 lc rgb '%s', $e with points pt 7 ps 1.1 lc rgb "
                   "'black'\n", report_colour[0]);
    }
    fputs("unset multiplot\n", g);
    report_curves_free(&c);
    if (report_plot_close(g, err, path) < 0)
        return DT_ERR;
    report_plot_done(name, path, log, w, nw);
    return DT_OK;
}

/* escapes.png: first escape steps, one column of points per condition */
static int report_plot_escapes(const char *dir, const struct sweep_spec *s,
                               const struct report_trial *tr, int ntr, FILE *log, char ***w,
                               int *nw)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/report/escapes.png", dir);
    int any = 0;
    for (int k = 0; k < ntr; k++)
        any += tr[k].first_escape >= 0;
    if (!any) {
        if (log)
            fprintf(log, "plot: %s skipped: no trial escapes a plateau\n", path);
        return DT_OK;
    }
    FILE *err, *g = plot_open(path, "first escape step of each trial, per condition", "condition",
                              "first escape step", &err);
    if (!g)
        return DT_ERR;
    fprintf(g, "set xrange [-0.5:%d]\nset xtics rotate by -30 (", s->ncond);
    for (int ci = 0; ci < s->ncond; ci++) {
        fputs(ci ? ", " : "", g);
        plot_str(g, s->cond[ci].name);
        fprintf(g, " %d", ci);
    }
    fputs(")\nset key off\nplot '-' with points pt 7 ps 1.5 lc 1, '-' with points pt 2 ps 3 "
          "lw 2 lc 2\n", g);
    for (int k = 0; k < ntr; k++)
        if (tr[k].first_escape >= 0) /* a fixed spread by trial number keeps ties visible */
            fprintf(g, "%g %" PRId64 "\n", tr[k].ci + 0.3 * ((tr[k].t % 7) / 6.0 - 0.5),
                    tr[k].first_escape);
    fputs("e\n", g);
    for (int ci = 0; ci < s->ncond; ci++) { /* the condition's mean */
        double sum = 0;
        int n = 0;
        for (int k = 0; k < ntr; k++)
            if (tr[k].ci == ci && tr[k].first_escape >= 0) {
                sum += (double)tr[k].first_escape;
                n++;
            }
        if (n)
            fprintf(g, "%d %.17g\n", ci, sum / n);
    }
    fputs("e\n", g);
    if (report_plot_close(g, err, path) < 0)
        return DT_ERR;
    report_plot_done("escapes.png", path, log, w, nw);
    return DT_OK;
}

/* The points of a pair's distance that a log scale shows (positive, finite). */
static int report_plot_npos(const struct report_pair *p)
{
    int n = 0;
    for (int i = 0; i < p->npoints; i++)
        n += p->points[i].dist > 0 && isfinite(p->points[i].dist);
    return n;
}

/* divergence-A--B.png: the parameter distance of the pair's trials at each
 * checkpoint: the median (line) and the least and greatest (band), log
 * scale, with the thresholds dotted. */
static int report_plot_pair(const char *dir, const struct sweep_spec *s,
                            const struct report_pair *pr, int npr, int k0, FILE *log, char ***w,
                            int *nw)
{
    int ca = pr[k0].ca, cb = pr[k0].cb, k1 = k0;
    char name[600], path[4096], title[700];
    snprintf(name, sizeof name, "divergence-%s--%s.png", s->cond[ca].name, s->cond[cb].name);
    snprintf(path, sizeof path, "%s/report/%s", dir, name);
    int nlines = 0;
    while (k1 < npr && pr[k1].ca == ca && pr[k1].cb == cb)
        nlines += report_plot_npos(&pr[k1++]) > 0;
    if (!nlines) {
        if (log)
            fprintf(log, "plot: %s skipped: no positive distance at a shared checkpoint\n", path);
        return DT_OK;
    }
    /* the checkpoint steps of every trial, each once, in order */
    size_t nst = 0;
    for (int k = k0; k < k1; k++)
        nst += (size_t)pr[k].npoints;
    double *st = dt_malloc((nst + 1) * sizeof *st), *v = dt_malloc(((size_t)(k1 - k0) + 1) * sizeof *v);
    nst = 0;
    for (int k = k0; k < k1; k++)
        for (int i = 0; i < pr[k].npoints; i++)
            st[nst++] = (double)pr[k].points[i].step;
    qsort(st, nst, sizeof *st, report_cmp_double);
    size_t u = 0;
    for (size_t i = 0; i < nst; i++)
        if (u == 0 || st[i] != st[u - 1])
            st[u++] = st[i];
    snprintf(title, sizeof title, "%s vs %s: relative parameter distance of %d trial pairs "
             "(median, band: least to greatest)", s->cond[ca].name, s->cond[cb].name, nlines);
    FILE *err, *g = plot_open(path, title, "step", "|pA - pB| / |pA|", &err);
    if (!g) {
        free(st);
        free(v);
        return DT_ERR;
    }
    fputs("set logscale y\nset format y '%.0e'\nset key off\n"
          "set style fill transparent solid 0.25 noborder\n", g);
    for (int j = 0; j < DIFF_NTHRESH; j++)
        fprintf(g, "set arrow from graph 0, first %g to graph 1, first %g nohead dt 3 lc 0\n",
                diff_thresholds[j], diff_thresholds[j]);
    fputs("$d << EOD\n", g);
    int rows = 0;
    for (size_t i = 0; i < u; i++) {
        size_t m = 0;
        for (int k = k0; k < k1; k++)
            for (int q = 0; q < pr[k].npoints; q++)
                if ((double)pr[k].points[q].step == st[i] && pr[k].points[q].dist > 0 &&
                    isfinite(pr[k].points[q].dist))
                    v[m++] = pr[k].points[q].dist;
        if (!m)
            continue;
        qsort(v, m, sizeof *v, report_cmp_double);
        double med = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
        fprintf(g, "%.17g %.9g %.9g %.9g\n", st[i], med, v[0], v[m - 1]);
        rows++;
    }
    if (!rows)
        fputs("0 NaN NaN NaN\n", g);
    fprintf(g, "EOD\nplot $d using 1:3:4 with filledcurves lc rgb '%s', $d using 1:2 with "
               "linespoints pt 7 ps 0.6 lw 2 lc rgb '%s'\n", report_colour[0], report_colour[0]);
    free(st);
    free(v);
    if (report_plot_close(g, err, path) < 0)
        return DT_ERR;
    report_plot_done(name, path, log, w, nw);
    return DT_OK;
}

int report_plot_all(const char *dir, const struct sweep_spec *s, const struct report_trial *tr,
                    int ntr, const struct report_pair *pr, int npr, FILE *log, char ***written,
                    int *nwritten)
{
    *written = NULL;
    *nwritten = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/report/x", dir);
    if (report_mkdirs(path) < 0)
        return DT_ERR;
    if (plot_check() < 0) {
        if (log)
            fprintf(log, "plots skipped: gnuplot is not on PATH (install gnuplot-nox)\n");
        return DT_OK;
    }
    if (report_plot_means(dir, s, tr, ntr, log, written, nwritten) < 0)
        return DT_ERR;
    for (int ci = 0; ci < s->ncond; ci++)
        if (report_plot_loss(dir, s, ci, tr, ntr, log, written, nwritten) < 0)
            return DT_ERR;
    if (report_plot_escapes(dir, s, tr, ntr, log, written, nwritten) < 0)
        return DT_ERR;
    for (int k = 0; k < npr; k++)
        if ((k == 0 || pr[k].ca != pr[k - 1].ca || pr[k].cb != pr[k - 1].cb) &&
            report_plot_pair(dir, s, pr, npr, k, log, written, nwritten) < 0)
            return DT_ERR;
    return DT_OK;
}
