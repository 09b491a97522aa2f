/* rng.h: the counter-based random number generator (Philox4x32-10) that makes
 * initial weights and data order a pure function of (seed, stream, index),
 * identical on every backend and independent of execution order. */
#ifndef DT_RNG_H
#define DT_RNG_H

#include <stddef.h>
#include <stdint.h>

/* One Philox4x32 block with 10 rounds (Salmon et al., SC'11). */
void rng_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* The 32-bit word number `index` of stream `stream` under `seed`:
 * key = {seed lo, seed hi}, ctr = {index/4 lo, index/4 hi, stream lo, stream hi},
 * word index%4 of the output block. */
uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t index);

/* Uniform in [0, 1): (rng_u32(...) >> 8) * 2^-24, exact in float. */
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);

/* out[i] = lo + (hi - lo) * u_i evaluated in double and rounded once to
 * float, u_i = rng_uniform(seed, stream, i). */
void rng_fill_uniform(float *out, size_t n, uint64_t seed, uint64_t stream,
                      double lo, double hi);

/* A uniformly random permutation of 0..n-1 (Fisher-Yates; the draw for
 * position i uses the 64-bit value from words 2i and 2i+1 of the stream,
 * reduced to [0, i] by Lemire's multiply-shift with rejection).
 * Precisely: perm starts as 0..n-1; for i = n-1 down to 1, swap perm[i] with
 * perm[j], j = high 64 bits of x*(i+1), x = word 2i | word 2i+1 << 32. The
 * draw is rejected when the low 64 bits are below 2^64 mod (i+1) (odds below
 * 2^-32); retry k = 1, 2, ... then reads words 2(2^32 k + i), 2(2^32 k + i)+1. */
void rng_permutation(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t stream);

#endif
