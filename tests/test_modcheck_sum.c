/* test_modcheck_sum.c: the module checks built on sums of products
 * (reference/modcheck_sum.c: linear, conv1d, conv2d, mseloss): exact values
 * against hand-derived ones and against an MPFR evaluation of each
 * definition written here; float32 evaluations of the admissible forms
 * (orders, FMA, double accumulation, TF32) within bounds; planted bugs
 * beyond them (SEMANTIC); malformed specs and tensors refused.
 * test_modcheck_norm.c checks the normalizing modules on the same harness.
 * TEST_MODCHECK_VERBOSE=1 prints the largest ratio of each evaluation. */
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

#include "modcheck.h"
#include "replay.h"
#include "test_util.h"
#include "util.h"
#include "modcheck_testutil.h"

static const char *sum_name[SUM_N] = {"forward", "reverse", "pairwise", "double"};

/* TF32: the 13 low bits cut (truncation, what tensor cores may do). */
static float tf32(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    b &= 0xffffe000u;
    memcpy(&x, &b, sizeof b);
    return x;
}

/* ---- linear ------------------------------------------------------------------------------ */

struct lin {
    size_t R, O, I;
    float *x, *w, *b;
};

static void ref_lin(mpfr_prec_t p, const void *ctx, size_t e, mpfr_t out)
{
    const struct lin *L = ctx;
    size_t r = e / L->O, j = e % L->O;
    mpfr_t t;
    mpfr_init2(t, p);
    mpfr_set_flt(out, L->b ? L->b[j] : 0.0f, MPFR_RNDN);
    for (size_t k = 0; k < L->I; k++) {
        mpfr_set_flt(t, L->x[r * L->I + k], MPFR_RNDN);
        mpfr_mul_d(t, t, L->w[j * L->I + k], MPFR_RNDN);
        mpfr_add(out, out, t, MPFR_RNDN);
    }
    mpfr_clear(t);
}

/* y = x W^T + b in float32: products in order `how`, with FMA, TF32, bias
 * first (bfirst) or last, or the planted bugs: transposed W, bias dropped. */
static void eval_lin(const struct lin *L, float *y, int how, int fma_, int t32, int bfirst, int bug)
{
    float *p = malloc((L->I + 1) * sizeof *p);
    for (size_t r = 0; r < L->R; r++)
        for (size_t j = 0; j < L->O; j++) {
            float b = L->b && bug != 2 ? L->b[j] : 0.0f, s = bfirst ? b : 0.0f;
            for (size_t k = 0; k < L->I; k++) {
                float a = L->x[r * L->I + k], w = bug == 1 ? L->w[k * L->I + j] : L->w[j * L->I + k];
                if (t32)
                    a = tf32(a), w = tf32(w);
                p[k] = a * w;
                s = fma_ ? fmaf(a, w, s) : s + p[k];
            }
            y[r * L->O + j] = fma_ ? (bfirst ? s : s + b) : sumf(p, L->I, how) + b;
        }
    free(p);
}

