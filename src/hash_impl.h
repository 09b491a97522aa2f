/* hash_impl.h: the contract between hash.c (the dispatcher) and the ISA
 * variants hash_sse2.c, hash_avx2.c and hash_avx512.c, plus the tree walk
 * that every variant compiles under its own instruction set. */
#ifndef DT_HASH_IMPL_H
#define DT_HASH_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* Each variant exports exactly these two; everything else it holds (the
 * inlined XXH3) is static, so the three copies of xxHash never clash. */
uint64_t hash_sse2_tensor(const void *data, size_t nbytes);
uint64_t hash_sse2_bytes(const void *data, size_t nbytes);
uint64_t hash_avx2_tensor(const void *data, size_t nbytes);
uint64_t hash_avx2_bytes(const void *data, size_t nbytes);
uint64_t hash_avx512_tensor(const void *data, size_t nbytes);
uint64_t hash_avx512_bytes(const void *data, size_t nbytes);

/* The tree walk, compiled once per variant: a variant file defines
 * HASH_IMPL_TREE after including xxhash.h (XXH_INLINE_ALL) so that the leaf
 * hashing below inlines that variant's XXH3 under its #pragma GCC target. */
#ifdef HASH_IMPL_TREE

#include "hash.h"

/* Leaves are gathered in batches of this many (2 KiB of stack, 4 MiB of
 * tensor). Tensors of up to one batch take the one-shot root; larger ones
 * stream their leaves through an XXH3 state, which yields the same digest as
 * one-shot XXH3 over all leaves, so the definition in hash.h holds. */
#define HASH_TREE_BATCH 256u

/* Write v little-endian whatever the host order: the root is defined over
 * little-endian leaves so that every backend agrees. */
static inline void hash_tree_put_le64(unsigned char *dst, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        dst[k] = (unsigned char)(v >> (8 * k));
}

/* Hash up to HASH_TREE_BATCH chunks from p (nbytes > 0) into buf; returns the
 * number of bytes consumed. */
static inline size_t hash_tree_batch(unsigned char *buf, size_t *nleaves,
                                     const unsigned char *p, size_t nbytes)
{
    size_t done = 0, m = 0;
    while (done < nbytes && m < HASH_TREE_BATCH) {
        size_t len = nbytes - done < HASH_CHUNK_BYTES ? nbytes - done : HASH_CHUNK_BYTES;
        hash_tree_put_le64(buf + 8 * m, XXH3_64bits(p + done, len));
        done += len;
        m++;
    }
    *nleaves = m;
    return done;
}

static uint64_t hash_tree(const void *data, size_t nbytes)
{
    const unsigned char *p = data;
    unsigned char buf[8 * HASH_TREE_BATCH];
    size_t m;

    if (nbytes == 0)
        return XXH3_64bits(buf, 0);
    size_t done = hash_tree_batch(buf, &m, p, nbytes);
    if (done == nbytes)
        return XXH3_64bits(buf, 8 * m);

    XXH3_state_t st; /* declared 64-byte aligned by xxhash.h */
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, buf, 8 * m);
    while (done < nbytes) {
        done += hash_tree_batch(buf, &m, p + done, nbytes - done);
        XXH3_64bits_update(&st, buf, 8 * m);
    }
    return XXH3_64bits_digest(&st);
}

/* A variant's two entry points, hash_NAME_tensor and hash_NAME_bytes. With
 * CLEAR, every exit clears the upper vector state (vzeroupper): code
 * compiled for plain SSE (libm's expf, our own loops) runs up to 30x slower
 * while it is dirty. */
#define HASH_CLEAR_0() ((void)0)
#define HASH_CLEAR_1() _mm256_zeroupper()
#define HASH_DEFINE_VARIANT(NAME, CLEAR)                              \
    uint64_t hash_##NAME##_tensor(const void *data, size_t nbytes)    \
    {                                                                 \
        uint64_t h = hash_tree(data, nbytes);                         \
        HASH_CLEAR_##CLEAR();                                         \
        return h;                                                     \
    }                                                                 \
    uint64_t hash_##NAME##_bytes(const void *data, size_t nbytes)     \
    {                                                                 \
        uint64_t h = XXH3_64bits(data, nbytes);                       \
        HASH_CLEAR_##CLEAR();                                         \
        return h;                                                     \
    }

#endif /* HASH_IMPL_TREE */

#endif
