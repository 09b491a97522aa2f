/* test_oracle_ops_bound.c: oracle_bound's error bounds against the cpu
 * kernels (random, special and adversarial inputs), and conv2d_bwd_data of
 * m pairs: one rounding over all pairs, and the groupings a kernel may use. */
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
#include "test_oracle_ops.h"

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

void test_bounds(void **state)
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
void test_bounds_adversarial(void **state)
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
void test_bounds_conv(void **state)
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
void test_conv_pairs(void **state)
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
void test_bounds_special(void **state)
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
void test_bounds_adversarial_image(void **state)
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
