/* cmd_show.h: what `divtrace show`'s files share (cmd_show.c, cmd_show_export.c). */
#ifndef DT_CMD_SHOW_H
#define DT_CMD_SHOW_H

#include <stdint.h>

#include "trace.h"

/* --export NAME --step S -o OUT: the tensor NAME of the checkpoint at step
 * S as a .npy file. 0, or CLI_EXIT_TROUBLE after one line on stderr. */
int show_export(struct trace_file *tf, const char *name, int has_step, uint64_t step,
                const char *out);

#endif
