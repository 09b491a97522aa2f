/* curvature.h: the extreme eigenvalues of the training loss's Hessian at a
 * checkpointed step, by Lanczos iteration on Hessian-vector products, so
 * that a plateau of the loss curve can be told to be a saddle (a negative
 * eigenvalue) or a minimum. The loss is that of the step's own minibatch,
 * as the run computed it (same model, data order and backend); Hv is the
 * central difference of two gradients through the tape:
 *   Hv ~ (g(theta + eps v) - g(theta - eps v)) / (2 eps), |v| = 1,
 * computed in double from float32 gradients (eps chosen from |theta|). */
#ifndef DT_CURVATURE_H
#define DT_CURVATURE_H

#include <stddef.h>
#include <stdint.h>

struct curvature_params {
    int iterations;       /* Lanczos steps (Krylov dimension), default 30 */
    double eps;           /* finite-difference step relative to |theta| (default 1e-3) */
    uint64_t seed;        /* of the start vector (default 1) */
};

struct curvature_result {
    uint64_t step;        /* the checkpoint's step */
    double lo, hi;        /* the lowest and highest Ritz values */
    double lo_resid, hi_resid; /* their residual estimates |beta_k e_k^T y| */
    int iterations;       /* Lanczos steps done (fewer on breakdown) */
    size_t dim;           /* parameters */
    double loss;          /* the loss at theta */
    double grad_norm;     /* |g(theta)| */
};

void curvature_params_defaults(struct curvature_params *p);

/* Lanczos with full reorthogonalization on a symmetric operator of
 * dimension n given as a function y = A x; the extreme Ritz values after k
 * steps. Exposed for tests on matrices with known spectra. 0, or -1 with
 * dt_error set. */
typedef int (*curvature_matvec_fn)(void *arg, const double *x, double *y);
int curvature_lanczos(curvature_matvec_fn f, void *arg, size_t n, const struct curvature_params *p,
                      struct curvature_result *r);

/* The Hessian extremes of the run recorded in trace `path` at its
 * checkpoint of step `step` (the trace must hold one there: exit 2 with the
 * steps that it holds otherwise). 0, or -1 with dt_error set. */
int curvature_at_step(const char *path, uint64_t step, const struct curvature_params *p,
                      struct curvature_result *r);

#endif
