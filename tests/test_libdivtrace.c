/* test_libdivtrace.c: libdivtrace (divtrace.h) against the trace reader and
 * independent computation: records field for field (the hash against
 * hash_tensor, L2/min/max/NaN/Inf counted here), names, kinds, shapes and
 * inputs (links to the previous step included), loss, gradient norm and
 * root hash, checkpoints; every error status; early ends and unclosed
 * traces; two traces from two threads and one trace from two threads. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <xxhash.h>

#include "config.h"
#include "divtrace.h"
#include "hash.h"
#include "test_util.h"
#include "trace.h"

/* ---- a small model's step: tensors, kinds, inputs ---- */

#define NT 9
struct tt {
    const char *name, *type;
    enum divtrace_kind kind;
    int ndim;
    int64_t shape[4];
    const char *in[3];
    int nin;
};
static const struct tt tt_ops[NT] = {
    {"x", "data", DIVTRACE_INPUT, 2, {3, 5}, {0}, 0},
    {"W", "param", DIVTRACE_PARAM, 2, {5, 4}, {"W.new"}, 1},          /* the previous step's update */
    {"h", "linear", DIVTRACE_FORWARD, 2, {3, 4}, {"x", "W"}, 2},
    {"img", "conv", DIVTRACE_FORWARD, 4, {2, 3, 17, 33}, {"h"}, 1},    /* 3366 elements */
    {"empty", "slice", DIVTRACE_FORWARD, 3, {2, 0, 7}, {"img"}, 1},
    {"big", "upsample", DIVTRACE_FORWARD, 1, {70001}, {"img"}, 1},     /* several hash leaves */
    {"h.grad", "mse_bwd", DIVTRACE_BACKWARD, 2, {3, 4}, {"h", "img"}, 2},
    {"W.grad", "matmul", DIVTRACE_GRAD, 2, {5, 4}, {"x", "h.grad"}, 2},
    {"W.new", "sgd", DIVTRACE_OPTIMIZER, 2, {5, 4}, {"W", "W.grad"}, 2},
};
/* the expected inputs, as the trace stores them */
static const uint32_t tt_inputs[NT][3] = {
    {0}, {8 | TRACE_INPUT_PREV}, {0, 1}, {2}, {3}, {3}, {2, 3}, {0, 6}, {1, 7},
};

static size_t tt_count(const struct tt *o)
{
    size_t n = 1;
    for (int d = 0; d < o->ndim; d++)
        n *= (size_t)o->shape[d];
    return n;
}

/* Contents of op i at step s: uniform, with specials in some tensors. */
static float *tt_data(int i, uint64_t s)
{
    /* the parameter holds what its update (W.new) wrote the step before, as
     * in a training loop: no carry fault */
    if (i == 1 && s > 0)
        return tt_data(8, s - 1);
    size_t n = tt_count(&tt_ops[i]);
    float *x = malloc(n ? n * sizeof *x : 1);
    if (!x)
        abort();
    uint64_t r = 1000 * s + (uint64_t)i + 1;
    for (size_t k = 0; k < n; k++)
        x[k] = (float)tu_rand_uniform(&r, -2, 2);
    if (i == 3 && n > 40) { /* NaN, Inf, -0 in the image */
        x[1] = NAN;
        x[7] = INFINITY;
        x[8] = -INFINITY;
        x[9] = -0.0f;
        x[30] = NAN;
    }
    return x;
}

/* The record as counted here, element by element. */
struct tt_expect {
    uint64_t hash, nan, inf;
    double l2, min, max;
};

static void tt_expect_of(const float *x, size_t n, struct tt_expect *e)
{
    double sq = 0, lo = INFINITY, hi = -INFINITY;
    e->nan = e->inf = 0;
    for (size_t k = 0; k < n; k++) {
        if (isnan(x[k]))
            e->nan++;
        else if (isinf(x[k]))
            e->inf++;
        else {
            sq += (double)x[k] * x[k];
            lo = fmin(lo, x[k]);
            hi = fmax(hi, x[k]);
        }
    }
    e->l2 = sqrt(sq);
    e->min = lo <= hi ? lo : 0;
    e->max = lo <= hi ? hi : 0;
    e->hash = hash_tensor(x, n * sizeof *x);
}

static void tt_check_rec(const struct trace_oprec *r, const float *x, size_t n, const char *what)
{
    struct tt_expect e;
    tt_expect_of(x, n, &e);
    if (r->hash != e.hash || r->nan != e.nan || r->inf != e.inf || r->min != e.min ||
        r->max != e.max || fabs(r->l2 - e.l2) > 1e-12 * e.l2) {
        fprintf(stderr, "%s: record %016llx nan %llu inf %llu min %g max %g l2 %.17g, expected "
                "%016llx %llu %llu %g %g %.17g\n", what, (unsigned long long)r->hash,
                (unsigned long long)r->nan, (unsigned long long)r->inf, r->min, r->max, r->l2,
                (unsigned long long)e.hash, (unsigned long long)e.nan, (unsigned long long)e.inf,
                e.min, e.max, e.l2);
        fail();
    }
}

