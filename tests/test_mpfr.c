/* test_mpfr.c: the mpfr backend (reference/backend_mpfr.c): float32 round
 * trips and rounding; every op at 200 bits against an independent 1000-bit
 * evaluation of its op.h formula rounded once to float32 (and against the
 * cpu backend as a sanity check); a tiny autoencoder trained at 128 and 256
 * bits; describe, trace and the precision option.
 * Dimension letters: M, K, N of a matrix product; R rows, F features. */
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
#include "exec.h"
#include "graph.h"
#include "model.h"
#include "stats.h"
#include "test_util.h"
#include "util.h"

extern const struct backend_ops backend_mpfr; /* until backend.h declares it */

#define TM_REF 1000          /* bits of the independent evaluation */
#define TM_PREC 200          /* bits of the backend under test */
#define TM_NEAR 0x1p-190     /* closer than this (relative) to a float32 rounding
                              * boundary, a 200-bit result may round either way */

static void *tm_init(long prec)
{
    struct backend_options bo = {.threads = 1, .precision = prec};
    void *ctx = NULL;
    if (backend_mpfr.init(&ctx, &bo) != 0)
        fail_msg("mpfr backend at %ld bits: %s", prec, dt_error());
    return ctx;
}

static void *tm_cpu_init(void)
{
    struct backend_options bo = {.threads = 1};
    void *ctx = NULL;
    assert_int_equal(backend_cpu.init(&ctx, &bo), 0);
    return ctx;
}

static uint32_t tm_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static float tm_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static int tm_same(float a, float b)
{
    return (isnan(a) && isnan(b)) || tm_bits(a) == tm_bits(b);
}

/* ---- an independent rounding to float32 -------------------------------------
 * By comparison, not by bits: lo = the largest float <= |v| (found through
 * the double rounded down, since every float is a double), hi the next one
 * up (2^128 past FLT_MAX, which stands for infinity), and |v| against their
 * midpoint, ties to the even one. *dist: |v - midpoint| / |v|. */
static float tm_round_f32(mpfr_srcptr v, double *dist)
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
static float tm_rand_wide(uint64_t *rng, int emin, int emax)
{
    uint64_t u = tu_rand_u64(rng);
    double m = (double)((u >> 40) | (1u << 23)) * 0x1p-24;
    int e = emin + (int)((u >> 8) % (uint64_t)(emax - emin + 1));
    return (float)((u & 1 ? -1 : 1) * ldexp(m, e));
}

static float tm_rand(uint64_t *rng, double lo, double hi)
{
    return (float)tu_rand_uniform(rng, lo, hi);
}

/* ---- one op on given float inputs -------------------------------------------- */

struct tm_case {
    struct graph g;          /* the input leaves */
    struct node op;          /* the op under test (outside g) */
    float *in[OP_MAX_INPUTS];
    uint64_t step;
    double tol;              /* cpu sanity check: float epsilons of the magnitude */
    int stepwise;            /* op rounds each elementary step: exact ties may differ */
};

static void tm_case_init(struct tm_case *c, enum op_type t, uint32_t d0, uint32_t d1)
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
static float *tm_case_input(struct tm_case *c, uint32_t d0, uint32_t d1)
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

static void tm_case_free(struct tm_case *c)
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

static void tm_ref(const struct tm_case *c, mpfr_t *out, double *mag)
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
static size_t tm_check(struct tm_case *c, void *ctx, long prec, int exact_ref)
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

/* ---- float32 in and out -------------------------------------------------------- */

static const uint32_t tm_special_bits[] = {
    0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x00000002u, 0x00000003u,
    0x007fffffu, 0x807fffffu, 0x00800000u, 0x80800000u, 0x00800001u, 0x00400000u,
    0x3f800000u, 0xbf800000u, 0x3f800001u, 0x3f7fffffu, 0x7f7fffffu, 0xff7fffffu,
    0x7f7ffffeu, 0x7f000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
    0x7f800001u, 0x7fbfffffu, 0x34000000u, 0x33800000u, 0x4b800000u, 0x4b7fffffu,
};

