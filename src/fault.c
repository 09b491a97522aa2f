/* fault.c: faults injected on purpose (see fault.h). The wrong formulas are
 * the kind of slip a framework's second code path can carry: each one is
 * close to right on some inputs and wrong by far more than rounding on
 * others, which is what replay has to tell apart. */
#include "fault.h"

#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "variant.h"

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
    /* the mean over rows (or over n, h, w of an image) where the sum is the gradient */
    const struct node *dy = &g->nodes[nd->inputs[0]];
    size_t rows = dy->shape[0], f = nd->shape[0];
    size_t hw = dy->ndim == 4 ? (size_t)dy->shape[2] * dy->shape[3] : 1;
    memset(OUT, 0, f * sizeof(float));
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < f; j++)
            for (size_t q = 0; q < hw; q++)
                OUT[j] += IN(0)[(r * f + j) * hw + q];
    for (size_t j = 0; j < f; j++)
        OUT[j] /= (float)(rows * hw);
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

/* ---- PredNet's ops ---- */

FAULT_OP(fault_hard_sigmoid)
{
    /* PyTorch's hardsigmoid, x / 6 + 1/2, where Keras's 0.2 x + 0.5 was meant */
    for (size_t i = 0; i < nd->count; i++) {
        float t = IN(0)[i] / 6.0f + 0.5f;
        OUT[i] = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
    }
}

FAULT_OP(fault_hard_sigmoid_bwd)
{
    /* the logistic sigmoid's derivative, dy y (1 - y), for the hard one's */
    for (size_t i = 0; i < nd->count; i++) {
        float t = 0.2f * IN(0)[i];
        t = t + 0.5f;
        float y = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
        OUT[i] = IN(1)[i] * y * (1.0f - y);
    }
}

FAULT_OP(fault_maxpool2_bwd)
{
    /* the gradient to the last maximum of each window, not the first */
    const struct node *x = &g->nodes[nd->inputs[0]];
    size_t planes = (size_t)x->shape[0] * x->shape[1], h = x->shape[2], w = x->shape[3];
    memset(OUT, 0, nd->count * sizeof(float));
    for (size_t pl = 0; pl < planes; pl++)
        for (size_t y = 0; y < h / 2; y++)
            for (size_t xx = 0; xx < w / 2; xx++) {
                const float *in = IN(0) + pl * h * w;
                size_t best = (2 * y) * w + 2 * xx;
                size_t win[4] = {best, best + 1, best + w, best + w + 1};
                for (int k = 1; k < 4; k++)
                    if (in[win[k]] >= in[best])
                        best = win[k];
                OUT[pl * h * w + best] = IN(1)[pl * (h / 2) * (w / 2) + y * (w / 2) + xx];
            }
}

FAULT_OP(fault_upsample2_bwd)
{
    /* the mean of the four gradients where their sum is meant */
    const struct node *dy = &g->nodes[nd->inputs[0]];
    size_t planes = (size_t)nd->shape[0] * nd->shape[1], h = nd->shape[2], w = nd->shape[3];
    size_t w2 = dy->shape[3];
    for (size_t pl = 0; pl < planes; pl++)
        for (size_t y = 0; y < h; y++)
            for (size_t xx = 0; xx < w; xx++) {
                const float *d = IN(0) + pl * 4 * h * w + (2 * y) * w2 + 2 * xx;
                OUT[pl * h * w + y * w + xx] = (((d[0] + d[1]) + d[w2]) + d[w2 + 1]) / 4.0f;
            }
}

