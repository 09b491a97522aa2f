/* divtrace.h: libdivtrace, the public C API for recording any training run
 * as a divtrace trace (.dtr), so that `divtrace show`, `diff`, `escape` and
 * the rest work on it. Link with `pkg-config --cflags --libs divtrace`.
 *
 * A trace is a sequence of steps. In each step the program records named
 * float32 tensors in the order it computes them (inputs, parameters,
 * forward outputs, gradients, updated parameters), naming for each the
 * tensors it was computed from, and ends the step with its loss. The first
 * step fixes the list of tensors; every later step must record the same
 * names in the same order. Checkpoints (full tensor values) may be written
 * between steps; `divtrace diff` uses them for the parameter distance.
 *
 * Each tensor is reduced to a record (an XXH3-64 tree hash of its bytes,
 * its L2 norm, min, max, NaN and Inf counts and a 16-value sketch), the same
 * as the divtrace program's own backends write. A device pointer is hashed
 * on its GPU, in stream order on the given stream, without a copy to the
 * host; the kernels write the records into pinned host memory, where the
 * step's end reads them once the streams used have reached them.
 *
 * Errors: every function returns DIVTRACE_OK (0) or a negative status;
 * divtrace_errmsg() says what went wrong in one line. Nothing aborts the
 * host program. After an error in a step, the step may be retried from
 * divtrace_step_begin() or the trace closed; a trace closed with a nonzero
 * status, or never closed, stays readable up to its last complete step and
 * is marked incomplete.
 *
 * Faults: a write that fails (disk full, a file size limit), the trace file
 * deleted, an allocation or a CUDA call that fails (DIVTRACE_EIO, _ENOMEM,
 * _ECUDA) stop the handle's recording: one line on stderr, the file closed
 * as a readable prefix (never complete), and every later call but
 * divtrace_close returns that status at once, changing nothing; the
 * program goes on. divtrace_status() tells (divtrace_record(3), FAULTS).
 *
 * Threads: every call may be made from any thread; calls on one handle
 * are serialized by a lock inside it (the caller orders a step's calls);
 * different handles are independent; divtrace_close must be the last call
 * on a handle in every thread (divtrace_record(3), THREADS). */
#ifndef DIVTRACE_H
#define DIVTRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DIVTRACE_API_VERSION 1

enum divtrace_status {
    DIVTRACE_OK = 0,
    DIVTRACE_EINVAL = -1,   /* a bad argument: NULL, empty name, bad shape or kind */
    DIVTRACE_EIO = -2,      /* the file could not be created or written */
    DIVTRACE_ENOMEM = -3,
    DIVTRACE_ESTATE = -4,   /* a call out of order (record outside a step, ...) */
    DIVTRACE_EOPS = -5,     /* this step's tensors differ from the first step's */
    DIVTRACE_ENOCUDA = -6,  /* a device pointer, but no CUDA support or device */
    DIVTRACE_ECUDA = -7,    /* a CUDA call failed (the message names it) */
};

/* What a tensor is; the same values as the trace format's kinds. */
enum divtrace_kind {
    DIVTRACE_INPUT = 0,     /* data fed to the step */
    DIVTRACE_PARAM,         /* a parameter at the start of the step */
    DIVTRACE_STATE,         /* optimizer state at the start of the step */
    DIVTRACE_FORWARD,       /* a forward output (a module's output) */
    DIVTRACE_BACKWARD,      /* a backward tensor that is not a parameter gradient */
    DIVTRACE_GRAD,          /* a parameter's gradient */
    DIVTRACE_OPTIMIZER,     /* an updated parameter or optimizer state */
};

/* Where a tensor's data lives. */
enum divtrace_where {
    DIVTRACE_HOST = 0,
    DIVTRACE_DEVICE = 1,    /* CUDA device memory (current device of the pointer) */
    /* Device memory hashed later, in one batch with the step's other
     * deferred tensors: at divtrace_flush(), at divtrace_step_end(), or
     * when a deferred tensor comes on another stream. Until then the
     * tensor must stay allocated and unchanged; in exchange a record costs
     * no launch of its own (a step of hundreds of small tensors queues two
     * kernels, not hundreds). */
    DIVTRACE_DEVICE_DEFERRED = 2,
};

typedef struct divtrace divtrace;

/* The API version the library was built with (DIVTRACE_API_VERSION). */
int divtrace_api_version(void);
/* The text of a status code. */
const char *divtrace_strerror(int status);
/* The last error on t, one line ("" if none), copied into a buffer of the
 * calling thread (four in turn: valid until this thread's fourth next
 * divtrace_errmsg); after a fault, the fault's. With t NULL, the last error
 * of divtrace_open in this thread (also of divtrace_close, whose handle is
 * gone, and of a call given a NULL handle). */
const char *divtrace_errmsg(const divtrace *t);
/* DIVTRACE_OK while t records; after a fault stopped it, the fault's
 * status (what every later call returns). DIVTRACE_EINVAL for NULL. */
