/* test_oracle_ops.c: oracle_op against MPFR evaluations of each op (exact, or
 * 600-bit approximations whose rounding is checked to be decided), and the
 * oracle_bound error bounds against the cpu kernels. TEST_ORACLE_VERBOSE=1
 * prints the observed error / bound ratios. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mpfr.h>

#include "backend.h"
#include "exec.h"
#include "graph.h"
#include "oracle.h"
#include "oracle_testutil.h"
#include "replay.h"
#include "util.h"

static int verbose;

/* ---- the reference evaluation of one element ------------------------------------------
 * r = the exact value of element i (err = LONG_MIN), or an approximation
 * with |r - exact| <= 2^err. Every rational step is checked exact. */

#define X(call) assert_int_equal((call), 0)

static long ref_err(mpfr_srcptr r, long slack)
{
    return mpfr_regular_p(r) ? (long)mpfr_get_exp(r) + slack - REF_APPROX : LONG_MIN;
}

/* ---- image ops: the terms of a sum, straight from op.h ------------------------------ */

/* Coordinates of element i of a tensor of rank 4. */
static void idx4(const uint32_t *shape, size_t i, size_t *a, size_t *b, size_t *c, size_t *d)
{
    *d = i % shape[3];
    i /= shape[3];
    *c = i % shape[2];
    i /= shape[2];
    *b = i % shape[1];
    *a = i / shape[1];
}

static size_t at4(const uint32_t *shape, size_t a, size_t b, size_t c, size_t d)
{
    return ((a * shape[1] + b) * shape[2] + c) * shape[3] + d;
}

/* The terms p[j] q[j] of element i of a sum op (convolutions, upsample2_bwd,
 * bias_grad of rank 4, mean; q[j] = 1 where the op sums plain values), in
 * op.h's order (conv2d_bwd_data: pair by pair, each pair's terms in the same
 * (k, r, s) order); p and q hold tg_termcap(t) floats. */
static size_t sum_terms(const struct tg *t, size_t i, float *p, float *q)
{
    const struct node *nd = tg_node(t);
    const uint32_t *s0 = t->g.nodes[t->leaf[0]].shape;
    const uint32_t *s1 = t->nleaf > 1 ? t->g.nodes[t->leaf[1]].shape : NULL;
    float *const *v = t->val;
    size_t m = 0, a, b, c, d;
    switch (nd->type) {
    case OP_CONV2D: { /* x (N,C,H,W), w (K,C,R,S) */
        idx4(nd->shape, i, &a, &b, &c, &d); /* n, k, h, w */
        long R = s1[2], S = s1[3];
        for (size_t ch = 0; ch < s0[1]; ch++)
            for (long r = 0; r < R; r++)
                for (long s = 0; s < S; s++) {
                    long hh = (long)c + r - R / 2, ww = (long)d + s - S / 2;
                    if (hh < 0 || ww < 0 || hh >= (long)s0[2] || ww >= (long)s0[3])
                        continue;
                    p[m] = v[0][at4(s0, a, ch, (size_t)hh, (size_t)ww)];
                    q[m++] = v[1][at4(s1, b, ch, (size_t)r, (size_t)s)];
                }
        return m;
    }
    case OP_CONV2D_BWD_DATA: { /* pairs dy_j (N,K,H,W), w_j (K,C,R,S) */
        idx4(nd->shape, i, &a, &b, &c, &d); /* n, c, h, w */
        long R = s1[2], S = s1[3];
        for (int j = 0; j < t->nleaf / 2; j++)
            for (size_t k = 0; k < s0[1]; k++)
                for (long r = 0; r < R; r++)
                    for (long s = 0; s < S; s++) {
                        long hh = (long)c - r + R / 2, ww = (long)d - s + S / 2;
                        if (hh < 0 || ww < 0 || hh >= (long)s0[2] || ww >= (long)s0[3])
                            continue;
                        p[m] = v[2 * j][at4(s0, a, k, (size_t)hh, (size_t)ww)];
                        q[m++] = v[2 * j + 1][at4(s1, k, b, (size_t)r, (size_t)s)];
                    }
        return m;
    }
    case OP_CONV2D_BWD_FILTER: { /* x (N,C,H,W), dy (N,K,H,W) */
        idx4(nd->shape, i, &a, &b, &c, &d); /* k, c, r, s */
        long R = nd->p.conv.r, S = nd->p.conv.s;
        for (size_t n = 0; n < s0[0]; n++)
            for (size_t h = 0; h < s0[2]; h++)
                for (size_t w = 0; w < s0[3]; w++) {
                    long hh = (long)h + (long)c - R / 2, ww = (long)w + (long)d - S / 2;
                    if (hh < 0 || ww < 0 || hh >= (long)s0[2] || ww >= (long)s0[3])
                        continue;
                    p[m] = v[1][at4(s1, n, a, h, w)];
                    q[m++] = v[0][at4(s0, n, b, (size_t)hh, (size_t)ww)];
                }
        return m;
    }
    case OP_UPSAMPLE2_BWD:
        idx4(nd->shape, i, &a, &b, &c, &d);
        for (size_t j = 0; j < 4; j++) {
            p[m] = v[0][at4(s0, a, b, 2 * c + j / 2, 2 * d + j % 2)];
            q[m++] = 1;
        }
        return m;
    case OP_BIAS_GRAD: /* dy (N,C,H,W) */
        for (size_t n = 0; n < s0[0]; n++)
            for (size_t h = 0; h < s0[2]; h++)
                for (size_t w = 0; w < s0[3]; w++) {
                    p[m] = v[0][at4(s0, n, i, h, w)];
                    q[m++] = 1;
                }
        return m;
    case OP_MEAN:
        for (size_t j = 0; j < tg_count(t, 0); j++) {
            p[m] = v[0][j];
            q[m++] = 1;
        }
        return m;
    default:
        fail_msg("sum_terms: op %s", op_type_name(nd->type));
    }
    return 0;
}

/* r = sum of p[j] q[j], exactly, step by step from the first term (+0 when empty). */
static void ref_sum(mpfr_t r, const float *p, const float *q, size_t m)
{
    mpfr_t a;
    mpfr_init2(a, REF_PREC);
    mpfr_set_zero(r, 1);
    for (size_t j = 0; j < m; j++) {
        mpfr_set_flt(a, p[j], MPFR_RNDN);
        X(mpfr_mul_d(a, a, q[j], MPFR_RNDN));
        if (j == 0)
            mpfr_set(r, a, MPFR_RNDN);
        else
            X(mpfr_add(r, r, a, MPFR_RNDN));
    }
    mpfr_clear(a);
}

/* Room for the terms of any element of t's op: all inputs' elements (a
 * conv2d_bwd_data element has up to m K R S terms, more than any one input
 * holds). */
static size_t tg_termcap(const struct tg *t)
{
    size_t m = 4;
    for (int k = 0; k < t->nleaf; k++)
        m += tg_count(t, k);
    return m;
}

/* The element of x that maxpool2's window at (n, c, h, w) of the output picks:
 * the first NaN, else the first equal to the maximum. */
static size_t ref_pool_pick(const uint32_t *xs, const float *x, size_t n, size_t c, size_t h,
                            size_t w)
{
    size_t at[4];
    for (int j = 0; j < 4; j++)
        at[j] = at4(xs, n, c, 2 * h + (size_t)j / 2, 2 * w + (size_t)j % 2);
    for (int j = 0; j < 4; j++)
        if (isnan(x[at[j]]))
            return at[j];
    float mx = x[at[0]];
    for (int j = 1; j < 4; j++)
        mx = x[at[j]] > mx ? x[at[j]] : mx;
    for (int j = 0;; j++)
        if (x[at[j]] == mx)
            return at[j];
}

/* hard_sigmoid's t as op.h defines it, two float32 roundings. */
static float ref_hs_t(float x)
{
    volatile float t1 = 0.2f * x;
    volatile float t = t1 + 0.5f;
    return t;
}

/* The reference of the image ops and the other new ops (see ref_elem). */
static int ref_elem_image(const struct tg *t, size_t i, mpfr_t r, long *err)
{
    const struct node *nd = tg_node(t);
    const uint32_t *s0 = t->g.nodes[t->leaf[0]].shape;
    float *const *v = t->val;
    size_t a, b, c, d;
    switch (nd->type) {
    case OP_CONV2D:
    case OP_CONV2D_BWD_DATA:
    case OP_CONV2D_BWD_FILTER:
    case OP_UPSAMPLE2_BWD:
    case OP_MEAN: {
        size_t cap = tg_termcap(t);
        float *p = malloc(cap * sizeof *p), *q = malloc(cap * sizeof *q);
        assert_true(p && q);
        size_t m = sum_terms(t, i, p, q);
        ref_sum(r, p, q, m);
        free(p);
        free(q);
        if (nd->type == OP_MEAN) {
            mpfr_t s;
            mpfr_init2(s, REF_PREC);
            X(mpfr_mul_d(s, r, nd->p.mean.scale, MPFR_RNDN));
            mpfr_set_prec(r, REF_APPROX);
            if (mpfr_div_ui(r, s, (unsigned long)m, MPFR_RNDN))
                *err = ref_err(r, 0);
            mpfr_clear(s);
        }
        return 1;
    }
    case OP_MAXPOOL2:
        idx4(nd->shape, i, &a, &b, &c, &d);
        mpfr_set_flt(r, v[0][ref_pool_pick(s0, v[0], a, b, c, d)], MPFR_RNDN);
        return 1;
    case OP_MAXPOOL2_BWD: { /* the windows do not overlap: element i is picked by its own */
        idx4(nd->shape, i, &a, &b, &c, &d);
        const uint32_t *s1 = t->g.nodes[t->leaf[1]].shape;
        size_t j = ref_pool_pick(s0, v[0], a, b, c / 2, d / 2);
        mpfr_set_flt(r, j == i ? v[1][at4(s1, a, b, c / 2, d / 2)] : 0.0f, MPFR_RNDN);
        return 1;
    }
    case OP_UPSAMPLE2:
        idx4(nd->shape, i, &a, &b, &c, &d);
        mpfr_set_flt(r, v[0][at4(s0, a, b, c / 2, d / 2)], MPFR_RNDN);
        return 1;
    case OP_CONCAT: {
        idx4(nd->shape, i, &a, &b, &c, &d);
        int k = 0;
        while (b >= t->g.nodes[t->leaf[k]].shape[1])
            b -= t->g.nodes[t->leaf[k++]].shape[1];
        mpfr_set_flt(r, v[k][at4(t->g.nodes[t->leaf[k]].shape, a, b, c, d)], MPFR_RNDN);
        return 1;
    }
    case OP_SLICE:
        idx4(nd->shape, i, &a, &b, &c, &d);
        mpfr_set_flt(r, v[0][at4(s0, a, b + nd->p.slice.c0, c, d)], MPFR_RNDN);
        return 1;
    case OP_SLICE_BWD: {
        idx4(nd->shape, i, &a, &b, &c, &d);
        size_t c0 = nd->p.slice.c0;
        int in = b >= c0 && b < c0 + nd->p.slice.n;
        mpfr_set_flt(r, in ? v[0][at4(s0, a, b - c0, c, d)] : 0.0f, MPFR_RNDN);
        return 1;
    }
    case OP_HARD_SIGMOID: /* clip(0.2f x + 0.5, 0, 1) exactly */
        mpfr_set_flt(r, 0.2f, MPFR_RNDN);
        X(mpfr_mul_d(r, r, v[0][i], MPFR_RNDN));
        X(mpfr_add_d(r, r, 0.5, MPFR_RNDN));
        if (mpfr_cmp_ui(r, 0) < 0)
            mpfr_set_zero(r, 1);
        else if (mpfr_cmp_ui(r, 1) > 0)
            mpfr_set_ui(r, 1, MPFR_RNDN);
        return 1;
    case OP_HARD_SIGMOID_BWD: {
        float tt = ref_hs_t(v[0][i]);
        if (tt >= 0 && tt <= 1) {
            mpfr_set_flt(r, 0.2f, MPFR_RNDN);
            X(mpfr_mul_d(r, r, v[1][i], MPFR_RNDN));
        } else {
            mpfr_set_zero(r, 1);
        }
        return 1;
    }
    case OP_SATLU:
        mpfr_set_flt(r, v[0][i] > nd->p.satlu.max ? nd->p.satlu.max : v[0][i], MPFR_RNDN);
        return 1;
    case OP_SATLU_BWD:
        mpfr_set_flt(r, v[0][i] <= nd->p.satlu.max ? v[1][i] : 0.0f, MPFR_RNDN);
        return 1;
    case OP_SUB:
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        X(mpfr_sub_d(r, r, v[1][i], MPFR_RNDN));
        return 1;
    case OP_NEG:
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        mpfr_neg(r, r, MPFR_RNDN);
        return 1;
    case OP_MUL:
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        X(mpfr_mul_d(r, r, v[1][i], MPFR_RNDN));
        return 1;
    case OP_MEAN_BWD: /* scale g / count */
        mpfr_set_flt(r, nd->p.mean.scale, MPFR_RNDN);
        X(mpfr_mul_d(r, r, v[0][0], MPFR_RNDN));
        mpfr_t s;
        mpfr_init2(s, REF_PREC);
        mpfr_set(s, r, MPFR_RNDN);
        mpfr_set_prec(r, REF_APPROX);
        if (mpfr_div_ui(r, s, (unsigned long)nd->count, MPFR_RNDN))
            *err = ref_err(r, 0);
        mpfr_clear(s);
        return 1;
    case OP_ADD_BIAS: /* rank 4: b (C) */
        if (nd->ndim != 4)
            return 0;
        idx4(nd->shape, i, &a, &b, &c, &d);
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        X(mpfr_add_d(r, r, v[1][b], MPFR_RNDN));
        return 1;
    case OP_BIAS_GRAD: { /* rank 4: dy (N,C,H,W) */
        if (t->g.nodes[t->leaf[0]].ndim != 4)
            return 0;
        size_t cap = tg_termcap(t);
        float *p = malloc(cap * sizeof *p), *q = malloc(cap * sizeof *q);
        assert_true(p && q);
        ref_sum(r, p, q, sum_terms(t, i, p, q));
        free(p);
        free(q);
        return 1;
    }
    default:
        return 0;
    }
}