FAULT_OP(fault_conv2d)
{
    /* the kernel flipped: a true convolution where Keras and cuDNN
     * compute a cross-correlation (direct loops, double accumulation) */
    const struct node *x = &g->nodes[nd->inputs[0]], *wt = &g->nodes[nd->inputs[1]];
    size_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    size_t k = wt->shape[0], r = wt->shape[2], s = wt->shape[3];
    for (size_t b = 0; b < n; b++)
        for (size_t ko = 0; ko < k; ko++)
            for (size_t y = 0; y < h; y++)
                for (size_t xx = 0; xx < w; xx++) {
                    double acc = 0;
                    for (size_t ci = 0; ci < c; ci++)
                        for (size_t i = 0; i < r; i++)
                            for (size_t j = 0; j < s; j++) {
                                long yy = (long)y + (long)i - (long)(r / 2);
                                long xq = (long)xx + (long)j - (long)(s / 2);
                                if (yy < 0 || yy >= (long)h || xq < 0 || xq >= (long)w)
                                    continue;
                                acc += (double)IN(0)[((b * c + ci) * h + (size_t)yy) * w + (size_t)xq] *
                                       IN(1)[((ko * c + ci) * r + (r - 1 - i)) * s + (s - 1 - j)];
                            }
                    OUT[((b * k + ko) * h + y) * w + xx] = (float)acc;
                }
}

FAULT_OP(fault_conv2d_bwd_filter)
{
    /* the filter gradient of the batch's first sequence only */
    const struct node *x = &g->nodes[nd->inputs[0]];
    size_t c = x->shape[1], h = x->shape[2], w = x->shape[3];
    size_t k = nd->shape[0], r = nd->shape[2], s = nd->shape[3];
    for (size_t ko = 0; ko < k; ko++)
        for (size_t ci = 0; ci < c; ci++)
            for (size_t i = 0; i < r; i++)
                for (size_t j = 0; j < s; j++) {
                    double acc = 0;
                    for (size_t y = 0; y < h; y++)
                        for (size_t xx = 0; xx < w; xx++) {
                            long yy = (long)y + (long)i - (long)(r / 2);
                            long xq = (long)xx + (long)j - (long)(s / 2);
                            if (yy < 0 || yy >= (long)h || xq < 0 || xq >= (long)w)
                                continue;
                            acc += (double)IN(1)[(ko * h + y) * w + xx] *
                                   IN(0)[(ci * h + (size_t)yy) * w + (size_t)xq];
                        }
                    OUT[((ko * c + ci) * r + i) * s + j] = (float)acc;
                }
}

FAULT_OP(fault_concat)
{
    /* the inputs stacked in reverse order */
    size_t n = nd->shape[0], plane = (size_t)nd->shape[2] * nd->shape[3], off = 0;
    for (size_t b = 0; b < n; b++)
        for (int k = nd->ninputs - 1; k >= 0; k--) {
            size_t ck = g->nodes[nd->inputs[k]].shape[1] * plane;
            memcpy(OUT + off, IN(k) + b * ck, ck * sizeof(float));
            off += ck;
        }
}

FAULT_OP(fault_mean)
{
    /* the sum divided by the batch size only, not by every element */
    const struct node *x = &g->nodes[nd->inputs[0]];
    double s = 0;
    for (size_t i = 0; i < x->count; i++)
        s += IN(0)[i];
    OUT[0] = (float)((double)nd->p.mean.scale * (s / (double)x->shape[0]));
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
    {OP_HARD_SIGMOID, fault_hard_sigmoid, "hard_sigmoid: x/6 + 1/2 (PyTorch's) for Keras's 0.2 x + 0.5"},
    {OP_HARD_SIGMOID_BWD, fault_hard_sigmoid_bwd, "hard_sigmoid_bwd: dy y (1 - y), the logistic sigmoid's derivative"},
    {OP_MAXPOOL2_BWD, fault_maxpool2_bwd, "maxpool2_bwd: to the last maximum of a window"},
    {OP_UPSAMPLE2_BWD, fault_upsample2_bwd, "upsample2_bwd: the mean of the four, not the sum"},
    {OP_CONV2D, fault_conv2d, "conv2d: the kernel flipped (convolution, not cross-correlation)"},
    {OP_CONV2D_BWD_FILTER, fault_conv2d_bwd_filter, "conv2d_bwd_filter: the first sequence of the batch only"},
    {OP_CONCAT, fault_concat, "concat: the inputs in reverse order"},
    {OP_MEAN, fault_mean, "mean: divided by the batch size only"},
};
#define FAULT_N (sizeof fault_table / sizeof fault_table[0])

