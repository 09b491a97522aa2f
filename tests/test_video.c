/* test_video.c: the Moving-MNIST generator against an independent model of its
 * documented draw order, and the NPY and PGM-directory readers on valid and
 * damaged files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "idx.h"
#include "rng.h"
#include "test_util.h"
#include "util.h"
#include "video.h"

#define TEST_D 28u

/* n synthetic 28x28 digits: image k is dark except one pixel of value
 * 40 (k + 1) at row 2 + 3k, column 25 - 4k, so a digit can be followed. */
static struct idx_images test_point_digits(uint32_t n)
{
    struct idx_images im = {.n = n, .rows = TEST_D, .cols = TEST_D};
    im.pix = calloc((size_t)n * TEST_D * TEST_D, 1);
    assert_non_null(im.pix);
    for (uint32_t k = 0; k < n; k++)
        im.pix[(size_t)k * TEST_D * TEST_D + (2 + 3 * k) * TEST_D + 25 - 4 * k] =
            (uint8_t)(40 * (k + 1));
    return im;
}

/* n digits of random pixels. */
static struct idx_images test_noise_digits(uint32_t n, uint64_t state)
{
    struct idx_images im = {.n = n, .rows = TEST_D, .cols = TEST_D};
    im.pix = malloc((size_t)n * TEST_D * TEST_D);
    assert_non_null(im.pix);
    for (size_t i = 0; i < (size_t)n * TEST_D * TEST_D; i++)
        im.pix[i] = (uint8_t)tu_rand_u64(&state);
    return im;
}

/* The trajectory of one digit, written from the header's description. */
struct test_track {
    uint32_t image;
    double x, y, vx, vy;
    int bounced;
};

static struct test_track test_track_init(uint32_t n, uint64_t seed, uint64_t seq, uint32_t d,
                                         double rx, double ry)
{
    uint64_t s = ((uint64_t)1 << 63) + seq, w = 4 * (uint64_t)d;
    struct test_track t = {0};
    uint64_t word = rng_u32(seed, s, w);
    t.image = (uint32_t)((word * n) >> 32);
    t.x = (double)((rng_u32(seed, s, w + 1) >> 8) * 0x1p-24) * rx;
    t.y = (double)((rng_u32(seed, s, w + 2) >> 8) * 0x1p-24) * ry;
    double theta = (double)((rng_u32(seed, s, w + 3) >> 8) * 0x1p-24) * 2 * M_PI;
    t.vx = 0.1 * rx * cos(theta);
    t.vy = 0.1 * ry * sin(theta);
    return t;
}

static void test_track_axis(double *p, double *v, double r, int *bounced)
{
    double q = *p + *v;
    if (q < 0 || q > r) {
        q = q < 0 ? -q : 2 * r - q;
        *v = -*v;
        (*bounced)++;
    }
    /* Unfolded, the motion has constant speed 0.1 r per frame. */
    *p = q;
}

/* The expected (frames, size, size) sequence; *bounces counts reflections. */
static uint8_t *test_reference(const struct idx_images *im, uint64_t seed, uint64_t seq,
                               uint32_t frames, uint32_t size, uint32_t ndigits, int *bounces)
{
    uint8_t *out = calloc((size_t)frames * size * size, 1);
    assert_non_null(out);
    double r = size - TEST_D;
    *bounces = 0;
    for (uint32_t d = 0; d < ndigits; d++) {
        struct test_track t = test_track_init(im->n, seed, seq, d, r, r);
        for (uint32_t f = 0; f < frames; f++) {
            if (f > 0) {
                double ox = t.x, oy = t.y;
                int before = t.bounced;
                test_track_axis(&t.x, &t.vx, r, &t.bounced);
                test_track_axis(&t.y, &t.vy, r, &t.bounced);
                if (t.bounced == before) /* a straight step is 0.1 r long */
                    assert_true(fabs(hypot(t.x - ox, t.y - oy) - 0.1 * r) < 1e-9 * (r + 1));
            }
            long c0 = lround(floor(t.x + 0.5)), r0 = lround(floor(t.y + 0.5));
            assert_true(c0 >= 0 && r0 >= 0 && c0 <= (long)r && r0 <= (long)r);
            for (uint32_t i = 0; i < TEST_D; i++)
                for (uint32_t j = 0; j < TEST_D; j++) {
                    uint8_t p = im->pix[((size_t)t.image * TEST_D + i) * TEST_D + j];
                    uint8_t *q = &out[((size_t)f * size + r0 + i) * size + c0 + j];
                    *q = p > *q ? p : *q;
                }
        }
        *bounces += t.bounced;
    }
    return out;
}

