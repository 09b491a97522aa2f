#!/bin/sh
# cli_report.sh: end-to-end tests of `divtrace report` on a tiny study made
# by hand with `divtrace record` (2 conditions x 2 trials of a 784-8-784
# autoencoder, one and two OpenBLAS threads, with OpenBLAS's Prescott kernel
# named, since on a CPU where OpenBLAS picks its SkylakeX kernel one and two
# threads give the same sums and the pairs would not diverge): the
# per-condition means and
# standard deviations against awk over `divtrace show`, the pair table's
# first divergence against `divtrace diff`, the oracle replays, the PNGs,
# the same report.md from the summaries alone once the traces are deleted,
# --json, --no-replay, and the refusals (exit 2, one line). Two more
# conditions test the counting of runs and the trials that stop learning:
# "fixed" repeats seed 1 on one thread (each trial bitwise the run one/t01)
# and "frozen" trains with a learning rate of 1e-12. Needs Debian's
# dataset-fashion-mnist (./bootstrap installs it).
set -u
NAME=cli_report.sh
. "$(dirname "$0")/cli_lib.sh"

S="$T/study"
mkdir -p "$S/runs/one" "$S/runs/two"
cat >"$S/sweep.spec" <<'EOF'
# a tiny study: the same trials on one and on two OpenBLAS threads
name tiny
trials 2
common --layers 784,8,784 --steps 60 --seed {trial} --cpu-kernel Prescott
condition one group=one : --threads 1
condition two group=two : --threads 2
compare group=one group=two final escape phases
pair group=one group=two
condition fixed group=fixed : --threads 1 --seed 1
condition frozen group=frozen : --threads 1 --lr 1e-12
compare group=one group=fixed final
EOF
mkdir -p "$S/runs/fixed" "$S/runs/frozen"
for t in 1 2; do
    expect 0 "record fixed/t0$t" -- "$DT" record -q --layers 784,8,784 --steps 60 --seed 1 --cpu-kernel Prescott --threads 1 -o "$S/runs/fixed/t0$t.dtr"
    expect 0 "record frozen/t0$t" -- "$DT" record -q --layers 784,8,784 --steps 60 --seed $t --cpu-kernel Prescott --threads 1 --lr 1e-12 -o "$S/runs/frozen/t0$t.dtr"
done
for t in 1 2; do
    expect 0 "record one/t0$t" -- "$DT" record -q --layers 784,8,784 --steps 60 --seed $t --cpu-kernel Prescott --threads 1 -o "$S/runs/one/t0$t.dtr"
    expect 0 "record two/t0$t" -- "$DT" record -q --layers 784,8,784 --steps 60 --seed $t --cpu-kernel Prescott --threads 2 -o "$S/runs/two/t0$t.dtr"
done

expect 0 "report" -- "$DT" report -q "$S"
[ -s "$S/report.md" ] && ok "report.md written" || bad "no report.md"
cp "$S/report.md" "$T/first.md"
for f in summary/trials.csv summary/pairs.csv summary/replays.csv summary/curves/one/t01.csv \
    summary/curves/two/t02.csv report/conditions.csv report/comparisons.csv report/pairs.csv \
    report/machines.csv; do
    [ -s "$S/$f" ] && ok "$f written" || bad "$f missing"
done
has "$S/summary/curves/one/t01.csv" "^step,loss,grad_norm$" "curves: header"
n=$(($(wc -l <"$S/summary/curves/one/t01.csv") - 1))
[ "$n" -eq 60 ] && ok "curves: one row per step" || bad "curves: $n rows for 60 steps"

