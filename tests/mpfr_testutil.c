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
#include "mpfr_testutil.h"
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

void tm_case_init(struct tm_case *c, enum op_type t, uint32_t d0, uint32_t d1)
{
    memset(c, 0, sizeof *c);
    graph_init(&c->g);
    c->op.type = t;
    c->op.name = "op";
    c->op.kind = TRACE_KIND_FORWARD;
    c->op.ndim = d1 ? 2 : 1;
    c->op.shape[0] = d0;
    c->op.shape[1] = d1;
    c->op.count = (size_t)d0 * (d1 ? d1 : 1);
    c->op.grad = c->op.next = -1;
    c->tol = 8;
}

/* Input k of shape (d0) or (d0, d1); returns its values to fill. */
float *tm_case_input(struct tm_case *c, uint32_t d0, uint32_t d1)
{
    char name[16];
    int k = c->op.ninputs;
    snprintf(name, sizeof name, "in%d", k);
    uint32_t shape[2] = {d0, d1};
    int i = graph_input(&c->g, name, d1 ? 2 : 1, shape);
    c->op.inputs[k] = i;
    c->op.ninputs++;
    c->in[k] = calloc(c->g.nodes[i].count, sizeof(float));
    assert_non_null(c->in[k]);
    return c->in[k];
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

static void tm_run(const struct backend_ops *be, void *ctx, const struct tm_case *c, float *out)
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
    case OP_ADD_BIAS: {
        size_t f = nd->shape[1];
        for (size_t i = 0; i < n; i++) {
            tm_set(a, in[0][i]);
            tm_set(b, in[1][i % f]);
            mpfr_add(out[i], a, b, MPFR_RNDN);
            mag[i] = fabs(in[0][i]) + fabs(in[1][i % f]);
        }
        break;
    }
    case OP_BIAS_GRAD: {
        size_t rows = g->nodes[nd->inputs[0]].shape[0];
        for (size_t j = 0; j < n; j++) {
            mpfr_set_zero(s, 1);
            mag[j] = 0;
            for (size_t r = 0; r < rows; r++) {
                tm_set(a, in[0][r * n + j]);
                mpfr_add(s, s, a, MPFR_RNDN);
                mag[j] += fabs(in[0][r * n + j]) * (double)rows;
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
    default:
        fail_msg("no reference for op %s", op_type_name(nd->type));
    }
    mpfr_clears(a, b, s, u, (mpfr_ptr)0);
}

/* Run the case at `prec` bits and on the cpu backend; every float32 output
 * of the mpfr backend must equal RN32(RN_prec(reference)), except (at
 * TM_PREC) within TM_NEAR of a rounding boundary where the reference is not
 * exact or the op rounds step by step; the cpu's within c->tol epsilons of
 * the magnitude. Returns the number of exempted elements. */
size_t tm_check(struct tm_case *c, void *ctx, long prec, int exact_ref)
{
    size_t n = c->op.count;
    float *got = malloc(n * sizeof *got), *cpu = malloc(n * sizeof *cpu);
    mpfr_t *ref = malloc(n * sizeof *ref);
    double *mag = malloc(n * sizeof *mag);
    assert_true(got && cpu && ref && mag);
    for (size_t i = 0; i < n; i++)
        mpfr_init2(ref[i], TM_REF);
    tm_run(&backend_mpfr, ctx, c, got);
    tm_ref(c, ref, mag);
    size_t near = 0;
    for (size_t i = 0; i < n; i++) {
        double dist;
        float want = tm_expect(ref[i], prec, &dist);
        if (tm_same(got[i], want))
            continue;
        if (!exact_ref && dist < TM_NEAR && (dist > 0 || c->stepwise)) {
            near++;
            continue;
        }
        char inputs[256] = "";
        for (int k = 0, o = 0; k < c->op.ninputs && o < 200; k++) {
            size_t j = tm_in_count(c, k) == n ? i : 0;
            o += snprintf(inputs + o, sizeof inputs - (size_t)o, " in%d=%a", k,
                          (double)c->in[k][j < tm_in_count(c, k) ? j : 0]);
        }
        fail_msg("%s at %ld bits, element %zu: got %a (%#x), exact value rounds to %a (%#x), "
                 "%.3g from a boundary;%s", op_type_name(c->op.type), prec, i, (double)got[i],
                 tm_bits(got[i]), (double)want, tm_bits(want), dist, inputs);
    }
    if (c->tol > 0) {
        void *cctx = tm_cpu_init();
        tm_run(&backend_cpu, cctx, c, cpu);
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
        mpfr_clear(ref[i]);
    free(got);
    free(cpu);
    free(ref);
    free(mag);
    return near;
}
