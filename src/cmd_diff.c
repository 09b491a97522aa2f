/* cmd_diff.c: `divtrace diff`: print what diff_traces found, as text or JSON.
 * Exit 0 identical, 1 different, 2 trouble, like cmp(1). */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_diff.h"
#include "diff.h"
#include "escape.h"
#include "html.h"
#include "ranks.h"
#include "trace.h"
#include "util.h"

static void diff_usage(FILE *f)
{
    fputs("Usage: divtrace diff [OPTION]... A.dtr B.dtr\n"
          "  or:  divtrace diff --reference REF.dtr A.dtr [B.dtr]\n"
          "  or:  divtrace diff [OPTION]... RANK.dtr RANK.dtr [RANK.dtr]...\n"
          "Compare two traces: how their configurations differ, how their op lists differ\n"
          "(ops are matched by name: ops in one trace only, or of another type, kind,\n"
          "shape or inputs), the first step and op where the ops both hold stop being\n"
          "bitwise identical, the origin ops of that step (inputs identical, output\n"
          "different), the growth of the parameter distance, and the final losses.\n"
          "Traces of distinct ranks of one torch.distributed job compare as replicas:\n"
          "parameters, gradients, updates, optimizer state and checkpoints must be\n"
          "bitwise equal across ranks; the first step, rank and tensor where they part.\n"
          "\n"
          "Identical traces give one line. Different traces give the first divergence,\n"
          "its origin ops, a short timeline and the command to run next; the plateaus\n"
          "and escapes of the loss curves follow where both runs have plateaus.\n"
          "\n"
          "  -r, --reference REF  each run's distance from the reference trajectory REF\n"
          "                   (e.g. recorded with --backend mpfr) at every checkpoint,\n"
          "                   and which run stays closer to exact arithmetic for longer\n"
          "  -v, --verbose    everything: the configurations and events in full, every\n"
          "                   origin op, the timeline at every checkpoint, the notes\n"
          "      --escape     the plateaus and escapes of both runs even where the\n"
          "                   analysis finds none (or the traces are identical)\n"
          "      --json       one JSON object instead of the text\n"
          "      --html FILE  also write one self-contained HTML page to FILE: loss\n"
          "                   curves, timeline, a layer x step heatmap of the ops that\n"
          "                   differ (click a cell for their records in both runs)\n"
          "      --explain    with --html: run divtrace explain's analysis too and show\n"
          "                   its verdict on the page\n"
          "      --explain-json FILE  with --html: show the verdict of a saved\n"
          "                   `divtrace explain --json A B` output instead\n"
          "  -q, --quiet      print nothing; only the exit status\n"
          "  -h, --help       show this help and exit\n"
          "  -V, --version    show the version and exit\n"
          "\n"
          "Exit status: 0 identical over the common steps (with --reference: every run\n"
          "equals the reference at every shared checkpoint; ranks: the replicas agree),\n"
          "1 different, 2 trouble.\n",
          f);
}

/* A trace that holds no step (a run killed before its first step ended)
 * has nothing to compare: trouble, not a match. 0, or -1 with dt_error set. */
int cmd_diff_has_steps(const struct trace_file *t)
{
    if (t->nsteps > 0)
        return DT_OK;
    dt_error_set("%s holds no step (%s): there is nothing to compare", t->path,
                 t->complete ? "the run recorded none" : t->note);
    return DT_ERR;
}

const char *cmd_diff_status(const struct trace_file *t, char *buf, size_t n)
{
    if (t->complete)
        snprintf(buf, n, "%" PRIu64 " steps, %s", t->nsteps,
                 t->end_status ? "complete, ended early" : "complete");
    else
        snprintf(buf, n, "%" PRIu64 " steps, %s", t->nsteps, t->note);
    return buf;
}

/* Keys whose values differ (or exist on one side only), in A's order then B's. */
static void diff_for_each_change(const struct trace_file *a, const struct trace_file *b,
                                 void (*fn)(void *, const char *, const char *, const char *),
                                 void *arg)
{
    for (size_t i = 0; i < a->cfg.n; i++) {
        const char *vb = trace_config_get(&b->cfg, a->cfg.key[i]);
        if (!vb || strcmp(vb, a->cfg.val[i]) != 0)
            fn(arg, a->cfg.key[i], a->cfg.val[i], vb);
    }
    for (size_t i = 0; i < b->cfg.n; i++)
        if (!trace_config_get(&a->cfg, b->cfg.key[i]))
            fn(arg, b->cfg.key[i], NULL, b->cfg.val[i]);
}

