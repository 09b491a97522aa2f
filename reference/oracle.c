/* oracle.c: oracle_bound, a rigorous bound on the error of the cpu
 * backend's float32 algorithm (src/backend_cpu.c) for every op, by forward
 * error analysis. The derivations are in the comments; the formulas are the
 * table of divtrace-replay(1).
 *
 * Model: every float32 operation gives fl(a op b) = (a op b)(1 + d) + h with
 * |d| <= u = 2^-24; h = 0 for additions and subtractions (exact in the
 * subnormal range) and sqrt, |h| <= 2^-150 for products and quotients (half
 * the smallest subnormal), and d h = 0. gamma_n = n u / (1 - n u). Double
 * operations the same with U = 2^-53 (no underflow arises in them here).
 * Library functions, in ulp of the exact result: glibc's documented maximum
 * errors on x86_64 (sysdeps/x86_64/fpu/libm-test-ulps) are expf 1, tanhf 2,
 * pow (double) 1. An exhaustive check of every float (|x| <= 89 for expf)
 * on glibc 2.36 found expf within 0.502 ulp but tanhf off by 2.19 ulp at
 * x = +-0x1.ddca18p-3
 * (tanhf gives 0x1.d54e4ap-3, tanh is 0x1.d54e4e6...p-3), beyond its
 * documentation: we use E_tanh = 3.
 * Where a product could be contracted into an FMA, the bound holds for both.
 * Overflow: whenever some intermediate of the cpu algorithm could reach
 * FLT_MAX, the bound is +Inf; so it is when an input is NaN or Inf (replay
 * compares those bitwise or by class), except for the exact ops (relu,
 * relu_bwd, fill, and the ops that select or move elements: maxpool2 and
 * its bwd, upsample2, concat, slice and its bwd, satlu and its bwd, neg:
 * bound 0).
 * Evaluation: the magnitudes in a formula (|X|, sum |a b|, ...) are computed
 * in double from the float inputs, with relative errors below 2^-45 (a few
 * roundings), except sums of K terms, which are first inflated by
 * 1 + (K + 2) 2^-52 >= 1 / (1 - gamma_{K-1}(U)); every formula is monotonic
 * in them, and the result is multiplied by 1 + 2^-30 (BND_UP), which covers
 * the rest.
 * Tightness, largest (mean) observed error / bound over random inputs in
 * [-1, 1] (tests/test_oracle_ops.c, TEST_ORACLE_VERBOSE=1): add, add_bias,
 * sub 1 (ties), mul 1 (0.5), mean_bwd 1 (0.58), mean 0.98 (0.52), sgd 0.99
 * (0.28), momentum 0.97 (0.29), hard_sigmoid 0.96 (0.30, x in [-3.5, 3.5]),
 * mse 0.96 (0.55), hard_sigmoid_bwd 0.95 (0.5), sigmoid_bwd 0.87 (0.18),
 * adam_p 0.85 (0.13), mse_bwd 0.86 (0.21), adam_m 0.78 (0.19), tanh_bwd 0.74
 * (0.14), adam_v 0.72 (0.15), upsample2_bwd 0.65 (0.10), tanh 0.62 (0.17),
 * sigmoid 0.45 (0.14); the sums are worst-case bounds, loose as such bounds
 * are on random data: matmul 0.2 (0.02) for K <= 300 but 7e-4 (2e-4) at
 * K = 784, convolutions near 0.9 for a few terms (1x1 images) but 0.06 on
 * average, bias_grad 0.09 (0.01). */
#include "oracle.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define BND_u 0x1p-24       /* float32 unit roundoff */
#define BND_U 0x1p-53       /* double unit roundoff */
#define BND_ETA 0x1p-150    /* underflow error of a float32 product or quotient */
#define BND_UP (1 + 0x1p-30)
#define BND_E_EXP 1.0       /* expf, ulp */
#define BND_E_TANH 3.0      /* tanhf, ulp: documented 2, measured 2.19 */
#define BND_E_POW 1.0       /* pow, ulp of double */

static double bnd_gamma(double n, double u)
{
    return n * u < 0.5 ? n * u / (1 - n * u) : INFINITY;
}

/* +Inf when a magnitude bound m of some intermediate might overflow float32. */
static int bnd_ovf(double m)
{
    return !(m * (1 + 0x1p-20) < FLT_MAX);
}

/* x (1 + e) for a magnitude computed with relative error below e. */
static double bnd_inflate(double x, double n) { return x * (1 + (n + 2) * 0x1p-52); }

/* ---- matrix product ----------------------------------------------------------
 * Any order of the K products and K - 1 additions (blocked, pairwise, with
 * FMA or without) passes each product through at most K roundings:
 * |fl - exact| <= gamma_K sum_k |a_ik b_kj| + K 2^-149 (the products'
 * underflow errors, <= 2^-150 each, amplified by at most 1 + gamma_K < 2).
 * alpha = 1 and beta = 0 are exact. */
