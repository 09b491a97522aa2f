/* test_mpfr_oracle.c: the mpfr backend op by op against the exact oracle.
 * Every op of small training graphs (all activations, SGD with momentum and
 * Adam) is run on the cpu backend to get realistic float32 inputs; each op
 * is then given those inputs on the mpfr backend at 200 bits, and its result
 * rounded to float32 must equal the oracle's bitwise. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "exec.h"
#include "graph.h"
#include "model.h"
#include "oracle.h"
#include "test_util.h"
#include "util.h"

struct mo_state {
    struct exec *e;           /* the cpu run */
    void *mctx;               /* the mpfr backend */
    uint64_t step;
    int checked;              /* ops compared */
    size_t elements;
};

/* After cpu op i: run op i on mpfr from the same float inputs, compare. */
static void mo_hook(void *arg, int i, const backend_buf *buf)
{
    struct mo_state *s = arg;
    const struct graph *g = s->e->g;
    const struct node *nd = &g->nodes[i];
    if (nd->type == OP_INPUT || nd->type == OP_PARAM || nd->type == OP_STATE)
        return;
    const float *fin[OP_MAX_INPUTS];
    backend_buf *min[OP_MAX_INPUTS];
    for (int k = 0; k < nd->ninputs; k++) {
        const struct node *in = &g->nodes[nd->inputs[k]];
        fin[k] = s->e->buf[nd->inputs[k]];
        min[k] = backend_mpfr.alloc(s->mctx, in->count);
        backend_mpfr.upload(s->mctx, min[k], fin[k], in->count);
    }
    backend_buf *mout = backend_mpfr.alloc(s->mctx, nd->count);
    struct backend_step st = {.step = s->step};
    backend_mpfr.op[nd->type](s->mctx, g, nd, mout, (const backend_buf *const *)min, &st);
    float *got = malloc(nd->count * sizeof *got), *want = malloc(nd->count * sizeof *want);
    assert_non_null(got);
    assert_non_null(want);
    backend_mpfr.download(s->mctx, got, mout, nd->count);
    assert_int_equal(oracle_op(g, nd, want, fin, &st), 0);
    for (size_t k = 0; k < nd->count; k++)
        if (memcmp(&got[k], &want[k], sizeof(float)) != 0 && !(isnan(got[k]) && isnan(want[k])))
            fail_msg("op %s (%s), step %llu, element %zu: mpfr %a, oracle %a", nd->name,
                     op_type_name(nd->type), (unsigned long long)s->step, k, (double)got[k],
                     (double)want[k]);
    s->checked++;
    s->elements += nd->count;
    free(got);
    free(want);
    backend_mpfr.release(s->mctx, mout);
    for (int k = 0; k < nd->ninputs; k++)
        backend_mpfr.release(s->mctx, min[k]);
    (void)buf;
}

/* A 12,6,3,6,12 autoencoder, batch 4, trained 3 steps on cpu; every op of
 * every step compared. */
static void mo_run(enum model_act act, enum graph_optimizer opt, float momentum)
{
    struct graph g;
    graph_init(&g);
    struct model_spec spec = {.name = "autoencoder", .act = act, .batch = 4};
    assert_int_equal(model_parse_layers("12,6,3,6,12", &spec), 0);
    int loss = model_build(&g, &spec, 12);
    assert_true(loss >= 0);
    graph_backward(&g, loss);
    struct graph_opt_config oc = {.kind = opt, .lr = opt == GRAPH_OPT_ADAM ? 1e-2f : 0.5f,
                                  .momentum = momentum, .b1 = 0.9f, .b2 = 0.999f, .eps = 1e-8f};
    graph_optimizer(&g, &oc);
    struct backend_options cb = {.threads = 1}, mb = {.precision = 200};
    void *cctx, *mctx;
    assert_int_equal(backend_cpu.init(&cctx, &cb), 0);
    assert_int_equal(backend_mpfr.init(&mctx, &mb), 0);
    struct exec e;
    assert_int_equal(exec_init(&e, &g, &backend_cpu, cctx), 0);
    uint64_t seed = 99;
    float *host = malloc(256 * sizeof *host);
    assert_non_null(host);
    for (int i = 0; i < g.n; i++) {
        const struct node *nd = &g.nodes[i];
        if (nd->type == OP_PARAM)
            model_init_param(nd, 5, 1.0, host);
        else if (nd->type == OP_INPUT)
            for (size_t k = 0; k < nd->count; k++)
                host[k] = (float)tu_rand_uniform(&seed, 0.0, 1.0);
        else
            continue;
        exec_set(&e, i, host);
    }
    struct mo_state s = {.e = &e, .mctx = mctx};
    e.hook = mo_hook;
    e.hook_arg = &s;
    for (uint64_t step = 0; step < 3; step++) {
        s.step = step;
        exec_step(&e, step);
        exec_advance(&e);
    }
    assert_true(s.checked > 20);
    free(host);
    exec_free(&e);
    backend_cpu.free(cctx);
    backend_mpfr.free(mctx);
    graph_free(&g);
}

