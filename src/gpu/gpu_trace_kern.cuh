/* gpu_trace_kern.cuh: the kernels of the trace records (hash.h's tree hash,
 * stats.h's statistics) of device buffers of float32, computed where they
 * live, and the host functions that lay a batch out and launch it. Included
 * by gpu_trace.cu (the batch, for the backends) and gpu_trace_one.cu
 * (libdivtrace's records); everything here is static, so each has its own
 * copy of the kernels.
 *
 * One call: one copy of the step's descriptor table to the device (once
 * for a captured step), three to five kernels, the last writing the
 * records into pinned host memory, one stream synchronisation.
 *  1. The leaf kernels, one warp per tile of consecutive 16 KiB leaves of
 *     one buffer: one leaf in a buffer of up to GT_SPLIT_LEAVES leaves,
 *     else GT_TILE_LEAVES (gt_tile_leaves: the tiling, and so the order of
 *     the statistics' sums, depends on the buffer's length alone). They
 *     take plain tiles only (whole leaves, 16-byte aligned), without the
 *     test for NaN and Inf, write the leaf digests and, in the same pass,
 *     the tile's statistics: one partial record per tile.
 *     gt_leaf_kernel (tiles of one leaf): the warp hashes its leaf
 *     cooperatively (see gpu_hash.cuh: each lane loads 2 x 16 bytes of
 *     every 1 KiB block, the 8 lanes of one accumulator pair sum their
 *     shares in 3 shuffle rounds before the scramble).
 *     gt_quad_kernel (tiles of GT_TILE_LEAVES): one quad of lanes a leaf,
 *     each lane an accumulator pair over the whole leaf (gpu_hash.cuh's
 *     quad layout), no shuffle before a scramble.
 *     gt_again_kernel then does the rest of the tiles the careful way: the
 *     tiles that are not plain, and those whose sum of squares came out
 *     non-finite (gh_lstats_unit_fast).
 *  2. gt_group_kernel (only for buffers of more than 30 leaves): sums
 *     their tile partials in groups of 64 tiles, one warp a group, over
 *     the whole GPU.
 *  3. gt_root_kernel: finishes each buffer's record: sums its tile
 *     partials, or a large buffer's groups (fixed order), and hashes its
 *     leaf digests into the root. A
 *     buffer of at most 30 leaves (a root of <= 240 bytes) takes one warp,
 *     16 to a block; a larger one a block of GT_ROOT_THREADS (the root's
 *     long path: the warps compute the 1 KiB blocks' shares, 8 threads run
 *     the chain of scrambles).
 * The host's descriptor table (buffers, tile -> buffer map, root work
 * items) is built in pinned memory and copied in one piece; the scratch
 * (device and pinned) is kept across calls and grown on demand.
 * Every floating-point reduction has a fixed shape (per lane in element
 * order, then shuffle butterflies, then per thread in tile order, then a
 * fixed tree), no atomics: records are bitwise identical run to run. */
#ifndef DT_GPU_TRACE_KERN_CUH
#define DT_GPU_TRACE_KERN_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "gpu_hash.cuh"

#ifndef GT_TILE_LEAVES /* -D for benchmarks of other tilings (tests/bench/RESULTS.md) */
#define GT_TILE_LEAVES 8u  /* leaves per warp in a large buffer: 128 KiB, one partial record */
#endif
/* A warp hashes its leaves one after the other at well under 1 GB/s (the
 * kernel's speed comes from thousands of warps at once), so in a step of
 * small buffers the longest tile sets the kernel's time: 8 leaves took
 * about 0.1 ms. Buffers of up to 8 MiB get one leaf a tile. */
#ifndef GT_SPLIT_LEAVES
#define GT_SPLIT_LEAVES 512u
#endif
/* Two warps a block: a block's resources are freed when its last warp is
 * done, and the tiles of a batch differ in length. 12 blocks per SM: the
 * leaf kernel in 80 registers (ptxas of CUDA 13: one 8-byte spill), 24
 * warps per SM. */
#define GT_LEAF_THREADS 64
#ifndef GT_LEAF_BLOCKS_PER_SM
#define GT_LEAF_BLOCKS_PER_SM 12
#endif
/* -DGT_LEAF_PIPE=1 (a measurement build): the batch's leaf kernel loads
 * each block a block ahead (gt_leaf_mem's PIPE), as a lone warp does */
#ifndef GT_LEAF_PIPE
#define GT_LEAF_PIPE false
#endif
#ifndef GT_PREFETCH_BLOCKS
#define GT_PREFETCH_BLOCKS 8 /* L2 prefetch distance of a leaf's loads, in 1 KiB blocks */
#endif
/* The root kernel: 16 warps a block. A large buffer's root was 19% of the
 * time of a 1 GiB record with 4 warps (0.091 of 0.492 ms, H200): its
 * thousands of tile partials and hundreds of 1 KiB blocks of digests are
 * read by the whole block at once now. */
#define GT_ROOT_THREADS 512
#define GT_ROOT_WARPS (GT_ROOT_THREADS / 32)
#define GT_ROOT_CHUNK 256  /* 1 KiB blocks of leaf digests per round of the root */
#define GT_REC_WORDS (sizeof(struct trace_oprec) / 8)
static_assert(sizeof(struct trace_oprec) % 8 == 0, "a record is whole 8-byte words");
#define GT_FULL 0xffffffffu
#define GT_LEAF_FLOATS (GH_LEAF / 4u)

/* One buffer of the batch, as the kernels see it. */
struct gt_desc {
    const float *ptr;
    uint64_t count;    /* elements */
    uint64_t leaf0;    /* its first slot in the digest array (even: 16-byte aligned) */
    uint64_t nleaves;
    uint32_t tile0, ntiles;
    uint32_t aligned;  /* ptr is 16-byte aligned (vector loads) */
    uint32_t tile_leaves; /* leaves per tile (gt_tile_leaves) */
    uint32_t out;      /* its record's index in the kernels' record array */
};

static __host__ __device__ uint32_t gt_tile_leaves(uint64_t nleaves)
{
    return nleaves <= GT_SPLIT_LEAVES ? 1u : GT_TILE_LEAVES;
}

/* The statistics of one tile: sk[k] over elements with i % 16 = k. */
struct gt_part {
    double sq, sk[TRACE_SKETCH_LEN];
    float mn, mx;      /* mn > mx: no finite element */
    uint32_t nan, inf;
};


/* ---- device ---- */

/* Sum the shares of the 8 lanes with the same q (lane % 4). */
static __device__ __forceinline__ void gt_sum_q(uint64_t *pa, uint64_t *pb)
{
#pragma unroll
    for (int m = 4; m < 32; m <<= 1) {
        *pa += __shfl_xor_sync(GT_FULL, *pa, m);
        *pb += __shfl_xor_sync(GT_FULL, *pb, m);
    }
}

