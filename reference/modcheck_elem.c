/* modcheck_elem.c: modcheck's elementwise modules (relu, sigmoid, tanh,
 * hardsigmoid, gelu) and optimizer updates (sgd, adam, adamw): exact values
 * rounded once to float32, and the bound of every admissible float32
 * evaluation in oracle.c's error model (u, uw, 2^-150, the tolerances).
 *
 * Hyperparameters are the spec's doubles, used as float32 (ATen's Scalar
 * in float opmath) or double (fused kernels): s^ = s (1 + d), |d| <= uw,
 * d = 0 when s is a float; a scalar derived in double (1 - b, 1 - lr wd,
 * lr wd) errs by its double roundings, then the same uw.
 *
 * Running errors (struct mcv): each quantity carries x, its exact value,
 * and e >= |computed - exact|; an operation on computed operands adds its
 * rounding rel (|result| + e_prop) (and 2^-150 for a product or quotient of
 * nonzero operands), e_prop being: a b: |a| e_b + |b| e_a + e_a e_b; a + b:
 * e_a + e_b (any signs); a / b: (e_a + |a / b| e_b) / (|b| - e_b), needing
 * e_b < |b|; sqrt a: min(e_a / sqrt a, sqrt e_a); rel = uw for + and *,
 * E_DIV ulp for / (IEEE, or a reciprocal and a product), E_SQRT ulp. FMA
 * only removes roundings. A NaN or Inf input, or an intermediate that could
 * reach FLT_MAX, makes the bound +Inf. The same code with u = 2^-53 and
 * exact hyperparameters bounds the fast path of the exact values. Every
 * bound is multiplied by BND_UP (magnitudes come from double, within 2^-40).
 *
 * Admissible evaluations (x the input, y the exact value):
 *  - relu: max(x, 0), NaN for NaN (torch.relu): exact, bound 0.
 *  - sigmoid, tanh: oracle.c's forms and bounds (ATen: 1 / (1 + exp(-x))
 *    with Sleef's exp, Sleef's tanh; CUDA's expf, tanhf).
 *  - hardsigmoid: y = clip(T, 0, 1), T = x/6 + 1/2, as clip(fl(x + 3), 0,
 *    6) / 6 (ATen), * fl(1/6) (CUDA), clip(fl(x fl(1/6) + 0.5), 0, 1), FMA or
 *    not (oneDNN), or fl(x / 6) + 0.5. Each clips an unclipped t (clipping x
 *    + 3 first is the same: / 6 is monotonic, fl(0 / 6) = 0, fl(6 / 6) =
 *    fl(6 fl(1/6)) = 1); with rD, aD the division's tolerance, |t - T| <=
 *      uw |x + 3| / 6 (1 + rD) + rD |T| + aD               (x + 3, then / 6),
 *      (|x| / 6 (2 uw + uw^2) + 2^-150)(1 + uw) + uw |T|   (x fl(1/6) + 0.5),
 *      (rD |x| / 6 + aD)(1 + uw) + uw |T|                  (x / 6 + 0.5);
 *    E the largest: clip is 1-Lipschitz, and where T < 0 (T > 1) the error
 *    is at most max(0, T + E) (max(0, E - (T - 1))), as oracle.c's.
 *  - gelu none: y = x/2 (1 + erf z), z = x / sqrt 2. z^ = fl(x fl(1/sqrt 2))
 *    or fl(x / fl(sqrt 2)): |z^ - z| <= ez = ((1 + uw)(1 + rD) - 1)|z| + aD;
 *    erf(z^) within max(E_ERF ulp, A_ERF): E_ERF = 2.5 (CUDA's erff: 2,
 *    glibc's: 1), A_ERF = 2^-20 = 9.5e-7 absolute, as vectorized erfs are
 *    short approximations: on every float in [0.5, 8] and samples elsewhere
 *    (torch 2.15, AVX-512) oneDNN's minimax GELU (PyTorch's path for
 *    contiguous float32) errs as an erf off by 6.3e-7, ATen's Abramowitz-
 *    Stegun 7.1.26 erf (1.5e-7 exactly evaluated) by 4.5e-7. erf(z^) is
 *    within ez (2/sqrt pi) exp(-zl^2) of erf z, zl = max(0, |z| - ez):
 *    e_erf, the sum. S = 1 + erf z: s^ = fl(1 + erf^) (0.5 + 0.5 erf^, an
 *    erfc within E_ERF ulp: less), |s^ - S| <= eS = e_erf + uw (S + e_erf),
 *    which for x << 0 carries erf^'s absolute error through the cancellation
 *    of 1 + erf; x/2 times s^ in any grouping (0.5 x may lose 2^-150):
 *      |r - y| <= |x|/2 eS (1 + uw) + uw |y| + 8 2^-150.
 *  - gelu tanh: y = x/2 (1 + tanh a), a = beta (x + kappa x^3), beta =
 *    sqrt(2/pi), kappa = 0.044715 (real; their roundings are the
 *    implementation's). x^3 in any grouping, kappa x^3, x + kappa x^3 (or x
 *    (1 + kappa x^2)): five roundings of terms of one sign, beta^ and its
 *    product two more (products underflow only for |x| < 2^-40): |a^ - a|
 *    <= ea = ((1 + uw)^2 (1 + gamma_5) - 1)|a| + 5 2^-150; tanh within
 *    E_TANH: T = tanh a off by ea sech^2(al) + rT (|T| + ea) + aT, al =
 *    max(0, |a| - ea); S = 1 + T as for none. Or x sigmoid(2a), any
 *    admissible sigmoid: 2 oracle_bnd_sigmoid at 2(a +- ea), times 1 + 8 ea.
 *    +Inf where x^3 could overflow.
 *  - sgd (PyTorch's single-tensor, foreach, fused): d = (maximize ? -g : g)
 *    + wd p; b = first ? d : mu buf + (1 - damp) d; d = nesterov ? d + mu b
 *    : b (momentum != 0); out = p - lr d, each product with its scalar.
 *  - adam, adamw: g' = +-g (+ wd p: adam); p' = p (1 - lr wd) or p - (lr
 *    wd) p (adamw); m = b1 m + (1 - b1) g' as b1 m + c g', the lerp m + c
 *    (g' - m) or its branch g' - fl(1 - c)(g' - m) (ATen's for weights >=
 *    1/2); v = b2 v + (1 - b2) g'^2 the same ways, g'^2 in either grouping;
 *    amsgrad: vm = max(vmax, v) (1-Lipschitz). c_k = 1 - b_k^t: pow in
 *    double within 2^-50 (Python's b ** t, the fused CPU kernel's), 1 - pw
 *    maybe rounded to float32; with gpu=1 also from b rounded to float32
 *    (CUDA's fused and capturable kernels; powf within E_POW, b^t off by
 *    b^t ((1 + uw)^t - 1) more, t as float32 beyond 2^24). The step Y = lr
 *    m / (c1 (sqrt(vm) / sqrt(c2) + eps)) as PyTorch's (lr / c1) m / D or
 *    (lr / c1)(m / D), D = sqrt(vm) / sqrt(c2) + eps; op.h's (lr (m / c1)) /
 *    (sqrt(vm / c2) + eps); the folded (lr sqrt(c2) / c1)(m / (sqrt(vm) +
 *    eps sqrt(c2))); capturable's m / (D / s), m / (sqrt(vm) / (sqrt(c2) s)
 *    + eps / s), s = 1 / (c1 / lr); out = p' - Y. The bound: the largest
 *    over the forms, from the computed m, v. Not admissible, as in
 *    oracle.c: eps unscaled in the folded form, b^t as a running product.
 *
 * Exact values: RN32 (ties to even, binary32 subnormals, overflow to Inf),
 * NaN for NaN. A fast path in double is taken where every real within its
 * proven error rounds alike (mc_cert), with libm's exp and tanh within
 * 2^-47 (glibc: 1, 2 ulp), erfc 2^-41, pow 2^-50; else MPFR: rational
 * values (hardsigmoid, sgd, adam's m, v) exactly; the others by Ziv loops
 * (precision doubled until the error bound decides RN32): transcendental or
 * irrational, never a rounding boundary, but for adam's out where sqrt(vm /
 * c2) is rational, settled past 2048 bits in exact rationals (GMP). Set
 * directly: sigmoid(x >= 20) = 1, (x <= -110) = +0; tanh(|x| >= 10) = +-1;
 * gelu(x >= 6) = x, (x <= -16) = -0, (-Inf) = NaN (-Inf (1 + erf(-Inf)));
 * gelu tanh (x >= 10) = x, (x <= -20) = -0. */
