/* sweep.c: the sweep file parser (divtrace-sweep(5)): directives to
 * conditions (explicit conditions crossed with every factor's levels), their
 * trials' record arguments and paths, selectors and pair matching. */
#include "sweep.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define SWEEP_MAX_FACTORS (SWEEP_MAX_ATTR - 1)
#define SWEEP_MAX_TRIALS 1000
#define SWEEP_MAX_CONDS 10000

/* A growable list of strings. */
struct sweep_words {
    int n, cap;
    char **w;
};

static void sweep_words_push(struct sweep_words *v, char *s)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 8;
        v->w = dt_realloc(v->w, (size_t)v->cap * sizeof *v->w);
    }
    v->w[v->n++] = s;
}

static void sweep_words_free(struct sweep_words *v)
{
    for (int i = 0; i < v->n; i++)
        free(v->w[i]);
    free(v->w);
    memset(v, 0, sizeof *v);
}

static void sweep_words_append(struct sweep_words *dst, const struct sweep_words *src)
{
    for (int i = 0; i < src->n; i++)
        sweep_words_push(dst, dt_strdup(src->w[i]));
}

/* The parser's state: what the directives said, before expansion. */
struct sweep_xcond {            /* an explicit condition */
    char *name, *group;
    int trials;                 /* 0: the file's default */
    int line;
    struct sweep_words args;
};

struct sweep_level {
    char *name;
    int line;
    struct sweep_words args;
};

struct sweep_factor {
    char *name;
    int nlevels;
    struct sweep_level *level;
};

struct sweep_parser {
    const char *file;
    int line;
    char *name;
    int trials, trials_line;
    struct sweep_words common;
    int nx;
    struct sweep_xcond *x;
    int nfactors;
    struct sweep_factor factor[SWEEP_MAX_FACTORS];
};

/* Set dt_error to "FILE:LINE: message" (or "FILE: message" for line 0). */
static int sweep_fail(const struct sweep_parser *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int sweep_fail(const struct sweep_parser *p, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0)
        dt_error_set("%s:%d: %s", p->file, line, msg);
    else
        dt_error_set("%s: %s", p->file, msg);
    return DT_ERR;
}

/* Split s[0..end) into shell-like words: blanks separate, '...' is literal,
 * "..." allows \" and \\, a backslash outside quotes escapes the next
 * character, '#' at the start of a word begins a comment. With stop_colon,
 * an unquoted ':' ends the words: *rest is set just after it (NULL if there
 * is none). Returns 0, or -1 for an unterminated quote. */
static int sweep_split(const char *s, const char *end, int stop_colon,
                       struct sweep_words *out, const char **rest)
{
    if (rest)
        *rest = NULL;
    size_t cap = (size_t)(end - s) + 1;
    char *buf = dt_malloc(cap);
    const char *q = s;
    for (;;) {
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q >= end || *q == '#')
            break;
        if (stop_colon && *q == ':') {
            *rest = q + 1;
            break;
        }
        size_t len = 0;
        int colon = 0;
        while (q < end && *q != ' ' && *q != '\t' && *q != '\r') {
            if (*q == '\'') {
                const char *c = memchr(q + 1, '\'', (size_t)(end - q - 1));
                if (!c) {
                    free(buf);
                    return DT_ERR;
                }
                memcpy(buf + len, q + 1, (size_t)(c - q - 1));
                len += (size_t)(c - q - 1);
                q = c + 1;
            } else if (*q == '"') {
                q++;
                while (q < end && *q != '"') {
                    if (*q == '\\' && q + 1 < end && (q[1] == '"' || q[1] == '\\'))
                        q++;
                    buf[len++] = *q++;
                }
                if (q >= end) {
                    free(buf);
                    return DT_ERR;
                }
                q++;
            } else if (*q == '\\' && q + 1 < end) {
                buf[len++] = q[1];
                q += 2;
            } else if (stop_colon && *q == ':') {
                colon = 1;
                break;
            } else {
                buf[len++] = *q++;
            }
        }
        buf[len] = 0;
        sweep_words_push(out, dt_strdup(buf));
        if (colon) {
            *rest = q + 1;
            break;
        }
    }
    free(buf);
    return DT_OK;
}

