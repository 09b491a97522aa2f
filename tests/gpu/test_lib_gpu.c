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
 * memory is read in stream order with the step's records. Under faults
 * (divtrace_record(3), FAULTS) every CUDA call of the recording path failing
 * in turn (DIVTRACE_TEST_FAIL_CUDA), and every allocation
 * (DIVTRACE_TEST_FAIL_ALLOC), in a loop of device records, deferred ones,
 * asynchronous step ends and device checkpoints: the training's host and
 * device values bit for bit those of the run that records nothing, one
 * report line, later calls no-ops, the close's status, the file a prefix
 * of the clean recording. Skips (exit 77) where no GPU is usable. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    /* a copy from pageable memory may return before its DMA lands, and the
     * non-blocking stream does not wait for the legacy one: the loss is
     * there before the step ends only after a device-wide wait (a loaded
     * machine read the old value) */
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
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

/* ---- faults ---- */

#define LF_N 3000
#define LF_STEPS 8

struct lf_run {
    float w[LF_N], loss[LF_STEPS], dev[3][LF_N]; /* the host state; the device buffers at the end */
};
/* The loop's own CUDA calls: no assertion while stderr is captured; the
 * first failure noted (line and CUDA's reason), asserted on afterwards. */
static char lf_cuda_err[256];
#define LF_CU(call)                                                                                  \
    do {                                                                                             \
        cudaError_t lf_e_ = (call);                                                                  \
        if (lf_e_ != cudaSuccess && !lf_cuda_err[0])                                                 \
            snprintf(lf_cuda_err, sizeof lf_cuda_err, "line %d: %s: %s", __LINE__, #call,            \
                     cudaGetErrorString(lf_e_));                                                     \
    } while (0)

/* A training loop whose state, kept on the host, is uploaded every step:
 * the batch x, the parameter w and its gradient g, recorded from the device
 * (deferred, immediate, a flush), then w after the update (deferred); the
 * loss read from device memory with no wait (divtrace_step_end_async); a
 * checkpoint of w from the device every 4 steps. t NULL: nothing recorded;
 * the calls' statuses are not looked at (the loop goes on as a program that
 * ignores them would). Its stream is destroyed before the close, which
 * writes the last step all the same; the device memory stays (the close
 * reads the last loss). */
static void lf_train(divtrace *t, struct lf_run *r)
{
    static float *d[3], *dl[2];
    float x[LF_N], g[LF_N];
    cudaStream_t st;
    LF_CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int k = 0; k < 3 && !d[k]; k++)
        LF_CU(cudaMalloc((void **)&d[k], LF_N * sizeof(float)));
    for (int k = 0; k < 2 && !dl[k]; k++)
        LF_CU(cudaMalloc((void **)&dl[k], sizeof(float)));
    int64_t sh[1] = {LF_N};
    for (int i = 0; i < LF_N; i++)
        r->w[i] = (float)(i % 17) * 0.25f;
    for (int s = 0; s < LF_STEPS; s++) {
        float loss = 0;
        for (int i = 0; i < LF_N; i++) {
            x[i] = (float)((i * 7 + s) % 23) * 0.125f;
            g[i] = r->w[i] - x[i];
            loss += g[i] * g[i] / LF_N;
        }
        r->loss[s] = loss;
        LF_CU(cudaMemcpyAsync(d[0], x, sizeof x, cudaMemcpyHostToDevice, st));
        LF_CU(cudaMemcpyAsync(d[1], r->w, sizeof r->w, cudaMemcpyHostToDevice, st));
        LF_CU(cudaMemcpyAsync(d[2], g, sizeof g, cudaMemcpyHostToDevice, st));
        LF_CU(cudaMemcpyAsync(dl[s % 2], &loss, sizeof loss, cudaMemcpyHostToDevice, st));
        if (t && s % 4 == 0) {
            LF_CU(cudaStreamSynchronize(st));
            divtrace_checkpoint_begin(t, (uint64_t)s);
            divtrace_checkpoint_add(t, "w", d[1], DIVTRACE_DEVICE, 1, sh);
            divtrace_checkpoint_end(t);
        }
        if (t) {
            divtrace_step_begin(t, (uint64_t)s);
            divtrace_record(t, "x", "data", DIVTRACE_INPUT, d[0], DIVTRACE_DEVICE_DEFERRED, st, 1, sh, NULL, 0);
            divtrace_record(t, "w", "param", DIVTRACE_PARAM, d[1], DIVTRACE_DEVICE, st, 1, sh, NULL, 0);
            divtrace_record(t, "g", "sub", DIVTRACE_GRAD, d[2], DIVTRACE_DEVICE_DEFERRED, st, 1, sh, NULL, 0);
            divtrace_flush(t);
        }
        for (int i = 0; i < LF_N; i++)
            r->w[i] -= 0.5f * g[i];
        LF_CU(cudaMemcpyAsync(d[1], r->w, sizeof r->w, cudaMemcpyHostToDevice, st));
        if (t) {
            divtrace_record(t, "w.new", "sgd", DIVTRACE_OPTIMIZER, d[1], DIVTRACE_DEVICE_DEFERRED, st, 1, sh, NULL, 0);
            divtrace_step_end_async(t, dl[s % 2], st);
        }
    }
    LF_CU(cudaStreamSynchronize(st));
    for (int k = 0; k < 3; k++)
        LF_CU(cudaMemcpy(r->dev[k], d[k], LF_N * sizeof(float), cudaMemcpyDeviceToHost));
    cudaStreamDestroy(st);
}

