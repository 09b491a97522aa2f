/* cmd_sweep.c: being written. */
#include "cli.h"
int cmd_sweep(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("sweep", "not built yet");
    return CLI_EXIT_TROUBLE;
}
