#!/bin/sh
# cli.sh: end-to-end tests of the divtrace program: determinism, divergence
# by thread count and OpenBLAS kernel, a planted bit flip, non-finite values,
# killed recordings, corrupt traces and bad input. Needs Debian's
# dataset-fashion-mnist (./bootstrap installs it).
set -u
NAME=cli.sh
. "$(dirname "$0")/cli_lib.sh"

R="$DT record -q --steps 12"

# --- determinism: the same configuration twice is bitwise identical
expect 0 "record a" -- $R -o "$T/a.dtr"
expect 0 "record a again" -- $R -o "$T/a2.dtr"
expect 0 "identical runs: diff exits 0" -- "$DT" diff "$T/a.dtr" "$T/a2.dtr"
has "$T/out" "^identical: every op hash of all 12 common steps matches$" "identical runs: diff says so"
[ "$(wc -l <"$T/out")" -eq 1 ] && ok "identical runs: one line" || bad "identical runs: $(wc -l <"$T/out") lines"
# tracing on one core (in line) and on two (on a worker thread) writes the same file
if command -v taskset >/dev/null && [ "$(nproc)" -gt 1 ]; then
    expect 0 "record on one core" -- taskset -c 0 $R -o "$T/a1core.dtr"
    expect 0 "one-core and two-core traces are the same bytes" -- cmp "$T/a.dtr" "$T/a1core.dtr"
