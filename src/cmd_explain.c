/* cmd_explain.c: `divtrace explain A B`: the report of explain_run, as text
 * ending with the verdict line, or as JSON. Exit 0 no bug found (identical,
 * rounding only), 1 a bug or a recording that re-execution does not
 * reproduce, 2 trouble or no verdict. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "explain.h"
#include "progress.h"
#include "ranks.h"
#include "trace.h"
#include "util.h"

static void explain_usage(FILE *f)
{
    fputs("Usage: divtrace explain [OPTION]... A.dtr B.dtr\n"
          "  or:  divtrace explain [OPTION]... RANK.dtr RANK.dtr [RANK.dtr]...\n"
          "Why do two runs differ? Diff the traces, check each for state changed between\n"
          "steps (carry faults) and for a graph that is not its model's, replay the\n"
          "origin ops of the first divergent step of each against the exact oracle, and\n"
          "end with one verdict line: identical; rounding only, with the configuration\n"
          "keys that explain it; or bug in A or B, with the op, the tensor changed\n"
          "between steps, or the op wired wrongly, and its step, layer and time step.\n"
          "Distinct ranks of one torch.distributed job are held to bitwise equal\n"
          "replicas: the verdict names the first step, rank and tensor where they part.\n"
          "\n"
          "      --all        check every op of the first divergent step at once (by\n"
          "                   default the origin ops first, then every op when those are\n"
          "                   within their bounds), and list every op checked\n"
          "      --threshold X  list the checked ops whose error is above X times their\n"
          "                   bound (default 1: the SEMANTIC ones; 0: every inexact op);\n"
          "                   ops not reproduced are listed too\n"
          "      --json       one JSON object instead of the text (every op checked)\n"
          "  -q, --quiet      print nothing; only the exit status\n"
          "      --progress   progress as plain lines on stderr, a line per phase and at\n"
          "                   the end (on a terminal a line is rewritten in place\n"
          "                   without it)\n"
          "  -h, --help       show this help and exit\n"
          "  -V, --version    show the version and exit\n"
          "\n"
          "Text lists only the ops that matter and says how many it leaves out.\n"
          "Exit status: 0 no bug found (identical, or rounding only); 1 a bug, or a\n"
          "recorded op that re-execution does not reproduce; 2 trouble, or no verdict\n"
          "(what could not be checked is said).\n",
          f);
}

static const char *explain_class_text(const struct replay_opcheck *c, char *buf, size_t n)
{
    if (c->max_ulp == UINT64_MAX)
        snprintf(buf, n, "%s, NaN against a number", replay_class_name(c->cls));
    else
        snprintf(buf, n, "%s, %" PRIu64 " ulp, %.3g of the bound", replay_class_name(c->cls), c->max_ulp,
                 c->max_ratio);
    return buf;
}

/* Which checked ops the text lists: every one (--all), else those that
 * matter (replay_op_matters). */
struct explain_view {
    int all;
    double threshold;
};

/* The line that says how many checked ops were left out, if any. */
static void explain_text_left(int nleft, const char *what, const struct explain_view *v)
{
    if (!nleft)
        return;
    printf("  not listed: %d %s%s, exact or rounding within ", nleft, what, nleft == 1 ? "" : "s");
    if (v->threshold == 1)
        printf("the bound");
    else
        printf("%g times the bound", v->threshold);
    printf(" (--all lists them)\n");
}

/* A PyTorch adapter trace's side: its modules checked from their stored
 * data, and those that could not be. */
static void explain_text_torch(const struct explain_result *res, const struct explain_side *s,
                               const struct explain_view *v)
{
    const struct trace_file *tf = s->tf;
    char buf[EXPLAIN_TEXT];
    if (s->replayed) {
        printf("%s: %s; against the exact oracle:\n", s->label, s->source);
        int nleft = 0;
        for (int k = 0; k < s->rr.ncheck; k++) {
            const struct replay_opcheck *c = &s->rr.check[k];
            if (!v->all && !replay_op_matters(c, v->threshold)) {
                nleft++;
                continue;
            }
            char name[160];
            snprintf(name, sizeof name, "%s (%s)", tf->ops[c->op].name, tf->ops[c->op].type);
            printf("  %-28s %s%s%s\n", name, explain_class_text(c, buf, sizeof buf),
                   c->algorithm[0] ? ", worst in " : "", c->algorithm);
        }
        explain_text_left(nleft, "module", v);
        printf("  %d modules checked: %" PRIu64 " exact, %" PRIu64 " rounding, %" PRIu64 " SEMANTIC\n",
               s->rr.ncheck, s->rr.nexact, s->rr.nrounding, s->rr.nsemantic);
    }
    if (s->custom[0])
        printf("%s: modules of your own (no oracle): %s\n", s->label, s->custom);
    if (s->not_checked[0])
        printf("%s: not checked: %s\n", s->label, s->not_checked);
    (void)res;
}

