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
import random
import zlib

from ...tables import (  # re-exported: the schedule's parser sits at the bottom layer, with the settings
    Stage,
    parse_stages,
)
from ..state import Node, Proposal, SearchState
from ..strategy import Ask, Proposer, StrategyParams
from ..techniques import cell_name, tags
from .base import StepStrategy

__all__ = ["QDStrategy", "Stage", "bottleneck", "cell_of", "parse_stages"]


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
