/* trace_read.c: the .dtr trace reader (format versions 1 and 2): header and
 * op list, then all steps through the index footer, or by scanning blocks
 * when the run was killed (the file is read up to its last complete block).
 * Checkpoints load on demand (trace_ckpt.c). The byte layout is
 * divtrace-trace(5). */
#include "trace.h"
#include "trace_impl.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- reader: file access ------------------------------------------------- */

/* Bytes [off, off + n) of the file; when not buffered, reads `want` (>= n)
 * bytes from off. NULL with dt_error set on an I/O error. */
const uint8_t *trace_rd_get(struct trace_rd *r, uint64_t off, size_t n, size_t want)
{
    DT_ASSERT(off <= r->size && n <= r->size - off, "read past the end of %s", r->path);
    if (off >= r->base && off - r->base <= r->len && n <= r->len - (off - r->base))
        return r->buf + (off - r->base);
    if (want < n)
        want = n;
    if (want > r->size - off)
        want = (size_t)(r->size - off);
    if (want > r->cap) {
        free(r->buf);
        r->buf = dt_malloc(want);
        r->cap = want;
    }
    r->base = off;
    r->len = 0;
    while (r->len < want) {
        ssize_t k = pread(r->fd, r->buf + r->len, want - r->len, (off_t)(off + r->len));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            dt_error_set("%s: read failed: %s", r->path,
                         k < 0 ? strerror(errno) : "the file shrank while being read");
            return NULL;
        }
        r->len += (size_t)k;
    }
    return r->buf;
}

/* Read and CRC-check the block at off, which must end by limit. Lengths are
 * checked against limit before anything is allocated. A big CKPT block is
 * checked in pieces when stream_ckpt is set (a scan needs only its step). */
enum trace_blk trace_block_read(struct trace_rd *r, uint64_t off, uint64_t limit,
                                size_t want, int stream_ckpt, struct trace_block *b)
{
    if (off == limit)
        return TRACE_BLK_END;
    if (limit - off < TRACE_BLOCK_EXTRA)
        return TRACE_BLK_SHORT;
    const uint8_t *h = trace_rd_get(r, off, TRACE_BLOCK_HEAD, want);
    if (!h)
        return TRACE_BLK_IO;
    memcpy(b->tag, h, 4);
    b->tag[4] = 0;
    b->len = trace_get_u64(h + 8);
    b->payload = NULL;
    if (b->len > limit - off - TRACE_BLOCK_EXTRA)
        return TRACE_BLK_LONG;
    uint64_t body = TRACE_BLOCK_HEAD + b->len;
    uint32_t crc, stored;
    if (stream_ckpt && memcmp(b->tag, "CKPT", 4) == 0 && body + 4 > want) {
        crc = 0;
        for (uint64_t pos = 0; pos < body;) {
            size_t k = body - pos > TRACE_WINDOW ? TRACE_WINDOW : (size_t)(body - pos);
            const uint8_t *p = trace_rd_get(r, off + pos, k, k);
            if (!p)
                return TRACE_BLK_IO;
            crc = trace_crc(crc, p, k);
            pos += k;
        }
        const uint8_t *p = trace_rd_get(r, off + body, 4, 4);
        if (!p)
            return TRACE_BLK_IO;
        stored = trace_get_u32(p);
    } else {
        const uint8_t *p = trace_rd_get(r, off, (size_t)body + 4, want);
        if (!p)
            return TRACE_BLK_IO;
        crc = trace_crc(0, p, body);
        stored = trace_get_u32(p + body);
        b->payload = p + TRACE_BLOCK_HEAD;
    }
    return crc == stored ? TRACE_BLK_OK : TRACE_BLK_CRC;
}

/* A block tag printable in a message whatever its bytes. */
const char *trace_tag_text(char tag[5])
{
    for (int i = 0; i < 4; i++)
        if (tag[i] < 0x20 || tag[i] > 0x7e)
            tag[i] = '?';
    return tag;
}

void *trace_rd_dctx(struct trace_rd *r)
{
    if (!r->zd)
        r->zd = trace_zstd_dctx();
    return r->zd;
}


