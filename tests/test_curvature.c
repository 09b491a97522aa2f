/* test_curvature.c: curvature_lanczos on operators of known spectra (diagonal
 * and under random orthogonal similarity; definite, indefinite, clustered,
 * rank 1), and curvature_at_step end to end on a recorded autoencoder run
 * against a Hessian-vector product built here independently.
 * Dimension letters: N operator dimension, R reflectors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "curvature.h"
#include "idx.h"
#include "run.h"
#include "test_util.h"
#include "trace.h"
#include "train.h"
#include "util.h"

/* ---- operators of known spectra --------------------------------------------- */

/* A = Q diag(d) Q^T, Q = H_1 ... H_R, H = I - 2 u u^T (R = 0: diagonal). */
struct tmat {
    size_t n;
    double *d;                 /* (N) the eigenvalues */
    int nrefl;
    double *u;                 /* (R, N) unit reflector vectors */
    int calls;
    int fail_at;               /* matvec call that fails (0: none) */
    int nan_at;                /* matvec call that gives a NaN (0: none) */
};

static void tmat_reflect(const struct tmat *m, int k, double *x)
{
    const double *u = m->u + (size_t)k * m->n;
    double s = 0;
    for (size_t i = 0; i < m->n; i++)
        s += u[i] * x[i];
    for (size_t i = 0; i < m->n; i++)
        x[i] -= 2 * s * u[i];
}

static int tmat_apply(void *arg, const double *x, double *y)
{
    struct tmat *m = arg;
    m->calls++;
    if (m->calls == m->fail_at) {
        dt_error_set("planted matvec failure");
        return -1;
    }
    memcpy(y, x, m->n * sizeof *y);
    for (int k = 0; k < m->nrefl; k++) /* Q^T x = H_R ... H_1 x */
        tmat_reflect(m, k, y);
    for (size_t i = 0; i < m->n; i++)
        y[i] *= m->d[i];
    for (int k = m->nrefl - 1; k >= 0; k--)
        tmat_reflect(m, k, y);
    if (m->calls == m->nan_at)
        y[0] = NAN;
    return 0;
}

enum spectrum {
    SPEC_DEFINITE,     /* 0.01, the rest in [1, 2], 20 */
    SPEC_INDEFINITE,   /* -0.5, the rest in [0.1, 3], 5 */
    SPEC_CLUSTERED,    /* three clusters of width 2e-7 at -1, 2 and 7 */
    SPEC_TRIPLE,       /* -1, 2 and 7 exactly, each n/3 times */
    SPEC_UNIFORM,      /* uniform in [-1, 1]: the extremes are not separated */
};

static void tmat_init(struct tmat *m, size_t n, enum spectrum s, int nrefl, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->n = n;
    m->nrefl = nrefl;
    m->d = malloc(n * sizeof *m->d);
    m->u = malloc((size_t)(nrefl ? nrefl : 1) * n * sizeof *m->u);
    assert_non_null(m->d);
    assert_non_null(m->u);
    uint64_t rng = seed;
    static const double centre[3] = {-1, 2, 7};
    for (size_t i = 0; i < n; i++) {
        switch (s) {
        case SPEC_DEFINITE:
            m->d[i] = tu_rand_uniform(&rng, 1, 2);
            break;
        case SPEC_INDEFINITE:
            m->d[i] = tu_rand_uniform(&rng, 0.1, 3);
            break;
        case SPEC_CLUSTERED:
            m->d[i] = centre[i % 3] + tu_rand_uniform(&rng, -1e-7, 1e-7);
            break;
        case SPEC_TRIPLE:
            m->d[i] = centre[i % 3];
            break;
        case SPEC_UNIFORM:
            m->d[i] = tu_rand_uniform(&rng, -1, 1);
            break;
        }
    }
    /* the separated extremes at random places */
    if (s == SPEC_DEFINITE || s == SPEC_INDEFINITE) {
        size_t a = tu_rand_u64(&rng) % n, b = (a + 1 + tu_rand_u64(&rng) % (n - 1)) % n;
        m->d[a] = s == SPEC_DEFINITE ? 0.01 : -0.5;
        m->d[b] = s == SPEC_DEFINITE ? 20 : 5;
    }
    for (int k = 0; k < nrefl; k++) {
        double *u = m->u + (size_t)k * n, s2 = 0;
        for (size_t i = 0; i < n; i++) {
            u[i] = tu_rand_uniform(&rng, -1, 1);
            s2 += u[i] * u[i];
        }
        for (size_t i = 0; i < n; i++)
            u[i] /= sqrt(s2);
    }
}