static void test_mm_rejects_bad_arguments(void **state)
{
    (void)state;
    struct idx_images im = test_point_digits(2), none = {0};
    uint8_t *out = malloc(64 * 64 * 4);
    assert_non_null(out);
    struct { const struct idx_images *im; uint64_t seq; uint32_t frames, size, nd; const char *fault; }
    bad[] = {
        {&none, 0, 4, 64, 2, "no digit images"},
        {&im, 0, 0, 64, 2, "frame count is 0"},
        {&im, 0, 4, 64, 0, "digit count is 0"},
        {&im, 0, 4, 27, 2, "canvas 27 is smaller"},
        {&im, (uint64_t)1 << 63, 4, 64, 2, "2^63"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        dt_error_set("%s", "");
        assert_int_equal(video_moving_mnist(bad[k].im, 1, bad[k].seq, bad[k].frames,
                                            bad[k].size, bad[k].nd, out), -1);
        if (!strstr(dt_error(), bad[k].fault))
            fail_msg("message \"%s\" should say \"%s\"", dt_error(), bad[k].fault);
    }
    /* The smallest canvas: the digit cannot move. */
    assert_int_equal(video_moving_mnist(&im, 1, 0, 4, 28, 1, out), 0);
    for (uint32_t f = 1; f < 4; f++)
        assert_memory_equal(out, out + f * 28 * 28, 28 * 28);
    free(out);
    free(im.pix);
}

static void test_mm_pure_function(void **state)
{
    (void)state;
    struct idx_images im = test_noise_digits(10, 7);
    const uint32_t T = 20, S = 64;
    size_t len = (size_t)T * S * S;
    uint8_t *a = malloc(len), *b = malloc(len);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(video_moving_mnist(&im, 42, 3, T, S, 2, a), 0);
    memset(b, 0xEE, len);
    assert_int_equal(video_moving_mnist(&im, 42, 3, T, S, 2, b), 0);
    assert_memory_equal(a, b, len);
    assert_int_equal(video_moving_mnist(&im, 43, 3, T, S, 2, b), 0);
    assert_memory_not_equal(a, b, len);
    assert_int_equal(video_moving_mnist(&im, 42, 4, T, S, 2, b), 0);
    assert_memory_not_equal(a, b, len);
    /* A shorter sequence is a prefix of the longer one. */
    assert_int_equal(video_moving_mnist(&im, 42, 3, 5, S, 2, b), 0);
    assert_memory_equal(a, b, (size_t)5 * S * S);
    free(a);
    free(b);
    free(im.pix);
}

/* Whole output against the independent model: positions, bounces, step
 * length, image choice and the per-pixel maximum. */
static void test_mm_matches_model(void **state)
{
    (void)state;
    struct idx_images pts = test_point_digits(6), noise = test_noise_digits(9, 99);
    const uint32_t T = 40;
    int total_bounces = 0;
    for (uint64_t seq = 0; seq < 12; seq++) {
        const struct idx_images *im = seq % 2 ? &noise : &pts;
        uint32_t S = seq % 3 == 0 ? 64 : 40 + (uint32_t)seq, nd = 1 + (uint32_t)(seq % 3);
        uint8_t *got = malloc((size_t)T * S * S);
        assert_non_null(got);
        assert_int_equal(video_moving_mnist(im, 2024, seq, T, S, nd, got), 0);
        int bounces;
        uint8_t *want = test_reference(im, 2024, seq, T, S, nd, &bounces);
        total_bounces += bounces;
        for (size_t i = 0; i < (size_t)T * S * S; i++)
            if (got[i] != want[i])
                fail_msg("sequence %llu: frame %zu pixel (%zu, %zu) is %u, expected %u",
                         (unsigned long long)seq, i / ((size_t)S * S), i / S % S, i % S,
                         got[i], want[i]);
        if (im == &pts) { /* each frame holds exactly the digits' bright pixels */
            for (uint32_t f = 0; f < T; f++) {
                uint32_t lit = 0;
                for (size_t i = 0; i < (size_t)S * S; i++)
                    lit += got[(size_t)f * S * S + i] != 0;
                assert_true(lit >= 1 && lit <= nd);
            }
        }
        free(got);
        free(want);
    }
    assert_true(total_bounces > 10); /* the reflections were exercised */
    free(pts.pix);
    free(noise.pix);
}

static void test_mm_real_digits(void **state)
{
    (void)state;
    struct idx_images im;
    tu_real_digits(&im);
    uint8_t *out = malloc(20 * 64 * 64);
    assert_non_null(out);
    assert_int_equal(video_moving_mnist(&im, 1, 0, 20, 64, 2, out), 0);
    int bounces;
    uint8_t *want = test_reference(&im, 1, 0, 20, 64, 2, &bounces);
    assert_memory_equal(out, want, 20 * 64 * 64);
    for (uint32_t f = 0; f < 20; f++) {
        uint32_t lit = 0;
        for (size_t i = 0; i < 64 * 64; i++)
            lit += out[f * 64 * 64 + i] != 0;
        assert_true(lit > 50);
    }
    free(want);
    free(out);
    idx_free(&im);
}

/* ---- NPY ---------------------------------------------------------------- */

/* An NPY file of format major.0 with header dict `dict` (padded as numpy
 * pads) followed by n payload bytes. */
static void test_write_npy(const char *path, unsigned major, const char *dict,
                           const uint8_t *payload, size_t n)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t hlen = dl + 1;
    while ((pre + hlen) % 64)
        hlen++;
    unsigned char *b = malloc(pre + hlen + n);
    assert_non_null(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    b[8] = (unsigned char)hlen;
    b[9] = (unsigned char)(hlen >> 8);
    if (major != 1)
        b[10] = b[11] = 0;
    memcpy(b + pre, dict, dl);
    memset(b + pre + dl, ' ', hlen - dl - 1);
    b[pre + hlen - 1] = '\n';
    if (n)
        memcpy(b + pre + hlen, payload, n);
    tu_write_file(path, b, pre + hlen + n);
    free(b);
}

static uint8_t *test_pattern(size_t n)
{
    uint8_t *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 37 + i / 251);
    return p;
}

