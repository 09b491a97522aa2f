/* gpu_hash.cuh: XXH3-64 (seed 0, default secret; bit-exact with xxHash
 * 0.8's XXH3_64bits) as __host__ __device__ functions, the pieces of its
 * long path that a warp computes cooperatively, and the per-lane statistics
 * of stats.h; gpu_trace.cu builds hash.h's tree and the trace records from
 * them, tests/test_gpu_hash_host.cu checks every piece on the host.
 *
 * The long path (> 240 bytes) keeps 8 accumulators of 64 bits. Every 1 KiB
 * block of 16 stripes of 64 bytes adds to them, then scrambles them; the
 * additions of one block are independent of each other and exact (mod
 * 2^64), so 32 lanes may each add up a share of the block and the shares be
 * summed before the scramble. Lane l owns the 16-byte units at bytes 16 l
 * and 512 + 16 l of a block: words 2q and 2q+1 (q = l % 4) of stripes
 * s = l / 4 and 8 + s, so a warp's two loads per block are contiguous, and
 * its shares go to accumulators 2q and 2q+1 only. The 8 lanes of one q sum
 * their shares (3 shuffle rounds) and then all hold acc[2q], acc[2q+1].
 *
 * The quad layout (gh_quad_*): four lanes a leaf, lane q owning acc[2q]
 * and acc[2q+1] of the whole leaf, so that it reads words 2q and 2q+1 of
 * every stripe (16 bytes at 64 s + 16 q) and no lane waits for another
 * before a scramble; a warp takes 8 leaves at once. */
#ifndef DT_GPU_HASH_CUH
#define DT_GPU_HASH_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__USE_FAST_MATH__)
/* Fast math flushes subnormals, and min/max over them would differ from stats.c. */
#error "gpu_hash.cuh: build without --use_fast_math (the statistics need IEEE subnormals)"
#endif

#define GH_FN static __host__ __device__ __forceinline__

#define GH_P32_1 0x9E3779B1u
#define GH_P32_2 0x85EBCA77u
#define GH_P32_3 0xC2B2AE3Du
#define GH_P64_1 0x9E3779B185EBCA87ull
#define GH_P64_2 0xC2B2AE3D27D4EB4Full
#define GH_P64_3 0x165667B19E3779F9ull
#define GH_P64_4 0x85EBCA77C2B2AE63ull
#define GH_P64_5 0x27D4EB2F165667C5ull

#define GH_BLOCK 1024u  /* bytes of the long path between two scrambles */
#define GH_STRIPE 64u
#define GH_MIDSIZE_MAX 240u
#define GH_LEAF 16384u  /* hash.h's HASH_CHUNK_BYTES: 16 blocks, 4096 floats */

/* XXH3's default 192-byte secret as 24 little-endian words. */
#define GH_SECRET_WORDS                                                               \
    0xbe4ba423396cfeb8ull, 0x1cad21f72c81017cull, 0xdb979083e96dd4deull,                \
    0x1f67b3b7a4a44072ull, 0x78e5c0cc4ee679cbull, 0x2172ffcc7dd05a82ull,                \
    0x8e2443f7744608b8ull, 0x4c263a81e69035e0ull, 0xcb00c391bb52283cull,                \
    0xa32e531b8b65d088ull, 0x4ef90da297486471ull, 0xd8acdea946ef1938ull,                \
    0x3f349ce33f76faa8ull, 0x1d4f0bc7c7bbdcf9ull, 0x3159b4cd4be0518aull,                \
    0x647378d9c97e9fc8ull, 0xc3ebd33483acc5eaull, 0xeb6313faffa081c5ull,                \
    0x49daf0b751dd0d17ull, 0x9e68d429265516d3ull, 0xfca1477d58be162bull,                \
    0xce31d07ad1b8f88full, 0x280416958f3acb45ull, 0x7e404bbbcafbd7afull
static __constant__ uint64_t gh_secret_dev[24] = {GH_SECRET_WORDS};
static const uint64_t gh_secret_host[24] = {GH_SECRET_WORDS};