static void tmat_free(struct tmat *m)
{
    free(m->d);
    free(m->u);
}

/* Checks that hold for any symmetric A after any number of steps:
 * Cauchy interlacing (lambda_min <= lo <= hi <= lambda_max) and the
 * residual bound (an eigenvalue lies within resid of each Ritz value). */
static void tmat_check_bounds(const struct tmat *m, const struct curvature_result *r, double *lmin,
                              double *lmax)
{
    double mn = INFINITY, mx = -INFINITY;
    for (size_t i = 0; i < m->n; i++) {
        mn = fmin(mn, m->d[i]);
        mx = fmax(mx, m->d[i]);
    }
    double norm = fmax(fabs(mn), fabs(mx)), tiny = 1e-12 * norm;
    if (!(r->lo >= mn - tiny && r->hi <= mx + tiny && r->lo <= r->hi))
        fail_msg("n %zu: Ritz values [%.17g, %.17g] outside the spectrum [%.17g, %.17g]", m->n,
                 r->lo, r->hi, mn, mx);
    double dlo = INFINITY, dhi = INFINITY;
    for (size_t i = 0; i < m->n; i++) {
        dlo = fmin(dlo, fabs(m->d[i] - r->lo));
        dhi = fmin(dhi, fabs(m->d[i] - r->hi));
    }
    if (!(dlo <= r->lo_resid + tiny && dhi <= r->hi_resid + tiny))
        fail_msg("n %zu: the nearest eigenvalues lie %.3g and %.3g from the Ritz values, beyond "
                 "the residual estimates %.3g and %.3g", m->n, dlo, dhi, r->lo_resid, r->hi_resid);
    *lmin = mn;
    *lmax = mx;
}

/* Lanczos (30 steps) on spectrum s at n = 5, 50, 500, 2000, diagonal and
 * similar under R = 12 reflectors: the extremes to tol |A|. */
static void tmat_run(enum spectrum s, double tol)
{
    static const size_t sizes[] = {5, 50, 500, 2000};
    struct curvature_params p;
    curvature_params_defaults(&p);
    double worst = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int nrefl = 0; nrefl <= 12; nrefl += 12) {
            struct tmat m;
            tmat_init(&m, sizes[si], s, nrefl, 1000 * si + (uint64_t)nrefl + 7);
            struct curvature_result r;
            if (curvature_lanczos(tmat_apply, &m, m.n, &p, &r) != 0)
                fail_msg("n %zu: %s", m.n, dt_error());
            assert_int_equal(r.dim, m.n);
            assert_true(r.iterations >= 1 && r.iterations <= 30 && (size_t)r.iterations <= m.n);
            assert_int_equal(m.calls, r.iterations);
            double mn, mx;
            tmat_check_bounds(&m, &r, &mn, &mx);
            double norm = fmax(fabs(mn), fabs(mx));
            if (!(fabs(r.lo - mn) <= tol * norm && fabs(r.hi - mx) <= tol * norm))
                fail_msg("n %zu, %d reflectors: Ritz [%.17g, %.17g] (%d steps), spectrum "
                         "[%.17g, %.17g]: errors %.3g, %.3g above %.3g", m.n, nrefl, r.lo, r.hi,
                         r.iterations, mn, mx, fabs(r.lo - mn), fabs(r.hi - mx), tol * norm);
            worst = fmax(worst, fmax(fabs(r.lo - mn), fabs(r.hi - mx)) / norm);
            tmat_free(&m);
        }
    print_message("worst error of the extremes: %.2g |A| (bound %.2g)\n", worst, tol);
}

static void test_definite(void **state)
{
    (void)state;
    tmat_run(SPEC_DEFINITE, 1e-12);
}

static void test_indefinite(void **state)
{
    (void)state;
    tmat_run(SPEC_INDEFINITE, 1e-12);
}

