"""The optimization techniques a candidate uses, tagged from its code.

One vocabulary for everything that reasons about techniques: the reward-to-go model's
code features, the quality-diversity archive's cells, and the staged schedules that
permit techniques stage by stage. ``loop`` (reordering, fusing and hoisting loops) is
what every candidate may do; the rest are detected.
"""

from __future__ import annotations

import re

LOOP = "loop"

#: what the field reports makes kernels fast, each with a detector
PATTERNS: dict[str, re.Pattern[str]] = {
    "tiling": re.compile(r"\b(TILE\w*|BLOCK_?\w*|tile\w*)\b"),
    "shared_memory": re.compile(r"__shared__"),
    "vectorized": re.compile(r"\bfloat4\b|\bhalf2\b|__m256|__m512|_mm\d*_\w+|#pragma\s+omp\s+simd|\bvec\w*\b"),
    "unrolled": re.compile(r"#pragma\s+(GCC\s+)?unroll|\bUNROLL\b"),
    "threads": re.compile(r"#pragma\s+omp\s+parallel|blockIdx|threadIdx|std::thread"),
    "reduction": re.compile(r"__shfl\w*|reduction\s*\(|atomicAdd"),
}

#: how a prompt names each technique when it permits or forbids it
DESCRIPTIONS: dict[str, str] = {
    LOOP: "loop-level changes: reorder, fuse or hoist loops, drop temporaries",
    "tiling": "tiling or blocking for the caches",
    "shared_memory": "CUDA __shared__ memory",
    "vectorized": "explicit vectorization (omp simd, intrinsics, float4/half2 accesses)",
    "unrolled": "unrolling pragmas",
    "threads": "threads (OpenMP parallel loops, CUDA thread blocks, std::thread)",
    "reduction": "parallel reductions (warp shuffles, atomics, OpenMP reduction clauses)",
}

NAMES: tuple[str, ...] = (LOOP, *PATTERNS)


def tags(code: str) -> frozenset[str]:
    """The detected techniques (``loop`` is implied, never listed)."""
    return frozenset(name for name, pattern in PATTERNS.items() if pattern.search(code))


def cell_name(techniques: frozenset[str]) -> str:
    return "+".join(sorted(techniques)) or LOOP
