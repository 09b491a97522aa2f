#!/bin/sh
# cli_html.sh: the HTML pages of `divtrace diff --html` and `divtrace report
# --html`, loaded in headless Chromium (tests/lib/html_check.py drives it
# over the DevTools protocol): two autoencoder runs that part at step 5 (a
# bit flipped in enc1.W), two PredNet runs that part in time step 2 of
# layer 1 (a fault injected into L1.t02.conv_f), with explain's verdict run
# by the page and read from a saved explain --json, and a study of the
# first pair. Each page must load with no error, hold a heatmap cell for
# every step, layer (and time step) with records, marked as `divtrace show
# --json` and `divtrace diff --json` say, and show the first divergent op's
# records when its cell is clicked. The pages must name no URL; a page that
# throws or fetches must fail the checker; bad input is trouble (exit 2,
# one line) that leaves no page. Skips (77) without chromium or python3.
set -u
NAME=cli_html.sh
CHROMIUM=${CHROMIUM:-}
if [ -z "$CHROMIUM" ]; then
    for c in chromium chromium-browser google-chrome; do
        if command -v "$c" >/dev/null 2>&1; then CHROMIUM=$(command -v "$c"); break; fi
    done
fi
if [ -z "$CHROMIUM" ]; then
    echo "$NAME: skipped: no chromium (apt-get install chromium)"
    exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "$NAME: skipped: no python3"
    exit 77
fi
. "$(dirname "$0")/cli_lib.sh"
CHECK="python3 ${top_srcdir:-$(dirname "$0")/..}/tests/lib/html_check.py $CHROMIUM"

# check PAGE-SPEC...: the checker's lines become this test's
check() {
    $CHECK "$@" >"$T/check.out" 2>&1
    rc=$?
    cat "$T/check.out"
    pass=$((pass + $(grep -c '^ok - ' "$T/check.out")))
    nf=$(grep -c '^FAIL - ' "$T/check.out")
    fail=$((fail + nf))
    if [ "$rc" -ne 0 ] && [ "$nf" -eq 0 ]; then bad "the checker failed (exit $rc)"; fi
}
# no_url PAGE: the page names no URL and loads nothing
no_url() {
    url='(^|[^a-z])(https?|ftp|wss?|file):|//[a-z0-9-]+\.[a-z]|url\(|@import|<link|<img|<iframe| src=| href='
    if grep -Eiq "$url" "$1"; then
        bad "$(basename "$1"): names a URL or loads something: $(grep -Eio "$url" "$1" | head -3)"
    else
        ok "$(basename "$1"): no URL, nothing loaded"
    fi
}

# ---- two autoencoder runs: a bit of enc1.W flipped at step 5 ----
R="$DT record -q --steps 20 --layers 784,16,784 --checkpoint-every 5"
expect 0 "record A" -- $R -o "$T/a.dtr"
expect 1 "record B (bit flip at step 5: a carry fault, exit 1)" -- $R --flip-bit 5:enc1.W:3:22 -o "$T/b.dtr"
"$DT" diff "$T/a.dtr" "$T/b.dtr" >"$T/plain.txt" 2>&1
expect 1 "diff --html: exit 1, as without --html" -- "$DT" diff --html "$T/ae.html" "$T/a.dtr" "$T/b.dtr"
cmp -s "$T/out" "$T/plain.txt" && ok "diff --html: the same text on stdout" || bad "diff --html: the text differs"
[ -s "$T/ae.html" ] && ok "diff --html: the page is written" || bad "diff --html: no page"
no_url "$T/ae.html"
expect 1 "diff --json" -- "$DT" diff --json "$T/a.dtr" "$T/b.dtr"
cp "$T/out" "$T/ae.diff.json"
expect 0 "show --json A" -- "$DT" show --json "$T/a.dtr"
cp "$T/out" "$T/a.json"
expect 0 "show --json B" -- "$DT" show --json "$T/b.dtr"
cp "$T/out" "$T/b.json"
expect 1 "diff --html --explain: exit 1" -- "$DT" diff -q --html "$T/ex.html" --explain "$T/a.dtr" "$T/b.dtr"
expect 1 "explain --json (a bug: enc1.W changed between steps)" -- "$DT" explain --json "$T/a.dtr" "$T/b.dtr"
cp "$T/out" "$T/explain.json"
expect 1 "diff --html --explain-json" -- "$DT" diff -q --html "$T/exj.html" --explain-json "$T/explain.json" "$T/a.dtr" "$T/b.dtr"
# a path with '<' and "</script>" in it must not end the page's script
mkdir -p "$T/<"
cp "$T/b.dtr" "$T/</script><b>b.dtr"
expect 1 "diff --html of a path holding </script>" -- "$DT" diff -q --html "$T/lt.html" "$T/a.dtr" "$T/</script><b>b.dtr"
n=$(grep -o '</script>' "$T/lt.html" | wc -l)
[ "$n" -eq 2 ] && ok "the path's </script> is escaped" || bad "$n </script> in the page, 2 wanted"

