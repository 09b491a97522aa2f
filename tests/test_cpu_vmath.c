/* test_cpu_vmath.c: divtrace's expf and sigmoid (src/cpu_vmath.c).
 * - The table: each entry against 2^(i/32) rounded by MPFR.
 * - Accuracy, against MPFR's e^x correctly rounded: within 0.502 units in
 *   the last place over a sweep of [-104, 89], ends included (an error of
 *   the steps or constants shows here, whatever the C library).
 * - Every vector form this CPU runs against the scalar form, bit for bit:
 *   the hard cases below, every 61st float, every float within 2^16 of each end (+-88.72,
 *   -103.97, -103.28, 88.0, 0, the subnormals), infinities and NaNs;
 *   spans of every length up to 40 and in place, for expf and sigmoid.
 * - The bits the cpu backend had before (glibc's expf on a CPU with FMA,
 *   glibc 2.28 or later): the hard cases and every 61st float, bit for bit; skipped, and said,
 *   on another C library or CPU.
 * DIVTRACE_TEST_EXHAUSTIVE=1 compares every one of the 2^32 floats, each
 * form against the scalar and (where it applies) glibc (about 25 s a form). */
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

#include "cpu_vmath.h"
#include "test_util.h"

#define CHUNK 4096

/* The floats whose e^x the steps leave nearest a midpoint of two floats
 * (the 40 nearest, found by running the steps on every float in
 * [-103.2, 88.7] in double and measuring; 0x1.e75bc4p-3 lands on one, and
 * rounds to even) and those whose true e^x is nearest one (the 20 nearest,
 * by expl): where a change of any step or constant shows first. */
static const float hard[] = {
    -0x1.1f42e8p-1f, -0x1.2437aep-10f, -0x1.299058p-3f, -0x1.4a76a8p-11f, -0x1.4ad55cp-12f,
    -0x1.548c34p-7f, -0x1.5c8c12p-2f, -0x1.65cf3p+6f, -0x1.6e1ddp-8f, -0x1.6f0c72p-9f,
    -0x1.7acc62p+3f, -0x1.a420f4p+4f, -0x1.aec4d6p+2f, -0x1.bc6008p+0f, -0x1.c1c4b8p-10f,
    -0x1.d0c364p-8f, -0x1.d1b46cp+1f, -0x1.d2259ap+3f, -0x1.e1dbe2p-8f, -0x1.f02a66p+1f,
    -0x1.f756ecp-12f, -0x1.fffffep-26f, -0x1p-25f, 0x1.036492p+1f, 0x1.04845ep+5f,
    0x1.112856p+6f, 0x1.1265dp-4f, 0x1.168a2ep-9f, 0x1.1b318ep+1f, 0x1.206302p-5f,
    0x1.287d6ap+1f, 0x1.2e4ed8p+4f, 0x1.344e9cp-5f, 0x1.5b3c52p-14f, 0x1.62b666p+1f,
    0x1.6f3234p-9f, 0x1.747de2p-15f, 0x1.7c234cp+0f, 0x1.7ffffep-23f, 0x1.82586ep+2f,
    0x1.8d7cb6p-12f, 0x1.97f0f6p+4f, 0x1.a024b4p-9f, 0x1.bffffap-22f, 0x1.cb763ap-12f,
    0x1.cce332p+0f, 0x1.cd3982p-14f, 0x1.dffff2p-21f, 0x1.e75bc4p-3f, 0x1.efffe2p-20f,
    0x1.f7ffc2p-19f, 0x1.fbb822p-14f, 0x1.fbff82p-18f, 0x1.fd7c0ap-15f, 0x1.fdff02p-17f,
    0x1.fefe02p-16f, 0x1.fffffcp-25f, 0x1.fffffep-25f, 0x1p-24f};

static void test_table(void **state)
{
    (void)state;
    mpfr_t v;
    mpfr_init2(v, 128);
    for (int i = 0; i < 32; i++) {
        mpfr_set_ui(v, (unsigned)i, MPFR_RNDN);
        mpfr_div_ui(v, v, 32, MPFR_RNDN); /* exact */
        mpfr_exp2(v, v, MPFR_RNDN);
        double d = mpfr_get_d(v, MPFR_RNDN);
        uint64_t u;
        memcpy(&u, &d, sizeof u);
        assert_int_equal(cpu_exp_tab[i], u - ((uint64_t)i << 47));
    }
    mpfr_clear(v);
}

