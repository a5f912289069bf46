"""A library with one hot function, marked for pytest-maxcode."""

import torch

import pytest_maxcode as maxcode


@maxcode.optimize(lang="cpp")
def fused_chain(x, bias):
    """relu(2x + b)^2 - 0.5: four passes over memory in eager PyTorch."""
    y = torch.relu(x * 2.0 + bias)
    return y * y - 0.5
