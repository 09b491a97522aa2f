/* bench_mpfr.c: the mpfr backend's speed: ns per multiply-add of its matrix
 * product (100x784 . 784x128, as the autoencoder's first layer) at 128 and
 * 256 bits, next to a naive loop of mpfr_fma at the same precision, and one
 * whole training step of the default autoencoder at 128 bits against one cpu
 * step. Prints Markdown. Usage: bench_mpfr [--quick] */
#include <mpfr.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "exec.h"
#include "graph.h"
#include "model.h"
#include "util.h"

enum { M = 100, K = 784, N = 128 };

static double bench_backend_matmul(long prec, const float *a, const float *b)
{
    struct graph g;
    graph_init(&g);
    uint32_t sa[2] = {M, K}, sb[2] = {N, K};
    int x = graph_input(&g, "a", 2, sa), w = graph_input(&g, "b", 2, sb);
    graph_matmul(&g, "c", x, w, 0, 1);
    struct backend_options bo = {.threads = 1, .precision = prec};
    void *ctx;
    DT_ASSERT(backend_mpfr.init(&ctx, &bo) == 0, "%s", dt_error());
    struct exec e;
    DT_ASSERT(exec_init(&e, &g, &backend_mpfr, ctx) == 0, "%s", dt_error());
    exec_set(&e, x, a);
    exec_set(&e, w, b);
    double t0 = dt_now();
    exec_step(&e, 0);
    double t = dt_now() - t0;
    exec_free(&e);
    backend_mpfr.free(ctx);
    graph_free(&g);
    return 1e9 * t / ((double)M * N * K);
}

static double bench_naive(long prec, const float *a, const float *b, int rows)
{
    /* operands converted beforehand, as a naive MPFR trainer would hold them */
    mpfr_t acc, *x = dt_malloc(sizeof(mpfr_t) * (size_t)rows * K), *y = dt_malloc(sizeof(mpfr_t) * N * K);
    mpfr_init2(acc, prec);
    for (int i = 0; i < rows * K; i++) {
        mpfr_init2(x[i], prec);
        mpfr_set_flt(x[i], a[i], MPFR_RNDN);
    }
    for (int i = 0; i < N * K; i++) {
        mpfr_init2(y[i], prec);
        mpfr_set_flt(y[i], b[i], MPFR_RNDN);
    }
    double t0 = dt_now();
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < N; j++) {
            mpfr_set_zero(acc, 1);
            for (int k = 0; k < K; k++)
                mpfr_fma(acc, x[i * K + k], y[j * K + k], acc, MPFR_RNDN);
        }
    double t = dt_now() - t0;
    mpfr_clear(acc);
    for (int i = 0; i < rows * K; i++)
        mpfr_clear(x[i]);
    for (int i = 0; i < N * K; i++)
        mpfr_clear(y[i]);
    free(x);
    free(y);
    return 1e9 * t / ((double)rows * N * K);
}

/* One training step of the default autoencoder (SGD) on a backend, seconds. */
static double bench_step(const struct backend_ops *be, long prec)
{
    struct graph g;
    graph_init(&g);
    struct model_spec spec = {.name = "autoencoder", .act = MODEL_ACT_SIGMOID, .batch = 100};
    DT_ASSERT(model_parse_layers("784,128,32,128,784", &spec) == 0, "layers");
    int loss = model_build(&g, &spec, 784);
    graph_backward(&g, loss);
    struct graph_opt_config oc = {.kind = GRAPH_OPT_SGD, .lr = 3.0f};
    graph_optimizer(&g, &oc);
    struct backend_options bo = {.threads = 1, .precision = prec};
    void *ctx;
    DT_ASSERT(be->init(&ctx, &bo) == 0, "%s", dt_error());
    struct exec e;
    DT_ASSERT(exec_init(&e, &g, be, ctx) == 0, "%s", dt_error());
    float *host = dt_malloc(784 * 128 * sizeof(float));
    for (int i = 0; i < g.n; i++) {
        if (g.nodes[i].type == OP_PARAM)
            model_init_param(&g.nodes[i], 1, 1.0, host);
        else if (g.nodes[i].type == OP_INPUT)
            for (size_t k = 0; k < g.nodes[i].count; k++)
                host[k] = (float)((k * 37) % 256) / 255.0f;
        else
            continue;
        exec_set(&e, i, host);
    }
    exec_step(&e, 0); /* warm up */
    double t0 = dt_now();
    exec_step(&e, 1);
    double t = dt_now() - t0;
    free(host);
    exec_free(&e);
    be->free(ctx);
    graph_free(&g);
    return t;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    float *a = dt_malloc(sizeof(float) * M * K), *b = dt_malloc(sizeof(float) * N * K);
    uint64_t s = 7;
    for (int i = 0; i < M * K; i++)
        a[i] = (float)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 40) * 0x1p-24f - 0.5f;
    for (int i = 0; i < N * K; i++)
        b[i] = (float)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 40) * 0x1p-24f - 0.5f;
    int rows = quick ? 2 : 10;
    printf("| matrix product 100x784 . 784x128, one core | ns per multiply-add |\n");
    printf("| --- | ---: |\n");
    printf("| mpfr backend, 128 bits | %.1f |\n", bench_backend_matmul(128, a, b));
    printf("| naive mpfr_fma loop, 128 bits (%d rows) | %.1f |\n", rows, bench_naive(128, a, b, rows));
    printf("| mpfr backend, 256 bits | %.1f |\n", bench_backend_matmul(256, a, b));
    printf("| naive mpfr_fma loop, 256 bits (%d rows) | %.1f |\n", rows, bench_naive(256, a, b, rows));
    double tc = bench_step(&backend_cpu, 0), tm = bench_step(&backend_mpfr, 128);
    printf("\nOne SGD step of the default autoencoder (batch 100): cpu %.2f ms, mpfr at 128 bits "
           "%.2f s (%.0fx).\n", 1e3 * tc, tm, tm / tc);
    free(a);
    free(b);
    return 0;
}
