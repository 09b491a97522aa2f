/* test_rng.c: Philox4x32-10 against Random123's known-answer vectors, the
 * (seed, stream, index) mapping of rng.h, and the statistics of the uniform
 * and permutation helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rng.h"
#include "test_util.h"

struct test_kat {
    uint32_t ctr[4], key[2], out[4];
};

/* Random123 kat_vectors, philox4x32 with 10 rounds. */
static const struct test_kat test_kats[] = {
    { { 0, 0, 0, 0 }, { 0, 0 }, { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 } },
    { { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff }, { 0xffffffff, 0xffffffff },
      { 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd } },
    { { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 }, { 0xa4093822, 0x299f31d0 },
      { 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 } },
};

static void test_philox_kat(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof test_kats / sizeof test_kats[0]; i++) {
        uint32_t out[4];
        rng_philox4x32_10(test_kats[i].ctr, test_kats[i].key, out);
        for (int k = 0; k < 4; k++)
            if (out[k] != test_kats[i].out[k])
                fail_msg("vector %zu word %d: got %08x want %08x", i, k, out[k],
                         test_kats[i].out[k]);
    }
}

/* rng_u32 must place seed, stream and index exactly where rng.h says. */
static void test_u32_mapping(void **state)
{
    (void)state;
    const uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull;
    const uint64_t block = 0x100000002ull;
    const uint32_t key[2] = { 0x89abcdef, 0x01234567 };
    const uint32_t ctr[4] = { 0x00000002, 0x00000001, 0x76543210, 0xfedcba98 };
    uint32_t w[4];
    rng_philox4x32_10(ctr, key, w);
    for (uint64_t k = 0; k < 4; k++)
        assert_int_equal(rng_u32(seed, stream, 4 * block + k), w[k]);
    /* Index 0 of seed 0, stream 0 is word 0 of the all-zero known answer. */
    assert_int_equal(rng_u32(0, 0, 0), 0x6627e8d5);
    assert_int_equal(rng_u32(0, 0, 3), 0x9b00dbd8);
}

static void test_uniform_exact(void **state)
{
    (void)state;
    for (uint64_t i = 0; i < 100000; i++) {
        float u = rng_uniform(5, 9, i);
        assert_true(u >= 0.0f && u < 1.0f);
        float scaled = u * 0x1p24f; /* exact: a multiple of 2^-24 stays exact */
        assert_true(scaled == (float)(uint32_t)scaled);
        assert_true(scaled == (float)(rng_u32(5, 9, i) >> 8));
    }
    /* The extremes: word 0 maps to 0, all ones to 1 - 2^-24, never 1. */
    assert_true((float)(0xffffffffu >> 8) * 0x1p-24f < 1.0f);
}

static void test_fill_uniform(void **state)
{
    (void)state;
    const size_t n = 1000003; /* not a multiple of 4: ends mid-block */
    const double lo = -2.0, hi = 3.0;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    rng_fill_uniform(x, n, 77, 3, lo, hi);
    double sum = 0, sum2 = 0;
    for (size_t i = 0; i < n; i++) {
        float want = (float)(lo + (hi - lo) * (double)rng_uniform(77, 3, i));
        if (x[i] != want)
            fail_msg("element %zu: %a != %a", i, (double)x[i], (double)want);
        assert_true(x[i] >= lo && x[i] <= hi);
        sum += x[i];
    }
    double mean = sum / (double)n;
    for (size_t i = 0; i < n; i++)
        sum2 += (x[i] - mean) * (x[i] - mean);
    double var = sum2 / (double)(n - 1);
    /* True mean 0.5 and variance 25/12; bounds are about 5 standard errors. */
    if (mean < 0.5 - 0.0075 || mean > 0.5 + 0.0075)
        fail_msg("mean %.5f, expected 0.5", mean);
    if (var < 25.0 / 12 - 0.01 || var > 25.0 / 12 + 0.01)
        fail_msg("variance %.5f, expected %.5f", var, 25.0 / 12);
    free(x);
}

