/* backend_mpfr.c: the mpfr backend, the high-precision reference trainer.
 * Every element is an MPFR number of P bits (default 128). Every op but
 * ADAM_P gives its exact value rounded once to P bits (to nearest, ties to
 * even): rational ops through exact products and exact sums, sigmoid through
 * a Ziv loop, tanh through mpfr_tanh; ADAM_P rounds each elementary operation
 * of op.h's formula to P bits. Selections and masks (maxpool2, satlu,
 * hard_sigmoid's clip) are decided on the exact values; op.h's float32
 * constant 0.2f is the exact binary number it denotes. An exactly zero
 * result has the sign op.h's formula gives in IEEE arithmetic, sums
 * accumulated from +0 as on the cpu backend. Downloads and traces round to
 * float32 (mpb_round_f32).
 * The matrix product and the convolutions (exact dot products) are in
 * mpfr_dot.c; what the two files share, in mpfr_impl.h.
 * Dimension letters: R rows, F features; N, C, H, W of an image (op.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <gmp.h>
#include <mpfr.h>

#include "backend.h"
#include "mpfr_impl.h"
#include "stats.h"
#include "util.h"


#define MPB_PREC_DEFAULT 128
#define MPB_PREC_MIN 24
#define MPB_PREC_MAX 100000
/* 1 - b for a float b is exact in this many bits (b spans 2^-149 .. 2^128). */
#define MPB_PREC_PARAM 320
/* Guard bits of the first Ziv iteration. */
#define MPB_GUARD 32

/* ---- storage ---------------------------------------------------------------
 * struct mpb_vec itself is declared in mpfr_impl.h. */
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
    free(c->psrc);
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
void mpb_terms_reserve(struct mpb_ctx *c, size_t count)
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

/* ---- elementwise ops -------------------------------------------------------- */

#define MPB_OP(fn)                                                                              \
    static void fn(void *ctx, const struct graph *g, const struct node *nd, backend_buf *outb,   \
                   const backend_buf *const *in, const struct backend_step *st)

/* x (R,F) + b (F), or x (N,C,H,W) + b (C): rows R or N of F or C channels
 * of `inner` elements each (1 or H W). */
MPB_OP(mpb_add_bias)
{
    (void)ctx, (void)g, (void)st;
    struct mpb_vec *out = outb;
    size_t rows = nd->shape[0], f = nd->shape[1], inner = nd->count / (rows * f);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < f; j++)
            for (size_t q = 0; q < inner; q++) {
                size_t i = (r * f + j) * inner + q;
                mpfr_add(X(out, i), X(IN(0), i), X(IN(1), j), MPFR_RNDN);
            }
}

/* out (F) = the sum over rows of dy (R,F), or out (C) = the sum over n, h, w
 * of dy (N,C,H,W): exact, rounded once; +0 if zero */