#include "modcheck_impl.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gmp.h>
#include <mpfr.h>

#include "oracle.h"
#include "oracle_impl.h"
#include "util.h"

#define MC_E_ERF 2.5
#define MC_A_ERF 0x1p-20
#define MC_RD (BND_E_DIV * 0x1p-23)
#define MC_AD (BND_E_DIV * 0x1p-149)
#define MC_RS (BND_E_SQRT * 0x1p-23)
#define MC_BETA 0.79788456080286535588 /* sqrt(2/pi) */
#define MC_KAPPA 0.044715

enum mc_kind { MC_RELU, MC_SIGMOID, MC_TANH, MC_HARDSIGMOID, MC_GELU, MC_GELU_TANH };

/* ---- rounding to float32 ------------------------------------------------------ */

/* RN32 of every real within e of a, when they all round alike (bitwise):
 * 1 and *out. e >= |a - exact|. The endpoints are moved outward one double. */
static int mc_cert(double a, double e, float *out)
{
    if (!isfinite(a) || !(e < INFINITY))
        return 0;
    float lo = (float)nextafter(a - e, -INFINITY), hi = (float)nextafter(a + e, INFINITY);
    *out = lo;
    return memcmp(&lo, &hi, sizeof lo) == 0;
}

/* RN32 of an exact MPFR number: rounded to the bits above float32's
 * quantum 2^max(E - 24, -149), ties to even; 2^128 and beyond overflow. */
static float mc_rn32(mpfr_srcptr x)
{
    if (mpfr_nan_p(x))
        return NAN;
    if (!mpfr_regular_p(x))
        return mpfr_get_flt(x, MPFR_RNDN);
    int neg = mpfr_sgn(x) < 0;
    mpfr_exp_t e = mpfr_get_exp(x); /* |x| in [2^(e-1), 2^e) */
    if (e > 128)
        return neg ? -INFINITY : INFINITY;
    float r;
    if (e <= -149) { /* below 2^-149: 0, or 2^-149 above the midpoint */
        int above = neg ? mpfr_cmp_si_2exp(x, -1, -150) < 0 : mpfr_cmp_ui_2exp(x, 1, -150) > 0;
        r = e == -149 && above ? 0x1p-149f : 0.0f;
    } else {
        mpfr_t t;
        mpfr_init2(t, (mpfr_prec_t)(e - (e - 24 > -149 ? e - 24 : -149)));
        mpfr_abs(t, x, MPFR_RNDN); /* to the quantum: ties to even */
        r = mpfr_get_flt(t, MPFR_RNDN); /* exact, or Inf from 2^128 */
        mpfr_clear(t);
    }
    return neg ? -r : r;
}

/* The float every real in [lo, hi] rounds to: 1 and *out, or 0. */
static int mc_decide(mpfr_srcptr lo, mpfr_srcptr hi, float *out)
{
    float a = mc_rn32(lo), b = mc_rn32(hi);
    *out = a;
    return memcmp(&a, &b, sizeof a) == 0;
}

/* ---- exact elementwise values ------------------------------------------------- */

/* Ziv steps: y ~ f(x) at y's precision p; returns k with |y - f(x)| <= k
 * 2^-p |y| (0: exact). Constants count each rounding (2^-p relative) with
 * margin for the second-order terms. */
static double mcz_sigmoid(mpfr_t y, float x) /* 1 / (1 + e^-x) */
{
    mpfr_set_flt(y, -x, MPFR_RNDN);
    mpfr_exp(y, y, MPFR_RNDN);
    mpfr_add_ui(y, y, 1, MPFR_RNDN);
    mpfr_ui_div(y, 1, y, MPFR_RNDN);
    return 4;
}

static double mcz_tanh(mpfr_t y, float x)
{
    mpfr_set_flt(y, x, MPFR_RNDN);
    return mpfr_tanh(y, y, MPFR_RNDN) ? 2 : 0;
}

static double mcz_hardsigmoid(mpfr_t y, float x) /* (x + 3) / 6, x + 3 exact in 256 bits */
{
    mpfr_t w;
    mpfr_init2(w, 256);
    mpfr_set_flt(w, x, MPFR_RNDN);
    mpfr_add_ui(w, w, 3, MPFR_RNDN);
    int in = mpfr_div_ui(y, w, 6, MPFR_RNDN);
    mpfr_clear(w);
    return in ? 2 : 0;
}

/* x/2 erfc(w), w = -x / sqrt 2 (1 + erf(z) = erfc(-z)); w has relative
 * error 3 2^-p, which erfc amplifies by its condition number |w erfc'(w) /
 * erfc(w)|: < 1 for w <= 0, < w (w + sqrt(w^2 + 2)) <= 2 w^2 + 2 w + 2 for
 * w > 0 (erfc(w) > 2 e^-w^2 / (sqrt pi (w + sqrt(w^2 + 2))), A&S 7.1.13). */
