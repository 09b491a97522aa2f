/* report_stats.c: the tests of `divtrace report`: which trials are one run
 * (bitwise identical loss curves), which stopped learning, the per-condition
 * statistics, and per compare line and metric the two-sample tests, the
 * tests paired by seed and Holm's correction, with their Markdown, CSV and
 * JSON forms (see report.h and divtrace-report(1)). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "report.h"
#include "util.h"

const char *report_metric_name(enum sweep_metric m)
{
    static const char *const names[] = {"final", "escape", "phases"};
    return names[m];
}

/* The metric of a trial, NaN when the trial has none (no summary, no escape). */
static double report_metric(const struct report_trial *t, enum sweep_metric m)
{
    if (t->src == REPORT_SRC_NONE)
        return NAN;
    switch (m) {
    case SWEEP_METRIC_FINAL: return t->mean50;
    case SWEEP_METRIC_ESCAPE: return t->first_escape >= 0 ? (double)t->first_escape : NAN;
    case SWEEP_METRIC_PHASES: return t->phases;
    }
    return NAN;
}

/* The --seed of trial t of condition c (the last one given; record's
 * default 1 when none). */
static void report_trial_seed(const struct sweep_spec *s, const struct sweep_cond *c, int t,
                              char *out, size_t n)
{
    char **args = sweep_trial_args(s, c, t);
    snprintf(out, n, "1");
    for (int i = 0; args && args[i]; i++) {
        if (strcmp(args[i], "--seed") == 0 && args[i + 1])
            snprintf(out, n, "%s", args[++i]);
        else if (strncmp(args[i], "--seed=", 7) == 0)
            snprintf(out, n, "%s", args[i] + 7);
    }
    sweep_args_free(args);
}

/* FNV-1a of the curve's bytes: a cheap first look before memcmp */
static uint64_t report_curve_hash(const double *x, size_t n)
{
    const unsigned char *b = (const unsigned char *)x;
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < n * sizeof *x; i++)
        h = (h ^ b[i]) * 1099511628211u;
    return h;
}

/* Each trial's run (the first trial with a bitwise identical loss curve),
 * seed, initial loss and stall. A trial without a curve is its own run. */
static void report_runs(struct report_study *st)
{
    double **loss = dt_calloc((size_t)st->ntr + 1, sizeof *loss);
    size_t *len = dt_calloc((size_t)st->ntr + 1, sizeof *len);
    uint64_t *hash = dt_calloc((size_t)st->ntr + 1, sizeof *hash);
    for (int k = 0; k < st->ntr; k++) {
        struct report_trial *t = &st->tr[k];
        const struct sweep_cond *c = &st->spec.cond[t->ci];
        report_trial_seed(&st->spec, c, t->t, t->seed, sizeof t->seed);
        t->run = k;
        t->initial_loss = NAN;
        double *step = NULL;
        if (t->src == REPORT_SRC_NONE ||
            report_curve_load(st->o->dir, &st->spec, t, &step, &loss[k], &len[k]) < 0 ||
            len[k] == 0) {
            free(step);
            len[k] = 0;
            continue;
        }
        free(step);
        t->initial_loss = loss[k][0];
        t->stalled = isfinite(t->initial_loss) && isfinite(t->mean50) &&
                     !(t->mean50 < REPORT_STALL_FRAC * t->initial_loss);
        hash[k] = report_curve_hash(loss[k], len[k]);
        for (int j = 0; j < k; j++)
            if (len[j] == len[k] && hash[j] == hash[k] &&
                memcmp(loss[j], loss[k], len[k] * sizeof **loss) == 0) {
                t->run = st->tr[j].run;
                break;
            }
    }
    for (int k = 0; k < st->ntr; k++)
        free(loss[k]);
    free(loss);
    free(len);
    free(hash);
}

/* The trials (indices) of the conditions sel picks that have metric m and,
 * with learning, did not stop learning. */
