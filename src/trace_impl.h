/* trace_impl.h: what the trace writer (trace.c), the readers (trace_read.c,
 * trace_ckpt.c) and the encodings (trace_codec.c) share: the sizes fixed by
 * the format and the little-endian packing. The byte layout is
 * divtrace-trace(5); these files and that page change together. */
#ifndef DT_TRACE_IMPL_H
#define DT_TRACE_IMPL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "trace.h"
#include "util.h"

/* Sizes fixed by the format (divtrace-trace(5)); version 2 adds the
 * encodings below and keeps every version 1 size. */
#define TRACE_MAGIC "DIVTRACE"
#define TRACE_END_MAGIC "ENDTRACE"
#define TRACE_HEADER_LEN 16u
#define TRACE_BLOCK_HEAD 16u      /* tag, flags, payload length */
#define TRACE_BLOCK_EXTRA 20u     /* head + trailing CRC */
#define TRACE_TRAILER_LEN 16u
#define TRACE_STEP_FIXED 40u
#define TRACE_REC_LEN 120u
#define TRACE_OP_MIN 32u          /* smallest op entry: empty strings, no inputs */
#define TRACE_TENSOR_MIN 32u      /* smallest tensor entry: empty name, no data */
#define TRACE_CKPT_FIXED 40u
#define TRACE_INDX_FIXED 32u
#define TRACE_INDX_ENTRY 16u

/* Reader buffer sizes: big sequential reads, never one syscall per field. */
#define TRACE_WINDOW (8u << 20)
#define TRACE_REGION_MAX (64u << 20)
/* The writer keeps its block buffer up to this size (steps), not beyond (checkpoints). */
#define TRACE_BUF_KEEP (4u << 20)

/* Elements of a shape, or UINT64_MAX when the product overflows. */
static inline uint64_t trace_shape_count(uint8_t ndim, const uint32_t *shape)
{
    uint64_t n = 1;
    for (uint8_t d = 0; d < ndim; d++) {
        if (shape[d] && n > UINT64_MAX / shape[d])
            return UINT64_MAX;
        n *= shape[d];
    }
    return n;
}

/* ---- little-endian packing ----------------------------------------------- */
/* Explicit byte order so a trace is the same file on every host. */

static inline void trace_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void trace_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t trace_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t trace_get_u64(const uint8_t *p)
{
    return (uint64_t)trace_get_u32(p) | (uint64_t)trace_get_u32(p + 4) << 32;
}

static inline uint32_t trace_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline uint64_t trace_f64_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* zlib's crc32 takes an unsigned int length: feed huge blocks in pieces. */
static inline uint32_t trace_crc(uint32_t crc, const uint8_t *p, uint64_t n)
{
    while (n > 0) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, k);
        p += k;
        n -= k;
    }
    return crc;
}

struct trace_ent {          /* one index entry: a block and its step */
    uint64_t step, off;
};

/* ---- version 2 encodings (trace_codec.c) --------------------------------- */
/* STEP: records as in version 1 (0) or as compressed columns (1).
 * CKPT tensor: plain float32 (0), compressed byte planes (1), compressed byte
 * planes of the differences from the previous checkpoint's tensor (2). */
#define TRACE_ENC_PLAIN 0u
#define TRACE_ENC_ZSTD 1u
#define TRACE_ENC_DELTA 2u
#define TRACE_CKPT_FLAG_DELTA 1u  /* CKPT flags: a tensor may have encoding 2 */
#define TRACE_REC_PACKED 116u     /* a record's bytes in the columns (no reserved field) */
/* zstd's level: the bench's choice (tests/bench/RESULTS.md, issue 29). */
#define TRACE_ZSTD_LEVEL 1
/* No zstd frame expands more than this (a 3-byte block header and one byte
 * stand for a run of up to 128 KiB): bounds what a reader allocates. */
#define TRACE_ZSTD_MAX_RATIO 32768u
/* The writer starts a chain of differences anew (a key checkpoint) at every
 * this many checkpoints, so a reader decodes at most this many blocks for
 * one checkpoint; and keeps no base for checkpoints of more elements. */
#define TRACE_CKPT_KEY_EVERY 10u
#define TRACE_DELTA_MAX_ELEMS (UINT64_C(64) << 20)

/* R records as the columns of STEP encoding 1: TRACE_REC_PACKED * R bytes. */
void trace_recs_pack(uint8_t *out, const struct trace_oprec *rec, uint32_t nrec);
void trace_recs_unpack(struct trace_oprec *rec, const uint8_t *in, uint32_t nrec);
/* n float32 values (minus base's, zigzagged, when base is not NULL) as four
 * byte planes of n bytes, least significant first: 4n bytes. */
