#!/usr/bin/env python3
# torch_run_bench.py: what divtrace run costs against the hand-edited loop.
# The same training script (torch_run_script.py: an autoencoder in the usual
# style, timing its own steps) runs in three forms: plain (no divtrace), the
# loop edited by hand to record through divtrace.record, and unchanged under
# divtrace run, which records the same modules, gradients and updates (the
# model, its loss module, the optimizer's hooks). Each form is a process of
# its own; the forms run in turn, the order rotated every round, so that the
# machine's drift falls on all alike; the ratio of two forms is the median
# over the rounds of the ratio of their median step times within a round.
# Target: divtrace run adds nothing measurable to the hand-edited loop.
# Prints a Markdown table.
# Usage: python3 tests/bench/torch_run_bench.py [--rounds N] [--device cpu|cuda] [--steps N]
#   DIVTRACE: the divtrace program (its `run`); the package is found as the
#   tests find it (PYTHONPATH, DIVTRACE_LIB).
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "torch_run_script.py")


def once(form, args, tmp):
    trace = os.path.join(tmp, "%s.dtr" % form)
    base = [sys.executable, SCRIPT, "--steps", str(args.steps), "--device", args.device]
    if form == "plain":
        cmd = base
    elif form == "edited":
        cmd = base + ["--edit", trace]
    else:
        cmd = [args.divtrace, "run", "-q", "-o", trace, "--"] + base
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    m = re.search(r"median step: ([0-9.]+) ms", r.stdout)
    if r.returncode != 0 or not m:
        sys.exit("torch_run_bench.py: %s failed (exit %d): %s" % (form, r.returncode, r.stderr.strip()[-400:]))
    return float(m.group(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--device", default="cuda")
    p.add_argument("--divtrace", default=os.environ.get("DIVTRACE", "divtrace"))
    args = p.parse_args()
    forms = ["plain", "edited", "run"]
    ms = {f: [] for f in forms}
    ratio = {"edited/plain": [], "run/plain": [], "run/edited": []}
    with tempfile.TemporaryDirectory(prefix="divtrace-runbench-") as tmp:
        for r in range(args.rounds):
            order = forms[r % 3:] + forms[:r % 3]
            got = {f: once(f, args, tmp) for f in order}
            for f in forms:
                ms[f].append(got[f])
            ratio["edited/plain"].append(got["edited"] / got["plain"])
            ratio["run/plain"].append(got["run"] / got["plain"])
            ratio["run/edited"].append(got["run"] / got["edited"])
    print("autoencoder 784-128-32-128-784, batch 100, SGD, %s; %d rounds of %d timed steps a form"
          % (args.device, args.rounds, args.steps))
    print()
    print("| form | median step (ms), per round | median |")
    print("|---|---|---:|")
    for f in forms:
        print("| %s | %s | %.4f |" % (f, " ".join("%.4f" % x for x in ms[f]), statistics.median(ms[f])))
    print()
    print("| ratio | per round | median |")
    print("|---|---|---:|")
    for k, v in ratio.items():
        print("| %s | %s | %.3f |" % (k, " ".join("%.3f" % x for x in v), statistics.median(v)))


if __name__ == "__main__":
    main()
