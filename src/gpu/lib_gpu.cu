/* lib_gpu.cu: libdivtrace's device tensors (see lib_gpu.h). A record is
 * queued on the caller's stream by gpu_trace_one, into its own piece of
 * scratch and its slot of the record array; a deferred record waits in a
 * host list until a flush queues the whole list as one batch
 * (gpu_trace_many: one launch for a batch of few small tensors, else one
 * copy of descriptors in and two or three kernels). The record array is
 * pinned host memory mapped into the device: the kernels write the records
 * there, so the step's end only waits for the streams used and reads them
 * (no copy back, no event). Scratch (device) and staging (pinned)
 * are handed out from chunks that never move while a step is queued; only
 * the record array, when a first step outgrows it, waits for the queued
 * work before it is moved. Every CUDA failure comes back as a status and
 * one line, never an abort. The CUDA calls and host allocations whose
 * failure is an error are counted for the test-only fault injection
 * (lib_fault_cuda, lib_fault_alloc): the one it names fails, not made. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
extern "C" {
#include "lib_gpu.h"
}

#define LG_CHUNK_MIN ((size_t)4 << 20)
#define LG_KNOWN 4 /* pointers remembered a record slot */

struct lg_chunk {
    unsigned char *p;
    size_t size, used;
};

/* Memory for queued work, device or pinned, reused once it has run. */
struct lg_pool {
    struct lg_chunk *chunk;
    int n, cap;
    int pinned;
};

static void lg_pool_free(struct lg_pool *p);

struct lib_gpu {
    int device;
    struct lib_fault *fault;    /* the handle's counters (may be NULL) */
    struct lg_pool scratch;     /* device scratch of the queued records */
    struct lg_pool staging;     /* pinned: the deferred batches' descriptors */
    /* deferred records not yet queued (one stream) */
    const float **dptr;
    size_t *dcount;
    uint32_t *dslot;
    int ndef, cdef;
    cudaStream_t dstream;
    struct trace_oprec *hrec;   /* (rcap) by slot: pinned, mapped */
    struct trace_oprec *drec;   /* the same memory as the device addresses it */
    unsigned *dctr;             /* (rcap) on the device: each slot's block counter, 0 at rest */
    uint32_t rcap;
    const float *(*known)[LG_KNOWN]; /* (nknown) by slot: the last pointers found on this device there */
    uint32_t nknown;
    cudaStream_t *streams;      /* the callers' streams used since the last collect */
    int nstreams, cstreams;
    uint32_t nslots;            /* highest queued slot + 1 */
    int pending;
    float *hval;                /* pinned: the float lib_gpu_fetch copies */
    const float *known_val[LG_KNOWN]; /* the last pointers lib_gpu_fetch found on this device */
    /* queued since the last collect: a batch whose records are not written
     * first word last (the harvest cannot poll them) */
    int unordered;
    /* lib_gpu_loss_later's float: to be copied by the next batch on its
     * stream (1), copied or queued (2), nothing (0) */
    int loss_state;
    const float *loss_src;
    cudaStream_t loss_stream;
};

/* The first word of a record slot not written yet, and the bits of a loss
 * not copied yet (a NaN no float operation makes; a loss with these bits
 * only costs a wait). */
#define LG_UNSET UINT64_MAX
#define LG_LOSS_UNSET 0x7fa5d1f7u

static int lg_fail(char *msg, size_t n, int status, const char *what, cudaError_t e)
{
    snprintf(msg, n, "%s: %s", what, cudaGetErrorString(e));
    return status;
}
/* A counted CUDA call: made, or the injected failure (LG_INJECTED, which
 * CUDA's own unknown errors share: both are CUDA faults, never the caller's). */
