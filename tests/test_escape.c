/* test_escape.c: escape_analyze on synthetic loss curves with known
 * plateaus and drops (biphasic, triphasic, with 5% and 20% multiplicative
 * log-normal noise over several seeds), a pure power law and a constant
 * log-rate decline (no plateau), where the flatness test puts a plateau's
 * end on a curve whose slope is known, a constant curve, very short curves,
 * the parameter checks, and the correlations of `escape --pairs` against
 * hand-derived values (ties included). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "escape.h"
#include "test_util.h"

#define N_LONG 5000

/* A drop at step c of width s: 1 before, 0 after. */
static double te_step_down(double t, double c, double s)
{
    return 1.0 / (1.0 + exp((t - c) / s));
}

/* Loss with an exponential approach (time constant tau) from l0 to the
 * first level, then a sigmoid drop at each of at[0..k) to level[i+1]. */
static void te_curve(double *loss, /* (N) */
                     size_t n, double l0, double tau, const double *level, /* (k+1) */
                     const double *at, /* (k) */
                     int k, double width)
{
    for (size_t t = 0; t < n; t++) {
        double v = level[k];
        for (int i = 0; i < k; i++)
            v += (level[i] - level[i + 1]) * te_step_down((double)t, at[i], width);
        loss[t] = v + (l0 - level[0]) * exp(-(double)t / tau);
    }
}

/* Multiply by exp(sigma * g), g standard normal (Box-Muller), seeded. */
static void te_noise(double *loss, size_t n, double sigma, uint64_t seed)
{
    uint64_t st = seed;
    for (size_t t = 0; t < n; t++) {
        double u1 = tu_rand_uniform(&st, 1e-12, 1.0), u2 = tu_rand_uniform(&st, 0.0, 1.0);
        double g = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
        loss[t] *= exp(sigma * g);
    }
}

static void te_analyze(const double *loss, size_t n, struct escape_result *r)
{
    struct escape_params p;
    escape_params_defaults(&p);
    double *g = malloc((n ? n : 1) * sizeof *g);
    for (size_t t = 0; t < n; t++)
        g[t] = 0.5;
    assert_int_equal(escape_analyze(loss, g, n, &p, r), 0);
    free(g);
}

/* Escapes exactly at[0..k), each within max(5% of n, a window); phases k+1. */
static void te_check_escapes(const struct escape_result *r, size_t n, const double *at, int k,
                             const double *level, const char *what)
{
    double tol = fmax(0.05 * (double)n, (double)r->used.window);
    if ((int)r->nescapes != k) {
        for (size_t i = 0; i < r->nplateaus; i++)
            print_message("%s: plateau %zu-%zu level %g escaped %d at %zu drop %g\n", what,
                          r->plateaus[i].start, r->plateaus[i].end, r->plateaus[i].level,
                          r->plateaus[i].escaped, r->plateaus[i].escape, r->plateaus[i].drop);
        fail_msg("%s: %zu escapes, wanted %d", what, r->nescapes, k);
    }
    assert_int_equal(r->phases, k + 1);
    int j = 0;
    for (size_t i = 0; i < r->nplateaus; i++) {
        const struct escape_plateau *p = &r->plateaus[i];
        if (!p->escaped)
            continue;
        double err = fabs((double)p->escape - at[j]);
        if (err > tol)
            fail_msg("%s: escape %d at step %zu, wanted %g +- %g", what, j, p->escape, at[j], tol);
        /* the plateau before it sits at the level, and ends before the drop */
        if (fabs(p->level / level[j] - 1) > 0.05)
            fail_msg("%s: plateau %zu level %g, wanted %g", what, i, p->level, level[j]);
        assert_true(p->end < p->escape);
        assert_true(p->end - p->start + 1 >= (size_t)r->used.min_len);
        assert_true(fabs(p->grad_norm - 0.5) < 1e-12);
        j++;
    }
    /* the last plateau is the final level, never escaped */
    assert_true(r->nplateaus >= 1);
    const struct escape_plateau *last = &r->plateaus[r->nplateaus - 1];
    assert_false(last->escaped);
    assert_true(fabs(last->level / level[k] - 1) < 0.05);
    assert_int_equal(last->end, n - 1);
    assert_int_equal(r->nplateaus, (size_t)k + 1);
}

