"""A hot elementwise chain, in KernelBench format: y = relu(2x + b)^2 - 0.5.

Eager PyTorch runs it as four passes over memory, each allocating a fresh tensor;
the native candidate below does it in one pass.
"""

import torch


class Model(torch.nn.Module):
    def forward(self, x, bias):
        y = torch.relu(x * 2.0 + bias)
        return y * y - 0.5


def get_inputs():
    return [torch.randn(2048, 1024), torch.randn(1024)]


def get_init_inputs():
    return []
