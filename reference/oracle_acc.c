/* oracle_acc.c: exact summation for the oracle (oracle.h): a small
 * superaccumulator after Neal (2015), exact dot products and sums of float32
 * vectors (with a certified double-precision fast path), and the float32 ulp.
 *
 * Representation. Every finite double is m 2^(e - 1075) with m a 53-bit
 * integer and e in 1..2046 (a subnormal takes e = 1 and no hidden bit).
 * Chunk i is a signed 64-bit count of units 2^(32 i - 1075), so a double
 * touches chunks e/32, e/32 + 1 and e/32 + 2 with at most 32, 32 and 21 bits:
 * an addition changes each chunk by less than 2^32. A carry pass (balanced
 * digits in [-2^31, 2^31), the rest passed up) runs every 2^20 additions, so
 * no chunk exceeds 2^53 in magnitude; the 68 chunks leave room above the
 * largest double for the carries of 2^64 additions. The accumulator tracks
 * which chunks are in use, so clearing and rounding cost only those. */
#include "oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gmp.h>
#if defined(__SSE2__)
#include <emmintrin.h> /* SSE2: part of every x86-64 */
#endif

#include "oracle_conv.h"
#include "util.h"

#define ACC_NCHUNK 68
#define ACC_CARRY_EVERY (1u << 20)
#define ACC_SIGN ((uint64_t)1 << 63)

struct oracle_acc {
    int64_t c[ACC_NCHUNK];
    int lo, hi;             /* chunks outside [lo, hi] are zero */
    uint32_t left;          /* additions before the next carry pass */
    uint64_t nterms;        /* every term, special ones included */
    uint64_t notnegz;       /* OR of (bits ^ sign bit): 0 iff every finite term was -0 */
    int nan, pinf, ninf;    /* special terms seen */
};

