# setup.py: pip's build of the divtrace package (pyproject.toml): configures
# and makes the C core out of tree in a temporary directory, and bundles the
# divtrace program, libdivtrace.so and the adapter's C core (_fast.so) into
# divtrace/_bin/, where the package finds them with no environment variable.
#
# Environment: DIVTRACE_CUDA=0 builds without CUDA, =1 insists on it (=DIR:
# the CUDA Toolkit at DIR); unset, configure's check decides (CUDA when nvcc,
# cuBLAS and cuDNN are found). DIVTRACE_PREBUILT=BUILDDIR bundles what make
# already built in BUILDDIR instead of compiling (it is only read from).
import atexit
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

import setuptools
from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

TOP = os.path.dirname(os.path.abspath(__file__))
# setuptools' own outputs (build/, *.egg-info) and the C build go to a
# private temporary directory, never into the source tree (whose build/ is
# divtrace's own build directory); kept when the C build fails, for its log.
WORK = tempfile.mkdtemp(prefix="divtrace-pip-")
_keep = []
atexit.register(lambda: _keep or shutil.rmtree(WORK, ignore_errors=True))


def fail(msg):
    sys.exit("divtrace: " + msg)


def version():
    """The release of configure.ac's AC_INIT: the program's --version."""
    with open(os.path.join(TOP, "configure.ac"), encoding="utf-8") as f:
        m = re.search(r"AC_INIT\(\[divtrace\],\s*\[([^\]]+)\]", f.read())
    if not m:
        fail("configure.ac has no AC_INIT([divtrace], [VERSION])")
    return m.group(1)


def run_step(what, argv, cwd, log):
    try:
        rc = subprocess.call(argv, cwd=cwd)
    except OSError as e:
        fail("%s: cannot run %s: %s" % (what, argv[0], e.strerror))
    if rc != 0:
        _keep.append(WORK)
        fail("%s failed (exit %d); see %s" % (what, rc, log))


def configure_and_make():
    """Configure and make the program, the library and the C core in a
    build directory of WORK; returns that directory."""
    configure = os.path.join(TOP, "configure")
    if not os.path.exists(configure):
        # a git checkout: generate configure as ./bootstrap does (the
        # generated files are ones git ignores)
        if shutil.which("autoreconf") is None or shutil.which("libtoolize") is None:
            fail("no configure in %s, and no autoreconf and libtoolize to make it: install autoconf, "
                 "automake and libtool (./bootstrap lists what divtrace needs)" % TOP)
        run_step("autoreconf", ["autoreconf", "-fi"], TOP, "its output above")
    b = os.path.join(WORK, "native")
    os.mkdir(b)
    args = [configure, "--disable-static", "PYTHON3=" + sys.executable]
    cuda = os.environ.get("DIVTRACE_CUDA", "")
    if cuda in ("0", "no"):
        args.append("--without-cuda")
    elif cuda in ("1", "yes"):
        args.append("--with-cuda")
    elif cuda:
        args.append("--with-cuda=" + cuda)
    log = os.path.join(b, "config.log")
    run_step("configure", args, b, log)
    targets = ["src/divtrace", "src/libdivtrace.la"]
    with open(os.path.join(b, "Makefile"), encoding="utf-8") as f:
        if re.search(r"^pkglib_LTLIBRARIES = src/python/_fast\.la", f.read(), re.M):
            targets.append("src/python/_fast.la")
        else:
            print("divtrace: no C core (python3 headers not found: install python3-dev); "
                  "the package records with its Python core", file=sys.stderr)
    run_step("make", ["make", "-j%d" % (os.cpu_count() or 1)] + targets, b, "the make output above")
    return b


def artifacts(b):
    """(source, name in divtrace/_bin) of what a build directory made."""
    prog = os.path.join(b, "src", "divtrace")
    lib = os.path.join(b, "src", ".libs", "libdivtrace.so")
    for p, why in ((prog, "make there first"),
                   (lib, "make there first; a build configured with --disable-shared has none")):
        if not os.path.isfile(p):
            fail("no %s (%s)" % (p, why))
    with open(prog, "rb") as f:
        if f.read(4) != b"\x7fELF":
            fail("%s is not a program but a libtool wrapper: it cannot be moved" % prog)
    out = [(prog, "divtrace"), (os.path.realpath(lib), "libdivtrace.so")]
    fast = os.path.join(b, "src", "python", ".libs", "_fast.so")
    if os.path.isfile(fast):
        out.append((fast, "_fast.so"))
    return out


class BuildPy(build_py):
    """build_py, and the C build bundled into the package."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # pip install -e: the package finds build/ next to its sources (_lib.build_dirs)
        pre = os.environ.get("DIVTRACE_PREBUILT")
        b = os.path.abspath(pre) if pre else configure_and_make()
        dest = os.path.join(self.build_lib, "divtrace", "_bin")
        os.makedirs(dest, exist_ok=True)
        self._bundled = []
        for src, name in artifacts(b):
            to = os.path.join(dest, name)
            shutil.copyfile(src, to)
            os.chmod(to, 0o755)
            self._bundled.append(to)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + getattr(self, "_bundled", [])


class Sdist(sdist):
    def run(self):
        fail("the source release is make dist's tarball (pip installs it, or the source tree)")


class BinaryDistribution(Distribution):
    """Programs and shared objects inside: a platform's wheel, not a pure one."""

    def has_ext_modules(self):
        return True


# pip's metadata (dist_info) and its wheel both need bdist_wheel
if {"bdist_wheel", "dist_info"} & set(sys.argv[1:]) \
        and importlib.util.find_spec("setuptools.command.bdist_wheel") is None \
        and importlib.util.find_spec("wheel") is None:
    fail("setuptools %s (%s) cannot build a wheel: it needs setuptools 70.1 or later, or the wheel "
         "package; with no network, make the venv with --without-pip and install with the system's "
         "pip (see README.md, \"Installing with pip\")"
         % (setuptools.__version__, os.path.dirname(setuptools.__file__)))

setup(
    version=version(),
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPy, "sdist": Sdist},
    options={"build": {"build_base": os.path.join(WORK, "build")},
             "egg_info": {"egg_base": WORK},
             # _fast.so uses Python's limited API of 3.10; the rest is no
             # Python's
             "bdist_wheel": {"py_limited_api": "cp310"}},
)