static void test_npy_reject(const char *path, enum video_layout layout, const char *fault)
{
    struct video v;
    dt_error_set("%s", "");
    if (video_read_npy(path, layout, &v) != -1)
        fail_msg("%s was accepted (expected: %s)", path, fault);
    const char *msg = dt_error();
    if (!strstr(msg, path) || !strstr(msg, fault))
        fail_msg("message \"%s\" should name %s and say \"%s\"", msg, path, fault);
    assert_null(v.pix);
}

static void test_npy_reads_layouts(void **state)
{
    (void)state;
    uint8_t *p = test_pattern(2 * 3 * 4 * 5 * 3);
    struct video v;

    /* (N, T, H, W), version 1.0, numpy's own spelling. */
    const char *nthw = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5), }";
    test_write_npy(tu_path("nthw.npy"), 1, nthw, p, 120);
    if (video_read_npy(tu_path("nthw.npy"), VIDEO_LAYOUT_NTHW, &v) != 0)
        fail_msg("%s", dt_error());
    assert_int_equal(v.n, 2);
    assert_int_equal(v.t, 3);
    assert_int_equal(v.h, 4);
    assert_int_equal(v.w, 5);
    assert_int_equal(v.c, 1);
    assert_memory_equal(v.pix, p, 120);
    video_free(&v);
    assert_null(v.pix);

    /* (T, N, H, W) as in mnist_test_seq.npy, version 2.0, keys reordered. */
    const char *tnhw = "{ 'shape' : (3,2,4,5) , \"fortran_order\":False,'descr':'<u1' }";
    test_write_npy(tu_path("tnhw.npy"), 2, tnhw, p, 120);
    if (video_read_npy(tu_path("tnhw.npy"), VIDEO_LAYOUT_TNHW, &v) != 0)
        fail_msg("%s", dt_error());
    assert_int_equal(v.n, 2);
    assert_int_equal(v.t, 3);
    assert_int_equal(v.h, 4);
    assert_int_equal(v.w, 5);
    for (uint32_t n = 0; n < 2; n++)
        for (uint32_t t = 0; t < 3; t++)
            assert_memory_equal(v.pix + (n * 3 + t) * 20, p + (t * 2 + n) * 20, 20);
    video_free(&v);

    /* Rank 5 is (N, T, H, W, C) whatever the layout; version 3.0. */
    const char *c5 = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5, 3)}";
    test_write_npy(tu_path("nthwc.npy"), 3, c5, p, 360);
    if (video_read_npy(tu_path("nthwc.npy"), VIDEO_LAYOUT_TNHW, &v) != 0)
        fail_msg("%s", dt_error());
    assert_int_equal(v.n, 2);
    assert_int_equal(v.t, 3);
    assert_int_equal(v.c, 3);
    assert_memory_equal(v.pix, p, 360);
    video_free(&v);

    /* One of everything. */
    const char *one = "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 1, 1), }";
    test_write_npy(tu_path("one.npy"), 1, one, p, 1);
    assert_int_equal(video_read_npy(tu_path("one.npy"), VIDEO_LAYOUT_TNHW, &v), 0);
    assert_int_equal(v.pix[0], p[0]);
    video_free(&v);
    free(p);
}

