/* trace_testutil.h: what test_trace.c and test_trace_ckpt.c share: the
 * small trace (its op list, steps and checkpoints, every value a pure
 * function of step and op, written and checked), and a walk over the raw
 * blocks of a .dtr file. */
#ifndef DT_TRACE_TESTUTIL_H
#define DT_TRACE_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "test_util.h"
#include "trace.h"
#include "util.h"

/* ---- the expected content: every value a pure function of step and op ---- */

#define NOPS 9
#define NSMALL 6                /* steps in the small trace */

static inline uint64_t mix(uint64_t x)
{
    uint64_t s = x;
    return tu_rand_u64(&s);
}

/* The op list of a one-layer model with Adam: covers every kind, same-step
 * inputs and TRACE_INPUT_PREV references, and a 0-d op. */
static uint32_t in_w[] = {8 | TRACE_INPUT_PREV}, in_m[] = {7 | TRACE_INPUT_PREV},
                in_h[] = {0, 1}, in_loss[] = {3}, in_hg[] = {3, 4}, in_wg[] = {0, 5},
                in_mn[] = {2, 6}, in_wn[] = {1, 7};
static const struct trace_opdef ops_def[NOPS] = {
    {"x", "input", TRACE_KIND_INPUT, 2, {4, 8, 0, 0}, 0, NULL},
    /* shape[3] is junk beyond ndim: the file must carry 0 there */
    {"W", "param", TRACE_KIND_PARAM, 2, {8, 3, 0, 77}, 1, in_w},
    {"m", "state", TRACE_KIND_STATE, 2, {8, 3, 0, 0}, 1, in_m},
    {"h", "matmul", TRACE_KIND_FORWARD, 2, {4, 3, 0, 0}, 2, in_h},
    {"loss", "mse", TRACE_KIND_FORWARD, 0, {0, 0, 0, 0}, 1, in_loss},
    {"h.grad", "mse_bwd", TRACE_KIND_BACKWARD, 2, {4, 3, 0, 0}, 2, in_hg},
    {"W.grad", "matmul_bwd_filter", TRACE_KIND_GRAD, 2, {8, 3, 0, 0}, 2, in_wg},
    {"m.new", "adam_m", TRACE_KIND_OPTIMIZER, 2, {8, 3, 0, 0}, 2, in_mn},
    {"W.new", "adam_p", TRACE_KIND_OPTIMIZER, 2, {8, 3, 0, 0}, 2, in_wn},
};

static inline void expect_rec(uint64_t i, uint32_t j, struct trace_oprec *r)
{
    memset(r, 0, sizeof *r);
    r->op = j;
    r->hash = mix(i * 64 + j);
    r->l2 = (double)i + j / 8.0;
    r->min = j == 0 ? -0.0 : -(double)j - 0.5; /* -0.0 must keep its sign */
    r->max = (double)i * 0.5 + j;
    r->nan = (i + j) % 3;
    r->inf = (i * j) % 2 + (j == 3 ? UINT64_MAX - 1 : 0);
    for (int k = 0; k < TRACE_SKETCH_LEN; k++)
        r->sketch[k] = (float)(i % 1000) + (float)j * 0.25f + (float)k * 0.03125f;
}

/* Step i at a level; rec must hold NOPS records. */
static inline void expect_step(uint64_t i, enum trace_level level, struct trace_step *s,
                               struct trace_oprec *rec)
{
    s->step = i;
    s->loss = 1.0 / (double)(i + 1);
    s->grad_norm = (double)i * 0.125 + 3.0;
    s->root = mix(i ^ 0xabcdefu);
    s->nrec = 0;
    s->rec = rec;
    for (uint32_t j = 0; j < NOPS; j++)
        if (trace_level_keeps(level, ops_def[j].kind))
            expect_rec(i, j, &rec[s->nrec++]);
}

