/* cmd_run.c: (being written) */
#include <stdio.h>
#include "cli.h"
int cmd_run(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "%s: not yet\n", argv[0]);
    return CLI_EXIT_TROUBLE;
}
