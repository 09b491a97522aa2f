/* cmd_sweep.c: `divtrace sweep`: run a study's trials (divtrace-sweep(5))
 * as child processes of this same program, N at a time, resumably; or list
 * them; or write a Makefile or a Slurm job array that runs them
 * (cmd_sweep_emit.c). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "cli.h"
#include "cmd_sweep.h"
#include "progress.h"
#include "sweep.h"
#include "trace.h"
#include "util.h"

#define SWEEP_MAX_JOBS 1024
#define SWEEP_MAX_ONLY 16
/* How long interrupted children get to exit after SIGTERM before SIGKILL. */
#define SWEEP_KILL_GRACE_S 5.0

struct sweep_opts {
    const char *spec, *dir, *emit;
    const char *only[SWEEP_MAX_ONLY];
    int nonly, jobs, list, force, quiet, progress;
};

static void sweep_usage(FILE *f)
{
    fputs("Usage: divtrace sweep [OPTION]... SPEC -o DIR\n"
          "Run the trials of a study: every condition of the sweep file SPEC (see\n"
          "divtrace-sweep(5)) as `divtrace record` runs, N at a time, into DIR:\n"
          "DIR/runs/COND/tNN.dtr, each trial's output in tNN.log beside it. A rerun\n"
          "keeps the trials whose trace is complete and runs the others.\n"
          "\n"
          "Options:\n"
          "  -o, --output DIR   the study's directory (created if missing)\n"
          "  -j, --jobs N       run N trials at once (default 1)\n"
          "      --only SEL     only the conditions the selector picks (KEY=VALUE,\n"
          "                     cond=NAME or '*'; repeat for more)\n"
          "      --list         print the planned trials (condition, trial, done or\n"
          "                     pending, command line) and exit\n"
          "      --emit KIND    write instead of running: 'make' writes DIR/Makefile\n"
          "                     (make -C DIR -j N), 'slurm' writes DIR/sweep.slurm (a\n"
          "                     job array for sbatch, one task per trial)\n"
          "      --force        replace a different DIR/sweep.spec (traces are kept)\n"
          "  -q, --quiet        print nothing on stdout (no summary) and no progress\n"
          "      --progress     progress as plain lines on stderr, every 10 s and at the\n"
          "                     end (on a terminal a line is rewritten in place without\n"
          "                     it)\n"
          "  -h, --help         show this help and exit\n"
          "  -V, --version      show the version and exit\n"
          "\n"
          "Exit status: 0 every trial done; 1 every trial done, and some recorded a\n"
          "carry fault (state changed between steps: a finding; its trace is kept);\n"
          "2 trouble or a trial failed (its log is kept); interrupted by SIGINT or\n"
          "SIGTERM, the sweep stops its trials, removes their partial traces and dies\n"
          "of the same signal (130, 143).\n",
          f);
}

/* ---- small helpers ---- */

static int sweep_join(char *out, size_t n, const char *dir, const char *rel, const char *ext)
{
    if ((size_t)snprintf(out, n, "%s/%s%s", dir, rel, ext) >= n) {
        dt_error_set("%s/%s%s: path too long", dir, rel, ext);
        return DT_ERR;
    }
    return DT_OK;
}

static int sweep_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* mkdir -p */
static int sweep_mkdirs(const char *path)
{
    char buf[PATH_MAX];
    if (strlen(path) >= sizeof buf) {
        dt_error_set("%s: path too long", path);
        return DT_ERR;
    }
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != 0)
            continue;
        char saved = *p;
        *p = 0;
        if (mkdir(buf, 0777) < 0 && errno != EEXIST) {
            dt_error_set("cannot create %s: %s", buf, strerror(errno));
            return DT_ERR;
        }
        *p = saved;
        if (!saved)
            break;
    }
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
        dt_error_set("%s: not a directory", path);
        return DT_ERR;
    }
    return DT_OK;
}

/* Whether the trace at path is complete (footer present and valid); and
 * into *carry (when not NULL) whether it holds a carry fault event. */
static int sweep_trace_complete(const char *path, char *why, size_t n, int *carry)
{
    struct trace_file *tf;
    if (trace_open(&tf, path) < 0) {
        snprintf(why, n, "%s", dt_error());
        return 0;
    }
    int ok = tf->complete;
    snprintf(why, n, "%s", tf->note[0] ? tf->note : "no index footer");
    for (uint32_t i = 0; carry && i < tf->nevents; i++)
        if (tf->events[i].code == TRACE_EVENT_CARRY)
            *carry = 1;
    trace_close(tf);
    return ok;
}

