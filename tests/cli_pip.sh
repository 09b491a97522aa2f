#!/bin/sh
# cli_pip.sh: pip installs the source tree (pyproject.toml, setup.py) into a
# venv made with --system-site-packages, with no network, and then, with no
# PYTHONPATH, DIVTRACE_LIB or LD_LIBRARY_PATH, the divtrace command runs the
# bundled program (--version, --help, an error's exit status) without
# importing torch, python -m divtrace is the same command, the package
# loads the library and the C core from the venv, pip installed no torch,
# and (when torch imports) a 2-step recording of a small model, by
# divtrace.record and by divtrace run, is a trace that divtrace show reads.
# By default pip bundles this build (DIVTRACE_PREBUILT=the build directory,
# about 3 s); DIVTRACE_TEST_PIP_FULL=1 has it configure and make the C core
# itself, as a user's pip does (45 s without CUDA, 3 minutes with, on 2
# cores; DIVTRACE_CUDA as setup.py reads it). Skips (77) when python3 has no
# venv, pip or setuptools that builds wheels, when the build tools are
# missing (full), or when the build has no shared library or is sanitized.
set -u
NAME=cli_pip.sh
. "$(dirname "$0")/cli_lib.sh"
PY=${PYTHON:-python3}
top=$(cd "${top_srcdir:-$(dirname "$0")/..}" && pwd)
B=$(cd "$(dirname "$DT")/.." && pwd)
full=${DIVTRACE_TEST_PIP_FULL:-0}

skip() {
    echo "$NAME: $1; skipping" >&2
    exit 77
}
if [ "$full" = 1 ]; then
    command -v make >/dev/null && command -v "${CC:-cc}" >/dev/null ||
        skip "no make or C compiler for the full build"
    [ -e "$top/configure" ] || { command -v autoreconf >/dev/null && command -v libtoolize >/dev/null; } ||
        skip "no configure, and no autoreconf and libtoolize to make it"
    unset DIVTRACE_PREBUILT
else
    [ -r "$B/src/.libs/libdivtrace.so" ] || skip "no $B/src/.libs/libdivtrace.so (configured with --disable-shared?)"
    # python3 cannot load a library built with a sanitizer (cli_torch.sh)
    sanitized "$B/src/.libs/libdivtrace.so" && skip "$B is built with a sanitizer"
    DIVTRACE_PREBUILT=$B
    export DIVTRACE_PREBUILT
fi

# clean COMMAND...: COMMAND with nothing that points at the build or the
# source tree; pip with no network, no cache and no questions
clean() {
    env -u PYTHONPATH -u DIVTRACE_LIB -u DIVTRACE_FAST -u LD_LIBRARY_PATH -u DIVTRACE \
        PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"
}

# The venv sees the system's packages: torch, and pip and setuptools (made
# --without-pip, it installs with the system's pip, which builds with the
# system's setuptools; a venv's own setuptools of Python 3.11 or older
# cannot build a wheel without the wheel package)
V=$T/venv
"$PY" -m venv --system-site-packages --without-pip "$V" >"$T/err" 2>&1 ||
    skip "$PY -m venv failed (install python3-venv): $(tail -1 "$T/err")"
VPY=$V/bin/python
clean "$VPY" -m pip --version >/dev/null 2>&1 ||
    skip "a venv of $PY sees no pip (install python3-pip; or $PY is itself a venv, whose packages another venv does not see)"
clean "$VPY" -c 'import importlib.util as u, sys
sys.exit(not (u.find_spec("setuptools.command.bdist_wheel") or u.find_spec("wheel")))' 2>/dev/null ||
    skip "the setuptools a venv of $PY sees cannot build a wheel (it needs setuptools 70.1 or later, or the wheel package)"
t0=$(date +%s)
if clean "$VPY" -m pip install --no-build-isolation --no-deps "$top" >"$T/pip.log" 2>&1; then
    ok "pip install --no-build-isolation --no-deps (full build: $full) in $(($(date +%s) - t0)) s"
else
    bad "pip install --no-build-isolation --no-deps (full build: $full)"
    tail -30 "$T/pip.log" | sed 's/^/    /'
    finish
    exit
