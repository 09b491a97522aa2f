/* test_cpu_gemm.c: the fixed-order matrix product (src/cpu_gemm.c) against
 * its definition written out here: acc = beta ? C : +0, then acc = fmaf(a,
 * b, acc) for k = 0 .. K-1. Every shape class (whole tiles, edge rows and
 * columns, K = 0, transposes, beta 1), signed zeros and wide exponents, on
 * every kernel this CPU runs (DIVTRACE_CPU_GEMM_ISA) and 1 to 7 threads
 * (rows and columns split between them; leftover rows in tiles of 4, 2, 1;
 * products of 1 to 3 rows with B's rows read in blocks of k):
 * bitwise equal to the definition, hence to each other; the product whose
 * B is a convolution's col made strip by strip from its input, and the one
 * whose B is packed once for several products; products on
 * several threads in a child made by fork(); and the pool that runs them
 * (every part once, on no more threads than asked, a busy thread's parts
 * taken by the others, two callers at once). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu_gemm.h"
#include "test_util.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;

static float rval(void)
{
    uint64_t u = tu_rand_u64(&rng);
    switch (u % 8) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return ldexpf((float)(int)(u >> 8 & 0xff) - 128.0f, (int)(u >> 20 & 31) - 16);
    default: return (float)tu_rand_uniform(&rng, -1, 1) * ldexpf(1.0f, (int)(u >> 24 & 7) - 3);
    }
}

/* the definition, one element at a time */
static void reference(int ta, int tb, int M, int N, int K, const float *A, int lda,
                      const float *B, int ldb, int beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = beta ? C[(size_t)i * ldc + j] : 0.0f;
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                acc = fmaf(a, b, acc);
            }
            C[(size_t)i * ldc + j] = acc;
        }
}

static void one_case(int M, int N, int K, int ta, int tb, int beta, int threads)
{
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    size_t na = (size_t)(ta ? K : M) * lda + 1, nb = (size_t)(tb ? N : K) * ldb + 1;
    size_t nc = (size_t)M * ldc + 1;
    float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B);
    float *C = malloc(nc * sizeof *C), *R = malloc(nc * sizeof *R);
    assert_true(A && B && C && R);
    for (size_t i = 0; i < na; i++)
        A[i] = rval();
    for (size_t i = 0; i < nb; i++)
        B[i] = rval();
    for (size_t i = 0; i < nc; i++)
        C[i] = R[i] = rval();
    cpu_gemm_fixed(threads, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    reference(ta, tb, M, N, K, A, lda, B, ldb, beta, R, ldc);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
            size_t at = (size_t)i * ldc + j;
            if (memcmp(&C[at], &R[at], sizeof *C) != 0)
                fail_msg("%dx%dx%d ta %d tb %d beta %d threads %d isa %s: C[%d][%d] %a, want %a", M,
                         N, K, ta, tb, beta, threads, getenv("DIVTRACE_CPU_GEMM_ISA"), i, j,
                         (double)C[at], (double)R[at]);
        }
    free(A);
    free(B);
    free(C);
    free(R);
}

static void test_fixed_order(void **state)
{
    (void)state;
    static const char *const isas[] = {"scalar", "avx2", "any"};
    static const int shapes[][3] = {{1, 1, 1},   {3, 5, 0},    {6, 16, 7},  {8, 32, 9},
                                    {9, 33, 17}, {13, 70, 31}, {4, 129, 5}, {40, 96, 60},
                                    {17, 250, 3}, {15, 40, 23}, {30, 20, 50}, {64, 64, 64},
                                    {100, 128, 33}, {1, 300, 40},  {2, 77, 19},  {3, 200, 35},
                                    {1, 45, 9},     {3, 19, 8},    {2, 520, 171}};
    for (int s = 0; s < 3; s++) {
        if (strcmp(isas[s], "any") == 0)
            unsetenv("DIVTRACE_CPU_GEMM_ISA");
        else
            setenv("DIVTRACE_CPU_GEMM_ISA", isas[s], 1);
        for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
            for (int t = 0; t < 4; t++)
                one_case(shapes[c][0], shapes[c][1], shapes[c][2], t & 1, t >> 1 & 1, (int)(c & 1),
                         1 + (int)((c + (size_t)t) % 4) + (c % 3 == 2 ? 3 : 0));
    }
    unsetenv("DIVTRACE_CPU_GEMM_ISA");
}

