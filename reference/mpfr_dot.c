/* mpfr_dot.c: the mpfr backend's exact dot products (mpfr_impl.h): the matrix
 * product and the three convolutions, every element the exact sum of
 * products of P-bit operands rounded once to P bits, through a fixed-point
 * accumulator with inline limb products up to 256 bits.
 * Dimension letters: M, K, N of a matrix product; N, C, H, W of an image,
 * K, C, R, S of a filter (op.h). */
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

/* ---- packed operands -------------------------------------------------------
 * Each element is the exact dot product of two packed rows of equal length,
 * rounded once. A row holds (exponent, sign, significand) entries, one per
 * term; an absent term (a convolution tap outside the image) packs like a
 * zero, so that it adds nothing, and keeps a NULL source, so that the slow
 * path leaves it out too (an Inf weight meets no padding). The products,
 * exact in 2n limbs, are added at their exponents into two fixed-point
 * accumulators (positive and negative terms) spanning the pair's exponent
 * range, and the difference is rounded by MPFR. Rows holding an Inf or a
 * NaN, and exponent spreads beyond MPB_ACC_SPREAD limbs, take exact MPFR
 * products of the present pairs and mpfr_sum instead. An exactly zero
 * result is +0, as a sum accumulated from +0 gives. */

/* Room for `entries` packed entries in `rows` rows. */
static void mpb_pack_reserve(struct mpb_ctx *c, size_t entries, size_t rows)
{
    if (c->pcap < entries) {
        free(c->pe);
        free(c->pneg);
        free(c->pd);
        free(c->psrc);
        c->pcap = entries;
        c->pe = dt_malloc(entries * sizeof *c->pe);
        c->pneg = dt_malloc(entries);
        c->pd = dt_malloc(entries * c->nlimbs * sizeof *c->pd);
        c->psrc = dt_malloc(entries * sizeof *c->psrc);
    }
    if (c->prcap < rows) {
        free(c->plo);
        free(c->phi);
        c->prcap = rows;
        c->plo = dt_malloc(rows * sizeof *c->plo);
        c->phi = dt_malloc(rows * sizeof *c->phi);
    }
}

/* Pack x (NULL: an absent term) as entry o of a row whose exponent range so
 * far is [*lo, *hi]. */
static inline void mpb_pack1(struct mpb_ctx *c, size_t o, mpfr_srcptr x, long *lo, long *hi)
{
    c->psrc[o] = x;
    c->pe[o] = LONG_MIN;
    if (!x || mpfr_zero_p(x) || *hi == LONG_MAX)
        return;
    if (!mpfr_regular_p(x)) {
        *hi = LONG_MAX;
        return;
    }
    long e = (long)mpfr_get_exp(x);
    c->pe[o] = e;
    c->pneg[o] = (unsigned char)(mpfr_signbit(x) != 0);
    memcpy(c->pd + o * c->nlimbs, mpfr_custom_get_significand(x), c->nlimbs * sizeof(mp_limb_t));
    *lo = e < *lo ? e : *lo;
    *hi = e > *hi ? e : *hi;
}

/* Pack rows prow .. prow+rows-1 (length k, entries from row * k) from a
 * (rows, K) view of v, element (r, l) at r * sr + l * sk. */
static void mpb_pack(struct mpb_ctx *c, size_t prow, const struct mpb_vec *v, size_t rows,
                     size_t k, size_t sr, size_t sk)
{
    for (size_t r = 0; r < rows; r++) {
        long lo = LONG_MAX, hi = LONG_MIN;
        for (size_t l = 0; l < k; l++)
            mpb_pack1(c, (prow + r) * k + l, X(v, r * sr + l * sk), &lo, &hi);
        c->plo[prow + r] = lo;
        c->phi[prow + r] = hi;
    }
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

/* The same dot product from the sources of the packed entries: exact MPFR
 * products of the present pairs and mpfr_sum (with a +0 term, so that an
 * all-zero sum is +0). */
static void mpb_dot_sum(struct mpb_ctx *c, mpfr_ptr out, size_t a, size_t b, size_t k)
{
    mpb_terms_reserve(c, k + 1);
    size_t nt = 0;
    for (size_t l = 0; l < k; l++) {
        mpfr_srcptr x = c->psrc[a + l], y = c->psrc[b + l];
        if (!x || !y)
            continue;
        mpfr_mul(X(c->terms, nt), x, y, MPFR_RNDN);
        c->ptrs[nt] = X(c->terms, nt);
        nt++;
    }
    c->ptrs[nt++] = c->zero;
    mpfr_sum(out, c->ptrs, nt, MPFR_RNDN);
}

/* out = the exact dot product of packed rows ra and rb (length k), rounded
 * once. */
static void mpb_dot_rows(struct mpb_ctx *c, mpfr_ptr out, size_t ra, size_t rb, size_t k)
{
    if (c->phi[ra] != LONG_MAX && c->phi[rb] != LONG_MAX &&
        mpb_dot_exact(c, out, ra * k, rb * k, k, c->plo[ra], c->phi[ra], c->plo[rb],
                      c->phi[rb]) == 0)
        return;
    mpb_dot_sum(c, out, ra * k, rb * k, k);
}

/* ---- matrix product -------------------------------------------------------- */

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
    /* rows 0..m-1: op(A)'s rows; m..m+n-1: op(B)'s columns */
    mpb_pack_reserve(c, (m + n) * k, m + n);
    mpb_pack(c, 0, IN(0), m, k, ar, ak);
    mpb_pack(c, m, IN(1), n, k, br, bk);
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++)
            mpb_dot_rows(c, X(out, i * n + j), i, m + j, k);
}

