/* test_variant.c: the valid float32 rewrites of src/variant.c against the
 * exact oracle: on random and adversarial inputs of several shapes, every
 * element lies within oracle_bound (replay_classify never says SEMANTIC),
 * while the wrong formula of src/fault.c for the same op, on the same
 * inputs, is SEMANTIC: the bounds admit every correct evaluation and stay
 * tight enough to catch the wrong ones. TEST_VARIANT_VERBOSE=1 prints the
 * largest error / bound of each rewrite. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "fault.h"
#include "oracle.h"
#include "oracle_testutil.h"
#include "replay.h"
#include "run.h"
#include "util.h"
#include "variant.h"

static int verbose;

#define TV_KINDS 8 /* kinds of case per op: 0-3 random, 4-7 the op's hard cases */
#define TV_REPS 8  /* cases of each kind */

/* fault.c's wrong formula for the op of t, or NULL: installed as replay
 * would install it, into a run that has only t's graph and the cpu backend. */
static backend_op_fn tv_fault_for(struct tg *t)
{
    struct run r;
    memset(&r, 0, sizeof r);
    r.g = t->g; /* a shallow copy: fault_install only reads it */
    r.be = &backend_cpu;
    r.e.override = calloc((size_t)t->g.n, sizeof *r.e.override);
    assert_non_null(r.e.override);
    backend_op_fn fn = fault_install(&r, "op:formula") == 0 ? r.e.override[t->op] : NULL;
    free(r.e.override);
    return fn;
}

/* fn's output on t against the oracle and its bound. */
static void tv_classify(const struct tg *t, backend_op_fn fn, struct replay_opcheck *c)
{
    const struct node *nd = tg_node(t);
    float *out = calloc(nd->count + 1, sizeof *out);
    float *exact = malloc((nd->count + 1) * sizeof *exact);
    double *bound = malloc((nd->count + 1) * sizeof *bound);
    assert_true(out && exact && bound);
    const float *in[OP_MAX_INPUTS];
    for (int k = 0; k < t->nleaf; k++)
        in[k] = t->val[k];
    struct backend_step st = {.step = t->step};
    fn(NULL, &t->g, nd, out, (const backend_buf *const *)in, &st);
    assert_int_equal(oracle_op(&t->g, nd, exact, in, &st), 0);
    assert_int_equal(oracle_bound(&t->g, nd, bound, in, &st), 0);
    memset(c, 0, sizeof *c);
    replay_classify(out, exact, bound, nd->count, 0, c);
    free(out);
    free(exact);
    free(bound);
}

static uint32_t tv_dim(uint32_t lo, uint32_t hi) { return lo + (uint32_t)(r64() % (hi - lo + 1)); }

static enum dist tv_dist(int kind)
{
    static const enum dist d[4] = {D_UNIT, D_WIDE, D_MANT, D_POS};
    return d[kind % 4];
}

/* x[i] = +-2^-e, e in [0, 140]: tiny arguments, subnormals among them. */
static void tv_fill_tiny(struct tg *t, int k)
{
    for (size_t i = 0; i < tg_count(t, k); i++)
        t->val[k][i] = (float)ldexp(runif(1, 2), -(int)(r64() % 141)) * (r64() % 2 ? -1.0f : 1.0f);
}

/* Pairs that cancel: x[2i + 1] = -x[2i] (1 + 2^-20), leaving 2^-20 of each. */
static void tv_fill_cancel(struct tg *t, int k)
{
    float *x = t->val[k];
    for (size_t i = 0; i < tg_count(t, k); i++)
        x[i] = i % 2 ? -x[i - 1] * (1 + 0x1p-20f) : rfloat(D_UNIT);
}

static void tv_fill_range(struct tg *t, int k, double lo, double hi)
{
    for (size_t i = 0; i < tg_count(t, k); i++)
        t->val[k][i] = (float)runif(lo, hi);
}