static void bnd_matmul(const struct graph *g, const struct node *nd, double *bound,
                       const float *const *in)
{
    const struct node *na = &g->nodes[nd->inputs[0]];
    int ta = nd->p.mm.ta, tb = nd->p.mm.tb;
    size_t m = nd->shape[0], n = nd->shape[1];
    size_t k = ta ? na->shape[0] : na->shape[1];
    double gk = bnd_gamma((double)k, BND_u);
    /* |op(A)| rows and |op(B)| columns, contiguous */
    float *ar = dt_malloc((m * k + 1) * sizeof *ar), *bc = dt_malloc((n * k + 1) * sizeof *bc);
    for (size_t i = 0; i < m; i++)
        for (size_t l = 0; l < k; l++)
            ar[i * k + l] = fabsf(ta ? in[0][l * m + i] : in[0][i * k + l]);
    for (size_t j = 0; j < n; j++)
        for (size_t l = 0; l < k; l++)
            bc[j * k + l] = fabsf(tb ? in[1][j * k + l] : in[1][l * n + j]);
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            const float *x = ar + i * k, *y = bc + j * k;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            size_t l = 0;
            for (; l + 4 <= k; l += 4) {
                s0 += (double)x[l] * y[l];
                s1 += (double)x[l + 1] * y[l + 1];
                s2 += (double)x[l + 2] * y[l + 2];
                s3 += (double)x[l + 3] * y[l + 3];
            }
            for (; l < k; l++)
                s0 += (double)x[l] * y[l];
            double s = bnd_inflate((s0 + s1) + (s2 + s3), (double)k);
            double b = gk * s + (double)k * 0x1p-149;
            bound[i * n + j] = (k == 0) ? 0 : bnd_ovf(s * (1 + gk)) || isnan(s) ? INFINITY : b * BND_UP;
        }
    free(ar);
    free(bc);
}

/* ---- elementwise ops ------------------------------------------------------------ */

/* a + b: one correctly rounded addition: half an ulp of the exact sum, so the
 * cpu result equals the oracle's (the other neighbour only at a tie, which
 * both break to even). ulp32 is evaluated at an upper bound of |a + b|. */
static double bnd_add(float a, float b)
{
    double s = fabs((double)a + b) * (1 + 0x1p-52);
    if (!isfinite(s) || s >= 0x1p128 * (1 - 0x1p-25))
        return INFINITY;
    return 0.5 * oracle_ulp32(s);
}

/* sigmoid: e = expf(-x) = E (1 + e1), |e1| <= 2u E_exp (1 ulp <= 2^-23 of a
 * normal result; a subnormal E < 2^-126 leaves fl(1 + e) = 1, where the error
 * |1 - sigma| < 2^-126 is far inside the bound). d = fl(1 + e) = (1 + E)(1 + t)
 * with |t| <= th = (1 + 2u E_exp)(1 + u) - 1, since E / (1 + E) < 1.
 * s = fl(1 / d) = sigma (1 + d2) / (1 + t) + h:
 *   |s - sigma| <= sigma (u + th) / (1 - th) + 2^-150   (about 4u sigma).
 * For x < -88.5 expf(-x) may overflow to Inf, and s = 0: the error is then
 * sigma < e^-88.5 < 2^-127, added. */
static double bnd_sigmoid(float x)
{
    if (!isfinite(x))
        return INFINITY;
    double th = (1 + 2 * BND_u * BND_E_EXP) * (1 + BND_u) - 1;
    double sig = 1.0 / (1.0 + exp(-(double)x)) * (1 + 0x1p-40);
    double b = sig * (BND_u + th) / (1 - th) + BND_ETA;
    if (x < -88.5f)
        b += 0x1p-127;
    return b;
}

/* tanh: tanhf errs by at most E_tanh ulp of the exact value (see the top of
 * this file); ulp32 at an upper bound of |tanh x|. */
static double bnd_tanh(float x)
{
    if (!isfinite(x))
        return INFINITY;
    return BND_E_TANH * oracle_ulp32(fabs(tanh((double)x)) * (1 + 0x1p-40));
}

/* sigmoid_bwd: cpu (dy y)(1 - y): p1 = dy y (1 + d1) + h1, c = (1 - y)(1 + d2),
 * r = p1 c (1 + d3) + h3 = X (1 + d1)(1 + d2)(1 + d3) + h1 c (1 + d3) + h3:
 *   |r - X| <= gamma_3 |X| + 2^-150 (1 + (1 + u)^2 |1 - y|). */
static double bnd_sigmoid_bwd(float y, float dy)
{
    if (!isfinite(y) || !isfinite(dy))
        return INFINITY;
    double c = fabs(1.0 - y), x = fabs((double)dy * y) * c;
    if (bnd_ovf(fabs((double)dy * y)) || bnd_ovf(c) || bnd_ovf(x * (1 + 4 * BND_u)))
        return INFINITY;
    return bnd_gamma(3, BND_u) * x + BND_ETA * (1 + (1 + BND_u) * (1 + BND_u) * c);
}

/* tanh_bwd: cpu dy (1 - y y). q = y^2 (1 + d1) + h1; c = fl(1 - q) has
 *   |c - (1 - y^2)| <= u |1 - y^2| + (1 + u)(u y^2 + 2^-150)
 * (also when 1 - y y is one FMA: then only u |1 - y^2|); r = dy c (1 + d3) + h3:
 *   |r - X| <= |dy| |1 - y^2| (2u + u^2) + |dy| (u y^2 + 2^-150)(1 + u)^2 + 2^-150.
 * The cancellation in 1 - y^2 near |y| = 1 is the u y^2 term: relative to X
 * it grows like u y^2 / |1 - y^2|. */
