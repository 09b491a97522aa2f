/* hash_sse2.c: the tensor tree hash with XXH3 inlined and compiled for sse2.
 * SSE2 is part of x86-64, so this variant runs everywhere; it is the fallback. */

/* The build passes no -m flags, so this pragma is how the file gets its
 * instruction set; it must come before any header so that xxhash.h, the
 * intrinsics headers and every function below are compiled for it. Clang
 * has no such pragma and does not define the ISA macros xxhash.h tests to
 * pull in the intrinsics, hence its own spelling and the explicit include. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("sse2"))), apply_to = function)
#include <immintrin.h>
#else
#pragma GCC target("sse2")
#endif

#define XXH_INLINE_ALL /* static copies: no clash with the other variants */
#define XXH_VECTOR XXH_SSE2
#include <xxhash.h>

#define HASH_IMPL_TREE
#include "hash_impl.h"

HASH_DEFINE_VARIANT(sse2, 0)

#if defined(__clang__)
#pragma clang attribute pop
#endif
