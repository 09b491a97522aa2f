/* trace.c: the .dtr trace file, format version 2: the run configuration and
 * the writer (append-only checksummed blocks, records and checkpoints
 * compressed by trace_codec.c, an index footer on clean close). The readers
 * are trace_read.c and trace_ckpt.c; the byte layout is divtrace-trace(5). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "trace.h"
#include "trace_impl.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

/* ---- names and levels ---------------------------------------------------- */

const char *trace_kind_name(enum trace_kind k)
{
    static const char *const names[TRACE_KIND_COUNT] = {
        [TRACE_KIND_INPUT] = "input",       [TRACE_KIND_PARAM] = "param",
        [TRACE_KIND_STATE] = "state",       [TRACE_KIND_FORWARD] = "forward",
        [TRACE_KIND_BACKWARD] = "backward", [TRACE_KIND_GRAD] = "grad",
        [TRACE_KIND_OPTIMIZER] = "optimizer",
    };
    return (unsigned)k < TRACE_KIND_COUNT ? names[k] : "unknown";
}

static const char *const trace_level_names[] = {"op", "param", "step"};

const char *trace_level_name(enum trace_level l)
{
    return (unsigned)l <= TRACE_LEVEL_STEP ? trace_level_names[l] : "unknown";
}

int trace_level_parse(const char *s, enum trace_level *out)
{
    for (unsigned l = 0; l <= TRACE_LEVEL_STEP; l++)
        if (strcmp(s, trace_level_names[l]) == 0) {
            *out = (enum trace_level)l;
            return 0;
        }
    dt_error_set("unknown trace level '%s' (expected op, param or step)", s);
    return -1;
}

int trace_level_keeps(enum trace_level l, enum trace_kind k)
{
    switch (l) {
    case TRACE_LEVEL_OP:
        return 1;
    case TRACE_LEVEL_PARAM:
        return k == TRACE_KIND_PARAM || k == TRACE_KIND_STATE || k == TRACE_KIND_GRAD ||
               k == TRACE_KIND_OPTIMIZER;
    case TRACE_LEVEL_STEP:
        return 0;
    }
    return 0;
}

/* ---- configuration ------------------------------------------------------- */

void trace_config_set(struct trace_config *c, const char *key, const char *val)
{
    DT_ASSERT(c && key && val, "trace_config_set: NULL argument");
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->key[i], key) == 0) {
            char *v = dt_strdup(val); /* before the free: val may be the old value */
            free(c->val[i]);
            c->val[i] = v;
            return;
        }
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->key = dt_realloc(c->key, c->cap * sizeof *c->key);
        c->val = dt_realloc(c->val, c->cap * sizeof *c->val);
    }
    c->key[c->n] = dt_strdup(key);
    c->val[c->n] = dt_strdup(val);
    c->n++;
}

void trace_config_setf(struct trace_config *c, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    DT_ASSERT(n >= 0, "trace_config_setf: bad format for key %s", key);
    char *s = dt_malloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    trace_config_set(c, key, s);
    free(s);
}

const char *trace_config_get(const struct trace_config *c, const char *key)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->key[i], key) == 0)
            return c->val[i];
    return NULL;
}

void trace_config_free(struct trace_config *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->key[i]);
        free(c->val[i]);
    }
    free(c->key);
    free(c->val);
    memset(c, 0, sizeof *c);
}

/* ---- checkpoints --------------------------------------------------------- */

void trace_ckpt_free(struct trace_ckpt *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; c->t && i < c->ntensors; i++) {
        free(c->t[i].name);
        free(c->t[i].data);
    }
    free(c->t);
    memset(c, 0, sizeof *c);
}

const struct trace_tensor *trace_ckpt_find(const struct trace_ckpt *c, const char *name)
{
    for (uint32_t i = 0; i < c->ntensors; i++)
        if (strcmp(c->t[i].name, name) == 0)
            return &c->t[i];
    return NULL;
}

/* A growable byte buffer in which the writer assembles whole blocks. */
struct trace_buf {
    uint8_t *p;
    size_t n, cap;
};

static uint8_t *trace_buf_grow(struct trace_buf *b, size_t k)
{
    if (b->cap - b->n < k) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < k)
            cap *= 2;
        b->p = dt_realloc(b->p, cap);
        b->cap = cap;
    }
    uint8_t *q = b->p + b->n;
    b->n += k;
    return q;
}

