/* trace.h: the .dtr trace file (format version 2; version 1 is read too):
 * writer and reader. The byte layout is documented in divtrace-trace(5).
 * A trace is a header
 * followed by checksummed blocks appended as the run goes; a run killed at
 * any moment leaves a file readable up to its last complete block. */
#ifndef DT_TRACE_H
#define DT_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define TRACE_FORMAT_VERSION 2
#define TRACE_SKETCH_LEN 16
#define TRACE_MAX_DIM 4
/* Bit set in an input reference: the op of that index in the previous step
 * (how a parameter leaf names the update that produced it). */
#define TRACE_INPUT_PREV 0x80000000u

enum trace_kind {           /* what an op's output is */
    TRACE_KIND_INPUT = 0,   /* data fed to the step */
    TRACE_KIND_PARAM,       /* a parameter at the start of the step */
    TRACE_KIND_STATE,       /* optimizer state at the start of the step */
    TRACE_KIND_FORWARD,     /* forward computation */
    TRACE_KIND_BACKWARD,    /* backward computation (not a parameter gradient) */
    TRACE_KIND_GRAD,        /* a parameter's gradient */
    TRACE_KIND_OPTIMIZER,   /* updated parameter or optimizer state */
    TRACE_KIND_COUNT
};

enum trace_level {          /* which op records a trace keeps */
    TRACE_LEVEL_OP = 0,     /* every op */
    TRACE_LEVEL_PARAM,      /* kinds PARAM, STATE, GRAD, OPTIMIZER */
    TRACE_LEVEL_STEP,       /* none: per-step summaries and checkpoints only */
};

const char *trace_kind_name(enum trace_kind k);   /* "forward", ... */
const char *trace_level_name(enum trace_level l); /* "op", "param", "step" */
int trace_level_parse(const char *s, enum trace_level *out); /* 0 or -1 */
/* Whether a trace at level l keeps the records of ops of kind k. */
int trace_level_keeps(enum trace_level l, enum trace_kind k);

