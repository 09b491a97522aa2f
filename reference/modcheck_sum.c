/* modcheck_sum.c: the modules of modcheck.h built on sums of products:
 * linear, conv1d, conv2d, mseloss; and the helpers modcheck_norm.c shares
 * (modcheck_impl.h). Exact values are rounded once: sums of products by
 * oracle_dot or an oracle_acc, mseloss's mean by an MPFR interval (directed
 * roundings, the precision doubled until both ends round alike). Bounds
 * follow oracle.c's model and conventions (u, uw, gamma_k; rD, aD the
 * tolerance of division; ETA = 2^-150 per underflowing product or quotient;
 * magnitudes in double, inflated; bounds times BND_UP; +Inf for inputs not
 * finite or a possible overflow). What is admitted, and the bounds:
 *
 * SUMS OF PRODUCTS (linear y = x W^T + b; conv1d, conv2d over the m in-image
 * taps of an output, the padding's zeros adding exact zeros): any order or
 * grouping, FMA or not, float32 or wider, the bias one more term anywhere
 * (addmm's beta C, or after). A product passes m + nb roundings at most (nb
 * = 1 with a bias): |r - y| <= gamma_{m+nb} (s + |b|) + m 2^-149, s = sum |a w|.
 * tf32=1: a, w may lose their 13 low bits first, rounded or truncated,
 * subnormals flushed or not: |a' - a| <= t |a| + f (t = 2^-10, f = 2^-126),
 * |a'w' - aw| <= (2t + t^2)|aw| + f (1 + t)(|a| + |w|) + f^2, summing to E;
 * |r - y| <= E + gamma_{m+nb} (s + E + |b|) + m 2^-149. gpu=1 convolutions may
 * be FFT or Winograd (cuDNN): least = replay_normwise_floor(x, w) (float32's;
 * a TF32 transform is vouched for only within it or the elements' bounds).
 *
 * MSELOSS: d = a - b and d^2 one rounding each, sums in any order, then / n
 * or * (1/n), n converted (one more).
 *
 * Tightness, largest error / allowed of real PyTorch outputs (2.15 CPU and
 * 2.11 CUDA, random inputs): mseloss 0.92 (none), conv 0.67, linear 0.62
 * (modcheck_norm.c's opening comment has its modules'). */
#include "modcheck_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpfr.h>

#include "oracle.h"
#include "oracle_impl.h"
#include "replay.h"
#include "util.h"

#define MC_ZIV_CAP 8192 /* see mc_round */
#define MC_TF32 0x1p-10 /* TF32's relative loss, truncated */

double mc_g(double n) { return oracle_bnd_gamma(n > 0 ? n : 0, BND_u); }
double mc_up(double x, double n) { return x * (1 + (n + 2) * 0x1p-52); }

/* ---- tensors, keys, intervals: modcheck_impl.h's ---------------------------------- */

const struct modcheck_tensor *mc_tensor(const struct modcheck_tensor *t, int nt, const char *role,
                                        const struct mc_spec *sp, int need, int *bad)
{
    const struct modcheck_tensor *x = need ? mc_need(t, nt, role, sp->type) : mc_find(t, nt, role);
    if (!x) {
        *bad |= need;
        return x;
    }
    uint64_t c = 1;
    int ok = x->ndim >= 0 && x->ndim <= 8;
    for (int k = 0; ok && k < x->ndim; k++) {
        ok = x->shape[k] >= 0 && x->shape[k] < ((int64_t)1 << 40);
        c *= ok ? (uint64_t)x->shape[k] : 0;
        ok = ok && c < ((uint64_t)1 << 40);
    }
    if (!ok || c != x->count || (c && !x->data)) {
        dt_error_set("%s check: the shape of '%s' does not fit its %llu values", sp->type, role,
                     (unsigned long long)x->count);
        *bad = 1;
    }
    return x;
}

int mc_shape_err(const struct mc_spec *sp, const char *what)
{
    dt_error_set("%s check: shapes do not fit (%s)", sp->type, what);
    return DT_ERR;
}

int mc_reduction(const struct mc_spec *sp)
{
    const char *r = mc_get(sp, "reduction");
    if (!r || strcmp(r, "mean") == 0)
        return 2;
    if (strcmp(r, "sum") == 0 || strcmp(r, "none") == 0)
        return r[0] == 's';
    dt_error_set("%s check: reduction=%s is not mean, sum or none", sp->type, r);
    return DT_ERR;
}

void mc_prec(mpfr_prec_t p, mpfr_ptr a, ...)
{
    va_list ap;
    va_start(ap, a);
    for (; a; a = va_arg(ap, mpfr_ptr))
        mpfr_set_prec(a, p);
    va_end(ap);
}

