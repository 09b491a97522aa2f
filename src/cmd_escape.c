/* cmd_escape.c: `divtrace escape`: plateaus of the loss curve of each run and
 * the steps where training escapes them (the method is in escape.c). */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "curvature.h"
#include "escape.h"
#include "escape_pairs.h"
#include "plot.h"
#include "trace.h"
#include "util.h"

/* --curvature STEP asks curvature.h for the Hessian's extreme eigenvalues
 * at a checkpoint: a saddle when the lowest is negative beyond its residual.
 * --plot DIR draws the curves, plateaus and escapes as PNGs (plot.h).
 * --pairs DIR pairs the traces under DIR and sets each pair's divergence
 * onset beside its escape difference (escape_pairs.h has the rule). */

static void escape_usage(FILE *f)
{
    fputs("Usage: divtrace escape [OPTION]... RUN.dtr...\n"
          "  or:  divtrace escape --pairs DIR [--pair-key K1,K2,...] [OPTION]...\n"
          "Find the plateaus of each run's loss curve and the steps where training\n"
          "escapes them (a saddle-point plateau, then a drop); count the phases.\n"
          "With --pairs, pair the runs under DIR and relate where each pair diverges\n"
          "to how far apart its two runs escape.\n"
          "\n"
          "  -w, --window N   smoothing and slope window, odd (default N/25, at least 5)\n"
          "      --min-len N  shortest plateau in steps (default 2 windows)\n"
          "      --max-gap N  longest wiggle that two plateaus merge across (default 1 window)\n"
          "      --horizon N  steps after a plateau within which the drop must come\n"
          "                   (default 3 windows)\n"
          "      --flat X     flat: slope at most X times a power law's rate (default 0.25)\n"
          "      --noise X    noise allowance in standard deviations: of the slope, of\n"
          "                   a plateau's fall, of a drop (default 3)\n"
          "      --drop X     escape: the smoothed loss falls by X, relative (default 0.05)\n"
          "      --curvature S  also the Hessian's extreme eigenvalues at the checkpoint\n"
          "                   of step S: a saddle (negative curvature) or a minimum\n"
          "      --plot DIR   also write PNG plots into DIR (with gnuplot): loss.png;\n"
          "                   for two runs distance.png and first-divergence.png\n"
          "      --pairs DIR  the traces (*.dtr) under DIR, recursively (a sweep's\n"
          "                   DIR/runs/COND/tNN.dtr too), in pairs: per pair what differs,\n"
          "                   the first divergent step, the steps where the parameter\n"
          "                   distance exceeds 1e-6, 1e-3, 1e-1, both runs' first escapes\n"
          "                   and their difference; then the correlation of divergence\n"
          "                   onset with |escape difference|; with --plot, pairs.png\n"
          "      --pair-key K1,K2,...  two runs pair when their headers agree on these\n"
          "                   keys and differ in another (default model,seed,init_seed)\n"
          "      --json       one JSON object instead of the text\n"
          "  -q, --quiet      print nothing (plots are still written); only the exit status\n"
          "  -h, --help       show this help and exit\n"
          "  -V, --version    show the version and exit\n"
          "\n"
          "Exit status: 0 analyzed (a trace cut short is analyzed over its complete\n"
          "steps), 2 trouble (a bad option, a file that is not a readable trace; with\n"
          "--pairs also a DIR that is missing or holds no trace).\n",
          f);
}

struct escape_run_out {
    struct trace_file *tf;
    struct escape_result r;
    int has_curv;
    struct curvature_result curv;
};

static int escape_is_saddle(const struct curvature_result *c)
{
    return c->lo < 0 && -c->lo > c->lo_resid;
}

