#!/usr/bin/env python3
# test_gpu.py: the PyTorch adapter on a CUDA GPU (tensors hashed on the
# device by libdivtrace): deterministic runs give identical traces; runs with
# torch's nondeterministic index_add_ (float atomics) diverge and diff names
# that module as the first divergence and the origin; a CPU run and a GPU run
# diverge, with identical parameters and input at step 0 (the device hash is
# the host hash); a GPU trace's records match torch's own statistics;
# deferred records (defer=True, the default) give the same trace as records
# hashed at once (defer=False), also when a module's output is changed in
# place by the next module, and a tensor changed in place before its
# deferred hash in a later step stops the run with a clear error; the C
# core's traces are the Python core's; a CUDA call or an allocation of the
# library that fails (DIVTRACE_TEST_FAIL_CUDA, _ALLOC) stops the recording
# with one DivtraceWarning and leaves the training's losses as unrecorded.
# Exit 77 (skip) without a CUDA device. Run by tests/torch/gpu_checks.sh.
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before torch is imported

import contextlib  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from torch_testlib import (MLP, Checks, DT, InplaceNet, batches, check_captures, check_cores,  # noqa: E402
                           check_deferred, check_shim, diff_json, divtrace, show_json, tmpdir, train,
                           varied_loop)

C = Checks()
T = tmpdir()
# DIVTRACE_TEST_DEVICE=cpu runs the same code on the cpu (a dry run of the
# script itself: the GPU expectations then fail)
DEV = os.environ.get("DIVTRACE_TEST_DEVICE", "cuda")


def p(name):
    return os.path.join(T, name)


class Binned(nn.Module):
    """Sums rows into a few bins with index_add_: on CUDA, float atomics in
    an order that changes from run to run, unless deterministic algorithms
    are asked for."""

    def __init__(self, bins=8):
        super().__init__()
        self.bins = bins

    def forward(self, h):  # h (N, F) -> (bins, F)
        idx = torch.arange(h.shape[0], device=h.device) % self.bins
        return h.new_zeros(self.bins, h.shape[1]).index_add_(0, idx, h)


class BinNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 64)
        self.binned = Binned()
        self.fc2 = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc2(self.binned(torch.tanh(self.fc1(x))))


def bin_data(n, device):
    """Many rows per bin (targets per bin)."""
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(16384, 8, generator=g).to(device), torch.randn(8, 4, generator=g).to(device))
            for _ in range(n)]


def arithmetic(deterministic):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = deterministic
    torch.use_deterministic_algorithms(deterministic)


def test_det_nondet():
    data = bin_data(4, DEV)
    arithmetic(True)
    train(p("det1.dtr"), BinNet, steps=4, device=DEV, data=data)
    train(p("det2.dtr"), BinNet, steps=4, device=DEV, data=data)
    rc, js = diff_json(p("det1.dtr"), p("det2.dtr"))
    C.ok(rc == 0, "deterministic algorithms: two GPU runs give identical traces",
         str(js.get("first_divergence")))
    arithmetic(False)
    found = None
    for trial in range(5):  # atomics may, rarely, happen to add in the same order
        train(p("nd1.dtr"), BinNet, steps=4, device=DEV, data=data)
        train(p("nd2.dtr"), BinNet, steps=4, device=DEV, data=data)
        rc, js = diff_json(p("nd1.dtr"), p("nd2.dtr"))
        if rc == 1:
            found = js
            break
    arithmetic(True)
    C.ok(found is not None, "nondeterministic index_add_: two GPU runs diverge")
    if found is not None:
        fd = found["first_divergence"]
        C.ok(fd.get("name") == "binned" and fd.get("kind") == "forward",
             "nondeterministic index_add_: diff names the binned module first", str(fd))
        origins = [o["name"] for o in found.get("origins", [])]
        C.ok("binned" in origins and all(o.startswith("binned") for o in origins),
             "nondeterministic index_add_: binned is the origin", str(origins))
    # the deterministic and the nondeterministic run: configurations differ
    rc, js = diff_json(p("det1.dtr"), p("nd1.dtr"))
    keys = [c["key"] for c in js["config_changes"]]
    C.ok("deterministic_algorithms" in keys, "diff reports deterministic_algorithms as changed", str(keys))


def test_cpu_vs_gpu():
    arithmetic(True)
    train(p("cpu.dtr"), MLP, steps=5)
    train(p("gpu.dtr"), MLP, steps=5, device=DEV)
    rc, js = diff_json(p("cpu.dtr"), p("gpu.dtr"))
    C.ok(rc == 1, "cpu vs gpu: the traces differ", "exit %d" % rc)
    fd = js.get("first_divergence", {})
    C.ok(fd.get("step") == 0 and fd.get("kind") == "forward",
         "cpu vs gpu: parameters and input of step 0 hash alike on both (first divergence a forward op)",
         str(fd))
    keys = [c["key"] for c in js["config_changes"]]
    C.ok("backend" in keys, "cpu vs gpu: diff reports the backend change", str(keys))