int divtrace_status(const divtrace *t);
/* Whether a fault is reported in one line on stderr (on by default);
 * process-wide, returns the setting before. A binding that reports
 * faults its own way (the Python adapter warns) turns it off. */
int divtrace_report_faults(int on);

/* ---- opening and closing (divtrace_open(3)) ---- */

/* Create (truncate) path and write the header. config: NULL-terminated
 * key, value, key, value, ... (the run's description, shown by `divtrace
 * show` and compared by `divtrace diff`; "model", "backend", "seed" are
 * worth giving). level: "op" (every tensor), "param" (parameters, state,
 * gradients, updates only) or "step" (losses and checkpoints only). */
int divtrace_open(divtrace **t, const char *path, const char *const *config, const char *level);
/* Finish the trace: status 0 = the run completed, nonzero = it ended early
 * (the reason, if any, in `why`; may be NULL). Always frees t. */
int divtrace_close(divtrace *t, int status, const char *why);

/* ---- steps and tensors (divtrace_record(3)) ---- */

/* Start step `step` (0, 1, 2, ... in order). */
int divtrace_step_begin(divtrace *t, uint64_t step);
/* Record one float32 tensor of ndim (1..4) dimensions, row-major and
 * contiguous. type: the op that made it ("linear", "relu", "adam", ...).
 * inputs: the names of the tensors it was computed from (recorded earlier
 * in this step, or, for a name recorded later in the step, that tensor of
 * the previous step: how a parameter names the update that produced it);
 * may be NULL when ninputs is 0. For DIVTRACE_DEVICE, stream is the
 * cudaStream_t the tensor is produced on (NULL: the default stream); the
 * data must stay valid until the stream reaches this point. For
 * DIVTRACE_DEVICE_DEFERRED, the data must stay valid and unchanged until
 * the flush that hashes it has been reached by the stream. */
int divtrace_record(divtrace *t, const char *name, const char *type, enum divtrace_kind kind,
                    const float *data, enum divtrace_where where, void *stream, int ndim,
                    const int64_t *shape, const char *const *inputs, int ninputs);
/* One tensor of divtrace_record_many: divtrace_record's arguments but the
 * data, where and stream. */
struct divtrace_tensor {
    const char *name;
    const char *type;
    enum divtrace_kind kind;
    int ndim;
    const int64_t *shape;
    const char *const *inputs;
    int ninputs;
};
/* Record n tensors in order, as n calls of divtrace_record with ts[i]'s
 * arguments, data[i], where and stream would, in one call: for a group
 * recorded together (a model's parameters, their gradients). Stops at the
 * first error and returns it; the tensors before it are recorded. */
int divtrace_record_many(divtrace *t, int n, const struct divtrace_tensor *ts, const float *const *data,
                         enum divtrace_where where, void *stream);
/* Queue the hashing of the deferred tensors recorded so far (one batch on
 * their stream); nothing waits. Call it before a deferred tensor's memory
 * is changed or freed. A no-op when nothing is deferred. */
int divtrace_flush(divtrace *t);
/* End the step: flushes, waits for its device hashes, writes the step with its
 * loss (the gradient norm is computed from the GRAD tensors). The write is
 * made by the trace's writer thread while the caller goes on; if it fails,
 * the next call that writes (a step's end, a checkpoint, divtrace_close)
 * returns DIVTRACE_EIO with its message. */
int divtrace_step_end(divtrace *t, double loss);
/* The same, with the loss a float32 in device memory (on the trace's GPU),
 * read on stream with the step's device records: one wait at the step's
 * end where reading it first would take two. */
int divtrace_step_end_device(divtrace *t, const float *loss, void *stream);
/* The same without a wait: the step's device records are read when the
 * next step begins (no wait if they are all written by then), its loss
 * (device memory, on stream) is copied by the next step's first flush on
 * that stream, and the step is written when the next step ends (or by
 * divtrace_sync, a checkpoint or divtrace_close, which wait). Until then
 * the loss's memory must keep its value (a loop that writes every step's
 * loss into one buffer alternates two), and the tensors recorded since
 * the step's last flush must be changed or freed only in order on the
 * stream they were recorded on. An error in reading the step is returned
 * by the call that writes it. The first step, and a step after an error
 * in it, end as divtrace_step_end_device's. */
int divtrace_step_end_async(divtrace *t, const float *loss, void *stream);
/* Wait until every step ended is in the file (for a reader of the trace
 * while it is written); DIVTRACE_EIO if its write failed. */
int divtrace_sync(divtrace *t);

/* ---- checkpoints (divtrace_checkpoint(3)) ---- */

/* A checkpoint of the state before step `step` (after step - 1 ended):
 * begin, add each parameter and optimizer state tensor by the name it is
 * recorded under, end. Device tensors are copied to the host here. */
int divtrace_checkpoint_begin(divtrace *t, uint64_t step);
int divtrace_checkpoint_add(divtrace *t, const char *name, const float *data,
                            enum divtrace_where where, int ndim, const int64_t *shape);
int divtrace_checkpoint_end(divtrace *t);

#ifdef __cplusplus
}
#endif
#endif
