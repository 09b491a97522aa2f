/* test_prednet.c: PredNet's whole training step (a small configuration):
 * its loss and every parameter gradient, computed by the tape on the cpu
 * backend (float32) and on the mpfr backend (128 bits), against central
 * finite differences of an independent double-precision PredNet written
 * here from the model's equations; bitwise determinism of repeated runs;
 * the fixed products' sets of convolutions run as one against each run
 * alone, bit for bit;
 * the op names (layer and time step); prednet_check's refusals.
 * Dimension letters: N batch, C channels, H x W image, T time steps. */
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
#include "conv_sets.h"
#include "cpu_conv.h"
#include "exec.h"
#include "graph.h"
#include "model.h"
#include "test_util.h"
#include "util.h"

#define PT_N 2
#define PT_T 3
#define PT_H 8
#define PT_W 6
#define PT_L 2
static const uint32_t pt_stack[PT_L] = {1, 2};
static const uint32_t pt_rstack[PT_L] = {2, 3};
static const double pt_lw[PT_L] = {1.0, 0.5};

struct pt {
    struct model_spec spec;
    struct graph g;
    int loss;
    int nparam;
    int param[64];            /* parameter nodes */
    double *pv[64];           /* their values (exact floats) */
    int frame[PT_T];          /* data.tNN */
    double *fv;               /* frames (N, T, C, H, W), exact floats in [0, 1) */
};

static void pt_spec(struct model_spec *s)
{
    memset(s, 0, sizeof *s);
    s->name = "prednet";
    s->batch = PT_N;
    s->nstack = PT_L;
    for (int l = 0; l < PT_L; l++) {
        s->stack[l] = pt_stack[l];
        s->rstack[l] = pt_rstack[l];
        s->layer_weights[l] = pt_lw[l];
    }
    s->height = PT_H;
    s->width = PT_W;
    s->nt = PT_T;
    s->pixel_max = 1.0f;
}

static void pt_init(struct pt *p, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    pt_spec(&p->spec);
    graph_init(&p->g);
    p->loss = prednet_build(&p->g, &p->spec);
    if (p->loss < 0)
        fail_msg("prednet_build: %s", dt_error());
    graph_backward(&p->g, p->loss);
    uint64_t rng = seed;
    for (int i = 0; i < p->g.n; i++) {
        const struct node *nd = &p->g.nodes[i];
        if (nd->type != OP_PARAM)
            continue;
        assert_true(p->nparam < 64);
        double *v = malloc(nd->count * sizeof *v);
        /* biases away from zero too: relu(0) is a kink, and at t = 0 the
         * inputs of conv_ahat are all zero */
        /* the biases before a relu positive: a channel dead everywhere
         * would have a zero gradient, which any check passes */
        int pos = strstr(nd->name, "conv_a.b") || strstr(nd->name, "conv_ahat.b");
        for (size_t k = 0; k < nd->count; k++)
            v[k] = (float)tu_rand_uniform(&rng, pos ? 0.1 : -0.4, 0.4);
        p->param[p->nparam] = i;
        p->pv[p->nparam++] = v;
    }
    for (uint32_t t = 0; t < PT_T; t++) {
        char name[32];
        snprintf(name, sizeof name, "data.t%02u", t);
        p->frame[t] = graph_find(&p->g, name);
        assert_true(p->frame[t] >= 0);
    }
    size_t nf = (size_t)PT_N * PT_T * pt_stack[0] * PT_H * PT_W;
    p->fv = malloc(nf * sizeof *p->fv);
    for (size_t k = 0; k < nf; k++)
        p->fv[k] = (float)tu_rand_uniform(&rng, 0.0, 1.0);
}

static void pt_free(struct pt *p)
{
    for (int k = 0; k < p->nparam; k++)
        free(p->pv[k]);
    free(p->fv);
    graph_free(&p->g);
}

/* The values of parameter "L<l>.conv_<what>.<W|b>". */
static const double *pt_par(const struct pt *p, const double *const *pv, int l, const char *what,
                            const char *wb)
{
    char name[64];
    snprintf(name, sizeof name, "L%d.conv_%s.%s", l, what, wb);
    for (int k = 0; k < p->nparam; k++)
        if (strcmp(p->g.nodes[p->param[k]].name, name) == 0)
            return pv[k];
    fail_msg("no parameter %s", name);
    return NULL;
}

