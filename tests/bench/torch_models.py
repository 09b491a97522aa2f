#!/usr/bin/env python3
# torch_models.py: the autoencoder and PredNet of models/ written independently
# in PyTorch, to time a training step side by side with divtrace's GPU
# backends (eager PyTorch and the whole step captured in a CUDA graph). The
# comparison baseline is the strongest plain PyTorch formulation: the four
# gate convolutions of a PredNet layer fused into one, the whole step in a
# CUDA graph, and, per --mode, deterministic cuDNN (against divtrace's
# deterministic modes) or cudnn.benchmark (against --cudnn-algo fastest).
# tests/bench/gpu_speed.sh runs both beside bench_gpu_step.
#
# How it matches divtrace (models/autoencoder.c, models/prednet.c,
# models/model.c, src/op.h, src/train.c):
# - Autoencoder: widths 784,128,32,128,784; each layer act(x W^T + b) with W
#   (out, in) (F.linear); sigmoid on every layer (hidden --act sigmoid, the
#   default, and the output always); loss = mean over batch x pixels of
#   (y - x)^2 (F.mse_loss, reduction "mean"); batch 100; SGD lr 3.0 (ours:
#   p - lr g, no momentum) or Adam lr 3e-4, b1 0.9, b2 0.999, eps 1e-8.
# - PredNet, per layer l and time step t, every convolution 3x3, stride 1,
#   zero "same" padding, with a bias. The gates over
#   X = cat([R_l(t-1), E_l(t-1), up2(R_{l+1}(t))]) in that channel order (the
#   up2 part only below the top layer): --gates fused (the default) is one
#   convolution conv_gates with 4K output channels, split along channels
#   into i, f, o, c in that order (hsig applied to the i, f, o block at
#   once); --gates separate is four convolutions conv_i, conv_f, conv_o,
#   conv_c, as divtrace computes them (the same sums per output element;
#   cuDNN may choose other algorithms for the wider filter). i, f, o =
#   hsig(.), g = tanh(.),
#   c = f * c(t-1) + i * g (f*c first, then i*g, then the sum), R = o * tanh(c);
#   Ahat = relu(conv_ahat R), on layer 0 min(Ahat, pixel_max = 1) (clamp: its
#   gradient passes at x == max, as SATLU_BWD's x <= m); E = cat([relu(A -
#   Ahat), relu(Ahat - A)]) (positive errors first: our order, the reverse of
#   Keras's); A_{l+1} = max_pool2d(relu(conv_a E), 2); up2 is nearest
#   neighbour. R top-down, then Ahat, E, A bottom-up; R, c, E start at zero.
#   Loss = sum over t >= 1 and l of lw_l / (nt - 1) * mean(E_l(t)), terms
#   added in order of t then l, terms of weight 0 left out (their E still
#   feeds t + 1); layer weights default 1,0,...,0. Adam lr 1e-3, b1 0.9,
#   b2 0.999, eps 1e-8.
# - hsig(x) = clamp(x * 0.2 + 0.5, 0, 1) written out: Keras 2's slope 0.2
#   (the scalar reaches the CUDA kernel as the float32 0.2f, as in
#   OP_HARD_SIGMOID), not torch's hardsigmoid (slope 1/6, bounds at +-3). The
#   clamp's gradient passes at both bounds, as HARD_SIGMOID_BWD's 0 <= t <= 1.
# - relu's gradient is 0 at x == 0 (RELU_BWD's x > 0). max_pool2d keeps the
#   first maximum of a 2x2 window in row-major order (ties: first wins, as
#   MAXPOOL2; with NaN in a window torch may pick a later NaN).
# - Init: W Glorot-uniform U(-a, a), a = sqrt(6 / (fan_in + fan_out)) with
#   fan_in = C R S, fan_out = K R S for a (K, C, R, S) filter and in, out for a
#   linear map (set explicitly: torch's default init is Kaiming-uniform);
#   biases zero. The fused gate filter (4K, C, 3, 3) is initialised a
#   quarter at a time, each as a (K, C, 3, 3) filter (fan_in C 9, fan_out
#   K 9): the distribution of four separate filters. The random numbers come
#   from torch's generator (--seed), not ours, so the initial weights are
#   the same distribution, not the same values.
# - Arithmetic: float32 throughout; TF32 off for cuBLAS and cuDNN
#   (allow_tf32 = False); CUBLAS_WORKSPACE_CONFIG=:4096:8 set before torch
#   is imported. --mode det (the default): cudnn.deterministic = True,
#   cudnn.benchmark = False, torch.use_deterministic_algorithms(True), with
#   torch.utils.deterministic.fill_uninitialized_memory = False (torch's
#   default, True, fills every new tensor with NaN: memsets that change no
#   result; --fill-uninitialized turns it back on). --mode nondet:
#   cudnn.benchmark = True (cuDNN's timed choice per convolution, the first
#   time each shape is seen), cudnn.deterministic = False,
#   use_deterministic_algorithms(False): the counterpart of divtrace's
#   --cudnn-algo fastest. --mode det,nondet runs both, one row each.
#
# Where it cannot match bit for bit: cuDNN and cuBLAS choose their own
# convolution and GEMM algorithms (and so the order of every sum over c, r, s
# and over n, h, w in the gradients; the bias may be added in a GEMM/conv
# epilogue); torch's reductions (mean, mse, bias gradients) sum in their own
# tree order in float32, where ours sum in a fixed order (MEAN in double);
# the loss weight multiplies mean(E) in float32 (ours rounds
# scale * sum / count once); sigmoid's backward is dy (1 - y) y (ours
# dy y (1 - y)); Adam computes m / (sqrt(v) / sqrt(c2) + eps) * lr / c1
# (foreach, or the capturable variant in graph mode), the same formula as
# ours in another evaluation order; the initial weights and data are other
# random numbers. So the losses agree in trend, not in bits.
#
# Timing: a fixed random batch (uniform [0, 1)) stays on the device; a step is
# zero_grad, forward, backward, optimizer step; median over --steps timed
# steps after --warmup steps, measured with CUDA events around each step.
# Eager: plain PyTorch on the default stream. Graph: --warmup - 1 steps on a
# side stream (at least 3 in --mode nondet, so that cudnn.benchmark has timed
# every convolution, forward and backward, before the capture: no timing can
# run inside one), the step captured with torch.cuda.graph (Adam
# capturable=True), one untimed replay, then --steps timed replays; both
# modes run --warmup + --steps steps from the same initial weights (nondet
# with --warmup < 4: more), so their last losses should be close. The graph
# is the form the comparison tables use; --no-eager leaves eager out.
#
# Usage: python3 torch_models.py [--config NAME]... [--mode det|nondet|det,nondet]
# [--gates fused|separate] [options]; --help lists them. Prints a Markdown
# table, one row per configuration and mode, naming both and the gate form
# ("-" for the autoencoder). --check N prints the first N losses instead.
import os