static void escape_print_text(const struct escape_run_out *o)
{
    const struct trace_file *tf = o->tf;
    const struct escape_result *r = &o->r;
    const struct trace_step *st = tf->steps;
    printf("%s: %" PRIu64 " steps", tf->path, tf->nsteps);
    if (!tf->complete)
        printf(" (%s: analyzed over the complete steps)", tf->note);
    printf("\n  method: window %d, min-len %d, max-gap %d, horizon %d, flat %g, noise %g, drop %g\n",
           r->used.window, r->used.min_len, r->used.max_gap, r->used.horizon, r->used.flat,
           r->used.noise_k, r->used.drop);
    printf("  rate %.4g (power-law exponent through the ends), noise %.4g (log loss)\n", r->rate,
           r->noise);
    if (r->nplateaus == 0)
        printf("  no plateau%s\n", r->n < (size_t)r->used.min_len ? " (the curve is shorter than --min-len)" : "");
    for (size_t i = 0; i < r->nplateaus; i++) {
        const struct escape_plateau *p = &r->plateaus[i];
        printf("  plateau %zu: steps %" PRIu64 "-%" PRIu64 ", level %.6g, grad norm %.6g, ", i + 1,
               st[p->start].step, st[p->end].step, p->level, p->grad_norm);
        if (p->escaped)
            printf("escape at step %" PRIu64 " (drop %.1f%%)\n", st[p->escape].step, 100 * p->drop);
        else if (p->end + 1 >= r->n)
            printf("not escaped (lasts to the end)\n");
        else
            printf("ends without an escape (drop %.1f%%)\n", 100 * p->drop);
    }
    printf("  escapes:");
    if (r->nescapes == 0)
        printf(" none");
    for (size_t i = 0; i < r->nplateaus; i++)
        if (r->plateaus[i].escaped)
            printf(" %" PRIu64, st[r->plateaus[i].escape].step);
    printf("\n  phases: %d (%s)\n", r->phases, escape_phase_name(r->phases));
    if (o->has_curv)
        printf("  Hessian at step %" PRIu64 ": lowest eigenvalue %.6g, highest %.6g: %s\n",
               o->curv.step, o->curv.lo, o->curv.hi,
               escape_is_saddle(&o->curv) ? "a saddle (negative curvature)"
                                          : "a minimum (no negative eigenvalue within the residual)");
}

static void escape_print_json(const struct escape_run_out *o, size_t nruns)
{
    FILE *f = stdout;
    fputs("{\"runs\": [", f);
    for (size_t k = 0; k < nruns; k++) {
        const struct trace_file *tf = o[k].tf;
        const struct escape_result *r = &o[k].r;
        const struct trace_step *st = tf->steps;
        fprintf(f, "%s\n {\"path\": ", k ? "," : "");
        json_put_str(f, tf->path);
        fprintf(f, ", \"steps\": %" PRIu64 ", \"complete\": %s, \"note\": ", tf->nsteps,
                tf->complete ? "true" : "false");
        json_put_str(f, tf->note);
        fprintf(f, ",\n  \"params\": {\"window\": %d, \"min_len\": %d, \"max_gap\": %d, \"horizon\": %d, \"flat\": ",
                r->used.window, r->used.min_len, r->used.max_gap, r->used.horizon);
        json_put_num(f, r->used.flat);
        fputs(", \"noise\": ", f);
        json_put_num(f, r->used.noise_k);
        fputs(", \"drop\": ", f);
        json_put_num(f, r->used.drop);
        fputs("},\n  \"rate\": ", f);
        json_put_num(f, r->rate);
        fputs(", \"noise\": ", f);
        json_put_num(f, r->noise);
        fputs(",\n  \"plateaus\": [", f);
        for (size_t i = 0; i < r->nplateaus; i++) {
            const struct escape_plateau *p = &r->plateaus[i];
            fprintf(f, "%s\n   {\"start\": %" PRIu64 ", \"end\": %" PRIu64 ", \"level\": ", i ? "," : "",
                    st[p->start].step, st[p->end].step);
            json_put_num(f, p->level);
            fputs(", \"grad_norm\": ", f);
            json_put_num(f, p->grad_norm);
            fputs(", \"escape\": ", f);
            if (p->escaped)
                fprintf(f, "%" PRIu64, st[p->escape].step);
            else
                fputs("null", f);
            fputs(", \"drop\": ", f);
            json_put_num(f, p->drop);
            fputc('}', f);
        }
        fputs("],\n  \"escapes\": [", f);
        int first = 1;
        for (size_t i = 0; i < r->nplateaus; i++)
            if (r->plateaus[i].escaped) {
                fprintf(f, "%s%" PRIu64, first ? "" : ", ", st[r->plateaus[i].escape].step);
                first = 0;
            }
        fprintf(f, "], \"phases\": %d, \"phase_name\": \"%s\"", r->phases,
                escape_phase_name(r->phases));
        if (o[k].has_curv) {
            const struct curvature_result *cv = &o[k].curv;
            fprintf(f, ",\n  \"curvature\": {\"step\": %" PRIu64 ", \"lowest\": ", cv->step);
            json_put_num(f, cv->lo);
            fputs(", \"highest\": ", f);
            json_put_num(f, cv->hi);
            fputs(", \"lowest_residual\": ", f);
            json_put_num(f, cv->lo_resid);
            fprintf(f, ", \"saddle\": %s}", escape_is_saddle(cv) ? "true" : "false");
        }
        fputc('}', f);
    }
    fputs("]}\n", f);
}

