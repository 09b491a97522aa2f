/* cpu_gemm.c: the cpu backend's matrix product in one of two forms.
 *
 * openblas: cblas_sgemm, whose summation order depends on OpenBLAS's kernel
 * (the CPU model, OPENBLAS_CORETYPE) and its thread count.
 *
 * fixed: divtrace's own, with one summation order whatever the CPU, the
 * vector width or the thread count: every element of C is
 *     acc = beta ? C[i][j] : +0;  acc = fma(A[i][k], B[k][j], acc), k = 0 .. K-1,
 * each step one fused multiply-add rounded once to float32. Vectors run
 * across j (columns of C), never across k, so an AVX-512 or AVX2 lane does
 * the very operations the scalar loop does (fmaf, correctly rounded by the C
 * library on a CPU without FMA, where it is slow); threads split the rows
 * and columns, never a sum. The kernels are one body compiled for each
 * instruction set and chosen at run time. */
#include "cpu_gemm.h"

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#include <immintrin.h>
#include <math.h>

/* the calling thread's strip buffer (a copy of B's columns: no arithmetic) */
static _Thread_local float *strip_p;
static _Thread_local size_t strip_n;

static float *gemm_strip(size_t n)
{
    if (strip_n < n) {
        free(strip_p);
        strip_p = dt_malloc(n * sizeof *strip_p);
        strip_n = n;
    }
    return strip_p;
}

/* out rows 0..7 (stride so) = the 8 x 8 block of in (stride si) transposed */
__attribute__((target("avx2"))) static inline void gemm_t8(float *out, size_t so, const float *in, size_t si)
{
    __m256 r[8], t[8], u[8];
    for (int q = 0; q < 8; q++)
        r[q] = _mm256_loadu_ps(in + q * si);
    for (int q = 0; q < 4; q++) {
        t[2 * q] = _mm256_unpacklo_ps(r[2 * q], r[2 * q + 1]);
        t[2 * q + 1] = _mm256_unpackhi_ps(r[2 * q], r[2 * q + 1]);
    }
    for (int h = 0; h < 2; h++) /* rows 0-3 (h 0) and 4-7 (h 1) */
        for (int q = 0; q < 2; q++) {
            u[4 * h + 2 * q] = _mm256_shuffle_ps(t[4 * h + q], t[4 * h + q + 2], _MM_SHUFFLE(1, 0, 1, 0));
            u[4 * h + 2 * q + 1] = _mm256_shuffle_ps(t[4 * h + q], t[4 * h + q + 2], _MM_SHUFFLE(3, 2, 3, 2));
        }
    for (int q = 0; q < 4; q++) {
        _mm256_storeu_ps(out + q * so, _mm256_permute2f128_ps(u[q], u[q + 4], 0x20));
        _mm256_storeu_ps(out + (q + 4) * so, _mm256_permute2f128_ps(u[q], u[q + 4], 0x31));
    }
}

/* Columns j .. j + w - 1 of op(B) (B as stored: K x N, or N x K when tb),
 * for k = 0 .. K - 1, into strip rows of sw floats: a copy, no arithmetic.
 * Transposed in 8 x 8 blocks (AVX2: only the vector kernels call this). */
__attribute__((target("avx2"))) static void gemm_pack(float *strip, int sw, const float *B, int ldb, int tb,
                                                      int j, int w, int K)
{
    int c8 = w & ~7, k8 = K & ~7;
    if (!tb) { /* vector copies (memcpy of 64 or 128 bytes starts slowly) */
        for (int k = 0; k < K; k++) {
            float *d = strip + (size_t)k * sw;
            const float *src = B + (size_t)k * ldb + j;
            for (int c = 0; c < c8; c += 8)
                _mm256_storeu_ps(d + c, _mm256_loadu_ps(src + c));
            for (int c = c8; c < w; c++)
                d[c] = src[c];
        }
        return;
    }
    for (int c = 0; c < c8; c += 8) {
        const float *src = B + (size_t)(j + c) * ldb;
        for (int k = 0; k < k8; k += 8)
            gemm_t8(strip + (size_t)k * sw + c, (size_t)sw, src + k, (size_t)ldb);
        for (int cc = c; cc < c + 8; cc++)
            for (int k = k8; k < K; k++)
                strip[(size_t)k * sw + cc] = B[(size_t)(j + cc) * ldb + k];
    }
    for (int cc = c8; cc < w; cc++)
        for (int k = 0; k < K; k++)
            strip[(size_t)k * sw + cc] = B[(size_t)(j + cc) * ldb + k];
}