/* upload then download gives the same float back (NaN: a NaN). */
static void test_round_trip(void **state)
{
    (void)state;
    size_t n = 1 << 18;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    assert_true(x && y);
    size_t ns = sizeof tm_special_bits / sizeof tm_special_bits[0];
    uint64_t rng = 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        if (i < ns)
            b = tm_special_bits[i];
        else if (i < ns + 600)
            b = (uint32_t)((i - ns) / 2) << 23 | ((i & 1) ? 0x7fffffu : 0); /* every exponent */
        else if (i % 4 == 0)
            b = (uint32_t)tu_rand_u64(&rng) & 0x807fffffu;                   /* subnormals */
        else
            b = (uint32_t)tu_rand_u64(&rng);
        x[i] = tm_float(b);
    }
    long precs[] = {24, 53, 128, TM_PREC, 1000};
    for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
        void *ctx = tm_init(precs[p]);
        backend_buf *b = backend_mpfr.alloc(ctx, n);
        memset(y, 0xa5, n * sizeof *y);
        backend_mpfr.download(ctx, y, b, n);
        for (size_t i = 0; i < n; i++)
            if (tm_bits(y[i]) != 0)
                fail_msg("a fresh buffer at %ld bits holds %a at %zu, not +0", precs[p],
                         (double)y[i], i);
        backend_mpfr.upload(ctx, b, x, n);
        backend_mpfr.download(ctx, y, b, n);
        for (size_t i = 0; i < n; i++)
            if (!tm_same(x[i], y[i]))
                fail_msg("%ld bits: uploaded %a (%#x), downloaded %a (%#x)", precs[p],
                         (double)x[i], tm_bits(x[i]), (double)y[i], tm_bits(y[i]));
        backend_mpfr.release(ctx, b);
        backend_mpfr.free(ctx);
    }
    free(x);
    free(y);
}

/* Values v = x + h1 h2 + d1 d2 made by a matrix product (exact at 200 bits
 * for these), placed near the float32 rounding boundaries: midpoints of
 * normal and subnormal floats, the overflow threshold, half the least
 * subnormal, and beyond the range. Every element of the (T,T) product
 * [x h1 d1] [1 h2 d2]^T is checked, at several precisions, against the
 * independent rounding of RN_prec(v), and that rounding against
 * mpfr_get_flt. */
struct tm_target {
    float x, h1, h2, d1, d2;
};

/* 2^e (-298 <= e <= 254) as a product of two floats. */
static void tm_pow2(int e, float *a, float *b)
{
    int h = e / 2;
    *a = ldexpf(1.0f, h);
    *b = ldexpf(1.0f, e - h);
}

static int tm_half_ulp_exp(float x)
{
    int e;
    frexpf(x, &e);
    return fabsf(x) < FLT_MIN ? -150 : e - 25;
}

static void tm_target_add(struct tm_target *t, size_t *n, float x, int sh, int hexp, int sd,
                          int dexp)
{
    struct tm_target *o = &t[(*n)++];
    o->x = x;
    tm_pow2(hexp, &o->h1, &o->h2);
    o->h1 *= (float)sh;
    if (sd) {
        tm_pow2(dexp < -298 ? -298 : dexp, &o->d1, &o->d2);
        o->d1 *= (float)sd;
    } else {
        o->d1 = o->d2 = 0;
    }
}

