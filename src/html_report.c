/* html_report.c: `divtrace report --html`: the page of a study, from the
 * summaries the report has just made (report.h) and, for each run pair
 * whose two traces are still there, the comparison diff --html draws. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "html.h"
#include "html_impl.h"
#include "json.h"
#include "report.h"
#include "util.h"

static void html_i64(FILE *f, int64_t v)
{
    if (v >= 0)
        fprintf(f, "%" PRId64, v);
    else
        fputs("null", f);
}

static int html_report_trial(FILE *f, const char *dir, const struct sweep_spec *s, int ci, int t)
{
    struct report_trial tr;
    if (report_trial_load(dir, s, ci, t, 0, &tr) < 0)
        return DT_ERR;
    fprintf(f, "{\"t\": %d, \"status\": ", t);
    json_put_str(f, tr.status);
    fprintf(f, ", \"steps\": %" PRIu64 ", \"final_loss\": ", tr.steps);
    json_put_num(f, tr.final_loss);
    fputs(", \"mean_last50\": ", f);
    json_put_num(f, tr.mean50);
    fputs(", \"first_escape\": ", f);
    html_i64(f, tr.first_escape);
    fprintf(f, ", \"phases\": %d, ", tr.phases);
    double *step = NULL, *loss = NULL;
    size_t n = 0;
    /* a trial without a summary has no curve: an empty one */
    if (tr.src == REPORT_SRC_NONE || report_curve_load(dir, s, &tr, &step, &loss, &n) < 0)
        n = 0;
    html_data_series(f, "loss", loss, n);
    fputc('}', f);
    free(step);
    free(loss);
    report_trial_free(&tr);
    return DT_OK;
}

static void html_report_summary(FILE *f, const struct report_pair *p)
{
    fprintf(f, "{\"status\": ");
    json_put_str(f, p->status);
    fprintf(f, ", \"diverged\": %s, \"first_step\": ", p->diverged ? "true" : "false");
    if (p->src != REPORT_SRC_NONE && p->diverged)
        fprintf(f, "%" PRIu64, p->first_step);
    else
        fputs("null", f);
    fputs(", \"first_op\": ", f);
    json_put_str(f, p->first_op);
    fputs(", \"origins\": ", f);
    json_put_str(f, p->origins);
    fputs(", \"crossings\": [", f);
    for (int k = 0; k < DIFF_NTHRESH; k++) {
        fprintf(f, "%s[%g, ", k ? ", " : "", diff_thresholds[k]);
        html_i64(f, p->cross[k]);
        fputc(']', f);
    }
    fputs("], \"escapes\": [", f);
    html_i64(f, p->escape[0]);
    fputs(", ", f);
    html_i64(f, p->escape[1]);
    fputs("], \"replays\": [", f);
    for (int k = 0; k < 2; k++) {
        const struct report_replay *r = &p->replay[k];
        fputs(k ? ", {\"status\": " : "{\"status\": ", f);
        json_put_str(f, r->status);
        fprintf(f, ", \"exact\": %" PRIu64 ", \"rounding\": %" PRIu64 ", \"semantic\": %" PRIu64
                ", \"semantic_ops\": ", r->exact, r->rounding, r->semantic);
        json_put_str(f, r->semantic_ops ? r->semantic_ops : "");
        fputc('}', f);
    }
    /* explain's verdict on the pair, when the report ran it */
    fputs("], \"verdict\": ", f);
    json_put_str(f, p->verdict);
    fputs(", \"verdict_line\": ", f);
    json_put_str(f, p->verdict_line ? p->verdict_line : "");
    fputs(", \"timeline\": [", f);
    for (int k = 0; k < p->npoints; k++) {
        fprintf(f, "%s[%" PRIu64 ", ", k ? ", " : "", p->points[k].step);
        json_put_num(f, p->points[k].dist);
        fputc(']', f);
    }
    fputs("]}", f);
}

/* Trial t of conditions ca and cb: the summary, and the comparison of the
 * traces when both are there. */
