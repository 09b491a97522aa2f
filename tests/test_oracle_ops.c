/* test_oracle_ops.c: oracle_op against MPFR evaluations of each op (exact, or
 * 600-bit approximations whose rounding is checked to be decided), and the
 * oracle_bound error bounds against the cpu kernels. TEST_ORACLE_VERBOSE=1
 * prints the observed error / bound ratios.
 * Sources: this file (oracle_op on chosen and random inputs, and main),
 * test_oracle_ops_ref.c (the reference) and test_oracle_ops_bound.c (the
 * bounds); test_oracle_ops.h declares what they share. */
#include <float.h>
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
#include "graph.h"
#include "oracle.h"
#include "oracle_testutil.h"
#include "test_oracle_ops.h"
#include "util.h"

int verbose;

const enum op_type ops_all[] = {
    OP_MATMUL, OP_ADD_BIAS, OP_BIAS_GRAD, OP_SIGMOID, OP_SIGMOID_BWD, OP_TANH, OP_TANH_BWD,
    OP_RELU, OP_RELU_BWD, OP_ADD, OP_MSE, OP_MSE_BWD, OP_SGD, OP_MOMENTUM, OP_ADAM_M,
    OP_ADAM_V, OP_ADAM_P, OP_FILL, OP_CONV2D, OP_CONV2D_BWD_DATA, OP_CONV2D_BWD_FILTER,
    OP_MAXPOOL2, OP_MAXPOOL2_BWD, OP_UPSAMPLE2, OP_UPSAMPLE2_BWD, OP_CONCAT, OP_SLICE,
    OP_SLICE_BWD, OP_HARD_SIGMOID, OP_HARD_SIGMOID_BWD, OP_SATLU, OP_SATLU_BWD, OP_SUB, OP_NEG,
    OP_MUL, OP_MEAN, OP_MEAN_BWD};
const size_t ops_all_n = sizeof ops_all / sizeof ops_all[0];

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
