#!/bin/sh
# cli_explain.sh: `divtrace explain` on two recorded traces, one case per
# class of bug (a wrong forward formula, a wrong backward formula, an update
# that never reaches the tensor the model reads, recurrent state carried
# across sequences, lossy round trips of parameters and of optimizer state
# through bfloat16, half and a truncating copy, round trips that drop them,
# round trips of PredNet's recurrent state, a fault planted for another
# backend (nothing planted: identical to clean), a change of the graph's
# wiring) and per valid float32 rewrite of an op (which must come out
# rounding only), on the autoencoder and on PredNet; and the plain
# verdicts: identical, rounding only between thread counts, trouble.
# Needs Debian's dataset-fashion-mnist (./bootstrap installs it).
set -u
NAME=cli_explain.sh
. "$(dirname "$0")/cli_lib.sh"

# verdict CODE NAME PATTERN -- A B: explain exits with CODE and its last
# line (the verdict) matches PATTERN
verdict() {
    code=$1 name=$2 pattern=$3
    shift 4
    expect "$code" "$name: exit $code" -- "$DT" explain "$@"
    tail -n 1 "$T/out" >"$T/last"
    has "$T/last" "$pattern" "$name: verdict"
}

# --- the autoencoder, Adam (optimizer state to round-trip), on the cpu
A="$DT record -q --steps 4 --layers 784,16,784 --optimizer adam --lr 1e-3 --checkpoint-every 2"
expect 0 "ae: clean run" -- $A -o "$T/c.dtr"
expect 0 "ae: clean run again" -- $A -o "$T/c2.dtr"
verdict 0 "ae: identical" '^identical$' -- "$T/c.dtr" "$T/c2.dtr"

expect 0 "ae: wrong forward formula" -- $A --inject dec1.sigmoid:formula -o "$T/fwd.dtr"
verdict 1 "ae: forward formula" '^bug in B: op dec1\.sigmoid \(step 0, layer dec1\) computes wrong values' -- "$T/c.dtr" "$T/fwd.dtr"
verdict 1 "ae: forward formula, in A" '^bug in A: op dec1\.sigmoid ' -- "$T/fwd.dtr" "$T/c.dtr"

expect 0 "ae: wrong backward formula" -- $A --inject enc1.add_bias.grad:formula -o "$T/bwd.dtr"
verdict 1 "ae: backward formula" '^bug in B: op enc1\.add_bias\.grad \(step 0, layer enc1\) computes wrong values' -- "$T/c.dtr" "$T/bwd.dtr"

# an update that never reaches the tensor the model reads: record says so
expect 1 "ae: stale copy: record exits 1" -- $A --inject dec1.W:stale -o "$T/stale.dtr"
has "$T/err" "carry fault: dec1\.W is not what dec1\.W\.update wrote in step 0" "ae: stale copy: record names it"
verdict 1 "ae: stale copy" '^bug in B: dec1\.W changed between steps 0 and 1 \(step 1, layer dec1\): it is not what dec1\.W\.update wrote' -- "$T/c.dtr" "$T/stale.dtr"
expect 0 "ae: show names the carry event" -- "$DT" show --summary "$T/stale.dtr"
has "$T/out" "carry fault: dec1\.W is not what dec1\.W\.update wrote" "ae: show: carry event"

# lossy round trips between steps, of parameters and of optimizer state
for f in bf16 half trunc; do
    expect 1 "ae: parameters through $f" -- $A --inject "*.W:roundtrip:$f" -o "$T/rt-$f.dtr"
    verdict 1 "ae: parameters through $f" '^bug in B: enc1\.W changed between steps 0 and 1 .*enc1\.W\.update' -- "$T/c.dtr" "$T/rt-$f.dtr"
done
expect 1 "ae: Adam's m through half" -- $A --inject "enc1.W.m:roundtrip:half" -o "$T/rt-m.dtr"
verdict 1 "ae: Adam's m through half" '^bug in B: enc1\.W\.m changed between steps 0 and 1 .*enc1\.W\.m\.update' -- "$T/c.dtr" "$T/rt-m.dtr"
expect 1 "ae: Adam's v truncated" -- $A --inject "*.v:roundtrip:trunc" -o "$T/rt-v.dtr"
verdict 1 "ae: Adam's v truncated" '^bug in B: enc1\.W\.v changed between steps 0 and 1' -- "$T/c.dtr" "$T/rt-v.dtr"
# the same fault in both runs is still a bug in each
verdict 1 "ae: a round trip in both" '^bug in A: enc1\.W changed .*; bug in B: enc1\.W changed' -- "$T/rt-bf16.dtr" "$T/rt-bf16.dtr"

