# torch_testlib.py: what the PyTorch adapter's tests share: the divtrace
# program and package (from the environment cli_torch.sh and gpu_checks.sh
# set), small models, a training loop, and checks that count and report.
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.environ.get("top_srcdir") or os.path.normpath(os.path.join(HERE, "..", ".."))
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
          fail_at=None, config=None, data=None, **record_kw):
    """Train make_model() with Adam on fixed batches, recording to path;
    patch(model) may change the model first; fail_at raises RuntimeError in
    that step, after its forward pass; record_kw go to divtrace.record.
    Returns the losses."""
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
    return losses
