"""The attack tests' reference: y = tanh(relu(2x + b))^2 - 0.5 in KernelBench format.

One MiB of float32 per call and a transcendental in the chain: the reference's work dwarfs a
few system calls or a memcpy (what an attacker that skips or moves its work still pays), and
an honest single-threaded kernel (scalar tanhf against torch's vectorized tanh) is not faster,
so only a landed attack makes one of the attackers "faster". Small enough that a batch of
candidates is checked in seconds.
"""

import torch


class Model(torch.nn.Module):
    def forward(self, x, bias):
        y = torch.tanh(torch.relu(x * 2.0 + bias))
        return y * y - 0.5


def get_inputs():
    return [torch.randn(256, 1024), torch.randn(1024)]


def get_init_inputs():
    return []
