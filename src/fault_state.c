/* fault_state.c: faults of state rather than of an op's formula, planted on
 * purpose to check that divtrace finds them: a lossy round trip of
 * parameters or optimizer state between steps, or one that drops them (the
 * class of the retracted 2021 paper's bug: one code path copied the model,
 * and with it the recurrent state, to the host and back after each update),
 * the same of prednet's recurrent state as one time step hands it to the
 * next, updates that never reach the tensor the model reads,
 * recurrent state carried from one sequence into the next where it should
 * start at zero, and an op wired to the wrong input (see fault.h). */
#include "fault.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "util.h"

enum fault_state_kind {
    FAULT_RT_BF16,  /* round to nearest bfloat16, ties to even, and back */
    FAULT_RT_HALF,  /* the same through IEEE binary16 */
    FAULT_RT_TRUNC, /* a truncating copy: the low 16 bits dropped (bfloat16 by truncation) */
    FAULT_DROP,     /* a copy that loses the tensor: zeros come back */
    FAULT_STALE,    /* the model keeps reading its copy from before the first update */
    FAULT_CARRY,    /* an initial state takes the last sequence's final state */
};

struct fault_state {
    struct run *r;
    enum fault_state_kind kind;
    int n;
    int *node;      /* the leaves and recurrent states (round trips, drop), the
                     * leaves (stale) or the initial states (carry) */
    int *state;     /* round trips, drop: node[k] is a recurrent state, changed as
                     * its op runs, not between steps */
    int nleaves;    /* nodes that are leaves, changed between steps */
    int *src;       /* carry: the node whose output each initial state takes */
    float **saved;  /* stale: each leaf as first seen; carry: each source's last output */
    int *have;
    int calls;      /* fault_between calls so far */
};

/* One run and, with the mpfr self-check, its twin. */
static struct fault_state fault_states[2];

static struct fault_state *fault_state_of(const struct run *r)
{
    for (int k = 0; k < 2; k++)
        if (fault_states[k].r == r)
            return &fault_states[k];
    return NULL;
}

static float fault_bf16(float x, int truncate)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (isnan(x))
        u = (u | 0x00400000u) & 0xffff0000u; /* stays a NaN, quiet */
    else if (truncate)
        u &= 0xffff0000u;
    else
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u; /* overflows to Inf as it should */
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Nearest binary16 value, ties to even, subnormals and overflow included
 * (rintf rounds ties to even in the default rounding mode). */
static float fault_half(float x)
{
    if (!isfinite(x))
        return x;
    float a = fabsf(x);
    if (a >= 65520.0f) /* halfway from 65504 (odd) to 65536: to even, which overflows */
        return copysignf(INFINITY, x);
    if (a < 0x1p-14f) /* subnormal halves are multiples of 2^-24 */
        return copysignf(rintf(a * 0x1p24f) * 0x1p-24f, x);
    int e;
    frexpf(a, &e); /* a in [2^(e-1), 2^e): 11 significant bits, spacing 2^(e-11) */
    return copysignf(ldexpf(rintf(ldexpf(a, 11 - e)), e - 11), x);
}

/* What comes back from the round trip of n values x. */
static void fault_round_trip(enum fault_state_kind kind, float *x, size_t n)
{
    for (size_t k = 0; k < n; k++)
        x[k] = kind == FAULT_DROP      ? 0.0f
             : kind == FAULT_RT_HALF ? fault_half(x[k])
                                     : fault_bf16(x[k], kind == FAULT_RT_TRUNC);
}

/* Round trips and drop of a recurrent state: after its op ran, before the
 * next time step (or anything else) reads it. */
static void fault_state_corrupt(void *arg, int i, backend_buf *out)
{
    struct fault_state *f = arg;
    struct run *r = f->r;
    for (int k = 0; k < f->n; k++)
        if (f->node[k] == i && f->state[k]) {
            size_t n = r->g.nodes[i].count;
            r->be->download(r->ctx, r->host, out, n);
            fault_round_trip(f->kind, r->host, n);
            r->be->upload(r->ctx, out, r->host, n);
        }
}

/* Whether a node is a recurrent state one time step hands to the next:
 * prednet's L<l>.t<k>.r, .c or .e. */
