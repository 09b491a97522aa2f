# _run.py: `divtrace run` (and `python -m divtrace run`): record an unmodified
# PyTorch training script. The script runs in this interpreter, with the
# sys.argv, sys.path[0] and __main__ that python would give it; hooks put in
# before it starts (_run_hooks.py) find its optimizer and loss modules as
# they are made, its model at the first forward that uses the optimizer's
# parameters, and the loss it calls backward() on, and end each step right
# after optimizer.step(). Here: the command line, and running the script.
# divtrace-run(1) documents what is recorded and refused.
#
# What must stay true: nothing here changes what the script computes (every
# hook only looks), and nothing here raises into the script: a run that
# cannot be recorded stops the recording (one line on stderr, the trace
# closed incomplete with that line as its reason) and the script goes on
# unrecorded; divtrace run then exits 2.
import getopt
import os
import re
import runpy
import sys

from ._run_hooks import RECORDING, _Run, _say

__all__ = ["main"]

# Kept word for word in src/cmd_run.c, which answers --help without Python
# (tests/torch/test_run.py compares the two).
USAGE = """\
Usage: divtrace run -o TRACE.dtr [OPTION]... -- [python] SCRIPT [ARG]...
  or:  divtrace run -o TRACE.dtr [OPTION]... -- python -m MODULE [ARG]...
Run a PyTorch training script unchanged and record its training as a trace:
one step per optimizer.step(), with the model's module outputs, the loss
modules it calls, gradients and updates (see divtrace-python(7)).

  -o, --output PATH     the trace to write (required); under torch.distributed
                        each rank writes its own
      --steps N         record the first N steps, then close the trace and let
                        the script go on unrecorded
      --exit-after N    after N steps, close the trace and end the script as
                        sys.exit(0) would
      --modules LIST    record only the modules whose names match one of the
                        comma-separated fnmatch patterns (fc*,encoder.*);
                        default every module
      --level LEVEL     op (default), param or step
      --checkpoint-every N  checkpoint parameters and optimizer state before
                        steps 0, N, 2N, ... and at the end (default 0: none)
      --check-steps LIST  store the inputs, parameters and outputs of the
                        modules at these steps for oracle checks: numbers
                        and ranges (0,5,10-12), first, or last (with --steps
                        or --exit-after)
      --check-bytes N   store at most N bytes per check step (suffixes K, M,
                        G; default 64M)
      --config KEY=VALUE  add KEY to the trace's header (repeatable)
      --capture HOW     how module outputs are caught: wrap (the default; hooks
                        for a model holding nn.DataParallel) or hooks
  -q, --quiet           no notes and no summary line
  -h, --help            show this help and exit
  -V, --version         show the version and exit

The command after -- runs in the Python that runs divtrace run: python
SCRIPT, python -m MODULE, or SCRIPT, with python's -u, -B and -W.

Exit status: the script's own (1 after an uncaught exception), or 2 when
recording was refused or failed: a bad option, no model or optimizer
found, several optimizers, gradient accumulation, optimizer.step(closure),
a skipped optimizer step, a trace that could not be written.
"""

_SHORT = "o:qhV"
_LONG = ["output=", "steps=", "exit-after=", "modules=", "level=", "checkpoint-every=", "check-steps=",
         "check-bytes=", "config=", "capture=", "quiet", "help", "version"]
# the options that shape the records, kept in the header (run_options) so
# that a re-run with other --check-steps records the same steps
_SHAPING = ("--steps", "--modules", "--level", "--checkpoint-every", "--config", "--capture")
_PYTHON = re.compile(r"^python[0-9.]*$")


class _Usage(Exception):
    """A bad command line: the message, and whether to add the Try line."""

    def __init__(self, msg, try_line=False):
        super().__init__(msg)
        self.try_line = try_line


# ---- the command line


class Options:
    """The command line (the defaults here). shaping: the options of
    _SHAPING as given; command: the words after --; interp: its python
    word, if any, and interp_opts that python's -u, -B, -W ARG."""
    output = script = module = interp = modules = check_steps = capture = None
    steps = exit_after = checkpoint_every = 0
    level, check_bytes = "op", 64 << 20
    quiet = help = version = False
    config, shaping, command, interp_opts, args = {}, (), (), (), ()


def _count(opt, s, lo):
    if not re.fullmatch(r"[0-9]+", s) or int(s) < lo:
        raise _Usage("%s '%s': expected an integer of at least %d" % (opt, s, lo))
    return int(s)


