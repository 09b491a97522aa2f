/* graph.c: building the op graph, reverse-mode autodiff over it, and the
 * optimizer's update ops. Every rule here only appends ops, so backward and
 * update computations are traced like the forward pass. */
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void graph_init(struct graph *g)
{
    memset(g, 0, sizeof *g);
    g->loss = -1;
}

void graph_free(struct graph *g)
{
    for (int i = 0; i < g->n; i++)
        free(g->nodes[i].name);
    free(g->nodes);
    free(g->slots);
    graph_init(g);
}

/* FNV-1a: names are short, and any spread will do */
static unsigned graph_hash(const char *name)
{
    unsigned h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

/* The slot holding name, or the empty slot where it would go. */
static unsigned graph_slot(const struct graph *g, const char *name)
{
    unsigned mask = g->nslots - 1, k = graph_hash(name) & mask;
    while (g->slots[k] && strcmp(g->nodes[g->slots[k] - 1].name, name) != 0)
        k = (k + 1) & mask;
    return k;
}

/* Index node i by its name, growing the table to stay at most half full. */
static void graph_index(struct graph *g, int i)
{
    if (2 * (unsigned)(i + 1) > g->nslots) {
        free(g->slots);
        g->nslots = g->nslots ? 2 * g->nslots : 256;
        g->slots = dt_calloc(g->nslots, sizeof *g->slots);
        for (int j = 0; j < i; j++)
            g->slots[graph_slot(g, g->nodes[j].name)] = j + 1;
    }
    g->slots[graph_slot(g, g->nodes[i].name)] = i + 1;
}

int graph_find(const struct graph *g, const char *name)
{
    if (!g->nslots)
        return -1;
    unsigned k = graph_slot(g, name);
    return g->slots[k] - 1;
}

void graph_rename(struct graph *g, int i, const char *name)
{
    DT_ASSERT(graph_find(g, name) < 0, "duplicate op name '%s'", name);
    /* Remove node i's entry, then re-place the entries of its probe run
     * that follow it (backward-shift deletion), and index the new name. */
    unsigned mask = g->nslots - 1, k = graph_slot(g, g->nodes[i].name);
    g->slots[k] = 0;
    for (unsigned j = (k + 1) & mask; g->slots[j]; j = (j + 1) & mask) {
        int e = g->slots[j];
        g->slots[j] = 0;
        g->slots[graph_slot(g, g->nodes[e - 1].name)] = e;
    }
    free(g->nodes[i].name);
    g->nodes[i].name = dt_strdup(name);
    g->slots[graph_slot(g, name)] = i + 1;
}

static int graph_push(struct graph *g, enum op_type type, enum trace_kind kind,
                      const char *name, int ndim, const uint32_t *shape,
                      int ninputs, const int *inputs)
{
    DT_ASSERT(graph_find(g, name) < 0, "duplicate op name '%s'", name);
    DT_ASSERT(ndim >= 1 && ndim <= TRACE_MAX_DIM, "bad rank %d for '%s'", ndim, name);
    /* Callers pass another node's shape; growing the array may move it. */
    uint32_t dims[TRACE_MAX_DIM];
    memcpy(dims, shape, (size_t)ndim * sizeof *dims);
    shape = dims;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->nodes = dt_realloc(g->nodes, (size_t)g->cap * sizeof *g->nodes);
    }
    struct node *nd = &g->nodes[g->n];
    memset(nd, 0, sizeof *nd);
    nd->type = type;
    nd->kind = kind;
    nd->name = dt_strdup(name);
    nd->ndim = ndim;
    nd->count = 1;
    for (int d = 0; d < ndim; d++) {
        nd->shape[d] = shape[d];
        nd->count *= shape[d];
    }
    nd->ninputs = ninputs;
    for (int k = 0; k < ninputs; k++) {
        DT_ASSERT(inputs[k] >= 0 && inputs[k] < g->n, "bad input of '%s'", name);
        nd->inputs[k] = inputs[k];
        if (g->nodes[inputs[k]].needs_grad)
            nd->needs_grad = 1;
    }
    nd->next = -1;
    nd->grad = -1;
    graph_index(g, g->n);
    return g->n++;
}