os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # must precede importing torch

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402


MODES = ("det", "nondet")


def set_arithmetic(mode, fill_uninit):
    """mode det: deterministic cuDNN and torch's deterministic algorithms;
    nondet: cudnn.benchmark, nothing forced deterministic. TF32 off in both."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    det = mode == "det"
    torch.backends.cudnn.deterministic = det
    torch.backends.cudnn.benchmark = not det
    torch.use_deterministic_algorithms(det)
    # With deterministic algorithms on, torch by default also fills every
    # torch.empty with NaN: extra memsets that change no result. Off unless
    # --fill-uninitialized (it matters only while deterministic algorithms
    # are on).
    mod = getattr(torch.utils, "deterministic", None)
    if mod is not None and hasattr(mod, "fill_uninitialized_memory"):
        mod.fill_uninitialized_memory = fill_uninit


def glorot_(w):
    """Glorot-uniform as model_init_param: W (out, in) or (K, C, R, S)."""
    rs = w.shape[2] * w.shape[3] if w.dim() == 4 else 1
    a = math.sqrt(6.0 / ((w.shape[0] + w.shape[1]) * rs))
    with torch.no_grad():
        w.uniform_(-a, a)


def glorot_blocks_(w, nblocks):
    """Glorot-uniform of a (nblocks K, C, R, S) filter a (K, C, R, S) block
    at a time (fan_out K R S, not nblocks K R S): the distribution of
    nblocks separate filters."""
    k = w.shape[0] // nblocks
    assert k * nblocks == w.shape[0]
    for q in range(nblocks):
        glorot_(w[q * k:(q + 1) * k])


def hard_sigmoid(x):
    """Keras 2: clip(0.2 x + 0.5, 0, 1); not torch's hardsigmoid (1/6)."""
    return torch.clamp(x * 0.2 + 0.5, 0.0, 1.0)


