/* report.h: `divtrace report DIR`: the study's traces turned into cached
 * summaries (DIR/summary/, report_summary.c), the statistics per condition,
 * per pair and the study's tables (report.c), the tests of its compare
 * directives (report_stats.c), and the plots (report_plot.c).
 * The summary file formats are documented in divtrace-report(1).
 *
 * DIR/summary/trials/COND/tNN.csv   one trial: a header and one row (the
 *                                   columns of trials.csv)
 * DIR/summary/curves/COND/tNN.csv   step,loss,grad_norm
 * DIR/summary/pairs/A--B/tNN.csv    one run pair: a header and one row
 * DIR/summary/pairs/A--B/tNN.dist.csv  step,distance (checkpoints)
 * DIR/summary/trials.csv, pairs.csv, replays.csv: all of the above in one
 *                                   table each, rewritten by every report
 * A per-trial file is the cache: it is reused unless its trace is newer or
 * --rebuild; without traces it is all there is. Files are per trial so that
 * summaries made on several machines merge by copying directories. */
#ifndef DT_REPORT_H
#define DT_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "diff.h"
#include "progress.h"
#include "stattest.h"
#include "sweep.h"

struct report_options {
    const char *dir;
    const char *output;        /* the markdown; NULL: DIR/report.md */
    int rebuild, no_replay, json, quiet;
    int progress;              /* --progress: plain progress lines */
    int no_explain;            /* no explain verdicts for the pairs */
    int jobs;                  /* pairs computed this many at a time (0, 1: one) */
    int replay_trials;         /* replay only trials 1..N of each pair (0: all) */
    int argc;
    char **argv;               /* the command line, for the report's commands */
};

/* Make the report. 0, or -1 with dt_error set to one line. */
int report_run(const struct report_options *o);

/* ---- summaries (report_summary.c) ---- */

/* Header keys of a trial's configuration copied into its summary. */
#define REPORT_NMETA 11
extern const char *const report_meta_keys[REPORT_NMETA];

enum report_source { REPORT_SRC_NONE, REPORT_SRC_TRACE, REPORT_SRC_SUMMARY };

struct report_trial {
    int ci, t;                 /* condition index, trial (1-based) */
    enum report_source src;
    char status[24];           /* complete, incomplete, running, missing */
    uint64_t steps;
    double final_loss, mean50; /* last step; mean of the last 50 steps */
    int64_t first_escape;      /* -1: none */
    int phases;
    char *escapes;             /* "120 340" */
    char *meta[REPORT_NMETA];
    /* set by report_stats_compute, not stored in the summary: */
    int run;                   /* index of the first trial whose loss curve is
                                * bitwise the same (its own when unique) */
    double initial_loss;       /* the loss of the first step (NaN: no curve) */
    int stalled;               /* stopped learning (REPORT_STALL_FRAC) */
    char seed[32];             /* the --seed it was recorded with */
};

struct report_replay {
    char status[160];          /* ok, skipped, no checkpoint, identical, failed: WHY */
    uint64_t exact, rounding, semantic;
    char *semantic_ops;        /* space-separated names, "" if none */
};

struct report_pair {
    int ca, cb, t;
    enum report_source src;
    char status[24];           /* compared, missing */
    int diverged;
    uint64_t first_step;
    char *first_op;            /* name, "" when unknown */
    char *origins;             /* space-separated op names */
    int64_t cross[DIFF_NTHRESH]; /* checkpoint crossing, else the sketch estimate, or -1 */
    int64_t escape[2];         /* first escapes of the runs (from their trials), or -1 */
    struct report_replay replay[2];
    char verdict[24];          /* explain's: identical, rounding only, bug, no verdict;
                                * or skipped, failed, not run (an older summary) */
    char *verdict_line;        /* its verdict line, "" when none */
    int npoints;
    struct diff_point *points;
};

/* Summarize trial t of condition ci (spec s, directory dir): from the
 * summary when current, else from the trace (writing the summary files).
 * 0, or -1 with dt_error set (a trace that cannot be read, a summary that
 * cannot be written or parsed). */
int report_trial_load(const char *dir, const struct sweep_spec *s, int ci, int t, int rebuild,
                      struct report_trial *out);
void report_trial_free(struct report_trial *tr);
/* The loss curve of a trial from its summary (malloc'd arrays, *n steps). */
int report_curve_load(const char *dir, const struct sweep_spec *s, const struct report_trial *tr,
                      double **step, double **loss, size_t *n);