/* ---- the independent double model ---- */

struct img {
    int c, h, w;      /* per batch item; N = PT_N */
    double *v;
};

static struct img img_new(int c, int h, int w)
{
    struct img a = {c, h, w, calloc((size_t)PT_N * c * h * w, sizeof(double))};
    return a;
}

static double *img_at(const struct img *a, int n, int c, int y, int x)
{
    return &a->v[(((size_t)n * a->c + c) * a->h + y) * a->w + x];
}

/* same-padded 3x3 convolution (cross-correlation) plus bias */
static struct img m_conv(const struct img *x, const double *wt, const double *b, int k)
{
    struct img o = img_new(k, x->h, x->w);
    for (int n = 0; n < PT_N; n++)
        for (int ko = 0; ko < k; ko++)
            for (int y = 0; y < x->h; y++)
                for (int xx = 0; xx < x->w; xx++) {
                    double s = b[ko];
                    for (int c = 0; c < x->c; c++)
                        for (int r = 0; r < 3; r++)
                            for (int q = 0; q < 3; q++) {
                                int yy = y + r - 1, xq = xx + q - 1;
                                if (yy < 0 || yy >= x->h || xq < 0 || xq >= x->w)
                                    continue;
                                s += *img_at(x, n, c, yy, xq) * wt[((ko * x->c + c) * 3 + r) * 3 + q];
                            }
                    *img_at(&o, n, ko, y, xx) = s;
                }
    return o;
}

static struct img m_cat(const struct img *a, const struct img *b, const struct img *c3)
{
    int cc = a->c + b->c + (c3 ? c3->c : 0);
    struct img o = img_new(cc, a->h, a->w);
    const struct img *parts[3] = {a, b, c3};
    for (int n = 0; n < PT_N; n++) {
        int c0 = 0;
        for (int k = 0; k < 3 && parts[k]; k++) {
            for (int c = 0; c < parts[k]->c; c++)
                for (int y = 0; y < a->h; y++)
                    for (int x = 0; x < a->w; x++)
                        *img_at(&o, n, c0 + c, y, x) = *img_at(parts[k], n, c, y, x);
            c0 += parts[k]->c;
        }
    }
    return o;
}

static double m_hsig(double x)
{
    double t = (double)0.2f * x + 0.5;
    return t < 0 ? 0 : t > 1 ? 1 : t;
}

static size_t img_count(const struct img *a) { return (size_t)PT_N * a->c * a->h * a->w; }

