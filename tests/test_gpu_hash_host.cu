/* test_gpu_hash_host.cu: the host side of src/gpu/gpu_hash.cuh, no GPU
 * needed. Its XXH3-64 against libxxhash for every length class; the lane
 * shares of the cooperative long path (32 lanes simulated here exactly as
 * gpu_trace_kern.cuh's warps and blocks combine them: the generic warp path, the
 * full 16 KiB leaf, the block-wide root) against the sequential algorithm;
 * the whole tree against hash_tensor(); the per-lane statistics and sign
 * table against stats.c. What stays unchecked here is only the device's
 * plumbing (loads, shuffles, launches): tests/gpu/test_gpu_trace.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

extern "C" {
#include <cmocka.h> /* declares C functions without C linkage in C++ */

#include "hash.h"
#include "stats.h"
}
#include "gpu/gpu_hash.cuh"

#define SK TRACE_SKETCH_LEN
#define TILE_LEAVES 8        /* gpu_trace_kern.cuh's GT_TILE_LEAVES */
#define SPLIT_LEAVES 512     /* gpu_trace_kern.cuh's GT_SPLIT_LEAVES */
#define ROOT_CHUNK 256       /* gpu_trace_kern.cuh's GT_ROOT_CHUNK */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_bytes(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rng_next(&s) >> 56);
}

/* ---- length classes ---- */

static const char *const class_name[] = {"0", "1-3", "4-8", "9-16", "17-128", "129-240", ">240"};
enum { NCLASS = 7 };

static int len_class(size_t len)
{
    return len == 0 ? 0 : len <= 3 ? 1 : len <= 8 ? 2 : len <= 16 ? 3 : len <= 128 ? 4 : len <= 240 ? 5 : 6;
}

struct tally {
    long tried[NCLASS], wrong[NCLASS];
};

static void tally_check(const struct tally *t, const char *what, int from_class)
{
    for (int c = from_class; c < NCLASS; c++) {
        if (t->wrong[c])
            fprintf(stderr, "%s: %ld of %ld lengths in class %s wrong\n", what, t->wrong[c], t->tried[c],
                    class_name[c]);
        assert_int_equal(t->wrong[c], 0);
        assert_true(t->tried[c] > 0); /* every class was exercised */
    }
}

/* The lengths beyond 2048: around multiples of 64, 1024 and 16384 (the
 * stripe, the block, the leaf) and random ones, up to 70000. */
static size_t long_lengths(size_t *out, size_t cap)
{
    size_t n = 0;
    static const size_t step[] = {64, 1024, 16384};
    static const long delta[] = {-65, -64, -17, -16, -8, -4, -1, 0, 1, 4, 8, 16, 63, 64, 65};
    for (int s = 0; s < 3; s++)
        for (size_t m = step[s]; m <= 70000; m += step[s] * (s == 0 ? 7 : 1))
            for (size_t d = 0; d < sizeof delta / sizeof delta[0]; d++) {
                long len = (long)m + delta[d];
                if (len > 2048 && len <= 70000 && n < cap)
                    out[n++] = (size_t)len;
            }
    uint64_t r = 7;
    for (int i = 0; i < 400 && n < cap; i++)
        out[n++] = 2049 + rng_next(&r) % (70000 - 2048);
    return n;
}

/* ---- the cooperative long path, simulated lane by lane ---- */

struct host_ld {
    const uint8_t *p;
    __host__ __device__ void operator()(size_t off, uint64_t *a, uint64_t *b) const
    {
        *a = gh_read64(p + off);
        *b = gh_read64(p + off + 8);
    }
};

struct sim_warp {
    struct gh_lane lane[32];
    uint64_t a[4], b[4]; /* acc[2q], acc[2q+1] as the lanes of q hold them */
};

static void sim_init(struct sim_warp *w)
{
    for (int l = 0; l < 32; l++)
        gh_lane_init(&w->lane[l], l);
    for (int q = 0; q < 4; q++) {
        w->a[q] = gh_init_acc(2 * q);
        w->b[q] = gh_init_acc(2 * q + 1);
    }
}

/* One full block at p: 32 lanes' shares (gh_lane_block, or
 * gh_lane_leaf_end), summed over the 8 lanes of each q into sa, sb. */