static double bnd_tanh_bwd(float y, float dy)
{
    if (!isfinite(y) || !isfinite(dy))
        return INFINITY;
    double yy = (double)y * y, c = fabs(1.0 - yy), a = fabs((double)dy);
    if (bnd_ovf(yy) || bnd_ovf(c) || bnd_ovf(a * c * (1 + 4 * BND_u)))
        return INFINITY;
    double u1 = 1 + BND_u;
    return a * c * (2 * BND_u + BND_u * BND_u) + a * (BND_u * yy + BND_ETA) * u1 * u1 + BND_ETA;
}

/* mse_bwd: cpu scale = (float)(2.0 / n) [* g], then scale * (p - t):
 *   scale = (2 g / n)(1 + da)(1 + db)[(1 + dc)] + [hc], da double, db, dc float;
 *   r = (scale (p - t)(1 + dd))(1 + de) + he:
 *   |r - X| <= ((1 + U)(1 + u)^k - 1) |X| + 2^-150 (1 + [g] (1 + u)^2 |p - t|),
 * k = 4 with g, 3 without; X = 2 (p - t) g / n. */
static double bnd_mse_bwd(float p, float t, float g, int has_g, double n)
{
    if (!isfinite(p) || !isfinite(t) || !isfinite(g))
        return INFINITY;
    double d = fabs((double)p - t), x = 2 * d * fabs((double)g) / n;
    double u1 = 1 + BND_u, f = (1 + BND_U) * u1 * u1 * u1 * (has_g ? u1 : 1) - 1;
    if (bnd_ovf(d) || bnd_ovf(2 / n * fabs((double)g) * u1 * u1) || bnd_ovf(x * (1 + f)))
        return INFINITY;
    return f * x + BND_ETA * (1 + (has_g ? u1 * u1 * d : 0));
}

/* p + a b with one product (sgd: a = -lr, b = g; momentum: a = mu, b = buf,
 * p = g). Without FMA: t = a b (1 + d1) + h1, r = (p + t)(1 + d2):
 *   r - X = X d2 + (a b d1 + h1)(1 + d2);
 * with FMA r = X (1 + d2). Both: |r - X| <= u |X| + (1 + u)(u |a b| + 2^-150). */
static double bnd_axpy(float p, float a, float b)
{
    if (!isfinite(p) || !isfinite(a) || !isfinite(b))
        return INFINITY;
    double ab = fabs((double)a * b), x = fabs(p + (double)a * b);
    if (bnd_ovf(ab * (1 + BND_u)) || bnd_ovf(x + ab * 2 * BND_u))
        return INFINITY;
    return BND_u * x + (1 + BND_u) * (BND_u * ab + BND_ETA);
}

/* adam_m: cpu c = fl(1 - b1) = (1 - b1)(1 + dc); out = b1 m + c g with
 * T1 = b1 m, T2 = (1 - b1) g, X = T1 + T2: P1 = T1 (1 + d1) + h1,
 * P2 = T2 (1 + dc)(1 + d2) + h2, r = (P1 + P2)(1 + d3):
 *   |r - X| <= u |X| + (1 + u)(u |T1| + gamma_2 |T2| + 2 2^-150);
 * an FMA of either product only drops terms.
 * adam_v: out = b2 v + (c g) g, T2 = (1 - b2) g^2: P2 = ((1 - b2)(1 + dc) g
 * (1 + d2) + h2) g (1 + d4) + h4 = T2 (1 + dc)(1 + d2)(1 + d4) + h2 g (1 + d4) + h4:
 *   |r - X| <= u |X| + (1 + u)(u |T1| + gamma_3 |T2| + 2^-150 (2 + (1 + u) |g|)). */
static double bnd_adam_mv(float b, float mv, float g, int isv)
{
    if (!isfinite(b) || !isfinite(mv) || !isfinite(g))
        return INFINITY;
    double t1 = fabs((double)b * mv), cg = fabs((1.0 - b) * g);
    double t2 = isv ? cg * fabs((double)g) : cg;
    double x = fabs((double)b * mv + (1.0 - b) * g * (isv ? (double)g : 1.0));
    if (bnd_ovf(t1 * 2) || bnd_ovf(cg * 2) || bnd_ovf(t2 * 2) || bnd_ovf(x + t1 + t2))
        return INFINITY;
    if (!isv)
        return BND_u * x + (1 + BND_u) * (BND_u * t1 + bnd_gamma(2, BND_u) * t2 + 2 * BND_ETA);
    return BND_u * x + (1 + BND_u) * (BND_u * t1 + bnd_gamma(3, BND_u) * t2 +
                                      BND_ETA * (2 + (1 + BND_u) * fabs((double)g)));
}

