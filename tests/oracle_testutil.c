/* oracle_testutil.c: helpers shared by the oracle tests: the reference
 * rounding (MPFR's emulation of subnormals), random inputs from a fixed
 * seed, and random one-op graphs (see oracle_testutil.h). */
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

#include "graph.h"
#include "oracle_testutil.h"
#include "test_util.h"

/* ---- reference rounding: MPFR's emulation of subnormals --------------------- */

/* RN to p bits with exponents emin..emax (MPFR convention: 0.1b * 2^e):
 * round in the full range first, then check_range and subnormalize, which
 * use the ternary value, so nothing is rounded twice. */
double ref_round(mpfr_srcptr x, mpfr_prec_t p, mpfr_exp_t emin, mpfr_exp_t emax)
{
    mpfr_t r;
    mpfr_init2(r, p);
    int t = mpfr_set(r, x, MPFR_RNDN);
    mpfr_exp_t omin = mpfr_get_emin(), omax = mpfr_get_emax();
    mpfr_set_emin(emin);
    mpfr_set_emax(emax);
    t = mpfr_check_range(r, t, MPFR_RNDN);
    mpfr_subnormalize(r, t, MPFR_RNDN);
    double d = mpfr_get_d(r, MPFR_RNDN); /* exact: r is a binary32 or binary64 value */
    mpfr_set_emin(omin);
    mpfr_set_emax(omax);
    mpfr_clear(r);
    return d;
}

float ref_round32(mpfr_srcptr x) { return (float)ref_round(x, 24, -148, 128); }
double ref_round64(mpfr_srcptr x) { return ref_round(x, 53, -1073, 1024); }