#define LG_INJECTED cudaErrorUnknown
#define LG_CUDA(f, call) (lib_fault_cuda(f) ? LG_INJECTED : (call))
#define LG_CHECKF(f, call)                                                                  \
    do {                                                                                    \
        cudaError_t lg_e_ = LG_CUDA(f, (call));                                             \
        if (lg_e_ != cudaSuccess)                                                           \
            return lg_fail(msg, n, DIVTRACE_ECUDA, #call, lg_e_);                           \
    } while (0)
/* in a function of g (and msg, n) */
#define LG_CHECK(call) LG_CHECKF(g->fault, call)

/* A counted host allocation. */
static void *lg_realloc(struct lib_fault *f, void *p, size_t size)
{
    return lib_fault_alloc(f) ? NULL : realloc(p, size);
}

/* The device of a call, the caller's current device restored after it. */
struct lg_on {
    int prev, ok;
    explicit lg_on(int dev)
    {
        ok = cudaGetDevice(&prev) == cudaSuccess && (prev == dev || cudaSetDevice(dev) == cudaSuccess);
        if (!ok || prev == dev)
            prev = -1; /* nothing to restore */
    }
    ~lg_on()
    {
        if (prev >= 0)
            cudaSetDevice(prev);
    }
};

/* Whether CUDA has a device here; ENOCUDA with the reason otherwise. */
static int lg_have_device(struct lib_fault *f, char *msg, size_t n)
{
    int ndev = 0;
    cudaError_t e = LG_CUDA(f, cudaGetDeviceCount(&ndev));
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (e == LG_INJECTED)
            return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaGetDeviceCount", e);
        return lg_fail(msg, n, DIVTRACE_ENOCUDA, "a device pointer, but no CUDA device is usable "
                       "(cudaGetDeviceCount)", e);
    }
    if (ndev == 0) {
        snprintf(msg, n, "a device pointer, but there is no CUDA device");
        return DIVTRACE_ENOCUDA;
    }
    return DIVTRACE_OK;
}

/* The device of ptr, which must be device (or managed) memory. */
static int lg_device_of(struct lib_fault *f, const void *ptr, int *dev, char *msg, size_t n)
{
    cudaPointerAttributes a;
    cudaError_t e = LG_CUDA(f, cudaPointerGetAttributes(&a, ptr));
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (e == LG_INJECTED)
            return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaPointerGetAttributes", e);
        return lg_fail(msg, n, DIVTRACE_EINVAL, "not a pointer CUDA knows (cudaPointerGetAttributes)", e);
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
        snprintf(msg, n, "%p is host memory, not device memory (record it as DIVTRACE_HOST)", ptr);
        return DIVTRACE_EINVAL;
    }
    *dev = a.device;
    return DIVTRACE_OK;
}

int lib_gpu_new(struct lib_gpu **gp, const void *ptr, struct lib_fault *f, char *msg, size_t n)
{
    *gp = NULL;
    int rc = lg_have_device(f, msg, n), dev = 0;
    if (rc == DIVTRACE_OK)
        rc = lg_device_of(f, ptr, &dev, msg, n);
    if (rc != DIVTRACE_OK)
        return rc;
    lg_on on(dev);
    if (!on.ok)
        return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaSetDevice", cudaGetLastError());
    struct lib_gpu *g = (struct lib_gpu *)(lib_fault_alloc(f) ? NULL : calloc(1, sizeof *g));
    if (!g) {
        snprintf(msg, n, "out of memory");
        return DIVTRACE_ENOMEM;
    }
    g->device = dev;
    g->fault = f;
    g->staging.pinned = 1;
    *gp = g;
    return DIVTRACE_OK;
}

void lib_gpu_free(struct lib_gpu *g)
{
    if (!g)
        return;
    lg_on on(g->device);
    if (g->pending || g->loss_state)
        cudaDeviceSynchronize();
    lg_pool_free(&g->scratch);
    lg_pool_free(&g->staging);
    if (g->hrec)
        cudaFreeHost(g->hrec);
    if (g->hval)
        cudaFreeHost(g->hval);
    if (g->dctr)
        cudaFree(g->dctr);
    cudaGetLastError();
    free(g->streams);
    free(g->known);
    free(g->dptr);
    free(g->dcount);
    free(g->dslot);
    free(g);
}

int lib_gpu_pending(const struct lib_gpu *g)
{
    return g && g->pending;
}

/* Wait for everything queued on the callers' streams. */
static int lg_wait_queued(struct lib_gpu *g, char *msg, size_t n)
{
    for (int i = 0; i < g->nstreams; i++)
        LG_CHECK(cudaStreamSynchronize(g->streams[i]));
    return DIVTRACE_OK;
}

