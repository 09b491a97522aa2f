/* oracle.c: oracle_bound, a rigorous bound on the error of every float32
 * evaluation of an op that a correct implementation could use (the
 * admissible evaluations below), by forward error analysis. SEMANTIC in
 * replay means that no admissible evaluation could give the result. The
 * derivations are in the comments; the formulas are the table of
 * divtrace-replay(1).
 *
 * Arithmetic. Every float32 operation gives fl(a op b) = (a op b)(1 + d) + h
 * with |d| <= u = 2^-24; h = 0 for additions and subtractions (exact in the
 * subnormal range), |h| <= 2^-150 for products, quotients and conversions to
 * float32 (half the smallest subnormal), d h = 0; gamma_n = n u / (1 - n u).
 * Any intermediate may instead be held in a wider format (double, x87:
 * unit roundoff U <= 2^-53, no underflow for these values) and rounded to
 * float32 later: a wider operation and its conversion give (1 + U)(1 + u)
 * <= 1 / (1 - u) = 1 + uw (as U <= u^2), so every rounding below is
 * counted with uw (BND_uw), and gamma_k(u) >= (1 + uw)^k - 1 (Bernoulli:
 * (1 - u)^k >= 1 - k u): a gamma bound holds for any mix of precisions.
 * FMA contraction only removes roundings. A single +, -, * of two floats
 * is correctly rounded even through double (53 >= 2 24 + 2, innocuous
 * double rounding): add, sub, mul keep half an ulp.
 *
 * Elementary functions, each within a tolerance of E ulp of its exact value
 * f, read as |f^ - f| <= E (2^-23 |f| + 2^-149) (an ulp of f is at most
 * 2^-23 |f|, or 2^-149 below 2^-126; k steps from the correctly rounded
 * float are within k + 1/2 in this reading):
 *   BND_E_EXP 2.5      expf, expm1f: CUDA documents 2 ulp from the correctly
 *                      rounded value; glibc's expf errs by 0.502 (exhaustive
 *                      check, glibc 2.36), expm1f by 1;
 *   BND_E_TANH 3       tanhf: glibc documents 2 on x86_64, but errs by 2.19 at
 *                      x = +-0x1.ddca18p-3 (tanhf gives 0x1.d54e4ap-3, tanh
 *                      is 0x1.d54e4e6...p-3); CUDA documents 2 (2.5 here);
 *   BND_E_SIGMOID 3    a library's sigmoid as one function (oneDNN's or
 *                      cuDNN's logistic document none): as good as tanhf;
 *   BND_E_DIV 1.5      division: IEEE's 0.5, or a reciprocal and a product,
 *                      fl(a fl(1 / b)), relative 2u + u^2 < 1.5 2^-23;
 *                      CUDA's fast division (-prec-div=false, __fdividef,
 *                      2.5 here) comes with -use_fast_math, whose __expf
 *                      is off by tens of ulp: not admitted;
 *   BND_E_SQRT 1.5     sqrt: IEEE's 0.5, or one ulp from it (CUDA's
 *                      -prec-sqrt=false);
 *   BND_E_POW 4.5      pow for Adam's b^t, in float32 or double: CUDA
 *                      documents 4 ulp for powf, glibc less than 1.
 *
 * Admissible evaluations, per op (op.h defines the exact value):
 *  - sums (matmul, convolutions, bias_grad, upsample2_bwd, mse, mean): any
 *    order or grouping (sequential, pairwise, blocked, tree), with or
 *    without FMA, accumulated in float32 or wider: gamma_k bounds on the
 *    sum of |terms|, k the longest chain of roundings a term can pass;
 *  - mse, mean: then a division by n or a product with 1/n (n converted to
 *    float32 or not), and for mean the product with scale, in any order;
 *  - sigmoid: 1 / (1 + exp(-x)); exp(x) / (1 + exp(x)) for x < 0;
 *    0.5 tanh(x/2) + 0.5 (or 0.5 (1 + tanh(x/2)), or one FMA); a library
 *    sigmoid within BND_E_SIGMOID;
 *  - tanh: tanhf; -e / (2 + e) with e = expm1(-2|x|), sign restored;
 *    2 sigmoid(2x) - 1 with any admissible sigmoid;
 *  - sigmoid_bwd: dy y (1 - y) in any grouping; tanh_bwd: dy (1 - y y)
 *    (1 - y y by an FMA or not) or dy (1 - y)(1 + y), in any grouping;
 *  - mse_bwd, mean_bwd: the products and the one division by n in any
 *    order; hard_sigmoid(_bwd): t = 0.2f x + 0.5 with an FMA or not (the
 *    mask of the bwd may flip where t is within rounding of 0 or 1);
 *  - sgd, momentum: p + a b with an FMA or not;
 *  - adam_m: b1 m + (1 - b1) g, or the lerp m + c (g - m), or
 *    g - (1 - c)(g - m), c = fl(1 - b1) (PyTorch's lerp_); adam_v:
 *    b2 v + (1 - b2) g g, the product in any grouping;
 *  - adam_p, c_k = 1 - b_k^t from pow (float32 or double) rounded: op.h's
 *    p - lr (m / c1) / (sqrt(v / c2) + eps); PyTorch's
 *    p - (lr / c1)(m / (sqrt(v) / sqrt(c2) + eps)); and the corrections
 *    folded into the step, p - (lr sqrt(c2) / c1)(m / (sqrt(v) + eps sqrt(c2)))
 *    (Kingma and Ba's eps-hat: the same value). Not admissible: eps added to
 *    sqrt(v) unscaled in the folded form (Keras: another eps, another op),
 *    b^t kept as a running product (its error grows with t).
 * Other evaluations are not vouched for: they are SEMANTIC where their
 * results leave these bounds.
 *
 * Overflow: whenever some intermediate of an admissible evaluation could
 * reach FLT_MAX (a float32 sum's partial sums included), the bound is +Inf;
 * so it is when an input is NaN or Inf (replay compares those bitwise or by
 * class), except for the exact ops (relu, relu_bwd, fill, and the ops that
 * select or move elements: maxpool2 and its bwd, upsample2, concat, slice
 * and its bwd, satlu and its bwd, neg: bound 0).
 * Evaluation: the magnitudes in a formula (|X|, sum |a b|, ...) are computed
 * in double from the float inputs, with relative errors below 2^-40 (a few
 * roundings, libm's exp and tanh within an ulp of double), except sums of K
 * terms, which are first inflated by 1 + (K + 2) 2^-52 >= 1 / (1 -
 * gamma_{K-1}(U)); every formula is monotonic in them, and the result is
 * multiplied by 1 + 2^-30 (BND_UP), which covers the rest.
 * Tightness, largest (mean) observed error of the cpu backend / bound over
 * random inputs in [-1, 1] (tests/test_oracle_ops_bound.c, TEST_ORACLE_VERBOSE=1):
 * add, add_bias, sub 1 (ties), mul 1 (0.5), momentum 0.97 (0.29),
 * hard_sigmoid 0.96 (0.30, x in [-3.5, 3.5]), hard_sigmoid_bwd 0.95 (0.5),
 * sgd 0.94 (0.28), adam_v 0.86 (0.16), adam_m 0.78 (0.09), sigmoid_bwd 0.74
 * (0.18), adam_p 0.71 (0.04), upsample2_bwd 0.65 (0.10), tanh_bwd 0.53
 * (0.10), mse_bwd 0.41 (0.08), sigmoid 0.28 (0.07), tanh 0.20 (0.04),
 * mean_bwd 0.18 (0.08): the functions and Adam are held to the worst of
 * their forms and tolerances, which glibc and IEEE operations stay inside.
 * The sums are worst-case bounds, loose as such bounds are on random data:
 * matmul 0.56 (0.02) for K <= 300 but 6e-4 (2e-4) at K = 784, convolutions
 * near 0.9 for a few terms but 0.06 on average, bias_grad 0.18 (0.02); mse
 * 0.012 (0.003) and mean 0.0013 (2e-4), as the cpu sums those in double,
 * far inside a float32 sum's bound.
 * tests/test_variant.c holds the float32 rewrites of src/variant.c to these
 * bounds (largest error / allowed: sigmoid_bwd 0.77, adam_m 0.66,
 * conv2d_bwd_data 0.66, adam_v 0.65, adam_p 0.62, conv2d 0.61,
 * upsample2_bwd 0.50, tanh_bwd 0.40, sigmoid 0.35, mse_bwd 0.34, mean_bwd
 * 0.33, bias_grad 0.23, tanh 0.20, conv2d_bwd_filter 0.20, matmul 0.13,
 * mean 0.10, mse 0.06; hard_sigmoid_bwd 1: a mask flipped at a clip point
 * is the whole value; the FMA forms of sgd, momentum, hard_sigmoid are
 * correctly rounded: 0), six of which bounds for the cpu's own algorithms
 * would call SEMANTIC, and finds src/fault.c's wrong formulas outside. */
