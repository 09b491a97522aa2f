/* test_vjp.c: every op type's vector-Jacobian rule (graph.c) run on the cpu
 * backend in float32, against central differences of an independent
 * double-precision model of the same forward function; and the optimizer's
 * update ops against the formulas of op.h, evaluated in double.
 * Dimension letters: M, K, N of a matrix product; R rows, F features; images
 * (N, C, H, W) = (batch, channel, row, column) and filters (K, C, R, S) =
 * (output channel, input channel, kernel row, kernel column), as in op.h.
 * Sources: this file (the cases, the check, the matrix and loss ops, and
 * main), test_vjp_image.c (the image ops) and test_vjp_opt.c (the
 * optimizer); test_vjp.h declares what they share. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend.h"
#include "exec.h"
#include "graph.h"
#include "test_util.h"
#include "test_vjp.h"
#include "util.h"

void vjp_case_init(struct vjp_case *c, const char *what, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    snprintf(c->what, sizeof c->what, "%s", what);
    graph_init(&c->g);
    c->out = c->loss = -1;
    c->rng = seed;
}

void vjp_case_free(struct vjp_case *c)
{
    for (int k = 0; k < c->nleaf; k++)
        free(c->val[k]);
    graph_free(&c->g);
}

/* A leaf (a parameter, which gets a gradient, or an input) of any rank with
 * values uniform in [lo, hi] and, when away > 0, at least `away` from zero
 * (for relu, whose derivative jumps there). Returns its node index. */
static int vjp_leaf_shape(struct vjp_case *c, int param, const char *name, int ndim,
                          const uint32_t *shape, double lo, double hi, double away)
{
    assert_true(c->nleaf < VJP_MAX_LEAVES);
    int i = param ? graph_param(&c->g, name, ndim, shape) : graph_input(&c->g, name, ndim, shape);
    size_t n = c->g.nodes[i].count;
    double *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t j = 0; j < n; j++) {
        double u;
        do
            u = tu_rand_uniform(&c->rng, lo, hi);
        while (away > 0 && fabs(u) < away);
        v[j] = (double)(float)u;
    }
    c->leaf[c->nleaf] = i;
    c->val[c->nleaf++] = v;
    return i;
}

/* A leaf of shape (d0, d1), or (d0) when d1 is 0. */
int vjp_leaf(struct vjp_case *c, int param, const char *name, uint32_t d0, uint32_t d1,
             double lo, double hi, double away)
{
    uint32_t shape[2] = {d0, d1};
    return vjp_leaf_shape(c, param, name, d1 ? 2 : 1, shape, lo, hi, away);
}

/* A leaf of shape (N,C,H,W), or a filter (K,C,R,S). */
int vjp_leaf4(struct vjp_case *c, int param, const char *name, uint32_t d0, uint32_t d1,
              uint32_t d2, uint32_t d3, double lo, double hi, double away)
{
    uint32_t shape[4] = {d0, d1, d2, d3};
    return vjp_leaf_shape(c, param, name, 4, shape, lo, hi, away);
}

/* Move every value of leaf k closer than `dist` to `kink` (where the
 * function's derivative jumps) out to at least `dist` from it, mirrored, so
 * finite differences never straddle the kink. */
void vjp_leaf_avoid(struct vjp_case *c, int k, double kink, double dist)
{
    double *v = c->val[k];
    for (size_t j = 0; j < c->g.nodes[c->leaf[k]].count; j++) {
        double d = v[j] - kink;
        if (fabs(d) < dist)
            v[j] = (double)(float)(kink + (d < 0 ? -1 : 1) * (dist + fabs(d)));
        assert_true(fabs(v[j] - kink) >= 0.99 * dist);
    }
}

const struct node *vjp_leaf_node(const struct vjp_case *c, int k)
{
    return &c->g.nodes[c->leaf[k]];
}

/* ---- the independent double-precision models ------------------------------ */

double vjp_ref_mse(const double *p, /* (n) */ const double *t, /* (n) */ size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (p[i] - t[i]) * (p[i] - t[i]);
    return s / (double)n;
}

/* out (M,N) = op(a) op(b); a is (M,K) or, when ta, (K,M); b is (K,N) or (N,K). */
static void vjp_ref_matmul(double *out, const double *a, const double *b,
                           int m, int k, int n, int ta, int tb)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++) {
                double av = ta ? a[l * m + i] : a[i * k + l];
                double bv = tb ? b[j * k + l] : b[l * n + j];
                s += av * bv;
            }
            out[i * n + j] = s;
        }
}

