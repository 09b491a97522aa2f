/* test_trace_v2.c: format 2's compressed blocks (divtrace-trace(5)): runs of
 * checkpoints stored as differences read back bit for bit in any order,
 * CRC-valid garbage inside compressed payloads refused with a reason, and a
 * version 1 trace (tests/v1/, written by the format 1 writer) read the same
 * as a hand-written parse of its bytes says. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "test_util.h"
#include "trace.h"
#include "util.h"

#define NCK 25                  /* checkpoints: keys at 0, 10, 20 */
#define NW 3000                 /* elements of the weight */

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
    put_le32(p, (uint32_t)v);
    put_le32(p + 4, (uint32_t)(v >> 32));
}

/* Element k of the weight at checkpoint c: a slow drift, as training gives,
 * with NaN, -0 and infinities that must survive the differences. */
static float val_w(uint32_t c, uint32_t k)
{
    if (k == 7)
        return c % 2 ? -0.0f : 0.0f;
    if (k == 8)
        return c % 3 ? NAN : INFINITY;
    if (k == 9)
        return -INFINITY;
    uint64_t s = k;
    double base = tu_rand_uniform(&s, -1, 1);
    return (float)(base + 1e-4 * c * (k % 5 ? 1 : -1));
}

/* The second tensor changes size at checkpoint 12 (no difference there). */
static uint32_t count_m(uint32_t c) { return c < 12 ? 40 : 41; }
static float val_m(uint32_t c, uint32_t k) { return (float)(c * 100 + k) * 0.5f; }

static void write_chain(const char *path)
{
    struct trace_config cfg = {0};
    trace_config_set(&cfg, "model", "test");
    struct trace_writer *w;
    assert_int_equal(trace_writer_open(&w, path, &cfg, TRACE_LEVEL_OP), 0);
    trace_config_free(&cfg);
    const struct trace_opdef op = {"W", "param", TRACE_KIND_PARAM, 1, {NW, 0, 0, 0}, 0, NULL};
    assert_int_equal(trace_writer_ops(w, &op, 1), 0);
    float *wv = malloc(NW * sizeof *wv), mv[41], one = 1.5f;
    assert_non_null(wv);
    for (uint32_t c = 0; c < NCK; c++) {
        for (uint32_t k = 0; k < NW; k++)
            wv[k] = val_w(c, k);
        for (uint32_t k = 0; k < count_m(c); k++)
            mv[k] = val_m(c, k);
        struct trace_tensor t[4] = {
            {"W", 1, {NW, 0, 0, 0}, NW, wv},
            {"W.m", 1, {count_m(c), 0, 0, 0}, count_m(c), mv},
            {"t", 0, {0, 0, 0, 0}, 1, &one},
            {"empty", 1, {0, 0, 0, 0}, 0, NULL},
        };
        struct trace_ckpt ck = {c, c + 1, 7, c * 3, 4, t};
        assert_int_equal(trace_writer_ckpt(w, &ck), 0);
        struct trace_oprec r = {.op = 0, .hash = c, .l2 = c};
        struct trace_step s = {c, 0.5, 0.25, c, 1, &r};
        assert_int_equal(trace_writer_step(w, &s), 0);
    }
    free(wv);
    assert_int_equal(trace_writer_close(w, 0), 0);
}

static void check_chain_ckpt(const struct trace_ckpt *ck, uint32_t c)
{
    assert_int_equal(ck->step, c);
    assert_int_equal(ck->data_cursor, c + 1);
    assert_int_equal(ck->rng_counter, c * 3);
    assert_int_equal(ck->ntensors, 4);
    for (uint32_t k = 0; k < NW; k++) {
        float want = val_w(c, k);
        if (memcmp(&ck->t[0].data[k], &want, 4) != 0)
            fail_msg("checkpoint %u: W[%u] is %a, written %a", c, k, ck->t[0].data[k], want);
    }
    assert_int_equal(ck->t[1].count, count_m(c));
    for (uint32_t k = 0; k < count_m(c); k++)
        assert_true(ck->t[1].data[k] == val_m(c, k));
    assert_true(ck->t[2].data[0] == 1.5f);
    assert_int_equal(ck->t[3].count, 0);
}

struct blk {
    char tag[5];
    size_t off, end;
};

static size_t walk_blocks(const uint8_t *buf, size_t n, struct blk *b, size_t max)
{
    size_t k = 0, off = 16;
    while (off + 20 <= n && k < max) {
        memcpy(b[k].tag, buf + off, 4);
        b[k].tag[4] = 0;
        b[k].off = off;
        b[k].end = off + 20 + (size_t)le64(buf + off + 8);
        off = b[k++].end;
        if (strcmp(b[k - 1].tag, "INDX") == 0)
            break;
    }
    return k;
}