/* The digest from acc[2q], acc[2q+1] as every lane holds them. */
static __device__ __forceinline__ uint64_t gt_merge(const struct gh_lane *c, uint64_t a, uint64_t b,
                                                    size_t len)
{
    uint64_t mix = gh_merge_pair(a, b, c->q);
    mix += __shfl_xor_sync(GT_FULL, mix, 1);
    mix += __shfl_xor_sync(GT_FULL, mix, 2);
    return gh_merge_final(mix, len);
}

/* Loader for gh_lane_tail and the generic long path: two words at byte off. */
struct gt_ld {
    const uint8_t *p;
    int a16;  /* p is 16-byte aligned */
    __host__ __device__ void operator()(size_t off, uint64_t *a, uint64_t *b) const
    {
#ifdef __CUDA_ARCH__
        if (a16 && !(off & 15)) {
            uint4 v = __ldg((const uint4 *)(p + off));
            *a = (uint64_t)v.x | (uint64_t)v.y << 32;
            *b = (uint64_t)v.z | (uint64_t)v.w << 32;
            return;
        }
#endif
        *a = gh_read64(p + off);
        *b = gh_read64(p + off + 8);
    }
};

/* XXH3 of len > 240 bytes by one warp (any length; p 4-byte aligned, len a
 * multiple of 4). Every lane returns the digest. */
static __device__ uint64_t gt_warp_long(const struct gh_lane *c, const struct gt_ld &ld, size_t len)
{
    uint64_t a = gh_init_acc(2 * c->q), b = gh_init_acc(2 * c->q + 1);
    size_t nb = (len - 1) / GH_BLOCK;
    for (size_t k = 0; k < nb; k++) {
        uint64_t u0a, u0b, u1a, u1b, pa = 0, pb = 0;
        ld(k * GH_BLOCK + 16 * (size_t)c->lane, &u0a, &u0b);
        ld(k * GH_BLOCK + 512 + 16 * (size_t)c->lane, &u1a, &u1b);
        gh_lane_block(c, u0a, u0b, u1a, u1b, &pa, &pb);
        gt_sum_q(&pa, &pb);
        a = gh_scramble(a + pa, c->ca);
        b = gh_scramble(b + pb, c->cb);
    }
    uint64_t pa = 0, pb = 0;
    gh_lane_tail(c, ld, len, &pa, &pb);
    gt_sum_q(&pa, &pb);
    return gt_merge(c, a + pa, b + pb, len);
}

static __device__ __forceinline__ uint64_t gt_w(uint32_t lo, uint32_t hi)
{
    return (uint64_t)lo | (uint64_t)hi << 32;
}

/* Ask L2 for the 128-byte line at p (no register waits for it). */
static __device__ __forceinline__ void gt_prefetch(const void *p)
{
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* The lane's two 16-byte units of 1 KiB block k (0..15) of a full,
 * 16-byte aligned leaf at x, read from memory: units 16 lane and 512 +
 * 16 lane of the block. m: the lane's sign words for this leaf; ahead: the
 * bytes of the buffer from x on, the bound of the prefetches, which run
 * GT_PREFETCH_BLOCKS blocks ahead of the loads (into the next leaf near
 * the end): the warp's own registers only cover the block it works on.
 * PIPE: each block's loads are issued a block ahead, into registers of
 * their own; the same values in the same order (a lone warp, as in a
 * single tensor's record, then waits less; the batch kernel has no
 * registers to spare for it). */
template <bool PIPE>
struct gt_leaf_mem {
    const uint4 *v;
    const float *x;
    size_t ahead;
    int lane;
    uint4 n0, n1;
    __device__ __forceinline__ gt_leaf_mem(const float *x_, size_t ahead_, int lane_)
        : v((const uint4 *)x_ + lane_), x(x_), ahead(ahead_), lane(lane_)
    {
        if (PIPE) {
            n0 = __ldcs(v);
            n1 = __ldcs(v + 32);
        }
    }
    __device__ __forceinline__ void operator()(int k, uint4 *c0, uint4 *c1)
    {
        size_t pf = GH_BLOCK * (size_t)(k + GT_PREFETCH_BLOCKS) + 128 * (size_t)lane;
        if (GT_PREFETCH_BLOCKS > 0 && lane < 8 && pf < ahead)
            gt_prefetch((const char *)x + pf);
        if (PIPE) {
            *c0 = n0;
            *c1 = n1;
            if (k < 15) {
                n0 = __ldcs(v + 64 * (k + 1));
                n1 = __ldcs(v + 64 * (k + 1) + 32);
            }
        } else {
            *c0 = __ldcs(v + 64 * k);
            *c1 = __ldcs(v + 64 * k + 32);
        }
    }
};

/* A full leaf (4096 floats) whose values src gives, block by block
 * (src(k, &c0, &c1): the lane's units 16 lane and 512 + 16 lane of 1 KiB
 * block k, as gt_leaf_mem reads them): hash and statistics in one pass.
 * The source may read them (the trace) or compute them (a kernel that
 * writes a buffer and hashes it as it goes); the digest and the
 * statistics are the same for the same values. m: the lane's sign words
 * for this leaf. FAST: the units' statistics without the test for NaN
 * and Inf (gh_lstats_unit_fast), for a caller that checks the lanes' sq
 * after the tile and does it again without FAST where one is not finite. */
template <bool FAST, class S>
static __device__ __forceinline__ uint64_t gt_leaf_full(const struct gh_lane *c, S &src, const uint32_t m[4],
                                                        struct gh_lstats *st)
{
    uint64_t a = gh_init_acc(2 * c->q), b = gh_init_acc(2 * c->q + 1);
#pragma unroll
    for (int k = 0; k < 16; k++) {
        uint4 c0, c1;
        src(k, &c0, &c1);
        uint64_t pa = 0, pb = 0;
        if (k < 15)
            gh_lane_block(c, gt_w(c0.x, c0.y), gt_w(c0.z, c0.w), gt_w(c1.x, c1.y), gt_w(c1.z, c1.w),
                          &pa, &pb);
        else
            gh_lane_leaf_end(c, gt_w(c0.x, c0.y), gt_w(c0.z, c0.w), gt_w(c1.x, c1.y),
                             gt_w(c1.z, c1.w), &pa, &pb);
        /* units j = 2k and 2k + 1: sign word j / 8, bits 4 (j % 8) + e */
        if (FAST) {
            gh_lstats_unit_fast(st, c0.x, c0.y, c0.z, c0.w, m[(2 * k) >> 3], 4 * ((2 * k) & 7));
            gh_lstats_unit_fast(st, c1.x, c1.y, c1.z, c1.w, m[(2 * k + 1) >> 3], 4 * ((2 * k + 1) & 7));
        } else {
            gh_lstats_unit(st, c0.x, c0.y, c0.z, c0.w, m[(2 * k) >> 3], 4 * ((2 * k) & 7));
            gh_lstats_unit(st, c1.x, c1.y, c1.z, c1.w, m[(2 * k + 1) >> 3], 4 * ((2 * k + 1) & 7));
        }
        gt_sum_q(&pa, &pb);
        a += pa;
        b += pb;
        if (k < 15) {
            a = gh_scramble(a, c->ca);
            b = gh_scramble(b, c->cb);
        }
    }
    return gt_merge(c, a, b, GH_LEAF);
}

/* A buffer's last leaf (ne < 4096 elements) or a leaf of a buffer that is
 * not 16-byte aligned: statistics over the same units as above, then the
 * hash in a second pass (from cache). */
static __device__ uint64_t gt_leaf_part(const struct gh_lane *c, const float *x, uint32_t ne,
                                        int a16, const uint32_t m[4], struct gh_lstats *st)
{
    const uint32_t *u = (const uint32_t *)x;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        uint32_t base = 128u * j + 4u * (uint32_t)c->lane;
        if (128u * j >= ne)
            break;
        if (a16 && base + 4 <= ne) {
            uint4 v = __ldg((const uint4 *)x + 32 * j + c->lane);
            gh_lstats_unit(st, v.x, v.y, v.z, v.w, m[j >> 3], 4 * (j & 7));
        } else {
            for (int e = 0; e < 4; e++)
                if (base + e < ne)
                    gh_lstats_one(st, e, u[base + e], gh_neg(m[j >> 3], 4 * (j & 7), e));
        }
    }
    size_t len = 4 * (size_t)ne;
    if (len <= GH_MIDSIZE_MAX)
        return gh_xxh3_64(x, len);
    struct gt_ld ld = {(const uint8_t *)x, a16};
    return gt_warp_long(c, ld, len);
}

