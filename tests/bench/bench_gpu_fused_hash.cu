/* bench_gpu_fused_hash.cu: what hashing an elementwise op's output inside
 * the kernel that makes it would cost that kernel, against what it would
 * take off the trace. One op of the cuda backend's kind (two inputs, one
 * output: the sigmoid gradient's float32 formula), at buffer sizes of the
 * benchmark models, three ways:
 *   plain  the backend's kernel as it is (a grid-stride loop, 256 threads);
 *   fused  the same values, written by warps that also hash them as they
 *          go: one warp a tile of the trace's layout (gpu_trace_kern.cuh:
 *          one 16 KiB leaf a tile up to 512 leaves, 8 above), each leaf
 *          through gt_leaf_full with a source that computes its units, the
 *          tile's statistics through gt_tile_store; the elements after the
 *          last whole tile by plain threads (the trace would hash that
 *          tile); "ahead": each block's inputs loaded one block early;
 *   leaf   the trace's own leaf kernels over the output (what the fused
 *          kernel takes off the trace; the roots stay either way; above
 *          512 leaves the quad kernel, see gpu_trace_kern.cuh).
 * The fused kernel's digests (and, for tiles of one leaf, which both take
 * the same way, its tile statistics) are checked bitwise against the leaf
 * kernel's over the same output before any timing. Each
 * figure: a CUDA graph of 50 launches one after the other (as a captured
 * step runs its ops), median of 7 replays, per launch. The inputs of a
 * buffer up to 16 MiB stay in the 50 MB L2 between launches, as an op's
 * inputs mostly do in a step. Prints Markdown; exits 77 without a GPU.
 * Usage: bench_gpu_fused_hash [--quick] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_trace_kern.cuh"

#define FH_REPS 50
#define FH_THREADS 64 /* two warps a block, as the trace's leaf kernel */

#define FH_CUDA(call)                                                                        \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "bench_gpu_fused_hash: %s: %s\n", #call, cudaGetErrorString(e_)); \
            exit(2);                                                                         \
        }                                                                                    \
    } while (0)

/* (dy y)(1 - y): inputs y, dy */
static __device__ __forceinline__ float fh_f(float y, float dy)
{
    return __fmul_rn(__fmul_rn(dy, y), __fsub_rn(1.0f, y));
}

static __global__ void fh_plain(float *out, const float *y, const float *dy, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = fh_f(y[i], dy[i]);
}

static __device__ __forceinline__ uint4 fh_bits(float4 v)
{
    return make_uint4(__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z), __float_as_uint(v.w));
}

/* The lane's units of a leaf, computed and stored: float4 64 k + lane and
 * 64 k + 32 + lane of the leaf (gt_leaf_mem's units). */
template <bool AHEAD>
struct fh_src {
    const float4 *y, *dy;
    float4 *o;
    float4 ny0, ny1, nd0, nd1;
    __device__ __forceinline__ fh_src(float *out, const float *y_, const float *dy_, int lane)
        : y((const float4 *)y_ + lane), dy((const float4 *)dy_ + lane), o((float4 *)out + lane)
    {
        if (AHEAD)
            load(0, &ny0, &ny1, &nd0, &nd1);
    }
    __device__ __forceinline__ void load(int k, float4 *y0, float4 *y1, float4 *d0, float4 *d1) const
    {
        *y0 = __ldg(y + 64 * k);
        *y1 = __ldg(y + 64 * k + 32);
        *d0 = __ldg(dy + 64 * k);
        *d1 = __ldg(dy + 64 * k + 32);
    }
    __device__ __forceinline__ void operator()(int k, uint4 *c0, uint4 *c1)
    {
        float4 y0, y1, d0, d1;
        if (AHEAD) {
            y0 = ny0, y1 = ny1, d0 = nd0, d1 = nd1;
            if (k < 15)
                load(k + 1, &ny0, &ny1, &nd0, &nd1);
        } else {
            load(k, &y0, &y1, &d0, &d1);
        }
        float4 r0 = make_float4(fh_f(y0.x, d0.x), fh_f(y0.y, d0.y), fh_f(y0.z, d0.z), fh_f(y0.w, d0.w));
        float4 r1 = make_float4(fh_f(y1.x, d1.x), fh_f(y1.y, d1.y), fh_f(y1.z, d1.z), fh_f(y1.w, d1.w));
        o[64 * k] = r0;
        o[64 * k + 32] = r1;
        *c0 = fh_bits(r0);
        *c1 = fh_bits(r1);
    }
};

