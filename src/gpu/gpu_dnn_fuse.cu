/* gpu_dnn_fuse.cu: the cudnn backend's grouped convolutions. Convolutions
 * of one direction that read the same input x, with filters of one shape
 * (PredNet's four gate convolutions of a layer and time step, and their
 * four filter gradients; conv_sets.h finds them), run as one convolution
 * of their stacked output channels: the forward over the filters stacked
 * along K, the filter gradient over the output gradients stacked along
 * channels. One call of nmem * K channels keeps the GPU busier than nmem
 * calls of K, as frameworks do by keeping the gate filters as one tensor;
 * here each member's output is still its own node, hashed and checked as
 * before. Every output element is
 * the same sum of products as the member's own convolution would make,
 * summed in the order of the stacked convolution's algorithm (one algorithm,
 * chosen for the stacked shape by --cudnn-algo like any other). The data
 * gradients of such a set are one convolution too in the fastest mode, as
 * cuDNN's grouped convolution (group count nmem: each member's gradient is
 * its own sum, never added to another's), and there every set is kept only
 * where cuDNN's timing of the one call beats its members' calls. The
 * deterministic mode times nothing (its choices are the same every run);
 * it groups the forward and filter-gradient sets, not the data gradients,
 * whose grouped form cuDNN's heuristics made slower on the H200. Only
 * data gradients of one pair (dy, w) are grouped so: graph_backward makes
 * the data gradient of a set of gate convolutions one op of m pairs, the
 * sum over all of them (op.h), which is one convolution of the stacked
 * shape in every mode (dnn_pairs_run, at the end of this file): the
 * filters stacked along K and the output gradients along channels, as
 * frameworks' fused gate convolutions compute it, straight into the op's
 * output. */
#include <stdlib.h>
#include <string.h>

#include "gpu_dnn.h"
extern "C" {
#include "conv_sets.h"
}

/* How far after the first data gradient of a set the others may lie. */
#define FUSE_WINDOW 64

/* The parts of the stacking buffer start at multiples of 256 bytes, as
 * cudaMalloc's buffers do: cuDNN's engines refuse tensors less aligned
 * (CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER), and m filters of an odd
 * count of floats would leave the next part so. */
static size_t fuse_up(size_t floats)
{
    const size_t a = 256 / sizeof(float);
    return (floats + a - 1) / a * a;
}

/* Make a group of the leader `lead` and the members mem[1..nmem-1]; 0, or
 * -1 when a replay's recorded algorithms have no entry for the stacked shape. */
static int fuse_add(struct gpu_ctx *c, struct gpu_dnn_plan *p, const struct graph *g, struct gpu_dnn_group *gr)
{
    const struct gpu_dnn_conv cv = p->conv[p->node[gr->mem[0]].conv]; /* a copy: find may move the list */
    uint32_t m = (uint32_t)gr->nmem;
    int ci = gr->d == DNN_BWD_DATA ? dnn_conv_find_grouped(p, cv.n, cv.c * m, cv.h, cv.w, cv.k * m, cv.r, cv.s, m)
                                   : dnn_conv_find(p, cv.n, cv.c, cv.h, cv.w, cv.k * m, cv.r, cv.s);
    if (c->algos) {
        char shape[96];
        const char *name;
        size_t len;
        int det;
        dnn_shape_str(shape, sizeof shape, &p->conv[ci]);
        if (!dnn_algos_entry(c->algos, gr->d, shape, &name, &len, &det))
            return -1;
    }
    p->conv[ci].used[gr->d] = 1;
    gr->conv = ci;
    gr->from = -1;
    struct conv_set set;
    set.type = g->nodes[gr->mem[0]].type;
    set.nmem = gr->nmem;
    memcpy(set.mem, gr->mem, (size_t)gr->nmem * sizeof set.mem[0]);
    conv_set_dists(g, &set, gr->dist);
    size_t filt = (size_t)cv.k * cv.c * cv.r * cv.s, chans = (size_t)cv.n * cv.k * cv.h * cv.w;
    size_t dx = gr->d == DNN_BWD_DATA ? (size_t)cv.n * cv.c * cv.h * cv.w : 0;
    size_t bytes = (fuse_up(m * filt) + fuse_up(m * chans) + m * dx) * sizeof(float);
    if (bytes > p->fuse_max)
        p->fuse_max = bytes;
    p->group = (struct gpu_dnn_group *)dt_realloc(p->group, (size_t)(p->ngroup + 1) * sizeof *p->group);
    p->group[p->ngroup] = *gr;
    for (int k = 0; k < gr->nmem; k++)
        p->node[gr->mem[k]].group = p->ngroup;
    p->ngroup++;
    return 0;
}