static void sim_block(const struct sim_warp *w, const uint8_t *p, int leaf_end, uint64_t sa[4],
                      uint64_t sb[4])
{
    for (int q = 0; q < 4; q++)
        sa[q] = sb[q] = 0;
    for (int l = 0; l < 32; l++) {
        uint64_t pa = 0, pb = 0;
        uint64_t u0a = gh_read64(p + 16 * l), u0b = gh_read64(p + 16 * l + 8);
        uint64_t u1a = gh_read64(p + 512 + 16 * l), u1b = gh_read64(p + 512 + 16 * l + 8);
        if (leaf_end)
            gh_lane_leaf_end(&w->lane[l], u0a, u0b, u1a, u1b, &pa, &pb);
        else
            gh_lane_block(&w->lane[l], u0a, u0b, u1a, u1b, &pa, &pb);
        sa[l & 3] += pa;
        sb[l & 3] += pb;
    }
}

static void sim_tail(const struct sim_warp *w, const uint8_t *p, size_t len, uint64_t sa[4], uint64_t sb[4])
{
    struct host_ld ld = {p};
    for (int q = 0; q < 4; q++)
        sa[q] = sb[q] = 0;
    for (int l = 0; l < 32; l++) {
        uint64_t pa = 0, pb = 0;
        gh_lane_tail(&w->lane[l], ld, len, &pa, &pb);
        sa[l & 3] += pa;
        sb[l & 3] += pb;
    }
}

static uint64_t sim_merge(const uint64_t a[4], const uint64_t b[4], size_t len)
{
    uint64_t mix = 0;
    for (int q = 0; q < 4; q++)
        mix += gh_merge_pair(a[q], b[q], q);
    return gh_merge_final(mix, len);
}

/* gpu_trace_kern.cuh's gt_warp_long: one warp, any length > 240. */
static uint64_t sim_warp_long(const uint8_t *p, size_t len)
{
    struct sim_warp w;
    uint64_t sa[4], sb[4];
    sim_init(&w);
    size_t nb = (len - 1) / GH_BLOCK;
    for (size_t k = 0; k < nb; k++) {
        sim_block(&w, p + k * GH_BLOCK, 0, sa, sb);
        for (int q = 0; q < 4; q++) {
            w.a[q] = gh_scramble(w.a[q] + sa[q], w.lane[q].ca);
            w.b[q] = gh_scramble(w.b[q] + sb[q], w.lane[q].cb);
        }
    }
    sim_tail(&w, p, len, sa, sb);
    for (int q = 0; q < 4; q++) {
        w.a[q] += sa[q];
        w.b[q] += sb[q];
    }
    return sim_merge(w.a, w.b, len);
}

/* gpu_trace_kern.cuh's gt_leaf_full: 16 blocks, the last one keyed by
 * gh_lane_leaf_end and not scrambled. */
static uint64_t sim_leaf_full(const uint8_t *p)
{
    struct sim_warp w;
    uint64_t sa[4], sb[4];
    sim_init(&w);
    for (int k = 0; k < 16; k++) {
        sim_block(&w, p + (size_t)k * GH_BLOCK, k == 15, sa, sb);
        for (int q = 0; q < 4; q++) {
            w.a[q] += sa[q];
            w.b[q] += sb[q];
            if (k < 15) {
                w.a[q] = gh_scramble(w.a[q], w.lane[q].ca);
                w.b[q] = gh_scramble(w.b[q], w.lane[q].cb);
            }
        }
    }
    return sim_merge(w.a, w.b, GH_LEAF);
}

/* gpu_trace_kern.cuh's gt_root_hash: warps compute the blocks' shares a chunk at
 * a time, 8 threads (one per accumulator) run the scrambles, warp 0 adds
 * the tail. chunk: blocks per round (the device's ROOT_CHUNK; any value
 * must give the same digest). */