static void diff_print_change(void *arg, const char *key, const char *va, const char *vb)
{
    int *n = arg;
    if ((*n)++ == 0)
        printf("configurations differ:\n");
    printf("  %-18s %s | %s\n", key, va ? va : "(absent)", vb ? vb : "(absent)");
}

static void diff_json_change(void *arg, const char *key, const char *va, const char *vb)
{
    int *n = arg;
    printf("%s{\"key\": ", (*n)++ ? ", " : "");
    json_put_str(stdout, key);
    printf(", \"a\": ");
    if (va) json_put_str(stdout, va); else fputs("null", stdout);
    printf(", \"b\": ");
    if (vb) json_put_str(stdout, vb); else fputs("null", stdout);
    putchar('}');
}

/* What the text shows beyond the default. */
struct diff_view {
    int verbose;               /* --verbose: everything, in full */
    int escape;                /* --escape: the plateau section always */
};

/* Text lists are cut to this many items unless --verbose. */
#define DIFF_SHORT_LIST 12
/* ... and the timeline to this many checkpoints. */
#define DIFF_SHORT_TIMELINE 6

static void diff_print_escapes(const struct trace_file *a, const struct trace_file *b,
                               const struct diff_result *r, int always);

/* A path as a word for sh, quoted where it must be. */
static void diff_put_word(const char *s)
{
    if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./,:@%") ==
                  strlen(s)) {
        fputs(s, stdout);
        return;
    }
    putchar('\'');
    for (; *s; s++)
        if (*s == '\'')
            fputs("'\\''", stdout);
        else
            putchar(*s);
    putchar('\'');
}

/* Identical traces, in one line: what was compared, and what else differs. */
struct diff_keys {
    char text[160];
    int n;
};

static void diff_key_name(void *arg, const char *key, const char *va, const char *vb)
{
    struct diff_keys *k = arg;
    size_t len = strlen(k->text);
    if (k->n++ < 3 && len < sizeof k->text)
        snprintf(k->text + len, sizeof k->text - len, "%s%s", len ? ", " : "", key);
    (void)va;
    (void)vb;
}

static void diff_identical_line(const struct trace_file *a, const struct trace_file *b,
                                const struct diff_result *r)
{
    printf("identical: every op hash of all %" PRIu64 " common steps matches", r->common);
    if (a->nsteps != b->nsteps)
        printf(" (A has %" PRIu64 " steps, B has %" PRIu64 ")", a->nsteps, b->nsteps);
    struct diff_keys k = {"", 0};
    diff_for_each_change(a, b, diff_key_name, &k);
    if (k.n)
        printf("; the configurations differ in %s%s", k.text, k.n > 3 ? " and more" : "");
    putchar('\n');
}

/* The threshold crossings in one line: "exceeds 1e-06 at step 5, 0.001 at
 * ~step 40 (sketch estimate), 0.1 not reached". */
static void diff_cross_line(const struct diff_result *r)
{
    int any = 0;
    for (int t = 0; t < DIFF_NTHRESH; t++)
        any |= r->cross_ckpt[t] >= 0 || (r->sketch_ok && r->cross_sketch[t] >= 0);
    if (!any) {
        printf("  the distance stays below %g%s\n", diff_thresholds[0],
               r->sketch_ok ? " (checkpoints and per-step sketch estimates)" : " at every checkpoint");
        return;
    }
    printf("  exceeds");
    for (int t = 0; t < DIFF_NTHRESH; t++) {
        printf("%s %g ", t ? "," : "", diff_thresholds[t]);
        if (r->cross_ckpt[t] >= 0)
            printf("at step %" PRId64, r->cross_ckpt[t]);
        else if (r->sketch_ok && r->cross_sketch[t] >= 0)
            printf("at ~step %" PRId64 " (sketch estimate)", r->cross_sketch[t]);
        else
            printf("not reached");
    }
    putchar('\n');
}

/* What to run next, after a difference. */
static void diff_next(const struct trace_file *a, const struct trace_file *b, const struct diff_result *r)
{
    if (r->values_unknown) {
        printf("next: record both runs with --trace-level op, so that their values compare\n");
        return;
    }
    printf("next: divtrace explain ");
    diff_put_word(a->path);
    putchar(' ');
    diff_put_word(b->path);
    printf("   (rounding, or a bug in A or B?)\n");
}