GH_FN uint64_t gh_secret_word(int i)
{
#ifdef __CUDA_ARCH__
    return gh_secret_dev[i];
#else
    return gh_secret_host[i];
#endif
}

/* The secret's little-endian word at byte offset off (off + 8 <= 192). */
GH_FN uint64_t gh_sec(int off)
{
    int w = off >> 3, r = (off & 7) * 8;
    return r ? (gh_secret_word(w) >> r) | (gh_secret_word(w + 1) << (64 - r)) : gh_secret_word(w);
}

/* Little-endian loads. On the device p must be 4-byte aligned: every read
 * the hash makes is at a multiple of 4 from the start or the end of its
 * input, so float data (and the leaf digests) of any length qualify. */
GH_FN uint32_t gh_read32(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
    return *(const uint32_t *)p;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}

GH_FN uint64_t gh_read64(const uint8_t *p)
{
    return (uint64_t)gh_read32(p) | (uint64_t)gh_read32(p + 4) << 32;
}

GH_FN uint64_t gh_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

GH_FN uint64_t gh_swap64(uint64_t x)
{
    x = (x & 0x00ff00ff00ff00ffull) << 8 | ((x >> 8) & 0x00ff00ff00ff00ffull);
    x = (x & 0x0000ffff0000ffffull) << 16 | ((x >> 16) & 0x0000ffff0000ffffull);
    return x << 32 | x >> 32;
}

/* The 128-bit product of a and b, its halves xored. */
GH_FN uint64_t gh_fold64(uint64_t a, uint64_t b)
{
#ifdef __CUDA_ARCH__
    return (a * b) ^ __umul64hi(a, b);
#else
    unsigned __int128 p = (unsigned __int128)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
#endif
}

GH_FN uint64_t gh_xxh64_avalanche(uint64_t h)
{
    h ^= h >> 33;
    h *= GH_P64_2;
    h ^= h >> 29;
    h *= GH_P64_3;
    return h ^ (h >> 32);
}

GH_FN uint64_t gh_avalanche(uint64_t h)
{
    h ^= h >> 37;
    h *= 0x165667919E3779F9ull;
    return h ^ (h >> 32);
}

GH_FN uint64_t gh_rrmxmx(uint64_t h, uint64_t len)
{
    h ^= gh_rotl64(h, 49) ^ gh_rotl64(h, 24);
    h *= 0x9FB21C651E98DF25ull;
    h ^= (h >> 35) + len;
    h *= 0x9FB21C651E98DF25ull;
    return h ^ (h >> 28);
}

/* ---- short inputs (0 to 240 bytes) ---- */

GH_FN uint64_t gh_len_0to16(const uint8_t *p, size_t len)
{
    if (len > 8) {
        uint64_t lo = gh_read64(p) ^ (gh_sec(24) ^ gh_sec(32));
        uint64_t hi = gh_read64(p + len - 8) ^ (gh_sec(40) ^ gh_sec(48));
        return gh_avalanche(len + gh_swap64(lo) + hi + gh_fold64(lo, hi));
    }
    if (len >= 4) {
        uint64_t in = (uint64_t)gh_read32(p + len - 4) + ((uint64_t)gh_read32(p) << 32);
        return gh_rrmxmx(in ^ (gh_sec(8) ^ gh_sec(16)), len);
    }
    if (len > 0) {
        uint32_t c = (uint32_t)p[0] << 16 | (uint32_t)p[len >> 1] << 24 | (uint32_t)p[len - 1] |
                     (uint32_t)len << 8;
        uint32_t flip = (uint32_t)gh_secret_word(0) ^ (uint32_t)(gh_secret_word(0) >> 32);
        return gh_xxh64_avalanche((uint64_t)(c ^ flip));
    }
    return gh_xxh64_avalanche(gh_sec(56) ^ gh_sec(64));
}

GH_FN uint64_t gh_mix16(const uint8_t *p, int secoff)
{
    return gh_fold64(gh_read64(p) ^ gh_sec(secoff), gh_read64(p + 8) ^ gh_sec(secoff + 8));
}

