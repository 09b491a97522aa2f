#!/bin/sh
# torch_compare.sh: time the PyTorch versions of the autoencoder and PredNet
# (tests/bench/torch_models.py, eager and CUDA graph) on a GPU machine, for
# side-by-side comparison with divtrace's cuda/cudnn backends.
#
# Usage: tests/bench/torch_compare.sh [OUTFILE [torch_models.py options...]]
#   OUTFILE   where the Markdown table goes (default: torch_compare.md in the
#             current directory; "-" for standard output only); the output is
#             also shown on standard output.
#   options   passed on, e.g. --config pn-64-b4 --steps 100, or --check
#   PYTHON    environment variable: the interpreter (default python3)
# Exit status: 0 done, 77 (skip) when the interpreter cannot import torch or
# torch sees no CUDA GPU, else the script's status.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
OUT=${1:-torch_compare.md}
[ $# -gt 0 ] && shift

if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "torch_compare.sh: $PY cannot import torch; skipping" >&2
    exit 77
fi
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() and torch.cuda.device_count() > 0 else 1)' \
    >/dev/null 2>&1; then
    echo "torch_compare.sh: torch sees no CUDA GPU; skipping" >&2
    exit 77
fi

if [ "$OUT" = "-" ]; then
    exec "$PY" "$HERE/torch_models.py" "$@"
fi
# keep the script's exit status through the pipe into tee
rc_file=$(mktemp "${TMPDIR:-/tmp}/torch-compare-rc-XXXXXX")
trap 'rm -f "$rc_file"' EXIT
{ rc=0; "$PY" "$HERE/torch_models.py" "$@" || rc=$?; echo "$rc" >"$rc_file"; } | tee "$OUT"
rc=$(cat "$rc_file")
[ "$rc" -eq 0 ] || echo "torch_compare.sh: torch_models.py exited $rc" >&2
exit "$rc"