/* What differs in op i's definition, without the "NAME: " the text starts
 * with ("" when nothing does). */
static const char *diff_changed_text(const struct trace_file *a, const struct trace_file *b,
                                     const struct diff_result *r, int i, char *buf, size_t n)
{
    buf[0] = 0;
    if (!r->a_changed[i])
        return buf;
    int32_t j = r->a_to_b[i];
    diff_opdef_describe(a, (uint32_t)i, b, j >= 0 ? (uint32_t)j : UINT32_MAX, buf, n);
    size_t len = strlen(a->ops[i].name);
    return strncmp(buf, a->ops[i].name, len) == 0 && buf[len] == ':' ? buf + len + 2 : buf;
}

static void diff_op_line(const struct trace_file *a, const struct trace_file *b,
                         const struct diff_result *r, int op, const char *indent)
{
    const struct trace_opdef *o = &a->ops[op];
    char layer[64], shape[64], where[600] = "", buf[DIFF_OPDIFF_TEXT];
    diff_layer(o->name, layer, sizeof layer);
    cli_shape(shape, sizeof shape, o->ndim, o->shape);
    /* when the lists differ: where B has the op, and how its definition differs */
    size_t len = 0;
    if (r->a_to_b[op] != op)
        len += (size_t)snprintf(where, sizeof where, "; op %d in B", r->a_to_b[op]);
    if (r->a_changed[op] && len < sizeof where)
        snprintf(where + len, sizeof where - len, "; definition changed: %s",
                 diff_changed_text(a, b, r, op, buf, sizeof buf));
    const char *rest;
    int t = diff_time_step(o->name, &rest);
    if (t >= 0)
        printf("%sop %d %s (layer %s, time step %d, op %s, %s %s, shape %s%s)\n", indent, op, o->name,
               layer, t, rest, trace_kind_name((enum trace_kind)o->kind), o->type, shape, where);
    else
        printf("%sop %d %s (layer %s, %s %s, shape %s%s)\n", indent, op, o->name, layer,
               trace_kind_name((enum trace_kind)o->kind), o->type, shape, where);
}

static void diff_print_cross(const char *label, int64_t step)
{
    if (step >= 0)
        printf("%s%" PRId64, label, step);
    else
        printf("%snot reached", label);
}

/* How many steps the "mean of the last 50 steps" spans. */
static int diff_last(const struct trace_file *t)
{
    return t->nsteps < 50 ? (int)t->nsteps : 50;
}

/* Whether A's op i has another shape in B (its records' sketches do not
 * compare then). */
static int diff_shapes_differ(const struct trace_file *a, const struct trace_file *b,
                              const struct diff_result *r, int i)
{
    int32_t j = r->a_to_b[i];
    if (j < 0 || a->ops[i].ndim != b->ops[j].ndim)
        return j >= 0;
    for (int d = 0; d < a->ops[i].ndim; d++)
        if (a->ops[i].shape[d] != b->ops[j].shape[d])
            return 1;
    return 0;
}

/* Whether both lists name the same ops in the same order (diff then
 * compares the steps' root hashes, which cover every op). */
static int diff_same_names(const struct trace_file *a, const struct trace_file *b,
                           const struct diff_result *r)
{
    if (a->nops != b->nops)
        return 0;
    for (uint32_t i = 0; i < a->nops; i++)
        if (r->a_to_b[i] != (int32_t)i)
            return 0;
    return 1;
}

static void diff_print_events(const char *label, const struct trace_file *t, int verbose)
{
    uint32_t n = verbose || t->nevents <= DIFF_SHORT_LIST ? t->nevents : DIFF_SHORT_LIST - 1;
    for (uint32_t i = 0; i < n; i++)
        printf("%s event: %s\n", label, t->events[i].text);
    if (n < t->nevents)
        printf("%s events: %u more (--verbose lists them)\n", label, t->nevents - n);
}

/* The configuration changes, cut short unless verbose. */
struct diff_changes {
    int n, shown, verbose;
};

static void diff_print_change_short(void *arg, const char *key, const char *va, const char *vb)
{
    struct diff_changes *c = arg;
    if (c->verbose || c->n < DIFF_SHORT_LIST - 1) {
        diff_print_change(&c->shown, key, va, vb);
    }
    c->n++;
}