static void trace_buf_u8(struct trace_buf *b, uint8_t v) { *trace_buf_grow(b, 1) = v; }
static void trace_buf_u32(struct trace_buf *b, uint32_t v) { trace_put_u32(trace_buf_grow(b, 4), v); }
static void trace_buf_u64(struct trace_buf *b, uint64_t v) { trace_put_u64(trace_buf_grow(b, 8), v); }
static void trace_buf_f64(struct trace_buf *b, double v) { trace_buf_u64(b, trace_f64_bits(v)); }

static void trace_buf_f32s(struct trace_buf *b, const float *x, uint64_t n)
{
    uint8_t *q = trace_buf_grow(b, (size_t)n * 4);
    for (uint64_t i = 0; i < n; i++)
        trace_put_u32(q + 4 * i, trace_f32_bits(x[i]));
}

static void trace_buf_str(struct trace_buf *b, const char *s)
{
    size_t n = strlen(s);
    DT_ASSERT(n <= UINT32_MAX, "string of %zu bytes does not fit a trace", n);
    trace_buf_u32(b, (uint32_t)n);
    memcpy(trace_buf_grow(b, n), s, n);
}

/* Start a block: returns where it begins; the length is patched by _end. */
static size_t trace_block_begin(struct trace_buf *b, const char tag[4])
{
    size_t at = b->n;
    uint8_t *q = trace_buf_grow(b, TRACE_BLOCK_HEAD);
    memcpy(q, tag, 4);
    trace_put_u32(q + 4, 0);
    trace_put_u64(q + 8, 0);
    return at;
}

static void trace_block_end(struct trace_buf *b, size_t at)
{
    trace_put_u64(b->p + at + 8, (uint64_t)(b->n - at - TRACE_BLOCK_HEAD));
    uint32_t crc = trace_crc(0, b->p + at, b->n - at);
    trace_buf_u32(b, crc);
}

/* ---- writer -------------------------------------------------------------- */

struct trace_ents {
    struct trace_ent *e;
    size_t n, cap;
};

static void trace_ents_push(struct trace_ents *l, uint64_t step, uint64_t off)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->e = dt_realloc(l->e, l->cap * sizeof *l->e);
    }
    l->e[l->n++] = (struct trace_ent){step, off};
}

struct trace_writer {
    int fd;
    char *path;
    enum trace_level level;
    uint64_t off;               /* bytes in the file: where the next block goes */
    int failed;                 /* errno of a failed write, 0 if none; the file
                                 * was cut back to `off` and takes no more */
    /* Test-only (divtrace-trace(5), ENVIRONMENT): a kill, or a full disk,
     * once the file holds this many bytes; UINT64_MAX when off. */
    uint64_t test_cut_at, test_enospc_at;
    int have_ops, have_step;
    uint32_t nops;
    uint8_t *op_kind;           /* per op, to check records against the level */
    uint64_t last_step;
    struct trace_buf buf;
    struct trace_ents steps, ckpts, events; /* the index: all the writer keeps */
    /* trace_writer_step_async: one step at a time written by a worker
     * thread; every other call waits for it first */
    int async;                  /* the worker runs */
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy, quit;
    struct trace_step job;
    int job_rc;
    char job_err[512];
    /* version 2 encodings */
    int plain;                  /* trace_writer_set_plain: encoding 0 everywhere */
    void *zc;                   /* zstd context, made on first use */
    uint8_t *scratch;           /* packed records or a tensor's byte planes */
    size_t scratch_cap;
    uint64_t nckpt;             /* checkpoints written */
    int have_base;              /* base holds the last checkpoint written */
    struct trace_ckpt base;     /* its deep copy, what the next one may differ from */
};

static int trace_writer_step_now(struct trace_writer *w, const struct trace_step *s);

static void *trace_writer_worker(void *arg)
{
    struct trace_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->busy)
            break;
        pthread_mutex_unlock(&w->mu);
        int rc = trace_writer_step_now(w, &w->job);
        pthread_mutex_lock(&w->mu);
        if (rc < 0)
            snprintf(w->job_err, sizeof w->job_err, "%s", dt_error());
        w->job_rc = rc;
        w->busy = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Wait until the worker has written the step it was given: 0, or -1 with
 * dt_error set to what went wrong there. */
