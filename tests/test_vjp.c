/* test_vjp.c: every op type's vector-Jacobian rule (graph.c) run on the cpu
 * backend in float32, against central differences of an independent
 * double-precision model of the same forward function; and the optimizer's
 * update ops against the formulas of op.h, evaluated in double.
 * Dimension letters: M, K, N of a matrix product; R rows, F features; images
 * (N, C, H, W) = (batch, channel, row, column) and filters (K, C, R, S) =
 * (output channel, input channel, kernel row, kernel column), as in op.h. */
#include <float.h>
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
#include "util.h"

#define VJP_MAX_LEAVES 8

/* One case: a graph built by the test, the values of its leaves in double
 * (each exactly a float, so the float32 run and the double model evaluate
 * the same point), and the double model of its forward function. */
struct vjp_case {
    char what[64];
    struct graph g;
    int nleaf;
    int leaf[VJP_MAX_LEAVES];      /* node indices, in creation order */
    double *val[VJP_MAX_LEAVES];   /* values of leaf k, row-major */
    int out;                       /* node whose value the model also returns */
    int loss;                      /* scalar loss node */
    /* The loss at the current c->val, computed in double without the
     * library; fills out (node out's count values). */
    double (*model)(const struct vjp_case *c, double *out);
    uint64_t rng;
};

static void vjp_case_init(struct vjp_case *c, const char *what, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    snprintf(c->what, sizeof c->what, "%s", what);
    graph_init(&c->g);
    c->out = c->loss = -1;
    c->rng = seed;
}

static void vjp_case_free(struct vjp_case *c)
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
static int vjp_leaf(struct vjp_case *c, int param, const char *name, uint32_t d0, uint32_t d1,
                    double lo, double hi, double away)
{
    uint32_t shape[2] = {d0, d1};
    return vjp_leaf_shape(c, param, name, d1 ? 2 : 1, shape, lo, hi, away);
}

/* A leaf of shape (N,C,H,W), or a filter (K,C,R,S). */
static int vjp_leaf4(struct vjp_case *c, int param, const char *name, uint32_t d0, uint32_t d1,
                     uint32_t d2, uint32_t d3, double lo, double hi, double away)
{
    uint32_t shape[4] = {d0, d1, d2, d3};
    return vjp_leaf_shape(c, param, name, 4, shape, lo, hi, away);
}

/* Move every value of leaf k closer than `dist` to `kink` (where the
 * function's derivative jumps) out to at least `dist` from it, mirrored, so
 * finite differences never straddle the kink. */
static void vjp_leaf_avoid(struct vjp_case *c, int k, double kink, double dist)
{
    double *v = c->val[k];
    for (size_t j = 0; j < c->g.nodes[c->leaf[k]].count; j++) {
        double d = v[j] - kink;
        if (fabs(d) < dist)
            v[j] = (double)(float)(kink + (d < 0 ? -1 : 1) * (dist + fabs(d)));
        assert_true(fabs(v[j] - kink) >= 0.99 * dist);
    }
}

static const struct node *vjp_leaf_node(const struct vjp_case *c, int k)
{
    return &c->g.nodes[c->leaf[k]];
}

/* ---- the independent double-precision models ------------------------------ */

static double vjp_ref_mse(const double *p, /* (n) */ const double *t, /* (n) */ size_t n)
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

/* ---- image ops: models ---------------------------------------------------- */

/* Offset of element (n, c, h, w) of a tensor of shape sh (N,C,H,W). */
static size_t vjp_at(const uint32_t *sh, int n, int c, int h, int w)
{
    return (((size_t)n * sh[1] + (size_t)c) * sh[2] + (size_t)h) * sh[3] + (size_t)w;
}

/* out (N,K,H,W) = sum over c, r, s of x[n,c,h+r-R/2,w+s-S/2] * w[k,c,r,s],
 * terms outside the image left out; x (N,C,H,W) of shape xs, w (K,C,R,S) of
 * shape ws. Written from op.h's formula, not from any kernel. */
