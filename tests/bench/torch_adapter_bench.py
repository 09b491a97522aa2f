#!/usr/bin/env python3
# torch_adapter_bench.py: what recording costs a PyTorch training step: the
# median step time of the autoencoder and PredNet of torch_models.py without
# divtrace and with divtrace.record() at module granularity (level op: every
# module's output, every parameter, gradient and update), eager mode. Target:
# at most 5% more per step. Prints a Markdown table.
#
# A step is zero_grad, forward, backward, optimizer step and loss.item() (a
# host sync, as a training loop that logs its loss has); the traced step
# calls rec.step(loss) before its loss.item() (with the C core and a CUDA
# loss it does not wait: the library reads the step after it).
# --loss number: the traced step passes the number the loop reads,
# v = loss.item(); rec.step(v), instead of the tensor (rec.step then waits
# for the device hashes).
#
# The untraced and the traced models are built side by side from the same
# weights and batch (torch_models.build), and their steps are interleaved:
# one step of each in turn, the order rotated every step, so that the
# machine's drift (the eager step moved between 115 and 205 ms from run to
# run on the GPU machine) falls on all of them alike. The overhead is the
# median over the steps of a traced step's time over the untraced step's
# beside it. With deterministic algorithms the losses must agree bit for
# bit: the table says whether they do (recording must not change the run).
#
# --defer both (the default) traces two copies: every device tensor hashed
# when it is recorded (defer=False) and the adapter's default, tensors
# hashed in one batch at each flush point.
#
# --core both (the default when the C core loads) traces each of those with
# the adapter's C core and with its Python core (DIVTRACE_ADAPTER_CORE).
#
# --capture both traces each of those twice more: module outputs caught by
# forward hooks (capture="hooks") and by forward wrappers (capture="wrap",
# the adapter's default and this benchmark's).
#
# --shim both traces each C-core run twice: tensor queries through PyTorch's
# C shim (the default; core "c") and through Python (DIVTRACE_ADAPTER_SHIM=0;
# core "c-noshim").
#
# Usage: python3 tests/bench/torch_adapter_bench.py [--small] [--level op|param|step] [--defer on|off|both]
#        [--core c|python|both] [--capture wrap|hooks|both] [--shim on|off|both] [--loss tensor|number]
#        [--rounds N] [--device cpu|cuda] [torch_models.py options: --config NAME ..., --warmup N,
#        --steps N, --stack, --size, --nt, --batch, --layers, --ae-batch, ...]
# --small: sizes a CPU finishes in seconds (autoencoder 784,64,16,64,784 batch 32,
# PredNet 1,4,8 at 32x32, nt 5, batch 2; 3 warm-up and 10 timed steps) unless given.
# The library is found as the divtrace package finds it (DIVTRACE_LIB, ...);
# DIVTRACE_LIB=.../libdivtrace_null.so (tests/bench/divtrace_null.c, a
# library that records nothing; tests/gpu/pack.sh builds it) leaves the
# adapter's Python side alone.
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "python"))

import torch_models as tm  # noqa: E402  (sets CUBLAS_WORKSPACE_CONFIG before torch)
import torch  # noqa: E402

import divtrace  # noqa: E402

SMALL_AE = ["--layers", "784,64,16,64,784", "--ae-batch", "32"]
SMALL_PN = ["--stack", "1,4,8", "--size", "32x32", "--nt", "5", "--batch", "2"]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