int mc_round(mpfr_srcptr lo, mpfr_srcptr hi, mpfr_prec_t p, float *out)
{
    float a = mpfr_get_flt(lo, MPFR_RNDN), b = mpfr_get_flt(hi, MPFR_RNDN);
    if (memcmp(&a, &b, sizeof a) != 0 && !(isnan(a) && isnan(b)) && p < MC_ZIV_CAP)
        return 0;
    int zero = memcmp(&a, &b, sizeof a) != 0 && mpfr_sgn(lo) <= 0 && mpfr_sgn(hi) >= 0;
    *out = zero ? 0.0f : a;
    return 1;
}

/* ---- sums of products (linear, conv) ------------------------------------------------- */

/* The exact value and the bound of sum_k a[k] w[k] (+ *bias); a and w have
 * room for m + 1 values. bad: a weight the padding multiplies is not finite. */
static void mc_dot(float *a, float *w, size_t m, const float *bias, int tf32, int bad, float *ex,
                   double *bd)
{
    size_t n = m;
    if (bias) {
        a[n] = 1.0f;
        w[n++] = *bias;
    }
    *ex = oracle_dot(a, 1, w, 1, n);
    double s = 0, sa = 0, t = MC_TF32, f = MC_FTZ, dm = (double)m;
    for (size_t k = 0; k < m; k++) {
        bad |= !isfinite(a[k]) || !isfinite(w[k]);
        s += fabs((double)a[k] * w[k]);
        sa += fabs((double)a[k]) + fabs((double)w[k]);
    }
    bad |= bias && !isfinite(*bias);
    double ab = bias ? fabs((double)*bias) : 0, gk = mc_g(dm + (bias != NULL));
    s = mc_up(s, dm);
    double E = tf32 ? (2 * t + t * t) * s + f * (1 + t) * mc_up(sa, 2 * dm) + dm * f * f : 0;
    *bd = bad || oracle_bnd_ovf((s + E + ab) * (1 + gk))
              ? INFINITY : (E + gk * (s + E + ab) + dm * 0x1p-149) * BND_UP;
}

int mc_linear(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
              struct modcheck_result *res, char *why, size_t nwhy)
{
    int bad = 0;
    const struct modcheck_tensor *x = mc_tensor(t, nt, "in.0", sp, 1, &bad);
    const struct modcheck_tensor *W = mc_tensor(t, nt, "param.weight", sp, 1, &bad);
    const struct modcheck_tensor *b = mc_tensor(t, nt, "param.bias", sp, 0, &bad);
    const struct modcheck_tensor *y = mc_tensor(t, nt, "out", sp, 1, &bad);
    double tf32;
    if (bad || mc_num(sp, "tf32", 0, &tf32) < 0)
        return DT_ERR;
    int ok = W->ndim == 2 && x->ndim >= 1 && y->ndim == x->ndim &&
             x->shape[x->ndim - 1] == W->shape[1] && y->shape[y->ndim - 1] == W->shape[0] &&
             (!b || (b->ndim == 1 && b->shape[0] == W->shape[0]));
    size_t rows = 1, I = ok ? (size_t)W->shape[1] : 0, O = ok ? (size_t)W->shape[0] : 0;
    for (int k = 0; ok && k + 1 < x->ndim; k++) {
        ok = x->shape[k] == y->shape[k];
        rows *= (size_t)x->shape[k];
    }
    if (!ok)
        return mc_shape_err(sp, "in.0 (..., I), param.weight (O, I), param.bias (O), out (..., O)");
    struct modcheck_output *o = mc_output(res, "out", y);
    float *a = dt_malloc((I + 1) * sizeof *a), *w = dt_malloc((I + 1) * sizeof *w);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < O; j++) {
            memcpy(a, x->data + r * I, I * sizeof *a);
            memcpy(w, W->data + j * I, I * sizeof *w);
            mc_dot(a, w, I, b ? b->data + j : NULL, tf32 != 0, 0, &o->exact[r * O + j],
                   &o->bound[r * O + j]);
        }
    free(a), free(w);
    (void)why, (void)nwhy;
    return DT_OK;
}

/* One spatial dim of a convolution (conv1d: the rows are one). */
struct mc_cdim {
    int64_t in, k, out, stride, dil, pad; /* pad: the leading side's */
};

