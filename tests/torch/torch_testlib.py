# torch_testlib.py: what the PyTorch adapter's tests share: the divtrace
# program and package (from the environment cli_torch.sh and gpu_checks.sh
# set), small models, a training loop, and checks that count and report.
import contextlib
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.realpath(os.environ.get("top_srcdir") or os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "src", "python"))
import divtrace  # noqa: E402

DT = os.environ.get("DIVTRACE") or os.path.join(TOP, "build", "src", "divtrace")


class Checks:
    """ok/bad counters in the manner of tests/cli_lib.sh: one line per check,
    a summary, and an exit status that says whether all passed."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("ok - %s" % what)
        else:
            self.failed += 1
            print("FAIL - %s%s" % (what, (": " + detail) if detail else ""))
        sys.stdout.flush()
        return cond

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        return 0 if self.failed == 0 and self.passed > 0 else 1

    def run(self, tests):
        """Run each test function; one that crashes is a failed check, and
        the rest still run. Returns finish()'s exit status."""
        for t in tests:
            try:
                t()
            except Exception as e:
                import traceback
                traceback.print_exc()
                self.ok(False, "%s ran to its end" % t.__name__, repr(e))
        return self.finish()


def train_step(model, opt, x, y, rec=None):
    """One step of the tests' training loops (MSE, backward, the
    optimizer), given to the recorder rec when there is one; the loss."""
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    if rec is not None:
        rec.step(loss)
    return loss


def tmpdir():
    return tempfile.mkdtemp(prefix="divtrace-torch-", dir=os.environ.get("TMPDIR"))


