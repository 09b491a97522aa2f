#!/usr/bin/env python3
# torch_adapter_profile.py: where the PyTorch adapter's recording time goes:
# the Python functions of a traced training step by own time (cProfile), next
# to the same steps untraced, for one configuration of torch_models.py.
# Usage: python3 tests/bench/torch_adapter_profile.py [torch_models.py options,
#        e.g. --config ae or --config pn1] [--steps N]
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "python"))

import torch_models as tm  # noqa: E402
import torch  # noqa: E402

import divtrace  # noqa: E402


def steps(cfg, device, margs, traced, n, prof):
    model, opt, data = tm.build(cfg, device, margs.seed, capturable=False)
    rec = None
    tmp = tempfile.mkdtemp(prefix="divtrace-prof-")
    if traced:
        rec = divtrace.record(model, os.path.join(tmp, "p.dtr"), config={"model": cfg["name"]},
                              optimizer=opt).open()
    for _ in range(3):
        loss = tm.train_step(model, opt, data)
        if rec is not None:
            rec.step(loss)
        loss.item()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    for _ in range(n):
        loss = tm.train_step(model, opt, data)
        if rec is not None:
            rec.step(loss)
        loss.item()
    if prof:
        prof.disable()
    ms = (time.perf_counter() - t0) * 1e3 / n
    if rec is not None:
        rec.close(0)
    return ms


def main(argv):
    n = 10
    if "--steps" in argv:
        k = argv.index("--steps")
        n = int(argv[k + 1])
        del argv[k:k + 2]
    margs, cfgs = tm.parse_args(argv)
    device = torch.device(margs.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tm.set_arithmetic(not margs.no_fill_uninitialized)
    for cfg in cfgs:
        base = steps(cfg, device, margs, False, n, None)
        traced = steps(cfg, device, margs, True, n, None)
        print("## %s: untraced %.3f ms/step, traced %.3f ms/step (%+.1f%%), no profiler" % (
            tm.describe(cfg), base, traced, 100 * (traced / base - 1)))
        for tr in (False, True):
            p = cProfile.Profile()
            ms = steps(cfg, device, margs, tr, n, p)
            s = io.StringIO()
            st = pstats.Stats(p, stream=s)
            st.sort_stats("tottime").print_stats(22)
            print("\n### %s, under cProfile: %.3f ms/step\n" % ("traced" if tr else "untraced", ms))
            print("\n".join(s.getvalue().splitlines()[:40]))
        tm.release(device)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
