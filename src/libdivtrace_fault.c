/* libdivtrace_fault.c: libdivtrace's errors and faults. A fault (the disk
 * full, the trace file deleted, an allocation or a CUDA call that fails)
 * never ends the host program: it is reported once, in one line on stderr
 * and by the status and message of the call that met it, and it stops the
 * handle's recording. The file is closed then as a readable prefix (no
 * footer: never complete), and every later call on the handle is a no-op
 * that returns the fault's status, until divtrace_close frees it. Also the
 * test-only fault injection (DIVTRACE_TEST_FAIL_ALLOC, _CUDA). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"
#include "libdivtrace_impl.h"
#include "stats.h"

/* How often a step's end looks whether the trace file is still there. */
#define WATCH_NS (10 * (uint64_t)1000000000)

/* divtrace_open's failures (and divtrace_close's, whose handle is gone). */
static _Thread_local char lib_err[LIB_MSG];
/* Whether a fault is reported on stderr (divtrace_report_faults). */
static atomic_int lib_report = 1;

__attribute__((format(printf, 2, 0)))
static void lib_vset(char *buf, const char *fmt, va_list ap)
{
    vsnprintf(buf, LIB_MSG, fmt, ap);
    /* one line */
    for (char *p = buf; *p; p++)
        if (*p == '\n')
            *p = ' ';
}

static int lib_is_fault(int status)
{
    return status == DIVTRACE_EIO || status == DIVTRACE_ENOMEM || status == DIVTRACE_ECUDA;
}

/* The one line of a fault on stderr (one write, so that the lines of
 * threads do not mix). */
static void lib_report_line(const char *path, const char *msg)
{
    if (!atomic_load(&lib_report))
        return;
    char line[2 * LIB_MSG + 128];
    int k = path ? snprintf(line, sizeof line, "libdivtrace: recording to %s stopped (the program goes on): %s",
                            path, msg)
                 : snprintf(line, sizeof line, "libdivtrace: %s (nothing is recorded; the program goes on)", msg);
    size_t n = k < 0 ? 0 : (size_t)k < sizeof line - 1 ? (size_t)k : sizeof line - 2;
    for (size_t i = 0; i < n; i++)
        if (line[i] == '\n')
            line[i] = ' ';
    line[n++] = '\n';
    ssize_t w;
    do
        w = write(STDERR_FILENO, line, n);
    while (w < 0 && errno == EINTR);
}

int lib_fail(divtrace *t, int status, const char *fmt, ...)
{
    if (t && t->fault)
        return status; /* the message of the fault that stopped the recording stays */
    va_list ap;
    va_start(ap, fmt);
    lib_vset(t ? t->err : lib_err, fmt, ap);
    va_end(ap);
    if (t && t->in_step)
        t->failed = 1;
    if (lib_is_fault(status)) {
        if (t)
            lib_stop(t, status);
        else
            lib_report_line(NULL, lib_err);
    }
    return status;
}

void lib_stop(divtrace *t, int status)
{
    t->fault = status;
    /* the reason in the file, where it can still take a block (the writer
     * not the one that failed); in the first step, after an empty op list,
     * so that the file reads as a trace of no steps */
    static const struct trace_opdef none[1];
    if (t->w && status != DIVTRACE_EIO && (t->fixed || trace_writer_ops(t->w, none, 0) == 0)) {
        char text[LIB_MSG + 32];
        snprintf(text, sizeof text, "recording stopped: %s", t->err);
        uint64_t at = t->in_step ? t->step : t->have_last ? t->last : 0;
        struct trace_event ev = {TRACE_EVENT_STOPPED, at, UINT32_MAX, text};
        (void)trace_writer_event(t->w, &ev); /* a failure leaves the file as it was */
    }
    if (t->w) {
        trace_writer_abandon(t->w); /* waits for a step being written: it is complete */
        t->w = NULL;
    }
    if (t->watch_fd >= 0) {
        close(t->watch_fd);
        t->watch_fd = -1;
    }
    lib_report_line(t->path, t->err);
}

void lib_err_clear(void)
{
    lib_err[0] = 0;
}

void lib_err_keep(const divtrace *t)
{
    memcpy(lib_err, t->err, sizeof lib_err);
}

int divtrace_report_faults(int on)
{
    return atomic_exchange(&lib_report, on != 0);
}

const char *divtrace_strerror(int status)
{
    switch (status) {
    case DIVTRACE_OK: return "success";
    case DIVTRACE_EINVAL: return "invalid argument";
    case DIVTRACE_EIO: return "trace file not written";
    case DIVTRACE_ENOMEM: return "out of memory";
    case DIVTRACE_ESTATE: return "call out of order";
    case DIVTRACE_EOPS: return "tensors differ from the first step's";
    case DIVTRACE_ENOCUDA: return "no CUDA support or device";
    case DIVTRACE_ECUDA: return "CUDA error";
    }
    return "unknown status";
}

