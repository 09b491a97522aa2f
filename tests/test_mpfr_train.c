/* test_mpfr_train.c: the mpfr backend trains: a tiny autoencoder stepped at
 * 128 and 256 bits agrees bitwise after float32 rounding, and stays close to
 * the cpu backend's run. The per-op tests are in test_mpfr.c and
 * test_mpfr_ops.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <mpfr.h>

#include "backend.h"
#include "exec.h"
#include "graph.h"
#include "model.h"
#include "mpfr_testutil.h"
#include "util.h"

/* ---- training ------------------------------------------------------------------------
 * The autoencoder 6-4-3-4-6, batch 3, five steps from the same floats on
 * mpfr at 128 and 256 bits and on cpu: after each step every parameter and
 * optimizer state (and the loss), rounded to float32, is bitwise the same at
 * both precisions, and close to the cpu's. */
struct tm_run {
    void *ctx;
    const struct backend_ops *be;
    struct exec e;
};

static void tm_train(enum graph_optimizer kind, enum model_act act, uint64_t seed)
{
    struct model_spec spec = {.name = "autoencoder", .layers = {6, 4, 3, 4, 6}, .nlayers = 5,
                              .act = act, .batch = 3};
    struct graph g;
    graph_init(&g);
    int loss = autoencoder_build(&g, &spec, 6);
    assert_true(loss >= 0);
    graph_backward(&g, loss);
    struct graph_opt_config oc;
    memset(&oc, 0, sizeof oc);
    oc.kind = kind;
    if (kind == GRAPH_OPT_SGD) {
        oc.lr = 0.5f;
        oc.momentum = 0.9f;
    } else {
        oc.lr = 0.05f;
        oc.b1 = 0.9f;
        oc.b2 = 0.999f;
        oc.eps = 1e-8f;
    }
    graph_optimizer(&g, &oc);
    struct tm_run r[3];
    r[0].ctx = tm_init(128);
    r[1].ctx = tm_init(256);
    r[2].ctx = tm_cpu_init();
    r[0].be = r[1].be = &backend_mpfr;
    r[2].be = &backend_cpu;
    float buf[64], x[18];
    uint64_t rng = seed;
    for (int i = 0; i < 18; i++)
        x[i] = tm_rand(&rng, 0, 1);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(exec_init(&r[k].e, &g, r[k].be, r[k].ctx), 0);
        for (int i = 0; i < g.n; i++)
            if (g.nodes[i].type == OP_PARAM) {
                assert_true(g.nodes[i].count <= 64);
                model_init_param(&g.nodes[i], seed, 1.0, buf);
                exec_set(&r[k].e, i, buf);
            }
        exec_set(&r[k].e, graph_find(&g, "data.x"), x);
    }
    int nchecked = 0, ndiffer_cpu = 0;
    for (uint64_t step = 0; step < 5; step++) {
        float v[3][64];
        for (int k = 0; k < 3; k++)
            exec_step(&r[k].e, step);
        for (int i = 0; i < g.n; i++) {
            const struct node *nd = &g.nodes[i];
            if (nd->next < 0 && i != loss)
                continue;
            int o = i == loss ? loss : nd->next;
            for (int k = 0; k < 3; k++)
                exec_get(&r[k].e, o, v[k]);
            for (size_t j = 0; j < g.nodes[o].count; j++) {
                if (tm_bits(v[0][j]) != tm_bits(v[1][j]))
                    fail_msg("step %llu, %s[%zu]: %a at 128 bits, %a at 256 bits",
                             (unsigned long long)step, g.nodes[o].name, j, (double)v[0][j],
                             (double)v[1][j]);
                if (!(fabsf(v[2][j] - v[0][j]) <= 1e-4f * (1 + fabsf(v[0][j]))))
                    fail_msg("step %llu, %s[%zu]: %a on mpfr, %a on cpu",
                             (unsigned long long)step, g.nodes[o].name, j, (double)v[0][j],
                             (double)v[2][j]);
                ndiffer_cpu += tm_bits(v[2][j]) != tm_bits(v[0][j]);
                nchecked++;
            }
        }
        for (int k = 0; k < 3; k++)
            exec_advance(&r[k].e);
    }
    assert_true(nchecked > 5 * 100);
    print_message("  %s/%s: %d values agree at 128 and 256 bits; %d differ from cpu's\n",
                  kind == GRAPH_OPT_SGD ? "sgd+momentum" : "adam", model_act_name(act), nchecked,
                  ndiffer_cpu);
    for (int k = 0; k < 3; k++) {
        exec_free(&r[k].e);
        r[k].be->free(r[k].ctx);
    }
    graph_free(&g);
}

static void test_train_sgd(void **state)
{
    (void)state;
    tm_train(GRAPH_OPT_SGD, MODEL_ACT_SIGMOID, 101);
    tm_train(GRAPH_OPT_SGD, MODEL_ACT_RELU, 102);
}

static void test_train_adam(void **state)
{
    (void)state;
    tm_train(GRAPH_OPT_ADAM, MODEL_ACT_TANH, 103);
    tm_train(GRAPH_OPT_ADAM, MODEL_ACT_SIGMOID, 104);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_sgd),
        cmocka_unit_test(test_train_adam),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mpfr_free_cache();
    return rc;
}
