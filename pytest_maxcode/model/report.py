"""The report's records: one :class:`TargetResult` per target, under one :class:`Report`.

The report is the contract between a run, ``maxcode apply``, the bot and anyone's tools, and
``report/schema.json`` publishes it. The session builds these types, and ``to_json`` is the
one place that turns them into the published shape; ``from_json`` reads a report written
by this or another version (unknown keys are kept in ``extra`` and written back), so a
filtered run can carry the previous report's other targets over unchanged. A target's nested
rows (its workloads, benchmarks, trajectory, search and re-measure command) are
:class:`JsonRow` types with the schema's key names, so no reader indexes a row by string.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import MaxcodeError
from .jsontypes import JSON
from .strenum import PlainStrEnum

if TYPE_CHECKING:
    from typing_extensions import Self

#: the JSON a report holds below the typed fields (a row's unknown keys, the machine, the options)
Json = dict[str, Any]

#: the device of a report entry that names none (a hand-written or older report): what
#: ``maxcode remeasure``, ``maxcode apply`` and verification fall back to, in one place
DEFAULT_DEVICE = "cpu"


class TargetStatus(PlainStrEnum):
    """Where a target ended. ``FASTER`` is the search's interim answer, before the user's
    tests re-ran with the kernel; a written report never holds it."""

    VERIFIED = "verified"
    NOT_VERIFIED = "not_verified"
    NO_SPEEDUP = "no_speedup"
    SKIPPED = "skipped"
    FAILED = "failed"
    FASTER = "faster"



@dataclass
class CandidateCounts:
    tried: int = 0
    correct: int = 0
    faster: int = 0
    #: failure status -> how many candidates ended so
    failed: dict[str, int] = field(default_factory=dict)


@dataclass
class RerunResult:
    """The user's tests re-run with the kernel in place (``passed`` None: none was re-run)."""

    rerun: list[str] = field(default_factory=list)
    passed: bool | None = None
    summary: str = ""
    #: a program target's own pytest tests, re-run in a copy of the project holding the rewrite
    pytest: list[str] | None = None
    #: calls that reached the kernel in the re-run (a run that never reached it proves nothing)
    kernel_calls: int | None = None


@dataclass
class BestKernel:
    """The kernel a target's numbers belong to, as written under ``.maxcode/reports/kernels``."""

    source_path: str
    #: the schema requires the next three; a hand-written report may lack them, and a reader
    #: that does not need them (``maxcode apply`` needs only the path and the language) still reads it
    hash: str = ""
    lang: str = ""
    origin: str = ""
    params: dict[str, JSON] = field(default_factory=dict)
    build_id: str | None = None
    sha256: str | None = None


@dataclass
class Measurement:
    """How the quoted speedup was measured, and how noisy the machine was meanwhile."""

    #: each block's speedup (fresh processes and buffers, spread over the run)
    blocks: list[float] = field(default_factory=list)
    #: the fastest block over the slowest (1.0: the blocks agreed exactly)
    spread: float | None = None
    #: timed rounds set aside because other work had the CPU during them
    set_aside: int = 0
    #: what the timer noticed ("the machine was too busy for 15 undisturbed rounds", ...)
    notes: list[str] = field(default_factory=list)
    #: what one call through the kernel's call path costs, beside the kernel's own time (the
    #: compiled call: allocation, descriptors, call; in the oracle's candidate time)
    call_overhead_us: float | None = None
    #: what one call costs user code besides the kernel: the runtime dispatcher's whole planned
    #: path (signature, plan; a module's parameters and buffers), with a kernel that does nothing
    dispatch_overhead_us: float | None = None
    kernel_us: float | None = None
    #: threads each side ran on while timed: the timer keeps a core of its own, so fewer than
    #: the machine has (and than the user's own benchmarks get)
    threads: int | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> Measurement:
        """The report's ``measurement`` object; keys this version does not know are left out."""
        return cls(**_known(cls, dict(data)))



R = TypeVar("R", bound="JsonRow")

#: a row's own bookkeeping, not keys of its JSON
_ROW_META = ("extra", "absent")


