#!/bin/sh
# cli_grammar.sh: the rules every command follows (divtrace(1), CONVENTIONS),
# checked for every command that `divtrace --help` lists, not by example:
# -h/--help, -V/--version and -q/--quiet everywhere; --help and the man
# page's OPTIONS name the same long options; -q leaves standard output
# empty; --json replaces the text with one object that parses; trouble is
# exit 2 with exactly one line on stderr and nothing on stdout; a finding
# exits 1 (never 0), -q or not; success writes nothing on stderr; -o names
# the one thing a command creates, and only commands that create something
# take it; --steps counts steps; --progress gives plain lines ending in a
# "done:" line (DIVTRACE_PROGRESS_INTERVAL=0: a line at every update, so
# that the check waits on the command's end, not on time); --all and
# --verbose only add. Needs Debian's dataset-fashion-mnist and python3;
# divtrace run's cases need torch (skipped without it).
set -u
NAME=cli_grammar.sh
. "$(dirname "$0")/cli_lib.sh"
top=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
if ! command -v python3 >/dev/null 2>&1; then
    echo "$NAME: no python3 to parse JSON; skipping" >&2
    exit 77
fi

cmds=$("$DT" --help | awk '/^Commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }')
[ -n "$cmds" ] && ok "divtrace --help lists the commands: $(echo $cmds)" || bad "divtrace --help lists no command"
torch=0
python3 -c 'import torch' >/dev/null 2>&1 && [ -r "${DIVTRACE_LIB:-}" ] && torch=1
# an AddressSanitizer build's library cannot be loaded into python3 (its
# runtime must come first), as the PyTorch tests say too
if [ $torch -eq 1 ] && grep -aq '__asan_init' "$DIVTRACE_LIB" 2>/dev/null; then torch=0; fi
[ $torch -eq 1 ] || echo "# no torch, no DIVTRACE_LIB, or an AddressSanitizer build: divtrace run's cases are skipped"

# run CODE NAME -- COMMAND...: like expect, with out/err kept per case
run() {
    expect "$@"
}
# stdout_empty NAME / stderr_empty NAME
stdout_empty() { [ ! -s "$T/out" ] && ok "$1: nothing on stdout" || { bad "$1: stdout not empty"; head -3 "$T/out"; }; }
stderr_empty() { [ ! -s "$T/err" ] && ok "$1: nothing on stderr" || { bad "$1: stderr not empty"; head -3 "$T/err"; }; }
is_json() {
    if python3 -c 'import json,sys; json.load(sys.stdin)' <"$T/out" 2>/dev/null; then ok "$1: stdout is one JSON object"
    else bad "$1: stdout does not parse as JSON"; head -c 300 "$T/out"; echo; fi
}
# trouble NAME -- COMMAND...: exit 2, exactly one line on stderr, stdout empty
trouble() {
    name=$1
    shift 2
    expect 2 "$name: exit 2" -- "$@"
    one_line "$name"
    stdout_empty "$name"
}

# ---- fixtures: small traces, a study, a PyTorch run
R="$DT record -q --layers 784,8,784 --batch 10 --steps 4 --checkpoint-every 2"
$R -o "$T/a.dtr" && $R -o "$T/a2.dtr" && $R --inject enc1.sigmoid:formula -o "$T/bug.dtr" ||
    { bad "fixtures: record failed"; finish; exit 1; }
$R --flip-bit 2:enc1.W:0:3 -o "$T/flip.dtr" 2>/dev/null
[ -s "$T/flip.dtr" ] && ok "fixtures recorded" || bad "fixtures: no flip.dtr"
SPEC_COMMON="common --layers 784,8,784 --batch 10 --steps 3"
printf 'name ok\ntrials 1\n%s\ncondition one : --seed 1\n' "$SPEC_COMMON" >"$T/ok.sweep"
printf 'name carry\ntrials 1\n%s\ncondition rt : --inject *.W:roundtrip:bf16\n' "$SPEC_COMMON" >"$T/carry.sweep"
SCRIPT="$top/tests/torch/scripts/train_cases.py"