static void test_download_rounding(void **state)
{
    (void)state;
    enum { TMAX = 512 };
    static const int below[] = {1, 2, 23, 24, 25, 60, 100, 150, 175, 190, 198, 199, 200, 201, 230};
    struct tm_target *t = calloc(TMAX, sizeof *t);
    assert_non_null(t);
    size_t nt = 0;
    uint64_t rng = 7;
    for (int i = 0; i < 100; i++) { /* normal floats of every magnitude */
        float x = tm_rand_wide(&rng, -125, 128);
        int j = (int)(tu_rand_u64(&rng) % 16);
        int sd = j == 15 ? 0 : (tu_rand_u64(&rng) & 1) ? 1 : -1;
        int hx = tm_half_ulp_exp(x);
        tm_target_add(t, &nt, x, (i & 1) ? 1 : -1, hx, sd, hx - below[j % 15]);
    }
    for (int i = 0; i < 60; i++) { /* subnormals, and the largest ones */
        uint32_t b = i < 10 ? 0x007fffffu - (uint32_t)i : (uint32_t)tu_rand_u64(&rng) & 0x007fffffu;
        float x = tm_float(b | ((i & 2) ? 0x80000000u : 0));
        int j = (int)(tu_rand_u64(&rng) % 16);
        int sd = j == 15 ? 0 : (tu_rand_u64(&rng) & 1) ? 1 : -1;
        tm_target_add(t, &nt, x, (i & 1) ? 1 : -1, -150, sd, -150 - below[j % 15]);
    }
    for (int s = -1; s <= 1; s += 2)
        for (int j = 0; j < 16; j++) {
            int sd = j == 15 ? 0 : (j & 1) ? 1 : -1;
            int jb = below[j % 15];
            /* the overflow threshold FLT_MAX + 2^103 */
            tm_target_add(t, &nt, (float)s * FLT_MAX, s, 103, sd, 103 - jb);
            /* the midpoint below FLT_MIN, and above it */
            tm_target_add(t, &nt, (float)s * FLT_MIN, -s, -150, sd, -150 - jb);
            tm_target_add(t, &nt, (float)s * FLT_MIN, s, -150, sd, -150 - jb);
            /* around half the least subnormal, and far below it */
            tm_target_add(t, &nt, 0.0f, s, -150, sd, -150 - jb);
            tm_target_add(t, &nt, 0.0f, s, -151, sd, -150);
            tm_target_add(t, &nt, 0.0f, s, -152 - jb, sd, -298);
            /* past the float range */
            tm_target_add(t, &nt, 0.0f, s, 128, sd, 104 - jb);
            tm_target_add(t, &nt, 0.0f, s, 150 + j * 6, sd, 100);
        }
    assert_true(nt <= TMAX);

    struct tm_case c;
    tm_case_init(&c, OP_MATMUL, (uint32_t)nt, (uint32_t)nt);
    c.op.p.mm.tb = 1;
    c.tol = 0;
    float *a = tm_case_input(&c, (uint32_t)nt, 3), *b = tm_case_input(&c, (uint32_t)nt, 3);
    for (size_t i = 0; i < nt; i++) {
        a[3 * i] = t[i].x;
        a[3 * i + 1] = t[i].h1;
        a[3 * i + 2] = t[i].d1;
        b[3 * i] = 1.0f;
        b[3 * i + 1] = t[i].h2;
        b[3 * i + 2] = t[i].d2;
    }
    long precs[] = {TM_PREC, 24, 25, 53, 64, 113, 128, 256, 300, 1000};
    for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
        void *ctx = tm_init(precs[p]);
        tm_check(&c, ctx, precs[p], 1);
        backend_mpfr.free(ctx);
    }
    /* The test's rounding against MPFR's own, on the same values. */
    mpfr_t *ref = malloc(c.op.count * sizeof *ref);
    double *mag = malloc(c.op.count * sizeof *mag);
    assert_true(ref && mag);
    for (size_t i = 0; i < c.op.count; i++)
        mpfr_init2(ref[i], TM_REF);
    tm_ref(&c, ref, mag);
    size_t ties = 0;
    for (size_t i = 0; i < c.op.count; i++) {
        double dist;
        float mine = tm_round_f32(ref[i], &dist), lib = mpfr_get_flt(ref[i], MPFR_RNDN);
        ties += dist == 0;
        if (!tm_same(mine, lib))
            fail_msg("rounding %zu: the test's %a, mpfr_get_flt's %a", i, (double)mine, (double)lib);
        mpfr_clear(ref[i]);
    }
    if (ties < 50)
        fail_msg("only %zu exact ties among the targets: the test lost its point", ties);
    free(ref);
    free(mag);
    tm_case_free(&c);
    free(t);
}

/* ---- matrix products ------------------------------------------------------------- */

/* Fill a (count) with: 0 uniform in [-1, 1]; 1 wide exponents (2^-60 ..
 * 2^60) with zeros and -0; 2 floats of every magnitude, subnormals
 * included, products within the float range's square. */
static void tm_fill(float *a, size_t count, int kind, uint64_t *rng)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t u = tu_rand_u64(rng);
        if (kind == 0)
            a[i] = tm_rand(rng, -1, 1);
        else if (u % 10 == 0)
            a[i] = (u & 16) ? -0.0f : 0.0f;
        else
            a[i] = kind == 1 ? tm_rand_wide(rng, -60, 60) : tm_rand_wide(rng, -149, 127);
    }
}

static void tm_matmul_case(void *ctx, long prec, uint32_t m, uint32_t k, uint32_t n, int ta,
                           int tb, int kind, uint64_t seed)
{
    struct tm_case c;
    tm_case_init(&c, OP_MATMUL, m, n);
    c.op.p.mm.ta = ta;
    c.op.p.mm.tb = tb;
    c.tol = kind == 0 ? 2 : 0;
    float *a = ta ? tm_case_input(&c, k, m) : tm_case_input(&c, m, k);
    float *b = tb ? tm_case_input(&c, n, k) : tm_case_input(&c, k, n);
    uint64_t rng = seed;
    tm_fill(a, (size_t)m * k, kind, &rng);
    tm_fill(b, (size_t)k * n, kind, &rng);
    tm_check(&c, ctx, prec, 1);
    tm_case_free(&c);
}

/* Every transposition on several shapes and value ranges at 200 bits; a
 * thin and a wide product; the limb counts of other precisions (1, 2, 3, 4
 * and 5+ limbs take different code). The 1000-bit sums are exact, so every
 * element must match. */
