/* libdivtrace.c: the public recording API (divtrace.h) over the trace
 * writer (trace.h). Records are what the program's cpu backend computes
 * (stats_compute), or on the GPU what its cuda backend computes
 * (lib_gpu.h); step summaries are what run_summarize computes. Every
 * argument is checked here, before the writer (which asserts) sees it, so
 * that nothing a caller does ends the host program. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "divtrace.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"
#include "hash.h"
#include "lib_gpu.h"
#include "libdivtrace_impl.h"
#include "stats.h"
#include "trace.h"
#include "util.h"


int divtrace_api_version(void)
{
    return DIVTRACE_API_VERSION;
}

/* ---- the name table ------------------------------------------------------ */

static uint32_t lib_name_hash(const char *name)
{
    return (uint32_t)hash_bytes(name, strlen(name));
}

/* The op of that name in the op list, or -1. */
static int64_t lib_find(const divtrace *t, const char *name)
{
    if (t->nslot == 0)
        return -1;
    for (uint32_t i = lib_name_hash(name) & (t->nslot - 1);; i = (i + 1) & (t->nslot - 1)) {
        uint32_t s = t->slot[i];
        if (s == 0)
            return -1;
        if (strcmp(t->ops[s - 1].name, name) == 0)
            return s - 1;
    }
}

static void lib_insert(uint32_t *slot, uint32_t nslot, const char *name, uint32_t op)
{
    uint32_t i = lib_name_hash(name) & (nslot - 1);
    while (slot[i])
        i = (i + 1) & (nslot - 1);
    slot[i] = op + 1;
}

/* Make room for one more op (and its name in the table). */
static int lib_grow_ops(divtrace *t)
{
    if (t->nops == UINT32_MAX / 4)
        return lib_fail(t, DIVTRACE_EINVAL, "more than %u tensors in a step", t->nops);
    if (t->nops == t->cap) {
        uint32_t cap = t->cap ? 2 * t->cap : 64;
        struct trace_opdef *ops = lib_realloc(t, t->ops, cap * sizeof *ops);
        if (ops)
            t->ops = ops;
        char ***unres = lib_realloc(t, t->unres, cap * sizeof *unres);
        if (unres)
            t->unres = unres;
        if (!ops || !unres)
            return lib_fail(t, DIVTRACE_ENOMEM, "out of memory for the op list (%u tensors)", cap);
        t->cap = cap;
    }
    if (2 * (t->nops + 1) >= t->nslot) {
        uint32_t nslot = t->nslot ? 2 * t->nslot : 256;
        uint32_t *slot = lib_calloc(t, nslot, sizeof *slot);
        if (!slot)
            return lib_fail(t, DIVTRACE_ENOMEM, "out of memory for the name table");
        for (uint32_t i = 0; i < t->nops; i++)
            lib_insert(slot, nslot, t->ops[i].name, i);
        free(t->slot);
        t->slot = slot;
        t->nslot = nslot;
    }
    return DIVTRACE_OK;
}

static void lib_op_free(divtrace *t, uint32_t i)
{
    struct trace_opdef *o = &t->ops[i];
    if (t->unres && t->unres[i]) {
        for (uint32_t k = 0; k < o->ninputs; k++)
            free(t->unres[i][k]);
        free(t->unres[i]);
        t->unres[i] = NULL;
    }
    free(o->name);
    free(o->type);
    free(o->inputs);
}

/* Forget the op list of a first step that is recorded again. */
static void lib_ops_clear(divtrace *t)
{
    for (uint32_t i = 0; i < t->nops; i++)
        lib_op_free(t, i);
    t->nops = 0;
    if (t->slot)
        memset(t->slot, 0, t->nslot * sizeof *t->slot);
}

/* ---- opening and closing ------------------------------------------------- */