void trace_planes_pack(uint8_t *out, const float *x, const float *base, uint64_t n);
void trace_planes_unpack(float *x, const uint8_t *in, const float *base, uint64_t n);
/* zstd: contexts are opaque here; pack appends nothing, it fills dst. */
void *trace_zstd_cctx(void);
void *trace_zstd_dctx(void);
void trace_zstd_free_cctx(void *c);
void trace_zstd_free_dctx(void *d);
size_t trace_zstd_bound(size_t n);
/* One frame of src into dst (cap >= trace_zstd_bound(n)); its length. */
size_t trace_zstd_pack(void *cctx, uint8_t *dst, size_t cap, const uint8_t *src, size_t n);
/* Exactly one frame filling src that holds exactly `want` bytes: 0, or -1 with why. */
int trace_zstd_unpack(void *dctx, uint8_t *dst, size_t want, const uint8_t *src, size_t n,
                      char *why, size_t nwhy);

/* ---- reader internals (trace_read.c; used by trace_ckpt.c too) ----------- */

/* A window of the file read with large preads; blocks are served from it. */
struct trace_rd {
    int fd;
    const char *path;
    uint64_t size;              /* fixed at open: a growing file is read as a prefix */
    uint8_t *buf;
    size_t cap, len;
    uint64_t base;              /* file offset of buf[0] */
    void *zd;                   /* zstd decompression context, or NULL */
};

enum trace_blk {
    TRACE_BLK_OK,
    TRACE_BLK_END,              /* no bytes left before the limit */
    TRACE_BLK_SHORT,            /* not even a block head before the limit */
    TRACE_BLK_LONG,             /* its length runs past the limit */
    TRACE_BLK_CRC,
    TRACE_BLK_IO,               /* dt_error set */
};

struct trace_block {
    char tag[5];
    uint64_t len;               /* payload bytes */
    const uint8_t *payload;     /* valid until the next read; NULL if streamed */
};

/* Bytes [off, off + n) of the file; when not buffered, reads `want` (>= n)
 * bytes from off. NULL with dt_error set on an I/O error. */
const uint8_t *trace_rd_get(struct trace_rd *r, uint64_t off, size_t n, size_t want);
/* Read and CRC-check the block at off, which must end by limit (see trace_read.c). */
enum trace_blk trace_block_read(struct trace_rd *r, uint64_t off, uint64_t limit,
                                size_t want, int stream_ckpt, struct trace_block *b);
/* A block tag printable in a message whatever its bytes. */
const char *trace_tag_text(char tag[5]);
/* The zstd decompression context of r, made on first use (freed by its owner). */
void *trace_rd_dctx(struct trace_rd *r);

/* ---- reader: payloads ---------------------------------------------------- */

/* A bounds-checked cursor over a payload: a read past the end sets `bad`
 * and yields zeros, so a parser checks once at the end. */
struct trace_cur {
    const uint8_t *p;
    uint64_t n, i;
    int bad;
};

static inline const uint8_t *trace_cur_take(struct trace_cur *c, uint64_t k)
{
    if (c->bad || c->n - c->i < k) {
        c->bad = 1;
        return NULL;
    }
    const uint8_t *q = c->p + c->i;
    c->i += k;
    return q;
}

static inline uint64_t trace_cur_left(const struct trace_cur *c) { return c->bad ? 0 : c->n - c->i; }

static inline uint8_t trace_cur_u8(struct trace_cur *c)
{
    const uint8_t *q = trace_cur_take(c, 1);
    return q ? *q : 0;
}

static inline uint32_t trace_cur_u32(struct trace_cur *c)
{
    const uint8_t *q = trace_cur_take(c, 4);
    return q ? trace_get_u32(q) : 0;
}

static inline uint64_t trace_cur_u64(struct trace_cur *c)
{
    const uint8_t *q = trace_cur_take(c, 8);
    return q ? trace_get_u64(q) : 0;
}

static inline double trace_cur_f64(struct trace_cur *c)
{
    uint64_t u = trace_cur_u64(c);
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline float trace_f32_of(const uint8_t *q)
{
    uint32_t u = trace_get_u32(q);
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* A length-prefixed string; a NUL inside it would silently cut it short. */
static inline char *trace_cur_str(struct trace_cur *c)
{
    uint32_t n = trace_cur_u32(c);
    const uint8_t *q = trace_cur_take(c, n);
    if (!q || memchr(q, 0, n)) {
        c->bad = 1;
        return NULL;
    }
    char *s = dt_malloc((size_t)n + 1);
    memcpy(s, q, n);
    s[n] = 0;
    return s;
}

/* The verdict of a parser: 0, or -1 with `why` filled. */
static inline int trace_cur_end(const struct trace_cur *c, const char *what, char *why, size_t nwhy)
{
    if (c->bad)
        snprintf(why, nwhy, "%s payload shorter than its counts say", what);
    else if (c->i != c->n)
        snprintf(why, nwhy, "%s payload has %llu bytes too many", what,
                 (unsigned long long)(c->n - c->i));
    else
        return 0;
    return -1;
}

#define TRACE_WHY 160

/* Parse a CKPT payload of the file's version; base is the previous
 * checkpoint decoded (NULL for none), needed by a delta block. 0, or -1 with why. */
int trace_parse_ckpt(uint32_t version, void *dctx, const uint8_t *p, uint64_t n,
                     const struct trace_ckpt *base, struct trace_ckpt *ck, char *why);

#endif