static void test_npy_rejects(void **state)
{
    (void)state;
    uint8_t *p = test_pattern(200);
    const char *ok = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5), }";
    const enum video_layout L = VIDEO_LAYOUT_NTHW;

    test_npy_reject(tu_path("missing.npy"), L, "cannot open");
    tu_write_file(tu_path("empty.npy"), "", 0);
    test_npy_reject(tu_path("empty.npy"), L, "bad magic");
    test_write_npy(tu_path("magic.npy"), 1, ok, p, 120);
    {
        size_t n;
        unsigned char *b = tu_read_file(tu_path("magic.npy"), &n);
        b[1] = 'n';
        tu_write_file(tu_path("magic.npy"), b, n);
        b[1] = 'N';
        b[6] = 4;
        tu_write_file(tu_path("version4.npy"), b, n);
        b[6] = 1;
        b[7] = 1;
        tu_write_file(tu_path("version11.npy"), b, n);
        b[7] = 0;
        b[8] = 0;
        b[9] = 0;
        tu_write_file(tu_path("hlen0.npy"), b, n);
        b[8] = 0xff;
        b[9] = 0xff;
        tu_write_file(tu_path("hlen-big.npy"), b, n);
        tu_write_file(tu_path("short-header.npy"), b, 30);
        tu_write_file(tu_path("tiny.npy"), b, 7);
        free(b);
    }
    test_npy_reject(tu_path("magic.npy"), L, "bad magic");
    test_npy_reject(tu_path("version4.npy"), L, "version 4.0");
    test_npy_reject(tu_path("version11.npy"), L, "version 1.1");
    test_npy_reject(tu_path("hlen0.npy"), L, "bad header length");
    test_npy_reject(tu_path("hlen-big.npy"), L, "truncated header");
    test_npy_reject(tu_path("short-header.npy"), L, "truncated header");
    test_npy_reject(tu_path("tiny.npy"), L, "truncated header");

    struct { const char *name, *dict; size_t n; const char *fault; } bad[] = {
        {"f4.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4, 5), }", 120,
         "dtype '<f4'"},
        {"u2.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3, 4, 5), }", 120,
         "dtype '<u2'"},
        {"fortran.npy", "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3, 4, 5), }", 120,
         "fortran_order True"},
        {"extra.npy", ok, 121, "payload is 121 bytes but the shape needs 120"},
        {"truncated.npy", ok, 119, "payload is 119 bytes but the shape needs 120"},
        {"overflow.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (4294967295, "
         "4294967295, 4294967295, 4294967295), }", 120, "shape product overflows"},
        {"bigentry.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (99999999999, "
         "1, 1, 1), }", 120, "shape entry too large"},
        {"digits.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': "
         "(999999999999999999999, 1, 1, 1), }", 120, "shape entry overflows"},
        {"zero.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 3, 4, 5), }", 0,
         "zero shape entry"},
        {"rank3.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (6, 4, 5), }", 120,
         "rank 3"},
        {"rank6.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (1,1,1,1,1,1), }", 1,
         "more than 5"},
        {"noshape.npy", "{'descr': '|u1', 'fortran_order': False, }", 120,
         "missing key 'shape'"},
        {"nodescr.npy", "{'fortran_order': False, 'shape': (2, 3, 4, 5), }", 120,
         "missing key 'descr'"},
        {"noorder.npy", "{'descr': '|u1', 'shape': (2, 3, 4, 5)}", 120,
         "missing key 'fortran_order'"},
        {"unknown.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5), "
         "'x': 1}", 120, "unknown key"},
        {"dup.npy", "{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': "
         "(2, 3, 4, 5)}", 120, "duplicate key 'descr'"},
        {"notdict.npy", "[1, 2]", 120, "not a dict"},
        {"open.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5)", 120,
         "not closed"},
        {"badshape.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (2, -3, 4, 5)}",
         120, "malformed 'shape'"},
        {"badbool.npy", "{'descr': '|u1', 'fortran_order': 0, 'shape': (2, 3, 4, 5)}", 120,
         "malformed 'fortran_order'"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        test_write_npy(tu_path(bad[k].name), 1 + (unsigned)(k % 2), bad[k].dict, p, bad[k].n);
        test_npy_reject(tu_path(bad[k].name), L, bad[k].fault);
    }
    free(p);
}

