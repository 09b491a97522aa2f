/* test_tracer_async.c: the tracer's worker thread and the main thread's
 * help at the end of a step (tracer.c). The backend is cpu's with a trace
 * function that notes which thread made each record and that holds the
 * worker in the step's first op until the main thread, in tracer_sync,
 * has made every other record of the step from the last op back. Every record must still equal
 * the plain cpu trace of the op's buffer, each exactly once a step; and a
 * NaN that appears at one op and flows into every later one must be
 * reported at that op, although the main thread saw the later ops first. */
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
} mk;

static int mk_node(const backend_buf *buf)
{
    for (int i = 0; i < mk.n; i++)
        if (mk.e->buf[i] == buf)
            return i;
    fail_msg("a record of a buffer no node has");
    return -1;
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
    cpu->trace(ctx, buf, count, rec);
    if (mk.step >= NAN_STEP && i >= mk.nan_op)
        rec->nan = 1;
    mk.made[i]++;
    if (on_main) {
        mk.by_main[i] = 1;
        atomic_fetch_add(&mk.main_made, 1);
    }
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
    struct tracer *tr = tracer_new(&r.g, &mock, r.ctx, 1);
    e.hook = tracer_hook;
    e.hook_arg = tr;
    memset(&mk, 0, sizeof mk);
    mk.main = pthread_self();
    mk.e = &e;
    mk.n = r.g.n;
    mk.by_main = dt_calloc((size_t)r.g.n, sizeof *mk.by_main);
    mk.made = dt_calloc((size_t)r.g.n, sizeof *mk.made);
    /* an op with an op after it, half-way through the step */
    mk.nan_op = -1;
    for (int i = r.g.n / 2; i < r.g.n && mk.nan_op < 0; i++)
        if (r.g.nodes[i].ninputs > 0)
            mk.nan_op = i;
    assert_true(mk.nan_op > 0 && mk.nan_op < r.g.n - 1);

    float *batch = dt_malloc(r.nbatch * sizeof *batch);
    for (uint64_t step = 0; step < STEPS; step++) {
        tracer_begin(tr, step);
        mk.step = step;
        atomic_store(&mk.main_made, 0);
        atomic_store(&mk.worker_in0, 0);
        memset(mk.by_main, 0, (size_t)r.g.n * sizeof *mk.by_main);
        memset(mk.made, 0, (size_t)r.g.n * sizeof *mk.made);
        tu_exec_inputs(&e, &r, step, batch);
        exec_step(&e, step);
        tracer_sync(tr);
        const struct trace_oprec *rec = tracer_records(tr);
        int main_made = 0;
        for (int i = 0; i < r.g.n; i++) {
            assert_int_equal(mk.made[i], 1);
            main_made += mk.by_main[i];
            struct trace_oprec want;
            cpu->trace(r.ctx, e.buf[i], r.g.nodes[i].count, &want);
            assert_int_equal(rec[i].hash, want.hash);
            assert_true(rec[i].l2 == want.l2);
            assert_int_equal(rec[i].op, (uint32_t)i);
            assert_int_equal(rec[i].nan, step >= NAN_STEP && i >= mk.nan_op ? 1 : want.nan);
        }
        /* the worker held in op 0, the main thread made every other record */
        assert_false(mk.by_main[0]);
        assert_int_equal(main_made, r.g.n - 1);
        uint64_t nf_step = 0;
        int nf = tracer_nonfinite(tr, &nf_step);
        if (step < NAN_STEP) {
            assert_int_equal(nf, -1);
        } else {
            assert_int_equal(nf, mk.nan_op);
            assert_int_equal(nf_step, NAN_STEP);
        }
        exec_advance(&e);
    }
    assert_int_equal(atomic_load(&mk.held), STEPS);
    free(batch);
    free(mk.by_main);
    free(mk.made);
    tracer_free(tr);
    exec_free(&e);
    run_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_main_helps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
