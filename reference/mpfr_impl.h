/* mpfr_impl.h: what the mpfr backend's two files share: the storage of a
 * buffer, the backend's context, and the functions that cross between the
 * op kernels (backend_mpfr.c) and the exact dot products of the matrix
 * product and the convolutions (mpfr_dot.c). */
#ifndef DT_MPFR_IMPL_H
#define DT_MPFR_IMPL_H

#include <stddef.h>

#include <gmp.h>
#include <mpfr.h>

#include "backend.h"
#include "graph.h"

/* Exponent spread (in limbs, beyond the width of one product) that the exact
 * dot product's fixed-point accumulator covers; a wider one takes mpfr_sum. */
#define MPB_ACC_SPREAD 128

#if GMP_NAIL_BITS != 0
#error "the mpfr backend assumes GMP without nail bits"
#endif
#define MPB_LB GMP_NUMB_BITS

/* ---- storage ---------------------------------------------------------------
 * A block of numbers of one precision: the mpfr structs, then all limbs, in
 * one allocation (mpfr's custom interface), each number initialised to +0. */
struct mpb_vec {
    size_t count;
    mpfr_prec_t prec;
    __mpfr_struct *x;
    mp_limb_t *d;
};

/* Element i of a vector; in an op kernel (g, nd and in in scope), input k,
 * its shape and its count. */
#define X(v, i) (&(v)->x[i])
#define IN(k) ((const struct mpb_vec *)in[k])
#define IN_SHAPE(k, d) (g->nodes[nd->inputs[k]].shape[d])
#define IN_COUNT(k) (g->nodes[nd->inputs[k]].count)

/* ---- context ---------------------------------------------------------------
 * Temporaries live here, allocated once; the op kernels run on one thread.
 * upload, download and trace use none of them (trace may run on the
 * tracer's worker thread while the next op runs). */
struct mpb_ctx {
    mpfr_prec_t prec;          /* P */
    size_t nlimbs;             /* limbs of a P-bit number */
    mpfr_t t1, t2, t3, t4;     /* P bits */
    mpfr_t wide;               /* 2 * nlimbs limbs: holds any product of two P-bit numbers */
    mpfr_t par1, par2, par3;   /* op parameters and 1 - b, exact */
    mpfr_t one, zero;
    mpfr_t z1, z2;             /* Ziv loops, precision varies */
    struct mpb_vec *terms;     /* summands, wide precision */
    mpfr_ptr *ptrs;            /* their addresses, for mpfr_sum */
    size_t ptrs_cap;
    /* dot products: packed operands and accumulators */
    long *pe;                  /* exponents (LONG_MIN for a zero or an absent term) */
    unsigned char *pneg;
    mp_limb_t *pd;
    mpfr_srcptr *psrc;         /* the numbers packed (NULL: absent), for the slow path */
    size_t pcap;
    long *plo, *phi;           /* per packed row: exponent range of its non-zeros
                                * (phi LONG_MAX: the row holds an Inf or a NaN) */
    size_t prcap;
    size_t accmax;             /* limbs of one accumulator */
    mp_limb_t *acc;            /* two accumulators, then a product's 2 n + 1 limbs */
};

/* Room for count summands of wide precision and their addresses
 * (backend_mpfr.c). */
void mpb_terms_reserve(struct mpb_ctx *c, size_t count);

/* OP_MATMUL: out (M,N) = op(A) (M,K) op(B) (K,N), each element the exact dot
 * product rounded once (mpfr_dot.c). */
void mpb_matmul(void *ctx, const struct graph *g, const struct node *nd, backend_buf *outb,
                const backend_buf *const *in, const struct backend_step *st);

/* OP_CONV2D, OP_CONV2D_BWD_DATA, OP_CONV2D_BWD_FILTER: each element the exact
 * sum of op.h's products (taps outside the image left out; conv2d_bwd_data's
 * over all of its pairs) rounded once (mpfr_dot.c). */
void mpb_conv2d(void *ctx, const struct graph *g, const struct node *nd, backend_buf *outb,
                const backend_buf *const *in, const struct backend_step *st);
void mpb_conv2d_bwd_data(void *ctx, const struct graph *g, const struct node *nd,
                         backend_buf *outb, const backend_buf *const *in,
                         const struct backend_step *st);
void mpb_conv2d_bwd_filter(void *ctx, const struct graph *g, const struct node *nd,
                           backend_buf *outb, const backend_buf *const *in,
                           const struct backend_step *st);

#endif
