/* test_replay.c: replay's classification of an op's output against the
 * oracle (src/replay.h): the elementwise rule, and the normwise floor for
 * ops computed through a transform, on a convolution computed here by a
 * float32 FFT with an exact result and bounds derived by hand. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "replay.h"

#define N 256 /* the FFT's length */
#define TAPS 3

static const double U = 0x1p-24;

/* In-place radix-2 FFT of (re, im), float32 throughout (sign -1: forward). */
static void fft32(float *re, float *im, int n, int sign)
{
    for (int i = 1, j = 0; i < n; i++) {
        int bit = n >> 1;
        for (; j & bit; bit >>= 1)
            j ^= bit;
        j ^= bit;
        if (i < j) {
            float t = re[i];
            re[i] = re[j];
            re[j] = t;
            t = im[i];
            im[i] = im[j];
            im[j] = t;
        }
    }
    for (int len = 2; len <= n; len <<= 1) {
        for (int k = 0; k < len / 2; k++) {
            double ang = sign * 2 * M_PI * k / len;
            float wr = (float)cos(ang), wi = (float)sin(ang);
            for (int i = k; i < n; i += len) {
                int j = i + len / 2;
                float xr = re[j] * wr - im[j] * wi, xi = re[j] * wi + im[j] * wr;
                re[j] = re[i] - xr;
                im[j] = im[i] - xi;
                re[i] += xr;
                im[i] += xi;
            }
        }
    }
}

/* y = the circular correlation of x with the TAPS-tap filter w, by FFT in
 * float32; exact = the same by direct sums in double (three products of
 * floats, exact in double, summed: within half an ulp of float32 after
 * rounding but for ties), bound = the direct sum's elementwise bound
 * gamma_TAPS sum |x w|. */