static uint64_t sim_root(const uint8_t *p, size_t len, size_t chunk)
{
    if (len <= GH_MIDSIZE_MAX)
        return gh_xxh3_64(p, len);
    struct sim_warp w;
    sim_init(&w);
    uint64_t acc[8], (*share)[8] = (uint64_t(*)[8])malloc(chunk * sizeof *share);
    assert_non_null(share);
    for (int t = 0; t < 8; t++)
        acc[t] = gh_init_acc(t);
    size_t nb = (len - 1) / GH_BLOCK;
    for (size_t c0 = 0; c0 < nb; c0 += chunk) {
        size_t cn = nb - c0 < chunk ? nb - c0 : chunk;
        for (size_t i = 0; i < cn; i++) {
            uint64_t sa[4], sb[4];
            sim_block(&w, p + (c0 + i) * GH_BLOCK, 0, sa, sb);
            for (int q = 0; q < 4; q++) {
                share[i][2 * q] = sa[q];
                share[i][2 * q + 1] = sb[q];
            }
        }
        for (int t = 0; t < 8; t++)
            for (size_t i = 0; i < cn; i++)
                acc[t] = gh_scramble(acc[t] + share[i][t], gh_secret_word(GH_SEC_SCRAMBLE / 8 + t));
    }
    free(share);
    uint64_t sa[4], sb[4], a[4], b[4];
    sim_tail(&w, p, len, sa, sb);
    for (int q = 0; q < 4; q++) {
        a[q] = acc[2 * q] + sa[q];
        b[q] = acc[2 * q + 1] + sb[q];
    }
    return sim_merge(a, b, len);
}

/* The device's tree: full leaves by the leaf path, a short last leaf by
 * gh_xxh3_64, a longer one by the generic warp path; then the root. */
static uint64_t sim_tree(const float *x, size_t n)
{
    size_t m = (n + 4095) / 4096;
    uint8_t *dig = (uint8_t *)malloc(8 * m + 8);
    assert_non_null(dig);
    for (size_t l = 0; l < m; l++) {
        const uint8_t *p = (const uint8_t *)(x + 4096 * l);
        size_t len = 4 * (n - 4096 * l < 4096 ? n - 4096 * l : 4096);
        uint64_t h = len == GH_LEAF ? sim_leaf_full(p)
                     : len <= GH_MIDSIZE_MAX ? gh_xxh3_64(p, len) : sim_warp_long(p, len);
        for (int k = 0; k < 8; k++)
            dig[8 * l + k] = (uint8_t)(h >> (8 * k));
    }
    uint64_t root = sim_root(dig, 8 * m, ROOT_CHUNK);
    free(dig);
    return root;
}

/* ---- tests ---- */

#define BUF_BYTES 70016

/* gh_xxh3_64 and the cooperative paths against libxxhash: every length up
 * to 2048 at four alignments, then the long list. */
static void test_xxh3_lengths(void **state)
{
    (void)state;
    uint8_t *buf = (uint8_t *)malloc(BUF_BYTES + 64);
    assert_non_null(buf);
    struct tally seq, warp;
    memset(&seq, 0, sizeof seq);
    memset(&warp, 0, sizeof warp);
    for (size_t len = 0; len <= 2048; len++)
        for (int al = 0; al < 4; al++) {
            uint8_t *p = buf + al;
            fill_bytes(p, len, 1000 * len + (size_t)al);
            uint64_t want = XXH3_64bits(p, len);
            int c = len_class(len);
            seq.tried[c]++;
            seq.wrong[c] += gh_xxh3_64(p, len) != want;
            if (len > GH_MIDSIZE_MAX) {
                warp.tried[c]++;
                warp.wrong[c] += sim_warp_long(p, len) != want;
            }
        }
    size_t lens[1024];
    size_t nl = long_lengths(lens, 1024);
    assert_true(nl > 400);
    for (size_t i = 0; i < nl; i++) {
        size_t len = lens[i];
        fill_bytes(buf, len, 77 + len);
        uint64_t want = XXH3_64bits(buf, len);
        seq.tried[6]++;
        seq.wrong[6] += gh_xxh3_64(buf, len) != want;
        warp.tried[6]++;
        warp.wrong[6] += sim_warp_long(buf, len) != want;
    }
    tally_check(&seq, "gh_xxh3_64", 0);
    tally_check(&warp, "warp long path", 6);
    free(buf);
}

