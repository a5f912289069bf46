"""A compat candidate: the reference under torch.compile."""

import torch


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fn = torch.compile(self._forward, dynamic=False)

    @staticmethod
    def _forward(x, bias):
        y = torch.relu(x * 2.0 + bias)
        return y * y - 0.5

    def forward(self, x, bias):
        return self.fn(x, bias)
