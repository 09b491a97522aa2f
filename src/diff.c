/* diff.c: the analysis behind `divtrace diff` (see diff.h). */
#include "diff.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "util.h"

const double diff_thresholds[DIFF_NTHRESH] = {1e-6, 1e-3, 1e-1};

void diff_layer(const char *name, char *out, size_t n)
{
    size_t len = strcspn(name, ".");
    if (len >= n)
        len = n - 1;
    memcpy(out, name, len);
    out[len] = 0;
}

static int diff_time_step_plain(const char *name, const char **rest);

int diff_time_step(const char *name, const char **rest)
{
    int t = diff_time_step_plain(name, rest);
    if (t >= 0)
        return t;
    /* a gradient contribution names its consumer after '@':
     * "L0.conv_c.W.grad@L0.t19.conv_c" is time step 19's part */
    const char *at = strchr(name, '@');
    const char *crest;
    if (!at || (t = diff_time_step_plain(at + 1, &crest)) < 0)
        return -1;
    if (rest) {
        /* the name without its layer prefix: "conv_c.W.grad@L0.t19.conv_c" */
        const char *dot = strchr(name, '.');
        *rest = dot && dot < at ? dot + 1 : name;
    }
    return t;
}

static int diff_time_step_plain(const char *name, const char **rest)
{
    /* "L<digits>.t<digits>.<rest>" */
    const char *p = name;
    if (*p++ != 'L' || *p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p++ != '.' || *p++ != 't' || *p < '0' || *p > '9')
        return -1;
    long t = 0;
    while (*p >= '0' && *p <= '9' && t < 100000000)
        t = 10 * t + (*p++ - '0');
    if (*p++ != '.' || !*p)
        return -1;
    if (rest)
        *rest = p;
    return (int)t;
}

static int64_t diff_ordered(float x)
{
    int32_t i;
    memcpy(&i, &x, sizeof i);
    return i >= 0 ? (int64_t)i : -(int64_t)(i & 0x7fffffff);
}

uint64_t diff_ulp(float a, float b)
{
    if (isnan(a) || isnan(b))
        return UINT64_MAX;
    int64_t d = diff_ordered(a) - diff_ordered(b);
    return (uint64_t)(d < 0 ? -d : d);
}

