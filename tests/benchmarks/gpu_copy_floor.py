"""What the GPU oracle's timed interval holds besides the kernel: the device-to-host copy of the
results into the shared slots, from pageable or page-locked (cudaHostRegister) shared memory,
beside the eager reference's kernels for tests/data/chain at the same size. Needs a CUDA device.

    python tests/benchmarks/gpu_copy_floor.py
"""

from __future__ import annotations

import mmap
import os
import time

import torch


def per_call(fn, reps: int = 30) -> float:
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def copies(host: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Seconds per copy of ``y`` into ``host``: as it is, then page-locked (nan if refused)."""
    pageable = per_call(lambda: host.copy_(y))
    cudart, base = torch.cuda.cudart(), host.data_ptr()
    locked = float("nan")
    if int(cudart.cudaHostRegister(base, y.numel() * y.element_size(), 0)) == 0:
        locked = per_call(lambda: host.copy_(y))
        cudart.cudaHostUnregister(base)
    return pageable, locked


def row(rows: int) -> str:
    """One output size: the eager chain, then its result copied into pageable and locked slots."""
    x, b = torch.randn(rows, 4096, device="cuda"), torch.randn(4096, device="cuda")
    nbytes = x.numel() * 4

    def chain() -> torch.Tensor:
        y = torch.relu(x * 2.0 + b)
        return y * y - 0.5

    fd = os.memfd_create("slots")
    os.ftruncate(fd, nbytes)
    with mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
        pageable, locked = copies(torch.frombuffer(m, dtype=torch.float32).view(rows, 4096), chain())
    os.close(fd)
    return f"| {nbytes / 2**20:.0f} MiB | {per_call(chain) * 1e6:.1f} us | {pageable * 1e6:.1f} us | {locked * 1e6:.1f} us |"


def main() -> None:
    print(f"{torch.cuda.get_device_name()}; times are the best of 5 means of 30 calls")
    print("| output | eager chain (5 kernels) | D2H, pageable shared | D2H, page-locked shared |")
    print("|---:|---:|---:|---:|")
    for rows in (64, 1024, 4096, 16384):
        print(row(rows))


if __name__ == "__main__":
    main()
