/* test_idx.c: the IDX image reader reads valid plain and gzip files exactly
 * and rejects every kind of damaged file with a message naming the file;
 * pixels become the floats v / 255. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <zlib.h>

#include "data.h"
#include "hash.h"
#include "idx.h"
#include "test_util.h"
#include "util.h"


static void test_put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* A valid IDX image file of n images of rows x cols with patterned pixels
 * (malloc'd, *len set). */
static unsigned char *test_make_idx(uint32_t n, uint32_t rows, uint32_t cols, size_t *len)
{
    size_t payload = (size_t)n * rows * cols;
    unsigned char *b = malloc(16 + payload);
    assert_non_null(b);
    test_put_be32(b, 0x00000803);
    test_put_be32(b + 4, n);
    test_put_be32(b + 8, rows);
    test_put_be32(b + 12, cols);
    for (size_t i = 0; i < payload; i++)
        b[16 + i] = (unsigned char)(i * 131 + 7);
    *len = 16 + payload;
    return b;
}

static void test_write_gz(const char *path, const void *data, size_t n)
{
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    if (n > 0)
        assert_int_equal(gzwrite(f, data, (unsigned)n), (int)n);
    assert_int_equal(gzclose(f), Z_OK);
}

/* Reading path must fail with a message that names the file and contains
 * `fault`. */
static void test_expect_reject(const char *path, const char *fault)
{
    struct idx_images im;
    dt_error_set("%s", "");
    if (idx_read_images(path, &im) != -1)
        fail_msg("%s was accepted (expected: %s)", path, fault);
    const char *msg = dt_error();
    assert_true(strlen(msg) > 0);
    if (!strstr(msg, path) || !strstr(msg, fault))
        fail_msg("message \"%s\" should name %s and say \"%s\"", msg, path, fault);
    assert_null(im.pix);
}

static void test_check_read(const char *path, const unsigned char *file, size_t len,
                            uint32_t n, uint32_t rows, uint32_t cols)
{
    struct idx_images im;
    if (idx_read_images(path, &im) != 0)
        fail_msg("%s: %s", path, dt_error());
    assert_int_equal(im.n, n);
    assert_int_equal(im.rows, rows);
    assert_int_equal(im.cols, cols);
    assert_memory_equal(im.pix, file + 16, (size_t)n * rows * cols);
    assert_int_equal(im.hash, hash_bytes(file, len)); /* of the decompressed bytes */
    idx_free(&im);
    assert_null(im.pix);
}

static void test_read_plain_and_gzip(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = test_make_idx(7, 5, 3, &len);
    tu_write_file(tu_path("small-plain"), b, len);
    test_write_gz(tu_path("small.gz"), b, len);
    test_check_read(tu_path("small-plain"), b, len, 7, 5, 3);
    test_check_read(tu_path("small.gz"), b, len, 7, 5, 3);
    /* Detected by content: a gzip file without .gz, a plain one with it. */
    test_write_gz(tu_path("gzip-no-suffix"), b, len);
    tu_write_file(tu_path("plain.gz"), b, len);
    test_check_read(tu_path("gzip-no-suffix"), b, len, 7, 5, 3);
    test_check_read(tu_path("plain.gz"), b, len, 7, 5, 3);
    free(b);

    b = test_make_idx(1, 1, 1, &len);
    test_write_gz(tu_path("one.gz"), b, len);
    test_check_read(tu_path("one.gz"), b, len, 1, 1, 1);
    free(b);
}

static void test_reject_missing_and_empty(void **state)
{
    (void)state;
    test_expect_reject(tu_path("does-not-exist"), "cannot open");
    tu_write_file(tu_path("empty"), "", 0);
    test_expect_reject(tu_path("empty"), "empty");
    test_write_gz(tu_path("empty.gz"), "", 0);
    test_expect_reject(tu_path("empty.gz"), "empty");
    assert_int_equal(mkdir(tu_path("a-directory"), 0700), 0);
    test_expect_reject(tu_path("a-directory"), "read error");
}

static void test_reject_bad_header(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = test_make_idx(2, 3, 4, &len);

    b[0] = 0x12; /* magic not 0x0000.... */
    tu_write_file(tu_path("bad-magic"), b, len);
    test_expect_reject(tu_path("bad-magic"), "bad magic");
    b[0] = 0;

    b[2] = 0x0D; /* float elements */
    tu_write_file(tu_path("float-type"), b, len);
    test_expect_reject(tu_path("float-type"), "element type 0x0d");
    b[2] = 0x08;

    /* A label-style file: 2 dimensions. */
    unsigned char two[12 + 6];
    test_put_be32(two, 0x00000802);
    test_put_be32(two + 4, 2);
    test_put_be32(two + 8, 3);
    memset(two + 12, 1, 6);
    tu_write_file(tu_path("two-dims"), two, sizeof two);
    test_expect_reject(tu_path("two-dims"), "2 dimensions");

    tu_write_file(tu_path("short-header"), b, 10);
    test_expect_reject(tu_path("short-header"), "truncated header: 10 of 16");
    tu_write_file(tu_path("short-magic"), b, 3);
    test_expect_reject(tu_path("short-magic"), "truncated header: 3 of 16");
    free(b);
}

