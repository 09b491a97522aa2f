/* conv_testutil.h: a graph of PredNet's image ops run on the cpu backend,
 * for test_conv.c and test_image_ops.c: leaves with given or random
 * values, output gradients injected through a loss term, one step. */
#ifndef DT_CONV_TESTUTIL_H
#define DT_CONV_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "exec.h"
#include "graph.h"

#define CT_MAX_LEAVES 96

struct ct {
    struct graph g;
    int loss;                       /* sum of the injected loss terms, or -1 */
    int nleaf;
    int leaf[CT_MAX_LEAVES];
    float *val[CT_MAX_LEAVES];      /* each leaf's values, as uploaded */
    void *ctx;
    struct exec e;
    int started;
    uint64_t rng;
};

/* An empty graph; seed drives the random values. */
void ct_init(struct ct *t, uint64_t seed);
void ct_free(struct ct *t);
/* n values: uniform in [-1, 1], or when `integer`, integers in [-4, 4]. */
void ct_fill(struct ct *t, float *v, size_t n, int integer);
/* A leaf (a parameter when `param`, which gets a gradient) with the values v,
 * or random ones (ct_fill) when v is NULL. */
int ct_leaf(struct ct *t, int param, const char *name, int ndim, const uint32_t *shape, const float *v,
            int integer);
int ct_leaf4(struct ct *t, int param, const char *name, uint32_t n, uint32_t c, uint32_t h, uint32_t w,
             const float *v, int integer);
/* A leaf's values, as uploaded. */
const float *ct_val(const struct ct *t, int node);
/* Make d loss / d y the values of a new input "<y>.dy" (v, or random):
 * loss += count(y) * mean(y * dy), whose backward pass gives y the gradient
 * 1 * dy, that is dy bit for bit. Returns the dy leaf. */
int ct_inject(struct ct *t, int y, const float *v, int integer);
/* Append the backward pass (if anything was injected) and run one step. */
void ct_run(struct ct *t);
/* Node i's values (malloc'd). */
float *ct_get(struct ct *t, int i);
/* The gradient node of i, which must be an op of type `type`. */
int ct_grad(const struct ct *t, int i, enum op_type type);
/* got and want bit for bit, n elements. */
void ct_expect_bits(const char *what, const float *got, const float *want, size_t n);

#endif