static int *report_pick(const struct report_study *st, const char *sel, enum sweep_metric m,
                        int learning, size_t *n)
{
    int *x = dt_malloc(((size_t)st->ntr + 1) * sizeof *x);
    *n = 0;
    for (int k = 0; k < st->ntr; k++)
        if (sweep_cond_matches(&st->spec.cond[st->tr[k].ci], sel) &&
            isfinite(report_metric(&st->tr[k], m)) && !(learning && st->tr[k].stalled))
            x[(*n)++] = k;
    return x;
}

/* The values of the picked trials, one per independent run. */
static double *report_values(const struct report_study *st, const int *pick, size_t n,
                             enum sweep_metric m, size_t *nv)
{
    double *v = dt_malloc((n + 1) * sizeof *v);
    int *runs = dt_malloc((n + 1) * sizeof *runs);
    *nv = 0;
    for (size_t i = 0; i < n; i++) {
        const struct report_trial *t = &st->tr[pick[i]];
        int seen = 0;
        for (size_t j = 0; j < *nv && !seen; j++)
            seen = runs[j] == t->run;
        if (seen)
            continue;
        runs[*nv] = t->run;
        v[(*nv)++] = report_metric(t, m);
    }
    free(runs);
    return v;
}

/* Pairs A trial with B trial of the same seed (in trial order, each trial
 * used once), one per independent pair of runs; the values into x, y. */
static size_t report_paired(const struct report_study *st, const int *a, size_t na, const int *b,
                            size_t nb, enum sweep_metric m, double *x, double *y,
                            size_t *ntrials)
{
    char *used = dt_calloc(nb + 1, 1);
    int (*runs)[2] = dt_malloc((na + 1) * sizeof *runs);
    size_t np = 0;
    *ntrials = 0;
    for (size_t i = 0; i < na; i++) {
        const struct report_trial *ta = &st->tr[a[i]];
        for (size_t j = 0; j < nb; j++) {
            const struct report_trial *tb = &st->tr[b[j]];
            if (used[j] || b[j] == a[i] || strcmp(ta->seed, tb->seed) != 0)
                continue;
            used[j] = 1;
            (*ntrials)++;
            int seen = 0;
            for (size_t q = 0; q < np && !seen; q++)
                seen = runs[q][0] == ta->run && runs[q][1] == tb->run;
            if (!seen) {
                runs[np][0] = ta->run;
                runs[np][1] = tb->run;
                x[np] = report_metric(ta, m);
                y[np++] = report_metric(tb, m);
            }
            break;
        }
    }
    free(used);
    free(runs);
    return np;
}

static void report_test_compute(const struct report_study *st, struct report_test *t)
{
    size_t na, nb, n1, n2;
    const struct sweep_compare *c = t->c;
    int *a = report_pick(st, c->sel[0], t->metric, t->learning, &na);
    int *b = report_pick(st, c->sel[1], t->metric, t->learning, &nb);
    t->trials[0] = na;
    t->trials[1] = nb;
    double *x = report_values(st, a, na, t->metric, &n1);
    double *y = report_values(st, b, nb, t->metric, &n2);
    stattest_welch(x, n1, y, n2, &t->w);
    stattest_mann_whitney(x, n1, y, n2, &t->m);
    free(x);
    free(y);
    x = dt_malloc((na + 1) * sizeof *x);
    y = dt_malloc((na + 1) * sizeof *y);
    size_t np = report_paired(st, a, na, b, nb, t->metric, x, y, &t->pair_trials);
    stattest_paired_t(x, y, np, &t->pt);
    stattest_wilcoxon(x, y, np, &t->wx);
    free(x);
    free(y);
    free(a);
    free(b);
}

/* Holm over every p-value of one family (the tests on all trials, or those
 * without the trials that stopped learning). */
