/* html.c: writing the HTML page (html.h): the page's frame around its JSON
 * data, through a temporary file renamed into place, and `divtrace diff
 * --html` with explain's verdict, run here or read from a saved
 * `divtrace explain --json`. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "explain.h"
#include "html.h"
#include "html_impl.h"
#include "json.h"
#include "util.h"

/* ---- the page ---- */

int html_page_open(struct html_page *p, const char *path)
{
    memset(p, 0, sizeof *p);
    p->fd = -1;
    p->path = dt_strdup(path);
    size_t n = strlen(path) + 16;
    p->tmp = dt_malloc(n);
    snprintf(p->tmp, n, "%s.XXXXXX", path);
    p->fd = mkstemp(p->tmp);
    if (p->fd < 0) {
        dt_error_set("cannot write %s: %s", path, strerror(errno));
        free(p->tmp);
        free(p->path);
        p->tmp = p->path = NULL;
        return DT_ERR;
    }
    p->f = open_memstream(&p->json, &p->len);
    DT_ASSERT(p->f, "open_memstream failed");
    return DT_OK;
}

void html_page_abort(struct html_page *p)
{
    if (p->f)
        fclose(p->f);
    if (p->fd >= 0) {
        close(p->fd);
        unlink(p->tmp);
    }
    free(p->json);
    free(p->tmp);
    free(p->path);
    memset(p, 0, sizeof *p);
    p->fd = -1;
}

/* Text as HTML element content. */
static void html_put_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
}

int html_page_close(struct html_page *p, const char *title)
{
    fclose(p->f);
    p->f = NULL;
    FILE *f = fdopen(p->fd, "w");
    if (!f) {
        dt_error_set("cannot write %s: %s", p->path, strerror(errno));
        html_page_abort(p);
        return DT_ERR;
    }
    /* mkstemp's file is private; a page is as readable as any file made here */
    mode_t mask = umask(0);
    umask(mask);
    fchmod(p->fd, 0666 & ~mask);
    p->fd = -1;
    /* no network: the policy forbids every fetch, and the page names no URL */
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
          "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>",
          f);
    html_put_text(f, title);
    fprintf(f, "</title>\n<meta name=\"generator\" content=\"divtrace %s\">\n<style>\n", PACKAGE_VERSION);
    for (int k = 0; html_css[k]; k++)
        fputs(html_css[k], f);
    fputs("</style>\n</head>\n<body>\n<noscript>This page draws its contents with JavaScript.</noscript>\n"
          "<div id=\"app\"></div>\n<script type=\"application/json\" id=\"dt-data\">\n", f);
    /* '<' occurs only inside JSON strings: escaped, no text ends the element */
    for (size_t i = 0; i < p->len; i++) {
        if (p->json[i] == '<')
            fputs("\\u003c", f);
        else
            fputc(p->json[i], f);
    }
    fputs("\n</script>\n<script>\n", f);
    for (int k = 0; html_js[k]; k++)
        fputs(html_js[k], f);
    fputs("</script>\n</body>\n</html>\n", f);
    int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    if (!bad && rename(p->tmp, p->path) != 0) {
        bad = 1;
        err = errno;
    }
    if (bad) {
        dt_error_set("cannot write %s: %s", p->path, strerror(err));
        unlink(p->tmp);
    }
    free(p->json);
    free(p->tmp);
    free(p->path);
    memset(p, 0, sizeof *p);
    p->fd = -1;
    return bad ? DT_ERR : DT_OK;
}

/* ---- explain's verdict ---- */

/* A JSON text, checked by recursive descent; records whether it is an
 * object with a string "verdict" (explain's output). */
struct html_jv {
    const char *p, *end;
    int depth, verdict;
};

static void html_jv_ws(struct html_jv *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int html_jv_lit(struct html_jv *j, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
        return 0;
    j->p += n;
    return 1;
}

static int html_jv_string(struct html_jv *j)
{
    if (j->p >= j->end || *j->p != '"')
        return 0;
    for (j->p++; j->p < j->end; j->p++) {
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c == '\\') {
            if (++j->p >= j->end)
                return 0;
            if (*j->p == 'u') {
                for (int k = 0; k < 4; k++)
                    if (++j->p >= j->end || !strchr("0123456789abcdefABCDEF", *j->p))
                        return 0;
            } else if (!strchr("\"\\/bfnrt", *j->p)) {
                return 0;
            }
        }
    }
    return 0;
}

static int html_jv_digits(struct html_jv *j)
{
    const char *s = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
        j->p++;
    return j->p > s;
}