ACTS = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": F.relu}


class Autoencoder(nn.Module):
    def __init__(self, widths, act="sigmoid"):
        super().__init__()
        self.maps = nn.ModuleList(nn.Linear(widths[i], widths[i + 1]) for i in range(len(widths) - 1))
        self.act = ACTS[act]
        for m in self.maps:
            glorot_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x):  # x (N, F)
        h = x
        for k, m in enumerate(self.maps):
            h = m(h)
            h = torch.sigmoid(h) if k == len(self.maps) - 1 else self.act(h)
        return F.mse_loss(h, x)


def conv3(cin, k, nblocks=1):
    """3x3 "same" convolution with a bias, k output channels per block;
    nblocks > 1: one convolution of nblocks k channels, each block
    initialised as its own filter."""
    cv = nn.Conv2d(cin, nblocks * k, 3, stride=1, padding=1, bias=True)
    glorot_blocks_(cv.weight, nblocks)
    nn.init.zeros_(cv.bias)
    return cv


GATES = ("fused", "separate")


class PredNetLayer(nn.Module):
    def __init__(self, stack, rstack, l, gates):
        super().__init__()
        nl = len(stack)
        cin = rstack[l] + 2 * stack[l] + (rstack[l + 1] if l + 1 < nl else 0)
        self.fused = gates == "fused"
        if self.fused:
            # i, f, o, c: output channels [0, K), [K, 2K), [2K, 3K), [3K, 4K)
            self.conv_gates = conv3(cin, rstack[l], nblocks=4)
        else:
            self.conv_i = conv3(cin, rstack[l])
            self.conv_f = conv3(cin, rstack[l])
            self.conv_o = conv3(cin, rstack[l])
            self.conv_c = conv3(cin, rstack[l])
        self.conv_ahat = conv3(rstack[l], stack[l])
        self.conv_a = conv3(2 * stack[l], stack[l + 1]) if l + 1 < nl else None

    def gates(self, x, k):
        """(i, f, o, g) of the layer's input x (k = R channels)."""
        if self.fused:
            y = self.conv_gates(x)
            gi, gf, go = hard_sigmoid(y[:, :3 * k]).split(k, dim=1)
            return gi, gf, go, torch.tanh(y[:, 3 * k:])
        return (hard_sigmoid(self.conv_i(x)), hard_sigmoid(self.conv_f(x)), hard_sigmoid(self.conv_o(x)),
                torch.tanh(self.conv_c(x)))


