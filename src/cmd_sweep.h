/* cmd_sweep.h: what `divtrace sweep`'s files share (cmd_sweep.c,
 * cmd_sweep_check.c, cmd_sweep_emit.c). */
#ifndef DT_CMD_SWEEP_H
#define DT_CMD_SWEEP_H

#include <limits.h>
#include <stdio.h>
#include <sys/types.h>

#include "sweep.h"

enum sweep_state { SWEEP_PENDING, SWEEP_DONE, SWEEP_RUNNING, SWEEP_OK, SWEEP_FAILED };

/* One trial of the plan. */
struct sweep_trial {
    const struct sweep_cond *c;
    int t;
    char rel[PATH_MAX];         /* "runs/COND/tNN" (no extension), relative to DIR */
    enum sweep_state state;
    pid_t pid;
    int carry;                  /* its trace holds a carry fault (record exited 1) */
};

/* The record options of every trial of the conditions the selectors pick
 * (all of them when nonly is 0), parsed and checked as `divtrace record`
 * would, before any trial starts or anything is written. 0, or -1 after one
 * line on stderr naming the sweep file, the condition and the option. */
int sweep_check_trials(const struct sweep_spec *s, const char *spec, const char *const *only,
                       int nonly);

/* Files are written through a temporary file and a rename (cmd_sweep.c):
 * sweep_tmp_open opens tmp, the temporary file of path (NULL with dt_error
 * set); sweep_tmp_close closes it and renames it to path (tmp removed when
 * anything failed). */
FILE *sweep_tmp_open(const char *path, char tmp[PATH_MAX]);
int sweep_tmp_close(FILE *f, const char *tmp, const char *path);

/* cmd_sweep_emit.c: a word for sh (and, with make, inside a Makefile
 * recipe: '$' doubled); the words of args, each after a space. */
void sweep_put_word(FILE *f, const char *s, int make);
void sweep_put_args(FILE *f, char **args, int make);

/* --emit make: the n trials tr of s as path, a Makefile that runs the
 * program exe in the directory cwd. */
int sweep_emit_make(const struct sweep_spec *s, struct sweep_trial *tr, int n, const char *exe,
                    const char *cwd, const char *path);
/* --emit slurm: as path, a Slurm job array script, with dir the study's
 * absolute directory. */
int sweep_emit_slurm(const struct sweep_spec *s, struct sweep_trial *tr, int n, const char *exe,
                     const char *cwd, const char *dir, const char *path);

#endif