/* The loss at parameter values pv (indexed like p->param) and p's frames. */
static double pt_model(const struct pt *p, const double *const *pv)
{
    struct img r[PT_L], c[PT_L], e[PT_L];
    for (int l = 0; l < PT_L; l++) {
        int h = PT_H >> l, w = PT_W >> l;
        r[l] = img_new((int)pt_rstack[l], h, w);
        c[l] = img_new((int)pt_rstack[l], h, w);
        e[l] = img_new(2 * (int)pt_stack[l], h, w);
    }
    double loss = 0;
    for (int t = 0; t < PT_T; t++) {
        struct img up = {0, 0, 0, NULL};
        struct img rn[PT_L], cn[PT_L];
        for (int l = PT_L - 1; l >= 0; l--) {
            struct img x = m_cat(&r[l], &e[l], up.v ? &up : NULL);
            int k = (int)pt_rstack[l];
            struct img zi = m_conv(&x, pt_par(p, pv, l, "i", "W"), pt_par(p, pv, l, "i", "b"), k);
            struct img zf = m_conv(&x, pt_par(p, pv, l, "f", "W"), pt_par(p, pv, l, "f", "b"), k);
            struct img zo = m_conv(&x, pt_par(p, pv, l, "o", "W"), pt_par(p, pv, l, "o", "b"), k);
            struct img zc = m_conv(&x, pt_par(p, pv, l, "c", "W"), pt_par(p, pv, l, "c", "b"), k);
            cn[l] = img_new(k, x.h, x.w);
            rn[l] = img_new(k, x.h, x.w);
            for (size_t q = 0; q < img_count(&zi); q++) {
                cn[l].v[q] = m_hsig(zf.v[q]) * c[l].v[q] + m_hsig(zi.v[q]) * tanh(zc.v[q]);
                rn[l].v[q] = m_hsig(zo.v[q]) * tanh(cn[l].v[q]);
            }
            free(x.v); free(zi.v); free(zf.v); free(zo.v); free(zc.v); free(up.v);
            up.v = NULL;
            if (l > 0) {
                up = img_new(k, x.h * 2, x.w * 2);
                for (int n = 0; n < PT_N; n++)
                    for (int ch = 0; ch < k; ch++)
                        for (int y = 0; y < up.h; y++)
                            for (int xx = 0; xx < up.w; xx++)
                                *img_at(&up, n, ch, y, xx) = *img_at(&rn[l], n, ch, y / 2, xx / 2);
            }
        }
        struct img a = img_new((int)pt_stack[0], PT_H, PT_W);
        for (int n = 0; n < PT_N; n++)
            for (size_t q = 0; q < (size_t)pt_stack[0] * PT_H * PT_W; q++)
                a.v[(size_t)n * pt_stack[0] * PT_H * PT_W + q] =
                    p->fv[((size_t)n * PT_T + t) * pt_stack[0] * PT_H * PT_W + q];
        for (int l = 0; l < PT_L; l++) {
            struct img ah = m_conv(&rn[l], pt_par(p, pv, l, "ahat", "W"), pt_par(p, pv, l, "ahat", "b"),
                                   (int)pt_stack[l]);
            for (size_t q = 0; q < img_count(&ah); q++) {
                ah.v[q] = ah.v[q] > 0 ? ah.v[q] : 0;
                if (l == 0 && ah.v[q] > 1)
                    ah.v[q] = 1;
            }
            struct img ep = img_new(ah.c, ah.h, ah.w), en = img_new(ah.c, ah.h, ah.w);
            for (size_t q = 0; q < img_count(&ah); q++) {
                double d = a.v[q] - ah.v[q];
                ep.v[q] = d > 0 ? d : 0;
                en.v[q] = -d > 0 ? -d : 0;
            }
            free(e[l].v);
            e[l] = m_cat(&ep, &en, NULL);
            if (t > 0) {
                double s = 0;
                for (size_t q = 0; q < img_count(&e[l]); q++)
                    s += e[l].v[q];
                loss += pt_lw[l] / (PT_T - 1) * s / (double)img_count(&e[l]);
            }
            free(ah.v); free(ep.v); free(en.v);
            struct img na = {0, 0, 0, NULL};
            if (l + 1 < PT_L) {
                struct img z = m_conv(&e[l], pt_par(p, pv, l, "a", "W"), pt_par(p, pv, l, "a", "b"),
                                      (int)pt_stack[l + 1]);
                na = img_new(z.c, z.h / 2, z.w / 2);
                for (int n = 0; n < PT_N; n++)
                    for (int ch = 0; ch < z.c; ch++)
                        for (int y = 0; y < na.h; y++)
                            for (int xx = 0; xx < na.w; xx++) {
                                double m = -INFINITY;
                                for (int dy = 0; dy < 2; dy++)
                                    for (int dx = 0; dx < 2; dx++) {
                                        double v = *img_at(&z, n, ch, 2 * y + dy, 2 * xx + dx);
                                        v = v > 0 ? v : 0;
                                        if (v > m)
                                            m = v;
                                    }
                                *img_at(&na, n, ch, y, xx) = m;
                            }
                free(z.v);
            }
            free(a.v);
            a = na;
        }
        free(a.v);
        for (int l = 0; l < PT_L; l++) {
            free(r[l].v);
            free(c[l].v);
            r[l] = rn[l];
            c[l] = cn[l];
        }
    }
    for (int l = 0; l < PT_L; l++) {
        free(r[l].v);
        free(c[l].v);
        free(e[l].v);
    }
    return loss;
}

/* ---- the library's step ---- */