static uint64_t acc_bits(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

/* Carry pass in balanced digits: chunks lo .. end-1 end in [-2^31, 2^31),
 * the value unchanged; returns end, the first chunk past hi that the carry
 * left untouched (or ACC_NCHUNK - 1, the top chunk, which takes any carry).
 * With balanced digits the sign of the value is the sign of its highest
 * nonzero chunk: everything below sums to less than half a unit of it. */
static int acc_carry(int64_t *c, int lo, int hi)
{
    int64_t carry = 0;
    int i = lo;
    for (; i < ACC_NCHUNK - 1 && (i <= hi || carry != 0); i++) {
        int64_t v = c[i] + carry;
        int64_t d = (int64_t)(((uint64_t)v + 0x80000000u) & 0xffffffffu) - 0x80000000;
        carry = (v - d) / ((int64_t)1 << 32); /* exact division */
        c[i] = d;
    }
    if (i == ACC_NCHUNK - 1)
        c[i] += carry;
    return i;
}

/* Add a finite double (given by its bits): no branch but the range update. */
static inline void acc_add_bits(struct oracle_acc *a, uint64_t b)
{
    uint64_t e = (b >> 52) & 0x7ff;
    uint64_t m = (b & (((uint64_t)1 << 52) - 1)) | ((uint64_t)(e != 0) << 52);
    e += (e == 0);
    int idx = (int)(e >> 5);
    unsigned off = (unsigned)(e & 31);
    int64_t lo = (int64_t)((m << off) & 0xffffffffu);
    int64_t mid = (int64_t)((m >> (32 - off)) & 0xffffffffu);
    int64_t hi = (int64_t)((m >> 32) >> (32 - off));
    int64_t s = -(int64_t)(b >> 63); /* 0 or -1: conditional negation */
    a->c[idx] += (lo ^ s) - s;
    a->c[idx + 1] += (mid ^ s) - s;
    a->c[idx + 2] += (hi ^ s) - s;
    a->lo = idx < a->lo ? idx : a->lo;
    a->hi = idx + 2 > a->hi ? idx + 2 : a->hi;
    if (--a->left == 0) {
        int end = acc_carry(a->c, a->lo, a->hi);
        a->hi = end > a->hi ? end : a->hi;
        a->left = ACC_CARRY_EVERY;
    }
}

static void acc_special(struct oracle_acc *a, double x)
{
    if (isnan(x))
        a->nan = 1;
    else if (x > 0)
        a->pinf = 1;
    else
        a->ninf = 1;
}

struct oracle_acc *oracle_acc_new(void)
{
    struct oracle_acc *a = dt_calloc(1, sizeof *a);
    a->hi = ACC_NCHUNK - 1;
    oracle_acc_clear(a);
    return a;
}

void oracle_acc_free(struct oracle_acc *a) { free(a); }

/* Needs a valid accumulator (from oracle_acc_new, or zeroed memory with
 * hi = ACC_NCHUNK - 1): only the chunks in use are zeroed. */
void oracle_acc_clear(struct oracle_acc *a)
{
    if (a->lo <= a->hi)
        memset(a->c + a->lo, 0, (size_t)(a->hi - a->lo + 1) * sizeof a->c[0]);
    a->lo = ACC_NCHUNK;
    a->hi = -1;
    a->left = ACC_CARRY_EVERY;
    a->nterms = a->notnegz = 0;
    a->nan = a->pinf = a->ninf = 0;
}

void oracle_acc_add(struct oracle_acc *a, double x)
{
    uint64_t b = acc_bits(x);
    a->nterms++;
    if (((b >> 52) & 0x7ff) == 0x7ff) {
        acc_special(a, x);
        return;
    }
    a->notnegz |= b ^ ACC_SIGN;
    acc_add_bits(a, b);
}

void oracle_acc_add_prod(struct oracle_acc *a, float x, float y)
{
    oracle_acc_add(a, (double)x * (double)y); /* exact: 24 + 24 bits, no under/overflow */
}

/* ---- reading the sum ------------------------------------------------------ */

/* The exact value as sign and magnitude: mag[0 .. top] chunks in [0, 2^32)
 * (mag[top] > 0 possibly larger), top = -1 for 0. */
struct acc_value {
    int64_t mag[ACC_NCHUNK];
    int neg, top;
};

static void acc_value(const struct oracle_acc *a, struct acc_value *v)
{
    memset(v->mag, 0, sizeof v->mag);
    v->top = -1;
    v->neg = 0;
    if (a->lo > a->hi)
        return;
    memcpy(v->mag + a->lo, a->c + a->lo, (size_t)(a->hi - a->lo + 1) * sizeof a->c[0]);
    int end = acc_carry(v->mag, a->lo, a->hi);
    int top = end > a->hi ? end : a->hi;
    while (top >= a->lo && v->mag[top] == 0)
        top--;
    if (top < a->lo)
        return;
    v->neg = v->mag[top] < 0;
    if (v->neg)
        for (int i = a->lo; i <= top; i++)
            v->mag[i] = -v->mag[i];
    /* balanced digits to digits in [0, 2^32): borrows stop at top, which is
     * positive and carries the whole sign */
    int64_t borrow = 0;
    for (int i = a->lo; i < top; i++) {
        int64_t d = v->mag[i] + borrow;
        borrow = d < 0 ? -1 : 0;
        v->mag[i] = d < 0 ? d + ((int64_t)1 << 32) : d;
    }
    v->mag[top] += borrow;
    while (top >= 0 && v->mag[top] == 0)
        top--;
    v->top = top;
}

/* Special or zero results: 1 and *r set when the sum is NaN, infinite or
 * an exact zero (IEEE's rules: +0 unless every term was -0). */
static int acc_trivial(const struct oracle_acc *a, const struct acc_value *v, double *r)
{
    if (a->nan || (a->pinf && a->ninf)) {
        *r = NAN;
        return 1;
    }
    if (a->pinf || a->ninf) {
        *r = a->pinf ? INFINITY : -INFINITY;
        return 1;
    }
    if (v->top < 0) {
        *r = (a->nterms > 0 && a->notnegz == 0) ? -0.0 : 0.0;
        return 1;
    }
    return 0;
}

static int acc_clz128(unsigned __int128 w)
{
    uint64_t hi = (uint64_t)(w >> 64), lo = (uint64_t)w;
    return hi ? __builtin_clzll(hi) : 64 + __builtin_clzll(lo);
}

/* Round the nonzero magnitude v to p significant bits with quanta no smaller
 * than 2^qmin (the subnormal spacing), ties to even, and return it as a
 * double (exact: p <= 53, quantum >= 2^-1074) or +Inf when it reaches
 * 2^ovf_exp (the overflow threshold of the target format after rounding). */
static double acc_round_mag(const struct acc_value *v, int p, int qmin, int ovf_exp)
{
    int h = v->top;
    /* W: the top three chunks; everything below only sets `sticky`. */
    unsigned __int128 w = (unsigned __int128)(uint64_t)v->mag[h] << 64;
    if (h >= 1)
        w |= (unsigned __int128)(uint64_t)v->mag[h - 1] << 32;
    if (h >= 2)
        w |= (uint64_t)v->mag[h - 2];
    int sticky = 0;
    for (int i = 0; i < h - 2; i++)
        sticky |= v->mag[i] != 0;
    int base = 32 * (h - 2) - 1075;            /* exponent of W's last bit */
    int etop = 127 - acc_clz128(w) + base;     /* value in [2^etop, 2^(etop+1)) */
    int q = etop - (p - 1) > qmin ? etop - (p - 1) : qmin;
    int s = q - base;                          /* bits of W below the quantum: >= 12 */
    uint64_t keep;
    int up;
    if (s >= 129) {
        keep = 0;
        up = 0; /* value < 2^(base+128) <= half a quantum */
    } else if (s == 128) {
        unsigned __int128 half = (unsigned __int128)1 << 127;
        keep = 0;
        up = w > half || (w == half && sticky);
    } else {
        unsigned __int128 one = 1;
        keep = (uint64_t)(w >> s);
        unsigned __int128 rem = w & ((one << s) - 1), half = one << (s - 1);
        up = rem > half || (rem == half && (sticky || (keep & 1)));
    }
    keep += (uint64_t)up; /* <= 2^p: exact in a double */
    double r = ldexp((double)keep, q);
    if (r >= ldexp(1.0, ovf_exp))
        return INFINITY;
    return r;
}

float oracle_acc_round_f32(struct oracle_acc *a)
{
    struct acc_value v;
    double r;
    acc_value(a, &v);
    if (acc_trivial(a, &v, &r))
        return (float)r;
    r = acc_round_mag(&v, 24, -149, 128);
    return (float)(v.neg ? -r : r); /* exact: r is a float32 or infinite */
}

double oracle_acc_round_f64(struct oracle_acc *a)
{
    struct acc_value v;
    double r;
    acc_value(a, &v);
    if (acc_trivial(a, &v, &r))
        return r;
    r = acc_round_mag(&v, 53, -1074, 1024);
    return v.neg ? -r : r;
}

void oracle_acc_get_mpfr(struct oracle_acc *a, mpfr_t out)
{
    struct acc_value v;
    double r;
    acc_value(a, &v);
    if (acc_trivial(a, &v, &r)) {
        mpfr_set_d(out, r, MPFR_RNDN); /* NaN, +-Inf or a signed zero: exact */
        return;
    }
    mpz_t z;
    mpz_init(z);
    for (int i = v.top; i >= 0; i--) {
        uint64_t c = (uint64_t)v.mag[i];
        mpz_mul_2exp(z, z, 32);
        /* the top chunk may exceed 32 bits: add it in two halves */
        mpz_t t;
        mpz_init_set_ui(t, (unsigned long)(c >> 32));
        mpz_mul_2exp(t, t, 32);
        mpz_add_ui(t, t, (unsigned long)(c & 0xffffffffu));
        mpz_add(z, z, t);
        mpz_clear(t);
    }
    mpfr_prec_t need = (mpfr_prec_t)mpz_sizeinbase(z, 2);
    if (need < MPFR_PREC_MIN)
        need = MPFR_PREC_MIN;
    if (mpfr_get_prec(out) < need)
        mpfr_set_prec(out, need);
    int t = mpfr_set_z_2exp(out, z, -1075, MPFR_RNDN);
    DT_ASSERT(t == 0, "oracle_acc_get_mpfr: inexact conversion");
    if (v.neg)
        mpfr_neg(out, out, MPFR_RNDN);
    mpz_clear(z);
}

/* ---- dot products and sums ------------------------------------------------ */

/* Add a finite double: lane 0, with the bookkeeping of oracle_acc_add. */
static void acc_add_finite(struct oracle_acc *a, double x)
{
    uint64_t b = acc_bits(x);
    a->notnegz |= b ^ ACC_SIGN;
    acc_add_bits(a, b);
}

/* ---- exact dot products: error-free extraction in front of the chunks -----
 * Adding every product to the chunks costs ~5 ns; instead a block of up to
 * ACC_BLOCK products p_i (exact doubles) is split without error into three
 * sums of doubles, each exact, and only those three enter the chunks.
 *
 * Extraction (proof): let sigma = 2^k and |v| <= sigma / 2. Then
 * sigma + v lies in [sigma/2, 3 sigma/2], where doubles are spaced by u sigma
 * or 2 u sigma (u = 2^-53), so s = fl(sigma + v) is a multiple of u sigma and
 * q = fl(s - sigma) = s - sigma exactly (Sterbenz). r = v - q = (sigma + v) - s
 * is the rounding error of an addition, hence a double, so fl(v - q) = r
 * exactly, |r| <= u sigma, and v = q + r with q a multiple of u sigma.
 * Summing the q of a block: with max |v| <= sigma 2^-10 and at most 512
 * terms, sum |q_i| <= 512 (sigma 2^-10 + u sigma) < sigma, so every partial
 * sum, in any order, is a multiple of u sigma below sigma in magnitude:
 * representable, so the double sum is exact.
 * Levels: sigma_1 = 2^(e + 10) with max |p_i| < 2^e; the residuals of level l
 * are <= u sigma_l = 2^-10 sigma_{l+1} for sigma_{l+1} = 2^-43 sigma_l. The
 * quanta u sigma_l are multiples of 2^(e - 129), so after three levels every
 * product with |p| >= 2^(e - 81) (48 significant bits: all of them multiples
 * of 2^(e - 128)) has been captured whole; the few residuals left, of
 * products far below the largest, are added one by one. */
#define ACC_BLOCK 512
#define ACC_LEVELS 3

typedef double acc_v2d __attribute__((vector_size(16)));
typedef long long acc_v2i __attribute__((vector_size(16)));

/* Exact sum of the finite or special doubles p[0 .. n-1] into a. */
static void acc_add_slow(struct oracle_acc *a, const double *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        oracle_acc_add(a, p[i]);
}

/* Bookkeeping and chunk additions after a block with some nonzero product:
 * t[] the exact level sums. 0 (nothing done) when one of them is not finite:
 * a NaN product, which the bound pmax cannot see. */
static int acc_block_done(struct oracle_acc *a, size_t n, const double *t)
{
    for (int l = 0; l < ACC_LEVELS; l++)
        if (!isfinite(t[l]))
            return 0;
    a->nterms += n;
    a->notnegz |= 1; /* some term is not -0 */
    for (int l = 0; l < ACC_LEVELS; l++)
        if (t[l] != 0)
            acc_add_finite(a, t[l]);
    return 1;
}

/* The level constants sigma_l for products bounded by pmax (0 < pmax < 2^1000). */
static void acc_sigmas(double pmax, double *sg)
{
    int e;
    frexp(pmax, &e); /* pmax < 2^e */
    sg[0] = ldexp(1.0, e + 10);
    for (int l = 1; l < ACC_LEVELS; l++)
        sg[l] = sg[l - 1] * 0x1p-43;
}

/* The residual of p after the levels: what acc_block_done did not add. */
static double acc_residual(double v, const double *sg)
{
    for (int l = 0; l < ACC_LEVELS; l++)
        v -= (sg[l] + v) - sg[l];
    return v;
}

/* One extraction level on two vectors (see above): q = (sigma + v) - sigma
 * is added to the level's sums, v keeps the residual. */
#define ACC_LEVEL(sig, ta, tb)                        \
    do {                                              \
        acc_v2d qa_ = ((sig) + va) - (sig);           \
        acc_v2d qb_ = ((sig) + vb) - (sig);           \
        va -= qa_;                                    \
        vb -= qb_;                                    \
        ta += qa_;                                    \
        tb += qb_;                                    \
    } while (0)

/* Exact sum of x[i] * y[i], i < n <= ACC_BLOCK, every |x[i] y[i]| <= pmax
 * (0 < pmax < 2^1000), contiguous: products formed and split in registers.
 * 0 (nothing added) when a product is NaN. */
static int acc_block_contig(struct oracle_acc *a, const float *x, const float *y, size_t n,
                            double pmax)
{
    double sg[ACC_LEVELS], t[ACC_LEVELS] = {0, 0, 0};
    acc_sigmas(pmax, sg);
    const acc_v2d s1 = {sg[0], sg[0]}, s2 = {sg[1], sg[1]}, s3 = {sg[2], sg[2]};
    acc_v2d t1a = {0, 0}, t1b = t1a, t2a = t1a, t2b = t1a, t3a = t1a, t3b = t1a;
    acc_v2i nz = {0, 0}; /* OR of the residuals' bits (-0 is a false alarm, harmless) */
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
#if defined(__SSE2__)
        __m128 x4 = _mm_loadu_ps(x + i), y4 = _mm_loadu_ps(y + i);
        acc_v2d va = (acc_v2d)_mm_mul_pd(_mm_cvtps_pd(x4), _mm_cvtps_pd(y4));
        acc_v2d vb = (acc_v2d)_mm_mul_pd(_mm_cvtps_pd(_mm_movehl_ps(x4, x4)),
                                         _mm_cvtps_pd(_mm_movehl_ps(y4, y4)));
#else
        acc_v2d va = {(double)x[i] * y[i], (double)x[i + 1] * y[i + 1]};
        acc_v2d vb = {(double)x[i + 2] * y[i + 2], (double)x[i + 3] * y[i + 3]};
#endif
        ACC_LEVEL(s1, t1a, t1b);
        ACC_LEVEL(s2, t2a, t2b);
        ACC_LEVEL(s3, t3a, t3b);
        nz |= (acc_v2i)va | (acc_v2i)vb;
    }
    int rest = (nz[0] | nz[1]) != 0;
    for (; i < n; i++) {
        double v = (double)x[i] * y[i];
        for (int l = 0; l < ACC_LEVELS; l++) {
            double q = (sg[l] + v) - sg[l];
            v -= q;
            t[l] += q;
        }
        rest |= v != 0;
    }
    acc_v2d u1 = t1a + t1b, u2 = t2a + t2b, u3 = t3a + t3b; /* exact: sums of some q */
    t[0] += u1[0] + u1[1];
    t[1] += u2[0] + u2[1];
    t[2] += u3[0] + u3[1];
    if (!acc_block_done(a, n, t))
        return 0;
    if (rest)
        for (i = 0; i < n; i++) {
            double v = acc_residual((double)x[i] * y[i], sg);
            if (v != 0)
                acc_add_finite(a, v);
        }
    return 1;
}