static void test_matmul(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    uint64_t seed = 100;
    for (int kind = 0; kind < 3; kind++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                tm_matmul_case(ctx, TM_PREC, 23, 41, 19, ta, tb, kind, seed++);
                tm_matmul_case(ctx, TM_PREC, 1, 7, 3, ta, tb, kind, seed++);
            }
    tm_matmul_case(ctx, TM_PREC, 5, 1, 6, 0, 0, 1, seed++);
    tm_matmul_case(ctx, TM_PREC, 3, 700, 4, 0, 1, 1, seed++);
    backend_mpfr.free(ctx);
    long precs[] = {24, 64, 65, 128, 150, 256, 300, 1000};
    for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
        ctx = tm_init(precs[p]);
        for (int kind = 0; kind < 3; kind++)
            tm_matmul_case(ctx, precs[p], 9, 33, 11, (int)p & 1, kind & 1, kind, seed++);
        backend_mpfr.free(ctx);
    }
}

/* Inf and NaN operands: IEEE's results (Inf - Inf and 0 Inf are NaN). */
static void test_matmul_special(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    const float sp[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1.0f, -2.5f, FLT_MAX};
    struct tm_case c;
    tm_case_init(&c, OP_MATMUL, 8, 8);
    c.tol = 0;
    float *a = tm_case_input(&c, 8, 3), *b = tm_case_input(&c, 3, 8);
    uint64_t rng = 5;
    for (int i = 0; i < 24; i++) {
        a[i] = sp[(i * 7 + 1) % 8];
        b[i] = (i % 5 == 0) ? sp[i % 8] : tm_rand(&rng, -1, 1);
    }
    tm_check(&c, ctx, TM_PREC, 1);
    tm_case_free(&c);
    backend_mpfr.free(ctx);
}

/* Operands beyond the float range, made by squaring on the backend: a row
 * [T 1 3] times a column [U 1 0.5] with T = 2^-e, U = 2^e is 3.5 exactly,
 * through the fixed-point accumulator for e = 400 and through mpfr_sum for
 * e = 12800 (an exponent spread past the accumulator's width). */
static void tm_run_node(void *ctx, struct graph *g, int i, backend_buf **buf)
{
    const backend_buf *in[OP_MAX_INPUTS];
    for (int k = 0; k < g->nodes[i].ninputs; k++)
        in[k] = buf[g->nodes[i].inputs[k]];
    struct backend_step st = {0};
    backend_mpfr.op[g->nodes[i].type](ctx, g, &g->nodes[i], buf[i], in, &st);
}

