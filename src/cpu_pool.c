/* cpu_pool.c: the cpu backend's pool of threads (cpu_gemm.h's cpu_pool_*),
 * one fork-join job at a time, for the fixed products' parts and other
 * work whose parts give the same bits whichever thread runs them. */
#include "cpu_gemm.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

/* The pool hands out a job's parts one at a time: each thread in the job
 * (the caller, and the workers posted for it) takes the next part not yet
 * taken, so a worker that wakes late or runs slower than the caller takes
 * fewer parts, and the caller waits only for parts under way, never for a
 * worker to wake. A part is taken by a compare-and-swap on `ticket`, which
 * holds the job's number (high half) and its next part (low half): a
 * worker still holding the number of a finished job fails it and goes back
 * to waiting.
 *
 * Each worker waits for a job of its own (its slot is posted the job's
 * number), so that workers a job does not need stay out of it: first
 * spinning (a training step's products come a few microseconds apart, and
 * waking a sleeping thread costs about as much as a small product), then
 * yielding the core for POOL_IDLE_S (more threads than cores must not
 * starve the ones at work; PredNet's steps have gaps of serial ops longer
 * than a few hundred yields, and a worker that slept through them came
 * late to a third of the jobs: 2 threads here, 340 -> 295 ms a step), then
 * asleep on a condition variable. The caller waits for the
 * parts under way the same way, without the sleep. While it waits, a
 * worker does the work lent to the pool (cpu_pool_idle: the tracer's
 * records), one piece at a time, and does not go to sleep while there is
 * some. */
#define POOL_MAX_WORKERS 255
#define POOL_PAUSES 256     /* spins before yielding */
#define POOL_IDLE_S 2e-3    /* seconds of yielding before sleeping */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t go;
    int nthreads;            /* workers started (the caller is thread 0) */
    int sleepers;            /* workers waiting on go */
    cpu_pool_fn *fn;         /* the job: fn(arg, part, thread) for each part */
    void *arg;
    atomic_int parts;        /* (read by late workers too: atomic) */
    _Alignas(64) atomic_ullong ticket; /* job number << 32 | next part */
    _Alignas(64) atomic_int done;      /* parts of the job finished */
    /* lent work for waiting workers (cpu_pool_idle); arg is set before fn */
    _Alignas(64) _Atomic(cpu_pool_idle_fn *) idle_fn;
    _Atomic(void *) idle_arg;
    struct {
        _Alignas(64) atomic_uint gen; /* the number of the last job the worker was posted */
        atomic_int inside;            /* the worker is in idle_fn */
        unsigned start;               /* gen when the worker was made */
    } slot[POOL_MAX_WORKERS + 1];
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER}; /* the rest zero */
static pthread_mutex_t pool_idle_mu = PTHREAD_MUTEX_INITIALIZER; /* lending and withdrawing */

static pthread_mutex_t pool_caller = PTHREAD_MUTEX_INITIALIZER;
static unsigned pool_job; /* the last job's number (under pool_caller) */

static void pool_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}