static void explain_text_side(const struct explain_result *res, const struct explain_side *s,
                              const struct explain_view *v)
{
    const struct trace_file *tf = s->tf;
    char buf[EXPLAIN_TEXT];
    if (s->carry.n) {
        carry_describe(tf, &s->carry.f[0], buf, sizeof buf);
        printf("%s: carry faults in %" PRIu64 " step%s; the first: %s\n", s->label, s->carry.nsteps,
               s->carry.nsteps == 1 ? "" : "s", buf);
    } else if (!s->carry.checkable) {
        printf("%s: carry faults: not checked beyond the recorded events (the trace keeps no "
               "records of leaves and their updates)\n", s->label);
    }
    if (s->graph[0])
        printf("%s: graph: %s%s\n", s->label, s->graph_checked ? "" : "not checked: ", s->graph);
    if (!res->checked_step)
        return;
    if (s->torch) {
        explain_text_torch(res, s, v);
        return;
    }
    if (s->not_checked[0]) {
        printf("%s: ops of step %" PRIu64 " not checked: %s\n", s->label, res->step, s->not_checked);
        return;
    }
    const struct replay_result *rr = &s->rr;
    printf("%s: replayed steps %" PRIu64 " to %" PRIu64 " from the checkpoint at step %" PRIu64
           " (%.2f s); step %" PRIu64 " against the exact oracle:\n", s->label, rr->from_ckpt, rr->last,
           rr->from_ckpt, rr->seconds, res->step);
    int nleft = 0;
    for (int k = 0; k < rr->ncheck; k++) {
        const struct replay_opcheck *c = &rr->check[k];
        if (!v->all && !replay_op_matters(c, v->threshold)) {
            nleft++;
            continue;
        }
        printf("  %-28s %s%s\n", tf->ops[c->op].name, explain_class_text(c, buf, sizeof buf),
               c->bitwise == 1 ? "; bitwise the recorded backend's own result"
               : c->bitwise == 0 ? "; not the recorded backend's own result" : "");
    }
    explain_text_left(nleft, "op", v);
    printf("  %d ops checked: %" PRIu64 " exact, %" PRIu64 " rounding, %" PRIu64 " SEMANTIC\n", rr->ncheck,
           rr->nexact, rr->nrounding, rr->nsemantic);
    if (s->nondet_checked)
        printf("  (%s ran nondeterministic kernels: the recorded outputs of %d op%s, which re-execution "
               "does not give again, were checked through their L2 norms and extremes)\n", s->label,
               s->nondet_checked, s->nondet_checked == 1 ? "" : "s");
    if (!rr->reproduced && rr->mismatch_op >= 0)
        printf("  re-execution first differs from the recording in step %" PRId64 ", op %s%s%s\n",
               rr->mismatch_step, tf->ops[rr->mismatch_op].name, rr->config_diff[0] ? "; here: " : "",
               rr->config_diff);
}

static void explain_text(const struct explain_result *res, const struct explain_view *v)
{
    const struct diff_result *d = &res->d;
    for (int x = 0; x < 2; x++) {
        const struct trace_file *t = res->side[x].tf;
        printf("%s: %s (%" PRIu64 " steps, %s)\n", res->side[x].label, t->path, t->nsteps,
               t->complete ? "complete" : t->note);
    }
    if (!d->ops_match)
        printf("op lists differ in %d op%s; the first: %s\n", d->nopdiffs, d->nopdiffs == 1 ? "" : "s",
               d->opdiff);
    if (d->values_differ) {
        const struct trace_file *a = res->side[0].tf;
        if (d->first_op >= 0)
            printf("first divergence: step %" PRIu64 ", op %s\n", d->first_step, a->ops[d->first_op].name);
        else
            printf("first divergence: step %" PRIu64 "\n", d->first_step);
        printf("origin ops of step %" PRIu64 " (inputs identical, output different): %d%s\n", d->first_step,
               d->norigins, d->origins_partial ? " (some ops have no records: maybe more)" : "");
        for (int k = 0; k < d->norigins && k < 12; k++)
            printf("  %s\n", a->ops[d->origins[k]].name);
        if (d->norigins > 12)
            printf("  ... and %d more\n", d->norigins - 12);
    } else if (d->common) {
        printf("values: identical in all %" PRIu64 " common steps\n", d->common);
    }
    for (int x = 0; x < 2; x++)
        explain_text_side(res, &res->side[x], v);
    printf("%s\n", res->line);
}

