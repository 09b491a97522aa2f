/* cmd_diff_ref.c: `divtrace diff --reference REF A [B]`: each run's
 * distance from a reference trajectory (e.g. an mpfr run) at the shared
 * checkpoints, as text or JSON, and which run stays closer to exact
 * arithmetic for longer. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "cli.h"
#include "cmd_diff.h"
#include "diff.h"
#include "trace.h"
#include "util.h"

static void diff_ref_text(const struct trace_file *ref, struct trace_file **runs, int n,
                          const struct diff_refresult *r)
{
    char buf[512];
    const char *prec = trace_config_get(&ref->cfg, "precision");
    printf("reference: %s (backend %s%s%s; %s)\n", ref->path,
           trace_config_get(&ref->cfg, "backend") ? trace_config_get(&ref->cfg, "backend") : "?",
           prec ? ", precision " : "", prec ? prec : "", cmd_diff_status(ref, buf, sizeof buf));
    for (int k = 0; k < n; k++)
        printf("%c: %s (%s)\n", 'A' + k, runs[k]->path, cmd_diff_status(runs[k], buf, sizeof buf));
    printf("distance from the reference (relative L2 distance of all parameters, at checkpoints):\n");
    printf("  %8s", "step");
    for (int k = 0; k < n; k++)
        printf("  %12c", 'A' + k);
    putchar('\n');
    int stride = r->npoints > 24 ? (r->npoints + 23) / 24 : 1;
    for (int p = 0; p < r->npoints; p++) {
        if (p % stride && p != r->npoints - 1)
            continue;
        printf("  %8" PRIu64, r->points[p].step);
        for (int k = 0; k < n; k++)
            printf("  %12.3g", r->points[p].dist[k]);
        putchar('\n');
    }
    for (int t = 0; t < DIFF_NTHRESH; t++) {
        printf("  exceeds %g:", diff_thresholds[t]);
        for (int k = 0; k < n; k++) {
            printf(" %c ", 'A' + k);
            if (r->cross[k][t] >= 0)
                printf("at step %" PRId64, r->cross[k][t]);
            else
                printf("never");
            printf("%s", k + 1 < n ? ";" : "");
        }
        putchar('\n');
    }
    if (n == 2) {
        /* closer for longer: the later first crossing of the smallest
         * threshold that separates them, else the smaller final distance */
        int winner = -1;
        for (int t = 0; t < DIFF_NTHRESH && winner < 0; t++) {
            int64_t a = r->cross[0][t], b = r->cross[1][t];
            if (a == b)
                continue;
            if (a < 0 || (b >= 0 && a > b))
                winner = 0;
            else
                winner = 1;
        }
        /* else the end distance, when the two differ by more than 5% */
        const struct diff_refpoint *last = &r->points[r->npoints - 1];
        double a = last->dist[0], b = last->dist[1];
        if (winner < 0 && !isnan(a) && !isnan(b) && fabs(a - b) > 0.05 * fmax(a, b))
            winner = a < b ? 0 : 1;
        if (winner < 0)
            printf("neither run stays closer to the reference than the other (at step %" PRIu64
                   ": A %.3g, B %.3g)\n", last->step, a, b);
        else
            printf("closer to exact arithmetic for longer: %c (%s)\n", 'A' + winner, runs[winner]->path);
    }
}

static void diff_ref_json(const struct trace_file *ref, struct trace_file **runs, int n,
                          const struct diff_refresult *r)
{
    printf("{\"reference\": ");
    json_put_str(stdout, ref->path);
    printf(", \"runs\": [");
    for (int k = 0; k < n; k++) {
        printf("%s", k ? ", " : "");
        json_put_str(stdout, runs[k]->path);
    }
    printf("],\n \"points\": [");
    for (int p = 0; p < r->npoints; p++) {
        printf("%s{\"step\": %" PRIu64 ", \"distance\": [", p ? ", " : "", r->points[p].step);
        for (int k = 0; k < n; k++) {
            printf("%s", k ? ", " : "");
            json_put_num(stdout, r->points[p].dist[k]);
        }
        printf("]}");
    }
    printf("],\n \"crossings\": [");
    for (int t = 0; t < DIFF_NTHRESH; t++) {
        printf("%s{\"threshold\": %g, \"steps\": [", t ? ", " : "", diff_thresholds[t]);
        for (int k = 0; k < n; k++) {
            printf("%s", k ? ", " : "");
            if (r->cross[k][t] >= 0)
                printf("%" PRId64, r->cross[k][t]);
            else
                fputs("null", stdout);
        }
        printf("]}");
    }
    printf("]}\n");
}

int cmd_diff_reference(const char *refpath, char **paths, int n, int json, int quiet)
{
    if (n < 1 || n > 2) {
        cli_error("diff", "--reference takes one or two runs to compare with it");
        return CLI_EXIT_TROUBLE;
    }
    struct trace_file *ref = NULL, *runs[2] = {NULL, NULL};
    int rc = CLI_EXIT_TROUBLE;
    if (trace_open(&ref, refpath) < 0 || cmd_diff_has_steps(ref) < 0)
        goto fail;
    for (int k = 0; k < n; k++)
        if (trace_open(&runs[k], paths[k]) < 0 || cmd_diff_has_steps(runs[k]) < 0)
            goto fail;
    struct diff_refresult r;
    if (diff_reference(ref, runs, n, &r) < 0) {
        diff_refresult_free(&r);
        goto fail;
    }
    if (!quiet && json)
        diff_ref_json(ref, runs, n, &r);
    else if (!quiet)
        diff_ref_text(ref, runs, n, &r);
    rc = 0;
    for (int k = 0; k < n; k++)
        if (!r.identical[k])
            rc = 1;
    diff_refresult_free(&r);
    goto out;
fail:
    cli_error("diff", "%s", dt_error());
out:
    if (ref)
        trace_close(ref);
    for (int k = 0; k < 2; k++)
        if (runs[k])
            trace_close(runs[k]);
    return rc;
}