/* The whole file, or NULL (errno set). */
static char *sweep_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = dt_malloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap)
            buf = dt_realloc(buf, cap *= 2);
    }
    fclose(f);
    buf[len] = 0;
    return buf;
}

/* Files are written through a temporary file and a rename, so that a file
 * is whole or missing: open tmp, the temporary file of path, or NULL
 * with dt_error set. */
FILE *sweep_tmp_open(const char *path, char tmp[PATH_MAX])
{
    if ((size_t)snprintf(tmp, PATH_MAX, "%s.tmp", path) >= PATH_MAX) {
        dt_error_set("%s: path too long", path);
        return NULL;
    }
    FILE *f = fopen(tmp, "w");
    if (!f)
        dt_error_set("cannot write %s: %s", tmp, strerror(errno));
    return f;
}

/* Close f, opened by sweep_tmp_open, and rename tmp to path (tmp removed
 * when anything failed). */
int sweep_tmp_close(FILE *f, const char *tmp, const char *path)
{
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) < 0) {
        dt_error_set("cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return DT_ERR;
    }
    return DT_OK;
}

static int sweep_write_file(const char *path, const char *text)
{
    char tmp[PATH_MAX];
    FILE *f = sweep_tmp_open(path, tmp);
    if (!f)
        return DT_ERR;
    fputs(text, f);
    return sweep_tmp_close(f, tmp, path);
}

/* ---- the plan ---- */

static int sweep_selected(const struct sweep_opts *o, const struct sweep_cond *c)
{
    if (o->nonly == 0)
        return 1;
    for (int i = 0; i < o->nonly; i++)
        if (sweep_cond_matches(c, o->only[i]))
            return 1;
    return 0;
}

/* The trials of the selected conditions, in file order; each marked DONE
 * when DIR holds its complete trace. */
static struct sweep_trial *sweep_plan(const struct sweep_spec *s, const struct sweep_opts *o,
                                      int *n)
{
    int cap = 0;
    for (int i = 0; i < s->ncond; i++)
        if (sweep_selected(o, &s->cond[i]))
            cap += s->cond[i].trials;
    struct sweep_trial *tr = dt_calloc((size_t)(cap ? cap : 1), sizeof *tr);
    *n = 0;
    for (int i = 0; i < s->ncond; i++) {
        const struct sweep_cond *c = &s->cond[i];
        if (!sweep_selected(o, c))
            continue;
        for (int t = 1; t <= c->trials; t++) {
            struct sweep_trial *x = &tr[(*n)++];
            x->c = c;
            x->t = t;
            sweep_trial_path(c, t, "", x->rel, sizeof x->rel);
            char path[PATH_MAX], why[256];
            x->state = SWEEP_PENDING;
            if (sweep_join(path, sizeof path, o->dir, x->rel, ".dtr") == DT_OK &&
                sweep_exists(path) && sweep_trace_complete(path, why, sizeof why, &x->carry))
                x->state = SWEEP_DONE;
        }
    }
    return tr;
}

static int sweep_list(const struct sweep_spec *s, const struct sweep_opts *o,
                      struct sweep_trial *tr, int n)
{
    int w = 4;
    for (int i = 0; i < n; i++)
        if ((int)strlen(tr[i].c->name) > w)
            w = (int)strlen(tr[i].c->name);
    for (int i = 0; i < n; i++) {
        char **args = sweep_trial_args(s, tr[i].c, tr[i].t);
        printf("%-*s t%02d %-7s divtrace record", w, tr[i].c->name, tr[i].t,
               tr[i].state == SWEEP_DONE ? "done" : "pending");
        sweep_put_args(stdout, args, 0);
        char out[PATH_MAX];
        snprintf(out, sizeof out, "%s/%s.dtr", o->dir, tr[i].rel);
        fputs(" -o ", stdout);
        sweep_put_word(stdout, out, 0);
        fputc('\n', stdout);
        sweep_args_free(args);
    }
    return 0;
}

/* ---- running ---- */

struct sweep_run {
    const struct sweep_spec *s;
    const struct sweep_opts *o;
    const char *exe;
    struct sweep_trial *tr;
    int n;
    int planned, done, running, failed, kept;
    double t0;
    struct progress prog;       /* progress on stderr (progress.h) */
    sigset_t oldmask;
};

