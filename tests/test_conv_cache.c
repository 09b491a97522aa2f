/* test_conv_cache.c: the cpu convolutions with the fixed-order products
 * (--cpu-gemm fixed), whose scratch memory lives from call to call
 * (cpu_conv.h) and whose im2col is made by the threads as they multiply.
 * Each call is held to the fixed order written out here from the
 * definition (acc = +0, then acc = fmaf(w, x, acc) over c, r, s in order,
 * x = +0 outside the image; the filter gradient over n, then h, w), bit for
 * bit: a second gate on the same input, the same buffer changed in one
 * element (anything kept from the last call would be wrong there), another
 * image size at the same address, and the filter gradient after the
 * forward; then the filter
 * gradient alone for shapes on both sides of its transposed form (K >= 16
 * and H*W > 2K), batches of 1 to 3, 3x3 and 1x1 kernels, 1 and 3 threads,
 * one with an im2col large enough to be made in parts; and the data gradient
 * of one pair and of several (cpu_conv.h: the forward convolution of the
 * flipped filters) on 1 to 3 threads, against its definition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu_conv.h"
#include "cpu_gemm.h"
#include "test_util.h"

static uint64_t rng = 0x2545f4914f6cdd1du;

static float cc_uniform(void)
{
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    return (float)(rng >> 40) * 0x1p-24f - 0.5f;
}

static void cc_fill(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = cc_uniform();
}

/* x[n][c][h + dr][w + ds], or +0 outside the image */
static float cc_x(const float *x, const struct cpu_conv_shape *sh, int n, int c, int h, int w)
{
    if (h < 0 || h >= sh->h || w < 0 || w >= sh->w)
        return 0.0f;
    return x[(((size_t)n * sh->c + c) * sh->h + h) * sh->w + w];
}

static void cc_forward_def(float *out, const float *x, const float *wt, const struct cpu_conv_shape *sh)
{
    for (int n = 0; n < sh->n; n++)
        for (int k = 0; k < sh->k; k++)
            for (int h = 0; h < sh->h; h++)
                for (int w = 0; w < sh->w; w++) {
                    float acc = 0.0f;
                    for (int c = 0; c < sh->c; c++)
                        for (int r = 0; r < sh->r; r++)
                            for (int s = 0; s < sh->s; s++)
                                acc = fmaf(wt[(((size_t)k * sh->c + c) * sh->r + r) * sh->s + s],
                                           cc_x(x, sh, n, c, h + r - sh->r / 2, w + s - sh->s / 2), acc);
                    out[(((size_t)n * sh->k + k) * sh->h + h) * sh->w + w] = acc;
                }
}

static void cc_filter_def(float *dw, const float *x, const float *dy, const struct cpu_conv_shape *sh)
{
    for (int k = 0; k < sh->k; k++)
        for (int c = 0; c < sh->c; c++)
            for (int r = 0; r < sh->r; r++)
                for (int s = 0; s < sh->s; s++) {
                    float acc = 0.0f;
                    for (int n = 0; n < sh->n; n++)
                        for (int h = 0; h < sh->h; h++)
                            for (int w = 0; w < sh->w; w++)
                                acc = fmaf(dy[(((size_t)n * sh->k + k) * sh->h + h) * sh->w + w],
                                           cc_x(x, sh, n, c, h + r - sh->r / 2, w + s - sh->s / 2), acc);
                    dw[(((size_t)k * sh->c + c) * sh->r + r) * sh->s + s] = acc;
                }
}

/* dx of the fixed products from m pairs (dy[q], wt[q]), written from
 * cpu_conv.h: each dx element one chain acc = fmaf(wt[q][k][c][r][s],
 * dy[q][n][k][h-r+R/2][w-s+S/2], acc) from +0 over q, k in order and the
 * kernel's taps from the last row and column to the first (the flipped
 * filter's order), a tap outside the image a +0 term like any other */
