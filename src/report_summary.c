/* report_summary.c: the summaries under DIR/summary/ that `divtrace report`
 * makes from a study's traces and reuses (see report.h): a trial's loss
 * statistics, escapes and machine, its loss curve, and a run pair's
 * divergence and oracle replays. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "escape.h"
#include "explain.h"
#include "report.h"
#include "trace.h"
#include "util.h"

const char *const report_meta_keys[REPORT_NMETA] = {
    "backend", "reduce", "cudnn_algo", "threads", "cpu_kernel", "host",
    "host_cpu", "device", "cuda_driver", "cudnn", "openblas_config",
};

static const char *const report_trial_cols =
    "condition,group,trial,status,steps,final_loss,mean_last50,first_escape,phases,escapes,"
    "backend,reduce,cudnn_algo,threads,cpu_kernel,host,host_cpu,device,cuda_driver,cudnn,"
    "openblas_config";
#define REPORT_TRIAL_NCOLS (10 + REPORT_NMETA)

static const char *const report_pair_cols =
    "cond_a,cond_b,trial,status,diverged,first_step,first_op,origins,cross_1e-6,cross_1e-3,"
    "cross_1e-1,escape_a,escape_b,escape_diff,replay_a,exact_a,rounding_a,semantic_a,"
    "semantic_ops_a,replay_b,exact_b,rounding_b,semantic_b,semantic_ops_b,verdict,verdict_line";
#define REPORT_PAIR_NCOLS 26
/* the columns before explain's verdict joined them (summaries still read) */
#define REPORT_PAIR_NCOLS_OLD 24

static int report_curve_read(const char *dir, const struct sweep_spec *s,
                             const struct report_trial *tr, double **step, double **loss,
                             double **gn, size_t *n);

void report_path(char *out, size_t n, const char *dir, const char *kind, const char *cond, int t,
                 const char *ext)
{
    snprintf(out, n, "%s/%s/%s/t%02d%s", dir, kind, cond, t, ext);
}

int report_mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    char *slash = strrchr(buf, '/');
    if (!slash)
        return DT_OK;
    *slash = 0;
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) < 0 && errno != EEXIST) {
                dt_error_set("cannot create %s: %s", buf, strerror(errno));
                return DT_ERR;
            }
            if (!c)
                break;
            *p = c;
        }
    }
    return DT_OK;
}

void report_csv_field(FILE *f, const char *s)
{
    if (!s)
        s = "";
    if (strpbrk(s, ",\"\n\r") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
    }
    fputc('"', f);
}

static void report_csv_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.17g", v);
}

static void report_csv_i64(FILE *f, int64_t v)
{
    if (v >= 0)
        fprintf(f, "%" PRId64, v);
}

/* Split one CSV record in place; returns the field count (at most max). */
static int report_csv_split(char *line, char **fld, int max)
{
    int n = 0;
    char *p = line;
    line[strcspn(line, "\r\n")] = 0;
    for (;;) {
        if (n == max)
            return n + 1; /* too many */
        char *w = p;
        fld[n++] = w;
        if (*p == '"') {
            p++;
            for (;;) {
                if (*p == 0)
                    break;
                if (*p == '"' && p[1] == '"') {
                    *w++ = '"';
                    p += 2;
                } else if (*p == '"') {
                    p++;
                    break;
                } else {
                    *w++ = *p++;
                }
            }
            while (*p && *p != ',')
                p++;
        } else {
            while (*p && *p != ',')
                *w++ = *p++;
        }
        int end = *p == 0;
        *w = 0;
        if (end)
            return n;
        p++;
    }
}

static double report_parse_num(const char *s)
{
    return *s ? strtod(s, NULL) : NAN;
}

static int64_t report_parse_i64(const char *s)
{
    return *s ? strtoll(s, NULL, 10) : -1;
}

