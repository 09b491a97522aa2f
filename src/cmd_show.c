/* cmd_show.c: `divtrace show`: a trace as text (one line per op record, in
 * the spirit of xxhsum) or as JSON. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_show.h"
#include "trace.h"
#include "util.h"

static void show_usage(FILE *f)
{
    fputs("Usage: divtrace show [OPTION]... TRACE.dtr\n"
          "Print a trace: its header and configuration, then for each step a summary\n"
          "line and one line per op record: hash, step, op, shape, L2 norm.\n"
          "\n"
          "  -s, --step S     only step S\n"
          "      --summary    step summaries only, no op records\n"
          "      --ops        the op list (index, name, type, kind, shape, inputs) too\n"
          "      --json       one JSON object instead of the text\n"
          "      --export NAME  with --step S and -o FILE: write tensor NAME of the\n"
          "                   checkpoint at step S (the state before step S ran) to\n"
          "                   FILE as a NumPy .npy array (float32, its shape)\n"
          "  -o, --output FILE  the .npy file --export writes (replaced if it exists)\n"
          "  -q, --quiet      print nothing; only check that the trace reads (exit status)\n"
          "  -h, --help       show this help and exit\n"
          "  -V, --version    show the version and exit\n"
          "\n"
          "Exit status: 0 shown (also for a trace cut short by a killed run: its\n"
          "note says so), 2 trouble (not a trace, unreadable, damaged blocks or\n"
          "checkpoints, no such step).\n",
          f);
}

/* Step i's records, read from the file as they are printed (the trace was
 * opened with its summaries only, so memory stays one step's records). */
