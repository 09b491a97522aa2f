/* gpu_ops.cu: the cuda backend's op kernels (gpu_ops[], gpu.h): every op
 * type of op.h on device float32 buffers, cuBLAS for matrix products and
 * for convolutions (im2col / col2im around sgemm); the image ops that
 * select or move elements are in gpu_ops_image.cu. Elementwise ops perform
 * the cpu backend's float32 operations in its order through the _rn
 * intrinsics, which nvcc never contracts into an FMA or reorders; reductions
 * follow ctx->atomic: fixed-order trees (--reduce tree) or atomicAdd in
 * arrival order (--reduce atomic).
 * Dimension letters: N batch (rows), F features, C input and K output
 * channels, H x W image, R x S kernel; M, N, K of a matrix product. */
#include <math.h>
#include <stdint.h>

#include "gpu_ops.cuh"

/* ---- elementwise ops: a functor per op, mapped over 1 to 3 inputs ----------- */

template <class F>
static __global__ void gpu_ops_k_map1(float *out, const float *x, size_t n, F f)
{
    GPU_OPS_FOR(i, n) out[i] = f(x[i]);
}

template <class F>
static __global__ void gpu_ops_k_map2(float *out, const float *a, const float *b, size_t n, F f)
{
    GPU_OPS_FOR(i, n) out[i] = f(a[i], b[i]);
}

template <class F>
static __global__ void gpu_ops_k_map3(float *out, const float *a, const float *b, const float *d,
                                      size_t n, F f)
{
    GPU_OPS_FOR(i, n) out[i] = f(a[i], b[i], d[i]);
}

template <class F>
static void gpu_ops_map1(void *ctx, const struct node *nd, backend_buf *out,
                         const backend_buf *const *in, F f)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_map1<F>, GPU_OPS_OUT, GPU_OPS_IN(0), nd->count, f);
    GPU_PROF_ELEM(c, nd, out);
}

template <class F>
static void gpu_ops_map2(void *ctx, const struct node *nd, backend_buf *out,
                         const backend_buf *const *in, F f)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_map2<F>, GPU_OPS_OUT, GPU_OPS_IN(0), GPU_OPS_IN(1),
                   nd->count, f);
    GPU_PROF_ELEM(c, nd, out);
}

template <class F>
static void gpu_ops_map3(void *ctx, const struct node *nd, backend_buf *out,
                         const backend_buf *const *in, F f)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_map3<F>, GPU_OPS_OUT, GPU_OPS_IN(0), GPU_OPS_IN(1),
                   GPU_OPS_IN(2), nd->count, f);
    GPU_PROF_ELEM(c, nd, out);
}

/* 1 / (1 + exp(-x)). exp is taken in double and rounded once to float
 * (within 0.5 ulp and a hair, like glibc's expf): CUDA's expf may err by
 * 2 ulp, more than oracle_bound allows this op's exp (1 ulp). */
struct gpu_ops_f_sigmoid {
    __device__ float operator()(float x) const
    {
        float e = __double2float_rn(exp(-(double)x));
        return __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
    }
};

/* tanhf: CUDA documents 2 ulp (oracle_bound allows 3) */
struct gpu_ops_f_tanh {
    __device__ float operator()(float x) const { return tanhf(x); }
};

/* (dy y)(1 - y); inputs y, dy */
struct gpu_ops_f_sigmoid_bwd {
    __device__ float operator()(float y, float dy) const
    {
        return __fmul_rn(__fmul_rn(dy, y), __fsub_rn(1.0f, y));
    }
};

/* dy (1 - y y); inputs y, dy */
struct gpu_ops_f_tanh_bwd {
    __device__ float operator()(float y, float dy) const
    {
        return __fmul_rn(dy, __fsub_rn(1.0f, __fmul_rn(y, y)));
    }
};

/* max(x, 0) as the cpu writes it: NaN gives +0 */
struct gpu_ops_f_relu {
    __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};

/* inputs x, dy */
struct gpu_ops_f_relu_bwd {
    __device__ float operator()(float x, float dy) const { return x > 0.0f ? dy : 0.0f; }
};

struct gpu_ops_f_add {
    __device__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};

struct gpu_ops_f_sub {
    __device__ float operator()(float a, float b) const { return __fsub_rn(a, b); }
};

struct gpu_ops_f_mul {
    __device__ float operator()(float a, float b) const { return __fmul_rn(a, b); }
};

/* the sign bit flipped (zeros and NaN payloads included) */
struct gpu_ops_f_neg {
    __device__ float operator()(float x) const
    {
        return __uint_as_float(__float_as_uint(x) ^ 0x80000000u);
    }
};

/* p - lr g; inputs p, g */
struct gpu_ops_f_sgd {
    float lr;
    __device__ float operator()(float p, float gr) const { return __fsub_rn(p, __fmul_rn(lr, gr)); }
};

