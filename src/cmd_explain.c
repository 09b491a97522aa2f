/* cmd_explain.c: `divtrace explain A B`: the report of explain_run, as text
 * ending with the verdict line, or as JSON. Exit 0 no bug found (identical,
 * rounding only), 1 a bug or a recording that re-execution does not
 * reproduce, 2 trouble or no verdict. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "explain.h"
#include "trace.h"
#include "util.h"

static void explain_usage(FILE *f)
{
    fputs("Usage: divtrace explain [OPTION]... A.dtr B.dtr\n"
          "Why do two runs differ? Diff the traces, check each for state changed between\n"
          "steps (carry faults) and for a graph that is not its model's, replay the\n"
          "origin ops of the first divergent step of each against the exact oracle, and\n"
          "end with one verdict line: identical; rounding only, with the configuration\n"
          "keys that explain it; or bug in A or B, with the op, the tensor changed\n"
          "between steps, or the op wired wrongly, and its step, layer and time step.\n"
          "\n"
          "      --all        check every op of the first divergent step, not only the\n"
          "                   origin ops\n"
          "      --json       one JSON object instead of text\n"
          "  -q, --quiet      print nothing; only the exit status\n"
          "  -h, --help       show this help and exit\n"
          "  -V, --version    show the version and exit\n"
          "\n"
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

/* A PyTorch adapter trace's side: its modules checked from their stored
 * data, and those that could not be. */
static void explain_text_torch(const struct explain_result *res, const struct explain_side *s)
{
    const struct trace_file *tf = s->tf;
    char buf[EXPLAIN_TEXT];
    if (s->replayed) {
        printf("%s: %s; against the exact oracle:\n", s->label, s->source);
        for (int k = 0; k < s->rr.ncheck; k++) {
            const struct replay_opcheck *c = &s->rr.check[k];
            char name[160];
            snprintf(name, sizeof name, "%s (%s)", tf->ops[c->op].name, tf->ops[c->op].type);
            printf("  %-28s %s%s%s\n", name, explain_class_text(c, buf, sizeof buf),
                   c->algorithm[0] ? ", worst in " : "", c->algorithm);
        }
        printf("  %d modules checked: %" PRIu64 " exact, %" PRIu64 " rounding, %" PRIu64 " SEMANTIC\n",
               s->rr.ncheck, s->rr.nexact, s->rr.nrounding, s->rr.nsemantic);
    }
    if (s->not_checked[0])
        printf("%s: not checked: %s\n", s->label, s->not_checked);
    (void)res;
}

static void explain_text_side(const struct explain_result *res, const struct explain_side *s)
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
        explain_text_torch(res, s);
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
    for (int k = 0; k < rr->ncheck; k++) {
        const struct replay_opcheck *c = &rr->check[k];
        if (c->cls == REPLAY_EXACT && rr->ncheck > 8)
            continue;
        printf("  %-28s %s%s\n", tf->ops[c->op].name, explain_class_text(c, buf, sizeof buf),
               c->bitwise == 1 ? "; bitwise the recorded backend's own result"
               : c->bitwise == 0 ? "; not the recorded backend's own result" : "");
    }
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

static void explain_text(const struct explain_result *res)
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
        explain_text_side(res, &res->side[x]);
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
    printf("], \"config_here\": ");
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

int cmd_explain(int argc, char **argv)
{
    enum { OPT_ALL = 256, OPT_JSON };
    static const struct option opts[] = {
        {"all", no_argument, NULL, OPT_ALL},
        {"json", no_argument, NULL, OPT_JSON},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct explain_options opt = {.self = "/proc/self/exe"};
    int json = 0, quiet = 0, c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "qhV", opts, NULL)) != -1) {
        switch (c) {
        case OPT_ALL: opt.all = 1; break;
        case OPT_JSON: json = 1; break;
        case 'q': quiet = 1; break;
        case 'h': explain_usage(stdout); return 0;
        case 'V': return cli_version();
        default: return cli_usage_error("explain");
        }
    }
    if (argc - optind != 2) {
        cli_error("explain", "expected two trace files");
        return cli_usage_error("explain");
    }
    opt.progress = !quiet && isatty(STDERR_FILENO);
    struct trace_file *tf[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        explain_phase(&opt, k ? "reading B" : "reading A");
        if (trace_open(&tf[k], argv[optind + k]) < 0) {
            explain_phase(&opt, NULL);
            cli_error("explain", "%s", dt_error());
            trace_close(tf[0]);
            return CLI_EXIT_TROUBLE;
        }
    }
    struct explain_result res;
    int rc;
    if (explain_run(tf[0], tf[1], &opt, &res) < 0) {
        explain_phase(&opt, NULL);
        cli_error("explain", "%s", dt_error());
        rc = CLI_EXIT_TROUBLE;
    } else {
        if (!quiet && json)
            explain_json(&res);
        else if (!quiet)
            explain_text(&res);
        if (res.verdict == EXPLAIN_BUG || res.side[0].mismatch || res.side[1].mismatch)
            rc = CLI_EXIT_FINDING;
        else if (res.verdict == EXPLAIN_UNKNOWN)
            rc = CLI_EXIT_TROUBLE;
        else
            rc = 0;
        if (!quiet && fflush(stdout) != 0) {
            cli_error("explain", "writing the report: %s", strerror(errno));
            rc = CLI_EXIT_TROUBLE;
        }
    }
    explain_result_free(&res);
    trace_close(tf[0]);
    trace_close(tf[1]);
    return rc;
}
