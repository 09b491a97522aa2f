/* html_data.c: the data of one comparison for the HTML page (html_impl.h):
 * the heatmap's grid, made from every common step's records (which ops
 * differ, which is the step's first, which are its origins), the records
 * of the ops its cells show, with checkpoint details where both traces hold
 * the tensor, the loss curves and the divergence timeline.
 *
 * The grid: rows are layers (the text of an op name before its first '.'),
 * columns are steps, each split into sub-columns when op names carry time
 * steps (PredNet's L2.t07.conv_i): sub-column 0 for ops without one (the
 * parameters, their gradients' sums, the updates), 1 + t for time step t.
 * Beyond HTML_MAX_SUBCOLS sub-columns in all, a column holds a run of
 * consecutive steps (its bin), so that a long run still draws. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "html_impl.h"
#include "json.h"
#include "stats.h"
#include "util.h"

#define HTML_MAX_LAYERS 256   /* rows; further layers share the last row */
#define HTML_MAX_T 64         /* time steps apart; later ones share the last sub-column */
#define HTML_MAX_SUBCOLS 500  /* the grid's sub-columns in all, before steps are binned */
#define HTML_CELL_OPS 8       /* differing ops a cell names */
#define HTML_CELL_ENTRIES 8   /* ops a cell shows the records of */
#define HTML_CKPT_ELEMS 6     /* differing elements a checkpoint detail lists */

enum { HTML_ROLE_FIRST = 1, HTML_ROLE_ORIGIN = 2 };                  /* an entry's role, bits */
enum { HTML_CELL_DIFF = 1, HTML_CELL_FIRST = 2, HTML_CELL_ORIGIN = 4 }; /* a cell's flags */

struct html_cell {
    uint64_t ndiff, nrec;     /* op records that differ / that both traces hold, over its steps */
    uint8_t flags;
    uint8_t nd, nent;
    int32_t d[HTML_CELL_OPS]; /* the first distinct ops that differ in it (A's) */
};

/* An op of one step whose records a cell shows. */
struct html_entry {
    uint64_t step;
    int op;                   /* A's index */
    int role;
    size_t cell;
    const struct trace_oprec *ra, *rb;
    /* the tensor in both traces' checkpoints at the step (a parameter or
     * optimizer state at the start of the step), when both hold it */
    int have_ck;
    uint64_t elements, ndiff, max_ulp;
    double rel_l2;
    int nel;
    uint64_t el_index[HTML_CKPT_ELEMS];
    float el_a[HTML_CKPT_ELEMS], el_b[HTML_CKPT_ELEMS];
};

struct html_grid {
    const struct trace_file *a, *b;
    const struct diff_result *r;
    int nlayers;
    char *layer[HTML_MAX_LAYERS];
    int *op_layer, *op_sub;   /* per op of A */
    int nt, nsub;
    uint64_t bin;             /* steps per column */
    size_t ncols;
    struct html_cell *cell;   /* (ncols, nlayers, nsub) */
    uint64_t *per_step;       /* (nlayers, nsub): records both traces keep in one step */
    struct html_entry *ent;
    size_t nent, cap;
    int same_names;           /* equal root hashes mean equal records */
    int partial;              /* some records were missing for the origin test */
};

static size_t html_cell_at(const struct html_grid *g, size_t col, int layer, int sub)
{
    return (col * (size_t)g->nlayers + (size_t)layer) * (size_t)g->nsub + (size_t)sub;
}

static void html_shape(char *out, size_t n, int ndim, const uint32_t *shape)
{
    size_t len = 0;
    out[0] = 0;
    if (!ndim)
        snprintf(out, n, "scalar");
    for (int d = 0; d < ndim && len < n; d++)
        len += (size_t)snprintf(out + len, n - len, "%s%u", d ? "x" : "", shape[d]);
}

/* Whether A's op i and B's op j have one shape (their sketches compare). */
static int html_same_shape(const struct trace_file *a, uint32_t i, const struct trace_file *b, int32_t j)
{
    if (j < 0 || a->ops[i].ndim != b->ops[j].ndim)
        return 0;
    for (int d = 0; d < a->ops[i].ndim; d++)
        if (a->ops[i].shape[d] != b->ops[j].shape[d])
            return 0;
    return 1;
}