MPB_OP(mpb_bias_grad)
{
    (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    size_t rows = IN_SHAPE(0, 0), f = nd->shape[0], inner = IN_COUNT(0) / (rows * f);
    size_t nt = rows * inner;
    mpb_terms_reserve(c, nt + 1);
    for (size_t j = 0; j < f; j++) {
        for (size_t r = 0; r < rows; r++)
            for (size_t q = 0; q < inner; q++)
                c->ptrs[r * inner + q] = (mpfr_ptr)X(IN(0), (r * f + j) * inner + q);
        c->ptrs[nt] = c->zero;
        mpfr_sum(X(out, j), c->ptrs, nt + 1, MPFR_RNDN);
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

/* ---- arithmetic and PredNet's activations ----------------------------------- */

MPB_OP(mpb_sub)
{
    (void)ctx, (void)g, (void)st;
    struct mpb_vec *out = outb;
    for (size_t i = 0; i < nd->count; i++)
        mpfr_sub(X(out, i), X(IN(0), i), X(IN(1), i), MPFR_RNDN);
}

/* exact; flips the sign of zeros and NaN too */
MPB_OP(mpb_neg)
{
    (void)ctx, (void)g, (void)st;
    struct mpb_vec *out = outb;
    for (size_t i = 0; i < nd->count; i++)
        mpfr_neg(X(out, i), X(IN(0), i), MPFR_RNDN);
}

MPB_OP(mpb_mul)
{
    (void)ctx, (void)g, (void)st;
    struct mpb_vec *out = outb;
    for (size_t i = 0; i < nd->count; i++)
        mpfr_mul(X(out, i), X(IN(0), i), X(IN(1), i), MPFR_RNDN);
}

/* scale * (sum of x) / count: the terms scale x[i], exact in `wide`, summed
 * and divided in one rounding (mpb_sum_div). An exactly zero sum is +0
 * (summed from +0), so the result takes scale's sign. With an Inf or NaN
 * in x, or a scale of 0, Inf or NaN, op.h's steps in order give IEEE's
 * result (their roundings cannot change a zero, an Inf or a NaN). */
MPB_OP(mpb_mean)
{
    (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    size_t n = IN_COUNT(0);
    mpfr_set_flt(c->par1, nd->p.mean.scale, MPFR_RNDN);
    int finite = mpfr_regular_p(c->par1);
    for (size_t i = 0; i < n && finite; i++)
        finite = mpfr_number_p(X(IN(0), i));
    mpb_terms_reserve(c, n + 1);
    for (size_t i = 0; i < n; i++) {
        if (finite) {
            mpfr_mul(X(c->terms, i), c->par1, X(IN(0), i), MPFR_RNDN);
            c->ptrs[i] = X(c->terms, i);
        } else {
            c->ptrs[i] = (mpfr_ptr)X(IN(0), i);
        }
    }
    c->ptrs[n] = c->zero;
    if (finite) {
        mpb_sum_div(c, X(out, 0), c->ptrs, n + 1, n);
        if (mpfr_zero_p(X(out, 0)))
            mpfr_setsign(X(out, 0), X(out, 0), mpfr_signbit(c->par1), MPFR_RNDN);
        return;
    }
    mpfr_sum(c->t1, c->ptrs, n + 1, MPFR_RNDN);
    mpfr_div_ui(c->t1, c->t1, (unsigned long)n, MPFR_RNDN);
    mpfr_mul(X(out, 0), c->par1, c->t1, MPFR_RNDN);
}

/* scale g / count everywhere: scale g exact in `wide`, the division the one
 * rounding (IEEE's zeros, Infs and NaN come out of the same two steps). */
MPB_OP(mpb_mean_bwd)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    mpfr_set_flt(c->par1, nd->p.mean.scale, MPFR_RNDN);
    mpfr_mul(c->wide, c->par1, X(IN(0), 0), MPFR_RNDN);
    mpfr_div_ui(c->t1, c->wide, (unsigned long)nd->count, MPFR_RNDN);
    for (size_t i = 0; i < nd->count; i++)
        mpfr_set(X(out, i), c->t1, MPFR_RNDN);
}

/* The exact t = c x + 1/2, c = 0.2f as an exact binary number, clipped to
 * [0, 1] and rounded once: c x is exact in `wide`, t < 0 and t > 1 are
 * decided on it exactly (clipping and rounding commute, 0 and 1 being P-bit
 * numbers), and a t in between is rounded by one addition. NaN stays NaN;
 * t < 0 gives +0. */
MPB_OP(mpb_hard_sigmoid)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    mpfr_set_flt(c->par1, 0.2f, MPFR_RNDN);
    mpfr_set_ui_2exp(c->par2, 1, -1, MPFR_RNDN);
    for (size_t i = 0; i < nd->count; i++) {
        mpfr_srcptr x = X(IN(0), i);
        mpfr_ptr o = X(out, i);
        if (mpfr_nan_p(x)) {
            mpfr_set(o, x, MPFR_RNDN);
            continue;
        }
        mpfr_mul(c->wide, c->par1, x, MPFR_RNDN);
        if (mpfr_cmp_si_2exp(c->wide, -1, -1) < 0)
            mpfr_set_zero(o, 1);
        else if (mpfr_cmp_ui_2exp(c->wide, 1, -1) > 0)
            mpfr_set_ui(o, 1, MPFR_RNDN);
        else
            mpfr_add(o, c->wide, c->par2, MPFR_RNDN);
    }
}

/* 0 <= t <= 1 ? c dy : +0 (c dy rounded once), decided on the exact
 * t = c x + 1/2, i.e. -1/2 <= c x <= 1/2 with c x exact in `wide`. op.h
 * states the mask on the cpu's float32 t; the mpfr backend is the
 * mathematical reference and takes the exact t. The two differ where
 * float32 rounds t onto a bound: x = 2.5 (exact t = 1 + 7.5e-9) and
 * x = -2.5 (t = -7.5e-9) pass the gradient on cpu, not here. No binary x
 * puts the exact t on a bound (x = +-2^25 / 13421773), so < and <= agree. */
MPB_OP(mpb_hard_sigmoid_bwd)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    mpfr_set_flt(c->par1, 0.2f, MPFR_RNDN);
    for (size_t i = 0; i < nd->count; i++) {
        mpfr_ptr o = X(out, i);
        mpfr_mul(c->wide, c->par1, X(IN(0), i), MPFR_RNDN);
        if (!mpfr_nan_p(c->wide) && mpfr_cmp_si_2exp(c->wide, -1, -1) >= 0 &&
            mpfr_cmp_ui_2exp(c->wide, 1, -1) <= 0)
            mpfr_mul(o, c->par1, X(IN(1), i), MPFR_RNDN);
        else
            mpfr_set_zero(o, 1);
    }
}

/* x > m ? m : x (NaN x stays NaN) */
MPB_OP(mpb_satlu)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    mpfr_set_flt(c->par1, nd->p.satlu.max, MPFR_RNDN);
    for (size_t i = 0; i < nd->count; i++) {
        mpfr_srcptr x = X(IN(0), i);
        mpfr_set(X(out, i), mpfr_greater_p(x, c->par1) ? c->par1 : x, MPFR_RNDN);
    }
}