static void cc_data_def(float *dx, const float *const *dy, const float *const *wt, int m,
                        const struct cpu_conv_shape *sh)
{
    for (int n = 0; n < sh->n; n++)
        for (int c = 0; c < sh->c; c++)
            for (int h = 0; h < sh->h; h++)
                for (int w = 0; w < sh->w; w++) {
                    float acc = 0.0f;
                    for (int q = 0; q < m; q++)
                        for (int k = 0; k < sh->k; k++)
                            for (int r = sh->r - 1; r >= 0; r--)
                                for (int s = sh->s - 1; s >= 0; s--) {
                                    struct cpu_conv_shape one = *sh;
                                    one.c = sh->k;
                                    acc = fmaf(wt[q][(((size_t)k * sh->c + c) * sh->r + r) * sh->s + s],
                                               cc_x(dy[q], &one, n, k, h - r + sh->r / 2, w - s + sh->s / 2), acc);
                                }
                    dx[(((size_t)n * sh->c + c) * sh->h + h) * sh->w + w] = acc;
                }
}

static void cc_same_bits(const float *a, const float *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
            fail_msg("%s: element %zu: %a, the definition %a", what, i, (double)a[i], (double)b[i]);
}

/* The filter gradient of shape sh (the i-th of its test) with the fixed
 * products on `threads` threads, against its definition bit for bit. */
static void cc_filter(const struct cpu_conv_shape *sh, int threads, size_t i)
{
    struct cpu_gemm_mode fixed = {.fixed = 1, .threads = threads};
    struct cpu_conv_scratch sc = {.gemm = &fixed};
    size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w, ny = (size_t)sh->n * sh->k * sh->h * sh->w;
    size_t nw = (size_t)sh->k * sh->c * sh->r * sh->s;
    float *x = malloc(nx * sizeof *x), *dy = malloc(ny * sizeof *dy), *w = malloc(nw * sizeof *w);
    float *ref = malloc(nw * sizeof *ref);
    assert_true(x && dy && w && ref);
    cc_fill(dy, ny);
    cc_fill(x, nx);
    cpu_conv_bwd_filter(&sc, w, x, dy, sh);
    cc_filter_def(ref, x, dy, sh);
    char what[96];
    snprintf(what, sizeof what, "filter gradient, shape %zu, %d threads", i, threads);
    cc_same_bits(w, ref, nw, what);
    cpu_conv_scratch_free(&sc);
    free(x);
    free(dy);
    free(w);
    free(ref);
}

/* The data gradient of m pairs of shape sh (the i-th of its test) with the
 * fixed products on `threads` threads, against its definition bit for bit. */
static void cc_data(const struct cpu_conv_shape *sh, int threads, int m, size_t i)
{
    struct cpu_gemm_mode fixed = {.fixed = 1, .threads = threads};
    struct cpu_conv_scratch sc = {.gemm = &fixed};
    size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w, ny = (size_t)sh->n * sh->k * sh->h * sh->w;
    size_t nw = (size_t)sh->k * sh->c * sh->r * sh->s;
    float *dy[CPU_CONV_MAX_PAIRS], *w[CPU_CONV_MAX_PAIRS];
    float *dx = malloc(nx * sizeof *dx), *ref = malloc(nx * sizeof *ref);
    assert_true(dx && ref && m <= CPU_CONV_MAX_PAIRS);
    for (int q = 0; q < m; q++) {
        dy[q] = malloc(ny * sizeof *dy[q]);
        w[q] = malloc(nw * sizeof *w[q]);
        assert_true(dy[q] && w[q]);
        cc_fill(dy[q], ny);
        cc_fill(w[q], nw);
    }
    cpu_conv_bwd_data(&sc, dx, (const float *const *)dy, (const float *const *)w, m, sh);
    cc_data_def(ref, (const float *const *)dy, (const float *const *)w, m, sh);
    char what[96];
    snprintf(what, sizeof what, "data gradient of %d pairs, shape %zu, %d threads", m, i, threads);
    cc_same_bits(dx, ref, nx, what);
    cpu_conv_scratch_free(&sc);
    for (int q = 0; q < m; q++) {
        free(dy[q]);
        free(w[q]);
    }
    free(dx);
    free(ref);
}

