/* cpu_vmath.c: e^x and the sigmoid in one fixed sequence of operations,
 * scalar and 8 or 16 at a time.
 *
 * e^x for a float x, every step in double: k = round(x * 32/ln2) by adding
 * and taking off 1.5 * 2^52 (one FMA), r = x * 32/ln2 - k (one FMA, so r is
 * that difference rounded once), s = 2^(k/32) from a table of 32 entries
 * and k's high bits put in the exponent, then
 *     y = (C0 r + C1) r^2 + (C2 r + 1)    (three FMAs and r * r)
 * and e^x = y * s rounded to float. The coefficients are those of glibc's
 * expf (2.28 and later); on a CPU with FMA it runs exactly these steps, so
 * the cpu backend's sigmoids keep the bits they had there. Arguments past
 * the ends: above 88.72283 gives +inf; below -103.97208, 0; between that
 * and -103.27892, 2^-149 (e^x lies between 2^-150 and 2^-149 there); NaN
 * gives x + x. */
#include "config.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VMATH_X86 1
#endif

#include "cpu_vmath.h"

/* 2^(i/32) rounded to nearest, less i << 47 (the test recomputes them
 * with MPFR) */
const uint64_t cpu_exp_tab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

#define EXP_INVLN2N 0x1.71547652b82fep+5 /* 32/ln 2, rounded to nearest */
#define EXP_SHIFT 0x1.8p+52
#define EXP_C0 0x1.c6af84b912394p-20 /* the cubic's coefficients, in r of the scaled */
#define EXP_C1 0x1.ebfce50fac4f3p-13 /* argument (so their 1/32^3, 1/32^2 and 1/32 */
#define EXP_C2 0x1.62e42ff0c52d6p-6  /* factors are in them) */
#define EXP_OFLOW 0x1.62e42ep6f      /* above: +inf */
#define EXP_UFLOW (-0x1.9fe368p6f)   /* below: 0 */
#define EXP_MAYU (-0x1.9d1d9ep6f)    /* below (and not under EXP_UFLOW): 2^-149 */

static double bits_double(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static uint64_t double_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

float cpu_expf(float x)
{
    if (isnan(x))
        return x + x;
    if (x > EXP_OFLOW)
        return INFINITY;
    if (x < EXP_UFLOW)
        return 0.0f;
    if (x < EXP_MAYU)
        return 0x1p-149f;
    double xd = x;
    double kd = fma(xd, EXP_INVLN2N, EXP_SHIFT);
    uint64_t ki = double_bits(kd);
    kd -= EXP_SHIFT;
    double r = fma(xd, EXP_INVLN2N, -kd);
    double s = bits_double(cpu_exp_tab[ki % 32] + (ki << 47));
    double z = fma(r, EXP_C0, EXP_C1);
    double r2 = r * r;
    double y = fma(r, EXP_C2, 1.0);
    y = fma(z, r2, y);
    return (float)(y * s);
}

static float sigmoid1(float x)
{
    return 1.0f / (1.0f + cpu_expf(-x));
}

#ifdef VMATH_X86
/* The ends, for 8 floats x and their results y (AVX; both vector forms). */
#define EXP_FIX8(x, y)                                                                          \
    do {                                                                                        \
        y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(EXP_OFLOW), _CMP_GT_OQ)); \
        y = _mm256_blendv_ps(y, _mm256_set1_ps(0x1p-149f), _mm256_cmp_ps(x, _mm256_set1_ps(EXP_MAYU), _CMP_LT_OQ)); \
        y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(EXP_UFLOW), _CMP_LT_OQ)); \
        y = _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));       \
    } while (0)

/* e^x of 8 floats, in 8 doubles at once */
__attribute__((target("avx512f"))) static __m256 exp8_avx512(__m256 x)
{
    const __m512d invln2n = _mm512_set1_pd(EXP_INVLN2N), shift = _mm512_set1_pd(EXP_SHIFT);
    const __m512i *tab = (const __m512i *)(const void *)cpu_exp_tab;
    __m512d xd = _mm512_cvtps_pd(x);
    __m512d kd = _mm512_fmadd_pd(xd, invln2n, shift);
    __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    __m512d r = _mm512_fmsub_pd(xd, invln2n, kd);
    /* entries 0-15 and 16-31, each by one two-register permute */
    __m512i lo = _mm512_permutex2var_epi64(_mm512_loadu_si512(tab), ki, _mm512_loadu_si512(tab + 1));
    __m512i hi = _mm512_permutex2var_epi64(_mm512_loadu_si512(tab + 2), ki, _mm512_loadu_si512(tab + 3));
    __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
    __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(EXP_C0), _mm512_set1_pd(EXP_C1));
    __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(EXP_C2), _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, r2, y);
    __m256 f = _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
    EXP_FIX8(x, f);
    return f;
}

/* e^x of 4 floats, in 4 doubles */
__attribute__((target("avx2,fma"))) static __m128 exp4_avx2(__m128 x)
{
    const __m256d invln2n = _mm256_set1_pd(EXP_INVLN2N), shift = _mm256_set1_pd(EXP_SHIFT);
    __m256d xd = _mm256_cvtps_pd(x);
    __m256d kd = _mm256_fmadd_pd(xd, invln2n, shift);
    __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    __m256d r = _mm256_fmsub_pd(xd, invln2n, kd);
    __m256i t = _mm256_i64gather_epi64((const long long *)(const void *)cpu_exp_tab,
                                       _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
    __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(EXP_C0), _mm256_set1_pd(EXP_C1));
    __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(EXP_C2), _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, s));
}

