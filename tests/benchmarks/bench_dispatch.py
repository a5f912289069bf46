"""Cost of a decorated call when nothing is accepted: the hot path users pay in every call.

    python tests/benchmarks/bench_dispatch.py

Prints JSON: nanoseconds per call for the bare function and the decorated one (a plain
function and an nn.Module), and the overhead. Goal: under 1 microsecond.
"""

from __future__ import annotations

import json
import platform
import timeit

import torch

import pytest_maxcode as maxcode


def bare(x, y):
    return x


@maxcode.optimize
def decorated(x, y):
    return x


class Bare(torch.nn.Module):
    def forward(self, x):
        return x


@maxcode.optimize
class Decorated(torch.nn.Module):
    def forward(self, x):
        return x


def per_call_ns(stmt: str, env: dict, number: int = 1_000_000) -> float:
    return min(timeit.repeat(stmt, globals=env, number=number, repeat=5)) / number * 1e9


def main() -> None:
    t = torch.ones(1)
    env = {"bare": bare, "decorated": decorated, "t": t, "mb": Bare(), "md": Decorated()}
    f_bare = per_call_ns("bare(t, t)", env)
    f_dec = per_call_ns("decorated(t, t)", env)
    m_bare = per_call_ns("mb(t)", env, 200_000)
    m_dec = per_call_ns("md(t)", env, 200_000)
    print(json.dumps({
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(), "torch": torch.__version__},
        "function": {"bare_ns": round(f_bare, 1), "decorated_ns": round(f_dec, 1), "overhead_ns": round(f_dec - f_bare, 1)},
        "module": {"bare_ns": round(m_bare, 1), "decorated_ns": round(m_dec, 1), "overhead_ns": round(m_dec - m_bare, 1)},
        "goal_overhead_ns": 1000,
    }, indent=2))


if __name__ == "__main__":
    main()