/* ---- --pairs DIR ---- */

struct escape_short {
    char *buf;
    size_t n, len;
    int shown, more;
};

/* A value cut to 14 characters ("..." marks the cut), "-" for absent. */
static void escape_short_val(char *out, size_t n, const char *v)
{
    if (!v)
        snprintf(out, n, "-");
    else if (strlen(v) > 14)
        snprintf(out, n, "%.11s...", v);
    else
        snprintf(out, n, "%s", v);
}

static void escape_short_change(void *arg, const char *key, const char *va, const char *vb)
{
    struct escape_short *sh = arg;
    if (sh->shown == 2) {
        sh->more++;
        return;
    }
    char a[16], b[16];
    escape_short_val(a, sizeof a, va);
    escape_short_val(b, sizeof b, vb);
    int w = snprintf(sh->buf + sh->len, sh->n - sh->len, "%s%s %s|%s", sh->shown ? ", " : "", key, a, b);
    if (w > 0)
        sh->len += (size_t)w < sh->n - sh->len ? (size_t)w : sh->n - sh->len - 1;
    sh->shown++;
}

/* What differs, short: "threads 1|2", two keys at most, then "+N". */
static void escape_pair_differs(const struct escape_pairs *ps, const struct escape_pair *q, char *buf,
                                size_t n)
{
    struct escape_short sh = {buf, n, 0, 0, 0};
    buf[0] = 0;
    escape_pairs_for_each_change(ps, q, escape_short_change, &sh);
    if (sh.more)
        snprintf(buf + sh.len, n - sh.len, " +%d", sh.more);
}

/* A step, "~STEP" for a sketch estimate, else what (never, -). */
static const char *escape_step_str(char *buf, size_t n, int have, int64_t step, int est,
                                   const char *what)
{
    if (have)
        snprintf(buf, n, "%s%" PRId64, est ? "~" : "", step);
    else
        snprintf(buf, n, "%s", what);
    return buf;
}

static void escape_corr_text(const char *what, const struct escape_pairs_corr *c)
{
    printf("  %-22s n %zu, ", what, c->n);
    if (c->n < 3)
        printf("too few pairs\n");
    else if (!isfinite(c->pearson))
        printf("undefined (no spread: one of the two is the same in every pair)\n");
    else
        printf("Pearson %.3f, Spearman %.3f\n", c->pearson, c->spearman);
}

