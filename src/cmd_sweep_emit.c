/* cmd_sweep_emit.c: `divtrace sweep --emit make` and `--emit slurm`: a
 * study's trials written as a Makefile or a Slurm job array instead of run;
 * and the sh quoting of their command lines, which --list uses too. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd_sweep.h"
#include "sweep.h"
#include "util.h"

/* ---- quoting ---- */

/* A word for sh (and, with make, inside a Makefile recipe: '$' doubled). */
void sweep_put_word(FILE *f, const char *s, int make)
{
    int plain = *s != 0;
    for (const char *q = s; *q && plain; q++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                       "_-+=./,:@%", *q) != NULL;
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (const char *q = s; *q; q++) {
        if (*q == '\'')
            fputs("'\\''", f);
        else if (*q == '$' && make)
            fputs("$$", f);
        else
            fputc(*q, f);
    }
    fputc('\'', f);
}

void sweep_put_args(FILE *f, char **args, int make)
{
    for (char **a = args; *a; a++) {
        fputc(' ', f);
        sweep_put_word(f, *a, make);
    }
}

/* ---- emitting a Makefile or a Slurm array ---- */

/* Paths written into a Makefile or a script unquoted by us must not hold
 * characters that make or sh would read. */
static int sweep_path_plain(const char *what, const char *p)
{
    if (strpbrk(p, "'$#\n\\\"`")) {
        dt_error_set("%s '%s': has a quote, '$', '#', '\\' or newline: cannot be written "
                     "into a Makefile or script", what, p);
        return DT_ERR;
    }
    return DT_OK;
}

/* The temporary file of path, a Makefile or script that names exe, cwd and
 * dir (NULL: none) unquoted, once they are plain. */
static FILE *sweep_emit_open(const char *path, const char *exe, const char *cwd, const char *dir,
                             char tmp[PATH_MAX])
{
    if (sweep_path_plain("the program's path", exe) < 0 ||
        sweep_path_plain("the working directory", cwd) < 0 ||
        (dir && sweep_path_plain("the output directory", dir) < 0))
        return NULL;
    return sweep_tmp_open(path, tmp);
}

/* A trial's file as a make target or prerequisite: its '=' (conditions
 * are named FACTOR=LEVEL) as $(EQ), since make reads a line with a bare
 * '=' as a variable's definition. */
static void sweep_put_target(FILE *f, const char *rel, const char *ext)
{
    for (const char *q = rel; *q; q++)
        if (*q == '=')
            fputs("$(EQ)", f);
        else
            fputc(*q, f);
    fputs(ext, f);
}

int sweep_emit_make(const struct sweep_spec *s, struct sweep_trial *tr, int n, const char *exe,
                    const char *cwd, const char *path)
{
    char tmp[PATH_MAX];
    FILE *f = sweep_emit_open(path, exe, cwd, NULL, tmp);
    if (!f)
        return DT_ERR;
    fprintf(f, "# Makefile of the sweep '%s', written by divtrace sweep --emit make.\n"
               "# One target per trial; run: make -C DIR -j N [DIVTRACE=/path/to/divtrace]\n"
               "# Record options' relative paths are relative to WORKDIR.\n"
               "DIVTRACE = %s\n"
               "WORKDIR = %s\n"
               "EQ := =\n"
               "\n"
               ".PHONY: all\n"
               "all:",
            s->name, exe, cwd);
    for (int i = 0; i < n; i++) {
        fputs(" \\\n\t", f);
        sweep_put_target(f, tr[i].rel, ".dtr");
    }
    fputs("\n", f);
    for (int i = 0; i < n; i++) {
        const char *r = tr[i].rel;
        char cdir[PATH_MAX];
        snprintf(cdir, sizeof cdir, "runs/%s", tr[i].c->name);
        char **args = sweep_trial_args(s, tr[i].c, tr[i].t);
        /* record's exit 1 (a carry fault) left a complete trace: kept */
        fputc('\n', f);
        sweep_put_target(f, r, ".dtr:");
        fprintf(f, "\n\t@mkdir -p %s\n\tcd '$(WORKDIR)' && { '$(DIVTRACE)' record", cdir);
        sweep_put_args(f, args, 1);
        fprintf(f, " -o '$(CURDIR)/%s.dtr.part' >'$(CURDIR)/%s.log' 2>&1 || [ $$? -eq 1 ]; }\n"
                   "\tmv %s.dtr.part %s.dtr\n",
                r, r, r, r);
        sweep_args_free(args);
    }
    return sweep_tmp_close(f, tmp, path);
}

int sweep_emit_slurm(const struct sweep_spec *s, struct sweep_trial *tr, int n, const char *exe,
                     const char *cwd, const char *dir, const char *path)
{
    char tmp[PATH_MAX];
    FILE *f = sweep_emit_open(path, exe, cwd, dir, tmp);
    if (!f)
        return DT_ERR;
    fprintf(f, "#!/bin/bash\n"
               "# Slurm job array of the sweep '%s', written by divtrace sweep --emit slurm:\n"
               "# one array task per trial; submit with: sbatch %s\n"
               "# DIVTRACE, WORKDIR and SWEEP_DIR may be set in the environment.\n"
               "#SBATCH --job-name=%s\n"
               "#SBATCH --array=0-%d\n"
               "set -u\n"
               "DIVTRACE=${DIVTRACE:-\"%s\"}\n"
               "WORKDIR=${WORKDIR:-\"%s\"}\n"
               "SWEEP_DIR=${SWEEP_DIR:-\"%s\"}\n"
               "case \"${SLURM_ARRAY_TASK_ID:?not a Slurm array task}\" in\n",
            s->name, path, s->name, n - 1, exe, cwd, dir);
    for (int i = 0; i < n; i++) {
        char **args = sweep_trial_args(s, tr[i].c, tr[i].t);
        fprintf(f, "%d) trial=%s; args=(", i, tr[i].rel);
        for (char **a = args; *a; a++) {
            if (a != args)
                fputc(' ', f);
            sweep_put_word(f, *a, 0);
        }
        fputs(") ;;\n", f);
        sweep_args_free(args);
    }
    fputs("*) echo \"divtrace sweep: no trial for array task $SLURM_ARRAY_TASK_ID\" >&2; exit 2 ;;\n"
          "esac\n"
          "out=\"$SWEEP_DIR/$trial\"\n"
          "# a complete trace is kept, as by divtrace sweep\n"
          "[ -e \"$out.dtr\" ] && exit 0\n"
          "mkdir -p \"$(dirname \"$out\")\" && cd \"$WORKDIR\" || exit 2\n"
          "\"$DIVTRACE\" record \"${args[@]}\" -o \"$out.dtr.part\" >\"$out.log\" 2>&1\n"
          "rc=$?\n"
          "# exit 1: trained, with a carry fault (a finding); the trace is complete\n"
          "if [ $rc -le 1 ]; then\n"
          "    mv \"$out.dtr.part\" \"$out.dtr\"\n"
          "else\n"
          "    rm -f \"$out.dtr.part\"\n"
          "    echo \"divtrace sweep: $trial failed (exit $rc): see $out.log\" >&2\n"
          "    exit 2\n"
          "fi\n",
          f);
    if (sweep_tmp_close(f, tmp, path) < 0)
        return DT_ERR;
    chmod(path, 0755);
    return DT_OK;
}
