/* test_gpu_ops.c: every op type on a GPU backend (DIVTRACE_GPU_BACKEND,
 * default cuda) against the exact oracle and the cpu backend, on seeded
 * random inputs: each output element within oracle_bound of the exact value
 * (bound-0 ops bit for bit), bit for bit equal to the cpu where the cuda
 * kernel performs the cpu's float32 operations in its order, and two runs
 * bit for bit equal unless DIVTRACE_GPU_REDUCE=atomic; reductions also run
 * under --reduce atomic, within the bound; data gradients of several pairs
 * against a host sum of their own. Exits 77 (skip) without a GPU.
 * Dimension letters: N batch, C input and K output channels, H x W image,
 * R x S kernel; M, K, N of a matrix product. */
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
#include "exec.h"
#include "graph.h"
#include "oracle.h"
#include "oracle_testutil.h"
#include "pairs_testutil.h"
#include "util.h"

/* A backend and its context. */
struct gt_be {
    const struct backend_ops *ops;
    void *ctx;
};

static struct gt_be gt_cpu, gt_gpu, gt_atomic;
static int gt_tree; /* gt_gpu reduces in a fixed order (not --reduce atomic) */
static int gt_atomic_own; /* gt_atomic is a context of its own */

static uint32_t gt_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* "matmul (100,784) (784,128)": the op and its inputs' shapes (static buffer). */
static const char *gt_what(const struct tg *t)
{
    static char buf[512];
    size_t o = (size_t)snprintf(buf, sizeof buf, "%s", op_type_name(tg_node(t)->type));
    for (int k = 0; k < t->nleaf && o < sizeof buf; k++) {
        const struct node *x = &t->g.nodes[t->leaf[k]];
        for (int d = 0; d < x->ndim && o < sizeof buf; d++)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%u%s", d ? "," : " (", x->shape[d],
                                  d == x->ndim - 1 ? ")" : "");
    }
    return buf;
}

/* The op node of t run once on b at t's step: its output (malloc'd). Each
 * run has buffers of its own. */
static float *gt_run(const struct gt_be *b, struct tg *t)
{
    struct exec e;
    if (exec_init(&e, &t->g, b->ops, b->ctx) != 0)
        fail_msg("%s on %s: %s", gt_what(t), b->ops->name, dt_error());
    for (int k = 0; k < t->nleaf; k++)
        exec_set(&e, t->leaf[k], t->val[k]);
    exec_step(&e, t->step);
    size_t n = tg_node(t)->count;
    float *out = malloc((n + 1) * sizeof *out);
    assert_non_null(out);
    exec_get(&e, t->op, out);
    exec_free(&e);
    return out;
}

/* The exact values (oracle_op) and error bounds (oracle_bound) of t's op. */
static void gt_oracle(struct tg *t, float **exact, double **bound)
{
    const struct node *nd = tg_node(t);
    const float *in[OP_MAX_INPUTS];
    for (int k = 0; k < t->nleaf; k++)
        in[k] = t->val[k];
    struct backend_step st = {.step = t->step};
    *exact = malloc((nd->count + 1) * sizeof **exact);
    *bound = malloc((nd->count + 1) * sizeof **bound);
    assert_true(*exact && *bound);
    if (oracle_op(&t->g, nd, *exact, in, &st) != 0 || oracle_bound(&t->g, nd, *bound, in, &st) != 0)
        fail_msg("oracle, %s: %s", gt_what(t), dt_error());
}

/* got within the bound of the exact value whose float32 rounding is x: as
 * replay classifies a rounding difference, |got - x| <= bound + ulp32(x) / 2;
 * with bound 0 bit for bit, except NaN payloads and the sign of an exact
 * zero. An infinite bound makes no claim. */
