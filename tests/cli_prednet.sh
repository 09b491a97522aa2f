#!/bin/sh
# cli_prednet.sh: end-to-end tests of PredNet runs: determinism, divergence
# by thread count named by layer and time step, the Moving-MNIST default
# data, user frames (NPY, PGM directories) and their malformed variants,
# --protocol paper, and replay against the exact oracle with injected
# faults. Needs Debian's dataset-fashion-mnist (./bootstrap installs it).
set -u
NAME=cli_prednet.sh
. "$(dirname "$0")/cli_lib.sh"

# a small PredNet on generated Moving-MNIST
P="$DT record -q --model prednet --stack 1,4,8 --size 32x32 --nt 4 --batch 2"

# --- determinism
expect 0 "prednet: record" -- $P --steps 3 -o "$T/a.dtr"
expect 0 "prednet: record again" -- $P --steps 3 -o "$T/a2.dtr"
expect 0 "prednet: identical runs, diff exits 0" -- "$DT" diff "$T/a.dtr" "$T/a2.dtr"
has "$T/out" "^identical: every op hash of all 3 common steps matches" "prednet: identical runs"
expect 0 "prednet: show the header" -- "$DT" show --summary "$T/a.dtr"
has "$T/out" "^# model = prednet$" "header: model"
has "$T/out" "^# stack = 1,4,8$" "header: stack"
has "$T/out" "^# r_stack = 1,4,8$" "header: r_stack defaults to stack"
has "$T/out" "^# layer_weights = 1,0,0$" "header: layer weights default 1,0,..."
has "$T/out" "^# video = moving-mnist$" "header: generated video"
has "$T/out" "^# optimizer = adam$" "prednet trains with Adam"
has "$T/out" "^# lr = 0.001$" "... at lr 1e-3"
expect 0 "prednet: the op list" -- "$DT" show --ops --step 0 "$T/a.dtr"
has "$T/out" " L2\.t03\.conv_i +conv2d " "op names carry layer and time step"
has "$T/out" " L1\.t02\.conv_i\.add_bias\.grad +hard_sigmoid_bwd " "backward ops too"
# a different seed gives other sequences
expect 1 "prednet: another --seed differs" -- "$DT" diff -q "$T/a.dtr" "$($P --steps 1 --seed 2 -o "$T/s2.dtr" && echo "$T/s2.dtr")"

# --- threads: OpenBLAS's split of a 1-channel layer's products differs
# between 1 and 2 threads (with its Prescott kernel; the SkylakeX kernel it
# picks on some CPUs gives both the same sums); diff names layer, time step
# and op
Q="$DT record -q --model prednet --stack 1,4 --size 64x64 --nt 3 --batch 1 --steps 1 --cpu-kernel Prescott"
expect 0 "prednet --threads 1" -- $Q --threads 1 -o "$T/t1.dtr"
expect 0 "prednet --threads 2" -- $Q --threads 2 -o "$T/t2.dtr"
expect 0 "prednet --threads 2 again" -- $Q --threads 2 -o "$T/t2b.dtr"
expect 0 "prednet --threads 2 is stable run to run" -- "$DT" diff -q "$T/t2.dtr" "$T/t2b.dtr"
expect 1 "prednet threads 1 vs 2 differ" -- "$DT" diff "$T/t1.dtr" "$T/t2.dtr"
has "$T/out" "^first divergence: step 0, layer L[0-9]+, time step [0-9]+, op [a-z_]+$" "threads: first divergence names layer, time step and op"
has "$T/out" "^    op [0-9]+ L[0-9]+\.t[0-9]+\.conv_[a-z]+ \(layer L[0-9]+, time step [0-9]+, op conv_[a-z]+, forward conv2d" "threads: a convolution is an origin"
expect 1 "diff --json" -- "$DT" diff --json "$T/t1.dtr" "$T/t2.dtr"
has "$T/out" '"time_step": [0-9]+' "diff --json: the time step"