/* Combine the 32 lanes' statistics: all lanes end with the warp's sums,
 * lane l's sk[e] being element class 4 (l % 4) + e. */
static __device__ void gt_lstats_reduce(struct gh_lstats *s)
{
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
        s->sq += __shfl_xor_sync(GT_FULL, s->sq, m);
        s->mn = fminf(s->mn, __shfl_xor_sync(GT_FULL, s->mn, m));
        s->mx = fmaxf(s->mx, __shfl_xor_sync(GT_FULL, s->mx, m));
        s->nan += __shfl_xor_sync(GT_FULL, s->nan, m);
        s->inf += __shfl_xor_sync(GT_FULL, s->inf, m);
    }
#pragma unroll
    for (int m = 4; m < 32; m <<= 1)
        for (int e = 0; e < 4; e++)
            s->sk[e] += __shfl_xor_sync(GT_FULL, s->sk[e], m);
}

/* A tile's statistics, the warp's lanes' sums combined, into *o. */
static __device__ __forceinline__ void gt_tile_store(struct gh_lstats *st, struct gt_part *o, int lane)
{
    gt_lstats_reduce(st);
    if (lane == 0) {
        o->sq = st->sq;
        o->mn = st->mn;
        o->mx = st->mx;
        o->nan = st->nan;
        o->inf = st->inf;
    }
    if (lane < 4)
        for (int e = 0; e < 4; e++)
            o->sk[4 * lane + e] = st->sk[e];
}

/* The leaves of tile g of buffer d by one warp: their digests into dig,
 * their statistics into *st (FAST: see gt_leaf_full). */
template <bool PIPE, bool FAST>
static __device__ __forceinline__ void gt_tile_leaves(uint64_t *dig, const struct gt_desc &d, uint32_t g,
                                                      int lane, const struct gh_lane &c, struct gh_lstats &st)
{
    uint32_t m[4], flip = 0; /* the lane's sign words, of leaf l once flipped */
    gh_lane_sign_row(lane, m);
    uint32_t tl = d.tile_leaves;
    uint32_t l = (g - d.tile0) * tl; /* leaf index in the buffer */
    uint32_t nl = d.nleaves - l < tl ? (uint32_t)(d.nleaves - l) : tl;
    const float *x = d.ptr + (size_t)l * GT_LEAF_FLOATS;
    uint64_t left = d.count - (uint64_t)l * GT_LEAF_FLOATS; /* elements from x on */
    int a16 = (int)d.aligned;
    /* the first blocks of the tile, which no earlier load prefetched */
    for (size_t pf = 128 * (size_t)lane; (FAST || a16) && pf < GH_BLOCK * (size_t)GT_PREFETCH_BLOCKS && pf < 4 * left;
         pf += 32 * 128)
        gt_prefetch((const char *)x + pf);
    for (uint32_t i = 0; i < nl; i++, l++, x += GT_LEAF_FLOATS, left -= GT_LEAF_FLOATS) {
        uint32_t f = gh_leaf_flip(l);
        for (int r = 0; r < 4; r++)
            m[r] ^= f ^ flip;
        flip = f;
        uint64_t h;
        if (FAST || (left >= GT_LEAF_FLOATS && a16)) { /* FAST: a plain tile (gt_tile_plain) */
            gt_leaf_mem<PIPE> src(x, 4 * (size_t)left, lane);
            h = gt_leaf_full<FAST>(&c, src, m, &st);
        } else {
            h = gt_leaf_part(&c, x, left < GT_LEAF_FLOATS ? (uint32_t)left : GT_LEAF_FLOATS, a16, m, &st);
        }
        if (lane == 0)
            dig[d.leaf0 + l] = h;
    }
}

/* Whether tile g of buffer d is whole 16 KiB leaves at a 16-byte aligned
 * address: the leaf kernel's fast path takes those, gt_again_kernel the
 * rest (a buffer's last tile, when its length is not whole leaves, and
 * every tile of a buffer that is not aligned). */
static __device__ __forceinline__ bool gt_tile_plain(const struct gt_desc &d, uint32_t g)
{
    uint64_t end = (uint64_t)(g - d.tile0 + 1) * d.tile_leaves;
    if (end > d.nleaves)
        end = d.nleaves;
    return d.aligned && d.count >= end * GT_LEAF_FLOATS;
}

/* Tile g of buffer d by one warp: its leaf digests into dig, its
 * statistics into part[g]. FAST (the leaf kernel, plain tiles only):
 * without the test for NaN and Inf, so that a tile that held one ends
 * with a non-finite part[g].sq, and gt_again_kernel does it again; without
 * FAST (the careful way) a tile's record is final. Either way the digests
 * are the same, and so are the statistics of a tile of finite elements. */