static int gt_within(float got, float x, double bound)
{
    if (isinf(bound))
        return 1;
    if (bound == 0)
        return gt_bits(got) == gt_bits(x) || (isnan(got) && isnan(x)) || (got == 0 && x == 0);
    double err = fabs((double)got - (double)x);
    return isfinite(x) && err <= bound + 0.5 * oracle_ulp32(x);
}

/* The cuda kernel of this node performs the cpu's float32 operations in the
 * cpu's order, so its output must equal the cpu's bit for bit (NaN payloads
 * aside). Not for a kernel the backend took from cuDNN. */
static int gt_as_cpu(const struct tg *t, const struct gt_be *b, int tree)
{
    const struct node *nd = tg_node(t);
    if (b->ops->op[nd->type] != backend_cuda.op[nd->type])
        return 0;
    switch (nd->type) {
    case OP_ADD_BIAS:
    case OP_SIGMOID_BWD:
    case OP_TANH_BWD:
    case OP_RELU:
    case OP_RELU_BWD:
    case OP_ADD:
    case OP_MSE_BWD:
    case OP_SGD:
    case OP_MOMENTUM:
    case OP_ADAM_M:
    case OP_ADAM_V:
    case OP_ADAM_P:
    case OP_FILL:
    case OP_MAXPOOL2:
    case OP_MAXPOOL2_BWD:
    case OP_UPSAMPLE2:
    case OP_UPSAMPLE2_BWD:
    case OP_CONCAT:
    case OP_SLICE:
    case OP_SLICE_BWD:
    case OP_HARD_SIGMOID:
    case OP_HARD_SIGMOID_BWD:
    case OP_SATLU:
    case OP_SATLU_BWD:
    case OP_SUB:
    case OP_NEG:
    case OP_MUL:
    case OP_MEAN_BWD:
        return 1;
    case OP_BIAS_GRAD: /* (N,F): one column sum per thread, in row order */
        return tree && t->g.nodes[t->leaf[0]].ndim == 2;
    default:
        return 0;
    }
}

/* Run t on the cpu and on b (twice when `repeat`) and check every element:
 * within the oracle's bound, as the cpu where gt_as_cpu, and the same in
 * both runs. */
static void gt_check_on(struct tg *t, const struct gt_be *b, int tree, int repeat)
{
    const struct node *nd = tg_node(t);
    float *exact, *cpu = gt_run(&gt_cpu, t), *gpu = gt_run(b, t);
    float *again = repeat ? gt_run(b, t) : NULL;
    double *bound;
    gt_oracle(t, &exact, &bound);
    int as_cpu = gt_as_cpu(t, b, tree);
    for (size_t i = 0; i < nd->count; i++) {
        if (!gt_within(gpu[i], exact[i], bound[i]))
            fail_msg("%s on %s (step %llu) [%zu]: %a (%.9g), exact %a, bound %g; cpu %a",
                     gt_what(t), b->ops->name, (unsigned long long)t->step, i, (double)gpu[i],
                     (double)gpu[i], (double)exact[i], bound[i], (double)cpu[i]);
        if (as_cpu && gt_bits(gpu[i]) != gt_bits(cpu[i]) && !(isnan(gpu[i]) && isnan(cpu[i])))
            fail_msg("%s on %s (step %llu) [%zu]: %a (0x%08x), cpu %a (0x%08x): the same "
                     "float32 operations should give the same bits", gt_what(t), b->ops->name,
                     (unsigned long long)t->step, i, (double)gpu[i], gt_bits(gpu[i]),
                     (double)cpu[i], gt_bits(cpu[i]));
        if (again && gt_bits(gpu[i]) != gt_bits(again[i]))
            fail_msg("%s on %s [%zu]: 0x%08x, then 0x%08x in a second run (--reduce tree "
                     "must be reproducible)", gt_what(t), b->ops->name, i, gt_bits(gpu[i]),
                     gt_bits(again[i]));
    }
    free(exact);
    free(bound);
    free(cpu);
    free(gpu);
    free(again);
}

