/* gpu_ops_image.cu: the cuda backend's image ops that select or move
 * elements, bit for bit: max pooling and its gradient, 2x upsampling and
 * its gradient, channel concatenation and slices (gpu_ops.cu: the rest of
 * the ops and the table). Dimension letters as in gpu_ops.cu. */
#include <stdint.h>

#include "gpu_ops.cuh"

/* ---- image ops that select or move elements (bit for bit) ------------------- */

/* MAXPOOL2's j* of the window (v0 v1 / v2 v3): the first NaN, else the
 * first element equal to the maximum (as cpu_maxpool2_pick). */
static __device__ int gpu_ops_pool_pick(float v0, float v1, float v2, float v3)
{
    int best = 0;
    float m = v0;
    if (!isnan(m) && (isnan(v1) || v1 > m)) {
        best = 1;
        m = v1;
    }
    if (!isnan(m) && (isnan(v2) || v2 > m)) {
        best = 2;
        m = v2;
    }
    if (!isnan(m) && (isnan(v3) || v3 > m))
        best = 3;
    return best;
}

/* One thread per window o of (planes, OH, OW), x (planes, 2 OH, 2 OW):
 * maxpool2 writes the chosen element's bits to out[o]; maxpool2_bwd (dy
 * non-NULL) writes dy[o]'s bits at the chosen element of its window of out
 * and +0 at the other three. */
static __global__ void gpu_ops_k_pool(uint32_t *out, const uint32_t *x, const uint32_t *dy,
                                      size_t oh, size_t ow, size_t total)
{
    size_t w = 2 * ow;
    GPU_OPS_FOR(o, total) {
        size_t p = o / (oh * ow), i = o / ow % oh, j = o % ow;
        size_t base = (p * 2 * oh + 2 * i) * w + 2 * j, at[4] = {base, base + 1, base + w, base + w + 1};
        int best = gpu_ops_pool_pick(__uint_as_float(x[at[0]]), __uint_as_float(x[at[1]]),
                                     __uint_as_float(x[at[2]]), __uint_as_float(x[at[3]]));
        if (!dy) {
            out[o] = x[base + (size_t)(best >> 1) * w + (size_t)(best & 1)];
            continue;
        }
        uint32_t d = dy[o];
#pragma unroll
        for (int k = 0; k < 4; k++)
            out[at[k]] = k == best ? d : 0u;
    }
}

GPU_OP(gpu_ops_maxpool2)
{
    /* in: x (N,C,H,W); out (N,C,H/2,W/2) */
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    size_t oh = nd->shape[2], ow = nd->shape[3];
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_pool, (uint32_t *)out, (const uint32_t *)in[0],
                   (const uint32_t *)NULL, oh, ow, nd->count);
}

GPU_OP(gpu_ops_maxpool2_bwd)
{
    /* in: x (N,C,H,W), dy (N,C,H/2,W/2); out (N,C,H,W) */
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    size_t oh = GPU_OPS_SHAPE(1, 2), ow = GPU_OPS_SHAPE(1, 3);
    size_t windows = g->nodes[nd->inputs[1]].count;
    GPU_OPS_LAUNCH(c, windows, gpu_ops_k_pool, (uint32_t *)out, (const uint32_t *)in[0],
                   (const uint32_t *)in[1], oh, ow, windows);
}

/* out (planes, 2H, 2W) = x (planes, H, W) at (h / 2, w / 2) */
static __global__ void gpu_ops_k_upsample2(float *out, const float *x, size_t h, size_t w,
                                           size_t total)
{
    GPU_OPS_FOR(i, total) {
        size_t p = i / (4 * h * w), y = i / (2 * w) % (2 * h), v = i % (2 * w);
        out[i] = x[(p * h + y / 2) * w + v / 2];
    }
}

GPU_OP(gpu_ops_upsample2)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_upsample2, GPU_OPS_OUT, GPU_OPS_IN(0),
                   (size_t)GPU_OPS_SHAPE(0, 2), (size_t)GPU_OPS_SHAPE(0, 3), nd->count);
    GPU_PROF_ELEM(c, nd, out);
}

/* out (planes, H, W) = ((a + b) + c) + d over each 2x2 block of dy
 * (planes, 2H, 2W), a b on the upper row, c d on the lower (op.h's order) */
