#!/usr/bin/env python3
# test_torch.py: the PyTorch adapter (src/python/divtrace) on the cpu, end to
# end through libdivtrace and the divtrace program: identical runs give
# identical traces; a module that computes differently is named as the first
# divergence and the only origin; every record of a trace read back with
# `divtrace show --json` matches what torch computes by itself; an exception
# leaves an incomplete but readable trace; library errors reach Python
# (faults with strict=True: tests/torch/test_faults.py has the rest);
# deferred records (hashed a run at a time at the flush points) equal
# records made at once, also with an output changed in place by the next
# module, and a change the first step did not show stops the run.
# Run by tests/cli_torch.sh (make check).
import copy
import ctypes
import inspect
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch import nn

from torch_testlib import (MLP, TOP, Checks, DT, InplaceNet, batches, check_captures, check_cores, check_deferred,
                           check_shim, diff_json, divtrace, environ, run_dt, show_json, tmpdir, train,
                           varied_loop)

C = Checks()
T = tmpdir()


def p(name):
    return os.path.join(T, name)


# ---- (1) two identical runs, identical traces


def test_identical():
    la = train(p("a.dtr"), MLP)
    lb = train(p("b.dtr"), MLP)
    C.ok(la == lb, "identical runs: same losses")
    rc, out, err = run_dt("diff", p("a.dtr"), p("b.dtr"))
    C.ok(rc == 0, "identical runs: divtrace diff exits 0", "exit %d %s" % (rc, err.strip()))
    C.ok("identical" in out, "identical runs: diff says identical", out[:400])
    js = show_json(p("a.dtr"))
    C.ok(js["complete"] and js["end_status"] == 0, "identical runs: trace complete, status 0")
    C.ok(js["checkpoints"] == [0, 2, 4, 5], "checkpoints every 2 steps and at the end",
         str(js["checkpoints"]))
    C.ok(js["config"].get("seed") == "0" and js["config"].get("optimizer") == "Adam"
         and js["config"].get("backend") == "torch-cpu", "configuration: user keys and the adapter's",
         str(js["config"]))

    # an evaluation pass between steps (no_grad, or paused) records nothing
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = batches(5)
    with divtrace.record(model, p("eval.dtr"), config={"seed": 0}, optimizer=opt, checkpoint_every=2) as rec:
        for s in range(5):
            x, y = data[s]
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            rec.step(loss)
            with torch.no_grad():
                model(x)
            with rec.paused():
                model(x).sum().backward()
            opt.zero_grad()
    rc, out, err = run_dt("diff", p("a.dtr"), p("eval.dtr"))
    C.ok(rc == 0, "forward passes under no_grad or rec.paused() are not recorded",
         "exit %d %s %s" % (rc, out[:300], err.strip()))


# ---- (2) one module computes differently


def sum_in_float64(model):
    """fc2 accumulates in float64 and rounds once: other bits than float32's
    dot products in some elements."""
    fc2 = model.fc2

    def forward(x):
        return F.linear(x.double(), fc2.weight.double(), fc2.bias.double()).float()
    fc2.forward = forward


def test_divergent_module():
    train(p("a.dtr"), MLP) if not os.path.exists(p("a.dtr")) else None
    train(p("f64.dtr"), MLP, patch=sum_in_float64)
    rc, js = diff_json(p("a.dtr"), p("f64.dtr"))
    C.ok(rc == 1, "fc2 in float64: divtrace diff exits 1", "exit %d" % rc)
    fd = js.get("first_divergence", {})
    C.ok(fd.get("step") == 0 and fd.get("name") == "fc2" and fd.get("kind") == "forward",
         "fc2 in float64: first divergence is fc2's forward output in step 0", str(fd))
    origins = [o["name"] for o in js.get("origins", [])]
    C.ok(origins == ["fc2"], "fc2 in float64: fc2 is the only origin", str(origins))
    rc, out, err = run_dt("diff", p("a.dtr"), p("f64.dtr"))
    C.ok(rc == 1 and "first op: op 8 fc2 " in out, "fc2 in float64: text output names op 8 fc2",
         out[:600])


# ---- (3) the trace against torch's own computation


class Split(nn.Module):
    """Two halves of the features: a tuple of non-contiguous views."""

    def forward(self, h):
        return h[:, :8], h[:, 8:]