/* Names that become directory names and attribute values: letters, digits,
 * '-', '_', '.', not starting with '.' or '-'. */
static int sweep_name_ok(const char *s)
{
    if (!*s || *s == '.' || *s == '-')
        return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

static int sweep_trials_parse(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > SWEEP_MAX_TRIALS)
        return DT_ERR;
    *out = (int)v;
    return DT_OK;
}

/* Check a word of record options: no output option (the sweep sets it), no
 * placeholder other than {trial} and {cond}. */
static int sweep_arg_check(const struct sweep_parser *p, int line, const char *a)
{
    if (strcmp(a, "-o") == 0 || strncmp(a, "--output", 8) == 0 ||
        (a[0] == '-' && a[1] == 'o' && a[2] != 0 && a[1] != '-'))
        return sweep_fail(p, line, "record option '%s': the output file is set by the sweep", a);
    for (const char *b = strchr(a, '{'); b; b = strchr(b + 1, '{')) {
        const char *e = b + 1;
        while ((*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z') || *e == '_')
            e++;
        if (*e != '}' || e == b + 1)
            continue;
        size_t n = (size_t)(e - b - 1);
        if ((n == 5 && strncmp(b + 1, "trial", 5) == 0) || (n == 4 && strncmp(b + 1, "cond", 4) == 0))
            continue;
        return sweep_fail(p, line, "unknown placeholder '%.*s' (use {trial} or {cond})",
                          (int)(n + 2), b);
    }
    return DT_OK;
}

static int sweep_args_take(const struct sweep_parser *p, int line, const char *rest,
                           const char *end, struct sweep_words *args)
{
    if (!rest)
        return DT_OK;
    if (sweep_split(rest, end, 0, args, NULL) < 0)
        return sweep_fail(p, line, "unterminated quote");
    for (int i = 0; i < args->n; i++)
        if (sweep_arg_check(p, line, args->w[i]) < 0)
            return DT_ERR;
    return DT_OK;
}

static int sweep_dir_condition(struct sweep_parser *p, struct sweep_words *head,
                               const char *rest, const char *end)
{
    int line = p->line;
    if (head->n < 2)
        return sweep_fail(p, line, "condition: expected a name");
    const char *name = head->w[1];
    if (!sweep_name_ok(name))
        return sweep_fail(p, line, "condition name '%s': use letters, digits, '-', '_' and '.'", name);
    for (int i = 0; i < p->nx; i++)
        if (strcmp(p->x[i].name, name) == 0)
            return sweep_fail(p, line, "condition '%s' given twice (first on line %d)", name,
                              p->x[i].line);
    struct sweep_xcond x = {.name = dt_strdup(name), .line = line};
    for (int i = 2; i < head->n; i++) {
        const char *w = head->w[i];
        if (strncmp(w, "group=", 6) == 0) {
            if (x.group) {
                sweep_fail(p, line, "condition '%s': group given twice", name);
                goto fail;
            }
            if (!sweep_name_ok(w + 6)) {
                sweep_fail(p, line, "group '%s': use letters, digits, '-', '_' and '.'", w + 6);
                goto fail;
            }
            x.group = dt_strdup(w + 6);
        } else if (strncmp(w, "trials=", 7) == 0) {
            if (x.trials) {
                sweep_fail(p, line, "condition '%s': trials given twice", name);
                goto fail;
            }
            if (sweep_trials_parse(w + 7, &x.trials) < 0) {
                sweep_fail(p, line, "trials '%s': expected an integer from 1 to %d", w + 7,
                           SWEEP_MAX_TRIALS);
                goto fail;
            }
        } else {
            sweep_fail(p, line, "condition '%s': unknown option '%s' (group=G, trials=N, "
                       "then ':' and the record options)", name, w);
            goto fail;
        }
    }
    if (sweep_args_take(p, line, rest, end, &x.args) < 0)
        goto fail;
    p->x = dt_realloc(p->x, (size_t)(p->nx + 1) * sizeof *p->x);
    p->x[p->nx++] = x;
    return DT_OK;
fail:
    free(x.name);
    free(x.group);
    sweep_words_free(&x.args);
    return DT_ERR;
}

static int sweep_dir_factor(struct sweep_parser *p, struct sweep_words *head,
                            const char *rest, const char *end)
{
    int line = p->line;
    if (head->n != 3)
        return sweep_fail(p, line, "factor: expected 'factor FACTOR LEVEL : OPTIONS...'");
    const char *fname = head->w[1], *lname = head->w[2];
    if (!sweep_name_ok(fname) || strchr(fname, '.'))
        return sweep_fail(p, line, "factor name '%s': use letters, digits, '-' and '_'", fname);
    if (strcmp(fname, "group") == 0)
        return sweep_fail(p, line, "factor name 'group' is reserved for the conditions' groups");
    if (!sweep_name_ok(lname))
        return sweep_fail(p, line, "level name '%s': use letters, digits, '-', '_' and '.'", lname);
    struct sweep_factor *f = NULL;
    for (int i = 0; i < p->nfactors; i++)
        if (strcmp(p->factor[i].name, fname) == 0)
            f = &p->factor[i];
    if (!f) {
        if (p->nfactors == SWEEP_MAX_FACTORS)
            return sweep_fail(p, line, "factor '%s': at most %d factors", fname, SWEEP_MAX_FACTORS);
        f = &p->factor[p->nfactors++];
        memset(f, 0, sizeof *f);
        f->name = dt_strdup(fname);
    }
    for (int i = 0; i < f->nlevels; i++)
        if (strcmp(f->level[i].name, lname) == 0)
            return sweep_fail(p, line, "factor '%s' level '%s' given twice (first on line %d)",
                              fname, lname, f->level[i].line);
    struct sweep_level l = {.name = dt_strdup(lname), .line = line};
    if (sweep_args_take(p, line, rest, end, &l.args) < 0) {
        free(l.name);
        sweep_words_free(&l.args);
        return DT_ERR;
    }
    f->level = dt_realloc(f->level, (size_t)(f->nlevels + 1) * sizeof *f->level);
    f->level[f->nlevels++] = l;
    return DT_OK;
}

/* A selector's syntax: "*" or KEY=VALUE with both parts non-empty. */
static int sweep_sel_syntax(const char *sel)
{
    if (strcmp(sel, "*") == 0)
        return 1;
    const char *eq = strchr(sel, '=');
    return eq && eq != sel && eq[1] != 0;
}

static int sweep_dir_compare(struct sweep_parser *p, struct sweep_spec *s, struct sweep_words *w)
{
    int line = p->line;
    if (w->n < 3)
        return sweep_fail(p, line, "compare: expected 'compare SEL SEL [METRIC...]'");
    for (int k = 1; k <= 2; k++)
        if (!sweep_sel_syntax(w->w[k]))
            return sweep_fail(p, line, "selector '%s': expected KEY=VALUE or '*'", w->w[k]);
    struct sweep_compare c = {.line = line};
    static const char *const names[] = {"final", "escape", "phases"};
    for (int i = 3; i < w->n; i++) {
        int m = -1;
        for (int k = 0; k < 3; k++)
            if (strcmp(w->w[i], names[k]) == 0)
                m = k;
        if (m < 0)
            return sweep_fail(p, line, "compare: unknown metric '%s' (final, escape, phases)", w->w[i]);
        for (int k = 0; k < c.nmetrics; k++)
            if ((int)c.metric[k] == m)
                return sweep_fail(p, line, "compare: metric '%s' given twice", w->w[i]);
        c.metric[c.nmetrics++] = (enum sweep_metric)m;
    }
    if (c.nmetrics == 0)
        c.metric[c.nmetrics++] = SWEEP_METRIC_FINAL;
    c.sel[0] = dt_strdup(w->w[1]);
    c.sel[1] = dt_strdup(w->w[2]);
    s->compare = dt_realloc(s->compare, (size_t)(s->ncompare + 1) * sizeof *s->compare);
    s->compare[s->ncompare++] = c;
    return DT_OK;
}

static int sweep_dir_pair(struct sweep_parser *p, struct sweep_spec *s, struct sweep_words *w)
{
    int line = p->line;
    if (w->n != 3)
        return sweep_fail(p, line, "pair: expected 'pair SEL SEL'");
    for (int k = 1; k <= 2; k++)
        if (!sweep_sel_syntax(w->w[k]))
            return sweep_fail(p, line, "selector '%s': expected KEY=VALUE or '*'", w->w[k]);
    struct sweep_pair pr = {.sel = {dt_strdup(w->w[1]), dt_strdup(w->w[2])}, .line = line};
    s->pair = dt_realloc(s->pair, (size_t)(s->npair + 1) * sizeof *s->pair);
    s->pair[s->npair++] = pr;
    return DT_OK;
}

/* One line (s[0..end)); line number in p->line. */
static int sweep_parse_line(struct sweep_parser *p, struct sweep_spec *s,
                            const char *line, const char *end)
{
    const char *q = line;
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'))
        q++;
    const char *dend = q;
    while (dend < end && *dend != ' ' && *dend != '\t' && *dend != '\r')
        dend++;
    if (q == end || *q == '#')
        return DT_OK;
    size_t dlen = (size_t)(dend - q);
    int rc = DT_OK;
    struct sweep_words w = {0};
    const char *rest = NULL;
    int is_cf = (dlen == 9 && strncmp(q, "condition", 9) == 0) ||
                (dlen == 6 && strncmp(q, "factor", 6) == 0);
    if (sweep_split(q, end, is_cf, &w, &rest) < 0) {
        rc = sweep_fail(p, p->line, "unterminated quote");
        goto out;
    }
    const char *d = w.w[0];
    if (strcmp(d, "name") == 0) {
        if (w.n != 2)
            rc = sweep_fail(p, p->line, "name: expected one word");
        else if (p->name)
            rc = sweep_fail(p, p->line, "name given twice");
        else if (!sweep_name_ok(w.w[1]))
            rc = sweep_fail(p, p->line, "name '%s': use letters, digits, '-', '_' and '.'", w.w[1]);
        else
            p->name = dt_strdup(w.w[1]);
    } else if (strcmp(d, "trials") == 0) {
        if (w.n != 2)
            rc = sweep_fail(p, p->line, "trials: expected one number");
        else if (p->trials_line)
            rc = sweep_fail(p, p->line, "trials given twice (first on line %d)", p->trials_line);
        else if (sweep_trials_parse(w.w[1], &p->trials) < 0)
            rc = sweep_fail(p, p->line, "trials '%s': expected an integer from 1 to %d", w.w[1],
                            SWEEP_MAX_TRIALS);
        else
            p->trials_line = p->line;
    } else if (strcmp(d, "common") == 0) {
        if (w.n < 2)
            rc = sweep_fail(p, p->line, "common: expected record options");
        for (int i = 1; i < w.n && rc == DT_OK; i++)
            rc = sweep_arg_check(p, p->line, w.w[i]);
        for (int i = 1; i < w.n && rc == DT_OK; i++)
            sweep_words_push(&p->common, dt_strdup(w.w[i]));
    } else if (strcmp(d, "condition") == 0) {
        rc = sweep_dir_condition(p, &w, rest, end);
    } else if (strcmp(d, "factor") == 0) {
        rc = sweep_dir_factor(p, &w, rest, end);
    } else if (strcmp(d, "compare") == 0) {
        rc = sweep_dir_compare(p, s, &w);
    } else if (strcmp(d, "pair") == 0) {
        rc = sweep_dir_pair(p, s, &w);
    } else {
        rc = sweep_fail(p, p->line, "unknown directive '%s' (name, trials, common, condition, "
                        "factor, compare, pair)", d);
    }
out:
    sweep_words_free(&w);
    return rc;
}

/* FNV-1a of a condition name, for the duplicate check of sweep_expand. */
static size_t sweep_name_hash(const char *name)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *q = (const unsigned char *)name; *q; q++)
        h = (h ^ *q) * 16777619u;
    return h;
}