/* Whether a trace at its level keeps op i's records. */
static int html_kept(const struct trace_file *t, uint32_t i)
{
    return trace_level_keeps(t->level, (enum trace_kind)t->ops[i].kind);
}

static void html_grid_layout(struct html_grid *g)
{
    const struct trace_file *a = g->a, *b = g->b;
    const struct diff_result *r = g->r;
    g->op_layer = dt_calloc(a->nops ? a->nops : 1, sizeof *g->op_layer);
    g->op_sub = dt_calloc(a->nops ? a->nops : 1, sizeof *g->op_sub);
    int maxt = -1;
    for (uint32_t i = 0; i < a->nops; i++) {
        char name[128];
        diff_layer(a->ops[i].name, name, sizeof name);
        int l = 0;
        while (l < g->nlayers && strcmp(g->layer[l], name) != 0)
            l++;
        if (l == g->nlayers) {
            if (g->nlayers < HTML_MAX_LAYERS)
                g->layer[g->nlayers++] = dt_strdup(name);
            else
                l = HTML_MAX_LAYERS - 1;
        }
        g->op_layer[i] = l;
        int t = diff_time_step(a->ops[i].name, NULL);
        if (t >= HTML_MAX_T)
            t = HTML_MAX_T - 1;
        g->op_sub[i] = t < 0 ? 0 : 1 + t;
        if (t > maxt)
            maxt = t;
    }
    if (!g->nlayers)
        g->layer[g->nlayers++] = dt_strdup("(none)");
    g->nt = maxt + 1;
    g->nsub = g->nt ? g->nt + 1 : 1;
    uint64_t common = r->common ? r->common : 1;
    uint64_t width = common * (uint64_t)g->nsub;
    g->bin = width > HTML_MAX_SUBCOLS ? (width + HTML_MAX_SUBCOLS - 1) / HTML_MAX_SUBCOLS : 1;
    g->ncols = (size_t)((common + g->bin - 1) / g->bin);
    g->cell = dt_calloc(g->ncols * (size_t)g->nlayers * (size_t)g->nsub, sizeof *g->cell);
    g->per_step = dt_calloc((size_t)g->nlayers * (size_t)g->nsub, sizeof *g->per_step);
    for (uint32_t i = 0; i < a->nops; i++) {
        int32_t j = r->a_to_b[i];
        if (j >= 0 && html_kept(a, i) && html_kept(b, (uint32_t)j))
            g->per_step[g->op_layer[i] * g->nsub + g->op_sub[i]]++;
    }
    g->same_names = a->nops == b->nops;
    for (uint32_t i = 0; i < a->nops && g->same_names; i++)
        g->same_names = r->a_to_b[i] == (int32_t)i;
}

static void html_index(const struct trace_step *s, uint32_t nops, const struct trace_oprec **rec)
{
    memset(rec, 0, (nops ? nops : 1) * sizeof *rec);
    for (uint32_t k = 0; k < s->nrec; k++)
        if (s->rec[k].op < nops)
            rec[s->rec[k].op] = &s->rec[k];
}

static void html_add_entry(struct html_grid *g, uint64_t s, int op, int role, size_t cell,
                           const struct trace_oprec *ra, const struct trace_oprec *rb)
{
    if (g->nent == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->ent = dt_realloc(g->ent, g->cap * sizeof *g->ent);
    }
    struct html_entry *e = &g->ent[g->nent++];
    *e = (struct html_entry){.step = s, .op = op, .role = role, .cell = cell, .ra = ra, .rb = rb};
    g->cell[cell].nent++;
}