static int tt_record(divtrace *t, int i, const float *x)
{
    const struct tt *o = &tt_ops[i];
    return divtrace_record(t, o->name, o->type, o->kind, x, DIVTRACE_HOST, NULL, o->ndim, o->shape,
                           o->nin ? o->in : NULL, o->nin);
}

/* Steps s0 .. s0+nsteps-1 of the model; the number of failed calls (no
 * CMocka assertion: threads call it too). */
static int tt_steps(divtrace *t, uint64_t s0, uint64_t nsteps)
{
    int bad = 0;
    for (uint64_t s = s0; s < s0 + nsteps; s++) {
        bad += divtrace_step_begin(t, s) != DIVTRACE_OK;
        for (int i = 0; i < NT; i++) {
            float *x = tt_data(i, s);
            bad += tt_record(t, i, x) != DIVTRACE_OK;
            free(x);
        }
        bad += divtrace_step_end(t, 0.5 + (double)s) != DIVTRACE_OK;
    }
    return bad;
}
#define tt_write_steps(t, s0, n) assert_int_equal(tt_steps(t, s0, n), 0)

static const char *const tt_config[] = {"model", "test", "backend", "c", "seed", "7", NULL};

/* Checkpoint of W (the state before step s). */
static void tt_ckpt(divtrace *t, uint64_t s)
{
    float *w = tt_data(1, s);
    assert_int_equal(divtrace_checkpoint_begin(t, s), DIVTRACE_OK);
    assert_int_equal(divtrace_checkpoint_add(t, "W", w, DIVTRACE_HOST, 2, tt_ops[1].shape), DIVTRACE_OK);
    float m[3] = {1, -2, 3};
    int64_t ms[1] = {3};
    assert_int_equal(divtrace_checkpoint_add(t, "W.m", m, DIVTRACE_HOST, 1, ms), DIVTRACE_OK);
    assert_int_equal(divtrace_checkpoint_end(t), DIVTRACE_OK);
    free(w);
}

/* Every step of a trace against the data, at level `level`. */
static void tt_check_trace(const char *path, uint64_t nsteps, enum trace_level level)
{
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_int_equal(tf->level, level);
    assert_int_equal(tf->nops, NT);
    for (int i = 0; i < NT; i++) {
        const struct trace_opdef *d = &tf->ops[i];
        const struct tt *o = &tt_ops[i];
        assert_string_equal(d->name, o->name);
        assert_string_equal(d->type, o->type);
        assert_int_equal(d->kind, (int)o->kind);
        assert_int_equal(d->ndim, o->ndim);
        for (int k = 0; k < o->ndim; k++)
            assert_int_equal(d->shape[k], o->shape[k]);
        assert_int_equal(d->ninputs, o->nin);
        for (int k = 0; k < o->nin; k++)
            assert_int_equal(d->inputs[k], tt_inputs[i][k]);
    }
    assert_int_equal(tf->nsteps, nsteps);
    for (uint64_t s = 0; s < nsteps; s++) {
        const struct trace_step *st = &tf->steps[s];
        assert_int_equal(st->step, s);
        assert_true(st->loss == 0.5 + (double)s);
        uint8_t le[NT * 8];
        double g2 = 0;
        uint32_t j = 0;
        for (int i = 0; i < NT; i++) {
            float *x = tt_data(i, s);
            size_t n = tt_count(&tt_ops[i]);
            struct tt_expect e;
            tt_expect_of(x, n, &e);
            for (int b = 0; b < 8; b++)
                le[8 * i + b] = (uint8_t)(e.hash >> (8 * b));
            if (tt_ops[i].kind == DIVTRACE_GRAD)
                g2 += e.l2 * e.l2;
            if (trace_level_keeps(level, (enum trace_kind)tt_ops[i].kind)) {
                assert_true(j < st->nrec);
                assert_int_equal(st->rec[j].op, i);
                char what[64];
                snprintf(what, sizeof what, "step %llu op %s", (unsigned long long)s, tt_ops[i].name);
                tt_check_rec(&st->rec[j], x, n, what);
                j++;
            }
            free(x);
        }
        assert_int_equal(st->nrec, j);
        assert_true(fabs(st->grad_norm - sqrt(g2)) <= 1e-12 * sqrt(g2));
        assert_true(st->root == XXH3_64bits(le, sizeof le));
    }
    trace_close(tf);
}

/* ---- tests ---- */

