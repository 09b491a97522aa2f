#!/bin/sh
# cli_sweep.sh: end-to-end tests of `divtrace sweep`: a 2x2 sweep of tiny
# autoencoder runs on the CPU with -j2 (traces checked by show and diff
# against a plain `divtrace record` of the same options), --list, a sweep
# killed mid-run (SIGKILL) and resumed (finished trials untouched), SIGTERM,
# a failing trial, --only, --emit make (make -n, then make -j2 gives the same
# traces) and --emit slurm (bash -n, one array task per trial), conditions
# named FACTOR=LEVEL (runs/threads=1), record options checked before any
# trial starts (a typo: exit 2, one line naming condition and option,
# nothing written), and the refusals (exit 2, one line). Needs Debian's
# dataset-fashion-mnist.
set -u
NAME=cli_sweep.sh
. "$(dirname "$0")/cli_lib.sh"

# stamp FILE: inode and modification time (nanoseconds)
stamp() { stat -c '%i %y' "$1" 2>/dev/null | tr ' ' _; }
# count_files DIR PATTERN: how many files under DIR match the name pattern
count_files() { find "$1" -name "$2" -type f 2>/dev/null | wc -l; }

cat >"$T/s.sweep" <<'EOF'
# two thread counts x two trials of a tiny autoencoder
name tiny
trials 2
common --layers 784,8,784 --steps 20 --seed {trial}   # data order varies by trial
factor threads 1 : --threads 1
factor threads 2 : --threads 2
compare threads=1 threads=2
pair threads=1 threads=2
EOF

# ---- a whole sweep, -j2 ----
expect 0 "sweep -j2 of 2 conditions x 2 trials" -- "$DT" sweep "$T/s.sweep" -o "$T/d" -j2
has "$T/out" "^sweep tiny: 4 of 4 trials done \(4 run now, 0 kept\) in [0-9.]+ s: $T/d/runs$" "the summary line"
[ ! -s "$T/err" ] && ok "nothing on stderr (not a terminal: no progress line)" || { bad "stderr not empty"; cat "$T/err"; }
for c in 1 2; do
    for t in 1 2; do
        f="$T/d/runs/threads=$c/t0$t.dtr"
        expect 0 "show runs/threads=$c/t0$t.dtr" -- "$DT" show --summary "$f"
        has "$T/out" "^# complete" "runs/threads=$c/t0$t.dtr is complete"
        has "$T/out" "^# steps 20," "runs/threads=$c/t0$t.dtr has 20 steps"
        has "$T/out" "^# threads = $c$" "runs/threads=$c/t0$t.dtr ran on $c threads"
        has "$T/out" "^# seed = $t$" "runs/threads=$c/t0$t.dtr has seed $t ({trial})"
        [ -f "$T/d/runs/threads=$c/t0$t.log" ] && ok "runs/threads=$c/t0$t.log kept" || bad "no runs/threads=$c/t0$t.log"
    done
done
[ "$(count_files "$T/d" '*.part')" -eq 0 ] && ok "no .part left" || bad ".part files left"
cmp -s "$T/s.sweep" "$T/d/sweep.spec" && ok "DIR/sweep.spec is the sweep file" || bad "DIR/sweep.spec differs"
# the same trial recorded by hand is bitwise the same run
"$DT" record -q --layers 784,8,784 --steps 20 --seed 2 --threads 2 -o "$T/hand.dtr" 2>/dev/null
expect 0 "a trial equals record with the same options" -- "$DT" diff "$T/hand.dtr" "$T/d/runs/threads=2/t02.dtr"
expect 1 "trials 1 and 2 differ (seed {trial})" -- "$DT" diff "$T/d/runs/threads=1/t01.dtr" "$T/d/runs/threads=1/t02.dtr"