/* Every common step into the grid. */
static void html_grid_fill(struct html_grid *g)
{
    const struct trace_file *a = g->a, *b = g->b;
    const struct diff_result *r = g->r;
    const struct trace_oprec **ra = dt_calloc(a->nops ? a->nops : 1, sizeof *ra);
    const struct trace_oprec **rb = dt_calloc(b->nops ? b->nops : 1, sizeof *rb);
    int *origins = dt_calloc(a->nops ? a->nops : 1, sizeof *origins);
    uint8_t *role = dt_calloc(a->nops ? a->nops : 1, 1);
    uint64_t *equal_steps = dt_calloc(g->ncols, sizeof *equal_steps); /* per column */
    for (uint64_t s = 0; s < r->common; s++) {
        size_t col = (size_t)(s / g->bin);
        int equal = g->same_names ? a->steps[s].root == b->steps[s].root : !r->values_differ;
        if (equal || (r->values_differ && s < r->first_step)) {
            equal_steps[col]++;
            continue;
        }
        int first, norig = 0;
        diff_step_ops(a, b, r, s, &first, origins, &norig, &g->partial);
        if (first >= 0)
            role[first] |= HTML_ROLE_FIRST;
        for (int k = 0; k < norig; k++)
            role[origins[k]] |= HTML_ROLE_ORIGIN;
        html_index(&a->steps[s], a->nops, ra);
        html_index(&b->steps[s], b->nops, rb);
        for (uint32_t i = 0; i < a->nops; i++) {
            int32_t j = r->a_to_b[i];
            if (j < 0 || !ra[i] || !rb[j])
                continue;
            size_t ci = html_cell_at(g, col, g->op_layer[i], g->op_sub[i]);
            struct html_cell *c = &g->cell[ci];
            c->nrec++;
            if (ra[i]->hash == rb[j]->hash)
                continue;
            c->ndiff++;
            c->flags |= HTML_CELL_DIFF;
            if (role[i] & HTML_ROLE_FIRST)
                c->flags |= HTML_CELL_FIRST;
            if (role[i] & HTML_ROLE_ORIGIN)
                c->flags |= HTML_CELL_ORIGIN;
            int seen = 0;
            for (int k = 0; k < c->nd && !seen; k++)
                seen = c->d[k] == (int32_t)i;
            if (!seen && c->nd < HTML_CELL_OPS)
                c->d[c->nd++] = (int32_t)i;
            /* the cell shows its first and origin ops, else its first op that differs */
            if (role[i] ? c->nent < HTML_CELL_ENTRIES : c->nent == 0)
                html_add_entry(g, s, (int)i, role[i], ci, ra[i], rb[j]);
        }
        if (first >= 0)
            role[first] = 0;
        for (int k = 0; k < norig; k++)
            role[origins[k]] = 0;
    }
    /* an equal step holds every record both traces keep, all equal */
    for (size_t col = 0; col < g->ncols; col++)
        for (int l = 0; l < g->nlayers && equal_steps[col]; l++)
            for (int k = 0; k < g->nsub; k++)
                g->cell[html_cell_at(g, col, l, k)].nrec += equal_steps[col] * g->per_step[l * g->nsub + k];
    free(equal_steps);
    free(ra);
    free(rb);
    free(origins);
    free(role);
}

static int html_ckpt_at(const struct trace_file *t, uint64_t step)
{
    for (uint32_t i = 0; i < t->nckpt; i++)
        if (t->ckpt[i].step == step)
            return (int)i;
    return -1;
}

/* The checkpoint details of the entries that are parameters or optimizer
 * state at a step both traces have a checkpoint at (entries come in step
 * order: one pair of checkpoints is read at a time). */