/* mu buf + g; inputs buf, g */
struct gpu_ops_f_momentum {
    float mu;
    __device__ float operator()(float buf, float gr) const { return __fadd_rn(__fmul_rn(mu, buf), gr); }
};

/* b1 m + c g, c = 1 - b1 in float (host); inputs m, g */
struct gpu_ops_f_adam_m {
    float b, c;
    __device__ float operator()(float m, float gr) const
    {
        return __fadd_rn(__fmul_rn(b, m), __fmul_rn(c, gr));
    }
};

/* b2 v + (c g) g, c = 1 - b2 in float (host); inputs v, g */
struct gpu_ops_f_adam_v {
    float b, c;
    __device__ float operator()(float v, float gr) const
    {
        return __fadd_rn(__fmul_rn(b, v), __fmul_rn(__fmul_rn(c, gr), gr));
    }
};

/* p - (lr (m / c1)) / (sqrt(v / c2) + eps); inputs p, m, v */
struct gpu_ops_f_adam_p {
    float lr, eps;
    const float *cc; /* device: c1, c2 of this step (gpu_adam_corrections) */
    __device__ float operator()(float p, float m, float v) const
    {
        float c1 = cc[0], c2 = cc[1];
        float num = __fmul_rn(lr, __fdiv_rn(m, c1));
        float den = __fadd_rn(__fsqrt_rn(__fdiv_rn(v, c2)), eps);
        return __fsub_rn(p, __fdiv_rn(num, den));
    }
};

/* t = 0.2f x, then t + 0.5f: two roundings, as op.h writes it */
static __device__ float gpu_ops_hard_sigmoid_t(float x)
{
    return __fadd_rn(__fmul_rn(0.2f, x), 0.5f);
}

struct gpu_ops_f_hard_sigmoid {
    __device__ float operator()(float x) const
    {
        float t = gpu_ops_hard_sigmoid_t(x);
        return t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
    }
};

/* inputs x, dy */
struct gpu_ops_f_hard_sigmoid_bwd {
    __device__ float operator()(float x, float dy) const
    {
        float t = gpu_ops_hard_sigmoid_t(x);
        return 0.0f <= t && t <= 1.0f ? __fmul_rn(0.2f, dy) : 0.0f;
    }
};

struct gpu_ops_f_satlu {
    float m;
    __device__ float operator()(float x) const { return x > m ? m : x; }
};

/* inputs x, dy */
struct gpu_ops_f_satlu_bwd {
    float m;
    __device__ float operator()(float x, float dy) const { return x <= m ? dy : 0.0f; }
};

static GPU_OP(gpu_ops_sigmoid) { gpu_ops_map1(ctx, nd, out, in, gpu_ops_f_sigmoid()); }
static GPU_OP(gpu_ops_tanh) { gpu_ops_map1(ctx, nd, out, in, gpu_ops_f_tanh()); }
static GPU_OP(gpu_ops_relu) { gpu_ops_map1(ctx, nd, out, in, gpu_ops_f_relu()); }
static GPU_OP(gpu_ops_neg) { gpu_ops_map1(ctx, nd, out, in, gpu_ops_f_neg()); }
static GPU_OP(gpu_ops_hard_sigmoid) { gpu_ops_map1(ctx, nd, out, in, gpu_ops_f_hard_sigmoid()); }
static GPU_OP(gpu_ops_satlu) { gpu_ops_map1(ctx, nd, out, in, gpu_ops_f_satlu{nd->p.satlu.max}); }
static GPU_OP(gpu_ops_sigmoid_bwd) { gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_sigmoid_bwd()); }
static GPU_OP(gpu_ops_tanh_bwd) { gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_tanh_bwd()); }
static GPU_OP(gpu_ops_relu_bwd) { gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_relu_bwd()); }
static GPU_OP(gpu_ops_add) { gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_add()); }
static GPU_OP(gpu_ops_sub) { gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_sub()); }
static GPU_OP(gpu_ops_mul) { gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_mul()); }
static GPU_OP(gpu_ops_hard_sigmoid_bwd)
{
    gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_hard_sigmoid_bwd());
}
static GPU_OP(gpu_ops_satlu_bwd)
{
    gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_satlu_bwd{nd->p.satlu.max});
}
static GPU_OP(gpu_ops_sgd) { gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_sgd{nd->p.sgd.lr}); }
static GPU_OP(gpu_ops_momentum)
{
    gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_momentum{nd->p.momentum.mu});
}
static GPU_OP(gpu_ops_adam_m)
{
    float b1 = nd->p.adam.b1;
    gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_adam_m{b1, 1.0f - b1});
}
static GPU_OP(gpu_ops_adam_v)
{
    float b2 = nd->p.adam.b2;
    gpu_ops_map2(ctx, nd, out, in, gpu_ops_f_adam_v{b2, 1.0f - b2});
}

