/* test_vjp_opt.c: the optimizer's update ops (sgd, momentum, Adam) run on
 * the cpu backend against their op.h formulas evaluated in double; part of
 * the test_vjp program (main in test_vjp.c). */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "exec.h"
#include "graph.h"
#include "test_util.h"
#include "test_vjp.h"

/* ---- optimizer updates ----------------------------------------------------
 * Each update op is checked against its op.h formula evaluated in double on
 * the very float inputs the op received: |got - want| may not exceed `ulps`
 * float epsilons of `mag`, the sum of the magnitudes of the formula's terms
 * (a bound on float32 rounding that holds under cancellation too). */

static void vjp_expect_update(const char *what, size_t i, float got, double want, double mag,
                              double ulps)
{
    if (!(fabs((double)got - want) <= ulps * FLT_EPSILON * mag))
        fail_msg("%s[%zu] = %.9g, formula %.9g (%.1f ulps of %.3g allowed)", what, i,
                 (double)got, want, ulps, mag);
}

struct vjp_opt {
    struct graph g;
    void *ctx;
    struct exec e;
    int p, t, grad;
    size_t n;
};

/* Parameter "P" (R,F) with loss mse(P, T), then the optimizer's ops. */
static void vjp_opt_init(struct vjp_opt *o, const struct graph_opt_config *oc)
{
    uint32_t shape[2] = {3, 5};
    graph_init(&o->g);
    o->p = graph_param(&o->g, "P", 2, shape);
    o->t = graph_input(&o->g, "T", 2, shape);
    graph_backward(&o->g, graph_mse(&o->g, "loss", o->p, o->t));
    graph_optimizer(&o->g, oc);
    o->grad = graph_grad_of(&o->g, o->p);
    assert_true(o->grad >= 0);
    assert_int_equal(graph_find(&o->g, "P.grad"), o->grad);
    o->n = o->g.nodes[o->p].count;
    struct backend_options bo = {.threads = 1};
    assert_int_equal(backend_cpu.init(&o->ctx, &bo), 0);
    assert_int_equal(exec_init(&o->e, &o->g, &backend_cpu, o->ctx), 0);
}

static void vjp_opt_free(struct vjp_opt *o)
{
    exec_free(&o->e);
    backend_cpu.free(o->ctx);
    graph_free(&o->g);
}

/* Set node `name` to uniform values in [lo, hi]; returns its index. */
static int vjp_opt_set(struct vjp_opt *o, const char *name, float *v, uint64_t *rng,
                       double lo, double hi)
{
    int i = graph_find(&o->g, name);
    if (i < 0)
        fail_msg("no node %s", name);
    for (size_t j = 0; j < o->n; j++)
        v[j] = (float)tu_rand_uniform(rng, lo, hi);
    exec_set(&o->e, i, v);
    return i;
}

static int vjp_opt_get(struct vjp_opt *o, const char *name, float *v)
{
    int i = graph_find(&o->g, name);
    if (i < 0)
        fail_msg("no node %s", name);
    exec_get(&o->e, i, v);
    return i;
}

void test_sgd(void **state)
{
    (void)state;
    struct graph_opt_config oc = {.kind = GRAPH_OPT_SGD, .lr = 0.1f};
    struct vjp_opt o;
    vjp_opt_init(&o, &oc);
    assert_int_equal(graph_find(&o.g, "P.momentum"), -1);
    float p[15], t[15], g[15], p1[15];
    uint64_t rng = 71;
    vjp_opt_set(&o, "P", p, &rng, -1, 1);
    vjp_opt_set(&o, "T", t, &rng, -1, 1);
    exec_step(&o.e, 0);
    exec_get(&o.e, o.grad, g);
    int up = vjp_opt_get(&o, "P.update", p1);
    assert_int_equal(o.g.nodes[o.p].next, up);
    double lr = oc.lr;
    for (size_t j = 0; j < o.n; j++) {
        /* the gradient itself: 2 (p - t) / n */
        vjp_expect_update("P.grad", j, g[j], 2.0 * ((double)p[j] - t[j]) / (double)o.n,
                          fabs(2.0 * ((double)p[j] - t[j]) / (double)o.n), 4);
        vjp_expect_update("P.update", j, p1[j], p[j] - lr * g[j], fabs(p[j]) + fabs(lr * g[j]), 2);
    }
    vjp_opt_free(&o);
}

/* Two steps, so the second sees the momentum buffer that exec_advance
 * carried over from the first. */
