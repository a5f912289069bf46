"""A CUDA target: bias add and tanh-GELU, two kernels and a temporary in eager PyTorch."""

import torch

import pytest_maxcode as maxcode


@maxcode.optimize(lang="cuda")
def fused_bias_gelu(x, bias):
    return torch.nn.functional.gelu(x + bias, approximate="tanh")