static void test_biphasic(void **state)
{
    (void)state;
    static double loss[N_LONG];
    const double level[] = {0.087, 0.061}, at[] = {2300};
    static const double sigmas[] = {0, 0.05, 0.20};
    for (int s = 0; s < 3; s++)
        for (uint64_t seed = 1; seed <= (sigmas[s] > 0 ? 5u : 1u); seed++) {
            te_curve(loss, N_LONG, 0.17, 80, level, at, 1, 60);
            if (sigmas[s] > 0)
                te_noise(loss, N_LONG, sigmas[s], seed);
            struct escape_result r;
            te_analyze(loss, N_LONG, &r);
            char what[64];
            snprintf(what, sizeof what, "biphasic, noise %g, seed %u", sigmas[s], (unsigned)seed);
            te_check_escapes(&r, N_LONG, at, 1, level, what);
            assert_string_equal(escape_phase_name(r.phases), "biphasic");
            escape_result_free(&r);
        }
}

static void test_triphasic(void **state)
{
    (void)state;
    static double loss[N_LONG];
    const double level[] = {0.5, 0.3, 0.12}, at[] = {1600, 3300};
    static const double sigmas[] = {0, 0.05, 0.20};
    for (int s = 0; s < 3; s++)
        for (uint64_t seed = 11; seed <= (sigmas[s] > 0 ? 15u : 11u); seed++) {
            te_curve(loss, N_LONG, 1.0, 100, level, at, 2, 50);
            if (sigmas[s] > 0)
                te_noise(loss, N_LONG, sigmas[s], seed);
            struct escape_result r;
            te_analyze(loss, N_LONG, &r);
            char what[64];
            snprintf(what, sizeof what, "triphasic, noise %g, seed %u", sigmas[s], (unsigned)seed);
            te_check_escapes(&r, N_LONG, at, 2, level, what);
            assert_string_equal(escape_phase_name(r.phases), "triphasic");
            escape_result_free(&r);
        }
}

/* A short run (PredNet-like length): a plateau and a drop in 400 steps. */
static void test_short_biphasic(void **state)
{
    (void)state;
    double loss[400];
    const double level[] = {0.4, 0.2}, at[] = {220};
    te_curve(loss, 400, 1.0, 8, level, at, 1, 5);
    te_noise(loss, 400, 0.05, 7);
    struct escape_result r;
    te_analyze(loss, 400, &r);
    te_check_escapes(&r, 400, at, 1, level, "short biphasic");
    escape_result_free(&r);
}

static void test_power_law(void **state)
{
    (void)state;
    static double loss[N_LONG];
    /* (1 + t/c)^-a; with c = 1 the tail is flatter than a quarter of the
     * mean rate (a constant-rate threshold would call it a plateau) */
    static const double a[] = {0.3, 0.5, 1.0, 0.5, 1.0}, c[] = {10, 10, 10, 1, 1};
    for (int k = 0; k < 5; k++) {
        for (size_t t = 0; t < N_LONG; t++)
            loss[t] = pow(1.0 + (double)t / c[k], -a[k]);
        struct escape_result r;
        te_analyze(loss, N_LONG, &r);
        if (r.nplateaus != 0)
            fail_msg("power law t^-%g: plateau %zu-%zu", a[k], r.plateaus[0].start, r.plateaus[0].end);
        assert_int_equal(r.nescapes, 0);
        assert_int_equal(r.phases, 1);
        assert_true(r.rate > 0);
        escape_result_free(&r);
    }
}

static void test_constant(void **state)
{
    (void)state;
    static double loss[1000];
    for (size_t t = 0; t < 1000; t++)
        loss[t] = 0.25;
    struct escape_result r;
    te_analyze(loss, 1000, &r);
    assert_int_equal(r.nplateaus, 1);
    assert_int_equal(r.plateaus[0].start, 0);
    assert_int_equal(r.plateaus[0].end, 999);
    assert_true(r.plateaus[0].level == 0.25);
    assert_false(r.plateaus[0].escaped);
    assert_int_equal(r.nescapes, 0);
    assert_int_equal(r.phases, 1);
    assert_string_equal(escape_phase_name(r.phases), "monophasic");
    assert_true(r.rate == 0 && r.noise == 0);
    escape_result_free(&r);
}

/* Curves shorter than a window or than min_len: no plateau, no crash. */
static void test_short(void **state)
{
    (void)state;
    double loss[12];
    for (size_t t = 0; t < 12; t++)
        loss[t] = 1.0 / (1.0 + (double)t);
    for (size_t n = 0; n <= 12; n++) {
        struct escape_result r;
        te_analyze(loss, n, &r);
        assert_int_equal(r.n, n);
        assert_int_equal(r.nplateaus, 0);
        assert_null(r.plateaus);
        assert_int_equal(r.nescapes, 0);
        assert_int_equal(r.phases, n ? 1 : 0);
        assert_true(r.used.window % 2 == 1 && r.used.window >= 3);
        escape_result_free(&r);
    }
    /* a window asked for larger than the curve is cut to it (odd) */
    struct escape_params p, q;
    escape_params_defaults(&p);
    p.window = 101;
    escape_params_resolve(&p, 40, &q);
    assert_int_equal(q.window, 39);
    assert_int_equal(q.min_len, 78);
}