static void vjp_ref_conv2d(double *out, const double *x, const uint32_t *xs,
                           const double *w, const uint32_t *ws)
{
    int nn = (int)xs[0], nc = (int)xs[1], nh = (int)xs[2], nw = (int)xs[3];
    int nk = (int)ws[0], nr = (int)ws[2], ns = (int)ws[3];
    uint32_t os[4] = {xs[0], ws[0], xs[2], xs[3]};
    for (int n = 0; n < nn; n++)
        for (int k = 0; k < nk; k++)
            for (int h = 0; h < nh; h++)
                for (int wc = 0; wc < nw; wc++) {
                    double s = 0;
                    for (int c = 0; c < nc; c++)
                        for (int r = 0; r < nr; r++)
                            for (int q = 0; q < ns; q++) {
                                int ih = h + r - nr / 2, iw = wc + q - ns / 2;
                                if (ih < 0 || ih >= nh || iw < 0 || iw >= nw)
                                    continue;
                                s += x[vjp_at(xs, n, c, ih, iw)] * w[vjp_at(ws, k, c, r, q)];
                            }
                    out[vjp_at(os, n, k, h, wc)] = s;
                }
}

/* x (N,C,H,W) += b[c]. */
static void vjp_ref_add_bias4(double *x, const uint32_t *xs, const double *b)
{
    for (int n = 0; n < (int)xs[0]; n++)
        for (int c = 0; c < (int)xs[1]; c++)
            for (size_t j = 0; j < (size_t)xs[2] * xs[3]; j++)
                x[vjp_at(xs, n, c, 0, 0) + j] += b[c];
}

/* (double)0.2f: the slope op.h prescribes. */
#define VJP_HARD_SIGMOID_SLOPE ((double)0.2f)

static double vjp_ref_hard_sigmoid(double x)
{
    double t = VJP_HARD_SIGMOID_SLOPE * x + 0.5;
    return t < 0 ? 0 : t > 1 ? 1 : t;
}

/* Scale times the mean of n values. */
static double vjp_ref_mean(const double *x, size_t n, double scale)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    return scale * s / (double)n;
}

/* Leaves x (0) (N,C,H,W), w (1) (K,C,R,S), target (2); out = conv2d(x, w). */
static double vjp_model_conv2d(const struct vjp_case *c, double *out)
{
    vjp_ref_conv2d(out, c->val[0], vjp_leaf_node(c, 0)->shape, c->val[1],
                   vjp_leaf_node(c, 1)->shape);
    return vjp_ref_mse(out, c->val[2], c->g.nodes[c->out].count);
}

/* Leaves x (0) (N,C,H,W), b (1) (C), target (2); out = x + b[c]. */
static double vjp_model_add_bias4(const struct vjp_case *c, double *out)
{
    size_t n = vjp_leaf_node(c, 0)->count;
    memcpy(out, c->val[0], n * sizeof *out);
    vjp_ref_add_bias4(out, vjp_leaf_node(c, 0)->shape, c->val[1]);
    return vjp_ref_mse(out, c->val[2], n);
}

/* Leaves x (0) (N,C,H,W), target (1); out = the max of each 2x2 window. */
static double vjp_model_maxpool2(const struct vjp_case *c, double *out)
{
    const uint32_t *xs = vjp_leaf_node(c, 0)->shape, *os = c->g.nodes[c->out].shape;
    const double *x = c->val[0];
    for (int n = 0; n < (int)os[0]; n++)
        for (int ch = 0; ch < (int)os[1]; ch++)
            for (int h = 0; h < (int)os[2]; h++)
                for (int w = 0; w < (int)os[3]; w++) {
                    double m = x[vjp_at(xs, n, ch, 2 * h, 2 * w)];
                    m = fmax(m, x[vjp_at(xs, n, ch, 2 * h, 2 * w + 1)]);
                    m = fmax(m, x[vjp_at(xs, n, ch, 2 * h + 1, 2 * w)]);
                    m = fmax(m, x[vjp_at(xs, n, ch, 2 * h + 1, 2 * w + 1)]);
                    out[vjp_at(os, n, ch, h, w)] = m;
                }
    return vjp_ref_mse(out, c->val[1], c->g.nodes[c->out].count);
}

/* Leaves x (0) (N,C,H,W), target (1); out (N,C,2H,2W) = x[h/2, w/2]. */
static double vjp_model_upsample2(const struct vjp_case *c, double *out)
{
    const uint32_t *xs = vjp_leaf_node(c, 0)->shape, *os = c->g.nodes[c->out].shape;
    for (int n = 0; n < (int)os[0]; n++)
        for (int ch = 0; ch < (int)os[1]; ch++)
            for (int h = 0; h < (int)os[2]; h++)
                for (int w = 0; w < (int)os[3]; w++)
                    out[vjp_at(os, n, ch, h, w)] = c->val[0][vjp_at(xs, n, ch, h / 2, w / 2)];
    return vjp_ref_mse(out, c->val[1], c->g.nodes[c->out].count);
}

