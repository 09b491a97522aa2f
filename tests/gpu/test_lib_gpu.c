/* test_lib_gpu.c: libdivtrace's device tensors (src/gpu/lib_gpu.cu). The
 * same bytes recorded from device memory and from host memory give the same
 * records (hash, NaN/Inf counts, min and max equal, L2 and sketch within
 * 1e-12 relative, the same step root), over many sizes, contents and
 * unaligned views, on the default stream and on a stream of the caller's,
 * in every step of a trace whose bytes change from step to step (so that
 * a record left over from the step before fails); and bit for bit the
 * records of the cuda backend (gpu_trace_batch). A
 * record queued right behind an asynchronous upload on the same stream
 * sees the uploaded bytes; a device checkpoint is copied whole; host memory
 * passed as device memory is refused. Deferred records (one batch a flush)
 * give the same records as immediate ones, alone and mixed with them over
 * two streams, in batches of every size around the one-launch limit, and
 * are hashed at the flush: bytes changed before it are
 * what is recorded, bytes changed after it are not. A loss in device
 * memory is read in stream order with the step's records. Skips (exit 77)
 * where no GPU is usable. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime.h>

#include "backend.h"
#include "divtrace.h"
#include "stats.h"
#include "test_util.h"
#include "trace.h"
#include "util.h"

#define SK TRACE_SKETCH_LEN

static const struct backend_ops *lg_be;
static void *lg_ctx;

/* ---- contents ---- */

enum { LG_UNIFORM, LG_SPECIALS, LG_NONFINITE, LG_NEGZERO, LG_KINDS };

static float lg_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void lg_fill(float *x, size_t n, int kind, uint64_t seed)
{
    static const uint32_t special[] = {0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u,
                                       0x80000000u, 0x00000000u, 0x00000001u, 0x807fffffu};
    uint64_t r = seed;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = tu_rand_u64(&r);
        switch (kind) {
        case LG_UNIFORM:
            x[i] = (float)tu_rand_uniform(&r, -1, 1);
            break;
        case LG_SPECIALS:
            x[i] = u % 17 == 0 ? lg_bits(special[(u >> 8) % 8]) : (float)tu_rand_uniform(&r, -3, 3);
            break;
        case LG_NONFINITE:
            x[i] = lg_bits(special[(u >> 8) % 4]);
            break;
        default:
            x[i] = -0.0f;
        }
    }
}

/* ---- a set of tensors, on the device and on the host ---- */

struct lg_set {
    int n;
    backend_buf **buf;
    const float **view;      /* device: buf, or an offset into it */
    float **x;               /* the same bytes on the host */
    size_t *count;
    float *first;            /* each tensor's element 0 as filled (lg_step_bytes) */
};

static void lg_set_init(struct lg_set *s, int n)
{
    s->n = n;
    s->buf = dt_calloc((size_t)n, sizeof *s->buf);
    s->view = dt_calloc((size_t)n, sizeof *s->view);
    s->x = dt_calloc((size_t)n, sizeof *s->x);
    s->count = dt_calloc((size_t)n, sizeof *s->count);
    s->first = dt_calloc((size_t)n, sizeof *s->first);
}

static void lg_set_add(struct lg_set *s, int i, size_t count, int kind, uint64_t seed, size_t off)
{
    float *all = dt_malloc((count + off + 1) * sizeof *all);
    lg_fill(all, count + off, kind, seed);
    s->buf[i] = lg_be->alloc(lg_ctx, count + off + 1);
    lg_be->upload(lg_ctx, s->buf[i], all, count + off);
    s->view[i] = (const float *)s->buf[i] + off;
    s->x[i] = dt_malloc((count + 1) * sizeof(float));
    memcpy(s->x[i], all + off, count * sizeof(float));
    s->count[i] = count;
    s->first[i] = count ? s->x[i][0] : 0.0f;
    free(all);
}