static void report_holm(struct report_test *t, int n)
{
    double *p = dt_malloc(((size_t)n * 4 + 1) * sizeof *p);
    for (int k = 0; k < n; k++) {
        p[4 * k] = t[k].w.p;
        p[4 * k + 1] = t[k].m.p;
        p[4 * k + 2] = t[k].pt.p;
        p[4 * k + 3] = t[k].wx.p;
    }
    stattest_holm(p, (size_t)n * 4, p);
    for (int k = 0; k < n; k++)
        memcpy(t[k].holm, p + 4 * k, sizeof t[k].holm);
    free(p);
}

void report_stats_compute(struct report_study *st)
{
    const struct sweep_spec *s = &st->spec;
    report_runs(st);
    st->cs = dt_calloc((size_t)s->ncond + 1, sizeof *st->cs);
    for (int ci = 0; ci < s->ncond; ci++) {
        struct report_cstat *c = &st->cs[ci];
        int a = st->first[ci], b = st->first[ci + 1];
        double *f = dt_malloc(((size_t)(b - a) + 1) * sizeof *f);
        double *e = dt_malloc(((size_t)(b - a) + 1) * sizeof *e);
        size_t nf = 0, ne = 0;
        c->ntrials = b - a;
        for (int k = a; k < b; k++) {
            const struct report_trial *t = &st->tr[k];
            if (t->src == REPORT_SRC_NONE)
                continue;
            c->nhave++;
            c->nstalled += t->stalled;
            int first = 1;
            for (int j = a; j < k && first; j++)
                first = st->tr[j].src == REPORT_SRC_NONE || st->tr[j].run != t->run;
            c->nruns += first;
            if (isfinite(t->mean50))
                f[nf++] = t->mean50;
            if (t->first_escape >= 0)
                e[ne++] = (double)t->first_escape;
            c->phases[t->phases < REPORT_MAX_PHASES ? (t->phases > 0 ? t->phases : 0)
                                                    : REPORT_MAX_PHASES]++;
        }
        stattest_mean_sd(f, nf, &c->final_mean, &c->final_sd);
        stattest_mean_sd(e, ne, &c->esc_mean, &c->esc_sd);
        c->nesc = (int)ne;
        free(f);
        free(e);
    }
    int half = 0;
    for (int i = 0; i < s->ncompare; i++)
        half += s->compare[i].nmetrics ? s->compare[i].nmetrics : 1;
    st->ntest = 2 * half;
    st->test = dt_calloc((size_t)st->ntest + 1, sizeof *st->test);
    for (int l = 0, k = 0; l < 2; l++)
        for (int i = 0; i < s->ncompare; i++) {
            const struct sweep_compare *c = &s->compare[i];
            int nm = c->nmetrics ? c->nmetrics : 1;
            for (int j = 0; j < nm; j++, k++) {
                struct report_test *t = &st->test[k];
                t->c = c;
                t->metric = c->nmetrics ? c->metric[j] : SWEEP_METRIC_FINAL;
                t->learning = l;
                report_test_compute(st, t);
            }
        }
    report_holm(st->test, half);
    report_holm(st->test + half, half);
}

/* ---- output ---- */

static const char *report_num(char *buf, size_t n, int prec, double v)
{
    if (!isfinite(v))
        snprintf(buf, n, "n/a");
    else
        snprintf(buf, n, "%.*g", prec, v);
    return buf;
}

/* "2", or "1 of 12 trials" when copies were counted once */
static const char *report_count(char *buf, size_t n, size_t runs, size_t trials, const char *what)
{
    if (runs == trials)
        snprintf(buf, n, "%zu", runs);
    else
        snprintf(buf, n, "%zu of %zu %s", runs, trials, what);
    return buf;
}

static const char *report_subset_name(const struct report_test *t)
{
    return t->learning ? "learning" : "all";
}