static double mcz_gelu(mpfr_t y, float x)
{
    mpfr_t w;
    mpfr_init2(w, mpfr_get_prec(y));
    mpfr_sqrt_ui(w, 2, MPFR_RNDN);
    mpfr_set_flt(y, -x, MPFR_RNDN);
    mpfr_div(w, y, w, MPFR_RNDN);
    double wd = mpfr_get_d(w, MPFR_RNDN), cond = wd > 0 ? 2 * wd * wd + 2 * wd + 2 : 1;
    mpfr_erfc(y, w, MPFR_RNDN);
    mpfr_mul_d(y, y, (double)x, MPFR_RNDN);
    mpfr_div_2ui(y, y, 1, MPFR_RNDN);
    mpfr_clear(w);
    return 4 + 4 * cond;
}

/* x / (1 + exp(-2a)) (x/2 (1 + tanh a) = x sigmoid(2a)): beta to 3 2^-p,
 * kappa 1, x^3 exact (p >= 72), a to 7 2^-p relative, so exp(-2a) to
 * 14 |a| 2^-p + 1 (+ second order), then three roundings. */
static double mcz_gelu_tanh(mpfr_t y, float x)
{
    mpfr_t w, k;
    mpfr_inits2(mpfr_get_prec(y), w, k, (mpfr_ptr)0);
    mpfr_const_pi(y, MPFR_RNDN);
    mpfr_ui_div(y, 2, y, MPFR_RNDN);
    mpfr_sqrt(y, y, MPFR_RNDN);
    mpfr_set_flt(w, x, MPFR_RNDN);
    mpfr_pow_ui(w, w, 3, MPFR_RNDN);
    mpfr_set_str(k, "0.044715", 10, MPFR_RNDN);
    mpfr_mul(w, w, k, MPFR_RNDN);
    mpfr_add_d(w, w, (double)x, MPFR_RNDN);
    mpfr_mul(w, w, y, MPFR_RNDN); /* a */
    double a = fabs(mpfr_get_d(w, MPFR_RNDN));
    mpfr_mul_si(w, w, -2, MPFR_RNDN);
    mpfr_exp(w, w, MPFR_RNDN);
    mpfr_add_ui(w, w, 1, MPFR_RNDN);
    mpfr_set_flt(y, x, MPFR_RNDN);
    mpfr_div(y, y, w, MPFR_RNDN);
    mpfr_clears(w, k, (mpfr_ptr)0);
    return 16 * a + 8;
}

/* RN32 of f(x): y at p bits within k 2^-p |y|, p doubled until decided. */
static float mc_ziv(double (*f)(mpfr_t, float), float x)
{
    for (mpfr_prec_t p = 128;; p *= 2) {
        DT_ASSERT(p <= (1 << 20), "modcheck: Ziv loop past 2^20 bits at x = %a", (double)x);
        mpfr_t y, d, lo, hi;
        mpfr_init2(y, p);
        mpfr_inits2(p + 64, d, lo, hi, (mpfr_ptr)0);
        double k = f(y, x);
        float r = mc_rn32(y);
        int ok = k == 0 || !mpfr_regular_p(y);
        if (!ok) { /* [y - d, y + d], d = k 2^-p |y| */
            mpfr_abs(d, y, MPFR_RNDU);
            mpfr_mul_d(d, d, k, MPFR_RNDU);
            mpfr_mul_2si(d, d, -(long)p, MPFR_RNDU);
            mpfr_sub(lo, y, d, MPFR_RNDD);
            mpfr_add(hi, y, d, MPFR_RNDU);
            ok = mc_decide(lo, hi, &r);
        }
        mpfr_clears(y, d, lo, hi, (mpfr_ptr)0);
        if (ok)
            return r;
    }
}

/* The exact value of an elementwise module at x: a fast path in double
 * (errors: the file's opening comment), else a Ziv loop. */
static float mc_exact_unary(enum mc_kind k, float x)
{
    if (isnan(x))
        return NAN;
    double xd = x, a, e;
    float r;
    switch (k) {
    case MC_RELU: return x > 0 ? x : 0.0f;
    case MC_SIGMOID:
        if (x >= 20 || x <= -110)
            return x > 0 ? 1.0f : 0.0f;
        a = 1 / (1 + exp(-xd));
        return mc_cert(a, 0x1p-46 * a, &r) ? r : mc_ziv(mcz_sigmoid, x); /* exp, +, / */
    case MC_TANH:
        if (fabsf(x) >= 10 || x == 0)
            return x == 0 ? x : copysignf(1.0f, x);
        a = tanh(xd);
        return mc_cert(a, 0x1p-46 * fabs(a), &r) ? r : mc_ziv(mcz_tanh, x);
    case MC_HARDSIGMOID:
        if (x <= -3 || x >= 3)
            return x > 0 ? 1.0f : 0.0f;
        a = (xd + 3) / 6;
        return mc_cert(a, 0x1p-50 * a, &r) ? r : mc_ziv(mcz_hardsigmoid, x);
    case MC_GELU:
        if (x == 0 || x >= 6 || x <= -16)
            return x > -16 ? x : isinf(x) ? NAN : -0.0f;
        a = -xd * 0.70710678118654752440;
        e = (0x1p-40 + (a > 0 ? 2 * a * a + 2 * a + 2 : 1) * 0x1p-51) * 1.01;
        a = 0.5 * xd * erfc(a);
        return mc_cert(a, e * fabs(a), &r) ? r : mc_ziv(mcz_gelu, x);
    case MC_GELU_TANH:
        if (x == 0 || x >= 10 || x <= -20)
            return x > -20 ? x : isinf(x) ? NAN : -0.0f;
        a = MC_BETA * (xd + MC_KAPPA * (xd * xd * xd));
        e = fabs(a) * 0x1p-48 + 0x1p-45;
        a = xd / (1 + exp(-2 * a));
        return mc_cert(a, e * fabs(a), &r) ? r : mc_ziv(mcz_gelu_tanh, x);
    }
    return NAN;
}

/* ---- elementwise bounds --------------------------------------------------------- */

static double mc_bnd_hardsigmoid(float x)
{
    double ax = fabs((double)x), t = (double)x / 6 + 0.5, at = fabs(t);
    double ea = BND_uw * fabs((double)x + 3) / 6 * (1 + MC_RD) + MC_RD * at + MC_AD;
    double ec = (ax / 6 * (2 * BND_uw + BND_uw * BND_uw) + BND_ETA) * (1 + BND_uw) + BND_uw * at;
    double ed = (MC_RD * ax / 6 + MC_AD) * (1 + BND_uw) + BND_uw * at;
    double e = fmax(ea, fmax(ec, ed)) * (1 + 0x1p-40) + 0x1p-52 * at;
    return t < 0 ? fmax(0, t + e) : t > 1 ? fmax(0, e - (t - 1)) : e;
}