static void diff_text(const struct trace_file *a, const struct trace_file *b,
                      const struct diff_result *r, const struct diff_view *v)
{
    char buf[512];
    if (!r->diverged && !v->verbose) {
        diff_identical_line(a, b, r);
        if (v->escape)
            diff_print_escapes(a, b, r, 1);
        return;
    }
    printf("A: %s (%s)\n", a->path, cmd_diff_status(a, buf, sizeof buf));
    printf("B: %s (%s)\n", b->path, cmd_diff_status(b, buf, sizeof buf));
    struct diff_changes ch = {0, 0, v->verbose};
    diff_for_each_change(a, b, diff_print_change_short, &ch);
    if (!ch.n)
        printf("configurations: identical\n");
    else if (ch.shown < ch.n)
        printf("  ... and %d more (--verbose lists them)\n", ch.n - ch.shown);
    diff_print_events("A", a, v->verbose);
    diff_print_events("B", b, v->verbose);
    if (a->nsteps != b->nsteps)
        printf("compared over the %" PRIu64 " common steps (A has %" PRIu64 ", B has %" PRIu64 ")\n",
               r->common, a->nsteps, b->nsteps);
    if (!r->ops_match) {
        uint32_t both = 0;
        for (uint32_t i = 0; i < a->nops; i++)
            both += r->a_to_b[i] >= 0;
        if (r->nopdiffs)
            printf("op lists differ in %d op%s; first: %s\n", r->nopdiffs, r->nopdiffs == 1 ? "" : "s",
                   r->opdiff);
        else
            printf("op lists differ in order only; first: %s\n", r->opdiff);
        printf("  the %u ops both traces hold compare by name (A has %u ops, B has %u)\n", both,
               a->nops, b->nops);
    }
    if (!r->diverged) {
        printf("identical: every op hash of all %" PRIu64 " common steps matches\n", r->common);
    } else if (!r->values_differ) {
        if (r->values_unknown)
            printf("the traces keep no records of the ops both hold, so their values do not compare "
                   "(record with --trace-level op)\n");
        else
            printf("no op both traces hold differs in the %" PRIu64 " common steps%s\n", r->common,
                   !diff_same_names(a, b, r) && (a->level != TRACE_LEVEL_OP || b->level != TRACE_LEVEL_OP)
                       ? " (of those whose records the traces keep)" : "");
    } else {
        const char *rest = NULL;
        int t = r->first_op >= 0 ? diff_time_step(a->ops[r->first_op].name, &rest) : -1;
        if (t >= 0) {
            char layer[64];
            diff_layer(a->ops[r->first_op].name, layer, sizeof layer);
            printf("first divergence: step %" PRIu64 ", layer %s, time step %d, op %s\n",
                   r->first_step, layer, t, rest);
        } else {
            printf("first divergence: step %" PRIu64 "\n", r->first_step);
        }
        if (r->first_op >= 0) {
            diff_op_line(a, b, r, r->first_op, "  first op: ");
            if (r->have_elements)
                printf("  elements differ: %" PRIu64 " of %" PRIu64 ", max ULP distance %" PRIu64
                       ", relative L2 difference %.3g\n", r->elements_differ, r->elements,
                       r->max_ulp, r->rel_l2);
            else if (diff_shapes_differ(a, b, r, r->first_op))
                printf("  the shapes differ: no relative L2 difference\n");
            else if (!v->verbose)
                printf("  relative L2 difference ~%.3g (estimated from sketches)\n", r->rel_l2);
            else
                printf("  relative L2 difference ~%.3g (estimated from the records' sketches; "
                       "element counts are known only for %s)\n", r->rel_l2,
                       a->ops[r->first_op].kind == TRACE_KIND_PARAM ||
                       a->ops[r->first_op].kind == TRACE_KIND_STATE
                           ? "steps with a checkpoint"
                           : "parameters and optimizer state, which checkpoints hold");
            printf("  origin ops of step %" PRIu64 " (inputs identical, output different): %d%s\n",
                   r->first_step, r->norigins,
                   r->origins_partial ? " (some ops have no records at this trace level)" : "");
            int shown = v->verbose || r->norigins <= DIFF_SHORT_LIST ? r->norigins : DIFF_SHORT_LIST - 1;
            for (int k = 0; k < shown; k++)
                diff_op_line(a, b, r, r->origins[k], "    ");
            if (shown < r->norigins)
                printf("    ... and %d more (--verbose lists them)\n", r->norigins - shown);
        } else {
            printf("  the step root hashes differ, but the traces keep no op records that tell "
                   "which op (record with --trace-level op)\n");
        }
    }
    if (r->npoints) {
        printf("divergence timeline (relative L2 distance of %s, at %scheckpoints):\n",
               r->ops_match ? "all parameters" : "the parameters both traces hold in one shape",
               v->verbose || r->npoints <= DIFF_SHORT_TIMELINE ? "" : "some ");
        int max = DIFF_SHORT_TIMELINE - 1;
        int stride = v->verbose || r->npoints <= DIFF_SHORT_TIMELINE ? 1 : (r->npoints - 1 + max - 1) / max;
        for (int k = 0; k < r->npoints; k++)
            if (k % stride == 0 || k == r->npoints - 1)
                printf("  step %8" PRIu64 "  %.3g\n", r->points[k].step, r->points[k].dist);
        if (v->verbose)
            for (int t = 0; t < DIFF_NTHRESH; t++) {
                printf("  exceeds %g: ", diff_thresholds[t]);
                diff_print_cross("checkpoint step ", r->cross_ckpt[t]);
                if (r->sketch_ok)
                    diff_print_cross("; per-step sketch estimate: step ", r->cross_sketch[t]);
                putchar('\n');
            }
        else
            diff_cross_line(r);
    }
    printf("final loss: A %.6f (mean of last %d steps %.6f), B %.6f (mean of last %d steps %.6f)\n",
           r->final_a, diff_last(a), r->mean50_a, r->final_b, diff_last(b), r->mean50_b);
    diff_print_escapes(a, b, r, v->escape);
    if (r->diverged)
        diff_next(a, b, r);
}