static const struct blk *nth_block(const struct blk *b, size_t nb, const char *tag, int n)
{
    for (size_t k = 0; k < nb; k++)
        if (strcmp(b[k].tag, tag) == 0 && n-- == 0)
            return &b[k];
    fail_msg("no %s block %d", tag, n);
    return NULL;
}

static void fix_crc(uint8_t *buf, const struct blk *b)
{
    uLong crc = crc32(0L, buf + b->off, (uInt)(b->end - 4 - b->off));
    put_le32(buf + b->end - 4, (uint32_t)crc);
}

/* Every order of reading gives the same bits; keys start each run of 10. */
static void test_chain_any_order(void **state)
{
    (void)state;
    const char *path = tu_path("chain.dtr");
    write_chain(path);
    size_t n;
    uint8_t *buf = tu_read_file(path, &n);
    assert_int_equal(le32(buf + 8), 2);
    struct blk b[128];
    size_t nb = walk_blocks(buf, n, b, 128);
    for (int c = 0; c < NCK; c++) {
        const struct blk *ck = nth_block(b, nb, "CKPT", c);
        uint32_t flags = le32(buf + ck->off + 16 + 36);
        /* the size change at 12 makes W.m plain there, W still differs */
        assert_int_equal(flags & 1, c % 10 ? 1 : 0);
        /* tensor 0's encoding: after name "W" (5 bytes) and ndim */
        assert_int_equal(buf[ck->off + 16 + 40 + 5 + 1], c % 10 ? 2 : 1);
    }
    free(buf);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_int_equal(tf->nckpt, NCK);
    uint32_t order[3 * NCK];
    for (uint32_t i = 0; i < NCK; i++) {
        order[i] = i;                 /* forward: one block each */
        order[NCK + i] = NCK - 1 - i; /* backward: back to a key each time */
    }
    uint64_t s = 99;
    for (uint32_t i = 0; i < NCK; i++)
        order[2 * NCK + i] = (uint32_t)(tu_rand_u64(&s) % NCK);
    for (uint32_t i = 0; i < 3 * NCK; i++) {
        struct trace_ckpt ck;
        assert_int_equal(trace_read_ckpt(tf, order[i], &ck), 0);
        check_chain_ckpt(&ck, order[i]);
        trace_ckpt_free(&ck);
    }
    trace_close(tf);
    /* A damaged key: the checkpoints that differ from it say which one. */
    buf = tu_read_file(path, &n);
    const struct blk *k10 = nth_block(b, nb, "CKPT", 10);
    buf[k10->end - 10] ^= 1;
    const char *bad = tu_path("chain-bad.dtr");
    tu_write_file(bad, buf, n);
    free(buf);
    assert_int_equal(trace_open(&tf, bad), 0);
    struct trace_ckpt ck;
    assert_int_equal(trace_read_ckpt(tf, 9, &ck), 0);
    trace_ckpt_free(&ck);
    assert_int_equal(trace_read_ckpt(tf, 13, &ck), -1);
    assert_non_null(strstr(dt_error(), "checkpoint of step 10"));
    assert_non_null(strstr(dt_error(), "CRC mismatch"));
    assert_non_null(strstr(dt_error(), "checkpoint of step 13 is stored as its difference"));
    assert_int_equal(trace_read_ckpt(tf, 20, &ck), 0);
    check_chain_ckpt(&ck, 20);
    trace_ckpt_free(&ck);
    trace_close(tf);
}