void test_sgd_momentum(void **state)
{
    (void)state;
    struct graph_opt_config oc = {.kind = GRAPH_OPT_SGD, .lr = 0.05f, .momentum = 0.9f};
    struct vjp_opt o;
    vjp_opt_init(&o, &oc);
    float p[15], t[15], buf[15], g[15], buf1[15], p1[15];
    uint64_t rng = 72;
    vjp_opt_set(&o, "P", p, &rng, -1, 1);
    vjp_opt_set(&o, "T", t, &rng, -1, 1);
    vjp_opt_set(&o, "P.momentum", buf, &rng, -0.5, 0.5);
    double lr = oc.lr, mu = oc.momentum;
    for (uint64_t step = 0; step < 2; step++) {
        exec_step(&o.e, step);
        exec_get(&o.e, o.grad, g);
        vjp_opt_get(&o, "P.momentum.update", buf1);
        vjp_opt_get(&o, "P.update", p1);
        for (size_t j = 0; j < o.n; j++) {
            vjp_expect_update("P.momentum.update", j, buf1[j], mu * buf[j] + g[j],
                              fabs(mu * buf[j]) + fabs(g[j]), 2);
            vjp_expect_update("P.update", j, p1[j], p[j] - lr * buf1[j],
                              fabs(p[j]) + fabs(lr * buf1[j]), 2);
        }
        exec_advance(&o.e);
        float pa[15], ba[15];
        vjp_opt_get(&o, "P", pa);
        vjp_opt_get(&o, "P.momentum", ba);
        assert_memory_equal(pa, p1, sizeof pa);
        assert_memory_equal(ba, buf1, sizeof ba);
        memcpy(p, p1, sizeof p);
        memcpy(buf, buf1, sizeof buf);
    }
    vjp_opt_free(&o);
}

/* One Adam step at `step` (t = step + 1) from state m, v; checks m', v' and
 * p' including the bias corrections c = 1 - b^t. */
static void vjp_adam_check(struct vjp_opt *o, const struct graph_opt_config *oc, uint64_t step,
                           const float *p, const float *m, const float *v)
{
    float g[15], m1[15], v1[15], p1[15];
    exec_step(&o->e, step);
    exec_get(&o->e, o->grad, g);
    vjp_opt_get(o, "P.m.update", m1);
    vjp_opt_get(o, "P.v.update", v1);
    vjp_opt_get(o, "P.update", p1);
    double b1 = oc->b1, b2 = oc->b2, lr = oc->lr, eps = oc->eps, t = (double)step + 1;
    double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
    for (size_t j = 0; j < o->n; j++) {
        vjp_expect_update("P.m.update", j, m1[j], b1 * m[j] + (1 - b1) * g[j],
                          fabs(b1 * m[j]) + fabs((1 - b1) * g[j]), 2);
        vjp_expect_update("P.v.update", j, v1[j], b2 * v[j] + (1 - b2) * g[j] * g[j],
                          fabs(b2 * v[j]) + fabs((1 - b2) * g[j] * g[j]), 3);
        double step_j = lr * (m1[j] / c1) / (sqrt(v1[j] / c2) + eps);
        vjp_expect_update("P.update", j, p1[j], p[j] - step_j, fabs(p[j]) + 4 * fabs(step_j), 4);
    }
}

void test_adam(void **state)
{
    (void)state;
    struct graph_opt_config oc = {.kind = GRAPH_OPT_ADAM, .lr = 0.01f, .b1 = 0.9f,
                                  .b2 = 0.999f, .eps = 1e-8f};
    float p[15], t[15], m[15], v[15];
    uint64_t rng = 73;

    /* Step 0 from zero state (as training starts): the corrections make the
     * first step about lr * sign(g). */
    struct vjp_opt o;
    vjp_opt_init(&o, &oc);
    vjp_opt_set(&o, "P", p, &rng, -1, 1);
    vjp_opt_set(&o, "T", t, &rng, -1, 1);
    memset(m, 0, sizeof m);
    memset(v, 0, sizeof v);
    vjp_adam_check(&o, &oc, 0, p, m, v);
    vjp_opt_free(&o);

    /* Step 3 (t = 4) from arbitrary state. */
    vjp_opt_init(&o, &oc);
    vjp_opt_set(&o, "P", p, &rng, -1, 1);
    vjp_opt_set(&o, "T", t, &rng, -1, 1);
    vjp_opt_set(&o, "P.m", m, &rng, -0.2, 0.2);
    vjp_opt_set(&o, "P.v", v, &rng, 1e-4, 0.05);
    vjp_adam_check(&o, &oc, 3, p, m, v);
    vjp_opt_free(&o);
}
