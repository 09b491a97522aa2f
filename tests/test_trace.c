/* test_trace.c: the .dtr trace file: round trip of every field, and a reader
 * that survives files cut at any byte, flipped bits and CRC-valid garbage;
 * and a writer that reports failed writes. test_trace_ckpt.c covers
 * damaged checkpoints and writers killed with SIGKILL mid-run. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "trace.h"
#include "trace_testutil.h"
#include "util.h"

/* ---- tests ---- */

static void test_names_and_levels(void **state)
{
    (void)state;
    assert_string_equal(trace_kind_name(TRACE_KIND_INPUT), "input");
    assert_string_equal(trace_kind_name(TRACE_KIND_FORWARD), "forward");
    assert_string_equal(trace_kind_name(TRACE_KIND_OPTIMIZER), "optimizer");
    assert_string_equal(trace_kind_name(TRACE_KIND_COUNT), "unknown");
    enum trace_level l;
    const char *names[] = {"op", "param", "step"};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(trace_level_name((enum trace_level)i), names[i]);
        assert_int_equal(trace_level_parse(names[i], &l), 0);
        assert_int_equal(l, i);
    }
    assert_int_equal(trace_level_parse("ops", &l), -1);
    assert_non_null(strstr(dt_error(), "ops"));
    for (int k = 0; k < TRACE_KIND_COUNT; k++) {
        int p = k == TRACE_KIND_PARAM || k == TRACE_KIND_STATE || k == TRACE_KIND_GRAD ||
                k == TRACE_KIND_OPTIMIZER;
        assert_true(trace_level_keeps(TRACE_LEVEL_OP, (enum trace_kind)k));
        assert_int_equal(!!trace_level_keeps(TRACE_LEVEL_PARAM, (enum trace_kind)k), p);
        assert_false(trace_level_keeps(TRACE_LEVEL_STEP, (enum trace_kind)k));
    }
}

static void test_config(void **state)
{
    (void)state;
    struct trace_config c = {0};
    assert_null(trace_config_get(&c, "model"));
    fill_config(&c);
    const char *keys[] = {"model", "lr", "layers", "seed", "empty", "with=equals"};
    const char *vals[] = {"prednet", "0.001", "784,64,784", "42", "", "a=b c"};
    assert_int_equal(c.n, 6);
    for (int i = 0; i < 6; i++) {
        assert_string_equal(c.key[i], keys[i]);
        assert_string_equal(c.val[i], vals[i]);
        assert_string_equal(trace_config_get(&c, keys[i]), vals[i]);
    }
    trace_config_set(&c, "seed", trace_config_get(&c, "seed")); /* aliasing its own value */
    assert_string_equal(trace_config_get(&c, "seed"), "42");
    for (int i = 0; i < 100; i++)
        trace_config_setf(&c, "k", "%d", i);
    assert_int_equal(c.n, 7);
    assert_string_equal(trace_config_get(&c, "k"), "99");
    trace_config_free(&c);
    assert_int_equal(c.n, 0);
    assert_null(c.key);
}

static void round_trip(enum trace_level level)
{
    const char *path = tu_path("round.dtr");
    write_small(path, level, 1);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_string_equal(tf->path, path);
    assert_int_equal(tf->version, TRACE_FORMAT_VERSION);
    assert_true(tf->tool_version && tf->tool_version[0]);
    assert_int_equal(tf->level, level);
    assert_true(tf->complete);
    assert_int_equal(tf->end_status, 3);
    assert_string_equal(tf->note, "");

    struct trace_config want = {0};
    fill_config(&want);
    assert_int_equal(tf->cfg.n, want.n);
    for (size_t i = 0; i < want.n; i++) {
        assert_string_equal(tf->cfg.key[i], want.key[i]);
        assert_string_equal(tf->cfg.val[i], want.val[i]);
    }
    trace_config_free(&want);

    assert_int_equal(tf->nops, NOPS);
    for (uint32_t i = 0; i < NOPS; i++) {
        const struct trace_opdef *a = &tf->ops[i], *b = &ops_def[i];
        assert_string_equal(a->name, b->name);
        assert_string_equal(a->type, b->type);
        assert_int_equal(a->kind, b->kind);
        assert_int_equal(a->ndim, b->ndim);
        for (int d = 0; d < TRACE_MAX_DIM; d++)
            assert_int_equal(a->shape[d], d < b->ndim ? b->shape[d] : 0);
        assert_int_equal(a->ninputs, b->ninputs);
        for (uint32_t k = 0; k < b->ninputs; k++)
            assert_int_equal(a->inputs[k], b->inputs[k]);
    }
    assert_int_equal(tf->ops[1].inputs[0], 8 | TRACE_INPUT_PREV);

    check_small_prefix(tf, NSMALL, level);

    assert_int_equal(tf->nckpt, 2);
    for (uint32_t i = 0; i < 2; i++) {
        assert_int_equal(tf->ckpt[i].step, i * 3);
        struct trace_ckpt c;
        assert_int_equal(trace_read_ckpt(tf, i, &c), 0);
        check_ckpt(&c, i * 3, 0);
        trace_ckpt_free(&c);
    }

    assert_int_equal(tf->nevents, 2);
    assert_int_equal(tf->events[0].code, TRACE_EVENT_NONFINITE);
    assert_int_equal(tf->events[0].step, 2);
    assert_int_equal(tf->events[0].op, 4);
    assert_string_equal(tf->events[0].text, "loss is nan");
    assert_int_equal(tf->events[1].code, TRACE_EVENT_STOPPED);
    assert_int_equal(tf->events[1].step, 5);
    assert_int_equal(tf->events[1].op, UINT32_MAX);
    assert_string_equal(tf->events[1].text, "stopped by user");
    trace_close(tf);
}

