/* carry.c: carry faults read from a trace (see carry.h). */
#include "carry.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The update a leaf names as its value from the previous step, or -1. */
static int carry_writer(const struct trace_file *tf, uint32_t i)
{
    const struct trace_opdef *o = &tf->ops[i];
    if ((o->kind != TRACE_KIND_PARAM && o->kind != TRACE_KIND_STATE) || o->ninputs != 1 ||
        !(o->inputs[0] & TRACE_INPUT_PREV))
        return -1;
    uint32_t w = o->inputs[0] & ~TRACE_INPUT_PREV;
    return w < tf->nops ? (int)w : -1;
}

static void carry_push(struct carry_scan *c, struct carry_fault f)
{
    for (int k = 0; k < c->n; k++)
        if (c->f[k].step == f.step && c->f[k].leaf == f.leaf) {
            c->f[k].from_records |= f.from_records;
            return;
        }
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->f = dt_realloc(c->f, (size_t)c->cap * sizeof *c->f);
    }
    c->f[c->n++] = f;
}

static int carry_order(const void *x, const void *y)
{
    const struct carry_fault *a = x, *b = y;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return a->leaf < b->leaf ? -1 : a->leaf > b->leaf;
}

void carry_scan_trace(const struct trace_file *tf, struct carry_scan *out)
{
    memset(out, 0, sizeof *out);
    uint32_t n = tf->nops;
    const struct trace_oprec **now = dt_calloc(n ? n : 1, sizeof *now);
    const struct trace_oprec **before = dt_calloc(n ? n : 1, sizeof *before);
    for (uint32_t i = 0; i < n; i++)
        if (carry_writer(tf, i) >= 0)
            out->checkable = 1;
    int checked = 0;
    for (uint64_t s = 0; s < tf->nsteps; s++) {
        const struct trace_oprec **t = before;
        before = now;
        now = t;
        memset(now, 0, n * sizeof *now);
        for (uint32_t k = 0; k < tf->steps[s].nrec; k++)
            if (tf->steps[s].rec[k].op < n)
                now[tf->steps[s].rec[k].op] = &tf->steps[s].rec[k];
        if (s == 0)
            continue;
        for (uint32_t i = 0; i < n; i++) {
            int w = carry_writer(tf, i);
            if (w < 0 || !now[i] || !before[w])
                continue;
            checked = 1;
            if (now[i]->hash != before[w]->hash)
                carry_push(out, (struct carry_fault){s, i, (uint32_t)w, 1});
        }
    }
    out->checkable = out->checkable && checked;
    for (uint32_t e = 0; e < tf->nevents; e++) {
        const struct trace_event *ev = &tf->events[e];
        int w = ev->op < n ? carry_writer(tf, ev->op) : -1;
        if (ev->code == TRACE_EVENT_CARRY && w >= 0)
            carry_push(out, (struct carry_fault){ev->step, ev->op, (uint32_t)w, 0});
    }
    if (out->n > 1)
        qsort(out->f, (size_t)out->n, sizeof *out->f, carry_order);
    for (int k = 0; k < out->n; k++)
        if (k == 0 || out->f[k].step != out->f[k - 1].step)
            out->nsteps++;
    free(now);
    free(before);
}

void carry_scan_free(struct carry_scan *c)
{
    free(c->f);
    memset(c, 0, sizeof *c);
}

void carry_describe(const struct trace_file *tf, const struct carry_fault *f, char *out, size_t n)
{
    snprintf(out, n, "step %" PRIu64 ": %s is not what %s wrote in step %" PRIu64, f->step,
             tf->ops[f->leaf].name, tf->ops[f->writer].name, f->step ? f->step - 1 : 0);
}