/* The handle's message is copied under its lock: another thread's call on
 * the handle may be writing it. A few buffers in turn, so that a caller
 * may hold the messages of several handles at once. */
const char *divtrace_errmsg(const divtrace *t)
{
    static _Thread_local char copy[4][LIB_MSG];
    static _Thread_local unsigned turn;
    if (!t)
        return lib_err;
    char *out = copy[turn++ % 4];
    pthread_mutex_t *mu = (pthread_mutex_t *)&t->mu; /* the handle itself is not const */
    pthread_mutex_lock(mu);
    memcpy(out, t->err, LIB_MSG);
    pthread_mutex_unlock(mu);
    return out;
}

int divtrace_status(const divtrace *t)
{
    if (!t)
        return DIVTRACE_EINVAL;
    pthread_mutex_t *mu = (pthread_mutex_t *)&t->mu;
    pthread_mutex_lock(mu);
    int s = t->fault;
    pthread_mutex_unlock(mu);
    return s;
}

/* ---- allocations, and the test-only fault injection ----------------------- */

int lib_fault_alloc(struct lib_fault *f)
{
    return f && f->alloc_at && ++f->nalloc == f->alloc_at;
}

int lib_fault_cuda(struct lib_fault *f)
{
    return f && f->cuda_at && ++f->ncuda == f->cuda_at;
}

void *lib_malloc(divtrace *t, size_t n)
{
    return lib_fault_alloc(&t->inj) ? NULL : malloc(n);
}

void *lib_calloc(divtrace *t, size_t n, size_t size)
{
    return lib_fault_alloc(&t->inj) ? NULL : calloc(n, size);
}

void *lib_realloc(divtrace *t, void *p, size_t n)
{
    return lib_fault_alloc(&t->inj) ? NULL : realloc(p, n);
}

char *lib_strdup(divtrace *t, const char *s)
{
    return lib_fault_alloc(&t->inj) ? NULL : strdup(s);
}

/* A positive count from the environment, or 0. */
static uint64_t lib_env_count(const char *name)
{
    const char *v = getenv(name);
    if (!v || *v < '1' || *v > '9')
        return 0;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    return *end || errno ? 0 : (uint64_t)n;
}

static uint64_t lib_now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int lib_fault_open(divtrace *t, const char *path)
{
    t->watch_fd = -1;
    t->inj.alloc_at = lib_env_count("DIVTRACE_TEST_FAIL_ALLOC");
    t->inj.cuda_at = lib_env_count("DIVTRACE_TEST_FAIL_CUDA");
    t->path = lib_strdup(t, path);
    return t->path ? DIVTRACE_OK : DIVTRACE_ENOMEM;
}

/* The trace file, open read-only beside the writer's descriptor: its link
 * count says whether it was deleted. Only a regular file is watched (not
 * /dev/null, a FIFO, ...). */
void lib_watch_start(divtrace *t)
{
    int fd = open(t->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        fd = -1;
    }
    t->watch_fd = fd;
    t->watch_next = lib_now_ns() + WATCH_NS;
}

void lib_fault_free(divtrace *t)
{
    if (t->watch_fd >= 0)
        close(t->watch_fd);
    t->watch_fd = -1;
    free(t->path);
    t->path = NULL;
}

/* A trace file unlinked while open still takes writes (POSIX), into an
 * inode that is gone at the close: every step written from then on is
 * lost, and the disk space with it until the close. So the library looks,
 * and stops: the space is given back at once. */
int lib_watch(divtrace *t, const char *fn)
{
    struct stat st;
    if (t->watch_fd < 0 || fstat(t->watch_fd, &st) != 0 || st.st_nlink > 0)
        return DIVTRACE_OK;
    return lib_fail(t, DIVTRACE_EIO, "%s: %s was deleted while it was written (its folder removed, or the "
                    "file unlinked); the steps written are gone with it", fn, t->path);
}

int lib_watch_due(divtrace *t, const char *fn)
{
    if (t->watch_fd < 0)
        return DIVTRACE_OK;
    uint64_t now = lib_now_ns();
    if (now < t->watch_next)
        return DIVTRACE_OK;
    t->watch_next = now + WATCH_NS;
    return lib_watch(t, fn);
}

/* ---- once a process -------------------------------------------------------- */

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void lib_warm_once(void)
{
    /* two blocks of the sketch and a tail: every table stats_compute
     * builds on first use (hash_bytes picks its variant on the way) */
    float x[40];
    for (int i = 0; i < 40; i++)
        x[i] = (float)i;
    struct trace_oprec r;
    stats_compute(x, 40, &r);
}

void lib_warm(void)
{
    pthread_once(&lib_once, lib_warm_once);
}
