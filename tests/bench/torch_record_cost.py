#!/usr/bin/env python3
# torch_record_cost.py: what one libdivtrace record of a CUDA tensor costs,
# by size: the host's time per divtrace_record call (ctypes included, the
# way the PyTorch adapter calls it), and the device's time per record kernel
# on the caller's stream, measured with the stream held back by a spin
# kernel while the records are queued, so that CUDA events time the record
# kernels back to back and not the host's rate of launching them.
# Usage: python3 tests/bench/torch_record_cost.py [--n N]
import ctypes
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "python"))

import torch  # noqa: E402

from divtrace import _lib  # noqa: E402

SIZES = [256, 4096, 16384, 65536, 100352, 262144, 1048576]


def main(argv):
    n = 200
    if "--n" in argv:
        n = int(argv[argv.index("--n") + 1])
    if not torch.cuda.is_available():
        print("torch_record_cost: skipped: no CUDA device", file=sys.stderr)
        return 77
    lib = _lib.load()
    dev = torch.device("cuda")
    tmp = tempfile.mkdtemp(prefix="divtrace-cost-")
    cfg = (ctypes.c_char_p * 3)(b"model", b"record-cost", None)
    rec = lib.record_untyped
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    print("| floats | KiB | host us / record | device us / record |")
    print("| ---: | ---: | ---: | ---: |")
    for size in SIZES:
        # a trace per size: every step of a trace records the same names
        h = ctypes.c_void_p()
        _lib.check(lib.divtrace_open(ctypes.byref(h), os.path.join(tmp, "c%d.dtr" % size).encode(),
                                     cfg, b"op"))
        step = 0
        x = torch.randn(size, device=dev)
        shape = _lib.shape_array((size,))
        names = [("t%d.%d" % (size, k)).encode() for k in range(n)]
        host, gpu = [], []
        for rep in range(4):
            _lib.check(lib.divtrace_step_begin(h, step), h)
            torch.cuda.synchronize()
            # hold the stream back while the records are queued
            torch.cuda._sleep(int(2e6 + 1e5 * n))
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            t0 = time.perf_counter()
            ptr = ctypes.c_void_p(x.data_ptr())
            for k in range(n):
                rc = rec(h, names[k], b"x", _lib.FORWARD, ptr, _lib.DEVICE, stream, 1, shape, None, 0)
                if rc < 0:
                    _lib.check(rc, h)
            t1 = time.perf_counter()
            e1.record()
            torch.cuda.synchronize()
            _lib.check(lib.divtrace_step_end(h, 0.0), h)
            step += 1
            if rep == 0:
                continue  # scratch and records grow in the first
            host.append((t1 - t0) * 1e6 / n)
            gpu.append(e0.elapsed_time(e1) * 1e3 / n)
        print("| %d | %.1f | %.2f | %.2f |" % (size, size * 4 / 1024, statistics.median(host),
                                               statistics.median(gpu)))
        lib.divtrace_close(h, 0, None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