/* stride, dilation and padding of ns spatial dims (in and k set), and out. */
static int mc_conv_keys(const struct mc_spec *sp, int ns, struct mc_cdim *d)
{
    int64_t st[2] = {1, 1}, dl[2] = {1, 1}, pd[2] = {0, 0};
    const char *pv = mc_get(sp, "padding");
    int same = pv && strcmp(pv, "same") == 0;
    if ((mc_get(sp, "stride") && mc_ints(sp, "stride", st, ns) != ns) ||
        (mc_get(sp, "dilation") && mc_ints(sp, "dilation", dl, ns) != ns) ||
        (pv && !same && strcmp(pv, "valid") != 0 && mc_ints(sp, "padding", pd, ns) != ns))
        return DT_ERR;
    for (int k = 0; k < ns; k++) {
        struct mc_cdim *c = &d[k];
        if (st[k] < 1 || dl[k] < 1 || pd[k] < 0 || c->k < 1 || (same && st[k] != 1))
            return mc_shape_err(sp, "stride, dilation, padding, kernel size");
        int64_t tot = same ? dl[k] * (c->k - 1) : 2 * pd[k]; /* same: left tot/2, right the rest */
        int64_t span = c->in + tot - dl[k] * (c->k - 1) - 1;
        c->stride = st[k];
        c->dil = dl[k];
        c->pad = same ? tot / 2 : pd[k];
        c->out = span < 0 ? 0 : span / st[k] + 1;
    }
    return DT_OK;
}

int mc_conv(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
            struct modcheck_result *res, char *why, size_t nwhy)
{
    int bad = 0, ns = strcmp(sp->type, "conv2d") == 0 ? 2 : 1;
    const struct modcheck_tensor *x = mc_tensor(t, nt, "in.0", sp, 1, &bad);
    const struct modcheck_tensor *W = mc_tensor(t, nt, "param.weight", sp, 1, &bad);
    const struct modcheck_tensor *b = mc_tensor(t, nt, "param.bias", sp, 0, &bad);
    const struct modcheck_tensor *y = mc_tensor(t, nt, "out", sp, 1, &bad);
    const char *pm = mc_get(sp, "padding_mode");
    double gd, tf32, gpu;
    if (bad || mc_num(sp, "tf32", 0, &tf32) < 0 || mc_num(sp, "gpu", 0, &gpu) < 0 ||
        mc_num(sp, "groups", 1, &gd) < 0)
        return DT_ERR;
    if (pm && strcmp(pm, "zeros") != 0) {
        snprintf(why, nwhy, "%s with padding_mode=%s", sp->type, pm);
        return 1;
    }
    int bt = x->ndim == ns + 2; /* batched */
    if ((!bt && x->ndim != ns + 1) || W->ndim != ns + 2 || y->ndim != x->ndim)
        return mc_shape_err(sp, "in.0 (N, C, [H,] W) or without N, param.weight (K, C/G, [R,] S)");
    struct mc_cdim d[2] = {{1, 1, 1, 1, 1, 0}, {1, 1, 1, 1, 1, 0}};
    for (int k = 0; k < ns; k++) {
        d[2 - ns + k].in = x->shape[bt + 1 + k];
        d[2 - ns + k].k = W->shape[2 + k];
    }
    if (mc_conv_keys(sp, ns, d + 2 - ns) < 0)
        return DT_ERR;
    int64_t N = bt ? x->shape[0] : 1, C = x->shape[bt], K = W->shape[0], Cg = W->shape[1];
    int64_t G = gd >= 1 && gd < 1e9 ? (int64_t)gd : 0;
    int ok = (double)G == gd && Cg * G == C && K % G == 0 && (!bt || y->shape[0] == N) &&
             y->shape[bt] == K && (!b || (b->ndim == 1 && b->shape[0] == K));
    for (int k = 0; k < ns; k++)
        ok = ok && y->shape[bt + 1 + k] == d[2 - ns + k].out;
    if (!ok)
        return mc_shape_err(sp, "groups, channels or the output's size");
    struct modcheck_output *o = mc_output(res, "out", y);
    if (gpu)
        o->least = replay_normwise_floor(x->data, x->count, W->data, W->count);
    size_t taps = (size_t)(Cg * d[0].k * d[1].k), hw = (size_t)(d[0].in * d[1].in), e = 0;
    float *a = dt_malloc((taps + 1) * sizeof *a), *w = dt_malloc((taps + 1) * sizeof *w);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            const float *wk = W->data + (size_t)k * taps;
            const float *xg = x->data + (size_t)(n * C + k / (K / G) * Cg) * hw; /* k's group */
            int wbad = 0;
            for (size_t j = 0; j < taps; j++)
                wbad |= !isfinite(wk[j]);
            for (int64_t oh = 0; oh < d[0].out; oh++)
                for (int64_t ow = 0; ow < d[1].out; ow++, e++) {
                    size_t m = 0;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t r = 0; r < d[0].k; r++) {
                            int64_t ih = oh * d[0].stride - d[0].pad + r * d[0].dil;
                            for (int64_t s = 0; ih >= 0 && ih < d[0].in && s < d[1].k; s++) {
                                int64_t iw = ow * d[1].stride - d[1].pad + s * d[1].dil;
                                if (iw < 0 || iw >= d[1].in)
                                    continue;
                                a[m] = xg[(size_t)c * hw + (size_t)(ih * d[1].in + iw)];
                                w[m++] = wk[(size_t)((c * d[0].k + r) * d[1].k + s)];
                            }
                        }
                    mc_dot(a, w, m, b ? b->data + k : NULL, tf32 != 0, wbad, &o->exact[e],
                           &o->bound[e]);
                }
        }
    free(a), free(w);
    return DT_OK;
}

