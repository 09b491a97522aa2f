/* test_tracer_async.c: records made off the training's thread (tracer.c).
 * The backend is cpu's with a trace function that notes which thread made
 * each record.
 * - test_main_helps: one thread of training and the tracer's worker. The
 *   worker is held in the step's first op until the main thread, in
 *   tracer_sync, has made every other record of the step from the last op
 *   back.
 * - test_lent_threads: two threads of training on two cores, so no worker
 *   of the tracer's own: the products' pool's worker makes records while
 *   it waits for jobs. The main thread, at its first record, waits for
 *   that worker to make one.
 * Every record must still equal the plain cpu trace of the op's buffer,
 * each made exactly once a step; and a NaN that appears at one op and
 * flows into every later one must be reported at that op, although the
 * main thread saw the later ops first. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "cpu_gemm.h"
#include "exec.h"
#include "run.h"
#include "test_util.h"
#include "train.h"
#include "tracer.h"
#include "util.h"

#define STEPS 5
#define NAN_STEP 3 /* from this step on, op nan_op and every op after it hold a NaN */

static const struct backend_ops *cpu;
static struct {
    pthread_t main;
    struct exec *e;
    int n;
    int nan_op;
    uint64_t step;
    atomic_int main_made;  /* records the main thread made this step */
    atomic_int worker_in0; /* the worker is in this step's first op */
    atomic_int held;       /* steps whose first op held the worker to the end */
    atomic_int gave_up;    /* a wait ran past its deadline: wait no more */
    int *by_main, *made;   /* per node, this step */
    pthread_t pool_worker; /* test_lent_threads: the pool's worker */
    atomic_int others;     /* records made by the pool's worker this step */
    atomic_int strangers;  /* records made by any other thread */
} mk;

static int mk_node(const backend_buf *buf)
{
    for (int i = 0; i < mk.n; i++)
        if (mk.e->buf[i] == buf)
            return i;
    fail_msg("a record of a buffer no node has");
    return -1;
}

/* Node i's record, the planted NaNs in it, and who made it. */
static void mk_record(void *ctx, const backend_buf *buf, size_t count, struct trace_oprec *rec, int i,
                      int on_main)
{
    cpu->trace(ctx, buf, count, rec);
    if (mk.step >= NAN_STEP && i >= mk.nan_op)
        rec->nan = 1;
    mk.made[i]++;
    if (on_main) {
        mk.by_main[i] = 1;
        atomic_fetch_add(&mk.main_made, 1);
    }
}

static void mk_trace(void *ctx, const backend_buf *buf, size_t count, struct trace_oprec *rec)
{
    int i = mk_node(buf), on_main = pthread_equal(pthread_self(), mk.main);
    /* The worker, in the step's first op, waits for the main thread to
     * make every other record; the main thread, before its first, waits
     * for the worker to be in that op (it may have slept through the step
     * and only now be woken by tracer_sync). The deadlines only keep a
     * broken tracer from hanging the test; the checks then fail. */
    double t0 = dt_now();
    if (!on_main && i == 0) {
        atomic_store(&mk.worker_in0, 1);
        while (atomic_load(&mk.main_made) < mk.n - 1 && !atomic_load(&mk.gave_up))
            if (dt_now() - t0 > 60)
                atomic_store(&mk.gave_up, 1);
        if (atomic_load(&mk.main_made) == mk.n - 1)
            atomic_fetch_add(&mk.held, 1);
    }
    if (on_main && atomic_load(&mk.main_made) == 0)
        while (!atomic_load(&mk.worker_in0) && !atomic_load(&mk.gave_up))
            if (dt_now() - t0 > 60)
                atomic_store(&mk.gave_up, 1);
    mk_record(ctx, buf, count, rec, i, on_main);
}

/* An op with an op after it, half-way through the step. */
static int nan_op_of(const struct graph *g)
{
    int op = -1;
    for (int i = g->n / 2; i < g->n && op < 0; i++)
        if (g->nodes[i].ninputs > 0)
            op = i;
    assert_true(op > 0 && op < g->n - 1);
    return op;
}

/* A step's records: each made once, each the plain cpu trace of its
 * buffer (but the planted NaNs), and the planted non-finite op named. */
static void check_step(struct exec *e, struct run *r, struct tracer *tr, uint64_t step)
{
    const struct trace_oprec *rec = tracer_records(tr);
    for (int i = 0; i < r->g.n; i++) {
        assert_int_equal(mk.made[i], 1);
        struct trace_oprec want;
        cpu->trace(r->ctx, e->buf[i], r->g.nodes[i].count, &want);
        assert_int_equal(rec[i].hash, want.hash);
        assert_true(rec[i].l2 == want.l2);
        assert_int_equal(rec[i].op, (uint32_t)i);
        assert_int_equal(rec[i].nan, step >= NAN_STEP && i >= mk.nan_op ? 1 : want.nan);
    }
    uint64_t nf_step = 0;
    int nf = tracer_nonfinite(tr, &nf_step);
    if (step < NAN_STEP) {
        assert_int_equal(nf, -1);
    } else {
        assert_int_equal(nf, mk.nan_op);
        assert_int_equal(nf_step, NAN_STEP);
    }
}

