#!/bin/sh
# cli_escape.sh: end-to-end tests of `divtrace escape` on a recorded
# autoencoder run (its plateau near loss 0.087 and the escape from it), the
# JSON output, a trace cut short, and bad options and files (exit 2, one
# line). Needs Debian's dataset-fashion-mnist (./bootstrap installs it).
set -u
NAME=cli_escape.sh
. "$(dirname "$0")/cli_lib.sh"

expect 0 "record the default autoencoder run, 3000 steps" -- "$DT" record -q --steps 3000 -o "$T/run.dtr"
expect 0 "escape" -- "$DT" escape "$T/run.dtr"
cp "$T/out" "$T/text"
has "$T/text" "^  plateau 1: steps [0-9]+-[0-9]+, level 0\.08[5-9][0-9]*, grad norm [0-9.e-]+, " "a plateau near loss 0.087"
# an escape between steps 1500 and 3000
if grep -Eq "^  plateau [0-9]+: .*level 0\.08[5-9][0-9]*, .*escape at step (1[5-9][0-9][0-9]|2[0-9][0-9][0-9]|3000) " "$T/text"; then
    ok "it escapes between steps 1500 and 3000"
else
    bad "no escape from the 0.087 plateau between steps 1500 and 3000"; cat "$T/text"
fi
has "$T/text" "^  escapes: [0-9]+" "escape steps listed"
has "$T/text" "^  phases: [2-9] \((bi|tri|tetra|penta|multi)phasic\)$" "at least biphasic"

expect 0 "escape --json" -- "$DT" escape --json "$T/run.dtr"
for k in runs path steps complete params window min_len flat drop plateaus start end level grad_norm escape escapes phases phase_name; do
    has "$T/out" "\"$k\": " "--json: key $k"
done
if command -v python3 >/dev/null 2>&1; then
    if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r=d["runs"][0]; assert r["phases"] >= 2 and any(1500 <= e <= 3000 for e in r["escapes"])' "$T/out"; then
        ok "--json parses, escapes agree"
    else
        bad "--json does not parse or disagrees"
    fi
fi
# diff of two runs that sit on the plateau: their escapes beside the divergence
expect 0 "record the same run on two threads" -- "$DT" record -q --steps 3000 --threads 2 -o "$T/run2.dtr"
expect 1 "diff of two runs with plateaus" -- "$DT" diff "$T/run.dtr" "$T/run2.dtr"
has "$T/out" "^saddle plateaus and escapes" "diff: the plateaus and escapes of both runs"
has "$T/out" "^  A: plateau at loss 0\.08[5-9][0-9]* from step [0-9]+ to [0-9]+, escape at step [0-9]+$" "diff: A's plateau and escape"
has "$T/out" "^  first escapes differ by -?[0-9]+ steps \(B - A\)$" "diff: the difference of the escapes"
has "$T/out" "^  growth of ln\(distance\) per step: on A's plateaus " "diff: distance growth on and off the plateaus"
expect 0 "two runs at once" -- "$DT" escape "$T/run.dtr" "$T/run.dtr"
n=$(grep -c "^  phases: " "$T/out")
[ "$n" -eq 2 ] && ok "one block per run" || bad "$n blocks for 2 runs"

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
expect 0 "--curvature at a checkpoint on the plateau" -- "$DT" escape --curvature 2000 "$T/run.dtr"
has "$T/out" "^  Hessian at step 2000: lowest eigenvalue [-0-9.e]+, highest [-0-9.e]+: a (saddle|minimum)" "--curvature: the Hessian line"
expect 2 "--curvature at a step without a checkpoint" -- "$DT" escape --curvature 7 "$T/run.dtr"
one_line "--curvature without a checkpoint"

finish
