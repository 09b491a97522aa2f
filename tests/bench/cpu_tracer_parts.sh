#!/bin/sh
# cpu_tracer_parts.sh: what each part of the cpu tracer costs the training
# step. Three builds of bench_cpu_step from the same source: the full
# tracer, one configured with CFLAGS=-DDT_PROFILE_TRACER_READ (every output
# read as 8-byte words and XORed: no statistics, no hash) and one with
# -DDT_PROFILE_TRACER_NONE (records made without reading the outputs), each
# with its records made during the next step (the default) and within the
# step (DIVTRACE_TRACE_DEFER=0; the default makes them during the next step
# where a core is free and a step's outputs are small): six settings, run in turn at each thread
# count, the order reversed every other round so that the machine's load
# moves them alike. A round's cost is its traced step over its untraced
# one, both from the same process (--cpu-gemm fixed). Prints a Markdown
# table of the medians of the rounds' costs.
# Usage: tests/bench/cpu_tracer_parts.sh FULL READ NONE CONF ROUNDS THREADS...
#   FULL, READ, NONE: the three bench_cpu_step programs; CONF: ae or pn1.
#   DIVTRACE_DATA as for divtrace record.
[ $# -ge 6 ] || {
    echo "usage: cpu_tracer_parts.sh FULL READ NONE CONF ROUNDS THREADS..." >&2
    exit 2
}
FULL=$1 READ=$2 NONE=$3 CONF=$4 ROUNDS=$5
shift 5
for b in "$FULL" "$READ" "$NONE"; do
    [ -x "$b" ] || { echo "cpu_tracer_parts.sh: $b: not an executable" >&2; exit 2; }
done
T=$(mktemp -d "${TMPDIR:-/tmp}/cpu_parts-XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
# setting k (1..6): its build b and what its records are; even k make
# them within the step
setting() {
    case $1 in
    1 | 2) b=$FULL what="full (statistics and hash)" ;;
    3 | 4) b=$READ what="a plain read of every byte" ;;
    *) b=$NONE what="nothing read" ;;
    esac
}
# one round of setting k at t threads: a line "off op" in $T/k.t
one() {
    setting "$1"
    # the measuring builds' records are not the outputs' (their carry check
    # reports a fault every step): stderr is shown only when a run fails
    if [ $(($1 % 2)) -eq 0 ]; then
        DIVTRACE_TRACE_DEFER=0 "$b" --rounds 1 --tsv --fixed "$CONF" -- "$2" >"$T/line" 2>"$T/err"
    else
        env -u DIVTRACE_TRACE_DEFER "$b" --rounds 1 --tsv --fixed "$CONF" -- "$2" >"$T/line" 2>"$T/err"
    fi || { cat "$T/err" >&2; exit 2; }
    cut -f5,6 "$T/line" >>"$T/$1.$2"
}
for t in "$@"; do
    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        if [ $((r % 2)) -eq 0 ]; then order="1 2 3 4 5 6"; else order="6 5 4 3 2 1"; fi
        for k in $order; do one "$k" "$t"; done
        r=$((r + 1))
    done
done
med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# the median of the rounds' costs of setting k at t threads, in percent
cost() { awk '{ print 100 * ($2 / $1 - 1) }' "$T/$1.$2" | med; }
head="| records | made |"
rule="| --- | --- |"
for t in "$@"; do
    head="$head $t thread$([ "$t" -eq 1 ] || echo s) |"
    rule="$rule ---: |"
done
echo "$head"
echo "$rule"
for k in 1 2 3 4 5 6; do
    setting "$k"
    if [ $((k % 2)) -eq 0 ]; then when="within the step (DIVTRACE_TRACE_DEFER=0)"; else when="default"; fi
    line="| $what | $when |"
    for t in "$@"; do
        line="$line $(cost "$k" "$t" | awk '{ printf "%+.1f%%", $1 }') |"
    done
    echo "$line"
done
line="| untraced step, ms | |"
for t in "$@"; do
    line="$line $(cat "$T"/?."$t" | cut -f1 | med | awk '{ printf "%.3f", $1 }') |"
done
echo "$line"
echo
echo "($ROUNDS rounds, medians of each round's traced over untraced step, $CONF, --cpu-gemm fixed)"
