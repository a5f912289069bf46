"""Recording the real arguments targets receive while the user's tests run.

A bounded sample: at most ``max_signatures`` distinct shape/dtype signatures per target,
``sets_per_signature`` input sets each, and ``max_bytes`` in all; tensors are detached
and copied to the CPU, so the tests can go on mutating theirs. Every test that called a
target is remembered, captured or not: those are the tests that re-verify a kernel.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .handle import TargetHandle


def signature(values: tuple) -> str:
    """A readable signature: ``float32[64,1024], float32[1024], float``."""
    import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

    parts = []
    for v in values:
        if isinstance(v, torch.Tensor):
            dtype = str(v.dtype).replace("torch.", "")
            layout = "" if v.is_contiguous() else "(strided)"
            parts.append(f"{dtype}[{','.join(map(str, v.shape))}]{layout}@{v.device.type}")
        else:
            parts.append(type(v).__name__)
    return ", ".join(parts)


@dataclass
class Workload:
    signature: str
    sets: list[list[Any]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return hashlib.sha256(self.signature.encode()).hexdigest()[:12]


@dataclass
class TargetCapture:
    handle: TargetHandle
    workloads: dict[str, Workload] = field(default_factory=dict)
    callers: list[str] = field(default_factory=list)
    benchmark_callers: list[str] = field(default_factory=list)
    calls: int = 0
    bytes: int = 0
    module: Any = None  # for nn.Module targets: a copy of the first instance seen, weights included
    module_signature: str | None = None
    skipped: dict[str, int] = field(default_factory=dict)  # why calls were not captured

    def note_skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


class Recorder:
    """Installed as a target's ``_impl`` during ``pytest --maxcode``; always runs the reference."""

    def __init__(self, max_signatures: int = 4, sets_per_signature: int = 2, max_bytes: int = 256 << 20) -> None:
        self.max_signatures = max_signatures
        self.sets_per_signature = sets_per_signature
        self.max_bytes = max_bytes
        self.targets: dict[str, TargetCapture] = {}
        self.current_test: str | None = None
        self.current_uses_benchmark = False

    def attach(self, handle: TargetHandle) -> None:
        cap = self.targets.setdefault(handle.id, TargetCapture(handle))
        recorder = self

        def impl(fn: Any, args: tuple, kwargs: dict) -> Any:
            # copied before the call (the reference may write into its arguments), kept only
            # after it returned: a call that raised (inside ``pytest.raises``, say) shows what
            # the reference rejects, and a workload the reference rejects fails every check
            keep = recorder.record(cap, args, kwargs)
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                if keep is not None:
                    cap.note_skip("the call raised an exception")
                raise
            if keep is not None:
                keep()
            return result

        handle._impl = impl
        handle.active = "capture"
        handle.reason = "pytest --maxcode is recording its inputs"

    def record(self, cap: TargetCapture, args: tuple, kwargs: dict) -> Callable[[], None] | None:
        """Note the caller and copy the arguments; returns what keeps the copy as an input set
        (call it once the call returned), or None when this call is not captured."""
        import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

        cap.calls += 1
        test = self.current_test
        if test is not None and test not in cap.callers:
            cap.callers.append(test)
            if self.current_uses_benchmark:
                cap.benchmark_callers.append(test)
        values = args[1:] if cap.handle.kind == "module" else args
        if cap.handle.kind == "module" and not self._same_module(cap, args[0]):
            return None
        if kwargs:
            cap.note_skip("called with keyword arguments")
            return None
        if any(not isinstance(v, (torch.Tensor, bool, int, float)) for v in values):
            cap.note_skip("an argument is neither a tensor nor an int/float/bool")
            return None
        sig = signature(values)
        w = cap.workloads.get(sig)
        if w is None and len(cap.workloads) >= self.max_signatures:
            cap.note_skip(f"more than {self.max_signatures} distinct signatures")
            return None
        if w is not None and len(w.sets) >= self.sets_per_signature:
            return None
        size = sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))
        if cap.bytes + size > self.max_bytes:
            cap.note_skip(f"over the {self.max_bytes >> 20} MiB capture limit")
            return None
        with torch.no_grad():
            copied = [v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v for v in values]

        def keep() -> None:
            # checked again: a call made inside this one (recursion) may have filled the slots
            w = cap.workloads.get(sig)
            if w is None:
                if len(cap.workloads) >= self.max_signatures:
                    return
                w = cap.workloads[sig] = Workload(sig)
            if len(w.sets) >= self.sets_per_signature or cap.bytes + size > self.max_bytes:
                return
            w.sets.append(copied)
            cap.bytes += size

        return keep

    @staticmethod
    def _same_module(cap: TargetCapture, module: Any) -> bool:
        """One configuration per module target: the first instance's parameter shapes."""
        # only module targets, under --maxcode: keeps the package's start-up fast
        from .introspect import module_state

        sig = repr(module_state(module))
        if cap.module_signature is None:
            cap.module_signature = sig
            cap.module = copy.deepcopy(module).to("cpu")
            return True
        if sig != cap.module_signature:
            cap.note_skip("an instance with other parameter shapes than the first one seen")
            return False
        return True

    def save(self, root: Path) -> dict[str, list[Path]]:
        """Write each workload as ``.maxcode/inputs/<target>/<sig-hash>.pt``; returns the files."""
        import torch  # torch is imported when a target runs, not with the package: keeps start-up fast

        out: dict[str, list[Path]] = {}
        for target_id, cap in self.targets.items():
            d = root / ".maxcode" / "inputs" / target_id
            d.mkdir(parents=True, exist_ok=True)
            files = []
            for w in cap.workloads.values():
                if not w.sets:
                    continue
                path = d / f"{w.key}.pt"
                tmp = path.with_suffix(".tmp")
                torch.save({"signature": w.signature, "sets": w.sets}, tmp)
                tmp.replace(path)
                files.append(path)
            if cap.module is not None and files:
                torch.save(cap.module, d / "module.pt.tmp")
                (d / "module.pt.tmp").replace(d / "module.pt")
            out[target_id] = files
        return out
