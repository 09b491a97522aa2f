#!/usr/bin/env python3
# ckpt_entropy.py DIVTRACE TRACE.dtr: how small a trace's checkpoints could
# be, held bit for bit, whatever the compressor. Every tensor of every
# checkpoint comes out through `divtrace show --export`; each float32 is read
# as an integer in the floats' order (so that a difference counts units in
# the last place across the exponent's steps), predicted from the
# checkpoints before it, and the residual is priced as a coder would send
# it: its bit length, entropy-coded over the whole trace, then the bits
# below the leading one and a sign. No compressor of the differences does
# better than the residual's information less what the length code wastes
# (well under a bit), so the MB printed is the floor of a trace with these
# checkpoints. Predictors: the previous checkpoint (what format 2
# subtracts), and the straight line through the two before it.
# Needs python3 with NumPy.
import os
import re
import subprocess
import sys
import tempfile

import numpy as np


def header(dt, trace):
    out = subprocess.run([dt, "show", trace], check=True, capture_output=True, text=True).stdout
    h = {}
    for line in out.splitlines():
        m = re.match(r"# (\w+) = (.*)", line)
        if m:
            h[m.group(1)] = m.group(2)
        elif not line.startswith("#"):
            break
    return h


def tensor_names(dt, trace, tmp):
    # the error for a name the checkpoint lacks lists the names it has
    r = subprocess.run([dt, "show", trace, "--export", "\x01", "--step", "0", "-o",
                        os.path.join(tmp, "x.npy")], capture_output=True, text=True)
    m = re.search(r"\(it has: (.*)\)", r.stderr)
    if not m:
        sys.exit("ckpt_entropy.py: cannot list the tensors of %s: %s" % (trace, r.stderr.strip()))
    return m.group(1).split(", ")


def ordered(a):
    u = a.view(np.uint32).astype(np.int64)
    return np.where(u & 0x80000000, -(u & 0x7FFFFFFF), u)


def bit_lengths(r):
    a = np.abs(r)
    n = np.zeros(a.shape, np.int64)
    nz = a > 0
    n[nz] = np.floor(np.log2(a[nz])).astype(np.int64) + 1
    return n


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: ckpt_entropy.py DIVTRACE TRACE.dtr")
    dt, trace = sys.argv[1], sys.argv[2]
    h = header(dt, trace)
    every, steps = int(h["checkpoint_every"]), int(h["steps"])
    at = list(range(0, steps + 1, every))
    with tempfile.TemporaryDirectory() as tmp:
        names = tensor_names(dt, trace, tmp)
        x = {}
        for nm in names:
            rows = []
            for s in at:
                f = os.path.join(tmp, "t.npy")
                subprocess.run([dt, "show", trace, "--export", nm, "--step", str(s), "-o", f], check=True)
                rows.append(ordered(np.load(f).ravel()))
            x[nm] = np.stack(rows)
    weights = sum(v.shape[1] for v in x.values())
    print("%s: %d checkpoints of %d values (steps 0 to %d, every %d); file %d B"
          % (trace, len(at), weights, at[-1], every, os.path.getsize(trace)))
    print("| predictor of a checkpoint | bits per value | MB of the %d checkpoints after the first |" % (len(at) - 1))
    print("|---|---:|---:|")
    for label, pred in (("the previous checkpoint", lambda v, k: v[k - 1]),
                        ("the line through the two before it", lambda v, k: 2 * v[k - 1] - v[k - 2] if k >= 2 else v[k - 1])):
        lengths, raw = [], 0
        for v in x.values():
            for k in range(1, len(at)):
                n = bit_lengths(v[k] - pred(v, k))
                lengths.append(n)
                raw += int(np.maximum(n - 1, 0).sum() + (n > 0).sum())
        n = np.concatenate(lengths)
        _, cnt = np.unique(n, return_counts=True)
        p = cnt / cnt.sum()
        bits = float(-(p * np.log2(p)).sum()) * n.size + raw
        print("| %s | %.2f | %.1f |" % (label, bits / n.size, bits / 8e6))


if __name__ == "__main__":
    main()
