/* rng.c: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11) and the mapping of
 * (seed, stream, index) onto it that rng.h defines. Every output is a pure
 * function of its coordinates, so any backend and any order agree. */
#include "rng.h"

#define RNG_M0 0xD2511F53u /* round multipliers */
#define RNG_M1 0xCD9E8D57u
#define RNG_W0 0x9E3779B9u /* Weyl key increments (golden ratio, sqrt(3)-1) */
#define RNG_W1 0xBB67AE85u

void rng_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        /* The key is bumped between rounds, never before the first one. */
        if (r > 0) {
            k0 += RNG_W0;
            k1 += RNG_W1;
        }
        uint64_t p0 = (uint64_t)RNG_M0 * c0;
        uint64_t p1 = (uint64_t)RNG_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The block that holds words 4*block .. 4*block+3 of (seed, stream). */
static void rng_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4])
{
    const uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    const uint32_t ctr[4] = { (uint32_t)block, (uint32_t)(block >> 32),
                              (uint32_t)stream, (uint32_t)(stream >> 32) };
    rng_philox4x32_10(ctr, key, out);
}

uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint32_t w[4];
    rng_block(seed, stream, index / 4, w);
    return w[index % 4];
}

/* 24 bits fill a float mantissa exactly, so the value is exact and < 1. */
static float rng_to_unit(uint32_t u)
{
    return (float)(u >> 8) * 0x1p-24f;
}

float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    return rng_to_unit(rng_u32(seed, stream, index));
}

void rng_fill_uniform(float *out, size_t n, uint64_t seed, uint64_t stream,
                      double lo, double hi)
{
    /* One Philox block per four outputs; must equal rng_uniform word by word. */
    const double scale = hi - lo;
    uint32_t w[4];
    for (size_t i = 0; i < n; i++) {
        if (i % 4 == 0)
            rng_block(seed, stream, (uint64_t)i / 4, w);
        out[i] = (float)(lo + scale * (double)rng_to_unit(w[i % 4]));
    }
}

/* The 64-bit draw number `draw` of stream: words 2*draw (low half) and
 * 2*draw+1 (high half). Both words sit in the same block. */
static uint64_t rng_draw64(uint64_t seed, uint64_t stream, uint64_t draw)
{
    uint32_t w[4];
    uint64_t word = 2 * draw;
    rng_block(seed, stream, word / 4, w);
    return (uint64_t)w[word % 4] | (uint64_t)w[word % 4 + 1] << 32;
}

/* x * s as a 128-bit product split into halves, for s < 2^32; portable C
 * instead of unsigned __int128. */
static uint64_t rng_mul_hi_lo(uint64_t x, uint32_t s, uint64_t *lo)
{
    uint64_t a = (x & 0xffffffffu) * s; /* < 2^64 */
    uint64_t b = (x >> 32) * s;         /* < 2^64 - 2^33 + 2, so b + (a >> 32) fits */
    *lo = a + (b << 32);
    return (b + (a >> 32)) >> 32;
}

/* Uniform in [0, s) from draw number `draw` by Lemire's multiply-shift: the
 * high half of x*s, rejecting the low half below 2^64 mod s, which would make
 * some results one draw more likely. A rejection (odds below 2^-32) takes
 * its retry k (k = 1, 2, ...) from draw 2^32*k + draw, past every first draw
 * of any permutation (n < 2^32), so the result never depends on n. */
static uint32_t rng_below(uint64_t seed, uint64_t stream, uint64_t draw, uint32_t s)
{
    uint64_t lo;
    uint64_t hi = rng_mul_hi_lo(rng_draw64(seed, stream, draw), s, &lo);
    if (lo < s) {
        uint64_t t = (0 - (uint64_t)s) % s; /* 2^64 mod s */
        for (uint64_t k = 1; lo < t; k++)
            hi = rng_mul_hi_lo(rng_draw64(seed, stream, (k << 32) + draw), s, &lo);
    }
    return (uint32_t)hi;
}

void rng_permutation(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t stream)
{
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    /* Fisher-Yates from the top: position i swaps with j uniform in [0, i]. */
    for (uint32_t i = n; i-- > 1;) {
        uint32_t j = rng_below(seed, stream, i, i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
