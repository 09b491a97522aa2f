/* report.c: `divtrace report DIR`: per-condition statistics of a study's
 * trials, the tests its compare directives ask for (report_stats.c), its
 * run pairs, the machines, written as DIR/report.md, the CSV tables and PNG
 * plots of DIR/report/, or as one JSON object. Everything is computed from the summaries (report.h), so
 * a directory that holds only summaries gives the same report. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "escape.h"
#include "json.h"
#include "oracle.h"

#include "report.h"
#include "util.h"

/* ---- text helpers ---- */

/* v with prec significant digits (fixed with one decimal when prec is 0) */
static const char *report_g(char *buf, size_t n, int prec, double v)
{
    if (!isfinite(v))
        snprintf(buf, n, "n/a");
    else if (prec == 0)
        snprintf(buf, n, "%.1f", v);
    else
        snprintf(buf, n, "%.*g", prec, v);
    return buf;
}

static const char *report_i64(char *buf, size_t n, int64_t v)
{
    if (v < 0)
        snprintf(buf, n, "none");
    else
        snprintf(buf, n, "%" PRId64, v);
    return buf;
}

/* "biphasic 9 (75%), triphasic 3 (25%)" */
static void report_phase_text(char *buf, size_t n, const struct report_cstat *c)
{
    buf[0] = 0;
    for (int p = 0; p <= REPORT_MAX_PHASES; p++) {
        if (!c->phases[p])
            continue;
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s%s %d (%.0f%%)", len ? ", " : "",
                 p == REPORT_MAX_PHASES ? "8+ phases" : escape_phase_name(p), "", c->phases[p],
                 100.0 * c->phases[p] / c->nhave);
    }
    if (!buf[0])
        snprintf(buf, n, "n/a");
}

/* The machines: distinct (host_cpu, device, cuda_driver, cudnn,
 * openblas_config) over the trials, with the conditions that ran on each. */
enum { M_HOST = 5, M_CPU = 6, M_DEV = 7, M_DRV = 8, M_DNN = 9, M_BLAS = 10 };
static const int report_mach_keys[] = {M_HOST, M_CPU, M_DEV, M_DRV, M_DNN, M_BLAS};
#define REPORT_NMACH 6

static int report_same_machine(const struct report_trial *a, const struct report_trial *b)
{
    for (int k = 0; k < REPORT_NMACH; k++)
        if (strcmp(a->meta[report_mach_keys[k]], b->meta[report_mach_keys[k]]) != 0)
            return 0;
    return 1;
}

/* Indices of the first trial of each distinct machine; *n of them. */
static int *report_machines(const struct report_study *st, int *n)
{
    int *m = dt_malloc(((size_t)st->ntr + 1) * sizeof *m);
    *n = 0;
    for (int k = 0; k < st->ntr; k++) {
        if (st->tr[k].src == REPORT_SRC_NONE)
            continue;
        int seen = 0;
        for (int j = 0; j < *n && !seen; j++)
            seen = report_same_machine(&st->tr[m[j]], &st->tr[k]);
        if (!seen)
            m[(*n)++] = k;
    }
    return m;
}

static void report_machine_conds(char *buf, size_t n, const struct report_study *st, int k)
{
    buf[0] = 0;
    for (int ci = 0; ci < st->spec.ncond; ci++)
        for (int j = st->first[ci]; j < st->first[ci + 1]; j++)
            if (st->tr[j].src != REPORT_SRC_NONE && report_same_machine(&st->tr[j], &st->tr[k])) {
                size_t len = strlen(buf);
                snprintf(buf + len, n - len, "%s%s", len ? " " : "", st->spec.cond[ci].name);
                break;
            }
}

static const char *report_or(const char *s, const char *dflt)
{
    return s && *s ? s : dflt;
}

static void report_replay_text(char *buf, size_t n, const struct report_replay *r)
{
    if (strcmp(r->status, "ok") != 0)
        snprintf(buf, n, "%s", r->status);
    else if (r->semantic)
        snprintf(buf, n, "%" PRIu64 " exact, %" PRIu64 " rounding, %" PRIu64 " SEMANTIC (%s)",
                 r->exact, r->rounding, r->semantic, r->semantic_ops);
    else
        snprintf(buf, n, "%" PRIu64 " exact, %" PRIu64 " rounding, 0 SEMANTIC", r->exact,
                 r->rounding);
}