static void test_clustered(void **state)
{
    (void)state;
    /* within a cluster, 30 steps resolve its edge to well under its width */
    tmat_run(SPEC_CLUSTERED, 1e-8);
}

/* Exactly three distinct eigenvalues: the Krylov space is invariant after
 * three steps (breakdown), and T's eigenvalues are exact. */
static void test_triple_breakdown(void **state)
{
    (void)state;
    struct curvature_params p;
    curvature_params_defaults(&p);
    struct tmat m;
    tmat_init(&m, 600, SPEC_TRIPLE, 12, 3);
    struct curvature_result r;
    assert_int_equal(curvature_lanczos(tmat_apply, &m, m.n, &p, &r), 0);
    assert_int_equal(r.iterations, 3);
    assert_true(fabs(r.lo + 1) <= 1e-13 && fabs(r.hi - 7) <= 1e-13);
    assert_true(r.lo_resid <= 1e-10 && r.hi_resid <= 1e-10);
    tmat_free(&m);
}

/* Extremes that are not separated from the bulk: 30 steps do not converge,
 * yet the bounds hold; more steps get closer. */
static void test_unseparated(void **state)
{
    (void)state;
    struct curvature_params p;
    curvature_params_defaults(&p);
    struct tmat m;
    tmat_init(&m, 2000, SPEC_UNIFORM, 12, 5);
    struct curvature_result r30, r150;
    double mn, mx;
    assert_int_equal(curvature_lanczos(tmat_apply, &m, m.n, &p, &r30), 0);
    assert_int_equal(r30.iterations, 30);
    tmat_check_bounds(&m, &r30, &mn, &mx);
    assert_true(r30.lo < -0.9 && r30.hi > 0.9);
    p.iterations = 150;
    assert_int_equal(curvature_lanczos(tmat_apply, &m, m.n, &p, &r150), 0);
    tmat_check_bounds(&m, &r150, &mn, &mx);
    assert_true(r150.lo <= r30.lo && r150.hi >= r30.hi);
    assert_true(fabs(r150.lo - mn) <= 1e-3 && fabs(r150.hi - mx) <= 1e-3);
    tmat_free(&m);
}

/* y = c u (u . x) */
struct rank1 {
    size_t n;
    double c, *u;
};

static int rank1_apply(void *arg, const double *x, double *y)
{
    const struct rank1 *a = arg;
    double s = 0;
    for (size_t i = 0; i < a->n; i++)
        s += a->u[i] * x[i];
    for (size_t i = 0; i < a->n; i++)
        y[i] = a->c * a->u[i] * s;
    return 0;
}

static void test_rank1(void **state)
{
    (void)state;
    struct curvature_params p;
    curvature_params_defaults(&p);
    uint64_t rng = 11;
    for (int sign = -1; sign <= 1; sign += 2) {
        struct rank1 a = {.n = 500, .c = 3.0 * sign};
        a.u = malloc(a.n * sizeof *a.u);
        assert_non_null(a.u);
        double u2 = 0;
        for (size_t i = 0; i < a.n; i++) {
            a.u[i] = tu_rand_uniform(&rng, -1, 1);
            u2 += a.u[i] * a.u[i];
        }
        double lam = a.c * u2; /* the one eigenvalue that is not 0 */
        struct curvature_result r;
        assert_int_equal(curvature_lanczos(rank1_apply, &a, a.n, &p, &r), 0);
        /* q1 and u span the only invariant space that holds q1 */
        assert_int_equal(r.iterations, 2);
        double want_lo = sign < 0 ? lam : 0, want_hi = sign < 0 ? 0 : lam;
        if (!(fabs(r.lo - want_lo) <= 1e-12 * fabs(lam) && fabs(r.hi - want_hi) <= 1e-12 * fabs(lam)))
            fail_msg("rank 1 (%g): [%.17g, %.17g], want [%.17g, %.17g]", lam, r.lo, r.hi, want_lo,
                     want_hi);
        assert_true(r.lo_resid <= 1e-10 * fabs(lam) && r.hi_resid <= 1e-10 * fabs(lam));
        free(a.u);
    }
    /* the zero operator: breakdown at once */
    struct rank1 z = {.n = 7, .c = 0};
    z.u = calloc(z.n, sizeof *z.u);
    struct curvature_result r;
    assert_int_equal(curvature_lanczos(rank1_apply, &z, z.n, &p, &r), 0);
    assert_int_equal(r.iterations, 1);
    assert_true(r.lo == 0 && r.hi == 0 && r.lo_resid == 0 && r.hi_resid == 0);
    free(z.u);
}