#include "oracle.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "oracle_conv.h"
#include "oracle_impl.h"
#include "util.h"

/* The relative and absolute parts of a tolerance of e ulp. */
double oracle_bnd_rel(double e) { return e * 0x1p-23; }
double oracle_bnd_abs(double e) { return e * 0x1p-149; }

double oracle_bnd_gamma(double n, double u)
{
    return n * u < 0.5 ? n * u / (1 - n * u) : INFINITY;
}

/* +Inf when a magnitude bound m of some intermediate might overflow float32. */
int oracle_bnd_ovf(double m)
{
    return !(m * (1 + 0x1p-20) < FLT_MAX);
}

/* x (1 + e) for a magnitude computed with relative error below e. */
static double bnd_inflate(double x, double n) { return x * (1 + (n + 2) * 0x1p-52); }

/* ---- matrix product ----------------------------------------------------------
 * Any order of the K products and K - 1 additions (blocked, pairwise, with
 * FMA or without, in float32 or wider) passes each product through at most
 * K roundings:
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
    double gk = oracle_bnd_gamma((double)k, BND_u);
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
            bound[i * n + j] =
                (k == 0) ? 0 : oracle_bnd_ovf(s * (1 + gk)) || isnan(s) ? INFINITY : b * BND_UP;
        }
    free(ar);
    free(bc);
}

/* ---- elementwise ops -----------------------------------------------------------
 * The elementary functions, hard_sigmoid and the optimizers: oracle_elem.c. */

