/* test_modcheck_elem.c: modcheck's elementwise modules and optimizer
 * updates (reference/modcheck_elem.c): hand-derived values; exact values
 * against MPFR evaluations of the definitions written here (thousands of
 * bits, rounded to binary32 by MPFR's own subnormal emulation, not the
 * code's rounding); float32 evaluations of the admissible forms within the
 * bounds; planted bugs beyond them; malformed specs. TEST_MODCHECK_VERBOSE=1
 * prints the largest error / allowed of each form; TEST_ONLY=NAME runs one. */
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

#include "modcheck.h"
#include "replay.h"
#include "test_util.h"
#include "util.h"

#define REFP 4000 /* bits of the references at most */

static int verbose;
static uint64_t rng = 0x5eed;

/* ---- tensors and checks -------------------------------------------------------- */

struct tc {
    struct modcheck_tensor t[12];
    int n;
};

static void tc_add(struct tc *c, const char *role, const float *data, uint64_t n)
{
    struct modcheck_tensor *x = &c->t[c->n++];
    memset(x, 0, sizeof *x);
    x->role = role;
    x->ndim = 1;
    x->shape[0] = (int64_t)n;
    x->count = n;
    x->data = data;
}

static char why[128];

static int tc_run(const char *spec, struct tc *c, struct modcheck_result *res)
{
    return modcheck_run(spec, c->t, c->n, res, why, sizeof why);
}

static void tc_run_ok(const char *spec, struct tc *c, struct modcheck_result *res)
{
    int rc = tc_run(spec, c, res);
    if (rc != 0)
        fail_msg("%s: rc %d (%s%s)", spec, rc, why, rc < 0 ? dt_error() : "");
}

static const struct modcheck_output *tc_out(const struct modcheck_result *r, const char *role)
{
    for (int k = 0; k < r->nout; k++)
        if (strcmp(r->out[k].role, role) == 0)
            return &r->out[k];
    fail_msg("no output '%s'", role);
    return NULL;
}

/* The largest error / allowed of got against an output (replay's rule). */
static double ratio_of(const struct modcheck_output *o, const float *got)
{
    struct replay_opcheck c;
    memset(&c, 0, sizeof c);
    replay_classify(got, o->exact, o->bound, o->count, o->least, &c);
    return c.max_ratio;
}

static void report(const char *what, double r)
{
    if (verbose)
        printf("  %-44s %.3f\n", what, r);
}

/* ---- the reference: MPFR from the definitions --------------------------------- */

/* RN32 of v by MPFR's exponent range and subnormalize. */
static float ref32(mpfr_srcptr v)
{
    if (!mpfr_number_p(v) || mpfr_zero_p(v))
        return mpfr_get_flt(v, MPFR_RNDN);
    if (mpfr_get_exp(v) < -200)
        return mpfr_sgn(v) < 0 ? -0.0f : 0.0f;
    if (mpfr_get_exp(v) > 200)
        return mpfr_sgn(v) < 0 ? -INFINITY : INFINITY;
    mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
    mpfr_t r;
    mpfr_init2(r, 24);
    mpfr_set_emin(-148);
    mpfr_set_emax(128);
    int t = mpfr_set(r, v, MPFR_RNDN);
    t = mpfr_check_range(r, t, MPFR_RNDN);
    mpfr_subnormalize(r, t, MPFR_RNDN);
    float f = mpfr_get_flt(r, MPFR_RNDN);
    mpfr_set_emin(emin);
    mpfr_set_emax(emax);
    mpfr_clear(r);
    return f;
}

static int same(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)) || (a == 0 && b == 0);
}

