#!/bin/bash
# gpu_speed.sh: divtrace's GPU training step against the strongest PyTorch
# baseline, side by side in one run on the GPU machine, as one Markdown table
# (issue 28). For each configuration of tests/bench/torch_models.py (the
# autoencoder 784-128-32-128-784 at batch 100; PredNet 1,16,32,64 at 64x64,
# nt 20, batch 1 and 4; PredNet 3,48,96,192 at 128x160, nt 10, batch 4), in
# turn:
#   1. bench_gpu_step CONF: divtrace's cuda and cudnn (deterministic) backends,
#      tracing off and at trace level op, rounds alternating;
#   2. bench_gpu_step --backend cudnn --cudnn-algo deterministic-fast CONF:
#      the same with cuDNN's backend API engines (deterministic, transforms
#      included);
#   3. bench_gpu_step --backend cudnn --cudnn-algo fastest --pin-algos CONF:
#      the same with cuDNN's timed (possibly nondeterministic) algorithms,
#      chosen once by a short traced run and then run by every round, off
#      and op alike (a run's timed choice moves from run to run, and the
#      columns would otherwise differ by the choices too);
#   4. torch_models.py --config NAME --mode det,nondet --no-eager: PyTorch's
#      whole step in a CUDA graph, the gates fused into one convolution, once
#      deterministic (cudnn.deterministic, use_deterministic_algorithms, no NaN
#      fill) and once with cudnn.benchmark.
# Deterministic divtrace (both deterministic modes) is compared with the
# deterministic PyTorch, divtrace's fastest with the nondeterministic one. Each divtrace cell is "ms (ratio)", the
# ratio over that PyTorch; "ratio, best backend" takes the faster of cuda and
# cudnn. divtrace's ms is the wall clock of `divtrace record`'s loop over the
# steps after the first three (median of the rounds; a new batch every step,
# its loss read back); PyTorch's is the median CUDA-event time of a graph
# replay with the same batch every step.
#
# Usage: tests/bench/gpu_speed.sh [PACKED [OUTDIR]]
#   PACKED  the folder tests/gpu/pack.sh made (default build-gpu): bin/,
#           lib/, data/, and torch_models.py (beside this script or in PACKED)
#   OUTDIR  default $OUT, else /tmp/divtrace-gpu: gets gpu_speed.md (the
#           table), gpu_speed-log.txt (everything printed) and
#           gpu_speed-CONF-{divtrace,detfast,fastest,torch}.md (each program's output)
#   (on the device tool, after tests/gpu/pack.sh here:
#    bash build-gpu/gpu_speed.sh build-gpu "$OUT")
# Environment: PYTHON (default python3); ROUNDS (divtrace's alternating
# rounds, 1 to 8, default 3); CONFS (a subset of "ae pn1 pn4 kitti");
# QUICK=1 (a smoke run: 1 round of bench_gpu_step --quick, PyTorch 4 + 10
# steps). About 4 to 5 minutes on an H200 in full, under a minute with QUICK=1.
# Exit status: 0 done; 77 with one line on standard error when PyTorch or a
# CUDA GPU is missing (or divtrace's GPU backends cannot start); 2, with one
# line too, when PACKED lacks a program or an argument is wrong; 1 when a
# program failed (its cells "n/a", the rows it printed before kept).
set -u
P=$(cd "${1:-build-gpu}" 2>/dev/null && pwd) || {
    echo "gpu_speed.sh: no folder '${1:-build-gpu}' (make it with tests/gpu/pack.sh)" >&2
    exit 2
}
O=${2:-${OUT:-/tmp/divtrace-gpu}}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
BENCH=$P/bin/bench_gpu_step
TM=$HERE/torch_models.py
[ -e "$TM" ] || TM=$P/torch_models.py
QUICK=${QUICK:-0}
ROUNDS=${ROUNDS:-3}
[ "$QUICK" = 1 ] && ROUNDS=1
CONFS=${CONFS:-ae pn1 pn4 kitti}

if [ ! -x "$BENCH" ]; then
    echo "gpu_speed.sh: no $BENCH (make the pack with tests/gpu/pack.sh from a --with-cuda build)" >&2
    exit 2
fi
if [ ! -e "$TM" ]; then
    echo "gpu_speed.sh: no torch_models.py beside this script or in $P" >&2
    exit 2
fi
"$PY" - <<'EOF' 2>/dev/null
import sys
try:
    import torch
except Exception:
    sys.exit(3)
sys.exit(0 if torch.cuda.is_available() and torch.cuda.device_count() > 0 else 4)
EOF
rc=$?
case $rc in
0) ;;
4) echo "gpu_speed.sh: PyTorch ($PY) sees no CUDA GPU" >&2; exit 77 ;;
*) echo "gpu_speed.sh: $PY cannot import torch" >&2; exit 77 ;;
esac
for c in $CONFS; do
    case $c in ae | pn1 | pn4 | kitti) ;; *)
        echo "gpu_speed.sh: CONFS: unknown configuration '$c' (ae, pn1, pn4, kitti)" >&2
        exit 2
        ;;
    esac
