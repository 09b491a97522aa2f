"""Train a small autoencoder with a residual block of its own on synthetic
data: a training script in the usual PyTorch style, written with no thought
of divtrace (tests/torch/test_explain.py traces it with divtrace run).

--bug forward and --bug backward plant a bug in the block: a forward that
scales its branch by 1.01, or a hand-written backward that forgets the
tanh's derivative."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Tanh(torch.autograd.Function):
    """tanh with its backward written out by hand."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        if BUG == "backward":
            return g            # the derivative 1 - y^2 forgotten
        return g * (1 - y * y)


class Residual(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        branch = Tanh.apply(self.fc(x))
        if BUG == "forward":
            branch = branch * 1.01
        return x + branch


class AutoEncoder(nn.Module):
    def __init__(self, features=784, hidden=64):
        super().__init__()
        self.enc = nn.Linear(features, hidden)
        self.act = nn.ReLU()
        self.block = Residual(hidden)
        self.dec = nn.Linear(hidden, features)
        self.out = nn.Sigmoid()

    def forward(self, x):
        return self.out(self.dec(self.block(self.act(self.enc(x)))))


BUG = None


def main():
    global BUG
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bug", choices=("forward", "backward"))
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    BUG = args.bug
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data = torch.rand(512, 784, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(data), batch_size=args.batch, shuffle=True,
                        generator=torch.Generator().manual_seed(2))
    model = AutoEncoder().to(args.device)
    criterion = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        total = 0.0
        for (x,) in loader:
            x = x.to(args.device)
            optimizer.zero_grad()
            loss = criterion(model(x), x)
            loss.backward()
            optimizer.step()
            total += loss.item()
        print("epoch %d: loss %.6f" % (epoch, total / len(loader)))


if __name__ == "__main__":
    main()
