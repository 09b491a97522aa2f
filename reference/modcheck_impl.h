/* modcheck_impl.h: what modcheck's files share: the spec's keys, the
 * tensors by role, the helpers of the modules built on sums, and one
 * function per checked type. modcheck.c holds the dispatch and the parsing;
 * modcheck_sum.c the modules built on sums of products and squares (linear,
 * conv1d, conv2d, mseloss) and the helpers modcheck_norm.c shares with
 * them; modcheck_norm.c the normalizing ones (layernorm, softmax,
 * crossentropyloss); modcheck_elem.c the elementwise ones (relu, sigmoid,
 * tanh, hardsigmoid, gelu) and the optimizer updates (sgd, adam, adamw). */
#ifndef DT_MODCHECK_IMPL_H
#define DT_MODCHECK_IMPL_H

#include <mpfr.h>

#include "modcheck.h"

/* A parsed spec: the type and up to 32 KEY=VALUE pairs. */
struct mc_spec {
    char type[32];
    int n;
    char key[32][32];
    char val[32][96];
};

/* The value of key, or NULL. */
const char *mc_get(const struct mc_spec *sp, const char *key);
/* key as a number; def when absent; -1 with dt_error set when not a number. */
int mc_num(const struct mc_spec *sp, const char *key, double def, double *out);
/* key as up to max comma-separated integers (one value repeated to max
 * when a single one is given): the count, or -1 with dt_error set. */
int mc_ints(const struct mc_spec *sp, const char *key, int64_t *out, int max);
/* The tensor with this role, or NULL. */
const struct modcheck_tensor *mc_find(const struct modcheck_tensor *t, int nt, const char *role);
/* The tensor with this role, or NULL with dt_error set ("linear: no 'in.0'"). */
const struct modcheck_tensor *mc_need(const struct modcheck_tensor *t, int nt, const char *role,
                                      const char *type);
/* Append an output: role, the stored tensor (got), exact and bound
 * allocated for its count. Returns it. */
struct modcheck_output *mc_output(struct modcheck_result *res, const char *role,
                                  const struct modcheck_tensor *got);

/* modcheck_sum.c: helpers of the modules built on sums (modcheck_norm.c's too) */
#define MC_ZIV 96       /* first precision of an interval */
#define MC_FTZ 0x1p-126 /* the absolute loss of a flushed subnormal */

/* oracle_bnd_gamma(n, BND_u), n < 0 taken as 0. */
double mc_g(double n);
/* A sum of n magnitudes computed in double, inflated past its rounding errors. */
double mc_up(double x, double n);
/* The tensor with this role (need: or an error), its shape checked against
 * its count; *bad set on error. */
const struct modcheck_tensor *mc_tensor(const struct modcheck_tensor *t, int nt, const char *role,
                                        const struct mc_spec *sp, int need, int *bad);
/* DT_ERR with dt_error set: "TYPE check: shapes do not fit (what)". */
int mc_shape_err(const struct mc_spec *sp, const char *what);
/* The reduction key: 0 none, 1 sum, 2 mean (the default), -1 with dt_error. */
int mc_reduction(const struct mc_spec *sp);
/* Set the precision of the listed variables (NULL-terminated). */
void mc_prec(mpfr_prec_t p, mpfr_ptr a, ...);
/* RN32 of every real in [lo, hi] when they round alike (mpfr_get_flt: to
 * nearest even, binary32's subnormals and overflow): 1 and *out; else 0,
 * for a higher p. At precision MC_ZIV_CAP (8192) an interval 2^-8000 wide
 * still holding a rounding boundary is settled: zero if it holds zero (an
 * exact cancellation, as of identical samples weighted w and -w), else its
 * lower end rounded; no transcendental value comes that close to a
 * boundary. */
int mc_round(mpfr_srcptr lo, mpfr_srcptr hi, mpfr_prec_t p, float *out);

/* Each: 0, 1 (why set: not checkable), -1 (dt_error set). */
typedef int (*mc_fn)(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
                     struct modcheck_result *res, char *why, size_t nwhy);

/* modcheck_sum.c */
int mc_linear(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
              char *, size_t);
int mc_conv(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
            char *, size_t); /* conv1d and conv2d */
int mc_mse(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
           char *, size_t);

/* modcheck_norm.c */
int mc_layernorm(const struct mc_spec *, const struct modcheck_tensor *, int,
                 struct modcheck_result *, char *, size_t);
int mc_softmax(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
               char *, size_t);
int mc_crossentropy(const struct mc_spec *, const struct modcheck_tensor *, int,
                    struct modcheck_result *, char *, size_t);

/* modcheck_elem.c */
int mc_elementwise(const struct mc_spec *, const struct modcheck_tensor *, int,
                   struct modcheck_result *, char *, size_t); /* relu sigmoid tanh hardsigmoid gelu */
int mc_sgd(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
           char *, size_t);
int mc_adam(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
            char *, size_t); /* adam and adamw */

#endif
