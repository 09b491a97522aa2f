/* mpfr_testutil.h: helpers shared by the mpfr backend's tests (test_mpfr.c,
 * test_mpfr_train.c): backend set-up, float32 bits, random floats, and one op
 * checked against an independent high-precision evaluation. */
#ifndef DT_MPFR_TESTUTIL_H
#define DT_MPFR_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include <mpfr.h>

#include "backend.h"
#include "graph.h"

#define TM_REF 1000          /* bits of the independent evaluation */
#define TM_PREC 200          /* bits of the backend under test */
#define TM_NEAR 0x1p-190     /* closer than this (relative) to a float32 rounding
                              * boundary, a 200-bit result may round either way */

/* A context of the mpfr backend at prec bits (0: its default), and of the
 * cpu backend; both fail the test if init fails. */
void *tm_init(long prec);
void *tm_cpu_init(void);

/* A float's bits and back; tm_same: bitwise equal, or both NaN. */
uint32_t tm_bits(float f);
float tm_float(uint32_t b);
int tm_same(float a, float b);

/* v rounded to float32 (nearest, ties to even), by comparison rather than
 * by bits; *dist (if dist): |v - midpoint| / |v| of the two floats around v. */
float tm_round_f32(mpfr_srcptr v, double *dist);

/* A float with a random 24-bit significand, exponent in [emin, emax] and
 * sign; one uniform in [lo, hi]. */
float tm_rand_wide(uint64_t *rng, int emin, int emax);
float tm_rand(uint64_t *rng, double lo, double hi);

/* ---- one op on given float inputs -------------------------------------------- */

struct tm_case {
    struct graph g;          /* the input leaves */
    struct node op;          /* the op under test (outside g) */
    float *in[OP_MAX_INPUTS];
    uint64_t step;
    double tol;              /* cpu sanity check: float epsilons of the magnitude */
    int stepwise;            /* op rounds each elementary step: exact ties may differ */
};

/* An op of type t with output shape (d0) or (d0, d1); tm_case_input adds
 * input k of shape (d0) or (d0, d1) and returns its values to fill. The _nd
 * forms take any shape (an image (N,C,H,W), a filter (K,C,R,S)). */
void tm_case_init(struct tm_case *c, enum op_type t, uint32_t d0, uint32_t d1);
float *tm_case_input(struct tm_case *c, uint32_t d0, uint32_t d1);
void tm_case_init_nd(struct tm_case *c, enum op_type t, int ndim, const uint32_t *shape);
float *tm_case_input_nd(struct tm_case *c, int ndim, const uint32_t *shape);
void tm_case_free(struct tm_case *c);

/* Run the case on backend be (ctx); out: its float32 download; full (if
 * not NULL, initialised by the caller; the mpfr backend only): its own
 * P-bit values. */
void tm_run(const struct backend_ops *be, void *ctx, const struct tm_case *c, float *out,
            mpfr_t *full);

/* The op.h formula at TM_REF bits into out[0..count) (initialised by the
 * caller); mag[i]: the magnitude the cpu backend's rounding errors scale with. */
void tm_ref(const struct tm_case *c, mpfr_t *out, double *mag);

/* Run the case on the mpfr backend (ctx, at prec bits), on the exact oracle
 * and on the cpu backend and fail the test on any mismatch (see
 * mpfr_testutil.c); with exact_ref no element is exempt. Returns the number
 * of exempted elements. */
size_t tm_check(struct tm_case *c, void *ctx, long prec, int exact_ref);

#endif
