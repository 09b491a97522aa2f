#!/bin/sh
# device-ab.sh: experiments A and B of the study on the GPU machine, in one
# call of the device tool: both sweeps side by side, then the reports (with
# explain's verdict for every pair, and A's oracle replays of trials 1 and
# 2) while the traces are there; the summaries and reports, without the
# traces, go to $OUT/ab.tar.gz. Run from the repository root, with the pack
# of tests/gpu/pack.sh in build-gpu/:
#   sh reference/study/device-ab.sh        (device tool, carry build-gpu)
P=$PWD/build-gpu
export LD_LIBRARY_PATH=$P/lib DIVTRACE_DATA=$P/data
DT=$P/bin/divtrace S=/tmp/ab
mkdir -p $S "$OUT"
t0=$(date +%s)
( timeout 330 $DT sweep reference/study/A-autoencoder.sweep -o $S/A-autoencoder -j 8 -q; echo "A sweep rc=$? $(($(date +%s)-t0)) s" ) &
( timeout 330 $DT sweep reference/study/B-hardware.sweep -o $S/B-hardware -j 8 -q; echo "B sweep rc=$? $(($(date +%s)-t0)) s" ) &
wait
t1=$(date +%s)
timeout 100 $DT report $S/B-hardware -j 8 -q; echo "B report rc=$? $(($(date +%s)-t1)) s"
t1=$(date +%s)
timeout $((520-(t1-t0))) $DT report $S/A-autoencoder -j 14 --replay-trials 2 -q; echo "A report rc=$? $(($(date +%s)-t1)) s"
cd $S && find A-autoencoder B-hardware -path '*/runs' -prune -o -type f -print | tar czf "$OUT/ab.tar.gz" -T -
echo "total $(($(date +%s)-t0)) s"
