/* graph.h: the op graph of one training step and its reverse-mode autodiff.
 * A model appends its forward ops; graph_backward appends the backward ops
 * from each op type's vector-Jacobian rule; graph_optimizer appends the
 * parameter updates. Nodes are stored in execution order, so the node list
 * is the op list every backend runs and every trace records. */
#ifndef DT_GRAPH_H
#define DT_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "op.h"
#include "trace.h"

struct node {
    enum op_type type;
    char *name;                 /* stable name, unique in the graph */
    enum trace_kind kind;
    int ndim;
    uint32_t shape[TRACE_MAX_DIM];
    size_t count;               /* elements */
    int ninputs;
    int inputs[OP_MAX_INPUTS];  /* node indices */
    union op_params p;
    int needs_grad;             /* gradient flows to this node */
    int next;                   /* leaves: node whose output is this leaf's next value, or -1 */
    int grad;                   /* gradient node after graph_backward, or -1 */
};

struct graph {
    struct node *nodes;
    int n, cap;
    int loss;                   /* node index of the scalar loss, or -1 */
    /* names to nodes: open addressing, node index + 1 (0: empty), at most
     * half full, so building a graph of n ops takes O(n), not O(n^2) */
    int *slots;
    unsigned nslots;            /* a power of two, or 0 */
};

void graph_init(struct graph *g);
void graph_free(struct graph *g);
/* Index of the node with this name, or -1. */
int graph_find(const struct graph *g, const char *name);
/* Give node i another name (not one already in the graph). */
void graph_rename(struct graph *g, int i, const char *name);

/* Leaves. shape has ndim entries. */
int graph_input(struct graph *g, const char *name, int ndim, const uint32_t *shape);
int graph_param(struct graph *g, const char *name, int ndim, const uint32_t *shape);

/* Forward ops (names given by the model). */
int graph_matmul(struct graph *g, const char *name, int a, int b, int ta, int tb);
int graph_add_bias(struct graph *g, const char *name, int x, int b);
int graph_sigmoid(struct graph *g, const char *name, int x);
int graph_tanh(struct graph *g, const char *name, int x);
int graph_relu(struct graph *g, const char *name, int x);
int graph_add(struct graph *g, const char *name, int a, int b);
int graph_mse(struct graph *g, const char *name, int pred, int target);

/* Image ops on (N,C,H,W) tensors (op.h). graph_add_bias also takes x of
 * rank 4 with a bias of its C channels. Shapes that do not fit are a
 * programming error (DT_ASSERT): a model checks user-given sizes first. */
int graph_fill(struct graph *g, const char *name, int ndim, const uint32_t *shape, float value);
int graph_conv2d(struct graph *g, const char *name, int x, int w);
int graph_maxpool2(struct graph *g, const char *name, int x);
int graph_upsample2(struct graph *g, const char *name, int x);
int graph_concat(struct graph *g, const char *name, int n, const int *xs);
int graph_slice(struct graph *g, const char *name, int x, uint32_t c0, uint32_t n);
int graph_hard_sigmoid(struct graph *g, const char *name, int x);
int graph_satlu(struct graph *g, const char *name, int x, float max);
int graph_sub(struct graph *g, const char *name, int a, int b);
int graph_neg(struct graph *g, const char *name, int x);
int graph_mul(struct graph *g, const char *name, int a, int b);
/* scale * mean(x), a scalar (1) */
int graph_mean(struct graph *g, const char *name, int x, float scale);

/* Append the backward ops of the scalar node `loss` (d loss / d loss = 1).
 * The gradient of a parameter "P" is the node "P.grad" (kind GRAD). */
void graph_backward(struct graph *g, int loss);
/* The gradient node of node i after graph_backward, or -1. */
int graph_grad_of(const struct graph *g, int i);

enum graph_optimizer { GRAPH_OPT_SGD, GRAPH_OPT_ADAM };
struct graph_opt_config {
    enum graph_optimizer kind;
    float lr, momentum;        /* sgd: momentum 0 = plain */
    float b1, b2, eps;         /* adam */
};
/* Append the update ops of every parameter with a gradient: state leaves
 * ("P.m", "P.v", "P.momentum") and updates ("P.update", "P.m.update", ...),
 * linking each leaf to its update through node.next. */
void graph_optimizer(struct graph *g, const struct graph_opt_config *oc);

/* The trace op list of the graph (name, type, kind, shape, inputs; leaves
 * name the update that produced them with TRACE_INPUT_PREV). Free with
 * graph_opdefs_free. */
/* The sums that --reduce atomic cannot make vary: bias gradients, mse and
 * mean ops of at most two terms (0 + a and a + b come out the same in every
 * order). Returns how many; buf gets their names, comma-separated, cut
 * with "..." where it is full. */
int graph_short_sums(const struct graph *g, char *buf, size_t n);

struct trace_opdef *graph_opdefs(const struct graph *g);
void graph_opdefs_free(struct trace_opdef *ops, int n);

#endif
