#!/bin/sh
# cli_escape.sh: end-to-end tests of `divtrace escape` on a recorded
# autoencoder run (the adam-shoulder preset: its plateau near loss 0.086 and
# the escape from it, in 600 steps, a fifth of the default run's), the
# JSON output, --plot (PNGs by gnuplot), a trace cut short, and bad options
# and files (exit 2, one line). Needs Debian's dataset-fashion-mnist
# (./bootstrap installs it).
set -u
NAME=cli_escape.sh
. "$(dirname "$0")/cli_lib.sh"

R="$DT record -q --preset adam-shoulder --steps 600 --checkpoint-every 100"
expect 0 "record the adam-shoulder run, 600 steps" -- $R -o "$T/run.dtr"
expect 0 "escape" -- "$DT" escape "$T/run.dtr"
cp "$T/out" "$T/text"
has "$T/text" "^  plateau 1: steps [0-9]+-[0-9]+, level 0\.08[5-9][0-9]*, grad norm [0-9.e-]+, " "a plateau near loss 0.086"
# an escape between steps 400 and 600
if grep -Eq "^  plateau [0-9]+: .*level 0\.08[5-9][0-9]*, .*escape at step ([45][0-9][0-9]|600) " "$T/text"; then
    ok "it escapes between steps 400 and 600"
else
    bad "no escape from the 0.086 plateau between steps 400 and 600"; cat "$T/text"
fi
has "$T/text" "^  escapes: [0-9]+" "escape steps listed"
has "$T/text" "^  phases: [2-9] \((bi|tri|tetra|penta|multi)phasic\)$" "at least biphasic"

expect 0 "escape --json" -- "$DT" escape --json "$T/run.dtr"
for k in runs path steps complete params window min_len flat drop plateaus start end level grad_norm escape escapes phases phase_name; do
    has "$T/out" "\"$k\": " "--json: key $k"
done
if command -v python3 >/dev/null 2>&1; then
    if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r=d["runs"][0]; assert r["phases"] >= 2 and any(400 <= e <= 600 for e in r["escapes"])' "$T/out"; then
        ok "--json parses, escapes agree"
    else
        bad "--json does not parse or disagrees"
    fi
fi
# diff of two runs that sit on the plateau: their escapes beside the divergence
expect 0 "record the same run on two threads" -- $R --threads 2 -o "$T/run2.dtr"
expect 1 "diff of two runs with plateaus" -- "$DT" diff "$T/run.dtr" "$T/run2.dtr"
has "$T/out" "^saddle plateaus and escapes" "diff: the plateaus and escapes of both runs"
has "$T/out" "^  A: plateau at loss 0\.08[5-9][0-9]* from step [0-9]+ to [0-9]+, escape at step [0-9]+$" "diff: A's plateau and escape"
has "$T/out" "^  first escapes differ by -?[0-9]+ steps \(B - A\)$" "diff: the difference of the escapes"
has "$T/out" "^  growth of ln\(distance\) per step: on A's plateaus " "diff: distance growth on and off the plateaus"
expect 1 "diff --json of two runs with plateaus" -- "$DT" diff --json "$T/run.dtr" "$T/run2.dtr"
has "$T/out" '"plateaus": \{"a": \[\{"start": [0-9]+, "end": [0-9]+, "level": 0\.08[0-9]*, "escape": [0-9]+\}' "diff --json: the plateaus and escapes"
expect 0 "two runs at once" -- "$DT" escape "$T/run.dtr" "$T/run.dtr"
n=$(grep -c "^  phases: " "$T/out")
[ "$n" -eq 2 ] && ok "one block per run" || bad "$n blocks for 2 runs"

