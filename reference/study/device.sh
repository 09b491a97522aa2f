#!/bin/sh
# device.sh: run the study's trials that need the GPU machine (every GPU
# condition, the CPU conditions of the PredNet experiments C and D, which
# want its 16 cores, and all of experiment B, whose CPU/GPU pairs must be
# diffed where both traces are), within a deadline. Sweeps are resumable, so a second call picks up where the first
# stopped. Then report on each experiment (replays included where a GPU
# is needed) and pack the summaries and reports into OUT.
#
# Usage: reference/study/device.sh PACK OUT [SECONDS] [report]
#   PACK     the folder tests/gpu/pack.sh made (bin/, lib/, data/)
#   OUT      where the log and study.tar.gz go
#   SECONDS  stop starting trials after this long (default 540)
#   report   after the sweeps, run divtrace report on each experiment
set -u
P=$(cd "$1" && pwd)
OUT=$2
LIMIT=${3:-540}
PHASE=${4:-}
HERE=$(cd "$(dirname "$0")" && pwd)
DT=$P/bin/divtrace
S=${STUDY:-$P/study}   # where the sweeps write (STUDY: outside PACK, so a new PACK keeps it)
mkdir -p "$OUT" "$S"
export LD_LIBRARY_PATH=$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
LOG=$OUT/study.log
exec >>"$LOG" 2>&1
echo "== $(date -u '+%F %T') device.sh $* on $(hostname), $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true

# the default data set's place (the machine has none)
F=/usr/share/datasets/fashion-mnist
if [ ! -r "$F/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$F" && cp "$P/data/train-images-idx3-ubyte.gz" "$F/"
fi

sweep() { # EXPERIMENT SELECTOR JOBS
    timeout -s INT "$LIMIT" "$DT" sweep "$HERE/$1.sweep" -o "$S/$1" --only "$2" -j "$3" -q
    echo "sweep $1 --only $2: exit $?"
}
# CPU trials on 12 cores, GPU trials two at a time on the rest; one sweep
# at a time in a directory (a sweep locks its directory), so the GPU
# conditions of C and D wait for their CPU conditions
sweep C-prednet group=cpu 6 &
sweep D-bug group=cpubug 6 &
(
    sweep A-autoencoder '*' 2
    sweep B-hardware '*' 2
) &
wait
sweep C-prednet group=gpu 2 &
sweep D-bug group=gpu 2 &
wait

if [ "$PHASE" = report ]; then
    for e in A-autoencoder B-hardware C-prednet D-bug; do
        [ -d "$S/$e" ] || continue
        case $e in C-*|D-*) n=1 ;; *) n=2 ;; esac
        "$DT" report "$S/$e" --replay-trials $n -q
        echo "report $e: exit $?"
    done
fi
# what comes back: the summaries and reports, not the traces
(cd "$S" && find . -path '*/runs' -prune -o -type f -print | tar czf "$OUT/study.tar.gz" -T -)
for e in A-autoencoder B-hardware C-prednet D-bug; do
    [ -d "$S/$e/runs" ] || continue
    echo "$e: $(find "$S/$e/runs" -name '*.dtr' | wc -l) traces, $(find "$S/$e/runs" -name '*.part' | wc -l) in flight"
done
echo "== $(date -u '+%F %T') done"