/* path opened for reading, or NULL with dt_error set. */
static FILE *report_ropen(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        dt_error_set("cannot read %s: %s", path, strerror(errno));
    return f;
}

/* Read a one-row summary (header + row) into fld; *buf holds the strings. */
static int report_csv_read1(const char *path, const char *cols, int ncols, char **fld, char **buf)
{
    FILE *f = report_ropen(path);
    if (!f)
        return DT_ERR;
    char *head = NULL;
    size_t cap = 0, cap2 = 0;
    *buf = NULL;
    int ok = getline(&head, &cap, f) > 0 && getline(buf, &cap2, f) > 0;
    fclose(f);
    if (ok) {
        head[strcspn(head, "\r\n")] = 0;
        ok = strcmp(head, cols) == 0 && report_csv_split(*buf, fld, ncols) == ncols;
    }
    free(head);
    if (!ok) {
        dt_error_set("%s is not a summary this version writes (rerun with --rebuild where the "
                     "traces are)", path);
        free(*buf);
        *buf = NULL;
        return DT_ERR;
    }
    return DT_OK;
}

/* 1 if a exists and is newer than b (b missing counts as older). */
static int report_newer(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) < 0)
        return 0;
    if (stat(b, &sb) < 0)
        return 1;
    if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec)
        return sa.st_mtim.tv_sec > sb.st_mtim.tv_sec;
    return sa.st_mtim.tv_nsec > sb.st_mtim.tv_nsec;
}

static int report_exists(const char *p)
{
    return access(p, F_OK) == 0;
}

/* Write via a temporary file and rename: a killed report leaves no half row. */
static FILE *report_wopen(const char *path, char *tmp, size_t n)
{
    if (report_mkdirs(path) < 0)
        return NULL;
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        dt_error_set("cannot write %s: %s", tmp, strerror(errno));
    return f;
}

static int report_wclose(FILE *f, const char *tmp, const char *path)
{
    int bad = ferror(f);
    if (fclose(f) != 0 || bad || rename(tmp, path) < 0) {
        dt_error_set("cannot write %s", path);
        unlink(tmp);
        return DT_ERR;
    }
    return DT_OK;
}

/* ---- trials ---- */

void report_trial_header(FILE *f)
{
    fprintf(f, "%s\n", report_trial_cols);
}

void report_trial_row(FILE *f, const struct sweep_spec *s, const struct report_trial *tr)
{
    const struct sweep_cond *c = &s->cond[tr->ci];
    report_csv_field(f, c->name);
    fputc(',', f);
    report_csv_field(f, c->group);
    fprintf(f, ",%d,%s,", tr->t, tr->status);
    if (tr->src != REPORT_SRC_NONE)
        fprintf(f, "%" PRIu64, tr->steps);
    fputc(',', f);
    report_csv_num(f, tr->final_loss);
    fputc(',', f);
    report_csv_num(f, tr->mean50);
    fputc(',', f);
    report_csv_i64(f, tr->first_escape);
    fputc(',', f);
    if (tr->src != REPORT_SRC_NONE)
        fprintf(f, "%d", tr->phases);
    fputc(',', f);
    report_csv_field(f, tr->escapes);
    for (int k = 0; k < REPORT_NMETA; k++) {
        fputc(',', f);
        report_csv_field(f, tr->meta[k]);
    }
    fputc('\n', f);
}

/* The phases and escapes of a loss curve (divtrace escape's defaults) into
 * tr: first_escape, escapes ("120 340"), phases. */