/* conv_sets_find's accept: a set of forward convolutions or filter
 * gradients made a group, unless fuse_add refuses it. */
struct fuse_plan_arg {
    struct gpu_ctx *c;
    struct gpu_dnn_plan *p;
    const struct graph *g;
};

static int fuse_accept(void *arg, const struct conv_set *s)
{
    const struct fuse_plan_arg *a = (const struct fuse_plan_arg *)arg;
    struct gpu_dnn_group gr;
    memset(&gr, 0, sizeof gr);
    gr.d = s->type == OP_CONV2D ? DNN_FWD : DNN_BWD_FILTER;
    gr.nmem = s->nmem;
    memcpy(gr.mem, s->mem, (size_t)s->nmem * sizeof gr.mem[0]);
    return fuse_add(a->c, a->p, a->g, &gr) == 0;
}

void dnn_fuse_plan(struct gpu_ctx *c, struct gpu_dnn_plan *p, const struct graph *g)
{
    const char *env = getenv("DIVTRACE_CUDNN_FUSE");
    if (env && strcmp(env, "0") == 0)
        return;
    /* data gradients (fastest mode, or a replay that recorded them grouped):
     * same shapes, inputs made before the first, within a short window */
    int all = env && strcmp(env, "all") == 0;
    if (c->algo_mode == GPU_ALGO_FASTEST || c->algos || all)
        for (int i = 0; i < g->n; i++) {
            if (g->nodes[i].type != OP_CONV2D_BWD_DATA || g->nodes[i].ninputs != 2 || p->node[i].conv < 0 ||
                p->node[i].group >= 0)
                continue;
            struct gpu_dnn_group gr;
            memset(&gr, 0, sizeof gr);
            gr.d = DNN_BWD_DATA;
            gr.mem[gr.nmem++] = i;
            for (int j = i + 1; j < g->n && j <= i + FUSE_WINDOW && gr.nmem < DNN_GROUP_MAX; j++)
                if (g->nodes[j].type == OP_CONV2D_BWD_DATA && g->nodes[j].ninputs == 2 &&
                    p->node[j].conv == p->node[i].conv &&
                    p->node[j].group < 0 && conv_same_shapes(g, i, j) && conv_inputs_before(g, j, i))
                    gr.mem[gr.nmem++] = j;
            if (gr.nmem >= 2)
                fuse_add(c, p, g, &gr);
        }
    /* forward convolutions and filter gradients that cuDNN runs */
    unsigned char *ok = (unsigned char *)dt_calloc((size_t)(g->n ? g->n : 1), 1);
    for (int i = 0; i < g->n; i++)
        ok[i] = p->node[i].conv >= 0;
    struct fuse_plan_arg arg = {c, p, g};
    struct conv_set *sets = NULL;
    conv_sets_find(g, ok, fuse_accept, &arg, &sets);
    free(sets);
    free(ok);
}

/* The direction of convolution node j, or -1. */
static int dnn_node_dir(const struct graph *g, int j)
{
    switch (g->nodes[j].type) {
    case OP_CONV2D: return DNN_FWD;
    case OP_CONV2D_BWD_DATA: return DNN_BWD_DATA;
    case OP_CONV2D_BWD_FILTER: return DNN_BWD_FILTER;
    default: return -1;
    }
}

void dnn_fuse_prune(struct gpu_ctx *c, struct gpu_dnn_plan *p)
{
    const char *env = getenv("DIVTRACE_CUDNN_FUSE");
    if (c->algo_mode != GPU_ALGO_FASTEST || c->algos || (env && strcmp(env, "all") == 0))
        return;
    int cut = 0;
    for (int i = 0; i < p->ngroup; i++) {
        struct gpu_dnn_group *gr = &p->group[i];
        float one = p->conv[p->node[gr->mem[0]].conv].time[gr->d];
        if (gr->nmem == 0 || p->conv[gr->conv].time[gr->d] < (float)gr->nmem * one)
            continue;
        for (int k = 0; k < gr->nmem; k++)
            p->node[gr->mem[k]].group = -1;
        gr->nmem = 0;
        cut = 1;
    }
    if (!cut)
        return;
    /* a stacked shape no kept set and no node of its own uses is not
     * listed in the header, so that a replay does not group it either */
    for (int i = 0; i < p->ngroup; i++) {
        const struct gpu_dnn_group *gr = &p->group[i];
        if (gr->nmem > 0)
            continue;
        int keep = 0;
        for (int j = 0; j < p->ngroup && !keep; j++)
            keep = p->group[j].nmem > 0 && p->group[j].conv == gr->conv && p->group[j].d == gr->d;
        for (int j = 0; j < p->n && !keep; j++)
            keep = p->node[j].conv == gr->conv && dnn_node_dir(p->g, j) == (int)gr->d;
        if (!keep)
            p->conv[gr->conv].used[gr->d] = 0;
    }
}

