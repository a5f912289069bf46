import pytest
import torch

from mylib import fused_chain


@pytest.mark.parametrize("rows", [512, 2048])
def test_matches_formula(rows):
    x, b = torch.randn(rows, 1024), torch.randn(1024)
    expected = torch.clamp(2 * x + b, min=0) ** 2 - 0.5
    torch.testing.assert_close(fused_chain(x, b), expected)


def test_negative_inputs_give_minus_half():
    x = -torch.ones(512, 1024)
    assert torch.all(fused_chain(x, torch.zeros(1024)) == -0.5)


def test_benchmark_chain(benchmark):
    x, b = torch.randn(2048, 1024), torch.randn(1024)
    benchmark(fused_chain, x, b)
