/* modcheck.c: the dispatch of modcheck_run (modcheck.h) and the parsing of
 * specs: the type, then KEY=VALUE pairs separated by spaces. */
#include "modcheck_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const struct {
    const char *type;
    mc_fn fn;
} mc_table[] = {
    {"linear", mc_linear},         {"conv1d", mc_conv},       {"conv2d", mc_conv},
    {"relu", mc_elementwise},      {"sigmoid", mc_elementwise}, {"tanh", mc_elementwise},
    {"hardsigmoid", mc_elementwise}, {"gelu", mc_elementwise},  {"layernorm", mc_layernorm},
    {"softmax", mc_softmax},       {"crossentropyloss", mc_crossentropy},
    {"mseloss", mc_mse},           {"sgd", mc_sgd},           {"adam", mc_adam},
    {"adamw", mc_adam},
};

static mc_fn mc_lookup(const char *type)
{
    for (size_t k = 0; k < sizeof mc_table / sizeof mc_table[0]; k++)
        if (strcmp(mc_table[k].type, type) == 0)
            return mc_table[k].fn;
    return NULL;
}

int modcheck_known(const char *type) { return mc_lookup(type) != NULL; }

void modcheck_type(const char *spec, char *out, size_t n)
{
    size_t k = 0;
    while (spec[k] == ' ')
        spec++;
    while (spec[k] && spec[k] != ' ' && k + 1 < n) {
        out[k] = spec[k];
        k++;
    }
    if (n)
        out[k] = 0;
}

static int mc_parse(const char *spec, struct mc_spec *sp)
{
    memset(sp, 0, sizeof *sp);
    const char *p = spec;
    while (*p == ' ')
        p++;
    size_t len = strcspn(p, " ");
    if (len == 0 || len >= sizeof sp->type) {
        dt_error_set("module check spec '%.60s': no type", spec);
        return DT_ERR;
    }
    memcpy(sp->type, p, len);
    p += len;
    for (;;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        len = strcspn(p, " ");
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p || sp->n == 32 || (size_t)(eq - p) >= sizeof sp->key[0] ||
            len - (size_t)(eq - p) - 1 >= sizeof sp->val[0]) {
            dt_error_set("module check spec '%.60s': '%.*s' is not KEY=VALUE", spec, (int)len, p);
            return DT_ERR;
        }
        memcpy(sp->key[sp->n], p, (size_t)(eq - p));
        memcpy(sp->val[sp->n], eq + 1, len - (size_t)(eq - p) - 1);
        sp->n++;
        p += len;
    }
    return DT_OK;
}

const char *mc_get(const struct mc_spec *sp, const char *key)
{
    for (int k = sp->n - 1; k >= 0; k--)
        if (strcmp(sp->key[k], key) == 0)
            return sp->val[k];
    return NULL;
}

int mc_num(const struct mc_spec *sp, const char *key, double def, double *out)
{
    const char *v = mc_get(sp, key);
    if (!v) {
        *out = def;
        return DT_OK;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno == ERANGE) {
        dt_error_set("%s: %s=%s is not a number", sp->type, key, v);
        return DT_ERR;
    }
    *out = x;
    return DT_OK;
}

int mc_ints(const struct mc_spec *sp, const char *key, int64_t *out, int max)
{
    const char *v = mc_get(sp, key);
    if (!v) {
        dt_error_set("%s: no %s", sp->type, key);
        return DT_ERR;
    }
    int n = 0;
    const char *p = v;
    for (;;) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || n == max) {
            dt_error_set("%s: %s=%s is not %d comma-separated integers", sp->type, key, v, max);
            return DT_ERR;
        }
        out[n++] = x;
        if (*end == 0)
            break;
        if (*end != ',') {
            dt_error_set("%s: %s=%s is not %d comma-separated integers", sp->type, key, v, max);
            return DT_ERR;
        }
        p = end + 1;
    }
    if (n == 1)
        for (int k = 1; k < max; k++)
            out[k] = out[0];
    return n == 1 ? max : n;
}

const struct modcheck_tensor *mc_find(const struct modcheck_tensor *t, int nt, const char *role)
{
    for (int k = 0; k < nt; k++)
        if (strcmp(t[k].role, role) == 0)
            return &t[k];
    return NULL;
}

const struct modcheck_tensor *mc_need(const struct modcheck_tensor *t, int nt, const char *role,
                                      const char *type)
{
    const struct modcheck_tensor *x = mc_find(t, nt, role);
    if (!x)
        dt_error_set("%s check: no '%s' tensor", type, role);
    return x;
}

struct modcheck_output *mc_output(struct modcheck_result *res, const char *role,
                                  const struct modcheck_tensor *got)
{
    struct modcheck_output *o = &res->out[res->nout++];
    memset(o, 0, sizeof *o);
    snprintf(o->role, sizeof o->role, "%s", role);
    o->got = got->data;
    o->count = got->count;
    o->exact = dt_malloc((got->count ? got->count : 1) * sizeof *o->exact);
    o->bound = dt_malloc((got->count ? got->count : 1) * sizeof *o->bound);
    return o;
}

void modcheck_result_free(struct modcheck_result *res)
{
    for (int k = 0; k < res->nout; k++) {
        free(res->out[k].exact);
        free(res->out[k].bound);
    }
    res->nout = 0;
}

int modcheck_run(const char *spec, const struct modcheck_tensor *t, int nt, struct modcheck_result *res,
                 char *why, size_t nwhy)
{
    memset(res, 0, sizeof *res);
    if (nwhy)
        why[0] = 0;
    struct mc_spec sp;
    if (mc_parse(spec, &sp) < 0)
        return DT_ERR;
    mc_fn fn = mc_lookup(sp.type);
    if (!fn) {
        snprintf(why, nwhy, "%s", sp.type);
        return 1;
    }
    const char *dtype = mc_get(&sp, "dtype");
    if (dtype && strcmp(dtype, "float32") != 0) {
        snprintf(why, nwhy, "%s (%s autocast)", sp.type, dtype);
        return 1;
    }
    int rc = fn(&sp, t, nt, res, why, nwhy);
    if (rc != 0)
        modcheck_result_free(res);
    return rc;
}
