/* oracle_ops_impl.h: what oracle_op's three files share: the constants and
 * types of its two paths, the fast paths' exact rounding of doubles (inline,
 * since it runs per element), the MPFR path's pieces in oracle_round.c and
 * the elementwise ops of oracle_ops_elem.c (the scheme: oracle_ops.c). */
#ifndef DT_ORACLE_OPS_IMPL_H
#define DT_ORACLE_OPS_IMPL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <mpfr.h>

#include "graph.h"
#include "oracle_conv.h"
#include "util.h"

#define OPS_U 0x1p-53               /* unit roundoff of double */
#define OPS_EXACT_PREC 2048         /* > any exact intermediate of a rational op (< 900 bits) */
#define OPS_ZIV_START 160           /* first working precision of a Ziv loop */
#define OPS_ZIV_CAP 8192            /* past this, look for an exact tie (adam_p) */

/* Every operation of a rational op must be exact: a nonzero ternary value is
 * a precision too small for the inputs, an invariant of oracle_op's files. */
#define OPS_EXACT(call) \
    do { int t_ = (call); DT_ASSERT(t_ == 0, "oracle: inexact MPFR step %s", #call); } while (0)

/* Parameters of an op that its elements share. */
struct ops_par {
    enum op_type type;
    double n;           /* mse_bwd: element count */
    int has_g;          /* mse_bwd: third input */
    float a, b;         /* sgd lr; momentum mu; adam b1 / b2 */
};

/* adam_p's state for one op: its parameters and the bias corrections c_k =
 * 1 - b_k^t of step t (oracle_ops_elem.c). */
struct ops_adam {
    float lr, b1, b2, eps;
    unsigned long t;
    double c1d, c2d;    /* RN64 of c1, c2 (relative error <= 2^-53 + 2^-120) */
    int fast;           /* the double fast path applies (see ops_adam_fast) */
    mpfr_prec_t cprec;  /* precision of c1, c2 below; 0 when not computed */
    mpfr_t c1, c2;      /* c_k with relative error <= 2^-cprec (or exact) */
};

/* ---- rounding: the fast paths' here, the MPFR path's in oracle_round.c ------- */

/* The canonical quiet NaN 0x7fc00000; f with a NaN made canonical. */
static inline float ops_nan(void)
{
    uint32_t b = 0x7fc00000u;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static inline float ops_canon(float f) { return isnan(f) ? ops_nan() : f; }

/* Nonzero when DIVTRACE_ORACLE_EXACT sends every element to the MPFR path. */
int ops_exact_only(void);

/* ---- exact and certified rounding of doubles ------------------------------ */

/* s + e = a + b exactly, s = RN(a + b) (Knuth's TwoSum; no overflow). */
static inline double ops_two_sum(double a, double b, double *e)
{
    double s = a + b, bb = s - a;
    *e = (a - (s - bb)) + (b - bb);
    return s;
}

/* h + l = a b exactly, h = RN(a b) (exact when a b >= 2^-968, always here:
 * the products oracle_ops_elem.c gives it are of floats and doubles built
 * from them, >= 2^-500). */
static inline double ops_two_prod(double a, double b, double *l)
{
    double h = a * b;
    *l = fma(a, b, -h);
    return h;
}

/* RN32(hi + lo) exactly, for hi = RN64(hi + lo), |hi| < 2^1024, hi + lo not
 * in double's subnormal range. RN32(hi) is right unless hi itself is a
 * rounding boundary of float32 (a midpoint between two floats, which is a
 * double): no boundary can lie strictly between hi + lo and hi, which is the
 * double nearest to it. At a midpoint the sign of lo decides. */
static inline float ops_rn32_hl(double hi, double lo)
{
    float f = (float)hi;
    if (lo == 0)
        return f;
    double ah = fabs(hi);
    double half; /* half the float spacing at hi */
    if (ah >= 0x1p-126) {
        if (ah >= 0x1p128)
            return f;
        uint64_t b;
        memcpy(&b, &hi, sizeof b);
        if ((b & 0x1fffffffu) != 0x10000000u) /* the 29 bits below float's 23 */
            return f;
        int e;
        frexp(ah, &e);
        half = ldexp(1.0, e - 25); /* ah in [2^(e-1), 2^e): spacing 2^(e-24) */
    } else {
        double k = ah * 0x1p150; /* exact; odd integer iff a midpoint */
        if (k != floor(k) || fmod(k, 2.0) != 1.0)
            return f;
        half = 0x1p-150;
    }
    return (float)(lo > 0 ? hi + half : hi - half); /* the neighbour on lo's side: exact */
}

/* RN32 of every real within err of a, when they all round alike (bitwise,
 * so -0 and +0 differ): 1 and *out set. Precondition: err >= 2 |a - exact|.
 * oracle_cert32 (oracle_acc.c, with the proof), after turning a NaN a or a
 * NaN or infinite err away as undecided. */
static inline int ops_cert32(double a, double err, float *out)
{
    if (isnan(a) || isnan(err) || isinf(err))
        return 0;
    return oracle_cert32(a, err, out);
}

/* RN32 of t[0] + ... + t[k-1] (exact doubles, k <= 4, exact sum nonzero):
 * a TwoSum cascade leaves s + sum e_i exact with |e_i| <= u |partial sum|;
 * r = fl(s + fl(sum e_i)) errs by <= u |r| + 4 u sum |e_i| (first order; the
 * factor 2 of ops_cert32 covers the rest). 0 when undecided. */
static inline int ops_sum32(const double *t, int k, float *out)
{
    double s = t[0], c = 0, ae = 0;
    for (int i = 1; i < k; i++) {
        double e;
        s = ops_two_sum(s, t[i], &e);
        c += e;
        ae += fabs(e);
    }
    double r = s + c;
    if (!isfinite(r))
        return 0;
    return ops_cert32(r, 2 * (OPS_U * fabs(r) + 4 * OPS_U * ae) * (1 + 0x1p-40), out);
}

/* The MPFR path. */
float ops_mp_rn32(mpfr_srcptr x);
void ops_mp_bracket(mpfr_srcptr y, mpfr_exp_t err_exp, float *fl, float *fh);
int ops_mp_decide(mpfr_srcptr y, mpfr_exp_t err_exp, float *out);
float ops_mp_div_round(mpfr_srcptr num, double n);
float ops_mp_rational(const struct ops_par *pr, const float *v);
float ops_mp_sigmoid(float x);
float ops_mp_tanh(float x);

/* ---- elementwise ops and adam_p (oracle_ops_elem.c) --------------------------- */

float ops_add(float a, float b);
float ops_axpy(float p, float f1, float f2);
float ops_sigmoid(float x, int slow);
float ops_tanh(float x, int slow);
float ops_sigmoid_bwd(const struct ops_par *pr, float y, float dy, int slow);
float ops_tanh_bwd(const struct ops_par *pr, float y, float dy, int slow);
float ops_adam_mv(const struct ops_par *pr, float m, float g, int slow);
float ops_mse_bwd(const struct ops_par *pr, float p, float t, float g, int slow);
/* adam_p: init and free around an op; the fast path (0: undecided), else the MPFR one. */
void ops_adam_init(struct ops_adam *A, const struct node *nd, uint64_t step);
void ops_adam_free(struct ops_adam *A);
int ops_adam_fast(const struct ops_adam *A, float p, float m, float v, float *out);
float ops_mp_adam(struct ops_adam *A, float p, float m, float v);

#endif