static GPU_OP(gpu_ops_adam_p)
{
    /* the bias corrections are in device memory, set for each step before
     * its first op (so that a captured step reads the step's own values) */
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    const float *cc = gpu_adam_corrections(c, nd->p.adam.b1, nd->p.adam.b2, st->step);
    gpu_ops_map3(ctx, nd, out, in, gpu_ops_f_adam_p{nd->p.adam.lr, nd->p.adam.eps, cc});
}

static __global__ void gpu_ops_k_fill(float *out, float v, size_t n)
{
    GPU_OPS_FOR(i, n) out[i] = v;
}

static GPU_OP(gpu_ops_fill)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_fill, GPU_OPS_OUT, nd->p.fill.value, nd->count);
    GPU_PROF_ELEM(c, nd, out);
}

/* out = (scale [* g]) (p - t), scale = (float)(2.0 / n) from the host, the
 * product with g in float32 as on the cpu; g NULL when absent */
static __global__ void gpu_ops_k_mse_bwd(float *out, const float *p, const float *t,
                                         const float *gr, float scale, size_t n)
{
    float sc = gr ? __fmul_rn(scale, gr[0]) : scale;
    GPU_OPS_FOR(i, n) out[i] = __fmul_rn(sc, __fsub_rn(p[i], t[i]));
}

static GPU_OP(gpu_ops_mse_bwd)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    float scale = (float)(2.0 / (double)nd->count);
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_mse_bwd, GPU_OPS_OUT, GPU_OPS_IN(0), GPU_OPS_IN(1),
                   nd->ninputs > 2 ? GPU_OPS_IN(2) : (const float *)NULL, scale, nd->count);
    GPU_PROF_ELEM(c, nd, out);
}

/* out = (float)((double)scale * (double)g / count), every element */
static __global__ void gpu_ops_k_mean_bwd(float *out, const float *gr, double scale, double count,
                                          size_t n)
{
    float v = __double2float_rn(__ddiv_rn(__dmul_rn(scale, (double)gr[0]), count));
    GPU_OPS_FOR(i, n) out[i] = v;
}

static GPU_OP(gpu_ops_mean_bwd)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_mean_bwd, GPU_OPS_OUT, GPU_OPS_IN(0),
                   (double)nd->p.mean.scale, (double)nd->count, nd->count);
    GPU_PROF_ELEM(c, nd, out);
}

/* out = x + b[(i / inner) % f]: (N,F) + (F) with inner 1, or (N,C,H,W) + (C)
 * with inner H W */
static __global__ void gpu_ops_k_add_bias(float *out, const float *x, const float *b, size_t n,
                                          size_t inner, size_t f)
{
    GPU_OPS_FOR(i, n) out[i] = __fadd_rn(x[i], b[i / inner % f]);
}

static GPU_OP(gpu_ops_add_bias)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    size_t inner = nd->ndim == 4 ? (size_t)nd->shape[2] * nd->shape[3] : 1;
    GPU_OPS_LAUNCH(c, nd->count, gpu_ops_k_add_bias, GPU_OPS_OUT, GPU_OPS_IN(0), GPU_OPS_IN(1),
                   nd->count, inner, (size_t)nd->shape[1]);
    GPU_PROF_ELEM(c, nd, out);
}

/* ---- reductions ------------------------------------------------------------ */

/* Atomic mode cuts every sum into up to GPU_OPS_ATOMIC_PARTS partial sums
 * (at least one term each) and atomicAdd's them onto zero in the order
 * they arrive. A sum of one or two terms cannot vary that way (0 + a and
 * a + b are exact or commutative): see divtrace-record(1), --reduce. */
#define GPU_OPS_ATOMIC_PARTS 64

/* bias_grad of dy (N,F): thread j sums column j over rows [r0, r1) in row
 * order from +0, r0 = blockIdx.y * seg_rows. Tree mode runs one segment of
 * all N rows: the cpu's order exactly. Atomic mode atomicAdd's each
 * segment's sum into out[j] (zeroed first), in arrival order. */
static __global__ void gpu_ops_k_col_sum(float *out, /* (F) */ const float *dy, /* (N,F) */
                                         size_t rows, size_t f, size_t seg_rows, int atomic)
{
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= f)
        return;
    size_t r0 = (size_t)blockIdx.y * seg_rows, r1 = r0 + seg_rows < rows ? r0 + seg_rows : rows;
    float s = 0.0f;
    for (size_t r = r0; r < r1; r++)
        s = __fadd_rn(s, dy[r * f + j]);
    if (atomic)
        atomicAdd(&out[j], s);
    else
        out[j] = s;
}

/* bias_grad of dy (N,C,H,W): channel c's terms in op.h's (n, h, w) order,
 * term i = dy[i / HW, c, i % HW], cut into segments of seg terms
 * (GPU_OPS_SEG in tree mode, fewer in atomic mode); block
 * (seg, c) sums its segment: thread t adds terms t, t + 256, ... from +0 in
 * that order, then the 256 thread sums meet in a fixed pairwise tree
 * (sh[t] += sh[t + 128], then + 64, ..., + 1). Tree mode writes the block's
 * sum to dst[c * nseg + seg]; atomic mode atomicAdd's it into dst[c]. */