static int trace_parse_conf(struct trace_file *tf, const uint8_t *p, uint64_t n, char *why)
{
    struct trace_cur c = {p, n, 0, 0};
    tf->tool_version = trace_cur_str(&c);
    uint32_t level = trace_cur_u32(&c);
    uint32_t npairs = trace_cur_u32(&c);
    for (uint32_t i = 0; i < npairs && !c.bad; i++) {
        char *k = trace_cur_str(&c), *v = trace_cur_str(&c);
        if (k && v)
            trace_config_set(&tf->cfg, k, v);
        free(k);
        free(v);
    }
    if (!c.bad && level > TRACE_LEVEL_STEP) {
        snprintf(why, TRACE_WHY, "unknown trace level %u", level);
        return -1;
    }
    tf->level = (enum trace_level)level;
    return trace_cur_end(&c, "CONF", why, TRACE_WHY);
}

static int trace_parse_ops(struct trace_file *tf, const uint8_t *p, uint64_t n, char *why)
{
    struct trace_cur c = {p, n, 0, 0};
    uint32_t nops = trace_cur_u32(&c);
    if (nops > trace_cur_left(&c) / TRACE_OP_MIN) {
        snprintf(why, TRACE_WHY, "%u ops cannot fit in %llu bytes", nops,
                 (unsigned long long)n);
        return -1;
    }
    tf->ops = dt_calloc(nops, sizeof *tf->ops);
    tf->nops = nops;
    for (uint32_t i = 0; i < nops && !c.bad; i++) {
        struct trace_opdef *o = &tf->ops[i];
        o->name = trace_cur_str(&c);
        o->type = trace_cur_str(&c);
        o->kind = trace_cur_u8(&c);
        o->ndim = trace_cur_u8(&c);
        trace_cur_take(&c, 2);
        for (int d = 0; d < TRACE_MAX_DIM; d++)
            o->shape[d] = trace_cur_u32(&c);
        o->ninputs = trace_cur_u32(&c);
        if (c.bad || o->ninputs > trace_cur_left(&c) / 4) {
            o->ninputs = 0;
            c.bad = 1;
            break;
        }
        if (o->kind >= TRACE_KIND_COUNT || o->ndim > TRACE_MAX_DIM) {
            snprintf(why, TRACE_WHY, "op %u has kind %u and %u dimensions", i, o->kind, o->ndim);
            return -1;
        }
        for (int d = o->ndim; d < TRACE_MAX_DIM; d++)
            o->shape[d] = 0;
        o->inputs = o->ninputs ? dt_malloc(o->ninputs * sizeof *o->inputs) : NULL;
        for (uint32_t k = 0; k < o->ninputs; k++) {
            o->inputs[k] = trace_cur_u32(&c);
            if ((o->inputs[k] & ~TRACE_INPUT_PREV) >= nops) {
                snprintf(why, TRACE_WHY, "op %u: input %u refers to op %u of %u", i, k,
                         o->inputs[k] & ~TRACE_INPUT_PREV, nops);
                return -1;
            }
        }
    }
    return trace_cur_end(&c, "OPS", why, TRACE_WHY);
}