static int html_jv_number(struct html_jv *j)
{
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p < j->end && *j->p == '0')
        j->p++;
    else if (!html_jv_digits(j))
        return 0;
    if (j->p < j->end && *j->p == '.' && (j->p++, !html_jv_digits(j)))
        return 0;
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (!html_jv_digits(j))
            return 0;
    }
    return 1;
}

static int html_jv_value(struct html_jv *j)
{
    html_jv_ws(j);
    if (j->p >= j->end || j->depth > 64)
        return 0;
    char c = *j->p;
    if (c == '"')
        return html_jv_string(j);
    if (c == 't')
        return html_jv_lit(j, "true");
    if (c == 'f')
        return html_jv_lit(j, "false");
    if (c == 'n')
        return html_jv_lit(j, "null");
    if (c != '{' && c != '[')
        return html_jv_number(j);
    char close = c == '{' ? '}' : ']';
    j->p++;
    j->depth++;
    html_jv_ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        j->depth--;
        return 1;
    }
    for (;;) {
        if (c == '{') {
            html_jv_ws(j);
            const char *key = j->p;
            if (!html_jv_string(j))
                return 0;
            int is_verdict = j->depth == 1 && j->p - key == 9 && memcmp(key, "\"verdict\"", 9) == 0;
            html_jv_ws(j);
            if (j->p >= j->end || *j->p++ != ':')
                return 0;
            html_jv_ws(j);
            if (is_verdict && j->p < j->end && *j->p == '"')
                j->verdict = 1;
        }
        if (!html_jv_value(j))
            return 0;
        html_jv_ws(j);
        if (j->p >= j->end)
            return 0;
        if (*j->p == close) {
            j->p++;
            j->depth--;
            return 1;
        }
        if (*j->p++ != ',')
            return 0;
    }
}

/* The saved output of `divtrace explain --json` in path, as it is. */
static int html_explain_file(FILE *out, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        dt_error_set("%s: cannot open: %s", path, strerror(errno));
        return DT_ERR;
    }
    char *text = NULL;
    size_t len = 0, cap = 0, k;
    char buf[65536];
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) {
        if (len + k > ((size_t)64 << 20)) {
            fclose(f);
            free(text);
            dt_error_set("%s: over 64 MiB: not the output of divtrace explain --json", path);
            return DT_ERR;
        }
        if (len + k > cap) {
            cap = 2 * (len + k);
            text = dt_realloc(text, cap);
        }
        memcpy(text + len, buf, k);
        len += k;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) {
        free(text);
        dt_error_set("%s: read error", path);
        return DT_ERR;
    }
    struct html_jv j = {text, text + len, 0, 0};
    int valid = len > 0 && html_jv_value(&j) && (html_jv_ws(&j), j.p == j.end);
    if (!valid || !j.verdict) {
        free(text);
        dt_error_set("%s: not the output of divtrace explain --json (%s)", path,
                     valid ? "no verdict in it" : "not valid JSON");
        return DT_ERR;
    }
    fputs(",\n \"explain_source\": ", out);
    json_put_str(out, path);
    fputs(",\n \"explain\": ", out);
    fwrite(text, 1, len, out);
    free(text);
    return DT_OK;
}

/* explain's findings about one trace, with the keys of explain --json. */
static void html_explain_side(FILE *f, const struct explain_side *s)
{
    const struct trace_file *tf = s->tf;
    fprintf(f, "{\"label\": \"%s\", \"trace\": ", s->label);
    json_put_str(f, tf->path);
    fprintf(f, ", \"bug\": %s, \"not_reproduced\": %s, \"finding\": ", s->bug ? "true" : "false",
            s->mismatch ? "true" : "false");
    json_put_str(f, s->finding);
    fprintf(f, ", \"carry_steps\": %" PRIu64 ", \"carry\": [", s->carry.nsteps);
    for (int k = 0; k < s->carry.n && k < 100; k++) {
        fprintf(f, "%s{\"step\": %" PRIu64 ", \"tensor\": ", k ? ", " : "", s->carry.f[k].step);
        json_put_str(f, tf->ops[s->carry.f[k].leaf].name);
        fputs(", \"written_by\": ", f);
        json_put_str(f, tf->ops[s->carry.f[k].writer].name);
        fputc('}', f);
    }
    fputs("], \"graph\": ", f);
    json_put_str(f, s->graph);
    fprintf(f, ", \"replayed\": %s, \"not_checked\": ", s->replayed ? "true" : "false");
    json_put_str(f, s->not_checked);
    fputs(", \"ops\": [", f);
    for (int k = 0; s->replayed && k < s->rr.ncheck; k++) {
        fputs(k ? ",\n   " : "\n   ", f);
        replay_check_json(f, tf, &s->rr.check[k]);
    }
    fputs("]}", f);
}