void *gpu_fuse_scratch(struct gpu_ctx *c, size_t bytes)
{
    struct gpu_lane *l = &c->lane[c->cur];
    if (bytes <= l->fuse_bytes)
        return l->fuse;
    GPU_CHECK(cudaStreamSynchronize(c->stream));
    if (l->fuse)
        GPU_CHECK(cudaFree(l->fuse));
    GPU_CHECK(cudaMalloc(&l->fuse, bytes));
    l->fuse_bytes = bytes;
    return l->fuse;
}

static_assert(DNN_GROUP_MAX == CONV_SET_MAX, "a group holds a conv_set");
static_assert(DNN_GROUP_MAX * OP_MAX_INPUTS <= GPU_MAX_READS, "gpu.h's GPU_MAX_READS is too small");

int gpu_dnn_reads(const struct gpu_ctx *c, const struct graph *g, int i, int *out)
{
    const int *mem = NULL;
    int nmem = gpu_dnn_group_of(c, i, &mem), n = 0;
    for (int m = 0; m < (nmem > 0 ? nmem : 1); m++) {
        const struct node *nd = &g->nodes[nmem > 0 ? mem[m] : i];
        for (int q = 0; q < nd->ninputs; q++)
            out[n++] = nd->inputs[q];
    }
    return n;
}

int gpu_dnn_group_of(const struct gpu_ctx *c, int i, const int **mem)
{
    const struct gpu_dnn_plan *p = c->plan;
    if (!c->dnn || !p || i < 0 || i >= p->n || p->node[i].group < 0)
        return 0;
    const struct gpu_dnn_group *gr = &p->group[p->node[i].group];
    *mem = gr->mem;
    return gr->nmem;
}

/* Members from..nmem-1 of gr computed by one convolution of the stacked
 * shape, on the current lane: the members' filters (forward) or output
 * gradients (filter gradient) copied into the lane's stacking buffer, the
 * call, and each member's part copied to its buffer. */
static void fuse_run(struct gpu_ctx *c, const struct graph *g, const struct gpu_dnn_group *gr, int from,
                     backend_buf *const *bufs)
{
    const struct gpu_dnn_plan *p = c->plan;
    const struct gpu_dnn_conv *cv = &p->conv[gr->conv];
    size_t m = (size_t)gr->nmem, k = cv->k / m;
    size_t filt = k * (cv->c / cv->groups) * cv->r * cv->s; /* one member's filter, floats */
    size_t chans = k * cv->h * cv->w;        /* one member's channels of one batch item */
    float *stk = (float *)gpu_fuse_scratch(c, p->fuse_max);
    float *f = stk, *y = stk + fuse_up(m * filt);
    void *ws = gpu_scratch(c, cv->ws[gr->d]);
    const void *x = bufs[g->nodes[gr->mem[0]].inputs[0]];
    const size_t fb = filt * sizeof(float), cb = chans * sizeof(float);
    if (gr->d == DNN_FWD) {
        for (size_t j = 0; j < m; j++)
            GPU_CHECK(cudaMemcpyAsync(f + j * filt, bufs[g->nodes[gr->mem[j]].inputs[1]], fb,
                                      cudaMemcpyDeviceToDevice, c->stream));
        GPU_DNN(dnn_conv_call(c, cv, DNN_FWD, cv->algo[DNN_FWD], ws, cv->ws[DNN_FWD], x, f, y));
        for (size_t j = (size_t)from; j < m; j++)
            GPU_CHECK(cudaMemcpy2DAsync(bufs[gr->mem[j]], cb, y + j * chans, m * cb, cb, cv->n,
                                        cudaMemcpyDeviceToDevice, c->stream));
    } else if (gr->d == DNN_BWD_DATA) {
        /* groups: filter (m K, C, R, S), dy (N, m K, H, W) -> dx (N, m C, H, W) */
        size_t xchans = cv->c / m * cv->h * cv->w, xb = xchans * sizeof(float);
        float *dx = y + fuse_up((size_t)cv->n * m * chans);
        for (size_t j = 0; j < m; j++) {
            const struct node *nd = &g->nodes[gr->mem[j]];
            GPU_CHECK(cudaMemcpyAsync(f + j * filt, bufs[nd->inputs[1]], fb, cudaMemcpyDeviceToDevice, c->stream));
            GPU_CHECK(cudaMemcpy2DAsync(y + j * chans, m * cb, bufs[nd->inputs[0]], cb, cb, cv->n,
                                        cudaMemcpyDeviceToDevice, c->stream));
        }
        GPU_DNN(dnn_conv_call(c, cv, DNN_BWD_DATA, cv->algo[DNN_BWD_DATA], ws, cv->ws[DNN_BWD_DATA], y, f, dx));
        for (size_t j = (size_t)from; j < m; j++)
            GPU_CHECK(cudaMemcpy2DAsync(bufs[gr->mem[j]], xb, dx + j * xchans, m * xb, xb, cv->n,
                                        cudaMemcpyDeviceToDevice, c->stream));
    } else {
        for (size_t j = 0; j < m; j++)
            GPU_CHECK(cudaMemcpy2DAsync(y + j * chans, m * cb, bufs[g->nodes[gr->mem[j]].inputs[1]], cb, cb,
                                        cv->n, cudaMemcpyDeviceToDevice, c->stream));
        GPU_DNN(dnn_conv_call(c, cv, DNN_BWD_FILTER, cv->algo[DNN_BWD_FILTER], ws, cv->ws[DNN_BWD_FILTER], x, y,
                              f));
        for (size_t j = (size_t)from; j < m; j++)
            GPU_CHECK(cudaMemcpyAsync(bufs[gr->mem[j]], f + j * filt, fb, cudaMemcpyDeviceToDevice, c->stream));
    }
}