/* The kind of a new op: backward once any input is a backward value. */
static enum trace_kind graph_kind_of(const struct graph *g, int ninputs, const int *inputs)
{
    for (int k = 0; k < ninputs; k++) {
        enum trace_kind ik = g->nodes[inputs[k]].kind;
        if (ik == TRACE_KIND_BACKWARD || ik == TRACE_KIND_GRAD)
            return TRACE_KIND_BACKWARD;
    }
    return TRACE_KIND_FORWARD;
}

static int graph_op(struct graph *g, enum op_type type, const char *name,
                    int ndim, const uint32_t *shape, int ninputs, const int *inputs)
{
    return graph_push(g, type, graph_kind_of(g, ninputs, inputs), name, ndim, shape,
                      ninputs, inputs);
}

static int graph_same_shape(const struct node *a, const struct node *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

int graph_input(struct graph *g, const char *name, int ndim, const uint32_t *shape)
{
    return graph_push(g, OP_INPUT, TRACE_KIND_INPUT, name, ndim, shape, 0, NULL);
}

int graph_param(struct graph *g, const char *name, int ndim, const uint32_t *shape)
{
    int i = graph_push(g, OP_PARAM, TRACE_KIND_PARAM, name, ndim, shape, 0, NULL);
    g->nodes[i].needs_grad = 1;
    return i;
}

int graph_matmul(struct graph *g, const char *name, int a, int b, int ta, int tb)
{
    const struct node *A = &g->nodes[a], *B = &g->nodes[b];
    DT_ASSERT(A->ndim == 2 && B->ndim == 2, "matmul '%s' needs matrices", name);
    uint32_t m = ta ? A->shape[1] : A->shape[0], ka = ta ? A->shape[0] : A->shape[1];
    uint32_t kb = tb ? B->shape[1] : B->shape[0], n = tb ? B->shape[0] : B->shape[1];
    DT_ASSERT(ka == kb, "matmul '%s': inner dimensions %u and %u differ", name, ka, kb);
    uint32_t shape[2] = {m, n};
    int in[2] = {a, b};
    int i = graph_op(g, OP_MATMUL, name, 2, shape, 2, in);
    g->nodes[i].p.mm.ta = ta;
    g->nodes[i].p.mm.tb = tb;
    return i;
}

int graph_add_bias(struct graph *g, const char *name, int x, int b)
{
    const struct node *X = &g->nodes[x], *B = &g->nodes[b];
    DT_ASSERT((X->ndim == 2 || X->ndim == 4) && B->ndim == 1 && B->shape[0] == X->shape[1],
              "add_bias '%s': shapes do not fit", name);
    int in[2] = {x, b};
    return graph_op(g, OP_ADD_BIAS, name, X->ndim, X->shape, 2, in);
}

static int graph_unary(struct graph *g, enum op_type t, const char *name, int x)
{
    return graph_op(g, t, name, g->nodes[x].ndim, g->nodes[x].shape, 1, &x);
}

int graph_sigmoid(struct graph *g, const char *name, int x) { return graph_unary(g, OP_SIGMOID, name, x); }
int graph_tanh(struct graph *g, const char *name, int x) { return graph_unary(g, OP_TANH, name, x); }
int graph_relu(struct graph *g, const char *name, int x) { return graph_unary(g, OP_RELU, name, x); }

int graph_add(struct graph *g, const char *name, int a, int b)
{
    DT_ASSERT(graph_same_shape(&g->nodes[a], &g->nodes[b]), "add '%s': shapes differ", name);
    int in[2] = {a, b};
    return graph_op(g, OP_ADD, name, g->nodes[a].ndim, g->nodes[a].shape, 2, in);
}

int graph_mse(struct graph *g, const char *name, int pred, int target)
{
    DT_ASSERT(graph_same_shape(&g->nodes[pred], &g->nodes[target]), "mse '%s': shapes differ", name);
    uint32_t one = 1;
    int in[2] = {pred, target};
    return graph_op(g, OP_MSE, name, 1, &one, 2, in);
}

/* ---- image ops ------------------------------------------------------------ */

static const struct node *graph_image(const struct graph *g, int x, const char *op, const char *name)
{
    const struct node *X = &g->nodes[x];
    DT_ASSERT(X->ndim == 4, "%s '%s': input '%s' is not an (N,C,H,W) tensor", op, name, X->name);
    return X;
}

int graph_fill(struct graph *g, const char *name, int ndim, const uint32_t *shape, float value)
{
    int i = graph_push(g, OP_FILL, TRACE_KIND_FORWARD, name, ndim, shape, 0, NULL);
    g->nodes[i].p.fill.value = value;
    return i;
}

int graph_conv2d(struct graph *g, const char *name, int x, int w)
{
    const struct node *X = graph_image(g, x, "conv2d", name), *Wt = graph_image(g, w, "conv2d", name);
    DT_ASSERT(Wt->shape[1] == X->shape[1], "conv2d '%s': filter has %u input channels, x %u",
              name, Wt->shape[1], X->shape[1]);
    DT_ASSERT(Wt->shape[2] % 2 == 1 && Wt->shape[3] % 2 == 1, "conv2d '%s': even kernel size", name);
    uint32_t shape[4] = {X->shape[0], Wt->shape[0], X->shape[2], X->shape[3]};
    int in[2] = {x, w};
    return graph_op(g, OP_CONV2D, name, 4, shape, 2, in);
}

int graph_maxpool2(struct graph *g, const char *name, int x)
{
    const struct node *X = graph_image(g, x, "maxpool2", name);
    DT_ASSERT(X->shape[2] % 2 == 0 && X->shape[3] % 2 == 0, "maxpool2 '%s': odd size %ux%u",
              name, X->shape[2], X->shape[3]);
    uint32_t shape[4] = {X->shape[0], X->shape[1], X->shape[2] / 2, X->shape[3] / 2};
    return graph_op(g, OP_MAXPOOL2, name, 4, shape, 1, &x);
}

int graph_upsample2(struct graph *g, const char *name, int x)
{
    const struct node *X = graph_image(g, x, "upsample2", name);
    uint32_t shape[4] = {X->shape[0], X->shape[1], X->shape[2] * 2, X->shape[3] * 2};
    return graph_op(g, OP_UPSAMPLE2, name, 4, shape, 1, &x);
}

int graph_concat(struct graph *g, const char *name, int n, const int *xs)
{
    DT_ASSERT(n >= 1 && n <= OP_MAX_INPUTS, "concat '%s': %d inputs", name, n);
    const struct node *X0 = graph_image(g, xs[0], "concat", name);
    uint32_t shape[4] = {X0->shape[0], 0, X0->shape[2], X0->shape[3]};
    for (int k = 0; k < n; k++) {
        const struct node *X = graph_image(g, xs[k], "concat", name);
        DT_ASSERT(X->shape[0] == shape[0] && X->shape[2] == shape[2] && X->shape[3] == shape[3],
                  "concat '%s': input '%s' has another batch or image size", name, X->name);
        shape[1] += X->shape[1];
    }
    return graph_op(g, OP_CONCAT, name, 4, shape, n, xs);
}

int graph_slice(struct graph *g, const char *name, int x, uint32_t c0, uint32_t n)
{
    const struct node *X = graph_image(g, x, "slice", name);
    DT_ASSERT(n >= 1 && c0 + n <= X->shape[1], "slice '%s': channels %u..%u of %u", name, c0,
              c0 + n, X->shape[1]);
    uint32_t shape[4] = {X->shape[0], n, X->shape[2], X->shape[3]};
    uint32_t total = X->shape[1];
    int i = graph_op(g, OP_SLICE, name, 4, shape, 1, &x);
    g->nodes[i].p.slice.c0 = c0;
    g->nodes[i].p.slice.n = n;
    g->nodes[i].p.slice.total = total;
    return i;
}

int graph_hard_sigmoid(struct graph *g, const char *name, int x) { return graph_unary(g, OP_HARD_SIGMOID, name, x); }
int graph_neg(struct graph *g, const char *name, int x) { return graph_unary(g, OP_NEG, name, x); }

int graph_satlu(struct graph *g, const char *name, int x, float max)
{
    int i = graph_unary(g, OP_SATLU, name, x);
    g->nodes[i].p.satlu.max = max;
    return i;
}

static int graph_binary(struct graph *g, enum op_type t, const char *name, int a, int b)
{
    DT_ASSERT(graph_same_shape(&g->nodes[a], &g->nodes[b]), "%s '%s': shapes differ",
              op_type_name(t), name);
    int in[2] = {a, b};
    return graph_op(g, t, name, g->nodes[a].ndim, g->nodes[a].shape, 2, in);
}

int graph_sub(struct graph *g, const char *name, int a, int b) { return graph_binary(g, OP_SUB, name, a, b); }
int graph_mul(struct graph *g, const char *name, int a, int b) { return graph_binary(g, OP_MUL, name, a, b); }

int graph_mean(struct graph *g, const char *name, int x, float scale)
{
    uint32_t one = 1;
    int i = graph_op(g, OP_MEAN, name, 1, &one, 1, &x);
    g->nodes[i].p.mean.scale = scale;
    return i;
}

/* ---- reverse mode ---------------------------------------------------------
 * Each rule receives the node and its output gradient dy (-1 for the seed
 * d loss/d loss = 1) and appends, for every input that needs a gradient, one
 * contribution. Contributions to one node are summed in the order they were
 * made, once the reverse sweep reaches that node. */

struct graph_contrib {
    int *v;
    int n, cap;
};

/* Data gradients of convolutions of one input waiting to be one op: the
 * pairs (dy, w) in the order the reverse sweep made them. */
struct graph_conv_wait {
    int dy[OP_MAX_INPUTS / 2], w[OP_MAX_INPUTS / 2], consumer[OP_MAX_INPUTS / 2];
    int n;
    int convs;                 /* convolutions that read the node (on a path to the loss) */
    int left;                  /* those yet to give their pair */
};

struct graph_ad {
    struct graph *g;
    struct graph_contrib *c;   /* per node */
    int *consumers;            /* how many contributions each node will get */
    struct graph_conv_wait *wait; /* per node */
};

/* Name of a gradient contribution to node i: "<i>.grad" when it is the only
 * one, otherwise "<i>.grad@<consumer>" ("...#2" for a consumer's second
 * use of i) and the sum is "<i>.grad". */
static void graph_grad_name(const struct graph_ad *ad, int i, int consumer, char *buf, size_t n)
{
    const struct graph *g = ad->g;
    if (ad->consumers[i] <= 1) {
        snprintf(buf, n, "%s.grad", g->nodes[i].name);
        return;
    }
    snprintf(buf, n, "%s.grad@%s", g->nodes[i].name, g->nodes[consumer].name);
    for (int k = 2; graph_find(g, buf) >= 0; k++)
        snprintf(buf, n, "%s.grad@%s#%d", g->nodes[i].name, g->nodes[consumer].name, k);
}

static void graph_contribute(struct graph_ad *ad, int i, int grad)
{
    struct graph_contrib *c = &ad->c[i];
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 4;
        c->v = dt_realloc(c->v, (size_t)c->cap * sizeof *c->v);
    }
    c->v[c->n++] = grad;
}