def _bytes(opt, s):
    m = re.fullmatch(r"([0-9]+)([KkMmGg]?)", s)
    if m is None:
        raise _Usage("%s '%s': expected a number of bytes, with K, M or G after it for 2^10, "
                     "2^20, 2^30" % (opt, s))
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def _check_steps(s, steps):
    """--check-steps: a sorted tuple of step numbers."""
    out = set()
    for w in s.split(","):
        w = w.strip()
        if w == "first":
            out.add(0)
        elif w == "last":
            if not steps:
                raise _Usage("--check-steps last needs --steps N or --exit-after N (the last step is "
                             "not known before)")
            out.add(steps - 1)
        elif re.fullmatch(r"[0-9]+", w):
            out.add(int(w))
        elif re.fullmatch(r"[0-9]+-[0-9]+", w) and int(w.split("-")[0]) <= int(w.split("-")[1]):
            a, b = (int(x) for x in w.split("-"))
            out.update(range(a, b + 1))
        else:
            raise _Usage("--check-steps '%s': '%s' is not a step, a range A-B, first or last" % (s, w))
    if steps and max(out) >= steps:
        raise _Usage("--check-steps '%s': step %d is past the %d steps recorded" % (s, max(out), steps))
    return tuple(sorted(out))


def _command(o, words):
    """The command after --: python [-u] [-B] [-W ARG] (SCRIPT | -m MODULE)
    ARGS, or SCRIPT ARGS."""
    if not words:
        raise _Usage("no command to run after --", try_line=True)
    words = list(words)
    if _PYTHON.match(os.path.basename(words[0])):
        o.interp = words.pop(0)
        iopts = []
        while words and words[0].startswith("-") and words[0] != "-":
            w = words.pop(0)
            if w == "-m" or (w.startswith("-m") and not w.startswith("--")):
                mod = w[2:] or (words.pop(0) if words else "")
                if not mod:
                    raise _Usage("python -m: no module named after it")
                o.module, o.args = mod, tuple(words)
                break
            if w.startswith("-W"):
                arg = w[2:] or (words.pop(0) if words else None)
                if arg is None:
                    raise _Usage("python -W: no warning filter after it")
                iopts += ["-W", arg]
            elif re.fullmatch(r"-[uB]+", w):
                iopts.append(w)
            elif w == "-c":
                raise _Usage("python -c: divtrace run runs a script or a module (-m), not -c code")
            else:
                raise _Usage("python option %s is not supported after --: give it to the Python that "
                             "runs divtrace run (DIVTRACE_PYTHON, or python3 %s -m divtrace run ...)" % (w, w))
        o.interp_opts = tuple(iopts)
        if o.module is None:
            if not words:
                raise _Usage("python: no script or -m MODULE after it")
            o.script, o.args = words[0], tuple(words[1:])
    else:
        o.script, o.args = words[0], tuple(words[1:])


def parse(argv):
    """Options from argv (the words after `divtrace run`)."""
    o = Options()
    try:
        opts, rest = getopt.getopt(list(argv), _SHORT, _LONG)
    except getopt.GetoptError as e:
        raise _Usage(str(e), try_line=True)
    config = {}
    shaping = []
    for k, v in opts:
        if k in ("-o", "--output"):
            if not v:
                raise _Usage("%s: an empty path" % k)
            o.output = v
        elif k == "--steps":
            o.steps = _count(k, v, 1)
        elif k == "--exit-after":
            o.exit_after = _count(k, v, 1)
        elif k == "--modules":
            pats = [p.strip() for p in v.split(",")]
            if not v.strip() or "" in pats:
                raise _Usage("--modules '%s': expected comma-separated patterns (fc*,encoder.*)" % v)
            o.modules = tuple(pats)
        elif k == "--level":
            if v not in ("op", "param", "step"):
                raise _Usage("--level '%s': expected op, param or step" % v)
            o.level = v
        elif k == "--checkpoint-every":
            o.checkpoint_every = _count(k, v, 0)
        elif k == "--check-steps":
            o.check_steps = v
        elif k == "--check-bytes":
            o.check_bytes = _bytes(k, v)
        elif k == "--config":
            key, eq, val = v.partition("=")
            if not eq or not key.strip():
                raise _Usage("--config '%s': expected KEY=VALUE" % v)
            config[key.strip()] = val
        elif k == "--capture":
            if v not in ("wrap", "hooks"):
                raise _Usage("--capture '%s': expected wrap or hooks" % v)
            o.capture = v
        elif k in ("-q", "--quiet"):
            o.quiet = True
        elif k in ("-h", "--help"):
            o.help = True
        elif k in ("-V", "--version"):
            o.version = True
        if k in _SHAPING:
            shaping += [k, v]
    if o.help or o.version:
        return o
    if o.output is None:
        raise _Usage("no trace to write: -o PATH is required", try_line=True)
    if o.modules is not None and o.level != "op":
        raise _Usage("--modules records modules: it needs --level op (not %s)" % o.level)
    if o.check_steps is not None:
        if o.level != "op":
            raise _Usage("--check-steps stores module data: it needs --level op (not %s)" % o.level)
        last = min(n for n in (o.steps, o.exit_after) if n) if (o.steps or o.exit_after) else 0
        o.check_steps = _check_steps(o.check_steps, last)
    o.config = config
    o.shaping = tuple(shaping)
    o.command = tuple(rest)
    _command(o, rest)
    return o


