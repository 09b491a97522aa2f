/* cmd_report.c: being written. */
#include "cli.h"
int cmd_report(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("report", "not built yet");
    return CLI_EXIT_TROUBLE;
}
