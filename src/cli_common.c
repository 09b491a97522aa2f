/* cli_common.c: helpers shared by the subcommands (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "trace.h"
#include "util.h"

char **cli_argv;

int cli_version(void)
{
    printf("divtrace %s (trace format %d)\n", PACKAGE_VERSION, TRACE_FORMAT_VERSION);
    return 0;
}

void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "divtrace %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int cli_u64(const char *opt, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-' || *s == '\0')
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        goto bad;
    *out = v;
    return DT_OK;
bad:
    dt_error_set("%s '%s': expected a non-negative integer", opt, s);
    return DT_ERR;
}

int cli_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        dt_error_set("%s '%s': expected an integer from %d to %d", opt, s, lo, hi);
        return DT_ERR;
    }
    *out = (int)v;
    return DT_OK;
}

int cli_double(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !isfinite(v)) {
        dt_error_set("%s '%s': expected a finite number", opt, s);
        return DT_ERR;
    }
    *out = v;
    return DT_OK;
}

int cli_usage_error(const char *cmd)
{
    /* getopt_long has named the option in one line ("divtrace CMD:
     * unrecognized option '--x'"); a second line would break the rule of
     * one line per error (divtrace(1), CONVENTIONS) */
    (void)cmd;
    return CLI_EXIT_TROUBLE;
}

void cli_shape(char *buf, size_t n, int ndim, const uint32_t *shape)
{
    size_t len = 0;
    buf[0] = 0;
    for (int d = 0; d < ndim && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%u", d ? "x" : "", shape[d]);
}