# a round trip that drops the tensor: zeros come back (Adam's m, SGD's
# momentum buffer, a parameter); the leaf the step reads is then all zero
# where its update wrote something else
expect 1 "ae: Adam's m dropped" -- $A --inject '*.m:drop' -o "$T/drop-m.dtr"
verdict 1 "ae: Adam's m dropped" '^bug in B: enc1\.W\.m changed between steps 0 and 1 \(step 1, layer enc1\): it is not what enc1\.W\.m\.update wrote' -- "$T/c.dtr" "$T/drop-m.dtr"
expect 0 "ae: Adam's m dropped: the records" -- "$DT" show --ops --step 1 "$T/drop-m.dtr"
has "$T/out" '^[0-9a-f]{16}  1  enc1\.W\.m  16x784  0\.000000000e\+00$' "ae: Adam's m dropped: read as zeros"
has "$T/out" '^[0-9a-f]{16}  1  enc1\.W\.m\.update  16x784  [1-9]' "ae: Adam's m dropped: its update wrote more"
S="$DT record -q --steps 3 --layers 784,16,784 --optimizer sgd --momentum 0.9"
expect 0 "ae: sgd with momentum, clean" -- $S -o "$T/s.dtr"
expect 1 "ae: momentum dropped" -- $S --inject '*.momentum:drop' -o "$T/drop-mom.dtr"
verdict 1 "ae: momentum dropped" '^bug in B: enc1\.W\.momentum changed between steps 0 and 1 .*enc1\.W\.momentum\.update' -- "$T/s.dtr" "$T/drop-mom.dtr"
expect 1 "ae: momentum through bf16" -- $S --inject 'dec1.b.momentum:roundtrip:bf16' -o "$T/rt-mom.dtr"
verdict 1 "ae: momentum through bf16" '^bug in B: dec1\.b\.momentum changed between steps 0 and 1 .*dec1\.b\.momentum\.update' -- "$T/s.dtr" "$T/rt-mom.dtr"
expect 1 "ae: a parameter dropped" -- $A --inject 'dec1.W:drop' -o "$T/drop-w.dtr"
verdict 1 "ae: a parameter dropped" '^bug in B: dec1\.W changed between steps 0 and 1 .*dec1\.W\.update' -- "$T/c.dtr" "$T/drop-w.dtr"
expect 2 "ae: drop takes no argument" -- $A --inject 'dec1.W:drop:bf16' -o "$T/x.dtr"
one_line "ae: drop takes no argument"
expect 2 "ae: an op is no state to drop" -- $A --inject 'enc1.matmul:drop' -o "$T/x.dtr"
one_line "ae: an op is no state to drop"

# one backend's code path: planted for cuda, recorded on cpu, nothing is
# planted (the trace is the clean one, its header says what was asked);
# planted for cpu, it is
expect 0 "ae: a round trip for cuda, on cpu" -- $A --inject '*.W:roundtrip:bf16@cuda' -o "$T/rt-cuda.dtr"
verdict 0 "ae: a round trip for cuda, on cpu" '^identical$' -- "$T/c.dtr" "$T/rt-cuda.dtr"
expect 0 "ae: a round trip for cuda: the header" -- "$DT" show --summary "$T/rt-cuda.dtr"
has "$T/out" '^# inject = \*\.W:roundtrip:bf16@cuda$' "ae: a round trip for cuda: header inject"
has "$T/out" '^# backend = cpu$' "ae: a round trip for cuda: header backend"
expect 0 "ae: a drop for cudnn, on cpu" -- $A --inject '*.m:drop@cudnn' -o "$T/drop-cudnn.dtr"
verdict 0 "ae: a drop for cudnn, on cpu" '^identical$' -- "$T/c.dtr" "$T/drop-cudnn.dtr"
expect 1 "ae: a round trip for cpu, on cpu" -- $A --inject '*.W:roundtrip:bf16@cpu' -o "$T/rt-cpu.dtr"
verdict 1 "ae: a round trip for cpu, on cpu" '^bug in B: enc1\.W changed between steps 0 and 1 .*enc1\.W\.update' -- "$T/c.dtr" "$T/rt-cpu.dtr"
expect 0 "ae: @cpu on cpu is the fault itself" -- "$DT" diff -q "$T/rt-bf16.dtr" "$T/rt-cpu.dtr"
expect 2 "ae: an unknown backend" -- $A --inject '*.W:roundtrip:bf16@gpu' -o "$T/x.dtr"
one_line "ae: an unknown backend"
# another backend's fault is checked all the same
expect 2 "ae: a bad spec for cuda" -- $A --inject 'enc1.matmul:drop@cuda' -o "$T/x.dtr"
one_line "ae: a bad spec for cuda"

