/* explain.c: the verdict behind `divtrace explain` (see explain.h). */
#include "explain.h"
#include "torchcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "graph.h"
#include "model.h"
#include "progress.h"
#include "run.h"
#include "train.h"
#include "util.h"

const char *explain_verdict_name(enum explain_verdict v)
{
    static const char *const names[] = {"identical", "rounding only", "bug", "no verdict"};
    return names[v];
}

/* ---- the graph against the model's ---- */

static void explain_shape(char *out, size_t n, int ndim, const uint32_t *shape)
{
    size_t len = 0;
    out[0] = 0;
    for (int d = 0; d < ndim && len < n; d++)
        len += (size_t)snprintf(out + len, n - len, "%s%u", d ? "x" : "", shape[d]);
}

/* An input reference as a name ("L2.t00.c", "enc1.W.update@prev"). */
static void explain_input_name(const char *const *names, uint32_t n, uint32_t ref, char *out, size_t len)
{
    uint32_t i = ref & ~TRACE_INPUT_PREV;
    snprintf(out, len, "%s%s", i < n ? names[i] : "?", (ref & TRACE_INPUT_PREV) ? "@prev" : "");
}

/* A trace written through libdivtrace by another program: divtrace has
 * none of its model to build or re-run (1, why in out), else 0. */
static int explain_foreign(const struct trace_file *tf, char *out, size_t n)
{
    const char *rec = trace_config_get(&tf->cfg, "recorder");
    if (!rec || strncmp(rec, "libdivtrace", 11) != 0)
        return 0;
    snprintf(out, n, "%s was written through libdivtrace (recorder = %s): divtrace has no model to "
             "re-run its ops or rebuild its graph; the diff and the carry check (from its records "
             "and events) are what could be checked", tf->path, rec);
    return 1;
}

int explain_graph_check(const struct trace_file *tf, char *out, size_t n)
{
    out[0] = 0;
    if (explain_foreign(tf, out, n))
        return 0;
    struct train_config tc;
    if (run_config_from_trace(&tc, &tf->cfg) < 0) {
        snprintf(out, n, "%s", dt_error());
        return 0;
    }
    uint32_t features = 0;
    const char *im = trace_config_get(&tf->cfg, "data_images");
    unsigned cnt, rows, cols;
    if (strcmp(tc.model.name, "prednet") != 0) {
        if (!im || sscanf(im, "%ux%ux%u", &cnt, &rows, &cols) != 3) {
            snprintf(out, n, "the trace header has no data_images: its model cannot be built");
            return 0;
        }
        features = rows * cols;
    }
    struct graph g;
    graph_init(&g);
    int loss = model_build(&g, &tc.model, features);
    if (loss < 0) {
        graph_free(&g);
        return -1;
    }
    graph_backward(&g, loss);
    struct graph_opt_config oc = {
        .kind = strcmp(tc.optimizer, "adam") == 0 ? GRAPH_OPT_ADAM : GRAPH_OPT_SGD,
        .lr = (float)tc.lr, .momentum = (float)tc.momentum,
        .b1 = (float)tc.b1, .b2 = (float)tc.b2, .eps = (float)tc.eps,
    };
    graph_optimizer(&g, &oc);
    struct trace_opdef *ops = graph_opdefs(&g);
    uint32_t nm = (uint32_t)g.n;
    const char **tnames = dt_calloc(tf->nops + 1, sizeof *tnames);
    const char **mnames = dt_calloc(nm + 1, sizeof *mnames);
    for (uint32_t i = 0; i < tf->nops; i++)
        tnames[i] = tf->ops[i].name;
    for (uint32_t i = 0; i < nm; i++)
        mnames[i] = ops[i].name;
    /* the trace's ops in order, each against the model's op of its name */
    for (uint32_t i = 0; i < tf->nops && !out[0]; i++) {
        const struct trace_opdef *t = &tf->ops[i];
        int j = graph_find(&g, t->name);
        if (j < 0) {
            snprintf(out, n, "op %s is not an op of its model", t->name);
            break;
        }
        const struct trace_opdef *m = &ops[j];
        if (strcmp(t->type, m->type) != 0) {
            snprintf(out, n, "op %s is a %s where its model has a %s", t->name, t->type, m->type);
        } else if (t->ndim != m->ndim || memcmp(t->shape, m->shape, sizeof t->shape) != 0) {
            char a[64], b[64];
            explain_shape(a, sizeof a, t->ndim, t->shape);
            explain_shape(b, sizeof b, m->ndim, m->shape);
            snprintf(out, n, "op %s has shape %s where its model's has %s", t->name, a, b);
        } else if (t->ninputs != m->ninputs) {
            snprintf(out, n, "op %s reads %u inputs where its model's reads %u", t->name, t->ninputs,
                     m->ninputs);
        } else {
            for (uint32_t k = 0; k < t->ninputs; k++) {
                char a[160], b[160];
                explain_input_name(tnames, tf->nops, t->inputs[k], a, sizeof a);
                explain_input_name(mnames, nm, m->inputs[k], b, sizeof b);
                if (strcmp(a, b) != 0) {
                    snprintf(out, n, "op %s reads %s where its model reads %s (input %u)", t->name, a,
                             b, k);
                    break;
                }
            }
        }
    }
    for (uint32_t j = 0; j < nm && !out[0]; j++) {
        int found = 0;
        for (uint32_t i = 0; i < tf->nops && !found; i++)
            found = strcmp(tf->ops[i].name, mnames[j]) == 0;
        if (!found)
            snprintf(out, n, "its model's op %s is missing", mnames[j]);
    }
    free(tnames);
    free(mnames);
    graph_opdefs_free(ops, g.n);
    graph_free(&g);
    return 1;
}

