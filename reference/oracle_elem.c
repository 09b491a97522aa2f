/* oracle_elem.c: oracle_bound's bounds for the elementary functions (sigmoid,
 * tanh and their backward ops), hard_sigmoid and the optimizer updates (sgd,
 * momentum, adam_m, adam_v, adam_p); the model and tolerances: oracle.c. */
#include <math.h>
#include <stdint.h>

#include <mpfr.h>

#include "oracle_impl.h"

/* sigmoid at y (a double: tanh's third form asks for it at 2x), the largest
 * bound of its admissible forms; s = sigma(y), rE, aE the tolerance of exp,
 * rD, aD of the division:
 * A  1 / (1 + exp(-y)): e^ = E (1 + e1) + a1, E = e^-y; d = fl(1 + e^) =
 *    (1 + E)(1 + t), |t| <= th = (1 + rE (1 - s) + aE)(1 + uw) - 1 since
 *    E / (1 + E) = 1 - s; r = (1 / d)(1 + d3) + h3 = s (1 + d3) / (1 + t) + h3:
 *      |r - s| <= s (rD + th) / (1 - th) + aD;
 *    for y < -87 exp(-y) may overflow and r be 0: + s.
 * B  (y < 0) exp(y) / (1 + exp(y)): E = e^y, E / (1 + E) = s, so
 *    th = (1 + rE s + aE)(1 + uw) - 1, r = s (1 + e1)(1 + d3) / (1 + t) + a1 ...:
 *      |r - s| <= s ((1 + rE)(1 + rD) / (1 - th) - 1) + aE (1 + rD) / (1 - th) + aD.
 * C  0.5 tanh(y/2) + 0.5, T = tanh(y/2) = 2s - 1: y/2 may lose 2^-150 (and
 *    |tanh'| <= 1), so |T^ - T| <= eT = rT |T| + aT + 2^-150 (1 + rT); 0.5 T^
 *    may lose 2^-150, then one rounding (or one FMA; 0.5 fl(1 + T^) the same):
 *      |r - s| <= (eT / 2 + 2^-150)(1 + uw) + uw s.
 *    For y << 0 this is absolute, about 3u: the cancellation of T^ + 1.
 * D  a library's sigmoid: rS s + aS. */
double oracle_bnd_sigmoid(double y)
{
    double rE = oracle_bnd_rel(BND_E_EXP), aE = oracle_bnd_abs(BND_E_EXP);
    double rD = oracle_bnd_rel(BND_E_DIV), aD = oracle_bnd_abs(BND_E_DIV);
    double rT = oracle_bnd_rel(BND_E_TANH), aT = oracle_bnd_abs(BND_E_TANH);
    double s = 1.0 / (1.0 + exp(-y)) * (1 + 0x1p-40), c = 1.0 / (1.0 + exp(y)) * (1 + 0x1p-40);
    double th = (1 + rE * c + aE) * (1 + BND_uw) - 1;
    double b = s * (rD + th) / (1 - th) + aD + (y < -87 ? s : 0);
    if (y < 0) {
        th = (1 + rE * s + aE) * (1 + BND_uw) - 1;
        b = fmax(b, s * ((1 + rE) * (1 + rD) / (1 - th) - 1) + aE * (1 + rD) / (1 - th) + aD);
    }
    double eT = rT * fabs(tanh(0.5 * y)) * (1 + 0x1p-40) + aT + BND_ETA * (1 + rT);
    b = fmax(b, (0.5 * eT + BND_ETA) * (1 + BND_uw) + BND_uw * s);
    return fmax(b, oracle_bnd_rel(BND_E_SIGMOID) * s + oracle_bnd_abs(BND_E_SIGMOID));
}

/* tanh at x, T = tanh x, the largest bound of its admissible forms:
 * A  tanhf: rT |T| + aT.
 * B  -e / (2 + e), e = expm1(-2|x|) in (-1, 0], sign restored (exact):
 *    e^ = e (1 + e1) + a1, |e| / (2 + e) = |T| and 2 + e >= 1, so d = fl(2 + e^)
 *    = (2 + e)(1 + t), |t| <= th = (1 + rE |T| + aE)(1 + uw) - 1:
 *      |r - T| <= |T| ((1 + rE)(1 + rD) / (1 - th) - 1) + aE (1 + rD) / (1 - th) + aD.
 *    (2|x| may overflow: expm1(-inf) = -1 gives 1 exactly.)
 * C  2 sigmoid(2x) - 1, the sigmoid by any of its forms, within es =
 *    oracle_bnd_sigmoid(2x) (2x overflowing: sigmoid(+-inf) is 0 or 1 exactly);
 *    2 s^ is exact, the subtraction one rounding:
 *      |r - T| <= 2 es (1 + uw) + uw |T|;
 *    near x = 0 this is absolute, about 7u: the cancellation of 2 s^ - 1. */