static void lib_free(divtrace *t)
{
    if (t->gpu)
        lib_gpu_free(t->gpu);
    for (uint32_t i = 0; i < t->nops; i++)
        lib_op_free(t, i);
    free(t->ops);
    free(t->unres);
    free(t->slot);
    free(t->rec);
    free(t->on_dev);
    free(t->tmp);
    free(t->hashes);
    free(t->carry_prev);
    free(t->out[0]);
    free(t->out[1]);
    free(t->pend_rec);
    free(t->pend_on_dev);
    trace_ckpt_free(&t->ck);
    trace_ckpt_free(&t->early);
    lib_fault_free(t);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int divtrace_open(divtrace **tp, const char *path, const char *const *config, const char *level)
{
    lib_err_clear();
    lib_warm();
    if (!tp)
        return lib_fail(NULL, DIVTRACE_EINVAL, "divtrace_open: NULL handle pointer");
    *tp = NULL;
    if (!path || !*path)
        return lib_fail(NULL, DIVTRACE_EINVAL, "divtrace_open: no path");
    enum trace_level lv = TRACE_LEVEL_OP;
    if (level && trace_level_parse(level, &lv) < 0)
        return lib_fail(NULL, DIVTRACE_EINVAL, "divtrace_open: %s", dt_error());
    struct trace_config cfg = {0};
    for (size_t i = 0; config && config[i]; i += 2) {
        if (!config[i + 1]) {
            trace_config_free(&cfg);
            return lib_fail(NULL, DIVTRACE_EINVAL, "divtrace_open: config key '%s' has no value "
                            "(config is key, value, ..., NULL)", config[i]);
        }
        if (!*config[i]) {
            trace_config_free(&cfg);
            return lib_fail(NULL, DIVTRACE_EINVAL, "divtrace_open: empty config key");
        }
        trace_config_set(&cfg, config[i], config[i + 1]);
    }
    if (!trace_config_get(&cfg, "recorder"))
        trace_config_setf(&cfg, "recorder", "libdivtrace %d", DIVTRACE_API_VERSION);
    build_describe(&cfg); /* the library's build; keys the caller gave stay */
    divtrace *t = calloc(1, sizeof *t);
    if (!t) {
        trace_config_free(&cfg);
        return lib_fail(NULL, DIVTRACE_ENOMEM, "divtrace_open: out of memory");
    }
    pthread_mutex_init(&t->mu, NULL);
    t->level = lv;
    int rc = lib_fault_open(t, path) == DIVTRACE_OK ? trace_writer_open(&t->w, path, &cfg, lv) : 1;
    trace_config_free(&cfg);
    if (rc != 0) {
        if (rc > 0)
            lib_fail(NULL, DIVTRACE_ENOMEM, "divtrace_open: out of memory");
        else
            lib_fail(NULL, DIVTRACE_EIO, "divtrace_open: %s", dt_error());
        lib_free(t);
        return rc > 0 ? DIVTRACE_ENOMEM : DIVTRACE_EIO;
    }
    lib_watch_start(t);
    *tp = t;
    return DIVTRACE_OK;
}

/* The op list of a trace that never ended its first step: whatever it has
 * (nothing), so that the file stays readable. */
static int lib_ops_fallback(divtrace *t)
{
    if (t->fixed)
        return DIVTRACE_OK;
    static const struct trace_opdef none[1];
    if (trace_writer_ops(t->w, none, 0) < 0)
        return lib_fail(t, DIVTRACE_EIO, "divtrace_close: %s", dt_error());
    t->fixed = 1;
    if (t->have_early) {
        int rc = lib_ckpt_write(t, &t->early);
        trace_ckpt_free(&t->early);
        t->have_early = 0;
        return rc;
    }
    return DIVTRACE_OK;
}

/* After a fault (t->fault) the file is closed already: the close frees
 * the rest and returns the fault. A trace file deleted under the run is
 * a fault the close still finds. */
int divtrace_close(divtrace *t, int status, const char *why)
{
    lib_err_clear();
    if (!t)
        return lib_fail(NULL, DIVTRACE_EINVAL, "divtrace_close: NULL handle");
    pthread_mutex_lock(&t->mu);
    char msg[LIB_MSG];
    int rc = t->fault || !t->pend ? t->fault : lib_gpu_settle(t->gpu, msg, sizeof msg);
    if (rc != DIVTRACE_OK && !t->fault)
        lib_fail(t, rc, "divtrace_close: step %" PRIu64 " (ended before, not yet written): %s", t->pend_step, msg);
    else if (rc == DIVTRACE_OK)
        rc = lib_pend_finish(t, "divtrace_close");
    if (rc == DIVTRACE_OK)
        rc = lib_watch(t, "divtrace_close");
    if (t->gpu && lib_gpu_pending(t->gpu))
        lib_gpu_discard(t->gpu); /* a step not ended: its records are not written */
    if (!t->fixed && t->nops > 0)
        lib_ops_clear(t); /* the first step never ended */
    if (rc == DIVTRACE_OK)
        rc = lib_ops_fallback(t);
    if (rc == DIVTRACE_OK && status != 0) {
        char text[LIB_MSG];
        if (why && *why)
            snprintf(text, sizeof text, "%s", why);
        else
            snprintf(text, sizeof text, "the run ended early (status %d)", status);
        uint64_t at = t->in_step ? t->step : t->have_last ? t->last : 0;
        struct trace_event ev = {TRACE_EVENT_STOPPED, at, UINT32_MAX, text};
        if (trace_writer_event(t->w, &ev) < 0)
            rc = lib_fail(t, DIVTRACE_EIO, "divtrace_close: %s", dt_error());
    }
    if (rc == DIVTRACE_OK) {
        struct trace_writer *w = t->w;
        t->w = NULL; /* freed by its close, failed or not */
        if (trace_writer_close(w, status) < 0)
            rc = lib_fail(t, DIVTRACE_EIO, "divtrace_close: %s", dt_error());
    } else if (t->w) {
        trace_writer_abandon(t->w);
        t->w = NULL;
    }
    if (rc != DIVTRACE_OK)
        lib_err_keep(t); /* the handle is gone: errmsg(NULL) says it */
    pthread_mutex_unlock(&t->mu);
    lib_free(t);
    return rc;
}

/* ---- steps and tensors --------------------------------------------------- */

/* The start of every call on a handle: DIVTRACE_OK holding t->mu, or a
 * status that ends the call, holding nothing (a NULL handle; a fault that
 * stopped the recording, whose status every call returns from then on,
 * its message kept). */
int lib_enter(divtrace *t, const char *fn)
{
    if (!t)
        return lib_fail(NULL, DIVTRACE_EINVAL, "%s: NULL handle", fn);
    pthread_mutex_lock(&t->mu);
    int rc = t->fault;
    if (rc != DIVTRACE_OK)
        pthread_mutex_unlock(&t->mu);
    return rc;
}

int divtrace_step_begin(divtrace *t, uint64_t step)
{
    int rc = lib_enter(t, "divtrace_step_begin");
    if (rc != DIVTRACE_OK)
        return rc;
    if (t->in_ckpt) {
        rc = lib_fail(t, DIVTRACE_ESTATE, "divtrace_step_begin: checkpoint of step %" PRIu64
                      " not ended", t->ck.step);
        goto out;
    }
    if (t->have_last && step <= t->last) {
        rc = lib_fail(t, DIVTRACE_ESTATE, "divtrace_step_begin: step %" PRIu64 " after step %"
                      PRIu64 " (steps go up)", step, t->last);
        goto out;
    }
    if (t->in_step && !t->failed) {
        rc = lib_fail(t, DIVTRACE_ESTATE, "divtrace_step_begin: step %" PRIu64 " has not ended "
                      "(only a step that failed may be begun again)", t->step);
        t->failed = 0;
        goto out;
    }
    if (t->pend == 1) {
        char msg[LIB_MSG];
        rc = lib_gpu_harvest(t->gpu, t->tmp, t->pend_nrec, t->pend_on_dev, msg, sizeof msg);
        if (rc != DIVTRACE_OK) {
            lib_fail(t, rc, "divtrace_step_begin: step %" PRIu64 " (the step before): %s", t->pend_step, msg);
            goto out;
        }
        for (uint32_t i = 0; i < t->pend_nrec; i++)
            if (t->pend_on_dev[i]) {
                t->pend_rec[i] = t->tmp[i];
                t->pend_rec[i].op = i;
            }
        t->pend = 2;
    }
    /* A step begun again (after an error in it) starts from scratch. */
    if (t->gpu && lib_gpu_pending(t->gpu))
        lib_gpu_discard(t->gpu);
    if (!t->fixed)
        lib_ops_clear(t);
    t->in_step = 1;
    t->failed = 0;
    t->step = step;
    t->nrec = 0;
    t->err[0] = 0;
out:
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* Room for record nrec. */
static int lib_grow_rec(divtrace *t)
{
    if (t->nrec < t->rcap)
        return DIVTRACE_OK;
    uint32_t cap = t->rcap ? 2 * t->rcap : 64;
    if (t->fixed && cap > t->nops)
        cap = t->nops;
    struct trace_oprec *rec = lib_realloc(t, t->rec, cap * sizeof *rec);
    if (rec)
        t->rec = rec;
    char *on_dev = lib_realloc(t, t->on_dev, cap);
    if (on_dev)
        t->on_dev = on_dev;
    struct trace_oprec *tmp = lib_realloc(t, t->tmp, cap * sizeof *tmp);
    if (tmp)
        t->tmp = tmp;
    uint64_t *hashes = lib_realloc(t, t->hashes, cap * sizeof *hashes);
    if (hashes)
        t->hashes = hashes;
    if (!rec || !on_dev || !tmp || !hashes)
        return lib_fail(t, DIVTRACE_ENOMEM, "out of memory for %u records", cap);
    t->rcap = cap;
    return DIVTRACE_OK;
}

/* Check a tensor's place and shape (ndim 1..4, dimensions 0..UINT32_MAX,
 * bytes that fit), then its data: NULL only when it has no elements. */
int lib_tensor(divtrace *t, const char *fn, const char *name, const float *data, enum divtrace_where where,
               int ndim, const int64_t *shape, uint32_t out[TRACE_MAX_DIM], size_t *count)
{
    if (where != DIVTRACE_HOST && where != DIVTRACE_DEVICE && where != DIVTRACE_DEVICE_DEFERRED)
        return lib_fail(t, DIVTRACE_EINVAL, "%s: '%s': unknown where %d", fn, name, (int)where);
    if (ndim < 1 || ndim > TRACE_MAX_DIM)
        return lib_fail(t, DIVTRACE_EINVAL, "%s: '%s': ndim %d (1 to %d)", fn, name, ndim,
                        TRACE_MAX_DIM);
    if (!shape)
        return lib_fail(t, DIVTRACE_EINVAL, "%s: '%s': NULL shape", fn, name);
    uint64_t n = 1;
    for (int d = 0; d < TRACE_MAX_DIM; d++)
        out[d] = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || shape[d] > (int64_t)UINT32_MAX)
            return lib_fail(t, DIVTRACE_EINVAL, "%s: '%s': dimension %d is %" PRId64, fn, name, d,
                            shape[d]);
        out[d] = (uint32_t)shape[d];
        if (out[d] && n > (SIZE_MAX / sizeof(float)) / out[d])
            return lib_fail(t, DIVTRACE_EINVAL, "%s: '%s': too many elements", fn, name);
        n *= out[d];
    }
    *count = (size_t)n;
    if (!data && n > 0)
        return lib_fail(t, DIVTRACE_EINVAL, "%s: '%s': NULL data", fn, name);
    return DIVTRACE_OK;
}