GH_FN uint64_t gh_len_17to128(const uint8_t *p, size_t len)
{
    uint64_t acc = len * GH_P64_1;
    int rounds = (int)((len - 1) / 32); /* 0 to 3 pairs beyond the first */
    for (int i = rounds; i >= 0; i--) {
        acc += gh_mix16(p + 16 * i, 32 * i);
        acc += gh_mix16(p + len - 16 * (i + 1), 32 * i + 16);
    }
    return gh_avalanche(acc);
}

GH_FN uint64_t gh_len_129to240(const uint8_t *p, size_t len)
{
    uint64_t acc = len * GH_P64_1;
    int rounds = (int)len / 16;
    for (int i = 0; i < 8; i++)
        acc += gh_mix16(p + 16 * i, 16 * i);
    acc = gh_avalanche(acc);
    for (int i = 8; i < rounds; i++)
        acc += gh_mix16(p + 16 * i, 16 * (i - 8) + 3);
    acc += gh_mix16(p + len - 16, 136 - 17);
    return gh_avalanche(acc);
}

/* ---- the long path, sequential ---- */

GH_FN uint64_t gh_init_acc(int i)
{
    switch (i) {
    case 0: return GH_P32_3;
    case 1: return GH_P64_1;
    case 2: return GH_P64_2;
    case 3: return GH_P64_3;
    case 4: return GH_P64_4;
    case 5: return GH_P32_2;
    case 6: return GH_P64_5;
    default: return GH_P32_1;
    }
}

/* Words 2q (d0) and 2q+1 (d1) of a stripe, s0 and s1 the secret words over
 * them: their additions to acc[2q] (*pa) and acc[2q+1] (*pb). A word adds
 * its own keyed product to its accumulator and its raw value to the
 * neighbour's (2q <-> 2q+1). */
GH_FN void gh_unit(uint64_t d0, uint64_t d1, uint64_t s0, uint64_t s1, uint64_t *pa, uint64_t *pb)
{
    uint64_t k0 = d0 ^ s0, k1 = d1 ^ s1;
    *pa += (k0 & 0xffffffffu) * (k0 >> 32) + d1;
    *pb += (k1 & 0xffffffffu) * (k1 >> 32) + d0;
}

GH_FN uint64_t gh_scramble(uint64_t acc, uint64_t s)
{
    acc ^= acc >> 47;
    acc ^= s;
    return acc * GH_P32_1;
}

/* One stripe at p with the secret at byte offset secoff. */
GH_FN void gh_stripe(uint64_t acc[8], const uint8_t *p, int secoff)
{
    for (int q = 0; q < 4; q++)
        gh_unit(gh_read64(p + 16 * q), gh_read64(p + 16 * q + 8), gh_sec(secoff + 16 * q),
                gh_sec(secoff + 16 * q + 8), &acc[2 * q], &acc[2 * q + 1]);
}

/* The secret offsets of the last stripe, the scramble and the merge. */
#define GH_SEC_LAST (192 - 64 - 7)
#define GH_SEC_SCRAMBLE (192 - 64)
#define GH_SEC_MERGE 11

GH_FN uint64_t gh_merge_pair(uint64_t a, uint64_t b, int q)
{
    return gh_fold64(a ^ gh_sec(GH_SEC_MERGE + 16 * q), b ^ gh_sec(GH_SEC_MERGE + 16 * q + 8));
}

/* mix = the sum of gh_merge_pair over q = 0..3 */
GH_FN uint64_t gh_merge_final(uint64_t mix, size_t len) { return gh_avalanche(len * GH_P64_1 + mix); }

GH_FN uint64_t gh_long(const uint8_t *p, size_t len)
{
    uint64_t acc[8];
    for (int i = 0; i < 8; i++)
        acc[i] = gh_init_acc(i);
    size_t nb = (len - 1) / GH_BLOCK;
    for (size_t b = 0; b < nb; b++) {
        for (int s = 0; s < 16; s++)
            gh_stripe(acc, p + b * GH_BLOCK + s * GH_STRIPE, 8 * s);
        for (int i = 0; i < 8; i++)
            acc[i] = gh_scramble(acc[i], gh_secret_word(GH_SEC_SCRAMBLE / 8 + i));
    }
    int nstr = (int)(((len - 1) - nb * GH_BLOCK) / GH_STRIPE);
    for (int s = 0; s < nstr; s++)
        gh_stripe(acc, p + nb * GH_BLOCK + s * GH_STRIPE, 8 * s);
    gh_stripe(acc, p + len - GH_STRIPE, GH_SEC_LAST);
    uint64_t mix = 0;
    for (int q = 0; q < 4; q++)
        mix += gh_merge_pair(acc[2 * q], acc[2 * q + 1], q);
    return gh_merge_final(mix, len);
}

