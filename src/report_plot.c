/* report_plot.c: the PNGs of `divtrace report` in DIR/report/: each
 * condition's loss curves with escape markers, the first-escape steps of
 * every condition side by side, and each pair of conditions' parameter
 * distance against step. Drawn from the summaries (so they need no trace)
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

/* loss-COND.png: every trial's curve (log loss), a point at each escape */
static int report_plot_loss(const char *dir, const struct sweep_spec *s, int ci,
                            const struct report_trial *tr, int ntr, FILE *log, char ***w, int *nw)
{
    char name[512], path[4096], title[600];
    snprintf(name, sizeof name, "loss-%s.png", s->cond[ci].name);
    snprintf(path, sizeof path, "%s/report/%s", dir, name);
    int ntrial = 0;
    for (int k = 0; k < ntr; k++)
        ntrial += tr[k].ci == ci && tr[k].src != REPORT_SRC_NONE && tr[k].steps > 0;
    if (!ntrial) {
        if (log)
            fprintf(log, "plot: %s skipped: no trial summarized\n", path);
        return DT_OK;
    }
    snprintf(title, sizeof title, "%s: loss curves of %d trials, escapes marked", s->cond[ci].name,
             ntrial);
    FILE *err, *g = plot_open(path, title, "step", "loss", &err);
    if (!g)
        return DT_ERR;
    /* the escapes go last, in black, so that no later curve hides them */
    fputs("set logscale y\nplot ", g);
    int first = 1, anyesc = 0;
    for (int k = 0; k < ntr; k++) {
        if (tr[k].ci != ci || tr[k].src == REPORT_SRC_NONE || tr[k].steps == 0)
            continue;
        fprintf(g, "%s'-' with lines lc %d title 't%02d'", first ? "" : ", ", tr[k].t % 8 + 1,
                tr[k].t);
        anyesc |= tr[k].escapes[0] != 0;
        first = 0;
    }
    if (anyesc)
        fputs(", '-' with points pt 7 ps 1.4 lc rgb 'black' title 'escapes'", g);
    fputc('\n', g);
    double *mark = NULL; /* (step, loss) of each escape */
    size_t nmark = 0, capmark = 0;
    for (int k = 0; k < ntr; k++) {
        if (tr[k].ci != ci || tr[k].src == REPORT_SRC_NONE || tr[k].steps == 0)
            continue;
        double *st, *loss;
        size_t n;
        if (report_curve_load(dir, s, &tr[k], &st, &loss, &n) < 0) {
            free(mark);
            pclose(g);
            if (err)
                fclose(err);
            return DT_ERR;
        }
        for (size_t i = 0; i < n; i++)
            if (loss[i] > 0 && isfinite(loss[i]))
                fprintf(g, "%.17g %.9g\n", st[i], loss[i]);
        fputs("e\n", g);
        for (const char *p = tr[k].escapes; *p;) {
            char *end;
            double e = strtod(p, &end);
            if (end == p)
                break;
            p = end;
            for (size_t i = 0; i < n; i++)
                if (st[i] == e && loss[i] > 0 && isfinite(loss[i])) {
                    if (nmark == capmark) {
                        capmark = capmark ? 2 * capmark : 16;
                        mark = dt_realloc(mark, 2 * capmark * sizeof *mark);
                    }
                    mark[2 * nmark] = e;
                    mark[2 * nmark++ + 1] = loss[i];
                }
        }
        free(st);
        free(loss);
    }
    if (anyesc) {
        for (size_t i = 0; i < nmark; i++)
            fprintf(g, "%.17g %.9g\n", mark[2 * i], mark[2 * i + 1]);
        if (!nmark) /* an escape step the curve lacks: an empty series, not a broken plot */
            fputs("0 NaN\n", g);
        fputs("e\n", g);
    }
    free(mark);
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

/* divergence-A--B.png: parameter distance at checkpoints, one line per trial */
static int report_plot_pair(const char *dir, const struct sweep_spec *s,
                            const struct report_pair *pr, int npr, int k0, FILE *log, char ***w,
                            int *nw)
{
    int ca = pr[k0].ca, cb = pr[k0].cb;
    char name[600], path[4096], title[700];
    snprintf(name, sizeof name, "divergence-%s--%s.png", s->cond[ca].name, s->cond[cb].name);
    snprintf(path, sizeof path, "%s/report/%s", dir, name);
    int nlines = 0;
    for (int k = k0; k < npr && pr[k].ca == ca && pr[k].cb == cb; k++)
        nlines += report_plot_npos(&pr[k]) > 0;
    if (!nlines) {
        if (log)
            fprintf(log, "plot: %s skipped: no positive distance at a shared checkpoint\n", path);
        return DT_OK;
    }
    snprintf(title, sizeof title, "%s vs %s: relative parameter distance", s->cond[ca].name,
             s->cond[cb].name);
    FILE *err, *g = plot_open(path, title, "step", "|pA - pB| / |pA|", &err);
    if (!g)
        return DT_ERR;
    fputs("set logscale y\nset format y '%.0e'\n", g);
    for (int j = 0; j < DIFF_NTHRESH; j++)
        fprintf(g, "set arrow from graph 0, first %g to graph 1, first %g nohead dt 3 lc 0\n",
                diff_thresholds[j], diff_thresholds[j]);
    fputs("plot ", g);
    int first = 1;
    for (int k = k0; k < npr && pr[k].ca == ca && pr[k].cb == cb; k++) {
        if (!report_plot_npos(&pr[k]))
            continue;
        fprintf(g, "%s'-' with linespoints pt 7 ps 0.6 lc %d title 't%02d'", first ? "" : ", ",
                pr[k].t % 8 + 1, pr[k].t);
        first = 0;
    }
    fputc('\n', g);
    for (int k = k0; k < npr && pr[k].ca == ca && pr[k].cb == cb; k++) {
        if (!report_plot_npos(&pr[k]))
            continue;
        for (int i = 0; i < pr[k].npoints; i++)
            if (pr[k].points[i].dist > 0 && isfinite(pr[k].points[i].dist))
                fprintf(g, "%" PRIu64 " %.9g\n", pr[k].points[i].step, pr[k].points[i].dist);
        fputs("e\n", g);
    }
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
