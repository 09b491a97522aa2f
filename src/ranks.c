/* ranks.c: one data-parallel job's ranks compared as replicas (see ranks.h).
 * What must stay true: only the replicated kinds (param, state, grad,
 * optimizer) and checkpoint tensors are held to bitwise equality; a rank's
 * inputs, module outputs and loss are its own and never a finding. */
#include "ranks.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "diff.h"
#include "hash.h"
#include "json.h"
#include "util.h"

static int ranks_replicated(uint8_t kind)
{
    return kind == TRACE_KIND_PARAM || kind == TRACE_KIND_STATE || kind == TRACE_KIND_GRAD ||
           kind == TRACE_KIND_OPTIMIZER;
}

/* ---- which traces are ranks of one job ---- */

/* A trace's rank keys: 1 (all three, well formed), 0 (not a rank trace),
 * -1 with dt_error set (present but malformed). */
static int ranks_keys(const struct trace_file *t, int64_t *rank, int64_t *world, const char **job)
{
    const char *r = trace_config_get(&t->cfg, "rank"), *w = trace_config_get(&t->cfg, "world_size");
    *job = trace_config_get(&t->cfg, "dist_job");
    if (!r || !w || !*job)
        return 0;
    char *e1, *e2;
    long long rv = strtoll(r, &e1, 10), wv = strtoll(w, &e2, 10);
    if (!*r || *e1 || !*w || *e2 || rv < 0 || wv < 1 || rv >= wv) {
        dt_error_set("%s: bad rank keys in its header (rank = %s, world_size = %s)", t->path, r, w);
        return -1;
    }
    *rank = rv;
    *world = wv;
    return 1;
}

int ranks_detect(struct trace_file *const *tf, int n)
{
    int64_t r[2], w[2];
    const char *j[2];
    for (int k = 0; k < n; k++) {
        int kk = ranks_keys(tf[k], &r[1], &w[1], &j[1]);
        if (kk <= 0 && n == 2)
            return 0;
        if (kk < 0)
            return DT_ERR;
        if (kk == 0) {
            dt_error_set("%s is not a rank of a torch.distributed job (its header has no rank, world_size "
                         "and dist_job): more than two traces compare only as the ranks of one job", tf[k]->path);
            return DT_ERR;
        }
        if (k == 0) {
            r[0] = r[1], w[0] = w[1], j[0] = j[1];
        } else if (strcmp(j[1], j[0]) != 0 || w[1] != w[0]) {
            if (n == 2)
                return 0;
            dt_error_set("%s is a rank of job %s (world size %" PRId64 "), %s of job %s (world size %" PRId64
                         "): more than two traces compare only as the ranks of one job", tf[0]->path, j[0], w[0],
                         tf[k]->path, j[1], w[1]);
            return DT_ERR;
        }
        for (int q = 0; q < k; q++) {
            int64_t rq, wq;
            const char *jq;
            ranks_keys(tf[q], &rq, &wq, &jq);
            if (rq != r[1])
                continue;
            if (n == 2)
                return 0;
            dt_error_set("%s and %s are both rank %" PRId64 " of job %s", tf[q]->path, tf[k]->path, rq, j[0]);
            return DT_ERR;
        }
    }
    return 1;
}

/* ---- ops by name, records by op ---- */

static const struct trace_file *ranks_sort_tf;
static int ranks_by_name(const void *x, const void *y)
{
    return strcmp(ranks_sort_tf->ops[*(const uint32_t *)x].name, ranks_sort_tf->ops[*(const uint32_t *)y].name);
}

/* tf's op indices sorted by name (the caller frees) */
static uint32_t *ranks_name_index(const struct trace_file *tf)
{
    uint32_t *ix = dt_malloc((tf->nops ? tf->nops : 1) * sizeof *ix);
    for (uint32_t i = 0; i < tf->nops; i++)
        ix[i] = i;
    ranks_sort_tf = tf;
    qsort(ix, tf->nops, sizeof *ix, ranks_by_name);
    return ix;
}

