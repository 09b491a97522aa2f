#!/bin/sh
# cli_escape_pairs.sh: end-to-end tests of `divtrace escape --pairs DIR` on a
# sweep-shaped directory of short runs whose relations are known by
# construction: which pairs must form (same seed, another thread count, a
# flipped bit, another checkpoint interval) and which must not (a rerun of
# one configuration, another seed), "never" for two runs that compute the
# same trajectory, the flip step as the first divergence, each run's escape
# as `escape` gives it alone, the correlations recomputed here, --pair-key,
# the scatter plot, and refusals (exit 2, one line).
set -u
NAME=cli_escape_pairs.sh
. "$(dirname "$0")/cli_lib.sh"

# Adam leaves the 0.086 plateau at about step 530 of 600 (README's
# adam-shoulder preset): an escape in every run at a few seconds each.
R="$DT record -q --preset adam-shoulder --steps 600 --trace-level param --checkpoint-every 50"
D="$T/sweep"
mkdir -p "$D/runs/base" "$D/runs/thr2" "$D/runs/flip" "$D/runs/ckpt" "$D/runs/copy"
expect 0 "record base, seed 1" -- $R --seed 1 --threads 1 -o "$D/runs/base/t01.dtr"
expect 0 "record seed 2" -- $R --seed 2 --threads 1 -o "$D/runs/base/t02.dtr"
expect 0 "record two threads" -- $R --seed 1 --threads 2 -o "$D/runs/thr2/t01.dtr"
expect 1 "record a bit flipped at step 150 (a carry fault)" -- $R --seed 1 --threads 1 --flip-bit 150:dec1.W:7:22 -o "$D/runs/flip/t01.dtr"
# the same trajectory, another header: checkpoints every 100 steps
expect 0 "record another checkpoint interval" -- $DT record -q --preset adam-shoulder --steps 600 \
    --trace-level param --checkpoint-every 100 --seed 1 --threads 1 -o "$D/runs/ckpt/t01.dtr"
cp "$D/runs/base/t01.dtr" "$D/runs/copy/t01.dtr"   # a rerun: same header as base
printf 'partial' >"$D/runs/base/t03.dtr.part"       # a trial in flight: not a trace
printf 'notes\n' >"$D/notes.txt"

# The group of seed 1 holds base, ckpt, copy, flip, thr2: 10 pairs less
# base-copy (one configuration twice) = 9; seed 2 has no partner.
expect 0 "escape --pairs" -- "$DT" escape --pairs "$D"
cp "$T/out" "$T/text"
has "$T/text" "^pairs under $D: 6 traces; key model,seed,init_seed: 1 group, 9 pairs$" "text: 6 traces, 9 pairs in 1 group"
has "$T/text" "^ +[0-9]+  runs/base/t01\.dtr +runs/ckpt/t01\.dtr +checkpoint_every 50\|100 +never +- +- +- " "text: same trajectory, first div never, no crossing"
has "$T/text" "^ +[0-9]+  runs/base/t01\.dtr +runs/flip/t01\.dtr +flip_bit -\|step 150 de\.\.\. +150 " "text: the flip pair diverges at the flip step"
has "$T/text" "^ +[0-9]+  runs/base/t01\.dtr +runs/thr2/t01\.dtr +threads 1\|2 " "text: the threads pair"
if grep -Eq "runs/base/t01\.dtr +runs/copy/t01\.dtr" "$T/text"; then bad "text: a rerun was paired"; else ok "text: a rerun is not a pair"; fi
if grep -Eq "runs/base/t02\.dtr +runs/" "$T/text"; then bad "text: seed 2 was paired"; else ok "text: another seed is not a pair"; fi
has "$T/text" "^not paired .*: 1$" "text: one run without a partner"
has "$T/text" "^  runs/base/t02\.dtr$" "text: the run without a partner named"
has "$T/text" "^  first divergent step: +n [0-9]+, " "text: correlation with the first divergence"
has "$T/text" "^  1e-3 crossing step: +n [0-9]+, " "text: correlation with the 1e-3 crossing"
if grep -q "t03" "$T/text"; then bad "a .dtr.part file was read"; else ok "a .dtr.part file is not a trace"; fi