/* C[i0..i1) x [j0..j1) of the product: op(A) (M x K, A stored with row
 * stride lda as M x K, or as K x M when transposed), B (K x N, row stride
 * ldb), C (row stride ldc), each step acc = fma(a, b, acc). A tile is MR
 * rows by two vectors of VW columns (the rows past the last whole tile in
 * tiles of 4, 2 and 1 rows); the columns past the last whole tile a vector
 * at a time, masked (each lane rounds as fmaf does).
 *
 * GEMM_AIX: where element (row r, k) of op(A) lies in A as stored, M x K
 * (AT 0) or K x M (AT 1, a tile's rows at one k side by side, so no
 * transposed copy is made); AT is a constant in each kernel, which is
 * compiled once for each layout. */
#define GEMM_AIX(AT, r, k, lda)                                                                 \
    ((AT) ? (size_t)(k) * (size_t)(lda) + (size_t)(r) : (size_t)(r) * (size_t)(lda) + (size_t)(k))

/* Where a kernel finds B when not as stored: made strip by strip from a
 * convolution's input (im2col), or copied into strips beforehand (packed,
 * cpu_gemm_pack_b). */
struct gemm_b {
    const struct cpu_gemm_im2col *im2col;
    const float *packed;
};

/* The tile of rows i .. i + R - 1, R a constant: its loops over rows
 * unrolled, so that the accumulators live in registers. */
#define GEMM_TILE(NAME, TARGET, AT, VW, R, V, LOAD, STORE, SET1, FMA, ZERO)                     \
    TARGET static void NAME(int i, int j, int K, const float *A, int lda, const float *bp,      \
                            int ldb, int beta, float *C, int ldc)                              \
    {                                                                                           \
        V acc[R][2];                                                                            \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                   \
        {                                                                                       \
            acc[r][0] = beta ? LOAD(C + (size_t)(i + r) * ldc + j) : ZERO();                    \
            acc[r][1] = beta ? LOAD(C + (size_t)(i + r) * ldc + j + VW) : ZERO();               \
        }                                                                                       \
        const float *a0 = AT ? A + i : A + (size_t)i * lda;                                     \
        for (int k = 0; k < K; k++) {                                                           \
            V b0 = LOAD(bp + (size_t)k * ldb), b1 = LOAD(bp + (size_t)k * ldb + VW);            \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                               \
            {                                                                                   \
                V a = SET1(a0[GEMM_AIX(AT, r, k, lda)]);                                        \
                acc[r][0] = FMA(a, b0, acc[r][0]);                                              \
                acc[r][1] = FMA(a, b1, acc[r][1]);                                              \
            }                                                                                   \
        }                                                                                       \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                   \
        {                                                                                       \
            STORE(C + (size_t)(i + r) * ldc + j, acc[r][0]);                                    \
            STORE(C + (size_t)(i + r) * ldc + j + VW, acc[r][1]);                               \
        }                                                                                       \
    }

/* The columns past the last two-vector tile: one vector of them at a time,
 * its lanes past the matrix masked off (loaded as zeros, never stored), R
 * rows at a time. */
#define GEMM_NTILE(NAME, TARGET, AT, R, V, MT, MLOAD, MSTORE, SET1, FMA, ZERO)                 \
    TARGET static void NAME(int i, int j, int K, const float *A, int lda, const float *bp,      \
                            int ldb, int beta, float *C, int ldc, MT m)                        \
    {                                                                                           \
        V acc[R];                                                                               \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                   \
            acc[r] = beta ? MLOAD(C + (size_t)(i + r) * ldc + j, m) : ZERO();                   \
        const float *a0 = AT ? A + i : A + (size_t)i * lda;                                     \
        for (int k = 0; k < K; k++) {                                                           \
            V b = MLOAD(bp + (size_t)k * ldb, m);                                               \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                               \
                acc[r] = FMA(SET1(a0[GEMM_AIX(AT, r, k, lda)]), b, acc[r]);                     \
        }                                                                                       \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                   \
            MSTORE(C + (size_t)(i + r) * ldc + j, m, acc[r]);                                   \
    }

/* A product of at most GEMM_STREAM_ROWS rows of C with B as stored (K x N):
 * B's rows read in order, GEMM_KB of them at a time, across every column of
 * the part (NV vectors of R rows' accumulators), C kept in cache between
 * the blocks of k. The tiles above would read B a cache line a row at a
 * time, rows a page or more apart, with too little arithmetic per line to
 * hide it, and copying B into strips reads it as slowly (a convolution of
 * one output channel: 2.8 MB of B for 1.4 MFLOP). The order inside each
 * element is the same: C holds acc between blocks, exactly, as float. Four
 * or more rows have the arithmetic; there the tiles are as fast or faster
 * (bench_gemm with these as -D values: 4 rows as two streams of 2 ran as
 * fast as the tile of 4, 6 rows half as fast as the tile of 6). */