# ---- running the script


_HERE = os.path.abspath(__file__)


def _resolve(o):
    """The script's file (o.script, or the module's), checked; sys.path[0]
    as python would set it."""
    if o.module is not None:
        import importlib.util
        sys.path[0:1] = [os.getcwd()]
        try:
            spec = importlib.util.find_spec(o.module)
        except (ImportError, ValueError) as e:
            spec, why = None, str(e)
        else:
            why = "no module named %s" % o.module
        if spec is not None and spec.submodule_search_locations is not None:
            try:
                spec = importlib.util.find_spec(o.module + ".__main__")
            except ImportError:
                spec = None
            why = "%s is a package without __main__" % o.module
        if spec is None or spec.origin is None:
            raise _Usage("python -m %s: %s" % (o.module, why))
        return spec.origin
    path = o.script
    if os.path.isdir(path):
        main = os.path.join(path, "__main__.py")
        if not os.path.isfile(main):
            raise _Usage("%s: a folder without __main__.py" % path)
        sys.path[0:1] = [path]
        return main
    if not os.path.isfile(path):
        raise _Usage("%s: %s" % (path, "no such file" if not os.path.exists(path) else "not a file"))
    if not path.endswith(".py"):
        try:
            with open(path, "rb") as f:
                head = f.read(512)
        except OSError as e:
            raise _Usage("%s: %s" % (path, e.strerror))
        first = head.split(b"\n", 1)[0]
        if b"\0" in head:
            raise _Usage("%s is not a Python script (a binary file)" % path)
        if first.startswith(b"#!") and b"python" not in first:
            raise _Usage("%s is not a Python script (its #! line: %s)"
                         % (path, first.decode("utf-8", "replace").strip()))
    sys.path[0:1] = [os.path.dirname(os.path.realpath(path))]
    return path


def _interp_opts(o):
    """python's -u, -B and -W, for the script."""
    import warnings
    it = iter(o.interp_opts)
    for w in it:
        if w == "-W":
            arg = next(it)
            sys.warnoptions.append(arg)
            try:
                warnings._setoption(arg)
            except warnings._OptionError as e:
                raise _Usage("python -W %s: %s" % (arg, e))
        else:
            if "B" in w:
                sys.dont_write_bytecode = True
            if "u" in w:
                for s in (sys.stdout, sys.stderr):
                    try:
                        s.reconfigure(write_through=True)
                    except (AttributeError, ValueError):
                        pass


def _trimmed(tb):
    """The traceback from the script's first frame, as python shows it:
    without this file's frames and runpy's ("<frozen runpy>" when frozen)."""
    skip = (_HERE, os.path.abspath(runpy.__file__))
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if not (fn.startswith("<frozen runpy") or os.path.abspath(fn) in skip):
            break
        tb = tb.tb_next
    return tb