static void escape_pairs_text(const char *dir, const struct escape_pairs *ps)
{
    printf("pairs under %s: %zu trace%s; key ", dir, ps->nruns, ps->nruns == 1 ? "" : "s");
    for (size_t k = 0; k < ps->nkeys; k++)
        printf("%s%s", k ? "," : "", ps->keys[k]);
    printf(": %zu group%s, %zu pair%s\n", ps->ngroups, ps->ngroups == 1 ? "" : "s", ps->npairs,
           ps->npairs == 1 ? "" : "s");
    int wa = 1, wb = 1, wd = 7;
    char differs[128], c[4][32], ea[32], eb[32], ed[32];
    for (size_t i = 0; i < ps->npairs; i++) {
        const struct escape_pair *q = &ps->pairs[i];
        int la = (int)strlen(ps->runs[q->a].rel), lb = (int)strlen(ps->runs[q->b].rel);
        wa = la > wa ? la : wa;
        wb = lb > wb ? lb : wb;
        escape_pair_differs(ps, q, differs, sizeof differs);
        wd = (int)strlen(differs) > wd ? (int)strlen(differs) : wd;
    }
    if (ps->npairs) {
        printf("%4s  %-*s  %-*s  %-*s  %9s  %7s  %7s  %7s  %8s  %8s  %6s\n", "pair", wa, "A", wb, "B", wd,
               "differs", "first div", ">1e-6", ">1e-3", ">1e-1", "escape A", "escape B", "B-A");
    }
    for (size_t i = 0; i < ps->npairs; i++) {
        const struct escape_pair *q = &ps->pairs[i];
        const struct escape_pairs_run *a = &ps->runs[q->a], *b = &ps->runs[q->b];
        escape_pair_differs(ps, q, differs, sizeof differs);
        escape_step_str(c[0], sizeof c[0], q->diverged, (int64_t)q->first_step, 0, "never");
        for (int t = 0; t < DIFF_NTHRESH; t++)
            escape_step_str(c[t + 1], sizeof c[t + 1], q->cross[t] >= 0, q->cross[t], q->cross_sketch[t], "-");
        escape_step_str(ea, sizeof ea, a->escape >= 0, a->escape, 0, "-");
        escape_step_str(eb, sizeof eb, b->escape >= 0, b->escape, 0, "-");
        if (q->have_escdiff)
            snprintf(ed, sizeof ed, "%+" PRId64, q->escdiff);
        else
            snprintf(ed, sizeof ed, "-");
        printf("%4zu  %-*s  %-*s  %-*s  %9s  %7s  %7s  %7s  %8s  %8s  %6s\n", i + 1, wa, a->rel, wb, b->rel,
               wd, differs, c[0], c[1], c[2], c[3], ea, eb, ed);
    }
    if (ps->npairs)
        printf("(first div: never = identical over the common steps; >X: first step where the\n"
               " relative parameter distance exceeds X, at a checkpoint, ~ estimated per step\n"
               " from sketches, - not reached; escape: the run's first escape, - none)\n");
    size_t nun = 0;
    for (size_t i = 0; i < ps->nruns; i++)
        nun += !ps->runs[i].paired;
    if (nun) {
        printf("not paired (no other run agrees on the keys and differs elsewhere): %zu\n", nun);
        for (size_t i = 0; i < ps->nruns; i++)
            if (!ps->runs[i].paired)
                printf("  %s\n", ps->runs[i].rel);
    }
    printf("divergence onset vs |escape B-A|, over the pairs where both are defined:\n");
    escape_corr_text("first divergent step:", &ps->corr_first);
    escape_corr_text("1e-3 crossing step:", &ps->corr_cross);
}

static void escape_json_step(FILE *f, int have, int64_t v)
{
    if (have)
        fprintf(f, "%" PRId64, v);
    else
        fputs("null", f);
}

static void escape_json_change(void *arg, const char *key, const char *va, const char *vb)
{
    int *n = arg;
    printf("%s{\"key\": ", (*n)++ ? ", " : "");
    json_put_str(stdout, key);
    fputs(", \"a\": ", stdout);
    if (va)
        json_put_str(stdout, va);
    else
        fputs("null", stdout);
    fputs(", \"b\": ", stdout);
    if (vb)
        json_put_str(stdout, vb);
    else
        fputs("null", stdout);
    putchar('}');
}