expect 0 "escape --pairs --json" -- "$DT" escape --pairs "$D" --json
cp "$T/out" "$T/pairs.json"
for f in base/t01 base/t02 thr2/t01 flip/t01; do
    expect 0 "escape --json $f" -- "$DT" escape --json "$D/runs/$f.dtr"
    cp "$T/out" "$T/esc-$(echo $f | tr / -).json"
done
expect 1 "diff --json base flip" -- "$DT" diff --json "$D/runs/base/t01.dtr" "$D/runs/flip/t01.dtr"
cp "$T/out" "$T/diff-flip.json"
if command -v python3 >/dev/null 2>&1; then
    cat >"$T/check.py" <<'EOF'
import json, math, sys
T, D = sys.argv[1], sys.argv[2]
d = json.load(open(T + "/pairs.json"))
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
rel = lambda p: p[len(D) + 1:]
pairs = {(rel(q["a"]), rel(q["b"])): q for q in d["pairs"]}
runs = ["runs/base/t01.dtr", "runs/ckpt/t01.dtr", "runs/copy/t01.dtr", "runs/flip/t01.dtr", "runs/thr2/t01.dtr"]
want = {(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]} - {("runs/base/t01.dtr", "runs/copy/t01.dtr")}
check(set(pairs) == want, "pairs formed: %s" % sorted(set(pairs) ^ want))
check(d["unpaired"] == [D + "/runs/base/t02.dtr"], "unpaired %s" % d["unpaired"])
check(d["pair_keys"] == ["model", "seed", "init_seed"] and d["traces"] == 6 and d["groups"] == 1, "header")
# same trajectory: never, no crossing; a rerun of base counts as base
for a, b in [("runs/base/t01.dtr", "runs/ckpt/t01.dtr"), ("runs/ckpt/t01.dtr", "runs/copy/t01.dtr")]:
    q = pairs.get((a, b), {})
    check(q.get("first_divergence", 0) is None, "%s %s: first divergence %s" % (a, b, q.get("first_divergence")))
    check(q.get("cross") == {"1e-6": None, "1e-3": None, "1e-1": None}, "%s %s: crossings" % (a, b))
    check([c["key"] for c in q.get("differs", [])] == ["checkpoint_every"], "%s %s: differs" % (a, b))
# the flip: first divergence at the flip step, crossings not before it and as diff says
dj = json.load(open(T + "/diff-flip.json"))
for a in ["runs/base/t01.dtr", "runs/ckpt/t01.dtr", "runs/copy/t01.dtr"]:
    q = pairs.get((a, "runs/flip/t01.dtr"), {})
    check(q.get("first_divergence") == 150, "%s flip: first divergence %s" % (a, q.get("first_divergence")))
    check(any(c["key"] == "flip_bit" for c in q.get("differs", [])), "%s flip: differs" % a)
    cr = q.get("cross", {})
    for t, x in zip(["1e-6", "1e-3", "1e-1"], dj["crossings"]):
        c = cr.get(t)
        s = c["step"] if c else None
        check(s is None or s >= 150, "%s flip: crossing %s at %s before the flip" % (a, t, s))
        if a == "runs/base/t01.dtr":
            exp = x["checkpoint_step"] if x["checkpoint_step"] is not None else x["sketch_step"]
            frm = "checkpoint" if x["checkpoint_step"] is not None else "sketch"
            check(s == exp and (c is None or c["from"] == frm), "flip crossing %s: %s, diff says %s" % (t, c, exp))
    steps = [cr[t]["step"] for t in ["1e-6", "1e-3", "1e-1"] if cr.get(t)]
    check(steps == sorted(steps), "%s flip: crossings out of order %s" % (a, steps))
check(pairs.get(("runs/base/t01.dtr", "runs/thr2/t01.dtr"), {}).get("differs", [{}])[0].get("key") == "threads", "threads pair differs")
# each run's escape as `escape` finds it alone; the difference is B - A
esc = {}
for f in ["base-t01", "base-t02", "thr2-t01", "flip-t01"]:
    e = json.load(open("%s/esc-%s.json" % (T, f)))["runs"][0]["escapes"]
    esc["runs/" + f.replace("-", "/") + ".dtr"] = e[0] if e else None