# ---- per command: a case that succeeds, a finding (exit 1) where the
# command has findings, and its operand missing. Each case is one line of
# arguments after the command's name; @OUT@ is the -o path of the case.
ok_args() {
    case $1 in
    record) echo "--layers 784,8,784 --batch 10 --steps 2 -o @OUT@" ;;
    show) echo "$T/a.dtr" ;;
    diff) echo "$T/a.dtr $T/a2.dtr" ;;
    explain) echo "$T/a.dtr $T/a2.dtr" ;;
    replay) echo "$T/a.dtr --step 1" ;;
    escape) echo "$T/a.dtr" ;;
    sweep) echo "$T/ok.sweep -o @OUT@" ;;
    report) echo "-o @OUT@ @STUDY@" ;;
    run) echo "-o @OUT@ --steps 2 -- python3 $SCRIPT --steps 3" ;;
    *) echo "" ;;
    esac
}
finding_args() {
    case $1 in
    record) echo "--layers 784,8,784 --batch 10 --steps 3 --inject enc1.W:roundtrip:bf16 -o @OUT@" ;;
    diff) echo "$T/a.dtr $T/flip.dtr" ;;
    explain) echo "$T/a.dtr $T/bug.dtr" ;;
    replay) echo "$T/bug.dtr --step 1 --against mpfr" ;;
    sweep) echo "$T/carry.sweep -o @OUT@" ;;
    *) echo "" ;;
    esac
}
missing_args() {
    case $1 in
    record) echo "--layers 784,8,784 --steps 2" ;;          # no -o
    replay) echo "$T/a.dtr" ;;                               # no --step
    diff | explain) echo "$T/a.dtr" ;;                       # one trace
    sweep) echo "$T/ok.sweep" ;;                             # no -o
    *) echo "" ;;                                            # no operand
    esac
}
# where the success case does not create the -o path
output_args() {
    case $1 in
    show) echo "--step 2 --export enc1.W -o @OUT@ $T/a.dtr" ;;
    *) echo "" ;;
    esac
}
nofile_args() {
    case $1 in
    record) echo "--data $T/nodata --steps 2 -o $T/x.dtr" ;;
    show | escape) echo "$T/none.dtr" ;;
    diff | explain) echo "$T/a.dtr $T/none.dtr" ;;
    replay) echo "$T/none.dtr --step 1" ;;
    sweep) echo "$T/none.sweep -o $T/x" ;;
    report) echo "$T/nodir" ;;
    run) echo "-o $T/x.dtr -- python3 $T/none.py" ;;
    esac
}
# subst ARGS: a fresh -o path (counted in a file: subst runs in $(...)),
# and the study the sweep made; outpath: the last -o path
echo 0 >"$T/n"
subst() {
    k=$(($(cat "$T/n") + 1))
    echo $k >"$T/n"
    echo "$1" | sed -e "s|@OUT@|$T/o$k|" -e "s|@STUDY@|$T/study|"
}
outpath() { echo "$T/o$(cat "$T/n")"; }
skip_run() { [ "$1" = run ] && [ $torch -eq 0 ]; }

"$DT" sweep -q "$T/ok.sweep" -o "$T/study" && ok "the study for report" || bad "the study for report: sweep failed"