/* Half an ulp of float32 at x >= |value| (one correctly rounded operation,
 * subnormals included: 2^-150 there); +Inf where RN32 could overflow. */
double oracle_bnd_half_ulp(double x)
{
    if (!isfinite(x) || x >= 0x1p128 * (1 - 0x1p-25))
        return INFINITY;
    return 0.5 * oracle_ulp32(x);
}

/* a + b: one correctly rounded addition (through double too): half an ulp
 * of the exact sum, so the result equals the oracle's (the other neighbour
 * only at a tie, which both break to even). */
static double bnd_add(float a, float b)
{
    return oracle_bnd_half_ulp(fabs((double)a + b) * (1 + 0x1p-52));
}

/* mse_bwd X = 2 (p - t) g / n: d = p - t (one rounding), n converted (one),
 * the products with g (one, with g) and with d (one), 2 exact, one division
 * by n (or a product with 1/n: rD, aD), in any order:
 *   |r - X| <= ((1 + uw)^k (1 + rD) - 1) |X| + m 2^-150 (1 + rD)(1 + uw)^2
 *              2 max(1, |d|) max(1, |g|),
 * k = 4, m = 3 with g; k = 3, m = 2 without: each product or quotient that
 * underflows is multiplied by what remains of 2, |d|, |g| and 1/n. */
static double bnd_mse_bwd(float p, float t, float g, int has_g, double n)
{
    if (!isfinite(p) || !isfinite(t) || !isfinite(g))
        return INFINITY;
    double d = fabs((double)p - t), ag = fabs((double)g), x = 2 * d * ag / n;
    double rD = oracle_bnd_rel(BND_E_DIV), u1 = 1 + BND_uw;
    double f = pow(u1, has_g ? 4 : 3) * (1 + rD) - 1;
    if (oracle_bnd_ovf(2 * d * u1) || oracle_bnd_ovf(2 * d * ag * u1 * u1) ||
        oracle_bnd_ovf(2 * ag * u1 * u1) || oracle_bnd_ovf(x * (1 + f)))
        return INFINITY;
    return f * x + (has_g ? 3 : 2) * BND_ETA * (1 + rD) * u1 * u1 * 2 * fmax(1, d) * fmax(1, ag);
}

/* ---- image ops -----------------------------------------------------------------
 * Dimension letters (op.h): N batch, C input channels, K output channels, H, W
 * image rows and columns, R, S kernel rows and columns. */

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
    double gk = oracle_bnd_gamma((double)m, BND_u);
    s = bnd_inflate(s, (double)m);
    return oracle_bnd_ovf(s * (1 + gk)) || isnan(s) ? INFINITY : gk * s + (double)m * 0x1p-149;
}