static void test_records(void **state)
{
    (void)state;
    const char *path = tu_path("records.dtr");
    divtrace *t;
    assert_int_equal(divtrace_api_version(), DIVTRACE_API_VERSION);
    assert_int_equal(divtrace_open(&t, path, tt_config, "op"), DIVTRACE_OK);
    tt_ckpt(t, 0); /* before the first step: held until the op list exists */
    tt_write_steps(t, 0, 2);
    tt_ckpt(t, 2);
    tt_write_steps(t, 2, 2);
    tt_ckpt(t, 4);
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);

    tt_check_trace(path, 4, TRACE_LEVEL_OP);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_true(tf->complete);
    assert_int_equal(tf->end_status, 0);
    assert_int_equal(tf->nevents, 0);
    assert_string_equal(trace_config_get(&tf->cfg, "model"), "test");
    assert_string_equal(trace_config_get(&tf->cfg, "seed"), "7");
    assert_int_equal(tf->nckpt, 3);
    static const uint64_t at[3] = {0, 2, 4};
    for (uint32_t c = 0; c < 3; c++) {
        struct trace_ckpt ck;
        assert_int_equal(trace_read_ckpt(tf, c, &ck), 0);
        assert_int_equal(ck.step, at[c]);
        assert_int_equal(ck.ntensors, 2);
        const struct trace_tensor *w = trace_ckpt_find(&ck, "W");
        assert_non_null(w);
        assert_int_equal(w->ndim, 2);
        assert_int_equal(w->shape[0], 5);
        assert_int_equal(w->shape[1], 4);
        assert_int_equal(w->count, 20);
        float *x = tt_data(1, at[c]);
        assert_memory_equal(w->data, x, 20 * sizeof *x);
        free(x);
        const struct trace_tensor *m = trace_ckpt_find(&ck, "W.m");
        assert_non_null(m);
        assert_true(m->count == 3 && m->data[1] == -2.0f);
        trace_ckpt_free(&ck);
    }
    trace_close(tf);
}

/* The same steps with every tensor of a step in one divtrace_record_many
 * call (the first step with inputs, later ones without); a bad tensor in
 * the middle of a call fails the step, which may be begun again. */
static void test_record_many(void **state)
{
    (void)state;
    const char *path = tu_path("many.dtr");
    divtrace *t;
    assert_int_equal(divtrace_open(&t, path, tt_config, "op"), DIVTRACE_OK);
    struct divtrace_tensor ts[NT];
    const float *data[NT];
    float *x[NT];
    for (uint64_t s = 0; s < 4; s++) {
        for (int i = 0; i < NT; i++) {
            const struct tt *o = &tt_ops[i];
            ts[i] = (struct divtrace_tensor){o->name, o->type, o->kind, o->ndim, o->shape,
                                             s == 0 && o->nin ? o->in : NULL, s == 0 ? o->nin : 0};
            data[i] = x[i] = tt_data(i, s);
        }
        assert_int_equal(divtrace_step_begin(t, s), DIVTRACE_OK);
        if (s == 1) {
            /* a NULL name at tensor 5: an error, the step begun again */
            const char *name = ts[5].name;
            ts[5].name = NULL;
            assert_int_equal(divtrace_record_many(t, NT, ts, data, DIVTRACE_HOST, NULL), DIVTRACE_EINVAL);
            assert_non_null(strstr(divtrace_errmsg(t), "divtrace_record_many"));
            ts[5].name = name;
            assert_int_equal(divtrace_record_many(t, -1, ts, data, DIVTRACE_HOST, NULL), DIVTRACE_EINVAL);
            assert_int_equal(divtrace_step_begin(t, s), DIVTRACE_OK);
        }
        /* in two calls, one of no tensors */
        assert_int_equal(divtrace_record_many(t, 4, ts, data, DIVTRACE_HOST, NULL), DIVTRACE_OK);
        assert_int_equal(divtrace_record_many(t, 0, NULL, NULL, DIVTRACE_HOST, NULL), DIVTRACE_OK);
        assert_int_equal(divtrace_record_many(t, NT - 4, ts + 4, data + 4, DIVTRACE_HOST, NULL), DIVTRACE_OK);
        assert_int_equal(divtrace_step_end(t, 0.5 + (double)s), DIVTRACE_OK);
        for (int i = 0; i < NT; i++)
            free(x[i]);
    }
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);
    tt_check_trace(path, 4, TRACE_LEVEL_OP);
}

/* level "param" keeps PARAM, STATE, GRAD and OPTIMIZER records; "step" none;
 * the root and the gradient norm are over every tensor all the same. */
static void test_levels(void **state)
{
    (void)state;
    static const char *const names[] = {"param", "step"};
    static const enum trace_level levels[] = {TRACE_LEVEL_PARAM, TRACE_LEVEL_STEP};
    for (int l = 0; l < 2; l++) {
        const char *path = tu_path(names[l]);
        divtrace *t;
        assert_int_equal(divtrace_open(&t, path, NULL, names[l]), DIVTRACE_OK);
        tt_write_steps(t, 0, 3);
        assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);
        tt_check_trace(path, 3, levels[l]);
    }
}

/* A gradient with a NaN: the step's gradient norm is NaN, as the program's. */
static void test_grad_norm_nonfinite(void **state)
{
    (void)state;
    const char *path = tu_path("gnan.dtr");
    divtrace *t;
    assert_int_equal(divtrace_open(&t, path, NULL, NULL), DIVTRACE_OK);
    float g[2] = {3, 4}, h[2] = {NAN, 1};
    int64_t sh[1] = {2};
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_record(t, "a.grad", "g", DIVTRACE_GRAD, g, DIVTRACE_HOST, NULL, 1, sh, NULL, 0), 0);
    assert_int_equal(divtrace_step_end(t, 1), DIVTRACE_OK);
    assert_int_equal(divtrace_step_begin(t, 1), DIVTRACE_OK);
    assert_int_equal(divtrace_record(t, "a.grad", "g", DIVTRACE_GRAD, h, DIVTRACE_HOST, NULL, 1, sh, NULL, 0), 0);
    assert_int_equal(divtrace_step_end(t, 1), DIVTRACE_OK);
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_true(tf->steps[0].grad_norm == 5.0);
    assert_true(isnan(tf->steps[1].grad_norm));
    trace_close(tf);
}