/* The loss curve of a trace and its plateaus (divtrace escape's defaults). */
static int diff_escapes(const struct trace_file *t, struct escape_result *er)
{
    double *loss = dt_malloc((t->nsteps ? t->nsteps : 1) * sizeof *loss);
    double *gn = dt_malloc((t->nsteps ? t->nsteps : 1) * sizeof *gn);
    for (uint64_t k = 0; k < t->nsteps; k++) {
        loss[k] = t->steps[k].loss;
        gn[k] = t->steps[k].grad_norm;
    }
    struct escape_params p;
    escape_params_defaults(&p);
    int rc = escape_analyze(loss, gn, (size_t)t->nsteps, &p, er);
    free(loss);
    free(gn);
    return rc;
}

/* Whether step s lies inside one of the plateaus. */
static int diff_in_plateau(const struct escape_result *er, uint64_t s)
{
    for (size_t k = 0; k < er->nplateaus; k++)
        if (s >= er->plateaus[k].start && s <= er->plateaus[k].end)
            return 1;
    return 0;
}

/* When both runs sit on plateaus: their escapes, where the distance
 * thresholds are crossed relative to them, and how fast the log distance
 * grows per step inside plateaus (of run A) and outside. always (--escape):
 * the section also when a run has none ("none"). */
static void diff_print_escapes(const struct trace_file *a, const struct trace_file *b,
                               const struct diff_result *r, int always)
{
    struct escape_result ea, eb;
    if (diff_escapes(a, &ea) < 0)
        return;
    if (diff_escapes(b, &eb) < 0) {
        escape_result_free(&ea);
        return;
    }
    if (always && !(ea.nplateaus && eb.nplateaus)) {
        printf("saddle plateaus and escapes (divtrace escape's defaults): A %zu, B %zu\n",
               ea.nplateaus, eb.nplateaus);
        for (int k = 0; k < 2; k++) {
            const struct escape_result *e = k ? &eb : &ea;
            for (size_t q = 0; q < e->nplateaus; q++) {
                const struct escape_plateau *pl = &e->plateaus[q];
                printf("  %c: plateau at loss %.4g from step %zu to %zu", k ? 'B' : 'A', pl->level,
                       pl->start, pl->end);
                if (pl->escaped)
                    printf(", escape at step %zu\n", pl->escape);
                else
                    printf(", not escaped\n");
            }
        }
    }
    if (ea.nplateaus && eb.nplateaus) {
        printf("saddle plateaus and escapes (divtrace escape's defaults):\n");
        const struct escape_result *e[2] = {&ea, &eb};
        int64_t first[2] = {-1, -1};
        for (int k = 0; k < 2; k++)
            for (size_t q = 0; q < e[k]->nplateaus; q++) {
                const struct escape_plateau *pl = &e[k]->plateaus[q];
                printf("  %c: plateau at loss %.4g from step %zu to %zu", k ? 'B' : 'A', pl->level,
                       pl->start, pl->end);
                if (pl->escaped) {
                    printf(", escape at step %zu\n", pl->escape);
                    if (first[k] < 0)
                        first[k] = (int64_t)pl->escape;
                } else {
                    printf(", not escaped\n");
                }
            }
        if (first[0] >= 0 && first[1] >= 0)
            printf("  first escapes differ by %" PRId64 " steps (B - A)\n", first[1] - first[0]);
        for (int t = 0; t < DIFF_NTHRESH; t++) {
            int64_t c = r->cross_ckpt[t] >= 0 ? r->cross_ckpt[t] : r->sketch_ok ? r->cross_sketch[t] : -1;
            if (c < 0 || first[0] < 0)
                continue;
            printf("  distance exceeds %g at step %" PRId64 ": %" PRId64 " steps %s A's first escape\n",
                   diff_thresholds[t], c, c <= first[0] ? first[0] - c : c - first[0],
                   c <= first[0] ? "before" : "after");
        }
        /* growth of ln(distance) per step between consecutive checkpoints,
         * by where the interval lies */
        double g[2] = {0, 0};
        uint64_t n[2] = {0, 0};
        for (int k = 1; k < r->npoints; k++) {
            const struct diff_point *p0 = &r->points[k - 1], *p1 = &r->points[k];
            if (!(p0->dist > 0) || !(p1->dist > 0) || p1->step <= p0->step)
                continue;
            int in = diff_in_plateau(&ea, (p0->step + p1->step) / 2);
            g[in] += log(p1->dist / p0->dist);
            n[in] += p1->step - p0->step;
        }
        printf("  growth of ln(distance) per step: on A's plateaus ");
        if (n[1]) printf("%.3g", g[1] / (double)n[1]); else printf("(no interval)");
        printf(", elsewhere ");
        if (n[0]) printf("%.3g", g[0] / (double)n[0]); else printf("(no interval)");
        if (n[0] && n[1] && g[0] != 0)
            printf(" (%.2gx)", (g[1] / (double)n[1]) / (g[0] / (double)n[0]));
        putchar('\n');
    }
    escape_result_free(&ea);
    escape_result_free(&eb);
}

