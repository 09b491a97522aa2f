/* util.h: error reporting and allocation helpers shared by every module.
 * Two kinds of error: a broken invariant aborts (DT_ASSERT); anything the
 * user or the environment can cause sets a message (dt_error_set) and makes
 * the function return a negative status, which the CLI prints as one line. */
#ifndef DT_UTIL_H
#define DT_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define DT_OK 0
#define DT_ERR (-1)

/* Record the message of the most recent recoverable error (thread-local). */
void dt_error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *dt_error(void);

/* Abort with file, line and message: for invariants, never for user input. */
#ifdef __cplusplus
[[noreturn]]
#else
_Noreturn
#endif
void dt_panic(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define DT_ASSERT(cond, ...) \
    do { if (!(cond)) dt_panic(__FILE__, __LINE__, __VA_ARGS__); } while (0)

/* Allocation that never returns NULL. On exhaustion it aborts, except in
 * the program once dt_oom_exits(PROG) was called: then it prints
 * "PROG: out of memory (N bytes asked)" and exits 2, as for any trouble
 * (a trace being written is left without its end, so it reads as cut). */
void dt_oom_exits(const char *prog);
void *dt_malloc(size_t n);
void *dt_calloc(size_t n, size_t size);
void *dt_realloc(void *p, size_t n);
char *dt_strdup(const char *s);

/* Monotonic clock in seconds. */
double dt_now(void);
/* CPU time of the process, all threads, in seconds. */
double dt_cpu_now(void);

/* A measurement build (-DDT_PROFILE_STEP) sums the host's time in the
 * phases of a training step (DT_PROF_*), and train_run prints the means
 * on stderr; otherwise these are nothing. */
enum { DT_PROF_BEGIN, DT_PROF_EXEC, DT_PROF_FLUSH, DT_PROF_LAUNCH, DT_PROF_PREFETCH, DT_PROF_OUT,
       DT_PROF_LOSS, DT_PROF_REST, DT_PROF_N };
#ifdef DT_PROFILE_STEP
extern double dt_prof[DT_PROF_N];
extern int dt_prof_on;
#define DT_PROF_MARK(v) double v = dt_now()
#define DT_PROF_ADD(k, t) (dt_prof_on ? (void)(dt_prof[k] += dt_now() - (t)) : (void)0)
#else
#define DT_PROF_MARK(v) (void)0
#define DT_PROF_ADD(k, t) (void)0
#endif

#endif