class JsonRow:
    """A nested row of the report (a workload, a benchmark, an evaluation, ...): typed fields named
    as the schema's keys, ``extra`` for keys this version does not know (a newer version's, a
    plugin's), and ``absent`` for known keys the JSON it was read from lacked (an older version's
    row), so a row read and written back is the row that was read. Each subclass is a dataclass
    that declares ``extra`` and ``absent`` last; its field order is the order its keys are written."""

    extra: Json
    absent: frozenset[str]

    def to_json(self) -> Json:
        out = {f.name: _plain(getattr(self, f.name)) for f in fields(self)  # type: ignore[arg-type]
               if f.name not in _ROW_META and f.name not in self.absent}
        return {**self.extra, **out}

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> Self:
        names = [f.name for f in fields(cls) if f.name not in _ROW_META]  # type: ignore[arg-type]
        return cls(**{k: data[k] for k in names if k in data},  # type: ignore[call-arg]
                   extra={k: v for k, v in data.items() if k not in names},
                   absent=frozenset(k for k in names if k not in data))

    def given(self, name: str) -> bool:
        """Whether the row holds ``name`` (False for a key an older version's row lacked): a
        renderer shows "?" for a value it was never told, not the field's default."""
        return name not in self.absent


def rows_of(cls: type[R], rows: object) -> list[R]:
    """A list of rows read from a report on disk (``t.get("workloads")``, ...) as ``cls``, for the
    renderers: no list is no rows, and an entry that is not an object is left out, so a damaged
    or hand-edited report still renders."""
    if not isinstance(rows, (list, tuple)):
        return []
    return [r if isinstance(r, cls) else cls.from_json(r) for r in rows if isinstance(r, (cls, Mapping))]


def row_of(cls: type[R], value: object) -> R | None:
    """One row read from a report on disk (``t.get("remeasure")``) as ``cls``; None where it is
    missing or not an object."""
    if isinstance(value, cls):
        return value
    return cls.from_json(value) if isinstance(value, Mapping) else None


@dataclass
class WorkloadResult(JsonRow):
    """The best kernel's numbers on one workload (the schema's ``workload``)."""

    name: str = ""
    signature: str = ""
    #: None only in a row that did not say
    n_sets: int | None = None
    speedup: float | None = None
    speedup_ci: list[float] | None = None
    reference_s: float | None = None
    candidate_s: float | None = None
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass
class Timing(JsonRow):
    """One side of a re-run pytest-benchmark test, pooled over its runs (the schema's ``timing``;
    None only in a row that did not say)."""

    median_s: float | None = None
    mean_s: float | None = None
    stddev_s: float | None = None
    rounds: int | None = None
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass
class BenchmarkResult(JsonRow):
    """One of the user's pytest-benchmark tests, re-run with the reference and with the kernel
    (the schema's ``benchmark``): the user's own view of the change, deciding nothing."""

    name: str = ""
    reference: Timing | None = None
    candidate: Timing | None = None
    speedup: float | None = None
    speedup_ci: list[float] | None = None
    #: pairs of runs (reference, then candidate) the numbers pool
    runs: int = 1
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("reference", "candidate"):  # read from JSON: an object is a Timing, anything else none
            value = row_of(Timing, value)
        object.__setattr__(self, name, value)


@dataclass
class Evaluation(JsonRow):
    """One evaluated search node, in the order the search paid for them (the schema's
    ``evaluation``: one row of a target's ``trajectory``)."""

    #: 1-based, in evaluation order
    index: int = 0
    #: None for a format failure (no code to hash)
    hash: str | None = None
    origin: str = ""
    status: str = ""
    speedup: float | None = None
    #: the candidate's own median time, what ranks ``faster`` evaluations against each other
    candidate_s: float | None = None
    speedup_ci: list[float] | None = None
    #: a not_faster verdict whose interval was too wide to decide: never reused from the store
    undecided: bool = False
    #: the OS sandbox the candidate ran in
    sandbox: str | None = None
    #: a seed's tunable values
    params: dict[str, JSON] = field(default_factory=dict)
    #: the verdict's first reasons (or the proposal's error)
    reasons: list[str] = field(default_factory=list)
    #: the verdict was taken from the store instead of measured again
    resumed: bool = False
    #: the node's id in the store (None: not stored)
    node: int | None = None
    #: the parent evaluation's ``index`` (None: a root, started from the reference)
    parent: int | None = None
    #: None only in a report written before search trees
    depth: int | None = None
    step: int = 0
    reward: float | None = None
    strategy: str = ""
    critique: str | None = None
    critique_flags: list[str] = field(default_factory=list)
    samples: int = 1
    #: the confirmed speedup of the best ``faster`` evaluation so far (None while none was)
    best_so_far: float | None = None
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass
class SearchSummary(JsonRow):
    """How a target was searched and what the search cost (the schema's ``search``; a value is
    None only in a row that did not say)."""

    strategy: str | None = None
    policy: str | None = None
    #: provider:model, None when no model was asked
    llm: str | None = None
    observation: str | None = None
    #: rules, or llm:PROVIDER:MODEL for an LLM critic
    critic: str | None = None
    stop_reason: str | None = None
    llm_calls: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    evaluations: int | None = None
    #: one best-so-far curve per strategy (per run where a strategy ran more than once):
    #: ``[[evaluation, best or None], ...]``
    curves: dict[str, list[list[float | None]]] = field(default_factory=dict)
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass
class Remeasure(JsonRow):
    """How to check the quoted speedup: the command (run from the project's root) that times the
    kernel again in fresh processes, and the interval each repeat should land in."""

    command: str = ""
    expect: list[float] | None = None
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass
class ReferenceInfo(JsonRow):
    """What the target's search ran against: a function's module, qualname and file (relative to
    the project), or a program's source file, test cases and the hash of the source searched."""

    #: a C++ program, whose verified rewrite replaces ``file``
    program: bool = False
    module: str | None = None
    qualname: str = ""
    file: str = ""
    testcases: str = ""
    #: a program's source as searched (a function's is hashed from its file when needed)
    hash: str = ""
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


