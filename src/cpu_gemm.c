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
 * library on a CPU without FMA, where it is slow); threads split the
 * columns, never a sum. The kernels are one body compiled for each
 * instruction set and chosen at run time. */
#include "cpu_gemm.h"

#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#include <immintrin.h>
#include <math.h>

/* C[i0..i1) x [j0..j1) of the product: A (M x K, row stride lda), B (K x N,
 * row stride ldb), C (row stride ldc), each step acc = fma(a, b, acc). A
 * tile is MR rows by two vectors of VW columns; the columns past the last
 * whole tile one at a time with fmaf, which rounds as the vector FMA does. */
/* The tile of rows i .. i + R - 1, R a constant: its loops over rows
 * unrolled, so that the accumulators live in registers. */
#define GEMM_TILE(NAME, TARGET, VW, R, V, LOAD, STORE, SET1, FMA, ZERO)                         \
    TARGET static void NAME(int i, int j, int K, const float *A, int lda, const float *bp,      \
                            int ldb, int beta, float *C, int ldc)                              \
    {                                                                                           \
        V acc[R][2];                                                                            \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                   \
        {                                                                                       \
            acc[r][0] = beta ? LOAD(C + (size_t)(i + r) * ldc + j) : ZERO();                    \
            acc[r][1] = beta ? LOAD(C + (size_t)(i + r) * ldc + j + VW) : ZERO();               \
        }                                                                                       \
        const float *a0 = A + (size_t)i * lda;                                                  \
        for (int k = 0; k < K; k++) {                                                           \
            V b0 = LOAD(bp + (size_t)k * ldb), b1 = LOAD(bp + (size_t)k * ldb + VW);            \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                               \
            {                                                                                   \
                V a = SET1(a0[(size_t)r * lda + k]);                                            \
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

#define GEMM_KERNEL(NAME, TARGET, VW, MR, V, LOAD, STORE, SET1, FMA, ZERO)                     \
    GEMM_TILE(NAME##_tile, TARGET, VW, MR, V, LOAD, STORE, SET1, FMA, ZERO)                     \
    GEMM_TILE(NAME##_row, TARGET, VW, 1, V, LOAD, STORE, SET1, FMA, ZERO)                       \
    TARGET static void NAME(int i0, int i1, int j0, int j1, int K, const float *A, int lda,     \
                            const float *B, int ldb, int beta, float *C, int ldc)              \
    {                                                                                           \
        int j = j0, pack = i1 - i0 > MR;                                                        \
        float *strip = pack ? gemm_strip((size_t)K * 2 * VW) : NULL;                            \
        for (; j + 2 * VW <= j1; j += 2 * VW) {                                                 \
            const float *bp = B + j;                                                            \
            int lb = ldb;                                                                       \
            if (pack) { /* the strip's K rows contiguous (a copy, no arithmetic) */            \
                for (int k = 0; k < K; k++)                                                     \
                    memcpy(strip + (size_t)k * 2 * VW, B + (size_t)k * ldb + j,                 \
                           2 * VW * sizeof *strip);                                             \
                bp = strip;                                                                     \
                lb = 2 * VW;                                                                    \
            }                                                                                   \
            int i = i0;                                                                         \
            for (; i + MR <= i1; i += MR)                                                       \
                NAME##_tile(i, j, K, A, lda, bp, lb, beta, C, ldc);                             \
            for (; i < i1; i++)                                                                 \
                NAME##_row(i, j, K, A, lda, bp, lb, beta, C, ldc);                              \
        }                                                                                       \
        for (; j < j1; j++)                                                                     \
            for (int i = i0; i < i1; i++) {                                                     \
                float acc = beta ? C[(size_t)i * ldc + j] : 0.0f;                               \
                for (int k = 0; k < K; k++)                                                     \
                    acc = fmaf(A[(size_t)i * lda + k], B[(size_t)k * ldb + j], acc);            \
                C[(size_t)i * ldc + j] = acc;                                                   \
            }                                                                                   \
    }

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

/* the scalar form: any CPU, slow (fmaf in software where there is no FMA) */
static void gemm_scalar(int i0, int i1, int j0, int j1, int K, const float *A, int lda,
                        const float *B, int ldb, int beta, float *C, int ldc)
{
    for (int j = j0; j < j1; j++)
        for (int i = i0; i < i1; i++) {
            float acc = beta ? C[(size_t)i * ldc + j] : 0.0f;
            for (int k = 0; k < K; k++)
                acc = fmaf(A[(size_t)i * lda + k], B[(size_t)k * ldb + j], acc);
            C[(size_t)i * ldc + j] = acc;
        }
}

GEMM_KERNEL(gemm_avx2, __attribute__((target("avx2,fma"))), 8, 6, __m256, _mm256_loadu_ps,
            _mm256_storeu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_setzero_ps)
GEMM_KERNEL(gemm_avx512, __attribute__((target("avx512f"))), 16, 8, __m512, _mm512_loadu_ps,
            _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_setzero_ps)

typedef void gemm_fn(int, int, int, int, int, const float *, int, const float *, int, int,
                     float *, int);

/* The widest kernel this CPU runs; DIVTRACE_CPU_GEMM_ISA=scalar or avx2
 * (for testing that every kernel gives the same bits) caps it. */
static gemm_fn *gemm_pick(int *width)
{
    __builtin_cpu_init();
    const char *cap = getenv("DIVTRACE_CPU_GEMM_ISA");
    int scalar = cap && strcmp(cap, "scalar") == 0, avx2 = cap && strcmp(cap, "avx2") == 0;
    if (scalar) {
        *width = 16;
        return gemm_scalar;
    }
    if (!avx2 && __builtin_cpu_supports("avx512f")) {
        *width = 32;
        return gemm_avx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *width = 16;
        return gemm_avx2;
    }
    *width = 16;
    return gemm_scalar;
}

/* ---- a pool of threads, one fork-join at a time ----------------------------- */

struct gemm_job {
    gemm_fn *fn;
    int M, N, K, lda, ldb, ldc, beta, parts, width;
    const float *A, *B;
    float *C;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    int nthreads;      /* workers started (the caller is part 0) */
    unsigned gen;      /* bumped for each job */
    int pending;       /* workers not done with this job */
    const struct gemm_job *job;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0,
          NULL};

/* Part p of the job: a range of columns, whole tiles, fixed by the job's
 * shape and part count (the order inside each element is the same anyway). */
static void gemm_part(const struct gemm_job *jb, int p)
{
    int tiles = (jb->N + jb->width - 1) / jb->width;
    int t0 = (int)((long)tiles * p / jb->parts), t1 = (int)((long)tiles * (p + 1) / jb->parts);
    int j0 = t0 * jb->width, j1 = t1 * jb->width < jb->N ? t1 * jb->width : jb->N;
    if (j0 < j1)
        jb->fn(0, jb->M, j0, j1, jb->K, jb->A, jb->lda, jb->B, jb->ldb, jb->beta, jb->C, jb->ldc);
}

static void *gemm_worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    unsigned seen = 0;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.gen == seen)
            pthread_cond_wait(&pool.go, &pool.mu);
        seen = pool.gen;
        const struct gemm_job *jb = pool.job;
        pthread_mutex_unlock(&pool.mu);
        if (id < jb->parts)
            gemm_part(jb, id);
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* Run the job in `parts` parts on this thread and parts - 1 workers. */
static void gemm_run(const struct gemm_job *jb)
{
    if (jb->parts <= 1) {
        gemm_part(jb, 0);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    while (pool.nthreads < jb->parts - 1) {
        pthread_t t;
        if (pthread_create(&t, NULL, gemm_worker, (void *)(intptr_t)(pool.nthreads + 1)) != 0)
            break;
        pthread_detach(t);
        pool.nthreads++;
    }
    struct gemm_job local = *jb;
    if (local.parts > pool.nthreads + 1) /* fewer workers than asked: fewer parts */
        local.parts = pool.nthreads + 1;
    pool.job = &local;
    pool.pending = pool.nthreads;
    pool.gen++;
    pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.mu);
    gemm_part(&local, 0);
    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}

/* ---- the entry ------------------------------------------------------------------ */

static _Thread_local struct {
    float *p[2];
    size_t n[2];
} gemm_ws;

static float *gemm_scratch(int k, size_t n)
{
    if (gemm_ws.n[k] < n) {
        free(gemm_ws.p[k]);
        gemm_ws.p[k] = dt_malloc(n * sizeof(float));
        gemm_ws.n[k] = n;
    }
    return gemm_ws.p[k];
}

/* X (rows x cols, row stride *ld) as it is, or, transposed (t: stored as
 * cols x rows with stride ldx), copied into scratch k row-major. */
static const float *gemm_operand(int k, int t, const float *X, int ldx, int rows, int cols, int *ld)
{
    *ld = ldx;
    if (!t)
        return X;
    float *p = gemm_scratch(k, (size_t)rows * cols + 1);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            p[(size_t)i * cols + j] = X[(size_t)j * ldx + i];
    *ld = cols;
    return p;
}

void cpu_gemm_fixed(int threads, int ta, int tb, int M, int N, int K, const float *A, int lda,
                    const float *B, int ldb, int beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    struct gemm_job jb = {.M = M, .N = N, .K = K, .ldc = ldc, .beta = beta, .C = C};
    jb.fn = gemm_pick(&jb.width);
    /* op(A) as M x K and op(B) as K x N, row-major (a copy only when transposed) */
    jb.A = gemm_operand(0, ta, A, lda, M, K, &jb.lda);
    jb.B = gemm_operand(1, tb, B, ldb, K, N, &jb.ldb);
    int tiles = (N + jb.width - 1) / jb.width;
    jb.parts = threads < tiles ? threads : tiles;
    if ((long)M * N * K < 32768) /* too small to share */
        jb.parts = 1;
    gemm_run(&jb);
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