static void lib_shape_text(char *buf, size_t n, int ndim, const uint32_t *shape)
{
    size_t k = 0;
    buf[0] = 0;
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? "x%" PRIu32 : "%" PRIu32, shape[d]);
}

/* Step > 0: the tensor must be the first step's tensor at this place. */
static int lib_match(divtrace *t, const char *name, const char *type, int kind, int ndim,
                     const uint32_t *shape)
{
    const char *fn = "divtrace_record";
    if (t->nrec >= t->nops)
        return lib_fail(t, DIVTRACE_EOPS, "%s: step %" PRIu64 ": '%s' is tensor %u, but the first "
                        "step recorded only %u", fn, t->step, name, t->nrec + 1, t->nops);
    const struct trace_opdef *o = &t->ops[t->nrec];
    if (strcmp(o->name, name) != 0)
        return lib_fail(t, DIVTRACE_EOPS, "%s: step %" PRIu64 ": tensor %u is '%s', but '%s' in "
                        "the first step", fn, t->step, t->nrec, name, o->name);
    if (strcmp(o->type, type) != 0 || o->kind != kind)
        return lib_fail(t, DIVTRACE_EOPS, "%s: step %" PRIu64 ": '%s' is %s %s, but %s %s in the "
                        "first step", fn, t->step, name, trace_kind_name((enum trace_kind)kind),
                        type, trace_kind_name((enum trace_kind)o->kind), o->type);
    int same = o->ndim == ndim;
    for (int d = 0; d < ndim && same; d++)
        same = o->shape[d] == shape[d];
    if (!same) {
        char a[96], b[96];
        lib_shape_text(a, sizeof a, ndim, shape);
        lib_shape_text(b, sizeof b, o->ndim, o->shape);
        return lib_fail(t, DIVTRACE_EOPS, "%s: step %" PRIu64 ": '%s' has shape %s, but %s in the "
                        "first step", fn, t->step, name, a, b);
    }
    return DIVTRACE_OK;
}