esc["runs/copy/t01.dtr"] = esc["runs/ckpt/t01.dtr"] = esc["runs/base/t01.dtr"]
check(esc["runs/base/t01.dtr"] is not None, "the base run escapes")
for (a, b), q in pairs.items():
    check(q["escape_a"] == esc[a] and q["escape_b"] == esc[b], "%s %s: escapes %s %s, alone %s %s" % (a, b, q["escape_a"], q["escape_b"], esc[a], esc[b]))
    dd = None if esc[a] is None or esc[b] is None else esc[b] - esc[a]
    check(q["escape_diff"] == dd, "%s %s: escape difference %s, wanted %s" % (a, b, q["escape_diff"], dd))
# correlations recomputed: Pearson, and Spearman as Pearson of mid-ranks
def pearson(x, y):
    n = len(x); mx = sum(x) / n; my = sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x); syy = sum((b - my) ** 2 for b in y)
    return None if sxx == 0 or syy == 0 else sxy / math.sqrt(sxx * syy)
def ranks(v):
    return [sum(1 for w in v if w < u) + (sum(1 for w in v if w == u) + 1) / 2 for u in v]
for name, onset in [("first_divergence", lambda q: q["first_divergence"]),
                    ("cross_1e-3", lambda q: q["cross"]["1e-3"]["step"] if q["cross"]["1e-3"] else None)]:
    xy = [(onset(q), abs(q["escape_diff"])) for q in d["pairs"] if onset(q) is not None and q["escape_diff"] is not None]
    c = d["correlation"][name]
    check(c["n"] == len(xy), "%s: n %s, wanted %d" % (name, c["n"], len(xy)))
    if len(xy) < 3:
        check(c["pearson"] is None and c["note"] == "too few pairs", "%s: too few pairs" % name)
        continue
    x, y = [a for a, _ in xy], [b for _, b in xy]
    p, s = pearson(x, y), pearson(ranks(x), ranks(y))
    for got, exp, w in [(c["pearson"], p, "pearson"), (c["spearman"], s, "spearman")]:
        check((got is None and exp is None) or (got is not None and exp is not None and abs(got - exp) < 1e-9),
              "%s %s: %s, recomputed %s" % (name, w, got, exp))
for f in fails:
    print("    " + f)
sys.exit(1 if fails else 0)
EOF
    if python3 "$T/check.py" "$T" "$D"; then ok "--json: pairs, never, flip step, escapes, differences and correlations as known"
    else bad "--json: the pairs disagree with what is known (above)"; fi
else
    echo "python3 is not installed: skipping the JSON value checks"
fi

# --pair-key: by model alone seed 2 joins (it differs from all 5 in seed):
# 9 + 5 pairs; by seed and threads, the 4 single-thread seed-1 runs less the
# rerun: 6 - 1
expect 0 "--pair-key model" -- "$DT" escape --pairs "$D" --pair-key model
has "$T/out" "key model: 1 group, 14 pairs$" "--pair-key model: 14 pairs"
has "$T/out" "runs/base/t01\.dtr +runs/base/t02\.dtr +seed 1\|2" "--pair-key model: the seeds pair"
expect 0 "--pair-key seed,threads" -- "$DT" escape --pairs "$D" --pair-key seed,threads
has "$T/out" "key seed,threads: 1 group, 5 pairs$" "--pair-key seed,threads: 5 pairs"
has "$T/out" "^  runs/thr2/t01\.dtr$" "--pair-key seed,threads: the two-thread run alone"

# a directory with a single pair: too few pairs for a correlation
mkdir -p "$T/two"
cp "$D/runs/base/t01.dtr" "$T/two/a.dtr"
cp "$D/runs/flip/t01.dtr" "$T/two/b.dtr"
expect 0 "one pair" -- "$DT" escape --pairs "$T/two"
has "$T/out" "^  first divergent step: +n 1, too few pairs$" "one pair: too few pairs"
has "$T/out" "^ +1  a\.dtr +b\.dtr +flip_bit .* 150 " "one pair: paths relative to DIR"

