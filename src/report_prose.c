/* report_prose.c: the paragraph that opens report.md: the question and the
 * design as the sweep file's opening comment states them, what was run,
 * and the answer of each compare line (the difference of the means with
 * its 95% interval, the test and its Holm-adjusted p) and of each pair
 * line (explain's verdicts), all from the numbers the tables hold. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "stattest.h"
#include "util.h"

/* The sweep file's opening comment block, "# " stripped, lines joined. */
static char *report_spec_comment(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/sweep.spec", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *line = NULL, *out = NULL;
    size_t cap = 0, len = 0;
    while (getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] != '#')
            break;
        const char *t = line + 1 + (line[1] == ' ');
        size_t n = strlen(t);
        out = dt_realloc(out, len + n + 2);
        if (len && n)
            out[len++] = ' ';
        memcpy(out + len, t, n + 1);
        len += n;
    }
    free(line);
    fclose(f);
    return out;
}

static const char *report_p(char *buf, size_t n, double p)
{
    if (p < 1e-4)
        snprintf(buf, n, "< 0.0001");
    else
        snprintf(buf, n, "%.2g", p);
    return buf;
}

/* One sentence for one test: the difference of the means A - B with its
 * 95% interval, paired by seed where the trials pair up, else Welch's. */
static void report_answer(const struct report_test *t, FILE *f)
{
    char p1[32], p2[32];
    static const char *const what_of[] = {"final loss", "first escape step", "number of phases"};
    const char *what = what_of[t->metric];
    fprintf(f, "- `%s` against `%s`, %s: ", t->c->sel[0], t->c->sel[1], what);
    double d, lo, hi, p, holm;
    const char *how;
    char howbuf[128];
    if (!t->pt.ok && t->pt.why && strstr(t->pt.why, "every difference zero")) {
        fprintf(f, "the same in every one of the %zu pairs of runs with one seed (A - B = 0 in "
                   "each).\n", t->pt.n);
        return;
    }
    if (t->pt.ok) {
        d = t->pt.mean, lo = t->pt.lo, hi = t->pt.hi, p = t->pt.p, holm = t->holm[2];
        snprintf(howbuf, sizeof howbuf, "paired by seed, %zu pairs of independent runs", t->pt.n);
        how = howbuf;
    } else if (t->w.ok) {
        double se = sqrt(t->w.sd1 * t->w.sd1 / (double)t->w.n1 + t->w.sd2 * t->w.sd2 / (double)t->w.n2);
        double q = stattest_t_quantile(0.975, t->w.df);
        d = t->w.mean1 - t->w.mean2, lo = d - q * se, hi = d + q * se, p = t->w.p, holm = t->holm[0];
        snprintf(howbuf, sizeof howbuf, "Welch, %zu and %zu independent runs", t->w.n1, t->w.n2);
        how = howbuf;
    } else {
        fprintf(f, "no test (%s; paired: %s).\n", t->w.why, t->pt.ok ? "made" : t->pt.why);
        return;
    }
    double mb = t->w.mean2; /* B's mean, over its runs */
    fprintf(f, "A - B = %.3g (95%% CI %.3g to %.3g; %s; p = %s, Holm %s", d, lo, hi, how,
            report_p(p1, sizeof p1, p), report_p(p2, sizeof p2, holm));
    if (isfinite(mb) && mb != 0 && t->metric == SWEEP_METRIC_FINAL)
        fprintf(f, "; %.2g of B's mean", fabs(d / mb));
    fputs("). ", f);
    if (lo <= 0 && hi >= 0)
        fputs("The interval holds zero: no difference shown at this number of runs.\n", f);
    else if (holm >= 0.05)
        fputs("The interval excludes zero, but not after Holm's correction over the family.\n", f);
    else
        fprintf(f, "A is %s than B, beyond the family's correction.\n", d < 0 ? "lower" : "higher");
}

