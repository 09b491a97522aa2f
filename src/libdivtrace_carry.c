/* libdivtrace_carry.c: carry faults in a trace written through the library:
 * a parameter or state record that names the previous step's update as its
 * input, and holds other bits than that update had, is an event. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "libdivtrace_impl.h"
#include "util.h"

/* At most this many carry events in a trace (the records show the rest). */
#define LIB_CARRY_EVENTS 64

/* A parameter or state record that names the previous step's update as its
 * input and holds another hash than that update had: the tensor changed
 * between the steps (a carry fault). One event a step, naming the first. */
int lib_carry(divtrace *t, const char *fn, uint64_t step, const struct trace_oprec *rec,
                     uint32_t nrec)
{
    if (!t->carry_prev) {
        t->carry_prev = lib_calloc(t, t->nops ? t->nops : 1, sizeof *t->carry_prev);
        if (!t->carry_prev)
            return lib_fail(t, DIVTRACE_ENOMEM, "%s: out of memory", fn);
    }
    int64_t first = -1;
    uint32_t n = 0;
    for (uint32_t i = 0; t->carry_have && t->carry_step + 1 == step && i < nrec && i < t->nops; i++) {
        const struct trace_opdef *o = &t->ops[i];
        if ((o->kind != TRACE_KIND_PARAM && o->kind != TRACE_KIND_STATE) || o->ninputs != 1 ||
            !(o->inputs[0] & TRACE_INPUT_PREV))
            continue;
        uint32_t w = o->inputs[0] & ~TRACE_INPUT_PREV;
        if (w < t->nops && rec[i].hash != t->carry_prev[w]) {
            if (first < 0)
                first = i;
            n++;
        }
    }
    for (uint32_t i = 0; i < nrec && i < t->nops; i++)
        t->carry_prev[i] = rec[i].hash;
    t->carry_have = 1;
    t->carry_step = step;
    if (first < 0 || t->carry_events >= LIB_CARRY_EVENTS)
        return DIVTRACE_OK;
    t->carry_events++;
    const struct trace_opdef *o = &t->ops[first];
    char text[512];
    snprintf(text, sizeof text, "step %" PRIu64 ": carry fault: %s is not what %s wrote in step %" PRIu64
             "%s", step, o->name, t->ops[o->inputs[0] & ~TRACE_INPUT_PREV].name, step - 1,
             n > 1 ? " (and more tensors)" : "");
    struct trace_event ev = {TRACE_EVENT_CARRY, step, (uint32_t)first, text};
    if (trace_writer_event(t->w, &ev) < 0)
        return lib_fail(t, DIVTRACE_EIO, "%s: %s", fn, dt_error());
    return DIVTRACE_OK;
}
