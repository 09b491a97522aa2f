/* mpfr_dot.c: the mpfr backend's matrix product (mpfr_impl.h): every element
 * the exact dot product of P-bit operands rounded once to P bits, through a
 * fixed-point accumulator with inline limb products up to 256 bits.
 * Dimension letters: M, K, N of a matrix product. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <gmp.h>
#include <mpfr.h>

#include "mpfr_impl.h"
#include "util.h"

#if GMP_NUMB_BITS == 64 && defined(__SIZEOF_INT128__)
#define MPB_FAST_N 4   /* inline products for up to 4 limbs (P <= 256) */
#else
#define MPB_FAST_N 0
#endif

/* ---- matrix product --------------------------------------------------------
 * Each element is the exact dot product rounded once. The operands are packed
 * as K contiguous (exponent, sign, significand) entries per row of op(A) and
 * per column of op(B); the products, exact in 2n limbs, are added at their
 * exponents into two fixed-point accumulators (positive and negative terms)
 * spanning the pair's exponent range, and the difference is rounded by MPFR.
 * Inf or NaN operands, and exponent spreads beyond MPB_ACC_SPREAD limbs, take
 * exact MPFR products and mpfr_sum instead. An exactly zero result is +0, as
 * a sum accumulated from +0 gives. */

/* Pack rows r = 0..rows-1 of a (rows, K) view of v, element (r, l) at
 * r * sr + l * sk, into entries at + r K + l and exponent ranges prow + r.
 * 0, or -1 if v holds an Inf or a NaN there. */
static int mpb_pack(struct mpb_ctx *c, size_t at, size_t prow, const struct mpb_vec *v,
                    size_t rows, size_t k, size_t sr, size_t sk)
{
    size_t n = c->nlimbs;
    for (size_t r = 0; r < rows; r++) {
        long lo = LONG_MAX, hi = LONG_MIN;
        for (size_t l = 0; l < k; l++) {
            mpfr_srcptr x = X(v, r * sr + l * sk);
            size_t o = at + r * k + l;
            if (mpfr_zero_p(x)) {
                c->pe[o] = LONG_MIN;
                continue;
            }
            if (!mpfr_regular_p(x))
                return -1;
            long e = (long)mpfr_get_exp(x);
            c->pe[o] = e;
            c->pneg[o] = (unsigned char)(mpfr_signbit(x) != 0);
            memcpy(c->pd + o * n, mpfr_custom_get_significand(x), n * sizeof(mp_limb_t));
            lo = e < lo ? e : lo;
            hi = e > hi ? e : hi;
        }
        c->plo[prow + r] = lo;
        c->phi[prow + r] = hi;
    }
    return 0;
}

#if MPB_FAST_N
typedef unsigned __int128 mpb_u128;

/* s[0..] += (a * b) << r, a and b of n limbs, carrying as far as needed
 * (the caller's headroom keeps the carry inside the accumulator). */
static inline __attribute__((always_inline)) void
mpb_acc_fast(mp_limb_t *s, const mp_limb_t *a, const mp_limb_t *b, const int n, unsigned r)
{
    mp_limb_t p[2 * MPB_FAST_N + 1];
    mpb_u128 t = 0;
#pragma GCC unroll 4
    for (int j = 0; j < n; j++) {
        t = (mpb_u128)a[0] * b[j] + (j ? (mp_limb_t)(t >> 64) : 0);
        p[j] = (mp_limb_t)t;
    }
    p[n] = (mp_limb_t)(t >> 64);
#pragma GCC unroll 4
    for (int i = 1; i < n; i++) {
#pragma GCC unroll 4
        for (int j = 0; j < n; j++) {
            t = (mpb_u128)a[i] * b[j] + p[i + j] + (j ? (mp_limb_t)(t >> 64) : 0);
            p[i + j] = (mp_limb_t)t;
        }
        p[i + n] = (mp_limb_t)(t >> 64);
    }
    /* shift by r in 0..63 without a 64-bit shift: (x >> 1) >> (63 - r) */
    p[2 * n] = (p[2 * n - 1] >> 1) >> (63 - r);
#pragma GCC unroll 8
    for (int k = 2 * n - 1; k > 0; k--)
        p[k] = (p[k] << r) | ((p[k - 1] >> 1) >> (63 - r));
    p[0] <<= r;
    mp_limb_t cy = 0;
#pragma GCC unroll 9
    for (int k = 0; k <= 2 * n; k++) {
        t = (mpb_u128)s[k] + p[k] + cy;
        s[k] = (mp_limb_t)t;
        cy = (mp_limb_t)(t >> 64);
    }
    for (int k = 2 * n + 1; cy; k++)
        cy = ++s[k] == 0;
}

/* mpb_acc_fast for n = 2 (P <= 128, the default) with the limbs in
 * registers. */
