/* explain_torch.c: explain's third step for two PyTorch adapter traces.
 * divtrace has no model of their own to re-run, so the first divergent
 * step's origin ops are checked from the data the adapter stored at that
 * step (torchcheck.h): each module's output against the exact oracle from
 * its stored inputs and parameters, each parameter's update from the
 * optimizer's state before it; a custom module through its float64
 * re-evaluations in the two runs, and its backward against finite
 * differences. A trace without data for that step, recorded by divtrace
 * run, is recorded again with them (its command re-run, and the re-run
 * required to give the same steps bit for bit). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "explain.h"
#include "torchcheck.h"
#include "util.h"

/* Append text to a "; "-separated list. */
static void et_append(char *list, size_t n, const char *text)
{
    size_t len = strlen(list), tl = strlen(text);
    if (len + tl + 3 >= n)
        return; /* the list is long enough to tell */
    if (len) {
        memcpy(list + len, "; ", 2);
        len += 2;
    }
    memcpy(list + len, text, tl + 1);
}

static void et_add_check(struct replay_result *rr, const struct replay_opcheck *c)
{
    if (rr->ncheck == rr->capcheck) {
        rr->capcheck = rr->capcheck ? 2 * rr->capcheck : 16;
        rr->check = dt_realloc(rr->check, (size_t)rr->capcheck * sizeof *rr->check);
    }
    rr->check[rr->ncheck++] = *c;
    if (c->cls == REPLAY_EXACT)
        rr->nexact++;
    else if (c->cls == REPLAY_ROUNDING)
        rr->nrounding++;
    else
        rr->nsemantic++;
}

/* Side x's check data of the step: from its trace, or by re-running its
 * command. 0, or -1 with s->not_checked (or the mismatch finding) set. */
static int et_load(struct explain_result *res, const struct explain_options *opt, int x,
                   struct tcheck_data *d, struct trace_file **rerun)
{
    struct explain_side *s = &res->side[x];
    uint64_t step = res->step;
    *rerun = NULL;
    int rc = tcheck_load(s->tf, step, d);
    if (rc == 0) {
        snprintf(s->source, sizeof s->source, "module data of step %" PRIu64 " stored in the trace", step);
        return 0;
    }
    if (rc < 0) {
        snprintf(s->not_checked, sizeof s->not_checked, "%s", dt_error());
        return DT_ERR;
    }
    if (!trace_config_get(&s->tf->cfg, "run_argv")) {
        snprintf(s->not_checked, sizeof s->not_checked,
                 "it holds no module data for step %" PRIu64 " and was not recorded by divtrace run, "
                 "which could record them again (record with check_steps=[%" PRIu64 "], "
                 "divtrace-python(7))", step, step);
        return DT_ERR;
    }
    char what[96];
    snprintf(what, sizeof what, "re-running %s's command for step %" PRIu64 "'s module data", s->label, step);
    explain_phase(opt, what);
    char path[4200];
    snprintf(path, sizeof path, "%s/divtrace-explain-%d-%c.dtr", tcheck_tmpdir(), (int)getpid(), s->label[0]);
    double t0 = dt_now();
    if (tcheck_rerun(s->tf, step, opt->self, path, !opt->progress) < 0) {
        snprintf(s->not_checked, sizeof s->not_checked, "%s", dt_error());
        unlink(path);
        return DT_ERR;
    }
    struct trace_file *tf;
    if (trace_open(&tf, path) < 0) {
        snprintf(s->not_checked, sizeof s->not_checked, "the re-run's trace: %s", dt_error());
        unlink(path);
        return DT_ERR;
    }
    uint64_t bad;
    int same = tcheck_same_steps(s->tf, tf, step, &bad);
    if (same != 1) {
        s->mismatch = 1;
        snprintf(s->finding, sizeof s->finding,
                 "%s's step %" PRIu64 " is not what re-running its command gives (run_cwd %s); the "
                 "module data of a re-run that parts from the recording are not the recording's",
                 s->label, bad, trace_config_get(&s->tf->cfg, "run_cwd"));
        trace_close(tf);
        unlink(path);
        return DT_ERR;
    }
    rc = tcheck_load(tf, step, d);
    unlink(path);   /* its checkpoint is read: the file is needed no more */
    if (rc != 0) {
        snprintf(s->not_checked, sizeof s->not_checked, "the re-run recorded no module data for step %"
                 PRIu64 "%s%s", step, rc < 0 ? ": " : "", rc < 0 ? dt_error() : "");
        trace_close(tf);
        return DT_ERR;
    }
    snprintf(s->source, sizeof s->source, "module data of step %" PRIu64 " from re-running its command "
             "(%.1f s; steps 0 to %" PRIu64 " bitwise as recorded)", step, dt_now() - t0, step);
    *rerun = tf;
    return 0;
}