/* The mock's state for a run of r's graph on e, traced by tr. */
static void mk_start(struct exec *e, struct run *r, struct tracer *tr)
{
    e->hook = tracer_hook;
    e->hook_arg = tr;
    mk.e = e;
    mk.n = r->g.n;
    mk.by_main = dt_calloc((size_t)r->g.n, sizeof *mk.by_main);
    mk.made = dt_calloc((size_t)r->g.n, sizeof *mk.made);
    mk.nan_op = nan_op_of(&r->g);
}

/* Step `step`, its records made and checked (check_step). */
static void mk_step(struct exec *e, struct run *r, struct tracer *tr, uint64_t step, float *batch)
{
    tracer_begin(tr, step);
    mk.step = step;
    atomic_store(&mk.main_made, 0);
    atomic_store(&mk.worker_in0, 0);
    atomic_store(&mk.others, 0);
    memset(mk.by_main, 0, (size_t)r->g.n * sizeof *mk.by_main);
    memset(mk.made, 0, (size_t)r->g.n * sizeof *mk.made);
    tu_exec_inputs(e, r, step, batch);
    exec_step(e, step);
    tracer_sync(tr);
    check_step(e, r, tr, step);
}

static void mk_end(struct exec *e, struct run *r, struct tracer *tr)
{
    free(mk.by_main);
    free(mk.made);
    tracer_free(tr);
    exec_free(e);
    run_close(r);
}

static void test_main_helps(void **state)
{
    (void)state;
    struct train_config tc;
    struct run r;
    tu_small_run(&r, &tc, STEPS);
    cpu = r.be;
    struct backend_ops mock = *cpu;
    mock.trace = mk_trace;

    struct exec e;
    tu_exec_like(&e, &r, &mock);
    struct tracer *tr = tracer_new(&r.g, &mock, r.ctx, 2);
    memset(&mk, 0, sizeof mk);
    mk.main = pthread_self();
    mk_start(&e, &r, tr);

    float *batch = dt_malloc(r.nbatch * sizeof *batch);
    for (uint64_t step = 0; step < STEPS; step++) {
        mk_step(&e, &r, tr, step, batch);
        int main_made = 0;
        for (int i = 0; i < r.g.n; i++)
            main_made += mk.by_main[i];
        /* the worker held in op 0, the main thread made every other record */
        assert_false(mk.by_main[0]);
        assert_int_equal(main_made, r.g.n - 1);
        exec_advance(&e);
    }
    assert_int_equal(atomic_load(&mk.held), STEPS);
    free(batch);
    mk_end(&e, &r, tr);
}

static void lt_noop(void *arg, int part, int thread)
{
    (void)arg;
    (void)part;
    (void)thread;
}

/* A job of two parts: the caller's waits for the worker to take the
 * other, which notes the worker's thread. */
static void lt_who(void *arg, int part, int thread)
{
    (void)part;
    atomic_int *seen = arg;
    if (thread == 1) {
        mk.pool_worker = pthread_self();
        atomic_store(seen, 1);
    }
    double t0 = dt_now();
    while (!atomic_load(seen) && dt_now() - t0 < 60)
        ;
}

static void lt_trace(void *ctx, const backend_buf *buf, size_t count, struct trace_oprec *rec)
{
    int i = mk_node(buf), on_main = pthread_equal(pthread_self(), mk.main);
    /* The main thread's first record waits for the pool's worker to make
     * one, posting it empty jobs: one that slept between the step's jobs
     * then wakes and waits for the next, taking records meanwhile. */
    double t0 = dt_now();
    if (on_main && atomic_load(&mk.main_made) == 0)
        while (atomic_load(&mk.others) == 0 && !atomic_load(&mk.gave_up)) {
            cpu_pool_run(2, 2, lt_noop, NULL);
            if (dt_now() - t0 > 60)
                atomic_store(&mk.gave_up, 1);
        }
    mk_record(ctx, buf, count, rec, i, on_main);
    if (on_main)
        return;
    if (pthread_equal(pthread_self(), mk.pool_worker))
        atomic_fetch_add(&mk.others, 1);
    else
        atomic_fetch_add(&mk.strangers, 1);
}

static void test_lent_threads(void **state)
{
    (void)state;
    struct train_config tc;
    struct run r;
    tu_small_run_threads(&r, &tc, STEPS, 2);
    /* the run's own tracer lent the pool first: this test's takes it */
    tracer_free(r.tr);
    r.tr = NULL;
    cpu = r.be;
    struct backend_ops mock = *cpu;
    mock.trace = lt_trace;

    struct exec e;
    tu_exec_like(&e, &r, &mock);
    memset(&mk, 0, sizeof mk);
    mk.main = pthread_self();
    atomic_int seen = 0;
    cpu_pool_run(2, 2, lt_who, &seen);
    assert_true(atomic_load(&seen));
    struct tracer *tr = tracer_new(&r.g, &mock, r.ctx, 2);
    mk_start(&e, &r, tr);

    float *batch = dt_malloc(r.nbatch * sizeof *batch);
    for (uint64_t step = 0; step < STEPS; step++) {
        mk_step(&e, &r, tr, step, batch);
        /* the pool's worker made records; no worker of the tracer's own
         * ran (two threads of training fill the two cores) */
        assert_false(atomic_load(&mk.gave_up));
        assert_true(atomic_load(&mk.others) > 0);
        assert_int_equal(atomic_load(&mk.strangers), 0);
        exec_advance(&e);
    }
    free(batch);
    mk_end(&e, &r, tr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_main_helps),
        cmocka_unit_test(test_lent_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
