/* oracle_ops.c: oracle_op, the exact result of every op rounded once to
 * float32 (round to nearest even, binary32 subnormals, overflow to Inf).
 *
 * Every element has a certified fast path in double and an MPFR path. A
 * fast path either computes the exact value as an unevaluated sum of doubles
 * (TwoSum, TwoProd) and rounds that exactly, or computes an approximation a
 * with a proven bound E on |a - exact| and accepts RN32(a) only when every
 * real within 2E of a rounds to the same float (ops_cert32); otherwise, and
 * for NaN/Inf inputs, the element goes to the MPFR path. The MPFR path
 * evaluates the formula of op.h step by step: rational ops exactly (every
 * intermediate fits in OPS_EXACT_PREC bits, which is asserted) with one final
 * rounding; exp, tanh and sqrt in a Ziv loop (working precision doubled until
 * the error bound decides the rounding). Both paths give the same float for
 * every input; DIVTRACE_ORACLE_EXACT=1 sends every element to the MPFR path.
 *
 * Conventions, matching IEEE 754 applied step by step to the formula with
 * exact operations (which is what the MPFR path does): an exact zero takes
 * the sign IEEE gives (x - x = +0, -0 + -0 = -0, products xor the signs);
 * NaN results are the canonical quiet NaN 0x7fc00000; relu(NaN) = +0 and
 * relu_bwd(NaN, dy) = +0, as max(x, 0) and the cpu kernel give. The ops that
 * select or move elements (maxpool2 and its bwd, upsample2, concat, slice and
 * its bwd, neg, satlu and its bwd) copy them bit for bit, zeros' signs
 * included, NaN made canonical like every NaN here; their masks and ties
 * follow op.h (the first NaN or first maximum of a pool window, NaN x giving
 * +0 in satlu_bwd and hard_sigmoid_bwd). */
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle_conv.h"
#include "util.h"

#define OPS_U 0x1p-53               /* unit roundoff of double */
#define OPS_EXACT_PREC 2048         /* > any exact intermediate of a rational op (< 900 bits) */
#define OPS_ZIV_START 160           /* first working precision of a Ziv loop */
#define OPS_ZIV_CAP 8192            /* past this, look for an exact tie (adam_p) */