/* A buffer for any node's values; the parameters and frames loaded. */
static float *pt_load(struct pt *p, struct exec *e)
{
    size_t maxc = 1;
    for (int i = 0; i < p->g.n; i++)
        if (p->g.nodes[i].count > maxc)
            maxc = p->g.nodes[i].count;
    float *buf = malloc(maxc * sizeof *buf);
    for (int k = 0; k < p->nparam; k++) {
        for (size_t q = 0; q < p->g.nodes[p->param[k]].count; q++)
            buf[q] = (float)p->pv[k][q];
        exec_set(e, p->param[k], buf);
    }
    size_t fr = (size_t)pt_stack[0] * PT_H * PT_W;
    for (int t = 0; t < PT_T; t++) {
        for (int n = 0; n < PT_N; n++)
            for (size_t q = 0; q < fr; q++)
                buf[n * fr + q] = (float)p->fv[((size_t)n * PT_T + t) * fr + q];
        exec_set(e, p->frame[t], buf);
    }
    return buf;
}

/* Run one step of p's graph on backend be; the loss and the gradient of
 * every parameter (grad[k], count of param k) in double. */
static double pt_run(struct pt *p, const struct backend_ops *be, long precision, double **grad)
{
    struct backend_options bo = {.threads = 1, .precision = precision};
    void *ctx;
    if (be->init(&ctx, &bo) < 0)
        fail_msg("%s init: %s", be->name, dt_error());
    struct exec e;
    if (exec_init(&e, &p->g, be, ctx) < 0)
        fail_msg("exec_init on %s: %s", be->name, dt_error());
    float *buf = pt_load(p, &e);
    exec_step(&e, 0);
    float lf;
    exec_get(&e, p->loss, &lf);
    for (int k = 0; k < p->nparam; k++) {
        int gi = graph_grad_of(&p->g, p->param[k]);
        assert_true(gi >= 0);
        size_t cnt = p->g.nodes[p->param[k]].count;
        exec_get(&e, gi, buf);
        grad[k] = malloc(cnt * sizeof(double));
        for (size_t q = 0; q < cnt; q++)
            grad[k][q] = buf[q];
    }
    free(buf);
    exec_free(&e);
    be->free(ctx);
    return lf;
}

/* Every parameter gradient of the step on `be` against central differences
 * of the double model: |g - fd| <= rtol max|fd| of the tensor + atol. */
static void pt_check_gradient(const struct backend_ops *be, long precision, double rtol, double ltol)
{
    struct pt p;
    pt_init(&p, 0x5eed1234);
    double *grad[64];
    double got = pt_run(&p, be, precision, grad);
    double want = pt_model(&p, (const double *const *)p.pv);
    assert_true(want > 0);
    if (fabs(got - want) > ltol * want)
        fail_msg("%s: loss %.9g, the double model %.9g", be->name, got, want);
    const double h = 1e-6;
    int checked = 0;
    for (int k = 0; k < p.nparam; k++) {
        const struct node *nd = &p.g.nodes[p.param[k]];
        double *fd = malloc(nd->count * sizeof *fd), fmax = 0;
        for (size_t q = 0; q < nd->count; q++) {
            double v = p.pv[k][q];
            p.pv[k][q] = v + h;
            double up = pt_model(&p, (const double *const *)p.pv);
            p.pv[k][q] = v - h;
            double dn = pt_model(&p, (const double *const *)p.pv);
            p.pv[k][q] = v;
            fd[q] = (up - dn) / (2 * h);
            if (fabs(fd[q]) > fmax)
                fmax = fabs(fd[q]);
        }
        for (size_t q = 0; q < nd->count; q++) {
            double err = fabs(grad[k][q] - fd[q]);
            if (err > rtol * fmax + 1e-9)
                fail_msg("%s: d loss / d %s[%zu] = %.9g, finite differences %.9g (tensor max %.3g)",
                         be->name, nd->name, q, grad[k][q], fd[q], fmax);
            checked++;
        }
        free(fd);
        free(grad[k]);
    }
    assert_true(checked > 1000);
    pt_free(&p);
}

static void test_gradient_mpfr(void **state)
{
    /* 128 bits: the tape's gradient is the exact one rounded to float32 */
    pt_check_gradient(&backend_mpfr, 128, 2e-6, 1e-7);
}

