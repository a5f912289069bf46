"""An nn.Module with parameters: y = relu(x @ W.T + b)."""

import torch


class Model(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = torch.nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(32, 48)]


def get_init_inputs():
    return [48, 16]
