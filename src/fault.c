/* fault.c: faults injected on purpose (see fault.h). The wrong formulas are
 * the kind of slip a framework's second code path can carry: each one is
 * close to right on some inputs and wrong by far more than rounding on
 * others, which is what replay has to tell apart. */
#include "fault.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Dimension letters: N rows, F features. */
#define FAULT_OP(fn) static void fn(void *ctx, const struct graph *g, const struct node *nd,   \
                                    backend_buf *outb, const backend_buf *const *inb,           \
                                    const struct backend_step *st)
#define OUT ((float *)outb)
#define IN(k) ((const float *)inb[k])

FAULT_OP(fault_sigmoid)
{
    /* sigmoid(x) = (1 + tanh(x / 2)) / 2, with the halving of x forgotten */
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = 0.5f * (1.0f + tanhf(IN(0)[i]));
}

FAULT_OP(fault_tanh)
{
    /* tanh(x) = 2 sigmoid(2x) - 1, with the doubling of x forgotten */
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = 2.0f / (1.0f + expf(-IN(0)[i])) - 1.0f;
}

FAULT_OP(fault_relu)
{
    /* a leaky ReLU where a plain one was meant */
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = IN(0)[i] > 0.0f ? IN(0)[i] : 0.01f * IN(0)[i];
}

FAULT_OP(fault_add_bias)
{
    /* the bias term dropped */
    memcpy(OUT, IN(0), nd->count * sizeof(float));
}

FAULT_OP(fault_bias_grad)
{
    /* the mean over rows where the sum is the gradient */
    size_t rows = g->nodes[nd->inputs[0]].shape[0], f = nd->shape[0];
    memset(OUT, 0, f * sizeof(float));
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < f; j++)
            OUT[j] += IN(0)[r * f + j];
    for (size_t j = 0; j < f; j++)
        OUT[j] /= (float)rows;
}

FAULT_OP(fault_sigmoid_bwd)
{
    /* dy * y, the (1 - y) factor forgotten */
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = IN(1)[i] * IN(0)[i];
}

FAULT_OP(fault_tanh_bwd)
{
    /* dy * (1 - y), a square forgotten */
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = IN(1)[i] * (1.0f - IN(0)[i]);
}

FAULT_OP(fault_mse)
{
    /* the squared error averaged over rows only, not over every element */
    const struct node *p = &g->nodes[nd->inputs[0]];
    double s = 0;
    for (size_t i = 0; i < p->count; i++) {
        double d = (double)IN(0)[i] - (double)IN(1)[i];
        s += d * d;
    }
    OUT[0] = (float)(s / (double)p->shape[0]);
}

FAULT_OP(fault_mse_bwd)
{
    /* the factor 2 of the derivative forgotten */
    float scale = (float)(1.0 / (double)nd->count);
    if (nd->ninputs > 2)
        scale *= IN(2)[0];
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = scale * (IN(0)[i] - IN(1)[i]);
}

FAULT_OP(fault_sgd)
{
    /* a step up the gradient */
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = IN(0)[i] + nd->p.sgd.lr * IN(1)[i];
}

FAULT_OP(fault_adam_p)
{
    /* Adam without its bias correction */
    float lr = nd->p.adam.lr, eps = nd->p.adam.eps;
    for (size_t i = 0; i < nd->count; i++)
        OUT[i] = IN(0)[i] - lr * IN(1)[i] / (sqrtf(IN(2)[i]) + eps);
}

static const struct {
    enum op_type type;
    backend_op_fn fn;
    const char *what;
} fault_table[] = {
    {OP_SIGMOID, fault_sigmoid, "sigmoid: (1 + tanh x) / 2, the halving of x forgotten"},
    {OP_TANH, fault_tanh, "tanh: 2 sigmoid(x) - 1, the doubling of x forgotten"},
    {OP_RELU, fault_relu, "relu: a leaky ReLU (slope 0.01 below 0)"},
    {OP_ADD_BIAS, fault_add_bias, "add_bias: the bias dropped"},
    {OP_BIAS_GRAD, fault_bias_grad, "bias_grad: the mean over rows instead of the sum"},
    {OP_SIGMOID_BWD, fault_sigmoid_bwd, "sigmoid_bwd: dy y, the factor (1 - y) forgotten"},
    {OP_TANH_BWD, fault_tanh_bwd, "tanh_bwd: dy (1 - y), the square forgotten"},
    {OP_MSE, fault_mse, "mse: averaged over rows only"},
    {OP_MSE_BWD, fault_mse_bwd, "mse_bwd: the factor 2 forgotten"},
    {OP_SGD, fault_sgd, "sgd: a step up the gradient"},
    {OP_ADAM_P, fault_adam_p, "adam_p: no bias correction"},
};
#define FAULT_N (sizeof fault_table / sizeof fault_table[0])

