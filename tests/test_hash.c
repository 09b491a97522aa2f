/* test_hash.c: the tensor tree hash against an independent computation of its
 * definition (hash.h) with the system's shared libxxhash, across sizes that
 * straddle every XXH3 size class and chunk boundary, on every implementation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h> /* shared library, not the inlined copies under test */

#include "hash.h"
#include "test_util.h"
#include "util.h"

static const char *const test_impls[] = { "sse2", "avx2", "avx512" };
#define TEST_NIMPLS (sizeof test_impls / sizeof test_impls[0])

static const size_t test_sizes[] = {
    0, 1, 3, 4, 15, 16, 17, 63, 64, 65, 239, 240, 241, 1023, 1024,
    16383, 16384, 16385, 32768, 50001, 3 * 16384 + 4, (size_t)1 << 20,
};

/* Larger than one batch of leaves in the implementation (it streams the root
 * beyond 256 leaves = 4 MiB), so both root paths are covered. */
#define TEST_BIG (((size_t)9 << 20) + 12345)

static unsigned char *test_buf;
static size_t test_buflen;

/* The definition, written out the plain way: all leaves in one array, one
 * XXH3 call over it. */
static uint64_t test_tree_ref(const void *data, size_t n)
{
    const unsigned char *p = data;
    size_t m = (n + HASH_CHUNK_BYTES - 1) / HASH_CHUNK_BYTES;
    unsigned char *leaves = malloc(m ? 8 * m : 1);
    assert_non_null(leaves);
    for (size_t i = 0; i < m; i++) {
        size_t len = n - i * HASH_CHUNK_BYTES;
        if (len > HASH_CHUNK_BYTES)
            len = HASH_CHUNK_BYTES;
        uint64_t leaf = XXH3_64bits(p + i * HASH_CHUNK_BYTES, len);
        for (int k = 0; k < 8; k++)
            leaves[8 * i + k] = (unsigned char)(leaf >> (8 * k));
    }
    uint64_t d = XXH3_64bits(leaves, 8 * m);
    free(leaves);
    return d;
}

static int test_setup(void **state)
{
    (void)state;
    uint64_t s = 42;
    test_buflen = TEST_BIG;
    test_buf = malloc(test_buflen);
    if (!test_buf)
        return -1;
    for (size_t i = 0; i < test_buflen; i++)
        test_buf[i] = (unsigned char)tu_rand_u64(&s);
    return 0;
}

static int test_teardown(void **state)
{
    (void)state;
    free(test_buf);
    hash_set_impl("auto");
    return 0;
}

/* Random sizes, fixed by the seed, so a failure reproduces. */
static size_t test_random_size(uint64_t *s, size_t i)
{
    size_t max = i % 2 ? 4 * HASH_CHUNK_BYTES : (size_t)3 << 20;
    return (size_t)(tu_rand_u64(s) % (max + 1));
}

/* Check every size (and an unaligned start) under the current implementation. */
static void test_check_sizes(const char *impl)
{
    for (size_t i = 0; i < sizeof test_sizes / sizeof test_sizes[0]; i++) {
        size_t n = test_sizes[i];
        uint64_t want = test_tree_ref(test_buf, n);
        uint64_t got = hash_tensor(test_buf, n);
        if (got != want)
            fail_msg("%s: size %zu: got %016llx want %016llx", impl, n,
                     (unsigned long long)got, (unsigned long long)want);
        if (n + 3 <= test_buflen)
            assert_int_equal(hash_tensor(test_buf + 3, n), test_tree_ref(test_buf + 3, n));
    }
    uint64_t s = 7;
    for (size_t i = 0; i < 12; i++) {
        size_t n = test_random_size(&s, i);
        if (hash_tensor(test_buf, n) != test_tree_ref(test_buf, n))
            fail_msg("%s: random size %zu differs from the definition", impl, n);
    }
    if (hash_tensor(test_buf, TEST_BIG) != test_tree_ref(test_buf, TEST_BIG))
        fail_msg("%s: size %zu (streamed root) differs from the definition", impl, TEST_BIG);
}

static void test_definition_auto(void **state)
{
    (void)state;
    assert_int_equal(hash_set_impl("auto"), 0);
    test_check_sizes(hash_impl());
}