static void ref_elem(const struct tg *t, size_t i, mpfr_t r, long *err)
{
    const struct node *nd = tg_node(t);
    float *const *v = t->val;
    mpfr_t a, b, c;
    mpfr_inits2(REF_PREC, a, b, c, (mpfr_ptr)0);
    mpfr_set_prec(r, REF_PREC);
    *err = LONG_MIN;
    if (ref_elem_image(t, i, r, err)) {
        mpfr_clears(a, b, c, (mpfr_ptr)0);
        return;
    }
    switch (nd->type) {
    case OP_MATMUL: {
        const struct node *na = &t->g.nodes[t->leaf[0]];
        int ta = nd->p.mm.ta, tb = nd->p.mm.tb;
        size_t m = nd->shape[0], n = nd->shape[1], k = ta ? na->shape[0] : na->shape[1];
        size_t row = i / n, col = i % n;
        mpfr_set_zero(r, 1);
        for (size_t l = 0; l < k; l++) {
            mpfr_set_flt(a, ta ? v[0][l * m + row] : v[0][row * k + l], MPFR_RNDN);
            X(mpfr_mul_d(a, a, tb ? v[1][col * k + l] : v[1][l * n + col], MPFR_RNDN));
            if (l == 0)
                mpfr_set(r, a, MPFR_RNDN);
            else
                X(mpfr_add(r, r, a, MPFR_RNDN));
        }
        break;
    }
    case OP_ADD_BIAS:
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        X(mpfr_add_d(r, r, v[1][i % nd->shape[1]], MPFR_RNDN));
        break;
    case OP_ADD:
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        X(mpfr_add_d(r, r, v[1][i], MPFR_RNDN));
        break;
    case OP_BIAS_GRAD: {
        size_t rows = t->g.nodes[t->leaf[0]].shape[0], f = nd->shape[0];
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        for (size_t k = 1; k < rows; k++)
            X(mpfr_add_d(r, r, v[0][k * f + i], MPFR_RNDN));
        break;
    }
    case OP_SIGMOID:
        mpfr_set_prec(r, REF_APPROX);
        mpfr_set_flt(r, -v[0][i], MPFR_RNDN);
        mpfr_exp(r, r, MPFR_RNDN);
        mpfr_add_ui(r, r, 1, MPFR_RNDN);
        mpfr_ui_div(r, 1, r, MPFR_RNDN);
        *err = ref_err(r, 3);
        break;
    case OP_TANH:
        mpfr_set_prec(r, REF_APPROX);
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        mpfr_tanh(r, r, MPFR_RNDN);
        *err = ref_err(r, 1);
        break;
    case OP_SIGMOID_BWD: /* dy y (1 - y) */
        mpfr_set_flt(r, v[1][i], MPFR_RNDN);
        X(mpfr_mul_d(r, r, v[0][i], MPFR_RNDN));
        mpfr_set_flt(a, v[0][i], MPFR_RNDN);
        X(mpfr_ui_sub(a, 1, a, MPFR_RNDN));
        X(mpfr_mul(r, r, a, MPFR_RNDN));
        break;
    case OP_TANH_BWD: /* dy (1 - y y) */
        mpfr_set_flt(a, v[0][i], MPFR_RNDN);
        X(mpfr_sqr(a, a, MPFR_RNDN));
        X(mpfr_ui_sub(a, 1, a, MPFR_RNDN));
        mpfr_set_flt(r, v[1][i], MPFR_RNDN);
        X(mpfr_mul(r, r, a, MPFR_RNDN));
        break;
    case OP_RELU:
        mpfr_set_flt(r, v[0][i] > 0 ? v[0][i] : 0.0f, MPFR_RNDN);
        break;
    case OP_RELU_BWD:
        mpfr_set_flt(r, v[0][i] > 0 ? v[1][i] : 0.0f, MPFR_RNDN);
        break;
    case OP_MSE_BWD:
    case OP_MSE: {
        size_t n = tg_count(t, 0);
        mpfr_set_zero(r, 1);
        for (size_t k = nd->type == OP_MSE ? 0 : i; k < (nd->type == OP_MSE ? n : i + 1); k++) {
            mpfr_set_flt(a, v[0][k], MPFR_RNDN);
            X(mpfr_sub_d(a, a, v[1][k], MPFR_RNDN));
            if (nd->type == OP_MSE) {
                X(mpfr_sqr(a, a, MPFR_RNDN));
                X(mpfr_add(r, r, a, MPFR_RNDN));
            } else {
                X(mpfr_mul_ui(r, a, 2, MPFR_RNDN));
                if (nd->ninputs > 2)
                    X(mpfr_mul_d(r, r, v[2][0], MPFR_RNDN));
            }
        }
        mpfr_set(a, r, MPFR_RNDN);
        mpfr_set_prec(r, REF_APPROX);
        if (mpfr_div_ui(r, a, (unsigned long)(nd->type == OP_MSE ? n : nd->count), MPFR_RNDN))
            *err = ref_err(r, 0);
        break;
    }
    case OP_SGD: /* p - lr g */
        mpfr_set_flt(a, nd->p.sgd.lr, MPFR_RNDN);
        X(mpfr_mul_d(a, a, v[1][i], MPFR_RNDN));
        mpfr_set_flt(r, v[0][i], MPFR_RNDN);
        X(mpfr_sub(r, r, a, MPFR_RNDN));
        break;
    case OP_MOMENTUM: /* mu buf + g */
        mpfr_set_flt(r, nd->p.momentum.mu, MPFR_RNDN);
        X(mpfr_mul_d(r, r, v[0][i], MPFR_RNDN));
        X(mpfr_add_d(r, r, v[1][i], MPFR_RNDN));
        break;
    case OP_ADAM_M: /* b1 m + (1 - b1) g */
    case OP_ADAM_V: { /* b2 v + (1 - b2) g g */
        float bb = nd->type == OP_ADAM_M ? nd->p.adam.b1 : nd->p.adam.b2;
        mpfr_set_flt(r, bb, MPFR_RNDN);
        X(mpfr_mul_d(r, r, v[0][i], MPFR_RNDN));
        mpfr_set_flt(a, bb, MPFR_RNDN);
        X(mpfr_ui_sub(a, 1, a, MPFR_RNDN));
        X(mpfr_mul_d(a, a, v[1][i], MPFR_RNDN));
        if (nd->type == OP_ADAM_V)
            X(mpfr_mul_d(a, a, v[1][i], MPFR_RNDN));
        X(mpfr_add(r, r, a, MPFR_RNDN));
        break;
    }
    case OP_ADAM_P: { /* p - lr (m / c1) / (sqrt(v / c2) + eps), c = 1 - b^t exactly */
        unsigned long st = (unsigned long)t->step + 1;
        mpfr_t c1, c2, pw;
        mpfr_inits2(2, c1, c2, (mpfr_ptr)0);
        mpfr_init2(pw, (mpfr_prec_t)(24 * st + 64)); /* b^t exactly */
        for (int k = 0; k < 2; k++) {
            mpfr_ptr ck = k ? c2 : c1;
            mpfr_set_flt(pw, k ? nd->p.adam.b2 : nd->p.adam.b1, MPFR_RNDN);
            X(mpfr_pow_ui(pw, pw, st, MPFR_RNDN));
            long lsb = mpfr_regular_p(pw) ? (long)mpfr_get_exp(pw) - (long)mpfr_get_prec(pw) : 0;
            mpfr_set_prec(ck, (mpfr_prec_t)((lsb < 0 ? -lsb : 0) + 8)); /* 1 - b^t exactly */
            X(mpfr_ui_sub(ck, 1, pw, MPFR_RNDN));
        }
        mpfr_clear(pw);
        mpfr_set_prec(a, REF_APPROX);
        mpfr_set_prec(b, REF_APPROX);
        mpfr_set_prec(r, REF_APPROX);
        mpfr_set_flt(a, v[1][i], MPFR_RNDN);
        mpfr_div(a, a, c1, MPFR_RNDN);
        mpfr_mul_d(a, a, nd->p.adam.lr, MPFR_RNDN);
        mpfr_set_flt(b, v[2][i], MPFR_RNDN);
        mpfr_div(b, b, c2, MPFR_RNDN);
        mpfr_sqrt(b, b, MPFR_RNDN);
        mpfr_add_d(b, b, nd->p.adam.eps, MPFR_RNDN);
        mpfr_div(a, a, b, MPFR_RNDN); /* relative error < 8 2^-600 (eps >= 0) */
        mpfr_d_sub(r, v[0][i], a, MPFR_RNDN);
        if (mpfr_regular_p(a) && mpfr_number_p(r)) {
            long e = (long)mpfr_get_exp(a);
            if (mpfr_regular_p(r) && (long)mpfr_get_exp(r) > e)
                e = (long)mpfr_get_exp(r);
            *err = e + 5 - REF_APPROX;
        }
        mpfr_clears(c1, c2, (mpfr_ptr)0);
        break;
    }
    case OP_FILL:
        mpfr_set_flt(r, nd->p.fill.value, MPFR_RNDN);
        break;
    default:
        fail_msg("ref_elem: op %s", op_type_name(nd->type));
    }
    mpfr_clears(a, b, c, (mpfr_ptr)0);
}