/* Compressed payloads whose CRC is right but whose content is not. */
static void test_garbage_in_compressed(void **state)
{
    (void)state;
    const char *src = tu_path("chain.dtr"), *bad = tu_path("g2.dtr");
    write_chain(src);
    size_t n;
    uint8_t *orig = tu_read_file(src, &n), *buf = malloc(n);
    assert_non_null(buf);
    struct blk b[128];
    size_t nb = walk_blocks(orig, n, b, 128);
    const struct blk *st0 = nth_block(b, nb, "STEP", 0), *ck0 = nth_block(b, nb, "CKPT", 0);
    const struct blk *ck1 = nth_block(b, nb, "CKPT", 1);
    const size_t t0 = 40 + 5; /* payload offset of tensor 0's ndim */
    struct {
        const struct blk *blk;
        size_t at;             /* payload offset */
        int width;             /* 1, 4 or 8 bytes */
        uint64_t val;
        const char *msg;
    } cases[] = {
        {st0, 36, 4, 7, "unknown record encoding 7"},
        {st0, 32, 4, 2, "2 records for 1 ops"},
        {st0, 40, 1, 0x55, "records: not a zstd frame"},     /* the frame's magic */
        {ck0, t0 + 1, 1, 9, "unknown encoding 9"},
        {ck0, t0 + 1, 1, 2, "differs from a tensor the checkpoint before does not have"},
        {ck0, t0 + 4 + 16, 8, 0xffffffffu, "cannot come from"}, /* shape[0] too, below */
        {ck0, t0 + 4 + 16 + 8 + 8, 1, 0x77, "not a zstd frame"},   /* its magic */
        {ck1, t0 + 4 + 16 + 8 + 8 + 1, 1, 0x77, "not a zstd frame"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(buf, orig, n);
        uint8_t *p = buf + cases[c].blk->off + 16 + cases[c].at;
        if (cases[c].width == 1)
            *p = (uint8_t)cases[c].val;
        else if (cases[c].width == 4)
            put_le32(p, (uint32_t)cases[c].val);
        else
            put_le64(p, cases[c].val);
        if (cases[c].width == 8)
            put_le32(p - 16, (uint32_t)cases[c].val); /* the shape agrees with the count */
        fix_crc(buf, cases[c].blk);
        tu_write_file(bad, buf, n);
        struct trace_file *tf;
        assert_int_equal(trace_open(&tf, bad), 0);
        if (cases[c].blk == st0) {
            /* the index is checked against the blocks: a scan reads none */
            if (tf->nsteps != 0 || !strstr(tf->note, cases[c].msg))
                fail_msg("case %zu: %llu steps, note '%s'", c, (unsigned long long)tf->nsteps,
                         tf->note);
        } else {
            struct trace_ckpt ck;
            uint32_t which = cases[c].blk == ck0 ? 0 : 1;
            if (trace_read_ckpt(tf, which, &ck) != -1 || !strstr(dt_error(), cases[c].msg) ||
                !strstr(dt_error(), "corrupt"))
                fail_msg("case %zu: '%s'", c, dt_error());
            assert_null(ck.t);
        }
        trace_close(tf);
    }
    free(buf);
    free(orig);
}

/* The version 1 trace the format 1 writer made (tests/v1/): what the reader
 * gives equals a parse of its bytes written here from divtrace-trace(5). */
static void test_v1_fixture(void **state)
{
    (void)state;
    const char *top = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/v1/ae-784-2-784-momentum.dtr", top ? top : "..");
    struct trace_file *tf;
    if (trace_open(&tf, path) != 0)
        fail_msg("%s", dt_error());
    assert_int_equal(tf->version, 1);
    assert_true(tf->complete);
    assert_int_equal(tf->nsteps, 4);
    assert_int_equal(tf->nckpt, 3);
    size_t n;
    uint8_t *buf = tu_read_file(path, &n);
    struct blk b[64];
    size_t nb = walk_blocks(buf, n, b, 64);
    for (int s = 0; s < 4; s++) {
        const uint8_t *p = buf + nth_block(b, nb, "STEP", s)->off + 16;
        assert_int_equal(le64(p), (uint64_t)s);
        uint32_t nrec = le32(p + 32);
        assert_int_equal(tf->steps[s].nrec, nrec);
        for (uint32_t j = 0; j < nrec; j++) {
            const uint8_t *q = p + 40 + 120 * j;
            const struct trace_oprec *r = &tf->steps[s].rec[j];
            assert_int_equal(r->op, le32(q));
            assert_int_equal(r->hash, le64(q + 8));
            assert_memory_equal(&r->l2, q + 16, 8);
            assert_memory_equal(r->sketch, q + 56, 64);
        }
    }
    for (uint32_t c = 0; c < 3; c++) {
        const uint8_t *p = buf + nth_block(b, nb, "CKPT", (int)c)->off + 16;
        struct trace_ckpt ck;
        assert_int_equal(trace_read_ckpt(tf, c, &ck), 0);
        assert_int_equal(ck.step, le64(p));
        uint32_t nt = le32(p + 32);
        assert_int_equal(ck.ntensors, nt);
        size_t at = 40;
        for (uint32_t i = 0; i < nt; i++) {
            uint32_t len = le32(p + at);
            assert_int_equal(strlen(ck.t[i].name), len);
            assert_memory_equal(ck.t[i].name, p + at + 4, len);
            at += 4 + len + 4 + 16;
            uint64_t count = le64(p + at);
            at += 8;
            assert_int_equal(ck.t[i].count, count);
            assert_memory_equal(ck.t[i].data, p + at, 4 * count);
            at += 4 * count;
        }
        trace_ckpt_free(&ck);
    }
    free(buf);
    trace_close(tf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_any_order),
        cmocka_unit_test(test_garbage_in_compressed),
        cmocka_unit_test(test_v1_fixture),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (failed == 0) {
        unlink(tu_path("chain.dtr"));
        unlink(tu_path("chain-bad.dtr"));
        unlink(tu_path("g2.dtr"));
        rmdir(tu_tmpdir());
    }
    return failed ? 1 : 0;
}