/* A member's kernel. In an executor's pass every op is entered in graph
 * order (c->enters counts them), so member k's output was made in this
 * pass by member `from` exactly when k comes after it and the count moved
 * by the ops between them. Otherwise (the first member; or, with a fault
 * that replaces an earlier member's kernel, the first one called) it
 * computes itself and the members after it: an earlier member's output is
 * never written here, so a planted fault in it stays. */
int dnn_fuse_member(struct gpu_ctx *c, struct gpu_dnn_group *gr, int k, const struct backend_step *st)
{
    if (c->entered != gr->mem[k])
        return 0; /* not inside an executor's pass: run alone */
    if (gr->from >= 0 && gr->from < k && c->enters == gr->stamp + (gr->dist[k] - gr->dist[gr->from]))
        return 1;
    if (!st || !st->bufs)
        return 0;
    fuse_run(c, c->plan->g, gr, k, st->bufs);
    gr->from = k;
    gr->stamp = c->enters;
    return 1;
}

void dnn_pairs_plan(struct gpu_dnn_plan *p, const struct gpu_dnn_conv *cv)
{
    size_t filt = (size_t)cv->k * cv->c * cv->r * cv->s, dy = (size_t)cv->n * cv->k * cv->h * cv->w;
    size_t bytes = (fuse_up(filt) + dy) * sizeof(float);
    if (bytes > p->fuse_max)
        p->fuse_max = bytes;
}

/* in: dy_0, w_0, dy_1, w_1, ...; the stacking buffer holds the filters
 * (m K, C, R, S), w_j at rows j K .. (j + 1) K - 1, then dy (N, m K, H, W),
 * dy_j[n] at channels j K .. (j + 1) K - 1 of item n: a strided copy per
 * pair. Backward data of that convolution sums over its m K channels, all
 * the pairs' terms, in the order of the one algorithm chosen for the
 * stacked shape (a fixed order where that algorithm is deterministic). */
void dnn_pairs_run(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, int m, backend_buf *out,
                   const backend_buf *const *in)
{
    DT_ASSERT(m > 1 && cv->groups == 1 && cv->k % (uint32_t)m == 0, "cudnn: %d pairs of %u channels", m, cv->k);
    size_t k = cv->k / (size_t)m;
    size_t filt = k * cv->c * cv->r * cv->s; /* one pair's filter, floats */
    size_t chans = k * cv->h * cv->w;        /* one pair's dy of one batch item */
    const size_t fb = filt * sizeof(float), cb = chans * sizeof(float);
    float *f = (float *)gpu_fuse_scratch(c, c->plan->fuse_max), *dy = f + fuse_up((size_t)m * filt);
    for (int j = 0; j < m; j++) {
        GPU_CHECK(cudaMemcpyAsync(f + (size_t)j * filt, in[2 * j + 1], fb, cudaMemcpyDeviceToDevice, c->stream));
        GPU_CHECK(cudaMemcpy2DAsync(dy + (size_t)j * chans, (size_t)m * cb, in[2 * j], cb, cb, cv->n,
                                    cudaMemcpyDeviceToDevice, c->stream));
    }
    void *ws = gpu_scratch(c, cv->ws[DNN_BWD_DATA]);
    GPU_DNN(dnn_conv_call(c, cv, DNN_BWD_DATA, cv->algo[DNN_BWD_DATA], ws, cv->ws[DNN_BWD_DATA], dy, f, out));
}