static void diff_json_events(const struct trace_file *t)
{
    putchar('[');
    for (uint32_t i = 0; i < t->nevents; i++) {
        printf("%s{\"code\": %u, \"step\": %" PRIu64 ", \"text\": ", i ? ", " : "",
               t->events[i].code, t->events[i].step);
        json_put_str(stdout, t->events[i].text);
        putchar('}');
    }
    putchar(']');
}

static void diff_json(const struct trace_file *a, const struct trace_file *b,
                      const struct diff_result *r)
{
    printf("{\"a\": ");
    json_put_str(stdout, a->path);
    printf(", \"b\": ");
    json_put_str(stdout, b->path);
    printf(", \"steps_a\": %" PRIu64 ", \"steps_b\": %" PRIu64 ", \"complete_a\": %s, \"complete_b\": %s",
           a->nsteps, b->nsteps, a->complete ? "true" : "false", b->complete ? "true" : "false");
    printf(",\n \"config_changes\": [");
    int n = 0;
    diff_for_each_change(a, b, diff_json_change, &n);
    printf("],\n \"events_a\": ");
    diff_json_events(a);
    printf(", \"events_b\": ");
    diff_json_events(b);
    printf(",\n \"common_steps\": %" PRIu64 ", \"ops_match\": %s, \"identical\": %s",
           r->common, r->ops_match ? "true" : "false", r->diverged ? "false" : "true");
    printf(", \"values_differ\": %s, \"values_unknown\": %s, \"op_differences\": %d",
           r->values_differ ? "true" : "false", r->values_unknown ? "true" : "false", r->nopdiffs);
    if (!r->ops_match) {
        printf(",\n \"first_op_difference\": {\"name\": ");
        json_put_str(stdout, r->opdiff_a >= 0 ? a->ops[r->opdiff_a].name
                             : r->opdiff_b >= 0 ? b->ops[r->opdiff_b].name : "");
        printf(", \"op_a\": ");
        if (r->opdiff_a >= 0) printf("%d", r->opdiff_a); else fputs("null", stdout);
        printf(", \"op_b\": ");
        if (r->opdiff_b >= 0) printf("%d", r->opdiff_b); else fputs("null", stdout);
        printf(", \"text\": ");
        json_put_str(stdout, r->opdiff);
        putchar('}');
    }
    if (r->values_differ) {
        printf(",\n \"first_divergence\": {\"step\": %" PRIu64, r->first_step);
        if (r->first_op >= 0) {
            const struct trace_opdef *o = &a->ops[r->first_op];
            char layer[64];
            diff_layer(o->name, layer, sizeof layer);
            printf(", \"op\": %d, \"op_b\": %d, \"name\": ", r->first_op, r->a_to_b[r->first_op]);
            json_put_str(stdout, o->name);
            printf(", \"layer\": ");
            json_put_str(stdout, layer);
            int t = diff_time_step(o->name, NULL);
            if (t >= 0)
                printf(", \"time_step\": %d", t);
            printf(", \"kind\": \"%s\", \"type\": ", trace_kind_name((enum trace_kind)o->kind));
            json_put_str(stdout, o->type);
            printf(", \"shape\": [");
            for (int d = 0; d < o->ndim; d++)
                printf("%s%u", d ? ", " : "", o->shape[d]);
            putchar(']');
            if (r->have_elements)
                printf(", \"elements_differ\": %" PRIu64 ", \"elements\": %" PRIu64
                       ", \"max_ulp\": %" PRIu64, r->elements_differ, r->elements, r->max_ulp);
            printf(", \"rel_l2\": ");
            json_put_num(stdout, r->rel_l2);
            printf(", \"rel_l2_estimated\": %s, \"definition_changed\": %s",
                   r->rel_l2_estimated ? "true" : "false", r->a_changed[r->first_op] ? "true" : "false");
        }
        printf("},\n \"origins\": [");
        for (int k = 0; k < r->norigins; k++) {
            printf("%s{\"op\": %d, \"name\": ", k ? ", " : "", r->origins[k]);
            json_put_str(stdout, a->ops[r->origins[k]].name);
            printf(", \"definition_changed\": %s", r->a_changed[r->origins[k]] ? "true" : "false");
            putchar('}');
        }
        printf("], \"origins_partial\": %s", r->origins_partial ? "true" : "false");
    }
    printf(",\n \"timeline\": [");
    for (int k = 0; k < r->npoints; k++) {
        printf("%s{\"step\": %" PRIu64 ", \"distance\": ", k ? ", " : "", r->points[k].step);
        json_put_num(stdout, r->points[k].dist);
        putchar('}');
    }
    printf("],\n \"crossings\": [");
    for (int t = 0; t < DIFF_NTHRESH; t++) {
        printf("%s{\"threshold\": %g, \"checkpoint_step\": ", t ? ", " : "", diff_thresholds[t]);
        if (r->cross_ckpt[t] >= 0) printf("%" PRId64, r->cross_ckpt[t]); else fputs("null", stdout);
        printf(", \"sketch_step\": ");
        if (r->sketch_ok && r->cross_sketch[t] >= 0) printf("%" PRId64, r->cross_sketch[t]);
        else fputs("null", stdout);
        putchar('}');
    }
    printf("],\n \"final_loss\": {\"a\": ");
    json_put_num(stdout, r->final_a);
    printf(", \"b\": ");
    json_put_num(stdout, r->final_b);
    printf("}, \"mean_last50\": {\"a\": ");
    json_put_num(stdout, r->mean50_a);
    printf(", \"b\": ");
    json_put_num(stdout, r->mean50_b);
    printf("},\n \"plateaus\": {");
    const struct trace_file *t[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        struct escape_result er;
        printf("%s\"%c\": ", k ? ", " : "", k ? 'b' : 'a');
        if (diff_escapes(t[k], &er) < 0) {
            fputs("null", stdout);
            continue;
        }
        putchar('[');
        for (size_t q = 0; q < er.nplateaus; q++) {
            const struct escape_plateau *pl = &er.plateaus[q];
            printf("%s{\"start\": %zu, \"end\": %zu, \"level\": ", q ? ", " : "", pl->start, pl->end);
            json_put_num(stdout, pl->level);
            if (pl->escaped)
                printf(", \"escape\": %zu}", pl->escape);
            else
                printf(", \"escape\": null}");
        }
        putchar(']');
        escape_result_free(&er);
    }
    printf("}}\n");
}