static int report_escapes(struct report_trial *tr, const double *step, const double *loss,
                          const double *gn, size_t n)
{
    struct escape_params p;
    escape_params_defaults(&p);
    struct escape_result er;
    if (escape_analyze(loss, gn, n, &p, &er) < 0)
        return DT_ERR;
    tr->phases = er.phases;
    tr->first_escape = -1;
    size_t cap = 1 + 24 * er.nplateaus;
    free(tr->escapes);
    tr->escapes = dt_calloc(cap, 1);
    for (size_t i = 0; i < er.nplateaus; i++)
        if (er.plateaus[i].escaped) {
            uint64_t st = (uint64_t)step[er.plateaus[i].escape];
            if (tr->first_escape < 0)
                tr->first_escape = (int64_t)st;
            size_t len = strlen(tr->escapes);
            snprintf(tr->escapes + len, cap - len, "%s%" PRIu64, len ? " " : "", st);
        }
    escape_result_free(&er);
    return DT_OK;
}

static int report_trial_from_trace(const char *dir, const struct sweep_spec *s,
                                   const char *trace, struct report_trial *tr)
{
    const struct sweep_cond *c = &s->cond[tr->ci];
    struct trace_file *tf;
    if (trace_open(&tf, trace) < 0)
        return DT_ERR;
    size_t n = (size_t)tf->nsteps;
    double *loss = dt_malloc((n + 1) * sizeof *loss), *gn = dt_malloc((n + 1) * sizeof *gn);
    for (size_t i = 0; i < n; i++) {
        loss[i] = tf->steps[i].loss;
        gn[i] = tf->steps[i].grad_norm;
    }
    tr->src = REPORT_SRC_TRACE;
    snprintf(tr->status, sizeof tr->status, "%s",
             !tf->complete ? "incomplete" : tf->end_status ? "stopped" : "complete");
    tr->steps = n;
    tr->final_loss = n ? loss[n - 1] : NAN;
    size_t m = n < 50 ? n : 50;
    double sum = 0;
    for (size_t i = n - m; i < n; i++)
        sum += loss[i];
    tr->mean50 = m ? sum / (double)m : NAN;
    int rc = DT_ERR;
    double *stepno = dt_malloc((n + 1) * sizeof *stepno);
    for (size_t i = 0; i < n; i++)
        stepno[i] = (double)tf->steps[i].step;
    int erc = report_escapes(tr, stepno, loss, gn, n);
    free(stepno);
    if (erc < 0) {
        dt_error_set("%s: out of memory analyzing the loss curve", trace);
        goto out;
    }
    for (int k = 0; k < REPORT_NMETA; k++) {
        const char *v = trace_config_get(&tf->cfg, report_meta_keys[k]);
        tr->meta[k] = dt_strdup(v ? v : "");
    }
    /* the curve, then the row: a row present means its curve is too */
    char path[4096], tmp[4200];
    report_path(path, sizeof path, dir, "summary/curves", c->name, tr->t, ".csv");
    FILE *f = report_wopen(path, tmp, sizeof tmp);
    if (!f)
        goto out;
    fputs("step,loss,grad_norm\n", f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%" PRIu64 ",", tf->steps[i].step);
        report_csv_num(f, loss[i]);
        fputc(',', f);
        report_csv_num(f, gn[i]);
        fputc('\n', f);
    }
    if (report_wclose(f, tmp, path) < 0)
        goto out;
    report_path(path, sizeof path, dir, "summary/trials", c->name, tr->t, ".csv");
    if (!(f = report_wopen(path, tmp, sizeof tmp)))
        goto out;
    report_trial_header(f);
    report_trial_row(f, s, tr);
    rc = report_wclose(f, tmp, path);
out:
    free(loss);
    free(gn);
    trace_close(tf);
    return rc;
}

static int report_trial_from_summary(const char *path, struct report_trial *tr)
{
    char *fld[REPORT_TRIAL_NCOLS + 1], *buf;
    if (report_csv_read1(path, report_trial_cols, REPORT_TRIAL_NCOLS, fld, &buf) < 0)
        return DT_ERR;
    tr->src = REPORT_SRC_SUMMARY;
    snprintf(tr->status, sizeof tr->status, "%s", fld[3]);
    tr->steps = strtoull(fld[4], NULL, 10);
    tr->final_loss = report_parse_num(fld[5]);
    tr->mean50 = report_parse_num(fld[6]);
    tr->first_escape = report_parse_i64(fld[7]);
    tr->phases = atoi(fld[8]);
    tr->escapes = dt_strdup(fld[9]);
    for (int k = 0; k < REPORT_NMETA; k++)
        tr->meta[k] = dt_strdup(fld[10 + k]);
    free(buf);
    return DT_OK;
}

