/* cli.h: the subcommands of the divtrace program and their shared helpers.
 * Exit status: 0 success (diff: identical), 1 (diff: different), 2 trouble. */
#ifndef DT_CLI_H
#define DT_CLI_H

#include <stdint.h>

#define CLI_EXIT_FINDING 1
#define CLI_EXIT_TROUBLE 2

int cmd_record(int argc, char **argv);
/* The options of one `record` (argv[0] a name, no -o needed) parsed and
 * checked as record does, without training: 0, or -1 with dt_error set to
 * one line naming the option (divtrace sweep, before any trial starts). */
int record_check_options(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_escape(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_run(int argc, char **argv);

/* The whole command line, for re-executing the program. */
extern char **cli_argv;
/* Print "divtrace VERSION (trace format N)"; returns 0. */
int cli_version(void);

/* One line on stderr: "divtrace CMD: MESSAGE". */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Numbers from option arguments; -1 with dt_error set naming the option. */
int cli_u64(const char *opt, const char *s, uint64_t *out);
int cli_int(const char *opt, const char *s, int lo, int hi, int *out);
int cli_double(const char *opt, const char *s, double *out);
/* The reply to a bad option: getopt_long has already said what, in one
 * line; returns CLI_EXIT_TROUBLE. */
int cli_usage_error(const char *cmd);

/* JSON output: json.h (json_put_str, json_put_num). */
#include "json.h"
/* "100x784" */
void cli_shape(char *buf, size_t n, int ndim, const uint32_t *shape);

#endif