static int trace_writer_wait(struct trace_writer *w)
{
    if (!w->async)
        return 0;
    pthread_mutex_lock(&w->mu);
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    int rc = w->job_rc;
    w->job_rc = 0;
    pthread_mutex_unlock(&w->mu);
    if (rc < 0) {
        dt_error_set("%s", w->job_err);
        errno = w->failed;
    }
    return rc;
}

static void trace_writer_stop(struct trace_writer *w)
{
    if (!w->async)
        return;
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->worker, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    w->async = 0;
}

static void trace_writer_free(struct trace_writer *w)
{
    trace_writer_stop(w);
    if (w->zc)
        trace_zstd_free_cctx(w->zc);
    free(w->scratch);
    trace_ckpt_free(&w->base);
    free(w->path);
    free(w->op_kind);
    free(w->buf.p);
    free(w->steps.e);
    free(w->ckpts.e);
    free(w->events.e);
    free(w);
}

/* Test-only: DIVTRACE_TEST_CUT_AT and DIVTRACE_TEST_ENOSPC_AT, a byte count
 * of the file, or UINT64_MAX when unset or not a number. */
static uint64_t trace_test_env(const char *name)
{
    const char *v = getenv(name);
    char *end;
    if (!v || *v < '0' || *v > '9')
        return UINT64_MAX;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    return errno || *end ? UINT64_MAX : (uint64_t)n;
}

/* write(2) of n bytes at file offset `at`, through the test-only hooks: past
 * test_enospc_at the disk is full (a short write, then ENOSPC, as the kernel
 * does); at test_cut_at the process dies as by SIGKILL, the bytes before it
 * in the file and nothing cleaned up. */
static ssize_t trace_writer_write(struct trace_writer *w, uint64_t at, const uint8_t *p, size_t n)
{
    if (at + n > w->test_enospc_at) {
        if (at >= w->test_enospc_at) {
            errno = ENOSPC;
            return -1;
        }
        n = (size_t)(w->test_enospc_at - at);
    }
    if (at + n >= w->test_cut_at) {
        size_t k = at < w->test_cut_at ? (size_t)(w->test_cut_at - at) : 0;
        for (ssize_t r; k > 0 && (r = write(w->fd, p, k)) > 0; p += r, k -= (size_t)r)
            ;
        raise(SIGKILL);
        _exit(128 + SIGKILL); /* not reached */
    }
    return write(w->fd, p, n);
}

/* Write the assembled buffer. Regular files take it in one write(2); the loop
 * is for the rare short write before a disk-full error. On failure the file
 * is cut back to its last complete block, so it stays a readable prefix, and
 * w->failed and errno say why. */
static int trace_writer_flush(struct trace_writer *w)
{
    size_t done = 0;
    while (done < w->buf.n) {
        ssize_t k = trace_writer_write(w, w->off + done, w->buf.p + done, w->buf.n - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int err = k < 0 ? errno : ENOSPC;
            dt_error_set("%s: write failed: %s", w->path, strerror(err));
            w->failed = err;
            w->buf.n = 0;
            if (ftruncate(w->fd, (off_t)w->off) == 0)
                (void)lseek(w->fd, (off_t)w->off, SEEK_SET);
            errno = err;
            return -1;
        }
        done += (size_t)k;
    }
    w->off += done;
    w->buf.n = 0;
    if (w->buf.cap > TRACE_BUF_KEEP) {
        /* A checkpoint's buffer is not worth keeping between checkpoints. */
        free(w->buf.p);
        w->buf = (struct trace_buf){0};
    }
    return 0;
}

static int trace_writer_usable(struct trace_writer *w)
{
    if (trace_writer_wait(w) < 0)
        return -1;
    if (w->failed) {
        dt_error_set("%s: cannot append after an earlier write failure (%s)", w->path,
                     strerror(w->failed));
        errno = w->failed;
        return -1;
    }
    return 0;
}