/* ---- adam_p: running error bound ----------------------------------------------
 * cpu: c_k = (float)(1.0 - pow(b_k, t)); out = p - lr (m / c1) / (sqrtf(v / c2) + eps).
 * Each quantity carries its exact value V (from the exact c_k) and a bound e
 * on |computed - V|; a float operation on computed operands adds its rounding
 * u |result| (+ 2^-150 for products and quotients), bounded through
 * |result| <= |V| + e_prop, where e_prop is the propagated error:
 *   x y:     |X| e_y + |Y| e_x + e_x e_y
 *   x / y:   (e_x + |X / Y| e_y) / (|Y| - e_y)          (needs e_y < |Y|)
 *   sqrt x:  min(e_x / sqrt X, sqrt e_x)                 (sqrt halves relative error)
 *   x + y:   e_x + e_y
 * c_k: pow errs by <= E_pow ulp <= 2 E_pow U |b^t|, 1.0 - pw by U, the
 * conversion by u (+ 2^-150): e_c = |c| ((1 + u)(1 + U)(1 + 2 E_pow U |b^t| / |c|) - 1) + 2^-150.
 * First order, with c exact to u and eps >= 0: about u |X| + (5 + 2 S / D) u |Y|,
 * S = sqrt(v / c2), D = S + eps, Y = lr m / (c1 D). */
struct bnd_ev {
    double v, e; /* |exact value| (upper bound), error bound */
};

/* A float operation with exact result magnitude v and propagated error ep;
 * an exact zero (v = ep = 0) is computed exactly. */
static struct bnd_ev bnd_round(double v, double ep, int under)
{
    struct bnd_ev r = {v, ep + BND_u * (v + ep) + (under && (v > 0 || ep > 0) ? BND_ETA : 0)};
    return r;
}

static struct bnd_ev bnd_div(struct bnd_ev x, struct bnd_ev y)
{
    if (!(y.e < y.v))
        return (struct bnd_ev){INFINITY, INFINITY};
    double q = x.v / y.v;
    return bnd_round(q, (x.e + q * y.e) / (y.v - y.e), 1);
}

struct bnd_adam {
    double c1, c2, e1, e2; /* c_k = 1 - b_k^t and the error bound of the cpu's c_k */
};

/* 1 - b^t to 2^-100 relative and the cpu's error on it; e = Inf when c = 0
 * or cancels more than 60 bits of b^t (no such Adam in practice). */
static void bnd_adam_c(float b, uint64_t t, double *c, double *e)
{
    mpfr_t pw, bm, cm;
    mpfr_inits2(200, pw, cm, (mpfr_ptr)0);
    mpfr_init2(bm, 24);
    mpfr_set_flt(bm, b, MPFR_RNDN);
    mpfr_pow_ui(pw, bm, (unsigned long)t, MPFR_RNDN);
    mpfr_ui_sub(cm, 1, pw, MPFR_RNDN);
    double bt = fabs(mpfr_get_d(pw, MPFR_RNDN));
    *c = mpfr_get_d(cm, MPFR_RNDN);
    if (*c == 0 || !isfinite(*c) || !isfinite(bt) ||
        (!mpfr_zero_p(pw) && mpfr_get_exp(pw) - mpfr_get_exp(cm) > 60)) {
        *e = INFINITY;
    } else {
        double rel = (1 + BND_u) * (1 + BND_U) * (1 + 2 * BND_E_POW * BND_U * bt / fabs(*c)) - 1;
        *e = fabs(*c) * rel + BND_ETA;
    }
    mpfr_clears(pw, cm, bm, (mpfr_ptr)0);
}

/* The analysis assumes c_k > 0, eps >= 0 and v >= 0 (any Adam); else +Inf. */
static double bnd_adam_p(const struct bnd_adam *A, float lr, float eps, float p, float m, float v)
{
    if (!isfinite(p) || !isfinite(m) || !isfinite(v) || !isfinite(lr) || !isfinite(eps) ||
        v < 0 || eps < 0 || !(A->c1 > 0) || !(A->c2 > 0) || !isfinite(A->e1) || !isfinite(A->e2))
        return INFINITY;
    struct bnd_ev c1 = {A->c1, A->e1}, c2 = {A->c2, A->e2};
    struct bnd_ev q = bnd_div((struct bnd_ev){fabs((double)m), 0}, c1);
    struct bnd_ev w = bnd_div((struct bnd_ev){(double)v, 0}, c2);
    double sv = sqrt(w.v);
    struct bnd_ev s = bnd_round(sv, sv > 0 ? fmin(w.e / sv, sqrt(w.e)) : sqrt(w.e), 0);
    struct bnd_ev d = bnd_round(sv + eps, s.e, 0);
    struct bnd_ev y1 = bnd_round(fabs((double)lr) * q.v, fabs((double)lr) * q.e, 1);
    struct bnd_ev y = bnd_div(y1, d);
    double x = fabs(p - (double)lr * ((double)m / A->c1) / (sv + eps));
    double e = y.e + BND_u * (x + y.e);
    if (!(e < INFINITY) || bnd_ovf(q.v + q.e) || bnd_ovf(y1.v + y1.e) || bnd_ovf(y.v + y.e) ||
        bnd_ovf(x + e) || bnd_ovf(w.v + w.e))
        return INFINITY;
    return e;
}

/* ---- image ops -----------------------------------------------------------------
 * Dimension letters (op.h): N batch, C input channels, K output channels, H, W
 * image rows and columns, R, S kernel rows and columns. */

/* Half an ulp of float32 at x >= |value| (one correctly rounded operation,
 * subnormals included: 2^-150 there); +Inf where RN32 could overflow. */