static void lg_set_free(struct lg_set *s)
{
    for (int i = 0; i < s->n; i++) {
        lg_be->release(lg_ctx, s->buf[i]);
        free(s->x[i]);
    }
    free(s->buf);
    free(s->view);
    free(s->x);
    free(s->count);
    free(s->first);
}

/* The contents of step st: element 0 of each tensor is its first value
 * plus st (on the host and on the device), so that every step's records
 * differ from the step before's and a record left over from an earlier
 * step shows. */
static void lg_step_bytes(const struct lg_set *s, int st)
{
    for (int i = 0; i < s->n; i++) {
        if (!s->count[i])
            continue;
        s->x[i][0] = s->first[i] + (float)st;
        assert_int_equal(cudaMemcpy((void *)s->view[i], s->x[i], sizeof(float), cudaMemcpyHostToDevice),
                         cudaSuccess);
    }
}

/* How lg_write records the device tensors. */
enum {
    LG_HOST,     /* the host copies */
    LG_DEVICE,   /* DIVTRACE_DEVICE */
    LG_DEFERRED, /* DIVTRACE_DEVICE_DEFERRED, one batch a stream change */
    LG_MIXED,    /* every other tensor deferred, and a divtrace_flush a third of the way */
    LG_ONE_RUN,  /* every tensor deferred on one stream: one batch, flushed by the step's end */
};

/* Write nsteps steps of the set, from the device (on `stream`, or NULL and
 * a stream of its own alternately) or from the host. */
static void lg_write(const struct lg_set *s, const char *path, int mode, cudaStream_t stream,
                     int nsteps)
{
    divtrace *t;
    assert_int_equal(divtrace_open(&t, path, NULL, "op"), DIVTRACE_OK);
    for (int st = 0; st < nsteps; st++) {
        lg_step_bytes(s, st);
        assert_int_equal(divtrace_step_begin(t, (uint64_t)st), DIVTRACE_OK);
        for (int i = 0; i < s->n; i++) {
            char name[32];
            snprintf(name, sizeof name, "t%d", i);
            int64_t shape[1] = {(int64_t)s->count[i]};
            enum divtrace_kind kind = i % 3 == 0 ? DIVTRACE_GRAD : DIVTRACE_FORWARD;
            enum divtrace_where where = mode == LG_DEVICE || (mode == LG_MIXED && i % 2)
                                            ? DIVTRACE_DEVICE : DIVTRACE_DEVICE_DEFERRED;
            /* deferred: a run of tensors on each stream, so that batches are
             * flushed both by a stream change and by the step's end */
            void *sm = mode == LG_DEVICE     ? ((i + st) % 2 ? (void *)stream : NULL)
                       : mode == LG_ONE_RUN ? (st % 2 ? (void *)stream : NULL)
                                            : ((i / 7 + st) % 2 ? (void *)stream : NULL);
            int rc = mode == LG_HOST
                         ? divtrace_record(t, name, "x", kind, s->x[i], DIVTRACE_HOST, NULL, 1, shape, NULL, 0)
                         : divtrace_record(t, name, "x", kind, s->view[i], where, sm, 1, shape, NULL, 0);
            if (rc == DIVTRACE_OK && mode == LG_MIXED && i == s->n / 3)
                rc = divtrace_flush(t);
            if (rc != DIVTRACE_OK)
                fprintf(stderr, "%s\n", divtrace_errmsg(t));
            assert_int_equal(rc, DIVTRACE_OK);
        }
        assert_int_equal(divtrace_step_end(t, 1.0), DIVTRACE_OK);
    }
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);
}

/* Equal within 1e-12, relative; NaN matches NaN only (the gradient norm of
 * a step whose gradients hold a NaN or Inf is NaN by definition). */
static int lg_close(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    double d = fabs(a - b);
    return d <= 1e-12 * fabs(b) || d <= 1e-300;
}

