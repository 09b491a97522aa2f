#!/bin/sh
# tests/fuzz/coverage.sh: line coverage of the readers by the fuzz harnesses
# (make fuzz-cov). Builds the harnesses with clang's source-based coverage
# (-fprofile-instr-generate -fcoverage-mapping) in a build of their own, runs
# each once over its seed corpus and over what `make fuzz` found (-runs=0),
# and prints the line coverage of each reader file.
#
#   coverage.sh TOP_SRCDIR BUILD_FUZZ_DIR HARNESS...
#
# The build lives in BUILD_FUZZ_DIR/cov/build (configured on first use), the
# profiles in BUILD_FUZZ_DIR/cov; found inputs are read from
# BUILD_FUZZ_DIR/work/HARNESS/corpus when present. Environment: SEEDS_ONLY=1
# (the seed corpora alone), CC (default clang), LLVM_PROFDATA and LLVM_COV
# (default llvm-profdata-14 and llvm-cov-14, else without the version), JOBS
# (make -j, default 2).
set -eu

if [ $# -lt 3 ]; then
    echo "usage: $0 TOP_SRCDIR BUILD_FUZZ_DIR HARNESS..." >&2
    exit 2
fi
top=$(cd "$1" && pwd)
fuzz=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2

tool() {
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 && { echo "$t"; return 0; }
    done
    echo "coverage.sh: none of $* found (install llvm)" >&2
    exit 2
}
profdata=${LLVM_PROFDATA:-$(tool llvm-profdata-14 llvm-profdata)}
llvmcov=${LLVM_COV:-$(tool llvm-cov-14 llvm-cov)}

cov=$fuzz/cov
b=$cov/build
mkdir -p "$b"
if [ ! -f "$b/Makefile" ]; then
    echo "coverage.sh: configuring a coverage build in $b"
    (cd "$b" && CC=${CC:-clang} "$top/configure" -q --without-cuda --enable-fuzz \
        CFLAGS="-O1 -g -fprofile-instr-generate -fcoverage-mapping") || exit 2
fi
progs=
for h in "$@"; do progs="$progs tests/fuzz/$h"; done
# shellcheck disable=SC2086
make -C "$b" -s -j"${JOBS:-2}" ARFLAGS=cr $progs >/dev/null || exit 2

rm -rf "$cov/prof" "$cov/scratch"
mkdir -p "$cov/prof"
objects=
for h in "$@"; do
    dirs=$top/tests/fuzz/corpus/$h
    [ -d "$fuzz/work/$h/corpus" ] && [ "${SEEDS_ONLY:-0}" != 1 ] && dirs="$dirs $fuzz/work/$h/corpus"
    # an empty first directory: libFuzzer's output, which -runs=0 leaves empty
    mkdir -p "$cov/scratch/$h" "$cov/tmp"
    # shellcheck disable=SC2086
    TMPDIR=$cov/tmp LLVM_PROFILE_FILE="$cov/prof/$h-%p.profraw" "$b/tests/fuzz/$h" -runs=0 \
        -close_fd_mask=3 "$cov/scratch/$h" $dirs >"$cov/$h.log" 2>&1 ||
        { echo "coverage.sh: $h failed on its corpus (see $cov/$h.log)" >&2; exit 1; }
    n=$(sed -n 's/.*INFO: seed corpus: files: \([0-9]*\).*/\1/p' "$cov/$h.log" | tail -n 1)
    echo "$h: ran ${n:-?} inputs ($dirs)"
    # llvm-cov: the first binary, then -object for each other
    objects="$objects${objects:+ -object} $b/tests/fuzz/$h"
done
"$profdata" merge -sparse "$cov"/prof/*.profraw -o "$cov/fuzz.profdata"

# functions of these files that read no input (the Moving-MNIST generator,
# the dataset directory lookup): left out of the "readers" column
others="video_moving_mnist video_bounce idx_find_images"
files="src/trace_read.c src/cmd_show.c src/cmd_diff.c src/diff.c src/idx.c src/video.c src/sweep.c"
echo
printf '%-18s %7s %7s %8s   %s\n' "file" "lines" "missed" "cover" "readers only"
for f in $files; do
    # shellcheck disable=SC2086
    "$llvmcov" report -show-functions -instr-profile="$cov/fuzz.profdata" $objects "$top/$f" 2>&1 |
        awk -v f="$f" -v others="$others" '
            BEGIN { split(others, o, " "); for (k in o) skip[o[k]] = 1 }
            $1 == "TOTAL" { lines = $5; miss = $6 }
            NF >= 10 && $2 ~ /^[0-9]+$/ && $1 != "TOTAL" {
                name = $1; sub(/^.*:/, "", name)
                if (!(name in skip)) { rl += $5; rm += $6 } else cut = 1
            }
            END {
                extra = cut && rl ? sprintf("%.2f%% (%d of %d lines)", 100 * (rl - rm) / rl, rl - rm, rl) : ""
                printf "%-18s %7s %7s %7.2f%%   %s\n", f, lines, miss, lines ? 100 * (lines - miss) / lines : 0, extra
            }'
done
echo
echo "line by line: $llvmcov show -instr-profile=$cov/fuzz.profdata $objects $top/FILE"
