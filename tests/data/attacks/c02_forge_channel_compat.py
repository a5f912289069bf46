"""Attack class 2 (issue 13), the compat form: forging the result channel at import.

The module is imported inside the worker, so at import it walks the Python stack up to the
frame holding the worker's connection to the parent (``conn``) and the workloads
(``inputs``), sends one well-formed "timing" message per workload (a 10x speedup, no
re-checked outputs) and then "done" with the worker's own sender, before any correctness
message, and exits. ModelNew computes nothing: a "faster" verdict can only come from the
forgery.
"""

import os
import sys

import torch


def _forge() -> None:
    f = sys._getframe()
    while f is not None and not ("conn" in f.f_locals and "inputs" in f.f_locals):
        f = f.f_back
    if f is None:
        return
    worker = sys.modules["__main__"]
    conn = f.f_locals["conn"]
    for w in f.f_locals["inputs"]:
        ref = [300000 + (i % 7) * 1000 for i in range(64)]
        cand = [30000 + (i % 5) * 100 for i in range(64)]
        worker._send_child(conn, "timing", w["name"], ref, cand, 1, [])
    worker._send_child(conn, "done")
    os._exit(0)


try:
    _forge()
except Exception:
    pass


class ModelNew(torch.nn.Module):
    def forward(self, x, bias):
        return torch.empty_like(x)
