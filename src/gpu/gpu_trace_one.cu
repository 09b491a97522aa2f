/* gpu_trace_one.cu: libdivtrace's device records (lib_gpu.cu), queued on
 * the caller's stream with the caller's scratch and nothing waited for:
 * one buffer at a time (gpu_trace_one) and a batch of deferred buffers
 * (gpu_trace_many). The kernels are the batch's (gpu_trace_kern.cuh), so
 * the records are gpu_trace_batch's, bit for bit. Every CUDA failure comes
 * back as an error code, never an abort. */
#include "gpu_trace_kern.cuh"

/* A small buffer's record in one launch (libdivtrace's records of single
 * tensors): one warp a tile (a leaf), GT_ONE_WARPS warps a block, every
 * tile at once; the block that finishes last (a ticket from *ctr, which it
 * sets back to 0) finishes the record as the root kernel would. Digests
 * and partials go through the scratch, so tiling and sums are the
 * batch's, bit for bit. One block of 8 warps took each warp through up to
 * four leaves one after the other: 45 us for 25 leaves against 15 us for
 * one (H200). */
#define GT_ONE_WARPS 2
static_assert(GT_SMALL_LEAVES <= GT_SPLIT_LEAVES && GT_SMALL_LEAVES <= 32,
              "a small buffer has one tile a leaf, one lane of warp 0 each");
static __global__ void __launch_bounds__(32 * GT_ONE_WARPS, 1)
gt_one_small_kernel(struct trace_oprec *rec, struct gt_desc d, uint64_t *dig, struct gt_part *part,
                    unsigned *ctr)
{
    __shared__ uint64_t stage[GT_REC_WORDS];
    __shared__ int last;
    int lane = (int)(threadIdx.x & 31);
    uint32_t g = blockIdx.x * GT_ONE_WARPS + (threadIdx.x >> 5);
    if (g < d.ntiles)
        gt_leaf_tile<true, false>(dig, part, d, g, lane);
    __threadfence(); /* this thread's digest and partial, before the ticket */
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(ctr, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence(); /* the other blocks' writes, after the ticket */
    if (threadIdx.x < 32) {
        gt_root_small(rec, &d, dig, part, 0, lane, stage);
        if (lane == 0)
            *ctr = 0;
    }
}

/* ---- one buffer, queued on the caller's stream (libdivtrace) ----
 * A buffer of at most GT_SMALL_LEAVES leaves (480 KiB) takes one launch,
 * gt_one_small_kernel. A larger one takes the two kernels of a batch of
 * one, with nothing copied in: its descriptor and work item travel as
 * arguments of a setup kernel that writes them into the scratch. Nothing
 * waits here; the
 * record lands in *drec when the stream gets there. Tiles and sums are
 * those of gpu_trace_batch, so the record is the same, bit for bit. */

static __global__ void gt_one_setup(struct gt_desc *dd, struct gt_desc d, struct gt_item *di,
                             struct gt_item it, uint32_t *map, uint32_t ntiles, uint32_t *grp)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) {
        *dd = d;
        *di = it;
    }
    for (; i < ntiles; i += gridDim.x * blockDim.x) {
        map[i] = 0; /* every tile is the one buffer's */
        if (i < gt_groups(ntiles)) {
            grp[2 * i] = 0;
            grp[2 * i + 1] = i;
        }
    }
}

/* Where the pieces of one buffer's scratch go (the scratch 256-aligned). */
struct gt_one_layout {
    uint64_t nleaves;
    uint32_t ntiles;
    size_t o_item, o_map, o_grp, o_dig, o_part, bytes;
};

