#!/usr/bin/env python3
# test_explain_gpu.py: the oracle checks of PyTorch modules on a GPU
# (tests/torch/gpu_checks.sh runs it on the GPU machine; exit 77 without
# CUDA). The ConvNet of torch_testlib (every module type the oracle knows)
# trained on CUDA with check data: every module's output and every update
# within the oracle's bounds from real cuDNN and cuBLAS outputs, with TF32
# off and on (cuDNN's default); CPU against GPU explained as rounding only
# with the backend named; a value planted in one module on the GPU named
# as a bug; and divtrace run's unchanged script on the GPU, against the
# same script on the CPU.
import os
import subprocess
import sys

import torch

from torch_testlib import DT, HERE, Checks, run_dt, tmpdir, train_convnet

if not torch.cuda.is_available():
    print("test_explain_gpu.py: no CUDA device; skipping")
    sys.exit(77)

C = Checks()
T = tmpdir()


def p(name):
    return os.path.join(T, name)


def last_line(out):
    lines = [x for x in out.splitlines() if x.strip()]
    return lines[-1] if lines else ""


def test_bounds_gpu():
    for tf32 in (False, True):
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for opt in ("adam", "sgd"):
            path = p("gpu-%s-tf32%d.dtr" % (opt, tf32))
            train_convnet(path, opt, device="cuda")
            for step in (0, 2):
                rc, out, err = run_dt("replay", path, "--step", str(step), "--against", "mpfr", "--all")
                nsum = [x for x in out.splitlines() if x.startswith("summary:")]
                # the one module not checked: the net itself, a module of the test's own
                unchecked = [x for x in out.splitlines() if "not checked:" in x and "custom ConvNet" not in x]
                C.ok(rc == 0 and "SEMANTIC" not in out.replace("0 SEMANTIC", "") and not unchecked and
                     "; 1 not checked" in out,
                     "cuDNN and cuBLAS outputs within the oracle's bounds (%s, TF32 %s, step %d): %s"
                     % (opt, "on" if tf32 else "off", step, nsum[0] if nsum else "?"),
                     "exit %d: %s %s" % (rc, out, err))
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = False


def test_cpu_against_gpu():
    train_convnet(p("cpu.dtr"), "adam", device="cpu")
    train_convnet(p("gpu.dtr"), "adam", device="cuda")
    rc, out, err = run_dt("explain", p("cpu.dtr"), p("gpu.dtr"))
    line = last_line(out)
    C.ok(rc == 0 and line.startswith("rounding only: backend torch-cpu | torch-cuda"),
         "CPU against GPU: rounding only, the backend named", "exit %d: %s %s" % (rc, out, err))


def test_planted_gpu():
    train_convnet(p("gpu-bug.dtr"), "adam", device="cuda", plant="module")
    rc, out, err = run_dt("explain", p("gpu.dtr"), p("gpu-bug.dtr"))
    C.ok(rc == 1 and last_line(out).startswith("bug in B: module fc1 (linear, step 0) computes wrong values"),
         "a Linear computing wrong values on the GPU: bug in B, named", "exit %d: %s %s" % (rc, out, err))


def test_run_gpu():
    script = os.path.join(HERE, "explain", "train_block.py")
    outs = {}
    for dev in ("cpu", "cuda"):
        r = subprocess.run([DT, "run", "-q", "-o", p("run-%s.dtr" % dev), "--", sys.executable, script,
                            "--device", dev], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=T)
        outs[dev] = r
        C.ok(r.returncode == 0, "divtrace run of the unchanged script on %s" % dev, r.stderr)
    rc, out, err = run_dt("explain", p("run-cpu.dtr"), p("run-cuda.dtr"))
    C.ok(rc == 0 and last_line(out).startswith("rounding only: backend torch-cpu | torch-cuda"),
         "divtrace run on CPU against GPU, data re-recorded by explain: rounding only",
         "exit %d: %s %s" % (rc, out, err))


sys.exit(C.run([test_bounds_gpu, test_cpu_against_gpu, test_planted_gpu, test_run_gpu]))
