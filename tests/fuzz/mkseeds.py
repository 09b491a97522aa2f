#!/usr/bin/env python3
"""tests/fuzz/mkseeds.py: (re)write the seed corpora of the fuzz harnesses in
tests/fuzz/corpus/. Traces come from `divtrace record` (tiny models on a tiny
IDX file made here; format 2, as divtrace writes) and from a writer of
format 1 of its own (which keeps format 1 covered), for what a
short recorded run does not show (a plateau, 25 checkpoints, op lists that
differ, damaged blocks). Every fuzz_trace seed starts with the harness's 4
control bytes (see fuzz_trace.c).

    mkseeds.py DIVTRACE [CORPUS_DIR]
"""
import gzip
import os
import struct
import subprocess
import sys
import tempfile
import zlib

KIND = {'input': 0, 'param': 1, 'state': 2, 'forward': 3, 'backward': 4, 'grad': 5, 'optimizer': 6}


def u32(x):
    return struct.pack('<I', x)


def u64(x):
    return struct.pack('<Q', x)


def sstr(s):
    b = s.encode()
    return u32(len(b)) + b


def block(tag, payload):
    head = tag + u32(0) + u64(len(payload)) + payload
    return head + u32(zlib.crc32(head))


class Trace:
    """A trace of format 1, block by block (divtrace-trace(5))."""

    def __init__(self, conf, level, ops):
        self.ops = ops
        self.names = [o[0] for o in ops]
        self.level = level
        body = sstr('0.1.0') + u32(level) + u32(len(conf))
        for k, v in conf:
            body += sstr(k) + sstr(v)
        self.data = b'DIVTRACE' + u32(1) + u32(0) + block(b'CONF', body)
        body = u32(len(ops))
        for name, typ, kind, shape, inputs in ops:
            body += sstr(name) + sstr(typ) + bytes([KIND[kind], len(shape), 0, 0])
            body += b''.join(u32(d) for d in (list(shape) + [0, 0, 0, 0])[:4])
            refs = [self.names.index(i[1:]) | 0x80000000 if i[0] == '@' else self.names.index(i)
                    for i in inputs]
            body += u32(len(refs)) + b''.join(u32(r) for r in refs)
        self.data += block(b'OPS ', body)
        self.index = ([], [], [])

    def keeps(self, kind):
        return self.level == 0 or (self.level == 1 and kind in ('param', 'state', 'grad', 'optimizer'))

    def step(self, s, loss, hashes, l2=1.0, gnorm=0.5):
        """hashes: op name -> hash (ops not named hash to s + 1)."""
        recs = b''
        n = 0
        for i, (name, _, kind, _, _) in enumerate(self.ops):
            if not self.keeps(kind):
                continue
            h = hashes.get(name, 0x1000 * (i + 1) + s)
            sketch = struct.pack('<16f', *[(h % 97) / 97.0 + k * 0.01 for k in range(16)])
            recs += u32(i) + u32(0) + u64(h) + struct.pack('<ddd', l2, -1.0, 1.0) + u64(0) + u64(0) + sketch
            n += 1
        root = sum(hashes.get(o[0], 0) for o in self.ops) + s * 7 + 1
        payload = u64(s) + struct.pack('<dd', loss, gnorm) + u64(root & (2**64 - 1)) + u32(n) + u32(0)
        self.add(b'STEP', payload + recs, 0, s)

    def ckpt(self, s, tensors):
        body = u64(s) + u64(s) + u64(1) + u64(0) + u32(len(tensors)) + u32(0)
        for name, shape, vals in tensors:
            body += sstr(name) + bytes([len(shape), 0, 0, 0])
            body += b''.join(u32(d) for d in (list(shape) + [0, 0, 0, 0])[:4])
            body += u64(len(vals)) + struct.pack('<%df' % len(vals), *vals)
        self.add(b'CKPT', body, 1, s)

    def event(self, code, s, op, text):
        self.add(b'EVNT', u32(code) + u32(op) + u64(s) + sstr(text), 2, s)

    def add(self, tag, payload, lst, s):
        if lst is not None:
            self.index[lst].append((s, len(self.data)))
        self.data += block(tag, payload)

    def close(self, status=0):
        off = len(self.data)
        st, ck, ev = self.index
        body = u32(status & 0xffffffff) + u32(0) + u64(len(st)) + u64(len(ck)) + u64(len(ev))
        for lst in (st, ck, ev):
            body += b''.join(u64(s) + u64(o) for s, o in lst)
        self.data += block(b'INDX', body) + u64(off) + b'ENDTRACE'
        return self.data


