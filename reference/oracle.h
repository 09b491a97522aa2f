/* oracle.h: the exact per-op oracle. For an op given float32 inputs, its
 * exact mathematical result rounded once to float32 (round to nearest, ties
 * to even, with binary32's subnormals, and overflow to infinity), and a
 * rigorous bound on the error of the cpu backend's float32 algorithm for the
 * same op. Replay compares a run's own op outputs against both. */
#ifndef DT_ORACLE_H
#define DT_ORACLE_H

#include <stddef.h>
#include <stdint.h>

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
 * results, slower: for cross-checks). Thread-safe. */
int oracle_op(const struct graph *g, const struct node *nd, float *out, const float *const *in,
              const struct backend_step *st);

/* bound[i] >= |cpu result - exact value| for element i, for the float32
 * algorithm of the cpu backend (src/backend_cpu.c) and of any backend that
 * performs the same operations in any order (matrix products: any summation
 * order, with or without FMA), from the inputs alone. Documented per op in
 * divtrace-replay(1). Returns 0 or -1 like oracle_op.
 * bound[i] is +Inf (no claim) when an input of the element is NaN or Inf or
 * an intermediate of the cpu algorithm could overflow; relu, relu_bwd,
 * fill and the ops that only move, select or negate values (maxpool2 and its
 * backward, upsample2, concat, slice and its backward, satlu and its
 * backward, neg) are exact (bound 0, NaN included). */
int oracle_bound(const struct graph *g, const struct node *nd, double *bound,
                 const float *const *in, const struct backend_step *st);

/* The unit in the last place of float32 at x (2^-149 for subnormals and 0). */
double oracle_ulp32(double x);

#endif