class Mean64(nn.Module):
    """The mean of two tensors in float64: a float64 output."""

    def forward(self, a, b):
        return (a.double() + b.double()) * 0.5


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.split = Split()
        self.fc2 = nn.Linear(8, 8)   # called twice a step
        self.mean = Mean64()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        a, b = self.split(F.relu(self.fc1(x)))
        return self.head(self.mean(self.fc2(a), self.fc2(b)).float())


PNAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "head.weight", "head.bias"]
OWNER_RECS = {"fc1": ["fc1"], "fc2": ["fc2", "fc2.1"], "head": ["head"]}


def expected_ops():
    """The op list the adapter documents for Net (divtrace-python(7)), written
    out by hand: (name, type, kind, shape, inputs, previous_step)."""
    shapes = {"fc1.weight": [16, 8], "fc1.bias": [16], "fc2.weight": [8, 8], "fc2.bias": [8],
              "head.weight": [4, 8], "head.bias": [4]}
    ops = [(n, "param", "param", shapes[n], [n + ".update"], True) for n in PNAMES]
    ops += [
        ("input", "input", "input", [32, 8], [], False),
        ("fc1", "linear", "forward", [32, 16], ["input", "fc1.weight", "fc1.bias"], False),
        ("split.0", "split", "forward", [32, 8], ["fc1"], False),
        ("split.1", "split", "forward", [32, 8], ["fc1"], False),
        ("fc2", "linear", "forward", [32, 8], ["split.0", "fc2.weight", "fc2.bias"], False),
        ("fc2.1", "linear", "forward", [32, 8], ["split.1", "fc2.weight", "fc2.bias"], False),
        ("mean", "mean64", "forward", [32, 8], ["fc2", "fc2.1"], False),
        ("head", "linear", "forward", [32, 4], ["mean", "head.weight", "head.bias"], False),
        ("model", "net", "forward", [32, 4], ["input", "head"], False),
    ]
    ops += [(n + ".grad", "grad", "grad", shapes[n], [n] + OWNER_RECS[n.split(".")[0]] + ["model"], False)
            for n in PNAMES]
    ops += [(n + ".update", "adam", "optimizer", shapes[n], [n, n + ".grad"], False) for n in PNAMES]
    return ops