static int html_grid_ckpts(struct html_grid *g)
{
    struct trace_file *a = (struct trace_file *)g->a, *b = (struct trace_file *)g->b;
    struct trace_ckpt ca, cb;
    int64_t loaded = -1;
    int rc = DT_OK;
    for (size_t k = 0; k < g->nent && rc == DT_OK; k++) {
        struct html_entry *e = &g->ent[k];
        uint32_t kind = a->ops[e->op].kind;
        if (kind != TRACE_KIND_PARAM && kind != TRACE_KIND_STATE)
            continue;
        int ia = html_ckpt_at(a, e->step), ib = html_ckpt_at(b, e->step);
        if (ia < 0 || ib < 0)
            continue;
        if (loaded != (int64_t)e->step) {
            if (loaded >= 0) {
                trace_ckpt_free(&ca);
                trace_ckpt_free(&cb);
                loaded = -1;
            }
            if (trace_read_ckpt(a, (uint32_t)ia, &ca) < 0)
                return DT_ERR;
            if (trace_read_ckpt(b, (uint32_t)ib, &cb) < 0) {
                trace_ckpt_free(&ca);
                return DT_ERR;
            }
            loaded = (int64_t)e->step;
        }
        const struct trace_tensor *ta = trace_ckpt_find(&ca, a->ops[e->op].name);
        const struct trace_tensor *tb = trace_ckpt_find(&cb, a->ops[e->op].name);
        if (!ta || !tb || ta->count != tb->count)
            continue;
        double d2 = 0, n2 = 0;
        e->have_ck = 1;
        e->elements = ta->count;
        for (uint64_t i = 0; i < ta->count; i++) {
            float x = ta->data[i], y = tb->data[i];
            if (memcmp(&x, &y, sizeof x) != 0) {
                if (e->nel < HTML_CKPT_ELEMS) {
                    e->el_index[e->nel] = i;
                    e->el_a[e->nel] = x;
                    e->el_b[e->nel++] = y;
                }
                e->ndiff++;
                uint64_t u = diff_ulp(x, y);
                if (u > e->max_ulp)
                    e->max_ulp = u;
            }
            d2 += ((double)x - y) * ((double)x - y);
            n2 += (double)x * x;
        }
        e->rel_l2 = n2 > 0 ? sqrt(d2 / n2) : sqrt(d2);
    }
    if (loaded >= 0) {
        trace_ckpt_free(&ca);
        trace_ckpt_free(&cb);
    }
    return rc;
}

static void html_grid_free(struct html_grid *g)
{
    for (int l = 0; l < g->nlayers; l++)
        free(g->layer[l]);
    free(g->op_layer);
    free(g->op_sub);
    free(g->cell);
    free(g->per_step);
    free(g->ent);
}

/* ---- JSON ---- */

static void html_hex(FILE *f, uint64_t h)
{
    fprintf(f, "\"%016" PRIx64 "\"", h);
}

static void html_rec(FILE *f, const struct trace_oprec *x)
{
    fputs("{\"hash\": ", f);
    html_hex(f, x->hash);
    fputs(", \"l2\": ", f);
    json_put_num(f, x->l2);
    fputs(", \"min\": ", f);
    json_put_num(f, x->min);
    fputs(", \"max\": ", f);
    json_put_num(f, x->max);
    fprintf(f, ", \"nan\": %" PRIu64 ", \"inf\": %" PRIu64 "}", x->nan, x->inf);
}

void html_data_series(FILE *f, const char *name, const double *v, size_t n)
{
    size_t k = n > HTML_MAX_POINTS ? (n + HTML_MAX_POINTS - 1) / HTML_MAX_POINTS : 1;
    fprintf(f, "\"%s\": [", name);
    for (size_t i = 0; i < n; i += k) {
        fputs(i ? ", " : "", f);
        json_put_num(f, v[i]);
    }
    fprintf(f, "], \"%s_stride\": %zu", name, k);
}

static void html_run(FILE *f, const struct trace_file *t)
{
    fputs("{\"path\": ", f);
    json_put_str(f, t->path);
    fprintf(f, ", \"steps\": %" PRIu64 ", \"complete\": %s, \"ended_early\": %s, \"note\": ", t->nsteps,
            t->complete ? "true" : "false", t->complete && t->end_status ? "true" : "false");
    json_put_str(f, t->note);
    fprintf(f, ", \"level\": \"%s\"", trace_level_name(t->level));
    static const char *const keys[] = {"model", "backend", "threads", "device", "host"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const char *v = trace_config_get(&t->cfg, keys[k]);
        fprintf(f, ", \"%s\": ", keys[k]);
        if (v)
            json_put_str(f, v);
        else
            fputs("null", f);
    }
    double *loss = dt_malloc((t->nsteps ? t->nsteps : 1) * sizeof *loss);
    for (uint64_t s = 0; s < t->nsteps; s++)
        loss[s] = t->steps[s].loss;
    fputs(", ", f);
    html_data_series(f, "loss", loss, (size_t)t->nsteps);
    free(loss);
    fputs(", \"events\": [", f);
    for (uint32_t i = 0; i < t->nevents; i++) {
        fputs(i ? ", " : "", f);
        json_put_str(f, t->events[i].text);
    }
    fputs("], \"checkpoints\": [", f);
    for (uint32_t i = 0; i < t->nckpt && i < 2000; i++)
        fprintf(f, "%s%" PRIu64, i ? ", " : "", t->ckpt[i].step);
    fputs("]}", f);
}