/* The checks on the backend under test, then the graph freed. */
static void gt_check(struct tg *t)
{
    gt_check_on(t, &gt_gpu, gt_tree, gt_tree);
    tg_free(t);
}

/* ---- graphs of given shapes (tg_make draws random small ones) ----------------- */

/* matmul: a (M,K) or (K,M), b (K,N) or (N,K) */
static void gt_matmul(struct tg *t, uint32_t m, uint32_t k, uint32_t n, int ta, int tb)
{
    tg_init(t);
    int a = ta ? tg_leaf(t, k, m) : tg_leaf(t, m, k);
    int b = tb ? tg_leaf(t, n, k) : tg_leaf(t, k, n);
    tg_fill(t, 0, D_UNIT);
    tg_fill(t, 1, D_UNIT);
    t->op = graph_matmul(&t->g, "op", a, b, ta, tb);
}

/* bias_grad of dy (rows, F), or of (N,C,H,W) when shape has 4 entries */
static void gt_bias_grad(struct tg *t, int ndim, const uint32_t *shape, enum dist d)
{
    tg_init(t);
    union op_params p;
    memset(&p, 0, sizeof p);
    tg_leafn(t, ndim, shape);
    tg_fill(t, 0, d);
    uint32_t c = shape[1];
    tg_opn(t, OP_BIAS_GRAD, &p, 1, &c);
}

/* conv2d, conv2d_bwd_data or conv2d_bwd_filter of x (N,C,H,W), w (K,C,R,S) */
static void gt_conv(struct tg *t, enum op_type ty, uint32_t n, uint32_t c, uint32_t h, uint32_t w,
                    uint32_t k, uint32_t r, uint32_t s)
{
    tg_init(t);
    union op_params p;
    memset(&p, 0, sizeof p);
    switch (ty) {
    case OP_CONV2D: {
        int x = tg_image(t, n, c, h, w, D_UNIT), wt = tg_image(t, k, c, r, s, D_UNIT);
        t->op = graph_conv2d(&t->g, "op", x, wt);
        break;
    }
    case OP_CONV2D_BWD_DATA: {
        tg_image(t, n, k, h, w, D_UNIT);
        tg_image(t, k, c, r, s, D_UNIT);
        uint32_t shape[4] = {n, c, h, w};
        tg_opn(t, ty, &p, 4, shape);
        break;
    }
    default: {
        tg_image(t, n, c, h, w, D_UNIT);
        tg_image(t, n, k, h, w, D_UNIT);
        p.conv.r = r;
        p.conv.s = s;
        uint32_t shape[4] = {k, c, r, s};
        tg_opn(t, OP_CONV2D_BWD_FILTER, &p, 4, shape);
        break;
    }
    }
}

/* x (N,C,2H,2W) with ties, -0 and +0 in a quarter of its windows */
static int gt_pool_input(struct tg *t, uint32_t n, uint32_t c, uint32_t h2, uint32_t w2)
{
    int x = tg_image(t, n, c, h2, w2, D_UNIT);
    static const float tie[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f};
    for (size_t i = 0; i < tg_count(t, 0); i++)
        if (r64() % 4 == 0)
            t->val[0][i] = tie[r64() % 5];
    return x;
}