/* Append op t (inputs in[]) as the gradient contribution to node `to`. */
static void graph_vjp_op(struct graph_ad *ad, int to, int consumer, enum op_type t,
                         int ninputs, const int *in, const union op_params *p)
{
    struct graph *g = ad->g;
    if (!g->nodes[to].needs_grad)
        return;
    char name[512];
    graph_grad_name(ad, to, consumer, name, sizeof name);
    int i;
    if (t == OP_MATMUL) {
        i = graph_matmul(g, name, in[0], in[1], p->mm.ta, p->mm.tb);
    } else {
        i = graph_push(g, t, TRACE_KIND_BACKWARD, name, g->nodes[to].ndim, g->nodes[to].shape,
                       ninputs, in);
        g->nodes[i].p = *p;
    }
    g->nodes[i].kind = TRACE_KIND_BACKWARD;
    graph_contribute(ad, to, i);
}

/* The waiting data gradients of node `to` as one conv2d_bwd_data op of
 * their pairs in graph order (the reverse of the sweep's), a contribution
 * to `to` named like any other ("<to>.grad" when it is the only one). */
static void graph_conv_flush(struct graph_ad *ad, int to)
{
    struct graph_conv_wait *w = &ad->wait[to];
    if (w->n == 0)
        return;
    int in[OP_MAX_INPUTS], m = w->n;
    for (int j = 0; j < m; j++) {
        in[2 * j] = w->dy[m - 1 - j];
        in[2 * j + 1] = w->w[m - 1 - j];
    }
    union op_params p;
    memset(&p, 0, sizeof p);
    int whole = ad->consumers[to] == m, saved = ad->consumers[to];
    if (whole)
        ad->consumers[to] = 1; /* the name "<to>.grad" */
    graph_vjp_op(ad, to, w->consumer[m - 1], OP_CONV2D_BWD_DATA, 2 * m, in, &p);
    ad->consumers[to] = saved;
    w->n = 0;
}