class PredNet(nn.Module):
    def __init__(self, stack, rstack, layer_weights, pixel_max=1.0, gates="fused"):
        super().__init__()
        self.stack, self.rstack = list(stack), list(rstack)
        self.lw = list(layer_weights)
        self.pixel_max = pixel_max
        # created in divtrace's parameter order: layer by layer, i f o c ahat a
        # (fused: the gates' one filter and bias in place of i f o c)
        self.layers = nn.ModuleList(PredNetLayer(stack, rstack, l, gates) for l in range(len(stack)))

    def forward(self, frames):  # frames (T, N, stack[0], H, W)
        nt, n, _, h, w = frames.shape
        nl = len(self.stack)
        z = frames.new_zeros
        r = [z(n, self.rstack[l], h >> l, w >> l) for l in range(nl)]
        c = [z(n, self.rstack[l], h >> l, w >> l) for l in range(nl)]
        e = [z(n, 2 * self.stack[l], h >> l, w >> l) for l in range(nl)]
        loss = None
        for t in range(nt):
            r_new, c_new = [None] * nl, [None] * nl
            up = None
            for l in range(nl - 1, -1, -1):  # R top-down
                L = self.layers[l]
                x = torch.cat([r[l], e[l]] + ([up] if up is not None else []), dim=1)
                gi, gf, go, gg = L.gates(x, self.rstack[l])
                c_new[l] = gf * c[l] + gi * gg
                r_new[l] = go * torch.tanh(c_new[l])
                up = F.interpolate(r_new[l], scale_factor=2, mode="nearest") if l > 0 else None
            a = frames[t]
            for l in range(nl):  # Ahat, E, A bottom-up
                L = self.layers[l]
                ahat = F.relu(L.conv_ahat(r_new[l]))
                if l == 0:
                    ahat = torch.clamp(ahat, max=self.pixel_max)
                e[l] = torch.cat([F.relu(a - ahat), F.relu(ahat - a)], dim=1)
                wt = (0.0 if t == 0 else 1.0 / (nt - 1)) * self.lw[l]
                if wt != 0:
                    term = e[l].mean() * wt
                    loss = term if loss is None else loss + term
                if l + 1 < nl:
                    a = F.max_pool2d(F.relu(L.conv_a(e[l])), 2)
            r, c = r_new, c_new
        return loss


# ---- configurations

CONFIGS = {
    "ae": dict(model="autoencoder", widths=[784, 128, 32, 128, 784], batch=100),
    "pn-64-b1": dict(model="prednet", stack=[1, 16, 32, 64], size=(64, 64), nt=20, batch=1),
    "pn-64-b4": dict(model="prednet", stack=[1, 16, 32, 64], size=(64, 64), nt=20, batch=4),
    "pn-128x160-b4": dict(model="prednet", stack=[3, 48, 96, 192], size=(128, 160), nt=10, batch=4),
}
DEFAULT_CONFIGS = ["ae", "pn-64-b1", "pn-64-b4", "pn-128x160-b4"]


def describe(cfg):
    if cfg["model"] == "autoencoder":
        return "autoencoder %s, %s, batch %d, %s lr %g" % (
            ",".join(map(str, cfg["widths"])), cfg["act"], cfg["batch"], cfg["optimizer"], cfg["lr"])
    rs = "" if cfg["rstack"] == cfg["stack"] else " (R %s)" % ",".join(map(str, cfg["rstack"]))
    lw = "" if cfg["lw"] == default_lw(len(cfg["stack"])) else ", lw %s" % ",".join("%g" % v for v in cfg["lw"])
    return "PredNet %s%s @ %dx%d, nt %d, batch %d%s, adam lr %g" % (
        ",".join(map(str, cfg["stack"])), rs, cfg["size"][0], cfg["size"][1], cfg["nt"], cfg["batch"], lw,
        cfg["lr"])


def default_lw(nl):
    return [1.0] + [0.0] * (nl - 1)