static double bnd_half_ulp(double x)
{
    if (!isfinite(x) || x >= 0x1p128 * (1 - 0x1p-25))
        return INFINITY;
    return 0.5 * oracle_ulp32(x);
}

static int bnd_all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

/* A sum of m products of floats (a convolution's in-image terms), s = their
 * sum of magnitudes in double: as matmul, any order, with or without FMA,
 *   |fl - exact| <= gamma_m s + m 2^-149.
 * A kernel that also multiplies the padding's zeros adds exact zeros (x + 0
 * and fma(0, w, x) are exact): m counts the in-image terms only. */
static double bnd_sum_prods(double s, size_t m)
{
    if (m == 0)
        return 0;
    double gk = bnd_gamma((double)m, BND_u);
    s = bnd_inflate(s, (double)m);
    return bnd_ovf(s * (1 + gk)) || isnan(s) ? INFINITY : gk * s + (double)m * 0x1p-149;
}

/* The shift of kernel row r of R (or column s of S) from the centre. */
#define BND_D(r, R) ((long)(r) - (long)((R) / 2))

/* Offset of row a + da, column b + db of an H x W plane, or -1 outside it. */
static long bnd_at(size_t a, long da, size_t b, long db, size_t h, size_t w)
{
    long r = (long)a + da, c = (long)b + db;
    return r < 0 || r >= (long)h || c < 0 || c >= (long)w ? -1 : r * (long)w + c;
}

/* conv2d (N,K,H,W): the terms of element (n,k,h,w) are x[n,c,h+r-R/2,w+s-S/2]
 * w[k,c,r,s] over in-image (c, r, s). +Inf when a term's x or any of w[k] is
 * not finite (a kernel that multiplies the padding would turn a non-finite
 * weight there into NaN). */
static void bnd_conv2d(const struct graph *g, const struct node *nd, double *bound,
                       const float *x, /* (N,C,H,W) */ const float *w /* (K,C,R,S) */)
{
    const uint32_t *xs = g->nodes[nd->inputs[0]].shape, *ws = g->nodes[nd->inputs[1]].shape;
    size_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], K = ws[0], R = ws[2], S = ws[3];
    size_t crs = C * R * S, hw = H * W;
    double *xb = dt_malloc((crs + 1) * sizeof *xb);
    size_t *off = dt_malloc((crs + 1) * sizeof *off);
    char *wok = dt_malloc(K + 1);
    for (size_t k = 0; k < K; k++)
        wok[k] = (char)bnd_all_finite(w + k * crs, crs);
    for (size_t n = 0; n < N; n++)
        for (size_t h = 0; h < H; h++)
            for (size_t v = 0; v < W; v++) {
                size_t m = 0;
                int bad = 0;
                for (size_t c = 0; c < C; c++)
                    for (size_t r = 0; r < R; r++)
                        for (size_t s = 0; s < S; s++) {
                            long p = bnd_at(h, BND_D(r, R), v, BND_D(s, S), H, W);
                            if (p < 0)
                                continue;
                            float xv = x[(n * C + c) * hw + (size_t)p];
                            bad |= !isfinite(xv);
                            xb[m] = fabs((double)xv);
                            off[m++] = (c * R + r) * S + s;
                        }
                for (size_t k = 0; k < K; k++) {
                    double a = 0;
                    for (size_t j = 0; j < m; j++)
                        a += xb[j] * fabs((double)w[k * crs + off[j]]);
                    bound[(n * K + k) * hw + h * W + v] =
                        bad || !wok[k] ? INFINITY : bnd_sum_prods(a, m);
                }
            }
    free(xb);
    free(off);
    free(wok);
}

/* conv2d_bwd_data (N,C,H,W): terms dy[n,k,h-r+R/2,w-s+S/2] w[k,c,r,s] over
 * in-image (k, r, s); +Inf when a term's dy or any of w[:,c] is not finite. */
static void bnd_conv2d_bwd_data(const struct graph *g, const struct node *nd, double *bound,
                                const float *dy, /* (N,K,H,W) */ const float *w /* (K,C,R,S) */)
{
    const uint32_t *ws = g->nodes[nd->inputs[1]].shape;
    size_t N = nd->shape[0], C = nd->shape[1], H = nd->shape[2], W = nd->shape[3];
    size_t K = ws[0], R = ws[2], S = ws[3], krs = K * R * S, hw = H * W, rs = R * S;
    double *db = dt_malloc((krs + 1) * sizeof *db);
    size_t *off = dt_malloc((krs + 1) * sizeof *off);
    char *wok = dt_malloc(C + 1);
    for (size_t c = 0; c < C; c++) {
        wok[c] = 1;
        for (size_t k = 0; k < K; k++)
            wok[c] &= (char)bnd_all_finite(w + (k * C + c) * rs, rs);
    }
    for (size_t n = 0; n < N; n++)
        for (size_t h = 0; h < H; h++)
            for (size_t v = 0; v < W; v++) {
                size_t m = 0;
                int bad = 0;
                for (size_t k = 0; k < K; k++)
                    for (size_t r = 0; r < R; r++)
                        for (size_t s = 0; s < S; s++) {
                            long p = bnd_at(h, -BND_D(r, R), v, -BND_D(s, S), H, W);
                            if (p < 0)
                                continue;
                            float d = dy[(n * K + k) * hw + (size_t)p];
                            bad |= !isfinite(d);
                            db[m] = fabs((double)d);
                            off[m++] = k * C * rs + r * S + s; /* + c R S */
                        }
                for (size_t c = 0; c < C; c++) {
                    double a = 0;
                    for (size_t j = 0; j < m; j++)
                        a += db[j] * fabs((double)w[off[j] + c * rs]);
                    bound[(n * C + c) * hw + h * W + v] =
                        bad || !wok[c] ? INFINITY : bnd_sum_prods(a, m);
                }
            }
    free(db);
    free(off);
    free(wok);
}