/* Convolution i's data gradient (dy, w) to its input x. Where x feeds
 * several convolutions with dy and w of one shape (PredNet's four gates of
 * a layer and time step), their data gradients are one op that sums all
 * pairs, as one convolution of the filters stacked along K does, instead
 * of one op per convolution and the adds of their sum: it waits until the
 * last of x's convolutions (up to OP_MAX_INPUTS / 2 of them) has given its
 * pair. Otherwise the op is made at once, as every other rule's is. */
static void graph_conv_data(struct graph_ad *ad, int x, int i, int dy, int w)
{
    struct graph *g = ad->g;
    if (!g->nodes[x].needs_grad)
        return;
    struct graph_conv_wait *q = &ad->wait[x];
    if (q->convs < 2) {
        int in[2] = {dy, w};
        union op_params p;
        memset(&p, 0, sizeof p);
        graph_vjp_op(ad, x, i, OP_CONV2D_BWD_DATA, 2, in, &p);
        return;
    }
    if (q->n > 0 && !(graph_same_shape(&g->nodes[q->dy[0]], &g->nodes[dy]) &&
                      graph_same_shape(&g->nodes[q->w[0]], &g->nodes[w])))
        graph_conv_flush(ad, x);
    q->dy[q->n] = dy;
    q->w[q->n] = w;
    q->consumer[q->n] = i;
    q->n++;
    if (--q->left == 0 || q->n == OP_MAX_INPUTS / 2)
        graph_conv_flush(ad, x);
}

