/* stats.c: tensor statistics and sketch for trace records (see stats.h). */
#include "stats.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "util.h"

#define SK TRACE_SKETCH_LEN

static inline uint32_t stats_fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

#define STATS_PERIOD 4096u /* signs repeat with this period, up to a window sign */

static float stats_f(uint32_t k)
{
    return (stats_fmix32(k) >> 31) ? -1.0f : 1.0f;
}

float stats_sketch_sign(size_t i)
{
    return stats_f((uint32_t)(i % STATS_PERIOD)) * stats_f((uint32_t)(STATS_PERIOD + i / STATS_PERIOD));
}

/* f(k) for k < STATS_PERIOD, built once: the sign of element i is
 * stats_table[i % STATS_PERIOD] times the sign of its window. */
static float stats_table[STATS_PERIOD];

static const float *stats_signs(void)
{
    static int ready;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (uint32_t k = 0; k < STATS_PERIOD; k++)
            stats_table[k] = stats_f(k);
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return stats_table;
}

static inline int stats_finite_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x7f800000u) != 0x7f800000u;
}

/* The per-lane accumulators of stats_compute. Lane k sees the elements
 * i = 16 b + k in order of b. Every implementation below performs the same
 * double additions in the same order (squares of floats and signed floats
 * are exact in double, so fused or not makes no difference): results are
 * bitwise identical whichever one runs. */
struct stats_acc {
    double sq[SK], sk[SK];
    float mn[SK], mx[SK];
    uint64_t nan, inf;
    int any;
};

static void stats_acc_element(struct stats_acc *a, int k, float v, float s)
{
    if (isnan(v)) {
        a->nan++;
    } else if (isinf(v)) {
        a->inf++;
    } else {
        double d = v;
        a->sq[k] += d * d;
        a->sk[k] += (double)(s * v);
        a->mn[k] = v < a->mn[k] ? v : a->mn[k];
        a->mx[k] = v > a->mx[k] ? v : a->mx[k];
        a->any = 1;
    }
}

/* The signs of block b's 16 elements (blocks never straddle a window). */
static void stats_block_signs(size_t b, float out[SK])
{
    const float *t = stats_signs();
    size_t i = b * SK;
    float w = stats_f((uint32_t)(STATS_PERIOD + i / STATS_PERIOD));
    for (int k = 0; k < SK; k++)
        out[k] = w * t[(i + (size_t)k) % STATS_PERIOD];
}

/* Blocks b0 .. b1-1, portable code. */
static void stats_blocks_generic(struct stats_acc *a, const float *x, size_t b0, size_t b1)
{
    float s[SK];
    for (size_t b = b0; b < b1; b++) {
        const float *xb = x + b * SK;
        stats_block_signs(b, s);
        int fin = 1;
        for (int k = 0; k < SK; k++)
            fin &= stats_finite_bits(xb[k]);
        if (!fin) {
            for (int k = 0; k < SK; k++)
                stats_acc_element(a, k, xb[k], s[k]);
            continue;
        }
        for (int k = 0; k < SK; k++) {
            double d = xb[k];
            a->sq[k] += d * d;
            a->sk[k] += (double)(s[k] * xb[k]); /* exact: a sign change */
            a->mn[k] = xb[k] < a->mn[k] ? xb[k] : a->mn[k];
            a->mx[k] = xb[k] > a->mx[k] ? xb[k] : a->mx[k];
        }
        a->any = 1;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* f(k) as doubles, for the vector path (the product with a float is exact),
 * and -f(k) after them, for windows whose sign is -1. */
static _Alignas(64) double stats_dtable[2 * STATS_PERIOD];

static const double *stats_dsigns(void)
{
    static int ready;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        const float *t = stats_signs();
        for (uint32_t k = 0; k < STATS_PERIOD; k++) {
            stats_dtable[k] = t[k];
            stats_dtable[STATS_PERIOD + k] = -(double)t[k];
        }
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return stats_dtable;
}

/* Block b's window: where it ends (b1 at most), and the signs of its
 * blocks (the table, or its negation where the window's sign is -1). */
static const double *stats_window(const double *t, size_t b, size_t b1, size_t *wend)
{
    const size_t per = STATS_PERIOD / SK; /* blocks per window */
    *wend = (b / per + 1) * per < b1 ? (b / per + 1) * per : b1;
    return t + (stats_f((uint32_t)(STATS_PERIOD + b / per)) < 0 ? STATS_PERIOD : 0);
}

/* The same with AVX-512: one block is one register of floats, two of
 * doubles. Inside a window the window sign is fixed, so the sketch update is
 * a fused multiply-add with the signs of the window (the table or its
 * negation; -(t d) + s and (-t) d + s are one rounding of the same value):
 * the same sums as above. Blocks go four at a time, each accumulator still
 * taking them in order of b (the four only share a test for non-finite
 * values), so that the loop's bookkeeping does not stand between the
 * chains of additions. */
#define STATS_ONE_BLOCK(v, tb)                                                                           \
    do {                                                                                                 \
        __m512d d0_ = _mm512_cvtps_pd(_mm512_castps512_ps256(v));                                        \
        __m512d d1_ = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))); \
        sq0 = _mm512_fmadd_pd(d0_, d0_, sq0);                                                            \
        sq1 = _mm512_fmadd_pd(d1_, d1_, sq1);                                                            \
        sk0 = _mm512_fmadd_pd(_mm512_loadu_pd(tb), d0_, sk0);                                             \
        sk1 = _mm512_fmadd_pd(_mm512_loadu_pd((tb) + 8), d1_, sk1);                                       \
        mn = _mm512_min_ps(v, mn);                                                                       \
        mx = _mm512_max_ps(v, mx);                                                                       \
    } while (0)