/* Expand the explicit conditions (or one unnamed) crossed with the factors. */
static int sweep_expand(struct sweep_parser *p, struct sweep_spec *s)
{
    long total = p->nx ? p->nx : 1;
    for (int f = 0; f < p->nfactors; f++) {
        total *= p->factor[f].nlevels;
        if (total > SWEEP_MAX_CONDS)
            return sweep_fail(p, p->factor[f].level[0].line,
                              "more than %d conditions", SWEEP_MAX_CONDS);
    }
    s->cond = dt_calloc((size_t)total, sizeof *s->cond);
    int *lines = dt_calloc((size_t)total, sizeof *lines);
    /* the conditions made so far by name (open addressing, at most half
     * full): the duplicate check stays linear up to SWEEP_MAX_CONDS */
    size_t nslot = 2;
    while (nslot < 2 * (size_t)total)
        nslot *= 2;
    long *slot = dt_malloc(nslot * sizeof *slot);
    for (size_t i = 0; i < nslot; i++)
        slot[i] = -1;
    int rc = DT_OK;
    int lvl[SWEEP_MAX_FACTORS];
    for (long k = 0; k < total && rc == DT_OK; k++) {
        /* k in mixed radix: explicit condition outermost, the last factor
         * innermost (file order). */
        long r = k;
        for (int f = p->nfactors - 1; f >= 0; f--) {
            lvl[f] = (int)(r % p->factor[f].nlevels);
            r /= p->factor[f].nlevels;
        }
        const struct sweep_xcond *x = p->nx ? &p->x[r] : NULL;
        char name[1024];
        size_t len = 0;
        name[0] = 0;
        int line = x ? x->line : 0;
        if (x)
            len += (size_t)snprintf(name + len, sizeof name - len, "%s", x->name);
        /* FACTOR=LEVEL, not the bare level: "threads=1" says what the
         * condition is where "1" does not (a plot titled "1 vs 2"). Neither
         * ',' nor '=' can be in a name, so no two crossings give one name. */
        for (int f = 0; f < p->nfactors && len < sizeof name; f++) {
            const struct sweep_level *l = &p->factor[f].level[lvl[f]];
            len += (size_t)snprintf(name + len, sizeof name - len, "%s%s=%s", len ? "," : "",
                                    p->factor[f].name, l->name);
            if (l->line > line)
                line = l->line;
        }
        if (len >= sizeof name) {
            rc = sweep_fail(p, line, "condition name too long");
            break;
        }
        if (len == 0)
            snprintf(name, sizeof name, "run");
        struct sweep_cond *c = &s->cond[k];
        s->ncond = (int)k + 1;
        c->name = dt_strdup(name);
        /* An explicit condition's group defaults to its own name, so that
         * group=NAME picks it across the factors' levels. */
        c->group = dt_strdup(x ? (x->group ? x->group : x->name) : name);
        c->trials = x && x->trials ? x->trials : p->trials;
        c->attr[c->nattr].key = dt_strdup("group");
        c->attr[c->nattr++].val = dt_strdup(c->group);
        struct sweep_words args = {0};
        sweep_words_append(&args, &p->common);
        if (x)
            sweep_words_append(&args, &x->args);
        for (int f = 0; f < p->nfactors; f++) {
            const struct sweep_level *l = &p->factor[f].level[lvl[f]];
            c->attr[c->nattr].key = dt_strdup(p->factor[f].name);
            c->attr[c->nattr++].val = dt_strdup(l->name);
            sweep_words_append(&args, &l->args);
        }
        c->nargs = args.n;
        sweep_words_push(&args, NULL);
        c->args = args.w;
        lines[k] = line;
        size_t h = sweep_name_hash(name) & (nslot - 1);
        while (slot[h] >= 0 && strcmp(s->cond[slot[h]].name, name) != 0)
            h = (h + 1) & (nslot - 1);
        if (slot[h] >= 0)
            rc = sweep_fail(p, line, "condition name '%s' given twice (also on line %d)",
                            name, lines[slot[h]]);
        else
            slot[h] = k;
        if (rc == DT_OK && c->nargs == 0)
            rc = sweep_fail(p, line, "condition '%s' has no record options", name);
    }
    free(slot);
    free(lines);
    return rc;
}