/* Tile w's leaves, computed, stored and hashed (FAST: gt_leaf_full's). */
template <bool AHEAD, bool FAST>
static __device__ __forceinline__ void fh_tile(float *out, const float *y, const float *dy, uint32_t w, uint32_t tl,
                                               int lane, const struct gh_lane &c, uint64_t *dig,
                                               struct gh_lstats *st)
{
    gh_lstats_init(st);
    uint32_t m[4], flip = 0;
    gh_lane_sign_row(lane, m);
    for (uint32_t i = 0, l = w * tl; i < tl; i++, l++) {
        uint32_t f = gh_leaf_flip(l);
        for (int r = 0; r < 4; r++)
            m[r] ^= f ^ flip;
        flip = f;
        size_t off = (size_t)l * GT_LEAF_FLOATS;
        fh_src<AHEAD> src(out + off, y + off, dy + off, lane);
        uint64_t h = gt_leaf_full<FAST>(&c, src, m, st);
        if (lane == 0)
            dig[l] = h;
    }
}

/* Blocks [0, tblocks): warp w hashes whole tile w (w < nfull); the blocks
 * after them compute the elements from `rest` on, one a thread. */
template <bool AHEAD>
static __global__ void __launch_bounds__(FH_THREADS)
fh_fused(float *out, const float *y, const float *dy, size_t n, uint32_t nfull, uint32_t tl, uint32_t tblocks,
         uint64_t *dig, struct gt_part *part)
{
    int lane = (int)(threadIdx.x & 31);
    if (blockIdx.x >= tblocks) {
        size_t i = (size_t)nfull * tl * GT_LEAF_FLOATS + (size_t)(blockIdx.x - tblocks) * FH_THREADS + threadIdx.x;
        if (i < n)
            out[i] = fh_f(y[i], dy[i]);
        return;
    }
    uint32_t w = (blockIdx.x * FH_THREADS + threadIdx.x) >> 5;
    if (w >= nfull)
        return;
    struct gh_lane c;
    gh_lane_init(&c, lane);
    /* the trace's fast path (its values here are finite; a NaN would leave
     * a non-finite sq for gt_again_kernel, as in the trace) */
    struct gh_lstats st;
    fh_tile<AHEAD, true>(out, y, dy, w, tl, lane, c, dig, &st);
    gt_tile_store(&st, part + w, lane);
}

struct fh_case {
    size_t n;
    uint32_t nleaves, tl, ntiles, nfull;
};

static struct fh_case fh_case_of(size_t n)
{
    struct fh_case k;
    k.n = n;
    k.nleaves = (uint32_t)((n + GT_LEAF_FLOATS - 1) / GT_LEAF_FLOATS);
    k.tl = gt_tile_leaves(k.nleaves);
    k.ntiles = (k.nleaves + k.tl - 1) / k.tl;
    k.nfull = n % ((size_t)k.tl * GT_LEAF_FLOATS) == 0 ? k.ntiles : k.ntiles - 1;
    return k;
}

static int fh_sms;

static void fh_launch_plain(const struct fh_case *k, float *out, const float *y, const float *dy, cudaStream_t s)
{
    size_t want = (k->n + 255) / 256, cap = (size_t)fh_sms * 8;
    fh_plain<<<(unsigned)(want < cap ? want : cap), 256, 0, s>>>(out, y, dy, k->n);
}

static void fh_launch_fused(const struct fh_case *k, int ahead, float *out, const float *y, const float *dy,
                            uint64_t *dig, struct gt_part *part, cudaStream_t s)
{
    uint32_t tblocks = (k->nfull + 1) / 2;
    size_t rest = k->n - (size_t)k->nfull * k->tl * GT_LEAF_FLOATS;
    unsigned grid = tblocks + (unsigned)((rest + FH_THREADS - 1) / FH_THREADS);
    if (ahead)
        fh_fused<true><<<grid, FH_THREADS, 0, s>>>(out, y, dy, k->n, k->nfull, k->tl, tblocks, dig, part);
    else
        fh_fused<false><<<grid, FH_THREADS, 0, s>>>(out, y, dy, k->n, k->nfull, k->tl, tblocks, dig, part);
}

/* The trace's layout of the one buffer, its descriptors on the device. */
struct fh_trace {
    struct gt_layout l;
    unsigned char *dev;
};