/* Non-finite and non-positive losses take the previous valid value. */
static void test_invalid_values(void **state)
{
    (void)state;
    static double loss[N_LONG];
    const double level[] = {0.087, 0.061}, at[] = {2300};
    te_curve(loss, N_LONG, 0.17, 80, level, at, 1, 60);
    loss[0] = NAN;
    loss[1000] = INFINITY;
    loss[1001] = -1;
    loss[4000] = 0;
    struct escape_result r;
    te_analyze(loss, N_LONG, &r);
    te_check_escapes(&r, N_LONG, at, 1, level, "invalid values");
    escape_result_free(&r);
}

static void test_params(void **state)
{
    (void)state;
    struct escape_params p, q;
    char msg[160];
    escape_params_defaults(&p);
    assert_int_equal(escape_params_check(&p, msg, sizeof msg), 0);
    escape_params_resolve(&p, 5000, &q);
    assert_int_equal(q.window, 199); /* 5000/25 = 200, made odd */
    assert_int_equal(q.min_len, 398);
    assert_int_equal(q.max_gap, 199);
    assert_int_equal(q.horizon, 597);
    escape_params_resolve(&p, 250, &q);
    assert_int_equal(q.window, 9);
    q = p;
    q.window = 2;
    assert_int_equal(escape_params_check(&q, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "--window"));
    q = p;
    q.drop = 1;
    assert_int_equal(escape_params_check(&q, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "--drop"));
    q = p;
    q.flat = 0;
    assert_int_equal(escape_params_check(&q, msg, sizeof msg), -1);
    q = p;
    q.noise_k = -1;
    assert_int_equal(escape_params_check(&q, msg, sizeof msg), -1);
    assert_string_equal(escape_phase_name(0), "empty");
    assert_string_equal(escape_phase_name(4), "tetraphasic");
    assert_string_equal(escape_phase_name(9), "multiphasic");
}


/* A constant log-rate decline, loss = exp(-k t): no plateau anywhere (its
 * slope k stays above a quarter of the power-law rate E/(t+1) beyond the
 * first 0.25 N / ln N steps, fewer than min_len). */
static void test_exponential(void **state)
{
    (void)state;
    static double loss[N_LONG];
    static const size_t ns[] = {400, 2000, N_LONG};
    static const double ks[] = {2e-4, 1e-3, 5e-3};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            size_t n = ns[i];
            for (size_t t = 0; t < n; t++)
                loss[t] = 0.3 * exp(-ks[j] * (double)t);
            struct escape_result r;
            te_analyze(loss, n, &r);
            if (r.nplateaus != 0)
                fail_msg("exp(-%g t) over %zu steps: plateau %zu-%zu", ks[j], n, r.plateaus[0].start,
                         r.plateaus[0].end);
            assert_int_equal(r.phases, 1);
            escape_result_free(&r);
        }
}

/* Where the flatness test (step 5 of escape.c) ends a plateau, on a curve
 * whose smoothed slope is known: ln loss = -k t is linear, so z is linear
 * too away from the ends and its slope (taken over whole windows only) is
 * exactly k; step t is flat exactly when k <= flat * E / (t + t0), t0 =
 * N/10, so with --flat F the first run of flat steps is [0, floor(F E / k -
 * t0)], and being a straight line it is level as a whole (step 7). E, the
 * rate through the ends, is checked against the line's own k (N-1) /
 * ln((N-1+t0)/t0) first (the cut windows at the ends shift it by under
 * 5%). Any other comparison (the old t+1 for t+t0, a constant rate, flat
 * ignored, < for <=, the wrong side) moves the end. */
static void test_flat_boundary(void **state)
{
    (void)state;
    static double loss[2000];
    const size_t n = 2000;
    const double k = 1e-3, t0 = 200;
    for (size_t t = 0; t < n; t++)
        loss[t] = exp(-k * (double)t);
    static const double flats[] = {0.5, 1.0, 2.0};
    for (int i = 0; i < 3; i++) {
        struct escape_params p;
        escape_params_defaults(&p);
        p.flat = flats[i];
        struct escape_result r;
        assert_int_equal(escape_analyze(loss, NULL, n, &p, &r), 0);
        double e_line = k * (double)(n - 1) / log(((double)n - 1 + t0) / t0);
        if (fabs(r.rate / e_line - 1) > 0.05)
            fail_msg("rate %g, the line's %g", r.rate, e_line);
        double tstar = p.flat * r.rate / k - t0; /* last flat step */
        assert_true(r.nplateaus >= 1);
        assert_int_equal(r.plateaus[0].start, 0);
        if ((double)r.plateaus[0].end != floor(tstar))
            fail_msg("--flat %g: plateau ends at %zu, the criterion says %g", p.flat,
                     r.plateaus[0].end, floor(tstar));
        escape_result_free(&r);
    }
    /* flat 0.25 (default): no step is flat (0.25 E / k = 208 < t0) */
    struct escape_result r;
    te_analyze(loss, n, &r);
    assert_int_equal(r.nplateaus, 0);
    escape_result_free(&r);
}

