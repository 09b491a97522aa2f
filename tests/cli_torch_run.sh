#!/bin/sh
# cli_torch_run.sh: divtrace run's tests (tests/torch/test_run.py) from make
# check: every check with the first adapter core the build has, the core's
# own paths with the others. Skips as tests/torch/torch_env.sh says.
NAME=cli_torch_run.sh
. "${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/tests/torch/torch_env.sh"
rc=0
for core in $cores; do
    echo "## adapter core: $core"
    only=
    [ "$core" = "${cores%% *}" ] || only="test_records test_evaluation"
    DIVTRACE_ADAPTER_CORE=$core "$PY" -W ignore::UserWarning "$top/tests/torch/test_run.py" $only || rc=1
done
exit $rc
