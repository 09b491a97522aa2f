/* modcheck_testutil.h: the harness test_modcheck_sum.c and
 * test_modcheck_norm.c share: random inputs, the stored tensors of a check
 * and its runs, the ratio of an output to its bounds, the MPFR reference's
 * binary32 rounding, and float32 sums in several orders. Each program has
 * its own random stream, from the same seed. */
#ifndef DT_MODCHECK_TESTUTIL_H
#define DT_MODCHECK_TESTUTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mpfr.h>

#include "modcheck.h"
#include "replay.h"
#include "test_util.h"
#include "util.h"

static uint64_t rng = 0x5eed1234;
static inline float rf(double lo, double hi) { return (float)tu_rand_uniform(&rng, lo, hi); }
static inline void fill(float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rf(lo, hi);
}

/* ---- tensors and runs ------------------------------------------------------------- */

struct tset {
    int n;
    struct modcheck_tensor t[6];
};
#define SH(...) ((const int64_t[]){__VA_ARGS__})

static inline void ts_add(struct tset *s, const char *role, const float *data, int ndim,
                   const int64_t *shape)
{
    struct modcheck_tensor *t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    t->role = role;
    t->ndim = ndim;
    t->count = 1;
    for (int k = 0; k < ndim; k++)
        t->count *= (uint64_t)(t->shape[k] = shape[k]);
    t->data = data;
}

static inline void run_ok(const char *spec, const struct tset *s, struct modcheck_result *r)
{
    char why[256];
    int rc = modcheck_run(spec, s->t, s->n, r, why, sizeof why);
    if (rc != 0)
        fail_msg("%s: rc %d: %s%s", spec, rc, why, rc < 0 ? dt_error() : "");
    assert_int_equal(r->nout, 1);
}

/* The exact values of the check into ex; all bounds finite. */
static inline void exact_of(const char *spec, const struct tset *s, float *ex)
{
    struct modcheck_result r;
    run_ok(spec, s, &r);
    for (uint64_t i = 0; i < r.out[0].count; i++) {
        ex[i] = r.out[0].exact[i];
        assert_true(isfinite(r.out[0].bound[i]) && r.out[0].bound[i] >= 0);
    }
    modcheck_result_free(&r);
}

/* The largest |got - exact| / allowed over the output, got in place of "out". */
static inline double ratio(const char *spec, struct tset *s, const float *got, const char *what)
{
    for (int k = 0; k < s->n; k++)
        if (strcmp(s->t[k].role, "out") == 0)
            s->t[k].data = got;
    struct modcheck_result r;
    run_ok(spec, s, &r);
    struct replay_opcheck c;
    memset(&c, 0, sizeof c);
    replay_classify(r.out[0].got, r.out[0].exact, r.out[0].bound, r.out[0].count, r.out[0].least,
                    &c);
    modcheck_result_free(&r);
    const char *v = getenv("TEST_MODCHECK_VERBOSE");
    if (v && *v == '1')
        printf("  %-44s ratio %.3g\n", what, c.max_ratio);
    return c.max_ratio;
}
#define ADMITTED(spec, s, got, what) assert_true(ratio(spec, s, got, what) <= 1.0)
#define SEMANTIC(spec, s, got, what) assert_true(ratio(spec, s, got, what) > 1.0)

static inline void expect_rc(const char *spec, const struct tset *s, int want)
{
    struct modcheck_result r;
    char why[256];
    int rc = modcheck_run(spec, s->t, s->n, &r, why, sizeof why);
    assert_int_equal(rc, want);
    if (rc < 0)
        assert_true(strlen(dt_error()) > 10);
    if (rc == 1)
        assert_true(strlen(why) > 3);
    if (rc == 0)
        modcheck_result_free(&r);
}

/* ---- the reference: binary32 rounding and definitions in MPFR ------------------------ */

#define RP 2400 /* bits: exact for the rational references of these tests */


/* RN32 with binary32's subnormals: 24 bits, or the multiple of 2^-149. */
static inline float ref32(mpfr_srcptr x)
{
    if (mpfr_nan_p(x))
        return NAN;
    if (mpfr_zero_p(x) || mpfr_inf_p(x))
        return (float)mpfr_get_d(x, MPFR_RNDN);
    mpfr_t y, t;
    mpfr_inits2(24, y, (mpfr_ptr)0);
    double d;
    if (mpfr_get_exp(x) <= -126) {
        mpfr_init2(t, mpfr_get_prec(x));
        mpfr_mul_2si(t, x, 149, MPFR_RNDN);
        mpfr_rint(y, t, MPFR_RNDN);
        d = ldexp(mpfr_get_d(y, MPFR_RNDN), -149);
        mpfr_clear(t);
    } else {
        mpfr_set(y, x, MPFR_RNDN);
        d = mpfr_get_d(y, MPFR_RNDN);
    }
    mpfr_clear(y);
    return fabs(d) >= 0x1p128 ? (float)(d * 2) : (float)d;
}

static inline int same(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

/* The exact values ex[] against a reference that f computes at precision p
 * (twice, 320 and 640 bits, for the irrational ones: elements whose two
 * roundings differ are skipped, and must be rare). */
typedef void (*ref_fn)(mpfr_prec_t p, const void *ctx, size_t i, mpfr_t out);
static inline void against_ref(const float *ex, size_t n, ref_fn f, const void *ctx, int irrational)
{
    mpfr_t a, b;
    mpfr_inits2(RP, a, b, (mpfr_ptr)0);
    size_t skipped = 0;
    for (size_t i = 0; i < n; i++) {
        mpfr_set_prec(a, irrational ? 320 : RP);
        f(irrational ? 320 : RP, ctx, i, a);
        float r = ref32(a);
        if (irrational) {
            mpfr_set_prec(b, 640);
            f(640, ctx, i, b);
            if (!same(r, ref32(b))) {
                skipped++;
                continue;
            }
        }
        if (!same(ex[i], r))
            fail_msg("element %zu: exact %a, reference %a", i, (double)ex[i], (double)r);
    }
    assert_true(skipped * 100 <= n);
    mpfr_clears(a, b, (mpfr_ptr)0);
}

/* ---- float32 sums in several orders ----------------------------------------------------- */

enum { SUM_FWD, SUM_REV, SUM_PAIR, SUM_DBL, SUM_N };

static inline float sum_pair(const float *v, size_t n)
{
    if (n <= 2)
        return n == 0 ? 0.0f : n == 1 ? v[0] : v[0] + v[1];
    return sum_pair(v, n / 2) + sum_pair(v + n / 2, n - n / 2);
}

static inline float sumf(const float *v, size_t n, int how)
{
    float s = 0;
    double d = 0;
    switch (how) {
    case SUM_FWD:
        for (size_t i = 0; i < n; i++)
            s += v[i];
        return s;
    case SUM_REV:
        for (size_t i = n; i-- > 0;)
            s += v[i];
        return s;
    case SUM_PAIR:
        return sum_pair(v, n);
    default:
        for (size_t i = 0; i < n; i++)
            d += v[i];
        return (float)d;
    }
}

#endif