for c in $cmds; do
    echo "## divtrace $c"
    page="$top/man/divtrace-$c.1"
    # -h, --help, -V, --version
    for h in -h --help; do
        run 0 "$c $h" -- "$DT" $c $h
        has "$T/out" "^Usage: divtrace $c" "$c $h: the usage on stdout"
        stderr_empty "$c $h"
    done
    run 0 "$c -q --help" -- "$DT" $c -q --help
    for v in -V --version; do
        run 0 "$c $v" -- "$DT" $c $v
        [ "$(wc -l <"$T/out")" -eq 1 ] && ok "$c $v: one line" || bad "$c $v: not one line"
    done
    "$DT" $c --help >"$T/help"
    # --help and the page's OPTIONS list the same long options (the help's
    # option lines; the page's .TP tags, groff's \- read as -)
    grep -oE '^ {2,6}(-[A-Za-z0-9], )?--[a-z][a-z0-9-]*' "$T/help" | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u >"$T/help.opts"
    sed 's/\\-/-/g' "$page" | awk '/^\.SH OPTIONS/ { on = 1; next } /^\.SH/ { on = 0 } on && prev ~ /^\.TP/ { print } { prev = $0 }' |
        grep -oE -- '--[a-z][a-z0-9-]*' | sort -u >"$T/man.opts"
    if cmp -s "$T/help.opts" "$T/man.opts"; then
        ok "$c: --help and divtrace-$c(1) list the same $(wc -l <"$T/help.opts") long options"
    else
        bad "$c: --help and divtrace-$c(1) list other options (< help, > man)"; diff "$T/help.opts" "$T/man.opts" | grep '^[<>]'
    fi
    for o in --help --version --quiet; do
        grep -qx -- "$o" "$T/help.opts" && ok "$c lists $o" || bad "$c --help does not list $o"
    done
    grep -qE '^  -q, --quiet' "$T/help" && ok "$c: -q is --quiet" || bad "$c: no -q, --quiet"
    # -o is --output, and only where the command creates something
    if grep -qx -- --output "$T/help.opts"; then
        grep -qE '^  -o, --output' "$T/help" && ok "$c: -o is --output" || bad "$c: --output without -o"
    elif [ "$c" != run ]; then
        trouble "$c -o (it creates nothing)" -- "$DT" $c -o "$T/x" $(echo "$(ok_args $c)" | sed "s|@OUT@|$T/x|")
    fi

    # trouble: a bad option, a missing operand, a missing file
    if ! skip_run $c; then
        trouble "$c --no-such-option" -- "$DT" $c --no-such-option $(subst "$(ok_args $c)")
        trouble "$c without its operand" -- "$DT" $c $(missing_args $c)
        trouble "$c of a missing file" -- "$DT" $c $(nofile_args $c)
    fi

    skip_run $c && { echo "# skip: $c's cases need torch"; continue; }
    # success: exit 0, nothing on stderr; -q: nothing on stdout
    args=$(subst "$(ok_args $c)")
    run 0 "$c: success" -- "$DT" $c $args
    if [ "$c" = run ]; then
        # stdout is the script's: divtrace run's notes go to stderr
        if grep -qv '^divtrace run: ' "$T/err"; then bad "$c: success: other text on stderr"; else ok "$c: success: its notes on stderr"; fi
    else
        stderr_empty "$c: success (not a terminal, no --progress)"
    fi
    if grep -qx -- --output "$T/help.opts"; then
        oa=$(output_args $c)
        if [ -n "$oa" ]; then
            run 0 "$c -o: success" -- "$DT" $c $(subst "$oa")
        fi
        [ -e "$(outpath)" ] && ok "$c -o: $(outpath) created" || bad "$c -o: $(outpath) not created"
    fi
    args=$(subst "$(ok_args $c)")
    if [ "$c" = run ]; then
        run 0 "$c -q: success" -- "$DT" $c -q $args
        if grep -q '^divtrace' "$T/out" "$T/err"; then bad "$c -q: divtrace's own notes"; else ok "$c -q: only the script's output"; fi
    else
        run 0 "$c -q: success" -- "$DT" $c -q $args
        stdout_empty "$c -q"
    fi
    # --json: one object on stdout, -q: nothing
    if grep -qx -- --json "$T/help.opts"; then
        run 0 "$c --json" -- "$DT" $c --json $(subst "$(ok_args $c)")
        is_json "$c --json"
        run 0 "$c --json -q" -- "$DT" $c --json -q $(subst "$(ok_args $c)")
        stdout_empty "$c --json -q"
    fi
    # --progress: plain lines, the last one "done:", also with -q
    if grep -qx -- --progress "$T/help.opts"; then
        DIVTRACE_PROGRESS_INTERVAL=0 run 0 "$c --progress" -- "$DT" $c --progress $(subst "$(ok_args $c)")
        has "$T/err" "^divtrace $c: " "$c --progress: lines on stderr"
        tail -n 1 "$T/err" >"$T/last"
        has "$T/last" "^divtrace $c: done: " "$c --progress: the last line says done"
        if grep -v "^divtrace [a-z]*: " "$T/err" | grep -q .; then bad "$c --progress: other text on stderr"; grep -v "^divtrace [a-z]*: " "$T/err" | head -3
        else ok "$c --progress: plain lines only (no \\r)"; fi
        if grep -q "$(printf '\r')" "$T/err"; then bad "$c --progress: a carriage return"; else ok "$c --progress: no carriage return"; fi
        DIVTRACE_PROGRESS_INTERVAL=0 run 0 "$c -q --progress" -- "$DT" $c -q --progress $(subst "$(ok_args $c)")
        stdout_empty "$c -q --progress"
        tail -n 1 "$T/err" >"$T/last"
        has "$T/last" "^divtrace $c: done: " "$c -q --progress: progress all the same"
    fi
    # a finding: exit 1, with and without -q (-q: nothing on stdout)
    fa=$(finding_args $c)
    if [ -n "$fa" ]; then
        run 1 "$c: a finding" -- "$DT" $c $(subst "$fa")
        run 1 "$c -q: a finding" -- "$DT" $c -q $(subst "$fa")
        stdout_empty "$c -q: a finding"
        if grep -qx -- --json "$T/help.opts"; then
            run 1 "$c --json: a finding" -- "$DT" $c --json $(subst "$fa")
            is_json "$c --json: a finding"
        fi
    fi