/* The convolutions (conv2d (N,K,H,W), conv2d_bwd_data (N,C,H,W),
 * conv2d_bwd_filter (K,C,R,S)): each element a sum of its in-image products,
 * bounded by bnd_sum_prods from their sum of magnitudes (oracle_conv.c; a
 * term that is not finite makes it Inf or NaN, so the bound +Inf). +Inf too
 * when any weight of the element's filter is not finite (a kernel that
 * multiplies the padding would turn one there into NaN); for
 * conv2d_bwd_filter, when any of its dy[:,k] or x[:,c] is not finite.
 * conv2d_bwd_data's m pairs are one sum of up to m K R S in-image products
 * (term count and magnitudes over all pairs, oracle_conv.c), which covers
 * every grouping of it: pair by pair, or the m pairs' own sums added last
 * (a term passes at most as many roundings as the whole sum has terms);
 * its filter is every pair's w_j[:,c]. */
int oracle_conv_bound(const struct graph *g, const struct node *nd, double *bound,
                      const float *const *in, const struct oracle_conv *given)
{
    struct oracle_conv own;
    const struct oracle_conv *cs = given;
    if (nd->count == 0)
        return DT_OK;
    if (!cs) {
        if (oracle_conv_sums(g, nd, in, 0, &own) < 0) {
            dt_error_set("oracle: %s has too many elements for its bound (%zu)", nd->name,
                         (size_t)nd->count);
            return DT_ERR;
        }
        cs = &own;
    }
    size_t cnt = nd->count;
    /* ok[j]: the element's filter (or dy and x planes) finite; j per element below */
    size_t nok, per, mod;
    char *ok;
    if (nd->type == OP_CONV2D_BWD_FILTER) {
        const uint32_t *xs = g->nodes[nd->inputs[0]].shape;
        size_t N = xs[0], C = xs[1], hw = (size_t)xs[2] * xs[3], K = nd->shape[0];
        char *dok = dt_malloc(K + 1), *xok = dt_malloc(C + 1);
        for (size_t k = 0; k < K; k++) {
            dok[k] = 1;
            for (size_t n = 0; n < N; n++)
                dok[k] &= (char)bnd_all_finite(in[1] + (n * K + k) * hw, hw);
        }
        for (size_t c = 0; c < C; c++) {
            xok[c] = 1;
            for (size_t n = 0; n < N; n++)
                xok[c] &= (char)bnd_all_finite(in[0] + (n * C + c) * hw, hw);
        }
        nok = K * C;
        ok = dt_malloc(nok + 1);
        for (size_t k = 0; k < K; k++)
            for (size_t c = 0; c < C; c++)
                ok[k * C + c] = dok[k] && xok[c];
        per = (size_t)nd->shape[2] * nd->shape[3]; /* R S elements per (k, c) */
        mod = nok;
        free(dok);
        free(xok);
    } else {
        const uint32_t *ws = g->nodes[nd->inputs[1]].shape;
        size_t K = ws[0], C = ws[1], rs = (size_t)ws[2] * ws[3], m = oracle_conv_pairs(nd);
        int fwd = nd->type == OP_CONV2D;
        nok = fwd ? K : C;
        ok = dt_malloc(nok + 1);
        for (size_t o = 0; o < nok; o++) {
            ok[o] = 1;
            if (fwd)
                ok[o] = (char)bnd_all_finite(in[1] + o * C * rs, C * rs);
            else
                for (size_t j = 0; j < m; j++)
                    for (size_t k = 0; k < K; k++)
                        ok[o] &= (char)bnd_all_finite(in[2 * j + 1] + (k * C + o) * rs, rs);
        }
        per = (size_t)nd->shape[2] * nd->shape[3]; /* pixels per (n, channel) */
        mod = nok;
    }
    for (size_t i = 0; i < cnt; i++)
        bound[i] = ok[i / per % mod] ? bnd_sum_prods(cs->a[i], cs->m[i]) : INFINITY;
    free(ok);
    if (cs == &own)
        oracle_conv_free(&own);
    for (size_t i = 0; i < cnt; i++)
        bound[i] *= BND_UP;
    return DT_OK;
}

/* A sum of m terms in any order and precision (m - 1 rounded additions,
 * exact in the subnormal range), a = sum of their magnitudes in double:
 *   |fl - exact| <= gamma_{m-1} a.
 * upsample2_bwd (m = 4, op.h's order or any other) and bias_grad (m = N
 * rows, or N H W of an (N,C,H,W) dy). */