# the per-condition mean and sd of the mean loss of the last 50 steps, from
# `divtrace show --summary` with awk (show prints 9 significant digits)
col() { # col FILE CONDITION COLUMN-NAME: that cell of a CSV with a header
    awk -F, -v c="$2" -v k="$3" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == k) j = i; next }
        $1 == c { print $j; exit }' "$1"
}
for c in one two; do
    for t in 1 2; do
        "$DT" show --summary "$S/runs/$c/t0$t.dtr" | awk '$1 == "step" { l[n++] = $4 }
            END { s = 0; for (i = n - 50; i < n; i++) s += l[i]; printf "%.12g\n", s / 50 }'
    done >"$T/m50.$c"
    want=$(awk '{ x[NR] = $1; s += $1 } END { m = s / NR; v = 0; for (i = 1; i <= NR; i++) v += (x[i] - m) ^ 2;
        printf "%.12g %.12g\n", m, sqrt(v / (NR - 1)) }' "$T/m50.$c")
    got="$(col "$S/report/conditions.csv" $c final_mean) $(col "$S/report/conditions.csv" $c final_sd)"
    if awk -v w="$want" -v g="$got" 'BEGIN { split(w, a, " "); split(g, b, " ");
        exit !((a[1] - b[1]) ^ 2 <= (1e-7 * a[1]) ^ 2 && (a[2] - b[2]) ^ 2 <= (1e-5 * a[2] + 1e-9) ^ 2) }'; then
        ok "condition $c: mean and sd of the final loss ($got) agree with show + awk ($want)"
    else
        bad "condition $c: report says $got, show + awk says $want"
    fi
done
has "$S/report.md" "^\| one \| one \| 2/2 \| " "report.md: the condition table"
has "$S/report.md" "^\| 7 \| \`group=one\` \| \`group=two\` \| final \| all \| 2 \| " "report.md: the compare line"
# the machines table names this machine as the trace headers do (uname -n)
host=$(uname -n)
sed -n '/^## Machines/,/^## Plots/p' "$S/report.md" | grep -qF "| $host | " && ok "report.md: the host is $host" \
    || bad "report.md: the Machines table does not name $host"
has "$S/report/comparisons.csv" "^7,group=one,group=two,escape,all,0,0,.*fewer than 2 values in a sample" "no test without escapes"
has "$S/report/comparisons.csv" "^7,group=one,group=two,final,learning," "the tests without the stalled trials"

# runs: fixed/t01 and t02 have the same curve (cmp), so fixed is 1 run; the
# stalled trials: mean of the last 50 losses not below 0.9 of the first, by
# awk over the curves
cmp -s "$S/summary/curves/fixed/t01.csv" "$S/summary/curves/fixed/t02.csv" && ok "fixed: bitwise identical curves" \
    || bad "fixed: the curves differ"
cmp -s "$S/summary/curves/fixed/t01.csv" "$S/summary/curves/one/t01.csv" && ok "fixed/t01 is one/t01" \
    || bad "fixed/t01 and one/t01 differ"
for c in one two fixed frozen; do
    want=$(for t in 1 2; do awk -F, 'NR == 2 { f = $2 } NR > 1 { l[n++] = $2 }
        END { s = 0; for (i = n - 50; i < n; i++) s += l[i]; print (s / 50 < 0.9 * f) ? 0 : 1 }' \
        "$S/summary/curves/$c/t0$t.csv"; done | awk '{ s += $1 } END { print s }')
    got=$(col "$S/report/conditions.csv" $c stalled)
    [ "$want" = "$got" ] && ok "condition $c: $got stopped learning" || bad "condition $c: stalled $got, awk says $want"
done
[ "$(col "$S/report/conditions.csv" frozen stalled)" = 2 ] && ok "frozen: both trials stopped learning" \
    || bad "frozen: not both trials stopped learning"
[ "$(col "$S/report/conditions.csv" fixed runs)" = 1 ] && ok "fixed: 1 run" || bad "fixed: not 1 run"
[ "$(col "$S/report/conditions.csv" one runs)" = 2 ] && ok "one: 2 runs" || bad "one: not 2 runs"
# one against fixed: n = 2 and 1 of 2 trials; one pair by seed (one/t01 with
# fixed/t01, a difference of exactly 0), and the tests say why they are not made
has "$S/report/comparisons.csv" "^11,group=one,group=fixed,final,all,2,2,[^,]+,[^,]+,1,2,.*fewer than 2 values in a sample.*,1,1,0,.*fewer than 2 pairs,.*every difference zero$" "one vs fixed: n counts runs"
has "$S/report.md" "^\| 11 \| \`group=one\` \| \`group=fixed\` \| final \| all \| 2 \| [^|]+ \| 1 of 2 trials \| " "report.md: 1 of 2 trials"

# one against two paired by seed, with awk over the curves: the mean
# difference d, t = mean / (sd / sqrt 2), df = 1, so p = 1 - 2 atan(|t|) / pi;
# the exact Wilcoxon p for 2 pairs is 1/2 when both differences have one
# sign, else 1. When the threads give bitwise the same curves every
# difference is 0 and neither test is made ("-" below).
pcol() { awk -F, -v k="$1" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == k) j = i; next }
    $1 == 7 && $4 == "final" && $5 == "all" { print $j; exit }' "$S/report/comparisons.csv"; }