fi
# records made while the next step runs (the autoencoder's default with a
# second core) or within each step: the same bytes
expect 0 "record with each step traced within itself" -- env DIVTRACE_TRACE_DEFER=0 $R -o "$T/a_within.dtr"
expect 0 "deferred and in-step records are the same bytes" -- cmp "$T/a.dtr" "$T/a_within.dtr"
# with records made while the next step runs, a step's loss and summary are
# read once the next step has run, as on a GPU (not before a checkpoint, nor
# with per-step records as above): every summary holds its own step's loss,
# its loss op's record (one element: its L2 norm; printed to 9 and 10
# digits, which agree to 2e-8, while two float32 values differ by 6e-8 or
# more), and a run that waits at every step (--stop-on-nonfinite) gives
# the same records
n=$("$DT" show "$T/a.dtr" | awk '/^step [0-9]+ +loss / { step = $2; loss = $4; next }
    $3 == "loss.mse" && $2 == step { d = loss - $NF; if (d < 0) d = -d; a = loss < 0 ? -loss : loss
                                     if (d <= 2e-8 * a) n++ }
    END { print n + 0 }')
[ "$n" -eq 12 ] && ok "each summary holds its own step's loss" || bad "each summary holds its own step's loss: $n of 12 steps"
expect 0 "record waiting at every step" -- $R --stop-on-nonfinite -o "$T/a_wait.dtr"
expect 0 "queued ahead or waiting: the same records" -- "$DT" diff -q "$T/a.dtr" "$T/a_wait.dtr"

# --- thread counts: 1, 2 and 4 OpenBLAS threads give three different results,
# each stable run to run; diff names step 0 and a matrix product as an origin.
# With OpenBLAS's Prescott kernel: which threads counts differ depends on how
# the kernel OpenBLAS picks for the CPU splits a product (its SkylakeX kernel
# gives 2 and 4 threads the same sums), not on divtrace
for t in 1 2 4; do
    expect 0 "record --threads $t" -- $R --cpu-kernel Prescott --threads $t -o "$T/t$t.dtr"
    expect 0 "record --threads $t again" -- $R --cpu-kernel Prescott --threads $t -o "$T/t${t}b.dtr"
    expect 0 "--threads $t is stable run to run" -- "$DT" diff -q "$T/t$t.dtr" "$T/t${t}b.dtr"
done
expect 1 "threads 1 vs 2 differ" -- "$DT" diff "$T/t1.dtr" "$T/t2.dtr"
has "$T/out" "^first divergence: step 0$" "threads 1 vs 2: first divergence at step 0"
has "$T/out" "^  first op: op [0-9]+ [a-z0-9]+\.matmul \(layer [a-z0-9]+, forward matmul" "threads 1 vs 2: first op is a forward matmul"
has "$T/out" "^    op [0-9]+ [a-z0-9.]+ \(layer [a-z0-9]+, [a-z]+ matmul" "threads 1 vs 2: a matmul is an origin"
has "$T/out" "^  threads +1 \| 2$" "threads 1 vs 2: the configuration difference is shown"
expect 1 "threads 1 vs 4 differ" -- "$DT" diff -q "$T/t1.dtr" "$T/t4.dtr"
expect 1 "threads 2 vs 4 differ" -- "$DT" diff -q "$T/t2.dtr" "$T/t4.dtr"

# --- OpenBLAS kernels: four kernels this CPU runs give four different results
kernels=""
for k in Haswell Sandybridge Nehalem Prescott; do
    if DIVTRACE_CPU_FEATURES= "$DT" record --help >/dev/null 2>&1 && $R --steps 2 --cpu-kernel $k -o "$T/k$k.dtr" 2>"$T/err"; then
        kernels="$kernels $k"
        "$DT" show "$T/k$k.dtr" | grep -q "^# openblas_core = $k" && ok "--cpu-kernel $k is the kernel OpenBLAS runs" || bad "--cpu-kernel $k not recorded"
    else
        grep -q "lacks" "$T/err" && echo "# skip: this CPU cannot run $k" || bad "--cpu-kernel $k: $(cat "$T/err")"
    fi
done
set -- $kernels
while [ $# -gt 1 ]; do
    a=$1; shift
    for b in "$@"; do
        expect 1 "kernels $a vs $b differ" -- "$DT" diff -q "$T/k$a.dtr" "$T/k$b.dtr"
    done
done
expect 0 "--cpu-kernel Nehalem is stable run to run" -- sh -c "$R --steps 2 --cpu-kernel Nehalem -o '$T/kN2.dtr' && '$DT' diff -q '$T/kNehalem.dtr' '$T/kN2.dtr'"
# abbreviated and lower-case spellings select the same kernel
expect 0 "--cpu-k nehalem (abbreviated, any case)" -- $R --steps 2 --cpu-k nehalem -o "$T/kn3.dtr"
expect 0 "  ... is the same run as --cpu-kernel Nehalem" -- "$DT" diff -q "$T/kNehalem.dtr" "$T/kn3.dtr"
# a kernel whose instructions the CPU lacks is refused, not run into SIGILL
DIVTRACE_CPU_FEATURES=sse2,sse3,ssse3,sse4.1,sse4.2,avx,avx2,fma expect 2 "SkylakeX refused without AVX-512" -- $R --cpu-kernel SkylakeX -o "$T/sx.dtr"
has "$T/err" "lacks avx512f.*illegal instruction" "SkylakeX refusal names the missing feature"
one_line "SkylakeX refusal"
expect 2 "unknown kernel refused" -- $R --cpu-kernel Pentium9 -o "$T/p9.dtr"
one_line "unknown kernel"

# --- a planted bit flip is found at exactly its step and parameter
# a parameter changed between steps is a carry fault: record says so and exits 1
expect 1 "record with --flip-bit" -- $R --checkpoint-every 7 --flip-bit 7:enc2.W:100:3 -o "$T/flip.dtr"
has "$T/err" "^divtrace record: step 7: carry fault: enc2\.W is not what enc2\.W\.update wrote in step 6" "flip: record names the carry fault"
expect 0 "record without it" -- $R --checkpoint-every 7 -o "$T/noflip.dtr"
expect 1 "flip: diff exits 1" -- "$DT" diff "$T/noflip.dtr" "$T/flip.dtr"
has "$T/out" "^first divergence: step 7$" "flip: found at step 7"
has "$T/out" "^  first op: op [0-9]+ enc2\.W \(layer enc2, param param" "flip: found in enc2.W"
has "$T/out" "^  elements differ: 1 of 4096, max ULP distance 8," "flip: one element, 2^3 ULP (bit 3 of the mantissa)"
has "$T/out" "^  origin ops of step 7 \(inputs identical, output different\): 1$" "flip: a single origin"
has "$T/out" "^    op [0-9]+ enc2\.W " "flip: the origin is enc2.W"
expect 2 "--flip-bit on an unknown tensor" -- $R --flip-bit 1:nope.W:0:0 -o "$T/x.dtr"
one_line "--flip-bit unknown tensor"

# --- JSON output parses
if command -v python3 >/dev/null; then
    expect 0 "show --json parses" -- sh -c "'$DT' show --json '$T/a.dtr' | python3 -m json.tool"
    expect 1 "diff --json" -- sh -c "'$DT' diff --json '$T/noflip.dtr' '$T/flip.dtr' > '$T/d.json'"
    expect 0 "diff --json parses and names the flip" -- python3 -c "
import json,sys; d=json.load(open('$T/d.json'))
assert d['first_divergence']['step']==7 and d['first_divergence']['name']=='enc2.W', d"
fi

# --- show: per-op lines and step selection
expect 0 "show --step 3" -- "$DT" show --step 3 "$T/a.dtr"
has "$T/out" "^[0-9a-f]{16}  3  enc1\.matmul  100x128  [0-9.]+e[-+][0-9]+$" "show prints hash step op shape l2"
expect 2 "show --step past the end" -- "$DT" show --step 99 "$T/a.dtr"
one_line "show --step past the end"

# --- non-finite values: the first op producing them is named
expect 2 "record with an exploding learning rate exits 2" -- $R --act relu --lr 1e30 -o "$T/nan.dtr"
has "$T/err" "^divtrace record: non-finite values: step [0-9]+: op [0-9]+ [a-z0-9._]+ \([a-z_]+\) produced" "non-finite: the op is named"
expect 0 "the non-finite trace is complete" -- "$DT" show --summary "$T/nan.dtr"
has "$T/out" "^# complete$" "non-finite: trace complete"
has "$T/out" "^# event: step" "non-finite: event stored in the trace"
expect 2 "--stop-on-nonfinite exits 2" -- $R --steps 50 --act relu --lr 1e30 --stop-on-nonfinite -o "$T/stop.dtr"
expect 0 "--stop-on-nonfinite leaves a complete trace" -- "$DT" show --summary "$T/stop.dtr"
has "$T/out" "^# complete \(the run ended early\)$" "--stop-on-nonfinite: trace complete, ended early"
has "$T/out" "^# event: stopped after step" "--stop-on-nonfinite: stop recorded"

# --- a recording killed with SIGKILL is readable to its last complete step
"$DT" record -q --steps 100000 --checkpoint-every 100 -o "$T/killed.dtr" &
pid=$!
# killed once it holds more steps than a.dtr (12), however long that takes
i=0
while [ $i -lt 3000 ]; do
    n=$("$DT" show --summary "$T/killed.dtr" 2>/dev/null | sed -n 's/^# steps \([0-9]*\),.*/\1/p')
    [ "${n:-0}" -gt 12 ] && break
    sleep 0.1
    i=$((i + 1))
done
kill -9 $pid
wait $pid 2>/dev/null
expect 0 "killed trace: show works" -- "$DT" show --summary "$T/killed.dtr"
has "$T/out" "^# cut short" "killed trace: reported as cut short"
expect 0 "killed trace vs a fresh run: identical over the common steps" -- "$DT" diff "$T/killed.dtr" "$T/a.dtr"
has "$T/out" "^identical: every op hash of all 12 common steps matches \(A has [0-9]+ steps, B has 12\)" "killed trace: compared over common steps"

# a trace killed before its first step holds nothing to compare: trouble
cut=$(grep -obUa -E 'CKPT|STEP' "$T/a.dtr" | head -n 1 | cut -d: -f1)
head -c "$cut" "$T/a.dtr" >"$T/nostep.dtr"
expect 2 "diff against a trace with no step" -- "$DT" diff "$T/a.dtr" "$T/nostep.dtr"
one_line "diff against a trace with no step"
has "$T/err" "nostep\.dtr holds no step" "diff: the empty trace is named"
# a summary that cannot be written is an error, and the trace is still complete
if [ -w /dev/full ]; then
    "$DT" record --steps 3 --layers 784,8,784 -o "$T/full.dtr" >/dev/full 2>"$T/err"
    rc=$?
    [ $rc -eq 2 ] && ok "record with standard output full: exit 2" || bad "record with standard output full: exit $rc"
    one_line "record with standard output full"
    has "$T/err" "writing the summary to standard output: No space left on device" "the write error is named"
    expect 0 "its trace is complete nonetheless" -- "$DT" show --summary "$T/full.dtr"
    has "$T/out" "^# complete$" "the trace says complete"
    # every command's output, help and version included
    for c in "--help" "--version" "record --help" "show $T/a.dtr" "diff $T/a.dtr $T/a.dtr" \
        "replay $T/a.dtr --step 1" "escape $T/a.dtr" "explain $T/a.dtr $T/a.dtr" "sweep --help" "report --help"; do
        "$DT" $c >/dev/full 2>"$T/err"
        rc=$?
        [ $rc -eq 2 ] && ok "$c > /dev/full: exit 2" || bad "$c > /dev/full: exit $rc"
        has "$T/err" "^divtrace( [a-z]+)?: .*(write error on standard output|No space left on device)" "$c > /dev/full: says so"
    done
fi

# sizes the options accept but memory does not hold: one line, exit 2, no
# trace (under an address-space limit; not for a sanitizer build, whose
# runtime reserves more address space than any limit leaves)
# Cases: the address-space limit in KB, what runs out (a backend's tensor,
# or the host's own structures), then the options. The last, a graph of
# 50000 time steps, runs out on the host (its build is linear in its ops, so
# this takes seconds); its 500 MB are too little for a build linked to the
# CUDA libraries even to start, which skips it there.
if ! sanitized "$DT"; then
    for case in "3000000 tensor --layers 784,1048576,784" "3000000 tensor --batch 1048576" \
        "500000 host --model prednet --nt 50000 --size 32x32 --stack 1,4"; do
        limit=${case%% *} big=${case#* } what=${big%% *} big=${big#* }
        if [ "$what" = tensor ]; then
            says="^divtrace record: out of memory: the cpu backend could not allocate "
        else
            # (the host's structures on this machine; a kernel with other
            # buffers may leave the backend's tensor last)
            says="^divtrace record: out of memory( \([0-9]+ bytes asked\)$|: the cpu backend could not allocate )"
        fi
        ( ulimit -v "$limit" 2>/dev/null || exit 77
          "$DT" --version >/dev/null 2>&1 || exit 77
          exec "$DT" record --steps 1 $big -o "$T/oom.dtr" ) >"$T/out" 2>"$T/err"
        rc=$?
        if [ $rc -eq 77 ]; then
            echo "# skip: no address-space limit here, or the program does not start in $limit KB"
            continue
        fi
        [ $rc -eq 2 ] && ok "record $big beyond memory: exit 2" || bad "record $big beyond memory: exit $rc"
        one_line "record $big beyond memory"
        has "$T/err" "$says" "record $big: says what ran out"
        [ ! -e "$T/oom.dtr" ] && ok "record $big: no trace left" || bad "record $big: a trace was left"
    done
fi

# --- corrupt and foreign files
head -c 100 "$T/a.dtr" >"$T/short.dtr"
expect 2 "a trace cut inside its header" -- "$DT" show "$T/short.dtr"
one_line "cut header"
printf 'hello world, not a trace at all\n' >"$T/text.dtr"
expect 2 "not a trace" -- "$DT" diff "$T/text.dtr" "$T/a.dtr"
one_line "not a trace"
expect 2 "missing trace" -- "$DT" show "$T/none.dtr"
one_line "missing trace"
# flip one byte inside the fifth step block: that step and later are dropped
off=$(grep -obUa STEP "$T/a.dtr" | sed -n 5p | cut -d: -f1)
cp "$T/a.dtr" "$T/flipped.dtr"
printf '\377' | dd of="$T/flipped.dtr" bs=1 seek=$((off + 100)) conv=notrunc 2>/dev/null
expect 2 "a corrupted step block: prefix shown, exit 2" -- "$DT" show --summary "$T/flipped.dtr"
has "$T/out" "^# corrupt block at offset [0-9]+ \(CRC mismatch\); read up to step 3" "corrupted step: readable prefix"
one_line "corrupted step"
expect 2 "diff with a corrupted step block: compared, then exit 2" -- "$DT" diff "$T/a.dtr" "$T/flipped.dtr"
has "$T/out" "^identical: every op hash of all 4 common steps matches \(A has 12 steps, B has 4\)$" "diff of the corrupted trace compares its prefix"
one_line "diff corrupted step"
# and one byte inside the last checkpoint's data
off=$(grep -obUa CKPT "$T/a.dtr" | tail -1 | cut -d: -f1)
cp "$T/a.dtr" "$T/flipped2.dtr"
printf '\377' | dd of="$T/flipped2.dtr" bs=1 seek=$((off + 5000)) conv=notrunc 2>/dev/null
expect 2 "a corrupted checkpoint: exit 2" -- "$DT" show --summary "$T/flipped2.dtr"
has "$T/err" "checkpoints unreadable.*CRC" "corrupted checkpoint: named"
one_line "corrupted checkpoint"
expect 2 "diff of a trace with a corrupted checkpoint: exit 2" -- "$DT" diff "$T/a.dtr" "$T/flipped2.dtr"
one_line "diff corrupted checkpoint"

# --- replay: a cpu run reproduces bitwise from a checkpoint
expect 0 "record for replay" -- $R --steps 8 --batch 10 --checkpoint-every 4 -o "$T/rp.dtr"
expect 0 "replay --step 5 --steps 3 reproduces" -- "$DT" replay "$T/rp.dtr" --step 5 --steps 3
has "$T/out" "^reproduced: every replayed step matches the recording bitwise" "replay: says reproduced"
has "$T/out" "replayed from the checkpoint at step 4" "replay: starts at the checkpoint before step 5"
expect 1 "replay with a fault does not reproduce" -- "$DT" replay "$T/rp.dtr" --step 5 --inject enc2.matmul:scale
has "$T/out" "^not reproduced: in step 4, op [0-9]+ enc2\.matmul's recorded output is not what re-execution gives from the same inputs$" "replay: names the faulty op"
has "$T/out" "^  configuration here against the recording: inject \(absent\) -> enc2\.matmul:scale" "replay: names what differs in the configuration"
# a bit flipped at a checkpointed step is in that checkpoint: replay from it reproduces
expect 1 "record a flip at a checkpointed step" -- $R --steps 8 --batch 10 --checkpoint-every 4 --flip-bit 4:enc2.W:100:22 -o "$T/fl4.dtr"
expect 0 "replay from the flip's own checkpoint reproduces" -- "$DT" replay "$T/fl4.dtr" --step 4 --steps 2
expect 0 "replay from the checkpoint before the flip reproduces" -- "$DT" replay "$T/fl4.dtr" --step 3 --steps 3
expect 2 "replay past the end" -- "$DT" replay "$T/rp.dtr" --step 7 --steps 2
one_line "replay past the end"
expect 2 "replay without --step" -- "$DT" replay "$T/rp.dtr"
one_line "replay without --step"

# --- replay against the exact oracle: a clean run is exact or rounding everywhere
expect 0 "clean cpu run against the oracle: no SEMANTIC op" -- "$DT" replay "$T/rp.dtr" --step 6 --against mpfr --all
has "$T/out" "^summary: 37 op results checked: [0-9]+ exact, [0-9]+ rounding, 0 SEMANTIC$" "oracle: summary of a clean step"
has "$T/out" "^ +[0-9]+  enc1\.matmul +matmul +[0-9]+ +[0-9.e-]+  (rounding|exact)$" "oracle: a matmul is rounding or exact"
has "$T/out" "^ +[0-9]+  enc1\.add_bias +add_bias +0 +0  exact$" "oracle: a correctly rounded addition is exact"
# each injected wrong computation is SEMANTIC at exactly its op, and nowhere else
semantic_at() { # NAME EXTRA-RECORD-OPTIONS... : record with the fault, replay against the oracle
    op=$1; shift
    rm -f "$T/f.dtr"
    if ! "$DT" record -q --steps 2 --batch 10 "$@" --inject "$op" -o "$T/f.dtr" 2>"$T/err"; then
        bad "--inject $op $*: record failed"; head -5 "$T/err"; return
    fi
    "$DT" replay "$T/f.dtr" --step 1 --against mpfr >"$T/out" 2>>"$T/err"
    rc=$?
    name=${op%%:*}
    n=$(grep -Ec '^ +[0-9]+  .* SEMANTIC$' "$T/out")
    if [ "$rc" -eq 1 ] && [ "$n" -eq 1 ] && grep -Eq "^ +[0-9]+  ${name} +[a-z_0-9]+ +[0-9NaN]+ +[0-9.e+inf]+  SEMANTIC$" "$T/out"; then
        ok "--inject $op $*: SEMANTIC at $name only"
    else
        bad "--inject $op $*: exit $rc, $n SEMANTIC ops"; cat "$T/out" "$T/err" | head -30
    fi
}
semantic_at enc1.sigmoid:formula
semantic_at enc1.add_bias:formula
semantic_at dec2.add_bias.grad:formula
semantic_at dec2.b.grad:formula
semantic_at dec2.sigmoid.grad:formula
semantic_at loss.mse:formula
semantic_at enc2.W.update:formula
semantic_at enc1.W.update:formula --preset adam-shoulder
semantic_at enc1.relu:formula --act relu
semantic_at enc1.tanh:formula --act tanh
semantic_at enc1.add_bias.grad:formula --act tanh
semantic_at dec1.matmul:bitflip:5:20
semantic_at enc2.matmul:scale

# --- the mpfr backend: a reference run that aligns op by op with cpu runs
M="--steps 3 --batch 4 --layers 784,16,784"
expect 0 "record --backend mpfr (with its self-check at twice the precision)" -- "$DT" record $M --backend mpfr -o "$T/ref.dtr"
has "$T/out" "^self-check: the run at twice the precision gave the same float32 results in all 3 steps$" "mpfr: self-check passed"
expect 0 "record the same on cpu" -- $R $M -o "$T/c1.dtr"
expect 0 "record the same on cpu, two threads" -- $R $M --threads 2 -o "$T/c2.dtr"
expect 1 "diff cpu vs mpfr: aligned op by op, different" -- "$DT" diff "$T/c1.dtr" "$T/ref.dtr"
has "$T/out" "^first divergence: step 0$" "cpu vs mpfr: first divergence at step 0"
if grep -q "op lists differ" "$T/out"; then bad "cpu vs mpfr: op lists differ"; else ok "cpu vs mpfr: the op lists align"; fi
expect 1 "diff --reference: distances from the mpfr run" -- "$DT" diff --reference "$T/ref.dtr" "$T/c1.dtr" "$T/c2.dtr"
has "$T/out" "^distance from the reference" "diff --reference: table"
has "$T/out" "^(closer to exact arithmetic for longer: [AB]|neither run stays closer)" "diff --reference: verdict"
expect 0 "mpfr at 24 bits: records, and its self-check warns" -- "$DT" record $M --backend mpfr --precision 24 -o "$T/m24.dtr"
has "$T/err" "^divtrace record: warning: self-check: precision 24 and 48 bits agree in float32 for the first [0-9]+ of 3 steps only" "mpfr at 24 bits: warning names the agreement"
expect 2 "mpfr precision out of range" -- "$DT" record $M --backend mpfr --precision 8 -o "$T/x.dtr"
one_line "mpfr precision out of range"

# --- the golden trace: a v1 file written by divtrace 0.1.0 stays readable,
# and what a run computes without the BLAS library (data order, initial
# weights, the tensor hash) stays what it was
G="${top_srcdir:-$(dirname "$0")/..}/traces/autoencoder-784-8-784-v1.dtr"
expect 0 "golden v1 trace: show" -- "$DT" show "$G"
has "$T/out" "^# complete$" "golden v1 trace: complete"
has "$T/out" "^c6786b4be6b2ccfd  0  data\.x  10x784  " "golden v1 trace: records read back"
awk '$3 == "data.x" || ($2 == 0 && $3 ~ /\.(W|b)$/) { print $1, $2, $3 }' "$T/out" >"$T/golden.leaves"
expect 0 "golden config recorded again" -- $R --steps 3 --batch 10 --layers 784,8,784 --checkpoint-every 1000 -o "$T/g.dtr"
"$DT" show "$T/g.dtr" | awk '$3 == "data.x" || ($2 == 0 && $3 ~ /\.(W|b)$/) { print $1, $2, $3 }' >"$T/new.leaves"
if [ -s "$T/golden.leaves" ] && cmp -s "$T/golden.leaves" "$T/new.leaves"; then
    ok "golden: data batches and initial weights hash as in the golden trace"
else
    bad "golden: data batches or initial weights changed"; diff "$T/golden.leaves" "$T/new.leaves" | head
fi

# --- bad input: one line on stderr, exit 2, earlier output untouched
cp "$T/a.dtr" "$T/keep.dtr"
expect 2 "unknown option" -- "$DT" record --no-such-option -o "$T/keep.dtr"
expect 2 "missing data" -- $R --data "$T/nodata" -o "$T/keep.dtr"
one_line "missing data"
expect 2 "layers that do not fit the data" -- $R --layers 100,10,100 -o "$T/keep.dtr"
one_line "layers mismatch"
expect 2 "momentum with adam" -- $R --optimizer adam --momentum 0.9 -o "$T/keep.dtr"
one_line "momentum with adam"
expect 2 "bad number" -- $R --lr abc -o "$T/keep.dtr"
one_line "bad number"
expect 2 "unknown backend" -- $R --backend tpu -o "$T/keep.dtr"
one_line "unknown backend"
# this machine has no GPU (CI's has none): a GPU backend is refused clearly,
# whether or not the build has the CUDA backends
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi >/dev/null 2>&1; then
    for b in cuda cudnn; do
        expect 2 "--backend $b without a GPU" -- $R --backend $b -o "$T/keep.dtr"
        has "$T/err" "no usable CUDA GPU on this machine|this build has: cpu, mpfr" "--backend $b without a GPU: says why"
        one_line "--backend $b without a GPU"
    done
fi
expect 2 "--reduce on the cpu" -- $R --reduce atomic -o "$T/keep.dtr"
one_line "--reduce on the cpu"
expect 2 "--streams on the cpu" -- $R --streams 2 -o "$T/keep.dtr"
has "$T/err" "--streams apply to --backend cuda and cudnn only" "--streams on the cpu: says why"
one_line "--streams on the cpu"
for n in 0 9 x; do
    expect 2 "--streams $n" -- $R --backend cuda --streams $n -o "$T/keep.dtr"
    has "$T/err" "--streams '$n': expected an integer from 1 to 8" "--streams $n: says the range"
    one_line "--streams $n"
done
expect 2 "--cudnn-algo on cuda" -- $R --backend cuda --cudnn-algo fastest -o "$T/keep.dtr"
one_line "--cudnn-algo on cuda"
expect 2 "no output" -- $R
one_line "no output"
expect 2 "unwritable output" -- $R -o /nonexistent/dir/x.dtr
one_line "unwritable output"
cmp -s "$T/a.dtr" "$T/keep.dtr" && ok "failed runs left the existing trace untouched" || bad "existing trace was modified"
expect 2 "diff needs two files" -- "$DT" diff "$T/a.dtr"
expect 2 "unknown command" -- "$DT" frobnicate
expect 0 "--version" -- "$DT" --version
expect 0 "record --help" -- "$DT" record --help

finish