/* ---- replays, each in a process of its own ---- */

/* Replay tf's step `step` from the checkpoint at or before `from` against
 * the oracle, checking the ops named in `ops` (NULL: all), in a child
 * process (which may need another OpenBLAS kernel than this one): 0 with
 * *rr filled, or -1 with dt_error set to why not. */
static int explain_replay(const struct explain_options *opt, const struct trace_file *tf, uint64_t step, uint64_t from, const char *ops,
                          struct replay_result *rr)
{
    int fds[2];
    if (pipe(fds) < 0) {
        dt_error_set("pipe: %s", strerror(errno));
        return DT_ERR;
    }
    char s_step[32], s_from[32], s_fd[16];
    snprintf(s_step, sizeof s_step, "%" PRIu64, step);
    snprintf(s_from, sizeof s_from, "%" PRIu64, from);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        dt_error_set("fork: %s", strerror(errno));
        return DT_ERR;
    }
    if (pid == 0) {
        close(fds[0]);
        int fd = fds[1];
        if (fd < 3) { /* keep it off stdin, stdout and stderr */
            fd = fcntl(fds[1], F_DUPFD, 3);
            close(fds[1]);
        }
        snprintf(s_fd, sizeof s_fd, "%d", fd);
        char *argv[20];
        int k = 0;
        argv[k++] = (char *)"divtrace";
        argv[k++] = (char *)"replay";
        argv[k++] = tf->path;
        argv[k++] = (char *)"--step";
        argv[k++] = s_step;
        argv[k++] = (char *)"--from";
        argv[k++] = s_from;
        argv[k++] = (char *)"--against";
        argv[k++] = (char *)"mpfr";
        argv[k++] = (char *)"--result-fd";
        argv[k++] = s_fd;
        if (opt->progress == PROGRESS_OFF)
            argv[k++] = (char *)"--quiet";
        else if (opt->progress == PROGRESS_LINES)
            argv[k++] = (char *)"--progress";
        if (ops) {
            argv[k++] = (char *)"--ops";
            argv[k++] = (char *)ops;
        }
        argv[k] = NULL;
        execv(opt->self, argv);
        replay_error_send(fd, "cannot run divtrace replay");
        _exit(2);
    }
    close(fds[1]);
    int rc = replay_result_recv(fds[0], rr);
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        replay_result_free(rr);
        dt_error_set("its replay ended abnormally");
        rc = DT_ERR;
    }
    return rc;
}

