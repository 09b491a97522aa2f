/* modcheck_norm.c: the modules of modcheck.h that normalize: layernorm,
 * softmax, crossentropyloss, on modcheck_sum.c's helpers (modcheck_impl.h).
 * Exact values are rounded once, by MPFR intervals (directed roundings, the
 * precision doubled until both ends round alike) around rational parts
 * computed exactly. Bounds follow oracle.c's model and conventions (u, uw,
 * gamma_k; rE, aE the tolerance of exp, rD, aD of division, rS of sqrt, rL,
 * aL of MC_E_LOG; ETA = 2^-150 per underflowing product or quotient;
 * magnitudes in double, inflated; bounds times BND_UP; +Inf for inputs not
 * finite or a possible overflow). What is admitted, and the bounds:
 *
 * LAYERNORM of the M trailing elements of a row: y = (x - mu) r w + b, r =
 * 1 / sqrt(var + eps), var biased; X = max |x|, R = max x - min x, A = sum |x|.
 * e bounds |mu^ - mu| and ev |var^ - var| over all these forms:
 *  (a) sums in any order, / M or * (1/M): e = gamma_{M-1} A / M (1 + rD) +
 *      rD |mu| + aD; two-pass sum fl(x - mu^)^2 / M (terms >= 0) within (1 +
 *      p2)(var + e^2), p2 = (1 + gamma_{M+2})(1 + rD) - 1;
 *  (b) one-pass max(0, E[x^2] - mu^^2): E[x^2] within pq (var + mu^2), pq =
 *      (1 + gamma_{M+1})(1 + rD) - 1, mu^^2 within 2|mu| e + e^2 + 3uw (|mu| +
 *      e)^2, the subtraction uw of what remains;
 *  (c) Welford: m += (x - m) c (c = 1/k, divided or a reciprocal), M2 +=
 *      (x - m_old)(x - m_new); partials combined as m_a + (m_b - m_a) n_b/n
 *      (PyTorch's CPU) or (n_a/n) m_a + (n_b/n) m_b (its CUDA), M2 = M2_a +
 *      M2_b + d^2 n_a n_b/n, in a tree where an element passes D = M + 7
 *      combines at most (empty partners included) and lies in a perturbed
 *      operand (b of the first form, either of the second) of L = ceil(log2
 *      M) + 8 at most (PyTorch's cascade, warp and block trees do). A mean's
 *      rounding is a shift of data: uw |m| of the combine's elements, t3 |d|
 *      or t3 |m| of the perturbed operand's, t3 = (1 + uw)^2 (1 + rD) - 1; the
 *      computed means are exact means of x + s, |s_i| <= S = (D (uw X + 3 ETA)
 *      + L t3 max(R, X)) / (1 - D uw - 2 L t3): e = S. M2 is that of x + s (2
 *      sigma S + S^2 per element off) up to relative errors Phi = gamma_{2D+10},
 *      but each combine's d^ (or x - m_new), off the shifted data's by ep =
 *      (uw + t3)(R + 2S) + (uw + 2 t3)(X + S), weighs min(n_a, n_b), in all at
 *      most M log2(M) / 2: ev = (2 sigma S + S^2 + Phi (sigma + S)^2 + (2 (R +
 *      2S) ep + ep^2) log2(M) / 2 + 4 (D + 8) ETA)(1 + rD) + rD var + aD.
 *  Every form's var^ is >= 0 (Welford's M2 adds terms >= 0: x - m_old and x -
 *  m_new share their sign, fl(m_old + fl(d c)) lying between m_old and x).
 *  eps may be rounded to float32, var^ + eps one rounding (s^ in [slo, shi]),
 *  r^ = 1 / sqrt(s^) (rS, rD) or an rsqrt within the same (CUDA's: 2 ulp):
 *  |r^ - r| <= er. Then (x - mu^) r^ w + b in any grouping, (x r^ + (-mu^ r^))
 *  w + b or x (r^ w) + (b - mu^ (r^ w)) (PyTorch's CPU), FMA or not: within
 *  gamma_3 (|x - mu^| + |x| + |mu^|) r^ |w| + uw |b| (1 + uw) + uw |y'| of y' =
 *  (x - mu^) r^ w + b (x ~ mu cancels), and |y' - y| <= |w| (|x - mu| er + e (r
 *  + er)).
 *
 * SOFTMAX along dim; m = max x (exact), E_j = e^(x_j - m), S = sum E_j >= 1:
 * x_j - m one rounding (u |x_j - m| in the exponent), exp within rE, aE
 * (gpu=1: also CUDA's __expf, 2 + 1.173 |x_j - m| ulp, subnormals flushed),
 * e^_j = E_j (1 + tau_j) + aE, tau_j = (1 + rE) e^(u |x_j - m|) - 1; the sum in
 * any order, |S^ - S| <= es S, es = (1 + gamma_{n-1})(sum tau_j E_j / S + n aE
 * / S) + gamma_{n-1}; then e^_i / S^ or e^_i (1 / S^): |r - y_i| <= A (1 + rD)
 * + rD y_i + aD, A = (y_i (tau_i + es) + aE / S) / (1 - es). No max (exp
 * within rE, -64 <= m <= 64: no overflow): aE / (S e^m) for aE / S. A -inf
 * gives an exact zero.
 *
 * CROSSENTROPYLOSS: log_softmax as (x - m) - L^, x - (m + L^) or x - log(sum
 * e^x) (no max, -64 <= m <= 64), L^ = log S^ within MC_E_LOG ulp (SLEEF's u10
 * and CUDA's logf document 1 ulp, glibc's less; 2.5 as for exp). With l =
 * log S: |log S^ - l| <= EL0 = -log(1 - es), EL = EL0 + rL (l + EL0) + aL, and
 * lp = x - m - l within Elp = (EL + uw (|x - m| + |m| + l + EL) + [rL (|m| + l
 * + EL0)])(1 + uw) + uw |lp| (bracket: no max). NLL -w_t lp_t; smoothing
 * -sum_c w_c lp_c, as PyTorch's (1 - ls) nll + (ls / C) smooth, both parts
 * summed and divided alike; probability targets -sum_c w_c p'_c lp_c, p' = p
 * (1 - ls) + ls / C in float32, one sum of all N C terms. Products one
 * rounding, sums in any order (gamma of their count on the sum of
 * magnitudes, the terms' errors times 1 + gamma); mean divides by W = the
 * kept targets' weights (within gamma_{n-1} sum |w_t|; a count, exact,
 * without weights) or N for probabilities; float32 coefficients (one
 * rounding), each part scaled (one), the parts added (one).
 *
 * Tightness, largest error / allowed of real PyTorch outputs (2.15 CPU and
 * 2.11 CUDA, random inputs): softmax 0.46, crossentropyloss 0.14, layernorm
 * 0.05: the Welford and the one-pass float forms make its bound some 100
 * times a two-pass one's on rows of mean ~0, and vacuous where |mean| >>
 * sigma. */