static int lg_same_bits(const struct trace_oprec *a, const struct trace_oprec *b)
{
    return a->hash == b->hash && memcmp(&a->l2, &b->l2, sizeof a->l2) == 0 &&
           memcmp(&a->min, &b->min, sizeof a->min) == 0 && memcmp(&a->max, &b->max, sizeof a->max) == 0 &&
           a->nan == b->nan && a->inf == b->inf && memcmp(a->sketch, b->sketch, sizeof a->sketch) == 0;
}

static void lg_compare(const struct lg_set *s, const char *hp, const char *dp, const char *what,
                       int nsteps);

/* Device records, recorded each way, against host records and against the
 * cuda backend's. */
static void lg_check(const struct lg_set *s, const char *what, int nsteps)
{
    cudaStream_t stream;
    assert_int_equal(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    const char *hp = tu_path("host.dtr");
    lg_write(s, hp, LG_HOST, stream, nsteps);
    static const char *const mname[] = {"host", "device", "deferred", "mixed", "one batch"};
    for (int mode = LG_DEVICE; mode <= LG_ONE_RUN; mode++) {
        char w[96];
        snprintf(w, sizeof w, "%s, %s", what, mname[mode]);
        const char *dp = tu_path(mname[mode]);
        lg_write(s, dp, mode, stream, nsteps);
        lg_compare(s, hp, dp, w, nsteps);
    }
    assert_int_equal(cudaStreamDestroy(stream), cudaSuccess);
}

/* The device trace dp against the host trace hp and the cuda backend. */
static void lg_compare(const struct lg_set *s, const char *hp, const char *dp, const char *what, int nsteps)
{

    struct trace_oprec *be = dt_calloc((size_t)s->n, sizeof *be);
    lg_be->trace_batch(lg_ctx, (const backend_buf *const *)s->view, s->count, s->n, be);

    struct trace_file *h, *d;
    assert_int_equal(trace_open(&h, hp), 0);
    assert_int_equal(trace_open(&d, dp), 0);
    assert_int_equal(h->nsteps, (uint64_t)nsteps);
    assert_int_equal(d->nsteps, (uint64_t)nsteps);
    int bad = 0;
    for (int st = 0; st < nsteps; st++) {
        const struct trace_step *hs = &h->steps[st], *ds = &d->steps[st];
        assert_int_equal(ds->nrec, (uint32_t)s->n);
        if (hs->root != ds->root || !lg_close(ds->grad_norm, hs->grad_norm)) {
            fprintf(stderr, "%s, step %d: root %016llx / %016llx, grad norm %.17g / %.17g\n", what,
                    st, (unsigned long long)ds->root, (unsigned long long)hs->root, ds->grad_norm,
                    hs->grad_norm);
            bad++;
        }
        for (int i = 0; i < s->n; i++) {
            const struct trace_oprec *g = &ds->rec[i], *c = &hs->rec[i];
            int ok = g->hash == c->hash && g->nan == c->nan && g->inf == c->inf &&
                     g->min == c->min && g->max == c->max && lg_close(g->l2, c->l2);
            for (int k = 0; k < SK; k++)
                ok &= lg_close(g->sketch[k], c->sketch[k]);
            /* the backend's records are of the last step's bytes */
            int same = st < nsteps - 1 || lg_same_bits(g, &be[i]);
            if (!ok || !same) {
                fprintf(stderr, "%s, step %d, tensor %d (n = %zu): device %016llx l2 %.17g min %g "
                        "max %g nan %llu inf %llu; host %016llx l2 %.17g min %g max %g nan %llu "
                        "inf %llu; %s the cuda backend's record\n", what, st, i, s->count[i],
                        (unsigned long long)g->hash, g->l2, g->min, g->max,
                        (unsigned long long)g->nan, (unsigned long long)g->inf,
                        (unsigned long long)c->hash, c->l2, c->min, c->max,
                        (unsigned long long)c->nan, (unsigned long long)c->inf,
                        same ? "equal to" : "NOT bitwise equal to");
                bad++;
            }
        }
    }
    trace_close(h);
    trace_close(d);
    free(be);
    assert_int_equal(bad, 0);
}

/* ---- tests ---- */

static const size_t lg_sizes[] = {0, 1, 3, 4095, 4096, 4097, 16383, 16384, 16385,
                                  4096 * 30, 4096 * 30 + 1, 65536 * 3 + 7, 10000000};
#define LG_NSIZES ((int)(sizeof lg_sizes / sizeof lg_sizes[0]))

static void test_sizes(void **state)
{
    (void)state;
    struct lg_set s;
    lg_set_init(&s, LG_NSIZES * LG_KINDS);
    for (int k = 0; k < LG_KINDS; k++)
        for (int i = 0; i < LG_NSIZES; i++)
            lg_set_add(&s, k * LG_NSIZES + i, lg_sizes[i], k, 100 * (uint64_t)k + (uint64_t)i, 0);
    lg_check(&s, "sizes", 3);
    lg_set_free(&s);
}

/* Views 4, 8 and 12 bytes into a buffer: the scalar-load paths. */
static void test_unaligned(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 61, 4096, 16385, 70001, 4096 * 40 + 3};
    int ns = (int)(sizeof sizes / sizeof sizes[0]);
    struct lg_set s;
    lg_set_init(&s, 3 * ns);
    for (int off = 1; off <= 3; off++)
        for (int i = 0; i < ns; i++)
            lg_set_add(&s, (off - 1) * ns + i, sizes[i], LG_SPECIALS, 7000 + (uint64_t)(off * ns + i),
                       (size_t)off);
    lg_check(&s, "unaligned", 2);
    lg_set_free(&s);
}

