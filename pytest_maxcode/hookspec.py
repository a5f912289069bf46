"""Hook specifications: how a ``conftest.py`` or an installed plugin extends the search.

pluggy calls every hook with keyword arguments, so an implementation names only the
arguments it needs, in any order. The hooks are registered
with pytest by the plugin, so they are implemented like any pytest hook::

    # conftest.py
    def pytest_maxcode_strategy(name, settings):
        if name == "greedy":
            return MyGreedyStrategy()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import pytest

    from .options import Settings
    from .search.policy import TargetInfo
    from .search.state import Node, Proposal, SearchState
    from .search.strategy import Ask, Proposer, Strategy

hookspec = pluggy.HookspecMarker("pytest")


@hookspec(firstresult=True)
def pytest_maxcode_strategy(name: str, settings: Settings) -> Strategy | None:
    """Return a strategy for ``--maxcode-strategy=name`` (an object with ``name``,
    ``initialize``, ``propose``, ``update``, ``best`` and ``should_stop``; see
    ``pytest_maxcode.search.strategy``), or None to leave the name to others.
    ``settings`` is the run's ``pytest_maxcode.options.Settings`` (read its attributes,
    e.g. ``settings.k``).

    Example::

        def pytest_maxcode_strategy(name, settings):
            if name == "wide-beam":
                from pytest_maxcode.search.strategies.beam import BeamStrategy
                return BeamStrategy()
    """


@hookspec(firstresult=True)
def pytest_maxcode_policy(name: str, target: TargetInfo | None, settings: Settings) -> Proposer | None:
    """Return the proposer for ``--maxcode-policy=name`` (an object with ``name`` and
    ``propose(state, asks) -> list[Proposal]``), or None. ``target`` is a
    ``pytest_maxcode.search.policy.TargetInfo`` (None while the run checks the name at
    start-up); ``settings`` the run's ``pytest_maxcode.options.Settings``.

    Example::

        def pytest_maxcode_policy(name, target, settings):
            if name == "my-model":
                return MyModelPolicy(target)
    """


@hookspec
def pytest_maxcode_propose(target: TargetInfo, state: SearchState, asks: list[Ask]) -> list[Proposal | str] | None:
    """Offer candidates of your own for this round, before the policy's. Return a list of
    ``Proposal`` objects or of source texts (in the target's language), at most
    ``len(asks)`` in all; the policy fills the rest. Each becomes a node like any other.

    Example::

        def pytest_maxcode_propose(target, state, asks):
            if target.id == "mylib.fused_chain" and not state.trajectory:
                return [Path("kernels/handwritten.cpp").read_text()]
    """


@hookspec
def pytest_maxcode_evaluation(target: TargetInfo, node: Node) -> None:
    """Called once per finished evaluation (``node.verdict``, ``node.reward``,
    ``node.parent``): log it, stream it to a dashboard, collect rewards for training.

    Example::

        def pytest_maxcode_evaluation(target, node):
            print(target.id, node.index, node.verdict.status, node.reward)
    """


@hookspec
def pytest_maxcode_report(report: dict[str, Any], config: pytest.Config) -> None:
    """Add to the run's report before it is written (pytest-benchmark's ``update_json``
    pattern): ``report`` is the JSON that ``report.json`` will hold, ``config`` pytest's.
    Add keys of your own (top level, or in a target's entry); the published schema allows
    them, and the run says so in one line if a change breaks it.

    Example::

        def pytest_maxcode_report(report, config):
            report["ci"] = {"job": os.environ.get("GITHUB_JOB")}
    """
