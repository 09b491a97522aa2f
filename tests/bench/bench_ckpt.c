/* bench_ckpt.c: the compressors a trace's checkpoints and op records could
 * use, measured on the checkpoints and records of a real trace: total size,
 * and write (filter + compress) and read (decompress + unfilter) speed on
 * one core, every round trip checked bit for bit. Prints Markdown tables.
 * LZ4 and Blosc rows appear when configure found them (they are not
 * divtrace dependencies, only candidates).
 * Usage: bench_ckpt TRACE.dtr */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#ifdef HAVE_LZ4
#include <lz4.h>
#endif
#ifdef HAVE_BLOSC
#include <blosc.h>
#endif

#include "trace.h"
#include "trace_impl.h"
#include "util.h"

enum bench_comp {
    COMP_NONE, COMP_ZLIB, COMP_ZSTD, COMP_LZ4,
    COMP_BLOSC_LZ4, COMP_BLOSC_ZSTD, COMP_BLOSC_ZSTD_BIT,
};
enum bench_filter { FILT_NONE, FILT_SHUFFLE, FILT_DELTA };

struct bench_codec {
    const char *name;
    enum bench_filter filter;
    enum bench_comp comp;
    int level;
};

static const struct bench_codec bench_codecs[] = {
    {"none (float32 as is, format 1)", FILT_NONE, COMP_NONE, 0},
    {"zlib -6", FILT_NONE, COMP_ZLIB, 6},
    {"zstd -3", FILT_NONE, COMP_ZSTD, 3},
    {"shuffle + zlib -6", FILT_SHUFFLE, COMP_ZLIB, 6},
#ifdef HAVE_LZ4
    {"shuffle + lz4", FILT_SHUFFLE, COMP_LZ4, 0},
#endif
    {"shuffle + zstd -1", FILT_SHUFFLE, COMP_ZSTD, 1},
    {"shuffle + zstd -3", FILT_SHUFFLE, COMP_ZSTD, 3},
    {"shuffle + zstd -9", FILT_SHUFFLE, COMP_ZSTD, 9},
#ifdef HAVE_BLOSC
    {"blosc 1 shuffle + lz4 (clevel 5)", FILT_NONE, COMP_BLOSC_LZ4, 5},
    {"blosc 1 shuffle + zstd (clevel 5)", FILT_NONE, COMP_BLOSC_ZSTD, 5},
    {"blosc 1 bitshuffle + zstd (clevel 5)", FILT_NONE, COMP_BLOSC_ZSTD_BIT, 5},
#endif
#ifdef HAVE_LZ4
    {"delta + shuffle + lz4", FILT_DELTA, COMP_LZ4, 0},
#endif
    {"delta + shuffle + zstd -1 (format 2)", FILT_DELTA, COMP_ZSTD, 1},
    {"delta + shuffle + zstd -3", FILT_DELTA, COMP_ZSTD, 3},
    {"delta + shuffle + zstd -9", FILT_DELTA, COMP_ZSTD, 9},
};

static ZSTD_CCtx *bench_zc;
static ZSTD_DCtx *bench_zd;

static size_t bench_bound(size_t n) { return ZSTD_compressBound(n) + n / 8 + 4096; }

static size_t bench_compress(const struct bench_codec *c, const uint8_t *src, size_t n,
                             uint8_t *dst, size_t cap)
{
    switch (c->comp) {
    case COMP_NONE:
        memcpy(dst, src, n);
        return n;
    case COMP_ZLIB: {
        uLongf len = (uLongf)cap;
        DT_ASSERT(compress2(dst, &len, src, (uLong)n, c->level) == Z_OK, "zlib failed");
        return len;
    }
    case COMP_ZSTD: {
        size_t r = ZSTD_compressCCtx(bench_zc, dst, cap, src, n, c->level);
        DT_ASSERT(!ZSTD_isError(r), "zstd failed");
        return r;
    }
#ifdef HAVE_LZ4
    case COMP_LZ4: {
        int r = LZ4_compress_default((const char *)src, (char *)dst, (int)n, (int)cap);
        DT_ASSERT(r > 0, "lz4 failed");
        return (size_t)r;
    }
#endif
#ifdef HAVE_BLOSC
    case COMP_BLOSC_LZ4:
    case COMP_BLOSC_ZSTD:
    case COMP_BLOSC_ZSTD_BIT: {
        int r = blosc_compress_ctx(c->level,
                                   c->comp == COMP_BLOSC_ZSTD_BIT ? BLOSC_BITSHUFFLE : BLOSC_SHUFFLE,
                                   4, n, src, dst, cap,
                                   c->comp == COMP_BLOSC_LZ4 ? "lz4" : "zstd", 0, 1);
        DT_ASSERT(r > 0, "blosc failed");
        return (size_t)r;
    }
#endif
    default:
        break;
    }
    DT_ASSERT(0, "codec %s not built", c->name);
    return 0;
}