#ifndef GEMM_KB
#define GEMM_KB 8
#endif
#ifndef GEMM_STREAM_ROWS
#define GEMM_STREAM_ROWS 3
#endif
#define GEMM_STREAM(NAME, TARGET, AT, VW, R, NV, V, LOAD, STORE, SET1, FMA, ZERO, MT, MASK, MLOAD, \
                    MSTORE)                                                                     \
    TARGET static void NAME(int i, int j0, int j1, int K, const float *A, int lda,              \
                            const float *B, int ldb, int beta, float *C, int ldc)              \
    {                                                                                           \
        for (int k0 = 0; k0 < K; k0 += GEMM_KB) {                                               \
            int k1 = K - k0 < GEMM_KB ? K : k0 + GEMM_KB, fresh = k0 == 0 && !beta;             \
            int j = j0;                                                                         \
            for (; j + NV * VW <= j1; j += NV * VW) {                                           \
                V acc[R][NV];                                                                   \
                _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                           \
                    _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++)                      \
                        acc[r][v] = fresh ? ZERO() : LOAD(C + (size_t)(i + r) * ldc + j + v * VW); \
                for (int k = k0; k < k1; k++) {                                                 \
                    const float *b = B + (size_t)k * ldb + j;                                   \
                    _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                       \
                    {                                                                           \
                        V a = SET1(A[GEMM_AIX(AT, i + r, k, lda)]);                             \
                        _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++)                  \
                            acc[r][v] = FMA(a, LOAD(b + v * VW), acc[r][v]);                    \
                    }                                                                           \
                }                                                                               \
                _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                           \
                    _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++)                      \
                        STORE(C + (size_t)(i + r) * ldc + j + v * VW, acc[r][v]);               \
            }                                                                                   \
            for (; j < j1; j += VW) {                                                           \
                MT m = MASK(j1 - j < VW ? j1 - j : VW);                                         \
                V acc[R];                                                                       \
                _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                           \
                    acc[r] = fresh ? ZERO() : MLOAD(C + (size_t)(i + r) * ldc + j, m);          \
                for (int k = k0; k < k1; k++) {                                                 \
                    V b = MLOAD(B + (size_t)k * ldb + j, m);                                    \
                    _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                       \
                        acc[r] = FMA(SET1(A[GEMM_AIX(AT, i + r, k, lda)]), b, acc[r]);          \
                }                                                                               \
                _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                           \
                    MSTORE(C + (size_t)(i + r) * ldc + j, m, acc[r]);                           \
            }                                                                                   \
        }                                                                                       \
    }