/* out (N, C0+C1+..., H, W) = leaves first .. first+m-1 stacked along channels. */
static void vjp_ref_concat(double *out, const struct vjp_case *c, int first, int m)
{
    const uint32_t *os = vjp_leaf_node(c, first)->shape;
    uint32_t total = 0;
    for (int k = first; k < first + m; k++)
        total += vjp_leaf_node(c, k)->shape[1];
    size_t plane = (size_t)os[2] * os[3];
    for (uint32_t n = 0; n < os[0]; n++) {
        size_t c0 = 0;
        for (int k = first; k < first + m; k++) {
            uint32_t ck = vjp_leaf_node(c, k)->shape[1];
            memcpy(out + ((size_t)n * total + c0) * plane, c->val[k] + (size_t)n * ck * plane,
                   ck * plane * sizeof *out);
            c0 += ck;
        }
    }
}

/* Leaves x0 .. x(m-1) (N,Ck,H,W) (0 .. m-1), target (m); out = their concat. */
static double vjp_model_concat(const struct vjp_case *c, double *out)
{
    vjp_ref_concat(out, c, 0, c->nleaf - 1);
    return vjp_ref_mse(out, c->val[c->nleaf - 1], c->g.nodes[c->out].count);
}

/* Leaves x (0) (N,C,H,W), target (1); out = channels c0 .. c0+n-1 of x. */
static double vjp_model_slice(const struct vjp_case *c, double *out)
{
    const struct node *o = &c->g.nodes[c->out];
    const uint32_t *xs = vjp_leaf_node(c, 0)->shape;
    size_t plane = (size_t)xs[2] * xs[3];
    for (uint32_t n = 0; n < xs[0]; n++)
        memcpy(out + (size_t)n * o->p.slice.n * plane,
               c->val[0] + ((size_t)n * xs[1] + o->p.slice.c0) * plane,
               o->p.slice.n * plane * sizeof *out);
    return vjp_ref_mse(out, c->val[1], o->count);
}

/* Leaves x (0), target (1); out = f(x) elementwise, f named by the out op. */
static double vjp_model_image_unary(const struct vjp_case *c, double *out)
{
    const struct node *o = &c->g.nodes[c->out];
    for (size_t i = 0; i < o->count; i++) {
        double x = c->val[0][i], m = o->p.satlu.max;
        out[i] = o->type == OP_HARD_SIGMOID ? vjp_ref_hard_sigmoid(x)
               : o->type == OP_SATLU        ? (x > m ? m : x)
                                            : -x;
    }
    return vjp_ref_mse(out, c->val[1], o->count);
}

/* Leaves a (0), b (1), target (2); out = a - b or a * b, named by the out op. */
static double vjp_model_binary(const struct vjp_case *c, double *out)
{
    const struct node *o = &c->g.nodes[c->out];
    for (size_t i = 0; i < o->count; i++) {
        double a = c->val[0][i], b = c->val[1][i];
        out[i] = o->type == OP_SUB ? a - b : a * b;
    }
    return vjp_ref_mse(out, c->val[2], o->count);
}

/* Leaves a (0), target (1); out = a * a. */
static double vjp_model_square(const struct vjp_case *c, double *out)
{
    size_t n = vjp_leaf_node(c, 0)->count;
    for (size_t i = 0; i < n; i++)
        out[i] = c->val[0][i] * c->val[0][i];
    return vjp_ref_mse(out, c->val[1], n);
}

/* Leaf x (0); out = loss = scale * mean(x), scale that of the out op. */
static double vjp_model_mean(const struct vjp_case *c, double *out)
{
    out[0] = vjp_ref_mean(c->val[0], vjp_leaf_node(c, 0)->count, c->g.nodes[c->out].p.mean.scale);
    return out[0];
}

/* Leaves x (0), t (1) (1); out = m = scale * mean(x); loss = (m - t)^2, so
 * mean_bwd gets an upstream gradient other than 1. */
static double vjp_model_mean_mse(const struct vjp_case *c, double *out)
{
    out[0] = vjp_ref_mean(c->val[0], vjp_leaf_node(c, 0)->count, c->g.nodes[c->out].p.mean.scale);
    return (out[0] - c->val[1][0]) * (out[0] - c->val[1][0]);
}