static int trace_parse_step(const struct trace_file *tf, struct trace_rd *rd, const uint8_t *p,
                            uint64_t n, struct trace_step *s, char *why)
{
    memset(s, 0, sizeof *s);
    if (n < TRACE_STEP_FIXED) {
        snprintf(why, TRACE_WHY, "STEP payload of %llu bytes", (unsigned long long)n);
        return -1;
    }
    struct trace_cur c = {p, n, 0, 0};
    s->step = trace_cur_u64(&c);
    s->loss = trace_cur_f64(&c);
    s->grad_norm = trace_cur_f64(&c);
    s->root = trace_cur_u64(&c);
    uint32_t nrec = trace_cur_u32(&c);
    uint32_t enc = trace_cur_u32(&c);
    if (tf->version == 1)
        enc = TRACE_ENC_PLAIN; /* reserved in version 1 */
    const uint8_t *q = p + TRACE_STEP_FIXED;
    uint64_t left = n - TRACE_STEP_FIXED;
    if (enc == TRACE_ENC_PLAIN) {
        if (left % TRACE_REC_LEN || left / TRACE_REC_LEN != nrec) {
            snprintf(why, TRACE_WHY, "STEP payload of %llu bytes for %u records",
                     (unsigned long long)n, nrec);
            return -1;
        }
        s->rec = nrec ? dt_malloc(nrec * sizeof *s->rec) : NULL;
        for (uint32_t j = 0; j < nrec; j++, q += TRACE_REC_LEN) {
            struct trace_oprec *r = &s->rec[j];
            r->op = trace_get_u32(q);
            r->hash = trace_get_u64(q + 8);
            uint64_t u[3];
            for (int k = 0; k < 3; k++)
                u[k] = trace_get_u64(q + 16 + 8 * k);
            memcpy(&r->l2, &u[0], 8);
            memcpy(&r->min, &u[1], 8);
            memcpy(&r->max, &u[2], 8);
            r->nan = trace_get_u64(q + 40);
            r->inf = trace_get_u64(q + 48);
            for (int k = 0; k < TRACE_SKETCH_LEN; k++)
                r->sketch[k] = trace_f32_of(q + 56 + 4 * k);
        }
    } else if (enc == TRACE_ENC_ZSTD) {
        /* at most one record an op: bounds the allocation */
        if (nrec > tf->nops) {
            snprintf(why, TRACE_WHY, "step %llu: %u records for %u ops",
                     (unsigned long long)s->step, nrec, tf->nops);
            return -1;
        }
        size_t want = (size_t)TRACE_REC_PACKED * nrec;
        uint8_t *cols = dt_malloc(want ? want : 1);
        char z[TRACE_WHY];
        if (trace_zstd_unpack(trace_rd_dctx(rd), cols, want, q, (size_t)left, z, sizeof z) < 0) {
            snprintf(why, TRACE_WHY, "step %llu: records: %.100s", (unsigned long long)s->step, z);
            free(cols);
            return -1;
        }
        s->rec = nrec ? dt_malloc(nrec * sizeof *s->rec) : NULL;
        trace_recs_unpack(s->rec, cols, nrec);
        free(cols);
    } else {
        snprintf(why, TRACE_WHY, "step %llu: unknown record encoding %u",
                 (unsigned long long)s->step, enc);
        return -1;
    }
    s->nrec = nrec;
    for (uint32_t j = 0; j < nrec; j++) {
        const struct trace_oprec *r = &s->rec[j];
        if (r->op >= tf->nops || (j > 0 && r->op <= s->rec[j - 1].op)) {
            snprintf(why, TRACE_WHY, "step %llu: record %u names op %u (%u ops, increasing order)",
                     (unsigned long long)s->step, j, r->op, tf->nops);
            free(s->rec);
            s->rec = NULL;
            s->nrec = 0;
            return -1;
        }
    }
    return 0;
}

/* With trace_open_summaries, a step keeps its summary only: its records
 * were checked, and are read again by trace_read_step. */
static void trace_step_keep(const struct trace_file *tf, struct trace_step *s)
{
    if (tf->summaries) {
        free(s->rec);
        s->rec = NULL;
        s->nrec = 0;
    }
}

static int trace_parse_event(const struct trace_file *tf, const uint8_t *p, uint64_t n,
                             struct trace_event *e, char *why)
{
    struct trace_cur c = {p, n, 0, 0};
    e->code = trace_cur_u32(&c);
    e->op = trace_cur_u32(&c);
    e->step = trace_cur_u64(&c);
    e->text = trace_cur_str(&c);
    int rc = trace_cur_end(&c, "EVNT", why, TRACE_WHY);
    if (rc == 0 && e->op != UINT32_MAX && e->op >= tf->nops) {
        snprintf(why, TRACE_WHY, "event names op %u of %u", e->op, tf->nops);
        rc = -1;
    }
    if (rc < 0) {
        free(e->text);
        e->text = NULL;
    }
    return rc;
}


