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
    double dist;               /* |pA - pB| / |pA| over all parameters */
};

struct diff_result {
    uint64_t common;           /* steps present in both */
    int ops_match;             /* identical op lists: records align op by op */
    int32_t ops_mismatch_at;   /* first op index that differs, when !ops_match */
    int diverged;              /* some common step differs */
    uint64_t first_step;
    int first_op;              /* op index, or -1 when the records cannot tell */
    /* at the first divergent op */
    int have_elements;         /* from checkpoints: */
    uint64_t elements_differ, elements;
    uint64_t max_ulp;
    double rel_l2;             /* exact (checkpoint) or estimated (sketch) */
    int rel_l2_estimated;
    /* origins of the first divergent step */
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

/* Compare a and b. 0, or -1 with dt_error set (e.g. an unreadable checkpoint). */
int diff_traces(struct trace_file *a, struct trace_file *b, struct diff_result *r);
void diff_result_free(struct diff_result *r);

/* What differs between two op definitions, e.g. "inputs: data.x, enc1.W vs
 * data.x, enc1.b" ("" when equal). */
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
