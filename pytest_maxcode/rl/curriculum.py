"""The qd strategy's staged technique schedule, as a per-problem curriculum for training.

In a search, a stage lasts a number of search steps. In training, every problem moves
through the stages on its own: it stays in a stage until the policy has written
``advance_after`` correct completions for it there (or, without ``advance_after``, the
stage's own ``steps``), so easy problems unlock the stronger techniques early while hard
ones keep the model on loop-level rewrites until those work. The stages are the search's
(``[tool.maxcode.qd]``: the settings' ``qd``, a ``Schedule``, or the table itself), and so is
the rule that a completion using a technique its stage does not permit is not evaluated (a
``format`` failure).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..search.strategies.qd import Stage, parse_stages
from ..search.techniques import LOOP, tags
from ..tables import Schedule, parse_schedule
from .dataset import with_permitted
from .problems import problem_id


class Curriculum:
    """Per problem: which stage it is in and how many correct completions it has seen there."""

    def __init__(self, stages: Sequence[Stage] | Sequence[Mapping[str, Any]] | Schedule | Mapping[str, Any] | None,
                 advance_after: int | None = None) -> None:
        """``stages``: Stage objects, the ``stages = [...]`` tables, or a whole schedule: the
        settings' ``qd`` (a ``Schedule``) or a ``[tool.maxcode.qd]`` table, parsed here once (its
        ``targets`` globs then pick a schedule per problem id)."""
        if advance_after is not None and (not isinstance(advance_after, int) or advance_after < 1):
            raise ValueError(f"advance_after must be a positive integer, not {advance_after!r}")
        self.advance_after = advance_after
        self._schedule: Schedule | None = None
        self._stages: list[Stage] = []
        if isinstance(stages, (Schedule, Mapping)):
            self._schedule = parse_schedule(stages)  # every schedule in it is checked now, not at the first problem
            for schedule in self._schedule.schedules():
                self._check(list(schedule))
        elif stages:
            items = list(stages)
            self._stages = items if all(isinstance(s, Stage) for s in items) else parse_stages({"stages": items})
            self._check(self._stages)
        self._index: dict[str, int] = {}
        self._correct: dict[str, int] = {}
        self._lock = threading.Lock()

    def _check(self, stages: list[Stage]) -> None:
        if self.advance_after is None and any(s.steps is None for s in stages[:-1]):
            raise ValueError("a stage without steps can only be the last one, unless advance_after is set")

    # -- where a problem stands ----------------------------------------------------------

    def stages(self, problem: Any) -> list[Stage]:
        if self._schedule is None:
            return self._stages
        return self._schedule.for_target(problem_id(problem))

    def stage_index(self, problem: Any) -> int:
        return self._index.get(problem_id(problem), 0)

    def stage(self, problem: Any) -> Stage | None:
        stages = self.stages(problem)
        return stages[min(self.stage_index(problem), len(stages) - 1)] if stages else None

    def permitted(self, problem: Any) -> tuple[str, ...] | None:
        """The techniques the problem's current stage permits; None: any."""
        stage = self.stage(problem)
        return stage.permitted() if stage is not None else None

    def correct_seen(self, problem: Any) -> int:
        return self._correct.get(problem_id(problem), 0)

    def barred(self, problem: Any, code: str) -> str | None:
        """Why ``code`` may not be evaluated in the problem's stage (the qd strategy's wording), or None."""
        stage = self.stage(problem)
        if stage is None or stage.techniques is None:
            return None
        used = tags(code) - stage.techniques
        if not used:
            return None
        return (f"uses {', '.join(sorted(used))}, not permitted in stage {self.stage_index(problem) + 1} "
                f"(permitted: {stage.describe()})")

    # -- moving on -----------------------------------------------------------------------

    def record(self, problem: Any, correct: bool) -> bool:
        """Count one evaluated completion; True when it moved the problem to its next stage."""
        if not correct:
            return False
        key = problem_id(problem)
        stages = self.stages(problem)
        with self._lock:
            i = self._index.get(key, 0)
            if i >= len(stages) - 1:
                return False
            n = self._correct.get(key, 0) + 1
            if n < (self.advance_after or stages[i].steps or 0):
                self._correct[key] = n
                return False
            self._index[key], self._correct[key] = i + 1, 0
            return True

    def state_dict(self) -> dict[str, Any]:
        """Where every problem stands, for a checkpoint."""
        with self._lock:
            return {"index": dict(self._index), "correct": dict(self._correct)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        with self._lock:
            self._index = {str(k): int(v) for k, v in state.get("index", {}).items()}
            self._correct = {str(k): int(v) for k, v in state.get("correct", {}).items()}

    # -- what the prompt says ------------------------------------------------------------

    def prompt(self, messages: Any, problem: Any) -> Any:
        """``messages`` with the problem's current stage stated in the last user message."""
        return with_permitted(messages, self.permitted(problem))

    def transform(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """For ``datasets.Dataset.with_transform``: each row's prompt states its problem's stage
        when the row is read, so a static dataset follows the curriculum as it advances."""
        out = dict(batch)
        out["prompt"] = [self.prompt(m, p) for m, p in zip(batch["prompt"], batch["problem"])]
        return out


def permitted_reason(permitted: Sequence[str], code: str) -> str | None:
    """Why ``code`` uses a technique outside ``permitted`` (a dataset's ``permitted`` column), or None."""
    allowed = frozenset(permitted) | {LOOP}
    used = tags(code) - allowed
    if not used:
        return None
    shown = ", ".join(t for t in Stage(allowed, None).permitted() or ())
    return f"uses {', '.join(sorted(used))}, not permitted (permitted: {shown})"