/* x - x is 0 exactly for finite x, NaN for Inf and NaN */
#define STATS_FINITE(v) _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), zero, _CMP_EQ_OQ)

/* One pass over blocks b0 .. b1-1. careful (a constant where it is
 * inlined): a block with a NaN or an Inf goes through the portable code;
 * 1 comes back. Not careful: no test at all, the same sums in the same
 * order where every value is finite. A finite float's square is at most
 * 2^256, so each lane's sum of squares stays finite over any tensor of
 * finite values and turns Inf or NaN at the first value that is not:
 * then nothing is stored and 0 comes back, for the caller to take the
 * blocks the careful way. The test and its branch were about a quarter of
 * the loop's instructions. */
__attribute__((target("avx512f"), always_inline))
static inline int stats_pass_avx512(struct stats_acc *a, const float *x, size_t b0, size_t b1, int careful)
{
    __m512d sq0 = _mm512_loadu_pd(a->sq), sq1 = _mm512_loadu_pd(a->sq + 8);
    __m512d sk0 = _mm512_loadu_pd(a->sk), sk1 = _mm512_loadu_pd(a->sk + 8);
    __m512 mn = _mm512_loadu_ps(a->mn), mx = _mm512_loadu_ps(a->mx);
    const __m512 zero = _mm512_setzero_ps();
    const double *t = stats_dsigns();
    int any = a->any;
    for (size_t b = b0; b < b1;) {
        size_t wend;
        const double *tw = stats_window(t, b, b1, &wend);
        while (b < wend) {
            const double *tb = tw + (b * SK) % STATS_PERIOD;
            if (b + 4 <= wend) {
                __m512 v0 = _mm512_loadu_ps(x + b * SK), v1 = _mm512_loadu_ps(x + b * SK + SK);
                __m512 v2 = _mm512_loadu_ps(x + b * SK + 2 * SK), v3 = _mm512_loadu_ps(x + b * SK + 3 * SK);
                __mmask16 f = careful ? _mm512_kand(_mm512_kand(STATS_FINITE(v0), STATS_FINITE(v1)),
                                                    _mm512_kand(STATS_FINITE(v2), STATS_FINITE(v3)))
                                      : 0xffff;
                if (f == 0xffff) {
                    STATS_ONE_BLOCK(v0, tb);
                    STATS_ONE_BLOCK(v1, tb + SK);
                    STATS_ONE_BLOCK(v2, tb + 2 * SK);
                    STATS_ONE_BLOCK(v3, tb + 3 * SK);
                    any = 1;
                    b += 4;
                    continue;
                }
            }
            __m512 v = _mm512_loadu_ps(x + b * SK);
            if (careful && STATS_FINITE(v) != 0xffff) {
                _mm512_storeu_pd(a->sq, sq0); _mm512_storeu_pd(a->sq + 8, sq1);
                _mm512_storeu_pd(a->sk, sk0); _mm512_storeu_pd(a->sk + 8, sk1);
                _mm512_storeu_ps(a->mn, mn); _mm512_storeu_ps(a->mx, mx);
                a->any = any;
                stats_blocks_generic(a, x, b, b + 1);
                any = a->any;
                sq0 = _mm512_loadu_pd(a->sq); sq1 = _mm512_loadu_pd(a->sq + 8);
                sk0 = _mm512_loadu_pd(a->sk); sk1 = _mm512_loadu_pd(a->sk + 8);
                mn = _mm512_loadu_ps(a->mn); mx = _mm512_loadu_ps(a->mx);
            } else {
                STATS_ONE_BLOCK(v, tb);
                any = 1;
            }
            b++;
        }
    }
    const __m512d dz = _mm512_setzero_pd();
    if (!careful && (_mm512_cmp_pd_mask(_mm512_sub_pd(sq0, sq0), dz, _CMP_EQ_OQ) != 0xff ||
                     _mm512_cmp_pd_mask(_mm512_sub_pd(sq1, sq1), dz, _CMP_EQ_OQ) != 0xff)) {
        _mm256_zeroupper();
        return 0;
    }
    _mm512_storeu_pd(a->sq, sq0); _mm512_storeu_pd(a->sq + 8, sq1);
    _mm512_storeu_pd(a->sk, sk0); _mm512_storeu_pd(a->sk + 8, sk1);
    _mm512_storeu_ps(a->mn, mn); _mm512_storeu_ps(a->mx, mx);
    a->any = any;
    _mm256_zeroupper(); /* SSE code after this would otherwise run slowly */
    return 1;
}