/* Leaves a (0), b (1); out = loss = s1 mean(a) + s2 mean(relu(b)), s1 and
 * s2 the scales of the nodes "m1" and "m2". */
static double vjp_model_mean_sum(const struct vjp_case *c, double *out)
{
    const struct graph *g = &c->g;
    double s1 = g->nodes[graph_find(g, "m1")].p.mean.scale;
    double s2 = g->nodes[graph_find(g, "m2")].p.mean.scale;
    size_t nb = vjp_leaf_node(c, 1)->count;
    double r[64];
    assert_true(nb <= 64);
    for (size_t i = 0; i < nb; i++)
        r[i] = c->val[1][i] > 0 ? c->val[1][i] : 0;
    out[0] = vjp_ref_mean(c->val[0], vjp_leaf_node(c, 0)->count, s1) + vjp_ref_mean(r, nb, s2);
    return out[0];
}

/* A ConvLSTM gate. Leaves x (0) (N,Cx,H,W) (an input), h (1) (N,Ch,H,W),
 * w1 (2) and w2 (4) (K,Cx+Ch,R,S), b1 (3) and b2 (5) (K):
 *   xh = concat(x, h); i = hard_sigmoid(conv(xh, w1) + b1);
 *   gg = tanh(conv(xh, w2) + b2); out = i * gg; loss = scale * mean(out),
 * scale that of the node "loss". Fails when a pre-activation of i comes
 * within 1e-3 of a kink of hard_sigmoid (the case would test nothing). */
static double vjp_model_gate(const struct vjp_case *c, double *out)
{
    const uint32_t *xs = vjp_leaf_node(c, 0)->shape, *ws = vjp_leaf_node(c, 2)->shape;
    const struct node *o = &c->g.nodes[c->out];
    uint32_t xhs[4] = {xs[0], ws[1], xs[2], xs[3]};
    double xh[512], i1[512], g2[512];
    assert_true(xhs[0] * xhs[1] * xhs[2] * xhs[3] <= 512 && o->count <= 512);
    vjp_ref_concat(xh, c, 0, 2);
    vjp_ref_conv2d(i1, xh, xhs, c->val[2], ws);
    vjp_ref_add_bias4(i1, o->shape, c->val[3]);
    vjp_ref_conv2d(g2, xh, xhs, c->val[4], vjp_leaf_node(c, 4)->shape);
    vjp_ref_add_bias4(g2, o->shape, c->val[5]);
    for (size_t j = 0; j < o->count; j++) {
        if (fabs(fabs(i1[j]) - 2.5) < 1e-3)
            fail_msg("%s: pre-activation %.6g next to a kink of hard_sigmoid", c->what, i1[j]);
        out[j] = vjp_ref_hard_sigmoid(i1[j]) * tanh(g2[j]);
    }
    return vjp_ref_mean(out, o->count, c->g.nodes[c->loss].p.mean.scale);
}

/* ---- the check ------------------------------------------------------------ */

/* Append the backward pass, run one step in float32 on the cpu backend, and
 * compare the forward value of c->out and the loss with the model (relative
 * 1e-5 of the output's scale), and every parameter's gradient with central
 * differences of the model (1e-3 relative, floor 5% of the largest one). */
static void vjp_check(struct vjp_case *c)
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

typedef void (*vjp_build_fn)(struct vjp_case *c);

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

static void vjp_run_guarded(vjp_build_fn build, const char *what, uint64_t seed)
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

/* ---- image ops -------------------------------------------------------------
 * Random filters are asymmetric, so a rule or kernel that flips, transposes
 * or shifts one fails; images are not square and batches hold two. */

static void vjp_run_conv2d(uint32_t n, uint32_t ch, uint32_t h, uint32_t w, uint32_t k,
                           uint32_t r, uint32_t s, uint64_t seed)
{
    struct vjp_case c;
    char what[64];
    snprintf(what, sizeof what, "conv2d x (%u,%u,%u,%u) w (%u,%u,%u,%u)", n, ch, h, w, k, ch, r, s);
    vjp_case_init(&c, what, seed);
    int x = vjp_leaf4(&c, 1, "x", n, ch, h, w, -1, 1, 0);
    int f = vjp_leaf4(&c, 1, "w", k, ch, r, s, -1, 1, 0);
    c.out = graph_conv2d(&c.g, "y", x, f);
    int t = vjp_leaf4(&c, 0, "t", n, k, h, w, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, t);
    c.model = vjp_model_conv2d;
    vjp_check(&c);
    vjp_case_free(&c);
}