/* Whether a selector's key is an attribute the conditions have. */
static int sweep_sel_check(const struct sweep_parser *p, const struct sweep_spec *s,
                           const char *sel, int line)
{
    if (strcmp(sel, "*") != 0) {
        const char *eq = strchr(sel, '=');
        size_t klen = (size_t)(eq - sel);
        int known = (klen == 5 && strncmp(sel, "group", 5) == 0) ||
                    (klen == 4 && strncmp(sel, "cond", 4) == 0);
        for (int f = 0; f < p->nfactors && !known; f++)
            known = strlen(p->factor[f].name) == klen && strncmp(sel, p->factor[f].name, klen) == 0;
        if (!known) {
            char keys[512];
            size_t len = (size_t)snprintf(keys, sizeof keys, "cond, group");
            for (int f = 0; f < p->nfactors && len < sizeof keys; f++)
                len += (size_t)snprintf(keys + len, sizeof keys - len, ", %s", p->factor[f].name);
            return sweep_fail(p, line, "selector '%s': unknown key '%.*s' (%s)", sel, (int)klen,
                              sel, keys);
        }
    }
    for (int i = 0; i < s->ncond; i++)
        if (sweep_cond_matches(&s->cond[i], sel))
            return DT_OK;
    return sweep_fail(p, line, "selector '%s' matches no condition", sel);
}