/* |y - e^x| in units of the last place of e^x's float neighbourhood */
static double ulp_error(float x, float y, mpfr_t e, mpfr_t t)
{
    mpfr_set_flt(e, x, MPFR_RNDN);
    mpfr_exp(e, e, MPFR_RNDN);
    float r = mpfr_get_flt(e, MPFR_RNDN); /* the correctly rounded result */
    if (isinf(r))
        return isinf(y) ? 0.0 : 1e9;
    int ex;
    frexpf(r == 0.0f ? 0x1p-149f : r, &ex);
    double ulp = ldexp(1.0, ex - 24 < -149 ? -149 : ex - 24);
    mpfr_set_flt(t, y, MPFR_RNDN);
    mpfr_sub(t, t, e, MPFR_RNDN);
    return fabs(mpfr_get_d(t, MPFR_RNDN)) / ulp;
}

static void test_accuracy(void **state)
{
    (void)state;
    mpfr_t e, t;
    mpfr_inits2(200, e, t, (mpfr_ptr)0);
    double worst = 0;
    float at = 0;
    int n = 0;
    /* 2^18 points across the range, and the ends' neighbourhoods */
    for (int i = 0; i <= 1 << 18; i++) {
        float x = -104.0f + 193.0f * (float)i / (float)(1 << 18);
        double err = ulp_error(x, cpu_expf(x), e, t);
        if (err > worst)
            worst = err, at = x;
        n++;
    }
    const float ends[] = {88.72283f, -103.97208f, -103.27892f, 88.0f, -87.0f, 0.0f};
    for (size_t k = 0; k < sizeof ends / sizeof *ends; k++) {
        float x = ends[k];
        for (int j = 0; j < 1000; j++, n++) {
            double err = ulp_error(x, cpu_expf(x), e, t);
            if (err > worst)
                worst = err, at = x;
            x = nextafterf(x, j & 1 ? INFINITY : -INFINITY);
            if (j == 500)
                x = ends[k];
        }
    }
    for (size_t k = 0; k < sizeof hard / sizeof *hard; k++, n++) {
        double err = ulp_error(hard[k], cpu_expf(hard[k]), e, t);
        if (err > worst)
            worst = err, at = hard[k];
    }
    mpfr_clears(e, t, (mpfr_ptr)0);
    if (worst > 0.502)
        fail_msg("expf's error %.4f units in the last place at %a, over 0.502 (%d points)", worst, (double)at, n);
    assert_true(cpu_expf(INFINITY) == INFINITY && cpu_expf(-INFINITY) == 0.0f && isnan(cpu_expf(NAN)));
    assert_true(cpu_expf(89.0f) == INFINITY && cpu_expf(-104.0f) == 0.0f && cpu_expf(-103.5f) == 0x1p-149f);
    assert_true(cpu_expf(0.0f) == 1.0f && cpu_expf(-0.0f) == 1.0f);
}

/* Compare form against the scalar form or glibc's expf on the floats from
 * lo upward by stride, count of them (or, with lo = stride = 0, on the hard
 * cases); returns the number that differ. */
static uint64_t compare(int form, int against_libm, uint64_t lo, uint64_t stride, uint64_t count)
{
    static float in[CHUNK], out[CHUNK];
    uint64_t bad = 0;
    for (uint64_t done = 0; done < count;) {
        size_t m = 0;
        for (; m < CHUNK && done < count; m++, done++)
            in[m] = stride ? tu_bits_float((uint32_t)(lo + done * stride)) : hard[done];
        cpu_expf_span(form, out, in, m);
        for (size_t i = 0; i < m; i++) {
            float want = against_libm ? expf(in[i]) : cpu_expf(in[i]);
            if (tu_float_bits(out[i]) != tu_float_bits(want)) {
                if (bad < 4)
                    print_message("form %d: e^%a gave %a, %s %a\n", form, (double)in[i], (double)out[i],
                                  against_libm ? "glibc" : "scalar", (double)want);
                bad++;
            }
        }
    }
    return bad;
}