/* Gradients of x (conv2d_bwd_data) and w (conv2d_bwd_filter); C, K > 1, a
 * 1x1 kernel, a 5x3 one, and a 3x5 one wider than its image. */
static void test_conv2d(void **state)
{
    (void)state;
    vjp_run_conv2d(2, 3, 5, 7, 2, 3, 3, 401);
    vjp_run_conv2d(2, 2, 4, 6, 3, 1, 1, 402);
    vjp_run_conv2d(2, 2, 6, 5, 3, 5, 3, 403);
    vjp_run_conv2d(2, 2, 3, 4, 3, 3, 5, 404);
}

/* Per-channel bias of an image: bias_grad sums over n, h, w. */
static void test_add_bias4(void **state)
{
    (void)state;
    struct vjp_case c;
    vjp_case_init(&c, "add_bias (N,C,H,W)", 411);
    int x = vjp_leaf4(&c, 1, "x", 2, 3, 4, 5, -1, 1, 0);
    int b = vjp_leaf(&c, 1, "b", 3, 0, -1, 1, 0);
    c.out = graph_add_bias(&c.g, "y", x, b);
    int t = vjp_leaf4(&c, 0, "t", 2, 3, 4, 5, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, t);
    c.model = vjp_model_add_bias4;
    vjp_check(&c);
    vjp_case_free(&c);
}

/* Windows whose four values lie at least 0.05 apart, so finite differences
 * never cross a tie (ties: test_maxpool2_ties). */
static void test_maxpool2(void **state)
{
    (void)state;
    struct vjp_case c;
    vjp_case_init(&c, "maxpool2", 421);
    int x = vjp_leaf4(&c, 1, "x", 2, 3, 4, 6, -1, 1, 0);
    const uint32_t *xs = c.g.nodes[x].shape;
    for (int n = 0; n < 2; n++)
        for (int ch = 0; ch < 3; ch++)
            for (int h = 0; h < 4; h += 2)
                for (int w = 0; w < 6; w += 2) {
                    size_t at[4] = {vjp_at(xs, n, ch, h, w), vjp_at(xs, n, ch, h, w + 1),
                                    vjp_at(xs, n, ch, h + 1, w), vjp_at(xs, n, ch, h + 1, w + 1)};
                    for (int close = 1; close;) {
                        for (int j = 0; j < 4; j++)
                            c.val[0][at[j]] = (double)(float)tu_rand_uniform(&c.rng, -1, 1);
                        close = 0;
                        for (int i = 0; i < 4; i++)
                            for (int j = 0; j < i; j++)
                                if (fabs(c.val[0][at[i]] - c.val[0][at[j]]) < 0.05)
                                    close = 1;
                    }
                }
    c.out = graph_maxpool2(&c.g, "y", x);
    int t = vjp_leaf4(&c, 0, "t", 2, 3, 2, 3, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, t);
    c.model = vjp_model_maxpool2;
    vjp_check(&c);
    vjp_case_free(&c);
}

static uint32_t vjp_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* op.h: with ties the gradient goes to the first maximum in row-major window
 * order (top-left, top-right, bottom-left, bottom-right), -0 and +0 tie, and
 * a NaN wins over everything; the other three get +0. Checked bit for bit,
 * forward value included. */