/* The same for doubles already formed (strided operands, sums). */
static int acc_block_doubles(struct oracle_acc *a, const double *p, size_t n, double pmax)
{
    double sg[ACC_LEVELS], t[ACC_LEVELS] = {0, 0, 0};
    acc_sigmas(pmax, sg);
    int rest = 0;
    for (size_t i = 0; i < n; i++) {
        double v = p[i];
        for (int l = 0; l < ACC_LEVELS; l++) {
            double q = (sg[l] + v) - sg[l];
            v -= q;
            t[l] += q;
        }
        rest |= v != 0;
    }
    if (!acc_block_done(a, n, t))
        return 0;
    if (rest)
        for (size_t i = 0; i < n; i++) {
            double v = acc_residual(p[i], sg);
            if (v != 0)
                acc_add_finite(a, v);
        }
    return 1;
}

/* max |x[i*inc]| over the non-NaN x (a NaN term is caught later by the
 * level sums, which it makes NaN). */
static float acc_absmax(const float *x, size_t inc, size_t n)
{
    float m = 0;
    size_t i = 0;
#if defined(__SSE2__)
    if (inc == 1 && n >= 16) {
        const __m128 abs = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
        __m128 m0 = _mm_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
        for (; i + 16 <= n; i += 16) { /* maxps returns its second operand on NaN */
            m0 = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(x + i), abs), m0);
            m1 = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(x + i + 4), abs), m1);
            m2 = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(x + i + 8), abs), m2);
            m3 = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(x + i + 12), abs), m3);
        }
        float t[4];
        _mm_storeu_ps(t, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
        for (int k = 0; k < 4; k++)
            m = t[k] > m ? t[k] : m;
    }