static void sweep_progress(struct sweep_run *r, int final)
{
    if (!final && !progress_due(&r->prog))
        return;
    double el = dt_now() - r->t0;
    int fin = r->done + r->failed;
    char est[64] = "";
    if (fin > 0 && fin < r->planned) {
        double left = el / fin * (r->planned - fin);
        snprintf(est, sizeof est, ", ~%d:%02d left", (int)left / 60, (int)left % 60);
    }
    if (final)
        progress_end(&r->prog, "%d done, %d failed, of %d; %d:%02d elapsed", r->done, r->failed,
                     r->planned, (int)el / 60, (int)el % 60);
    else
        progress_show(&r->prog, "%d done, %d running, %d failed, of %d; %d:%02d elapsed%s", r->done,
                      r->running, r->failed, r->planned, (int)el / 60, (int)el % 60, est);
}

/* Start trial x: record into tNN.dtr.part, stdout and stderr into tNN.log. */
static int sweep_start(struct sweep_run *r, struct sweep_trial *x)
{
    char cdir[PATH_MAX], part[PATH_MAX], logp[PATH_MAX];
    if ((size_t)snprintf(cdir, sizeof cdir, "%s/runs/%s", r->o->dir, x->c->name) >= sizeof cdir ||
        sweep_join(part, sizeof part, r->o->dir, x->rel, ".dtr.part") < 0 ||
        sweep_join(logp, sizeof logp, r->o->dir, x->rel, ".log") < 0) {
        dt_error_set("%s/%s: path too long", r->o->dir, x->rel);
        return DT_ERR;
    }
    if (sweep_mkdirs(cdir) < 0)
        return DT_ERR;
    unlink(part);
    int log = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (log < 0) {
        dt_error_set("cannot write %s: %s", logp, strerror(errno));
        return DT_ERR;
    }
    char **args = sweep_trial_args(r->s, x->c, x->t);
    int na = 0;
    while (args[na])
        na++;
    char **argv = dt_calloc((size_t)na + 5, sizeof *argv);
    argv[0] = "divtrace";
    argv[1] = "record";
    for (int i = 0; i < na; i++)
        argv[2 + i] = args[i];
    argv[2 + na] = "-o";
    argv[3 + na] = part;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
#ifdef __linux__
        /* A sweep killed outright takes its trials with it. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
#endif
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        sigprocmask(SIG_SETMASK, &r->oldmask, NULL);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        dup2(log, 1);
        dup2(log, 2);
        execv(r->exe, argv);
        fprintf(stderr, "divtrace sweep: cannot run %s: %s\n", r->exe, strerror(errno));
        _exit(127);
    }
    int err = errno;
    close(log);
    free(argv);
    sweep_args_free(args);
    if (pid < 0) {
        dt_error_set("cannot start a trial: %s", strerror(err));
        return DT_ERR;
    }
    x->pid = pid;
    x->state = SWEEP_RUNNING;
    r->running++;
    return DT_OK;
}

static struct sweep_trial *sweep_by_pid(struct sweep_run *r, pid_t pid)
{
    for (int i = 0; i < r->n; i++)
        if (r->tr[i].state == SWEEP_RUNNING && r->tr[i].pid == pid)
            return &r->tr[i];
    return NULL;
}

/* A child has exited with wait status st. */
static void sweep_finish(struct sweep_run *r, struct sweep_trial *x, int st)
{
    char part[PATH_MAX], dtr[PATH_MAX];
    sweep_join(part, sizeof part, r->o->dir, x->rel, ".dtr.part");
    sweep_join(dtr, sizeof dtr, r->o->dir, x->rel, ".dtr");
    r->running--;
    x->pid = 0;
    char why[128] = "";
    /* exit 1: the run trained and its trace is complete, with a carry
     * fault (a state changed between steps): a finding, kept and said */
    if (WIFEXITED(st) && WEXITSTATUS(st) <= 1) {
        if (rename(part, dtr) == 0) {
            x->state = SWEEP_OK;
            r->done++;
            if (WEXITSTATUS(st) == 1) {
                x->carry = 1;
                progress_clear(&r->prog);
                fprintf(stderr, "divtrace sweep: %s: a carry fault (record exited 1; the trace is kept): "
                        "see %s/%s.log\n", x->rel, r->o->dir, x->rel);
            }
            return;
        }
        snprintf(why, sizeof why, "record exited 0 but wrote no trace (%s)", strerror(errno));
    } else if (WIFEXITED(st)) {
        snprintf(why, sizeof why, "record exited with status %d", WEXITSTATUS(st));
    } else if (WIFSIGNALED(st)) {
        snprintf(why, sizeof why, "record killed by signal %d", WTERMSIG(st));
    }
    unlink(part);
    x->state = SWEEP_FAILED;
    r->failed++;
    progress_clear(&r->prog);
    fprintf(stderr, "divtrace sweep: %s failed: %s: see %s/%s.log\n", x->rel, why, r->o->dir,
            x->rel);
}

/* Stop every running trial (SIGTERM, then SIGKILL after a grace period) and
 * remove their partial traces. */
static void sweep_stop_all(struct sweep_run *r)
{
    for (int i = 0; i < r->n; i++)
        if (r->tr[i].state == SWEEP_RUNNING)
            kill(r->tr[i].pid, SIGTERM);
    double deadline = dt_now() + SWEEP_KILL_GRACE_S;
    int killed = 0;
    while (r->running > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid > 0) {
            struct sweep_trial *x = sweep_by_pid(r, pid);
            if (x) {
                char part[PATH_MAX];
                sweep_join(part, sizeof part, r->o->dir, x->rel, ".dtr.part");
                unlink(part);
                x->state = SWEEP_PENDING;
                r->running--;
            }
            continue;
        }
        if (pid < 0 && errno == ECHILD)
            break;
        if (!killed && dt_now() > deadline) {
            for (int i = 0; i < r->n; i++)
                if (r->tr[i].state == SWEEP_RUNNING)
                    kill(r->tr[i].pid, SIGKILL);
            killed = 1;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Returns the exit status, or dies of an interrupting signal. */
static int sweep_run_all(struct sweep_run *r)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, &r->oldmask);
    int next = 0, stop_sig = 0, trouble = 0;
    r->t0 = dt_now();
    for (;;) {
        while (!stop_sig && !trouble && r->running < r->o->jobs && next < r->n) {
            struct sweep_trial *x = &r->tr[next++];
            if (x->state != SWEEP_PENDING)
                continue;
            if (sweep_start(r, x) < 0) {
                progress_clear(&r->prog);
                cli_error("sweep", "%s", dt_error());
                trouble = 1;
            }
        }
        if (r->running == 0 && (next >= r->n || stop_sig || trouble))
            break;
        sweep_progress(r, 0);
        struct timespec ts = {1, 0};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
            stop_sig = sig;
            sweep_stop_all(r);
            break;
        }
        int st;
        pid_t pid;
        while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
            struct sweep_trial *x = sweep_by_pid(r, pid);
            if (x)
                sweep_finish(r, x, st);
        }
        if (trouble && r->running > 0) {
            sweep_stop_all(r);
            break;
        }
    }
    if (stop_sig) {
        progress_clear(&r->prog);
        fprintf(stderr, "divtrace sweep: interrupted: %d trials done, the others rerun when the "
                "sweep is run again\n", r->done + r->kept);
        fflush(stderr);
        signal(stop_sig, SIG_DFL);
        sigprocmask(SIG_SETMASK, &r->oldmask, NULL);
        raise(stop_sig);
        return 128 + stop_sig;
    }
    sigprocmask(SIG_SETMASK, &r->oldmask, NULL);
    if (trouble)
        return CLI_EXIT_TROUBLE;
    sweep_progress(r, 1);
    if (r->failed) {
        const struct sweep_trial *first = NULL;
        for (int i = 0; i < r->n && !first; i++)
            if (r->tr[i].state == SWEEP_FAILED)
                first = &r->tr[i];
        fprintf(stderr, "divtrace sweep: %d of %d trials failed: see %s/%s.log%s\n", r->failed,
                r->n, r->o->dir, first->rel, r->failed > 1 ? " and the other failed trials' logs" : "");
        return CLI_EXIT_TROUBLE;
    }
    if (!r->o->quiet)
        printf("sweep %s: %d of %d trials done (%d run now, %d kept) in %.1f s: %s/runs\n",
               r->s->name, r->done + r->kept, r->n, r->done, r->kept, dt_now() - r->t0, r->o->dir);
    /* a carry fault is a finding (record's exit 1), also in a trial kept
     * from an earlier run of the sweep */
    int ncarry = 0;
    const struct sweep_trial *first = NULL;
    for (int i = 0; i < r->n; i++)
        if (r->tr[i].carry && ncarry++ == 0)
            first = &r->tr[i];
    if (ncarry) {
        fprintf(stderr, "divtrace sweep: %d of %d trials recorded a carry fault (state changed between "
                "steps), the first %s: see its log, or divtrace explain it against a clean trial\n",
                ncarry, r->n, first->rel);
        return CLI_EXIT_FINDING;
    }
    return 0;
}