/* oracle_op on t, in the default mode or with every element on the exact path. */
static float *tg_oracle(const struct tg *t, int exact)
{
    const struct node *nd = tg_node(t);
    float *out = malloc((nd->count + 1) * sizeof *out);
    assert_non_null(out);
    const float *in[OP_MAX_INPUTS];
    for (int k = 0; k < t->nleaf; k++)
        in[k] = t->val[k];
    struct backend_step st = {.step = t->step};
    if (exact)
        setenv("DIVTRACE_ORACLE_EXACT", "1", 1);
    int rc = oracle_op(&t->g, nd, out, in, &st);
    unsetenv("DIVTRACE_ORACLE_EXACT");
    assert_int_equal(rc, 0);
    return out;
}

/* Compare oracle_op (both modes) with the reference on every element. */
static long ops_check(const struct tg *t, const char *what)
{
    const struct node *nd = tg_node(t);
    float *fast = tg_oracle(t, 0), *slow = tg_oracle(t, 1);
    mpfr_t r;
    mpfr_init2(r, REF_PREC);
    for (size_t i = 0; i < nd->count; i++) {
        long err;
        ref_elem(t, i, r, &err);
        float want = ref_decide32(r, err, what);
        if (!same32(fast[i], want) || !same32(slow[i], want))
            fail_msg("%s %s[%zu]: default %a, exact path %a, want %a (step %llu)", what,
                     op_type_name(nd->type), i, (double)fast[i], (double)slow[i], (double)want,
                     (unsigned long long)t->step);
        if (isnan(fast[i]) && memcmp(&fast[i], &(uint32_t){0x7fc00000u}, 4) != 0)
            fail_msg("%s %s[%zu]: NaN is not canonical", what, op_type_name(nd->type), i);
    }
    mpfr_clear(r);
    long n = (long)nd->count;
    free(fast);
    free(slow);
    return n;
}

/* oracle_op_bound gives what oracle_op and oracle_bound give apart. */
static void op_bound_same(const struct tg *t, const char *what)
{
    const struct node *nd = tg_node(t);
    float *o1 = malloc((nd->count + 1) * sizeof *o1), *o2 = malloc((nd->count + 1) * sizeof *o2);
    double *b1 = malloc((nd->count + 1) * sizeof *b1), *b2 = malloc((nd->count + 1) * sizeof *b2);
    assert_true(o1 && o2 && b1 && b2);
    const float *in[OP_MAX_INPUTS];
    for (int k = 0; k < t->nleaf; k++)
        in[k] = t->val[k];
    struct backend_step st = {.step = t->step};
    assert_int_equal(oracle_op(&t->g, nd, o1, in, &st), 0);
    assert_int_equal(oracle_bound(&t->g, nd, b1, in, &st), 0);
    assert_int_equal(oracle_op_bound(&t->g, nd, o2, b2, in, &st), 0);
    for (size_t i = 0; i < nd->count; i++)
        if (!same32(o1[i], o2[i]) || !(b1[i] == b2[i] || (isnan(b1[i]) && isnan(b2[i]))))
            fail_msg("%s %s[%zu]: oracle_op_bound %a, %g; apart %a, %g", what,
                     op_type_name(nd->type), i, (double)o2[i], b2[i], (double)o1[i], b1[i]);
    free(o1);
    free(o2);
    free(b1);
    free(b2);
}

static const enum op_type ops_all[] = {
    OP_MATMUL, OP_ADD_BIAS, OP_BIAS_GRAD, OP_SIGMOID, OP_SIGMOID_BWD, OP_TANH, OP_TANH_BWD,
    OP_RELU, OP_RELU_BWD, OP_ADD, OP_MSE, OP_MSE_BWD, OP_SGD, OP_MOMENTUM, OP_ADAM_M,
    OP_ADAM_V, OP_ADAM_P, OP_FILL, OP_CONV2D, OP_CONV2D_BWD_DATA, OP_CONV2D_BWD_FILTER,
    OP_MAXPOOL2, OP_MAXPOOL2_BWD, OP_UPSAMPLE2, OP_UPSAMPLE2_BWD, OP_CONCAT, OP_SLICE,
    OP_SLICE_BWD, OP_HARD_SIGMOID, OP_HARD_SIGMOID_BWD, OP_SATLU, OP_SATLU_BWD, OP_SUB, OP_NEG,
    OP_MUL, OP_MEAN, OP_MEAN_BWD};
#define OPS_N (sizeof ops_all / sizeof ops_all[0])

/* The ops whose result must be exact (bound 0), and the sums, whose worst-case
 * bounds are loose on random data. */
static int op_exact(enum op_type ty)
{
    switch (ty) {
    case OP_RELU: case OP_RELU_BWD: case OP_FILL: case OP_MAXPOOL2: case OP_MAXPOOL2_BWD:
    case OP_UPSAMPLE2: case OP_CONCAT: case OP_SLICE: case OP_SLICE_BWD: case OP_SATLU:
    case OP_SATLU_BWD: case OP_NEG:
        return 1;
    default:
        return 0;
    }
}

static int op_sum(enum op_type ty)
{
    return ty == OP_MATMUL || ty == OP_BIAS_GRAD || ty == OP_MSE || ty == OP_MEAN ||
           ty == OP_CONV2D || ty == OP_CONV2D_BWD_DATA || ty == OP_CONV2D_BWD_FILTER;
}

/* Every op on random inputs of every distribution. */
static void test_ops_random(void **state)
{
    (void)state;
    long total = 0;
    for (size_t o = 0; o < OPS_N; o++)
        for (int d = 0; d < D_NDIST; d++)
            for (int rep = 0; rep < 20; rep++) {
                struct tg t;
                tg_make(&t, ops_all[o], (enum dist)d, 1 + (uint32_t)(r64() % 150));
                total += ops_check(&t, "random");
                tg_free(&t);
            }
    if (verbose)
        printf("ops_random: %ld elements\n", total);
}

/* The convolutions' matrix-product path (reference/oracle_conv.c) on what
 * PredNet's first time steps give it: most inputs zeros of either sign
 * (sums of zeros only, whose sign the products' signs decide), small
 * integers that cancel exactly (left to the exact path), whole zero planes;
 * and oracle_op_bound, which shares the sums, giving the same. */
static void test_conv_paths(void **state)
{
    (void)state;
    static const enum op_type convs[] = {OP_CONV2D, OP_CONV2D_BWD_DATA, OP_CONV2D_BWD_FILTER};
    for (int o = 0; o < 3; o++)
        for (int rep = 0; rep < 18; rep++) {
            struct tg t;
            tg_make(&t, convs[o], rep % 2 ? D_FEW : D_UNIT, 20 + (uint32_t)(r64() % 100));
            for (int k = 0; k < t.nleaf; k++) {
                size_t n = tg_count(&t, k);
                for (size_t i = 0; i < n; i++) {
                    uint64_t u = r64() % 8;
                    if (u < 5)
                        t.val[k][i] = u & 1 ? -0.0f : 0.0f;
                    else if (rep % 3 == 0)
                        t.val[k][i] = (float)((int)(r64() % 7) - 3);
                }
                if (rep % 4 == 1) /* the first image (or filter) all zeros */
                    for (size_t i = 0; i < n / t.g.nodes[t.leaf[k]].shape[0]; i++)
                        t.val[k][i] = r64() & 1 ? -0.0f : 0.0f;
            }
            ops_check(&t, "conv paths");
            op_bound_same(&t, "conv paths");
            tg_free(&t);
        }
}

/* NaN, Inf, zeros and subnormals mixed into every input. */
static void test_ops_special(void **state)
{
    (void)state;
    static const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 0x1p-149f, -0x1p-140f,
                               FLT_MAX, 1.0f, -1.0f, 0.5f};
    for (size_t o = 0; o < OPS_N; o++)
        for (int rep = 0; rep < 8; rep++) {
            struct tg t;
            tg_make(&t, ops_all[o], rep % 2 ? D_UNIT : D_WIDE, 1 + (uint32_t)(r64() % 40));
            for (int k = 0; k < t.nleaf; k++)
                for (size_t i = 0; i < tg_count(&t, k); i++)
                    if (r64() % 3 == 0)
                        t.val[k][i] = sp[r64() % (sizeof sp / sizeof sp[0])];
            ops_check(&t, "special");
            tg_free(&t);
        }
}

/* Exact float32 ties of the rational ops (the fast paths must see them and
 * defer): parameters that make two 24-bit terms meet in 25 bits. */
static void test_ops_ties(void **state)
{
    (void)state;
    static const enum op_type tie_ops[] = {OP_ADD, OP_ADD_BIAS, OP_SGD, OP_MOMENTUM, OP_ADAM_M,
                                           OP_ADAM_V, OP_SIGMOID_BWD, OP_TANH_BWD, OP_MSE_BWD,
                                           OP_SUB, OP_MUL, OP_UPSAMPLE2_BWD, OP_MEAN, OP_MEAN_BWD,
                                           OP_HARD_SIGMOID, OP_BIAS_GRAD};
    for (size_t o = 0; o < sizeof tie_ops / sizeof tie_ops[0]; o++)
        for (int rep = 0; rep < 10; rep++) {
            struct tg t;
            enum op_type ty = tie_ops[o];
            uint32_t n = ty == OP_MSE_BWD || ty == OP_MEAN ? 2 : ty == OP_MEAN_BWD ? 4 : 64;
            tg_make(&t, ty, D_MANT, n);
            struct node *nd = &t.g.nodes[t.op];
            if (ty == OP_MUL) /* a 1.5 = a + a/2: 25 bits below 2 */
                for (size_t i = 0; i < tg_count(&t, 1); i++)
                    t.val[1][i] = 1.5f;
            if (ty == OP_MEAN) /* (a + b) / 2: 25 bits */
                nd->p.mean.scale = 1.0f;
            if (ty == OP_MEAN_BWD)
                nd->p.mean.scale = 1.5f;
            if (ty == OP_HARD_SIGMOID) /* 0.2f x + 0.5 for x = 2 is a midpoint */
                for (size_t i = 0; i < tg_count(&t, 0); i++) {
                    int m = (int)(r64() % 33) - 16; /* one draw a statement */
                    t.val[0][i] = (float)ldexp((double)m, -(int)(r64() % 4));
                }
            if (ty == OP_SGD)
                nd->p.sgd.lr = -1.0f;
            if (ty == OP_MOMENTUM)
                nd->p.momentum.mu = 1.0f;
            if (ty == OP_ADAM_M || ty == OP_ADAM_V)
                nd->p.adam.b1 = nd->p.adam.b2 = 0.5f;
            if (ty == OP_ADAM_V)
                for (size_t i = 0; i < tg_count(&t, 1); i++)
                    t.val[1][i] = (float)(int)(r64() % 64) * 0x1p-3f; /* g^2 short */
            if (ty == OP_SIGMOID_BWD || ty == OP_TANH_BWD)
                for (size_t i = 0; i < tg_count(&t, 0); i++)
                    t.val[0][i] = ty == OP_SIGMOID_BWD ? 0.75f : 0.5f;
            if (ty == OP_MSE_BWD && nd->ninputs > 2)
                t.val[2][0] = 1.0f;
            if (ty == OP_MSE_BWD) /* p - t across binades: 25 bits */
                for (size_t i = 0; i < 2; i++)
                    t.val[1][i] = t.val[0][i] * 0.5f + (float)runif(0, 0x1p-23);
            ops_check(&t, "tie");
            tg_free(&t);
        }
}

