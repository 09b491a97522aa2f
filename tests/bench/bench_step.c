/* bench_step.c: autoencoder step time on the cpu backend with tracing off
 * and at each trace level, measured side by side (rounds alternate the
 * configurations so machine noise hits them alike), and what measuring the
 * leaves costs: hashing every parameter and optimizer state from its
 * buffer each step (with SGD and with Adam, whose two moments triple the
 * leaves), against the untraced step. Prints Markdown tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "train.h"
#include "util.h"
#include "bench_util.h"

/* Per step: the untraced step's time (ms) and the time to hash every leaf
 * of the run once from its buffer (ms), alternating, median of `rounds`. */
static int bench_leaves(const char *optimizer, int rounds, uint64_t steps, double *step_ms,
                        double *leaf_ms, double *mbytes)
{
    struct train_config tc;
    train_config_defaults(&tc);
    if (model_parse_layers(tc.layers, &tc.model) < 0)
        return -1;
    tc.optimizer = optimizer;
    tc.optimizer_given = 1;
    tc.steps = steps;
    tc.quiet = 1;
    tc.notrace = 1;
    if (train_finish_config(&tc) < 0)
        return -1;
    struct run r;
    if (run_open(&r, &tc, 0, 0) < 0)
        return -1;
    size_t bytes = 0;
    for (int k = 0; k < r.nleaves; k++)
        bytes += r.g.nodes[r.leaves[k]].count * sizeof(float);
    *mbytes = (double)bytes / 1e6;
    double st[16], lf[16];
    struct trace_oprec rec;
    for (int q = 0; q < rounds; q++) {
        double t0 = dt_now();
        for (uint64_t s = 0; s < steps; s++) {
            run_step_begin(&r, s);
            run_step_exec(&r, s, UINT64_MAX);
            exec_advance(&r.e);
        }
        st[q] = 1e3 * (dt_now() - t0) / (double)steps;
        t0 = dt_now();
        for (uint64_t s = 0; s < steps; s++)
            for (int k = 0; k < r.nleaves; k++) {
                int i = r.leaves[k];
                r.be->trace(r.ctx, r.e.buf[i], r.g.nodes[i].count, &rec);
            }
        lf[q] = 1e3 * (dt_now() - t0) / (double)steps;
    }
    *step_ms = bench_median(st, rounds);
    *leaf_ms = bench_median(lf, rounds);
    run_close(&r);
    return 0;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/bench_step.dtr", dir);
    enum { NCONF = 4 };
    const char *label[NCONF] = {"tracing off", "trace level step", "trace level param", "trace level op"};
    int rounds = quick ? 3 : 7;
    uint64_t steps = quick ? 100 : 300;
    double ms[NCONF][16], cpu[NCONF][16];
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < NCONF; c++) {
            struct train_config tc;
            train_config_defaults(&tc);
            if (model_parse_layers(tc.layers, &tc.model) < 0)
                return 2;
            tc.steps = steps;
            tc.quiet = 1;
            tc.out = path;
            tc.notrace = c == 0;
            tc.ckpt_every = 50; /* the default of a 5000-step run */
            if (train_finish_config(&tc) < 0)
                return 2;
            tc.level = c == 1 ? TRACE_LEVEL_STEP : c == 2 ? TRACE_LEVEL_PARAM : TRACE_LEVEL_OP;
            struct train_result res;
            if (train_run(&tc, &res) < 0) {
                fprintf(stderr, "bench_step: %s\n", dt_error());
                return 2;
            }
            ms[c][r] = 1e3 * res.seconds / (double)res.steps;
            cpu[c][r] = 1e3 * res.cpu_seconds / (double)res.steps;
        }
    remove(path);
    printf("| autoencoder 784-128-32-128-784, batch 100, cpu, 1 thread | median ms/step (wall) | overhead | median CPU ms/step (all threads) | CPU overhead |\n");
    printf("| --- | ---: | ---: | ---: | ---: |\n");
    double med[NCONF], cmed[NCONF];
    for (int c = 0; c < NCONF; c++) {
        med[c] = bench_median(ms[c], rounds);
        cmed[c] = bench_median(cpu[c], rounds);
        printf("| %s | %.3f | %+.1f%% | %.3f | %+.1f%% |\n", label[c], med[c],
               100.0 * (med[c] / med[0] - 1.0), cmed[c], 100.0 * (cmed[c] / cmed[0] - 1.0));
    }
    printf("\nTracing runs on a second thread when the machine has a second core; the wall\n"
           "overhead is what a run takes longer, the CPU overhead what the tracing costs.\n");
    printf("\n(%d alternating rounds of %llu steps each; checkpoints every 50 steps included)\n",
           rounds, (unsigned long long)steps);

    printf("\n| measured leaves, autoencoder 784-128-32-128-784, batch 100, cpu, 1 thread | leaves | MB | "
           "untraced step, ms | hashing the leaves, ms/step | against the step |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    static const char *const opts[2] = {"sgd", "adam"};
    for (int k = 0; k < 2; k++) {
        double sm, lm, mb;
        if (bench_leaves(opts[k], rounds, steps, &sm, &lm, &mb) < 0) {
            fprintf(stderr, "bench_step: %s\n", dt_error());
            return 2;
        }
        printf("| %s | %s | %.2f | %.3f | %.3f | %+.1f%% |\n", opts[k], k ? "W, b, m, v" : "W, b", mb, sm, lm,
               100.0 * lm / sm);
    }
    printf("\nEvery step hashes each parameter and optimizer state from its buffer (a carry\n"
           "fault is one that is not what its update wrote); at trace level op this runs\n"
           "on the tracer's thread beside the next ops, so it adds CPU time more than wall\n"
           "time. (%d alternating rounds of %llu steps, medians)\n", rounds, (unsigned long long)steps);
    return 0;
}
