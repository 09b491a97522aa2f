/* diff.c: the analysis behind `divtrace diff` (see diff.h). */
#include "diff.h"

#include <math.h>
#include <stdarg.h>
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

/* Position by position, as the records of identical op lists align. */
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

/* The name an input reference points at, or NULL past the op list. */
static const char *diff_input_op(const struct trace_file *t, uint32_t ref)
{
    ref &= ~TRACE_INPUT_PREV;
    return ref < t->nops ? t->ops[ref].name : NULL;
}

/* Whether two input references name the same op of the same step. */
static int diff_input_same(const struct trace_file *a, uint32_t ra, const struct trace_file *b,
                           uint32_t rb)
{
    if ((ra & TRACE_INPUT_PREV) != (rb & TRACE_INPUT_PREV))
        return 0;
    const char *na = diff_input_op(a, ra), *nb = diff_input_op(b, rb);
    return na && nb ? strcmp(na, nb) == 0 : na == nb;
}

/* Definitions equal by name: the same type, kind, shape and input names
 * (the inputs' indices may differ when the lists do). */
static int diff_opdef_same(const struct trace_file *a, uint32_t ia, const struct trace_file *b,
                           uint32_t ib)
{
    const struct trace_opdef *x = &a->ops[ia], *y = &b->ops[ib];
    if (strcmp(x->name, y->name) || strcmp(x->type, y->type) || x->kind != y->kind ||
        !diff_shape_equal(x, y) || x->ninputs != y->ninputs)
        return 0;
    for (uint32_t k = 0; k < x->ninputs; k++)
        if (!diff_input_same(a, x->inputs[k], b, y->inputs[k]))
            return 0;
    return 1;
}

/* Append to out (n bytes, *len used so far), clamping at the end. */
__attribute__((format(printf, 4, 5)))
static void diff_catf(char *out, size_t n, size_t *len, const char *fmt, ...)
{
    if (*len + 1 >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out + *len, n - *len, fmt, ap);
    va_end(ap);
    if (k > 0)
        *len = *len + (size_t)k < n ? *len + (size_t)k : n - 1;
}

static void diff_input_cat(const struct trace_file *t, uint32_t ref, char *out, size_t n,
                           size_t *len)
{
    const char *name = diff_input_op(t, ref);
    diff_catf(out, n, len, "%s%s", name ? name : "?", (ref & TRACE_INPUT_PREV) ? "@prev" : "");
}

static void diff_inputs_cat(const struct trace_file *t, const struct trace_opdef *o, char *out,
                            size_t n, size_t *len)
{
    if (!o->ninputs)
        diff_catf(out, n, len, "none");
    for (uint32_t k = 0; k < o->ninputs; k++) {
        if (k)
            diff_catf(out, n, len, ", ");
        diff_input_cat(t, o->inputs[k], out, n, len);
    }
}

static void diff_shape_cat(const struct trace_opdef *o, char *out, size_t n, size_t *len)
{
    if (!o->ndim)
        diff_catf(out, n, len, "scalar");
    for (int d = 0; d < o->ndim; d++)
        diff_catf(out, n, len, "%s%u", d ? "x" : "", o->shape[d]);
}

void diff_opdef_describe(const struct trace_file *a, uint32_t ia, const struct trace_file *b,
                         uint32_t ib, char *out, size_t n)
{
    out[0] = 0;
    if (ia >= a->nops || ib >= b->nops) {
        if (ia < a->nops || ib < b->nops)
            snprintf(out, n, "%s: only in %s", ia < a->nops ? a->ops[ia].name : b->ops[ib].name,
                     ia < a->nops ? "A" : "B");
        return;
    }
    const struct trace_opdef *x = &a->ops[ia], *y = &b->ops[ib];
    if (strcmp(x->name, y->name) != 0) {
        snprintf(out, n, "op %u: name %s became %s", ia, x->name, y->name);
        return;
    }
    size_t len = 0;
    int parts = 0;
    diff_catf(out, n, &len, "%s:", x->name);
    if (strcmp(x->type, y->type) != 0)
        diff_catf(out, n, &len, "%s type %s became %s", parts++ ? ";" : "", x->type, y->type);
    if (x->kind != y->kind)
        diff_catf(out, n, &len, "%s kind %s became %s", parts++ ? ";" : "",
                  trace_kind_name((enum trace_kind)x->kind), trace_kind_name((enum trace_kind)y->kind));
    if (!diff_shape_equal(x, y)) {
        diff_catf(out, n, &len, "%s shape ", parts++ ? ";" : "");
        diff_shape_cat(x, out, n, &len);
        diff_catf(out, n, &len, " became ");
        diff_shape_cat(y, out, n, &len);
    }
    if (x->ninputs != y->ninputs) {
        diff_catf(out, n, &len, "%s inputs ", parts++ ? ";" : "");
        diff_inputs_cat(a, x, out, n, &len);
        diff_catf(out, n, &len, " became ");
        diff_inputs_cat(b, y, out, n, &len);
    } else {
        for (uint32_t k = 0; k < x->ninputs; k++) {
            if (diff_input_same(a, x->inputs[k], b, y->inputs[k]))
                continue;
            diff_catf(out, n, &len, "%s input %u ", parts++ ? ";" : "", k);
            diff_input_cat(a, x->inputs[k], out, n, &len);
            diff_catf(out, n, &len, " became ");
            diff_input_cat(b, y->inputs[k], out, n, &len);
        }
    }
    if (!parts)
        out[0] = 0;
}