static void test_reuse(void **state)
{
    (void)state;
    struct cpu_gemm_mode fixed = {.fixed = 1, .threads = 2};
    struct cpu_conv_scratch sc = {.gemm = &fixed};
    struct cpu_conv_shape sh = {.n = 2, .c = 3, .h = 9, .w = 7, .k = 4, .r = 3, .s = 3};
    size_t nx = 2 * 3 * 9 * 7, nw = 4 * 3 * 3 * 3, ny = 2 * 4 * 9 * 7;
    float *x = malloc(nx * sizeof *x), *w1 = malloc(nw * sizeof *w1), *w2 = malloc(nw * sizeof *w2);
    float *y = malloc(ny * sizeof *y), *ref = malloc(ny * sizeof *ref), *dy = malloc(ny * sizeof *dy);
    float *dw = malloc(nw * sizeof *dw), *dwref = malloc(nw * sizeof *dwref);
    assert_true(x && w1 && w2 && y && ref && dy && dw && dwref);
    cc_fill(x, nx);
    cc_fill(w1, nw);
    cc_fill(w2, nw);
    cc_fill(dy, ny);

    cpu_conv_forward(&sc, y, x, w1, &sh);
    cc_forward_def(ref, x, w1, &sh);
    cc_same_bits(y, ref, ny, "first gate");
    cpu_conv_forward(&sc, y, x, w2, &sh); /* the same input again */
    cc_forward_def(ref, x, w2, &sh);
    cc_same_bits(y, ref, ny, "second gate on the same input");
    cpu_conv_bwd_filter(&sc, dw, x, dy, &sh);
    cc_filter_def(dwref, x, dy, &sh);
    cc_same_bits(dw, dwref, nw, "filter gradient after the forward");

    x[nx / 2 + 3] = 0.25f; /* the same buffer, one element changed */
    cpu_conv_forward(&sc, y, x, w1, &sh);
    cc_forward_def(ref, x, w1, &sh);
    cc_same_bits(y, ref, ny, "the input changed in place");
    cpu_conv_bwd_filter(&sc, dw, x, dy, &sh);
    cc_filter_def(dwref, x, dy, &sh);
    cc_same_bits(dw, dwref, nw, "filter gradient of the changed input");

    struct cpu_conv_shape sh2 = sh; /* the same address read as another image */
    sh2.h = 7;
    sh2.w = 9;
    cpu_conv_forward(&sc, y, x, w1, &sh2);
    cc_forward_def(ref, x, w1, &sh2);
    cc_same_bits(y, ref, ny, "another image size at the same address");

    cpu_conv_scratch_free(&sc);
    free(x);
    free(w1);
    free(w2);
    free(y);
    free(ref);
    free(dy);
    free(dw);
    free(dwref);
}

static void test_filter_forms(void **state)
{
    (void)state;
    const struct cpu_conv_shape shapes[] = {
        {.n = 1, .c = 5, .h = 8, .w = 8, .k = 16, .r = 3, .s = 3},  /* transposed (64 > 32) */
        {.n = 3, .c = 4, .h = 10, .w = 9, .k = 17, .r = 3, .s = 3}, /* transposed, a masked column */
        {.n = 3, .c = 6, .h = 4, .w = 8, .k = 16, .r = 1, .s = 1},  /* transposed, 1x1 */
        {.n = 2, .c = 5, .h = 4, .w = 4, .k = 16, .r = 3, .s = 3},  /* not: 16 <= 32 */
        {.n = 3, .c = 3, .h = 8, .w = 8, .k = 15, .r = 3, .s = 3},  /* not: K < 16 */
        {.n = 2, .c = 8, .h = 32, .w = 32, .k = 16, .r = 3, .s = 3}, /* im2col in parts of channels */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int threads = 1; threads <= 3; threads += 2)
            cc_filter(&shapes[i], threads, i);
}