static void html_config_changes(FILE *f, const struct trace_file *a, const struct trace_file *b)
{
    int n = 0;
    fputs("\"config_changes\": [", f);
    for (size_t i = 0; i < a->cfg.n; i++) {
        const char *vb = trace_config_get(&b->cfg, a->cfg.key[i]);
        if (vb && strcmp(vb, a->cfg.val[i]) == 0)
            continue;
        fputs(n++ ? ", [" : "[", f);
        json_put_str(f, a->cfg.key[i]);
        fputs(", ", f);
        json_put_str(f, a->cfg.val[i]);
        fputs(", ", f);
        if (vb)
            json_put_str(f, vb);
        else
            fputs("null", f);
        fputc(']', f);
    }
    for (size_t i = 0; i < b->cfg.n; i++) {
        if (trace_config_get(&a->cfg, b->cfg.key[i]))
            continue;
        fputs(n++ ? ", [" : "[", f);
        json_put_str(f, b->cfg.key[i]);
        fputs(", null, ", f);
        json_put_str(f, b->cfg.val[i]);
        fputc(']', f);
    }
    fputc(']', f);
}

/* The relative parameter distance of every common step, estimated from the
 * sketches of the parameter records (as diff's crossings are), NaN where
 * the traces keep no parameter records. */
static void html_sketch_series(FILE *f, const struct trace_file *a, const struct trace_file *b,
                               const struct diff_result *r)
{
    double *d = dt_malloc((r->common ? r->common : 1) * sizeof *d);
    const struct trace_oprec **ra = dt_calloc(a->nops ? a->nops : 1, sizeof *ra);
    const struct trace_oprec **rb = dt_calloc(b->nops ? b->nops : 1, sizeof *rb);
    for (uint64_t s = 0; s < r->common; s++) {
        html_index(&a->steps[s], a->nops, ra);
        html_index(&b->steps[s], b->nops, rb);
        double d2 = 0, n2 = 0;
        int have = 0;
        for (uint32_t i = 0; i < a->nops; i++) {
            int32_t j = r->a_to_b[i];
            if (a->ops[i].kind != TRACE_KIND_PARAM || j < 0 || !ra[i] || !rb[j] ||
                !html_same_shape(a, i, b, j))
                continue;
            have = 1;
            n2 += ra[i]->l2 * ra[i]->l2;
            if (ra[i]->hash != rb[j]->hash) {
                double e = stats_sketch_distance(ra[i], rb[j]);
                d2 += e * e;
            }
        }
        d[s] = !have ? NAN : n2 > 0 ? sqrt(d2 / n2) : sqrt(d2);
    }
    html_data_series(f, "sketch", d, (size_t)r->common);
    free(d);
    free(ra);
    free(rb);
}

static void html_first(FILE *f, const struct trace_file *a, const struct diff_result *r)
{
    fputs("\"first\": ", f);
    if (!r->values_differ) {
        fputs("null", f);
        return;
    }
    fprintf(f, "{\"step\": %" PRIu64 ", \"op\": %d", r->first_step, r->first_op);
    if (r->first_op >= 0) {
        if (r->have_elements)
            fprintf(f, ", \"elements_differ\": %" PRIu64 ", \"elements\": %" PRIu64 ", \"max_ulp\": %" PRIu64,
                    r->elements_differ, r->elements, r->max_ulp);
        fputs(", \"rel_l2\": ", f);
        json_put_num(f, r->rel_l2);
        fprintf(f, ", \"rel_l2_estimated\": %s", r->rel_l2_estimated ? "true" : "false");
    }
    fputs("}, \"origins\": [", f);
    for (int k = 0; k < r->norigins; k++)
        fprintf(f, "%s%d", k ? ", " : "", r->origins[k]);
    fprintf(f, "], \"origins_partial\": %s", r->origins_partial ? "true" : "false");
    (void)a;
}

