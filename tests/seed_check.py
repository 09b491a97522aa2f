"""seed_check.py: divtrace-record(1)'s "Seeds, batches and initial weights"
reimplemented from the man page alone, in Python with numpy: Philox4x32-10,
the data order (a Fisher-Yates permutation per epoch) and Glorot-uniform
initial weights. Prints, for an autoencoder run of LAYERS with BATCH images
a step, SEED and INIT_SEED:

  data.x STEP HASH     the tensor hash (divtrace(1)) of step STEP's batch
  enc1.W SHAPE         the first layer's initial weights, written to OUT.npy

Usage: seed_check.py IDX_GZ LAYERS BATCH SEED INIT_SEED STEPS OUT.npy
The hash needs XXH3-64, taken from the system's libxxhash through ctypes.
"""
import ctypes
import ctypes.util
import gzip
import math
import struct
import sys

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57          # Philox4x32 multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85          # key increments
MASK32 = 0xFFFFFFFF


def philox_blocks(seed, stream, blocks):
    """Philox4x32-10 of counters (block lo, block hi, stream lo, stream hi)
    under key (seed lo, seed hi), for an array of block numbers: (n, 4) words."""
    b = np.asarray(blocks, dtype=np.uint64)
    c = [b & MASK32, b >> np.uint64(32),
         np.full(b.shape, stream & MASK32, np.uint64), np.full(b.shape, stream >> 32, np.uint64)]
    k0, k1 = seed & MASK32, seed >> 32
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        p0 = np.uint64(M0) * c[0]
        p1 = np.uint64(M1) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & np.uint64(MASK32),
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & np.uint64(MASK32)]
    return np.stack(c, axis=1)


def words(seed, stream, n):
    """Words 0 .. n-1 of a stream."""
    return philox_blocks(seed, stream, np.arange((n + 3) // 4)).reshape(-1)[:n]


def permutation(n, seed, stream):
    """Fisher-Yates from the top; position i swaps with j = the high 64 bits
    of x (i + 1), x the 64-bit draw i (words 2i, 2i + 1), redrawn from draw
    2^32 k + i while the low 64 bits are below 2^64 mod (i + 1)."""
    w = [int(v) for v in words(seed, stream, 2 * n)]
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        s = i + 1
        x = w[2 * i] | w[2 * i + 1] << 32
        prod, k = x * s, 0
        while prod & (2**64 - 1) < (2**64 % s):
            k += 1
            d = (k << 32) + i
            blk = philox_blocks(seed, stream, [d // 2])[0]
            x = int(blk[2 * d % 4]) | int(blk[2 * d % 4 + 1]) << 32
            prod = x * s
        j = prod >> 64
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def xxh3(data):
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib.XXH3_64bits(data, len(data))


def tensor_hash(x):
    b = np.ascontiguousarray(x, dtype="<f4").tobytes()
    if not b:
        return xxh3(b"")
    leaves = [xxh3(b[i:i + 16384]) for i in range(0, len(b), 16384)]
    return xxh3(struct.pack("<%dQ" % len(leaves), *leaves))


def glorot(name, shape, init_seed, scale=1.0):
    """U(-a, a), a = scale sqrt(6 / ((fan_out + fan_in) R S)), element i from
    word i of stream XXH3-64(name): lo + (hi - lo) u in double, u = (word >>
    8) 2^-24, rounded once to float32."""
    rs = shape[2] * shape[3] if len(shape) == 4 else 1
    a = scale * math.sqrt(6.0 / ((float(shape[0]) + float(shape[1])) * rs))
    n = int(np.prod(shape))
    u = (words(init_seed, xxh3(name.encode()), n) >> np.uint64(8)).astype(np.float64) * 2.0**-24
    lo, hi = -a, a
    return (lo + (hi - lo) * u).astype(np.float32).reshape(shape)


def main():
    idx, layers, batch, seed, init_seed, steps, out = sys.argv[1:8]
    layers = [int(v) for v in layers.split(",")]
    batch, seed, init_seed, steps = int(batch), int(seed), int(init_seed), int(steps)
    raw = gzip.open(idx).read()
    magic, n, rows, cols = struct.unpack(">IIII", raw[:16])
    assert magic == 0x803, "not an IDX image file"
    pix = np.frombuffer(raw, np.uint8, n * rows * cols, 16).reshape(n, rows * cols)
    perms = {}
    for step in range(steps):
        rowsel = []
        for b in range(batch):
            s = step * batch + b
            epoch = s // n
            if epoch not in perms:
                perms[epoch] = permutation(n, seed, epoch + 1)
            rowsel.append(perms[epoch][s % n])
        x = pix[rowsel].astype(np.float32) / np.float32(255)
        print("data.x %d %016x" % (step, tensor_hash(x)))
    w = glorot("enc1.W", (layers[1], layers[0]), init_seed)
    np.save(out, w)
    print("enc1.W %s" % "x".join(str(d) for d in w.shape))


if __name__ == "__main__":
    main()
