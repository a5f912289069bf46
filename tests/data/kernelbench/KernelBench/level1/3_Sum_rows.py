import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim)


batch_size = 32
features = 256
reduce_dim = 1


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [reduce_dim]