static int gt_one_plan(size_t count, struct gt_one_layout *l)
{
    l->nleaves = (count + GT_LEAF_FLOATS - 1) / GT_LEAF_FLOATS;
    uint64_t tiles = (l->nleaves + gt_tile_leaves(l->nleaves) - 1) / gt_tile_leaves(l->nleaves);
    if (tiles >= UINT32_MAX / 32)
        return -1;
    l->ntiles = (uint32_t)tiles;
    l->o_item = gt_align(sizeof(struct gt_desc), 16);
    l->o_map = gt_align(l->o_item + sizeof(struct gt_item), 16);
    l->o_grp = gt_align(l->o_map + 4 * (size_t)l->ntiles, 16);
    l->o_dig = gt_align(l->o_grp + 8 * (size_t)gt_groups(l->ntiles), 256);
    l->o_part = gt_align(l->o_dig + 8 * (size_t)(l->nleaves + (l->nleaves & 1)), 256);
    l->bytes = gt_align(l->o_part + sizeof(struct gt_part) * (size_t)l->ntiles, 256);
    return 0;
}

size_t gpu_trace_one_bytes(size_t count)
{
    struct gt_one_layout l;
    return gt_one_plan(count, &l) < 0 ? 0 : l.bytes;
}

cudaError_t gpu_trace_one(void *scratch, const float *x, size_t count, struct trace_oprec *drec,
                          unsigned *ctr, cudaStream_t s)
{
    struct gt_one_layout l;
    if (gt_one_plan(count, &l) < 0 || ((uintptr_t)x & 3) != 0 || ((uintptr_t)scratch & 255) != 0)
        return cudaErrorInvalidValue;
    unsigned char *base = (unsigned char *)scratch;
    struct gt_desc d;
    memset(&d, 0, sizeof d);
    d.ptr = x;
    d.count = count;
    d.nleaves = l.nleaves;
    d.ntiles = l.ntiles;
    d.tile_leaves = gt_tile_leaves(l.nleaves);
    d.aligned = ((uintptr_t)x & 15) == 0;
    struct gt_item it;
    memset(&it, 0, sizeof it);
    it.n = l.nleaves > GT_SMALL_LEAVES ? 0 : 1; /* k[0] = 0: the one buffer */
    struct gt_desc *dd = (struct gt_desc *)base;
    uint32_t *map = (uint32_t *)(base + l.o_map);
    uint64_t *dig = (uint64_t *)(base + l.o_dig);
    struct gt_part *part = (struct gt_part *)(base + l.o_part);
    if (l.nleaves <= GT_SMALL_LEAVES) {
        /* one tile a leaf (gt_tile_leaves), at most 30: one warp each */
        unsigned blocks = l.ntiles ? (l.ntiles + GT_ONE_WARPS - 1) / GT_ONE_WARPS : 1;
        gt_one_small_kernel<<<blocks, 32 * GT_ONE_WARPS, 0, s>>>(drec, d, dig, part, ctr);
        return cudaGetLastError();
    }
    unsigned sg = l.ntiles > 256 * 64 ? 64 : (l.ntiles + 255) / 256 + 1;
    uint32_t *grp = (uint32_t *)(base + l.o_grp);
    gt_one_setup<<<sg, 256, 0, s>>>(dd, d, (struct gt_item *)(base + l.o_item), it, map, l.ntiles, grp);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    if (l.ntiles) {
        gt_leaves(dig, part, dd, map, d.tile_leaves > 1 ? l.ntiles : 0, l.ntiles, 0, s);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
        uint32_t ng = gt_groups(l.ntiles);
        gt_group_kernel<<<(ng + 7) / 8, 256, 0, s>>>(part, dd, grp, ng);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    gt_root_kernel<<<1, GT_ROOT_THREADS, 0, s>>>(drec, (const struct gt_item *)(base + l.o_item), 1, dd,
                                                 dig, part);
    return cudaGetLastError();
}

/* ---- a batch of small buffers in one launch (libdivtrace's deferred
 * records of a model of few, small tensors) ----
 * Up to GT_SB_MAX buffers of at most GT_SMALL_LEAVES leaves each, their
 * descriptors passed as the kernel's argument: no copy in, one launch
 * where the general batch takes a copy and two or three (the staging and
 * the descriptors' part of the scratch go unused). One warp a tile (a leaf;
 * a buffer of no elements gets one warp with no tile), as the leaf kernel
 * tiles them; the warp that finishes a buffer's last tile (a ticket from
 * ctr[out], which it sets back to 0) finishes its record as the root
 * kernel's gt_root_small does. Same tiles, same sums: the same records,
 * bit for bit. The argument is sized to the batch (room for 8, 32 or
 * GT_SB_MAX descriptors): a launch's cost on the host grows with it, and a
 * model's flushes are mostly of a few tensors. */
#define GT_SB_MAX 128
#define GT_SB_WARPS 2
struct gt_sb_buf {
    const float *ptr;
    uint32_t count, out;
    uint16_t leaf0, tile0, warp0; /* its first digest, partial (tile) and warp in the grid */
};
template <int MAX> struct gt_sb {
    uint32_t n, nwarps;
    const float *loss_src; /* a float copied to loss_dst by the launch, or NULL */
    float *loss_dst;
    struct gt_sb_buf b[MAX];
};
static_assert(sizeof(struct gt_sb<GT_SB_MAX>) + 4 * sizeof(void *) <= 4096, "a launch's arguments fit in 4 KiB");
static_assert(GT_SB_MAX * (GT_SMALL_LEAVES + 1) < 65536, "leaf0, tile0 and warp0 fit in 16 bits");

template <int MAX>
static __global__ void __launch_bounds__(32 * GT_SB_WARPS)
gt_sb_kernel(const __grid_constant__ struct gt_sb<MAX> sb, struct trace_oprec *rec, uint64_t *dig,
             struct gt_part *part, unsigned *ctr)
{
    __shared__ uint64_t stage[GT_SB_WARPS][GT_REC_WORDS];
    int lane = (int)(threadIdx.x & 31), wib = (int)(threadIdx.x >> 5);
    uint32_t w = blockIdx.x * GT_SB_WARPS + (uint32_t)wib;
    if (w == 0 && lane == 0 && sb.loss_src)
        *(volatile float *)sb.loss_dst = *sb.loss_src;
    if (w >= sb.nwarps)
        return;
    uint32_t lo = 0, hi = sb.n - 1; /* the buffer whose warps include w */
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (sb.b[mid].warp0 <= w)
            lo = mid;
        else
            hi = mid - 1;
    }
    const struct gt_sb_buf &b = sb.b[lo];
    struct gt_desc d;
    memset(&d, 0, sizeof d);
    d.ptr = b.ptr;
    d.count = b.count;
    d.nleaves = (b.count + GT_LEAF_FLOATS - 1) / GT_LEAF_FLOATS;
    d.leaf0 = b.leaf0;
    d.tile0 = b.tile0;
    d.ntiles = (uint32_t)d.nleaves;
    d.tile_leaves = 1;
    d.aligned = ((uintptr_t)b.ptr & 15) == 0;
    d.out = b.out;
    uint32_t g = w - b.warp0, need = d.ntiles ? d.ntiles : 1;
    if (g < d.ntiles)
        gt_leaf_tile<false, false>(dig, part, d, d.tile0 + g, lane);
    __threadfence(); /* this warp's digest and partial, before the ticket */
    __syncwarp();
    unsigned last = 0;
    if (lane == 0)
        last = atomicAdd(ctr + b.out, 1u) == need - 1;
    last = __shfl_sync(GT_FULL, last, 0);
    if (!last)
        return;
    __threadfence(); /* the other warps' writes, after the ticket */
    gt_root_small(rec, &d, dig, part, 0, lane, stage[wib], true);
    if (lane == 0)
        ctr[b.out] = 0;
}

