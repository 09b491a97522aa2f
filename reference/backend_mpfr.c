/* backend_mpfr.c: the mpfr backend, the high-precision reference trainer.
 * Every element is an MPFR number of P bits (default 128). Every op but
 * ADAM_P gives its exact value rounded once to P bits (to nearest, ties to
 * even): rational ops through exact products and exact sums, sigmoid through
 * a Ziv loop, tanh through mpfr_tanh; ADAM_P rounds each elementary operation
 * of op.h's formula to P bits. An exactly zero result has the sign op.h's
 * formula gives in IEEE arithmetic, sums accumulated from +0 as on the cpu
 * backend. Downloads and traces round to float32 (mpb_round_f32).
 * Dimension letters: M, K, N of a matrix product; R rows, F features. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <gmp.h>
#include <mpfr.h>

#include "backend.h"
#include "stats.h"
#include "util.h"


#define MPB_PREC_DEFAULT 128
#define MPB_PREC_MIN 24
#define MPB_PREC_MAX 100000
/* 1 - b for a float b is exact in this many bits (b spans 2^-149 .. 2^128). */
#define MPB_PREC_PARAM 320
/* Guard bits of the first Ziv iteration. */
#define MPB_GUARD 32
/* Exponent spread (in limbs, beyond the width of one product) that the exact
 * dot product's fixed-point accumulator covers; a wider one takes mpfr_sum. */
#define MPB_ACC_SPREAD 128

#if GMP_NAIL_BITS != 0
#error "backend_mpfr.c assumes GMP without nail bits"
#endif
#define MPB_LB GMP_NUMB_BITS
#if GMP_NUMB_BITS == 64 && defined(__SIZEOF_INT128__)
#define MPB_FAST_N 4   /* inline products for up to 4 limbs (P <= 256) */
#else
#define MPB_FAST_N 0
#endif

/* ---- storage ---------------------------------------------------------------
 * A block of numbers of one precision: the mpfr structs, then all limbs, in
 * one allocation (mpfr's custom interface), each number initialised to +0. */
struct mpb_vec {
    size_t count;
    mpfr_prec_t prec;
    __mpfr_struct *x;
    mp_limb_t *d;
};

static size_t mpb_limbs(mpfr_prec_t prec)
{
    return mpfr_custom_get_size(prec) / sizeof(mp_limb_t);
}

/* A vector header followed by its numbers and limbs, in one allocation. */
static struct mpb_vec *mpb_vec_new(size_t count, mpfr_prec_t prec)
{
    size_t n = mpb_limbs(prec);
    size_t hdr = (sizeof(struct mpb_vec) + 15) & ~(size_t)15;
    size_t xs = (count * sizeof(__mpfr_struct) + 15) & ~(size_t)15;
    char *mem = dt_malloc(hdr + xs + count * n * sizeof(mp_limb_t) + 1);
    struct mpb_vec *v = (struct mpb_vec *)mem;
    v->count = count;
    v->prec = prec;
    v->x = (__mpfr_struct *)(mem + hdr);
    v->d = (mp_limb_t *)(mem + hdr + xs);
    for (size_t i = 0; i < count; i++) {
        mpfr_custom_init(v->d + i * n, prec);
        mpfr_custom_init_set(&v->x[i], MPFR_ZERO_KIND, 0, prec, v->d + i * n);
    }
    return v;
}

/* v grown to hold at least count numbers (contents not kept). */
static struct mpb_vec *mpb_vec_reserve(struct mpb_vec *v, size_t count, mpfr_prec_t prec)
{
    if (v && v->count >= count && v->prec == prec)
        return v;
    free(v);
    return mpb_vec_new(count < 64 ? 64 : count, prec);
}

#define X(v, i) (&(v)->x[i])
#define IN(k) ((const struct mpb_vec *)in[k])
#define IN_SHAPE(k, d) (g->nodes[nd->inputs[k]].shape[d])
#define IN_COUNT(k) (g->nodes[nd->inputs[k]].count)

/* ---- context ---------------------------------------------------------------
 * Temporaries live here, allocated once; the op kernels run on one thread.
 * upload, download and trace use none of them (trace may run on the
 * tracer's worker thread while the next op runs). */
