/* test_stats.c: stats_compute against independent computations of every
 * field of a trace record (hash, L2, min, max, NaN/Inf counts, sketch from
 * its definition in stats.h), its edge cases, and the sketch distance
 * estimate's lack of bias over random pairs of tensors. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hash.h"
#include "stats.h"
#include "test_util.h"

#define SK TRACE_SKETCH_LEN

/* MurmurHash3's 32-bit finalizer, written out again here. */
static uint32_t st_fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

static double st_sign(size_t i)
{
    double lo = (st_fmix32((uint32_t)(i % 4096)) & 0x80000000u) ? -1.0 : 1.0;
    double hi = (st_fmix32((uint32_t)(4096 + i / 4096)) & 0x80000000u) ? -1.0 : 1.0;
    return lo * hi;
}

/* The record as stats.h defines it, by one plain pass in index order. */
struct st_ref {
    double sum2, min, max, sketch[SK], lane_abs[SK];
    uint64_t nan, inf;
    int any;
};

static void st_reference(const float *x, size_t n, struct st_ref *r)
{
    memset(r, 0, sizeof *r);
    r->min = INFINITY;
    r->max = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        if (v != v) {
            r->nan++;
        } else if (v == INFINITY || v == -INFINITY) {
            r->inf++;
        } else {
            r->any = 1;
            r->sum2 += v * v;
            r->min = v < r->min ? v : r->min;
            r->max = v > r->max ? v : r->max;
            r->sketch[i % SK] += st_sign(i) * v;
            r->lane_abs[i % SK] += fabs(v);
        }
    }
    if (!r->any)
        r->min = r->max = 0;
}

/* The order stats.c sums in, written out: lane k (k = i mod 16) sums its
 * finite elements' squares and signed values in double in order of i, and
 * the L2 norm is the square root of the lanes' sums added in order of k.
 * Every CPU and code path must give these bits (traces of two machines are
 * compared), so they are held to them exactly. */
static void st_lanes(const float *x, size_t n, double *l2, float sketch[SK])
{
    double sq[SK] = {0}, sk[SK] = {0};
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        if (v != v || v == INFINITY || v == -INFINITY)
            continue;
        sq[i % SK] += v * v;
        sk[i % SK] += st_sign(i) * v;
    }
    double s = 0;
    for (int k = 0; k < SK; k++) {
        s += sq[k];
        sketch[k] = (float)sk[k];
    }
    *l2 = sqrt(s);
}

/* stats_compute(x, n) must agree with the reference: counts, min and max
 * exactly, L2 to double rounding, each sketch value to float rounding; and
 * L2 and the sketch bit for bit with the lanes' order (st_lanes). */
static void st_check(const float *x, size_t n, const char *what)
{
    struct trace_oprec rec;
    struct st_ref r;
    memset(&rec, 0xa5, sizeof rec);
    rec.op = 7;
    stats_compute(x, n, &rec);
    st_reference(x, n, &r);
    assert_int_equal(rec.op, 7);
    if (rec.nan != r.nan || rec.inf != r.inf)
        fail_msg("%s (n %zu): nan %llu inf %llu, expected %llu and %llu", what, n,
                 (unsigned long long)rec.nan, (unsigned long long)rec.inf,
                 (unsigned long long)r.nan, (unsigned long long)r.inf);
    if (rec.min != r.min || rec.max != r.max)
        fail_msg("%s (n %zu): min %.9g max %.9g, expected %.9g and %.9g", what, n, rec.min,
                 rec.max, r.min, r.max);
    double l2 = sqrt(r.sum2);
    if (!(fabs(rec.l2 - l2) <= 1e-12 * l2))
        fail_msg("%s (n %zu): l2 %.17g, expected %.17g", what, n, rec.l2, l2);
    for (int k = 0; k < SK; k++) {
        double want = r.sketch[k];
        if (!(fabs(rec.sketch[k] - want) <= FLT_EPSILON * fabs(want) + 1e-12 * r.lane_abs[k]))
            fail_msg("%s (n %zu): sketch[%d] = %.9g, expected %.9g", what, n, k,
                     (double)rec.sketch[k], want);
    }
    double lane_l2;
    float lane_sketch[SK];
    st_lanes(x, n, &lane_l2, lane_sketch);
    if (memcmp(&rec.l2, &lane_l2, sizeof lane_l2) != 0)
        fail_msg("%s (n %zu): l2 %a, the lanes' order gives %a", what, n, rec.l2, lane_l2);
    if (memcmp(rec.sketch, lane_sketch, sizeof lane_sketch) != 0)
        fail_msg("%s (n %zu): the sketch differs from the lanes' order", what, n);
    uint64_t h = hash_tensor(x, n * sizeof *x);
    if (rec.hash != h)
        fail_msg("%s (n %zu): hash %016llx, hash_tensor %016llx", what, n,
                 (unsigned long long)rec.hash, (unsigned long long)h);
}

