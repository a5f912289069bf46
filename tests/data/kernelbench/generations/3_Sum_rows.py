import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Correct but slow: one row at a time."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.stack([sum(row[j] for j in range(row.shape[0])) for row in x])