static void test_maxpool2_ties(void **state)
{
    (void)state;
    static const struct {
        float v[4];  /* top-left, top-right, bottom-left, bottom-right */
        int first;   /* j* */
    } win[8] = {
        {{1, 1, 1, 1}, 0},
        {{0.5f, 2, 2, -1}, 1},
        {{-3, -1, -2, -1}, 1},
        {{-0.0f, 0.0f, -1, -2}, 0},
        {{0.0f, -0.0f, -1, 0.0f}, 0},
        {{-1, -2, 3, 3}, 2},
        {{0.25f, -1, -1, 4}, 3},
        {{-5, NAN, 7, NAN}, 1},
    };
    uint32_t xs[4] = {1, 2, 4, 4}, ts[4] = {1, 2, 2, 2};
    float x[32], t[8], y[8], dy[8], dx[32];
    for (int k = 0; k < 8; k++) { /* window k: channel k / 4, row k % 4 / 2, column k % 2 */
        int ch = k / 4, h = 2 * (k % 4 / 2), w = 2 * (k % 2);
        for (int j = 0; j < 4; j++)
            x[vjp_at(xs, 0, ch, h + j / 2, w + j % 2)] = win[k].v[j];
        t[k] = 10.0f + (float)k; /* dy = 2 (y - t) / 8, never 0 */
    }
    struct graph g;
    graph_init(&g);
    int xi = graph_param(&g, "x", 4, xs);
    int ti = graph_input(&g, "t", 4, ts);
    int yi = graph_maxpool2(&g, "y", xi);
    graph_backward(&g, graph_mse(&g, "loss", yi, ti));
    int dyi = graph_grad_of(&g, yi), dxi = graph_grad_of(&g, xi);
    assert_true(dyi >= 0 && dxi >= 0);
    void *ctx = NULL;
    struct backend_options bo = {.threads = 1};
    assert_int_equal(backend_cpu.init(&ctx, &bo), 0);
    struct exec e;
    if (exec_init(&e, &g, &backend_cpu, ctx) != 0)
        fail_msg("exec_init: %s", dt_error());
    exec_set(&e, xi, x);
    exec_set(&e, ti, t);
    exec_step(&e, 0);
    exec_get(&e, yi, y);
    exec_get(&e, dyi, dy);
    exec_get(&e, dxi, dx);
    for (int k = 0; k < 8; k++) {
        int ch = k / 4, h = 2 * (k % 4 / 2), w = 2 * (k % 2);
        size_t first = vjp_at(xs, 0, ch, h + win[k].first / 2, w + win[k].first % 2);
        if (vjp_bits(y[k]) != vjp_bits(x[first]))
            fail_msg("maxpool2 window %d: out %g (0x%08x), want element %d, %g (0x%08x)", k,
                     (double)y[k], vjp_bits(y[k]), win[k].first, (double)x[first],
                     vjp_bits(x[first]));
        for (int j = 0; j < 4; j++) {
            size_t at = vjp_at(xs, 0, ch, h + j / 2, w + j % 2);
            uint32_t want = j == win[k].first ? vjp_bits(dy[k]) : 0;
            if (vjp_bits(dx[at]) != want)
                fail_msg("maxpool2_bwd window %d element %d: %g (0x%08x), want 0x%08x (j* = %d)",
                         k, j, (double)dx[at], vjp_bits(dx[at]), want, win[k].first);
        }
    }
    exec_free(&e);
    backend_cpu.free(ctx);
    graph_free(&g);
}

static void test_upsample2(void **state)
{
    (void)state;
    struct vjp_case c;
    vjp_case_init(&c, "upsample2", 431);
    int x = vjp_leaf4(&c, 1, "x", 2, 2, 3, 4, -1, 1, 0);
    c.out = graph_upsample2(&c.g, "y", x);
    int t = vjp_leaf4(&c, 0, "t", 2, 2, 6, 8, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, t);
    c.model = vjp_model_upsample2;
    vjp_check(&c);
    vjp_case_free(&c);
}

/* Concat of m inputs of chans[k] channels: each input's gradient is a
 * slice of the output's. */
static void vjp_run_concat(int m, const uint32_t *chans, uint64_t seed)
{
    struct vjp_case c;
    char what[64];
    snprintf(what, sizeof what, "concat of %d", m);
    vjp_case_init(&c, what, seed);
    int xs[OP_MAX_INPUTS];
    uint32_t total = 0;
    for (int k = 0; k < m; k++) {
        char name[8];
        snprintf(name, sizeof name, "x%d", k);
        xs[k] = vjp_leaf4(&c, 1, name, 2, chans[k], 3, 4, -1, 1, 0);
        total += chans[k];
    }
    c.out = graph_concat(&c.g, "y", m, xs);
    int t = vjp_leaf4(&c, 0, "t", 2, total, 3, 4, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, t);
    c.model = vjp_model_concat;
    vjp_check(&c);
    vjp_case_free(&c);
}

static void test_concat(void **state)
{
    (void)state;
    vjp_run_concat(2, (const uint32_t[]){1, 3}, 441);
    vjp_run_concat(3, (const uint32_t[]){2, 1, 3}, 442);
}