static void sweep_parser_free(struct sweep_parser *p)
{
    free(p->name);
    sweep_words_free(&p->common);
    for (int i = 0; i < p->nx; i++) {
        free(p->x[i].name);
        free(p->x[i].group);
        sweep_words_free(&p->x[i].args);
    }
    free(p->x);
    for (int f = 0; f < p->nfactors; f++) {
        for (int l = 0; l < p->factor[f].nlevels; l++) {
            free(p->factor[f].level[l].name);
            sweep_words_free(&p->factor[f].level[l].args);
        }
        free(p->factor[f].level);
        free(p->factor[f].name);
    }
}

int sweep_spec_parse(struct sweep_spec *s, const char *text, const char *name)
{
    memset(s, 0, sizeof *s);
    struct sweep_parser p = {.file = name, .trials = 1};
    int rc = DT_OK;
    const char *q = text;
    while (*q && rc == DT_OK) {
        p.line++;
        const char *e = strchr(q, '\n');
        if (!e)
            e = q + strlen(q);
        for (const char *b = q; b < e && rc == DT_OK; b++)
            if ((unsigned char)*b < 0x20 && *b != '\t' && *b != '\r')
                rc = sweep_fail(&p, p.line, "control character 0x%02x: not a sweep file",
                                (unsigned)(unsigned char)*b);
        if (rc == DT_OK)
            rc = sweep_parse_line(&p, s, q, e);
        q = *e ? e + 1 : e;
    }
    if (rc == DT_OK)
        rc = sweep_expand(&p, s);
    for (int i = 0; i < s->ncompare && rc == DT_OK; i++)
        for (int k = 0; k < 2 && rc == DT_OK; k++)
            rc = sweep_sel_check(&p, s, s->compare[i].sel[k], s->compare[i].line);
    for (int i = 0; i < s->npair && rc == DT_OK; i++) {
        for (int k = 0; k < 2 && rc == DT_OK; k++)
            rc = sweep_sel_check(&p, s, s->pair[i].sel[k], s->pair[i].line);
        if (rc == DT_OK) {
            int(*m)[2] = NULL;
            int n = sweep_pair_conditions(s, &s->pair[i], &m);
            free(m);
            if (n == 0)
                rc = sweep_fail(&p, s->pair[i].line,
                                "pair %s %s: no two conditions agree on the other factors",
                                s->pair[i].sel[0], s->pair[i].sel[1]);
        }
    }
    if (rc == DT_OK) {
        s->name = p.name ? p.name : dt_strdup("sweep");
        p.name = NULL;
        s->text = dt_strdup(text);
    }
    sweep_parser_free(&p);
    if (rc != DT_OK)
        sweep_spec_free(s);
    return rc;
}