#define GEMM_KERNEL_AT(NAME, TARGET, AT, VW, MR, V, LOAD, STORE, SET1, FMA, ZERO, MT, MASK, MLOAD,      \
                    MSTORE, PACKX)                                                              \
    GEMM_STREAM(NAME##_s2, TARGET, AT, VW, 2, 4, V, LOAD, STORE, SET1, FMA, ZERO, MT, MASK, MLOAD,  \
                MSTORE)                                                                         \
    GEMM_STREAM(NAME##_s1, TARGET, AT, VW, 1, 8, V, LOAD, STORE, SET1, FMA, ZERO, MT, MASK, MLOAD,  \
                MSTORE)                                                                         \
    GEMM_TILE(NAME##_tile, TARGET, AT, VW, MR, V, LOAD, STORE, SET1, FMA, ZERO)                     \
    GEMM_TILE(NAME##_four, TARGET, AT, VW, 4, V, LOAD, STORE, SET1, FMA, ZERO)                      \
    GEMM_TILE(NAME##_two, TARGET, AT, VW, 2, V, LOAD, STORE, SET1, FMA, ZERO)                       \
    GEMM_TILE(NAME##_row, TARGET, AT, VW, 1, V, LOAD, STORE, SET1, FMA, ZERO)                       \
    GEMM_NTILE(NAME##_ntile, TARGET, AT, MR, V, MT, MLOAD, MSTORE, SET1, FMA, ZERO)                 \
    GEMM_NTILE(NAME##_nrow, TARGET, AT, 1, V, MT, MLOAD, MSTORE, SET1, FMA, ZERO)                   \
    TARGET static void NAME(int i0, int i1, int j0, int j1, int K, const float *A, int lda,     \
                            const float *B, int ldb, int tb, int beta, float *C, int ldc,      \
                            const struct gemm_b *bs)                                           \
    {                                                                                           \
        if (!tb && !bs && K > 0 && i1 - i0 <= GEMM_STREAM_ROWS) { /* B's rows in order */      \
            int i = i0;                                                                         \
            for (; i + 2 <= i1; i += 2)                                                         \
                NAME##_s2(i, j0, j1, K, A, lda, B, ldb, beta, C, ldc);                          \
            for (; i < i1; i++)                                                                 \
                NAME##_s1(i, j0, j1, K, A, lda, B, ldb, beta, C, ldc);                          \
            return;                                                                             \
        }                                                                                       \
        const struct cpu_gemm_im2col *src = bs ? bs->im2col : NULL;                             \
        const float *pk = bs ? bs->packed : NULL;                                               \
        int j = j0, pack = !pk && (tb || src || i1 - i0 > MR);                                  \
        float *strip = pack ? gemm_strip((size_t)K * 2 * VW) : NULL;                            \
        for (; j + 2 * VW <= j1; j += 2 * VW) {                                                 \
            const float *bp = B ? B + j : NULL; /* (no B as stored: its strips) */             \
            int lb = ldb;                                                                       \
            if (pk) { /* strips made beforehand (cpu_gemm_pack_b) */                            \
                bp = pk + (size_t)(j / (2 * VW)) * (size_t)K * (2 * VW);                        \
                lb = 2 * VW;                                                                    \
            } else if (pack) { /* the strip's K rows contiguous (a copy, no arithmetic) */     \
                if (src)                                                                        \
                    PACKX(strip, 2 * VW, src, j, 2 * VW, K);                                    \
                else                                                                            \
                    gemm_pack(strip, 2 * VW, B, ldb, tb, j, 2 * VW, K);                         \
                bp = strip;                                                                     \
                lb = 2 * VW;                                                                    \
            }                                                                                   \
            int i = i0;                                                                         \
            for (; i + MR <= i1; i += MR)                                                       \
                NAME##_tile(i, j, K, A, lda, bp, lb, beta, C, ldc);                             \
            for (; i + 4 <= i1; i += 4) /* the rows left, in smaller tiles */                  \
                NAME##_four(i, j, K, A, lda, bp, lb, beta, C, ldc);                             \
            for (; i + 2 <= i1; i += 2)                                                         \
                NAME##_two(i, j, K, A, lda, bp, lb, beta, C, ldc);                              \
            for (; i < i1; i++)                                                                 \
                NAME##_row(i, j, K, A, lda, bp, lb, beta, C, ldc);                              \
        }                                                                                       \
        for (int jt = j; j < j1; j += VW) { /* (jt: where the last whole strip ends) */       \
            int w = j1 - j < VW ? j1 - j : VW;                                                  \
            MT m = MASK(w);                                                                     \
            const float *bp = B ? B + j : NULL; /* (no B as stored: its strips) */             \
            int lb = ldb;                                                                       \
            if (pk) {                                                                           \
                bp = pk + (size_t)(jt / (2 * VW)) * (size_t)K * (2 * VW) +                      \
                     (size_t)((j - jt) / VW) * (size_t)K * VW;                                  \
                lb = VW;                                                                        \
            } else if (tb || src) { /* B's rows of these columns, into the strip */           \
                strip = gemm_strip((size_t)K * VW);                                             \
                if (src)                                                                        \
                    PACKX(strip, VW, src, j, w, K);                                             \
                else                                                                            \
                    gemm_pack(strip, VW, B, ldb, 1, j, w, K);                                   \
                bp = strip;                                                                     \
                lb = VW;                                                                        \
            }                                                                                   \
            int i = i0;                                                                         \
            for (; i + MR <= i1; i += MR)                                                       \
                NAME##_ntile(i, j, K, A, lda, bp, lb, beta, C, ldc, m);                         \
            for (; i < i1; i++)                                                                 \
                NAME##_nrow(i, j, K, A, lda, bp, lb, beta, C, ldc, m);                          \
        }                                                                                       \
    }

/* The kernel for both layouts of A: NAME(..., A, lda, ta, ...). */
#define GEMM_KERNEL(NAME, TARGET, VW, MR, V, LOAD, STORE, SET1, FMA, ZERO, MT, MASK, MLOAD, MSTORE, \
                    PACKX)                                                                         \
    GEMM_KERNEL_AT(NAME##_n, TARGET, 0, VW, MR, V, LOAD, STORE, SET1, FMA, ZERO, MT, MASK, MLOAD,    \
                   MSTORE, PACKX)                                                                  \
    GEMM_KERNEL_AT(NAME##_t, TARGET, 1, VW, MR, V, LOAD, STORE, SET1, FMA, ZERO, MT, MASK, MLOAD,    \
                   MSTORE, PACKX)                                                                  \
    TARGET static void NAME(int i0, int i1, int j0, int j1, int K, const float *A, int lda, int ta,    \
                            const float *B, int ldb, int tb, int beta, float *C, int ldc,         \
                            const struct gemm_b *bs)                                              \
    {                                                                                              \
        if (ta)                                                                                    \
            NAME##_t(i0, i1, j0, j1, K, A, lda, B, ldb, tb, beta, C, ldc, bs);                     \
        else                                                                                       \
            NAME##_n(i0, i1, j0, j1, K, A, lda, B, ldb, tb, beta, C, ldc, bs);                     \
    }

/* the scalar form: any CPU, slow (fmaf in software where there is no FMA) */
static void gemm_scalar(int i0, int i1, int j0, int j1, int K, const float *A, int lda, int ta,
                        const float *B, int ldb, int tb, int beta, float *C, int ldc,
                        const struct gemm_b *bs)
{
    (void)bs; /* (never given to this kernel: its callers write B out) */
    size_t sk = tb ? 1 : (size_t)ldb, sj = tb ? (size_t)ldb : 1; /* op(B)'s strides */
    for (int j = j0; j < j1; j++)
        for (int i = i0; i < i1; i++) {
            float acc = beta ? C[(size_t)i * ldc + j] : 0.0f;
            for (int k = 0; k < K; k++)
                acc = fmaf(A[GEMM_AIX(ta, i, k, lda)], B[(size_t)k * sk + (size_t)j * sj], acc);
            C[(size_t)i * ldc + j] = acc;
        }
}

/* masked loads and stores of the first n lanes (n = 1 .. the width) */
__attribute__((target("avx2,fma"))) static inline __m256i gemm_mask256(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
__attribute__((target("avx2,fma"))) static inline __m256 gemm_load256(const float *p, __m256i m)
{
    return _mm256_maskload_ps(p, m);
}
__attribute__((target("avx2,fma"))) static inline void gemm_store256(float *p, __m256i m, __m256 v)
{
    _mm256_maskstore_ps(p, m, v);
}
__attribute__((target("avx512f"))) static inline __mmask16 gemm_mask512(int n)
{
    return (__mmask16)((1u << n) - 1u);
}
__attribute__((target("avx512f"))) static inline __m512 gemm_load512(const float *p, __mmask16 m)
{
    return _mm512_maskz_loadu_ps(m, p);
}
__attribute__((target("avx512f"))) static inline void gemm_store512(float *p, __mmask16 m, __m512 v)
{
    _mm512_mask_storeu_ps(p, m, v);
}

/* lane masks from bits (lane l on where bit l is) */
__attribute__((target("avx2,fma"))) static inline __m256i gemm_bits256(unsigned b)
{
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)b), sel), sel);
}
__attribute__((target("avx512f"))) static inline __mmask16 gemm_bits512(unsigned b)
{
    return (__mmask16)b;
}

/* The strip of columns j .. j + w - 1 (w <= sw <= 2 VW) of the col that
 * src describes (cpu_gemm.h), for every row k = ((q C + c) R + r) S + s:
 * the same values cpu_conv_im2col writes (+0, all bits clear, where a tap
 * lies outside the image), so the products' bits are the ones of the col
 * made first. Column p of row (q, c, r, s) is plane q's channel c at pixel
 * p + (r - R/2) W + (s - S/2) when that tap lies in the image: one masked
 * load of VW lanes a row and vector, the masks (image edges, and row
 * changes inside the vector) made once for the strip. Taps in blocks of
 * GEMM_PACKX_TAPS, whose masks stay in registers or L1. */
#define GEMM_PACKX_TAPS 32
#define GEMM_PACKX(NAME, TARGET, VW, V, MT, BITS, MLOAD, STORE)                                 \
    TARGET static void NAME(float *strip, int sw, const struct cpu_gemm_im2col *x, int j, int w,  \
                            int K)                                                              \
    {                                                                                           \
        const int H = x->h, W = x->w, R = x->r, S = x->s, taps = R * S;                         \
        const int vecs = (w + VW - 1) / VW;                                                     \
        const size_t hw = (size_t)H * (size_t)W;                                                \
        int row[2][VW], col[2][VW]; /* each lane's pixel; lanes past w never in the image */    \
        for (int v = 0; v < 2; v++) {                                                           \
            int p = j + v * VW, h = p / W, c = p % W;                                           \
            for (int l = 0; l < VW; l++) {                                                      \
                int in = v * VW + l < w;                                                        \
                row[v][l] = in ? h : -(1 << 28);                                                \
                col[v][l] = in ? c : -(1 << 28);                                                \
                if (++c == W) {                                                                 \
                    c = 0;                                                                      \
                    h++;                                                                        \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        DT_ASSERT(K == x->m * x->c * taps, "im2col strip: %d rows for %d", K, x->m * x->c * taps); \
        for (int t0 = 0; t0 < taps; t0 += GEMM_PACKX_TAPS) {                                    \
            int nt = taps - t0 < GEMM_PACKX_TAPS ? taps - t0 : GEMM_PACKX_TAPS;                 \
            ptrdiff_t off[GEMM_PACKX_TAPS][2];                                                  \
            MT msk[GEMM_PACKX_TAPS][2];                                                         \
            for (int t = 0; t < nt; t++) {                                                      \
                int dr = (t0 + t) / S - R / 2, ds = (t0 + t) % S - S / 2;                       \
                for (int v = 0; v < vecs; v++) {                                                \
                    unsigned bits = 0;                                                          \
                    for (int l = 0; l < VW; l++) {                                              \
                        int hh = row[v][l] + dr, ww = col[v][l] + ds;                           \
                        if (hh >= 0 && hh < H && ww >= 0 && ww < W)                             \
                            bits |= 1u << l;                                                    \
                    }                                                                           \
                    off[t][v] = (ptrdiff_t)j + v * VW + (ptrdiff_t)dr * W + ds;                 \
                    msk[t][v] = BITS(bits);                                                     \
                }                                                                               \
            }                                                                                   \
            for (int q = 0; q < x->m; q++)                                                      \
                for (int c = 0; c < x->c; c++) {                                                \
                    /* lanes masked off are never read: the address may lie outside */          \
                    const char *xc = (const char *)(x->plane[q] + (size_t)c * hw);              \
                    float *d = strip + ((size_t)(q * x->c + c) * (size_t)taps + (size_t)t0) * (size_t)sw; \
                    for (int t = 0; t < nt; t++, d += sw)                                       \
                        for (int v = 0; v < vecs; v++)                                          \
                            STORE(d + v * VW,                                                   \
                                  MLOAD((const float *)(xc + off[t][v] * (ptrdiff_t)sizeof(float)), \
                                        msk[t][v]));                                            \
                }                                                                               \
        }                                                                                       \
    }

/* rows a tile (the accumulators: twice as many vectors); -D for measuring
 * builds, the bits the same for any */
#ifndef GEMM_MR256
#define GEMM_MR256 6
#endif
#ifndef GEMM_MR512
#define GEMM_MR512 8
#endif
GEMM_PACKX(gemm_packx256, __attribute__((target("avx2,fma"))), 8, __m256, __m256i, gemm_bits256,
           gemm_load256, _mm256_storeu_ps)
GEMM_PACKX(gemm_packx512, __attribute__((target("avx512f"))), 16, __m512, __mmask16, gemm_bits512,
           gemm_load512, _mm512_storeu_ps)
GEMM_KERNEL(gemm_avx2, __attribute__((target("avx2,fma"))), 8, GEMM_MR256, __m256, _mm256_loadu_ps,
            _mm256_storeu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_setzero_ps, __m256i,
            gemm_mask256, gemm_load256, gemm_store256, gemm_packx256)
GEMM_KERNEL(gemm_avx512, __attribute__((target("avx512f"))), 16, GEMM_MR512, __m512, _mm512_loadu_ps,
            _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_setzero_ps, __mmask16,
            gemm_mask512, gemm_load512, gemm_store512, gemm_packx512)

typedef void gemm_fn(int, int, int, int, int, const float *, int, int, const float *, int, int, int,
                     float *, int, const struct gemm_b *);

/* The widest kernel this CPU runs; DIVTRACE_CPU_GEMM_ISA=scalar or avx2
 * (for testing that every kernel gives the same bits) caps it. */
static gemm_fn *gemm_pick(int *width, int *rtile)
{
    __builtin_cpu_init();
    const char *cap = getenv("DIVTRACE_CPU_GEMM_ISA");
    int scalar = cap && strcmp(cap, "scalar") == 0, avx2 = cap && strcmp(cap, "avx2") == 0;
    *width = 16;
    *rtile = GEMM_MR256;
    if (scalar)
        return gemm_scalar;
    if (!avx2 && __builtin_cpu_supports("avx512f")) {
        *width = 32;
        *rtile = GEMM_MR512;
        return gemm_avx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return gemm_avx2;
    return gemm_scalar;
}

/* ---- the products' jobs on the pool (cpu_pool.c) ---------------------------- */

/* A job's parts form a grid: rows in blocks of whole row tiles, columns in
 * blocks of whole column tiles (the order inside each element is the same
 * whichever part computes it). */
struct gemm_job {
    gemm_fn *fn;
    int M, N, K, lda, ta, ldb, tb, ldc, beta, width, rtile;
    int pr, pc; /* the grid: pr row blocks by pc column blocks */
    const float *A, *B;
    float *C;
    struct gemm_b bs;   /* B other than as stored, where bs.im2col or bs.packed */
};

/* Part p of the job: one cell of its grid. */
static void gemm_part(void *arg, int p, int thread)
{
    const struct gemm_job *jb = arg;
    (void)thread;
    int r = p / jb->pc, c = p % jb->pc;
    int rows = (jb->M + jb->rtile - 1) / jb->rtile, tiles = (jb->N + jb->width - 1) / jb->width;
    int i0 = (int)((long)rows * r / jb->pr) * jb->rtile, i1 = (int)((long)rows * (r + 1) / jb->pr) * jb->rtile;
    int j0 = (int)((long)tiles * c / jb->pc) * jb->width, j1 = (int)((long)tiles * (c + 1) / jb->pc) * jb->width;
    if (i1 > jb->M)
        i1 = jb->M;
    if (j1 > jb->N)
        j1 = jb->N;
    if (i0 < i1 && j0 < j1)
        jb->fn(i0, i1, j0, j1, jb->K, jb->A, jb->lda, jb->ta, jb->B, jb->ldb, jb->tb, jb->beta, jb->C, jb->ldc,
               jb->bs.im2col || jb->bs.packed ? &jb->bs : NULL);
}

/* The grid for `threads` threads: the one whose largest cell (in tiles)
 * is smallest, of those the one with the fewest cells, and of those the
 * one that splits the rows least: every row part copies the B strips of
 * its columns for itself, so a split of the rows copies B again. Then its
 * columns are cut up to CPU_POOL_PARTS times finer, into cells of at least
 * GEMM_CELL_WORK multiply-adds (a finer column split copies no more of
 * B). */
#define GEMM_CELL_WORK (1L << 18)
static void gemm_grid(struct gemm_job *jb, int threads)
{
    int rows = (jb->M + jb->rtile - 1) / jb->rtile, tiles = (jb->N + jb->width - 1) / jb->width;
    long best = -1, work = (long)jb->M * jb->N * jb->K;
    jb->pr = jb->pc = 1;
    if (threads <= 1 || work < 32768) /* too small to share */
        return;
    for (int pc = 1; pc <= threads && pc <= tiles; pc++)
        for (int pr = 1; pr * pc <= threads && pr <= rows; pr++) {
            long cell = (long)((tiles + pc - 1) / pc) * ((rows + pr - 1) / pr);
            if (best < 0 || cell < best || (cell == best && pr * pc < jb->pr * jb->pc) ||
                (cell == best && pr * pc == jb->pr * jb->pc && pr < jb->pr)) {
                best = cell;
                jb->pr = pr;
                jb->pc = pc;
            }
        }
    long finer = work / GEMM_CELL_WORK / (jb->pr * jb->pc);
    if (finer > CPU_POOL_PARTS)
        finer = CPU_POOL_PARTS;
    if (finer > 1)
        jb->pc = jb->pc * finer < tiles ? jb->pc * (int)finer : tiles;
}

/* ---- the entry ------------------------------------------------------------------ */

/* A job for C (M x N) = op(A) (M x K) x B (+ C where beta), B's form set
 * by the caller, on the widest kernel this CPU runs; then run on the pool. */
static struct gemm_job gemm_job_make(int M, int N, int K, const float *A, int lda, int ta, int beta, float *C,
                                     int ldc)
{
    struct gemm_job jb = {.M = M, .N = N, .K = K, .A = A, .lda = lda, .ta = ta, .beta = beta, .C = C, .ldc = ldc};
    jb.fn = gemm_pick(&jb.width, &jb.rtile);
    return jb;
}

static void gemm_run(struct gemm_job *jb, int threads)
{
    gemm_grid(jb, threads);
    cpu_pool_run(threads, jb->pr * jb->pc, gemm_part, jb);
}

void cpu_gemm_fixed(int threads, int ta, int tb, int M, int N, int K, const float *A, int lda,
                    const float *B, int ldb, int beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    /* A and B as stored: the kernels read A either way round (GEMM_AIX),
     * and copy B's strips, transposed where tb */
    struct gemm_job jb = gemm_job_make(M, N, K, A, lda, ta, beta, C, ldc);
    jb.B = B;
    jb.ldb = ldb;
    jb.tb = tb;
    gemm_run(&jb, threads);
}

/* The col of src written out, (m C R S) x (H W): for the scalar kernel. */
static void gemm_im2col(float *col, const struct cpu_gemm_im2col *x)
{
    size_t hw = (size_t)x->h * (size_t)x->w;
    float *d = col;
    for (int q = 0; q < x->m; q++)
        for (int c = 0; c < x->c; c++)
            for (int r = 0; r < x->r; r++)
                for (int s = 0; s < x->s; s++, d += hw)
                    for (int h = 0; h < x->h; h++)
                        for (int w = 0; w < x->w; w++) {
                            int hh = h + r - x->r / 2, ww = w + s - x->s / 2;
                            d[(size_t)h * (size_t)x->w + (size_t)w] =
                                hh >= 0 && hh < x->h && ww >= 0 && ww < x->w
                                    ? x->plane[q][(size_t)c * hw + (size_t)hh * (size_t)x->w + (size_t)ww]
                                    : 0.0f;
                        }
}

void cpu_gemm_fixed_im2col(int threads, int M, const float *A, int lda, const struct cpu_gemm_im2col *src,
                           float *C, int ldc)
{
    int N = src->h * src->w, K = src->m * src->c * src->r * src->s;
    if (M <= 0 || N <= 0)
        return;
    struct gemm_job jb = gemm_job_make(M, N, K, A, lda, 0, 0, C, ldc);
    float *col = NULL;
    if (jb.fn == gemm_scalar) { /* it reads B as stored */
        col = dt_malloc((size_t)K * (size_t)N * sizeof *col);
        gemm_im2col(col, src);
        jb.B = col;
        jb.ldb = N;
    } else {
        jb.bs.im2col = src;
    }
    gemm_run(&jb, threads);
    free(col);
}

/* The packed layout (cpu_gemm.h): for the vector kernels, the whole strips
 * of 2 VW columns one after the other, each K rows of 2 VW floats, then the
 * columns left in strips of VW (the last one's lanes past N unwritten, and
 * never read); for the scalar kernel, op(B) as a K x N matrix. */
size_t cpu_gemm_packed_floats(int N, int K)
{
    int width, rtile;
    gemm_pick(&width, &rtile);
    return (size_t)((N + width - 1) / width) * (size_t)width * (size_t)K;
}

void cpu_gemm_pack_b(float *P, const float *B, int ldb, int tb, int N, int K)
{
    int width, rtile;
    if (gemm_pick(&width, &rtile) == gemm_scalar) {
        for (int k = 0; k < K; k++)
            for (int j = 0; j < N; j++)
                P[(size_t)k * (size_t)N + (size_t)j] = tb ? B[(size_t)j * (size_t)ldb + (size_t)k]
                                                          : B[(size_t)k * (size_t)ldb + (size_t)j];
        return;
    }
    int j = 0, vw = width / 2;
    for (; j + width <= N; j += width, P += (size_t)K * (size_t)width)
        gemm_pack(P, width, B, ldb, tb, j, width, K);
    for (; j < N; j += vw, P += (size_t)K * (size_t)vw)
        gemm_pack(P, vw, B, ldb, tb, j, N - j < vw ? N - j : vw, K);
}

void cpu_gemm_fixed_packed(int threads, int M, int N, int K, const float *A, int lda, int ta, const float *P,
                           int beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    struct gemm_job jb = gemm_job_make(M, N, K, A, lda, ta, beta, C, ldc);
    if (jb.fn == gemm_scalar) { /* P is op(B) as stored */
        jb.B = P;
        jb.ldb = N;
    } else {
        jb.bs.packed = P;
    }
    gemm_run(&jb, threads);
}

void cpu_gemm(const struct cpu_gemm_mode *g, int ta, int tb, int M, int N, int K, const float *A,
              int lda, const float *B, int ldb, int beta, float *C, int ldc)
{
    if (g && g->fixed) {
        cpu_gemm_fixed(g->threads, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, 1.0f, A, lda, B, ldb, beta ? 1.0f : 0.0f, C, ldc);
}
