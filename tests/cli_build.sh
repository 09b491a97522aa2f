#!/bin/sh
# cli_build.sh: every trace says which build wrote it: a recorded run's and
# a libdivtrace program's headers hold the build's revision, whether its
# tree was modified, compiler, flags, nvcc and library versions; and diff
# lists a build key that differs under "configurations differ:" (diff -v;
# the one line of identical traces names it).
set -u
NAME=cli_build.sh
. "$(dirname "$0")/cli_lib.sh"
EX=${MLP_EXAMPLE:-$(dirname "$DT")/../tests/lib/mlp_example}

# key FILE KEY PATTERN: `divtrace show`'s header line "# KEY = VALUE" has a
# non-empty VALUE matching the extended regex PATTERN
key() {
    if grep -Eq "^# $2 = ($3)\$" "$1"; then
        ok "$1: $2 = $(sed -n "s/^# $2 = //p" "$1" | head -1)"
    else
        bad "$1: no '# $2 = ' line matching /$3/"; grep "^# " "$1" | sed 's/^/    /' | head -50
    fi
}
build_keys() {
    key "$1" build_revision "[0-9a-f]{40}|unknown"
    key "$1" build_modified "yes|no|unknown"
    if grep -q "^# build_modified = yes$" "$1"; then
        key "$1" build_diff "[0-9a-f]{12}"
    elif grep -q "^# build_diff = " "$1"; then
        bad "$1: build_diff without build_modified = yes"
    fi
    key "$1" build_compiler "(gcc|clang) [0-9].*|unknown"
    key "$1" build_cflags ".+"
    key "$1" build_nvcc "none|unknown|[0-9][0-9.]*"
    key "$1" xxhash_version "[0-9]+\.[0-9]+\.[0-9]+.*"
}

expect 0 "record a tiny run" -- "$DT" record -q --steps 2 --layers 784,8,784 -o "$T/x.dtr"
expect 0 "show it" -- "$DT" show "$T/x.dtr"
cp "$T/out" "$T/x.show"
build_keys "$T/x.show"
key "$T/x.show" mpfr_version "[0-9]+\.[0-9]+\.[0-9]+.*"
key "$T/x.show" openblas_config "OpenBLAS [0-9].*"
# a revision is known exactly when the source tree is a git checkout of its own
if top=$(cd "${top_srcdir:-$(dirname "$0")/..}" && pwd -P) &&
   gtop=$(cd "$top" && git rev-parse --show-toplevel 2>/dev/null) &&
   [ "$(cd "$gtop" && pwd -P)" = "$top" ]; then
    key "$T/x.show" build_revision "$(cd "$top" && git rev-parse HEAD)"
else
    key "$T/x.show" build_revision "unknown"
    key "$T/x.show" build_modified "unknown"
fi
# the JSON header has them too
expect 0 "show --json" -- "$DT" show --json "$T/x.dtr"
has "$T/out" '"build_revision": "[0-9a-f]{40}|"build_revision": "unknown"' "show --json: build_revision"
has "$T/out" '"xxhash_version": "[0-9]' "show --json: xxhash_version"

# a trace written through libdivtrace describes the library's build
if [ -x "$EX" ]; then
    expect 0 "libdivtrace example run" -- "$EX" -o "$T/lib.dtr" --steps 2
    expect 0 "show the libdivtrace trace" -- "$DT" show "$T/lib.dtr"
    cp "$T/out" "$T/lib.show"
    build_keys "$T/lib.show"
    rev=$(sed -n 's/^# build_revision = //p' "$T/x.show")
    key "$T/lib.show" build_revision "$rev"
else
    bad "no libdivtrace example program at $EX"
fi

# one build twice: no build key differs
expect 0 "record the same run again" -- "$DT" record -q --steps 2 --layers 784,8,784 -o "$T/y.dtr"
expect 0 "the same build: identical" -- "$DT" diff "$T/x.dtr" "$T/y.dtr"
has "$T/out" "^identical: every op hash of all 2 common steps matches$" "the same build: one line, no key differs"
expect 0 "the same build: identical, in full" -- "$DT" diff -v "$T/x.dtr" "$T/y.dtr"
has "$T/out" "^configurations: identical$" "the same build: configurations identical"

# a build key that differs is listed under "configurations differ:": two
# one-step traces through libdivtrace (ctypes), one whose caller sets
# build_modified (a caller's keys win)
LIB=${DIVTRACE_LIB:-$(dirname "$DT")/.libs/libdivtrace.so}
cat >"$T/open.py" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
t = ctypes.c_void_p()
cfg = [b"model", b"empty"] + [a.encode() for a in sys.argv[3:]]
arr = (ctypes.c_char_p * (len(cfg) + 1))(*cfg, None)
if lib.divtrace_open(ctypes.byref(t), sys.argv[2].encode(), arr, b"op") != 0:
    sys.exit("divtrace_open failed")
x = (ctypes.c_float * 1)(0.5)
shape = (ctypes.c_int64 * 1)(1)
lib.divtrace_step_end.argtypes = [ctypes.c_void_p, ctypes.c_double]
if (lib.divtrace_step_begin(t, ctypes.c_uint64(0)) != 0 or
        lib.divtrace_record(t, b"x", b"data", 0, x, 0, None, 1, shape, None, 0) != 0 or
        lib.divtrace_step_end(t, 0.25) != 0):
    sys.exit("recording a step failed")
sys.exit(1 if lib.divtrace_close(t, 0, None) != 0 else 0)
PY
# (not with a library built with AddressSanitizer, whose runtime cannot be
# loaded into an uninstrumented python3)
if command -v python3 >/dev/null && [ -r "$LIB" ] && ! sanitized "$LIB"; then
    expect 0 "libdivtrace: a one-step trace" -- python3 "$T/open.py" "$LIB" "$T/e1.dtr"
    expect 0 "libdivtrace: one that says build_modified = patched" -- \
        python3 "$T/open.py" "$LIB" "$T/e2.dtr" build_modified patched
    expect 0 "diff of the two (one identical step)" -- "$DT" diff "$T/e1.dtr" "$T/e2.dtr"
    has "$T/out" "^identical: .*; the configurations differ in build_modified$" "diff: identical, the key named"
    expect 0 "diff -v of the two" -- "$DT" diff -v "$T/e1.dtr" "$T/e2.dtr"
    has "$T/out" "^configurations differ:$" "diff: configurations differ"
    has "$T/out" "^  build_modified +(yes|no|unknown) \| patched$" "diff: build_modified A | B"
else
    echo "# skip: no python3, no $LIB, or one built with AddressSanitizer: the diff of build keys is not checked"
fi

finish