static double mc_bnd_gelu(float x)
{
    double ax = fabs((double)x), z = ax * 0.70710678118654752440;
    if (oracle_bnd_ovf(2 * ax)) /* x (1 + erf) */
        return INFINITY;
    double ez = ((1 + BND_uw) * (1 + MC_RD) - 1) * z + MC_AD;
    double zl = fmax(0, z - ez), dz = ez * 1.1283791670955126 * exp(-zl * zl);
    double er = erf(z) * (1 + 0x1p-40);
    double e = dz + fmax(oracle_bnd_rel(MC_E_ERF) * (er + dz) + oracle_bnd_abs(MC_E_ERF), MC_A_ERF);
    double S = x < 0 ? erfc(z) : 1 + er;
    double eS = e + BND_uw * (S + e); /* then x/2 s^ */
    return ax / 2 * eS * (1 + BND_uw) + BND_uw * ax / 2 * S + 8 * BND_ETA;
}

static double mc_bnd_gelu_tanh(float x)
{
    double ax = fabs((double)x);
    if (oracle_bnd_ovf(ax * ax * ax * (1 + 0x1p-20)) || oracle_bnd_ovf(2 * ax))
        return INFINITY;
    double a = MC_BETA * (ax + MC_KAPPA * ax * ax * ax) * (1 + 0x1p-50);
    double ea = ((1 + BND_uw) * (1 + BND_uw) * (1 + oracle_bnd_gamma(5, BND_u)) - 1) * a;
    ea += 5 * BND_ETA;
    double T = tanh(a) * (1 + 0x1p-40), ch = cosh(fmax(0, a - ea));
    double sg = x < 0 ? -1 : 1, S = x < 0 ? 2 / (1 + exp(2 * a)) : 1 + T, prop = ea / (ch * ch);
    double eT = prop + oracle_bnd_rel(BND_E_TANH) * (T + ea) + oracle_bnd_abs(BND_E_TANH);
    double eS = eT + BND_uw * (S + eT);
    double es = fmax(oracle_bnd_sigmoid(2 * sg * (a - ea)), oracle_bnd_sigmoid(2 * sg * (a + ea)));
    eS = fmax(eS, prop + 2 * es * (1 + 8 * ea));
    return ax / 2 * eS * (1 + BND_uw) + BND_uw * ax / 2 * S + 8 * BND_ETA;
}

static double mc_bnd_unary(enum mc_kind k, float x)
{
    if (k == MC_RELU || !isfinite(x))
        return k == MC_RELU ? 0 : INFINITY;
    double b = k == MC_SIGMOID ? oracle_bnd_sigmoid(x) : k == MC_TANH ? oracle_bnd_tanh(x)
               : k == MC_HARDSIGMOID ? mc_bnd_hardsigmoid(x) : k == MC_GELU ? mc_bnd_gelu(x)
                                                                : mc_bnd_gelu_tanh(x);
    return b * BND_UP;
}

/* ---- tensors ---------------------------------------------------------------------- */

/* t, or NULL with dt_error set when it is not shaped like ref (or its data
 * is missing). */
static const struct modcheck_tensor *mc_like(const struct modcheck_tensor *t,
                                             const struct modcheck_tensor *ref, const char *type)
{
    if (!t)
        return NULL;
    int ok = t->ndim == ref->ndim && t->count == ref->count && (t->data || !t->count);
    for (int d = 0; ok && d < t->ndim && d < 8; d++)
        ok = t->shape[d] == ref->shape[d];
    if (!ok) {
        dt_error_set("%s check: '%s' is not shaped like '%s'", type, t->role, ref->role);
        return NULL;
    }
    return t;
}

/* A hyperparameter, finite and >= lo (def NaN: required): 0, or -1 with
 * dt_error set. */
static int mc_hyper(const struct mc_spec *sp, const char *key, double def, double lo, double *out)
{
    const char *v = mc_get(sp, key);
    if (!v && isnan(def)) {
        dt_error_set("%s: no %s", sp->type, key);
        return DT_ERR;
    }
    if (mc_num(sp, key, def, out) < 0)
        return DT_ERR;
    if (!isfinite(*out) || *out < lo) {
        dt_error_set("%s: %s=%s is out of range", sp->type, key, v ? v : "?");
        return DT_ERR;
    }
    return DT_OK;
}

/* A key of 0 or 1, 0 when absent. */
static int mc_flag(const struct mc_spec *sp, const char *key, int *out)
{
    double v = 0;
    int rc = mc_hyper(sp, key, 0, 0, &v);
    if (rc == DT_OK && v != 0 && v != 1) {
        dt_error_set("%s: %s=%s is not 0 or 1", sp->type, key, mc_get(sp, key));
        rc = DT_ERR;
    }
    *out = v == 1;
    return rc;
}

int mc_elementwise(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
                   struct modcheck_result *res, char *why, size_t nwhy)
{
    static const char *const name[] = {"relu", "sigmoid", "tanh", "hardsigmoid", "gelu"};
    enum mc_kind k = MC_RELU;
    while (k < MC_GELU && strcmp(sp->type, name[k]) != 0)
        k++;
    const char *ap = mc_get(sp, "approximate");
    if (k == MC_GELU && ap && strcmp(ap, "tanh") == 0)
        k = MC_GELU_TANH;
    else if (k == MC_GELU && ap && strcmp(ap, "none") != 0) {
        dt_error_set("gelu: approximate=%s is not none or tanh", ap);
        return DT_ERR;
    }
    const struct modcheck_tensor *in = mc_need(t, nt, "in.0", sp->type);
    const struct modcheck_tensor *out = in ? mc_need(t, nt, "out", sp->type) : NULL;
    if (!in || !mc_like(out, in, sp->type))
        return DT_ERR;
    struct modcheck_output *o = mc_output(res, "out", out);
    for (uint64_t i = 0; i < in->count; i++) {
        o->exact[i] = mc_exact_unary(k, in->data[i]);
        o->bound[i] = mc_bnd_unary(k, in->data[i]);
    }
    return DT_OK;
}

/* ---- running errors ------------------------------------------------------------- */

struct mcv {
    double x, e; /* the value (an approximation of the exact one), the error bound */
};

/* The arithmetic whose errors are counted: float32 (the admissible
 * evaluations) or double (the fast path of the exact values). */
struct mcm {
    double u, eta, rd, ad, rs; /* +, *: u; products' underflow; /; sqrt */
    double us;                 /* a hyperparameter's conversion */
    double lim;                /* magnitudes from here on: no claim */
};

static const struct mcm MC_F32 = {BND_uw, BND_ETA, MC_RD, MC_AD, MC_RS, BND_uw,
                                  FLT_MAX * (1 - 0x1p-20)};
static const struct mcm MC_F64 = {0x1p-53, 0x1p-1074, 0x1p-53, 0x1p-1074, 0x1p-53, 0, DBL_MAX};