def reference_run(steps, data):
    """The same training as train(..., Net) without divtrace: per step the
    tensors the adapter should have recorded (by name), the loss and the
    gradient norm, all computed here."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    params = dict(model.named_parameters())
    out = []
    for s in range(steps):
        x, y = data[s]
        t = {n: params[n].detach().clone() for n in PNAMES}
        t["input"] = x
        a1 = model.fc1(x)
        h = F.relu(a1)
        s0, s1 = h[:, :8], h[:, 8:]
        f0, f1 = model.fc2(s0), model.fc2(s1)
        m = (f0.double() + f1.double()) * 0.5
        o = model.head(m.float())
        t.update({"fc1": a1, "split.0": s0, "split.1": s1, "fc2": f0, "fc2.1": f1, "mean": m.float(),
                  "head": o, "model": o})
        opt.zero_grad()
        loss = F.mse_loss(o, y)
        loss.backward()
        for n in PNAMES:
            t[n + ".grad"] = params[n].grad.detach().clone()
        opt.step()
        for n in PNAMES:
            t[n + ".update"] = params[n].detach().clone()
        gn = math.sqrt(sum(float(params[n].grad.double().pow(2).sum()) for n in PNAMES))
        out.append((t, loss.item(), gn))
    return out


def close(a, b, rel=1e-12):
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))


def test_against_torch():
    steps = 4
    data = batches(steps)
    train(p("net.dtr"), Net, steps=steps, data=data, checkpoint_every=0)
    js = show_json(p("net.dtr"))
    want = expected_ops()
    ops = js["ops"]
    names = [o["name"] for o in ops]
    C.ok(names == [w[0] for w in want], "op list: names in the documented order", str(names))
    bad = []
    for o, w in zip(ops, want):
        ins = [names[i["op"]] for i in o["inputs"]]
        prev = [i["previous_step"] for i in o["inputs"]]
        if (o["type"], o["kind"], o["shape"], ins) != (w[1], w[2], w[3], w[4]) or any(x != w[5] for x in prev):
            bad.append("%s: %s %s %s %s %s" % (o["name"], o["type"], o["kind"], o["shape"], ins, prev))
    C.ok(not bad, "op list: types, kinds, shapes and inputs as documented", "; ".join(bad))

    ref = reference_run(steps, data)
    C.ok(len(js["steps"]) == steps, "trace holds every step")
    bad_loss, bad_rec = [], []
    for st, (t, loss, gn) in zip(js["steps"], ref):
        if st["loss"] != loss or not close(st["grad_norm"], gn):
            bad_loss.append("step %d: loss %r grad_norm %r, torch %r %r" % (st["step"], st["loss"],
                                                                            st["grad_norm"], loss, gn))
        if [r["name"] for r in st["records"]] != names:
            bad_rec.append("step %d: record names differ" % st["step"])
            continue
        for r in st["records"]:
            x = t[r["name"]].detach().double()
            l2, mn, mx = float(x.norm()), float(x.min()), float(x.max())
            if not (close(r["l2"], l2) and r["min"] == mn and r["max"] == mx and r["nan"] == 0
                    and r["inf"] == 0):
                bad_rec.append("step %d %s: l2 %r min %r max %r, torch %r %r %r" % (
                    st["step"], r["name"], r["l2"], r["min"], r["max"], l2, mn, mx))
    C.ok(not bad_loss, "loss and gradient norm of every step as torch computes them", "; ".join(bad_loss))
    C.ok(not bad_rec, "L2 norm, min and max of every record as torch computes them",
         "; ".join(bad_rec[:5]))

    # hashes: the same bytes hash alike, different bytes differently
    h = [{r["name"]: r["hash"] for r in st["records"]} for st in js["steps"]]
    C.ok(all(x["model"] == x["head"] for x in h), "model's output is head's tensor: same hash")
    C.ok(all(h[s + 1][n] == h[s][n + ".update"] for s in range(steps - 1) for n in PNAMES),
         "a parameter at a step's start hashes as its update of the step before")
    C.ok(all(x["fc2"] != x["fc2.1"] and x["split.0"] != x["split.1"] for x in h),
         "different tensors, different hashes")

    # the text output carries the same records
    rc, out, err = run_dt("show", "--step", "2", p("net.dtr"))
    lines = [ln.split("  ") for ln in out.splitlines() if not ln.startswith("#") and not ln.startswith("step")]
    st = js["steps"][2]
    C.ok(rc == 0 and [(ln[0], ln[2], ln[3]) for ln in lines]
         == [(r["hash"], r["name"], "x".join(map(str, o["shape"]))) for r, o in zip(st["records"], ops)],
         "divtrace show --step 2: hash, name and shape of every record", out[:500])
    t2 = ref[2][0]
    C.ok(all(close(float(ln[4]), float(t2[ln[2]].double().norm()), 1e-9) for ln in lines),
         "divtrace show --step 2: the L2 column as torch computes it")


# ---- (4) an exception in the with-block


def test_exception():
    try:
        train(p("boom.dtr"), MLP, fail_at=3)
        C.ok(False, "exception: propagates out of the with-block")
    except RuntimeError as e:
        C.ok("planted failure in step 3" in str(e), "exception: propagates out of the with-block", str(e))
    rc, out, err = run_dt("show", p("boom.dtr"))
    C.ok(rc == 0, "exception: divtrace show reads the trace", err.strip())
    js = show_json(p("boom.dtr"))
    C.ok(len(js["steps"]) == 3 and [s["step"] for s in js["steps"]] == [0, 1, 2],
         "exception: the steps before the failure are there", str(len(js["steps"])))
    C.ok(js["end_status"] != 0 or not js["complete"], "exception: the trace says the run ended early",
         "complete %s end_status %s" % (js["complete"], js["end_status"]))
    texts = [e["text"] for e in js["events"]]
    C.ok(any("RuntimeError: planted failure in step 3" in x for x in texts),
         "exception: its text is in the trace", str(texts))
    rc, out, err = run_dt("diff", p("a.dtr"), p("boom.dtr"))
    C.ok(rc == 0, "exception: the 3 steps it holds match a complete run", "exit %d %s" % (rc, out[:300]))


# ---- levels, and no optimizer


def run_plain(path, level="op", with_opt=True, steps=3):
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches(steps)
    with divtrace.record(model, path, optimizer=opt if with_opt else None, level=level) as rec:
        for s in range(steps):
            x, y = data[s]
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            rec.step(loss)
    return show_json(path)


def test_levels():
    pn = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]
    js = run_plain(p("lp.dtr"), level="param")
    names = [o["name"] for o in js["ops"]]
    C.ok(names == pn + [n + ".grad" for n in pn] + [n + ".update" for n in pn] and js["trace_level"] == "param",
         "level param: parameters, gradients and updates only", str(names))
    js = run_plain(p("ls.dtr"), level="step")
    C.ok(js["ops"] == [] and len(js["steps"]) == 3 and all(s["records"] == [] for s in js["steps"]),
         "level step: losses only", str(js["ops"])[:200])
    js = run_plain(p("lo.dtr"), with_opt=False)
    ops = {o["name"]: o for o in js["ops"]}
    C.ok("fc1.weight.grad" in ops and "fc1.weight.update" not in ops and ops["fc1.weight"]["inputs"] == [],
         "no optimizer: gradients read at rec.step, no updates, parameters without inputs",
         str(list(ops))[:300])
    C.ok(js["ops"][-1]["name"] == "fc3.bias.grad", "no optimizer: gradients come last")


# ---- errors from the library and the package


class Grows(nn.Module):
    """Calls an extra layer from step 2 on: the op list changes."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.extra = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        h = self.fc(x)
        return self.extra(h) if self.calls > 2 else h


