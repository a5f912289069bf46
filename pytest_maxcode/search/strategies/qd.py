"""``qd``: quality-diversity search with an optional staged schedule of techniques.

A search that always refines its single best candidate collapses onto one idea. This one
keeps an archive with one elite (the best correct candidate) per *cell*, a cell being the
techniques the code uses (``search.techniques``) together with the bottleneck its critique
names (memory-bound, below the roof, overhead-bound), and draws each step's parents
across the cells, so every idea that worked keeps being developed.

A staged schedule (the staged quality-diversity idea of the HPC reinforcement-learning
work) changes which techniques are permitted as the search goes: e.g. loop-level changes
only, then vectorization and tiling too, then anything. The prompt states what the stage
permits, and a proposal that uses anything else is not evaluated (a ``format`` failure
that says which technique it used). Configured in ``[tool.maxcode.qd]``::

    [tool.maxcode.qd]
    stages = [
        {steps = 2, techniques = ["loop"]},
        {steps = 2, techniques = ["loop", "vectorized", "tiling"]},
        {techniques = "any"},
    ]
    [tool.maxcode.qd.targets."mylib.softmax*"]   # per target (glob), replaces the stages above
    stages = [{steps = 3, techniques = ["loop", "threads"]}, {techniques = "any"}]
"""

from __future__ import annotations

import dataclasses
import fnmatch
import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..state import Node, Proposal, SearchState
from ..strategy import Ask, Proposer, StrategyParams
from ..techniques import LOOP, NAMES, cell_name, tags
from .base import StepStrategy


@dataclass(frozen=True)
class Stage:
    techniques: frozenset[str] | None  # None: anything
    steps: int | None  # None: the rest of the search

    def permitted(self) -> tuple[str, ...] | None:
        return None if self.techniques is None else tuple(t for t in NAMES if t in self.techniques)

    def describe(self) -> str:
        return "any technique" if self.techniques is None else ", ".join(self.permitted() or ())


def parse_stages(config: Any, target_id: str | None = None) -> list[Stage]:
    """The schedule for ``target_id`` from the ``qd`` setting; ValueError says what to fix."""
    if config is None:
        return []
    if not isinstance(config, Mapping):
        raise ValueError("[tool.maxcode.qd] must be a table: stages = [{steps = N, techniques = [...]}, ...]")
    unknown = set(config) - {"stages", "targets"}
    if unknown:
        raise ValueError(f"[tool.maxcode.qd] has no setting {sorted(unknown)[0]!r} (known: stages, targets)")
    chosen, where = config.get("stages"), "[tool.maxcode.qd] stages"
    for pattern, table in (config.get("targets") or {}).items():
        if not isinstance(table, Mapping) or "stages" not in table:
            raise ValueError(f"[tool.maxcode.qd.targets.{pattern!r}] needs stages = [...]")
        if target_id is not None and fnmatch.fnmatchcase(target_id, pattern):
            chosen, where = table["stages"], f"[tool.maxcode.qd.targets.{pattern!r}] stages"
            break
    if target_id is None:  # validate every schedule
        for pattern, table in (config.get("targets") or {}).items():
            _stages(table["stages"], f"[tool.maxcode.qd.targets.{pattern!r}] stages")
    return _stages(chosen, where) if chosen is not None else []


def _stages(raw: Any, where: str) -> list[Stage]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where} must be a non-empty list of tables {{steps = N, techniques = [...]}}")
    out = []
    for i, item in enumerate(raw, 1):
        if not isinstance(item, Mapping) or set(item) - {"steps", "techniques"}:
            raise ValueError(f"{where}: stage {i} must be a table with steps and techniques, not {item!r}")
        steps = item.get("steps")
        if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
            raise ValueError(f"{where}: stage {i} steps must be a positive integer, not {steps!r}")
        if steps is None and i < len(raw):
            raise ValueError(f"{where}: stage {i} needs steps (only the last stage may run to the end)")
        techniques = item.get("techniques", "any")
        if techniques == "any":
            out.append(Stage(None, steps))
            continue
        if not isinstance(techniques, list) or not all(isinstance(t, str) for t in techniques):
            raise ValueError(f"{where}: stage {i} techniques must be \"any\" or a list of names ({', '.join(NAMES)})")
        bad = [t for t in techniques if t not in NAMES]
        if bad:
            raise ValueError(f"{where}: stage {i}: unknown technique {bad[0]!r} (known: {', '.join(NAMES)})")
        out.append(Stage(frozenset(techniques) | {LOOP}, steps))
    return out


def bottleneck(node: Node) -> str:
    """The critique's class of a correct node, e.g. "memory-bound" (from "[correct:memory-bound] ...")."""
    critique = node.critique or ""
    if critique.startswith("[correct:"):
        return critique[len("[correct:"):].split("]", 1)[0]
    return "unmeasured"


def cell_of(node: Node) -> str:
    return f"{cell_name(tags(node.code or ''))} / {bottleneck(node)}"


class QDStrategy(StepStrategy):
    name = "qd"

    def __init__(self, stages: list[Stage] | None = None, seed: int = 0) -> None:
        self.stages = list(stages or [])
        self.seed = seed
        self.archive: dict[str, Node] = {}

    def initialize(self, state: SearchState, proposer: Proposer, params: StrategyParams) -> None:
        super().initialize(state, proposer, params)
        self.archive = {}
        # seeded by the target and the search seed, so a replayed search draws the same parents
        self.rng = random.Random(zlib.crc32(state.target_id.encode()) + self.seed)
        for node in state.trajectory:
            self._admit(node)

    # -- the schedule -------------------------------------------------------------------

    def stage_index(self) -> int:
        done = 0
        for i, stage in enumerate(self.stages):
            if stage.steps is None or self.steps < done + stage.steps:
                return i
            done += stage.steps
        return len(self.stages) - 1

    def stage(self) -> Stage | None:
        return self.stages[self.stage_index()] if self.stages else None

    # -- the archive --------------------------------------------------------------------

    def _admit(self, node: Node) -> None:
        if not node.verdict.correct:
            return
        cell = cell_of(node)
        held = self.archive.get(cell)
        if held is None or node.reward > held.reward:
            self.archive[cell] = node

    def update(self, nodes: list[Node]) -> None:
        for node in nodes:
            self._admit(node)

    # -- asking -------------------------------------------------------------------------

    def _asks(self, n: int) -> list[Ask]:
        stage = self.stage()
        permitted = stage.permitted() if stage is not None else None
        k = min(n, self.params.k)
        cells = sorted(self.archive)
        self.rng.shuffle(cells)
        parents = [self.archive[c] for c in cells]
        # the elites first (a short budget goes to what already works); with fewer cells
        # than k, the last ask is a fresh start that may open a new cell
        improve = k - 1 if 0 < len(parents) < k else (k if parents else 0)
        asks = [Ask(parent=parents[i % len(parents)], mode="improve", permitted=permitted) for i in range(improve)]
        return asks + [Ask(permitted=permitted)] * (k - improve)

    def _keep(self, asked: list[Proposal], n: int) -> list[Proposal]:
        stage = self.stage()
        if stage is None or stage.techniques is None:
            return asked[:n]
        out = []
        for p in asked[:n]:
            used = tags(p.spec.text) - stage.techniques if p.spec is not None else frozenset()
            if used:
                why = (f"uses {', '.join(sorted(used))}, not permitted in stage {self.stage_index() + 1} "
                       f"(permitted: {stage.describe()})")
                p = dataclasses.replace(p, spec=None, error=why)
            out.append(p)
        return out