static void test_round_trip(void **state)
{
    (void)state;
    round_trip(TRACE_LEVEL_OP);
    round_trip(TRACE_LEVEL_PARAM);
    round_trip(TRACE_LEVEL_STEP);
}

/* The same run abandoned: read by scanning, the same content, complete = 0. */
static void test_abandoned_is_scanned(void **state)
{
    (void)state;
    const char *path = tu_path("abandoned.dtr");
    write_small(path, TRACE_LEVEL_OP, 0);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_false(tf->complete);
    assert_non_null(strstr(tf->note, "cut short after step 5"));
    assert_non_null(strstr(tf->note, "no index footer"));
    check_small_prefix(tf, NSMALL, TRACE_LEVEL_OP);
    assert_int_equal(tf->nckpt, 2);
    assert_int_equal(tf->ckpt[1].step, 3);
    assert_int_equal(tf->nevents, 2);
    assert_string_equal(tf->events[1].text, "stopped by user");
    struct trace_ckpt c;
    assert_int_equal(trace_read_ckpt(tf, 1, &c), 0);
    check_ckpt(&c, 3, 0);
    trace_ckpt_free(&c);
    trace_close(tf);
}

static void test_truncated_at_every_byte(void **state)
{
    (void)state;
    const char *full = tu_path("full.dtr"), *cut = tu_path("cut.dtr");
    write_small(full, TRACE_LEVEL_OP, 1);
    size_t n;
    uint8_t *buf = tu_read_file(full, &n);
    struct blk b[64];
    size_t nb = walk_blocks(buf, n, b, 64);
    assert_string_equal(b[0].tag, "CONF");
    assert_string_equal(b[1].tag, "OPS ");
    assert_string_equal(b[nb - 1].tag, "INDX");
    assert_int_equal(b[nb - 1].end + 16, n);
    assert_memory_equal(buf + n - 8, "ENDTRACE", 8);

    for (size_t len = 0; len <= n; len++) {
        tu_write_file(cut, buf, len);
        struct trace_file *tf = NULL;
        dt_error_set("%s", "");
        int rc = trace_open(&tf, cut);
        if (len < b[1].end) {
            if (rc != -1)
                fail_msg("cut at %zu of %zu opened", len, n);
            assert_null(tf);
            assert_non_null(strstr(dt_error(), cut));
            continue;
        }
        if (rc != 0)
            fail_msg("cut at %zu of %zu: %s", len, n, dt_error());
        uint64_t ns = 0, nc = 0, ne = 0;
        for (size_t k = 0; k < nb; k++)
            if (b[k].end <= len) {
                ns += strcmp(b[k].tag, "STEP") == 0;
                nc += strcmp(b[k].tag, "CKPT") == 0;
                ne += strcmp(b[k].tag, "EVNT") == 0;
            }
        assert_int_equal(tf->complete, len == n);
        if (len == n)
            assert_string_equal(tf->note, "");
        else
            assert_non_null(strstr(tf->note, "cut short"));
        check_small_prefix(tf, ns, TRACE_LEVEL_OP);
        assert_int_equal(tf->nckpt, nc);
        assert_int_equal(tf->nevents, ne);
        for (uint32_t i = 0; i < tf->nckpt; i++) {
            struct trace_ckpt c;
            assert_int_equal(trace_read_ckpt(tf, i, &c), 0);
            check_ckpt(&c, i * 3, 0);
            trace_ckpt_free(&c);
        }
        trace_close(tf);
    }
    free(buf);
}