def test_deferred():
    """Deferred records on the cpu: the library hashes each run in one call
    at the flush points."""
    check_deferred(C, "cpu", p)


class SwappedParam(nn.Parameter):
    """A parameter whose data_ptr() names another tensor's memory of its
    size: a subclass that overrides a tensor query, which each core must
    ask as Python would."""

    def data_ptr(self):
        return self.other.data_ptr()


class SwapNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        w = SwappedParam(self.fc.weight.detach().clone())
        w.other = torch.full_like(w.detach(), 0.5)
        self.fc.weight = w

    def forward(self, x):
        return self.fc(x)


class Twice(nn.Module):
    """A layer with a parameter named "1": its second call's output would be
    named twice.1, as the parameter is."""

    def __init__(self):
        super().__init__()
        self.register_parameter("1", nn.Parameter(torch.full((8,), 0.5)))

    def forward(self, x):
        return x * getattr(self, "1")


class NameNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.twice = Twice()
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        return self.out(self.twice(self.twice(self.fc(x))))


def test_cores():
    """Both cores, one trace: the fast paths (MLP), the general ones (Net:
    a tuple of views, a float64 output, a module called twice), an output
    changed in place (InplaceNet), and a module output whose name is a
    parameter's (NameNet: the names a step's start reserves)."""
    check_cores(C, "cpu", p, [("mlp", MLP), ("net", Net), ("inplace", InplaceNet), ("swap", SwapNet),
                              ("names", NameNet),
                              ("varied", MLP, varied_loop), ("varied-net", Net, varied_loop)])
    check_shim(C, "cpu", p, [("mlp", MLP), ("net", Net), ("inplace", InplaceNet), ("swap", SwapNet)])
    # the swapped parameter's records are of the constant tensor its
    # data_ptr() names, in every step, while the weight itself is trained
    for core in ("python", "c"):
        path = p("core-swap-%s.dtr" % core)
        if not os.path.exists(path):
            continue
        hs = [{x["name"]: x["hash"] for x in st["records"]} for st in show_json(path)["steps"]]
        C.ok(len(set(h["fc.weight"] for h in hs)) == 1 and len(set(h["fc.bias"] for h in hs)) == len(hs),
             "%s core: a subclass's own data_ptr() is what it records" % core)
    want = os.environ.get("DIVTRACE_ADAPTER_CORE")
    rec = divtrace.record(MLP(), p("core.dtr"))
    C.ok(want not in ("c", "python") or rec.core == want, "the recorder runs the core asked for",
         "%s, asked for %s" % (rec.core, want))


