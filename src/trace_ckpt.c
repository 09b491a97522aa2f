/* trace_ckpt.c: reading a trace's checkpoints (formats 1 and 2). A version 2
 * checkpoint may store a tensor as its difference from the checkpoint before
 * it, so reading one decodes the run of blocks back to a key checkpoint; the
 * last one read is kept, and reading them in order decodes each block once.
 * The byte layout is divtrace-trace(5). */
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

/* Tensor i's data from a compressed entry at the cursor (encoding 1 or 2). */
static int trace_parse_packed(struct trace_cur *c, void *dctx, uint32_t i, uint8_t enc,
                              const struct trace_ckpt *base, struct trace_tensor *t, char *why)
{
    uint64_t z = trace_cur_u64(c);
    if (c->bad || z > trace_cur_left(c)) {
        c->bad = 1;
        return 0;
    }
    /* No zstd frame expands more than TRACE_ZSTD_MAX_RATIO: a count beyond
     * that is corrupt, found before anything is allocated for it. */
    if (t->count > SIZE_MAX / 4 || t->count / (TRACE_ZSTD_MAX_RATIO / 4) > z) {
        snprintf(why, TRACE_WHY, "tensor %u: %llu elements cannot come from %llu bytes", i,
                 (unsigned long long)t->count, (unsigned long long)z);
        return -1;
    }
    const float *from = NULL;
    if (enc == TRACE_ENC_DELTA) {
        const struct trace_tensor *b = base && i < base->ntensors ? &base->t[i] : NULL;
        if (!b || b->count != t->count || strcmp(b->name, t->name) != 0) {
            snprintf(why, TRACE_WHY, "tensor %u (%.40s) differs from a tensor the checkpoint "
                     "before does not have", i, t->name);
            return -1;
        }
        from = b->data;
    }
    const uint8_t *q = trace_cur_take(c, z);
    size_t want = (size_t)t->count * 4;
    uint8_t *planes = dt_malloc(want);
    char zwhy[TRACE_WHY];
    if (trace_zstd_unpack(dctx, planes, want, q, (size_t)z, zwhy, sizeof zwhy) < 0) {
        snprintf(why, TRACE_WHY, "tensor %u (%.40s): %.100s", i, t->name, zwhy);
        free(planes);
        return -1;
    }
    t->data = dt_malloc(want);
    trace_planes_unpack(t->data, planes, from, t->count);
    free(planes);
    return 0;
}

int trace_parse_ckpt(uint32_t version, void *dctx, const uint8_t *p, uint64_t n,
                     const struct trace_ckpt *base, struct trace_ckpt *ck, char *why)
{
    struct trace_cur c = {p, n, 0, 0};
    ck->step = trace_cur_u64(&c);
    ck->data_cursor = trace_cur_u64(&c);
    ck->rng_seed = trace_cur_u64(&c);
    ck->rng_counter = trace_cur_u64(&c);
    uint32_t nt = trace_cur_u32(&c);
    trace_cur_u32(&c); /* flags: only a hint to the reader of a run of blocks */
    if (nt > trace_cur_left(&c) / TRACE_TENSOR_MIN) {
        snprintf(why, TRACE_WHY, "%u tensors cannot fit in %llu bytes", nt,
                 (unsigned long long)n);
        return -1;
    }
    ck->t = dt_calloc(nt, sizeof *ck->t);
    ck->ntensors = nt;
    for (uint32_t i = 0; i < nt && !c.bad; i++) {
        struct trace_tensor *t = &ck->t[i];
        t->name = trace_cur_str(&c);
        t->ndim = trace_cur_u8(&c);
        uint8_t enc = trace_cur_u8(&c);
        trace_cur_take(&c, 2);
        if (version == 1)
            enc = TRACE_ENC_PLAIN; /* reserved in version 1 */
        for (int d = 0; d < TRACE_MAX_DIM; d++)
            t->shape[d] = trace_cur_u32(&c);
        t->count = trace_cur_u64(&c);
        if (c.bad)
            break;
        if (t->ndim > TRACE_MAX_DIM ||
            (t->ndim > 0 && t->count != trace_shape_count(t->ndim, t->shape))) {
            snprintf(why, TRACE_WHY, "tensor %u: %u dimensions for %llu elements", i, t->ndim,
                     (unsigned long long)t->count);
            return -1;
        }
        for (int d = t->ndim; d < TRACE_MAX_DIM; d++)
            t->shape[d] = 0;
        if (enc == TRACE_ENC_ZSTD || enc == TRACE_ENC_DELTA) {
            if (trace_parse_packed(&c, dctx, i, enc, base, t, why) < 0)
                return -1;
            continue;
        }
        if (enc != TRACE_ENC_PLAIN) {
            snprintf(why, TRACE_WHY, "tensor %u: unknown encoding %u", i, enc);
            return -1;
        }
        if (t->count > trace_cur_left(&c) / 4) {
            c.bad = 1;
            break;
        }
        const uint8_t *q = trace_cur_take(&c, 4 * t->count);
        t->data = dt_malloc((size_t)t->count * sizeof *t->data);
        for (uint64_t k = 0; k < t->count; k++)
            t->data[k] = trace_f32_of(q + 4 * k);
    }
    return trace_cur_end(&c, "CKPT", why, TRACE_WHY);
}