static __global__ void gpu_ops_k_chan_sum(float *dst, const float *dy, /* (N,C,H,W) */
                                          size_t n, size_t chans, size_t hw, size_t seg,
                                          unsigned nseg, int atomic)
{
    __shared__ float sh[GPU_OPS_THREADS];
    size_t c = blockIdx.y, len = n * hw, i0 = (size_t)blockIdx.x * seg;
    size_t i1 = i0 + seg < len ? i0 + seg : len;
    float s = 0.0f;
    for (size_t i = i0 + threadIdx.x; i < i1; i += GPU_OPS_THREADS) {
        size_t b = i / hw;
        s = __fadd_rn(s, dy[(b * chans + c) * hw + (i - b * hw)]);
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (unsigned w = GPU_OPS_THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w)
            sh[threadIdx.x] = __fadd_rn(sh[threadIdx.x], sh[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (atomic)
            atomicAdd(&dst[c], sh[0]);
        else
            dst[c * nseg + blockIdx.x] = sh[0];
    }
}

/* out[c] = the nseg partials of channel c summed from +0 in segment order */
static __global__ void gpu_ops_k_chan_finish(float *out, const float *part, size_t chans,
                                             unsigned nseg)
{
    GPU_OPS_FOR(c, chans) {
        float s = 0.0f;
        for (unsigned k = 0; k < nseg; k++)
            s = __fadd_rn(s, part[c * nseg + k]);
        out[c] = s;
    }
}

/* the segment length that cuts a sum of len terms into at most
 * GPU_OPS_ATOMIC_PARTS partial sums, at most GPU_OPS_SEG terms each */
static size_t gpu_ops_atomic_seg(size_t len)
{
    size_t seg = (len + GPU_OPS_ATOMIC_PARTS - 1) / GPU_OPS_ATOMIC_PARTS;
    if (seg < 1)
        seg = 1;
    if (seg > GPU_OPS_SEG)
        seg = GPU_OPS_SEG;
    return seg;
}

static GPU_OP(gpu_ops_bias_grad)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    const struct node *x = &g->nodes[nd->inputs[0]];
    float *o = GPU_OPS_OUT;
    if (c->atomic)
        GPU_CHECK(cudaMemsetAsync(o, 0, nd->count * sizeof(float), c->stream));
    if (x->ndim == 2) {
        size_t rows = x->shape[0], f = x->shape[1];
        size_t seg = c->atomic ? gpu_ops_atomic_seg(rows) : rows;
        if ((rows + seg - 1) / seg > 65535) /* the grid's y limit */
            seg = (rows + 65534) / 65535;
        dim3 grid((unsigned)((f + GPU_OPS_THREADS - 1) / GPU_OPS_THREADS),
                  (unsigned)((rows + seg - 1) / seg));
        gpu_ops_k_col_sum<<<grid, GPU_OPS_THREADS, 0, c->stream>>>(o, GPU_OPS_IN(0), rows, f, seg,
                                                                  c->atomic);
        GPU_LAUNCHED();
        return;
    }
    size_t n = x->shape[0], chans = x->shape[1], hw = (size_t)x->shape[2] * x->shape[3];
    DT_ASSERT(chans <= 65535, "bias_grad %s: %zu channels", nd->name, chans);
    size_t seg = c->atomic ? gpu_ops_atomic_seg(n * hw) : GPU_OPS_SEG;
    unsigned nseg = (unsigned)((n * hw + seg - 1) / seg);
    float *part = o; /* one segment: the block writes out[c] itself */
    if (!c->atomic && nseg > 1)
        part = (float *)gpu_scratch(c, (size_t)nseg * chans * sizeof(float));
    dim3 grid(nseg, (unsigned)chans);
    gpu_ops_k_chan_sum<<<grid, GPU_OPS_THREADS, 0, c->stream>>>(part, GPU_OPS_IN(0), n, chans, hw,
                                                               seg, nseg, c->atomic);
    GPU_LAUNCHED();
    if (part != o)
        GPU_OPS_LAUNCH(c, chans, gpu_ops_k_chan_finish, o, part, chans, nseg);
}

/* mse (sq: terms ((double)a - (double)b)^2) and mean (terms (double)a) in
 * double: block k sums terms [k seg, (k + 1) seg) as
 * gpu_ops_k_chan_sum does (each thread its strided terms in order from +0,
 * then the fixed pairwise tree). Tree mode writes part[k]; atomic mode
 * atomicAdd's into part[0] (zeroed first). */
static __global__ void gpu_ops_k_dsum(double *part, const float *a, const float *b, size_t n,
                                      size_t seg, int sq, int atomic)
{
    __shared__ double sh[GPU_OPS_THREADS];
    size_t i0 = (size_t)blockIdx.x * seg;
    size_t i1 = i0 + seg < n ? i0 + seg : n;
    double s = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += GPU_OPS_THREADS) {
        double v = (double)a[i];
        if (sq) {
            double d = __dsub_rn(v, (double)b[i]);
            v = __dmul_rn(d, d);
        }
        s = __dadd_rn(s, v);
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (unsigned w = GPU_OPS_THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w)
            sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (atomic)
            atomicAdd(&part[0], sh[0]);
        else
            part[blockIdx.x] = sh[0];
    }
}