def test_shim():
    """The C core takes PyTorch's C shim only when its answers for the
    sample tensors are the Python queries': the real functions are taken, a
    shim that misreports a data pointer, a size or contiguity is not."""
    from divtrace import _lib, _shim
    fast = _lib.load_fast()
    got = _shim.functions()
    if fast is None or got is None:
        print("skip - the shim's check: %s" % (_lib._fast_why if fast is None else _shim.why))
        return
    fns, consts = got

    def core():
        return fast.Core(torch.float32, torch.strided, torch.Tensor, lambda d: 0, torch.is_grad_enabled)
    c = core()
    C.ok(c.use_shim(fns, consts, None, _shim._samples(None)) is True and c.shim == 1,
         "the shim's answers for the sample tensors are the Python queries'")
    C.ok(c.use_shim(None, None, None, ()) is False and not c.shim, "use_shim(None, ...) turns it off")
    err = None
    with environ(DIVTRACE_ADAPTER_SHIM="maybe"):
        try:
            _shim.enable(core(), MLP())
        except ValueError as e:
            err = str(e)
    C.ok(err is not None and "DIVTRACE_ADAPTER_SHIM" in err, "DIVTRACE_ADAPTER_SHIM=maybe: ValueError", str(err))
    ptr_t = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
    sizes_t = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)))
    bool_t = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_bool))
    dim_t = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64))
    real_ptr, real_sizes, real_contig, real_dim = ptr_t(fns[7]), sizes_t(fns[6]), bool_t(fns[4]), dim_t(fns[5])
    keep = []

    def off_by_four(h, out):
        r = real_ptr(h, out)
        out[0] = (out[0] or 0) + 4
        return r

    def one_more_row(h, out):
        r = real_sizes(h, out)
        n = ctypes.c_int64()
        real_dim(h, ctypes.byref(n))
        buf = (ctypes.c_int64 * max(1, n.value))(*[out[0][i] for i in range(n.value)])
        buf[0] += 1
        keep.append(buf)
        out[0] = ctypes.cast(buf, ctypes.POINTER(ctypes.c_int64))
        return r

    def always_contiguous(h, out):
        real_contig(h, out)
        out[0] = True
        return 0
    for what, i, fn in (("a data pointer 4 bytes off", 7, ptr_t(off_by_four)),
                        ("a first size one too many", 6, sizes_t(one_more_row)),
                        ("every tensor contiguous", 4, bool_t(always_contiguous))):
        keep.append(fn)
        bad = list(fns)
        bad[i] = ctypes.cast(fn, ctypes.c_void_p).value
        c = core()
        C.ok(c.use_shim(tuple(bad), consts, None, _shim._samples(None)) is False and not c.shim,
             "a shim that reports %s is refused" % what)