static void conv_case(const float *x, const float *w, float *y, float *exact, double *bound)
{
    static float xr[N], xi[N], wr[N], wi[N];
    for (int i = 0; i < N; i++) {
        xr[i] = x[i];
        xi[i] = 0;
        wr[i] = i < TAPS ? w[i] : 0;
        wi[i] = 0;
    }
    fft32(xr, xi, N, -1);
    fft32(wr, wi, N, -1);
    for (int i = 0; i < N; i++) { /* X conj(W): correlation */
        float r = xr[i] * wr[i] + xi[i] * wi[i], m = xi[i] * wr[i] - xr[i] * wi[i];
        xr[i] = r;
        xi[i] = m;
    }
    fft32(xr, xi, N, 1);
    double g = TAPS * U / (1 - TAPS * U);
    for (int i = 0; i < N; i++) {
        y[i] = xr[i] / N;
        double s = 0, a = 0;
        for (int t = 0; t < TAPS; t++) {
            double p = (double)x[(i + t) % N] * w[t];
            s += p;
            a += fabs(p);
        }
        exact[i] = (float)s;
        bound[i] = g * a;
    }
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float unif(void) /* in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 40) / (double)(1ull << 23) - 1.0);
}

/* x random but zero on [100, 140): the outputs at 100 .. 137 are exactly 0
 * and their elementwise bound is 0, while the FFT spreads rounding from
 * everywhere onto them. */
static void make_case(float *x, float *w)
{
    for (int i = 0; i < N; i++)
        x[i] = (i >= 100 && i < 140) ? 0 : unif();
    for (int t = 0; t < TAPS; t++)
        w[t] = unif();
}

static void test_normwise_floor_value(void **state)
{
    (void)state;
    const float a[2] = {3, 4};                   /* ||a|| = 5 */
    const float b[8] = {0, 0, -2, 0, 0, 0, 0, 0}; /* ||b|| = 2, N = 8: ceil(log2 8) = 3 */
    assert_true(replay_normwise_floor(a, 2, b, 8) == 3 * 5 * 2 * U);
    const float c[5] = {1, 1, 1, 1, 0};          /* ||c|| = 2, N = 5: ceil(log2 5) = 3 */
    assert_true(replay_normwise_floor(c, 5, a, 2) == 3 * 2 * 5 * U);
    /* two pairs (a, b) and (c, a) stacked: ||(a, c)|| = sqrt(25 + 4),
     * ||(b, a)|| = sqrt(4 + 25) = the same, N = max(2 + 5, 8 + 2) = 10:
     * ceil(log2 10) = 4; so 4 u 29 */
    const float *in[4] = {a, b, c, a};
    const size_t count[4] = {2, 8, 5, 2};
    double two = replay_normwise_floor_pairs(in, count, 2);
    assert_true(fabs(two - 4 * 29 * U) <= 1e-15 * two);
    assert_true(replay_normwise_floor_pairs(in, count, 1) == replay_normwise_floor(a, 2, b, 8));
}

static void test_elementwise(void **state)
{
    (void)state;
    const float out[4] = {1.0f, 2.0f, nextafterf(3.0f, 4.0f), 5.0f};
    const float exact[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    const double bound[4] = {0, 0, 0, 0.25};
    struct replay_opcheck c;
    replay_classify(out, exact, bound, 2, 0, &c);
    assert_int_equal(c.cls, REPLAY_EXACT);
    /* element 2 is one ulp (2^-22) off with bound 0: half an ulp is allowed */
    replay_classify(out, exact, bound, 3, 0, &c);
    assert_int_equal(c.cls, REPLAY_SEMANTIC);
    assert_int_equal(c.worst, 2);
    assert_true(fabs(c.max_ratio - 2.0) < 1e-12);
    assert_int_equal(c.max_ulp, 1);
    /* a floor of 2^-22 covers it */
    replay_classify(out, exact, bound, 3, 0x1p-22, &c);
    assert_int_equal(c.cls, REPLAY_ROUNDING);
    assert_true(c.worst_bound == 0x1p-22);
    /* element 3: error 1 against 0.25 + ulp(4)/2 = 0.25 + 2^-22, the worst */
    replay_classify(out, exact, bound, 4, 0, &c);
    assert_int_equal(c.cls, REPLAY_SEMANTIC);
    assert_int_equal(c.worst, 3);
    assert_true(fabs(c.max_ratio - 1.0 / (0.25 + 0x1p-22)) < 1e-12);
}

static void test_fft_convolution(void **state)
{
    (void)state;
    static float x[N], w[TAPS], y[N], exact[N];
    static double bound[N];
    double worst_norm = 0;
    for (int rep = 0; rep < 50; rep++) {
        make_case(x, w);
        conv_case(x, w, y, exact, bound);
        for (int i = 101; i < 137; i++)
            assert_true(exact[i] == 0 && bound[i] == 0);
        struct replay_opcheck c;
        /* elementwise, the FFT's rounding on the zero outputs is beyond bounds */
        replay_classify(y, exact, bound, N, 0, &c);
        assert_int_equal(c.cls, REPLAY_SEMANTIC);
        /* the normwise floor covers it */
        double floor = replay_normwise_floor(x, N, w, TAPS);
        replay_classify(y, exact, bound, N, floor, &c);
        assert_int_not_equal(c.cls, REPLAY_SEMANTIC);
        if (c.max_ratio > worst_norm)
            worst_norm = c.max_ratio;
        /* and does not hide a wrong element: 1e-4 of the largest output */
        double big = 0;
        for (int i = 0; i < N; i++)
            big = fmax(big, fabs(exact[i]));
        float saved = y[rep % N];
        y[rep % N] = (float)(exact[rep % N] + 1e-4 * big);
        replay_classify(y, exact, bound, N, floor, &c);
        assert_int_equal(c.cls, REPLAY_SEMANTIC);
        assert_int_equal(c.worst, rep % N);
        y[rep % N] = saved;
    }
    /* the floor is not a bound proven for cuDNN's algorithms; here it has
     * room to spare */
    print_message("largest error over normwise bound, 50 FFT convolutions: %.3g\n", worst_norm);
    assert_true(worst_norm < 0.5);
}

/* A record's statistics against exact values and bounds, by hand: exact
 * (3, -4), bound 0.5 each (ulp/2 adds 2^-23 and 2^-22 at 3 and 4): an
 * output within bounds has L2 norm in 5 -+ |(a0, a1)|, its least element in
 * [-4.5, -3.5], its largest in [2.5, 3.5]. */
static void test_stats_admissible(void **state)
{
    (void)state;
    const float exact[2] = {3.0f, -4.0f};
    const double bound[2] = {0.5, 0.5};
    struct trace_oprec r;
    memset(&r, 0, sizeof r);
    /* (3.3, -3.7): within bounds */
    r.l2 = sqrt(3.3 * 3.3 + 3.7 * 3.7);
    r.min = -3.7;
    r.max = 3.3;
    assert_int_equal(replay_stats_admissible(&r, exact, bound, 2, 0), 1);
    /* a norm of 6: no output within 0.5 of each exact element has it */
    r.l2 = 6.0;
    assert_int_equal(replay_stats_admissible(&r, exact, bound, 2, 0), 0);
    /* the same norm is allowed by a normwise floor of 1: |(1, 1)| > 6 - 5 */
    assert_int_equal(replay_stats_admissible(&r, exact, bound, 2, 1.0), 1);
    r.l2 = sqrt(3.3 * 3.3 + 3.7 * 3.7);
    /* a largest element of 3.6 is beyond 3 + 0.5 */
    r.max = 3.6;
    assert_int_equal(replay_stats_admissible(&r, exact, bound, 2, 0), 0);
    r.max = 3.3;
    /* a least element of -3.4 is above -4 + 0.5: the -4 cannot be there */
    r.min = -3.4;
    assert_int_equal(replay_stats_admissible(&r, exact, bound, 2, 0), 0);
    r.min = -3.7;
    /* a NaN where the exact result has none */
    r.nan = 1;
    assert_int_equal(replay_stats_admissible(&r, exact, bound, 2, 0), 0);
    r.nan = 0;
    /* an infinite bound: nothing can be said */
    const double inf[2] = {0.5, INFINITY};
    assert_int_equal(replay_stats_admissible(&r, exact, inf, 2, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normwise_floor_value),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_fft_convolution),
        cmocka_unit_test(test_stats_admissible),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
