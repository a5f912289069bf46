"""In-place references: the result is the state of their tensor arguments."""

import torch


def scale_(x, alpha):
    x.mul_(alpha)
    return x


def clamp_both_(x, y):
    x.clamp_(min=0)
    y.clamp_(max=0)


def make_scale():
    return [torch.randn(4096), 1.5]


def make_pair():
    return [torch.randn(1000), torch.randn(1000)]