def run_dt(*args):
    """(exit status, stdout, stderr) of the divtrace program."""
    p = subprocess.run([DT] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr


def show_json(path):
    rc, out, err = run_dt("show", "--json", path)
    if rc != 0:
        raise RuntimeError("divtrace show --json %s: exit %d: %s" % (path, rc, err.strip()))
    return json.loads(out)


def diff_json(a, b):
    rc, out, err = run_dt("diff", "--json", a, b)
    if rc not in (0, 1):
        raise RuntimeError("divtrace diff --json %s %s: exit %d: %s" % (a, b, rc, err.strip()))
    return rc, json.loads(out)


class MLP(nn.Module):
    """Three linear layers with functional activations between them (so the
    adapter has to follow autograd to link fc2 to fc1)."""

    def __init__(self, nin=8, hidden=16, nout=4):
        super().__init__()
        self.fc1 = nn.Linear(nin, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, nout)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        return self.fc3(h)


def batches(n, nin=8, nout=4, batch=32, seed=1, device="cpu"):
    """n fixed (x, y) batches, made on the cpu from seed."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(batch, nin, generator=g)
        y = torch.randn(batch, nout, generator=g)
        out.append((x.to(device), y.to(device)))
    return out


def train(path, make_model, steps=5, seed=0, device="cpu", lr=1e-2, checkpoint_every=2, patch=None,
          fail_at=None, config=None, data=None, after_step=None, **record_kw):
    """Train make_model() with Adam on fixed batches, recording to path;
    patch(model) may change the model first; fail_at raises RuntimeError in
    that step, after its forward pass; after_step(step, model, x) runs
    after each rec.step, inside the recording; record_kw go to
    divtrace.record. Returns the losses."""
    torch.manual_seed(seed)
    model = make_model().to(device)
    if patch is not None:
        patch(model)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    data = data if data is not None else batches(steps, device=device)
    losses = []
    cfg = {"seed": seed}
    cfg.update(config or {})
    with divtrace.record(model, path, config=cfg, optimizer=opt, checkpoint_every=checkpoint_every,
                         **record_kw) as rec:
        for s in range(steps):
            x, y = data[s]
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            if fail_at == s:
                raise RuntimeError("planted failure in step %d" % s)
            loss.backward()
            opt.step()
            rec.step(loss)
            losses.append(loss.item())
            if after_step is not None:
                after_step(s, model, x)
    return losses


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


def check_deferred(C, device, p):
    """Deferred records (the default) against records made at once, on
    device: with a module's output changed in place by the next module,
    against torch's statistics, and with a change the first step did not
    show (a DivtraceError that names it). p(name): a path for a trace."""
    data = batches(6, device=device)
    recs = {}

    def run(name, defer, make=InplaceNet, touch=None):
        torch.manual_seed(0)
        model = make().to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        with divtrace.record(model, p(name), config={"seed": 0}, optimizer=opt, defer=defer) as rec:
            for s in range(6):
                x, y = data[s]
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                if touch is not None:
                    touch(model, s)
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

    # a parameter changed in place between optimizer.step() and rec.step
    # from step 2 on: the updates' hashes were queued at the optimizer's
    # post-step hook, before the change, so the trace is the one records
    # made at once give (the updates before the change, the next step's
    # parameters after it)
    def touch(model, s):
        if s >= 2:
            with torch.no_grad():
                model.fc2.weight.mul_(0.5)
    run("touch-now.dtr", False, touch=touch)
    err = None
    try:
        run("touch-later.dtr", True, touch=touch)
    except divtrace.DivtraceError as e:
        err = str(e)
    rc, js = diff_json(p("touch-now.dtr"), p("touch-later.dtr")) if err is None else (None, {})
    C.ok(err is None and rc == 0, "deferred records: a parameter changed after the optimizer's step is "
         "recorded as records made at once record it", str(err or js.get("first_divergence")))
    hs = [{x["name"]: x["hash"] for x in st["records"]} for st in show_json(p("touch-later.dtr"))["steps"]]
    C.ok(hs[3]["fc2.weight"] != hs[2]["fc2.weight.update"] and hs[2]["fc2.weight"] == hs[1]["fc2.weight.update"],
         "deferred records: the change shows between step 2's update and step 3's parameter, not before")


@contextlib.contextmanager
def environ(**values):
    """Environment variables set (None: unset) for the with-block, then as
    they were."""
    was = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in was.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def varied_loop(path, make_model, steps=5, device="cpu", **record_kw):
    """A training loop that takes the C core's step paths off their usual
    case in some steps: the model called twice a step (the second time
    with a keyword argument), a forward pass under no_grad and one paused
    between steps, the loss passed as a tensor or as a number, checkpoints
    every second step."""
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = batches(steps, device=device)
    with divtrace.record(model, path, config={"seed": 0}, optimizer=opt, checkpoint_every=2,
                         **record_kw) as rec:
        for s in range(steps):
            x, y = data[s]
            opt.zero_grad()
            loss = F.mse_loss(model(x), y) + 0.5 * F.mse_loss(model(x=x * 0.5), y)
            with torch.no_grad():
                model(x)
            loss.backward()
            opt.step()
            rec.step(loss if s % 2 else loss.item())
            with rec.paused():
                model(x)


def check_cores(C, device, p, makers):
    """The C core (divtrace._fast) and the Python core record the same
    trace: each model of makers (name, make[, loop]) trained twice with
    loop (default train), once with each core (DIVTRACE_ADAPTER_CORE), and
    `divtrace show --json` of the two traces equal but for the header's
    adapter_core and adapter_tensor_queries. Skipped (one line) when no C
    core loads."""
    from divtrace import _lib
    if _lib.load_fast() is None:
        print("skip - C core against Python core: no C core loads (%s)" % _lib._fast_why)
        return
    for m in makers:
        name, make = m[0], m[1]
        loop = m[2] if len(m) > 2 else (lambda path, make: train(path, make, device=device, steps=4))
        js, cores = {}, {}
        for core in ("python", "c"):
            path = p("core-%s-%s.dtr" % (name, core))
            with environ(DIVTRACE_ADAPTER_CORE=core):
                loop(path, make)
            js[core] = show_json(path)
            cores[core] = js[core]["config"].pop("adapter_core", None)
            js[core]["config"].pop("adapter_tensor_queries", None)
        C.ok(cores == {"python": "python", "c": "c"}, "%s: the header names each core" % name, str(cores))
        diff = [k for k in set(js["c"]) | set(js["python"]) if js["c"].get(k) != js["python"].get(k)]
        C.ok(not diff and len(js["c"]["steps"]) >= 4,
             "%s on %s: the C core's trace is the Python core's, record for record" % (name, device),
             "differ: %s" % diff)


def check_shim(C, device, p, makers):
    """The C core's tensor queries through PyTorch's C shim (divtrace/_shim.py)
    and through Python record the same trace: each (name, make) of makers
    trained with DIVTRACE_ADAPTER_SHIM unset and =0, the headers naming
    which, and `divtrace show --json` equal but for adapter_tensor_queries.
    Skipped when no C core loads; a shim that is not taken is a failure
    where torch has it (CHECK_SHIM=optional makes it a skip)."""
    from divtrace import _lib, _shim
    if _lib.load_fast() is None:
        print("skip - shim against Python queries: no C core loads (%s)" % _lib._fast_why)
        return
    for name, make in makers:
        js, how = {}, {}
        for shim in ("1", "0"):
            path = p("shim-%s-%s-%s.dtr" % (name, device, shim))
            with environ(DIVTRACE_ADAPTER_CORE="c", DIVTRACE_ADAPTER_SHIM=shim):
                train(path, make, device=device, steps=4)
            js[shim] = show_json(path)
            how[shim] = js[shim]["config"].pop("adapter_tensor_queries", None)
        if how["1"] == "python" and os.environ.get("CHECK_SHIM") == "optional":
            print("skip - shim against Python queries: the shim is not taken (%s)" % _shim.why)
            return
        want = "torch-c-shim+cuda" if device == "cuda" else "torch-c-shim"
        C.ok(how == {"1": want, "0": "python"}, "%s on %s: the header says how tensors were "
             "queried" % (name, device), "%s (%s)" % (how, _shim.why))
        diff = [k for k in set(js["1"]) | set(js["0"]) if js["1"].get(k) != js["0"].get(k)]
        C.ok(not diff, "%s on %s: queries through the shim record what Python queries record" % (name, device),
             "differ: %s" % diff)


def check_captures(C, device, p, cases, steps=3):
    """Forward wrappers (capture="wrap") and forward hooks (capture="hooks")
    record the same trace: each (name, make, patch) of cases trained once
    with each, and `divtrace show --json` of the two traces equal but for
    the header's module_capture."""
    for name, make, patch in cases:
        js = {}
        for cap in ("wrap", "hooks"):
            path = p("cap-%s-%s-%s.dtr" % (name, device, cap))
            train(path, make, steps=steps, device=device, patch=patch, capture=cap)
            js[cap] = show_json(path)
            got = js[cap]["config"].pop("module_capture", None)
            C.ok(got == cap, "%s: the header names capture=%s" % (name, cap), str(got))
        diff = [k for k in set(js["wrap"]) | set(js["hooks"]) if js["wrap"].get(k) != js["hooks"].get(k)]
        nrec = len(js["wrap"]["steps"][0]["records"]) if js["wrap"]["steps"] else 0
        C.ok(not diff and nrec > 0, "%s on %s: forward wrappers record what forward hooks record, %d records "
             "a step" % (name, device, nrec), "differ: %s" % diff)


class ConvNet(nn.Module):
    """Every module type the oracle checks, in one small net."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=2, dilation=2, groups=2)
        self.act2 = nn.Tanh()
        self.conv3 = nn.Conv1d(8, 4, 3, padding="same")
        self.norm = nn.LayerNorm(64)
        self.gelu = nn.GELU()
        self.fc1 = nn.Linear(64, 32)
        self.hs = nn.Hardsigmoid()
        self.fc2 = nn.Linear(32, 10)
        self.sig = nn.Sigmoid()
        self.soft = nn.Softmax(dim=1)

    def forward(self, x):
        h = self.act2(self.conv2(self.act1(self.conv1(x))))        # (N, 8, 8, 8)
        h = self.conv3(h.flatten(2))                                 # (N, 4, 64)
        h = self.gelu(self.norm(h)).mean(1)                          # (N, 64)
        h = self.fc2(self.hs(self.fc1(h)))
        return self.sig(h) + self.soft(h)


def train_convnet(path, opt_name="adam", plant=None, steps=3, check_steps=(0, 2), device="cpu"):
    """ConvNet trained a few steps with check data at check_steps
    (test_explain.py, test_explain_gpu.py); plant: "module" (fc1 adds 1e-3),
    "update" (fc2.bias moved inside step 0), "early" (conv1 evaluated in
    float64 and rounded once: a valid evaluation whose bits differ) or
    "early+module" (both: fc1's bug behind conv1's rounding)."""
    torch.manual_seed(0)
    model = ConvNet().to(device)
    crit = nn.CrossEntropyLoss(label_smoothing=0.1)
    if opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    elif opt_name == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)
    if plant in ("module", "early+module"):
        fc1 = model.fc1
        fc1.forward = lambda x: F.linear(x, fc1.weight, fc1.bias) + 1e-3
    if plant in ("early", "early+module"):
        c1 = model.conv1
        c1.forward = lambda x: F.conv2d(x.double(), c1.weight.double(), c1.bias.double(),
                                        padding=1).float()
    g = torch.Generator().manual_seed(1)
    with divtrace.record(model, path, optimizer=opt, check_steps=check_steps) as rec:
        rec.add_module("crossentropyloss", crit)
        for s in range(steps):
            x, y = torch.randn(16, 3, 16, 16, generator=g), torch.randint(0, 10, (16,), generator=g)
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = crit(model(x), y)
            loss.backward()
            opt.step()
            if plant == "update" and s == 0:
                with torch.no_grad():
                    model.fc2.bias[3] += 1e-3       # inside the step: its update is not the optimizer's
            rec.step(loss)