/* ---- the verdict ---- */

void explain_phase(const struct explain_options *opt, const char *what)
{
    if (opt->progress == PROGRESS_LINES && what)
        fprintf(stderr, "divtrace explain: %s\n", what);
    else if (opt->progress == PROGRESS_TERMINAL && what)
        fprintf(stderr, "\rdivtrace explain: %s\033[K", what);
    else if (opt->progress == PROGRESS_TERMINAL)
        fputs("\r\033[K", stderr);
    else
        return;
    fflush(stderr);
}

/* Where an op sits, for people: "step 12, layer L2, time step 7". */
static void explain_where(const char *name, uint64_t step, char *out, size_t n)
{
    char layer[64];
    diff_layer(name, layer, sizeof layer);
    const char *rest;
    int t = diff_time_step(name, &rest);
    if (t >= 0)
        snprintf(out, n, "step %" PRIu64 ", layer %s, time step %d", step, layer, t);
    else
        snprintf(out, n, "step %" PRIu64 ", layer %s", step, layer);
}

/* Configuration keys whose values change no bit of a result. */
static int explain_key_inert(const char *key)
{
    static const char *const inert[] = {"steps", "checkpoint_every", "trace_level", "stop_on_nonfinite",
                                        "data", "host", "host_cores", "gpu_streams", "cuda_graph",
                                        "trace_overlap",
                                        "inject_planted", /* follows from inject and backend */
                                        "reduce_fixed",   /* follows from reduce and the model */
                                        NULL};
    for (int k = 0; inert[k]; k++)
        if (strcmp(key, inert[k]) == 0)
            return 1;
    return 0;
}

/* One differing key for the verdict line: "key A | B" when both values are
 * short, else the key alone (cuDNN's algorithm lists run to kilobytes). */
static size_t explain_key_text(char *out, size_t n, size_t len, const char *k, const char *va, const char *vb)
{
    if (len >= n)
        return len;
    const char *sep = len ? ", " : "";
    if ((!va || strlen(va) <= 48) && (!vb || strlen(vb) <= 48))
        return len + (size_t)snprintf(out + len, n - len, "%s%s %s | %s", sep, k, va ? va : "(absent)",
                                      vb ? vb : "(absent)");
    return len + (size_t)snprintf(out + len, n - len, "%s%s", sep, k);
}

/* The keys that differ between the two headers and could change results:
 * the backend first; when it differs, the keys one backend has and the
 * other lacks follow from it and are left out. */
static void explain_keys(const struct trace_file *a, const struct trace_file *b, char *out, size_t n)
{
    size_t len = 0;
    out[0] = 0;
    const char *ba = trace_config_get(&a->cfg, "backend"), *bb = trace_config_get(&b->cfg, "backend");
    int other_backend = ba && bb && strcmp(ba, bb) != 0;
    if (other_backend)
        len = explain_key_text(out, n, len, "backend", ba, bb);
    for (size_t i = 0; i < a->cfg.n; i++) {
        const char *k = a->cfg.key[i], *va = a->cfg.val[i], *vb = trace_config_get(&b->cfg, k);
        if (explain_key_inert(k) || strcmp(k, "backend") == 0 || (vb && strcmp(va, vb) == 0) ||
            (!vb && other_backend))
            continue;
        len = explain_key_text(out, n, len, k, va, vb);
    }
    for (size_t i = 0; i < b->cfg.n && !other_backend; i++) {
        const char *k = b->cfg.key[i];
        if (!explain_key_inert(k) && !trace_config_get(&a->cfg, k))
            len = explain_key_text(out, n, len, k, NULL, b->cfg.val[i]);
    }
}