/* A chunk of the pool's kind: pinned host memory or device memory. */
static cudaError_t lg_chunk_alloc(const struct lg_pool *p, unsigned char **out, size_t size)
{
    return p->pinned ? cudaMallocHost((void **)out, size) : cudaMalloc((void **)out, size);
}

static void lg_chunk_free(const struct lg_pool *p, void *c)
{
    if (p->pinned)
        cudaFreeHost(c);
    else
        cudaFree(c);
}

static void lg_pool_free(struct lg_pool *p)
{
    for (int i = 0; i < p->n; i++)
        lg_chunk_free(p, p->chunk[i].p);
    free(p->chunk);
    memset(p, 0, sizeof *p);
}

/* bytes (a multiple of 256) from a chunk that stays where it is. */
static int lg_take(struct lib_fault *f, struct lg_pool *p, size_t bytes, void **out, char *msg, size_t n)
{
    for (int i = 0; i < p->n; i++) {
        struct lg_chunk *c = &p->chunk[i];
        if (c->size - c->used >= bytes) {
            *out = c->p + c->used;
            c->used += bytes;
            return DIVTRACE_OK;
        }
    }
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        struct lg_chunk *ch = (struct lg_chunk *)lg_realloc(f, p->chunk, (size_t)cap * sizeof *ch);
        if (!ch) {
            snprintf(msg, n, "out of memory");
            return DIVTRACE_ENOMEM;
        }
        p->chunk = ch;
        p->cap = cap;
    }
    size_t total = 0;
    for (int i = 0; i < p->n; i++)
        total += p->chunk[i].size;
    size_t size = total > LG_CHUNK_MIN ? total : LG_CHUNK_MIN;
    if (size < bytes)
        size = bytes;
    struct lg_chunk *c = &p->chunk[p->n];
    cudaError_t e = LG_CUDA(f, lg_chunk_alloc(p, &c->p, size));
    if (e != cudaSuccess) {
        cudaGetLastError();
        return lg_fail(msg, n, DIVTRACE_ECUDA, p->pinned ? "cudaMallocHost of hash staging"
                                                         : "cudaMalloc of hash scratch", e);
    }
    c->size = size;
    c->used = bytes;
    p->n++;
    *out = c->p;
    return DIVTRACE_OK;
}

/* Nothing queued uses the pool any more: all of it free, merged into one
 * chunk so that the next step allocates nothing. */
static void lg_pool_reset(struct lg_pool *p)
{
    if (p->n > 1) {
        size_t total = 0;
        for (int i = 0; i < p->n; i++) {
            total += p->chunk[i].size;
            lg_chunk_free(p, p->chunk[i].p);
        }
        p->n = 0;
        cudaError_t e = lg_chunk_alloc(p, &p->chunk[0].p, total);
        if (e == cudaSuccess) {
            p->chunk[0].size = total;
            p->n = 1;
        }
        cudaGetLastError();
    }
    for (int i = 0; i < p->n; i++)
        p->chunk[i].used = 0;
}