/* The col of m planes of (c, h, w), written out from its definition
 * (cpu_gemm.h): row ((q c + ch) r + dr) s + ds, column y w + x. */
static void im2col_def(float *col, const float *const *plane, int m, int c, int h, int w, int r, int s)
{
    size_t hw = (size_t)h * (size_t)w, row = 0;
    for (int q = 0; q < m; q++)
        for (int ch = 0; ch < c; ch++)
            for (int dr = 0; dr < r; dr++)
                for (int ds = 0; ds < s; ds++, row++)
                    for (int y = 0; y < h; y++)
                        for (int x = 0; x < w; x++) {
                            int yy = y + dr - r / 2, xx = x + ds - s / 2;
                            col[row * hw + (size_t)y * (size_t)w + (size_t)x] =
                                yy < 0 || yy >= h || xx < 0 || xx >= w
                                    ? 0.0f
                                    : plane[q][(size_t)ch * hw + (size_t)yy * (size_t)w + (size_t)xx];
                        }
}

static void isa_set(const char *isa)
{
    if (strcmp(isa, "any") == 0)
        unsetenv("DIVTRACE_CPU_GEMM_ISA");
    else
        setenv("DIVTRACE_CPU_GEMM_ISA", isa, 1);
}

/* The product with the col made strip by strip from the planes against the
 * definition on the col written out, bit for bit: images narrower than a
 * vector, rows of a strip on two or more image rows, R != S, 1x1, 7x7 (more
 * taps than a block of masks), 1 to 4 planes, 1 to 4 threads. Each plane
 * lies between NaN guards, so a tap read outside the image would show. */
static void test_im2col(void **state)
{
    (void)state;
    static const char *const isas[] = {"scalar", "avx2", "any"};
    static const int shapes[][7] = {/* m, c, h, w, r, s, M */
                                    {1, 1, 1, 1, 3, 3, 1},  {1, 3, 5, 7, 3, 3, 4},   {2, 2, 8, 8, 3, 3, 8},
                                    {1, 3, 5, 7, 5, 3, 7},  {4, 2, 9, 13, 3, 5, 13}, {1, 19, 16, 16, 3, 3, 4},
                                    {3, 1, 4, 3, 1, 1, 2},  {1, 2, 11, 9, 7, 7, 9},  {1, 5, 3, 40, 3, 3, 6},
                                    {2, 4, 6, 17, 1, 3, 17}, {1, 6, 8, 8, 3, 3, 64}, {4, 3, 16, 33, 3, 3, 3}};
    for (int i = 0; i < 3; i++) {
        isa_set(isas[i]);
        for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
            const int *sh = shapes[c];
            int m = sh[0], M = sh[6], N = sh[2] * sh[3], K = sh[0] * sh[1] * sh[4] * sh[5];
            size_t pn = (size_t)sh[1] * (size_t)N, guard = 64;
            float *planes[4], *A = malloc((size_t)M * (size_t)K * sizeof *A);
            float *col = malloc((size_t)K * (size_t)N * sizeof *col);
            float *C = malloc((size_t)M * (size_t)N * sizeof *C), *R = malloc((size_t)M * (size_t)N * sizeof *R);
            assert_true(A && col && C && R);
            const float *pl[4];
            for (int q = 0; q < m; q++) {
                planes[q] = malloc((pn + 2 * guard) * sizeof *planes[q]);
                assert_non_null(planes[q]);
                for (size_t e = 0; e < pn + 2 * guard; e++)
                    planes[q][e] = e < guard || e >= guard + pn ? NAN : rval();
                pl[q] = planes[q] + guard;
            }
            for (size_t e = 0; e < (size_t)M * (size_t)K; e++)
                A[e] = rval();
            im2col_def(col, pl, m, sh[1], sh[2], sh[3], sh[4], sh[5]);
            reference(0, 0, M, N, K, A, K, col, N, 0, R, N);
            struct cpu_gemm_im2col src = {pl, m, sh[1], sh[2], sh[3], sh[4], sh[5]};
            int threads = 1 + (int)(c % 4);
            cpu_gemm_fixed_im2col(threads, M, A, K, &src, C, N);
            for (size_t e = 0; e < (size_t)M * (size_t)N; e++)
                if (memcmp(&C[e], &R[e], sizeof *C) != 0)
                    fail_msg("im2col shape %zu (m %d, %dx%dx%d, kernel %dx%d, M %d) isa %s, %d threads: "
                             "C[%zu] %a, want %a",
                             c, m, sh[1], sh[2], sh[3], sh[4], sh[5], M, isas[i], threads, e, (double)C[e],
                             (double)R[e]);
            for (int q = 0; q < m; q++)
                free(planes[q]);
            free(A);
            free(col);
            free(C);
            free(R);
        }
    }
    unsetenv("DIVTRACE_CPU_GEMM_ISA");
}