/* x <= m ? dy : +0 (NaN x gives +0) */
MPB_OP(mpb_satlu_bwd)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    mpfr_set_flt(c->par1, nd->p.satlu.max, MPFR_RNDN);
    for (size_t i = 0; i < nd->count; i++) {
        if (mpfr_lessequal_p(X(IN(0), i), c->par1))
            mpfr_set(X(out, i), X(IN(1), i), MPFR_RNDN);
        else
            mpfr_set_zero(X(out, i), 1);
    }
}

/* ---- image layout ops ---------------------------------------------------------
 * Copies are exact (mpfr_set copies a zero's and a NaN's sign too). */

/* j*, op.h's pick in the 2x2 window of x whose top-left element is i, in
 * rows of w: the first NaN, else the first maximum (-0 and +0 compare
 * equal, so the first of them wins). */
static size_t mpb_pool_pick(const struct mpb_vec *x, size_t i, size_t w)
{
    const size_t at[4] = {i, i + 1, i + w, i + w + 1};
    size_t best = at[0];
    for (int q = 0; q < 4; q++)
        if (mpfr_nan_p(X(x, at[q])))
            return at[q];
    for (int q = 1; q < 4; q++)
        if (mpfr_greater_p(X(x, at[q]), X(x, best)))
            best = at[q];
    return best;
}

/* out (N,C,H/2,W/2) from x (N,C,H,W) */
MPB_OP(mpb_maxpool2)
{
    (void)ctx, (void)st;
    struct mpb_vec *out = outb;
    size_t planes = nd->shape[0] * nd->shape[1], h = IN_SHAPE(0, 2), w = IN_SHAPE(0, 3);
    for (size_t p = 0, o = 0; p < planes; p++)
        for (size_t y = 0; y < h; y += 2)
            for (size_t z = 0; z < w; z += 2, o++)
                mpfr_set(X(out, o), X(IN(0), mpb_pool_pick(IN(0), (p * h + y) * w + z, w)),
                         MPFR_RNDN);
}

/* out (N,C,H,W) from x (N,C,H,W), dy (N,C,H/2,W/2) */
MPB_OP(mpb_maxpool2_bwd)
{
    (void)ctx, (void)st;
    struct mpb_vec *out = outb;
    size_t planes = nd->shape[0] * nd->shape[1], h = nd->shape[2], w = nd->shape[3];
    for (size_t i = 0; i < nd->count; i++)
        mpfr_set_zero(X(out, i), 1);
    for (size_t p = 0, o = 0; p < planes; p++)
        for (size_t y = 0; y < h; y += 2)
            for (size_t z = 0; z < w; z += 2, o++)
                mpfr_set(X(out, mpb_pool_pick(IN(0), (p * h + y) * w + z, w)), X(IN(1), o),
                         MPFR_RNDN);
}

/* out (N,C,2H,2W) from x (N,C,H,W) */
MPB_OP(mpb_upsample2)
{
    (void)ctx, (void)st;
    struct mpb_vec *out = outb;
    size_t planes = nd->shape[0] * nd->shape[1], h = IN_SHAPE(0, 2), w = IN_SHAPE(0, 3);
    for (size_t p = 0, o = 0; p < planes; p++)
        for (size_t y = 0; y < 2 * h; y++)
            for (size_t z = 0; z < 2 * w; z++, o++)
                mpfr_set(X(out, o), X(IN(0), (p * h + y / 2) * w + z / 2), MPFR_RNDN);
}

/* out (N,C,H,W) from dy (N,C,2H,2W): the exact sum of each 2x2 window
 * rounded once; mpfr_sum gives a zero sum IEEE's sign of ((a + b) + c) + d
 * (-0 only when all four are -0). */
