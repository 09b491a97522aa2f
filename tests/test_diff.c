/* test_diff.c: diff_traces on traces whose graphs differ: ops matched by
 * name, the first op-definition difference and its text, records still
 * compared past an inserted op, and origins found by name. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diff.h"
#include "test_util.h"
#include "trace.h"
#include "util.h"

#define PREV TRACE_INPUT_PREV
#define NSTEPS 4
#define MAXOPS 16

/* ---- a small graph, and traces of it written through the writer API ---- */

/* A: an encoder layer, a recurrent cell's first time step, a loss and an
 * update that feeds the next step's weight. */
static uint32_t a_w[] = {8 | PREV}, a_mm[] = {0, 1}, a_th[] = {2}, a_c[] = {3, 4}, a_tc[] = {5},
                a_loss[] = {6}, a_up[] = {1, 7};
static const struct trace_opdef graph_a[] = {
    {"data.x", "input", TRACE_KIND_INPUT, 2, {4, 8, 0, 0}, 0, NULL},
    {"enc1.W", "param", TRACE_KIND_PARAM, 2, {8, 3, 0, 0}, 1, a_w},
    {"enc1.matmul", "matmul", TRACE_KIND_FORWARD, 2, {4, 3, 0, 0}, 2, a_mm},
    {"enc1.tanh", "tanh", TRACE_KIND_FORWARD, 2, {4, 3, 0, 0}, 1, a_th},
    {"L2.init.c", "input", TRACE_KIND_INPUT, 2, {4, 3, 0, 0}, 0, NULL},
    {"L2.t00.c", "add", TRACE_KIND_FORWARD, 2, {4, 3, 0, 0}, 2, a_c},
    {"L2.t00.tanh_c", "tanh", TRACE_KIND_FORWARD, 2, {4, 3, 0, 0}, 1, a_tc},
    {"loss", "mse", TRACE_KIND_FORWARD, 0, {0, 0, 0, 0}, 1, a_loss},
    {"enc1.W.update", "sgd", TRACE_KIND_OPTIMIZER, 2, {8, 3, 0, 0}, 2, a_up},
};
#define NA (sizeof graph_a / sizeof graph_a[0])

/* Which ops of B hold other values than A's, from which step on. */
struct diverge {
    uint64_t from;
    const char *names[8];
};

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

/* The record of op `name` at step `step`: a pure function of the two, xor
 * a constant where `dv` says B computes something else there. */
static void make_rec(struct trace_oprec *r, uint32_t op, const char *name, uint64_t step,
                     const struct diverge *dv, int ndv)
{
    uint64_t s = name_hash(name) ^ (step * 0x9e3779b97f4a7c15u);
    memset(r, 0, sizeof *r);
    r->op = op;
    r->hash = tu_rand_u64(&s);
    for (int k = 0; k < ndv; k++)
        for (int q = 0; dv[k].names[q]; q++)
            if (step >= dv[k].from && strcmp(dv[k].names[q], name) == 0)
                r->hash ^= 0x5555aaaa5555aaaau;
    r->l2 = 1.0;
    r->max = 1.0;
    for (int k = 0; k < TRACE_SKETCH_LEN; k++)
        r->sketch[k] = (float)((r->hash >> (2 * k)) & 0xff) / 256.0f;
}

/* A checkpoint before step `step` holding enc1.W (when the graph has it in
 * 8x3), element 0 off by `bump`. */
static void write_ckpt(struct trace_writer *w, uint64_t step, float bump)
{
    float data[24];
    for (int k = 0; k < 24; k++)
        data[k] = (float)k * 0.25f;
    data[0] += bump;
    struct trace_tensor t = {"enc1.W", 2, {8, 3, 0, 0}, 24, data};
    struct trace_ckpt c = {step, step, 1, step, 1, &t};
    assert_int_equal(trace_writer_ckpt(w, &c), 0);
}

/* Write a trace of `ops` for NSTEPS steps (level op, every record), with
 * checkpoints before steps 0 and 3 when `ckpt`, and open it. */
