/* model.c: model registry, option parsing and parameter initialisation. */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
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

int model_parse_u32_list(const char *what, const char *s, uint32_t *out, int *n)
{
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || errno || v == 0 || v > 1u << 16 || (*end && *end != ',') || *p == '-') {
            dt_error_set("%s '%s': expected comma-separated positive integers, e.g. 1,16,32,64",
                         what, s);
            return DT_ERR;
        }
        if (k == MODEL_MAX_LAYERS) {
            dt_error_set("%s '%s': at most %d entries", what, s, MODEL_MAX_LAYERS);
            return DT_ERR;
        }
        out[k++] = (uint32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        dt_error_set("%s: empty list", what);
        return DT_ERR;
    }
    *n = k;
    return DT_OK;
}

int model_parse_weights(const char *what, const char *s, double *out, int *n)
{
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !(v >= 0) || !isfinite(v) || (*end && *end != ',')) {
            dt_error_set("%s '%s': expected comma-separated non-negative numbers, e.g. 1,0,0,0",
                         what, s);
            return DT_ERR;
        }
        if (k == MODEL_MAX_LAYERS) {
            dt_error_set("%s '%s': at most %d entries", what, s, MODEL_MAX_LAYERS);
            return DT_ERR;
        }
        out[k++] = v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        dt_error_set("%s: empty list", what);
        return DT_ERR;
    }
    *n = k;
    return DT_OK;
}

int model_parse_size(const char *s, uint32_t *h, uint32_t *w)
{
    unsigned long a, b;
    char x, extra;
    if (sscanf(s, "%lu%c%lu%c", &a, &x, &b, &extra) != 3 || x != 'x' || a == 0 || b == 0 ||
        a > 1u << 14 || b > 1u << 14 || s[0] == '-' || strchr(s, '-')) {
        dt_error_set("--size '%s': expected HEIGHTxWIDTH, e.g. 64x64", s);
        return DT_ERR;
    }
    *h = (uint32_t)a;
    *w = (uint32_t)b;
    return DT_OK;
}

int model_build(struct graph *g, const struct model_spec *spec, uint32_t features)
{
    if (strcmp(spec->name, "autoencoder") == 0)
        return autoencoder_build(g, spec, features);
    if (strcmp(spec->name, "prednet") == 0)
        return prednet_build(g, spec);
    dt_error_set("unknown model '%s' (this build has: autoencoder, prednet)", spec->name);
    return DT_ERR;
}

void model_init_param(const struct node *nd, uint64_t init_seed, double scale, float *out)
{
    size_t len = strlen(nd->name);
    if (len >= 2 && strcmp(nd->name + len - 2, ".b") == 0) {
        memset(out, 0, nd->count * sizeof *out);
        return;
    }
    DT_ASSERT(nd->ndim == 2 || nd->ndim == 4, "no initialiser for parameter '%s'", nd->name);
    /* W is (fan_out, fan_in), or a filter (K, C, R, S) */
    double rs = nd->ndim == 4 ? (double)nd->shape[2] * (double)nd->shape[3] : 1.0;
    double a = scale * sqrt(6.0 / (((double)nd->shape[0] + (double)nd->shape[1]) * rs));
    rng_fill_uniform(out, nd->count, init_seed, hash_bytes(nd->name, len), -a, a);
}