/* One thread: s = the partials summed from +0 in index order (double), then
 * out = (float)(s / n) (mse) or (float)((double)scale * (s / n)) (mean). */
static __global__ void gpu_ops_k_dsum_finish(float *out, const double *part, unsigned nparts,
                                             double n, int mean, double scale)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    double s = 0.0;
    for (unsigned k = 0; k < nparts; k++)
        s = __dadd_rn(s, part[k]);
    double q = __ddiv_rn(s, n);
    out[0] = __double2float_rn(mean ? __dmul_rn(scale, q) : q);
}

/* mse (b: the targets) or mean (b NULL) of the n elements of a into out[0].
 * Atomic mode still accumulates in double (double atomicAdd), so that the
 * result stays within the oracle's bound for a double sum. */
static void gpu_ops_dsum(struct gpu_ctx *c, float *out, const float *a, const float *b, size_t n,
                         int mean, float scale)
{
    size_t seg = c->atomic ? gpu_ops_atomic_seg(n) : GPU_OPS_SEG;
    unsigned nseg = (unsigned)((n + seg - 1) / seg);
    double *part = (double *)gpu_scratch(c, (c->atomic ? 1 : (size_t)nseg) * sizeof(double));
    if (c->atomic)
        GPU_CHECK(cudaMemsetAsync(part, 0, sizeof(double), c->stream));
    gpu_ops_k_dsum<<<nseg, GPU_OPS_THREADS, 0, c->stream>>>(part, a, b, n, seg, !mean, c->atomic);
    GPU_LAUNCHED();
    gpu_ops_k_dsum_finish<<<1, 1, 0, c->stream>>>(out, part, c->atomic ? 1 : nseg, (double)n, mean,
                                                  (double)scale);
    GPU_LAUNCHED();
}

static GPU_OP(gpu_ops_mse)
{
    gpu_ops_dsum((struct gpu_ctx *)ctx, GPU_OPS_OUT, GPU_OPS_IN(0), GPU_OPS_IN(1),
                 g->nodes[nd->inputs[0]].count, 0, 1.0f);
}

static GPU_OP(gpu_ops_mean)
{
    gpu_ops_dsum((struct gpu_ctx *)ctx, GPU_OPS_OUT, GPU_OPS_IN(0), NULL,
                 g->nodes[nd->inputs[0]].count, 1, nd->p.mean.scale);
}

/* ---- matrix product and convolutions (cuBLAS) --------------------------------
 * cuBLAS is column-major: a row-major (r, c) matrix is its transpose there,
 * so row-major out = A B is computed as out^T = B^T A^T. */

static const float gpu_ops_one = 1.0f, gpu_ops_zero = 0.0f;

static GPU_OP(gpu_ops_matmul)
{
    /* out (M,N) = op(A) (M,K) . op(B) (K,N), all row-major */
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    int ta = nd->p.mm.ta, tb = nd->p.mm.tb;
    int m = (int)nd->shape[0], n = (int)nd->shape[1];
    int k = (int)(ta ? GPU_OPS_SHAPE(0, 0) : GPU_OPS_SHAPE(0, 1));
    GPU_BLAS(cublasSgemm(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                         n, m, k, &gpu_ops_one, GPU_OPS_IN(1), (int)GPU_OPS_SHAPE(1, 1),
                         GPU_OPS_IN(0), (int)GPU_OPS_SHAPE(0, 1), &gpu_ops_zero, GPU_OPS_OUT, n));
}

/* Sizes of one convolution (op.h); R and S odd. */
struct gpu_ops_conv {
    int n, c, h, w, k, r, s;
};

/* col (nb, C*R*S, H*W): row (c, r, s) of item b holds x[b, c, h+r-R/2, w+s-S/2]
 * at column h W + w, +0 outside the image (as cpu_conv_im2col). */
