"""Stored benchmark results of a branch: a baseline that need not be re-run, and a trend.

Each record is one commit's per-process samples (what ``maxcode bench-ab`` measures: one
figure per short pytest process), with the timer, the pytest arguments and the kind of
process (forked from a server, or a new interpreter) that produced them, since samples taken
another way measure something else.
The file is plain JSON so that CI can carry it between runs in a cache or an artifact, the
way github-action-benchmark keeps its data on a branch. It keeps the newest ``KEEP`` records.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from .._files import write_atomic
from ..errors import MaxcodeError

#: how the runs of a record were started (see ``bench.ab.processes``)
Processes = Literal["forked", "fresh"]

#: records kept per file: months of weekly pushes, a few hundred kilobytes at most
KEEP = 60
#: points in a trend line
TREND = 8


@dataclass(frozen=True)
class Record:
    commit: str
    ref: str
    timer: str  # "time" (seconds) or "instructions"
    args: tuple[str, ...]  # the pytest arguments
    samples: Mapping[str, Sequence[float]]  # benchmark -> one figure per process
    when: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    processes: Processes = field(kw_only=True)

    def measured_as(self, timer: str, args: Sequence[str], processes: Processes) -> bool:
        return (self.timer, self.args, self.processes) == (timer, tuple(args), processes)

    def medians(self) -> dict[str, float]:
        return {name: statistics.median(xs) for name, xs in self.samples.items() if xs}

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["args"], d["samples"] = list(self.args), {k: list(v) for k, v in self.samples.items()}
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Record:
        samples = {str(k): [float(x) for x in v] for k, v in dict(d["samples"]).items()}
        # records written before the kind was kept: new interpreters were the default then (and one
        # who asked for forked runs gets the base measured again, once, where a baseline is looked up)
        processes: Processes = "forked" if d.get("processes") == "forked" else "fresh"
        return cls(str(d["commit"]), str(d["ref"]), str(d["timer"]), tuple(str(a) for a in d.get("args", ())), samples,
                   str(d.get("when", "")), processes=processes)


@dataclass
class History:
    path: Path
    records: list[Record] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> History:
        """The file's records; none when it does not exist yet (the first run of a branch)."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(path)
        except (OSError, ValueError) as e:
            raise MaxcodeError(f"{path}: not a benchmark history ({e}); delete it to start a new one") from None
        try:
            return cls(path, [Record.from_json(r) for r in data["records"]])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise MaxcodeError(f"{path}: not a benchmark history (a 'records' list); delete it to start a new one") from None

    def find(self, commit: str, timer: str, args: Sequence[str], *, processes: Processes) -> Record | None:
        """The newest record of this commit measured the same way."""
        for r in reversed(self.records):
            if r.commit == commit and r.measured_as(timer, args, processes):
                return r
        return None

    def add(self, record: Record) -> None:
        """Append, replacing an older record of the same commit measured the same way."""
        self.records = [r for r in self.records
                        if r.commit != record.commit or not r.measured_as(record.timer, record.args, record.processes)]
        self.records.append(record)
        del self.records[:-KEEP]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps({"records": [r.to_json() for r in self.records]}, indent=1) + "\n")

    def trend(self, name: str, ref: str, timer: str, args: Sequence[str], *, processes: Processes, n: int = TREND) -> list[float]:
        """The benchmark's medians over the newest ``n`` records of ``ref`` measured this way, oldest first."""
        out = [statistics.median(r.samples[name]) for r in self.records
               if r.ref == ref and r.measured_as(timer, args, processes) and r.samples.get(name)]
        return out[-n:]
