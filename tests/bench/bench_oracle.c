/* bench_oracle.c: single-core speed of the exact oracle (reference/oracle.h):
 * ns per multiply-add of oracle_dot (default path and exact path) next to a
 * naive MPFR loop (mpfr_fma at 128 bits) and mpfr_dot; then the time to
 * replay one autoencoder step (784-128-32-128-784, batch 100, Adam) op by op
 * against oracle_op and oracle_bound, relative to the cpu step itself.
 * Prints Markdown. Usage: bench_oracle [--quick] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "backend.h"
#include "exec.h"
#include "graph.h"
#include "model.h"
#include "oracle.h"
#include "util.h"
#include "bench_util.h"

static volatile float bench_sink;


/* splitmix64, for inputs */
static uint64_t bench_rng = 42;
static double bench_unif(double lo, double hi)
{
    uint64_t z = (bench_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * ((double)(z >> 11) * 0x1p-53);
}

enum bench_kind { BK_DOT, BK_DOT_EXACT, BK_FMA128, BK_MPFR_DOT, BK_N };

/* Median ns per multiply-add of one way to compute x . y, n terms. */
static double bench_dot(enum bench_kind k, const float *x, const float *y, size_t n, int reps)
{
    double t[32];
    mpfr_t acc, *mx = NULL, *my = NULL;
    mpfr_ptr *px = NULL, *py = NULL;
    mpfr_init2(acc, 128);
    if (k == BK_FMA128 || k == BK_MPFR_DOT) {
        mx = dt_malloc(n * sizeof *mx);
        my = dt_malloc(n * sizeof *my);
        px = dt_malloc(n * sizeof *px);
        py = dt_malloc(n * sizeof *py);
        for (size_t i = 0; i < n; i++) {
            mpfr_init2(mx[i], 24);
            mpfr_init2(my[i], 24);
            mpfr_set_flt(mx[i], x[i], MPFR_RNDN);
            mpfr_set_flt(my[i], y[i], MPFR_RNDN);
            px[i] = mx[i];
            py[i] = my[i];
        }
    }
    if (k == BK_DOT_EXACT)
        setenv("DIVTRACE_ORACLE_EXACT", "1", 1);
    size_t iters = 2000000 / n + 1;
    if (k == BK_FMA128 || k == BK_MPFR_DOT)
        iters = 200000 / n + 1;
    for (int r = 0; r < reps; r++) {
        double t0 = dt_now();
        for (size_t it = 0; it < iters; it++) {
            switch (k) {
            case BK_DOT:
            case BK_DOT_EXACT:
                bench_sink = oracle_dot(x, 1, y, 1, n);
                break;
            case BK_FMA128:
                mpfr_set_zero(acc, 1);
                for (size_t i = 0; i < n; i++)
                    mpfr_fma(acc, mx[i], my[i], acc, MPFR_RNDN);
                bench_sink = mpfr_get_flt(acc, MPFR_RNDN);
                break;
            case BK_MPFR_DOT:
                mpfr_dot(acc, px, py, (unsigned long)n, MPFR_RNDN);
                bench_sink = mpfr_get_flt(acc, MPFR_RNDN);
                break;
            default:
                break;
            }
        }
        t[r] = (dt_now() - t0) * 1e9 / (double)(iters * n);
    }
    unsetenv("DIVTRACE_ORACLE_EXACT");
    if (mx) {
        for (size_t i = 0; i < n; i++) {
            mpfr_clear(mx[i]);
            mpfr_clear(my[i]);
        }
        free(mx);
        free(my);
        free(px);
        free(py);
    }
    mpfr_clear(acc);
    return bench_median(t, reps);
}

/* One autoencoder step: cpu time of the step, then of oracle_op and
 * oracle_bound over every op, fed with the step's own inputs. */
static void bench_replay(int reps)
{
    struct graph g;
    graph_init(&g);
    struct model_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.name = "autoencoder";
    spec.act = MODEL_ACT_SIGMOID;
    spec.batch = 100;
    if (model_parse_layers("784,128,32,128,784", &spec) < 0) {
        fprintf(stderr, "bench_oracle: %s\n", dt_error());
        exit(2);
    }
    int loss = model_build(&g, &spec, 784);
    DT_ASSERT(loss >= 0, "model_build: %s", dt_error());
    graph_backward(&g, loss);
    struct graph_opt_config oc = {.kind = GRAPH_OPT_ADAM, .lr = 1e-3f, .b1 = 0.9f,
                                  .b2 = 0.999f, .eps = 1e-8f};
    graph_optimizer(&g, &oc);

    void *ctx = NULL;
    struct backend_options bo = {.threads = 1};
    DT_ASSERT(backend_cpu.init(&ctx, &bo) == 0, "cpu backend: %s", dt_error());
    struct exec e;
    DT_ASSERT(exec_init(&e, &g, &backend_cpu, ctx) == 0, "exec: %s", dt_error());
    size_t maxn = 1;
    for (int i = 0; i < g.n; i++)
        maxn = g.nodes[i].count > maxn ? g.nodes[i].count : maxn;
    float *host = dt_malloc(maxn * sizeof *host);
    for (int i = 0; i < g.n; i++) {
        const struct node *nd = &g.nodes[i];
        if (nd->type != OP_INPUT && nd->type != OP_PARAM && nd->type != OP_STATE)
            continue;
        if (nd->type == OP_PARAM)
            model_init_param(nd, 1, 1.0, host);
        else
            for (size_t j = 0; j < nd->count; j++)
                host[j] = nd->type == OP_STATE ? 0.0f : (float)bench_unif(0, 1);
        exec_set(&e, i, host);
    }
    /* a few steps first, so that Adam's state and the gradients are not zero */
    for (uint64_t s = 0; s < 3; s++) {
        exec_step(&e, s);
        exec_advance(&e);
    }
    double tc[32], to[32], tb[32];
    struct backend_step st = {.step = 3};
    float **val = dt_calloc((size_t)g.n, sizeof *val);
    for (int r = 0; r < reps; r++) {
        double t0 = dt_now();
        exec_step(&e, st.step);
        tc[r] = dt_now() - t0;
    }
    for (int i = 0; i < g.n; i++) {
        val[i] = dt_malloc((g.nodes[i].count + 1) * sizeof(float));
        exec_get(&e, i, val[i]);
    }
    float *out = dt_malloc(maxn * sizeof *out);
    double *bound = dt_malloc(maxn * sizeof *bound);
    long mism = 0, beyond = 0;
    for (int r = 0; r < reps; r++) {
        to[r] = tb[r] = 0;
        for (int i = 0; i < g.n; i++) {
            const struct node *nd = &g.nodes[i];
            if (nd->type == OP_INPUT || nd->type == OP_PARAM || nd->type == OP_STATE)
                continue;
            const float *in[OP_MAX_INPUTS];
            for (int k = 0; k < nd->ninputs; k++)
                in[k] = val[nd->inputs[k]];
            double t0 = dt_now();
            DT_ASSERT(oracle_op(&g, nd, out, in, &st) == 0, "oracle_op: %s", dt_error());
            double t1 = dt_now();
            DT_ASSERT(oracle_bound(&g, nd, bound, in, &st) == 0, "oracle_bound: %s", dt_error());
            to[r] += t1 - t0;
            tb[r] += dt_now() - t1;
            if (r == 0)
                for (size_t j = 0; j < nd->count; j++) {
                    mism += out[j] != val[i][j];
                    /* |cpu - exact| <= |cpu - RN(exact)| + |RN(exact) - exact|, the
                     * last at most half an ulp: a sanity check, not the test */
                    beyond += fabs((double)val[i][j] - out[j]) >
                              bound[j] + 0.5 * oracle_ulp32(out[j]);
                }
        }
    }
    double mc = bench_median(tc, reps), mo = bench_median(to, reps), mb = bench_median(tb, reps);
    printf("| autoencoder 784-128-32-128-784, batch 100, Adam, 1 thread | ms | x cpu step |\n");
    printf("| --- | ---: | ---: |\n");
    printf("| cpu step | %.3f | 1 |\n", 1e3 * mc);
    printf("| oracle_op, every op | %.1f | %.0f |\n", 1e3 * mo, mo / mc);
    printf("| oracle_bound, every op | %.1f | %.0f |\n", 1e3 * mb, mb / mc);
    printf("\n(%d ops; %ld of the step's values differ from the correctly rounded ones; "
           "%ld beyond their bound; median of %d)\n", g.n, mism, beyond, reps);
    for (int i = 0; i < g.n; i++)
        free(val[i]);
    free(val);
    free(out);
    free(bound);
    free(host);
    exec_free(&e);
    backend_cpu.free(ctx);
    graph_free(&g);
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int reps = quick ? 3 : 11;
    static const size_t ns[] = {784, 100000};
    static const char *label[BK_N] = {"oracle_dot (default: certified double, else exact)",
                                      "oracle_dot, exact path (DIVTRACE_ORACLE_EXACT=1)",
                                      "naive MPFR: mpfr_fma at 128 bits",
                                      "mpfr_dot at 128 bits (MPFR " MPFR_VERSION_STRING ")"};
    float *x = dt_malloc(100000 * sizeof *x), *y = dt_malloc(100000 * sizeof *y);
    for (size_t i = 0; i < 100000; i++) {
        x[i] = (float)bench_unif(-1, 1);
        y[i] = (float)bench_unif(-1, 1);
    }
    printf("| dot product, float32 uniform in [-1, 1], one core | n = 784 | n = 100000 |\n");
    printf("| --- | ---: | ---: |\n");
    for (int k = 0; k < BK_N; k++) {
        printf("| %s |", label[k]);
        for (size_t j = 0; j < 2; j++)
            printf(" %.2f |", bench_dot((enum bench_kind)k, x, y, ns[j], reps));
        printf("\n");
    }
    printf("\nns per multiply-add, median of %d repetitions\n\n", reps);
    free(x);
    free(y);
    bench_replay(reps);
    return 0;
}