static void test_reject_bad_dimensions(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = test_make_idx(2, 3, 4, &len);

    test_put_be32(b + 8, 0);
    tu_write_file(tu_path("zero-rows"), b, len);
    test_expect_reject(tu_path("zero-rows"), "zero dimension");

    /* 2^32-1 cubed overflows 64 bits; the reader must not wrap around. */
    test_put_be32(b + 4, 0xffffffff);
    test_put_be32(b + 8, 0xffffffff);
    test_put_be32(b + 12, 0xffffffff);
    tu_write_file(tu_path("overflow"), b, len);
    test_expect_reject(tu_path("overflow"), "absurd dimensions");

    /* No overflow, still absurd: 60 GB of pixels. */
    test_put_be32(b + 4, 60000);
    test_put_be32(b + 8, 1000);
    test_put_be32(b + 12, 1000);
    tu_write_file(tu_path("huge"), b, len);
    test_expect_reject(tu_path("huge"), "absurd dimensions");

    /* Product wraps to a small number in 32 bits: 65536 * 65536 * 1. */
    test_put_be32(b + 4, 1);
    test_put_be32(b + 8, 65536);
    test_put_be32(b + 12, 65536);
    tu_write_file(tu_path("wrap32"), b, len);
    test_expect_reject(tu_path("wrap32"), "absurd dimensions");
    free(b);
}

static void test_reject_bad_payload(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = test_make_idx(10, 4, 4, &len);
    unsigned char *more = malloc(len + 5);
    assert_non_null(more);
    memcpy(more, b, len);
    memset(more + len, 0xAA, 5);

    tu_write_file(tu_path("short-payload"), b, len - 1);
    test_expect_reject(tu_path("short-payload"),
                       "truncated: header says 10 images of 4x4 (160 bytes) but the file holds 159");
    test_write_gz(tu_path("short-payload.gz"), b, 16 + 100);
    test_expect_reject(tu_path("short-payload.gz"), "the file holds 100");

    tu_write_file(tu_path("trailing"), more, len + 5);
    test_expect_reject(tu_path("trailing"), "5 bytes of trailing garbage");
    test_write_gz(tu_path("trailing.gz"), more, len + 5);
    test_expect_reject(tu_path("trailing.gz"), "5 bytes of trailing garbage");
    free(more);
    free(b);
}

static void test_reject_corrupt_gzip(void **state)
{
    (void)state;
    size_t len, gzlen;
    unsigned char *b = test_make_idx(50, 28, 28, &len);
    /* Incompressible-ish pixels so the deflate stream is long enough to hurt. */
    uint64_t s = 3;
    for (size_t i = 16; i < len; i++)
        b[i] = (unsigned char)tu_rand_u64(&s);
    test_write_gz(tu_path("good.gz"), b, len);
    test_check_read(tu_path("good.gz"), b, len, 50, 28, 28);
    unsigned char *gz = tu_read_file(tu_path("good.gz"), &gzlen);
    assert_true(gzlen > 1000);

    /* Damage in the middle of the deflate data. */
    unsigned char *bad = malloc(gzlen);
    assert_non_null(bad);
    memcpy(bad, gz, gzlen);
    for (size_t i = gzlen / 2; i < gzlen / 2 + 16; i++)
        bad[i] ^= 0x5A;
    tu_write_file(tu_path("corrupt.gz"), bad, gzlen);
    test_expect_reject(tu_path("corrupt.gz"), "corrupt gzip stream");

    /* Damage in the trailer's CRC only: the data decodes but does not check. */
    memcpy(bad, gz, gzlen);
    bad[gzlen - 8] ^= 1;
    tu_write_file(tu_path("bad-crc.gz"), bad, gzlen);
    test_expect_reject(tu_path("bad-crc.gz"), "corrupt gzip stream");

    /* The compressed file cut short, in the data and just before the trailer. */
    tu_write_file(tu_path("cut.gz"), gz, gzlen / 2);
    test_expect_reject(tu_path("cut.gz"), "truncated gzip stream");
    tu_write_file(tu_path("cut-trailer.gz"), gz, gzlen - 4);
    test_expect_reject(tu_path("cut-trailer.gz"), "truncated gzip stream");
    free(bad);
    free(gz);
    free(b);
}