static float ops_nan(void)
{
    uint32_t b = 0x7fc00000u;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static float ops_canon(float f) { return isnan(f) ? ops_nan() : f; }

static int ops_exact_only(void)
{
    const char *e = getenv("DIVTRACE_ORACLE_EXACT");
    return e && *e && strcmp(e, "0") != 0;
}

/* ---- exact and certified rounding of doubles ------------------------------ */

/* s + e = a + b exactly, s = RN(a + b) (Knuth's TwoSum; no overflow). */
static double ops_two_sum(double a, double b, double *e)
{
    double s = a + b, bb = s - a;
    *e = (a - (s - bb)) + (b - bb);
    return s;
}

/* h + l = a b exactly, h = RN(a b) (exact when a b >= 2^-968, always here:
 * the products below are of floats and doubles built from them, >= 2^-500). */
static double ops_two_prod(double a, double b, double *l)
{
    double h = a * b;
    *l = fma(a, b, -h);
    return h;
}

/* RN32(hi + lo) exactly, for hi = RN64(hi + lo), |hi| < 2^1024, hi + lo not
 * in double's subnormal range. RN32(hi) is right unless hi itself is a
 * rounding boundary of float32 (a midpoint between two floats, which is a
 * double): no boundary can lie strictly between hi + lo and hi, which is the
 * double nearest to it. At a midpoint the sign of lo decides. */
static float ops_rn32_hl(double hi, double lo)
{
    float f = (float)hi;
    if (lo == 0)
        return f;
    double ah = fabs(hi);
    double half; /* half the float spacing at hi */
    if (ah >= 0x1p-126) {
        if (ah >= 0x1p128)
            return f;
        uint64_t b;
        memcpy(&b, &hi, sizeof b);
        if ((b & 0x1fffffffu) != 0x10000000u) /* the 29 bits below float's 23 */
            return f;
        int e;
        frexp(ah, &e);
        half = ldexp(1.0, e - 25); /* ah in [2^(e-1), 2^e): spacing 2^(e-24) */
    } else {
        double k = ah * 0x1p150; /* exact; odd integer iff a midpoint */
        if (k != floor(k) || fmod(k, 2.0) != 1.0)
            return f;
        half = 0x1p-150;
    }
    return (float)(lo > 0 ? hi + half : hi - half); /* the neighbour on lo's side: exact */
}

/* RN32 of every real within err of a, when they all round alike (bitwise,
 * so -0 and +0 differ): 1 and *out set. Precondition: err >= 2 |a - exact|
 * (finite). err is raised to 2^-51 |a|; then the endpoints, computed in
 * round-to-nearest with errors <= 2^-53 (|a| + err) < err / 2, still enclose
 * the exact value, and RN32 is monotonic. */
static int ops_cert32(double a, double err, float *out)
{
    if (isnan(a) || isnan(err) || isinf(err))
        return 0;
    double m = fabs(a) * 0x1p-51;
    if (!(err >= m))
        err = m;
    float lo = (float)(a - err), hi = (float)(a + err);
    uint32_t bl, bh;
    memcpy(&bl, &lo, sizeof bl);
    memcpy(&bh, &hi, sizeof bh);
    if (bl != bh)
        return 0;
    *out = lo;
    return 1;
}

/* RN32 of t[0] + ... + t[k-1] (exact doubles, k <= 4, exact sum nonzero):
 * a TwoSum cascade leaves s + sum e_i exact with |e_i| <= u |partial sum|;
 * r = fl(s + fl(sum e_i)) errs by <= u |r| + 4 u sum |e_i| (first order; the
 * factor 2 of ops_cert32 covers the rest). 0 when undecided. */
static int ops_sum32(const double *t, int k, float *out)
{
    double s = t[0], c = 0, ae = 0;
    for (int i = 1; i < k; i++) {
        double e;
        s = ops_two_sum(s, t[i], &e);
        c += e;
        ae += fabs(e);
    }
    double r = s + c;
    if (!isfinite(r))
        return 0;
    return ops_cert32(r, 2 * (OPS_U * fabs(r) + 4 * OPS_U * ae) * (1 + 0x1p-40), out);
}

/* ---- MPFR: rounding to binary32 --------------------------------------------
 * Our own rounding (not the emin/subnormalize machinery, which the tests
 * use), on an exact MPFR value: quantum 2^max(E - 24, -149) for x in
 * [2^(E-1), 2^E), rint with ties to even, overflow from 2^128 on. */
static float ops_mp_rn32(mpfr_srcptr x)
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
static void ops_mp_bracket(mpfr_srcptr y, mpfr_exp_t err_exp, float *fl, float *fh)
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
static int ops_mp_decide(mpfr_srcptr y, mpfr_exp_t err_exp, float *out)
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

/* Every operation of a rational op must be exact: a nonzero ternary value is
 * a precision too small for the inputs, an invariant of this file. */
#define OPS_EXACT(call) \
    do { int t_ = (call); DT_ASSERT(t_ == 0, "oracle: inexact MPFR step %s", #call); } while (0)

/* Parameters of an op that its elements share. */
struct ops_par {
    enum op_type type;
    double n;           /* mse_bwd: element count */
    int has_g;          /* mse_bwd: third input */
    float a, b;         /* sgd lr; momentum mu; adam b1 / b2 */
};

/* RN32(N / n) for an exact N (n a positive integer): Ziv on the quotient. A
 * quotient that is not exact at some precision is not a dyadic number, so
 * no rounding boundary (a dyadic) equals it and the loop ends. */
static float ops_mp_div_round(mpfr_srcptr num, double n)
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
static float ops_mp_rational(const struct ops_par *pr, const float *v)
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

static float ops_mp_sigmoid(float x)
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

static float ops_mp_tanh(float x)
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

/* ---- elementwise ops: fast paths ------------------------------------------- */

static float ops_add(float a, float b)
{
    double e, s = ops_two_sum(a, b, &e);
    if (!isfinite(s))
        return ops_canon((float)s); /* Inf or NaN inputs: IEEE's answer is exact */
    return ops_rn32_hl(s, e);
}

/* p + f1 f2 for floats (sgd: f1 = -lr; momentum: p = g, f1 = mu, f2 = buf). */
static float ops_axpy(float p, float f1, float f2)
{
    double t = (double)f1 * f2, e, s = ops_two_sum(p, t, &e); /* f1 f2 exact */
    if (!isfinite(s))
        return ops_canon((float)s);
    return ops_rn32_hl(s, e);
}

/* sigmoid(x) = 1 / (1 + e^-x). Beyond x > 17.5, e^-x < 2^-25.2, so sigma >
 * 1 - e^-x > 1 - 2^-25: rounds to 1. Below x < -104, sigma < e^x < 2^-150:
 * rounds to +0. In between, glibc's exp errs by < 1 ulp (documented in
 * libm-test-ulps; 0.51 ulp measured at every float argument of this range on
 * glibc 2.36); we allow 4 ulp (2^-50 relative): then 1 + e and 1 / d add
 * one rounding each and the total relative error is < 2^-50 + 2^-52 + 2^-53
 * + O(2^-100) < 2^-49, so err = 2^-48 |s| meets ops_cert32's factor 2. */
static float ops_sigmoid(float x, int slow)
{
    if (isnan(x))
        return ops_nan();
    if (x > 17.5f)
        return 1.0f;
    if (x < -104.0f)
        return 0.0f;
    float out;
    double s = 1.0 / (1.0 + exp(-(double)x));
    if (!slow && ops_cert32(s, 0x1p-48 * s, &out))
        return out;
    return ops_mp_sigmoid(x);
}

/* tanh(x). For |x| > 9.1, 1 - |tanh x| = 2 / (e^(2|x|) + 1) < 2^-25.2: rounds
 * to +-1. glibc's tanh errs by < 2 ulp (libm-test-ulps; 2.18 ulp measured
 * at every float argument of this range on glibc 2.36, at +-0x1.de6d28p-3);
 * we allow 8 ulp (2^-49 relative), so err = 2^-48 |t|. tanh(+-0) = +-0. */
static float ops_tanh(float x, int slow)
{
    if (isnan(x))
        return ops_nan();
    if (x == 0)
        return x;
    if (fabsf(x) > 9.1f)
        return x > 0 ? 1.0f : -1.0f;
    float out;
    double t = tanh((double)x);
    if (!slow && ops_cert32(t, 0x1p-48 * fabs(t), &out))
        return out;
    return ops_mp_tanh(x);
}

/* dy y (1 - y) = A - A y, A = dy y exact, A y = H + L (TwoProd). */
static float ops_sigmoid_bwd(const struct ops_par *pr, float y, float dy, int slow)
{
    float v[2] = {y, dy}, out;
    if (slow || !isfinite(y) || !isfinite(dy))
        return ops_canon(ops_mp_rational(pr, v));
    if (dy == 0 || y == 0 || y == 1) /* an exact zero: double has IEEE's sign */
        return (float)(((double)dy * y) * (1.0 - y));
    double a = (double)dy * y, l, h = ops_two_prod(a, y, &l);
    double t[3] = {a, -h, -l};
    if (ops_sum32(t, 3, &out))
        return out;
    return ops_mp_rational(pr, v);
}

/* dy (1 - y y) = dy - dy Y, Y = y y exact, dy Y = H + L. */
static float ops_tanh_bwd(const struct ops_par *pr, float y, float dy, int slow)
{
    float v[2] = {y, dy}, out;
    if (slow || !isfinite(y) || !isfinite(dy))
        return ops_canon(ops_mp_rational(pr, v));
    double yy = (double)y * y;
    if (dy == 0 || yy == 1)
        return (float)(dy * (1.0 - yy));
    double l, h = ops_two_prod(dy, yy, &l);
    double t[3] = {dy, -h, -l};
    if (ops_sum32(t, 3, &out))
        return out;
    return ops_mp_rational(pr, v);
}

/* b m + (1 - b) g = b m + g - b g (adam_m), b v + (1 - b) g g = b v + G - b G
 * with G = g g exact and b G = H + L (adam_v). */
static float ops_adam_mv(const struct ops_par *pr, float m, float g, int slow)
{
    float v[2] = {m, g}, out;
    double b = pr->a;
    if (slow || !isfinite(m) || !isfinite(g) || !isfinite(pr->a))
        return ops_canon(ops_mp_rational(pr, v));
    int isv = pr->type == OP_ADAM_V;
    double gg = isv ? (double)g * g : g;
    if ((b == 0 || m == 0) && (b == 1 || g == 0)) /* both terms exact zeros */
        return (float)(b * m + ((1.0 - b) * g) * (isv ? g : 1.0));
    double t[4], l;
    t[0] = b * m;
    t[1] = gg;
    t[2] = -ops_two_prod(b, gg, &l); /* exact b g when !isv: l = 0 */
    t[3] = -l;
    if (ops_sum32(t, 4, &out))
        return out;
    return ops_mp_rational(pr, v);
}

/* (2 (p - t) / n) g: N = 2 g p - 2 g t exactly as Nh + Nl (each product of
 * floats exact, doubled exactly); fl(Nh / n) errs by <= u |Nh / n| and Nl
 * adds <= u |Nh / n|: err = 2^-50 |q| covers 2 (2u) with margin. */
static float ops_mse_bwd(const struct ops_par *pr, float p, float t, float g, int slow)
{
    float v[3] = {p, t, g}, out;
    if (slow || !isfinite(p) || !isfinite(t) || !isfinite(g))
        return ops_canon(ops_mp_rational(pr, v));
    if (g == 0 || p == t)
        return (float)((2.0 * ((double)p - t) / pr->n) * g);
    double a = 2.0 * ((double)g * p), b = 2.0 * ((double)g * t), nl, nh = ops_two_sum(a, -b, &nl);
    double q = nh / pr->n;
    if (ops_cert32(q, 0x1p-50 * fabs(q), &out))
        return out;
    return ops_mp_rational(pr, v);
}

/* ---- adam_p ---------------------------------------------------------------
 * out = p - lr (m / c1) / (sqrt(v / c2) + eps), c_k = 1 - b_k^t exactly. */

struct ops_adam {
    float lr, b1, b2, eps;
    unsigned long t;
    double c1d, c2d;    /* RN64 of c1, c2 (relative error <= 2^-53 + 2^-120) */
    int fast;           /* the double fast path applies (see ops_adam_fast) */
    mpfr_prec_t cprec;  /* precision of c1, c2 below; 0 when not computed */
    mpfr_t c1, c2;      /* c_k with relative error <= 2^-cprec (or exact) */
};

/* c = 1 - b^t with |c - exact| <= 2^-p |exact|, or exact; returns 1 when
 * exact. The error of pow (2^-q |pw|) and of the subtraction (2^-q |c|),
 * relative to c, is < 2^(EXP(pw) - EXP(c) + 2 - q) + 2^(1 - q); q grows until
 * that is <= 2^-p. pw underflowing to 0 leaves an error below 2^emin. */
static int ops_adam_c(mpfr_t c, float b, unsigned long t, mpfr_prec_t p)
{
    for (mpfr_prec_t q = p + 64;; q *= 2) {
        mpfr_t pw, bm;
        mpfr_init2(pw, q);
        mpfr_init2(bm, 24);
        mpfr_set_flt(bm, b, MPFR_RNDN);
        mpfr_set_prec(c, q);
        int tp = mpfr_pow_ui(pw, bm, t, MPFR_RNDN);
        DT_ASSERT(!mpfr_inf_p(pw), "oracle: adam beta^t overflows");
        int tc = mpfr_ui_sub(c, 1, pw, MPFR_RNDN);
        int ok = (tp == 0 && tc == 0) ? 2
               : mpfr_zero_p(pw) ? 1
               : !mpfr_zero_p(c) && mpfr_get_exp(pw) - mpfr_get_exp(c) + 2 - q <= -p - 1;
        mpfr_clear(pw);
        mpfr_clear(bm);
        if (ok)
            return ok == 2;
    }
}

static void ops_adam_init(struct ops_adam *A, const struct node *nd, uint64_t step)
{
    A->lr = nd->p.adam.lr;
    A->b1 = nd->p.adam.b1;
    A->b2 = nd->p.adam.b2;
    A->eps = nd->p.adam.eps;
    A->t = (unsigned long)(step + 1);
    mpfr_init2(A->c1, 2);
    mpfr_init2(A->c2, 2);
    ops_adam_c(A->c1, A->b1, A->t, 128);
    ops_adam_c(A->c2, A->b2, A->t, 128);
    A->cprec = 128;
    A->c1d = mpfr_get_d(A->c1, MPFR_RNDN);
    A->c2d = mpfr_get_d(A->c2, MPFR_RNDN);
    /* The fast path's error analysis assumes positive c in a range where no
     * double operation below under- or overflows, eps >= 0, finite lr. */
    A->fast = A->c1d >= 0x1p-60 && A->c1d <= 0x1p60 && A->c2d >= 0x1p-60 && A->c2d <= 0x1p60 &&
              A->eps >= 0 && isfinite(A->eps) && isfinite(A->lr);
}

static void ops_adam_free(struct ops_adam *A)
{
    mpfr_clear(A->c1);
    mpfr_clear(A->c2);
}

/* The double fast path for finite p, m, v with lr m != 0 and v > 0 or
 * eps > 0. With u = 2^-53 and c_kd = c_k (1 + k_k), |k_k| <= u + 2^-120:
 * q = m / c1 (2u), w = v / c2 (2u), s = sqrt w (u + half of 2u), d = s + eps
 * (<= 2u + u relative to exact D, eps >= 0), y1 = lr q (3u), y = y1 / d
 * (3u + 3u + u = 7u, plus second order): |y - Y| <= 8u |y|, and X = p - y
 * errs by <= 8u |y| + u |X|; err = 20u |y| + 3u |X| is more than twice it. */
static int ops_adam_fast(const struct ops_adam *A, float p, float m, float v, float *out)
{
    double q = m / A->c1d, w = v / A->c2d, d = sqrt(w) + A->eps;
    double y = (A->lr * q) / d, x = p - y;
    return ops_cert32(x, 20 * OPS_U * fabs(y) + 3 * OPS_U * fabs(x), out);
}

static void ops_adam_ensure_c(struct ops_adam *A, mpfr_prec_t p)
{
    if (A->cprec >= p)
        return;
    ops_adam_c(A->c1, A->b1, A->t, p);
    ops_adam_c(A->c2, A->b2, A->t, p);
    A->cprec = p;
}

/* Exact rational arithmetic (GMP) for the ties a Ziv loop cannot see past:
 * does sqrt(v / c2) equal L exactly (L >= 0 and L^2 c2 = v)? */
static int ops_adam_sqrt_is(const struct ops_adam *A, const mpq_t L, float v)
{
    if (mpq_sgn(L) < 0)
        return 0;
    DT_ASSERT(A->t <= (1ul << 20), "oracle: adam_p exact tie test at step %lu: too large", A->t);
    mpq_t c2, r, vq;
    mpq_inits(c2, r, vq, NULL);
    mpq_set_d(r, (double)A->b2);
    mpz_pow_ui(mpq_numref(c2), mpq_numref(r), A->t); /* b2^t, canonical: odd numerator */
    mpz_pow_ui(mpq_denref(c2), mpq_denref(r), A->t);
    mpq_set_ui(r, 1, 1);
    mpq_sub(c2, r, c2);
    mpq_mul(r, L, L);
    mpq_mul(r, r, c2);
    mpq_set_d(vq, (double)v);
    int eq = mpq_equal(r, vq);
    mpq_clears(c2, r, vq, NULL);
    return eq;
}

/* c1 as an exact rational. */
static void ops_adam_c1q(const struct ops_adam *A, mpq_t c1)
{
    mpq_t r;
    mpq_init(r);
    mpq_set_d(r, (double)A->b1);
    mpz_pow_ui(mpq_numref(c1), mpq_numref(r), A->t);
    mpz_pow_ui(mpq_denref(c1), mpq_denref(r), A->t);
    mpq_set_ui(r, 1, 1);
    mpq_sub(c1, r, c1);
    mpq_clear(r);
}

/* Past OPS_ZIV_CAP bits an undecided adam_p is tested for an exact tie: the
 * boundary B between the two candidate floats (a midpoint, 0, or the
 * overflow threshold), X = B iff sqrt(v / c2) = lr m / (c1 (p - B)) - eps;
 * and d = 0 iff sqrt(v / c2) = -eps. 1 and *out set when exact; 0 when not
 * (the value is then not a boundary and a larger precision will decide). */
static int ops_mp_adam_tie(const struct ops_adam *A, float p, float m, float v, mpfr_srcptr x,
                           mpfr_exp_t err_exp, int d_unsure, float *out)
{
    mpq_t L, t;
    mpq_inits(L, t, NULL);
    int hit = 0;
    if (d_unsure) {
        mpq_set_d(L, -(double)A->eps);
        if (ops_adam_sqrt_is(A, L, v)) { /* d = (-eps) + eps = +0: y = +-Inf */
            int yneg = (A->lr < 0) ^ (m < 0) ^ (mpfr_sgn(A->c1) < 0);
            *out = yneg ? INFINITY : -INFINITY; /* p - y, p finite */
            hit = 1;
        }
    } else {
        float fl, fh;
        ops_mp_bracket(x, err_exp, &fl, &fh);
        double bl = isinf(fl) ? copysign(0x1p128, fl) : fl;
        double bh = isinf(fh) ? copysign(0x1p128, fh) : fh;
        double b = 0.5 * (bl + bh); /* exact: adjacent floats (or -0, +0) */
        mpq_t yb;                   /* p - B, exactly */
        mpq_init(yb);
        mpq_set_d(yb, (double)p);
        mpq_set_d(t, b);
        mpq_sub(yb, yb, t);
        if (mpq_sgn(yb) != 0) {
            mpq_set_d(L, (double)A->lr);
            mpq_set_d(t, (double)m);
            mpq_mul(L, L, t);
            ops_adam_c1q(A, t);
            mpq_div(L, L, t);
            mpq_div(L, L, yb);
            mpq_set_d(t, (double)A->eps);
            mpq_sub(L, L, t);
            if (ops_adam_sqrt_is(A, L, v)) {
                *out = (float)b; /* RN32 of the boundary itself: ties to even; 0 -> +0 */
                hit = 1;
            }
        }
        mpq_clear(yb);
    }
    mpq_clears(L, t, NULL);
    return hit;
}

/* The MPFR path of adam_p. Special cases first, where every step is exact or
 * special so that one evaluation at any precision is the answer: NaN/Inf
 * inputs, c_k = 0 exactly, lr m = 0 (then y = +-0 or NaN), v = eps = 0
 * (then d = +0). Otherwise Ziv with the error bound of each step (units of
 * 2^-p, relative): q = m/c1 2, w = v/c2 2, s = sqrt w 2, d = s + eps
 * k_s |s| / |d| + 1, y1 = lr q 3, y = y1 / d 3 + k_d + 1 (+1 for second
 * order), X = p - y: |X - exact| <= 2^-p (k_y |y| + |X|). */
static float ops_mp_adam(struct ops_adam *A, float p, float m, float v)
{
    int special = !isfinite(p) || !isfinite(m) || !isfinite(v) || !isfinite(A->lr) ||
                  !isfinite(A->eps) || mpfr_zero_p(A->c1) || mpfr_zero_p(A->c2) ||
                  A->lr == 0 || m == 0 || (v == 0 && A->eps == 0);
    float out;
    for (mpfr_prec_t prec = OPS_ZIV_START;; prec *= 2) {
        ops_adam_ensure_c(A, prec);
        mpfr_t q, s, d, y, x;
        mpfr_inits2(prec, q, s, d, y, x, (mpfr_ptr)0);
        mpfr_set_flt(q, m, MPFR_RNDN);
        mpfr_div(q, q, A->c1, MPFR_RNDN);
        mpfr_set_flt(s, v, MPFR_RNDN);
        mpfr_div(s, s, A->c2, MPFR_RNDN);
        int wneg = mpfr_sgn(s) < 0;
        mpfr_sqrt(s, s, MPFR_RNDN);
        mpfr_add_d(d, s, A->eps, MPFR_RNDN);
        mpfr_mul_d(y, q, A->lr, MPFR_RNDN);
        mpfr_div(y, y, d, MPFR_RNDN);
        mpfr_d_sub(x, p, y, MPFR_RNDN);
        int done = 0;
        if (special || wneg) {
            out = ops_mp_rn32(x); /* exact or special, see above */
            done = 1;
        } else {
            /* k_d from exponents: |s| / |d| < 2^(EXP(s) - EXP(d) + 1) */
            double kd = mpfr_zero_p(d) ? INFINITY
                      : mpfr_zero_p(s) ? 1.0
                      : 2.0 * ldexp(1.0, (int)(mpfr_get_exp(s) - mpfr_get_exp(d) + 1)) + 1;
            int d_sure = kd < ldexp(1.0, (int)prec - 8);
            mpfr_exp_t err_exp = 0;
            if (d_sure) {
                double ky = 5 + kd;
                mpfr_exp_t ey = mpfr_get_exp(y), ex = mpfr_zero_p(x) ? ey : mpfr_get_exp(x);
                mpfr_exp_t e = ey > ex ? ey : ex;
                err_exp = e - prec + (mpfr_exp_t)ceil(log2(ky + 2)) + 1;
                done = ops_mp_decide(x, err_exp, &out);
            }
            if (!done && prec >= OPS_ZIV_CAP)
                done = ops_mp_adam_tie(A, p, m, v, x, err_exp, !d_sure, &out);
        }
        mpfr_clears(q, s, d, y, x, (mpfr_ptr)0);
        if (done)
            return ops_canon(out);
    }
}

/* ---- reductions and matrix products ----------------------------------------- */

/* mean((p - t)^2): the sum of p^2 - 2 p t + t^2 (each product exact in
 * double) in the exact accumulator, then RN32(S / n): RN64(S) / n errs by
 * <= 2u |S / n| (plus second order), so err = 2^-50 |q| meets the factor 2;
 * else Ziv on the exact S. NaN/Inf: the double sum of squares is NaN or +Inf,
 * exactly IEEE's answer. */
static float ops_mse(const float *p, /* (n) */ const float *t, /* (n) */ size_t n, int slow)
{
    double s = 0;
    int special = 0;
    for (size_t i = 0; i < n && !special; i++)
        special = !isfinite(p[i]) || !isfinite(t[i]);
    if (special || n == 0) {
        for (size_t i = 0; i < n; i++)
            s += ((double)p[i] - t[i]) * ((double)p[i] - t[i]);
        return ops_canon((float)(s / (double)n));
    }
    struct oracle_acc *a = oracle_acc_new();
    for (size_t i = 0; i < n; i++) {
        oracle_acc_add(a, (double)p[i] * p[i]);
        oracle_acc_add(a, -2.0 * ((double)p[i] * t[i]));
        oracle_acc_add(a, (double)t[i] * t[i]);
    }
    double s64 = oracle_acc_round_f64(a), q = s64 / (double)n;
    float out;
    if (s64 == 0) {
        out = 0.0f; /* every (p - t)^2 is +0 */
    } else if (slow || !ops_cert32(q, 0x1p-50 * q, &out)) {
        mpfr_t S;
        mpfr_init2(S, 64);
        oracle_acc_get_mpfr(a, S);
        out = ops_mp_div_round(S, (double)n);
        mpfr_clear(S);
    }
    oracle_acc_free(a);
    return out;
}

/* out (M,N) = op(A) (M,K) op(B) (K,N): each element one exact dot product of
 * a row of op(A) and a column of op(B), both copied contiguous first. */
static void ops_matmul(const struct graph *g, const struct node *nd, float *out,
                       const float *const *in)
{
    const struct node *na = &g->nodes[nd->inputs[0]], *nb = &g->nodes[nd->inputs[1]];
    int ta = nd->p.mm.ta, tb = nd->p.mm.tb;
    size_t m = nd->shape[0], n = nd->shape[1];
    size_t k = ta ? na->shape[0] : na->shape[1];
    float *ar = dt_malloc((m * k + 1) * sizeof *ar), *bc = dt_malloc((n * k + 1) * sizeof *bc);
    for (size_t i = 0; i < m; i++)
        for (size_t l = 0; l < k; l++)
            ar[i * k + l] = ta ? in[0][l * m + i] : in[0][i * k + l]; /* A (K,M) or (M,K) */
    for (size_t j = 0; j < n; j++)
        for (size_t l = 0; l < k; l++)
            bc[j * k + l] = tb ? in[1][j * k + l] : in[1][l * n + j]; /* B (N,K) or (K,N) */
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++)
            out[i * n + j] = ops_canon(oracle_dot(ar + i * k, 1, bc + j * k, 1, k));
    (void)nb;
    free(ar);
    free(bc);
}

/* ---- image ops -------------------------------------------------------------------
 * Dimension letters (op.h): N batch, C input channels, K output channels, H, W
 * image rows and columns, R, S kernel rows and columns. The sums (convolutions,
 * upsample2_bwd, bias_grad and mean over images) gather each element's terms
 * into contiguous vectors and take oracle_dot / oracle_sum (certified fast
 * path, else the superaccumulator); DIVTRACE_ORACLE_EXACT=1 sums them in MPFR
 * instead, which checks the superaccumulator too. */

/* The exact sum of x[i] y[i] (y NULL: of x[i]), i < n, in s (precision
 * OPS_EXACT_PREC): the formula step by step from the first term, so zeros
 * take IEEE's sign and NaN / Inf terms give IEEE's NaN or Inf; +0 for n = 0.
 * Products of floats lie in [2^-298, 2^256): 554 + 64 bits hold any sum. */
static void ops_mp_sum(mpfr_t s, const float *x, const float *y, size_t n)
{
    mpfr_t t;
    mpfr_init2(t, OPS_EXACT_PREC);
    mpfr_set_prec(s, OPS_EXACT_PREC);
    mpfr_set_zero(s, 1);
    for (size_t i = 0; i < n; i++) {
        mpfr_set_flt(t, x[i], MPFR_RNDN);
        if (y)
            OPS_EXACT(mpfr_mul_d(t, t, y[i], MPFR_RNDN));
        if (i == 0)
            mpfr_set(s, t, MPFR_RNDN);
        else
            OPS_EXACT(mpfr_add(s, s, t, MPFR_RNDN));
    }
    mpfr_clear(t);
}

/* RN32(sum of x[i] y[i]) (y NULL: of x[i]), zero signs and NaN as above. */
static float ops_sum_round(const float *x, const float *y, size_t n, int slow)
{
    if (!slow)
        return ops_canon(y ? oracle_dot(x, 1, y, 1, n) : oracle_sum(x, 1, n));
    mpfr_t s;
    mpfr_init2(s, OPS_EXACT_PREC);
    ops_mp_sum(s, x, y, n);
    float out = ops_mp_rn32(s);
    mpfr_clear(s);
    return out;
}

/* The shift of kernel row r of R (or column s of S) from the centre. */
#define OPS_D(r, R) ((long)(r) - (long)((R) / 2))

/* Offset of row a + da, column b + db of an H x W plane, or -1 outside it. */
static long ops_at(size_t a, long da, size_t b, long db, size_t h, size_t w)
{
    long r = (long)a + da, c = (long)b + db;
    return r < 0 || r >= (long)h || c < 0 || c >= (long)w ? -1 : r * (long)w + c;
}

/* Whether any of the `count` elements at i0, i0 + stride, ... is one the
 * matrix-product path left undecided (undecided NULL: no such path ran,
 * every element is computed here). */
static int ops_conv_any(const unsigned char *undecided, size_t i0, size_t count, size_t stride)
{
    if (!undecided)
        return 1;
    for (size_t k = 0; k < count; k++)
        if (undecided[i0 + k * stride])
            return 1;
    return 0;
}

/* conv2d: out (N,K,H,W) = sum over in-image (c, r, s) of x[n,c,h+r-R/2,w+s-S/2]
 * w[k,c,r,s]. Per output pixel the patch of x and the filter offsets of its
 * terms, then one dot product per output channel. */
static void ops_conv2d(const struct graph *g, const struct node *nd, float *out, /* (N,K,H,W) */
                       const float *x, /* (N,C,H,W) */ const float *w, /* (K,C,R,S) */ int slow,
                       const unsigned char *undecided)
{
    const uint32_t *xs = g->nodes[nd->inputs[0]].shape, *ws = g->nodes[nd->inputs[1]].shape;
    size_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], K = ws[0], R = ws[2], S = ws[3];
    size_t crs = C * R * S, hw = H * W;
    float *xb = dt_malloc((crs + 1) * sizeof *xb), *wb = dt_malloc((crs + 1) * sizeof *wb);
    size_t *off = dt_malloc((crs + 1) * sizeof *off);
    for (size_t n = 0; n < N; n++)
        for (size_t h = 0; h < H; h++)
            for (size_t v = 0; v < W; v++) {
                if (!ops_conv_any(undecided, n * K * hw + h * W + v, K, hw))
                    continue;
                size_t m = 0;
                for (size_t c = 0; c < C; c++)
                    for (size_t r = 0; r < R; r++)
                        for (size_t s = 0; s < S; s++) {
                            long p = ops_at(h, OPS_D(r, R), v, OPS_D(s, S), H, W);
                            if (p < 0)
                                continue;
                            xb[m] = x[(n * C + c) * hw + (size_t)p];
                            off[m++] = (c * R + r) * S + s;
                        }
                for (size_t k = 0; k < K; k++) {
                    if (undecided && !undecided[(n * K + k) * hw + h * W + v])
                        continue;
                    for (size_t j = 0; j < m; j++)
                        wb[j] = w[k * crs + off[j]];
                    out[(n * K + k) * hw + h * W + v] = ops_sum_round(xb, wb, m, slow);
                }
            }
    free(xb);
    free(wb);
    free(off);
}

/* conv2d_bwd_data: out (N,C,H,W) = sum over the pairs j and in-image
 * (k, r, s) of dy_j[n,k,h-r+R/2,w-s+S/2] w_j[k,c,r,s], in = dy_0, w_0, ...:
 * one sum over all pairs, rounded once. */
static void ops_conv2d_bwd_data(const struct graph *g, const struct node *nd,
                                float *out, /* (N,C,H,W) */ const float *const *in, int slow,
                                const unsigned char *undecided)
{
    const uint32_t *ws = g->nodes[nd->inputs[1]].shape;
    size_t N = nd->shape[0], C = nd->shape[1], H = nd->shape[2], W = nd->shape[3];
    size_t K = ws[0], R = ws[2], S = ws[3], hw = H * W, np = oracle_conv_pairs(nd);
    size_t terms = np * K * R * S;
    float *db = dt_malloc((terms + 1) * sizeof *db), *wb = dt_malloc((terms + 1) * sizeof *wb);
    const float **wt = dt_malloc((terms + 1) * sizeof *wt); /* w_j[k, 0, r, s] of each term */
    for (size_t n = 0; n < N; n++)
        for (size_t h = 0; h < H; h++)
            for (size_t v = 0; v < W; v++) {
                if (!ops_conv_any(undecided, n * C * hw + h * W + v, C, hw))
                    continue;
                size_t m = 0;
                for (size_t j = 0; j < np; j++)
                    for (size_t k = 0; k < K; k++)
                        for (size_t r = 0; r < R; r++)
                            for (size_t s = 0; s < S; s++) {
                                long p = ops_at(h, -OPS_D(r, R), v, -OPS_D(s, S), H, W);
                                if (p < 0)
                                    continue;
                                db[m] = in[2 * j][(n * K + k) * hw + (size_t)p];
                                wt[m++] = in[2 * j + 1] + k * C * R * S + r * S + s;
                            }
                for (size_t c = 0; c < C; c++) {
                    if (undecided && !undecided[(n * C + c) * hw + h * W + v])
                        continue;
                    for (size_t t = 0; t < m; t++)
                        wb[t] = wt[t][c * R * S];
                    out[(n * C + c) * hw + h * W + v] = ops_sum_round(db, wb, m, slow);
                }
            }
    free(db);
    free(wb);
    free(wt);
}

/* conv2d_bwd_filter: out (K,C,R,S) = sum over in-image (n, h, w) of
 * dy[n,k,h,w] x[n,c,h+r-R/2,w+s-S/2]. */
static void ops_conv2d_bwd_filter(const struct graph *g, const struct node *nd,
                                  float *out, /* (K,C,R,S) */ const float *x, /* (N,C,H,W) */
                                  const float *dy, /* (N,K,H,W) */ int slow,
                                  const unsigned char *undecided)
{
    const uint32_t *xs = g->nodes[nd->inputs[0]].shape;
    size_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
    size_t K = nd->shape[0], R = nd->p.conv.r, S = nd->p.conv.s, hw = H * W;
    DT_ASSERT(R == nd->shape[2] && S == nd->shape[3],
              "conv2d_bwd_filter %s: kernel %zux%zu, shape %ux%u", nd->name, R, S, nd->shape[2],
              nd->shape[3]);
    float *db = dt_malloc((N * hw + 1) * sizeof *db), *xb = dt_malloc((N * hw + 1) * sizeof *xb);
    for (size_t k = 0; k < K; k++)
        for (size_t c = 0; c < C; c++)
            for (size_t r = 0; r < R; r++)
                for (size_t s = 0; s < S; s++) {
                    if (undecided && !undecided[((k * C + c) * R + r) * S + s])
                        continue;
                    size_t m = 0;
                    for (size_t n = 0; n < N; n++)
                        for (size_t h = 0; h < H; h++)
                            for (size_t v = 0; v < W; v++) {
                                long p = ops_at(h, OPS_D(r, R), v, OPS_D(s, S), H, W);
                                if (p < 0)
                                    continue;
                                db[m] = dy[(n * K + k) * hw + h * W + v];
                                xb[m++] = x[(n * C + c) * hw + (size_t)p];
                            }
                    out[((k * C + c) * R + r) * S + s] = ops_sum_round(db, xb, m, slow);
                }
    free(db);
    free(xb);
}

void oracle_conv_op(const struct graph *g, const struct node *nd, float *out,
                    const float *const *in, const struct oracle_conv *given)
{
    int slow = ops_exact_only();
    struct oracle_conv own;
    const struct oracle_conv *cs = given;
    if (!slow && !cs && oracle_conv_sums(g, nd, in, 1, &own) == 0)
        cs = &own;
    unsigned char *undecided = NULL;
    size_t left = nd->count;
    if (!slow && cs) { /* the certified sums; the rest element by element */
        undecided = dt_malloc(nd->count + 1);
        left = 0;
        for (size_t i = 0; i < nd->count; i++) {
            undecided[i] = !oracle_conv_cert(cs, i, &out[i]);
            left += undecided[i];
        }
    }
    if (left && nd->type == OP_CONV2D)
        ops_conv2d(g, nd, out, in[0], in[1], slow, undecided);
    else if (left && nd->type == OP_CONV2D_BWD_DATA)
        ops_conv2d_bwd_data(g, nd, out, in, slow, undecided);
    else if (left)
        ops_conv2d_bwd_filter(g, nd, out, in[0], in[1], slow, undecided);
    free(undecided);
    if (cs == &own)
        oracle_conv_free(&own);
}

/* The window element maxpool2 picks (op.h): the first NaN in row-major window
 * order, else the first equal to the maximum (-0 and +0 tie: the first wins,
 * as a strict > never replaces an equal one). i0: the window's top left. */
static size_t ops_pool_pick(const float *x, size_t i0, size_t w)
{
    const size_t at[4] = {i0, i0 + 1, i0 + w, i0 + w + 1};
    for (int j = 0; j < 4; j++)
        if (isnan(x[at[j]]))
            return at[j];
    size_t best = at[0];
    for (int j = 1; j < 4; j++)
        if (x[at[j]] > x[best])
            best = at[j];
    return best;
}

/* maxpool2 (bwd 0) and maxpool2_bwd (bwd 1): x (N,C,H,W), dy (N,C,H/2,W/2). */
static void ops_maxpool2(const struct graph *g, const struct node *nd, float *out,
                         const float *const *in, int bwd)
{
    const uint32_t *xs = g->nodes[nd->inputs[0]].shape;
    size_t planes = (size_t)xs[0] * xs[1], H = xs[2], W = xs[3], ho = H / 2, wo = W / 2;
    if (bwd)
        memset(out, 0, planes * H * W * sizeof *out); /* +0 */
    for (size_t pl = 0; pl < planes; pl++)
        for (size_t h = 0; h < ho; h++)
            for (size_t v = 0; v < wo; v++) {
                size_t j = ops_pool_pick(in[0], pl * H * W + 2 * h * W + 2 * v, W);
                size_t o = pl * ho * wo + h * wo + v;
                if (bwd)
                    out[j] = ops_canon(in[1][o]);
                else
                    out[o] = ops_canon(in[0][j]); /* bit for bit, NaN canonical */
            }
}

/* upsample2_bwd: out (N,C,H,W) = the exact sum of dy's 2x2 block (N,C,2H,2W). */
static void ops_upsample2_bwd(const struct node *nd, float *out, const float *dy, int slow)
{
    size_t planes = (size_t)nd->shape[0] * nd->shape[1], H = nd->shape[2], W = nd->shape[3];
    for (size_t pl = 0; pl < planes; pl++)
        for (size_t h = 0; h < H; h++)
            for (size_t v = 0; v < W; v++) {
                const float *q = dy + pl * 4 * H * W + 2 * h * 2 * W + 2 * v;
                float t[4] = {q[0], q[1], q[2 * W], q[2 * W + 1]};
                out[pl * H * W + h * W + v] = ops_sum_round(t, NULL, 4, slow);
            }
}

/* The float32 constant 0.2f of hard_sigmoid (op.h), 13421773 2^-26. */
#define OPS_HS_C 0.2f

/* hard_sigmoid: RN32(clip(c x + 0.5, 0, 1)). T = c x + 0.5 = s + e exactly
 * (c x exact in double, TwoSum); RN64 is monotonic, so s < 0 iff T < 0, and
 * s >= 1 means T >= 1 - 2^-54, which rounds to 1 as the clip does. T = 0
 * exactly is +0 (-0.5 + 0.5). NaN stays NaN; x = -Inf gives +0, +Inf 1. */
static float ops_hard_sigmoid(float x, int slow)
{
    if (isnan(x))
        return ops_nan();
    if (slow) {
        mpfr_t t;
        mpfr_init2(t, OPS_EXACT_PREC);
        mpfr_set_flt(t, OPS_HS_C, MPFR_RNDN);
        OPS_EXACT(mpfr_mul_d(t, t, x, MPFR_RNDN));
        OPS_EXACT(mpfr_add_d(t, t, 0.5, MPFR_RNDN));
        float out = mpfr_sgn(t) < 0 ? 0.0f : mpfr_cmp_ui(t, 1) > 0 ? 1.0f : ops_mp_rn32(t);
        mpfr_clear(t);
        return out;
    }
    if (isinf(x))
        return x > 0 ? 1.0f : 0.0f;
    double e, s = ops_two_sum((double)OPS_HS_C * x, 0.5, &e);
    if (s <= 0)
        return 0.0f;
    if (s >= 1)
        return 1.0f;
    return ops_rn32_hl(s, e);
}

/* The t of hard_sigmoid as the cpu computes it, fl(fl(c x) + 0.5) in float32
 * (part of hard_sigmoid_bwd's definition). c x is exact in double, so its
 * conversion is the one rounding; t1 + 0.5 is rounded to double first, which
 * for a sum of two floats gives the same float (Figueroa 1995: double
 * rounding is innocuous for + when 53 >= 2 24 + 1). The MPFR path rounds
 * both steps exactly instead. */
static float ops_hs_t(float x, int slow)
{
    if (!slow) {
        float t1 = (float)((double)OPS_HS_C * x);
        return (float)((double)t1 + 0.5);
    }
    mpfr_t t;
    mpfr_init2(t, OPS_EXACT_PREC);
    mpfr_set_flt(t, OPS_HS_C, MPFR_RNDN);
    OPS_EXACT(mpfr_mul_d(t, t, x, MPFR_RNDN));
    float t1 = ops_mp_rn32(t);
    mpfr_set_flt(t, t1, MPFR_RNDN);
    OPS_EXACT(mpfr_add_d(t, t, 0.5, MPFR_RNDN));
    float r = ops_mp_rn32(t);
    mpfr_clear(t);
    return r;
}

/* hard_sigmoid_bwd: 0 <= t <= 1 ? RN32(c dy) : +0 (NaN t fails the test);
 * c dy is exact in double, so converting it is the one rounding. */
static float ops_hard_sigmoid_bwd(float x, float dy, int slow)
{
    float t = ops_hs_t(x, slow);
    if (!(t >= 0 && t <= 1))
        return 0.0f;
    if (!slow)
        return ops_canon((float)((double)OPS_HS_C * dy));
    mpfr_t p;
    mpfr_init2(p, 64);
    mpfr_set_flt(p, OPS_HS_C, MPFR_RNDN);
    OPS_EXACT(mpfr_mul_d(p, p, dy, MPFR_RNDN));
    float out = ops_mp_rn32(p);
    mpfr_clear(p);
    return out;
}

/* mean: RN32(scale S / n), S the exact sum of x. Special or zero S or scale:
 * every step exact or special, IEEE's answer in double is the value (zeros:
 * S = -0 only when every x is -0, the sign then xor scale's). Otherwise q =
 * (scale RN64(S)) / n errs by <= 3U |q| (+ second order): err = 2^-50 |q|
 * covers ops_cert32's factor 2; else Ziv on scale S exactly. */
static float ops_mean(const float *x, /* (n) */ size_t n, float scale, int slow)
{
    mpfr_t num;
    mpfr_init2(num, OPS_EXACT_PREC);
    float out;
    if (slow) {
        ops_mp_sum(num, x, NULL, n);
        OPS_EXACT(mpfr_mul_d(num, num, scale, MPFR_RNDN));
        out = ops_mp_div_round(num, (double)n);
        mpfr_clear(num);
        return ops_canon(out);
    }
    struct oracle_acc *a = oracle_acc_new();
    for (size_t i = 0; i < n; i++)
        oracle_acc_add(a, x[i]);
    double s = oracle_acc_round_f64(a), q = ((double)scale * s) / (double)n;
    if (!isfinite(s) || s == 0 || !isfinite(scale) || scale == 0) {
        out = ops_canon((float)q);
    } else if (!ops_cert32(q, 0x1p-50 * fabs(q), &out)) {
        oracle_acc_get_mpfr(a, num);
        mpfr_prec_t p = mpfr_get_prec(num) + 24;
        mpfr_prec_round(num, p, MPFR_RNDN); /* exact: more bits */
        OPS_EXACT(mpfr_mul_d(num, num, scale, MPFR_RNDN));
        out = ops_mp_div_round(num, (double)n);
    }
    oracle_acc_free(a);
    mpfr_clear(num);
    return out;
}

/* mean_bwd: RN32(scale g / n): P = scale g exact in double; P / n errs by
 * <= U |q|, so err = 2^-51 |q| is twice that; else Ziv on P. */
static float ops_mean_bwd(float scale, float gv, double n, int slow)
{
    double p = (double)scale * gv, q = p / n;
    float out;
    if (!isfinite(p) || p == 0)
        return ops_canon((float)q);
    if (!slow && ops_cert32(q, 0x1p-51 * fabs(q), &out))
        return out;
    mpfr_t num;
    mpfr_init2(num, 64);
    mpfr_set_flt(num, scale, MPFR_RNDN);
    OPS_EXACT(mpfr_mul_d(num, num, gv, MPFR_RNDN));
    out = ops_mp_div_round(num, n);
    mpfr_clear(num);
    return out;
}

/* Copies of whole (H,W) planes: concat, slice, slice_bwd. The element is
 * copied bit for bit, NaN canonical. */
static void ops_copy(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = ops_canon(src[i]);
}

/* concat, slice and slice_bwd: (H,W) planes of one tensor's channels to
 * another's, at a channel offset. */
static void ops_channels(const struct graph *g, const struct node *nd, float *out,
                         const float *const *in)
{
    size_t N = nd->shape[0], hw = (size_t)nd->shape[2] * nd->shape[3], Co = nd->shape[1];
    if (nd->type == OP_CONCAT) {
        size_t c0 = 0;
        for (int k = 0; k < nd->ninputs; k++) {
            size_t ck = g->nodes[nd->inputs[k]].shape[1];
            for (size_t n = 0; n < N; n++)
                ops_copy(out + (n * Co + c0) * hw, in[k] + n * ck * hw, ck * hw);
            c0 += ck;
        }
        return;
    }
    size_t c0 = nd->p.slice.c0, cn = nd->p.slice.n, ci = g->nodes[nd->inputs[0]].shape[1];
    if (nd->type == OP_SLICE) {
        DT_ASSERT(cn == Co && c0 + cn <= ci, "slice %s: channels %zu..%zu of %zu into %zu",
                  nd->name, c0, c0 + cn, ci, Co);
        for (size_t n = 0; n < N; n++)
            ops_copy(out + n * Co * hw, in[0] + (n * ci + c0) * hw, cn * hw);
        return;
    }
    DT_ASSERT(cn == ci && c0 + cn <= Co, "slice_bwd %s: channels %zu..%zu of %zu from %zu",
              nd->name, c0, c0 + cn, Co, ci);
    memset(out, 0, N * Co * hw * sizeof *out); /* +0 */
    for (size_t n = 0; n < N; n++)
        ops_copy(out + (n * Co + c0) * hw, in[0] + n * ci * hw, cn * hw);
}

/* ---- the entry point ----------------------------------------------------------- */

int oracle_op(const struct graph *g, const struct node *nd, float *out, const float *const *in,
              const struct backend_step *st)
{
    int slow = ops_exact_only();
    size_t cnt = nd->count;
    struct ops_par pr = {.type = nd->type};
    switch (nd->type) {
    case OP_INPUT:
    case OP_PARAM:
    case OP_STATE:
        dt_error_set("oracle: %s is not an op (%s)", nd->name, op_type_name(nd->type));
        return DT_ERR;
    case OP_MATMUL:
        ops_matmul(g, nd, out, in);
        return DT_OK;
    case OP_ADD_BIAS: { /* x (N,F) or (N,C,H,W), b (F) or (C) */
        size_t f = nd->shape[1], inner = nd->ndim == 4 ? (size_t)nd->shape[2] * nd->shape[3] : 1;
        for (size_t i = 0; i < cnt; i++) {
            float v[2] = {in[0][i], in[1][i / inner % f]};
            pr.type = OP_ADD;
            out[i] = slow ? ops_canon(ops_mp_rational(&pr, v)) : ops_add(v[0], v[1]);
        }
        return DT_OK;
    }
    case OP_ADD:
        for (size_t i = 0; i < cnt; i++) {
            float v[2] = {in[0][i], in[1][i]};
            out[i] = slow ? ops_canon(ops_mp_rational(&pr, v)) : ops_add(v[0], v[1]);
        }
        return DT_OK;
    case OP_BIAS_GRAD: {
        const struct node *x = &g->nodes[nd->inputs[0]];
        if (x->ndim == 4) { /* dy (N,C,H,W): channel c's N H W elements, gathered */
            size_t N = x->shape[0], C = x->shape[1], hw = (size_t)x->shape[2] * x->shape[3];
            float *b = dt_malloc((N * hw + 1) * sizeof *b);
            for (size_t c = 0; c < C; c++) {
                for (size_t n = 0; n < N; n++)
                    memcpy(b + n * hw, in[0] + (n * C + c) * hw, hw * sizeof *b);
                out[c] = ops_sum_round(b, NULL, N * hw, slow);
            }
            free(b);
            return DT_OK;
        }
        size_t rows = x->shape[0], f = nd->shape[0];
        for (size_t j = 0; j < f; j++)
            out[j] = ops_canon(oracle_sum(in[0] + j, f, rows));
        return DT_OK;
    }
    case OP_SIGMOID:
        for (size_t i = 0; i < cnt; i++)
            out[i] = ops_sigmoid(in[0][i], slow);
        return DT_OK;
    case OP_TANH:
        for (size_t i = 0; i < cnt; i++)
            out[i] = ops_tanh(in[0][i], slow);
        return DT_OK;
    case OP_SIGMOID_BWD:
        for (size_t i = 0; i < cnt; i++)
            out[i] = ops_sigmoid_bwd(&pr, in[0][i], in[1][i], slow);
        return DT_OK;
    case OP_TANH_BWD:
        for (size_t i = 0; i < cnt; i++)
            out[i] = ops_tanh_bwd(&pr, in[0][i], in[1][i], slow);
        return DT_OK;
    case OP_RELU:
        for (size_t i = 0; i < cnt; i++)
            out[i] = in[0][i] > 0 ? in[0][i] : 0.0f;
        return DT_OK;
    case OP_RELU_BWD:
        for (size_t i = 0; i < cnt; i++)
            out[i] = in[0][i] > 0 ? ops_canon(in[1][i]) : 0.0f;
        return DT_OK;
    case OP_MSE:
        out[0] = ops_mse(in[0], in[1], g->nodes[nd->inputs[0]].count, slow);
        return DT_OK;
    case OP_MSE_BWD:
        DT_ASSERT(nd->ninputs == 2 || nd->ninputs == 3, "mse_bwd %s: %d inputs", nd->name,
                  nd->ninputs);
        pr.n = (double)cnt;
        pr.has_g = nd->ninputs > 2;
        for (size_t i = 0; i < cnt; i++)
            out[i] = ops_mse_bwd(&pr, in[0][i], in[1][i], pr.has_g ? in[2][0] : 1.0f, slow);
        return DT_OK;
    case OP_SGD:
        pr.a = nd->p.sgd.lr;
        for (size_t i = 0; i < cnt; i++) {
            float v[2] = {in[0][i], in[1][i]};
            out[i] = slow ? ops_canon(ops_mp_rational(&pr, v)) : ops_axpy(v[0], -pr.a, v[1]);
        }
        return DT_OK;
    case OP_MOMENTUM:
        pr.a = nd->p.momentum.mu;
        for (size_t i = 0; i < cnt; i++) {
            float v[2] = {in[0][i], in[1][i]};
            out[i] = slow ? ops_canon(ops_mp_rational(&pr, v)) : ops_axpy(v[1], pr.a, v[0]);
        }
        return DT_OK;
    case OP_ADAM_M:
    case OP_ADAM_V:
        pr.a = nd->type == OP_ADAM_M ? nd->p.adam.b1 : nd->p.adam.b2;
        for (size_t i = 0; i < cnt; i++)
            out[i] = ops_adam_mv(&pr, in[0][i], in[1][i], slow);
        return DT_OK;
    case OP_ADAM_P: {
        if (!st) {
            dt_error_set("oracle: adam_p %s needs the step number", nd->name);
            return DT_ERR;
        }
        struct ops_adam A;
        ops_adam_init(&A, nd, st->step);
        for (size_t i = 0; i < cnt; i++) {
            float p = in[0][i], m = in[1][i], v = in[2][i];
            int fast = !slow && A.fast && isfinite(p) && isfinite(m) && isfinite(v) &&
                       A.lr != 0 && m != 0 && v >= 0 && (v > 0 || A.eps > 0);
            if (!(fast && ops_adam_fast(&A, p, m, v, &out[i])))
                out[i] = ops_mp_adam(&A, p, m, v);
        }
        ops_adam_free(&A);
        return DT_OK;
    }
    case OP_FILL:
        for (size_t i = 0; i < cnt; i++)
            out[i] = ops_canon(nd->p.fill.value);
        return DT_OK;
    case OP_CONV2D:
    case OP_CONV2D_BWD_DATA:
    case OP_CONV2D_BWD_FILTER:
        oracle_conv_op(g, nd, out, in, NULL);
        return DT_OK;
    case OP_MAXPOOL2:
    case OP_MAXPOOL2_BWD:
        ops_maxpool2(g, nd, out, in, nd->type == OP_MAXPOOL2_BWD);
        return DT_OK;
    case OP_UPSAMPLE2: { /* out (N,C,2H,2W) */
        size_t ho = nd->shape[2], wo = nd->shape[3], planes = (size_t)nd->shape[0] * nd->shape[1];
        for (size_t pl = 0; pl < planes; pl++)
            for (size_t h = 0; h < ho; h++)
                for (size_t v = 0; v < wo; v++)
                    out[(pl * ho + h) * wo + v] =
                        ops_canon(in[0][(pl * (ho / 2) + h / 2) * (wo / 2) + v / 2]);
        return DT_OK;
    }
    case OP_UPSAMPLE2_BWD:
        ops_upsample2_bwd(nd, out, in[0], slow);
        return DT_OK;
    case OP_CONCAT:
    case OP_SLICE:
    case OP_SLICE_BWD:
        ops_channels(g, nd, out, in);
        return DT_OK;
    case OP_HARD_SIGMOID:
        for (size_t i = 0; i < cnt; i++)
            out[i] = ops_hard_sigmoid(in[0][i], slow);
        return DT_OK;
    case OP_HARD_SIGMOID_BWD:
        for (size_t i = 0; i < cnt; i++)
            out[i] = ops_hard_sigmoid_bwd(in[0][i], in[1][i], slow);
        return DT_OK;
    case OP_SATLU: {
        float m = nd->p.satlu.max;
        for (size_t i = 0; i < cnt; i++)
            out[i] = ops_canon(in[0][i] > m ? m : in[0][i]);
        return DT_OK;
    }
    case OP_SATLU_BWD: {
        float m = nd->p.satlu.max;
        for (size_t i = 0; i < cnt; i++)
            out[i] = in[0][i] <= m ? ops_canon(in[1][i]) : 0.0f;
        return DT_OK;
    }
    case OP_SUB:
        for (size_t i = 0; i < cnt; i++) {
            float v[2] = {in[0][i], in[1][i]};
            out[i] = slow ? ops_canon(ops_mp_rational(&pr, v)) : ops_add(v[0], -v[1]);
        }
        return DT_OK;
    case OP_NEG:
        for (size_t i = 0; i < cnt; i++)
            out[i] = ops_canon(-in[0][i]);
        return DT_OK;
    case OP_MUL: /* a b exact in double: one rounding */
        for (size_t i = 0; i < cnt; i++) {
            float v[2] = {in[0][i], in[1][i]};
            out[i] = ops_canon(slow ? ops_mp_rational(&pr, v) : (float)((double)v[0] * v[1]));
        }
        return DT_OK;
    case OP_MEAN:
        out[0] = ops_mean(in[0], g->nodes[nd->inputs[0]].count, nd->p.mean.scale, slow);
        return DT_OK;
    case OP_MEAN_BWD: {
        float v = ops_mean_bwd(nd->p.mean.scale, in[0][0], (double)cnt, slow);
        for (size_t i = 0; i < cnt; i++)
            out[i] = v;
        return DT_OK;
    }
    case OP_COUNT:
        break;
    }
    dt_error_set("oracle: op %s has an unknown type %d", nd->name, (int)nd->type);
    return DT_ERR;
}
