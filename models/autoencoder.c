/* autoencoder.c: the MLP autoencoder. Layers are named enc1, enc2, ... for
 * the first half of the linear maps and dec1, dec2, ... for the rest; each
 * computes act(x W^T + b), with a sigmoid on the output; the loss is the
 * mean squared error against the input. */
#include <stdio.h>

#include "model.h"
#include "util.h"

int autoencoder_build(struct graph *g, const struct model_spec *spec, uint32_t features)
{
    int nmaps = spec->nlayers - 1;
    if (spec->layers[0] != features || spec->layers[nmaps] != features) {
        dt_error_set("--layers: an autoencoder's first and last widths must equal the data's "
                     "%u pixels per image (got %u and %u)", features, spec->layers[0],
                     spec->layers[nmaps]);
        return DT_ERR;
    }
    uint32_t xs[2] = {spec->batch, features};
    int x = graph_input(g, "data.x", 2, xs);
    int h = x;
    int nenc = nmaps / 2;
    for (int l = 0; l < nmaps; l++) {
        char pre[32], name[64];
        if (l < nenc)
            snprintf(pre, sizeof pre, "enc%d", l + 1);
        else
            snprintf(pre, sizeof pre, "dec%d", l - nenc + 1);
        uint32_t ws[2] = {spec->layers[l + 1], spec->layers[l]};
        snprintf(name, sizeof name, "%s.W", pre);
        int w = graph_param(g, name, 2, ws);
        snprintf(name, sizeof name, "%s.b", pre);
        int b = graph_param(g, name, 1, &ws[0]);
        snprintf(name, sizeof name, "%s.matmul", pre);
        h = graph_matmul(g, name, h, w, 0, 1);
        snprintf(name, sizeof name, "%s.add_bias", pre);
        h = graph_add_bias(g, name, h, b);
        enum model_act act = l == nmaps - 1 ? MODEL_ACT_SIGMOID : spec->act;
        snprintf(name, sizeof name, "%s.%s", pre, model_act_name(act));
        if (act == MODEL_ACT_SIGMOID)
            h = graph_sigmoid(g, name, h);
        else if (act == MODEL_ACT_TANH)
            h = graph_tanh(g, name, h);
        else
            h = graph_relu(g, name, h);
    }
    return graph_mse(g, "loss.mse", h, x);
}