/* A damaged trace was compared as its readable prefix: say so, and that
 * this is trouble, after the comparison; and a failed write of the report. */
static int diff_finish(struct trace_file *const *tf, int n, int quiet, int rc)
{
    for (int k = 0; k < n; k++)
        if (strstr(tf[k]->note, "corrupt")) {
            cli_error("diff", "%s: %s", tf[k]->path, tf[k]->note);
            rc = CLI_EXIT_TROUBLE;
            break;
        }
    if (!quiet && (fflush(stdout) != 0 || ferror(stdout))) {
        cli_error("diff", "write error on standard output");
        rc = CLI_EXIT_TROUBLE;
    }
    return rc;
}

static int diff_two(struct trace_file *a, struct trace_file *b, int json, int quiet,
                    const struct diff_view *v)
{
    struct diff_result r;
    int rc;
    if (diff_traces(a, b, &r) < 0) {
        cli_error("diff", "%s", dt_error());
        rc = CLI_EXIT_TROUBLE;
    } else {
        if (!quiet && json)
            diff_json(a, b, &r);
        else if (!quiet)
            diff_text(a, b, &r, v);
        struct trace_file *ab[2] = {a, b};
        rc = diff_finish(ab, 2, quiet, r.diverged ? 1 : 0);
    }
    diff_result_free(&r);
    return rc;
}