/* An operation's result x, propagated error prop, its rounding (abs: the
 * underflow of a product or quotient of nonzero operands). */
static struct mcv mcv_round(const struct mcm *M, double x, double prop, double rel, double abs)
{
    double e = prop + rel * (fabs(x) * (1 + 0x1p-50) + prop) + abs;
    if (!isfinite(x) || !(fabs(x) + e < M->lim))
        e = INFINITY;
    return (struct mcv){x, e};
}

static int mcv_zero(struct mcv a) { return a.x == 0 && a.e == 0; }

static struct mcv mcv_mul(const struct mcm *M, struct mcv a, struct mcv b)
{
    return mcv_round(M, a.x * b.x, fabs(a.x) * b.e + fabs(b.x) * a.e + a.e * b.e, M->u,
                     mcv_zero(a) || mcv_zero(b) ? 0 : M->eta);
}

static struct mcv mcv_add(const struct mcm *M, struct mcv a, struct mcv b)
{
    return mcv_round(M, a.x + b.x, a.e + b.e, M->u, 0);
}

static struct mcv mcv_div(const struct mcm *M, struct mcv a, struct mcv b)
{
    if (!(b.e < fabs(b.x)))
        return (struct mcv){a.x / b.x, INFINITY};
    double q = a.x / b.x;
    double prop = (a.e + fabs(q) * b.e) / (fabs(b.x) - b.e);
    return mcv_round(M, q, prop, M->rd, mcv_zero(a) ? 0 : M->ad);
}

static struct mcv mcv_sqrt(const struct mcm *M, struct mcv a)
{
    double s = sqrt(fmax(a.x, 0));
    return mcv_round(M, s, s > 0 ? fmin(a.e / s, sqrt(a.e)) : sqrt(a.e), M->rs, 0);
}

static struct mcv mcv_neg(struct mcv a) { return (struct mcv){-a.x, a.e}; }

static struct mcv mcv_max(struct mcv a, struct mcv b) { return (struct mcv){a.x, fmax(a.e, b.e)}; }

/* A hyperparameter: exact when it is a float (either way it is used). */
static struct mcv mcv_hyper(const struct mcm *M, double s)
{
    return (struct mcv){s, (double)(float)s == s ? 0 : M->us * fabs(s)};
}

/* A scalar derived in double, ed its double error, then possibly float32. */
static struct mcv mcv_derived(const struct mcm *M, double x, double ed)
{
    return (struct mcv){x, ed + M->us * (fabs(x) + ed)};
}

/* b a + c T in the three forms of the opening comment (all: each, the
 * largest error; else the first). */
static struct mcv mcv_ema(const struct mcm *M, struct mcv b, struct mcv c, struct mcv a,
                          struct mcv T, int all)
{
    struct mcv r = mcv_add(M, mcv_mul(M, b, a), mcv_mul(M, c, T));
    if (all) {
        r = mcv_max(r, mcv_add(M, a, mcv_mul(M, c, mcv_add(M, T, mcv_neg(a)))));
        struct mcv bp = mcv_add(M, (struct mcv){1, 0}, mcv_neg(c));
        r = mcv_max(r, mcv_add(M, T, mcv_mul(M, bp, mcv_add(M, a, mcv_neg(T)))));
    }
    return r;
}

/* ---- sgd --------------------------------------------------------------------------- */

struct mc_sgd {
    double lr, mu, damp, wd;
    int nesterov, maximize, first;
};

/* out[0] the parameter, out[1] the momentum buffer (momentum != 0). */
static void mc_sgd_eval(const struct mcm *M, const struct mc_sgd *S, float p, float g, float buf,
                        struct mcv out[2])
{
    struct mcv P = {p, 0}, d = {S->maximize ? -(double)g : g, 0};
    if (S->wd != 0)
        d = mcv_add(M, d, mcv_mul(M, mcv_hyper(M, S->wd), P));
    if (S->mu != 0) {
        double c = 1 - S->damp;
        struct mcv mu = mcv_hyper(M, S->mu), a = {1, 0};
        if (S->damp != 0)
            a = mcv_derived(M, c, 0x1p-52 * fabs(c));
        out[1] = S->first ? d : mcv_add(M, mcv_mul(M, mu, (struct mcv){buf, 0}), mcv_mul(M, a, d));
        d = S->nesterov ? mcv_add(M, d, mcv_mul(M, mu, out[1])) : out[1];
    }
    out[0] = mcv_add(M, P, mcv_mul(M, mcv_hyper(M, -S->lr), d));
}

/* The exact values: each MPFR operation exact (checked), the precision
 * raised until they are; o[0], o[1] as mc_sgd_eval. */
static void mc_sgd_exact(const struct mc_sgd *S, float p, float g, float buf, float o[2])
{
    for (mpfr_prec_t pr = 256, in = 1; in; pr *= 16) {
        DT_ASSERT(pr <= 65536, "modcheck: sgd not exact in %ld bits", (long)pr);
        mpfr_t P, d, b, t, s;
        mpfr_inits2(pr, P, d, b, t, s, (mpfr_ptr)0);
        in = mpfr_set_flt(P, p, MPFR_RNDN) | mpfr_set_flt(d, S->maximize ? -g : g, MPFR_RNDN);
        mpfr_set_d(s, S->wd, MPFR_RNDN);
        if (S->wd != 0) /* d = g' + wd p */
            in |= mpfr_fma(d, s, P, d, MPFR_RNDN);
        mpfr_set_d(s, S->mu, MPFR_RNDN);
        mpfr_set_d(t, S->damp, MPFR_RNDN);
        in |= mpfr_ui_sub(t, 1, t, MPFR_RNDN) | mpfr_mul(b, d, t, MPFR_RNDN);
        mpfr_set_flt(t, buf, MPFR_RNDN);
        in |= S->first ? mpfr_set(b, d, MPFR_RNDN) : mpfr_fma(b, s, t, b, MPFR_RNDN);
        if (S->mu != 0)
            in |= S->nesterov ? mpfr_fma(d, s, b, d, MPFR_RNDN) : mpfr_set(d, b, MPFR_RNDN);
        mpfr_set_d(s, -S->lr, MPFR_RNDN);
        in |= mpfr_fma(P, s, d, P, MPFR_RNDN);
        o[0] = mc_rn32(P);
        o[1] = mc_rn32(b);
        mpfr_clears(P, d, b, t, s, (mpfr_ptr)0);
    }
}