/* An elementwise op (or any op tg_make draws with n elements) of n elements. */
static void gt_elementwise(enum op_type ty, uint32_t n)
{
    struct tg t;
    tg_make(&t, ty, D_UNIT, n);
    gt_check(&t);
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_table(void **state)
{
    (void)state;
    for (int ty = OP_MATMUL; ty < OP_COUNT; ty++) {
        if (!backend_cuda.op[ty])
            fail_msg("cuda has no kernel for %s", op_type_name((enum op_type)ty));
        if (!gt_gpu.ops->op[ty])
            fail_msg("%s has no kernel for %s", gt_gpu.ops->name, op_type_name((enum op_type)ty));
    }
}

/* Every op type on random small instances from every input distribution. */
static void test_random(void **state)
{
    (void)state;
    for (int ty = OP_MATMUL; ty < OP_COUNT; ty++)
        for (int d = 0; d < D_NDIST; d++)
            for (int rep = 0; rep < 6; rep++) {
                struct tg t;
                tg_make(&t, (enum op_type)ty, (enum dist)d, 1 + (uint32_t)(r64() % 300));
                gt_check(&t);
            }
}

/* NaN, Inf, zeros and subnormals among the inputs of every op. */
static void test_special(void **state)
{
    (void)state;
    static const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 0x1p-149f, -0x1p-140f,
                               3.4028235e38f, 1.0f, -1.0f, 0.5f};
    for (int ty = OP_MATMUL; ty < OP_COUNT; ty++)
        for (int rep = 0; rep < 8; rep++) {
            struct tg t;
            tg_make(&t, (enum op_type)ty, rep % 2 ? D_UNIT : D_WIDE, 1 + (uint32_t)(r64() % 60));
            for (int k = 0; k < t.nleaf; k++)
                for (size_t i = 0; i < tg_count(&t, k); i++)
                    if (r64() % 7 == 0)
                        t.val[k][i] = sp[r64() % (sizeof sp / sizeof sp[0])];
            gt_check(&t);
        }
}

/* The autoencoder's shapes: a 100 x 784 batch through a 784 x 128 layer,
 * forward and both gradients, and its elementwise ops, losses and updates. */
static void test_autoencoder_shapes(void **state)
{
    (void)state;
    struct tg t;
    gt_matmul(&t, 100, 784, 128, 0, 0); /* x W */
    gt_check(&t);
    gt_matmul(&t, 100, 128, 784, 0, 1); /* dy W^T */
    gt_check(&t);
    gt_matmul(&t, 784, 100, 128, 1, 0); /* x^T dy */
    gt_check(&t);
    gt_matmul(&t, 128, 100, 784, 1, 1);
    gt_check(&t);
    for (int f = 0; f < 2; f++) {
        uint32_t shape[2] = {100, f ? 784u : 128u};
        gt_bias_grad(&t, 2, shape, D_UNIT);
        gt_check(&t);
        tg_init(&t);
        int x = tg_leaf(&t, 100, shape[1]), b = tg_leaf(&t, shape[1], 0);
        tg_fill(&t, 0, D_UNIT);
        tg_fill(&t, 1, D_UNIT);
        t.op = graph_add_bias(&t.g, "op", x, b);
        gt_check(&t);
    }
    static const enum op_type ew[] = {OP_SIGMOID, OP_SIGMOID_BWD, OP_TANH, OP_TANH_BWD,
                                      OP_RELU, OP_RELU_BWD, OP_ADD, OP_MSE, OP_MSE_BWD,
                                      OP_MEAN, OP_MEAN_BWD, OP_SUB, OP_MUL};
    for (size_t k = 0; k < sizeof ew / sizeof ew[0]; k++)
        gt_elementwise(ew[k], 100 * 784);
    static const enum op_type upd[] = {OP_SGD, OP_MOMENTUM, OP_ADAM_M, OP_ADAM_V, OP_ADAM_P};
    for (size_t k = 0; k < sizeof upd / sizeof upd[0]; k++)
        for (int rep = 0; rep < 3; rep++)
            gt_elementwise(upd[k], 784 * 128);
}

/* PredNet's shapes: convolutions with C = 19, K = 1 at 64 x 64 and C = 80,
 * K = 16 at 32 x 32 (and the reverse), all three directions; its pooling,
 * upsampling, channel ops and per-channel bias. */