static void test_matmul_spread(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    for (int big = 0; big < 2; big++) {
        int squarings = big ? 7 : 2; /* 2^100 squared: 2^400 or 2^12800 */
        struct graph g;
        graph_init(&g);
        uint32_t s11[2] = {1, 1}, s12[2] = {1, 2}, s23[2] = {2, 3}, s32[2] = {3, 2}, s21[2] = {2, 1};
        int t = graph_input(&g, "t", 2, s11), u = graph_input(&g, "u", 2, s11);
        int tpad = graph_input(&g, "tpad", 2, s12);    /* [0 1] */
        int upad = graph_input(&g, "upad", 2, s21);    /* [0; 1] */
        int e1r = graph_input(&g, "e1r", 2, s12);      /* [1 0] */
        int e1c = graph_input(&g, "e1c", 2, s21);      /* [1; 0] */
        int sel_r = graph_input(&g, "sel_r", 2, s23);  /* [[1 0 0] [0 1 3]] */
        int sel_c = graph_input(&g, "sel_c", 2, s32);  /* [[1 0] [0 1] [0 0.5]] */
        int t0 = t, u0 = u, nleaf = g.n;
        for (int q = 0; q < squarings; q++) {
            char name[32];
            snprintf(name, sizeof name, "tsq%d", q);
            t = graph_matmul(&g, name, t, t, 0, 0);
            snprintf(name, sizeof name, "usq%d", q);
            u = graph_matmul(&g, name, u, u, 0, 0);
        }
        int t2 = graph_matmul(&g, "t2", t, e1r, 0, 0);        /* [T 0] */
        int tr = graph_add(&g, "tr", t2, tpad);               /* [T 1] */
        int u2 = graph_matmul(&g, "u2", e1c, u, 0, 0);        /* [U; 0] */
        int uc = graph_add(&g, "uc", u2, upad);               /* [U; 1] */
        int row = graph_matmul(&g, "row", tr, sel_r, 0, 0);   /* [T 1 3] */
        int col = graph_matmul(&g, "col", sel_c, uc, 0, 0);   /* [U; 1; 0.5] */
        int dot = graph_matmul(&g, "dot", row, col, 0, 0);
        int dotT = graph_matmul(&g, "dotT", col, row, 1, 1);  /* the same, transposed operands */
        backend_buf **buf;
        buf = calloc((size_t)g.n, sizeof *buf);
        assert_non_null(buf);
        for (int i = 0; i < g.n; i++)
            buf[i] = backend_mpfr.alloc(ctx, g.nodes[i].count);
        const float tv[] = {0x1p-100f}, uv[] = {0x1p100f}, tp[] = {0, 1}, up[] = {0, 1},
                    er[] = {1, 0}, ec[] = {1, 0}, sr[] = {1, 0, 0, 0, 1, 3},
                    sc[] = {1, 0, 0, 1, 0, 0.5f};
        backend_mpfr.upload(ctx, buf[t0], tv, 1);
        backend_mpfr.upload(ctx, buf[u0], uv, 1);
        backend_mpfr.upload(ctx, buf[tpad], tp, 2);
        backend_mpfr.upload(ctx, buf[upad], up, 2);
        backend_mpfr.upload(ctx, buf[e1r], er, 2);
        backend_mpfr.upload(ctx, buf[e1c], ec, 2);
        backend_mpfr.upload(ctx, buf[sel_r], sr, 6);
        backend_mpfr.upload(ctx, buf[sel_c], sc, 6);
        for (int i = nleaf; i < g.n; i++)
            tm_run_node(ctx, &g, i, buf);
        float r[3], tt, uu;
        backend_mpfr.download(ctx, &tt, buf[t], 1);
        backend_mpfr.download(ctx, &uu, buf[u], 1);
        assert_true(tt == 0.0f && isinf(uu)); /* beyond float32 both ways */
        backend_mpfr.download(ctx, r, buf[row], 3);
        assert_true(r[0] == 0.0f && r[1] == 1.0f && r[2] == 3.0f);
        backend_mpfr.download(ctx, r, buf[dot], 1);
        if (r[0] != 3.5f)
            fail_msg("[2^-%d 1 3] . [2^%d 1 0.5] = %a, expected 3.5", 100 << squarings,
                     100 << squarings, (double)r[0]);
        backend_mpfr.download(ctx, r, buf[dotT], 1);
        if (r[0] != 3.5f)
            fail_msg("transposed: %a, expected 3.5", (double)r[0]);
        for (int i = 0; i < g.n; i++)
            backend_mpfr.release(ctx, buf[i]);
        free(buf);
        graph_free(&g);
    }
    backend_mpfr.free(ctx);
}

/* ---- elementwise ops ------------------------------------------------------------- */

/* Values every elementwise op sees besides random ones. */
static const float tm_edge[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 0x1p-149f, -0x1p-149f,
                                FLT_MIN, 1e-30f, -1e-30f, 17.0f, -17.0f, 88.0f, -88.0f, 104.0f,
                                -104.0f, 1e4f, -1e4f, 1e30f, -1e30f, FLT_MAX, -FLT_MAX,
                                INFINITY, -INFINITY, NAN};
#define TM_NEDGE (sizeof tm_edge / sizeof tm_edge[0])

/* x[i]: for the first TM_NEDGE^2 elements the edge value (i / stride) mod
 * TM_NEDGE (strides 1 and TM_NEDGE cross two inputs' edge values), random
 * in [lo, hi] after. */
static void tm_fill_unary(float *x, size_t n, double lo, double hi, uint64_t *rng, size_t stride)
{
    for (size_t i = 0; i < n; i++)
        x[i] = i < TM_NEDGE * TM_NEDGE ? tm_edge[(i / stride) % TM_NEDGE] : tm_rand(rng, lo, hi);
}

static void tm_unary(void *ctx, enum op_type t, double lo, double hi, double tol, uint64_t seed)
{
    struct tm_case c;
    tm_case_init(&c, t, 64, 64);
    c.tol = tol;
    uint64_t rng = seed;
    tm_fill_unary(tm_case_input(&c, 64, 64), c.op.count, lo, hi, &rng, 1);
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
}

/* Two inputs: x with the edge values crossed with y's, then random. */
static void tm_binary(void *ctx, enum op_type t, double xlo, double xhi, double ylo, double yhi,
                      double tol, uint64_t seed, const union op_params *p, uint64_t step)
{
    struct tm_case c;
    tm_case_init(&c, t, 64, 64);
    c.tol = tol;
    c.step = step;
    if (p)
        c.op.p = *p;
    uint64_t rng = seed;
    float *x = tm_case_input(&c, 64, 64), *y = tm_case_input(&c, 64, 64);
    tm_fill_unary(x, c.op.count, xlo, xhi, &rng, TM_NEDGE);
    tm_fill_unary(y, c.op.count, ylo, yhi, &rng, 1);
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
}

