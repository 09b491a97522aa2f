/* oracle_round.c: oracle_op's MPFR path (the scheme: oracle_ops.c's opening
 * comment): rounding an exact value to binary32, the exact evaluation of the
 * rational ops and the Ziv loops for exp and tanh. The fast paths' rounding
 * of doubles is inline in oracle_ops_impl.h. */
#include "oracle_ops_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int ops_exact_only(void)
{
    const char *e = getenv("DIVTRACE_ORACLE_EXACT");
    return e && *e && strcmp(e, "0") != 0;
}

/* ---- MPFR: rounding to binary32 --------------------------------------------
 * Our own rounding (not the emin/subnormalize machinery, which the tests
 * use), on an exact MPFR value: quantum 2^max(E - 24, -149) for x in
 * [2^(E-1), 2^E), rint with ties to even, overflow from 2^128 on. */
float ops_mp_rn32(mpfr_srcptr x)
{
    if (mpfr_nan_p(x))
        return ops_nan();
    int neg = mpfr_signbit(x) != 0;
    if (mpfr_inf_p(x))
        return neg ? -INFINITY : INFINITY;
    if (mpfr_zero_p(x))
        return neg ? -0.0f : 0.0f;
    mpfr_exp_t E = mpfr_get_exp(x);
    if (E > 129)
        return neg ? -INFINITY : INFINITY;
    if (E < -160) /* |x| < 2^-160: below half the smallest subnormal */
        return neg ? -0.0f : 0.0f;
    long q = (long)E - 24 > -149 ? (long)E - 24 : -149;
    mpfr_t t, r;
    mpfr_init2(t, mpfr_get_prec(x));
    mpfr_init2(r, 32);
    mpfr_mul_2si(t, x, -q, MPFR_RNDN); /* exact */
    mpfr_rint(r, t, MPFR_RNDN);        /* nearest integer, ties to even: exact in 32 bits */
    double v = ldexp(mpfr_get_d(r, MPFR_RNDN), (int)q);
    mpfr_clear(t);
    mpfr_clear(r);
    if (fabs(v) >= 0x1p128)
        return neg ? -INFINITY : INFINITY;
    if (v == 0)
        return neg ? -0.0f : 0.0f;
    return (float)v; /* exact */
}

/* RN32 of y - 2^err_exp and of y + 2^err_exp (both computed exactly). */
void ops_mp_bracket(mpfr_srcptr y, mpfr_exp_t err_exp, float *fl, float *fh)
{
    mpfr_exp_t top = err_exp + 1, bot = err_exp;
    if (mpfr_regular_p(y)) {
        mpfr_exp_t ey = mpfr_get_exp(y), ly = ey - (mpfr_exp_t)mpfr_get_prec(y);
        top = ey > top ? ey : top;
        bot = ly < bot ? ly : bot;
    }
    mpfr_t lo, hi, e;
    mpfr_init2(lo, (mpfr_prec_t)(top - bot + 2));
    mpfr_init2(hi, (mpfr_prec_t)(top - bot + 2));
    mpfr_init2(e, 2);
    mpfr_set_ui_2exp(e, 1, err_exp, MPFR_RNDN);
    mpfr_sub(lo, y, e, MPFR_RNDN); /* exact */
    mpfr_add(hi, y, e, MPFR_RNDN);
    *fl = ops_mp_rn32(lo);
    *fh = ops_mp_rn32(hi);
    mpfr_clear(lo);
    mpfr_clear(hi);
    mpfr_clear(e);
}

/* RN32 of the exact value when |y - exact| <= 2^err_exp decides it: 1 and
 * *out set; 0 when some rounding boundary lies within the error. */
int ops_mp_decide(mpfr_srcptr y, mpfr_exp_t err_exp, float *out)
{
    float fl, fh;
    ops_mp_bracket(y, err_exp, &fl, &fh);
    uint32_t bl, bh;
    memcpy(&bl, &fl, sizeof bl);
    memcpy(&bh, &fh, sizeof bh);
    if (bl != bh)
        return 0;
    *out = fl;
    return 1;
}

