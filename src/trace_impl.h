/* trace_impl.h: what the trace writer (trace.c) and reader (trace_read.c)
 * share: the sizes fixed by format version 1 and the little-endian packing.
 * The byte layout is divtrace-trace(5); these files and that page change
 * together. */
#ifndef DT_TRACE_IMPL_H
#define DT_TRACE_IMPL_H

#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "trace.h"

/* Sizes fixed by format version 1 (divtrace-trace(5)). */
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

#endif