__attribute__((target("avx2,fma"))) static __m256 exp8_avx2(__m256 x)
{
    __m256 f = _mm256_set_m128(exp4_avx2(_mm256_extractf128_ps(x, 1)), exp4_avx2(_mm256_castps256_ps128(x)));
    EXP_FIX8(x, f);
    return f;
}

/* The span functions of one form: 16 elements a step, then 8, then one at
 * a time by the scalar form (the same bits). */
#define VMATH_SPANS(form, target, exp8)                                                         \
    target static void expf_##form(float *out, const float *in, size_t n)                       \
    {                                                                                           \
        size_t i = 0;                                                                           \
        for (; i + 16 <= n; i += 16) {                                                          \
            __m256 a = exp8(_mm256_loadu_ps(in + i)), b = exp8(_mm256_loadu_ps(in + i + 8));    \
            _mm256_storeu_ps(out + i, a);                                                       \
            _mm256_storeu_ps(out + i + 8, b);                                                   \
        }                                                                                       \
        for (; i + 8 <= n; i += 8)                                                              \
            _mm256_storeu_ps(out + i, exp8(_mm256_loadu_ps(in + i)));                           \
        for (; i < n; i++)                                                                      \
            out[i] = cpu_expf(in[i]);                                                           \
    }                                                                                           \
    target static __m256 sigmoid8_##form(__m256 x)                                              \
    {                                                                                           \
        __m256 e = exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f)));                               \
        const __m256 one = _mm256_set1_ps(1.0f);                                                \
        return _mm256_div_ps(one, _mm256_add_ps(one, e));                                       \
    }                                                                                           \
    target static void sigmoid_##form(float *out, const float *in, size_t n)                    \
    {                                                                                           \
        size_t i = 0;                                                                           \
        for (; i + 16 <= n; i += 16) {                                                          \
            __m256 a = sigmoid8_##form(_mm256_loadu_ps(in + i));                                \
            __m256 b = sigmoid8_##form(_mm256_loadu_ps(in + i + 8));                            \
            _mm256_storeu_ps(out + i, a);                                                       \
            _mm256_storeu_ps(out + i + 8, b);                                                   \
        }                                                                                       \
        for (; i + 8 <= n; i += 8)                                                              \
            _mm256_storeu_ps(out + i, sigmoid8_##form(_mm256_loadu_ps(in + i)));                \
        for (; i < n; i++)                                                                      \
            out[i] = sigmoid1(in[i]);                                                           \
    }

VMATH_SPANS(avx512, __attribute__((target("avx512f"))), exp8_avx512)
VMATH_SPANS(avx2, __attribute__((target("avx2,fma"))), exp8_avx2)
#endif

int cpu_vmath_has(int form)
{
    switch (form) {
    case CPU_VMATH_SCALAR:
        return 1;
#ifdef VMATH_X86
    case CPU_VMATH_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CPU_VMATH_AVX512:
        return __builtin_cpu_supports("avx512f");
#endif
    default:
        return 0;
    }
}

static int vmath_form(int form)
{
    if (form != CPU_VMATH_BEST)
        return cpu_vmath_has(form) ? form : CPU_VMATH_SCALAR;
    /* chosen once (every thread that races here chooses the same);
     * DIVTRACE_CPU_GEMM_ISA=scalar or avx2 caps it, as it caps the
     * products' kernels (for tests: every form gives the same bits) */
    static atomic_int best = -1;
    int b = atomic_load_explicit(&best, memory_order_relaxed);
    if (b >= 0)
        return b;
    const char *cap = getenv("DIVTRACE_CPU_GEMM_ISA");
    if (cap && strcmp(cap, "scalar") == 0)
        b = CPU_VMATH_SCALAR;
    else if ((!cap || strcmp(cap, "avx2") != 0) && cpu_vmath_has(CPU_VMATH_AVX512))
        b = CPU_VMATH_AVX512;
    else
        b = cpu_vmath_has(CPU_VMATH_AVX2) ? CPU_VMATH_AVX2 : CPU_VMATH_SCALAR;
    atomic_store_explicit(&best, b, memory_order_relaxed);
    return b;
}

void cpu_expf_span(int form, float *out, const float *in, size_t n)
{
    switch (vmath_form(form)) {
#ifdef VMATH_X86
    case CPU_VMATH_AVX512:
        expf_avx512(out, in, n);
        return;
    case CPU_VMATH_AVX2:
        expf_avx2(out, in, n);
        return;
#endif
    default:
        for (size_t i = 0; i < n; i++)
            out[i] = cpu_expf(in[i]);
    }
}

void cpu_sigmoid_span(int form, float *out, const float *in, size_t n)
{
    switch (vmath_form(form)) {
#ifdef VMATH_X86
    case CPU_VMATH_AVX512:
        sigmoid_avx512(out, in, n);
        return;
    case CPU_VMATH_AVX2:
        sigmoid_avx2(out, in, n);
        return;
#endif
    default:
        for (size_t i = 0; i < n; i++)
            out[i] = sigmoid1(in[i]);
    }
}