/* The module at x, from its definition, REFP bits. */
static float ref_unary(const char *type, float x)
{
    if (isnan(x))
        return NAN;
    if (strcmp(type, "relu") == 0)
        return x > 0 ? x : 0.0f;
    /* bits: 256, and for gelu at x < 0 what the cancellation of 1 + erf
     * (1 + tanh) takes, about x^2 (3 |a|) bits; beyond REFP the value is
     * below 2^-REFP |x| and rounds to -0 all the same */
    double ax = fabs((double)x), a = 0.8 * (ax + 0.045 * ax * ax * ax);
    double bits = x >= 0 || strncmp(type, "gelu", 4) != 0 ? 256
                  : 256 + (strcmp(type, "gelu approximate=none") == 0 ? ax * ax : 3 * a);
    mpfr_t v, w, k;
    mpfr_inits2(bits < REFP ? (mpfr_prec_t)bits : REFP, v, w, k, (mpfr_ptr)0);
    mpfr_set_flt(v, x, MPFR_RNDN);
    if (strcmp(type, "sigmoid") == 0) { /* 1 / (1 + e^-x) */
        mpfr_neg(w, v, MPFR_RNDN);
        mpfr_exp(w, w, MPFR_RNDN);
        mpfr_add_ui(w, w, 1, MPFR_RNDN);
        mpfr_ui_div(v, 1, w, MPFR_RNDN);
    } else if (strcmp(type, "tanh") == 0) {
        mpfr_tanh(v, v, MPFR_RNDN);
    } else if (strcmp(type, "hardsigmoid") == 0) { /* clip(x/6 + 1/2, 0, 1) */
        mpfr_div_ui(v, v, 6, MPFR_RNDN);
        mpfr_set_d(w, 0.5, MPFR_RNDN);
        mpfr_add(v, v, w, MPFR_RNDN);
        mpfr_set_ui(w, 0, MPFR_RNDN);
        mpfr_max(v, v, w, MPFR_RNDN);
        mpfr_set_ui(w, 1, MPFR_RNDN);
        mpfr_min(v, v, w, MPFR_RNDN);
    } else if (strcmp(type, "gelu approximate=none") == 0) { /* x/2 (1 + erf(x / sqrt 2)) */
        mpfr_sqrt_ui(w, 2, MPFR_RNDN);
        mpfr_div(w, v, w, MPFR_RNDN);
        mpfr_erf(w, w, MPFR_RNDN);
        mpfr_add_ui(w, w, 1, MPFR_RNDN);
        mpfr_mul(v, v, w, MPFR_RNDN);
        mpfr_div_ui(v, v, 2, MPFR_RNDN);
    } else { /* x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
        mpfr_pow_ui(w, v, 3, MPFR_RNDN);
        mpfr_set_str(k, "0.044715", 10, MPFR_RNDN);
        mpfr_mul(w, w, k, MPFR_RNDN);
        mpfr_add(w, w, v, MPFR_RNDN);
        mpfr_const_pi(k, MPFR_RNDN);
        mpfr_ui_div(k, 2, k, MPFR_RNDN);
        mpfr_sqrt(k, k, MPFR_RNDN);
        mpfr_mul(w, w, k, MPFR_RNDN);
        mpfr_tanh(w, w, MPFR_RNDN);
        mpfr_add_ui(w, w, 1, MPFR_RNDN);
        mpfr_mul(v, v, w, MPFR_RNDN);
        mpfr_div_ui(v, v, 2, MPFR_RNDN);
    }
    float r = ref32(v);
    mpfr_clears(v, w, k, (mpfr_ptr)0);
    return r;
}

/* ---- optimizers: hyperparameters, references, float32 forms ------------------- */

struct hp {
    double lr, mu, damp, wd, b1, b2, eps;
    int nesterov, maximize, first, adamw, amsgrad, gpu;
    unsigned long t;
};

static void hp_spec(const struct hp *h, int adam, char *s, size_t n)
{
    if (adam)
        snprintf(s, n,
                 "%s lr=%.17g beta1=%.17g beta2=%.17g eps=%.17g weight_decay=%.17g amsgrad=%d "
                 "maximize=%d step=%lu gpu=%d",
                 h->adamw ? "adamw" : "adam", h->lr, h->b1, h->b2, h->eps, h->wd, h->amsgrad,
                 h->maximize, h->t, h->gpu);
    else
        snprintf(s, n,
                 "sgd lr=%.17g momentum=%.17g dampening=%.17g nesterov=%d weight_decay=%.17g "
                 "maximize=%d first=%d",
                 h->lr, h->mu, h->damp, h->nesterov, h->wd, h->maximize, h->first);
}

/* SGD at REFP bits: exact (every operation checked exact). o: param, buffer. */
static void ref_sgd(const struct hp *h, float p, float g, float buf, float o[2])
{
    mpfr_t P, d, b, s;
    mpfr_inits2(REFP * 4, P, d, b, s, (mpfr_ptr)0);
    int x = mpfr_set_flt(P, p, MPFR_RNDN) | mpfr_set_flt(d, g, MPFR_RNDN);
    if (h->maximize)
        mpfr_neg(d, d, MPFR_RNDN);
    mpfr_set_d(s, h->wd, MPFR_RNDN);
    x |= mpfr_mul(s, s, P, MPFR_RNDN) | mpfr_add(d, d, s, MPFR_RNDN);
    mpfr_set_flt(b, buf, MPFR_RNDN);
    if (h->first) {
        mpfr_set(b, d, MPFR_RNDN);
    } else {
        mpfr_set_d(s, h->damp, MPFR_RNDN);
        x |= mpfr_ui_sub(s, 1, s, MPFR_RNDN) | mpfr_mul(s, s, d, MPFR_RNDN);
        x |= mpfr_mul_d(b, b, h->mu, MPFR_RNDN) | mpfr_add(b, b, s, MPFR_RNDN);
    }
    if (h->mu != 0) {
        if (h->nesterov)
            x |= mpfr_mul_d(s, b, h->mu, MPFR_RNDN) | mpfr_add(d, d, s, MPFR_RNDN);
        else
            mpfr_set(d, b, MPFR_RNDN);
    }
    x |= mpfr_mul_d(d, d, h->lr, MPFR_RNDN) | mpfr_sub(P, P, d, MPFR_RNDN);
    assert_int_equal(x, 0);
    o[0] = ref32(P);
    o[1] = ref32(b);
    mpfr_clears(P, d, b, s, (mpfr_ptr)0);
}

/* Adam at REFP bits: m, v, vm exact, out = p' - lr m / (c1 (sqrt(vm / c2) +
 * eps)) from c_k = 1 - b_k^t (exact for t < 70) and one sqrt. o: out, m, v, vm. */
static void ref_adam(const struct hp *h, const float in[5], float o[4])
{
    mpfr_t p, g, m, v, vm, s, c1, c2;
    mpfr_inits2(REFP, p, g, m, v, vm, s, c1, c2, (mpfr_ptr)0);
    mpfr_set_flt(p, in[0], MPFR_RNDN);
    mpfr_set_flt(g, h->maximize ? -in[1] : in[1], MPFR_RNDN);
    mpfr_set_flt(m, in[2], MPFR_RNDN);
    mpfr_set_flt(v, in[3], MPFR_RNDN);
    if (!h->adamw) { /* g += wd p */
        mpfr_mul_d(s, p, h->wd, MPFR_RNDN);
        mpfr_add(g, g, s, MPFR_RNDN);
    } else { /* p *= 1 - lr wd */
        mpfr_set_d(s, h->lr, MPFR_RNDN);
        mpfr_mul_d(s, s, h->wd, MPFR_RNDN);
        mpfr_ui_sub(s, 1, s, MPFR_RNDN);
        mpfr_mul(p, p, s, MPFR_RNDN);
    }
    mpfr_mul_d(m, m, h->b1, MPFR_RNDN); /* m = b1 m + (1 - b1) g */
    mpfr_set_d(s, h->b1, MPFR_RNDN);
    mpfr_ui_sub(s, 1, s, MPFR_RNDN);
    mpfr_fma(m, s, g, m, MPFR_RNDN);
    mpfr_mul_d(v, v, h->b2, MPFR_RNDN); /* v = b2 v + (1 - b2) g^2 */
    mpfr_set_d(s, h->b2, MPFR_RNDN);
    mpfr_ui_sub(s, 1, s, MPFR_RNDN);
    mpfr_mul(s, s, g, MPFR_RNDN);
    mpfr_fma(v, s, g, v, MPFR_RNDN);
    mpfr_set_flt(vm, in[4], MPFR_RNDN);
    if (h->amsgrad && mpfr_nan_p(v))
        mpfr_set_nan(vm); /* torch.maximum propagates NaN */
    else if (h->amsgrad)
        mpfr_max(vm, vm, v, MPFR_RNDN);
    else
        mpfr_set(vm, v, MPFR_RNDN);
    for (int k = 0; k < 2; k++) {
        mpfr_ptr c = k ? c2 : c1;
        mpfr_set_d(c, k ? h->b2 : h->b1, MPFR_RNDN);
        mpfr_pow_ui(c, c, h->t, MPFR_RNDN);
        mpfr_ui_sub(c, 1, c, MPFR_RNDN);
    }
    o[1] = ref32(m);
    o[2] = ref32(v);
    o[3] = ref32(vm);
    mpfr_div(s, vm, c2, MPFR_RNDN);
    mpfr_sqrt(s, s, MPFR_RNDN);
    mpfr_add_d(s, s, h->eps, MPFR_RNDN);
    mpfr_mul(s, s, c1, MPFR_RNDN);
    mpfr_mul_d(m, m, h->lr, MPFR_RNDN);
    mpfr_div(m, m, s, MPFR_RNDN);
    mpfr_sub(p, p, m, MPFR_RNDN);
    o[0] = ref32(p);
    mpfr_clears(p, g, m, v, vm, s, c1, c2, (mpfr_ptr)0);
}

/* Adam's forms in float32 (o: out, m, v, vm). form 0: PyTorch's
 * single-tensor and foreach (Scalars as float, ATen's lerp and addcmul
 * with FMA, bias corrections in double, addcdiv as (s m) / d); 1: fused
 * with double hyperparameters (m and v in double, then float); 2:
 * capturable (b^t by powf of float32 betas, the step folded into the
 * denominator); 3: op.h's order without FMA; 4: the corrections folded into
 * the step (eps scaled). A bug: 10 no bias correction, 11 eps inside the
 * sqrt, 12 AdamW's decay in Adam, 13 beta2 = 0.99 whatever the spec. */
static void adam_form(const struct hp *h, int form, const float in[5], float o[4])
{
    float p = in[0], g = h->maximize ? -in[1] : in[1], m = in[2], v = in[3];
    double t = (double)h->t, b2 = form == 13 ? 0.99 : h->b2;
    double bc1 = 1 - pow(h->b1, t), bc2 = 1 - pow(b2, t);
    if (form == 12 && h->wd != 0)
        p = (float)((double)p * (1 - h->lr * h->wd));
    else if (h->wd != 0 && !h->adamw)
        g = fmaf(p, (float)h->wd, g);
    else if (h->wd != 0)
        p = p * (float)(1 - h->lr * h->wd);
    if (form == 1 || form >= 10) {
        m = (float)(h->b1 * m + (1 - h->b1) * g);
        v = (float)(b2 * v + (1 - b2) * (double)g * g);
    } else if (form == 3) {
        m = (float)h->b1 * m + (float)(1 - h->b1) * g;
        v = (float)h->b2 * v + (float)(1 - h->b2) * g * g;
    } else {
        float w = (float)(1 - h->b1);
        m = fabsf(w) < 0.5f ? fmaf(w, g - m, m) : fmaf(w - 1.0f, g - m, g);
        v = fmaf((float)(1 - h->b2) * g, g, v * (float)h->b2);
    }
    float vm = h->amsgrad && !isnan(v) ? fmaxf(in[4], v) : v, y; /* torch.maximum: NaN wins */
    if (form >= 10) { /* the bugs: in double, rounded once */
        double vd = vm, md = m;
        double yd = form == 10   ? h->lr * md / (sqrt(vd) + h->eps)
                    : form == 11 ? h->lr / bc1 * md / sqrt(vd / bc2 + h->eps)
                                 : h->lr / bc1 * md / (sqrt(vd / bc2) + h->eps);
        o[0] = (float)((double)p - yd);
    } else {
        float c1 = 1.0f - powf((float)h->b1, (float)t), c2 = 1.0f - powf((float)h->b2, (float)t);
        float s = 1.0f / (c1 / (float)h->lr), sc = (float)sqrt(bc2), e = (float)h->eps;
        if (form == 2)
            y = m / ((sqrtf(vm) / sqrtf(c2) + e) / s);
        else if (form == 3)
            y = ((float)h->lr * (m / (float)bc1)) / (sqrtf(vm / (float)bc2) + e);
        else if (form == 4)
            y = ((float)h->lr * sc / (float)bc1) * (m / (sqrtf(vm) + e * sc));
        else
            y = -(((float)(-h->lr / bc1) * m) / (sqrtf(vm) / sc + e));
        o[0] = p - y;
    }
    o[1] = m;
    o[2] = v;
    o[3] = vm;
}

/* SGD's forms in float32 (o: param, buffer): 0 PyTorch's (alpha ops by
 * FMA, Scalars as float); 1 no FMA; 2 fused CPU's (grad * -lr then add,
 * its tail in double). Bugs: 10 momentum not applied, 11 nesterov
 * ignored, 12 dampening ignored, 13 maximize ignored. */
static void sgd_form(const struct hp *h, int form, float p, float g, float buf, float o[2])
{
    int maxi = h->maximize && form != 13;
    float d = maxi ? -g : g, b = buf;
    if (h->wd != 0)
        d = form == 1 ? d + (float)h->wd * p : fmaf(p, (float)h->wd, d);
    if (h->mu != 0 && form != 10) {
        float a = form == 12 ? 1.0f : (float)(1 - h->damp);
        if (h->first)
            b = d;
        else
            b = form == 1 ? b * (float)h->mu + a * d : fmaf(a, d, b * (float)h->mu);
        if (h->nesterov && form != 11)
            d = form == 1 ? d + (float)h->mu * b : fmaf(b, (float)h->mu, d);
        else
            d = b;
    }
    if (form == 2)
        o[0] = (float)((double)p + (double)d * -h->lr);
    else
        o[0] = form == 1 ? p + (float)-h->lr * d : fmaf(d, (float)-h->lr, p);
    o[1] = b;
}

static float rand_in(double lo, double hi) { return (float)tu_rand_uniform(&rng, lo, hi); }

/* A float of random sign, significand and exponent in [emin, emax]. */
static float rand_wide(int emin, int emax)
{
    uint64_t r = tu_rand_u64(&rng);
    int e = emin + (int)((r >> 24) % (uint64_t)(emax - emin + 1));
    double f = ldexp(1.0 + (double)(r & 0xffffff) / 0x1p24, e);
    return (float)((r >> 60) & 1 ? -f : f);
}

/* ---- tests ------------------------------------------------------------------------ */

static void check_exact(const char *spec, const float *x, const float *want, size_t n)
{
    struct tc c = {0};
    struct modcheck_result res;
    tc_add(&c, "in.0", x, n);
    tc_add(&c, "out", want, n);
    tc_run_ok(spec, &c, &res);
    const struct modcheck_output *o = tc_out(&res, "out");
    for (size_t i = 0; i < n; i++)
        if (!same(o->exact[i], want[i]))
            fail_msg("%s at %a: exact %a, want %a", spec, (double)x[i], (double)o->exact[i], (double)want[i]);
    modcheck_result_free(&res);
}

static void test_hand_values(void **state)
{
    (void)state;
    const float xr[] = {-1, 0, 2.5f, NAN, -INFINITY, INFINITY, -0x1p-149f};
    const float yr[] = {0, 0, 2.5f, NAN, 0, INFINITY, 0};
    check_exact("relu", xr, yr, 7);
    const float xh[] = {0, 1.5f, -3, 3, -4, 4, 0.75f, -1.5f};
    const float yh[] = {0.5f, 0.75f, 0, 1, 0, 1, 0.625f, 0.25f};
    check_exact("hardsigmoid", xh, yh, 8);
    const float x0[] = {0}, half[] = {0.5f}, zero[] = {0};
    check_exact("sigmoid", x0, half, 1);
    check_exact("tanh", x0, zero, 1);
    check_exact("gelu approximate=none", x0, zero, 1);
    check_exact("gelu approximate=tanh", x0, zero, 1);
    /* Phi(1) = 0.841344746068542948585..., gelu(-1) = -(1 - Phi(1)) */
    const float xg[] = {1, -1}, yg[] = {0.84134474606854295f, -0.15865525393145705f};
    check_exact("gelu approximate=none", xg, yg, 2);

    /* sgd, exact binary fractions: buf' = 0.5 0.25 + 0.5 0.5 = 0.375,
     * out = 1 - 0.125 0.375; nesterov: d = 0.5 + 0.5 0.375 */
    struct {
        const char *spec;
        float buf, out, bout;
    } sg[] = {
        {"sgd lr=0.125 momentum=0.5 dampening=0.5", 0.25f, 0.953125f, 0.375f},
        {"sgd lr=0.125 momentum=0.5 dampening=0.5 nesterov=1", 0.25f, 0.9140625f, 0.375f},
        {"sgd lr=0.125 momentum=0.5 dampening=0.5 weight_decay=0.25", 0.25f, 0.9375f, 0.5f},
        {"sgd lr=0.125 momentum=0.5 dampening=0.5 maximize=1", 0.25f, 1.015625f, -0.125f},
        {"sgd lr=0.125 momentum=0.5 dampening=0.5 first=1", 0.25f, 0.9375f, 0.5f},
        /* 1 - 0.1000000000000000055511 = 0.89999999999999999444: nearer 0x1.ccccccp-1 */
        {"sgd lr=0.1", 0, 0x1.ccccccp-1f, 0},
        /* FLT_MAX + 2^103: the midpoint to 2^128, ties to even overflow; + 2^102 does not */
        {"sgd lr=10141204801825835211973625643008", 0, INFINITY, 0},
        {"sgd lr=5070602400912917605986812821504", 0, FLT_MAX, 0},
    };
    for (size_t k = 0; k < sizeof sg / sizeof sg[0]; k++) {
        const float p[] = {k > 5 ? FLT_MAX : 1}, g[] = {k > 5 ? -1.0f : k == 5 ? 1.0f : 0.5f};
        const float b[] = {sg[k].buf}, dummy[] = {0};
        struct tc c = {0};
        struct modcheck_result res;
        tc_add(&c, "param", p, 1);
        tc_add(&c, "grad", g, 1);
        tc_add(&c, "state.momentum_buffer", b, 1);
        tc_add(&c, "out", dummy, 1);
        tc_add(&c, "state_out.momentum_buffer", dummy, 1);
        tc_run_ok(sg[k].spec, &c, &res);
        assert_true(same(tc_out(&res, "out")->exact[0], sg[k].out));
        if (k < 5)
            assert_true(same(tc_out(&res, "state_out.momentum_buffer")->exact[0], sg[k].bout));
        modcheck_result_free(&res);
    }

    /* adam, b1 = 0.5, b2 = 0.75: step 1 from zeros, g = 0.5: m = 0.25, v =
     * 0.0625, m / c1 = 0.5, v / c2 = 0.25, Y = lr 0.5 / (0.5 + eps). Step 2
     * from there: m = 0.375, v = 0.109375, c1 = 0.75, c2 = 0.4375: the same
     * m / c1, v / c2. adamw: p (1 - lr wd) first; adam: g + wd p. The last
     * two are exact midpoints of float32 (1 - 2^-25, 1 - 3 2^-25): ties to
     * even, reached by the exact rational path. */
    struct {
        const char *spec;
        float m, v, out;
    } ad[] = {
        {"adam lr=0.125 beta1=0.5 beta2=0.75 eps=0 step=1", 0, 0, 0.875f},
        {"adam lr=0.125 beta1=0.5 beta2=0.75 eps=0.5 step=1", 0, 0, 0.9375f},
        {"adam lr=0.125 beta1=0.5 beta2=0.75 eps=0 step=2", 0.25f, 0.0625f, 0.875f},
        {"adamw lr=0.125 beta1=0.5 beta2=0.75 eps=0 weight_decay=0.5 step=1", 0, 0, 0.8125f},
        {"adam lr=0.125 beta1=0.5 beta2=0.75 eps=0 weight_decay=0.5 step=1", 0, 0, 0.875f},
        {"adam lr=2.98023223876953125e-08 beta1=0.5 beta2=0.75 eps=0 step=1", 0, 0, 1.0f},
        {"adam lr=8.94069671630859375e-08 beta1=0.5 beta2=0.75 eps=0 step=1", 0, 0, 0x1.fffffcp-1f},
    };
    for (size_t k = 0; k < sizeof ad / sizeof ad[0]; k++) {
        const float p[] = {1}, g[] = {0.5f}, m[] = {ad[k].m}, v[] = {ad[k].v}, dummy[] = {0};
        struct tc c = {0};
        struct modcheck_result res;
        tc_add(&c, "param", p, 1);
        tc_add(&c, "grad", g, 1);
        tc_add(&c, "state.exp_avg", m, 1);
        tc_add(&c, "state.exp_avg_sq", v, 1);
        tc_add(&c, "out", dummy, 1);
        tc_run_ok(ad[k].spec, &c, &res);
        if (!same(tc_out(&res, "out")->exact[0], ad[k].out))
            fail_msg("%s: %a, want %a", ad[k].spec, (double)tc_out(&res, "out")->exact[0], (double)ad[k].out);
        modcheck_result_free(&res);
    }
}

static const char *unary_types[] = {"relu", "sigmoid", "tanh", "hardsigmoid", "gelu approximate=none",
                                    "gelu approximate=tanh"};

/* Inputs over every range that matters: uniform, wide exponents,
 * subnormals, near +-3, large negative, and the special values. */
static float *unary_inputs(size_t *n)
{
    static const float sp[] = {0, -0.0f, INFINITY, -INFINITY, NAN, 0x1p-149f, -0x1p-149f, 3, -3,
                               0x1.fffffep1f, -0x1.fffffep1f, 0x1.000002p1f, -0x1.000002p1f, FLT_MAX,
                               -FLT_MAX, 6, -16, 20, -20, 10, -110, 1e-30f, -1e-30f};
    size_t m = 3000, k = 0, ns = sizeof sp / sizeof sp[0];
    float *x = malloc((m + ns) * sizeof *x);
    for (; k < ns; k++)
        x[k] = sp[k];
    for (; k < ns + m; k++) {
        switch (k % 6) {
        case 0: x[k] = rand_in(-8, 8); break;
        case 1: x[k] = rand_wide(-30, 10); break;
        case 2: x[k] = rand_wide(-149, -120); break;
        case 3: x[k] = rand_in(-3.001, -2.999) * (k % 12 < 6 ? 1 : -1); break;
        case 4: x[k] = rand_in(-45, -3); break;
        default: x[k] = rand_wide(-10, 127); break;
        }
    }
    *n = k;
    return x;
}

static void test_unary_reference(void **state)
{
    (void)state;
    size_t n;
    float *x = unary_inputs(&n), *got = calloc(n, sizeof *got);
    for (size_t k = 0; k < sizeof unary_types / sizeof unary_types[0]; k++) {
        struct tc c = {0};
        struct modcheck_result res;
        tc_add(&c, "in.0", x, n);
        tc_add(&c, "out", got, n);
        tc_run_ok(unary_types[k], &c, &res);
        const struct modcheck_output *o = tc_out(&res, "out");
        for (size_t i = 0; i < n; i++) {
            float want = ref_unary(unary_types[k], x[i]);
            if (!same(o->exact[i], want))
                fail_msg("%s at %a: exact %a, reference %a", unary_types[k], (double)x[i],
                         (double)o->exact[i], (double)want);
            int relu = k == 0, huge = fabsf(x[i]) >= 1e12f; /* gelu: x (1 + erf), x^3 may overflow */
            if (!(o->bound[i] >= 0) || (relu && o->bound[i] != 0) ||
                (!relu && !isfinite(x[i]) && o->bound[i] < INFINITY) ||
                (isfinite(x[i]) && !huge && o->bound[i] == INFINITY))
                fail_msg("%s at %a: bound %g", unary_types[k], (double)x[i], o->bound[i]);
        }
        modcheck_result_free(&res);
    }
    free(x);
    free(got);
}

/* An erf by Abramowitz and Stegun 7.1.26 in float32 (absolute error 1.5e-7
 * in exact arithmetic, a little more here), as vectorized libraries do. */
static float as_erf(float x)
{
    float ax = fabsf(x), t = 1.0f / fmaf(0.3275911f, ax, 1.0f);
    float r = fmaf(fmaf(fmaf(fmaf(1.061405429f, t, -1.453152027f), t, 1.421413741f), t, -0.284496736f),
                   t, 0.254829592f);
    float y = fmaf(-(expf(-ax * ax) * t), r, 1.0f);
    return copysignf(y, x);
}

static float sig_a(float x) { return 1.0f / (1.0f + expf(-x)); }
static float sig_b(float x) { return x < 0 ? expf(x) / (1.0f + expf(x)) : sig_a(x); }
static float sig_c(float x) { return fmaf(0.5f, tanhf(0.5f * x), 0.5f); }

/* The admissible float32 forms of each module (form < 0: none left). */
static float unary_form(int k, int form, float x)
{
    const float r2 = 0.70710678118654752f, beta = 0.79788456080286536f, kap = 0.044715f;
    float in;
    switch (k) {
    case 1: return form == 0 ? sig_a(x) : form == 1 ? sig_b(x) : form == 2 ? sig_c(x) : NAN;
    case 2:
        return form == 0 ? tanhf(x) : form == 1 ? 2.0f * sig_a(2.0f * x) - 1.0f
               : form == 2 ? copysignf(-expm1f(-2 * fabsf(x)) / (2.0f + expm1f(-2 * fabsf(x))), x) : NAN;
    case 3:
        if (form == 0)
            return fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f;
        if (form == 1)
            return fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f);
        return form == 2 ? fminf(fmaxf(fmaf(x, 1.0f / 6.0f, 0.5f), 0.0f), 1.0f) : NAN;
    case 4:
        if (form == 0)
            return x * 0.5f * (1.0f + erff(x * r2));
        if (form == 1)
            return x * 0.5f * (1.0f + as_erf(x * r2));
        if (form == 2) /* an erf near the edge of the tolerance */
            return x * 0.5f * (1.0f + (erff(x * r2) - 8e-7f * (x > 0 ? 1 : -1) * (fabsf(x) < 9)));
        return form == 3 ? 0.5f * x * erfcf(-x * r2) : NAN;
    case 5:
        in = beta * (x + kap * (x * x * x));
        if (form == 0)
            return 0.5f * x * (1.0f + tanhf(in));
        if (form == 1)
            return x * sig_a(2.0f * in);
        return form == 2 ? 0.5f * x * (1.0f + tanhf(beta * x * fmaf(kap * x, x, 1.0f))) : NAN;
    }
    return NAN;
}

static void test_unary_forms(void **state)
{
    (void)state;
    size_t n;
    float *x = unary_inputs(&n), *got = calloc(n, sizeof *got);
    for (size_t k = 1; k < sizeof unary_types / sizeof unary_types[0]; k++) {
        struct tc c = {0};
        struct modcheck_result res;
        tc_add(&c, "in.0", x, n);
        tc_add(&c, "out", got, n);
        tc_run_ok(unary_types[k], &c, &res);
        const struct modcheck_output *o = tc_out(&res, "out");
        for (int form = 0; !isnan(unary_form((int)k, form, 1.0f)); form++) {
            for (size_t i = 0; i < n; i++)
                got[i] = unary_form((int)k, form, x[i]);
            for (size_t i = 0; i < n; i++) /* non-finite inputs: no claim but NaN, beyond ours */
                if (!isfinite(x[i]))
                    got[i] = o->exact[i];
            double r = ratio_of(o, got);
            char what[96];
            snprintf(what, sizeof what, "%s, form %d", unary_types[k], form);
            report(what, r);
            if (!(r <= 1))
                fail_msg("%s: ratio %g", what, r);
        }
        modcheck_result_free(&res);
    }
    free(x);
    free(got);
}

/* Wrong modules where the spec says otherwise: beyond the bound. */
static void test_unary_bugs(void **state)
{
    (void)state;
    enum { N = 200 };
    float x[N], got[N];
    struct {
        const char *spec;
        int k, form; /* unary_form's module and form, or -1: Keras's hard sigmoid */
        double lo, hi;
    } bug[] = {
        {"gelu approximate=none", 5, 0, 0.5, 3},   /* the tanh form */
        {"gelu approximate=none", 5, 0, -3, -0.5},
        {"gelu approximate=tanh", 4, 0, 1, 3},     /* the erf form */
        {"hardsigmoid", -1, 0, -2.5, 2.5},         /* 0.2 x + 0.5 */
    };
    for (size_t b = 0; b < sizeof bug / sizeof bug[0]; b++) {
        for (int i = 0; i < N; i++) {
            x[i] = rand_in(bug[b].lo, bug[b].hi);
            got[i] = bug[b].k < 0 ? fminf(fmaxf(0.2f * x[i] + 0.5f, 0), 1)
                                  : unary_form(bug[b].k, bug[b].form, x[i]);
        }
        struct tc c = {0};
        struct modcheck_result res;
        tc_add(&c, "in.0", x, N);
        tc_add(&c, "out", got, N);
        tc_run_ok(bug[b].spec, &c, &res);
        double r = ratio_of(tc_out(&res, "out"), got);
        report(bug[b].spec, r);
        if (!(r > 1))
            fail_msg("planted bug %zu under %s not SEMANTIC: ratio %g", b, bug[b].spec, r);
        modcheck_result_free(&res);
    }
}

/* Random hyperparameters of each optimizer (k picks the features). */
static void hp_random(struct hp *h, int adam, unsigned k)
{
    static const double lrs[] = {1e-3, 0.1, 0.05, 3e-4, 0.5};
    memset(h, 0, sizeof *h);
    h->lr = lrs[k % 5];
    h->maximize = (k >> 1) & 1;
    h->wd = (k >> 2) & 1 ? (k % 3 ? 1e-2 : 0.3) : 0;
    if (adam) {
        static const double b1s[] = {0.9, 0.5, 0, 0.99, 0.3}, b2s[] = {0.999, 0.9, 0.5, 0.9999, 0.99};
        static const double eps[] = {1e-8, 1e-3, 0, 1e-6};
        static const unsigned long ts[] = {1, 2, 3, 10, 1000, 5, 40};
        h->b1 = b1s[(k / 3) % 5];
        h->b2 = b2s[(k / 7) % 5];
        h->eps = eps[(k / 5) % 4];
        h->t = ts[(k / 2) % 7];
        h->adamw = (k >> 3) & 1;
        h->amsgrad = (k >> 4) & 1;
    } else {
        h->mu = (k >> 3) & 1 ? 0 : 0.9;
        h->damp = (k >> 4) & 1 ? 0.1 : 0;
        h->nesterov = h->damp == 0 && h->mu != 0 && (k >> 5) & 1;
        h->first = h->mu != 0 && k % 7 == 0;
    }
}

/* One optimizer check on n random elements: exact values against the
 * reference, each form (bugs included) against the bounds. */
static void opt_case(int adam, const struct hp *h, size_t n, const int *forms, int nforms, int want_bug)
{
    float *in[5], *got[5];
    for (int j = 0; j < 5; j++) {
        in[j] = malloc(n * sizeof(float));
        got[j] = malloc(n * sizeof(float));
    }
    for (size_t i = 0; i < n; i++) {
        in[0][i] = i % 50 == 7 ? rand_wide(-149, -127) : rand_in(-2, 2);
        in[1][i] = i % 40 == 3 ? 0 : rand_in(-0.5, 0.5) * (i % 3 ? 1 : 0.01f);
        in[2][i] = adam ? rand_in(-0.05, 0.05) * (h->t > 1) : rand_in(-0.3, 0.3);
        in[3][i] = adam ? rand_in(0, 0.02) * (h->t > 1) : 0;
        in[4][i] = h->amsgrad ? in[3][i] * rand_in(0.5, 1.5) : 0;
    }
    if (!want_bug)
        in[1][n - 1] = NAN;
    struct tc c = {0};
    tc_add(&c, "param", in[0], n);
    tc_add(&c, "grad", in[1], n);
    static const char *ar[] = {"out", "state_out.exp_avg", "state_out.exp_avg_sq", "state_out.max_exp_avg_sq"};
    static const char *sr[] = {"out", "state_out.momentum_buffer"};
    int nout = adam ? 3 + h->amsgrad : 1 + (h->mu != 0);
    if (adam) {
        tc_add(&c, "state.exp_avg", in[2], n);
        tc_add(&c, "state.exp_avg_sq", in[3], n);
        if (h->amsgrad)
            tc_add(&c, "state.max_exp_avg_sq", in[4], n);
    } else if (!h->first) {
        tc_add(&c, "state.momentum_buffer", in[2], n);
    }
    for (int j = 0; j < nout; j++)
        tc_add(&c, adam ? ar[j] : sr[j], got[j], n);
    char spec[400];
    hp_spec(h, adam, spec, sizeof spec);
    struct modcheck_result res;
    tc_run_ok(spec, &c, &res);
    assert_int_equal(res.nout, nout);
    for (size_t i = 0; i < n; i++) {
        float v[5] = {in[0][i], in[1][i], in[2][i], in[3][i], in[4][i]}, r[4];
        if (adam)
            ref_adam(h, v, r);
        else
            ref_sgd(h, v[0], v[1], v[2], r);
        for (int j = 0; j < nout; j++)
            if (!same(res.out[j].exact[i], r[j]))
                fail_msg("%s, %s at (%a %a %a %a): exact %a, reference %a", spec, res.out[j].role,
                         (double)v[0], (double)v[1], (double)v[2], (double)v[3],
                         (double)res.out[j].exact[i], (double)r[j]);
    }
    for (int f = 0; f < nforms; f++) {
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            float v[5] = {in[0][i], in[1][i], in[2][i], in[3][i], in[4][i]}, r[4];
            if (adam)
                adam_form(h, forms[f], v, r);
            else
                sgd_form(h, forms[f], v[0], v[1], v[2], r);
            for (int j = 0; j < nout; j++)
                got[j][i] = r[j];
        }
        for (int j = 0; j < nout; j++)
            worst = fmax(worst, ratio_of(&res.out[j], got[j]));
        char what[480];
        snprintf(what, sizeof what, "%s, form %d", spec, forms[f]);
        report(what, worst);
        if (want_bug ? !(worst > 1) : !(worst <= 1))
            fail_msg("%s: ratio %g", what, worst);
    }
    modcheck_result_free(&res);
    for (int j = 0; j < 5; j++) {
        free(in[j]);
        free(got[j]);
    }
}