/* ---- reader: the index footer -------------------------------------------- */

struct trace_footer {
    uint64_t indx;              /* offset of the INDX block */
    int status;
    uint64_t n[3];              /* steps, checkpoints, events */
    struct trace_ent *e[3];
};

static void trace_footer_free(struct trace_footer *f)
{
    for (int l = 0; l < 3; l++)
        free(f->e[l]);
}

/* Find and check the trailer and INDX block. 1 found, 0 none usable, -1 I/O error. */
static int trace_footer_read(struct trace_rd *r, uint64_t data_start, struct trace_footer *f)
{
    memset(f, 0, sizeof *f);
    if (r->size < data_start + TRACE_BLOCK_EXTRA + TRACE_INDX_FIXED + TRACE_TRAILER_LEN)
        return 0;
    uint64_t end = r->size - TRACE_TRAILER_LEN;
    const uint8_t *t = trace_rd_get(r, end, TRACE_TRAILER_LEN, TRACE_TRAILER_LEN);
    if (!t)
        return -1;
    f->indx = trace_get_u64(t);
    if (memcmp(t + 8, TRACE_END_MAGIC, 8) != 0 || f->indx < data_start || f->indx >= end)
        return 0;
    /* The region of steps is read next: fetch the index alone, not a window. */
    struct trace_block b;
    enum trace_blk st = trace_block_read(r, f->indx, end, 0, 0, &b);
    if (st == TRACE_BLK_IO)
        return -1;
    if (st != TRACE_BLK_OK || memcmp(b.tag, "INDX", 4) != 0 ||
        f->indx + TRACE_BLOCK_EXTRA + b.len != end || b.len < TRACE_INDX_FIXED)
        return 0;
    const uint8_t *p = b.payload;
    f->status = (int)(int32_t)trace_get_u32(p);
    uint64_t avail = (b.len - TRACE_INDX_FIXED) / TRACE_INDX_ENTRY, total = 0;
    for (int l = 0; l < 3; l++) {
        f->n[l] = trace_get_u64(p + 8 + 8 * l);
        if (f->n[l] > avail - total)
            return 0;
        total += f->n[l];
    }
    if (total * TRACE_INDX_ENTRY + TRACE_INDX_FIXED != b.len || f->n[1] > UINT32_MAX ||
        f->n[2] > UINT32_MAX)
        return 0;
    const uint8_t *q = p + TRACE_INDX_FIXED;
    for (int l = 0; l < 3; l++) {
        f->e[l] = dt_malloc(f->n[l] * sizeof *f->e[l]);
        for (uint64_t i = 0; i < f->n[l]; i++, q += TRACE_INDX_ENTRY) {
            struct trace_ent *e = &f->e[l][i];
            e->step = trace_get_u64(q);
            e->off = trace_get_u64(q + 8);
            /* Offsets climb inside the data region; step numbers climb too. */
            if (e->off < data_start || e->off >= f->indx || (i > 0 && e->off <= e[-1].off) ||
                (l == 0 && i > 0 && e->step <= e[-1].step)) {
                trace_footer_free(f);
                memset(f, 0, sizeof *f);
                return 0;
            }
        }
    }
    return 1;
}

/* ---- reader: loading ----------------------------------------------------- */

static void trace_file_drop_data(struct trace_file *tf)
{
    for (uint64_t i = 0; i < tf->nsteps; i++)
        free(tf->steps[i].rec);
    free(tf->steps);
    for (uint32_t i = 0; i < tf->nevents; i++)
        free(tf->events[i].text);
    free(tf->events);
    free(tf->ckpt);
    free(tf->step_off);
    tf->step_off = NULL;
    trace_ckpt_free(&tf->ckpt_cache);
    tf->steps = NULL;
    tf->events = NULL;
    tf->ckpt = NULL;
    tf->nsteps = 0;
    tf->nevents = 0;
    tf->nckpt = 0;
}