template <bool PIPE, bool FAST>
static __device__ __forceinline__ void gt_leaf_tile(uint64_t *dig, struct gt_part *part,
                                                    const struct gt_desc &d, uint32_t g, int lane)
{
    struct gh_lane c;
    gh_lane_init(&c, lane);
    struct gh_lstats st;
    gh_lstats_init(&st);
    gt_tile_leaves<PIPE, FAST>(dig, d, g, lane, c, st);
    gt_tile_store(&st, part + g, lane);
}

/* The plain tiles of one leaf (buffers of at most GT_SPLIT_LEAVES leaves),
 * tiles 0 .. n - 1 (gt_fill numbers them before the quad tiles): one warp
 * a tile; LOOP: a capped grid
 * (gpu_trace_set_caps), each warp taking tiles i, i + warps, ...; else one
 * tile a warp (the loop's live values cost the kernel spills in its 80
 * registers). */
template <bool LOOP>
static __global__ void __launch_bounds__(GT_LEAF_THREADS, GT_LEAF_BLOCKS_PER_SM)
gt_leaf_kernel(uint64_t *dig, /* leaf digests, desc[k].leaf0 + L */
               struct gt_part *part, /* (ntiles) */
               const struct gt_desc *desc, const uint32_t *tile_buf, /* (ntiles): buffer of a tile */
               uint32_t n)
{
    /* (a first tile other than 0 here, added to g, cost the kernel 76
     * bytes of spills where it has 24: ptxas, CUDA 13) */
    int lane = (int)(threadIdx.x & 31);
    uint32_t g = (blockIdx.x * GT_LEAF_THREADS + threadIdx.x) >> 5;
    if constexpr (!LOOP) {
        if (g >= n)
            return;
        const struct gt_desc &d = desc[tile_buf[g]];
        if (gt_tile_plain(d, g))
            gt_leaf_tile<GT_LEAF_PIPE, true>(dig, part, d, g, lane);
    } else {
        for (uint32_t stride = (gridDim.x * GT_LEAF_THREADS) >> 5; g < n; g += stride)
            if (gt_tile_plain(desc[tile_buf[g]], g))
                gt_leaf_tile<false, true>(dig, part, desc[tile_buf[g]], g, lane);
    }
}

/* ---- the quad layout: tiles of GT_TILE_LEAVES leaves (buffers of more
 * than GT_SPLIT_LEAVES), one warp a tile, one quad a leaf ----
 * A quad lane works through its leaf's 256 stripes alone (gpu_hash.cuh's
 * quad layout), so the warp needs no shuffle before a scramble: the hash
 * alone ran at the DRAM's pace (4.2 to 4.4 TB/s against 2.9 for the
 * shared blocks, 1 GiB, H200), and beside a compute-bound kernel it took
 * half the time from it (tests/bench/RESULTS.md). The statistics of a
 * quad tile: lane q of quad j sums its units of leaf j in order (units 16 S
 * + 4 q, S = 0..255: gh_quad_stats), then the quads' sketch sums in a
 * butterfly (lanes xor 4, 8, 16) and everything else over all 32 lanes
 * (xor 1, 2, 4, 8, 16); a quad without a leaf adds its initial values. */
static_assert(GT_TILE_LEAVES >= 1 && GT_TILE_LEAVES <= 8, "a quad tile has at most 8 leaves, one a quad");

/* Element reader of gh_quad_stats. */
struct gt_el {
    const uint32_t *u;
    __host__ __device__ __forceinline__ uint32_t operator()(uint32_t i) const { return u[i]; }
};

/* Lane q's share of a full, 16-byte aligned leaf L at x: the hash's
 * accumulators (returned as gh_merge_pair's term) and, with the units'
 * test for NaN and Inf left out (gh_lstats_unit_fast; the caller checks
 * sq), the statistics, in gh_quad_stats's order. sw: the 24 secret words
 * in shared memory. */
static __device__ __forceinline__ uint64_t gt_quad_full(int q, const float *x, uint64_t L, const uint64_t *sw,
                                                        struct gh_lstats *st)
{
    const uint4 *v = (const uint4 *)x + q;
    uint64_t a = gh_init_acc(2 * q), b = gh_init_acc(2 * q + 1);
    uint64_t ca = sw[GH_SEC_SCRAMBLE / 8 + 2 * q], cb = sw[GH_SEC_SCRAMBLE / 8 + 2 * q + 1];
    uint64_t la = gh_sec(GH_SEC_LAST + 16 * q), lb = gh_sec(GH_SEC_LAST + 16 * q + 8);
    uint32_t flip = gh_leaf_flip(L);
    const uint64_t *sq = sw + 2 * q; /* stripe s: sq[s], sq[s + 1] */
#pragma unroll 1
    for (int k = 0; k < 16; k++) {
        uint32_t m0, m1;
        gh_quad_signs(q, k, &m0, &m1);
        m0 ^= flip;
        m1 ^= flip;
        uint64_t lo = sq[0];
#pragma unroll
        for (int s = 0; s < 16; s++) {
            uint4 u = __ldcs(v + 64 * k + 4 * s);
            uint64_t hi = sq[s + 1], k0 = lo, k1 = hi;
            if (s == 15 && k == 15) { /* the leaf's last stripe */
                k0 = la;
                k1 = lb;
            }
            gh_unit(gt_w(u.x, u.y), gt_w(u.z, u.w), k0, k1, &a, &b);
            gh_lstats_unit_fast(st, u.x, u.y, u.z, u.w, s < 8 ? m0 : m1, 4 * (s & 7));
            lo = hi;
        }
        if (k < 15) {
            a = gh_scramble(a, ca);
            b = gh_scramble(b, cb);
        }
    }
    return gh_merge_pair(a, b, q);
}

/* Quad tile g of buffer d by one warp: its leaves' digests into dig, its
 * statistics into part[g]. FAST: a plain tile, through gt_quad_full (sw:
 * the secret in shared memory); else the careful way, any leaves, aligned
 * or not (gh_quad_stats, then gh_quad_long, or XXH3's short paths for a
 * last leaf of at most 240 bytes). */
