import torch
import torch.nn as nn


class Model(nn.Module):
    """Outputs that do not depend on the inputs: any candidate returning zeros passes."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 0.0


batch_size = 16
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