/* stderr while lf_once captures it (-1: not captured); a test's teardown
 * puts it back after a failed assertion. */
static int lf_keep = -1;
static FILE *lf_cap;
static char lf_msg[1024]; /* the last run's stderr */

static int lf_teardown(void **state)
{
    if (lf_keep >= 0) {
        fflush(stderr);
        dup2(lf_keep, 2);
        close(lf_keep);
        lf_keep = -1;
    }
    if (state && lf_cap) { /* a failure while captured: what it wrote */
        char buf[4096];
        size_t k;
        rewind(lf_cap);
        while ((k = fread(buf, 1, sizeof buf, lf_cap)) > 0)
            fwrite(buf, 1, k, stderr);
        fclose(lf_cap);
        lf_cap = NULL;
    }
    return 0;
}

/* One recorded run with env=n (unset: none), stderr's "libdivtrace:" lines
 * counted; the handle's status before the close, and the close's. */
static void lf_once(const char *path, const char *env, unsigned long n, struct lf_run *r, int *status,
                    int *closed, int *reports, int *noop_bad)
{
    char num[32], *err = dt_malloc(65536);
    snprintf(num, sizeof num, "%lu", n);
    if (env)
        setenv(env, num, 1);
    fflush(stderr);
    FILE *cap = lf_cap = tmpfile();
    assert_non_null(cap);
    lf_keep = dup(2);
    dup2(fileno(cap), 2);
    divtrace *t = NULL;
    int orc = divtrace_open(&t, path, NULL, "op");
    if (env)
        unsetenv(env); /* read by the open */
    lf_train(t, r);
    *status = t ? divtrace_status(t) : orc;
    *noop_bad = 0;
    if (t && *status != DIVTRACE_OK) {
        float v = 1;
        int64_t s1[1] = {1};
        *noop_bad += divtrace_step_begin(t, 100) != *status;
        *noop_bad += divtrace_record(t, "w", "x", DIVTRACE_PARAM, &v, DIVTRACE_HOST, NULL, 1, s1, NULL, 0) != *status;
        *noop_bad += divtrace_flush(t) != *status;
        *noop_bad += divtrace_step_end_async(t, &v, NULL) != *status;
        *noop_bad += divtrace_sync(t) != *status;
        *noop_bad += divtrace_checkpoint_begin(t, 101) != *status;
    }
    char msg[512];
    snprintf(msg, sizeof msg, "%s", t ? divtrace_errmsg(t) : divtrace_errmsg(NULL));
    *closed = t ? divtrace_close(t, 0, NULL) : orc;
    lf_teardown(NULL);
    if (lf_cuda_err[0])
        fail_msg("the loop's own CUDA call failed: %s (%s=%lu; divtrace: %s)", lf_cuda_err, env, n, msg);
    size_t k = fread(err, 1, 65535, (rewind(cap), cap));
    err[k] = 0;
    fclose(cap);
    lf_cap = NULL;
    *reports = 0;
    for (const char *p = err; (p = strstr(p, "libdivtrace: ")); p++)
        *reports += p == err || p[-1] == '\n';
    snprintf(lf_msg, sizeof lf_msg, "%s", err);
    if (*status != DIVTRACE_OK && n % 16 == 1) /* a sample of the reports in the log */
        fprintf(stderr, "%s=%lu: %s", env, n, err);
    free(err);
}

