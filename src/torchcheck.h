/* torchcheck.h: the oracle checks of PyTorch adapter traces. At a check
 * step the adapter stores each recorded module's inputs, parameters and
 * output, and each parameter's update with the optimizer's state before it,
 * in the checkpoint that follows the step (names check/STEP/RECORD/ROLE and
 * a spec in the name check/STEP/RECORD/spec=SPEC; divtrace-python(7),
 * ORACLE CHECKS). This reads them back and holds each output to the exact
 * oracle of reference/modcheck.h, as replay holds divtrace's own ops. */
#ifndef DT_TORCHCHECK_H
#define DT_TORCHCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "modcheck.h"
#include "replay.h"
#include "trace.h"

#define TCHECK_MAX_T 16

/* The check data of one record (a module call or a parameter's update). */
struct tcheck_item {
    char *name;                 /* the record's name: fc1, fc2.1, fc1.weight.update */
    char *spec;
    char type[32];              /* the spec's first word: linear, custom, adam, ... */
    int nt;
    struct modcheck_tensor t[TCHECK_MAX_T];
};

/* The check data of one step of one trace. */
struct tcheck_data {
    uint64_t step;
    struct trace_ckpt ck;       /* the checkpoint that holds them (owns the data) */
    int n;
    struct tcheck_item *items;
};

/* Where re-runs write their traces: $TMPDIR, else /tmp. */
const char *tcheck_tmpdir(void);

/* Whether tf was written by the PyTorch adapter (framework = pytorch). */
int tcheck_is_torch(const struct trace_file *tf);
/* Load the check data of step `step`: 0 with d filled, 1 when tf holds
 * none for that step, -1 with dt_error set (an unreadable checkpoint). */
int tcheck_load(struct trace_file *tf, uint64_t step, struct tcheck_data *d);
void tcheck_free(struct tcheck_data *d);
const struct tcheck_item *tcheck_find(const struct tcheck_data *d, const char *name);

/* Hold one item's outputs to the oracle: 0 with c filled (class, worst
 * element and ratio over all its outputs; c->algorithm names the output
 * when it is not "out"), 1 when it cannot be checked (why: "not checked:
 * batchnorm2d", "not checked: linear (float16 autocast)", its data over
 * the budget), -1 with dt_error set (malformed data). */
int tcheck_item(const struct tcheck_item *it, struct replay_opcheck *c, char *why, size_t n);

/* A custom module's class name (its spec's class=), or the item's type. */
const char *tcheck_class(const struct tcheck_item *it);
/* A custom module's backward against central differences of its forward,
 * as the adapter found it: 1 it is not the forward's derivative, 0 it is,
 * -1 not checked; err: the relative disagreement. */
int tcheck_custom_backward(const struct tcheck_item *it, char *err, size_t n);

/* A custom module's float64 re-evaluations in two runs from the same
 * inputs: 0 the same function, 1 another (text says where), -1 cannot
 * tell (text says why). */
int tcheck_custom_compare(const struct tcheck_item *a, const struct tcheck_item *b, char *text,
                          size_t n);

/* Re-run the command a `divtrace run` trace was recorded with (its
 * run_argv, in its run_cwd), recording step `step`'s check data, into a
 * new trace at out_path (the re-run ends after that step). self: this
 * program. 0, or -1 with dt_error set (no run_argv: recorded another way;
 * the command failed). */
int tcheck_rerun(const struct trace_file *tf, uint64_t step, const char *self, const char *out_path,
                 int quiet);

/* Whether steps [0, upto] of b are bitwise those of a (every record's hash
 * and the loss): 1, 0 (first differing step in *step), -1 with dt_error. */
int tcheck_same_steps(const struct trace_file *a, const struct trace_file *b, uint64_t upto,
                      uint64_t *step);

/* `divtrace replay` of an adapter trace (replay_torch.c): opt's steps
 * re-run (same) or their modules checked (oracle); the exit status. */
int replay_torch(struct trace_file *tf, const struct replay_options *opt, int all);

#endif
