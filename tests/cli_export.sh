#!/bin/sh
# cli_export.sh: `divtrace show --export` against independent readers (numpy's
# .npy reader, and a hand parse of a version 1 trace's checkpoint), its
# refusals, and divtrace-record(1)'s account of seeds: tests/seed_check.py,
# written from the man page alone, gives the batches' hashes and the first
# layer's initial weights bit for bit. Skips (77) without python3's numpy.
set -u
NAME=cli_export.sh
. "$(dirname "$0")/cli_lib.sh"
TOP=${top_srcdir:-$(dirname "$0")/..}

if ! python3 -c 'import numpy' 2>/dev/null; then
    echo "$NAME: python3 with numpy is needed: skipped" >&2
    exit 77
fi

R="$DT record -q --layers 784,8,784 --batch 10 --steps 3 --seed 3 --init-seed 5"
expect 0 "record" -- $R --momentum 0.9 --checkpoint-every 2 -o "$T/a.dtr"

# --- the seeds: batches and initial weights from the man page's recipe
expect 0 "export the initial weights" -- "$DT" show --export enc1.W --step 0 -o "$T/w0.npy" "$T/a.dtr"
expect 0 "seed_check.py reimplements the data order and the weights" -- \
    python3 "$TOP/tests/seed_check.py" "$DATA/train-images-idx3-ubyte.gz" 784,8,784 10 3 5 3 "$T/py.npy"
cp "$T/out" "$T/py.txt"
"$DT" show "$T/a.dtr" | awk '$3 == "data.x" { printf "data.x %s %s\n", $2, $1 }' >"$T/dt.txt"
grep '^data.x' "$T/py.txt" >"$T/py.hashes"
if [ -s "$T/dt.txt" ] && cmp -s "$T/dt.txt" "$T/py.hashes"; then
    ok "the batches of steps 0, 1 and 2 hash as the reimplementation's"
else
    bad "batches differ from the reimplementation"; diff "$T/dt.txt" "$T/py.hashes"
fi
expect 0 "the initial enc1.W is the reimplementation's, bit for bit" -- python3 -c "
import numpy as np, sys
a, b = np.load('$T/w0.npy'), np.load('$T/py.npy')
sys.exit(0 if a.dtype == np.float32 and a.shape == (8, 784) and
         np.array_equal(a.view(np.uint32), b.view(np.uint32)) else 1)"
# --init-seed alone sets the weights: another --seed, the same enc1.W
expect 0 "record with another --seed" -- $R --seed 4 -o "$T/b.dtr"
expect 0 "export it" -- "$DT" show --export enc1.W --step 0 -o "$T/w0b.npy" "$T/b.dtr"
expect 0 "--seed leaves the weights of --init-seed alone" -- cmp "$T/w0.npy" "$T/w0b.npy"

# --- every tensor of every checkpoint, against numpy's reader: the values
# the trace's own statistics describe (shape; a bias starts at zero; the
# momentum buffer starts at zero and the step-0 update is W - lr g)
for s in 0 2 3; do
    for name in enc1.W enc1.b dec1.W dec1.b enc1.W.momentum dec1.b.momentum; do
        expect 0 "export $name at step $s" -- "$DT" show --export "$name" --step $s -o "$T/$name.$s.npy" "$T/a.dtr"
    done
done
expect 0 "npy files read by numpy: dtype, shapes, zero biases and moments at step 0" -- python3 -c "
import numpy as np, sys
d = '$T'
shapes = {'enc1.W': (8, 784), 'enc1.b': (8,), 'dec1.W': (784, 8), 'dec1.b': (784,),
          'enc1.W.momentum': (8, 784), 'dec1.b.momentum': (784,)}
for s in (0, 2, 3):
    for n, sh in shapes.items():
        a = np.load('%s/%s.%d.npy' % (d, n, s))
        assert a.dtype == np.dtype('<f4') and a.shape == sh, (n, s, a.dtype, a.shape)
for n in ('enc1.b', 'dec1.b', 'enc1.W.momentum', 'dec1.b.momentum'):
    assert not np.load('%s/%s.0.npy' % (d, n)).any(), n
