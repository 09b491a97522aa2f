#!/usr/bin/env python3
# train_cases.py: small training loops in the usual PyTorch style, one per
# --case, for what `divtrace run` records and what it refuses
# (tests/torch/test_run.py). Written as if divtrace did not exist; each
# prints its loss per step ("step N loss X", to 8 decimals).
#
#   plain         SGD with momentum, a functional loss (F.mse_loss)
#   amp           torch.autocast (bfloat16 on the CPU) with a GradScaler
#   amp-skip      the same with a corrupt batch at step 3 (an infinite
#                 loss), whose optimizer step the GradScaler skips
#   accumulate    gradient accumulation: two backward() per optimizer.step()
#   gan           a generator and a discriminator, an optimizer each
#   split         one model, one optimizer for its body and one for its head
#   parts         one model whose body and head the loop calls one by one
#   lbfgs         LBFGS, whose step takes a closure
#   no-optimizer  inference only
#   eval-end      evaluates with gradients on (no torch.no_grad()) at the end
#   eval-between  ... and after --fail-at steps, then trains on
#   raise         raises RuntimeError after --fail-at steps
#   exit          sys.exit(3) after --fail-at steps
#   ddp           DistributedDataParallel in a process group of one (gloo)
import argparse
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.body(x))


def batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)) for _ in range(n)]


def report(step, loss):
    print("step %d loss %.8f" % (step, loss.item()), flush=True)


def plain(args):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step, (x, y) in enumerate(batches(args.steps)):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        report(step, loss)
        if args.fail_at is not None and step + 1 == args.fail_at:
            if args.case == "raise":
                raise RuntimeError("loss diverged at step %d" % step)
            sys.exit(3)


def amp(args):
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    criterion = nn.MSELoss()
    for step, (x, y) in enumerate(batches(args.steps)):
        if args.case == "amp-skip" and step == 3:
            x[0, 0] = float("inf")
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        loss = criterion(out.float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        report(step, loss)


def accumulate(args):
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = batches(2 * args.steps)
    for step in range(args.steps):
        opt.zero_grad()
        for x, y in data[2 * step:2 * step + 2]:
            loss = F.mse_loss(model(x), y) / 2
            loss.backward()
        opt.step()
        report(step, loss)


def gan(args):
    gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 6))
    disc = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()
    for step, (real, _) in enumerate(batches(args.steps)):
        z = torch.randn(8, 4)
        opt_d.zero_grad()
        d_loss = bce(disc(real), torch.ones(8, 1)) + bce(disc(gen(z).detach()), torch.zeros(8, 1))
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        g_loss = bce(disc(gen(z)), torch.ones(8, 1))
        g_loss.backward()
        opt_g.step()
        report(step, g_loss)


def split(args):
    model = Net()
    opt_body = torch.optim.SGD(model.body.parameters(), lr=0.01)
    opt_head = torch.optim.Adam(model.head.parameters(), lr=1e-3)
    for step, (x, y) in enumerate(batches(args.steps)):
        opt_body.zero_grad()
        opt_head.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt_body.step()
        opt_head.step()
        report(step, loss)


def evaluate_with_grad(args):
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = batches(args.steps)
    for step, (x, y) in enumerate(data):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        report(step, loss)
        if args.case == "eval-between" and step + 1 == args.fail_at:
            print("validation loss %.8f" % sum(F.mse_loss(model(x), y).item() for x, y in data[:2]))
    print("validation loss %.8f" % sum(F.mse_loss(model(x), y).item() for x, y in data[:2]))


def parts(args):
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step, (x, y) in enumerate(batches(args.steps)):
        opt.zero_grad()
        loss = F.mse_loss(model.head(model.body(x)), y)
        loss.backward()
        opt.step()
        report(step, loss)


def lbfgs(args):
    model = Net()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    for step, (x, y) in enumerate(batches(args.steps)):
        def closure():
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            return loss
        report(step, opt.step(closure))


def no_optimizer(args):
    model = Net()
    for step, (x, y) in enumerate(batches(args.steps)):
        report(step, F.mse_loss(model(x), y))


def ddp(args):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    store = os.path.join(tempfile.mkdtemp(prefix="train-cases-"), "store")
    dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
    model = DistributedDataParallel(Net())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step, (x, y) in enumerate(batches(args.steps)):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        report(step, loss)
    dist.destroy_process_group()


CASES = {"plain": plain, "amp": amp, "amp-skip": amp, "accumulate": accumulate, "gan": gan, "split": split,
         "parts": parts, "lbfgs": lbfgs, "eval-end": evaluate_with_grad, "eval-between": evaluate_with_grad,
         "no-optimizer": no_optimizer, "raise": plain, "exit": plain, "ddp": ddp}


def main():
    p = argparse.ArgumentParser(description="Small training loops, one per case.")
    p.add_argument("--case", choices=sorted(CASES), default="plain")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--fail-at", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.case in ("raise", "exit", "eval-between") and args.fail_at is None:
        args.fail_at = 3
    torch.manual_seed(args.seed)
    CASES[args.case](args)


if __name__ == "__main__":
    main()