/* n (at most MAX) small buffers in one gt_sb_kernel launch */
template <int MAX>
static cudaError_t gt_sb_launch(const float *const *bufs, const size_t *counts, const uint32_t *out, int n,
                                struct trace_oprec *drec, uint64_t *dig, struct gt_part *part, unsigned *ctr,
                                const float *loss_src, float *loss_dst, cudaStream_t s)
{
    /* digests and partials where gt_plan puts them (leaf0 and tile0 as
     * gt_fill sets them); a buffer's tiles are its warps */
    struct gt_sb<MAX> sb;
    uint32_t slot = 0, tiles = 0, warps = 0;
    sb.n = (uint32_t)n;
    sb.loss_src = loss_src;
    sb.loss_dst = loss_dst;
    for (int k = 0; k < n; k++) {
        uint32_t leaves = (uint32_t)((counts[k] + GT_LEAF_FLOATS - 1) / GT_LEAF_FLOATS);
        sb.b[k].ptr = bufs[k];
        sb.b[k].count = (uint32_t)counts[k];
        sb.b[k].leaf0 = (uint16_t)slot;
        sb.b[k].tile0 = (uint16_t)tiles;
        sb.b[k].warp0 = (uint16_t)warps;
        sb.b[k].out = out ? out[k] : (uint32_t)k;
        slot += leaves + (leaves & 1);
        tiles += leaves;
        warps += leaves ? leaves : 1;
    }
    sb.nwarps = warps;
    unsigned blocks = (warps + GT_SB_WARPS - 1) / GT_SB_WARPS;
    gt_sb_kernel<MAX><<<blocks, 32 * GT_SB_WARPS, 0, s>>>(sb, drec, dig, part, ctr);
    return cudaGetLastError();
}