# png FILE NAME: FILE exists, is non-empty and starts with the PNG signature
png() {
    sig=$(head -c 8 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')
    if [ -s "$1" ] && [ "$sig" = "89504e470d0a1a0a" ]; then ok "$2"; else bad "$2 ($1: signature '$sig')"; fi
}
if command -v gnuplot >/dev/null 2>&1; then
    expect 0 "--pairs --plot" -- "$DT" escape --pairs "$D" --plot "$T/plots"
    png "$T/plots/pairs.png" "--pairs --plot: pairs.png is a PNG"
    has "$T/out" "^plot: $T/plots/pairs\.png$" "--pairs --plot: the path written"
    expect 0 "--pairs --json --plot" -- "$DT" escape --pairs "$D" --json --plot "$T/jplots"
    png "$T/jplots/pairs.png" "--pairs --json --plot: pairs.png"
    if ! command -v python3 >/dev/null 2>&1 || python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/out"; then
        ok "--pairs --json --plot: stdout holds only the JSON"
    else
        bad "--pairs --json --plot: stdout is not JSON"
    fi
    mkdir -p "$T/same"
    cp "$D/runs/base/t01.dtr" "$T/same/a.dtr"
    cp "$D/runs/ckpt/t01.dtr" "$T/same/b.dtr"
    expect 0 "--plot of pairs that never diverge" -- "$DT" escape --pairs "$T/same" --plot "$T/splots"
    has "$T/out" "^plot: $T/splots/pairs\.png skipped: " "--plot: no point, skipped with the reason"
else
    echo "gnuplot is not installed: skipping the --plot checks (install gnuplot-nox)"
fi

# trouble: exit 2, one line
expect 2 "--pairs of a missing directory" -- "$DT" escape --pairs "$T/nothing"
one_line "--pairs missing"
expect 2 "--pairs of a file" -- "$DT" escape --pairs "$D/runs/base/t01.dtr"
one_line "--pairs of a file"
mkdir -p "$T/empty/sub"
printf 'x' >"$T/empty/sub/a.txt"
expect 2 "--pairs of a directory without traces" -- "$DT" escape --pairs "$T/empty"
one_line "--pairs without traces"
has "$T/err" "no trace" "--pairs without traces: says so"
mkdir -p "$T/junk/runs/c"
cp "$D/runs/base/t01.dtr" "$T/junk/runs/c/t01.dtr"
printf 'not a trace at all\n' >"$T/junk/runs/c/t02.dtr"
expect 2 "--pairs with an unreadable trace" -- "$DT" escape --pairs "$T/junk"
one_line "--pairs unreadable trace"
has "$T/err" "t02\.dtr" "--pairs unreadable trace: names the file"
expect 2 "--pair-key with an empty key" -- "$DT" escape --pairs "$D" --pair-key model,,seed
one_line "--pair-key empty key"
expect 2 "--pair-key without --pairs" -- "$DT" escape --pair-key model "$D/runs/base/t01.dtr"
one_line "--pair-key without --pairs"
expect 2 "--pairs and a trace file" -- "$DT" escape --pairs "$D" "$D/runs/base/t01.dtr"
one_line "--pairs and a trace file"
expect 2 "--pairs and --curvature" -- "$DT" escape --pairs "$D" --curvature 100
one_line "--pairs and --curvature"
expect 2 "--pairs with a bad --window" -- "$DT" escape --pairs "$D" --window 2
one_line "--pairs bad --window"
mkdir "$T/nognuplot"
expect 2 "--pairs --plot without gnuplot" -- env PATH="$T/nognuplot" "$DT" escape --pairs "$D" --plot "$T/np"
one_line "--pairs --plot without gnuplot"
expect 0 "--help names --pairs and --pair-key" -- "$DT" escape --help
has "$T/out" "--pairs DIR" "--help: --pairs"
has "$T/out" "--pair-key K1,K2" "--help: --pair-key"

finish