static void vjp_run_slice(uint32_t c0, uint32_t n, uint64_t seed)
{
    struct vjp_case c;
    char what[64];
    snprintf(what, sizeof what, "slice %u..%u of 5", c0, c0 + n - 1);
    vjp_case_init(&c, what, seed);
    int x = vjp_leaf4(&c, 1, "x", 2, 5, 3, 4, -1, 1, 0);
    c.out = graph_slice(&c.g, "y", x, c0, n);
    int t = vjp_leaf4(&c, 0, "t", 2, n, 3, 4, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, t);
    c.model = vjp_model_slice;
    vjp_check(&c);
    vjp_case_free(&c);
}

/* The gradient via slice_bwd: zero outside the slice. */
static void test_slice(void **state)
{
    (void)state;
    vjp_run_slice(1, 3, 451);
    vjp_run_slice(4, 1, 452);
    vjp_run_slice(0, 2, 453);
}

/* Leaf x (2,3,4,4) in [lo, hi], its values at least 0.05 from each kink,
 * and at least `each` of them in each of the nkinks + 1 pieces between the
 * kinks (sorted); out = op(x), loss = mse against a random target. */
static void vjp_run_image_unary(enum op_type t, float max, double lo, double hi,
                                const double *kinks, int nkinks, uint64_t seed)
{
    struct vjp_case c;
    vjp_case_init(&c, op_type_name(t), seed);
    int x = vjp_leaf4(&c, 1, "x", 2, 3, 4, 4, lo, hi, 0);
    for (int k = 0; k < nkinks; k++)
        vjp_leaf_avoid(&c, 0, kinks[k], 0.05);
    for (int k = 0; k <= nkinks; k++) {
        size_t in = 0;
        for (size_t j = 0; j < c.g.nodes[x].count; j++)
            if ((k == 0 || c.val[0][j] > kinks[k - 1]) && (k == nkinks || c.val[0][j] < kinks[k]))
                in++;
        if (in < 5)
            fail_msg("%s: only %zu values in piece %d: the case misses a region", c.what, in, k);
    }
    c.out = t == OP_HARD_SIGMOID ? graph_hard_sigmoid(&c.g, "y", x)
          : t == OP_SATLU        ? graph_satlu(&c.g, "y", x, max)
                                 : graph_neg(&c.g, "y", x);
    int tg = vjp_leaf4(&c, 0, "t", 2, 3, 4, 4, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, tg);
    c.model = vjp_model_image_unary;
    vjp_check(&c);
    vjp_case_free(&c);
}

/* Values on both clipped sides (gradient 0) and in between (0.2). */
static void test_hard_sigmoid(void **state)
{
    (void)state;
    const double kinks[2] = {-2.5, 2.5};
    vjp_run_image_unary(OP_HARD_SIGMOID, 0, -4.5, 4.5, kinks, 2, 461);
}

/* Values on both sides of the bound (gradient 0 above it). */
static void test_satlu(void **state)
{
    (void)state;
    const double kinks[1] = {0.75};
    vjp_run_image_unary(OP_SATLU, 0.75f, -1.5, 2, kinks, 1, 462);
}

static void test_neg(void **state)
{
    (void)state;
    vjp_run_image_unary(OP_NEG, 0, -1, 1, NULL, 0, 463);
}

static void vjp_run_binary(enum op_type t, uint64_t seed)
{
    struct vjp_case c;
    vjp_case_init(&c, op_type_name(t), seed);
    int a = vjp_leaf4(&c, 1, "a", 2, 3, 2, 4, -1, 1, 0);
    int b = vjp_leaf4(&c, 1, "b", 2, 3, 2, 4, -1, 1, 0);
    c.out = t == OP_SUB ? graph_sub(&c.g, "y", a, b) : graph_mul(&c.g, "y", a, b);
    int tg = vjp_leaf4(&c, 0, "t", 2, 3, 2, 4, -1, 1, 0);
    c.loss = graph_mse(&c.g, "loss", c.out, tg);
    c.model = vjp_model_binary;
    vjp_check(&c);
    vjp_case_free(&c);
}

static void test_sub(void **state)
{
    (void)state;
    vjp_run_binary(OP_SUB, 471);
}

static void test_mul(void **state)
{
    (void)state;
    vjp_run_binary(OP_MUL, 472);
}