static void html_ops(FILE *f, const struct html_grid *g)
{
    const struct trace_file *a = g->a, *b = g->b;
    fputs("\"ops\": [", f);
    for (uint32_t i = 0; i < a->nops; i++) {
        const struct trace_opdef *o = &a->ops[i];
        char shape[64], text[DIFF_OPDIFF_TEXT];
        html_shape(shape, sizeof shape, o->ndim, o->shape);
        fputs(i ? ",\n  [" : "\n  [", f);
        json_put_str(f, o->name);
        fputs(", ", f);
        json_put_str(f, o->type);
        fputs(", ", f);
        json_put_str(f, trace_kind_name((enum trace_kind)o->kind));
        fputs(", ", f);
        json_put_str(f, shape);
        int32_t j = g->r->a_to_b[i];
        fprintf(f, ", %d, %d, %d, ", g->op_layer[i], g->op_sub[i], j);
        if (j >= 0) {
            html_shape(shape, sizeof shape, b->ops[j].ndim, b->ops[j].shape);
            json_put_str(f, shape);
        } else {
            fputs("null", f);
        }
        fputs(", ", f);
        text[0] = 0;
        if (g->r->a_changed[i])
            diff_opdef_describe(a, i, b, j >= 0 ? (uint32_t)j : UINT32_MAX, text, sizeof text);
        json_put_str(f, text);
        fputc(']', f);
    }
    fputc(']', f);
}

static void html_grid_json(FILE *f, const struct html_grid *g)
{
    fputs("\"grid\": {\"layers\": [", f);
    for (int l = 0; l < g->nlayers; l++) {
        fputs(l ? ", " : "", f);
        json_put_str(f, g->layer[l]);
    }
    fprintf(f, "], \"nt\": %d, \"nsub\": %d, \"bin\": %" PRIu64 ", \"ncols\": %zu, \"partial\": %s, \"per_step\": [",
            g->nt, g->nsub, g->bin, g->ncols, g->partial ? "true" : "false");
    int n = 0;
    for (int l = 0; l < g->nlayers; l++)
        for (int k = 0; k < g->nsub; k++)
            if (g->per_step[l * g->nsub + k])
                fprintf(f, "%s[%d, %d, %" PRIu64 "]", n++ ? ", " : "", l, k, g->per_step[l * g->nsub + k]);
    fputs("],\n \"cells\": [", f);
    /* the entries of each cell, as lists through next[] (entries are in
     * step order, so a list is too) */
    size_t ncell = g->ncols * (size_t)g->nlayers * (size_t)g->nsub;
    size_t *head = dt_malloc((ncell ? ncell : 1) * sizeof *head);
    size_t *next = dt_malloc((g->nent ? g->nent : 1) * sizeof *next);
    for (size_t c = 0; c < ncell; c++)
        head[c] = SIZE_MAX;
    for (size_t e = g->nent; e-- > 0;) {
        next[e] = head[g->ent[e].cell];
        head[g->ent[e].cell] = e;
    }
    n = 0;
    for (size_t col = 0; col < g->ncols; col++)
        for (int l = 0; l < g->nlayers; l++)
            for (int k = 0; k < g->nsub; k++) {
                size_t ci = html_cell_at(g, col, l, k);
                const struct html_cell *c = &g->cell[ci];
                uint64_t steps = g->r->common - col * g->bin < g->bin ? g->r->common - col * g->bin : g->bin;
                if (!c->flags && c->nrec == steps * g->per_step[l * g->nsub + k])
                    continue; /* identical: the page draws it from per_step */
                fprintf(f, "%s\n  [%zu, %d, %d, %" PRIu64 ", %" PRIu64 ", %d, [", n++ ? "," : "", col, l, k,
                        c->ndiff, c->nrec, c->flags);
                for (int d = 0; d < c->nd; d++)
                    fprintf(f, "%s%d", d ? ", " : "", c->d[d]);
                fputs("], [", f);
                for (size_t e = head[ci]; e != SIZE_MAX; e = next[e])
                    fprintf(f, "%s%zu", e == head[ci] ? "" : ", ", e);
                fputs("]]", f);
            }
    free(head);
    free(next);
    fputs("]}", f);
}