/* Contents that stress the multiplies: all zero, all ones, one bit set. */
static void test_xxh3_special(void **state)
{
    (void)state;
    static uint8_t buf[GH_LEAF];
    static const size_t lens[] = {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 1025, 16384};
    for (int kind = 0; kind < 3; kind++) {
        memset(buf, kind == 1 ? 0xff : 0, sizeof buf);
        if (kind == 2)
            buf[1000] = 0x10;
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
            size_t len = lens[i];
            assert_true(gh_xxh3_64(buf, len) == XXH3_64bits(buf, len));
            if (len > GH_MIDSIZE_MAX)
                assert_true(sim_warp_long(buf, len) == XXH3_64bits(buf, len));
        }
        assert_true(sim_leaf_full(buf) == XXH3_64bits(buf, GH_LEAF));
    }
}

/* The full-leaf path (16 blocks, last stripe in lanes 28..31). */
static void test_leaf_full(void **state)
{
    (void)state;
    static uint8_t buf[GH_LEAF];
    for (int r = 0; r < 64; r++) {
        fill_bytes(buf, sizeof buf, 5000 + (uint64_t)r);
        assert_true(sim_leaf_full(buf) == XXH3_64bits(buf, GH_LEAF));
        assert_true(gh_xxh3_64(buf, GH_LEAF) == XXH3_64bits(buf, GH_LEAF));
    }
}

/* The quad layout's long path (gh_quad_long, four lanes each owning an
 * accumulator pair) against libxxhash, every length from 244 to 2048 that
 * is a multiple of 4, whole leaves, and lengths up to a leaf at random. */
static uint64_t sim_quad(const uint8_t *p, size_t len)
{
    struct host_ld ld = {p};
    uint64_t mix = 0;
    for (int q = 0; q < 4; q++) {
        uint64_t a, b;
        gh_quad_long(q, ld, len, &a, &b);
        mix += gh_merge_pair(a, b, q);
    }
    return gh_merge_final(mix, len);
}

static void test_quad_long(void **state)
{
    (void)state;
    static uint8_t buf[2 * GH_LEAF];
    fill_bytes(buf, sizeof buf, 777);
    for (size_t len = 244; len <= 2048; len += 4)
        if (sim_quad(buf, len) != XXH3_64bits(buf, len)) {
            fprintf(stderr, "quad long path, %zu bytes: wrong\n", len);
            fail();
        }
    uint64_t r = 31;
    for (int i = 0; i < 300; i++) {
        size_t len = i < 64 ? GH_LEAF : 244 + 4 * (size_t)(rng_next(&r) % ((2 * GH_LEAF - 244) / 4 + 1));
        fill_bytes(buf, len, 9000 + (uint64_t)i);
        if (sim_quad(buf, len) != XXH3_64bits(buf, len)) {
            fprintf(stderr, "quad long path, %zu bytes: wrong\n", len);
            fail();
        }
    }
}

/* The block-wide root with chunks of any size, over digest arrays of
 * 8 m bytes: short, 1 KiB block boundaries, several chunks. */
static void test_root(void **state)
{
    (void)state;
    size_t cap = 8 * 5000;
    uint8_t *buf = (uint8_t *)malloc(cap);
    assert_non_null(buf);
    static const size_t ms[] = {0, 1, 2, 15, 16, 17, 29, 30, 31, 32, 33, 127, 128, 129, 255, 256,
                                257, 383, 384, 385, 1000, 1023, 1024, 1025, 2442, 4999, 5000};
    static const size_t chunks[] = {1, 2, 3, 128, ROOT_CHUNK};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        size_t len = 8 * ms[i];
        fill_bytes(buf, len, 31 * len + 1);
        uint64_t want = XXH3_64bits(buf, len);
        for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++)
            if (sim_root(buf, len, chunks[c]) != want) {
                fprintf(stderr, "root of %zu leaves, chunk %zu: wrong\n", ms[i], chunks[c]);
                fail();
            }
    }
    free(buf);
}

