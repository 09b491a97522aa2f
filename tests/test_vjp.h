/* test_vjp.h: what the sources of the test_vjp program share (test_vjp.c,
 * test_vjp_image.c, test_vjp_opt.c): a case and its check, from test_vjp.c,
 * and the tests of the other two files that main runs. */
#ifndef DT_TEST_VJP_H
#define DT_TEST_VJP_H

#include <stddef.h>
#include <stdint.h>

#include "graph.h"

#define VJP_MAX_LEAVES 8

/* One case: a graph built by the test, the values of its leaves in double
 * (each exactly a float, so the float32 run and the double model evaluate
 * the same point), and the double model of its forward function. */
struct vjp_case {
    char what[64];
    struct graph g;
    int nleaf;
    int leaf[VJP_MAX_LEAVES];      /* node indices, in creation order */
    double *val[VJP_MAX_LEAVES];   /* values of leaf k, row-major */
    int out;                       /* node whose value the model also returns */
    int loss;                      /* scalar loss node */
    /* The loss at the current c->val, computed in double without the
     * library; fills out (node out's count values). */
    double (*model)(const struct vjp_case *c, double *out);
    uint64_t rng;
};

/* Builds a case: leaves, out, loss and model (vjp_run_guarded). */
typedef void (*vjp_build_fn)(struct vjp_case *c);

/* ---- test_vjp.c: cases, the double models' mse, the check ------------------ */

void vjp_case_init(struct vjp_case *c, const char *what, uint64_t seed);
void vjp_case_free(struct vjp_case *c);
int vjp_leaf(struct vjp_case *c, int param, const char *name, uint32_t d0, uint32_t d1,
             double lo, double hi, double away);
int vjp_leaf4(struct vjp_case *c, int param, const char *name, uint32_t d0, uint32_t d1,
              uint32_t d2, uint32_t d3, double lo, double hi, double away);
void vjp_leaf_avoid(struct vjp_case *c, int k, double kink, double dist);
const struct node *vjp_leaf_node(const struct vjp_case *c, int k);
double vjp_ref_mse(const double *p, const double *t, size_t n);
void vjp_check(struct vjp_case *c);
void vjp_run_guarded(vjp_build_fn build, const char *what, uint64_t seed);

/* ---- test_vjp_image.c: the image ops --------------------------------------- */

void test_conv2d(void **state);
void test_add_bias4(void **state);
void test_maxpool2(void **state);
void test_maxpool2_ties(void **state);
void test_upsample2(void **state);
void test_concat(void **state);
void test_slice(void **state);
void test_hard_sigmoid(void **state);
void test_satlu(void **state);
void test_neg(void **state);
void test_sub(void **state);
void test_mul(void **state);
void test_mul_same_operand(void **state);
void test_mean(void **state);
void test_convlstm_gate(void **state);

/* ---- test_vjp_opt.c: the optimizer's update ops ---------------------------- */

void test_sgd(void **state);
void test_sgd_momentum(void **state);
void test_adam(void **state);

#endif
