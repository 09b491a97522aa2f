/* mpfr_testutil.c: the harness of the mpfr backend's tests (mpfr_testutil.h):
 * one op run on given float inputs, an independent high-precision evaluation
 * of its op.h formula, and the check of one against the other. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mpfr.h>

#include "backend.h"
#include "graph.h"
#include "mpfr_impl.h"
#include "mpfr_testutil.h"
#include "oracle.h"
#include "test_util.h"
#include "util.h"

void *tm_init(long prec)
{
    struct backend_options bo = {.threads = 1, .precision = prec};
    void *ctx = NULL;
    if (backend_mpfr.init(&ctx, &bo) != 0)
        fail_msg("mpfr backend at %ld bits: %s", prec, dt_error());
    return ctx;
}

void *tm_cpu_init(void)
{
    struct backend_options bo = {.threads = 1};
    void *ctx = NULL;
    assert_int_equal(backend_cpu.init(&ctx, &bo), 0);
    return ctx;
}

uint32_t tm_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

float tm_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

int tm_same(float a, float b)
{
    return (isnan(a) && isnan(b)) || tm_bits(a) == tm_bits(b);
}

/* ---- an independent rounding to float32 -------------------------------------
 * By comparison, not by bits: lo = the largest float <= |v| (found through
 * the double rounded down, since every float is a double), hi the next one
 * up (2^128 past FLT_MAX, which stands for infinity), and |v| against their
 * midpoint, ties to the even one. *dist: |v - midpoint| / |v|. */
float tm_round_f32(mpfr_srcptr v, double *dist)
{
    if (dist)
        *dist = 1.0;
    if (mpfr_nan_p(v))
        return NAN;
    int neg = mpfr_signbit(v) != 0;
    if (mpfr_inf_p(v))
        return neg ? -INFINITY : INFINITY;
    if (mpfr_zero_p(v))
        return neg ? -0.0f : 0.0f;
    mpfr_t a, mid, hi;
    mpfr_init2(a, mpfr_get_prec(v));
    mpfr_inits2(64, mid, hi, (mpfr_ptr)0);
    mpfr_abs(a, v, MPFR_RNDN);
    double d = mpfr_get_d(a, MPFR_RNDD);
    float lo, up;
    if (d >= FLT_MAX) {
        lo = FLT_MAX;
    } else {
        lo = (float)d;
        while ((double)lo > d)
            lo = nextafterf(lo, 0.0f);
    }
    if (lo == FLT_MAX) {
        up = INFINITY;
        mpfr_set_ui_2exp(hi, 1, 128, MPFR_RNDN);
    } else {
        up = nextafterf(lo, INFINITY);
        mpfr_set_flt(hi, up, MPFR_RNDN);
    }
    mpfr_set_flt(mid, lo, MPFR_RNDN);
    mpfr_add(mid, mid, hi, MPFR_RNDN);
    mpfr_div_2ui(mid, mid, 1, MPFR_RNDN);
    int cmp = mpfr_cmp(a, mid);
    float r = cmp < 0 ? lo : cmp > 0 ? up : (tm_bits(lo) & 1) ? up : lo;
    if (dist) {
        mpfr_sub(mid, a, mid, MPFR_RNDN);
        mpfr_div(mid, mid, a, MPFR_RNDN);
        *dist = fabs(mpfr_get_d(mid, MPFR_RNDN));
    }
    mpfr_clears(a, mid, hi, (mpfr_ptr)0);
    return neg ? -r : r;
}

/* What the backend at `prec` bits must download for a value whose exact
 * value is v: RN32(RN_prec(v)). */
static float tm_expect(mpfr_srcptr v, long prec, double *dist)
{
    mpfr_t r;
    mpfr_init2(r, (mpfr_prec_t)prec);
    mpfr_set(r, v, MPFR_RNDN);
    float f = tm_round_f32(r, NULL);
    tm_round_f32(v, dist);
    mpfr_clear(r);
    return f;
}

/* A float with a random 24-bit significand, exponent in [emin, emax] and sign. */
float tm_rand_wide(uint64_t *rng, int emin, int emax)
{
    uint64_t u = tu_rand_u64(rng);
    double m = (double)((u >> 40) | (1u << 23)) * 0x1p-24;
    int e = emin + (int)((u >> 8) % (uint64_t)(emax - emin + 1));
    return (float)((u & 1 ? -1 : 1) * ldexp(m, e));
}

float tm_rand(uint64_t *rng, double lo, double hi)
{
    return (float)tu_rand_uniform(rng, lo, hi);
}

/* ---- one op on given float inputs -------------------------------------------- */

void tm_case_init_nd(struct tm_case *c, enum op_type t, int ndim, const uint32_t *shape)
{
    memset(c, 0, sizeof *c);
    graph_init(&c->g);
    c->op.type = t;
    c->op.name = "op";
    c->op.kind = TRACE_KIND_FORWARD;
    c->op.ndim = ndim;
    c->op.count = 1;
    for (int d = 0; d < ndim; d++) {
        c->op.shape[d] = shape[d];
        c->op.count *= shape[d];
    }
    c->op.grad = c->op.next = -1;
    c->tol = 8;
}

