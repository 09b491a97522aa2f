/* test_modcheck_norm.c: the normalizing module checks (reference/
 * modcheck_norm.c: layernorm, softmax, crossentropyloss): exact values
 * against hand-derived ones and against an MPFR evaluation of each
 * definition written here; float32 evaluations of the admissible forms
 * (orders, the max subtracted or not, division or a reciprocal, PyTorch's
 * layernorm forms, Welford) within bounds; planted bugs beyond them
 * (SEMANTIC); malformed specs and tensors refused. The harness is
 * test_modcheck_sum.c's. TEST_MODCHECK_VERBOSE=1 prints the largest ratio
 * of each evaluation. */
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

/* ---- layernorm --------------------------------------------------------------------------- */

struct ln {
    size_t rows, M;
    double eps;
    const float *x, *w, *b;
};

static void ref_ln(mpfr_prec_t p, const void *ctx, size_t e, mpfr_t out)
{
    const struct ln *L = ctx;
    const float *x = L->x + e / L->M * L->M;
    mpfr_t mu, v, t;
    mpfr_inits2(p + 64, mu, v, t, (mpfr_ptr)0);
    mpfr_set_zero(mu, 1);
    for (size_t i = 0; i < L->M; i++)
        mpfr_add_d(mu, mu, x[i], MPFR_RNDN);
    mpfr_div_ui(mu, mu, (unsigned long)L->M, MPFR_RNDN);
    mpfr_set_zero(v, 1);
    for (size_t i = 0; i < L->M; i++) {
        mpfr_d_sub(t, x[i], mu, MPFR_RNDN);
        mpfr_sqr(t, t, MPFR_RNDN);
        mpfr_add(v, v, t, MPFR_RNDN);
    }
    mpfr_div_ui(v, v, (unsigned long)L->M, MPFR_RNDN);
    mpfr_add_d(v, v, L->eps, MPFR_RNDN);
    mpfr_rec_sqrt(v, v, MPFR_RNDN);
    mpfr_d_sub(t, L->x[e], mu, MPFR_RNDN);
    mpfr_mul(t, t, v, MPFR_RNDN);
    mpfr_mul_d(t, t, L->w ? L->w[e % L->M] : 1.0, MPFR_RNDN);
    mpfr_add_d(out, t, L->b ? L->b[e % L->M] : 0.0, MPFR_RNDN);
    mpfr_clears(mu, v, t, (mpfr_ptr)0);
}

/* Row statistics in float32: 0 two-pass, 1 Welford sequential, 2 Welford in
 * chunks of 4 combined pairwise (m_a + d n_b / n), 3 the same with CUDA's
 * convex combine, 4 one-pass E[x^2] - mu^2 clamped, 5 double. Bugs: 1
 * unbiased variance. */
static void ln_stats(const float *x, size_t M, int how, int bug, float *mu, float *var)
{
    float m[64], m2[64], cnt[64];
    size_t nb = 0;
    if (how == 0 || how == 4 || how == 5) {
        double dm = 0, dv = 0;
        float s = 0, q = 0, v = 0;
        for (size_t i = 0; i < M; i++)
            s += x[i], q += x[i] * x[i], dm += x[i];
        *mu = how == 5 ? (float)(dm / M) : s / (float)M;
        for (size_t i = 0; i < M; i++)
            v += (x[i] - *mu) * (x[i] - *mu), dv += ((double)x[i] - dm / M) * ((double)x[i] - dm / M);
        float vv = how == 0 ? v : how == 4 ? fmaxf(0, q / (float)M - *mu * *mu) * (float)M : (float)dv;
        *var = vv / (float)(M - (bug == 1));
        return;
    }
    for (size_t i = 0; i < M; i++) { /* sequential: one chunk; else chunks of 4 */
        size_t c = how == 1 ? 0 : i / 4;
        if (c == nb)
            m[nb] = m2[nb] = cnt[nb] = 0, nb++;
        cnt[c] += 1;
        float d = x[i] - m[c];
        m[c] += d * (1.0f / cnt[c]);
        m2[c] += d * (x[i] - m[c]);
    }
    for (size_t step = 1; step < nb; step *= 2)
        for (size_t a = 0; a + step < nb; a += 2 * step) {
            size_t b = a + step;
            float n = cnt[a] + cnt[b], d = m[b] - m[a], wb = cnt[b] / n;
            m[a] = how == 3 ? cnt[a] * (1.0f / n) * m[a] + cnt[b] * (1.0f / n) * m[b] : m[a] + d * wb;
            m2[a] = m2[a] + m2[b] + d * d * cnt[a] * wb;
            cnt[a] = n;
        }
    *mu = m[0];
    *var = m2[0] / (float)(M - (bug == 1));
}