/* ---- MPFR: exact evaluation of rational ops -------------------------------- */

/* RN32(N / n) for an exact N (n a positive integer): Ziv on the quotient. A
 * quotient that is not exact at some precision is not a dyadic number, so
 * no rounding boundary (a dyadic) equals it and the loop ends. */
float ops_mp_div_round(mpfr_srcptr num, double n)
{
    if (!mpfr_regular_p(num)) {
        mpfr_t q;
        mpfr_init2(q, 2);
        mpfr_div_d(q, num, n, MPFR_RNDN); /* 0, Inf or NaN: exact */
        float f = ops_mp_rn32(q);
        mpfr_clear(q);
        return f;
    }
    float out;
    for (mpfr_prec_t p = OPS_ZIV_START;; p *= 2) {
        mpfr_t q;
        mpfr_init2(q, p);
        int t = mpfr_div_d(q, num, n, MPFR_RNDN);
        int ok = t == 0 ? (out = ops_mp_rn32(q), 1)
                        : ops_mp_decide(q, mpfr_get_exp(q) - p, &out); /* half an ulp < 2^(E-p) */
        mpfr_clear(q);
        if (ok)
            return out;
    }
}

/* The MPFR path of the rational elementwise ops: v[] the element's inputs. */
float ops_mp_rational(const struct ops_par *pr, const float *v)
{
    mpfr_t r0, r1, r2;
    mpfr_inits2(OPS_EXACT_PREC, r0, r1, r2, (mpfr_ptr)0);
    float out;
    switch (pr->type) {
    case OP_ADD: /* a + b */
        mpfr_set_flt(r0, v[0], MPFR_RNDN);
        OPS_EXACT(mpfr_add_d(r0, r0, v[1], MPFR_RNDN));
        break;
    case OP_SIGMOID_BWD: /* dy y (1 - y); v = y, dy */
        mpfr_set_flt(r0, v[1], MPFR_RNDN);
        OPS_EXACT(mpfr_mul_d(r0, r0, v[0], MPFR_RNDN));
        mpfr_set_flt(r2, v[0], MPFR_RNDN);
        OPS_EXACT(mpfr_d_sub(r1, 1.0, r2, MPFR_RNDN));
        OPS_EXACT(mpfr_mul(r0, r0, r1, MPFR_RNDN));
        break;
    case OP_TANH_BWD: /* dy (1 - y y); v = y, dy */
        mpfr_set_flt(r1, v[0], MPFR_RNDN);
        OPS_EXACT(mpfr_mul(r1, r1, r1, MPFR_RNDN));
        OPS_EXACT(mpfr_d_sub(r1, 1.0, r1, MPFR_RNDN));
        mpfr_set_flt(r0, v[1], MPFR_RNDN);
        OPS_EXACT(mpfr_mul(r0, r0, r1, MPFR_RNDN));
        break;
    case OP_SGD: /* p - lr g */
        mpfr_set_flt(r1, pr->a, MPFR_RNDN);
        OPS_EXACT(mpfr_mul_d(r1, r1, v[1], MPFR_RNDN));
        mpfr_set_flt(r0, v[0], MPFR_RNDN);
        OPS_EXACT(mpfr_sub(r0, r0, r1, MPFR_RNDN));
        break;
    case OP_MOMENTUM: /* mu buf + g */
        mpfr_set_flt(r0, pr->a, MPFR_RNDN);
        OPS_EXACT(mpfr_mul_d(r0, r0, v[0], MPFR_RNDN));
        OPS_EXACT(mpfr_add_d(r0, r0, v[1], MPFR_RNDN));
        break;
    case OP_ADAM_M: /* b1 m + (1 - b1) g */
    case OP_ADAM_V: /* b2 v + (1 - b2) g g */
        mpfr_set_flt(r0, pr->a, MPFR_RNDN);
        OPS_EXACT(mpfr_mul_d(r0, r0, v[0], MPFR_RNDN));
        mpfr_set_flt(r2, pr->a, MPFR_RNDN);
        OPS_EXACT(mpfr_d_sub(r1, 1.0, r2, MPFR_RNDN));
        OPS_EXACT(mpfr_mul_d(r1, r1, v[1], MPFR_RNDN));
        if (pr->type == OP_ADAM_V)
            OPS_EXACT(mpfr_mul_d(r1, r1, v[1], MPFR_RNDN));
        OPS_EXACT(mpfr_add(r0, r0, r1, MPFR_RNDN));
        break;
    case OP_SUB: /* a - b */
        mpfr_set_flt(r0, v[0], MPFR_RNDN);
        OPS_EXACT(mpfr_sub_d(r0, r0, v[1], MPFR_RNDN));
        break;
    case OP_MUL: /* a b */
        mpfr_set_flt(r0, v[0], MPFR_RNDN);
        OPS_EXACT(mpfr_mul_d(r0, r0, v[1], MPFR_RNDN));
        break;
    case OP_MSE_BWD: /* (2 (p - t) / n) g, as (2 (p - t) g) / n: same value and sign */
        mpfr_set_flt(r0, v[0], MPFR_RNDN);
        OPS_EXACT(mpfr_sub_d(r0, r0, v[1], MPFR_RNDN));
        OPS_EXACT(mpfr_mul_2ui(r0, r0, 1, MPFR_RNDN));
        if (pr->has_g)
            OPS_EXACT(mpfr_mul_d(r0, r0, v[2], MPFR_RNDN));
        break;
    default:
        DT_ASSERT(0, "ops_mp_rational: op %s", op_type_name(pr->type));
    }
    out = pr->type == OP_MSE_BWD ? ops_mp_div_round(r0, pr->n) : ops_mp_rn32(r0);
    mpfr_clears(r0, r1, r2, (mpfr_ptr)0);
    return out;
}