done
case $ROUNDS in [1-8]) ;; *) echo "gpu_speed.sh: ROUNDS '$ROUNDS': expected 1 to 8" >&2; exit 2 ;; esac

mkdir -p "$O"
T=$(mktemp -d "${TMPDIR:-/tmp}/divtrace-speed-XXXXXX")
trap 'rm -rf "$T"' EXIT
export TMPDIR=$T
export LD_LIBRARY_PATH="$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# cuDNN may live in the Python wheels rather than the toolkit's folder
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9 '; then
    d=$("$PY" -c 'import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), "lib"))' 2>/dev/null)
    [ -n "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
fi
export DIVTRACE_DATA="$P/data"

if [ "$QUICK" = 1 ]; then BQ=(--quick); else BQ=(--rounds "$ROUNDS"); fi

TABLE=$O/gpu_speed.md
exec 3>&2 4>&1
exec > >(tee "$O/gpu_speed-log.txt") 2>&1
TEE=$!
echo "## divtrace against PyTorch, $(date -u '+%Y-%m-%d %H:%M UTC')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
"$P/bin/divtrace" --version 2>/dev/null | head -n 1

torch_name() {
    case $1 in ae) echo ae ;; pn1) echo pn-64-b1 ;; pn4) echo pn-64-b4 ;; kitti) echo pn-128x160-b4 ;; esac
}
# cell FILE KEYCOL KEY FIELD: field FIELD of FILE's table row whose column
# KEYCOL (awk's numbering, "|"-separated: 2 is the first column) is KEY,
# blanks trimmed; empty when there is none
cell() {
    [ -e "$1" ] || return 0
    awk -F'|' -v kc="$2" -v k="$3" -v f="$4" '
        /^\|/ { v = $kc; gsub(/^ +| +$/, "", v)
                if (v == k) { w = $f; gsub(/^ +| +$/, "", w); print w; exit } }' "$1"
}
# ratio A B: A / B to two places, or n/a
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b + 0 == 0) print "n/a"; else printf "%.2f\n", a / b }'
}
# min A B: the smaller number, or the one that is a number, or n/a
min() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        na = a !~ /^[0-9.]+$/; nb = b !~ /^[0-9.]+$/
        if (na && nb) print "n/a"; else if (na) print b; else if (nb) print a; else print (a + 0 <= b + 0 ? a : b) }'
}
# show MS BASE: "MS (RATIO)"
show() {
    if [ -z "$1" ]; then echo "n/a"; else echo "$1 ($(ratio "$1" "$2"))"; fi
}
# over1 RATIO...: how many of the ratios exceed 1.00
over1() {
    for r in "$@"; do echo "$r"; done | awk '/^[0-9.]+$/ && $1 + 0 > 1.0 { n++ } END { print n + 0 }'
}

failed=0
# run NAME OUTFILE COMMAND...: run, its output to OUTFILE and the log
run() {
    name=$1 f=$2
    shift 2
    echo
    echo "== $name: $*"
    s=$(date +%s.%N)
    "$@" >"$f" 2>"$T/err"
    rc=$?
    cat "$f" "$T/err"
    echo "== $name: exit $rc, $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f s", e - s }')"
    if [ "$rc" -eq 77 ] && [ "$name" = "$FIRST_RUN" ]; then
        echo "gpu_speed.sh: divtrace's GPU backends cannot start: $(cat "$f" "$T/err" | grep . | head -n 1)" >&3
        exit 77
    fi
    # (the rows printed before a failure stand)
    [ "$rc" -eq 0 ] || failed=1
}

