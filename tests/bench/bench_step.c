/* bench_step.c: autoencoder step time on the cpu backend with tracing off
 * and at each trace level, measured side by side (rounds alternate the
 * configurations so machine noise hits them alike). Prints a Markdown table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"
#include "util.h"
#include "bench_util.h"

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
    return 0;
}
