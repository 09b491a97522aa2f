/* test_tracer_defer.c: deferred trace records (tracer_defer, exec_double),
 * the way `divtrace record` pipelines a run: a step's records are taken
 * while the next step runs, and its summary is written after the next
 * step has begun.
 * - A GPU backend defers its batch of records: here a backend built from
 *   cpu's kernels does, and computes a step's records only when they are
 *   waited for, after the next step's ops have run (as a GPU's trace
 *   kernels run beside the next step).
 * - On the cpu backend the tracer's own takers go on with a step's
 *   records while the next step runs, and the executor's thread makes
 *   what is left before that step's first update of a leaf. With no
 *   takers at all (tracer_new's cores < 0) every record of a step is made
 *   then, after the next step's forward and backward ops have run; with a
 *   worker thread, whenever it gets to them.
 * Either way the records must equal those of the plain cpu backend traced
 * step by step, for every op of every step, with a fault (a changed leaf)
 * in the middle, which both report as a carry fault of that step and no
 * other; and without exec_double the same run must give wrong records,
 * which shows that the check can fail. */
#include <setjmp.h>
#include <stdarg.h>
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

#define STEPS 7
#define DIRTY_STEP 4 /* a leaf changed outside the graph before this step */

/* The deferring backend: cpu's table plus batch tracing that waits. */
static const struct backend_ops *cpu;
static struct {
    int defer;
    int steady; /* buffers of a step (every node, leaves included) */
    int n;
    const backend_buf **bufs;
    size_t *counts;
    int waits, early; /* waits: trace_batch_wait calls; early: records made at once */
    /* as the GPU backend's captured step waits for the last step's trace
     * before its first write into a buffer a leaf of that step was in */
    int first_write;
    struct trace_oprec *stash;
    int stashed;
} mk;

static void mk_trace_batch(void *ctx, const backend_buf *const *bufs, const size_t *counts, int n,
                           struct trace_oprec *rec)
{
    for (int k = 0; k < n; k++)
        cpu->trace(ctx, bufs[k], counts[k], &rec[k]);
}

static int mk_trace_async(void *ctx, const backend_buf *const *bufs, const size_t *counts, int n,
                          struct trace_oprec *rec)
{
    /* like a GPU backend, which defers only the records its captured
     * graphs were made for */
    if (!mk.defer || n != mk.steady) {
        mk_trace_batch(ctx, bufs, counts, n, rec);
        mk.early++;
        return 0;
    }
    /* nothing read now: the buffers are read when the records are waited for */
    memcpy(mk.bufs, bufs, (size_t)n * sizeof *bufs);
    memcpy(mk.counts, counts, (size_t)n * sizeof *counts);
    mk.n = n;
    mk.stashed = 0;
    return 1;
}

static void mk_op_enter(void *ctx, const struct graph *g, int i)
{
    (void)g;
    if (mk.n && !mk.stashed && i == mk.first_write) {
        mk_trace_batch(ctx, mk.bufs, mk.counts, mk.n, mk.stash);
        mk.stashed = 1;
    }
}

static void mk_trace_wait(void *ctx, struct trace_oprec *rec, int n)
{
    assert_int_equal(n, mk.n);
    if (mk.stashed)
        memcpy(rec, mk.stash, (size_t)n * sizeof *rec);
    else
        mk_trace_batch(ctx, mk.bufs, mk.counts, n, rec);
    mk.stashed = 0;
    mk.waits++;
}

static int mk_trace_defer(void *ctx, int on)
{
    (void)ctx;
    mk.defer = on;
    return 0;
}

static int mk_step_begin(void *ctx, uint64_t step, int arr)
{
    (void)ctx, (void)step, (void)arr;
    return 0; /* run the ops; the step is a unit: the tracer asks before step_end */
}

static void mk_step_end(void *ctx, uint64_t step, int arr) { (void)ctx, (void)step, (void)arr; }

struct side {
    struct exec e;
    struct tracer *tr;
};

static void side_open(struct side *s, struct run *r, const struct backend_ops *be, int cores)
{
    tu_exec_like(&s->e, r, be); /* the run's initial leaves */
    s->tr = tracer_new(&r->g, be, r->ctx, cores);
    s->e.hook = tracer_hook;
    s->e.hook_arg = s->tr;
    s->e.before_end = tracer_before_end;
    s->e.before_end_arg = s->tr;
}

static void side_close(struct side *s)
{
    tracer_free(s->tr);
    exec_free(&s->e);
}

/* A leaf changed between steps, the same way on both sides. */
static void side_poke(struct side *s, int leaf)
{
    size_t n = s->e.g->nodes[leaf].count;
    float *h = dt_malloc(n * sizeof *h);
    exec_get(&s->e, leaf, h);
    h[n / 2] += 0.25f;
    exec_set(&s->e, leaf, h);
    free(h);
}

