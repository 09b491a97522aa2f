/* oracle.h: the exact per-op oracle. For an op given float32 inputs, its
 * exact mathematical result rounded once to float32 (round to nearest, ties
 * to even, with binary32's subnormals, and overflow to infinity), and a
 * rigorous bound on the error of every admissible float32 evaluation of the
 * same op (any correct implementation's, not only the cpu backend's).
 * Replay compares a run's own op outputs against both. */
#ifndef DT_ORACLE_H
#define DT_ORACLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <mpfr.h>

#include "backend.h"
#include "graph.h"

/* ---- exact summation ------------------------------------------------------
 * An accumulator that holds a sum of doubles exactly (a "superaccumulator"
 * after Neal, 2015: fixed-point chunks indexed by exponent, carries
 * propagated lazily). Products of two floats are exact in double, so dot
 * products of float32 vectors are exact too. */
struct oracle_acc;

struct oracle_acc *oracle_acc_new(void);
void oracle_acc_free(struct oracle_acc *a);
void oracle_acc_clear(struct oracle_acc *a);
/* Add x exactly (x finite; NaN and Inf are counted and make the result NaN
 * or +-Inf as IEEE arithmetic would). */
void oracle_acc_add(struct oracle_acc *a, double x);
/* Add x * y exactly (x, y float32). */
void oracle_acc_add_prod(struct oracle_acc *a, float x, float y);
/* The exact sum rounded once to float32 / to double. */
float oracle_acc_round_f32(struct oracle_acc *a);
double oracle_acc_round_f64(struct oracle_acc *a);
/* The exact sum as an MPFR number (out's precision is raised as needed so
 * that the value is exact). */
void oracle_acc_get_mpfr(struct oracle_acc *a, mpfr_t out);

/* RN32(sum_i x[i*incx] * y[i*incy]) exactly. */
float oracle_dot(const float *x, size_t incx, const float *y, size_t incy, size_t n);
/* RN32(sum_i x[i*inc]) exactly. */
float oracle_sum(const float *x, size_t inc, size_t n);

/* ---- ops ------------------------------------------------------------------
 * out[i] = RN32(exact value of element i of op nd on inputs in[]); in[k] has
 * the shape of g->nodes[nd->inputs[k]]. For ops with transcendental
 * functions or square roots the exact value is irrational; it is computed by
 * MPFR to enough bits that rounding it once is the correct rounding (see
 * divtrace-replay(1)). Returns 0, or -1 (dt_error set) for an op type the
 * oracle does not know.
 * Exact zeros take the sign IEEE 754 gives the op's formula (op.h) evaluated
 * step by step with exact operations; NaN results are the quiet NaN
 * 0x7fc00000; relu and relu_bwd send NaN x to +0, like max(x, 0). Most
 * elements take a certified double-precision fast path; the environment
 * variable DIVTRACE_ORACLE_EXACT=1 sends every element through MPFR (same
 * results, slower: for cross-checks). Thread-safe, except for the
 * convolutions: their matrix products set OpenBLAS's thread count for the
 * call (oracle_threads) and put it back, so take them from one thread at a
 * time. */
int oracle_op(const struct graph *g, const struct node *nd, float *out, const float *const *in,
              const struct backend_step *st);

/* bound[i] >= |result - exact value| for element i, from the inputs alone,
 * for every admissible float32 evaluation of the op, so that a result
 * beyond it (replay's SEMANTIC) is one that no correct implementation could
 * give. Admissible (the full list and the derivations: reference/oracle.c,
 * the formulas: divtrace-replay(1)):
 *  - every rounding to float32 or to a wider format and then to float32;
 *    FMA contraction anywhere;
 *  - sums (matmul, convolutions, bias_grad, upsample2_bwd, mse, mean) in
 *    any order or grouping, accumulated in float32 or wider; mse and mean
 *    divided by n or multiplied by 1/n;
 *  - elementary functions within a tolerance, in ulp of the exact value
 *    (E ulp read as E (2^-23 |f| + 2^-149)): exp and expm1 2.5, tanh 3, a
 *    whole sigmoid 3, division 1.5, sqrt 1.5, pow (Adam's b^t, float32 or
 *    double) 4.5;
 *  - the usual formulas of the composite ops: sigmoid as 1 / (1 + exp(-x)),
 *    exp(x) / (1 + exp(x)) for x < 0 or 0.5 tanh(x/2) + 0.5; tanh via
 *    expm1 or as 2 sigmoid(2x) - 1; tanh_bwd via (1 - y)(1 + y); adam_m as
 *    a lerp; adam_p with the bias corrections folded into the step size
 *    (and eps scaled by sqrt(c2) to match; eps unscaled is another op);
 *    hard_sigmoid's t with an FMA (its bwd's mask may then flip at 0 and 1).
 * Returns 0 or -1 like oracle_op.
 * bound[i] is +Inf (no claim) when an input of the element is NaN or Inf or
 * an intermediate of some admissible evaluation could overflow (a float32
 * sum's partial sums included); relu, relu_bwd, fill and the ops that only
 * move, select or negate values (maxpool2 and its backward, upsample2,
 * concat, slice and its backward, satlu and its backward, neg) are exact
 * (bound 0, NaN included); add, sub, mul allow half an ulp. */
int oracle_bound(const struct graph *g, const struct node *nd, double *bound,
                 const float *const *in, const struct backend_step *st);

/* The unit in the last place of float32 at x (2^-149 for subnormals and 0;
 * |x| for NaN and Inf), from x's exponent bits: a hot loop of replay's. */
static inline double oracle_ulp32(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    b &= ~((uint64_t)1 << 63);
    uint64_t e = b >> 52;
    if (e == 0x7ff) { /* |x|: NaN or Inf */
        double ax;
        memcpy(&ax, &b, sizeof ax);
        return ax;
    }
    if (e < 1023 - 126) /* |x| < 2^-126 */
        return 0x1p-149;
    b = (e - 23) << 52; /* |x| in [2^E, 2^(E+1)): 2^(E-23) */
    double u;
    memcpy(&u, &b, sizeof u);
    return u;
}

/* oracle_op and oracle_bound of one op in one call, with the same results:
 * a convolution's sums, computed once, serve both (what replay does). */
int oracle_op_bound(const struct graph *g, const struct node *nd, float *out, double *bound,
                    const float *const *in, const struct backend_step *st);

/* The threads the oracle's matrix products use: DIVTRACE_ORACLE_THREADS,
 * else every online CPU. */
int oracle_threads(void);

#endif