static void test_small_and_seed(void **state)
{
    (void)state;
    struct curvature_params p;
    curvature_params_defaults(&p);
    /* n = 1 */
    struct tmat m;
    tmat_init(&m, 1, SPEC_UNIFORM, 0, 1);
    struct curvature_result r;
    assert_int_equal(curvature_lanczos(tmat_apply, &m, 1, &p, &r), 0);
    assert_int_equal(r.iterations, 1);
    assert_true(r.lo == m.d[0] && r.hi == m.d[0]);
    tmat_free(&m);
    /* the seed picks the start vector: same seed, same bits */
    struct curvature_result a, b, c;
    tmat_init(&m, 300, SPEC_UNIFORM, 4, 2);
    p.iterations = 10;
    assert_int_equal(curvature_lanczos(tmat_apply, &m, m.n, &p, &a), 0);
    assert_int_equal(curvature_lanczos(tmat_apply, &m, m.n, &p, &b), 0);
    p.seed = 2;
    assert_int_equal(curvature_lanczos(tmat_apply, &m, m.n, &p, &c), 0);
    assert_true(memcmp(&a.lo, &b.lo, sizeof a.lo) == 0 && memcmp(&a.hi, &b.hi, sizeof a.hi) == 0);
    assert_true(a.hi != c.hi);
    tmat_free(&m);
}

static void test_errors(void **state)
{
    (void)state;
    struct curvature_params p;
    curvature_params_defaults(&p);
    struct tmat m;
    tmat_init(&m, 40, SPEC_DEFINITE, 2, 9);
    struct curvature_result r;
    p.iterations = 0;
    assert_int_equal(curvature_lanczos(tmat_apply, &m, m.n, &p, &r), -1);
    assert_non_null(strstr(dt_error(), "iterations"));
    p.iterations = 30;
    assert_int_equal(curvature_lanczos(tmat_apply, &m, 0, &p, &r), -1);
    m.fail_at = 4;
    assert_int_equal(curvature_lanczos(tmat_apply, &m, m.n, &p, &r), -1);
    assert_string_equal(dt_error(), "planted matvec failure");
    m.fail_at = 0;
    m.calls = 0;
    m.nan_at = 3;
    assert_int_equal(curvature_lanczos(tmat_apply, &m, m.n, &p, &r), -1);
    assert_non_null(strstr(dt_error(), "not finite"));
    tmat_free(&m);
    assert_int_equal(curvature_at_step(tu_path("absent.dtr"), 0, &p, &r), -1);
    p.eps = 0;
    assert_int_equal(curvature_at_step(tu_path("absent.dtr"), 0, &p, &r), -1);
    assert_non_null(strstr(dt_error(), "finite-difference step"));
}

/* ---- a recorded run ------------------------------------------------------- */

/* The Hessian-vector product of a trace's step, built here from run.h
 * alone (not curvature.c's code): parameters in graph order. */
struct thess {
    struct train_config tc;
    struct run r;
    uint64_t step;
    int par[64], npar;
    size_t n;
    float *theta, *x;          /* (N) */
    double *gp, *gm;           /* (N) */
    double h;
};

static void thess_grad(struct thess *t, const float *th, double *g)
{
    size_t off = 0;
    for (int k = 0; k < t->npar; k++) {
        exec_set(&t->r.e, t->par[k], th + off);
        off += t->r.g.nodes[t->par[k]].count;
    }
    exec_step(&t->r.e, t->step);
    off = 0;
    for (int k = 0; k < t->npar; k++) {
        size_t cnt = t->r.g.nodes[t->par[k]].count;
        exec_get(&t->r.e, t->r.g.nodes[t->par[k]].grad, t->x + off);
        for (size_t i = 0; i < cnt; i++)
            g[off + i] = t->x[off + i];
        off += cnt;
    }
}

