/* bench_cpu_step.c: training step time on the cpu backend, with OpenBLAS's
 * products and with --cpu-gemm fixed, tracing off and at trace level op,
 * at the thread counts given, for the configurations of the PyTorch
 * comparison that a CPU runs in reasonable time: the autoencoder at batch
 * 100 and PredNet 1,16,32,64 at 64x64 (nt 20, batch 1). Rounds alternate
 * the four variants so that machine noise hits them alike; ms per step over
 * the steps after the first three, median of the rounds. The IDX data
 * directory is the default one or $DIVTRACE_DATA.
 * Usage: bench_cpu_step [--rounds N] [--tsv] [--fixed] [CONF...] [-- THREADS...]
 * CONF: ae or pn1 (default both); THREADS: default 1 2. --tsv: one line per
 * configuration and thread count, tab-separated (key, threads, then the ms
 * of openblas off, openblas op, fixed off, fixed op), for
 * tests/bench/cpu_speed.sh; else a Markdown table. --fixed: the fixed
 * products' variants only (the OpenBLAS ones print as nan). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"
#include "util.h"
#include "bench_util.h"
#include "bench_gpu_confs.h"

static int bench_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    int rounds = 3, tsv = 0, fixed_only = 0, nthreads = 0, threads[16];
    char want[BENCH_GPU_NCONF] = {0};
    int any = 0, a = 1;
    for (; a < argc && strcmp(argv[a], "--") != 0; a++) {
        if (strcmp(argv[a], "--rounds") == 0 && a + 1 < argc) {
            if (bench_int(argv[++a], 1, 8, &rounds) < 0) {
                fprintf(stderr, "bench_cpu_step: --rounds '%s': expected 1 to 8\n", argv[a]);
                return 2;
            }
        } else if (strcmp(argv[a], "--tsv") == 0) {
            tsv = 1;
        } else if (strcmp(argv[a], "--fixed") == 0) {
            fixed_only = 1;
        } else {
            int k = bench_gpu_conf_find(argv[a]);
            if (k != 0 && k != 1) {
                fprintf(stderr,
                        "bench_cpu_step: unknown argument '%s' (--rounds N, --tsv, --fixed, ae, pn1, -- THREADS...)\n",
                        argv[a]);
                return 2;
            }
            want[k] = any = 1;
        }
    }
    for (a++; a < argc && nthreads < 16; a++)
        if (bench_int(argv[a], 1, 1024, &threads[nthreads++]) < 0) {
            fprintf(stderr, "bench_cpu_step: thread count '%s' is not 1 to 1024\n", argv[a]);
            return 2;
        }
    if (nthreads == 0) {
        threads[0] = 1;
        threads[1] = 2;
        nthreads = 2;
    }
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/bench_cpu_step.dtr", dir);
    if (!tsv) {
        printf("| configuration | threads | OpenBLAS, off | OpenBLAS, op | fixed, off | fixed, op |\n");
        printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    }
    for (int ci = 0; ci < 2; ci++) {
        const struct bench_gpu_conf *cf = bench_gpu_conf(ci);
        if (any && !want[ci])
            continue;
        for (int ti = 0; ti < nthreads; ti++) {
            double ms[4][8];
            for (int r = 0; r < rounds; r++)
                for (int v = 0; v < 4; v++) { /* openblas off, op; fixed off, op */
                    if (fixed_only && v < 2) {
                        ms[v][r] = NAN;
                        continue;
                    }
                    struct train_config tc;
                    if (bench_gpu_conf_setup(&tc, cf, "cpu", NULL) < 0)
                        return 2;
                    tc.threads = threads[ti];
                    tc.cpu_gemm = v >= 2 ? "fixed" : NULL;
                    tc.steps = ci == 0 ? 300 : 8;
                    tc.steps_given = 1;
                    tc.quiet = 1;
                    tc.out = path;
                    tc.notrace = !(v & 1);
                    tc.ckpt_every = 100000;
                    if (train_finish_config(&tc) < 0) {
                        fprintf(stderr, "bench_cpu_step: %s\n", dt_error());
                        return 2;
                    }
                    struct train_result res;
                    if (train_run(&tc, &res) < 0) {
                        fprintf(stderr, "bench_cpu_step: %s: %s\n", cf->what, dt_error());
                        return 2;
                    }
                    ms[v][r] = 1e3 * res.warm_seconds / (double)(res.steps - 3);
                }
            double m[4];
            for (int v = 0; v < 4; v++)
                m[v] = bench_median(ms[v], rounds);
            if (tsv)
                printf("%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\n", cf->key, threads[ti], m[0], m[1], m[2], m[3]);
            else
                printf("| %s | %d | %.3f | %.3f (%+.1f%%) | %.3f | %.3f (%+.1f%%) |\n", cf->what, threads[ti], m[0],
                       m[1], 100.0 * (m[1] / m[0] - 1.0), m[2], m[3], 100.0 * (m[3] / m[2] - 1.0));
            fflush(stdout);
        }
    }
    remove(path);
    if (!tsv)
        printf("\n(%d alternating rounds; ms per step over the steps after the first three)\n", rounds);
    return 0;
}
