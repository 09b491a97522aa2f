/* conv_testutil.c: see conv_testutil.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "conv_testutil.h"
#include "test_util.h"

void ct_init(struct ct *t, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    graph_init(&t->g);
    t->loss = -1;
    t->rng = seed;
}

void ct_free(struct ct *t)
{
    if (t->started) {
        exec_free(&t->e);
        backend_cpu.free(t->ctx);
    }
    for (int k = 0; k < t->nleaf; k++)
        free(t->val[k]);
    graph_free(&t->g);
}

/* n values: uniform in [-1, 1], or when `integer`, integers in [-4, 4]. */
void ct_fill(struct ct *t, float *v, size_t n, int integer)
{
    for (size_t j = 0; j < n; j++)
        v[j] = integer ? (float)((int)(tu_rand_u64(&t->rng) % 9) - 4)
                       : (float)tu_rand_uniform(&t->rng, -1, 1);
}

/* A leaf (a parameter when `param`, which gets a gradient) with the values v,
 * or random ones (ct_fill) when v is NULL. */
int ct_leaf(struct ct *t, int param, const char *name, int ndim, const uint32_t *shape, const float *v,
            int integer)
{
    assert_true(t->nleaf < CT_MAX_LEAVES);
    uint32_t dims[TRACE_MAX_DIM];
    memcpy(dims, shape, (size_t)ndim * sizeof *dims);
    int i = param ? graph_param(&t->g, name, ndim, dims) : graph_input(&t->g, name, ndim, dims);
    size_t n = t->g.nodes[i].count;
    float *buf = malloc(n * sizeof *buf);
    assert_non_null(buf);
    if (v)
        memcpy(buf, v, n * sizeof *buf);
    else
        ct_fill(t, buf, n, integer);
    t->leaf[t->nleaf] = i;
    t->val[t->nleaf++] = buf;
    return i;
}

int ct_leaf4(struct ct *t, int param, const char *name, uint32_t n, uint32_t c, uint32_t h, uint32_t w,
             const float *v, int integer)
{
    uint32_t shape[4] = {n, c, h, w};
    return ct_leaf(t, param, name, 4, shape, v, integer);
}

const float *ct_val(const struct ct *t, int node)
{
    for (int k = 0; k < t->nleaf; k++)
        if (t->leaf[k] == node)
            return t->val[k];
    fail_msg("node %d is not a leaf", node);
    return NULL;
}

/* Make d loss / d y the values of a new input "<y>.dy" (v, or random):
 * loss += count(y) * mean(y * dy), whose backward pass gives y the gradient
 * 1 * dy, that is dy bit for bit. Returns the dy leaf. */
int ct_inject(struct ct *t, int y, const float *v, int integer)
{
    char name[160];
    struct node Y = t->g.nodes[y];
    snprintf(name, sizeof name, "%s.dy", Y.name);
    int d = ct_leaf(t, 0, name, Y.ndim, Y.shape, v, integer);
    snprintf(name, sizeof name, "%s.prod", Y.name);
    int m = graph_mul(&t->g, name, y, d);
    snprintf(name, sizeof name, "%s.loss", Y.name);
    int l = graph_mean(&t->g, name, m, (float)Y.count);
    if (t->loss < 0) {
        t->loss = l;
    } else {
        snprintf(name, sizeof name, "loss+%s", Y.name);
        t->loss = graph_add(&t->g, name, t->loss, l);
    }
    return d;
}

/* Append the backward pass (if anything was injected) and run one step. */
void ct_run(struct ct *t)
{
    if (t->loss >= 0)
        graph_backward(&t->g, t->loss);
    struct backend_options bo = {.threads = 1};
    assert_int_equal(backend_cpu.init(&t->ctx, &bo), 0);
    assert_int_equal(exec_init(&t->e, &t->g, &backend_cpu, t->ctx), 0);
    t->started = 1;
    for (int k = 0; k < t->nleaf; k++)
        exec_set(&t->e, t->leaf[k], t->val[k]);
    exec_step(&t->e, 0);
}

/* Node i's values (malloc'd). */
float *ct_get(struct ct *t, int i)
{
    float *v = malloc(t->g.nodes[i].count * sizeof *v);
    assert_non_null(v);
    exec_get(&t->e, i, v);
    return v;
}

/* The gradient node of i, which must be an op of type `type`. */
int ct_grad(const struct ct *t, int i, enum op_type type)
{
    int gi = graph_grad_of(&t->g, i);
    if (gi < 0)
        fail_msg("%s has no gradient node", t->g.nodes[i].name);
    if (t->g.nodes[gi].type != type)
        fail_msg("gradient %s of %s is a %s, not a %s", t->g.nodes[gi].name, t->g.nodes[i].name,
                 op_type_name(t->g.nodes[gi].type), op_type_name(type));
    return gi;
}

/* got and want bit for bit, n elements. */
void ct_expect_bits(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t j = 0; j < n; j++)
        if (tu_float_bits(got[j]) != tu_float_bits(want[j]))
            fail_msg("%s[%zu] = %.9g (0x%08x), want %.9g (0x%08x)", what, j, (double)got[j],
                     tu_float_bits(got[j]), (double)want[j], tu_float_bits(want[j]));
}