int trace_writer_open(struct trace_writer **wp, const char *path,
                      const struct trace_config *cfg, enum trace_level level)
{
    DT_ASSERT(wp && path && cfg, "trace_writer_open: NULL argument");
    DT_ASSERT((unsigned)level <= TRACE_LEVEL_STEP, "trace_writer_open: bad level %d", (int)level);
    DT_ASSERT(cfg->n <= UINT32_MAX, "trace_writer_open: too many config keys");
    *wp = NULL;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        dt_error_set("%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    struct trace_writer *w = dt_calloc(1, sizeof *w);
    w->fd = fd;
    w->path = dt_strdup(path);
    w->level = level;
    w->test_cut_at = trace_test_env("DIVTRACE_TEST_CUT_AT");
    w->test_enospc_at = trace_test_env("DIVTRACE_TEST_ENOSPC_AT");

    /* Header and CONF in one write: a file with a header has its configuration. */
    struct trace_buf *b = &w->buf;
    uint8_t *h = trace_buf_grow(b, TRACE_HEADER_LEN);
    memcpy(h, TRACE_MAGIC, 8);
    trace_put_u32(h + 8, TRACE_FORMAT_VERSION);
    trace_put_u32(h + 12, 0);
    size_t at = trace_block_begin(b, "CONF");
    trace_buf_str(b, PACKAGE_VERSION);
    trace_buf_u32(b, (uint32_t)level);
    trace_buf_u32(b, (uint32_t)cfg->n);
    for (size_t i = 0; i < cfg->n; i++) {
        trace_buf_str(b, cfg->key[i]);
        trace_buf_str(b, cfg->val[i]);
    }
    trace_block_end(b, at);
    if (trace_writer_flush(w) < 0) {
        int err = w->failed;
        close(fd);
        trace_writer_free(w);
        errno = err;
        return -1;
    }
    *wp = w;
    return 0;
}

int trace_writer_ops(struct trace_writer *w, const struct trace_opdef *ops, uint32_t nops)
{
    DT_ASSERT(!w->have_ops, "%s: trace_writer_ops called twice", w->path);
    if (trace_writer_usable(w) < 0)
        return -1;
    struct trace_buf *b = &w->buf;
    size_t at = trace_block_begin(b, "OPS ");
    trace_buf_u32(b, nops);
    for (uint32_t i = 0; i < nops; i++) {
        const struct trace_opdef *o = &ops[i];
        DT_ASSERT(o->name && o->type, "op %u has no name or type", i);
        DT_ASSERT(o->kind < TRACE_KIND_COUNT, "op %s: bad kind %u", o->name, o->kind);
        DT_ASSERT(o->ndim <= TRACE_MAX_DIM, "op %s: %u dimensions", o->name, o->ndim);
        DT_ASSERT(o->ninputs == 0 || o->inputs, "op %s: inputs missing", o->name);
        trace_buf_str(b, o->name);
        trace_buf_str(b, o->type);
        trace_buf_u8(b, o->kind);
        trace_buf_u8(b, o->ndim);
        trace_buf_u8(b, 0);
        trace_buf_u8(b, 0);
        /* Unused dimensions are written as 0 so equal shapes give equal bytes. */
        for (int d = 0; d < TRACE_MAX_DIM; d++)
            trace_buf_u32(b, d < o->ndim ? o->shape[d] : 0);
        trace_buf_u32(b, o->ninputs);
        for (uint32_t k = 0; k < o->ninputs; k++) {
            DT_ASSERT((o->inputs[k] & ~TRACE_INPUT_PREV) < nops,
                      "op %s: input %u refers to op %u of %u", o->name, k,
                      o->inputs[k] & ~TRACE_INPUT_PREV, nops);
            trace_buf_u32(b, o->inputs[k]);
        }
    }
    trace_block_end(b, at);
    if (trace_writer_flush(w) < 0)
        return -1;
    w->have_ops = 1;
    w->nops = nops;
    w->op_kind = dt_malloc(nops);
    for (uint32_t i = 0; i < nops; i++)
        w->op_kind[i] = ops[i].kind;
    return 0;
}

int trace_writer_step(struct trace_writer *w, const struct trace_step *s)
{
    if (trace_writer_usable(w) < 0)
        return -1;
    return trace_writer_step_now(w, s);
}

int trace_writer_sync(struct trace_writer *w)
{
    return trace_writer_usable(w);
}

int trace_writer_step_async(struct trace_writer *w, const struct trace_step *s)
{
    if (trace_writer_usable(w) < 0)
        return -1;
    if (!w->async) {
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        w->busy = w->quit = w->job_rc = 0;
        if (pthread_create(&w->worker, NULL, trace_writer_worker, w) != 0) {
            pthread_mutex_destroy(&w->mu);
            pthread_cond_destroy(&w->cv);
            return trace_writer_step_now(w, s); /* no thread: write it now */
        }
        w->async = 1;
    }
    pthread_mutex_lock(&w->mu);
    w->job = *s;
    w->busy = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* The writer's scratch buffer, at least n bytes. */
static uint8_t *trace_writer_scratch(struct trace_writer *w, size_t n)
{
    if (w->scratch_cap < n) {
        free(w->scratch);
        w->scratch = dt_malloc(n);
        w->scratch_cap = n;
    }
    return w->scratch;
}

/* Append src compressed as one zstd frame; its length in bytes. */
static size_t trace_writer_zstd(struct trace_writer *w, struct trace_buf *b, const uint8_t *src,
                                size_t n)
{
    if (!w->zc)
        w->zc = trace_zstd_cctx();
    size_t cap = trace_zstd_bound(n);
    uint8_t *q = trace_buf_grow(b, cap);
    size_t z = trace_zstd_pack(w->zc, q, cap, src, n);
    b->n -= cap - z;
    return z;
}

void trace_writer_set_plain(struct trace_writer *w, int plain)
{
    w->plain = plain;
}

static int trace_writer_step_now(struct trace_writer *w, const struct trace_step *s)
{
    DT_ASSERT(w->have_ops, "%s: step written before the op list", w->path);
    DT_ASSERT(!w->have_step || s->step > w->last_step,
              "%s: step %llu after step %llu", w->path,
              (unsigned long long)s->step, (unsigned long long)w->last_step);
    DT_ASSERT(s->nrec == 0 || s->rec, "%s: step %llu has no records", w->path,
              (unsigned long long)s->step);
    struct trace_buf *b = &w->buf;
    size_t at = trace_block_begin(b, "STEP");
    trace_buf_u64(b, s->step);
    trace_buf_f64(b, s->loss);
    trace_buf_f64(b, s->grad_norm);
    trace_buf_u64(b, s->root);
    trace_buf_u32(b, s->nrec);
    int packed = !w->plain && s->nrec > 0;
    trace_buf_u32(b, packed ? TRACE_ENC_ZSTD : TRACE_ENC_PLAIN);
    for (uint32_t j = 0; j < s->nrec; j++) {
        const struct trace_oprec *r = &s->rec[j];
        /* Readers rely on increasing op order (diff walks two steps in step). */
        DT_ASSERT(r->op < w->nops && (j == 0 || r->op > s->rec[j - 1].op),
                  "%s: step %llu: record %u (op %u) out of range or order", w->path,
                  (unsigned long long)s->step, j, r->op);
        DT_ASSERT(trace_level_keeps(w->level, (enum trace_kind)w->op_kind[r->op]),
                  "%s: op %u is not kept at level %s", w->path, r->op,
                  trace_level_name(w->level));
    }
    if (packed) {
        size_t n = (size_t)TRACE_REC_PACKED * s->nrec;
        trace_recs_pack(trace_writer_scratch(w, n), s->rec, s->nrec);
        trace_writer_zstd(w, b, w->scratch, n);
    }
    for (uint32_t j = 0; j < s->nrec && !packed; j++) {
        const struct trace_oprec *r = &s->rec[j];
        uint8_t *q = trace_buf_grow(b, TRACE_REC_LEN);
        trace_put_u32(q, r->op);
        trace_put_u32(q + 4, 0);
        trace_put_u64(q + 8, r->hash);
        trace_put_u64(q + 16, trace_f64_bits(r->l2));
        trace_put_u64(q + 24, trace_f64_bits(r->min));
        trace_put_u64(q + 32, trace_f64_bits(r->max));
        trace_put_u64(q + 40, r->nan);
        trace_put_u64(q + 48, r->inf);
        for (int k = 0; k < TRACE_SKETCH_LEN; k++)
            trace_put_u32(q + 56 + 4 * k, trace_f32_bits(r->sketch[k]));
    }
    trace_block_end(b, at);
    uint64_t off = w->off;
    if (trace_writer_flush(w) < 0)
        return -1;
    trace_ents_push(&w->steps, s->step, off);
    w->have_step = 1;
    w->last_step = s->step;
    return 0;
}

/* The base of tensor i of c: the data of the previous checkpoint's tensor i
 * when it has the same name and element count, else NULL. */
static const float *trace_writer_base(const struct trace_writer *w, const struct trace_ckpt *c,
                                      uint32_t i)
{
    const struct trace_ckpt *p = &w->base;
    if (!w->have_base || i >= p->ntensors || c->t[i].count == 0)
        return NULL;
    const struct trace_tensor *a = &c->t[i], *q = &p->t[i];
    return q->count == a->count && strcmp(q->name, a->name) == 0 ? q->data : NULL;
}

/* Keep a copy of c as the base of the next checkpoint, unless it is too big
 * to keep twice (then the next one is a key). */
static void trace_writer_keep_base(struct trace_writer *w, const struct trace_ckpt *c)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < c->ntensors; i++)
        total += c->t[i].count;
    struct trace_ckpt *p = &w->base;
    int same = w->have_base && p->ntensors == c->ntensors;
    for (uint32_t i = 0; same && i < c->ntensors; i++)
        same = p->t[i].count == c->t[i].count && strcmp(p->t[i].name, c->t[i].name) == 0;
    if (w->plain || total > TRACE_DELTA_MAX_ELEMS) {
        trace_ckpt_free(p);
        w->have_base = 0;
        return;
    }
    if (!same) {
        trace_ckpt_free(p);
        p->ntensors = c->ntensors;
        p->t = dt_calloc(c->ntensors ? c->ntensors : 1, sizeof *p->t);
        for (uint32_t i = 0; i < c->ntensors; i++) {
            p->t[i].name = dt_strdup(c->t[i].name);
            p->t[i].count = c->t[i].count;
            p->t[i].data = dt_malloc(c->t[i].count ? (size_t)c->t[i].count * sizeof(float) : 1);
        }
    }
    for (uint32_t i = 0; i < c->ntensors; i++)
        if (c->t[i].count)
            memcpy(p->t[i].data, c->t[i].data, (size_t)c->t[i].count * sizeof(float));
    w->have_base = 1;
}