static void test_sgd(void **state)
{
    (void)state;
    static const int forms[] = {0, 1, 2};
    struct hp h;
    for (unsigned k = 0; k < 48; k++) {
        hp_random(&h, 0, k);
        opt_case(0, &h, 300, forms, 3, 0);
    }
    static const struct hp bug[] = {/* planted bugs 10..13, where the spec has the feature */
                                    {.lr = 0.1, .mu = 0.9},
                                    {.lr = 0.1, .mu = 0.9, .nesterov = 1},
                                    {.lr = 0.1, .mu = 0.9, .damp = 0.5},
                                    {.lr = 0.1, .mu = 0.9, .maximize = 1}};
    for (int k = 0; k < 4; k++)
        opt_case(0, &bug[k], 200, (const int[]){10 + k}, 1, 1);
}

static void test_adam(void **state)
{
    (void)state;
    static const int forms[] = {0, 1, 3, 4, 2};
    struct hp h;
    for (unsigned k = 0; k < 64; k++) { /* capturable's float32 b^t (form 2) with gpu=1 */
        hp_random(&h, 1, k);
        h.gpu = k % 4 == 0;
        opt_case(1, &h, 200, forms, h.gpu ? 5 : 4, 0);
    }
#define ADAM_B .lr = 0.01, .b1 = 0.9, .b2 = 0.999
    static const struct hp bug[] = {/* planted bugs 10..13, at steps where they matter */
                                    {ADAM_B, .eps = 1e-8, .t = 3},
                                    {ADAM_B, .eps = 1e-3, .t = 1},
                                    {ADAM_B, .eps = 1e-8, .t = 3, .wd = 0.5},
                                    {ADAM_B, .eps = 1e-8, .t = 3}};
    for (int k = 0; k < 4; k++)
        opt_case(1, &bug[k], 200, (const int[]){10 + k}, 1, 1);
}

