/* oracle_conv.h: what oracle_op and oracle_bound share for the convolutions
 * (oracle_conv.c): every output element's sum of products in double, the
 * sum of their magnitudes and how many lie in the image. */
#ifndef DT_ORACLE_CONV_H
#define DT_ORACLE_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "graph.h"

struct oracle_conv {
    double *s;      /* the sum in double (NULL when not asked for) */
    double *a;      /* the sum of the products' magnitudes */
    uint32_t *m;    /* the in-image products (the bound's term count), all pairs' */
    double *z;      /* where some sum has only zero terms: the sum of the
                     * products' signs (+1, -1), else NULL */
    size_t inner;   /* terms each sum added, padding's zeros and all pairs included */
};

/* The sums of conv op nd (conv2d: in x, w; conv2d_bwd_data: its m pairs
 * dy_0, w_0, ..., one sum over all of them; conv2d_bwd_filter: x, dy), s
 * only with want_s. 0, or -1 for an op too large for one matrix product.
 * The arrays are the calling thread's scratch, valid until its next call;
 * oracle_conv_free forgets them. */
int oracle_conv_sums(const struct graph *g, const struct node *nd, const float *const *in,
                     int want_s, struct oracle_conv *cs);
void oracle_conv_free(struct oracle_conv *cs);

/* The (image, filter) pairs of conv op nd: conv2d_bwd_data's m, else 1. */
size_t oracle_conv_pairs(const struct node *nd);

/* 1 and *out = RN32(exact sum of element i) when s decides it, else 0. */
int oracle_conv_cert(const struct oracle_conv *cs, size_t i, float *out);

/* 1 and *out = RN32(x) for every real x within err / 2 of a (err >= twice
 * the error of a, and err >= |a| 2^-51), else 0 (oracle_acc.c). */
int oracle_cert32(double a, double err, float *out);

/* oracle_op's convolutions (oracle_ops.c) and oracle_bound's (oracle.c)
 * from the sums cs (NULL: computed here). */
void oracle_conv_op(const struct graph *g, const struct node *nd, float *out,
                    const float *const *in, const struct oracle_conv *cs);
int oracle_conv_bound(const struct graph *g, const struct node *nd, double *bound,
                      const float *const *in, const struct oracle_conv *cs);

#endif