/* Every bit position of every STEP block (bit = byte offset mod 8): that
 * step and the later ones are dropped and the note says corrupt. */
static void test_flipped_bit_in_steps(void **state)
{
    (void)state;
    const char *full = tu_path("flip-src.dtr"), *bad = tu_path("flip.dtr");
    write_small(full, TRACE_LEVEL_OP, 1);
    size_t n;
    uint8_t *buf = tu_read_file(full, &n);
    struct blk b[64];
    size_t nb = walk_blocks(buf, n, b, 64);
    uint64_t nflips = 0;
    for (int k = 0; k < NSMALL; k++) {
        const struct blk *s = nth_block(b, nb, "STEP", k);
        for (size_t pos = s->off; pos < s->end; pos++) {
            buf[pos] ^= (uint8_t)(1u << (pos % 8));
            tu_write_file(bad, buf, n);
            buf[pos] ^= (uint8_t)(1u << (pos % 8));
            struct trace_file *tf;
            if (trace_open(&tf, bad) != 0)
                fail_msg("flip at %zu: %s", pos, dt_error());
            if (tf->complete || tf->nsteps != (uint64_t)k || !strstr(tf->note, "corrupt"))
                fail_msg("flip at %zu (step %d): complete %d, %llu steps, note '%s'", pos, k,
                         tf->complete, (unsigned long long)tf->nsteps, tf->note);
            check_small_prefix(tf, (uint64_t)k, TRACE_LEVEL_OP);
            trace_close(tf);
            nflips++;
        }
    }
    assert_true(nflips > 1000);
    free(buf);
}

/* Skip the op entries before op `i` in an OPS payload. */
static size_t ops_entry(const uint8_t *payload, uint32_t i)
{
    size_t at = 4;
    for (uint32_t k = 0; k < i; k++) {
        at += 4 + le32(payload + at);          /* name */
        at += 4 + le32(payload + at);          /* type */
        at += 4 + 16;                          /* kind, ndim, pad, shape */
        at += 4 + 4 * (size_t)le32(payload + at); /* inputs */
    }
    return at;
}

/* Blocks whose CRC is right but whose content is impossible. */
static void test_crc_valid_garbage(void **state)
{
    (void)state;
    const char *src = tu_path("g-src.dtr"), *bad = tu_path("g.dtr");
    g_plain = 1; /* fields at fixed offsets */
    write_small(src, TRACE_LEVEL_OP, 1);
    g_plain = 0;
    size_t n;
    uint8_t *orig = tu_read_file(src, &n);
    uint8_t *buf = malloc(n);
    assert_non_null(buf);
    struct blk b[64];
    size_t nb = walk_blocks(orig, n, b, 64);
    const struct blk *conf = &b[0], *ops = &b[1];
    const struct blk *step0 = nth_block(b, nb, "STEP", 0), *step2 = nth_block(b, nb, "STEP", 2);
    const struct blk *ev0 = nth_block(b, nb, "EVNT", 0), *ck0 = nth_block(b, nb, "CKPT", 0);
    const struct blk *indx = nth_block(b, nb, "INDX", 0);
    size_t level_at = 4 + le32(orig + conf->off + 16); /* after the tool version */
    struct {
        const struct blk *blk;
        size_t at;              /* payload offset of the u32 to overwrite */
        uint32_t val;
        int opens;              /* 0: trace_open fails; else steps expected + 1 */
        const char *msg;        /* in dt_error() or the note */
    } cases[] = {
        {step0, 40, 99, 1, "op 99"},                 /* record names op 99 of 9 */
        {step0, 40 + 120, 0, 1, "increasing order"}, /* record 1 repeats op 0 */
        {step2, 32, 0xffffffffu, 3, "records"},      /* nrec */
        {ev0, 4, 1000, 4, "op 1000"},                /* event op */
        {ops, 0, 0xffffffffu, 0, "op list"},         /* nops */
        {ops, ops_entry(orig + ops->off + 16, 0) + 4 + 1 + 4 + 5 + 4 + 16, 0x40000000u, 0,
         "op list"},                                 /* op 0 ninputs */
        {ops, ops_entry(orig + ops->off + 16, 1) + 4 + 1 + 4 + 5 + 4 + 16 + 4, 50, 0,
         "refers to op 50"},                         /* op 1's input */
        {conf, level_at, 7, 0, "level 7"},
        {indx, 8, 0xfffffff0u, NSMALL + 1, "index footer"}, /* step count */
        {ck0, 32, 0xffffffffu, NSMALL + 1, ""},      /* ntensors: found by trace_read_ckpt */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(buf, orig, n);
        put_le32(buf + cases[c].blk->off + 16 + cases[c].at, cases[c].val);
        fix_crc(buf, cases[c].blk);
        tu_write_file(bad, buf, n);
        struct trace_file *tf = NULL;
        dt_error_set("%s", "");
        int rc = trace_open(&tf, bad);
        if (!cases[c].opens) {
            if (rc != -1 || !strstr(dt_error(), cases[c].msg) || !strstr(dt_error(), bad))
                fail_msg("case %zu: rc %d, '%s'", c, rc, dt_error());
            continue;
        }
        if (rc != 0)
            fail_msg("case %zu: %s", c, dt_error());
        uint64_t want = (uint64_t)cases[c].opens - 1;
        if (tf->nsteps != want || !strstr(tf->note, cases[c].msg))
            fail_msg("case %zu: %llu steps, note '%s'", c, (unsigned long long)tf->nsteps,
                     tf->note);
        check_small_prefix(tf, want, TRACE_LEVEL_OP);
        if (cases[c].blk == ck0) {
            struct trace_ckpt ck;
            assert_int_equal(trace_read_ckpt(tf, 0, &ck), -1);
            assert_non_null(strstr(dt_error(), "corrupt"));
        } else {
            assert_false(tf->complete);
            assert_non_null(strstr(tf->note, cases[c].blk == indx ? "cut short" : "corrupt"));
        }
        trace_close(tf);
    }
    free(buf);
    free(orig);
}