#endif
    for (; i < n; i++) {
        float v = fabsf(x[i * inc]);
        m = v > m ? v : m;
    }
    return m;
}

/* Exact sum of x[i*incx] * y[i*incy] (y NULL: of x[i*incx]) into a. */
static void acc_add_dot(struct oracle_acc *a, const float *x, size_t incx, const float *y,
                        size_t incy, size_t n)
{
    double buf[ACC_BLOCK];
    for (size_t i0 = 0; i0 < n; i0 += ACC_BLOCK) {
        size_t nb = n - i0 < ACC_BLOCK ? n - i0 : ACC_BLOCK;
        const float *xb = x + i0 * incx, *yb = y ? y + i0 * incy : NULL;
        /* max |x| max |y| bounds every product; a loose bound only costs
         * residuals. An infinite term makes pmax infinite and goes the slow
         * way; a NaN one is seen by acc_block_done. */
        double pmax = acc_absmax(xb, incx, nb);
        if (yb)
            pmax *= acc_absmax(yb, incy, nb);
        int finite = pmax < 0x1p1000;
        if (finite && pmax > 0 && yb && incx == 1 && incy == 1 &&
            acc_block_contig(a, xb, yb, nb, pmax))
            continue;
        for (size_t i = 0; i < nb; i++)
            buf[i] = yb ? (double)xb[i * incx] * yb[i * incy] : (double)xb[i * incx];
        if (!(finite && pmax > 0 && acc_block_doubles(a, buf, nb, pmax)))
            acc_add_slow(a, buf, nb); /* zeros (signs matter), NaN or Inf */
    }
}