void tm_case_init(struct tm_case *c, enum op_type t, uint32_t d0, uint32_t d1)
{
    uint32_t shape[2] = {d0, d1};
    tm_case_init_nd(c, t, d1 ? 2 : 1, shape);
}

/* Input k of the given shape; returns its values to fill. */
float *tm_case_input_nd(struct tm_case *c, int ndim, const uint32_t *shape)
{
    char name[16];
    int k = c->op.ninputs;
    snprintf(name, sizeof name, "in%d", k);
    int i = graph_input(&c->g, name, ndim, shape);
    c->op.inputs[k] = i;
    c->op.ninputs++;
    c->in[k] = calloc(c->g.nodes[i].count, sizeof(float));
    assert_non_null(c->in[k]);
    return c->in[k];
}

float *tm_case_input(struct tm_case *c, uint32_t d0, uint32_t d1)
{
    uint32_t shape[2] = {d0, d1};
    return tm_case_input_nd(c, d1 ? 2 : 1, shape);
}

void tm_case_free(struct tm_case *c)
{
    for (int k = 0; k < c->op.ninputs; k++)
        free(c->in[k]);
    graph_free(&c->g);
}

static size_t tm_in_count(const struct tm_case *c, int k)
{
    return c->g.nodes[c->op.inputs[k]].count;
}

/* Run the case on backend be; out: its float32 download; full (if not
 * NULL, initialised by the caller): the mpfr backend's own P-bit values. */
void tm_run(const struct backend_ops *be, void *ctx, const struct tm_case *c, float *out,
                   mpfr_t *full)
{
    backend_buf *ib[OP_MAX_INPUTS];
    for (int k = 0; k < c->op.ninputs; k++) {
        ib[k] = be->alloc(ctx, tm_in_count(c, k));
        be->upload(ctx, ib[k], c->in[k], tm_in_count(c, k));
    }
    backend_buf *ob = be->alloc(ctx, c->op.count);
    struct backend_step st = {.step = c->step};
    be->op[c->op.type](ctx, &c->g, &c->op, ob, (const backend_buf *const *)ib, &st);
    be->download(ctx, out, ob, c->op.count);
    for (size_t i = 0; full && i < c->op.count; i++)
        mpfr_set(full[i], X((struct mpb_vec *)ob, i), MPFR_RNDN);
    be->release(ctx, ob);
    for (int k = 0; k < c->op.ninputs; k++)
        be->release(ctx, ib[k]);
}

/* ---- the independent evaluation ----------------------------------------------
 * The op.h formula at TM_REF bits, one elementary operation at a time in the
 * formula's order, sums accumulated from +0 in index order. Products and sums
 * of floats are exact at 1000 bits; divisions, square roots and exp are not,
 * but err by 2^-1000. mag[i]: the magnitude the cpu backend's float32
 * rounding errors scale with. */

static void tm_set(mpfr_ptr x, float f)
{
    mpfr_set_flt(x, f, MPFR_RNDN);
}

/* The three convolutions (op.h) by their sums, term by term from +0, taps
 * outside the image left out: out (N,K,H,W) from x and w,
 * out (N,C,H,W) from the m pairs dy_j, w_j (one sum over all of them),
 * out (K,C,R,S) from x and dy. */