static void escape_json_corr(FILE *f, const char *name, const struct escape_pairs_corr *c)
{
    fprintf(f, "\"%s\": {\"n\": %zu, \"pearson\": ", name, c->n);
    json_put_num(f, c->pearson);
    fputs(", \"spearman\": ", f);
    json_put_num(f, c->spearman);
    fputs(", \"note\": ", f);
    json_put_str(f, c->n < 3 ? "too few pairs" : !isfinite(c->pearson) ? "no spread" : "");
    fputc('}', f);
}

static void escape_pairs_json(const char *dir, const struct escape_pairs *ps)
{
    FILE *f = stdout;
    fputs("{\"dir\": ", f);
    json_put_str(f, dir);
    fputs(", \"pair_keys\": [", f);
    for (size_t k = 0; k < ps->nkeys; k++) {
        fputs(k ? ", " : "", f);
        json_put_str(f, ps->keys[k]);
    }
    fprintf(f, "], \"traces\": %zu, \"groups\": %zu,\n \"pairs\": [", ps->nruns, ps->ngroups);
    static const char *tname[DIFF_NTHRESH] = {"1e-6", "1e-3", "1e-1"};
    for (size_t i = 0; i < ps->npairs; i++) {
        const struct escape_pair *q = &ps->pairs[i];
        const struct escape_pairs_run *a = &ps->runs[q->a], *b = &ps->runs[q->b];
        fprintf(f, "%s\n  {\"pair\": %zu, \"a\": ", i ? "," : "", i + 1);
        json_put_str(f, a->path);
        fputs(", \"b\": ", f);
        json_put_str(f, b->path);
        fputs(",\n   \"differs\": [", f);
        int n = 0;
        fflush(f);
        escape_pairs_for_each_change(ps, q, escape_json_change, &n);
        fputs("],\n   \"first_divergence\": ", f);
        escape_json_step(f, q->diverged, (int64_t)q->first_step);
        fputs(", \"cross\": {", f);
        for (int t = 0; t < DIFF_NTHRESH; t++) {
            fprintf(f, "%s\"%s\": ", t ? ", " : "", tname[t]);
            if (q->cross[t] >= 0)
                fprintf(f, "{\"step\": %" PRId64 ", \"from\": \"%s\"}", q->cross[t],
                        q->cross_sketch[t] ? "sketch" : "checkpoint");
            else
                fputs("null", f);
        }
        fputs("},\n   \"escape_a\": ", f);
        escape_json_step(f, a->escape >= 0, a->escape);
        fputs(", \"escape_b\": ", f);
        escape_json_step(f, b->escape >= 0, b->escape);
        fputs(", \"escape_diff\": ", f);
        escape_json_step(f, q->have_escdiff, q->escdiff);
        fputc('}', f);
    }
    fputs("],\n \"unpaired\": [", f);
    int first = 1;
    for (size_t i = 0; i < ps->nruns; i++)
        if (!ps->runs[i].paired) {
            fputs(first ? "" : ", ", f);
            json_put_str(f, ps->runs[i].path);
            first = 0;
        }
    fputs("],\n \"correlation\": {", f);
    escape_json_corr(f, "first_divergence", &ps->corr_first);
    fputs(",\n  ", f);
    escape_json_corr(f, "cross_1e-3", &ps->corr_cross);
    fputs("}}\n", f);
}

/* Where the plots' "plot: PATH" lines go: with the text on stdout, else
 * (--json) on stderr; nowhere with -q. */
static FILE *escape_plot_log(int json, int quiet, FILE **devnull)
{
    *devnull = NULL;
    if (!quiet)
        return json ? stderr : stdout;
    *devnull = fopen("/dev/null", "w");
    return *devnull ? *devnull : stderr;
}