/* First step: append the op (lib_grow_ops made room), its inputs resolved
 * where they can be now. */
static int lib_add_op(divtrace *t, const char *name, const char *type, int kind, int ndim,
                      const uint32_t *shape, const char *const *inputs, int ninputs)
{
    struct trace_opdef o = {.kind = (uint8_t)kind, .ndim = (uint8_t)ndim, .ninputs = (uint32_t)ninputs};
    memcpy(o.shape, shape, sizeof o.shape);
    char **unres = NULL;
    o.name = lib_strdup(t, name);
    o.type = lib_strdup(t, type);
    if (ninputs > 0) {
        o.inputs = lib_calloc(t, (size_t)ninputs, sizeof *o.inputs);
        unres = lib_calloc(t, (size_t)ninputs, sizeof *unres);
    }
    int ok = o.name && o.type && (ninputs == 0 || (o.inputs && unres));
    for (int k = 0; ok && k < ninputs; k++) {
        int64_t j = lib_find(t, inputs[k]);
        if (j >= 0)
            o.inputs[k] = (uint32_t)j;
        else
            ok = (unres[k] = lib_strdup(t, inputs[k])) != NULL; /* a later tensor: the previous step's */
    }
    t->ops[t->nops] = o;
    t->unres[t->nops] = unres;
    if (!ok) {
        lib_op_free(t, t->nops);
        return lib_fail(t, DIVTRACE_ENOMEM, "divtrace_record: out of memory for '%s'", name);
    }
    lib_insert(t->slot, t->nslot, name, t->nops);
    t->nops++;
    return DIVTRACE_OK;
}

