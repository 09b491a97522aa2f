/* bench_gpu_leaf_layout.cu: the trace's leaf kernels over one large buffer
 * (1 GiB by default: 8192 tiles of 8 leaves), in the layouts and paths
 * gpu_trace_kern.cuh has had, alone and beside a compute-bound kernel:
 *   warp, tested  one warp a tile, the 32 lanes sharing each 1 KiB block
 *                 (shuffles before every scramble), every unit of four
 *                 floats tested for NaN and Inf (gt_leaf_tile, careful);
 *   warp, fast    the same without the test (gt_leaf_tile, FAST: what the
 *                 leaf kernel runs on tiles of one leaf);
 *   quad          four lanes a leaf, eight leaves a warp, each lane one
 *                 accumulator pair over its whole leaf (gt_quad_kernel:
 *                 what the trace runs on buffers over 8 MiB);
 *   quad, hash    the quad layout's hash without the statistics;
 *   read          a plain streaming read of the buffer (the DRAM's pace).
 * Before any timing: the digests of every way against the tested warp's,
 * the fast warp's tile statistics bitwise against the tested warp's, and
 * the quad's total sum of squares and sketch against them within 1e-12
 * (its sums go in another order). Then each way alone (CUDA events, median
 * of 9) and, 10 of it, queued on a low-priority stream beside 40 cuBLAS
 * SGEMMs of 4096^3 on a high-priority one: how much the products are
 * slowed. Prints Markdown; exits 77 without a GPU.
 * Usage: bench_gpu_leaf_layout [MiB] */
#include <cublas_v2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_trace_kern.cuh"

#define LL_CUDA(call)                                                                          \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "bench_gpu_leaf_layout: %s: %s\n", #call, cudaGetErrorString(e_)); \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

/* the warp layout over every tile of one buffer, FAST or tested */
template <bool FAST>
static __global__ void __launch_bounds__(GT_LEAF_THREADS, GT_LEAF_BLOCKS_PER_SM)
ll_warp(uint64_t *dig, struct gt_part *part, const struct gt_desc *d, uint32_t ntiles)
{
    uint32_t g = (blockIdx.x * GT_LEAF_THREADS + threadIdx.x) >> 5;
    if (g < ntiles)
        gt_leaf_tile<false, FAST>(dig, part, *d, g, (int)(threadIdx.x & 31));
}

/* the quad layout's hash alone (gt_quad_full without its statistics) */
static __global__ void __launch_bounds__(GT_LEAF_THREADS, GT_LEAF_BLOCKS_PER_SM)
ll_quad_hash(const float *x, uint64_t nleaves, uint64_t *dig)
{
    __shared__ uint64_t sw[24];
    if (threadIdx.x < 24)
        sw[threadIdx.x] = gh_secret_word((int)threadIdx.x);
    __syncthreads();
    int lane = (int)(threadIdx.x & 31), q = lane & 3;
    uint64_t L = 8 * (((uint64_t)blockIdx.x * GT_LEAF_THREADS + threadIdx.x) >> 5) + (uint64_t)(lane >> 2);
    uint64_t mix = 0;
    if (L < nleaves) {
        const uint4 *v = (const uint4 *)(x + L * GT_LEAF_FLOATS) + q;
        uint64_t a = gh_init_acc(2 * q), b = gh_init_acc(2 * q + 1);
        const uint64_t *sq = sw + 2 * q;
#pragma unroll 1
        for (int k = 0; k < 16; k++) {
            uint64_t lo = sq[0];
#pragma unroll
            for (int s = 0; s < 16; s++) {
                uint4 u = __ldcs(v + 64 * k + 4 * s);
                uint64_t hi = sq[s + 1], k0 = lo, k1 = hi;
                if (s == 15 && k == 15) {
                    k0 = gh_sec(GH_SEC_LAST + 16 * q);
                    k1 = gh_sec(GH_SEC_LAST + 16 * q + 8);
                }
                gh_unit(gt_w(u.x, u.y), gt_w(u.z, u.w), k0, k1, &a, &b);
                lo = hi;
            }
            if (k < 15) {
                a = gh_scramble(a, sw[GH_SEC_SCRAMBLE / 8 + 2 * q]);
                b = gh_scramble(b, sw[GH_SEC_SCRAMBLE / 8 + 2 * q + 1]);
            }
        }
        mix = gh_merge_pair(a, b, q);
    }
    mix += __shfl_xor_sync(GT_FULL, mix, 1);
    mix += __shfl_xor_sync(GT_FULL, mix, 2);
    if (L < nleaves && q == 0)
        dig[L] = gh_merge_final(mix, GH_LEAF);
}

static __global__ void ll_read(const uint4 *x, size_t n, uint32_t *out)
{
    uint32_t acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = __ldcs(x + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u)
        *out = acc;
}

static __global__ void ll_fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = gh_fmix32((uint32_t)i * 2654435761u + seed);
        x[i] = ((float)(h >> 8) - 8388608.0f) * 1e-6f;
    }
}

