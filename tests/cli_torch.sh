#!/bin/sh
# cli_torch.sh: the PyTorch adapter's tests (tests/torch/test_torch.py, and
# tests/torch/test_faults.py: the adapter under faults; tests/torch/test_run.py:
# divtrace run) from make check. Skips (77) when python3 cannot import torch, when libdivtrace
# was built without a shared library, or when it is built with
# AddressSanitizer (whose runtime cannot be loaded into an uninstrumented
# python3; the plain build runs these tests).
# Environment: DIVTRACE (the program), DIVTRACE_LIB (libdivtrace.so) and
# top_srcdir, as make check sets them; PYTHON (default python3). Runs the
# tests once with each adapter core the build has (C and Python).
NAME=cli_torch.sh
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
# Every check once with each core the build has: the C core (built beside
# the library, src/python/.libs/_fast.so; asked for with
# DIVTRACE_ADAPTER_CORE=c, so one that does not load fails) and the Python
# core.
cores=python
[ -e "$(dirname "$DIVTRACE_LIB")/../python/.libs/_fast.so" ] && cores="c python"
rc=0
for core in $cores; do
    echo "## adapter core: $core"
    DIVTRACE_ADAPTER_CORE=$core "$PY" -W ignore::UserWarning "$top/tests/torch/test_torch.py" || rc=1
    DIVTRACE_ADAPTER_CORE=$core "$PY" -W ignore::UserWarning "$top/tests/torch/test_faults.py" || rc=1
    # divtrace run: every check with the first core, the core's own paths with the others
    only=
    [ "$core" = "${cores%% *}" ] || only="test_records test_evaluation"
    DIVTRACE_ADAPTER_CORE=$core "$PY" -W ignore::UserWarning "$top/tests/torch/test_run.py" $only || rc=1
done
# explain and replay of PyTorch traces: the module oracle's verdicts, once
"$PY" -W ignore::UserWarning "$top/tests/torch/test_explain.py" || rc=1
# one trace per data-parallel rank (torch.distributed on gloo), once; 77: no gloo
"$PY" -W ignore::UserWarning "$top/tests/torch/test_ddp.py"; case $? in 0|77) ;; *) rc=1 ;; esac
exit $rc