static double vjp_ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Leaves a (0), b (1), target t (2); out = op(a) op(b). */
static double vjp_model_matmul(const struct vjp_case *c, double *out)
{
    const struct node *o = &c->g.nodes[c->out];
    int ta = o->p.mm.ta, tb = o->p.mm.tb;
    int m = (int)o->shape[0], n = (int)o->shape[1];
    int k = (int)(ta ? vjp_leaf_node(c, 0)->shape[0] : vjp_leaf_node(c, 0)->shape[1]);
    vjp_ref_matmul(out, c->val[0], c->val[1], m, k, n, ta, tb);
    return vjp_ref_mse(out, c->val[2], o->count);
}

/* Leaves x (0) (R,F), b (1) (F), target (2). */
static double vjp_model_add_bias(const struct vjp_case *c, double *out)
{
    size_t r = vjp_leaf_node(c, 0)->shape[0], f = vjp_leaf_node(c, 0)->shape[1];
    for (size_t i = 0; i < r; i++)
        for (size_t j = 0; j < f; j++)
            out[i * f + j] = c->val[0][i * f + j] + c->val[1][j];
    return vjp_ref_mse(out, c->val[2], r * f);
}

/* Leaves x (0), target (1); out = f(x) elementwise, f named by the out op. */
static double vjp_model_unary(const struct vjp_case *c, double *out)
{
    size_t n = vjp_leaf_node(c, 0)->count;
    enum op_type t = c->g.nodes[c->out].type;
    for (size_t i = 0; i < n; i++) {
        double x = c->val[0][i];
        out[i] = t == OP_SIGMOID ? vjp_ref_sigmoid(x) : t == OP_TANH ? tanh(x) : x > 0 ? x : 0;
    }
    return vjp_ref_mse(out, c->val[1], n);
}

/* Leaves a (0), b (1), target (2). */
static double vjp_model_add(const struct vjp_case *c, double *out)
{
    size_t n = vjp_leaf_node(c, 0)->count;
    for (size_t i = 0; i < n; i++)
        out[i] = c->val[0][i] + c->val[1][i];
    return vjp_ref_mse(out, c->val[2], n);
}

/* Leaves p (0), target (1); out = the loss itself. */
static double vjp_model_mse(const struct vjp_case *c, double *out)
{
    out[0] = vjp_ref_mse(c->val[0], c->val[1], vjp_leaf_node(c, 0)->count);
    return out[0];
}

/* Leaves p (0), t (1), t2 (2) (1); out = m = mse(p, t); loss = (m - t2)^2,
 * so mse_bwd of m receives an upstream gradient. */
static double vjp_model_mse_nested(const struct vjp_case *c, double *out)
{
    out[0] = vjp_ref_mse(c->val[0], c->val[1], vjp_leaf_node(c, 0)->count);
    return (out[0] - c->val[2][0]) * (out[0] - c->val[2][0]);
}

/* Leaves x (0) (R,F), w (1) (F,F), b (2) (F), target (3):
 *   s = sigmoid(x); y = s w^T; z = x + y; u = z + b; h = tanh(u);
 *   q = x w; xx = x + x; o = (h + q) + xx; loss = mse(o, target).
 * x feeds five consumer edges (two of them from one add), w two. */
static double vjp_model_compose(const struct vjp_case *c, double *out)
{
    int r = (int)vjp_leaf_node(c, 0)->shape[0], f = (int)vjp_leaf_node(c, 0)->shape[1];
    const double *x = c->val[0], *w = c->val[1], *b = c->val[2];
    double s[64], y[64], q[64];
    assert_true(r * f <= 64);
    for (int i = 0; i < r * f; i++)
        s[i] = vjp_ref_sigmoid(x[i]);
    vjp_ref_matmul(y, s, w, r, f, f, 0, 1);
    vjp_ref_matmul(q, x, w, r, f, f, 0, 0);
    for (int i = 0; i < r; i++)
        for (int j = 0; j < f; j++) {
            int e = i * f + j;
            out[e] = tanh(x[e] + y[e] + b[j]) + q[e] + (x[e] + x[e]);
        }
    return vjp_ref_mse(out, c->val[3], (size_t)(r * f));
}

/* Leaves a (0), t1 (1), t2 (2); out = sigmoid(a);
 * loss = mse(a, t1) + mse(sigmoid(a), t2). */