class Run:
    """One model of the comparison: untraced (variant None) or traced with
    variant (defer, core, capture)."""

    def __init__(self, cfg, device, margs, variant, level, tmp, tag, loss_number=False):
        self.model, self.opt, self.data = tm.build(cfg, device, margs.seed, capturable=False)
        self.rec = None
        self.loss_number = loss_number
        self.times, self.losses = [], []
        if variant is not None:
            defer, core, capture = variant
            path = os.path.join(tmp, "%s-%s.dtr" % (cfg["name"], tag))
            env = {"DIVTRACE_ADAPTER_CORE": "c" if core == "c-noshim" else core,
                   "DIVTRACE_ADAPTER_SHIM": "0" if core == "c-noshim" else None}
            was = {k: os.environ.get(k) for k in env}
            try:
                for k, v in env.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                self.rec = divtrace.record(self.model, path, config={"model": cfg["name"], "seed": margs.seed},
                                           optimizer=self.opt, level=level, defer=defer,
                                           capture=capture).open()
            finally:
                for k, v in was.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v

    def step(self, timed):
        t0 = time.perf_counter()
        loss = tm.train_step(self.model, self.opt, self.data)
        if self.rec is not None and self.loss_number:
            v = loss.item()
            self.rec.step(v)
        else:
            if self.rec is not None:
                self.rec.step(loss)
            v = loss.item()
        t1 = time.perf_counter()
        self.losses.append(v)
        if timed:
            self.times.append((t1 - t0) * 1e3)

    def close(self, status=0, why=None):
        if self.rec is not None:
            self.nrec = (self.rec.records_per_step, self.rec.deferred_per_step)
            self.rec.close(status, why)
        else:
            self.nrec = (0, 0)


def measure(cfg, device, margs, variants, level, tmp, loss_number=False):
    """One round: the runs side by side, steps interleaved. Returns the
    runs by variant (None: untraced)."""
    keys = [None] + variants
    runs = {}
    try:
        for v in keys:
            runs[v] = Run(cfg, device, margs, v, level, tmp, "untraced" if v is None else "defer-%s-%s-%s" % v,
                          loss_number)
        sync(device)
        for i in range(margs.warmup + margs.steps):
            k = i % len(keys)
            for v in keys[k:] + keys[:k]:
                runs[v].step(i >= margs.warmup)
        sync(device)
        for r in runs.values():
            r.close(0)
    except BaseException as e:
        for r in runs.values():
            if r.rec is not None and not r.rec._closed:
                r.close(1, repr(e))
        raise
    return runs


