/* escape_pairs.c: the traces under a directory paired by their header keys,
 * each pair's divergence onset and escape difference, and their correlation
 * (the pairing rule is in escape_pairs.h and divtrace-escape(1)). */
#include "escape_pairs.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"

/* Deeper than any sweep layout; stops a cycle of bind mounts. */
#define ESCAPE_PAIRS_MAX_DEPTH 32

int escape_pairs_keys(const char *list, char ***keys, size_t *nkeys)
{
    size_t n = 1;
    for (const char *s = list; *s; s++)
        n += *s == ',';
    char **k = dt_calloc(n, sizeof *k);
    size_t i = 0;
    for (const char *s = list;; i++) {
        size_t len = strcspn(s, ",");
        if (len == 0) {
            dt_error_set("--pair-key '%s': an empty key (expected K1,K2,...)", list);
            for (size_t j = 0; j < i; j++)
                free(k[j]);
            free(k);
            return DT_ERR;
        }
        k[i] = dt_malloc(len + 1);
        memcpy(k[i], s, len);
        k[i][len] = 0;
        if (!s[len])
            break;
        s += len + 1;
    }
    *keys = k;
    *nkeys = n;
    return DT_OK;
}

struct escape_pathlist {
    size_t n, cap;
    char **p;
};

static int escape_has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Append the *.dtr regular files under dir (symbolic links to files are
 * followed, to directories not: no cycles). */
static int escape_walk(const char *dir, int depth, struct escape_pathlist *l)
{
    DIR *d = opendir(dir);
    if (!d) {
        dt_error_set("%s: cannot read the directory: %s", dir, strerror(errno));
        return DT_ERR;
    }
    struct dirent *e;
    int rc = DT_OK;
    while (rc == DT_OK && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *path = dt_malloc(len);
        snprintf(path, len, "%s%s%s", dir, escape_has_suffix(dir, "/") ? "" : "/", e->d_name);
        struct stat ls, st;
        if (lstat(path, &ls) < 0) {
            free(path);
            continue; /* vanished while we read */
        }
        if (S_ISDIR(ls.st_mode)) {
            if (depth < ESCAPE_PAIRS_MAX_DEPTH)
                rc = escape_walk(path, depth + 1, l);
            free(path);
        } else if (escape_has_suffix(e->d_name, ".dtr") && stat(path, &st) == 0 &&
                   S_ISREG(st.st_mode)) {
            if (l->n == l->cap) {
                l->cap = l->cap ? 2 * l->cap : 16;
                l->p = dt_realloc(l->p, l->cap * sizeof *l->p);
            }
            l->p[l->n++] = path;
        } else {
            free(path);
        }
    }
    closedir(d);
    return rc;
}

static int escape_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Open a trace for the pairs: a corrupt block is trouble here too. */
static int escape_pairs_open(struct trace_file **tf, const char *path)
{
    if (trace_open(tf, path) < 0)
        return DT_ERR;
    if (strstr((*tf)->note, "corrupt")) {
        dt_error_set("%s: %s", path, (*tf)->note);
        trace_close(*tf);
        return DT_ERR;
    }
    return DT_OK;
}

/* Header, and the first escape of the loss curve. */
static int escape_pairs_load(struct escape_pairs_run *r, const char *path, size_t dirlen,
                             const struct escape_params *p)
{
    struct trace_file *tf;
    if (escape_pairs_open(&tf, path) < 0)
        return DT_ERR;
    r->path = dt_strdup(path);
    r->rel = r->path + dirlen;
    while (*r->rel == '/')
        r->rel++;
    for (size_t k = 0; k < tf->cfg.n; k++)
        trace_config_set(&r->cfg, tf->cfg.key[k], tf->cfg.val[k]);
    r->nsteps = tf->nsteps;
    r->complete = tf->complete;
    size_t n = (size_t)tf->nsteps;
    double *loss = dt_malloc((n ? n : 1) * sizeof *loss);
    for (size_t s = 0; s < n; s++)
        loss[s] = tf->steps[s].loss;
    struct escape_result er;
    escape_analyze(loss, NULL, n, p, &er);
    free(loss);
    r->escape = -1;
    for (size_t i = 0; i < er.nplateaus; i++)
        if (er.plateaus[i].escaped) {
            r->escape = (int64_t)tf->steps[er.plateaus[i].escape].step;
            break;
        }
    escape_result_free(&er);
    trace_close(tf);
    return DT_OK;
}