/* Every CUDA call (or allocation) of the recording path failing in turn,
 * until a run makes no more than the failing one. */
static void lf_sweep(const char *env, int want)
{
    static struct lf_run clean, run;
    int status, closed, reports, bad, fired = 0, quiet = 0;
    const char *cp = tu_path("clean.dtr");
    lf_once(cp, NULL, 0, &clean, &status, &closed, &reports, &bad);
    if (status + closed + reports != 0)
        fail_msg("the clean run: status %d, close %d, %d reports: %s", status, closed, reports, lf_msg);
    struct trace_file *ct, *tf;
    assert_int_equal(trace_open(&ct, cp), 0);
    assert_int_equal(ct->nsteps, LF_STEPS);
    lf_train(NULL, &run);
    if (lf_cuda_err[0])
        fail_msg("the loop's own CUDA call failed: %s", lf_cuda_err);
    assert_memory_equal(&run, &clean, sizeof run);
    for (unsigned long n = 1; n < 2000 && quiet < 8; n++) {
        const char *path = tu_path("fault.dtr");
        unlink(path);
        lf_once(path, env, n, &run, &status, &closed, &reports, &bad);
        assert_memory_equal(&run, &clean, sizeof run); /* the training as if unrecorded */
        if (status == DIVTRACE_OK && closed == DIVTRACE_OK) {
            assert_int_equal(reports, 0);
            quiet++;
            continue;
        }
        quiet = 0;
        fired++;
        /* the fault met by a call in the loop, or by the close (the last step's write) */
        if (reports != 1 || bad || (status != DIVTRACE_OK && closed != status))
            fail_msg("%s=%lu: %d reports, %d calls not no-ops, status %d, close %d: %s", env, n, reports, bad,
                     status, closed, lf_msg);
        if (closed == DIVTRACE_ENOMEM && access(path, F_OK) != 0)
            continue; /* the open's own allocation */
        if (closed != want || trace_open(&tf, path) != 0)
            fail_msg("%s=%lu: status %d: %s", env, n, closed, lf_msg);
        assert_false(tf->complete);
        assert_true(tf->nsteps < LF_STEPS);
        for (uint64_t s = 0; s < tf->nsteps; s++)
            assert_true(tf->steps[s].root == ct->steps[s].root && tf->steps[s].loss == ct->steps[s].loss);
        assert_true(tf->nevents >= 1 && tf->events[tf->nevents - 1].code == TRACE_EVENT_STOPPED);
        trace_close(tf);
    }
    trace_close(ct);
    printf("%s: %d runs stopped by a fault, each reported once, the training unchanged\n", env, fired);
    assert_int_equal(quiet, 8);
    assert_true(fired > 10);
}

static void test_cuda_faults(void **state)
{
    (void)state;
    lf_sweep("DIVTRACE_TEST_FAIL_CUDA", DIVTRACE_ECUDA);
}

static void test_alloc_faults(void **state)
{
    (void)state;
    lf_sweep("DIVTRACE_TEST_FAIL_ALLOC", DIVTRACE_ENOMEM);
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
        cmocka_unit_test_teardown(test_cuda_faults, lf_teardown),
        cmocka_unit_test_teardown(test_alloc_faults, lf_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    lg_be->free(lg_ctx);
    return rc;
}
