/* test_mpfr.h: what the two sources of the test_mpfr program share
 * (test_mpfr.c, test_mpfr_ops.c): their input fills, and the tests of
 * test_mpfr_ops.c that main runs. */
#ifndef DT_TEST_MPFR_H
#define DT_TEST_MPFR_H

#include <stddef.h>
#include <stdint.h>

/* test_mpfr.c: matrix product operands of a kind (0, 1, 2). */
void tm_fill(float *a, size_t count, int kind, uint64_t *rng);
/* test_mpfr_ops.c: the edge values crossed at stride, then random in [lo, hi]. */
void tm_fill_unary(float *x, size_t n, double lo, double hi, uint64_t *rng, size_t stride);

/* ---- test_mpfr_ops.c: the elementwise ops ---------------------------------------- */

void test_activations(void **state);
void test_add_ops(void **state);
void test_mse(void **state);
void test_mse_bwd(void **state);
void test_optimizers(void **state);

/* ---- test_mpfr_ops.c: PredNet's ops ------------------------------------------------- */

void test_conv2d(void **state);
void test_conv2d_pairs(void **state);
void test_maxpool2(void **state);
void test_upsample2(void **state);
void test_channels(void **state);
void test_prednet_activations(void **state);
void test_prednet_arith(void **state);

#endif
