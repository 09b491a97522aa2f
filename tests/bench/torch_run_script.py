#!/usr/bin/env python3
"""The training script of torch_run_bench.py: the autoencoder of
torch_models.py's config ae (784-128-32-128-784, sigmoid, batch 100, SGD)
in the usual PyTorch style, timing its own steps. --edit is the hand-edited
loop (divtrace.record around it, rec.step(loss) after each step); without
it the script knows nothing of divtrace, and divtrace run records it
unchanged. Prints "median step: X ms" (the median of the timed steps, each
ending with the loss.item() a training loop logs)."""
import argparse
import statistics
import time

import torch
from torch import nn


class AutoEncoder(nn.Module):
    def __init__(self, widths=(784, 128, 32, 128, 784)):
        super().__init__()
        layers = []
        for a, b in zip(widths, widths[1:]):
            layers += [nn.Linear(a, b), nn.Sigmoid()]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--edit", metavar="TRACE", help="record through divtrace.record, hand-edited")
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device(args.device)
    data = torch.rand(50 * 100, 784, generator=torch.Generator().manual_seed(1)).to(dev)
    model = AutoEncoder().to(dev)
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=3.0)
    rec = None
    if args.edit:
        import divtrace
        rec = divtrace.record(model, args.edit, optimizer=optimizer).open()
        rec.add_module("mseloss", criterion)
    times = []
    for step in range(args.warmup + args.steps):
        x = data[(step % 50) * 100:(step % 50 + 1) * 100]
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss = criterion(model(x), x)
        loss.backward()
        optimizer.step()
        if rec is not None:
            rec.step(loss)
        loss.item()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    if rec is not None:
        rec.close()
    print("median step: %.4f ms" % (1e3 * statistics.median(times)))


if __name__ == "__main__":
    main()
