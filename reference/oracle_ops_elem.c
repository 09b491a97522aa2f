/* oracle_ops_elem.c: oracle_op's elementwise ops, their certified fast paths
 * in double falling back on oracle_round.c's MPFR path, and adam_p (the
 * scheme: oracle_ops.c's opening comment). */
#include "oracle_ops_impl.h"

#include <math.h>

#include "util.h"

/* ---- elementwise ops: fast paths ------------------------------------------- */

float ops_add(float a, float b)
{
    double e, s = ops_two_sum(a, b, &e);
    if (!isfinite(s))
        return ops_canon((float)s); /* Inf or NaN inputs: IEEE's answer is exact */
    return ops_rn32_hl(s, e);
}

/* p + f1 f2 for floats (sgd: f1 = -lr; momentum: p = g, f1 = mu, f2 = buf). */
float ops_axpy(float p, float f1, float f2)
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
float ops_sigmoid(float x, int slow)
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
float ops_tanh(float x, int slow)
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
float ops_sigmoid_bwd(const struct ops_par *pr, float y, float dy, int slow)
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
float ops_tanh_bwd(const struct ops_par *pr, float y, float dy, int slow)
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
float ops_adam_mv(const struct ops_par *pr, float m, float g, int slow)
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
float ops_mse_bwd(const struct ops_par *pr, float p, float t, float g, int slow)
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

void ops_adam_init(struct ops_adam *A, const struct node *nd, uint64_t step)
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

void ops_adam_free(struct ops_adam *A)
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
int ops_adam_fast(const struct ops_adam *A, float p, float m, float v, float *out)
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
float ops_mp_adam(struct ops_adam *A, float p, float m, float v)
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