class PropForward(nn.Module):
    """A module whose forward is a property: its instance cannot take a
    forward wrapper, so the recorder gives it a forward hook."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    @property
    def forward(self):
        return self.fc


class PropNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.inner = PropForward()

    def forward(self, x):
        return self.inner(torch.tanh(self.fc1(x)))


def test_capture():
    """capture="wrap" (forward wrappers, the default) and capture="hooks"
    (forward hooks) record the same trace; the wrappers go when the trace
    is closed, a forward set on an instance comes back, a deep copy made
    while recording computes with its own parameters and is not recorded,
    and what wrappers cannot do is refused or left to hooks."""
    check_captures(C, "cpu", p, [("mlp", MLP, None), ("net", Net, None), ("inplace", InplaceNet, None),
                                 ("f64", MLP, sum_in_float64), ("prop", PropNet, None)])

    # the wrappers are gone after the block; an instance's own forward is
    # back; a deep copy made while recording is a model of its own
    seen = {}

    def after_step(s, model, x):
        if s != 0:
            return
        seen["model"], seen["own"] = model, model.fc2.__dict__["forward"].forward
        seen["inside"] = {n: type(m.__dict__.get("forward")).__name__ for n, m in model.named_modules()}
        sig = inspect.signature
        fc1 = model.fc1
        seen["sig"] = (str(sig(fc1.forward)), str(sig(type(fc1).forward.__get__(fc1))),
                       str(sig(model.forward)), str(sig(type(model).forward.__get__(model))))
        twin = seen["twin"] = copy.deepcopy(model)
        with torch.no_grad():
            for q in twin.parameters():
                q.mul_(0.5)
            # the copy's fc1 computes with the copy's halved weights
            want = F.linear(x, twin.fc1.weight, twin.fc1.bias)
            got = twin.fc1(x)
            orig = model.fc1(x)
        C.ok(torch.equal(got, want) and not torch.equal(got, orig),
             "a deep copy made while recording computes with its own parameters")
        with torch.enable_grad():
            twin(x)  # not recorded: the trace stays that of the run alone

    train(p("cap-twin.dtr"), MLP, steps=3, patch=sum_in_float64, checkpoint_every=0, after_step=after_step)
    model, twin = seen["model"], seen["twin"]
    C.ok(all(v in ("Wrap", "PyWrap") for v in seen["inside"].values()),
         "every module has a forward wrapper while recording", str(seen["inside"]))
    C.ok(all("forward" not in m.__dict__ for n, m in model.named_modules() if n != "fc2")
         and model.fc2.__dict__.get("forward") is seen["own"],
         "after the block: no wrapper left, fc2's own forward back",
         str({n: m.__dict__.get("forward") for n, m in model.named_modules()}))
    C.ok(seen["sig"][0] == seen["sig"][1] and seen["sig"][2] == seen["sig"][3] and "args" not in seen["sig"][0],
         "inspect.signature of a wrapped forward is forward's own", str(seen["sig"]))
    C.ok(type(twin.__dict__.get("forward")).__name__ not in ("Wrap", "PyWrap"),
         "the deep copy has no wrapper", str(twin.__dict__.get("forward")))
    train(p("cap-alone.dtr"), MLP, steps=3, patch=sum_in_float64, checkpoint_every=0)
    rc, out, err = run_dt("diff", p("cap-alone.dtr"), p("cap-twin.dtr"))
    C.ok(rc == 0, "the deep copy's forward pass is not in the trace", "exit %d %s %s" % (rc, out[:300], err))

    try:
        divtrace.record(nn.DataParallel(MLP()), p("dp.dtr"))
        C.ok(False, "nn.DataParallel with capture='wrap': ValueError")
    except ValueError as e:
        C.ok("capture='hooks'" in str(e), "nn.DataParallel with capture='wrap': ValueError naming hooks", str(e))
    divtrace.record(nn.DataParallel(MLP()), p("dp.dtr"), capture="hooks")
    try:
        divtrace.record(MLP(), p("x.dtr"), capture="patch")
        C.ok(False, "bad capture: ValueError")
    except ValueError:
        C.ok(True, "bad capture: ValueError")


def test_errors():
    try:
        train(p("grows.dtr"), Grows)
        C.ok(False, "op list changes: DivtraceError")
    except divtrace.DivtraceError as e:
        C.ok(e.status_name == "DIVTRACE_EOPS" and "first step" in str(e),
             "op list changes: DivtraceError with the library's message", "%s %s" % (e.status_name, e))
    js = show_json(p("grows.dtr"))
    C.ok(len(js["steps"]) == 2 and any("DivtraceError" in e["text"] for e in js["events"]),
         "op list changes: 2 steps kept, the error in the trace", str(js["events"]))
    try:
        with divtrace.record(MLP(), os.path.join(T, "no", "such", "dir", "x.dtr"), strict=True):
            pass
        C.ok(False, "unwritable path, strict: DivtraceError")
    except divtrace.DivtraceError as e:
        C.ok(e.status_name == "DIVTRACE_EIO" and "divtrace_open" in str(e),
             "unwritable path, strict: DivtraceError from divtrace_open", str(e))
    try:
        divtrace.record(MLP(), p("x.dtr"), level="everything")
        C.ok(False, "bad level: ValueError")
    except ValueError:
        C.ok(True, "bad level: ValueError")
    env = dict(os.environ, DIVTRACE_LIB=os.path.join(T, "missing.so"),
               PYTHONPATH=os.path.join(TOP, "src", "python"))
    r = subprocess.run([sys.executable, "-c", "import divtrace, torch; divtrace.record(torch.nn.Linear(1, 1), 'x').open()"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=T)
    C.ok(r.returncode != 0 and "ImportError: divtrace: DIVTRACE_LIB=" in r.stderr,
         "no library: ImportError naming DIVTRACE_LIB", r.stderr.strip()[-300:])


def main():
    print("divtrace %s, libdivtrace %s, torch %s, adapter core %s" % (
        DT, divtrace.library_path(), torch.__version__, divtrace.record(MLP(), p("x.dtr")).core))
    torch.set_num_threads(1)
    return C.run((test_identical, test_divergent_module, test_against_torch, test_exception, test_levels,
                  test_errors, test_deferred, test_cores, test_shim, test_capture))


if __name__ == "__main__":
    rc = main()
    if rc == 0:
        import shutil
        shutil.rmtree(T, ignore_errors=True)
    else:
        print("traces kept in %s" % T)
    sys.exit(rc)
