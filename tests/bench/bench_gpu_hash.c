/* bench_gpu_hash.c: throughput of the GPU trace records (gpu_trace.cu: tree
 * hash and statistics of many buffers in one call) through the cuda
 * backend's trace_batch, for one 1 GiB buffer and for 7441 buffers of
 * PredNet-like sizes (4 KiB to 330 KiB, log-uniform), next to one
 * device-to-device cudaMemcpy of the same number of bytes. CUDA events,
 * median of repeats; a trace_batch call is synchronous, so its time is the
 * whole call (descriptor copy, two kernels, records back). Prints Markdown;
 * exits 77 without a GPU.
 * Usage: bench_gpu_hash [--quick] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The runtime's C API, for events and the memcpy yardstick only: the
 * traced buffers come from the backend like any tensor's. */
#include <cuda_runtime_api.h>

#include "backend.h"
#include "util.h"
#include "bench_util.h"

#define BENCH_GIB ((size_t)1 << 30)
#define BENCH_MAX_REPS 21

#define BENCH_CUDA(call)                                                                    \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        DT_ASSERT(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));              \
    } while (0)

static const struct backend_ops *be;
static void *ctx;

static uint64_t bench_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Random floats in [-1, 1) into a fresh buffer of count elements, uploaded
 * from a 16 MiB host pattern at a shift that depends on seed (the hash does
 * not care that the data repeat). */
static backend_buf *bench_buffer(size_t count, uint64_t seed)
{
    static float *pat;
    const size_t plen = (size_t)4 << 20;
    if (!pat) {
        pat = dt_malloc((plen + 1024) * sizeof *pat);
        uint64_t s = 1;
        for (size_t i = 0; i < plen + 1024; i++)
            pat[i] = (float)((double)(bench_rng(&s) >> 40) * 0x1p-23 - 1.0);
    }
    backend_buf *b = be->alloc(ctx, count);
    for (size_t off = 0; off < count; off += plen) {
        size_t len = count - off < plen ? count - off : plen;
        be->upload(ctx, (float *)b + off, pat + (seed + off / plen) % 1024, len);
    }
    return b;
}

/* Median milliseconds of trace_batch over the n buffers, and of one
 * device-to-device copy of their total size. */
static void bench_case(const char *what, backend_buf *const *bufs, const size_t *counts, int n, int reps)
{
    size_t bytes = 0;
    for (int k = 0; k < n; k++)
        bytes += counts[k] * sizeof(float);
    struct trace_oprec *rec = dt_calloc((size_t)n, sizeof *rec);
    double tr[BENCH_MAX_REPS], cp[BENCH_MAX_REPS];
    cudaEvent_t e0, e1;
    BENCH_CUDA(cudaEventCreate(&e0));
    BENCH_CUDA(cudaEventCreate(&e1));
    be->trace_batch(ctx, (const backend_buf *const *)bufs, counts, n, rec); /* warm-up: scratch, modules */
    for (int r = 0; r < reps; r++) {
        float ms;
        BENCH_CUDA(cudaEventRecord(e0, 0));
        be->trace_batch(ctx, (const backend_buf *const *)bufs, counts, n, rec);
        BENCH_CUDA(cudaEventRecord(e1, 0));
        BENCH_CUDA(cudaEventSynchronize(e1));
        BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        tr[r] = ms;
    }
    void *src, *dst;
    BENCH_CUDA(cudaMalloc(&src, bytes));
    BENCH_CUDA(cudaMalloc(&dst, bytes));
    BENCH_CUDA(cudaMemset(src, 0x3c, bytes));
    BENCH_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice)); /* warm-up */
    for (int r = 0; r < reps; r++) {
        float ms;
        BENCH_CUDA(cudaEventRecord(e0, 0));
        BENCH_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
        BENCH_CUDA(cudaEventRecord(e1, 0));
        BENCH_CUDA(cudaEventSynchronize(e1));
        BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        cp[r] = ms;
    }
    BENCH_CUDA(cudaFree(src));
    BENCH_CUDA(cudaFree(dst));
    BENCH_CUDA(cudaEventDestroy(e0));
    BENCH_CUDA(cudaEventDestroy(e1));
    double t = bench_median(tr, reps), c = bench_median(cp, reps);
    double gb = (double)bytes / 1e9;
    printf("| %s | %d | %.1f | %.3f | %.0f | %.3f | %.0f | %.0f | %.2f |\n", what, n, (double)bytes / (1 << 20),
           t, gb / (t / 1e3), c, gb / (c / 1e3), 2 * gb / (c / 1e3), c / t);
    free(rec);
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int reps = quick ? 3 : BENCH_MAX_REPS;
    struct backend_options opt;
    memset(&opt, 0, sizeof opt);
    opt.threads = 1;
    be = backend_find("cuda");
    if (!be || be->init(&ctx, &opt) < 0) {
        fprintf(stderr, "bench_gpu_hash: skipped: %s\n", dt_error());
        return 77;
    }
    struct trace_config cfg;
    memset(&cfg, 0, sizeof cfg);
    be->describe(ctx, &cfg);
    const char *dev = trace_config_get(&cfg, "device");
    printf("GPU trace records (hash + statistics) on %s, median of %d\n\n", dev ? dev : "?", reps);
    printf("| case | buffers | MiB | trace ms | trace GB/s | memcpy ms | memcpy GB/s (copied) |"
           " memcpy GB/s (read + write) | trace speed / memcpy |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");

    /* one large buffer */
    size_t big = (quick ? BENCH_GIB / 8 : BENCH_GIB) / sizeof(float);
    backend_buf *one = bench_buffer(big, 1);
    bench_case(quick ? "one 128 MiB buffer" : "one 1 GiB buffer", &one, &big, 1, reps);
    be->release(ctx, one);

    /* a PredNet-like step: 7441 buffers, 4 KiB to 330 KiB, log-uniform */
    int n = quick ? 1000 : 7441;
    backend_buf **bufs = dt_calloc((size_t)n, sizeof *bufs);
    size_t *counts = dt_calloc((size_t)n, sizeof *counts);
    uint64_t s = 2024;
    for (int k = 0; k < n; k++) {
        double u = (double)(bench_rng(&s) >> 11) * 0x1p-53;
        double kib = 4.0 * exp2(u * log2(330.0 / 4.0));
        counts[k] = (size_t)(kib * 1024.0 / sizeof(float));
        bufs[k] = bench_buffer(counts[k], (uint64_t)k + 7);
    }
    char what[64];
    snprintf(what, sizeof what, "%d buffers, 4 to 330 KiB", n);
    bench_case(what, bufs, counts, n, reps);
    for (int k = 0; k < n; k++)
        be->release(ctx, bufs[k]);
    free(bufs);
    free(counts);
    trace_config_free(&cfg);
    be->free(ctx);
    printf("\n(trace GB/s: bytes traced per second of a whole trace_batch call; memcpy:"
           " one cudaMemcpyAsync of the same bytes)\n");
    return 0;
}
