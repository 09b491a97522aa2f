#!/bin/sh
# cpu_speed.sh: the CPU training step of divtrace against PyTorch's, side by
# side in one call: bench_cpu_step (OpenBLAS's products and --cpu-gemm
# fixed, tracing off and at level op) and torch_models.py --device cpu
# (eager: PyTorch has no CUDA graph on the CPU; its own threads set by
# OMP_NUM_THREADS and torch.set_num_threads through it), for the autoencoder
# and PredNet 1,16,32,64 @ 64x64 batch 1, at each thread count. Prints a
# Markdown table of ms per step with each divtrace cell's ratio over
# PyTorch's step at the same thread count, medians of ROUNDS (default 3)
# alternating rounds. CONFS (default "ae pn1") picks the models.
# Usage: tests/bench/cpu_speed.sh BENCH_CPU_STEP TORCH_MODELS_PY [THREADS...]
#   (default threads: 1 2); on the GPU machine:
#   build-gpu/cpu_speed.sh build-gpu/bin/bench_cpu_step build-gpu/torch_models.py 1 2 4 16
# Needs python3 with torch; DIVTRACE_DATA as for divtrace record.
set -eu
[ $# -ge 2 ] || { echo "usage: cpu_speed.sh BENCH_CPU_STEP TORCH_MODELS_PY [THREADS...]" >&2; exit 2; }
BENCH=$1
PY=$2
shift 2
[ $# -gt 0 ] || set -- 1 2
W=$(mktemp -d "${TMPDIR:-/tmp}/cpu-speed-XXXXXX")
trap 'rm -rf "$W"' EXIT
ROUNDS=${ROUNDS:-3}
CONFS=${CONFS:-ae pn1}
for key in $CONFS; do
    case $key in ae | pn1) ;; *) echo "cpu_speed.sh: CONFS: '$key' is not ae or pn1" >&2; exit 2 ;; esac
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
# Rounds alternate divtrace (its four variants) and PyTorch, so that the
# machine's load moves both sides of a ratio alike; each cell is the median
# of its rounds.
r=0
while [ $r -lt "$ROUNDS" ]; do
    r=$((r + 1))
    # shellcheck disable=SC2086 # (CONFS: words)
    "$BENCH" --rounds 1 --tsv $CONFS -- "$@" >>"$W/dt.tsv"
    for t in "$@"; do
        for key in $CONFS; do
            conf=ae
            [ "$key" = ae ] || conf=pn-64-b1
            steps=300
            [ "$key" = ae ] || steps=5
            ms=$(OMP_NUM_THREADS=$t MKL_NUM_THREADS=$t python3 "$PY" --device cpu --config "$conf" \
                --warmup 3 --steps "$steps" 2>"$W/err" | awk -F'|' '/^\| / && $5 ~ /[0-9]/ { gsub(/ /, "", $5); print $5; exit }')
            if [ -z "$ms" ]; then
                echo "cpu_speed.sh: torch_models.py $conf at $t threads: $(tail -n 1 "$W/err")" >&2
                exit 2
            fi
            printf '%s\t%s\t%s\n' "$key" "$t" "$ms" >>"$W/torch.tsv"
        done
    done
done
# medians per configuration and thread count, column by column
median() { # FILE COLUMN KEY THREADS
    awk -F'\t' -v c="$2" -v k="$3" -v t="$4" '$1 == k && $2 == t { print $c }' "$1" | sort -g |
        awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
for key in $CONFS; do
    for t in "$@"; do
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$key" "$t" "$(median "$W/dt.tsv" 3 $key $t)" \
            "$(median "$W/dt.tsv" 4 $key $t)" "$(median "$W/dt.tsv" 5 $key $t)" \
            "$(median "$W/dt.tsv" 6 $key $t)" "$(median "$W/torch.tsv" 3 $key $t)"
    done
done >"$W/med.tsv"
echo
echo "| configuration | threads | OpenBLAS, off | OpenBLAS, op | fixed, off | fixed, op | PyTorch | tracing (fixed) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
awk -F'\t' '{ p = $7; name = $1 == "ae" ? "autoencoder, batch 100" : "PredNet 1,16,32,64 @ 64x64, nt 20, batch 1"
      printf "| %s | %s", name, $2
      for (i = 3; i <= 6; i++) printf " | %.3f (%.2f)", $i, $i / p
      printf " | %.3f | %+.1f%% |\n", p, 100 * ($6 / $5 - 1) }' "$W/med.tsv"
echo
echo "(each divtrace cell: ms per step (ratio over PyTorch's step at the same thread count); medians of"
echo "$ROUNDS rounds, each round every divtrace variant and then PyTorch; PyTorch: eager, the median of its"
echo "timed steps in a round)"