/* Load steps and events at the offsets the index gives, reading each run of
 * them up to the next checkpoint in one go (checkpoints are not touched).
 * 0 done, 1 a block disagrees with the index (caller scans), -1 I/O error. */
static int trace_load_indexed(struct trace_file *tf, struct trace_rd *r, const struct trace_footer *f)
{
    const struct trace_ent *se = f->e[0], *ce = f->e[1], *ee = f->e[2];
    tf->steps = dt_calloc(f->n[0], sizeof *tf->steps);
    tf->step_off = dt_calloc(f->n[0], sizeof *tf->step_off);
    tf->events = dt_calloc(f->n[2], sizeof *tf->events);
    uint64_t i = 0, j = 0, k = 0;
    char why[TRACE_WHY];
    while (i < f->n[0] || j < f->n[2]) {
        int is_step = j >= f->n[2] || (i < f->n[0] && se[i].off < ee[j].off);
        uint64_t off = is_step ? se[i].off : ee[j].off;
        while (k < f->n[1] && ce[k].off <= off)
            k++;
        uint64_t bound = k < f->n[1] ? ce[k].off : f->indx;
        size_t want = bound - off > TRACE_REGION_MAX ? TRACE_REGION_MAX : (size_t)(bound - off);
        struct trace_block b;
        enum trace_blk st = trace_block_read(r, off, f->indx, want, 0, &b);
        if (st == TRACE_BLK_IO)
            return -1;
        if (st != TRACE_BLK_OK || memcmp(b.tag, is_step ? "STEP" : "EVNT", 4) != 0)
            return 1;
        if (is_step) {
            struct trace_step *s = &tf->steps[tf->nsteps];
            if (trace_parse_step(tf, r, b.payload, b.len, s, why) < 0)
                return 1;
            trace_step_keep(tf, s);
            tf->step_off[tf->nsteps] = off;
            tf->nsteps++;
            if (s->step != se[i].step)
                return 1;
            i++;
        } else {
            struct trace_event *e = &tf->events[tf->nevents];
            if (trace_parse_event(tf, b.payload, b.len, e, why) < 0)
                return 1;
            tf->nevents++;
            if (e->step != ee[j].step)
                return 1;
            j++;
        }
    }
    tf->nckpt = (uint32_t)f->n[1];
    tf->ckpt = dt_malloc(f->n[1] * sizeof *tf->ckpt);
    for (uint64_t c = 0; c < f->n[1]; c++)
        tf->ckpt[c] = (struct trace_ckpt_ref){ce[c].step, ce[c].off};
    return 0;
}

/* "after step 41" / "before the first step", for notes. */
static const char *trace_note_last(const struct trace_file *tf, char *buf, size_t n, int after)
{
    if (tf->nsteps == 0)
        snprintf(buf, n, after ? "before the first step" : "no steps");
    else
        snprintf(buf, n, after ? "after step %llu" : "up to step %llu",
                 (unsigned long long)tf->steps[tf->nsteps - 1].step);
    return buf;
}

/* Read blocks one after another from off, stopping at `limit`, the first
 * block that is incomplete, corrupt or inconsistent, or an INDX block. With
 * `footer` set the file had a valid index, so anything short is corruption,
 * not a killed run. Returns 0 (note set), or -1 on an I/O error. */