static struct trace_file *write_trace(const char *file, const struct trace_opdef *ops, uint32_t nops,
                                      const struct diverge *dv, int ndv, int ckpt)
{
    const char *path = tu_path(file);
    struct trace_config cfg = {0};
    trace_config_set(&cfg, "model", "test");
    struct trace_writer *w;
    assert_int_equal(trace_writer_open(&w, path, &cfg, TRACE_LEVEL_OP), 0);
    trace_config_free(&cfg);
    assert_int_equal(trace_writer_ops(w, ops, nops), 0);
    for (uint64_t i = 0; i < NSTEPS; i++) {
        if (ckpt && (i == 0 || i == 3))
            write_ckpt(w, i, i == 3 && ndv ? 0.5f : 0.0f);
        struct trace_oprec rec[MAXOPS];
        uint64_t root = 0;
        for (uint32_t j = 0; j < nops; j++) {
            make_rec(&rec[j], j, ops[j].name, i, dv, ndv);
            root = root * 31 + rec[j].hash;
        }
        struct trace_step s = {i, 1.0 / (double)(i + 1), 1.0, root, nops, rec};
        assert_int_equal(trace_writer_step(w, &s), 0);
    }
    assert_int_equal(trace_writer_close(w, 0), 0);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    return tf;
}

/* A's op of a name. */
static int op_of(const struct trace_file *tf, const char *name)
{
    for (uint32_t i = 0; i < tf->nops; i++)
        if (strcmp(tf->ops[i].name, name) == 0)
            return (int)i;
    fail_msg("no op %s", name);
    return -1;
}

static void check_origins(const struct diff_result *r, const struct trace_file *a,
                          const char *const *want, int nwant)
{
    assert_int_equal(r->norigins, nwant);
    for (int k = 0; k < nwant; k++)
        assert_string_equal(a->ops[r->origins[k]].name, want[k]);
}

/* ---- the tests ---- */

/* The same graph twice: nothing differs, and one planted difference is
 * found as before (the by-name path must not change the common case). */
static void test_same_graph(void **state)
{
    (void)state;
    struct trace_file *a = write_trace("same-a.dtr", graph_a, NA, NULL, 0, 1);
    struct trace_file *b = write_trace("same-b.dtr", graph_a, NA, NULL, 0, 1);
    struct diff_result r;
    assert_int_equal(diff_traces(a, b, &r), 0);
    assert_true(r.ops_match);
    assert_int_equal(r.nopdiffs, 0);
    assert_string_equal(r.opdiff, "");
    assert_int_equal(r.opdiff_a, -1);
    assert_int_equal(r.opdiff_b, -1);
    assert_false(r.diverged);
    for (uint32_t i = 0; i < NA; i++) {
        assert_int_equal(r.a_to_b[i], (int32_t)i);
        assert_int_equal(r.a_changed[i], 0);
    }
    diff_result_free(&r);
    trace_close(b);

    static const struct diverge dv[] = {{1, {"enc1.matmul", "enc1.tanh", "L2.t00.c", NULL}}};
    b = write_trace("same-c.dtr", graph_a, NA, dv, 1, 1);
    assert_int_equal(diff_traces(a, b, &r), 0);
    assert_true(r.ops_match);
    assert_true(r.diverged);
    assert_true(r.values_differ);
    assert_int_equal(r.first_step, 1);
    assert_int_equal(r.first_op, op_of(a, "enc1.matmul"));
    static const char *const want[] = {"enc1.matmul"};
    check_origins(&r, a, want, 1);
    assert_false(r.origins_partial);
    diff_result_free(&r);
    trace_close(a);
    trace_close(b);
}

/* (1) One rewired input: L2.t00.tanh_c reads L2.init.c instead of
 * L2.t00.c. It is a graph difference, and, its output changed while both
 * its old and its new input are equal, the origin of the divergence. */