struct mpb_ctx {
    mpfr_prec_t prec;          /* P */
    size_t nlimbs;             /* limbs of a P-bit number */
    mpfr_t t1, t2, t3, t4;     /* P bits */
    mpfr_t wide;               /* 2 * nlimbs limbs: holds any product of two P-bit numbers */
    mpfr_t par1, par2, par3;   /* op parameters and 1 - b, exact */
    mpfr_t one, zero;
    mpfr_t z1, z2;             /* Ziv loops, precision varies */
    struct mpb_vec *terms;     /* summands, wide precision */
    mpfr_ptr *ptrs;            /* their addresses, for mpfr_sum */
    size_t ptrs_cap;
    /* matrix products: packed operands and accumulators */
    long *pe;                  /* exponents (LONG_MIN for a zero) */
    unsigned char *pneg;
    mp_limb_t *pd;
    size_t pcap;
    long *plo, *phi;           /* per packed row: exponent range of its non-zeros */
    size_t prcap;
    size_t accmax;             /* limbs of one accumulator */
    mp_limb_t *acc;            /* two accumulators, then a product's 2 n + 1 limbs */
};

static void mpb_ziv_prec(mpfr_ptr z, mpfr_prec_t w)
{
    if (mpfr_get_prec(z) != w)
        mpfr_set_prec(z, w);
}

static int mpb_init(void **ctxp, const struct backend_options *opt)
{
    long p = opt->precision ? opt->precision : MPB_PREC_DEFAULT;
    if (p < MPB_PREC_MIN || p > MPB_PREC_MAX) {
        dt_error_set("--precision %ld: the mpfr backend takes %d to %d bits", p, MPB_PREC_MIN,
                     MPB_PREC_MAX);
        return DT_ERR;
    }
    struct mpb_ctx *c = dt_calloc(1, sizeof *c);
    c->prec = (mpfr_prec_t)p;
    c->nlimbs = mpb_limbs(c->prec);
    mpfr_inits2(c->prec, c->t1, c->t2, c->t3, c->t4, (mpfr_ptr)0);
    mpfr_init2(c->wide, (mpfr_prec_t)(2 * c->nlimbs * MPB_LB));
    mpfr_inits2(MPB_PREC_PARAM, c->par1, c->par2, c->par3, (mpfr_ptr)0);
    mpfr_inits2(MPB_PREC_MIN, c->one, c->zero, (mpfr_ptr)0);
    mpfr_set_ui(c->one, 1, MPFR_RNDN);
    mpfr_set_zero(c->zero, 1);
    mpfr_inits2(c->prec + MPB_GUARD, c->z1, c->z2, (mpfr_ptr)0);
    c->accmax = 2 * c->nlimbs + MPB_ACC_SPREAD;
    c->acc = dt_malloc((2 * c->accmax + 2 * c->nlimbs + 1) * sizeof *c->acc);
    *ctxp = c;
    return DT_OK;
}

static void mpb_free(void *ctx)
{
    struct mpb_ctx *c = ctx;
    if (!c)
        return;
    mpfr_clears(c->t1, c->t2, c->t3, c->t4, c->wide, c->par1, c->par2, c->par3, c->one, c->zero,
                c->z1, c->z2, (mpfr_ptr)0);
    free(c->terms);
    free(c->ptrs);
    free(c->pe);
    free(c->pneg);
    free(c->pd);
    free(c->plo);
    free(c->phi);
    free(c->acc);
    free(c);
}

static backend_buf *mpb_alloc(void *ctx, size_t count)
{
    struct mpb_ctx *c = ctx;
    return mpb_vec_new(count, c->prec);
}

static void mpb_release(void *ctx, backend_buf *buf)
{
    (void)ctx;
    free(buf);
}

/* Room for count summands of wide precision and their addresses. */
static void mpb_terms_reserve(struct mpb_ctx *c, size_t count)
{
    c->terms = mpb_vec_reserve(c->terms, count, mpfr_get_prec(c->wide));
    if (c->ptrs_cap < count) {
        free(c->ptrs);
        c->ptrs_cap = count < 64 ? 64 : count;
        c->ptrs = dt_malloc(c->ptrs_cap * sizeof *c->ptrs);
    }
}