/* ---- MPFR: Ziv loops for exp and tanh --------------------------------------
 * The inputs are exact in the working precision; each MPFR operation errs
 * by at most 2^-p relative (round to nearest), and the bound on the total
 * error below decides the rounding or doubles p. Why this ends, and why a
 * fixed 256 bits would already be safe in practice: exp(x) and tanh(x) are
 * transcendental for float x != 0 (Lindemann), so sigmoid and tanh are never
 * a float32 rounding boundary (a dyadic rational); how close they come is
 * the table maker's dilemma, and for binary32 arguments (2^32 of them) the
 * closest cases sit about 2^-(24 + 32 + a few) from a boundary, relative,
 * as heuristics and the exhaustive searches of Lefevre and Muller agree. At
 * 160 bits, the first precision here, a misrounding would need a value 2^-150
 * from a boundary: none exists; the loop makes even that a certainty. */

float ops_mp_sigmoid(float x)
{
    float out;
    for (mpfr_prec_t p = OPS_ZIV_START;; p *= 2) {
        mpfr_t s;
        mpfr_init2(s, p);
        mpfr_set_flt(s, -x, MPFR_RNDN);
        mpfr_exp(s, s, MPFR_RNDN);         /* E (1 + e1) */
        mpfr_add_ui(s, s, 1, MPFR_RNDN);   /* (1 + E)(1 + e1')(1 + e2), |e1'| <= |e1| */
        mpfr_ui_div(s, 1, s, MPFR_RNDN);   /* sigma (1 + e3) / ((1 + e1')(1 + e2)) */
        /* relative error < 4 2^-p, so absolute < 2^(EXP(s) + 3 - p) */
        int ok = ops_mp_decide(s, mpfr_get_exp(s) + 3 - p, &out);
        mpfr_clear(s);
        if (ok)
            return out;
    }
}

float ops_mp_tanh(float x)
{
    float out;
    for (mpfr_prec_t p = OPS_ZIV_START;; p *= 2) {
        mpfr_t s;
        mpfr_init2(s, p);
        mpfr_set_flt(s, x, MPFR_RNDN);
        mpfr_tanh(s, s, MPFR_RNDN); /* correctly rounded: error < 2^(EXP - p) */
        int ok = ops_mp_decide(s, mpfr_get_exp(s) - p, &out);
        mpfr_clear(s);
        if (ok)
            return out;
    }
}