/* `escape --pairs DIR`: 0, or CLI_EXIT_TROUBLE after one line on stderr. */
static int escape_pairs_main(const char *dir, const char *keylist, const struct escape_params *p,
                             int json, int quiet, const char *plot_dir)
{
    char **keys;
    size_t nkeys;
    if (escape_pairs_keys(keylist, &keys, &nkeys) < 0) {
        cli_error("escape", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    struct escape_pairs ps;
    int rc = escape_pairs_build(dir, keys, nkeys, p, &ps);
    for (size_t k = 0; k < nkeys; k++)
        free(keys[k]);
    free(keys);
    if (rc < 0) {
        cli_error("escape", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    if (quiet)
        ;
    else if (json)
        escape_pairs_json(dir, &ps);
    else
        escape_pairs_text(dir, &ps);
    rc = 0;
    FILE *devnull;
    if (plot_dir && plot_pairs(plot_dir, &ps, escape_plot_log(json, quiet, &devnull)) < 0) {
        cli_error("escape", "%s", dt_error());
        rc = CLI_EXIT_TROUBLE;
    }
    if (plot_dir && devnull)
        fclose(devnull);
    escape_pairs_free(&ps);
    return rc;
}

/* An option's integer argument into *out (0 = automatic). */
static int escape_opt_int(const char *opt, const char *s, int *out)
{
    if (cli_int(opt, s, 0, 100000000, out) < 0) {
        cli_error("escape", "%s", dt_error());
        return -1;
    }
    return 0;
}

int cmd_escape(int argc, char **argv)
{
    static const struct option opts[] = {
        {"window", required_argument, NULL, 'w'},
        {"min-len", required_argument, NULL, 'm'},
        {"max-gap", required_argument, NULL, 'g'},
        {"horizon", required_argument, NULL, 'H'},
        {"flat", required_argument, NULL, 'f'},
        {"noise", required_argument, NULL, 'n'},
        {"drop", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},
        {"curvature", required_argument, NULL, 'c'},
        {"plot", required_argument, NULL, 'p'},
        {"pairs", required_argument, NULL, 'P'},
        {"pair-key", required_argument, NULL, 'K'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct escape_params p;
    escape_params_defaults(&p);
    int json = 0, quiet = 0, has_curv = 0, c;
    uint64_t curv_step = 0;
    const char *plot_dir = NULL, *pairs_dir = NULL, *pair_keys = NULL;
    optind = 0;
    while ((c = getopt_long(argc, argv, "w:qhV", opts, NULL)) != -1) {
        switch (c) {
        case 'w':
            if (escape_opt_int("--window", optarg, &p.window) < 0)
                return CLI_EXIT_TROUBLE;
            break;
        case 'm':
            if (escape_opt_int("--min-len", optarg, &p.min_len) < 0)
                return CLI_EXIT_TROUBLE;
            break;
        case 'g':
            if (escape_opt_int("--max-gap", optarg, &p.max_gap) < 0)
                return CLI_EXIT_TROUBLE;
            break;
        case 'H':
            if (escape_opt_int("--horizon", optarg, &p.horizon) < 0)
                return CLI_EXIT_TROUBLE;
            break;
        case 'f':
        case 'n':
        case 'd': {
            const char *name = c == 'f' ? "--flat" : c == 'n' ? "--noise" : "--drop";
            double *dst = c == 'f' ? &p.flat : c == 'n' ? &p.noise_k : &p.drop;
            if (cli_double(name, optarg, dst) < 0) {
                cli_error("escape", "%s", dt_error());
                return CLI_EXIT_TROUBLE;
            }
            break;
        }
        case 'j': json = 1; break;
        case 'c':
            if (cli_u64("--curvature", optarg, &curv_step) < 0) {
                cli_error("escape", "%s", dt_error());
                return CLI_EXIT_TROUBLE;
            }
            has_curv = 1;
            break;
        case 'p': plot_dir = optarg; break;
        case 'P': pairs_dir = optarg; break;
        case 'K': pair_keys = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': escape_usage(stdout); return 0;
        case 'V': return cli_version();
        default: return cli_usage_error("escape");
        }
    }
    char msg[160];
    if (escape_params_check(&p, msg, sizeof msg) < 0) {
        cli_error("escape", "%s", msg);
        return CLI_EXIT_TROUBLE;
    }
    if (pair_keys && !pairs_dir) {
        cli_error("escape", "--pair-key needs --pairs DIR");
        return CLI_EXIT_TROUBLE;
    }
    if (pairs_dir) {
        if (argc - optind > 0) {
            cli_error("escape", "--pairs DIR takes no trace files (got %s)", argv[optind]);
            return CLI_EXIT_TROUBLE;
        }
        if (has_curv) {
            cli_error("escape", "--curvature does not go with --pairs");
            return CLI_EXIT_TROUBLE;
        }
        if (plot_dir && plot_check() < 0) {
            cli_error("escape", "%s", dt_error());
            return CLI_EXIT_TROUBLE;
        }
        int rc = escape_pairs_main(pairs_dir, pair_keys ? pair_keys : ESCAPE_PAIRS_DEFAULT_KEYS, &p,
                                   json, quiet, plot_dir);
        if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
            cli_error("escape", "write error on standard output");
            return CLI_EXIT_TROUBLE;
        }
        return rc;
    }
    if (argc - optind < 1) {
        cli_error("escape", "expected at least one trace file");
        return cli_usage_error("escape");
    }
    if (plot_dir && plot_check() < 0) {
        cli_error("escape", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    size_t nruns = (size_t)(argc - optind);
    struct escape_run_out *out = dt_calloc(nruns, sizeof *out);
    int rc = 0;
    size_t opened = 0;
    for (; opened < nruns; opened++) {
        struct trace_file *tf;
        if (trace_open(&tf, argv[optind + (int)opened]) < 0) {
            cli_error("escape", "%s", dt_error());
            rc = CLI_EXIT_TROUBLE;
            break;
        }
        out[opened].tf = tf;
        if (strstr(tf->note, "corrupt")) {
            cli_error("escape", "%s: %s", tf->path, tf->note);
            opened++;
            rc = CLI_EXIT_TROUBLE;
            break;
        }
        size_t n = (size_t)tf->nsteps;
        double *loss = dt_malloc((n ? n : 1) * sizeof *loss);
        double *gn = dt_malloc((n ? n : 1) * sizeof *gn);
        for (size_t s = 0; s < n; s++) {
            loss[s] = tf->steps[s].loss;
            gn[s] = tf->steps[s].grad_norm;
        }
        escape_analyze(loss, gn, n, &p, &out[opened].r);
        free(loss);
        free(gn);
        if (has_curv) {
            struct curvature_params cp;
            curvature_params_defaults(&cp);
            if (curvature_at_step(tf->path, curv_step, &cp, &out[opened].curv) < 0) {
                cli_error("escape", "%s", dt_error());
                opened++;
                rc = CLI_EXIT_TROUBLE;
                break;
            }
            out[opened].has_curv = 1;
        }
    }
    if (rc == 0 && !quiet) {
        if (json)
            escape_print_json(out, nruns);
        else
            for (size_t k = 0; k < nruns; k++)
                escape_print_text(&out[k]);
    }
    if (rc == 0 && plot_dir) {
        struct plot_run *pr = dt_calloc(nruns, sizeof *pr);
        for (size_t k = 0; k < nruns; k++)
            pr[k] = (struct plot_run){.tf = out[k].tf, .r = &out[k].r};
        /* with --json, stdout holds only the JSON object */
        FILE *devnull;
        if (plot_escape(plot_dir, pr, nruns, escape_plot_log(json, quiet, &devnull)) < 0) {
            cli_error("escape", "%s", dt_error());
            rc = CLI_EXIT_TROUBLE;
        }
        if (devnull)
            fclose(devnull);
        free(pr);
    }
    for (size_t k = 0; k < opened; k++) {
        escape_result_free(&out[k].r);
        trace_close(out[k].tf);
    }
    free(out);
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
        cli_error("escape", "write error on standard output");
        return CLI_EXIT_TROUBLE;
    }
    return rc;
}
