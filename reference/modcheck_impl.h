/* modcheck_impl.h: what modcheck's files share: the spec's keys, the
 * tensors by role, and one function per checked type. modcheck.c holds the
 * dispatch and the parsing; modcheck_sum.c the modules built on sums
 * (linear, conv1d, conv2d, layernorm, softmax, crossentropyloss, mseloss);
 * modcheck_elem.c the elementwise ones (relu, sigmoid, tanh, hardsigmoid,
 * gelu) and the optimizer updates (sgd, adam, adamw). */
#ifndef DT_MODCHECK_IMPL_H
#define DT_MODCHECK_IMPL_H

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

/* Each: 0, 1 (why set: not checkable), -1 (dt_error set). */
typedef int (*mc_fn)(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt,
                     struct modcheck_result *res, char *why, size_t nwhy);

/* modcheck_sum.c */
int mc_linear(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
              char *, size_t);
int mc_conv(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
            char *, size_t); /* conv1d and conv2d */
int mc_layernorm(const struct mc_spec *, const struct modcheck_tensor *, int,
                 struct modcheck_result *, char *, size_t);
int mc_softmax(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
               char *, size_t);
int mc_crossentropy(const struct mc_spec *, const struct modcheck_tensor *, int,
                    struct modcheck_result *, char *, size_t);
int mc_mse(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
           char *, size_t);

/* modcheck_elem.c */
int mc_elementwise(const struct mc_spec *, const struct modcheck_tensor *, int,
                   struct modcheck_result *, char *, size_t); /* relu sigmoid tanh hardsigmoid gelu */
int mc_sgd(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
           char *, size_t);
int mc_adam(const struct mc_spec *, const struct modcheck_tensor *, int, struct modcheck_result *,
            char *, size_t); /* adam and adamw */

#endif
