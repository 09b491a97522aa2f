/* op.h: the op set. An op is a pure function of its input tensors and a few
 * scalar parameters; each type has a vector-Jacobian rule (graph.c) and one
 * kernel per backend. Shapes use the letters N (batch rows), F (features),
 * K (inner dimension of a matrix product); image tensors are (N, C, H, W)
 * row-major (batch, channel, row, column) and convolution filters (K, C, R, S)
 * (output channel, input channel, kernel row, kernel column).
 *
 * Every formula below is the op's mathematical definition (what the exact
 * oracle rounds once) and, where it says "in float32", also the order of
 * float32 operations the cpu backend performs. */
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
    OP_FILL,        /* out = p.fill.value everywhere; no inputs (the seed d loss / d loss,
                     * PredNet's zero initial states) */
    /* ---- image ops (PredNet). ADD_BIAS and BIAS_GRAD also take (N,C,H,W)
     * tensors with a per-channel bias (C): out = x + b[c]; the gradient sums
     * dy over n, h, w (in that nesting order on cpu, in float32). */
    OP_CONV2D,      /* out (N,K,H,W) = sum over c, r, s of x[n,c,h+r-R/2,w+s-S/2] * w[k,c,r,s];
                     * inputs x (N,C,H,W), w (K,C,R,S); stride 1, R and S odd, "same" zero
                     * padding: terms outside the image are left out of the sum
                     * (cross-correlation, as in Keras and cuDNN) */
    OP_CONV2D_BWD_DATA,   /* out (N,C,H,W) = sum over j, k, r, s of
                           * dy_j[n,k,h-r+R/2,w-s+S/2] * w_j[k,c,r,s]; inputs m pairs
                           * dy_0, w_0, dy_1, w_1, ... (1 <= m <= OP_MAX_INPUTS / 2), every
                           * dy_j (N,K,H,W) and every w_j (K,C,R,S) of one shape; terms
                           * outside left out. m > 1 is the data gradient of m convolutions
                           * of one input (PredNet's four gates) as one sum, as one
                           * convolution of the filters stacked along K would make it */
    OP_CONV2D_BWD_FILTER, /* out (K,C,R,S) = sum over n, h, w of dy[n,k,h,w] * x[n,c,h+r-R/2,w+s-S/2];
                           * inputs x (N,C,H,W), dy (N,K,H,W); R, S = p.conv.r, p.conv.s;
                           * terms outside left out */
    OP_MAXPOOL2,    /* out (N,C,H/2,W/2) = x[j*] over the 2x2 window, j* the first element
                     * in row-major window order (top-left, top-right, bottom-left,
                     * bottom-right) that is NaN, or if none, the first equal to the
                     * window's maximum (so -0 and +0 tie and the first wins); the
                     * element is copied bit for bit. H and W even. */
    OP_MAXPOOL2_BWD,/* out (N,C,H,W) = dy at each window's j* (as in MAXPOOL2), +0 elsewhere;
                     * inputs x (N,C,H,W), dy (N,C,H/2,W/2) */
    OP_UPSAMPLE2,   /* out (N,C,2H,2W): out[n,c,h,w] = x[n,c,h/2,w/2] (nearest neighbour) */
    OP_UPSAMPLE2_BWD, /* out (N,C,H,W) = ((dy[2h,2w] + dy[2h,2w+1]) + dy[2h+1,2w]) + dy[2h+1,2w+1]
                       * in float32, in that order; input dy (N,C,2H,2W) */
    OP_CONCAT,      /* out (N, C0+C1+..., H, W): the inputs (1 to OP_MAX_INPUTS of them,
                     * (N,Ci,H,W) each) stacked along channels in input order */
    OP_SLICE,       /* out (N, p.slice.n, H, W) = channels p.slice.c0 .. c0+n-1 of x */
    OP_SLICE_BWD,   /* out (N, p.slice.total, H, W) = dy in channels c0 .. c0+n-1, +0
                     * elsewhere; input dy (N, p.slice.n, H, W) */
    OP_HARD_SIGMOID,/* out = clip(0.2 x + 0.5, 0, 1) as in Keras 2, 0.2 being the float32
                     * constant 0.2f: in float32 t = 0.2f * x; t = t + 0.5f;
                     * out = t < 0 ? 0 : t > 1 ? 1 : t (NaN stays NaN) */
    OP_HARD_SIGMOID_BWD, /* out = 0 <= t <= 1 ? 0.2f * dy : +0, t as in HARD_SIGMOID
                          * (Keras's clip passes the gradient at the bounds);
                          * inputs x, dy */
    OP_SATLU,       /* out = x > m ? m : x, m = p.satlu.max (NaN stays NaN) */
    OP_SATLU_BWD,   /* out = x <= m ? dy : +0 (NaN x gives +0); inputs x, dy */
    OP_SUB,         /* out = a - b (same shape) */
    OP_NEG,         /* out = -x (the sign bit flipped, zeros and NaN included) */
    OP_MUL,         /* out = a * b (same shape) */
    OP_MEAN,        /* out (1) = p.mean.scale * (sum of x) / count(x); the cpu sums in
                     * double in index order and rounds to float32 once at the end:
                     * (float)((double)scale * (s / (double)count)) */
    OP_MEAN_BWD,    /* out (shape of the MEAN's x) = p.mean.scale * g / count everywhere;
                     * input g (1); cpu: (float)((double)scale * (double)g / (double)count) */
    OP_COUNT
};

#define OP_MAX_INPUTS 8

/* Small per-op parameters. */
union op_params {
    struct { int ta, tb; } mm;
    struct { float lr; } sgd;
    struct { float mu; } momentum;
    struct { float lr, b1, b2, eps; } adam;
    struct { float value; } fill;
    struct { uint32_t r, s; } conv;            /* CONV2D_BWD_FILTER: kernel size */
    struct { uint32_t c0, n, total; } slice;   /* SLICE, SLICE_BWD */
    struct { float max; } satlu;
    struct { float scale; } mean;               /* MEAN, MEAN_BWD */
};

const char *op_type_name(enum op_type t); /* "matmul", ... */

#endif
