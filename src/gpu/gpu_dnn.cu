/* gpu_dnn.cu: the cudnn backend's kernels: cuDNN's convolutions (the
 * algorithm of each chosen once per shape and direction by --cudnn-algo, in
 * gpu_dnn_choose.cu), max pooling, activations and per-channel bias of
 * (N,C,H,W) tensors, through cuDNN 9's legacy API. Everything else, and every op of another rank, runs
 * the cuda backend's kernels (gpu_ops.cu). The algorithms' names and the
 * trace header's description of the plan are in gpu_dnn_names.cu.
 * Dimension letters: N batch, C input channels, K output channels, H x W
 * image, R x S kernel (op.h). */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_dnn.h"

/* ---- policy: what runs where ------------------------------------------------ */

/* cuDNN's documentation does not list cudnnConvolutionBackwardBias among the
 * routines that are not reproducible, but its list is given "for example"
 * and its summation order is undocumented: it runs only when the user asked
 * for the fastest path and no atomics of ours were requested instead. */
int dnn_bias_grad_is_cudnn(const struct gpu_ctx *c)
{
    return c->algo_mode == GPU_ALGO_FASTEST && !c->atomic;
}

/* The forward bias (x + b per channel) is the cuda backend's kernel: one
 * launch where cuDNN's cudnnAddTensor, which adds in place, needs a copy of
 * x first (two launches, about 1.8 times the time of the one in PredNet's
 * step, measured with tests/bench/bench_gpu_profile); the sum is rounded
 * once either way, so the bits are the same. */

/* cudnnPoolingBackward with CUDNN_POOLING_MAX is documented as not
 * reproducible; its rule for windows with tied maxima (several equal
 * elements, -0 and +0, NaN) is undocumented and may differ from op.h's first
 * maximum. Only the fastest mode uses it. */
int dnn_pool_bwd_is_cudnn(const struct gpu_ctx *c) { return c->algo_mode == GPU_ALGO_FASTEST; }

/* ---- descriptors -------------------------------------------------------------- */

static cudnnTensorDescriptor_t dnn_tensor(struct gpu_dnn_plan *p, uint32_t n, uint32_t c,
                                          uint32_t h, uint32_t w)
{
    for (int i = 0; i < p->ntensor; i++) {
        const uint32_t *d = p->tensor[i].d;
        if (d[0] == n && d[1] == c && d[2] == h && d[3] == w)
            return p->tensor[i].desc;
    }
    DT_ASSERT(n <= INT_MAX && c <= INT_MAX && h <= INT_MAX && w <= INT_MAX,
              "cudnn: tensor %ux%ux%ux%u too large", n, c, h, w);
    if (p->ntensor == p->captensor) {
        p->captensor = p->captensor ? 2 * p->captensor : 16;
        p->tensor = (struct gpu_dnn_tensor *)dt_realloc(p->tensor, (size_t)p->captensor * sizeof *p->tensor);
    }
    struct gpu_dnn_tensor *t = &p->tensor[p->ntensor++];
    t->d[0] = n;
    t->d[1] = c;
    t->d[2] = h;
    t->d[3] = w;
    GPU_DNN(cudnnCreateTensorDescriptor(&t->desc));
    GPU_DNN(cudnnSetTensor4dDescriptor(t->desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n, (int)c,
                                       (int)h, (int)w));
    return t->desc;
}

/* The descriptor of a rank-4 node shape. */
static cudnnTensorDescriptor_t dnn_tensor_of(struct gpu_dnn_plan *p, const struct node *nd)
{
    DT_ASSERT(nd->ndim == 4, "cudnn: %s is not an (N,C,H,W) tensor", nd->name);
    return dnn_tensor(p, nd->shape[0], nd->shape[1], nd->shape[2], nd->shape[3]);
}

/* The convolution of shape (N,C,H,W) * (K,C,R,S), made on first use: stride 1,
 * padding R/2 and S/2 ("same" for odd kernels), dilation 1, cross-correlation,
 * float32 data and accumulation.
 * Math type CUDNN_FMA_MATH, which cuDNN restricts to kernels built from
 * float FMA instructions. CUDNN_DEFAULT_MATH permits TF32 tensor-core kernels
 * for float32 data on Ampere and later GPUs (the H200 included), which round
 * the inputs to 10-bit mantissas: not op.h's float32 products. A ranking
 * entry that reports a tensor-op math type is skipped (dnn_math_ok). */