static double vjp_model_loss_sum(const struct vjp_case *c, double *out)
{
    size_t n = vjp_leaf_node(c, 0)->count;
    for (size_t i = 0; i < n; i++)
        out[i] = vjp_ref_sigmoid(c->val[0][i]);
    return vjp_ref_mse(c->val[0], c->val[1], n) + vjp_ref_mse(out, c->val[2], n);
}

/* Leaves x (0) (R,F), target (1) (F,F); out = x^T x. */
static double vjp_model_gram(const struct vjp_case *c, double *out)
{
    int r = (int)vjp_leaf_node(c, 0)->shape[0], f = (int)vjp_leaf_node(c, 0)->shape[1];
    vjp_ref_matmul(out, c->val[0], c->val[0], f, r, f, 1, 0);
    return vjp_ref_mse(out, c->val[1], (size_t)(f * f));
}

/* Leaves x (0) (1,F), r (1) (F,1); out = loss = x r, a (1,1) matmul. */
static double vjp_model_dot(const struct vjp_case *c, double *out)
{
    size_t f = vjp_leaf_node(c, 0)->count;
    double s = 0;
    for (size_t i = 0; i < f; i++)
        s += c->val[0][i] * c->val[1][i];
    out[0] = s;
    return s;
}

/* Leaves p (0), t (1); out = loss = sigmoid(mse(p, t)). */
static double vjp_model_sigmoid_of_mse(const struct vjp_case *c, double *out)
{
    out[0] = vjp_ref_sigmoid(vjp_ref_mse(c->val[0], c->val[1], vjp_leaf_node(c, 0)->count));
    return out[0];
}

/* Leaves p (0), t (1); out = m = mse(p, t); loss = m + m. */
static double vjp_model_twice_mse(const struct vjp_case *c, double *out)
{
    out[0] = vjp_ref_mse(c->val[0], c->val[1], vjp_leaf_node(c, 0)->count);
    return out[0] + out[0];
}

/* ---- the check ------------------------------------------------------------ */

/* Append the backward pass, run one step in float32 on the cpu backend, and
 * compare the forward value of c->out and the loss with the model (relative
 * 1e-5 of the output's scale), and every parameter's gradient with central
 * differences of the model (1e-3 relative, floor 5% of the largest one). */
void vjp_check(struct vjp_case *c)
{
    struct graph *g = &c->g;
    graph_backward(g, c->loss);

    void *ctx = NULL;
    struct backend_options bo = {.threads = 1};
    assert_int_equal(backend_cpu.init(&ctx, &bo), 0);
    struct exec e;
    if (exec_init(&e, g, &backend_cpu, ctx) != 0)
        fail_msg("%s: exec_init: %s", c->what, dt_error());
    size_t maxn = 1;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].count > maxn)
            maxn = g->nodes[i].count;
    float *host = malloc(maxn * sizeof *host);
    double *want = malloc(maxn * sizeof *want), *fd = malloc(maxn * sizeof *fd);
    assert_true(host && want && fd);
    for (int k = 0; k < c->nleaf; k++) {
        for (size_t j = 0; j < vjp_leaf_node(c, k)->count; j++)
            host[j] = (float)c->val[k][j];
        exec_set(&e, c->leaf[k], host);
    }
    exec_step(&e, 0);

    /* Forward. */
    const struct node *on = &g->nodes[c->out];
    double lw = c->model(c, want);
    exec_get(&e, c->out, host);
    double oscale = 0;
    for (size_t j = 0; j < on->count; j++)
        oscale = fmax(oscale, fabs(want[j]));
    for (size_t j = 0; j < on->count; j++)
        if (!(fabs(host[j] - want[j]) <= 1e-5 * fmax(fabs(want[j]), oscale)))
            fail_msg("%s: forward %s[%zu] = %.9g, double model %.9g", c->what, on->name, j,
                     (double)host[j], want[j]);
    float lf;
    exec_get(&e, c->loss, &lf);
    if (!(fabs(lf - lw) <= 1e-5 * fabs(lw)))
        fail_msg("%s: loss %.9g, double model %.9g", c->what, (double)lf, lw);

    /* Gradients of every parameter; inputs get none. */
    for (int k = 0; k < c->nleaf; k++) {
        const struct node *ln = vjp_leaf_node(c, k);
        int gi = graph_grad_of(g, c->leaf[k]);
        if (ln->type != OP_PARAM) {
            if (gi >= 0)
                fail_msg("%s: input %s got a gradient node %s", c->what, ln->name,
                         g->nodes[gi].name);
            continue;
        }
        if (gi < 0)
            fail_msg("%s: parameter %s has no gradient node", c->what, ln->name);
        const struct node *gn = &g->nodes[gi];
        if (gn->ndim != ln->ndim || memcmp(gn->shape, ln->shape, sizeof gn->shape) != 0)
            fail_msg("%s: gradient %s of %s has the wrong shape", c->what, gn->name, ln->name);
        exec_get(&e, gi, host);
        double gscale = 0;
        for (size_t j = 0; j < ln->count; j++) {
            double x0 = c->val[k][j], h = 1e-6 * fmax(1.0, fabs(x0));
            c->val[k][j] = x0 + h;
            double lp = c->model(c, want);
            c->val[k][j] = x0 - h;
            double lm = c->model(c, want);
            c->val[k][j] = x0;
            fd[j] = (lp - lm) / (2 * h);
            gscale = fmax(gscale, fabs(fd[j]));
        }
        if (!(gscale > 1e-4))
            fail_msg("%s: gradient of %s vanishes (%g): the case tests nothing", c->what,
                     ln->name, gscale);
        for (size_t j = 0; j < ln->count; j++)
            if (!(fabs(host[j] - fd[j]) <= 1e-3 * fmax(fabs(fd[j]), 0.05 * gscale)))
                fail_msg("%s: d loss / d %s[%zu] = %.9g (node %s), finite differences %.9g",
                         c->what, ln->name, j, (double)host[j], gn->name, fd[j]);
    }
    free(host);
    free(want);
    free(fd);
    exec_free(&e);
    backend_cpu.free(ctx);
}