/* ---- mseloss ------------------------------------------------------------------------------- */

int mc_mse(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
           struct modcheck_result *res, char *why, size_t nwhy)
{
    int bad = 0, red, fin = 1;
    const struct modcheck_tensor *a = mc_tensor(t, nt, "in.0", sp, 1, &bad);
    const struct modcheck_tensor *b = mc_tensor(t, nt, "in.1", sp, 1, &bad);
    const struct modcheck_tensor *y = mc_tensor(t, nt, "out", sp, 1, &bad);
    if (bad || (red = mc_reduction(sp)) < 0)
        return DT_ERR;
    int ok = a->count == b->count && a->ndim == b->ndim && y->count == (red ? 1 : a->count);
    for (int k = 0; ok && k < a->ndim; k++)
        ok = a->shape[k] == b->shape[k];
    if (!ok)
        return mc_shape_err(sp, "in.0 and in.1 of one shape, out as they (none) or one value");
    struct modcheck_output *o = mc_output(res, "out", y);
    size_t n = (size_t)a->count;
    double s = 0, sall = 0, dn = (double)n;
    struct oracle_acc *acc = oracle_acc_new(), *one = oracle_acc_new();
    for (size_t i = 0; i < n; i++) {
        float p = a->data[i], q = b->data[i];
        double d = (double)p - q, x = d * d;
        sall += x; /* IEEE's Inf or NaN where an input is not finite */
        fin &= isfinite(p) && isfinite(q);
        if (!isfinite(p) || !isfinite(q)) {
            if (!red)
                o->exact[i] = (float)x, o->bound[i] = INFINITY;
            continue;
        }
        oracle_acc_clear(one); /* (p - q)^2 = p p - p q - p q + q q */
        oracle_acc_add_prod(red ? acc : one, p, p);
        oracle_acc_add_prod(red ? acc : one, -p, q);
        oracle_acc_add_prod(red ? acc : one, -p, q);
        oracle_acc_add_prod(red ? acc : one, q, q);
        if (!red) {
            o->exact[i] = oracle_acc_round_f32(one);
            o->bound[i] = oracle_bnd_ovf(x * (1 + 4 * BND_u))
                              ? INFINITY : ((pow(1 + BND_uw, 3) - 1) * x + BND_ETA) * BND_UP;
        }
        s += x;
    }
    if (red) {
        s = mc_up(s, dn + 2); /* d, d^2 and the sum in double */
        double gn = mc_g(dn + 3), th = (1 + gn) * (1 + oracle_bnd_rel(BND_E_DIV)) - 1;
        double bd = red == 1 ? mc_g(dn + 2) * s + dn * BND_ETA * (1 + gn)
                             : th * s / dn * (1 + 0x1p-50) + (dn + 2) * BND_ETA * (1 + th);
        o->bound[0] = !fin || n == 0 || oracle_bnd_ovf(s * (1 + gn)) ? INFINITY : bd * BND_UP;
        o->exact[0] = !fin || n == 0 ? (float)(red == 1 ? sall : sall / dn) : oracle_acc_round_f32(acc);
        if (fin && n && red == 2) { /* RN32(S / n): an exact quotient collapses the interval */
            mpfr_t S, lo, hi;
            mpfr_init2(S, 64);
            mpfr_inits2(MC_ZIV, lo, hi, (mpfr_ptr)0);
            oracle_acc_get_mpfr(acc, S);
            for (mpfr_prec_t p = MC_ZIV;; p *= 2) {
                mc_prec(p, lo, hi, (mpfr_ptr)0);
                mpfr_div_ui(lo, S, (unsigned long)n, MPFR_RNDD);
                mpfr_div_ui(hi, S, (unsigned long)n, MPFR_RNDU);
                if (mc_round(lo, hi, p, &o->exact[0]))
                    break;
            }
            mpfr_clears(S, lo, hi, (mpfr_ptr)0);
        }
    }
    oracle_acc_free(acc), oracle_acc_free(one);
    (void)why, (void)nwhy;
    return DT_OK;
}