static void test_linear(void **state)
{
    (void)state;
    /* hand: x = (1, 2), W = ((3, 4), (0.5, -1)), b = (0.25, 1): 11.25, -0.5 */
    float x0[2] = {1, 2}, w0[4] = {3, 4, 0.5f, -1}, b0[2] = {0.25f, 1}, y0[2], ex[64];
    struct tset s = {0};
    ts_add(&s, "in.0", x0, 1, SH(2));
    ts_add(&s, "param.weight", w0, 2, SH(2, 2));
    ts_add(&s, "param.bias", b0, 1, SH(2));
    ts_add(&s, "out", y0, 1, SH(2));
    exact_of("linear", &s, ex);
    assert_true(ex[0] == 11.25f && ex[1] == -0.5f);
    /* random, against MPFR, then the evaluations */
    enum { R = 3, O = 6, I = 24 };
    static float x[R * I], w[O * I], b[O], y[R * O];
    fill(x, R * I, -1, 1);
    fill(w, O * I, -1, 1);
    fill(b, O, -1, 1);
    struct lin L = {R, O, I, x, w, b};
    struct tset t = {0};
    ts_add(&t, "in.0", x, 2, SH(R, I));
    ts_add(&t, "param.weight", w, 2, SH(O, I));
    ts_add(&t, "param.bias", b, 1, SH(O));
    ts_add(&t, "out", y, 2, SH(R, O));
    exact_of("linear", &t, ex);
    against_ref(ex, R * O, ref_lin, &L, 0);
    for (int how = 0; how < SUM_N; how++)
        for (int bf = 0; bf < 2; bf++) {
            eval_lin(&L, y, how, 0, 0, bf, 0);
            ADMITTED("linear", &t, y, sum_name[how]);
        }
    eval_lin(&L, y, 0, 1, 0, 1, 0);
    ADMITTED("linear", &t, y, "fma, bias first");
    eval_lin(&L, y, 0, 1, 0, 0, 0);
    ADMITTED("linear", &t, y, "fma, bias last");
    eval_lin(&L, y, 0, 1, 1, 0, 0);
    ADMITTED("linear tf32=1", &t, y, "tf32 inputs");
    SEMANTIC("linear", &t, y, "tf32 inputs held to float32");
    eval_lin(&L, y, SUM_PAIR, 0, 0, 0, 2);
    SEMANTIC("linear", &t, y, "bias dropped");
    struct lin Q = {R, I, I, x, w, b}; /* square W: W instead of W^T */
    static float wq[I * I], yq[R * I];
    fill(wq, I * I, -1, 1);
    Q.w = wq;
    struct tset q = {0}; /* and no bias */
    ts_add(&q, "in.0", x, 2, SH(R, I));
    ts_add(&q, "param.weight", wq, 2, SH(I, I));
    ts_add(&q, "out", yq, 2, SH(R, I));
    Q.b = NULL;
    eval_lin(&Q, yq, SUM_FWD, 0, 0, 0, 0);
    ADMITTED("linear", &q, yq, "no bias");
    eval_lin(&Q, yq, SUM_FWD, 0, 0, 0, 1);
    SEMANTIC("linear", &q, yq, "W not transposed");
    /* a NaN input: no claim on its row (+Inf), the others still bounded */
    float xn[2] = {NAN, 1};
    s.t[0].data = xn;
    struct modcheck_result r;
    run_ok("linear", &s, &r);
    assert_true(isinf(r.out[0].bound[0]) && isnan(r.out[0].exact[0]));
    modcheck_result_free(&r);
}

/* ---- convolutions ------------------------------------------------------------------------ */

struct conv {
    int64_t N, C, H, W, K, G, R, S, sh, sw, ph, pw, dh, dw, Ho, Wo;
    const float *x, *w, *b;
};

/* One output element by the definition: the taps in order (rev: reversed),
 * terms added in float32 (dbl: in double; mp: into out, exactly). Bugs: 1
 * padding off by one, 2 dilation 1, 3 groups mixed, 4 bias dropped. */
static float conv_elem(const struct conv *c, size_t e, int rev, int dbl, int bug, mpfr_ptr mp)
{
    int64_t ow = (int64_t)e % c->Wo, oh = (int64_t)e / c->Wo % c->Ho;
    int64_t k = (int64_t)e / (c->Wo * c->Ho) % c->K, n = (int64_t)e / (c->Wo * c->Ho * c->K);
    int64_t Cg = c->C / c->G, g = bug == 3 ? 0 : k / (c->K / c->G), taps = Cg * c->R * c->S;
    float s = c->b && bug != 4 ? c->b[k] : 0.0f;
    double d = s;
    if (mp)
        mpfr_set_flt(mp, s, MPFR_RNDN);
    for (int64_t q = 0; q < taps; q++) {
        int64_t j = rev ? taps - 1 - q : q, cc = j / (c->R * c->S), r = j / c->S % c->R, ss = j % c->S;
        int64_t dh = bug == 2 ? 1 : c->dh, dw = bug == 2 ? 1 : c->dw;
        int64_t ih = oh * c->sh - c->ph + r * dh, iw = ow * c->sw - c->pw + ss * dw + (bug == 1);
        if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W)
            continue;
        float xv = c->x[((n * c->C + g * Cg + cc) * c->H + ih) * c->W + iw];
        float wv = c->w[((k * Cg + cc) * c->R + r) * c->S + ss];
        if (mp) {
            mpfr_t t;
            mpfr_init2(t, 64);
            mpfr_set_flt(t, xv, MPFR_RNDN);
            mpfr_mul_d(t, t, wv, MPFR_RNDN);
            mpfr_add(mp, mp, t, MPFR_RNDN);
            mpfr_clear(t);
        }
        s += xv * wv;
        d += (double)xv * wv;
    }
    return dbl ? (float)d : s;
}

