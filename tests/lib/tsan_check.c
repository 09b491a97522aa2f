/* tsan_check.c: libdivtrace used from threads as divtrace_record(3),
 * THREADS, allows, built together with the library's own sources under
 * ThreadSanitizer (tests/lib/faults.mk: make check, make check-tsan),
 * which ends it (exit 66) at the first data race, lock-order inversion or
 * misuse of a lock it sees:
 *  - four threads open, record (steps written by the writer's thread,
 *    record_many, checkpoints) and close handles of their own, at once;
 *  - one handle shared: four threads add to one checkpoint at once; a
 *    thread records the steps (a call out of order now and then, which
 *    rewrites the handle's message) while two others call divtrace_status,
 *    divtrace_errmsg, divtrace_sync and divtrace_flush on it; then two
 *    threads take turns with each step's records (the caller orders a
 *    step's calls);
 *  - faults in four threads' handles at once (DIVTRACE_TEST_FAIL_ALLOC,
 *    set before they start): each stops, reports, and answers later calls
 *    as no-ops, while another thread reads their statuses and switches
 *    divtrace_report_faults;
 *  - divtrace_open failing in four threads at once: each thread's
 *    divtrace_errmsg(NULL) names its own path.
 * Exit 0 when every call returned what it should and the traces read back
 * whole; 77 when the compiler could not build it with ThreadSanitizer. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "divtrace.h"
#include "trace.h"

#if defined(__SANITIZE_THREAD__)
#define TS_ON 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TS_ON 1
#endif
#endif

#ifdef TS_ON
/* A report ends the run with a status of its own, whatever TSAN_OPTIONS
 * adds. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "halt_on_error=1:exitcode=66:second_deadlock_stack=1";
}
#endif

#define TS_THREADS 4
#define TS_STEPS 30
#define TS_NT 6 /* tensors a step */

static char ts_dir[256];
static atomic_int ts_bad;

static void ts_fail(const char *what, int rc, const char *msg)
{
    fprintf(stderr, "tsan_check: %s: %s (%s)\n", what, divtrace_strerror(rc), msg ? msg : "");
    atomic_fetch_add(&ts_bad, 1);
}