static void explain_json_side(const struct explain_result *res, const struct explain_side *s)
{
    const struct trace_file *tf = s->tf;
    printf("{\"label\": \"%s\", \"trace\": ", s->label);
    json_put_str(stdout, tf->path);
    printf(", \"bug\": %s, \"not_reproduced\": %s, \"finding\": ", s->bug ? "true" : "false",
           s->mismatch ? "true" : "false");
    json_put_str(stdout, s->finding);
    printf(",\n  \"carry_checkable\": %s, \"carry_steps\": %" PRIu64 ", \"carry\": [",
           s->carry.checkable ? "true" : "false", s->carry.nsteps);
    for (int k = 0; k < s->carry.n && k < 100; k++) {
        const struct carry_fault *f = &s->carry.f[k];
        printf("%s{\"step\": %" PRIu64 ", \"tensor\": ", k ? ", " : "", f->step);
        json_put_str(stdout, tf->ops[f->leaf].name);
        printf(", \"written_by\": ");
        json_put_str(stdout, tf->ops[f->writer].name);
        putchar('}');
    }
    printf("],\n  \"graph_checked\": %s, \"graph\": ", s->graph_checked ? "true" : "false");
    json_put_str(stdout, s->graph);
    printf(", \"replayed\": %s, \"nondeterministic\": %s, \"checked_by_statistics\": %d, \"not_checked\": ",
           s->replayed ? "true" : "false", s->nondet ? "true" : "false", s->nondet_checked);
    json_put_str(stdout, s->not_checked);
    printf(",\n  \"ops\": [");
    for (int k = 0; s->replayed && k < s->rr.ncheck; k++) {
        fputs(k ? ",\n   " : "\n   ", stdout);
        replay_check_json(stdout, tf, &s->rr.check[k]);
    }
    if (s->torch) {
        /* a PyTorch trace: where its module data came from, and its own modules */
        printf("], \"module_data\": ");
        json_put_str(stdout, s->source);
        printf(", \"custom_modules\": ");
        json_put_str(stdout, s->custom);
    }
    printf("%s \"config_here\": ", s->torch ? "," : "],");
    json_put_str(stdout, s->replayed ? s->rr.config_diff : "");
    putchar('}');
    (void)res;
}

static void explain_json(const struct explain_result *res)
{
    const struct diff_result *d = &res->d;
    const struct trace_file *a = res->side[0].tf;
    printf("{\"verdict\": \"%s\", \"line\": ", explain_verdict_name(res->verdict));
    json_put_str(stdout, res->line);
    printf(", \"keys\": ");
    json_put_str(stdout, res->keys);
    printf(",\n \"ops_match\": %s, \"opdiff\": ", d->ops_match ? "true" : "false");
    json_put_str(stdout, d->opdiff);
    printf(", \"values_differ\": %s, \"first_step\": ", d->values_differ ? "true" : "false");
    if (d->values_differ)
        printf("%" PRIu64, d->first_step);
    else
        fputs("null", stdout);
    printf(", \"origins\": [");
    for (int k = 0; d->values_differ && k < d->norigins; k++) {
        fputs(k ? ", " : "", stdout);
        json_put_str(stdout, a->ops[d->origins[k]].name);
    }
    printf("],\n \"a\": ");
    explain_json_side(res, &res->side[0]);
    printf(",\n \"b\": ");
    explain_json_side(res, &res->side[1]);
    printf(",\n \"seconds\": ");
    json_put_num(stdout, res->seconds);
    printf("}\n");
}

/* With --progress, the last line: the verdict and the time. */
static void explain_done(const struct explain_options *opt, const char *verdict, double seconds)
{
    if (opt->progress == PROGRESS_LINES)
        fprintf(stderr, "divtrace explain: done: %s in %.1f s\n", verdict, seconds);
}