/* The run configuration: ordered key=value pairs (keys unique). */
struct trace_config {
    size_t n, cap;
    char **key, **val;
};
void trace_config_set(struct trace_config *c, const char *key, const char *val);
void trace_config_setf(struct trace_config *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *trace_config_get(const struct trace_config *c, const char *key); /* NULL if absent */
void trace_config_free(struct trace_config *c);

/* One op of the per-step op list; every step executes the same list. */
struct trace_opdef {
    char *name;              /* stable name, e.g. "enc1.matmul" */
    char *type;              /* op type, e.g. "matmul" */
    uint8_t kind;            /* enum trace_kind */
    uint8_t ndim;
    uint32_t shape[TRACE_MAX_DIM];
    uint32_t ninputs;
    uint32_t *inputs;        /* op indices, TRACE_INPUT_PREV for the previous step */
};

/* The record of one op's output in one step. */
struct trace_oprec {
    uint32_t op;             /* index into the op list */
    uint64_t hash;           /* hash_tensor() of the float32 bytes */
    double l2, min, max;     /* over finite elements; min = max = 0 if none */
    uint64_t nan, inf;       /* counts */
    float sketch[TRACE_SKETCH_LEN]; /* fixed random projection, see stats.h */
};

struct trace_step {
    uint64_t step;
    double loss;             /* the step's loss */
    double grad_norm;        /* L2 norm over all parameter gradients */
    uint64_t root;           /* XXH3-64 of all op hashes of the step, in op order */
    uint32_t nrec;           /* records kept at the trace level */
    struct trace_oprec *rec;
};

struct trace_tensor {
    char *name;
    uint8_t ndim;
    uint32_t shape[TRACE_MAX_DIM];
    uint64_t count;          /* elements */
    float *data;
};

/* Everything needed to resume the run before step `step` executes. */
struct trace_ckpt {
    uint64_t step;           /* steps completed */
    uint64_t data_cursor;    /* next batch index */
    uint64_t rng_seed;       /* data-order seed */
    uint64_t rng_counter;    /* next unused counter of the run's RNG stream */
    uint32_t ntensors;
    struct trace_tensor *t;  /* parameters, then optimizer state */
};
void trace_ckpt_free(struct trace_ckpt *c);
/* The tensor of a checkpoint by name, or NULL. */
const struct trace_tensor *trace_ckpt_find(const struct trace_ckpt *c, const char *name);

enum trace_event_code {
    TRACE_EVENT_NONFINITE = 1, /* first op with non-finite output and finite inputs */
    TRACE_EVENT_STOPPED,       /* the run ended early (text says why) */
    TRACE_EVENT_SELFCHECK,     /* mpfr: agreement with a run at twice the precision */
    TRACE_EVENT_CARRY,         /* a leaf began a step with other bits than its update wrote */
};
struct trace_event {
    uint32_t code;           /* enum trace_event_code */
    uint64_t step;
    uint32_t op;             /* op index, or UINT32_MAX if none */
    char *text;
};

/* ---- writer ---- */
struct trace_writer;

/* Errors: every call below that returns int gives 0, or -1 with dt_error set
 * to one line naming the file ("run.dtr: write failed: No space left on
 * device") and errno to the cause. A failed write cuts the file back to the
 * end of its last complete block (no partial block, no footer: a reader sees
 * an incomplete trace, valid up to its last complete step) and leaves w
 * failed: every later call returns -1 without writing. A failed w is still
 * ended by exactly one trace_writer_close (no footer; it returns -1) or
 * trace_writer_abandon, which close the file once and free w.
 * Test-only: DIVTRACE_TEST_CUT_AT and DIVTRACE_TEST_ENOSPC_AT, read at open,
 * kill the process or fill the disk after that many bytes of the file
 * (divtrace-trace(5), ENVIRONMENT). */

/* Create (truncate) path and write the header and configuration.
 * Returns 0, or -1 with dt_error set (a failed write leaves the file empty). */
int trace_writer_open(struct trace_writer **w, const char *path,
                      const struct trace_config *cfg, enum trace_level level);
/* The op list; exactly once, before the first step. */
int trace_writer_ops(struct trace_writer *w, const struct trace_opdef *ops, uint32_t nops);
/* Append one step (its records must be those the level keeps, in op order).
 * The block reaches the kernel before this returns (one write per block). */
int trace_writer_step(struct trace_writer *w, const struct trace_step *s);
/* The same, written by a worker thread while the caller goes on: s is
 * copied, but s->rec must stay as it is until the next call on w returns
 * (every call waits for the step first; an error in it is reported by the
 * next call). 0, or -1 with dt_error set. */
int trace_writer_step_async(struct trace_writer *w, const struct trace_step *s);
/* Wait for the step given to trace_writer_step_async to be written: 0, or -1
 * with dt_error set (its failure, or an earlier one that left w unusable). */
int trace_writer_sync(struct trace_writer *w);
int trace_writer_ckpt(struct trace_writer *w, const struct trace_ckpt *c);
int trace_writer_event(struct trace_writer *w, const struct trace_event *e);
/* Write the index footer (clean close) and close; `status` 0 = run completed,
 * nonzero = ended early. Always frees w. */
int trace_writer_close(struct trace_writer *w, int status);
/* Close without a footer (the run failed; the file stays a readable prefix). */
void trace_writer_abandon(struct trace_writer *w);
/* Store the records and checkpoint tensors written from now on as plain
 * little-endian values (encoding 0), uncompressed: for tests that edit
 * fields in place, and for readers without zstd. */
void trace_writer_set_plain(struct trace_writer *w, int plain);

/* ---- reader ---- */
struct trace_ckpt_ref {
    uint64_t step;
    uint64_t offset;         /* file offset of its block */
};

struct trace_file {
    char *path;
    uint32_t version;
    char *tool_version;
    enum trace_level level;
    struct trace_config cfg;
    uint32_t nops;
    struct trace_opdef *ops;
    uint64_t nsteps;
    struct trace_step *steps;   /* all steps, in order */
    uint64_t *step_off;         /* the file offset of each step's block */
    int summaries;              /* trace_open_summaries: steps without records */
    uint32_t nckpt;
    struct trace_ckpt_ref *ckpt;
    uint32_t nevents;
    struct trace_event *events;
    int complete;            /* index footer present and valid */
    int end_status;          /* the writer's status (valid when complete) */
    char note[256];          /* why the file is incomplete, or "" */
    /* trace_read_ckpt's last checkpoint, so that reading them in order
     * decodes each block once (a version 2 checkpoint may be stored as its
     * difference from the one before) */
    uint32_t ckpt_cache_i;   /* its index; valid when ckpt_cache.t */
    struct trace_ckpt ckpt_cache;
};

/* Open and read a trace: header, op list, all steps, checkpoint index and
 * events. A file cut short (no footer, a partial or corrupt last block) is
 * read up to its last complete block: complete = 0 and note says what was
 * found. A file that is not a trace, has an unknown version, or is unreadable
 * before its first step returns -1 with dt_error set to one line. */
int trace_open(struct trace_file **tf, const char *path);
/* trace_open, but the steps keep only their summaries (nrec 0, rec NULL):
 * their records are checked as trace_open does, then dropped, so memory
 * does not grow with them. trace_read_step reads one step's records. */
int trace_open_summaries(struct trace_file **tf, const char *path);
/* Step i (0 <= i < nsteps) with its records, read again from the file: 0,
 * or -1 with dt_error set. The caller frees out->rec. */
int trace_read_step(struct trace_file *tf, uint64_t i, struct trace_step *out);
/* Load checkpoint i (0 <= i < nckpt), bit for bit as written. Returns 0, or
 * -1 with dt_error set. Not for two threads on one tf at once. */
int trace_read_ckpt(struct trace_file *tf, uint32_t i, struct trace_ckpt *out);
void trace_close(struct trace_file *tf);

#endif
