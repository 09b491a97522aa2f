#!/bin/sh
# cli_diff.sh: divtrace diff on runs whose graphs differ (SGD against Adam):
# the op lists are matched by name, the first op-definition difference and
# the count are named in text and JSON, and the ops both runs hold are still
# compared: the first divergence and its origins are the changed updates.
set -u
NAME=cli_diff.sh
. "$(dirname "$0")/cli_lib.sh"

R="$DT record -q --steps 3 --layers 784,16,784"
expect 0 "record with SGD" -- $R -o "$T/sgd.dtr"
expect 0 "record with Adam" -- $R --optimizer adam --lr 0.001 -o "$T/adam.dtr"
expect 1 "SGD vs Adam: diff exits 1" -- "$DT" diff "$T/sgd.dtr" "$T/adam.dtr"
# Adam's moments are state leaves and updates B alone holds: 4 per parameter
has "$T/out" "^op lists differ in 20 ops; first: enc1\.W\.m: only in B$" "the count and the first op only in B"
has "$T/out" "^  the 24 ops both traces hold compare by name \(A has 24 ops, B has 40\)$" "the ops both hold"
has "$T/out" "^first divergence: step 0$" "the first divergence, by name"
has "$T/out" "^  first op: op [0-9]+ enc1\.W\.update \(layer enc1, optimizer sgd, shape 16x784; op [0-9]+ in B; definition changed: type sgd became adam_p; inputs enc1\.W, enc1\.W\.grad became enc1\.W, enc1\.W\.m\.update, enc1\.W\.v\.update\)$" \
    "the first op: enc1.W's update, its definition changed"
has "$T/out" "^  origin ops of step 0 \(inputs identical, output different\): 4$" "4 origins: the updates"
has "$T/out" "^divergence timeline \(relative L2 distance of the parameters both traces hold in one shape" "the timeline over the parameters both hold"
if grep -q "only step summaries compare" "$T/out"; then bad "records are still compared"; else ok "records are still compared"; fi

expect 1 "diff --json" -- "$DT" diff --json "$T/sgd.dtr" "$T/adam.dtr"
if command -v python3 >/dev/null; then
    if python3 - "$T/out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
want = {"name": "enc1.W.m", "op_a": None, "text": "enc1.W.m: only in B"}
fo = j["first_op_difference"]
assert all(fo[k] == v for k, v in want.items()) and isinstance(fo["op_b"], int), fo
assert j["op_differences"] == 20 and not j["ops_match"] and j["values_differ"], j
fd = j["first_divergence"]
assert fd["name"] == "enc1.W.update" and fd["definition_changed"] and fd["op_b"] != fd["op"], fd
assert [o["name"] for o in j["origins"]] == ["enc1.W.update", "enc1.b.update", "dec1.W.update", "dec1.b.update"], j["origins"]
assert all(o["definition_changed"] for o in j["origins"]), j["origins"]
PY
    then ok "--json: first_op_difference, op_differences, first_divergence, origins"; else bad "--json content"; fi
else
    has "$T/out" '"first_op_difference": \{"name": "enc1\.W\.m", "op_a": null, "op_b": [0-9]+, "text": "enc1\.W\.m: only in B"\}' "--json: first_op_difference"
fi

# the same graph: no op-list lines, records compare position by position
expect 0 "record with SGD again" -- $R -o "$T/sgd2.dtr"
expect 0 "same graph, same run: exit 0" -- "$DT" diff "$T/sgd.dtr" "$T/sgd2.dtr"
if grep -q "^op lists differ" "$T/out"; then bad "same graph: no op-list difference"; else ok "same graph: no op-list difference"; fi
expect 0 "--json" -- "$DT" diff --json "$T/sgd.dtr" "$T/sgd2.dtr"
has "$T/out" '"ops_match": true, "identical": true, "values_differ": false, "values_unknown": false, "op_differences": 0' "--json: same graph"

finish
