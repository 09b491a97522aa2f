/* exec.c: the executor (see exec.h). */
#include "exec.h"

#include <stdlib.h>

#include "util.h"

/* Node i's storage could not be had: say how much the step needs, release
 * what was allocated, and fail. */
static int exec_oom(struct exec *e, int i, const char *what)
{
    double total = 0;
    for (int k = 0; k < e->g->n; k++)
        total += (double)e->g->nodes[k].count * sizeof(float);
    dt_error_set("out of memory: the %s backend could not allocate %s%s (%zu floats, %.3g GB); the "
                 "step's tensors take %.3g GB%s", e->be->name, what, e->g->nodes[i].name,
                 e->g->nodes[i].count, (double)e->g->nodes[i].count * sizeof(float) / 1e9, total / 1e9,
                 e->alt ? ", twice over for overlapped tracing" : "");
    exec_free(e);
    return DT_ERR;
}

int exec_init(struct exec *e, struct graph *g, const struct backend_ops *be, void *ctx)
{
    for (int i = 0; i < g->n; i++) {
        enum op_type t = g->nodes[i].type;
        if (t != OP_INPUT && t != OP_PARAM && t != OP_STATE && !be->op[t]) {
            dt_error_set("backend %s has no kernel for op %s (%s)", be->name,
                         g->nodes[i].name, op_type_name(t));
            return DT_ERR;
        }
    }
    e->g = g;
    e->be = be;
    e->ctx = ctx;
    e->hook = NULL;
    e->hook_arg = NULL;
    e->corrupt = NULL;
    e->corrupt_arg = NULL;
    e->before_end = NULL;
    e->before_end_arg = NULL;
    e->advances = 0;
    e->override = dt_calloc((size_t)g->n, sizeof *e->override);
    e->alt = NULL;
    e->buf = dt_calloc((size_t)g->n, sizeof *e->buf);
    for (int i = 0; i < g->n; i++)
        if (!(e->buf[i] = be->alloc(ctx, g->nodes[i].count)))
            return exec_oom(e, i, "");
    if (be->prepare && be->prepare(ctx, g) < 0)
        return DT_ERR;
    return DT_OK;
}

void exec_free(struct exec *e)
{
    if (!e->buf)
        return;
    for (int i = 0; i < e->g->n; i++) {
        if (e->buf[i]) /* NULL past an allocation that failed */
            e->be->release(e->ctx, e->buf[i]);
        if (e->alt && e->alt[i])
            e->be->release(e->ctx, e->alt[i]);
    }
    free(e->buf);
    free(e->alt);
    e->alt = NULL;
    free(e->override);
    e->buf = NULL;
    e->override = NULL;
}

void exec_set(struct exec *e, int i, const float *host)
{
    e->be->upload(e->ctx, e->buf[i], host, e->g->nodes[i].count);
}

void exec_set_async(struct exec *e, int i, const float *host)
{
    if (e->be->upload_async)
        e->be->upload_async(e->ctx, e->buf[i], host, e->g->nodes[i].count);
    else
        e->be->upload(e->ctx, e->buf[i], host, e->g->nodes[i].count);
}

int exec_get_async(struct exec *e, int i, float *host)
{
    if (e->be->download_async && e->be->sync) {
        e->be->download_async(e->ctx, host, e->buf[i], e->g->nodes[i].count);
        return 1;
    }
    e->be->download(e->ctx, host, e->buf[i], e->g->nodes[i].count);
    return 0;
}

void exec_get(struct exec *e, int i, float *host)
{
    e->be->download(e->ctx, host, e->buf[i], e->g->nodes[i].count);
}

/* Whether the backend may run the step as a unit (a CUDA graph): not when
 * a fault replaces a kernel or changes an output between ops. */
static int exec_whole_step(const struct exec *e)
{
    if (!e->be->step_begin || e->corrupt)
        return 0;
    for (int i = 0; i < e->g->n; i++)
        if (e->override[i])
            return 0;
    return 1;
}

void exec_step(struct exec *e, uint64_t step)
{
    struct backend_step st = {.step = step, .bufs = e->buf};
    const backend_buf *in[OP_MAX_INPUTS];
    int whole = exec_whole_step(e), arr = (int)(e->advances & 1);
    if (whole && e->be->step_begin(e->ctx, step, arr)) {
        if (e->hook)
            for (int i = 0; i < e->g->n; i++)
                e->hook(e->hook_arg, i, e->buf[i]);
        if (e->before_end)
            e->before_end(e->before_end_arg);
        e->be->step_end(e->ctx, step, arr);
        return;
    }
    for (int i = 0; i < e->g->n; i++) {
        const struct node *nd = &e->g->nodes[i];
        if (nd->type != OP_INPUT && nd->type != OP_PARAM && nd->type != OP_STATE) {
            for (int k = 0; k < nd->ninputs; k++)
                in[k] = e->buf[nd->inputs[k]];
            backend_op_fn fn = e->override[i] ? e->override[i] : e->be->op[nd->type];
            if (e->be->op_enter)
                e->be->op_enter(e->ctx, e->g, i);
            fn(e->ctx, e->g, nd, e->buf[i], in, &st);
            if (e->be->op_leave)
                e->be->op_leave(e->ctx, e->g, i);
            if (e->corrupt)
                e->corrupt(e->corrupt_arg, i, e->buf[i]);
        }
        if (e->hook)
            e->hook(e->hook_arg, i, e->buf[i]);
    }
    if (whole) {
        if (e->before_end)
            e->before_end(e->before_end_arg);
        e->be->step_end(e->ctx, step, arr);
    }
}

void exec_advance(struct exec *e)
{
    /* Swap, not copy: the update's old buffer is overwritten next step. */
    for (int i = 0; i < e->g->n; i++) {
        int nx = e->g->nodes[i].next;
        if (nx >= 0) {
            backend_buf *t = e->buf[i];
            e->buf[i] = e->buf[nx];
            e->buf[nx] = t;
        }
        if (e->alt && e->alt[i]) {
            backend_buf *t = e->buf[i];
            e->buf[i] = e->alt[i];
            e->alt[i] = t;
        }
    }
    e->advances++;
}

int exec_double(struct exec *e)
{
    if (e->alt)
        return DT_OK;
    int n = e->g->n;
    char *paired = dt_calloc((size_t)n, 1);
    for (int i = 0; i < n; i++)
        if (e->g->nodes[i].next >= 0)
            paired[i] = paired[e->g->nodes[i].next] = 1;
    e->alt = dt_calloc((size_t)n, sizeof *e->alt);
    for (int i = 0; i < n; i++) {
        enum op_type t = e->g->nodes[i].type;
        /* leaves that no update replaces keep one buffer: no step writes them */
        if (!paired[i] && t != OP_PARAM && t != OP_STATE &&
            !(e->alt[i] = e->be->alloc(e->ctx, e->g->nodes[i].count))) {
            free(paired);
            return exec_oom(e, i, "a second copy of ");
        }
    }
    free(paired);
    return DT_OK;
}