/* Pearson and Spearman against values worked out by hand. */
static void test_correlation(void **state)
{
    (void)state;
    const double eps = 1e-12;
    /* x 1..5, y 2 4 5 4 5: deviations -2 -1 0 1 2 and -2 0 1 0 1,
     * Sxy 6, Sxx 10, Syy 6: r = 6 / sqrt(60) */
    const double x1[] = {1, 2, 3, 4, 5}, y1[] = {2, 4, 5, 4, 5};
    assert_true(fabs(escape_corr_pearson(x1, y1, 5) - 6 / sqrt(60)) < eps);
    /* ranks of y1 with ties: 1, 2.5, 4.5, 2.5, 4.5 (mean 3): deviations
     * -2 -0.5 1.5 -0.5 1.5, Sxy = 4 + 0.5 + 0 - 0.5 + 3 = 7, Syy = 9:
     * rho = 7 / sqrt(90) */
    assert_true(fabs(escape_corr_spearman(x1, y1, 5) - 7 / sqrt(90)) < eps);
    /* exact lines */
    const double y2[] = {4, 7, 10, 13, 16}, y3[] = {-2, -4, -6, -8, -10};
    assert_true(fabs(escape_corr_pearson(x1, y2, 5) - 1) < eps);
    assert_true(fabs(escape_corr_pearson(x1, y3, 5) + 1) < eps);
    /* monotone, not linear: Spearman 1, Pearson below */
    const double y4[] = {1, 8, 27, 64, 125};
    assert_true(fabs(escape_corr_spearman(x1, y4, 5) - 1) < eps);
    assert_true(escape_corr_pearson(x1, y4, 5) < 0.99);
    /* ties in x: ranks 1 2.5 2.5 4 against 1 3 2 4: Sxy 4.5, Sxx 4.5,
     * Syy 5: rho = 3 / sqrt(10) */
    const double x5[] = {1, 2, 2, 3}, y5[] = {1, 3, 2, 4};
    assert_true(fabs(escape_corr_spearman(x5, y5, 4) - 3 / sqrt(10)) < eps);
    /* ties in both: ranks 1 3 3 3 5 and 1.5 1.5 3 4.5 4.5: Sxy 6, Sxx 8,
     * Syy 9: rho = 1 / sqrt(2); the order of the pairs does not matter */
    const double x6[] = {10, 20, 20, 20, 30}, y6[] = {5, 5, 6, 7, 7};
    const double x7[] = {20, 30, 10, 20, 20}, y7[] = {6, 7, 5, 5, 7};
    assert_true(fabs(escape_corr_spearman(x6, y6, 5) - 1 / sqrt(2)) < eps);
    assert_true(fabs(escape_corr_spearman(x7, y7, 5) - 1 / sqrt(2)) < eps);
    /* step numbers far from 0: centred sums keep the exact 1 */
    const double x8[] = {1e9, 1e9 + 1, 1e9 + 2}, y8[] = {0, 10, 20};
    assert_true(fabs(escape_corr_pearson(x8, y8, 3) - 1) < eps);
    /* no spread, too few values: NaN */
    const double c[] = {3, 3, 3, 3, 3};
    assert_true(isnan(escape_corr_pearson(x1, c, 5)));
    assert_true(isnan(escape_corr_spearman(c, x1, 5)));
    assert_true(isnan(escape_corr_pearson(x1, y1, 1)));
    assert_true(isnan(escape_corr_spearman(x1, y1, 0)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_biphasic),     cmocka_unit_test(test_triphasic),
        cmocka_unit_test(test_short_biphasic), cmocka_unit_test(test_power_law),
        cmocka_unit_test(test_constant),     cmocka_unit_test(test_short),
        cmocka_unit_test(test_invalid_values), cmocka_unit_test(test_params),
        cmocka_unit_test(test_exponential),  cmocka_unit_test(test_flat_boundary),
        cmocka_unit_test(test_correlation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