static void test_gradient_cpu(void **state)
{
    pt_check_gradient(&backend_cpu, 0, 2e-3, 1e-5);
}

/* Breaking one rule must break the check: the double model is sensitive to
 * a change of a single parameter element beyond the tolerance used above. */
static void test_model_sensitive(void **state)
{
    struct pt p;
    pt_init(&p, 0x5eed1234);
    double base = pt_model(&p, (const double *const *)p.pv);
    for (int k = 0; k < p.nparam; k++) {
        const struct node *nd = &p.g.nodes[p.param[k]];
        size_t moving = 0;
        for (size_t q = 0; q < nd->count; q++) {
            p.pv[k][q] += 0.01;
            double moved = pt_model(&p, (const double *const *)p.pv);
            p.pv[k][q] -= 0.01;
            moving += moved != base;
        }
        /* most elements matter (a zero gradient would pass any check) */
        if (moving * 4 < nd->count * 3)
            fail_msg("the loss depends on %zu of the %zu elements of %s only", moving, nd->count,
                     nd->name);
    }
    pt_free(&p);
}

static void test_determinism(void **state)
{
    struct pt p;
    pt_init(&p, 77);
    double *g1[64], *g2[64];
    double l1 = pt_run(&p, &backend_cpu, 0, g1), l2 = pt_run(&p, &backend_cpu, 0, g2);
    assert_true(memcmp(&l1, &l2, sizeof l1) == 0);
    for (int k = 0; k < p.nparam; k++) {
        assert_memory_equal(g1[k], g2[k], p.g.nodes[p.param[k]].count * sizeof(double));
        free(g1[k]);
        free(g2[k]);
    }
    pt_free(&p);
}

/* A replaced kernel (a planted fault): 0.5 everywhere. */
static void pt_half(void *ctx, const struct graph *g, const struct node *nd, backend_buf *out,
                    const backend_buf *const *in, const struct backend_step *st)
{
    (void)ctx, (void)g, (void)in, (void)st;
    for (size_t q = 0; q < nd->count; q++)
        ((float *)out)[q] = 0.5f;
}

/* Every node's output after one step on the cpu backend with the fixed
 * products; node `planted`'s kernel replaced by pt_half when >= 0. The
 * sets of convolutions the backend ran as one in *nsets. */
static float **pt_outputs(struct pt *p, int threads, int planted, int *nsets)
{
    struct backend_options bo = {.threads = threads, .cpu_gemm = "fixed"};
    void *ctx;
    if (backend_cpu.init(&ctx, &bo) < 0)
        fail_msg("cpu init: %s", dt_error());
    struct exec e;
    if (exec_init(&e, &p->g, &backend_cpu, ctx) < 0)
        fail_msg("exec_init: %s", dt_error());
    *nsets = cpu_backend_conv_sets(ctx);
    free(pt_load(p, &e));
    if (planted >= 0)
        e.override[planted] = pt_half;
    exec_step(&e, 0);
    float **out = malloc((size_t)p->g.n * sizeof *out);
    for (int i = 0; i < p->g.n; i++) {
        out[i] = malloc(p->g.nodes[i].count * sizeof(float));
        exec_get(&e, i, out[i]);
    }
    exec_free(&e);
    backend_cpu.free(ctx);
    return out;
}

static void pt_outputs_free(const struct pt *p, float **out)
{
    for (int i = 0; i < p->g.n; i++)
        free(out[i]);
    free(out);
}

/* With the fixed products the cpu backend runs each set of gate
 * convolutions (and of their filter gradients) as one product: every
 * node's output must have the bits of each convolution run alone
 * (DIVTRACE_CPU_CONV_SETS=0), at 1 and 3 threads, and with the first
 * member of a set replaced by a planted fault (the next member then makes
 * itself and the ones after it, and the fault's output stays). */