# ---- --list, and a rerun that keeps everything ----
expect 0 "--list" -- "$DT" sweep "$T/s.sweep" -o "$T/d" --list
n=$(grep -c " done " "$T/out")
[ "$n" -eq 4 ] && ok "--list: 4 trials done" || bad "--list: $n done"
has "$T/out" "^threads=1 +t02 done +divtrace record --layers 784,8,784 --steps 20 --seed 2 --threads 1 -o $T/d/runs/threads=1/t02\.dtr$" "--list: condition (FACTOR=LEVEL), trial, status, command"
expect 0 "--list of a directory not yet made" -- "$DT" sweep "$T/s.sweep" -o "$T/none" --list
n=$(grep -c " pending " "$T/out")
[ "$n" -eq 4 ] && ok "--list: 4 pending" || bad "--list: $n pending"
[ ! -e "$T/none" ] && ok "--list writes nothing" || bad "--list created $T/none"
s1=$(stamp "$T/d/runs/threads=1/t01.dtr")
expect 0 "rerun of a finished sweep" -- "$DT" sweep "$T/s.sweep" -o "$T/d"
has "$T/out" "\(0 run now, 4 kept\)" "rerun: all 4 kept"
[ "$(stamp "$T/d/runs/threads=1/t01.dtr")" = "$s1" ] && ok "rerun: trace untouched" || bad "rerun rewrote a trace"