/* conv2d_bwd_filter (K,C,R,S): terms dy[n,k,h,w] x[n,c,h+r-R/2,w+s-S/2] over
 * in-image (n, h, w); +Inf when any of dy[:,k] or x[:,c] is not finite. */
static void bnd_conv2d_bwd_filter(const struct graph *g, const struct node *nd, double *bound,
                                  const float *x, /* (N,C,H,W) */ const float *dy /* (N,K,H,W) */)
{
    const uint32_t *xs = g->nodes[nd->inputs[0]].shape;
    size_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
    size_t K = nd->shape[0], R = nd->shape[2], S = nd->shape[3], hw = H * W;
    char *dok = dt_malloc(K + 1), *xok = dt_malloc(C + 1);
    for (size_t k = 0; k < K; k++) {
        dok[k] = 1;
        for (size_t n = 0; n < N; n++)
            dok[k] &= (char)bnd_all_finite(dy + (n * K + k) * hw, hw);
    }
    for (size_t c = 0; c < C; c++) {
        xok[c] = 1;
        for (size_t n = 0; n < N; n++)
            xok[c] &= (char)bnd_all_finite(x + (n * C + c) * hw, hw);
    }
    for (size_t k = 0; k < K; k++)
        for (size_t c = 0; c < C; c++)
            for (size_t r = 0; r < R; r++)
                for (size_t s = 0; s < S; s++) {
                    double a = 0;
                    size_t m = 0;
                    for (size_t n = 0; n < N; n++)
                        for (size_t h = 0; h < H; h++)
                            for (size_t v = 0; v < W; v++) {
                                long p = bnd_at(h, BND_D(r, R), v, BND_D(s, S), H, W);
                                if (p < 0)
                                    continue;
                                a += fabs((double)dy[(n * K + k) * hw + h * W + v]) *
                                     fabs((double)x[(n * C + c) * hw + (size_t)p]);
                                m++;
                            }
                    bound[((k * C + c) * R + r) * S + s] =
                        dok[k] && xok[c] ? bnd_sum_prods(a, m) : INFINITY;
                }
    free(dok);
    free(xok);
}

/* A float32 sum of m terms in any order (m - 1 rounded additions, exact in
 * the subnormal range), a = sum of their magnitudes in double:
 *   |fl - exact| <= gamma_{m-1} a.
 * upsample2_bwd (m = 4, op.h's order or any other) and bias_grad over an
 * (N,C,H,W) dy (m = N H W). */
static double bnd_sum(double a, size_t m)
{
    double gm = bnd_gamma(m > 0 ? (double)(m - 1) : 0, BND_u);
    a = bnd_inflate(a, (double)m);
    return bnd_ovf(a * (1 + gm)) || isnan(a) ? INFINITY : gm * a;
}

/* The float32 constant of hard_sigmoid (op.h). */
#define BND_HS_C 0.2f

/* hard_sigmoid: cpu t1 = fl(c x) = c x (1 + d1) + h1, t = fl(t1 + 0.5) =
 * (t1 + 0.5)(1 + d2); with T = c x + 0.5:
 *   |t - T| <= E = (u |c x| + 2^-150)(1 + u) + u |T|   (one FMA: u |T|).
 * clip(., 0, 1) is 1-Lipschitz, so |clip t - clip T| <= E whichever of t
 * and T is clipped. Tighter where T is: T < 0 makes the exact value 0 and
 * t <= T + E, so the error is <= max(0, T + E); T > 1: max(0, E - (T - 1)).
 * T in double errs by <= 2^-53 |T|: 2^-52 |T| is added to E, and E is
 * raised by 2^-40 for its own roundings before the comparisons. */
static double bnd_hard_sigmoid(float x)
{
    if (!isfinite(x))
        return INFINITY;
    double cx = (double)BND_HS_C * x, t = cx + 0.5;
    double e = (BND_u * fabs(cx) + BND_ETA) * (1 + BND_u) + (BND_u + 0x1p-52) * fabs(t);
    e *= 1 + 0x1p-40;
    if (t < 0)
        return fmax(0, t + e);
    if (t > 1)
        return fmax(0, e - (t - 1));
    return e;
}

/* hard_sigmoid_bwd: the mask is decided on the cpu's own t (op.h; computed
 * here as in oracle_ops.c), so an unmasked cpu value is fl(c dy), one
 * rounding of the exact value: half an ulp; masked, +0 exactly: 0. */
static double bnd_hard_sigmoid_bwd(float x, float dy)
{
    if (!isfinite(x) || !isfinite(dy))
        return INFINITY;
    float t = (float)((double)(float)((double)BND_HS_C * x) + 0.5);
    return t >= 0 && t <= 1 ? bnd_half_ulp(fabs((double)BND_HS_C * dy)) : 0;
}