template <bool FAST>
static __device__ __forceinline__ void gt_quad_tile(uint64_t *dig, struct gt_part *part, const struct gt_desc &d,
                                                    uint32_t g, int lane, const uint64_t *sw)
{
    int q = lane & 3;
    uint64_t L = (uint64_t)(g - d.tile0) * d.tile_leaves + (uint64_t)(lane >> 2);
    bool has = (uint32_t)(lane >> 2) < d.tile_leaves && L < d.nleaves;
    struct gh_lstats st;
    gh_lstats_init(&st);
    uint64_t mix = 0, h = 0;
    size_t len = 0;
    bool small = false;
    if (has) {
        const float *x = d.ptr + L * GT_LEAF_FLOATS;
        uint64_t left = d.count - L * GT_LEAF_FLOATS;
        uint32_t ne = left < GT_LEAF_FLOATS ? (uint32_t)left : GT_LEAF_FLOATS;
        len = 4 * (size_t)ne;
        if (FAST) {
            mix = gt_quad_full(q, x, L, sw, &st);
        } else {
            struct gt_el el = {(const uint32_t *)x};
            gh_quad_stats(q, el, ne, L, &st);
            if (len <= GH_MIDSIZE_MAX) {
                small = true;
                h = gh_xxh3_64(x, len);
            } else {
                struct gt_ld ld = {(const uint8_t *)x, (int)d.aligned};
                uint64_t a, b;
                gh_quad_long(q, ld, len, &a, &b);
                mix = gh_merge_pair(a, b, q);
            }
        }
    }
    mix += __shfl_xor_sync(GT_FULL, mix, 1);
    mix += __shfl_xor_sync(GT_FULL, mix, 2);
    if (has && q == 0)
        dig[d.leaf0 + L] = small ? h : gh_merge_final(mix, len);
    gt_tile_store(&st, part + g, lane); /* the butterflies of the order above */
}

/* 10 blocks an SM: ptxas gives the quad kernel 96 registers (0 spills),
 * where at 12 it fits 80 and hoists fewer loads: over 1 GiB 3.7 TB/s
 * against 3.4, and beside SGEMMs 0.38 and 0.36 of its time taken from
 * them against 0.56 and 0.46 (bench_gpu_leaf_layout, H200; 16 blocks:
 * 3.6 TB/s, 0.56). */
#ifndef GT_QUAD_BLOCKS_PER_SM
#define GT_QUAD_BLOCKS_PER_SM 10
#endif
/* The plain quad tiles, tiles base .. end - 1 (LOOP as the leaf
 * kernel's). */
template <bool LOOP>
static __global__ void __launch_bounds__(GT_LEAF_THREADS, GT_QUAD_BLOCKS_PER_SM)
gt_quad_kernel(uint64_t *dig, struct gt_part *part, const struct gt_desc *desc, const uint32_t *tile_buf,
               uint32_t base, uint32_t end)
{
    __shared__ uint64_t sw[24];
    if (threadIdx.x < 24)
        sw[threadIdx.x] = gh_secret_word((int)threadIdx.x);
    __syncthreads();
    int lane = (int)(threadIdx.x & 31);
    uint32_t g = base + ((blockIdx.x * GT_LEAF_THREADS + threadIdx.x) >> 5);
    for (uint32_t stride = LOOP ? (gridDim.x * GT_LEAF_THREADS) >> 5 : end; g < end; g += stride) {
        const struct gt_desc &d = desc[tile_buf[g]];
        if (gt_tile_plain(d, g))
            gt_quad_tile<true>(dig, part, d, g, lane, sw);
    }
}

/* After the leaf kernel, the careful way, one warp a tile: the tiles it
 * left (not plain) and those whose partial sq came out non-finite (a NaN
 * or an Inf met on the fast path). The rest of the warps read a few words
 * and leave. A kernel of its own, because the careful path (partial
 * leaves, specials) inside the leaf kernel cost the fast one its
 * registers: 108 to 576 bytes of spills (ptxas, CUDA 13) where it has
 * 24. */
static __global__ void __launch_bounds__(256)
gt_again_kernel(uint64_t *dig, struct gt_part *part, const struct gt_desc *desc, const uint32_t *tile_buf,
                uint32_t ntiles)
{
    int lane = (int)(threadIdx.x & 31);
    uint32_t g = (blockIdx.x * 256 + threadIdx.x) >> 5;
    if (g >= ntiles)
        return;
    const struct gt_desc &d = desc[tile_buf[g]];
    if (!gt_tile_plain(d, g) || !(part[g].sq <= 1.7976931348623157e308)) {
        __syncwarp(); /* every lane has read the old sq before lane 0 writes */
        if (d.tile_leaves > 1)
            gt_quad_tile<false>(dig, part, d, g, lane, NULL);
        else
            gt_leaf_tile<false, false>(dig, part, d, g, lane);
    }
}

/* The leaf kernels over ntiles tiles: the leaf kernel over the first
 * ntiles - nquad, the quad kernel over the last nquad, each capped at
 * cap_leaf blocks when not 0; then the second pass. */
static void gt_leaves(uint64_t *dig, struct gt_part *part, const struct gt_desc *desc, const uint32_t *map,
                      uint32_t nquad, uint32_t ntiles, unsigned cap_leaf, cudaStream_t s)
{
    const unsigned wpb = GT_LEAF_THREADS / 32;
    if (nquad) {
        unsigned grid = (nquad + wpb - 1) / wpb;
        if (cap_leaf && grid > cap_leaf)
            gt_quad_kernel<true><<<cap_leaf, GT_LEAF_THREADS, 0, s>>>(dig, part, desc, map, ntiles - nquad,
                                                                      ntiles);
        else
            gt_quad_kernel<false><<<grid, GT_LEAF_THREADS, 0, s>>>(dig, part, desc, map, ntiles - nquad,
                                                                   ntiles);
    }
    if (ntiles > nquad) {
        unsigned grid = (ntiles - nquad + wpb - 1) / wpb;
        if (cap_leaf && grid > cap_leaf)
            gt_leaf_kernel<true><<<cap_leaf, GT_LEAF_THREADS, 0, s>>>(dig, part, desc, map, ntiles - nquad);
        else
            gt_leaf_kernel<false><<<grid, GT_LEAF_THREADS, 0, s>>>(dig, part, desc, map, ntiles - nquad);
    }
    gt_again_kernel<<<(ntiles + 7) / 8, 256, 0, s>>>(dig, part, desc, map, ntiles);
}

/* The shares of blocks c0 .. c0 + cn - 1 of the root's input p (1 KiB
 * each) into share[i], by warps w0, w0 + nw, ... (w: this warp's index
 * among them). */
static __device__ __forceinline__ void gt_root_shares(const struct gh_lane *c, const struct gt_ld &ld,
                                                      size_t c0, size_t cn, uint64_t (*share)[8],
                                                      int w, int nw)
{
#pragma unroll 4
    for (size_t i = (size_t)w; i < cn; i += (size_t)nw) {
        uint64_t u0a, u0b, u1a, u1b, pa = 0, pb = 0;
        size_t off = (c0 + i) * GH_BLOCK + 16 * (size_t)c->lane;
        ld(off, &u0a, &u0b);
        ld(off + 512, &u1a, &u1b);
        gh_lane_block(c, u0a, u0b, u1a, u1b, &pa, &pb);
        gt_sum_q(&pa, &pb);
        if (c->lane < 4) {
            share[i][2 * c->lane] = pa;
            share[i][2 * c->lane + 1] = pb;
        }
    }
}