#define TS_OK(call, t)                                                                            \
    do {                                                                                          \
        int ts_rc_ = (call);                                                                      \
        if (ts_rc_ != DIVTRACE_OK)                                                                \
            ts_fail(#call, ts_rc_, divtrace_errmsg(t));                                           \
    } while (0)

static const char *ts_path(char *buf, size_t n, const char *name, int i)
{
    snprintf(buf, n, "%s/%s%d.dtr", ts_dir, name, i);
    return buf;
}

/* Tensor k of step s: n floats that change every step. */
static void ts_fill(float *x, int n, int k, uint64_t s)
{
    for (int i = 0; i < n; i++)
        x[i] = (float)((i * 7 + k * 13 + (int)s) % 101) - 50.0f;
}

static int ts_count(int k)
{
    return 64 << (k % 4);
}

/* Tensors lo .. hi-1 of step s (the first one with its inputs). */
static int ts_record(divtrace *t, uint64_t s, int lo, int hi)
{
    float x[512];
    for (int k = lo; k < hi; k++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", k);
        int64_t shape[1] = {ts_count(k)};
        ts_fill(x, ts_count(k), k, s);
        const char *in[1] = {"t0"};
        int rc = divtrace_record(t, name, "op", k % 3 == 1 ? DIVTRACE_GRAD : DIVTRACE_FORWARD, x, DIVTRACE_HOST, NULL,
                                 1, shape, k ? in : NULL, k ? 1 : 0);
        if (rc != DIVTRACE_OK)
            return rc;
    }
    return DIVTRACE_OK;
}

static void ts_check_trace(const char *path, uint64_t nsteps, uint32_t nckpt)
{
    struct trace_file *tf;
    if (trace_open(&tf, path) != 0) {
        ts_fail("trace_open", DIVTRACE_EIO, path);
        return;
    }
    if (!tf->complete || tf->nsteps != nsteps || tf->nops != TS_NT || tf->nckpt != nckpt)
        ts_fail("the trace read back", DIVTRACE_EIO, path);
    trace_close(tf);
}

/* ---- handles of their own ---- */

static void *ts_own(void *arg)
{
    int i = (int)(intptr_t)arg;
    char path[320];
    divtrace *t;
    static const char *const cfg[] = {"model", "tsan", NULL};
    TS_OK(divtrace_open(&t, ts_path(path, sizeof path, "own", i), cfg, "op"), NULL);
    float w[64];
    int64_t sw[1] = {64};
    const struct divtrace_tensor many[2] = {{"p0", "param", DIVTRACE_PARAM, 1, sw, NULL, 0},
                                            {"p1", "param", DIVTRACE_PARAM, 1, sw, NULL, 0}};
    for (uint64_t s = 0; s < TS_STEPS; s++) {
        if (s % 10 == 0) {
            ts_fill(w, 64, 99, s);
            TS_OK(divtrace_checkpoint_begin(t, s), t);
            TS_OK(divtrace_checkpoint_add(t, "p0", w, DIVTRACE_HOST, 1, sw), t);
            TS_OK(divtrace_checkpoint_end(t), t);
        }
        TS_OK(divtrace_step_begin(t, s), t);
        ts_fill(w, 64, 98, s);
        const float *pd[2] = {w, w};
        TS_OK(divtrace_record_many(t, 2, many, pd, DIVTRACE_HOST, NULL), t);
        TS_OK(ts_record(t, s, 0, TS_NT - 2), t);
        TS_OK(divtrace_step_end(t, (double)s), t);
    }
    TS_OK(divtrace_close(t, 0, NULL), NULL);
    return NULL;
}

/* ---- one handle, several threads ---- */

static divtrace *ts_shared;
static atomic_int ts_done;

static void *ts_recorder(void *arg)
{
    (void)arg;
    for (uint64_t s = 0; s < TS_STEPS; s++) {
        TS_OK(divtrace_step_begin(ts_shared, s), ts_shared);
        TS_OK(ts_record(ts_shared, s, 0, TS_NT), ts_shared);
        TS_OK(divtrace_step_end(ts_shared, (double)s), ts_shared);
        /* out of order on purpose: the handle's message rewritten while
         * the observers read it */
        if (divtrace_checkpoint_end(ts_shared) != DIVTRACE_ESTATE)
            ts_fail("divtrace_checkpoint_end without a begin", DIVTRACE_OK, NULL);
    }
    atomic_store(&ts_done, 1);
    return NULL;
}

static void *ts_observer(void *arg)
{
    int who = (int)(intptr_t)arg;
    size_t seen = 0;
    while (!atomic_load(&ts_done)) {
        TS_OK(divtrace_status(ts_shared), NULL);
        seen += strlen(divtrace_errmsg(ts_shared));
        TS_OK(who ? divtrace_sync(ts_shared) : divtrace_flush(ts_shared), NULL);
    }
    return (void *)(uintptr_t)seen;
}

/* Tensors into the checkpoint begun, from several threads at once. */
static void *ts_adder(void *arg)
{
    int who = (int)(intptr_t)arg;
    float v[16];
    int64_t sh[1] = {16};
    for (int k = 0; k < 20; k++) {
        char name[32];
        snprintf(name, sizeof name, "c%d.%d", who, k);
        ts_fill(v, 16, k, (uint64_t)who);
        TS_OK(divtrace_checkpoint_add(ts_shared, name, v, DIVTRACE_HOST, 1, sh), ts_shared);
    }
    return NULL;
}

/* Two threads, each step's records in turns: the first half, then the
 * second and the step's end. */
static pthread_mutex_t ts_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ts_cv = PTHREAD_COND_INITIALIZER;
static int ts_turn;

static void *ts_taker(void *arg)
{
    int who = (int)(intptr_t)arg;
    for (int k = who; k < 2 * TS_STEPS; k += 2) {
        pthread_mutex_lock(&ts_mu);
        while (ts_turn != k)
            pthread_cond_wait(&ts_cv, &ts_mu);
        pthread_mutex_unlock(&ts_mu);
        uint64_t s = (uint64_t)(TS_STEPS + k / 2);
        if (who == 0) {
            TS_OK(divtrace_step_begin(ts_shared, s), ts_shared);
            TS_OK(ts_record(ts_shared, s, 0, TS_NT / 2), ts_shared);
        } else {
            TS_OK(ts_record(ts_shared, s, TS_NT / 2, TS_NT), ts_shared);
            TS_OK(divtrace_step_end(ts_shared, (double)s), ts_shared);
        }
        pthread_mutex_lock(&ts_mu);
        ts_turn++;
        pthread_cond_broadcast(&ts_cv);
        pthread_mutex_unlock(&ts_mu);
    }
    return NULL;
}

/* ---- faults in several threads ---- */

static divtrace *ts_faulty[TS_THREADS];

static void *ts_fault(void *arg)
{
    int i = (int)(intptr_t)arg;
    divtrace *t = ts_faulty[i];
    int stopped = 0;
    for (uint64_t s = 0; s < 10; s++) {
        int rc = divtrace_step_begin(t, s);
        if (rc == DIVTRACE_OK)
            rc = ts_record(t, s, 0, TS_NT);
        if (rc == DIVTRACE_OK)
            rc = divtrace_step_end(t, 1.0);
        if (rc == DIVTRACE_ENOMEM)
            stopped = 1;
        else if (rc != DIVTRACE_OK || stopped)
            ts_fail("a call after the fault", rc, divtrace_errmsg(t));
    }
    if (!stopped || divtrace_status(t) != DIVTRACE_ENOMEM)
        ts_fail("no fault", divtrace_status(t), divtrace_errmsg(t));
    return NULL;
}

static void *ts_fault_watch(void *arg)
{
    (void)arg;
    for (int k = 0; k < 2000; k++) {
        divtrace_report_faults(k % 2);
        for (int i = 0; i < TS_THREADS; i++) {
            int st = divtrace_status(ts_faulty[i]);
            if (st != DIVTRACE_OK && st != DIVTRACE_ENOMEM)
                ts_fail("divtrace_status", st, NULL);
        }
    }
    divtrace_report_faults(1);
    return NULL;
}

/* ---- divtrace_open failing at once ---- */

static void *ts_bad_open(void *arg)
{
    int i = (int)(intptr_t)arg;
    char path[320];
    snprintf(path, sizeof path, "%s/no-such-dir-%d/x.dtr", ts_dir, i);
    for (int k = 0; k < 50; k++) {
        divtrace *t;
        if (divtrace_open(&t, path, NULL, NULL) != DIVTRACE_EIO || t)
            ts_fail("divtrace_open of a path in no folder", DIVTRACE_OK, path);
        if (!strstr(divtrace_errmsg(NULL), path))
            ts_fail("divtrace_errmsg(NULL) of another thread's open", DIVTRACE_EIO, divtrace_errmsg(NULL));
    }
    return NULL;
}

static void ts_run(void *(*fn)(void *), int n)
{
    pthread_t th[TS_THREADS];
    for (int i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, fn, (void *)(intptr_t)i) != 0)
            ts_fail("pthread_create", DIVTRACE_ENOMEM, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

int main(void)
{
#ifndef TS_ON
    printf("tsan_check: not built with -fsanitize=thread (the compiler could not build and run such a "
           "program at configure's make); skipped\n");
    return 77;
#endif
    const char *tmp = getenv("TMPDIR");
    snprintf(ts_dir, sizeof ts_dir, "%s/divtrace-tsan-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(ts_dir)) {
        perror("tsan_check: mkdtemp");
        return 2;
    }
    char path[320];

    ts_run(ts_own, TS_THREADS);
    for (int i = 0; i < TS_THREADS; i++)
        ts_check_trace(ts_path(path, sizeof path, "own", i), TS_STEPS, 3);

    TS_OK(divtrace_open(&ts_shared, ts_path(path, sizeof path, "shared", 0), NULL, "op"), NULL);
    TS_OK(divtrace_checkpoint_begin(ts_shared, 0), ts_shared);
    ts_run(ts_adder, TS_THREADS);
    TS_OK(divtrace_checkpoint_end(ts_shared), ts_shared);
    pthread_t rec, obs[2];
    pthread_create(&rec, NULL, ts_recorder, NULL);
    for (int i = 0; i < 2; i++)
        pthread_create(&obs[i], NULL, ts_observer, (void *)(intptr_t)i);
    pthread_join(rec, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(obs[i], NULL);
    ts_run(ts_taker, 2);
    TS_OK(divtrace_close(ts_shared, 0, NULL), NULL);
    ts_check_trace(path, 2 * TS_STEPS, 1);

    setenv("DIVTRACE_TEST_FAIL_ALLOC", "20", 1);
    for (int i = 0; i < TS_THREADS; i++)
        TS_OK(divtrace_open(&ts_faulty[i], ts_path(path, sizeof path, "fault", i), NULL, "op"), NULL);
    unsetenv("DIVTRACE_TEST_FAIL_ALLOC");
    pthread_t watch;
    pthread_create(&watch, NULL, ts_fault_watch, NULL);
    ts_run(ts_fault, TS_THREADS);
    pthread_join(watch, NULL);
    for (int i = 0; i < TS_THREADS; i++)
        if (divtrace_close(ts_faulty[i], 0, NULL) != DIVTRACE_ENOMEM)
            ts_fail("divtrace_close after a fault", DIVTRACE_OK, divtrace_errmsg(NULL));

    divtrace_report_faults(0); /* 200 lines of no interest */
    ts_run(ts_bad_open, TS_THREADS);
    divtrace_report_faults(1);

    for (int i = 0; i < TS_THREADS; i++) {
        unlink(ts_path(path, sizeof path, "own", i));
        unlink(ts_path(path, sizeof path, "fault", i));
    }
    unlink(ts_path(path, sizeof path, "shared", 0));
    rmdir(ts_dir);
    int bad = atomic_load(&ts_bad);
    printf("tsan_check: %s (%d failed calls)\n", bad ? "FAILED" : "ok, no ThreadSanitizer report", bad);
    return bad ? 1 : 0;
}
