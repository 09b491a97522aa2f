/* libdivtrace_ckpt.c: libdivtrace's checkpoints (divtrace_checkpoint(3)):
 * the parameters and optimizer state before a step, host or device
 * tensors copied whole, written between steps. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "lib_gpu.h"
#include "libdivtrace_impl.h"
#include "util.h"

int lib_ckpt_write(divtrace *t, const struct trace_ckpt *c)
{
    if (trace_writer_ckpt(t->w, c) < 0)
        return lib_fail(t, DIVTRACE_EIO, "divtrace_checkpoint_end: %s", dt_error());
    return DIVTRACE_OK;
}

int divtrace_checkpoint_begin(divtrace *t, uint64_t step)
{
    const char *fn = "divtrace_checkpoint_begin";
    int rc = lib_enter(t, fn);
    if (rc != DIVTRACE_OK)
        return rc;
    if (t->in_step)
        rc = lib_fail(t, DIVTRACE_ESTATE, "%s: inside step %" PRIu64 " (a checkpoint goes between "
                      "steps)", fn, t->step);
    else if (t->in_ckpt)
        rc = lib_fail(t, DIVTRACE_ESTATE, "%s: the checkpoint of step %" PRIu64 " has not ended",
                      fn, t->ck.step);
    else if (t->have_last && step <= t->last)
        rc = lib_fail(t, DIVTRACE_ESTATE, "%s: the state before step %" PRIu64 ", but step %"
                      PRIu64 " has ended", fn, step, t->last);
    else if (!t->fixed && t->have_early)
        rc = lib_fail(t, DIVTRACE_ESTATE, "%s: a second checkpoint before the first step", fn);
    else if ((rc = lib_pend_finish(t, fn)) == DIVTRACE_OK) /* the step before goes first in the file */
        rc = lib_watch(t, fn); /* no checkpoint into a file that is gone */
    if (rc != DIVTRACE_OK)
        goto out;
    trace_ckpt_free(&t->ck);
    t->ck_cap = 0;
    t->ck.step = step;
    t->in_ckpt = 1;
out:
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int divtrace_checkpoint_add(divtrace *t, const char *name, const float *data,
                            enum divtrace_where where, int ndim, const int64_t *shape)
{
    const char *fn = "divtrace_checkpoint_add";
    int rc = lib_enter(t, fn);
    if (rc != DIVTRACE_OK)
        return rc;
    uint32_t sh[TRACE_MAX_DIM];
    size_t count = 0;
    float *copy = NULL;
    if (!name || !*name) {
        rc = lib_fail(t, DIVTRACE_EINVAL, "%s: %s name", fn, name ? "empty" : "NULL");
        goto out;
    }
    if ((rc = lib_tensor(t, fn, name, data, where, ndim, shape, sh, &count)) != DIVTRACE_OK)
        goto out;
    if (!t->in_ckpt) {
        rc = lib_fail(t, DIVTRACE_ESTATE, "%s: '%s' outside a checkpoint (call "
                      "divtrace_checkpoint_begin first)", fn, name);
        goto out;
    }
    if (trace_ckpt_find(&t->ck, name)) {
        rc = lib_fail(t, DIVTRACE_EINVAL, "%s: '%s' is in the checkpoint twice", fn, name);
        goto out;
    }
    if (t->ck.ntensors == t->ck_cap) {
        uint32_t cap = t->ck_cap ? 2 * t->ck_cap : 16;
        struct trace_tensor *tt = lib_realloc(t, t->ck.t, cap * sizeof *tt);
        if (!tt) {
            rc = lib_fail(t, DIVTRACE_ENOMEM, "%s: out of memory", fn);
            goto out;
        }
        t->ck.t = tt;
        t->ck_cap = cap;
    }
    copy = lib_malloc(t, count ? count * sizeof *copy : 1);
    char *nm = copy ? lib_strdup(t, name) : NULL;
    if (!copy || !nm) {
        free(nm);
        rc = lib_fail(t, DIVTRACE_ENOMEM, "%s: '%s': out of memory for %zu floats", fn, name, count);
        goto out;
    }
    if (where != DIVTRACE_HOST && count > 0) {
        char msg[LIB_MSG];
        rc = lib_gpu_download(&t->inj, copy, data, count, msg, sizeof msg);
        if (rc != DIVTRACE_OK) {
            free(nm);
            lib_fail(t, rc, "%s: '%s': %s", fn, name, msg);
            goto out;
        }
    } else if (count > 0) {
        memcpy(copy, data, count * sizeof *copy);
    }
    struct trace_tensor *tt = &t->ck.t[t->ck.ntensors++];
    memset(tt, 0, sizeof *tt);
    tt->name = nm;
    tt->ndim = (uint8_t)ndim;
    memcpy(tt->shape, sh, sizeof sh);
    tt->count = count;
    tt->data = copy;
    copy = NULL;
out:
    free(copy);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int divtrace_checkpoint_end(divtrace *t)
{
    const char *fn = "divtrace_checkpoint_end";
    int rc = lib_enter(t, fn);
    if (rc != DIVTRACE_OK)
        return rc;
    if (!t->in_ckpt) {
        rc = lib_fail(t, DIVTRACE_ESTATE, "%s: no checkpoint begun", fn);
        goto out;
    }
    t->in_ckpt = 0;
    if (!t->fixed) {
        /* before the op list exists: written when the first step ends */
        t->early = t->ck;
        t->have_early = 1;
        memset(&t->ck, 0, sizeof t->ck);
    } else {
        rc = lib_ckpt_write(t, &t->ck);
        trace_ckpt_free(&t->ck);
    }
    t->ck_cap = 0;
out:
    pthread_mutex_unlock(&t->mu);
    return rc;
}