/* The ops of side x (0 A, 1 B) to check: the origins it holds, by name. */
static char *explain_ops_list(const struct explain_result *res, int x)
{
    const struct trace_file *a = res->side[0].tf, *t = res->side[x].tf;
    size_t cap = 64, len = 0;
    char *list = dt_malloc(cap);
    list[0] = 0;
    for (int k = 0; k < res->d.norigins; k++) {
        int i = res->d.origins[k];
        if (x == 1 && res->d.a_to_b[i] < 0)
            continue;
        const char *name = x ? t->ops[res->d.a_to_b[i]].name : a->ops[i].name;
        size_t need = len + strlen(name) + 2;
        if (need > cap) {
            cap = 2 * need;
            list = dt_realloc(list, cap);
        }
        len += (size_t)snprintf(list + len, cap - len, "%s%s", len ? "," : "", name);
    }
    if (len == 0) {
        free(list);
        return NULL;
    }
    return list;
}

/* The last origin the diff named, as an op of side x's trace (-1: none). */
static int explain_last_origin(const struct explain_result *res, int x)
{
    int last = -1;
    for (int k = 0; k < res->d.norigins; k++) {
        int i = res->d.origins[k], op = x == 0 ? i : res->d.a_to_b[i];
        if (op > last)
            last = op;
    }
    return last;
}

/* Whether tf's run used kernels whose results change from run to run
 * (atomic reductions, cuDNN's nondeterministic algorithms): then a replay
 * gives other bits than the recording, and that is no finding. */
static int explain_nondeterministic(const struct trace_file *tf)
{
    const char *v;
    if ((v = trace_config_get(&tf->cfg, "reduce")) && strcmp(v, "atomic") == 0)
        return 1;
    if ((v = trace_config_get(&tf->cfg, "cudnn_algos")) && strncmp(v, "none", 4) != 0)
        return strstr(v, "nondet") != NULL;
    return (v = trace_config_get(&tf->cfg, "cudnn_algo")) && strcmp(v, "deterministic") != 0;
}

