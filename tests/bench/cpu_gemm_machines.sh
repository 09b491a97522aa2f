#!/bin/sh
# cpu_gemm_machines.sh: `divtrace record --cpu-gemm fixed` on another
# machine (the GPU machine's CPU, through the device tool): the autoencoder
# and a small PredNet recorded at 1, 4 and 16 threads under its default
# OpenBLAS kernel and two others must give one trace, and the same trace as
# the one recorded by the same command line on the machine where REF was
# made; then bench_gemm at 1 to 16 threads against this machine's OpenBLAS.
# Usage: tests/bench/cpu_gemm_machines.sh PACK OUT [REF]
#   PACK  the folder tests/gpu/pack.sh made (bin/divtrace, bin/bench_gemm)
#   OUT   where the log goes (cpu_gemm_machines.txt)
#   REF   a folder with ae.dtr and pn.dtr recorded elsewhere by
#         tests/bench/cpu_gemm_machines.sh --ref REF (any thread count)
# Exit status: 0 every trace the same; 1 some differ; 2 trouble.
set -u
AE="--steps 20 --layers 784,64,16,64,784 --checkpoint-every 10 --cpu-gemm fixed -q"
PN="--model prednet --stack 1,8,16 --nt 4 --batch 2 --steps 2 --cpu-gemm fixed -q"
if [ "${1:-}" = --ref ]; then # record the reference traces here, with the build in build/
    [ -n "${2:-}" ] || { echo "cpu_gemm_machines.sh: --ref needs a folder" >&2; exit 2; }
    mkdir -p "$2" || exit 2
    build/src/divtrace record $AE --threads 2 -o "$2/ae.dtr" &&
        build/src/divtrace record $PN --threads 2 -o "$2/pn.dtr" || exit 2
    exit 0
fi
[ -d "${1:-}" ] && [ -n "${2:-}" ] || { echo "usage: cpu_gemm_machines.sh PACK OUT [REF]" >&2; exit 2; }
P=$(cd "$1" && pwd)
O=$2
R=${3:-}
mkdir -p "$O" || exit 2
export LD_LIBRARY_PATH="$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" DIVTRACE_DATA="$P/data"
DT=$P/bin/divtrace
W=$(mktemp -d "${TMPDIR:-/tmp}/cpu-gemm-XXXXXX")
trap 'rm -rf "$W"' EXIT
differ=0
exec >"$O/cpu_gemm_machines.txt" 2>&1
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
for m in ae pn; do
    if [ $m = ae ]; then opts=$AE; else opts=$PN; fi
    first=
    for conf in "1 default" "4 default" "16 default" "4 Haswell" "16 SkylakeX" "4 Prescott"; do
        t=${conf% *} k=${conf#* }
        kopt=
        [ "$k" = default ] || kopt="--cpu-kernel $k"
        out=$W/$m-$t-$k.dtr
        if ! $DT record $opts --threads "$t" $kopt -o "$out" 2>"$W/err"; then
            echo "$m, $t threads, kernel $k: not recorded: $(cat "$W/err")"
            continue
        fi
        core=$($DT show "$out" | sed -n 's/^# openblas_core = //p')
        if [ -z "$first" ]; then
            first=$out
            echo "$m, $t threads, kernel $k (OpenBLAS runs $core): the first"
        elif $DT diff -q "$first" "$out"; then
            echo "$m, $t threads, kernel $k (OpenBLAS runs $core): the same trace"
        else
            echo "$m, $t threads, kernel $k (OpenBLAS runs $core): DIFFERS"
            differ=1
        fi
    done
    if [ -n "$R" ] && [ -n "$first" ]; then
        if $DT diff -q "$R/$m.dtr" "$first"; then
            echo "$m: the same trace as the one recorded on the other machine"
        else
            echo "$m: DIFFERS from the one recorded on the other machine"
            differ=1
        fi
    fi
done
echo
"$P/bin/bench_gemm" 1 2 4 8 16
exit $differ