int report_trial_load(const char *dir, const struct sweep_spec *s, int ci, int t, int rebuild,
                      struct report_trial *tr)
{
    memset(tr, 0, sizeof *tr);
    tr->ci = ci;
    tr->t = t;
    tr->final_loss = tr->mean50 = NAN;
    tr->first_escape = -1;
    const char *cond = s->cond[ci].name;
    char trace[4096], sum[4096];
    report_path(trace, sizeof trace, dir, "runs", cond, t, ".dtr");
    report_path(sum, sizeof sum, dir, "summary/trials", cond, t, ".csv");
    int have_trace = report_exists(trace), have_sum = report_exists(sum);
    if (have_sum && (!have_trace || (!rebuild && !report_newer(trace, sum)))) {
        if (report_trial_from_summary(sum, tr) < 0)
            return DT_ERR;
        /* the escapes as today's detector finds them in the stored curve, so
         * that a summary made before a change of the detector agrees with it */
        double *st, *loss, *gn;
        size_t n;
        if (report_curve_read(dir, s, tr, &st, &loss, &gn, &n) == 0) {
            int erc = n ? report_escapes(tr, st, loss, gn, n) : 0;
            free(st);
            free(loss);
            free(gn);
            if (erc < 0) {
                dt_error_set("%s: out of memory analyzing the loss curve", sum);
                return DT_ERR;
            }
        }
        return DT_OK;
    }
    if (have_trace)
        return report_trial_from_trace(dir, s, trace, tr);
    report_path(trace, sizeof trace, dir, "runs", cond, t, ".dtr.part");
    snprintf(tr->status, sizeof tr->status, "%s", report_exists(trace) ? "running" : "missing");
    tr->escapes = dt_strdup("");
    for (int k = 0; k < REPORT_NMETA; k++)
        tr->meta[k] = dt_strdup("");
    return DT_OK;
}

void report_trial_free(struct report_trial *tr)
{
    free(tr->escapes);
    for (int k = 0; k < REPORT_NMETA; k++)
        free(tr->meta[k]);
    memset(tr, 0, sizeof *tr);
}

int report_curve_load(const char *dir, const struct sweep_spec *s, const struct report_trial *tr,
                      double **step, double **loss, size_t *n)
{
    double *gn = NULL;
    int rc = report_curve_read(dir, s, tr, step, loss, &gn, n);
    free(gn);
    return rc;
}

static int report_curve_read(const char *dir, const struct sweep_spec *s,
                             const struct report_trial *tr, double **step, double **loss,
                             double **gn, size_t *n)
{
    char path[4096];
    report_path(path, sizeof path, dir, "summary/curves", s->cond[tr->ci].name, tr->t, ".csv");
    *step = *loss = *gn = NULL;
    *n = 0;
    FILE *f = report_ropen(path);
    if (!f)
        return DT_ERR;
    char *line = NULL;
    size_t cap = 0, ncap = 0;
    int first = 1;
    while (getline(&line, &cap, f) > 0) {
        if (first) {
            first = 0;
            continue;
        }
        char *fld[4];
        if (report_csv_split(line, fld, 3) != 3)
            continue;
        if (*n == ncap) {
            ncap = ncap ? 2 * ncap : 1024;
            *step = dt_realloc(*step, ncap * sizeof **step);
            *loss = dt_realloc(*loss, ncap * sizeof **loss);
            *gn = dt_realloc(*gn, ncap * sizeof **gn);
        }
        (*step)[*n] = strtod(fld[0], NULL);
        (*loss)[*n] = report_parse_num(fld[1]);
        (*gn)[*n] = report_parse_num(fld[2]);
        (*n)++;
    }
    free(line);
    fclose(f);
    return DT_OK;
}