/* The sums: matrix products, bias gradients, convolutions, mse, mean. */
static int tv_case_sum(struct tg *t, enum op_type ty, int kind)
{
    enum dist d = tv_dist(kind);
    int hard = kind >= 4;
    switch (ty) {
    case OP_MATMUL: {
        uint32_t m = tv_dim(1, 6), n = tv_dim(1, 6);
        uint32_t k = kind == 4 || kind == 7 ? 2000 : kind == 6 ? 1 : tv_dim(1, 300);
        int ta = (int)(r64() % 2), tb = (int)(r64() % 2);
        int a = ta ? tg_leaf(t, k, m) : tg_leaf(t, m, k);
        int b = tb ? tg_leaf(t, n, k) : tg_leaf(t, k, n);
        tg_fill(t, 0, hard ? D_UNIT : d);
        tg_fill(t, 1, hard ? D_POS : d);
        if (kind == 4) /* each row of op(A) cancels: the same column j for l and l + 1 */
            for (uint32_t i = 0; i < m; i++)
                for (uint32_t l = 1; l < k; l += 2) {
                    float *x = t->val[0];
                    size_t p = ta ? (size_t)l * m + i : (size_t)i * k + l;
                    size_t q = ta ? (size_t)(l - 1) * m + i : (size_t)i * k + l - 1;
                    x[p] = -x[q] * (1 + 0x1p-20f);
                    for (uint32_t j = 0; j < n; j++)
                        t->val[1][tb ? (size_t)j * k + l : (size_t)l * n + j] =
                            t->val[1][tb ? (size_t)j * k + l - 1 : (size_t)(l - 1) * n + j];
                }
        if (kind == 5) /* products in the subnormal range */
            tv_fill_tiny(t, 0);
        t->op = graph_matmul(&t->g, "op", a, b, ta, tb);
        return 1;
    }
    case OP_BIAS_GRAD:
        if (kind % 2) { /* (N,C,H,W) */
            uint32_t c = tv_dim(1, 4);
            uint32_t N = tv_dim(1, 2), H = tv_dim(2, 8), W = kind == 5 ? 64 : tv_dim(2, 8);
            tg_image(t, N, c, H, W, d); /* the draws in order (see rfloat) */
            tg_opn(t, ty, NULL, 1, &c);
        } else {
            uint32_t f = tv_dim(1, 7);
            tg_leaf(t, kind == 4 ? 4096 : tv_dim(3, 300), f);
            tg_fill(t, 0, d);
            tg_op(t, ty, NULL, f, 0);
        }
        if (kind == 4)
            tv_fill_cancel(t, 0);
        if (kind == 6)
            tv_fill_tiny(t, 0);
        return kind != 4;
    case OP_MSE: {
        uint32_t rows = kind == 4 ? 100 : tv_dim(2, 20), cols = kind == 4 ? 100 : tv_dim(2, 30);
        tg_leaf(t, rows, cols);
        tg_leaf(t, rows, cols);
        tg_fill(t, 0, d);
        tg_fill(t, 1, d);
        if (kind == 4 || kind == 6) /* p and t close: p - t cancels */
            for (size_t i = 0; i < tg_count(t, 0); i++)
                t->val[1][i] = t->val[0][i] * (1 + (float)runif(-0x1p-20, 0x1p-20));
        if (kind == 5) /* subnormal differences */
            for (size_t i = 0; i < tg_count(t, 0); i++)
                t->val[1][i] = t->val[0][i] + (float)ldexp(runif(-1, 1), -130);
        tg_op(t, ty, NULL, 1, 0);
        return kind != 5;
    }
    case OP_MEAN: {
        static const float scales[] = {1.0f, 0.5f, -2.0f, 1.0f / 3, 10.0f, 0x1p-100f};
        union op_params p = {.mean = {scales[r64() % 6]}};
        uint32_t rows = kind == 4 ? 100 : tv_dim(2, 20), cols = kind == 4 ? 100 : tv_dim(2, 50);
        tg_leaf(t, rows, cols);
        tg_fill(t, 0, d);
        if (kind == 4)
            tv_fill_cancel(t, 0);
        if (kind == 5) /* tiny terms: scale S / n may underflow with them */
            tv_fill_tiny(t, 0);
        tg_op(t, ty, &p, 1, 0);
        return kind != 4 && kind != 5;
    }
    case OP_CONV2D:
    case OP_CONV2D_BWD_DATA:
    case OP_CONV2D_BWD_FILTER: {
        uint32_t N = 2, C = tv_dim(1, 3), K = tv_dim(1, 3), H = tv_dim(3, 8), W = tv_dim(3, 8);
        uint32_t R = r64() % 2 ? 3 : 5, S = r64() % 3 ? 3 : 1;
        enum dist d2 = hard ? D_POS : d;
        if (ty == OP_CONV2D) {
            int x = tg_image(t, N, C, H, W, d), w = tg_image(t, K, C, R, S, d2);
            t->op = graph_conv2d(&t->g, "op", x, w);
        } else if (ty == OP_CONV2D_BWD_DATA) { /* 1 to 4 pairs, summed from the last */
            int m = (int)tv_dim(1, OP_MAX_INPUTS / 2);
            tg_conv_bwd_data(t, m, N, C, H, W, K, R, S, d, d2);
        } else {
            tg_image(t, N, C, H, W, d2);
            tg_image(t, N, K, H, W, d);
            union op_params p = {.conv = {R, S}};
            tg_opn(t, ty, &p, 4, (const uint32_t[]){K, C, R, S});
        }
        int dk = ty == OP_CONV2D_BWD_FILTER ? 1 : 0; /* the input that is not a filter */
        if (kind == 4 || kind == 6)
            tv_fill_cancel(t, dk);
        if (kind == 5)
            tv_fill_tiny(t, dk);
        return kind < 4 || kind == 7;
    }
    case OP_UPSAMPLE2_BWD: {
        uint32_t N = tv_dim(1, 2), C = tv_dim(1, 3), H = tv_dim(1, 6), W = tv_dim(1, 6);
        tg_image(t, N, C, 2 * H, 2 * W, d);
        if (kind == 4 || kind == 6)
            tv_fill_cancel(t, 0);
        if (kind == 5)
            tv_fill_tiny(t, 0);
        tg_opn(t, ty, NULL, 4, (const uint32_t[]){N, C, H, W});
        return kind != 4 && kind != 6;
    }
    default:
        return -1;
    }
}