double oracle_bnd_tanh(float x)
{
    if (!isfinite(x))
        return INFINITY;
    double rE = oracle_bnd_rel(BND_E_EXP), aE = oracle_bnd_abs(BND_E_EXP);
    double rD = oracle_bnd_rel(BND_E_DIV), aD = oracle_bnd_abs(BND_E_DIV);
    double t = fabs(tanh((double)x)) * (1 + 0x1p-40);
    double b = oracle_bnd_rel(BND_E_TANH) * t + oracle_bnd_abs(BND_E_TANH);
    double th = (1 + rE * t + aE) * (1 + BND_uw) - 1;
    b = fmax(b, t * ((1 + rE) * (1 + rD) / (1 - th) - 1) + aE * (1 + rD) / (1 - th) + aD);
    return fmax(b, 2 * oracle_bnd_sigmoid(2.0 * x) * (1 + BND_uw) + BND_uw * t);
}

/* sigmoid_bwd X = dy y (1 - y), any grouping of the three factors, c =
 * fl(1 - y): each rounds X through 3 roundings, and a product that
 * underflows (2^-150) is multiplied by the remaining factor, at most
 * max(|dy|, |y|, |1 - y|) (1 + uw)^2:
 *   |r - X| <= gamma_3 |X| + 2^-150 (1 + (1 + uw)^2 max(|dy|, |y|, |1 - y|)). */
double oracle_bnd_sigmoid_bwd(float y, float dy)
{
    if (!isfinite(y) || !isfinite(dy))
        return INFINITY;
    double c = fabs(1.0 - y), a = fabs((double)dy), yy = fabs((double)y), x = a * yy * c;
    if (oracle_bnd_ovf(a * yy * (1 + BND_uw)) || oracle_bnd_ovf(a * c * (1 + BND_uw)) ||
        oracle_bnd_ovf(c) || oracle_bnd_ovf(x * (1 + 4 * BND_u)))
        return INFINITY;
    double u1 = 1 + BND_uw;
    return oracle_bnd_gamma(3, BND_u) * x + BND_ETA * (1 + u1 * u1 * fmax(fmax(a, yy), c));
}

/* tanh_bwd X = dy (1 - y^2), the larger of its two forms:
 * 1  dy (1 - y y): q = y^2 (1 + d1) + h1; c = fl(1 - q) has
 *      |c - (1 - y^2)| <= uw |1 - y^2| + (1 + uw)(uw y^2 + 2^-150)
 *    (one FMA: only uw |1 - y^2|); r = dy c (1 + d3) + h3:
 *      |r - X| <= |dy| |1 - y^2| (2uw + uw^2) + |dy| (uw y^2 + 2^-150)(1 + uw)^2 + 2^-150;
 *    the cancellation in 1 - y^2 near |y| = 1 is the uw y^2 term: relative
 *    to X it grows like u y^2 / |1 - y^2|.
 * 2  dy (1 - y)(1 + y), any grouping: 4 roundings, no cancellation:
 *      |r - X| <= gamma_4 |X| + 2^-150 (1 + (1 + uw)^2 max(|dy|, |1 - y|, |1 + y|)). */
double oracle_bnd_tanh_bwd(float y, float dy)
{
    if (!isfinite(y) || !isfinite(dy))
        return INFINITY;
    double yy = (double)y * y, c = fabs(1.0 - yy), a = fabs((double)dy);
    double cm = fabs(1.0 - y), cp = fabs(1.0 + y);
    if (oracle_bnd_ovf(yy) || oracle_bnd_ovf(c) || oracle_bnd_ovf(a * c * (1 + 4 * BND_u)) ||
        oracle_bnd_ovf(a * fmax(cm, cp) * (1 + BND_uw)) || oracle_bnd_ovf(fmax(cm, cp)))
        return INFINITY;
    double u1 = 1 + BND_uw;
    double b1 = a * c * (2 * BND_uw + BND_uw * BND_uw) + a * (BND_uw * yy + BND_ETA) * u1 * u1 +
                BND_ETA;
    double b2 =
        oracle_bnd_gamma(4, BND_u) * a * c + BND_ETA * (1 + u1 * u1 * fmax(a, fmax(cm, cp)));
    return fmax(b1, b2);
}

