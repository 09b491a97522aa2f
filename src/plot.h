/* plot.h: PNG plots of `divtrace escape --plot DIR`: loss curves with their
 * plateaus and escapes, the parameter distance of two runs, and where a
 * PredNet pair first diverges (layer x time step), and for `--pairs` the
 * divergence onsets of many pairs against their escape differences.
 * Drawn by gnuplot (Debian's gnuplot-nox) through a pipe, data inline: a plain
 * Debian package, scriptable through popen, that makes readable PNGs with
 * axes, labels and legends without adding a C library dependency. */
#ifndef DT_PLOT_H
#define DT_PLOT_H

#include <stddef.h>
#include <stdio.h>

#include "escape.h"
#include "escape_pairs.h"
#include "trace.h"

struct plot_run {
    struct trace_file *tf;
    const struct escape_result *r; /* the plateaus of tf's loss curve */
};

/* 0 when a gnuplot program is on PATH, else -1 with dt_error set. */
int plot_check(void);

/* The gnuplot pipe, for these plots and those of `divtrace report`
 * (report_plot.c). plot_open starts gnuplot on a PNG at path with a title
 * and axis labels and returns the pipe to write the rest of the script to;
 * NULL with dt_error set when gnuplot cannot start. gnuplot's stderr goes to
 * *err, a temporary file (NULL when none could be made): its warnings (an
 * empty range of a one-step run) are noise, its last line names the error
 * when it fails. */
FILE *plot_open(const char *path, const char *title, const char *xlabel, const char *ylabel,
                FILE **err);
/* Ends plot_open's script, waits for gnuplot and closes err: 0 when gnuplot
 * wrote the PNG, else -1 with *st its wait status (-1 when there is none)
 * and last the last line it wrote on stderr ("" if none). */
#define PLOT_LAST 256
int plot_finish(FILE *g, FILE *err, int *st, char last[PLOT_LAST]);
/* s as a gnuplot single-quoted string (a quote inside is doubled). */
void plot_str(FILE *g, const char *s);

/* Into dir (created if missing): loss.png for all runs; with two runs,
 * distance.png when they share checkpoints and first-divergence.png when
 * they are PredNet runs that diverge. Each path written, and each plot
 * skipped with the reason, is one line on log. 0, or -1 with dt_error set
 * (dir not writable, unreadable checkpoint, gnuplot failed). */
int plot_escape(const char *dir, struct plot_run *runs, size_t nruns, FILE *log);

/* `escape --pairs DIR --plot DIR2`: DIR2/pairs.png, one point per pair at
 * (divergence onset, |escape difference|), the onset both as the first
 * divergent step and as the 1e-3 crossing, each point labelled with its
 * pair's number. Skipped (one line on log saying why) when no pair has an
 * onset and an escape in both runs. 0, or -1 with dt_error set. */
int plot_pairs(const char *dir, const struct escape_pairs *ps, FILE *log);

#endif