/* B packed once (cpu_gemm_pack_b) and the product on it against the
 * definition on B as stored, bit for bit: both layouts of A and B, beta,
 * strips whole and partial, 1 to 4 threads, every kernel. */
static void test_packed(void **state)
{
    (void)state;
    static const char *const isas[] = {"scalar", "avx2", "any"};
    static const int shapes[][3] = {{1, 1, 1}, {5, 7, 3}, {24, 16, 100}, {30, 64, 64}, {7, 40, 33},
                                    {48, 9, 1024}, {13, 33, 17}, {2, 100, 5}};
    for (int i = 0; i < 3; i++) {
        isa_set(isas[i]);
        for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
            for (int t = 0; t < 4; t++) {
                int M = shapes[c][0], N = shapes[c][1], K = shapes[c][2], ta = t & 1, tb = t >> 1;
                int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 3, ldc = N + 1, beta = (int)((c + (size_t)t) & 1);
                size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
                float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B), *C = malloc(nc * sizeof *C);
                float *R = malloc(nc * sizeof *R), *P = malloc(cpu_gemm_packed_floats(N, K) * sizeof *P);
                assert_true(A && B && C && R && P);
                for (size_t e = 0; e < na; e++)
                    A[e] = rval();
                for (size_t e = 0; e < nb; e++)
                    B[e] = rval();
                for (size_t e = 0; e < nc; e++)
                    C[e] = R[e] = rval();
                reference(ta, tb, M, N, K, A, lda, B, ldb, beta, R, ldc);
                cpu_gemm_pack_b(P, B, ldb, tb, N, K);
                int threads = 1 + (int)((c + (size_t)t) % 4);
                cpu_gemm_fixed_packed(threads, M, N, K, A, lda, ta, P, beta, C, ldc);
                for (size_t e = 0; e < nc; e++)
                    if (memcmp(&C[e], &R[e], sizeof *C) != 0)
                        fail_msg("packed %dx%dx%d ta %d tb %d beta %d isa %s, %d threads: C[%zu] %a, want %a", M,
                                 N, K, ta, tb, beta, isas[i], threads, e, (double)C[e], (double)R[e]);
                free(A);
                free(B);
                free(C);
                free(R);
                free(P);
            }
    }
    unsetenv("DIVTRACE_CPU_GEMM_ISA");
}

/* A child made by fork() after products on several threads (report's
 * workers are such children) has none of the parent's workers: its own
 * products on several threads must still finish, and be right. The child's
 * alarm turns a hang into a failure. */