/* ---- pairs ---- */

void report_pair_header(FILE *f)
{
    fprintf(f, "%s\n", report_pair_cols);
}

void report_pair_row(FILE *f, const struct sweep_spec *s, const struct report_pair *p)
{
    report_csv_field(f, s->cond[p->ca].name);
    fputc(',', f);
    report_csv_field(f, s->cond[p->cb].name);
    fprintf(f, ",%d,%s,", p->t, p->status);
    int known = p->src != REPORT_SRC_NONE;
    if (known)
        fprintf(f, "%d", p->diverged);
    fputc(',', f);
    if (known && p->diverged)
        fprintf(f, "%" PRIu64, p->first_step);
    fputc(',', f);
    report_csv_field(f, p->first_op);
    fputc(',', f);
    report_csv_field(f, p->origins);
    for (int k = 0; k < DIFF_NTHRESH; k++) {
        fputc(',', f);
        report_csv_i64(f, p->cross[k]);
    }
    fputc(',', f);
    report_csv_i64(f, p->escape[0]);
    fputc(',', f);
    report_csv_i64(f, p->escape[1]);
    fputc(',', f);
    if (p->escape[0] >= 0 && p->escape[1] >= 0)
        fprintf(f, "%" PRId64, p->escape[1] - p->escape[0]);
    for (int k = 0; k < 2; k++) {
        fputc(',', f);
        report_replay_row(f, &p->replay[k]);
    }
    fputc(',', f);
    report_csv_field(f, p->verdict);
    fputc(',', f);
    report_csv_field(f, p->verdict_line ? p->verdict_line : "");
    fputc('\n', f);
}

/* explain's verdict on the pair (both traces open), into p */
static void report_explain(struct trace_file *a, struct trace_file *b, struct report_pair *p)
{
    struct explain_options opt = {.self = "/proc/self/exe"};
    struct explain_result res;
    if (explain_run(a, b, &opt, &res) < 0) {
        snprintf(p->verdict, sizeof p->verdict, "failed");
        p->verdict_line = dt_strdup(dt_error());
        return;
    }
    snprintf(p->verdict, sizeof p->verdict, "%s", explain_verdict_name(res.verdict));
    p->verdict_line = dt_strdup(res.line);
    explain_result_free(&res);
}

void report_replay_row(FILE *f, const struct report_replay *r)
{
    report_csv_field(f, r->status);
    if (strcmp(r->status, "ok") == 0)
        fprintf(f, ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",", r->exact, r->rounding, r->semantic);
    else
        fputs(",,,,", f);
    report_csv_field(f, r->semantic_ops);
}

/* The value of "key": N after position p in a JSON text, or 0. */
static uint64_t report_json_u64(const char *js, const char *key)
{
    const char *q = strstr(js, key);
    return q ? strtoull(q + strlen(key), NULL, 10) : 0;
}

/* Replay run `trace` at `step` against the exact oracle in a child
 * `divtrace replay --json` (the replay may re-execute the program to load
 * OpenBLAS with the trace's kernel, which must not restart the report). */