/* ---- float32 ---------------------------------------------------------------
 * Rounding to binary32 reads the significand's bits directly: round to
 * nearest, ties to even, with binary32's subnormals (quantum 2^-149) and
 * overflow to infinity; no intermediate format, no MPFR state, so it is
 * safe on any thread. NaN becomes the default quiet NaN 0x7fc00000. */
static float mpb_round_f32(mpfr_srcptr x)
{
    uint32_t bits;
    if (mpfr_nan_p(x)) {
        bits = 0x7fc00000u;
    } else if (mpfr_inf_p(x)) {
        bits = 0x7f800000u;
    } else if (mpfr_zero_p(x)) {
        bits = 0;
    } else {
        /* |x| = 0.1b2b3... * 2^e, in [2^(e-1), 2^e) */
        mpfr_exp_t e = mpfr_get_exp(x);
        if (e > 128) {
            bits = 0x7f800000u;
        } else if (e < -149) {
            bits = 0;       /* |x| < 2^-150: below half the least subnormal */
        } else {
            /* keep = significant bits of the result: 24, fewer below 2^-126 */
            int keep = e >= -125 ? 24 : (int)(e + 149);
            const mp_limb_t *d = mpfr_custom_get_significand(x);
            size_t n = mpb_limbs(mpfr_get_prec(x));
            mp_limb_t top = d[n - 1];
            uint32_t m = keep ? (uint32_t)(top >> (MPB_LB - keep)) : 0;
            int half = (int)((top >> (MPB_LB - 1 - keep)) & 1);
            int sticky = (top & (((mp_limb_t)1 << (MPB_LB - 1 - keep)) - 1)) != 0;
            for (size_t i = 0; i + 1 < n && !sticky; i++)
                sticky = d[i] != 0;
            if (half && (sticky || (m & 1)))
                m++;
            /* m * 2^(e - keep); a carry to 2^24 (or to 2^23 below 2^-126) moves
             * into the exponent field, up to infinity */
            if (keep == 24)
                bits = ((uint32_t)(e + 126) << 23) + (m - (1u << 23));
            else
                bits = m;
        }
    }
    if (mpfr_signbit(x))
        bits |= 0x80000000u;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static void mpb_upload(void *ctx, backend_buf *dst, const float *src, size_t count)
{
    (void)ctx;
    struct mpb_vec *v = dst;
    for (size_t i = 0; i < count; i++)
        mpfr_set_flt(X(v, i), src[i], MPFR_RNDN); /* exact: P >= 24 */
}

static void mpb_download(void *ctx, float *dst, const backend_buf *src, size_t count)
{
    (void)ctx;
    const struct mpb_vec *v = src;
    for (size_t i = 0; i < count; i++)
        dst[i] = mpb_round_f32(X(v, i));
}

static void mpb_trace(void *ctx, const backend_buf *buf, size_t count, struct trace_oprec *rec)
{
    float *f = dt_malloc((count ? count : 1) * sizeof *f);
    mpb_download(ctx, f, buf, count);
    stats_compute(f, count, rec);
    free(f);
}

static void mpb_describe(void *ctx, struct trace_config *cfg)
{
    struct mpb_ctx *c = ctx;
    trace_config_setf(cfg, "precision", "%ld", (long)c->prec);
    trace_config_set(cfg, "mpfr_version", mpfr_get_version());
}

/* ---- exact sums ------------------------------------------------------------
 * out = RN_P((sum of terms) / n), one rounding. A power of two scales the
 * correctly rounded sum exactly; otherwise a Ziv loop: an exact sum at W
 * bits makes the division the only rounding, an inexact one gives q within
 * 2 ulps at W, and the exact sum has finitely many bits, so W grows until
 * one of the two decides. */
static void mpb_sum_div(struct mpb_ctx *c, mpfr_ptr out, mpfr_ptr *terms, unsigned long nt,
                        unsigned long n)
{
    if ((n & (n - 1)) == 0) {
        mpfr_sum(out, terms, nt, MPFR_RNDN);
        unsigned long k = 0;
        while ((1ul << k) < n)
            k++;
        mpfr_div_2ui(out, out, k, MPFR_RNDN);
        return;
    }
    mpfr_prec_t w = c->prec + 64;
    for (;;) {
        mpb_ziv_prec(c->z1, w);
        mpb_ziv_prec(c->z2, w);
        if (mpfr_sum(c->z1, terms, nt, MPFR_RNDN) == 0) {
            mpfr_div_ui(out, c->z1, n, MPFR_RNDN);
            break;
        }
        mpfr_div_ui(c->z2, c->z1, n, MPFR_RNDN);
        if (mpfr_can_round(c->z2, w - 2, MPFR_RNDN, MPFR_RNDZ, c->prec + 1)) {
            mpfr_set(out, c->z2, MPFR_RNDN);
            break;
        }
        w *= 2;
    }
    mpb_ziv_prec(c->z1, c->prec + MPB_GUARD);
    mpb_ziv_prec(c->z2, c->prec + MPB_GUARD);
}

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

static void mpb_matmul(void *ctx, const struct graph *g, const struct node *nd, backend_buf *outb,
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

/* ---- elementwise ops -------------------------------------------------------- */

#define MPB_OP(fn)                                                                              \
    static void fn(void *ctx, const struct graph *g, const struct node *nd, backend_buf *outb,   \
                   const backend_buf *const *in, const struct backend_step *st)

MPB_OP(mpb_add_bias)
{
    (void)ctx, (void)g, (void)st;
    /* out (R,F) = x (R,F) + b (F) */
    struct mpb_vec *out = outb;
    size_t rows = nd->shape[0], f = nd->shape[1];
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < f; j++)
            mpfr_add(X(out, r * f + j), X(IN(0), r * f + j), X(IN(1), j), MPFR_RNDN);
}

MPB_OP(mpb_bias_grad)
{
    (void)st;
    /* out (F) = sum over rows of dy (R,F), exact, rounded once; +0 if zero */
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    size_t rows = IN_SHAPE(0, 0), f = nd->shape[0];
    mpb_terms_reserve(c, rows + 1);
    for (size_t j = 0; j < f; j++) {
        for (size_t r = 0; r < rows; r++)
            c->ptrs[r] = (mpfr_ptr)X(IN(0), r * f + j);
        c->ptrs[rows] = c->zero;
        mpfr_sum(X(out, j), c->ptrs, rows + 1, MPFR_RNDN);
    }
}

/* sigmoid(x) = 1 / (1 + exp(-x)) correctly rounded to P bits. At W bits the
 * three roundings (exp, add, divide) leave a relative error below 4 2^-W,
 * i.e. under 2^(EXP - W + 3); W grows until that interval rounds one way.
 * sigmoid(x) is irrational for finite x != 0, so the loop ends. */
static void mpb_sigmoid1(struct mpb_ctx *c, mpfr_ptr out, mpfr_srcptr x)
{
    if (mpfr_nan_p(x)) {
        mpfr_set_nan(out);
        return;
    }
    if (mpfr_zero_p(x)) {
        mpfr_set_ui_2exp(out, 1, -1, MPFR_RNDN);
        return;
    }
    if (mpfr_inf_p(x)) {
        if (mpfr_signbit(x))
            mpfr_set_zero(out, 1);
        else
            mpfr_set_ui(out, 1, MPFR_RNDN);
        return;
    }
    mpfr_neg(c->t1, x, MPFR_RNDN);
    mpfr_prec_t w = c->prec + MPB_GUARD;
    for (;;) {
        mpb_ziv_prec(c->z1, w);
        mpfr_exp(c->z1, c->t1, MPFR_RNDN);
        if (mpfr_inf_p(c->z1)) {
            /* exp(-x) beyond MPFR's exponent range: sigmoid underflows */
            mpfr_set_zero(out, 1);
            break;
        }
        if (mpfr_zero_p(c->z1) ||
            (mpfr_sgn(x) > 0 && mpfr_get_exp(c->z1) <= -(mpfr_exp_t)(c->prec + 3))) {
            /* 1 - sigmoid(x) < exp(-x) < 2^-(P+2): rounds to 1 */
            mpfr_set_ui(out, 1, MPFR_RNDN);
            break;
        }
        mpfr_add_ui(c->z1, c->z1, 1, MPFR_RNDN);
        mpfr_ui_div(c->z1, 1, c->z1, MPFR_RNDN);
        if (mpfr_can_round(c->z1, w - 3, MPFR_RNDN, MPFR_RNDZ, c->prec + 1)) {
            mpfr_set(out, c->z1, MPFR_RNDN);
            break;
        }
        w += w / 2;
    }
    mpb_ziv_prec(c->z1, c->prec + MPB_GUARD);
}

MPB_OP(mpb_sigmoid)
{
    (void)g, (void)st;
    struct mpb_vec *out = outb;
    for (size_t i = 0; i < nd->count; i++)
        mpb_sigmoid1(ctx, X(out, i), X(IN(0), i));
}

/* The exact value of dy y (1 - y) = dy y - (dy y) y rounded once (dy y is
 * exact in `wide`). Where the result is a zero or not finite, the op.h
 * formula evaluated step by step gives IEEE's signs and NaNs; its steps are
 * exact there. */
MPB_OP(mpb_sigmoid_bwd)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    for (size_t i = 0; i < nd->count; i++) {
        mpfr_srcptr y = X(IN(0), i), dy = X(IN(1), i);
        mpfr_ptr o = X(out, i);
        if (mpfr_regular_p(y) && mpfr_regular_p(dy) && !mpfr_equal_p(y, c->one)) {
            mpfr_mul(c->wide, dy, y, MPFR_RNDN);
            mpfr_fmms(o, c->wide, c->one, c->wide, y, MPFR_RNDN);
        } else {
            mpfr_mul(c->t1, dy, y, MPFR_RNDN);
            mpfr_ui_sub(c->t2, 1, y, MPFR_RNDN);
            mpfr_mul(o, c->t1, c->t2, MPFR_RNDN);
        }
    }
}