m50() { awk -F, 'NR > 1 { l[n++] = $2 } END { s = 0; for (i = n - 50; i < n; i++) s += l[i]; printf "%.17g\n", s / 50 }' "$1"; }
want=$(for t in 1 2; do echo "$(m50 "$S/summary/curves/one/t0$t.csv") $(m50 "$S/summary/curves/two/t0$t.csv")"; done |
    awk '{ d[NR] = $1 - $2 } END { m = (d[1] + d[2]) / 2; sd = sqrt((d[1] - m) ^ 2 + (d[2] - m) ^ 2);
        if (sd == 0) { printf "%.10g - - %s\n", m, m == 0 ? "-" : "0.5"; exit }
        t = m / (sd / sqrt(2)); at = t < 0 ? -t : t; p = 1 - 2 * atan2(at, 1) / 3.141592653589793;
        w = (d[1] > 0) == (d[2] > 0) ? 0.5 : 1; printf "%.10g %.6g %.6g %g\n", m, t, p, w }')
got="$(pcol pairs) $(pcol mean_diff) $(pcol paired_t | sed 's/^$/-/') $(pcol paired_p | sed 's/^$/-/') $(pcol wilcoxon_p | sed 's/^$/-/')"
if awk -v w="$want" -v g="$got" 'function rel(a, b) { return a == b || (a - b) ^ 2 <= (1e-5 * b) ^ 2 + 1e-30 }
    BEGIN { split(w, a, " "); split(g, b, " "); exit !(b[1] == 2 && rel(b[2], a[1]) && rel(b[3], a[2]) && rel(b[4], a[3]) && b[5] == a[4]) }'; then
    ok "one vs two paired by seed: pairs, mean, t, p, Wilcoxon p ($got) agree with awk ($want)"
else
    bad "one vs two paired: report says '$got', awk says '$want'"
fi
# Holm over the all rows, by awk: every p of the family sorted, (m - j + 1) p(j),
# running maximum, capped at 1; compared with the p_holm columns (quoted
# notes, which may hold commas, blanked first)
awk -F, '{ gsub(/"[^"]*"/, "q"); $0 = $0 } NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $5 == "all" {
        split("welch_p mwu_p paired_p wilcoxon_p", k, " ")
        for (j = 1; j <= 4; j++) if ($(c[k[j]]) != "") { m++; p[m] = $(c[k[j]]); h[m] = $(c[k[j] "_holm"]) } }
    END { for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (p[j] < p[i]) { x = p[i]; p[i] = p[j]; p[j] = x; x = h[i]; h[i] = h[j]; h[j] = x }
        run = 0; bad = 0
        for (i = 1; i <= m; i++) { a = (m - i + 1) * p[i]; if (a > 1) a = 1; if (a > run) run = a; if ((run - h[i]) ^ 2 > (1e-12 * run) ^ 2) bad = 1 }
        exit bad || m == 0 }' "$S/report/comparisons.csv" && ok "Holm over the all rows agrees with awk" \
    || bad "Holm adjusted p-values disagree with awk"

has "$S/report/comparisons.csv" "^7,group=one,group=two,phases,.*zero variance in both samples, equal means" "phases: degenerate samples said so"

# the pairs against divtrace diff
for t in 1 2; do
    "$DT" diff "$S/runs/one/t0$t.dtr" "$S/runs/two/t0$t.dtr" >"$T/diff" 2>&1
    want=$(awk '/^first divergence: step/ { s = $4 } /^  first op: op/ { print s "," $5; exit }' "$T/diff")
    got=$(awk -F, -v t=$t '$3 == t { print $6 "," $7 }' "$S/report/pairs.csv")
    [ -n "$want" ] && [ "$want" = "$got" ] && ok "pair t0$t: first divergence $got as divtrace diff" \
        || bad "pair t0$t: report says '$got', divtrace diff '$want'"
