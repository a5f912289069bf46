"""A KernelBench-format problem whose Model is marked for pytest-maxcode.

Model, get_inputs() and get_init_inputs() are what KernelBench expects; the decorator
makes the same file a target of `pytest --maxcode`.
"""

import torch
from torch import nn

import pytest_maxcode as maxcode


@maxcode.optimize(lang="cpp")
class Model(nn.Module):
    """Per-feature scale and shift, then ReLU: three passes in eager PyTorch."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x * self.scale + self.shift)


def get_inputs():
    return [torch.randn(2048, 512)]


def get_init_inputs():
    return [512]