static void tm_ref_conv(const struct tm_case *c, mpfr_t *out, double *mag)
{
    const struct node *nd = &c->op;
    const uint32_t *s0 = c->g.nodes[nd->inputs[0]].shape, *s1 = c->g.nodes[nd->inputs[1]].shape;
    long N, C, K, H, W, R, S;
    if (nd->type == OP_CONV2D_BWD_FILTER) {
        N = s0[0], C = s0[1], H = s0[2], W = s0[3], K = s1[1], R = nd->p.conv.r, S = nd->p.conv.s;
    } else {
        N = s0[0], H = s0[2], W = s0[3], K = s1[0], C = s1[1], R = s1[2], S = s1[3];
    }
    long pairs = nd->type == OP_CONV2D_BWD_DATA ? nd->ninputs / 2 : 1;
    mpfr_t acc, p;
    mpfr_inits2(TM_REF, acc, p, (mpfr_ptr)0);
    /* every (j, n, k, c, h, w, r, s) with its tap (hh, ww) of x inside the image */
    for (size_t i = 0; i < nd->count; i++) {
        mpfr_set_zero(out[i], 1);
        mag[i] = 0;
    }
    for (long j = 0; j < pairs; j++) {
        const float *x = c->in[0], *w = c->in[2 * j + 1], *dy = c->in[2 * j];
        for (long n = 0; n < N; n++)
            for (long k = 0; k < K; k++)
                for (long ch = 0; ch < C; ch++)
                    for (long h = 0; h < H; h++)
                        for (long v = 0; v < W; v++)
                            for (long r = 0; r < R; r++)
                                for (long s = 0; s < S; s++) {
                                    long hh = h + r - R / 2, ww = v + s - S / 2;
                                    if (hh < 0 || hh >= H || ww < 0 || ww >= W)
                                        continue;
                                    size_t o, wi = (size_t)(((k * C + ch) * R + r) * S + s);
                                    float a, b;
                                    if (nd->type == OP_CONV2D) {
                                        /* out[n,k,h,v] += x[n,ch,hh,ww] w[k,ch,r,s] */
                                        o = (size_t)(((n * K + k) * H + h) * W + v);
                                        a = x[((n * C + ch) * H + hh) * W + ww];
                                        b = w[wi];
                                    } else if (nd->type == OP_CONV2D_BWD_DATA) {
                                        /* out[n,ch,hh,ww] += dy[n,k,h,v] w[k,ch,r,s]: with
                                         * h = hh - r + R/2 this is op.h's sum */
                                        o = (size_t)(((n * C + ch) * H + hh) * W + ww);
                                        a = dy[((n * K + k) * H + h) * W + v];
                                        b = w[wi];
                                    } else {
                                        /* out[k,ch,r,s] += dy[n,k,h,v] x[n,ch,hh,ww] */
                                        o = wi;
                                        a = c->in[1][((n * K + k) * H + h) * W + v];
                                        b = x[((n * C + ch) * H + hh) * W + ww];
                                    }
                                    tm_set(acc, a);
                                    tm_set(p, b);
                                    mpfr_mul(p, acc, p, MPFR_RNDN);
                                    mpfr_add(out[o], out[o], p, MPFR_RNDN);
                                    mag[o] += fabs((double)a * b);
                                }
    }
    /* the cpu's sums err by about (number of terms) ulps of sum |a b| */
    double terms = nd->type == OP_CONV2D_BWD_FILTER ? (double)(N * H * W)
                 : (double)((nd->type == OP_CONV2D ? C : pairs * K) * R * S);
    for (size_t i = 0; i < nd->count; i++)
        mag[i] *= terms;
    mpfr_clears(acc, p, (mpfr_ptr)0);
}