/* The blocks without the test, and again with it where a value was not
 * finite. */
__attribute__((target("avx512f")))
static void stats_blocks_avx512(struct stats_acc *a, const float *x, size_t b0, size_t b1)
{
    if (!stats_pass_avx512(a, x, b0, b1, 0))
        stats_pass_avx512(a, x, b0, b1, 1);
}
#undef STATS_ONE_BLOCK
#undef STATS_FINITE

/* The same with AVX2 and FMA (no AVX-512: AMD's Zen 2 and 3, Intel
 * before Skylake-X): a block is two registers of floats, four of doubles,
 * one block at a time; the same additions in the same order again. The
 * twelve accumulators are named, not an array, so that they stay in the
 * sixteen registers instead of memory. */
#define STATS_HALF(v, tb, sqa, sqb, ska, skb, mnh, mxh)                      \
    do {                                                                     \
        __m256d da_ = _mm256_cvtps_pd(_mm256_castps256_ps128(v));            \
        __m256d db_ = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));          \
        sqa = _mm256_fmadd_pd(da_, da_, sqa);                                \
        sqb = _mm256_fmadd_pd(db_, db_, sqb);                                \
        ska = _mm256_fmadd_pd(_mm256_loadu_pd(tb), da_, ska);                \
        skb = _mm256_fmadd_pd(_mm256_loadu_pd((tb) + 4), db_, skb);          \
        mnh = _mm256_min_ps(v, mnh);                                         \
        mxh = _mm256_max_ps(v, mxh);                                         \
    } while (0)
#define STATS_LOAD2()                                                                        \
    do {                                                                                     \
        sq0 = _mm256_loadu_pd(a->sq), sq1 = _mm256_loadu_pd(a->sq + 4);                      \
        sq2 = _mm256_loadu_pd(a->sq + 8), sq3 = _mm256_loadu_pd(a->sq + 12);                 \
        sk0 = _mm256_loadu_pd(a->sk), sk1 = _mm256_loadu_pd(a->sk + 4);                      \
        sk2 = _mm256_loadu_pd(a->sk + 8), sk3 = _mm256_loadu_pd(a->sk + 12);                 \
        mn0 = _mm256_loadu_ps(a->mn), mn1 = _mm256_loadu_ps(a->mn + 8);                      \
        mx0 = _mm256_loadu_ps(a->mx), mx1 = _mm256_loadu_ps(a->mx + 8);                      \
    } while (0)
