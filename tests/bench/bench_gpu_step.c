/* bench_gpu_step.c: training step time on the GPU backends (cuda tree,
 * cudnn deterministic) with tracing off and at trace level op, for the
 * configurations of the PyTorch comparison (tests/bench/torch_models.py):
 * the autoencoder at batch 100, PredNet 1,16,32,64 at 64x64 (nt 20, batch 1
 * and 4) and the KITTI-sized PredNet 3,48,96,192 at 128x160 (nt 10, batch
 * 4, on random 3-channel frames written to a temporary .npy). Rounds
 * alternate tracing off, on, and off with every op on one CUDA stream
 * (--streams 1; the default spreads ops over 4). The IDX data directory is the default one
 * or $DIVTRACE_DATA. Prints Markdown; exits 77 without a GPU.
 * Usage: bench_gpu_step [--quick] [--rounds N] [--backend cuda|cudnn] [--cudnn-algo A]
 *                       [--no-streams1] [--pin-algos] [--step-wait] [CONF...]
 * N: 1 to 8 (default 3, 1 with --quick); CONF: ae, pn1, pn4 or kitti (default: all four).
 * --cudnn-algo A: the cudnn rows run with divtrace record's --cudnn-algo A
 * (fastest: cuDNN's timed, possibly nondeterministic choice), their
 * backend column "cudnn A"; the cuda rows are as before. --no-streams1:
 * rounds of tracing off and on only, the --streams 1 column "-"
 * (tests/bench/gpu_speed.sh). --pin-algos: the cudnn rows' algorithms
 * are chosen once, by a short traced run before the rounds (its trace
 * header's cudnn_algos), and every round runs those, as a replay does; so
 * that with --cudnn-algo fastest, whose timed choice is made again by
 * every run, the off and op columns differ by the tracing alone (backend
 * column "cudnn A pinned"). --step-wait: every step is waited for before
 * the next one is queued, as before divtrace record overlapped them (to
 * measure what that overlap buys, in calls alternating with and without). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "trace.h"
#include "train.h"
#include "util.h"
#include "bench_util.h"
#include "bench_gpu_confs.h"

static int bench_step_wait; /* --step-wait */

/* One run of conf cf on backend be: its ms per step after the first three
 * (the first runs eagerly, the next two are captured as CUDA graphs), or
 * -1 with the error printed. */
static double bench_gpu_run(const struct bench_gpu_conf *cf, const char *be, const char *npy,
                            const char *cudnn_algo, const char *algos, uint64_t steps, int traced,
                            int streams, const char *path)
{
    struct train_config tc;
    if (bench_gpu_conf_setup(&tc, cf, be, npy) < 0)
        return -1;
    if (strcmp(be, "cudnn") == 0) {
        tc.cudnn_algo = cudnn_algo;
        tc.cudnn_algos = algos;
    }
    tc.steps = steps;
    tc.steps_given = 1;
    tc.quiet = 1;
    tc.out = path;
    tc.notrace = !traced;
    tc.streams = streams;
    tc.ckpt_every = 100000;
    tc.step_wait = bench_step_wait;
    struct train_result res;
    if (train_finish_config(&tc) < 0 || train_run(&tc, &res) < 0) {
        fprintf(stderr, "bench_gpu_step: %s: %s\n", cf->what, dt_error());
        return -1;
    }
    return 1e3 * res.warm_seconds / (double)(res.steps - 3);
}

/* The algorithms a short traced run of cf on cudnn chose (its header's
 * cudnn_algos), malloc'd: "" for a model without convolutions (nothing to
 * pin); NULL with the error printed. */
static char *bench_gpu_algos(const struct bench_gpu_conf *cf, const char *npy, const char *cudnn_algo,
                             const char *path)
{
    if (bench_gpu_run(cf, "cudnn", npy, cudnn_algo, NULL, 4, 1, 0, path) < 0)
        return NULL;
    struct trace_file *tf;
    if (trace_open(&tf, path) < 0) {
        fprintf(stderr, "bench_gpu_step: %s\n", dt_error());
        return NULL;
    }
    const char *v = trace_config_get(&tf->cfg, "cudnn_algos");
    char *algos = v ? dt_strdup(strncmp(v, "none", 4) == 0 ? "" : v) : NULL;
    trace_close(tf);
    if (!algos)
        fprintf(stderr, "bench_gpu_step: %s: the trace has no cudnn_algos\n", cf->what);
    return algos;
}

