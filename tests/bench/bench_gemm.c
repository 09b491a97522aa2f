/* bench_gemm.c: the cpu backend's fixed-order matrix product (--cpu-gemm
 * fixed, src/cpu_gemm.c) against OpenBLAS's sgemm, at 1 and 2 threads, on
 * the products of the autoencoder and of PredNet's convolutions (thread
 * counts: the arguments, default 1 and 2); medians
 * of 9 rounds, the fixed product's first: OpenBLAS's idle threads spin for
 * a while after each call and would take the cores from rounds that
 * alternate with them. The OpenBLAS kernel is the one this process runs
 * (OPENBLAS_CORETYPE chooses another); its name is printed. Prints a
 * Markdown table of GFLOP/s and the ratio fixed / OpenBLAS. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"
#include "cpu_gemm.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int tlist[16] = {1, 2}, nt = 2;
    if (argc > 1) {
        nt = 0;
        for (int a = 1; a < argc && nt < 16; a++) {
            int t = atoi(argv[a]);
            if (t < 1 || t > 1024) {
                fprintf(stderr, "bench_gemm: thread count '%s' is not 1 to 1024\n", argv[a]);
                return 2;
            }
            tlist[nt++] = t;
        }
    }
    static const struct {
        const char *what;
        int M, N, K;
    } shapes[] = {
        {"autoencoder enc1 forward (batch 100)", 100, 128, 784},
        {"autoencoder enc1 weight gradient", 128, 784, 100},
        {"PredNet L0 gate conv (1 x 4096 x 171)", 1, 4096, 171},
        {"PredNet L0 gates as one product (4 x 4096 x 171)", 4, 4096, 171},
        {"PredNet L1 gate conv (16 x 1024 x 720)", 16, 1024, 720},
        {"PredNet L2 gate conv (32 x 256 x 1440)", 32, 256, 1440},
        {"PredNet L3 gate conv (64 x 64 x 1728)", 64, 64, 1728},
    };
    printf("OpenBLAS kernel: %s\n\n", openblas_get_corename());
    printf("| product | M x N x K | threads | OpenBLAS GFLOP/s | fixed GFLOP/s | fixed / OpenBLAS |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: |\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s].M, N = shapes[s].N, K = shapes[s].K;
        float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
        float *C = malloc(sizeof(float) * (size_t)M * N);
        if (!A || !B || !C)
            return 2;
        uint64_t x = 12345;
        for (size_t i = 0; i < (size_t)M * K; i++)
            A[i] = (float)((x = x * 6364136223846793005u + 1) >> 40) * 0x1p-24f - 0.5f;
        for (size_t i = 0; i < (size_t)K * N; i++)
            B[i] = (float)((x = x * 6364136223846793005u + 1) >> 40) * 0x1p-24f - 0.5f;
        double flop = 2.0 * M * N * K;
        /* rounds of about 1 GFLOP: longer than OpenBLAS's workers spin on
         * after its previous rounds (they would take the cores from the fixed
         * product's first rounds) */
        int reps = (int)(1e9 / flop) + 1;
        for (int ti = 0; ti < nt; ti++) {
            int threads = tlist[ti];
            openblas_set_num_threads(threads);
            double to[9], tf[9];
            for (int r = 0; r < 9; r++) {
                double t = now();
                for (int q = 0; q < reps; q++)
                    cpu_gemm_fixed(threads, 0, 0, M, N, K, A, K, B, N, 0, C, N);
                tf[r] = now() - t;
            }
            for (int r = 0; r < 9; r++) {
                double t = now();
                for (int q = 0; q < reps; q++)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N,
                                0.0f, C, N);
                to[r] = now() - t;
            }
            double go = flop * reps / bench_median(to, 9) * 1e-9;
            double gf = flop * reps / bench_median(tf, 9) * 1e-9;
            printf("| %s | %d x %d x %d | %d | %.1f | %.1f | %.2f |\n", shapes[s].what, M, N, K,
                   threads, go, gf, gf / go);
        }
        free(A);
        free(B);
        free(C);
    }
    return 0;
}