static void html_explain_json(FILE *f, const struct explain_result *res)
{
    const struct diff_result *d = &res->d;
    const struct trace_file *a = res->side[0].tf;
    fprintf(f, ",\n \"explain_source\": null,\n \"explain\": {\"verdict\": \"%s\", \"line\": ",
            explain_verdict_name(res->verdict));
    json_put_str(f, res->line);
    fputs(", \"keys\": ", f);
    json_put_str(f, res->keys);
    fputs(", \"first_step\": ", f);
    if (d->values_differ)
        fprintf(f, "%" PRIu64, d->first_step);
    else
        fputs("null", f);
    fputs(", \"origins\": [", f);
    for (int k = 0; d->values_differ && k < d->norigins; k++) {
        fputs(k ? ", " : "", f);
        json_put_str(f, a->ops[d->origins[k]].name);
    }
    fputs("],\n \"a\": ", f);
    html_explain_side(f, &res->side[0]);
    fputs(",\n \"b\": ", f);
    html_explain_side(f, &res->side[1]);
    fputs(", \"seconds\": ", f);
    json_put_num(f, res->seconds);
    fputc('}', f);
}

/* ---- diff --html ---- */

static const char *html_base(const char *path)
{
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

int html_diff_options(const char *html, int reference, int quiet, struct html_options *o)
{
    if (!html && (o->explain || o->explain_json)) {
        dt_error_set("%s shows explain's verdict on the page of --html FILE: give --html too",
                     o->explain ? "--explain" : "--explain-json");
        return DT_ERR;
    }
    if (o->explain && o->explain_json) {
        dt_error_set("--explain runs explain, --explain-json reads its saved output: give one");
        return DT_ERR;
    }
    if (html && reference) {
        dt_error_set("--html draws two runs, not their distances from a --reference");
        return DT_ERR;
    }
    o->progress = !quiet && isatty(STDERR_FILENO);
    return DT_OK;
}

int html_write_diff(const char *path, struct trace_file **tf, int n, int ranks,
                    const struct html_options *o)
{
    if (ranks) {
        dt_error_set("--html: the traces are ranks of one job; the page compares two runs");
        return DT_ERR;
    }
    if (n != 2) {
        dt_error_set("--html: the page compares two traces, not %d", n);
        return DT_ERR;
    }
    struct trace_file *a = tf[0], *b = tf[1];
    /* the page is renamed over FILE: never over a trace */
    struct stat sp, st;
    for (int k = 0; k < 2 && stat(path, &sp) == 0; k++)
        if (stat(tf[k]->path, &st) == 0 && st.st_dev == sp.st_dev && st.st_ino == sp.st_ino) {
            dt_error_set("--html %s: that is trace %c; give the page another name", path, 'A' + k);
            return DT_ERR;
        }
    struct html_page p;
    if (html_page_open(&p, path) < 0)
        return DT_ERR;
    fputs("{\"kind\": \"diff\", \"version\": 1, ", p.f);
    struct explain_result res;
    struct diff_result r;
    const struct diff_result *d = &r;
    int rc = DT_ERR, have_res = 0, have_r = 0;
    if (o->explain) {
        /* explain diffs the traces itself: its diff is the page's */
        struct explain_options eo = {.progress = o->progress, .self = "/proc/self/exe"};
        have_res = 1;
        if (explain_run(a, b, &eo, &res) < 0) {
            char why[512];
            snprintf(why, sizeof why, "%s", dt_error());
            explain_phase(&eo, NULL);
            dt_error_set("--explain: %s", why);
            goto out;
        }
        explain_phase(&eo, NULL);
        d = &res.d;
    } else {
        have_r = 1;
        if (diff_traces(a, b, &r) < 0)
            goto out;
    }
    if (html_data_comparison(p.f, a, b, d) < 0)
        goto out;
    if (have_res)
        html_explain_json(p.f, &res);
    else if (o->explain_json && html_explain_file(p.f, o->explain_json) < 0)
        goto out;
    fputs("}\n", p.f);
    char title[600];
    snprintf(title, sizeof title, "divtrace diff %s %s", html_base(a->path), html_base(b->path));
    rc = html_page_close(&p, title);
out:
    if (rc < 0 && p.path)
        html_page_abort(&p);
    if (have_res)
        explain_result_free(&res);
    if (have_r)
        diff_result_free(&r);
    return rc;
}