static void fh_trace_make(struct fh_trace *t, const float *out, size_t n)
{
    if (gt_plan(&n, 1, &t->l) != 0) {
        fprintf(stderr, "bench_gpu_fused_hash: too many tiles\n");
        exit(2);
    }
    unsigned char *host = (unsigned char *)calloc(1, t->l.in_bytes);
    gt_fill(host, &t->l, &out, &n, NULL, 1);
    FH_CUDA(cudaMalloc((void **)&t->dev, t->l.o_end));
    FH_CUDA(cudaMemcpy(t->dev, host, t->l.in_bytes, cudaMemcpyHostToDevice));
    free(host);
}

/* The trace's leaf kernels over the output (the quad kernel above 512
 * leaves) and their second pass, which finds nothing to do here. */
static void fh_launch_leaf(const struct fh_trace *t, cudaStream_t s)
{
    gt_leaves((uint64_t *)(t->dev + t->l.o_dig), (struct gt_part *)(t->dev + t->l.o_part),
              (const struct gt_desc *)t->dev, (const uint32_t *)(t->dev + t->l.o_map),
              t->l.nquad, (uint32_t)t->l.ntiles, 0, s);
}

enum { FH_PLAIN, FH_FUSED, FH_AHEAD, FH_LEAF, FH_WAYS };

static void fh_enqueue(int way, const struct fh_case *k, float *out, const float *y, const float *dy,
                       const struct fh_trace *t, uint64_t *dig, struct gt_part *part, cudaStream_t s)
{
    if (way == FH_PLAIN)
        fh_launch_plain(k, out, y, dy, s);
    else if (way == FH_LEAF)
        fh_launch_leaf(t, s);
    else
        fh_launch_fused(k, way == FH_AHEAD, out, y, dy, dig, part, s);
}