static double bnd_sum(double a, size_t m)
{
    double gm = oracle_bnd_gamma(m > 0 ? (double)(m - 1) : 0, BND_u);
    a = bnd_inflate(a, (double)m);
    return oracle_bnd_ovf(a * (1 + gm)) || isnan(a) ? INFINITY : gm * a;
}

/* mean X = scale S / n, S = sum x, A = sum |x|: the sum in any order and
 * precision, s^ = S + es, |es| <= gamma_{n-1} A; then n converted, one
 * product with scale and one division by n (or a product with 1/n), in any
 * order: a factor (1 + tp), tp = (1 + uw)^2 (1 + rD) - 1, and two possible
 * underflows, each multiplied by what remains of |scale|, |s^| and 1/n:
 *   |r - X| <= |scale| / n es (1 + tp) + tp |X|
 *              + 2 2^-150 (1 + tp) max(1, |scale|) max(1, A (1 + gamma_{n-1})),
 * |X| from S exactly (the superaccumulator). Partial sums reach up to
 * A (1 + gamma_{n-1}) (and scale times that): +Inf where that overflows. */
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
    double gn = oracle_bnd_gamma(n > 0 ? (double)(n - 1) : 0, BND_u);
    double tp = (1 + BND_uw) * (1 + BND_uw) * (1 + oracle_bnd_rel(BND_E_DIV)) - 1;
    a = bnd_inflate(a, (double)n);
    double as = fabs((double)scale), top = a * (1 + gn);
    if (oracle_bnd_ovf(top * fmax(1, as) * (1 + BND_uw)))
        return INFINITY;
    double sc = as / (double)n * (1 + 0x1p-50);
    double xm = sc * fabs(s) * (1 + 0x1p-50);
    double b = sc * gn * a * (1 + tp) + tp * xm +
               2 * BND_ETA * (1 + tp) * fmax(1, as) * fmax(1, top);
    return oracle_bnd_ovf(xm + b) ? INFINITY : b;
}

/* mean_bwd X = scale g / n: n converted, one product, one division (or a
 * product with 1/n), in any order; two possible underflows, each
 * multiplied by what remains of |scale|, |g| and 1/n:
 *   |r - X| <= ((1 + uw)^2 (1 + rD) - 1) |X|
 *              + 2 2^-150 (1 + rD)(1 + uw) max(1, |scale|) max(1, |g|). */
static double bnd_mean_bwd(float scale, float gv, double n)
{
    if (!isfinite(scale) || !isfinite(gv))
        return INFINITY;
    double as = fabs((double)scale), ag = fabs((double)gv), rD = oracle_bnd_rel(BND_E_DIV);
    double tp = (1 + BND_uw) * (1 + BND_uw) * (1 + rD) - 1;
    double x = as * ag / n * (1 + 0x1p-50);
    if (oracle_bnd_ovf(as * ag * (1 + BND_uw)) || oracle_bnd_ovf(x * (1 + tp)))
        return INFINITY;
    return tp * x + 2 * BND_ETA * (1 + rD) * (1 + BND_uw) * fmax(1, as) * fmax(1, ag);
}

/* mse M = sum (p - t)^2 / n: each term passes d = p - t (one rounding, twice
 * in d^2), the square (one), the sum (n - 1), n's conversion (one) and the
 * division by n (or a product with 1/n), the sum in any order and
 * precision, the division after it or on each term. All terms are >= 0:
 *   |r - M| <= ((1 + gamma_{n+3})(1 + rD) - 1) M + (n + 2) 2^-150 (1 + rD)(1 + gamma_{n+3}),
 * the last term the squares' and quotients' underflows. Partial sums reach
 * up to n M (1 + gamma_{n+3}): +Inf where that overflows. */