static void test_find_images(void **state)
{
    (void)state;
    char path[4096];
    size_t len;
    unsigned char *b = test_make_idx(1, 2, 2, &len);
    const char *dir = tu_path("dataset");
    assert_int_equal(mkdir(dir, 0700), 0);

    /* An empty directory: a clean failure naming it and the names tried. */
    assert_int_equal(idx_find_images(dir, "train", path, sizeof path), -1);
    assert_non_null(strstr(dt_error(), dir));
    assert_non_null(strstr(dt_error(), "train-images-idx3-ubyte.gz"));

    char file[4096];
    snprintf(file, sizeof file, "%s/train-images-idx3-ubyte.gz", dir);
    test_write_gz(file, b, len);
    snprintf(file, sizeof file, "%s/t10k-images-idx3-ubyte", dir);
    tu_write_file(file, b, len);

    assert_int_equal(idx_find_images(dir, "train", path, sizeof path), 0);
    snprintf(file, sizeof file, "%s/train-images-idx3-ubyte.gz", dir);
    assert_string_equal(path, file);
    assert_int_equal(idx_find_images(dir, "t10k", path, sizeof path), 0);
    snprintf(file, sizeof file, "%s/t10k-images-idx3-ubyte", dir);
    assert_string_equal(path, file);

    /* The mirrors' dotted name. */
    const char *dir2 = tu_path("dataset2");
    assert_int_equal(mkdir(dir2, 0700), 0);
    snprintf(file, sizeof file, "%s/train-images.idx3-ubyte", dir2);
    tu_write_file(file, b, len);
    assert_int_equal(idx_find_images(dir2, "train", path, sizeof path), 0);
    assert_string_equal(path, file);

    assert_int_equal(idx_find_images(dir, "train", path, 8), -1); /* too small */
    assert_int_equal(idx_find_images(dir, "validation", path, sizeof path), -1);
    assert_int_equal(idx_find_images(tu_path("no-such-dir"), "train", path, sizeof path), -1);
    assert_non_null(strstr(dt_error(), "no-such-dir"));
    free(b);
}

static void test_real_fashion_mnist(void **state)
{
    (void)state;
    struct idx_images im;
    tu_real_digits(&im);
    assert_int_equal(im.n, 60000);
    assert_int_equal(im.rows, 28);
    assert_int_equal(im.cols, 28);
    idx_free(&im);
}

/* Pixels to float32: each value the correctly rounded v / 255. The
 * reference divides in double and rounds once more: 1/255's binary
 * expansion repeats every 8 bits, so no quotient v/255 (0 < v < 255) lies
 * near enough a float's rounding midpoint for the double rounding to
 * differ. Every value, at every alignment of the vector loop, and every
 * length of its scalar tail. */
static void test_pixels_to_float(void **state)
{
    (void)state;
    enum { N = 300 };
    uint8_t px[N];
    float out[N + 1];
    for (int i = 0; i < N; i++)
        px[i] = (uint8_t)(7 * i + 3); /* 7 is odd: all 256 values */
    for (int off = 0; off < 18; off++)
        for (int n = 0; off + n <= N; n++) {
            out[n] = -1.0f;
            data_pixels_to_float(px + off, out, (size_t)n);
            for (int j = 0; j < n; j++)
                if (out[j] != (float)((double)px[off + j] / 255.0))
                    fail_msg("offset %d, length %d, element %d (pixel %u): %.9g", off, n, j, px[off + j],
                             (double)out[j]);
            assert_true(out[n] == -1.0f); /* nothing past the end */
        }
    /* a batch: each row is one of the images, converted, and the batch a
     * permutation of them (35 pixels: one vector of 16 and a tail) */
    struct data d;
    memset(&d, 0, sizeof d);
    d.im.n = 3;
    d.im.rows = 5;
    d.im.cols = 7;
    d.im.pix = px;
    d.seed = 11;
    d.perm = calloc(3, sizeof *d.perm);
    d.perm_epoch = UINT64_MAX;
    float batch[3 * 35];
    data_batch(&d, 0, 3, batch);
    int seen = 0;
    for (int b = 0; b < 3; b++) {
        int which = -1;
        for (int k = 0; k < 3 && which < 0; k++) {
            int same = 1;
            for (int j = 0; j < 35; j++)
                same &= batch[35 * b + j] == (float)((double)px[35 * k + j] / 255.0);
            if (same)
                which = k;
        }
        assert_true(which >= 0);
        seen |= 1 << which;
    }
    assert_int_equal(seen, 7);
    free(d.perm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_plain_and_gzip),
        cmocka_unit_test(test_reject_missing_and_empty),
        cmocka_unit_test(test_reject_bad_header),
        cmocka_unit_test(test_reject_bad_dimensions),
        cmocka_unit_test(test_reject_bad_payload),
        cmocka_unit_test(test_reject_corrupt_gzip),
        cmocka_unit_test(test_find_images),
        cmocka_unit_test(test_real_fashion_mnist),
        cmocka_unit_test(test_pixels_to_float),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