fi
for p in "$top/build/lib" "$top"/build/bdist.* "$top"/src/python/*.egg-info "$top/src/python/build"; do
    [ -e "$p" ] && bad "pip's build wrote $p into the source tree"
done
SP=$(clean "$VPY" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
Vreal=$(cd "$V" && pwd -P)

# the bundle: programs that need no environment to find their libraries
bundle=$SP/divtrace/_bin
for f in divtrace libdivtrace.so; do
    [ -x "$bundle/$f" ] && ok "bundled $f" || bad "no executable $bundle/$f"
done
[ "$full" = 1 ] || [ ! -e "$B/src/python/.libs/_fast.so" ] || [ -e "$bundle/_fast.so" ] ||
    bad "the build has the C core, the bundle has no _fast.so"
[ -e "$bundle/_fast.so" ] && ok "bundled _fast.so"
for f in "$bundle"/*; do
    if clean ldd "$f" 2>&1 | grep 'not found'; then
        bad "$f needs a library the system does not find"
    elif command -v readelf >/dev/null &&
        readelf -d "$f" | grep -E 'R(UN)?PATH' | grep -E "divtrace-pip-|$B|$top"; then
        bad "$f's run path names a build directory"
    else
        ok "$(basename "$f") finds its libraries with no environment"
    fi
done

expect 0 "divtrace --version" -- clean "$V/bin/divtrace" --version
has "$T/out" "^divtrace $(clean "$VPY" -c 'import importlib.metadata as m; print(m.version("divtrace"))') " \
    "divtrace --version is the package's version"
cp "$T/out" "$T/version"
expect 0 "divtrace --help" -- clean "$V/bin/divtrace" --help
has "$T/out" "^Usage: divtrace COMMAND" "divtrace --help is the program's"
expect 2 "divtrace show of a missing trace: exit 2" -- clean "$V/bin/divtrace" show "$T/none.dtr"
one_line "divtrace show of a missing trace"
expect 0 "python -m divtrace --version" -- clean "$VPY" -m divtrace --version
if cmp -s "$T/out" "$T/version"; then ok "python -m divtrace is the divtrace command"; else bad "python -m divtrace --version differs"; fi
# the command starts no PyTorch: it works without torch, and fast
if clean "$VPY" -c 'import sys, divtrace._cli; sys.exit("torch" in sys.modules)' 2>"$T/err"; then
    ok "the divtrace command imports no torch"
else
    bad "importing divtrace._cli imports torch (divtrace/__init__.py must import torch lazily)"
fi

# the library and the C core come from the venv
expect 0 "divtrace.library_path()" -- clean "$VPY" -c 'import os, divtrace; print(os.path.realpath(divtrace.library_path()))'
has "$T/out" "^$Vreal/" "the library is the venv's"
fast=0
if [ -e "$bundle/_fast.so" ]; then
    fast=1
    expect 0 "the C core loads" -- clean "$VPY" -c 'import os
from divtrace import _lib
print(os.path.realpath(_lib.load_fast(required=True).__file__))'
    has "$T/out" "^$Vreal/" "the C core is the venv's"
fi

# pip installed no torch of its own: the venv's is the system's
if ls "$SP" | grep -i '^torch'; then bad "pip installed torch into the venv"; else ok "no torch in the venv"; fi

if ! clean "$VPY" -c 'import torch' >/dev/null 2>&1; then
    echo "# the venv cannot import torch: no recording"
    finish
    exit
fi
# two steps of a small model; given a path, recorded by divtrace.record
cat >"$T/train.py" <<'PY'
import sys
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train(rec=None):
    for step in range(2):
        opt.zero_grad()
        loss = model(torch.randn(8, 4)).square().mean()
        loss.backward()
        opt.step()
        if rec is not None:
            rec.step(loss)


if len(sys.argv) > 1:
    import divtrace
    with divtrace.record(model, sys.argv[1], optimizer=opt) as rec:
        train(rec)
else:
    train()
PY
core=python
[ "$fast" = 1 ] && core=c
expect 0 "a 2-step divtrace.record (core $core)" -- \
    clean DIVTRACE_ADAPTER_CORE=$core "$VPY" -W ignore::UserWarning "$T/train.py" "$T/r.dtr"
expect 0 "divtrace show reads it" -- clean "$V/bin/divtrace" show "$T/r.dtr"
has "$T/out" "^# steps 2, " "two steps"
has "$T/out" "^# adapter_core = $core$" "recorded with the $core core"
# divtrace run, which the command hands to divtrace._run
expect 0 "divtrace run of the unchanged script" -- \
    clean PYTHONWARNINGS=ignore::UserWarning "$V/bin/divtrace" run -o "$T/run.dtr" -- "$T/train.py"
expect 0 "divtrace show reads its trace" -- clean "$V/bin/divtrace" show "$T/run.dtr"
has "$T/out" "^# steps 2, " "divtrace run: two steps"
finish
