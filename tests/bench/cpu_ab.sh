#!/bin/sh
# cpu_ab.sh: the cpu step with one of divtrace's measuring switches set to 0
# and left alone (or set to a value), side by side: bench_cpu_step CONF at
# each thread count, the two settings alternating round by round, each
# first in every other round, so that the machine's load moves both alike.
# Prints a Markdown table of the medians (ms per step) with --cpu-gemm
# fixed, tracing off and at level op (with tracing's cost over off), and
# the ratio of the default over the switched-off setting.
# Usage: tests/bench/cpu_ab.sh BENCH_CPU_STEP VAR[=VALUE] CONF ROUNDS THREADS...
#   VAR: DIVTRACE_CPU_CONV_SETS or DIVTRACE_TRACE_DEFER (divtrace(1),
#   divtrace-record(1)); with =VALUE the other side sets it to VALUE
#   instead of leaving it unset (DIVTRACE_TRACE_DEFER=1: records made
#   during the next step whatever the step's size);
#   CONF: ae or pn1. DIVTRACE_DATA as for divtrace record.
[ $# -ge 5 ] || { echo "usage: cpu_ab.sh BENCH_CPU_STEP VAR[=VALUE] CONF ROUNDS THREADS..." >&2; exit 2; }
B=$1 VAR=${2%%=*} CONF=$3 ROUNDS=$4
VAL=
case $2 in *=*) VAL=${2#*=} ;; esac
shift 4
case $VAR in DIVTRACE_CPU_CONV_SETS | DIVTRACE_TRACE_DEFER) ;; *) echo "cpu_ab.sh: unknown switch $VAR" >&2; exit 2 ;; esac
ON="env -u $VAR"
[ -n "$VAL" ] && ON="env $VAR=$VAL"
NAME=default
[ -n "$VAL" ] && NAME="$VAR=$VAL"
T=$(mktemp -d "${TMPDIR:-/tmp}/cpu_ab-XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
for t in "$@"; do
    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        # tsv columns: key, threads, openblas off, openblas op, fixed off, fixed op
        if [ $((r % 2)) -eq 0 ]; then
            env "$VAR=0" "$B" --rounds 1 --tsv --fixed "$CONF" -- "$t" >>"$T/off.$t" || exit 2
            $ON "$B" --rounds 1 --tsv --fixed "$CONF" -- "$t" >>"$T/on.$t" || exit 2
        else
            $ON "$B" --rounds 1 --tsv --fixed "$CONF" -- "$t" >>"$T/on.$t" || exit 2
            env "$VAR=0" "$B" --rounds 1 --tsv --fixed "$CONF" -- "$t" >>"$T/off.$t" || exit 2
        fi
        r=$((r + 1))
    done
done
med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "| $CONF | threads | $VAR=0, off | $VAR=0, op | $NAME, off | $NAME, op | $NAME / $VAR=0 (off, op) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for t in "$@"; do
    a=$(cut -f5 "$T/off.$t" | med) b=$(cut -f6 "$T/off.$t" | med)
    c=$(cut -f5 "$T/on.$t" | med) d=$(cut -f6 "$T/on.$t" | med)
    awk -v t="$t" -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v conf="$CONF" \
        'BEGIN { printf "| %s | %d | %.3f | %.3f (%+.1f%%) | %.3f | %.3f (%+.1f%%) | %.2f, %.2f |\n", conf, t, a, b,
                 100 * (b / a - 1), c, d, 100 * (d / c - 1), c / a, d / b }'
done
echo
echo "($ROUNDS alternating rounds, medians; ms per step with --cpu-gemm fixed; in parentheses tracing's cost over off)"
