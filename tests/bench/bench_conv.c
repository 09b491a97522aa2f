/* bench_conv.c: conv2d forward on the cpu backend (im2col + OpenBLAS sgemm)
 * against OpenBLAS sgemm alone on the same im2col shape, (K, C R S) x
 * (C R S, H W) per batch item, for the convolutions of the default PredNet
 * (1,16,32,64 at 64x64, 3x3 kernels). Rounds alternate the two so that
 * machine noise hits both alike. Prints a Markdown table. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_blas.h"
#include "exec.h"
#include "graph.h"
#include "util.h"
#include "bench_util.h"

struct shape {
    const char *what;
    uint32_t n, c, k, h, w;
};

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    static const struct shape shapes[] = {
        {"L0 gates (R0+E0+up R1 -> R0)", 4, 19, 1, 64, 64},
        {"L0 conv_a (E0 -> A1)", 4, 2, 16, 64, 64},
        {"L1 gates (R1+E1+up R2 -> R1)", 4, 80, 16, 32, 32},
        {"L1 conv_a (E1 -> A2)", 4, 32, 32, 32, 32},
        {"L2 gates (R2+E2+up R3 -> R2)", 4, 160, 32, 16, 16},
        {"L3 gates (R3+E3 -> R3)", 4, 192, 64, 8, 8},
    };
    const struct backend_ops *be = &backend_cpu;
    struct backend_options bo = {.threads = 1};
    void *ctx;
    if (be->init(&ctx, &bo) < 0) {
        fprintf(stderr, "bench_conv: %s\n", dt_error());
        return 2;
    }
    printf("| conv2d 3x3, batch 4, cpu, 1 thread (%s) | C | K | HxW | conv2d GFLOP/s | sgemm GFLOP/s, same shape | ratio |\n",
           cpu_blas_corename());
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    int rounds = quick ? 3 : 9;
    double worst = 1e9;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const struct shape *sh = &shapes[s];
        struct graph g;
        graph_init(&g);
        uint32_t xs[4] = {sh->n, sh->c, sh->h, sh->w}, ws[4] = {sh->k, sh->c, 3, 3};
        int x = graph_input(&g, "x", 4, xs), w = graph_input(&g, "w", 4, ws);
        graph_conv2d(&g, "y", x, w);
        struct exec e;
        if (exec_init(&e, &g, be, ctx) < 0) {
            fprintf(stderr, "bench_conv: %s\n", dt_error());
            return 2;
        }
        size_t crs = (size_t)sh->c * 9, hw = (size_t)sh->h * sh->w;
        float *hx = dt_malloc(g.nodes[x].count * sizeof(float));
        float *hwt = dt_malloc(g.nodes[w].count * sizeof(float));
        for (size_t i = 0; i < g.nodes[x].count; i++)
            hx[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
        for (size_t i = 0; i < g.nodes[w].count; i++)
            hwt[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
        exec_set(&e, x, hx);
        exec_set(&e, w, hwt);
        float *col = dt_malloc(crs * hw * sizeof(float)), *out = dt_malloc((size_t)sh->k * hw * sizeof(float));
        for (size_t i = 0; i < crs * hw; i++)
            col[i] = (float)(i % 977) / 977.0f;
        double flop = 2.0 * sh->n * sh->k * crs * hw;
        int reps = (int)(2e9 / flop) + 1;
        if (quick)
            reps = reps / 4 + 1;
        double tc[16], tg[16];
        for (int r = 0; r < rounds; r++) {
            double t0 = dt_now();
            for (int q = 0; q < reps; q++)
                exec_step(&e, 0);
            tc[r] = (dt_now() - t0) / reps;
            t0 = dt_now();
            for (int q = 0; q < reps; q++)
                for (uint32_t b = 0; b < sh->n; b++)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)sh->k, (int)hw, (int)crs,
                                1.0f, hwt, (int)crs, col, (int)hw, 0.0f, out, (int)hw);
            tg[r] = (dt_now() - t0) / reps;
        }
        double gc = flop / bench_median(tc, rounds) / 1e9, gg = flop / bench_median(tg, rounds) / 1e9;
        if (gc / gg < worst)
            worst = gc / gg;
        printf("| %s | %u | %u | %ux%u | %.1f | %.1f | %.0f%% |\n", sh->what, sh->c, sh->k, sh->h,
               sh->w, gc, gg, 100.0 * gc / gg);
        free(hx);
        free(hwt);
        free(col);
        free(out);
        exec_free(&e);
        graph_free(&g);
    }
    printf("\nlowest ratio %.0f%% (target >= 70%%)\n", 100.0 * worst);
    be->free(ctx);
    return 0;
}