static int html_report_pair(FILE *f, const char *dir, const struct sweep_spec *s, int ca, int cb, int t)
{
    struct report_pair p;
    /* after the report: the summary is current, nothing is recomputed */
    if (report_pair_load(dir, s, ca, cb, t, 0, 1, 1, &p) < 0)
        return DT_ERR;
    char label[600];
    snprintf(label, sizeof label, "%s vs %s, trial %d", s->cond[ca].name, s->cond[cb].name, t);
    fputs("{\"label\": ", f);
    json_put_str(f, label);
    fprintf(f, ", \"cond_a\": %d, \"cond_b\": %d, \"t\": %d,\n \"summary\": ", ca, cb, t);
    html_report_summary(f, &p);
    report_pair_free(&p);
    char ta[4096], tb[4096];
    report_path(ta, sizeof ta, dir, "runs", s->cond[ca].name, t, ".dtr");
    report_path(tb, sizeof tb, dir, "runs", s->cond[cb].name, t, ".dtr");
    if (access(ta, R_OK) != 0 || access(tb, R_OK) != 0) {
        fputs(", \"traces\": false}", f);
        return DT_OK;
    }
    struct trace_file *a = NULL, *b = NULL;
    struct diff_result r;
    int rc = DT_ERR;
    if (trace_open(&a, ta) < 0 || trace_open(&b, tb) < 0)
        goto out;
    if (diff_traces(a, b, &r) < 0) {
        diff_result_free(&r);
        goto out;
    }
    fputs(", \"traces\": true,\n ", f);
    rc = html_data_comparison(f, a, b, &r);
    fputc('}', f);
    diff_result_free(&r);
out:
    if (a)
        trace_close(a);
    if (b)
        trace_close(b);
    return rc;
}

int html_write_report(const char *path, const char *dir, int quiet)
{
    struct sweep_spec s;
    char spec[4096];
    snprintf(spec, sizeof spec, "%s/sweep.spec", dir);
    if (sweep_spec_load(&s, spec) < 0)
        return DT_ERR;
    struct html_page p;
    if (html_page_open(&p, path) < 0) {
        sweep_spec_free(&s);
        return DT_ERR;
    }
    FILE *f = p.f;
    int rc = DT_ERR;
    fputs("{\"kind\": \"report\", \"version\": 1, \"study\": ", f);
    json_put_str(f, s.name ? s.name : "");
    fputs(", \"dir\": ", f);
    json_put_str(f, dir);
    fputs(",\n \"conditions\": [", f);
    for (int ci = 0; ci < s.ncond; ci++) {
        fputs(ci ? ",\n  {\"name\": " : "\n  {\"name\": ", f);
        json_put_str(f, s.cond[ci].name);
        fputs(", \"group\": ", f);
        json_put_str(f, s.cond[ci].group);
        fputs(", \"trials\": [", f);
        for (int t = 1; t <= s.cond[ci].trials; t++) {
            fputs(t > 1 ? ",\n   " : "\n   ", f);
            if (html_report_trial(f, dir, &s, ci, t) < 0)
                goto out;
        }
        fputs("]}", f);
    }
    fputs("],\n \"pairs\": [", f);
    int npairs = 0;
    /* each pair of conditions once, in the order of the pair lines */
    int (*seen)[2] = NULL;
    int nseen = 0;
    for (int i = 0; i < s.npair; i++) {
        int (*pc)[2] = NULL;
        int n = sweep_pair_conditions(&s, &s.pair[i], &pc);
        for (int j = 0; j < n; j++) {
            int dup = 0;
            for (int k = 0; k < nseen && !dup; k++)
                dup = seen[k][0] == pc[j][0] && seen[k][1] == pc[j][1];
            if (dup)
                continue;
            seen = dt_realloc(seen, (size_t)(nseen + 1) * sizeof *seen);
            seen[nseen][0] = pc[j][0];
            seen[nseen++][1] = pc[j][1];
            int ca = pc[j][0], cb = pc[j][1];
            int nt = s.cond[ca].trials < s.cond[cb].trials ? s.cond[ca].trials : s.cond[cb].trials;
            for (int t = 1; t <= nt; t++) {
                fputs(npairs++ ? ",\n " : "\n ", f);
                if (html_report_pair(f, dir, &s, ca, cb, t) < 0) {
                    free(pc);
                    free(seen);
                    goto out;
                }
            }
        }
        free(pc);
    }
    free(seen);
    fputs("]}\n", f);
    char title[600];
    snprintf(title, sizeof title, "divtrace report %s", s.name ? s.name : dir);
    rc = html_page_close(&p, title);
    if (rc == DT_OK && !quiet)
        printf("wrote %s\n", path);
out:
    if (rc < 0 && p.path)
        html_page_abort(&p);
    sweep_spec_free(&s);
    return rc;
}