int main(int argc, char **argv)
{
    int quick = 0, rounds = 0, no_streams1 = 0, pin = 0;
    const char *only_backend = NULL, *cudnn_algo = NULL;
    char want[BENCH_GPU_NCONF] = {0};
    int any = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[a], "--rounds") == 0 && a + 1 < argc) {
            char *end;
            long v = strtol(argv[++a], &end, 10);
            if (*argv[a] == 0 || *end || v < 1 || v > 8) {
                fprintf(stderr, "bench_gpu_step: --rounds '%s': expected 1 to 8\n", argv[a]);
                return 2;
            }
            rounds = (int)v;
        } else if (strcmp(argv[a], "--backend") == 0 && a + 1 < argc) {
            only_backend = argv[++a];
        } else if (strcmp(argv[a], "--cudnn-algo") == 0 && a + 1 < argc) {
            cudnn_algo = argv[++a];
        } else if (strcmp(argv[a], "--no-streams1") == 0) {
            no_streams1 = 1;
        } else if (strcmp(argv[a], "--pin-algos") == 0) {
            pin = 1;
        } else if (strcmp(argv[a], "--step-wait") == 0) {
            bench_step_wait = 1;
        } else {
            int k = bench_gpu_conf_find(argv[a]);
            if (k < 0) {
                fprintf(stderr, "bench_gpu_step: unknown argument '%s' (--quick, --rounds N, --backend B, "
                        "--cudnn-algo A, --no-streams1, --pin-algos, --step-wait, ae, pn1, pn4, kitti)\n",
                        argv[a]);
                return 2;
            }
            want[k] = any = 1;
        }
    }
    if (bench_gpu_probe("bench_gpu_step") != 0)
        return 77;
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[512], npy[512];
    snprintf(path, sizeof path, "%s/bench_gpu_step.dtr", dir);
    snprintf(npy, sizeof npy, "%s/bench_gpu_kitti.npy", dir);
    if (bench_write_npy(npy, 8, 10, 128, 160, 3, 12345) < 0) {
        fprintf(stderr, "bench_gpu_step: cannot write %s\n", npy);
        return 2;
    }
    static const char *const backends[] = {"cuda", "cudnn"};
    if (rounds <= 0)
        rounds = quick ? 1 : 3;
    printf("| configuration | backend | median ms/step, tracing off | trace level op | overhead |"
           " tracing off, --streams 1 |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: |\n");
    for (int ci = 0; ci < BENCH_GPU_NCONF; ci++)
        for (int bi = 0; bi < 2; bi++) {
            const struct bench_gpu_conf *cf = bench_gpu_conf(ci);
            if ((any && !want[ci]) || (only_backend && strcmp(only_backend, backends[bi]) != 0))
                continue;
            int cudnn = strcmp(backends[bi], "cudnn") == 0;
            double ms[3][8];
            uint64_t steps = strcmp(cf->model, "autoencoder") == 0 ? (quick ? 100 : 400) : (quick ? 5 : 20);
            char *algos = NULL;
            if (cudnn && pin && !(algos = bench_gpu_algos(cf, npy, cudnn_algo, path)))
                return 2;
            for (int r = 0; r < rounds; r++)
                for (int v = 0; v < (no_streams1 ? 2 : 3); v++) { /* off, op, off on one stream */
                    ms[v][r] = bench_gpu_run(cf, backends[bi], npy, cudnn_algo, algos && *algos ? algos : NULL,
                                             steps, v == 1, v == 2 ? 1 : 0, path);
                    if (ms[v][r] < 0)
                        return 2;
                }
            free(algos);
            double off = bench_median(ms[0], rounds), on = bench_median(ms[1], rounds);
            char one[32] = "-";
            if (!no_streams1)
                snprintf(one, sizeof one, "%.3f", bench_median(ms[2], rounds));
            printf("| %s | %s%s%s%s | %.3f | %.3f | %+.1f%% | %s |\n", cf->what, backends[bi],
                   cudnn && cudnn_algo ? " " : "", cudnn && cudnn_algo ? cudnn_algo : "",
                   cudnn && pin ? " pinned" : "", off, on, 100.0 * (on / off - 1.0), one);
            fflush(stdout);
        }
    remove(path);
    remove(npy);
    printf("\n(%d alternating rounds; ms per step over the steps after the first three: the\n"
           "first runs eagerly, the next two are captured as CUDA graphs)\n", rounds);
    return 0;
}
