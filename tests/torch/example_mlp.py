# example_mlp.py: the README's PyTorch example (Tracing your own training):
# the same small MLP trained twice on the CPU, the second time with its
# middle layer accumulating in float64. Usage: python3 example_mlp.py
# (writes a.dtr and b.dtr here), then divtrace diff a.dtr b.dtr.
import torch
import torch.nn.functional as F
from torch import nn

import divtrace


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(F.relu(self.fc1(x)))))


def train(path, fc2_in_float64=False):
    torch.manual_seed(0)
    model = MLP()
    if fc2_in_float64:
        w, b = model.fc2.weight, model.fc2.bias
        model.fc2.forward = lambda x: F.linear(x.double(), w.double(), b.double()).float()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    config = {"seed": 0, "fc2": "float64" if fc2_in_float64 else "float32"}
    with divtrace.record(model, path, config=config, optimizer=opt, checkpoint_every=10) as rec:
        for step in range(50):
            x, y = torch.randn(32, 8, generator=g), torch.randn(32, 4, generator=g)
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            rec.step(loss)


train("a.dtr")
train("b.dtr", fc2_in_float64=True)