static void report_replay(const char *trace, uint64_t step, struct report_replay *r)
{
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%" PRIu64, step);
    FILE *out = tmpfile(), *err = tmpfile();
    if (!out || !err) {
        snprintf(r->status, sizeof r->status, "failed: no temporary file");
        goto done;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fileno(out), 1);
        dup2(fileno(err), 2);
        char *args[] = {"divtrace", "replay", "--against", "mpfr", "--step", stepbuf,
                        "--steps", "1", "--json", (char *)trace, NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) {
        snprintf(r->status, sizeof r->status, "failed: cannot start a replay");
        goto done;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) > 1) {
        char line[512] = "", last[512] = "";
        rewind(err);
        while (fgets(line, sizeof line, err))
            if (line[strspn(line, " \t\n")])
                snprintf(last, sizeof last, "%s", line);
        last[strcspn(last, "\n")] = 0;
        const char *why = strncmp(last, "divtrace replay: ", 17) == 0 ? last + 17 : last;
        if (!WIFEXITED(st))
            snprintf(r->status, sizeof r->status, "failed: killed by signal %d", WTERMSIG(st));
        else
            snprintf(r->status, sizeof r->status, "failed: %.140s", *why ? why : "no reason given");
        goto done;
    }
    fseek(out, 0, SEEK_END);
    long len = ftell(out);
    rewind(out);
    char *js = dt_malloc((size_t)len + 1);
    js[fread(js, 1, (size_t)len, out)] = 0;
    r->exact = report_json_u64(js, "\"exact\": ");
    r->rounding = report_json_u64(js, "\"rounding\": ");
    r->semantic = report_json_u64(js, "\"semantic\": ");
    size_t cap = 1, used = 0;
    r->semantic_ops = dt_calloc(1, 1);
    /* each op object: {"step": S, "op": I, "name": "N", "class": "C", ... */
    for (const char *q = strstr(js, "\"name\": \""); q; q = strstr(q + 1, "\"name\": \"")) {
        const char *nm = q + 9, *e = strchr(nm, '"');
        if (!e || strncmp(e, "\", \"class\": \"SEMANTIC\"", 22) != 0)
            continue;
        size_t k = (size_t)(e - nm);
        cap += k + 1;
        r->semantic_ops = dt_realloc(r->semantic_ops, cap);
        if (used)
            r->semantic_ops[used++] = ' ';
        memcpy(r->semantic_ops + used, nm, k);
        used += k;
        r->semantic_ops[used] = 0;
    }
    free(js);
    snprintf(r->status, sizeof r->status, "ok");
done:
    if (out)
        fclose(out);
    if (err)
        fclose(err);
    if (!r->semantic_ops)
        r->semantic_ops = dt_strdup("");
}

static int report_has_ckpt(const struct trace_file *tf, uint64_t step)
{
    for (uint32_t i = 0; i < tf->nckpt; i++)
        if (tf->ckpt[i].step <= step)
            return 1;
    return 0;
}

static char *report_join_ops(const struct trace_file *tf, const int *ops, int n)
{
    size_t cap = 1;
    for (int i = 0; i < n; i++)
        cap += strlen(tf->ops[ops[i]].name) + 1;
    char *s = dt_calloc(cap, 1);
    for (int i = 0; i < n; i++) {
        if (i)
            strcat(s, " ");
        strcat(s, tf->ops[ops[i]].name);
    }
    return s;
}