/* Side x's oracle replay of step res->step, and what it finds. */
static void explain_check_side(struct explain_result *res, const struct explain_options *opt, int x)
{
    struct explain_side *s = &res->side[x];
    uint64_t step = res->step;
    if (explain_foreign(s->tf, s->not_checked, sizeof s->not_checked))
        return;
    char *ops = opt->all ? NULL : explain_ops_list(res, x);
    if (!opt->all && !ops && res->d.norigins > 0) {
        snprintf(s->not_checked, sizeof s->not_checked, "it holds none of the origin ops");
        return;
    }
    /* a step early rebuilds state handed from step to step; a
     * nondeterministic run's re-execution would part from the recording
     * there already, so it starts at the step itself */
    s->nondet = explain_nondeterministic(s->tf);
    uint64_t from = s->nondet ? step : replay_default_from(step);
    if (explain_replay(opt, s->tf, step, from, ops, &s->rr) < 0) {
        snprintf(s->not_checked, sizeof s->not_checked, "%s", dt_error());
        free(ops);
        return;
    }
    free(ops);
    s->replayed = 1;
    struct replay_result *rr = &s->rr;
    const struct trace_file *tf = s->tf;
    char where[160];
    const struct replay_opcheck *semantic = NULL, *unfit = NULL, *lost = NULL;
    for (int k = 0; k < rr->ncheck; k++) {
        const struct replay_opcheck *c = &rr->check[k];
        if (c->step != step)
            continue;
        if (c->inputs_recorded == 0) {
            if (!lost)
                lost = c;
            continue;
        }
        if (c->cls == REPLAY_SEMANTIC && !semantic)
            semantic = c;
        if (c->bitwise == 0 && s->nondet) {
            s->nondet_checked++;
            if (c->recorded_ok == 0 && !unfit)
                unfit = c;
        }
    }
    if (semantic) {
        const char *name = tf->ops[semantic->op].name;
        explain_where(name, step, where, sizeof where);
        s->bug = 1;
        snprintf(s->finding, sizeof s->finding,
                 "op %s (%s) computes wrong values: element %" PRIu64 " is %.9g, exactly %.9g, "
                 "%.3g times what any admissible float32 evaluation could err", name, where,
                 semantic->worst, (double)semantic->worst_value, (double)semantic->worst_exact,
                 semantic->max_ratio);
        return;
    }
    if (unfit) {
        const char *name = tf->ops[unfit->op].name;
        explain_where(name, step, where, sizeof where);
        s->bug = 1;
        snprintf(s->finding, sizeof s->finding,
                 "op %s (%s) recorded values no admissible float32 evaluation gives from its inputs "
                 "(their L2 norm or extremes are beyond the bounds)", name, where);
        return;
    }
    /* a deterministic run that re-execution does not reproduce up to the
     * checked ops: the first op that differs is the finding */
    if (!s->nondet && !rr->reproduced &&
        (rr->mismatch_step < (int64_t)step ||
         (rr->mismatch_step == (int64_t)step &&
          (rr->mismatch_op < 0 || rr->mismatch_op <= explain_last_origin(res, x) || opt->all)))) {
        s->mismatch = 1;
        const char *name = rr->mismatch_op >= 0 ? tf->ops[rr->mismatch_op].name : NULL;
        char cdiff[sizeof rr->config_diff]; /* (a copy: the compiler cannot tell it from s->finding) */
        memcpy(cdiff, rr->config_diff, sizeof cdiff);
        if (name)
            explain_where(name, (uint64_t)rr->mismatch_step, where, sizeof where);
        if (rr->config_diff[0] && name)
            snprintf(s->finding, sizeof s->finding,
                     "%s's op %s (%s) is not what re-execution here gives from the same inputs; the "
                     "configuration here differs: %s", s->label, name, where, cdiff);
        else if (rr->config_diff[0])
            snprintf(s->finding, sizeof s->finding,
                     "%s's step %" PRId64 " is not what re-execution here gives; the configuration "
                     "here differs: %s", s->label, rr->mismatch_step, cdiff);
        else {
            s->bug = 1;
            if (name)
                snprintf(s->finding, sizeof s->finding,
                         "op %s (%s) recorded other values than it computes from the same inputs, "
                         "in the recorded configuration", name, where);
            else
                snprintf(s->finding, sizeof s->finding,
                         "step %" PRId64 " recorded other values than re-execution gives, in the "
                         "recorded configuration", rr->mismatch_step);
        }
        return;
    }
    if (lost && opt->all && s->nondet && s->all_checked) {
        /* the second pass over every op: what the nondeterministic run no
         * longer has the inputs of is counted and said, not a verdict stopper */
        for (int k = 0; k < rr->ncheck; k++)
            s->unchecked += rr->check[k].step == step && rr->check[k].inputs_recorded == 0;
        return;
    }
    if (lost)
        snprintf(s->not_checked, sizeof s->not_checked,
                 "it ran nondeterministic kernels and its re-execution parted from the recording "
                 "before op %s, whose recorded inputs it then no longer has", tf->ops[lost->op].name);
}

static void explain_side_open(struct explain_side *s, struct trace_file *tf, const char *label)
{
    memset(s, 0, sizeof *s);
    s->tf = tf;
    s->label = label;
    carry_scan_trace(tf, &s->carry);
}

int explain_run(struct trace_file *a, struct trace_file *b, const struct explain_options *opt,
                struct explain_result *res)
{
    memset(res, 0, sizeof *res);
    double t0 = dt_now();
    for (int x = 0; x < 2; x++) {
        struct trace_file *t = x ? b : a;
        if (t->nsteps == 0) {
            dt_error_set("%s holds no step (%s): there is nothing to explain", t->path,
                         t->complete ? "the run recorded none" : t->note);
            return DT_ERR;
        }
    }
    explain_phase(opt, "comparing the traces and checking for carry faults");
    explain_side_open(&res->side[0], a, "A");
    explain_side_open(&res->side[1], b, "B");
    if (diff_traces(a, b, &res->d) < 0)
        return DT_ERR;
    const struct diff_result *d = &res->d;
    char text[2 * EXPLAIN_TEXT + 64];
    int nbug = 0;