/* ---- markdown ---- */

static void report_markdown(const struct report_study *st, FILE *f, const char *plotdir)
{
    const struct sweep_spec *s = &st->spec;
    char b1[64], b2[64], b3[64], b4[64], big[2048];
    fprintf(f, "# Study %s\n\n", report_or(s->name, "(unnamed)"));
    report_intro(st, f);
    fputs("\nEscapes and phases: `divtrace escape` with its default parameters.\n\n", f);
    fprintf(f, "## Conditions\n\nRuns: independent runs (trials whose loss curves are "
               "bitwise identical count once). Stopped learning: the mean loss of the last 50 "
               "steps not below %g of the first step's loss.\n\n| condition | group | trials | "
               "runs | stopped learning | final loss, mean | sd | first escape, mean | sd | with "
               "an escape | phases |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
            REPORT_STALL_FRAC);
    for (int ci = 0; ci < s->ncond; ci++) {
        const struct report_cstat *c = &st->cs[ci];
        report_phase_text(big, sizeof big, c);
        fprintf(f, "| %s | %s | %d/%d | %d | %d | %s | %s | %s | %s | %d | %s |\n",
                s->cond[ci].name, s->cond[ci].group, c->nhave, c->ntrials, c->nruns, c->nstalled,
                report_g(b1, sizeof b1, 6, c->final_mean),
                report_g(b2, sizeof b2, 3, c->final_sd),
                report_g(b3, sizeof b3, 0, c->esc_mean),
                report_g(b4, sizeof b4, 0, c->esc_sd), c->nesc, big);
    }
    fputs("\nTrials that stopped learning:", f);
    int nst = 0;
    for (int k = 0; k < st->ntr; k++)
        if (st->tr[k].stalled)
            fprintf(f, "%s %s/t%02d", nst++ ? "," : "", s->cond[st->tr[k].ci].name, st->tr[k].t);
    fputs(nst ? ".\n" : " none.\n", f);
    report_stats_markdown(st, f);
    fputs("\n## Pairs\n\n", f);
    if (st->npr == 0)
        fputs("The sweep file has no pair directive.\n", f);
    else
        fputs("Trial t of A against trial t of B: the first divergent step and op, the origin "
              "ops of that step, the steps where the parameter distance first exceeds 1e-6, "
              "1e-3 and 1e-1, the first escapes, and each run's ops at the first divergent step "
              "against the exact oracle (`divtrace replay --against mpfr`), and `divtrace "
              "explain`'s verdict on the pair.\n\n| A | B | trial | "
              "first divergence | first op | origins | 1e-6 | 1e-3 | 1e-1 | escape A | escape B "
              "| B - A | replay A | replay B | verdict |\n|---|---|---|---|---|---|---|---|---|---|"
              "---|---|---|---|---|\n", f);
    for (int k = 0; k < st->npr; k++) {
        const struct report_pair *p = &st->pr[k];
        char c[3][32], e[3][32], ra[400], rb[400];
        for (int j = 0; j < DIFF_NTHRESH; j++)
            report_i64(c[j], sizeof c[j], p->cross[j]);
        report_i64(e[0], sizeof e[0], p->escape[0]);
        report_i64(e[1], sizeof e[1], p->escape[1]);
        if (p->escape[0] >= 0 && p->escape[1] >= 0)
            snprintf(e[2], sizeof e[2], "%" PRId64, p->escape[1] - p->escape[0]);
        else
            snprintf(e[2], sizeof e[2], "n/a");
        report_replay_text(ra, sizeof ra, &p->replay[0]);
        report_replay_text(rb, sizeof rb, &p->replay[1]);
        if (strcmp(p->status, "compared") != 0)
            snprintf(b1, sizeof b1, "%s", p->status);
        else if (!p->diverged)
            snprintf(b1, sizeof b1, "identical");
        else
            snprintf(b1, sizeof b1, "step %" PRIu64, p->first_step);
        fprintf(f, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                s->cond[p->ca].name, s->cond[p->cb].name, p->t, b1, report_or(p->first_op, "-"),
                report_or(p->origins, "-"), c[0], c[1], c[2], e[0], e[1], e[2], ra, rb,
                report_or(p->verdict_line, p->verdict));
    }
    fputs("\n## Machines\n\nFrom the trace headers.\n\n| host | CPU | GPU | CUDA driver | cuDNN | "
          "OpenBLAS | conditions |\n|---|---|---|---|---|---|---|\n", f);
    int nm, *m = report_machines(st, &nm);
    for (int j = 0; j < nm; j++) {
        const struct report_trial *t = &st->tr[m[j]];
        report_machine_conds(big, sizeof big, st, m[j]);
        fprintf(f, "| %s | %s | %s | %s | %s | %s | %s |\n", report_or(t->meta[M_HOST], "-"),
                report_or(t->meta[M_CPU], "-"), report_or(t->meta[M_DEV], "-"),
                report_or(t->meta[M_DRV], "-"), report_or(t->meta[M_DNN], "-"),
                report_or(t->meta[M_BLAS], "-"), big);
    }
    free(m);
    fputs("\n## Plots\n\n", f);
    if (st->nplots == 0)
        fputs("None (gnuplot is not installed, or nothing to plot).\n", f);
    for (int j = 0; j < st->nplots; j++)
        fprintf(f, "![%s](%s/%s)\n\n", st->plots[j], plotdir, st->plots[j]);
    fputs("\n## Commands\n\n```\n", f);
    for (int ci = 0; ci < s->ncond; ci++) {
        fputs("divtrace record", f);
        for (int a = 0; a < s->cond[ci].nargs; a++)
            fprintf(f, " %s", s->cond[ci].args[a]);
        fprintf(f, " -o runs/%s/tNN.dtr    # trials 1..%d\n", s->cond[ci].name,
                s->cond[ci].trials);
    }
    fputs(st->o->argv[0], f); /* "divtrace report" */
    for (int a = 1; a < st->o->argc; a++)
        fprintf(f, " %s", st->o->argv[a]);
    fputs("\n```\n", f);
}