static int report_pair_compute(const char *dir, const struct sweep_spec *s, const char *ta,
                               const char *tb, int no_replay, int no_explain,
                               struct report_pair *p)
{
    struct trace_file *a = NULL, *b = NULL;
    if (trace_open(&a, ta) < 0)
        return DT_ERR;
    if (trace_open(&b, tb) < 0) {
        trace_close(a);
        return DT_ERR;
    }
    struct diff_result r;
    int rc = DT_ERR;
    if (diff_traces(a, b, &r) < 0) {
        trace_close(a);
        trace_close(b);
        return DT_ERR;
    }
    p->src = REPORT_SRC_TRACE;
    snprintf(p->status, sizeof p->status, "compared");
    p->diverged = r.diverged;
    p->first_step = r.first_step;
    p->first_op = dt_strdup(r.diverged && r.first_op >= 0 ? a->ops[r.first_op].name : "");
    p->origins = r.diverged ? report_join_ops(a, r.origins, r.norigins) : dt_strdup("");
    for (int k = 0; k < DIFF_NTHRESH; k++)
        p->cross[k] = r.cross_ckpt[k] >= 0 ? r.cross_ckpt[k] : r.cross_sketch[k];
    p->npoints = r.npoints;
    p->points = dt_malloc(((size_t)r.npoints + 1) * sizeof *p->points);
    memcpy(p->points, r.points, (size_t)r.npoints * sizeof *p->points);
    struct trace_file *run[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        struct report_replay *rp = &p->replay[k];
        if (no_replay)
            snprintf(rp->status, sizeof rp->status, "skipped");
        else if (!r.diverged)
            snprintf(rp->status, sizeof rp->status, "identical");
        else if (!report_has_ckpt(run[k], r.first_step))
            snprintf(rp->status, sizeof rp->status, "no checkpoint");
        else
            report_replay(run[k]->path, r.first_step, rp);
        if (!rp->semantic_ops)
            rp->semantic_ops = dt_strdup("");
    }
    if (no_explain) {
        snprintf(p->verdict, sizeof p->verdict, "skipped");
        p->verdict_line = dt_strdup("");
    } else {
        report_explain(a, b, p);
    }
    diff_result_free(&r);
    trace_close(a);
    trace_close(b);
    /* the cache: the distance timeline, then the row */
    char path[4096], tmp[4200], sub[512];
    snprintf(sub, sizeof sub, "%s--%s", s->cond[p->ca].name, s->cond[p->cb].name);
    report_path(path, sizeof path, dir, "summary/pairs", sub, p->t, ".dist.csv");
    FILE *f = report_wopen(path, tmp, sizeof tmp);
    if (!f)
        return DT_ERR;
    fputs("step,distance\n", f);
    for (int i = 0; i < p->npoints; i++) {
        fprintf(f, "%" PRIu64 ",", p->points[i].step);
        report_csv_num(f, p->points[i].dist);
        fputc('\n', f);
    }
    if (report_wclose(f, tmp, path) < 0)
        return DT_ERR;
    report_path(path, sizeof path, dir, "summary/pairs", sub, p->t, ".csv");
    if (!(f = report_wopen(path, tmp, sizeof tmp)))
        return DT_ERR;
    report_pair_header(f);
    report_pair_row(f, s, p);
    rc = report_wclose(f, tmp, path);
    return rc;
}

static int report_pair_from_summary(const char *path, const char *dist, struct report_pair *p)
{
    char *fld[REPORT_PAIR_NCOLS + 1], *buf;
    int old = 0;
    if (report_csv_read1(path, report_pair_cols, REPORT_PAIR_NCOLS, fld, &buf) < 0) {
        /* a summary from before the verdict columns: the same row without them */
        char cols[1024];
        snprintf(cols, sizeof cols, "%s", report_pair_cols);
        *strstr(cols, ",verdict,verdict_line") = 0;
        if (report_csv_read1(path, cols, REPORT_PAIR_NCOLS_OLD, fld, &buf) < 0)
            return DT_ERR;
        old = 1;
    }
    snprintf(p->verdict, sizeof p->verdict, "%s", old ? "not run" : fld[24]);
    p->verdict_line = dt_strdup(old ? "" : fld[25]);
    p->src = REPORT_SRC_SUMMARY;
    snprintf(p->status, sizeof p->status, "%s", fld[3]);
    p->diverged = atoi(fld[4]);
    p->first_step = strtoull(fld[5], NULL, 10);
    p->first_op = dt_strdup(fld[6]);
    p->origins = dt_strdup(fld[7]);
    for (int k = 0; k < DIFF_NTHRESH; k++)
        p->cross[k] = report_parse_i64(fld[8 + k]);
    for (int k = 0; k < 2; k++) {
        char **g = fld + 14 + 5 * k;
        struct report_replay *r = &p->replay[k];
        snprintf(r->status, sizeof r->status, "%s", g[0]);
        r->exact = strtoull(g[1], NULL, 10);
        r->rounding = strtoull(g[2], NULL, 10);
        r->semantic = strtoull(g[3], NULL, 10);
        r->semantic_ops = dt_strdup(g[4]);
    }
    free(buf);
    FILE *f = fopen(dist, "r");
    if (!f)
        return DT_OK; /* the timeline only feeds a plot */
    char *line = NULL;
    size_t cap = 0;
    int ncap = 0, first = 1;
    while (getline(&line, &cap, f) > 0) {
        char *d[3];
        if (first || report_csv_split(line, d, 2) != 2) {
            first = 0;
            continue;
        }
        if (p->npoints == ncap) {
            ncap = ncap ? 2 * ncap : 256;
            p->points = dt_realloc(p->points, (size_t)ncap * sizeof *p->points);
        }
        p->points[p->npoints].step = strtoull(d[0], NULL, 10);
        p->points[p->npoints++].dist = report_parse_num(d[1]);
    }
    free(line);
    fclose(f);
    return DT_OK;
}

