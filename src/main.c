/* main.c: the divtrace program: dispatch to a subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "util.h"

static void main_usage(FILE *f)
{
    fputs("Usage: divtrace COMMAND [OPTION]... [ARG]...\n"
          "Record neural-network training runs as per-op hashed traces and find where\n"
          "two runs stop being bitwise identical.\n"
          "\n"
          "Commands:\n"
          "  record   train a model on a backend and write a trace (.dtr)\n"
          "  show     print a trace: header, per-step summaries, per-op records\n"
          "  diff     compare two traces: first divergence, origin ops, timeline\n"
          "  explain  why two traces differ, in one verdict: identical, rounding only,\n"
          "           or a bug in A or B (the op, or the tensor changed between steps)\n"
          "  replay   re-execute recorded steps: reproducibility, or each op against\n"
          "           the exact oracle and its error bound\n"
          "  escape   plateaus of each run's loss curve and the steps that escape them\n"
          "  sweep    run a study's grid of trials (or emit a Makefile or Slurm array)\n"
          "  report   tables, tests and plots of a sweep's trials\n"
          "  run      record an unchanged PyTorch training script as a trace\n"
          "\n"
          "Options:\n"
          "  -h, --help     show this help and exit\n"
          "  -V, --version  show the version and exit\n"
          "\n"
          "Every command takes -h, -V and -q (nothing on stdout); --json, where a command\n"
          "has it, prints one JSON object instead of the text; results go to stdout,\n"
          "progress and errors to stderr; exit 0 fine, 1 a finding, 2 trouble (one line\n"
          "on stderr). See CONVENTIONS in divtrace(1).\n"
          "\n"
          "'divtrace COMMAND --help' describes a command; man divtrace for more.\n",
          f);
}

/* Output that never reached standard output (a full disk, a closed pipe's
 * EPIPE when SIGPIPE is ignored) turns a success or a finding into trouble:
 * one line, exit 2. A command that already said so (exit 2) is left as it
 * is. */
static int main_stdout(const char *prog, int rc)
{
    if (fflush(stdout) == 0 && !ferror(stdout))
        return rc;
    if (rc != CLI_EXIT_TROUBLE)
        fprintf(stderr, "%s: write error on standard output\n", prog);
    return CLI_EXIT_TROUBLE;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs("divtrace: no command given (try 'divtrace --help')\n", stderr);
        return CLI_EXIT_TROUBLE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        main_usage(stdout);
        return main_stdout("divtrace", 0);
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        return main_stdout("divtrace", cli_version());
    }
    static const struct {
        const char *name;
        int (*run)(int, char **);
    } cmds[] = {
        {"record", cmd_record},
        {"show", cmd_show},
        {"diff", cmd_diff},
        {"replay", cmd_replay},
        {"escape", cmd_escape},
        {"sweep", cmd_sweep},
        {"report", cmd_report},
        {"explain", cmd_explain},
        {"run", cmd_run},
    };
    cli_argv = argv;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(cmd, cmds[i].name) != 0)
            continue;
        /* The subcommand sees "divtrace NAME" as its argv[0], so that
         * getopt's messages name it. */
        char prog[64];
        snprintf(prog, sizeof prog, "divtrace %s", cmd);
        dt_oom_exits(prog);
        char **sub = dt_calloc((size_t)argc, sizeof *sub);
        sub[0] = prog;
        for (int k = 2; k < argc; k++)
            sub[k - 1] = argv[k];
        int rc = main_stdout(prog, cmds[i].run(argc - 1, sub));
        free(sub);
        return rc;
    }
    fprintf(stderr, "divtrace: unknown command '%s' (try 'divtrace --help')\n", cmd);
    return CLI_EXIT_TROUBLE;
}