const char *fault_formulas(void)
{
    static char text[2048];
    if (!text[0]) {
        size_t len = 0;
        for (size_t k = 0; k < FAULT_N; k++)
            len += (size_t)snprintf(text + len, sizeof text - len, "%s%s", k ? "; " : "",
                                    fault_table[k].what);
    }
    return text;
}

/* ---- output corruption ---- */

enum fault_kind { FAULT_BITFLIP, FAULT_SCALE };

struct fault {
    struct run *r;
    int node;
    enum fault_kind kind;
    size_t index;
    int bit;
    float factor;
};

static void fault_corrupt(void *arg, int i, backend_buf *out)
{
    struct fault *f = arg;
    if (i != f->node)
        return;
    struct run *r = f->r;
    const struct node *nd = &r->g.nodes[i];
    r->be->download(r->ctx, r->host, out, nd->count);
    if (f->kind == FAULT_BITFLIP) {
        uint32_t u;
        memcpy(&u, &r->host[f->index], sizeof u);
        u ^= 1u << f->bit;
        memcpy(&r->host[f->index], &u, sizeof u);
    } else {
        for (size_t k = 0; k < nd->count; k++)
            r->host[k] *= f->factor;
    }
    r->be->upload(r->ctx, out, r->host, nd->count);
}

/* One fault per process: the run's executor points at it until exit. */
static struct fault fault_active;

static int fault_number(const char *spec, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi)) {
        dt_error_set("--inject '%s': '%s' should be a number from %g to %g", spec, s, lo, hi);
        return DT_ERR;
    }
    *out = v;
    return DT_OK;
}

int fault_install(struct run *r, const char *spec)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    char *parts[4] = {NULL};
    int n = 0;
    for (char *save = NULL, *p = strtok_r(buf, ":", &save); p && n < 4; p = strtok_r(NULL, ":", &save))
        parts[n++] = p;
    if (n < 2) {
        dt_error_set("--inject '%s': expected OP:KIND, KIND bitflip, scale or formula", spec);
        return DT_ERR;
    }
    int i = graph_find(&r->g, parts[0]);
    const struct node *nd = i >= 0 ? &r->g.nodes[i] : NULL;
    if (!nd || nd->type == OP_INPUT || nd->type == OP_PARAM || nd->type == OP_STATE) {
        dt_error_set("--inject '%s': '%s' is not an op of this model (see divtrace show --ops)",
                     spec, parts[0]);
        return DT_ERR;
    }
    struct fault *f = &fault_active;
    *f = (struct fault){.r = r, .node = i, .index = 0, .bit = 22, .factor = 1.001f};
    double v;
    if (strcmp(parts[1], "bitflip") == 0) {
        f->kind = FAULT_BITFLIP;
        if (n > 2) {
            if (fault_number(spec, parts[2], 0, (double)nd->count - 1, &v) < 0)
                return DT_ERR;
            f->index = (size_t)v;
        }
        if (n > 3) {
            if (fault_number(spec, parts[3], 0, 31, &v) < 0)
                return DT_ERR;
            f->bit = (int)v;
        }
    } else if (strcmp(parts[1], "scale") == 0 && n <= 3) {
        f->kind = FAULT_SCALE;
        if (n > 2) {
            if (fault_number(spec, parts[2], -1e30, 1e30, &v) < 0)
                return DT_ERR;
            f->factor = (float)v;
        }
    } else if (strcmp(parts[1], "formula") == 0 && n == 2) {
        if (strcmp(r->be->name, "cpu") != 0) {
            dt_error_set("--inject '%s': wrong formulas exist for the cpu backend only", spec);
            return DT_ERR;
        }
        for (size_t k = 0; k < FAULT_N; k++)
            if (fault_table[k].type == nd->type) {
                r->e.override[i] = fault_table[k].fn;
                return DT_OK;
            }
        char types[256];
        size_t len = 0;
        for (size_t k = 0; k < FAULT_N; k++)
            len += (size_t)snprintf(types + len, sizeof types - len, "%s%s", k ? " " : "",
                                    op_type_name(fault_table[k].type));
        dt_error_set("--inject '%s': no wrong formula for a %s op (ops with one: %s)", spec,
                     op_type_name(nd->type), types);
        return DT_ERR;
    } else {
        dt_error_set("--inject '%s': expected OP:bitflip[:INDEX[:BIT]], OP:scale[:FACTOR] or "
                     "OP:formula", spec);
        return DT_ERR;
    }
    r->e.corrupt = fault_corrupt;
    r->e.corrupt_arg = f;
    return DT_OK;
}