done
has "$S/report/pairs.csv" "^one,two,1,compared,1,[0-9]+,[^,]+,[^,]+,.*,ok,[0-9]+,[0-9]+,0,,ok,[0-9]+,[0-9]+,0,,rounding only,[^,]+$" "pairs: both runs replayed, nothing SEMANTIC, rounding only"
# each pair's verdict is the one `divtrace explain` gives on its own
for t in 1 2; do
    "$DT" explain "$S/runs/one/t0$t.dtr" "$S/runs/two/t0$t.dtr" >"$T/ex" 2>&1
    want=$(tail -n 1 "$T/ex")
    got=$(awk -F, -v t=$t '$1 == "one" && $3 == t { print $NF }' "$S/report/pairs.csv")
    [ -n "$want" ] && [ "$want" = "$got" ] && ok "pair t0$t: verdict '$got' as divtrace explain" \
        || bad "pair t0$t: report says '$got', divtrace explain '$want'"
done
# the opening paragraph: the sweep file's comment, and the answer with the
# mean difference comparisons.csv holds
has "$S/report.md" "^\*\*Question and design\*\* \(from the sweep file\)\. a tiny study: the same trials on one and on two OpenBLAS threads$" "report.md opens with the sweep file's question"
md=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "mean_diff") j = i; next }
    $2 == "group=one" && $3 == "group=two" && $4 == "final" && $5 == "all" { printf "%.3g", $j; exit }' "$S/report/comparisons.csv")
if [ "$md" = 0 ]; then # every pair's final losses equal: said so, not as an interval
    has "$S/report.md" "^- \`group=one\` against \`group=two\`, final loss: the same in every one of the 2 pairs" "the answer says every pair's difference is zero, as comparisons.csv has it"
else
    has "$S/report.md" "^- \`group=one\` against \`group=two\`, final loss: A - B = $md \(95% CI " "the answer gives the paired mean difference ($md) with its interval"
fi
has "$S/report.md" "^- \`one\` against \`two\`, trial by trial \(2 pairs\), \`divtrace explain\`: 2 rounding only\.$" "the answer counts explain's verdicts"
has "$S/summary/replays.csv" "^one,1,[0-9]+,ok," "replays.csv: a row per run"

# plots
png() {
    sig=$(head -c 8 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')
    if [ -s "$1" ] && [ "$sig" = "89504e470d0a1a0a" ]; then ok "$2"; else bad "$2 ($1: signature '$sig')"; fi
}
if command -v gnuplot >/dev/null 2>&1; then
    png "$S/report/loss-one.png" "loss-one.png is a PNG"
    png "$S/report/loss-two.png" "loss-two.png is a PNG"
    png "$S/report/divergence-one--two.png" "divergence-one--two.png is a PNG"
    has "$S/report.md" "^!\[loss-one.png\]\(report/loss-one.png\)$" "report.md links the plots"
else
    echo "gnuplot is not installed: skipping the plot checks (install gnuplot-nox)"
fi

expect 0 "report --json" -- "$DT" report --json "$S"
if command -v python3 >/dev/null 2>&1; then
    if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["conditions"]) == 4 and d["comparisons"][0]["paired_t"]["pairs"] == 2 and "p_holm" in d["comparisons"][0]["wilcoxon"] and len(d["pairs"]) == 2 and d["comparisons"][0]["metric"] == "final"' "$T/out"; then
        ok "--json parses"
    else
        bad "--json does not parse"
    fi
fi

# a cached summary is reused; a rerun gives the same report
expect 0 "report again (from the cache)" -- "$DT" report -q "$S"
cmp -s "$T/first.md" "$S/report.md" && ok "the cached report is identical" || bad "the cached report differs"