static int show_records(struct trace_file *tf, uint64_t i, struct trace_step *full)
{
    if (trace_read_step(tf, i, full) < 0) {
        fflush(stdout);
        cli_error("show", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    return 0;
}

static int show_text(struct trace_file *tf, int has_step, uint64_t only, int summary,
                     int list_ops)
{
    printf("# divtrace trace, format %u, written by divtrace %s\n", tf->version, tf->tool_version);
    printf("# %s\n", tf->complete ? (tf->end_status ? "complete (the run ended early)" : "complete")
                                   : tf->note);
    printf("# steps %" PRIu64 ", ops per step %u, checkpoints %u, trace level %s\n", tf->nsteps,
           tf->nops, tf->nckpt, trace_level_name(tf->level));
    for (size_t i = 0; i < tf->cfg.n; i++)
        printf("# %s = %s\n", tf->cfg.key[i], tf->cfg.val[i]);
    for (uint32_t i = 0; i < tf->nevents; i++)
        printf("# event: %s\n", tf->events[i].text);
    if (list_ops)
        for (uint32_t i = 0; i < tf->nops; i++) {
            const struct trace_opdef *o = &tf->ops[i];
            char shape[64];
            cli_shape(shape, sizeof shape, o->ndim, o->shape);
            printf("# op %u %s %s %s %s <-", i, o->name, o->type,
                   trace_kind_name((enum trace_kind)o->kind), shape);
            for (uint32_t k = 0; k < o->ninputs; k++) {
                uint32_t r = o->inputs[k] & ~TRACE_INPUT_PREV;
                printf(" %s%s", r < tf->nops ? tf->ops[r].name : "?",
                       (o->inputs[k] & TRACE_INPUT_PREV) ? "@prev" : "");
            }
            putchar('\n');
        }
    for (uint64_t s = 0; s < tf->nsteps; s++) {
        const struct trace_step *st = &tf->steps[s];
        if (has_step && st->step != only)
            continue;
        printf("step %" PRIu64 "  loss %.9g  grad_norm %.9g  root %016" PRIx64 "\n", st->step,
               st->loss, st->grad_norm, st->root);
        if (summary)
            continue;
        struct trace_step full;
        if (show_records(tf, s, &full) != 0)
            return CLI_EXIT_TROUBLE;
        for (uint32_t k = 0; k < full.nrec; k++) {
            const struct trace_oprec *r = &full.rec[k];
            const struct trace_opdef *o = &tf->ops[r->op];
            char shape[64];
            cli_shape(shape, sizeof shape, o->ndim, o->shape);
            printf("%016" PRIx64 "  %" PRIu64 "  %s  %s  %.9e", r->hash, st->step, o->name, shape,
                   r->l2);
            if (r->nan || r->inf)
                printf("  nan %" PRIu64 " inf %" PRIu64, r->nan, r->inf);
            putchar('\n');
        }
        free(full.rec);
    }
    return 0;
}

static int show_json(struct trace_file *tf, int has_step, uint64_t only, int summary)
{
    FILE *f = stdout;
    fprintf(f, "{\"format\": %u, \"tool_version\": ", tf->version);
    json_put_str(f, tf->tool_version);
    fprintf(f, ", \"complete\": %s, \"end_status\": %d, \"note\": ", tf->complete ? "true" : "false",
            tf->end_status);
    json_put_str(f, tf->note);
    fprintf(f, ", \"trace_level\": \"%s\",\n \"config\": {", trace_level_name(tf->level));
    for (size_t i = 0; i < tf->cfg.n; i++) {
        fputs(i ? ", " : "", f);
        json_put_str(f, tf->cfg.key[i]);
        fputs(": ", f);
        json_put_str(f, tf->cfg.val[i]);
    }
    fputs("},\n \"ops\": [", f);
    for (uint32_t i = 0; i < tf->nops; i++) {
        const struct trace_opdef *o = &tf->ops[i];
        fprintf(f, "%s\n  {\"index\": %u, \"name\": ", i ? "," : "", i);
        json_put_str(f, o->name);
        fputs(", \"type\": ", f);
        json_put_str(f, o->type); /* a trace's strings are any bytes but NUL */
        fprintf(f, ", \"kind\": \"%s\", \"shape\": [", trace_kind_name((enum trace_kind)o->kind));
        for (int d = 0; d < o->ndim; d++)
            fprintf(f, "%s%u", d ? ", " : "", o->shape[d]);
        fputs("], \"inputs\": [", f);
        for (uint32_t k = 0; k < o->ninputs; k++)
            fprintf(f, "%s{\"op\": %u, \"previous_step\": %s}", k ? ", " : "",
                    o->inputs[k] & ~TRACE_INPUT_PREV,
                    (o->inputs[k] & TRACE_INPUT_PREV) ? "true" : "false");
        fputs("]}", f);
    }
    fputs("],\n \"checkpoints\": [", f);
    for (uint32_t i = 0; i < tf->nckpt; i++)
        fprintf(f, "%s%" PRIu64, i ? ", " : "", tf->ckpt[i].step);
    fputs("],\n \"events\": [", f);
    for (uint32_t i = 0; i < tf->nevents; i++) {
        const struct trace_event *e = &tf->events[i];
        fprintf(f, "%s{\"code\": %u, \"step\": %" PRIu64 ", \"op\": ", i ? ", " : "", e->code, e->step);
        if (e->op == UINT32_MAX)
            fputs("null", f);
        else
            fprintf(f, "%u", e->op);
        fputs(", \"text\": ", f);
        json_put_str(f, e->text);
        fputc('}', f);
    }
    fputs("],\n \"steps\": [", f);
    int first = 1;
    for (uint64_t s = 0; s < tf->nsteps; s++) {
        const struct trace_step *st = &tf->steps[s];
        if (has_step && st->step != only)
            continue;
        fprintf(f, "%s\n  {\"step\": %" PRIu64 ", \"loss\": ", first ? "" : ",", st->step);
        first = 0;
        json_put_num(f, st->loss);
        fputs(", \"grad_norm\": ", f);
        json_put_num(f, st->grad_norm);
        fprintf(f, ", \"root\": \"%016" PRIx64 "\"", st->root);
        if (!summary) {
            struct trace_step full;
            if (show_records(tf, s, &full) != 0)
                return CLI_EXIT_TROUBLE;
            fputs(", \"records\": [", f);
            for (uint32_t k = 0; k < full.nrec; k++) {
                const struct trace_oprec *r = &full.rec[k];
                fprintf(f, "%s\n   {\"op\": %u, \"name\": ", k ? "," : "", r->op);
                json_put_str(f, tf->ops[r->op].name);
                fprintf(f, ", \"hash\": \"%016" PRIx64 "\", \"l2\": ", r->hash);
                json_put_num(f, r->l2);
                fputs(", \"min\": ", f);
                json_put_num(f, r->min);
                fputs(", \"max\": ", f);
                json_put_num(f, r->max);
                fprintf(f, ", \"nan\": %" PRIu64 ", \"inf\": %" PRIu64 ", \"sketch\": [", r->nan, r->inf);
                for (int j = 0; j < TRACE_SKETCH_LEN; j++) {
                    fputs(j ? ", " : "", f);
                    json_put_num(f, r->sketch[j]);
                }
                fputs("]}", f);
            }
            fputs("]", f);
            free(full.rec);
        }
        fputc('}', f);
    }
    fputs("]}\n", f);
    return 0;
}

/* A trace cut short by a kill is normal; damage is trouble: say so on stderr
 * (after the readable part was printed) and exit 2. Checkpoints are only
 * checked when read, so read them all. */
static int show_verify(struct trace_file *tf)
{
    if (strstr(tf->note, "corrupt")) {
        cli_error("show", "%s: %s", tf->path, tf->note);
        return CLI_EXIT_TROUBLE;
    }
    uint32_t bad = 0;
    char first[512] = "";
    for (uint32_t i = 0; i < tf->nckpt; i++) {
        struct trace_ckpt c;
        if (trace_read_ckpt(tf, i, &c) < 0) {
            if (!bad++)
                snprintf(first, sizeof first, "%s", dt_error());
            continue;
        }
        trace_ckpt_free(&c);
    }
    if (bad) {
        cli_error("show", "%u of %u checkpoints unreadable, the first: %s", bad, tf->nckpt, first);
        return CLI_EXIT_TROUBLE;
    }
    return 0;
}

int cmd_show(int argc, char **argv)
{
    static const struct option opts[] = {
        {"step", required_argument, NULL, 's'},
        {"summary", no_argument, NULL, 'S'},
        {"ops", no_argument, NULL, 'O'},
        {"json", no_argument, NULL, 'j'},
        {"export", required_argument, NULL, 'E'},
        {"output", required_argument, NULL, 'o'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int has_step = 0, summary = 0, json = 0, list_ops = 0, quiet = 0, c;
    uint64_t only = 0;
    const char *export_name = NULL, *out = NULL;
    optind = 0;
    while ((c = getopt_long(argc, argv, "s:qo:hV", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (cli_u64("--step", optarg, &only) < 0) {
                cli_error("show", "%s", dt_error());
                return CLI_EXIT_TROUBLE;
            }
            has_step = 1;
            break;
        case 'S': summary = 1; break;
        case 'O': list_ops = 1; break;
        case 'j': json = 1; break;
        case 'E': export_name = optarg; break;
        case 'o': out = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': show_usage(stdout); return 0;
        case 'V': return cli_version();
        default: return cli_usage_error("show");
        }
    }
    if (argc - optind != 1) {
        cli_error("show", "expected one trace file");
        return cli_usage_error("show");
    }
    if (out && !export_name) {
        cli_error("show", "-o names the file --export writes: give --export NAME too");
        return CLI_EXIT_TROUBLE;
    }
    if (export_name && (json || summary || list_ops)) {
        cli_error("show", "--export writes one tensor: it takes no --json, --summary or --ops");
        return CLI_EXIT_TROUBLE;
    }
    struct trace_file *tf;
    if (trace_open_summaries(&tf, argv[optind]) < 0) {
        cli_error("show", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    if (export_name) {
        int erc = show_export(tf, export_name, has_step, only, out);
        trace_close(tf);
        return erc;
    }
    int rc = 0;
    if (has_step && (tf->nsteps == 0 || only > tf->steps[tf->nsteps - 1].step)) {
        cli_error("show", "%s: no step %" PRIu64 " (the trace has %" PRIu64 " steps)", tf->path,
                  only, tf->nsteps);
        rc = CLI_EXIT_TROUBLE;
    } else if (quiet) {
        /* the exit status alone: readable, and its checkpoints too */
    } else if (json) {
        rc = show_json(tf, has_step, only, summary);
    } else {
        rc = show_text(tf, has_step, only, summary, list_ops);
    }
    if (rc == 0)
        rc = show_verify(tf);
    trace_close(tf);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("show", "write error on standard output");
        return CLI_EXIT_TROUBLE;
    }
    return rc;
}