static void test_activations(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    tm_unary(ctx, OP_SIGMOID, -30, 30, 8, 11);
    tm_unary(ctx, OP_SIGMOID, -0.01, 0.01, 8, 12);
    tm_unary(ctx, OP_TANH, -10, 10, 8, 13);
    tm_unary(ctx, OP_TANH, -1e-3, 1e-3, 8, 14);
    tm_unary(ctx, OP_RELU, -1, 1, 0, 15);
    tm_binary(ctx, OP_SIGMOID_BWD, -0.1, 1.1, -2, 2, 8, 16, NULL, 0);
    tm_binary(ctx, OP_TANH_BWD, -1.1, 1.1, -2, 2, 8, 17, NULL, 0);
    tm_binary(ctx, OP_RELU_BWD, -1, 1, -2, 2, 0, 18, NULL, 0);
    /* y near 1 and near 0, where 1 - y and 1 - y y cancel */
    tm_binary(ctx, OP_SIGMOID_BWD, 0.999, 1.0, -1, 1, 8, 19, NULL, 0);
    tm_binary(ctx, OP_TANH_BWD, 0.999, 1.0, -1, 1, 8, 20, NULL, 0);
    tm_binary(ctx, OP_SIGMOID_BWD, 0, 1e-6, -1, 1, 8, 21, NULL, 0);
    backend_mpfr.free(ctx);
}

static void test_add_ops(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    tm_binary(ctx, OP_ADD, -1, 1, -1, 1, 2, 31, NULL, 0);
    tm_binary(ctx, OP_ADD, -1, 1, -1e-6, 1e-6, 2, 32, NULL, 0);
    /* bias: x (R,F) + b (F) */
    struct tm_case c;
    tm_case_init(&c, OP_ADD_BIAS, 50, 80);
    float *x = tm_case_input(&c, 50, 80), *b = tm_case_input(&c, 80, 0);
    uint64_t rng = 33;
    for (size_t i = 0; i < c.op.count; i++)
        x[i] = i < TM_NEDGE * 80 ? tm_edge[i / 80] : tm_rand_wide(&rng, -30, 5);
    for (size_t j = 0; j < 80; j++)
        b[j] = j < TM_NEDGE ? tm_edge[j] : tm_rand_wide(&rng, -30, 5);
    c.tol = 2;
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
    /* bias gradient: column sums of dy (R,F); column 0 all -0, column 1 a
     * cancelling pair, column 2 holds an Inf, column 3 Inf and -Inf */
    tm_case_init(&c, OP_BIAS_GRAD, 80, 0);
    float *dy = tm_case_input(&c, 50, 80);
    for (size_t i = 0; i < 50 * 80; i++) {
        size_t j = i % 80;
        dy[i] = j == 0 ? -0.0f : tm_rand_wide(&rng, -40, 3);
        if (j == 1)
            dy[i] = i / 80 < 2 ? (i / 80 ? -3.0f : 3.0f) : 0.0f;
    }
    dy[2] = INFINITY;
    dy[3] = INFINITY;
    dy[80 + 3] = -INFINITY;
    c.tol = 60;
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
    /* a single row */
    tm_case_init(&c, OP_BIAS_GRAD, 7, 0);
    dy = tm_case_input(&c, 1, 7);
    for (size_t j = 0; j < 7; j++)
        dy[j] = tm_edge[j];
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
    backend_mpfr.free(ctx);
}

/* Loss: 300 cases of 1 to 70 elements (divided by n in one rounding, n a
 * power of two or not), large ones, and exact zeros, Inf and NaN. */
static void test_mse(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    uint64_t rng = 41;
    for (int r = 0; r < 306; r++) {
        uint32_t n = r < 300 ? 1 + (uint32_t)(tu_rand_u64(&rng) % 70) : r < 303 ? 4096 : 4095;
        struct tm_case c;
        tm_case_init(&c, OP_MSE, 1, 0);
        float *p = tm_case_input(&c, n, 0), *t = tm_case_input(&c, n, 0);
        for (uint32_t i = 0; i < n; i++) {
            p[i] = r % 3 ? tm_rand(&rng, 0, 1) : tm_rand_wide(&rng, -80, 10);
            t[i] = r % 5 == 1 ? p[i] : r % 3 ? tm_rand(&rng, 0, 1) : tm_rand_wide(&rng, -80, 10);
        }
        if (r == 7)
            p[0] = INFINITY;
        if (r == 8)
            p[n - 1] = t[n - 1] = -INFINITY;
        if (r == 9)
            t[0] = NAN;
        c.tol = 4;
        tm_check(&c, ctx, TM_PREC, 0);
        tm_case_free(&c);
    }
    backend_mpfr.free(ctx);
}