/* A record array of at least `need` slots; the queued records move along. */
static int lg_reserve_rec(struct lib_gpu *g, uint32_t need, char *msg, size_t n)
{
    if (need <= g->rcap)
        return DIVTRACE_OK;
    uint32_t cap = g->rcap ? g->rcap : 256;
    while (cap < need)
        cap *= 2;
    struct trace_oprec *h = NULL, *d = NULL;
    unsigned *ctr = NULL;
    LG_CHECK(cudaHostAlloc((void **)&h, (size_t)cap * sizeof *h, cudaHostAllocMapped | cudaHostAllocPortable));
    cudaError_t e = LG_CUDA(g->fault, cudaHostGetDevicePointer((void **)&d, h, 0));
    if (e == cudaSuccess)
        e = LG_CUDA(g->fault, cudaMalloc((void **)&ctr, (size_t)cap * sizeof *ctr));
    if (e == cudaSuccess)
        e = LG_CUDA(g->fault, cudaMemset(ctr, 0, (size_t)cap * sizeof *ctr));
    if (e == cudaSuccess)
        e = LG_CUDA(g->fault, cudaDeviceSynchronize()); /* the zeros are there before a record counts on them */
    if (e != cudaSuccess) {
        cudaFreeHost(h);
        if (ctr)
            cudaFree(ctr);
        return lg_fail(msg, n, DIVTRACE_ECUDA, "the record array (cudaHostAlloc, cudaMalloc)", e);
    }
    if (g->hrec) {
        /* the queued records land in the old array, and their counters
         * are back at 0, once they have run */
        int rc = lg_wait_queued(g, msg, n);
        if (rc != DIVTRACE_OK) {
            cudaFreeHost(h);
            cudaFree(ctr);
            return rc;
        }
        memcpy(h, g->hrec, (size_t)g->rcap * sizeof *h);
        cudaFreeHost(g->hrec);
        cudaFree(g->dctr);
    }
    g->hrec = h;
    g->drec = d;
    g->dctr = ctr;
    g->rcap = cap;
    return DIVTRACE_OK;
}

/* A device pointer the library is given (row: the last LG_KNOWN found on
 * this device for its place): aligned to a float and, unless row holds it,
 * on this trace's GPU (asked of CUDA; then it goes first in row). */
static int lg_check_ptr(struct lib_gpu *g, const float **row, const float *x, char *msg, size_t n)
{
    int seen = 0;
    for (int i = 0; row && i < LG_KNOWN && !seen; i++)
        seen = row[i] == x;
    if (!seen) {
        int dev, rc = lg_device_of(g->fault, x, &dev, msg, n);
        if (rc != DIVTRACE_OK)
            return rc;
        if (dev != g->device) {
            snprintf(msg, n, "on GPU %d, but this trace's device tensors are on GPU %d (one GPU a trace)",
                     dev, g->device);
            return DIVTRACE_EINVAL;
        }
        if (row) {
            memmove(row + 1, row, (LG_KNOWN - 1) * sizeof *row);
            row[0] = x;
        }
    }
    if (((uintptr_t)x & 3) != 0) {
        snprintf(msg, n, "%p is not aligned to a float", (const void *)x);
        return DIVTRACE_EINVAL;
    }
    return DIVTRACE_OK;
}

/* What every device record is checked for: on this trace's GPU, aligned
 * to a float, not too large to hash. The pointer query (one to a few
 * microseconds) is made when a slot sees a pointer that is not one of the
 * last LG_KNOWN it saw: a training loop's tensors come back at the same
 * addresses step after step, or cycle among a few (a caching allocator
 * that hands out the blocks earlier steps freed). */
static int lg_check_tensor(struct lib_gpu *g, const float *x, size_t count, uint32_t slot, char *msg,
                           size_t n)
{
    if (slot >= g->nknown) {
        uint32_t cap = g->nknown ? g->nknown : 256;
        while (cap <= slot)
            cap *= 2;
        const float *(*k)[LG_KNOWN] =
            (const float *(*)[LG_KNOWN])lg_realloc(g->fault, g->known, (size_t)cap * sizeof *k);
        if (k) { /* without room, the slot's pointer is asked of CUDA every time */
            memset(k + g->nknown, 0, (size_t)(cap - g->nknown) * sizeof *k);
            g->known = k;
            g->nknown = cap;
        }
    }
    int rc = lg_check_ptr(g, slot < g->nknown ? g->known[slot] : NULL, x, msg, n);
    if (rc != DIVTRACE_OK)
        return rc;
    if (gpu_trace_one_bytes(count) == 0) {
        snprintf(msg, n, "%zu elements are too many to hash on the device", count);
        return DIVTRACE_EINVAL;
    }
    return DIVTRACE_OK;
}

/* Room to note stream s among the streams used (*known: it is there
 * already), before anything is queued on it. */