def build(cfg, device, seed, capturable):
    """Model, optimizer and the fixed batch, the same for every mode: made
    on the cpu from --seed, then moved."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    if cfg["model"] == "autoencoder":
        model = Autoencoder(cfg["widths"], cfg["act"])
        data = torch.rand(cfg["batch"], cfg["widths"][0], generator=gen)
    else:
        model = PredNet(cfg["stack"], cfg["rstack"], cfg["lw"], gates=cfg["gates"])
        h, w = cfg["size"]
        data = torch.rand(cfg["nt"], cfg["batch"], cfg["stack"][0], h, w, generator=gen)
    model = model.to(device)
    data = data.to(device)
    if cfg["optimizer"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.0)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.999), eps=1e-8,
                               capturable=capturable)
    return model, opt, data


def train_step(model, opt, data):
    opt.zero_grad(set_to_none=True)
    loss = model(data)
    loss.backward()
    opt.step()
    # detached: a live loss would keep this step's autograd graph, whose
    # AccumulateGrad nodes the next step (or the capture, on another stream)
    # would then reuse
    return loss.detach()


class Timer:
    """Per-step times in ms: CUDA events on the current stream, or the wall
    clock on the cpu."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.pairs = []

    def start(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.pairs.append([ev, None])
        else:
            self.pairs.append([time.perf_counter(), None])

    def stop(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.pairs[-1][1] = ev
        else:
            self.pairs[-1][1] = time.perf_counter()

    def times_ms(self):
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in self.pairs]
        return [(b - a) * 1e3 for a, b in self.pairs]


def run_eager(cfg, device, args, warmup, steps, record):
    """Returns (times of the timed steps in ms, losses: every step's when
    record, else the last step's)."""
    model, opt, data = build(cfg, device, args.seed, capturable=False)
    losses = []
    for _ in range(warmup):
        loss = train_step(model, opt, data)
        if record:
            losses.append(loss.item())
    timer = Timer(device)
    for _ in range(steps):
        timer.start()
        loss = train_step(model, opt, data)
        timer.stop()
        if record:
            losses.append(loss.item())
    times = timer.times_ms()
    if not record:
        losses.append(loss.item())
    return times, losses


def run_graph(cfg, device, args, warmup, steps, record):
    """The same as run_eager with the step captured in a CUDA graph: warmup
    - 1 eager steps on a side stream (lazy init of cuBLAS, cuDNN and Adam's
    state; with cudnn.benchmark at least 3, so that every convolution's
    algorithm, forward and backward, is timed and cached before the capture,
    which cannot time any), capture, one untimed replay, then the timed
    replays."""
    assert warmup >= 2
    model, opt, data = build(cfg, device, args.seed, capturable=True)
    losses = []
    side_steps = warmup - 1
    if torch.backends.cudnn.benchmark:
        side_steps = max(side_steps, 3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(side_steps):
            loss = train_step(model, opt, data)
            if record:
                losses.append(loss.item())
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)  # backward in the capture allocates static grads
    with torch.cuda.graph(graph):
        static_loss = model(data)
        static_loss.backward()
        opt.step()
    graph.replay()
    if record:
        losses.append(static_loss.item())
    timer = Timer(device)
    for _ in range(steps):
        timer.start()
        graph.replay()
        timer.stop()
        if record:
            losses.append(static_loss.item())
    times = timer.times_ms()
    if not record:
        losses.append(static_loss.item())
    del graph
    return times, losses


def parse_list(s, conv, what):
    try:
        v = [conv(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("%s '%s': expected a comma-separated list" % (what, s))
    return v


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Time a training step of divtrace's autoencoder and PredNet in PyTorch "
        "(eager and CUDA graph) and print a Markdown table.")
    p.add_argument("--config", action="append", choices=sorted(list(CONFIGS) + ["custom"]),
                   help="configuration to run, repeatable (default: %s; 'custom' is the PredNet "
                   "given by --stack, --size, ...)" % ", ".join(DEFAULT_CONFIGS))
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10, at least 2)")
    p.add_argument("--steps", type=int, default=50, help="timed steps (default 50)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default=None, help="cuda (default when available) or cpu (eager only)")
    p.add_argument("--no-graph", action="store_true", help="eager mode only")
    p.add_argument("--no-eager", action="store_true",
                   help="CUDA graph only (the comparison's form; eager columns n/a)")
    p.add_argument("--mode", default="det", metavar="det|nondet|det,nondet",
                   help="det (default): deterministic cuDNN and use_deterministic_algorithms(True); "
                   "nondet: cudnn.benchmark, no deterministic algorithms (against divtrace's "
                   "--cudnn-algo fastest); a comma-separated list runs each, one row per mode")
    p.add_argument("--gates", default="fused", choices=GATES,
                   help="PredNet gate convolutions: fused (default: one 4K-channel convolution per "
                   "layer, split into i, f, o, c) or separate (four K-channel convolutions, as divtrace)")
    p.add_argument("--check", type=int, nargs="?", const=5, default=0, metavar="N",
                   help="run N steps (default 5) per configuration and mode and print every loss")
    p.add_argument("--fill-uninitialized", dest="fill_uninit", action="store_true", default=False,
                   help="det mode: torch.utils.deterministic.fill_uninitialized_memory = True (torch's "
                   "default: NaN memsets of every new tensor; changes no result)")
    p.add_argument("--no-fill-uninitialized", dest="fill_uninit", action="store_false",
                   help="fill_uninitialized_memory = False (the default)")
    g = p.add_argument_group("autoencoder (config ae)")
    g.add_argument("--layers", default="784,128,32,128,784")
    g.add_argument("--act", default="sigmoid", choices=sorted(ACTS))
    g.add_argument("--ae-batch", type=int, default=100)
    g.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"],
                   help="autoencoder optimizer (default sgd; PredNet always uses adam)")
    g.add_argument("--lr", type=float, default=None,
                   help="autoencoder learning rate (default 3.0 for sgd, 3e-4 for adam)")
    g = p.add_argument_group("PredNet (config custom; giving any selects it)")
    g.add_argument("--stack", default=None, help="A channels per layer (default 1,16,32,64)")
    g.add_argument("--r-stack", default=None, help="R channels per layer (default: --stack)")
    g.add_argument("--size", default=None, help="HxW (default 64x64)")
    g.add_argument("--nt", type=int, default=None, help="time steps (default 20)")
    g.add_argument("--batch", type=int, default=None, help="sequences per batch (default 4)")
    g.add_argument("--layer-weights", default=None, help="default 1,0,...,0")
    g.add_argument("--pn-lr", type=float, default=1e-3, help="PredNet Adam learning rate (default 1e-3)")
    a = p.parse_args(argv)

    custom_given = any(v is not None for v in (a.stack, a.r_stack, a.size, a.nt, a.batch, a.layer_weights))
    names = a.config or (["custom"] if custom_given else list(DEFAULT_CONFIGS))
    if a.warmup < 2 or a.steps < 1:
        p.error("--warmup must be at least 2 and --steps at least 1")
    a.modes = [m.strip() for m in a.mode.split(",")]
    if not a.modes or any(m not in MODES for m in a.modes) or len(set(a.modes)) != len(a.modes):
        p.error("--mode '%s': expected det, nondet or det,nondet" % a.mode)
    if a.no_graph and a.no_eager:
        p.error("--no-graph and --no-eager leave nothing to run")
    if a.check and a.check < 3:
        p.error("--check N: N at least 3")
    if a.lr is None:
        a.lr = 3.0 if a.optimizer == "sgd" else 3e-4

    cfgs = []
    for name in names:
        if name == "custom":
            cfg = dict(model="prednet",
                       stack=parse_list(a.stack or "1,16,32,64", int, "--stack"),
                       size=tuple(parse_list((a.size or "64x64").replace("x", ","), int, "--size")),
                       nt=a.nt or 20, batch=a.batch or 4)
        else:
            cfg = dict(CONFIGS[name])
        cfg["name"] = name
        cfg["gates"] = a.gates
        if cfg["model"] == "autoencoder":
            cfg["widths"] = parse_list(a.layers, int, "--layers")
            cfg["batch"] = a.ae_batch
            cfg["act"], cfg["optimizer"], cfg["lr"] = a.act, a.optimizer, a.lr
            if cfg["widths"][0] != cfg["widths"][-1]:
                p.error("--layers: the first and last widths must be equal")
        else:
            nl = len(cfg["stack"])
            cfg["rstack"] = parse_list(a.r_stack, int, "--r-stack") if (name == "custom" and a.r_stack) \
                else list(cfg["stack"])
            cfg["lw"] = parse_list(a.layer_weights, float, "--layer-weights") \
                if (name == "custom" and a.layer_weights) else default_lw(nl)
            cfg["optimizer"], cfg["lr"] = "adam", a.pn_lr
            h, w = cfg["size"]
            if len(cfg["rstack"]) != nl or len(cfg["lw"]) != nl:
                p.error("--r-stack and --layer-weights need one entry per --stack entry")
            if h % (1 << (nl - 1)) or w % (1 << (nl - 1)):
                p.error("--size %dx%d: must be multiples of %d for %d layers" % (h, w, 1 << (nl - 1), nl))
            if cfg["nt"] < 2 or not any(cfg["lw"]):
                p.error("PredNet needs --nt >= 2 and a nonzero layer weight")
        cfgs.append(cfg)
    return a, cfgs


MODE_TEXT = {
    "det": "cudnn.deterministic, cudnn.benchmark off, use_deterministic_algorithms(True), "
           "fill_uninitialized_memory %s",
    "nondet": "cudnn.benchmark on, cudnn.deterministic off, use_deterministic_algorithms(False)",
}


def header(device, args):
    lines = ["## PyTorch %s, %s" % (torch.__version__, device_name(device)), ""]
    modes = "; ".join("%s: %s" % (m, MODE_TEXT[m] % args.fill_uninit if m == "det" else MODE_TEXT[m])
                      for m in args.modes)
    gates = ("PredNet gates %s (%s)" % (args.gates, "one 4K-channel convolution per layer, split into "
                                        "i, f, o, c" if args.gates == "fused" else "four K-channel "
                                        "convolutions per layer"))
    if device.type == "cuda":
        lines.append("CUDA %s, cuDNN %s; float32, TF32 off (matmul and cuDNN), CUBLAS_WORKSPACE_CONFIG=%s. "
                     "Mode %s. %s." % (torch.version.cuda, torch.backends.cudnn.version(),
                                        os.environ["CUBLAS_WORKSPACE_CONFIG"], modes, gates))
    else:
        lines.append("float32 on the cpu, %d threads. Mode %s. %s." % (torch.get_num_threads(), modes, gates))
    return "\n".join(lines)


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def main(argv):
    args, cfgs = parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_models.py: no CUDA device visible", file=sys.stderr)
        return 2
    graph = device.type == "cuda" and not args.no_graph
    eager = not args.no_eager or not graph
    print(header(device, args))
    print()

    if args.check:
        for cfg in cfgs:
            for mode in args.modes:
                set_arithmetic(mode, args.fill_uninit)
                print("%s, %s, gates %s: %s" % (cfg["name"], mode, gates_col(cfg), describe(cfg)))
                if eager:
                    _, losses = run_eager(cfg, device, args, args.check, 0, record=True)
                    print("  eager: " + " ".join("%.6g" % v for v in losses))
                if graph:
                    _, losses = run_graph(cfg, device, args, 2, args.check - 2, record=True)
                    print("  graph: " + " ".join("%.6g" % v for v in losses))
                release(device)
        return 0

    total = args.warmup + args.steps
    print("Median ms per training step (zero_grad, forward, backward, optimizer step) over %d "
          "timed steps after %d warm-up steps, %s; loss is the step-%d loss."
          % (args.steps, args.warmup, "CUDA events" if device.type == "cuda" else "wall clock", total))
    print()
    print("| configuration | mode | gates | eager ms | graph ms | graph speed-up | loss, eager | loss, graph |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    sys.stdout.flush()
    for cfg in cfgs:
        for mode in args.modes:
            set_arithmetic(mode, args.fill_uninit)
            me = le = mg = lg = None
            if eager:
                te, le = run_eager(cfg, device, args, args.warmup, args.steps, record=False)
                me = statistics.median(te)
                release(device)
            if graph:
                tg, lg = run_graph(cfg, device, args, args.warmup, args.steps, record=False)
                mg = statistics.median(tg)
                release(device)
            na = "n/a"
            print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                describe(cfg), mode, gates_col(cfg),
                "%.3f" % me if me is not None else na,
                "%.3f" % mg if mg is not None else na,
                "%.2fx" % (me / mg) if me is not None and mg is not None else na,
                "%.6g" % le[-1] if le is not None else na,
                "%.6g" % lg[-1] if lg is not None else na))
            sys.stdout.flush()
    return 0


def gates_col(cfg):
    return cfg["gates"] if cfg["model"] == "prednet" else "-"


def release(device):
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
