#!/usr/bin/env python3
# test_explain.py: divtrace explain and replay on PyTorch traces (issue: the
# same verdict for PyTorch users). Each verdict is checked against what was
# planted, never against a captured output:
#  - one vs two threads of an unchanged script (tests/torch/explain/
#    train_block.py, traced by divtrace run): rounding only, the module
#    where they part (a Linear over 784 inputs) held to the exact oracle;
#  - a bug planted in the forward of the script's own residual block: a bug,
#    named in that module; one in its hand-written backward (a custom
#    autograd function): a bug in B, in that module's backward;
#  - the standard modules of a small convolutional net, recorded through
#    divtrace.record with check data, all within the oracle's bounds
#    (against real PyTorch outputs: the bounds' own test), and a wrong value
#    planted in one module's output or one parameter's update: SEMANTIC,
#    named, also where the runs part first at a valid rewrite further up
#    (the module then is no origin, and only the check of every module
#    finds it);
#  - a module the oracle does not know, where the runs part: "not checked"
#    with its type, no verdict (exit 2), never a clean answer.
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch import nn

from torch_testlib import DT, HERE, Checks, divtrace, run_dt, tmpdir, train_convnet

C = Checks()
T = tmpdir()
SCRIPT = os.path.join(HERE, "explain", "train_block.py")


def p(name):
    return os.path.join(T, name)


def run_script(out, *args, check=False):
    """divtrace run of the unchanged script, one epoch of 8 steps (check:
    with step 0's module data)."""
    r = subprocess.run([DT, "run", "-q"] + (["--check-steps", "0"] if check else []) +
                       ["-o", out, "--", sys.executable, SCRIPT] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=T)
    return r.returncode, r.stderr


def last_line(out):
    lines = [x for x in out.splitlines() if x.strip()]
    return lines[-1] if lines else ""


def test_threads_rounding():
    # t1 holds step 0's module data; t2 does not, and explain re-runs its command
    rc1, e1 = run_script(p("t1.dtr"), "--threads", "1", check=True)
    rc2, e2 = run_script(p("t2.dtr"), "--threads", "2")
    if not C.ok(rc1 == 0 and rc2 == 0, "divtrace run traces the unchanged script", e1 + e2):
        return
    rc, out, err = run_dt("explain", p("t1.dtr"), p("t2.dtr"))
    line = last_line(out)
    C.ok(rc == 0 and line.startswith("rounding only") and "torch_threads 1 | 2" in line,
         "one vs two threads: rounding only, with the thread counts", "exit %d: %s %s" % (rc, out, err))
    C.ok("against the exact oracle" in out and "rounding" in out.split("against the exact oracle")[1],
         "the module where they part is held to the oracle", out)
    C.ok("A: module data of step 0 stored in the trace" in out and
         "B: module data of step 0 from re-running its command" in out,
         "data stored at a check step, or recorded again by re-running the command", out)


def test_forward_bug():
    rc, e = run_script(p("fwd.dtr"), "--bug", "forward", check=True)
    if not C.ok(rc == 0, "the script with a forward bug traced", e):
        return
    rc, out, err = run_dt("explain", p("t1.dtr"), p("fwd.dtr"))
    line = last_line(out)
    C.ok(rc == 1 and line.startswith("bug in A or B: module block (Residual)"),
         "a forward bug in the script's own block: named in that module", "exit %d: %s %s" % (rc, out, err))


def test_backward_bug():
    rc, e = run_script(p("bwd.dtr"), "--bug", "backward", check=True)
    if not C.ok(rc == 0, "the script with a backward bug traced", e):
        return
    rc, out, err = run_dt("explain", p("t1.dtr"), p("bwd.dtr"))
    line = last_line(out)
    C.ok(rc == 1 and line.startswith("bug in B: module block (Residual)'s backward is not the derivative"),
         "a backward bug in a custom autograd function: a bug in B, in that module",
         "exit %d: %s %s" % (rc, out, err))