static void html_entries_json(FILE *f, const struct html_grid *g)
{
    const struct trace_file *a = g->a, *b = g->b;
    fputs("\"entries\": [", f);
    for (size_t k = 0; k < g->nent; k++) {
        const struct html_entry *e = &g->ent[k];
        fprintf(f, "%s\n  {\"step\": %" PRIu64 ", \"op\": %d, \"role\": %d, \"a\": ", k ? "," : "", e->step, e->op,
                e->role);
        html_rec(f, e->ra);
        fputs(", \"b\": ", f);
        html_rec(f, e->rb);
        int32_t j = g->r->a_to_b[e->op];
        double est = NAN;
        if (html_same_shape(a, (uint32_t)e->op, b, j)) {
            double dist = stats_sketch_distance(e->ra, e->rb);
            est = e->ra->l2 > 0 ? dist / e->ra->l2 : dist;
        }
        fputs(", \"est_rel_l2\": ", f);
        json_put_num(f, est);
        if (e->have_ck) {
            fprintf(f, ", \"ckpt\": {\"elements\": %" PRIu64 ", \"differ\": %" PRIu64 ", \"max_ulp\": %" PRIu64
                    ", \"rel_l2\": ", e->elements, e->ndiff, e->max_ulp);
            json_put_num(f, e->rel_l2);
            fputs(", \"first\": [", f);
            for (int i = 0; i < e->nel; i++) {
                fprintf(f, "%s[%" PRIu64 ", ", i ? ", " : "", e->el_index[i]);
                json_put_num(f, e->el_a[i]);
                fputs(", ", f);
                json_put_num(f, e->el_b[i]);
                fputc(']', f);
            }
            fputs("]}", f);
        }
        fputc('}', f);
    }
    fputc(']', f);
}

int html_data_comparison(FILE *f, struct trace_file *a, struct trace_file *b,
                         const struct diff_result *r)
{
    struct html_grid g;
    memset(&g, 0, sizeof g);
    g.a = a;
    g.b = b;
    g.r = r;
    html_grid_layout(&g);
    html_grid_fill(&g);
    if (html_grid_ckpts(&g) < 0) {
        html_grid_free(&g);
        return DT_ERR;
    }
    fputs("\"a\": ", f);
    html_run(f, a);
    fputs(",\n \"b\": ", f);
    html_run(f, b);
    fprintf(f, ",\n \"common\": %" PRIu64 ", \"identical\": %s, \"ops_match\": %s, \"op_differences\": %d, \"opdiff\": ",
            r->common, r->diverged ? "false" : "true", r->ops_match ? "true" : "false", r->nopdiffs);
    json_put_str(f, r->opdiff);
    fprintf(f, ", \"values_differ\": %s, \"values_unknown\": %s,\n ", r->values_differ ? "true" : "false",
            r->values_unknown ? "true" : "false");
    html_config_changes(f, a, b);
    fputs(",\n ", f);
    html_first(f, a, r);
    fputs(",\n \"timeline\": [", f);
    for (int k = 0; k < r->npoints; k++) {
        fprintf(f, "%s[%" PRIu64 ", ", k ? ", " : "", r->points[k].step);
        json_put_num(f, r->points[k].dist);
        fputc(']', f);
    }
    fputs("],\n ", f);
    html_sketch_series(f, a, b, r);
    fputs(",\n \"crossings\": [", f);
    for (int t = 0; t < DIFF_NTHRESH; t++)
        fprintf(f, "%s[%g, %" PRId64 ", %" PRId64 "]", t ? ", " : "", diff_thresholds[t], r->cross_ckpt[t],
                r->cross_sketch[t]);
    fputs("],\n \"final_loss\": [", f);
    json_put_num(f, r->final_a);
    fputs(", ", f);
    json_put_num(f, r->final_b);
    fputs("],\n ", f);
    html_ops(f, &g);
    fputs(",\n ", f);
    html_grid_json(f, &g);
    fputs(",\n ", f);
    html_entries_json(f, &g);
    html_grid_free(&g);
    return DT_OK;
}
