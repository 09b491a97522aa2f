/* gpu_green.cu: the trace stream in a CUDA green context of part of the
 * SMs (half by default, DIVTRACE_TRACE_SMS=K), so that the trace kernels
 * leave the rest to the next step (gpu.h: gpu_green_stream,
 * gpu_green_free). */
#include <stdio.h>

#include <cuda.h> /* the green context's types; its functions come through the runtime */
#include <cudaTypedefs.h>

#include "gpu.h"

/* A green context of K SMs (as many as the device's partition rules give
 * at least K) holds the trace stream, so that the trace's blocks stay on
 * those SMs and leave the others whole to the step. On the H200, with
 * the next step queued behind each step, half of the SMs cost the step
 * least (tests/bench/RESULTS.md). The driver's functions come through the
 * runtime (cudaGetDriverEntryPointByVersion), so the program does not link
 * the driver library. */
static PFN_cuGreenCtxDestroy_v12040 gpu_green_destroy;

void gpu_green_free(struct gpu_ctx *c)
{
    if (c->tgreen && gpu_green_destroy)
        gpu_green_destroy((CUgreenCtx)c->tgreen);
    c->tgreen = NULL;
}

/* 0 with c->tstream made in a green context; -1 (a line on stderr unless
 * quiet) when the device or driver cannot, and the caller makes an
 * ordinary stream. */
int gpu_green_stream(struct gpu_ctx *c, unsigned sms, int quiet)
{
    PFN_cuDeviceGet_v2000 dev_get;
    PFN_cuDeviceGetDevResource_v12040 get_res;
    PFN_cuDevSmResourceSplitByCount_v12040 split;
    PFN_cuDevResourceGenerateDesc_v12040 gen_desc;
    PFN_cuGreenCtxCreate_v12040 create;
    PFN_cuGreenCtxStreamCreate_v12050 stream_create;
    cudaDriverEntryPointQueryResult q;
    const char *what = NULL;
#define GPU_DRV(sym, ver, fn)                                                                              \
    (what = #sym, cudaGetDriverEntryPointByVersion(#sym, (void **)&(fn), ver, cudaEnableDefault, &q) ==   \
                      cudaSuccess && q == cudaDriverEntryPointSuccess)
    if (!(GPU_DRV(cuDeviceGet, 2000, dev_get) && GPU_DRV(cuDeviceGetDevResource, 12040, get_res) &&
          GPU_DRV(cuDevSmResourceSplitByCount, 12040, split) &&
          GPU_DRV(cuDevResourceGenerateDesc, 12040, gen_desc) && GPU_DRV(cuGreenCtxCreate, 12040, create) &&
          GPU_DRV(cuGreenCtxDestroy, 12040, gpu_green_destroy) &&
          GPU_DRV(cuGreenCtxStreamCreate, 12050, stream_create))) {
        cudaGetLastError();
        if (!quiet)
            fprintf(stderr, "DIVTRACE_TRACE_SMS: the driver has no %s; the trace stream uses every SM\n", what);
        return -1;
    }
#undef GPU_DRV
    CUdevice dev;
    CUdevResource all, part;
    CUdevResourceDesc desc;
    CUgreenCtx g = NULL;
    CUstream st;
    unsigned ngroups = 1;
    CUresult r;
    what = "the device";
    if ((r = dev_get(&dev, c->device)) != CUDA_SUCCESS ||
        (what = "the SMs", r = get_res(dev, &all, CU_DEV_RESOURCE_TYPE_SM)) != CUDA_SUCCESS ||
        (what = "a split", r = split(&part, &ngroups, &all, NULL, 0, sms)) != CUDA_SUCCESS ||
        (what = "a descriptor", r = gen_desc(&desc, &part, 1)) != CUDA_SUCCESS ||
        (what = "the context", r = create(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM)) != CUDA_SUCCESS ||
        (what = "the stream", r = stream_create(&st, g, CU_STREAM_NON_BLOCKING, c->prio_trace)) != CUDA_SUCCESS) {
        if (!quiet)
            fprintf(stderr, "DIVTRACE_TRACE_SMS=%u: green context: %s failed (CUresult %d); the trace stream "
                    "uses every SM\n", sms, what, (int)r);
        if (g)
            gpu_green_destroy(g);
        return -1;
    }
    c->tgreen = (void *)g;
    c->trace_sms = (int)part.sm.smCount;
    c->tstream = (cudaStream_t)st;
    return 0;
}