static void bench_decompress(const struct bench_codec *c, const uint8_t *src, size_t n,
                             uint8_t *dst, size_t want)
{
    int ok = 0;
    switch (c->comp) {
    case COMP_NONE:
        memcpy(dst, src, n);
        ok = n == want;
        break;
    case COMP_ZLIB: {
        uLongf len = (uLongf)want;
        ok = uncompress(dst, &len, src, (uLong)n) == Z_OK && len == want;
        break;
    }
    case COMP_ZSTD:
        ok = ZSTD_decompressDCtx(bench_zd, dst, want, src, n) == want;
        break;
#ifdef HAVE_LZ4
    case COMP_LZ4:
        ok = LZ4_decompress_safe((const char *)src, (char *)dst, (int)n, (int)want) == (int)want;
        break;
#endif
#ifdef HAVE_BLOSC
    case COMP_BLOSC_LZ4:
    case COMP_BLOSC_ZSTD:
    case COMP_BLOSC_ZSTD_BIT:
        ok = blosc_decompress_ctx(src, dst, want, 1) == (int)want;
        break;
#endif
    default:
        break;
    }
    DT_ASSERT(ok, "%s: decompression failed", c->name);
}

/* The tensors of every checkpoint, in file order. */
struct bench_set {
    uint32_t n;
    struct trace_ckpt *ck;
    uint64_t bytes;
};

/* One codec over every checkpoint: compressed bytes, write and read seconds. */
static void bench_one(const struct bench_set *s, const struct bench_codec *c, uint64_t *out_bytes,
                      double *wsec, double *rsec)
{
    uint64_t total = 0;
    double tw = 0, tr = 0;
    for (uint32_t k = 0; k < s->n; k++) {
        const struct trace_ckpt *ck = &s->ck[k], *prev = k % TRACE_CKPT_KEY_EVERY ? &s->ck[k - 1] : NULL;
        for (uint32_t i = 0; i < ck->ntensors; i++) {
            const struct trace_tensor *t = &ck->t[i];
            if (!t->count)
                continue;
            size_t n = (size_t)t->count * 4, cap = bench_bound(n);
            const float *base = c->filter == FILT_DELTA && prev ? prev->t[i].data : NULL;
            uint8_t *f = dt_malloc(n), *z = dt_malloc(cap), *back = dt_malloc(n);
            float *x = dt_malloc(n);
            double t0 = dt_now();
            if (c->filter == FILT_NONE) {
                for (uint64_t e = 0; e < t->count; e++)
                    trace_put_u32(f + 4 * e, trace_f32_bits(t->data[e]));
            } else {
                trace_planes_pack(f, t->data, base, t->count);
            }
            size_t zn = bench_compress(c, f, n, z, cap);
            double t1 = dt_now();
            bench_decompress(c, z, zn, back, n);
            if (c->filter == FILT_NONE) {
                for (uint64_t e = 0; e < t->count; e++) {
                    uint32_t u = trace_get_u32(back + 4 * e);
                    memcpy(&x[e], &u, 4);
                }
            } else {
                trace_planes_unpack(x, back, base, t->count);
            }
            double t2 = dt_now();
            DT_ASSERT(memcmp(x, t->data, n) == 0, "%s: %s does not round-trip", c->name, t->name);
            tw += t1 - t0;
            tr += t2 - t1;
            total += zn;
            free(f);
            free(z);
            free(back);
            free(x);
        }
    }
    *out_bytes = total;
    *wsec = tw;
    *rsec = tr;
}