MPB_OP(mpb_upsample2_bwd)
{
    (void)g, (void)st;
    struct mpb_ctx *c = ctx;
    struct mpb_vec *out = outb;
    size_t planes = nd->shape[0] * nd->shape[1], h = nd->shape[2], w = nd->shape[3];
    mpb_terms_reserve(c, 4);
    for (size_t p = 0, o = 0; p < planes; p++)
        for (size_t y = 0; y < h; y++)
            for (size_t z = 0; z < w; z++, o++) {
                size_t i = (p * 2 * h + 2 * y) * 2 * w + 2 * z;
                c->ptrs[0] = (mpfr_ptr)X(IN(0), i);
                c->ptrs[1] = (mpfr_ptr)X(IN(0), i + 1);
                c->ptrs[2] = (mpfr_ptr)X(IN(0), i + 2 * w);
                c->ptrs[3] = (mpfr_ptr)X(IN(0), i + 2 * w + 1);
                mpfr_sum(X(out, o), c->ptrs, 4, MPFR_RNDN);
            }
}

/* out (N, C0+C1+..., H, W) from the inputs (N,Ck,H,W) */
MPB_OP(mpb_concat)
{
    (void)ctx, (void)st;
    struct mpb_vec *out = outb;
    size_t nb = nd->shape[0], hw = nd->shape[2] * nd->shape[3], o = 0;
    for (size_t n = 0; n < nb; n++)
        for (int k = 0; k < nd->ninputs; k++) {
            size_t len = IN_SHAPE(k, 1) * hw;
            for (size_t q = 0; q < len; q++)
                mpfr_set(X(out, o++), X(IN(k), n * len + q), MPFR_RNDN);
        }
}

/* out (N,n,H,W) = channels c0 .. c0+n-1 of x (N,total,H,W) */
MPB_OP(mpb_slice)
{
    (void)ctx, (void)st;
    struct mpb_vec *out = outb;
    size_t nb = nd->shape[0], len = nd->p.slice.n * nd->shape[2] * nd->shape[3];
    size_t hw = nd->shape[2] * nd->shape[3], total = IN_SHAPE(0, 1);
    for (size_t n = 0; n < nb; n++)
        for (size_t q = 0; q < len; q++)
            mpfr_set(X(out, n * len + q), X(IN(0), (n * total + nd->p.slice.c0) * hw + q),
                     MPFR_RNDN);
}

/* out (N,total,H,W) = dy (N,n,H,W) in channels c0 .. c0+n-1, +0 elsewhere */
MPB_OP(mpb_slice_bwd)
{
    (void)ctx, (void)g, (void)st;
    struct mpb_vec *out = outb;
    size_t nb = nd->shape[0], total = nd->shape[1], hw = nd->shape[2] * nd->shape[3];
    size_t c0 = nd->p.slice.c0, nc = nd->p.slice.n;
    for (size_t n = 0; n < nb; n++)
        for (size_t ch = 0; ch < total; ch++)
            for (size_t q = 0; q < hw; q++) {
                mpfr_ptr o = X(out, (n * total + ch) * hw + q);
                if (ch >= c0 && ch < c0 + nc)
                    mpfr_set(o, X(IN(0), (n * nc + ch - c0) * hw + q), MPFR_RNDN);
                else
                    mpfr_set_zero(o, 1);
            }
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
        [OP_CONV2D] = mpb_conv2d,
        [OP_CONV2D_BWD_DATA] = mpb_conv2d_bwd_data,
        [OP_CONV2D_BWD_FILTER] = mpb_conv2d_bwd_filter,
        [OP_MAXPOOL2] = mpb_maxpool2,
        [OP_MAXPOOL2_BWD] = mpb_maxpool2_bwd,
        [OP_UPSAMPLE2] = mpb_upsample2,
        [OP_UPSAMPLE2_BWD] = mpb_upsample2_bwd,
        [OP_CONCAT] = mpb_concat,
        [OP_SLICE] = mpb_slice,
        [OP_SLICE_BWD] = mpb_slice_bwd,
        [OP_HARD_SIGMOID] = mpb_hard_sigmoid,
        [OP_HARD_SIGMOID_BWD] = mpb_hard_sigmoid_bwd,
        [OP_SATLU] = mpb_satlu,
        [OP_SATLU_BWD] = mpb_satlu_bwd,
        [OP_SUB] = mpb_sub,
        [OP_NEG] = mpb_neg,
        [OP_MUL] = mpb_mul,
        [OP_MEAN] = mpb_mean,
        [OP_MEAN_BWD] = mpb_mean_bwd,
    },
};