    /* 1. state changed between steps */
    for (int x = 0; x < 2; x++) {
        struct explain_side *s = &res->side[x];
        if (s->carry.n == 0)
            continue;
        const struct carry_fault *f = &s->carry.f[0];
        char where[160];
        explain_where(s->tf->ops[f->leaf].name, f->step, where, sizeof where);
        snprintf(s->finding, sizeof s->finding,
                 "%s changed between steps %" PRIu64 " and %" PRIu64 " (%s): it is not what %s wrote "
                 "(%" PRIu64 " step%s began with a changed leaf)", s->tf->ops[f->leaf].name,
                 f->step - 1, f->step, where, s->tf->ops[f->writer].name, s->carry.nsteps,
                 s->carry.nsteps == 1 ? "" : "s");
        s->bug = 1;
        nbug++;
    }
    /* 2. a graph that is not its model's */
    if (!d->ops_match) {
        explain_phase(opt, "building each trace's model");
        for (int x = 0; x < 2; x++) {
            struct explain_side *s = &res->side[x];
            int rc = explain_graph_check(s->tf, s->graph, sizeof s->graph);
            if (rc < 0)
                return DT_ERR;
            s->graph_checked = rc;
            if (rc == 1 && s->graph[0] && !s->bug) {
                snprintf(s->finding, sizeof s->finding, "%s", s->graph);
                s->bug = 1;
                nbug++;
            }
        }
    }
    /* 3. the ops where the values part */
    if (!nbug && d->values_differ) {
        res->step = d->first_step;
        res->checked_step = 1;
        if (tcheck_is_torch(a) && tcheck_is_torch(b)) {
            explain_torch(res, opt);
            nbug += res->side[0].bug + res->side[1].bug + (res->either[0] != 0);
        } else {
            for (int x = 0; x < 2; x++) {
                char what[64];
                snprintf(what, sizeof what, "replaying %s's step %" PRIu64, res->side[x].label, res->step);
                explain_phase(opt, what);
                explain_check_side(res, opt, x);
                nbug += res->side[x].bug;
            }
            /* The origins are rounding. An op further on that computes
             * wrong values hides behind them (its inputs differ already, so
             * it is no origin): before "rounding only", every op of the
             * step, in both runs. */
            struct explain_side *A = &res->side[0], *B = &res->side[1];
            if (!nbug && !opt->all && !A->mismatch && !B->mismatch && !A->not_checked[0] &&
                !B->not_checked[0]) {
                struct explain_options every = *opt;
                every.all = 1;
                for (int x = 0; x < 2; x++) {
                    struct explain_side *s = &res->side[x];
                    char what[80];
                    snprintf(what, sizeof what, "replaying every op of %s's step %" PRIu64, s->label,
                             res->step);
                    explain_phase(opt, what);
                    replay_result_free(&s->rr);
                    memset(&s->rr, 0, sizeof s->rr);
                    s->replayed = 0;
                    s->nondet_checked = 0;
                    s->all_checked = 1;
                    explain_check_side(res, &every, x);
                    nbug += s->bug;
                }
            } else if (opt->all) {
                A->all_checked = B->all_checked = 1;
            }
        }
    }