int mc_sgd(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
           struct modcheck_result *res, char *why, size_t nwhy)
{
    struct mc_sgd S;
    if (mc_hyper(sp, "lr", NAN, 0, &S.lr) < 0 || mc_hyper(sp, "momentum", 0, 0, &S.mu) < 0 ||
        mc_hyper(sp, "dampening", 0, -INFINITY, &S.damp) < 0 ||
        mc_hyper(sp, "weight_decay", 0, 0, &S.wd) < 0 || mc_flag(sp, "nesterov", &S.nesterov) < 0 ||
        mc_flag(sp, "maximize", &S.maximize) < 0)
        return DT_ERR;
    const struct modcheck_tensor *p = mc_need(t, nt, "param", "sgd"), *g = NULL, *out = NULL;
    if (!p || !mc_like(g = mc_need(t, nt, "grad", "sgd"), p, "sgd") ||
        !mc_like(out = mc_need(t, nt, "out", "sgd"), p, "sgd"))
        return DT_ERR;
    const struct modcheck_tensor *buf = mc_find(t, nt, "state.momentum_buffer");
    const struct modcheck_tensor *bout = mc_find(t, nt, "state_out.momentum_buffer");
    S.first = !buf;
    if (mc_get(sp, "first") && mc_flag(sp, "first", &S.first) < 0)
        return DT_ERR;
    if (S.mu != 0 && !S.first && !mc_like(mc_need(t, nt, "state.momentum_buffer", "sgd"), p, "sgd"))
        return DT_ERR;
    if ((bout && !mc_like(bout, p, "sgd")) || (buf && !mc_like(buf, p, "sgd")))
        return DT_ERR;
    struct modcheck_output *o = mc_output(res, "out", out), *ob = NULL;
    if (S.mu != 0 && bout)
        ob = mc_output(res, "state_out.momentum_buffer", bout);
    for (uint64_t i = 0; i < p->count; i++) {
        float pv = p->data[i], gv = g->data[i], bv = buf && !S.first ? buf->data[i] : 0;
        float ex[2] = {0, 0};
        struct mcv r[2] = {{0, 0}, {0, 0}}, f[2] = {{0, 0}, {0, 0}};
        mc_sgd_eval(&MC_F64, &S, pv, gv, bv, f);
        if (!mc_cert(f[0].x, f[0].e, &ex[0]) || (S.mu != 0 && !mc_cert(f[1].x, f[1].e, &ex[1])))
            mc_sgd_exact(&S, pv, gv, bv, ex);
        mc_sgd_eval(&MC_F32, &S, pv, gv, bv, r);
        o->exact[i] = ex[0];
        o->bound[i] = r[0].e * BND_UP;
        if (ob) {
            ob->exact[i] = ex[1];
            ob->bound[i] = r[1].e * BND_UP;
        }
    }
    return DT_OK;
}

/* ---- adam, adamw ------------------------------------------------------------------- */

struct mc_adam {
    double lr, b1, b2, eps, wd;
    int adamw, amsgrad, maximize, gpu;
    uint64_t t;
    struct mcv c[2][2]; /* [model: F32, F64][c1, c2] */
};

/* c = 1 - b^t and the bound on a computed one (the opening comment). */
static struct mcv mc_adam_c(const struct mc_adam *A, double b, const struct mcm *M)
{
    double t = (double)A->t;
    if (b == 0)
        return (struct mcv){1, 0};
    if (M == &MC_F64) { /* pow within 2^-50, 1 - pw rounded */
        double pw = pow(b, t), c = 1 - pw;
        return (struct mcv){c, 0x1p-50 * pw + 0x1p-52 * fabs(c)};
    }
    double lb = log(b), bt = exp(t * lb) * (1 + 0x1p-40), c = -expm1(t * lb);
    double rb = A->gpu ? expm1(t * log1p(BND_uw)) : 0;
    double rt = A->gpu && A->t > (UINT64_C(1) << 24) ? expm1(BND_uw * t * fabs(lb)) : 0;
    double rp = A->gpu ? oracle_bnd_rel(BND_E_POW) : 0x1p-50;
    double ap = A->gpu ? oracle_bnd_abs(BND_E_POW) : 0x1p-1074;
    double ep = ((rp + 1) * (1 + rb) * (1 + rt) - 1) * bt + ap;
    return (struct mcv){c, (ep * (1 + BND_uw) + BND_uw * c) * (1 + 0x1p-40)};
}

struct mc_adam_out {
    struct mcv p, m, v, vm; /* out, exp_avg, exp_avg_sq, max_exp_avg_sq */
};

/* The update in model M: all forms (the bound) or PyTorch's alone. */
static void mc_adam_eval(const struct mcm *M, const struct mc_adam *A, const float *in,
                         int all, struct mc_adam_out *o)
{
    struct mcv P = {in[0], 0}, G = {A->maximize ? -(double)in[1] : in[1], 0};
    struct mcv Mo = {in[2], 0}, Vo = {in[3], 0};
    int k = M == &MC_F64;
    if (A->wd != 0 && !A->adamw)
        G = mcv_add(M, G, mcv_mul(M, mcv_hyper(M, A->wd), P));
    if (A->wd != 0 && A->adamw) {
        double q = A->lr * A->wd, s = 1 - q;
        struct mcv P1 = mcv_mul(M, P, mcv_derived(M, s, 0x1p-52 * (q + fabs(s))));
        if (all)
            P1 = mcv_max(P1, mcv_add(M, P, mcv_neg(mcv_mul(M, mcv_derived(M, q, 0x1p-52 * q), P))));
        P = P1;
    }
    double c1 = 1 - A->b1, c2 = 1 - A->b2;
    o->m = mcv_ema(M, mcv_hyper(M, A->b1), mcv_derived(M, c1, 0x1p-52 * c1), Mo, G, all);
    struct mcv B2 = mcv_hyper(M, A->b2), C2 = mcv_derived(M, c2, 0x1p-52 * c2);
    o->v = mcv_ema(M, B2, C2, Vo, mcv_mul(M, G, G), all);
    if (all)
        o->v = mcv_max(o->v, mcv_add(M, mcv_mul(M, B2, Vo), mcv_mul(M, mcv_mul(M, C2, G), G)));
    o->vm = A->amsgrad ? (struct mcv){fmax(in[4], o->v.x), o->v.e} : o->v;
    struct mcv K1 = A->c[k][0], K2 = A->c[k][1], L = mcv_hyper(M, A->lr), E = mcv_hyper(M, A->eps);
    struct mcv sv = mcv_sqrt(M, o->vm), sc = mcv_sqrt(M, K2), Mn = o->m;
    struct mcv D = mcv_add(M, mcv_div(M, sv, sc), E), ss = mcv_div(M, L, K1);
    struct mcv Y = mcv_div(M, mcv_mul(M, ss, Mn), D);
    if (all) {
        Y = mcv_max(Y, mcv_mul(M, ss, mcv_div(M, Mn, D)));
        Y = mcv_max(Y, mcv_div(M, mcv_mul(M, L, mcv_div(M, Mn, K1)),
                               mcv_add(M, mcv_sqrt(M, mcv_div(M, o->vm, K2)), E)));
        Y = mcv_max(Y, mcv_mul(M, mcv_div(M, mcv_mul(M, L, sc), K1),
                               mcv_div(M, Mn, mcv_add(M, sv, mcv_mul(M, E, sc)))));
        struct mcv s2 = mcv_div(M, (struct mcv){1, 0}, mcv_div(M, K1, L));
        Y = mcv_max(Y, mcv_div(M, Mn, mcv_div(M, D, s2)));
        Y = mcv_max(Y, mcv_div(M, Mn, mcv_add(M, mcv_div(M, sv, mcv_mul(M, sc, s2)),
                                               mcv_div(M, E, s2))));
    }
    o->p = mcv_add(M, P, mcv_neg(Y));
}