/* mean: cpu s = sum of x in double, in index order (n - 1 rounded additions:
 * |s - S| <= gamma_{n-1}(U) A, A = sum |x|), q = s / n, r = scale q (one
 * rounding each), then one rounding to float32:
 *   |r - X| <= E64 = (1 + U)^2 |scale| gamma_{n-1}(U) A / n + gamma_2(U) |X|,
 *   |result - X| <= E64 + ulp32(|X| + E64) / 2,   X = scale S / n,
 * |X| from S exactly (the superaccumulator), since the cpu's s may have
 * lost all of S. */
static double bnd_mean(const float *x, /* (n) */ size_t n, float scale)
{
    if (!isfinite(scale))
        return INFINITY;
    double a = 0;
    struct oracle_acc *acc = oracle_acc_new();
    for (size_t i = 0; i < n; i++) {
        oracle_acc_add(acc, x[i]);
        a += fabs((double)x[i]);
    }
    double s = oracle_acc_round_f64(acc);
    oracle_acc_free(acc);
    if (!isfinite(a) || !isfinite(s))
        return INFINITY;
    double gn = bnd_gamma(n > 0 ? (double)(n - 1) : 0, BND_U), g2 = bnd_gamma(2, BND_U);
    a = bnd_inflate(a, (double)n);
    double sc = fabs((double)scale) / (double)n * (1 + 0x1p-50);
    double xm = sc * fabs(s) * (1 + 0x1p-50);
    double e64 = (1 + BND_U) * (1 + BND_U) * sc * gn * a + g2 * xm;
    return e64 + bnd_half_ulp((xm + e64) * (1 + 0x1p-50));
}

/* mean_bwd: cpu (float)((double)scale * g / n): scale g is exact in double,
 * the quotient one rounding (two when grouped scale (g / n)), then one to
 * float32: |result - X| <= gamma_2(U) |X| + ulp32(|X| (1 + gamma_2(U))) / 2,
 * X = scale g / n. */
static double bnd_mean_bwd(float scale, float gv, double n)
{
    if (!isfinite(scale) || !isfinite(gv))
        return INFINITY;
    double g2 = bnd_gamma(2, BND_U), x = fabs((double)scale * gv) / n * (1 + 0x1p-50);
    return g2 * x + bnd_half_ulp(x * (1 + g2));
}

/* ---- the entry point ---------------------------------------------------------------- */