static __global__ void gpu_ops_k_upsample2_bwd(float *out, const float *dy, size_t h, size_t w,
                                               size_t total)
{
    GPU_OPS_FOR(i, total) {
        size_t p = i / (h * w), y = i / w % h, v = i % w;
        const float *up = dy + (p * 2 * h + 2 * y) * 2 * w + 2 * v, *lo = up + 2 * w;
        out[i] = __fadd_rn(__fadd_rn(__fadd_rn(up[0], up[1]), lo[0]), lo[1]);
    }
}

GPU_OP(gpu_ops_upsample2_bwd)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_upsample2_bwd, GPU_OPS_OUT, GPU_OPS_IN(0),
                   (size_t)nd->shape[2], (size_t)nd->shape[3], nd->count);
    GPU_PROF_ELEM(c, nd, out);
}

/* CONCAT's inputs: x[k] (N, C_k, H, W), len[k] = C_k H W, item = sum of len */
struct gpu_ops_cat {
    const float *x[OP_MAX_INPUTS];
    size_t len[OP_MAX_INPUTS];
    int n;
    size_t item;
};

static __global__ void gpu_ops_k_concat(float *out, struct gpu_ops_cat a, size_t total)
{
    GPU_OPS_FOR(i, total) {
        size_t b = i / a.item, r = i % a.item;
        const float *src = a.x[0];
        size_t len = a.len[0];
#pragma unroll
        for (int k = 1; k < OP_MAX_INPUTS; k++)
            if (k < a.n && r >= len) {
                r -= len;
                src = a.x[k];
                len = a.len[k];
            }
        out[i] = src[b * len + r];
    }
}

GPU_OP(gpu_ops_concat)
{
    /* in: x_k (N,C_k,H,W), k = 0 .. ninputs-1; out (N, sum C_k, H, W) */
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    DT_ASSERT(nd->ninputs >= 1 && nd->ninputs <= OP_MAX_INPUTS, "concat %s: %d inputs", nd->name,
              nd->ninputs);
    struct gpu_ops_cat a = {};
    size_t hw = (size_t)nd->shape[2] * nd->shape[3];
    a.n = nd->ninputs;
    for (int k = 0; k < nd->ninputs; k++) {
        a.x[k] = GPU_OPS_IN(k);
        a.len[k] = (size_t)GPU_OPS_SHAPE(k, 1) * hw;
        a.item += a.len[k];
    }
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_concat, GPU_OPS_OUT, a, nd->count);
    GPU_PROF_ELEM(c, nd, out);
}

/* slice: out (N, cn, HW) = x (N, total, HW) at channels c0 .. c0+cn-1 */
static __global__ void gpu_ops_k_slice(float *out, const float *x, size_t hw, size_t total_c,
                                       size_t c0, size_t cn, size_t count)
{
    GPU_OPS_FOR(i, count) {
        size_t b = i / (cn * hw), r = i % (cn * hw);
        out[i] = x[(b * total_c + c0) * hw + r];
    }
}

/* slice_bwd: out (N, total, HW) = dy (N, cn, HW) in channels c0 .. c0+cn-1, +0 elsewhere */
static __global__ void gpu_ops_k_slice_bwd(float *out, const float *dy, size_t hw, size_t total_c,
                                           size_t c0, size_t cn, size_t count)
{
    GPU_OPS_FOR(i, count) {
        size_t b = i / (total_c * hw), ch = i / hw % total_c, j = i % hw;
        out[i] = ch >= c0 && ch < c0 + cn ? dy[(b * cn + (ch - c0)) * hw + j] : 0.0f;
    }
}

GPU_OP(gpu_ops_slice)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    size_t hw = (size_t)nd->shape[2] * nd->shape[3];
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_slice, GPU_OPS_OUT, GPU_OPS_IN(0), hw,
                   (size_t)GPU_OPS_SHAPE(0, 1), (size_t)nd->p.slice.c0, (size_t)nd->p.slice.n,
                   nd->count);
    GPU_PROF_ELEM(c, nd, out);
}

GPU_OP(gpu_ops_slice_bwd)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    size_t hw = (size_t)nd->shape[2] * nd->shape[3];
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_slice_bwd, GPU_OPS_OUT, GPU_OPS_IN(0), hw,
                   (size_t)nd->shape[1], (size_t)nd->p.slice.c0, (size_t)nd->p.slice.n,
                   nd->count);
    GPU_PROF_ELEM(c, nd, out);
}
