/* oracle_impl.h: what oracle_bound's two files share: the constants of the
 * error model (oracle.c's opening comment states it), the helpers oracle.c
 * defines, and the elementwise bounds that oracle_elem.c defines. */
#ifndef DT_ORACLE_IMPL_H
#define DT_ORACLE_IMPL_H

#include <stdint.h>

/* ---- the model's constants (oracle.c's opening comment) ------------------------ */

#define BND_u 0x1p-24                   /* float32 unit roundoff */
#define BND_uw (0x1p-24 / (1 - 0x1p-24)) /* one rounding, in any format at least float32's */
#define BND_U 0x1p-53                   /* double unit roundoff */
#define BND_ETA 0x1p-150                /* underflow error of a product, quotient, conversion */
#define BND_UP (1 + 0x1p-30)
#define BND_E_EXP 2.5     /* expf, expm1f, ulp (the tolerances: oracle.c) */
#define BND_E_TANH 3.0    /* tanhf */
#define BND_E_SIGMOID 3.0 /* a library's sigmoid */
#define BND_E_DIV 1.5     /* division */
#define BND_E_SQRT 1.5    /* sqrt */
#define BND_E_POW 4.5     /* pow */

/* ---- helpers (oracle.c) ------------------------------------------------------ */

/* The relative and absolute parts of a tolerance of e ulp. */
double oracle_bnd_rel(double e);
double oracle_bnd_abs(double e);
/* gamma_n = n u / (1 - n u), +Inf from n u >= 1/2. */
double oracle_bnd_gamma(double n, double u);
/* Nonzero when a magnitude bound m of some intermediate might overflow float32. */
int oracle_bnd_ovf(double m);
/* Half an ulp of float32 at x >= |value|; +Inf where RN32 could overflow. */
double oracle_bnd_half_ulp(double x);

/* ---- elementwise bounds (oracle_elem.c) ----------------------------------------
 * Each is a bound on one element, before oracle_bound's final BND_UP. */

/* sigmoid at y (a double: tanh's third form asks for it at 2x), y finite. */
double oracle_bnd_sigmoid(double y);
double oracle_bnd_tanh(float x);
double oracle_bnd_sigmoid_bwd(float y, float dy);
double oracle_bnd_tanh_bwd(float y, float dy);
double oracle_bnd_hard_sigmoid(float x);
double oracle_bnd_hard_sigmoid_bwd(float x, float dy);
/* p + a b: sgd (a = -lr, b = g) and momentum (a = mu, b = buf, p = g). */
double oracle_bnd_axpy(float p, float a, float b);
/* adam_m (isv = 0: X = b m + (1 - b) g) and adam_v (isv = 1: X = b v + (1 - b) g g). */
double oracle_bnd_adam_mv(float b, float mv, float g, int isv);

/* adam_p: the bias corrections of step t, from oracle_bnd_adam_c. */
struct oracle_bnd_adam {
    double c1, c2, e1, e2; /* c_k = 1 - b_k^t and the error bound of a computed c_k */
};
/* c = 1 - b^t and e, the error bound of a computed one (+Inf: no claim). */
void oracle_bnd_adam_c(float b, uint64_t t, double *c, double *e);
double oracle_bnd_adam_p(const struct oracle_bnd_adam *A, float lr, float eps, float p, float m,
                         float v);

#endif