int dnn_conv_find(struct gpu_dnn_plan *p, uint32_t n, uint32_t c, uint32_t h, uint32_t w,
                  uint32_t k, uint32_t r, uint32_t s)
{
    return dnn_conv_find_grouped(p, n, c, h, w, k, r, s, 1);
}

int dnn_conv_find_grouped(struct gpu_dnn_plan *p, uint32_t n, uint32_t c, uint32_t h, uint32_t w,
                          uint32_t k, uint32_t r, uint32_t s, uint32_t groups)
{
    for (int i = 0; i < p->nconv; i++) {
        const struct gpu_dnn_conv *cv = &p->conv[i];
        if (cv->n == n && cv->c == c && cv->h == h && cv->w == w && cv->k == k && cv->r == r &&
            cv->s == s && cv->groups == groups)
            return i;
    }
    DT_ASSERT(r % 2 == 1 && s % 2 == 1, "cudnn: conv kernel %ux%u is not odd", r, s);
    DT_ASSERT(k <= INT_MAX && r <= INT_MAX && s <= INT_MAX, "cudnn: filter too large");
    if (p->nconv == p->capconv) {
        p->capconv = p->capconv ? 2 * p->capconv : 8;
        p->conv = (struct gpu_dnn_conv *)dt_realloc(p->conv, (size_t)p->capconv * sizeof *p->conv);
    }
    struct gpu_dnn_conv *cv = &p->conv[p->nconv];
    memset(cv, 0, sizeof *cv);
    cv->n = n, cv->c = c, cv->h = h, cv->w = w, cv->k = k, cv->r = r, cv->s = s;
    cv->groups = groups;
    DT_ASSERT(groups >= 1 && c % groups == 0 && k % groups == 0, "cudnn: %u groups of %u and %u channels",
              groups, c, k);
    for (int d = 0; d < DNN_NDIR; d++)
        cv->algo[d] = -1;
    cv->x = dnn_tensor(p, n, c, h, w);
    cv->y = dnn_tensor(p, n, k, h, w);
    GPU_DNN(cudnnCreateFilterDescriptor(&cv->f));
    GPU_DNN(cudnnSetFilter4dDescriptor(cv->f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)k, (int)(c / groups),
                                       (int)r, (int)s));
    GPU_DNN(cudnnCreateConvolutionDescriptor(&cv->conv));
    GPU_DNN(cudnnSetConvolution2dDescriptor(cv->conv, (int)(r / 2), (int)(s / 2), 1, 1, 1, 1,
                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    GPU_DNN(cudnnSetConvolutionMathType(cv->conv, CUDNN_FMA_MATH));
    if (groups > 1)
        GPU_DNN(cudnnSetConvolutionGroupCount(cv->conv, (int)groups));
    int on, oc, oh, ow;
    GPU_DNN(cudnnGetConvolution2dForwardOutputDim(cv->conv, cv->x, cv->f, &on, &oc, &oh, &ow));
    DT_ASSERT(on == (int)n && oc == (int)k && oh == (int)h && ow == (int)w,
              "cudnn: conv %ux%ux%ux%u k%u %ux%u gives %dx%dx%dx%d, not a same-size output", n, c,
              h, w, k, r, s, on, oc, oh, ow);
    return p->nconv++;
}

/* ---- prepare, free, describe ----------------------------------------------------- */

void gpu_dnn_free(struct gpu_ctx *c)
{
    struct gpu_dnn_plan *p = c->plan;
    if (!p)
        return;
    for (int i = 0; i < p->nconv; i++) {
        for (int d = 0; d < DNN_NDIR; d++)
            dnn_engine_free(p->conv[i].eng[d]);
        if (p->conv[i].f)
            GPU_DNN(cudnnDestroyFilterDescriptor(p->conv[i].f));
        if (p->conv[i].conv)
            GPU_DNN(cudnnDestroyConvolutionDescriptor(p->conv[i].conv));
    }
    for (int i = 0; i < p->ntensor; i++)
        GPU_DNN(cudnnDestroyTensorDescriptor(p->tensor[i].desc));
    for (int i = 0; i < DNN_NACT; i++)
        if (p->act[i])
            GPU_DNN(cudnnDestroyActivationDescriptor(p->act[i]));
    if (p->pool_fwd)
        GPU_DNN(cudnnDestroyPoolingDescriptor(p->pool_fwd));
    if (p->pool_bwd)
        GPU_DNN(cudnnDestroyPoolingDescriptor(p->pool_bwd));
    free(p->conv);
    free(p->group);
    free(p->tensor);
    free(p->node);
    free(p);
    c->plan = NULL;
}

/* The node types that go to cuDNN for rank-4 tensors get their descriptors. */
static void dnn_plan_node(struct gpu_dnn_plan *p, const struct graph *g, int i)
{
    const struct node *nd = &g->nodes[i];
    struct gpu_dnn_node *pn = &p->node[i];
    const struct node *in0 = nd->ninputs > 0 ? &g->nodes[nd->inputs[0]] : NULL;
    const struct node *in1 = nd->ninputs > 1 ? &g->nodes[nd->inputs[1]] : NULL;
    switch (nd->type) {
    case OP_CONV2D: /* x (N,C,H,W), w (K,C,R,S) */
        DT_ASSERT(in0->ndim == 4 && in1->ndim == 4, "cudnn: conv2d %s: rank", nd->name);
        pn->conv = dnn_conv_find(p, in0->shape[0], in0->shape[1], in0->shape[2], in0->shape[3],
                                 in1->shape[0], in1->shape[2], in1->shape[3]);
        p->conv[pn->conv].used[DNN_FWD] = 1;
        break;
    case OP_CONV2D_BWD_DATA: { /* m pairs dy_j (N,K,H,W), w_j (K,C,R,S) -> (N,C,H,W) */
        uint32_t m = (uint32_t)nd->ninputs / 2;
        DT_ASSERT(nd->ninputs >= 2 && nd->ninputs % 2 == 0, "cudnn: conv2d_bwd_data %s: %d inputs", nd->name,
                  nd->ninputs);
        DT_ASSERT(in0->ndim == 4 && in1->ndim == 4 && (uint64_t)m * in1->shape[0] <= INT_MAX,
                  "cudnn: conv2d_bwd_data %s: rank or size", nd->name);
        /* m > 1: one convolution of the filters stacked along K (dnn_pairs_run),
         * its algorithm chosen for that shape like any other's */
        pn->conv = dnn_conv_find(p, nd->shape[0], nd->shape[1], nd->shape[2], nd->shape[3],
                                 m * in1->shape[0], in1->shape[2], in1->shape[3]);
        p->conv[pn->conv].used[DNN_BWD_DATA] = 1;
        if (m > 1)
            dnn_pairs_plan(p, &p->conv[pn->conv]);
        break;
    }
    case OP_CONV2D_BWD_FILTER: /* x (N,C,H,W), dy (N,K,H,W) -> (K,C,R,S) */
        DT_ASSERT(in0->ndim == 4 && in1->ndim == 4, "cudnn: conv2d_bwd_filter %s: rank", nd->name);
        pn->conv = dnn_conv_find(p, in0->shape[0], in0->shape[1], in0->shape[2], in0->shape[3],
                                 in1->shape[1], nd->p.conv.r, nd->p.conv.s);
        p->conv[pn->conv].used[DNN_BWD_FILTER] = 1;
        break;
    case OP_BIAS_GRAD: /* dy (N,C,H,W), out (1,C,1,1) */
        if (in0->ndim == 4) {
            pn->a = dnn_tensor_of(p, in0);
            pn->b = dnn_tensor(p, 1, in0->shape[1], 1, 1);
        }
        break;
    case OP_RELU:
    case OP_TANH:
    case OP_SIGMOID:
    case OP_TANH_BWD:
    case OP_SIGMOID_BWD:
        if (nd->ndim == 4)
            pn->a = dnn_tensor_of(p, nd);
        break;
    case OP_MAXPOOL2: /* x (N,C,H,W) -> (N,C,H/2,W/2) */
        pn->a = dnn_tensor_of(p, in0);
        pn->b = dnn_tensor_of(p, nd);
        break;
    case OP_MAXPOOL2_BWD: /* x (N,C,H,W), dy (N,C,H/2,W/2) -> (N,C,H,W) */
        pn->a = dnn_tensor_of(p, nd);
        pn->b = dnn_tensor_of(p, in1);
        break;
    default:
        break;
    }
}

int gpu_dnn_prepare(struct gpu_ctx *c, const struct graph *g)
{
    gpu_dnn_free(c); /* a context prepared again plans the new graph */
    struct gpu_dnn_plan *p = (struct gpu_dnn_plan *)dt_calloc(1, sizeof *p);
    c->plan = p;
    p->g = g;
    p->n = g->n;
    p->node = (struct gpu_dnn_node *)dt_calloc((size_t)(g->n ? g->n : 1), sizeof *p->node);
    for (int i = 0; i < g->n; i++) {
        p->node[i].conv = -1;
        p->node[i].group = -1;
        dnn_plan_node(p, g, i);
    }
    dnn_fuse_plan(c, p, g);

    static const cudnnActivationMode_t modes[DNN_NACT] = {
        CUDNN_ACTIVATION_RELU, CUDNN_ACTIVATION_TANH, CUDNN_ACTIVATION_SIGMOID};
    for (int i = 0; i < DNN_NACT; i++) {
        GPU_DNN(cudnnCreateActivationDescriptor(&p->act[i]));
        /* not propagated: relu(NaN) should then be max(NaN, 0) = +0, as op.h
         * and the oracle have it (cuDNN does not say which value it gives;
         * the option concerns relu only) */
        GPU_DNN(cudnnSetActivationDescriptor(p->act[i], modes[i], CUDNN_NOT_PROPAGATE_NAN, 0.0));
    }
    GPU_DNN(cudnnCreatePoolingDescriptor(&p->pool_fwd));
    GPU_DNN(cudnnSetPooling2dDescriptor(p->pool_fwd, CUDNN_POOLING_MAX_DETERMINISTIC,
                                        CUDNN_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
    GPU_DNN(cudnnCreatePoolingDescriptor(&p->pool_bwd));
    GPU_DNN(cudnnSetPooling2dDescriptor(p->pool_bwd, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 2, 2,
                                        0, 0, 2, 2));

    for (int i = 0; i < p->nconv; i++) {
        if (dnn_conv_plan(c, &p->conv[i]) < 0) {
            gpu_dnn_free(c);
            return DT_ERR;
        }
        for (int d = 0; d < DNN_NDIR; d++)
            if (p->conv[i].used[d] && p->conv[i].ws[d] > p->ws_max)
                p->ws_max = p->conv[i].ws[d];
    }
    dnn_fuse_prune(c, p);
    gpu_scratch(c, p->ws_max); /* now, not during the first step */
    return DT_OK;
}

/* ---- the op kernels ---------------------------------------------------------------- */

/* The plan entry of node nd, which prepare must have seen. */
static const struct gpu_dnn_node *dnn_node(const struct gpu_ctx *c, const struct graph *g,
                                           const struct node *nd)
{
    const struct gpu_dnn_plan *p = c->plan;
    DT_ASSERT(p && p->g == g, "cudnn: op %s of a graph that was not prepared", nd->name);
    ptrdiff_t i = nd - g->nodes;
    DT_ASSERT(i >= 0 && i < p->n, "cudnn: node %s is not in the prepared graph", nd->name);
    return &p->node[i];
}

/* The cuda backend's kernel of nd's type, for what cuDNN does not run. */
static GPU_OP(dnn_fallback)
{
    backend_op_fn fn = gpu_ops[nd->type];
    DT_ASSERT(fn, "cudnn: the cuda backend has no kernel for %s (%s)", nd->name, op_type_name(nd->type));
    fn(ctx, g, nd, out, in, st);
}

static void dnn_conv(struct gpu_ctx *c, const struct graph *g, const struct node *nd, enum dnn_dir d,
                     backend_buf *out, const backend_buf *const *in, const struct backend_step *st)
{
    const struct gpu_dnn_node *pn = dnn_node(c, g, nd);
    DT_ASSERT(pn->conv >= 0, "cudnn: %s has no convolution plan", nd->name);
    if (pn->group >= 0) {
        struct gpu_dnn_group *gr = &c->plan->group[pn->group];
        int k = 0;
        while (gr->mem[k] != (int)(nd - g->nodes))
            k++;
        if (dnn_fuse_member(c, gr, k, st))
            return;
    }
    const struct gpu_dnn_conv *cv = &c->plan->conv[pn->conv];
    DT_ASSERT(cv->used[d] && cv->algo[d] >= 0, "cudnn: %s: no %s algorithm", nd->name, dnn_dir_name[d]);
    if (d == DNN_BWD_DATA && nd->ninputs > 2) {
        dnn_pairs_run(c, cv, nd->ninputs / 2, out, in);
        return;
    }
    void *ws = gpu_scratch(c, cv->ws[d]);
    GPU_DNN(dnn_conv_call(c, cv, d, cv->algo[d], ws, cv->ws[d], in[0], in[1], out));
}

/* out (N,K,H,W) = conv(x (N,C,H,W), w (K,C,R,S)) */
static GPU_OP(dnn_conv2d) { dnn_conv((struct gpu_ctx *)ctx, g, nd, DNN_FWD, out, in, st); }
/* out (N,C,H,W) from m pairs dy_j (N,K,H,W), w_j (K,C,R,S) */
static GPU_OP(dnn_conv2d_bwd_data) { dnn_conv((struct gpu_ctx *)ctx, g, nd, DNN_BWD_DATA, out, in, st); }
/* out (K,C,R,S) from x (N,C,H,W), dy (N,K,H,W) */
static GPU_OP(dnn_conv2d_bwd_filter) { dnn_conv((struct gpu_ctx *)ctx, g, nd, DNN_BWD_FILTER, out, in, st); }

/* out (C) = sum of dy (N,C,H,W) over n, h, w: cuDNN's order in fastest mode
 * (dnn_bias_grad_is_cudnn), the cuda backend's otherwise. */
static GPU_OP(dnn_bias_grad)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    const struct node *dy = &g->nodes[nd->inputs[0]];
    if (dy->ndim != 4 || !dnn_bias_grad_is_cudnn(c)) {
        dnn_fallback(ctx, g, nd, out, in, st);
        return;
    }
    const struct gpu_dnn_node *pn = dnn_node(c, g, nd);
    GPU_DNN(cudnnConvolutionBackwardBias(c->dnn_handle, &dnn_one, pn->a, in[0], &dnn_zero, pn->b, out));
}

/* out (N,C,H/2,W/2) = max of each 2x2 window of x (N,C,H,W). cuDNN's choice
 * among equal elements (-0 and +0) and the NaN it returns (propagated, but
 * perhaps not bit for bit the window's first NaN) are undocumented: op.h's
 * rule may differ there, and the trace shows it. */
static GPU_OP(dnn_maxpool2)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    const struct gpu_dnn_node *pn = dnn_node(c, g, nd);
    GPU_DNN(cudnnPoolingForward(c->dnn_handle, c->plan->pool_fwd, &dnn_one, pn->a, in[0], &dnn_zero,
                                pn->b, out));
}

/* out (N,C,H,W) from x (N,C,H,W), dy (N,C,H/2,W/2). cuDNN's backward wants
 * the forward output y as well, which the op does not get: it is computed
 * again into the scratch with the same descriptor. */
static GPU_OP(dnn_maxpool2_bwd)
{
    struct gpu_ctx *c = (struct gpu_ctx *)ctx;
    if (!dnn_pool_bwd_is_cudnn(c)) {
        dnn_fallback(ctx, g, nd, out, in, st);
        return;
    }
    const struct gpu_dnn_node *pn = dnn_node(c, g, nd);
    const struct node *dy = &g->nodes[nd->inputs[1]];
    void *y = gpu_scratch(c, dy->count * sizeof(float));
    GPU_DNN(cudnnPoolingForward(c->dnn_handle, c->plan->pool_bwd, &dnn_one, pn->a, in[0], &dnn_zero,
                                pn->b, y));
    GPU_DNN(cudnnPoolingBackward(c->dnn_handle, c->plan->pool_bwd, &dnn_one, pn->b, y, pn->b, in[1],
                                 pn->a, in[0], &dnn_zero, pn->a, out));
}

static void dnn_act_fwd(struct gpu_ctx *c, const struct graph *g, const struct node *nd, int act,
                        backend_buf *out, const backend_buf *x)
{
    const struct gpu_dnn_node *pn = dnn_node(c, g, nd);
    GPU_DNN(cudnnActivationForward(c->dnn_handle, c->plan->act[act], &dnn_one, pn->a, x, &dnn_zero,
                                   pn->a, out));
}

/* Rank-4 activations through cuDNN; others through the cuda backend. */
static GPU_OP(dnn_relu)
{
    if (nd->ndim != 4)
        dnn_fallback(ctx, g, nd, out, in, st);
    else
        dnn_act_fwd((struct gpu_ctx *)ctx, g, nd, DNN_ACT_RELU, out, in[0]);
}

static GPU_OP(dnn_tanh)
{
    if (nd->ndim != 4)
        dnn_fallback(ctx, g, nd, out, in, st);
    else
        dnn_act_fwd((struct gpu_ctx *)ctx, g, nd, DNN_ACT_TANH, out, in[0]);
}

static GPU_OP(dnn_sigmoid)
{
    if (nd->ndim != 4)
        dnn_fallback(ctx, g, nd, out, in, st);
    else
        dnn_act_fwd((struct gpu_ctx *)ctx, g, nd, DNN_ACT_SIGMOID, out, in[0]);
}

/* tanh_bwd and sigmoid_bwd get y and dy (op.h); cudnnActivationBackward
 * takes y, dy and x. The derivatives of tanh and sigmoid are functions of y
 * (1 - y^2, y (1 - y)), which is what cuDNN evaluates, so y is passed for x
 * too; test_gpu_dnn checks the results against the oracle. relu_bwd is not
 * here: op.h defines it from x (x > 0 ? dy : +0), while cuDNN's is
 * undocumented about its test on y and about the sign of its zeros; it runs
 * the cuda backend's kernel. */
static void dnn_act_bwd(struct gpu_ctx *c, const struct graph *g, const struct node *nd, int act,
                        backend_buf *out, const backend_buf *const *in)
{
    const struct gpu_dnn_node *pn = dnn_node(c, g, nd);
    GPU_DNN(cudnnActivationBackward(c->dnn_handle, c->plan->act[act], &dnn_one, pn->a, in[0], pn->a,
                                    in[1], pn->a, in[0], &dnn_zero, pn->a, out));
}

static GPU_OP(dnn_tanh_bwd)
{
    if (nd->ndim != 4)
        dnn_fallback(ctx, g, nd, out, in, st);
    else
        dnn_act_bwd((struct gpu_ctx *)ctx, g, nd, DNN_ACT_TANH, out, in);
}

static GPU_OP(dnn_sigmoid_bwd)
{
    if (nd->ndim != 4)
        dnn_fallback(ctx, g, nd, out, in, st);
    else
        dnn_act_bwd((struct gpu_ctx *)ctx, g, nd, DNN_ACT_SIGMOID, out, in);
}

/* ---- the table ----------------------------------------------------------------------
 * C++ has no designated array initializers: each entry is the constant
 * dnn_entry(type), so the table is still initialized at compile time, before
 * backend_gpu.cu's tables copy it. */
static constexpr backend_op_fn dnn_entry(int t)
{
    switch (t) {
    case OP_CONV2D: return dnn_conv2d;
    case OP_CONV2D_BWD_DATA: return dnn_conv2d_bwd_data;
    case OP_CONV2D_BWD_FILTER: return dnn_conv2d_bwd_filter;
    case OP_BIAS_GRAD: return dnn_bias_grad;
    case OP_MAXPOOL2: return dnn_maxpool2;
    case OP_MAXPOOL2_BWD: return dnn_maxpool2_bwd;
    case OP_RELU: return dnn_relu;
    case OP_TANH: return dnn_tanh;
    case OP_SIGMOID: return dnn_sigmoid;
    case OP_TANH_BWD: return dnn_tanh_bwd;
    case OP_SIGMOID_BWD: return dnn_sigmoid_bwd;
    default: return nullptr;
    }
}

#define DNN_E4(i) dnn_entry(i), dnn_entry((i) + 1), dnn_entry((i) + 2), dnn_entry((i) + 3)
#define DNN_E16(i) DNN_E4(i), DNN_E4((i) + 4), DNN_E4((i) + 8), DNN_E4((i) + 12)
/* Entries past the 32 listed are zero (not replaced). */
static_assert(OP_COUNT >= 32 && OP_CONV2D < 32 && OP_CONV2D_BWD_DATA < 32 &&
                  OP_CONV2D_BWD_FILTER < 32 && OP_BIAS_GRAD < 32 &&
                  OP_MAXPOOL2 < 32 && OP_MAXPOOL2_BWD < 32 && OP_RELU < 32 && OP_TANH < 32 &&
                  OP_SIGMOID < 32 && OP_TANH_BWD < 32 && OP_SIGMOID_BWD < 32,
              "gpu_dnn_ops lists the first 32 op types: extend it");
const backend_op_fn gpu_dnn_ops[OP_COUNT] = {DNN_E16(0), DNN_E16(16)};
