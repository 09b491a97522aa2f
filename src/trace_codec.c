/* trace_codec.c: the encodings of format version 2 (divtrace-trace(5)): op
 * records as byte-shuffled columns and checkpoint tensors as byte planes,
 * optionally as differences from the previous checkpoint, each compressed
 * as one zstd frame. Shared by the writer (trace.c) and the readers
 * (trace_read.c, trace_ckpt.c). */
#include "trace.h"
#include "trace_impl.h"
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <zstd.h>

/* ---- op records as columns ----------------------------------------------- */

/* Byte k of v as byte k*n + i of the column of n values of w bytes. */
static void trace_col_put(uint8_t *col, size_t n, size_t i, int w, uint64_t v)
{
    for (int k = 0; k < w; k++)
        col[(size_t)k * n + i] = (uint8_t)(v >> (8 * k));
}

static uint64_t trace_col_get(const uint8_t *col, size_t n, size_t i, int w)
{
    uint64_t v = 0;
    for (int k = w - 1; k >= 0; k--)
        v = v << 8 | col[(size_t)k * n + i];
    return v;
}

void trace_recs_pack(uint8_t *out, const struct trace_oprec *rec, uint32_t nrec)
{
    size_t n = nrec;
    uint8_t *op = out, *hash = op + 4 * n, *l2 = hash + 8 * n, *mn = l2 + 8 * n,
            *mx = mn + 8 * n, *nan = mx + 8 * n, *inf = nan + 8 * n, *sk = inf + 8 * n;
    for (size_t i = 0; i < n; i++) {
        const struct trace_oprec *r = &rec[i];
        trace_col_put(op, n, i, 4, r->op);
        trace_col_put(hash, n, i, 8, r->hash);
        trace_col_put(l2, n, i, 8, trace_f64_bits(r->l2));
        trace_col_put(mn, n, i, 8, trace_f64_bits(r->min));
        trace_col_put(mx, n, i, 8, trace_f64_bits(r->max));
        trace_col_put(nan, n, i, 8, r->nan);
        trace_col_put(inf, n, i, 8, r->inf);
        for (int k = 0; k < TRACE_SKETCH_LEN; k++)
            trace_col_put(sk, n * TRACE_SKETCH_LEN, i * TRACE_SKETCH_LEN + (size_t)k, 4,
                          trace_f32_bits(r->sketch[k]));
    }
}

static double trace_f64_of_bits(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

void trace_recs_unpack(struct trace_oprec *rec, const uint8_t *in, uint32_t nrec)
{
    size_t n = nrec;
    const uint8_t *op = in, *hash = op + 4 * n, *l2 = hash + 8 * n, *mn = l2 + 8 * n,
                  *mx = mn + 8 * n, *nan = mx + 8 * n, *inf = nan + 8 * n, *sk = inf + 8 * n;
    for (size_t i = 0; i < n; i++) {
        struct trace_oprec *r = &rec[i];
        r->op = (uint32_t)trace_col_get(op, n, i, 4);
        r->hash = trace_col_get(hash, n, i, 8);
        r->l2 = trace_f64_of_bits(trace_col_get(l2, n, i, 8));
        r->min = trace_f64_of_bits(trace_col_get(mn, n, i, 8));
        r->max = trace_f64_of_bits(trace_col_get(mx, n, i, 8));
        r->nan = trace_col_get(nan, n, i, 8);
        r->inf = trace_col_get(inf, n, i, 8);
        for (int k = 0; k < TRACE_SKETCH_LEN; k++) {
            uint32_t u = (uint32_t)trace_col_get(sk, n * TRACE_SKETCH_LEN,
                                                 i * TRACE_SKETCH_LEN + (size_t)k, 4);
            memcpy(&r->sketch[k], &u, sizeof u);
        }
    }
}

/* ---- tensors as byte planes ---------------------------------------------- */

/* The difference of two bit patterns, modulo 2^32, zigzag-mapped so that
 * small differences of either sign have small codes. */
static uint32_t trace_zigzag(uint32_t d) { return d << 1 ^ (0u - (d >> 31)); }
static uint32_t trace_unzigzag(uint32_t z) { return z >> 1 ^ (0u - (z & 1)); }

void trace_planes_pack(uint8_t *out, const float *x, const float *base, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint32_t u = trace_f32_bits(x[i]);
        if (base)
            u = trace_zigzag(u - trace_f32_bits(base[i]));
        out[i] = (uint8_t)u;
        out[n + i] = (uint8_t)(u >> 8);
        out[2 * n + i] = (uint8_t)(u >> 16);
        out[3 * n + i] = (uint8_t)(u >> 24);
    }
}

void trace_planes_unpack(float *x, const uint8_t *in, const float *base, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)in[i] | (uint32_t)in[n + i] << 8 | (uint32_t)in[2 * n + i] << 16 |
                     (uint32_t)in[3 * n + i] << 24;
        if (base)
            u = trace_unzigzag(u) + trace_f32_bits(base[i]);
        memcpy(&x[i], &u, sizeof u);
    }
}

/* ---- zstd frames --------------------------------------------------------- */

size_t trace_zstd_bound(size_t n) { return ZSTD_compressBound(n); }

size_t trace_zstd_pack(void *cctx, uint8_t *dst, size_t cap, const uint8_t *src, size_t n)
{
    /* With cap >= ZSTD_compressBound(n) only a failed allocation fails. */
    size_t r = ZSTD_compressCCtx(cctx, dst, cap, src, n, TRACE_ZSTD_LEVEL);
    DT_ASSERT(!ZSTD_isError(r), "zstd compression of %zu bytes failed: %s", n,
              ZSTD_getErrorName(r));
    return r;
}

int trace_zstd_unpack(void *dctx, uint8_t *dst, size_t want, const uint8_t *src, size_t n,
                      char *why, size_t nwhy)
{
    unsigned long long cs = ZSTD_getFrameContentSize(src, n);
    if (cs == ZSTD_CONTENTSIZE_ERROR || cs == ZSTD_CONTENTSIZE_UNKNOWN) {
        snprintf(why, nwhy, "not a zstd frame with its content size");
        return -1;
    }
    if (cs != want) {
        snprintf(why, nwhy, "zstd frame of %llu bytes where %zu are expected", cs, want);
        return -1;
    }
    size_t fs = ZSTD_findFrameCompressedSize(src, n);
    if (ZSTD_isError(fs) || fs != n) {
        snprintf(why, nwhy, "zstd frame does not fill its %zu bytes", n);
        return -1;
    }
    size_t r = ZSTD_decompressDCtx(dctx, dst, want, src, n);
    if (ZSTD_isError(r) || r != want) {
        snprintf(why, nwhy, "zstd frame does not decompress (%s)",
                 ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short");
        return -1;
    }
    return 0;
}

void *trace_zstd_cctx(void)
{
    ZSTD_CCtx *c = ZSTD_createCCtx();
    DT_ASSERT(c, "out of memory for a zstd compression context");
    return c;
}

void *trace_zstd_dctx(void)
{
    ZSTD_DCtx *d = ZSTD_createDCtx();
    DT_ASSERT(d, "out of memory for a zstd decompression context");
    return d;
}

void trace_zstd_free_cctx(void *c) { ZSTD_freeCCtx(c); }
void trace_zstd_free_dctx(void *d) { ZSTD_freeDCtx(d); }