/* A parameter that is not what its update wrote in the step before (a
 * lossy copy between the steps) is a carry fault: one event, at that step,
 * naming the parameter; and none while the copy is exact. */
static void test_carry_fault(void **state)
{
    (void)state;
    const char *path = tu_path("carry.dtr");
    divtrace *t;
    assert_int_equal(divtrace_open(&t, path, NULL, NULL), DIVTRACE_OK);
    float w[3] = {1.0f, 2.0f, 3.0f}, g[3] = {0.5f, 0.25f, 0.125f}, nw[3];
    int64_t sh[1] = {3};
    const char *win[1] = {"w.update"}, *uin[2] = {"w", "w.grad"};
    for (uint64_t step = 0; step < 4; step++) {
        assert_int_equal(divtrace_step_begin(t, step), DIVTRACE_OK);
        assert_int_equal(divtrace_record(t, "w", "param", DIVTRACE_PARAM, w, DIVTRACE_HOST, NULL, 1, sh, win, 1), 0);
        assert_int_equal(divtrace_record(t, "w.grad", "g", DIVTRACE_GRAD, g, DIVTRACE_HOST, NULL, 1, sh, NULL, 0), 0);
        for (int k = 0; k < 3; k++)
            nw[k] = w[k] - 0.1f * g[k];
        assert_int_equal(divtrace_record(t, "w.update", "sgd", DIVTRACE_OPTIMIZER, nw, DIVTRACE_HOST, NULL, 1, sh,
                                         uin, 2), 0);
        assert_int_equal(divtrace_step_end(t, 1), DIVTRACE_OK);
        memcpy(w, nw, sizeof w);
        if (step == 1) { /* between steps 1 and 2: the low 16 bits of one element lost */
            uint32_t u;
            memcpy(&u, &w[1], sizeof u);
            u &= 0xffff0000u;
            memcpy(&w[1], &u, sizeof u);
        }
    }
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    int found = 0;
    for (uint32_t e = 0; e < tf->nevents; e++)
        if (tf->events[e].code == TRACE_EVENT_CARRY) {
            found++;
            assert_int_equal(tf->events[e].step, 2);
            assert_string_equal(tf->ops[tf->events[e].op].name, "w");
            assert_non_null(strstr(tf->events[e].text, "w is not what w.update wrote in step 1"));
        }
    assert_int_equal(found, 1);
    trace_close(tf);
}

/* What a record of host memory as device memory gets: ENOCUDA without
 * CUDA support or a device, else EINVAL; and a message. */