/* Exact zeros take the sign IEEE arithmetic gives the formula. */
static float op1(enum op_type ty, const union op_params *p, uint64_t step, int n, ...)
{
    struct tg t;
    tg_init(&t);
    t.step = step;
    va_list ap;
    va_start(ap, n);
    for (int k = 0; k < n; k++) {
        tg_leaf(&t, 1, 0);
        t.val[k][0] = (float)va_arg(ap, double);
    }
    va_end(ap);
    tg_op(&t, ty, p, 1, 0);
    if (ty == OP_MSE_BWD || ty == OP_MSE) /* shapes of p, t and the scalar g all (1) */
        t.g.nodes[t.op].shape[0] = 1;
    ops_check(&t, "case");
    float *o = tg_oracle(&t, 0);
    float r = o[0];
    free(o);
    tg_free(&t);
    return r;
}

#define EXPECT32(got, want)                                                             \
    do {                                                                                \
        float g_ = (got), w_ = (want);                                                  \
        if (!same32(g_, w_))                                                            \
            fail_msg("%s = %a, want %a", #got, (double)g_, (double)w_);                 \
    } while (0)

static void test_ops_cases(void **state)
{
    (void)state;
    union op_params p;
    memset(&p, 0, sizeof p);
    p.sgd.lr = 0.1f;
    EXPECT32(op1(OP_SGD, &p, 0, 2, -0.0, 0.0), -0.0f);   /* -0 - (+0) */
    EXPECT32(op1(OP_SGD, &p, 0, 2, -0.0, -0.0), 0.0f);   /* -0 - (-0) */
    float pf = 0.1f * 3.0f; /* p - lr g: the rounding error of pf, a float */
    EXPECT32(op1(OP_SGD, &p, 0, 2, (double)pf, 3.0), (float)((double)pf - (double)0.1f * 3.0));
    p.momentum.mu = 0.9f;
    EXPECT32(op1(OP_MOMENTUM, &p, 0, 2, -0.0, -0.0), -0.0f);
    EXPECT32(op1(OP_MOMENTUM, &p, 0, 2, 0.0, -0.0), 0.0f);
    memset(&p, 0, sizeof p);
    p.adam.b1 = 0.9f;
    p.adam.b2 = 0.999f;
    p.adam.lr = 1e-3f;
    p.adam.eps = 1e-8f;
    EXPECT32(op1(OP_ADAM_M, &p, 0, 2, -0.0, -0.0), -0.0f);
    EXPECT32(op1(OP_ADAM_M, &p, 0, 2, 0.0, -0.0), 0.0f);
    EXPECT32(op1(OP_ADAM_V, &p, 0, 2, -0.0, -0.0), 0.0f); /* (1-b2) g g = +0 */
    EXPECT32(op1(OP_ADAM_P, &p, 0, 3, -0.0, 0.0, 0.0), -0.0f); /* p - (+0) */
    EXPECT32(op1(OP_ADAM_P, &p, 0, 3, 1.0, 0.0, 0.0), 1.0f);
    EXPECT32(op1(OP_SIGMOID_BWD, NULL, 0, 2, 0.5, -0.0), -0.0f);
    EXPECT32(op1(OP_SIGMOID_BWD, NULL, 0, 2, 1.0, 3.0), 0.0f);
    EXPECT32(op1(OP_SIGMOID_BWD, NULL, 0, 2, 2.0, 3.0), -6.0f);
    EXPECT32(op1(OP_TANH_BWD, NULL, 0, 2, -1.0, -2.0), -0.0f);
    EXPECT32(op1(OP_MSE_BWD, NULL, 0, 2, -0.0, 0.0), -0.0f); /* 2 (-0 - 0) / 1 */
    EXPECT32(op1(OP_MSE_BWD, NULL, 0, 2, 3.0, 2.0), 2.0f);
    EXPECT32(op1(OP_MSE, NULL, 0, 2, -0.0, 0.0), 0.0f);
    EXPECT32(op1(OP_MSE, NULL, 0, 2, 3.0, 1.0), 4.0f);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, -0.0, -0.0), -0.0f);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, 1.0, -1.0), 0.0f);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, 1.0, 0x1p-24), 1.0f);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, 1.0 + 0x1p-23, 0x1p-24), 1.0f + 0x1p-22f);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, (double)FLT_MAX, 0x1p103), INFINITY);
    EXPECT32(op1(OP_ADD, NULL, 0, 2, 0x1p-149, -0x1p-149), 0.0f);
    EXPECT32(op1(OP_RELU, NULL, 0, 1, -0.0), 0.0f);
    EXPECT32(op1(OP_RELU, NULL, 0, 1, (double)NAN), 0.0f);
    EXPECT32(op1(OP_RELU_BWD, NULL, 0, 2, 1.0, -0.0), -0.0f);
    EXPECT32(op1(OP_SIGMOID, NULL, 0, 1, 0.0), 0.5f);
    EXPECT32(op1(OP_SIGMOID, NULL, 0, 1, -200.0), 0.0f);
    float sm = op1(OP_SIGMOID, NULL, 0, 1, -100.0); /* e^-100: subnormal */
    assert_true(sm > 0 && sm < 0x1p-140f);
    EXPECT32(op1(OP_SIGMOID, NULL, 0, 1, 20.0), 1.0f);
    EXPECT32(op1(OP_TANH, NULL, 0, 1, -0.0), -0.0f);
    EXPECT32(op1(OP_TANH, NULL, 0, 1, 0x1p-149), 0x1p-149f);
    EXPECT32(op1(OP_TANH, NULL, 0, 1, -10.0), -1.0f);
}

/* An image leaf of shape (a, b, c, d) holding v. */
static int img_leaf(struct tg *t, uint32_t a, uint32_t b, uint32_t c, uint32_t d, const float *v)
{
    uint32_t shape[4] = {a, b, c, d};
    int i = tg_leafn(t, 4, shape);
    memcpy(t->val[t->nleaf - 1], v, tg_count(t, t->nleaf - 1) * sizeof *v);
    return i;
}

/* oracle_op on t (both paths checked against the reference) equals want. */
static void expect_out(const struct tg *t, const float *want, const char *what)
{
    ops_check(t, what);
    float *o = tg_oracle(t, 0);
    for (size_t i = 0; i < tg_node(t)->count; i++)
        if (!same32(o[i], want[i]))
            fail_msg("%s[%zu] = %a, want %a", what, i, (double)o[i], (double)want[i]);
    free(o);
}

/* maxpool2's ties and NaN windows, the rest of op.h's rules of the image ops
 * on chosen inputs. */