/* XXH3_64bits(p, len) with seed 0, one thread. */
GH_FN uint64_t gh_xxh3_64(const void *data, size_t len)
{
    const uint8_t *p = (const uint8_t *)data;
    if (len <= 16)
        return gh_len_0to16(p, len);
    if (len <= 128)
        return gh_len_17to128(p, len);
    if (len <= GH_MIDSIZE_MAX)
        return gh_len_129to240(p, len);
    return gh_long(p, len);
}

/* ---- the long path, one lane's share (32 lanes) ---- */

/* A lane's secret words, held in registers for the whole call. */
struct gh_lane {
    uint64_t s0a, s0b;  /* its unit at byte 16 l of a block (stripe l / 4) */
    uint64_t s1a, s1b;  /* its unit at byte 512 + 16 l (stripe 8 + l / 4) */
    uint64_t ca, cb;    /* the scramble's, for acc[2q], acc[2q+1] */
    int lane, q, row;   /* l, l % 4, l / 4 */
};

GH_FN void gh_lane_init(struct gh_lane *c, int lane)
{
    int q = lane & 3, row = lane >> 2;
    c->lane = lane;
    c->q = q;
    c->row = row;
    /* stripe s, word i uses the secret word at byte 8 s + 8 i */
    c->s0a = gh_secret_word(row + 2 * q);
    c->s0b = gh_secret_word(row + 2 * q + 1);
    c->s1a = gh_secret_word(8 + row + 2 * q);
    c->s1b = gh_secret_word(9 + row + 2 * q);
    c->ca = gh_secret_word(GH_SEC_SCRAMBLE / 8 + 2 * q);
    c->cb = gh_secret_word(GH_SEC_SCRAMBLE / 8 + 2 * q + 1);
}

/* The lane's share of a full block: u0 = the words at byte 16 l of the
 * block, u1 = at byte 512 + 16 l. */
GH_FN void gh_lane_block(const struct gh_lane *c, uint64_t u0a, uint64_t u0b, uint64_t u1a,
                         uint64_t u1b, uint64_t *pa, uint64_t *pb)
{
    gh_unit(u0a, u0b, c->s0a, c->s0b, pa, pb);
    gh_unit(u1a, u1b, c->s1a, c->s1b, pa, pb);
}

/* The same for the 16th block of a full 16 KiB leaf: its stripe 15 is the
 * last stripe (nb = 15 scrambled blocks, then 15 stripes and the last one
 * at len - 64 = its stripe 15), so lanes 28..31 key it with the last
 * stripe's secret, and nothing is scrambled after it. */
GH_FN void gh_lane_leaf_end(const struct gh_lane *c, uint64_t u0a, uint64_t u0b, uint64_t u1a,
                            uint64_t u1b, uint64_t *pa, uint64_t *pb)
{
    int last = c->row == 7;
    gh_unit(u0a, u0b, c->s0a, c->s0b, pa, pb);
    gh_unit(u1a, u1b, last ? gh_sec(GH_SEC_LAST + 16 * c->q) : c->s1a,
            last ? gh_sec(GH_SEC_LAST + 16 * c->q + 8) : c->s1b, pa, pb);
}

/* The lane's share of what follows the last full block of an input of len
 * > 240 bytes: the whole stripes of the final partial block that fit in the
 * first len - 1 bytes and, for lanes 0..3, words 2q, 2q+1 of the last
 * stripe, the 64 bytes ending at len. LD is a loader: ld(off, &a, &b) reads the two words
 * at byte off of the input. */
