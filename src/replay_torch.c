/* replay_torch.c: `divtrace replay` of a PyTorch adapter trace. divtrace
 * holds no model of such a run, so "re-execution" is the recorded command
 * itself (a trace written by divtrace run keeps it): --against same re-runs
 * it and compares the steps bitwise; --against mpfr holds every module of
 * the step, from the data the adapter stored (or a re-run records), to the
 * exact oracle (torchcheck.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "replay.h"
#include "torchcheck.h"
#include "util.h"

static void rt_unlink(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/divtrace-replay-%d.dtr", tcheck_tmpdir(), (int)getpid());
    unlink(path);
}

/* A re-run of tf's command up to `step` (recording its module data), or
 * NULL with a message printed. */
static struct trace_file *rt_rerun(struct trace_file *tf, uint64_t step, int quiet)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/divtrace-replay-%d.dtr", tcheck_tmpdir(), (int)getpid());
    struct trace_file *r = NULL;
    if (tcheck_rerun(tf, step, "/proc/self/exe", path, quiet) < 0 || trace_open(&r, path) < 0) {
        cli_error("replay", "%s", dt_error());
        unlink(path);
        r = NULL;
    }
    return r;   /* the caller unlinks it once its checkpoints are read */
}

int replay_torch(struct trace_file *tf, const struct replay_options *opt, int all)
{
    uint64_t step = opt->step + opt->steps - 1;
    if (step >= tf->nsteps) {
        cli_error("replay", "%s holds steps 0 to %" PRIu64 ": no step %" PRIu64, tf->path,
                  tf->nsteps ? tf->nsteps - 1 : 0, step);
        return CLI_EXIT_TROUBLE;
    }
    double t0 = dt_now();
    struct trace_file *rerun = NULL;
    /* --json: the object is built aside and printed whole, once no trouble
     * cut it short */
    int text = !opt->quiet && !opt->json;
    char *jbuf = NULL;
    size_t jlen = 0;
    FILE *js = opt->json && !opt->quiet ? open_memstream(&jbuf, &jlen) : NULL;
    if (js) {
        fputs("{\"trace\": ", js);
        json_put_str(js, tf->path);
        fprintf(js, ", \"torch\": true, \"against\": \"%s\", \"first\": %" PRIu64 ", \"last\": %" PRIu64,
                opt->against == REPLAY_SAME ? "same" : "mpfr", opt->step, step);
    }
    if (opt->against == REPLAY_SAME) {
        if (!(rerun = rt_rerun(tf, step, opt->quiet))) {
            if (js)
                fclose(js);
            free(jbuf);
            return CLI_EXIT_TROUBLE;
        }
        uint64_t bad;
        int same = tcheck_same_steps(tf, rerun, step, &bad);
        trace_close(rerun);
        rt_unlink();
        if (js) {
            fprintf(js, ", \"reproduced\": %s, \"mismatch_step\": ", same ? "true" : "false");
            if (same)
                fputs("null", js);
            else
                fprintf(js, "%" PRIu64, bad);
            fputs("}\n", js);
            fclose(js);
            fwrite(jbuf, 1, jlen, stdout);
            free(jbuf);
        } else if (text && same)
            printf("%s: its command re-run (%.1f s): steps 0 to %" PRIu64 " match the recording bitwise\n"
                   "reproduced: every replayed step matches the recording bitwise\n", tf->path,
                   dt_now() - t0, step);
        else if (text)
            printf("%s: its command re-run (%.1f s)\nnot reproduced: step %" PRIu64 " differs from the "
                   "recording\n", tf->path, dt_now() - t0, bad);
        return same ? 0 : CLI_EXIT_FINDING;
    }
    int rc = 0;
    uint64_t total[3] = {0, 0, 0};
    if (js)
        fputs(", \"reproduced\": true, \"steps\": [", js);
    for (uint64_t s = opt->step; s <= step; s++) {
        struct tcheck_data d;
        const char *from = "stored in the trace";
        int lr = tcheck_load(tf, s, &d);
        if (lr == 1) {
            if (!rerun && !(rerun = rt_rerun(tf, step, opt->quiet))) {
                rc = CLI_EXIT_TROUBLE;
                break;
            }
            uint64_t bad;
            if (tcheck_same_steps(tf, rerun, step, &bad) != 1) {
                if (js) {
                    fclose(js);
                    printf("{\"trace\": ");
                    json_put_str(stdout, tf->path);
                    printf(", \"torch\": true, \"against\": \"mpfr\", \"reproduced\": false, "
                           "\"mismatch_step\": %" PRIu64 "}\n", bad);
                    free(jbuf);
                    js = NULL;
                }
                if (text)
                    printf("%s: its command re-run parts from the recording at step %" PRIu64 ": the "
                           "re-run's module data are not the recording's\n", tf->path, bad);
                trace_close(rerun);
                rt_unlink();
                return CLI_EXIT_FINDING;
            }
            from = "from re-running its command";
            lr = tcheck_load(rerun, s, &d);
        }
        if (lr != 0) {
            cli_error("replay", "%s: step %" PRIu64 ": %s", tf->path, s,
                      lr < 0 ? dt_error() : "no module data recorded");
            rc = CLI_EXIT_TROUBLE;
            break;
        }
        uint64_t n[3] = {0, 0, 0}, nnot = 0, nleft = 0;
        if (js) {
            fprintf(js, "%s\n {\"step\": %" PRIu64 ", \"module_data\": ", s == opt->step ? "" : ",", s);
            json_put_str(js, from);
            fputs(", \"ops\": [", js);
        }
        int jn = 0, jnot = 0;
        char *nbuf = NULL;
        size_t nlen = 0;
        FILE *jnc = js ? open_memstream(&nbuf, &nlen) : NULL;
        if (text)
            printf("step %" PRIu64 " against the exact oracle (module data %s):\n  %-28s %-16s %10s  %10s  %s\n",
                   s, from, "name", "type", "max ulp", "err/bound", "class");
        for (uint32_t op = 0; op < tf->nops; op++) {
            const struct tcheck_item *it = tcheck_find(&d, tf->ops[op].name);
            if (!it || (opt->ops && !strstr(opt->ops, tf->ops[op].name)))
                continue;
            struct replay_opcheck c;
            char why[256];
            int r = tcheck_item(it, &c, why, sizeof why);
            if (r < 0) {
                cli_error("replay", "%s", dt_error());
                rc = CLI_EXIT_TROUBLE;
                break;
            }
            if (r == 1) {
                char err[32];
                nnot++;
                if (tcheck_custom_backward(it, err, sizeof err) == 1 && rc == 0)
                    rc = CLI_EXIT_FINDING; /* a backward that is not its forward's derivative */
                if (text)
                    printf("  %-28s not checked: %s\n", it->name, why);
                if (jnc) {
                    fprintf(jnc, "%s{\"name\": ", jnot++ ? ", " : "");
                    json_put_str(jnc, it->name);
                    fputs(", \"why\": ", jnc);
                    json_put_str(jnc, why);
                    fputc('}', jnc);
                }
                continue;
            }
            n[c.cls]++;
            if (c.cls == REPLAY_SEMANTIC && rc == 0)
                rc = CLI_EXIT_FINDING;
            if (js) {
                c.step = s;
                c.op = (int)op;
                fputs(jn++ ? ",\n  " : "\n  ", js);
                replay_check_json(js, tf, &c);
            }
            if (!text || (!all && !replay_op_matters(&c, opt->threshold))) {
                nleft++;
                continue;
            }
            char ulp[32];
            snprintf(ulp, sizeof ulp, c.max_ulp == UINT64_MAX ? "NaN" : "%" PRIu64, c.max_ulp);
            printf("  %-28s %-16s %10s  %10.3g  %s%s%s\n", it->name, it->type, ulp, c.max_ratio,
                   replay_class_name(c.cls), c.algorithm[0] ? ", worst in " : "", c.algorithm);
            if (c.cls == REPLAY_SEMANTIC)
                printf("        worst element %" PRIu64 ": %.9g, exact %.9g, error %.3g, bound %.3g\n",
                       c.worst, (double)c.worst_value, (double)c.worst_exact,
                       fabs((double)c.worst_value - (double)c.worst_exact), c.worst_bound);
        }
        if (jnc) {
            fclose(jnc);
            fprintf(js, "], \"not_checked\": [%s]}", nbuf);
            free(nbuf);
        }
        for (int k = 0; k < 3; k++)
            total[k] += n[k];
        if (text && nleft) {
            printf("not listed: %" PRIu64 " modules, exact or rounding within ", nleft);
            if (opt->threshold == 1)
                printf("their bound");
            else
                printf("%g times their bound", opt->threshold);
            printf(" (--all lists them)\n");
        }
        if (text)
            printf("summary: %" PRIu64 " modules checked: %" PRIu64 " exact, %" PRIu64 " rounding, %" PRIu64
                   " SEMANTIC; %" PRIu64 " not checked\n", n[0] + n[1] + n[2], n[0], n[1], n[2], nnot);
        tcheck_free(&d);
        if (rc == CLI_EXIT_TROUBLE)
            break;
    }
    if (rerun) {
        trace_close(rerun);
        rt_unlink();
    }
    if (js) {
        fprintf(js, "],\n \"exact\": %" PRIu64 ", \"rounding\": %" PRIu64 ", \"semantic\": %" PRIu64 "}\n",
                total[0], total[1], total[2]);
        fclose(js);
        if (rc != CLI_EXIT_TROUBLE)
            fwrite(jbuf, 1, jlen, stdout);
        free(jbuf);
    }
    return rc;
}