/* ---- the tables of DIR/report/ ---- */

/* a number (empty when not finite) and a separator */
static void report_csv_g(FILE *f, double v, const char *sep)
{
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    fputs(sep, f);
}

static void report_put_conditions(FILE *f, const struct report_study *st)
{
    const struct sweep_spec *s = &st->spec;
    fputs("condition,group,trials,with_summary,runs,stalled,final_mean,final_sd,with_escape,escape_mean,"
          "escape_sd,monophasic,biphasic,triphasic,tetraphasic,pentaphasic,more_phases\n", f);
    for (int ci = 0; ci < s->ncond; ci++) {
        const struct report_cstat *c = &st->cs[ci];
        report_csv_field(f, s->cond[ci].name);
        fputc(',', f);
        report_csv_field(f, s->cond[ci].group);
        fprintf(f, ",%d,%d,%d,%d,", c->ntrials, c->nhave, c->nruns, c->nstalled);
        report_csv_g(f, c->final_mean, ",");
        report_csv_g(f, c->final_sd, ",");
        fprintf(f, "%d,", c->nesc);
        report_csv_g(f, c->esc_mean, ",");
        report_csv_g(f, c->esc_sd, "");
        int more = c->phases[6] + c->phases[7] + c->phases[8];
        fprintf(f, ",%d,%d,%d,%d,%d,%d\n", c->phases[1], c->phases[2], c->phases[3],
                c->phases[4], c->phases[5], more);
    }
}

static void report_put_pairs(FILE *f, const struct report_study *st)
{
    report_pair_header(f);
    for (int k = 0; k < st->npr; k++)
        report_pair_row(f, &st->spec, &st->pr[k]);
}

static void report_put_machines(FILE *f, const struct report_study *st)
{
    fputs("host,host_cpu,device,cuda_driver,cudnn,openblas_config,conditions\n", f);
    int nm, *m = report_machines(st, &nm);
    for (int j = 0; j < nm; j++) {
        char conds[2048];
        for (int i = 0; i < REPORT_NMACH; i++) {
            report_csv_field(f, st->tr[m[j]].meta[report_mach_keys[i]]);
            fputc(',', f);
        }
        report_machine_conds(conds, sizeof conds, st, m[j]);
        report_csv_field(f, conds);
        fputc('\n', f);
    }
    free(m);
}

static void report_put_trials(FILE *f, const struct report_study *st)
{
    report_trial_header(f);
    for (int k = 0; k < st->ntr; k++)
        report_trial_row(f, &st->spec, &st->tr[k]);
}