MPB_OP(mpb_tanh)
{
    (void)ctx, (void)g, (void)st;
    struct mpb_vec *out = outb;
    for (size_t i = 0; i < nd->count; i++)
        mpfr_tanh(X(out, i), X(IN(0), i), MPFR_RNDN);
}

/* dy (1 - y y) = dy - (dy y) y rounded once; zeros and non-finite values
 * step by step as in mpb_sigmoid_bwd. */
MPB_OP(mpb_tanh_bwd)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    for (size_t i = 0; i < nd->count; i++) {
        mpfr_srcptr y = X(IN(0), i), dy = X(IN(1), i);
        mpfr_ptr o = X(out, i);
        if (mpfr_number_p(y) && mpfr_regular_p(dy) && mpfr_cmpabs_ui(y, 1) != 0) {
            mpfr_mul(c->wide, dy, y, MPFR_RNDN);
            mpfr_fmms(o, dy, c->one, c->wide, y, MPFR_RNDN);
        } else {
            mpfr_mul(c->t1, y, y, MPFR_RNDN);
            mpfr_ui_sub(c->t1, 1, c->t1, MPFR_RNDN);
            mpfr_mul(o, dy, c->t1, MPFR_RNDN);
        }
    }
}

MPB_OP(mpb_relu)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    for (size_t i = 0; i < nd->count; i++) {
        mpfr_srcptr x = X(IN(0), i);
        if (mpfr_greater_p(x, c->zero))
            mpfr_set(X(out, i), x, MPFR_RNDN);
        else
            mpfr_set_zero(X(out, i), 1);
    }
}

