/* progress.c: progress lines on standard error (see progress.h). */
#include "progress.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "util.h"

/* A terminal line appears once a command has run this long, and changes
 * at most this often: quick commands never flash one. */
#define PROGRESS_TERMINAL_AFTER 1.0
#define PROGRESS_TERMINAL_EVERY 0.2
#define PROGRESS_LINES_EVERY 10.0

enum progress_mode progress_mode_pick(int quiet, int lines)
{
    if (lines)
        return PROGRESS_LINES;
    if (quiet)
        return PROGRESS_OFF;
    return isatty(STDERR_FILENO) ? PROGRESS_TERMINAL : PROGRESS_OFF;
}

/* DIVTRACE_PROGRESS_INTERVAL: seconds (0 or more, a fraction allowed);
 * anything else gives the default. */
static double progress_interval(void)
{
    const char *s = getenv("DIVTRACE_PROGRESS_INTERVAL");
    if (!s || !*s)
        return PROGRESS_LINES_EVERY;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= 0) || v > 1e6)
        return PROGRESS_LINES_EVERY;
    return v;
}

void progress_init(struct progress *p, enum progress_mode mode, const char *who)
{
    p->mode = mode;
    p->who = who;
    p->t0 = p->last = dt_now();
    p->interval = mode == PROGRESS_LINES ? progress_interval() : PROGRESS_TERMINAL_EVERY;
    p->shown = 0;
}

double progress_elapsed(const struct progress *p)
{
    return dt_now() - p->t0;
}

int progress_due(const struct progress *p)
{
    if (p->mode == PROGRESS_OFF)
        return 0;
    double now = dt_now();
    if (p->mode == PROGRESS_TERMINAL && now - p->t0 < PROGRESS_TERMINAL_AFTER)
        return 0;
    return now - p->last >= p->interval;
}

static void progress_vput(struct progress *p, const char *done, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void progress_vput(struct progress *p, const char *done, const char *fmt, va_list ap)
{
    if (p->mode == PROGRESS_TERMINAL)
        fputs("\r\033[K", stderr);
    fprintf(stderr, "%s: %s", p->who, done);
    vfprintf(stderr, fmt, ap);
    if (p->mode == PROGRESS_LINES)
        fputc('\n', stderr);
    fflush(stderr);
    p->last = dt_now();
    p->shown = p->mode == PROGRESS_TERMINAL;
}

void progress_show(struct progress *p, const char *fmt, ...)
{
    if (p->mode == PROGRESS_OFF)
        return;
    va_list ap;
    va_start(ap, fmt);
    progress_vput(p, "", fmt, ap);
    va_end(ap);
}

void progress_clear(struct progress *p)
{
    if (p->mode != PROGRESS_TERMINAL || !p->shown)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    p->shown = 0;
}

void progress_end(struct progress *p, const char *fmt, ...)
{
    if (p->mode == PROGRESS_LINES) {
        va_list ap;
        va_start(ap, fmt);
        progress_vput(p, "done: ", fmt, ap);
        va_end(ap);
    } else {
        progress_clear(p);
    }
}
