/* lib_gpu.h: libdivtrace's device tensors (src/gpu/lib_gpu.cu), plain C.
 * A device tensor's record (hash.h's tree hash, stats.h's statistics) is
 * computed by gpu_trace_one.cu's kernels on the caller's stream, into a slot of
 * a record array in pinned host memory mapped into the device;
 * lib_gpu_collect waits for the streams used and reads the step's records. Every function returns a divtrace_status and, on an
 * error, writes one line into msg. Built without CUDA, the functions below
 * say so (DIVTRACE_ENOCUDA). */
#ifndef DT_LIB_GPU_H
#define DT_LIB_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "divtrace.h"
#include "trace.h"

struct lib_gpu;

/* Test-only fault injection (libdivtrace_fault.c; libdivtrace(3),
 * ENVIRONMENT): a handle's allocations and CUDA calls in the recording
 * path are counted, and the one numbered by DIVTRACE_TEST_FAIL_ALLOC or
 * DIVTRACE_TEST_FAIL_CUDA (read at divtrace_open; 0: none) fails. */
struct lib_fault {
    uint64_t alloc_at, nalloc;
    uint64_t cuda_at, ncuda;
};
/* Count one allocation (one CUDA call) of f's handle: 1 when it is the
 * one that fails (then it is not made). f may be NULL (nothing counted). */
int lib_fault_alloc(struct lib_fault *f);
int lib_fault_cuda(struct lib_fault *f);

#ifdef HAVE_CUDA
/* Bind to the device that holds ptr (a device pointer); f (the handle's
 * fault counters, kept) may be NULL. */
int lib_gpu_new(struct lib_gpu **g, const void *ptr, struct lib_fault *f, char *msg, size_t n);
void lib_gpu_free(struct lib_gpu *g);
/* Queue the record of x (count floats on the bound device) on stream
 * (a cudaStream_t; NULL the default stream) into record slot `slot`. */
int lib_gpu_enqueue(struct lib_gpu *g, const float *x, size_t count, void *stream, uint32_t slot,
                    char *msg, size_t n);
/* Note the record of x for slot `slot`, to be queued with the other
 * deferred records by the next lib_gpu_flush (or collect); a record on
 * another stream than the ones deferred so far flushes those first. */
int lib_gpu_defer(struct lib_gpu *g, const float *x, size_t count, void *stream, uint32_t slot,
                  char *msg, size_t n);
/* Queue the deferred records as one batch on their stream (g may be NULL;
 * nothing deferred: nothing to do). */
int lib_gpu_flush(struct lib_gpu *g, char *msg, size_t n);
/* Queue a copy of the float at x (device memory on the bound device) on
 * stream; the next collect waits for it, and lib_gpu_fetched reads it. */
int lib_gpu_fetch(struct lib_gpu *g, const float *x, void *stream, char *msg, size_t n);
/* The float the last collected fetch copied (NaN before any). */
float lib_gpu_fetched(const struct lib_gpu *g);
/* Whether anything was queued or deferred since the last collect or discard. */
int lib_gpu_pending(const struct lib_gpu *g);
/* Flush, wait for every queued record and copy slots 0 .. nslots-1 to out;
 * the slots not queued hold nothing useful. */
int lib_gpu_collect(struct lib_gpu *g, struct trace_oprec *out, uint32_t nslots, char *msg,
                    size_t n);
/* lib_gpu_collect for the step before, called before the next step queues
 * anything: the records of slots 0 .. nslots-1 (on_dev[i]: slot i was
 * queued) to out, with no wait when every one of them is already written
 * (a one-launch batch writes a record's first word last; the flush set it
 * to a mark before), else after a wait for the streams used. */
int lib_gpu_harvest(struct lib_gpu *g, struct trace_oprec *out, uint32_t nslots, const char *on_dev, char *msg,
                    size_t n);
/* Note the float at x (device memory) on stream, to be copied by the next
 * batch flushed on that stream, or by lib_gpu_loss_value: x must keep its
 * value until then. */
int lib_gpu_loss_later(struct lib_gpu *g, const float *x, void *stream, char *msg, size_t n);
/* The float lib_gpu_loss_later noted (copied now if no batch took it;
 * waited for if not there yet). */