# The fixed trace F of fuzz_trace.c: a one-unit autoencoder.
F_OPS = [
    ('data.x', 'input', 'input', (1, 1), []),
    ('enc1.W', 'param', 'param', (1, 1), ['@enc1.W.update']),
    ('enc1.b', 'param', 'param', (1, 1), ['@enc1.b.update']),
    ('enc1.matmul', 'matmul', 'forward', (1, 1), ['data.x', 'enc1.W']),
    ('enc1.add_bias', 'add_bias', 'forward', (1, 1), ['enc1.matmul', 'enc1.b']),
    ('enc1.sigmoid', 'sigmoid', 'forward', (1, 1), ['enc1.add_bias']),
    ('loss.mse', 'mse', 'forward', (1, 1), ['enc1.sigmoid', 'data.x']),
    ('enc1.sigmoid.grad', 'mse_bwd', 'backward', (1, 1), ['enc1.sigmoid', 'data.x']),
    ('enc1.add_bias.grad', 'sigmoid_bwd', 'backward', (1, 1), ['enc1.sigmoid', 'enc1.sigmoid.grad']),
    ('enc1.b.grad', 'bias_grad', 'grad', (1, 1), ['enc1.add_bias.grad']),
    ('enc1.W.grad', 'matmul', 'grad', (1, 1), ['enc1.add_bias.grad', 'data.x']),
    ('enc1.W.update', 'sgd', 'optimizer', (1, 1), ['enc1.W', 'enc1.W.grad']),
    ('enc1.b.update', 'sgd', 'optimizer', (1, 1), ['enc1.b', 'enc1.b.grad']),
]

# A smaller graph for pairs of traces.
S_OPS = [
    ('x', 'input', 'input', (2,), []),
    ('W', 'param', 'param', (2,), ['@W.update']),
    ('mm', 'mul', 'forward', (2,), ['x', 'W']),
    ('loss', 'mse', 'forward', (), ['mm']),
    ('W.grad', 'mul', 'grad', (2,), ['mm', 'x']),
    ('W.update', 'sgd', 'optimizer', (2,), ['W', 'W.grad']),
]

# PredNet-style names: layer, time step, op; a gradient part named after '@'.
P_OPS = [
    ('data.t00', 'input', 'input', (1, 1, 2, 2), []),
    ('L0.conv_i.W', 'param', 'param', (1, 1, 1, 1), ['@L0.conv_i.W.update']),
    ('L0.t00.conv_i', 'conv2d', 'forward', (1, 1, 2, 2), ['data.t00', 'L0.conv_i.W']),
    ('L0.t01.conv_i', 'conv2d', 'forward', (1, 1, 2, 2), ['L0.t00.conv_i', 'L0.conv_i.W']),
    ('L0.t01.mean', 'mean', 'forward', (), ['L0.t01.conv_i']),
    ('L0.conv_i.W.grad@L0.t01.conv_i', 'conv2d_bwd_filter', 'grad', (1, 1, 1, 1), ['data.t00']),
    ('L0.conv_i.W.update', 'adam_p', 'optimizer', (1, 1, 1, 1), ['L0.conv_i.W', 'L0.conv_i.W.grad@L0.t01.conv_i']),
]


def ctrl(c0=0, c1=0, c2=0, c3=0):
    return bytes([c0, c1, c2, c3])


def conf(**kw):
    return [('model', 'autoencoder')] + list(kw.items())


def plateau(s, start=0.5, until=12, rate=0.03):
    return start + 1e-4 * (s % 2) if s < until else start * (1 - rate * (s - until + 1))


def syn_f_plateau():
    """F's graph at level step: 26 steps, a checkpoint each, a plateau."""
    t = Trace(conf(layers='1,1,1', backend='cpu'), 2, F_OPS)
    for s in range(26):
        t.ckpt(s, [('enc1.W', (1, 1), [0.5 + 0.01 * s * (1 + 1e-6 * 2 ** s)]),
                   ('enc1.b', (1, 1), [0.1])])
        t.step(s, plateau(s, until=14), {})
    return t.close()


