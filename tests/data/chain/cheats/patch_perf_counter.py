"""Cheat: correct ModelNew that makes the clock run slow so it looks fast."""

import time

import torch

_real = time.perf_counter
_real_ns = time.perf_counter_ns
time.perf_counter = lambda: _real() / 10
time.perf_counter_ns = lambda: _real_ns() // 10


class ModelNew(torch.nn.Module):
    def forward(self, x, bias):
        y = torch.relu(x * 2.0 + bias)
        return y * y - 0.5