int lib_gpu_loss_value(struct lib_gpu *g, float *v, char *msg, size_t n);
/* Drop what is queued (a step given up): waits for it to finish. */
void lib_gpu_discard(struct lib_gpu *g);
/* Wait for the whole device, after which a harvest or a loss read waits
 * on no caller's stream (at the close: the caller may have destroyed its
 * streams by then). g may be NULL. */
int lib_gpu_settle(struct lib_gpu *g, char *msg, size_t n);
/* Copy count floats from device memory to dst (synchronous, after the
 * device's queued work); f as for lib_gpu_new. */
int lib_gpu_download(struct lib_fault *f, float *dst, const float *x, size_t count, char *msg,
                     size_t n);
#else
#include <math.h>
#include <stdio.h>

static inline int lib_gpu_nocuda(char *msg, size_t n)
{
    snprintf(msg, n, "a device pointer, but this libdivtrace was built without CUDA support "
                     "(configure --with-cuda)");
    return DIVTRACE_ENOCUDA;
}
static inline int lib_gpu_new(struct lib_gpu **g, const void *ptr, struct lib_fault *f, char *msg, size_t n)
{
    (void)ptr, (void)f;
    *g = NULL;
    return lib_gpu_nocuda(msg, n);
}
static inline void lib_gpu_free(struct lib_gpu *g) { (void)g; }
static inline int lib_gpu_enqueue(struct lib_gpu *g, const float *x, size_t count, void *stream,
                                  uint32_t slot, char *msg, size_t n)
{
    (void)g, (void)x, (void)count, (void)stream, (void)slot;
    return lib_gpu_nocuda(msg, n);
}
static inline int lib_gpu_defer(struct lib_gpu *g, const float *x, size_t count, void *stream,
                                uint32_t slot, char *msg, size_t n)
{
    (void)g, (void)x, (void)count, (void)stream, (void)slot;
    return lib_gpu_nocuda(msg, n);
}
static inline int lib_gpu_flush(struct lib_gpu *g, char *msg, size_t n)
{
    (void)g, (void)msg, (void)n;
    return DIVTRACE_OK;
}
static inline int lib_gpu_fetch(struct lib_gpu *g, const float *x, void *stream, char *msg, size_t n)
{
    (void)g, (void)x, (void)stream;
    return lib_gpu_nocuda(msg, n);
}
static inline float lib_gpu_fetched(const struct lib_gpu *g)
{
    (void)g;
    return NAN;
}
static inline int lib_gpu_pending(const struct lib_gpu *g) { (void)g; return 0; }
static inline int lib_gpu_collect(struct lib_gpu *g, struct trace_oprec *out, uint32_t nslots,
                                  char *msg, size_t n)
{
    (void)g, (void)out, (void)nslots;
    return lib_gpu_nocuda(msg, n);
}
static inline void lib_gpu_discard(struct lib_gpu *g) { (void)g; }
static inline int lib_gpu_settle(struct lib_gpu *g, char *msg, size_t n)
{
    (void)g, (void)msg, (void)n;
    return DIVTRACE_OK;
}
static inline int lib_gpu_harvest(struct lib_gpu *g, struct trace_oprec *out, uint32_t nslots, const char *on_dev,
                                  char *msg, size_t n)
{
    (void)g, (void)out, (void)nslots, (void)on_dev;
    return lib_gpu_nocuda(msg, n);
}
static inline int lib_gpu_loss_later(struct lib_gpu *g, const float *x, void *stream, char *msg, size_t n)
{
    (void)g, (void)x, (void)stream;
    return lib_gpu_nocuda(msg, n);
}
static inline int lib_gpu_loss_value(struct lib_gpu *g, float *v, char *msg, size_t n)
{
    (void)g, (void)v;
    return lib_gpu_nocuda(msg, n);
}
static inline int lib_gpu_download(struct lib_fault *f, float *dst, const float *x, size_t count,
                                   char *msg, size_t n)
{
    (void)f, (void)dst, (void)x, (void)count;
    return lib_gpu_nocuda(msg, n);
}
#endif

#endif