if [ "$QUICK" = 1 ]; then TS=(--warmup 4 --steps 10); else TS=(--warmup 10); fi
ROWS=$T/rows
: >"$ROWS"
RATIOS=()
# the first divtrace run also tells whether divtrace's GPU backends start
# (bench_gpu_step exits 77 when they do not)
read -r first _ <<<"$CONFS"
FIRST_RUN="$first divtrace"
for c in $CONFS; do
    D=$O/gpu_speed-$c-divtrace.md
    F=$O/gpu_speed-$c-fastest.md
    E=$O/gpu_speed-$c-detfast.md
    M=$O/gpu_speed-$c-torch.md
    run "$c divtrace" "$D" "$BENCH" "${BQ[@]}" --no-streams1 "$c"
    run "$c deterministic-fast" "$E" "$BENCH" "${BQ[@]}" --no-streams1 --backend cudnn --cudnn-algo deterministic-fast "$c"
    run "$c fastest" "$F" "$BENCH" "${BQ[@]}" --no-streams1 --backend cudnn --cudnn-algo fastest --pin-algos "$c"
    if [ "$QUICK" = 1 ]; then steps=(); elif [ "$c" = ae ]; then steps=(--steps 200); else steps=(--steps 50); fi
    run "$c torch" "$M" "$PY" "$TM" --config "$(torch_name "$c")" --mode det,nondet --no-eager \
        "${TS[@]}" ${steps[@]+"${steps[@]}"}

    what=$(cell "$D" 3 cuda 2)
    [ -n "$what" ] || what=$(cell "$F" 3 "cudnn fastest pinned" 2)
    [ -n "$what" ] || what=$c
    dn_off=$(cell "$D" 3 cudnn 4) dn_op=$(cell "$D" 3 cudnn 5)
    du_off=$(cell "$D" 3 cuda 4) du_op=$(cell "$D" 3 cuda 5)
    fa_off=$(cell "$F" 3 "cudnn fastest pinned" 4) fa_op=$(cell "$F" 3 "cudnn fastest pinned" 5)
    de_off=$(cell "$E" 3 "cudnn deterministic-fast" 4) de_op=$(cell "$E" 3 "cudnn deterministic-fast" 5)
    t_det=$(cell "$M" 3 det 6) t_nd=$(cell "$M" 3 nondet 6)
    [ -n "$t_det" ] || t_det=n/a
    [ -n "$t_nd" ] || t_nd=n/a
    b_off=$(ratio "$(min "$(min "$dn_off" "$du_off")" "$de_off")" "$t_det")
    b_op=$(ratio "$(min "$(min "$dn_op" "$du_op")" "$de_op")" "$t_det")
    f_off=$(ratio "$fa_off" "$t_nd") f_op=$(ratio "$fa_op" "$t_nd")
    RATIOS+=("$(ratio "$dn_off" "$t_det")" "$(ratio "$dn_op" "$t_det")" "$(ratio "$du_off" "$t_det")"
        "$(ratio "$du_op" "$t_det")" "$(ratio "$de_off" "$t_det")" "$(ratio "$de_op" "$t_det")" "$f_off" "$f_op")
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s | %s / %s |\n' "$what" \
        "$(show "$dn_off" "$t_det")" "$(show "$dn_op" "$t_det")" "$(show "$du_off" "$t_det")" \
        "$(show "$du_op" "$t_det")" "$(show "$de_off" "$t_det")" "$(show "$de_op" "$t_det")" "$t_det" "$b_off" "$b_op" \
        "$(show "$fa_off" "$t_nd")" "$(show "$fa_op" "$t_nd")" "$t_nd" "$f_off" "$f_op" >>"$ROWS"
done

{
    echo "## divtrace against PyTorch (CUDA graph), ms per training step"
    echo
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
    echo "${gpu:-GPU (no name from nvidia-smi)}, $(date -u '+%Y-%m-%d')." \
        "$(sed -n 's/^## PyTorch \([^,]*\),.*/PyTorch \1/p' "$O"/gpu_speed-*-torch.md 2>/dev/null | head -n 1)," \
        "$(grep -ho 'cuDNN [0-9]*' "$O"/gpu_speed-*-torch.md 2>/dev/null | head -n 1) (its own)." \
        "Command: \`tests/bench/gpu_speed.sh\`$([ "$QUICK" = 1 ] && echo ' (QUICK=1)')."
    echo "divtrace: \`bench_gpu_step$([ "$QUICK" = 1 ] && echo ' --quick' || echo " --rounds $ROUNDS")\`," \
        "wall clock of the steps after the first three, median of the alternating rounds; off = tracing" \
        "off, op = trace level op; deterministic = cudnn's deterministic algorithms and cuda's fixed-order" \
        "tree, deterministic-fast = \`--cudnn-algo deterministic-fast\` (cuDNN's engines, Winograd included)," \
        "fastest = \`--cudnn-algo fastest --pin-algos\` (one timed choice, run by every round). PyTorch: \`torch_models.py --no-eager\`, fused gate" \
        "convolution, median CUDA-event time of a graph replay; det = cudnn.deterministic and" \
        "use_deterministic_algorithms without the NaN fill, nondet = cudnn.benchmark. TF32 off everywhere." \
        "Each divtrace cell: ms (ratio over the PyTorch of its mode)."
    echo
    echo "| configuration | divtrace cudnn, off | cudnn, op | divtrace cuda, off | cuda, op | cudnn deterministic-fast, off | deterministic-fast, op | PyTorch det | ratio, best deterministic (off / op) | divtrace cudnn fastest, off | fastest, op | PyTorch nondet | ratio, fastest (off / op) |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    cat "$ROWS"
    echo
    echo "Ratios over 1.00 (of the $(( ${#RATIOS[@]} )) per backend, mode and trace level): $(over1 "${RATIOS[@]}")."
} >"$TABLE"
echo
cat "$TABLE"
# the log complete before the exit
exec 1>&4 2>&3
wait "$TEE" 2>/dev/null || true
[ "$failed" -eq 0 ] || echo "gpu_speed.sh: a program failed; its cells are n/a (see $O/gpu_speed-log.txt)" >&2
exit "$failed"
