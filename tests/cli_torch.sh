#!/bin/sh
# cli_torch.sh: the PyTorch adapter's recording tests from make check
# (tests/torch/test_torch.py, and test_faults.py: the adapter under faults),
# once with each adapter core the build has. Skips as tests/torch/torch_env.sh
# says. divtrace run, explain and the ranks have tests of their own
# (cli_torch_run.sh, cli_torch_explain.sh, cli_torch_ddp.sh), which make -j
# runs beside this one.
NAME=cli_torch.sh
. "${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/tests/torch/torch_env.sh"
rc=0
for core in $cores; do
    echo "## adapter core: $core"
    DIVTRACE_ADAPTER_CORE=$core "$PY" -W ignore::UserWarning "$top/tests/torch/test_torch.py" || rc=1
    DIVTRACE_ADAPTER_CORE=$core "$PY" -W ignore::UserWarning "$top/tests/torch/test_faults.py" || rc=1
done
exit $rc