static void test_conv_sets(void **state)
{
    (void)state;
    struct pt p;
    pt_init(&p, 0x5e75);
    struct conv_set *sets = NULL;
    int nfound = conv_sets_find(&p.g, NULL, NULL, NULL, &sets), nfwd = 0, nfilt = 0;
    for (int k = 0; k < nfound; k++) {
        nfwd += sets[k].type == OP_CONV2D;
        nfilt += sets[k].type == OP_CONV2D_BWD_FILTER;
        assert_true(sets[k].nmem >= 2);
    }
    /* 4 gates a layer and time step, forward and filter gradient */
    assert_true(nfwd >= PT_L * PT_T && nfilt >= PT_L);
    int first = -1;
    for (int k = 0; k < nfound && first < 0; k++)
        if (sets[k].type == OP_CONV2D && sets[k].nmem >= 3)
            first = sets[k].mem[0];
    assert_true(first >= 0);
    free(sets);
    for (int threads = 1; threads <= 3; threads += 2)
        for (int planted = -1; planted <= first; planted += first + 1) {
            int n0, n1;
            setenv("DIVTRACE_CPU_CONV_SETS", "0", 1);
            float **alone = pt_outputs(&p, threads, planted, &n0);
            unsetenv("DIVTRACE_CPU_CONV_SETS");
            float **as_one = pt_outputs(&p, threads, planted, &n1);
            assert_int_equal(n0, 0);
            assert_int_equal(n1, nfound);
            for (int i = 0; i < p.g.n; i++)
                if (memcmp(alone[i], as_one[i], p.g.nodes[i].count * sizeof(float)) != 0)
                    fail_msg("%s differs run in sets (%d threads, fault in %s)", p.g.nodes[i].name, threads,
                             planted >= 0 ? p.g.nodes[planted].name : "none");
            if (planted >= 0)
                assert_true(as_one[planted][0] == 0.5f);
            pt_outputs_free(&p, alone);
            pt_outputs_free(&p, as_one);
        }
    pt_free(&p);
}

static void test_names(void **state)
{
    struct pt p;
    pt_init(&p, 1);
    static const char *const want[] = {
        "L0.t00.in", "L1.t02.conv_i", "L1.t02.conv_i.add_bias", "L1.t02.i", "L0.t01.f*c",
        "L1.t01.up", "L0.t02.ahat_relu", "L0.t02.ahat", "L1.t02.ahat", "L1.t01.a",
        "L0.t01.a_relu", "L1.t00.e", "L0.t01.loss", "L1.t02.loss", "loss", "L0.init.r",
        "L1.conv_c.W", "L0.conv_a.b", "data.t02",
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (graph_find(&p.g, want[k]) < 0)
            fail_msg("no op %s", want[k]);
    /* t = 0 carries no loss: weight 0 */
    assert_true(graph_find(&p.g, "L0.t00.loss") < 0);
    assert_int_equal(graph_find(&p.g, "loss"), p.loss);
    /* every forward op but the leaves and the loss sums names its layer and time step */
    for (int i = 0; i < p.loss; i++) {
        const struct node *nd = &p.g.nodes[i];
        if (nd->type == OP_PARAM || nd->type == OP_INPUT || strncmp(nd->name, "loss", 4) == 0)
            continue;
        unsigned l, t;
        char rest[64];
        if (sscanf(nd->name, "L%u.t%u.%63s", &l, &t, rest) != 3 &&
            sscanf(nd->name, "L%u.init.%63s", &l, rest) != 2)
            fail_msg("op %s does not name its layer and time step", nd->name);
    }
    pt_free(&p);
}

static void test_check(void **state)
{
    struct model_spec s;
    pt_spec(&s);
    assert_int_equal(prednet_check(&s), 0);
    s.nt = 1;
    assert_int_equal(prednet_check(&s), -1);
    assert_non_null(strstr(dt_error(), "--nt"));
    pt_spec(&s);
    s.height = 7;
    assert_int_equal(prednet_check(&s), -1);
    assert_non_null(strstr(dt_error(), "--size"));
    pt_spec(&s);
    s.layer_weights[0] = s.layer_weights[1] = 0;
    assert_int_equal(prednet_check(&s), -1);
    struct graph g;
    graph_init(&g);
    pt_spec(&s);
    s.width = 5;
    assert_int_equal(prednet_build(&g, &s), -1);
    graph_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_model_sensitive),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_conv_sets),
        cmocka_unit_test(test_gradient_cpu),
        cmocka_unit_test(test_gradient_mpfr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