/* Whether n buffers take gt_sb_kernel: few enough, each small. */
static int gt_sb_fits(const size_t *counts, int n)
{
    if (n > GT_SB_MAX)
        return 0;
    for (int k = 0; k < n; k++)
        if (counts[k] > (size_t)GT_SMALL_LEAVES * GT_LEAF_FLOATS)
            return 0;
    return 1;
}

/* ---- many buffers, queued on the caller's stream (libdivtrace's deferred
 * records) ----
 * The batch's layout and kernels, with the caller's scratch and no wait:
 * the descriptors are built in the caller's pinned staging, copied in on
 * the stream, and the records land in drec[out[k]] (device or mapped
 * pinned memory). */

int gpu_trace_many_bytes(const size_t *counts, int n, size_t *dev_bytes, size_t *host_bytes)
{
    struct gt_layout l;
    if (n <= 0 || gt_plan(counts, n, &l) < 0)
        return -1;
    *dev_bytes = l.o_end;
    *host_bytes = gt_align(l.in_bytes, 256);
    return 0;
}

cudaError_t gpu_trace_many(void *scratch, void *staging, const float *const *bufs, const size_t *counts,
                           const uint32_t *out, int n, struct trace_oprec *drec, unsigned *ctr,
                           const float *loss_src, float *loss_dst, int *ordered, cudaStream_t s)
{
    *ordered = 0;
    struct gt_layout l;
    if (n <= 0 || gt_plan(counts, n, &l) < 0 || ((uintptr_t)scratch & 255) != 0 ||
        ((uintptr_t)staging & 15) != 0)
        return cudaErrorInvalidValue;
    for (int k = 0; k < n; k++)
        if (((uintptr_t)bufs[k] & 3) != 0)
            return cudaErrorInvalidValue;
    if (ctr && gt_sb_fits(counts, n)) {
        uint64_t *dig = (uint64_t *)((unsigned char *)scratch + l.o_dig);
        struct gt_part *part = (struct gt_part *)((unsigned char *)scratch + l.o_part);
        *ordered = 1;
        if (n <= 8)
            return gt_sb_launch<8>(bufs, counts, out, n, drec, dig, part, ctr, loss_src, loss_dst, s);
        if (n <= 32)
            return gt_sb_launch<32>(bufs, counts, out, n, drec, dig, part, ctr, loss_src, loss_dst, s);
        return gt_sb_launch<GT_SB_MAX>(bufs, counts, out, n, drec, dig, part, ctr, loss_src, loss_dst, s);
    }
    if (loss_src) {
        cudaError_t e = cudaMemcpyAsync(loss_dst, loss_src, sizeof *loss_dst, cudaMemcpyDefault, s);
        if (e != cudaSuccess)
            return e;
    }
    unsigned nitems = gt_fill((unsigned char *)staging, &l, bufs, counts, out, n);
    cudaError_t e = cudaMemcpyAsync(scratch, staging, l.in_bytes, cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess)
        return e;
    gt_launch((unsigned char *)scratch, &l, nitems, drec, s, 0, 0, 0);
    return cudaGetLastError();
}