/* ---- one test per op ------------------------------------------------------ */

static void vjp_run_matmul(int m, int k, int n, int ta, int tb, uint64_t seed)
{
    struct vjp_case c;
    char what[64];
    snprintf(what, sizeof what, "matmul %dx%dx%d ta=%d tb=%d", m, k, n, ta, tb);
    vjp_case_init(&c, what, seed);
    int a = ta ? vjp_leaf(&c, 1, "a", (uint32_t)k, (uint32_t)m, -1, 1, 0)
               : vjp_leaf(&c, 1, "a", (uint32_t)m, (uint32_t)k, -1, 1, 0);
    int b = tb ? vjp_leaf(&c, 1, "b", (uint32_t)n, (uint32_t)k, -1, 1, 0)
               : vjp_leaf(&c, 1, "b", (uint32_t)k, (uint32_t)n, -1, 1, 0);
    c.out = graph_matmul(&c.g, "c", a, b, ta, tb);
    int t = vjp_leaf(&c, 0, "t", (uint32_t)m, (uint32_t)n, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, t);
    c.model = vjp_model_matmul;
    vjp_check(&c);
    vjp_case_free(&c);
}

/* All four transposition flags on square shapes (where a wrong flag in a
 * rule shows in the values) and on non-square ones (where it aborts with a
 * shape error or gives the gradient a wrong shape), plus a thin product. */
static void test_matmul(void **state)
{
    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            vjp_run_matmul(4, 4, 4, ta, tb, 201 + (uint64_t)(2 * ta + tb));
            vjp_run_matmul(3, 4, 5, ta, tb, 101 + (uint64_t)(2 * ta + tb));
            vjp_run_matmul(1, 3, 2, ta, tb, 301 + (uint64_t)(2 * ta + tb));
        }
}

static void test_add_bias(void **state)
{
    (void)state;
    struct vjp_case c;
    vjp_case_init(&c, "add_bias", 11);
    int x = vjp_leaf(&c, 1, "x", 3, 5, -1, 1, 0);
    int b = vjp_leaf(&c, 1, "b", 5, 0, -1, 1, 0);
    c.out = graph_add_bias(&c.g, "y", x, b);
    int t = vjp_leaf(&c, 0, "t", 3, 5, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, t);
    c.model = vjp_model_add_bias;
    vjp_check(&c);
    vjp_case_free(&c);
}

static void vjp_run_unary(enum op_type t, double lo, double hi, double away, uint64_t seed)
{
    struct vjp_case c;
    vjp_case_init(&c, op_type_name(t), seed);
    int x = vjp_leaf(&c, 1, "x", 4, 3, lo, hi, away);
    c.out = t == OP_SIGMOID ? graph_sigmoid(&c.g, "y", x)
          : t == OP_TANH    ? graph_tanh(&c.g, "y", x)
                            : graph_relu(&c.g, "y", x);
    int tg = vjp_leaf(&c, 0, "t", 4, 3, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, tg);
    c.model = vjp_model_unary;
    vjp_check(&c);
    vjp_case_free(&c);
}

