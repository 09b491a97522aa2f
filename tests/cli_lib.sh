# cli_lib.sh: what the end-to-end test scripts share; sourced after they set
# NAME (the script's name, for messages). Sets DT (the program), DATA (the
# default data set), T (a private directory removed at exit) and the
# counters that the checks below keep.
DT=${DIVTRACE:-$(dirname "$0")/../build/src/divtrace}
DATA=/usr/share/datasets/fashion-mnist
T=$(mktemp -d "${TMPDIR:-/tmp}/divtrace-${NAME%.sh}-XXXXXX")
trap 'rm -rf "$T"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
# expect CODE NAME -- COMMAND...: the command exits with CODE
expect() {
    code=$1 name=$2
    shift 3
    "$@" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq "$code" ]; then ok "$name"; else bad "$name (exit $rc, wanted $code)"; sed 's/^/    /' "$T/err" | head -5; fi
}
# has FILE PATTERN NAME: FILE contains the extended regex PATTERN
has() {
    if grep -Eq -- "$2" "$1"; then ok "$3"; else bad "$3 (no /$2/ in $1)"; sed 's/^/    /' "$1" | head -20; fi
}
# one_line NAME: stderr of the last command is exactly one line
one_line() {
    n=$(wc -l <"$T/err")
    if [ "$n" -eq 1 ]; then ok "$1: one line on stderr"; else bad "$1: $n lines on stderr"; cat "$T/err"; fi
}
# sanitized FILE: FILE (a program or a shared library) is built with
# AddressSanitizer: gcc links its runtime as a shared library, clang into
# the program, so look for the runtime's entry point, not for libasan
sanitized() { grep -aq '__asan_init' "$1" 2>/dev/null; }
# finish: the summary line; the exit status says whether every check passed
finish() {
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}

if [ ! -r "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -r "$DATA/train-images-idx3-ubyte" ]; then
    echo "$NAME: $DATA is missing: install dataset-fashion-mnist (./bootstrap does)" >&2
    exit 99
fi
# The training images uncompressed, once per build (make check names the
# place in DIVTRACE_TEST_CACHE): each run that takes the default --data then
# skips a quarter second of inflating. Written under a temporary name and
# renamed, so tests running side by side never read half a file.
if [ -n "${DIVTRACE_TEST_CACHE:-}" ] && [ -z "${DIVTRACE_DATA:-}" ] && [ -r "$DATA/train-images-idx3-ubyte.gz" ]; then
    c=$DIVTRACE_TEST_CACHE/fashion-mnist
    if [ ! -r "$c/train-images-idx3-ubyte" ]; then
        mkdir -p "$c" && tmp=$(mktemp "$c/.images.XXXXXX") &&
            gzip -dc "$DATA/train-images-idx3-ubyte.gz" >"$tmp" && mv -f "$tmp" "$c/train-images-idx3-ubyte"
    fi
    [ -r "$c/train-images-idx3-ubyte" ] && DIVTRACE_DATA=$c && export DIVTRACE_DATA
fi