static int trace_scan(struct trace_file *tf, struct trace_rd *r, uint64_t off, uint64_t limit,
                      int footer)
{
    size_t cap_s = 0, cap_c = 0, cap_e = 0;
    char why[TRACE_WHY] = "", last[48];
    enum { END_CLEAN, END_PARTIAL, END_CORRUPT, END_INDX } how = END_CLEAN;
    for (;;) {
        struct trace_block b;
        enum trace_blk st = trace_block_read(r, off, limit, TRACE_WINDOW, 1, &b);
        if (st == TRACE_BLK_IO)
            return -1;
        if (st == TRACE_BLK_END)
            break;
        if (st == TRACE_BLK_SHORT || st == TRACE_BLK_LONG) {
            how = footer ? END_CORRUPT : END_PARTIAL;
            if (st == TRACE_BLK_SHORT)
                snprintf(why, sizeof why, "block head cut by the index footer");
            else
                snprintf(why, sizeof why, "impossible length %llu", (unsigned long long)b.len);
            break;
        }
        if (st == TRACE_BLK_CRC) {
            how = END_CORRUPT;
            snprintf(why, sizeof why, "CRC mismatch");
            break;
        }
        if (memcmp(b.tag, "STEP", 4) == 0) {
            struct trace_step s;
            if (trace_parse_step(tf, r, b.payload, b.len, &s, why) < 0) {
                how = END_CORRUPT;
                break;
            }
            if (tf->nsteps > 0 && s.step <= tf->steps[tf->nsteps - 1].step) {
                snprintf(why, sizeof why, "step %llu after step %llu", (unsigned long long)s.step,
                         (unsigned long long)tf->steps[tf->nsteps - 1].step);
                free(s.rec);
                how = END_CORRUPT;
                break;
            }
            if (tf->nsteps == cap_s) {
                cap_s = cap_s ? 2 * cap_s : 1024;
                tf->steps = dt_realloc(tf->steps, cap_s * sizeof *tf->steps);
                tf->step_off = dt_realloc(tf->step_off, cap_s * sizeof *tf->step_off);
            }
            trace_step_keep(tf, &s);
            tf->step_off[tf->nsteps] = off;
            tf->steps[tf->nsteps++] = s;
        } else if (memcmp(b.tag, "CKPT", 4) == 0) {
            if (b.len < TRACE_CKPT_FIXED || tf->nckpt == UINT32_MAX) {
                snprintf(why, sizeof why, "CKPT payload of %llu bytes", (unsigned long long)b.len);
                how = END_CORRUPT;
                break;
            }
            const uint8_t *p = trace_rd_get(r, off + TRACE_BLOCK_HEAD, 8, TRACE_WINDOW);
            if (!p)
                return -1;
            if (tf->nckpt == cap_c) {
                cap_c = cap_c ? 2 * cap_c : 64;
                tf->ckpt = dt_realloc(tf->ckpt, cap_c * sizeof *tf->ckpt);
            }
            tf->ckpt[tf->nckpt++] = (struct trace_ckpt_ref){trace_get_u64(p), off};
        } else if (memcmp(b.tag, "EVNT", 4) == 0) {
            struct trace_event e;
            if (tf->nevents == UINT32_MAX || trace_parse_event(tf, b.payload, b.len, &e, why) < 0) {
                how = END_CORRUPT;
                break;
            }
            if (tf->nevents == cap_e) {
                cap_e = cap_e ? 2 * cap_e : 64;
                tf->events = dt_realloc(tf->events, cap_e * sizeof *tf->events);
            }
            tf->events[tf->nevents++] = e;
        } else if (memcmp(b.tag, "INDX", 4) == 0) {
            how = END_INDX;
            break;
        } else if (memcmp(b.tag, "CONF", 4) == 0 || memcmp(b.tag, "OPS ", 4) == 0) {
            snprintf(why, sizeof why, "a second %s block", b.tag);
            how = END_CORRUPT;
            break;
        }
        /* Any other tag is an addition by a later writer of this version: skip it. */
        off += TRACE_BLOCK_EXTRA + b.len;
    }
    tf->complete = 0;
    unsigned long long o = (unsigned long long)off;
    switch (how) {
    case END_CLEAN:
        if (footer)
            snprintf(tf->note, sizeof tf->note,
                     "the index footer does not match the blocks; read %s by scanning",
                     trace_note_last(tf, last, sizeof last, 0));
        else
            snprintf(tf->note, sizeof tf->note,
                     "cut short %s (no index footer: the run was killed or is still being written)",
                     trace_note_last(tf, last, sizeof last, 1));
        break;
    case END_PARTIAL:
        snprintf(tf->note, sizeof tf->note,
                 "cut short %s (partial block at offset %llu, no index footer: the run was "
                 "killed or is still being written)", trace_note_last(tf, last, sizeof last, 1), o);
        break;
    case END_CORRUPT:
        snprintf(tf->note, sizeof tf->note, "corrupt block at offset %llu (%s); read %s", o, why,
                 trace_note_last(tf, last, sizeof last, 0));
        break;
    case END_INDX:
        snprintf(tf->note, sizeof tf->note,
                 "cut short %s (index footer at offset %llu has no valid trailer: the run was "
                 "killed while closing the trace, or the end of the file is damaged)",
                 trace_note_last(tf, last, sizeof last, 1), o);
        break;
    }
    return 0;
}