/* p + a b with one product (sgd: a = -lr, b = g; momentum: a = mu, b = buf,
 * p = g). Without FMA: t = a b (1 + d1) + h1, r = (p + t)(1 + d2):
 *   r - X = X d2 + (a b d1 + h1)(1 + d2);
 * with FMA r = X (1 + d2). Both: |r - X| <= uw |X| + (1 + uw)(uw |a b| + 2^-150). */
double oracle_bnd_axpy(float p, float a, float b)
{
    if (!isfinite(p) || !isfinite(a) || !isfinite(b))
        return INFINITY;
    double ab = fabs((double)a * b), x = fabs(p + (double)a * b);
    if (oracle_bnd_ovf(ab * (1 + BND_uw)) || oracle_bnd_ovf(x + ab * 2 * BND_uw))
        return INFINITY;
    return BND_uw * x + (1 + BND_uw) * (BND_uw * ab + BND_ETA);
}

/* adam_m X = b m + c g, c = 1 - b exactly; the implementation's c^ = fl(1 - b).
 * 1  b m + c^ g (FMA or not): T1 = b m, T2 = c g, P1 = T1 (1 + d1) + h1,
 *    P2 = T2 (1 + dc)(1 + d2) + h2, r = (P1 + P2)(1 + d3):
 *      |r - X| <= uw |X| + (1 + uw)(uw |T1| + gamma_2 |T2| + 2 2^-150).
 * 2  m + c^ (g - m) (a lerp): the product passes 3 roundings:
 *      |r - X| <= uw |X| + (1 + uw)(gamma_3 |c| |g - m| + 2^-150).
 * 3  g - b^ (g - m), b^ = fl(1 - c^) (the lerp's other branch), |b^ - b| <=
 *    eb = uw |c| + uw (|b| + uw |c|):
 *      |r - X| <= uw |X| + (1 + uw)(|g - m| (eb (1 + uw)^2 + gamma_2 |b|) + 2^-150).
 * adam_v X = b v + c g g, form 1 with T2 = c g^2 in any grouping (gamma_3);
 * the first product's underflow is multiplied by |g| or by |c^|:
 *   |r - X| <= uw |X| + (1 + uw)(uw |T1| + gamma_3 |T2|
 *              + 2^-150 (2 + (1 + uw)^2 max(|g|, |c|))). */
double oracle_bnd_adam_mv(float b, float mv, float g, int isv)
{
    if (!isfinite(b) || !isfinite(mv) || !isfinite(g))
        return INFINITY;
    double c = fabs(1.0 - b), ag = fabs((double)g), t1 = fabs((double)b * mv), cg = c * ag;
    double t2 = isv ? cg * ag : cg;
    double x = fabs((double)b * mv + (1.0 - b) * g * (isv ? (double)g : 1.0));
    double u1 = 1 + BND_uw, dm = fabs((double)g - mv);
    if (oracle_bnd_ovf(t1 * 2) || oracle_bnd_ovf(cg * 2) || oracle_bnd_ovf(t2 * 2) ||
        oracle_bnd_ovf(ag * ag * 2) || oracle_bnd_ovf(x + t1 + t2) ||
        oracle_bnd_ovf(dm * (1 + c + fabs((double)b)) * 2))
        return INFINITY;
    if (isv)
        return BND_uw * x + u1 * (BND_uw * t1 + oracle_bnd_gamma(3, BND_u) * t2 +
                                  BND_ETA * (2 + u1 * u1 * fmax(ag, c)));
    double b1 = BND_uw * t1 + oracle_bnd_gamma(2, BND_u) * t2 + 2 * BND_ETA;
    double b2 = oracle_bnd_gamma(3, BND_u) * c * dm + BND_ETA;
    double eb = BND_uw * c + BND_uw * (fabs((double)b) + BND_uw * c);
    double b3 = dm * (eb * u1 * u1 + oracle_bnd_gamma(2, BND_u) * fabs((double)b)) + BND_ETA;
    return BND_uw * x + u1 * fmax(b1, fmax(b2, b3));
}

/* ---- adam_p: running error bounds ----------------------------------------------
 * Each quantity carries |V|, its exact value's magnitude (the exact c_k), and
 * a bound e on |computed - V|; an operation on computed operands adds its
 * rounding rel |result| + abs, bounded through |result| <= |V| + e_prop,
 * where e_prop is the propagated error:
 *   x y:     |X| e_y + |Y| e_x + e_x e_y                  (uw, 2^-150)
 *   x / y:   (e_x + |X / Y| e_y) / (|Y| - e_y)            (rD, aD; needs e_y < |Y|)
 *   sqrt x:  min(e_x / sqrt X, sqrt e_x)                  (rS)
 *   x + y:   e_x + e_y, x, y >= 0                         (uw)
 * Any value that could reach FLT_MAX makes the bound +Inf.
 * c_k = 1 - b^t: pow (float32 or double, t converted to float32) within
 * E_pow ulp, then 1 - pw and the conversion: the float32 case is the worse,
 *   e_c = (rP b^t + aP)(1 + uw) + uw |c|,
 * with b^t's own error from t's conversion (t > 2^24) added; relative to c
 * it is about 9u b^t / c, the cancellation of 1 - b^t (large at t = 1, b near 1).
 * The bound is the largest over the three admissible forms (oracle.c's opening
 * comment). */