static inline void check_step(const struct trace_step *got, uint64_t i, enum trace_level level)
{
    struct trace_oprec rec[NOPS];
    struct trace_step s;
    expect_step(i, level, &s, rec);
    assert_int_equal(got->step, s.step);
    assert_memory_equal(&got->loss, &s.loss, sizeof s.loss);
    assert_memory_equal(&got->grad_norm, &s.grad_norm, sizeof s.grad_norm);
    assert_int_equal(got->root, s.root);
    assert_int_equal(got->nrec, s.nrec);
    for (uint32_t j = 0; j < s.nrec; j++) {
        const struct trace_oprec *a = &got->rec[j], *b = &s.rec[j];
        assert_int_equal(a->op, b->op);
        assert_int_equal(a->hash, b->hash);
        assert_memory_equal(&a->l2, &b->l2, sizeof a->l2);
        assert_memory_equal(&a->min, &b->min, sizeof a->min);
        assert_memory_equal(&a->max, &b->max, sizeof a->max);
        assert_int_equal(a->nan, b->nan);
        assert_int_equal(a->inf, b->inf);
        assert_memory_equal(a->sketch, b->sketch, sizeof a->sketch);
    }
}

/* A checkpoint at `step` with a weight, a moment, a 0-d scalar, an empty
 * tensor and, when big > 0, one more tensor of `big` elements. */
struct ckpt_fix {
    struct trace_tensor t[5];
    float w[24], m[24], sc[1], *big;
    struct trace_ckpt c;
};

static inline float ckpt_val(uint64_t step, int tensor, uint64_t k)
{
    return (float)(step % 4096) * 1000.0f + (float)tensor * 100.0f + (float)(k % 100000) + 0.5f;
}

static inline void ckpt_make(struct ckpt_fix *f, uint64_t step, uint64_t big)
{
    memset(f, 0, sizeof *f);
    for (int k = 0; k < 24; k++) {
        f->w[k] = ckpt_val(step, 0, (uint64_t)k);
        f->m[k] = ckpt_val(step, 1, (uint64_t)k);
    }
    f->sc[0] = ckpt_val(step, 2, 0);
    f->t[0] = (struct trace_tensor){"W", 2, {8, 3, 0, 0}, 24, f->w};
    f->t[1] = (struct trace_tensor){"adam.m", 2, {8, 3, 0, 0}, 24, f->m};
    f->t[2] = (struct trace_tensor){"adam.t", 0, {0, 0, 0, 0}, 1, f->sc};
    f->t[3] = (struct trace_tensor){"empty", 1, {0, 0, 0, 0}, 0, NULL};
    f->c = (struct trace_ckpt){step, step * 7 + 1, 0x5eed, step * 100 + 3, 4, f->t};
    if (big) {
        f->big = malloc(big * sizeof *f->big);
        assert_non_null(f->big);
        for (uint64_t k = 0; k < big; k++)
            f->big[k] = ckpt_val(step, 4, k);
        f->t[4] = (struct trace_tensor){"big", 1, {(uint32_t)big, 0, 0, 0}, big, f->big};
        f->c.ntensors = 5;
    }
}

static inline void check_ckpt(const struct trace_ckpt *c, uint64_t step, uint64_t big)
{
    assert_int_equal(c->step, step);
    assert_int_equal(c->data_cursor, step * 7 + 1);
    assert_int_equal(c->rng_seed, 0x5eed);
    assert_int_equal(c->rng_counter, step * 100 + 3);
    assert_int_equal(c->ntensors, big ? 5 : 4);
    const char *names[5] = {"W", "adam.m", "adam.t", "empty", "big"};
    const uint64_t counts[5] = {24, 24, 1, 0, big};
    const uint8_t ndims[5] = {2, 2, 0, 1, 1};
    for (uint32_t i = 0; i < c->ntensors; i++) {
        const struct trace_tensor *t = &c->t[i];
        assert_string_equal(t->name, names[i]);
        assert_ptr_equal(trace_ckpt_find(c, names[i]), t);
        assert_int_equal(t->ndim, ndims[i]);
        assert_int_equal(t->count, counts[i]);
        for (int d = t->ndim; d < TRACE_MAX_DIM; d++)
            assert_int_equal(t->shape[d], 0);
        for (uint64_t k = 0; k < t->count; k++)
            if (t->data[k] != ckpt_val(step, (int)i, k))
                fail_msg("checkpoint %llu tensor %s element %llu: %g",
                         (unsigned long long)step, t->name, (unsigned long long)k, t->data[k]);
    }
    assert_int_equal(c->t[0].shape[0], 8);
    assert_int_equal(c->t[0].shape[1], 3);
    assert_null(trace_ckpt_find(c, "nope"));
}