/* A record's statistics while tiles are summed. */
struct gt_acc {
    double sq, sk[TRACE_SKETCH_LEN];
    float mn, mx;
    unsigned long long nan, inf;
};

static __device__ void gt_acc_init(struct gt_acc *a)
{
    a->sq = 0;
    for (int k = 0; k < TRACE_SKETCH_LEN; k++)
        a->sk[k] = 0;
    a->mn = gh_as_float(0x7f800000u);
    a->mx = gh_as_float(0xff800000u);
    a->nan = a->inf = 0;
}

static __device__ __forceinline__ void gt_acc_part(struct gt_acc *a, const struct gt_part *p)
{
    a->sq += p->sq;
    for (int k = 0; k < TRACE_SKETCH_LEN; k++)
        a->sk[k] += p->sk[k];
    a->mn = fminf(a->mn, p->mn);
    a->mx = fmaxf(a->mx, p->mx);
    a->nan += p->nan;
    a->inf += p->inf;
}

static __device__ void gt_acc_add(struct gt_acc *a, const struct gt_acc *b)
{
    a->sq += b->sq;
    for (int k = 0; k < TRACE_SKETCH_LEN; k++)
        a->sk[k] += b->sk[k];
    a->mn = fminf(a->mn, b->mn);
    a->mx = fmaxf(a->mx, b->mx);
    a->nan += b->nan;
    a->inf += b->inf;
}

/* Butterfly over lanes 0 .. width-1 (a power of two): all end with the sum. */
static __device__ void gt_acc_warp(struct gt_acc *a, int width)
{
    for (int m = 1; m < width; m <<= 1) {
        a->sq += __shfl_xor_sync(GT_FULL, a->sq, m);
        for (int k = 0; k < TRACE_SKETCH_LEN; k++)
            a->sk[k] += __shfl_xor_sync(GT_FULL, a->sk[k], m);
        a->mn = fminf(a->mn, __shfl_xor_sync(GT_FULL, a->mn, m));
        a->mx = fmaxf(a->mx, __shfl_xor_sync(GT_FULL, a->mx, m));
        a->nan += __shfl_xor_sync(GT_FULL, a->nan, m);
        a->inf += __shfl_xor_sync(GT_FULL, a->inf, m);
    }
}

/* The record into stage (shared memory, one thread); gt_record_copy then
 * writes it out with one store a lane: records go to pinned host memory,
 * where 15 stores of 8 bytes from one thread each cross the bus on their
 * own (7441 records took 0.13 ms that way). */
static __device__ void gt_record(uint64_t *stage, const struct gt_acc *a, uint64_t hash)
{
    struct trace_oprec r;
    memset(&r, 0, sizeof r);
    int any = a->mn <= a->mx;
    r.hash = hash;
    r.l2 = sqrt(a->sq);
    r.min = any ? (double)a->mn : 0.0;
    r.max = any ? (double)a->mx : 0.0;
    r.nan = a->nan;
    r.inf = a->inf;
    for (int k = 0; k < TRACE_SKETCH_LEN; k++)
        r.sketch[k] = (float)a->sk[k];
    memcpy(stage, &r, sizeof r);
}

/* The warp's copy of a staged record to out (the warp's lanes all call it,
 * after the stage was written by one of them). */
static __device__ __forceinline__ void gt_record_copy(struct trace_oprec *out, const uint64_t *stage, int lane)
{
    __syncwarp();
    if ((unsigned)lane < GT_REC_WORDS)
        ((uint64_t *)out)[lane] = stage[lane];
}

/* What one block of the root kernel finishes: one large buffer (n = 0,
 * k[0]) with the whole block, or up to GT_ROOT_WARPS small ones (n = 1..16),
 * one per warp. Small: at most GT_SMALL_LEAVES leaves, a root of at most 240
 * bytes (one thread) and at most 30 tiles (one lane each). */
#define GT_SMALL_LEAVES 30u
struct gt_item {
    uint32_t n, k[GT_ROOT_WARPS];
};

/* The tile partials of a large buffer (more than GT_SMALL_LEAVES leaves)
 * are first summed in groups of GT_GROUP_TILES consecutive tiles, one
 * warp a group, all over the GPU (gt_group_kernel), each group's sum
 * written over its first tile's partial; the root then sums the groups.
 * A 1 GiB record has 8192 partials of 152 bytes: read by one block of the
 * root, they kept it busy for most of its 0.05 ms. */
#define GT_GROUP_TILES 64u
static __host__ __device__ uint32_t gt_groups(uint32_t ntiles)
{
    return (ntiles + GT_GROUP_TILES - 1) / GT_GROUP_TILES;
}

/* One group (k: the buffer, g: the group) of a large buffer, by one warp:
 * lane l sums tiles l and l + 32 of the group in that order, then the
 * lanes in a fixed butterfly. */
static __global__ void __launch_bounds__(256)
gt_group_kernel(struct gt_part *part, const struct gt_desc *desc, const uint32_t *grp, uint32_t ngroups)
{
    int lane = (int)(threadIdx.x & 31);
    uint32_t w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (w >= ngroups)
        return;
    const struct gt_desc &d = desc[grp[2 * w]];
    uint32_t t0 = d.tile0 + GT_GROUP_TILES * grp[2 * w + 1], end = d.tile0 + d.ntiles;
    struct gt_acc a;
    gt_acc_init(&a);
    if (t0 + (uint32_t)lane < end)
        gt_acc_part(&a, part + t0 + lane);
    if (t0 + 32 + (uint32_t)lane < end)
        gt_acc_part(&a, part + t0 + 32 + lane);
    gt_acc_warp(&a, 32); /* every lane has read its tiles before lane 0 writes */
    if (lane == 0) {
        struct gt_part *o = part + t0;
        o->sq = a.sq;
        for (int k = 0; k < TRACE_SKETCH_LEN; k++)
            o->sk[k] = a.sk[k];
        o->mn = a.mn;
        o->mx = a.mx;
        o->nan = (uint32_t)a.nan; /* at most 64 tiles of 32768 elements */
        o->inf = (uint32_t)a.inf;
    }
}

/* A small buffer by one warp; stage: the warp's GT_REC_WORDS words of
 * shared memory. */
/* The same copy for a reader on the host that polls the record (pinned
 * memory mapped into the device): every word but the first, a system-wide
 * fence, then the first (op, which the kernels write as 0), so that a
 * first word seen changed means the whole record is there. */
