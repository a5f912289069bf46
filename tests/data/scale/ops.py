"""A plain function reference with a Python scalar argument."""

import torch


def scale_add(x, y, alpha):
    return x + alpha * y


def make_inputs():
    return [torch.randn(1000), torch.randn(1000), 0.75]


def all_zero(x, y, alpha):
    return torch.zeros_like(x) * alpha


def explode(x, y, alpha):
    raise RuntimeError("the reference is broken")