/* The device's whole tree against hash_tensor(). */
static void test_tree(void **state)
{
    (void)state;
    static const size_t ns[] = {0, 1, 3, 59, 60, 61, 64, 65, 255, 256, 1023, 1024, 4095, 4096, 4097,
                                8191, 16383, 16384, 16385, 65536 * 3 + 7, 4096 * 30, 4096 * 30 + 1,
                                4096 * 31 + 5, 4096 * 128, 4096 * 128 + 1, 4096 * 129 + 100,
                                4096 * 300 + 3};
    size_t most = 4096 * 300 + 3;
    float *x = (float *)malloc(4 * most);
    assert_non_null(x);
    fill_bytes((uint8_t *)x, 4 * most, 99);
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        uint64_t want = hash_tensor(x, 4 * ns[i]);
        if (sim_tree(x, ns[i]) != want) {
            fprintf(stderr, "tree of %zu floats: wrong\n", ns[i]);
            fail();
        }
    }
    free(x);
}

/* ---- statistics ---- */

/* The sign tables of both layouts give stats.c's signs, leaf signs folded in. */
static void test_sign_table(void **state)
{
    (void)state;
    static const uint64_t leaves[] = {0, 1, 2, 3, 7, 100, 1000, 65535, 123457};
    for (size_t li = 0; li < sizeof leaves / sizeof leaves[0]; li++) {
        uint64_t L = leaves[li];
        for (int l = 0; l < 32; l++) {
            uint32_t m[4];
            gh_lane_sign_row(l, m);
            for (int r = 0; r < 4; r++)
                m[r] ^= gh_leaf_flip(L);
            for (int j = 0; j < 32; j++)
                for (int e = 0; e < 4; e++) {
                    size_t i = 4096 * L + 128 * (size_t)j + 4 * (size_t)l + (size_t)e;
                    uint32_t neg = gh_neg(m[j >> 3], 4 * (j & 7), e);
                    assert_true(neg == 0 || neg == 0x80000000u);
                    assert_int_equal(neg != 0, stats_sketch_sign(i) < 0);
                }
        }
        /* the quad layout's: lane q, stripe S = 16 k + s */
        for (int q = 0; q < 4; q++)
            for (int k = 0; k < 16; k++) {
                uint32_t lo, hi;
                gh_quad_signs(q, k, &lo, &hi);
                for (int S = 16 * k; S < 16 * k + 16; S++)
                    for (int e = 0; e < 4; e++) {
                        size_t i = 4096 * L + 16 * (size_t)S + 4 * (size_t)q + (size_t)e;
                        uint32_t neg = gh_neg(((S & 15) < 8 ? lo : hi) ^ gh_leaf_flip(L), 4 * (S & 7), e);
                        assert_int_equal(neg != 0, stats_sketch_sign(i) < 0);
                    }
            }
    }
}

struct sim_stats {
    double sq, sk[SK];
    float mn, mx;
    uint64_t nan, inf;
};

/* One lane's statistics over leaf t0 (a tile of one leaf): full units of a full leaf
 * through gh_lstats_unit_fast when fast, else gh_lstats_unit; the ragged
 * end element by element. */
static void sim_lane(const float *x, size_t n, size_t m, size_t t0, int l, int fast, struct gh_lstats *out)
{
    struct gh_lstats st;
    gh_lstats_init(&st);
    uint32_t row[4];
    gh_lane_sign_row(l, row);
    for (size_t L = t0; L < m && L < t0 + 1; L++) {
        const uint32_t *u = (const uint32_t *)(x + 4096 * L);
        size_t ne = n - 4096 * L < 4096 ? n - 4096 * L : 4096;
        uint32_t s[4];
        for (int r = 0; r < 4; r++)
            s[r] = row[r] ^ gh_leaf_flip(L);
        for (int j = 0; j < 32; j++) {
            size_t base = 128 * (size_t)j + 4 * (size_t)l;
            if (base + 4 <= ne && fast && ne == 4096)
                gh_lstats_unit_fast(&st, u[base], u[base + 1], u[base + 2], u[base + 3], s[j >> 3],
                                    4 * (j & 7));
            else if (base + 4 <= ne)
                gh_lstats_unit(&st, u[base], u[base + 1], u[base + 2], u[base + 3], s[j >> 3],
                               4 * (j & 7));
            else
                for (int e = 0; e < 4; e++)
                    if (base + (size_t)e < ne)
                        gh_lstats_one(&st, e, u[base + e], gh_neg(s[j >> 3], 4 * (j & 7), e));
        }
    }
    *out = st;
}

struct host_el {
    const uint32_t *u;
    __host__ __device__ uint32_t operator()(uint32_t i) const { return u[i]; }
};