MPB_OP(mpb_relu_bwd)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    for (size_t i = 0; i < nd->count; i++) {
        if (mpfr_greater_p(X(IN(0), i), c->zero))
            mpfr_set(X(out, i), X(IN(1), i), MPFR_RNDN);
        else
            mpfr_set_zero(X(out, i), 1);
    }
}

MPB_OP(mpb_add)
{
    (void)ctx, (void)g, (void)st;
    struct mpb_vec *out = outb;
    for (size_t i = 0; i < nd->count; i++)
        mpfr_add(X(out, i), X(IN(0), i), X(IN(1), i), MPFR_RNDN);
}

/* mean((p - t)^2): the exact sum of p^2 + t^2 - 2 p t (each term exact in
 * `wide` precision), divided by n and rounded once. With an Inf or NaN the
 * squared differences themselves (step by step) give IEEE's result. */
MPB_OP(mpb_mse)
{
    (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    const struct mpb_vec *p = IN(0), *t = IN(1);
    size_t n = IN_COUNT(0);
    int finite = 1;
    for (size_t i = 0; i < n && finite; i++)
        finite = mpfr_number_p(X(p, i)) && mpfr_number_p(X(t, i));
    size_t nt = finite ? 3 * n : n;
    mpb_terms_reserve(c, nt + 1);
    for (size_t i = 0; i < n; i++) {
        if (finite) {
            mpfr_sqr(X(c->terms, 3 * i), X(p, i), MPFR_RNDN);
            mpfr_sqr(X(c->terms, 3 * i + 1), X(t, i), MPFR_RNDN);
            mpfr_mul(X(c->terms, 3 * i + 2), X(p, i), X(t, i), MPFR_RNDN);
            mpfr_mul_si(X(c->terms, 3 * i + 2), X(c->terms, 3 * i + 2), -2, MPFR_RNDN);
        } else {
            mpfr_sub(X(c->terms, i), X(p, i), X(t, i), MPFR_RNDN);
            mpfr_sqr(X(c->terms, i), X(c->terms, i), MPFR_RNDN);
        }
    }
    for (size_t i = 0; i < nt; i++)
        c->ptrs[i] = X(c->terms, i);
    c->ptrs[nt] = c->zero;
    mpb_sum_div(c, X(out, 0), c->ptrs, nt + 1, n);
}

/* 2 (p - t) / n * g = (2 p g - 2 t g) / n, rounded once; where it is zero
 * (p = t or g = 0) or not finite, step by step in op.h's order. */
MPB_OP(mpb_mse_bwd)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    const struct mpb_vec *p = IN(0), *t = IN(1);
    mpfr_srcptr gr = nd->ninputs > 2 ? X(IN(2), 0) : c->one;
    unsigned long n = (unsigned long)nd->count;
    mpb_terms_reserve(c, 3);
    for (size_t i = 0; i < nd->count; i++) {
        mpfr_srcptr pi = X(p, i), ti = X(t, i);
        mpfr_ptr o = X(out, i);
        if (mpfr_number_p(pi) && mpfr_number_p(ti) && mpfr_regular_p(gr) &&
            !mpfr_equal_p(pi, ti)) {
            mpfr_mul(X(c->terms, 0), pi, gr, MPFR_RNDN);
            mpfr_mul_2ui(X(c->terms, 0), X(c->terms, 0), 1, MPFR_RNDN);
            mpfr_mul(X(c->terms, 1), ti, gr, MPFR_RNDN);
            mpfr_mul_si(X(c->terms, 1), X(c->terms, 1), -2, MPFR_RNDN);
            c->ptrs[0] = X(c->terms, 0);
            c->ptrs[1] = X(c->terms, 1);
            mpb_sum_div(c, o, c->ptrs, 2, n);
        } else {
            mpfr_sub(c->t1, pi, ti, MPFR_RNDN);
            mpfr_mul_2ui(c->t1, c->t1, 1, MPFR_RNDN);
            mpfr_div_ui(c->t1, c->t1, n, MPFR_RNDN);
            mpfr_mul(o, c->t1, gr, MPFR_RNDN);
        }
    }
}