/* y in float32: stats `how`, then form 0 (x - mu) r w + b, 1 x (r w) + (b -
 * mu r w) (PyTorch's CPU), 2 (x r + (-r mu)) w + b, 3 fma(w, r (x - mu), b).
 * Bugs: 1 unbiased, 2 eps outside the sqrt, 3 affine dropped, 4 row of the
 * last dim only (nlast > 0). */
static void eval_ln(const struct ln *L, float *y, int how, int form, int bug, size_t nlast)
{
    size_t M = bug == 4 ? nlast : L->M;
    for (size_t r = 0; r < L->rows * L->M / M; r++) {
        const float *x = L->x + r * M;
        float mu, var;
        ln_stats(x, M, how, bug, &mu, &var);
        float rs = bug == 2 ? 1 / (sqrtf(var) + (float)L->eps) : 1 / sqrtf(var + (float)L->eps);
        for (size_t i = 0; i < M; i++) {
            size_t j = (r * M + i) % L->M;
            float w = L->w && bug != 3 ? L->w[j] : 1, b = L->b && bug != 3 ? L->b[j] : 0, sw = rs * w;
            float v = form == 0 ? (x[i] - mu) * rs * w + b
                      : form == 1 ? x[i] * sw + (b - mu * sw)
                      : form == 2 ? (x[i] * rs + -rs * mu) * w + b : fmaf(w, rs * (x[i] - mu), b);
            y[r * M + i] = v;
        }
    }
}

static void ln_case(const char *spec, struct ln *L, const int64_t *xs, int nd, int affine,
                    double lo, double hi, int bugs)
{
    size_t n = L->rows * L->M;
    float *x = malloc(n * 4), *w = malloc(L->M * 4), *b = malloc(L->M * 4), *y = malloc(n * 4),
          *ex = malloc(n * 4);
    fill(x, n, lo, hi);
    fill(w, L->M, 0.5, 1.5);
    fill(b, L->M, -1, 1);
    L->x = x, L->w = affine ? w : NULL, L->b = affine ? b : NULL;
    struct tset s = {0};
    ts_add(&s, "in.0", x, nd, xs);
    if (affine) {
        ts_add(&s, "param.weight", w, 1, SH((int64_t)L->M));
        ts_add(&s, "param.bias", b, 1, SH((int64_t)L->M));
    }
    ts_add(&s, "out", y, nd, xs);
    exact_of(spec, &s, ex);
    against_ref(ex, n, ref_ln, L, 1);
    static const char *hn[] = {"two-pass", "Welford", "Welford chunks", "Welford convex",
                               "one-pass", "double"};
    static const char *fn[] = {"(x - mu) r w + b", "x (r w) + (b - mu r w)", "(x r - r mu) w + b",
                               "fma(w, r (x - mu), b)"};
    char what[96];
    for (int how = 0; how < 6; how++)
        for (int form = 0; form < 4; form++) {
            eval_ln(L, y, how, form, 0, 0);
            snprintf(what, sizeof what, "%s, %s", hn[how], fn[form]);
            ADMITTED(spec, &s, y, what);
        }
    for (int bug = 1; bug <= 4 && bugs; bug++) {
        if (bug == 3 && !affine)
            continue;
        eval_ln(L, y, 0, 0, bug, (size_t)xs[nd - 1]);
        SEMANTIC(spec, &s, y, bug == 1 ? "unbiased variance" : bug == 2 ? "eps outside the sqrt"
                 : bug == 3 ? "affine dropped" : "normalized over the last dim only");
    }
    free(x), free(w), free(b), free(y), free(ex);
}