struct bnd_ev {
    double v, e; /* |exact value| (upper bound), error bound */
};

/* An operation with exact result magnitude v and propagated error ep; an
 * exact zero (v = ep = 0) is computed exactly. */
static struct bnd_ev bnd_ev_round(double v, double ep, double rel, double abs)
{
    double e = ep + rel * (v + ep) + (v > 0 || ep > 0 ? abs : 0);
    return (struct bnd_ev){v, oracle_bnd_ovf(v + e) ? INFINITY : e};
}

static struct bnd_ev bnd_ev_mul(struct bnd_ev x, struct bnd_ev y)
{
    return bnd_ev_round(x.v * y.v, x.v * y.e + y.v * x.e + x.e * y.e, BND_uw, BND_ETA);
}

static struct bnd_ev bnd_ev_div(struct bnd_ev x, struct bnd_ev y)
{
    if (!(y.e < y.v))
        return (struct bnd_ev){INFINITY, INFINITY};
    double q = x.v / y.v;
    return bnd_ev_round(q, (x.e + q * y.e) / (y.v - y.e), oracle_bnd_rel(BND_E_DIV),
                        oracle_bnd_abs(BND_E_DIV));
}

static struct bnd_ev bnd_ev_sqrt(struct bnd_ev x)
{
    double s = sqrt(x.v);
    return bnd_ev_round(s, s > 0 ? fmin(x.e / s, sqrt(x.e)) : sqrt(x.e),
                        oracle_bnd_rel(BND_E_SQRT), 0);
}

static struct bnd_ev bnd_ev_add(struct bnd_ev x, struct bnd_ev y)
{
    return bnd_ev_round(x.v + y.v, x.e + y.e, BND_uw, 0);
}

/* 1 - b^t to 2^-100 relative and the error bound of a computed one; e = Inf
 * when c = 0 or cancels more than 60 bits of b^t (no such Adam in practice). */
void oracle_bnd_adam_c(float b, uint64_t t, double *c, double *e)
{
    mpfr_t pw, bm, cm;
    mpfr_inits2(200, pw, cm, (mpfr_ptr)0);
    mpfr_init2(bm, 24);
    mpfr_set_flt(bm, b, MPFR_RNDN);
    mpfr_pow_ui(pw, bm, (unsigned long)t, MPFR_RNDN);
    mpfr_ui_sub(cm, 1, pw, MPFR_RNDN);
    double bt = fabs(mpfr_get_d(pw, MPFR_RNDN)) * (1 + 0x1p-40);
    *c = mpfr_get_d(cm, MPFR_RNDN);
    if (*c == 0 || !isfinite(*c) || !isfinite(bt) ||
        (!mpfr_zero_p(pw) && mpfr_get_exp(pw) - mpfr_get_exp(cm) > 60)) {
        *e = INFINITY;
    } else {
        /* t rounded to float32: b^t^ = b^t b^(t^ - t), |t^ - t| <= uw t */
        double rt = t > (UINT64_C(1) << 24) && b != 0
                        ? expm1(BND_uw * (double)t * fabs(log(fabs((double)b)))) : 0;
        double ep = (oracle_bnd_rel(BND_E_POW) * (1 + rt) + rt) * bt + oracle_bnd_abs(BND_E_POW);
        *e = ep * (1 + BND_uw) + BND_uw * fabs(*c);
    }
    mpfr_clears(pw, cm, bm, (mpfr_ptr)0);
}