/* The moments where their terms cancel (m near -(1 - b1) g / b1): the
 * lerp's two branches (ATen takes g - (1 - w)(g - m) for w = 1 - b1 >=
 * 1/2) err most there, beyond b1 m + (1 - b1) g's own bound. */
static void test_adam_cancel(void **state)
{
    (void)state;
    enum { N = 4000 };
    static float in[4][N], got[3][N];
    static const double b1s[] = {0.5, 0.25, 0.9};
    for (size_t b = 0; b < sizeof b1s / sizeof b1s[0]; b++) {
        struct hp h = {.lr = 1e-3, .b1 = b1s[b], .b2 = 0.75, .eps = 1e-8, .t = 5};
        for (int i = 0; i < N; i++) {
            in[0][i] = rand_in(-1, 1);
            in[1][i] = rand_in(-1, 1);
            in[2][i] = (float)(-(1 - h.b1) / h.b1 * in[1][i] * (1 + rand_in(-0x1p-12, 0x1p-12)));
            in[3][i] = rand_in(0, 0.01);
        }
        struct tc c = {0};
        tc_add(&c, "param", in[0], N);
        tc_add(&c, "grad", in[1], N);
        tc_add(&c, "state.exp_avg", in[2], N);
        tc_add(&c, "state.exp_avg_sq", in[3], N);
        tc_add(&c, "out", got[0], N);
        tc_add(&c, "state_out.exp_avg", got[1], N);
        tc_add(&c, "state_out.exp_avg_sq", got[2], N);
        char spec[300];
        hp_spec(&h, 1, spec, sizeof spec);
        struct modcheck_result res;
        tc_run_ok(spec, &c, &res);
        for (int i = 0; i < N; i++) {
            float v[5] = {in[0][i], in[1][i], in[2][i], in[3][i], 0}, r[4];
            adam_form(&h, 0, v, r);
            for (int j = 0; j < 3; j++)
                got[j][i] = r[j];
        }
        double worst = fmax(ratio_of(tc_out(&res, "state_out.exp_avg"), got[1]),
                            ratio_of(tc_out(&res, "out"), got[0]));
        report(spec, worst);
        if (!(worst <= 1))
            fail_msg("%s at cancellation: ratio %g", spec, worst);
        modcheck_result_free(&res);
    }
}