/* RN32 of every real in [a - err, a + err] when they all round alike: 1 and
 * *out set, else 0. Preconditions: a and err finite, err at least twice the
 * true bound on |a - exact|. Then, with err raised to >= 2^-51 |a|, the
 * endpoints computed in round-to-nearest still enclose [a - E, a + E] for the
 * true bound E <= err / 2 (their rounding errors are <= 2^-53 (|a| + err)
 * <= err / 2), and RN32 is monotonic, so equal roundings of the endpoints
 * (bitwise: -0 and +0 differ) are the rounding of the exact value. */
int oracle_cert32(double a, double err, float *out)
{
    double m = fabs(a) * 0x1p-51;
    if (err < m)
        err = m;
    float lo = (float)(a - err), hi = (float)(a + err);
    uint32_t bl, bh;
    memcpy(&bl, &lo, sizeof bl);
    memcpy(&bh, &hi, sizeof bh);
    if (bl != bh)
        return 0;
    *out = lo;
    return 1;
}

/* The fast path of oracle_dot: the products are exact in double; summed in
 * four interleaved partial sums (any summation order of n terms errs by at
 * most gamma_{n-1} sum |p_i|, u = 2^-53, with gradual underflow adding
 * nothing to additions), with A = the computed sum |p_i| >= (1 - gamma) of
 * the true one. err = A (n + 2) 2^-51 is then more than twice the bound for
 * n < 2^40, which oracle_cert32 needs. Partial sums start at -0 so that a sum
 * of -0 products stays -0 (then A = 0, the double sum is exact, sign too).
 * Returns 0 when undecided or a term is not finite. */
