/* test_oracle_ops_ref.c: test_oracle_ops's reference: every op's element
 * evaluated with MPFR from op.h's formula, and the checks of oracle_op (both
 * modes, and oracle_op_bound) against it that the tests share. */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mpfr.h>

#include "backend.h"
#include "graph.h"
#include "oracle.h"
#include "oracle_testutil.h"
#include "test_oracle_ops.h"

/* ---- the reference evaluation of one element ------------------------------------------
 * r = the exact value of element i (err = LONG_MIN), or an approximation
 * with |r - exact| <= 2^err. Every rational step is checked exact. */

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
size_t sum_terms(const struct tg *t, size_t i, float *p, float *q)
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
size_t tg_termcap(const struct tg *t)
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
float ref_hs_t(float x)
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

void ref_elem(const struct tg *t, size_t i, mpfr_t r, long *err)
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
float *tg_oracle(const struct tg *t, int exact)
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
long ops_check(const struct tg *t, const char *what)
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
void op_bound_same(const struct tg *t, const char *what)
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

/* An image leaf of shape (a, b, c, d) holding v. */
int img_leaf(struct tg *t, uint32_t a, uint32_t b, uint32_t c, uint32_t d, const float *v)
{
    uint32_t shape[4] = {a, b, c, d};
    int i = tg_leafn(t, 4, shape);
    memcpy(t->val[t->nleaf - 1], v, tg_count(t, t->nleaf - 1) * sizeof *v);
    return i;
}

/* oracle_op on t (both paths checked against the reference) equals want. */
void expect_out(const struct tg *t, const float *want, const char *what)
{
    ops_check(t, what);
    float *o = tg_oracle(t, 0);
    for (size_t i = 0; i < tg_node(t)->count; i++)
        if (!same32(o[i], want[i]))
            fail_msg("%s[%zu] = %a, want %a", what, i, (double)o[i], (double)want[i]);
    free(o);
}
