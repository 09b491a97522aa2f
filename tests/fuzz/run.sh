#!/bin/sh
# tests/fuzz/run.sh: run libFuzzer harnesses (make fuzz), JOBS at once, each
# for TIME seconds on a scratch copy of its seed corpus, and say per harness
# how far it got. Exit 0 when no harness found a crash, leak or timeout.
#
#   run.sh SRC_FUZZ_DIR BUILD_FUZZ_DIR TIME JOBS HARNESS...
#
# SRC_FUZZ_DIR holds corpus/HARNESS/ and HARNESS.dict; BUILD_FUZZ_DIR the
# built harnesses. Each one works in BUILD_FUZZ_DIR/work/HARNESS/: corpus/
# (the seeds, then every new input it finds; kept from one run to the next),
# log, and the input of any failure (crash-*, leak-*, timeout-*). The source
# tree is never written. FUZZ_TIMEOUT (seconds, default 10) is the longest
# one input may take; FUZZ_ARGS adds libFuzzer options.
set -u

if [ "${1-}" = --one ]; then
    # one harness: the worker the parallel run below starts
    src=$2 build=$3 time=$4 h=$5
    w=$build/work/$h
    rm -rf "$w/tmp" "$w"/crash-* "$w"/leak-* "$w"/timeout-* "$w"/oom-* "$w"/slow-unit-*
    mkdir -p "$w/corpus" "$w/tmp" || exit 2
    cp "$src/corpus/$h"/* "$w/corpus/" 2>/dev/null
    dict=
    [ -f "$src/$h.dict" ] && dict=-dict=$src/$h.dict
    # stdout and stderr of the code under test are closed (-close_fd_mask=3):
    # libFuzzer's and the sanitizers' reports still reach the log
    TMPDIR=$w/tmp "$build/$h" -max_total_time="$time" -timeout="${FUZZ_TIMEOUT:-10}" \
        -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$w/" $dict ${FUZZ_ARGS-} \
        "$w/corpus" >"$w/log" 2>&1
    echo $? >"$w/rc"
    exit 0
fi

if [ $# -lt 5 ]; then
    echo "usage: $0 SRC_FUZZ_DIR BUILD_FUZZ_DIR TIME JOBS HARNESS..." >&2
    exit 2
fi
src=$1 build=$2 time=$3 jobs=$4
shift 4
case $time in ''|*[!0-9]*) echo "run.sh: FUZZ_TIME '$time': expected seconds" >&2; exit 2 ;; esac
[ -n "$jobs" ] || jobs=$(nproc 2>/dev/null || echo 1)
case $jobs in ''|*[!0-9]*|0) echo "run.sh: FUZZ_JOBS '$jobs': expected a positive number" >&2; exit 2 ;; esac
for h in "$@"; do
    [ -x "$build/$h" ] || { echo "run.sh: $build/$h not built" >&2; exit 2; }
    rm -f "$build/work/$h/rc"
done

echo "fuzzing $# harnesses for ${time}s each, $jobs at a time (work: $build/work)"
printf '%s\n' "$@" | xargs -n 1 -P "$jobs" sh "$0" --one "$src" "$build" "$time"

failed=0
for h in "$@"; do
    w=$build/work/$h
    rc=$(cat "$w/rc" 2>/dev/null || echo none)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$w/log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$w/log" | tail -n 1)
    corpus=$(ls "$w/corpus" | wc -l)
    if [ "$rc" = 0 ]; then
        verdict=ok
    else
        failed=1
        verdict=$(grep -m 1 -o 'ERROR: [A-Za-z]*: [a-z -]*\|runtime error: .*' "$w/log" |
            sed 's/ \(on\|on unknown\|after\)\( address\)* *$//')
        art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$w/log" | tail -n 1)
        verdict="FAILED (exit $rc${verdict:+: $verdict}${art:+; input $art}; log $w/log)"
    fi
    printf '%-11s %10s execs  %-20s corpus %5s  %s\n' "$h" "${execs:-?}" "${cov:-cov: ?}" "$corpus" "$verdict"
done
exit $failed