/* ---- convolutions -----------------------------------------------------------
 * Forward and data gradient are one computation: out (N,O,H,W) from np pairs
 * of an image img_j (N,I,H,W) and a filter filt_j, element (n,o,h,w) the sum
 * over j, i, r, s of img_j[n, i, h + d (r - R/2), w + d (s - S/2)] times
 * filt_j's entry (o,i,r,s) at o fo + i fi + r S + s, taps outside the image
 * left out. Forward: one pair (x, w), O = K, I = C, d = +1; data gradient:
 * the pairs (dy_j, w_j), O = C, I = K, d = -1. The pairs' terms lie side by
 * side in one row of length np I R S, so that the sum over all pairs is one
 * exact dot product, rounded once (op.h's definition, not a sum of np
 * rounded ones). The filters' O rows are packed once, then the W rows of taps of one
 * output row (n, h) at a time, so that the packed memory stays
 * (O + W) np I R S. */
static void mpb_conv_taps(struct mpb_ctx *c, struct mpb_vec *out, const struct mpb_vec *const *img,
                          const struct mpb_vec *const *filt, size_t np, size_t nb, size_t no,
                          size_t ni, size_t h, size_t w, size_t r, size_t s, size_t fo, size_t fi,
                          long d)
{
    size_t irs = ni * r * s, len = np * irs;
    mpb_pack_reserve(c, (no + w) * len, no + w);
    for (size_t o = 0; o < no; o++) {
        long lo = LONG_MAX, hi = LONG_MIN;
        for (size_t j = 0; j < np; j++)
            for (size_t i = 0; i < ni; i++)
                for (size_t q = 0; q < r * s; q++)
                    mpb_pack1(c, o * len + j * irs + i * r * s + q,
                              X(filt[j], o * fo + i * fi + q), &lo, &hi);
        c->plo[o] = lo;
        c->phi[o] = hi;
    }
    long hr = (long)(r / 2), hs = (long)(s / 2);
    for (size_t n = 0; n < nb; n++)
        for (size_t y = 0; y < h; y++) {
            for (size_t x = 0; x < w; x++) {
                size_t row = no + x, e = row * len;
                long lo = LONG_MAX, hi = LONG_MIN;
                for (size_t j = 0; j < np; j++)
                    for (size_t i = 0; i < ni; i++) {
                        const __mpfr_struct *plane = X(img[j], (n * ni + i) * h * w);
                        for (size_t a = 0; a < r; a++) {
                            long yy = (long)y + d * ((long)a - hr);
                            for (size_t b = 0; b < s; b++, e++) {
                                long xx = (long)x + d * ((long)b - hs);
                                int inside = yy >= 0 && yy < (long)h && xx >= 0 && xx < (long)w;
                                mpb_pack1(c, e, inside ? &plane[yy * (long)w + xx] : NULL, &lo,
                                          &hi);
                            }
                        }
                    }
                c->plo[row] = lo;
                c->phi[row] = hi;
            }
            for (size_t o = 0; o < no; o++)
                for (size_t x = 0; x < w; x++)
                    mpb_dot_rows(c, X(out, ((n * no + o) * h + y) * w + x), no + x, o, len);
        }
}