/* The permutation as rng.h defines it, written independently: 128-bit
 * arithmetic and rng_u32 word by word. Returns 0 if a draw would be rejected
 * (odds below 2^-32; the caller then picks another case). */
static int test_perm_ref(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t stream)
{
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint32_t i = n; i-- > 1;) {
        uint64_t x = rng_u32(seed, stream, 2ull * i) |
                     (uint64_t)rng_u32(seed, stream, 2ull * i + 1) << 32;
        unsigned __int128 m = (unsigned __int128)x * (i + 1);
        if ((uint64_t)m < (uint64_t)(-(uint64_t)(i + 1)) % (i + 1))
            return 0;
        uint32_t j = (uint32_t)(m >> 64);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    return 1;
}

static void test_permutation_valid(void **state)
{
    (void)state;
    const uint32_t n = 1000;
    uint32_t *p = malloc(n * sizeof *p), *q = malloc(n * sizeof *q);
    unsigned char *seen = calloc(n, 1);
    assert_true(p && q && seen);

    rng_permutation(p, n, 1234, 5);
    for (uint32_t i = 0; i < n; i++) {
        assert_true(p[i] < n);
        assert_false(seen[p[i]]);
        seen[p[i]] = 1;
    }
    assert_int_equal(test_perm_ref(q, n, 1234, 5), 1);
    assert_memory_equal(p, q, n * sizeof *p);

    rng_permutation(q, n, 1234, 5);
    assert_memory_equal(p, q, n * sizeof *p); /* deterministic */
    rng_permutation(q, n, 1235, 5);
    assert_memory_not_equal(p, q, n * sizeof *p); /* another seed */
    rng_permutation(q, n, 1234, 6);
    assert_memory_not_equal(p, q, n * sizeof *p); /* another stream */

    uint32_t one = 99;
    rng_permutation(&one, 1, 1, 1);
    assert_int_equal(one, 0);
    rng_permutation(NULL, 0, 1, 1); /* nothing to do, nothing touched */
    free(p);
    free(q);
    free(seen);
}

/* Index of a permutation of 0..4 in 0..119 (Lehmer code). */
static unsigned test_perm_rank5(const uint32_t *p)
{
    unsigned r = 0;
    for (int i = 0; i < 5; i++) {
        unsigned smaller = 0;
        for (int j = i + 1; j < 5; j++)
            smaller += p[j] < p[i];
        r = r * (unsigned)(5 - i) + smaller;
    }
    return r;
}

static void test_permutation_uniform(void **state)
{
    (void)state;
    enum { N = 120000 };
    static unsigned pos0[5], rank[120];
    for (uint64_t s = 0; s < N; s++) {
        uint32_t p[5];
        rng_permutation(p, 5, 2024, s);
        for (int i = 0; i < 5; i++)
            if (p[i] == 0)
                pos0[i]++;
        rank[test_perm_rank5(p)]++;
    }
    double chi_pos = 0, chi_rank = 0;
    for (int i = 0; i < 5; i++)
        chi_pos += (pos0[i] - N / 5.0) * (pos0[i] - N / 5.0) / (N / 5.0);
    for (int i = 0; i < 120; i++)
        chi_rank += (rank[i] - N / 120.0) * (rank[i] - N / 120.0) / (N / 120.0);
    /* Critical values at p = 0.001: 18.47 for 4 degrees of freedom, 172.4
     * for 119. Inputs are fixed, so this never flickers. */
    if (chi_pos > 18.47)
        fail_msg("position of element 0 not uniform: chi2 = %.2f (4 dof)", chi_pos);
    if (chi_rank > 172.4)
        fail_msg("permutations of 5 not uniform: chi2 = %.2f (119 dof)", chi_rank);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_kat),
        cmocka_unit_test(test_u32_mapping),
        cmocka_unit_test(test_uniform_exact),
        cmocka_unit_test(test_fill_uniform),
        cmocka_unit_test(test_permutation_valid),
        cmocka_unit_test(test_permutation_uniform),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