int report_pair_load(const char *dir, const struct sweep_spec *s, int ca, int cb, int t,
                     int rebuild, int no_replay, int no_explain, struct report_pair *p)
{
    memset(p, 0, sizeof *p);
    p->ca = ca;
    p->cb = cb;
    p->t = t;
    p->escape[0] = p->escape[1] = -1;
    for (int k = 0; k < DIFF_NTHRESH; k++)
        p->cross[k] = -1;
    char ta[4096], tb[4096], sum[4096], dist[4096], sub[512];
    report_path(ta, sizeof ta, dir, "runs", s->cond[ca].name, t, ".dtr");
    report_path(tb, sizeof tb, dir, "runs", s->cond[cb].name, t, ".dtr");
    snprintf(sub, sizeof sub, "%s--%s", s->cond[ca].name, s->cond[cb].name);
    report_path(sum, sizeof sum, dir, "summary/pairs", sub, t, ".csv");
    report_path(dist, sizeof dist, dir, "summary/pairs", sub, t, ".dist.csv");
    int have_a = report_exists(ta), have_b = report_exists(tb), have_sum = report_exists(sum);
    if (have_sum && (!have_a || !have_b ||
                     (!rebuild && !report_newer(ta, sum) && !report_newer(tb, sum)))) {
        if (report_pair_from_summary(sum, dist, p) < 0)
            return DT_ERR;
        /* replays or a verdict asked for now and skipped then: compute them */
        int skipped = (strcmp(p->replay[0].status, "skipped") == 0 && !no_replay) ||
                      ((strcmp(p->verdict, "skipped") == 0 || strcmp(p->verdict, "not run") == 0) &&
                       !no_explain);
        if (!(skipped && have_a && have_b))
            return DT_OK;
        report_pair_free(p);
        p->ca = ca;
        p->cb = cb;
        p->t = t;
        p->escape[0] = p->escape[1] = -1;
    }
    if (have_a && have_b)
        return report_pair_compute(dir, s, ta, tb, no_replay, no_explain, p);
    snprintf(p->status, sizeof p->status, "missing");
    snprintf(p->verdict, sizeof p->verdict, "missing");
    p->verdict_line = dt_strdup("");
    p->first_op = dt_strdup("");
    p->origins = dt_strdup("");
    for (int k = 0; k < 2; k++) {
        snprintf(p->replay[k].status, sizeof p->replay[k].status, "missing");
        p->replay[k].semantic_ops = dt_strdup("");
    }
    return DT_OK;
}

void report_pair_free(struct report_pair *p)
{
    free(p->first_op);
    free(p->origins);
    free(p->verdict_line);
    free(p->points);
    for (int k = 0; k < 2; k++)
        free(p->replay[k].semantic_ops);
    memset(p, 0, sizeof *p);
}