#: keys written only when set (the schema does not require them)
_OPTIONAL = ("kind", "sandbox", "search", "range_limited", "accept_range_limited", "stop_reason", "device", "arch",
             "reference", "outputs", "signatures", "returns", "pack", "measurement", "remeasure", "module_state",
             "eval_only")

#: how a function hands back its outputs: one bare tensor, a plain tuple or list of tensors, or
#: anything else (a scalar, a named tuple), which only the reference reproduces
PACKS = ("bare", "tuple", "list", "other")


@dataclass
class TargetResult:
    """One target's entry in the report."""

    id: str
    status: TargetStatus
    reason: str = ""
    kind: str | None = None
    speedup: float | None = None
    speedup_ci: list[float] | None = None
    verified: bool = False
    weak_check: bool = False
    baseline_s: float | None = None
    best_s: float | None = None
    workloads: list[WorkloadResult] = field(default_factory=list)
    candidates: CandidateCounts = field(default_factory=CandidateCounts)
    best: BestKernel | None = None
    tests: RerunResult = field(default_factory=RerunResult)
    benchmarks: list[BenchmarkResult] = field(default_factory=list)
    trajectory: list[Evaluation] = field(default_factory=list)
    elapsed_s: float = 0.0
    sandbox: str | None = None
    search: SearchSummary | None = None
    range_limited: str | None = None
    accept_range_limited: bool | None = None
    stop_reason: str | None = None
    device: str | None = None
    arch: str | None = None
    reference: ReferenceInfo | None = None
    #: per workload argument key, the outputs' layouts (what verification compares)
    outputs: dict[str, list[JSON]] | None = None
    signatures: list[Any] | None = None
    #: an nn.Module target's parameters then buffers as verified, ``[name, shape, dtype]`` each:
    #: the kernel was checked on this configuration only, so the dispatcher serves no other
    module_state: list[list[JSON]] | None = None
    #: an nn.Module target whose layers read ``training``: verified in eval mode, the kernel
    #: serves only instances in eval mode (``introspect.reads_training``)
    eval_only: bool | None = None
    #: an in-place function's return convention ("none", "first", ...)
    returns: str | None = None
    #: how the function hands back its outputs (one of :data:`PACKS`), so the kernel's calls do too
    pack: str | None = None
    #: how noisy the machine was while the quoted speedup was measured (see :class:`Measurement`)
    measurement: Measurement | None = None
    #: how to check the quoted speedup (see :class:`Remeasure`)
    remeasure: Remeasure | None = None
    #: keys this version does not know: written by a newer one, or added by a plugin
    extra: Json = field(default_factory=dict)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "status" and not isinstance(value, TargetStatus):
            try:
                value = TargetStatus(value)
            except ValueError:
                raise ValueError(f"unknown target status {value!r}") from None
        elif name in _ROW_TYPES and isinstance(value, list):
            value = [_row(_ROW_TYPES[name], r) for r in value]
        elif name == "remeasure" and value is not None:
            value = _row(Remeasure, value)
        elif name == "search" and value is not None:
            value = _row(SearchSummary, value)
        elif name == "reference":  # read from JSON: an object is a ReferenceInfo, anything else none
            value = row_of(ReferenceInfo, value)
        object.__setattr__(self, name, value)

    def device_or_default(self) -> str:
        """The device the target was measured on, :data:`DEFAULT_DEVICE` where the entry names none."""
        return self.device or DEFAULT_DEVICE

    @classmethod
    def skipped(cls, target_id: str, reason: str, rerun: list[str], kind: str | None = None) -> TargetResult:
        return cls(target_id, TargetStatus.SKIPPED, reason, kind=kind, tests=RerunResult(rerun=list(rerun)))

    def to_json(self) -> Json:
        out: Json = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name in _OPTIONAL and value is None:
                continue
            out[f.name] = _plain(value)
        out["tests"] = {k: v for k, v in out["tests"].items() if v is not None or k == "passed"}
        if self.best is not None:
            out["best"] = {k: v for k, v in out["best"].items() if v is not None or k not in ("build_id", "sha256")}
        return {**self.extra, **out}

    @classmethod
    def from_json(cls, data: Json) -> TargetResult:
        known = {f.name for f in fields(cls)} - {"extra"}
        kw: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        kw["candidates"] = CandidateCounts(**_known(CandidateCounts, data.get("candidates") or {}))
        kw["tests"] = RerunResult(**_known(RerunResult, data.get("tests") or {}))
        best = data.get("best")
        kw["best"] = BestKernel(**_known(BestKernel, best)) if isinstance(best, dict) else None
        m = data.get("measurement")
        kw["measurement"] = Measurement.from_json(m) if isinstance(m, dict) else None
        return cls(**kw, extra={k: v for k, v in data.items() if k not in known})


