#!/bin/sh
# cli_torch_explain.sh: explain and replay of PyTorch traces against the
# module oracle (tests/torch/test_explain.py) from make check. Skips as
# tests/torch/torch_env.sh says.
NAME=cli_torch_explain.sh
. "${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/tests/torch/torch_env.sh"
exec "$PY" -W ignore::UserWarning "$top/tests/torch/test_explain.py"