static void test_sign(void **state)
{
    (void)state;
    size_t neg = 0;
    for (size_t i = 0; i < 16 * 65536; i++) {
        double s = st_sign(i);
        if (stats_sketch_sign(i) != (float)s)
            fail_msg("stats_sketch_sign(%zu) = %g, expected %g", i, (double)stats_sketch_sign(i), s);
        neg += s < 0;
    }
    /* fmix32 is a bijection, so the top bit splits 0..65535 roughly evenly. */
    if (neg < 16 * 32000 || neg > 16 * 33536)
        fail_msg("%zu of %d signs negative", neg, 16 * 65536);
    /* Far indices, up to the 32-bit block number. */
    for (uint64_t b = 1; b < (1ull << 32); b = b * 3 + 1)
        if (stats_sketch_sign((size_t)(b * 16 + 5)) != (float)st_sign((size_t)(b * 16 + 5)))
            fail_msg("stats_sketch_sign wrong for block %llu", (unsigned long long)b);
}

static const size_t st_lengths[] = {0, 1, 15, 16, 17, 67, 1000, 8193, 100000};
#define ST_NLENGTHS (sizeof st_lengths / sizeof st_lengths[0])

static float *st_random(size_t n, uint64_t *rng, double lo, double hi)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)tu_rand_uniform(rng, lo, hi);
    return x;
}

static void test_finite(void **state)
{
    (void)state;
    uint64_t rng = 1;
    for (size_t t = 0; t < ST_NLENGTHS; t++) {
        float *x = st_random(st_lengths[t], &rng, -10, 10);
        st_check(x, st_lengths[t], "uniform in [-10, 10]");
        free(x);
    }
}

/* NaN (also negative and with a payload), +Inf and -Inf at block edges, in
 * the tail and at random places: they must be counted and left out of
 * every statistic, and the finite elements of their block kept. */
static void test_nonfinite(void **state)
{
    (void)state;
    uint64_t rng = 2;
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu};
    for (size_t t = 0; t < ST_NLENGTHS; t++) {
        size_t n = st_lengths[t];
        float *x = st_random(n, &rng, -3, 5);
        const size_t at[] = {0, 15, 16, 31, 33, n / 2, n - 1};
        for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
            if (at[k] >= n)
                continue;
            if (k % 3 == 0) {
                memcpy(&x[at[k]], &nans[k % 4], sizeof(float));
            } else {
                x[at[k]] = k % 3 == 1 ? INFINITY : -INFINITY;
            }
        }
        for (size_t i = 0; i < n; i++) {
            double u = tu_rand_uniform(&rng, 0, 1);
            if (u < 0.003)
                memcpy(&x[i], &nans[i % 4], sizeof(float));
            else if (u < 0.006)
                x[i] = u < 0.0045 ? INFINITY : -INFINITY;
        }
        st_check(x, n, "with NaN and Inf");
        free(x);
    }
}

/* Squares that overflow float must not overflow the L2 norm; tiny and
 * subnormal values must not vanish from min. */
static void test_extremes(void **state)
{
    (void)state;
    float x[40];
    for (int i = 0; i < 40; i++)
        x[i] = (float)(i - 20) * 0.25f;
    x[3] = FLT_MAX;
    x[19] = -FLT_MAX;
    x[37] = FLT_MAX;
    x[5] = 1e-45f;
    st_check(x, 40, "with FLT_MAX");
    struct trace_oprec rec;
    stats_compute(x, 40, &rec);
    assert_true(isfinite(rec.l2) && rec.l2 > 1.7 * FLT_MAX);

    /* All negative: max is negative; all positive: min is positive. */
    for (int i = 0; i < 40; i++)
        x[i] = -1.0f - (float)i;
    st_check(x, 33, "all negative");
    stats_compute(x, 33, &rec);
    assert_true(rec.max == -1.0 && rec.min == -33.0);
    for (int i = 0; i < 40; i++)
        x[i] = 2.0f + (float)i;
    stats_compute(x, 35, &rec);
    assert_true(rec.min == 2.0 && rec.max == 36.0);
}

static void test_all_zero(void **state)
{
    (void)state;
    for (size_t t = 0; t < ST_NLENGTHS; t++) {
        size_t n = st_lengths[t];
        float *x = calloc(n ? n : 1, sizeof *x);
        assert_non_null(x);
        struct trace_oprec rec;
        stats_compute(x, n, &rec);
        if (rec.min != 0 || rec.max != 0 || rec.l2 != 0 || rec.nan || rec.inf)
            fail_msg("zeros (n %zu): min %g max %g l2 %g nan %llu inf %llu", n, rec.min,
                     rec.max, rec.l2, (unsigned long long)rec.nan, (unsigned long long)rec.inf);
        for (int k = 0; k < SK; k++)
            assert_true(rec.sketch[k] == 0);
        st_check(x, n, "zeros");
        free(x);
    }
}

