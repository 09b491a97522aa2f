/* cpu_conv.h: float32 2-D convolution for the cpu backend (op.h's CONV2D
 * and its two backward ops): stride 1, odd kernel, "same" zero padding,
 * NCHW, by im2col and OpenBLAS sgemm. Dimension letters: N batch, C input
 * channels, K output channels, H x W image, R x S kernel. */
#ifndef DT_CPU_CONV_H
#define DT_CPU_CONV_H

#include "cpu_gemm.h"

#include <stddef.h>

/* Sizes of one convolution; R and S odd. */
struct cpu_conv_shape {
    int n, c, h, w, k, r, s;
};

/* Scratch memory reused across calls: grown when a larger size is needed,
 * never shrunk. Zero-initialize; free with cpu_conv_scratch_free. */
struct cpu_conv_scratch {
    float *col;     /* (C*R*S, H*W) */
    size_t cap;     /* floats allocated at col */
    const struct cpu_gemm_mode *gemm; /* the products' form (NULL: OpenBLAS) */
    float *dwt;     /* the fixed filter gradient's transposed sum, (C*R*S, K) */
    size_t dwt_cap;
    float *dyt;     /* and a batch item's output gradient, transposed and packed */
    size_t dyt_cap;
    float *wflip;   /* the fixed data gradient's filters, (C, m*K*R*S) */
    size_t wflip_cap;
};

void cpu_conv_scratch_free(struct cpu_conv_scratch *sc);

/* col (C*R*S, H*W): row (c, r, s) holds x[c, h+r-R/2, w+s-S/2] at column
 * h*W + w, +0 where that lies outside the image. */
void cpu_conv_im2col(float *col, const float *x, /* (C,H,W) */ const struct cpu_conv_shape *sh);

/* out (N,K,H,W) = conv(x, wt): per batch item n and band of image rows
 * (cpu_conv.c; one band when the col is small), im2col of the band, then one
 * sgemm out[n][:, band] (K, rows*W) = wt (K, C*R*S) x col(band), so each
 * element is one OpenBLAS dot product over (c, r, s). A 1x1 kernel skips
 * im2col: out[n] = wt x x[n]. With the fixed products, one product per
 * batch item over the whole image whose col is never written: each thread
 * makes the strips of its own columns from x (cpu_gemm_fixed_im2col; the
 * same bits: each element is one sum over (c, r, s) in order however the
 * product is cut). */
void cpu_conv_forward(struct cpu_conv_scratch *sc, float *out, /* (N,K,H,W) */
                      const float *x, /* (N,C,H,W) */ const float *wt, /* (K,C,R,S) */
                      const struct cpu_conv_shape *sh);

/* dx (N,C,H,W) from m pairs (dy[j] (N,K,H,W), wt[j] (K,C,R,S)), 1 <= m <=
 * CPU_CONV_MAX_PAIRS.
 *
 * OpenBLAS: per batch item col = the sum over j of wt[j]^T (C*R*S, K) x
 * dy[j][n] (K, H*W), by one sgemm a pair in j order, the first with beta =
 * 0 and the others with beta = 1 (each pair's products added onto the
 * float32 sum of the pairs before it), then col2im: dx[n] starts at +0 and,
 * for r = 0..R-1, s = 0..S-1 in that order, each tap's plane of col is
 * added in float32 to the pixels it lands on; so each dx element is ((0 +
 * t_first) + ...) + t_last over its in-image taps in row-major (r, s) order
 * (channels split between the threads, which changes no sum).
 *
 * The fixed products: the forward convolution of the output gradients with
 * the filters flipped and transposed, dx[n] (C, H*W) = wf (C, m*K*R*S) x
 * col(dy[n]) (m*K*R*S, H*W), wf[c][j,k,r,s] = wt[j][k][c][R-1-r][S-1-s]
 * and col row (j,k,r,s) holding dy[j][n][k][h+r-R/2][w+s-S/2] (+0 outside
 * the image): each dx element is one chain acc = fma(wf, col, acc) from +0
 * over (j, k, r, s) in that order, the kernel's taps from its last row and
 * column, the image's padding included as +0 terms (as the forward's). One
 * product of m*K*R*S terms, the forward's form, where the col2im form is
 * m products of K terms onto a col of C*R*S rows and a pass of adds. */
#define CPU_CONV_MAX_PAIRS 4
void cpu_conv_bwd_data(struct cpu_conv_scratch *sc, float *dx, /* (N,C,H,W) */
                       const float *const *dy, /* m of (N,K,H,W) */ const float *const *wt, /* m of (K,C,R,S) */
                       int m, const struct cpu_conv_shape *sh);

/* dw (K,C,R,S) = sum over n of dy[n] (K, H*W) x col(x[n])^T (H*W, C*R*S):
 * one sgemm per batch item in n order, the first with beta = 0, the others
 * with beta = 1, so item n's products (summed over h, w inside OpenBLAS, in
 * its blocking order) are added onto the float32 sum of items 0..n-1. With
 * the fixed products, K >= 16 and H*W > 2K, the product computed is its transpose,
 * col(x[n]) x dy[n]^T, into a (C*R*S, K) sum copied to dw at the end: each
 * element's fused multiply-adds are the same ones in the same order (a
 * product's factors commute exactly), and the operand the kernel copies
 * transposed is dy[n], K rows, instead of the col, C*R*S rows. The fixed
 * products run in parts of the col's rows, each part making its rows and
 * its share of the product on one thread. */
void cpu_conv_bwd_filter(struct cpu_conv_scratch *sc, float *dw, /* (K,C,R,S) */
                         const float *x, /* (N,C,H,W) */ const float *dy, /* (N,K,H,W) */
                         const struct cpu_conv_shape *sh);

/* backend_cpu.c: the sets of convolutions a cpu context runs as one (its
 * graph's, with the fixed products; conv_sets.h). */
int cpu_backend_conv_sets(void *ctx);

#endif