/* Compare trial t of conditions ca and cb (diff; unless no_replay the
 * oracle replay of each run at its first divergent step; unless no_explain,
 * divtrace explain's verdict on the pair). */
int report_pair_load(const char *dir, const struct sweep_spec *s, int ca, int cb, int t,
                     int rebuild, int no_replay, int no_explain, struct report_pair *out);
void report_pair_free(struct report_pair *p);

/* CSV: one field, quoted when it holds a comma, quote or newline. */
void report_csv_field(FILE *f, const char *s);
/* The rows of trials.csv / pairs.csv (with their header lines). */
void report_trial_header(FILE *f);
void report_trial_row(FILE *f, const struct sweep_spec *s, const struct report_trial *tr);
void report_pair_header(FILE *f);
void report_pair_row(FILE *f, const struct sweep_spec *s, const struct report_pair *p);
/* A replay's cells of a row: status,exact,rounding,semantic,semantic_ops. */
void report_replay_row(FILE *f, const struct report_replay *r);
/* "runs/COND/tNN" style paths under dir: kind "runs", "summary/trials", ...
 * and ext ".dtr", ".csv". */
void report_path(char *out, size_t n, const char *dir, const char *kind, const char *cond,
                 int t, const char *ext);
/* mkdir -p of the directory part of path. 0 or -1 with dt_error set. */
int report_mkdirs(const char *path);

/* ---- statistics (report_stats.c) ---- */

#define REPORT_MAX_PHASES 8     /* phase counts 1..7, and 8 or more */
/* A trial stopped learning when the mean loss of its last 50 steps is not
 * below this fraction of the loss of its first step. */
#define REPORT_STALL_FRAC 0.9

struct report_cstat {
    int ntrials, nhave;
    int nruns, nstalled;       /* independent runs; trials that stopped learning */
    double final_mean, final_sd;
    int nesc;
    double esc_mean, esc_sd;
    int phases[REPORT_MAX_PHASES + 1];
};

/* One metric of one compare line over one subset of the trials. Every
 * statistic counts independent runs: bitwise identical trials count once. */
struct report_test {
    const struct sweep_compare *c;
    enum sweep_metric metric;
    int learning;              /* 0: all trials; 1: without those that stopped learning */
    size_t trials[2];          /* trials with a value in A and B, copies included */
    struct stattest_welch w;
    struct stattest_mwu m;
    size_t pair_trials;        /* trial pairs of one seed, copies included */
    struct stattest_paired pt; /* A - B over the independent pairs */
    struct stattest_wilcoxon wx;
    double holm[4];            /* Holm-adjusted p of w, m, pt, wx */
};

struct report_study {
    const struct report_options *o;
    struct sweep_spec spec;
    int ntr;
    struct report_trial *tr;
    int *first;                 /* (ncond + 1) index of each condition's first trial */
    int npr;
    struct report_pair *pr;
    struct report_cstat *cs;    /* (ncond) */
    int ntest;
    struct report_test *test;   /* (ntest): the tests on all trials, then the same
                                 * tests without those that stopped learning */
    char **plots;
    int nplots;
    struct progress *prog;      /* progress on stderr (progress.h) */
};

const char *report_metric_name(enum sweep_metric m);
/* The runs, seeds and stalls of the trials, the per-condition statistics
 * and the tests (st->cs, st->test). */
void report_stats_compute(struct report_study *st);
/* The Comparisons section of report.md, DIR/report/comparisons.csv, and the
 * "comparisons" array of --json. */
void report_stats_markdown(const struct report_study *st, FILE *f);
void report_stats_csv(FILE *f, const struct report_study *st);
void report_stats_json(const struct report_study *st, FILE *f);

/* The opening paragraph of report.md: question and design (the sweep
 * file's opening comment), the runs, and each comparison's answer with its
 * interval and each pair line's verdicts (report_prose.c). */
void report_intro(const struct report_study *st, FILE *f);

/* ---- plots (report_plot.c) ---- */
/* The PNGs into DIR/report/ (each path written, or skipped with why, one
 * line on log). 0, or -1 with dt_error set when gnuplot fails. */
int report_plot_all(const char *dir, const struct sweep_spec *s, const struct report_trial *tr,
                    int ntr, const struct report_pair *pr, int npr, FILE *log, char ***written,
                    int *nwritten);

#endif