/* p - lr g = (-lr) g + p, one rounding (fma); p - x and p + (-x) agree on
 * every signed zero. */
MPB_OP(mpb_sgd)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    mpfr_set_flt(c->par1, -nd->p.sgd.lr, MPFR_RNDN);
    for (size_t i = 0; i < nd->count; i++)
        mpfr_fma(X(out, i), c->par1, X(IN(1), i), X(IN(0), i), MPFR_RNDN);
}

MPB_OP(mpb_momentum)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    mpfr_set_flt(c->par1, nd->p.momentum.mu, MPFR_RNDN);
    for (size_t i = 0; i < nd->count; i++)
        mpfr_fma(X(out, i), c->par1, X(IN(0), i), X(IN(1), i), MPFR_RNDN);
}

/* b1 m + (1 - b1) g with 1 - b1 exact: one rounding (fmma). */
MPB_OP(mpb_adam_m)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    mpfr_set_flt(c->par1, nd->p.adam.b1, MPFR_RNDN);
    mpfr_ui_sub(c->par2, 1, c->par1, MPFR_RNDN);
    for (size_t i = 0; i < nd->count; i++)
        mpfr_fmma(X(out, i), c->par1, X(IN(0), i), c->par2, X(IN(1), i), MPFR_RNDN);
}