static void test_after_fork(void **state)
{
    (void)state;
    one_case(40, 96, 60, 0, 0, 0, 4); /* the parent's workers start */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(120);
        one_case(40, 96, 60, 0, 1, 1, 4);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- the pool ------------------------------------------------------------------ */

struct pool_count {
    atomic_int runs[64];   /* per part: times run */
    atomic_int bad_thread; /* a part ran on a thread index out of range */
    int threads, parts;
};

static void pool_count_part(void *arg, int p, int thread)
{
    struct pool_count *c = arg;
    if (p < 0 || p >= c->parts || thread < 0 || thread >= c->threads || thread >= c->parts)
        atomic_store(&c->bad_thread, 1);
    else
        atomic_fetch_add(&c->runs[p], 1);
}

/* Every part runs exactly once, on thread indices below both the threads
 * asked for and the parts, for 1 to 6 threads and 0 to 64 parts. */
static void test_pool_parts(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 6; threads++)
        for (int parts = 0; parts <= 64; parts += parts < 10 ? 1 : 9) {
            struct pool_count c = {.threads = threads, .parts = parts};
            cpu_pool_run(threads, parts, pool_count_part, &c);
            assert_int_equal(atomic_load(&c.bad_thread), 0);
            for (int p = 0; p < parts; p++)
                if (atomic_load(&c.runs[p]) != 1)
                    fail_msg("threads %d, parts %d: part %d ran %d times", threads, parts, p,
                             atomic_load(&c.runs[p]));
        }
}

/* Parts go to whichever thread is free: while the calling thread is held
 * in the first part it takes, the other thread must take and finish every
 * other part (with parts dealt out in fixed shares it would wait for the
 * caller's share, and the bounded wait below would fail). */
struct pool_hold {
    atomic_int done;       /* parts finished */
    atomic_int held_first; /* the caller's first part saw all others done */
    int parts;
};

static void pool_hold_part(void *arg, int p, int thread)
{
    struct pool_hold *h = arg;
    (void)p;
    if (thread == 0 && atomic_load(&h->done) == 0) {
        /* wait (bounded, polling the state) for the other parts */
        for (long spin = 0; spin < 1000000000L && atomic_load(&h->done) < h->parts - 1; spin++)
            if (spin % 1024 == 0)
                sched_yield();
        atomic_store(&h->held_first, atomic_load(&h->done) == h->parts - 1);
    }
    atomic_fetch_add(&h->done, 1);
}

static void test_pool_takes(void **state)
{
    (void)state;
    struct pool_hold h = {.parts = 12};
    cpu_pool_run(2, h.parts, pool_hold_part, &h);
    assert_int_equal(atomic_load(&h.done), h.parts);
    assert_int_equal(atomic_load(&h.held_first), 1);
}

/* Two threads calling the pool at once: each job's parts all run, once. */
static void *pool_caller(void *arg)
{
    for (int r = 0; r < 200; r++) {
        struct pool_count c = {.threads = 3, .parts = 1 + r % 40};
        cpu_pool_run(3, c.parts, pool_count_part, &c);
        for (int p = 0; p < c.parts; p++)
            if (atomic_load(&c.runs[p]) != 1 || atomic_load(&c.bad_thread))
                return (void *)1;
    }
    return NULL;
}

static void test_pool_two_callers(void **state)
{
    (void)state;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pool_caller, NULL), 0);
    void *mine = pool_caller(NULL), *theirs = NULL;
    pthread_join(t, &theirs);
    assert_null(mine);
    assert_null(theirs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fixed_order), cmocka_unit_test(test_im2col),
                                       cmocka_unit_test(test_packed), cmocka_unit_test(test_after_fork),
                                       cmocka_unit_test(test_pool_parts), cmocka_unit_test(test_pool_takes),
                                       cmocka_unit_test(test_pool_two_callers)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