template <class LD>
GH_FN void gh_lane_tail(const struct gh_lane *c, const LD &ld, size_t len, uint64_t *pa, uint64_t *pb)
{
    size_t nb = (len - 1) / GH_BLOCK, off = nb * GH_BLOCK;
    int nstr = (int)(((len - 1) - off) / GH_STRIPE);
    uint64_t a, b;
    if (c->row < nstr) {
        ld(off + 16 * (size_t)c->lane, &a, &b);
        gh_unit(a, b, c->s0a, c->s0b, pa, pb);
    }
    if (8 + c->row < nstr) {
        ld(off + 512 + 16 * (size_t)c->lane, &a, &b);
        gh_unit(a, b, c->s1a, c->s1b, pa, pb);
    }
    if (c->lane < 4) {
        ld(len - GH_STRIPE + 16 * (size_t)c->lane, &a, &b);
        gh_unit(a, b, gh_sec(GH_SEC_LAST + 16 * c->q), gh_sec(GH_SEC_LAST + 16 * c->q + 8), pa, pb);
    }
}

/* ---- the long path, one quad lane's share (4 lanes a leaf) ---- */

/* The secret words over stripe s's words 2q, 2q+1: bytes 8 s + 16 q on. */
GH_FN uint64_t gh_quad_sec(int s, int q) { return gh_secret_word(s + 2 * q); }

/* Lane q's accumulators acc[2q], acc[2q+1] of XXH3's long path over len >
 * 240 bytes (any length; LD as gh_lane_tail's, reading 16 bytes at a
 * multiple of 4), after the last stripe. The digest is gh_merge_final of
 * the sum over q of gh_merge_pair(a, b, q). */
template <class LD>
GH_FN void gh_quad_long(int q, const LD &ld, size_t len, uint64_t *pa, uint64_t *pb)
{
    uint64_t a = gh_init_acc(2 * q), b = gh_init_acc(2 * q + 1), d0, d1;
    size_t nb = (len - 1) / GH_BLOCK;
    for (size_t k = 0; k < nb; k++) {
        for (int s = 0; s < 16; s++) {
            ld(k * GH_BLOCK + GH_STRIPE * (size_t)s + 16 * (size_t)q, &d0, &d1);
            gh_unit(d0, d1, gh_quad_sec(s, q), gh_quad_sec(s + 1, q), &a, &b);
        }
        a = gh_scramble(a, gh_secret_word(GH_SEC_SCRAMBLE / 8 + 2 * q));
        b = gh_scramble(b, gh_secret_word(GH_SEC_SCRAMBLE / 8 + 2 * q + 1));
    }
    int nstr = (int)(((len - 1) - nb * GH_BLOCK) / GH_STRIPE);
    for (int s = 0; s < nstr; s++) {
        ld(nb * GH_BLOCK + GH_STRIPE * (size_t)s + 16 * (size_t)q, &d0, &d1);
        gh_unit(d0, d1, gh_quad_sec(s, q), gh_quad_sec(s + 1, q), &a, &b);
    }
    ld(len - GH_STRIPE + 16 * (size_t)q, &d0, &d1);
    gh_unit(d0, d1, gh_sec(GH_SEC_LAST + 16 * q), gh_sec(GH_SEC_LAST + 16 * q + 8), &a, &b);
    *pa = a;
    *pb = b;
}

/* ---- statistics (stats.h), one lane's share ---- */

/* MurmurHash3's 32-bit finalizer; f(k) = -1 when its top bit is set. */
GH_FN constexpr uint32_t gh_fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

/* The sign of element i is f(i mod 4096) f(4096 + i / 4096): within a leaf
 * of 4096 floats the first factor is its position, the second the leaf's
 * index. A table of a layout's signs has a row per lane and a bit per
 * element the lane meets in a leaf: bit 4 (u % 8) + e of word u / 8 of row
 * r is set when f is -1 at position pos(r, u) + e, for the lane's units u
 * of four floats in the order it meets them. */
template <int ROWS, int WORDS>
struct alignas(16) gh_sign_rows {
    uint32_t w[ROWS][WORDS];
};