static void vjp_build_square(struct vjp_case *c)
{
    int a = vjp_leaf4(c, 1, "a", 2, 2, 3, 2, -1, 1, 0);
    c->out = graph_mul(&c->g, "y", a, a);
    int t = vjp_leaf4(c, 0, "t", 2, 2, 3, 2, -1, 1, 0);
    c->loss = graph_mse(&c->g, "loss", c->out, t);
    c->model = vjp_model_square;
}

/* One node as both factors: its two contributions are summed. */
static void test_mul_same_operand(void **state)
{
    (void)state;
    vjp_run_guarded(vjp_build_square, "mul(a, a)", 473);
}

static void vjp_build_mean(struct vjp_case *c)
{
    int x = vjp_leaf4(c, 1, "x", 2, 3, 4, 2, -1, 1, 0);
    c->loss = c->out = graph_mean(&c->g, "loss", x, 1.7f);
    c->model = vjp_model_mean;
}

static void vjp_build_mean_mse(struct vjp_case *c)
{
    int x = vjp_leaf4(c, 1, "x", 2, 3, 4, 2, -1, 1, 0);
    int t = vjp_leaf(c, 0, "t", 1, 0, 1, 2, 0); /* keeps m - t away from 0 */
    c->out = graph_mean(&c->g, "m", x, -0.6f);
    c->loss = graph_mse(&c->g, "loss", c->out, t);
    c->model = vjp_model_mean_mse;
}

/* a's values mostly positive so the two terms do not cancel (the loss is
 * checked relative to its size). */
static void vjp_build_mean_sum(struct vjp_case *c)
{
    struct graph *g = &c->g;
    int a = vjp_leaf4(c, 1, "a", 2, 2, 2, 3, -0.5, 1.5, 0);
    int b = vjp_leaf(c, 1, "b", 4, 5, -1, 1, 0.1);
    int m1 = graph_mean(g, "m1", a, 0.3f);
    int m2 = graph_mean(g, "m2", graph_relu(g, "r", b), 0.7f);
    c->loss = c->out = graph_add(g, "loss", m1, m2);
    c->model = vjp_model_mean_sum;
}

/* scale * mean as the loss (mean_bwd gets the seed 1), below an mse (it
 * gets another upstream gradient), and two scaled means added. */
static void test_mean(void **state)
{
    (void)state;
    vjp_run_guarded(vjp_build_mean, "loss = 1.7 mean(x)", 481);
    vjp_run_guarded(vjp_build_mean_mse, "loss = mse(-0.6 mean(x), t)", 482);
    vjp_run_guarded(vjp_build_mean_sum, "loss = 0.3 mean(a) + 0.7 mean(relu(b))", 483);
}

/* Shape of a ConvLSTM gate of PredNet (model: vjp_model_gate). x is an
 * input, so only h gets a slice of concat's gradient; xh feeds two convs.
 * b2 leans positive so the mean does not cancel to nothing. */
static void vjp_build_gate(struct vjp_case *c)
{
    struct graph *g = &c->g;
    int x = vjp_leaf4(c, 0, "x", 2, 2, 4, 5, -1, 1, 0);
    int h = vjp_leaf4(c, 1, "h", 2, 3, 4, 5, -1, 1, 0);
    int w1 = vjp_leaf4(c, 1, "w1", 4, 5, 3, 3, -0.3, 0.3, 0);
    int b1 = vjp_leaf(c, 1, "b1", 4, 0, -0.5, 0.5, 0);
    int w2 = vjp_leaf4(c, 1, "w2", 4, 5, 3, 3, -0.3, 0.3, 0);
    int b2 = vjp_leaf(c, 1, "b2", 4, 0, 0.3, 0.8, 0);
    int xh = graph_concat(g, "xh", 2, (const int[]){x, h});
    int ipre = graph_add_bias(g, "i.pre", graph_conv2d(g, "i.conv", xh, w1), b1);
    int gpre = graph_add_bias(g, "g.pre", graph_conv2d(g, "g.conv", xh, w2), b2);
    int i = graph_hard_sigmoid(g, "i", ipre);
    int gg = graph_tanh(g, "g", gpre);
    c->out = graph_mul(g, "ig", i, gg);
    c->loss = graph_mean(g, "loss", c->out, 2.0f);
    c->model = vjp_model_gate;
}

static void test_convlstm_gate(void **state)
{
    (void)state;
    vjp_run_guarded(vjp_build_gate, "ConvLSTM gate", 491);
}

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

static void test_sgd(void **state)
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
static void test_sgd_momentum(void **state)
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

static void test_adam(void **state)
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