/* divtrace_record's work, t->mu held. */
static int lib_record(divtrace *t, const char *fn, const char *name, const char *type,
                      enum divtrace_kind kind, const float *data, enum divtrace_where where, void *stream,
                      int ndim, const int64_t *shape, const char *const *inputs, int ninputs)
{
    int rc = DIVTRACE_OK;
    uint32_t sh[TRACE_MAX_DIM];
    size_t count = 0;
    if (!name || !*name) {
        rc = lib_fail(t, DIVTRACE_EINVAL, "%s: %s name", fn, name ? "empty" : "NULL");
        goto out;
    }
    if (!type) {
        rc = lib_fail(t, DIVTRACE_EINVAL, "%s: '%s': NULL type", fn, name);
        goto out;
    }
    if ((unsigned)kind >= TRACE_KIND_COUNT) {
        rc = lib_fail(t, DIVTRACE_EINVAL, "%s: '%s': unknown kind %d", fn, name, (int)kind);
        goto out;
    }
    if ((rc = lib_tensor(t, fn, name, data, where, ndim, shape, sh, &count)) != DIVTRACE_OK)
        goto out;
    if (ninputs < 0 || (ninputs > 0 && !inputs)) {
        rc = lib_fail(t, DIVTRACE_EINVAL, "%s: '%s': %d inputs at %p", fn, name, ninputs,
                      (const void *)inputs);
        goto out;
    }
    for (int k = 0; k < ninputs; k++)
        if (!inputs[k] || !*inputs[k]) {
            rc = lib_fail(t, DIVTRACE_EINVAL, "%s: '%s': input %d is %s", fn, name, k,
                          inputs[k] ? "empty" : "NULL");
            goto out;
        }
    if (!t->in_step) {
        rc = lib_fail(t, DIVTRACE_ESTATE, "%s: '%s' outside a step (call divtrace_step_begin "
                      "first)", fn, name);
        goto out;
    }
    if (t->fixed)
        rc = lib_match(t, name, type, (int)kind, ndim, sh);
    else if (lib_find(t, name) >= 0)
        rc = lib_fail(t, DIVTRACE_EINVAL, "%s: '%s' is recorded twice in step %" PRIu64, fn, name,
                      t->step);
    else
        rc = lib_grow_ops(t);
    if (rc == DIVTRACE_OK)
        rc = lib_grow_rec(t);
    if (rc != DIVTRACE_OK)
        goto out;
    struct trace_oprec *r = &t->rec[t->nrec];
    memset(r, 0, sizeof *r);
    r->op = t->nrec;
    t->on_dev[t->nrec] = where != DIVTRACE_HOST;
    if (where != DIVTRACE_HOST) {
        char msg[LIB_MSG];
        if (!t->gpu && count > 0)
            rc = lib_gpu_new(&t->gpu, data, &t->inj, msg, sizeof msg);
        if (rc == DIVTRACE_OK && count > 0)
            rc = where == DIVTRACE_DEVICE
                     ? lib_gpu_enqueue(t->gpu, data, count, stream, t->nrec, msg, sizeof msg)
                     : lib_gpu_defer(t->gpu, data, count, stream, t->nrec, msg, sizeof msg);
        if (rc != DIVTRACE_OK) {
            lib_fail(t, rc, "%s: '%s': %s", fn, name, msg);
            goto out;
        }
        if (count == 0) {
            stats_compute(NULL, 0, r); /* nothing to read: the empty record */
            t->on_dev[t->nrec] = 0;
        }
    } else {
        stats_compute(data, count, r);
    }
    if (!t->fixed && (rc = lib_add_op(t, name, type, (int)kind, ndim, sh, inputs, ninputs)) != DIVTRACE_OK)
        goto out; /* out of memory for a name: a queued device record in this slot may race
                   * with the next one's; the step should be begun again */
    t->nrec++;
out:
    return rc;
}