static __global__ void gpu_ops_k_im2col(float *col, const float *x, /* (nb,C,H,W) */
                                        struct gpu_ops_conv sh, size_t total)
{
    size_t hw = (size_t)sh.h * sh.w, crs = (size_t)sh.c * sh.r * sh.s;
    GPU_OPS_FOR(i, total) {
        size_t p = i % hw, row = i / hw % crs, b = i / hw / crs;
        int s = (int)(row % (size_t)sh.s), r = (int)(row / (size_t)sh.s % (size_t)sh.r);
        int ch = (int)(row / ((size_t)sh.r * sh.s));
        int y = (int)(p / (size_t)sh.w) + r - sh.r / 2, v = (int)(p % (size_t)sh.w) + s - sh.s / 2;
        col[i] = y >= 0 && y < sh.h && v >= 0 && v < sh.w
                     ? x[((b * (size_t)sh.c + (size_t)ch) * sh.h + (size_t)y) * sh.w + (size_t)v]
                     : 0.0f;
    }
}

/* dx (nb, C, H, W) from col (nb, C*R*S, H*W), a gather: dx[b, c, h, w] =
 * ((+0 + t_first) + ...) + t_last over the in-image taps in row-major (r, s)
 * order, tap (r, s) being col[b, (c, r, s), (h - r + R/2) W + (w - s + S/2)]:
 * cpu_conv.h's col2im order exactly; no atomics. */
static __global__ void gpu_ops_k_col2im(float *dx, const float *col, struct gpu_ops_conv sh,
                                        size_t total)
{
    size_t hw = (size_t)sh.h * sh.w, crs = (size_t)sh.c * sh.r * sh.s;
    GPU_OPS_FOR(i, total) {
        size_t p = i % hw, ch = i / hw % (size_t)sh.c, b = i / hw / (size_t)sh.c;
        int y = (int)(p / (size_t)sh.w), v = (int)(p % (size_t)sh.w);
        const float *cb = col + (b * crs + ch * (size_t)sh.r * sh.s) * hw;
        float acc = 0.0f;
        for (int r = 0; r < sh.r; r++) {
            int sy = y - r + sh.r / 2;
            if (sy < 0 || sy >= sh.h)
                continue;
            for (int s = 0; s < sh.s; s++) {
                int sx = v - s + sh.s / 2;
                if (sx < 0 || sx >= sh.w)
                    continue;
                acc = __fadd_rn(acc, cb[((size_t)r * sh.s + (size_t)s) * hw +
                                        (size_t)sy * sh.w + (size_t)sx]);
            }
        }
        dx[i] = acc;
    }
}

/* Batch items per im2col chunk: a function of the shape only. */
static size_t gpu_ops_conv_chunk(const struct gpu_ops_conv *sh)
{
    size_t per = (size_t)sh->c * sh->r * sh->s * sh->h * sh->w;
    size_t nb = GPU_OPS_COL_FLOATS / (per ? per : 1);
    return nb < 1 ? 1 : nb > (size_t)sh->n ? (size_t)sh->n : nb;
}

static void gpu_ops_im2col(struct gpu_ctx *c, float *col, const float *x,
                           const struct gpu_ops_conv *sh, size_t nb)
{
    size_t total = nb * sh->c * sh->r * sh->s * sh->h * sh->w;
    GPU_OPS_LAUNCH(c, total, gpu_ops_k_im2col, col, x, *sh, total);
}

static GPU_OP(gpu_ops_conv2d)
{
    /* in: x (N,C,H,W), w (K,C,R,S); out (N,K,H,W): per item n,
     * out[n] (K, HW) = w (K, CRS) col[n] (CRS, HW), one sgemm (a 1x1
     * kernel's col is x[n] itself) */
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    struct gpu_ops_conv sh = {(int)GPU_OPS_SHAPE(0, 0), (int)GPU_OPS_SHAPE(0, 1),
                              (int)GPU_OPS_SHAPE(0, 2), (int)GPU_OPS_SHAPE(0, 3),
                              (int)GPU_OPS_SHAPE(1, 0), (int)GPU_OPS_SHAPE(1, 2),
                              (int)GPU_OPS_SHAPE(1, 3)};
    const float *x = GPU_OPS_IN(0), *wt = GPU_OPS_IN(1);
    float *y = GPU_OPS_OUT;
    size_t hw = (size_t)sh.h * sh.w, crs = (size_t)sh.c * sh.r * sh.s;
    int direct = sh.r == 1 && sh.s == 1;
    size_t nb = direct ? (size_t)sh.n : gpu_ops_conv_chunk(&sh);
    float *col = direct ? NULL : (float *)gpu_scratch(c, nb * crs * hw * sizeof(float));
    for (size_t n0 = 0; n0 < (size_t)sh.n; n0 += nb) {
        size_t m = (size_t)sh.n - n0 < nb ? (size_t)sh.n - n0 : nb;
        if (!direct)
            gpu_ops_im2col(c, col, x + n0 * sh.c * hw, &sh, m);
        for (size_t b = 0; b < m; b++) {
            const float *cb = direct ? x + (n0 + b) * sh.c * hw : col + b * crs * hw;
            /* column-major: out[n]^T (HW, K) = col^T (HW, CRS) w^T (CRS, K) */
            GPU_BLAS(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)hw, sh.k, (int)crs,
                                 &gpu_ops_one, cb, (int)hw, wt, (int)crs, &gpu_ops_zero,
                                 y + (n0 + b) * sh.k * hw, (int)hw));
        }
    }
}

