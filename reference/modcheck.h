/* modcheck.h: the exact oracle for PyTorch's standard modules and optimizer
 * updates, as the PyTorch adapter stores them (divtrace-python(7), ORACLE
 * CHECKS): a module's inputs, parameters and output at one step, or one
 * parameter's update with the optimizer's state before and after. For each
 * checked output, its exact value rounded once to float32 and a rigorous
 * bound on the error of every admissible float32 evaluation, in the error
 * model of oracle.c (reference/oracle_impl.h), so that replay_classify()
 * judges a module's output as it judges divtrace's own ops: exact, rounding,
 * or SEMANTIC (beyond every admissible evaluation: a bug).
 *
 * A check is described by a spec, the text the adapter writes: the type,
 * then KEY=VALUE pairs separated by spaces:
 *
 *   linear          tensors in.0 (..., I), param.weight (O, I), [param.bias (O)],
 *                   out (..., O)
 *   conv1d, conv2d  stride=S[,S] padding=P[,P]|same|valid dilation=D[,D] groups=G
 *                   padding_mode=zeros (others: not checked); in.0 (N, C, L) or
 *                   (N, C, H, W), or unbatched without N; param.weight
 *                   (K, C/G, R[, S]); [param.bias (K)]; out
 *   relu sigmoid tanh hardsigmoid
 *                   in.0, out (same shape)
 *   gelu            approximate=none|tanh; in.0, out
 *   layernorm       normalized=D1[,D2...] eps=E; in.0, [param.weight, param.bias]
 *                   (the normalized shape), out
 *   softmax         dim=D (nonnegative); in.0, out
 *   crossentropyloss reduction=mean|sum|none ignore_index=I label_smoothing=L;
 *                   in.0 logits (N, C) or (C) or (N, C, d...), in.1 the target:
 *                   class indices as float32 values (shape without C), or
 *                   probabilities (the logits' shape); [param.weight (C)]; out
 *   mseloss         reduction=mean|sum|none; in.0, in.1 (same shape), out
 *   sgd             lr= momentum= dampening= nesterov=0|1 weight_decay= maximize=0|1
 *                   first=0|1 (the momentum buffer is made in this step);
 *                   param, grad, [state.momentum_buffer] (before), out (the
 *                   parameter after), [state_out.momentum_buffer]
 *   adam, adamw     lr= beta1= beta2= eps= weight_decay= amsgrad=0|1 maximize=0|1
 *                   step=T (the step count after this update, from 1);
 *                   param, grad, state.exp_avg, state.exp_avg_sq (before: zeros
 *                   at T = 1), out, state_out.exp_avg, state_out.exp_avg_sq
 *
 * Keys every type may have: tf32=1 (matrix products and convolutions may
 * round their inputs to TF32: PyTorch's allow_tf32 flags on CUDA), gpu=1
 * (computed on a GPU: a convolution may use a transform algorithm, judged
 * by the normwise floor of replay_normwise_floor()), dtype=float16|bfloat16
 * (autocast: not checked). Numbers are written with %.17g, so that a
 * double hyperparameter comes back exactly. */
#ifndef DT_MODCHECK_H
#define DT_MODCHECK_H

#include <stddef.h>
#include <stdint.h>

/* One stored tensor, by its role ("in.0", "param.weight", "out",
 * "state.exp_avg", "state_out.exp_avg", "grad", "param"). Row-major. */
struct modcheck_tensor {
    const char *role;
    int ndim;
    int64_t shape[8];
    uint64_t count;
    const float *data;
};

/* One checked output: role ("out", "state_out.exp_avg", ...), the stored
 * values, and (filled by modcheck_run, malloc'ed, count elements each) the
 * exact values rounded once to float32 and the bounds. least is the
 * normwise floor (0 when elementwise bounds hold). */
struct modcheck_output {
    char role[64];
    const float *got;
    uint64_t count;
    float *exact;
    double *bound;
    double least;
};

#define MODCHECK_MAX_OUT 4

struct modcheck_result {
    int nout;
    struct modcheck_output out[MODCHECK_MAX_OUT];
    /* the worst ratio over all outputs and where (filled by the caller
     * through replay_classify, or by modcheck_classify) */
};

/* Check one module or update: 0 with res filled (every output the spec
 * produces), 1 when the check cannot be made (why: "conv2d with
 * padding_mode=reflect", "float16 autocast", "amsgrad"), -1 with dt_error
 * set when the spec or the tensors are malformed (a missing tensor, shapes
 * that do not fit). Thread-safe. */
int modcheck_run(const char *spec, const struct modcheck_tensor *t, int nt, struct modcheck_result *res,
                 char *why, size_t nwhy);
void modcheck_result_free(struct modcheck_result *res);

/* The spec's type (its first word) into out. */
void modcheck_type(const char *spec, char *out, size_t n);
/* Whether divtrace checks modules of this type (linear, conv2d, ...). */
int modcheck_known(const char *type);

#endif