/* Forces adam's parameters to values where the bias corrections matter. */
static void tv_adam_params(struct tg *t, int kind)
{
    struct node *nd = &t->g.nodes[t->op];
    nd->p.adam.b1 = (float[]){0.9f, 0.99f, 0.5f}[r64() % 3];
    nd->p.adam.b2 = (float[]){0.999f, 0.99f, 0.9f}[r64() % 3];
    nd->p.adam.lr = (float[]){1e-3f, 0.1f, 1.0f}[r64() % 3];
    nd->p.adam.eps = (float[]){1e-8f, 1e-3f, 0.0f}[r64() % 3];
    t->step = (uint64_t[]){0, 1, 9}[r64() % 3];
    if (kind == 6) { /* late, and b2 close to 1 */
        nd->p.adam.b2 = r64() % 2 ? 1 - 0x1p-20f : 0.9999f;
        t->step = r64() % 2 ? 999 : 0;
    }
}

/* One case of op ty, kind in [0, TV_KINDS): 1 when the wrong formula of the
 * op must be found SEMANTIC on it, 0 when its inputs hide it (cancellation,
 * tiny values, a clip point), -1 when ty has no case here. */
static int tv_case(struct tg *t, enum op_type ty, int kind)
{
    tg_init(t);
    int c = tv_case_sum(t, ty, kind);
    if (c >= 0)
        return c;
    enum dist d = tv_dist(kind);
    uint32_t n = tv_dim(100, 300);
    switch (ty) {
    case OP_SIGMOID:
    case OP_TANH:
        tg_leaf(t, n, 0);
        tg_fill(t, 0, d);
        if (kind == 4 || kind == 7)
            tv_fill_range(t, 0, -20, 20);
        if (kind == 5)
            tv_fill_tiny(t, 0);
        if (kind == 6) /* where exp overflows or underflows */
            for (size_t i = 0; i < n; i++)
                t->val[0][i] = (float)(i % 2 ? runif(-110, -80) : runif(80, 110));
        tg_op(t, ty, NULL, n, 0);
        return kind != 5 && kind != 6;
    case OP_SIGMOID_BWD:
    case OP_TANH_BWD:
        tg_leaf(t, n, 0);
        tg_leaf(t, n, 0);
        if (ty == OP_SIGMOID_BWD)
            tv_fill_range(t, 0, 0, 1);
        else
            tv_fill_range(t, 0, -1, 1);
        tg_fill(t, 1, d);
        if (kind == 4) /* y a hair from 1 (and -1): 1 - y y cancels */
            for (size_t i = 0; i < n; i++)
                t->val[0][i] = (1 - (float)(i % 40) * 0x1p-24f) *
                               (ty == OP_TANH_BWD && i % 2 ? -1 : 1);
        if (kind == 5) /* tiny y with large dy: products in the subnormal range */
            for (size_t i = 0; i < n; i++) {
                double m = runif(0, 1); /* one draw a statement */
                t->val[0][i] = (float)ldexp(m, -(int)(r64() % 150));
                t->val[1][i] = rfloat(D_WIDE);
            }
        tg_op(t, ty, NULL, n, 0);
        return kind != 5;
    case OP_HARD_SIGMOID:
    case OP_HARD_SIGMOID_BWD:
        tg_leaf(t, n, 0);
        tv_fill_range(t, 0, -3.5, 3.5);
        if (kind == 1)
            tg_fill(t, 0, D_WIDE);
        if (kind == 4 || kind == 6) /* 0.2 x + 0.5 within a few ulp of 0 or 1 */
            for (size_t i = 0; i < n; i++) {
                float x = i % 2 ? 2.5f : -2.5f;
                for (int s = (int)(r64() % 40) - 20; s != 0; s += s > 0 ? -1 : 1)
                    x = nextafterf(x, s > 0 ? INFINITY : -INFINITY);
                t->val[0][i] = x;
            }
        if (kind == 5)
            tv_fill_tiny(t, 0);
        if (ty == OP_HARD_SIGMOID_BWD) {
            tg_leaf(t, n, 0);
            tg_fill(t, 1, d);
        }
        tg_op(t, ty, NULL, n, 0);
        return kind != 4 && kind != 6 && !(kind == 5 && ty == OP_HARD_SIGMOID);
    default:
        break;
    }
    /* the optimizers, mse_bwd and mean_bwd: oracle_testutil's random instances */
    tg_free(t);
    tg_make(t, ty, kind < 4 ? d : D_UNIT, n);
    if (ty == OP_ADAM_P)
        tv_adam_params(t, kind);
    if (kind == 5) /* tiny values: products in the subnormal range */
        for (int k = 0; k < t->nleaf; k++)
            if (!(ty == OP_ADAM_P && k == 2))
                tv_fill_tiny(t, k);
    if (kind == 5 && ty == OP_ADAM_P) { /* v = m^2, tiny or 0: eps keeps m / (sqrt v + eps) */
        for (size_t i = 0; i < tg_count(t, 2); i++)
            t->val[2][i] = t->val[1][i] * t->val[1][i];
        t->g.nodes[t->op].p.adam.eps = 1e-8f;
    }
    if (kind == 7 && ty == OP_SGD) /* p and lr g of one size: cancellation */
        for (size_t i = 0; i < tg_count(t, 0); i++)
            t->val[0][i] = tg_node(t)->p.sgd.lr * t->val[1][i] * (1 + (float)runif(-1e-3, 1e-3));
    if (ty == OP_ADAM_P) {
        /* Without the bias corrections the update is lr m / (sqrt v + eps)
         * instead of lr (sqrt c2 / c1) m / (sqrt v + eps sqrt c2): the same
         * where sqrt c2 = c1 and eps is small, as for b1 0.9 and b2 0.99 at
         * the first step (sqrt 0.01 = 0.1) */
        const struct node *nd = tg_node(t);
        double st = (double)t->step + 1;
        double c1 = 1 - pow(nd->p.adam.b1, st), c2 = 1 - pow(nd->p.adam.b2, st);
        if (fabs(sqrt(c2) / c1 - 1) < 1e-3 && nd->p.adam.eps < 1e-6f)
            return 0;
    }
    return kind != 5 && !(kind == 6 && ty == OP_ADAM_P);
}

