/* cpu_gemm.h: the cpu backend's matrix products, through OpenBLAS or in
 * divtrace's fixed summation order (cpu_gemm.c states it), which gives the
 * same bits on any CPU, OpenBLAS kernel and thread count. */
#ifndef DT_CPU_GEMM_H
#define DT_CPU_GEMM_H

#include <stddef.h>

struct cpu_gemm_mode {
    int fixed;   /* 0: cblas_sgemm; 1: the fixed order */
    int threads; /* threads of the fixed order's products */
};

/* C (M x N) = op(A) op(B) (+ C when beta), row-major; op transposes with
 * ta, tb. g NULL: OpenBLAS. */
void cpu_gemm(const struct cpu_gemm_mode *g, int ta, int tb, int M, int N, int K, const float *A,
              int lda, const float *B, int ldb, int beta, float *C, int ldc);

/* The fixed order on `threads` threads (the results do not depend on it). */
void cpu_gemm_fixed(int threads, int ta, int tb, int M, int N, int K, const float *A, int lda,
                    const float *B, int ldb, int beta, float *C, int ldc);

/* The col of a stride-1, "same"-padded convolution's input, as a product's
 * B without writing it out: m planes, each (c, h, w), of which row ((q c +
 * ch) r + dr) s + ds, column p = y w + x holds plane q's channel ch at
 * (y + dr - r/2, x + ds - s/2), +0 where that lies outside the image (r and
 * s odd). */
struct cpu_gemm_im2col {
    const float *const *plane;
    int m, c, h, w, r, s;
};

/* C (M x h w) = A (M x m c r s, row stride lda) x the col of src, in the
 * fixed order: the bits of cpu_gemm_fixed on the col written out (beta
 * 0). Each thread makes the strips of its columns from the planes, so no
 * col is written and a part reads only the pixels near its own. */
void cpu_gemm_fixed_im2col(int threads, int M, const float *A, int lda, const struct cpu_gemm_im2col *src,
                           float *C, int ldc);

/* op(B) (K x N; B as stored K x N, or N x K when tb) copied once into the
 * layout the fixed products' kernels read it in (cpu_gemm.c), for
 * products that share it: cpu_gemm_packed_floats(N, K) floats at P. Then
 * C (M x N) = op(A) x op(B) (+ C where beta) in the fixed order, the bits
 * of cpu_gemm_fixed on B as stored. */
size_t cpu_gemm_packed_floats(int N, int K);
void cpu_gemm_pack_b(float *P, const float *B, int ldb, int tb, int N, int K);
void cpu_gemm_fixed_packed(int threads, int M, int N, int K, const float *A, int lda, int ta, const float *P,
                           int beta, float *C, int ldc);

/* The products' pool of threads (cpu_pool.c), for other work whose parts give the same
 * bits whichever thread runs them: fn(arg, p, thread) for p = 0 .. parts -
 * 1, on at most `threads` threads (the calling thread is thread 0, the
 * others 1 .. threads - 1), each taking the next part not yet taken, so
 * that parts run in any order and a thread may run several (one at a
 * time); returns when all are done. One job at a time (callers on other
 * threads wait their turn). */
typedef void cpu_pool_fn(void *arg, int part, int thread);
/* Parts a thread, at most, that callers cut their work into (given work
 * enough): taken one at a time, they let a thread that starts late or runs
 * slow take fewer. The bits are the same for any value; 2 against 4 gave
 * no difference that a one-thread control did not show as well
 * (tests/bench/RESULTS.md). */
#ifndef CPU_POOL_PARTS /* -D for measurement builds */
#define CPU_POOL_PARTS 4
#endif
void cpu_pool_run(int threads, int parts, cpu_pool_fn *fn, void *arg);

/* Other work for the pool's workers while they wait for a job: fn(arg)
 * makes one piece of it and returns 1, or returns 0 when there is none (a
 * worker that gets 1 keeps calling it, and does not sleep meanwhile). A
 * job's parts do not wait for a worker inside fn: the other threads take
 * them. One lender at a time: 0, or -1 when another fn is lent. fn NULL
 * withdraws arg's fn and returns once no worker is inside it. */
typedef int cpu_pool_idle_fn(void *arg);
int cpu_pool_idle(cpu_pool_idle_fn *fn, void *arg);

/* Part p of `parts` of n units: [*i0, *i1), boundaries multiples of align
 * but the last (parts cover 0 .. n - 1 in order, each once). */
void cpu_pool_part(size_t n, int parts, int p, size_t align, size_t *i0, size_t *i1);

#endif