/* The carry faults a tracer reports for a final step: the poked leaf at
 * DIRTY_STEP, none elsewhere. */
static void check_carry(const struct tracer *tr, uint64_t step, int leaf)
{
    const int *lv;
    int n = tracer_carry(tr, step, &lv);
    assert_int_equal(n, step == DIRTY_STEP);
    if (n)
        assert_int_equal(lv[0], leaf);
}

/* One step of the plain side: its records, final, into out. */
static void ref_step(struct side *ref, struct run *r, uint64_t step, int leaf, float *batch,
                     struct trace_oprec *out)
{
    tracer_begin(ref->tr, step);
    if (step == DIRTY_STEP)
        side_poke(ref, leaf);
    tu_exec_inputs(&ref->e, r, step, batch);
    exec_step(&ref->e, step);
    tracer_sync(ref->tr);
    check_carry(ref->tr, step, leaf);
    memcpy(out, tracer_records_of(ref->tr, step), (size_t)r->g.n * sizeof *out);
    exec_advance(&ref->e);
}

/* One step of the deferring side, up to its tracer_sync (the caller
 * advances it once it has taken the records it wants). */
static void def_step(struct side *def, struct run *r, uint64_t step, int leaf, float *batch)
{
    tracer_begin(def->tr, step);
    if (step == DIRTY_STEP) {
        tracer_flush(def->tr); /* as train.c before a fault: last step's records read the leaf */
        side_poke(def, leaf);
    }
    tu_exec_inputs(&def->e, r, step, batch);
    exec_step(&def->e, step);
    tracer_sync(def->tr);
}

/* Counts the ops whose records differ between the two runs. */
static int run_pair(int double_buffer)
{
    struct train_config tc;
    struct run r;
    tu_small_run(&r, &tc, STEPS);
    cpu = r.be;
    struct backend_ops mock = *cpu;
    mock.trace_batch = mk_trace_batch;
    mock.trace_batch_async = mk_trace_async;
    mock.trace_batch_wait = mk_trace_wait;
    mock.trace_defer = mk_trace_defer;
    mock.step_begin = mk_step_begin;
    mock.step_end = mk_step_end;
    mock.op_enter = mk_op_enter;
    memset(&mk, 0, sizeof mk);
    mk.bufs = dt_calloc((size_t)r.g.n, sizeof *mk.bufs);
    mk.counts = dt_calloc((size_t)r.g.n, sizeof *mk.counts);
    mk.stash = dt_calloc((size_t)r.g.n, sizeof *mk.stash);
    mk.first_write = -1;
    for (int i = 0; i < r.g.n; i++) {
        int nx = r.g.nodes[i].next;
        if (nx >= 0 && (mk.first_write < 0 || nx < mk.first_write))
            mk.first_write = nx;
    }

    struct side ref, def;
    side_open(&ref, &r, cpu, 0);
    side_open(&def, &r, &mock, 0);
    assert_int_equal(tracer_defer(def.tr), 1);
    if (double_buffer)
        exec_double(&def.e);
    int leaf = -1;
    for (int i = 0; i < r.g.n && leaf < 0; i++)
        if (r.g.nodes[i].type == OP_PARAM && r.g.nodes[i].next >= 0)
            leaf = i;
    assert_true(leaf >= 0);
    mk.steady = r.g.n;

    float *batch = dt_malloc(r.nbatch * sizeof *batch);
    struct trace_oprec *want = dt_calloc((size_t)STEPS * (size_t)r.g.n, sizeof *want);
    int bad = 0, compared = 0;
    uint64_t pend = UINT64_MAX;
    for (uint64_t step = 0; step < STEPS; step++) {
        ref_step(&ref, &r, step, leaf, batch, want + step * (size_t)r.g.n);
        def_step(&def, &r, step, leaf, batch);
        uint64_t ready[2];
        int nready = 0;
        if (pend != UINT64_MAX) {
            /* taken when this step asked for its own */
            assert_true(tracer_done(def.tr) >= (int64_t)pend);
            ready[nready++] = pend;
            pend = UINT64_MAX;
        }
        if (tracer_done(def.tr) >= (int64_t)step)
            ready[nready++] = step;
        else
            pend = step;
        for (int q = 0; q < nready; q++) {
            const struct trace_oprec *got = tracer_records_of(def.tr, ready[q]);
            if (double_buffer)
                check_carry(def.tr, ready[q], leaf);
            const struct trace_oprec *exp = want + ready[q] * (size_t)r.g.n;
            for (int i = 0; i < r.g.n; i++) {
                compared++;
                if (got[i].hash != exp[i].hash || got[i].op != exp[i].op ||
                    memcmp(got[i].sketch, exp[i].sketch, sizeof got[i].sketch) != 0) {
                    bad++;
                    if (getenv("TD_DEBUG"))
                        print_message("step %llu node %d %s next %d\n", (unsigned long long)ready[q], i,
                                      r.g.nodes[i].name, r.g.nodes[i].next);
                }
            }
        }
        exec_advance(&def.e);
    }
    tracer_flush(def.tr);
    assert_true(pend != UINT64_MAX);
    assert_int_equal(tracer_done(def.tr), STEPS - 1);
    const struct trace_oprec *got = tracer_records_of(def.tr, pend);
    if (double_buffer)
        check_carry(def.tr, pend, leaf);
    for (int i = 0; i < r.g.n; i++) {
        compared++;
        if (got[i].hash != want[pend * (size_t)r.g.n + (size_t)i].hash)
            bad++;
    }
    assert_int_equal(compared, STEPS * r.g.n);
    /* every step was deferred: each traces the same buffers, leaves included */
    assert_int_equal(mk.waits, STEPS);
    assert_int_equal(mk.early, 0);
    free(want);
    free(batch);
    free(mk.bufs);
    free(mk.counts);
    free(mk.stash);
    side_close(&def);
    side_close(&ref);
    run_close(&r);
    return bad;
}