static inline __attribute__((always_inline)) void
mpb_acc_fast2(mp_limb_t *s, const mp_limb_t *a, const mp_limb_t *b, unsigned r)
{
    mpb_u128 t = (mpb_u128)a[0] * b[0];
    mp_limb_t p0 = (mp_limb_t)t, p1, p2, p3;
    t = (mpb_u128)a[0] * b[1] + (mp_limb_t)(t >> 64);
    p1 = (mp_limb_t)t;
    p2 = (mp_limb_t)(t >> 64);
    t = (mpb_u128)a[1] * b[0] + p1;
    p1 = (mp_limb_t)t;
    t = (mpb_u128)a[1] * b[1] + p2 + (mp_limb_t)(t >> 64);
    p2 = (mp_limb_t)t;
    p3 = (mp_limb_t)(t >> 64);
    unsigned l = 63 - r;
    mp_limb_t q4 = (p3 >> 1) >> l;
    mp_limb_t q3 = (p3 << r) | ((p2 >> 1) >> l);
    mp_limb_t q2 = (p2 << r) | ((p1 >> 1) >> l);
    mp_limb_t q1 = (p1 << r) | ((p0 >> 1) >> l);
    mp_limb_t q0 = p0 << r;
    t = (mpb_u128)s[0] + q0;
    s[0] = (mp_limb_t)t;
    t = (mpb_u128)s[1] + q1 + (mp_limb_t)(t >> 64);
    s[1] = (mp_limb_t)t;
    t = (mpb_u128)s[2] + q2 + (mp_limb_t)(t >> 64);
    s[2] = (mp_limb_t)t;
    t = (mpb_u128)s[3] + q3 + (mp_limb_t)(t >> 64);
    s[3] = (mp_limb_t)t;
    t = (mpb_u128)s[4] + q4 + (mp_limb_t)(t >> 64);
    s[4] = (mp_limb_t)t;
    for (mp_limb_t cy = (mp_limb_t)(t >> 64), *c = s + 5; cy; c++)
        cy = ++*c == 0;
}
#endif

/* Add the products of packed entries a[0..k) and b[0..k) of n limbs into
 * pos (positive ones) and neg, each of len limbs with bit 0 of weight
 * 2^base / 2^(2 n MPB_LB). Inlined with constant n up to MPB_FAST_N (fast
 * set), so that the limb loops unroll; GMP's mpn functions beyond. */
static inline __attribute__((always_inline)) void
mpb_dot_add(struct mpb_ctx *c, mp_limb_t *pos, mp_limb_t *neg, size_t len, size_t a, size_t b,
            size_t k, long base, const int n, const int fast)
{
    const long *ae = c->pe + a, *be = c->pe + b;
    const unsigned char *an = c->pneg + a, *bn = c->pneg + b;
    const mp_limb_t *ad = c->pd + a * (size_t)n, *bd = c->pd + b * (size_t)n;
    mp_limb_t *prod = c->acc + 2 * c->accmax;
    (void)fast;
    for (size_t l = 0; l < k; l++) {
        if (ae[l] == LONG_MIN || be[l] == LONG_MIN)
            continue;
        unsigned long sh = (unsigned long)(ae[l] + be[l] - base);
        size_t q = sh / MPB_LB;
        unsigned r = (unsigned)(sh % MPB_LB);
        mp_limb_t *s = (an[l] ^ bn[l] ? neg : pos) + q;
        const mp_limb_t *x = ad + l * (size_t)n, *y = bd + l * (size_t)n;
#if MPB_FAST_N
        if (fast && n == 2) {
            mpb_acc_fast2(s, x, y, r);
            continue;
        }
        if (fast) {
            mpb_acc_fast(s, x, y, n, r);
            continue;
        }
#endif
        mpn_mul_n(prod, x, y, n);
        prod[2 * n] = r ? mpn_lshift(prod, prod, 2 * n, r) : 0;
        mpn_add(s, s, (mp_size_t)(len - q), prod, 2 * n + 1);
    }
}

/* The exact dot product of packed entries a[0..k) and b[0..k) (exponent
 * ranges [alo, ahi] and [blo, bhi] of their non-zeros) rounded into out.
 * Returns -1, out untouched, if the accumulator would be too wide. */