static void tm_mse_bwd(void *ctx, uint32_t d0, uint32_t d1, int with_g, float gv, uint64_t seed)
{
    struct tm_case c;
    tm_case_init(&c, OP_MSE_BWD, d0, d1);
    float *p = tm_case_input(&c, d0, d1), *t = tm_case_input(&c, d0, d1);
    uint64_t rng = seed;
    for (size_t i = 0; i < c.op.count; i++) {
        p[i] = i < TM_NEDGE * TM_NEDGE ? tm_edge[i / TM_NEDGE] : tm_rand(&rng, -1, 2);
        t[i] = i < TM_NEDGE * TM_NEDGE ? tm_edge[i % TM_NEDGE]
             : i % 17 == 0             ? p[i]
                                       : tm_rand(&rng, 0, 1);
    }
    if (with_g)
        tm_case_input(&c, 1, 0)[0] = gv;
    c.tol = 6;
    tm_check(&c, ctx, TM_PREC, 0);
    tm_case_free(&c);
}

static void test_mse_bwd(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    tm_mse_bwd(ctx, 63, 65, 0, 0, 51);        /* n = 4095 */
    tm_mse_bwd(ctx, 64, 64, 0, 0, 52);        /* n = 4096 */
    tm_mse_bwd(ctx, 63, 65, 1, 0.37f, 53);
    tm_mse_bwd(ctx, 30, 30, 1, -3e-5f, 54);
    tm_mse_bwd(ctx, 30, 30, 1, 0.0f, 55);
    tm_mse_bwd(ctx, 30, 30, 1, -0.0f, 56);
    tm_mse_bwd(ctx, 30, 30, 1, INFINITY, 57);
    backend_mpfr.free(ctx);
}

static void test_optimizers(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    union op_params p;
    memset(&p, 0, sizeof p);
    p.sgd.lr = 0.1f;
    tm_binary(ctx, OP_SGD, -1, 1, -1, 1, 2, 61, &p, 0);
    p.sgd.lr = 1.0f; /* p - g: exact cancellations among the edge values */
    tm_binary(ctx, OP_SGD, -1, 1, -1, 1, 2, 62, &p, 0);
    p.momentum.mu = 0.9f;
    tm_binary(ctx, OP_MOMENTUM, -1, 1, -1, 1, 2, 63, &p, 0);
    p.adam.lr = 1e-3f;
    p.adam.b1 = 0.9f;
    p.adam.b2 = 0.999f;
    p.adam.eps = 1e-8f;
    tm_binary(ctx, OP_ADAM_M, -0.1, 0.1, -1, 1, 2, 64, &p, 0);
    tm_binary(ctx, OP_ADAM_V, 0, 0.01, -1, 1, 3, 65, &p, 0);
    p.adam.b1 = 1e-3f; /* 1 - b1 not a float: must still be exact */
    p.adam.b2 = 0.3f;
    tm_binary(ctx, OP_ADAM_M, -0.1, 0.1, -1, 1, 0, 66, &p, 0);
    tm_binary(ctx, OP_ADAM_V, 0, 0.01, -1, 1, 0, 67, &p, 0);
    /* p - lr (m / c1) / (sqrt(v / c2) + eps) at t = 1, 10, 1000 */
    p.adam.b1 = 0.9f;
    p.adam.b2 = 0.999f;
    uint64_t steps[] = {0, 9, 999};
    for (int s = 0; s < 3; s++) {
        struct tm_case c;
        tm_case_init(&c, OP_ADAM_P, 64, 64);
        c.op.p = p;
        c.step = steps[s];
        c.stepwise = 1;
        c.tol = 16;
        float *pp = tm_case_input(&c, 64, 64), *m = tm_case_input(&c, 64, 64),
              *v = tm_case_input(&c, 64, 64);
        uint64_t rng = 70 + (uint64_t)s;
        for (size_t i = 0; i < c.op.count; i++) {
            pp[i] = i < TM_NEDGE ? tm_edge[i] : tm_rand(&rng, -1, 1);
            m[i] = i % 50 == 0 ? 0.0f : tm_rand(&rng, -0.1, 0.1);
            v[i] = i % 70 == 0 ? 0.0f : tm_rand(&rng, 0, 0.01);
        }
        size_t near = tm_check(&c, ctx, TM_PREC, 0);
        assert_true(near <= 1);
        tm_case_free(&c);
    }
    /* fill */
    const float fv[] = {1.0f, -0.0f, 0.3f, -FLT_MAX, 0x1p-149f};
    for (int i = 0; i < 5; i++) {
        struct tm_case c;
        tm_case_init(&c, OP_FILL, 3, 5);
        c.op.p.fill.value = fv[i];
        tm_check(&c, ctx, TM_PREC, 1);
        tm_case_free(&c);
    }
    backend_mpfr.free(ctx);
}