assert np.load('%s/enc1.W.2.npy' % d).any() and not np.array_equal(np.load('%s/enc1.W.0.npy' % d), np.load('%s/enc1.W.2.npy' % d))
"

# --- a version 1 trace (tests/v1/): the export equals a parse of its bytes
V1="$TOP/tests/v1/ae-784-2-784-momentum.dtr"
expect 0 "export from a version 1 trace" -- "$DT" show --export dec1.W --step 3 -o "$T/v1.npy" "$V1"
expect 0 "it is the checkpoint's bytes" -- python3 -c "
import struct, sys, numpy as np
data = open('$V1', 'rb').read()
assert struct.unpack_from('<8sI', data, 0) == (b'DIVTRACE', 1)
off = 16
while True:
    tag, _, n = struct.unpack_from('<4sIQ', data, off)
    p = off + 16
    if tag == b'CKPT' and struct.unpack_from('<Q', data, p)[0] == 3:
        break
    off += 20 + n
nt = struct.unpack_from('<I', data, p + 32)[0]
o = p + 40
for _ in range(nt):
    (ln,) = struct.unpack_from('<I', data, o); name = data[o + 4:o + 4 + ln].decode(); o += 4 + ln
    ndim = data[o]; shape = struct.unpack_from('<4I', data, o + 4)[:ndim]; (c,) = struct.unpack_from('<Q', data, o + 20)
    o += 28
    if name == 'dec1.W':
        want = np.frombuffer(data, '<f4', c, o).reshape(shape)
        got = np.load('$T/v1.npy')
        sys.exit(0 if got.shape == want.shape and np.array_equal(got.view('<u4'), want.view('<u4')) else 1)
    o += 4 * c
sys.exit(1)"

# --- refusals: one line on stderr, exit 2, nothing written
expect 2 "unknown tensor" -- "$DT" show --export nope --step 0 -o "$T/x.npy" "$T/a.dtr"
has "$T/err" "no tensor 'nope' in the checkpoint of step 0 \(it has: enc1\.W, " "unknown tensor: names the tensors"
one_line "unknown tensor"
expect 2 "a step without a checkpoint" -- "$DT" show --export enc1.W --step 1 -o "$T/x.npy" "$T/a.dtr"
has "$T/err" "no checkpoint at step 1 \(checkpoints at steps 0, 2, 3\)" "no checkpoint: says which steps have one"
one_line "a step without a checkpoint"
expect 2 "no --step" -- "$DT" show --export enc1.W -o "$T/x.npy" "$T/a.dtr"
has "$T/err" "--export needs --step S" "no --step: says so"
one_line "no --step"
expect 2 "no -o" -- "$DT" show --export enc1.W --step 0 "$T/a.dtr"
one_line "no -o"
mkdir "$T/dir"
expect 2 "an existing directory" -- "$DT" show --export enc1.W --step 0 -o "$T/dir" "$T/a.dtr"
has "$T/err" "dir: is a directory" "an existing directory: says so"
one_line "an existing directory"
expect 2 "an unwritable place" -- "$DT" show --export enc1.W --step 0 -o "$T/no/such/x.npy" "$T/a.dtr"
one_line "an unwritable place"
expect 2 "--export with --json" -- "$DT" show --json --export enc1.W --step 0 -o "$T/x.npy" "$T/a.dtr"
one_line "--export with --json"
[ ! -e "$T/x.npy" ] && ok "refusals wrote no file" || bad "a refusal wrote $T/x.npy"
[ -z "$(ls "$T" | grep '\.tmp\.')" ] && ok "no temporary file left" || bad "temporary files left: $(ls "$T")"
# an existing file is replaced whole
echo old >"$T/keep.npy"
expect 0 "export over an existing file" -- "$DT" show --export enc1.b --step 0 -o "$T/keep.npy" "$T/a.dtr"
expect 0 "it is replaced" -- python3 -c "import numpy as np; assert np.load('$T/keep.npy').shape == (8,)"

finish