static void test_sigmoid(void **state)
{
    (void)state;
    vjp_run_unary(OP_SIGMOID, -4, 4, 0, 21);
}

static void test_tanh(void **state)
{
    (void)state;
    vjp_run_unary(OP_TANH, -2.5, 2.5, 0, 22);
}

/* Inputs at least 0.1 from the kink, far beyond the finite-difference step. */
static void test_relu(void **state)
{
    (void)state;
    vjp_run_unary(OP_RELU, -2, 2, 0.1, 23);
}

static void test_add(void **state)
{
    (void)state;
    struct vjp_case c;
    vjp_case_init(&c, "add", 31);
    int a = vjp_leaf(&c, 1, "a", 2, 6, -1, 1, 0);
    int b = vjp_leaf(&c, 1, "b", 2, 6, -1, 1, 0);
    c.out = graph_add(&c.g, "y", a, b);
    int t = vjp_leaf(&c, 0, "t", 2, 6, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, t);
    c.model = vjp_model_add;
    vjp_check(&c);
    vjp_case_free(&c);
}

static void test_mse(void **state)
{
    (void)state;
    struct vjp_case c;
    vjp_case_init(&c, "mse", 41);
    int p = vjp_leaf(&c, 1, "p", 3, 7, -1, 1, 0);
    int t = vjp_leaf(&c, 0, "t", 3, 7, -1, 1, 0);
    c.loss = c.out = graph_mse(&c.g, "loss", p, t);
    c.model = vjp_model_mse;
    vjp_check(&c);
    vjp_case_free(&c);
}

/* mse below the loss: its backward op gets the upstream gradient input g. */
static void test_mse_nested(void **state)
{
    (void)state;
    struct vjp_case c;
    vjp_case_init(&c, "mse nested", 42);
    int p = vjp_leaf(&c, 1, "p", 2, 3, -1, 1, 0);
    int t = vjp_leaf(&c, 0, "t", 2, 3, -1, 1, 0);
    int t2 = vjp_leaf(&c, 0, "t2", 1, 0, 2, 3, 0); /* keeps m - t2 away from 0 */
    c.out = graph_mse(&c.g, "m", p, t);
    c.loss = graph_mse(&c.g, "loss", c.out, t2);
    c.model = vjp_model_mse_nested;
    vjp_check(&c);
    vjp_case_free(&c);
}

/* One tensor feeding several consumers (x five edges, two from a single
 * add; w two): contributions must be summed. */
static void test_compose(void **state)
{
    (void)state;
    struct vjp_case c;
    vjp_case_init(&c, "composition", 51);
    struct graph *g = &c.g;
    int x = vjp_leaf(&c, 1, "x", 3, 4, -1, 1, 0);
    int w = vjp_leaf(&c, 1, "w", 4, 4, -0.7, 0.7, 0);
    int b = vjp_leaf(&c, 1, "b", 4, 0, -0.5, 0.5, 0);
    int s = graph_sigmoid(g, "s", x);
    int y = graph_matmul(g, "y", s, w, 0, 1);
    int z = graph_add(g, "z", x, y);
    int u = graph_add_bias(g, "u", z, b);
    int h = graph_tanh(g, "h", u);
    int q = graph_matmul(g, "q", x, w, 0, 0);
    int xx = graph_add(g, "xx", x, x);
    int hq = graph_add(g, "hq", h, q);
    c.out = graph_add(g, "o", hq, xx);
    int t = vjp_leaf(&c, 0, "t", 3, 4, -1, 1, 0);
    c.loss = graph_mse(g, "loss", c.out, t);
    c.model = vjp_model_compose;
    vjp_check(&c);
    vjp_case_free(&c);
}

/* A loss that is the sum of two mse terms, both depending on a. */
static void test_loss_sum(void **state)
{
    (void)state;
    struct vjp_case c;
    vjp_case_init(&c, "sum of two mse", 52);
    struct graph *g = &c.g;
    int a = vjp_leaf(&c, 1, "a", 2, 5, -2, 2, 0);
    int t1 = vjp_leaf(&c, 0, "t1", 2, 5, -1, 1, 0);
    int t2 = vjp_leaf(&c, 0, "t2", 2, 5, -1, 1, 0);
    c.out = graph_sigmoid(g, "s", a);
    int m1 = graph_mse(g, "m1", a, t1);
    int m2 = graph_mse(g, "m2", c.out, t2);
    c.loss = graph_add(g, "loss", m1, m2);
    c.model = vjp_model_loss_sum;
    vjp_check(&c);
    vjp_case_free(&c);
}