static int mpb_dot_exact(struct mpb_ctx *c, mpfr_ptr out, size_t a, size_t b, size_t k,
                         long alo, long ahi, long blo, long bhi)
{
    const int n = (int)c->nlimbs;
    if (ahi == LONG_MIN || bhi == LONG_MIN) {
        mpfr_set_zero(out, 1);
        return 0;
    }
    /* |sum| < k 2^(ahi + bhi): `head` bits above the largest product keep
     * every partial sum; the least bit of any product is at or above `bot`. */
    int head = 2;
    while (((size_t)1 << head) < k + 1)
        head++;
    long top = ahi + bhi + head, bot = alo + blo - 2L * n * MPB_LB;
    size_t len = (size_t)((top - bot + MPB_LB - 1) / MPB_LB) + 1;
    if (len > c->accmax)
        return -1;
    mp_limb_t *pos = c->acc, *neg = c->acc + len;
    memset(c->acc, 0, 2 * len * sizeof *c->acc);
    long base = bot + 2L * n * MPB_LB;
    switch (n) {
#if MPB_FAST_N
    case 1: mpb_dot_add(c, pos, neg, len, a, b, k, base, 1, 1); break;
    case 2: mpb_dot_add(c, pos, neg, len, a, b, k, base, 2, 1); break;
    case 3: mpb_dot_add(c, pos, neg, len, a, b, k, base, 3, 1); break;
    case 4: mpb_dot_add(c, pos, neg, len, a, b, k, base, 4, 1); break;
#endif
    default: mpb_dot_add(c, pos, neg, len, a, b, k, base, n, 0); break;
    }
    int cmp = mpn_cmp(pos, neg, (mp_size_t)len);
    if (cmp == 0) {
        mpfr_set_zero(out, 1);
        return 0;
    }
    if (cmp > 0)
        mpn_sub_n(pos, pos, neg, (mp_size_t)len);
    else
        mpn_sub_n(pos, neg, pos, (mp_size_t)len);
    size_t t = len;
    while (pos[t - 1] == 0)
        t--;
    int lz = __builtin_clzll((unsigned long long)pos[t - 1]) - (64 - MPB_LB);
    if (lz)
        mpn_lshift(pos, pos, (mp_size_t)t, (unsigned)lz);
    long e = bot + (long)(t * MPB_LB) - lz;
    if (e < (long)mpfr_get_emin() || e > (long)mpfr_get_emax())
        return -1;
    mpfr_t view;
    mpfr_custom_init_set(view, cmp > 0 ? MPFR_REGULAR_KIND : -MPFR_REGULAR_KIND, (mpfr_exp_t)e,
                         (mpfr_prec_t)(t * MPB_LB), pos);
    mpfr_set(out, view, MPFR_RNDN);
    return 0;
}

/* The same dot product from the unpacked operands: exact MPFR products and
 * mpfr_sum (with a +0 term, so that an all-zero sum is +0). */
static void mpb_dot_sum(struct mpb_ctx *c, mpfr_ptr out, const struct mpb_vec *a, size_t ia,
                        size_t sa, const struct mpb_vec *b, size_t ib, size_t sb, size_t k)
{
    mpb_terms_reserve(c, k + 1);
    for (size_t l = 0; l < k; l++) {
        mpfr_mul(X(c->terms, l), X(a, ia + l * sa), X(b, ib + l * sb), MPFR_RNDN);
        c->ptrs[l] = X(c->terms, l);
    }
    c->ptrs[k] = c->zero;
    mpfr_sum(out, c->ptrs, k + 1, MPFR_RNDN);
}

void mpb_matmul(void *ctx, const struct graph *g, const struct node *nd, backend_buf *outb,
                const backend_buf *const *in, const struct backend_step *st)
{
    (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    int ta = nd->p.mm.ta, tb = nd->p.mm.tb;
    size_t m = nd->shape[0], n = nd->shape[1];
    size_t k = ta ? IN_SHAPE(0, 0) : IN_SHAPE(0, 1);
    /* element (i, l) of op(A) at i * ar + l * ak; (l, j) of op(B) at j * br + l * bk */
    size_t ar = ta ? 1 : k, ak = ta ? m : 1;
    size_t br = tb ? k : 1, bk = tb ? 1 : n;
    size_t need = (m + n) * k;
    if (c->pcap < need) {
        free(c->pe);
        free(c->pneg);
        free(c->pd);
        c->pcap = need;
        c->pe = dt_malloc(need * sizeof *c->pe);
        c->pneg = dt_malloc(need);
        c->pd = dt_malloc(need * c->nlimbs * sizeof *c->pd);
    }
    if (c->prcap < m + n) {
        free(c->plo);
        free(c->phi);
        c->prcap = m + n;
        c->plo = dt_malloc((m + n) * sizeof *c->plo);
        c->phi = dt_malloc((m + n) * sizeof *c->phi);
    }
    int finite = mpb_pack(c, 0, 0, IN(0), m, k, ar, ak) == 0 &&
                 mpb_pack(c, m * k, m, IN(1), n, k, br, bk) == 0;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            mpfr_ptr o = X(out, i * n + j);
            if (finite && mpb_dot_exact(c, o, i * k, (m + j) * k, k, c->plo[i], c->phi[i],
                                        c->plo[m + j], c->phi[m + j]) == 0)
                continue;
            mpb_dot_sum(c, o, IN(0), i * ar, ak, IN(1), j * br, bk, k);
        }
}