/* The rational part exactly in pr bits: g', m, v, vm, p'; 0 when some
 * operation was inexact. */
static int mc_adam_rat(const struct mc_adam *A, const float *in, mpfr_t m, mpfr_t v, mpfr_t vm,
                       mpfr_t p)
{
    mpfr_prec_t pr = mpfr_get_prec(m);
    mpfr_t g, s, w;
    mpfr_inits2(pr, g, s, w, (mpfr_ptr)0);
    int x = mpfr_set_flt(p, in[0], MPFR_RNDN);
    x |= mpfr_set_flt(g, A->maximize ? -in[1] : in[1], MPFR_RNDN);
    mpfr_set_d(s, A->wd, MPFR_RNDN);
    if (A->wd != 0 && !A->adamw)
        x |= mpfr_fma(g, s, p, g, MPFR_RNDN);
    if (A->wd != 0 && A->adamw) {
        x |= mpfr_mul_d(s, s, A->lr, MPFR_RNDN);
        x |= mpfr_ui_sub(s, 1, s, MPFR_RNDN);
        x |= mpfr_mul(p, p, s, MPFR_RNDN);
    }
    mpfr_set_d(s, A->b1, MPFR_RNDN); /* m = b1 m + (1 - b1) g = g + b1 (m - g) */
    x |= mpfr_set_flt(m, in[2], MPFR_RNDN) | mpfr_sub(m, m, g, MPFR_RNDN);
    x |= mpfr_fma(m, s, m, g, MPFR_RNDN);
    x |= mpfr_sqr(g, g, MPFR_RNDN); /* v = g^2 + b2 (v - g^2) */
    mpfr_set_d(s, A->b2, MPFR_RNDN);
    x |= mpfr_set_flt(v, in[3], MPFR_RNDN) | mpfr_sub(v, v, g, MPFR_RNDN);
    x |= mpfr_fma(v, s, v, g, MPFR_RNDN);
    mpfr_set_flt(w, A->amsgrad ? in[4] : 0, MPFR_RNDN);
    if (A->amsgrad && (mpfr_nan_p(v) || mpfr_nan_p(w)))
        mpfr_set_nan(vm); /* torch.maximum propagates NaN */
    else
        x |= A->amsgrad ? mpfr_max(vm, v, w, MPFR_RNDN) : mpfr_set(vm, v, MPFR_RNDN);
    mpfr_clears(g, s, w, (mpfr_ptr)0);
    return !x;
}

/* Exact rationals (GMP) for a value Ziv cannot settle: sqrt(vm / c2)
 * rational makes out rational, computed exactly and rounded (brackets
 * narrowed until they decide). 0 when sqrt(vm / c2) is irrational: out is
 * then no rounding boundary. */
static int mc_adam_tie(const struct mc_adam *A, mpfr_srcptr mm, mpfr_srcptr vm, mpfr_srcptr pp,
                       float *out)
{
    mpq_t c[2], w, q;
    mpq_inits(c[0], c[1], w, q, (mpq_ptr)0);
    for (int k = 0; k < 2; k++) { /* c_k = 1 - b^t */
        mpq_set_d(c[k], k ? A->b2 : A->b1);
        mpz_pow_ui(mpq_numref(c[k]), mpq_numref(c[k]), A->t);
        mpz_pow_ui(mpq_denref(c[k]), mpq_denref(c[k]), A->t);
        mpz_sub(mpq_numref(c[k]), mpq_denref(c[k]), mpq_numref(c[k]));
        mpq_canonicalize(c[k]);
    }
    mpfr_get_q(w, vm);
    mpq_div(w, w, c[1]);
    int ok = mpz_perfect_square_p(mpq_numref(w)) && mpz_perfect_square_p(mpq_denref(w));
    if (ok) { /* p' - lr m / (c1 (sqrt(w) + eps)) */
        mpz_sqrt(mpq_numref(w), mpq_numref(w));
        mpz_sqrt(mpq_denref(w), mpq_denref(w));
        mpq_set_d(q, A->eps);
        mpq_add(w, w, q);
        mpq_mul(w, w, c[0]);
        mpfr_get_q(c[0], mm);
        mpq_set_d(q, A->lr);
        mpq_mul(c[0], c[0], q);
        mpq_div(w, c[0], w);
        mpfr_get_q(q, pp);
        mpq_sub(w, q, w);
        for (mpfr_prec_t pr = 64, done = 0; !done; pr *= 2) {
            mpfr_t lo, hi;
            mpfr_inits2(pr, lo, hi, (mpfr_ptr)0);
            mpfr_set_q(lo, w, MPFR_RNDD);
            mpfr_set_q(hi, w, MPFR_RNDU);
            done = mc_decide(lo, hi, out);
            mpfr_clears(lo, hi, (mpfr_ptr)0);
        }
    }
    mpq_clears(c[0], c[1], w, q, (mpq_ptr)0);
    return ok;
}

/* The exact out by MPFR: the rational part exact, then Ziv on
 * X = p' - lr m / (c1 (sqrt(vm / c2) + eps)) with, in units of 2^-q
 * relative: c_k = 1 - RN(b^t) within b^t / c_k + 1 (each rounding 2^-q);
 * vm / c2 +1, sqrt halves and +1, + eps +1, lr m 1, c1 D +1, the quotient
 * +1; X = p' - Y within 2^-q (k_Y |Y| + |X|). Where Y is 0, Inf or NaN
 * (lr m = 0, vm = eps = 0, an input not finite) X is computed in p''s
 * precision, exactly. */