#include "modcheck_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "oracle.h"
#include "oracle_impl.h"
#include "util.h"

#define MC_PREC 2400 /* exact for every rational part here (sums of products of floats, eps M^2) */
#define MC_DPREC 320 /* exact for a difference of two floats */
#define MC_E_LOG 2.5 /* logf, ulp (the opening comment) */

/* Every operation on a rational part must be exact: an invariant of MC_PREC. */
#define MC_EXACT(call) \
    do { int t_ = (call); DT_ASSERT(t_ == 0, "modcheck: inexact MPFR step %s", #call); } while (0)

/* n MPFR variables of precision p; mc_vfree clears them. */
static mpfr_t *mc_vnew(size_t n, mpfr_prec_t p)
{
    mpfr_t *v = dt_malloc((n + 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        mpfr_init2(v[i], p);
    return v;
}

static void mc_vfree(mpfr_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        mpfr_clear(v[i]);
    free(v);
}

/* ---- layernorm --------------------------------------------------------------------------- */

/* What the elements of a normalized row share: mean, rstd, the bounds e on
 * |mu^ - mu| and er on |r^ - r|. */
struct mc_lnrow {
    double mu, r, e, er;
};

/* The row's bounds (opening comment) from its M finite values, mean mu and
 * variance var from the exact sums: 0, or -1 where none holds (+Inf). */
static int mc_ln_row(const float *x, size_t M, double mu, double var, double eps,
                     struct mc_lnrow *L)
{
    double uw = BND_uw, rD = oracle_bnd_rel(BND_E_DIV), aD = oracle_bnd_abs(BND_E_DIV), ETA = BND_ETA;
    double X = 0, lo = INFINITY, hi = -INFINITY, A = 0, dM = (double)M, lg = 0;
    for (size_t i = 0; i < M; i++) {
        X = fmax(X, fabs((double)x[i]));
        lo = fmin(lo, x[i]);
        hi = fmax(hi, x[i]);
        A += fabs((double)x[i]);
    }
    while (ldexp(1.0, (int)lg) < dM)
        lg++;
    double R = hi - lo, am = fabs(mu) * (1 + 0x1p-50), sd = sqrt(var *= 1 + 0x1p-50) * (1 + 0x1p-50);
    double ea = mc_g(dM - 1) * mc_up(A, dM) / dM * (1 + rD) + rD * am + aD;
    double D = dM + 7, Lc = lg + 8, t3 = (1 + uw) * (1 + uw) * (1 + rD) - 1;
    double den = 1 - D * uw - 2 * Lc * t3;
    if (X >= 0x1p63 || oracle_bnd_ovf(5 * dM * X * X) || den < 0.5)
        return DT_ERR; /* sums of squares could overflow */
    double S = (D * (uw * X + 3 * ETA) + Lc * t3 * fmax(R, X)) / den, e = fmax(ea, S);
    double p2 = (1 + mc_g(dM + 2)) * (1 + rD) - 1, ev = p2 * (var + e * e) + e * e + ETA * (1 + p2) + aD;
    double q = var + am * am, pq = (1 + mc_g(dM + 1)) * (1 + rD) - 1, me = am + e;
    double dm = 2 * am * e + e * e + 3 * uw * me * me + ETA;
    ev = fmax(ev, pq * q + dm + uw * (var + pq * q + dm) + 2 * ETA + aD);
    double Rp = R + 2 * S, Pp = X + S, ep = (uw + t3) * Rp + (uw + 2 * t3) * Pp + 4 * ETA;
    double evw = 2 * sd * S + S * S + mc_g(2 * D + 10) * (sd + S) * (sd + S) +
                 (2 * Rp * ep + ep * ep) * fmax(lg, 1) / 2 + 4 * (D + 8) * ETA;
    ev = fmax(ev, evw * (1 + rD) + rD * var + aD);
    double s = var + eps, slo = (fmax(var - ev, 0) + eps * (1 - uw)) * (1 - uw);
    double shi = (var + ev + eps * (1 + uw)) * (1 + uw), rS = oracle_bnd_rel(BND_E_SQRT);
    if (!(slo > 0) || oracle_bnd_ovf(shi) || oracle_bnd_ovf(1 / sqrt(slo)))
        return DT_ERR;
    L->mu = mu;
    L->r = 1 / sqrt(s);
    L->e = e * (1 + 0x1p-40);
    L->er = L->r * (1 + 0x1p-40) *
            fmax(sqrt(s / slo) * (1 + rD) / (1 - rS) - 1, 1 - sqrt(s / shi) * (1 - rD) / (1 + rS));
    return DT_OK;
}

/* The bound on element x of a row, weight w and bias b. */
static double mc_ln_bound(const struct mc_lnrow *L, double x, double w, double b)
{
    double uw = BND_uw, dx = fabs(x - L->mu) + 0x1p-50 * fabs(L->mu), aw = fabs(w), rr = L->r + L->er;
    double y = fabs((x - L->mu) * L->r * w + b) * (1 + 0x1p-48), d1 = aw * (dx * L->er + L->e * rr);
    double fin = (mc_g(3) * (dx + 2 * L->e + fabs(x) + fabs(L->mu)) * rr * aw + uw * fabs(b)) *
                     (1 + uw) + uw * (y + d1) + 4 * BND_ETA * (1 + aw) * (1 + uw) * (1 + uw);
    double bd = (d1 + fin) * BND_UP;
    return isfinite(w) && isfinite(b) && !oracle_bnd_ovf(y + bd) ? bd : INFINITY;
}

int mc_layernorm(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
                 struct modcheck_result *res, char *why, size_t nwhy)
{
    int bad = 0, nd = 0;
    const struct modcheck_tensor *x = mc_tensor(t, nt, "in.0", sp, 1, &bad);
    const struct modcheck_tensor *w = mc_tensor(t, nt, "param.weight", sp, 0, &bad);
    const struct modcheck_tensor *b = mc_tensor(t, nt, "param.bias", sp, 0, &bad);
    const struct modcheck_tensor *y = mc_tensor(t, nt, "out", sp, 1, &bad);
    for (const char *v = mc_get(sp, "normalized"); v && *v; v++) /* mc_ints repeats one value */
        nd += v == mc_get(sp, "normalized") || *v == ',';
    int64_t ns[8];
    double eps;
    if (bad || mc_num(sp, "eps", 1e-5, &eps) < 0)
        return DT_ERR;
    if (nd < 1 || nd > 8)
        return mc_shape_err(sp, "normalized=D1[,D2...], one to eight dims");
    if (mc_ints(sp, "normalized", ns, nd) != nd)
        return DT_ERR;
    if (!(eps >= 0) || !isfinite(eps)) {
        snprintf(why, nwhy, "layernorm with eps=%g", eps);
        return 1;
    }
    size_t M = 1;
    int ok = nd <= x->ndim && y->count == x->count && y->ndim == x->ndim;
    for (int k = 0; ok && k < nd; k++) {
        ok = x->shape[x->ndim - nd + k] == ns[k];
        M *= (size_t)ns[k];
    }
    if (!ok || M == 0 || M > (1u << 24) || (w && w->count != M) || (b && b->count != M))
        return mc_shape_err(sp, "in.0 (..., normalized), param.weight and param.bias "
                                "(normalized), out as in.0, at most 2^24 normalized elements");
    struct modcheck_output *o = mc_output(res, "out", y);
    mpfr_t *nw = mc_vnew(M + 8, MC_PREC), *v = nw + M; /* S, Q, N, T exact; lo, hi, sl, sh */
    mpfr_ptr S = v[0], Q = v[1], N = v[2], T = v[3], lo = v[4], hi = v[5], sl = v[6], sh = v[7];
    char *done = dt_malloc(M);
    for (size_t r = 0; r < x->count / M; r++) {
        const float *xr = x->data + r * M;
        float *ex = o->exact + r * M;
        int fin = 1;
        mpfr_set_zero(S, 1);
        mpfr_set_zero(Q, 1);
        for (size_t i = 0; i < M && (fin = isfinite(xr[i]) != 0); i++) {
            MC_EXACT(mpfr_add_d(S, S, xr[i], MPFR_RNDN));
            MC_EXACT(mpfr_set_d(T, xr[i], MPFR_RNDN));
            MC_EXACT(mpfr_sqr(T, T, MPFR_RNDN));
            MC_EXACT(mpfr_add(Q, Q, T, MPFR_RNDN));
        }
        if (fin) { /* N = M sum x^2 - S^2 = M^2 var, Q = N + eps M^2, exactly */
            MC_EXACT(mpfr_mul_ui(Q, Q, (unsigned long)M, MPFR_RNDN));
            MC_EXACT(mpfr_sqr(T, S, MPFR_RNDN));
            MC_EXACT(mpfr_sub(N, Q, T, MPFR_RNDN));
            MC_EXACT(mpfr_set_d(T, eps, MPFR_RNDN));
            MC_EXACT(mpfr_mul_ui(T, T, (unsigned long)(M * M), MPFR_RNDN));
            MC_EXACT(mpfr_add(Q, N, T, MPFR_RNDN));
        }
        struct mc_lnrow L;
        double dm = (double)M;
        int nan = !fin || mpfr_sgn(Q) <= 0; /* a NaN or Inf, or var + eps = 0: NaN */
        int bok = !nan && mc_ln_row(xr, M, mpfr_get_d(S, MPFR_RNDN) / dm,
                                    mpfr_get_d(N, MPFR_RNDN) / (dm * dm), eps, &L) == 0;
        size_t left = 0;
        for (size_t i = 0; i < M; i++) {
            double wv = w ? w->data[i] : 1, bv = b ? b->data[i] : 0;
            o->bound[r * M + i] = bok ? mc_ln_bound(&L, xr[i], wv, bv) : INFINITY;
            ex[i] = NAN;
            left += !(done[i] = (char)nan);
            if (nan)
                continue;
            MC_EXACT(mpfr_set_flt(T, xr[i], MPFR_RNDN)); /* nw = (M x - S) w */
            MC_EXACT(mpfr_mul_ui(T, T, (unsigned long)M, MPFR_RNDN));
            MC_EXACT(mpfr_sub(nw[i], T, S, MPFR_RNDN));
            MC_EXACT(mpfr_mul_d(nw[i], nw[i], wv, MPFR_RNDN));
        }
        for (mpfr_prec_t p = MC_ZIV; left; p *= 2) { /* y = nw / sqrt(Q) + b */
            mc_prec(p, sl, sh, lo, hi, (mpfr_ptr)0);
            mpfr_sqrt(sl, Q, MPFR_RNDD);
            mpfr_sqrt(sh, Q, MPFR_RNDU);
            left = 0;
            for (size_t i = 0; i < M; i++) {
                if (done[i])
                    continue;
                int neg = mpfr_sgn(nw[i]) < 0;
                mpfr_div(lo, nw[i], neg ? sl : sh, MPFR_RNDD);
                mpfr_div(hi, nw[i], neg ? sh : sl, MPFR_RNDU);
                mpfr_add_d(lo, lo, b ? b->data[i] : 0.0, MPFR_RNDD);
                mpfr_add_d(hi, hi, b ? b->data[i] : 0.0, MPFR_RNDU);
                left += !(done[i] = (char)mc_round(lo, hi, p, &ex[i]));
            }
        }
    }
    mc_vfree(nw, M + 8);
    free(done);
    return DT_OK;
}

/* ---- softmax and log-softmax rows ---------------------------------------------------------- */

/* What the bounds of a row's elements share (opening comment). */
struct mc_row {
    double m, S, es, ae; /* max, sum E_j (upper), es, aE over S's least form */
    int nm;              /* the form without the max is admitted */
};

/* Row x of n values (-inf allowed, no NaN or +Inf), tau[j] of each: 0, or
 * -1 when no bound holds. */
static int mc_row_bound(const float *x, size_t n, int gpu, double *tau, struct mc_row *R)
{
    double u = BND_u, rE = oracle_bnd_rel(BND_E_EXP), aE = oracle_bnd_abs(BND_E_EXP);
    double m = -INFINITY, S = 0, T = 0, dn = (double)n;
    for (size_t j = 0; j < n; j++)
        m = fmax(m, x[j]);
    aE = gpu ? fmax(aE, MC_FTZ) : aE;
    for (size_t j = 0; j < n; j++) {
        double d = fabs(x[j] - m), E = exp(x[j] - m);
        double r = gpu ? fmax(rE, (2.5 + 1.173 * d * (1 + 2 * u)) * 0x1p-23) : rE;
        tau[j] = isinf(x[j]) ? 0 : (r + (1 + r) * expm1(u * d)) * (1 + 0x1p-40);
        S += E;
        T += tau[j] * E;
    }
    R->m = m;
    R->S = mc_up(S, dn);
    R->nm = m >= -64 && m <= 64;
    R->ae = aE / (S * (R->nm ? fmin(1, exp(m)) : 1)) * (1 + 0x1p-40);
    R->es = (1 + mc_g(dn - 1)) * (mc_up(T, dn) / S + dn * R->ae) + mc_g(dn - 1);
    return isfinite(m) && R->es < 0.5 ? DT_OK : DT_ERR;
}

/* In v (2n + 3 variables: lo[n], hi[n], d, slo, shi), the intervals at
 * precision p of e^(x_j - m) (-inf: exact 0) and of their sum; m = max x. */
static float mc_exps(mpfr_t *v, const float *x, size_t n, mpfr_prec_t p)
{
    float m = -INFINITY;
    for (size_t j = 0; j < n; j++)
        m = fmaxf(m, x[j]);
    mpfr_ptr d = v[2 * n], slo = v[2 * n + 1], shi = v[2 * n + 2];
    mpfr_set_prec(d, MC_DPREC);
    mc_prec(p, slo, shi, (mpfr_ptr)0);
    mpfr_set_zero(slo, 1);
    mpfr_set_zero(shi, 1);
    for (size_t j = 0; j < n; j++) {
        mc_prec(p, v[j], v[n + j], (mpfr_ptr)0);
        MC_EXACT(mpfr_set_flt(d, x[j], MPFR_RNDN));
        MC_EXACT(mpfr_sub_d(d, d, m, MPFR_RNDN));
        mpfr_exp(v[j], d, MPFR_RNDD);
        mpfr_exp(v[n + j], d, MPFR_RNDU);
        mpfr_add(slo, slo, v[j], MPFR_RNDD);
        mpfr_add(shi, shi, v[n + j], MPFR_RNDU);
    }
    return m;
}

int mc_softmax(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
               struct modcheck_result *res, char *why, size_t nwhy)
{
    int bad = 0;
    const struct modcheck_tensor *x = mc_tensor(t, nt, "in.0", sp, 1, &bad);
    const struct modcheck_tensor *y = mc_tensor(t, nt, "out", sp, 1, &bad);
    double dd, gpu, rD = oracle_bnd_rel(BND_E_DIV), aD = oracle_bnd_abs(BND_E_DIV);
    if (bad || mc_num(sp, "gpu", 0, &gpu) < 0 || mc_num(sp, "dim", NAN, &dd) < 0)
        return DT_ERR;
    int nd = x->ndim ? x->ndim : 1, dim = dd >= 0 && dd < nd ? (int)dd : -1;
    if ((double)dim != dd || y->count != x->count)
        return mc_shape_err(sp, "dim=D in [0, ndim), out as in.0");
    size_t outer = 1, n = x->ndim ? (size_t)x->shape[dim] : 1, inner = 1;
    for (int k = 0; k < x->ndim; k++)
        if (k != dim)
            *(k < dim ? &outer : &inner) *= (size_t)x->shape[k];
    struct modcheck_output *o = mc_output(res, "out", y);
    float *xr = dt_malloc((n + 1) * sizeof *xr);
    double *tau = dt_malloc((n + 1) * sizeof *tau);
    mpfr_t *v = mc_vnew(2 * n + 5, MC_ZIV), *lo = &v[2 * n + 3], *hi = &v[2 * n + 4];
    for (size_t ro = 0; ro < outer * inner && n; ro++) {
        size_t base = ro / inner * n * inner + ro % inner, left = 0;
        int nan = 0;
        for (size_t j = 0; j < n; j++) {
            xr[j] = x->data[base + j * inner];
            nan |= isnan(xr[j]) || xr[j] == INFINITY; /* IEEE's softmax: NaN */
        }
        struct mc_row R = {.m = NAN};
        int bok = !nan && mc_row_bound(xr, n, gpu != 0, tau, &R) == 0;
        nan |= !isfinite(R.m); /* all -inf */
        for (size_t j = 0; j < n; j++) {
            size_t at = base + j * inner;
            double yv = exp(xr[j] - R.m) / R.S * (1 + 0x1p-50);
            double A = (yv * (tau[j] + R.es) + R.ae) / (1 - R.es);
            o->bound[at] = !bok ? INFINITY : isinf(xr[j]) ? 0 : (A * (1 + rD) + rD * yv + aD) * BND_UP;
            o->exact[at] = nan ? NAN : 0.0f;
            left += !nan && !isinf(xr[j]);
        }
        for (mpfr_prec_t p = MC_ZIV; left; p *= 2) {
            mc_exps(v, xr, n, p);
            mc_prec(p, *lo, *hi, (mpfr_ptr)0);
            left = 0;
            for (size_t j = 0; j < n; j++) {
                float *e = &o->exact[base + j * inner];
                if (isinf(xr[j]) || (p > MC_ZIV && !isnan(*e)))
                    continue;
                mpfr_div(*lo, v[j], v[2 * n + 2], MPFR_RNDD);
                mpfr_div(*hi, v[n + j], v[2 * n + 1], MPFR_RNDU);
                if (!mc_round(*lo, *hi, p, e))
                    *e = NAN, left++;
            }
        }
    }
    mc_vfree(v, 2 * n + 5);
    free(xr), free(tau);
    (void)why, (void)nwhy;
    return DT_OK;
}

/* ---- crossentropyloss ------------------------------------------------------------------
 * C times a sample's loss is a L - b, L = log sum e^x, with a = sum_c w_c q_c
 * and b = sum_c w_c q_c x_c exact: q_c = C (1 - ls) [c = t] + ls for class
 * targets, C p_c (1 - ls) + ls for probabilities. */

struct mc_ce {
    size_t N, C, D;           /* samples N D, classes C: logit (n, c, k) at (n C + c) D + k */
    const float *x, *tg, *wt; /* logits, targets, weights or NULL */
    int prob, red, gpu;       /* probability targets; 0 none, 1 sum, 2 mean */
    double ls;                /* label smoothing */
    long long ig;             /* ignore_index */
};

/* Sample s's target class, -1 when ignored (probabilities: 0). */
static long long mc_ce_class(const struct mc_ce *ce, size_t s)
{
    long long c = ce->prob ? 0 : (long long)ce->tg[s];
    return c == ce->ig && !ce->prob ? -1 : c;
}

/* Sample s's logits (or probabilities: v = ce->tg) into xr. */
static void mc_ce_row(const struct mc_ce *ce, const float *v, size_t s, float *xr)
{
    for (size_t c = 0; c < ce->C; c++)
        xr[c] = v[(s / ce->D * ce->C + c) * ce->D + s % ce->D];
}

/* The exact a and b of sample s (logits xr, probabilities pr); its weight
 * added to tw. */
static void mc_ce_ab(const struct mc_ce *ce, size_t s, const float *xr, const float *pr,
                     mpfr_ptr a, mpfr_ptr b, mpfr_srcptr c1, mpfr_ptr tmp, mpfr_ptr tw)
{
    long long tc = mc_ce_class(ce, s);
    mpfr_set_zero(a, 1);
    mpfr_set_zero(b, 1);
    for (size_t c = 0; c < ce->C; c++) {
        MC_EXACT(mpfr_mul_d(tmp, c1, ce->prob ? pr[c] : (long long)c == tc, MPFR_RNDN));
        MC_EXACT(mpfr_mul_ui(tmp, tmp, (unsigned long)ce->C, MPFR_RNDN));
        MC_EXACT(mpfr_add_d(tmp, tmp, ce->ls, MPFR_RNDN));
        MC_EXACT(mpfr_mul_d(tmp, tmp, ce->wt ? ce->wt[c] : 1.0, MPFR_RNDN));
        MC_EXACT(mpfr_add(a, a, tmp, MPFR_RNDN));
        MC_EXACT(mpfr_mul_d(tmp, tmp, xr[c], MPFR_RNDN));
        MC_EXACT(mpfr_add(b, b, tmp, MPFR_RNDN));
    }
    MC_EXACT(mpfr_add_d(tw, tw, ce->prob || !ce->wt ? 1.0 : ce->wt[tc], MPFR_RNDN));
}

/* Sample s's loss magnitude v and error bound ev: for class targets the
 * NLL part, and the smoothing part in sm, esm (opening comment). */
static void mc_ce_bound(const struct mc_ce *ce, const float *xr, const float *pr, long long tc,
                        double *tau, double *v, double *ev, double *sm, double *esm)
{
    double uw = BND_uw, rL = oracle_bnd_rel(MC_E_LOG), ETA = BND_ETA, gC = mc_g((double)ce->C);
    double c1 = 1 - ce->ls, c2 = ce->ls / (double)ce->C, sv = 0, se = 0, tv = 0, te = 0;
    struct mc_row R;
    *v = *sm = 0;
    *ev = *esm = INFINITY;
    if (mc_row_bound(xr, ce->C, ce->gpu, tau, &R) < 0)
        return;
    double l = log(R.S) * (1 + 0x1p-50), el0 = -log1p(-R.es) * (1 + 0x1p-40), am = fabs(R.m);
    double el = el0 + rL * (l + el0) + oracle_bnd_abs(MC_E_LOG), nm = R.nm ? rL * (am + l + el0) : 0;
    for (size_t c = 0; c < ce->C; c++) {
        double alp = fabs(xr[c] - R.m - l) + 0x1p-48 * (am + l), w = ce->wt ? fabs(ce->wt[c]) : 1;
        double elp = (el + uw * (fabs(xr[c] - R.m) + am + l + el) + nm) * (1 + uw) + uw * alp;
        if (ce->prob) { /* w p' lp, p' = p c1 + c2 computed */
            double pp = fabs(pr[c] * c1 + c2), g2 = mc_g(2);
            double ep = ce->ls > 0 ? (g2 * fabs(pr[c] * c1) + uw * c2) * (1 + uw) + uw * pp + ETA : 0;
            sv += w * pp * alp;
            se += w * (pp * elp + alp * ep + ep * elp) * (1 + g2) + g2 * w * pp * alp +
                  ETA * (2 + w + pp);
            continue;
        }
        if ((long long)c == tc) {
            tv = w * alp;
            te = ce->wt ? w * elp * (1 + uw) + uw * tv + ETA : elp;
        }
        sv += w * alp;
        se += w * elp + (ce->wt ? ETA : 0);
    }
    se = (1 + gC) * se + gC * sv;
    *v = ce->prob ? sv : tv;
    *ev = ce->prob ? se : te;
    *sm = ce->prob ? 0 : sv;
    *esm = ce->prob ? 0 : se;
}

/* The output's bound from its parts' magnitudes P and errors E (NLL and
 * smoothing) and the divisor W (1: none, sum) within EW. */
static double mc_ce_out(const struct mc_ce *ce, const double *P, const double *E, double W,
                        double EW)
{
    double uw = BND_uw, rD = oracle_bnd_rel(BND_E_DIV), aD = oracle_bnd_abs(BND_E_DIV);
    double c[2] = {1 - ce->ls, ce->ls / (double)ce->C}, V[2], EV[2], om = EW / fabs(W);
    if (!(om < 0.5))
        return INFINITY;
    for (int k = 0; k < 2; k++) {
        V[k] = P[k] / fabs(W);
        EV[k] = W == 1 && EW == 0 ? E[k]
                : (E[k] + P[k] * om) / (fabs(W) * (1 - om)) * (1 + rD) + rD * V[k] + aD;
    }
    if (ce->prob || ce->ls == 0)
        return EV[0] * BND_UP;
    return (pow(1 + uw, 3) * (c[0] * EV[0] + c[1] * EV[1]) + mc_g(3) * (c[0] * V[0] + c[1] * V[1]) +
            2 * BND_ETA) * BND_UP;
}

/* The spec and tensors of a cross-entropy: 0, 1 (why set), -1. */
static int mc_ce_setup(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
                       struct mc_ce *ce, const struct modcheck_tensor **yo, char *why, size_t nwhy)
{
    int bad = 0;
    const struct modcheck_tensor *x = mc_tensor(t, nt, "in.0", sp, 1, &bad);
    const struct modcheck_tensor *tg = mc_tensor(t, nt, "in.1", sp, 1, &bad);
    const struct modcheck_tensor *w = mc_tensor(t, nt, "param.weight", sp, 0, &bad);
    const struct modcheck_tensor *y = mc_tensor(t, nt, "out", sp, 1, &bad);
    double ig, gpu;
    memset(ce, 0, sizeof *ce);
    if (bad || (ce->red = mc_reduction(sp)) < 0 || mc_num(sp, "ignore_index", -100, &ig) < 0 ||
        mc_num(sp, "label_smoothing", 0, &ce->ls) < 0 || mc_num(sp, "gpu", 0, &gpu) < 0)
        return DT_ERR;
    ce->gpu = gpu != 0;
    ce->ig = fabs(ig) < 0x1p62 ? (long long)ig : 0;
    ce->N = x->ndim == 1 ? 1 : x->ndim >= 2 ? (size_t)x->shape[0] : 0;
    ce->C = x->ndim == 1 ? (size_t)x->shape[0] : x->ndim >= 2 ? (size_t)x->shape[1] : 0;
    ce->D = ce->C && ce->N ? x->count / (ce->C * ce->N) : 1;
    ce->prob = tg->ndim == x->ndim;
    int ok = ce->C > 0 && (ce->prob || tg->ndim == x->ndim - 1) && (!w || w->count == ce->C) &&
             ce->ls >= 0 && ce->ls <= 1 && (double)ce->ig == ig &&
             y->count == (ce->red ? 1 : ce->N * ce->D);
    for (int k = 0; ok && k < tg->ndim; k++)
        ok = tg->shape[k] == x->shape[k + (!ce->prob && k >= 1)];
    if (!ok)
        return mc_shape_err(sp, "in.0 (N, C, d...) or (C), in.1 class indices (N, d...) or "
                                "probabilities as in.0, param.weight (C); 0 <= label_smoothing <= 1");
    for (size_t s = 0; !ce->prob && s < ce->N * ce->D; s++) {
        float v = tg->data[s];
        long long c = fabsf(v) < 0x1p62f ? (long long)v : -1;
        if ((float)c != v || ((c < 0 || (size_t)c >= ce->C) && c != ce->ig)) {
            dt_error_set("crossentropyloss check: target %g (element %zu) is not a class of %zu",
                         (double)v, s, ce->C);
            return DT_ERR;
        }
    }
    for (uint64_t i = 0; i < x->count; i++)
        if (!isfinite(x->data[i]) || (ce->prob && !isfinite(tg->data[i]))) {
            snprintf(why, nwhy, "crossentropyloss with a logit or probability not finite");
            return 1;
        }
    ce->x = x->data;
    ce->tg = tg->data;
    ce->wt = w ? w->data : NULL;
    *yo = y;
    return 0;
}

int mc_crossentropy(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
                    struct modcheck_result *res, char *why, size_t nwhy)
{
    struct mc_ce ce;
    const struct modcheck_tensor *y = NULL;
    int rc = mc_ce_setup(sp, t, nt, &ce, &y, why, nwhy);
    if (rc != 0)
        return rc;
    struct modcheck_output *o = mc_output(res, "out", y);
    size_t C = ce.C, ns = ce.N * ce.D, kept = 0, red = (size_t)ce.red, left;
    float *xr = dt_malloc(2 * C * sizeof *xr), *pr = xr + C;
    double *tau = dt_malloc(C * sizeof *tau), P[2] = {0, 0}, E[2] = {0, 0}, Wv = 0, Wa = 0;
    mpfr_t *ab = mc_vnew(2 * ns + 3, MC_PREC), *v = mc_vnew(2 * C + 9, MC_ZIV), *c1 = &ab[2 * ns];
    mpfr_ptr tmp = ab[2 * ns + 1], tw = ab[2 * ns + 2], llo = v[2 * C + 3], lhi = v[2 * C + 4];
    mpfr_ptr lo = v[2 * C + 5], hi = v[2 * C + 6], slo = v[2 * C + 7], shi = v[2 * C + 8];
    MC_EXACT(mpfr_set_d(*c1, ce.ls, MPFR_RNDN));
    MC_EXACT(mpfr_d_sub(*c1, 1.0, *c1, MPFR_RNDN));
    mpfr_set_zero(tw, 1);
    char *done = dt_calloc(ns + 1, 1);
    for (size_t s = 0; s < ns; s++) { /* the exact a, b (ab[s], ab[ns + s]) and the bounds */
        long long tc = mc_ce_class(&ce, s);
        double e[4] = {0, 0, 0, 0}, wt = ce.wt && !ce.prob && tc >= 0 ? ce.wt[tc] : 1;
        mc_ce_row(&ce, ce.x, s, xr);
        if (ce.prob)
            mc_ce_row(&ce, ce.tg, s, pr);
        if (tc >= 0) {
            mc_ce_ab(&ce, s, xr, pr, ab[s], ab[ns + s], *c1, tmp, tw);
            mc_ce_bound(&ce, xr, pr, tc, tau, &e[0], &e[2], &e[1], &e[3]);
            kept++;
        } else if (!red) {
            o->exact[s] = 0.0f; /* ignored */
            done[s] = 1;
        }
        if (!red)
            o->bound[s] = tc < 0 ? 0 : mc_ce_out(&ce, e, e + 2, 1, 0);
        P[0] += e[0], P[1] += e[1], E[0] += e[2], E[1] += e[3];
        Wv += wt * (tc >= 0);
        Wa += fabs(wt) * (tc >= 0);
    }
    left = red ? kept > 0 : kept;
    if (red) { /* sums in any order (probabilities: one over all N C terms), then / W */
        double gn = mc_g(ce.prob ? (double)(kept * C) : (double)kept - 1), W = red == 2 ? Wv : 1;
        double EW = ce.wt && !ce.prob ? gn * mc_up(Wa, (double)kept)
                    : kept < (1u << 24) ? 0 : BND_uw * W; /* a count: exact below 2^24 */
        for (int k = 0; k < 2; k++)
            E[k] = (1 + gn) * E[k] + gn * mc_up(P[k], (double)kept);
        o->bound[0] = mc_ce_out(&ce, P, E, W, red == 2 ? EW : 0);
        o->exact[0] = red == 2 ? NAN : 0.0f; /* nothing kept: 0 / 0 */
        if (kept && red == 2 && Wv == 0) {
            snprintf(why, nwhy, "crossentropyloss whose kept targets' weights sum to zero");
            rc = 1;
            left = 0;
        }
    }
    if (red != 2)
        mpfr_set_ui(tw, 1, MPFR_RNDN);
    MC_EXACT(mpfr_mul_ui(tw, tw, (unsigned long)C, MPFR_RNDN)); /* the divisor: C W, or C */
    for (mpfr_prec_t p = MC_ZIV; left; p *= 2) {
        mc_prec(p + 64, llo, lhi, lo, hi, slo, shi, (mpfr_ptr)0);
        mpfr_set_zero(slo, 1);
        mpfr_set_zero(shi, 1);
        left = 0;
        for (size_t s = 0; s < ns; s++) {
            if (done[s] || mc_ce_class(&ce, s) < 0)
                continue;
            mc_ce_row(&ce, ce.x, s, xr);
            float m = mc_exps(v, xr, C, p);
            mpfr_log(llo, v[2 * C + 1], MPFR_RNDD); /* L in [llo, lhi] */
            mpfr_log(lhi, v[2 * C + 2], MPFR_RNDU);
            mpfr_add_d(llo, llo, m, MPFR_RNDD);
            mpfr_add_d(lhi, lhi, m, MPFR_RNDU);
            int neg = mpfr_sgn(ab[s]) < 0; /* [lo, hi] = a [llo, lhi] - b */
            mpfr_mul(lo, ab[s], neg ? lhi : llo, MPFR_RNDD);
            mpfr_mul(hi, ab[s], neg ? llo : lhi, MPFR_RNDU);
            mpfr_sub(lo, lo, ab[ns + s], MPFR_RNDD);
            mpfr_sub(hi, hi, ab[ns + s], MPFR_RNDU);
            if (red) {
                mpfr_add(slo, slo, lo, MPFR_RNDD);
                mpfr_add(shi, shi, hi, MPFR_RNDU);
                continue;
            }
            mpfr_div(lo, lo, tw, MPFR_RNDD);
            mpfr_div(hi, hi, tw, MPFR_RNDU);
            left += !(done[s] = (char)mc_round(lo, hi, p, &o->exact[s]));
        }
        if (red) {
            if (mpfr_sgn(tw) < 0)
                mpfr_swap(slo, shi);
            mpfr_div(slo, slo, tw, MPFR_RNDD);
            mpfr_div(shi, shi, tw, MPFR_RNDU);
            left = !mc_round(slo, shi, p, &o->exact[0]);
        }
    }
    mc_vfree(ab, 2 * ns + 3);
    mc_vfree(v, 2 * C + 9);
    free(done), free(xr), free(tau);
    return rc;
}
