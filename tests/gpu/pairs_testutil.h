/* pairs_testutil.h: the data gradient of m pairs (op.h's conv2d_bwd_data
 * with 2 m inputs) computed on the host, for the GPU tests
 * (test_gpu_ops.c, test_gpu_dnn.c): a reference of their own, independent
 * of the exact oracle and of every backend's kernels. */
#ifndef DT_PAIRS_TESTUTIL_H
#define DT_PAIRS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* A data gradient's sizes: dx (N,C,H,W) from pairs dy_j (N,K,H,W), w_j
 * (K,C,R,S); R and S odd. */
struct pt_shape {
    uint32_t n, c, h, w, k, r, s;
};

/* dx = the sum over j < m, k, r, s of dy[j][n,k,h-r+R/2,w-s+S/2] *
 * w[j][k,c,r,s] (terms outside the image left out), element i as exact[i]:
 * the sum taken in long double and rounded to float32 once. bound[i]
 * bounds |float32 result - exact value| for any float32 evaluation of the
 * sum (any order, any split into partial sums, FMA or not), in the
 * oracle's convention (the caller adds the half ulp of exact[i]'s
 * rounding): gamma_L (u = 2^-24) times the sum of the L in-image terms'
 * magnitudes, L 2^-149 for their underflow, and the long double sum's own
 * error. Finite inputs only. */
void pt_bwd_data(const float *const *dy, const float *const *w, int m, const struct pt_shape *sh, float *exact,
                 double *bound);

#endif