static void report_put_replays(FILE *f, const struct report_study *st)
{
    fputs("condition,trial,step,status,exact,rounding,semantic,semantic_ops\n", f);
    for (int k = 0; k < st->npr; k++) {
        const struct report_pair *p = &st->pr[k];
        if (!p->diverged)
            continue;
        for (int j = 0; j < 2; j++) {
            report_csv_field(f, st->spec.cond[j ? p->cb : p->ca].name);
            fprintf(f, ",%d,%" PRIu64 ",", p->t, p->first_step);
            report_replay_row(f, &p->replay[j]);
            fputc('\n', f);
        }
    }
}

/* The table dir/name (its directory made if missing), written by put. */
static int report_table(const struct report_study *st, const char *dir, const char *name,
                        void (*put)(FILE *f, const struct report_study *st))
{
    char path[4096];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (report_mkdirs(path) < 0 || !(f = fopen(path, "w")))
        goto bad;
    put(f, st);
    if (fclose(f) != 0)
        goto bad;
    return DT_OK;
bad:
    dt_error_set("cannot write %s: %s", path, strerror(errno));
    return DT_ERR;
}

static int report_tables(const struct report_study *st, const char *dir)
{
    if (report_table(st, dir, "report/conditions.csv", report_put_conditions) < 0 ||
        report_table(st, dir, "report/comparisons.csv", report_stats_csv) < 0 ||
        report_table(st, dir, "report/pairs.csv", report_put_pairs) < 0 ||
        report_table(st, dir, "report/machines.csv", report_put_machines) < 0)
        return DT_ERR;
    return DT_OK;
}

/* summary/trials.csv, pairs.csv and replays.csv: the per-trial files in one table each */
static int report_summary_tables(const struct report_study *st, const char *dir)
{
    if (report_table(st, dir, "summary/trials.csv", report_put_trials) < 0 ||
        report_table(st, dir, "summary/pairs.csv", report_put_pairs) < 0 ||
        report_table(st, dir, "summary/replays.csv", report_put_replays) < 0)
        return DT_ERR;
    return DT_OK;
}

/* ---- JSON ---- */

static void report_json_i64(FILE *f, int64_t v)
{
    if (v >= 0)
        fprintf(f, "%" PRId64, v);
    else
        fputs("null", f);
}