/* A step of many tensors (the record array and the scratch grow in the
 * first step, are reused after). */
static void test_many(void **state)
{
    (void)state;
    struct lg_set s;
    uint64_t r = 4242;
    lg_set_init(&s, 1500);
    for (int i = 0; i < s.n; i++)
        lg_set_add(&s, i, (size_t)(tu_rand_u64(&r) % 50000), i % 3 == 1 ? LG_SPECIALS : LG_UNIFORM,
                   90000 + (uint64_t)i, 0);
    lg_check(&s, "many", 3);
    lg_set_free(&s);
}

/* Batches of small tensors around the sizes where a flush's one launch
 * with its descriptors as the argument takes a larger argument (8, 32 and
 * 128 tensors) and where it stops being one launch (more than 128 tensors,
 * or one over 30 leaves): 1, 8, 9, 32, 33, 127, 128, 129 and 300 tensors,
 * the sizes drawn from 0 to 30 leaves and just over, some views
 * unaligned. */
static void test_batches(void **state)
{
    (void)state;
    static const int counts[] = {1, 8, 9, 32, 33, 127, 128, 129, 300};
    static const size_t edge[] = {0, 1, 4096, 4096 * 30, 4096 * 30 + 1};
    uint64_t r = 5150;
    for (int c = 0; c < (int)(sizeof counts / sizeof counts[0]); c++) {
        struct lg_set s;
        lg_set_init(&s, counts[c]);
        for (int i = 0; i < s.n; i++) {
            /* one tensor over 30 leaves in the 127 (the general path), the
             * edges at the start of the others */
            size_t n = counts[c] == 127 && i == 5 ? edge[4]
                       : i < 4           ? edge[i]
                                         : (size_t)(tu_rand_u64(&r) % (4096 * 30 + 1));
            lg_set_add(&s, i, n, i % 5 == 2 ? LG_SPECIALS : LG_UNIFORM, 60000 + 1000 * (uint64_t)c + (uint64_t)i,
                       (size_t)(i % 7 == 3));
        }
        char what[64];
        snprintf(what, sizeof what, "batch of %d", counts[c]);
        lg_check(&s, what, 2);
        lg_set_free(&s);
    }
}