/* ---- the command ---- */

enum { OPT_ONLY = 256, OPT_LIST, OPT_EMIT, OPT_FORCE, OPT_PROGRESS };

static const struct option sweep_options[] = {
    {"output", required_argument, NULL, 'o'},
    {"jobs", required_argument, NULL, 'j'},
    {"only", required_argument, NULL, OPT_ONLY},
    {"list", no_argument, NULL, OPT_LIST},
    {"emit", required_argument, NULL, OPT_EMIT},
    {"force", no_argument, NULL, OPT_FORCE},
    {"quiet", no_argument, NULL, 'q'},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

static int sweep_parse_opts(int argc, char **argv, struct sweep_opts *o, int *exit_now)
{
    memset(o, 0, sizeof *o);
    o->jobs = 1;
    *exit_now = -1;
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:j:qhV", sweep_options, NULL)) != -1) {
        switch (c) {
        case 'o': o->dir = optarg; break;
        case 'j':
            if (cli_int("-j", optarg, 1, SWEEP_MAX_JOBS, &o->jobs) < 0) {
                cli_error("sweep", "%s", dt_error());
                *exit_now = CLI_EXIT_TROUBLE;
                return DT_ERR;
            }
            break;
        case OPT_ONLY:
            if (o->nonly == SWEEP_MAX_ONLY) {
                cli_error("sweep", "--only: at most %d selectors", SWEEP_MAX_ONLY);
                *exit_now = CLI_EXIT_TROUBLE;
                return DT_ERR;
            }
            o->only[o->nonly++] = optarg;
            break;
        case OPT_LIST: o->list = 1; break;
        case OPT_EMIT:
            if (strcmp(optarg, "make") != 0 && strcmp(optarg, "slurm") != 0) {
                cli_error("sweep", "--emit '%s': expected 'make' or 'slurm'", optarg);
                *exit_now = CLI_EXIT_TROUBLE;
                return DT_ERR;
            }
            o->emit = optarg;
            break;
        case OPT_FORCE: o->force = 1; break;
        case 'q': o->quiet = 1; break;
        case OPT_PROGRESS: o->progress = 1; break;
        case 'h': sweep_usage(stdout); *exit_now = 0; return DT_ERR;
        case 'V': *exit_now = cli_version(); return DT_ERR;
        default: *exit_now = cli_usage_error("sweep"); return DT_ERR;
        }
    }
    if (optind >= argc) {
        cli_error("sweep", "no sweep file given");
        *exit_now = cli_usage_error("sweep");
        return DT_ERR;
    }
    if (optind + 1 < argc) {
        cli_error("sweep", "unexpected argument '%s'", argv[optind + 1]);
        *exit_now = cli_usage_error("sweep");
        return DT_ERR;
    }
    o->spec = argv[optind];
    if (!o->dir || !*o->dir) {
        cli_error("sweep", "no output directory: give -o DIR");
        *exit_now = CLI_EXIT_TROUBLE;
        return DT_ERR;
    }
    if (o->list && o->emit) {
        cli_error("sweep", "--list and --emit: give one");
        *exit_now = CLI_EXIT_TROUBLE;
        return DT_ERR;
    }
    return DT_OK;
}

