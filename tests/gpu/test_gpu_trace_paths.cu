/* test_gpu_trace_paths.cu: one set of buffers through every way
 * gpu_trace.cu and gpu_trace_one.cu have of making their records, all bitwise equal, the hashes
 * those of hash_tensor(): gpu_trace_batch with a warp a tile and with
 * capped grids (the leaf kernel's LOOP variant, one root block for all
 * items), the batch captured as a CUDA graph (the descriptors uploaded
 * once) and replayed twice, and gpu_trace_one per buffer. The buffers:
 * more than 512 leaves (8-leaf tiles, a root of many 1 KiB blocks)
 * between small ones, one of them not 16-byte aligned, one whose root
 * input is a whole number of 1 KiB blocks (its last block is the
 * tail). tests/gpu/test_gpu_trace.c checks the
 * statistics against the CPU's. Exits 77 without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
extern "C" {
#include <cmocka.h> /* declares C functions without C linkage in C++ */

#include "hash.h"
}

#define TP_CUDA(call) assert_int_equal((int)(call), (int)cudaSuccess)

/* element counts and offsets (in floats) into their allocations */
static const size_t tp_count[] = {4096 * 3 + 1, 4096 * 513 + 5, 77, 4096 * 600, 4096 * 5 + 2,
                                  4096 * 4096, 4096 * 40};
static const size_t tp_off[] = {0, 1, 0, 0, 0, 0, 3};
#define TP_N ((int)(sizeof tp_count / sizeof tp_count[0]))

static float *tp_host[TP_N], *tp_dev[TP_N];
static const float *tp_view[TP_N];
static uint64_t tp_want[TP_N];

static uint64_t tp_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int tp_setup(void **state)
{
    (void)state;
    uint64_t r = 2718;
    for (int i = 0; i < TP_N; i++) {
        size_t n = tp_count[i] + tp_off[i];
        tp_host[i] = (float *)malloc(n * sizeof(float));
        assert_non_null(tp_host[i]);
        for (size_t k = 0; k < n; k++)
            tp_host[i][k] = (float)((double)(tp_rng(&r) >> 11) * 0x1p-52 - 1.0);
        TP_CUDA(cudaMalloc((void **)&tp_dev[i], n * sizeof(float)));
        TP_CUDA(cudaMemcpy(tp_dev[i], tp_host[i], n * sizeof(float), cudaMemcpyHostToDevice));
        tp_view[i] = tp_dev[i] + tp_off[i];
        tp_want[i] = hash_tensor(tp_host[i] + tp_off[i], tp_count[i] * sizeof(float));
    }
    return 0;
}

static int tp_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < TP_N; i++) {
        cudaFree(tp_dev[i]);
        free(tp_host[i]);
    }
    return 0;
}

/* Every field but op, bit for bit. */
static int tp_same(const struct trace_oprec *a, const struct trace_oprec *b)
{
    return a->hash == b->hash && memcmp(&a->l2, &b->l2, sizeof a->l2) == 0 &&
           memcmp(&a->min, &b->min, sizeof a->min) == 0 && memcmp(&a->max, &b->max, sizeof a->max) == 0 &&
           a->nan == b->nan && a->inf == b->inf && memcmp(a->sketch, b->sketch, sizeof a->sketch) == 0;
}

/* got against the reference records (the first path's) and the hashes. */
static void tp_check(const struct trace_oprec *got, const struct trace_oprec *ref, const char *what)
{
    for (int i = 0; i < TP_N; i++) {
        if (got[i].hash != tp_want[i]) {
            fprintf(stderr, "%s: buffer %d (%zu floats): hash %016llx, hash_tensor %016llx\n", what, i,
                    tp_count[i], (unsigned long long)got[i].hash, (unsigned long long)tp_want[i]);
            fail();
        }
        if (ref && !tp_same(&got[i], &ref[i])) {
            fprintf(stderr, "%s: buffer %d (%zu floats): record differs from the batch's\n", what, i,
                    tp_count[i]);
            fail();
        }
    }
}

static void test_paths(void **state)
{
    (void)state;
    cudaStream_t s;
    TP_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct trace_oprec ref[TP_N], got[TP_N];
    memset(ref, 0, sizeof ref);
    memset(got, 0, sizeof got);

    struct gpu_trace *t = gpu_trace_new(s);
    gpu_trace_batch(t, tp_view, tp_count, TP_N, ref);
    tp_check(ref, NULL, "batch");
    gpu_trace_batch(t, tp_view, tp_count, TP_N, got);
    tp_check(got, ref, "batch again");

    /* capped: 3 leaf blocks (6 warps loop over the tiles), 1 root block */
    gpu_trace_set_caps(t, 3, 1);
    memset(got, 0, sizeof got);
    gpu_trace_batch(t, tp_view, tp_count, TP_N, got);
    tp_check(got, ref, "capped batch");
    gpu_trace_set_caps(t, 0, 0);

    /* captured, as the backend does for a step taken as a graph */
    struct gpu_trace *g = gpu_trace_new(s);
    gpu_trace_reserve_as(g, t);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    TP_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    int rc = gpu_trace_enqueue(g, tp_view, tp_count, TP_N, 1);
    TP_CUDA(cudaStreamEndCapture(s, &graph));
    assert_int_equal(rc, 0);
    TP_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    TP_CUDA(cudaGraphDestroy(graph));
    gpu_trace_upload(g);
    for (int rep = 0; rep < 2; rep++) { /* a replay leaves nothing that changes the next */
        TP_CUDA(cudaGraphLaunch(exec, s));
        memset(got, 0, sizeof got);
        gpu_trace_collect(g, got, TP_N);
        tp_check(got, ref, rep ? "graph, second replay" : "graph");
    }
    TP_CUDA(cudaGraphExecDestroy(exec));
    gpu_trace_free(g);
    gpu_trace_free(t);

    /* one buffer at a time, libdivtrace's way (scratch reused) */
    size_t most = 0;
    for (int i = 0; i < TP_N; i++) {
        size_t b = gpu_trace_one_bytes(tp_count[i]);
        assert_true(b > 0);
        most = b > most ? b : most;
    }
    void *scratch;
    unsigned *ctr;
    struct trace_oprec *drec;
    TP_CUDA(cudaMalloc(&scratch, most));
    TP_CUDA(cudaMalloc((void **)&ctr, sizeof *ctr));
    TP_CUDA(cudaMalloc((void **)&drec, sizeof *drec));
    TP_CUDA(cudaMemset(ctr, 0, sizeof *ctr));
    /* the scratch left dirty, as a previous record would */
    TP_CUDA(cudaMemset(scratch, 0x5a, most));
    for (int i = 0; i < TP_N; i++) {
        TP_CUDA(gpu_trace_one(scratch, tp_view[i], tp_count[i], drec, ctr, s));
        TP_CUDA(cudaMemcpyAsync(&got[i], drec, sizeof *drec, cudaMemcpyDeviceToHost, s));
        TP_CUDA(cudaStreamSynchronize(s));
    }
    tp_check(got, ref, "gpu_trace_one");
    cudaFree(scratch);
    cudaFree(ctr);
    cudaFree(drec);
    TP_CUDA(cudaStreamDestroy(s));
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("test_gpu_trace_paths: skipped: no CUDA device\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
    };
    return cmocka_run_group_tests(tests, tp_setup, tp_teardown);
}