int sweep_spec_load(struct sweep_spec *s, const char *path)
{
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "rb");
    if (!f) {
        dt_error_set("%s: %s", path, strerror(errno));
        return DT_ERR;
    }
    size_t cap = 4096, len = 0;
    char *buf = dt_malloc(cap);
    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= ((size_t)1 << 24)) {
                fclose(f);
                free(buf);
                dt_error_set("%s: larger than 16 MiB: not a sweep file", path);
                return DT_ERR;
            }
            cap *= 2;
            buf = dt_realloc(buf, cap);
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        dt_error_set("%s: read error", path);
        return DT_ERR;
    }
    buf[len] = 0;
    if (strlen(buf) != len) {
        free(buf);
        dt_error_set("%s: contains a NUL byte: not a sweep file", path);
        return DT_ERR;
    }
    int rc = sweep_spec_parse(s, buf, path);
    free(buf);
    return rc;
}

void sweep_spec_free(struct sweep_spec *s)
{
    for (int i = 0; i < s->ncond; i++) {
        struct sweep_cond *c = &s->cond[i];
        free(c->name);
        free(c->group);
        for (int a = 0; a < c->nattr; a++) {
            free(c->attr[a].key);
            free(c->attr[a].val);
        }
        if (c->args)
            for (int a = 0; a < c->nargs; a++)
                free(c->args[a]);
        free(c->args);
    }
    free(s->cond);
    for (int i = 0; i < s->ncompare; i++) {
        free(s->compare[i].sel[0]);
        free(s->compare[i].sel[1]);
    }
    free(s->compare);
    for (int i = 0; i < s->npair; i++) {
        free(s->pair[i].sel[0]);
        free(s->pair[i].sel[1]);
    }
    free(s->pair);
    free(s->name);
    free(s->text);
    memset(s, 0, sizeof *s);
}

