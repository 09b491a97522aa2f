/* gpu_ops.cuh: what the cuda backend's kernel files share (gpu_ops.cu, and
 * gpu_ops_image.cu for the ops that select or move elements): launch
 * geometry, the grid-stride loop and launch, and the image ops' entries for
 * gpu_ops.cu's table. Only .cu files include it. */
#ifndef DT_GPU_OPS_CUH
#define DT_GPU_OPS_CUH

#include "gpu.h"

#define GPU_OPS_THREADS 256
/* reductions: a block of GPU_OPS_THREADS threads sums a segment of
 * GPU_OPS_SEG consecutive terms (GPU_OPS_ITEMS per thread) */
#define GPU_OPS_ITEMS 16
#define GPU_OPS_SEG ((size_t)GPU_OPS_THREADS * GPU_OPS_ITEMS)
/* im2col scratch per convolution call, in floats (batch items are chunked) */
#define GPU_OPS_COL_FLOATS ((size_t)1 << 26)

#define GPU_OPS_IN(k) (static_cast<const float *>(in[k]))
#define GPU_OPS_OUT (static_cast<float *>(out))
#define GPU_OPS_SHAPE(k, d) (g->nodes[nd->inputs[k]].shape[d])

/* Blocks of a grid-stride loop over n > 0 elements: enough to fill the device. */
static inline unsigned gpu_ops_grid(const struct gpu_ctx *c, size_t n)
{
    size_t want = (n + GPU_OPS_THREADS - 1) / GPU_OPS_THREADS;
    size_t cap = (size_t)(c->sm_count > 0 ? c->sm_count : 128) * 8;
    return (unsigned)(want < cap ? want : cap);
}

#define GPU_OPS_FOR(i, n)                                                                   \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                 \
         i += (size_t)gridDim.x * blockDim.x)

/* A grid-stride kernel over n elements on the context's stream, checked. */
#define GPU_OPS_LAUNCH(c, n, kernel, ...)                                                   \
    do {                                                                                    \
        if ((n) > 0) {                                                                      \
            kernel<<<gpu_ops_grid(c, n), GPU_OPS_THREADS, 0, (c)->stream>>>(__VA_ARGS__);   \
            GPU_LAUNCHED();                                                                 \
        }                                                                                   \
    } while (0)

/* gpu_ops_image.cu */
GPU_OP(gpu_ops_maxpool2);
GPU_OP(gpu_ops_maxpool2_bwd);
GPU_OP(gpu_ops_upsample2);
GPU_OP(gpu_ops_upsample2_bwd);
GPU_OP(gpu_ops_concat);
GPU_OP(gpu_ops_slice);
GPU_OP(gpu_ops_slice_bwd);

#endif
