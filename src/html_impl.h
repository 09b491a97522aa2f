/* html_impl.h: what the files of the HTML page share (html.c writes the
 * page, html_data.c a comparison's data, html_report.c a study's,
 * html_assets.c holds the page's style and script). */
#ifndef DT_HTML_IMPL_H
#define DT_HTML_IMPL_H

#include <stdio.h>

#include "diff.h"
#include "trace.h"

/* The page's CSS and JavaScript (html_assets.c): lines, NULL at the end. */
extern const char *const html_css[];
extern const char *const html_js[];

/* The data of a comparison of a and b, whose diff_traces result is r, as
 * one JSON object (its members, without the braces, so that a caller may
 * add its own): the runs, their loss curves, the configuration changes,
 * the first divergence and its origins, the timeline, and the heatmap's
 * grid with the records of its ops. 0, or -1 with dt_error set (an
 * unreadable checkpoint). */
int html_data_comparison(FILE *f, struct trace_file *a, struct trace_file *b,
                         const struct diff_result *r);

/* Loss values as a JSON array of at most HTML_MAX_POINTS, every k-th
 * (k written as "NAME_stride"): "NAME": [...], "NAME_stride": k. */
#define HTML_MAX_POINTS 4000
void html_data_series(FILE *f, const char *name, const double *v, size_t n);

/* A page: its JSON is gathered in memory, then written into the page
 * with every '<' as \u003c (in valid JSON '<' occurs only inside strings),
 * so that no text of a trace can end the script element that holds it. The
 * file is a temporary one beside path, made at open (an unwritable place
 * fails before any work) and renamed to path at close. */
struct html_page {
    char *path, *tmp;
    int fd;                   /* the temporary file, -1 when none */
    char *json;
    size_t len;
    FILE *f;                  /* open_memstream of json: write the data here */
};
/* 0, or -1 with dt_error set ("cannot write PATH: WHY"). */
int html_page_open(struct html_page *p, const char *path);
/* Write the page (title, the gathered JSON, style and script) and rename
 * it into place; frees p. 0, or -1 with dt_error set (the temporary file
 * removed). */
int html_page_close(struct html_page *p, const char *title);
/* Give up: remove the temporary file and free p. */
void html_page_abort(struct html_page *p);

#endif
