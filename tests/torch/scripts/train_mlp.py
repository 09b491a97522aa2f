#!/usr/bin/env python3
# train_mlp.py: a small classifier trained in the usual PyTorch style, written
# as if divtrace did not exist (tests/torch/test_run.py records it with
# `divtrace run`): argparse, a Dataset and a shuffling DataLoader, an
# nn.Module, a loss module, Adam, a learning-rate schedule, an evaluation
# pass under torch.no_grad() after each epoch.
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

FEATURES, CLASSES = 8, 4


class Blobs(Dataset):
    """Points scattered around one centre per class."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        centres = 2.0 * torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(1234))
        self.labels = torch.randint(0, CLASSES, (n,), generator=g)
        self.points = centres[self.labels] + torch.randn(n, FEATURES, generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.points[i], self.labels[i]


class MLP(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, CLASSES)

    def forward(self, x):
        h = self.act(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        return self.fc3(h)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Train a small MLP on synthetic blobs.")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--samples", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--loss", choices=("ce", "mse"), default="ce")
    return p.parse_args(argv)


def targets(labels, loss):
    return labels if loss == "ce" else F.one_hot(labels, CLASSES).float()


def evaluate(model, loader, criterion, loss):
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            total += criterion(model(x), targets(y, loss)).item() * len(y)
            n += len(y)
    model.train()
    return total / n


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    train_loader = DataLoader(Blobs(args.samples, seed=1), batch_size=args.batch_size, shuffle=True,
                              drop_last=True)
    val_loader = DataLoader(Blobs(64, seed=2), batch_size=32)
    model = MLP()
    criterion = nn.CrossEntropyLoss() if args.loss == "ce" else nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for epoch in range(args.epochs):
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(x), targets(y, args.loss))
            loss.backward()
            optimizer.step()
        scheduler.step()
        print("epoch %d: train loss %.4f, validation loss %.4f"
              % (epoch, loss.item(), evaluate(model, val_loader, criterion, args.loss)))


if __name__ == "__main__":
    main()
