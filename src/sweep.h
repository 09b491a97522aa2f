/* sweep.h: a study's sweep file (conditions, factors, trials, and the
 * comparisons its report makes) and the trials it expands to. Shared by
 * `divtrace sweep` (which runs the trials) and `divtrace report` (which
 * reads what they wrote). The file format is in divtrace-sweep(5).
 *
 * A sweep file is plain text, one directive per line, '#' to end of line
 * is a comment, blank lines are ignored:
 *
 *   name NAME                      the study's name (letters, digits, -_.)
 *   trials N                       trials per condition (1..1000, default 1)
 *   common ARGS...                 record options every trial gets
 *   condition NAME [group=G] [trials=N] : ARGS...
 *                                  an explicit condition (its own group,
 *                                  trial count and record options)
 *   factor FACTOR LEVEL : ARGS...  one level of a crossed factor; every
 *                                  condition is crossed with every factor
 *   compare SEL SEL [METRIC...]    a two-sided test between the trials the
 *                                  two selectors pick (report)
 *   pair SEL SEL                   trial-by-trial run pairs (report: first
 *                                  divergence, origins, replay class,
 *                                  escape difference)
 *
 * Conditions: the explicit conditions (or one unnamed condition when there
 * are none) crossed with every factor's levels. A condition's name is its
 * explicit name and FACTOR=LEVEL for each factor, joined by ','
 * ("cpu1,init=random", "init=random,gpu=det", "threads=1").
 * Its attributes are group=G (explicit, default the condition's name) and
 * FACTOR=LEVEL for each factor (the default group of an explicit condition
 * crossed with factors is its explicit name: "condition gpu" crossed with
 * init gives gpu,init=random and gpu,init=fixed, both group=gpu); a selector KEY=VALUE picks the conditions
 * with that attribute, cond=NAME the condition of that name, "*" picks all. Record options are the common ones,
 * then the condition's, then each level's, in file order; in them
 * {trial} is the trial number (1-based), {cond} the condition's name.
 *
 * A compare's metrics: final (mean loss of the last 50 steps, the default),
 * escape (first escape step), phases. A pair's two selectors are matched
 * condition by condition: a in A goes with b in B when they agree on every
 * factor the selectors do not name; trial t of a with trial t of b.
 *
 * Layout of an output directory DIR:
 *   DIR/sweep.spec               the sweep file as given (a rerun must match)
 *   DIR/runs/COND/tNN.dtr        trial NN's trace (complete when present)
 *   DIR/runs/COND/tNN.dtr.part   a trial in flight (removed on resume)
 *   DIR/runs/COND/tNN.log        the trial's stderr
 *   DIR/summary/...              the report's summaries (report.h)
 * NN is the trial number, two digits at least (t01, t12, t100). */
#ifndef DT_SWEEP_H
#define DT_SWEEP_H

#include <stddef.h>

#define SWEEP_MAX_ATTR 9        /* group + at most 8 factors */
#define SWEEP_MAX_METRICS 3

struct sweep_attr {
    char *key, *val;            /* "group", "cpu" / "gpu", "det" */
};

struct sweep_cond {
    char *name;                 /* "random-det" */
    char *group;
    int trials;
    int nattr;
    struct sweep_attr attr[SWEEP_MAX_ATTR];
    int nargs;
    char **args;                /* record options, {trial} not yet substituted */
};

enum sweep_metric { SWEEP_METRIC_FINAL, SWEEP_METRIC_ESCAPE, SWEEP_METRIC_PHASES };

struct sweep_compare {
    char *sel[2];               /* "gpu=det", "group=cpu", "*" */
    int nmetrics;
    enum sweep_metric metric[SWEEP_MAX_METRICS];
    int line;                   /* in the sweep file */
};

struct sweep_pair {
    char *sel[2];
    int line;
};

struct sweep_spec {
    char *name;
    int ncond;
    struct sweep_cond *cond;
    int ncompare;
    struct sweep_compare *compare;
    int npair;
    struct sweep_pair *pair;
    char *text;                 /* the file's bytes, for DIR/sweep.spec */
};

/* Parse a sweep file. 0, or -1 with dt_error set to one line naming the file
 * and line ("A.sweep:7: factor 'gpu' level 'det' given twice"). */
int sweep_spec_load(struct sweep_spec *s, const char *path);
int sweep_spec_parse(struct sweep_spec *s, const char *text, const char *name);
void sweep_spec_free(struct sweep_spec *s);

/* Whether condition c has the attribute a selector names (KEY=VALUE or "*"). */
int sweep_cond_matches(const struct sweep_cond *c, const char *sel);
/* The condition of that name, or NULL. */
const struct sweep_cond *sweep_cond_find(const struct sweep_spec *s, const char *name);

/* Trial t (1-based) of condition c: its record arguments with {trial} and
 * {cond} substituted (argv-style, NULL-terminated, caller frees with
 * sweep_args_free) and its paths relative to DIR ("runs/random-det/t03.dtr";
 * buffers of n bytes). */
char **sweep_trial_args(const struct sweep_spec *s, const struct sweep_cond *c, int t);
void sweep_args_free(char **args);
void sweep_trial_path(const struct sweep_cond *c, int t, const char *ext, char *out, size_t n);

/* The pairs of conditions a pair directive matches: out[k][0] and out[k][1]
 * are condition indices; returns the count (malloc'd *out, free it). */
int sweep_pair_conditions(const struct sweep_spec *s, const struct sweep_pair *p, int (**out)[2]);

#endif
