#!/bin/sh
# run.sh: `make bench`: hash throughput, tracing overhead per step (the
# autoencoder's and PredNet's), conv2d against sgemm, the oracle and the mpfr
# backend, the CPU step beside PyTorch's (cpu_speed.sh, with torch), the
# cpu backend's sets of convolutions beside their switch (cpu_ab.sh), the
# time diff takes on two 5000-step autoencoder traces, and the
# compressors a trace's checkpoints and records could use (bench_ckpt),
# with the floor no compressor of those checkpoints can pass (ckpt_entropy.py).
# Prints Markdown; tests/bench/RESULTS.md holds the current table of each
# benchmark with its command and machine (git keeps the older ones).
set -eu
B=${1:-$(pwd)}
DT="$B/src/divtrace"
T=$(mktemp -d "${TMPDIR:-/tmp}/divtrace-bench-XXXXXX")
trap 'rm -rf "$T"' EXIT

echo "## divtrace benchmarks, $(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
echo
echo "### Tensor hash, one core"
echo
"$B/tests/bench/bench_hash"
echo
echo "### Tracing overhead"
echo
TMPDIR=$T "$B/tests/bench/bench_step"
echo
echo "### conv2d: im2col + sgemm against sgemm alone"
echo
"$B/tests/bench/bench_conv"
echo
echo "### --cpu-gemm fixed against OpenBLAS's sgemm"
echo
"$B/tests/bench/bench_gemm"
echo
OPENBLAS_CORETYPE=Haswell "$B/tests/bench/bench_gemm" 2>/dev/null
echo
# OpenBLAS's AVX-512 kernel, where the CPU has AVX-512
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    OPENBLAS_CORETYPE=SkylakeX "$B/tests/bench/bench_gemm" 2>/dev/null
fi
echo
echo "### The CPU step against PyTorch's (cpu_speed.sh, 1 and 2 threads)"
echo
if python3 -c 'import torch' 2>/dev/null; then
    TMPDIR=$T sh "$(dirname "$0")/cpu_speed.sh" "$B/tests/bench/bench_cpu_step" "$(dirname "$0")/torch_models.py" 1 2
else
    echo "(skipped: python3 with torch is needed)"
fi
echo
echo "### The fixed products' sets of convolutions beside their switch (cpu_ab.sh)"
echo
sh "$(dirname "$0")/cpu_ab.sh" "$B/tests/bench/bench_cpu_step" DIVTRACE_CPU_CONV_SETS pn1 3 1 2
echo
echo "### PredNet step and its tracing overhead"
echo
TMPDIR=$T "$B/tests/bench/bench_prednet"
echo
echo "### Exact oracle (reference/oracle.h)"
echo
"$B/tests/bench/bench_oracle"
echo
echo "### mpfr backend"
echo
"$B/tests/bench/bench_mpfr"
echo
echo "### diff of two 5000-step autoencoder traces (threads 1 vs 2, trace level op)"
echo
"$DT" record -q --threads 1 -o "$T/a.dtr"
"$DT" record -q --threads 2 -o "$T/b.dtr"
ls -l "$T/a.dtr" "$T/b.dtr" | awk '{printf "trace size: %s bytes\n", $5}'
for i in 1 2 3 4 5; do
    s=$(date +%s.%N)
    "$DT" diff -q "$T/a.dtr" "$T/b.dtr" || true
    e=$(date +%s.%N)
    echo "$s $e"
done | awk '{ t = $2 - $1; if (NR == 1 || t < best) best = t }
            END { printf "diff: best of 5 runs %.3f s (target < 1 s)\n", best }'
echo
echo "### Checkpoint and record compression, one core: the default autoencoder trace"
echo
"$B/tests/bench/bench_ckpt" "$T/a.dtr"
echo
echo "### The floor of any compressor on those checkpoints (ckpt_entropy.py)"
echo
if python3 -c 'import numpy' 2>/dev/null; then
    python3 "$(dirname "$0")/ckpt_entropy.py" "$DT" "$T/a.dtr"
else
    echo "(skipped: python3 with NumPy is needed)"
fi
echo
echo "### The same for PredNet (3 steps, a checkpoint every step)"
echo
"$DT" record -q --model prednet --steps 3 --checkpoint-every 1 -o "$T/p.dtr"
"$B/tests/bench/bench_ckpt" "$T/p.dtr"