/* Read one of the blocks every trace starts with; -1 with dt_error set. */
static int trace_load_first(struct trace_file *tf, struct trace_rd *r, uint64_t *off,
                            const char *tag, const char *what,
                            int (*parse)(struct trace_file *, const uint8_t *, uint64_t, char *))
{
    struct trace_block b;
    char why[TRACE_WHY];
    unsigned long long o = (unsigned long long)*off;
    switch (trace_block_read(r, *off, r->size, TRACE_WINDOW, 0, &b)) {
    case TRACE_BLK_IO:
        return -1;
    case TRACE_BLK_END:
        dt_error_set("%s: no %s (the file ends at offset %llu: the run stopped before writing it)",
                     tf->path, what, o);
        return -1;
    case TRACE_BLK_SHORT:
    case TRACE_BLK_LONG:
        dt_error_set("%s: the %s at offset %llu is cut short (the run stopped while writing it)",
                     tf->path, what, o);
        return -1;
    case TRACE_BLK_CRC:
        dt_error_set("%s: the %s at offset %llu is corrupt (CRC mismatch)", tf->path, what, o);
        return -1;
    case TRACE_BLK_OK:
        break;
    }
    if (memcmp(b.tag, tag, 4) != 0) {
        dt_error_set("%s: expected the %s at offset %llu, found a '%s' block", tf->path, what,
                     o, trace_tag_text(b.tag));
        return -1;
    }
    if (parse(tf, b.payload, b.len, why) < 0) {
        dt_error_set("%s: the %s at offset %llu is corrupt (%s)", tf->path, what, o, why);
        return -1;
    }
    *off += TRACE_BLOCK_EXTRA + b.len;
    return 0;
}

static int trace_load(struct trace_file *tf, struct trace_rd *r)
{
    if (r->size == 0) {
        dt_error_set("%s: empty file, not a divtrace trace", tf->path);
        return -1;
    }
    size_t hn = r->size < TRACE_HEADER_LEN ? (size_t)r->size : TRACE_HEADER_LEN;
    const uint8_t *h = trace_rd_get(r, 0, hn, TRACE_WINDOW);
    if (!h)
        return -1;
    if (memcmp(h, TRACE_MAGIC, hn < 8 ? hn : 8) != 0) {
        dt_error_set("%s: not a divtrace trace (bad magic)", tf->path);
        return -1;
    }
    if (hn < TRACE_HEADER_LEN) {
        dt_error_set("%s: trace header cut short (%zu of %u bytes)", tf->path, hn,
                     TRACE_HEADER_LEN);
        return -1;
    }
    tf->version = trace_get_u32(h + 8);
    if (tf->version > TRACE_FORMAT_VERSION) {
        dt_error_set("%s: trace format version %u is newer than this divtrace reads (%u): "
                     "a newer divtrace is needed", tf->path, tf->version, TRACE_FORMAT_VERSION);
        return -1;
    }
    if (tf->version == 0) {
        dt_error_set("%s: invalid trace format version 0", tf->path);
        return -1;
    }
    uint64_t off = TRACE_HEADER_LEN;
    if (trace_load_first(tf, r, &off, "CONF", "configuration block", trace_parse_conf) < 0 ||
        trace_load_first(tf, r, &off, "OPS ", "op list block", trace_parse_ops) < 0)
        return -1;

    struct trace_footer f;
    int found = trace_footer_read(r, off, &f);
    if (found < 0)
        return -1;
    if (found) {
        int st = trace_load_indexed(tf, r, &f);
        if (st == 0) {
            tf->complete = 1;
            tf->end_status = f.status;
            tf->note[0] = 0;
        } else {
            /* A block the index points at is damaged: trust only what a scan
             * can verify, up to that block. */
            trace_file_drop_data(tf);
            if (st > 0)
                st = trace_scan(tf, r, off, f.indx, 1);
            if (st == 0)
                tf->end_status = f.status;
        }
        trace_footer_free(&f);
        return st < 0 ? -1 : 0;
    }
    return trace_scan(tf, r, off, r->size, 0);
}