static int escape_same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int escape_pairs_agree(const struct escape_pairs *ps, size_t i, size_t j)
{
    for (size_t k = 0; k < ps->nkeys; k++)
        if (!escape_same(trace_config_get(&ps->runs[i].cfg, ps->keys[k]),
                         trace_config_get(&ps->runs[j].cfg, ps->keys[k])))
            return 0;
    return 1;
}

static void escape_count_change(void *arg, const char *key, const char *va, const char *vb)
{
    (void)key, (void)va, (void)vb;
    (*(size_t *)arg)++;
}

void escape_pairs_for_each_change(const struct escape_pairs *ps, const struct escape_pair *q,
                                  void (*fn)(void *, const char *, const char *, const char *),
                                  void *arg)
{
    const struct trace_config *a = &ps->runs[q->a].cfg, *b = &ps->runs[q->b].cfg;
    for (size_t k = 0; k < a->n; k++) {
        const char *vb = trace_config_get(b, a->key[k]);
        if (!vb || strcmp(vb, a->val[k]) != 0)
            fn(arg, a->key[k], a->val[k], vb);
    }
    for (size_t k = 0; k < b->n; k++)
        if (!trace_config_get(a, b->key[k]))
            fn(arg, b->key[k], NULL, b->val[k]);
}

/* Compare the pair's traces (opened once per group, in tfs). */
static int escape_pairs_compare(struct escape_pairs *ps, struct escape_pair *q,
                                struct trace_file **tfs)
{
    for (int s = 0; s < 2; s++) {
        size_t i = s ? q->b : q->a;
        if (!tfs[i] && escape_pairs_open(&tfs[i], ps->runs[i].path) < 0)
            return DT_ERR;
    }
    struct trace_file *a = tfs[q->a];
    struct diff_result d;
    if (diff_traces(a, tfs[q->b], &d) < 0)
        return DT_ERR;
    q->diverged = d.diverged;
    q->first_step = d.diverged && d.first_step < a->nsteps ? a->steps[d.first_step].step : d.first_step;
    for (int t = 0; t < DIFF_NTHRESH; t++) {
        q->cross_sketch[t] = 0;
        q->cross[t] = d.cross_ckpt[t];
        if (q->cross[t] < 0 && d.cross_sketch[t] >= 0) {
            uint64_t s = (uint64_t)d.cross_sketch[t];
            q->cross[t] = (int64_t)(s < a->nsteps ? a->steps[s].step : s);
            q->cross_sketch[t] = 1;
        }
    }
    diff_result_free(&d);
    const struct escape_pairs_run *ra = &ps->runs[q->a], *rb = &ps->runs[q->b];
    q->have_escdiff = ra->escape >= 0 && rb->escape >= 0;
    q->escdiff = q->have_escdiff ? rb->escape - ra->escape : 0;
    return DT_OK;
}

static void escape_pairs_correlate(struct escape_pairs *ps, int use_cross,
                                   struct escape_pairs_corr *c)
{
    double *x = dt_malloc((ps->npairs ? ps->npairs : 1) * sizeof *x);
    double *y = dt_malloc((ps->npairs ? ps->npairs : 1) * sizeof *y);
    size_t n = 0;
    for (size_t i = 0; i < ps->npairs; i++) {
        const struct escape_pair *q = &ps->pairs[i];
        if (!q->have_escdiff)
            continue;
        if (use_cross ? q->cross[1] < 0 : !q->diverged)
            continue;
        x[n] = use_cross ? (double)q->cross[1] : (double)q->first_step;
        y[n] = fabs((double)q->escdiff);
        n++;
    }
    c->n = n;
    c->pearson = n >= 3 ? escape_corr_pearson(x, y, n) : NAN;
    c->spearman = n >= 3 ? escape_corr_spearman(x, y, n) : NAN;
    free(x);
    free(y);
}