int sweep_cond_matches(const struct sweep_cond *c, const char *sel)
{
    if (strcmp(sel, "*") == 0)
        return 1;
    const char *eq = strchr(sel, '=');
    if (!eq)
        return 0;
    size_t klen = (size_t)(eq - sel);
    if (klen == 4 && strncmp(sel, "cond", 4) == 0) /* the condition by its name */
        return strcmp(c->name, eq + 1) == 0;
    for (int a = 0; a < c->nattr; a++)
        if (strlen(c->attr[a].key) == klen && strncmp(c->attr[a].key, sel, klen) == 0 &&
            strcmp(c->attr[a].val, eq + 1) == 0)
            return 1;
    return 0;
}

const struct sweep_cond *sweep_cond_find(const struct sweep_spec *s, const char *name)
{
    for (int i = 0; i < s->ncond; i++)
        if (strcmp(s->cond[i].name, name) == 0)
            return &s->cond[i];
    return NULL;
}

/* a with {trial} and {cond} replaced. */
static char *sweep_subst(const char *a, const char *cond, int t)
{
    char num[16];
    snprintf(num, sizeof num, "%d", t);
    size_t cap = strlen(a) + 1, len = 0;
    for (const char *b = strchr(a, '{'); b; b = strchr(b + 1, '{'))
        cap += strlen(cond) + sizeof num;
    char *out = dt_malloc(cap);
    for (const char *q = a; *q;) {
        const char *rep = NULL;
        size_t skip = 0;
        if (strncmp(q, "{trial}", 7) == 0)
            rep = num, skip = 7;
        else if (strncmp(q, "{cond}", 6) == 0)
            rep = cond, skip = 6;
        if (rep) {
            memcpy(out + len, rep, strlen(rep));
            len += strlen(rep);
            q += skip;
        } else {
            out[len++] = *q++;
        }
    }
    out[len] = 0;
    return out;
}

