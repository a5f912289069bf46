"""A KernelBench-style compat candidate: the fused chain built with load_inline."""

import torch
from torch.utils.cpp_extension import load_inline

SOURCE = """
#include <torch/extension.h>
torch::Tensor chain(torch::Tensor x, torch::Tensor b) {
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* bp = b.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t cols = x.size(1), n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    float v = xp[i] * 2.0f + bp[i % cols];
    v = v < 0.f ? 0.f : v;
    yp[i] = v * v - 0.5f;
  }
  return y;
}
"""

sources = [SOURCE]
ext = load_inline(name="chain_ext", cpp_sources=sources, functions=["chain"], extra_cflags=["-O3"])
assert sources == [SOURCE], "load_inline must not mutate the caller's list"


class ModelNew(torch.nn.Module):
    def forward(self, x, bias):
        return ext.chain(x.contiguous(), bias.contiguous())