/* The data gradient, the forward convolution of the flipped filters over
 * the output gradients' col (made in parts of channels on the threads):
 * K = 1 (as PredNet's layer 0 gates), 5x5, 3x5 and 1x1 kernels, a col of
 * several parts, 1 to 3 threads; of one pair, and of 2 and 4 pairs
 * (PredNet's gates summed as one op). */
static void test_data_pairs(void **state)
{
    (void)state;
    const struct cpu_conv_shape shapes[] = {
        {.n = 2, .c = 13, .h = 32, .w = 32, .k = 3, .r = 3, .s = 3},
        {.n = 1, .c = 3, .h = 64, .w = 64, .k = 1, .r = 3, .s = 3},
        {.n = 3, .c = 7, .h = 5, .w = 9, .k = 17, .r = 5, .s = 5},
        {.n = 2, .c = 5, .h = 7, .w = 6, .k = 3, .r = 3, .s = 5},   /* R != S: the flip of each axis */
        {.n = 1, .c = 6, .h = 64, .w = 64, .k = 8, .r = 3, .s = 3}, /* a col of nine parts */
        {.n = 1, .c = 4, .h = 6, .w = 6, .k = 16, .r = 1, .s = 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int threads = 1; threads <= 3; threads++)
            for (int m = 1; m <= CPU_CONV_MAX_PAIRS; m *= 2)
                cc_data(&shapes[i], threads, m, i);
}

/* One output channel (K = 1) with values from a small set, so that
 * products are exact zeros of both signs and sums cancel exactly, against
 * the definition bit for bit (the padding's +0 terms included); small
 * shapes on one thread, the 64x64 ones in parts. */
static void test_data_one_channel(void **state)
{
    (void)state;
    static const float vals[] = {-0.0f, 0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f, -2.0f, 0x1p-140f, -0x1p-140f};
    const struct cpu_conv_shape shapes[] = {
        {.n = 2, .c = 5, .h = 7, .w = 9, .k = 1, .r = 3, .s = 3},
        {.n = 1, .c = 3, .h = 6, .w = 5, .k = 1, .r = 5, .s = 5},
        {.n = 2, .c = 8, .h = 64, .w = 64, .k = 1, .r = 3, .s = 3},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int threads = 1; threads <= 3; threads++) {
            const struct cpu_conv_shape *sh = &shapes[i];
            struct cpu_gemm_mode fixed = {.fixed = 1, .threads = threads};
            struct cpu_conv_scratch sc = {.gemm = &fixed};
            size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w, ny = (size_t)sh->n * sh->h * sh->w;
            size_t nw = (size_t)sh->c * sh->r * sh->s;
            float *dx = malloc(nx * sizeof *dx), *ref = malloc(nx * sizeof *ref), *dy = malloc(ny * sizeof *dy),
                  *w = malloc(nw * sizeof *w);
            assert_true(dx && ref && dy && w);
            for (size_t j = 0; j < ny; j++)
                dy[j] = vals[((uint32_t)(j + i) * 2654435761u >> 13) % (sizeof vals / sizeof *vals)];
            for (size_t j = 0; j < nw; j++)
                w[j] = vals[((uint32_t)j * 2246822519u >> 11) % (sizeof vals / sizeof *vals)];
            const float *dyp = dy, *wp = w;
            cpu_conv_bwd_data(&sc, dx, &dyp, &wp, 1, sh);
            cc_data_def(ref, &dyp, &wp, 1, sh);
            size_t zeros = 0;
            for (size_t j = 0; j < nx; j++)
                zeros += ref[j] == 0.0f;
            if (zeros == 0 || zeros == nx) /* the set makes zero sums, but not only those */
                fail_msg("shape %zu: %zu zero sums of %zu", i, zeros, nx);
            char what[96];
            snprintf(what, sizeof what, "one-channel data gradient, shape %zu, %d threads", i, threads);
            cc_same_bits(dx, ref, nx, what);
            cpu_conv_scratch_free(&sc);
            free(dx);
            free(ref);
            free(dy);
            free(w);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_reuse), cmocka_unit_test(test_filter_forms),
                                       cmocka_unit_test(test_data_pairs), cmocka_unit_test(test_data_one_channel)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