# a change of the graph's wiring
expect 0 "ae: rewired" -- $A --inject dec1.sigmoid:rewire:0:dec1.matmul -o "$T/wire.dtr"
verdict 1 "ae: rewired" '^bug in B: op dec1\.sigmoid reads dec1\.matmul where its model reads dec1\.add_bias' -- "$T/c.dtr" "$T/wire.dtr"

# rounding only: OpenBLAS's Prescott kernel sums a 784-long product in
# another order on two threads than on one
K="$DT record -q --steps 3 --layers 784,16,784 --cpu-kernel Prescott"
expect 0 "ae: one thread" -- $K --threads 1 -o "$T/t1.dtr"
expect 0 "ae: two threads" -- $K --threads 2 -o "$T/t2.dtr"
verdict 0 "ae: threads" '^rounding only: threads 1 \| 2$' -- "$T/t1.dtr" "$T/t2.dtr"
expect 0 "ae: --json" -- "$DT" explain --json "$T/t1.dtr" "$T/t2.dtr"
has "$T/out" '"verdict": "rounding only"' "ae: --json verdict"
has "$T/out" '"origins": \["enc1\.matmul"\]' "ae: --json origins"
# a bug behind a rounding divergence: the runs part at enc1.matmul (the
# thread counts), so the wrong dec1.matmul of B, whose inputs differ
# already, is no origin; the origins alone would read as rounding only
expect 0 "ae: two threads and a wrong op further on" -- $K --threads 2 --inject dec1.matmul:scale -o "$T/t2bug.dtr"
verdict 1 "ae: bug behind rounding" '^bug in B: op dec1\.matmul \(step 0, layer dec1\) computes wrong values' -- "$T/t1.dtr" "$T/t2bug.dtr"

# valid float32 rewrites of ops (src/variant.c: other summation orders,
# FMA, float32 accumulation, other formulas): rounding only, never a bug
for v in enc1.matmul dec1.b.grad dec1.sigmoid dec1.add_bias.grad loss.mse dec1.sigmoid.grad \
         enc1.W.m.update enc1.W.v.update enc1.W.update; do
    expect 0 "ae: valid rewrite of $v" -- $A --inject "$v:variant" -o "$T/v.dtr"
    verdict 0 "ae: valid rewrite of $v" "^rounding only: inject \\(absent\\) \\| $v:variant\$" -- "$T/c.dtr" "$T/v.dtr"
done

# trouble: one clear line and exit 2
expect 2 "explain: one trace" -- "$DT" explain "$T/c.dtr"
expect 2 "explain: a missing trace" -- "$DT" explain "$T/c.dtr" "$T/none.dtr"
one_line "explain: a missing trace"
# the header and op list of a run killed before its first step: cut at the
# first block after them
cut=$(grep -obUa -E 'CKPT|STEP' "$T/c.dtr" | head -n 1 | cut -d: -f1)
head -c "$cut" "$T/c.dtr" >"$T/cut.dtr"
expect 2 "explain: a trace with no step" -- "$DT" explain "$T/c.dtr" "$T/cut.dtr"
one_line "explain: a trace with no step"
has "$T/err" "holds no step" "explain: an empty trace is named"