# ---- two PredNet runs: a fault in layer 1, time step 2 ----
P="$DT record -q --model prednet --stack 1,4 --size 32x32 --nt 4 --steps 6 --batch 2 --checkpoint-every 2"
expect 0 "record PredNet A" -- $P -o "$T/pa.dtr"
expect 0 "record PredNet B (L1.t02.conv_f:bitflip)" -- $P --inject 'L1.t02.conv_f:bitflip' -o "$T/pb.dtr"
expect 1 "PredNet: diff --html" -- "$DT" diff -q --html "$T/pn.html" "$T/pa.dtr" "$T/pb.dtr"
no_url "$T/pn.html"
"$DT" diff --json "$T/pa.dtr" "$T/pb.dtr" >"$T/pn.diff.json"
"$DT" show --json "$T/pa.dtr" >"$T/pa.json"
"$DT" show --json "$T/pb.dtr" >"$T/pb.json"
has "$T/pn.diff.json" '"time_step": 2' "PredNet: diff --json names time step 2"

# ---- a study of the first pair ----
S="$T/study"
mkdir -p "$S/runs/base" "$S/runs/flip"
cp "$T/a.dtr" "$S/runs/base/t01.dtr"
cp "$T/b.dtr" "$S/runs/flip/t01.dtr"
cat >"$S/sweep.spec" <<'EOF'
name tiny
common --layers 784,16,784 --steps 20 --checkpoint-every 5
condition base :
condition flip : --flip-bit 5:enc1.W:3:22
pair cond=base cond=flip
EOF
expect 0 "report --html" -- "$DT" report --no-replay --html "$T/study.html" "$S"
has "$T/out" "^wrote $T/study.html$" "report --html: says so"
no_url "$T/study.html"

# the study again without its traces: the pair from its summary alone
S2="$T/study2"
mkdir -p "$S2/runs"
cp "$S/sweep.spec" "$S2/"
cp -r "$S/summary" "$S2/"
expect 0 "report --html from the summaries alone" -- "$DT" report -q --no-replay --html "$T/study2.html" "$S2"
no_url "$T/study2.html"

# ---- in the browser ----
A="diff=$T/ae.diff.json,a=$T/a.json,b=$T/b.json"
check "page=$T/ae.html,$A,ckpt=1" "page=$T/ex.html,$A,verdict=bug" "page=$T/exj.html,$A,verdict=bug" \
    "page=$T/lt.html,$A" "page=$T/pn.html,diff=$T/pn.diff.json,a=$T/pa.json,b=$T/pb.json" \
    "page=$T/study.html,$A,pair=0,ckpt=1,verdict=bug" \
    "page=$T/study2.html,$A,pair=0,verdict=bug,nogrid=1,text=the traces of this pair are not in the study directory"

# the checker fails a page that throws, and one that fetches
sed 's/"grid": {/"grxd": {/' "$T/ae.html" >"$T/throws.html"
sed 's|<div id="app"></div>|<div id="app"></div><img alt="" src="http://127.0.0.1:9/x.png">|' "$T/ae.html" >"$T/fetches.html"
$CHECK "page=$T/throws.html,$A" "page=$T/fetches.html,$A" >"$T/neg.out" 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "^FAIL - throws.html: no error box" "$T/neg.out" &&
    grep -q "^FAIL - fetches.html: no exception or console error" "$T/neg.out"; then
    ok "the checker fails a page that throws and a page that fetches"
else
    bad "the checker let a broken page pass (exit $rc)"
    sed "s/^/    /" "$T/neg.out" | grep "FAIL - fetches\|FAIL - throws.html: no e"
fi

# ---- trouble: one line, exit 2, no page ----
expect 2 "an unwritable --html path" -- "$DT" diff --html "$T/none/x.html" "$T/a.dtr" "$T/b.dtr"
one_line "an unwritable --html path"
[ ! -e "$T/none" ] && ok "no page" || bad "something was written"
cp "$T/ae.html" "$T/keep.html"
expect 2 "a missing trace" -- "$DT" diff --html "$T/keep.html" "$T/a.dtr" "$T/missing.dtr"
one_line "a missing trace"
cmp -s "$T/ae.html" "$T/keep.html" && ok "the page there is left as it was" || bad "the page there was changed"
echo '{"not": "explain"}' >"$T/notex.json"
expect 2 "--explain-json of something else" -- "$DT" diff --html "$T/bad.html" --explain-json "$T/notex.json" "$T/a.dtr" "$T/b.dtr"
one_line "--explain-json of something else"
has "$T/err" "not the output of divtrace explain --json" "--explain-json: says why"
set -- "$T"/bad.html*
[ ! -e "$1" ] && ok "no page and no temporary file left" || bad "left: $*"
cp "$T/a.dtr" "$T/a2.dtr"
expect 2 "--html naming one of the traces" -- "$DT" diff --html "$T/a2.dtr" "$T/a2.dtr" "$T/b.dtr"
one_line "--html naming one of the traces"
cmp -s "$T/a.dtr" "$T/a2.dtr" && ok "the trace is left as it was" || bad "the trace was overwritten"
expect 2 "--explain without --html" -- "$DT" diff --explain "$T/a.dtr" "$T/b.dtr"
one_line "--explain without --html"
expect 2 "--html with --reference" -- "$DT" diff --html "$T/r.html" --reference "$T/a.dtr" "$T/b.dtr"
one_line "--html with --reference"
expect 2 "report --html to an unwritable path" -- "$DT" report -q --no-replay --html "$T/none/s.html" "$S"
one_line "report --html to an unwritable path"

finish