static void test_prednet_shapes(void **state)
{
    (void)state;
    static const uint32_t conv[][7] = {
        {2, 19, 64, 64, 1, 3, 3},  {2, 1, 64, 64, 19, 3, 3}, {2, 80, 32, 32, 16, 3, 3},
        {2, 16, 32, 32, 80, 3, 3}, {3, 8, 33, 32, 5, 5, 5},  {2, 6, 17, 9, 4, 1, 1},
        {1, 3, 5, 7, 2, 3, 5},
    };
    static const enum op_type dirs[] = {OP_CONV2D, OP_CONV2D_BWD_DATA, OP_CONV2D_BWD_FILTER};
    struct tg t;
    for (size_t s = 0; s < sizeof conv / sizeof conv[0]; s++)
        for (size_t d = 0; d < 3; d++) {
            const uint32_t *c = conv[s];
            gt_conv(&t, dirs[d], c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
            gt_check(&t);
        }
    /* per-channel bias and its gradient: one segment, two, and a partial one */
    static const uint32_t img[][4] = {{2, 19, 64, 64}, {2, 16, 32, 32}, {3, 4, 50, 50}, {1, 3, 1, 1}};
    for (size_t s = 0; s < sizeof img / sizeof img[0]; s++) {
        gt_bias_grad(&t, 4, img[s], D_UNIT);
        gt_check(&t);
        tg_init(&t);
        int x = tg_image(&t, img[s][0], img[s][1], img[s][2], img[s][3], D_UNIT);
        int b = tg_leaf(&t, img[s][1], 0);
        tg_fill(&t, 1, D_UNIT);
        t.op = graph_add_bias(&t.g, "op", x, b);
        gt_check(&t);
    }
    /* maxpool2 and its backward on 64 x 64 */
    tg_init(&t);
    t.op = graph_maxpool2(&t.g, "op", gt_pool_input(&t, 2, 19, 64, 64));
    gt_check(&t);
    tg_init(&t);
    gt_pool_input(&t, 2, 19, 64, 64);
    tg_image(&t, 2, 19, 32, 32, D_UNIT);
    tg_opn(&t, OP_MAXPOOL2_BWD, NULL, 4, (const uint32_t[]){2, 19, 64, 64});
    gt_check(&t);
    /* upsample2 32 -> 64 and back */
    tg_init(&t);
    t.op = graph_upsample2(&t.g, "op", tg_image(&t, 2, 16, 32, 32, D_UNIT));
    gt_check(&t);
    tg_init(&t);
    tg_image(&t, 2, 16, 64, 64, D_UNIT);
    tg_opn(&t, OP_UPSAMPLE2_BWD, NULL, 4, (const uint32_t[]){2, 16, 32, 32});
    gt_check(&t);
    /* concat of 1 to OP_MAX_INPUTS inputs, slice and slice_bwd */
    for (int m = 1; m <= OP_MAX_INPUTS; m++) {
        static const uint32_t cs[OP_MAX_INPUTS] = {3, 16, 1, 5, 2, 7, 1, 4};
        int xs[OP_MAX_INPUTS];
        tg_init(&t);
        for (int k = 0; k < m; k++)
            xs[k] = tg_image(&t, 2, cs[k], 32, 32, D_UNIT);
        t.op = graph_concat(&t.g, "op", m, xs);
        gt_check(&t);
    }
    tg_init(&t);
    t.op = graph_slice(&t.g, "op", tg_image(&t, 2, 19, 64, 64, D_UNIT), 3, 16);
    gt_check(&t);
    tg_init(&t);
    tg_image(&t, 2, 16, 64, 64, D_UNIT);
    union op_params p;
    memset(&p, 0, sizeof p);
    p.slice.c0 = 3;
    p.slice.n = 16;
    p.slice.total = 19;
    tg_opn(&t, OP_SLICE_BWD, &p, 4, (const uint32_t[]){2, 19, 64, 64});
    gt_check(&t);
    /* the elementwise ops of PredNet over a 2 x 19 x 64 x 64 tensor, and
     * some over more elements than the device has threads (grid-stride loops) */
    static const enum op_type ew[] = {OP_HARD_SIGMOID, OP_HARD_SIGMOID_BWD, OP_SATLU,
                                      OP_SATLU_BWD, OP_RELU, OP_RELU_BWD, OP_TANH, OP_SUB,
                                      OP_NEG, OP_MUL, OP_ADD, OP_MEAN, OP_MEAN_BWD, OP_FILL};
    for (size_t k = 0; k < sizeof ew / sizeof ew[0]; k++)
        gt_elementwise(ew[k], 2 * 19 * 64 * 64);
    static const enum op_type big[] = {OP_ADD, OP_HARD_SIGMOID, OP_MEAN, OP_MSE, OP_ADAM_P};
    for (size_t k = 0; k < sizeof big / sizeof big[0]; k++)
        gt_elementwise(big[k], 600000);
}

/* Data gradients of m = 1, 2 and 4 pairs (dy_j, w_j) (the leaves dy_0,
 * w_0, dy_1, ...): within pt_bwd_data's float32 bound of the host's sum
 * over every pair (pairs_testutil.h, not the oracle), and two runs bit for
 * bit equal, whatever --reduce says (the op has no atomic form). On cudnn
 * m > 1 is one call of the pairs stacked along K. */
static void test_conv_pairs(void **state)
{
    (void)state;
    static const struct pt_shape shapes[] = {
        {2, 80, 32, 32, 16, 3, 3}, /* PredNet's gates of layer 1 */
        {2, 19, 64, 64, 1, 3, 3},  /* one channel a pair */
        {3, 8, 9, 6, 5, 5, 5},     /* an image barely wider than the kernel */
        {2, 6, 17, 9, 4, 1, 1},    /* 1 x 1 */
        {1, 3, 5, 7, 2, 3, 5},     /* one item, R != S */
    };
    static const int ms[] = {1, 2, 4};
    for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++)
        for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++) {
            const struct pt_shape *sh = &shapes[q];
            int m = ms[a];
            struct tg t;
            tg_init(&t);
            for (int j = 0; j < m; j++) {
                tg_image(&t, sh->n, sh->k, sh->h, sh->w, D_UNIT);
                tg_image(&t, sh->k, sh->c, sh->r, sh->s, D_UNIT);
            }
            tg_opn(&t, OP_CONV2D_BWD_DATA, NULL, 4, (const uint32_t[]){sh->n, sh->c, sh->h, sh->w});
            const float *dy[OP_MAX_INPUTS / 2], *w[OP_MAX_INPUTS / 2];
            for (int j = 0; j < m; j++) {
                dy[j] = t.val[2 * j];
                w[j] = t.val[2 * j + 1];
            }
            size_t n = tg_node(&t)->count;
            float *exact = malloc(n * sizeof *exact);
            double *bound = malloc(n * sizeof *bound);
            assert_true(exact && bound);
            pt_bwd_data(dy, w, m, sh, exact, bound);
            float *got = gt_run(&gt_gpu, &t), *again = gt_run(&gt_gpu, &t);
            for (size_t i = 0; i < n; i++) {
                if (!gt_within(got[i], exact[i], bound[i]))
                    fail_msg("%s, %d pairs, on %s [%zu]: %a (%.9g), host %a, bound %g", gt_what(&t), m,
                             gt_gpu.ops->name, i, (double)got[i], (double)got[i], (double)exact[i], bound[i]);
                if (gt_bits(got[i]) != gt_bits(again[i]))
                    fail_msg("%s, %d pairs, on %s [%zu]: 0x%08x, then 0x%08x in a second run", gt_what(&t), m,
                             gt_gpu.ops->name, i, gt_bits(got[i]), gt_bits(again[i]));
            }
            free(exact);
            free(bound);
            free(got);
            free(again);
            tg_free(&t);
        }
}

