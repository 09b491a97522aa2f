#!/bin/sh
# cli_lib_example.sh: a training program that records itself through
# libdivtrace (tests/lib/mlp_example.c) gives traces that every divtrace
# command reads: two identical runs are identical to `divtrace diff`; a run
# that sums one gradient in reverse order differs, first and at its origin
# exactly in that op; `show` and `escape` read them, and a trace the program
# stops early (killed, or closed with a nonzero status) stays readable.
# Under a fault of the recording (an unwritable trace, the disk full, an
# allocation that fails) the program trains on to the same result, the
# library says so in one line on stderr, and the trace keeps its steps.
set -u
NAME=cli_lib_example.sh
. "$(dirname "$0")/cli_lib.sh"
EX=${MLP_EXAMPLE:-$(dirname "$DT")/../tests/lib/mlp_example}

expect 0 "example run A" -- "$EX" -o "$T/a.dtr" --steps 60
cp "$T/out" "$T/a.out"
expect 0 "example run B, the same" -- "$EX" -o "$T/b.dtr" --steps 60
expect 0 "example run C, b1.grad summed in reverse" -- "$EX" -o "$T/c.dtr" --steps 60 --reverse-sum

expect 0 "diff of two identical runs: exit 0" -- "$DT" diff "$T/a.dtr" "$T/b.dtr"
has "$T/out" "^identical: every op hash of all 60 common steps matches" "identical runs: every op matches"
expect 1 "diff with the reversed sum: exit 1" -- "$DT" diff "$T/a.dtr" "$T/c.dtr"
has "$T/out" "^first divergence: step 0$" "first divergence at step 0"
has "$T/out" "^  first op: op [0-9]+ b1\.grad " "first divergent op: b1.grad"
has "$T/out" "^  origin ops of step 0 \(inputs identical, output different\): 1$" "one origin op"
if grep -A1 "^  origin ops of step 0" "$T/out" | grep -Eq "^    op [0-9]+ b1\.grad "; then
    ok "the origin is b1.grad"
else
    bad "the origin is not b1.grad"; sed 's/^/    /' "$T/out" | head -20
fi
expect 1 "diff --json" -- "$DT" diff --json "$T/a.dtr" "$T/c.dtr"
has "$T/out" '"b1\.grad"' "--json names b1.grad"

# explain on library traces: identical ones are identical; with the
# reversed sum it checks what the records allow (no carry fault) and says
# what it could not: the ops cannot be re-run without the model
expect 0 "explain two identical runs" -- "$DT" explain "$T/a.dtr" "$T/b.dtr"
has "$T/out" "^identical$" "explain: identical"
expect 2 "explain the reversed sum: no verdict" -- "$DT" explain "$T/a.dtr" "$T/c.dtr"
has "$T/out" "^no verdict: A's ops were not checked: .*written through libdivtrace .*the diff and the carry check .* are what could be checked" "explain: says what it could not check"
has "$T/out" "^  b1\.grad$" "explain: names the origin b1.grad"

expect 0 "show" -- "$DT" show "$T/a.dtr"
has "$T/out" "^# complete$" "show: complete"
has "$T/out" "^# steps 60, ops per step 38, checkpoints 7, trace level op$" "show: 60 steps, 38 ops, 7 checkpoints"
has "$T/out" "^# model = mlp-example$" "show: the configuration"
has "$T/out" "^step 59  loss [0-9.]+  grad_norm [0-9.e+-]+  root [0-9a-f]{16}$" "show: the last step"
has "$T/out" "^[0-9a-f]{16}  59  b1\.grad  16  " "show: a record"
expect 0 "show --json" -- "$DT" show --json "$T/a.dtr"
has "$T/out" '"name": "W1", "type": "param", "kind": "param", "shape": \[4, 16\], "inputs": \[\{"op": [0-9]+, "previous_step": true' "a parameter names last step's update"

expect 0 "escape" -- "$DT" escape "$T/a.dtr"
has "$T/out" "^  phases: [0-9]+ " "escape: phases"
expect 0 "escape --json" -- "$DT" escape --json "$T/a.dtr"

# a run that ends early closes its trace with a nonzero status: a STOPPED
# event, and the trace says the run ended early
expect 0 "a run stopped after step 7" -- "$EX" -o "$T/s.dtr" --steps 20 --stop-after 7
expect 0 "show the stopped run" -- "$DT" show "$T/s.dtr"
has "$T/out" "^# complete \(the run ended early\)$" "show: the run ended early"
has "$T/out" "^# steps 8, " "show: 8 steps"
expect 0 "show --json of the stopped run" -- "$DT" show --json "$T/s.dtr"
has "$T/out" '"end_status": 1' "--json: end status 1"
has "$T/out" 'stopped after step 7' "--json: the reason"
# a trace cut short (the program killed) reads up to its last complete step
expect 0 "a run to cut" -- "$EX" -o "$T/k.dtr" --steps 10
head -c 20000 "$T/k.dtr" >"$T/cut.dtr"
expect 0 "show a trace cut short" -- "$DT" show "$T/cut.dtr"
has "$T/out" "^# cut short after step [0-9]+ " "show: cut short"
expect 0 "diff of the whole trace and the cut one: the common steps match" -- "$DT" diff "$T/k.dtr" "$T/cut.dtr"
# faults: the training goes on to the same loss; one line on stderr
expect 0 "a run into /dev/full: no trace, the training goes on" -- "$EX" -o /dev/full --steps 60
if cmp -s "$T/out" "$T/a.out"; then ok "/dev/full: the run's result unchanged"; else bad "/dev/full: the result changed"; fi
one_line "/dev/full"
has "$T/err" "^libdivtrace: divtrace_open: /dev/full: .*nothing is recorded" "/dev/full: the library says why"
expect 0 "the disk full after a few steps (ulimit -f)" -- sh -c 'trap "" XFSZ; ulimit -f 40; exec "$0" -o "$1" --steps 60' "$EX" "$T/full.dtr"
if cmp -s "$T/out" "$T/a.out"; then ok "disk full: the run's result unchanged"; else bad "disk full: the result changed"; fi
one_line "disk full"
has "$T/err" "^libdivtrace: recording to .*full\.dtr stopped .*write failed" "disk full: the library says why"
expect 0 "show the trace the full disk cut" -- "$DT" show --summary "$T/full.dtr"
has "$T/out" "^# cut short after step [0-9]+ " "disk full: the steps before it, the trace not complete"
expect 0 "an allocation that fails (DIVTRACE_TEST_FAIL_ALLOC)" -- env DIVTRACE_TEST_FAIL_ALLOC=300 "$EX" -o "$T/nomem.dtr" --steps 60
if cmp -s "$T/out" "$T/a.out"; then ok "no memory: the run's result unchanged"; else bad "no memory: the result changed"; fi
one_line "no memory"
expect 0 "show the trace the failed allocation stopped" -- "$DT" show "$T/nomem.dtr"
has "$T/out" "^# cut short after step [0-9]+ " "no memory: the steps before it, the trace not complete"
has "$T/out" "recording stopped: .*out of memory" "no memory: the trace says why"
finish
