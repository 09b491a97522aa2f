/* conv_sets.h: convolutions of one step that can run as one. Convolutions
 * of one direction that read the same input x with inputs of the same
 * shapes (PredNet's four gate convolutions of a layer and time step, and
 * their four filter gradients) are one convolution of their output channels
 * stacked in member order: the forward over the filters stacked along K,
 * the filter gradient over the output gradients stacked along channels.
 * Each member's output is still its own node. A backend runs a set as one
 * where that pays, each by its own rule for the bits (gpu_dnn_fuse.cu,
 * backend_cpu.c). */
#ifndef DT_CONV_SETS_H
#define DT_CONV_SETS_H

#include <stdint.h>

#include "graph.h"

#define CONV_SET_MAX 8

struct conv_set {
    enum op_type type;           /* OP_CONV2D or OP_CONV2D_BWD_FILTER */
    int nmem;
    int mem[CONV_SET_MAX];       /* node indices in graph order */
};

/* Whether every input of node j is a leaf or made before node i. */
int conv_inputs_before(const struct graph *g, int j, int i);
/* Whether convolution nodes a and b (of one type) have inputs of the same
 * shapes (and, for filter gradients, the same kernel size). */
int conv_same_shapes(const struct graph *g, int a, int b);
/* The sets (two members or more) among the forward convolutions and
 * filter gradients i with eligible[i] nonzero (NULL: all of them): for
 * each x and type in turn, in node order, a node not yet in a set leads
 * one, joined by the later nodes of that x and type with the same shapes
 * whose inputs are made before the leader. A set that accept (when not
 * NULL) refuses is dropped and its members stay free. The count of sets
 * kept; *out (to free) holds them. */
int conv_sets_find(const struct graph *g, const unsigned char *eligible,
                   int (*accept)(void *arg, const struct conv_set *s), void *arg, struct conv_set **out);
/* For each member k of set s: how many op nodes (not leaves) come after
 * mem[0] up to and including mem[k] (dist[0] = 0). In a pass of the
 * executor, which enters every op node in graph order, member k is entered
 * exactly dist[k] ops after member 0. */
void conv_set_dists(const struct graph *g, const struct conv_set *s, uint64_t *dist);

#endif