static int lg_stream_room(struct lib_gpu *g, cudaStream_t s, int *known, char *msg, size_t n)
{
    *known = 0;
    for (int i = 0; i < g->nstreams && !*known; i++)
        *known = g->streams[i] == s;
    if (!*known && g->nstreams == g->cstreams) {
        int cap = g->cstreams ? 2 * g->cstreams : 4;
        cudaStream_t *st = (cudaStream_t *)lg_realloc(g->fault, g->streams, (size_t)cap * sizeof *st);
        if (!st) {
            snprintf(msg, n, "out of memory");
            return DIVTRACE_ENOMEM;
        }
        g->streams = st;
        g->cstreams = cap;
    }
    return DIVTRACE_OK;
}

/* Work was queued on s for slots below top. */
static void lg_queued(struct lib_gpu *g, cudaStream_t s, int known, uint32_t top)
{
    if (!known)
        g->streams[g->nstreams++] = s;
    if (top > g->nslots)
        g->nslots = top;
    g->pending = 1;
}

int lib_gpu_enqueue(struct lib_gpu *g, const float *x, size_t count, void *stream, uint32_t slot,
                    char *msg, size_t n)
{
    int rc = lg_check_tensor(g, x, count, slot, msg, n), known;
    if (rc != DIVTRACE_OK)
        return rc;
    lg_on on(g->device);
    if (!on.ok)
        return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaSetDevice", cudaGetLastError());
    cudaStream_t s = (cudaStream_t)stream;
    void *scratch;
    if ((rc = lg_stream_room(g, s, &known, msg, n)) != DIVTRACE_OK ||
        (rc = lg_take(g->fault, &g->scratch, gpu_trace_one_bytes(count), &scratch, msg, n)) != DIVTRACE_OK ||
        (rc = lg_reserve_rec(g, slot + 1, msg, n)) != DIVTRACE_OK)
        return rc;
    LG_CHECK(gpu_trace_one(scratch, x, count, g->drec + slot, g->dctr + slot, s));
    g->unordered = 1;
    lg_queued(g, s, known, slot + 1);
    return DIVTRACE_OK;
}

int lib_gpu_defer(struct lib_gpu *g, const float *x, size_t count, void *stream, uint32_t slot,
                  char *msg, size_t n)
{
    int rc = lg_check_tensor(g, x, count, slot, msg, n);
    if (rc != DIVTRACE_OK)
        return rc;
    cudaStream_t s = (cudaStream_t)stream;
    if (g->ndef > 0 && s != g->dstream && (rc = lib_gpu_flush(g, msg, n)) != DIVTRACE_OK)
        return rc; /* one stream a batch: the batch runs after what its stream queued */
    if (g->ndef == g->cdef) {
        int cap = g->cdef ? 2 * g->cdef : 256;
        const float **p = (const float **)lg_realloc(g->fault, g->dptr, (size_t)cap * sizeof *p);
        if (p)
            g->dptr = p;
        size_t *c = (size_t *)lg_realloc(g->fault, g->dcount, (size_t)cap * sizeof *c);
        if (c)
            g->dcount = c;
        uint32_t *sl = (uint32_t *)lg_realloc(g->fault, g->dslot, (size_t)cap * sizeof *sl);
        if (sl)
            g->dslot = sl;
        if (!p || !c || !sl) {
            snprintf(msg, n, "out of memory");
            return DIVTRACE_ENOMEM;
        }
        g->cdef = cap;
    }
    g->dptr[g->ndef] = x;
    g->dcount[g->ndef] = count;
    g->dslot[g->ndef] = slot;
    g->ndef++;
    g->dstream = s;
    g->pending = 1;
    return DIVTRACE_OK;
}

int lib_gpu_fetch(struct lib_gpu *g, const float *x, void *stream, char *msg, size_t n)
{
    int rc = lg_check_ptr(g, g->known_val, x, msg, n), known;
    if (rc != DIVTRACE_OK)
        return rc;
    lg_on on(g->device);
    if (!on.ok)
        return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaSetDevice", cudaGetLastError());
    if (!g->hval)
        LG_CHECK(cudaMallocHost((void **)&g->hval, sizeof *g->hval));
    cudaStream_t s = (cudaStream_t)stream;
    if ((rc = lg_stream_room(g, s, &known, msg, n)) != DIVTRACE_OK)
        return rc;
    LG_CHECK(cudaMemcpyAsync(g->hval, x, sizeof *g->hval, cudaMemcpyDeviceToHost, s));
    lg_queued(g, s, known, 0);
    return DIVTRACE_OK;
}