static void mc_adam_exact(const struct mc_adam *A, const float *in, float o[4])
{
    mpfr_t m, v, vm, p;
    mpfr_prec_t pr = 256;
    for (;; pr *= 16) {
        DT_ASSERT(pr <= 65536, "modcheck: adam not exact in %ld bits", (long)pr);
        mpfr_inits2(pr, m, v, vm, p, (mpfr_ptr)0);
        if (mc_adam_rat(A, in, m, v, vm, p))
            break;
        mpfr_clears(m, v, vm, p, (mpfr_ptr)0);
    }
    o[1] = mc_rn32(m);
    o[2] = mc_rn32(v);
    o[3] = mc_rn32(vm);
    int special = !mpfr_number_p(m) || !mpfr_number_p(vm) || !mpfr_number_p(p) || mpfr_zero_p(m) ||
                  A->lr == 0 || (mpfr_zero_p(vm) && A->eps == 0);
    for (mpfr_prec_t q = special ? pr : 128;; q *= 2) {
        DT_ASSERT(q <= (1 << 20), "modcheck: adam's Ziv loop past 2^20 bits");
        mpfr_t c[2], y, w, d;
        double k[2];
        mpfr_inits2(q, c[0], c[1], y, w, (mpfr_ptr)0);
        mpfr_init2(d, q + 64);
        for (int j = 0; j < 2; j++) { /* c_j = 1 - b^t */
            mpfr_set_d(y, j ? A->b2 : A->b1, MPFR_RNDN);
            mpfr_pow_ui(y, y, A->t, MPFR_RNDN);
            mpfr_ui_sub(c[j], 1, y, MPFR_RNDN);
            k[j] = mpfr_get_d(y, MPFR_RNDU) / mpfr_get_d(c[j], MPFR_RNDD) * 1.01 + 1.01;
        }
        mpfr_div(w, vm, c[1], MPFR_RNDN);
        mpfr_sqrt(w, w, MPFR_RNDN);
        mpfr_add_d(w, w, A->eps, MPFR_RNDN);
        mpfr_mul(w, w, c[0], MPFR_RNDN);
        mpfr_mul_d(y, m, A->lr, MPFR_RNDN);
        mpfr_div(y, y, w, MPFR_RNDN); /* Y */
        mpfr_sub(w, p, y, MPFR_RNDN);
        int ok = 1;
        if (special) {
            o[0] = mc_rn32(w);
        } else { /* d = 1.01 (k_Y |Y| + |X|) 2^-q; [X - d, X + d] */
            mpfr_abs(d, y, MPFR_RNDU);
            mpfr_mul_d(d, d, (k[0] + (k[1] + 1) / 2 + 7) * 1.01, MPFR_RNDU);
            mpfr_abs(c[0], w, MPFR_RNDU);
            mpfr_add(d, d, c[0], MPFR_RNDU);
            mpfr_mul_d(d, d, 1.01, MPFR_RNDU);
            mpfr_mul_2si(d, d, -(long)q, MPFR_RNDU);
            mpfr_set_prec(c[0], q + 64);
            mpfr_set_prec(c[1], q + 64);
            mpfr_sub(c[0], w, d, MPFR_RNDD);
            mpfr_add(c[1], w, d, MPFR_RNDU);
            ok = mc_decide(c[0], c[1], &o[0]);
            if (!ok && q == 2048)
                ok = mc_adam_tie(A, m, vm, p, &o[0]);
        }
        mpfr_clears(c[0], c[1], y, w, d, (mpfr_ptr)0);
        if (ok)
            break;
    }
    mpfr_clears(m, v, vm, p, (mpfr_ptr)0);
}

int mc_adam(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
            struct modcheck_result *res, char *why, size_t nwhy)
{
    struct mc_adam A;
    double step;
    A.adamw = strcmp(sp->type, "adamw") == 0;
    if (mc_hyper(sp, "lr", NAN, 0, &A.lr) < 0 ||
        mc_hyper(sp, "beta1", 0.9, 0, &A.b1) < 0 || mc_hyper(sp, "beta2", 0.999, 0, &A.b2) < 0 ||
        mc_hyper(sp, "eps", 1e-8, 0, &A.eps) < 0 ||
        mc_hyper(sp, "weight_decay", A.adamw ? 1e-2 : 0, 0, &A.wd) < 0 ||
        mc_flag(sp, "amsgrad", &A.amsgrad) < 0 || mc_flag(sp, "maximize", &A.maximize) < 0 ||
        mc_flag(sp, "gpu", &A.gpu) < 0 || mc_hyper(sp, "step", NAN, 1, &step) < 0)
        return DT_ERR;
    if (A.b1 >= 1 || A.b2 >= 1 || step != floor(step) || step > 0x1p53) {
        dt_error_set("%s: beta1=%g beta2=%g step=%g: betas must be in [0, 1), step a "
                     "positive integer", sp->type, A.b1, A.b2, step);
        return DT_ERR;
    }
    A.t = (uint64_t)step;
    static const char *const role[5] = {"param", "grad", "state.exp_avg", "state.exp_avg_sq",
                                        "state.max_exp_avg_sq"};
    static const char *const orole[4] = {"out", "state_out.exp_avg", "state_out.exp_avg_sq",
                                         "state_out.max_exp_avg_sq"};
    const struct modcheck_tensor *x[5] = {NULL}, *y[4] = {NULL};
    if (!(x[0] = mc_need(t, nt, role[0], sp->type)))
        return DT_ERR;
    for (int k = 1; k < 4 + A.amsgrad; k++)
        if (!mc_like(x[k] = mc_need(t, nt, role[k], sp->type), x[0], sp->type))
            return DT_ERR;
    if (!mc_like(y[0] = mc_need(t, nt, "out", sp->type), x[0], sp->type))
        return DT_ERR;
    struct modcheck_output *o[4] = {NULL};
    for (int k = 0; k < 3 + A.amsgrad; k++) {
        if (k && !(y[k] = mc_find(t, nt, orole[k])))
            continue;
        if (!mc_like(y[k], x[0], sp->type))
            return DT_ERR;
        o[k] = mc_output(res, orole[k], y[k]);
    }
    for (int k = 0; k < 2; k++) {
        A.c[0][k] = mc_adam_c(&A, k ? A.b2 : A.b1, &MC_F32);
        A.c[1][k] = mc_adam_c(&A, k ? A.b2 : A.b1, &MC_F64);
    }
    for (uint64_t i = 0; i < x[0]->count; i++) {
        float in[5] = {0}, ex[4] = {0, 0, 0, 0};
        for (int k = 0; k < 4 + A.amsgrad; k++)
            in[k] = x[k]->data[i];
        struct mc_adam_out f, r;
        mc_adam_eval(&MC_F64, &A, in, 0, &f);
        struct mcv *fv[4] = {&f.p, &f.m, &f.v, &f.vm}, *rv[4] = {&r.p, &r.m, &r.v, &r.vm};
        int ok = 1;
        for (int k = 0; k < 4; k++)
            ok &= !o[k] || mc_cert(fv[k]->x, fv[k]->e, &ex[k]);
        if (!ok)
            mc_adam_exact(&A, in, ex);
        mc_adam_eval(&MC_F32, &A, in, 1, &r);
        for (int k = 0; k < 4; k++)
            if (o[k]) {
                o[k]->exact[i] = ex[k];
                o[k]->bound[i] = rv[k]->e * BND_UP;
            }
    }
    return DT_OK;
}