const char *fault_formulas(void)
{
    static char text[4096];
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
/* The backend the spec being installed is for: its @BACKEND, else the run's. */
static const char *fault_be;

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

/* The wrong formula for op type t, or NULL. */
static backend_op_fn fault_formula_for(enum op_type t)
{
    for (size_t k = 0; k < FAULT_N; k++)
        if (fault_table[k].type == t)
            return fault_table[k].fn;
    return NULL;
}

/* A pattern (fnmatch(3) syntax) in place of the op name: a systematic bug,
 * the same wrong formula in every op it matches (e.g. every gate of a
 * recurrent cell at every time step, as a framework's code path would
 * have it). Only formula faults take a pattern. */
static int fault_install_glob(struct run *r, const char *spec, const char *pattern,
                              const char *kind, int nparts)
{
    int variant = strcmp(kind, "variant") == 0;
    if ((strcmp(kind, "formula") != 0 && !variant) || nparts != 2) {
        dt_error_set("--inject '%s': a pattern of op names takes KIND formula or variant only", spec);
        return DT_ERR;
    }
    if (strcmp(fault_be, "cpu") != 0) {
        dt_error_set("--inject '%s': %s exist for the cpu backend only", spec,
                     variant ? "rewrites" : "wrong formulas");
        return DT_ERR;
    }
    int matched = 0;
    for (int i = 0; i < r->g.n; i++) {
        const struct node *nd = &r->g.nodes[i];
        if (nd->type == OP_INPUT || nd->type == OP_PARAM || nd->type == OP_STATE ||
            fnmatch(pattern, nd->name, 0) != 0)
            continue;
        backend_op_fn fn = variant ? variant_formula_for(nd->type) : fault_formula_for(nd->type);
        if (!fn) {
            dt_error_set("--inject '%s': '%s' matches %s, a %s op, which has no %s", spec, pattern,
                         nd->name, op_type_name(nd->type), variant ? "rewrite" : "wrong formula");
            return DT_ERR;
        }
        r->e.override[i] = fn;
        matched++;
    }
    if (!matched) {
        dt_error_set("--inject '%s': '%s' matches no op of this model (see divtrace show --ops)",
                     spec, pattern);
        return DT_ERR;
    }
    return DT_OK;
}

/* The backend named by spec's "@NAME" ending, or NULL; an '@' followed by
 * anything but letters and digits is part of an op's name (a variant's
 * "W.grad@L0.t03.conv_c"). -1 with dt_error set for an unknown backend. */
static int fault_restriction(const char *spec, const char **out)
{
    static const char *const names[] = {"cpu", "mpfr", "cuda", "cudnn"};
    const char *at = strrchr(spec, '@');
    *out = NULL;
    if (!at || !at[1] || at[1 + strspn(at + 1, "abcdefghijklmnopqrstuvwxyz0123456789")])
        return DT_OK;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (strcmp(at + 1, names[k]) == 0) {
            *out = names[k];
            return DT_OK;
        }
    dt_error_set("--inject '%s': unknown backend '%s' after '@' (cpu, mpfr, cuda or cudnn)", spec,
                 at + 1);
    return DT_ERR;
}

int fault_planted(const char *spec, const char *backend)
{
    const char *only;
    if (fault_restriction(spec, &only) < 0)
        return DT_ERR;
    return !only || strcmp(only, backend) == 0;
}

static int fault_install_spec(struct run *r, const char *spec, char *buf);

int fault_install(struct run *r, const char *spec)
{
    char buf[256];
    const char *only;
    if (fault_restriction(spec, &only) < 0)
        return DT_ERR;
    snprintf(buf, sizeof buf, "%s", spec);
    if (only)
        *strrchr(buf, '@') = '\0';
    fault_be = only ? only : r->be->name;
    if (!only || strcmp(only, r->be->name) == 0)
        return fault_install_spec(r, spec, buf);
    /* Another backend's fault: checked against this model as if planted,
     * then taken out again, so the run is the clean one. */
    struct exec saved = r->e;
    size_t bytes = (size_t)r->g.n * sizeof *r->g.nodes;
    struct node *nodes = dt_malloc(bytes);
    backend_op_fn *override = dt_malloc((size_t)r->g.n * sizeof *override);
    memcpy(nodes, r->g.nodes, bytes);
    memcpy(override, r->e.override, (size_t)r->g.n * sizeof *override);
    int rc = fault_install_spec(r, spec, buf);
    memcpy(r->g.nodes, nodes, bytes);
    memcpy(r->e.override, override, (size_t)r->g.n * sizeof *override);
    r->e.corrupt = saved.corrupt;
    r->e.corrupt_arg = saved.corrupt_arg;
    fault_state_forget(r);
    free(nodes);
    free(override);
    return rc;
}

/* Install spec, whose fields (its @BACKEND cut off) are in buf. */
static int fault_install_spec(struct run *r, const char *spec, char *buf)
{
    char *parts[4] = {NULL};
    int n = 0;
    for (char *save = NULL, *p = strtok_r(buf, ":", &save); p && n < 4; p = strtok_r(NULL, ":", &save))
        parts[n++] = p;
    if (n < 2) {
        dt_error_set("--inject '%s': expected OP:KIND, KIND bitflip, scale, formula, rewire, "
                     "roundtrip, drop, stale or carry", spec);
        return DT_ERR;
    }
    if (strcmp(parts[1], "roundtrip") == 0 || strcmp(parts[1], "stale") == 0 ||
        strcmp(parts[1], "carry") == 0 || strcmp(parts[1], "drop") == 0) {
        if (n > 3) {
            dt_error_set("--inject '%s': too many fields", spec);
            return DT_ERR;
        }
        return fault_state_install(r, spec, parts[0], parts[1], n > 2 ? parts[2] : NULL);
    }
    if (strcmp(parts[1], "rewire") == 0) {
        if (strcmp(fault_be, "cpu") != 0) {
            dt_error_set("--inject '%s': rewiring exists for the cpu backend only", spec);
            return DT_ERR;
        }
        return fault_rewire(r, spec, parts[0], parts[2], parts[3]);
    }
    if (strpbrk(parts[0], "*?["))
        return fault_install_glob(r, spec, parts[0], n > 1 ? parts[1] : "", n);
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
    } else if (strcmp(parts[1], "variant") == 0 && n == 2) {
        /* a valid float32 rewrite: a finding only if the bounds are wrong */
        backend_op_fn fn = variant_formula_for(nd->type);
        if (strcmp(fault_be, "cpu") != 0 || !fn) {
            dt_error_set("--inject '%s': %s", spec, strcmp(fault_be, "cpu") != 0
                         ? "rewrites exist for the cpu backend only"
                         : "no rewrite for this op's type (see divtrace record --help)");
            return DT_ERR;
        }
        r->e.override[i] = fn;
        return DT_OK;
    } else if (strcmp(parts[1], "formula") == 0 && n == 2) {
        if (strcmp(fault_be, "cpu") != 0) {
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
        dt_error_set("--inject '%s': expected OP:bitflip[:INDEX[:BIT]], OP:scale[:FACTOR], "
                     "OP:formula, OP:rewire:INPUT:TENSOR, TENSOR:roundtrip:bf16|half|trunc, "
                     "TENSOR:drop, TENSOR:stale or STATE:carry, each with an optional @BACKEND",
                     spec);
        return DT_ERR;
    }
    r->e.corrupt = fault_corrupt;
    r->e.corrupt_arg = f;
    return DT_OK;
}