void tm_ref(const struct tm_case *c, mpfr_t *out, double *mag)
{
    const struct node *nd = &c->op;
    const struct graph *g = &c->g;
    float *const *in = c->in;
    mpfr_t a, b, s, u;
    mpfr_inits2(TM_REF, a, b, s, u, (mpfr_ptr)0);
    size_t n = nd->count;
    switch (nd->type) {
    case OP_MATMUL: {
        int ta = nd->p.mm.ta, tb = nd->p.mm.tb;
        size_t m = nd->shape[0], nn = nd->shape[1];
        const struct node *an = &g->nodes[nd->inputs[0]];
        size_t k = ta ? an->shape[0] : an->shape[1];
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < nn; j++) {
                mpfr_set_zero(s, 1);
                double mg = 0;
                for (size_t l = 0; l < k; l++) {
                    float x = ta ? in[0][l * m + i] : in[0][i * k + l];
                    float y = tb ? in[1][j * k + l] : in[1][l * nn + j];
                    tm_set(a, x);
                    tm_set(b, y);
                    mpfr_mul(a, a, b, MPFR_RNDN);
                    mpfr_add(s, s, a, MPFR_RNDN);
                    mg += fabs((double)x * y);
                }
                mpfr_set(out[i * nn + j], s, MPFR_RNDN);
                mag[i * nn + j] = mg * (double)k;
            }
        break;
    }
    case OP_ADD_BIAS: { /* x (R,F) + b (F), x (N,C,H,W) + b (C) */
        size_t f = nd->shape[1], inner = n / (nd->shape[0] * f);
        for (size_t i = 0; i < n; i++) {
            size_t j = i / inner % f;
            tm_set(a, in[0][i]);
            tm_set(b, in[1][j]);
            mpfr_add(out[i], a, b, MPFR_RNDN);
            mag[i] = fabs(in[0][i]) + fabs(in[1][j]);
        }
        break;
    }
    case OP_BIAS_GRAD: { /* sums over rows of dy (R,F), over n, h, w of dy (N,C,H,W) */
        size_t rows = g->nodes[nd->inputs[0]].shape[0], inner = tm_in_count(c, 0) / (rows * n);
        for (size_t j = 0; j < n; j++) {
            mpfr_set_zero(s, 1);
            mag[j] = 0;
            for (size_t r = 0; r < rows; r++)
                for (size_t q = 0; q < inner; q++) {
                    float v = in[0][(r * n + j) * inner + q];
                    tm_set(a, v);
                    mpfr_add(s, s, a, MPFR_RNDN);
                    mag[j] += fabs(v) * (double)(rows * inner);
                }
            mpfr_set(out[j], s, MPFR_RNDN);
        }
        break;
    }
    case OP_SIGMOID:
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            mpfr_neg(a, a, MPFR_RNDN);
            mpfr_exp(a, a, MPFR_RNDN);
            mpfr_add_ui(a, a, 1, MPFR_RNDN);
            mpfr_ui_div(out[i], 1, a, MPFR_RNDN);
            mag[i] = fabs(mpfr_get_d(out[i], MPFR_RNDN));
        }
        break;
    case OP_SIGMOID_BWD: /* dy * y * (1 - y); inputs y, dy */
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            tm_set(b, in[1][i]);
            mpfr_mul(s, b, a, MPFR_RNDN);
            mpfr_ui_sub(u, 1, a, MPFR_RNDN);
            mpfr_mul(out[i], s, u, MPFR_RNDN);
            mag[i] = fabs((double)in[1][i] * in[0][i]) * (1 + fabs(in[0][i]));
        }
        break;
    case OP_TANH:
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            mpfr_tanh(out[i], a, MPFR_RNDN);
            mag[i] = fabs(mpfr_get_d(out[i], MPFR_RNDN));
        }
        break;
    case OP_TANH_BWD: /* dy * (1 - y * y); inputs y, dy */
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            tm_set(b, in[1][i]);
            mpfr_mul(u, a, a, MPFR_RNDN);
            mpfr_ui_sub(u, 1, u, MPFR_RNDN);
            mpfr_mul(out[i], b, u, MPFR_RNDN);
            mag[i] = fabs(in[1][i]) * (1 + (double)in[0][i] * in[0][i]);
        }
        break;
    case OP_RELU:
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            if (mpfr_sgn(a) > 0 && !mpfr_nan_p(a))
                mpfr_set(out[i], a, MPFR_RNDN);
            else
                mpfr_set_zero(out[i], 1);
            mag[i] = fabs(in[0][i]);
        }
        break;
    case OP_RELU_BWD: /* x > 0 ? dy : 0; inputs x, dy */
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            tm_set(b, in[1][i]);
            if (mpfr_sgn(a) > 0 && !mpfr_nan_p(a))
                mpfr_set(out[i], b, MPFR_RNDN);
            else
                mpfr_set_zero(out[i], 1);
            mag[i] = fabs(in[1][i]);
        }
        break;
    case OP_ADD:
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            tm_set(b, in[1][i]);
            mpfr_add(out[i], a, b, MPFR_RNDN);
            mag[i] = fabs(in[0][i]) + fabs(in[1][i]);
        }
        break;
    case OP_MSE: {
        size_t np = tm_in_count(c, 0);
        mpfr_set_zero(s, 1);
        for (size_t i = 0; i < np; i++) {
            tm_set(a, in[0][i]);
            tm_set(b, in[1][i]);
            mpfr_sub(a, a, b, MPFR_RNDN);
            mpfr_sqr(a, a, MPFR_RNDN);
            mpfr_add(s, s, a, MPFR_RNDN);
        }
        mpfr_div_ui(out[0], s, (unsigned long)np, MPFR_RNDN);
        mag[0] = fabs(mpfr_get_d(out[0], MPFR_RNDN));
        break;
    }
    case OP_MSE_BWD: /* 2 (p - t) / n * g */
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            tm_set(b, in[1][i]);
            mpfr_sub(a, a, b, MPFR_RNDN);
            mpfr_mul_ui(a, a, 2, MPFR_RNDN);
            mpfr_div_ui(a, a, (unsigned long)n, MPFR_RNDN);
            mpfr_set_ui(u, 1, MPFR_RNDN);
            if (nd->ninputs > 2)
                tm_set(u, in[2][0]);
            mpfr_mul(out[i], a, u, MPFR_RNDN);
            mag[i] = 2.0 / (double)n * fabs(mpfr_get_d(u, MPFR_RNDN)) *
                     (fabs(in[0][i]) + fabs(in[1][i]));
        }
        break;
    case OP_SGD: /* p - lr g */
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            tm_set(b, in[1][i]);
            tm_set(u, nd->p.sgd.lr);
            mpfr_mul(b, u, b, MPFR_RNDN);
            mpfr_sub(out[i], a, b, MPFR_RNDN);
            mag[i] = fabs(in[0][i]) + fabs((double)nd->p.sgd.lr * in[1][i]);
        }
        break;
    case OP_MOMENTUM: /* mu buf + g */
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            tm_set(b, in[1][i]);
            tm_set(u, nd->p.momentum.mu);
            mpfr_mul(a, u, a, MPFR_RNDN);
            mpfr_add(out[i], a, b, MPFR_RNDN);
            mag[i] = fabs((double)nd->p.momentum.mu * in[0][i]) + fabs(in[1][i]);
        }
        break;
    case OP_ADAM_M: /* b1 m + (1 - b1) g */
    case OP_ADAM_V: /* b2 v + (1 - b2) g g */
        for (size_t i = 0; i < n; i++) {
            int v = nd->type == OP_ADAM_V;
            float beta = v ? nd->p.adam.b2 : nd->p.adam.b1;
            tm_set(u, beta);
            tm_set(a, in[0][i]);
            mpfr_mul(s, u, a, MPFR_RNDN);
            mpfr_ui_sub(u, 1, u, MPFR_RNDN);
            tm_set(b, in[1][i]);
            mpfr_mul(u, u, b, MPFR_RNDN);
            if (v)
                mpfr_mul(u, u, b, MPFR_RNDN);
            mpfr_add(out[i], s, u, MPFR_RNDN);
            double gi = in[1][i];
            mag[i] = fabs(beta * (double)in[0][i]) + fabs((1.0 - beta) * gi * (v ? gi : 1.0));
        }
        break;
    case OP_ADAM_P: { /* p - lr (m / c1) / (sqrt(v / c2) + eps) */
        mpfr_t c1, c2;
        mpfr_inits2(TM_REF, c1, c2, (mpfr_ptr)0);
        unsigned long t = (unsigned long)c->step + 1;
        tm_set(c1, nd->p.adam.b1);
        mpfr_pow_ui(c1, c1, t, MPFR_RNDN);
        mpfr_ui_sub(c1, 1, c1, MPFR_RNDN);
        tm_set(c2, nd->p.adam.b2);
        mpfr_pow_ui(c2, c2, t, MPFR_RNDN);
        mpfr_ui_sub(c2, 1, c2, MPFR_RNDN);
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[1][i]);
            mpfr_div(a, a, c1, MPFR_RNDN);
            tm_set(u, nd->p.adam.lr);
            mpfr_mul(a, u, a, MPFR_RNDN);
            tm_set(b, in[2][i]);
            mpfr_div(b, b, c2, MPFR_RNDN);
            mpfr_sqrt(b, b, MPFR_RNDN);
            tm_set(u, nd->p.adam.eps);
            mpfr_add(b, b, u, MPFR_RNDN);
            mpfr_div(a, a, b, MPFR_RNDN);
            mag[i] = fabs(in[0][i]) + 4 * fabs(mpfr_get_d(a, MPFR_RNDN));
            tm_set(b, in[0][i]);
            mpfr_sub(out[i], b, a, MPFR_RNDN);
        }
        mpfr_clears(c1, c2, (mpfr_ptr)0);
        break;
    }
    case OP_FILL:
        for (size_t i = 0; i < n; i++) {
            tm_set(out[i], nd->p.fill.value);
            mag[i] = fabs(nd->p.fill.value);
        }
        break;
    case OP_CONV2D:
    case OP_CONV2D_BWD_DATA:
    case OP_CONV2D_BWD_FILTER:
        tm_ref_conv(c, out, mag);
        break;
    case OP_MAXPOOL2:
    case OP_MAXPOOL2_BWD: { /* x (N,C,H,W) [, dy (N,C,H/2,W/2)] */
        const uint32_t *xs = g->nodes[nd->inputs[0]].shape;
        size_t h = xs[2], w = xs[3], planes = (size_t)xs[0] * xs[1];
        int bwd = nd->type == OP_MAXPOOL2_BWD;
        for (size_t i = 0; bwd && i < n; i++) {
            mpfr_set_zero(out[i], 1);
            mag[i] = 0;
        }
        for (size_t p = 0, o = 0; p < planes; p++)
            for (size_t y = 0; y < h; y += 2)
                for (size_t z = 0; z < w; z += 2, o++) {
                    size_t at[4] = {(p * h + y) * w + z, (p * h + y) * w + z + 1,
                                    (p * h + y + 1) * w + z, (p * h + y + 1) * w + z + 1};
                    size_t pick = at[0];
                    for (int q = 3; q >= 0; q--) /* the first NaN */
                        if (isnan(in[0][at[q]]))
                            pick = at[q];
                    if (!isnan(in[0][pick]))
                        for (int q = 3; q >= 0; q--) /* the first maximum */
                            if (in[0][at[q]] >= in[0][at[0]] && in[0][at[q]] >= in[0][at[1]] &&
                                in[0][at[q]] >= in[0][at[2]] && in[0][at[q]] >= in[0][at[3]])
                                pick = at[q];
                    size_t to = bwd ? pick : o;
                    float v = bwd ? in[1][o] : in[0][pick];
                    tm_set(out[to], v);
                    mag[to] = fabs(v);
                }
        break;
    }
    case OP_UPSAMPLE2: /* out[n,c,h,w] = x[n,c,h/2,w/2] */
        for (size_t i = 0; i < n; i++) {
            size_t w2 = nd->shape[3], h2 = nd->shape[2];
            size_t p = i / (h2 * w2), y = i / w2 % h2, z = i % w2;
            float v = in[0][(p * (h2 / 2) + y / 2) * (w2 / 2) + z / 2];
            tm_set(out[i], v);
            mag[i] = fabs(v);
        }
        break;
    case OP_UPSAMPLE2_BWD: /* ((d[2h,2w] + d[2h,2w+1]) + d[2h+1,2w]) + d[2h+1,2w+1] */
        for (size_t i = 0; i < n; i++) {
            size_t w = nd->shape[3], h = nd->shape[2];
            size_t p = i / (h * w), y = i / w % h, z = i % w;
            const float *d = in[0] + (p * 2 * h + 2 * y) * 2 * w + 2 * z;
            const float v[4] = {d[0], d[1], d[2 * w], d[2 * w + 1]};
            tm_set(s, v[0]);
            mag[i] = fabs(v[0]);
            for (int q = 1; q < 4; q++) {
                tm_set(a, v[q]);
                mpfr_add(s, s, a, MPFR_RNDN);
                mag[i] += 4 * fabs(v[q]);
            }
            mpfr_set(out[i], s, MPFR_RNDN);
        }
        break;
    case OP_CONCAT:
    case OP_SLICE:
    case OP_SLICE_BWD: /* channel ch of the output from input k's channel ck, or +0 */
        for (size_t i = 0; i < n; i++) {
            size_t hw = (size_t)nd->shape[2] * nd->shape[3], tot = nd->shape[1];
            size_t b0 = i / (hw * tot), ch = i / hw % tot, q = i % hw;
            int k = 0;
            long ck = (long)ch;
            if (nd->type == OP_CONCAT)
                for (; ck >= (long)g->nodes[nd->inputs[k]].shape[1]; k++)
                    ck -= (long)g->nodes[nd->inputs[k]].shape[1];
            else if (nd->type == OP_SLICE)
                ck += nd->p.slice.c0;
            else
                ck -= nd->p.slice.c0;
            size_t kc = g->nodes[nd->inputs[k]].shape[1];
            float v = ck >= 0 && ck < (long)kc ? in[k][(b0 * kc + (size_t)ck) * hw + q] : 0.0f;
            tm_set(out[i], v);
            mag[i] = fabs(v);
        }
        break;
    case OP_HARD_SIGMOID:
    case OP_HARD_SIGMOID_BWD: /* t = c x + 1/2 exactly, c = 0.2f; clip(t, 0, 1), or the mask */
        for (size_t i = 0; i < n; i++) {
            tm_set(u, 0.2f);
            tm_set(a, in[0][i]);
            mpfr_mul(a, u, a, MPFR_RNDN);
            mpfr_add_d(a, a, 0.5, MPFR_RNDN);
            int inside = !mpfr_nan_p(a) && mpfr_cmp_ui(a, 0) >= 0 && mpfr_cmp_ui(a, 1) <= 0;
            if (nd->type == OP_HARD_SIGMOID) {
                if (mpfr_nan_p(a) || inside)
                    mpfr_set(out[i], a, MPFR_RNDN);
                else
                    mpfr_set_ui(out[i], mpfr_sgn(a) > 0, MPFR_RNDN);
                mag[i] = 1;
                continue;
            }
            if (inside) {
                tm_set(b, in[1][i]);
                mpfr_mul(out[i], u, b, MPFR_RNDN);
            } else {
                mpfr_set_zero(out[i], 1);
            }
            /* the cpu decides on the float32 t (op.h): no claim where the two differ */
            float t = 0.2f * in[0][i];
            t = t + 0.5f;
            mag[i] = (0.0f <= t && t <= 1.0f) == inside ? fabs(0.2 * in[1][i]) : INFINITY;
        }
        break;
    case OP_SATLU: /* x > m ? m : x */
    case OP_SATLU_BWD: /* x <= m ? dy : +0 */
        for (size_t i = 0; i < n; i++) {
            float x = in[0][i], m = nd->p.satlu.max;
            float v = nd->type == OP_SATLU ? (x > m ? m : x) : (x <= m ? in[1][i] : 0.0f);
            tm_set(out[i], v);
            mag[i] = fabs(v);
        }
        break;
    case OP_SUB:
    case OP_MUL:
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            tm_set(b, in[1][i]);
            if (nd->type == OP_SUB)
                mpfr_sub(out[i], a, b, MPFR_RNDN);
            else
                mpfr_mul(out[i], a, b, MPFR_RNDN);
            mag[i] = nd->type == OP_SUB ? fabs(in[0][i]) + fabs(in[1][i])
                                        : fabs((double)in[0][i] * in[1][i]);
        }
        break;
    case OP_NEG:
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            mpfr_neg(out[i], a, MPFR_RNDN);
            mag[i] = fabs(in[0][i]);
        }
        break;
    case OP_MEAN: { /* scale * (sum from +0) / count */
        size_t np = tm_in_count(c, 0);
        double sa = 0;
        mpfr_set_zero(s, 1);
        for (size_t i = 0; i < np; i++) {
            tm_set(a, in[0][i]);
            mpfr_add(s, s, a, MPFR_RNDN);
            sa += fabs(in[0][i]);
        }
        mpfr_div_ui(s, s, (unsigned long)np, MPFR_RNDN);
        tm_set(u, nd->p.mean.scale);
        mpfr_mul(out[0], u, s, MPFR_RNDN);
        mag[0] = fabs(nd->p.mean.scale) * sa / (double)np;
        break;
    }
    case OP_MEAN_BWD: /* scale * g / count */
        for (size_t i = 0; i < n; i++) {
            tm_set(u, nd->p.mean.scale);
            tm_set(a, in[0][0]);
            mpfr_mul(a, u, a, MPFR_RNDN);
            mpfr_div_ui(out[i], a, (unsigned long)n, MPFR_RNDN);
            mag[i] = fabs(mpfr_get_d(out[i], MPFR_RNDN));
        }
        break;
    default:
        fail_msg("no reference for op %s", op_type_name(nd->type));
    }
    mpfr_clears(a, b, s, u, (mpfr_ptr)0);
}