/* Take and run parts of job `job` until none is left or the job is over. */
static void pool_take(unsigned job, int thread)
{
    unsigned long long t = atomic_load_explicit(&pool.ticket, memory_order_acquire);
    for (;;) {
        if ((unsigned)(t >> 32) != job ||
            (t & 0xffffffffu) >= (unsigned)atomic_load_explicit(&pool.parts, memory_order_acquire))
            return;
        /* a job is not over while one of its parts is untaken: a successful
         * swap makes pool.fn and pool.arg that job's */
        if (!atomic_compare_exchange_weak_explicit(&pool.ticket, &t, t + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        pool.fn(pool.arg, (int)(t & 0xffffffffu), thread);
        atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
        t = atomic_load_explicit(&pool.ticket, memory_order_acquire);
    }
}

/* Worker id, waiting for a job: one piece of the lent work, if any (1).
 * `inside` is raised before fn is read and fn cleared before `inside` is
 * read back (both sequentially consistent), so a withdrawal that waits
 * for `inside` to fall cannot miss a worker that is still to call fn. */
static int pool_idle_work(int id)
{
    if (!atomic_load_explicit(&pool.idle_fn, memory_order_relaxed))
        return 0;
    atomic_store(&pool.slot[id].inside, 1);
    cpu_pool_idle_fn *fn = atomic_load(&pool.idle_fn);
    int r = fn ? fn(atomic_load(&pool.idle_arg)) : 0;
    atomic_store_explicit(&pool.slot[id].inside, 0, memory_order_release);
    return r;
}

int cpu_pool_idle(cpu_pool_idle_fn *fn, void *arg)
{
    int r = 0;
    pthread_mutex_lock(&pool_idle_mu);
    if (fn) {
        if (atomic_load(&pool.idle_fn)) {
            r = -1;
        } else {
            atomic_store(&pool.idle_arg, arg);
            atomic_store(&pool.idle_fn, fn);
        }
    } else if (atomic_load(&pool.idle_fn) && atomic_load(&pool.idle_arg) == arg) {
        atomic_store(&pool.idle_fn, NULL);
        for (int w = 1; w <= POOL_MAX_WORKERS; w++)
            while (atomic_load(&pool.slot[w].inside))
                pool_pause();
        atomic_store(&pool.idle_arg, NULL);
    }
    pthread_mutex_unlock(&pool_idle_mu);
    return r;
}

static void *pool_worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    /* not gen now: the job the worker was made for may be posted already */
    unsigned seen = pool.slot[id].start;
    for (;;) {
        double t0 = 0;
        for (int s = 0; atomic_load_explicit(&pool.slot[id].gen, memory_order_acquire) == seen; s++) {
            if (pool_idle_work(id)) {
                s = -1; /* busy, not idle: the count starts again */
                continue;
            }
            if (s < POOL_PAUSES) {
                pool_pause();
                continue;
            }
            if (s == POOL_PAUSES)
                t0 = dt_now();
            else if (dt_now() - t0 > POOL_IDLE_S)
                break;
            sched_yield();
        }
        if (atomic_load_explicit(&pool.slot[id].gen, memory_order_acquire) == seen) {
            pthread_mutex_lock(&pool.mu);
            pool.sleepers++;
            while (atomic_load_explicit(&pool.slot[id].gen, memory_order_acquire) == seen)
                pthread_cond_wait(&pool.go, &pool.mu);
            pool.sleepers--;
            pthread_mutex_unlock(&pool.mu);
        }
        seen = atomic_load_explicit(&pool.slot[id].gen, memory_order_acquire);
        pool_take(seen, id);
    }
    return NULL;
}

/* A child made by fork() has none of the workers (report's parallel
 * workers fork): it starts its own, from a pool it can lock. */
static void pool_fork_prepare(void)
{
    pthread_mutex_lock(&pool_caller);
    pthread_mutex_lock(&pool.mu);
}

static void pool_fork_parent(void)
{
    pthread_mutex_unlock(&pool.mu);
    pthread_mutex_unlock(&pool_caller);
}

static void pool_fork_child(void)
{
    pthread_mutex_init(&pool_caller, NULL);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.go, NULL);
    pool.nthreads = 0;
    pool.sleepers = 0;
    pthread_mutex_init(&pool_idle_mu, NULL);
    atomic_store(&pool.idle_fn, NULL); /* the lender is the parent's */
    atomic_store(&pool.idle_arg, NULL);
    for (int w = 0; w <= POOL_MAX_WORKERS; w++) {
        atomic_store(&pool.slot[w].gen, pool_job);
        atomic_store(&pool.slot[w].inside, 0);
    }
}

static void pool_fork_register(void)
{
    pthread_atfork(pool_fork_prepare, pool_fork_parent, pool_fork_child);
}

void cpu_pool_run(int threads, int parts, cpu_pool_fn *fn, void *arg)
{
    if (threads > parts)
        threads = parts;
    if (threads <= 1) {
        for (int p = 0; p < parts; p++)
            fn(arg, p, 0);
        return;
    }
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pool_fork_register);
    /* one job at a time, whoever calls */
    pthread_mutex_lock(&pool_caller);
    pthread_mutex_lock(&pool.mu);
    while (pool.nthreads < threads - 1 && pool.nthreads < POOL_MAX_WORKERS) {
        pthread_t t;
        atomic_store(&pool.slot[pool.nthreads + 1].gen, pool_job);
        pool.slot[pool.nthreads + 1].start = pool_job;
        if (pthread_create(&t, NULL, pool_worker, (void *)(intptr_t)(pool.nthreads + 1)) != 0)
            break;
        pthread_detach(t);
        pool.nthreads++;
    }
    int workers = pool.nthreads < threads - 1 ? pool.nthreads : threads - 1;
    pthread_mutex_unlock(&pool.mu);
    unsigned job = ++pool_job;
    /* Closed to every taker before the job's fields change. A worker that
     * read the last job's ticket once all its parts were taken, and then
     * this job's part count (larger), would otherwise pass the test in
     * pool_take and still win its swap on that stale ticket, running a
     * part of this job twice, or on a thread the job did not ask for
     * (test_cpu_gemm's test_pool_two_callers). A worker that reads the new
     * count (release and acquire) swaps after this store and fails. */
    atomic_store(&pool.ticket, (unsigned long long)job << 32 | 0xffffffffu);
    pool.fn = fn;
    pool.arg = arg;
    atomic_store_explicit(&pool.parts, parts, memory_order_release);
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.ticket, (unsigned long long)job << 32, memory_order_release);
    for (int w = 1; w <= workers; w++)
        atomic_store_explicit(&pool.slot[w].gen, job, memory_order_release);
    pthread_mutex_lock(&pool.mu);
    if (pool.sleepers > 0)
        pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.mu);
    pool_take(job, 0);
    for (int s = 0; atomic_load_explicit(&pool.done, memory_order_acquire) < parts; s++) {
        if (s < POOL_PAUSES)
            pool_pause();
        else
            sched_yield();
    }
    pthread_mutex_unlock(&pool_caller);
}

void cpu_pool_part(size_t n, int parts, int p, size_t align, size_t *i0, size_t *i1)
{
    *i0 = n * (size_t)p / (size_t)parts / align * align;
    *i1 = p + 1 == parts ? n : n * (size_t)(p + 1) / (size_t)parts / align * align;
}