/* The op types that have a rewrite. */
static size_t tv_types(enum op_type *out)
{
    size_t n = 0;
    for (int ty = 0; ty < OP_COUNT; ty++)
        if (variant_formula_for((enum op_type)ty))
            out[n++] = (enum op_type)ty;
    return n;
}

/* Every case of op type *state: the rewrite within bounds, fault.c's wrong
 * formula (where the op has one) beyond them where the case shows it. */
static void test_variant_op(void **state)
{
    enum op_type ty = *(const enum op_type *)*state;
    backend_op_fn fn = variant_formula_for(ty);
    assert_non_null(fn);
    double worst = 0;
    long elems = 0, checked = 0, caught = 0;
    int has_fault = 0;
    for (int kind = 0; kind < TV_KINDS; kind++)
        for (int rep = 0; rep < TV_REPS; rep++) {
            struct tg t;
            int must = tv_case(&t, ty, kind);
            assert_true(must >= 0);
            struct replay_opcheck c;
            tv_classify(&t, fn, &c);
            if (c.cls == REPLAY_SEMANTIC)
                fail_msg("%s rewrite, case kind %d: element %llu is %a, exact %a, bound %g "
                         "(error / allowed %g)", op_type_name(ty), kind,
                         (unsigned long long)c.worst, (double)c.worst_value,
                         (double)c.worst_exact, c.worst_bound, c.max_ratio);
            worst = fmax(worst, c.max_ratio);
            elems += (long)tg_node(&t)->count; /* outputs and inputs */
            for (int k = 0; k < t.nleaf; k++)
                elems += (long)tg_count(&t, k);
            backend_op_fn bad = tv_fault_for(&t);
            has_fault = bad != NULL;
            if (bad && must) {
                tv_classify(&t, bad, &c);
                checked++;
                caught += c.cls == REPLAY_SEMANTIC;
                if (c.cls != REPLAY_SEMANTIC)
                    fail_msg("%s: the wrong formula is %s on case kind %d (largest error / "
                             "allowed %g): the bound is too loose", op_type_name(ty),
                             replay_class_name(c.cls), kind, c.max_ratio);
            }
            tg_free(&t);
        }
    if (verbose)
        printf("%-18s rewrite: largest error / allowed %.3g over %ld values; wrong formula "
               "%s (%ld of %ld cases)\n", op_type_name(ty), worst, elems,
               has_fault ? "SEMANTIC" : "none", caught, checked);
    assert_true(elems >= 300);
}