/* Group order: the first run (by path) of each group; runs of the group in
 * path order after it. */
int escape_pairs_build(const char *dir, char **keys, size_t nkeys, const struct escape_params *p,
                       struct escape_pairs *out)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(dir, &st) < 0) {
        dt_error_set("--pairs %s: %s", dir, strerror(errno));
        return DT_ERR;
    }
    if (!S_ISDIR(st.st_mode)) {
        dt_error_set("--pairs %s: not a directory", dir);
        return DT_ERR;
    }
    out->nkeys = nkeys;
    out->keys = dt_calloc(nkeys ? nkeys : 1, sizeof *out->keys);
    for (size_t k = 0; k < nkeys; k++)
        out->keys[k] = dt_strdup(keys[k]);
    struct escape_pathlist l = {0};
    if (escape_walk(dir, 0, &l) < 0)
        goto fail_paths;
    if (l.n == 0) {
        dt_error_set("--pairs %s: no trace (*.dtr) in it or below it", dir);
        goto fail_paths;
    }
    qsort(l.p, l.n, sizeof *l.p, escape_cmp_str);
    out->runs = dt_calloc(l.n, sizeof *out->runs);
    for (size_t i = 0; i < l.n; i++) {
        if (escape_pairs_load(&out->runs[i], l.p[i], strlen(dir), p) < 0)
            goto fail_paths;
        out->nruns++;
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.p[i]);
    free(l.p);

    size_t R = out->nruns;
    int *group = dt_malloc(R * sizeof *group); /* (R) the group's first run */
    for (size_t i = 0; i < R; i++) {
        group[i] = (int)i;
        for (size_t j = 0; j < i; j++)
            if (group[j] == (int)j && escape_pairs_agree(out, i, j)) {
                group[i] = (int)j;
                break;
            }
    }
    size_t cap = 0;
    struct trace_file **tfs = dt_calloc(R, sizeof *tfs);
    int rc = DT_OK;
    for (size_t g = 0; g < R && rc == DT_OK; g++) {
        if (group[g] != (int)g)
            continue;
        size_t before = out->npairs;
        for (size_t a = g; a < R && rc == DT_OK; a++) {
            if (group[a] != (int)g)
                continue;
            for (size_t b = a + 1; b < R && rc == DT_OK; b++) {
                if (group[b] != (int)g)
                    continue;
                struct escape_pair q = {.a = a, .b = b};
                size_t nchanges = 0;
                escape_pairs_for_each_change(out, &q, escape_count_change, &nchanges);
                if (nchanges == 0)
                    continue; /* one configuration twice: a rerun */
                if (escape_pairs_compare(out, &q, tfs) < 0) {
                    rc = DT_ERR;
                    break;
                }
                if (out->npairs == cap) {
                    cap = cap ? 2 * cap : 16;
                    out->pairs = dt_realloc(out->pairs, cap * sizeof *out->pairs);
                }
                out->pairs[out->npairs++] = q;
                out->runs[a].paired = out->runs[b].paired = 1;
            }
        }
        out->ngroups += out->npairs > before;
        for (size_t i = 0; i < R; i++)   /* the group's traces are done with */
            if (tfs[i]) {
                trace_close(tfs[i]);
                tfs[i] = NULL;
            }
    }
    free(tfs);
    free(group);
    if (rc < 0) {
        escape_pairs_free(out);
        return DT_ERR;
    }
    escape_pairs_correlate(out, 0, &out->corr_first);
    escape_pairs_correlate(out, 1, &out->corr_cross);
    return DT_OK;

fail_paths:
    for (size_t i = 0; i < l.n; i++)
        free(l.p[i]);
    free(l.p);
    escape_pairs_free(out);
    return DT_ERR;
}

void escape_pairs_free(struct escape_pairs *ps)
{
    for (size_t k = 0; k < ps->nkeys; k++)
        free(ps->keys[k]);
    free(ps->keys);
    for (size_t i = 0; i < ps->nruns; i++) {
        free(ps->runs[i].path);
        trace_config_free(&ps->runs[i].cfg);
    }
    free(ps->runs);
    free(ps->pairs);
    memset(ps, 0, sizeof *ps);
}
