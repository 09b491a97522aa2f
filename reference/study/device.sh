#!/bin/sh
# device.sh: run the PredNet experiments C and D of the study on the GPU
# machine: every GPU condition, and the CPU conditions (which want its 16
# cores) beside them, then the reports (explain's verdict for every pair).
# One call of the device tool may run 10 minutes and the work takes longer,
# so the first call starts it in a process session of its own (it outlives
# the call while the machine is held) and every call waits for it up to a
# deadline, then packs what is done into OUT.
#
# Usage: reference/study/device.sh PACK OUT start|wait [SECONDS]
#   PACK     the folder tests/gpu/pack.sh made (bin/, lib/, data/)
#   OUT      where the logs and study.tar.gz go
#   start    start the work (and wait); wait: only wait
#   SECONDS  how long this call waits (default 540)
#
# The work, in /tmp/study: four sweeps side by side, each in its own
# directory (a sweep locks its directory): C's GPU conditions, D's GPU
# conditions, C's cpu and D's cpu-formula (one thread each, 12 trials at a
# time). Then the traces are gathered by hard links into C-prednet/ and
# D-bug/ (D's cpu trials are C's: the same options, and a CPU run with a
# fixed kernel and thread count is bitwise reproducible), each sweep is run
# once more there (it must find every trial complete), and each report is
# made with 14 workers and without whole-step replays (explain checks every
# op of every pair's first divergent step, in both runs).
set -u
P=$(cd "$1" && pwd)
OUT=$2
MODE=$3
LIMIT=${4:-540}
HERE=$(cd "$(dirname "$0")" && pwd)
S=/tmp/study
mkdir -p "$OUT" "$S"
export LD_LIBRARY_PATH=$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
DT=$P/bin/divtrace

if [ "$MODE" = start ]; then
    F=/usr/share/datasets/fashion-mnist # the default data set's place
    if [ ! -r "$F/train-images-idx3-ubyte.gz" ]; then
        mkdir -p "$F" && cp "$P/data/train-images-idx3-ubyte.gz" "$F/"
    fi
    cat >"$S/work.sh" <<EOF
#!/bin/sh
DT=$DT
HERE=$HERE
S=$S
EOF
    cat >>"$S/work.sh" <<'EOF'
stamp() { echo "== $(date -u '+%F %T') $*"; }
sweep() { # DIR SPEC JOBS SELECTOR...
    d=$1 spec=$2 j=$3
    shift 3
    sel=
    for x in "$@"; do sel="$sel --only $x"; done
    s0=$(date +%s)
    "$DT" sweep "$HERE/$spec.sweep" -o "$S/$d" $sel -j "$j" -q
    echo "sweep $d ($spec$sel): exit $?, $(($(date +%s) - s0)) s"
}
stamp "work starts on $(hostname), $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
sweep Cg C-prednet 4 group=gpu group=nondet group=seed1 &
sweep Dg D-bug 4 cond=cudnn cond=cudnn-drop cond=cudnn-bf16 &
sweep Cc C-prednet 12 group=cpu &
sweep Dc D-bug 12 cond=cpu-formula &
wait
stamp "sweeps done"
for e in C-prednet:Cg:Cc D-bug:Dg:Dc; do
    name=${e%%:*} rest=${e#*:}
    mkdir -p "$S/$name/runs"
    for part in ${rest%%:*} ${rest#*:}; do
        for c in "$S/$part"/runs/*; do
            [ -d "$c" ] || continue
            mkdir -p "$S/$name/runs/${c##*/}"
            ln -f "$c"/*.dtr "$S/$name/runs/${c##*/}/" 2>/dev/null
            cp -f "$c"/*.log "$S/$name/runs/${c##*/}/" 2>/dev/null
        done
    done
done
mkdir -p "$S/D-bug/runs/cpu"
ln -f "$S/Cc/runs/cpu/"*.dtr "$S/D-bug/runs/cpu/"
for name in C-prednet D-bug; do
    sweep "$name" "$name" 1
done
stamp "gathered"
for name in C-prednet D-bug; do
    s0=$(date +%s)
    "$DT" report "$S/$name" -j 14 --no-replay -q
    echo "report $name: exit $?, $(($(date +%s) - s0)) s"
done
stamp "reports done"
touch "$S/DONE"
EOF
    chmod +x "$S/work.sh"
    setsid "$S/work.sh" >"$S/work.log" 2>&1 </dev/null &
fi

# wait for the work (or the deadline), then pack what there is
t0=$(date +%s)
while [ ! -e "$S/DONE" ] && [ $(($(date +%s) - t0)) -lt "$LIMIT" ]; do
    sleep 10
done
cp "$S/work.log" "$OUT/work.log" 2>/dev/null
for d in Cg Dg Cc Dc C-prednet D-bug; do
    [ -d "$S/$d/runs" ] || continue
    echo "$d: $(find "$S/$d/runs" -name '*.dtr' | wc -l) traces, $(find "$S/$d/runs" -name '*.part' | wc -l) in flight" >>"$OUT/work.log"
done
if [ -e "$S/DONE" ]; then
    (cd "$S" && find C-prednet D-bug -path '*/runs' -prune -o -type f -print |
        tar czf "$OUT/study.tar.gz" -T -)
    (cd "$S" && find C-prednet D-bug -name '*.log' -path '*/runs/*' | tar czf "$OUT/trial-logs.tar.gz" -T -)
    echo "packed" >>"$OUT/work.log"
fi
cat "$OUT/work.log"