def syn_pair_elements():
    """B's parameter differs from step 2 on: a parameter is the first op."""
    out = b''
    for k in range(2):
        t = Trace(conf(seed='1', backend='cpu' if k == 0 else 'mpfr', precision='64'), 1, S_OPS)
        for s in range(4):
            w = [0.25 + s, -0.5] if k == 0 or s < 2 else [0.25 + s + 1e-6, -0.5]
            if s % 2 == 0:
                t.ckpt(s, [('W', (2,), w), ('W.m', (2,), [0.0, 0.0])])
            h = {} if k == 0 or s < 2 else {'W': 0xdead, 'mm': 0xbeef, 'loss': 0xf00d}
            t.step(s, 1.0 / (s + 1), h)
        out += t.close()
    return out


def syn_pair_opdiff():
    """B inserts an op, rewires and reshapes another, has other keys, events
    and fewer steps, and was killed (no footer)."""
    a = Trace(conf(seed='1', act='sigmoid'), 0, S_OPS)
    b_ops = S_OPS[:2] + [('x.scale', 'mul', 'forward', (2,), ['x'])] + \
        [('mm', 'mul', 'forward', (3,), ['x.scale', 'W'])] + S_OPS[3:]
    b = Trace(conf(seed='2', hidden='8'), 0, b_ops)
    for s in range(3):
        a.step(s, 1.0, {})
        a.event(1, s, 2 if s < 2 else 0xffffffff, 'step %d: op 2 mm (mul) produced 1 NaN' % s)
        if s < 2:
            b.step(s, 1.0, {'mm': 77 + s})
    b.event(2, 1, 0xffffffff, 'stopped after step 1: "quoted" \\ text\x01')
    return a.close(1) + b.data


def syn_pair_order():
    """The same ops in another order; at level param."""
    a = Trace(conf(), 1, S_OPS)
    b = Trace(conf(), 1, [S_OPS[1], S_OPS[0]] + S_OPS[2:])
    for t in (a, b):
        for s in range(2):
            t.step(s, 1.0, {name: 100 * k + s for k, (name, _, _, _, _) in enumerate(S_OPS)})
    return a.close() + b.close()


def syn_pair_names():
    """Op lists with other names at level step: the values do not compare."""
    a = Trace(conf(), 2, S_OPS)
    b = Trace(conf(), 2, [(n + '2', ty, k, sh, []) for n, ty, k, sh, _ in S_OPS])
    for t in (a, b):
        t.step(0, 1.0, {})
    return a.close() + b.close()


def syn_pair_prednet():
    """PredNet-style names: the first divergent op has a time step."""
    out = b''
    for k in range(2):
        t = Trace([('model', 'prednet'), ('stack', '1'), ('nt', '2')], 0, P_OPS)
        t.ckpt(0, [('L0.conv_i.W', (1, 1, 1, 1), [0.5])])
        for s in range(2):
            h = {'L0.t01.conv_i': 99, 'L0.t01.mean': 98, 'L0.conv_i.W.grad@L0.t01.conv_i': 97} if k and s else {}
            t.step(s, 0.3, h)
        out += t.close()
    return out


def syn_damaged():
    """An unknown block (skipped), an index that points at the wrong block,
    a checkpoint whose payload is corrupt behind a valid CRC, status 3."""
    t = Trace(conf(), 0, S_OPS)
    t.add(b'XTRA', b'later writers may add blocks', None, 0)
    t.step(0, 1.0, {})
    t.add(b'CKPT', u64(0) + u64(0) + u64(1) + u64(0) + u32(1) + u32(0) + sstr('W') + bytes([5, 0, 0, 0]),
          1, 0)
    t.step(1, 1.0, {})
    t.index[0][1] = (1, t.index[1][0][1])  # step 1 "is" the checkpoint's block
    t.add(b'CONF', u32(0), None, 0)      # a second CONF block ends the scan
    return t.close(3)


def syn_json_type():
    """An op type and a key with characters JSON must escape."""
    ops = [('x', 'in"put\\', 'input', (1,), []), ('y\ty', 'ty\npe', 'forward', (1,), ['x'])]
    t = Trace([('k"ey', 'v\\al\x7f')], 0, ops)
    t.step(0, float('nan'), {})
    return t.close()