static void report_json(const struct report_study *st, FILE *f)
{
    const struct sweep_spec *s = &st->spec;
    fputs("{\"study\": ", f);
    json_put_str(f, s->name);
    fputs(",\n \"conditions\": [", f);
    for (int ci = 0; ci < s->ncond; ci++) {
        const struct report_cstat *c = &st->cs[ci];
        fprintf(f, "%s\n  {\"condition\": ", ci ? "," : "");
        json_put_str(f, s->cond[ci].name);
        fputs(", \"group\": ", f);
        json_put_str(f, s->cond[ci].group);
        fprintf(f, ", \"trials\": %d, \"with_summary\": %d, \"runs\": %d, \"stalled\": %d, "
                   "\"final_mean\": ", c->ntrials, c->nhave, c->nruns, c->nstalled);
        json_put_num(f, c->final_mean);
        fputs(", \"final_sd\": ", f);
        json_put_num(f, c->final_sd);
        fprintf(f, ", \"with_escape\": %d, \"escape_mean\": ", c->nesc);
        json_put_num(f, c->esc_mean);
        fputs(", \"escape_sd\": ", f);
        json_put_num(f, c->esc_sd);
        fputs(", \"phases\": {", f);
        int any = 0;
        for (int p = 0; p <= REPORT_MAX_PHASES; p++)
            if (c->phases[p]) {
                fprintf(f, "%s\"%d\": %d", any++ ? ", " : "", p, c->phases[p]);
            }
        fputs("}, \"trial_list\": [", f);
        for (int k = st->first[ci]; k < st->first[ci + 1]; k++) {
            const struct report_trial *t = &st->tr[k];
            fprintf(f, "%s{\"trial\": %d, \"status\": \"%s\", \"mean_last50\": ",
                    k > st->first[ci] ? ", " : "", t->t, t->status);
            json_put_num(f, t->mean50);
            fputs(", \"first_escape\": ", f);
            report_json_i64(f, t->first_escape);
            fprintf(f, ", \"phases\": %d, \"seed\": ", t->phases);
            json_put_str(f, t->seed);
            const struct report_trial *r = &st->tr[t->run]; /* the run's first trial */
            fprintf(f, ", \"run\": \"%s/t%02d\", \"stalled\": %s}", s->cond[r->ci].name, r->t,
                    t->stalled ? "true" : "false");
        }
        fputs("]}", f);
    }
    fputs("],\n \"comparisons\": [", f);
    report_stats_json(st, f);
    fputs("],\n \"pairs\": [", f);
    for (int k = 0; k < st->npr; k++) {
        const struct report_pair *p = &st->pr[k];
        fprintf(f, "%s\n  {\"a\": ", k ? "," : "");
        json_put_str(f, s->cond[p->ca].name);
        fputs(", \"b\": ", f);
        json_put_str(f, s->cond[p->cb].name);
        fprintf(f, ", \"trial\": %d, \"status\": \"%s\", \"diverged\": %s, \"first_step\": ",
                p->t, p->status, p->diverged ? "true" : "false");
        report_json_i64(f, p->diverged ? (int64_t)p->first_step : -1);
        fputs(", \"first_op\": ", f);
        json_put_str(f, p->first_op);
        fputs(", \"origins\": ", f);
        json_put_str(f, p->origins);
        fputs(", \"cross\": [", f);
        for (int j = 0; j < DIFF_NTHRESH; j++) {
            fputs(j ? ", " : "", f);
            report_json_i64(f, p->cross[j]);
        }
        fputs("], \"escape_a\": ", f);
        report_json_i64(f, p->escape[0]);
        fputs(", \"escape_b\": ", f);
        report_json_i64(f, p->escape[1]);
        fputs(", \"replay\": [", f);
        for (int j = 0; j < 2; j++) {
            const struct report_replay *r = &p->replay[j];
            fprintf(f, "%s{\"status\": ", j ? ", " : "");
            json_put_str(f, r->status);
            fprintf(f, ", \"exact\": %" PRIu64 ", \"rounding\": %" PRIu64 ", \"semantic\": %" PRIu64
                       ", \"semantic_ops\": ", r->exact, r->rounding, r->semantic);
            json_put_str(f, r->semantic_ops);
            fputc('}', f);
        }
        fputs("], \"verdict\": ", f);
        json_put_str(f, p->verdict);
        fputs(", \"verdict_line\": ", f);
        json_put_str(f, p->verdict_line ? p->verdict_line : "");
        fputs("}", f);
    }
    fputs("],\n \"machines\": [", f);
    int nm, *m = report_machines(st, &nm);
    static const char *const mk[] = {"host", "host_cpu", "device", "cuda_driver", "cudnn",
                                     "openblas_config"};
    for (int j = 0; j < nm; j++) {
        fputs(j ? ",\n  {" : "\n  {", f);
        for (int i = 0; i < REPORT_NMACH; i++) {
            fprintf(f, "%s\"%s\": ", i ? ", " : "", mk[i]);
            json_put_str(f, st->tr[m[j]].meta[report_mach_keys[i]]);
        }
        char conds[2048];
        report_machine_conds(conds, sizeof conds, st, m[j]);
        fputs(", \"conditions\": ", f);
        json_put_str(f, conds);
        fputc('}', f);
    }
    free(m);
    fputs("]}\n", f);
}

/* ---- the whole report ---- */

/* Every pair of the sweep file's pair lines, trial by trial: calls fn for
 * each (ca, cb, t) once, in report order; stops at fn's first nonzero. */
static int report_each_pair(const struct sweep_spec *s, int (*fn)(void *, int, int, int), void *arg)
{
    int *seen = NULL, nseen = 0, rc = 0;
    for (int i = 0; i < s->npair && !rc; i++) {
        int (*pc)[2] = NULL;
        int n = sweep_pair_conditions(s, &s->pair[i], &pc);
        for (int j = 0; j < n && !rc; j++) {
            int ca = pc[j][0], cb = pc[j][1], dup = 0;
            for (int k = 0; k < nseen && !dup; k++)
                dup = seen[2 * k] == ca && seen[2 * k + 1] == cb;
            if (dup)
                continue;
            seen = dt_realloc(seen, (size_t)(nseen + 1) * 2 * sizeof *seen);
            seen[2 * nseen] = ca;
            seen[2 * nseen++ + 1] = cb;
            int nt = s->cond[ca].trials < s->cond[cb].trials ? s->cond[ca].trials
                                                              : s->cond[cb].trials;
            for (int t = 1; t <= nt && !rc; t++)
                rc = fn(arg, ca, cb, t);
        }
        free(pc);
    }
    free(seen);
    return rc;
}

