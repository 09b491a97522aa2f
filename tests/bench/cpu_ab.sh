#!/bin/sh
# cpu_ab.sh: the cpu step with one of divtrace's measuring switches set to 0
# and left alone, side by side: bench_cpu_step CONF at each thread count,
# the two settings alternating round by round so that the machine's load
# moves both alike. Prints a Markdown table of the medians (ms per step)
# with --cpu-gemm fixed, tracing off and at level op, and the ratio of the
# default over the switched-off setting.
# Usage: tests/bench/cpu_ab.sh BENCH_CPU_STEP VAR CONF ROUNDS THREADS...
#   VAR: DIVTRACE_CPU_CONV_SETS (divtrace(1));
#   CONF: ae or pn1. DIVTRACE_DATA as for divtrace record.
[ $# -ge 5 ] || { echo "usage: cpu_ab.sh BENCH_CPU_STEP VAR CONF ROUNDS THREADS..." >&2; exit 2; }
B=$1 VAR=$2 CONF=$3 ROUNDS=$4
shift 4
case $VAR in DIVTRACE_CPU_CONV_SETS) ;; *) echo "cpu_ab.sh: unknown switch $VAR" >&2; exit 2 ;; esac
T=$(mktemp -d "${TMPDIR:-/tmp}/cpu_ab-XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
for t in "$@"; do
    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        # tsv columns: key, threads, openblas off, openblas op, fixed off, fixed op
        env "$VAR=0" "$B" --rounds 1 --tsv --fixed "$CONF" -- "$t" >>"$T/off.$t" || exit 2
        env -u "$VAR" "$B" --rounds 1 --tsv --fixed "$CONF" -- "$t" >>"$T/on.$t" || exit 2
        r=$((r + 1))
    done
done
med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "| $CONF | threads | $VAR=0, off | $VAR=0, op | default, off | default, op | default / $VAR=0 (off, op) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for t in "$@"; do
    a=$(cut -f5 "$T/off.$t" | med) b=$(cut -f6 "$T/off.$t" | med)
    c=$(cut -f5 "$T/on.$t" | med) d=$(cut -f6 "$T/on.$t" | med)
    awk -v t="$t" -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v conf="$CONF" \
        'BEGIN { printf "| %s | %d | %.3f | %.3f | %.3f | %.3f | %.2f, %.2f |\n", conf, t, a, b, c, d, c / a, d / b }'
done
echo
echo "($ROUNDS alternating rounds, medians; ms per step with --cpu-gemm fixed)"