/* ---- graphs whose backward pass must not abort ---------------------------
 * graph_backward panics (abort) on a broken invariant, so each of these
 * first builds the backward pass in a child process: a crash there fails
 * the test with a message instead of killing the whole program. */

static void vjp_expect_backward_survives(vjp_build_fn build, const char *what)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct vjp_case c;
        vjp_case_init(&c, what, 1);
        build(&c);
        graph_backward(&c.g, c.loss);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("%s: graph_backward died (%s %d); see the panic message above", what,
                 WIFSIGNALED(st) ? "signal" : "exit status",
                 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

void vjp_run_guarded(vjp_build_fn build, const char *what, uint64_t seed)
{
    vjp_expect_backward_survives(build, what);
    struct vjp_case c;
    vjp_case_init(&c, what, seed);
    build(&c);
    vjp_check(&c);
    vjp_case_free(&c);
}

static void vjp_build_gram(struct vjp_case *c)
{
    int x = vjp_leaf(c, 1, "x", 3, 4, -1, 1, 0);
    c->out = graph_matmul(&c->g, "y", x, x, 1, 0);
    int t = vjp_leaf(c, 0, "t", 4, 4, -1, 1, 0);
    c->loss = graph_mse(&c->g, "loss", c->out, t);
    c->model = vjp_model_gram;
}

/* One node as both operands of a product: y = x^T x. */
static void test_matmul_same_operand(void **state)
{
    (void)state;
    vjp_run_guarded(vjp_build_gram, "matmul(x, x)", 61);
}

static void vjp_build_dot(struct vjp_case *c)
{
    int x = vjp_leaf(c, 1, "x", 1, 5, -1, 1, 0);
    int r = vjp_leaf(c, 0, "r", 5, 1, -1, 1, 0);
    c->loss = c->out = graph_matmul(&c->g, "loss", x, r, 0, 0);
    c->model = vjp_model_dot;
}

static void vjp_build_sigmoid_of_mse(struct vjp_case *c)
{
    int p = vjp_leaf(c, 1, "p", 2, 3, -1, 1, 0);
    int t = vjp_leaf(c, 0, "t", 2, 3, -1, 1, 0);
    int m = graph_mse(&c->g, "m", p, t);
    c->loss = c->out = graph_sigmoid(&c->g, "loss", m);
    c->model = vjp_model_sigmoid_of_mse;
}

static void vjp_build_twice_mse(struct vjp_case *c)
{
    int p = vjp_leaf(c, 1, "p", 2, 3, -1, 1, 0);
    int t = vjp_leaf(c, 0, "t", 2, 3, -1, 1, 0);
    c->out = graph_mse(&c->g, "m", p, t);
    c->loss = graph_add(&c->g, "loss", c->out, c->out);
    c->model = vjp_model_twice_mse;
}

/* graph.h: the loss may be any scalar node, d loss / d loss = 1. */
static void test_loss_matmul(void **state)
{
    (void)state;
    vjp_run_guarded(vjp_build_dot, "loss = (1,1) matmul", 62);
}

static void test_loss_sigmoid(void **state)
{
    (void)state;
    vjp_run_guarded(vjp_build_sigmoid_of_mse, "loss = sigmoid(mse)", 63);
}

static void test_loss_add_same(void **state)
{
    (void)state;
    vjp_run_guarded(vjp_build_twice_mse, "loss = m + m", 64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_add_bias),
        cmocka_unit_test(test_sigmoid),
        cmocka_unit_test(test_tanh),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_mse_nested),
        cmocka_unit_test(test_compose),
        cmocka_unit_test(test_loss_sum),
        cmocka_unit_test(test_matmul_same_operand),
        cmocka_unit_test(test_loss_matmul),
        cmocka_unit_test(test_loss_sigmoid),
        cmocka_unit_test(test_loss_add_same),
        cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_add_bias4),
        cmocka_unit_test(test_maxpool2),
        cmocka_unit_test(test_maxpool2_ties),
        cmocka_unit_test(test_upsample2),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_hard_sigmoid),
        cmocka_unit_test(test_satlu),
        cmocka_unit_test(test_neg),
        cmocka_unit_test(test_sub),
        cmocka_unit_test(test_mul),
        cmocka_unit_test(test_mul_same_operand),
        cmocka_unit_test(test_mean),
        cmocka_unit_test(test_convlstm_gate),
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_adam),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