static void test_image_cases(void **state)
{
    (void)state;
    const float nan = NAN, z = 0.0f, nz = -0.0f;
    struct tg t;
    /* windows: (-0 +0 / -1 -2) (+0 -0 / -0 +0) (1 NaN / NaN 2) (3 3 / 1 3) (1 5 / 2 NaN) */
    const float x[20] = {nz, z, z, nz, 1, nan, 3, 3, 1, 5, -1, -2, nz, z, nan, 2, 1, 3, 2, nan};
    const float dy[5] = {10, 20, 30, 40, 50};
    tg_init(&t);
    t.op = graph_maxpool2(&t.g, "op", img_leaf(&t, 1, 1, 2, 10, x));
    expect_out(&t, (const float[]){nz, z, nan, 3, nan}, "maxpool2 ties");
    tg_free(&t);
    tg_init(&t);
    img_leaf(&t, 1, 1, 2, 10, x);
    img_leaf(&t, 1, 1, 1, 5, dy);
    tg_opn(&t, OP_MAXPOOL2_BWD, NULL, 4, (const uint32_t[]){1, 1, 2, 10});
    expect_out(&t, (const float[]){10, 0, 20, 0, 0, 30, 40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 50},
               "maxpool2_bwd ties");
    tg_free(&t);
    /* concat in input order, slice and slice_bwd */
    tg_init(&t);
    int xs[2] = {img_leaf(&t, 2, 1, 1, 1, (const float[]){1, nz}),
                 img_leaf(&t, 2, 2, 1, 1, (const float[]){nan, 2, 3, 4})};
    t.op = graph_concat(&t.g, "op", 2, xs);
    expect_out(&t, (const float[]){1, nan, 2, nz, 3, 4}, "concat");
    tg_free(&t);
    tg_init(&t);
    int sx = img_leaf(&t, 2, 3, 1, 1, (const float[]){1, 2, 3, 4, 5, nz});
    t.op = graph_slice(&t.g, "op", sx, 1, 2);
    expect_out(&t, (const float[]){2, 3, 5, nz}, "slice");
    tg_free(&t);
    tg_init(&t);
    img_leaf(&t, 2, 1, 1, 1, (const float[]){nz, 7});
    tg_opn(&t, OP_SLICE_BWD, &(union op_params){.slice = {1, 1, 3}}, 4,
           (const uint32_t[]){2, 3, 1, 1});
    expect_out(&t, (const float[]){0, nz, 0, 0, 7, 0}, "slice_bwd");
    tg_free(&t);
    /* upsample2 and its sum, in op.h's order */
    tg_init(&t);
    t.op = graph_upsample2(&t.g, "op", img_leaf(&t, 1, 1, 1, 2, (const float[]){nz, nan}));
    expect_out(&t, (const float[]){nz, nz, nan, nan, nz, nz, nan, nan}, "upsample2");
    tg_free(&t);
    tg_init(&t);
    img_leaf(&t, 1, 1, 2, 4, (const float[]){nz, nz, 1, 0x1p-30f, nz, nz, -1, 0x1p-30f});
    tg_opn(&t, OP_UPSAMPLE2_BWD, NULL, 4, (const uint32_t[]){1, 1, 1, 2});
    expect_out(&t, (const float[]){nz, 0x1p-29f}, "upsample2_bwd");
    tg_free(&t);
    /* conv2d: zero signs, cancellation to the last bit, subnormal products
     * (2^-150: a tie to +0; 1.5 2^-149: to 2^-148), a 5x5 kernel on 1x2 images */
    tg_init(&t);
    int cx = img_leaf(&t, 5, 2, 1, 1, (const float[]){nz, nz, nz, z, 1 + 0x1p-23f, -1,
                                                      0x1p-140f, 0, 0x1.8p-139f, 0});
    int cw = img_leaf(&t, 1, 2, 1, 1, (const float[]){3, 1});
    t.op = graph_conv2d(&t.g, "op", cx, cw);
    t.val[1][1] = 1.0f;
    t.val[1][0] = 1.0f;
    expect_out(&t, (const float[]){nz, z, 0x1p-23f, 0x1p-140f, 0x1.8p-139f}, "conv2d signs");
    for (size_t i = 6; i < 10; i++)
        t.val[0][i] *= 0x1p-10f;
    t.val[1][0] = 1.0f;
    expect_out(&t, (const float[]){nz, z, 0x1p-23f, 0.0f, 0x1p-148f}, "conv2d subnormal");
    tg_free(&t);
    tg_init(&t);
    cx = img_leaf(&t, 1, 1, 1, 2, (const float[]){2, 3});
    cw = img_leaf(&t, 1, 1, 5, 5, (const float[]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 7, 11, 0,
                                                  0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
    t.op = graph_conv2d(&t.g, "op", cx, cw);
    expect_out(&t, (const float[]){2 * 7 + 3 * 11, 2 * 5 + 3 * 7}, "conv2d 5x5");
    tg_free(&t);
    /* bias_grad and add_bias of rank 4: per channel */
    tg_init(&t);
    img_leaf(&t, 2, 2, 1, 2, (const float[]){1, 2, 10, 20, 3, 4, 30, 40});
    tg_opn(&t, OP_BIAS_GRAD, NULL, 1, (const uint32_t[]){2});
    expect_out(&t, (const float[]){10, 100}, "bias_grad rank 4");
    tg_free(&t);
    tg_init(&t);
    int bx = img_leaf(&t, 1, 2, 1, 2, (const float[]){1, 2, 10, nz});
    int bb = tg_leaf(&t, 2, 0);
    t.val[1][0] = 0.5f;
    t.val[1][1] = nz;
    t.op = graph_add_bias(&t.g, "op", bx, bb);
    expect_out(&t, (const float[]){1.5f, 2.5f, 10, nz}, "add_bias rank 4");
    tg_free(&t);
}

/* hard_sigmoid at its clip points, satlu at its bound, sub, neg, mul, mean. */
static void test_elementwise_cases(void **state)
{
    (void)state;
    union op_params p;
    memset(&p, 0, sizeof p);
    const float below = nextafterf(-2.5f, -INFINITY), above2 = nextafterf(nextafterf(2.5f, 3), 3);
    /* 0.2f (-2.5) + 0.5 = -7.45e-9: clipped to +0 although the cpu's t is 0 */
    EXPECT32(op1(OP_HARD_SIGMOID, NULL, 0, 1, -2.5), 0.0f);
    EXPECT32(op1(OP_HARD_SIGMOID, NULL, 0, 1, 2.5), 1.0f);
    EXPECT32(op1(OP_HARD_SIGMOID, NULL, 0, 1, -0.0), 0.5f);
    EXPECT32(op1(OP_HARD_SIGMOID, NULL, 0, 1, (double)-INFINITY), 0.0f);
    EXPECT32(op1(OP_HARD_SIGMOID, NULL, 0, 1, (double)INFINITY), 1.0f);
    EXPECT32(op1(OP_HARD_SIGMOID, NULL, 0, 1, (double)NAN), NAN);
    float h2 = op1(OP_HARD_SIGMOID, NULL, 0, 1, 2.0); /* 0.9 + 6e-9: a midpoint, to even */
    EXPECT32(h2, 0x1.ccccccp-1f);
    float hb = op1(OP_HARD_SIGMOID, NULL, 0, 1, (double)nextafterf(-2.5f, 0));
    assert_true(hb > 0 && hb < 1e-7f);
    /* hard_sigmoid_bwd: the mask on the float t: t = 0 and t = 1 pass */
    assert_true(ref_hs_t(-2.5f) == 0 && ref_hs_t(below) < 0 && ref_hs_t(2.5f) == 1 &&
                ref_hs_t(nextafterf(2.5f, 3)) == 1 && ref_hs_t(above2) > 1);
    EXPECT32(op1(OP_HARD_SIGMOID_BWD, NULL, 0, 2, -2.5, 1.0), 0.2f);
    EXPECT32(op1(OP_HARD_SIGMOID_BWD, NULL, 0, 2, (double)below, 1.0), 0.0f);
    EXPECT32(op1(OP_HARD_SIGMOID_BWD, NULL, 0, 2, 2.5, 1.0), 0.2f);
    EXPECT32(op1(OP_HARD_SIGMOID_BWD, NULL, 0, 2, (double)nextafterf(2.5f, 3), 1.0), 0.2f);
    EXPECT32(op1(OP_HARD_SIGMOID_BWD, NULL, 0, 2, (double)above2, 1.0), 0.0f);
    EXPECT32(op1(OP_HARD_SIGMOID_BWD, NULL, 0, 2, (double)NAN, 1.0), 0.0f);
    EXPECT32(op1(OP_HARD_SIGMOID_BWD, NULL, 0, 2, 0.0, -0.0), -0.0f);
    EXPECT32(op1(OP_HARD_SIGMOID_BWD, NULL, 0, 2, 0.0, (double)NAN), NAN);
    EXPECT32(op1(OP_HARD_SIGMOID_BWD, NULL, 0, 2, 1.0, 0x1p-149), 0.0f); /* 0.2 2^-149 */
    /* satlu at its bound, zeros of both signs */
    p.satlu.max = 1.0f;
    EXPECT32(op1(OP_SATLU, &p, 0, 1, 1.0), 1.0f);
    EXPECT32(op1(OP_SATLU, &p, 0, 1, (double)nextafterf(1, 2)), 1.0f);
    EXPECT32(op1(OP_SATLU, &p, 0, 1, (double)NAN), NAN);
    EXPECT32(op1(OP_SATLU_BWD, &p, 0, 2, 1.0, 5.0), 5.0f);
    EXPECT32(op1(OP_SATLU_BWD, &p, 0, 2, (double)nextafterf(1, 2), 5.0), 0.0f);
    EXPECT32(op1(OP_SATLU_BWD, &p, 0, 2, (double)NAN, 5.0), 0.0f);
    p.satlu.max = 0.0f;
    EXPECT32(op1(OP_SATLU, &p, 0, 1, -0.0), -0.0f);
    EXPECT32(op1(OP_SATLU_BWD, &p, 0, 2, -0.0, -0.0), -0.0f);
    p.satlu.max = -0.0f;
    EXPECT32(op1(OP_SATLU, &p, 0, 1, 0.0), 0.0f); /* +0 > -0 is false */
    /* sub, neg, mul */
    EXPECT32(op1(OP_SUB, NULL, 0, 2, -0.0, 0.0), -0.0f);
    EXPECT32(op1(OP_SUB, NULL, 0, 2, -0.0, -0.0), 0.0f);
    EXPECT32(op1(OP_SUB, NULL, 0, 2, 1.0, 1.0), 0.0f);
    EXPECT32(op1(OP_SUB, NULL, 0, 2, 1.0, -0x1p-24), 1.0f);
    EXPECT32(op1(OP_SUB, NULL, 0, 2, (double)INFINITY, (double)INFINITY), NAN);
    EXPECT32(op1(OP_NEG, NULL, 0, 1, 0.0), -0.0f);
    EXPECT32(op1(OP_NEG, NULL, 0, 1, -0.0), 0.0f);
    EXPECT32(op1(OP_NEG, NULL, 0, 1, (double)-INFINITY), INFINITY);
    EXPECT32(op1(OP_MUL, NULL, 0, 2, -0.0, 3.0), -0.0f);
    EXPECT32(op1(OP_MUL, NULL, 0, 2, 0x1p-75, 0x1p-75), 0.0f);           /* 2^-150: tie to +0 */
    EXPECT32(op1(OP_MUL, NULL, 0, 2, -0x1.8p-74, 0x1p-75), -0x1p-148f);  /* tie to even */
    EXPECT32(op1(OP_MUL, NULL, 0, 2, -0x1.8p-75, 0x1p-75), -0x1p-149f);  /* 0.75 2^-149 */
    EXPECT32(op1(OP_MUL, NULL, 0, 2, -0x1p-100, 0x1p-60), -0.0f);
    EXPECT32(op1(OP_MUL, NULL, 0, 2, (double)FLT_MAX, 2.0), INFINITY);
    EXPECT32(op1(OP_MUL, NULL, 0, 2, 1 + 0x1p-23, 1.5), 1.5f + 0x1p-22f); /* tie to even */
    EXPECT32(op1(OP_MUL, NULL, 0, 2, 0.0, (double)INFINITY), NAN);
    /* mean and mean_bwd: scale sum / count */
    p.mean.scale = 1.0f;
    EXPECT32(op1(OP_MEAN, &p, 0, 1, -0.0), -0.0f);
    EXPECT32(op1(OP_MEAN_BWD, &p, 0, 1, -0.0), -0.0f);
    p.mean.scale = -1.0f;
    EXPECT32(op1(OP_MEAN, &p, 0, 1, -0.0), 0.0f);
    p.mean.scale = 0.0f;
    EXPECT32(op1(OP_MEAN, &p, 0, 1, (double)INFINITY), NAN);
    EXPECT32(op1(OP_MEAN_BWD, &p, 0, 1, -3.0), -0.0f);
    struct tg t;
    tg_init(&t);
    tg_leaf(&t, 3, 0);
    memcpy(t.val[0], (const float[]){nextafterf(1, 2), -1, 0x1p-30f}, 3 * sizeof(float));
    p.mean.scale = 3.0f;
    tg_op(&t, OP_MEAN, &p, 1, 0);
    expect_out(&t, (const float[]){0x1p-23f + 0x1p-30f}, "mean 3 (1 + 2^-23 - 1 + 2^-30) / 3");
    t.val[0][0] = -0.0f, t.val[0][1] = -0.0f, t.val[0][2] = -0.0f;
    expect_out(&t, (const float[]){-0.0f}, "mean of -0");
    t.val[0][2] = 0.0f;
    expect_out(&t, (const float[]){0.0f}, "mean of -0, -0, +0");
    tg_free(&t);
}

/* Hard cases of rounding: at x = k 2^-24, sigmoid(x) = 1/2 + x/4 - x^3/48 + ...
 * rounds in double to a float32 midpoint while the exact value lies just
 * below it; rounding the double once more goes the wrong way for half of
 * them (66 such x among all floats). tanh(x) = x - x^3/3 near small x too. */
static void test_ops_hard(void **state)
{
    (void)state;
    struct tg t;
    tg_init(&t);
    tg_leaf(&t, 4000, 0);
    for (size_t i = 0; i < 4000; i++)
        t.val[0][i] = (float)ldexp((double)(i % 1000 + 1), -24 - 2 * (int)(i / 1000)) *
                      (i % 2 ? -1.0f : 1.0f);
    tg_op(&t, OP_SIGMOID, NULL, 4000, 0);
    ops_check(&t, "hard sigmoid");
    float *o = tg_oracle(&t, 0);
    for (size_t i = 0; i < 4000; i++)
        if (t.val[0][i] == 0x1.8p-22f)
            EXPECT32(o[i], 0x1.000002p-1f); /* not 0x1.000004p-1, the double's rounding */
    free(o);
    t.g.nodes[t.op].type = OP_TANH;
    ops_check(&t, "hard tanh");
    tg_free(&t);
}

/* adam_p values that are float32 ties or zeros although every step but the
 * last is inexact in binary: c1 = 3/4, c2 = 9/16, m = v = 1, eps = 0 give
 * y = lr (4/3) / (4/3) = lr exactly. */
static void test_adam_p_ties(void **state)
{
    (void)state;
    union op_params p;
    memset(&p, 0, sizeof p);
    p.adam.b1 = 0.25f;
    p.adam.b2 = 7.0f / 16;
    p.adam.eps = 0.0f;
    p.adam.lr = 0x1p-25f;
    for (int exact = 0; exact < 2; exact++) {
        if (exact)
            setenv("DIVTRACE_ORACLE_EXACT", "1", 1);
        /* 1 - 2^-25: the midpoint below 1, ties to 1 (even) */
        struct tg t;
        tg_init(&t);
        for (int k = 0; k < 3; k++)
            tg_leaf(&t, 3, 0);
        float vals[3][3] = {{1.0f, 0x1p-25f, 0x1.800002p-1f}, {1, 1, -1}, {1, 1, 1}};
        for (int k = 0; k < 3; k++)
            memcpy(t.val[k], vals[k], sizeof vals[k]);
        tg_op(&t, OP_ADAM_P, &p, 3, 0);
        float *o = tg_oracle(&t, exact);
        EXPECT32(o[0], 1.0f);                   /* 1 - 2^-25: tie, to even */
        EXPECT32(o[1], 0.0f);                   /* p - lr = +0 exactly */
        EXPECT32(o[2], 0x1.800004p-1f);         /* 0.75 + 2^-24 + 2^-25: tie, to even */
        free(o);
        tg_free(&t);
        /* sqrt(v / c2) + eps = 0 exactly (eps < 0): y = +Inf, out = -Inf */
        union op_params q = p;
        q.adam.b2 = 0.0f;
        q.adam.eps = -0.5f;
        q.adam.lr = 1.0f;
        tg_init(&t);
        for (int k = 0; k < 3; k++)
            tg_leaf(&t, 1, 0);
        t.val[0][0] = 1.0f, t.val[1][0] = 1.0f, t.val[2][0] = 0.25f;
        tg_op(&t, OP_ADAM_P, &q, 1, 0);
        o = tg_oracle(&t, exact);
        EXPECT32(o[0], -INFINITY);
        free(o);
        ops_check(&t, "adam_p d = 0");
        tg_free(&t);
        unsetenv("DIVTRACE_ORACLE_EXACT");
    }
}

static void test_op_leaves(void **state)
{
    (void)state;
    struct tg t;
    tg_init(&t);
    tg_leaf(&t, 4, 0);
    const struct node *nd = &t.g.nodes[t.leaf[0]];
    float out[4];
    double b[4];
    const float *in[1] = {t.val[0]};
    struct backend_step st = {0};
    assert_int_equal(oracle_op(&t.g, nd, out, in, &st), -1);
    assert_non_null(strstr(dt_error(), "not an op"));
    assert_int_equal(oracle_bound(&t.g, nd, b, in, &st), -1);
    assert_non_null(strstr(dt_error(), "not an op"));
    tg_free(&t);
}

/* ---- bounds against the cpu kernels --------------------------------------------------- */

static float *tg_cpu(struct tg *t)
{
    void *ctx = NULL;
    struct backend_options bo = {.threads = 1};
    assert_int_equal(backend_cpu.init(&ctx, &bo), 0);
    struct exec e;
    assert_int_equal(exec_init(&e, &t->g, &backend_cpu, ctx), 0);
    for (int k = 0; k < t->nleaf; k++)
        exec_set(&e, t->leaf[k], t->val[k]);
    exec_step(&e, t->step);
    float *out = malloc((tg_node(t)->count + 1) * sizeof *out);
    assert_non_null(out);
    exec_get(&e, t->op, out);
    exec_free(&e);
    backend_cpu.free(ctx);
    return out;
}

struct ratio {
    double max, sum;
    long n, inf;
};

/* oracle_bound of t's op from its leaves' values (to free). */
static double *op_bound(const struct tg *t)
{
    const struct node *nd = tg_node(t);
    double *bound = malloc((nd->count + 1) * sizeof *bound);
    assert_non_null(bound);
    const float *in[OP_MAX_INPUTS];
    for (int k = 0; k < t->nleaf; k++)
        in[k] = t->val[k];
    struct backend_step st = {.step = t->step};
    assert_int_equal(oracle_bound(&t->g, nd, bound, in, &st), 0);
    return bound;
}

/* Every element of got (a float32 evaluation of t's op) within oracle_bound
 * of the exact value; error / bound ratios into rt. */
static void bound_check_of(const struct tg *t, const float *got, const char *what,
                           struct ratio *rt)
{
    const struct node *nd = tg_node(t);
    double *bound = op_bound(t);
    mpfr_t r, d;
    mpfr_inits2(REF_PREC * 2, r, d, (mpfr_ptr)0);
    for (size_t i = 0; i < nd->count; i++) {
        long err;
        ref_elem(t, i, r, &err);
        if (!(bound[i] >= 0))
            fail_msg("%s %s[%zu]: bound %g", what, op_type_name(nd->type), i, bound[i]);
        if (isinf(bound[i])) {
            rt->inf++;
            continue;
        }
        if (bound[i] == 0 && !isfinite(got[i]) && (isnan(got[i]) ? mpfr_nan_p(r)
                : mpfr_inf_p(r) && (mpfr_sgn(r) < 0) == (got[i] < 0)))
            continue; /* an exact op's NaN or Inf, as the exact value */
        if (!isfinite(got[i]) || !mpfr_number_p(r))
            fail_msg("%s %s[%zu]: finite bound %g, got %a, exact %s", what,
                     op_type_name(nd->type), i, bound[i], (double)got[i],
                     mpfr_number_p(r) ? "finite" : "not finite");
        mpfr_set_prec(d, mpfr_get_prec(r) + 300);
        mpfr_sub_d(d, r, got[i], MPFR_RNDN); /* exact */
        double e = fabs(mpfr_get_d(d, MPFR_RNDU)) * (1 + 0x1p-50);
        if (err != LONG_MIN)
            e += ldexp(1.0, (int)(err < -2000 ? -2000 : err));
        if (!(e <= bound[i]))
            fail_msg("%s %s[%zu] (step %llu): |got %a - exact %a| = %g > bound %g", what,
                     op_type_name(nd->type), i, (unsigned long long)t->step, (double)got[i],
                     mpfr_get_d(r, MPFR_RNDN), e, bound[i]);
        if (bound[i] > 0) {
            double q = e / bound[i];
            rt->max = q > rt->max ? q : rt->max;
            rt->sum += q;
            rt->n++;
        }
    }
    mpfr_clears(r, d, (mpfr_ptr)0);
    free(bound);
}

/* The cpu kernel's output within oracle_bound (bound_check_of). */
static void bound_check(struct tg *t, const char *what, struct ratio *rt)
{
    float *cpu = tg_cpu(t);
    bound_check_of(t, cpu, what, rt);
    free(cpu);
}

static void test_bounds(void **state)
{
    (void)state;
    for (size_t o = 0; o < OPS_N; o++) {
        struct ratio typ = {0}, all = {0};
        for (int d = 0; d < D_NDIST; d++)
            for (int rep = 0; rep < 20; rep++) {
                struct tg t;
                tg_make(&t, ops_all[o], (enum dist)d, 1 + (uint32_t)(r64() % 300));
                bound_check(&t, "bound", d == D_UNIT ? &typ : &all);
                tg_free(&t);
            }
        if (verbose)
            printf("%-12s unit inputs: max error/bound %.3g mean %.3g (%ld); other: max %.3g "
                   "mean %.3g (%ld, %ld infinite)\n",
                   op_type_name(ops_all[o]), typ.max, typ.n ? typ.sum / typ.n : 0, typ.n,
                   all.max, all.n ? all.sum / all.n : 0, all.n, all.inf);
        /* not absurdly loose: on plain inputs some element uses a fair part of
         * its bound (the exact ops have bound 0 and no ratio). mse and mean
         * are bounded for a float32 sum of n terms while the cpu sums in
         * double and rounds once: it uses about 1/n of that (test_variant
         * holds float32 sums to it) */
        enum op_type ty = ops_all[o];
        double floor = ty == OP_MSE || ty == OP_MEAN ? 1e-4 : op_sum(ty) ? 1e-3 : 0.05;
        if (!op_exact(ty) && !(typ.max >= floor))
            fail_msg("%s: largest error / bound on unit inputs %g: loose", op_type_name(ty),
                     typ.max);
    }
}

/* The adversarial cases of the bounds: cancellation in 1 - y^2 and in the
 * matrix product, huge ranges, subnormal products, sigmoid where expf
 * overflows or underflows, Adam with extreme steps. */
static void test_bounds_adversarial(void **state)
{
    (void)state;
    struct ratio rt = {0};
    struct tg t;
    /* matmul: a row that cancels to a tiny rest, K = 784 */
    tg_init(&t);
    int a = tg_leaf(&t, 3, 784), b = tg_leaf(&t, 784, 5);
    for (size_t i = 0; i < 3 * 784; i++)
        t.val[0][i] = i % 2 ? -t.val[0][i - 1] * (1 + 0x1p-20f) : (float)runif(-1, 1);
    for (size_t i = 0; i < 784 * 5; i++)
        t.val[1][i] = (float)runif(0.5, 1) * (i / 5 % 3 == 2 ? 0x1p-130f : 1.0f);
    t.op = graph_matmul(&t.g, "op", a, b, 0, 0);
    bound_check(&t, "matmul cancellation", &rt);
    ops_check(&t, "matmul cancellation");
    tg_free(&t);
    /* matmul of a layer's size, uniform inputs: how tight gamma_K is at K = 784 */
    struct ratio mm = {0};
    tg_init(&t);
    a = tg_leaf(&t, 16, 784);
    b = tg_leaf(&t, 784, 16);
    tg_fill(&t, 0, D_UNIT);
    tg_fill(&t, 1, D_POS);
    t.op = graph_matmul(&t.g, "op", a, b, 0, 0);
    bound_check(&t, "matmul 784", &mm);
    tg_free(&t);
    if (verbose)
        printf("matmul K = 784: max error/bound %.3g mean %.3g\n", mm.max, mm.sum / mm.n);
    /* sigmoid around expf's overflow and underflow, tanh near 0 and 9 */
    tg_init(&t);
    tg_leaf(&t, 4000, 0);
    for (size_t i = 0; i < 4000; i++)
        t.val[0][i] = i < 1000 ? (float)runif(-105, -80) : i < 2000 ? (float)runif(80, 110)
                    : i < 3000 ? (float)runif(-20, 20) : (float)ldexp(runif(-1, 1), -(int)(i % 140));
    t.val[0][3999] = 0x1.ddca18p-3f; /* glibc 2.36's tanhf errs by 2.19 ulp here */
    t.val[0][3998] = -0x1.ddca18p-3f;
    tg_op(&t, OP_SIGMOID, NULL, 4000, 0);
    bound_check(&t, "sigmoid range", &rt);
    ops_check(&t, "sigmoid range");
    t.g.nodes[t.op].type = OP_TANH;
    bound_check(&t, "tanh range", &rt);
    ops_check(&t, "tanh range");
    tg_free(&t);
    /* tanh_bwd with y a hair from +-1 */
    tg_init(&t);
    tg_leaf(&t, 2000, 0);
    tg_leaf(&t, 2000, 0);
    for (size_t i = 0; i < 2000; i++) {
        t.val[0][i] = (1.0f - (float)(i % 40) * 0x1p-24f) * (i % 2 ? -1 : 1);
        t.val[1][i] = (float)ldexp(runif(-1, 1), (int)(i % 300) - 150);
    }
    tg_op(&t, OP_TANH_BWD, NULL, 2000, 0);
    bound_check(&t, "tanh_bwd cancellation", &rt);
    ops_check(&t, "tanh_bwd cancellation");
    t.g.nodes[t.op].type = OP_SIGMOID_BWD;
    bound_check(&t, "sigmoid_bwd subnormal", &rt);
    ops_check(&t, "sigmoid_bwd subnormal");
    tg_free(&t);
    /* adam_p late and early, with b close to 1 */
    for (int rep = 0; rep < 20; rep++) {
        tg_make(&t, OP_ADAM_P, (enum dist)(rep % D_NDIST), 200);
        struct node *nd = &t.g.nodes[t.op];
        nd->p.adam.b2 = rep % 2 ? 1 - 0x1p-20f : 0.9999f;
        t.step = rep % 3 ? (uint64_t)(r64() % 5000) : 0;
        bound_check(&t, "adam_p", &rt);
        tg_free(&t);
    }
    if (verbose)
        printf("adversarial: max error/bound %.3g mean %.3g (%ld, %ld infinite)\n", rt.max,
               rt.n ? rt.sum / rt.n : 0, rt.n, rt.inf);
}

/* The convolutions' bounds are the matmul's over the m in-image terms: at
 * most 2 m u sum |p q| + m 2^-148 (not absurdly loose), and they hold. */
static void test_bounds_conv(void **state)
{
    (void)state;
    static const enum op_type convs[] = {OP_CONV2D, OP_CONV2D_BWD_DATA, OP_CONV2D_BWD_FILTER};
    struct ratio rt = {0};
    for (size_t o = 0; o < 3; o++)
        for (int d = 0; d < D_NDIST; d++)
            for (int rep = 0; rep < 10; rep++) {
                struct tg t;
                tg_make(&t, convs[o], (enum dist)d, 40 + (uint32_t)(r64() % 200));
                const struct node *nd = tg_node(&t);
                double *bound = malloc(nd->count * sizeof *bound);
                size_t cap = tg_termcap(&t);
                float *p = malloc(cap * sizeof *p), *q = malloc(cap * sizeof *q);
                assert_true(bound && p && q);
                const float *in[OP_MAX_INPUTS];
                for (int k = 0; k < t.nleaf; k++)
                    in[k] = t.val[k];
                struct backend_step st = {0};
                assert_int_equal(oracle_bound(&t.g, nd, bound, in, &st), 0);
                for (size_t i = 0; i < nd->count; i++) {
                    size_t m = sum_terms(&t, i, p, q);
                    double a = 0;
                    for (size_t j = 0; j < m; j++)
                        a += fabs((double)p[j] * q[j]);
                    double lim = 2 * (double)m * 0x1p-24 * a + (double)m * 0x1p-148;
                    lim *= 1 + 0x1p-40;
                    if (isfinite(bound[i]) && !(bound[i] <= lim))
                        fail_msg("%s[%zu]: bound %g > 2 m u sum|p q| + m 2^-148 = %g (m = %zu)",
                                 op_type_name(nd->type), i, bound[i], lim, m);
                }
                free(bound);
                free(p);
                free(q);
                bound_check(&t, "conv", &rt);
                tg_free(&t);
            }
    if (verbose)
        printf("convolutions: max error/bound %.3g mean %.3g (%ld, %ld infinite)\n", rt.max,
               rt.n ? rt.sum / rt.n : 0, rt.n, rt.inf);
}

/* ---- conv2d_bwd_data of m pairs ------------------------------------------------------ */

/* Float32 evaluations of t's conv2d_bwd_data from op.h's terms (sum_terms:
 * pair by pair, every pair with the same count of in-image terms, in the
 * same order), each product rounded to float32 and summed in float32 from
 * +0. Admissible: PAIR_RUN, one running sum over the pairs in order;
 * PAIR_SPLIT, each pair's own sum (what m single-pair ops give), the m sums
 * added last; PAIR_BACK, the running sum from the last pair (variant.c's
 * order). Wrong: PAIR_DROP leaves the last pair out; PAIR_MIX takes w_0 as
 * every pair's filter. */
enum pair_eval { PAIR_RUN, PAIR_SPLIT, PAIR_BACK, PAIR_DROP, PAIR_MIX };

static float *pair_eval(const struct tg *t, enum pair_eval how)
{
    const struct node *nd = tg_node(t);
    size_t cap = tg_termcap(t), m = (size_t)t->nleaf / 2;
    float *out = malloc((nd->count + 1) * sizeof *out);
    float *p = malloc(cap * sizeof *p), *q = malloc(cap * sizeof *q);
    assert_true(out && p && q);
    for (size_t i = 0; i < nd->count; i++) {
        size_t per = sum_terms(t, i, p, q) / m;
        float acc = 0.0f;
        for (size_t jj = 0; jj < m; jj++) {
            size_t j = how == PAIR_BACK ? m - 1 - jj : jj;
            if (how == PAIR_DROP && j == m - 1)
                continue;
            float part = 0.0f;
            for (size_t l = 0; l < per; l++) {
                float prod = p[j * per + l] * q[(how == PAIR_MIX ? 0 : j * per) + l];
                if (how == PAIR_SPLIT)
                    part += prod;
                else
                    acc += prod;
            }
            if (how == PAIR_SPLIT)
                acc += part;
        }
        out[i] = acc;
    }
    free(p);
    free(q);
    return out;
}

/* replay's class of got as t's op output: against oracle_op and oracle_bound. */
static enum replay_class pair_class(const struct tg *t, const float *got)
{
    const struct node *nd = tg_node(t);
    float *exact = tg_oracle(t, 0);
    double *bound = op_bound(t);
    struct replay_opcheck c;
    memset(&c, 0, sizeof c);
    replay_classify(got, exact, bound, nd->count, 0, &c);
    free(exact);
    free(bound);
    return c.cls;
}

/* oracle_op of t's m pairs is RN32 of the sum of the m single-pair ops'
 * exact values (each pair a one-op graph of its own, its reference exact),
 * added exactly here; and oracle_bound is at least M u A on every element,
 * M the in-image terms of all pairs and A the sum of their magnitudes (the
 * first term of gamma_M A: a bound that counted one pair's terms or
 * magnitudes only would fall below it). */
static void pairs_vs_single(const struct tg *t, const char *what)
{
    const struct node *nd = tg_node(t);
    size_t cnt = nd->count, cap = tg_termcap(t);
    float *orc = tg_oracle(t, 0), *p = malloc(cap * sizeof *p), *q = malloc(cap * sizeof *q);
    mpfr_t *sum = malloc(cnt * sizeof *sum), r;
    assert_true(p && q && sum);
    mpfr_init2(r, REF_PREC);
    for (size_t i = 0; i < cnt; i++) {
        mpfr_init2(sum[i], REF_PREC);
        mpfr_set_zero(sum[i], 1);
    }
    for (int j = 0; j < t->nleaf / 2; j++) {
        struct tg one;
        tg_init(&one);
        const uint32_t *ds = t->g.nodes[t->leaf[2 * j]].shape;
        const uint32_t *ws = t->g.nodes[t->leaf[2 * j + 1]].shape;
        img_leaf(&one, ds[0], ds[1], ds[2], ds[3], t->val[2 * j]);
        img_leaf(&one, ws[0], ws[1], ws[2], ws[3], t->val[2 * j + 1]);
        tg_opn(&one, OP_CONV2D_BWD_DATA, NULL, 4, nd->shape);
        for (size_t i = 0; i < cnt; i++) {
            long err;
            ref_elem(&one, i, r, &err);
            assert_true(err == LONG_MIN);
            if (j == 0)
                mpfr_set(sum[i], r, MPFR_RNDN);
            else
                X(mpfr_add(sum[i], sum[i], r, MPFR_RNDN));
        }
        tg_free(&one);
    }
    const float *in[OP_MAX_INPUTS];
    for (int k = 0; k < t->nleaf; k++)
        in[k] = t->val[k];
    double *bound = malloc((cnt + 1) * sizeof *bound);
    assert_non_null(bound);
    assert_int_equal(oracle_bound(&t->g, nd, bound, in, &(struct backend_step){0}), 0);
    for (size_t i = 0; i < cnt; i++) {
        float want = ref_round32(sum[i]);
        if (!same32(orc[i], want))
            fail_msg("%s [%zu] of %d pairs: oracle %a, the single pairs' exact sum rounds to %a",
                     what, i, t->nleaf / 2, (double)orc[i], (double)want);
        size_t mt = sum_terms(t, i, p, q);
        double a = 0;
        for (size_t l = 0; l < mt; l++)
            a += fabs((double)p[l] * q[l]);
        double floor = (double)mt * 0x1p-24 * a * (1 - 0x1p-40);
        if (isfinite(a) && !(bound[i] >= floor))
            fail_msg("%s [%zu] of %d pairs: bound %g < M u A = %g (M = %zu)", what, i,
                     t->nleaf / 2, bound[i], floor, mt);
        mpfr_clear(sum[i]);
    }
    mpfr_clear(r);
    free(sum);
    free(orc);
    free(p);
    free(q);
    free(bound);
}

/* conv2d_bwd_data of m = 1, 2, 3 (chosen values), 4 pairs (op.h): the
 * oracle rounds the sum over all pairs once (ops_check, pairs_vs_single);
 * oracle_bound admits the float32 groupings a kernel may use (pair_eval's,
 * the cpu's), and replay calls a result that drops a pair or mixes up the
 * filters SEMANTIC. Inputs: random, positive, wide, and pairs that cancel
 * each other (pair 2i + 1 = -(1 + 2^-20) pair 2i: the exact path). */
static void test_conv_pairs(void **state)
{
    (void)state;
    struct ratio rt = {0};
    /* 1 + 2^-24 + 2^-30 over three pairs of 1x1 images: rounded once it is
     * 1 + 2^-23; pair by pair in float32 the tie 1 + 2^-24 goes to 1, and so
     * does the rest: rounding, not SEMANTIC */
    static const float one[6] = {1.0f, 1.0f, 0x1p-24f, 1.0f, 0x1p-30f, 1.0f};
    struct tg t;
    tg_init(&t);
    for (int k = 0; k < 6; k++)
        img_leaf(&t, 1, 1, 1, 1, &one[k]);
    tg_opn(&t, OP_CONV2D_BWD_DATA, NULL, 4, (const uint32_t[]){1, 1, 1, 1});
    expect_out(&t, (const float[]){1 + 0x1p-23f}, "three pairs rounded once");
    float *v = pair_eval(&t, PAIR_RUN);
    assert_true(v[0] == 1.0f);
    bound_check_of(&t, v, "three pairs in float32", &rt);
    assert_int_equal(pair_class(&t, v), REPLAY_ROUNDING);
    free(v);
    tg_free(&t);
    static const int ms[] = {1, 2, 4};
    for (int mi = 0; mi < 3; mi++)
        for (int kind = 0; kind < 4; kind++)
            for (int rep = 0; rep < 3; rep++) {
                int m = ms[mi];
                static const enum dist dd[4] = {D_UNIT, D_POS, D_WIDE, D_UNIT};
                uint32_t N = 1 + (uint32_t)(r64() % 2), C = 1 + (uint32_t)(r64() % 3);
                uint32_t K = 1 + (uint32_t)(r64() % 3), H = 1 + (uint32_t)(r64() % 6);
                uint32_t W = 1 + (uint32_t)(r64() % 6), R = 1 + 2 * (uint32_t)(r64() % 3);
                uint32_t S = 1 + 2 * (uint32_t)(r64() % 3);
                tg_init(&t);
                tg_conv_bwd_data(&t, m, N, C, H, W, K, R, S, dd[kind], dd[kind]);
                for (int j = 1; kind == 3 && j < m; j += 2) /* pair j cancels pair j - 1 */
                    for (int k = 0; k < 2; k++)
                        for (size_t i = 0; i < tg_count(&t, 2 * j + k); i++)
                            t.val[2 * j + k][i] = t.val[2 * j - 2 + k][i] *
                                                  (k ? -(1 + 0x1p-20f) : 1.0f);
                ops_check(&t, "pairs");
                op_bound_same(&t, "pairs");
                pairs_vs_single(&t, "pairs");
                bound_check(&t, "pairs cpu", &rt);
                for (int how = PAIR_RUN; how <= PAIR_MIX; how++) {
                    if (how == PAIR_MIX && m == 1)
                        continue; /* one filter: nothing to mix up */
                    v = pair_eval(&t, (enum pair_eval)how);
                    enum replay_class cls = pair_class(&t, v);
                    if (how <= PAIR_BACK) {
                        bound_check_of(&t, v, "pairs float32", &rt);
                        assert_true(cls != REPLAY_SEMANTIC);
                    } else if (cls != REPLAY_SEMANTIC) {
                        fail_msg("%d pairs, kind %d: evaluation %d is wrong but %s", m, kind,
                                 how, replay_class_name(cls));
                    }
                    free(v);
                }
                tg_free(&t);
            }
    if (verbose)
        printf("conv2d_bwd_data pairs: max error/bound %.3g mean %.3g (%ld, %ld infinite)\n",
               rt.max, rt.n ? rt.sum / rt.n : 0, rt.n, rt.inf);
}

/* NaN, Inf, zeros and subnormals in the inputs of every op: where a bound is
 * finite the cpu's result must be a number within it (exact ops: NaN and Inf
 * must match), so a missed +Inf (a NaN the cpu makes from a padded term,
 * say) fails here. */
static void test_bounds_special(void **state)
{
    (void)state;
    static const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 0x1p-149f, -0x1p-140f,
                               FLT_MAX, 1.0f, -1.0f, 0.5f};
    struct ratio rt = {0};
    for (size_t o = 0; o < OPS_N; o++)
        for (int rep = 0; rep < 8; rep++) {
            struct tg t;
            tg_make(&t, ops_all[o], rep % 2 ? D_UNIT : D_WIDE, 1 + (uint32_t)(r64() % 60));
            for (int k = 0; k < t.nleaf; k++)
                for (size_t i = 0; i < tg_count(&t, k); i++)
                    if (r64() % 7 == 0)
                        t.val[k][i] = sp[r64() % (sizeof sp / sizeof sp[0])];
            bound_check(&t, "special", &rt);
            tg_free(&t);
        }
}

/* One elementwise op over values v (and dy, when not NULL) of count n. */
static void elem_graph(struct tg *t, enum op_type ty, const union op_params *p, const float *v,
                       const float *dy, size_t n)
{
    tg_init(t);
    tg_leaf(t, (uint32_t)n, 0);
    memcpy(t->val[0], v, n * sizeof *v);
    if (dy) {
        tg_leaf(t, (uint32_t)n, 0);
        memcpy(t->val[1], dy, n * sizeof *dy);
    }
    tg_op(t, ty, p, (uint32_t)n, 0);
}

/* The new ops' hard cases: cancellation and subnormal products in the
 * convolutions, long channel sums, hard_sigmoid across its clip points,
 * satlu at its bound, mean near overflow and cancelling. */
static void test_bounds_adversarial_image(void **state)
{
    (void)state;
    struct ratio rt = {0};
    struct tg t;
    /* conv2d: channel 1 cancels channel 0 to 2^-20 of it; then subnormal products */
    tg_init(&t);
    int x = tg_image(&t, 2, 2, 7, 6, D_UNIT), w = tg_image(&t, 3, 2, 3, 3, D_POS);
    for (size_t n = 0; n < 2; n++)
        for (size_t j = 0; j < 42; j++)
            t.val[0][(n * 2 + 1) * 42 + j] = -t.val[0][n * 2 * 42 + j] * (1 + 0x1p-20f);
    for (size_t k = 0; k < 3; k++)
        for (size_t j = 0; j < 9; j++)
            t.val[1][(k * 2 + 1) * 9 + j] = t.val[1][k * 2 * 9 + j];
    t.op = graph_conv2d(&t.g, "op", x, w);
    bound_check(&t, "conv2d cancellation", &rt);
    ops_check(&t, "conv2d cancellation");
    for (size_t i = 0; i < tg_count(&t, 0); i++)
        t.val[0][i] *= 0x1p-128f;
    bound_check(&t, "conv2d subnormal", &rt);
    ops_check(&t, "conv2d subnormal");
    tg_free(&t);
    /* bwd_data and bwd_filter with dy of alternating sign over 2 x 16 x 16 */
    for (int ty = 0; ty < 2; ty++) {
        tg_init(&t);
        if (ty == 0) {
            tg_image(&t, 2, 3, 16, 16, D_POS);
            tg_image(&t, 3, 2, 5, 3, D_POS);
        } else {
            tg_image(&t, 2, 2, 16, 16, D_POS);
            tg_image(&t, 2, 3, 16, 16, D_POS);
        }
        int dyk = ty == 0 ? 0 : 1;
        for (size_t i = 0; i < tg_count(&t, dyk); i++)
            t.val[dyk][i] *= (i % 2 ? -1.0f : 1.0f) * (i % 5 == 0 ? 0x1p-20f : 1.0f);
        union op_params p = {.conv = {5, 3}};
        tg_opn(&t, ty == 0 ? OP_CONV2D_BWD_DATA : OP_CONV2D_BWD_FILTER, &p, 4,
               ty == 0 ? (const uint32_t[]){2, 2, 16, 16} : (const uint32_t[]){3, 2, 5, 3});
        bound_check(&t, "conv bwd cancellation", &rt);
        ops_check(&t, "conv bwd cancellation");
        tg_free(&t);
    }
    /* bias_grad over 4 x 32 x 32 per channel; upsample2_bwd cancelling */
    tg_init(&t);
    tg_image(&t, 4, 3, 32, 32, D_UNIT);
    tg_opn(&t, OP_BIAS_GRAD, NULL, 1, (const uint32_t[]){3});
    bound_check(&t, "bias_grad 4096", &rt);
    ops_check(&t, "bias_grad 4096");
    tg_free(&t);
    tg_init(&t);
    tg_image(&t, 1, 2, 8, 8, D_MANT);
    for (size_t i = 0; i < 128; i += 2)
        t.val[0][i + 1] = -t.val[0][i] * (1 - 0x1p-22f) + (float)runif(-0x1p-20, 0x1p-20);
    tg_opn(&t, OP_UPSAMPLE2_BWD, NULL, 4, (const uint32_t[]){1, 2, 4, 4});
    bound_check(&t, "upsample2_bwd cancellation", &rt);
    ops_check(&t, "upsample2_bwd cancellation");
    tg_free(&t);
    /* hard_sigmoid and its bwd: 600 floats on each side of -2.5 and 2.5 and of 0 */
    float v[3600], dy[3600];
    const float centre[3] = {-2.5f, 2.5f, 0.0f};
    for (int c = 0; c < 3; c++) {
        float a = centre[c], b = centre[c];
        for (int j = 0; j < 600; j++) {
            v[c * 1200 + 2 * j] = a = nextafterf(a, -INFINITY);
            v[c * 1200 + 2 * j + 1] = b = nextafterf(b, INFINITY);
        }
    }
    for (int i = 0; i < 3600; i++)
        dy[i] = rfloat(i % 2 ? D_UNIT : D_WIDE);
    elem_graph(&t, OP_HARD_SIGMOID, NULL, v, NULL, 3600);
    bound_check(&t, "hard_sigmoid clip points", &rt);
    ops_check(&t, "hard_sigmoid clip points");
    tg_free(&t);
    elem_graph(&t, OP_HARD_SIGMOID_BWD, NULL, v, dy, 3600);
    bound_check(&t, "hard_sigmoid_bwd clip points", &rt);
    ops_check(&t, "hard_sigmoid_bwd clip points");
    tg_free(&t);
    /* satlu at its bound */
    static const float ms[] = {0.0f, -0.0f, 1.0f, -0.5f, 6.0f};
    for (size_t k = 0; k < 5; k++) {
        float m = ms[k], sv[6] = {m, nextafterf(m, -1), nextafterf(m, 7), 0.0f, -0.0f, NAN};
        union op_params p = {.satlu = {m}};
        for (int b = 0; b < 2; b++) {
            elem_graph(&t, b ? OP_SATLU_BWD : OP_SATLU, &p, sv, b ? dy : NULL, 6);
            bound_check(&t, "satlu bound", &rt);
            ops_check(&t, "satlu bound");
            tg_free(&t);
        }
    }
    /* mean: 10^5 terms; cancelling pairs; near FLT_MAX and past it (the
     * bound must be +Inf); small terms that the cpu's double sum loses next
     * to +-2^60 (its error bound counts) */
    static float big[100000];
    for (int c = 0; c < 5; c++) {
        for (size_t i = 0; i < 100000; i++)
            big[i] = c == 0 ? rfloat(D_UNIT)
                   : c == 1 ? (i % 2 ? -big[i - 1] * (1 + 0x1p-21f) : rfloat(D_WIDE))
                   : c == 2 || c == 3 ? FLT_MAX * (float)runif(0.99, 1)
                            : i % 2 ? rfloat(D_UNIT) : i % 4 ? -0x1p60f : 0x1p60f;
        union op_params p = {.mean = {c == 2 ? 0.999f : c == 3 ? 1.5f : 1.0f / 3}};
        tg_init(&t);
        tg_leaf(&t, 100000, 0);
        memcpy(t.val[0], big, sizeof big);
        tg_op(&t, OP_MEAN, &p, 1, 0);
        bound_check(&t, "mean 1e5", &rt);
        ops_check(&t, "mean 1e5");
        tg_free(&t);
    }
    if (verbose)
        printf("adversarial image ops: max error/bound %.3g mean %.3g (%ld, %ld infinite)\n",
               rt.max, rt.n ? rt.sum / rt.n : 0, rt.n, rt.inf);
}

int main(void)
{
    const char *v = getenv("TEST_ORACLE_VERBOSE");
    verbose = v && *v && strcmp(v, "0") != 0;
    unsetenv("DIVTRACE_ORACLE_EXACT");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_leaves),
        cmocka_unit_test(test_ops_random),
        cmocka_unit_test(test_ops_special),
        cmocka_unit_test(test_conv_paths),
        cmocka_unit_test(test_ops_ties),
        cmocka_unit_test(test_ops_cases),
        cmocka_unit_test(test_ops_hard),
        cmocka_unit_test(test_image_cases),
        cmocka_unit_test(test_elementwise_cases),
        cmocka_unit_test(test_adam_p_ties),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_bounds_adversarial),
        cmocka_unit_test(test_bounds_conv),
        cmocka_unit_test(test_conv_pairs),
        cmocka_unit_test(test_bounds_special),
        cmocka_unit_test(test_bounds_adversarial_image),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