/* Reductions under --reduce atomic (arrival order): within the bound. Two
 * runs may differ; how often is printed, not checked. */
static void test_reduce_atomic(void **state)
{
    (void)state;
    size_t differ = 0, total = 0;
    for (int rep = 0; rep < 40; rep++) {
        struct tg t;
        enum op_type ty = (enum op_type[]){OP_BIAS_GRAD, OP_MSE, OP_MEAN}[rep % 3];
        int big = rep % 4 == 0;
        switch (rep % 8) {
        case 0:
            gt_bias_grad(&t, 4, (const uint32_t[]){2, 19, 64, 64}, D_UNIT);
            break;
        case 3:
            gt_bias_grad(&t, 2, (const uint32_t[]){100, 784}, D_UNIT);
            break;
        case 6:
            gt_bias_grad(&t, 4, (const uint32_t[]){3, 4, 50, 50}, D_WIDE);
            break;
        default:
            tg_make(&t, ty, rep % 2 ? D_UNIT : D_WIDE, big ? 200000 : 1 + (uint32_t)(r64() % 3000));
            break;
        }
        gt_check_on(&t, &gt_atomic, 0, 0);
        float *a = gt_run(&gt_atomic, &t), *b = gt_run(&gt_atomic, &t);
        for (size_t i = 0; i < tg_node(&t)->count; i++) {
            differ += gt_bits(a[i]) != gt_bits(b[i]);
            total++;
        }
        free(a);
        free(b);
        tg_free(&t);
    }
    printf("reduce atomic: %zu of %zu reduced values differed between two runs\n", differ, total);
}