/* Distinct ranks of one job, compared as replicas (ranks.h). */
static int diff_ranks(struct trace_file **tf, int n, int json, int quiet, char **paths)
{
    struct ranks_result r;
    int rc;
    if (ranks_compare(tf, n, &r) < 0) {
        cli_error("diff", "%s", dt_error());
        rc = CLI_EXIT_TROUBLE;
    } else {
        if (!quiet && json) {
            putchar('{');
            ranks_print_json(stdout, &r);
            printf("}\n");
        } else if (!quiet) {
            ranks_print_text(stdout, &r, 1);
            if (!r.agree && r.compared) {
                printf("next: divtrace explain");
                for (int k = 0; k < n; k++) {
                    putchar(' ');
                    diff_put_word(paths[k]);
                }
                putchar('\n');
            }
        }
        rc = r.agree ? 0 : r.compared ? CLI_EXIT_FINDING : CLI_EXIT_TROUBLE;
        if (!r.compared)
            cli_error("diff", "the ranks' traces keep no records of parameters, gradients or updates and "
                      "share no checkpoint: nothing to compare");
        rc = diff_finish(tf, n, quiet, rc);
    }
    ranks_result_free(&r);
    return rc;
}

int cmd_diff(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"reference", required_argument, NULL, 'r'},
        {"verbose", no_argument, NULL, 'v'},
        {"escape", no_argument, NULL, 'e'},
        {"html", required_argument, NULL, 'H'},
        {"explain", no_argument, NULL, 'E'},
        {"explain-json", required_argument, NULL, 'X'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int json = 0, quiet = 0, c;
    struct diff_view view = {0, 0};
    const char *reference = NULL, *html = NULL;
    struct html_options hopt = {.explain_json = NULL};
    optind = 0;
    while ((c = getopt_long(argc, argv, "r:vqhV", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'r': reference = optarg; break;
        case 'v': view.verbose = 1; break;
        case 'e': view.escape = 1; break;
        case 'H': html = optarg; break;
        case 'E': hopt.explain = 1; break;
        case 'X': hopt.explain_json = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': diff_usage(stdout); return 0;
        case 'V': return cli_version();
        default: return cli_usage_error("diff");
        }
    }
    if (html_diff_options(html, reference != NULL, quiet, &hopt) < 0) {
        cli_error("diff", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    if (reference)
        return cmd_diff_reference(reference, argv + optind, argc - optind, json, quiet);
    int n = argc - optind;
    if (n < 2) {
        cli_error("diff", "expected two trace files");
        return cli_usage_error("diff");
    }
    struct trace_file **tf = dt_calloc((size_t)n, sizeof *tf);
    int rc = CLI_EXIT_TROUBLE, k, mode = -1;
    for (k = 0; k < n; k++)
        if (trace_open(&tf[k], argv[optind + k]) < 0 || cmd_diff_has_steps(tf[k]) < 0)
            break;
    if (k == n)
        mode = ranks_detect(tf, n);
    if (mode < 0)
        cli_error("diff", "%s", dt_error());
    else if (html && html_write_diff(html, tf, n, mode == 1, &hopt) < 0)
        cli_error("diff", "%s", dt_error());
    else if (mode == 1)
        rc = diff_ranks(tf, n, json, quiet, argv + optind);
    else
        rc = diff_two(tf[0], tf[1], json, quiet, &view);
    for (k = 0; k < n; k++)
        trace_close(tf[k]);
    free(tf);
    return rc;
}
