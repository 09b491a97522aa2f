/* oracle_testutil.h: helpers shared by the oracle tests (test_oracle_acc,
 * test_oracle_ops): the reference rounding to binary32/binary64 through
 * MPFR, random test inputs, and one-op graphs built around random inputs. */
#ifndef DT_ORACLE_TESTUTIL_H
#define DT_ORACLE_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <mpfr.h>

#include "graph.h"
#include "op.h"

#define REF_PREC 2400     /* exact for any sum of products of floats or doubles */
#define REF_APPROX 600    /* working precision of the transcendental references */

/* ---- reference rounding: MPFR's emulation of subnormals --------------------- */

/* RN to p bits with exponents emin..emax (MPFR convention: 0.1b * 2^e). */
double ref_round(mpfr_srcptr x, mpfr_prec_t p, mpfr_exp_t emin, mpfr_exp_t emax);
float ref_round32(mpfr_srcptr x);
double ref_round64(mpfr_srcptr x);

/* Bitwise equality, NaN equal to any NaN. */
int same32(float a, float b);
int same64(double a, double b);

/* RN32 of a value known as r with |r - exact| <= 2^err_exp (err_exp = LONG_MIN:
 * r is exact); fails the test when the error leaves the rounding undecided. */
float ref_decide32(mpfr_srcptr r, long err_exp, const char *what);

float bits32(uint32_t b);
double bits64(uint64_t b);

/* ---- random inputs ----------------------------------------------------------
 * One deterministic stream per test program, seeded the same in each. */

uint64_t r64(void);
double runif(double lo, double hi);

/* Input distributions: UNIT uniform in [-1, 1]; WIDE +-2^[-40, 40];
 * ALL any finite float (subnormals included); FEW floats with at most 8
 * significant bits (exact results are frequent); POS (0, 1); MANT +-[1, 2)
 * (sums of two have 25 bits: float32 ties are frequent). */
enum dist { D_UNIT, D_WIDE, D_ALL, D_FEW, D_POS, D_MANT, D_NDIST };

float rfloat(enum dist d);
/* A random double over the whole range (subnormals, huge, either sign). */
double rdouble(void);

/* ---- one-op graphs ---------------------------------------------------------- */

/* A graph of input leaves and one op node over all of them, with the leaves'
 * values (val[k] for leaf[k]) and the step the op runs at. */
struct tg {
    struct graph g;
    int nleaf, leaf[OP_MAX_INPUTS], op;
    float *val[OP_MAX_INPUTS];
    uint64_t step;
};

void tg_init(struct tg *t);
void tg_free(struct tg *t);
/* An input leaf of shape (d0) or (d0, d1), values left to the caller. */
int tg_leaf(struct tg *t, uint32_t d0, uint32_t d1);
/* An input leaf of any rank (an image (N,C,H,W), a filter (K,C,R,S)). */
int tg_leafn(struct tg *t, int ndim, const uint32_t *shape);
/* The op node over every leaf. */
void tg_op(struct tg *t, enum op_type ty, const union op_params *p, uint32_t d0, uint32_t d1);
void tg_opn(struct tg *t, enum op_type ty, const union op_params *p, int ndim,
            const uint32_t *shape);
const struct node *tg_node(const struct tg *t);
size_t tg_count(const struct tg *t, int k);
void tg_fill(struct tg *t, int k, enum dist d);
/* A leaf of shape (a, b, c, e) filled from d. */
int tg_image(struct tg *t, uint32_t a, uint32_t b, uint32_t c, uint32_t e, enum dist d);
/* conv2d_bwd_data of m pairs: dy_j (N,K,H,W) filled from d, w_j (K,C,R,S)
 * from d2 (leaves dy_0, w_0, dy_1, ...), and the op over them. */
void tg_conv_bwd_data(struct tg *t, int m, uint32_t N, uint32_t C, uint32_t H, uint32_t W,
                      uint32_t K, uint32_t R, uint32_t S, enum dist d, enum dist d2);
/* A random instance of op ty: shapes, parameters and inputs from d
 * (conv2d_bwd_data: 1 to OP_MAX_INPUTS / 2 pairs). */
void tg_make(struct tg *t, enum op_type ty, enum dist d, uint32_t n);

#endif