#define STATS_STORE2()                                                                       \
    do {                                                                                     \
        _mm256_storeu_pd(a->sq, sq0), _mm256_storeu_pd(a->sq + 4, sq1);                      \
        _mm256_storeu_pd(a->sq + 8, sq2), _mm256_storeu_pd(a->sq + 12, sq3);                 \
        _mm256_storeu_pd(a->sk, sk0), _mm256_storeu_pd(a->sk + 4, sk1);                      \
        _mm256_storeu_pd(a->sk + 8, sk2), _mm256_storeu_pd(a->sk + 12, sk3);                 \
        _mm256_storeu_ps(a->mn, mn0), _mm256_storeu_ps(a->mn + 8, mn1);                      \
        _mm256_storeu_ps(a->mx, mx0), _mm256_storeu_ps(a->mx + 8, mx1);                      \
    } while (0)

/* One pass, as stats_pass_avx512 (careful: a block with a NaN or an Inf
 * through the portable code; not careful: no test, and 0 with nothing
 * stored where a sum of squares comes out non-finite). */
__attribute__((target("avx2,fma"), always_inline))
static inline int stats_pass_avx2(struct stats_acc *a, const float *x, size_t b0, size_t b1, int careful)
{
    __m256d sq0, sq1, sq2, sq3, sk0, sk1, sk2, sk3;
    __m256 mn0, mn1, mx0, mx1;
    STATS_LOAD2();
    const double *t = stats_dsigns();
    int any = a->any;
    for (size_t b = b0; b < b1;) {
        size_t wend;
        const double *tw = stats_window(t, b, b1, &wend);
        for (; b < wend; b++) {
            const double *tb = tw + (b * SK) % STATS_PERIOD;
            __m256 v0 = _mm256_loadu_ps(x + b * SK), v1 = _mm256_loadu_ps(x + b * SK + 8);
            /* x - x is 0 exactly for finite x, NaN for Inf and NaN */
            __m256 z = _mm256_setzero_ps();
            if (careful && _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(v0, v0), z, _CMP_EQ_OQ),
                                                            _mm256_cmp_ps(_mm256_sub_ps(v1, v1), z,
                                                                          _CMP_EQ_OQ))) != 0xff) {
                STATS_STORE2();
                a->any = any;
                stats_blocks_generic(a, x, b, b + 1);
                any = a->any;
                STATS_LOAD2();
                continue;
            }
            STATS_HALF(v0, tb, sq0, sq1, sk0, sk1, mn0, mx0);
            STATS_HALF(v1, tb + 8, sq2, sq3, sk2, sk3, mn1, mx1);
            any = 1;
        }
    }
    if (!careful) {
        __m256d z = _mm256_setzero_pd();
        __m256d f = _mm256_and_pd(_mm256_and_pd(_mm256_cmp_pd(_mm256_sub_pd(sq0, sq0), z, _CMP_EQ_OQ),
                                                _mm256_cmp_pd(_mm256_sub_pd(sq1, sq1), z, _CMP_EQ_OQ)),
                                  _mm256_and_pd(_mm256_cmp_pd(_mm256_sub_pd(sq2, sq2), z, _CMP_EQ_OQ),
                                                _mm256_cmp_pd(_mm256_sub_pd(sq3, sq3), z, _CMP_EQ_OQ)));
        if (_mm256_movemask_pd(f) != 0xf) {
            _mm256_zeroupper();
            return 0;
        }
    }
    STATS_STORE2();
    a->any = any;
    _mm256_zeroupper();
    return 1;
}

/* As stats_blocks_avx512. */
__attribute__((target("avx2,fma")))
static void stats_blocks_avx2(struct stats_acc *a, const float *x, size_t b0, size_t b1)
{
    if (!stats_pass_avx2(a, x, b0, b1, 0))
        stats_pass_avx2(a, x, b0, b1, 1);
}
#undef STATS_HALF
#undef STATS_LOAD2
#undef STATS_STORE2
#endif