static int fh_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Microseconds a launch: a graph of FH_REPS launches, median of `reps` replays. */
static double fh_time(int way, const struct fh_case *k, float *out, const float *y, const float *dy,
                      const struct fh_trace *t, uint64_t *dig, struct gt_part *part, cudaStream_t s, int reps)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    FH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int r = 0; r < FH_REPS; r++)
        fh_enqueue(way, k, out, y, dy, t, dig, part, s);
    FH_CUDA(cudaStreamEndCapture(s, &g));
    FH_CUDA(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    FH_CUDA(cudaEventCreate(&e0));
    FH_CUDA(cudaEventCreate(&e1));
    double ms[16];
    for (int r = -2; r < reps; r++) {
        FH_CUDA(cudaEventRecord(e0, s));
        FH_CUDA(cudaGraphLaunch(ge, s));
        FH_CUDA(cudaEventRecord(e1, s));
        FH_CUDA(cudaEventSynchronize(e1));
        float v;
        FH_CUDA(cudaEventElapsedTime(&v, e0, e1));
        if (r >= 0)
            ms[r] = v;
    }
    qsort(ms, (size_t)reps, sizeof ms[0], fh_cmp);
    FH_CUDA(cudaEventDestroy(e0));
    FH_CUDA(cudaEventDestroy(e1));
    FH_CUDA(cudaGraphExecDestroy(ge));
    FH_CUDA(cudaGraphDestroy(g));
    return 1000.0 * ms[reps / 2] / FH_REPS;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (argc > 1 && !quick) {
        fprintf(stderr, "bench_gpu_fused_hash: unknown argument '%s' (--quick)\n", argv[1]);
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_gpu_fused_hash: no GPU\n");
        return 77;
    }
    FH_CUDA(cudaDeviceGetAttribute(&fh_sms, cudaDevAttrMultiProcessorCount, 0));
    /* leaves: PredNet's buffers (4 KiB to 1 MiB at batch 1 and 4), the
     * large model's (up to 16 MiB), and one with a part leaf */
    static const size_t sizes[] = {4096, 4096 * 4, 4096 * 16, 4096 * 64, 4096 * 64 + 1000,
                                   4096 * 256, 4096 * 512, 4096 * 1024, 4096 * 4096};
    int nsizes = quick ? 4 : (int)(sizeof sizes / sizeof sizes[0]);
    int reps = quick ? 3 : 7;
    size_t maxn = sizes[nsizes - 1];
    float *y, *dy, *out;
    FH_CUDA(cudaMalloc((void **)&y, maxn * sizeof(float)));
    FH_CUDA(cudaMalloc((void **)&dy, maxn * sizeof(float)));
    FH_CUDA(cudaMalloc((void **)&out, maxn * sizeof(float)));
    float *h = (float *)malloc(maxn * sizeof(float));
    uint64_t s = 7;
    for (size_t i = 0; i < maxn; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((double)(s >> 40) * 0x1p-24);
    }
    FH_CUDA(cudaMemcpy(y, h, maxn * sizeof(float), cudaMemcpyHostToDevice));
    for (size_t i = 0; i < maxn; i++)
        h[i] = h[(i * 7919) % maxn] - 0.5f;
    FH_CUDA(cudaMemcpy(dy, h, maxn * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    cudaStream_t st;
    FH_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    printf("| elements | leaves | leaves a tile | plain us | fused us | fused, ahead us | trace leaf kernel us |"
           " fused - plain us |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    int bad = 0;
    for (int z = 0; z < nsizes; z++) {
        struct fh_case k = fh_case_of(sizes[z]);
        struct fh_trace t;
        fh_trace_make(&t, out, k.n);
        uint64_t *dig;
        struct gt_part *part;
        FH_CUDA(cudaMalloc((void **)&dig, 8 * (size_t)k.nleaves + 8));
        FH_CUDA(cudaMalloc((void **)&part, sizeof(struct gt_part) * ((size_t)k.ntiles + 1)));
        /* the check: each fused way's digests and tile statistics against
         * the leaf kernel's (the statistics where both take a tile the
         * same way: one leaf a tile; the trace's tiles of 8 leaves are
         * quad tiles, whose sums go in another order) */
        size_t nd = (size_t)k.nfull * k.tl, np = k.nfull;
        uint64_t *wd = (uint64_t *)malloc(8 * nd + 8), *gd = (uint64_t *)malloc(8 * nd + 8);
        struct gt_part *wp = (struct gt_part *)malloc(sizeof *wp * (np + 1)),
                       *gp = (struct gt_part *)malloc(sizeof *gp * (np + 1));
        for (int way = FH_FUSED; way <= FH_AHEAD; way++) {
            FH_CUDA(cudaMemset(out, 0xff, k.n * sizeof(float)));
            fh_launch_fused(&k, way == FH_AHEAD, out, y, dy, dig, part, st);
            fh_launch_leaf(&t, st);
            FH_CUDA(cudaStreamSynchronize(st));
            FH_CUDA(cudaMemcpy(gd, dig, 8 * nd, cudaMemcpyDeviceToHost));
            FH_CUDA(cudaMemcpy(wd, t.dev + t.l.o_dig, 8 * nd, cudaMemcpyDeviceToHost));
            FH_CUDA(cudaMemcpy(gp, part, sizeof *gp * np, cudaMemcpyDeviceToHost));
            FH_CUDA(cudaMemcpy(wp, t.dev + t.l.o_part, sizeof *wp * np, cudaMemcpyDeviceToHost));
            if (memcmp(gd, wd, 8 * nd) != 0 || (k.tl == 1 && memcmp(gp, wp, sizeof *gp * np) != 0)) {
                fprintf(stderr, "bench_gpu_fused_hash: %zu elements, %s: digests or statistics differ from the "
                        "trace's\n", k.n, way == FH_AHEAD ? "fused, ahead" : "fused");
                bad = 1;
            }
        }
        free(wd);
        free(gd);
        free(wp);
        free(gp);
        double us[FH_WAYS];
        for (int way = 0; way < FH_WAYS; way++)
            us[way] = fh_time(way, &k, out, y, dy, &t, dig, part, st, reps);
        double best = us[FH_FUSED] < us[FH_AHEAD] ? us[FH_FUSED] : us[FH_AHEAD];
        printf("| %zu | %u | %u | %.2f | %.2f | %.2f | %.2f | %+.2f |\n", k.n, k.nleaves, k.tl, us[FH_PLAIN],
               us[FH_FUSED], us[FH_AHEAD], us[FH_LEAF], best - us[FH_PLAIN]);
        fflush(stdout);
        FH_CUDA(cudaFree(dig));
        FH_CUDA(cudaFree(part));
        FH_CUDA(cudaFree(t.dev));
    }
    FH_CUDA(cudaStreamDestroy(st));
    return bad ? 1 : 0;
}
