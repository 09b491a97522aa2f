/* progress.h: the progress report of a long command, on standard error:
 * on a terminal one line rewritten in place (from the first second on);
 * with --progress plain lines for logs and batch jobs, one every
 * DIVTRACE_PROGRESS_INTERVAL seconds (default 10) and always a last one
 * ("WHO: done: ..."); else nothing (-q, or standard error is not a
 * terminal). divtrace(1), CONVENTIONS. */
#ifndef DT_PROGRESS_H
#define DT_PROGRESS_H

enum progress_mode {
    PROGRESS_OFF,
    PROGRESS_TERMINAL,         /* one line, rewritten with \r */
    PROGRESS_LINES,            /* periodic plain lines (--progress) */
};

/* The mode a command runs in: lines with --progress (lines), even with
 * -q; else off with -q (quiet); else a terminal line when standard error
 * is a terminal. */
enum progress_mode progress_mode_pick(int quiet, int lines);

struct progress {
    enum progress_mode mode;
    const char *who;           /* the line's prefix, e.g. "divtrace record" */
    double t0, last;           /* when it began, when a line was last shown */
    double interval;           /* lines: seconds between two lines */
    int shown;                 /* terminal: a line is on the screen */
};

void progress_init(struct progress *p, enum progress_mode mode, const char *who);
/* Whether a line is due now: callers format their text only then. */
int progress_due(const struct progress *p);
/* Seconds since progress_init. */
double progress_elapsed(const struct progress *p);
/* Show TEXT (printf format) as the progress line now. */
void progress_show(struct progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Before other output on standard error: take the terminal line away. */
void progress_clear(struct progress *p);
/* The end: lines mode prints "WHO: done: TEXT"; a terminal line is
 * cleared (the result follows on standard output). */
void progress_end(struct progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