def record(dt, tmp, name, *args):
    path = os.path.join(tmp, name)
    subprocess.run([dt, 'record', '-q', '--data', os.path.join(tmp, 'data')] + list(args) + ['-o', path],
                   check=False)
    with open(path, 'rb') as f:
        return f.read()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    dt = sys.argv[1]
    corpus = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), 'corpus')
    seeds = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, 'data'))
        with open(os.path.join(tmp, 'data', 'train-images-idx3-ubyte'), 'wb') as f:
            f.write(struct.pack('>IIII', 0x803, 8, 1, 1) + bytes([10, 200, 30, 180, 90, 250, 5, 120]))
        ae = ['--layers', '1,1,1', '--batch', '1']
        op1 = record(dt, tmp, 'op1.dtr', *ae, '--steps', '1', '--checkpoint-every', '1')
        seeds['rec-ae-op'] = ctrl(0x04, 0, 0x01, 0x00) + op1
        seeds['rec-ae-killed'] = ctrl(0x03, 0, 0x00, 0x01) + op1[:len(op1) * 3 // 5]
        seeds['rec-ae-nan-events'] = ctrl(0x60, 0, 0x60, 0x00) + record(
            dt, tmp, 'nan.dtr', *ae, '--act', 'relu', '--lr', '1e30', '--steps', '3',
            '--stop-on-nonfinite', '--trace-level', 'step')
        st = ['--trace-level', 'step', '--steps', '2', '--checkpoint-every', '1']
        seeds['rec-ae-flip-pair'] = ctrl(0x00, 0, 0x00, 0x01) + record(dt, tmp, 'a.dtr', *ae, *st) + \
            record(dt, tmp, 'flip.dtr', *ae, *st, '--flip-bit', '1:enc1.W:0:3')
        seeds['rec-mpfr-reference'] = ctrl(0x01, 0, 0x94, 0x04) + record(
            dt, tmp, 'mpfr.dtr', *ae, *st, '--backend', 'mpfr', '--no-self-check') + \
            record(dt, tmp, 'cpu.dtr', *ae, *st)
        # format 2: checkpoints stored as differences (tensors big enough to compress)
        seeds['rec-ae-delta'] = ctrl(0x00, 0, 0x00, 0x00) + record(
            dt, tmp, 'd.dtr', '--layers', '1,256,1', '--batch', '1', '--steps', '3', '--checkpoint-every', '1')
        seeds['rec-prednet'] = ctrl(0x0c, 0x00, 0x01, 0x00) + record(
            dt, tmp, 'p.dtr', '--model', 'prednet', '--stack', '1', '--size', '2x2', '--nt', '2',
            '--steps', '1', '--trace-level', 'step', '--checkpoint-every', '1000')
    seeds['syn-f-plateau'] = ctrl(0x02, 0, 0x01, 0x00) + syn_f_plateau()
    seeds['syn-f-plateau-ref'] = ctrl(0x01, 0, 0x05, 0x9c) + syn_f_plateau()
    seeds['syn-pair-elements'] = ctrl(0x00, 0, 0x00, 0x00) + syn_pair_elements()
    seeds['syn-pair-elements-json'] = ctrl(0x00, 0, 0x01, 0x15) + syn_pair_elements()
    seeds['syn-pair-opdiff'] = ctrl(0x04, 0, 0x00, 0x00) + syn_pair_opdiff()
    seeds['syn-pair-opdiff-json'] = ctrl(0x01, 0, 0x01, 0x01) + syn_pair_opdiff()
    seeds['syn-pair-order'] = ctrl(0x00, 0, 0x00, 0x00) + syn_pair_order()
    seeds['syn-pair-names'] = ctrl(0x00, 0, 0x00, 0x00) + syn_pair_names()
    seeds['syn-pair-prednet'] = ctrl(0x00, 0, 0x00, 0x00) + syn_pair_prednet()
    seeds['syn-pair-prednet-json'] = ctrl(0x09, 0x01, 0x01, 0x00) + syn_pair_prednet()
    seeds['syn-damaged'] = ctrl(0x08, 0x01, 0x00, 0x00) + syn_damaged()
    seeds['syn-json-type'] = ctrl(0x05, 0, 0x01, 0x01) + syn_json_type()
    seeds['syn-version-3'] = ctrl(0x00, 0, 0x00, 0x00) + b'DIVTRACE' + u32(3) + u32(0)
    seeds['syn-header-only'] = ctrl(0x00, 0, 0x00, 0x00) + b'DIVTRACE' + u32(1) + u32(0)
    seeds['syn-no-ops'] = ctrl(0x00, 0, 0x00, 0x00) + Trace(conf(), 0, []).data[:-len(block(b'OPS ', u32(0)))]
    write_dir(os.path.join(corpus, 'fuzz_trace'), seeds)
    write_dir(os.path.join(corpus, 'fuzz_idx'), idx_seeds())
    write_dir(os.path.join(corpus, 'fuzz_npy'), npy_seeds())
    write_dir(os.path.join(corpus, 'fuzz_pgm'), pgm_seeds())
    write_dir(os.path.join(corpus, 'fuzz_sweep'), sweep_seeds())


def idx_seeds():
    img = struct.pack('>IIII', 0x803, 3, 2, 2) + bytes(range(12))
    return {'images-3x2x2': img, 'images-3x2x2.gz': gzip.compress(img, mtime=0),
            'trailing-garbage': img + b'xx', 'truncated': img[:20],
            'labels-idx1': struct.pack('>II', 0x801, 3) + bytes(3),
            # regression: a header claiming 2 GB in a 31-byte file was allocated before reading
            'regress-claims-2gb': struct.pack('>IIII', 0x803, 3, 2, 0x14000506) + b'\x07' + b'S' * 9 + b'\x08\x09\x9a\x0a\x0b'}


def npy_seeds():
    def npy(major, header, payload):
        h = header.encode()
        pad = (-(len(h) + 1 + (10 if major == 1 else 12))) % 64
        h += b' ' * pad + b'\n'
        ln = struct.pack('<H', len(h)) if major == 1 else struct.pack('<I', len(h))
        return b'\x93NUMPY' + bytes([major, 0]) + ln + h + payload
    return {
        'tnhw-v1': npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 1, 2, 2), }", bytes(range(8))),
        'nthwc-v2': npy(2, '{"descr": "<u1", "fortran_order": False, "shape": (1, 2, 1, 2, 3)}', bytes(12)),
        'v3-float': npy(3, "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", bytes(4)),
        'rank3': npy(1, "{'shape': (2, 2, 2), 'descr': '|u1', 'fortran_order': False}", bytes(8)),
        'fortran': npy(1, "{'descr': '|u1', 'fortran_order': True, 'shape': (1, 1, 1, 1), }", bytes(1)),
        'shape-overflow': npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (4294967295, "
                              "4294967295, 4294967295, 2), }", bytes(1)),
    }