int main(void)
{
    const char *name = getenv("DIVTRACE_GPU_BACKEND");
    const char *reduce = getenv("DIVTRACE_GPU_REDUCE");
    if (!name || !*name)
        name = "cuda";
    if (reduce && !*reduce)
        reduce = NULL;
    if (reduce && strcmp(reduce, "tree") != 0 && strcmp(reduce, "atomic") != 0) {
        fprintf(stderr, "test_gpu_ops: DIVTRACE_GPU_REDUCE='%s': expected tree or atomic\n", reduce);
        return 1;
    }
    gt_gpu.ops = backend_find(name);
    if (!gt_gpu.ops) {
        fprintf(stderr, "test_gpu_ops: DIVTRACE_GPU_BACKEND: %s\n", dt_error());
        return 1;
    }
    struct backend_options bo = {.threads = 1, .reduce = reduce};
    if (gt_gpu.ops->init(&gt_gpu.ctx, &bo) != 0) {
        printf("skipping: %s\n", dt_error());
        return 77;
    }
    gt_tree = !reduce || strcmp(reduce, "tree") == 0;
    gt_atomic = gt_gpu;
    if (gt_tree) {
        struct backend_options ba = {.threads = 1, .reduce = "atomic"};
        if (gt_gpu.ops->init(&gt_atomic.ctx, &ba) != 0) {
            fprintf(stderr, "test_gpu_ops: --reduce atomic: %s\n", dt_error());
            return 1;
        }
        gt_atomic_own = 1;
    }
    gt_cpu.ops = &backend_cpu;
    struct backend_options bc = {.threads = 1};
    if (backend_cpu.init(&gt_cpu.ctx, &bc) != 0) {
        fprintf(stderr, "test_gpu_ops: cpu: %s\n", dt_error());
        return 1;
    }
    printf("backend %s, reduce %s\n", name, gt_tree ? "tree" : "atomic");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_special),
        cmocka_unit_test(test_autoencoder_shapes),
        cmocka_unit_test(test_prednet_shapes),
        cmocka_unit_test(test_conv_pairs),
        cmocka_unit_test(test_reduce_atomic),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (gt_atomic_own)
        gt_gpu.ops->free(gt_atomic.ctx);
    gt_gpu.ops->free(gt_gpu.ctx);
    backend_cpu.free(gt_cpu.ctx);
    return rc;
}