int divtrace_record(divtrace *t, const char *name, const char *type, enum divtrace_kind kind,
                    const float *data, enum divtrace_where where, void *stream, int ndim,
                    const int64_t *shape, const char *const *inputs, int ninputs)
{
    const char *fn = "divtrace_record";
    int rc = lib_enter(t, fn);
    if (rc != DIVTRACE_OK)
        return rc;
    rc = lib_record(t, fn, name, type, kind, data, where, stream, ndim, shape, inputs, ninputs);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int divtrace_record_many(divtrace *t, int n, const struct divtrace_tensor *ts, const float *const *data,
                         enum divtrace_where where, void *stream)
{
    const char *fn = "divtrace_record_many";
    int rc = lib_enter(t, fn);
    if (rc != DIVTRACE_OK)
        return rc;
    if (n < 0 || (n > 0 && (!ts || !data)))
        rc = lib_fail(t, DIVTRACE_EINVAL, "%s: %d tensors at %p, data at %p", fn, n, (const void *)ts,
                      (const void *)data);
    for (int i = 0; i < n && rc == DIVTRACE_OK; i++)
        rc = lib_record(t, fn, ts[i].name, ts[i].type, ts[i].kind, data[i], where, stream, ts[i].ndim,
                        ts[i].shape, ts[i].inputs, ts[i].ninputs);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int divtrace_sync(divtrace *t)
{
    int rc = lib_enter(t, "divtrace_sync");
    if (rc != DIVTRACE_OK)
        return rc;
    if ((rc = lib_pend_finish(t, "divtrace_sync")) != DIVTRACE_OK)
        ;
    else if (trace_writer_sync(t->w) < 0)
        rc = lib_fail(t, DIVTRACE_EIO, "divtrace_sync: %s", dt_error());
    else
        rc = lib_watch(t, "divtrace_sync");
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int divtrace_flush(divtrace *t)
{
    int rc = lib_enter(t, "divtrace_flush");
    if (rc != DIVTRACE_OK)
        return rc;
    char msg[LIB_MSG];
    if (t->gpu && (rc = lib_gpu_flush(t->gpu, msg, sizeof msg)) != DIVTRACE_OK)
        lib_fail(t, rc, "divtrace_flush: step %" PRIu64 ": %s", t->step, msg);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* First step's end: every input name that was not an earlier tensor of
 * the step names a later one (that tensor of the previous step). */
static int lib_resolve(divtrace *t)
{
    char list[LIB_MSG] = "";
    size_t k = 0;
    int bad = 0;
    for (uint32_t i = 0; i < t->nops; i++) {
        if (!t->unres[i])
            continue;
        for (uint32_t q = 0; q < t->ops[i].ninputs; q++) {
            const char *in = t->unres[i][q];
            if (!in)
                continue;
            int64_t j = lib_find(t, in);
            if (j >= 0) {
                t->ops[i].inputs[q] = (uint32_t)j | TRACE_INPUT_PREV;
                continue;
            }
            if (bad++ < 8 && k < sizeof list)
                k += (size_t)snprintf(list + k, sizeof list - k, "%s'%s' (input of '%s')",
                                      bad > 1 ? ", " : "", in, t->ops[i].name);
        }
    }
    if (bad)
        return lib_fail(t, DIVTRACE_EINVAL, "divtrace_step_end: step %" PRIu64 ": %d input name%s "
                        "recorded nowhere in the step: %s%s", t->step, bad, bad > 1 ? "s" : "",
                        list, bad > 8 ? ", ..." : "");
    for (uint32_t i = 0; i < t->nops; i++) {
        if (!t->unres[i])
            continue;
        for (uint32_t q = 0; q < t->ops[i].ninputs; q++)
            free(t->unres[i][q]);
        free(t->unres[i]);
        t->unres[i] = NULL;
    }
    return DIVTRACE_OK;
}

/* The step's record (as run_summarize: the root over every op's hash, the
 * gradient norm over the GRAD tensors, the records the level keeps),
 * handed to the writer's thread. */
static int lib_write_step(divtrace *t, const char *fn, uint64_t step, double loss, const struct trace_oprec *rec,
                          uint32_t nrec)
{
    int rc = DIVTRACE_OK;
    double g2 = 0;
    int gfinite = 1;
    uint32_t nkeep = 0, turn = (uint32_t)t->oturn;
    if (t->ocap[turn] < nrec) {
        struct trace_oprec *o = lib_realloc(t, t->out[turn], (size_t)nrec * sizeof *o);
        if (!o) {
            rc = lib_fail(t, DIVTRACE_ENOMEM, "%s: out of memory for %u records", fn, nrec);
            goto out;
        }
        t->out[turn] = o;
        t->ocap[turn] = nrec;
    }
    for (uint32_t i = 0; i < nrec; i++) {
        const struct trace_oprec *o = &rec[i];
        uint8_t *le = (uint8_t *)&t->hashes[i];
        for (int b = 0; b < 8; b++)
            le[b] = (uint8_t)(o->hash >> (8 * b));
        enum trace_kind k = (enum trace_kind)t->ops[i].kind;
        if (k == TRACE_KIND_GRAD) {
            g2 += o->l2 * o->l2;
            gfinite &= o->nan == 0 && o->inf == 0;
        }
        if (trace_level_keeps(t->level, k))
            t->out[turn][nkeep++] = *o;
    }
    struct trace_step s = {
        .step = step,
        .loss = loss,
        .grad_norm = gfinite ? sqrt(g2) : NAN,
        .root = hash_bytes(t->hashes, (size_t)nrec * sizeof *t->hashes),
        .nrec = nkeep,
        .rec = t->out[turn],
    };
    /* written on the writer's thread; a failure there is reported by the
     * next call that writes (a step's end, a checkpoint, the close) */
    if (trace_writer_step_async(t->w, &s) < 0) {
        rc = lib_fail(t, DIVTRACE_EIO, "%s: %s", fn, dt_error());
        goto out;
    }
    t->oturn = !t->oturn;
    if ((rc = lib_carry(t, fn, step, rec, nrec)) == DIVTRACE_OK)
        rc = lib_watch_due(t, fn);
out:
    return rc;
}

/* The step divtrace_step_end_async left (if any), written: its device
 * records read (if the next step has not begun, which reads them), its
 * loss read, the step handed to the writer. t->mu held. */
int lib_pend_finish(divtrace *t, const char *fn)
{
    if (!t->pend)
        return DIVTRACE_OK;
    char msg[LIB_MSG];
    int rc = DIVTRACE_OK;
    if (t->pend == 1) {
        rc = lib_gpu_harvest(t->gpu, t->tmp, t->pend_nrec, t->pend_on_dev, msg, sizeof msg);
        for (uint32_t i = 0; rc == DIVTRACE_OK && i < t->pend_nrec; i++)
            if (t->pend_on_dev[i]) {
                t->pend_rec[i] = t->tmp[i];
                t->pend_rec[i].op = i;
            }
    }
    /* the loss read (or given up) even when the records failed: the next
     * step's may be noted then */
    float loss = NAN;
    char lmsg[LIB_MSG];
    int lrc = lib_gpu_loss_value(t->gpu, &loss, lmsg, sizeof lmsg);
    if (rc == DIVTRACE_OK && lrc != DIVTRACE_OK) {
        rc = lrc;
        memcpy(msg, lmsg, sizeof msg);
    }
    t->pend = 0;
    if (rc != DIVTRACE_OK)
        return lib_fail(t, rc, "%s: step %" PRIu64 " (ended before, not yet written): %s", fn, t->pend_step, msg);
    return lib_write_step(t, fn, t->pend_step, loss, t->pend_rec, t->pend_nrec);
}

/* divtrace_step_end's work, t->mu held; dloss: the loss in device memory
 * (read with the device records), else loss */
static int lib_step_end(divtrace *t, const char *fn, double loss, const float *dloss, void *stream)
{
    int rc = lib_pend_finish(t, fn);
    if (rc != DIVTRACE_OK)
        goto out;
    if (!t->in_step) {
        rc = lib_fail(t, DIVTRACE_ESTATE, "%s: no step begun", fn);
        goto out;
    }
    if (t->fixed && t->nrec != t->nops) {
        rc = lib_fail(t, DIVTRACE_EOPS, "%s: step %" PRIu64 " ends after %u tensors, but the first "
                      "step recorded %u (next: '%s')", fn, t->step, t->nrec, t->nops,
                      t->ops[t->nrec].name);
        goto out;
    }
    if (dloss) {
        char msg[LIB_MSG];
        if (!t->gpu)
            rc = lib_gpu_new(&t->gpu, dloss, &t->inj, msg, sizeof msg);
        if (rc == DIVTRACE_OK)
            rc = lib_gpu_fetch(t->gpu, dloss, stream, msg, sizeof msg);
        if (rc != DIVTRACE_OK) {
            lib_fail(t, rc, "%s: step %" PRIu64 ": the loss: %s", fn, t->step, msg);
            goto out;
        }
    }
    if (t->gpu && lib_gpu_pending(t->gpu)) {
        char msg[LIB_MSG];
        rc = lib_gpu_collect(t->gpu, t->tmp, t->nrec, msg, sizeof msg);
        if (rc != DIVTRACE_OK) {
            lib_fail(t, rc, "%s: step %" PRIu64 ": %s", fn, t->step, msg);
            goto out;
        }
        for (uint32_t i = 0; i < t->nrec; i++)
            if (t->on_dev[i]) {
                t->rec[i] = t->tmp[i];
                t->rec[i].op = i;
            }
    }
    if (dloss)
        loss = lib_gpu_fetched(t->gpu);
    if (!t->fixed) {
        if ((rc = lib_resolve(t)) != DIVTRACE_OK)
            goto out;
        if (trace_writer_ops(t->w, t->ops, t->nops) < 0) {
            rc = lib_fail(t, DIVTRACE_EIO, "%s: %s", fn, dt_error());
            goto out;
        }
        t->fixed = 1;
        if (t->have_early) {
            rc = lib_ckpt_write(t, &t->early);
            trace_ckpt_free(&t->early);
            t->have_early = 0;
            if (rc != DIVTRACE_OK)
                goto out;
        }
    }
    if ((rc = lib_write_step(t, fn, t->step, loss, t->rec, t->nrec)) != DIVTRACE_OK)
        goto out;
    t->in_step = 0;
    t->have_last = 1;
    t->last = t->step;
out:
    return rc;
}

int divtrace_step_end(divtrace *t, double loss)
{
    int rc = lib_enter(t, "divtrace_step_end");
    if (rc != DIVTRACE_OK)
        return rc;
    rc = lib_step_end(t, "divtrace_step_end", loss, NULL, NULL);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int divtrace_step_end_device(divtrace *t, const float *loss, void *stream)
{
    const char *fn = "divtrace_step_end_device";
    int rc = lib_enter(t, fn);
    if (rc != DIVTRACE_OK)
        return rc;
    rc = loss ? lib_step_end(t, fn, 0, loss, stream) : lib_fail(t, DIVTRACE_EINVAL, "%s: NULL loss", fn);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int divtrace_step_end_async(divtrace *t, const float *loss, void *stream)
{
    const char *fn = "divtrace_step_end_async";
    int rc = lib_enter(t, fn);
    if (rc != DIVTRACE_OK)
        return rc;
    char msg[LIB_MSG];
    if (!loss) {
        rc = lib_fail(t, DIVTRACE_EINVAL, "%s: NULL loss", fn);
        goto out;
    }
    /* the first step (its op list written at its end) and a step after
     * another's error: as divtrace_step_end_device */
    if (!t->fixed || !t->in_step || t->failed || t->nrec != t->nops) {
        rc = lib_step_end(t, fn, 0, loss, stream);
        goto out;
    }
    if ((rc = lib_pend_finish(t, fn)) != DIVTRACE_OK)
        goto out;
    if (!t->gpu && (rc = lib_gpu_new(&t->gpu, loss, &t->inj, msg, sizeof msg)) != DIVTRACE_OK) {
        lib_fail(t, rc, "%s: step %" PRIu64 ": the loss: %s", fn, t->step, msg);
        goto out;
    }
    if (t->pend_cap < t->nrec) {
        struct trace_oprec *r = lib_realloc(t, t->pend_rec, (size_t)t->nrec * sizeof *r);
        if (r)
            t->pend_rec = r;
        char *d = lib_realloc(t, t->pend_on_dev, t->nrec);
        if (d)
            t->pend_on_dev = d;
        if (!r || !d) {
            rc = lib_fail(t, DIVTRACE_ENOMEM, "%s: out of memory for %u records", fn, t->nrec);
            goto out;
        }
        t->pend_cap = t->nrec;
    }
    /* the deferred records queued; the loss taken by the next batch on its
     * stream; nothing waited for */
    if ((rc = lib_gpu_flush(t->gpu, msg, sizeof msg)) != DIVTRACE_OK ||
        (rc = lib_gpu_loss_later(t->gpu, loss, stream, msg, sizeof msg)) != DIVTRACE_OK) {
        lib_fail(t, rc, "%s: step %" PRIu64 ": %s", fn, t->step, msg);
        goto out;
    }
    memcpy(t->pend_rec, t->rec, (size_t)t->nrec * sizeof *t->rec);
    memcpy(t->pend_on_dev, t->on_dev, t->nrec);
    t->pend_nrec = t->nrec;
    t->pend_step = t->step;
    t->pend = 1;
    t->in_step = 0;
    t->have_last = 1;
    t->last = t->step;
out:
    pthread_mutex_unlock(&t->mu);
    return rc;
}
