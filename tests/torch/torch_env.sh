# torch_env.sh: what the PyTorch tests of make check share (sourced by
# tests/cli_torch*.sh, which set NAME first): the program, the library and
# the package from make check's environment, and a skip (exit 77) when
# python3 cannot import torch, when libdivtrace was built without a shared
# library, or when it is built with AddressSanitizer (whose runtime cannot
# be loaded into an uninstrumented python3; the plain build runs these
# tests). Sets PY, top, cores (the adapter cores the build has: c when the
# C core is built beside the library, then python).
# Environment: DIVTRACE (the program), DIVTRACE_LIB (libdivtrace.so) and
# top_srcdir, as make check sets them; PYTHON (default python3).
PY=${PYTHON:-python3}
top=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
DIVTRACE=${DIVTRACE:-$top/build/src/divtrace}
DIVTRACE_LIB=${DIVTRACE_LIB:-$top/build/src/.libs/libdivtrace.so}

if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "$NAME: $PY cannot import torch (pip install torch); skipping" >&2
    exit 77
fi
if [ ! -r "$DIVTRACE_LIB" ]; then
    echo "$NAME: no $DIVTRACE_LIB (configured with --disable-shared?); skipping" >&2
    exit 77
fi
if grep -aq '__asan_init' "$DIVTRACE_LIB" 2>/dev/null; then  # gcc's shared runtime or clang's
    echo "$NAME: $DIVTRACE_LIB is built with AddressSanitizer; skipping" >&2
    exit 77
fi
PYTHONPATH="$top/src/python${PYTHONPATH:+:$PYTHONPATH}"
PYTHONDONTWRITEBYTECODE=1
export DIVTRACE DIVTRACE_LIB PYTHONPATH PYTHONDONTWRITEBYTECODE top_srcdir="$top"
# the C core (built beside the library, src/python/.libs/_fast.so; asked
# for with DIVTRACE_ADAPTER_CORE=c, so one that does not load fails) and
# the Python core
cores=python
[ -e "$(dirname "$DIVTRACE_LIB")/../python/.libs/_fast.so" ] && cores="c python"
