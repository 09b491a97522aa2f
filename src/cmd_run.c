/* cmd_run.c: `divtrace run`: record an unchanged PyTorch training script.
 * The work is the Python package's (src/python/divtrace/_run.py,
 * divtrace-run(1)); this program answers --help and --version itself,
 * makes the package and the library findable, checks that the Python has
 * them and torch, and replaces itself with
 * ${DIVTRACE_PYTHON:-python3} -m divtrace run ARG..., so that the script's
 * output, signals and exit status are the Python's own.
 *
 * Found beside this program: in a build tree (src/divtrace with
 * src/.libs/libdivtrace.so), the library there and the package in the
 * source tree's src/python; in pip's bundle (divtrace/_bin/divtrace), the
 * library there and the package above it; after make install, the library
 * in ../lib. A DIVTRACE_LIB given is kept; the package found goes first on
 * PYTHONPATH, so that the package of the same sources is the one run. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

extern char **environ;

/* Kept word for word as USAGE in src/python/divtrace/_run.py
 * (tests/torch/test_run.py compares the two). */
static void run_usage(FILE *f)
{
    fputs("Usage: divtrace run -o TRACE.dtr [OPTION]... -- [python] SCRIPT [ARG]...\n"
          "  or:  divtrace run -o TRACE.dtr [OPTION]... -- python -m MODULE [ARG]...\n"
          "Run a PyTorch training script unchanged and record its training as a trace:\n"
          "one step per optimizer.step(), with the model's module outputs, the loss\n"
          "modules it calls, gradients and updates (see divtrace-python(7)).\n"
          "\n"
          "  -o, --output PATH     the trace to write (required); under torch.distributed\n"
          "                        each rank writes its own\n"
          "      --steps N         record the first N steps, then close the trace and let\n"
          "                        the script go on unrecorded\n"
          "      --exit-after N    after N steps, close the trace and end the script as\n"
          "                        sys.exit(0) would\n"
          "      --modules LIST    record only the modules whose names match one of the\n"
          "                        comma-separated fnmatch patterns (fc*,encoder.*);\n"
          "                        default every module\n"
          "      --level LEVEL     op (default), param or step\n"
          "      --checkpoint-every N  checkpoint parameters and optimizer state before\n"
          "                        steps 0, N, 2N, ... and at the end (default 0: none)\n"
          "      --check-steps LIST  store the inputs, parameters and outputs of the\n"
          "                        modules at these steps for oracle checks: numbers\n"
          "                        and ranges (0,5,10-12), first, or last (with --steps\n"
          "                        or --exit-after)\n"
          "      --check-bytes N   store at most N bytes per check step (suffixes K, M,\n"
          "                        G; default 64M)\n"
          "      --config KEY=VALUE  add KEY to the trace's header (repeatable)\n"
          "      --capture HOW     how module outputs are caught: wrap (the default; hooks\n"
          "                        for a model holding nn.DataParallel) or hooks\n"
          "  -q, --quiet           no notes and no summary line\n"
          "  -h, --help            show this help and exit\n"
          "  -V, --version         show the version and exit\n"
          "\n"
          "The command after -- runs in the Python that runs divtrace run: python\n"
          "SCRIPT, python -m MODULE, or SCRIPT, with python's -u, -B and -W.\n"
          "\n"
          "Exit status: the script's own (1 after an uncaught exception), or 2 when\n"
          "recording was refused or failed: a bad option, no model or optimizer\n"
          "found, several optimizers, gradient accumulation, optimizer.step(closure),\n"
          "a skipped optimizer step, a trace that could not be written.\n",
          f);
}

/* Exits 0 when the Python finds the divtrace package (with divtrace run in
 * it) and torch without importing them; else one line and exit 2. */
static const char run_check_py[] =
    "import importlib.util as u, os, sys\n"
    "s = u.find_spec('divtrace')\n"
    "d = list(s.submodule_search_locations or [''])[0] if s else ''\n"
    "if not s:\n"
    "    m = 'cannot import the divtrace package (pip install it, or PYTHONPATH=SRCDIR/src/python)'\n"
    "elif not all(os.path.isfile(os.path.join(d, f)) for f in ('_run.py', '_run_hooks.py', '__main__.py')):\n"
    "    m = 'the divtrace package in %s has no divtrace run (_run.py, _run_hooks.py, __main__.py): it is older "
    "than this program' % d\n"
    "elif not u.find_spec('torch'):\n"
    "    m = 'cannot import torch (pip install torch)'\n"
    "else:\n"
    "    sys.exit(0)\n"
    "sys.stderr.write('divtrace run: %s: %s\\n' % (sys.executable, m))\n"
    "sys.exit(2)\n";

static int run_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* "-h"/"--help" (1) or else "-V"/"--version" (2) among the
 * options before the command, read as the Python side reads them (to the
 * first word that is not an option); 0 for none, or for a bad option
 * anywhere there, which the Python side reports. */