/* The table: at least eight rewrites, of ops that are not exact, listed in
 * variant_formulas(). */
static void test_variant_table(void **state)
{
    (void)state;
    enum op_type types[OP_COUNT];
    size_t n = tv_types(types);
    assert_true(n >= 8);
    const char *list = variant_formulas();
    for (size_t k = 0; k < n; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s: ", op_type_name(types[k]));
        if (!strstr(list, name))
            fail_msg("variant_formulas() does not list %s", op_type_name(types[k]));
    }
    assert_null(variant_formula_for(OP_RELU));
    assert_null(variant_formula_for(OP_INPUT));
}

int main(void)
{
    const char *v = getenv("TEST_VARIANT_VERBOSE");
    verbose = v && *v && strcmp(v, "0") != 0;
    unsetenv("DIVTRACE_ORACLE_EXACT");
    static enum op_type types[OP_COUNT];
    size_t n = tv_types(types);
    struct CMUnitTest tests[OP_COUNT + 1];
    memset(tests, 0, sizeof tests);
    tests[0] = (struct CMUnitTest)cmocka_unit_test(test_variant_table);
    for (size_t k = 0; k < n; k++) {
        tests[k + 1].name = op_type_name(types[k]);
        tests[k + 1].test_func = test_variant_op;
        tests[k + 1].initial_state = &types[k];
    }
    return _cmocka_run_group_tests("test_variant", tests, n + 1, NULL, NULL);
}