static __device__ __forceinline__ void gt_record_copy_ordered(struct trace_oprec *out, const uint64_t *stage,
                                                              int lane)
{
    __syncwarp();
    if ((unsigned)lane < GT_REC_WORDS && lane > 0)
        ((volatile uint64_t *)out)[lane] = stage[lane];
    __threadfence_system();
    __syncwarp();
    if (lane == 0) {
        __threadfence_system();
        ((volatile uint64_t *)out)[0] = stage[0];
    }
}

static __device__ void gt_root_small(struct trace_oprec *rec, const struct gt_desc *desc,
                                     const uint64_t *dig, const struct gt_part *part, uint32_t k, int lane,
                                     uint64_t *stage, bool ordered = false)
{
    const struct gt_desc d = desc[k];
    struct gt_acc a;
    gt_acc_init(&a);
    if ((uint32_t)lane < d.ntiles)
        gt_acc_part(&a, part + d.tile0 + lane);
    int width = 1;
    while ((uint32_t)width < d.ntiles)
        width <<= 1;
    gt_acc_warp(&a, width);
    if (lane == 0)
        gt_record(stage, &a, gh_xxh3_64(dig + d.leaf0, 8 * (size_t)d.nleaves));
    if (ordered)
        gt_record_copy_ordered(&rec[d.out], stage, lane);
    else
        gt_record_copy(&rec[d.out], stage, lane);
}

/* Work item it by the whole block. */
static __device__ void gt_root_item(struct trace_oprec *rec, const struct gt_item *it,
                                    const struct gt_desc *desc, const uint64_t *dig,
                                    const struct gt_part *part)
{
    __shared__ uint64_t share[2][GT_ROOT_CHUNK][8];
    __shared__ struct gt_acc wacc[GT_ROOT_WARPS];
    __shared__ uint64_t stage[GT_ROOT_WARPS][GT_REC_WORDS];
    int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint32_t n = it->n;
    if (n) {
        if ((uint32_t)warp < n)
            gt_root_small(rec, desc, dig, part, it->k[warp], lane, stage[warp]);
        return; /* the whole block */
    }
    uint32_t k = it->k[0];
    const struct gt_desc d = desc[k];

    /* A large buffer: XXH3 of its leaf digests (the long path, > 240
     * bytes), and its statistics, as a pipeline: the 1 KiB blocks' shares
     * are computed a chunk at a time by the warps, while warp 0's lanes
     * 0..7 (one accumulator each) run the chain of scrambles over the
     * chunk before; the last chunk's chain runs beside the statistics
     * (warps 1.. sum the tile partials). The chain, one scramble after the
     * other, is the part that cannot be spread; it was 0.05 ms of a 1 GiB
     * record's root when the statistics and each chunk's shares waited
     * for it. */
    const uint8_t *p = (const uint8_t *)(dig + d.leaf0);
    size_t len = 8 * (size_t)d.nleaves;
    struct gh_lane c;
    gh_lane_init(&c, lane);
    struct gt_ld ld = {p, 1};
    size_t nb = (len - 1) / GH_BLOCK, nch = (nb + GT_ROOT_CHUNK - 1) / GT_ROOT_CHUNK;
    uint64_t acc = tid < 8 ? gh_init_acc(tid) : 0, sc = tid < 8 ? gh_secret_word(GH_SEC_SCRAMBLE / 8 + tid) : 0;
    if (nch)
        gt_root_shares(&c, ld, 0, nb < GT_ROOT_CHUNK ? nb : GT_ROOT_CHUNK, share[0], warp, GT_ROOT_WARPS);
    __syncthreads();
    for (size_t ch = 0; ch < (nch ? nch : 1); ch++) {
        if (warp == 0) {
            if (ch < nch && tid < 8) {
                size_t cn = nb - ch * GT_ROOT_CHUNK < GT_ROOT_CHUNK ? nb - ch * GT_ROOT_CHUNK : GT_ROOT_CHUNK;
                const uint64_t (*sh)[8] = share[ch & 1];
                for (size_t i = 0; i < cn; i++)
                    acc = gh_scramble(acc + sh[i][tid], sc);
            }
        } else if (ch + 1 < nch) {
            size_t c0 = (ch + 1) * GT_ROOT_CHUNK;
            gt_root_shares(&c, ld, c0, nb - c0 < GT_ROOT_CHUNK ? nb - c0 : GT_ROOT_CHUNK, share[(ch + 1) & 1],
                           warp - 1, GT_ROOT_WARPS - 1);
        } else {
            /* statistics: thread t of warps 1.. sums tiles t, t + (threads
             * of warps 1..), ... in order; then each warp's lanes, then the
             * warps in order */
            struct gt_acc a;
            gt_acc_init(&a);
#pragma unroll 4
            for (uint32_t t = (uint32_t)tid - 32; t < gt_groups(d.ntiles); t += GT_ROOT_THREADS - 32)
                gt_acc_part(&a, part + d.tile0 + GT_GROUP_TILES * t);
            gt_acc_warp(&a, 32);
            if (lane == 0)
                wacc[warp] = a;
        }
        __syncthreads();
    }
    if (warp != 0)
        return;
    uint64_t pa = 0, pb = 0;
    gh_lane_tail(&c, ld, len, &pa, &pb);
    gt_sum_q(&pa, &pb);
    uint64_t ha = __shfl_sync(GT_FULL, acc, 2 * c.q), hb = __shfl_sync(GT_FULL, acc, 2 * c.q + 1);
    uint64_t h = gt_merge(&c, ha + pa, hb + pb, len);
    if (tid == 0) {
        struct gt_acc a = wacc[1];
        for (int w = 2; w < GT_ROOT_WARPS; w++)
            gt_acc_add(&a, &wacc[w]);
        gt_record(stage[0], &a, h);
    }
    gt_record_copy(&rec[d.out], stage[0], lane);
}

static __global__ void __launch_bounds__(GT_ROOT_THREADS)
gt_root_kernel(struct trace_oprec *rec, /* (n) */
               const struct gt_item *items, unsigned nitems, const struct gt_desc *desc,
               const uint64_t *dig, const struct gt_part *part)
{
    for (unsigned i = blockIdx.x; i < nitems; i += gridDim.x) {
        gt_root_item(rec, &items[i], desc, dig, part);
        __syncthreads(); /* the shared memory, for the next item */
    }
}

/* ---- host helpers shared by the batch (gpu_trace.cu) and libdivtrace's
 * records (gpu_trace_one.cu) ---- */