int oracle_bound(const struct graph *g, const struct node *nd, double *bound,
                 const float *const *in, const struct backend_step *st)
{
    size_t cnt = nd->count;
    switch (nd->type) {
    case OP_INPUT:
    case OP_PARAM:
    case OP_STATE:
        dt_error_set("oracle: %s is not an op (%s)", nd->name, op_type_name(nd->type));
        return DT_ERR;
    case OP_MATMUL:
        bnd_matmul(g, nd, bound, in);
        return DT_OK;
    case OP_ADD_BIAS: { /* x (N,F) or (N,C,H,W), b (F) or (C) */
        size_t f = nd->shape[1], inner = nd->ndim == 4 ? (size_t)nd->shape[2] * nd->shape[3] : 1;
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_add(in[0][i], in[1][i / inner % f]);
        break;
    }
    case OP_ADD:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_add(in[0][i], in[1][i]);
        break;
    case OP_BIAS_GRAD: {
        const struct node *x = &g->nodes[nd->inputs[0]];
        if (x->ndim == 4) { /* dy (N,C,H,W): a sum of N H W terms per channel */
            size_t N = x->shape[0], C = x->shape[1], hw = (size_t)x->shape[2] * x->shape[3];
            for (size_t c = 0; c < C; c++) {
                double a = 0;
                for (size_t n = 0; n < N; n++)
                    for (size_t j = 0; j < hw; j++)
                        a += fabs((double)in[0][(n * C + c) * hw + j]);
                bound[c] = bnd_sum(a, N * hw);
            }
            break;
        }
        /* out[j] = ((0 + x_0) + x_1) + ...: N - 1 rounded additions, exact in
         * the subnormal range: |r - X| <= gamma_{N-1} sum_r |x_rj|. */
        size_t rows = g->nodes[nd->inputs[0]].shape[0], f = nd->shape[0];
        double gn = bnd_gamma(rows > 0 ? (double)(rows - 1) : 0, BND_u);
        for (size_t j = 0; j < f; j++) {
            double s = 0;
            for (size_t r = 0; r < rows; r++)
                s += fabs((double)in[0][r * f + j]);
            s = bnd_inflate(s, (double)rows);
            bound[j] = bnd_ovf(s * (1 + gn)) || isnan(s) ? INFINITY : gn * s;
        }
        break;
    }
    case OP_SIGMOID:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_sigmoid(in[0][i]);
        break;
    case OP_TANH:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_tanh(in[0][i]);
        break;
    case OP_SIGMOID_BWD:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_sigmoid_bwd(in[0][i], in[1][i]);
        break;
    case OP_TANH_BWD:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_tanh_bwd(in[0][i], in[1][i]);
        break;
    case OP_RELU:
    case OP_RELU_BWD:
    case OP_FILL:
    case OP_MAXPOOL2:
    case OP_MAXPOOL2_BWD:
    case OP_UPSAMPLE2:
    case OP_CONCAT:
    case OP_SLICE:
    case OP_SLICE_BWD:
    case OP_SATLU:
    case OP_SATLU_BWD:
    case OP_NEG:
        memset(bound, 0, cnt * sizeof *bound); /* exact: the cpu copies or writes 0 */
        return DT_OK;
    case OP_CONV2D:
        bnd_conv2d(g, nd, bound, in[0], in[1]);
        break;
    case OP_CONV2D_BWD_DATA:
        bnd_conv2d_bwd_data(g, nd, bound, in[0], in[1]);
        break;
    case OP_CONV2D_BWD_FILTER:
        bnd_conv2d_bwd_filter(g, nd, bound, in[0], in[1]);
        break;
    case OP_UPSAMPLE2_BWD: { /* dy (N,C,2H,2W): four terms per element */
        size_t planes = (size_t)nd->shape[0] * nd->shape[1], H = nd->shape[2], W = nd->shape[3];
        for (size_t pl = 0; pl < planes; pl++)
            for (size_t h = 0; h < H; h++)
                for (size_t v = 0; v < W; v++) {
                    const float *q = in[0] + pl * 4 * H * W + 2 * h * 2 * W + 2 * v;
                    double a = fabs((double)q[0]) + fabs((double)q[1]) + fabs((double)q[2 * W]) +
                               fabs((double)q[2 * W + 1]);
                    bound[pl * H * W + h * W + v] = bnd_sum(a, 4);
                }
        break;
    }
    case OP_HARD_SIGMOID:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_hard_sigmoid(in[0][i]);
        break;
    case OP_HARD_SIGMOID_BWD:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_hard_sigmoid_bwd(in[0][i], in[1][i]);
        break;
    case OP_SUB: /* one correctly rounded operation, as add */
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_add(in[0][i], -in[1][i]);
        break;
    case OP_MUL: /* one correctly rounded product (exact in double): half an ulp */
        for (size_t i = 0; i < cnt; i++)
            bound[i] = !isfinite(in[0][i]) || !isfinite(in[1][i])
                           ? INFINITY : bnd_half_ulp(fabs((double)in[0][i] * in[1][i]));
        break;
    case OP_MEAN:
        bound[0] = bnd_mean(in[0], g->nodes[nd->inputs[0]].count, nd->p.mean.scale);
        break;
    case OP_MEAN_BWD: {
        double b = bnd_mean_bwd(nd->p.mean.scale, in[0][0], (double)cnt);
        for (size_t i = 0; i < cnt; i++)
            bound[i] = b;
        break;
    }
    case OP_MSE: {
        /* cpu: d = double(p) - double(t) (1 + a), d d (1 + b), summed in order
         * from 0 (n - 1 rounded additions), / n (1 + c), then (float): every
         * term passes through <= n + 3 double roundings, all terms >= 0:
         *   |r - M| <= gamma_{n+3}(U) M + ulp32(M (1 + gamma_{n+3}(U))) / 2,
         * M = mean((p - t)^2), the last term the final conversion. */
        size_t n = g->nodes[nd->inputs[0]].count;
        double s = 0;
        for (size_t i = 0; i < n; i++) {
            double d = (double)in[0][i] - in[1][i];
            s += d * d;
        }
        double gn = bnd_gamma((double)n + 3, BND_U), mup = bnd_inflate(s / (double)n, (double)n + 3);
        double top = mup * (1 + gn);
        bound[0] = !(top < 0x1p128 * (1 - 0x1p-25)) ? INFINITY
                                                     : gn * mup + 0.5 * oracle_ulp32(top);
        break;
    }
    case OP_MSE_BWD: {
        int has_g = nd->ninputs > 2;
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_mse_bwd(in[0][i], in[1][i], has_g ? in[2][0] : 1.0f, has_g, (double)cnt);
        break;
    }
    case OP_SGD:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_axpy(in[0][i], -nd->p.sgd.lr, in[1][i]);
        break;
    case OP_MOMENTUM:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_axpy(in[1][i], nd->p.momentum.mu, in[0][i]);
        break;
    case OP_ADAM_M:
    case OP_ADAM_V: {
        int isv = nd->type == OP_ADAM_V;
        float b = isv ? nd->p.adam.b2 : nd->p.adam.b1;
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_adam_mv(b, in[0][i], in[1][i], isv);
        break;
    }
    case OP_ADAM_P: {
        if (!st) {
            dt_error_set("oracle: adam_p %s needs the step number", nd->name);
            return DT_ERR;
        }
        struct bnd_adam A;
        bnd_adam_c(nd->p.adam.b1, st->step + 1, &A.c1, &A.e1);
        bnd_adam_c(nd->p.adam.b2, st->step + 1, &A.c2, &A.e2);
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_adam_p(&A, nd->p.adam.lr, nd->p.adam.eps, in[0][i], in[1][i], in[2][i]);
        break;
    }
    default:
        dt_error_set("oracle: op %s has an unknown type %d", nd->name, (int)nd->type);
        return DT_ERR;
    }
    for (size_t i = 0; i < cnt; i++)
        bound[i] *= BND_UP;
    return DT_OK;
}