/* gpu_trace_kern.cuh's quad tile from leaf t0 (gt_quad_tile, careful:
 * the fast path makes the same additions over finite leaves): lane q of
 * quad j over leaf t0 + j (gh_quad_stats), then the sketch over quads in
 * gt_quad_store's butterfly (lanes xor 4, 8, 16) and the rest over all 32
 * lanes (xor 1, 2, 4, 8, 16); lane q then holds sketch classes 4 q + e. */
static void sim_quad_tile(const float *x, size_t n, size_t m, size_t t0, struct sim_stats *out)
{
    struct gh_lstats st[32], nx[32];
    for (int lane = 0; lane < 32; lane++) {
        gh_lstats_init(&st[lane]);
        size_t L = t0 + (size_t)(lane >> 2);
        if (L < m && L < t0 + TILE_LEAVES) {
            size_t ne = n - 4096 * L < 4096 ? n - 4096 * L : 4096;
            struct host_el el = {(const uint32_t *)(x + 4096 * L)};
            gh_quad_stats(lane & 3, el, (uint32_t)ne, L, &st[lane]);
        }
    }
    for (int w = 4; w < 32; w <<= 1) {
        for (int lane = 0; lane < 32; lane++) {
            nx[lane] = st[lane];
            for (int e = 0; e < 4; e++)
                nx[lane].sk[e] = st[lane].sk[e] + st[lane ^ w].sk[e];
        }
        memcpy(st, nx, sizeof st);
    }
    for (int w = 1; w < 32; w <<= 1) {
        for (int lane = 0; lane < 32; lane++) {
            nx[lane] = st[lane];
            nx[lane].sq = st[lane].sq + st[lane ^ w].sq;
            nx[lane].mn = fminf(st[lane].mn, st[lane ^ w].mn);
            nx[lane].mx = fmaxf(st[lane].mx, st[lane ^ w].mx);
            nx[lane].nan = st[lane].nan + st[lane ^ w].nan;
            nx[lane].inf = st[lane].inf + st[lane ^ w].inf;
        }
        memcpy(st, nx, sizeof st);
    }
    out->sq = st[0].sq;
    out->mn = st[0].mn;
    out->mx = st[0].mx;
    out->nan = st[0].nan;
    out->inf = st[0].inf;
    for (int q = 0; q < 4; q++)
        for (int e = 0; e < 4; e++)
            out->sk[4 * q + e] = st[q].sk[e];
}

/* gpu_trace_kern.cuh's statistics: per tile (one leaf up to 512 leaves,
 * else quad tiles of TILE_LEAVES), 32 lanes over units j of each leaf
 * (gt_leaf_tile: the fast path, and the careful one again where a lane's
 * sq is not finite), lanes and tiles then summed. */
static void sim_stats(const float *x, size_t n, struct sim_stats *out)
{
    memset(out, 0, sizeof *out);
    out->mn = INFINITY;
    out->mx = -INFINITY;
    size_t m = (n + 4095) / 4096;
    if (m > SPLIT_LEAVES) {
        for (size_t t0 = 0; t0 < m; t0 += TILE_LEAVES) {
            struct sim_stats t;
            sim_quad_tile(x, n, m, t0, &t);
            out->sq += t.sq;
            for (int k = 0; k < SK; k++)
                out->sk[k] += t.sk[k];
            out->mn = fminf(out->mn, t.mn);
            out->mx = fmaxf(out->mx, t.mx);
            out->nan += t.nan;
            out->inf += t.inf;
        }
        return;
    }
    for (size_t t0 = 0; t0 < m; t0++) {
        struct gh_lstats lanes[32];
        int again = 0;
        for (int l = 0; l < 32; l++) {
            sim_lane(x, n, m, t0, l, 1, &lanes[l]);
            again |= !gh_lstats_finite(&lanes[l]);
        }
        for (int l = 0; l < 32; l++) {
            if (again)
                sim_lane(x, n, m, t0, l, 0, &lanes[l]);
            const struct gh_lstats st = lanes[l];
            out->sq += st.sq;
            for (int e = 0; e < 4; e++)
                out->sk[4 * (l & 3) + e] += st.sk[e];
            out->mn = fminf(out->mn, st.mn);
            out->mx = fmaxf(out->mx, st.mx);
            out->nan += st.nan;
            out->inf += st.inf;
        }
    }
}

