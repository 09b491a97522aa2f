/* diff.h: comparing two traces: configuration changes, the first divergent
 * step and op, the origin ops of that step (inputs identical, output
 * different: where divergence is born), and the parameter-distance timeline. */
#ifndef DT_DIFF_H
#define DT_DIFF_H

#include <stdint.h>

#include "trace.h"

#define DIFF_NTHRESH 3
extern const double diff_thresholds[DIFF_NTHRESH]; /* 1e-6, 1e-3, 1e-1 */

struct diff_point {
    uint64_t step;
    double dist;               /* |pA - pB| / |pA| over all parameters (by name, those
                                  both hold in one shape; NaN when none) */
};

/* The op lists are aligned by name: records of ops that both traces hold
 * compare even when the graphs differ (an op rewired, added, removed or
 * reshaped). An op whose definition differs (type, kind, shape or the names
 * of its inputs) still has its records compared; see diff_traces for what
 * makes such an op an origin. */
#define DIFF_OPDIFF_TEXT 512

struct diff_result {
    uint64_t common;           /* steps present in both */
    int ops_match;             /* identical op lists: records align op by op */
    int32_t ops_mismatch_at;   /* first op index at which the lists differ position by
                                  position, when !ops_match */
    /* the op lists by name */
    int32_t *a_to_b;           /* per op of A: B's op of the same name, or -1 */
    int32_t *b_to_a;           /* per op of B: A's op of the same name, or -1 */
    uint8_t *a_changed;        /* per op of A: 1 when B has no op of its name or that
                                  op's definition differs */
    int nopdiffs;              /* op-definition differences: ops whose definitions
                                  differ, plus ops in one trace only */
    int32_t opdiff_a, opdiff_b;/* the first of them (in A's order, an op only in B
                                  where B places it): its index in A and in B, -1
                                  where absent; when the lists differ in order only
                                  (nopdiffs 0), the first op out of place */
    char opdiff[DIFF_OPDIFF_TEXT]; /* what differs there, e.g. "L2.t00.tanh_c: input 0
                                  L2.t00.c became L2.init.c"; "" when ops_match */
    int diverged;              /* the traces differ: a common step's values differ, or
                                  the op lists do and there is a common step */
    int values_differ;         /* some common step differs in the ops both hold: the
                                  root hashes when the lists name the same ops in the
                                  same order, else the records; first_step is the first */
    int values_unknown;        /* the lists name different ops and the traces keep no
                                  records of the ops both hold: values cannot compare */
    uint64_t first_step;       /* 0 when only the op lists differ */
    int first_op;              /* A's op index, or -1 when the records cannot tell */
    /* at the first divergent op */
    int have_elements;         /* from checkpoints: */
    uint64_t elements_differ, elements;
    uint64_t max_ulp;
    double rel_l2;             /* exact (checkpoint) or estimated (sketch); NaN when
                                  the op has another shape in B */
    int rel_l2_estimated;
    /* origins of the first divergent step (A's op indices; a_changed tells
     * the ones whose definition differs) */
    int norigins;
    int *origins;
    int origins_partial;       /* some ops lacked records: the list may be short */
    /* timeline at checkpoints common to both */
    int npoints;
    struct diff_point *points;
    int64_t cross_ckpt[DIFF_NTHRESH];   /* first checkpoint step above, or -1 */
    int64_t cross_sketch[DIFF_NTHRESH]; /* first step estimated above from sketches, or -1 */
    int sketch_ok;                      /* parameter records were available */
    double final_a, final_b, mean50_a, mean50_b;
};

/* Distances of runs from a reference trajectory (diff --reference). */
struct diff_refpoint {
    uint64_t step;
    double dist[2];            /* per run, NaN where that run has no checkpoint */
};
struct diff_refresult {
    int nruns;
    int npoints;
    struct diff_refpoint *points;
    int64_t cross[2][DIFF_NTHRESH]; /* first checkpoint step beyond each threshold, or -1 */
    int identical[2];               /* every shared checkpoint equals the reference's */
};
/* Compare one or two runs with ref at the checkpoints they share. 0, or -1
 * with dt_error set (unreadable checkpoint, different models). */
int diff_reference(struct trace_file *ref, struct trace_file **runs, int nruns,
                   struct diff_refresult *out);
void diff_refresult_free(struct diff_refresult *r);

/* Compare a and b. 0, or -1 with dt_error set (e.g. an unreadable checkpoint).
 * An origin of the first divergent step is an op both traces hold whose
 * output hashes differ while every input it reads in that step, in either
 * trace, has equal hashes in both; an input that only one trace holds counts
 * as equal when its own inputs do, recursively. For an op whose definition
 * differs the inputs of both definitions are checked (a rewired op's old
 * input and its new one): when all of them are equal in both traces, the
 * op's output changed because its definition did, and it is an origin. */
int diff_traces(struct trace_file *a, struct trace_file *b, struct diff_result *r);
void diff_result_free(struct diff_result *r);

/* Step s (< r->common) on its own, for a view of every step (html.c): the
 * first op of A's order whose hashes differ (*first_op, -1 when none) and
 * the step's origin ops (A's op indices into origins, which holds a->nops;
 * *norigins of them), by diff_traces's rule, except that in a step after
 * the first divergent one an input from the previous step is equal only
 * when its records there are (a parameter that differs because the update
 * that wrote it did is carried, not born). *partial is set when records
 * were missing. r is diff_traces(a, b)'s. */
void diff_step_ops(const struct trace_file *a, const struct trace_file *b,
                   const struct diff_result *r, uint64_t s, int *first_op, int *origins,
                   int *norigins, int *partial);

/* What differs between A's op ia and B's op ib ("" when they are equal):
 * "NAME: type sigmoid became tanh", "NAME: input 0 L2.t00.c became
 * L2.init.c", "NAME: shape 100x32 became 100x64" (several joined by "; "),
 * with inputs named by op name and "@prev" for the previous step's;
 * "op N: name X became Y" for ops of different names. An index past its
 * list (e.g. UINT32_MAX) means the op is absent: "NAME: only in B". */
void diff_opdef_describe(const struct trace_file *a, uint32_t ia, const struct trace_file *b,
                         uint32_t ib, char *out, size_t n);

/* The layer of an op name: the text before its first '.', e.g. "enc1". */
void diff_layer(const char *name, char *out, size_t n);
/* The time step a recurrent model's op name carries ("L2.t07.conv_f": 7,
 * *rest = "conv_f"; a gradient contribution of a time step's consumer,
 * "L0.conv_c.W.grad@L0.t19.conv_c": 19, *rest = "conv_c.W.grad@L0.t19.conv_c"),
 * or -1 for a name without one. */
int diff_time_step(const char *name, const char **rest);

/* ULP distance between two floats on the ordered integer line (+0 and -0
 * are 0 apart; NaN against anything is UINT64_MAX). */
uint64_t diff_ulp(float a, float b);

#endif