/* The vector-Jacobian rule of node i given its output gradient dy. */
static void graph_vjp(struct graph_ad *ad, int i, int dy)
{
    struct graph *g = ad->g;
    const struct node nd = g->nodes[i]; /* copy: pushes may move the array */
    const int *x = nd.inputs;
    union op_params p;
    memset(&p, 0, sizeof p);
    switch (nd.type) {
    case OP_INPUT:
    case OP_PARAM:
    case OP_STATE:
        return;
    case OP_MATMUL: {
        int ta = nd.p.mm.ta, tb = nd.p.mm.tb;
        /* C = op(A) op(B): dA = dC op(B)^T (or its transpose), dB likewise. */
        int in[2];
        if (!ta) { in[0] = dy; in[1] = x[1]; p.mm.ta = 0; p.mm.tb = !tb; }
        else     { in[0] = x[1]; in[1] = dy; p.mm.ta = tb; p.mm.tb = 1; }
        graph_vjp_op(ad, x[0], i, OP_MATMUL, 2, in, &p);
        if (!tb) { in[0] = x[0]; in[1] = dy; p.mm.ta = !ta; p.mm.tb = 0; }
        else     { in[0] = dy; in[1] = x[0]; p.mm.ta = 1; p.mm.tb = ta; }
        graph_vjp_op(ad, x[1], i, OP_MATMUL, 2, in, &p);
        return;
    }
    case OP_ADD_BIAS:
        if (g->nodes[x[0]].needs_grad)
            graph_contribute(ad, x[0], dy); /* identity: the same tensor, no op */
        graph_vjp_op(ad, x[1], i, OP_BIAS_GRAD, 1, &dy, &p);
        return;
    case OP_ADD:
        for (int k = 0; k < 2; k++)
            if (g->nodes[x[k]].needs_grad)
                graph_contribute(ad, x[k], dy);
        return;
    case OP_SIGMOID:
    case OP_TANH: {
        int in[2] = {i, dy};
        graph_vjp_op(ad, x[0], i, nd.type == OP_SIGMOID ? OP_SIGMOID_BWD : OP_TANH_BWD, 2, in, &p);
        return;
    }
    case OP_RELU: {
        int in[2] = {x[0], dy};
        graph_vjp_op(ad, x[0], i, OP_RELU_BWD, 2, in, &p);
        return;
    }
    case OP_SUB:
        if (g->nodes[x[0]].needs_grad)
            graph_contribute(ad, x[0], dy);
        graph_vjp_op(ad, x[1], i, OP_NEG, 1, &dy, &p);
        return;
    case OP_NEG:
        graph_vjp_op(ad, x[0], i, OP_NEG, 1, &dy, &p);
        return;
    case OP_MUL: {
        int in0[2] = {dy, x[1]}, in1[2] = {dy, x[0]};
        graph_vjp_op(ad, x[0], i, OP_MUL, 2, in0, &p);
        graph_vjp_op(ad, x[1], i, OP_MUL, 2, in1, &p);
        return;
    }
    case OP_CONV2D: {
        int inf[2] = {x[0], dy};
        graph_conv_data(ad, x[0], i, dy, x[1]);
        p.conv.r = g->nodes[x[1]].shape[2];
        p.conv.s = g->nodes[x[1]].shape[3];
        graph_vjp_op(ad, x[1], i, OP_CONV2D_BWD_FILTER, 2, inf, &p);
        return;
    }
    case OP_MAXPOOL2: {
        int in[2] = {x[0], dy};
        graph_vjp_op(ad, x[0], i, OP_MAXPOOL2_BWD, 2, in, &p);
        return;
    }
    case OP_UPSAMPLE2:
        graph_vjp_op(ad, x[0], i, OP_UPSAMPLE2_BWD, 1, &dy, &p);
        return;
    case OP_CONCAT: {
        uint32_t c0 = 0;
        for (int k = 0; k < nd.ninputs; k++) {
            uint32_t ck = g->nodes[x[k]].shape[1];
            p.slice.c0 = c0;
            p.slice.n = ck;
            p.slice.total = nd.shape[1];
            graph_vjp_op(ad, x[k], i, OP_SLICE, 1, &dy, &p);
            c0 += ck;
        }
        return;
    }
    case OP_SLICE:
        p.slice = nd.p.slice;
        graph_vjp_op(ad, x[0], i, OP_SLICE_BWD, 1, &dy, &p);
        return;
    case OP_HARD_SIGMOID:
    case OP_SATLU: {
        int in[2] = {x[0], dy};
        p = nd.p;
        graph_vjp_op(ad, x[0], i, nd.type == OP_SATLU ? OP_SATLU_BWD : OP_HARD_SIGMOID_BWD, 2, in, &p);
        return;
    }
    case OP_MEAN:
        DT_ASSERT(dy >= 0, "mean '%s': no output gradient", nd.name);
        p.mean = nd.p.mean;
        graph_vjp_op(ad, x[0], i, OP_MEAN_BWD, 1, &dy, &p);
        return;
    case OP_FILL:
        return;
    case OP_MSE: {
        int in[3] = {x[0], x[1], dy};
        graph_vjp_op(ad, x[0], i, OP_MSE_BWD, dy < 0 ? 2 : 3, in, &p);
        DT_ASSERT(!g->nodes[x[1]].needs_grad, "mse target '%s' needs a gradient: not supported",
                  g->nodes[x[1]].name);
        return;
    }
    default:
        DT_ASSERT(0, "no vector-Jacobian rule for op '%s' (%s)", nd.name, op_type_name(nd.type));
    }
}