@dataclass
class Report:
    """A run's report: the machine and options it ran with, and its targets."""

    tool_version: str
    created_at: str
    machine: Json
    options: Json
    targets: list[TargetResult]
    schema_version: int = 1
    #: top-level keys this version does not know (a plugin's ``pytest_maxcode_report`` additions)
    extra: Json = field(default_factory=dict)

    def to_json(self) -> Json:
        return {
            **self.extra,
            "schema_version": self.schema_version, "tool_version": self.tool_version, "created_at": self.created_at,
            "machine": dict(self.machine), "options": dict(self.options), "targets": [t.to_json() for t in self.targets],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Report:
        """The report a run wrote (or a test built: the keys a reader does not need may be
        missing); ValueError, saying where, for a report no reader could use: not an object, a
        ``targets`` that is not a list, or a target without a string ``id`` or a known ``status``."""
        if not isinstance(data, Mapping):
            raise ValueError(f"(root): not an object but {type(data).__name__}")
        targets = data.get("targets", [])
        if not isinstance(targets, list):
            raise ValueError(f"targets: not a list but {type(targets).__name__}")
        out = []
        for i, t in enumerate(targets):
            if not isinstance(t, Mapping) or not isinstance(t.get("id"), str):
                raise ValueError(f"targets/{i}: a target needs a string id")
            if "status" not in t:
                raise ValueError(f"targets/{i} ({t['id']}): no status")
            try:
                out.append(TargetResult.from_json(dict(t)))
            except (AttributeError, TypeError, ValueError) as e:  # a row of the wrong shape
                raise ValueError(f"targets/{i} ({t['id']}): {e}") from None
        known = ("schema_version", "tool_version", "created_at", "machine", "options", "targets")
        machine, options = data.get("machine"), data.get("options")
        return cls(tool_version=str(data.get("tool_version", "")), created_at=str(data.get("created_at", "")),
                   machine=dict(machine) if isinstance(machine, Mapping) else {},
                   options=dict(options) if isinstance(options, Mapping) else {}, targets=out,
                   schema_version=data.get("schema_version", 1), extra={k: v for k, v in data.items() if k not in known})


def parse_report(data: Report | Mapping[str, Any], source: str = "the report") -> Report:
    """``data`` as a :class:`Report`, read once where a report enters (``maxcode apply``, the bot,
    ``maxcode remeasure``, the Python API); a malformed one is a one-line MaxcodeError naming
    ``source`` and what is wrong, as ``maxcode apply`` says it."""
    if isinstance(data, Report):
        return data
    try:
        return Report.from_json(data)
    except ValueError as e:
        raise MaxcodeError(f"{source}: not a maxcode report ({e})") from None


def parse_target(data: TargetResult | Mapping[str, Any], source: str = "the report") -> TargetResult:
    """One report target as a :class:`TargetResult` (see :func:`parse_report`)."""
    if isinstance(data, TargetResult):
        return data
    return parse_report({"targets": [data]}, source).targets[0]


#: the lists of rows a target holds, and each one's row type
_ROW_TYPES: dict[str, type[JsonRow]] = {"workloads": WorkloadResult, "benchmarks": BenchmarkResult, "trajectory": Evaluation}


def _row(cls: type[R], value: R | Mapping[str, Any]) -> R:
    """A row as its type: rows given as dicts (read from a report, or built by an older caller)
    are converted, so every reader of a :class:`TargetResult` sees attributes."""
    return value if isinstance(value, cls) else cls.from_json(value)  # type: ignore[arg-type]


def _known(cls: type, data: Json) -> Json:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _plain(value: Any) -> Any:
    """The JSON shape of a field's value: nested records become dicts, enums their strings."""
    if isinstance(value, JsonRow):
        return value.to_json()
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {(k.value if isinstance(k, Enum) else k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