done

# ---- --steps is a count of steps everywhere
run 0 "record --steps 3" -- $R --steps 3 -o "$T/s3.dtr"
run 0 "show it" -- "$DT" show --summary "$T/s3.dtr"
has "$T/out" "^# steps 3," "record --steps 3: a trace of 3 steps"
[ "$(grep -c '^step ' "$T/out")" -eq 3 ] && ok "record --steps 3: steps 0 to 2" || bad "record --steps 3: not 3 step lines"
run 0 "replay --step 1 --steps 2" -- "$DT" replay "$T/s3.dtr" --step 1 --steps 2
has "$T/out" ": steps 1 to 2 replayed" "replay --step 1 --steps 2: steps 1 to 2"

# ---- --verbose and --all only add
run 0 "diff" -- "$DT" diff "$T/a.dtr" "$T/a2.dtr"
[ "$(wc -l <"$T/out")" -eq 1 ] && ok "diff of identical traces: one line" || bad "diff of identical traces: $(wc -l <"$T/out") lines"
run 1 "diff, different" -- "$DT" diff "$T/a.dtr" "$T/flip.dtr"
cp "$T/out" "$T/short"
has "$T/short" "^next: divtrace explain " "diff, different: the next command"
run 1 "diff -v, different" -- "$DT" diff -v "$T/a.dtr" "$T/flip.dtr"
[ "$(wc -l <"$T/out")" -ge "$(wc -l <"$T/short")" ] && ok "diff -v: at least the default's lines" || bad "diff -v: shorter than the default"
for c in replay explain; do
    if [ $c = replay ]; then a="$T/a.dtr --step 1 --against mpfr"; else a="$T/a.dtr $T/bug.dtr"; fi
    expect_rc=0; [ $c = explain ] && expect_rc=1
    run $expect_rc "$c" -- "$DT" $c $a
    cp "$T/out" "$T/short"
    has "$T/short" "not listed: [0-9]+ .*\(--all lists them\)" "$c: says how many ops it left out"
    run $expect_rc "$c --all" -- "$DT" $c --all $a
    if grep -q "not listed" "$T/out"; then bad "$c --all: still leaves ops out"; else ok "$c --all: lists every op"; fi
    [ "$(wc -l <"$T/out")" -gt "$(wc -l <"$T/short")" ] && ok "$c --all: more lines" || bad "$c --all: not more lines"
done

finish