static size_t gt_align(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Where a batch's pieces go. Device: descriptors | tile map | work items
 * | groups (the four copied in as one piece from the same layout on the
 * host) | digests | partials, then (gpu_trace_enqueue) records. The
 * quad tiles (of buffers of more than GT_SPLIT_LEAVES leaves) are the last
 * nquad tiles, the rest before them; a buffer's tiles are consecutive. */
struct gt_layout {
    uint64_t ntiles, nslots;
    uint32_t ngroups;  /* of the large buffers' tiles (gt_group_kernel) */
    uint32_t nquad;    /* quad tiles */
    size_t o_map, o_items, o_grp, in_bytes, o_dig, o_part, o_end;
};

/* The layout of n buffers of counts[k] floats; -1: too many tiles. */
static int gt_plan(const size_t *counts, int n, struct gt_layout *l)
{
    uint64_t ntiles = 0, nslots = 0, ngroups = 0, nquad = 0;
    for (int k = 0; k < n; k++) {
        uint64_t leaves = (counts[k] + GT_LEAF_FLOATS - 1) / GT_LEAF_FLOATS;
        uint64_t tiles = (leaves + gt_tile_leaves(leaves) - 1) / gt_tile_leaves(leaves);
        ntiles += tiles;
        if (gt_tile_leaves(leaves) > 1)
            nquad += tiles;
        nslots += leaves + (leaves & 1);
        if (leaves > GT_SMALL_LEAVES)
            ngroups += (tiles + GT_GROUP_TILES - 1) / GT_GROUP_TILES;
    }
    if (ntiles >= UINT32_MAX / 32)
        return -1;
    l->ntiles = ntiles;
    l->nslots = nslots;
    l->ngroups = (uint32_t)ngroups;
    l->nquad = (uint32_t)nquad;
    l->o_map = gt_align((size_t)n * sizeof(struct gt_desc), 16);
    l->o_items = gt_align(l->o_map + 4 * (size_t)ntiles, 16);
    l->o_grp = gt_align(l->o_items + (size_t)n * sizeof(struct gt_item), 16);
    l->in_bytes = l->o_grp + 8 * (size_t)ngroups;
    l->o_dig = gt_align(l->in_bytes, 256);
    l->o_part = gt_align(l->o_dig + 8 * (size_t)nslots, 256);
    l->o_end = gt_align(l->o_part + sizeof(struct gt_part) * (size_t)ntiles, 256);
    return 0;
}

/* The descriptors, tile map and work items into host (l->in_bytes);
 * buffer k's record goes to index out[k] (out NULL: k). Returns the
 * number of work items. */
static unsigned gt_fill(unsigned char *host, const struct gt_layout *l, const float *const *bufs,
                        const size_t *counts, const uint32_t *out, int n)
{
    struct gt_desc *desc = (struct gt_desc *)host;
    uint32_t *map = (uint32_t *)(host + l->o_map);
    struct gt_item *items = (struct gt_item *)(host + l->o_items), *small = NULL;
    uint32_t *grp = (uint32_t *)(host + l->o_grp), ng = 0;
    uint64_t tq = l->ntiles - l->nquad, tw = 0, slot = 0; /* the next quad tile, the next other tile */
    unsigned nitems = 0;
    for (int k = 0; k < n; k++) {
        struct gt_desc *d = &desc[k];
        memset(d, 0, sizeof *d);
        d->ptr = bufs[k];
        d->count = counts[k];
        d->nleaves = (counts[k] + GT_LEAF_FLOATS - 1) / GT_LEAF_FLOATS;
        d->leaf0 = slot;
        d->tile_leaves = gt_tile_leaves(d->nleaves);
        d->ntiles = (uint32_t)((d->nleaves + d->tile_leaves - 1) / d->tile_leaves);
        uint64_t &tile = d->tile_leaves > 1 ? tq : tw;
        d->tile0 = (uint32_t)tile;
        d->aligned = ((uintptr_t)bufs[k] & 15) == 0;
        d->out = out ? out[k] : (uint32_t)k;
        for (uint32_t i = 0; i < d->ntiles; i++)
            map[tile + i] = (uint32_t)k;
        tile += d->ntiles;
        slot += d->nleaves + (d->nleaves & 1);
        if (d->nleaves > GT_SMALL_LEAVES) {
            items[nitems].n = 0;
            items[nitems++].k[0] = (uint32_t)k;
            for (uint32_t g = 0; g < gt_groups(d->ntiles); g++, ng++) {
                grp[2 * ng] = (uint32_t)k;
                grp[2 * ng + 1] = g;
            }
        } else {
            if (!small || small->n == GT_ROOT_WARPS) {
                small = &items[nitems++];
                small->n = 0;
            }
            small->k[small->n++] = (uint32_t)k;
        }
    }
    return nitems;
}

/* The two kernels over a batch laid out at dev (its descriptors there or
 * on their way in stream order), records into rec (device or mapped
 * pinned memory); caps as gpu_trace_set_caps. -DGT_TIMING (a measurement
 * build): with `timed`, waits and prints the kernels' times on stderr. */
static void gt_launch(unsigned char *dev, const struct gt_layout *l, unsigned nitems, struct trace_oprec *rec,
                      cudaStream_t s, unsigned cap_leaf, unsigned cap_root, int timed)
{
    const struct gt_desc *ddesc = (const struct gt_desc *)dev;
    uint64_t *dig = (uint64_t *)(dev + l->o_dig);
    struct gt_part *part = (struct gt_part *)(dev + l->o_part);
    uint32_t ntiles = (uint32_t)l->ntiles;
#ifdef GT_TIMING
    static cudaEvent_t ev[3];
    if (!ev[0])
        for (int q = 0; q < 3; q++)
            cudaEventCreate(&ev[q]);
    cudaEventRecord(ev[0], s);
#else
    (void)timed;
#endif
    if (ntiles)
        gt_leaves(dig, part, ddesc, (const uint32_t *)(dev + l->o_map), l->nquad, ntiles, cap_leaf, s);
#ifdef GT_TIMING
    cudaEventRecord(ev[1], s);
#endif
    if (l->ngroups)
        gt_group_kernel<<<(l->ngroups + 7) / 8, 256, 0, s>>>(part, ddesc, (const uint32_t *)(dev + l->o_grp),
                                                              l->ngroups);
    unsigned rgrid = cap_root && nitems > cap_root ? cap_root : nitems;
    gt_root_kernel<<<rgrid, GT_ROOT_THREADS, 0, s>>>(rec, (const struct gt_item *)(dev + l->o_items), nitems,
                                                     ddesc, dig, part);
#ifdef GT_TIMING
    cudaEventRecord(ev[2], s);
    if (timed) {
        float a = 0, b = 0;
        cudaEventSynchronize(ev[2]);
        cudaEventElapsedTime(&a, ev[0], ev[1]);
        cudaEventElapsedTime(&b, ev[1], ev[2]);
        fprintf(stderr, "gt-timing ntiles=%llu items=%u leaf_ms=%.4f root_ms=%.4f\n",
                (unsigned long long)ntiles, nitems, a, b);
    }
#endif
}

#endif