def _exec(o):
    """Run the script; (exit status, exception or None)."""
    sys.argv = [o.script if o.module is None else o.module] + list(o.args)
    try:
        if o.module is not None:
            runpy.run_module(o.module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(o.script, run_name="__main__")
    except SystemExit as e:
        code = e.code
        if code is None:
            return 0, None
        if isinstance(code, int):
            return code, None
        sys.stderr.write("%s\n" % (code,))
        return 1, None
    except BaseException as e:  # the script's own: reported as python does
        return (130 if isinstance(e, KeyboardInterrupt) else 1), e
    return 0, None


def _version():
    import divtrace
    import torch
    return "divtrace %s (python package, torch %s)" % (divtrace.__version__, torch.__version__)


def main(argv):
    """`divtrace run ARGS`; argv without the leading "run". Returns the exit
    status."""
    try:
        o = parse(argv)
    except _Usage as e:
        # one line, as every divtrace command says an error (divtrace(1))
        _say(str(e) + (" (try 'divtrace run --help')" if e.try_line else ""))
        return 2
    if o.help:
        sys.stdout.write(USAGE)
        return 0
    if o.version:
        print(_version())
        return 0
    try:
        return _main(o)
    finally:
        sys.stdout.flush()


def _main(o):
    import warnings
    # the script first, before anything imports torch: a script that is not
    # there is one line, whatever torch says as it loads
    saved = (list(sys.argv), list(sys.path))
    try:
        script_file = os.path.abspath(_resolve(o))
        _interp_opts(o)
    except _Usage as e:
        sys.argv[:], sys.path[:] = saved
        _say(str(e))
        return 2
    try:
        import divtrace
        from divtrace import _lib
        _lib.load()
    except ImportError as e:
        _say(str(e))
        return 2
    o.output = os.path.abspath(o.output)   # the script may change its working folder
    try:
        from divtrace import _dist
        own = _dist.rank_path(o.output)         # torchrun's RANK before the process group exists
    except ImportError:
        _dist, own = None, o.output
    out_dir = os.path.dirname(own)
    if not os.path.isdir(out_dir):
        _say("%s: no folder %s" % (o.output, out_dir))
        return 2
    if not os.access(out_dir, os.W_OK | os.X_OK):
        _say("%s: the folder %s is not writable" % (o.output, out_dir))
        return 2
    run = _Run(o)
    run.script_file = script_file
    if o.interp is not None and os.sep in o.interp and \
            os.path.realpath(o.interp) != os.path.realpath(sys.executable):
        run.note("the script runs in %s (the Python that runs divtrace run), not %s; DIVTRACE_PYTHON "
                 "chooses it" % (sys.executable, o.interp))
    # an earlier trace must not pass for this run's: this rank's is removed
    # (a rank not known yet, the trace at the open truncates it)
    if _dist is not None or "RANK" not in os.environ:
        try:
            os.unlink(own)
        except FileNotFoundError:
            pass
        except OSError as e:
            _say("%s: cannot replace it: %s" % (own, e.strerror))
            return 2
    warnings.filterwarnings("ignore", category=divtrace.DivtraceWarning)
    run.install()
    try:
        code, exc = _exec(o)
        if run.state is RECORDING:
            run.settle()
        if run.state is RECORDING and run.suspended is not None:
            run.note("the model's forward at %s, with gradients on after the last step, was not "
                     "recorded: %s" % (run.suspended[1], run.suspended[0].split(": ", 2)[-1]))
        if run.state is RECORDING:
            if exc is not None:
                text = "%s: %s" % (type(exc).__name__, exc) if str(exc) else type(exc).__name__
                run.finish(1, text)
            elif code != 0:
                run.finish(1, "the script exited with status %d" % code)
            else:
                run.finish(0, None)
    finally:
        run.uninstall()
    if exc is not None:
        sys.stdout.flush()
        tb = _trimmed(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
    sys.stdout.flush()
    if run.rec is None and run.status is None:
        if code != 0 or exc is not None:
            _say("nothing recorded: the script ended (status %d) before its first training step" % code)
            return code
        if not run.made:
            _say("nothing recorded: %s made no optimizer (torch.optim.Optimizer)" % run.script_file)
        else:
            _, name, site = run.made[0]
            _say("nothing recorded: no module holding the parameters of the optimizer (%s made at %s) "
                 "was called with gradients on" % (name, site))
        return 2
    if run.status is not None:
        return 2
    if not o.quiet and run.rec is not None:
        steps = run.rec.steps
        what = "the first %d steps" % steps if o.steps and steps >= o.steps else \
            "%d step%s" % (steps, "" if steps == 1 else "s")
        _say("%s: %s of %s recorded%s" % (run.path, what, type(run.model).__name__,
                                          "" if code == 0 and exc is None else ", ended early"))
    return code
