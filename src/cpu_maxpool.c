/* cpu_maxpool.c: the cpu backend's 2x2 max pooling and its gradient, plane
 * by plane (see cpu_maxpool.h). */
#include "cpu_maxpool.h"

#include <math.h>
#include <string.h>

#include "cpu_vmath.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MAXPOOL_X86 1
#endif

int cpu_maxpool2_pick(const float *x, size_t w)
{
    const float v[4] = {x[0], x[1], x[w], x[w + 1]};
    int best = 0;
    for (int j = 1; j < 4 && !isnan(v[best]); j++)
        if (isnan(v[j]) || v[j] > v[best])
            best = j;
    return best;
}

static size_t maxpool_offset(int j, size_t w) { return (size_t)(j >> 1) * w + (size_t)(j & 1); }

/* Windows [j0, j1) of output row i, one at a time. */
static void maxpool_row_scalar(float *out, float *dx, const float *dy, const float *x, size_t w, size_t j0,
                               size_t j1)
{
    for (size_t j = j0; j < j1; j++) {
        const float *win = x + 2 * j;
        size_t o = maxpool_offset(cpu_maxpool2_pick(win, w), w);
        if (out)
            memcpy(&out[j], &win[o], sizeof *out);
        else
            memcpy(&dx[2 * j + o], &dy[j], sizeof *dx);
    }
}

#ifdef MAXPOOL_X86
/* Eight windows at a time: the four elements of each as four vectors (the
 * even and odd columns of the two rows), and the rule of cpu_maxpool2_pick
 * as three selections: element j replaces the best so far when the best is
 * not NaN and j is NaN or greater. A selection copies bits (a blend), so the
 * chosen element and dy are moved bit for bit. Returns the windows done. */
__attribute__((target("avx2"))) static size_t maxpool_row_avx2(float *out, float *dx, const float *dy,
                                                               const float *x, size_t w, size_t ow)
{
    size_t j = 0;
    for (; j + 8 <= ow; j += 8) {
        __m256 v[4];
        for (int r = 0; r < 2; r++) {
            const float *p = x + (size_t)r * w + 2 * j;
            __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
            /* [a0 a2 b0 b2 | a4 a6 b4 b6] -> a0 a2 a4 a6 b0 b2 b4 b6 */
            v[2 * r] = _mm256_castpd_ps(
                _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
            v[2 * r + 1] = _mm256_castpd_ps(
                _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
        }
        __m256 best = v[0];
        __m256i idx = _mm256_setzero_si256();
        for (int e = 1; e < 4; e++) {
            __m256 bn = _mm256_cmp_ps(best, best, _CMP_UNORD_Q), en = _mm256_cmp_ps(v[e], v[e], _CMP_UNORD_Q);
            __m256 gt = _mm256_cmp_ps(v[e], best, _CMP_GT_OQ);
            __m256 take = _mm256_andnot_ps(bn, _mm256_or_ps(en, gt));
            best = _mm256_blendv_ps(best, v[e], take);
            idx = _mm256_castps_si256(
                _mm256_blendv_ps(_mm256_castsi256_ps(idx), _mm256_castsi256_ps(_mm256_set1_epi32(e)), take));
        }
        if (out) {
            _mm256_storeu_ps(out + j, best);
            continue;
        }
        __m256 g = _mm256_loadu_ps(dy + j), o[4];
        for (int e = 0; e < 4; e++) /* dy where the window chose e, +0 elsewhere */
            o[e] = _mm256_and_ps(g, _mm256_castsi256_ps(_mm256_cmpeq_epi32(idx, _mm256_set1_epi32(e))));
        for (int r = 0; r < 2; r++) { /* interleave the even and odd columns back */
            __m256 lo = _mm256_unpacklo_ps(o[2 * r], o[2 * r + 1]), hi = _mm256_unpackhi_ps(o[2 * r], o[2 * r + 1]);
            float *q = dx + (size_t)r * w + 2 * j;
            _mm256_storeu_ps(q, _mm256_permute2f128_ps(lo, hi, 0x20));
            _mm256_storeu_ps(q + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
        }
    }
    return j;
}
#endif

/* Output rows of one plane: the pooled values into out, or (out NULL) dy
 * into dx, whose plane the caller has zeroed. */
static void maxpool_plane(float *out, float *dx, const float *dy, const float *x, size_t oh, size_t ow, int form)
{
    size_t w = 2 * ow;
    for (size_t i = 0; i < oh; i++) {
        const float *xr = x + 2 * i * w;
        float *orow = out ? out + i * ow : NULL, *drow = out ? NULL : dx + 2 * i * w;
        const float *dyr = out ? NULL : dy + i * ow;
        size_t j = 0;
#ifdef MAXPOOL_X86
        if (form >= CPU_VMATH_AVX2)
            j = maxpool_row_avx2(orow, drow, dyr, xr, w, ow);
#endif
        maxpool_row_scalar(orow, drow, dyr, xr, w, j, ow);
    }
}

void cpu_maxpool2_planes(int form, float *out, const float *x, size_t planes, size_t oh, size_t ow)
{
    if (form == CPU_VMATH_BEST)
        form = cpu_vmath_has(CPU_VMATH_AVX2) ? CPU_VMATH_AVX2 : CPU_VMATH_SCALAR;
    for (size_t p = 0; p < planes; p++)
        maxpool_plane(out + p * oh * ow, NULL, NULL, x + p * 4 * oh * ow, oh, ow, form);
}

void cpu_maxpool2_bwd_planes(int form, float *dx, const float *x, const float *dy, size_t planes, size_t oh,
                             size_t ow)
{
    if (form == CPU_VMATH_BEST)
        form = cpu_vmath_has(CPU_VMATH_AVX2) ? CPU_VMATH_AVX2 : CPU_VMATH_SCALAR;
    memset(dx, 0, planes * 4 * oh * ow * sizeof *dx);
    for (size_t p = 0; p < planes; p++)
        maxpool_plane(NULL, dx + p * 4 * oh * ow, dy + p * oh * ow, x + p * 4 * oh * ow, oh, ow, form);
}
