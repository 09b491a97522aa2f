/* cmd_replay.c: `divtrace replay`: option parsing and the report. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "diff.h"
#include "progress.h"
#include "replay.h"
#include "torchcheck.h"
#include "trace.h"
#include "util.h"

static void replay_usage(FILE *f)
{
    fputs("Usage: divtrace replay [OPTION]... TRACE.dtr --step S\n"
          "Re-execute recorded steps from a checkpoint and check them.\n"
          "\n"
          "  -s, --step S         the first step to check (required)\n"
          "  -n, --steps N        how many steps to check, S to S+N-1 (a count, as in\n"
          "                       every command; default 1)\n"
          "      --from F         start at the last checkpoint at or before step F\n"
          "                       (default S - 1, so that state one step hands to the\n"
          "                       next is rebuilt); every step from there is\n"
          "                       re-executed and compared with the recording\n"
          "  -a, --against WHAT   same (default): re-execute on the recorded backend and\n"
          "                       compare every op hash with the recording, stopping at\n"
          "                       the first mismatch; mpfr: give every op of the checked\n"
          "                       steps its own float32 inputs, compute the exact result\n"
          "                       and classify the op as exact, rounding (within the\n"
          "                       bound of any admissible float32 evaluation) or\n"
          "                       SEMANTIC (beyond it); the recorded backend's name\n"
          "                       (e.g. cpu) means same; an op that cuDNN ran with an\n"
          "                       FFT or Winograd algorithm is held to a normwise bound\n"
          "      --ops LIST       against mpfr: check only these ops (names, commas)\n"
          "      --inject OP:KIND a fault in op OP (as for record) during the replay\n"
          "      --threshold X    against mpfr: list the ops whose error is above X times\n"
          "                       their bound (default 1: the SEMANTIC ones; 0: every\n"
          "                       inexact op); ops not reproduced are listed too\n"
          "      --all            against mpfr: list every op checked\n"
          "      --json           one JSON object instead of the text (every op)\n"
          "      --result-fd FD   write the result to file descriptor FD in a binary\n"
          "                       form only this divtrace reads (divtrace explain)\n"
          "  -q, --quiet          print nothing; only the exit status\n"
          "      --progress       progress as plain lines on stderr, every 10 s and at\n"
          "                       the end (on a terminal a line is rewritten in place\n"
          "                       without it)\n"
          "  -h, --help           show this help and exit\n"
          "  -V, --version        show the version and exit\n"
          "\n"
          "Text lists only the ops that matter and says how many it leaves out.\n"
          "A recorded op output that re-execution does not give from the same inputs is\n"
          "a finding: replay names the first and what differs in the configuration.\n"
          "Exit status: 0 reproduced bitwise (and, against mpfr, no op SEMANTIC);\n"
          "1 not reproduced, or some op SEMANTIC; 2 trouble.\n",
          f);
}

static void replay_print_check(const struct trace_file *tf, const struct replay_opcheck *c)
{
    const struct trace_opdef *o = &tf->ops[c->op];
    char ulp[32];
    if (c->max_ulp == UINT64_MAX)
        snprintf(ulp, sizeof ulp, "NaN");
    else
        snprintf(ulp, sizeof ulp, "%" PRIu64, c->max_ulp);
    printf("  %4d  %-24s %-12s %10s  %10.3g  %s", c->op, o->name, o->type, ulp, c->max_ratio,
           replay_class_name(c->cls));
    if (c->normwise)
        printf(" (normwise bound: %s)", c->algorithm);
    if (c->bitwise == 0 && c->inputs_recorded == 1)
        printf("; not reproduced: the recording holds another output");
    if (c->recorded_ok == 0 && c->cls != REPLAY_SEMANTIC)
        printf("; the recorded statistics fit no output within the bound");
    putchar('\n');
    if (c->cls == REPLAY_SEMANTIC)
        printf("        worst element %" PRIu64 ": %.9g, exact %.9g, error %.3g, bound %.3g\n",
               c->worst, (double)c->worst_value, (double)c->worst_exact,
               fabs((double)c->worst_value - (double)c->worst_exact), c->worst_bound);
}

static void replay_text(const struct trace_file *tf, const struct replay_options *opt,
                        const struct replay_result *r, int all)
{
    printf("%s: steps %" PRIu64 " to %" PRIu64 " replayed from the checkpoint at step %" PRIu64
           " in %.2f s\n", tf->path, r->first, r->last, r->from_ckpt, r->seconds);
    if (opt->against == REPLAY_ORACLE) {
        uint64_t step = UINT64_MAX, left[3] = {0, 0, 0};
        for (int k = 0; k < r->ncheck; k++) {
            const struct replay_opcheck *c = &r->check[k];
            if (!all && !replay_op_matters(c, opt->threshold)) {
                left[c->cls]++;
                continue;
            }
            if (c->step != step) {
                step = c->step;
                printf("step %" PRIu64 " against the exact oracle%s:\n", step,
                       all ? "" : " (the ops that matter)");
                printf("  %4s  %-24s %-12s %10s  %10s  %s\n", "op", "name", "type", "max ulp",
                       "err/bound", "class");
            }
            replay_print_check(tf, c);
        }
        uint64_t nleft = left[0] + left[1] + left[2];
        if (nleft && nleft == left[0])
            printf("not listed: %" PRIu64 " op results, all exact (--all lists them)\n", nleft);
        else if (nleft) {
            printf("not listed: %" PRIu64 " op results, %" PRIu64 " exact and %" PRIu64 " rounding within ",
                   nleft, left[0], left[1] + left[2]);
            if (opt->threshold == 1)
                printf("their bound");
            else
                printf("%g times their bound", opt->threshold);
            printf(" (--all lists them)\n");
        }
        printf("summary: %d op results checked: %" PRIu64 " exact, %" PRIu64 " rounding, %" PRIu64
               " SEMANTIC\n", r->ncheck, r->nexact, r->nrounding, r->nsemantic);
    }
    if (r->reproduced) {
        printf("reproduced: every replayed step matches the recording bitwise\n");
        return;
    }
    if (r->mismatch_op >= 0)
        printf("not reproduced: in step %" PRId64 ", op %d %s's recorded output is not what "
               "re-execution gives from the same inputs\n", r->mismatch_step, r->mismatch_op,
               tf->ops[r->mismatch_op].name);
    else
        printf("not reproduced: step %" PRId64 " differs from the recording (its root hash; the "
               "trace keeps no op records to say where)\n", r->mismatch_step);
    if (r->config_diff[0])
        printf("  configuration here against the recording: %s\n", r->config_diff);
    else
        printf("  the configuration is the recorded one: the recording's run computed "
               "something this replay does not\n");
}

static void replay_json(const struct trace_file *tf, const struct replay_options *opt,
                        const struct replay_result *r)
{
    printf("{\"trace\": ");
    json_put_str(stdout, tf->path);
    printf(", \"first\": %" PRIu64 ", \"last\": %" PRIu64 ", \"checkpoint\": %" PRIu64
           ", \"against\": \"%s\", \"reproduced\": %s, ",
           r->first, r->last, r->from_ckpt, opt->against == REPLAY_ORACLE ? "mpfr" : "same",
           r->reproduced ? "true" : "false");
    printf("\"config_diff\": ");
    json_put_str(stdout, r->config_diff);
    printf(", \"mismatch_step\": ");
    if (r->mismatch_step >= 0)
        printf("%" PRId64, r->mismatch_step);
    else
        fputs("null", stdout);
    printf(", \"mismatch_op\": ");
    if (r->mismatch_op >= 0)
        printf("%d", r->mismatch_op);
    else
        fputs("null", stdout);
    printf(",\n \"exact\": %" PRIu64 ", \"rounding\": %" PRIu64 ", \"semantic\": %" PRIu64
           ",\n \"ops\": [", r->nexact, r->nrounding, r->nsemantic);
    for (int k = 0; k < r->ncheck; k++) {
        printf("%s\n  ", k ? "," : "");
        replay_check_json(stdout, tf, &r->check[k]);
    }
    printf("]}\n");
}

int cmd_replay(int argc, char **argv)
{
    enum { OPT_INJECT = 256, OPT_ALL, OPT_JSON, OPT_FROM, OPT_OPS, OPT_FD, OPT_THRESHOLD, OPT_PROGRESS };
    static const struct option opts[] = {
        {"step", required_argument, NULL, 's'},
        {"steps", required_argument, NULL, 'n'},
        {"from", required_argument, NULL, OPT_FROM},
        {"ops", required_argument, NULL, OPT_OPS},
        {"result-fd", required_argument, NULL, OPT_FD},
        {"against", required_argument, NULL, 'a'},
        {"inject", required_argument, NULL, OPT_INJECT},
        {"all", no_argument, NULL, OPT_ALL},
        {"threshold", required_argument, NULL, OPT_THRESHOLD},
        {"json", no_argument, NULL, OPT_JSON},
        {"quiet", no_argument, NULL, 'q'},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct replay_options opt = {.steps = 1, .against = REPLAY_SAME, .threshold = 1};
    int has_step = 0, has_from = 0, all = 0, fd = -1, lines = 0, c;
    const char *against = "same";
    optind = 0;
    while ((c = getopt_long(argc, argv, "s:n:a:qhV", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (cli_u64("--step", optarg, &opt.step) < 0)
                goto bad;
            has_step = 1;
            break;
        case 'n':
            if (cli_u64("--steps", optarg, &opt.steps) < 0)
                goto bad;
            break;
        case OPT_FROM:
            if (cli_u64("--from", optarg, &opt.from) < 0)
                goto bad;
            has_from = 1;
            break;
        case OPT_OPS: opt.ops = optarg; break;
        case OPT_FD:
            if (cli_int("--result-fd", optarg, 3, 1 << 20, &fd) < 0)
                goto bad;
            break;
        case 'a': against = optarg; break;
        case OPT_INJECT: opt.inject = optarg; break;
        case OPT_ALL: all = 1; break;
        case OPT_THRESHOLD:
            if (cli_double("--threshold", optarg, &opt.threshold) < 0)
                goto bad;
            if (opt.threshold < 0) {
                dt_error_set("--threshold '%s': expected a number of at least 0", optarg);
                goto bad;
            }
            break;
        case OPT_JSON: opt.json = 1; break;
        case 'q': opt.quiet = 1; break;
        case OPT_PROGRESS: lines = 1; break;
        case 'h': replay_usage(stdout); return 0;
        case 'V': return cli_version();
        default: return cli_usage_error("replay");
        }
    }
    if (argc - optind != 1) {
        cli_error("replay", "expected one trace file");
        return cli_usage_error("replay");
    }
    if (!has_step) {
        cli_error("replay", "no step given: --step S");
        return CLI_EXIT_TROUBLE;
    }
    if (!has_from)
        opt.from = replay_default_from(opt.step);
    else if (opt.from > opt.step) {
        cli_error("replay", "--from %" PRIu64 " is after --step %" PRIu64, opt.from, opt.step);
        return CLI_EXIT_TROUBLE;
    }
    opt.progress = progress_mode_pick(opt.quiet, lines);
    struct trace_file *tf;
    if (trace_open(&tf, argv[optind]) < 0) {
        if (fd >= 0)
        {
            replay_error_send(fd, dt_error());
            return CLI_EXIT_TROUBLE;
        }
        cli_error("replay", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    /* mpfr: the exact oracle; same, or the recorded backend's name: the
     * recorded backend itself */
    const char *recorded = trace_config_get(&tf->cfg, "backend");
    if (strcmp(against, "mpfr") == 0 && !(recorded && strcmp(recorded, "mpfr") == 0)) {
        opt.against = REPLAY_ORACLE;
    } else if (strcmp(against, "same") != 0 && !(recorded && strcmp(against, recorded) == 0)) {
        cli_error("replay", "--against '%s': expected same, mpfr or the recorded backend (%s)",
                  against, recorded ? recorded : "unknown");
        trace_close(tf);
        return CLI_EXIT_TROUBLE;
    }
    opt.label = tf->path;
    if (tcheck_is_torch(tf) && fd < 0) {
        /* a PyTorch run: its recorded command and its module data */
        int trc = replay_torch(tf, &opt, all);
        trace_close(tf);
        return trc;
    }
    struct replay_result r;
    int rc;
    if (replay_run(tf, &opt, cli_argv, &r) < 0) {
        if (fd >= 0)
            replay_error_send(fd, dt_error());
        else
            cli_error("replay", "%s", dt_error());
        rc = CLI_EXIT_TROUBLE;
    } else if (fd >= 0) {
        rc = replay_result_send(fd, &r) < 0 ? CLI_EXIT_TROUBLE : 0;
        if (rc)
            cli_error("replay", "%s", dt_error());
    } else {
        if (!opt.quiet && opt.json)
            replay_json(tf, &opt, &r);
        else if (!opt.quiet)
            replay_text(tf, &opt, &r, all);
        rc = r.nsemantic || !r.reproduced ? CLI_EXIT_FINDING : 0;
    }
    replay_result_free(&r);
    trace_close(tf);
    return rc;
bad:
    cli_error("replay", "%s", dt_error());
    return CLI_EXIT_TROUBLE;
}