static void test_rewired_input(void **state)
{
    (void)state;
    struct trace_opdef gb[NA];
    memcpy(gb, graph_a, sizeof gb);
    static uint32_t b_tc[] = {4};
    gb[6].inputs = b_tc;
    static const struct diverge dv[] = {{0, {"L2.t00.tanh_c", "loss", "enc1.W.update", NULL}},
                                        {1, {"enc1.W", "enc1.matmul", "enc1.tanh", "L2.t00.c", NULL}}};
    struct trace_file *a = write_trace("rewire-a.dtr", graph_a, NA, NULL, 0, 0);
    struct trace_file *b = write_trace("rewire-b.dtr", gb, NA, dv, 2, 0);
    struct diff_result r;
    assert_int_equal(diff_traces(a, b, &r), 0);
    assert_false(r.ops_match);
    assert_int_equal(r.ops_mismatch_at, 6);
    assert_int_equal(r.nopdiffs, 1);
    assert_int_equal(r.opdiff_a, 6);
    assert_int_equal(r.opdiff_b, 6);
    assert_string_equal(r.opdiff, "L2.t00.tanh_c: input 0 L2.t00.c became L2.init.c");
    for (uint32_t i = 0; i < NA; i++) {
        assert_int_equal(r.a_to_b[i], (int32_t)i);
        assert_int_equal(r.a_changed[i], i == 6);
    }
    assert_true(r.diverged);
    assert_true(r.values_differ);
    assert_false(r.values_unknown);
    assert_int_equal(r.first_step, 0);
    assert_int_equal(r.first_op, 6);
    static const char *const want[] = {"L2.t00.tanh_c"};
    check_origins(&r, a, want, 1);
    assert_false(r.origins_partial);
    diff_result_free(&r);

    /* the new input differs too (an initial state that B sets otherwise):
     * the divergence is born there and carried into the rewired op */
    trace_close(b);
    static const struct diverge dv2[] = {
        {0, {"L2.init.c", "L2.t00.c", "L2.t00.tanh_c", "loss", "enc1.W.update", NULL}}};
    b = write_trace("rewire-d.dtr", gb, NA, dv2, 1, 0);
    assert_int_equal(diff_traces(a, b, &r), 0);
    assert_int_equal(r.first_step, 0);
    assert_int_equal(r.first_op, 4);
    static const char *const want2[] = {"L2.init.c"};
    check_origins(&r, a, want2, 1);
    diff_result_free(&r);

    /* the same wiring, and no value changed: only the op lists differ */
    trace_close(b);
    b = write_trace("rewire-c.dtr", gb, NA, NULL, 0, 0);
    assert_int_equal(diff_traces(a, b, &r), 0);
    assert_false(r.ops_match);
    assert_int_equal(r.nopdiffs, 1);
    assert_true(r.diverged);
    assert_false(r.values_differ);
    assert_int_equal(r.first_op, -1);
    assert_int_equal(r.norigins, 0);
    diff_result_free(&r);
    trace_close(a);
    trace_close(b);
}

/* (2) An op only in B, in the middle: the ops after it still compare by
 * name, and a divergence planted at step 2 in L2.t00.c is found there. */
static void test_inserted_op(void **state)
{
    (void)state;
    static uint32_t b_w[] = {9 | PREV}, b_mm2[] = {3}, b_c[] = {3, 5}, b_tc[] = {6},
                    b_loss[] = {7}, b_up[] = {1, 8};
    struct trace_opdef gb[] = {
        graph_a[0], graph_a[1], graph_a[2], graph_a[3],
        {"enc2.matmul", "matmul", TRACE_KIND_FORWARD, 2, {4, 3, 0, 0}, 1, b_mm2},
        graph_a[4], graph_a[5], graph_a[6], graph_a[7], graph_a[8],
    };
    gb[1].inputs = b_w;
    gb[6].inputs = b_c;
    gb[7].inputs = b_tc;
    gb[8].inputs = b_loss;
    gb[9].inputs = b_up;
    uint32_t nb = sizeof gb / sizeof gb[0];
    static const struct diverge dv[] = {{2, {"L2.t00.c", "L2.t00.tanh_c", "loss", "enc1.W.update", NULL}},
                                        {3, {"enc1.W", "enc1.matmul", "enc1.tanh", "enc2.matmul", NULL}}};
    struct trace_file *a = write_trace("insert-a.dtr", graph_a, NA, NULL, 0, 1);
    struct trace_file *b = write_trace("insert-b.dtr", gb, nb, dv, 2, 1);
    struct diff_result r;
    assert_int_equal(diff_traces(a, b, &r), 0);
    assert_false(r.ops_match);
    assert_int_equal(r.nopdiffs, 1);
    assert_int_equal(r.opdiff_a, -1);
    assert_int_equal(r.opdiff_b, 4);
    assert_string_equal(r.opdiff, "enc2.matmul: only in B");
    assert_int_equal(r.a_to_b[op_of(a, "L2.t00.c")], 6);
    assert_int_equal(r.b_to_a[4], -1);
    assert_int_equal(r.b_to_a[6], op_of(a, "L2.t00.c"));
    for (uint32_t i = 0; i < NA; i++)
        assert_int_equal(r.a_changed[i], 0); /* enc1.W reads the update by name still */
    assert_true(r.diverged);
    assert_true(r.values_differ);
    assert_int_equal(r.first_step, 2);
    assert_int_equal(r.first_op, op_of(a, "L2.t00.c"));
    static const char *const want[] = {"L2.t00.c"};
    check_origins(&r, a, want, 1);
    assert_false(r.origins_partial);
    /* the timeline compares enc1.W by name: equal before step 0, not before 3 */
    assert_int_equal(r.npoints, 2);
    assert_int_equal(r.points[0].step, 0);
    assert_true(r.points[0].dist == 0);
    assert_int_equal(r.points[1].step, 3);
    assert_true(r.points[1].dist > 0);
    assert_true(r.sketch_ok);
    assert_int_equal(r.cross_sketch[0], 3);
    diff_result_free(&r);
    trace_close(b);

    /* B's new op is consumed: L2.t00.c reads enc2.matmul instead of
     * enc1.tanh. enc2.matmul exists in B only, and its own input is equal,
     * so the divergence enters the ops both hold at L2.t00.c: its origin. */
    static uint32_t b_c2[] = {4, 5};
    gb[6].inputs = b_c2;
    static const struct diverge dv2[] = {{0, {"L2.t00.c", "L2.t00.tanh_c", "loss", "enc1.W.update", NULL}}};
    b = write_trace("insert-c.dtr", gb, nb, dv2, 1, 0);
    assert_int_equal(diff_traces(a, b, &r), 0);
    assert_int_equal(r.nopdiffs, 2);
    assert_int_equal(r.opdiff_a, -1);
    assert_int_equal(r.opdiff_b, 4);
    assert_string_equal(r.opdiff, "enc2.matmul: only in B");
    assert_int_equal(r.a_changed[op_of(a, "L2.t00.c")], 1);
    char buf[256];
    diff_opdef_describe(a, (uint32_t)op_of(a, "L2.t00.c"), b, 6, buf, sizeof buf);
    assert_string_equal(buf, "L2.t00.c: input 0 enc1.tanh became enc2.matmul");
    assert_int_equal(r.first_step, 0);
    assert_int_equal(r.first_op, op_of(a, "L2.t00.c"));
    check_origins(&r, a, want, 1);
    diff_result_free(&r);
    trace_close(a);
    trace_close(b);
}