/* No finite element: min = max = 0 (stats.h), everything counted. */
static void test_all_nonfinite(void **state)
{
    (void)state;
    for (size_t t = 1; t < ST_NLENGTHS; t++) {
        size_t n = st_lengths[t];
        float *x = malloc(n * sizeof *x);
        assert_non_null(x);
        for (int kind = 0; kind < 2; kind++) {
            for (size_t i = 0; i < n; i++)
                x[i] = kind == 0 ? NAN : (i % 2 ? INFINITY : -INFINITY);
            struct trace_oprec rec;
            stats_compute(x, n, &rec);
            uint64_t want_nan = kind == 0 ? n : 0, want_inf = kind == 0 ? 0 : n;
            if (rec.min != 0 || rec.max != 0 || rec.l2 != 0 || rec.nan != want_nan ||
                rec.inf != want_inf)
                fail_msg("all %s (n %zu): min %g max %g l2 %g nan %llu inf %llu",
                         kind ? "Inf" : "NaN", n, rec.min, rec.max, rec.l2,
                         (unsigned long long)rec.nan, (unsigned long long)rec.inf);
            for (int k = 0; k < SK; k++)
                assert_true(rec.sketch[k] == 0);
            st_check(x, n, kind ? "all Inf" : "all NaN");
        }
        free(x);
    }
}

/* The hash is the tensor hash of exactly the n floats' bytes. */
static void test_hash(void **state)
{
    (void)state;
    uint64_t rng = 3;
    size_t n = 100000;
    float *x = st_random(n, &rng, -1, 1);
    struct trace_oprec a, b;
    stats_compute(x, n, &a);
    assert_true(a.hash == hash_tensor(x, n * sizeof *x));
    /* One flipped bit anywhere changes it; a shorter prefix hashes differently. */
    uint32_t u;
    memcpy(&u, &x[77777], sizeof u);
    u ^= 1;
    memcpy(&x[77777], &u, sizeof u);
    stats_compute(x, n, &b);
    assert_true(a.hash != b.hash);
    stats_compute(x, n - 1, &b);
    assert_true(b.hash == hash_tensor(x, (n - 1) * sizeof *x));
    free(x);
}

/* Over many random pairs of tensors (n = 4096), the mean of
 * estimated |a - b|^2 / true |a - b|^2 is 1 within a few percent: the
 * ratio of one pair spreads like chi^2_16 / 16 (standard deviation 0.35),
 * so the mean of 4000 has a standard error under 0.6%. */
static void test_sketch_unbiased(void **state)
{
    (void)state;
    const size_t n = 4096;
    const int pairs = 4000;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_true(a && b);
    uint64_t rng = 4;
    for (int family = 0; family < 3; family++) {
        double sum = 0;
        for (int p = 0; p < pairs; p++) {
            for (size_t i = 0; i < n; i++) {
                a[i] = (float)tu_rand_uniform(&rng, -1, 1);
                if (family == 0) /* independent */
                    b[i] = (float)tu_rand_uniform(&rng, -1, 1);
                else if (family == 1) /* a small perturbation of a */
                    b[i] = a[i] + (float)tu_rand_uniform(&rng, -1e-3, 1e-3);
                else /* differing in about 5% of the elements */
                    b[i] = tu_rand_uniform(&rng, 0, 1) < 0.05 ? -a[i] : a[i];
            }
            struct trace_oprec ra, rb;
            stats_compute(a, n, &ra);
            stats_compute(b, n, &rb);
            double est = 0, truth = 0;
            for (int k = 0; k < SK; k++)
                est += ((double)ra.sketch[k] - rb.sketch[k]) * ((double)ra.sketch[k] - rb.sketch[k]);
            for (size_t i = 0; i < n; i++)
                truth += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
            double dist = stats_sketch_distance(&ra, &rb);
            if (!(fabs(dist - sqrt(est)) <= 1e-12 * sqrt(est)))
                fail_msg("stats_sketch_distance %.17g, expected %.17g", dist, sqrt(est));
            assert_true(truth > 0);
            sum += est / truth;
        }
        double mean = sum / pairs;
        if (!(fabs(mean - 1) < 0.03))
            fail_msg("pair family %d: mean estimated/true squared distance %.4f", family, mean);
    }
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sign),
        cmocka_unit_test(test_finite),
        cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_all_zero),
        cmocka_unit_test(test_all_nonfinite),
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_sketch_unbiased),
    };
    /* every implementation this CPU runs, each held to the same checks */
    int failed = 0;
    for (const char *const *p = (const char *const[]){"avx512", "avx2", "generic", NULL}; *p; p++) {
        if (stats_use(*p) < 0) {
            printf("stats: %s does not run on this CPU; not checked\n", *p);
            continue;
        }
        printf("stats: %s\n", stats_impl());
        failed += cmocka_run_group_tests(tests, NULL, NULL);
    }
    return failed;
}