static void ref_conv(mpfr_prec_t p, const void *ctx, size_t e, mpfr_t out)
{
    (void)p;
    conv_elem(ctx, e, 0, 0, 0, out);
}

static void conv_case(const char *spec, struct conv *c, int batched)
{
    size_t nx = (size_t)(c->N * c->C * c->H * c->W), nw = (size_t)(c->K * c->C / c->G * c->R * c->S);
    size_t ny = (size_t)(c->N * c->K * c->Ho * c->Wo);
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)c->K * 4);
    float *y = malloc(ny * 4), *ex = malloc(ny * 4);
    fill(x, nx, -1, 1);
    fill(w, nw, -1, 1);
    fill(b, (size_t)c->K, -1, 1);
    c->x = x, c->w = w, c->b = b;
    int two = strncmp(spec, "conv2d", 6) == 0, bt = batched ? 1 : 0;
    struct tset s = {0};
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->K, c->C / c->G, c->R, c->S};
    int64_t ys[4] = {c->N, c->K, c->Ho, c->Wo};
    if (!two) { /* drop H and R (1) */
        xs[2] = xs[3], ws[2] = ws[3], ys[2] = ys[3];
    }
    ts_add(&s, "in.0", x, 3 + two - !bt, xs + !bt);
    ts_add(&s, "param.weight", w, 3 + two, ws);
    ts_add(&s, "param.bias", b, 1, SH(c->K));
    ts_add(&s, "out", y, 3 + two - !bt, ys + !bt);
    exact_of(spec, &s, ex);
    against_ref(ex, ny, ref_conv, c, 0);
    for (int v = 0; v < 3; v++) {
        for (size_t e = 0; e < ny; e++)
            y[e] = conv_elem(c, e, v == 1, v == 2, 0, NULL);
        ADMITTED(spec, &s, y, v == 0 ? "taps in order" : v == 1 ? "taps reversed" : "double");
    }
    for (int bug = 1; bug <= 4; bug++) {
        if ((bug == 2 && c->dh * c->dw == 1) || (bug == 3 && c->G == 1))
            continue;
        for (size_t e = 0; e < ny; e++)
            y[e] = conv_elem(c, e, 0, 0, bug, NULL);
        SEMANTIC(spec, &s, y, bug == 1 ? "padding off by one" : bug == 2 ? "dilation 1" : bug == 3
                 ? "groups mixed" : "bias dropped");
    }
    free(x), free(w), free(b), free(y), free(ex);
}