/* out (N,K,H,W) from x (N,C,H,W) and w (K,C,R,S) */
void mpb_conv2d(void *ctx, const struct graph *g, const struct node *nd, backend_buf *outb,
                const backend_buf *const *in, const struct backend_step *st)
{
    (void)st;
    size_t k = IN_SHAPE(1, 0), ch = IN_SHAPE(1, 1), r = IN_SHAPE(1, 2), s = IN_SHAPE(1, 3);
    const struct mpb_vec *x[1] = {IN(0)}, *w[1] = {IN(1)};
    mpb_conv_taps(ctx, outb, x, w, 1, nd->shape[0], k, ch, nd->shape[2], nd->shape[3], r, s,
                  ch * r * s, r * s, 1);
}

/* out (N,C,H,W) from the pairs dy_j (N,K,H,W), w_j (K,C,R,S) (in[2j], in[2j+1]) */
void mpb_conv2d_bwd_data(void *ctx, const struct graph *g, const struct node *nd,
                         backend_buf *outb, const backend_buf *const *in,
                         const struct backend_step *st)
{
    (void)st;
    DT_ASSERT(nd->ninputs >= 2 && nd->ninputs % 2 == 0 && nd->ninputs <= OP_MAX_INPUTS,
              "conv2d_bwd_data %s: %d inputs", nd->name, nd->ninputs);
    size_t np = (size_t)nd->ninputs / 2;
    size_t k = IN_SHAPE(1, 0), ch = IN_SHAPE(1, 1), r = IN_SHAPE(1, 2), s = IN_SHAPE(1, 3);
    const struct mpb_vec *dy[OP_MAX_INPUTS / 2], *w[OP_MAX_INPUTS / 2];
    for (size_t j = 0; j < np; j++) {
        dy[j] = IN(2 * j);
        w[j] = IN(2 * j + 1);
    }
    mpb_conv_taps(ctx, outb, dy, w, np, nd->shape[0], ch, k, nd->shape[2], nd->shape[3], r, s,
                  r * s, ch * r * s, -1);
}

/* out (K,C,R,S) from x (N,C,H,W) and dy (N,K,H,W): rows of length N H W,
 * dy's K rows packed once, then x's R S shifted copies for one channel c
 * at a time. */
void mpb_conv2d_bwd_filter(void *ctx, const struct graph *g, const struct node *nd,
                           backend_buf *outb, const backend_buf *const *in,
                           const struct backend_step *st)
{
    (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    const struct mpb_vec *x = IN(0), *dy = IN(1);
    size_t nb = IN_SHAPE(0, 0), ch = IN_SHAPE(0, 1), h = IN_SHAPE(0, 2), w = IN_SHAPE(0, 3);
    size_t k = IN_SHAPE(1, 1), r = nd->p.conv.r, s = nd->p.conv.s;
    size_t len = nb * h * w, hw = h * w;
    long hr = (long)(r / 2), hs = (long)(s / 2);
    mpb_pack_reserve(c, (k + r * s) * len, k + r * s);
    for (size_t o = 0; o < k; o++) {
        long lo = LONG_MAX, hi = LONG_MIN;
        for (size_t n = 0; n < nb; n++)
            for (size_t q = 0; q < hw; q++)
                mpb_pack1(c, o * len + n * hw + q, X(dy, (n * k + o) * hw + q), &lo, &hi);
        c->plo[o] = lo;
        c->phi[o] = hi;
    }
    for (size_t i = 0; i < ch; i++) {
        for (size_t a = 0; a < r; a++)
            for (size_t b = 0; b < s; b++) {
                size_t row = k + a * s + b, e = row * len;
                long lo = LONG_MAX, hi = LONG_MIN;
                for (size_t n = 0; n < nb; n++) {
                    const __mpfr_struct *plane = X(x, (n * ch + i) * hw);
                    for (size_t y = 0; y < h; y++) {
                        long yy = (long)y + (long)a - hr;
                        for (size_t z = 0; z < w; z++, e++) {
                            long zz = (long)z + (long)b - hs;
                            int inside = yy >= 0 && yy < (long)h && zz >= 0 && zz < (long)w;
                            mpb_pack1(c, e, inside ? &plane[yy * (long)w + zz] : NULL, &lo, &hi);
                        }
                    }
                }
                c->plo[row] = lo;
                c->phi[row] = hi;
            }
        for (size_t o = 0; o < k; o++)
            for (size_t q = 0; q < r * s; q++)
                mpb_dot_rows(c, X(out, (o * ch + i) * r * s + q), k + q, o, len);
    }
}
