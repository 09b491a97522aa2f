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
# deferred hash in a later step stops the run with a clear error.
# Exit 77 (skip) without a CUDA device. Run by tests/torch/gpu_checks.sh.
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before torch is imported

import sys  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from torch_testlib import MLP, Checks, DT, batches, diff_json, divtrace, show_json, tmpdir, train  # noqa: E402

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


class InplaceNet(nn.Module):
    """fc1's output is changed in place by the ReLU module after it (its
    record must be of the values before); from step `mutate_from` on,
    forward also doubles fc2's output in place after fc2's hook ran (a
    change the first step did not show)."""

    def __init__(self, mutate_from=None):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)
        self.mutate_from = mutate_from
        self.calls = 0

    def forward(self, x):
        h = self.act(self.fc1(x))
        h = self.fc2(h)
        if self.mutate_from is not None and self.calls >= self.mutate_from:
            h.mul_(2.0)
        self.calls += 1
        return self.fc3(torch.tanh(h))


def test_deferred():
    arithmetic(True)
    data = batches(6, device=DEV)
    recs = {}

    def run(name, defer, make=InplaceNet):
        torch.manual_seed(0)
        model = make().to(DEV)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        with divtrace.record(model, p(name), config={"seed": 0}, optimizer=opt, defer=defer) as rec:
            for s in range(6):
                x, y = data[s]
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                rec.step(loss)
        recs[name] = rec
        rec.final = {n: q.detach().double() for n, q in model.named_parameters()}
        return rec

    run("now.dtr", False)
    r = run("later.dtr", True)
    rc, js = diff_json(p("now.dtr"), p("later.dtr"))
    C.ok(rc == 0, "deferred records: the same trace as records hashed at once (a ReLU in place after fc1)",
         str(js.get("first_divergence")))
    C.ok(recs["now.dtr"].deferred_per_step == 0 and r.deferred_per_step == r.records_per_step - 1,
         "deferred records: every record but fc1's (changed in place by the ReLU) deferred",
         "%d of %d deferred" % (r.deferred_per_step, r.records_per_step))
    # the last step's updates (a group of records, deferred) against torch's
    # statistics of the trained parameters; each step's parameters against
    # the step before's updates (two groups, one hash)
    js = show_json(p("later.dtr"))
    last = {x["name"]: x for x in js["steps"][-1]["records"]}
    bad = []
    for n, q in r.final.items():
        x = last.get(n + ".update")
        l2, mn, mx = float(q.norm()), float(q.min()), float(q.max())
        if x is None or abs(x["l2"] - l2) > 1e-12 * l2 or x["min"] != mn or x["max"] != mx:
            bad.append("%s: %r vs torch %r %r %r" % (n, x and (x["l2"], x["min"], x["max"]), l2, mn, mx))
    C.ok(not bad, "deferred records: the last updates' L2 norm, min and max as torch computes them",
         "; ".join(bad))
    hs = [{x["name"]: x["hash"] for x in st["records"]} for st in js["steps"]]
    C.ok(all(hs[t + 1][n] == hs[t][n + ".update"] for t in range(len(hs) - 1) for n in r.final),
         "deferred records: each step's parameters hash as the step before's updates")
    fc1 = [x for x in js["steps"][0]["records"] if x["name"] == "fc1"]
    C.ok(len(fc1) == 1 and fc1[0]["min"] < 0, "deferred records: fc1's record is of its output before the "
         "ReLU (negative minimum)", str(fc1[0]["min"] if fc1 else None))
    # fc2's output changed in place from step 2 on, after its record
    err = None
    try:
        run("mut.dtr", True, make=lambda: InplaceNet(mutate_from=2))
    except divtrace.DivtraceError as e:
        err = str(e)
    C.ok(err is not None and "'fc2'" in err and "changed in place" in err and "step 2" in err,
         "deferred records: an output changed in place in a later step stops the run, naming it", str(err))
    js = show_json(p("mut.dtr"))
    C.ok(len(js["steps"]) == 2, "deferred records: the stopped trace keeps its 2 complete steps",
         "%d steps" % len(js["steps"]))
    run("mut-now.dtr", False, make=lambda: InplaceNet(mutate_from=2))
    C.ok(True, "deferred records: the same run with defer=False runs to its end")


def main():
    if DEV == "cuda" and not torch.cuda.is_available():
        print("test_gpu.py: torch sees no CUDA device; skipping")
        return 77
    print("divtrace %s, libdivtrace %s, torch %s, %s" % (DT, divtrace.library_path(), torch.__version__,
                                                         torch.cuda.get_device_name() if DEV == "cuda" else DEV))
    for t in (test_det_nondet, test_cpu_vs_gpu, test_gpu_stats, test_deferred):
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