void report_stats_markdown(const struct report_study *st, FILE *f)
{
    char b1[64], b2[64], b3[64], b4[64], w[320], m[320];
    fputs("\n## Comparisons\n\n", f);
    if (st->ntest == 0) {
        fputs("The sweep file has no compare directive.\n", f);
        return;
    }
    fprintf(f,
            "Two-sided tests, each made twice: on all trials (`all`) and without the trials "
            "that stopped learning (`learning`: the mean loss of the last 50 steps not below "
            "%g of the first step's). n counts independent runs: trials whose loss curves are "
            "bitwise identical are one run (\"1 of 12 trials\"). Holm's correction runs over "
            "every p-value of a table's `all` rows (one family) and of its `learning` rows "
            "(another); the adjusted p is in parentheses.\n\n"
            "Welch's t-test (t, df, p) with Hedges' g; Mann-Whitney U with its p (exact "
            "without ties and up to 50 values, else the normal approximation with tie and "
            "continuity correction) and the rank-biserial correlation r (positive: A tends to "
            "exceed B).\n\n| line | A | B | metric | trials | n A | mean A | n B | mean B | "
            "Welch | Mann-Whitney |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
            REPORT_STALL_FRAC);
    for (int k = 0; k < st->ntest; k++) {
        const struct report_test *t = &st->test[k];
        if (!t->w.ok)
            snprintf(w, sizeof w, "no test: %s", t->w.why);
        else
            snprintf(w, sizeof w, "t = %.3f, df = %.1f, p = %.3g (Holm %.3g), g = %.3f", t->w.t,
                     t->w.df, t->w.p, t->holm[0], t->w.g);
        if (!t->m.ok)
            snprintf(m, sizeof m, "no test: %s", t->m.why);
        else
            snprintf(m, sizeof m, "U = %g, p = %.3g (Holm %.3g, %s), r = %.3f", t->m.u, t->m.p,
                     t->holm[1], t->m.exact ? "exact" : "normal approx.", t->m.r);
        fprintf(f, "| %d | `%s` | `%s` | %s | %s | %s | %s | %s | %s | %s | %s |\n", t->c->line,
                t->c->sel[0], t->c->sel[1], report_metric_name(t->metric), report_subset_name(t),
                report_count(b1, sizeof b1, t->w.n1, t->trials[0], "trials"),
                report_num(b3, sizeof b3, 6, t->w.mean1),
                report_count(b2, sizeof b2, t->w.n2, t->trials[1], "trials"),
                report_num(b4, sizeof b4, 6, t->w.mean2), w, m);
    }
    fputs("\n### Paired by seed\n\nTrial pairs of A and B recorded with the same `--seed`, "
          "counted once per distinct pair of runs; differences A - B. The paired t-test with "
          "the 95% confidence interval of the mean difference and Hedges' g_z; the Wilcoxon "
          "signed-rank test (zero differences dropped; exact without zeros or ties and up to 50 "
          "pairs, else the normal approximation) with W+ and the rank-biserial r, and the median "
          "difference with its sign-test interval (at least 95%, from 6 pairs).\n\n"
          "| line | A | B | metric | trials | pairs | mean A - B [95% CI] | paired t | "
          "median A - B [CI] | Wilcoxon |\n|---|---|---|---|---|---|---|---|---|---|\n", f);
    for (int k = 0; k < st->ntest; k++) {
        const struct report_test *t = &st->test[k];
        char mean[256], med[256];
        snprintf(mean, sizeof mean, "%s [%s, %s]", report_num(b1, sizeof b1, 6, t->pt.mean),
                 report_num(b2, sizeof b2, 6, t->pt.lo), report_num(b3, sizeof b3, 6, t->pt.hi));
        snprintf(med, sizeof med, "%s [%s, %s]", report_num(b1, sizeof b1, 6, t->wx.median),
                 report_num(b2, sizeof b2, 6, t->wx.lo), report_num(b3, sizeof b3, 6, t->wx.hi));
        if (!t->pt.ok)
            snprintf(w, sizeof w, "no test: %s", t->pt.why);
        else
            snprintf(w, sizeof w, "t = %.3f, df = %.0f, p = %.3g (Holm %.3g), g = %.3f",
                     t->pt.t, t->pt.df, t->pt.p, t->holm[2], t->pt.g);
        if (!t->wx.ok)
            snprintf(m, sizeof m, "no test: %s", t->wx.why);
        else
            snprintf(m, sizeof m, "W+ = %g, p = %.3g (Holm %.3g, %s), r = %.3f", t->wx.w, t->wx.p,
                     t->holm[3], t->wx.exact ? "exact" : "normal approx.", t->wx.r);
        fprintf(f, "| %d | `%s` | `%s` | %s | %s | %s | %s | %s | %s | %s |\n", t->c->line,
                t->c->sel[0], t->c->sel[1], report_metric_name(t->metric), report_subset_name(t),
                report_count(b4, sizeof b4, t->pt.n, t->pair_trials, "trial pairs"), mean, w, med,
                m);
    }
}

