/* replay.h: `divtrace replay`: re-execute recorded steps from a checkpoint,
 * either to check that the run reproduces bitwise, or op by op against the
 * exact oracle: each op's own float32 inputs, its output's error in ULP and
 * against the op's rigorous error bound. */
#ifndef DT_REPLAY_H
#define DT_REPLAY_H

#include <stdint.h>
#include <stdio.h>

#include "trace.h"

enum replay_against { REPLAY_SAME, REPLAY_ORACLE };

struct replay_options {
    uint64_t step, steps;          /* steps [step, step + steps) */
    /* the replay starts at the last checkpoint at or before step `from`
     * (replay_default_from: the step before `step`, so that state a step
     * hands to the next is rebuilt, not taken from a checkpoint) */
    uint64_t from;
    enum replay_against against;
    const char *inject;            /* an extra fault, or NULL */
    const char *ops;               /* against the oracle: the names of the ops to check,
                                    * comma-separated; NULL: every op */
    const char *label;             /* progress: the name the replay goes by, or NULL */
    double threshold;              /* text: ops are listed beyond this error/bound (1: the
                                    * SEMANTIC ones) unless all are asked for */
    int json, quiet;
    int progress;                  /* enum progress_mode (progress.h) */
};
uint64_t replay_default_from(uint64_t step);

enum replay_class { REPLAY_EXACT, REPLAY_ROUNDING, REPLAY_SEMANTIC };

/* One op of one step against the oracle. */
struct replay_opcheck {
    uint64_t step;
    int op;
    enum replay_class cls;
    uint64_t max_ulp;              /* UINT64_MAX: NaN against a number */
    double max_ratio;              /* max |result - oracle| / (bound + ulp/2) */
    uint64_t worst;                /* element with the largest ratio */
    float worst_value, worst_exact;
    double worst_bound;            /* the bound the worst element was held to */
    char algorithm[48];            /* the library algorithm that ran the op, or "" */
    int normwise;                  /* judged by the normwise floor (a transform algorithm) */
    /* the stricter answer: the recorded output is bitwise what the recorded
     * backend's own evaluation gives here from the same inputs (1), is not
     * (0), or the trace keeps no record of the op (-1) */
    int bitwise;
    /* the op's inputs here are bitwise the recorded ones (1), are not (0),
     * or the trace keeps no record of some (-1): only then is the oracle's
     * exact result that of the recorded inputs */
    int inputs_recorded;
    /* the recorded output's statistics (L2 norm, extremes, NaN and Inf)
     * are those of some output within bounds: 1, 0, -1 (cannot tell) */
    int recorded_ok;
};

struct replay_result {
    uint64_t first, last;          /* steps replayed and checked */
    uint64_t from_ckpt;            /* the checkpoint's step */
    int reproduced;                /* every compared hash matched */
    int64_t mismatch_step;         /* first step that did not, or -1 */
    int mismatch_op;               /* its first op (in op order) whose recorded output the
                                    * re-execution did not give, from the same-step inputs
                                    * the recording had; -1 (root only) */
    /* what differs between the recorded configuration and the replay's
     * that could explain a mismatch: "key recorded -> here; ..." or "" */
    char config_diff[512];
    int ncheck, capcheck;
    struct replay_opcheck *check;  /* oracle mode */
    uint64_t nexact, nrounding, nsemantic;
    double seconds;
};

/* Replay tf (its path is re-opened for checkpoints). 0, or -1 with dt_error
 * set on trouble. argv: the whole command line, for re-executing with the
 * trace's OpenBLAS kernel (the one it names with cpu_kernel, else the one
 * it ran, openblas_core, when this machine has it). */
int replay_run(struct trace_file *tf, const struct replay_options *opt, char **argv,
               struct replay_result *res);
void replay_result_free(struct replay_result *res);
/* One checked op as a JSON object (step, op, name, class, max_ulp,
 * max_error_over_bound, algorithm, bound, bitwise_own, inputs_as_recorded,
 * recorded_statistics_admissible, and the worst element when inexact). */
void replay_check_json(FILE *f, const struct trace_file *tf, const struct replay_opcheck *c);
/* A result through a pipe, between two processes of the same divtrace
 * (explain runs each trace's replay in a process of its own, since each
 * may need another OpenBLAS kernel): 0, or -1 with dt_error set. */
int replay_result_send(int fd, const struct replay_result *res);
int replay_result_recv(int fd, struct replay_result *res);
/* Instead of a result: why there is none (recv then fails with it). */
int replay_error_send(int fd, const char *msg);
const char *replay_class_name(enum replay_class c);
/* Whether a checked op is one that matters, listed in text without --all:
 * its error is beyond threshold times its bound (threshold 1: SEMANTIC),
 * it is NaN against a number, its recorded output is not what re-execution
 * gives from the recorded inputs (not reproduced), or its recorded
 * statistics fit no output within the bounds. */
int replay_op_matters(const struct replay_opcheck *c, double threshold);

/* An op's output against the oracle: element k is within bounds when
 * |out - exact| <= max(bound[k], least) + ulp(exact)/2 (least: 0, or a
 * normwise floor). Fills c's class, max_ulp, max_ratio and worst element
 * (the other fields are left). */
void replay_classify(const float *out, const float *exact, const double *bound, size_t n,
                     double least, struct replay_opcheck *c);

/* The normwise floor of a product-sum op computed through a transform
 * (FFT, Winograd) from inputs a and b: ceil(log2 N) u ||a||_2 ||b||_2, N the
 * larger element count, u = 2^-24. Such algorithms spread each element's
 * rounding over the output, so no elementwise bound holds for them; this
 * is the form of the normwise bounds known for FFT convolution. */
double replay_normwise_floor(const float *a, size_t na, const float *b, size_t nb);
/* The same for a sum of m pairs (in[2j], in[2j+1], count[] elements each)
 * computed as one product of the stacked tensors (conv2d_bwd_data of m
 * pairs on cudnn): a and b are the pairs' a and b stacked, so ||a||_2^2 is
 * the sum of the a's, and N the larger of the stacked counts. m = 1 is
 * replay_normwise_floor. */
double replay_normwise_floor_pairs(const float *const *in, const size_t *count, int m);

/* Whether a record's statistics fit an output within the bounds (see
 * replay.c): 1, 0, or -1 when a bound is infinite. */
int replay_stats_admissible(const struct trace_oprec *rec, const float *exact, const double *bound,
                            size_t n, double least);

#endif
