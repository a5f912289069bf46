"""Broken compat candidate: raises when called."""

import torch


class ModelNew(torch.nn.Module):
    def forward(self, x, bias):
        raise ValueError("this kernel is not finished")
