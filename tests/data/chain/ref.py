"""A small fused elementwise chain in KernelBench format: y = relu(2x + b)^2 - 0.5."""

import torch


class Model(torch.nn.Module):
    def forward(self, x, bias):
        y = torch.relu(x * 2.0 + bias)
        return y * y - 0.5


def get_inputs():
    return [torch.randn(64, 1024), torch.randn(1024)]


def get_init_inputs():
    return []