int trace_writer_ckpt(struct trace_writer *w, const struct trace_ckpt *c)
{
    if (trace_writer_usable(w) < 0)
        return -1;
    DT_ASSERT(w->have_ops, "%s: checkpoint written before the op list", w->path);
    DT_ASSERT(c->ntensors == 0 || c->t, "%s: checkpoint without tensors", w->path);
    /* A key checkpoint (no differences) starts each run of
     * TRACE_CKPT_KEY_EVERY; the others differ from the one before where a
     * tensor has the same place, name and size there. */
    int key = w->plain || !w->have_base || w->nckpt % TRACE_CKPT_KEY_EVERY == 0;
    uint32_t flags = 0;
    for (uint32_t i = 0; i < c->ntensors && !key; i++)
        if (trace_writer_base(w, c, i))
            flags |= TRACE_CKPT_FLAG_DELTA;
    struct trace_buf *b = &w->buf;
    size_t at = trace_block_begin(b, "CKPT");
    trace_buf_u64(b, c->step);
    trace_buf_u64(b, c->data_cursor);
    trace_buf_u64(b, c->rng_seed);
    trace_buf_u64(b, c->rng_counter);
    trace_buf_u32(b, c->ntensors);
    trace_buf_u32(b, flags);
    for (uint32_t i = 0; i < c->ntensors; i++) {
        const struct trace_tensor *t = &c->t[i];
        DT_ASSERT(t->name && t->ndim <= TRACE_MAX_DIM, "checkpoint tensor %u: bad name or ndim", i);
        DT_ASSERT(t->ndim == 0 || t->count == trace_shape_count(t->ndim, t->shape),
                  "checkpoint tensor %s: count %llu does not match its shape", t->name,
                  (unsigned long long)t->count);
        DT_ASSERT(t->count == 0 || t->data, "checkpoint tensor %s has no data", t->name);
        const float *base = key ? NULL : trace_writer_base(w, c, i);
        int packed = !w->plain && t->count > 0;
        trace_buf_str(b, t->name);
        trace_buf_u8(b, t->ndim);
        size_t enc_at = b->n;
        trace_buf_u8(b, !packed ? TRACE_ENC_PLAIN : base ? TRACE_ENC_DELTA : TRACE_ENC_ZSTD);
        trace_buf_u8(b, 0);
        trace_buf_u8(b, 0);
        for (int d = 0; d < TRACE_MAX_DIM; d++)
            trace_buf_u32(b, d < t->ndim ? t->shape[d] : 0);
        trace_buf_u64(b, t->count);
        if (packed) {
            size_t n = (size_t)t->count * 4, len_at = b->n;
            trace_buf_u64(b, 0);
            trace_planes_pack(trace_writer_scratch(w, n), t->data, base, t->count);
            size_t z = trace_writer_zstd(w, b, w->scratch, n);
            if (z < n) {
                trace_put_u64(b->p + len_at, z);
                continue;
            }
            /* No smaller compressed: the plain values. */
            b->n = len_at;
            b->p[enc_at] = TRACE_ENC_PLAIN;
        }
        trace_buf_f32s(b, t->data, t->count);
    }
    trace_block_end(b, at);
    uint64_t off = w->off;
    if (trace_writer_flush(w) < 0)
        return -1;
    trace_ents_push(&w->ckpts, c->step, off);
    w->nckpt++;
    trace_writer_keep_base(w, c);
    if (w->scratch_cap > TRACE_BUF_KEEP) {
        /* a big tensor's planes are not worth keeping between checkpoints */
        free(w->scratch);
        w->scratch = NULL;
        w->scratch_cap = 0;
    }
    return 0;
}

