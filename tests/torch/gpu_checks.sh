#!/bin/bash
# gpu_checks.sh: the PyTorch adapter on a GPU machine: the GPU tests
# (tests/torch/test_gpu.py, with the C core and with the Python core), the
# CPU tests (tests/torch/test_torch.py), the module oracle and explain on
# CUDA (tests/torch/test_explain_gpu.py), the overhead benchmark
# (tests/bench/torch_adapter_bench.py) and divtrace run's against the
# hand-edited loop (tests/bench/torch_run_bench.py), each with its log in OUTDIR, and a
# summary last.
# Usage: tests/torch/gpu_checks.sh OUTDIR [BUILD]
#   BUILD  a build directory made with --with-cuda (src/divtrace,
#          src/.libs/libdivtrace.so) or a folder made by tests/gpu/pack.sh
#          (bin/divtrace, lib/libdivtrace.so*); default build-gpu, then build.
#   DIVTRACE, DIVTRACE_LIB  override the program and the library;
#   PYTHON (default python3); BENCH_ARGS: options for the benchmark.
# Run from the source tree's root (the device tool's working directory):
#   tests/torch/gpu_checks.sh "$OUT" build-gpu
# Exit status: 0 all passed, 77 no torch or no CUDA device, 1 a failure.
set -u
O=${1:?usage: gpu_checks.sh OUTDIR [BUILD]}
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${2:-}
if [ -z "$B" ]; then
    for b in "$top/build-gpu" "$top/build"; do [ -d "$b" ] && { B=$b; break; }; done
fi
[ -n "$B" ] && [ -d "$B" ] && B=$(cd "$B" && pwd)
mkdir -p "$O"
O=$(cd "$O" && pwd)
PY=${PYTHON:-python3}
if [ -z "${DIVTRACE:-}" ]; then
    for d in "$B/src/divtrace" "$B/bin/divtrace"; do [ -x "$d" ] && { DIVTRACE=$d; break; }; done
fi
if [ -z "${DIVTRACE_LIB:-}" ]; then
    for l in "$B"/src/.libs/libdivtrace.so "$B"/lib/libdivtrace.so "$B"/lib/libdivtrace.so.*; do
        [ -r "$l" ] && { DIVTRACE_LIB=$l; break; }
    done
fi
# the pack's other shared libraries (OpenBLAS, MPFR, ...) for the program
[ -d "$B/lib" ] && export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# the program built with CUDA needs cuDNN, which may live in torch's wheels
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9 '; then
    d=$("${PYTHON:-python3}" -c 'import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), "lib"))' 2>/dev/null)
    [ -n "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
fi
exec > >(tee "$O/torch-gpu-checks.log") 2>&1 </dev/null
echo "## divtrace PyTorch adapter, GPU checks, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "program: ${DIVTRACE:-none}; library: ${DIVTRACE_LIB:-none}"
if [ -z "${DIVTRACE:-}" ] || [ -z "${DIVTRACE_LIB:-}" ]; then
    echo "gpu_checks.sh: no divtrace program or libdivtrace.so under '$B' (give BUILD, or DIVTRACE and DIVTRACE_LIB)"
    exit 1
fi
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "gpu_checks.sh: $PY cannot import torch; skipping"
    exit 77
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
export DIVTRACE DIVTRACE_LIB PYTHONDONTWRITEBYTECODE=1 top_srcdir="$top"
export PYTHONPATH="$top/src/python${PYTHONPATH:+:$PYTHONPATH}"
# traces of a failed test stay in OUTDIR/tmp
mkdir -p "$O/tmp"
export TMPDIR="$O/tmp"
fail=0
summary=""
run() { # NAME LOG COMMAND...: run, keep the log, note the result
    name=$1 log=$2
    shift 2
    "$@" >"$O/$log" 2>&1
    rc=$?
    case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL (exit $rc)"; fail=1 ;; esac
    summary="$summary| $name | $r | $log |
"
    echo "== $name: $r"
    tail -n 40 "$O/$log"
}
# the GPU tests with each core the build has: the C core (asked for, so one
# that does not load fails) and the Python core
if [ -e "$(dirname "$DIVTRACE_LIB")/_fast.so" ] || [ -e "$(dirname "$DIVTRACE_LIB")/../python/.libs/_fast.so" ]; then
    run gpu_tests_c_core torch-gpu-tests.log env DIVTRACE_ADAPTER_CORE=c "$PY" -W ignore::UserWarning \
        "$top/tests/torch/test_gpu.py"
fi
run gpu_tests_python_core torch-gpu-tests-python.log env DIVTRACE_ADAPTER_CORE=python "$PY" \
    -W ignore::UserWarning "$top/tests/torch/test_gpu.py"
run cpu_tests torch-cpu-tests.log "$PY" -W ignore::UserWarning "$top/tests/torch/test_torch.py"
# the module oracle on cuDNN and cuBLAS outputs, explain of CUDA traces
run explain_gpu torch-explain-gpu.log "$PY" -W ignore::UserWarning "$top/tests/torch/test_explain_gpu.py"
# divtrace run against the hand-edited loop, side by side
run run_bench torch-run-bench.md "$PY" -W ignore::UserWarning "$top/tests/bench/torch_run_bench.py" --device cuda
# shellcheck disable=SC2086
run overhead_bench torch-adapter-bench.md "$PY" -W ignore::UserWarning "$top/tests/bench/torch_adapter_bench.py" ${BENCH_ARGS:-}
echo
echo "| check | result | log |"
echo "| --- | --- | --- |"
printf '%s' "$summary"
rm -rf "$O/tmp/torchinductor_"* 2>/dev/null
rmdir "$O/tmp" 2>/dev/null
[ "$fail" -eq 0 ]