static int thess_apply(void *arg, const double *v, double *y)
{
    struct thess *t = arg;
    double nv = 0;
    for (size_t i = 0; i < t->n; i++)
        nv += v[i] * v[i];
    nv = sqrt(nv);
    for (size_t i = 0; i < t->n; i++)
        t->x[i] = (float)(t->theta[i] + t->h * v[i] / nv);
    thess_grad(t, t->x, t->gp);
    for (size_t i = 0; i < t->n; i++)
        t->x[i] = (float)(t->theta[i] - t->h * v[i] / nv);
    thess_grad(t, t->x, t->gm);
    for (size_t i = 0; i < t->n; i++)
        y[i] = (t->gp[i] - t->gm[i]) * nv / (2 * t->h);
    return 0;
}

static void thess_open(struct thess *t, struct trace_file *tf, uint64_t step, double releps)
{
    memset(t, 0, sizeof *t);
    assert_int_equal(run_config_from_trace(&t->tc, &tf->cfg), 0);
    if (run_open(&t->r, &t->tc, 0, 0) != 0)
        fail_msg("run_open: %s", dt_error());
    uint32_t ci = 0;
    while (ci < tf->nckpt && tf->ckpt[ci].step != step)
        ci++;
    assert_true(ci < tf->nckpt);
    struct trace_ckpt ck;
    assert_int_equal(trace_read_ckpt(tf, ci, &ck), 0);
    assert_int_equal(run_ckpt_load(&t->r, &ck), 0);
    trace_ckpt_free(&ck);
    t->step = step;
    run_step_begin(&t->r, step);
    for (int i = 0; i < t->r.g.n; i++)
        if (t->r.g.nodes[i].type == OP_PARAM) {
            assert_true(t->npar < 64);
            t->par[t->npar++] = i;
            t->n += t->r.g.nodes[i].count;
        }
    t->theta = malloc(t->n * sizeof *t->theta);
    t->x = malloc(t->n * sizeof *t->x);
    t->gp = malloc(t->n * sizeof *t->gp);
    t->gm = malloc(t->n * sizeof *t->gm);
    double s = 0;
    size_t off = 0;
    for (int k = 0; k < t->npar; k++) {
        exec_get(&t->r.e, t->par[k], t->theta + off);
        off += t->r.g.nodes[t->par[k]].count;
    }
    for (size_t i = 0; i < t->n; i++)
        s += (double)t->theta[i] * t->theta[i];
    t->h = releps * fmax(sqrt(s), 1);
}

static void thess_close(struct thess *t)
{
    free(t->theta);
    free(t->x);
    free(t->gp);
    free(t->gm);
    run_close(&t->r);
}

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void unit_random(double *v, size_t n, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++)
        v[i] = tu_rand_uniform(rng, -1, 1);
    double s = sqrt(dot(v, v, n));
    for (size_t i = 0; i < n; i++)
        v[i] /= s;
}

/* The sigmoid autoencoder 784-8-784 on Fashion-MNIST, batch 20, 3 steps,
 * a checkpoint every step; the Hessian at step 1 (near its initialization). */