/* gh_lstats_unit_fast: the same bits as gh_lstats_unit over finite units
 * (random bit patterns of every exponent but 255, and +-FLT_MAX), a sq
 * that stays finite over a tile's worth of the largest floats, and a sq
 * that is not finite, whatever follows, once a unit held a NaN or an Inf
 * (the premise of gt_leaf_tile's second pass). */
static void test_lstats_fast(void **state)
{
    (void)state;
    uint64_t r = 99;
    for (int run = 0; run < 200; run++) {
        struct gh_lstats a, b;
        gh_lstats_init(&a);
        gh_lstats_init(&b);
        uint32_t m = (uint32_t)rng_next(&r);
        for (int unit = 0; unit < 64; unit++) {
            uint32_t u[4];
            for (int e = 0; e < 4; e++) {
                u[e] = (uint32_t)rng_next(&r);
                if ((u[e] & GH_EXP) == GH_EXP)
                    u[e] ^= 0x00800000u;
                if (rng_next(&r) % 29 == 0)
                    u[e] = (u[e] & 0x80000000u) | 0x7f7fffffu;
            }
            int sh = 4 * (unit & 7);
            gh_lstats_unit(&a, u[0], u[1], u[2], u[3], m, sh);
            gh_lstats_unit_fast(&b, u[0], u[1], u[2], u[3], m, sh);
        }
        assert_memory_equal(&a, &b, sizeof a);
        assert_true(gh_lstats_finite(&b));
    }
    /* 8 leaves of 128 elements a lane, every one +-FLT_MAX */
    struct gh_lstats big;
    gh_lstats_init(&big);
    for (int unit = 0; unit < 256; unit++)
        gh_lstats_unit_fast(&big, 0x7f7fffffu, 0xff7fffffu, 0x7f7fffffu, 0xff7fffffu, 0x5a5a5a5au, 0);
    assert_true(gh_lstats_finite(&big));
    static const uint32_t specials[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u};
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++)
        for (int e = 0; e < 4; e++) {
            struct gh_lstats st;
            gh_lstats_init(&st);
            uint32_t u[4] = {0x3f800000u, 0xbf000000u, 0x00000001u, 0x7f7fffffu};
            gh_lstats_unit_fast(&st, u[0], u[1], u[2], u[3], 0, 0);
            u[e] = specials[k];
            gh_lstats_unit_fast(&st, u[0], u[1], u[2], u[3], 0xffffffffu, 4);
            for (int more = 0; more < 8; more++)
                gh_lstats_unit_fast(&st, 0x3f800000u, 0xff7fffffu, 0u, 0x80000000u, 0x12345678u, 8);
            assert_false(gh_lstats_finite(&st));
        }
}

/* The sketch of x by definition, in long double (the yardstick where two
 * float roundings of nearly equal doubles part). */
static void ref_sketch(const float *x, size_t n, long double sk[SK], long double abs[SK])
{
    for (int k = 0; k < SK; k++)
        sk[k] = abs[k] = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i])) {
            sk[i % SK] += (long double)stats_sketch_sign(i) * x[i];
            abs[i % SK] += fabsl((long double)x[i]);
        }
}

/* A stored sketch value agrees with cpu's: equal within 1e-12 relative
 * (or 1e-300), or both are float roundings of sums within 1e-12 relative
 * of the exact one (two sums that close can still round to neighbouring
 * floats). An ill-conditioned sum (huge terms cancelling, abs = the sum of
 * the terms' magnitudes) is only as good as any order of summation makes
 * it: within n 2^-53 abs of the exact one. */
static int sketch_ok(float got, float cpu, long double ref, long double abs, size_t n, int illcond)
{
    if (fabs((double)got - (double)cpu) <= 1e-12 * fabs((double)cpu) ||
        fabs((double)got - (double)cpu) <= 1e-300)
        return 1;
    long double tol = 1e-12L * fabsl(ref) + 1e-300L;
    if (illcond)
        tol += (long double)n * 0x1p-53L * abs;
    float lo = (float)(ref - tol), hi = (float)(ref + tol);
    return got >= lo && got <= hi && cpu >= lo && cpu <= hi;
}

