#!/usr/bin/env python3
# train_mlp_by_hand.py: train_mlp.py's training loop with the recording
# written in by hand through divtrace.record, as a user of the Python API
# would: the trace `divtrace run -- python train_mlp.py` writes must hold
# the same records (tests/torch/test_run.py). Usage: train_mlp_by_hand.py
# TRACE [train_mlp.py's options].
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader

import divtrace
from train_mlp import MLP, Blobs, evaluate, parse_args, targets


def main():
    path, args = sys.argv[1], parse_args(sys.argv[2:])
    torch.manual_seed(args.seed)
    train_loader = DataLoader(Blobs(args.samples, seed=1), batch_size=args.batch_size, shuffle=True,
                              drop_last=True)
    val_loader = DataLoader(Blobs(64, seed=2), batch_size=32)
    model = MLP()
    criterion = nn.CrossEntropyLoss() if args.loss == "ce" else nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    with divtrace.record(model, path, optimizer=optimizer) as rec:
        rec.add_module(type(criterion).__name__.lower(), criterion)
        for epoch in range(args.epochs):
            for x, y in train_loader:
                optimizer.zero_grad()
                loss = criterion(model(x), targets(y, args.loss))
                loss.backward()
                optimizer.step()
                rec.step(loss)
            scheduler.step()
            print("epoch %d: train loss %.4f, validation loss %.4f"
                  % (epoch, loss.item(), evaluate(model, val_loader, criterion, args.loss)))


if __name__ == "__main__":
    main()