/* DIR/sweep.spec: written if absent; if present it must hold the same text
 * (or --force replaces it). */
static int sweep_check_spec(const struct sweep_spec *s, const struct sweep_opts *o)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/sweep.spec", o->dir) >= sizeof path) {
        dt_error_set("%s: path too long", o->dir);
        return DT_ERR;
    }
    char *old = sweep_read_file(path);
    if (!old && errno != ENOENT) {
        dt_error_set("cannot read %s: %s", path, strerror(errno));
        return DT_ERR;
    }
    int same = old && strcmp(old, s->text) == 0;
    free(old);
    if (same)
        return DT_OK;
    if (old && !o->force) {
        dt_error_set("%s differs from %s: DIR belongs to another sweep (--force replaces the "
                     "spec and keeps the traces)", path, o->spec);
        return DT_ERR;
    }
    return sweep_write_file(path, s->text);
}

int cmd_sweep(int argc, char **argv)
{
    struct sweep_opts o;
    int rc;
    if (sweep_parse_opts(argc, argv, &o, &rc) < 0)
        return rc;
    struct sweep_spec s;
    if (sweep_spec_load(&s, o.spec) < 0) {
        cli_error("sweep", "%s", dt_error());
        return CLI_EXIT_TROUBLE;
    }
    rc = CLI_EXIT_TROUBLE;
    struct sweep_trial *tr = NULL;
    int lockfd = -1;
    for (int i = 0; i < o.nonly; i++) {
        int hit = 0;
        for (int k = 0; k < s.ncond && !hit; k++)
            hit = sweep_cond_matches(&s.cond[k], o.only[i]);
        if (!hit) {
            cli_error("sweep", "--only '%s': matches no condition of %s", o.only[i], o.spec);
            goto out;
        }
    }
    if (sweep_check_trials(&s, o.spec, o.only, o.nonly) < 0)
        goto out;
    char exe[PATH_MAX], cwd[PATH_MAX], adir[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        cli_error("sweep", "cannot find this program through /proc/self/exe: %s", strerror(errno));
        goto out;
    }
    exe[len] = 0;
    if (!getcwd(cwd, sizeof cwd)) {
        cli_error("sweep", "cannot get the working directory: %s", strerror(errno));
        goto out;
    }
    int n;
    tr = sweep_plan(&s, &o, &n);
    if (o.list) {
        rc = o.quiet ? 0 : sweep_list(&s, &o, tr, n);
        goto out;
    }
    if (sweep_mkdirs(o.dir) < 0 || access(o.dir, W_OK) < 0) {
        if (access(o.dir, F_OK) == 0 && access(o.dir, W_OK) < 0)
            dt_error_set("%s: not writable: %s", o.dir, strerror(errno));
        cli_error("sweep", "%s", dt_error());
        goto out;
    }
    /* One sweep at a time in a directory; the lock goes with the process. */
    lockfd = open(o.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
        cli_error("sweep", "%s: in use by another divtrace sweep", o.dir);
        goto out;
    }
    if (sweep_check_spec(&s, &o) < 0) {
        cli_error("sweep", "%s", dt_error());
        goto out;
    }
    if (o.emit) {
        if (!realpath(o.dir, adir)) {
            cli_error("sweep", "%s: %s", o.dir, strerror(errno));
            goto out;
        }
        for (int i = 0; i < n; i++) {
            char cdir[PATH_MAX];
            snprintf(cdir, sizeof cdir, "%s/runs/%s", o.dir, tr[i].c->name);
            if (sweep_mkdirs(cdir) < 0) {
                cli_error("sweep", "%s", dt_error());
                goto out;
            }
        }
        int mk = strcmp(o.emit, "make") == 0;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", o.dir, mk ? "Makefile" : "sweep.slurm");
        int e = mk ? sweep_emit_make(&s, tr, n, exe, cwd, path)
                   : sweep_emit_slurm(&s, tr, n, exe, cwd, adir, path);
        if (e < 0) {
            cli_error("sweep", "%s", dt_error());
            goto out;
        }
        if (!o.quiet) {
            if (mk)
                printf("wrote %s: %d trials; run them with: make -C %s -j N\n", path, n, o.dir);
            else
                printf("wrote %s: %d trials as array tasks 0-%d; submit with: sbatch %s\n", path,
                       n, n - 1, path);
        }
        rc = 0;
        goto out;
    }
    struct sweep_run r = {.s = &s, .o = &o, .exe = exe, .tr = tr, .n = n};
    for (int i = 0; i < n; i++) {
        char part[PATH_MAX], dtr[PATH_MAX], why[256];
        if (sweep_join(part, sizeof part, o.dir, tr[i].rel, ".dtr.part") < 0 ||
            sweep_join(dtr, sizeof dtr, o.dir, tr[i].rel, ".dtr") < 0) {
            cli_error("sweep", "%s", dt_error());
            goto out;
        }
        if (tr[i].state == SWEEP_DONE) {
            r.kept++;
            continue;
        }
        /* Left by a sweep that was killed: the trial runs again. */
        unlink(part);
        if (sweep_exists(dtr) && !sweep_trace_complete(dtr, why, sizeof why, NULL)) {
            fprintf(stderr, "divtrace sweep: %s.dtr is not a complete trace (%s): running it "
                    "again\n", tr[i].rel, why);
            unlink(dtr);
        }
        r.planned++;
    }
    progress_init(&r.prog, progress_mode_pick(o.quiet, o.progress), "divtrace sweep");
    rc = sweep_run_all(&r);
out:
    if (lockfd >= 0)
        close(lockfd);
    free(tr);
    sweep_spec_free(&s);
    return rc;
}