/* b2 v + (1 - b2) g g with g g exact in `wide`: one rounding. */
MPB_OP(mpb_adam_v)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    mpfr_set_flt(c->par1, nd->p.adam.b2, MPFR_RNDN);
    mpfr_ui_sub(c->par2, 1, c->par1, MPFR_RNDN);
    for (size_t i = 0; i < nd->count; i++) {
        mpfr_sqr(c->wide, X(IN(1), i), MPFR_RNDN);
        mpfr_fmma(X(out, i), c->par1, X(IN(0), i), c->par2, c->wide, MPFR_RNDN);
    }
}

/* p - lr (m / c1) / (sqrt(v / c2) + eps), c = 1 - b^t, t = step + 1: every
 * elementary operation (b^t included) rounded to P bits, in op.h's order. */
MPB_OP(mpb_adam_p)
{
    (void)g;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    unsigned long t = (unsigned long)st->step + 1;
    mpfr_set_flt(c->par1, nd->p.adam.b1, MPFR_RNDN);
    mpfr_pow_ui(c->t3, c->par1, t, MPFR_RNDN);
    mpfr_ui_sub(c->t3, 1, c->t3, MPFR_RNDN);            /* c1 */
    mpfr_set_flt(c->par1, nd->p.adam.b2, MPFR_RNDN);
    mpfr_pow_ui(c->t4, c->par1, t, MPFR_RNDN);
    mpfr_ui_sub(c->t4, 1, c->t4, MPFR_RNDN);            /* c2 */
    mpfr_set_flt(c->par2, nd->p.adam.lr, MPFR_RNDN);
    mpfr_set_flt(c->par3, nd->p.adam.eps, MPFR_RNDN);
    for (size_t i = 0; i < nd->count; i++) {
        mpfr_div(c->t1, X(IN(1), i), c->t3, MPFR_RNDN);  /* m / c1 */
        mpfr_mul(c->t1, c->par2, c->t1, MPFR_RNDN);      /* lr (m / c1) */
        mpfr_div(c->t2, X(IN(2), i), c->t4, MPFR_RNDN);  /* v / c2 */
        mpfr_sqrt(c->t2, c->t2, MPFR_RNDN);
        mpfr_add(c->t2, c->t2, c->par3, MPFR_RNDN);      /* + eps */
        mpfr_div(c->t1, c->t1, c->t2, MPFR_RNDN);
        mpfr_sub(X(out, i), X(IN(0), i), c->t1, MPFR_RNDN);
    }
}

MPB_OP(mpb_fill)
{
    (void)ctx, (void)g, (void)in, (void)st;
    struct mpb_vec *out = outb;
    for (size_t i = 0; i < nd->count; i++)
        mpfr_set_flt(X(out, i), nd->p.fill.value, MPFR_RNDN);
}

const struct backend_ops backend_mpfr = {
    .api_version = BACKEND_API_VERSION,
    .name = "mpfr",
    .init = mpb_init,
    .free = mpb_free,
    .alloc = mpb_alloc,
    .release = mpb_release,
    .upload = mpb_upload,
    .download = mpb_download,
    .trace = mpb_trace,
    .describe = mpb_describe,
    .sync = NULL,
    .op = {
        [OP_MATMUL] = mpb_matmul,
        [OP_ADD_BIAS] = mpb_add_bias,
        [OP_BIAS_GRAD] = mpb_bias_grad,
        [OP_SIGMOID] = mpb_sigmoid,
        [OP_SIGMOID_BWD] = mpb_sigmoid_bwd,
        [OP_TANH] = mpb_tanh,
        [OP_TANH_BWD] = mpb_tanh_bwd,
        [OP_RELU] = mpb_relu,
        [OP_RELU_BWD] = mpb_relu_bwd,
        [OP_ADD] = mpb_add,
        [OP_MSE] = mpb_mse,
        [OP_MSE_BWD] = mpb_mse_bwd,
        [OP_SGD] = mpb_sgd,
        [OP_MOMENTUM] = mpb_momentum,
        [OP_ADAM_M] = mpb_adam_m,
        [OP_ADAM_V] = mpb_adam_v,
        [OP_ADAM_P] = mpb_adam_p,
        [OP_FILL] = mpb_fill,
    },
};