/* The implementations, best first; all give the same bits. */
static const char *const stats_paths[] = {"avx512", "avx2", "generic"};
/* the one in use (an index of stats_paths), -1 until the first call */
static atomic_int stats_path = -1;

static int stats_path_runs(int k)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (k == 0)
        return __builtin_cpu_supports("avx512f") != 0;
    if (k == 1)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    if (k < 2)
        return 0;
#endif
    return 1;
}

int stats_use(const char *name)
{
    for (int k = 0; k < (int)(sizeof stats_paths / sizeof stats_paths[0]); k++)
        if (name ? strcmp(name, stats_paths[k]) == 0 : stats_path_runs(k)) {
            if (!stats_path_runs(k))
                return -1;
            atomic_store(&stats_path, k);
            return 0;
        }
    return -1;
}

/* The implementation in use, the best one until stats_use says otherwise. */
static int stats_current(void)
{
    int k = atomic_load_explicit(&stats_path, memory_order_relaxed);
    if (k < 0) {
        stats_use(NULL);
        k = atomic_load(&stats_path);
    }
    return k;
}

const char *stats_impl(void)
{
    return stats_paths[stats_current()];
}

static void stats_blocks(struct stats_acc *a, const float *x, size_t b0, size_t b1)
{
    int k = stats_current();
#if defined(__x86_64__) && defined(__GNUC__)
    if (k == 0) {
        stats_blocks_avx512(a, x, b0, b1);
        return;
    }
    if (k == 1) {
        stats_blocks_avx2(a, x, b0, b1);
        return;
    }
#endif
    stats_blocks_generic(a, x, b0, b1);
}

void stats_compute(const float *x, size_t n, struct trace_oprec *rec)
{
    struct stats_acc a;
    memset(&a, 0, sizeof a);
    for (int k = 0; k < SK; k++) {
        a.mn[k] = INFINITY;
        a.mx[k] = -INFINITY;
    }
    /* One pass: each hash chunk gets its statistics and then its leaf hash
     * while it is in the nearest cache (hash.h's tree, leaf by leaf). The
     * statistics accumulate in the same order as over the whole tensor. */
    const size_t per = HASH_CHUNK_BYTES / sizeof(float);
    size_t nb = n / SK, m = (n + per - 1) / per;
    unsigned char stack[8 * 64], *leaves = m <= 64 ? stack : dt_malloc(8 * m);
    for (size_t j = 0; j < m; j++) {
        size_t e0 = j * per, e1 = e0 + per < n ? e0 + per : n;
        size_t b0 = e0 / SK, b1 = e1 / SK < nb ? e1 / SK : nb;
        stats_blocks(&a, x, b0, b1);
        for (size_t i = b1 * SK > e0 ? b1 * SK : e0; i < e1; i++)
            stats_acc_element(&a, (int)(i % SK), x[i], stats_sketch_sign(i));
        uint64_t h = hash_bytes(x + e0, (e1 - e0) * sizeof(float));
        for (int b = 0; b < 8; b++)
            leaves[8 * j + (size_t)b] = (unsigned char)(h >> (8 * b));
    }
    double l2 = 0, lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < SK; k++) {
        l2 += a.sq[k];
        lo = a.mn[k] < lo ? a.mn[k] : lo;
        hi = a.mx[k] > hi ? a.mx[k] : hi;
        rec->sketch[k] = (float)a.sk[k];
    }
    rec->l2 = sqrt(l2);
    rec->min = a.any ? lo : 0.0;
    rec->max = a.any ? hi : 0.0;
    rec->nan = a.nan;
    rec->inf = a.inf;
    rec->hash = hash_bytes(leaves, 8 * m);
    if (leaves != stack)
        free(leaves);
}

double stats_sketch_distance(const struct trace_oprec *a, const struct trace_oprec *b)
{
    double s = 0;
    for (int k = 0; k < SK; k++) {
        double d = (double)a->sketch[k] - (double)b->sketch[k];
        s += d * d;
    }
    return sqrt(s);
}
