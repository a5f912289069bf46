"""Training a kernel-writing model with the oracle as its reward (e.g. TRL's GRPO).

``OracleReward`` scores completions the way the search scores proposals; ``Curriculum``
applies the qd strategy's staged technique schedule per problem; ``kernelbench_dataset``
and ``targets_dataset`` build the search's own prompts as chat-format training rows.
"""

from __future__ import annotations

from .curriculum import Curriculum
from .dataset import (
    kernelbench_dataset,
    prompt_messages,
    targets_dataset,
    with_permitted,
)
from .problems import (
    RLProblem,
    kernelbench_problem,
    problem_id,
    resolve,
    target_problem,
)
from .reward import (
    AsyncOracleReward,
    OracleReward,
    async_reward,
    completion_text,
    score,
)

__all__ = [
    "AsyncOracleReward",
    "Curriculum",
    "OracleReward",
    "RLProblem",
    "async_reward",
    "completion_text",
    "kernelbench_dataset",
    "kernelbench_problem",
    "problem_id",
    "prompt_messages",
    "resolve",
    "score",
    "target_problem",
    "targets_dataset",
    "with_permitted",
]