static void test_layernorm(void **state)
{
    (void)state;
    /* hand: (0, 0, 0, 4): mu 1, var 3, eps 1: r = 1/2, y = (-0.5 x3, 1.5);
     * (1, 3), eps 0, w (2, 3), b (0.5, 0): r = 1, y = (-1.5, 3) */
    float x[4] = {0, 0, 0, 4}, y[4], ex[4], x2[2] = {1, 3}, w2[2] = {2, 3}, b2[2] = {0.5f, 0};
    struct tset s = {0};
    ts_add(&s, "in.0", x, 2, SH(1, 4));
    ts_add(&s, "out", y, 2, SH(1, 4));
    exact_of("layernorm normalized=4 eps=1", &s, ex);
    assert_true(ex[0] == -0.5f && ex[1] == -0.5f && ex[2] == -0.5f && ex[3] == 1.5f);
    struct tset s2 = {0};
    ts_add(&s2, "in.0", x2, 1, SH(2));
    ts_add(&s2, "param.weight", w2, 1, SH(2));
    ts_add(&s2, "param.bias", b2, 1, SH(2));
    ts_add(&s2, "out", y, 1, SH(2));
    exact_of("layernorm normalized=2 eps=0", &s2, ex);
    assert_true(ex[0] == -1.5f && ex[1] == 3.0f);
    /* random: two normalized dims, affine; eps large enough that moving it is seen */
    struct ln L = {5, 24, 0.05, NULL, NULL, NULL};
    ln_case("layernorm normalized=4,6 eps=0.050000000000000003", &L, SH(5, 4, 6), 3, 1, -2, 2, 1);
    /* no affine, rows far from zero (x ~ mu cancels in PyTorch's forms) */
    struct ln L2 = {4, 40, 1e-5, NULL, NULL, NULL};
    ln_case("layernorm normalized=40 eps=1.0000000000000001e-05", &L2, SH(4, 40), 2, 0, 100, 103, 0);
    /* a constant row with eps = 0: 0 / 0, NaN */
    float c[3] = {2, 2, 2}, cy[3];
    struct tset s3 = {0};
    ts_add(&s3, "in.0", c, 1, SH(3));
    ts_add(&s3, "out", cy, 1, SH(3));
    struct modcheck_result r;
    run_ok("layernorm normalized=3 eps=0", &s3, &r);
    assert_true(isnan(r.out[0].exact[0]) && isinf(r.out[0].bound[0]));
    modcheck_result_free(&r);
}

/* ---- softmax ------------------------------------------------------------------------------ */

struct sm {
    size_t outer, n, inner;
    const float *x;
};