static int explain_two(struct trace_file *a, struct trace_file *b, const struct explain_options *opt, int json,
                       int quiet, const struct explain_view *v)
{
    struct explain_result res;
    int rc;
    if (explain_run(a, b, opt, &res) < 0) {
        explain_phase(opt, NULL);
        cli_error("explain", "%s", dt_error());
        rc = CLI_EXIT_TROUBLE;
    } else {
        if (!quiet && json)
            explain_json(&res);
        else if (!quiet)
            explain_text(&res, v);
        explain_done(opt, explain_verdict_name(res.verdict), res.seconds);
        if (res.verdict == EXPLAIN_BUG || res.side[0].mismatch || res.side[1].mismatch)
            rc = CLI_EXIT_FINDING;
        else if (res.verdict == EXPLAIN_UNKNOWN) {
            /* trouble is one line on stderr, also under -q and --json */
            cli_error("explain", "%s", res.line);
            rc = CLI_EXIT_TROUBLE;
        }
        else
            rc = 0;
        if (!quiet && fflush(stdout) != 0) {
            cli_error("explain", "writing the report: %s", strerror(errno));
            rc = CLI_EXIT_TROUBLE;
        }
    }
    explain_result_free(&res);
    return rc;
}

/* ---- the ranks of one job (ranks.h) ---- */

/* The verdict line for ranks: a replica that parts from the others, else
 * carry faults (in every rank alike), else identical. */
static enum explain_verdict explain_ranks_verdict(const struct ranks_result *r, const struct carry_scan *carry,
                                                  char *line, size_t n)
{
    size_t len = 0;
    if (r->cause != RANKS_AGREE) {
        int o = ranks_first_odd(r);
        len = (size_t)snprintf(line, n, "bug in %s: %s", r->label[o], r->text);
        for (int k = 0; k < r->n && len < n; k++)
            if (r->odd[k] && k != o)
                len += (size_t)snprintf(line + len, n - len, "; bug in %s: rank %" PRId64 "'s %s too", r->label[k],
                                        r->rank[k], r->cause == RANKS_CAUSE_OPS ? "op list" : r->name);
        return EXPLAIN_BUG;
    }
    for (int k = 0; k < r->n && len < n; k++) {
        const struct carry_scan *c = &carry[k];
        const struct trace_file *t = r->tf[k];
        if (c->n)
            len += (size_t)snprintf(line + len, n - len, "%sbug in %s: %s changed between steps %" PRIu64 " and %"
                                    PRIu64 " in rank %" PRId64 ": it is not what %s wrote (%" PRIu64 " step%s "
                                    "began with a changed leaf)", len ? "; " : "", r->label[k],
                                    t->ops[c->f[0].leaf].name, c->f[0].step - 1, c->f[0].step, r->rank[k],
                                    t->ops[c->f[0].writer].name, c->nsteps, c->nsteps == 1 ? "" : "s");
    }
    if (len)
        return EXPLAIN_BUG;
    if (!r->compared) {
        snprintf(line, n, "no verdict: the ranks' traces keep no records of parameters, gradients or updates "
                 "and share no checkpoint (record at level param or op, or with checkpoints)");
        return EXPLAIN_UNKNOWN;
    }
    int longest = 0;
    for (int k = 1; k < r->n; k++)
        if (r->tf[k]->nsteps > r->tf[longest]->nsteps)
            longest = k;
    if (r->tf[longest]->nsteps == r->common)
        snprintf(line, n, "identical");
    else
        snprintf(line, n, "identical (the %" PRIu64 " steps every rank holds; %s has %" PRIu64 " more)",
                 r->common, r->label[longest], r->tf[longest]->nsteps - r->common);
    return EXPLAIN_IDENTICAL;
}

