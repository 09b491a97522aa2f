/* test_gpu_trace.c: the cuda backend's trace records (src/gpu/gpu_trace.cu)
 * against stats_compute() on the host: hash, NaN/Inf counts, min and max
 * equal, L2 and sketch within 1e-12 relative; one buffer at a time and many
 * in one batch; records bitwise identical call to call and whatever the
 * batch. Skips (exit 77) where no GPU is usable. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "stats.h"
#include "test_util.h"
#include "util.h"

#define SK TRACE_SKETCH_LEN

static const struct backend_ops *gt_be;
static void *gt_ctx;

/* ---- contents ---- */

/* NaNs, infinities, zeros of both signs, subnormals; with extremes, also
 * +-FLT_MAX. */
static float gt_special(uint64_t r, int extremes)
{
    static const uint32_t bits[] = {0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u, 0x80000000u,
                                    0x00000000u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x80000003u,
                                    0x7f7fffffu, 0xff7fffffu};
    uint32_t u = bits[r % (sizeof bits / sizeof bits[0] - (extremes ? 0 : 2))];
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

enum {
    GT_UNIFORM,   /* uniform in [-1, 1) */
    GT_SPECIALS,  /* the same with 1 in 17 special */
    GT_EXTREMES,  /* specials and +-FLT_MAX only: an ill-conditioned sketch */
    GT_NONFINITE, /* NaN and Inf only: no finite element */
    GT_NEGZERO,   /* -0 everywhere */
    GT_KINDS
};

static void gt_fill(float *x, size_t n, int kind, uint64_t seed)
{
    uint64_t r = seed;
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case GT_UNIFORM:
            x[i] = (float)tu_rand_uniform(&r, -1, 1);
            break;
        case GT_SPECIALS:
            x[i] = tu_rand_u64(&r) % 17 == 0 ? gt_special(tu_rand_u64(&r), 0)
                                              : (float)tu_rand_uniform(&r, -1, 1);
            break;
        case GT_EXTREMES:
            x[i] = gt_special(tu_rand_u64(&r), 1);
            break;
        case GT_NONFINITE:
            x[i] = gt_special(tu_rand_u64(&r) % 4, 0);
            break;
        default:
            x[i] = -0.0f;
        }
    }
}

/* ---- comparison ---- */

/* Sketch value k of x by definition in long double, and the sum of the
 * magnitudes of its terms. */
static void gt_ref_sketch(const float *x, size_t n, int k, long double *sum, long double *abs)
{
    *sum = *abs = 0;
    for (size_t i = (size_t)k; i < n; i += SK)
        if (isfinite(x[i])) {
            *sum += (long double)stats_sketch_sign(i) * x[i];
            *abs += fabsl((long double)x[i]);
        }
}

/* A stored sketch value agrees with the cpu's: within 1e-12 relative (or
 * 1e-300); else both must be float roundings of sums within 1e-12 relative
 * of the exact sum (two such sums can round to neighbouring floats). An
 * ill-conditioned sum is only as good as any order of summation makes it:
 * within n 2^-53 times the sum of its terms' magnitudes. */
static int gt_sketch_ok(float got, float cpu, const float *x, size_t n, int k, int illcond)
{
    double d = fabs((double)got - (double)cpu);
    if (d <= 1e-12 * fabs((double)cpu) || d <= 1e-300)
        return 1;
    long double ref, abs;
    gt_ref_sketch(x, n, k, &ref, &abs);
    long double tol = 1e-12L * fabsl(ref) + 1e-300L;
    if (illcond)
        tol += (long double)n * 0x1p-53L * abs;
    float lo = (float)(ref - tol), hi = (float)(ref + tol);
    return got >= lo && got <= hi && cpu >= lo && cpu <= hi;
}