    explain_phase(opt, NULL);
    /* the verdict line */
    struct explain_side *A = &res->side[0], *B = &res->side[1];
    if (nbug) {
        res->verdict = EXPLAIN_BUG;
        if (A->bug && B->bug)
            snprintf(res->line, sizeof res->line, "bug in A: %s; bug in B: %s", A->finding, B->finding);
        else if (!A->bug && !B->bug)
            snprintf(res->line, sizeof res->line, "bug in A or B: %s", res->either);
        else
            snprintf(res->line, sizeof res->line, "bug in %s: %s", A->bug ? "A" : "B",
                     A->bug ? A->finding : B->finding);
    } else if (A->mismatch || B->mismatch) {
        /* a recording that re-execution here does not reproduce, with a
         * configuration difference that may explain it: a finding, not a
         * verdict on the code */
        res->verdict = EXPLAIN_UNKNOWN;
        snprintf(res->line, sizeof res->line, "not reproduced: %s", A->mismatch ? A->finding : B->finding);
    } else if (!d->ops_match) {
        res->verdict = EXPLAIN_UNKNOWN;
        const char *why = !A->graph_checked ? A->graph : !B->graph_checked ? B->graph : "";
        if (why[0])
            snprintf(res->line, sizeof res->line,
                     "no verdict: the op lists differ (%s) and which one is right cannot be checked: %s",
                     d->opdiff, why);
        else
            snprintf(res->line, sizeof res->line,
                     "no verdict: A and B are different models (%s), each its own model's graph",
                     d->opdiff);
    } else if (!d->diverged) {
        res->verdict = EXPLAIN_IDENTICAL;
        if (a->nsteps == b->nsteps)
            snprintf(res->line, sizeof res->line, "identical");
        else
            snprintf(res->line, sizeof res->line, "identical (the %" PRIu64 " steps both hold; %s has %" PRIu64
                     " more)", d->common, a->nsteps > b->nsteps ? "A" : "B",
                     a->nsteps > b->nsteps ? a->nsteps - d->common : b->nsteps - d->common);
    } else if (A->not_checked[0] || B->not_checked[0]) {
        res->verdict = EXPLAIN_UNKNOWN;
        const char *ta = A->torch ? "A: not checked: " : "A's ops were not checked: ";
        const char *tb = B->torch ? "B: not checked: " : "B's ops were not checked: ";
        snprintf(text, sizeof text, "%s%s%s%s%s", A->not_checked[0] ? ta : "", A->not_checked,
                 A->not_checked[0] && B->not_checked[0] ? "; " : "", B->not_checked[0] ? tb : "",
                 B->not_checked);
        snprintf(res->line, sizeof res->line, "no verdict: %s", text);
    } else {
        res->verdict = EXPLAIN_ROUNDING;
        explain_keys(a, b, res->keys, sizeof res->keys);
        if (res->keys[0])
            snprintf(res->line, sizeof res->line, "rounding only: %s", res->keys);
        else
            snprintf(res->line, sizeof res->line, "rounding only, with the same configuration: "
                     "an evaluation order that changes from run to run");
        /* what a nondeterministic run kept from the check of every op */
        size_t len = strlen(res->line);
        for (int x = 0; x < 2; x++) {
            const struct explain_side *s = &res->side[x];
            if (s->unchecked && len < sizeof res->line)
                len += (size_t)snprintf(res->line + len, sizeof res->line - len,
                                        "; not checked: %d ops of %s's step %" PRIu64 " after its "
                                        "re-execution parted from its nondeterministic recording",
                                        s->unchecked, s->label, res->step);
            /* the same counts in both runs (the usual case) said once */
            int same = A->torch_grads == B->torch_grads && A->torch_nodata == B->torch_nodata;
            if ((s->torch_grads || s->torch_nodata) && (!same || x == 0) && len < sizeof res->line)
                len += (size_t)snprintf(res->line + len, sizeof res->line - len,
                                        "; not checked: %d gradient ops of standard modules (no "
                                        "oracle of their own) and %d modules without an oracle or "
                                        "module data, in %s step %" PRIu64, s->torch_grads,
                                        s->torch_nodata, same ? "each run's" : x ? "B's" : "A's",
                                        res->step);
        }
    }
    res->seconds = dt_now() - t0;
    return DT_OK;
}

void explain_result_free(struct explain_result *res)
{
    for (int x = 0; x < 2; x++) {
        carry_scan_free(&res->side[x].carry);
        replay_result_free(&res->side[x].rr);
    }
    diff_result_free(&res->d);
}