/* a number (empty when not finite) and a separator */
static void report_csv_g(FILE *f, double v, const char *sep)
{
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    fputs(sep, f);
}

static void report_csv_nums(FILE *f, const double *v, size_t n)
{
    for (size_t j = 0; j < n; j++)
        report_csv_g(f, v[j], ",");
}

void report_stats_csv(FILE *f, const struct report_study *st)
{
    fputs("line,sel_a,sel_b,metric,trials,n_a,trials_a,mean_a,sd_a,n_b,trials_b,mean_b,sd_b,"
          "welch_t,welch_df,welch_p,welch_p_holm,cohen_d,hedges_g,welch_note,mwu_u,mwu_p,"
          "mwu_p_holm,mwu_method,rank_biserial,mwu_note,pairs,pair_trials,mean_diff,"
          "mean_diff_lo,mean_diff_hi,paired_t,paired_df,paired_p,paired_p_holm,paired_g,"
          "paired_note,median_diff,median_diff_lo,median_diff_hi,median_diff_conf,wilcoxon_w,"
          "wilcoxon_n,wilcoxon_p,wilcoxon_p_holm,wilcoxon_method,wilcoxon_r,wilcoxon_note\n", f);
    for (int k = 0; k < st->ntest; k++) {
        const struct report_test *t = &st->test[k];
        fprintf(f, "%d,", t->c->line);
        report_csv_field(f, t->c->sel[0]);
        fputc(',', f);
        report_csv_field(f, t->c->sel[1]);
        fprintf(f, ",%s,%s,%zu,%zu,", report_metric_name(t->metric), report_subset_name(t),
                t->w.n1, t->trials[0]);
        report_csv_g(f, t->w.mean1, ",");
        report_csv_g(f, t->w.sd1, ",");
        fprintf(f, "%zu,%zu,", t->w.n2, t->trials[1]);
        const double wv[] = {t->w.mean2, t->w.sd2, t->w.t, t->w.df, t->w.p, t->holm[0], t->w.d,
                             t->w.g};
        report_csv_nums(f, wv, sizeof wv / sizeof wv[0]);
        report_csv_field(f, t->w.why);
        fputc(',', f);
        const double mv[] = {t->m.u, t->m.p, t->holm[1]};
        report_csv_nums(f, mv, 3);
        fprintf(f, "%s,", !t->m.ok ? "" : t->m.exact ? "exact" : "normal");
        report_csv_g(f, t->m.r, ",");
        report_csv_field(f, t->m.why);
        fprintf(f, ",%zu,%zu,", t->pt.n, t->pair_trials);
        const double pv[] = {t->pt.mean, t->pt.lo, t->pt.hi, t->pt.t, t->pt.df, t->pt.p,
                             t->holm[2], t->pt.g};
        report_csv_nums(f, pv, sizeof pv / sizeof pv[0]);
        report_csv_field(f, t->pt.why);
        fputc(',', f);
        const double xv[] = {t->wx.median, t->wx.lo, t->wx.hi, t->wx.conf, t->wx.w};
        report_csv_nums(f, xv, sizeof xv / sizeof xv[0]);
        fprintf(f, "%zu,", t->wx.nz);
        report_csv_g(f, t->wx.p, ",");
        report_csv_g(f, t->holm[3], ",");
        fprintf(f, "%s,", !t->wx.ok ? "" : t->wx.exact ? "exact" : "normal");
        report_csv_g(f, t->wx.r, ",");
        report_csv_field(f, t->wx.why);
        fputc('\n', f);
    }
}

