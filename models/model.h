/* model.h: the built-in models. A model appends only its forward pass (and
 * its loss) to a graph; autodiff and the optimizer do the rest. */
#ifndef DT_MODEL_H
#define DT_MODEL_H

#include <stdint.h>

#include "graph.h"

#define MODEL_MAX_LAYERS 16

enum model_act { MODEL_ACT_SIGMOID, MODEL_ACT_TANH, MODEL_ACT_RELU };

struct model_spec {
    const char *name;                   /* "autoencoder" or "prednet" */
    uint32_t batch;
    /* autoencoder */
    uint32_t layers[MODEL_MAX_LAYERS];  /* widths, input first */
    int nlayers;
    enum model_act act;                 /* hidden layers; the output is sigmoid */
    /* prednet: nstack layers; stack[0] is the frames' channel count */
    uint32_t stack[MODEL_MAX_LAYERS];   /* A and Ahat channels per layer */
    uint32_t rstack[MODEL_MAX_LAYERS];  /* R (ConvLSTM) channels per layer */
    int nstack;
    double layer_weights[MODEL_MAX_LAYERS];
    uint32_t height, width, nt;         /* frame size and sequence length */
    float pixel_max;                    /* SatLU bound of layer 0's prediction */
};

/* Comma-separated lists: "1,16,32,64" (positive integers) and "1,0,0,0"
 * (non-negative numbers); n gets the count. 0, or -1 with dt_error set naming
 * the option `what`. */
int model_parse_u32_list(const char *what, const char *s, uint32_t *out, int *n);
int model_parse_weights(const char *what, const char *s, double *out, int *n);
/* "64x64" (height x width). */
int model_parse_size(const char *s, uint32_t *h, uint32_t *w);

/* "784,128,32,128,784" into spec->layers. 0, or -1 with dt_error set. */
int model_parse_layers(const char *s, struct model_spec *spec);
int model_parse_act(const char *s, enum model_act *act);
const char *model_act_name(enum model_act act);

/* Append the model's forward pass and loss for inputs of `features` values
 * each (the autoencoder; prednet's frames are spec->height x spec->width
 * with spec->stack[0] channels). The inputs are OP_INPUT nodes named
 * "data.x" (autoencoder: (batch, features)) or "data.tNN" (prednet: frame t
 * of every sequence, (batch, C, H, W)). Returns the loss node, or -1 with
 * dt_error set (e.g. a shape that does not fit the data). */
int model_build(struct graph *g, const struct model_spec *spec, uint32_t features);

/* Initial value of parameter node nd: Glorot-uniform for "*.W" (bound
 * scale * sqrt(6 / (fan_in + fan_out)); a matrix (fan_out, fan_in), a
 * filter (K, C, R, S) with fan_in = C R S and fan_out = K R S, as Keras
 * counts them), zero for "*.b"; the RNG stream is a hash of the name, so a
 * parameter's values do not depend on op order. */
void model_init_param(const struct node *nd, uint64_t init_seed, double scale, float *out);

int autoencoder_build(struct graph *g, const struct model_spec *spec, uint32_t features);
int prednet_build(struct graph *g, const struct model_spec *spec);
/* Check a prednet spec (sizes divisible by 2^(layers-1), lists of one
 * length, nt >= 2...); 0, or -1 with dt_error set. */
int prednet_check(const struct model_spec *spec);
/* The name of a time step's ops: "t07" (two digits, or as many as nt - 1 needs). */
void prednet_tname(const struct model_spec *spec, uint32_t t, char *buf, size_t n);

#endif