static int acc_dot_fast(const float *x, size_t incx, const float *y, size_t incy, size_t n,
                        float *out)
{
    double s0 = -0.0, s1 = -0.0, s2 = -0.0, s3 = -0.0, a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    size_t i = 0;
    if (y && incx == 1 && incy == 1) {
        for (; i + 4 <= n; i += 4) { /* the matrix product's case: contiguous */
            double p0 = (double)x[i] * y[i], p1 = (double)x[i + 1] * y[i + 1];
            double p2 = (double)x[i + 2] * y[i + 2], p3 = (double)x[i + 3] * y[i + 3];
            s0 += p0; s1 += p1; s2 += p2; s3 += p3;
            a0 += fabs(p0); a1 += fabs(p1); a2 += fabs(p2); a3 += fabs(p3);
        }
    } else if (!y) {
        for (; i + 4 <= n; i += 4) {
            double p0 = x[i * incx], p1 = x[(i + 1) * incx];
            double p2 = x[(i + 2) * incx], p3 = x[(i + 3) * incx];
            s0 += p0; s1 += p1; s2 += p2; s3 += p3;
            a0 += fabs(p0); a1 += fabs(p1); a2 += fabs(p2); a3 += fabs(p3);
        }
    }
    for (; i < n; i++) {
        double p = y ? (double)x[i * incx] * y[i * incy] : (double)x[i * incx];
        s0 += p;
        a0 += fabs(p);
    }
    double s = (s0 + s1) + (s2 + s3), a = (a0 + a1) + (a2 + a3);
    if (!(a < 0x1p1000) || n >= ((size_t)1 << 40))
        return 0;
    if (a == 0) {
        *out = (float)s; /* every product is a zero: s is exact with IEEE's sign */
        return 1;
    }
    return oracle_cert32(s, a * ((double)(n + 2) * 0x1p-51), out);
}