static void expect_open_error(const char *path, const char *what, const char *what2)
{
    struct trace_file *tf = (struct trace_file *)&tf; /* must be reset to NULL */
    dt_error_set("%s", "");
    assert_int_equal(trace_open(&tf, path), -1);
    assert_null(tf);
    const char *e = dt_error();
    if (!strstr(e, path) || !strstr(e, what) || (what2 && !strstr(e, what2)) || strchr(e, '\n'))
        fail_msg("%s: unexpected message '%s'", path, e);
}

static void test_not_a_trace(void **state)
{
    (void)state;
    expect_open_error(tu_path("missing.dtr"), "cannot open", "No such file");
    expect_open_error(tu_tmpdir(), "not a regular file", NULL);
    const char *p = tu_path("not.dtr");
    tu_write_file(p, "", 0);
    expect_open_error(p, "empty", NULL);
    const char *text = "model,loss\nautoencoder,0.25\n";
    tu_write_file(p, text, strlen(text));
    expect_open_error(p, "not a divtrace trace (bad magic)", NULL);
    tu_write_file(p, "DIVTR", 5);
    expect_open_error(p, "header cut short", NULL);

    const char *src = tu_path("v-src.dtr");
    write_small(src, TRACE_LEVEL_OP, 1);
    size_t n;
    uint8_t *buf = tu_read_file(src, &n);
    put_le32(buf + 8, TRACE_FORMAT_VERSION + 1);
    tu_write_file(p, buf, n);
    expect_open_error(p, "version 3", "newer divtrace");
    put_le32(buf + 8, 0);
    tu_write_file(p, buf, n);
    expect_open_error(p, "version 0", NULL);
    put_le32(buf + 8, TRACE_FORMAT_VERSION);
    tu_write_file(p, buf, 16);
    expect_open_error(p, "no configuration block", NULL);
    buf[20] ^= 1; /* inside CONF */
    tu_write_file(p, buf, n);
    expect_open_error(p, "configuration block", "CRC mismatch");
    buf[20] ^= 1;
    struct blk b[64];
    walk_blocks(buf, n, b, 64);
    tu_write_file(p, buf, b[1].off);
    expect_open_error(p, "no op list", NULL);
    memcpy(buf + b[1].off, "STEP", 4);
    fix_crc(buf, &b[1]);
    tu_write_file(p, buf, n);
    expect_open_error(p, "expected the op list", "'STEP'");
    free(buf);
}

/* Disk full in the middle of a run, made with RLIMIT_FSIZE in a child:
 * the failing step returns -1 (written by the writer's thread, `async`:
 * the next call does, with the thread's message), every later call says
 * why, and the file stays a readable prefix. */