struct report_par {
    const struct report_study *st;
    int job, jobs, k;
};

/* in worker job: compute (and cache) every jobs-th pair */
static int report_par_one(void *arg, int ca, int cb, int t)
{
    struct report_par *w = arg;
    const struct report_options *o = w->st->o;
    if (w->k++ % w->jobs != w->job)
        return 0;
    struct report_pair p;
    int rc = report_pair_load(o->dir, &w->st->spec, ca, cb, t, o->rebuild,
                              o->no_replay || (o->replay_trials > 0 && t > o->replay_trials),
                              o->no_explain, &p);
    report_pair_free(&p);
    return rc < 0;
}

static int report_par_count(void *arg, int ca, int cb, int t)
{
    (void)ca, (void)cb, (void)t;
    ++*(int *)arg;
    return 0;
}

/* -j N: the pairs' summaries (diff, replays, verdict: the slow part) made by
 * N worker processes into the summary cache, which the pass after reads.
 * A worker that fails leaves its pairs to that pass, which says why. */
static int report_pairs_parallel(const struct report_study *st)
{
    int npairs = 0;
    report_each_pair(&st->spec, report_par_count, &npairs);
    int jobs = st->o->jobs < npairs ? st->o->jobs : npairs;
    if (jobs < 2)
        return DT_OK;
    progress_show(st->prog, "%d pairs, %d at a time", npairs, jobs);
    fflush(NULL);
    pid_t *pid = dt_calloc((size_t)jobs, sizeof *pid);
    for (int j = 0; j < jobs; j++) {
        pid[j] = fork();
        if (pid[j] == 0) {
            /* the replays' oracle shares the cores among the workers */
            if (!getenv("DIVTRACE_ORACLE_THREADS")) {
                char nt[16];
                int per = oracle_threads() / jobs;
                snprintf(nt, sizeof nt, "%d", per < 1 ? 1 : per);
                setenv("DIVTRACE_ORACLE_THREADS", nt, 1);
            }
            struct report_par w = {.st = st, .job = j, .jobs = jobs};
            int rc = report_each_pair(&st->spec, report_par_one, &w);
            fflush(NULL);
            _exit(rc ? 1 : 0);
        }
        if (pid[j] < 0) {
            dt_error_set("cannot start a worker: %s", strerror(errno));
            for (int k = 0; k < j; k++)
                waitpid(pid[k], NULL, 0);
            free(pid);
            return DT_ERR;
        }
    }
    for (int j = 0; j < jobs; j++)
        waitpid(pid[j], NULL, 0);
    free(pid);
    return DT_OK;
}

