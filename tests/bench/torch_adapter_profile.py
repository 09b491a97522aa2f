#!/usr/bin/env python3
# torch_adapter_profile.py: where the PyTorch adapter's recording time goes:
# the Python functions of a traced training step by own time (cProfile), next
# to the same steps untraced, for one configuration of torch_models.py.
# --lib-calls instead times each libdivtrace function the adapter calls (the
# host's time inside the call, waits included) per traced step, with the
# Python core, whose calls all go through ctypes. --phases times each part
# of a traced step the adapter adds (the root's step start, the module
# outputs, the optimizer's two hooks, rec.step with its loss.item()) with
# the core the package picks, and a few single tensor queries.
# Usage: python3 tests/bench/torch_adapter_profile.py [torch_models.py options,
#        e.g. --config ae or --config pn-64-b1] [--steps N] [--lib-calls | --phases]
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


LIB_CALLS = ("divtrace_step_begin", "divtrace_record_many", "record_untyped", "divtrace_flush",
             "divtrace_step_end")


def lib_calls(cfg, device, margs, n):
    """Per traced step: each library function's calls and host time (us)."""
    from divtrace import _lib
    lib = _lib.load()
    acc = {f: [0, 0.0] for f in LIB_CALLS}
    saved = {f: getattr(lib, f) for f in LIB_CALLS}

    def timed(name, fn):
        def call(*a):
            t0 = time.perf_counter()
            try:
                return fn(*a)
            finally:
                acc[name][0] += 1
                acc[name][1] += time.perf_counter() - t0
        return call
    was = os.environ.get("DIVTRACE_ADAPTER_CORE")
    os.environ["DIVTRACE_ADAPTER_CORE"] = "python"
    try:
        for f in LIB_CALLS:
            setattr(lib, f, timed(f, saved[f]))
        model, opt, data = tm.build(cfg, device, margs.seed, capturable=False)
        rec = divtrace.record(model, os.path.join(tempfile.mkdtemp(prefix="divtrace-prof-"), "p.dtr"),
                              config={"model": cfg["name"]}, optimizer=opt).open()
        for i in range(3 + n):
            if i == 3:
                for v in acc.values():
                    v[:] = [0, 0.0]
                t0 = time.perf_counter()
            loss = tm.train_step(model, opt, data)
            rec.step(loss)
            loss.item()
        ms = (time.perf_counter() - t0) * 1e3 / n
        rec.close(0)
    finally:
        for f in LIB_CALLS:
            setattr(lib, f, saved[f])
        if was is None:
            os.environ.pop("DIVTRACE_ADAPTER_CORE", None)
        else:
            os.environ["DIVTRACE_ADAPTER_CORE"] = was
    print("## %s: traced %.3f ms/step (Python core); libdivtrace calls per step\n" % (tm.describe(cfg), ms))
    print("| function | calls per step | us per step |")
    print("| --- | ---: | ---: |")
    for f in LIB_CALLS:
        print("| %s | %.1f | %.1f |" % (f, acc[f][0] / n, acc[f][1] * 1e6 / n))
    print()


def phases(cfg, device, margs, n):
    """Per traced step: the host time (us) of each part the adapter adds,
    each timed from Python around the hook or call it is (the timing itself
    costs about a microsecond a part); then single calls in a loop."""
    acc = {}
    pc = time.perf_counter_ns

    def timed(name, fn):
        def call(*a, **k):
            t0 = pc()
            try:
                return fn(*a, **k)
            finally:
                acc[name] = acc.get(name, 0) + pc() - t0
        return call
    model, opt, data = tm.build(cfg, device, margs.seed, capturable=False)
    rec = divtrace.record(model, os.path.join(tempfile.mkdtemp(prefix="divtrace-prof-"), "p.dtr"),
                          config={"model": cfg["name"]}, optimizer=opt)
    # what the hooks call (the C core's step paths, or the Recorder's methods)
    pre, opt_pre, opt_post = rec._fns
    rec._fns = (timed("step start and input (root, before forward)", pre),
                timed("optimizer pre-hook (gradients, flush)", opt_pre),
                timed("optimizer post-hook (updates, flush)", opt_post))
    make = rec._make_forward_hook
    rec._make_forward_hook = lambda *a: timed("module outputs (after each forward)", make(*a))
    rec.open()
    step = timed("rec.step (its loss.item(), the step's end)", rec.step)
    item = timed("the loop's own loss.item()", lambda t: t.item())
    for i in range(3 + n):
        if i == 3:
            acc.clear()
            t0 = pc()
        loss = tm.train_step(model, opt, data)
        step(loss)
        item(loss)
    total = (pc() - t0) / n / 1e3
    rec.close(0)
    print("## %s: traced step %.1f us (core %s), parts per step\n" % (tm.describe(cfg), total, rec.core))
    print("| part | us per step |")
    print("| --- | ---: |")
    for k, v in acc.items():
        print("| %s | %.1f |" % (k, v / n / 1e3))
    t = data if isinstance(data, torch.Tensor) else next(model.parameters())
    y = t * 2
    one = torch.ones(1, device=device).sum()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    calls = [("t.dtype", lambda: t.dtype), ("t.shape", lambda: t.shape), ("t.data_ptr()", lambda: t.data_ptr()),
             ("t.is_contiguous()", lambda: t.is_contiguous()), ("t._version", lambda: y._version),
             ("scalar.item() (stream idle)", lambda: one.item())]
    if raw is not None and device.type == "cuda":
        calls.append(("_cuda_getCurrentRawStream(0)", lambda: raw(0)))
    print()
    print("| call | us |")
    print("| --- | ---: |")
    for name, f in calls:
        for _ in range(100):
            f()
        m = 2000
        t0 = pc()
        for _ in range(m):
            f()
        print("| %s | %.2f |" % (name, (pc() - t0) / m / 1e3))
    print()


def main(argv):
    n = 10
    if "--steps" in argv:
        k = argv.index("--steps")
        n = int(argv[k + 1])
        del argv[k:k + 2]
    only_lib = "--lib-calls" in argv
    if only_lib:
        argv.remove("--lib-calls")
    only_phases = "--phases" in argv
    if only_phases:
        argv.remove("--phases")
    margs, cfgs = tm.parse_args(argv)
    device = torch.device(margs.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tm.set_arithmetic(not margs.no_fill_uninitialized)
    for cfg in cfgs:
        if only_lib:
            lib_calls(cfg, device, margs, n)
            continue
        if only_phases:
            phases(cfg, device, margs, n)
            continue
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
