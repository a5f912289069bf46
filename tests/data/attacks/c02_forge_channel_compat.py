"""Attack class 2 (issue 13), the compat form: forging the result channel at import.

The module is imported inside the worker, so at import it walks the Python stack up to the
frame holding the worker's connection to the parent (``conn``) and the workloads
(``inputs``) and, with the worker's own sender, claims the work is done before any
correctness message: "loaded" then "done" in the protocol of named events with keyword data,
or in the older positional one a "timing" message per workload (a 10x speedup, no re-checked
outputs) then "done"; then it exits. ModelNew computes nothing: a "faster" verdict can only come from the
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
    send = sys.modules["__main__"]._send_child
    conn = f.f_locals["conn"]
    ref = [300000 + (i % 7) * 1000 for i in range(64)]
    cand = [30000 + (i % 5) * 100 for i in range(64)]
    try:  # the protocol of named events with keyword data: loaded, then straight to done
        send(conn, "loaded", load_s=0.0)
    except TypeError:  # the older positional one: a timing message per workload, then done
        for w in f.f_locals["inputs"]:
            send(conn, "timing", w["name"], ref, cand, 1, [])
    send(conn, "done")
    os._exit(0)

try:
    _forge()
except Exception:
    pass


class ModelNew(torch.nn.Module):
    def forward(self, x, bias):
        return torch.empty_like(x)