static int fault_is_recurrent(const char *name)
{
    int l, t, end = 0;
    char what[2];
    return sscanf(name, "L%d.t%d.%1[rce]%n", &l, &t, what, &end) == 3 && name[end] == '\0';
}

int fault_between(struct run *r, uint64_t step)
{
    (void)step;
    struct fault_state *f = fault_state_of(r);
    if (!f || f->kind == FAULT_CARRY || f->nleaves == 0)
        return 0;
    int first = f->calls++ == 0;
    if (first && f->kind != FAULT_STALE)
        return 0; /* the round trip follows an update: none came before the first step */
    tracer_flush(r->tr); /* the last step's records may still read the leaves */
    for (int k = 0; k < f->n; k++) {
        int i = f->node[k];
        if (f->state[k]) {
            continue;
        } else if (f->kind != FAULT_STALE) {
            exec_get(&r->e, i, r->host);
            fault_round_trip(f->kind, r->host, r->g.nodes[i].count);
            exec_set(&r->e, i, r->host);
        } else if (first) {
            /* the model's copy: what the leaf holds when the run (or the
             * replay) starts, which under this fault never changes */
            f->saved[k] = dt_malloc(r->g.nodes[i].count * sizeof *f->saved[k]);
            exec_get(&r->e, i, f->saved[k]);
        } else {
            exec_set(&r->e, i, f->saved[k]);
        }
    }
    return 1;
}

/* carry: after a source op ran, keep its output; after an initial state's
 * fill ran, give it the kept output of the last step. */
static void fault_carry_corrupt(void *arg, int i, backend_buf *out)
{
    struct fault_state *f = arg;
    struct run *r = f->r;
    for (int k = 0; k < f->n; k++) {
        size_t n = r->g.nodes[f->node[k]].count;
        if (i == f->src[k]) {
            r->be->download(r->ctx, f->saved[k], out, n);
            f->have[k] = 1;
        } else if (i == f->node[k] && f->have[k]) {
            r->be->upload(r->ctx, out, f->saved[k], n);
        }
    }
}

/* The node that holds state `what` (r, c or e) of layer l at the last time
 * step, given the initial state's name "L<l>.init.<what>". */
static int fault_carry_source(const struct run *r, const char *init)
{
    int l;
    char what[8];
    if (sscanf(init, "L%d.init.%7s", &l, what) != 2)
        return -1;
    char t[16], name[96];
    prednet_tname(&r->tc->model, r->tc->model.nt - 1, t, sizeof t);
    snprintf(name, sizeof name, "L%d.%s.%s", l, t, what);
    return graph_find(&r->g, name);
}

static int fault_state_parse(const char *spec, const char *kind, const char *arg,
                             enum fault_state_kind *out)
{
    if (strcmp(kind, "roundtrip") == 0) {
        if (arg && strcmp(arg, "bf16") == 0)
            *out = FAULT_RT_BF16;
        else if (arg && strcmp(arg, "half") == 0)
            *out = FAULT_RT_HALF;
        else if (arg && strcmp(arg, "trunc") == 0)
            *out = FAULT_RT_TRUNC;
        else {
            dt_error_set("--inject '%s': expected TENSOR:roundtrip:bf16, :half or :trunc", spec);
            return DT_ERR;
        }
        return DT_OK;
    }
    if (arg) {
        dt_error_set("--inject '%s': %s takes no argument", spec, kind);
        return DT_ERR;
    }
    *out = strcmp(kind, "stale") == 0 ? FAULT_STALE
         : strcmp(kind, "drop") == 0  ? FAULT_DROP
                                      : FAULT_CARRY;
    return DT_OK;
}