def pgm_seeds():
    return {
        'two-frames': b'P5\n2 2\n255\n\x00\x10\x20\x30--pgm--P5 2 2 255 \x40\x50\x60\x70',
        'comments-maxval': b'P5\n# a comment\n3 1\n# another\n15\n\x00\x07\x0f',
        'sizes-differ': b'P5 1 1 255 \x00--pgm--P5 2 1 255 \x00\x01--pgm--txt not a frame',
        'sixteen-bit': b'P5 1 1 65535 \x00\x00',
    }


def sweep_seeds():
    return {
        'study': b'''# a study
name demo-1
trials 2
common --steps 100 --seed {trial}
condition cpu group=host : --backend cpu --threads 1
condition gpu group=host trials=3 : --backend cuda "--tag=a b" 'x y' \\#not-comment
factor init random : --init-seed {trial}
factor init fixed : --init-seed 1
factor lr hi : --lr 3
factor lr lo : --lr 0.3
compare group=cpu group=gpu final escape phases
compare init=random init=fixed
pair cond=cpu-random-hi cond=gpu-random-hi
pair init=random init=fixed
''',
        'minimal': b'common --steps 5\n',
        'errors': b'condition a : -o x.dtr\nfactor group x : --lr 1\n',
        'placeholder': b'factor f a:--run {cond}-{bogus}\ncompare f=a *\n',
        'name-twice': b'condition a-b : --x\ncondition a trials=2 trials=3 : --y\n',
        'crossed-name-twice': b'condition a-b : --x\ncondition a : --y\nfactor f b : --z\n',
        'no-pair-agrees': b'common --x\nfactor f a\nfactor f b\nfactor g c\nfactor g d\npair f=a g=d\n',
        'too-many': b'common --x\n' + b''.join(b'factor %c l%d\n' % (f, i) for f in b'abc' for i in range(22)),
        'long-name': b'# ' + b'c' * 2000 + b'\ncommon --x\nfactor f ' + b'n' * 600 + b'\nfactor g ' +
                     b'm' * 600 + b'\n',
        # regression: duplicate names and pairs were found in quadratic time
        'regress-3600-conditions': b'common --x\n' + b''.join(
            b'factor %c l%d :--y\n' % (f, i) for f in b'ab' for i in range(60)) + b''.join(
            b'pair a=l%d a=l%d\n' % (k, k + 1) for k in range(5)),
    }


def write_dir(d, seeds):
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