/* (3) A changed shape: enc1 is 6 wide in B. Every op of that width is a
 * definition difference; the weight, a leaf, is the origin, and the
 * records of other shapes give no relative L2 difference. */
static void test_changed_shape(void **state)
{
    (void)state;
    struct trace_opdef gb[NA];
    memcpy(gb, graph_a, sizeof gb);
    gb[1].shape[1] = gb[2].shape[1] = gb[3].shape[1] = gb[8].shape[1] = 6;
    static const struct diverge dv[] = {
        {0, {"enc1.W", "enc1.matmul", "enc1.tanh", "L2.t00.c", "L2.t00.tanh_c", "loss", "enc1.W.update", NULL}}};
    struct trace_file *a = write_trace("shape-a.dtr", graph_a, NA, NULL, 0, 0);
    struct trace_file *b = write_trace("shape-b.dtr", gb, NA, dv, 1, 0);
    struct diff_result r;
    assert_int_equal(diff_traces(a, b, &r), 0);
    assert_false(r.ops_match);
    assert_int_equal(r.nopdiffs, 4);
    assert_int_equal(r.opdiff_a, 1);
    assert_int_equal(r.opdiff_b, 1);
    assert_string_equal(r.opdiff, "enc1.W: shape 8x3 became 8x6");
    assert_true(r.values_differ);
    assert_int_equal(r.first_step, 0);
    assert_int_equal(r.first_op, 1);
    assert_true(isnan(r.rel_l2));
    static const char *const want[] = {"enc1.W"};
    check_origins(&r, a, want, 1);
    diff_result_free(&r);
    trace_close(a);
    trace_close(b);
}

