/* main.c: the divtrace program: dispatch to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "cpu_blas.h"
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
          "\n"
          "Options:\n"
          "  -h, --help     show this help and exit\n"
          "  -V, --version  show the version and exit\n"
          "\n"
          "'divtrace COMMAND --help' describes a command; man divtrace for more.\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs("divtrace: no command given\nTry 'divtrace --help'.\n", stderr);
        return CLI_EXIT_TROUBLE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        main_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("divtrace %s (trace format %d)\n", PACKAGE_VERSION, 1);
        return 0;
    }
    if (strcmp(cmd, "record") == 0) {
        /* OpenBLAS picks its kernel when loaded: re-execute to change it. */
        if (cpu_blas_reexec(argc, argv) < 0) {
            cli_error("record", "%s", dt_error());
            return CLI_EXIT_TROUBLE;
        }
        return cmd_record(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "show") == 0)
        return cmd_show(argc - 1, argv + 1);
    if (strcmp(cmd, "diff") == 0)
        return cmd_diff(argc - 1, argv + 1);
    fprintf(stderr, "divtrace: unknown command '%s'\nTry 'divtrace --help'.\n", cmd);
    return CLI_EXIT_TROUBLE;
}