/* How many contributions node j receives: one per consumer edge on a path to
 * the loss (ADD_BIAS and ADD pass dy itself; both count as one). */
static void graph_count_consumers(struct graph_ad *ad, int loss)
{
    struct graph *g = ad->g;
    char *live = dt_calloc((size_t)g->n, 1);
    live[loss] = 1;
    for (int i = loss; i >= 0; i--) {
        if (!live[i] || !g->nodes[i].needs_grad)
            continue;
        for (int k = 0; k < g->nodes[i].ninputs; k++) {
            int j = g->nodes[i].inputs[k];
            if (!g->nodes[j].needs_grad)
                continue;
            if (g->nodes[i].type == OP_MSE && k == 1)
                continue;
            live[j] = 1;
            ad->consumers[j]++;
            if (g->nodes[i].type == OP_CONV2D && k == 0)
                ad->wait[j].convs = ++ad->wait[j].left;
        }
    }
    free(live);
}

void graph_backward(struct graph *g, int loss)
{
    DT_ASSERT(loss >= 0 && loss < g->n && g->nodes[loss].count == 1, "loss must be a scalar node");
    g->loss = loss;
    struct graph_ad ad = {g, dt_calloc((size_t)g->n, sizeof(struct graph_contrib)),
                          dt_calloc((size_t)g->n, sizeof(int)),
                          dt_calloc((size_t)g->n, sizeof(struct graph_conv_wait))};
    graph_count_consumers(&ad, loss);
    int nforward = g->n;
    for (int i = loss; i >= 0; i--) {
        int dy;
        if (i == loss) {
            /* d loss / d loss = 1: the MSE rule takes it implicitly; any
             * other rule gets it as a tensor. */
            dy = -1;
            if (g->nodes[loss].type != OP_MSE) {
                char name[512];
                snprintf(name, sizeof name, "%s.grad", g->nodes[loss].name);
                dy = graph_push(g, OP_FILL, TRACE_KIND_BACKWARD, name, g->nodes[loss].ndim, g->nodes[loss].shape,
                                0, NULL);
                g->nodes[dy].p.fill.value = 1.0f;
            }
        } else {
            struct graph_contrib *c = &ad.c[i];
            if (i < nforward)
                graph_conv_flush(&ad, i); /* pairs of shapes that were not all alike */
            if (c->n == 0)
                continue;
            dy = c->v[0];
            for (int k = 1; k < c->n; k++) {
                char name[512];
                if (k == c->n - 1)
                    snprintf(name, sizeof name, "%s.grad", g->nodes[i].name);
                else
                    snprintf(name, sizeof name, "%s.grad.sum%d", g->nodes[i].name, k);
                dy = graph_add(g, name, dy, c->v[k]);
                g->nodes[dy].kind = TRACE_KIND_BACKWARD;
            }
            g->nodes[i].grad = dy;
            /* A parameter's own gradient op is of kind grad. When the
             * gradient passes through unchanged (a parameter fed only to
             * add, or as add_bias's x), the node is another op's output
             * and keeps its name and kind: graph_grad_of still finds it. */
            char own[512];
            snprintf(own, sizeof own, "%s.grad", g->nodes[i].name);
            if (g->nodes[i].type == OP_PARAM && strcmp(g->nodes[dy].name, own) == 0)
                g->nodes[dy].kind = TRACE_KIND_GRAD;
        }
        if (i < nforward)
            graph_vjp(&ad, i, dy);
    }
    for (int i = 0; i < nforward; i++)
        free(ad.c[i].v);
    free(ad.c);
    free(ad.consumers);
    free(ad.wait);
}