/* ---- PGM directories ---------------------------------------------------- */

static void test_pgm_write(const char *path, const char *header, const uint8_t *pix, size_t n)
{
    size_t hl = strlen(header);
    unsigned char *b = malloc(hl + n + 1);
    assert_non_null(b);
    memcpy(b, header, hl);
    if (n)
        memcpy(b + hl, pix, n);
    tu_write_file(path, b, hl + n);
    free(b);
}

static const char *test_mkdir(const char *name)
{
    const char *d = tu_path(name);
    assert_int_equal(mkdir(d, 0700), 0);
    return d;
}

static const char *test_in(const char *dir, const char *name)
{
    static char buf[4][2048];
    static unsigned k;
    char *p = buf[k++ % 4];
    snprintf(p, 2048, "%s/%s", dir, name);
    return p;
}

static void test_pgm_reject(const char *dir, const char *names, const char *fault)
{
    struct video v;
    dt_error_set("%s", "");
    if (video_read_pgm_dir(dir, &v) != -1)
        fail_msg("%s was accepted (expected: %s)", dir, fault);
    const char *msg = dt_error();
    if (!strstr(msg, names) || !strstr(msg, fault))
        fail_msg("message \"%s\" should name %s and say \"%s\"", msg, names, fault);
    assert_null(v.pix);
}

static void test_pgm_reads_frames(void **state)
{
    (void)state;
    const char *d = test_mkdir("frames");
    uint8_t *p = test_pattern(3 * 12);
    /* Written out of order; read in lexical order of the names. */
    test_pgm_write(test_in(d, "frame-002.pgm"), "P5\n4 3\n255\n", p + 24, 12);
    test_pgm_write(test_in(d, "frame-000.pgm"), "P5 4 3 255 ", p, 12);
    test_pgm_write(test_in(d, "frame-001.pgm"),
                   "P5\n# made by hand\n4 # width\n  3\n#maxval next\n255\r", p + 12, 12);
    tu_write_file(test_in(d, "README.txt"), "not a frame", 11);
    struct video v;
    if (video_read_pgm_dir(d, &v) != 0)
        fail_msg("%s", dt_error());
    assert_int_equal(v.n, 1);
    assert_int_equal(v.t, 3);
    assert_int_equal(v.h, 3);
    assert_int_equal(v.w, 4);
    assert_int_equal(v.c, 1);
    assert_memory_equal(v.pix, p, 36);
    video_free(&v);
    assert_null(v.pix);

    /* maxval 15 and 7: scaled to 0..255 with rounding. */
    const char *s = test_mkdir("scaled");
    uint8_t q15[16], q7[16];
    for (int i = 0; i < 16; i++) {
        q15[i] = (uint8_t)i;
        q7[i] = (uint8_t)(i % 8);
    }
    test_pgm_write(test_in(s, "a.pgm"), "P5\n16 1\n15\n", q15, 16);
    test_pgm_write(test_in(s, "b.pgm"), "P5\n16 1\n7\n", q7, 16);
    if (video_read_pgm_dir(s, &v) != 0)
        fail_msg("%s", dt_error());
    assert_int_equal(v.t, 2);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(v.pix[i], i * 17);
        assert_int_equal(v.pix[16 + i], lround((i % 8) * 255.0 / 7));
    }
    video_free(&v);
    free(p);
}

