/* exec.c: the executor (see exec.h). */
#include "exec.h"

#include <stdlib.h>

#include "util.h"

#ifdef DT_PROFILE_OPS
/* A measurement build (-DDT_PROFILE_OPS) sums each node's kernel time and
 * the hooks' over the steps of one exec, and exec_free prints the sums by
 * op type and the 40 costliest nodes (every node with DT_PROFILE_OPS_ALL
 * set) on stderr, in ms a step. */
#include <stdio.h>
#include <string.h>
static double *prof_t, prof_hook;
static int prof_n;
static uint64_t prof_steps;

static int prof_cmp(const void *a, const void *b)
{
    double x = prof_t[*(const int *)a], y = prof_t[*(const int *)b];
    return (x < y) - (x > y);
}

static void prof_print(const struct graph *g)
{
    if (!prof_t || !prof_steps || prof_n != g->n)
        return;
    double type[OP_COUNT] = {0}, all = 0, k = 1e3 / (double)prof_steps;
    int cnt[OP_COUNT] = {0};
    for (int i = 0; i < g->n; i++) {
        type[g->nodes[i].type] += prof_t[i];
        cnt[g->nodes[i].type]++;
        all += prof_t[i];
    }
    fprintf(stderr, "profile-ops %d nodes, %llu steps: ops %.3f ms/step, hooks %.3f\n", g->n,
            (unsigned long long)prof_steps, all * k, prof_hook * k);
    for (int t = 0; t < OP_COUNT; t++)
        if (type[t] > 0)
            fprintf(stderr, "profile-ops type %-22s %5d nodes %9.3f ms/step %5.1f%%\n", op_type_name((enum op_type)t),
                    cnt[t], type[t] * k, 100 * type[t] / all);
    int *ord = dt_calloc((size_t)g->n, sizeof *ord);
    for (int i = 0; i < g->n; i++)
        ord[i] = i;
    qsort(ord, (size_t)g->n, sizeof *ord, prof_cmp);
    int show = getenv("DT_PROFILE_OPS_ALL") ? g->n : 40; /* every node, or the costliest */
    for (int j = 0; j < show && j < g->n; j++)
        fprintf(stderr, "profile-ops node %-40s %-20s %8.3f ms/step %zu\n", g->nodes[ord[j]].name,
                op_type_name(g->nodes[ord[j]].type), prof_t[ord[j]] * k, g->nodes[ord[j]].count);
    free(ord);
}
#endif

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
#ifdef DT_PROFILE_OPS
    prof_print(e->g);
    free(prof_t);
    prof_t = NULL;
    prof_steps = 0;
    prof_hook = 0;
#endif
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
#ifdef DT_PROFILE_OPS
    if (!prof_t || prof_n != e->g->n) {
        free(prof_t);
        prof_t = dt_calloc((size_t)e->g->n, sizeof *prof_t);
        prof_n = e->g->n;
        prof_steps = 0;
        prof_hook = 0;
    }
    prof_steps++;
#endif
    for (int i = 0; i < e->g->n; i++) {
        const struct node *nd = &e->g->nodes[i];
        if (nd->type != OP_INPUT && nd->type != OP_PARAM && nd->type != OP_STATE) {
            for (int k = 0; k < nd->ninputs; k++)
                in[k] = e->buf[nd->inputs[k]];
            backend_op_fn fn = e->override[i] ? e->override[i] : e->be->op[nd->type];
            if (e->be->op_enter)
                e->be->op_enter(e->ctx, e->g, i);
#ifdef DT_PROFILE_OPS
            double t0 = dt_now();
#endif
            fn(e->ctx, e->g, nd, e->buf[i], in, &st);
#ifdef DT_PROFILE_OPS
            prof_t[i] += dt_now() - t0;
#endif
            if (e->be->op_leave)
                e->be->op_leave(e->ctx, e->g, i);
            if (e->corrupt)
                e->corrupt(e->corrupt_arg, i, e->buf[i]);
        }
#ifdef DT_PROFILE_OPS
        double th = dt_now();
#endif
        if (e->hook)
            e->hook(e->hook_arg, i, e->buf[i]);
#ifdef DT_PROFILE_OPS
        prof_hook += dt_now() - th;
#endif
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