/* The analysis assumes c_k > 0, eps >= 0 and v >= 0 (any Adam); else +Inf. */
double oracle_bnd_adam_p(const struct oracle_bnd_adam *A, float lr, float eps, float p, float m,
                         float v)
{
    if (!isfinite(p) || !isfinite(m) || !isfinite(v) || !isfinite(lr) || !isfinite(eps) ||
        v < 0 || eps < 0 || !(A->c1 > 0) || !(A->c2 > 0) || !isfinite(A->e1) || !isfinite(A->e2))
        return INFINITY;
    struct bnd_ev c1 = {A->c1, A->e1}, c2 = {A->c2, A->e2};
    struct bnd_ev L = {fabs((double)lr), 0}, M = {fabs((double)m), 0}, V = {(double)v, 0};
    struct bnd_ev E = {(double)eps, 0};
    /* op.h: (lr (m / c1)) / (sqrt(v / c2) + eps) */
    struct bnd_ev ya = bnd_ev_div(bnd_ev_mul(L, bnd_ev_div(M, c1)),
                                  bnd_ev_add(bnd_ev_sqrt(bnd_ev_div(V, c2)), E));
    /* PyTorch: (lr / c1) (m / (sqrt(v) / sqrt(c2) + eps)) */
    struct bnd_ev sv = bnd_ev_sqrt(V), sc = bnd_ev_sqrt(c2);
    struct bnd_ev yb = bnd_ev_mul(bnd_ev_div(L, c1),
                                  bnd_ev_div(M, bnd_ev_add(bnd_ev_div(sv, sc), E)));
    /* folded: (lr sqrt(c2) / c1) (m / (sqrt(v) + eps sqrt(c2))) */
    struct bnd_ev yc = bnd_ev_mul(bnd_ev_div(bnd_ev_mul(L, sc), c1),
                                  bnd_ev_div(M, bnd_ev_add(sv, bnd_ev_mul(E, sc))));
    double ye = fmax(ya.e, fmax(yb.e, yc.e));
    double sq = sqrt((double)v / A->c2);
    double x = fabs(p - (double)lr * ((double)m / A->c1) / (sq + eps));
    double e = ye + BND_uw * (x + ye);
    if (!(e < INFINITY) || oracle_bnd_ovf(x + e))
        return INFINITY;
    return e;
}

/* The float32 constant of hard_sigmoid (op.h). */
#define BND_HS_C 0.2f

/* |t - T| for t = fl(fl(c x) + 0.5) or fma(c, x, 0.5) (in float32 or wider),
 * T = c x + 0.5: t1 = c x (1 + d1) + h1, t = (t1 + 0.5)(1 + d2):
 *   |t - T| <= E = (uw |c x| + 2^-150)(1 + uw) + uw |T|   (one FMA: uw |T|).
 * T in double errs by <= 2^-53 |T|: 2^-52 |T| is added to E, and E is
 * raised by 2^-40 for its own roundings. */
static double bnd_hard_sigmoid_e(double cx, double t)
{
    double e = (BND_uw * fabs(cx) + BND_ETA) * (1 + BND_uw) + (BND_uw + 0x1p-52) * fabs(t);
    return e * (1 + 0x1p-40);
}

/* hard_sigmoid: clip(., 0, 1) is 1-Lipschitz, so |clip t - clip T| <= E
 * whichever of t and T is clipped. Tighter where T is: T < 0 makes the
 * exact value 0 and t <= T + E, so the error is <= max(0, T + E); T > 1:
 * max(0, E - (T - 1)). */
double oracle_bnd_hard_sigmoid(float x)
{
    if (!isfinite(x))
        return INFINITY;
    double cx = (double)BND_HS_C * x, t = cx + 0.5, e = bnd_hard_sigmoid_e(cx, t);
    if (t < 0)
        return fmax(0, t + e);
    if (t > 1)
        return fmax(0, e - (t - 1));
    return e;
}

/* hard_sigmoid_bwd: the oracle decides the mask on op.h's t (two float32
 * roundings, as oracle_ops.c does), an implementation on its own t, within
 * E of T. Where T is farther than E from 0 and from 1 every admissible t
 * decides the same: an unmasked value is fl(c dy), one rounding of the
 * exact value (half an ulp); a masked one +0 (0). Within E of 0 or 1 the
 * mask may go either way: the result may be 0 where the oracle's is c dy or
 * the reverse, |c dy| (1 + uw) + 2^-150. */
double oracle_bnd_hard_sigmoid_bwd(float x, float dy)
{
    if (!isfinite(x) || !isfinite(dy))
        return INFINITY;
    double cx = (double)BND_HS_C * x, T = cx + 0.5, e = bnd_hard_sigmoid_e(cx, T);
    double g = fabs((double)BND_HS_C * dy);
    if (fabs(T) <= e || fabs(T - 1) <= e)
        return oracle_bnd_ovf(g * (1 + BND_uw)) ? INFINITY : g * (1 + BND_uw) + BND_ETA;
    float t = (float)((double)(float)cx + 0.5);
    return t >= 0 && t <= 1 ? oracle_bnd_half_ulp(g) : 0;
}