static void ref_sm(mpfr_prec_t p, const void *ctx, size_t e, mpfr_t out)
{
    const struct sm *S = ctx;
    size_t o = e / (S->n * S->inner), i = e % S->inner;
    mpfr_t s, t;
    mpfr_inits2(p, s, t, (mpfr_ptr)0);
    mpfr_set_zero(s, 1);
    for (size_t j = 0; j < S->n; j++) { /* no max: MPFR's range does not overflow */
        mpfr_set_flt(t, S->x[(o * S->n + j) * S->inner + i], MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add(s, s, t, MPFR_RNDN);
    }
    mpfr_set_flt(t, S->x[e], MPFR_RNDN);
    mpfr_exp(t, t, MPFR_RNDN);
    mpfr_div(out, t, s, MPFR_RNDN);
    mpfr_clears(s, t, (mpfr_ptr)0);
}

/* float32 softmax: max subtracted (nomax: not), sum order how, division or
 * a reciprocal. Bugs: 1 along the last dim (the wrong one), 2 the last term
 * left out of the sum. */
static void eval_sm(const struct sm *S, float *y, int how, int nomax, int recip, int bug)
{
    size_t n = bug == 1 ? S->inner : S->n, st = bug == 1 ? 1 : S->inner;
    size_t nrow = S->outer * S->n * S->inner / n;
    float *e = malloc(n * 4);
    for (size_t ro = 0; ro < nrow; ro++) {
        size_t base = bug == 1 ? ro * n : ro / S->inner * S->n * S->inner + ro % S->inner;
        float m = -INFINITY;
        for (size_t j = 0; j < n; j++)
            m = fmaxf(m, S->x[base + j * st]);
        for (size_t j = 0; j < n; j++)
            e[j] = expf(S->x[base + j * st] - (nomax ? 0 : m));
        float sum = sumf(e, n - (bug == 2), how);
        for (size_t j = 0; j < n; j++)
            y[base + j * st] = recip ? e[j] * (1 / sum) : e[j] / sum;
    }
    free(e);
}

static void test_softmax(void **state)
{
    (void)state;
    float x[3] = {0, 0, 0}, y[3], ex[3], xi[2] = {-INFINITY, 0};
    struct tset s = {0};
    ts_add(&s, "in.0", x, 1, SH(3));
    ts_add(&s, "out", y, 1, SH(3));
    exact_of("softmax dim=0", &s, ex);
    for (int k = 0; k < 3; k++) /* 1/3 = 0x1.555556p-2 (0x3eaaaaab) */
        assert_true(ex[k] == 0x1.555556p-2f);
    s.t[0].data = xi;
    s.t[0].shape[0] = s.t[1].shape[0] = 2;
    s.t[0].count = s.t[1].count = 2;
    exact_of("softmax dim=0", &s, ex);
    assert_true(ex[0] == 0.0f && ex[1] == 1.0f);
    enum { O = 2, N = 7, I = 3 };
    static float xr[O * N * I], yr[O * N * I], er[O * N * I];
    fill(xr, O * N * I, -6, 6);
    struct sm S = {O, N, I, xr};
    struct tset t = {0};
    ts_add(&t, "in.0", xr, 3, SH(O, N, I));
    ts_add(&t, "out", yr, 3, SH(O, N, I));
    exact_of("softmax dim=1", &t, er);
    against_ref(er, O * N * I, ref_sm, &S, 1);
    for (int how = 0; how < SUM_N; how++)
        for (int v = 0; v < 4; v++) {
            eval_sm(&S, yr, how, v & 1, v >> 1, 0);
            ADMITTED("softmax dim=1", &t, yr, v & 1 ? "no max" : "max subtracted");
        }
    eval_sm(&S, yr, SUM_FWD, 0, 0, 1);
    SEMANTIC("softmax dim=1", &t, yr, "softmax over the wrong dim");
    eval_sm(&S, yr, SUM_FWD, 0, 0, 2);
    SEMANTIC("softmax dim=1", &t, yr, "a term left out of the sum");
    /* gpu=1 admits CUDA's __expf: 2 + 1.173 |x - m| ulp */
    struct modcheck_result a, b;
    run_ok("softmax dim=1", &t, &a);
    run_ok("softmax dim=1 gpu=1", &t, &b);
    for (size_t k = 0; k < O * N * I; k++)
        assert_true(b.out[0].bound[k] >= a.out[0].bound[k]);
    modcheck_result_free(&a);
    modcheck_result_free(&b);
}

/* ---- crossentropyloss --------------------------------------------------------------------- */

struct ce {
    size_t N, C, D; /* samples N D, logit (n, c, k) at (n C + c) D + k */
    const float *x, *t, *w;
    int prob, red;
    double ls;
    long ig;
};

/* The loss of sample s (class targets; kept) or its weight, in MPFR. */
static void ce_sample(const struct ce *c, size_t s, mpfr_t loss, mpfr_t wt, mpfr_prec_t p)
{
    mpfr_t L, t, sm;
    mpfr_inits2(p, L, t, sm, (mpfr_ptr)0);
    size_t n = s / c->D, k = s % c->D;
    mpfr_set_zero(L, 1);
    for (size_t j = 0; j < c->C; j++) {
        mpfr_set_flt(t, c->x[(n * c->C + j) * c->D + k], MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add(L, L, t, MPFR_RNDN);
    }
    mpfr_log(L, L, MPFR_RNDN); /* -lp_j = L - x_j */
    mpfr_set_zero(loss, 1);
    mpfr_set_zero(sm, 1);
    for (size_t j = 0; j < c->C; j++) {
        double wj = c->w ? c->w[j] : 1;
        mpfr_sub_d(t, L, c->x[(n * c->C + j) * c->D + k], MPFR_RNDN);
        mpfr_mul_d(t, t, wj, MPFR_RNDN);
        if (c->prob) { /* p' = p (1 - ls) + ls / C */
            double pj = c->t[(n * c->C + j) * c->D + k];
            mpfr_mul_d(t, t, pj * (1 - c->ls) + c->ls / (double)c->C, MPFR_RNDN);
            mpfr_add(loss, loss, t, MPFR_RNDN);
        } else {
            mpfr_add(sm, sm, t, MPFR_RNDN);
            if ((long)c->t[s] == (long)j)
                mpfr_set(loss, t, MPFR_RNDN);
        }
    }
    mpfr_set_d(wt, c->prob ? 1 : c->w ? c->w[(long)c->t[s]] : 1, MPFR_RNDN);
    if (!c->prob) { /* (1 - ls) nll + ls / C smooth */
        mpfr_mul_d(loss, loss, 1 - c->ls, MPFR_RNDN);
        mpfr_mul_d(sm, sm, c->ls / (double)c->C, MPFR_RNDN);
        mpfr_add(loss, loss, sm, MPFR_RNDN);
    }
    mpfr_clears(L, t, sm, (mpfr_ptr)0);
}

static void ref_ce(mpfr_prec_t p, const void *ctx, size_t e, mpfr_t out)
{
    const struct ce *c = ctx;
    mpfr_t l, w, W;
    mpfr_inits2(p, l, w, W, (mpfr_ptr)0);
    mpfr_set_zero(out, 1);
    mpfr_set_zero(W, 1);
    for (size_t s = c->red ? 0 : e; s < (c->red ? c->N * c->D : e + 1); s++) {
        if (!c->prob && (long)c->t[s] == c->ig)
            continue;
        ce_sample(c, s, l, w, p);
        mpfr_add(out, out, l, MPFR_RNDN);
        mpfr_add(W, W, w, MPFR_RNDN);
    }
    if (c->red == 2)
        mpfr_div(out, out, W, MPFR_RNDN);
    mpfr_clears(l, w, W, (mpfr_ptr)0);
}

/* float32 cross-entropy: log_softmax form 0 (x - m) - L, 1 x - (m + L), 2
 * x - log(sum e^x) (no max);
 * sums in order how. Bugs: 1 ignore_index not ignored, 2 smoothing dropped,
 * 3 mean over the samples' count, not their weights, 4 a term left out of
 * the log-sum-exp. */
static void eval_ce(const struct ce *c, float *y, int form, int how, int bug)
{
    size_t ns = c->N * c->D;
    float *nl = calloc(ns + 1, 4), *sm = calloc(ns + 1, 4), *ws = calloc(ns + 1, 4), *e = malloc(c->C * 4);
    float *lp = malloc(c->C * 4), *pr = malloc(ns * c->C * 4 + 4);
    for (size_t s = 0; s < ns; s++) {
        size_t n = s / c->D, k = s % c->D;
        long t = c->prob ? 0 : (long)c->t[s];
        if (!c->prob && t == c->ig && bug != 1)
            continue;
        if (t == c->ig)
            t = 0;
        float m = -INFINITY;
        for (size_t j = 0; j < c->C; j++)
            m = fmaxf(m, c->x[(n * c->C + j) * c->D + k]);
        m = form == 2 ? 0 : m;
        for (size_t j = 0; j < c->C; j++)
            e[j] = expf(c->x[(n * c->C + j) * c->D + k] - m);
        float L = logf(sumf(e, c->C - (bug == 4), how));
        for (size_t j = 0; j < c->C; j++) {
            float xv = c->x[(n * c->C + j) * c->D + k], wj = c->w ? c->w[j] : 1;
            lp[j] = form == 1 ? xv - (m + L) : (xv - m) - L;
            if (c->prob) {
                double l2 = bug == 2 ? 0 : c->ls;
                float p = c->t[(n * c->C + j) * c->D + k] * (float)(1 - l2) + (float)(l2 / c->C);
                pr[s * c->C + j] = -(lp[j] * p * wj);
            }
            e[j] = -(lp[j] * wj);
        }
        sm[s] = sumf(e, c->C, how);
        nl[s] = -(lp[t] * (c->w ? c->w[t] : 1));
        ws[s] = c->w && bug != 3 ? c->w[t] : 1;
    }
    float ls = bug == 2 ? 0 : (float)c->ls, cs = bug == 2 ? 0 : (float)(c->ls / c->C);
    if (c->prob) {
        float tot = sumf(pr, ns * c->C, how);
        if (c->red)
            y[0] = c->red == 2 ? tot / (float)ns : tot;
        for (size_t s = 0; !c->red && s < ns; s++)
            y[s] = sumf(pr + s * c->C, c->C, how);
    } else if (!c->red) {
        for (size_t s = 0; s < ns; s++)
            y[s] = c->ls > 0 ? (1 - ls) * nl[s] + sm[s] * cs : nl[s];
    } else {
        float W = c->red == 2 ? sumf(ws, ns, how) : 1, a = sumf(nl, ns, how) / W, b = sumf(sm, ns, how) / W;
        y[0] = c->ls > 0 ? (1 - ls) * a + b * cs : a;
    }
    free(nl), free(sm), free(ws), free(e), free(lp), free(pr);
}

static void ce_case(struct ce *c, const int64_t *xs, int nd)
{
    size_t ns = c->N * c->D, nx = ns * c->C;
    float *x = malloc(nx * 4), *t = malloc(nx * 4), *w = malloc(c->C * 4), *y = malloc(ns * 4),
          *ex = malloc(ns * 4);
    fill(x, nx, -3, 3);
    fill(w, c->C, 0.2, 2);
    for (size_t s = 0; s < ns; s++)
        t[s] = (float)(tu_rand_u64(&rng) % c->C);
    t[1] = (float)c->ig;
    if (c->prob)
        for (size_t s = 0; s < ns; s++) { /* rows of probabilities */
            float z = 0;
            for (size_t j = 0; j < c->C; j++)
                z += t[(s / c->D * c->C + j) * c->D + s % c->D] = rf(0, 1);
            for (size_t j = 0; j < c->C; j++)
                t[(s / c->D * c->C + j) * c->D + s % c->D] /= z;
        }
    c->x = x, c->t = t, c->w = w;
    struct tset s = {0};
    int64_t os[8]; /* the logits' shape without C: class targets' and the loss's (none) */
    for (int k = 0, j = 0; k < nd; k++)
        if (k != 1)
            os[j++] = xs[k];
    ts_add(&s, "in.0", x, nd, xs);
    ts_add(&s, "in.1", t, c->prob ? nd : nd - 1, c->prob ? xs : os);
    ts_add(&s, "param.weight", w, 1, SH((int64_t)c->C));
    ts_add(&s, "out", y, 0, NULL);
    static const char *rn[] = {"none", "sum", "mean"};
    char spec[160];
    for (c->red = 0; c->red < 3; c->red++) {
        snprintf(spec, sizeof spec, "crossentropyloss reduction=%s ignore_index=%ld label_smoothing=%.17g",
                 rn[c->red], c->ig, c->ls);
        s.t[3].ndim = c->red ? 0 : nd - 1;
        s.t[3].count = c->red ? 1 : ns;
        memcpy(s.t[3].shape, os, sizeof os);
        exact_of(spec, &s, ex);
        against_ref(ex, c->red ? 1 : ns, ref_ce, c, 1);
        static const char *fn[] = {"(x - m) - L", "x - (m + L)", "x - log sum e^x"};
        for (int v = 0; v < 3 * SUM_N; v++) {
            eval_ce(c, y, v % 3, v / 3, 0);
            ADMITTED(spec, &s, y, fn[v % 3]);
        }
        for (int bug = 1; bug <= 4; bug++) {
            if ((c->prob && bug != 2 && bug != 4) || (bug == 3 && c->red != 2) ||
                (bug == 2 && !(c->ls > 0)))
                continue;
            eval_ce(c, y, 0, SUM_FWD, bug);
            SEMANTIC(spec, &s, y, bug == 1 ? "ignore_index not ignored" : bug == 2
                     ? "label smoothing dropped" : bug == 3 ? "mean over the count" : "lse missing a term");
        }
    }
    free(x), free(t), free(w), free(y), free(ex);
}

static void test_crossentropy(void **state)
{
    (void)state;
    /* hand: equal logits give log C for any target and smoothing: log 2 =
     * 0x1.62e43p-1 (0x3f317218), 2 log 2 = log 4 = 0x1.62e43p+0 */
    float x[4] = {0, 0, 0, 0}, t[2] = {1, 0}, y[2], ex[2];
    struct tset s = {0};
    ts_add(&s, "in.0", x, 2, SH(2, 2));
    ts_add(&s, "in.1", t, 1, SH(2));
    ts_add(&s, "out", y, 0, NULL);
    exact_of("crossentropyloss reduction=mean ignore_index=-100 label_smoothing=0.3", &s, ex);
    assert_true(ex[0] == 0x1.62e43p-1f);
    exact_of("crossentropyloss reduction=sum ignore_index=-100 label_smoothing=0", &s, ex);
    assert_true(ex[0] == 0x1.62e43p+0f);
    exact_of("crossentropyloss reduction=mean ignore_index=1 label_smoothing=0", &s, ex);
    assert_true(ex[0] == 0x1.62e43p-1f);
    s.t[2].ndim = 1, s.t[2].shape[0] = 2, s.t[2].count = 2;
    exact_of("crossentropyloss reduction=none ignore_index=0 label_smoothing=0", &s, ex);
    assert_true(ex[0] == 0x1.62e43p-1f && ex[1] == 0.0f);
    float x4[4] = {0, 0, 0, 0}, t4[1] = {3};
    struct tset s4 = {0};
    ts_add(&s4, "in.0", x4, 1, SH(4)); /* one sample of four classes, no batch */
    ts_add(&s4, "in.1", t4, 0, NULL);
    ts_add(&s4, "out", y, 0, NULL);
    exact_of("crossentropyloss reduction=mean ignore_index=-100 label_smoothing=0", &s4, ex);
    assert_true(ex[0] == 0x1.62e43p+0f);
    struct ce c1 = {7, 5, 1, NULL, NULL, NULL, 0, 0, 0.1, 2};
    ce_case(&c1, SH(7, 5), 2);
    struct ce c2 = {2, 4, 3, NULL, NULL, NULL, 0, 0, 0, -100};
    ce_case(&c2, SH(2, 4, 3), 3);
    struct ce c3 = {5, 6, 1, NULL, NULL, NULL, 1, 0, 0.2, -100};
    ce_case(&c3, SH(5, 6), 2);
}

/* ---- malformed and unchecked --------------------------------------------------------------- */

static void test_malformed(void **state)
{
    (void)state;
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
    struct tset l = {0};
    ts_add(&l, "in.0", x, 2, SH(2, 3));
    ts_add(&l, "out", y, 2, SH(2, 3));
    expect_rc("layernorm normalized=2 eps=1e-5", &l, -1);
    expect_rc("layernorm normalized=2,3,4 eps=1e-5", &l, -1);
    expect_rc("layernorm eps=1e-5", &l, -1);
    expect_rc("layernorm normalized=3 eps=-1", &l, 1);
    expect_rc("softmax dim=2", &l, -1);
    expect_rc("softmax", &l, -1);
    expect_rc("softmax dim=1 dtype=float16", &l, 1);
    float t[2] = {0, 3}, tn[2] = {0, NAN}, xi[6] = {1, INFINITY, 0, 0, 0, 0};
    struct tset e = {0};
    ts_add(&e, "in.0", x, 2, SH(2, 3));
    ts_add(&e, "in.1", t, 1, SH(2));
    ts_add(&e, "out", y, 0, NULL);
    expect_rc("crossentropyloss reduction=mean ignore_index=-100 label_smoothing=0", &e, -1);
    e.t[1].data = tn;
    expect_rc("crossentropyloss reduction=mean ignore_index=-100 label_smoothing=0", &e, -1);
    t[1] = 2, e.t[1].data = t;
    expect_rc("crossentropyloss reduction=mean ignore_index=-100 label_smoothing=0", &e, 0);
    expect_rc("crossentropyloss reduction=mean ignore_index=-100 label_smoothing=2", &e, -1);
    expect_rc("crossentropyloss reduction=avg ignore_index=-100 label_smoothing=0", &e, -1);
    e.t[0].data = xi;
    expect_rc("crossentropyloss reduction=mean ignore_index=-100 label_smoothing=0", &e, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm), cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_crossentropy), cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
