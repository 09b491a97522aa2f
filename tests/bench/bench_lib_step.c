/* bench_lib_step.c: what libdivtrace costs the host in a training step on
 * the GPU, call by call, without Python: the library's calls in the order
 * the PyTorch adapter makes them for the autoencoder 784,128,32,128,784
 * (batch 100): the step's start; the parameters, the input, the module
 * outputs and the gradients deferred in one run and flushed before the
 * optimizer; the updates deferred and flushed after it; the step's end
 * with the loss in device memory, with a wait (divtrace_step_end_device)
 * and without (divtrace_step_end_async). Next to it, the CUDA runtime calls the
 * library is made of, alone, on the same stream, so that a call's cost
 * can be told apart from what it calls. Host microseconds, the median over
 * the steps; the device idle at each call (a synchronize before it) so
 * that no call waits for kernels of the step before.
 * Usage: bench_lib_step [STEPS]. Skips (exit 77) without a usable GPU. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "bench_util.h"
#include "divtrace.h"

#define MAXT 32

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    fprintf(stderr, "bench_lib_step: %s: %s\n", what, cudaGetErrorString(e));
    return 0;
}

static int lib_ok(divtrace *t, int rc, const char *what)
{
    if (rc >= 0)
        return 1;
    fprintf(stderr, "bench_lib_step: %s: %s\n", what, t ? divtrace_errmsg(t) : divtrace_strerror(rc));
    return 0;
}

/* The autoencoder's tensors, in the adapter's record order. */
struct model {
    int n;
    struct divtrace_tensor ts[MAXT];
    const float *data[MAXT];
    int64_t shape[MAXT][2];
    char name[MAXT][48];
};

static void add(struct model *m, const char *name, const char *type, enum divtrace_kind kind, int64_t r,
                int64_t c, float *pool, size_t *used)
{
    int i = m->n++;
    snprintf(m->name[i], sizeof m->name[i], "%s", name);
    m->shape[i][0] = r;
    m->shape[i][1] = c;
    m->ts[i] = (struct divtrace_tensor){m->name[i], type, kind, c ? 2 : 1, m->shape[i], NULL, 0};
    m->data[i] = pool + *used;
    *used += (size_t)(r * (c ? c : 1) + 63) & ~(size_t)63;
}

enum { C_BEGIN, C_MANY1, C_FLUSH1, C_MANY2, C_FLUSH2, C_END, C_STEP, NC };
static const char *cname[NC] = {"divtrace_step_begin", "divtrace_record_many (22 deferred)", "divtrace_flush (22)",
                                "divtrace_record_many (8 deferred)", "divtrace_flush (8)", "the step's end",
                                "the step's library calls"};

/* steps of the adapter's pattern, the step's end with a wait
 * (divtrace_step_end_device) or not (divtrace_step_end_async, the loss in
 * one of two buffers in turn); ct: the calls' host us by step */
