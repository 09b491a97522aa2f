/* model.c: model registry, option parsing and parameter initialisation. */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "rng.h"
#include "util.h"

int model_parse_layers(const char *s, struct model_spec *spec)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || errno || v == 0 || v > 1u << 20 || (*end && *end != ',')) {
            dt_error_set("--layers '%s': expected comma-separated positive widths, e.g. 784,128,32,128,784", s);
            return DT_ERR;
        }
        if (n == MODEL_MAX_LAYERS) {
            dt_error_set("--layers '%s': at most %d widths", s, MODEL_MAX_LAYERS);
            return DT_ERR;
        }
        spec->layers[n++] = (uint32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n < 2) {
        dt_error_set("--layers '%s': need at least an input and an output width", s);
        return DT_ERR;
    }
    spec->nlayers = n;
    return DT_OK;
}

static const char *const model_acts[] = {"sigmoid", "tanh", "relu"};

int model_parse_act(const char *s, enum model_act *act)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(s, model_acts[i]) == 0) {
            *act = (enum model_act)i;
            return DT_OK;
        }
    dt_error_set("--act '%s': expected sigmoid, tanh or relu", s);
    return DT_ERR;
}

const char *model_act_name(enum model_act act)
{
    return model_acts[act];
}

int model_build(struct graph *g, const struct model_spec *spec, uint32_t features)
{
    if (strcmp(spec->name, "autoencoder") == 0)
        return autoencoder_build(g, spec, features);
    dt_error_set("unknown model '%s' (this build has: autoencoder)", spec->name);
    return DT_ERR;
}

void model_init_param(const struct node *nd, uint64_t init_seed, double scale, float *out)
{
    size_t len = strlen(nd->name);
    if (len >= 2 && strcmp(nd->name + len - 2, ".b") == 0) {
        memset(out, 0, nd->count * sizeof *out);
        return;
    }
    DT_ASSERT(nd->ndim == 2, "no initialiser for parameter '%s'", nd->name);
    /* W is (fan_out, fan_in) */
    double a = scale * sqrt(6.0 / ((double)nd->shape[0] + (double)nd->shape[1]));
    rng_fill_uniform(out, nd->count, init_seed, hash_bytes(nd->name, len), -a, a);
}