static void gt_check(const struct trace_oprec *g, const struct trace_oprec *cpu, const float *x,
                     size_t n, const char *what, int illcond)
{
    int bad = g->hash != cpu->hash || g->nan != cpu->nan || g->inf != cpu->inf ||
              g->min != cpu->min || g->max != cpu->max;
    double dl2 = fabs(g->l2 - cpu->l2);
    bad |= !(dl2 <= 1e-12 * cpu->l2 || dl2 <= 1e-300);
    int badk = -1;
    for (int k = 0; k < SK && badk < 0; k++)
        if (!gt_sketch_ok(g->sketch[k], cpu->sketch[k], x, n, k, illcond))
            badk = k;
    if (bad || badk >= 0) {
        fprintf(stderr,
                "%s, n = %zu:\n  gpu hash %016llx l2 %.17g min %.9g max %.9g nan %llu inf %llu\n"
                "  cpu hash %016llx l2 %.17g min %.9g max %.9g nan %llu inf %llu\n",
                what, n, (unsigned long long)g->hash, g->l2, g->min, g->max,
                (unsigned long long)g->nan, (unsigned long long)g->inf,
                (unsigned long long)cpu->hash, cpu->l2, cpu->min, cpu->max,
                (unsigned long long)cpu->nan, (unsigned long long)cpu->inf);
        if (badk >= 0)
            fprintf(stderr, "  sketch[%d]: gpu %.9g cpu %.9g\n", badk, g->sketch[badk], cpu->sketch[badk]);
        fail();
    }
}

/* Every field but op, bit for bit. */
static int gt_same_bits(const struct trace_oprec *a, const struct trace_oprec *b)
{
    return a->hash == b->hash && memcmp(&a->l2, &b->l2, sizeof a->l2) == 0 &&
           memcmp(&a->min, &b->min, sizeof a->min) == 0 && memcmp(&a->max, &b->max, sizeof a->max) == 0 &&
           a->nan == b->nan && a->inf == b->inf && memcmp(a->sketch, b->sketch, sizeof a->sketch) == 0;
}

/* ---- a set of device buffers with their host copies and cpu records ---- */

struct gt_set {
    int n;
    backend_buf **buf;
    const backend_buf **view; /* what is traced: buf, or an offset into it */
    size_t *count;
    float **x;                /* host data of the view */
    struct trace_oprec *cpu;
    int *illcond;
};

static void gt_set_init(struct gt_set *s, int n)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->buf = dt_calloc((size_t)n, sizeof *s->buf);
    s->view = dt_calloc((size_t)n, sizeof *s->view);
    s->count = dt_calloc((size_t)n, sizeof *s->count);
    s->x = dt_calloc((size_t)n, sizeof *s->x);
    s->cpu = dt_calloc((size_t)n, sizeof *s->cpu);
    s->illcond = dt_calloc((size_t)n, sizeof *s->illcond);
}

/* Buffer i: count elements of the given contents, traced from element off
 * of its device buffer (off > 0: a view that is not 16-byte aligned). */
static void gt_set_add(struct gt_set *s, int i, size_t count, int kind, uint64_t seed, size_t off)
{
    float *all = dt_malloc((count + off ? count + off : 1) * sizeof *all);
    gt_fill(all, count + off, kind, seed);
    s->buf[i] = gt_be->alloc(gt_ctx, count + off);
    gt_be->upload(gt_ctx, s->buf[i], all, count + off);
    s->view[i] = (const float *)s->buf[i] + off;
    s->count[i] = count;
    s->x[i] = dt_malloc((count ? count : 1) * sizeof(float));
    memcpy(s->x[i], all + off, count * sizeof(float));
    free(all);
    stats_compute(s->x[i], count, &s->cpu[i]);
    s->illcond[i] = kind == GT_EXTREMES;
}

static void gt_set_free(struct gt_set *s)
{
    for (int i = 0; i < s->n; i++) {
        if (s->buf[i])
            gt_be->release(gt_ctx, s->buf[i]);
        free(s->x[i]);
    }
    free(s->buf);
    free(s->view);
    free(s->count);
    free(s->x);
    free(s->cpu);
    free(s->illcond);
}

/* Trace the set one buffer at a time and in one batch, twice: every record
 * right, all records of one buffer bitwise equal. */