/* ---- the op lists by name ---- */

struct diff_name {
    const char *name;
    uint32_t op;
};

static int diff_name_cmp(const void *x, const void *y)
{
    const struct diff_name *p = x, *q = y;
    int c = strcmp(p->name, q->name);
    return c ? c : (p->op > q->op) - (p->op < q->op);
}

/* a_to_b and b_to_a: each op to the other trace's op of its name. Names are
 * unique in a well-formed trace; repeated ones pair up in order. */
static void diff_align(const struct trace_file *a, const struct trace_file *b, struct diff_result *r)
{
    r->a_to_b = dt_malloc((a->nops ? a->nops : 1) * sizeof *r->a_to_b);
    r->b_to_a = dt_malloc((b->nops ? b->nops : 1) * sizeof *r->b_to_a);
    for (uint32_t i = 0; i < a->nops; i++)
        r->a_to_b[i] = -1;
    for (uint32_t j = 0; j < b->nops; j++)
        r->b_to_a[j] = -1;
    struct diff_name *sb = dt_malloc((b->nops ? b->nops : 1) * sizeof *sb);
    for (uint32_t j = 0; j < b->nops; j++)
        sb[j] = (struct diff_name){b->ops[j].name, j};
    qsort(sb, b->nops, sizeof *sb, diff_name_cmp);
    for (uint32_t i = 0; i < a->nops; i++) {
        const char *name = a->ops[i].name;
        size_t lo = 0, hi = b->nops; /* the first entry not below name */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (strcmp(sb[mid].name, name) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        while (lo < b->nops && strcmp(sb[lo].name, name) == 0 && r->b_to_a[sb[lo].op] >= 0)
            lo++;
        if (lo < b->nops && strcmp(sb[lo].name, name) == 0) {
            r->a_to_b[i] = (int32_t)sb[lo].op;
            r->b_to_a[sb[lo].op] = (int32_t)i;
        }
    }
    free(sb);
}

/* a_changed, the count of op-definition differences and the first of
 * them: walking A's ops in order, an op only in B comes up just before the
 * first op after it that both hold (or at the end). */
static void diff_compare_defs(const struct trace_file *a, const struct trace_file *b,
                              struct diff_result *r)
{
    r->a_changed = dt_calloc(a->nops ? a->nops : 1, 1);
    for (uint32_t i = 0; i < a->nops; i++) {
        int32_t j = r->a_to_b[i];
        if (j < 0 || !diff_opdef_same(a, i, b, (uint32_t)j)) {
            r->a_changed[i] = 1;
            r->nopdiffs++;
        }
    }
    for (uint32_t j = 0; j < b->nops; j++)
        r->nopdiffs += r->b_to_a[j] < 0;
    r->opdiff_a = r->opdiff_b = -1;
    uint32_t jb = 0; /* B's ops before jb are walked */
    for (uint32_t i = 0; i <= a->nops && r->opdiff_a < 0 && r->opdiff_b < 0; i++) {
        int32_t j = i < a->nops ? r->a_to_b[i] : (int32_t)b->nops;
        for (; j >= 0 && jb < (uint32_t)j; jb++)
            if (r->b_to_a[jb] < 0) {
                r->opdiff_b = (int32_t)jb;
                break;
            }
        if (r->opdiff_b >= 0 || i == a->nops)
            break;
        if (j >= 0 && (uint32_t)j + 1 > jb)
            jb = (uint32_t)j + 1;
        if (r->a_changed[i]) {
            r->opdiff_a = (int32_t)i;
            r->opdiff_b = j;
        }
    }
    if (r->opdiff_a >= 0 || r->opdiff_b >= 0) {
        diff_opdef_describe(a, r->opdiff_a >= 0 ? (uint32_t)r->opdiff_a : UINT32_MAX, b,
                            r->opdiff_b >= 0 ? (uint32_t)r->opdiff_b : UINT32_MAX, r->opdiff,
                            sizeof r->opdiff);
    } else if (!r->ops_match && r->ops_mismatch_at >= 0 && (uint32_t)r->ops_mismatch_at < a->nops) {
        /* every op has its namesake, equal by name: only the order differs */
        uint32_t i = (uint32_t)r->ops_mismatch_at;
        r->opdiff_a = (int32_t)i;
        r->opdiff_b = r->a_to_b[i];
        snprintf(r->opdiff, sizeof r->opdiff, "%s: op %u in A, op %d in B (the same ops in another order)",
                 a->ops[i].name, i, r->opdiff_b);
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

/* Relative distance of the parameters of two checkpoints (A's parameters,
 * by name). Strict: NaN when B lacks one or holds it in another size. Else
 * those are left out (the graphs differ there: diff reports it as such),
 * and the distance is NaN only when no parameter is left to compare. */
static double diff_ckpt_distance(const struct trace_file *tf, const struct trace_ckpt *a,
                                 const struct trace_ckpt *b, int strict)
{
    double d2 = 0, n2 = 0;
    int compared = 0;
    for (uint32_t k = 0; k < a->ntensors; k++) {
        const struct trace_tensor *ta = &a->t[k];
        if (!diff_is_param(tf, ta->name))
            continue;
        const struct trace_tensor *tb = trace_ckpt_find(b, ta->name);
        if (!tb || tb->count != ta->count) {
            if (strict)
                return NAN;
            continue;
        }
        compared = 1;
        for (uint64_t i = 0; i < ta->count; i++) {
            double x = ta->data[i], y = tb->data[i];
            d2 += (x - y) * (x - y);
            n2 += x * x;
        }
    }
    if (!compared && !strict)
        return NAN;
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
        double d = diff_ckpt_distance(a, &ca, &cb, 0);
        trace_ckpt_free(&ca);
        trace_ckpt_free(&cb);
        r->points[r->npoints++] = (struct diff_point){step, d};
        for (int t = 0; t < DIFF_NTHRESH; t++)
            if (r->cross_ckpt[t] < 0 && d > diff_thresholds[t])
                r->cross_ckpt[t] = (int64_t)step;
    }
    /* Per-step estimate from the parameter records' sketches (equal hashes
     * contribute exactly zero), over the parameters both traces hold in
     * one shape. */
    const struct trace_oprec **ra = dt_calloc(a->nops ? a->nops : 1, sizeof *ra);
    const struct trace_oprec **rb = dt_calloc(b->nops ? b->nops : 1, sizeof *rb);
    r->sketch_ok = 0;
    for (uint64_t s = 0; s < r->common; s++) {
        diff_index(&a->steps[s], a->nops, ra);
        diff_index(&b->steps[s], b->nops, rb);
        double d2 = 0, n2 = 0;
        int have = 0;
        for (uint32_t i = 0; i < a->nops; i++) {
            int32_t j = r->a_to_b[i];
            if (a->ops[i].kind != TRACE_KIND_PARAM || j < 0 || !ra[i] || !rb[j] ||
                !diff_shape_equal(&a->ops[i], &b->ops[j]))
                continue;
            have = 1;
            n2 += ra[i]->l2 * ra[i]->l2;
            if (ra[i]->hash != rb[j]->hash) {
                double e = stats_sketch_distance(ra[i], rb[j]);
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

/* One trace's side of the origin test at one step. */
struct diff_side {
    const struct trace_file *t;
    const int32_t *to_other;               /* its ops' namesakes in the other trace */
    const struct trace_oprec **rec, **orec; /* the step's records: this trace's, the other's */
    const struct trace_oprec **prev, **oprev; /* the previous step's, when its inputs are
                                              compared too (diff_step_ops), else NULL */
    uint8_t *memo;                         /* ops in this trace only: 0 not known, 1 being
                                              looked at, 2 clean, 3 not */
};

/* Deeper chains of ops that only one trace holds are not followed. */
#define DIFF_MAX_DEPTH 256

static int diff_inputs_clean(struct diff_side *sd, uint32_t i, int depth, int *partial);

/* Whether op x of sd's trace, an input, is equal in both traces: by its
 * hashes when both hold it; an op the other trace lacks is as equal as its
 * own inputs are (a new op fed by equal tensors brings the difference in
 * itself, where it is consumed). */
static int diff_input_clean(struct diff_side *sd, uint32_t x, int depth, int *partial)
{
    int32_t y = sd->to_other[x];
    if (y >= 0) {
        if (!sd->rec[x] || !sd->orec[y]) {
            *partial = 1;
            return 0;
        }
        return sd->rec[x]->hash == sd->orec[y]->hash;
    }
    if (sd->memo[x] >= 2)
        return sd->memo[x] == 2;
    if (sd->memo[x] == 1 || depth > DIFF_MAX_DEPTH) { /* a cycle, or too deep to tell */
        *partial = 1;
        return 0;
    }
    sd->memo[x] = 1;
    int clean = diff_inputs_clean(sd, x, depth + 1, partial);
    sd->memo[x] = clean ? 2 : 3;
    return clean;
}

/* Whether every input op i reads in the same step is equal in both traces.
 * Inputs from the previous step are: the step is the first divergent one
 * (at step 0 there is none, so a leaf that differs there is an initial
 * value that differs). */
static int diff_inputs_clean(struct diff_side *sd, uint32_t i, int depth, int *partial)
{
    const struct trace_opdef *o = &sd->t->ops[i];
    for (uint32_t k = 0; k < o->ninputs; k++) {
        uint32_t ref = o->inputs[k];
        if ((ref & TRACE_INPUT_PREV) && sd->prev) {
            /* the op of the previous step, by its records there */
            uint32_t x = ref & ~TRACE_INPUT_PREV;
            int32_t y = x < sd->t->nops ? sd->to_other[x] : -1;
            if (y < 0 || !sd->prev[x] || !sd->oprev[y]) {
                *partial = 1;
                return 0;
            }
            if (sd->prev[x]->hash != sd->oprev[y]->hash)
                return 0;
            continue;
        }
        if (ref & TRACE_INPUT_PREV)
            continue;
        if (ref >= sd->t->nops) {
            *partial = 1;
            return 0;
        }
        if (!diff_input_clean(sd, ref, depth, partial))
            return 0;
    }
    return 1;
}

/* The first divergent op of step s (in A's order, among the ops both hold)
 * and that step's origin ops. An op whose definition differs is tested on
 * the inputs of both its definitions. */
static void diff_locate(const struct trace_file *a, const struct trace_file *b, uint64_t s,
                        struct diff_result *r)
{
    const struct trace_oprec **ra = dt_calloc(a->nops ? a->nops : 1, sizeof *ra);
    const struct trace_oprec **rb = dt_calloc(b->nops ? b->nops : 1, sizeof *rb);
    uint8_t *ma = dt_calloc(a->nops ? a->nops : 1, 1), *mb = dt_calloc(b->nops ? b->nops : 1, 1);
    diff_index(&a->steps[s], a->nops, ra);
    diff_index(&b->steps[s], b->nops, rb);
    struct diff_side sa = {a, r->a_to_b, ra, rb, NULL, NULL, ma},
                     sb = {b, r->b_to_a, rb, ra, NULL, NULL, mb};
    r->first_op = -1;
    r->origins = dt_calloc(a->nops ? a->nops : 1, sizeof *r->origins);
    for (uint32_t i = 0; i < a->nops; i++) {
        int32_t j = r->a_to_b[i];
        if (j < 0)
            continue; /* only in A: a difference of the op lists */
        if (!ra[i] || !rb[j]) {
            r->origins_partial = 1;
            continue;
        }
        if (ra[i]->hash == rb[j]->hash)
            continue;
        if (r->first_op < 0) {
            r->first_op = (int)i;
            if (diff_shape_equal(&a->ops[i], &b->ops[j])) {
                double l2 = ra[i]->l2;
                double e = stats_sketch_distance(ra[i], rb[j]);
                r->rel_l2 = l2 > 0 ? e / l2 : e;
            } else {
                r->rel_l2 = NAN; /* sketches of tensors of other shapes do not compare */
            }
            r->rel_l2_estimated = 1;
        }
        if (diff_inputs_clean(&sa, i, 0, &r->origins_partial) &&
            diff_inputs_clean(&sb, (uint32_t)j, 0, &r->origins_partial))
            r->origins[r->norigins++] = (int)i;
    }
    free(ra);
    free(rb);
    free(ma);
    free(mb);
}

void diff_step_ops(const struct trace_file *a, const struct trace_file *b,
                   const struct diff_result *r, uint64_t s, int *first_op, int *origins,
                   int *norigins, int *partial)
{
    const struct trace_oprec **ra = dt_calloc(a->nops ? a->nops : 1, sizeof *ra);
    const struct trace_oprec **rb = dt_calloc(b->nops ? b->nops : 1, sizeof *rb);
    const struct trace_oprec **pa = NULL, **pb = NULL;
    uint8_t *ma = dt_calloc(a->nops ? a->nops : 1, 1), *mb = dt_calloc(b->nops ? b->nops : 1, 1);
    diff_index(&a->steps[s], a->nops, ra);
    diff_index(&b->steps[s], b->nops, rb);
    /* up to the first divergent step the previous step is identical */
    if (r->values_differ && s > r->first_step) {
        pa = dt_calloc(a->nops ? a->nops : 1, sizeof *pa);
        pb = dt_calloc(b->nops ? b->nops : 1, sizeof *pb);
        diff_index(&a->steps[s - 1], a->nops, pa);
        diff_index(&b->steps[s - 1], b->nops, pb);
    }
    struct diff_side sa = {a, r->a_to_b, ra, rb, pa, pb, ma}, sb = {b, r->b_to_a, rb, ra, pb, pa, mb};
    *first_op = -1;
    *norigins = 0;
    for (uint32_t i = 0; i < a->nops; i++) {
        int32_t j = r->a_to_b[i];
        if (j < 0)
            continue;
        if (!ra[i] || !rb[j]) {
            *partial = 1;
            continue;
        }
        if (ra[i]->hash == rb[j]->hash)
            continue;
        if (*first_op < 0)
            *first_op = (int)i;
        if (diff_inputs_clean(&sa, i, 0, partial) && diff_inputs_clean(&sb, (uint32_t)j, 0, partial))
            origins[(*norigins)++] = (int)i;
    }
    free(ra);
    free(rb);
    free(pa);
    free(pb);
    free(ma);
    free(mb);
}

/* Whether step s differs in the records of the ops both traces hold;
 * *compared is set when some pair of records was there to compare. ra and
 * rb are scratch of a->nops and b->nops entries. */
static int diff_records_differ(const struct trace_file *a, const struct trace_file *b, uint64_t s,
                               const struct diff_result *r, const struct trace_oprec **ra,
                               const struct trace_oprec **rb, int *compared)
{
    diff_index(&a->steps[s], a->nops, ra);
    diff_index(&b->steps[s], b->nops, rb);
    for (uint32_t i = 0; i < a->nops; i++) {
        int32_t j = r->a_to_b[i];
        if (j < 0 || !ra[i] || !rb[j])
            continue;
        *compared = 1;
        if (ra[i]->hash != rb[j]->hash)
            return 1;
    }
    return 0;
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
    diff_align(a, b, r);
    diff_compare_defs(a, b, r);
    /* The root hash covers every op in order, so it compares whenever the
     * lists name the same ops in the same order (their definitions may
     * differ); else only the records of the ops both hold compare. */
    int same_names = a->nops == b->nops;
    for (uint32_t i = 0; i < a->nops && same_names; i++)
        same_names = r->a_to_b[i] == (int32_t)i;
    const struct trace_oprec **ra = NULL, **rb = NULL;
    if (!same_names) {
        ra = dt_calloc(a->nops ? a->nops : 1, sizeof *ra);
        rb = dt_calloc(b->nops ? b->nops : 1, sizeof *rb);
    }
    int compared = 0;
    for (uint64_t s = 0; s < r->common; s++) {
        int differs = same_names ? a->steps[s].root != b->steps[s].root
                                 : diff_records_differ(a, b, s, r, ra, rb, &compared);
        if (differs) {
            r->values_differ = 1;
            r->first_step = s;
            break;
        }
    }
    free(ra);
    free(rb);
    r->values_unknown = !same_names && r->common && !compared;
    /* Traces compare over their common steps: one cut short before its
     * first step (its op list may be empty, never written) differs from
     * none. */
    r->diverged = r->values_differ || (!r->ops_match && r->common);
    if (r->values_differ) {
        diff_locate(a, b, r->first_step, r);
        if (r->first_op >= 0 && diff_elements(a, b, r->first_step, r->first_op, r) < 0)
            return DT_ERR;
    }
    for (int t = 0; t < DIFF_NTHRESH; t++)
        r->cross_ckpt[t] = r->cross_sketch[t] = -1;
    if (diff_timeline(a, b, r) < 0)
        return DT_ERR;
    r->final_a = a->nsteps ? a->steps[a->nsteps - 1].loss : NAN;
    r->final_b = b->nsteps ? b->steps[b->nsteps - 1].loss : NAN;
    r->mean50_a = diff_mean50(a);
    r->mean50_b = diff_mean50(b);
    return DT_OK;
}

void diff_result_free(struct diff_result *r)
{
    free(r->a_to_b);
    free(r->b_to_a);
    free(r->a_changed);
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
            p.dist[k] = diff_ckpt_distance(ref, &cr, &cx, 1);
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