/* A deep copy of src into dst. */
static void trace_ckpt_copy(struct trace_ckpt *dst, const struct trace_ckpt *src)
{
    *dst = *src;
    dst->t = dt_calloc(src->ntensors ? src->ntensors : 1, sizeof *dst->t);
    for (uint32_t i = 0; i < src->ntensors; i++) {
        const struct trace_tensor *a = &src->t[i];
        struct trace_tensor *b = &dst->t[i];
        *b = *a;
        b->name = dt_strdup(a->name);
        b->data = dt_malloc(a->count ? (size_t)a->count * sizeof *b->data : 1);
        if (a->count)
            memcpy(b->data, a->data, (size_t)a->count * sizeof *b->data);
    }
}

/* Checkpoint block k, decoded against base (the one before, or NULL). */
static int trace_read_one(struct trace_file *tf, struct trace_rd *r, uint32_t k,
                          const struct trace_ckpt *base, struct trace_ckpt *out)
{
    memset(out, 0, sizeof *out);
    const struct trace_ckpt_ref *ref = &tf->ckpt[k];
    unsigned long long step = (unsigned long long)ref->step, o = (unsigned long long)ref->offset;
    if (r->size < ref->offset) {
        dt_error_set("%s: the checkpoint of step %llu (offset %llu) is past the end of the file",
                     tf->path, step, o);
        return -1;
    }
    struct trace_block b;
    char why[TRACE_WHY] = "";
    int rc = -1;
    switch (trace_block_read(r, ref->offset, r->size, 0, 0, &b)) {
    case TRACE_BLK_IO:
        break;
    case TRACE_BLK_CRC:
        dt_error_set("%s: the checkpoint of step %llu (offset %llu) is corrupt (CRC mismatch)",
                     tf->path, step, o);
        break;
    case TRACE_BLK_OK:
        if (memcmp(b.tag, "CKPT", 4) != 0)
            dt_error_set("%s: no checkpoint at offset %llu (found a '%s' block)", tf->path, o,
                         trace_tag_text(b.tag));
        else if (trace_parse_ckpt(tf->version, trace_rd_dctx(r), b.payload, b.len, base, out,
                                  why) < 0)
            dt_error_set("%s: the checkpoint of step %llu (offset %llu) is corrupt (%s)",
                         tf->path, step, o, why);
        else if (out->step != ref->step)
            dt_error_set("%s: the checkpoint at offset %llu is of step %llu, not %llu", tf->path,
                         o, (unsigned long long)out->step, step);
        else
            rc = 0;
        break;
    default:
        dt_error_set("%s: the checkpoint of step %llu (offset %llu) is cut short or has an "
                     "impossible length", tf->path, step, o);
        break;
    }
    if (rc < 0)
        trace_ckpt_free(out);
    return rc;
}

/* Whether checkpoint block k says it differs from the one before (its flags:
 * a hint only; the block is checked when it is read). */
static int trace_ckpt_is_delta(const struct trace_file *tf, struct trace_rd *r, uint32_t k)
{
    uint64_t off = tf->ckpt[k].offset;
    if (tf->version < 2 || off > r->size || r->size - off < TRACE_BLOCK_HEAD + TRACE_CKPT_FIXED)
        return 0;
    const uint8_t *h = trace_rd_get(r, off, TRACE_BLOCK_HEAD + TRACE_CKPT_FIXED,
                                    TRACE_BLOCK_HEAD + TRACE_CKPT_FIXED);
    return h && memcmp(h, "CKPT", 4) == 0 &&
           (trace_get_u32(h + TRACE_BLOCK_HEAD + 36) & TRACE_CKPT_FLAG_DELTA);
}

int trace_read_ckpt(struct trace_file *tf, uint32_t i, struct trace_ckpt *out)
{
    DT_ASSERT(tf && out && i < tf->nckpt, "trace_read_ckpt: checkpoint %u of %u", i,
              tf ? tf->nckpt : 0);
    memset(out, 0, sizeof *out);
    struct trace_ckpt *cache = &tf->ckpt_cache;
    if (cache->t && tf->ckpt_cache_i == i) {
        trace_ckpt_copy(out, cache);
        return 0;
    }
    /* Reopened here so an open trace holds no descriptor between reads. */
    int fd = open(tf->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        dt_error_set("%s: cannot open: %s", tf->path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        dt_error_set("%s: cannot stat: %s", tf->path, strerror(errno));
        close(fd);
        return -1;
    }
    struct trace_rd r = {.fd = fd, .path = tf->path, .size = (uint64_t)sb.st_size};
    /* The run of blocks to decode: back to a key checkpoint, or to the one
     * kept from the last call. */
    uint32_t first = i;
    int from_cache = 0;
    while (first > 0 && trace_ckpt_is_delta(tf, &r, first)) {
        if (cache->t && tf->ckpt_cache_i == first - 1) {
            from_cache = 1;
            break;
        }
        first--;
    }
    struct trace_ckpt cur = {0};
    int have = 0, rc = 0;
    if (from_cache) {
        trace_ckpt_copy(&cur, cache);
        have = 1;
    }
    for (uint32_t k = first; k <= i && rc == 0; k++) {
        struct trace_ckpt next;
        rc = trace_read_one(tf, &r, k, have ? &cur : NULL, &next);
        if (rc < 0 && k < i) {
            char e[512];
            snprintf(e, sizeof e, "%s", dt_error());
            dt_error_set("%s (the checkpoint of step %llu is stored as its difference from "
                         "that one)", e, (unsigned long long)tf->ckpt[i].step);
        }
        trace_ckpt_free(&cur);
        if (rc == 0) {
            cur = next;
            have = 1;
        }
    }
    free(r.buf);
    if (r.zd)
        trace_zstd_free_dctx(r.zd);
    close(fd);
    if (rc < 0)
        return -1;
    trace_ckpt_free(cache);
    trace_ckpt_copy(cache, &cur);
    tf->ckpt_cache_i = i;
    *out = cur;
    return 0;
}