def main(argv):
    ap = argparse.ArgumentParser(description="Step time of torch_models.py's models without and with "
                                 "divtrace.record(); other options go to torch_models.py.")
    ap.add_argument("--small", action="store_true", help="CPU-sized models and fewer steps")
    ap.add_argument("--level", default="op", choices=["op", "param", "step"])
    ap.add_argument("--nondeterministic", action="store_true",
                    help="leave torch's default (nondeterministic) algorithms")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of the interleaved measurement, each with new models (default 1)")
    ap.add_argument("--defer", default="both", choices=["on", "off", "both"],
                    help="traced runs with deferred device records (on, the adapter's default), "
                    "without (off), or both in every round (default)")
    ap.add_argument("--core", default=None, choices=["c", "python", "both"],
                    help="the adapter's core: its C core, its Python core, or both side by side "
                    "(default: both when the C core loads, else python)")
    ap.add_argument("--capture", default="wrap", choices=["wrap", "hooks", "both"],
                    help="how module outputs are caught: forward wrappers (the adapter's default), "
                    "forward hooks, or both side by side")
    ap.add_argument("--shim", default="on", choices=["on", "off", "both"],
                    help="the C core's tensor queries through PyTorch's C shim (on, the adapter's "
                    "default), through Python (off, DIVTRACE_ADAPTER_SHIM=0), or both side by side")
    ap.add_argument("--loss", default="tensor", choices=["tensor", "number"],
                    help="what the traced step passes to rec.step: the loss tensor (default) or the "
                    "number its loss.item() read")
    args, rest = ap.parse_known_args(argv)
    if args.small:
        given = set(a.split("=")[0] for a in rest)
        if "--config" not in given and not given & {"--stack", "--size", "--nt", "--batch"}:
            rest = ["--config", "ae", "--config", "custom"] + rest
        if not given & {"--layers", "--ae-batch"}:
            rest += SMALL_AE
        if not given & {"--stack", "--size", "--nt", "--batch"}:
            rest += SMALL_PN
        if "--warmup" not in given:
            rest += ["--warmup", "3"]
        if "--steps" not in given:
            rest += ["--steps", "10"]
    margs, cfgs = tm.parse_args(rest)
    device = torch.device(margs.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if not args.nondeterministic:
        tm.set_arithmetic(not margs.no_fill_uninitialized)
    print(tm.header(device, margs))
    from divtrace import _lib
    have_c = _lib.load_fast() is not None
    core = args.core or ("both" if have_c else "python")
    if core in ("c", "both") and not have_c:
        print("torch_adapter_bench.py: --core %s: the C core does not load: %s" % (core, _lib._fast_why),
              file=sys.stderr)
        return 2
    print("divtrace %s (%s), level %s, C core %s" % (divtrace.__version__, divtrace.library_path(), args.level,
                                                   _lib._fast.__file__ if have_c else "none"))
    print()
    print("Median ms per training step over %d timed steps after %d warm-up steps (wall clock, "
          "each step ending in loss.item(); the traced step passes rec.step the %s). The untraced and "
          "traced models start from the same weights and batch and take their steps in turn, one step "
          "each, the order rotated every step; the "
          "overhead is the median over the steps of a traced step's time over the untraced step's "
          "beside it (%d round%s, each with new models; the rounds' overheads in the column rounds)."
          % (margs.steps, margs.warmup, "number it read" if args.loss == "number" else "loss tensor",
             max(1, args.rounds), "" if max(1, args.rounds) == 1 else "s"))
    print()
    print("| configuration | defer | core | capture | records per step (deferred) | untraced ms | traced ms "
          "| overhead | rounds | same losses |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |")
    sys.stdout.flush()
    tmp = tempfile.mkdtemp(prefix="divtrace-bench-", dir=os.environ.get("TMPDIR"))
    worst = 0.0
    try:
        defers = {"on": [True], "off": [False], "both": [False, True]}[args.defer]
        cores = {"c": ["c"], "python": ["python"], "both": ["python", "c"]}[core]
        # the C core without the shim: "c-noshim"
        shims = {"on": ["c"], "off": ["c-noshim"], "both": ["c-noshim", "c"]}[args.shim]
        cores = [x for c in cores for x in (shims if c == "c" else [c])]
        # the last variant is what the adapter does by default, with the core asked for
        caps = {"wrap": ["wrap"], "hooks": ["hooks"], "both": ["hooks", "wrap"]}[args.capture]
        variants = [(d, c, k) for d in defers for c in cores for k in caps]
        for cfg in cfgs:
            base, traced = [], {v: [] for v in variants}
            ratios = {v: [] for v in variants}
            overs = {v: [] for v in variants}
            same, nrec = {v: True for v in variants}, {}
            for r in range(max(1, args.rounds)):
                runs = measure(cfg, device, margs, variants, args.level, tmp, args.loss == "number")
                tm.release(device)
                b = runs[None].times
                base += b
                for v in variants:
                    t = runs[v].times
                    traced[v] += t
                    rs = [x / y for x, y in zip(t, b)]
                    ratios[v] += rs
                    overs[v].append((statistics.median(rs) - 1) * 100)
                    same[v] = same[v] and runs[None].losses == runs[v].losses
                    nrec[v] = runs[v].nrec
            for v in variants:
                over = (statistics.median(ratios[v]) - 1) * 100
                if v == variants[-1]:
                    worst = max(worst, over)
                print("| %s | %s | %s | %s | %d (%d) | %.3f | %.3f | %+.1f%% | %s | %s |" % (
                    tm.describe(cfg), "on" if v[0] else "off", v[1], v[2], nrec[v][0], nrec[v][1],
                    statistics.median(base),
                    statistics.median(traced[v]), over, " ".join("%+.1f%%" % o for o in overs[v]),
                    "yes" if same[v] else "NO"))
            sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print("worst overhead %+.1f%% with defer %s, core %s, capture %s (target <= +5%%)"
          % (worst, "on" if variants[-1][0] else "off", variants[-1][1], variants[-1][2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
