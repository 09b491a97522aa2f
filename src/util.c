/* util.c: error reporting and allocation helpers (see util.h). */
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char dt_errbuf[512];

void dt_error_set(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dt_errbuf, sizeof dt_errbuf, fmt, ap);
    va_end(ap);
}

const char *dt_error(void)
{
    return dt_errbuf[0] ? dt_errbuf : "unknown error";
}

void dt_panic(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "divtrace: internal error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

static char dt_oom_prog[64];

void dt_oom_exits(const char *prog)
{
    snprintf(dt_oom_prog, sizeof dt_oom_prog, "%s", prog);
}

/* An allocation of n x size bytes failed. */
static _Noreturn void dt_oom(size_t n, size_t size)
{
    if (dt_oom_prog[0]) {
        if (size > 1 && n <= SIZE_MAX / size)
            n *= size;
        fprintf(stderr, "%s: out of memory (%zu bytes asked)\n", dt_oom_prog, n);
        exit(2);
    }
    dt_panic(__FILE__, __LINE__, "out of memory allocating %zu x %zu bytes", n, size);
}

void *dt_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        dt_oom(n, 1);
    return p;
}

void *dt_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        dt_oom(n, size);
    return p;
}

void *dt_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        dt_oom(n, 1);
    return q;
}

char *dt_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = dt_malloc(n);
    memcpy(d, s, n);
    return d;
}

#ifdef DT_PROFILE_STEP
double dt_prof[DT_PROF_N];
int dt_prof_on;
#endif

double dt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double dt_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
