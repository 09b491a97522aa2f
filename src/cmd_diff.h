/* cmd_diff.h: what `divtrace diff` (cmd_diff.c) shares with its
 * --reference mode (cmd_diff_ref.c). */
#ifndef DT_CMD_DIFF_H
#define DT_CMD_DIFF_H

#include <stddef.h>

#include "trace.h"

/* 0 when t holds a step, else -1 with dt_error set: a trace killed before
 * its first step has nothing to compare. */
int cmd_diff_has_steps(const struct trace_file *t);
/* "20 steps, complete" into buf. */
const char *cmd_diff_status(const struct trace_file *t, char *buf, size_t n);
/* diff --reference refpath paths[0..n): the exit status (0 every run
 * equals the reference, 1 not, 2 trouble after one line on stderr). */
int cmd_diff_reference(const char *refpath, char **paths, int n, int json, int quiet);

#endif
