/* bench_hash.c: single-core throughput of the tensor tree hash for every
 * implementation the CPU supports, next to plain XXH3 over the same buffer
 * and the system's shared libxxhash; prints a Markdown table.
 * Usage: bench_hash [--quick] */
#include <cpuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h> /* the shared library's XXH3, the outside yardstick */

#include "hash.h"
#include "stats.h"
#include "util.h"
#include "bench_util.h"

#define BENCH_SMALL_BYTES ((size_t)64 << 10)
#define BENCH_LARGE_BYTES ((size_t)256 << 20)
#define BENCH_LINE 64

typedef uint64_t (*bench_fn)(const void *data, size_t nbytes);

/* Keeps every digest observable so the hashing cannot be optimised away. */
static volatile uint64_t bench_sink;

/* The tree of hash.h computed with the shared library, for the reference row. */
static uint64_t bench_lib_tree(const void *data, size_t nbytes)
{
    const unsigned char *p = data;
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    for (size_t off = 0; off < nbytes; off += HASH_CHUNK_BYTES) {
        size_t len = nbytes - off < HASH_CHUNK_BYTES ? nbytes - off : HASH_CHUNK_BYTES;
        uint64_t leaf = XXH3_64bits(p + off, len);
        unsigned char le[8];
        for (int k = 0; k < 8; k++)
            le[k] = (unsigned char)(leaf >> (8 * k));
        XXH3_64bits_update(st, le, sizeof le);
    }
    uint64_t d = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return d;
}

static uint64_t bench_lib_bytes(const void *data, size_t nbytes)
{
    return XXH3_64bits(data, nbytes);
}

/* A trace record of the buffer as floats: statistics, sketch and hash. */
static uint64_t bench_record(const void *data, size_t nbytes)
{
    struct trace_oprec r;
    stats_compute(data, nbytes / sizeof(float), &r);
    return r.hash ^ (uint64_t)r.l2;
}

/* Push the large buffer out of the (possibly huge, shared) last-level cache
 * so that every repetition really streams from DRAM. clflushopt is ~50x
 * faster than the serialising clflush, which would dominate the run time. */
__attribute__((target("clflushopt")))
static void bench_evict_opt(const unsigned char *buf, size_t n)
{
    for (size_t off = 0; off < n; off += BENCH_LINE)
        __builtin_ia32_clflushopt(buf + off);
    __builtin_ia32_mfence();
}

static void bench_evict(const unsigned char *buf, size_t n)
{
    /* CPUID leaf 7, EBX bit 23 (clang 14 does not know "clflushopt" as a
     * __builtin_cpu_supports feature). */
    unsigned a, b = 0, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 23 & 1u)) {
        bench_evict_opt(buf, n);
        return;
    }
    for (size_t off = 0; off < n; off += BENCH_LINE)
        __builtin_ia32_clflush(buf + off);
    __builtin_ia32_mfence();
}

/* Median GB/s over reps repetitions of iters calls of fn on buf. */
static double bench_run(bench_fn fn, const unsigned char *buf, size_t n, int iters,
                        int reps, int evict)
{
    double gbps[16];
    DT_ASSERT(reps > 0 && reps <= 16, "bad repetition count %d", reps);
    for (int r = 0; r < reps; r++) {
        if (evict)
            bench_evict(buf, n);
        double t0 = dt_now();
        for (int i = 0; i < iters; i++)
            bench_sink ^= fn(buf, n);
        double t = dt_now() - t0;
        gbps[r] = (double)n * iters / t / 1e9;
    }
    return bench_median(gbps, reps);
}

int main(int argc, char **argv)
{
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
            return 2;
        }
    }
    int reps = quick ? 3 : 9;
    int small_iters = quick ? 4096 : 16384; /* 256 MiB / 1 GiB per repetition */

    unsigned char *small = aligned_alloc(BENCH_LINE, BENCH_SMALL_BYTES);
    unsigned char *large = aligned_alloc(BENCH_LINE, BENCH_LARGE_BYTES);
    DT_ASSERT(small && large, "out of memory");
    uint64_t s = 0x243F6A8885A308D3ull; /* any fixed fill; also faults the pages in */
    for (size_t i = 0; i < BENCH_LARGE_BYTES; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        large[i] = (unsigned char)(s >> 56);
    }
    memcpy(small, large, BENCH_SMALL_BYTES);

    static const char *const impls[] = { "avx512", "avx2", "sse2" };
    printf("| implementation | 64 KiB tree | 64 KiB XXH3 | 256 MiB tree | 256 MiB XXH3 |\n");
    printf("|---|---:|---:|---:|---:|\n");
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        if (hash_set_impl(impls[k]) != 0) {
            printf("| %s | n/a | n/a | n/a | n/a |\n", impls[k]);
            continue;
        }
        printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", impls[k],
               bench_run(hash_tensor, small, BENCH_SMALL_BYTES, small_iters, reps, 0),
               bench_run(hash_bytes, small, BENCH_SMALL_BYTES, small_iters, reps, 0),
               bench_run(hash_tensor, large, BENCH_LARGE_BYTES, 1, reps, 1),
               bench_run(hash_bytes, large, BENCH_LARGE_BYTES, 1, reps, 1));
        fflush(stdout);
    }
    printf("| libxxhash %u.%u.%u (shared) | %.1f | %.1f | %.1f | %.1f |\n",
           XXH_versionNumber() / 10000, XXH_versionNumber() / 100 % 100,
           XXH_versionNumber() % 100,
           bench_run(bench_lib_tree, small, BENCH_SMALL_BYTES, small_iters, reps, 0),
           bench_run(bench_lib_bytes, small, BENCH_SMALL_BYTES, small_iters, reps, 0),
           bench_run(bench_lib_tree, large, BENCH_LARGE_BYTES, 1, reps, 1),
           bench_run(bench_lib_bytes, large, BENCH_LARGE_BYTES, 1, reps, 1));
    printf("\nGB/s (1e9 bytes/s), one core, median of %d; the 256 MiB buffer is flushed "
           "from cache before each repetition.\n", reps);
    hash_set_impl("auto");

    /* the whole record of an op output (stats_compute: statistics and
     * sketch, then the hash, leaf by leaf), per statistics implementation,
     * with the best hash; the buffer's bytes as floats, each float's top
     * byte masked so that its sign is + and its exponent below 128: all
     * finite, the statistics' usual path */
    for (size_t i = 3; i < BENCH_LARGE_BYTES; i += 4)
        large[i] &= 0x3f;
    memcpy(small, large, BENCH_SMALL_BYTES);
    static const char *const spaths[] = { "avx512", "avx2", "generic" };
    printf("\n| statistics | 64 KiB record | 256 MiB record |\n|---|---:|---:|\n");
    for (size_t k = 0; k < sizeof spaths / sizeof spaths[0]; k++) {
        if (stats_use(spaths[k]) != 0) {
            printf("| %s | n/a | n/a |\n", spaths[k]);
            continue;
        }
        printf("| %s | %.1f | %.1f |\n", spaths[k],
               bench_run(bench_record, small, BENCH_SMALL_BYTES, small_iters / 4, reps, 0),
               bench_run(bench_record, large, BENCH_LARGE_BYTES, 1, reps, 1));
        fflush(stdout);
    }
    printf("\nGB/s of float32 data made into a trace record (stats_compute), one core, "
           "median of %d.\n", reps);
    stats_use(NULL);
    free(small);
    free(large);
    return 0;
}