/* The custom module whose backward fails its check in d, or NULL. */
static const struct tcheck_item *et_bad_backward(const struct tcheck_data *d, char *err, size_t n)
{
    for (int k = 0; k < d->n; k++)
        if (tcheck_custom_backward(&d->items[k], err, n) == 1)
            return &d->items[k];
    return NULL;
}

/* One pass over side x's ops: the origins of the first divergent step, or
 * (every) all its ops. In the pass over every op after rounding origins,
 * what cannot be checked is counted (torch_grads, torch_nodata) rather
 * than made a reason for no verdict: the origins were. */
static void et_pass(struct explain_result *res, const struct explain_options *opt, int x,
                    struct tcheck_data *d, const int *have, int every)
{
    char text[EXPLAIN_TEXT];
    struct explain_side *s = &res->side[x];
    s->replayed = 1;
    s->rr.first = s->rr.last = res->step;
    s->rr.from_ckpt = res->step;
    s->rr.reproduced = 1;
    s->rr.mismatch_step = -1;
    s->rr.mismatch_op = -1;
    const struct trace_file *tf = s->tf;
    int all = opt->all || every, second = every && !opt->all;
    int bad_backward_told = 0;
    for (int k = 0; k < (all ? (int)tf->nops : res->d.norigins); k++) {
        int op;
        if (all)
            op = k;
        else if (x == 0)
            op = res->d.origins[k];
        else if ((op = res->d.a_to_b[res->d.origins[k]]) < 0)
            continue;
        const struct trace_opdef *od = &tf->ops[op];
        if (od->kind == TRACE_KIND_GRAD) {
            /* a gradient: its module's backward is checked only for
             * custom modules, against finite differences */
            char err[32];
            const struct tcheck_item *bb = et_bad_backward(&d[x], err, sizeof err);
            const struct tcheck_item *ob = have[1 - x] ? et_bad_backward(&d[1 - x], err, sizeof err) : NULL;
            if (bb && !ob && !s->bug) {
                et_bad_backward(&d[x], err, sizeof err);
                s->bug = 1;
                snprintf(s->finding, sizeof s->finding,
                         "module %s (%s)'s backward is not the derivative of its forward (step %" PRIu64
                         ": in float64, its gradients and central differences of its forward part by "
                         "%.3g relative along every direction tried); the gradients where the runs "
                         "part (%s first) flow through it", bb->name, tcheck_class(bb), res->step,
                         atof(err), od->name);
                snprintf(text, sizeof text, "%s (%s): its backward fails the check against central "
                         "differences", bb->name, tcheck_class(bb));
                et_append(s->custom, sizeof s->custom, text);
            } else if (!bb && second) {
                s->torch_grads++;
            } else if (!bb && !bad_backward_told) {
                snprintf(text, sizeof text, "gradient (%s): gradients are checked only through custom "
                         "modules' backward", od->name);
                et_append(s->not_checked, sizeof s->not_checked, text);
                bad_backward_told = 1;
            }
            continue;
        }
        if (od->kind != TRACE_KIND_FORWARD && od->kind != TRACE_KIND_OPTIMIZER) {
            if (!all) {
                snprintf(text, sizeof text, "%s (%s, kind %s)", od->type, od->name,
                         trace_kind_name((enum trace_kind)od->kind));
                et_append(s->not_checked, sizeof s->not_checked, text);
            }
            continue;
        }
        const struct tcheck_item *it = tcheck_find(&d[x], od->name);
        if (!it || !it->spec) {
            if (second) {
                s->torch_nodata++;
                continue;
            }
            snprintf(text, sizeof text, "%s (%s): no module data", od->type, od->name);
            et_append(s->not_checked, sizeof s->not_checked, text);
            continue;
        }
        if (strcmp(it->type, "custom") == 0) {
            if (second) {
                /* past the origins its inputs differ between the runs: two
                 * float64 re-evaluations from other inputs tell nothing */
                s->torch_nodata++;
                continue;
            }
            const struct tcheck_item *other = have[1 - x] ? tcheck_find(&d[1 - x], od->name) : NULL;
            if (!other) {
                snprintf(text, sizeof text, "custom %s (%s): no data of the other run to compare",
                         tcheck_class(it), od->name);
                et_append(s->not_checked, sizeof s->not_checked, text);
                continue;
            }
            char cmp[EXPLAIN_TEXT / 2];
            int rc = x == 0 ? tcheck_custom_compare(it, other, cmp, sizeof cmp)
                            : tcheck_custom_compare(other, it, cmp, sizeof cmp);
            snprintf(text, sizeof text, "%s (%s): its float64 re-evaluation %s the other run's",
                     od->name, tcheck_class(it), rc == 1 ? "is another function than" : rc == 0 ?
                     "agrees with" : "could not be compared with");
            et_append(s->custom, sizeof s->custom, text);
            if (rc == 1 && !res->either[0])
                snprintf(res->either, sizeof res->either, "module %s (%s) computes another function in "
                         "each run (step %" PRIu64 "): %s", od->name, tcheck_class(it), res->step, cmp);
            else if (rc < 0) {
                snprintf(text, sizeof text, "custom %s (%s): %s", tcheck_class(it), od->name, cmp);
                et_append(s->not_checked, sizeof s->not_checked, text);
            }
            continue;
        }
        struct replay_opcheck c;
        char why[256];
        int rc = tcheck_item(it, &c, why, sizeof why);
        if (rc < 0) {
            snprintf(s->not_checked, sizeof s->not_checked, "%s", dt_error());
            break;
        }
        if (rc == 1) {
            if (second)
                s->torch_nodata++;
            else
                et_append(s->not_checked, sizeof s->not_checked, why);
            continue;
        }
        c.step = res->step;
        c.op = op;
        et_add_check(&s->rr, &c);
        if (c.cls == REPLAY_SEMANTIC && !s->bug) {
            s->bug = 1;
            snprintf(s->finding, sizeof s->finding,
                     "module %s (%s, step %" PRIu64 ") computes wrong values: %s%selement %" PRIu64
                     " is %.9g, exactly %.9g, %.3g times what any admissible float32 evaluation "
                     "could err", od->name, it->type, res->step, c.algorithm[0] ? c.algorithm : "",
                     c.algorithm[0] ? " " : "", c.worst, (double)c.worst_value, (double)c.worst_exact,
                     c.max_ratio);
        }
    }
    s->rr.seconds = 0;
}

