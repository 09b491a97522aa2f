# _cli.py: the `divtrace` command of the pip-installed package (and of
# `python -m divtrace`): `divtrace run` is the adapter's (divtrace._run),
# every other command is the divtrace program's, which pip's build bundled.
import os
import sys

from . import _lib


def program():
    """The divtrace program this package runs, or None: the one pip's build
    bundled (divtrace/_bin/divtrace), else the one in a build tree next to
    this source tree. Never a `divtrace` on PATH: that may be this very
    command."""
    for d in [_lib.BUNDLE] + [os.path.join(b, "src") for b in _lib.build_dirs()]:
        p = os.path.join(d, "divtrace")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def main(argv=None):
    """Run `divtrace ARGV...`; returns the exit status of `run`, and does
    not return from another command (the program replaces this process,
    so its output, signals and exit status are its own)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "run":
        try:
            from . import _run
        except ModuleNotFoundError as e:
            if e.name != __package__ + "._run":
                raise
            print("divtrace run: this divtrace package has no divtrace._run", file=sys.stderr)
            return 2
        return _run.main(argv[1:])
    prog = program()
    if prog is None:
        print("divtrace: the divtrace program is not in %s (install the package with pip from the "
              "source tree, which builds it)" % _lib.BUNDLE, file=sys.stderr)
        return 2
    try:
        os.execv(prog, ["divtrace"] + argv)
    except OSError as e:
        print("divtrace: cannot run %s: %s" % (prog, e.strerror), file=sys.stderr)
        return 2
