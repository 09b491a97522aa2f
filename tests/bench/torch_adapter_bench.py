#!/usr/bin/env python3
# torch_adapter_bench.py: what recording costs a PyTorch training step: the
# median step time of the autoencoder and PredNet of torch_models.py without
# divtrace and with divtrace.record() at module granularity (level op: every
# module's output, every parameter, gradient and update), eager mode. Target:
# at most 5% more per step. Prints a Markdown table.
#
# A step is zero_grad, forward, backward, optimizer step and loss.item() (a
# host sync, as a training loop that logs its loss has; the traced step's
# rec.step(loss) does the same and also waits for the device hashes). Both
# runs start from the same weights and batch (torch_models.build), so with
# deterministic algorithms their losses must agree bit for bit: the table
# says whether they do (recording must not change the run).
#
# With --defer both (the default), each round also runs the traced step both
# ways: every device tensor hashed when it is recorded (defer=False) and the
# adapter's default, tensors hashed in one batch at each flush point.
#
# Usage: python3 tests/bench/torch_adapter_bench.py [--small] [--level op|param|step] [--defer on|off|both]
#        [--device cpu|cuda] [torch_models.py options: --config NAME ..., --warmup N,
#        --steps N, --stack, --size, --nt, --batch, --layers, --ae-batch, ...]
# --small: sizes a CPU finishes in seconds (autoencoder 784,64,16,64,784 batch 32,
# PredNet 1,4,8 at 32x32, nt 5, batch 2; 3 warm-up and 10 timed steps) unless given.
# The library is found as the divtrace package finds it (DIVTRACE_LIB, ...).
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


def step_once(model, opt, data):
    loss = tm.train_step(model, opt, data)
    return loss


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def run(cfg, device, margs, traced, level, tmp, defer=True):
    """(per-step ms of the timed steps, losses, (records, deferred) per step)."""
    model, opt, data = tm.build(cfg, device, margs.seed, capturable=False)
    times, losses = [], []
    nrec = (0, 0)
    rec = None
    if traced:
        path = os.path.join(tmp, "%s.dtr" % cfg["name"])
        rec = divtrace.record(model, path, config={"model": cfg["name"], "seed": margs.seed},
                              optimizer=opt, level=level, defer=defer).open()
    try:
        sync(device)
        for i in range(margs.warmup + margs.steps):
            t0 = time.perf_counter()
            loss = step_once(model, opt, data)
            if rec is not None:
                rec.step(loss)
            v = loss.item()
            t1 = time.perf_counter()
            losses.append(v)
            if i >= margs.warmup:
                times.append((t1 - t0) * 1e3)
        if rec is not None:
            nrec = (rec.records_per_step, rec.deferred_per_step)
            rec.close(0)
    except BaseException as e:
        if rec is not None:
            rec.close(1, repr(e))
        raise
    sync(device)
    return times, losses, nrec


def main(argv):
    ap = argparse.ArgumentParser(description="Step time of torch_models.py's models without and with "
                                 "divtrace.record(); other options go to torch_models.py.")
    ap.add_argument("--small", action="store_true", help="CPU-sized models and fewer steps")
    ap.add_argument("--level", default="op", choices=["op", "param", "step"])
    ap.add_argument("--nondeterministic", action="store_true",
                    help="leave torch's default (nondeterministic) algorithms")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of an untraced and a traced run, in alternating order (default 3)")
    ap.add_argument("--defer", default="both", choices=["on", "off", "both"],
                    help="traced runs with deferred device records (on, the adapter's default), "
                    "without (off), or both in every round (default)")
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
    print("divtrace %s (%s), level %s" % (divtrace.__version__, divtrace.library_path(), args.level))
    print()
    print("Median ms per training step over %d timed steps after %d warm-up steps (wall clock, "
          "each step ending in loss.item()); untraced and traced runs start from the same weights "
          "and batch. %d rounds of an untraced and a traced run, in alternating order; the "
          "overhead is the median of the rounds' (one machine's speed drifts by more than the "
          "overhead between runs), the times are the medians over all rounds."
          % (margs.steps, margs.warmup, max(1, args.rounds)))
    print()
    print("| configuration | defer | records per step (deferred) | untraced ms | traced ms | overhead | rounds "
          "| same losses |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- | --- |")
    sys.stdout.flush()
    tmp = tempfile.mkdtemp(prefix="divtrace-bench-", dir=os.environ.get("TMPDIR"))
    worst = 0.0
    try:
        variants = {"on": [True], "off": [False], "both": [False, True]}[args.defer]
        runs = [None] + variants  # None: untraced
        for cfg in cfgs:
            bases, traceds = [], {v: [] for v in variants}
            overs = {v: [] for v in variants}
            same, nrec = {v: True for v in variants}, {}
            for r in range(max(1, args.rounds)):
                # each run first, second, ... in turn
                k = r % len(runs)
                order = runs[k:] + runs[:k]
                got = {}
                for v in order:
                    got[v] = run(cfg, device, margs, v is not None, args.level, tmp, defer=bool(v))
                tm.release(device)
                b = statistics.median(got[None][0])
                bases.append(b)
                for v in variants:
                    t = statistics.median(got[v][0])
                    traceds[v].append(t)
                    overs[v].append((t / b - 1) * 100)
                    same[v] = same[v] and got[None][1] == got[v][1]
                    nrec[v] = got[v][2]
            for v in variants:
                over = statistics.median(overs[v])
                worst = max(worst, over) if v == variants[-1] else worst
                print("| %s | %s | %d (%d) | %.3f | %.3f | %+.1f%% | %s | %s |" % (
                    tm.describe(cfg), "on" if v else "off", nrec[v][0], nrec[v][1], statistics.median(bases),
                    statistics.median(traceds[v]), over, " ".join("%+.1f%%" % o for o in overs[v]),
                    "yes" if same[v] else "NO"))
            sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print("worst overhead %+.1f%% with defer %s (target <= +5%%)" % (worst, "on" if variants[-1] else "off"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