static void check_fsize_failure(const char *name, int async)
{
    const char *p = tu_path(name);
    const rlim_t limit = 6000;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {limit, limit};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(10);
        struct trace_config c = {0};
        struct trace_writer *cw;
        if (trace_writer_open(&cw, p, &c, TRACE_LEVEL_OP) != 0 ||
            trace_writer_ops(cw, ops_def, NOPS) != 0)
            _exit(11);
        struct trace_step s;
        struct trace_oprec recs[2][NOPS];
        uint64_t i = 0;
        for (;; i++) {
            expect_step(i, TRACE_LEVEL_OP, &s, recs[i & 1]);
            if ((async ? trace_writer_step_async(cw, &s) : trace_writer_step(cw, &s)) != 0)
                break;
            if (i > 100)
                _exit(12);
        }
        if (!strstr(dt_error(), "write failed: File too large") || !strstr(dt_error(), p))
            _exit(13);
        expect_step(i + 1, TRACE_LEVEL_OP, &s, recs[(i + 1) & 1]);
        if ((async ? trace_writer_step_async(cw, &s) : trace_writer_step(cw, &s)) != -1 ||
            !strstr(dt_error(), "earlier write failure"))
            _exit(14);
        if (trace_writer_close(cw, 0) != -1)
            _exit(15);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, p), 0);
    assert_false(tf->complete);
    assert_true(tf->nsteps >= 2);
    /* Cut back to the last complete block, so nothing partial follows it. */
    assert_non_null(strstr(tf->note, "no index footer"));
    assert_null(strstr(tf->note, "partial"));
    check_small_prefix(tf, tf->nsteps, TRACE_LEVEL_OP);
    trace_close(tf);
}

static void test_write_errors(void **state)
{
    (void)state;
    struct trace_config cfg = {0};
    trace_config_set(&cfg, "model", "autoencoder");
    struct trace_writer *w = (struct trace_writer *)&w;
    char path[1100];
    snprintf(path, sizeof path, "%s/no/such/dir/x.dtr", tu_tmpdir());
    assert_int_equal(trace_writer_open(&w, path, &cfg, TRACE_LEVEL_OP), -1);
    assert_null(w);
    assert_non_null(strstr(dt_error(), path));
    assert_non_null(strstr(dt_error(), "cannot create"));
    if (access("/dev/full", W_OK) == 0) {
        assert_int_equal(trace_writer_open(&w, "/dev/full", &cfg, TRACE_LEVEL_OP), -1);
        assert_string_equal(dt_error(), "/dev/full: write failed: No space left on device");
    }
    trace_config_free(&cfg);

    check_fsize_failure("fsize.dtr", 0);
}

/* Steps written by the writer's thread: the same bytes as written in
 * place, closed or abandoned, at every level; and a write failure in the
 * thread is reported, with its cause, by the next call. */
static void test_async_steps(void **state)
{
    (void)state;
    static const enum trace_level levels[] = {TRACE_LEVEL_OP, TRACE_LEVEL_PARAM, TRACE_LEVEL_STEP};
    for (int l = 0; l < 3; l++)
        for (int closed = 0; closed < 2; closed++) {
            const char *a = tu_path("sync.dtr");
            char b[1100];
            snprintf(b, sizeof b, "%s", tu_path("async.dtr"));
            write_small_as(a, levels[l], closed, 0);
            write_small_as(b, levels[l], closed, 1);
            size_t na, nb;
            uint8_t *pa = tu_read_file(a, &na), *pb = tu_read_file(b, &nb);
            assert_int_equal(na, nb);
            assert_memory_equal(pa, pb, na);
            free(pa);
            free(pb);
        }

    check_fsize_failure("fsize-async.dtr", 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_levels),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_abandoned_is_scanned),
        cmocka_unit_test(test_truncated_at_every_byte),
        cmocka_unit_test(test_flipped_bit_in_steps),
        cmocka_unit_test(test_crc_valid_garbage),
        cmocka_unit_test(test_not_a_trace),
        cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_async_steps),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (failed == 0) {
        /* Keep the files of a failed run for a look; otherwise tidy up. */
        static const char *const names[] = {
            "round.dtr", "abandoned.dtr", "full.dtr", "cut.dtr", "flip-src.dtr", "flip.dtr",
            "g-src.dtr", "g.dtr", "not.dtr", "v-src.dtr", "fsize.dtr",
        };
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            unlink(tu_path(names[i]));
        rmdir(tu_tmpdir());
    }
    return failed;
}
