/* hash.h: the tensor hash, a tree of XXH3-64 leaves over fixed-size chunks.
 * A tensor's digest depends only on its bytes, so any backend (a GPU kernel
 * hashing chunks in parallel, the CPU) computes the identical value.
 *
 *   leaf_i = XXH3_64bits(bytes[i*C .. min((i+1)*C, n)))      C = HASH_CHUNK_BYTES
 *   digest = XXH3_64bits(leaf_0 .. leaf_{m-1} as little-endian uint64), m = ceil(n / C)
 *   (n = 0: m = 0 and digest = XXH3_64bits of the empty string)
 */
#ifndef DT_HASH_H
#define DT_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_CHUNK_BYTES 16384u

/* Tree digest of nbytes at data (see above). */
uint64_t hash_tensor(const void *data, size_t nbytes);

/* Plain XXH3-64 (seed 0) of a byte string, through the same fast path. */
uint64_t hash_bytes(const void *data, size_t nbytes);

/* The implementation in use: "avx512", "avx2" or "sse2". */
const char *hash_impl(void);

/* Force an implementation ("avx512", "avx2", "sse2" or "auto") for tests and
 * benchmarks; returns 0, or -1 (with dt_error set) if the CPU lacks it. */
int hash_set_impl(const char *name);

#endif