static int lib_steps(const struct model *m, float *const *loss, cudaStream_t s, int async, int steps, double *ct)
{
    char path[] = "/tmp/bench_lib_step.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("bench_lib_step: mkstemp");
        return -1;
    }
    close(fd);
    static const char *const cfg[] = {"model", "bench_lib_step", NULL};
    divtrace *t = NULL;
    if (!lib_ok(NULL, divtrace_open(&t, path, cfg, "op"), "divtrace_open"))
        return -1;
    int warm = 5;
    for (int i = 0; i < steps + warm; i++) {
        double tt[C_STEP + 1]; /* before each call, and after the last */
        cudaStreamSynchronize(s);
        tt[0] = now_us();
        int rc = divtrace_step_begin(t, (uint64_t)i);
        tt[1] = now_us();
        if (rc >= 0)
            rc = divtrace_record_many(t, 22, m->ts, m->data, DIVTRACE_DEVICE_DEFERRED, s);
        tt[2] = now_us();
        if (rc >= 0)
            rc = divtrace_flush(t);
        tt[3] = now_us();
        if (rc >= 0)
            rc = divtrace_record_many(t, 8, m->ts + 22, m->data + 22, DIVTRACE_DEVICE_DEFERRED, s);
        tt[4] = now_us();
        if (rc >= 0)
            rc = divtrace_flush(t);
        tt[5] = now_us();
        if (rc >= 0)
            rc = async ? divtrace_step_end_async(t, loss[i % 2], s) : divtrace_step_end_device(t, loss[0], s);
        tt[6] = now_us();
        if (!lib_ok(t, rc, "a step"))
            return -1;
        if (i < warm)
            continue;
        for (int c = 0; c < C_STEP; c++)
            ct[c * steps + i - warm] = tt[c + 1] - tt[c];
        ct[C_STEP * steps + i - warm] = tt[C_STEP] - tt[0];
    }
    int rc = divtrace_close(t, 0, NULL);
    unlink(path);
    return lib_ok(NULL, rc, "divtrace_close") ? 0 : -1;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 2000;
    if (steps < 10) {
        fprintf(stderr, "bench_lib_step: STEPS must be at least 10\n");
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_lib_step: skipped: no usable CUDA device\n");
        return 77;
    }
    static const int w[5] = {784, 128, 32, 128, 784};
    const int batch = 100;
    float *pool, *pinned;
    size_t cap = (size_t)4 << 20, used = 0;
    cudaStream_t s;
    if (!cuda_ok(cudaMalloc((void **)&pool, cap * sizeof *pool), "cudaMalloc") ||
        !cuda_ok(cudaMallocHost((void **)&pinned, 64), "cudaMallocHost") ||
        !cuda_ok(cudaStreamCreate(&s), "cudaStreamCreate") ||
        !cuda_ok(cudaMemsetAsync(pool, 0, cap * sizeof *pool, s), "cudaMemsetAsync"))
        return 1;
    struct model m = {0};
    char nm[48];
    for (int l = 0; l < 4; l++) { /* parameters */
        snprintf(nm, sizeof nm, "maps.%d.weight", l);
        add(&m, nm, "Parameter", DIVTRACE_PARAM, w[l + 1], w[l], pool, &used);
        snprintf(nm, sizeof nm, "maps.%d.bias", l);
        add(&m, nm, "Parameter", DIVTRACE_PARAM, w[l + 1], 0, pool, &used);
    }
    add(&m, "input.0", "Tensor", DIVTRACE_INPUT, batch, w[0], pool, &used);
    for (int l = 0; l < 4; l++) { /* module outputs */
        snprintf(nm, sizeof nm, "maps.%d", l);
        add(&m, nm, "Linear", DIVTRACE_FORWARD, batch, w[l + 1], pool, &used);
    }
    add(&m, "loss", "Autoencoder", DIVTRACE_FORWARD, 1, 0, pool, &used);
    for (int l = 0; l < 8; l++) { /* gradients, then updates, of the parameters */
        snprintf(nm, sizeof nm, "%s.grad", m.name[l]);
        add(&m, nm, "Parameter", DIVTRACE_GRAD, m.shape[l][0], m.shape[l][1], pool, &used);
    }
    for (int l = 0; l < 8; l++) {
        snprintf(nm, sizeof nm, "%s@SGD", m.name[l]);
        add(&m, nm, "SGD", DIVTRACE_OPTIMIZER, m.shape[l][0], m.shape[l][1], pool, &used);
    }
    const float *loss = m.data[13];
    if (used + 64 > cap)
        return 1;

    /* the CUDA runtime's calls alone */
    enum { R_MEMSET, R_D2H, R_SYNC_IDLE, R_EVREC, R_EVQUERY, R_PTRATTR, R_GETDEV, NR };
    static const char *rname[NR] = {"cudaMemsetAsync (4 bytes)", "cudaMemcpyAsync (4 bytes to pinned)",
                                    "cudaStreamSynchronize (stream idle)", "cudaEventRecord",
                                    "cudaEventQuery (done)", "cudaPointerGetAttributes", "cudaGetDevice"};
    double *rt = malloc((size_t)NR * steps * sizeof *rt), *ct = malloc((size_t)NC * steps * sizeof *ct);
    cudaEvent_t ev;
    if (!rt || !ct || !cuda_ok(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate"))
        return 1;
    cudaStreamSynchronize(s);
    for (int i = 0; i < steps; i++) {
        /* each call timed alone, the stream idle before it */
        for (int r = 0; r < NR; r++) {
            cudaStreamSynchronize(s);
            struct cudaPointerAttributes a;
            int d;
            double t0 = now_us();
            switch (r) {
            case R_MEMSET: cudaMemsetAsync(pool, 0, 4, s); break;
            case R_D2H: cudaMemcpyAsync(pinned, loss, 4, cudaMemcpyDeviceToHost, s); break;
            case R_SYNC_IDLE: cudaStreamSynchronize(s); break;
            case R_EVREC: cudaEventRecord(ev, s); break;
            case R_EVQUERY: cudaEventQuery(ev); break;
            case R_PTRATTR: cudaPointerGetAttributes(&a, m.data[i % m.n]); break;
            default: cudaGetDevice(&d); break;
            }
            rt[r * steps + i] = now_us() - t0;
        }
    }
    if (!cuda_ok(cudaGetLastError(), "the runtime's calls"))
        return 1;

    /* the library's calls, one step at a time, the step's end with a wait
     * and without */
    double *ca = malloc((size_t)NC * steps * sizeof *ca);
    float *loss2[2] = {(float *)loss, pool + used};
    if (!ca || lib_steps(&m, loss2, s, 0, steps, ct) < 0 || lib_steps(&m, loss2, s, 1, steps, ca) < 0)
        return 1;
    printf("## libdivtrace's calls in an autoencoder step (784,128,32,128,784, batch 100), %d steps\n\n", steps);
    printf("| call | host us, median: divtrace_step_end_device | divtrace_step_end_async |\n| --- | ---: | ---: |\n");
    for (int c = 0; c < NC; c++)
        printf("| %s | %.2f | %.2f |\n", cname[c], bench_median(ct + (size_t)c * steps, steps),
               bench_median(ca + (size_t)c * steps, steps));
    printf("\n| CUDA runtime call alone | host us, median |\n| --- | ---: |\n");
    for (int r = 0; r < NR; r++)
        printf("| %s | %.2f |\n", rname[r], bench_median(rt + (size_t)r * steps, steps));
    free(rt);
    free(ct);
    free(ca);
    return 0;
}