template <int ROWS, int WORDS, class P>
static constexpr struct gh_sign_rows<ROWS, WORDS> gh_sign_rows_make(P pos)
{
    struct gh_sign_rows<ROWS, WORDS> t = {};
    for (int r = 0; r < ROWS; r++)
        for (int u = 0; u < 8 * WORDS; u++)
            for (int e = 0; e < 4; e++)
                if (gh_fmix32((uint32_t)(pos(r, u) + e)) >> 31)
                    t.w[r][u >> 3] |= 1u << (4 * (u & 7) + e);
    return t;
}

/* The warp layout: lane l meets positions 128 j + 4 l + e (unit j =
 * 0..31). In global memory, not __constant__: every lane reads its own
 * row. */
struct gh_sign_pos_warp {
    constexpr int operator()(int l, int j) const { return 128 * j + 4 * l; }
};
static __device__ const struct gh_sign_rows<32, 4> gh_sign_dev = gh_sign_rows_make<32, 4>(gh_sign_pos_warp());
static constexpr struct gh_sign_rows<32, 4> gh_sign_host = gh_sign_rows_make<32, 4>(gh_sign_pos_warp());

/* Lane l's four sign words (one 16-byte load per lane on the device). */
GH_FN void gh_lane_sign_row(int lane, uint32_t m[4])
{
#ifdef __CUDA_ARCH__
    uint4 v = *(const uint4 *)gh_sign_dev.w[lane];
    m[0] = v.x;
    m[1] = v.y;
    m[2] = v.z;
    m[3] = v.w;
#else
    for (int r = 0; r < 4; r++)
        m[r] = gh_sign_host.w[lane][r];
#endif
}

/* The quad layout: lane q meets positions 16 S + 4 q + e (stripe S =
 * 0..255 of the leaf). */
struct gh_sign_pos_quad {
    constexpr int operator()(int q, int S) const { return 16 * S + 4 * q; }
};
static __device__ const struct gh_sign_rows<4, 32> gh_quad_sign_dev = gh_sign_rows_make<4, 32>(gh_sign_pos_quad());
static constexpr struct gh_sign_rows<4, 32> gh_quad_sign_host = gh_sign_rows_make<4, 32>(gh_sign_pos_quad());

/* Lane q's sign words for stripes 16 k .. 16 k + 15 of a leaf (words 2 k
 * and 2 k + 1 of its row). */
GH_FN void gh_quad_signs(int q, int k, uint32_t *lo, uint32_t *hi)
{
#ifdef __CUDA_ARCH__
    uint2 v = *(const uint2 *)&gh_quad_sign_dev.w[q][2 * k];
    *lo = v.x;
    *hi = v.y;
#else
    *lo = gh_quad_sign_host.w[q][2 * k];
    *hi = gh_quad_sign_host.w[q][2 * k + 1];
#endif
}

/* What to xor into a lane's sign words for leaf L of a tensor: all ones
 * when the leaf's own sign f(4096 + L) is -1. */
GH_FN uint32_t gh_leaf_flip(uint64_t leaf)
{
    return (gh_fmix32((uint32_t)(4096 + leaf)) >> 31) ? 0xffffffffu : 0u;
}

/* A lane's running statistics: sk[e] gathers the elements with i % 16 =
 * 4q + e. Squares of floats are exact in double, so sq's fused update is
 * the same as stats.c's multiply-then-add. */
struct gh_lstats {
    double sq, sk[4];
    float mn, mx;       /* mn > mx while no finite element was seen */
    uint32_t nan, inf;
};

GH_FN float gh_as_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
#endif
}

GH_FN void gh_lstats_init(struct gh_lstats *s)
{
    s->sq = 0;
    for (int e = 0; e < 4; e++)
        s->sk[e] = 0;
    s->mn = gh_as_float(0x7f800000u);  /* +inf */
    s->mx = gh_as_float(0xff800000u);  /* -inf */
    s->nan = s->inf = 0;
}

#define GH_EXP 0x7f800000u

GH_FN void gh_lstats_one(struct gh_lstats *s, int e, uint32_t u, uint32_t neg)
{
    if ((u & GH_EXP) == GH_EXP) {
        if (u & 0x007fffffu)
            s->nan++;
        else
            s->inf++;
        return;
    }
    double d = gh_as_float(u ^ neg);
    float v = gh_as_float(u);
    s->sq = fma(d, d, s->sq);
    s->sk[e] += d;
    s->mn = fminf(s->mn, v);
    s->mx = fmaxf(s->mx, v);
}

