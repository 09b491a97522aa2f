/* test_vjp_image.c: the vector-Jacobian rules of PredNet's image ops
 * (convolution, pooling, upsampling, channel concat and slice, the
 * elementwise ops and mean) against central differences of double models. */
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
#include "test_util.h"
#include "test_vjp.h"
#include "util.h"

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
void test_conv2d(void **state)
{
    (void)state;
    vjp_run_conv2d(2, 3, 5, 7, 2, 3, 3, 401);
    vjp_run_conv2d(2, 2, 4, 6, 3, 1, 1, 402);
    vjp_run_conv2d(2, 2, 6, 5, 3, 5, 3, 403);
    vjp_run_conv2d(2, 2, 3, 4, 3, 3, 5, 404);
}

/* Per-channel bias of an image: bias_grad sums over n, h, w. */
void test_add_bias4(void **state)
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
void test_maxpool2(void **state)
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
void test_maxpool2_ties(void **state)
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

void test_upsample2(void **state)
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

void test_concat(void **state)
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
void test_slice(void **state)
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
void test_hard_sigmoid(void **state)
{
    (void)state;
    const double kinks[2] = {-2.5, 2.5};
    vjp_run_image_unary(OP_HARD_SIGMOID, 0, -4.5, 4.5, kinks, 2, 461);
}

/* Values on both sides of the bound (gradient 0 above it). */
void test_satlu(void **state)
{
    (void)state;
    const double kinks[1] = {0.75};
    vjp_run_image_unary(OP_SATLU, 0.75f, -1.5, 2, kinks, 1, 462);
}

void test_neg(void **state)
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

void test_sub(void **state)
{
    (void)state;
    vjp_run_binary(OP_SUB, 471);
}

void test_mul(void **state)
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
void test_mul_same_operand(void **state)
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
void test_mean(void **state)
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

void test_convlstm_gate(void **state)
{
    (void)state;
    vjp_run_guarded(vjp_build_gate, "ConvLSTM gate", 491);
}