/* The backend's own P-bit value v against the reference ref: v must be
 * RN_P(ref), zeros' signs included; where ref is not exact, the other
 * neighbour of a P-bit midpoint within 2^-(TM_REF-16) of ref is accepted. */
static int tm_full_ok(mpfr_srcptr v, mpfr_srcptr ref, long prec, int exact_ref)
{
    if (mpfr_nan_p(v) || mpfr_nan_p(ref))
        return mpfr_nan_p(v) && mpfr_nan_p(ref);
    mpfr_t r, mid;
    mpfr_init2(r, (mpfr_prec_t)prec);
    mpfr_init2(mid, TM_REF + (mpfr_prec_t)prec + 8);
    mpfr_set(r, ref, MPFR_RNDN);
    int ok = mpfr_equal_p(r, v) && !mpfr_signbit(r) == !mpfr_signbit(v);
    if (!ok && !exact_ref && mpfr_regular_p(v) && mpfr_regular_p(r)) {
        mpfr_add(mid, r, v, MPFR_RNDN);      /* exact */
        mpfr_div_2ui(mid, mid, 1, MPFR_RNDN);
        mpfr_sub(mid, mid, ref, MPFR_RNDN);  /* exact */
        mpfr_div_2ui(mid, mid, TM_REF - 16, MPFR_RNDN);
        ok = mpfr_cmpabs(mid, ref) <= 0;
    }
    mpfr_clears(r, mid, (mpfr_ptr)0);
    return ok;
}