enum { LL_TESTED, LL_FAST, LL_QUAD, LL_QHASH, LL_READ, LL_WAYS };
static const char *const ll_name[LL_WAYS] = {"warp, tested", "warp, fast", "quad (the trace's)", "quad, hash only",
                                             "read only"};

struct ll_ctx {
    const float *x;
    size_t n, nleaves;
    uint32_t ntiles;
    struct gt_desc *dd; /* the buffer's descriptor, on the device */
    uint32_t *map;      /* every tile: buffer 0 */
    uint64_t *dig[LL_WAYS];
    struct gt_part *part[LL_WAYS];
    uint32_t *sink;
};

static void ll_launch(const struct ll_ctx *c, int way, cudaStream_t s)
{
    unsigned grid = (c->ntiles + 1) / 2;
    if (way == LL_TESTED)
        ll_warp<false><<<grid, GT_LEAF_THREADS, 0, s>>>(c->dig[way], c->part[way], c->dd, c->ntiles);
    else if (way == LL_FAST)
        ll_warp<true><<<grid, GT_LEAF_THREADS, 0, s>>>(c->dig[way], c->part[way], c->dd, c->ntiles);
    else if (way == LL_QUAD)
        gt_quad_kernel<false><<<grid, GT_LEAF_THREADS, 0, s>>>(c->dig[way], c->part[way], c->dd, c->map, 0,
                                                              c->ntiles);
    else if (way == LL_QHASH)
        ll_quad_hash<<<grid, GT_LEAF_THREADS, 0, s>>>(c->x, c->nleaves, c->dig[way]);
    else
        ll_read<<<132 * 16, 256, 0, s>>>((const uint4 *)c->x, c->n / 4, c->sink);
}