/* explain's verdicts of one pair of conditions: "12 rounding only, 1 bug" */
static void report_verdicts(const struct report_study *st, int k0, FILE *f)
{
    static const char *const kinds[] = {"identical", "rounding only", "bug", "no verdict",
                                        "skipped", "failed", "not run", "missing"};
    int nk = (int)(sizeof kinds / sizeof *kinds), count[8] = {0}, other = 0, n = 0;
    const struct report_pair *p0 = &st->pr[k0];
    const char *bugline = NULL;
    /* "rounding only" verdicts that left ops of a nondeterministic run
     * unchecked (the verdict line's "; not checked: N ops" clauses) */
    int partial = 0;
    long umin = 0, umax = 0;
    for (int k = k0; k < st->npr && st->pr[k].ca == p0->ca && st->pr[k].cb == p0->cb; k++, n++) {
        int j = 0;
        while (j < nk && strcmp(st->pr[k].verdict, kinds[j]) != 0)
            j++;
        if (j < nk)
            count[j]++;
        else
            other++;
        if (j == 2 && !bugline)
            bugline = st->pr[k].verdict_line;
        long un = 0;
        for (const char *q = st->pr[k].verdict_line; j == 1 && (q = strstr(q, "; not checked: "));) {
            q += strlen("; not checked: ");
            un += strtol(q, NULL, 10);
        }
        if (un > 0) {
            umin = partial && umin < un ? umin : un;
            umax = partial && umax > un ? umax : un;
            partial++;
        }
    }
    fprintf(f, "- `%s` against `%s`, trial by trial (%d pairs), `divtrace explain`:",
            st->spec.cond[p0->ca].name, st->spec.cond[p0->cb].name, n);
    int first = 1;
    for (int j = 0; j < nk; j++)
        if (count[j]) {
            fprintf(f, "%s %d %s", first ? "" : ",", count[j], kinds[j]);
            first = 0;
        }
    if (other)
        fprintf(f, "%s %d other", first ? "" : ",", other);
    if (partial && umin == umax)
        fprintf(f, " (in %d of the rounding verdicts, %ld ops of a nondeterministic run's step "
                "were not checked: their recorded inputs are not what re-execution gives)",
                partial, umin);
    else if (partial)
        fprintf(f, " (in %d of the rounding verdicts, %ld to %ld ops of a nondeterministic run's "
                "step were not checked: their recorded inputs are not what re-execution gives)",
                partial, umin, umax);
    if (bugline && *bugline)
        fprintf(f, ". The first bug found: \"%s\"", bugline);
    fputs(".\n", f);
}

void report_intro(const struct report_study *st, FILE *f)
{
    const struct sweep_spec *s = &st->spec;
    char *about = report_spec_comment(st->o->dir);
    if (about && *about)
        fprintf(f, "**Question and design** (from the sweep file). %s\n\n", about);
    free(about);
    fprintf(f, "**Run.** %d conditions, %d trials in all:", s->ncond, st->ntr);
    for (int ci = 0; ci < s->ncond; ci++)
        fprintf(f, "%s `%s` (%d of %d trials summarized, %d independent run%s)", ci ? "," : "",
                s->cond[ci].name, st->cs[ci].nhave, st->cs[ci].ntrials, st->cs[ci].nruns,
                st->cs[ci].nruns == 1 ? "" : "s");
    fputs(". Final loss: the mean loss of the last 50 steps.\n\n", f);
    int nfinal = 0;
    for (int k = 0; k < st->ntest; k++)
        nfinal += !st->test[k].learning;
    if (!nfinal && !st->npr) {
        /* no comparison asked for: each condition's final loss with the 95%
         * interval of its mean and its spread */
        fputs("**Answer** (no compare or pair line: each condition on its own).\n\n", f);
        for (int ci = 0; ci < s->ncond; ci++) {
            /* over independent runs: the first trial of each */
            double *v = dt_malloc(((size_t)st->ntr + 1) * sizeof *v), mean, sd;
            size_t n = 0;
            for (int k = st->first[ci]; k < st->first[ci + 1]; k++)
                if (st->tr[k].src != REPORT_SRC_NONE && st->tr[k].run == k &&
                    isfinite(st->tr[k].mean50))
                    v[n++] = st->tr[k].mean50;
            stattest_mean_sd(v, n, &mean, &sd);
            free(v);
            fprintf(f, "- `%s`: final loss %.6g", s->cond[ci].name, mean);
            if (n > 1 && isfinite(sd)) {
                double h = stattest_t_quantile(0.975, (double)(n - 1)) * sd / sqrt((double)n);
                fprintf(f, " (95%% CI %.6g to %.6g), sd %.3g over %zu independent runs", mean - h,
                        mean + h, sd, n);
            } else {
                fprintf(f, " (%zu independent run%s)", n, n == 1 ? "" : "s");
            }
            fputs(".\n", f);
        }
    }
    if (nfinal || st->npr) {
        fputs("**Answer.**\n\n", f);
        for (int k = 0; k < st->ntest; k++)
            if (!st->test[k].learning)
                report_answer(&st->test[k], f);
        for (int k = 0; k < st->npr; k++)
            if (k == 0 || st->pr[k].ca != st->pr[k - 1].ca || st->pr[k].cb != st->pr[k - 1].cb)
                report_verdicts(st, k, f);
        fputs("\nThe tables below give every test, with and without the trials that stopped "
              "learning.\n", f);
    }
}
