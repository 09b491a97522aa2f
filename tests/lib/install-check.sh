#!/bin/sh
# install-check.sh BUILDDIR: install divtrace from BUILDDIR into a private
# staging directory (DESTDIR, as a package build does), then build the example trainer (tests/lib/mlp_example.c) against
# the installed libdivtrace as a user would, with
# `pkg-config --cflags --libs divtrace` (and once statically, with --static),
# run both, and read their traces with the installed divtrace: two runs
# identical, the man pages installed; the PyTorch adapter's C core is
# installed where the package finds it. For CI, after `make check`.
set -eu
B=$(cd "${1:?usage: install-check.sh BUILDDIR}" && pwd)
S=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/divtrace-install-XXXXXX")
trap 'rm -rf "$T"' EXIT
CC=${CC:-cc}
prefix=$(sed -n 's/^prefix = //p' "$B/Makefile")
libdir=$(sed -n 's/^libdir = //p' "$B/Makefile" | sed "s|\${exec_prefix}|$prefix|")
D=$T/root
P=$D$prefix

make -C "$B" install DESTDIR="$D" >"$T/install.log" 2>&1 || { cat "$T/install.log"; exit 1; }
for f in include/divtrace.h bin/divtrace \
    share/man/man3/libdivtrace.3 share/man/man3/divtrace_open.3 \
    share/man/man3/divtrace_record.3 share/man/man3/divtrace_checkpoint.3; do
    [ -e "$P/$f" ] || { echo "install-check: $P/$f was not installed" >&2; exit 1; }
done
# only the API is exported
if nm -D --defined-only "$D$libdir/libdivtrace.so" | awk '$2 ~ /^[TDBR]$/ { print $3 }' | grep -v '^divtrace_'; then
    echo "install-check: libdivtrace.so exports symbols besides divtrace_*" >&2
    exit 1
fi

[ -e "$D$libdir/pkgconfig/divtrace.pc" ] || { echo "install-check: no divtrace.pc in $D$libdir/pkgconfig" >&2; exit 1; }
# pkg-config finds the staged copy; the sysroot puts its paths under $D
export PKG_CONFIG_PATH="$D$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D"
# shellcheck disable=SC2046 # word splitting of pkg-config's flags is wanted
$CC -std=c11 -Wall -Wextra -Werror -o "$T/mlp" "$S/tests/lib/mlp_example.c" \
    $(pkg-config --cflags --libs divtrace) -lm
# the static library: its private dependencies from Libs.private
static_libs=$(pkg-config --static --libs divtrace | sed 's/-ldivtrace//')
# shellcheck disable=SC2046,SC2086
$CC -std=c11 -Wall -Wextra -Werror -o "$T/mlp-static" "$S/tests/lib/mlp_example.c" \
    $(pkg-config --cflags divtrace) "$D$libdir/libdivtrace.a" $static_libs -lm

LD_LIBRARY_PATH="$D$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$T/mlp" -o "$T/a.dtr" --steps 30 >/dev/null
"$T/mlp-static" -o "$T/b.dtr" --steps 30 >/dev/null
"$P/bin/divtrace" show "$T/a.dtr" >"$T/show.txt"
grep -q '^# steps 30, ops per step 38' "$T/show.txt" || { echo "install-check: unexpected trace" >&2; head "$T/show.txt" >&2; exit 1; }
"$P/bin/divtrace" diff -q "$T/a.dtr" "$T/b.dtr" >/dev/null || { echo "install-check: the shared and static builds differ" >&2; exit 1; }
# the PyTorch adapter's C core, where the package looks beside an installed
# library (found by a path, or by the bare name ctypes.util.find_library gives)
if [ -e "$B/src/python/.libs/_fast.so" ]; then
    [ -e "$D$libdir/divtrace/_fast.so" ] || { echo "install-check: no $D$libdir/divtrace/_fast.so" >&2; exit 1; }
    for lib in "$D$libdir/libdivtrace.so" libdivtrace.so.0; do
        got=$(cd "$T" && LD_LIBRARY_PATH="$D$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" DIVTRACE_LIB=$lib \
            PYTHONPATH="$S/src/python/divtrace" python3 -c 'import _lib; print(_lib.load_fast(required=True).__file__)')
        [ "$got" = "$D$libdir/divtrace/_fast.so" ] ||
            { echo "install-check: with DIVTRACE_LIB=$lib the C core came from '$got'" >&2; exit 1; }
    done
fi
echo "install-check: libdivtrace installed, built with pkg-config (shared and static), traces read"