int fault_state_install(struct run *r, const char *spec, const char *pattern, const char *kind,
                        const char *arg)
{
    enum fault_state_kind fk;
    if (fault_state_parse(spec, kind, arg, &fk) < 0)
        return DT_ERR;
    struct fault_state *f = fault_state_of(r);
    for (int k = 0; !f && k < 2; k++)
        if (!fault_states[k].r)
            f = &fault_states[k];
    DT_ASSERT(f, "more than two runs with a state fault");
    memset(f, 0, sizeof *f);
    f->r = r;
    f->kind = fk;
    f->node = dt_calloc((size_t)r->g.n, sizeof *f->node);
    f->state = dt_calloc((size_t)r->g.n, sizeof *f->state);
    f->src = dt_calloc((size_t)r->g.n, sizeof *f->src);
    f->saved = dt_calloc((size_t)r->g.n, sizeof *f->saved);
    f->have = dt_calloc((size_t)r->g.n, sizeof *f->have);
    for (int i = 0; i < r->g.n; i++) {
        const struct node *nd = &r->g.nodes[i];
        if (fnmatch(pattern, nd->name, 0) != 0)
            continue;
        if (fk == FAULT_CARRY) {
            int s = nd->type == OP_FILL ? fault_carry_source(r, nd->name) : -1;
            if (s < 0) {
                dt_error_set("--inject '%s': %s is not an initial state of a recurrent model "
                             "(L<l>.init.r, .c or .e of prednet)", spec, nd->name);
                return DT_ERR;
            }
            f->src[f->n] = s;
            f->saved[f->n] = dt_malloc(nd->count * sizeof(float));
        } else if (fk != FAULT_STALE && nd->next < 0 && fault_is_recurrent(nd->name)) {
            f->state[f->n] = 1;
        } else if (nd->next < 0) {
            if (strpbrk(pattern, "*?["))
                continue; /* a pattern picks the leaves among the names it matches */
            dt_error_set("--inject '%s': %s is not a parameter or optimizer state (a tensor an "
                         "update replaces each step)%s", spec, nd->name, fk == FAULT_STALE ? ""
                         : " nor a recurrent state (prednet's L<l>.t<k>.r, .c or .e)");
            return DT_ERR;
        }
        f->nleaves += !f->state[f->n];
        f->node[f->n++] = i;
    }
    if (f->n == 0) {
        dt_error_set("--inject '%s': '%s' names no %s of this model (see divtrace show --ops)", spec,
                     pattern, fk == FAULT_CARRY ? "initial state"
                              : fk == FAULT_STALE ? "parameter or optimizer state"
                                                  : "parameter, optimizer state or recurrent state");
        return DT_ERR;
    }
    if (fk == FAULT_CARRY) {
        r->e.corrupt = fault_carry_corrupt;
        r->e.corrupt_arg = f;
    } else if (f->nleaves < f->n) {
        r->e.corrupt = fault_state_corrupt;
        r->e.corrupt_arg = f;
    }
    return DT_OK;
}

void fault_state_forget(struct run *r)
{
    struct fault_state *f = fault_state_of(r);
    if (!f)
        return;
    for (int k = 0; k < f->n; k++)
        free(f->saved[k]);
    free(f->node);
    free(f->state);
    free(f->src);
    free(f->saved);
    free(f->have);
    memset(f, 0, sizeof *f);
}

int fault_rewire(struct run *r, const char *spec, const char *op, const char *which, const char *to)
{
    int i = graph_find(&r->g, op), j = to ? graph_find(&r->g, to) : -1;
    char *end;
    long k = which ? strtol(which, &end, 10) : -1;
    if (i < 0 || !to || !which || *end || k < 0) {
        dt_error_set("--inject '%s': expected OP:rewire:INPUT:TENSOR, OP an op of this model, "
                     "INPUT the number of one of its inputs", spec);
        return DT_ERR;
    }
    struct node *nd = &r->g.nodes[i];
    if (k >= nd->ninputs || j < 0 || j >= i) {
        dt_error_set("--inject '%s': %s has %d inputs; TENSOR must be a tensor made before it", spec,
                     nd->name, nd->ninputs);
        return DT_ERR;
    }
    const struct node *old = &r->g.nodes[nd->inputs[k]], *nw = &r->g.nodes[j];
    if (old->count != nw->count || old->ndim != nw->ndim ||
        memcmp(old->shape, nw->shape, sizeof old->shape) != 0) {
        dt_error_set("--inject '%s': %s has another shape than %s", spec, nw->name, old->name);
        return DT_ERR;
    }
    /* The forward op reads the other tensor; the backward ops were made
     * for the model's wiring and stay so, as a framework whose forward
     * code path was changed alone would have it. */
    nd->inputs[k] = j;
    return DT_OK;
}