/* Longer vectors go straight to the exact path: the fast path's bound grows
 * like n^1.5 on random data and would seldom certify. */
#define ACC_FAST_MAX 8192

/* Set by DIVTRACE_ORACLE_EXACT=1: skip every certified fast path (for
 * testing that both paths agree, and for suspicious replays). */
static int acc_exact_only(void)
{
    const char *e = getenv("DIVTRACE_ORACLE_EXACT");
    return e && *e && strcmp(e, "0") != 0;
}

/* A per-thread accumulator for oracle_dot and oracle_sum: clearing it costs
 * only the chunks the previous call used. */
static _Thread_local struct oracle_acc acc_tls;
static _Thread_local int acc_tls_ready;

static float acc_dot_exact(const float *x, size_t incx, const float *y, size_t incy, size_t n)
{
    struct oracle_acc *a = &acc_tls;
    if (!acc_tls_ready) {
        a->lo = 0;
        a->hi = ACC_NCHUNK - 1;
        acc_tls_ready = 1;
    }
    oracle_acc_clear(a);
    acc_add_dot(a, x, incx, y, incy, n);
    return oracle_acc_round_f32(a);
}

float oracle_dot(const float *x, size_t incx, const float *y, size_t incy, size_t n)
{
    float r;
    if (n == 0)
        return 0.0f;
    if (n <= ACC_FAST_MAX && !acc_exact_only() && acc_dot_fast(x, incx, y, incy, n, &r))
        return r;
    return acc_dot_exact(x, incx, y, incy, n);
}

float oracle_sum(const float *x, size_t inc, size_t n)
{
    float r;
    if (n == 0)
        return 0.0f;
    if (n <= ACC_FAST_MAX && !acc_exact_only() && acc_dot_fast(x, inc, NULL, 0, n, &r))
        return r;
    return acc_dot_exact(x, inc, NULL, 0, n);
}