/* Where the oracle and the mpfr backend may differ by convention (both
 * documented; every other element must agree bitwise):
 *   - an exactly zero sum of terms that are all -0: the oracle follows
 *     IEEE from the first term (-0), the backend and the cpu sum from +0
 *     (+0); a mean takes scale's sign times that;
 *   - hard_sigmoid_bwd where the float32 t of op.h (the oracle's, the
 *     cpu's) and the exact t (the backend's) fall on two sides of a bound. */
static int tm_oracle_convention(const struct tm_case *c, size_t i, float got, float orc)
{
    switch (c->op.type) {
    case OP_MATMUL:
    case OP_BIAS_GRAD:
    case OP_CONV2D:
    case OP_CONV2D_BWD_DATA:
    case OP_CONV2D_BWD_FILTER:
    case OP_MEAN:
        return got == 0 && orc == 0 && tm_bits(got) != tm_bits(orc);
    case OP_HARD_SIGMOID_BWD: {
        float x = c->in[0][i], t = 0.2f * x;
        t = t + 0.5f;
        double e = 0.2f * (double)x + 0.5; /* c x exact; rounding keeps e's side of 0, 1 */
        return (0.0f <= t && t <= 1.0f) != (0.0 <= e && e <= 1.0) && orc != got;
    }
    default:
        return 0;
    }
}