static int exhaustive(void)
{
    const char *s = getenv("DIVTRACE_TEST_EXHAUSTIVE");
    return s && strcmp(s, "1") == 0;
}

static void test_forms(void **state)
{
    (void)state;
    const float ends[] = {88.72283f, -88.72283f, -103.97208f, -103.27892f, 88.0f, -88.0f, 0.0f, -0.0f,
                          0x1p-149f, -0x1p-149f, 0x1p-126f, INFINITY, -INFINITY};
    for (int form = CPU_VMATH_AVX2; form <= CPU_VMATH_AVX512; form++) {
        if (!cpu_vmath_has(form)) {
            print_message("form %d: this CPU does not run it; not checked\n", form);
            continue;
        }
        uint64_t bad = compare(form, 0, 0, 0, sizeof hard / sizeof *hard);
        if (exhaustive())
            bad += compare(form, 0, 0, 1, 1ull << 32);
        else
            bad += compare(form, 0, 7, 61, (1ull << 32) / 61);
        for (size_t k = 0; k < sizeof ends / sizeof *ends; k++)
            bad += compare(form, 0, (uint64_t)tu_float_bits(ends[k]) - (tu_float_bits(ends[k]) >= 1u << 16 ? 1u << 16 : 0),
                           1, 1u << 17);
        bad += compare(form, 0, 0x7f800001u, 0x100001u, 100); /* NaNs of both signs, several payloads */
        bad += compare(form, 0, 0xff800001u, 0x100001u, 100);
        assert_int_equal(bad, 0);
        /* spans of each length (the 16-, 8- and one-at-a-time parts), in place */
        float in[40], out[40], ref[40];
        for (int i = 0; i < 40; i++)
            in[i] = (float)(i * 37 % 41) * 0.4f - 8.0f;
        for (size_t n = 0; n <= 40; n++) {
            memset(out, 0xff, sizeof out);
            cpu_sigmoid_span(form, out, in, n);
            cpu_sigmoid_span(CPU_VMATH_SCALAR, ref, in, n);
            for (size_t i = 0; i < n; i++) {
                assert_int_equal(tu_float_bits(out[i]), tu_float_bits(ref[i]));
                assert_int_equal(tu_float_bits(ref[i]), tu_float_bits(1.0f / (1.0f + cpu_expf(-in[i]))));
            }
            for (size_t i = n; i < 40; i++)
                assert_int_equal(tu_float_bits(out[i]), 0xffffffffu); /* nothing past n */
        }
        memcpy(out, in, sizeof in);
        cpu_sigmoid_span(form, out, out, 40);
        cpu_sigmoid_span(CPU_VMATH_SCALAR, ref, in, 40);
        assert_memory_equal(out, ref, sizeof ref);
    }
}

/* glibc 2.28 and later pick their FMA expf on a CPU with FMA: the bits the
 * cpu backend's sigmoid had when it called expf */
static void test_glibc(void **state)
{
    (void)state;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 28)) && \
    (defined(__x86_64__) || defined(__i386__))
    if (!__builtin_cpu_supports("fma")) {
        print_message("this CPU has no FMA: glibc's expf runs other steps; not compared\n");
        skip();
    }
    for (int form = CPU_VMATH_SCALAR; form <= CPU_VMATH_AVX512; form++) {
        if (!cpu_vmath_has(form))
            continue;
        uint64_t bad = compare(form, 1, 0, 0, sizeof hard / sizeof *hard);
        bad += exhaustive() ? compare(form, 1, 0, 1, 1ull << 32) : compare(form, 1, 3, 61, (1ull << 32) / 61);
        if (bad)
            fail_msg("form %d: %llu floats' e^x differ from glibc's expf", form, (unsigned long long)bad);
    }
#else
    print_message("not glibc 2.28 or later on x86: no earlier bits to compare with\n");
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_table), cmocka_unit_test(test_accuracy),
                                       cmocka_unit_test(test_forms), cmocka_unit_test(test_glibc)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