/* ", \"key\": value" for each of n keys and numbers */
static void report_json_nums(FILE *f, const char *const *key, const double *v, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        fprintf(f, "%s\"%s\": ", j ? ", " : "", key[j]);
        json_put_num(f, v[j]);
    }
}

void report_stats_json(const struct report_study *st, FILE *f)
{
    for (int k = 0; k < st->ntest; k++) {
        const struct report_test *t = &st->test[k];
        fprintf(f, "%s\n  {\"line\": %d, \"a\": ", k ? "," : "", t->c->line);
        json_put_str(f, t->c->sel[0]);
        fputs(", \"b\": ", f);
        json_put_str(f, t->c->sel[1]);
        fprintf(f, ", \"metric\": \"%s\", \"trials\": \"%s\", \"n_a\": %zu, \"n_b\": %zu, "
                   "\"trials_a\": %zu, \"trials_b\": %zu, ",
                report_metric_name(t->metric), report_subset_name(t), t->w.n1, t->w.n2,
                t->trials[0], t->trials[1]);
        static const char *const sk[] = {"mean_a", "mean_b", "sd_a", "sd_b"};
        const double sv[] = {t->w.mean1, t->w.mean2, t->w.sd1, t->w.sd2};
        report_json_nums(f, sk, sv, 4);
        static const char *const wk[] = {"t", "df", "p", "p_holm", "cohen_d", "hedges_g"};
        const double wv[] = {t->w.t, t->w.df, t->w.p, t->holm[0], t->w.d, t->w.g};
        fputs(",\n   \"welch\": {", f);
        report_json_nums(f, wk, wv, 6);
        fputs(", \"note\": ", f);
        json_put_str(f, t->w.why);
        static const char *const mk[] = {"u", "p", "p_holm", "rank_biserial"};
        const double mv[] = {t->m.u, t->m.p, t->holm[1], t->m.r};
        fputs("},\n   \"mann_whitney\": {", f);
        report_json_nums(f, mk, mv, 4);
        fprintf(f, ", \"method\": \"%s\", \"note\": ", !t->m.ok ? "" : t->m.exact ? "exact" : "normal");
        json_put_str(f, t->m.why);
        static const char *const pk[] = {"mean_diff", "mean_diff_lo", "mean_diff_hi", "t", "df",
                                         "p", "p_holm", "hedges_g"};
        const double pv[] = {t->pt.mean, t->pt.lo, t->pt.hi, t->pt.t, t->pt.df, t->pt.p,
                             t->holm[2], t->pt.g};
        fprintf(f, "},\n   \"paired_t\": {\"pairs\": %zu, \"pair_trials\": %zu, ", t->pt.n,
                t->pair_trials);
        report_json_nums(f, pk, pv, 8);
        fputs(", \"note\": ", f);
        json_put_str(f, t->pt.why);
        static const char *const xk[] = {"median_diff", "median_diff_lo", "median_diff_hi",
                                         "median_diff_conf", "w_plus", "p", "p_holm",
                                         "rank_biserial"};
        const double xv[] = {t->wx.median, t->wx.lo, t->wx.hi, t->wx.conf, t->wx.w, t->wx.p,
                             t->holm[3], t->wx.r};
        fprintf(f, "},\n   \"wilcoxon\": {\"n\": %zu, ", t->wx.nz);
        report_json_nums(f, xk, xv, 8);
        fprintf(f, ", \"method\": \"%s\", \"note\": ", !t->wx.ok ? "" : t->wx.exact ? "exact" : "normal");
        json_put_str(f, t->wx.why);
        fputs("}}", f);
    }
}
