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
#include "oracle_ops_impl.h"
#include "util.h"

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