/* The text of other kinds of definition difference. */
static void test_describe(void **state)
{
    (void)state;
    struct trace_opdef gb[NA];
    memcpy(gb, graph_a, sizeof gb);
    gb[3].type = "sigmoid";
    static uint32_t b_w[] = {7 | PREV}, b_loss[] = {6, 5};
    gb[1].inputs = b_w;
    gb[7].inputs = b_loss;
    gb[7].ninputs = 2;
    gb[8].kind = TRACE_KIND_GRAD;
    gb[7].ndim = 1;
    gb[7].shape[0] = 1;
    struct trace_file *a = write_trace("desc-a.dtr", graph_a, NA, NULL, 0, 0);
    struct trace_file *b = write_trace("desc-b.dtr", gb, NA, NULL, 0, 0);
    char buf[256];
    diff_opdef_describe(a, 3, b, 3, buf, sizeof buf);
    assert_string_equal(buf, "enc1.tanh: type tanh became sigmoid");
    diff_opdef_describe(a, 1, b, 1, buf, sizeof buf);
    assert_string_equal(buf, "enc1.W: input 0 enc1.W.update@prev became loss@prev");
    diff_opdef_describe(a, 7, b, 7, buf, sizeof buf);
    assert_string_equal(buf, "loss: shape scalar became 1; inputs L2.t00.tanh_c became L2.t00.tanh_c, L2.t00.c");
    diff_opdef_describe(a, 8, b, 8, buf, sizeof buf);
    assert_string_equal(buf, "enc1.W.update: kind optimizer became grad");
    diff_opdef_describe(a, 0, b, 0, buf, sizeof buf);
    assert_string_equal(buf, "");
    diff_opdef_describe(a, 2, b, UINT32_MAX, buf, sizeof buf);
    assert_string_equal(buf, "enc1.matmul: only in A");
    diff_opdef_describe(a, 2, b, 3, buf, sizeof buf);
    assert_string_equal(buf, "op 2: name enc1.matmul became enc1.tanh");
    /* a text longer than the buffer is cut, terminated */
    char small[12];
    diff_opdef_describe(a, 7, b, 7, small, sizeof small);
    assert_string_equal(small, "loss: shape");
    struct diff_result r;
    assert_int_equal(diff_traces(a, b, &r), 0);
    assert_int_equal(r.nopdiffs, 4);
    assert_int_equal(r.opdiff_a, 1); /* the first in A's order */
    assert_string_equal(r.opdiff, "enc1.W: input 0 enc1.W.update@prev became loss@prev");
    /* nothing differs in value: the difference is in the op lists only */
    assert_true(r.diverged);
    assert_false(r.values_differ);
    diff_result_free(&r);
    trace_close(a);
    trace_close(b);
}

/* Ops only in A, and a B that holds the same ops in another order. */
static void test_removed_and_reordered(void **state)
{
    (void)state;
    /* B lacks L2.init.c (op 4): L2.t00.c reads it, so that op differs too */
    static uint32_t b_w[] = {7 | PREV}, b_c[] = {3}, b_tc[] = {4}, b_loss[] = {5}, b_up[] = {1, 6};
    struct trace_opdef gb[] = {graph_a[0], graph_a[1], graph_a[2], graph_a[3],
                               graph_a[5], graph_a[6], graph_a[7], graph_a[8]};
    gb[1].inputs = b_w;
    gb[4].inputs = b_c;
    gb[4].ninputs = 1;
    gb[5].inputs = b_tc;
    gb[6].inputs = b_loss;
    gb[7].inputs = b_up;
    struct trace_file *a = write_trace("rm-a.dtr", graph_a, NA, NULL, 0, 0);
    struct trace_file *b = write_trace("rm-b.dtr", gb, 8, NULL, 0, 0);
    struct diff_result r;
    assert_int_equal(diff_traces(a, b, &r), 0);
    assert_int_equal(r.nopdiffs, 2);
    assert_int_equal(r.opdiff_a, 4);
    assert_int_equal(r.opdiff_b, -1);
    assert_string_equal(r.opdiff, "L2.init.c: only in A");
    assert_int_equal(r.a_to_b[4], -1);
    assert_false(r.values_differ);
    diff_result_free(&r);
    trace_close(b);

    /* enc1.matmul and enc1.tanh swapped in place (an order no executor
     * would keep, but the lists hold the same ops) */
    static uint32_t c_w[] = {8 | PREV}, c_mm[] = {0, 1}, c_th[] = {3}, c_c[] = {2, 4}, c_tc[] = {5},
                    c_loss[] = {6}, c_up[] = {1, 7};
    struct trace_opdef gc[NA];
    memcpy(gc, graph_a, sizeof gc);
    gc[2] = graph_a[3];
    gc[3] = graph_a[2];
    gc[1].inputs = c_w;
    gc[2].inputs = c_th;
    gc[3].inputs = c_mm;
    gc[5].inputs = c_c;
    gc[6].inputs = c_tc;
    gc[7].inputs = c_loss;
    gc[8].inputs = c_up;
    b = write_trace("rm-c.dtr", gc, NA, NULL, 0, 0);
    assert_int_equal(diff_traces(a, b, &r), 0);
    assert_false(r.ops_match);
    assert_int_equal(r.nopdiffs, 0);
    assert_int_equal(r.opdiff_a, 2);
    assert_int_equal(r.opdiff_b, 3);
    assert_string_equal(r.opdiff, "enc1.matmul: op 2 in A, op 3 in B (the same ops in another order)");
    assert_false(r.values_differ);
    assert_true(r.diverged);
    diff_result_free(&r);
    trace_close(a);
    trace_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_graph),
        cmocka_unit_test(test_rewired_input),
        cmocka_unit_test(test_inserted_op),
        cmocka_unit_test(test_changed_shape),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_removed_and_reordered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