static GPU_OP(gpu_ops_conv2d_bwd_data)
{
    /* in: m pairs dy_j (N,K,H,W), w_j (K,C,R,S), j = 0 .. m-1; out dx
     * (N,C,H,W): per item n, col (CRS, HW) = the sum over j of w_j^T (CRS, K)
     * dy_j[n] (K, HW), then col2im. Pair 0's sgemm has beta 0 and each later
     * pair's beta 1, which adds its products onto the float32 sum of the
     * pairs before it, in j order (as the cpu backend sums them). So each dx
     * element is ((+0 + t_first) + ...) + t_last over its in-image taps in
     * (r, s) order (col2im), tap t being ((P_0 + P_1) + ...) + P_{m-1}, P_j
     * pair j's sum over k: the taps outermost, then j, then k, whose order
     * (and that of the beta-1 addition) is cuBLAS's, fixed by the shape
     * (pedantic math, no atomics, a fixed workspace). No atomics anywhere:
     * two runs agree bit for bit; m = 1 makes the calls the one-pair op
     * always made, so its bits do not change. */
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    int pairs = nd->ninputs / 2;
    DT_ASSERT(nd->ninputs % 2 == 0 && pairs >= 1, "conv2d_bwd_data %s: %d inputs", nd->name, nd->ninputs);
    struct gpu_ops_conv sh = {(int)GPU_OPS_SHAPE(0, 0), (int)GPU_OPS_SHAPE(1, 1),
                              (int)GPU_OPS_SHAPE(0, 2), (int)GPU_OPS_SHAPE(0, 3),
                              (int)GPU_OPS_SHAPE(0, 1), (int)GPU_OPS_SHAPE(1, 2),
                              (int)GPU_OPS_SHAPE(1, 3)};
    float *dx = GPU_OPS_OUT;
    size_t hw = (size_t)sh.h * sh.w, crs = (size_t)sh.c * sh.r * sh.s;
    size_t nb = gpu_ops_conv_chunk(&sh);
    float *col = (float *)gpu_scratch(c, nb * crs * hw * sizeof(float));
    for (size_t n0 = 0; n0 < (size_t)sh.n; n0 += nb) {
        size_t m = (size_t)sh.n - n0 < nb ? (size_t)sh.n - n0 : nb;
        for (size_t b = 0; b < m; b++)
            for (int j = 0; j < pairs; j++)
                /* column-major: col^T (HW, CRS) (+)= dy_j[n]^T (HW, K) w_j (K, CRS) */
                GPU_BLAS(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)hw, (int)crs, sh.k,
                                     &gpu_ops_one, GPU_OPS_IN(2 * j) + (n0 + b) * sh.k * hw, (int)hw,
                                     GPU_OPS_IN(2 * j + 1), (int)crs, j ? &gpu_ops_one : &gpu_ops_zero,
                                     col + b * crs * hw, (int)hw));
        size_t total = m * sh.c * hw;
        GPU_OPS_LAUNCH(c, total, gpu_ops_k_col2im, dx + n0 * sh.c * hw, col, sh, total);
    }
}

static GPU_OP(gpu_ops_conv2d_bwd_filter)
{
    /* in: x (N,C,H,W), dy (N,K,H,W); out dw (K,C,R,S) = sum over n in order of
     * dy[n] (K, HW) col[n]^T (HW, CRS): one sgemm per item, beta 0 for the
     * first and 1 after, as the cpu (each item's HW products summed inside
     * cuBLAS, then added onto the float32 sum of the items before it) */
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    struct gpu_ops_conv sh = {(int)GPU_OPS_SHAPE(0, 0), (int)GPU_OPS_SHAPE(0, 1),
                              (int)GPU_OPS_SHAPE(0, 2), (int)GPU_OPS_SHAPE(0, 3),
                              (int)GPU_OPS_SHAPE(1, 1), (int)nd->p.conv.r, (int)nd->p.conv.s};
    const float *x = GPU_OPS_IN(0), *dy = GPU_OPS_IN(1);
    float *dw = GPU_OPS_OUT;
    size_t hw = (size_t)sh.h * sh.w, crs = (size_t)sh.c * sh.r * sh.s;
    int direct = sh.r == 1 && sh.s == 1;
    size_t nb = direct ? (size_t)sh.n : gpu_ops_conv_chunk(&sh);
    float *col = direct ? NULL : (float *)gpu_scratch(c, nb * crs * hw * sizeof(float));
    for (size_t n0 = 0; n0 < (size_t)sh.n; n0 += nb) {
        size_t m = (size_t)sh.n - n0 < nb ? (size_t)sh.n - n0 : nb;
        if (!direct)
            gpu_ops_im2col(c, col, x + n0 * sh.c * hw, &sh, m);
        for (size_t b = 0; b < m; b++) {
            size_t n = n0 + b;
            const float *cb = direct ? x + n * sh.c * hw : col + b * crs * hw;
            /* column-major: dw^T (CRS, K) = col (CRS, HW) dy[n]^T (HW, K) */
            GPU_BLAS(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)crs, sh.k, (int)hw,
                                 &gpu_ops_one, cb, (int)hw, dy + n * sh.k * hw, (int)hw,
                                 n == 0 ? &gpu_ops_zero : &gpu_ops_one, dw, (int)crs));
        }
    }
}