# ---- killed and resumed ----
cat >"$T/k.sweep" <<'EOF'
trials 2
common --layers 784,8,784 --steps 1500 --seed {trial}
condition a : --threads 1
condition b : --threads 1 --lr 2
EOF
"$DT" sweep "$T/k.sweep" -o "$T/k" -j1 >/dev/null 2>&1 &
pid=$!
i=0
while [ ! -f "$T/k/runs/a/t01.dtr" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
# wait until the next trial is in flight, then kill the sweep outright
i=0
while [ ! -f "$T/k/runs/a/t02.dtr.part" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
kill -KILL $pid
wait $pid 2>/dev/null
sleep 0.5
done_before=$(count_files "$T/k/runs" '*.dtr')
[ "$done_before" -ge 1 ] && [ "$done_before" -lt 4 ] && ok "killed mid-run with $done_before of 4 done" || bad "killed with $done_before of 4 done"
before=""
for f in "$T"/k/runs/*/*.dtr; do before="$before $f=$(stamp "$f")"; done
expect 0 "resume the killed sweep" -- "$DT" sweep "$T/k.sweep" -o "$T/k" -j2
has "$T/out" "^sweep sweep: 4 of 4 trials done \($((4 - done_before)) run now, $done_before kept\)" "resume: the finished trials kept, the rest run"
same=1
for e in $before; do
    f=${e%%=*}
    [ "$f=$(stamp "$f")" = "$e" ] || same=0
done
[ $same -eq 1 ] && ok "resume: finished traces untouched (inode, mtime)" || bad "resume rewrote a finished trace"
[ "$(count_files "$T/k/runs" '*.dtr')" -eq 4 ] && ok "resume: 4 traces" || bad "resume: not 4 traces"
[ "$(count_files "$T/k" '*.part')" -eq 0 ] && ok "resume: no .part left" || bad "resume: .part left"
expect 0 "a resumed trial is complete" -- "$DT" show --summary "$T/k/runs/b/t02.dtr"
has "$T/out" "^# complete" "the resumed trial's trace is complete"

# SIGTERM: the trials in flight are stopped, their .part removed, exit 143
rm -rf "$T/k/runs/b"
"$DT" sweep "$T/k.sweep" -o "$T/k" -j2 >/dev/null 2>"$T/term.err" &
pid=$!
i=0
while [ "$(count_files "$T/k/runs/b" '*.part')" -lt 2 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 143 ] && ok "SIGTERM: dies of the signal (143)" || bad "SIGTERM: exit $rc, wanted 143"
[ "$(count_files "$T/k" '*.part')" -eq 0 ] && ok "SIGTERM: .part files removed" || bad "SIGTERM: .part files left"
has "$T/term.err" "^divtrace sweep: interrupted: 2 trials done" "SIGTERM: says so"
[ "$(count_files "$T/k/runs/a" '*.dtr')" -eq 2 ] && ok "SIGTERM: other traces kept" || bad "SIGTERM: traces lost"

# ---- a failing trial; --only ----
cat >"$T/f.sweep" <<'EOF'
common --steps 5 --layers 784,8,784
condition good group=ok : --threads 1
condition bad group=broken : --threads 1 --data /nonexistent/dir
EOF
expect 2 "a failing trial: exit 2" -- "$DT" sweep "$T/f.sweep" -o "$T/f" -j2
has "$T/err" "^divtrace sweep: 1 of 2 trials failed: see $T/f/runs/bad/t01\.log$" "the summary names the log"
[ -s "$T/f/runs/bad/t01.log" ] && ok "the failed trial's log is kept" || bad "no log of the failed trial"
has "$T/f/runs/bad/t01.log" "nonexistent" "the log says why"
[ ! -e "$T/f/runs/bad/t01.dtr" ] && [ ! -e "$T/f/runs/bad/t01.dtr.part" ] && ok "no trace of the failed trial" || bad "a trace of the failed trial"
[ -f "$T/f/runs/good/t01.dtr" ] && ok "the other trial ran" || bad "the other trial did not run"
expect 0 "--only group=ok" -- "$DT" sweep "$T/f.sweep" -o "$T/f" --only group=ok
has "$T/out" "1 of 1 trials done \(0 run now, 1 kept\)" "--only: only the picked condition"
expect 0 "--only into another directory" -- "$DT" sweep "$T/f.sweep" -o "$T/f2" --only group=ok -q
[ ! -s "$T/out" ] && ok "-q: no summary" || bad "-q printed something"
[ -f "$T/f2/runs/good/t01.dtr" ] && [ ! -e "$T/f2/runs/bad" ] && ok "--only ran only group=ok" || bad "--only ran other conditions"

# ---- --emit make ----
expect 0 "--emit make" -- "$DT" sweep "$T/s.sweep" -o "$T/m" --emit make
has "$T/out" "^wrote $T/m/Makefile: 4 trials" "--emit make says where"
n=$(grep -c '^runs/threads\$(EQ)[12]/t0[12]\.dtr:$' "$T/m/Makefile")
[ "$n" -eq 4 ] && ok "--emit make: one target per trial" || bad "--emit make: $n targets"
if command -v make >/dev/null 2>&1; then
    expect 0 "make -n -C DIR" -- make -n -C "$T/m"
    expect 0 "make -j2 -C DIR" -- make -j2 -C "$T/m"
    for c in 1 2; do
        for t in 1 2; do
            expect 0 "make's runs/threads=$c/t0$t.dtr equals the sweep's" -- "$DT" diff "$T/m/runs/threads=$c/t0$t.dtr" "$T/d/runs/threads=$c/t0$t.dtr"
        done
    done
    expect 0 "make again: nothing to do" -- make -C "$T/m"
    has "$T/out" "Nothing to be done|is up to date" "make: the traces are up to date"
else
    echo "# make not found: --emit make only written"
fi

# ---- --emit slurm ----
expect 0 "--emit slurm" -- "$DT" sweep "$T/s.sweep" -o "$T/sl" --emit slurm
expect 0 "sweep.slurm passes bash -n" -- bash -n "$T/sl/sweep.slurm"
has "$T/sl/sweep.slurm" "^#SBATCH --array=0-3$" "--array=0-3 for 4 trials"
n=$(grep -Ec '^[0-9]+\) trial=runs/' "$T/sl/sweep.slurm")
[ "$n" -eq 4 ] && ok "one case branch per trial" || bad "$n case branches"
# task 3 runs the fourth trial: run it through a stand-in divtrace that
# prints its arguments
printf '#!/bin/sh\necho "$@" >"%s/args"\n' "$T" >"$T/fake"
chmod +x "$T/fake"
SLURM_ARRAY_TASK_ID=3 DIVTRACE="$T/fake" bash "$T/sl/sweep.slurm" 2>/dev/null
has "$T/args" "^record --layers 784,8,784 --steps 20 --seed 2 --threads 2 -o $T/sl/runs/threads=2/t02\.dtr\.part$" "array task 3 records trial 2 of condition threads=2"

# ---- a trial with a carry fault (record exits 1, its trace complete) is kept ----
cat >"$T/c.sweep" <<'EOF'
name carry
trials 1
common --layers 784,8,784 --steps 6
factor fault none : --seed 1
factor fault rt : --inject *.W:roundtrip:bf16
EOF
expect 1 "a sweep with a carry fault in one condition: exit 1 (a finding)" -- "$DT" sweep "$T/c.sweep" -o "$T/c"
has "$T/err" "runs/fault=rt/t01: a carry fault \(record exited 1; the trace is kept\)" "the carry fault is said"
[ -f "$T/c/runs/fault=rt/t01.dtr" ] && ok "its trace is kept" || bad "the carry fault's trace was dropped"
has "$T/err" "^divtrace sweep: 1 of 2 trials recorded a carry fault .*the first runs/fault=rt/t01" "the finding is named in one line"
expect 1 "the sweep again: the kept trial's carry fault is still a finding" -- "$DT" sweep "$T/c.sweep" -o "$T/c"
has "$T/err" "^divtrace sweep: 1 of 2 trials recorded a carry fault .*the first runs/fault=rt/t01" "the rerun names it too"
expect 1 "explain names it" -- "$DT" explain "$T/c/runs/fault=none/t01.dtr" "$T/c/runs/fault=rt/t01.dtr"
has "$T/out" "^bug in B: enc1\.W changed between steps 0 and 1" "the kept trace explains"
if command -v make >/dev/null 2>&1; then
    expect 0 "--emit make of it" -- "$DT" sweep "$T/c.sweep" -o "$T/cm" --emit make
    expect 0 "make keeps the carry fault's trace" -- make -C "$T/cm"
    [ -f "$T/cm/runs/fault=rt/t01.dtr" ] && ok "make: the trace is there" || bad "make: no trace"
fi
expect 0 "--emit slurm of it" -- "$DT" sweep "$T/c.sweep" -o "$T/cs" --emit slurm
expect 0 "the array task of the carry fault" -- env SLURM_ARRAY_TASK_ID=1 DIVTRACE="$DT" WORKDIR="$T" bash "$T/cs/sweep.slurm"
[ -f "$T/cs/runs/fault=rt/t01.dtr" ] && ok "slurm: the trace is kept" || bad "slurm: no trace"

# ---- record options checked before any trial starts ----
cat >"$T/typo.sweep" <<'EOF'
trials 2
common --layers 784,8,784 --steps 5 --thraeds 1
factor threads 1 : --threads 1
factor threads 2 : --threads 2
EOF
expect 2 "a typo in the common line" -- "$DT" sweep "$T/typo.sweep" -o "$T/typo" -j2
one_line "a typo in the common line"
has "$T/err" "^divtrace sweep: $T/typo\.sweep: condition 'threads=1': unknown record option '--thraeds'$" "the typo: condition and option named"
[ ! -e "$T/typo" ] && ok "the typo: no trial started, nothing written" || bad "the typo: $T/typo was made"
expect 2 "the typo, --emit make" -- "$DT" sweep "$T/typo.sweep" -o "$T/typo" --emit make
[ ! -e "$T/typo" ] && ok "the typo: no Makefile of failing trials" || bad "the typo: --emit wrote $T/typo"
printf 'common --layers 784,8,784 --steps 5\ncondition a : --threads 1\ncondition b : --threads 0\n' >"$T/val.sweep"
expect 2 "a bad value in the second condition" -- "$DT" sweep "$T/val.sweep" -o "$T/val"
one_line "a bad value"
has "$T/err" "^divtrace sweep: $T/val\.sweep: condition 'b': --threads '0': expected an integer from 1 to 1024$" "the bad value: condition, option and value named"
[ ! -e "$T/val" ] && ok "the bad value: the first condition did not start either" || bad "the bad value: $T/val was made"
expect 0 "--only the good condition" -- "$DT" sweep "$T/val.sweep" -o "$T/val" --only cond=a -q
[ -f "$T/val/runs/a/t01.dtr" ] && ok "--only: the good condition ran" || bad "--only: no trace of the good condition"
printf 'trials 3\ncommon --layers 784,8,784 --steps 5 --threads 10{trial}0\n' >"$T/trial.sweep"
expect 2 "a value bad in one trial only ({trial})" -- "$DT" sweep "$T/trial.sweep" -o "$T/trial"
has "$T/err" "^divtrace sweep: $T/trial\.sweep: condition 'run', trial 3: --threads '1030': expected an integer from 1 to 1024$" "{trial}: the trial named"
for opt in "--steps" "--help" "extra" "-x"; do
    printf 'common --layers 784,8,784 --steps 5 %s\n' "$opt" >"$T/opt.sweep"
    expect 2 "record option '$opt' refused before running" -- "$DT" sweep "$T/opt.sweep" -o "$T/opt"
    one_line "record option '$opt'"
    [ ! -e "$T/opt" ] && ok "'$opt': nothing written" || bad "'$opt': $T/opt was made"
done

# ---- refusals: exit 2, one line, nothing lost ----
printf 'common --steps 5\nfactor a x : --threads 1\nbogus line\n' >"$T/bad.sweep"
expect 2 "unknown directive" -- "$DT" sweep "$T/bad.sweep" -o "$T/r"
one_line "unknown directive"
has "$T/err" "^divtrace sweep: $T/bad\.sweep:3: unknown directive 'bogus'" "names file and line"
[ ! -e "$T/r" ] && ok "a bad spec writes nothing" || bad "a bad spec created DIR"
expect 2 "missing spec" -- "$DT" sweep "$T/missing.sweep" -o "$T/r"
one_line "missing spec"
printf 'condition a : --threads 1\ncondition a : --threads 2\n' >"$T/dup.sweep"
expect 2 "duplicate condition" -- "$DT" sweep "$T/dup.sweep" -o "$T/r"
one_line "duplicate condition"
head -c 300 /dev/urandom >"$T/corrupt.sweep"
expect 2 "corrupt spec" -- "$DT" sweep "$T/corrupt.sweep" -o "$T/r"
one_line "corrupt spec"
expect 2 "--only matching nothing" -- "$DT" sweep "$T/s.sweep" -o "$T/d" --only threads=8
one_line "--only matching nothing"
expect 2 "-j 0" -- "$DT" sweep "$T/s.sweep" -o "$T/d" -j 0
one_line "-j 0"
expect 2 "no -o" -- "$DT" sweep "$T/s.sweep"
one_line "no -o"
expect 2 "--emit bogus" -- "$DT" sweep "$T/s.sweep" -o "$T/d" --emit bogus
one_line "--emit bogus"
: >"$T/file"
expect 2 "DIR is a file" -- "$DT" sweep "$T/s.sweep" -o "$T/file/sub"
one_line "DIR is a file"
mkdir "$T/ro" && chmod 555 "$T/ro"
if [ "$(id -u)" -ne 0 ]; then
    expect 2 "unwritable DIR" -- "$DT" sweep "$T/s.sweep" -o "$T/ro"
    one_line "unwritable DIR"
fi
s1=$(stamp "$T/d/runs/threads=1/t01.dtr")
expect 2 "another sweep's DIR" -- "$DT" sweep "$T/k.sweep" -o "$T/d"
one_line "another sweep's DIR"
has "$T/err" "sweep\.spec differs from $T/k\.sweep" "says the spec differs"
cmp -s "$T/s.sweep" "$T/d/sweep.spec" && ok "the old sweep.spec is kept" || bad "sweep.spec replaced"
[ "$(stamp "$T/d/runs/threads=1/t01.dtr")" = "$s1" ] && ok "traces kept after a refusal" || bad "a refusal touched a trace"
expect 0 "--force --list" -- "$DT" sweep "$T/k.sweep" -o "$T/d" --force --list
expect 2 "extra argument" -- "$DT" sweep "$T/s.sweep" "$T/k.sweep" -o "$T/d"
expect 0 "--help" -- "$DT" sweep --help
has "$T/out" "^Usage: divtrace sweep " "--help: usage"
expect 0 "--version" -- "$DT" sweep --version
has "$T/out" "^divtrace [0-9]" "--version"

finish