def test_gpu_stats():
    """Records hashed on the device against torch's own statistics of the
    same tensors, recomputed here on the GPU."""
    arithmetic(True)
    data = batches(1, device=DEV)
    train(p("g1.dtr"), MLP, steps=1, device=DEV, data=data, checkpoint_every=1)
    torch.manual_seed(0)
    m = MLP().to(DEV)
    x, _ = data[0]
    a1 = m.fc1(x)
    a2 = m.fc2(F.relu(a1))
    a3 = m.fc3(torch.tanh(a2))
    want = {"fc1.weight": m.fc1.weight, "input": x, "fc1": a1, "fc2": a2, "fc3": a3}
    js = show_json(p("g1.dtr"))
    bad = []
    for r in js["steps"][0]["records"]:
        if r["name"] not in want:
            continue
        t = want[r["name"]].detach().double()
        l2, mn, mx = float(t.norm()), float(t.min()), float(t.max())
        if abs(r["l2"] - l2) > 1e-12 * l2 or r["min"] != mn or r["max"] != mx:
            bad.append("%s: %r %r %r vs torch %r %r %r" % (r["name"], r["l2"], r["min"], r["max"], l2, mn, mx))
    C.ok(not bad, "gpu records: L2 norm, min and max as torch computes them", "; ".join(bad))
    C.ok(js["checkpoints"] == [0, 1], "gpu run: checkpoints of device tensors", str(js["checkpoints"]))
    # the loss tensor on the device (the C core passes it to the library,
    # which reads it with the step's records): each step's loss is
    # loss.item()'s, bit for bit
    losses = train(p("g5.dtr"), MLP, steps=5, device=DEV)
    got = [st["loss"] for st in show_json(p("g5.dtr"))["steps"]]
    C.ok(got == losses, "gpu run: each step's loss is loss.item()", "%s vs %s" % (got, losses))


def test_deferred():
    arithmetic(True)
    check_deferred(C, DEV, p)


def test_cores():
    """The C core's GPU traces are the Python core's (also in a loop that
    takes its step paths off their usual case), and with PyTorch's C shim
    the same as without."""
    arithmetic(True)
    check_cores(C, DEV, p, [("mlp", MLP), ("inplace", InplaceNet),
                            ("varied", MLP, lambda path, make: varied_loop(path, make, device=DEV))])
    check_shim(C, DEV, p, [("mlp", MLP), ("inplace", InplaceNet)])


def test_capture():
    """Forward wrappers and forward hooks, one trace, on the GPU."""
    check_captures(C, DEV, p, [("mlp", MLP, None), ("inplace", InplaceNet, None)])


def fault_loop(path, env=None, n=0):
    """An MLP trained with Adam on the device, recorded to path (None: not
    recorded) with env=n set while the trace opens. Returns the losses and
    the DivtraceWarnings; an exception goes to the caller."""
    torch.manual_seed(0)
    model = MLP().to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    if env:
        os.environ[env] = str(n)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ctx = contextlib.nullcontext() if path is None else \
                divtrace.record(model, path, optimizer=opt, checkpoint_every=2)
            with ctx as rec:
                for x, y in batches(6, device=DEV):
                    opt.zero_grad()
                    loss = F.mse_loss(model(x), y)
                    loss.backward()
                    opt.step()
                    if rec is not None:
                        rec.step(loss)
                    losses.append(loss.item())
    finally:
        if env:
            del os.environ[env]
    return losses, [str(w.message) for w in caught if issubclass(w.category, divtrace.DivtraceWarning)]


def test_faults():
    """The library's CUDA calls, then its allocations, failing at a few
    places of a GPU run."""
    arithmetic(True)
    plain, _ = fault_loop(None)
    for env, what in (("DIVTRACE_TEST_FAIL_CUDA", "a CUDA call"), ("DIVTRACE_TEST_FAIL_ALLOC", "an allocation")):
        fired = 0
        for n in (1, 2, 5, 12, 30, 70, 150, 400, 10 ** 6):
            path = p("fault-%s-%d.dtr" % (env[-4:].lower(), n))
            losses, ws = fault_loop(path, env, n)
            C.ok(losses == plain, "%s %d fails: the losses of the run unrecorded" % (what, n))
            C.ok(len(ws) <= 1, "%s %d fails: at most one warning" % (what, n), str(ws))
            if not ws:
                continue
            fired += 1
            if os.path.exists(path):
                js = show_json(path)
                steps = [st["loss"] for st in js["steps"]]
                C.ok(not js["complete"] and steps == plain[:len(steps)],
                     "%s %d fails: the trace a readable prefix" % (what, n), "%s %s" % (js["note"], ws))
        C.ok(fired >= 4, "%s failing: %d runs stopped, each with one warning" % (what, fired))


def main():
    if DEV == "cuda" and not torch.cuda.is_available():
        print("test_gpu.py: torch sees no CUDA device; skipping")
        return 77
    print("divtrace %s, libdivtrace %s, torch %s, %s, adapter core %s" % (
        DT, divtrace.library_path(), torch.__version__, torch.cuda.get_device_name() if DEV == "cuda" else DEV,
        divtrace.record(MLP(), p("x.dtr")).core))
    for t in (test_det_nondet, test_cpu_vs_gpu, test_gpu_stats, test_deferred, test_cores, test_capture,
              test_faults):
        try:
            t()
        except Exception as e:
            import traceback
            traceback.print_exc()
            C.ok(False, "%s ran to its end" % t.__name__, repr(e))
    return C.finish()


if __name__ == "__main__":
    rc = main()
    if rc == 77:
        import shutil
        shutil.rmtree(T, ignore_errors=True)
    else:
        print("traces in %s" % T)
    sys.exit(rc)