int graph_grad_of(const struct graph *g, int i)
{
    return g->nodes[i].grad;
}

/* ---- optimizer ------------------------------------------------------------ */

static int graph_state(struct graph *g, int param, const char *suffix)
{
    char name[512];
    snprintf(name, sizeof name, "%s.%s", g->nodes[param].name, suffix);
    return graph_push(g, OP_STATE, TRACE_KIND_STATE, name, g->nodes[param].ndim,
                      g->nodes[param].shape, 0, NULL);
}

static int graph_update(struct graph *g, enum op_type t, const char *leafname,
                        int ninputs, const int *in, const union op_params *p)
{
    char name[512];
    snprintf(name, sizeof name, "%s.update", leafname);
    int i = graph_push(g, t, TRACE_KIND_OPTIMIZER, name, g->nodes[in[0]].ndim,
                       g->nodes[in[0]].shape, ninputs, in);
    g->nodes[i].p = *p;
    g->nodes[in[0]].next = i;
    return i;
}

void graph_optimizer(struct graph *g, const struct graph_opt_config *oc)
{
    int n = g->n;
    /* State leaves are appended here, after the backward ops: a leaf has no
     * inputs in its step, so its place only fixes the trace order, which is
     * the same for every backend of a given configuration. */
    for (int i = 0; i < n; i++) {
        if (g->nodes[i].type != OP_PARAM || g->nodes[i].grad < 0)
            continue;
        int grad = g->nodes[i].grad;
        union op_params p;
        memset(&p, 0, sizeof p);
        char *pname = g->nodes[i].name;
        if (oc->kind == GRAPH_OPT_SGD) {
            int step_dir = grad;
            if (oc->momentum != 0.0f) {
                int buf = graph_state(g, i, "momentum");
                int in[2] = {buf, grad};
                p.momentum.mu = oc->momentum;
                step_dir = graph_update(g, OP_MOMENTUM, g->nodes[buf].name, 2, in, &p);
            }
            int in[2] = {i, step_dir};
            p.sgd.lr = oc->lr;
            graph_update(g, OP_SGD, pname, 2, in, &p);
        } else {
            int m = graph_state(g, i, "m");
            int v = graph_state(g, i, "v");
            p.adam.lr = oc->lr;
            p.adam.b1 = oc->b1;
            p.adam.b2 = oc->b2;
            p.adam.eps = oc->eps;
            int inm[2] = {m, grad}, inv[2] = {v, grad};
            int m1 = graph_update(g, OP_ADAM_M, g->nodes[m].name, 2, inm, &p);
            int v1 = graph_update(g, OP_ADAM_V, g->nodes[v].name, 2, inv, &p);
            int in[3] = {i, m1, v1};
            graph_update(g, OP_ADAM_P, pname, 3, in, &p);
        }
    }
}