static inline void fill_config(struct trace_config *cfg)
{
    trace_config_set(cfg, "model", "autoencoder");
    trace_config_setf(cfg, "lr", "%g", 0.001);
    trace_config_set(cfg, "layers", "784,64,784");
    trace_config_set(cfg, "model", "prednet"); /* replaces, keeps its place */
    trace_config_setf(cfg, "seed", "%d", 42);
    trace_config_set(cfg, "empty", "");
    trace_config_set(cfg, "with=equals", "a=b c");
}

/* Tests that edit fields in place write plain (uncompressed) blocks;
 * test_trace_v2.c covers the compressed ones. Each program has its own. */
static int g_plain;

/* ckpt(0), steps 0-2, an event, ckpt(3), steps 3-5, an event, then close
 * with status 3 (or abandon). */
/* With `async`, steps go through trace_writer_step_async, their records in
 * two arrays used in turn (a step's must stay until the next call). */
static inline void write_small_as(const char *path, enum trace_level level, int close_it, int async)
{
    struct trace_config cfg = {0};
    fill_config(&cfg);
    struct trace_writer *w;
    assert_int_equal(trace_writer_open(&w, path, &cfg, level), 0);
    trace_config_free(&cfg);
    trace_writer_set_plain(w, g_plain);
    assert_int_equal(trace_writer_ops(w, ops_def, NOPS), 0);
    struct ckpt_fix f;
    struct trace_step s;
    struct trace_oprec recs[2][NOPS];
    for (uint64_t i = 0; i < NSMALL; i++) {
        if (i == 0 || i == 3) {
            ckpt_make(&f, i, 0);
            assert_int_equal(trace_writer_ckpt(w, &f.c), 0);
        }
        expect_step(i, level, &s, recs[i & 1]);
        if (async)
            assert_int_equal(trace_writer_step_async(w, &s), 0);
        else
            assert_int_equal(trace_writer_step(w, &s), 0);
        if (i == 2) {
            struct trace_event e = {TRACE_EVENT_NONFINITE, 2, 4, "loss is nan"};
            assert_int_equal(trace_writer_event(w, &e), 0);
        }
    }
    struct trace_event e = {TRACE_EVENT_STOPPED, 5, UINT32_MAX, "stopped by user"};
    assert_int_equal(trace_writer_event(w, &e), 0);
    if (close_it)
        assert_int_equal(trace_writer_close(w, 3), 0);
    else
        trace_writer_abandon(w);
}

static inline void write_small(const char *path, enum trace_level level, int close_it)
{
    write_small_as(path, level, close_it, 0);
}

/* ---- walking the raw file, as divtrace-trace(5) describes it ---- */

static inline uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

struct blk {
    char tag[5];
    size_t off, end;            /* end: one past its CRC */
};

static inline size_t walk_blocks(const uint8_t *buf, size_t n, struct blk *b, size_t max)
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

/* Make a block's CRC valid again after editing its payload. */
static inline void fix_crc(uint8_t *buf, const struct blk *b)
{
    uLong crc = crc32(0L, buf + b->off, (uInt)(b->end - 4 - b->off));
    put_le32(buf + b->end - 4, (uint32_t)crc);
}

static inline const struct blk *nth_block(const struct blk *b, size_t nb, const char *tag, int n)
{
    for (size_t k = 0; k < nb; k++)
        if (strcmp(b[k].tag, tag) == 0 && n-- == 0)
            return &b[k];
    fail_msg("no %s block %d", tag, n);
    return NULL;
}

static inline void check_small_prefix(const struct trace_file *tf, uint64_t nsteps,
                                      enum trace_level level)
{
    assert_int_equal(tf->nsteps, nsteps);
    for (uint64_t i = 0; i < nsteps; i++)
        check_step(&tf->steps[i], i, level);
}

#endif