static void test_conv(void **state)
{
    (void)state;
    /* hand: x = 1 2 3 4, w = (1, -1), bias 0.5, padding 1: -0.5 x4, 4.5 */
    float x[4] = {1, 2, 3, 4}, w[2] = {1, -1}, b[1] = {0.5f}, y[5], ex[5];
    struct tset s = {0};
    ts_add(&s, "in.0", x, 3, SH(1, 1, 4));
    ts_add(&s, "param.weight", w, 3, SH(1, 1, 2));
    ts_add(&s, "param.bias", b, 1, SH(1));
    ts_add(&s, "out", y, 3, SH(1, 1, 5));
    exact_of("conv1d stride=1 padding=1 dilation=1 groups=1 padding_mode=zeros", &s, ex);
    for (int k = 0; k < 4; k++)
        assert_true(ex[k] == -0.5f);
    assert_true(ex[4] == 4.5f);
    /* conv2d hand: 3x3 x = 1..9, 2x2 w = (1 0; 0 -1), valid, stride 1: x[i,j] - x[i+1,j+1] = -4 */
    float x2[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w2[4] = {1, 0, 0, -1}, y2[4], e2[4];
    struct tset s2 = {0};
    ts_add(&s2, "in.0", x2, 3, SH(1, 3, 3)); /* unbatched */
    ts_add(&s2, "param.weight", w2, 4, SH(1, 1, 2, 2));
    ts_add(&s2, "out", y2, 3, SH(1, 2, 2));
    exact_of("conv2d stride=1 padding=valid dilation=1 groups=1", &s2, e2);
    for (int k = 0; k < 4; k++)
        assert_true(e2[k] == -4.0f);
    struct conv c1 = {2, 4, 5, 6, 6, 2, 3, 3, 1, 1, 1, 1, 1, 1, 5, 6, NULL, NULL, NULL};
    conv_case("conv2d stride=1 padding=1 dilation=1 groups=2 padding_mode=zeros", &c1, 1);
    struct conv c2 = {1, 3, 7, 8, 4, 1, 3, 2, 2, 3, 2, 1, 2, 1, 4, 3, NULL, NULL, NULL};
    conv_case("conv2d stride=2,3 padding=2,1 dilation=2,1 groups=1", &c2, 1);
    /* conv1d 'same' with an even kernel and dilation 2: total 6, 3 left, 3 right */
    struct conv c3 = {1, 2, 1, 9, 3, 1, 1, 4, 1, 1, 0, 3, 1, 2, 1, 9, NULL, NULL, NULL};
    conv_case("conv1d stride=1 padding=same dilation=2 groups=1", &c3, 0);
    /* gpu=1: the normwise floor */
    struct modcheck_result r;
    run_ok("conv1d padding=1 gpu=1", &s, &r);
    assert_true(r.out[0].least > 0 && r.out[0].least == replay_normwise_floor(x, 4, w, 2));
    modcheck_result_free(&r);
}

/* ---- mseloss ------------------------------------------------------------------------------ */

struct mse {
    size_t n;
    const float *a, *b;
    int red;
};

static void ref_mse(mpfr_prec_t p, const void *ctx, size_t e, mpfr_t out)
{
    const struct mse *m = ctx;
    mpfr_t t;
    mpfr_init2(t, p);
    mpfr_set_zero(out, 1);
    for (size_t i = m->red ? 0 : e; i < (m->red ? m->n : e + 1); i++) {
        mpfr_set_flt(t, m->a[i], MPFR_RNDN);
        mpfr_sub_d(t, t, m->b[i], MPFR_RNDN);
        mpfr_sqr(t, t, MPFR_RNDN);
        mpfr_add(out, out, t, MPFR_RNDN);
    }
    if (m->red == 2)
        mpfr_div_ui(out, out, (unsigned long)m->n, MPFR_RNDN);
    mpfr_clear(t);
}

static void test_mse(void **state)
{
    (void)state;
    /* hand: (1, 2, 3) - (0, 0, 1): squares 1, 4, 4, sum 9, mean 3; (1, 0, 0) - 0: 1/3 */
    float a[3] = {1, 2, 3}, b[3] = {0, 0, 1}, y[3], ex[3], a3[3] = {1, 0, 0}, z[3] = {0, 0, 0};
    struct tset s = {0};
    ts_add(&s, "in.0", a, 1, SH(3));
    ts_add(&s, "in.1", b, 1, SH(3));
    ts_add(&s, "out", y, 0, NULL);
    exact_of("mseloss reduction=mean", &s, ex);
    assert_true(ex[0] == 3.0f);
    exact_of("mseloss reduction=sum", &s, ex);
    assert_true(ex[0] == 9.0f);
    s.t[0].data = a3, s.t[1].data = z;
    exact_of("mseloss", &s, ex);
    assert_true(ex[0] == 0x1.555556p-2f);
    s.t[0].data = a, s.t[1].data = b;
    s.t[2].ndim = 1, s.t[2].shape[0] = 3, s.t[2].count = 3;
    exact_of("mseloss reduction=none", &s, ex);
    assert_true(ex[0] == 1.0f && ex[1] == 4.0f && ex[2] == 4.0f);
    enum { N = 4099 }; /* none: many squares, some of them err near the worst */
    static float p[N], q[N], yr[N], er[N], d[N];
    fill(p, N, -2, 2);
    fill(q, N, -2, 2);
    static const char *spec[] = {"mseloss reduction=none", "mseloss reduction=sum",
                                 "mseloss reduction=mean"};
    for (int red = 0; red < 3; red++) {
        int64_t n = red ? 97 : N; /* sums: few terms, that a term's bug shows */
        struct mse m = {(size_t)n, p, q, red};
        struct tset t = {0};
        ts_add(&t, "in.0", p, 1, SH(n));
        ts_add(&t, "in.1", q, 1, SH(n));
        ts_add(&t, "out", yr, red ? 0 : 1, SH(n));
        exact_of(spec[red], &t, er);
        against_ref(er, red ? 1 : (size_t)n, ref_mse, &m, 0);
        for (int64_t i = 0; i < n; i++)
            d[i] = (p[i] - q[i]) * (p[i] - q[i]);
        for (int how = 0; how < SUM_N; how++)
            for (int inv = 0; inv < 2; inv++) {
                float sum = sumf(d, (size_t)n, how);
                if (red == 0)
                    memcpy(yr, d, sizeof d);
                else
                    yr[0] = red == 1 ? sum : inv ? sum * (1.0f / (float)n) : sum / (float)n;
                ADMITTED(spec[red], &t, yr, sum_name[how]);
            }
        if (red == 2) {
            yr[0] = sumf(d, (size_t)n, SUM_FWD) / (float)(n - 1);
            SEMANTIC(spec[red], &t, yr, "mean over n - 1");
        }
        yr[0] = fabsf(p[0] - q[0]) + (red ? sumf(d + 1, (size_t)n - 1, SUM_FWD) : 0);
        yr[0] /= red == 2 ? (float)n : 1.0f;
        SEMANTIC(spec[red], &t, yr, "a term not squared");
    }
}

/* ---- malformed and unchecked --------------------------------------------------------------- */

static void test_malformed(void **state)
{
    (void)state;
    float x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 2, 3, 4, 5, 6}, y[6];
    struct tset s = {0};
    ts_add(&s, "in.0", x, 2, SH(2, 3));
    ts_add(&s, "out", y, 2, SH(2, 2));
    expect_rc("linear", &s, -1); /* no weight */
    ts_add(&s, "param.weight", w, 2, SH(3, 2));
    expect_rc("linear", &s, -1); /* (3, 2) does not fit I = 3 */
    s.t[2].shape[0] = 2, s.t[2].shape[1] = 3;
    expect_rc("linear", &s, 0);
    s.t[2].count = 5; /* the shape says 6 */
    expect_rc("linear", &s, -1);
    s.t[2].count = 6;
    expect_rc("linear tf32=yes", &s, -1);
    struct tset c = {0};
    ts_add(&c, "in.0", x, 3, SH(1, 2, 3));
    ts_add(&c, "param.weight", w, 3, SH(3, 1, 2));
    ts_add(&c, "out", y, 3, SH(1, 3, 2));
    expect_rc("conv1d stride=1 padding=0 dilation=1 groups=2", &c, -1); /* 3 filters, 2 groups */
    expect_rc("conv1d stride=1 padding=0 dilation=1 groups=1", &c, -1); /* C/G = 2, weight 1 */
    expect_rc("conv1d stride=1 padding=1 dilation=1 groups=2 padding_mode=reflect", &c, 1);
    expect_rc("conv1d stride=2 padding=same dilation=1 groups=1", &c, -1);
    expect_rc("conv2d stride=1 padding=0 dilation=1 groups=1", &c, -1);
    struct tset m = {0};
    ts_add(&m, "in.0", x, 1, SH(6));
    ts_add(&m, "in.1", w, 1, SH(5));
    ts_add(&m, "out", y, 0, NULL);
    expect_rc("mseloss reduction=mean", &m, -1);
    m.t[1].shape[0] = 6, m.t[1].count = 6;
    expect_rc("mseloss reduction=mean", &m, 0);
    m.n = 2;
    expect_rc("mseloss reduction=mean", &m, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear), cmocka_unit_test(test_conv), cmocka_unit_test(test_mse),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