/* ---- the table ----------------------------------------------------------------
 * In enum op_type order (checked below), leaves without kernels. A constant
 * initializer: gpu_ops is filled before any dynamic initialization, such as
 * backend_gpu.cu's tables that copy it. */
#define GPU_OPS_TABLE(X)                                                                    \
    X(OP_INPUT, nullptr)                                                                    \
    X(OP_PARAM, nullptr)                                                                    \
    X(OP_STATE, nullptr)                                                                    \
    X(OP_MATMUL, gpu_ops_matmul)                                                            \
    X(OP_ADD_BIAS, gpu_ops_add_bias)                                                        \
    X(OP_BIAS_GRAD, gpu_ops_bias_grad)                                                      \
    X(OP_SIGMOID, gpu_ops_sigmoid)                                                          \
    X(OP_SIGMOID_BWD, gpu_ops_sigmoid_bwd)                                                  \
    X(OP_TANH, gpu_ops_tanh)                                                                \
    X(OP_TANH_BWD, gpu_ops_tanh_bwd)                                                        \
    X(OP_RELU, gpu_ops_relu)                                                                \
    X(OP_RELU_BWD, gpu_ops_relu_bwd)                                                        \
    X(OP_ADD, gpu_ops_add)                                                                  \
    X(OP_MSE, gpu_ops_mse)                                                                  \
    X(OP_MSE_BWD, gpu_ops_mse_bwd)                                                          \
    X(OP_SGD, gpu_ops_sgd)                                                                  \
    X(OP_MOMENTUM, gpu_ops_momentum)                                                        \
    X(OP_ADAM_M, gpu_ops_adam_m)                                                            \
    X(OP_ADAM_V, gpu_ops_adam_v)                                                            \
    X(OP_ADAM_P, gpu_ops_adam_p)                                                            \
    X(OP_FILL, gpu_ops_fill)                                                                \
    X(OP_CONV2D, gpu_ops_conv2d)                                                            \
    X(OP_CONV2D_BWD_DATA, gpu_ops_conv2d_bwd_data)                                          \
    X(OP_CONV2D_BWD_FILTER, gpu_ops_conv2d_bwd_filter)                                      \
    X(OP_MAXPOOL2, gpu_ops_maxpool2)                                                        \
    X(OP_MAXPOOL2_BWD, gpu_ops_maxpool2_bwd)                                                \
    X(OP_UPSAMPLE2, gpu_ops_upsample2)                                                      \
    X(OP_UPSAMPLE2_BWD, gpu_ops_upsample2_bwd)                                              \
    X(OP_CONCAT, gpu_ops_concat)                                                            \
    X(OP_SLICE, gpu_ops_slice)                                                              \
    X(OP_SLICE_BWD, gpu_ops_slice_bwd)                                                      \
    X(OP_HARD_SIGMOID, gpu_ops_hard_sigmoid)                                                \
    X(OP_HARD_SIGMOID_BWD, gpu_ops_hard_sigmoid_bwd)                                        \
    X(OP_SATLU, gpu_ops_satlu)                                                              \
    X(OP_SATLU_BWD, gpu_ops_satlu_bwd)                                                      \
    X(OP_SUB, gpu_ops_sub)                                                                  \
    X(OP_NEG, gpu_ops_neg)                                                                  \
    X(OP_MUL, gpu_ops_mul)                                                                  \
    X(OP_MEAN, gpu_ops_mean)                                                                \
    X(OP_MEAN_BWD, gpu_ops_mean_bwd)

#define GPU_OPS_TYPE(t, fn) t,
#define GPU_OPS_FN(t, fn) fn,

static constexpr enum op_type gpu_ops_order[] = {GPU_OPS_TABLE(GPU_OPS_TYPE)};

static constexpr bool gpu_ops_in_order()
{
    for (int i = 0; i < OP_COUNT; i++)
        if (gpu_ops_order[i] != i)
            return false;
    return true;
}

static_assert(sizeof gpu_ops_order / sizeof gpu_ops_order[0] == OP_COUNT,
              "gpu_ops: one entry per op type");
static_assert(gpu_ops_in_order(), "gpu_ops: entries out of enum op_type order");

const backend_op_fn gpu_ops[OP_COUNT] = {GPU_OPS_TABLE(GPU_OPS_FN)};
