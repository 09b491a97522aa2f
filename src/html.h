/* html.h: one self-contained HTML page of a comparison (`divtrace diff
 * --html`) or of a study (`divtrace report --html`): the loss curves, the
 * divergence timeline, a layer x step (x time step) heatmap of the
 * divergent and origin ops whose cells show their ops' records, and
 * explain's verdict. The data goes into the page as JSON; the page's own
 * script draws it, with no network access (no external URL at all). */
#ifndef DT_HTML_H
#define DT_HTML_H

#include "trace.h"

struct html_options {
    int explain;              /* run explain's analysis and show its verdict */
    const char *explain_json; /* or show the verdict of this saved `divtrace explain
                               * --json` output; NULL for none */
    int progress;             /* explain's progress lines on stderr */
};

/* Check diff's page options (html: --html's FILE or NULL; reference: with
 * --reference) and set o->progress (explain's progress lines, on a
 * terminal unless quiet). 0, or -1 with dt_error set to one line. */
int html_diff_options(const char *html, int reference, int quiet, struct html_options *o);

/* Write the page of traces tf[0] and tf[1] to path (through a temporary
 * file renamed into place: no half-written page). n: how many traces were
 * given; ranks: diff's verdict that they are the ranks of one job (the
 * page compares two runs: both are refused). 0, or -1 with dt_error set to
 * one line. */
int html_write_diff(const char *path, struct trace_file **tf, int n, int ranks,
                    const struct html_options *o);

/* Write the page of the study in dir (after `divtrace report` made its
 * summaries): each condition's loss curves, and for each run pair its
 * curves, timeline, replays and explain's verdict, and its heatmap when
 * both traces are there; then "wrote PATH" on stdout unless quiet. 0, or
 * -1 with dt_error set. */
int html_write_report(const char *path, const char *dir, int quiet);

#endif