float lib_gpu_fetched(const struct lib_gpu *g)
{
    return g && g->hval ? *g->hval : NAN;
}

int lib_gpu_flush(struct lib_gpu *g, char *msg, size_t n)
{
    if (!g || g->ndef == 0)
        return DIVTRACE_OK;
    lg_on on(g->device);
    if (!on.ok)
        return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaSetDevice", cudaGetLastError());
    size_t dev_bytes, host_bytes;
    if (gpu_trace_many_bytes(g->dcount, g->ndef, &dev_bytes, &host_bytes) < 0) {
        snprintf(msg, n, "%d deferred tensors are too many to hash in one batch", g->ndef);
        return DIVTRACE_EINVAL;
    }
    uint32_t top = 0;
    for (int i = 0; i < g->ndef; i++)
        if (g->dslot[i] + 1 > top)
            top = g->dslot[i] + 1;
    int rc, known;
    void *scratch, *staging;
    if ((rc = lg_stream_room(g, g->dstream, &known, msg, n)) != DIVTRACE_OK ||
        (rc = lg_take(g->fault, &g->scratch, dev_bytes, &scratch, msg, n)) != DIVTRACE_OK ||
        (rc = lg_take(g->fault, &g->staging, host_bytes, &staging, msg, n)) != DIVTRACE_OK ||
        (rc = lg_reserve_rec(g, top, msg, n)) != DIVTRACE_OK)
        return rc;
    /* the slots' first words as not written: the kernel writes them last */
    for (int i = 0; i < g->ndef; i++)
        *(volatile uint64_t *)&g->hrec[g->dslot[i]] = LG_UNSET;
    const float *lsrc = NULL;
    if (g->loss_state == 1 && g->loss_stream == g->dstream) {
        lsrc = g->loss_src; /* the loss of the step before, in this batch's launch */
        g->loss_state = 2;
    }
    int ordered;
    LG_CHECK(gpu_trace_many(scratch, staging, g->dptr, g->dcount, g->dslot, g->ndef, g->drec, g->dctr, lsrc,
                            lsrc ? g->hval : NULL, &ordered, g->dstream));
    if (!ordered)
        g->unordered = 1;
    lg_queued(g, g->dstream, known, top);
    g->ndef = 0;
    return DIVTRACE_OK;
}

/* After a collect or a discard: nothing is queued or deferred, scratch
 * and staging are free. */
static void lg_reset(struct lib_gpu *g)
{
    lg_pool_reset(&g->scratch);
    lg_pool_reset(&g->staging);
    g->ndef = 0;
    g->nstreams = 0;
    g->nslots = 0;
    g->pending = 0;
    g->unordered = 0;
}

int lib_gpu_collect(struct lib_gpu *g, struct trace_oprec *out, uint32_t nslots, char *msg, size_t n)
{
    lg_on on(g->device);
    if (!on.ok)
        return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaSetDevice", cudaGetLastError());
    int rc = lib_gpu_flush(g, msg, n);
    if (rc != DIVTRACE_OK)
        return rc;
    uint32_t k = nslots < g->nslots ? nslots : g->nslots;
    /* the records are in the mapped array once every stream used is there */
    if ((rc = lg_wait_queued(g, msg, n)) != DIVTRACE_OK)
        return rc;
    memcpy(out, g->hrec, (size_t)k * sizeof *out);
    lg_reset(g);
    return DIVTRACE_OK;
}