static int diff_shape_equal(const struct trace_opdef *a, const struct trace_opdef *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

static int diff_opdef_equal(const struct trace_opdef *a, const struct trace_opdef *b)
{
    if (strcmp(a->name, b->name) || strcmp(a->type, b->type) || a->kind != b->kind ||
        !diff_shape_equal(a, b) || a->ninputs != b->ninputs)
        return 0;
    for (uint32_t k = 0; k < a->ninputs; k++)
        if (a->inputs[k] != b->inputs[k])
            return 0;
    return 1;
}

static void diff_inputs_text(const struct trace_file *t, const struct trace_opdef *o, char *out,
                             size_t n)
{
    size_t len = 0;
    out[0] = 0;
    for (uint32_t k = 0; k < o->ninputs && len < n; k++) {
        uint32_t r = o->inputs[k] & ~TRACE_INPUT_PREV;
        len += (size_t)snprintf(out + len, n - len, "%s%s%s (op %u)", k ? ", " : "",
                                r < t->nops ? t->ops[r].name : "?",
                                (o->inputs[k] & TRACE_INPUT_PREV) ? "@prev" : "", r);
    }
    if (!o->ninputs)
        snprintf(out, n, "none");
}

void diff_opdef_describe(const struct trace_file *a, uint32_t ia, const struct trace_file *b,
                         uint32_t ib, char *out, size_t n)
{
    out[0] = 0;
    if (ia >= a->nops || ib >= b->nops) {
        snprintf(out, n, "%s has %u ops, %s has %u", "A", a->nops, "B", b->nops);
        return;
    }
    const struct trace_opdef *x = &a->ops[ia], *y = &b->ops[ib];
    char sx[256], sy[256];
    if (strcmp(x->name, y->name) != 0) {
        snprintf(out, n, "name: %s vs %s", x->name, y->name);
    } else if (strcmp(x->type, y->type) != 0) {
        snprintf(out, n, "%s: type %s vs %s", x->name, x->type, y->type);
    } else if (x->kind != y->kind) {
        snprintf(out, n, "%s: kind %s vs %s", x->name, trace_kind_name((enum trace_kind)x->kind),
                 trace_kind_name((enum trace_kind)y->kind));
    } else if (!diff_shape_equal(x, y)) {
        size_t l = (size_t)snprintf(out, n, "%s: shape ", x->name);
        for (int k = 0; k < 2 && l < n; k++) {
            const struct trace_opdef *o = k ? y : x;
            for (int d = 0; d < o->ndim && l < n; d++)
                l += (size_t)snprintf(out + l, n - l, "%s%u", d ? "x" : (k ? " vs " : ""), o->shape[d]);
        }
    } else {
        diff_inputs_text(a, x, sx, sizeof sx);
        diff_inputs_text(b, y, sy, sizeof sy);
        if (strcmp(sx, sy) != 0)
            snprintf(out, n, "%s: inputs %s vs %s", x->name, sx, sy);
    }
}

/* rec_of[i] for one step: the record of op i, or NULL if not kept. */
static void diff_index(const struct trace_step *s, uint32_t nops, const struct trace_oprec **rec_of)
{
    memset(rec_of, 0, nops * sizeof *rec_of);
    for (uint32_t k = 0; k < s->nrec; k++)
        if (s->rec[k].op < nops)
            rec_of[s->rec[k].op] = &s->rec[k];
}

/* Index of the checkpoint at `step` in tf, or -1. */
static int diff_ckpt_at(const struct trace_file *tf, uint64_t step)
{
    for (uint32_t i = 0; i < tf->nckpt; i++)
        if (tf->ckpt[i].step == step)
            return (int)i;
    return -1;
}

static int diff_is_param(const struct trace_file *tf, const char *name)
{
    for (uint32_t i = 0; i < tf->nops; i++)
        if (tf->ops[i].kind == TRACE_KIND_PARAM && strcmp(tf->ops[i].name, name) == 0)
            return 1;
    return 0;
}

/* Relative distance of the parameters of two checkpoints. */
static double diff_ckpt_distance(const struct trace_file *tf, const struct trace_ckpt *a,
                                 const struct trace_ckpt *b)
{
    double d2 = 0, n2 = 0;
    for (uint32_t k = 0; k < a->ntensors; k++) {
        const struct trace_tensor *ta = &a->t[k];
        if (!diff_is_param(tf, ta->name))
            continue;
        const struct trace_tensor *tb = trace_ckpt_find(b, ta->name);
        if (!tb || tb->count != ta->count)
            return NAN;
        for (uint64_t i = 0; i < ta->count; i++) {
            double x = ta->data[i], y = tb->data[i];
            d2 += (x - y) * (x - y);
            n2 += x * x;
        }
    }
    return n2 > 0 ? sqrt(d2 / n2) : sqrt(d2);
}

static int diff_timeline(struct trace_file *a, struct trace_file *b, struct diff_result *r)
{
    r->points = dt_calloc(a->nckpt ? a->nckpt : 1, sizeof *r->points);
    for (uint32_t i = 0; i < a->nckpt; i++) {
        uint64_t step = a->ckpt[i].step;
        int j = diff_ckpt_at(b, step);
        if (j < 0 || step > r->common)
            continue;
        struct trace_ckpt ca, cb;
        if (trace_read_ckpt(a, i, &ca) < 0)
            return DT_ERR;
        if (trace_read_ckpt(b, (uint32_t)j, &cb) < 0) {
            trace_ckpt_free(&ca);
            return DT_ERR;
        }
        double d = diff_ckpt_distance(a, &ca, &cb);
        trace_ckpt_free(&ca);
        trace_ckpt_free(&cb);
        r->points[r->npoints++] = (struct diff_point){step, d};
        for (int t = 0; t < DIFF_NTHRESH; t++)
            if (r->cross_ckpt[t] < 0 && d > diff_thresholds[t])
                r->cross_ckpt[t] = (int64_t)step;
    }
    /* Per-step estimate from the parameter records' sketches (equal hashes
     * contribute exactly zero). */
    const struct trace_oprec **ra = dt_calloc(a->nops, sizeof *ra);
    const struct trace_oprec **rb = dt_calloc(a->nops, sizeof *rb);
    r->sketch_ok = 0;
    for (uint64_t s = 0; s < r->common; s++) {
        diff_index(&a->steps[s], a->nops, ra);
        diff_index(&b->steps[s], b->nops, rb);
        double d2 = 0, n2 = 0;
        int have = 0;
        for (uint32_t i = 0; i < a->nops; i++) {
            if (a->ops[i].kind != TRACE_KIND_PARAM || !ra[i] || !rb[i])
                continue;
            have = 1;
            n2 += ra[i]->l2 * ra[i]->l2;
            if (ra[i]->hash != rb[i]->hash) {
                double e = stats_sketch_distance(ra[i], rb[i]);
                d2 += e * e;
            }
        }
        if (!have)
            break;
        r->sketch_ok = 1;
        double d = n2 > 0 ? sqrt(d2 / n2) : sqrt(d2);
        for (int t = 0; t < DIFF_NTHRESH; t++)
            if (r->cross_sketch[t] < 0 && d > diff_thresholds[t])
                r->cross_sketch[t] = (int64_t)s;
    }
    free(ra);
    free(rb);
    return DT_OK;
}

/* Elements that differ and the largest ULP distance of op `op` at step s,
 * when both traces hold that tensor in a checkpoint taken before step s. */
static int diff_elements(struct trace_file *a, struct trace_file *b, uint64_t s, int op,
                         struct diff_result *r)
{
    int ia = diff_ckpt_at(a, s), ib = diff_ckpt_at(b, s);
    uint32_t kind = a->ops[op].kind;
    if (ia < 0 || ib < 0 || (kind != TRACE_KIND_PARAM && kind != TRACE_KIND_STATE))
        return DT_OK;
    struct trace_ckpt ca, cb;
    if (trace_read_ckpt(a, (uint32_t)ia, &ca) < 0)
        return DT_ERR;
    if (trace_read_ckpt(b, (uint32_t)ib, &cb) < 0) {
        trace_ckpt_free(&ca);
        return DT_ERR;
    }
    const struct trace_tensor *ta = trace_ckpt_find(&ca, a->ops[op].name);
    const struct trace_tensor *tb = trace_ckpt_find(&cb, a->ops[op].name);
    if (ta && tb && ta->count == tb->count) {
        double d2 = 0, n2 = 0;
        r->have_elements = 1;
        r->elements = ta->count;
        for (uint64_t i = 0; i < ta->count; i++) {
            float x = ta->data[i], y = tb->data[i];
            if (memcmp(&x, &y, sizeof x) != 0) {
                r->elements_differ++;
                uint64_t u = diff_ulp(x, y);
                if (u > r->max_ulp)
                    r->max_ulp = u;
            }
            d2 += ((double)x - y) * ((double)x - y);
            n2 += (double)x * x;
        }
        r->rel_l2 = n2 > 0 ? sqrt(d2 / n2) : sqrt(d2);
        r->rel_l2_estimated = 0;
    }
    trace_ckpt_free(&ca);
    trace_ckpt_free(&cb);
    return DT_OK;
}

/* The first divergent op of step s and that step's origin ops. */
static void diff_locate(const struct trace_file *a, const struct trace_file *b, uint64_t s,
                        struct diff_result *r)
{
    uint32_t n = a->nops;
    const struct trace_oprec **ra = dt_calloc(n, sizeof *ra), **rb = dt_calloc(n, sizeof *rb);
    diff_index(&a->steps[s], n, ra);
    diff_index(&b->steps[s], n, rb);
    r->first_op = -1;
    r->origins = dt_calloc(n, sizeof *r->origins);
    for (uint32_t i = 0; i < n; i++) {
        if (!ra[i] || !rb[i]) {
            r->origins_partial = 1;
            continue;
        }
        if (ra[i]->hash == rb[i]->hash)
            continue;
        if (r->first_op < 0) {
            r->first_op = (int)i;
            double l2 = ra[i]->l2;
            double e = stats_sketch_distance(ra[i], rb[i]);
            r->rel_l2 = l2 > 0 ? e / l2 : e;
            r->rel_l2_estimated = 1;
        }
        /* Inputs of the same step must match. Inputs from the previous step
         * matched, since s is the first divergent step; at step 0 there is
         * none, so a leaf that differs there is an initial value that differs. */
        int inputs_match = 1;
        for (uint32_t k = 0; k < a->ops[i].ninputs && inputs_match; k++) {
            uint32_t ref = a->ops[i].inputs[k];
            if (ref & TRACE_INPUT_PREV)
                continue;
            if (ref >= n || !ra[ref] || !rb[ref]) {
                inputs_match = 0;
                r->origins_partial = 1;
            } else if (ra[ref]->hash != rb[ref]->hash) {
                inputs_match = 0;
            }
        }
        if (inputs_match)
            r->origins[r->norigins++] = (int)i;
    }
    free(ra);
    free(rb);
}

static double diff_mean50(const struct trace_file *t)
{
    uint64_t n = t->nsteps < 50 ? t->nsteps : 50;
    double s = 0;
    for (uint64_t k = 0; k < n; k++)
        s += t->steps[t->nsteps - 1 - k].loss;
    return n ? s / (double)n : NAN;
}

int diff_traces(struct trace_file *a, struct trace_file *b, struct diff_result *r)
{
    memset(r, 0, sizeof *r);
    r->first_op = -1;
    r->common = a->nsteps < b->nsteps ? a->nsteps : b->nsteps;
    r->ops_match = a->nops == b->nops;
    r->ops_mismatch_at = -1;
    uint32_t nmin = a->nops < b->nops ? a->nops : b->nops;
    for (uint32_t i = 0; i < nmin && r->ops_mismatch_at < 0; i++)
        if (!diff_opdef_equal(&a->ops[i], &b->ops[i]))
            r->ops_mismatch_at = (int32_t)i;
    if (r->ops_mismatch_at >= 0 || a->nops != b->nops) {
        r->ops_match = 0;
        if (r->ops_mismatch_at < 0)
            r->ops_mismatch_at = (int32_t)nmin;
    }
    for (uint64_t s = 0; s < r->common; s++)
        if (a->steps[s].root != b->steps[s].root) {
            r->diverged = 1;
            r->first_step = s;
            break;
        }
    if (!r->ops_match && r->common) {
        r->diverged = 1;
        r->first_step = 0;
    }
    if (r->diverged && r->ops_match) {
        diff_locate(a, b, r->first_step, r);
        if (r->first_op >= 0 && diff_elements(a, b, r->first_step, r->first_op, r) < 0)
            return DT_ERR;
    }
    for (int t = 0; t < DIFF_NTHRESH; t++)
        r->cross_ckpt[t] = r->cross_sketch[t] = -1;
    /* Different graphs have no common parameters to measure. */
    if (r->ops_match && diff_timeline(a, b, r) < 0)
        return DT_ERR;
    r->final_a = a->nsteps ? a->steps[a->nsteps - 1].loss : NAN;
    r->final_b = b->nsteps ? b->steps[b->nsteps - 1].loss : NAN;
    r->mean50_a = diff_mean50(a);
    r->mean50_b = diff_mean50(b);
    return DT_OK;
}

void diff_result_free(struct diff_result *r)
{
    free(r->origins);
    free(r->points);
    memset(r, 0, sizeof *r);
}

int diff_reference(struct trace_file *ref, struct trace_file **runs, int nruns,
                   struct diff_refresult *out)
{
    memset(out, 0, sizeof *out);
    out->nruns = nruns;
    for (int k = 0; k < nruns; k++) {
        out->identical[k] = 1;
        for (int t = 0; t < DIFF_NTHRESH; t++)
            out->cross[k][t] = -1;
        if (runs[k]->nops != ref->nops) {
            dt_error_set("%s and the reference %s train different graphs (%u and %u ops)",
                         runs[k]->path, ref->path, runs[k]->nops, ref->nops);
            return DT_ERR;
        }
    }
    out->points = dt_calloc(ref->nckpt ? ref->nckpt : 1, sizeof *out->points);
    for (uint32_t i = 0; i < ref->nckpt; i++) {
        uint64_t step = ref->ckpt[i].step;
        struct diff_refpoint p = {step, {NAN, NAN}};
        int any = 0;
        struct trace_ckpt cr;
        int have_ref = 0;
        for (int k = 0; k < nruns; k++) {
            int j = diff_ckpt_at(runs[k], step);
            if (j < 0)
                continue;
            if (!have_ref) {
                if (trace_read_ckpt(ref, i, &cr) < 0)
                    return DT_ERR;
                have_ref = 1;
            }
            struct trace_ckpt cx;
            if (trace_read_ckpt(runs[k], (uint32_t)j, &cx) < 0) {
                trace_ckpt_free(&cr);
                return DT_ERR;
            }
            /* the distance of the run from the reference, relative to the reference */
            p.dist[k] = diff_ckpt_distance(ref, &cr, &cx);
            trace_ckpt_free(&cx);
            any = 1;
            if (p.dist[k] != 0)
                out->identical[k] = 0;
            for (int t = 0; t < DIFF_NTHRESH; t++)
                if (out->cross[k][t] < 0 && p.dist[k] > diff_thresholds[t])
                    out->cross[k][t] = (int64_t)step;
        }
        if (have_ref)
            trace_ckpt_free(&cr);
        if (any)
            out->points[out->npoints++] = p;
    }
    if (!out->npoints) {
        dt_error_set("the runs share no checkpoint step with the reference %s", ref->path);
        return DT_ERR;
    }
    return DT_OK;
}

void diff_refresult_free(struct diff_refresult *r)
{
    free(r->points);
    memset(r, 0, sizeof *r);
}