static int ll_cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define LL_REPS 9

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_gpu_leaf_layout: no GPU\n");
        return 77;
    }
    double mib = argc > 1 ? atof(argv[1]) : 1024;
    if (!(mib >= 16 && mib <= 16384)) {
        fprintf(stderr, "bench_gpu_leaf_layout: MiB must be 16 to 16384\n");
        return 2;
    }
    struct ll_ctx c;
    memset(&c, 0, sizeof c);
    c.nleaves = (size_t)(mib * 64); /* 64 leaves of 16 KiB a MiB */
    c.nleaves -= c.nleaves % GT_TILE_LEAVES;
    c.n = c.nleaves * GT_LEAF_FLOATS;
    c.ntiles = (uint32_t)(c.nleaves / GT_TILE_LEAVES);
    float *x;
    LL_CUDA(cudaMalloc((void **)&x, 4 * c.n));
    c.x = x;
    ll_fill<<<1024, 256>>>(x, c.n, 7);
    struct gt_desc d;
    memset(&d, 0, sizeof d);
    d.ptr = x;
    d.count = c.n;
    d.nleaves = c.nleaves;
    d.ntiles = c.ntiles;
    d.tile_leaves = GT_TILE_LEAVES;
    d.aligned = 1;
    LL_CUDA(cudaMalloc((void **)&c.dd, sizeof d));
    LL_CUDA(cudaMemcpy(c.dd, &d, sizeof d, cudaMemcpyHostToDevice));
    LL_CUDA(cudaMalloc((void **)&c.map, 4 * (size_t)c.ntiles));
    LL_CUDA(cudaMemset(c.map, 0, 4 * (size_t)c.ntiles));
    LL_CUDA(cudaMalloc((void **)&c.sink, 4));
    for (int w = 0; w < LL_WAYS; w++) {
        LL_CUDA(cudaMalloc((void **)&c.dig[w], 8 * c.nleaves));
        LL_CUDA(cudaMalloc((void **)&c.part[w], sizeof(struct gt_part) * c.ntiles));
        LL_CUDA(cudaMemset(c.dig[w], 0, 8 * c.nleaves));
        LL_CUDA(cudaMemset(c.part[w], 0, sizeof(struct gt_part) * c.ntiles));
    }

    /* the checks */
    for (int w = 0; w < LL_READ; w++)
        ll_launch(&c, w, 0);
    LL_CUDA(cudaDeviceSynchronize());
    uint64_t *hd[LL_READ];
    struct gt_part *hp[LL_QHASH];
    for (int w = 0; w < LL_READ; w++) {
        hd[w] = (uint64_t *)malloc(8 * c.nleaves);
        LL_CUDA(cudaMemcpy(hd[w], c.dig[w], 8 * c.nleaves, cudaMemcpyDeviceToHost));
    }
    for (int w = 0; w < LL_QHASH; w++) {
        hp[w] = (struct gt_part *)malloc(sizeof(struct gt_part) * c.ntiles);
        LL_CUDA(cudaMemcpy(hp[w], c.part[w], sizeof(struct gt_part) * c.ntiles, cudaMemcpyDeviceToHost));
    }
    int bad = 0;
    for (int w = 1; w < LL_READ; w++)
        if (memcmp(hd[w], hd[0], 8 * c.nleaves) != 0) {
            fprintf(stderr, "bench_gpu_leaf_layout: %s: digests differ from the tested warp's\n", ll_name[w]);
            bad = 1;
        }
    if (memcmp(hp[LL_FAST], hp[LL_TESTED], sizeof(struct gt_part) * c.ntiles) != 0) {
        fprintf(stderr, "bench_gpu_leaf_layout: warp, fast: statistics differ from the tested warp's\n");
        bad = 1;
    }
    double sq[2] = {0, 0}, sk[2] = {0, 0};
    for (int w = 0; w < 2; w++)
        for (uint32_t t = 0; t < c.ntiles; t++) {
            sq[w] += hp[w ? LL_QUAD : LL_TESTED][t].sq;
            sk[w] += hp[w ? LL_QUAD : LL_TESTED][t].sk[5];
        }
    if (!(fabs(sq[1] - sq[0]) <= 1e-12 * sq[0]) || !(fabs(sk[1] - sk[0]) <= 1e-12 * fabs(sk[0]) + 1e-300)) {
        fprintf(stderr, "bench_gpu_leaf_layout: quad: statistics %.17g %.17g against %.17g %.17g\n", sq[1], sk[1],
                sq[0], sk[0]);
        bad = 1;
    }
    if (bad)
        return 1;

    cudaStream_t lo, hi;
    int plo, phi;
    LL_CUDA(cudaDeviceGetStreamPriorityRange(&plo, &phi));
    LL_CUDA(cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, plo));
    LL_CUDA(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, phi));
    cudaEvent_t e0, e1;
    LL_CUDA(cudaEventCreate(&e0));
    LL_CUDA(cudaEventCreate(&e1));
    float alone[LL_WAYS];
    for (int w = 0; w < LL_WAYS; w++) {
        float t[LL_REPS];
        for (int r = 0; r < LL_REPS; r++) {
            LL_CUDA(cudaEventRecord(e0, lo));
            ll_launch(&c, w, lo);
            LL_CUDA(cudaEventRecord(e1, lo));
            LL_CUDA(cudaEventSynchronize(e1));
            LL_CUDA(cudaEventElapsedTime(&t[r], e0, e1));
        }
        qsort(t, LL_REPS, sizeof t[0], ll_cmpf);
        alone[w] = t[LL_REPS / 2];
    }

    cublasHandle_t cb;
    if (cublasCreate(&cb) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "bench_gpu_leaf_layout: cublasCreate failed\n");
        return 2;
    }
    cublasSetStream(cb, hi);
    const int M = 4096, NG = 40;
    float *A, *B, *C, one = 1, zero = 0;
    LL_CUDA(cudaMalloc((void **)&A, 4ull * M * M));
    LL_CUDA(cudaMalloc((void **)&B, 4ull * M * M));
    LL_CUDA(cudaMalloc((void **)&C, 4ull * M * M));
    ll_fill<<<1024, 256>>>(A, (size_t)M * M, 1);
    ll_fill<<<1024, 256>>>(B, (size_t)M * M, 2);
    LL_CUDA(cudaDeviceSynchronize());
    float beside[LL_WAYS + 1];
    for (int w = -1; w < LL_WAYS; w++) {
        float t[LL_REPS];
        for (int r = 0; r < LL_REPS; r++) {
            LL_CUDA(cudaDeviceSynchronize());
            LL_CUDA(cudaEventRecord(e0, hi));
            for (int i = 0; i < NG; i++) {
                cublasSgemm(cb, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, A, M, B, M, &zero, C, M);
                if (w >= 0 && i % 4 == 1)
                    ll_launch(&c, w, lo);
            }
            LL_CUDA(cudaEventRecord(e1, hi));
            LL_CUDA(cudaEventSynchronize(e1));
            LL_CUDA(cudaDeviceSynchronize());
            LL_CUDA(cudaEventElapsedTime(&t[r], e0, e1));
        }
        qsort(t, LL_REPS, sizeof t[0], ll_cmpf);
        beside[w + 1] = t[LL_REPS / 2];
    }
    printf("| way | alone, ms | GB/s | %d SGEMMs beside 10 of it, ms | slowed by, ms |"
           " slowdown over its time alone |\n", NG);
    printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    printf("| (none) | | | %.3f | | |\n", beside[0]);
    for (int w = 0; w < LL_WAYS; w++) {
        double slow = beside[w + 1] - beside[0];
        printf("| %s | %.3f | %.0f | %.3f | %+.3f | %.2f |\n", ll_name[w], alone[w],
               4.0 * (double)c.n / alone[w] / 1e6, beside[w + 1], slow, slow / (10 * alone[w]));
    }
    printf("\n%.0f MiB, %zu leaves, %u tiles of %u leaves; all digests equal, statistics checked.\n", mib, c.nleaves,
           c.ntiles, (unsigned)GT_TILE_LEAVES);
    return 0;
}