int lib_gpu_harvest(struct lib_gpu *g, struct trace_oprec *out, uint32_t nslots, const char *on_dev, char *msg,
                    size_t n)
{
    int rc = lib_gpu_flush(g, msg, n);
    if (rc != DIVTRACE_OK)
        return rc;
    uint32_t k = nslots < g->nslots ? nslots : g->nslots;
    /* every record written (its first word, written last, changed): no
     * wait; else wait for the streams, as lib_gpu_collect does */
    int done = !g->unordered;
    for (uint32_t i = 0; i < k && done; i++)
        done = !on_dev[i] || *(volatile uint64_t *)&g->hrec[i] != LG_UNSET;
    if (!done) {
        lg_on on(g->device);
        if (!on.ok)
            return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaSetDevice", cudaGetLastError());
        if ((rc = lg_wait_queued(g, msg, n)) != DIVTRACE_OK)
            return rc;
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    memcpy(out, g->hrec, (size_t)k * sizeof *out);
    lg_reset(g);
    return DIVTRACE_OK;
}

int lib_gpu_loss_later(struct lib_gpu *g, const float *x, void *stream, char *msg, size_t n)
{
    int rc = lg_check_ptr(g, g->known_val, x, msg, n);
    if (rc != DIVTRACE_OK)
        return rc;
    if (g->loss_state != 0) {
        snprintf(msg, n, "the loss of the step before was not read");
        return DIVTRACE_ESTATE;
    }
    if (!g->hval) {
        lg_on on(g->device);
        if (!on.ok)
            return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaSetDevice", cudaGetLastError());
        LG_CHECK(cudaMallocHost((void **)&g->hval, sizeof *g->hval));
    }
    uint32_t unset = LG_LOSS_UNSET;
    memcpy((void *)g->hval, &unset, sizeof unset);
    g->loss_src = x;
    g->loss_stream = (cudaStream_t)stream;
    g->loss_state = 1;
    return DIVTRACE_OK;
}

int lib_gpu_loss_value(struct lib_gpu *g, float *v, char *msg, size_t n)
{
    if (!g || g->loss_state == 0) {
        snprintf(msg, n, "no loss to read");
        return DIVTRACE_ESTATE;
    }
    int state = g->loss_state;
    g->loss_state = 0; /* read now, or given up with the error */
    lg_on on(g->device);
    if (!on.ok)
        return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaSetDevice", cudaGetLastError());
    if (state == 1) /* no batch on its stream since: copy it now */
        LG_CHECK(cudaMemcpyAsync(g->hval, g->loss_src, sizeof *g->hval, cudaMemcpyDeviceToHost, g->loss_stream));
    uint32_t bits;
    memcpy(&bits, (const void *)g->hval, sizeof bits);
    if (bits == LG_LOSS_UNSET) /* not there yet, or a loss with these bits */
        LG_CHECK(cudaStreamSynchronize(g->loss_stream));
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    memcpy(v, (const void *)g->hval, sizeof *v);
    return DIVTRACE_OK;
}

void lib_gpu_discard(struct lib_gpu *g)
{
    if (!g || !g->pending)
        return;
    lg_on on(g->device);
    /* a caller's stream may be gone by now: wait for the whole device */
    cudaDeviceSynchronize();
    cudaGetLastError();
    lg_reset(g);
}

int lib_gpu_settle(struct lib_gpu *g, char *msg, size_t n)
{
    if (!g)
        return DIVTRACE_OK;
    lg_on on(g->device);
    if (!on.ok)
        return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaSetDevice", cudaGetLastError());
    LG_CHECK(cudaDeviceSynchronize());
    g->nstreams = 0;          /* all written: nothing to wait for */
    g->loss_stream = 0;       /* a loss not copied yet: on the default stream */
    return DIVTRACE_OK;
}

int lib_gpu_download(struct lib_fault *f, float *dst, const float *x, size_t count, char *msg, size_t n)
{
    int dev, rc = lg_have_device(f, msg, n);
    if (rc == DIVTRACE_OK)
        rc = lg_device_of(f, x, &dev, msg, n);
    if (rc != DIVTRACE_OK)
        return rc;
    lg_on on(dev);
    if (!on.ok)
        return lg_fail(msg, n, DIVTRACE_ECUDA, "cudaSetDevice", cudaGetLastError());
    /* the tensor's producers may be on any stream: wait for all of them */
    LG_CHECKF(f, cudaDeviceSynchronize());
    LG_CHECKF(f, cudaMemcpy(dst, x, count * sizeof *dst, cudaMemcpyDeviceToHost));
    return DIVTRACE_OK;
}