struct trace_opdef *graph_opdefs(const struct graph *g)
{
    struct trace_opdef *ops = dt_calloc((size_t)g->n, sizeof *ops);
    for (int i = 0; i < g->n; i++) {
        const struct node *nd = &g->nodes[i];
        struct trace_opdef *o = &ops[i];
        o->name = dt_strdup(nd->name);
        o->type = dt_strdup(op_type_name(nd->type));
        o->kind = (uint8_t)nd->kind;
        o->ndim = (uint8_t)nd->ndim;
        memcpy(o->shape, nd->shape, sizeof o->shape);
        if (nd->next >= 0) {
            o->ninputs = 1;
            o->inputs = dt_malloc(sizeof *o->inputs);
            o->inputs[0] = (uint32_t)nd->next | TRACE_INPUT_PREV;
        } else {
            o->ninputs = (uint32_t)nd->ninputs;
            o->inputs = dt_malloc(sizeof *o->inputs * (size_t)(nd->ninputs ? nd->ninputs : 1));
            for (int k = 0; k < nd->ninputs; k++)
                o->inputs[k] = (uint32_t)nd->inputs[k];
        }
    }
    return ops;
}

void graph_opdefs_free(struct trace_opdef *ops, int n)
{
    if (!ops)
        return;
    for (int i = 0; i < n; i++) {
        free(ops[i].name);
        free(ops[i].type);
        free(ops[i].inputs);
    }
    free(ops);
}

int graph_short_sums(const struct graph *g, char *buf, size_t n)
{
    int count = 0;
    size_t len = 0;
    if (n)
        buf[0] = 0;
    for (int i = 0; i < g->n; i++) {
        const struct node *nd = &g->nodes[i];
        const struct node *x = nd->ninputs > 0 ? &g->nodes[nd->inputs[0]] : NULL;
        uint64_t terms;
        if (nd->type == OP_BIAS_GRAD && x)
            terms = x->ndim == 4 ? (uint64_t)x->shape[0] * x->shape[2] * x->shape[3] : x->shape[0];
        else if ((nd->type == OP_MSE || nd->type == OP_MEAN) && x)
            terms = x->count;
        else
            continue;
        if (terms > 2)
            continue;
        count++;
        if (len < n) {
            int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "", nd->name);
            len = w < 0 || (size_t)w >= n - len ? n : len + (size_t)w;
            if (len >= n && n > 4)
                memcpy(buf + n - 4, "...", 4);
        }
    }
    return count;
}