static void test_at_step(void **state)
{
    (void)state;
    struct idx_images im;
    tu_real_digits(&im);
    idx_free(&im);
    double t0 = dt_now();
    const char *path = tu_path("ae.dtr");
    struct train_config tc;
    train_config_defaults(&tc);
    tc.layers = "784,8,784";
    tc.layers_given = 1;
    assert_int_equal(model_parse_layers(tc.layers, &tc.model), 0);
    tc.model.batch = 20;
    tc.steps = 3;
    tc.ckpt_every = 1;
    tc.level = TRACE_LEVEL_STEP;
    tc.out = path;
    tc.quiet = 1;
    assert_int_equal(train_finish_config(&tc), 0);
    struct train_result tres;
    if (train_run(&tc, &tres) != 0)
        fail_msg("train_run: %s", dt_error());

    struct curvature_params p;
    curvature_params_defaults(&p);
    struct curvature_result r;
    if (curvature_at_step(path, 1, &p, &r) != 0)
        fail_msg("curvature_at_step: %s", dt_error());
    double t1 = dt_now();
    print_message("step 1: lo %.6g (resid %.2g)  hi %.6g (resid %.2g)  %d steps  loss %.6g  "
                  "|g| %.4g  (%.2f s)\n", r.lo, r.lo_resid, r.hi, r.hi_resid, r.iterations, r.loss,
                  r.grad_norm, t1 - t0);
    assert_int_equal(r.step, 1);
    assert_int_equal(r.dim, 784 * 8 * 2 + 8 + 784);
    assert_int_equal(r.iterations, 30);
    assert_true(r.lo <= r.hi && isfinite(r.lo) && isfinite(r.hi));
    assert_true(isfinite(r.lo_resid) && isfinite(r.hi_resid));

    /* loss and gradient norm at theta: those the run recorded */
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_true(tf->nsteps == 3);
    if (!(r.loss == tf->steps[1].loss))
        fail_msg("loss %.17g, recorded %.17g", r.loss, tf->steps[1].loss);
    if (!(fabs(r.grad_norm - tf->steps[1].grad_norm) <= 1e-6 * tf->steps[1].grad_norm))
        fail_msg("|g| %.17g, recorded %.17g", r.grad_norm, tf->steps[1].grad_norm);

    /* An independent Hv with a 3x smaller step. */
    struct thess t;
    thess_open(&t, tf, 1, 3e-4);
    assert_int_equal(t.n, r.dim);
    size_t n = t.n;
    double *u = malloc(n * sizeof *u), *v = malloc(n * sizeof *v);
    double *hu = malloc(n * sizeof *hu), *hv = malloc(n * sizeof *hv);
    uint64_t rng = 21;
    double norm = fmax(fabs(r.lo), fabs(r.hi));
    /* (a) symmetry: u^T H v = v^T H u */
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        unit_random(u, n, &rng);
        unit_random(v, n, &rng);
        thess_apply(&t, u, hu);
        thess_apply(&t, v, hv);
        double a = dot(u, hv, n), b = dot(v, hu, n);
        worst = fmax(worst, fabs(a - b));
        if (!(fabs(a - b) <= 1e-4 * norm))
            fail_msg("u^T H v %.9g, v^T H u %.9g: asymmetry %.3g above 1e-4 |H| (%.3g)", a, b,
                     fabs(a - b), norm);
    }
    /* (b) Rayleigh quotients of random vectors lie within [lo, hi] */
    for (int k = 0; k < 4; k++) {
        unit_random(v, n, &rng);
        thess_apply(&t, v, hv);
        double q = dot(v, hv, n);
        if (!(q >= r.lo - 1e-4 * norm && q <= r.hi + 1e-4 * norm))
            fail_msg("Rayleigh quotient %.9g outside [%.9g, %.9g]", q, r.lo, r.hi);
    }
    /* the same Lanczos on the independent Hv: the same extremes */
    struct curvature_result r2;
    assert_int_equal(curvature_lanczos(thess_apply, &t, n, &p, &r2), 0);
    print_message("independent Hv (eps 3e-4): lo %.6g  hi %.6g; asymmetry %.2g of |H|\n", r2.lo,
                  r2.hi, worst / norm);
    if (!(fabs(r2.lo - r.lo) <= 1e-3 * norm && fabs(r2.hi - r.hi) <= 1e-3 * norm))
        fail_msg("eps 1e-3: [%.9g, %.9g]; eps 3e-4: [%.9g, %.9g]", r.lo, r.hi, r2.lo, r2.hi);
    /* (c) the loss curves upward somewhere: hi > 0 well beyond the noise */
    assert_true(r.hi > 100 * (worst + r.hi_resid));
    thess_close(&t);
    free(u);
    free(v);
    free(hu);
    free(hv);

    /* a step without a checkpoint: the steps that have one */
    assert_int_equal(curvature_at_step(path, 9, &p, &r), -1);
    if (!strstr(dt_error(), "no checkpoint at step 9 (checkpoints: 0, 1, 2, 3)"))
        fail_msg("error: %s", dt_error());
    trace_close(tf);
    unlink(path);
    print_message("end to end: %.2f s\n", dt_now() - t0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_definite),
        cmocka_unit_test(test_indefinite),
        cmocka_unit_test(test_clustered),
        cmocka_unit_test(test_triple_breakdown),
        cmocka_unit_test(test_unseparated),
        cmocka_unit_test(test_rank1),
        cmocka_unit_test(test_small_and_seed),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_at_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