void explain_torch(struct explain_result *res, const struct explain_options *opt)
{
    struct tcheck_data d[2];
    struct trace_file *rerun[2] = {NULL, NULL};
    int have[2];
    memset(d, 0, sizeof d);
    for (int x = 0; x < 2; x++) {
        res->side[x].torch = 1;
        have[x] = et_load(res, opt, x, &d[x], &rerun[x]) == 0;
    }
    for (int x = 0; x < 2; x++)
        if (have[x])
            et_pass(res, opt, x, d, have, 0);
    /* The origins are rounding. A module further on that computes wrong
     * values hides behind them (its inputs differ already): before
     * "rounding only", every op with module data, in both runs. */
    struct explain_side *A = &res->side[0], *B = &res->side[1];
    if (!opt->all && have[0] && have[1] && !A->bug && !B->bug && !res->either[0] &&
        !A->not_checked[0] && !B->not_checked[0] && !A->mismatch && !B->mismatch) {
        explain_phase(opt, "checking every module of the step");
        for (int x = 0; x < 2; x++) {
            struct explain_side *s = &res->side[x];
            replay_result_free(&s->rr);
            memset(&s->rr, 0, sizeof s->rr);
            s->all_checked = 1;
            et_pass(res, opt, x, d, have, 1);
        }
    }
    for (int x = 0; x < 2; x++) {
        tcheck_free(&d[x]);
        if (rerun[x])
            trace_close(rerun[x]);
    }
}