/* Element e of a unit: its sign bit, from word m of the lane's signs at
 * bit sh + e, moved to bit 31. */
GH_FN uint32_t gh_neg(uint32_t m, int sh, int e) { return (m << (31 - sh - e)) & 0x80000000u; }

/* A full unit of four floats, as gh_lstats_unit, with no test for NaN or
 * Inf: the trace's fast path. A finite float's square is at most 2^256, so
 * a lane's sq stays finite over any tile of finite elements and turns Inf
 * or NaN (never back) at the first element that is not; a tile whose sq
 * ends non-finite is done again through gh_lstats_unit
 * (gt_leaf_tile). For finite units the two are the same operations in the
 * same order. The per-unit test was a branch between every two units,
 * which kept the compiler from interleaving one unit's loads and
 * arithmetic with the next's: the leaf kernel ran at 2.9 TB/s with it,
 * 3.5 without (H200; tests/bench/RESULTS.md). */
GH_FN void gh_lstats_unit_fast(struct gh_lstats *s, uint32_t u0, uint32_t u1, uint32_t u2, uint32_t u3,
                               uint32_t m, int sh)
{
    uint32_t u[4] = {u0, u1, u2, u3};
    for (int e = 0; e < 4; e++) {
        double d = gh_as_float(u[e] ^ gh_neg(m, sh, e));
        float v = gh_as_float(u[e]);
        s->sq = fma(d, d, s->sq);
        s->sk[e] += d;
        s->mn = fminf(s->mn, v);
        s->mx = fmaxf(s->mx, v);
    }
}

/* Whether a lane's sq shows no NaN or Inf met on the fast path. */
GH_FN bool gh_lstats_finite(const struct gh_lstats *s) { return s->sq <= 1.7976931348623157e308; }

/* A full unit of four floats (bits u[e]) at bit sh of sign word m. */
GH_FN void gh_lstats_unit(struct gh_lstats *s, uint32_t u0, uint32_t u1, uint32_t u2, uint32_t u3,
                          uint32_t m, int sh)
{
    uint32_t u[4] = {u0, u1, u2, u3};
    if ((u0 & GH_EXP) == GH_EXP || (u1 & GH_EXP) == GH_EXP || (u2 & GH_EXP) == GH_EXP ||
        (u3 & GH_EXP) == GH_EXP) {
        for (int e = 0; e < 4; e++)
            gh_lstats_one(s, e, u[e], gh_neg(m, sh, e));
        return;
    }
    gh_lstats_unit_fast(s, u0, u1, u2, u3, m, sh);
}

/* Quad lane q's statistics over a leaf of ne elements (1..4096; u: the
 * leaf's float bits, el(i) reading element i), leaf index L: its units 16
 * S + 4 q in order of S, each whole one through gh_lstats_unit, the
 * ragged one element by element. The fast path (gpu_trace_kern.cuh's
 * gt_quad_full) makes the same additions in the same order over a full
 * leaf. */
template <class EL>
GH_FN void gh_quad_stats(int q, const EL &el, uint32_t ne, uint64_t L, struct gh_lstats *st)
{
    uint32_t flip = gh_leaf_flip(L);
    for (uint32_t S = 0; 16 * S + 4 * (uint32_t)q < ne; S++) {
        uint32_t lo, hi, base = 16 * S + 4 * (uint32_t)q;
        gh_quad_signs(q, (int)(S >> 4), &lo, &hi);
        uint32_t m = ((S & 15) < 8 ? lo : hi) ^ flip;
        int sh = 4 * (int)(S & 7);
        if (base + 4 <= ne)
            gh_lstats_unit(st, el(base), el(base + 1), el(base + 2), el(base + 3), m, sh);
        else
            for (int e = 0; base + (uint32_t)e < ne; e++)
                gh_lstats_one(st, e, el(base + (uint32_t)e), gh_neg(m, sh, e));
    }
}

#endif