static void tm_fail_at(const struct tm_case *c, size_t i, long prec, const char *what)
{
    char inputs[256] = "";
    size_t n = c->op.count;
    for (int k = 0, o = 0; k < c->op.ninputs && o < 200; k++) {
        size_t j = tm_in_count(c, k) == n ? i : 0;
        o += snprintf(inputs + o, sizeof inputs - (size_t)o, " in%d=%a", k, (double)c->in[k][j]);
    }
    fail_msg("%s at %ld bits, element %zu: %s;%s", op_type_name(c->op.type), prec, i, what,
             inputs);
}

/* Run the case at `prec` bits, on the oracle and on the cpu backend:
 *   - the backend's P-bit values must be RN_P(reference) (tm_full_ok;
 *     not for ops that round step by step);
 *   - its float32 outputs must equal RN32(RN_prec(reference)), except (at
 *     TM_PREC) within TM_NEAR of a rounding boundary where the reference is
 *     not exact or the op rounds step by step;
 *   - the oracle must give RN32(reference) wherever that is certain (exact
 *     reference, or not within TM_NEAR of a boundary), and at 200 bits and
 *     more the backend's float32 must equal the oracle's where RN_prec
 *     cannot move the value across a boundary (not within TM_NEAR of one
 *     but exactly on it), but for tm_oracle_convention's elements;
 *   - the cpu's within c->tol epsilons of the magnitude (c->tol > 0).
 * Returns the number of exempted elements. */