static int explain_ranks(struct trace_file **tf, int n, const struct explain_options *opt, int json, int quiet)
{
    double t0 = dt_now();
    struct ranks_result r;
    struct carry_scan *carry = dt_calloc((size_t)n, sizeof *carry);
    for (int k = 0; k < n; k++)
        carry_scan_trace(tf[k], &carry[k]);
    int rc = CLI_EXIT_TROUBLE;
    if (ranks_compare(tf, n, &r) < 0) {
        cli_error("explain", "%s", dt_error());
        goto out;
    }
    char line[4 * EXPLAIN_TEXT], buf[EXPLAIN_TEXT];
    enum explain_verdict v = explain_ranks_verdict(&r, carry, line, sizeof line);
    explain_done(opt, explain_verdict_name(v), dt_now() - t0);
    if (!quiet && json) {
        printf("{\"verdict\": \"%s\", \"line\": ", explain_verdict_name(v));
        json_put_str(stdout, line);
        printf(", \"keys\": \"\", ");
        ranks_print_json(stdout, &r);
        printf(",\n \"carry\": [");
        for (int k = 0; k < n; k++) {
            printf("%s{\"label\": \"%s\", \"checkable\": %s, \"steps\": %" PRIu64 ", \"first\": ",
                   k ? ", " : "", r.label[k], carry[k].checkable ? "true" : "false", carry[k].nsteps);
            if (carry[k].n) {
                carry_describe(tf[k], &carry[k].f[0], buf, sizeof buf);
                json_put_str(stdout, buf);
            } else {
                fputs("null", stdout);
            }
            putchar('}');
        }
        printf("], \"seconds\": ");
        json_put_num(stdout, dt_now() - t0);
        printf("}\n");
    } else if (!quiet) {
        ranks_print_text(stdout, &r, 0);
        int any = 0;
        for (int k = 0; k < n; k++)
            if (carry[k].n) {
                carry_describe(tf[k], &carry[k].f[0], buf, sizeof buf);
                printf("%s: carry faults in %" PRIu64 " step%s; the first: %s\n", r.label[k], carry[k].nsteps,
                       carry[k].nsteps == 1 ? "" : "s", buf);
                any = 1;
            }
        if (!any)
            printf("carry faults: none in any rank\n");
        printf("%s\n", line);
    }
    rc = v == EXPLAIN_BUG ? CLI_EXIT_FINDING : v == EXPLAIN_UNKNOWN ? CLI_EXIT_TROUBLE : 0;
    if (v == EXPLAIN_UNKNOWN)
        cli_error("explain", "%s", line);
    if (!quiet && fflush(stdout) != 0) {
        cli_error("explain", "writing the report: %s", strerror(errno));
        rc = CLI_EXIT_TROUBLE;
    }
out:
    ranks_result_free(&r);
    for (int k = 0; k < n; k++)
        carry_scan_free(&carry[k]);
    free(carry);
    return rc;
}

int cmd_explain(int argc, char **argv)
{
    enum { OPT_ALL = 256, OPT_JSON, OPT_THRESHOLD, OPT_PROGRESS };
    static const struct option opts[] = {
        {"all", no_argument, NULL, OPT_ALL},
        {"threshold", required_argument, NULL, OPT_THRESHOLD},
        {"json", no_argument, NULL, OPT_JSON},
        {"quiet", no_argument, NULL, 'q'},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct explain_options opt = {.self = "/proc/self/exe"};
    struct explain_view view = {0, 1};
    int json = 0, quiet = 0, lines = 0, c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "qhV", opts, NULL)) != -1) {
        switch (c) {
        case OPT_ALL: opt.all = view.all = 1; break;
        case OPT_THRESHOLD:
            if (cli_double("--threshold", optarg, &view.threshold) < 0 || view.threshold < 0) {
                cli_error("explain", "--threshold '%s': expected a number of at least 0", optarg);
                return CLI_EXIT_TROUBLE;
            }
            break;
        case OPT_JSON: json = 1; break;
        case 'q': quiet = 1; break;
        case OPT_PROGRESS: lines = 1; break;
        case 'h': explain_usage(stdout); return 0;
        case 'V': return cli_version();
        default: return cli_usage_error("explain");
        }
    }
    int n = argc - optind;
    if (n < 2) {
        cli_error("explain", "expected two trace files");
        return cli_usage_error("explain");
    }
    opt.progress = progress_mode_pick(quiet, lines);
    struct trace_file **tf = dt_calloc((size_t)n, sizeof *tf);
    int rc = CLI_EXIT_TROUBLE;
    for (int k = 0; k < n; k++) {
        explain_phase(&opt, k == 0 ? "reading A" : k == 1 ? "reading B" : "reading the ranks");
        if (trace_open(&tf[k], argv[optind + k]) < 0) {
            explain_phase(&opt, NULL);
            cli_error("explain", "%s", dt_error());
            goto out;
        }
    }
    explain_phase(&opt, NULL);
    int mode = ranks_detect(tf, n);
    if (mode < 0)
        cli_error("explain", "%s", dt_error());
    else if (mode == 1)
        rc = explain_ranks(tf, n, &opt, json, quiet);
    else
        rc = explain_two(tf[0], tf[1], &opt, json, quiet, &view);
out:
    for (int k = 0; k < n; k++)
        trace_close(tf[k]);
    free(tf);
    return rc;
}