# --plot DIR: PNGs drawn by gnuplot (CI installs gnuplot-nox)
# png FILE NAME: FILE exists, is non-empty and starts with the PNG signature
png() {
    sig=$(head -c 8 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')
    if [ -s "$1" ] && [ "$sig" = "89504e470d0a1a0a" ]; then ok "$2"; else bad "$2 ($1: signature '$sig')"; fi
}
if command -v gnuplot >/dev/null 2>&1; then
    expect 0 "escape --plot of two runs" -- "$DT" escape --plot "$T/plots" "$T/run.dtr" "$T/run2.dtr"
    png "$T/plots/loss.png" "--plot: loss.png is a PNG"
    png "$T/plots/distance.png" "--plot: distance.png is a PNG"
    has "$T/out" "^plot: $T/plots/loss\.png$" "--plot: the paths written"
    has "$T/out" "^plot: $T/plots/first-divergence\.png skipped: not PredNet" "--plot: no heatmap for the autoencoder"
    # a pair that diverges (tests/cli_prednet.sh: threads, Prescott kernel)
    Q="$DT record -q --model prednet --stack 1,4 --size 64x64 --nt 3 --batch 1 --steps 1 --cpu-kernel Prescott"
    expect 0 "prednet --threads 1" -- $Q --threads 1 -o "$T/p1.dtr"
    expect 0 "prednet --threads 2" -- $Q --threads 2 -o "$T/p2.dtr"
    expect 0 "escape --plot of a PredNet pair" -- "$DT" escape --plot "$T/pplots" "$T/p1.dtr" "$T/p2.dtr"
    png "$T/pplots/first-divergence.png" "--plot: first-divergence.png is a PNG"
    expect 0 "escape --json --plot" -- "$DT" escape --json --plot "$T/jplots" "$T/run.dtr"
    png "$T/jplots/loss.png" "--json --plot: loss.png"
    if python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/out" 2>/dev/null || ! command -v python3 >/dev/null 2>&1; then
        ok "--json --plot: stdout holds only the JSON"
    else
        bad "--json --plot: stdout is not JSON"
    fi
    printf 'x' >"$T/afile"
    expect 2 "--plot into a directory that cannot be made" -- "$DT" escape --plot "$T/afile/plots" "$T/run.dtr"
    one_line "--plot unwritable"
else
    echo "gnuplot is not installed: skipping the --plot checks (install gnuplot-nox)"
fi
mkdir "$T/nognuplot"
expect 2 "--plot without gnuplot on PATH" -- env PATH="$T/nognuplot" "$DT" escape --plot "$T/np" "$T/run.dtr"
one_line "--plot without gnuplot"

# a trace cut short: analyzed over its complete steps, with a note
size=$(wc -c <"$T/run.dtr")
head -c $((size * 2 / 3)) "$T/run.dtr" >"$T/cut.dtr"
expect 0 "a trace cut short" -- "$DT" escape "$T/cut.dtr"
has "$T/out" "analyzed over the complete steps" "cut short: noted"

# trouble: exit 2, one line
for opt in "--window 2" "--window x" "--min-len -1" "--flat 0" "--drop 1" "--drop -0.1" "--noise 1000" "--horizon abc" "--bogus"; do
    expect 2 "escape $opt" -- "$DT" escape $opt "$T/run.dtr"
    [ "$opt" = "--bogus" ] || one_line "escape $opt"
done
expect 2 "a missing file" -- "$DT" escape "$T/nothing.dtr"
one_line "a missing file"
printf 'not a trace at all\n' >"$T/junk.dtr"
expect 2 "not a trace" -- "$DT" escape "$T/junk.dtr"
one_line "not a trace"
expect 2 "no file" -- "$DT" escape
expect 0 "--help" -- "$DT" escape --help
expect 0 "--curvature at a checkpoint on the plateau" -- "$DT" escape --curvature 300 "$T/run.dtr"
has "$T/out" "^  Hessian at step 300: lowest eigenvalue [-0-9.e]+, highest [-0-9.e]+: a (saddle|minimum)" "--curvature: the Hessian line"
expect 2 "--curvature at a step without a checkpoint" -- "$DT" escape --curvature 7 "$T/run.dtr"
one_line "--curvature without a checkpoint"

finish