# --- user frames: NPY (T, N, H, W) uint8 and a directory of PGM frames
npy() { # FILE DESCR SHAPE NBYTES [MAGIC]
    h="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
    while [ $(( (10 + ${#h} + 1) % 64 )) -ne 0 ]; do h="$h "; done
    len=$(( ${#h} + 1 ))
    { printf "${5:-\\223NUMPY}\\001\\000"; printf "\\$(printf %03o $((len % 256)))\\$(printf %03o $((len / 256)))"
      printf '%s\n' "$h"; head -c "$4" /dev/urandom; } >"$1"
}
npy "$T/v.npy" "|u1" "(4, 3, 32, 32)" 12288
V="$DT record -q --model prednet --stack 1,2 --size 32x32 --nt 4 --batch 2 --steps 2"
expect 0 "--video NPY (T,N,H,W)" -- $V --video "$T/v.npy" -o "$T/v.dtr"
expect 0 "show it" -- "$DT" show --summary "$T/v.dtr"
has "$T/out" "^# video_source = 3 clips$" "NPY: 3 clips of 4 frames"
expect 0 "--video NPY --npy-layout nthw" -- $V --video "$T/v.npy" --npy-layout nthw --nt 2 -o "$T/v2.dtr"
expect 0 "replay of an NPY run reproduces" -- "$DT" replay "$T/v.dtr" --step 1
mkdir "$T/pgm"
for i in 0 1 2 3 4 5 6 7 8; do { printf 'P5\n# frame %s\n32 32\n255\n' $i; head -c 1024 /dev/urandom; } >"$T/pgm/f$i.pgm"; done
expect 0 "--video a PGM directory" -- $V --video "$T/pgm" -o "$T/pg.dtr"
expect 0 "show it" -- "$DT" show --summary "$T/pg.dtr"
has "$T/out" "^# video_source = 2 clips$" "PGM: 9 frames give 2 clips of 4"
# malformed or unfitting frames: exit 2, one line, the old trace untouched
cp "$T/v.dtr" "$T/keep.dtr"
npy "$T/bad1.npy" "<f4" "(4, 3, 32, 32)" 49152
expect 2 "NPY of float32" -- $V --video "$T/bad1.npy" -o "$T/keep.dtr"
one_line "NPY of float32"
npy "$T/bad2.npy" "|u1" "(4, 3, 32, 32)" 1000
expect 2 "NPY cut short" -- $V --video "$T/bad2.npy" -o "$T/keep.dtr"
one_line "NPY cut short"
npy "$T/bad3.npy" "|u1" "(4, 3, 32, 32)" 12288 "\\223NUMPZ"
expect 2 "NPY with a bad magic" -- $V --video "$T/bad3.npy" -o "$T/keep.dtr"
one_line "NPY bad magic"
expect 2 "NPY frames of another size" -- $V --size 64x64 --video "$T/v.npy" -o "$T/keep.dtr"
has "$T/err" "frames are 32x32" "size mismatch: named"
one_line "size mismatch"
expect 2 "NPY sequences shorter than --nt" -- $V --nt 5 --video "$T/v.npy" -o "$T/keep.dtr"
one_line "too few frames"
printf 'P5\n32 32\n255\n' >"$T/pgm/g.pgm"
expect 2 "a truncated PGM frame" -- $V --video "$T/pgm" -o "$T/keep.dtr"
one_line "truncated PGM"
expect 2 "a missing --video" -- $V --video "$T/nothing.npy" -o "$T/keep.dtr"
one_line "missing video"
cmp -s "$T/v.dtr" "$T/keep.dtr" && ok "failed runs left the existing trace untouched" || bad "existing trace was modified"

# --- options that do not fit
expect 2 "--nt 1" -- $P --nt 1 -o "$T/x.dtr"
one_line "--nt 1"
expect 2 "--size not divisible" -- $P --size 34x34 -o "$T/x.dtr"
one_line "--size not divisible"
expect 2 "--layer-weights of another length" -- $P --layer-weights 1,0 -o "$T/x.dtr"
one_line "--layer-weights length"
expect 2 "--r-stack of another length" -- $P --r-stack 2,2 -o "$T/x.dtr"
one_line "--r-stack length"
expect 2 "--stack with a zero" -- $P --stack 1,0,8 -o "$T/x.dtr"
one_line "--stack zero"
expect 2 "--layers with prednet" -- $P --layers 4,4 -o "$T/x.dtr"
one_line "--layers with prednet"
expect 2 "--stack with the autoencoder" -- "$DT" record -q --stack 1,2 -o "$T/x.dtr"
one_line "--stack with the autoencoder"
expect 2 "--protocol paper with --steps 10" -- "$DT" record -q --model prednet --protocol paper --steps 10 -o "$T/x.dtr"
has "$T/err" "protocol paper fixes" "protocol conflict: named"
expect 2 "--protocol nonsense" -- "$DT" record -q --model prednet --protocol nonsense -o "$T/x.dtr"
one_line "--protocol nonsense"
expect 2 "--model nonsense" -- "$DT" record -q --model resnet -o "$T/x.dtr"
one_line "--model nonsense"

# --- replay: bitwise on cpu; against the exact oracle no SEMANTIC op
R="$DT record -q --model prednet --stack 1,2 --r-stack 2,2 --size 32x32 --nt 3 --batch 2"
expect 0 "record for replay" -- $R --steps 3 --checkpoint-every 2 -o "$T/rp.dtr"
expect 0 "prednet replay reproduces" -- "$DT" replay "$T/rp.dtr" --step 2
has "$T/out" "^reproduced: every replayed step matches the recording bitwise" "replay: reproduced"
expect 0 "prednet against the oracle: no SEMANTIC op" -- "$DT" replay "$T/rp.dtr" --step 1 --against mpfr
has "$T/out" "^summary: [0-9]+ op results checked: [0-9]+ exact, [0-9]+ rounding, 0 SEMANTIC$" "oracle: a clean PredNet step"
semantic_at() { # OP:KIND : record with the fault, replay against the oracle
    op=$1
    rm -f "$T/f.dtr"
    if ! $R --steps 2 --inject "$op" -o "$T/f.dtr" 2>"$T/err"; then
        bad "--inject $op: record failed"; head -5 "$T/err"; return
    fi
    "$DT" replay "$T/f.dtr" --step 1 --against mpfr >"$T/out" 2>>"$T/err"
    rc=$?
    name=$(printf '%s' "${op%%:*}" | sed 's/[.*]/\\&/g')
    n=$(grep -Ec '^ +[0-9]+  .* SEMANTIC$' "$T/out")
    if [ "$rc" -eq 1 ] && [ "$n" -eq 1 ] && grep -Eq "^ +[0-9]+  ${name} +[a-z_0-9]+ +[0-9NaN]+ +[0-9.e+inf]+  SEMANTIC$" "$T/out"; then
        ok "--inject $op: SEMANTIC at ${op%%:*} only"
    else
        bad "--inject $op: exit $rc, $n SEMANTIC ops"; cat "$T/out" "$T/err" | head -30
    fi
}
semantic_at L1.t01.i:formula
semantic_at L0.t02.conv_f.add_bias.grad:formula
semantic_at L0.t01.conv_a:formula
semantic_at L0.t01.a_relu.grad:formula
semantic_at L1.t02.r.grad:formula
semantic_at L0.t02.e:formula
semantic_at L0.t02.loss:formula
semantic_at L0.conv_o.W.grad@L0.t01.conv_o:formula
semantic_at L0.t02.conv_ahat:bitflip:3:21

# a pattern: the same wrong formula in every gate of every layer and time
# step (a systematic framework bug); replay finds SEMANTIC ops, each one a
# gate the pattern names, and gates of all three kinds among them
expect 0 "--inject with a pattern" -- $R --steps 2 --inject 'L*.t*.[ifo]:formula' -o "$T/g.dtr"
"$DT" replay "$T/g.dtr" --step 1 --against mpfr >"$T/out" 2>"$T/err"
sem=$(awk '$NF == "SEMANTIC" && $1 ~ /^[0-9]+$/ { print $2 }' "$T/out")
nsem=$(printf '%s\n' "$sem" | grep -c .)
nother=$(printf '%s\n' "$sem" | grep -Evc '^L[0-9]+\.t[0-9]+\.[ifo]$')
kinds=$(printf '%s\n' "$sem" | sed 's/.*\.//' | sort -u | tr -d '\n')
if [ "$nsem" -ge 3 ] && [ "$nother" -eq 0 ] && [ "$kinds" = "fio" ]; then
    ok "pattern fault: $nsem SEMANTIC ops, every one a gate"
else
    bad "pattern fault: $nsem SEMANTIC, $nother not gates, kinds '$kinds'"; head -30 "$T/out"
fi
expect 2 "a pattern with a kind other than formula" -- $R --steps 1 --inject 'L*.t*.i:scale' -o "$T/x.dtr"
one_line "a pattern with a kind other than formula"
expect 2 "a pattern that matches an op without a wrong formula" -- $R --steps 1 --inject 'L*.t*.*:formula' -o "$T/x.dtr"
has "$T/err" "which has no wrong formula" "pattern over ops without a formula: named"
expect 2 "a pattern that matches nothing" -- $R --steps 1 --inject 'zz*:formula' -o "$T/x.dtr"
one_line "a pattern that matches nothing"

finish