/* ---- trace, describe, options ----------------------------------------------------- */

static void test_trace_describe(void **state)
{
    (void)state;
    void *ctx = tm_init(TM_PREC);
    struct trace_config cfg;
    memset(&cfg, 0, sizeof cfg);
    backend_mpfr.describe(ctx, &cfg);
    assert_non_null(trace_config_get(&cfg, "precision"));
    assert_string_equal(trace_config_get(&cfg, "precision"), "200");
    assert_non_null(trace_config_get(&cfg, "mpfr_version"));
    assert_string_equal(trace_config_get(&cfg, "mpfr_version"), mpfr_get_version());
    trace_config_free(&cfg);

    /* trace of a tensor that is not float32 (sigmoid outputs, with specials):
     * the record of its float32 rounding */
    struct tm_case c;
    tm_case_init(&c, OP_SIGMOID, 5000, 0);
    float *x = tm_case_input(&c, 5000, 0);
    uint64_t rng = 81;
    tm_fill_unary(x, 5000, -20, 20, &rng, 1);
    x[4000] = NAN;
    backend_buf *ib = backend_mpfr.alloc(ctx, 5000), *ob = backend_mpfr.alloc(ctx, 5000);
    backend_mpfr.upload(ctx, ib, x, 5000);
    const backend_buf *in[1] = {ib};
    backend_mpfr.op[OP_SIGMOID](ctx, &c.g, &c.op, ob, in, NULL);
    float *y = malloc(5000 * sizeof *y);
    assert_non_null(y);
    backend_mpfr.download(ctx, y, ob, 5000);
    struct trace_oprec r1, r2;
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    backend_mpfr.trace(ctx, ob, 5000, &r1);
    stats_compute(y, 5000, &r2);
    assert_memory_equal(&r1, &r2, sizeof r1);
    assert_true(r1.nan >= 1 && r1.inf == 0);
    free(y);
    backend_mpfr.release(ctx, ib);
    backend_mpfr.release(ctx, ob);
    tm_case_free(&c);
    backend_mpfr.free(ctx);

    ctx = tm_init(0); /* the default */
    memset(&cfg, 0, sizeof cfg);
    backend_mpfr.describe(ctx, &cfg);
    assert_string_equal(trace_config_get(&cfg, "precision"), "128");
    trace_config_free(&cfg);
    backend_mpfr.free(ctx);
}

static void test_precision_range(void **state)
{
    (void)state;
    const long bad[] = {23, 1, -5, 100001, 1L << 40};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct backend_options bo = {.threads = 1, .precision = bad[i]};
        void *ctx = NULL;
        dt_error_set("%s", "");
        assert_int_equal(backend_mpfr.init(&ctx, &bo), -1);
        assert_null(ctx);
        assert_true(strlen(dt_error()) > 0);
    }
    const long good[] = {24, 100000};
    for (size_t i = 0; i < 2; i++) {
        void *ctx = tm_init(good[i]);
        float x[3] = {0.1f, -0x1p-149f, 3e38f}, y[3];
        backend_buf *b = backend_mpfr.alloc(ctx, 3);
        backend_mpfr.upload(ctx, b, x, 3);
        backend_mpfr.download(ctx, y, b, 3);
        assert_memory_equal(x, y, sizeof x);
        backend_mpfr.release(ctx, b);
        backend_mpfr.free(ctx);
    }
    /* the generic limb path at 100000 bits: a small product */
    void *ctx = tm_init(100000);
    tm_matmul_case(ctx, 100000, 3, 5, 2, 0, 1, 1, 91);
    backend_mpfr.free(ctx);
}

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
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_download_rounding),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_special),
        cmocka_unit_test(test_matmul_spread),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_add_ops),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_mse_bwd),
        cmocka_unit_test(test_optimizers),
        cmocka_unit_test(test_trace_describe),
        cmocka_unit_test(test_precision_range),
        cmocka_unit_test(test_train_sgd),
        cmocka_unit_test(test_train_adam),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mpfr_free_cache();
    return rc;
}
