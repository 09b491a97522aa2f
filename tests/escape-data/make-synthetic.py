#!/usr/bin/env python3
"""make-synthetic.py: write synthetic.csv, the synthetic half of the labelled
loss curves (README.md in this directory has the model and the rules).

Each row holds the parameters of one curve and its labels. The labels follow
from the parameters (where the generator put its plateaus and drops), never
from a detector; the script then checks every row against the labelling rule
of README.md on the noise-free curve and refuses to write a row that breaks
it. The noise is drawn by the reader (tests/test_escape_data.c) from the
row's seed, so a row is a few hundred bytes, not a curve.

Run from this directory: python3 make-synthetic.py > synthetic.csv
"""
import math
import random
import sys

HEADER = "name,steps,seed,level,init,tau,tilt,drops,tail,noise,ar,spikes,plateaus,escapes"

# README.md, "Labelling rule": level over [s, s+L] against the power law
# (t + N/10)^-E through the curve's ends; plateaus at least 10% of the run
FLAT = 0.25
MIN_PLATEAU = 0.10


def logistic(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def clean(p):
    """The noise-free log loss of a row."""
    n = p["steps"]
    tail = p["tail"].split(":")
    ts = max((e for e, _, _ in p["drops"]), default=0.0)
    y = []
    for t in range(n):
        v = math.log(p["level"]) - p["tilt"] * t
        if p["init"] > 0:
            v += math.log1p(p["init"] * math.exp(-t / p["tau"]))
        for e, w, d in p["drops"]:
            v += math.log1p(-d) * logistic((t - e) / w)
        u = max(0.0, t - ts)
        if tail[0] == "pow":
            v -= float(tail[1]) * math.log1p(u / float(tail[2]))
        elif tail[0] == "exp":
            v -= float(tail[1]) * u
        y.append(v)
    return y


def labels(p):
    """Plateaus [a, b] and escape steps, from the parameters."""
    n = p["steps"]
    a0 = 0
    if p["init"] > 0.01:
        a0 = math.ceil(p["tau"] * math.log(p["init"] / 0.01))  # within 1% of the level
    plats, escs, start = [], [], a0
    for e, w, _ in p["drops"]:
        plats.append((start, math.floor(e - 6 * w)))
        escs.append(round(e))
        start = math.ceil(e + 6 * w)
    if p["tail"] == "flat":
        plats.append((start, n - 1))
    return plats, escs


def rule_ok(p, plats):
    """The row against the labelling rule, on the noise-free curve: every
    labelled plateau at least 10% of the run and level throughout; no level
    stretch of 5% of the run anywhere else."""
    n = p["steps"]
    y = clean(p)
    t0 = n / 10.0
    e_ref = (y[0] - y[n - 1]) / math.log((n - 1 + t0) / t0)
    L = max(2, round(0.05 * n))

    def level(s):
        ref = FLAT * max(e_ref, 0.0) * math.log((s + L + t0) / (s + t0))
        return abs(y[s] - y[s + L]) <= ref

    for a, b in plats:
        if b - a + 1 < MIN_PLATEAU * n:
            return "plateau %d-%d shorter than 10%% of the run" % (a, b)
        for s in range(a, b - L + 1):
            if not level(s):
                return "plateau %d-%d not level at %d" % (a, b, s)
    for s in range(0, n - L):
        inside = any(s + L >= a - L and s <= b + L for a, b in plats)
        if not inside and level(s):
            return "level stretch at %d outside the plateaus" % s
    if not plats and y[0] - y[n - 1] < math.log(2):
        return "falls by less than a factor 2"
    return None


def fmt_drops(drops):
    return " ".join("%g:%g:%g" % (e, w, d) for e, w, d in drops) or "none"


def row(name, p, out, rejected):
    plats, escs = labels(p)
    why = rule_ok(p, plats)
    if why:
        rejected.append("%s: %s" % (name, why))
        return
    out.append(",".join([
        name, str(p["steps"]), str(p["seed"]), "%g" % p["level"], "%g" % p["init"],
        "%g" % p["tau"], "%g" % p["tilt"], fmt_drops(p["drops"]), p["tail"],
        "%g" % p["noise"], "%g" % p["ar"], "%g" % p["spikes"],
        " ".join("%d-%d" % ab for ab in plats) or "none",
        " ".join(str(e) for e in escs) or "none"]))


def base(n, seed):
    return {"steps": n, "seed": seed, "level": 0.1, "init": 0.0, "tau": 1.0, "tilt": 0.0,
            "drops": [], "tail": "flat", "noise": 0.0, "ar": 0.0, "spikes": 0.0}


NOISES = [(0.0, 0.0, 0.0), (0.02, 0.0, 0.0), (0.05, 0.0, 0.0), (0.1, 0.0, 0.0),
          (0.2, 0.0, 0.0), (0.02, 0.9, 0.0), (0.05, 0.0, 0.01)]


def main():
    rnd = random.Random(29)
    out, rejected = [], []
    lengths = [250, 400, 800, 1500, 3000, 5000]
    seed = 1
    # plateaus: one, two or three escapes; depth, width, position, start,
    # tail and noise varied together
    for k, count in enumerate([1] * 24 + [2] * 18 + [3] * 12):
        n = lengths[k % len(lengths)]
        p = base(n, seed)
        seed += 1
        p["level"] = rnd.choice([0.05, 0.1, 0.4, 1.0])
        if rnd.random() < 0.75:
            p["init"] = rnd.choice([1.0, 3.0, 8.0])
            p["tau"] = round(rnd.uniform(0.005, 0.02) * n, 1)
        a0 = math.ceil(p["tau"] * math.log(p["init"] / 0.01)) if p["init"] else 0
        if count == 1:
            centres = [rnd.uniform(0.3, 0.8)]
        elif count == 2:
            centres = [rnd.uniform(0.28, 0.38), rnd.uniform(0.6, 0.75)]
        else:
            centres = [0.22 + rnd.uniform(0, 0.04), 0.48 + rnd.uniform(0, 0.04),
                       0.72 + rnd.uniform(0, 0.04)]
        drops = []
        for c in centres:
            w = round(rnd.choice([0.002, 0.005, 0.01]) * n, 2)
            w = max(w, 0.8)
            d = rnd.choice([0.15, 0.3, 0.5, 0.8])
            drops.append((round(c * n, 1), w, d))
        p["drops"] = drops
        p["tail"] = rnd.choice(["flat", "flat", "pow:%g:%g" % (rnd.choice([0.3, 0.6, 1.0]),
                                                             round(0.02 * n, 1))])
        if p["tail"] == "flat" and drops[-1][0] + 6 * drops[-1][1] > 0.88 * n:
            p["tail"] = "exp:%g" % round(2.0 / n, 6)  # a tail too short to be a plateau
        if rnd.random() < 0.2:
            p["tilt"] = round(0.02 / n, 8)  # a plateau that falls 2% over the run
        noise = NOISES[k % len(NOISES)]
        if noise[0] >= 0.1 and min(d for _, _, d in drops) < 0.3:
            noise = (0.05, 0.0, 0.0)  # a 15% drop in 10-20% noise is a judgement call
        p["noise"], p["ar"], p["spikes"] = noise
        if a0 < drops[0][0] - 6 * drops[0][1]:
            row("plateau%d-%02d" % (count, k), p, out, rejected)
    # plateaus at the very start (no initial descent: PredNet-like)
    for k in range(8):
        n = lengths[k % len(lengths)]
        p = base(n, seed)
        seed += 1
        p["drops"] = [(round(rnd.uniform(0.2, 0.5) * n, 1), max(0.8, round(0.004 * n, 2)),
                       rnd.choice([0.3, 0.6, 0.9]))]
        p["tail"] = "pow:%g:%g" % (rnd.choice([0.3, 0.6]), round(0.05 * n, 1)) if k % 2 else "flat"
        p["noise"], p["ar"], p["spikes"] = NOISES[(k + 3) % len(NOISES)]
        row("start-plateau-%02d" % k, p, out, rejected)
    # one final plateau: a fast fall, then level to the end (no escape)
    for k in range(10):
        n = lengths[k % len(lengths)]
        p = base(n, seed)
        seed += 1
        p["init"] = rnd.choice([1.0, 3.0, 10.0])
        p["tau"] = round(rnd.uniform(0.01, 0.06) * n, 1)
        p["noise"], p["ar"], p["spikes"] = NOISES[k % len(NOISES)]
        row("final-plateau-%02d" % k, p, out, rejected)
    p = base(1000, seed)
    seed += 1
    row("constant", p, out, rejected)
    # no plateau: exponential and power-law decays, mixtures, noisy descents
    for k in range(14):
        n = lengths[k % len(lengths)]
        p = base(n, seed)
        seed += 1
        p["tail"] = "exp:%g" % round(rnd.choice([0.8, 1.5, 3.0, 6.0]) / n, 8)
        p["noise"], p["ar"], p["spikes"] = NOISES[k % len(NOISES)]
        row("exp-%02d" % k, p, out, rejected)
    for k in range(20):
        n = lengths[k % len(lengths)]
        p = base(n, seed)
        seed += 1
        a = rnd.choice([0.3, 0.5, 0.8, 1.2])
        c = rnd.choice([1.0, 5.0, round(0.01 * n, 1), round(0.05 * n, 1), round(0.2 * n, 1)])
        p["tail"] = "pow:%g:%g" % (a, c)
        p["noise"], p["ar"], p["spikes"] = NOISES[k % len(NOISES)]
        row("power-%02d" % k, p, out, rejected)
    for k in range(12):
        n = lengths[k % len(lengths)]
        p = base(n, seed)
        seed += 1
        p["init"] = rnd.choice([1.0, 2.0])
        p["tau"] = round(rnd.uniform(0.01, 0.05) * n, 1)
        p["tail"] = "pow:%g:%g" % (rnd.choice([0.4, 0.7, 1.0]), round(rnd.choice([0.005, 0.02]) * n, 1))
        p["noise"], p["ar"], p["spikes"] = NOISES[(k + 2) % len(NOISES)]
        row("fall-then-power-%02d" % k, p, out, rejected)
    for k in range(12):
        n = lengths[k % len(lengths)]
        p = base(n, seed)
        seed += 1
        p["tail"] = "pow:%g:%g" % (rnd.choice([0.5, 1.0]), round(0.02 * n, 1))
        p["noise"] = rnd.choice([0.1, 0.2, 0.3])
        p["ar"] = rnd.choice([0.0, 0.0, 0.8])
        if p["ar"] > 0:
            p["noise"] = 0.02  # README: correlated wiggles stay below an escape's 5%
        p["spikes"] = rnd.choice([0.0, 0.02])
        row("noisy-descent-%02d" % k, p, out, rejected)
    # the case: a smooth fall over 300 steps
    for k, (a, c) in enumerate([(0.5, 3.0), (0.8, 10.0), (1.0, 30.0), (0.4, 1.0)]):
        p = base(300, seed)
        seed += 1
        p["tail"] = "pow:%g:%g" % (a, c)
        p["noise"] = [0.0, 0.03, 0.05, 0.1][k]
        row("smooth-300-%02d" % k, p, out, rejected)
    print(HEADER)
    for r in out:
        print(r)
    for r in rejected:
        print("make-synthetic.py: left out %s" % r, file=sys.stderr)


if __name__ == "__main__":
    main()
