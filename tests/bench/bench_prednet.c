/* bench_prednet.c: PredNet's training step (the default 1,16,32,64 at
 * 64x64, nt 20, Adam) on the cpu backend with tracing off and at trace
 * level op, side by side: rounds alternate the two configurations so that
 * machine noise hits them alike. Prints a Markdown table. */
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
    snprintf(path, sizeof path, "%s/bench_prednet.dtr", dir);
    int rounds = quick ? 1 : 5;
    uint64_t steps = quick ? 1 : 3;
    static const uint32_t batches[] = {1, 4};
    printf("| PredNet 1,16,32,64 @ 64x64, nt 20, cpu, 1 thread | median s/step, tracing off | trace level op | overhead | median CPU s/step off | op | CPU overhead |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
        double s[2][8], cpu[2][8];
        for (int r = 0; r < rounds; r++)
            for (int c = 0; c < 2; c++) {
                struct train_config tc;
                train_config_defaults(&tc);
                tc.model.name = "prednet";
                tc.model.batch = batches[bi];
                tc.batch_given = 1;
                tc.steps = steps;
                tc.steps_given = 1;
                tc.quiet = 1;
                tc.out = path;
                tc.notrace = c == 0;
                tc.ckpt_every = 1000;
                if (train_finish_config(&tc) < 0) {
                    fprintf(stderr, "bench_prednet: %s\n", dt_error());
                    return 2;
                }
                struct train_result res;
                if (train_run(&tc, &res) < 0) {
                    fprintf(stderr, "bench_prednet: %s\n", dt_error());
                    return 2;
                }
                s[c][r] = res.seconds / (double)res.steps;
                cpu[c][r] = res.cpu_seconds / (double)res.steps;
            }
        double med[2], cmed[2];
        for (int c = 0; c < 2; c++) {
            med[c] = bench_median(s[c], rounds);
            cmed[c] = bench_median(cpu[c], rounds);
        }
        printf("| batch %u | %.3f | %.3f | %+.1f%% | %.3f | %.3f | %+.1f%% |\n", batches[bi], med[0],
               med[1], 100.0 * (med[1] / med[0] - 1.0), cmed[0], cmed[1],
               100.0 * (cmed[1] / cmed[0] - 1.0));
    }
    remove(path);
    printf("\n(%d rounds of %llu steps each; the first step of a run included)\n", rounds,
           (unsigned long long)steps);
    return 0;
}