static void gt_set_check(const struct gt_set *s, const char *what)
{
    int n = s->n;
    struct trace_oprec *one = dt_calloc((size_t)n, sizeof *one);
    struct trace_oprec *b1 = dt_calloc((size_t)n, sizeof *b1);
    struct trace_oprec *b2 = dt_calloc((size_t)n, sizeof *b2);
    char label[128];
    for (int i = 0; i < n; i++) {
        one[i].op = b1[i].op = b2[i].op = (uint32_t)i + 1000;
        gt_be->trace(gt_ctx, s->view[i], s->count[i], &one[i]);
        snprintf(label, sizeof label, "%s, buffer %d alone", what, i);
        gt_check(&one[i], &s->cpu[i], s->x[i], s->count[i], label, s->illcond[i]);
    }
    gt_be->trace_batch(gt_ctx, s->view, s->count, n, b1);
    gt_be->trace_batch(gt_ctx, s->view, s->count, n, b2);
    for (int i = 0; i < n; i++) {
        snprintf(label, sizeof label, "%s, buffer %d of a batch of %d", what, i, n);
        gt_check(&b1[i], &s->cpu[i], s->x[i], s->count[i], label, s->illcond[i]);
        assert_int_equal(b1[i].op, (uint32_t)i + 1000); /* op is left alone */
        if (!gt_same_bits(&b1[i], &b2[i]) || !gt_same_bits(&b1[i], &one[i])) {
            fprintf(stderr, "%s: records of one buffer differ between calls\n", label);
            fail();
        }
    }
    free(one);
    free(b1);
    free(b2);
}

/* ---- tests ---- */

static const size_t gt_sizes[] = {0, 1, 3, 4095, 4096, 4097, 16383, 16384, 16385,
                                  4096 * 30,      /* 30 leaves: the root's last short length */
                                  4096 * 30 + 1,  /* 31: the root's long path */
                                  65536 * 3 + 7, 10000000};
#define GT_NSIZES ((int)(sizeof gt_sizes / sizeof gt_sizes[0]))

/* Every size with every contents, all in one batch. */
static void test_sizes(void **state)
{
    (void)state;
    struct gt_set s;
    gt_set_init(&s, GT_NSIZES * GT_KINDS);
    for (int k = 0; k < GT_KINDS; k++)
        for (int i = 0; i < GT_NSIZES; i++)
            gt_set_add(&s, k * GT_NSIZES + i, gt_sizes[i], k, 100 * (uint64_t)k + (uint64_t)i, 0);
    gt_set_check(&s, "sizes");
    gt_set_free(&s);
}

/* Views 4, 8 and 12 bytes into a buffer: the scalar-load paths (the last
 * size: quad tiles, gt_quad_tile's careful way). */
static void test_unaligned(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 61, 4096, 16385, 70001, 4096 * 520 + 3};
    int ns = (int)(sizeof sizes / sizeof sizes[0]);
    struct gt_set s;
    gt_set_init(&s, 3 * ns);
    for (int off = 1; off <= 3; off++)
        for (int i = 0; i < ns; i++)
            gt_set_add(&s, (off - 1) * ns + i, sizes[i], GT_SPECIALS, 7000 + (uint64_t)(off * ns + i),
                       (size_t)off);
    gt_set_check(&s, "unaligned");
    gt_set_free(&s);
}

/* A step's worth of buffers: 3000 of random sizes (some empty) at once. */
static void test_many(void **state)
{
    (void)state;
    struct gt_set s;
    uint64_t r = 4242;
    gt_set_init(&s, 3000);
    for (int i = 0; i < s.n; i++) {
        size_t count = i % 50 == 0 ? 0 : (size_t)(tu_rand_u64(&r) % 90000);
        gt_set_add(&s, i, count, i % 3 == 0 ? GT_SPECIALS : GT_UNIFORM, 90000 + (uint64_t)i, 0);
    }
    gt_set_check(&s, "many");
    gt_set_free(&s);
}

/* More than 128 KiB of leaf digests: the root's rounds of GT_ROOT_CHUNK
 * blocks (16513 leaves or more). */
static void test_large_root(void **state)
{
    (void)state;
    struct gt_set s;
    gt_set_init(&s, 1);
    gt_set_add(&s, 0, (size_t)4096 * 16600 - 1000, GT_UNIFORM, 55, 0);
    gt_set_check(&s, "large root");
    gt_set_free(&s);
}

int main(void)
{
    struct backend_options opt;
    memset(&opt, 0, sizeof opt);
    opt.threads = 1;
    gt_be = backend_find("cuda");
    if (!gt_be || gt_be->init(&gt_ctx, &opt) < 0) {
        printf("test_gpu_trace: skipped: %s\n", dt_error());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_unaligned),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_large_root),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    gt_be->free(gt_ctx);
    return rc;
}