# --no-replay on a copy
cp -r "$S" "$T/nr"
expect 0 "report --rebuild --no-replay" -- "$DT" report -q --rebuild --no-replay "$T/nr"
has "$T/nr/report/pairs.csv" "^one,two,1,compared,1,.*,skipped,,,,,skipped,,,,,rounding only,[^,]+$" "--no-replay: replays skipped, the verdict made"
# --no-explain, and -j 2 giving the very rows one worker gives
cp -r "$S" "$T/ne"
expect 0 "report --rebuild --no-explain" -- "$DT" report -q --rebuild --no-explain "$T/ne"
has "$T/ne/report/pairs.csv" "^one,two,1,compared,1,.*,ok,[0-9]+,[0-9]+,0,,skipped,$" "--no-explain: no verdict"
cp -r "$S" "$T/j2"
expect 0 "report --rebuild -j 2" -- "$DT" report -q --rebuild -j 2 "$T/j2"
cmp -s "$S/report/pairs.csv" "$T/j2/report/pairs.csv" && ok "-j 2: the same pairs.csv" \
    || { bad "-j 2: pairs.csv differs"; diff "$S/report/pairs.csv" "$T/j2/report/pairs.csv"; }
expect 2 "-j 0" -- "$DT" report -j 0 "$T/j2"
one_line "-j 0"
# a pair summary from before the verdict columns still reads, as "not run"
cp -r "$S" "$T/old"
rm -f "$T/old"/runs/*/*.dtr
for f in "$T/old"/summary/pairs/one--two/t0?.csv; do
    sed -i -e '1s/,verdict,verdict_line$//' -e '2s/,[^,]*,[^,]*$//' "$f"
done
expect 0 "report from old pair summaries" -- "$DT" report -q "$T/old"
has "$T/old/report/pairs.csv" "^one,two,1,compared,1,.*,not run,$" "an old pair summary: verdict not run"
# rounding verdicts that left ops of a nondeterministic run unchecked: said
cp -r "$S" "$T/un"
rm -f "$T/un"/runs/*/*.dtr
n=4
for f in "$T/un"/summary/pairs/one--two/t0?.csv; do
    sed -i "2s/,rounding only,\([^,]*\)\$/,rounding only,\1; not checked: $n ops of B's step 0 after its re-execution parted from its nondeterministic recording/" "$f"
    n=$((n + 3))
done
expect 0 "report from pair summaries with unchecked ops" -- "$DT" report -q "$T/un"
has "$T/un/report.md" "^- \`one\` against \`two\`, trial by trial \(2 pairs\), \`divtrace explain\`: 2 rounding only \(in 2 of the rounding verdicts, 4 to 7 ops of a nondeterministic run's step were not checked" "the answer says how many ops rounding verdicts left unchecked"

# --replay-trials 1 on another copy: trial 1 of the pair replayed, trial 2 not
cp -r "$S" "$T/rt"
expect 0 "report --rebuild --replay-trials 1" -- "$DT" report -q --rebuild --replay-trials 1 "$T/rt"
has "$T/rt/report/pairs.csv" "^one,two,2,compared,1,.*,skipped,,,,,skipped,,,,,rounding only,[^,]+$" "--replay-trials 1: trial 2 skipped"
if grep -E "^one,two,1,compared," "$T/rt/report/pairs.csv" | grep -q skipped; then
    bad "--replay-trials 1: trial 1 skipped too"
else
    ok "--replay-trials 1: trial 1 replayed"
fi
expect 2 "--replay-trials 0" -- "$DT" report --replay-trials 0 "$T/rt"
one_line "--replay-trials 0"

# without the traces: the same report from the summaries alone
rm -f "$S"/runs/*/*.dtr
expect 0 "report without traces" -- "$DT" report -q "$S"
cmp -s "$T/first.md" "$S/report.md" && ok "report.md from summaries alone is identical" \
    || { bad "report.md from summaries differs"; diff "$T/first.md" "$S/report.md" | head; }

# refusals
expect 2 "not a directory" -- "$DT" report "$T/nothing"
one_line "not a directory"
mkdir "$T/empty"
expect 2 "no sweep.spec" -- "$DT" report "$T/empty"
one_line "no sweep.spec"
head -c 100 "$T/nr/runs/one/t01.dtr" >"$T/nr/runs/one/t02.dtr"
expect 2 "a corrupt trace" -- "$DT" report --rebuild "$T/nr"
one_line "a corrupt trace"
expect 2 "no directory given" -- "$DT" report
expect 2 "a bad option" -- "$DT" report --bogus "$S"
expect 0 "--help" -- "$DT" report --help
has "$T/out" "^Usage: divtrace report" "--help: usage"
finish