def test_standard_modules():
    for opt in ("adam", "adamw", "sgd"):
        path = p("conv-%s.dtr" % opt)
        train_convnet(path, opt)
        for step in (0, 2):
            rc, out, err = run_dt("replay", path, "--step", str(step), "--against", "mpfr", "--all")
            checked = [x for x in out.splitlines() if x.strip().endswith(("exact", "rounding"))
                       or ", worst in " in x]
            unchecked = [x for x in out.splitlines() if "not checked:" in x and "custom ConvNet" not in x]
            C.ok(rc == 0 and "SEMANTIC" not in out.replace("0 SEMANTIC", "") and not unchecked and
                 "; 1 not checked" in out,
                 "real PyTorch outputs within the oracle's bounds (%s, step %d)" % (opt, step),
                 "exit %d: %s %s" % (rc, out, err))
            types = {"conv2d", "conv1d", "relu", "tanh", "layernorm", "gelu", "linear", "hardsigmoid",
                     "sigmoid", "softmax", "crossentropyloss", opt}
            seen = {t for t in types if any((" %s " % t) in x for x in checked)}
            C.ok(seen == types, "every type checked (%s, step %d)" % (opt, step),
                 "missing %s" % sorted(types - seen))


def test_planted():
    train_convnet(p("clean.dtr"))
    train_convnet(p("module.dtr"), plant="module")
    rc, out, err = run_dt("explain", p("clean.dtr"), p("module.dtr"))
    C.ok(rc == 1 and last_line(out).startswith("bug in B: module fc1 (linear, step 0) computes wrong values"),
         "a Linear computing wrong values: bug in B, named", "exit %d: %s %s" % (rc, out, err))
    # a module further on that computes wrong values, behind a valid
    # rewrite that makes the runs part first: the origin is rounding, the
    # check of every module finds the bug
    train_convnet(p("early.dtr"), plant="early")
    rc, out, err = run_dt("explain", p("clean.dtr"), p("early.dtr"))
    C.ok(rc == 0 and last_line(out).startswith("rounding only"),
         "conv1 in float64, rounded once: rounding only", "exit %d: %s %s" % (rc, out, err))
    train_convnet(p("behind.dtr"), plant="early+module")
    rc, out, err = run_dt("explain", p("clean.dtr"), p("behind.dtr"))
    C.ok(rc == 1 and last_line(out).startswith("bug in B: module fc1 (linear, step 0) computes wrong values"),
         "a wrong Linear behind a rounding origin: bug in B, named", "exit %d: %s %s" % (rc, out, err))
    train_convnet(p("update.dtr"), plant="update")
    rc, out, err = run_dt("replay", p("update.dtr"), "--step", "0", "--against", "mpfr")
    C.ok(rc == 1 and "fc2.bias.update" in out and "SEMANTIC" in out,
         "an update that is not the optimizer's: SEMANTIC in replay", "exit %d: %s %s" % (rc, out, err))


class NormNet(nn.Module):
    def __init__(self, eps):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8, eps=eps)

    def forward(self, x):
        return self.bn(self.fc(x))


def test_not_checked():
    for name, eps in (("bn-a.dtr", 1e-5), ("bn-b.dtr", 1e-3)):
        torch.manual_seed(0)
        model = NormNet(eps)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        with divtrace.record(model, p(name), optimizer=opt, check_steps=[0]) as rec:
            x, y = torch.randn(16, 8, generator=g), torch.randn(16, 8, generator=g)
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            rec.step(loss)
    rc, out, err = run_dt("explain", p("bn-a.dtr"), p("bn-b.dtr"))
    line = last_line(out)
    C.ok(rc == 2 and line.startswith("no verdict") and "not checked: batchnorm1d (bn)" in line,
         "a module the oracle does not know: not checked, with its type; no verdict",
         "exit %d: %s %s" % (rc, out, err))


def test_no_data():
    rc, out, err = run_dt("explain", p("bn-a.dtr"), p("bn-a.dtr"))
    C.ok(rc == 0 and last_line(out) == "identical", "a trace against itself: identical", out + err)


sys.exit(C.run([test_standard_modules, test_planted, test_not_checked, test_no_data, test_threads_rounding,
                test_forward_bug, test_backward_bug]))