/* Bitwise equality, NaN equal to any NaN. */
int same32(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

int same64(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

/* RN32 of a value known as r with |r - exact| <= 2^err_exp (err_exp = LONG_MIN:
 * r is exact); fails the test when the error leaves the rounding undecided. */
float ref_decide32(mpfr_srcptr r, long err_exp, const char *what)
{
    if (err_exp == LONG_MIN || !mpfr_number_p(r))
        return ref_round32(r);
    mpfr_t lo, hi;
    mpfr_inits2(REF_PREC * 2, lo, hi, (mpfr_ptr)0);
    mpfr_set(lo, r, MPFR_RNDN);
    mpfr_set(hi, r, MPFR_RNDN);
    mpfr_t e;
    mpfr_init2(e, 2);
    mpfr_set_ui_2exp(e, 1, err_exp, MPFR_RNDN);
    mpfr_sub(lo, lo, e, MPFR_RNDN);
    mpfr_add(hi, hi, e, MPFR_RNDN);
    float a = ref_round32(lo), b = ref_round32(hi);
    mpfr_clears(lo, hi, e, (mpfr_ptr)0);
    if (!same32(a, b))
        fail_msg("%s: reference rounding undecided", what);
    return a;
}

float bits32(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

double bits64(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

/* ---- random inputs ---------------------------------------------------------- */

static uint64_t rng = 0x5eed;

uint64_t r64(void) { return tu_rand_u64(&rng); }
double runif(double lo, double hi) { return tu_rand_uniform(&rng, lo, hi); }

float rfloat(enum dist d)
{
    switch (d) {
    case D_UNIT:
        return (float)runif(-1, 1);
    /* one draw a statement: the order in which the operands of one
     * expression are evaluated is the compiler's choice, and gcc and clang
     * choose differently, which would give each its own cases */
    case D_WIDE: {
        double m = runif(1, 2);
        int e = (int)(r64() % 81) - 40;
        return (float)(ldexp(m, e) * (r64() & 1 ? -1 : 1));
    }
    case D_ALL: {
        uint32_t b;
        do
            b = (uint32_t)r64();
        while (((b >> 23) & 0xff) == 0xff);
        return bits32(b);
    }
    case D_FEW: {
        int m = (int)(r64() % 511) - 255;
        int e = (int)(r64() % 21) - 10;
        return (float)ldexp((double)m, e);
    }
    case D_POS:
        return (float)runif(0x1p-20, 1);
    case D_MANT: {
        float m = (float)runif(1, 2);
        return m * (r64() & 1 ? -1.0f : 1.0f);
    }
    default:
        return 0;
    }
}

/* A random double over the whole range (subnormals, huge, either sign). */
double rdouble(void)
{
    uint64_t b;
    do {
        b = r64();
        int k = (int)(r64() % 4);
        if (k == 0) /* near 1 */
            b = (b & 0x800fffffffffffffull) | ((uint64_t)(1023 + (int)(r64() % 80) - 40) << 52);
        else if (k == 1) /* subnormal */
            b &= 0x800fffffffffffffull;
    } while (((b >> 52) & 0x7ff) == 0x7ff);
    return bits64(b);
}

/* ---- one-op graphs ------------------------------------------------------------------ */

void tg_init(struct tg *t)
{
    memset(t, 0, sizeof *t);
    graph_init(&t->g);
}

void tg_free(struct tg *t)
{
    for (int k = 0; k < t->nleaf; k++)
        free(t->val[k]);
    graph_free(&t->g);
}

/* An input leaf of shape (d0) or (d0, d1), values left to the caller. */
int tg_leaf(struct tg *t, uint32_t d0, uint32_t d1)
{
    uint32_t shape[2] = {d0, d1};
    return tg_leafn(t, d1 ? 2 : 1, shape);
}

int tg_leafn(struct tg *t, int ndim, const uint32_t *shape)
{
    char name[16];
    snprintf(name, sizeof name, "in%d", t->nleaf);
    int i = graph_input(&t->g, name, ndim, shape);
    t->leaf[t->nleaf] = i;
    t->val[t->nleaf] = calloc(t->g.nodes[i].count + 1, sizeof(float));
    assert_non_null(t->val[t->nleaf]);
    t->nleaf++;
    return i;
}

/* The op node over every leaf (graph.h builds only the forward ops, so the
 * node is a leaf turned into the op). */
void tg_op(struct tg *t, enum op_type ty, const union op_params *p, uint32_t d0, uint32_t d1)
{
    uint32_t shape[2] = {d0, d1};
    tg_opn(t, ty, p, d1 ? 2 : 1, shape);
}

void tg_opn(struct tg *t, enum op_type ty, const union op_params *p, int ndim,
            const uint32_t *shape)
{
    int i = graph_input(&t->g, "op", ndim, shape);
    struct node *nd = &t->g.nodes[i];
    nd->type = ty;
    nd->kind = TRACE_KIND_FORWARD;
    nd->ninputs = t->nleaf;
    for (int k = 0; k < t->nleaf; k++)
        nd->inputs[k] = t->leaf[k];
    if (p)
        nd->p = *p;
    t->op = i;
}

const struct node *tg_node(const struct tg *t) { return &t->g.nodes[t->op]; }
size_t tg_count(const struct tg *t, int k) { return t->g.nodes[t->leaf[k]].count; }

void tg_fill(struct tg *t, int k, enum dist d)
{
    for (size_t i = 0; i < tg_count(t, k); i++)
        t->val[k][i] = rfloat(d);
}

static float pick(const float *v, size_t n) { return v[r64() % n]; }

static uint32_t rdim(uint32_t lo, uint32_t hi) { return lo + (uint32_t)(r64() % (hi - lo + 1)); }

/* An image leaf (a, b, c, e) filled from d. */
int tg_image(struct tg *t, uint32_t a, uint32_t b, uint32_t c, uint32_t e, enum dist d)
{
    uint32_t shape[4] = {a, b, c, e};
    int i = tg_leafn(t, 4, shape);
    tg_fill(t, t->nleaf - 1, d);
    return i;
}

/* conv2d_bwd_data of m pairs (op.h): dy_j (N,K,H,W) from d, w_j (K,C,R,S)
 * from d2, leaves dy_0, w_0, dy_1, ..., and the op over them. */
void tg_conv_bwd_data(struct tg *t, int m, uint32_t N, uint32_t C, uint32_t H, uint32_t W,
                      uint32_t K, uint32_t R, uint32_t S, enum dist d, enum dist d2)
{
    for (int j = 0; j < m; j++) {
        tg_image(t, N, K, H, W, d);
        tg_image(t, K, C, R, S, d2);
    }
    uint32_t shape[4] = {N, C, H, W};
    tg_opn(t, OP_CONV2D_BWD_DATA, NULL, 4, shape);
}

/* The image ops of tg_make, and add_bias / bias_grad of rank 4 (half the
 * time): small random shapes, kernels 1, 3 or 5 (wider than some images),
 * n bounding the element count roughly. 1 when made. */
static int tg_make_image(struct tg *t, enum op_type ty, enum dist d, uint32_t n)
{
    union op_params p;
    memset(&p, 0, sizeof p);
    uint32_t N = rdim(1, 2), C = rdim(1, 4), K = rdim(1, 4), H = rdim(1, 6), W = rdim(1, 6);
    uint32_t R = 1 + 2 * rdim(0, 2), S = 1 + 2 * rdim(0, 2);
    if (n < 40) /* small: 1x1 images and 1x1 kernels come up */
        H = rdim(1, 3), W = rdim(1, 3), C = rdim(1, 2);
    enum dist d2 = d == D_ALL ? D_WIDE : d; /* products of two D_ALL floats overflow */
    switch (ty) {
    case OP_ADD_BIAS:
    case OP_BIAS_GRAD:
        if (r64() % 2)
            return 0;
        if (ty == OP_BIAS_GRAD) {
            tg_image(t, N, C, H + n / 40, W, d);
            uint32_t c = C;
            tg_opn(t, ty, &p, 1, &c);
        } else {
            int x = tg_image(t, N, C, H, W, d);
            int b = tg_leaf(t, C, 0);
            tg_fill(t, 1, d);
            t->op = graph_add_bias(&t->g, "op", x, b);
        }
        return 1;
    case OP_CONV2D: {
        int x = tg_image(t, N, C, H, W, d), w = tg_image(t, K, C, R, S, d2);
        t->op = graph_conv2d(&t->g, "op", x, w);
        return 1;
    }
    case OP_CONV2D_BWD_DATA: /* 1 to OP_MAX_INPUTS / 2 pairs */
        tg_conv_bwd_data(t, (int)rdim(1, OP_MAX_INPUTS / 2), N, C, H, W, K, R, S, d, d2);
        return 1;
    case OP_CONV2D_BWD_FILTER: {
        tg_image(t, N, C, H, W, d);
        tg_image(t, N, K, H, W, d2);
        p.conv.r = R;
        p.conv.s = S;
        uint32_t shape[4] = {K, C, R, S};
        tg_opn(t, ty, &p, 4, shape);
        return 1;
    }
    case OP_MAXPOOL2:
    case OP_MAXPOOL2_BWD: {
        int x = tg_image(t, N, C, 2 * H, 2 * W, d);
        if (d == D_FEW || r64() % 4 == 0) /* ties, -0 and +0 */
            for (size_t i = 0; i < tg_count(t, 0); i++)
                t->val[0][i] = (float[]){0.0f, -0.0f, 1.0f, -1.0f, 2.0f}[r64() % 5];
        if (ty == OP_MAXPOOL2) {
            t->op = graph_maxpool2(&t->g, "op", x);
        } else {
            tg_image(t, N, C, H, W, d);
            uint32_t shape[4] = {N, C, 2 * H, 2 * W};
            tg_opn(t, ty, &p, 4, shape);
        }
        return 1;
    }
    case OP_UPSAMPLE2:
        t->op = graph_upsample2(&t->g, "op", tg_image(t, N, C, H, W, d));
        return 1;
    case OP_UPSAMPLE2_BWD: {
        tg_image(t, N, C, 2 * H, 2 * W, d);
        uint32_t shape[4] = {N, C, H, W};
        tg_opn(t, ty, &p, 4, shape);
        return 1;
    }
    case OP_CONCAT: {
        int xs[OP_MAX_INPUTS], m = (int)rdim(1, OP_MAX_INPUTS);
        for (int k = 0; k < m; k++)
            xs[k] = tg_image(t, N, rdim(1, 3), H, W, d);
        t->op = graph_concat(&t->g, "op", m, xs);
        return 1;
    }
    case OP_SLICE:
    case OP_SLICE_BWD: {
        uint32_t total = rdim(1, 6), c0 = (uint32_t)(r64() % total), cn = rdim(1, total - c0);
        if (ty == OP_SLICE) {
            t->op = graph_slice(&t->g, "op", tg_image(t, N, total, H, W, d), c0, cn);
        } else {
            tg_image(t, N, cn, H, W, d);
            p.slice.c0 = c0;
            p.slice.n = cn;
            p.slice.total = total;
            uint32_t shape[4] = {N, total, H, W};
            tg_opn(t, ty, &p, 4, shape);
        }
        return 1;
    }
    case OP_MEAN:
    case OP_MEAN_BWD: {
        static const float scales[] = {1.0f, 0.5f, -2.0f, 1.0f / 3, 10.0f, 0x1p-100f};
        p.mean.scale = r64() % 4 ? pick(scales, 6) : rfloat(d);
        uint32_t one = 1;
        tg_leaf(t, ty == OP_MEAN ? n : 1, 0);
        tg_fill(t, 0, d);
        if (ty == OP_MEAN)
            tg_opn(t, ty, &p, 1, &one);
        else
            tg_op(t, ty, &p, n, 0);
        return 1;
    }
    default:
        return 0;
    }
}

/* A random instance of op ty: shapes, parameters and inputs from d. */
void tg_make(struct tg *t, enum op_type ty, enum dist d, uint32_t n)
{
    tg_init(t);
    union op_params p;
    memset(&p, 0, sizeof p);
    static const float lrs[] = {0.01f, 1e-3f, 0.5f, 1.0f, 3.0f, 0.1f};
    static const float b1s[] = {0.9f, 0.5f, 0.75f, 0.99f, 0.0f};
    static const float b2s[] = {0.999f, 0.5f, 0.9375f, 0.99f};
    static const float epss[] = {1e-8f, 0.0f, 1e-3f, 1e-6f};
    t->step = (uint64_t[]){0, 1, 9, 999}[r64() % 4];
    switch (ty) {
    case OP_MATMUL: {
        uint32_t m = 1 + (uint32_t)(r64() % 6), k = 1 + (uint32_t)(r64() % (n + 1)),
                 nn = 1 + (uint32_t)(r64() % 6);
        int ta = (int)(r64() % 2), tb = (int)(r64() % 2);
        int a = ta ? tg_leaf(t, k, m) : tg_leaf(t, m, k);
        int b = tb ? tg_leaf(t, nn, k) : tg_leaf(t, k, nn);
        tg_fill(t, 0, d);
        tg_fill(t, 1, d == D_ALL ? D_WIDE : d);
        t->op = graph_matmul(&t->g, "op", a, b, ta, tb);
        return;
    }
    case OP_ADD_BIAS: {
        uint32_t f = 1 + (uint32_t)(r64() % 7);
        int x = tg_leaf(t, 1 + n / f, f), b = tg_leaf(t, f, 0);
        tg_fill(t, 0, d);
        tg_fill(t, 1, d);
        t->op = graph_add_bias(&t->g, "op", x, b);
        return;
    }
    case OP_BIAS_GRAD: {
        uint32_t f = 1 + (uint32_t)(r64() % 7);
        tg_leaf(t, 1 + n / f, f);
        tg_fill(t, 0, d);
        tg_op(t, ty, &p, f, 0);
        return;
    }
    case OP_MSE:
        tg_leaf(t, n, 0);
        tg_leaf(t, n, 0);
        tg_fill(t, 0, d);
        tg_fill(t, 1, d);
        tg_op(t, ty, &p, 1, 0);
        return;
    case OP_MSE_BWD:
        tg_leaf(t, n, 0);
        tg_leaf(t, n, 0);
        tg_fill(t, 0, d);
        tg_fill(t, 1, d);
        if (r64() % 2) {
            tg_leaf(t, 1, 0);
            tg_fill(t, 2, d);
        }
        tg_op(t, ty, &p, n, 0);
        return;
    case OP_FILL:
        p.fill.value = rfloat(d);
        tg_op(t, ty, &p, n, 0);
        return;
    default:
        if (tg_make_image(t, ty, d, n))
            return;
        break;
    }
    int nin = ty == OP_SIGMOID || ty == OP_TANH || ty == OP_RELU || ty == OP_NEG ||
              ty == OP_HARD_SIGMOID || ty == OP_SATLU ? 1 : ty == OP_ADAM_P ? 3 : 2;
    for (int k = 0; k < nin; k++) {
        tg_leaf(t, n, 0);
        tg_fill(t, k, d);
    }
    switch (ty) {
    case OP_SIGMOID_BWD: /* y a sigmoid output */
        tg_fill(t, 0, d == D_ALL || d == D_FEW ? d : D_POS);
        break;
    case OP_TANH_BWD: /* y a tanh output, some near +-1 where 1 - y^2 cancels */
        for (size_t i = 0; i < n; i++) {
            if (d == D_ALL || d == D_FEW)
                continue;
            if (r64() % 3) {
                t->val[0][i] = (float)runif(-1, 1);
            } else {
                float y = 1 - (float)(r64() % 64) * 0x1p-24f;
                t->val[0][i] = y * (r64() % 2 ? 1 : -1);
            }
        }
        break;
    case OP_ADAM_V:
        for (size_t i = 0; i < n; i++)
            t->val[0][i] = fabsf(t->val[0][i]) * (d == D_UNIT ? 1e-3f : 1);
        break;
    case OP_ADAM_P:
        for (size_t i = 0; i < n; i++)
            t->val[2][i] = d == D_UNIT ? t->val[1][i] * t->val[1][i] : fabsf(t->val[2][i]);
        break;
    default:
        break;
    }
    if (ty == OP_HARD_SIGMOID || ty == OP_HARD_SIGMOID_BWD) /* both sides of the clip */
        for (size_t i = 0; i < n; i++)
            t->val[0][i] *= d == D_UNIT || d == D_POS || d == D_MANT ? 3.5f : 1.0f;
    if (ty == OP_SATLU || ty == OP_SATLU_BWD) /* some x at the bound */
        p.satlu.max = r64() % 2 ? t->val[0][r64() % n]
                                : (float[]){0.0f, 1.0f, 6.0f, -0.5f}[r64() % 4];
    if (ty == OP_SGD)
        p.sgd.lr = pick(lrs, 6);
    if (ty == OP_MOMENTUM)
        p.momentum.mu = r64() % 2 ? 0.9f : (float)runif(0, 1);
    if (ty == OP_ADAM_M || ty == OP_ADAM_V || ty == OP_ADAM_P) {
        p.adam.lr = pick(lrs, 6);
        p.adam.b1 = r64() % 4 ? pick(b1s, 5) : (float)runif(0, 1);
        p.adam.b2 = r64() % 4 ? pick(b2s, 4) : (float)runif(0, 1);
        p.adam.eps = pick(epss, 4);
    }
    tg_op(t, ty, &p, n, 0);
}