static int32_t ranks_find(const struct trace_file *tf, const uint32_t *ix, const char *name)
{
    size_t lo = 0, hi = tf->nops;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(tf->ops[ix[mid]].name, name);
        if (c == 0)
            return (int32_t)ix[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* The record of op in step s, or NULL (records are in op order). */
static const struct trace_oprec *ranks_rec(const struct trace_file *tf, uint64_t s, int32_t op)
{
    if (op < 0 || s >= tf->nsteps)
        return NULL;
    const struct trace_step *st = &tf->steps[s];
    size_t lo = 0, hi = st->nrec;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (st->rec[mid].op == (uint32_t)op)
            return &st->rec[mid];
        if (st->rec[mid].op < (uint32_t)op)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The update a leaf names as its value from the previous step, or -1. */
static int32_t ranks_writer(const struct trace_file *tf, uint32_t i)
{
    const struct trace_opdef *o = &tf->ops[i];
    if ((o->kind != TRACE_KIND_PARAM && o->kind != TRACE_KIND_STATE) || o->ninputs != 1 ||
        !(o->inputs[0] & TRACE_INPUT_PREV) || (o->inputs[0] & ~TRACE_INPUT_PREV) >= tf->nops)
        return -1;
    return (int32_t)(o->inputs[0] & ~TRACE_INPUT_PREV);
}

/* The leaf that names update u as its writer, or -1. */
static int32_t ranks_leaf_of(const struct trace_file *tf, uint32_t u)
{
    for (uint32_t i = 0; i < tf->nops; i++)
        if (ranks_writer(tf, i) == (int32_t)u)
            return (int32_t)i;
    return -1;
}

/* ---- telling the odd ranks ---- */

/* The trace of the lowest rank above `after` (-1: the lowest) among those
 * whose odd flag is `odd`, or -1: the traces in rank order. */
static int ranks_next(const struct ranks_result *r, int64_t after, int odd)
{
    int best = -1;
    for (int k = 0; k < r->n; k++)
        if (r->odd[k] == odd && r->rank[k] > after && (best < 0 || r->rank[k] < r->rank[best]))
            best = k;
    return best;
}

/* The reference among per-trace values v (valid where has[k]): the value
 * most traces hold, or, with no single one, the lowest rank's. Sets odd,
 * nodd, ref and basis. */
static void ranks_vote(struct ranks_result *r, const uint64_t *v, const uint8_t *has)
{
    int best = -1, bestn = 0, tie = 0;
    for (int k = 0; k < r->n; k++) {
        if (!has[k])
            continue;
        int c = 0;
        for (int q = 0; q < r->n; q++)
            c += has[q] && v[q] == v[k];
        if (c > bestn || (c == bestn && r->rank[k] < r->rank[best])) {
            tie = c == bestn && best >= 0 && v[k] != v[best];
            best = k;
            bestn = c;
        } else if (c == bestn && v[k] != v[best]) {
            tie = 1;
        }
    }
    r->basis = tie || bestn < 2 ? RANKS_BASIS_LOWEST : RANKS_BASIS_MAJORITY;
    r->nodd = 0;
    for (int k = 0; k < r->n; k++) {
        r->odd[k] = !has[k] || v[k] != v[best];
        r->nodd += r->odd[k];
    }
    r->ref = ranks_next(r, -1, 0);
}

/* Odd ranks from evidence: those with bad[k] set, when some are and some
 * not (1); else 0 and nothing is set. */
static int ranks_evidence(struct ranks_result *r, const uint8_t *bad)
{
    int nb = 0;
    for (int k = 0; k < r->n; k++)
        nb += bad[k];
    if (nb == 0 || nb == r->n)
        return 0;
    memcpy(r->odd, bad, (size_t)r->n);
    r->basis = RANKS_BASIS_EVIDENCE;
    r->nodd = nb;
    r->ref = ranks_next(r, -1, 0);
    return 1;
}

/* ---- the comparison ---- */

static void ranks_shape(const struct trace_opdef *o, char *out, size_t n)
{
    size_t len = 0;
    out[0] = 0;
    for (int d = 0; d < o->ndim && len < n; d++)
        len += (size_t)snprintf(out + len, n - len, "%s%u", d ? "x" : "", o->shape[d]);
}

/* The replicated op lists: a hash of each trace's (name, kind, type,
 * shape) in name order. When they differ: the vote, and how the first odd
 * trace's differ from the reference's (in what). 1 when they differ. */
static int ranks_ops(struct ranks_result *r, uint32_t *const *ix, char *what, size_t n)
{
    uint64_t *sig = dt_calloc((size_t)r->n, sizeof *sig);
    uint8_t *has = dt_malloc((size_t)r->n);
    int differ = 0;
    for (int k = 0; k < r->n; k++) {
        const struct trace_file *t = r->tf[k];
        uint64_t h = 0x9e3779b97f4a7c15ull;
        for (uint32_t q = 0; q < t->nops; q++) {
            const struct trace_opdef *o = &t->ops[ix[k][q]];
            if (!ranks_replicated(o->kind))
                continue;
            uint64_t part[4 + TRACE_MAX_DIM] = {h ^ hash_bytes(o->name, strlen(o->name)),
                                                hash_bytes(o->type, strlen(o->type)), o->kind, o->ndim};
            for (int d = 0; d < TRACE_MAX_DIM; d++)
                part[4 + d] = o->shape[d];
            h = hash_bytes(part, sizeof part);
        }
        sig[k] = h;
        has[k] = 1;
        differ |= h != sig[0];
    }
    what[0] = 0;
    if (differ) {
        ranks_vote(r, sig, has);
        int o = ranks_first_odd(r);
        const struct trace_file *a = r->tf[r->ref], *b = r->tf[o];
        int64_t ra = r->rank[r->ref];
        for (uint32_t i = 0; i < a->nops && !what[0]; i++) { /* the reference's ops in b */
            const struct trace_opdef *x = &a->ops[i];
            if (!ranks_replicated(x->kind))
                continue;
            int32_t j = ranks_find(b, ix[o], x->name);
            const struct trace_opdef *y = j >= 0 ? &b->ops[j] : NULL;
            char sa[64], sb[64];
            if (!y || !ranks_replicated(y->kind)) {
                snprintf(what, n, "it records no %s", x->name);
            } else if (y->kind != x->kind || strcmp(y->type, x->type) || y->ndim != x->ndim ||
                       memcmp(y->shape, x->shape, sizeof x->shape)) {
                ranks_shape(x, sa, sizeof sa);
                ranks_shape(y, sb, sizeof sb);
                snprintf(what, n, "its %s is a %s %s of shape %s, rank %" PRId64 "'s a %s %s of shape %s",
                         x->name, trace_kind_name((enum trace_kind)y->kind), y->type, sb, ra,
                         trace_kind_name((enum trace_kind)x->kind), x->type, sa);
            }
        }
        for (uint32_t j = 0; j < b->nops && !what[0]; j++) /* ops of b only */
            if (ranks_replicated(b->ops[j].kind) && ranks_find(a, ix[r->ref], b->ops[j].name) < 0)
                snprintf(what, n, "it records %s, which rank %" PRId64 " does not", b->ops[j].name, ra);
    }
    free(sig);
    free(has);
    return differ;
}

/* Every common step's replicated records (and inputs, for same_inputs):
 * affected steps, and the first op that differs (1, in *fs and *fop). */
static int ranks_scan(struct ranks_result *r, int32_t *const *map, uint64_t *fs, int32_t *fop)
{
    const struct trace_file *t0 = r->tf[0];
    int found = 0, inputs = 0, same = 1;
    for (uint64_t s = 0; s < r->common; s++) {
        int differs = 0;
        for (uint32_t i = 0; i < t0->nops; i++) {
            uint8_t kind = t0->ops[i].kind;
            int rep = ranks_replicated(kind);
            const struct trace_oprec *p0 = rep || kind == TRACE_KIND_INPUT ? ranks_rec(t0, s, (int32_t)i) : NULL;
            if (!p0)
                continue;
            int all = 1, eq = 1;
            for (int k = 1; k < r->n && all; k++) {
                const struct trace_oprec *p = ranks_rec(r->tf[k], s, map[k][i]);
                all = p != NULL;
                eq = eq && p && p->hash == p0->hash;
            }
            if (!all)
                continue;
            if (!rep) {
                inputs = 1;
                same = same && eq;
                continue;
            }
            r->nrecords++;
            if (!eq) {
                differs = 1;
                if (!found) {
                    found = 1;
                    *fs = s;
                    *fop = (int32_t)i;
                }
            }
        }
        if (differs) {
            if (!r->affected++)
                r->first_affected = s;
            r->last_affected = s;
        }
    }
    r->same_inputs = inputs && same;
    return found;
}

/* The index of tf's checkpoint at step, or -1. */
static int ranks_ckpt_at(const struct trace_file *tf, uint64_t step)
{
    for (uint32_t c = 0; c < tf->nckpt; c++)
        if (tf->ckpt[c].step == step)
            return (int)c;
    return -1;
}

/* The hash of a checkpoint tensor's values (0 when absent). */
static uint64_t ranks_tensor_hash(const struct trace_ckpt *c, const char *name, uint8_t *has)
{
    const struct trace_tensor *t = trace_ckpt_find(c, name);
    *has = t != NULL;
    return t ? hash_tensor(t->data, t->count * sizeof(float)) ^ t->count : 0;
}

/* The checkpoints every trace holds, tensor by tensor: nckpt, and the first
 * step and tensor that differ, with its per-trace hashes in v and has. */
static int ranks_ckpts(struct ranks_result *r, uint64_t *v, uint8_t *has)
{
    struct trace_ckpt *ck = dt_calloc((size_t)r->n, sizeof *ck);
    uint64_t *w = dt_calloc((size_t)r->n, sizeof *w);
    uint8_t *hw = dt_calloc((size_t)r->n, 1);
    int rc = DT_OK;
    for (uint32_t c = 0; c < r->tf[0]->nckpt && rc == DT_OK; c++) {
        uint64_t st = r->tf[0]->ckpt[c].step;
        int all = 1, loaded = 0;
        for (int k = 1; k < r->n && all; k++)
            all = ranks_ckpt_at(r->tf[k], st) >= 0;
        if (!all)
            continue;
        for (int k = 0; k < r->n && rc == DT_OK; k++, loaded++)
            rc = trace_read_ckpt(r->tf[k], (uint32_t)ranks_ckpt_at(r->tf[k], st), &ck[k]);
        for (uint32_t t = 0; rc == DT_OK && r->ckpt_step < 0 && t < ck[0].ntensors; t++) {
            int eq = 1;
            for (int k = 0; k < r->n; k++) {
                w[k] = ranks_tensor_hash(&ck[k], ck[0].t[t].name, &hw[k]);
                eq = eq && hw[k] && w[k] == w[0];
            }
            if (!eq) {
                r->ckpt_step = (int64_t)st;
                snprintf(r->ckpt_tensor, sizeof r->ckpt_tensor, "%s", ck[0].t[t].name);
                memcpy(v, w, (size_t)r->n * sizeof *v);
                memcpy(has, hw, (size_t)r->n);
            }
        }
        r->nckpt += rc == DT_OK;
        for (int k = 0; k < loaded; k++)
            trace_ckpt_free(&ck[k]);
        memset(ck, 0, (size_t)r->n * sizeof *ck);
    }
    free(ck);
    free(w);
    free(hw);
    return rc;
}

/* Elements of the first divergent tensor, the first odd rank's against the
 * reference's, from the checkpoint at its step when every trace has one. */
static int ranks_elements(struct ranks_result *r, int o)
{
    int ca = ranks_ckpt_at(r->tf[r->ref], r->step), cb = ranks_ckpt_at(r->tf[o], r->step);
    if (ca < 0 || cb < 0)
        return DT_OK;
    struct trace_ckpt a, b;
    if (trace_read_ckpt(r->tf[r->ref], (uint32_t)ca, &a) < 0)
        return DT_ERR;
    if (trace_read_ckpt(r->tf[o], (uint32_t)cb, &b) < 0) {
        trace_ckpt_free(&a);
        return DT_ERR;
    }
    const struct trace_tensor *x = trace_ckpt_find(&a, r->name), *y = trace_ckpt_find(&b, r->name);
    if (x && y && x->count == y->count) {
        r->have_elements = 1;
        r->elements = x->count;
        for (uint64_t e = 0; e < x->count; e++) {
            if (memcmp(&x->data[e], &y->data[e], sizeof(float)) == 0)
                continue;
            r->elements_differ++;
            uint64_t u = diff_ulp(x->data[e], y->data[e]);
            if (u > r->max_ulp)
                r->max_ulp = u;
        }
    }
    trace_ckpt_free(&a);
    trace_ckpt_free(&b);
    return DT_OK;
}

/* The cause of the first divergent record (step s, the first trace's op i)
 * and the odd ranks: evidence where the records give it, else the vote. */
static void ranks_cause_of(struct ranks_result *r, int32_t *const *map, uint64_t s, int32_t i)
{
    const struct trace_file *t0 = r->tf[0];
    uint8_t kind = t0->ops[i].kind;
    uint64_t *v = dt_calloc((size_t)r->n, sizeof *v);
    uint8_t *has = dt_malloc((size_t)r->n), *bad = dt_calloc((size_t)r->n, 1);
    for (int k = 0; k < r->n; k++) {
        v[k] = ranks_rec(r->tf[k], s, map[k][i])->hash;
        has[k] = 1;
    }
    /* a leaf against the update that wrote it in step s - 1 (which agreed:
     * step s is the first that differs); an update against its leaf */
    int32_t w = kind == TRACE_KIND_OPTIMIZER ? ranks_leaf_of(t0, (uint32_t)i) : ranks_writer(t0, (uint32_t)i);
    int evidence = w >= 0 && (kind == TRACE_KIND_OPTIMIZER || s > 0);
    for (int k = 0; k < r->n && evidence; k++) {
        const struct trace_oprec *p = ranks_rec(r->tf[k], kind == TRACE_KIND_OPTIMIZER ? s : s - 1, map[k][w]);
        evidence = p != NULL;
        if (p)
            bad[k] = kind == TRACE_KIND_OPTIMIZER ? p->hash == v[k] : p->hash != v[k];
    }
    if (kind == TRACE_KIND_GRAD)
        r->cause = RANKS_CAUSE_GRAD;
    else if (kind == TRACE_KIND_OPTIMIZER)
        r->cause = evidence && ranks_evidence(r, bad) ? RANKS_CAUSE_SKIPPED : RANKS_CAUSE_UPDATE;
    else if (s == 0)
        r->cause = RANKS_CAUSE_START;
    else if (evidence)
        r->cause = RANKS_CAUSE_CHANGED;
    else
        r->cause = RANKS_CAUSE_LEAF;
    if (r->cause != RANKS_CAUSE_SKIPPED && !(r->cause == RANKS_CAUSE_CHANGED && ranks_evidence(r, bad)))
        ranks_vote(r, v, has);
    free(v);
    free(has);
    free(bad);
}

/* "rank 0's", "that of ranks 0 and 2", "that of the 7 ranks that agree" */
static void ranks_ref_phrase(const struct ranks_result *r, char *out, size_t n)
{
    int nref = r->n - r->nodd, seen = 0;
    if (nref == 1 || nref > 3) {
        if (nref == 1)
            snprintf(out, n, "rank %" PRId64 "'s", r->rank[r->ref]);
        else
            snprintf(out, n, "that of the %d ranks that agree", nref);
        return;
    }
    size_t len = (size_t)snprintf(out, n, "that of ranks");
    for (int k = ranks_next(r, -1, 0); k >= 0 && len < n; k = ranks_next(r, r->rank[k], 0))
        len += (size_t)snprintf(out + len, n - len, "%s %" PRId64, seen++ == 0 ? "" : seen == nref ? " and" : ",",
                                r->rank[k]);
}

int ranks_first_odd(const struct ranks_result *r)
{
    return ranks_next(r, -1, 1);
}

/* r->text: the finding for the first odd rank. */
static void ranks_describe(struct ranks_result *r, const char *opswhat)
{
    if (r->cause == RANKS_AGREE)
        return;
    const struct trace_file *t0 = r->tf[0];
    int o = ranks_first_odd(r);
    int64_t ro = r->rank[o];
    char ref[160], el[96] = "", *out = r->text;
    size_t n = sizeof r->text, len;
    ranks_ref_phrase(r, ref, sizeof ref);
    if (r->have_elements)
        snprintf(el, sizeof el, "%" PRIu64 " of %" PRIu64 " elements differ", r->elements_differ, r->elements);
    const char *wname = "";
    if (r->op >= 0) {
        int32_t w = r->cause == RANKS_CAUSE_SKIPPED ? ranks_leaf_of(t0, (uint32_t)r->op)
                                                    : ranks_writer(t0, (uint32_t)r->op);
        wname = w >= 0 ? t0->ops[w].name : "";
    }
    switch (r->cause) {
    case RANKS_CAUSE_OPS: { /* "are not rank 0's", "are not those of ranks 0 and 1" */
        int plural = strncmp(ref, "that ", 5) == 0;
        len = (size_t)snprintf(out, n, "rank %" PRId64 "'s parameters, gradients and updates are not %s%s: %s",
                               ro, plural ? "those " : "", ref + (plural ? 5 : 0), opswhat);
        break;
    }
    case RANKS_CAUSE_START:
        len = (size_t)snprintf(out, n, "rank %" PRId64 "'s %s is not %s at the start of step 0: the replicas "
                               "began with different %s%s%s%s", ro, r->name, ref,
                               t0->ops[r->op].kind == TRACE_KIND_STATE ? "optimizer state" : "parameters",
                               el[0] ? " (" : "", el, el[0] ? ")" : "");
        break;
    case RANKS_CAUSE_CHANGED:
        if (r->basis == RANKS_BASIS_EVIDENCE)
            len = (size_t)snprintf(out, n, "rank %" PRId64 "'s %s is not %s at the start of step %" PRIu64
                                   ": it changed between steps %" PRIu64 " and %" PRIu64 ", after an update "
                                   "that agreed across ranks (it is not what %s wrote: silent data corruption%s%s)",
                                   ro, r->name, ref, r->step, r->step - 1, r->step, wname, el[0] ? "; " : "", el);
        else
            len = (size_t)snprintf(out, n, "rank %" PRId64 "'s %s is not %s at the start of step %" PRIu64
                                   ": it changed between steps %" PRIu64 " and %" PRIu64 " in every rank (no "
                                   "rank's is what %s wrote%s%s)", ro, r->name, ref, r->step, r->step - 1,
                                   r->step, wname, el[0] ? "; " : "", el);
        break;
    case RANKS_CAUSE_LEAF:
        len = (size_t)snprintf(out, n, "rank %" PRId64 "'s %s is not %s at the start of step %" PRIu64
                               " (the traces record no update that wrote it%s%s)", ro, r->name, ref, r->step,
                               el[0] ? "; " : "", el);
        break;
    case RANKS_CAUSE_GRAD:
        len = (size_t)snprintf(out, n, "rank %" PRId64 "'s %s is not %s in step %" PRIu64 ": rank %" PRId64
                               " computed another gradient from parameters that agreed (one not reduced with "
                               "the other ranks', or changed after the reduction)", ro, r->name, ref, r->step, ro);
        break;
    case RANKS_CAUSE_UPDATE:
        len = (size_t)snprintf(out, n, "rank %" PRId64 "'s %s is not %s in step %" PRIu64 ": rank %" PRId64
                               " computed another update from inputs that agreed", ro, r->name, ref, r->step, ro);
        break;
    case RANKS_CAUSE_SKIPPED:
        len = (size_t)snprintf(out, n, "rank %" PRId64 "'s %s is not %s in step %" PRIu64 ": rank %" PRId64
                               " computed another update, one that left %s as it was (a skipped optimizer "
                               "step)", ro, r->name, ref, r->step, ro, wname);
        break;
    default: /* RANKS_CAUSE_CKPT */
        len = (size_t)snprintf(out, n, "rank %" PRId64 "'s checkpoint tensor %s is not %s at the start of step %"
                               PRIu64 " (the records %s%s%s)", ro, r->name, ref, r->step,
                               r->nrecords ? "agree up to there" : "are not kept", el[0] ? "; " : "", el);
        break;
    }
    if (len < n && r->affected)
        len += (size_t)snprintf(out + len, n - len, "; %" PRIu64 " of %" PRIu64 " steps affected", r->affected,
                                r->common);
    if (len < n && r->basis == RANKS_BASIS_LOWEST)
        snprintf(out + len, n - len, "; no majority among the ranks: measured against rank %" PRId64,
                 r->rank[r->ref]);
}

int ranks_compare(struct trace_file **tf, int n, struct ranks_result *r)
{
    memset(r, 0, sizeof *r);
    r->n = n;
    r->tf = tf;
    r->rank = dt_calloc((size_t)n, sizeof *r->rank);
    r->label = dt_calloc((size_t)n, sizeof *r->label);
    r->odd = dt_calloc((size_t)n, 1);
    r->op = -1;
    r->ckpt_step = -1;
    r->common = UINT64_MAX;
    for (int k = 0; k < n; k++) {
        if (ranks_keys(tf[k], &r->rank[k], &r->world, &r->job) != 1) {
            dt_error_set("%s is not a rank of a torch.distributed job", tf[k]->path);
            return DT_ERR;
        }
        if (k < 26)
            snprintf(r->label[k], sizeof r->label[k], "%c", 'A' + k);
        else
            snprintf(r->label[k], sizeof r->label[k], "%c%c", 'A' + k / 26 - 1, 'A' + k % 26);
        if (tf[k]->nsteps == 0) {
            dt_error_set("%s holds no step (%s): there is nothing to compare", tf[k]->path,
                         tf[k]->complete ? "the run recorded none" : tf[k]->note);
            return DT_ERR;
        }
        if (tf[k]->nsteps < r->common)
            r->common = tf[k]->nsteps;
    }
    uint32_t **ix = dt_calloc((size_t)n, sizeof *ix);
    int32_t **map = dt_calloc((size_t)n, sizeof *map);
    for (int k = 0; k < n; k++) {
        ix[k] = ranks_name_index(tf[k]);
        map[k] = dt_malloc((tf[0]->nops ? tf[0]->nops : 1) * sizeof **map);
        for (uint32_t i = 0; i < tf[0]->nops; i++)
            map[k][i] = k ? ranks_find(tf[k], ix[k], tf[0]->ops[i].name) : (int32_t)i;
    }
    for (uint32_t i = 0; i < tf[0]->nops; i++)
        if (ranks_replicated(tf[0]->ops[i].kind))
            r->nkind[tf[0]->ops[i].kind]++;
    char opswhat[600];
    uint64_t fs = 0, *cv = dt_calloc((size_t)n, sizeof *cv);
    int32_t fop = -1;
    uint8_t *chas = dt_calloc((size_t)n, 1);
    int rc = DT_OK;
    if (ranks_ops(r, ix, opswhat, sizeof opswhat)) {
        r->cause = RANKS_CAUSE_OPS;
        r->compared = 1;
    } else {
        int found = ranks_scan(r, map, &fs, &fop);
        rc = ranks_ckpts(r, cv, chas);
        int leaf = found && (tf[0]->ops[fop].kind == TRACE_KIND_PARAM || tf[0]->ops[fop].kind == TRACE_KIND_STATE);
        if (rc == DT_OK && r->ckpt_step >= 0 &&
            (!found || (uint64_t)r->ckpt_step < fs || ((uint64_t)r->ckpt_step == fs && !leaf))) {
            r->cause = RANKS_CAUSE_CKPT;
            r->step = (uint64_t)r->ckpt_step;
            snprintf(r->name, sizeof r->name, "%s", r->ckpt_tensor);
            r->op = ranks_find(tf[0], ix[0], r->name);
            ranks_vote(r, cv, chas);
        } else if (rc == DT_OK && found) {
            r->step = fs;
            r->op = fop;
            snprintf(r->name, sizeof r->name, "%s", tf[0]->ops[fop].name);
            ranks_cause_of(r, map, fs, fop);
        }
        if (rc == DT_OK && (r->cause == RANKS_CAUSE_CKPT || leaf))
            rc = ranks_elements(r, ranks_first_odd(r));
        r->compared = r->nrecords > 0 || r->nckpt > 0;
    }
    r->agree = rc == DT_OK && r->compared && r->cause == RANKS_AGREE;
    if (rc == DT_OK)
        ranks_describe(r, opswhat);
    for (int k = 0; k < n; k++) {
        free(ix[k]);
        free(map[k]);
    }
    free(ix);
    free(map);
    free(cv);
    free(chas);
    return rc;
}

void ranks_result_free(struct ranks_result *r)
{
    free(r->rank);
    free(r->label);
    free(r->odd);
    memset(r, 0, sizeof *r);
}

/* ---- the report ---- */

static const char *ranks_cause_name(enum ranks_cause c)
{
    static const char *const names[] = {"agree", "op_lists", "different_start", "changed_between_steps",
                                        "leaf_differs", "another_gradient", "another_update",
                                        "skipped_update", "checkpoint"};
    return names[c];
}

/* How the odd ranks were told: "rank 0's is what fc1.weight.update wrote
 * in step 3 (which agreed across ranks), rank 1's is not", ... */
static const char *ranks_basis_text(const struct ranks_result *r, int o, char *buf, size_t n)
{
    const struct trace_file *t0 = r->tf[0];
    int32_t w = r->op < 0 ? -1 : r->cause == RANKS_CAUSE_SKIPPED ? ranks_leaf_of(t0, (uint32_t)r->op)
                                                                 : ranks_writer(t0, (uint32_t)r->op);
    if (r->basis == RANKS_BASIS_EVIDENCE && w >= 0 && r->cause == RANKS_CAUSE_SKIPPED)
        snprintf(buf, n, "rank %" PRId64 "'s update left %s as it was, rank %" PRId64 "'s did not", r->rank[o],
                 t0->ops[w].name, r->rank[r->ref]);
    else if (r->basis == RANKS_BASIS_EVIDENCE && w >= 0)
        snprintf(buf, n, "rank %" PRId64 "'s is what %s wrote in step %" PRIu64 " (which agreed across ranks), "
                 "rank %" PRId64 "'s is not", r->rank[r->ref], t0->ops[w].name, r->step - 1, r->rank[o]);
    else if (r->basis == RANKS_BASIS_MAJORITY)
        snprintf(buf, n, "by majority, %d of %d ranks", r->n - r->nodd, r->n);
    else
        snprintf(buf, n, "no majority: measured against the lowest rank");
    return buf;
}

/* Whether key is one every rank sets to its own value. */
static int ranks_own_key(const char *key)
{
    return strcmp(key, "rank") == 0 || strcmp(key, "local_rank") == 0;
}

/* Keys other than the rank keys whose values differ between the traces,
 * each given to fn (when not NULL) with its index; their number. */
static int ranks_each_change(const struct ranks_result *r, FILE *f,
                             void (*fn)(FILE *, const struct ranks_result *, const char *, int))
{
    int nch = 0;
    for (int k = 0; k < r->n; k++)
        for (size_t i = 0; i < r->tf[k]->cfg.n; i++) {
            const char *key = r->tf[k]->cfg.key[i], *v = r->tf[k]->cfg.val[i];
            int first = 1, differ = 0;
            for (int q = 0; q < k && first; q++)
                first = trace_config_get(&r->tf[q]->cfg, key) == NULL;
            for (int q = 0; q < r->n && !differ; q++) {
                const char *w = trace_config_get(&r->tf[q]->cfg, key);
                differ = !w || strcmp(w, v) != 0;
            }
            if (first && differ && !ranks_own_key(key) && fn)
                fn(f, r, key, nch);
            nch += first && differ && !ranks_own_key(key);
        }
    return nch;
}

static void ranks_text_change(FILE *f, const struct ranks_result *r, const char *key, int i)
{
    if (i == 0)
        fprintf(f, "configurations differ beyond the rank keys:\n");
    fprintf(f, "  %-18s", key);
    for (int k = 0; k < r->n; k++) {
        const char *v = trace_config_get(&r->tf[k]->cfg, key);
        fprintf(f, "%s%s", k ? " | " : " ", v ? v : "(absent)");
    }
    fputc('\n', f);
}

static void ranks_json_change(FILE *f, const struct ranks_result *r, const char *key, int i)
{
    fprintf(f, "%s{\"key\": ", i ? ", " : "");
    json_put_str(f, key);
    fprintf(f, ", \"values\": [");
    for (int k = 0; k < r->n; k++) {
        const char *v = trace_config_get(&r->tf[k]->cfg, key);
        fputs(k ? ", " : "", f);
        if (v)
            json_put_str(f, v);
        else
            fputs("null", f);
    }
    fputs("]}", f);
}

void ranks_print_text(FILE *f, const struct ranks_result *r, int losses)
{
    char buf[256];
    fprintf(f, "ranks of job %s (world size %" PRId64 "): %d traces, compared as replicas\n", r->job, r->world,
            r->n);
    for (int k = 0; k < r->n; k++) {
        const struct trace_file *t = r->tf[k];
        fprintf(f, "%s: %s (rank %" PRId64 ", %" PRIu64 " steps, %s)\n", r->label[k], t->path, r->rank[k],
                t->nsteps, !t->complete ? t->note : t->end_status ? "complete, ended early" : "complete");
    }
    if (ranks_each_change(r, f, ranks_text_change) == 0)
        fprintf(f, "configurations: identical but for the rank keys\n");
    for (int k = 0; k < r->n; k++)
        for (uint32_t e = 0; e < r->tf[k]->nevents; e++)
            fprintf(f, "%s event: %s\n", r->label[k], r->tf[k]->events[e].text);
    int uneven = 0;
    for (int k = 0; k < r->n; k++)
        uneven |= r->tf[k]->nsteps != r->common;
    if (uneven)
        fprintf(f, "compared over the %" PRIu64 " steps every rank holds\n", r->common);
    static const char *const what[TRACE_KIND_COUNT] = {
        [TRACE_KIND_PARAM] = "parameters", [TRACE_KIND_STATE] = "optimizer states",
        [TRACE_KIND_GRAD] = "gradients", [TRACE_KIND_OPTIMIZER] = "updates"};
    size_t len = 0;
    for (int k = 0; k < TRACE_KIND_COUNT; k++)
        if (r->nkind[k] && len < sizeof buf)
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%u %s", len ? ", " : "", r->nkind[k], what[k]);
    if (len)
        fprintf(f, "held bitwise equal across ranks: %s a step (%" PRIu64 " records)", buf, r->nrecords);
    else
        fprintf(f, "held bitwise equal across ranks: no records (the traces keep none of parameters, gradients "
                "or updates)");
    if (r->nckpt)
        fprintf(f, " and the tensors of %d checkpoint%s", r->nckpt, r->nckpt == 1 ? "" : "s");
    fprintf(f, "; inputs, module outputs and losses are each rank's own\n");
    if (r->agree) {
        fprintf(f, "replicas agree: every replicated record and checkpoint tensor is bitwise equal across the %d "
                "ranks in all %" PRIu64 " common steps\n", r->n, r->common);
    } else if (!r->compared) {
        fprintf(f, "nothing compared: the traces keep no records of parameters, gradients or updates and share "
                "no checkpoint (record at level param or op, or with checkpoints)\n");
    } else if (r->cause != RANKS_AGREE) {
        if (r->cause == RANKS_CAUSE_OPS)
            fprintf(f, "replicas part: the ranks record other parameters, gradients or updates\n");
        else if (r->cause == RANKS_CAUSE_CKPT)
            fprintf(f, "replicas part: step %" PRIu64 ", checkpoint tensor %s (at the start of the step)\n",
                    r->step, r->name);
        else
            fprintf(f, "replicas part: step %" PRIu64 ", op %d %s (%s, %s)\n", r->step, r->op, r->name,
                    trace_kind_name((enum trace_kind)r->tf[0]->ops[r->op].kind),
                    r->cause <= RANKS_CAUSE_LEAF ? "at the start of the step" : "in the step");
        int o = ranks_first_odd(r);
        fprintf(f, "  rank %" PRId64 " (%s) differs from rank %" PRId64 " (%s): %s\n", r->rank[o], r->label[o],
                r->rank[r->ref], r->label[r->ref], ranks_basis_text(r, o, buf, sizeof buf));
        for (int k = 0; k < r->n; k++)
            if (r->odd[k] && k != o)
                fprintf(f, "  rank %" PRId64 " (%s) differs too\n", r->rank[k], r->label[k]);
        if (r->have_elements)
            fprintf(f, "  elements differ: %" PRIu64 " of %" PRIu64 ", max ULP distance %" PRIu64
                    " (the checkpoints at step %" PRIu64 ")\n", r->elements_differ, r->elements, r->max_ulp,
                    r->step);
        if (r->affected)
            fprintf(f, "  steps affected: %" PRIu64 " of %" PRIu64 " (the first %" PRIu64 ", the last %" PRIu64
                    ")\n", r->affected, r->common, r->first_affected, r->last_affected);
        if (r->ckpt_step >= 0)
            fprintf(f, "  checkpoints: the first whose tensors differ is at step %" PRId64 " (%s)\n", r->ckpt_step,
                    r->ckpt_tensor);
        else if (r->nckpt && r->cause != RANKS_CAUSE_OPS)
            fprintf(f, "  checkpoints: all %d agree\n", r->nckpt);
        fprintf(f, "  finding: %s\n", r->text);
    }
    if (r->same_inputs)
        fprintf(f, "note: every rank read the same inputs in all %" PRIu64 " common steps: is the data split "
                "between them (a DistributedSampler)?\n", r->common);
    if (losses) {
        fprintf(f, "final loss (each rank's own batches):");
        for (int k = 0; k < r->n; k++)
            fprintf(f, "%s %s %.6f", k ? "," : "", r->label[k], r->tf[k]->steps[r->tf[k]->nsteps - 1].loss);
        fputc('\n', f);
    }
}

static void ranks_json_ranks(FILE *f, const struct ranks_result *r, int odd)
{
    fputc('[', f);
    for (int k = ranks_next(r, -1, odd), m = 0; k >= 0; k = ranks_next(r, r->rank[k], odd))
        fprintf(f, "%s%" PRId64, m++ ? ", " : "", r->rank[k]);
    fputc(']', f);
}

void ranks_print_json(FILE *f, const struct ranks_result *r)
{
    fprintf(f, "\"ranks\": true, \"job\": ");
    json_put_str(f, r->job);
    fprintf(f, ", \"world_size\": %" PRId64 ",\n \"traces\": [", r->world);
    for (int k = 0; k < r->n; k++) {
        const struct trace_file *t = r->tf[k];
        fprintf(f, "%s{\"label\": \"%s\", \"path\": ", k ? ",\n  " : "", r->label[k]);
        json_put_str(f, t->path);
        fprintf(f, ", \"rank\": %" PRId64 ", \"steps\": %" PRIu64 ", \"complete\": %s, \"final_loss\": ", r->rank[k],
                t->nsteps, t->complete ? "true" : "false");
        json_put_num(f, t->steps[t->nsteps - 1].loss);
        fprintf(f, ", \"events\": [");
        for (uint32_t e = 0; e < t->nevents; e++) {
            fputs(e ? ", " : "", f);
            json_put_str(f, t->events[e].text);
        }
        fputc(']', f);
        fputc('}', f);
    }
    fprintf(f, "],\n \"config_changes\": [");
    ranks_each_change(r, f, ranks_json_change);
    fprintf(f, "], \"common_steps\": %" PRIu64 ", \"replicated\": {\"param\": %u, \"state\": %u, \"grad\": %u, "
            "\"optimizer\": %u}, \"records_compared\": %" PRIu64 ", \"checkpoints_compared\": %d,\n \"compared\": %s, "
            "\"identical\": %s, \"first_divergence\": ", r->common, r->nkind[TRACE_KIND_PARAM],
            r->nkind[TRACE_KIND_STATE], r->nkind[TRACE_KIND_GRAD], r->nkind[TRACE_KIND_OPTIMIZER], r->nrecords,
            r->nckpt, r->compared ? "true" : "false", r->agree ? "true" : "false");
    if (r->cause == RANKS_AGREE) {
        fputs("null", f);
    } else {
        fprintf(f, "{\"cause\": \"%s\", \"step\": ", ranks_cause_name(r->cause));
        if (r->cause == RANKS_CAUSE_OPS)
            fputs("null, \"op\": null, \"name\": null, \"kind\": null", f);
        else {
            fprintf(f, "%" PRIu64 ", \"op\": ", r->step);
            if (r->op >= 0)
                fprintf(f, "%d", r->op);
            else
                fputs("null", f);
            fprintf(f, ", \"name\": ");
            json_put_str(f, r->name);
            fprintf(f, ", \"kind\": ");
            if (r->cause == RANKS_CAUSE_CKPT)
                fputs("\"checkpoint\"", f);
            else
                fprintf(f, "\"%s\"", trace_kind_name((enum trace_kind)r->tf[0]->ops[r->op].kind));
        }
        fprintf(f, ", \"odd_ranks\": ");
        ranks_json_ranks(f, r, 1);
        fprintf(f, ", \"reference_ranks\": ");
        ranks_json_ranks(f, r, 0);
        fprintf(f, ", \"basis\": \"%s\"", r->basis == RANKS_BASIS_EVIDENCE ? "evidence"
                                          : r->basis == RANKS_BASIS_MAJORITY ? "majority" : "lowest_rank");
        if (r->have_elements)
            fprintf(f, ", \"elements_differ\": %" PRIu64 ", \"elements\": %" PRIu64 ", \"max_ulp\": %" PRIu64,
                    r->elements_differ, r->elements, r->max_ulp);
        fputc('}', f);
    }
    fprintf(f, ",\n \"steps_affected\": %" PRIu64 ", \"first_affected\": ", r->affected);
    if (r->affected)
        fprintf(f, "%" PRIu64 ", \"last_affected\": %" PRIu64, r->first_affected, r->last_affected);
    else
        fputs("null, \"last_affected\": null", f);
    fprintf(f, ", \"first_checkpoint_differs\": ");
    if (r->ckpt_step >= 0) {
        fprintf(f, "{\"step\": %" PRId64 ", \"tensor\": ", r->ckpt_step);
        json_put_str(f, r->ckpt_tensor);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fprintf(f, ", \"same_inputs\": %s, \"finding\": ", r->same_inputs ? "true" : "false");
    json_put_str(f, r->text);
}