/* The op records: format 1's rows, zstd over them, and format 2's columns. */
static void bench_records(const struct trace_file *tf)
{
    uint64_t raw = 0, z_rows = 0, z_cols[2] = {0, 0};
    double tw[3] = {0, 0, 0};
    const int levels[2] = {1, 3};
    for (uint64_t s = 0; s < tf->nsteps; s++) {
        const struct trace_step *st = &tf->steps[s];
        size_t n = (size_t)st->nrec * TRACE_REC_LEN, np = (size_t)st->nrec * TRACE_REC_PACKED;
        if (!n)
            continue;
        uint8_t *rows = dt_calloc(n, 1), *cols = dt_malloc(np), *z = dt_malloc(bench_bound(n));
        for (uint32_t j = 0; j < st->nrec; j++) {
            const struct trace_oprec *r = &st->rec[j];
            uint8_t *q = rows + (size_t)j * TRACE_REC_LEN;
            trace_put_u32(q, r->op);
            trace_put_u64(q + 8, r->hash);
            trace_put_u64(q + 16, trace_f64_bits(r->l2));
            trace_put_u64(q + 24, trace_f64_bits(r->min));
            trace_put_u64(q + 32, trace_f64_bits(r->max));
            trace_put_u64(q + 40, r->nan);
            trace_put_u64(q + 48, r->inf);
            for (int k = 0; k < TRACE_SKETCH_LEN; k++)
                trace_put_u32(q + 56 + 4 * k, trace_f32_bits(r->sketch[k]));
        }
        raw += n;
        double t0 = dt_now();
        z_rows += ZSTD_compressCCtx(bench_zc, z, bench_bound(n), rows, n, 3);
        tw[0] += dt_now() - t0;
        for (int l = 0; l < 2; l++) {
            t0 = dt_now();
            trace_recs_pack(cols, st->rec, st->nrec);
            z_cols[l] += ZSTD_compressCCtx(bench_zc, z, bench_bound(n), cols, np, levels[l]);
            tw[1 + l] += dt_now() - t0;
        }
        free(rows);
        free(cols);
        free(z);
    }
    printf("| records of %llu steps | bytes | of format 1 | write MB/s |\n|---|---:|---:|---:|\n",
           (unsigned long long)tf->nsteps);
    printf("| 120-byte rows (format 1) | %llu | 100%% | |\n", (unsigned long long)raw);
    printf("| zstd -3 of the rows | %llu | %.1f%% | %.0f |\n", (unsigned long long)z_rows,
           100.0 * (double)z_rows / (double)raw, (double)raw / 1e6 / tw[0]);
    for (int l = 0; l < 2; l++)
        printf("| shuffled columns + zstd -%d%s | %llu | %.1f%% | %.0f |\n", levels[l],
               levels[l] == TRACE_ZSTD_LEVEL ? " (format 2)" : "", (unsigned long long)z_cols[l],
               100.0 * (double)z_cols[l] / (double)raw, (double)raw / 1e6 / tw[1 + l]);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bench_ckpt TRACE.dtr\n");
        return 2;
    }
    struct trace_file *tf;
    if (trace_open(&tf, argv[1]) < 0) {
        fprintf(stderr, "bench_ckpt: %s\n", dt_error());
        return 2;
    }
    bench_zc = ZSTD_createCCtx();
    bench_zd = ZSTD_createDCtx();
    struct bench_set s = {tf->nckpt, dt_calloc(tf->nckpt ? tf->nckpt : 1, sizeof *s.ck), 0};
    for (uint32_t k = 0; k < tf->nckpt; k++) {
        if (trace_read_ckpt(tf, k, &s.ck[k]) < 0) {
            fprintf(stderr, "bench_ckpt: %s\n", dt_error());
            return 2;
        }
        for (uint32_t i = 0; i < s.ck[k].ntensors; i++)
            s.bytes += s.ck[k].t[i].count * 4;
    }
    const char *model = trace_config_get(&tf->cfg, "model");
    printf("%u checkpoints of a %s trace (%s), %.2f MB of float32; deltas against the "
           "checkpoint before, a key every %u\n\n",
           s.n, model ? model : "?", argv[1], (double)s.bytes / 1e6, TRACE_CKPT_KEY_EVERY);
    printf("| checkpoints | MB | of float32 | write MB/s | read MB/s |\n"
           "|---|---:|---:|---:|---:|\n");
    for (size_t c = 0; c < sizeof bench_codecs / sizeof bench_codecs[0]; c++) {
        uint64_t z;
        double w, r;
        bench_one(&s, &bench_codecs[c], &z, &w, &r);
        printf("| %s | %.2f | %.1f%% | %.0f | %.0f |\n", bench_codecs[c].name, (double)z / 1e6,
               100.0 * (double)z / (double)s.bytes, (double)s.bytes / 1e6 / w,
               (double)s.bytes / 1e6 / r);
    }
    printf("\n");
    bench_records(tf);
    for (uint32_t k = 0; k < s.n; k++)
        trace_ckpt_free(&s.ck[k]);
    free(s.ck);
    trace_close(tf);
    ZSTD_freeCCtx(bench_zc);
    ZSTD_freeDCtx(bench_zd);
    return 0;
}
