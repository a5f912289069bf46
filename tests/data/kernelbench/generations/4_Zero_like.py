import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Correct (the output is all zeros) but slow: one row at a time."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.stack([row * 0.0 for row in x])
