/* op.h: the op set. An op is a pure function of its input tensors and a few
 * scalar parameters; each type has a vector-Jacobian rule (graph.c) and one
 * kernel per backend. Shapes use the letters N (batch rows), F (features),
 * K (inner dimension of a matrix product). */
#ifndef DT_OP_H
#define DT_OP_H

#include "trace.h"

enum op_type {
    OP_INPUT = 0,   /* leaf: data fed to the step */
    OP_PARAM,       /* leaf: a trained parameter */
    OP_STATE,       /* leaf: optimizer state */
    OP_MATMUL,      /* out = op(a) op(b), op = transpose when p.mm.ta / p.mm.tb */
    OP_ADD_BIAS,    /* out (N,F) = x (N,F) + b (F) */
    OP_BIAS_GRAD,   /* out (F) = sum over rows of dy (N,F), rows in order */
    OP_SIGMOID,     /* out = 1 / (1 + exp(-x)) */
    OP_SIGMOID_BWD, /* out = dy * y * (1 - y); inputs y, dy */
    OP_TANH,        /* out = tanh(x) */
    OP_TANH_BWD,    /* out = dy * (1 - y * y); inputs y, dy */
    OP_RELU,        /* out = max(x, 0) */
    OP_RELU_BWD,    /* out = x > 0 ? dy : 0; inputs x, dy */
    OP_ADD,         /* out = a + b (same shape) */
    OP_MSE,         /* out (1) = mean((p - t)^2); inputs p, t */
    OP_MSE_BWD,     /* out = 2 (p - t) / n * g; inputs p, t [, g (1)] (g = 1 when absent) */
    OP_SGD,         /* out = p - lr * g; inputs p, g */
    OP_MOMENTUM,    /* out = mu * buf + g; inputs buf, g */
    OP_ADAM_M,      /* out = b1 * m + (1 - b1) * g; inputs m, g */
    OP_ADAM_V,      /* out = b2 * v + (1 - b2) * g * g; inputs v, g */
    OP_ADAM_P,      /* out = p - lr * (m / c1) / (sqrt(v / c2) + eps), c = 1 - b^t; inputs p, m, v */
    OP_FILL,        /* out = p.fill.value everywhere; no inputs (the seed d loss / d loss) */
    OP_COUNT
};

#define OP_MAX_INPUTS 4

/* Small per-op parameters. */
union op_params {
    struct { int ta, tb; } mm;
    struct { float lr; } sgd;
    struct { float mu; } momentum;
    struct { float lr, b1, b2, eps; } adam;
    struct { float value; } fill;
};

const char *op_type_name(enum op_type t); /* "matmul", ... */

#endif