static void test_pgm_rejects(void **state)
{
    (void)state;
    uint8_t px[64];
    memset(px, 9, sizeof px);
    test_pgm_reject(tu_path("no-such-dir"), "no-such-dir", "cannot open directory");
    const char *d = test_mkdir("empty");
    test_pgm_reject(d, d, "empty directory");
    d = test_mkdir("no-pgm");
    tu_write_file(test_in(d, "a.png"), "x", 1);
    tu_write_file(test_in(d, "pgm"), "x", 1);
    test_pgm_reject(d, d, "no .pgm files among 2 entries");

    struct { const char *name, *header; size_t n; const char *fault; } bad[] = {
        {"p2", "P2\n4 4\n255\n", 16, "bad magic"},
        {"p6", "P6\n4 4\n255\n", 48, "bad magic"},
        {"short", "P5\n4 4\n255\n", 15, "truncated pixel data: 15 bytes for 4x4"},
        {"none", "P5\n4 4\n255", 0, "truncated pixel data: 0 of 16"},
        {"long", "P5\n4 4\n255\n", 17, "extra bytes"},
        {"letters", "P5\n4 x\n255\n", 16, "bad number in the header (height)"},
        {"zerow", "P5\n0 4\n255\n", 0, "bad number in the header (width)"},
        {"negative", "P5\n-4 4\n255\n", 16, "bad number in the header (width)"},
        {"huge", "P5\n99999999999 4\n255\n", 16, "bad number in the header (width)"},
        {"maxval0", "P5\n4 4\n0\n", 16, "bad number in the header (maxval)"},
        {"sixteen", "P5\n4 4\n65535\n", 32, "16-bit"},
        {"glued", "P5\n4 4x\n255\n", 16, "bad number in the header (height)"},
        {"bigpixel", "P5\n4 4\n7\n", 16, "pixel value 9 exceeds maxval 7"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        d = test_mkdir(bad[k].name);
        test_pgm_write(test_in(d, "f0.pgm"), "P5\n4 4\n255\n", px, 16);
        test_pgm_write(test_in(d, "f1.pgm"), bad[k].header, px, bad[k].n);
        test_pgm_reject(d, test_in(d, "f1.pgm"), bad[k].fault);
    }

    d = test_mkdir("sizes");
    test_pgm_write(test_in(d, "f0.pgm"), "P5\n4 4\n255\n", px, 16);
    test_pgm_write(test_in(d, "f1.pgm"), "P5\n8 2\n255\n", px, 16);
    test_pgm_reject(d, test_in(d, "f1.pgm"), "frame is 8x2 but f0.pgm is 4x4");

    d = test_mkdir("subdir");
    assert_int_equal(mkdir(test_in(d, "x.pgm"), 0700), 0);
    test_pgm_reject(d, test_in(d, "x.pgm"), "not a regular file");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mm_rejects_bad_arguments),
        cmocka_unit_test(test_mm_pure_function),
        cmocka_unit_test(test_mm_matches_model),
        cmocka_unit_test(test_mm_real_digits),
        cmocka_unit_test(test_npy_reads_layouts),
        cmocka_unit_test(test_npy_rejects),
        cmocka_unit_test(test_pgm_reads_frames),
        cmocka_unit_test(test_pgm_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