static void check_stats(const float *x, size_t n, const char *what, int illcond)
{
    struct trace_oprec cpu;
    struct sim_stats s;
    long double ref[SK], abs[SK];
    stats_compute(x, n, &cpu);
    sim_stats(x, n, &s);
    ref_sketch(x, n, ref, abs);
    int any = s.mn <= s.mx;
    double l2 = sqrt(s.sq), mn = any ? s.mn : 0.0, mx = any ? s.mx : 0.0;
    int bad = 0;
    bad |= s.nan != cpu.nan || s.inf != cpu.inf || mn != cpu.min || mx != cpu.max;
    bad |= !(fabs(l2 - cpu.l2) <= 1e-12 * cpu.l2 || fabs(l2 - cpu.l2) <= 1e-300);
    for (int k = 0; k < SK; k++)
        bad |= !sketch_ok((float)s.sk[k], cpu.sketch[k], ref[k], abs[k], n, illcond);
    if (bad) {
        fprintf(stderr, "%s, n = %zu: sim l2 %.17g min %g max %g nan %llu inf %llu; cpu %.17g %g %g %llu %llu\n",
                what, n, l2, mn, mx, (unsigned long long)s.nan, (unsigned long long)s.inf, cpu.l2,
                cpu.min, cpu.max, (unsigned long long)cpu.nan, (unsigned long long)cpu.inf);
        for (int k = 0; k < SK; k++)
            fprintf(stderr, "  sketch[%d]: sim %.9g cpu %.9g ref %.17Lg\n", k, (float)s.sk[k],
                    cpu.sketch[k], ref[k]);
        fail();
    }
}

/* NaNs, infinities, zeros, subnormals; with extremes, also +-FLT_MAX. */
static float special_value(uint64_t r, int extremes)
{
    static const uint32_t bits[] = {0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u, 0x80000000u,
                                    0x00000000u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x80000003u,
                                    0x7f7fffffu, 0xff7fffffu};
    uint32_t u = bits[r % (sizeof bits / sizeof bits[0] - (extremes ? 0 : 2))];
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Contents: 0 uniform in [-1, 1); 1 the same with 1 in 17 special; 2 only
 * specials and +-FLT_MAX (an ill-conditioned sketch); 3 uniform, 1e30. */
static void fill_floats(float *x, size_t n, int kind, uint64_t seed)
{
    uint64_t r = seed;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rng_next(&r) >> 11) * 0x1p-53;
        x[i] = (float)((u - 0.5) * (kind == 3 ? 2e30 : 2.0));
        if (kind == 1 && rng_next(&r) % 17 == 0)
            x[i] = special_value(rng_next(&r), 0);
        if (kind == 2)
            x[i] = special_value(rng_next(&r), 1);
    }
}

static void test_stats_sim(void **state)
{
    (void)state;
    static const size_t ns[] = {0, 1, 3, 4, 5, 127, 128, 129, 4095, 4096, 4097, 16383, 16384, 16385,
                                32768, 32769, 65536 * 3 + 7, 4096 * 17 + 2, 4096 * 512,
                                4096 * 513, 4096 * 520 + 9, 4096 * 535 + 1};
    size_t most = 4096 * 535 + 1;
    float *x = (float *)malloc(4 * most);
    assert_non_null(x);
    for (int kind = 0; kind < 4; kind++) {
        fill_floats(x, most, kind, 1234 + (uint64_t)kind);
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            char what[32];
            snprintf(what, sizeof what, "contents %d", kind);
            check_stats(x, ns[i], what, kind == 2);
        }
    }
    /* all NaN: no finite element, min = max = 0 */
    for (size_t i = 0; i < 5000; i++)
        x[i] = NAN;
    check_stats(x, 5000, "all NaN", 0);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xxh3_lengths), cmocka_unit_test(test_xxh3_special),
        cmocka_unit_test(test_leaf_full),    cmocka_unit_test(test_root),
        cmocka_unit_test(test_tree),         cmocka_unit_test(test_sign_table),
        cmocka_unit_test(test_stats_sim),    cmocka_unit_test(test_lstats_fast),
        cmocka_unit_test(test_quad_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
