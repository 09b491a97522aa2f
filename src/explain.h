/* explain.h: `divtrace explain A B`: from two traces to one verdict. It
 * diffs them, checks each for carry faults (a leaf changed between steps)
 * and for a graph that is not its model's, and replays the origin ops of
 * the first divergent step from both traces against the exact oracle, each
 * replay starting a step early so that state one step hands to the next is
 * rebuilt. The verdict: identical, rounding only (and the configuration
 * keys that explain it), or a bug in A or B (the op that computes wrong
 * values, the tensor changed between steps, or the op wired wrongly). */
#ifndef DT_EXPLAIN_H
#define DT_EXPLAIN_H

#include <stdint.h>

#include "carry.h"
#include "diff.h"
#include "replay.h"
#include "trace.h"

enum explain_verdict {
    EXPLAIN_IDENTICAL,
    EXPLAIN_ROUNDING,   /* rounding only */
    EXPLAIN_BUG,        /* a bug in A, in B, or in both */
    EXPLAIN_UNKNOWN,    /* no verdict: something that decides it could not be checked */
};

#define EXPLAIN_TEXT 1024

/* What was found about one trace. */
struct explain_side {
    struct trace_file *tf;
    const char *label;              /* "A" or "B" */
    struct carry_scan carry;
    char graph[EXPLAIN_TEXT];       /* how its op list departs from its model's, or "" */
    int graph_checked;              /* its model could be built from its header */
    int replayed;                   /* a replay ran */
    char not_checked[EXPLAIN_TEXT]; /* why its ops could not be checked, or "" */
    struct replay_result rr;
    int bug;                        /* a bug is found in this trace */
    char finding[EXPLAIN_TEXT];     /* the bug, or a re-execution mismatch, or "" */
    int mismatch;                   /* its recording is not what re-execution gives */
    int nondet;                     /* it ran kernels whose bits change from run to run */
    int all_checked;                /* every op of the step was checked, not only the origins */
    int unchecked;                  /* of those, ops a nondeterministic run's re-execution no
                                     * longer has the recorded inputs of (not checked) */
    int nondet_checked;             /* ops whose recorded outputs, which re-execution does not
                                     * give again, were checked by their statistics */
    int torch;                      /* a PyTorch adapter trace: checked from its module data */
    int torch_grads;                /* the check of every op: gradients of standard modules,
                                     * which have no oracle of their own (not checked) */
    int torch_nodata;               /* the check of every op: modules without module data or
                                     * an oracle (custom ones: their inputs differ by then) */
    char source[192];               /* where its module data came from */
    char custom[EXPLAIN_TEXT];      /* its custom modules checked without an oracle, "" */
};

struct explain_options {
    int all;                        /* check every op of the step, not only the origins */
    int progress;                   /* enum progress_mode (progress.h): progress on stderr */
    const char *self;               /* this program, for the replays' processes */
};

struct explain_result {
    enum explain_verdict verdict;
    char line[4 * EXPLAIN_TEXT];    /* the verdict line, e.g. "rounding only: threads 1 | 2" */
    char keys[EXPLAIN_TEXT];        /* rounding only: the configuration keys that differ */
    struct diff_result d;
    struct explain_side side[2];
    uint64_t step;                  /* the step the oracle checked (first divergent) */
    int checked_step;               /* an oracle check ran for that step */
    char either[EXPLAIN_TEXT];      /* a bug in A or in B, which one unknown (a custom module
                                     * that computes another function in each), or "" */
    double seconds;
};

/* Explain a and b (both open). 0, or -1 with dt_error set on trouble (an
 * empty trace, an unreadable checkpoint). */
int explain_run(struct trace_file *a, struct trace_file *b, const struct explain_options *opt,
                struct explain_result *res);
void explain_result_free(struct explain_result *res);
const char *explain_verdict_name(enum explain_verdict v);
/* What explain is doing, on stderr (opt->progress): a terminal line
 * rewritten, or with --progress a line per phase; NULL clears the
 * terminal line. */
void explain_phase(const struct explain_options *opt, const char *what);

/* Step 3 for two PyTorch adapter traces (explain_torch.c): the origin ops
 * of res->step checked from the module data the adapter stored. */
void explain_torch(struct explain_result *res, const struct explain_options *opt);

/* How tf's op list departs from the graph its model builds from the header
 * (out "" when it does not). 1 when the model could be built, 0 when not
 * (a libdivtrace trace: no model; why in out), -1 with dt_error set. */
int explain_graph_check(const struct trace_file *tf, char *out, size_t n);

#endif
