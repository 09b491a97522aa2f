/* test_oracle_ops.h: what the sources of the test_oracle_ops program share
 * (test_oracle_ops.c, test_oracle_ops_ref.c, test_oracle_ops_bound.c): the
 * MPFR reference and its checks, the list of ops, and the bound tests main runs. */
#ifndef DT_TEST_ORACLE_OPS_H
#define DT_TEST_ORACLE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <mpfr.h>

#include "op.h"
#include "oracle_testutil.h"

/* An MPFR step that must be exact (a ternary value of 0); needs cmocka.h. */
#define X(call) assert_int_equal((call), 0)

/* TEST_ORACLE_VERBOSE=1: print the observed error / bound ratios. */
extern int verbose;

/* Every op type, OPS_N of them (test_oracle_ops.c). */
extern const enum op_type ops_all[];
extern const size_t ops_all_n;
#define OPS_N ops_all_n

/* ---- test_oracle_ops_ref.c: the reference and the checks against it ---------------- */

size_t sum_terms(const struct tg *t, size_t i, float *p, float *q);
size_t tg_termcap(const struct tg *t);
float ref_hs_t(float x);
void ref_elem(const struct tg *t, size_t i, mpfr_t r, long *err);
float *tg_oracle(const struct tg *t, int exact);
long ops_check(const struct tg *t, const char *what);
void op_bound_same(const struct tg *t, const char *what);
int img_leaf(struct tg *t, uint32_t a, uint32_t b, uint32_t c, uint32_t d, const float *v);
void expect_out(const struct tg *t, const float *want, const char *what);

/* ---- test_oracle_ops_bound.c: oracle_bound against the cpu kernels ---------------- */

void test_bounds(void **state);
void test_bounds_adversarial(void **state);
void test_bounds_conv(void **state);
void test_conv_pairs(void **state);
void test_bounds_special(void **state);
void test_bounds_adversarial_image(void **state);

#endif