char **sweep_trial_args(const struct sweep_spec *s, const struct sweep_cond *c, int t)
{
    (void)s;
    char **out = dt_calloc((size_t)c->nargs + 1, sizeof *out);
    for (int i = 0; i < c->nargs; i++)
        out[i] = sweep_subst(c->args[i], c->name, t);
    return out;
}

void sweep_args_free(char **args)
{
    if (!args)
        return;
    for (char **a = args; *a; a++)
        free(*a);
    free(args);
}

void sweep_trial_path(const struct sweep_cond *c, int t, const char *ext, char *out, size_t n)
{
    snprintf(out, n, "runs/%s/t%02d%s%s", c->name, t, ext[0] && ext[0] != '.' ? "." : "", ext);
}

/* Whether a selector names the attribute key ("*" names none). */
static int sweep_sel_names(const char *sel, const char *key)
{
    const char *eq = strchr(sel, '=');
    return eq && strlen(key) == (size_t)(eq - sel) && strncmp(sel, key, (size_t)(eq - sel)) == 0;
}

int sweep_pair_conditions(const struct sweep_spec *s, const struct sweep_pair *p, int (**out)[2])
{
    int n = 0, cap = 0, nb = 0;
    *out = NULL;
    /* the conditions the second selector picks, found once, not once for
     * every condition the first picks (up to SWEEP_MAX_CONDS each) */
    int *pick = dt_malloc((size_t)(s->ncond ? s->ncond : 1) * sizeof *pick);
    for (int b = 0; b < s->ncond; b++)
        if (sweep_cond_matches(&s->cond[b], p->sel[1]))
            pick[nb++] = b;
    for (int a = 0; a < s->ncond; a++) {
        if (!sweep_cond_matches(&s->cond[a], p->sel[0]))
            continue;
        for (int i = 0; i < nb; i++) {
            int b = pick[i];
            if (b == a)
                continue;
            const struct sweep_cond *ca = &s->cond[a], *cb = &s->cond[b];
            int agree = 1;
            /* attr[0] is the group, not a factor; both conditions have the
             * same factors in the same order. */
            for (int k = 1; k < ca->nattr && agree; k++) {
                const char *key = ca->attr[k].key;
                if (sweep_sel_names(p->sel[0], key) || sweep_sel_names(p->sel[1], key))
                    continue;
                agree = strcmp(ca->attr[k].val, cb->attr[k].val) == 0;
            }
            if (!agree)
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 8;
                *out = dt_realloc(*out, (size_t)cap * sizeof **out);
            }
            (*out)[n][0] = a;
            (*out)[n][1] = b;
            n++;
        }
    }
    free(pick);
    return n;
}