size_t tm_check(struct tm_case *c, void *ctx, long prec, int exact_ref)
{
    size_t n = c->op.count;
    float *got = malloc(n * sizeof *got), *cpu = malloc(n * sizeof *cpu);
    float *orc = malloc(n * sizeof *orc);
    mpfr_t *ref = malloc(n * sizeof *ref), *full = malloc(n * sizeof *full);
    double *mag = malloc(n * sizeof *mag);
    assert_true(got && cpu && orc && ref && full && mag);
    for (size_t i = 0; i < n; i++) {
        mpfr_init2(ref[i], TM_REF);
        mpfr_init2(full[i], (mpfr_prec_t)prec);
    }
    tm_run(&backend_mpfr, ctx, c, got, full);
    tm_ref(c, ref, mag);
    char what[256];
    size_t near = 0;
    for (size_t i = 0; i < n && !c->stepwise; i++)
        if (!tm_full_ok(full[i], ref[i], prec, exact_ref)) {
            mpfr_snprintf(what, sizeof what, "got %.30Rg, reference %.30Rg (%Ra)", full[i],
                          ref[i], ref[i]);
            tm_fail_at(c, i, prec, what);
        }
    for (size_t i = 0; i < n; i++) {
        double dist;
        float want = tm_expect(ref[i], prec, &dist);
        if (tm_same(got[i], want))
            continue;
        if (!exact_ref && dist < TM_NEAR && (dist > 0 || c->stepwise)) {
            near++;
            continue;
        }
        snprintf(what, sizeof what, "got %a (%#x), exact value rounds to %a (%#x), %.3g from a "
                 "boundary", (double)got[i], tm_bits(got[i]), (double)want, tm_bits(want), dist);
        tm_fail_at(c, i, prec, what);
    }
    const float *fin[OP_MAX_INPUTS];
    for (int k = 0; k < c->op.ninputs; k++)
        fin[k] = c->in[k];
    struct backend_step st = {.step = c->step};
    if (oracle_op(&c->g, &c->op, orc, fin, &st) != 0)
        fail_msg("oracle: %s", dt_error());
    for (size_t i = 0; i < n; i++) {
        double dist;
        float exact = tm_round_f32(ref[i], &dist);
        if (!exact_ref && dist < TM_NEAR)
            continue;
        if (!tm_same(orc[i], exact) && !tm_oracle_convention(c, i, exact, orc[i])) {
            snprintf(what, sizeof what, "the oracle gives %a (%#x), the exact value rounds to "
                     "%a (%#x)", (double)orc[i], tm_bits(orc[i]), (double)exact, tm_bits(exact));
            tm_fail_at(c, i, prec, what);
        }
        if (prec >= TM_PREC && !(dist > 0 && dist < TM_NEAR) && !tm_same(orc[i], got[i]) &&
            !tm_oracle_convention(c, i, got[i], orc[i])) {
            snprintf(what, sizeof what, "the backend gives %a (%#x), the oracle %a (%#x)",
                     (double)got[i], tm_bits(got[i]), (double)orc[i], tm_bits(orc[i]));
            tm_fail_at(c, i, prec, what);
        }
    }
    if (c->tol > 0) {
        void *cctx = tm_cpu_init();
        tm_run(&backend_cpu, cctx, c, cpu, NULL);
        backend_cpu.free(cctx);
        /* on benign elements: finite inputs below 2^20 in magnitude (an
         * input of another shape than the output: all of it) */
        int whole[OP_MAX_INPUTS];
        for (int k = 0; k < c->op.ninputs; k++) {
            whole[k] = 1;
            for (size_t j = 0; j < tm_in_count(c, k); j++)
                whole[k] = whole[k] && fabsf(c->in[k][j]) <= 0x1p20f;
        }
        for (size_t i = 0; i < n; i++) {
            double x = mpfr_get_d(ref[i], MPFR_RNDN);
            int benign = fabs(x) <= FLT_MAX;
            for (int k = 0; k < c->op.ninputs; k++)
                benign = benign && (tm_in_count(c, k) == n ? fabsf(c->in[k][i]) <= 0x1p20f
                                                           : whole[k]);
            if (!benign)
                continue;
            double err = fabs((double)cpu[i] - x);
            if (!(err <= c->tol * FLT_EPSILON * mag[i] + 0x1p-126))
                fail_msg("%s: cpu backend %a, exact %a: error %.3g over %.3g epsilons of %.3g",
                         op_type_name(c->op.type), (double)cpu[i], x, err, c->tol, mag[i]);
        }
    }
    for (size_t i = 0; i < n; i++)
        mpfr_clears(ref[i], full[i], (mpfr_ptr)0);
    free(got);
    free(cpu);
    free(orc);
    free(ref);
    free(full);
    free(mag);
    return near;
}