static double bnd_mse(const float *p, const float *t, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)p[i] - t[i];
        s += d * d;
    }
    s = bnd_inflate(s, (double)n + 2); /* d, d^2 and the sum in double */
    double gn = oracle_bnd_gamma((double)n + 3, BND_u), rD = oracle_bnd_rel(BND_E_DIV);
    if (isnan(s) || oracle_bnd_ovf(s * (1 + gn)))
        return INFINITY;
    double m = s / (double)n * (1 + 0x1p-50), th = (1 + gn) * (1 + rD) - 1;
    return th * m + ((double)n + 2) * BND_ETA * (1 + th);
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
        /* dy (N,F): a sum of N terms per feature, in any order */
        size_t rows = g->nodes[nd->inputs[0]].shape[0], f = nd->shape[0];
        for (size_t j = 0; j < f; j++) {
            double a = 0;
            for (size_t r = 0; r < rows; r++)
                a += fabs((double)in[0][r * f + j]);
            bound[j] = bnd_sum(a, rows);
        }
        break;
    }
    case OP_SIGMOID:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = isfinite(in[0][i]) ? oracle_bnd_sigmoid(in[0][i]) : INFINITY;
        break;
    case OP_TANH:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = oracle_bnd_tanh(in[0][i]);
        break;
    case OP_SIGMOID_BWD:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = oracle_bnd_sigmoid_bwd(in[0][i], in[1][i]);
        break;
    case OP_TANH_BWD:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = oracle_bnd_tanh_bwd(in[0][i], in[1][i]);
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
        memset(bound, 0, cnt * sizeof *bound); /* exact: any implementation copies or writes 0 */
        return DT_OK;
    case OP_CONV2D:
    case OP_CONV2D_BWD_DATA:
    case OP_CONV2D_BWD_FILTER:
        return oracle_conv_bound(g, nd, bound, in, NULL);
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
            bound[i] = oracle_bnd_hard_sigmoid(in[0][i]);
        break;
    case OP_HARD_SIGMOID_BWD:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = oracle_bnd_hard_sigmoid_bwd(in[0][i], in[1][i]);
        break;
    case OP_SUB: /* one correctly rounded operation, as add */
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_add(in[0][i], -in[1][i]);
        break;
    case OP_MUL: /* one correctly rounded product (exact in double): half an ulp */
        for (size_t i = 0; i < cnt; i++)
            bound[i] = !isfinite(in[0][i]) || !isfinite(in[1][i])
                           ? INFINITY : oracle_bnd_half_ulp(fabs((double)in[0][i] * in[1][i]));
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
    case OP_MSE:
        bound[0] = bnd_mse(in[0], in[1], g->nodes[nd->inputs[0]].count);
        break;
    case OP_MSE_BWD: {
        int has_g = nd->ninputs > 2;
        for (size_t i = 0; i < cnt; i++)
            bound[i] = bnd_mse_bwd(in[0][i], in[1][i], has_g ? in[2][0] : 1.0f, has_g, (double)cnt);
        break;
    }
    case OP_SGD:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = oracle_bnd_axpy(in[0][i], -nd->p.sgd.lr, in[1][i]);
        break;
    case OP_MOMENTUM:
        for (size_t i = 0; i < cnt; i++)
            bound[i] = oracle_bnd_axpy(in[1][i], nd->p.momentum.mu, in[0][i]);
        break;
    case OP_ADAM_M:
    case OP_ADAM_V: {
        int isv = nd->type == OP_ADAM_V;
        float b = isv ? nd->p.adam.b2 : nd->p.adam.b1;
        for (size_t i = 0; i < cnt; i++)
            bound[i] = oracle_bnd_adam_mv(b, in[0][i], in[1][i], isv);
        break;
    }
    case OP_ADAM_P: {
        if (!st) {
            dt_error_set("oracle: adam_p %s needs the step number", nd->name);
            return DT_ERR;
        }
        struct oracle_bnd_adam A;
        oracle_bnd_adam_c(nd->p.adam.b1, st->step + 1, &A.c1, &A.e1);
        oracle_bnd_adam_c(nd->p.adam.b2, st->step + 1, &A.c2, &A.e2);
        for (size_t i = 0; i < cnt; i++)
            bound[i] = oracle_bnd_adam_p(&A, nd->p.adam.lr, nd->p.adam.eps, in[0][i], in[1][i],
                                         in[2][i]);
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

int oracle_op_bound(const struct graph *g, const struct node *nd, float *out, double *bound,
                    const float *const *in, const struct backend_step *st)
{
    int conv = nd->type == OP_CONV2D || nd->type == OP_CONV2D_BWD_DATA ||
               nd->type == OP_CONV2D_BWD_FILTER;
    struct oracle_conv cs;
    if (!conv || oracle_conv_sums(g, nd, in, 1, &cs) < 0) {
        if (oracle_op(g, nd, out, in, st) < 0)
            return DT_ERR;
        return oracle_bound(g, nd, bound, in, st);
    }
    oracle_conv_op(g, nd, out, in, &cs);
    int rc = oracle_conv_bound(g, nd, bound, in, &cs);
    oracle_conv_free(&cs);
    return rc;
}