int trace_writer_event(struct trace_writer *w, const struct trace_event *e)
{
    if (trace_writer_usable(w) < 0)
        return -1;
    DT_ASSERT(w->have_ops, "%s: event written before the op list", w->path);
    DT_ASSERT(e->op == UINT32_MAX || e->op < w->nops, "%s: event names op %u of %u",
              w->path, e->op, w->nops);
    struct trace_buf *b = &w->buf;
    size_t at = trace_block_begin(b, "EVNT");
    trace_buf_u32(b, e->code);
    trace_buf_u32(b, e->op);
    trace_buf_u64(b, e->step);
    trace_buf_str(b, e->text ? e->text : "");
    trace_block_end(b, at);
    uint64_t off = w->off;
    if (trace_writer_flush(w) < 0)
        return -1;
    trace_ents_push(&w->events, e->step, off);
    return 0;
}

static void trace_buf_ents(struct trace_buf *b, const struct trace_ents *l)
{
    for (size_t i = 0; i < l->n; i++) {
        trace_buf_u64(b, l->e[i].step);
        trace_buf_u64(b, l->e[i].off);
    }
}

int trace_writer_close(struct trace_writer *w, int status)
{
    DT_ASSERT(w, "trace_writer_close: NULL writer");
    int rc = trace_writer_usable(w);
    if (rc == 0) {
        /* INDX and trailer in one write: a trailer is never without its index. */
        struct trace_buf *b = &w->buf;
        uint64_t indx = w->off;
        size_t at = trace_block_begin(b, "INDX");
        trace_buf_u32(b, (uint32_t)status);
        trace_buf_u32(b, 0);
        trace_buf_u64(b, w->steps.n);
        trace_buf_u64(b, w->ckpts.n);
        trace_buf_u64(b, w->events.n);
        trace_buf_ents(b, &w->steps);
        trace_buf_ents(b, &w->ckpts);
        trace_buf_ents(b, &w->events);
        trace_block_end(b, at);
        trace_buf_u64(b, indx);
        memcpy(trace_buf_grow(b, 8), TRACE_END_MAGIC, 8);
        rc = trace_writer_flush(w);
    }
    int err = errno;
    if (close(w->fd) != 0 && rc == 0) {
        err = errno;
        dt_error_set("%s: close failed: %s", w->path, strerror(err));
        rc = -1;
    }
    trace_writer_free(w);
    errno = err;
    return rc;
}

void trace_writer_abandon(struct trace_writer *w)
{
    if (!w)
        return;
    trace_writer_wait(w);
    close(w->fd);
    trace_writer_free(w);
}

