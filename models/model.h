/* model.h: the built-in models. A model appends only its forward pass (and
 * its loss) to a graph; autodiff and the optimizer do the rest. */
#ifndef DT_MODEL_H
#define DT_MODEL_H

#include <stdint.h>

#include "graph.h"

#define MODEL_MAX_LAYERS 16

enum model_act { MODEL_ACT_SIGMOID, MODEL_ACT_TANH, MODEL_ACT_RELU };

struct model_spec {
    const char *name;                   /* "autoencoder" */
    uint32_t layers[MODEL_MAX_LAYERS];  /* widths, input first */
    int nlayers;
    enum model_act act;                 /* hidden layers; the output is sigmoid */
    uint32_t batch;
};

/* "784,128,32,128,784" into spec->layers. 0, or -1 with dt_error set. */
int model_parse_layers(const char *s, struct model_spec *spec);
int model_parse_act(const char *s, enum model_act *act);
const char *model_act_name(enum model_act act);

/* Append the model's forward pass and loss for inputs of `features` values
 * each. Returns the loss node, or -1 with dt_error set (e.g. a shape that
 * does not fit the data). */
int model_build(struct graph *g, const struct model_spec *spec, uint32_t features);

/* Initial value of parameter node nd: Glorot-uniform for "*.W" (bound
 * scale * sqrt(6 / (fan_in + fan_out))), zero for "*.b"; the RNG stream is
 * a hash of the name, so a parameter's values do not depend on op order. */
void model_init_param(const struct node *nd, uint64_t init_seed, double scale, float *out);

int autoencoder_build(struct graph *g, const struct model_spec *spec, uint32_t features);

#endif