static int run_wants_info(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"steps", required_argument, NULL, 0},
        {"exit-after", required_argument, NULL, 0},
        {"modules", required_argument, NULL, 0},
        {"level", required_argument, NULL, 0},
        {"checkpoint-every", required_argument, NULL, 0},
        {"check-steps", required_argument, NULL, 0},
        {"check-bytes", required_argument, NULL, 0},
        {"config", required_argument, NULL, 0},
        {"capture", required_argument, NULL, 0},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c, want = 0;
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "+o:qhV", opts, NULL)) != -1) {
        if (c == 'h')
            want = 1;
        else if (c == 'V' && want == 0)
            want = 2;
        else if (c == '?' || c == ':') {
            want = 0;
            break;
        }
    }
    opterr = 1;
    optind = 0;
    return want;
}

/* PREFIX + sep + the variable's value, or PREFIX alone, into VAR. */
static void run_prepend_env(const char *var, const char *prefix)
{
    const char *old = getenv(var);
    size_t n = strlen(prefix) + (old ? strlen(old) : 0) + 2;
    char *v = dt_malloc(n);
    snprintf(v, n, "%s%s%s", prefix, old && *old ? ":" : "", old && *old ? old : "");
    setenv(var, v, 1);
    free(v);
}

/* The source tree this program was built from, into out (0), when its
 * src/python/divtrace is there (else -1). DT_ABS_SRCDIR when configure
 * defines it; else this file's name as make gave it to the compiler:
 * absolute in a build configured by an absolute path, or relative to the
 * build tree's top (bindir/..). */
static int run_source_tree(const char *bindir, char *out, size_t n)
{
#ifdef DT_ABS_SRCDIR
    (void)bindir;
    snprintf(out, n, "%s", DT_ABS_SRCDIR);
#else
    const char *f = __FILE__;
    const char *tail = strstr(f, "src/cmd_run.c");
    if (!tail)
        return -1;
    int len = (int)(tail - f);
    if (f[0] == '/')
        snprintf(out, n, "%.*s", len, f);
    else
        snprintf(out, n, "%s/../%.*s", bindir, len, f);
#endif
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/src/python/divtrace/_run.py", out);
    return run_is_file(probe) ? 0 : -1;
}

/* DIVTRACE_LIB and PYTHONPATH for the package, from where this program
 * is (see the top of the file). */
static void run_find_package(void)
{
    char exe[PATH_MAX], dir[PATH_MAX], p[PATH_MAX + 64];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return;
    exe[len] = '\0';
    snprintf(dir, sizeof dir, "%s", exe);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return;
    *slash = '\0';
    const char *lib = NULL;
    snprintf(p, sizeof p, "%s/.libs/libdivtrace.so", dir);
    if (run_is_file(p)) {
        /* a build tree */
        lib = p;
        char src[PATH_MAX], py[PATH_MAX + 16];
        if (run_source_tree(dir, src, sizeof src) == 0) {
            snprintf(py, sizeof py, "%s/src/python", src);
            run_prepend_env("PYTHONPATH", py);
        }
    } else {
        char pkg[PATH_MAX + 16];
        snprintf(pkg, sizeof pkg, "%s/../_run.py", dir);
        snprintf(p, sizeof p, "%s/libdivtrace.so", dir);
        if (run_is_file(pkg) && run_is_file(p)) {
            /* pip's bundle: site-packages/divtrace/_bin */
            lib = p;
            snprintf(pkg, sizeof pkg, "%s/../..", dir);
            run_prepend_env("PYTHONPATH", pkg);
        } else {
            snprintf(p, sizeof p, "%s/../lib/libdivtrace.so", dir);
            if (run_is_file(p))
                lib = p;
        }
    }
    const char *env = getenv("DIVTRACE_LIB");
    if (lib && (!env || !*env))
        setenv("DIVTRACE_LIB", lib, 1);
}

int cmd_run(int argc, char **argv)
{
    switch (run_wants_info(argc, argv)) {
    case 1: run_usage(stdout); return 0;
    case 2: return cli_version();
    default: break;
    }
    const char *py = getenv("DIVTRACE_PYTHON");
    if (!py || !*py)
        py = "python3";
    run_find_package();
    fflush(NULL);
    /* the check, in a Python of its own (it imports nothing) */
    char *check[] = {(char *)py, "-c", (char *)run_check_py, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, py, NULL, NULL, check, environ);
    if (rc != 0) {
        cli_error("run", "cannot run %s: %s (DIVTRACE_PYTHON names the Python to use)", py, strerror(rc));
        return CLI_EXIT_TROUBLE;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            cli_error("run", "waiting for %s: %s", py, strerror(errno));
            return CLI_EXIT_TROUBLE;
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (!WIFEXITED(status) || WEXITSTATUS(status) != CLI_EXIT_TROUBLE)
            cli_error("run", "%s failed to look for the divtrace package (%s %d)", py,
                      WIFEXITED(status) ? "exit" : "signal",
                      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        return CLI_EXIT_TROUBLE;
    }
    char **args = dt_calloc((size_t)argc + 4, sizeof *args);
    args[0] = (char *)py;
    args[1] = "-m";
    args[2] = "divtrace";
    args[3] = "run";
    for (int i = 1; i < argc; i++)
        args[i + 3] = argv[i];
    execvp(py, args);
    cli_error("run", "cannot run %s: %s", py, strerror(errno));
    free(args);
    return CLI_EXIT_TROUBLE;
}
