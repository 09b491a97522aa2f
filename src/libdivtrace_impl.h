/* libdivtrace_impl.h: what the files of libdivtrace share (libdivtrace.c:
 * opening, steps and tensors, closing; libdivtrace_ckpt.c: checkpoints;
 * libdivtrace_fault.c: errors and faults): the handle and the helpers
 * every API function uses. Not installed. */
#ifndef DT_LIBDIVTRACE_IMPL_H
#define DT_LIBDIVTRACE_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "divtrace.h"
#include "lib_gpu.h"
#include "trace.h"

#define LIB_MSG 512

struct divtrace {
    pthread_mutex_t mu;
    char err[LIB_MSG];
    struct trace_writer *w;
    enum trace_level level;
    /* The op list: built by the first step, written at its end, then fixed. */
    int fixed;
    uint32_t nops, cap;
    struct trace_opdef *ops;
    char ***unres;           /* first step: per op and input, the name not yet resolved, or NULL */
    uint32_t *slot;          /* name table (open addressing): op index + 1, 0 empty */
    uint32_t nslot;          /* a power of two, more than twice nops */
    /* The step being recorded. */
    int in_step;
    int failed;              /* an error in this step: it may be begun again */
    int have_last;           /* a step has been written */
    uint64_t step, last;
    uint32_t nrec, rcap;     /* tensors recorded in this step */
    struct trace_oprec *rec; /* (rcap) in op order */
    char *on_dev;            /* (rcap) the record comes from the device at the step's end */
    struct trace_oprec *tmp; /* (rcap) scratch: device records, kept records */
    uint64_t *hashes;        /* (rcap) little-endian op hashes for the root */
    /* The kept records of the last two steps, in turn: the writer's thread
     * writes one step's while the next is recorded (trace_writer_step_async
     * reads them until the next call on the writer returns). */
    struct trace_oprec *out[2];
    uint32_t ocap[2];
    int oturn;
    /* Checkpoints: the one being assembled, and one given before the op list
     * was written (the state before the first step), held until then. */
    int in_ckpt;
    struct trace_ckpt ck, early;
    int have_early;
    uint32_t ck_cap;
    struct lib_gpu *gpu;
    /* A step ended by divtrace_step_end_async, not written yet: its device
     * records are read by the next step's begin (pend 1: queued; 2: read),
     * its loss with them or later, and it is written by the next call that
     * ends a step, syncs, checkpoints or closes. */
    int pend;
    uint64_t pend_step;
    uint32_t pend_nrec, pend_cap;
    struct trace_oprec *pend_rec; /* (pend_cap) the step's records */
    char *pend_on_dev;            /* (pend_cap) */
    /* Carry faults: every op's hash in the step last written, so that a
     * parameter or state record of the next step can be checked against
     * the update it names (a leaf changed between steps is an event). */
    uint64_t *carry_prev;    /* (nops) */
    int carry_have;
    uint64_t carry_step;
    uint32_t carry_events;
    /* Faults (libdivtrace_fault.c): the status of the one that stopped the
     * recording (0: none). From then on the file is closed (a readable
     * prefix), every call but divtrace_close is a no-op that returns it,
     * and err keeps its message. */
    int fault;
    char *path;
    int watch_fd;            /* the trace file read-only, to notice its deletion; -1: none */
    uint64_t watch_next;     /* when a step's end looks next (CLOCK_MONOTONIC ns) */
    struct lib_fault inj;    /* test-only fault injection */
};

/* Errors and faults (libdivtrace_fault.c). DIVTRACE_EIO, _ENOMEM and
 * _ECUDA are faults: lib_fail with one of them on a handle stops its
 * recording (lib_stop). */
void lib_err_clear(void);               /* the thread's message (errmsg(NULL)) emptied */
void lib_err_keep(const divtrace *t);   /* t's message as the thread's (t is going) */
/* Stop t's recording for a fault (t->mu held; t->err says why): one line
 * on stderr, a STOPPED event where the file can still take one, the file
 * closed as a readable prefix. */
void lib_stop(divtrace *t, int status);
/* Allocations of the recording path (counted for DIVTRACE_TEST_FAIL_ALLOC). */
void *lib_malloc(divtrace *t, size_t n);
void *lib_calloc(divtrace *t, size_t n, size_t size);
void *lib_realloc(divtrace *t, void *p, size_t n);
char *lib_strdup(divtrace *t, const char *s);
/* At divtrace_open, the writer open: the path, the watch, the test hooks;
 * DIVTRACE_OK or ENOMEM. */
int lib_fault_open(divtrace *t, const char *path);
void lib_watch_start(divtrace *t); /* once the file exists */
void lib_fault_free(divtrace *t);
/* Whether the trace file is still there (not unlinked, nor its folder
 * removed): DIVTRACE_OK, or EIO after lib_fail (a fault). lib_watch_due
 * looks only when the last look is WATCH_NS old (a step's end). */
int lib_watch(divtrace *t, const char *fn);
int lib_watch_due(divtrace *t, const char *fn);
/* Once a process, before the first handle: the lazily built tables of
 * the statistics and the hash, so that threads never race to build them. */
void lib_warm(void);

/* The carry faults of a step just written (libdivtrace_carry.c): one event
 * for the step, naming its first changed leaf; DIVTRACE_OK or a status. */
int lib_carry(divtrace *t, const char *fn, uint64_t step, const struct trace_oprec *rec, uint32_t nrec);

/* Set the handle's message (or the thread's, t NULL) and return status;
 * an error inside a step fails the step. */
__attribute__((format(printf, 3, 4))) int lib_fail(divtrace *t, int status, const char *fmt, ...);
/* Lock t for a call of fn: DIVTRACE_OK with t->mu held, else the status
 * (nothing held). */
int lib_enter(divtrace *t, const char *fn);
/* Check a tensor's place and shape (ndim 1..4, dimensions 0..UINT32_MAX,
 * bytes that fit), then its data: NULL only when it has no elements. */
int lib_tensor(divtrace *t, const char *fn, const char *name, const float *data, enum divtrace_where where,
               int ndim, const int64_t *shape, uint32_t out[TRACE_MAX_DIM], size_t *count);
/* Write checkpoint c (t->mu held). */
int lib_ckpt_write(divtrace *t, const struct trace_ckpt *c);
int lib_pend_finish(divtrace *t, const char *fn);

#endif