static int report_load(struct report_study *st)
{
    const struct report_options *o = st->o;
    const struct sweep_spec *s = &st->spec;
    st->first = dt_calloc((size_t)s->ncond + 1, sizeof *st->first);
    for (int ci = 0; ci < s->ncond; ci++) {
        st->first[ci] = st->ntr;
        st->ntr += s->cond[ci].trials;
    }
    st->first[s->ncond] = st->ntr;
    st->tr = dt_calloc((size_t)st->ntr + 1, sizeof *st->tr);
    for (int ci = 0, k = 0; ci < s->ncond; ci++)
        for (int t = 1; t <= s->cond[ci].trials; t++, k++) {
            if (report_trial_load(o->dir, s, ci, t, o->rebuild, &st->tr[k]) < 0)
                return DT_ERR;
            if (progress_due(st->prog))
                progress_show(st->prog, "%d/%d trials", k + 1, st->ntr);
        }
    if (o->jobs > 1 && report_pairs_parallel(st) < 0)
        return DT_ERR;
    int cap = 0;
    for (int i = 0; i < s->npair; i++) {
        int (*pc)[2] = NULL;
        int n = sweep_pair_conditions(s, &s->pair[i], &pc);
        for (int j = 0; j < n; j++) {
            int ca = pc[j][0], cb = pc[j][1], dup = 0;
            for (int k = 0; k < st->npr && !dup; k++)
                dup = st->pr[k].ca == ca && st->pr[k].cb == cb;
            if (dup)
                continue;
            int nt = s->cond[ca].trials < s->cond[cb].trials ? s->cond[ca].trials
                                                              : s->cond[cb].trials;
            for (int t = 1; t <= nt; t++) {
                if (st->npr == cap) {
                    cap = cap ? 2 * cap : 16;
                    st->pr = dt_realloc(st->pr, (size_t)cap * sizeof *st->pr);
                }
                struct report_pair *p = &st->pr[st->npr];
                if (report_pair_load(o->dir, s, ca, cb, t, o->rebuild && o->jobs <= 1,
                                     o->no_replay || (o->replay_trials > 0 && t > o->replay_trials),
                                     o->no_explain, p) < 0) {
                    free(pc);
                    return DT_ERR;
                }
                st->npr++;
                p->escape[0] = st->tr[st->first[ca] + t - 1].first_escape;
                p->escape[1] = st->tr[st->first[cb] + t - 1].first_escape;
                if (progress_due(st->prog))
                    progress_show(st->prog, "%d/%d trials, %d pairs", st->ntr, st->ntr, st->npr);
            }
        }
        free(pc);
    }
    progress_clear(st->prog);
    return DT_OK;
}

static void report_study_free(struct report_study *st)
{
    for (int k = 0; k < st->ntr; k++)
        report_trial_free(&st->tr[k]);
    for (int k = 0; k < st->npr; k++)
        report_pair_free(&st->pr[k]);
    for (int k = 0; k < st->nplots; k++)
        free(st->plots[k]);
    free(st->plots);
    free(st->tr);
    free(st->pr);
    free(st->first);
    free(st->cs);
    free(st->test);
    sweep_spec_free(&st->spec);
}

int report_run(const struct report_options *o)
{
    struct stat sb;
    if (stat(o->dir, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
        dt_error_set("%s: not a directory", o->dir);
        return DT_ERR;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/sweep.spec", o->dir);
    if (access(path, R_OK) < 0) {
        dt_error_set("%s: no sweep.spec (not a study directory made by divtrace sweep?)", o->dir);
        return DT_ERR;
    }
    struct report_study st;
    memset(&st, 0, sizeof st);
    st.o = o;
    struct progress prog;
    progress_init(&prog, progress_mode_pick(o->quiet, o->progress), "divtrace report");
    st.prog = &prog;
    if (sweep_spec_load(&st.spec, path) < 0)
        return DT_ERR;
    int rc = DT_ERR;
    if (report_load(&st) < 0 || report_summary_tables(&st, o->dir) < 0)
        goto out;
    report_stats_compute(&st);
    /* the text on stdout: the plots, then the report (--json: the tables) */
    FILE *log = o->quiet || o->json ? NULL : stdout;
    if (report_plot_all(o->dir, &st.spec, st.tr, st.ntr, st.pr, st.npr, log, &st.plots,
                        &st.nplots) < 0)
        goto out;
    if (report_tables(&st, o->dir) < 0)
        goto out;
    char md[4096], plotdir[4096];
    snprintf(md, sizeof md, "%s/report.md", o->dir);
    if (o->output)
        snprintf(plotdir, sizeof plotdir, "%s/report", o->dir);
    else
        snprintf(plotdir, sizeof plotdir, "report");
    const char *mdpath = o->output ? o->output : md;
    FILE *f = fopen(mdpath, "w");
    if (!f) {
        dt_error_set("cannot write %s: %s", mdpath, strerror(errno));
        goto out;
    }
    report_markdown(&st, f, plotdir);
    if (fclose(f) != 0) {
        dt_error_set("cannot write %s", mdpath);
        goto out;
    }
    if (o->json && !o->quiet)
        report_json(&st, stdout);
    else if (!o->quiet)
        printf("wrote %s and %s/report/\n", mdpath, o->dir);
    progress_end(&prog, "%d trials, %d pairs in %.1f s", st.ntr, st.npr, progress_elapsed(&prog));
    rc = DT_OK;
out:
    progress_clear(&prog);
    report_study_free(&st);
    return rc;
}