# --- PredNet: state carried across sequences, a wrong gate formula, rewiring
P="$DT record -q --model prednet --stack 1,4,8 --size 32x32 --nt 4 --batch 2 --steps 3"
expect 0 "prednet: clean run" -- $P -o "$T/p.dtr"
expect 0 "prednet: state carried into the next sequence" -- $P --inject 'L*.init.*:carry' -o "$T/pcarry.dtr"
verdict 1 "prednet: carried state" '^bug in B: op L0\.init\.r \(step 1, layer L0\) computes wrong values' -- "$T/p.dtr" "$T/pcarry.dtr"
expect 0 "prednet: wrong gate formula" -- $P --inject 'L1.t02.i:formula' -o "$T/pgate.dtr"
verdict 1 "prednet: gate formula" '^bug in B: op L1\.t02\.i \(step 0, layer L1, time step 2\) computes wrong values' -- "$T/p.dtr" "$T/pgate.dtr"
expect 0 "prednet: wrong backward formula" -- $P --inject 'L1.t02.conv_i.add_bias.grad:formula' -o "$T/pbwd.dtr"
verdict 1 "prednet: backward formula" '^bug in B: op L1\.t02\.conv_i\.add_bias\.grad \(step 0, layer L1, time step 2\) computes wrong values' -- "$T/p.dtr" "$T/pbwd.dtr"
expect 1 "prednet: a stale copy" -- $P --inject 'L0.conv_i.W:stale' -o "$T/pstale.dtr"
verdict 1 "prednet: stale copy" '^bug in B: L0\.conv_i\.W changed between steps 0 and 1 .*L0\.conv_i\.W\.update' -- "$T/p.dtr" "$T/pstale.dtr"
expect 1 "prednet: Adam's v through half" -- $P --inject '*.v:roundtrip:half' -o "$T/prtv.dtr"
verdict 1 "prednet: Adam's v through half" '^bug in B: L0\.conv_i\.W\.v changed between steps 0 and 1' -- "$T/p.dtr" "$T/prtv.dtr"
expect 1 "prednet: a lossy round trip of the parameters" -- $P --inject 'L*.W:roundtrip:bf16' -o "$T/prt.dtr"
verdict 1 "prednet: round trip" '^bug in B: L0\.conv_i\.W changed between steps 0 and 1' -- "$T/p.dtr" "$T/prt.dtr"
expect 1 "prednet: Adam's m dropped" -- $P --inject '*.m:drop' -o "$T/pdrop-m.dtr"
verdict 1 "prednet: Adam's m dropped" '^bug in B: L0\.conv_i\.W\.m changed between steps 0 and 1 \(step 1, layer L0\): it is not what L0\.conv_i\.W\.m\.update wrote' -- "$T/p.dtr" "$T/pdrop-m.dtr"
expect 0 "prednet: a drop for cuda, on cpu" -- $P --inject '*.m:drop@cuda' -o "$T/pdrop-cuda.dtr"
verdict 0 "prednet: a drop for cuda, on cpu" '^identical$' -- "$T/p.dtr" "$T/pdrop-cuda.dtr"
# the recurrent state as one time step hands it to the next: the model
# carries none from step to step, so this is an op's output changed
# within the step, found by replay at the op that made the state
expect 0 "prednet: recurrent state through bf16" -- $P --inject 'L*.t01.[rce]:roundtrip:bf16' -o "$T/prt-state.dtr"
verdict 1 "prednet: recurrent state through bf16" '^bug in B: op L2\.t01\.c \(step 0, layer L2, time step 1\) computes wrong values: element [0-9]+ is ' -- "$T/p.dtr" "$T/prt-state.dtr"
expect 0 "prednet: recurrent state dropped" -- $P --inject 'L0.t01.c:drop' -o "$T/pdrop-state.dtr"
verdict 1 "prednet: recurrent state dropped" '^bug in B: op L0\.t01\.c \(step 0, layer L0, time step 1\) computes wrong values: element [0-9]+ is 0, exactly ' -- "$T/p.dtr" "$T/pdrop-state.dtr"
expect 0 "prednet: recurrent state dropped: the records" -- "$DT" show --ops --step 0 "$T/pdrop-state.dtr"
has "$T/out" '^[0-9a-f]{16}  0  L0\.t01\.c  2x1x32x32  0\.000000000e\+00$' "prednet: recurrent state dropped: read as zeros"
expect 0 "prednet: the clean records" -- "$DT" show --ops --step 0 "$T/p.dtr"
has "$T/out" '^[0-9a-f]{16}  0  L0\.t01\.c  2x1x32x32  [1-9]' "prednet: the clean L0.t01.c is not zero"
expect 0 "prednet: recurrent state for cuda, on cpu" -- $P --inject 'L*.t01.[rce]:roundtrip:bf16@cuda' -o "$T/prt-cuda.dtr"
verdict 0 "prednet: recurrent state for cuda, on cpu" '^identical$' -- "$T/p.dtr" "$T/prt-cuda.dtr"
for v in L1.t02.conv_i L1.t02.i L0.t01.loss L0.t03.c.grad 'L0.conv_c.W.grad@L0.t03.conv_c'; do
    expect 0 "prednet: valid rewrite of $v" -- $P --inject "$v:variant" -o "$T/pv.dtr"
    verdict 0 "prednet: valid rewrite of $v" "^rounding only: inject \\(absent\\) \\| $v:variant\$" -- "$T/p.dtr" "$T/pv.dtr"
done
expect 0 "prednet: rewired" -- $P --inject 'L1.t00.tanh_c:rewire:0:L1.init.c' -o "$T/pwire.dtr"
verdict 1 "prednet: rewired" '^bug in B: op L1\.t00\.tanh_c reads L1\.init\.c where its model reads L1\.t00\.c' -- "$T/p.dtr" "$T/pwire.dtr"

finish