static void tt_check_nodevice(divtrace *t, int st)
{
#ifdef HAVE_CUDA
    assert_true(st == DIVTRACE_ENOCUDA || st == DIVTRACE_EINVAL);
#else
    assert_int_equal(st, DIVTRACE_ENOCUDA);
    assert_non_null(strstr(divtrace_errmsg(t), "without CUDA"));
#endif
    assert_true(strlen(divtrace_errmsg(t)) > 0);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    divtrace *t = NULL;
    float x[4] = {1, 2, 3, 4};
    int64_t sh[5] = {2, 2, 1, 1, 1}, neg[1] = {-1};
    const char *const in[1] = {"x"}, *const nulin[1] = {NULL};
    /* open */
    assert_int_equal(divtrace_open(NULL, tu_path("a.dtr"), NULL, NULL), DIVTRACE_EINVAL);
    assert_true(strlen(divtrace_errmsg(NULL)) > 0);
    assert_int_equal(divtrace_open(&t, NULL, NULL, NULL), DIVTRACE_EINVAL);
    assert_null(t);
    assert_int_equal(divtrace_open(&t, tu_path("a.dtr"), NULL, "ops"), DIVTRACE_EINVAL);
    assert_non_null(strstr(divtrace_errmsg(NULL), "ops"));
    static const char *const odd[] = {"model", NULL};
    assert_int_equal(divtrace_open(&t, tu_path("a.dtr"), odd, NULL), DIVTRACE_EINVAL);
    assert_non_null(strstr(divtrace_errmsg(NULL), "model"));
    assert_int_equal(divtrace_open(&t, "/nonexistent-dir/x/a.dtr", NULL, NULL), DIVTRACE_EIO);
    assert_non_null(strstr(divtrace_errmsg(NULL), "/nonexistent-dir/x/a.dtr"));
    assert_null(t);
    /* NULL handles */
    assert_int_equal(divtrace_step_begin(NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_record(NULL, "x", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, NULL, 1, sh, NULL, 0),
                     DIVTRACE_EINVAL);
    assert_int_equal(divtrace_step_end(NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_checkpoint_begin(NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_checkpoint_add(NULL, "x", x, DIVTRACE_HOST, 1, sh), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_checkpoint_end(NULL), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_flush(NULL), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_close(NULL, 0, NULL), DIVTRACE_EINVAL);

    assert_int_equal(divtrace_open(&t, tu_path("a.dtr"), NULL, NULL), DIVTRACE_OK);
    /* out of order */
    assert_int_equal(divtrace_record(t, "x", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, NULL, 1, sh, NULL, 0),
                     DIVTRACE_ESTATE);
    assert_non_null(strstr(divtrace_errmsg(t), "outside a step"));
    assert_int_equal(divtrace_step_end(t, 0), DIVTRACE_ESTATE);
    assert_int_equal(divtrace_checkpoint_add(t, "x", x, DIVTRACE_HOST, 1, sh), DIVTRACE_ESTATE);
    assert_int_equal(divtrace_checkpoint_end(t), DIVTRACE_ESTATE);
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_ESTATE); /* not ended, no error */
    assert_int_equal(divtrace_checkpoint_begin(t, 0), DIVTRACE_ESTATE);
    /* bad records */
#define REC(name, type, kind, data, where, ndim, shape, in, nin) \
    divtrace_record(t, name, type, kind, data, where, NULL, ndim, shape, in, nin)
    assert_int_equal(REC(NULL, "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(REC("", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(REC("x", NULL, DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(REC("x", "t", (enum divtrace_kind)7, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(REC("x", "t", (enum divtrace_kind)-1, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(REC("x", "t", DIVTRACE_INPUT, x, (enum divtrace_where)3, 1, sh, NULL, 0), DIVTRACE_EINVAL);
    assert_non_null(strstr(divtrace_errmsg(t), "unknown where 3"));
    assert_int_equal(REC("x", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 0, sh, NULL, 0), DIVTRACE_EINVAL);
    assert_non_null(strstr(divtrace_errmsg(t), "ndim 0"));
    assert_int_equal(REC("x", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 5, sh, NULL, 0), DIVTRACE_EINVAL);
    assert_non_null(strstr(divtrace_errmsg(t), "ndim 5"));
    assert_int_equal(REC("x", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, NULL, NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(REC("x", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, neg, NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(REC("x", "t", DIVTRACE_INPUT, NULL, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(REC("x", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, NULL, 1), DIVTRACE_EINVAL);
    assert_int_equal(REC("x", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, in, -1), DIVTRACE_EINVAL);
    assert_int_equal(REC("x", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, nulin, 1), DIVTRACE_EINVAL);
    /* a device pointer: no CUDA support compiled in, or no device here, or
     * (on a GPU machine) host memory passed as device memory */
    tt_check_nodevice(t, REC("x", "t", DIVTRACE_INPUT, x, DIVTRACE_DEVICE, 1, sh, NULL, 0));
    /* the same, deferred: refused when recorded, not at a later flush */
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    tt_check_nodevice(t, REC("x", "t", DIVTRACE_INPUT, x, DIVTRACE_DEVICE_DEFERRED, 1, sh, NULL, 0));
    assert_int_equal(divtrace_flush(t), DIVTRACE_OK); /* nothing deferred */
    /* an error in the step: it may be begun again, and then works */
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    assert_int_equal(REC("x", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_OK);
    assert_int_equal(REC("x", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_EINVAL);
    assert_non_null(strstr(divtrace_errmsg(t), "twice"));
    assert_int_equal(REC("y", "t", DIVTRACE_FORWARD, x, DIVTRACE_HOST, 2, sh, in, 1), DIVTRACE_OK);
    assert_int_equal(divtrace_flush(t), DIVTRACE_OK); /* host records only: nothing to do */
    assert_int_equal(divtrace_step_end(t, 1), DIVTRACE_OK);
    assert_int_equal(divtrace_flush(t), DIVTRACE_OK); /* between steps */
    /* steps go up */
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_ESTATE);
    assert_int_equal(divtrace_checkpoint_begin(t, 0), DIVTRACE_ESTATE);
    /* checkpoints */
    assert_int_equal(divtrace_checkpoint_begin(t, 1), DIVTRACE_OK);
    assert_int_equal(divtrace_checkpoint_begin(t, 1), DIVTRACE_ESTATE);
    assert_int_equal(divtrace_step_begin(t, 1), DIVTRACE_ESTATE);
    assert_int_equal(divtrace_checkpoint_add(t, NULL, x, DIVTRACE_HOST, 1, sh), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_checkpoint_add(t, "x", x, DIVTRACE_HOST, 5, sh), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_checkpoint_add(t, "x", NULL, DIVTRACE_HOST, 1, sh), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_checkpoint_add(t, "x", x, DIVTRACE_HOST, 1, sh), DIVTRACE_OK);
    assert_int_equal(divtrace_checkpoint_add(t, "x", x, DIVTRACE_HOST, 1, sh), DIVTRACE_EINVAL);
    tt_check_nodevice(t, divtrace_checkpoint_add(t, "z", x, DIVTRACE_DEVICE, 1, sh));
    assert_int_equal(divtrace_checkpoint_end(t), DIVTRACE_OK);
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);

    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, tu_path("a.dtr")), 0);
    assert_int_equal(tf->nops, 2);
    assert_int_equal(tf->nsteps, 1);
    assert_int_equal(tf->nckpt, 1);
    trace_close(tf);

    for (int s = 0; s >= -8; s--)
        assert_true(strlen(divtrace_strerror(s)) > 0);
    assert_string_equal(divtrace_strerror(-100), "unknown status");
}

/* Later steps must record the first step's tensors in its order. */
static void test_ops_mismatch(void **state)
{
    (void)state;
    divtrace *t;
    float x[4] = {1, 2, 3, 4};
    int64_t sh[1] = {4}, sh2[1] = {2};
    assert_int_equal(divtrace_open(&t, tu_path("ops.dtr"), NULL, NULL), DIVTRACE_OK);
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    assert_int_equal(REC("a", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_OK);
    assert_int_equal(REC("b", "t", DIVTRACE_FORWARD, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_step_end(t, 0), DIVTRACE_OK);
    /* another name */
    assert_int_equal(divtrace_step_begin(t, 1), DIVTRACE_OK);
    assert_int_equal(REC("a", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_OK);
    assert_int_equal(REC("c", "t", DIVTRACE_FORWARD, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_EOPS);
    assert_non_null(strstr(divtrace_errmsg(t), "'c'"));
    assert_non_null(strstr(divtrace_errmsg(t), "'b'"));
    /* another shape, kind, type */
    assert_int_equal(REC("b", "t", DIVTRACE_FORWARD, x, DIVTRACE_HOST, 1, sh2, NULL, 0), DIVTRACE_EOPS);
    assert_non_null(strstr(divtrace_errmsg(t), "shape 2, but 4"));
    assert_int_equal(REC("b", "t", DIVTRACE_BACKWARD, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_EOPS);
    assert_int_equal(REC("b", "u", DIVTRACE_FORWARD, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_EOPS);
    /* too few */
    assert_int_equal(divtrace_step_end(t, 0), DIVTRACE_EOPS);
    assert_non_null(strstr(divtrace_errmsg(t), "'b'"));
    /* too many */
    assert_int_equal(divtrace_step_begin(t, 1), DIVTRACE_OK);
    assert_int_equal(REC("a", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_OK);
    assert_int_equal(REC("b", "t", DIVTRACE_FORWARD, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_OK);
    assert_int_equal(REC("c", "t", DIVTRACE_FORWARD, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_EOPS);
    assert_non_null(strstr(divtrace_errmsg(t), "'c'"));
    assert_int_equal(divtrace_step_end(t, 0), DIVTRACE_OK); /* the step as it matched */
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);
}

/* An input name recorded nowhere in the first step. */
static void test_unknown_input(void **state)
{
    (void)state;
    divtrace *t;
    float x[4] = {1, 2, 3, 4};
    int64_t sh[1] = {4};
    const char *const in[2] = {"a", "nowhere"};
    const char *path = tu_path("unknown.dtr");
    assert_int_equal(divtrace_open(&t, path, NULL, NULL), DIVTRACE_OK);
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    assert_int_equal(REC("a", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_OK);
    assert_int_equal(REC("b", "t", DIVTRACE_FORWARD, x, DIVTRACE_HOST, 1, sh, in, 2), DIVTRACE_OK);
    assert_int_equal(divtrace_step_end(t, 0), DIVTRACE_EINVAL);
    assert_non_null(strstr(divtrace_errmsg(t), "'nowhere' (input of 'b')"));
    /* begun again with the input fixed */
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    assert_int_equal(REC("a", "t", DIVTRACE_INPUT, x, DIVTRACE_HOST, 1, sh, NULL, 0), DIVTRACE_OK);
    assert_int_equal(REC("b", "t", DIVTRACE_FORWARD, x, DIVTRACE_HOST, 1, sh, in, 1), DIVTRACE_OK);
    assert_int_equal(divtrace_step_end(t, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_int_equal(tf->nops, 2);
    assert_int_equal(tf->ops[1].ninputs, 1);
    assert_int_equal(tf->ops[1].inputs[0], 0);
    trace_close(tf);
}

/* A write that fails comes back as EIO with the writer's message. */
static void test_write_failure(void **state)
{
    (void)state;
    FILE *probe = fopen("/dev/full", "w");
    if (!probe)
        skip();
    fclose(probe);
    divtrace *t;
    assert_int_equal(divtrace_open(&t, "/dev/full", NULL, NULL), DIVTRACE_EIO);
    assert_non_null(strstr(divtrace_errmsg(NULL), "/dev/full"));
}

/* divtrace_step_end_device and _async without a GPU (or with host memory on one): a
 * clear status, the step then ended with the loss as a number. */
static void test_loss_on_device_refused(void **state)
{
    (void)state;
    const char *path = tu_path("dloss.dtr");
    divtrace *t;
    float loss = 0.25f;
    assert_int_equal(divtrace_open(&t, path, tt_config, NULL), DIVTRACE_OK);
    tt_write_steps(t, 0, 1);
    assert_int_equal(divtrace_step_begin(t, 1), DIVTRACE_OK);
    for (int i = 0; i < NT; i++) {
        float *x = tt_data(i, 1);
        assert_int_equal(tt_record(t, i, x), DIVTRACE_OK);
        free(x);
    }
    assert_int_equal(divtrace_step_end_device(t, NULL, NULL), DIVTRACE_EINVAL);
    int rc = divtrace_step_end_device(t, &loss, NULL);
    assert_true(rc == DIVTRACE_ENOCUDA || rc == DIVTRACE_EINVAL);
    assert_non_null(strstr(divtrace_errmsg(t), "the loss"));
    /* the same without a wait: refused alike, nothing left pending */
    assert_int_equal(divtrace_step_end_async(t, NULL, NULL), DIVTRACE_EINVAL);
    rc = divtrace_step_end_async(t, &loss, NULL);
    assert_true(rc == DIVTRACE_ENOCUDA || rc == DIVTRACE_EINVAL);
    assert_non_null(strstr(divtrace_errmsg(t), "the loss"));
    assert_int_equal(tt_steps(t, 1, 2), 0);
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);
    tt_check_trace(path, 3, TRACE_LEVEL_OP);
}

/* A step's write that fails on the writer's thread (here the file may
 * grow no further: RLIMIT_FSIZE) is reported by the next call that writes
 * (divtrace_sync, a step's end, the close), not by the step's own end; the
 * file stays readable up to the step before. */
static void test_late_write_failure(void **state)
{
    (void)state;
    const char *path = tu_path("fsize.dtr");
    struct rlimit old, lim;
    struct stat st;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    divtrace *t;
    assert_int_equal(divtrace_open(&t, path, tt_config, NULL), DIVTRACE_OK);
    tt_write_steps(t, 0, 2);
    assert_int_equal(divtrace_sync(t), DIVTRACE_OK);
    assert_int_equal(stat(path, &st), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)st.st_size;
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
        signal(SIGXFSZ, was);
        divtrace_close(t, 0, NULL);
        skip();
    }
    int end = tt_steps(t, 2, 1); /* its write is queued: the end itself succeeds */
    int sync = divtrace_sync(t);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", divtrace_errmsg(t));
    int again = tt_steps(t, 3, 1);
    int closed = divtrace_close(t, 0, NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, was);
    assert_int_equal(end, 0);
    assert_int_equal(sync, DIVTRACE_EIO);
    assert_non_null(strstr(msg, "write failed"));
    assert_true(again > 0);
    assert_int_equal(closed, DIVTRACE_EIO);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_false(tf->complete);
    assert_int_equal(tf->nsteps, 2);
    trace_close(tf);
}

/* Closed with a nonzero status: a STOPPED event, the end status kept;
 * never closed: a prefix readable up to the last step. */
static void test_early_end(void **state)
{
    (void)state;
    const char *path = tu_path("stopped.dtr");
    divtrace *t;
    assert_int_equal(divtrace_open(&t, path, tt_config, NULL), DIVTRACE_OK);
    tt_write_steps(t, 0, 3);
    /* while the trace is open, a reader sees the steps so far once
     * divtrace_sync returns (the last one's write is the writer thread's) */
    assert_int_equal(divtrace_sync(t), DIVTRACE_OK);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_false(tf->complete);
    assert_int_equal(tf->nsteps, 3);
    assert_non_null(strstr(tf->note, "cut short after step 2"));
    trace_close(tf);
    tt_check_trace(path, 3, TRACE_LEVEL_OP);
    /* a step half done, then the run gives up */
    assert_int_equal(divtrace_step_begin(t, 3), DIVTRACE_OK);
    float *x = tt_data(0, 3);
    assert_int_equal(tt_record(t, 0, x), DIVTRACE_OK);
    free(x);
    assert_int_equal(divtrace_close(t, 3, "loss is NaN"), DIVTRACE_OK);
    assert_int_equal(trace_open(&tf, path), 0);
    assert_true(tf->complete);
    assert_int_equal(tf->end_status, 3);
    assert_int_equal(tf->nsteps, 3);
    assert_int_equal(tf->nevents, 1);
    assert_int_equal(tf->events[0].code, TRACE_EVENT_STOPPED);
    assert_string_equal(tf->events[0].text, "loss is NaN");
    trace_close(tf);

    /* closed before any step ended: readable, no ops, no steps */
    path = tu_path("nostep.dtr");
    assert_int_equal(divtrace_open(&t, path, NULL, NULL), DIVTRACE_OK);
    tt_ckpt(t, 0);
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    x = tt_data(0, 0);
    assert_int_equal(tt_record(t, 0, x), DIVTRACE_OK);
    free(x);
    assert_int_equal(divtrace_close(t, 1, NULL), DIVTRACE_OK);
    assert_int_equal(trace_open(&tf, path), 0);
    assert_int_equal(tf->nops, 0);
    assert_int_equal(tf->nsteps, 0);
    assert_int_equal(tf->nckpt, 1);
    assert_int_equal(tf->end_status, 1);
    assert_int_equal(tf->nevents, 1);
    assert_non_null(strstr(tf->events[0].text, "status 1"));
    trace_close(tf);
}

/* ---- threads ---- */

struct tt_job {
    divtrace *t;
    const char *path;
    int who;
    int bad;                 /* failed calls */
};

static void *tt_own_trace(void *arg)
{
    struct tt_job *j = arg;
    divtrace *t;
    if (divtrace_open(&t, j->path, tt_config, "op") != DIVTRACE_OK) {
        j->bad = 1;
        return NULL;
    }
    j->bad = tt_steps(t, 0, 20);
    j->bad += divtrace_close(t, 0, NULL) != DIVTRACE_OK;
    return NULL;
}

static void test_two_threads_two_traces(void **state)
{
    (void)state;
    pthread_t th[2];
    struct tt_job j[2] = {{NULL, tu_path("thread0.dtr"), 0, 0}, {NULL, tu_path("thread1.dtr"), 1, 0}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, tt_own_trace, &j[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(j[0].bad + j[1].bad, 0);
    tt_check_trace(j[0].path, 20, TRACE_LEVEL_OP);
    tt_check_trace(j[1].path, 20, TRACE_LEVEL_OP);
}

/* Both threads add to one checkpoint at once, then take turns with steps
 * (even steps one thread, odd the other). */
static pthread_mutex_t tt_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tt_cv = PTHREAD_COND_INITIALIZER;
static int tt_turn, tt_added;

static void *tt_shared(void *arg)
{
    struct tt_job *j = arg;
    for (int k = 0; k < 50; k++) {
        char name[32];
        float v[3] = {(float)j->who, (float)k, 0};
        int64_t sh[1] = {3};
        snprintf(name, sizeof name, "t%d.%d", j->who, k);
        j->bad += divtrace_checkpoint_add(j->t, name, v, DIVTRACE_HOST, 1, sh) != DIVTRACE_OK;
        j->bad += strlen(divtrace_strerror(DIVTRACE_EOPS)) == 0;
    }
    pthread_mutex_lock(&tt_mu);
    tt_added++;
    pthread_cond_broadcast(&tt_cv);
    pthread_mutex_unlock(&tt_mu);
    for (uint64_t s = (uint64_t)j->who; s < 20; s += 2) {
        pthread_mutex_lock(&tt_mu);
        while (tt_turn != (int)s)
            pthread_cond_wait(&tt_cv, &tt_mu);
        pthread_mutex_unlock(&tt_mu);
        j->bad += tt_steps(j->t, s, 1);
        pthread_mutex_lock(&tt_mu);
        tt_turn++;
        pthread_cond_broadcast(&tt_cv);
        pthread_mutex_unlock(&tt_mu);
    }
    return NULL;
}

static void test_two_threads_one_trace(void **state)
{
    (void)state;
    const char *path = tu_path("shared.dtr");
    divtrace *t;
    assert_int_equal(divtrace_open(&t, path, tt_config, "op"), DIVTRACE_OK);
    assert_int_equal(divtrace_checkpoint_begin(t, 0), DIVTRACE_OK);
    pthread_t th[2];
    struct tt_job j[2] = {{t, path, 0, 0}, {t, path, 1, 0}};
    tt_turn = -1; /* no step before the checkpoint has ended */
    tt_added = 0;
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, tt_shared, &j[i]), 0);
    pthread_mutex_lock(&tt_mu);
    while (tt_added < 2)
        pthread_cond_wait(&tt_cv, &tt_mu);
    pthread_mutex_unlock(&tt_mu);
    assert_int_equal(divtrace_checkpoint_end(t), DIVTRACE_OK);
    pthread_mutex_lock(&tt_mu);
    tt_turn = 0;
    pthread_cond_broadcast(&tt_cv);
    pthread_mutex_unlock(&tt_mu);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(j[0].bad + j[1].bad, 0);
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);
    tt_check_trace(path, 20, TRACE_LEVEL_OP);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_int_equal(tf->nckpt, 1);
    struct trace_ckpt ck;
    assert_int_equal(trace_read_ckpt(tf, 0, &ck), 0);
    assert_int_equal(ck.ntensors, 100);
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < 50; k++) {
            char name[32];
            snprintf(name, sizeof name, "t%d.%d", w, k);
            const struct trace_tensor *x = trace_ckpt_find(&ck, name);
            assert_non_null(x);
            assert_true(x->data[0] == (float)w && x->data[1] == (float)k);
        }
    trace_ckpt_free(&ck);
    trace_close(tf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records),
        cmocka_unit_test(test_record_many),
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_grad_norm_nonfinite),
        cmocka_unit_test(test_carry_fault),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_ops_mismatch),
        cmocka_unit_test(test_unknown_input),
        cmocka_unit_test(test_write_failure),
        cmocka_unit_test(test_early_end),
        cmocka_unit_test(test_late_write_failure),
        cmocka_unit_test(test_loss_on_device_refused),
        cmocka_unit_test(test_two_threads_two_traces),
        cmocka_unit_test(test_two_threads_one_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
