#!/bin/sh
# cli_torch_ddp.sh: one trace per data-parallel rank (tests/torch/test_ddp.py,
# torch.distributed on gloo; it exits 77 without gloo) from make check.
# Skips as tests/torch/torch_env.sh says.
NAME=cli_torch_ddp.sh
. "${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/tests/torch/torch_env.sh"
exec "$PY" -W ignore::UserWarning "$top/tests/torch/test_ddp.py"