static void test_sigmoid_sgd(void **state) { (void)state; mo_run(MODEL_ACT_SIGMOID, GRAPH_OPT_SGD, 0.0f); }
static void test_tanh_momentum(void **state) { (void)state; mo_run(MODEL_ACT_TANH, GRAPH_OPT_SGD, 0.9f); }
static void test_relu_adam(void **state) { (void)state; mo_run(MODEL_ACT_RELU, GRAPH_OPT_ADAM, 0.0f); }
static void test_sigmoid_adam(void **state) { (void)state; mo_run(MODEL_ACT_SIGMOID, GRAPH_OPT_ADAM, 0.0f); }

/* A loss that is not an MSE (a fill seed) and a matrix product of one
 * operand with itself, both transposes. */
static void test_other_graph(void **state)
{
    (void)state;
    struct graph g;
    graph_init(&g);
    uint32_t sx[2] = {5, 7}, one = 1;
    int x = graph_param(&g, "x", 2, sx);
    int xtx = graph_matmul(&g, "xtx", x, x, 1, 0);   /* (7,7) */
    int xxt = graph_matmul(&g, "xxt", x, x, 0, 1);   /* (5,5) */
    int s = graph_sigmoid(&g, "s", xtx);
    uint32_t s7[2] = {7, 7}, s5[2] = {5, 5};
    int t7 = graph_input(&g, "t7", 2, s7), t5 = graph_input(&g, "t5", 2, s5);
    int m1 = graph_mse(&g, "m1", s, t7), m2 = graph_mse(&g, "m2", xxt, t5);
    int l = graph_add(&g, "l", m1, m2);
    (void)one;
    graph_backward(&g, l);
    struct backend_options cb = {.threads = 1}, mb = {.precision = 200};
    void *cctx, *mctx;
    assert_int_equal(backend_cpu.init(&cctx, &cb), 0);
    assert_int_equal(backend_mpfr.init(&mctx, &mb), 0);
    struct exec e;
    assert_int_equal(exec_init(&e, &g, &backend_cpu, cctx), 0);
    uint64_t seed = 3;
    float buf[64];
    for (int i = 0; i < g.n; i++) {
        if (g.nodes[i].type != OP_PARAM && g.nodes[i].type != OP_INPUT)
            continue;
        for (size_t k = 0; k < g.nodes[i].count; k++)
            buf[k] = (float)tu_rand_uniform(&seed, -1.0, 1.0);
        exec_set(&e, i, buf);
    }
    struct mo_state st = {.e = &e, .mctx = mctx};
    e.hook = mo_hook;
    e.hook_arg = &st;
    exec_step(&e, 0);
    assert_true(st.checked >= 10);
    exec_free(&e);
    backend_cpu.free(cctx);
    backend_mpfr.free(mctx);
    graph_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigmoid_sgd),
        cmocka_unit_test(test_tanh_momentum),
        cmocka_unit_test(test_relu_adam),
        cmocka_unit_test(test_sigmoid_adam),
        cmocka_unit_test(test_other_graph),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