/* The cpu backend's own deferral: a tracer whose records are made off
 * the executor's thread (cores: -1, none but the caller's at the flush
 * points; 4, a worker thread too) against the plain one, step by step.
 * Counts the ops whose records differ. */
static int run_async(int cores, int double_buffer)
{
    struct train_config tc;
    struct run r;
    tu_small_run(&r, &tc, STEPS);
    cpu = r.be;
    struct side ref, def;
    side_open(&ref, &r, cpu, 0);
    side_open(&def, &r, cpu, cores);
    assert_int_equal(tracer_defer(def.tr), 1);
    if (double_buffer)
        assert_int_equal(exec_double(&def.e), 0);
    int leaf = -1;
    for (int i = 0; i < r.g.n && leaf < 0; i++)
        if (r.g.nodes[i].type == OP_PARAM && r.g.nodes[i].next >= 0)
            leaf = i;
    assert_true(leaf >= 0);

    float *batch = dt_malloc(r.nbatch * sizeof *batch);
    struct trace_oprec *want = dt_calloc((size_t)r.g.n, sizeof *want);
    struct trace_oprec *prev = dt_calloc((size_t)r.g.n, sizeof *prev);
    int bad = 0, compared = 0;
    for (uint64_t step = 0; step < STEPS; step++) {
        /* the plain tracer's records of the last step, for the comparison */
        memcpy(prev, want, (size_t)r.g.n * sizeof *want);
        ref_step(&ref, &r, step, leaf, batch, want);
        def_step(&def, &r, step, leaf, batch);
        if (cores < 0) /* nothing made this step's records yet; the last step's are final */
            assert_int_equal(tracer_done(def.tr), (int64_t)step - 1);
        if (step > 0) {
            assert_true(tracer_done(def.tr) >= (int64_t)step - 1);
            if (double_buffer)
                check_carry(def.tr, step - 1, leaf);
            const struct trace_oprec *got = tracer_records_of(def.tr, step - 1);
            for (int i = 0; i < r.g.n; i++, compared++)
                bad += got[i].hash != prev[i].hash || got[i].op != prev[i].op ||
                       memcmp(got[i].sketch, prev[i].sketch, sizeof got[i].sketch) != 0;
        }
        exec_advance(&def.e);
    }
    tracer_flush(def.tr);
    assert_int_equal(tracer_done(def.tr), STEPS - 1);
    const struct trace_oprec *got = tracer_records_of(def.tr, STEPS - 1);
    for (int i = 0; i < r.g.n; i++, compared++)
        bad += got[i].hash != want[i].hash;
    assert_int_equal(compared, STEPS * r.g.n);
    free(want);
    free(prev);
    free(batch);
    side_close(&def);
    side_close(&ref);
    run_close(&r);
    return bad;
}

static void test_cpu_deferred_records_equal(void **state)
{
    (void)state;
    assert_int_equal(run_async(-1, 1), 0);
    assert_int_equal(run_async(4, 1), 0);
}

/* Every record made in the next step's first update's place reads that
 * step's outputs unless they are double-buffered. */
static void test_cpu_without_double_buffer_wrong(void **state)
{
    (void)state;
    assert_true(run_async(-1, 0) > 0);
}

static void test_deferred_records_equal(void **state)
{
    (void)state;
    assert_int_equal(run_pair(1), 0);
}

/* The next step overwrites the outputs a deferred trace reads unless
 * they are double-buffered: the comparison above must see that. */
static void test_without_double_buffer_wrong(void **state)
{
    (void)state;
    assert_true(run_pair(0) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deferred_records_equal),
        cmocka_unit_test(test_without_double_buffer_wrong),
        cmocka_unit_test(test_cpu_deferred_records_equal),
        cmocka_unit_test(test_cpu_without_double_buffer_wrong),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