/* The record is queued behind an asynchronous upload on the same stream. */
static void test_stream_order(void **state)
{
    (void)state;
    size_t n = (size_t)1 << 25;
    float *pinned, *dev;
    assert_int_equal(cudaMallocHost((void **)&pinned, n * sizeof *pinned), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&dev, n * sizeof *dev), cudaSuccess);
    assert_int_equal(cudaMemset(dev, 0, n * sizeof *dev), cudaSuccess);
    lg_fill(pinned, n, LG_UNIFORM, 31);
    struct trace_oprec want;
    stats_compute(pinned, n, &want);
    cudaStream_t stream;
    assert_int_equal(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    const char *path = tu_path("order.dtr");
    divtrace *t;
    assert_int_equal(divtrace_open(&t, path, NULL, NULL), DIVTRACE_OK);
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    assert_int_equal(cudaMemcpyAsync(dev, pinned, n * sizeof *dev, cudaMemcpyHostToDevice, stream),
                     cudaSuccess);
    int64_t shape[2] = {1 << 12, 1 << 13};
    assert_int_equal(divtrace_record(t, "w", "x", DIVTRACE_PARAM, dev, DIVTRACE_DEVICE, stream, 2,
                                     shape, NULL, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_step_end(t, 0), DIVTRACE_OK);
    /* a device checkpoint: the whole tensor */
    assert_int_equal(divtrace_checkpoint_begin(t, 1), DIVTRACE_OK);
    assert_int_equal(divtrace_checkpoint_add(t, "w", dev, DIVTRACE_DEVICE, 2, shape), DIVTRACE_OK);
    assert_int_equal(divtrace_checkpoint_end(t), DIVTRACE_OK);
    /* host memory as device memory */
    assert_int_equal(divtrace_step_begin(t, 1), DIVTRACE_OK);
    float host[4] = {0};
    int64_t hs[1] = {4};
    (void)hs;
    /* step 0's shape, so that the op list matches and the pointer is what is refused */
    assert_int_equal(divtrace_record(t, "w", "x", DIVTRACE_PARAM, host, DIVTRACE_DEVICE, NULL, 2,
                                     shape, NULL, 0), DIVTRACE_EINVAL);
    assert_non_null(strstr(divtrace_errmsg(t), "host memory"));
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_int_equal(tf->nsteps, 1);
    assert_true(tf->steps[0].rec[0].hash == want.hash);
    struct trace_ckpt ck;
    assert_int_equal(trace_read_ckpt(tf, 0, &ck), 0);
    assert_int_equal(ck.ntensors, 1);
    assert_int_equal(ck.t[0].count, n);
    assert_memory_equal(ck.t[0].data, pinned, n * sizeof *pinned);
    trace_ckpt_free(&ck);
    trace_close(tf);
    cudaStreamDestroy(stream);
    cudaFree(dev);
    cudaFreeHost(pinned);
}

/* A deferred tensor is hashed at the flush, in stream order: what the
 * stream wrote before the flush is recorded, what it wrote after is not.
 * A step given up and begun again drops its deferred tensors. */
static void test_deferred_flush(void **state)
{
    (void)state;
    enum { N = 3 * 4096 + 5 };
    float *a, *b, *host = dt_malloc(N * sizeof *host);
    assert_int_equal(cudaMalloc((void **)&a, N * sizeof *a), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&b, N * sizeof *b), cudaSuccess);
    cudaStream_t stream;
    assert_int_equal(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    lg_fill(host, N, LG_UNIFORM, 77);
    assert_int_equal(cudaMemcpy(a, host, N * sizeof *a, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(cudaMemcpy(b, host, N * sizeof *b, cudaMemcpyHostToDevice), cudaSuccess);
    struct trace_oprec orig, zero;
    stats_compute(host, N, &orig);
    memset(host, 0, N * sizeof *host);
    stats_compute(host, N, &zero);
    assert_true(orig.hash != zero.hash);

    const char *path = tu_path("flush.dtr");
    divtrace *t;
    int64_t shape[1] = {N};
    assert_int_equal(divtrace_open(&t, path, NULL, "op"), DIVTRACE_OK);
    /* a step that fails after a deferred record, then begun again */
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_record(t, "a", "x", DIVTRACE_FORWARD, a, DIVTRACE_DEVICE_DEFERRED, stream, 1,
                                     shape, NULL, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_record(t, "b", "x", DIVTRACE_FORWARD, NULL, DIVTRACE_DEVICE_DEFERRED, stream,
                                     1, shape, NULL, 0), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    /* a: deferred, flushed, then zeroed on its stream: the record is the
     * original bytes'. b: deferred, zeroed on its stream, flushed by the
     * step's end: the record is the zeros'. */
    assert_int_equal(divtrace_record(t, "a", "x", DIVTRACE_FORWARD, a, DIVTRACE_DEVICE_DEFERRED, stream, 1,
                                     shape, NULL, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_flush(t), DIVTRACE_OK);
    assert_int_equal(cudaMemsetAsync(a, 0, N * sizeof *a, stream), cudaSuccess);
    assert_int_equal(divtrace_record(t, "b", "x", DIVTRACE_FORWARD, b, DIVTRACE_DEVICE_DEFERRED, stream, 1,
                                     shape, NULL, 0), DIVTRACE_OK);
    assert_int_equal(cudaMemsetAsync(b, 0, N * sizeof *b, stream), cudaSuccess);
    assert_int_equal(divtrace_step_end(t, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_flush(t), DIVTRACE_OK); /* between steps: nothing to do */
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);

    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_int_equal(tf->nsteps, 1);
    assert_int_equal(tf->steps[0].nrec, 2);
    assert_true(tf->steps[0].rec[0].hash == orig.hash);
    assert_true(tf->steps[0].rec[1].hash == zero.hash);
    assert_true(lg_close(tf->steps[0].rec[0].l2, orig.l2));
    assert_true(tf->steps[0].rec[1].l2 == 0);
    trace_close(tf);
    cudaStreamDestroy(stream);
    cudaFree(a);
    cudaFree(b);
    free(host);
}

/* divtrace_step_end_device: the loss read from device memory on the
 * caller's stream with the step's records, after what the stream queued
 * before it; host memory and NULL refused, the step then begun again. */
static void test_loss_on_device(void **state)
{
    (void)state;
    enum { N = 1000 };
    float *a, *loss, *host = dt_malloc(N * sizeof *host);
    assert_int_equal(cudaMalloc((void **)&a, N * sizeof *a), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&loss, sizeof *loss), cudaSuccess);
    cudaStream_t stream;
    assert_int_equal(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    lg_fill(host, N, LG_UNIFORM, 91);
    assert_int_equal(cudaMemcpy(a, host, N * sizeof *a, cudaMemcpyHostToDevice), cudaSuccess);
    const char *path = tu_path("dloss.dtr");
    divtrace *t;
    int64_t shape[1] = {N};
    static const float first = 0.375f, second = -7.5e-3f;
    float on_host = 2.5f;
    assert_int_equal(divtrace_open(&t, path, NULL, "op"), DIVTRACE_OK);
    assert_int_equal(divtrace_step_begin(t, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_record(t, "a", "x", DIVTRACE_FORWARD, a, DIVTRACE_DEVICE_DEFERRED, stream, 1,
                                     shape, NULL, 0), DIVTRACE_OK);
    assert_int_equal(cudaMemcpy(loss, &first, sizeof first, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(divtrace_step_end_device(t, loss, stream), DIVTRACE_OK);
    /* step 1: host memory refused, NULL refused; begun again, the loss
     * written on the stream just before the step's end */
    assert_int_equal(divtrace_step_begin(t, 1), DIVTRACE_OK);
    assert_int_equal(divtrace_record(t, "a", "x", DIVTRACE_FORWARD, a, DIVTRACE_DEVICE_DEFERRED, stream, 1,
                                     shape, NULL, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_step_end_device(t, &on_host, stream), DIVTRACE_EINVAL);
    assert_non_null(strstr(divtrace_errmsg(t), "host memory"));
    assert_int_equal(divtrace_step_end_device(t, NULL, stream), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_step_begin(t, 1), DIVTRACE_OK);
    assert_int_equal(divtrace_record(t, "a", "x", DIVTRACE_FORWARD, a, DIVTRACE_DEVICE_DEFERRED, stream, 1,
                                     shape, NULL, 0), DIVTRACE_OK);
    assert_int_equal(cudaMemcpyAsync(loss, &second, sizeof second, cudaMemcpyHostToDevice, stream), cudaSuccess);
    assert_int_equal(divtrace_step_end_device(t, loss, stream), DIVTRACE_OK);
    /* step 2: a loss given as a number, after device ones */
    assert_int_equal(divtrace_step_begin(t, 2), DIVTRACE_OK);
    assert_int_equal(divtrace_record(t, "a", "x", DIVTRACE_FORWARD, a, DIVTRACE_DEVICE_DEFERRED, stream, 1,
                                     shape, NULL, 0), DIVTRACE_OK);
    assert_int_equal(divtrace_step_end(t, on_host), DIVTRACE_OK);
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);

    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_int_equal(tf->nsteps, 3);
    assert_true(tf->steps[0].loss == (double)first);
    assert_true(tf->steps[1].loss == (double)second);
    assert_true(tf->steps[2].loss == (double)on_host);
    struct trace_oprec want;
    stats_compute(host, N, &want);
    for (int i = 0; i < 3; i++)
        assert_true(tf->steps[i].rec[0].hash == want.hash);
    trace_close(tf);
    cudaStreamDestroy(stream);
    cudaFree(a);
    cudaFree(loss);
    free(host);
}


/* Steps ended without a wait (divtrace_step_end_async): each step's
 * records and loss, read a step later, are those of its bytes at its
 * flushes, whatever the stream does after them: a batch of one launch
 * (polled, no wait) and a large record (waited for); the loss copied by
 * the next step's batch on its stream, or (step 2's batch on another
 * stream) at the step's write; a checkpoint, a step ended with a wait,
 * divtrace_sync and divtrace_close after such steps write them first. */
static void test_step_end_async(void **state)
{
    (void)state;
    enum { NA = 3000, NB = 4096 * 40 + 3, STEPS = 7 };
    float *a, *b, *loss[2];
    float *ha = dt_malloc(NA * sizeof *ha), *hb = dt_malloc(NB * sizeof *hb), *junk = dt_malloc(NB * sizeof *junk);
    assert_int_equal(cudaMalloc((void **)&a, NA * sizeof *a), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&b, NB * sizeof *b), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&loss[0], sizeof *loss[0]), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&loss[1], sizeof *loss[1]), cudaSuccess);
    cudaStream_t st, other;
    assert_int_equal(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    lg_fill(junk, NB, LG_SPECIALS, 5);
    const char *path = tu_path("async.dtr");
    divtrace *t;
    int64_t sa[1] = {NA}, sb[1] = {NB};
    uint64_t want_a[STEPS], want_b[STEPS];
    float want_loss[STEPS];
    assert_int_equal(divtrace_open(&t, path, NULL, "op"), DIVTRACE_OK);
    for (int s = 0; s < STEPS; s++) {
        cudaStream_t rs = s == 2 ? other : st;
        lg_fill(ha, NA, s % 2 ? LG_NONFINITE : LG_UNIFORM, 100 + (uint64_t)s);
        lg_fill(hb, NB, LG_UNIFORM, 200 + (uint64_t)s);
        struct trace_oprec r;
        stats_compute(ha, NA, &r);
        want_a[s] = r.hash;
        stats_compute(hb, NB, &r);
        want_b[s] = r.hash;
        want_loss[s] = 0.25f * (float)s - 1.0f / 3.0f;
        if (s == 2)
            assert_int_equal(cudaStreamSynchronize(st), cudaSuccess);
        assert_int_equal(cudaMemcpyAsync(a, ha, NA * sizeof *a, cudaMemcpyHostToDevice, rs), cudaSuccess);
        assert_int_equal(cudaStreamSynchronize(rs), cudaSuccess); /* ha is refilled next step */
        assert_int_equal(divtrace_step_begin(t, (uint64_t)s), DIVTRACE_OK);
        assert_int_equal(divtrace_record(t, "a", "x", DIVTRACE_FORWARD, a, DIVTRACE_DEVICE_DEFERRED, rs, 1, sa,
                                         NULL, 0), DIVTRACE_OK);
        assert_int_equal(divtrace_flush(t), DIVTRACE_OK);
        /* after the flush, in stream order: a overwritten; the loss, in the
         * buffer the step before last used (two in turn: the step before's
         * is read by this step's first batch on st, or when it is written) */
        assert_int_equal(cudaMemcpyAsync(a, junk, NA * sizeof *a, cudaMemcpyHostToDevice, rs), cudaSuccess);
        assert_int_equal(cudaMemcpyAsync(loss[s % 2], &want_loss[s], sizeof *loss[0], cudaMemcpyHostToDevice, st),
                         cudaSuccess);
        assert_int_equal(cudaMemcpyAsync(b, hb, NB * sizeof *b, cudaMemcpyHostToDevice, st), cudaSuccess);
        assert_int_equal(divtrace_record(t, "b", "x", DIVTRACE_GRAD, b, DIVTRACE_DEVICE_DEFERRED, st, 1, sb,
                                         NULL, 0), DIVTRACE_OK);
        if (s == 4) {
            assert_int_equal(cudaStreamSynchronize(st), cudaSuccess);
            float h = want_loss[s];
            assert_int_equal(divtrace_step_end(t, h), DIVTRACE_OK); /* with a wait, after an async one */
        } else {
            assert_int_equal(divtrace_step_end_async(t, loss[s % 2], st), DIVTRACE_OK);
        }
        /* b overwritten in order on its stream, after the step's end */
        assert_int_equal(cudaMemcpyAsync(b, junk, NB * sizeof *b, cudaMemcpyHostToDevice, st), cudaSuccess);
        if (s == 3) { /* the state before step 4: after step 3 in the file */
            assert_int_equal(divtrace_checkpoint_begin(t, 4), DIVTRACE_OK);
            assert_int_equal(divtrace_checkpoint_add(t, "a", ha, DIVTRACE_HOST, 1, sa), DIVTRACE_OK);
            assert_int_equal(divtrace_checkpoint_end(t), DIVTRACE_OK);
        }
        if (s == 5)
            assert_int_equal(divtrace_sync(t), DIVTRACE_OK);
    }
    assert_int_equal(divtrace_step_end_async(t, NULL, st), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);

    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, path), 0);
    assert_int_equal(tf->nsteps, STEPS);
    for (int s = 0; s < STEPS; s++) {
        assert_int_equal(tf->steps[s].step, s);
        assert_true(tf->steps[s].loss == (double)want_loss[s]);
        assert_true(tf->steps[s].rec[0].hash == want_a[s]);
        assert_true(tf->steps[s].rec[1].hash == want_b[s]);
    }
    assert_int_equal(tf->nckpt, 1);
    trace_close(tf);
    cudaStreamDestroy(st);
    cudaStreamDestroy(other);
    cudaFree(a);
    cudaFree(b);
    cudaFree(loss[0]);
    cudaFree(loss[1]);
    free(ha);
    free(hb);
    free(junk);
}

int main(void)
{
    struct backend_options opt;
    memset(&opt, 0, sizeof opt);
    opt.threads = 1;
    lg_be = backend_find("cuda");
    if (!lg_be || lg_be->init(&lg_ctx, &opt) < 0) {
        printf("test_lib_gpu: skipped: %s\n", dt_error());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_unaligned),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_stream_order),
        cmocka_unit_test(test_deferred_flush),
        cmocka_unit_test(test_loss_on_device),
        cmocka_unit_test(test_step_end_async),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    lg_be->free(lg_ctx);
    return rc;
}