static int trace_open_as(struct trace_file **out, const char *path, int summaries)
{
    DT_ASSERT(out && path, "trace_open: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        dt_error_set("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        dt_error_set("%s: not a regular file", path);
        close(fd);
        return -1;
    }
    struct trace_file *tf = dt_calloc(1, sizeof *tf);
    tf->path = dt_strdup(path);
    tf->summaries = summaries;
    struct trace_rd r = {.fd = fd, .path = tf->path, .size = (uint64_t)st.st_size};
    int rc = trace_load(tf, &r);
    free(r.buf);
    if (r.zd)
        trace_zstd_free_dctx(r.zd);
    close(fd);
    if (rc < 0) {
        trace_close(tf);
        return -1;
    }
    *out = tf;
    return 0;
}


int trace_open(struct trace_file **out, const char *path)
{
    return trace_open_as(out, path, 0);
}

int trace_open_summaries(struct trace_file **out, const char *path)
{
    return trace_open_as(out, path, 1);
}

int trace_read_step(struct trace_file *tf, uint64_t i, struct trace_step *out)
{
    DT_ASSERT(tf && out && i < tf->nsteps, "trace_read_step: step %llu of %llu",
              (unsigned long long)i, tf ? (unsigned long long)tf->nsteps : 0ULL);
    memset(out, 0, sizeof *out);
    unsigned long long o = (unsigned long long)tf->step_off[i];
    int fd = open(tf->path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        dt_error_set("%s: cannot open: %s", tf->path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct trace_rd r = {.fd = fd, .path = tf->path, .size = (uint64_t)sb.st_size};
    struct trace_block b;
    char why[TRACE_WHY] = "";
    int rc = -1;
    enum trace_blk st = tf->step_off[i] <= r.size
                            ? trace_block_read(&r, tf->step_off[i], r.size, 0, 0, &b)
                            : TRACE_BLK_LONG;
    if (st == TRACE_BLK_OK && memcmp(b.tag, "STEP", 4) != 0)
        snprintf(why, sizeof why, "not a STEP block");
    else if (st == TRACE_BLK_OK) {
        int summaries = tf->summaries;
        tf->summaries = 0;
        rc = trace_parse_step(tf, &r, b.payload, b.len, out, why);
        tf->summaries = summaries;
        if (rc == 0 && out->step != tf->steps[i].step) {
            snprintf(why, sizeof why, "step %llu where step %llu was",
                     (unsigned long long)out->step, (unsigned long long)tf->steps[i].step);
            free(out->rec);
            memset(out, 0, sizeof *out);
            rc = -1;
        }
    } else if (st != TRACE_BLK_IO)
        snprintf(why, sizeof why, "%s", st == TRACE_BLK_CRC ? "CRC mismatch" : "cut short");
    if (rc < 0 && st != TRACE_BLK_IO)
        dt_error_set("%s: the step block at offset %llu changed since the trace was opened (%s)",
                     tf->path, o, why);
    free(r.buf);
    if (r.zd)
        trace_zstd_free_dctx(r.zd);
    close(fd);
    return rc;
}

void trace_close(struct trace_file *tf)
{
    if (!tf)
        return;
    trace_file_drop_data(tf);
    for (uint32_t i = 0; tf->ops && i < tf->nops; i++) {
        free(tf->ops[i].name);
        free(tf->ops[i].type);
        free(tf->ops[i].inputs);
    }
    free(tf->ops);
    trace_config_free(&tf->cfg);
    free(tf->tool_version);
    free(tf->path);
    free(tf);
}