/* Malformed specs and tensors: -1 with dt_error set. A role ending in
 * '~' is given 3 elements where the others have 4. */
static void test_malformed(void **state)
{
    (void)state;
    static const float a[4] = {1, 2, 3, 4};
#define ADAM_T "param", "grad", "state.exp_avg", "state.exp_avg_sq", "out"
    struct {
        const char *spec, *roles[6];
    } bad[] = {
        {"relu", {"in.0"}},
        {"sigmoid", {"in.0", "out~"}},
        {"gelu approximate=fast", {"in.0", "out"}},
        {"sgd momentum=0.9", {"param", "grad", "out"}},
        {"sgd lr=abc", {"param", "grad", "out"}},
        {"sgd lr=-1", {"param", "grad", "out"}},
        {"sgd lr=0.1 nesterov=2", {"param", "grad", "out"}},
        {"sgd lr=0.1 momentum=0.9 first=0", {"param", "grad", "out"}},
        {"sgd lr=0.1", {"param", "grad~", "out"}},
        {"sgd lr=0.1", {"param", "grad"}},
        {"adam lr=0.1 beta1=1 step=1", {ADAM_T}},
        {"adam lr=0.1 step=0", {ADAM_T}},
        {"adam lr=0.1 step=1.5", {ADAM_T}},
        {"adam lr=0.1", {ADAM_T}},
        {"adam lr=0.1 step=1 amsgrad=1", {ADAM_T}},
        {"adam lr=0.1 step=1", {"param", "grad", "state.exp_avg", "out"}},
        {"adamw lr=nan step=1", {ADAM_T}},
        {"adam lr=0.1 step=1", {"param", "grad", "state.exp_avg", "state.exp_avg_sq~", "out"}},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        struct tc c = {0};
        char role[6][48];
        for (int j = 0; j < 6 && bad[k].roles[j]; j++) {
            size_t l = strlen(bad[k].roles[j]);
            int shrt = bad[k].roles[j][l - 1] == '~';
            snprintf(role[j], sizeof role[j], "%.*s", (int)(l - (size_t)shrt), bad[k].roles[j]);
            tc_add(&c, role[j], a, shrt ? 3 : 4);
        }
        struct modcheck_result res;
        dt_error_set("%s", "");
        int rc = tc_run(bad[k].spec, &c, &res);
        if (rc != -1 || !dt_error()[0])
            fail_msg("'%s': rc %d, error '%s'", bad[k].spec, rc, dt_error());
    }
}

int main(void)
{
    const char *v = getenv("TEST_MODCHECK_VERBOSE");
    verbose = v && *v == '1';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_values),  cmocka_unit_test(test_unary_reference),
        cmocka_unit_test(test_unary_forms),  cmocka_unit_test(test_unary_bugs),
        cmocka_unit_test(test_sgd),          cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adam_cancel),
        cmocka_unit_test(test_malformed),
    };
    const char *only = getenv("TEST_ONLY");
    if (only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
