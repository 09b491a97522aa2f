#!/bin/sh
# cli_cpu_gemm.sh: `divtrace record --cpu-gemm fixed` gives the same trace
# at 1, 2 and 4 threads, under two OpenBLAS kernels (Prescott and Haswell;
# the Haswell part is skipped, and says so, on a CPU without AVX2 and FMA)
# and with every matrix-product and sigmoid kernel of this CPU capped to
# the scalar one, and to AVX2 at 2 threads (from 2 threads the larger
# elementwise ops run in parts on the products' threads);
# explain calls it rounding only against OpenBLAS's products; replay
# reproduces it; a wrong value is refused. The autoencoder (matrix
# products) and a small PredNet (convolutions, their backward passes).
# Needs Debian's dataset-fashion-mnist (./bootstrap installs it).
set -u
NAME=cli_cpu_gemm.sh
. "$(dirname "$0")/cli_lib.sh"

same() { # NAME A B: diff finds every op hash equal
    expect 0 "$1" -- "$DT" diff -q "$2" "$3"
}

for m in ae pn; do
    if [ $m = ae ]; then
        R="$DT record -q --steps 6 --layers 784,64,16,64,784 --checkpoint-every 3"
    else
        R="$DT record -q --model prednet --stack 1,8,16 --nt 4 --batch 2 --steps 2"
    fi
    for t in 1 2 4; do
        expect 0 "$m: fixed, $t threads" -- $R --cpu-gemm fixed --threads $t -o "$T/$m-t$t.dtr"
    done
    same "$m: 1 and 2 threads, the same trace" "$T/$m-t1.dtr" "$T/$m-t2.dtr"
    same "$m: 1 and 4 threads, the same trace" "$T/$m-t1.dtr" "$T/$m-t4.dtr"
    expect 0 "$m: fixed, Prescott kernel" -- $R --cpu-gemm fixed --threads 2 --cpu-kernel Prescott -o "$T/$m-p.dtr"
    same "$m: default and Prescott kernels, the same trace" "$T/$m-t1.dtr" "$T/$m-p.dtr"
    if $R --cpu-gemm fixed --threads 2 --cpu-kernel Haswell -o "$T/$m-h.dtr" 2>"$T/err"; then
        same "$m: Prescott and Haswell kernels, the same trace" "$T/$m-p.dtr" "$T/$m-h.dtr"
    else
        echo "# skipped - $m: the Haswell kernel: $(cat "$T/err")"
    fi
    expect 0 "$m: fixed, scalar kernel" -- env DIVTRACE_CPU_GEMM_ISA=scalar $R --cpu-gemm fixed -o "$T/$m-s.dtr"
    same "$m: the scalar kernel, the same trace" "$T/$m-t1.dtr" "$T/$m-s.dtr"
    if grep -q 'avx2' /proc/cpuinfo 2>/dev/null; then
        expect 0 "$m: fixed, AVX2 kernels, 2 threads" -- env DIVTRACE_CPU_GEMM_ISA=avx2 $R --cpu-gemm fixed --threads 2 -o "$T/$m-a.dtr"
        same "$m: the AVX2 kernels, the same trace" "$T/$m-t1.dtr" "$T/$m-a.dtr"
    else
        echo "# skipped - $m: the AVX2 kernels: this CPU has no AVX2"
    fi
    expect 0 "$m: OpenBLAS's products" -- $R -o "$T/$m-o.dtr"
    expect 0 "$m: fixed against OpenBLAS: explain" -- "$DT" explain "$T/$m-o.dtr" "$T/$m-t1.dtr"
    tail -n 1 "$T/out" >"$T/last"
    has "$T/last" '^rounding only: cpu_gemm \(absent\) \| fixed' "$m: explain calls it rounding only"
    expect 0 "$m: replay of the fixed trace at 4 threads" -- "$DT" replay -q "$T/$m-t4.dtr" --step 1
done
expect 2 "--cpu-gemm wrong" -- "$DT" record --cpu-gemm fast -o "$T/x.dtr"
one_line "--cpu-gemm wrong"
[ ! -e "$T/x.dtr" ] && ok "--cpu-gemm wrong: no trace written" || bad "--cpu-gemm wrong: a trace was written"
finish