static void test_every_impl_agrees(void **state)
{
    (void)state;
    int ran = 0;
    for (size_t k = 0; k < TEST_NIMPLS; k++) {
        if (hash_set_impl(test_impls[k]) != 0) {
            /* The CPU lacks it: hash_set_impl must say so and not switch. */
            assert_true(strlen(dt_error()) > 0);
            print_message("skipping %s: %s\n", test_impls[k], dt_error());
            continue;
        }
        assert_string_equal(hash_impl(), test_impls[k]);
        test_check_sizes(test_impls[k]);
        ran++;
    }
    assert_true(ran >= 1); /* sse2 always runs on x86-64 */
    assert_int_equal(hash_set_impl("auto"), 0);
}

static void test_unknown_impl(void **state)
{
    (void)state;
    assert_int_equal(hash_set_impl("auto"), 0);
    const char *before = hash_impl();
    assert_int_equal(hash_set_impl("neon9000"), -1);
    assert_non_null(strstr(dt_error(), "neon9000"));
    assert_string_equal(hash_impl(), before);
}

static void test_bytes_is_xxh3(void **state)
{
    (void)state;
    for (size_t k = 0; k < TEST_NIMPLS; k++) {
        if (hash_set_impl(test_impls[k]) != 0)
            continue;
        for (size_t i = 0; i < sizeof test_sizes / sizeof test_sizes[0]; i++)
            assert_int_equal(hash_bytes(test_buf, test_sizes[i]),
                             XXH3_64bits(test_buf, test_sizes[i]));
    }
    assert_int_equal(hash_set_impl("auto"), 0);
}

/* Flip one bit at off in a copy of n bytes; the digest must change. */
static void test_flip_changes(size_t n, size_t off, int bit)
{
    unsigned char *c = malloc(n);
    assert_non_null(c);
    memcpy(c, test_buf, n);
    uint64_t before = hash_tensor(c, n);
    c[off] ^= (unsigned char)(1u << bit);
    uint64_t after = hash_tensor(c, n);
    free(c);
    if (before == after)
        fail_msg("flipping bit %d of byte %zu (of %zu) left the digest unchanged", bit, off, n);
}

static void test_bit_flips(void **state)
{
    (void)state;
    for (size_t k = 0; k < TEST_NIMPLS; k++) {
        if (hash_set_impl(test_impls[k]) != 0)
            continue;
        size_t n = 3 * HASH_CHUNK_BYTES + 4;
        test_flip_changes(n, 0, 0);
        test_flip_changes(n, n - 1, 7);
        test_flip_changes(n, HASH_CHUNK_BYTES - 1, 7); /* last byte of a leaf */
        test_flip_changes(n, HASH_CHUNK_BYTES, 0);     /* first byte of the next */
        test_flip_changes(n, 2 * HASH_CHUNK_BYTES, 3);
        test_flip_changes(1, 0, 4);
        test_flip_changes(TEST_BIG, TEST_BIG - 1, 1); /* in the streamed part */
    }
    assert_int_equal(hash_set_impl("auto"), 0);
}

static void test_signed_zero(void **state)
{
    (void)state;
    float pos[64], neg[64];
    memset(pos, 0, sizeof pos);
    memcpy(neg, pos, sizeof neg);
    neg[17] = -0.0f; /* equal as a float, different as bytes: must differ */
    assert_true(pos[17] == neg[17]);
    assert_int_not_equal(hash_tensor(pos, sizeof pos), hash_tensor(neg, sizeof neg));
}

static void test_empty_is_xxh3_of_nothing(void **state)
{
    (void)state;
    assert_int_equal(hash_tensor(NULL, 0), XXH3_64bits("", 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_definition_auto),
        cmocka_unit_test(test_every_impl_agrees),
        cmocka_unit_test(test_unknown_impl),
        cmocka_unit_test(test_bytes_is_xxh3),
        cmocka_unit_test(test_bit_flips),
        cmocka_unit_test(test_signed_zero),
        cmocka_unit_test(test_empty_is_xxh3_of_nothing),
    };
    return cmocka_run_group_tests(tests, test_setup, test_teardown);
}
