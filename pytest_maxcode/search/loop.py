"""The search loop for one target: strategy -> policy -> oracle batches -> state and store.

Resumable: before a batch goes to the oracle, candidates already evaluated under the
same configuration and workloads are taken from the store, so a run killed mid-search
and started again repeats no finished evaluation (and with the LLM response cache, no
paid request either). A stored verdict is evidence, not a fact: one too noisy to decide
is timed again, and ``--maxcode-remeasure`` times every stored candidate again.

Thread-safe per target: targets may be searched concurrently (their LLM requests
overlap), while oracle work, which must not share the machine with other timings,
goes through one lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .._files import write_atomic
from ..critique import Critique, LLMCritic, RuleCritic
from ..errors import MaxcodeError
from ..model.protocols import OracleLike, SearchStore
from ..model.search import Node, NodeRow, source_key
from ..options import Settings
from ..oracle import probe
from ..oracle.check import CandidateSpec, CheckConfig, Oracle
from ..oracle.program import ProgramOracle, program_config, workload_signatures
from ..oracle.ray_executor import RayOracle
from ..oracle.reference import ReferenceSpec
from ..oracle.verdict import Verdict, undecided
from ..tables import parse_observation
from ..targets.decorator import normalized_source_in_file
from ..targets.dispatch import arg_class, arg_key
from ..value.scorer import LightScorer, LLMScorer
from .budget import Budget, Limits, Meter
from .llm_policy import LLMPolicy
from .policy import (
    AcceptedFirst,
    BuiltinPolicy,
    TargetInfo,
    candidates_dir,
    materialize,
)
from .prompts import PromptContext, describe_target, describe_target_early, target_reference_text
from .state import Proposal, SearchState
from .strategies import make_strategy
from .strategy import Ask, Proposer, Strategy, StrategyParams


@dataclass
class SearchResult:
    target: TargetInfo
    state: SearchState
    stop_reason: str
    workloads: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    resumed: int = 0
    elapsed_s: float = 0.0
    strategy: str = ""
    policy: str = ""
    llm: str | None = None
    observation: str | None = None
    critic: str = "rules"
    #: where the candidates ran: cpu or cuda (the settings' device, or cuda for a lang='cuda' target)
    device: str = "cpu"
    llm_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    #: where the time went: oracle (builds, checks, timing), llm (waiting for replies), setup
    timings: dict[str, float] = field(default_factory=lambda: {"oracle_s": 0.0, "llm_s": 0.0, "setup_s": 0.0})


@dataclass
class SearchContext:
    """What every target's search in one run shares: the store and run, the progress line, the
    plugins' hooks, the models (policy, critic, scorer), the run's meter and the oracle lock."""

    store: SearchStore | None
    run_id: int | None
    progress: Callable[[str], None]
    hook: Any = None
    llm: Any = None
    run_meter: Meter | None = None
    oracle_lock: Any = None
    critic_llm: Any = None
    scorer_llm: Any = None


def evaluation_key(config: CheckConfig, signatures: list[str], reference_source: str) -> str:
    """What a verdict depends on: the check's settings, the workloads' signatures, and the
    reference's code. Not the captured values: tests draw fresh random inputs each run."""
    h = hashlib.sha256()
    for part in (config.key(), *sorted(signatures), reference_source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def reusable(row: dict[str, Any], min_speedup: float, remeasure: bool) -> bool:
    """Whether a stored evaluation stands in for a new one: a stored verdict is evidence, and
    evidence too weak to decide (an undecided interval) is measured again, as is every stored
    candidate under ``--maxcode-remeasure``."""
    if remeasure:
        return False
    ci = [row["ci_low"], row["ci_high"]] if row.get("ci_low") is not None else None
    return not (row.get("diagnostics") or {}).get("undecided") and not undecided(row["status"], ci, min_speedup)


def verdict_from_row(row: dict[str, Any], path: str) -> Verdict:
    ci = [row["ci_low"], row["ci_high"]] if row["ci_low"] is not None else None
    return Verdict(
        candidate=path,
        status=row["status"],
        speedup=row["speedup"],
        speedup_ci=ci,
        reference_s=row["reference_s"],
        candidate_s=row["candidate_s"],
        compile_s=row["compile_s"],
        eval_s=row["eval_s"],
        weak_check=bool(row["weak_check"]),
        range_limited=row["diagnostics"].get("range_limited"),
        sandbox=row["diagnostics"].get("sandbox") or "",
        reasons=row["reasons"],
        diagnostics=dict(row["diagnostics"], resumed=True),
        hash=row["candidate_hash"],
    )


def target_limits(target: TargetInfo, settings: Settings) -> Limits:
    return Limits(
        evaluations=target.budget or settings.budget,
        llm_calls=settings.llm_calls,
        tokens=settings.tokens,
        cost_usd=settings.cost,
        time_s=settings.time,
    )


def run_limits(settings: Settings) -> Limits:
    return Limits(
        evaluations=settings.run_budget,
        llm_calls=settings.run_llm_calls,
        tokens=settings.run_tokens,
        cost_usd=settings.run_cost,
        time_s=settings.run_time,
    )


class HookedProposer:
    """Plugins' ``pytest_maxcode_propose`` candidates first, then the policy's."""

    def __init__(self, hook: Any, inner: Proposer, target: TargetInfo, out_dir: Path, lang: str) -> None:
        self.hook, self.inner, self.target, self.out_dir, self.lang = hook, inner, target, out_dir, lang
        self.name = inner.name

    def propose(self, state: SearchState, asks: list[Ask]) -> list[Proposal]:
        offered: list[Proposal] = []
        for result in self.hook.pytest_maxcode_propose(target=self.target, state=state, asks=asks):
            for item in result or []:
                if isinstance(item, str):
                    item = Proposal(materialize(self.out_dir, item, self.lang, "plugin", "program" if self.target.kind == "program" else None), "plugin")
                offered.append(item)
        offered = offered[: len(asks)]
        for p, ask in zip(offered, asks):
            if p.parent is None and ask.parent is not None and p.origin == "plugin":
                p.parent, p.mode = ask.parent, ask.mode
        return offered + (self.inner.propose(state, asks[len(offered) :]) if len(offered) < len(asks) else [])


def search_names(settings: Settings, *, has_llm: bool) -> tuple[str, str]:
    """The policy and strategy a run uses: as set, else the model's with a model configured
    (searched by ``maxcode``), else the built-in seeds (swept). Not table defaults: they
    depend on whether a model is configured."""
    policy = settings.policy or ("llm" if has_llm else "builtin")
    return policy, settings.strategy or ("sweep" if policy == "builtin" else "maxcode")


def _native_lang(target: TargetInfo, device: str) -> str:
    if target.lang in ("cpp", "cuda"):
        return target.lang
    return "cuda" if device == "cuda" else "cpp"


def check_config(target: TargetInfo, settings: Settings) -> CheckConfig:
    """The oracle's settings for one target's search: the target's own tolerances and bar over
    the run's, the run's sandbox, seed and timing budget."""
    return CheckConfig(device=settings.device_for(target.lang), atol=target.atol, rtol=target.rtol,
                       min_speedup=target.min_speedup or settings.min_speedup, inplace=target.inplace,
                       sandbox=settings.sandbox, seed=settings.seed, time_budget=settings.time_budget)


def search_target(
    target: TargetInfo,
    captured: list[Path],
    root: Path,
    settings: Settings,
    ctx: SearchContext,
    *,
    reference: ReferenceSpec | None = None,
) -> SearchResult:
    start = time.monotonic()
    reference_norm = normalized_source_in_file(target.source_file, target.qualname) or ""
    config = check_config(target, settings)
    device = config.device
    if reference is None:  # a marked target; a KernelBench problem brings its own (get_init_inputs, get_inputs)
        instance = captured[0].parent / "module.pt" if target.kind == "module" else None
        reference = ReferenceSpec(target.kind, target.source_file, target.qualname, module=target.module, rootdir=root, instance=instance)
    workloads = []
    for f in captured:
        data = torch.load(f, weights_only=True)
        workloads.append({
            "name": f.stem,
            "captured": str(f),
            "signature": data["signature"],
            # what dispatch needs later: each set's key (for output shapes) and the layout
            "arg_keys": [arg_key(s) for s in data["sets"]],
            "layout": [list(arg_class(v)) for v in data["sets"][0]],
        })
    policy_name, _ = search_names(settings, has_llm=ctx.llm is not None)
    builtin = BuiltinPolicy(target, root, device, torch_compile=settings.torch_compile) if policy_name == "builtin" else None
    hint = [p.spec for p in builtin.pending()] if builtin is not None else []
    oracle_kw: dict[str, Any] = {
        "store": ctx.store, "run_id": ctx.run_id, "progress": ctx.progress,
        "candidates_hint": [s for s in hint if s is not None],
        "workloads": [{"name": w["name"], "captured": w["captured"]} for w in workloads],
    }
    oracle: Oracle | RayOracle
    if settings.executor == "ray":  # the same checks, on a Ray cluster's pool of warm oracles
        oracle = RayOracle(reference, config, root, address=settings.ray_address, actors=settings.ray_actors,
                           targets_at_once=settings.parallel_targets, **oracle_kw)
    else:
        oracle = Oracle(reference, config, root, **oracle_kw)

    def prepared() -> None:
        for w, wl in zip(workloads, oracle.workloads):
            w["n_sets"] = len(wl.expected)
            w["weak"] = wl.weak
            w["outputs"] = [] if target.inplace else [[list(t.shape), str(t.dtype).replace("torch.", "")] for t in wl.expected[0]]
            w["returns"] = wl.returns
            w["pack"] = wl.pack

    return _search(Setup(target, device, config, reference_norm, workloads, oracle, prepared, builtin), root, settings, start, ctx)


def search_program(
    program: Any,
    root: Path,
    settings: Settings,
    ctx: SearchContext,
) -> SearchResult:
    """A C++ program target (``[tool.maxcode.programs]``) through the same strategies, policies,
    budgets and store; its oracle runs the program's test cases instead of a Python reference."""
    start = time.monotonic()
    target = program_info(program, root)
    config = program_config(program, target.min_speedup or settings.min_speedup, settings.sandbox)
    oracle = ProgramOracle(program, config, root, store=ctx.store, run_id=ctx.run_id, progress=ctx.progress)
    workloads: list[dict[str, Any]] = []
    policy_name, _ = search_names(settings, has_llm=ctx.llm is not None)
    builtin = BuiltinPolicy(target, root, "cpu") if policy_name == "builtin" else None
    if settings.executor == "ray":
        ctx.progress(f"{target.id}: program targets are checked on this machine; --maxcode-executor=ray applies to Python targets")

    def prepared() -> None:
        cases = [w.case for w in oracle.workloads]
        for w, sig in zip(oracle.workloads, workload_signatures(cases)):
            workloads.append({"name": w.name, "captured": str(w.case.input), "signature": w.signature, "key": sig,
                              "preview": _preview(w.case.input), "n_sets": 1, "weak": w.weak, "arg_keys": [], "layout": []})

    return _search(Setup(target, "cpu", config, oracle.source_text, workloads, oracle, prepared, builtin), root, settings, start, ctx)


def program_info(program: Any, root: Path) -> TargetInfo:
    return TargetInfo(program.id, "", "main", root / program.source, "program", "cpp", min_speedup=program.min_speedup, budget=program.budget)


def _preview(path: Path, lines: int = 4, chars: int = 300) -> str:
    """The start of a test input, so a model sees its format and size."""
    with open(path, encoding="utf-8", errors="replace") as f:
        head = f.read(chars + 1)
    out = "\n".join(head.splitlines()[:lines])
    return out[:chars] + (" ..." if len(head) > chars or head.count("\n") > lines else "")


@dataclass
class Setup:
    """What differs between a Python target and a program: the oracle and its workloads."""

    target: TargetInfo
    device: str
    config: CheckConfig
    reference_norm: str  # the reference's code as the evaluation key sees it
    workloads: list[dict[str, Any]]
    oracle: OracleLike[CandidateSpec]
    prepared: Callable[[], None]  # fills in the workloads once the oracle has run the reference
    builtin: BuiltinPolicy | None


def _search(setup: Setup, root: Path, settings: Settings, start: float, ctx: SearchContext) -> SearchResult:
    target, oracle, workloads, builtin, device = setup.target, setup.oracle, setup.workloads, setup.builtin, setup.device
    store, run_id, progress, hook, llm, oracle_lock = ctx.store, ctx.run_id, ctx.progress, ctx.hook, ctx.llm, ctx.oracle_lock
    state = SearchState(target.id, reference_source=setup.reference_norm)
    state.workloads = workloads
    lock = oracle_lock if oracle_lock is not None else contextlib.nullcontext()
    policy_name, strategy_name = search_names(settings, has_llm=llm is not None)
    result = SearchResult(target, state, "", workloads, strategy=strategy_name, policy=policy_name, device=device)
    budget = Budget(target_limits(target, settings), ctx.run_meter)
    makings = _Makings(target, root, device, settings, ctx, budget)
    try:
        strategy = _make_strategy(strategy_name, makings)
    except MaxcodeError as e:
        result.error, result.stop_reason = str(e), "the search could not start"
        return result
    policy: Any = None
    try:
        try:
            t0 = time.monotonic()
            described = (describe_target_early(target, workloads, root)
                         if policy_name == "llm" and builtin is None and llm is not None else None)
            with lock:
                oracle.prepare()
            result.timings["setup_s"] += time.monotonic() - t0
            setup.prepared()
            oracle.eval_key = evaluation_key(setup.config, [w.get("key") or w["signature"] for w in workloads], setup.reference_norm)
            build = " ".join(["g++", *(setup.config.cxxflags or [])]) if target.kind == "program" else ""
            policy = builtin or _make_policy(policy_name, makings, workloads, result, build, described)
            merged = BuiltinPolicy(target, root, device, torch_compile=False).accepted() if builtin is None else None
            if merged is not None:  # a model improves on the kernel the lock accepts (the built-in policy starts with it)
                policy = AcceptedFirst(policy, merged)
            if hook is not None:
                policy = HookedProposer(hook, policy, target, candidates_dir(root, target.id), _native_lang(target, device))
            strategy.initialize(state, policy, StrategyParams(k=settings.k, depth=settings.depth, width=settings.width))
            critic = _make_critic(makings)
            result.critic = critic.label
            judge = Judge(target, oracle, store, run_id, lock, progress, result, settings.remeasure)
            result.stop_reason = _run(strategy, policy, state, budget, judge, hook, llm is not None and builtin is None, critic)
        finally:
            oracle.close()
    except MaxcodeError as e:
        if state.trajectory:  # e.g. the LLM's configuration: what was found still counts
            result.stop_reason = f"stopped: {e}"
        else:
            result.error = str(e)
            result.stop_reason = "the search could not start"
    result.timings["llm_s"] = getattr(getattr(policy, "inner", policy), "wait_s", 0.0)
    if result.llm is not None and llm.scripted:
        result.llm += " (scripted replies)"
    if llm is not None and store is not None and run_id is not None:
        totals = store.llm_totals(run_id=run_id, target_id=target.id)
        result.llm_calls, result.tokens, result.cost_usd = int(totals["api_calls"]), int(totals["tokens"]), float(totals["cost_usd"])
    result.elapsed_s = time.monotonic() - start
    return result


def _candidate_lang(target: TargetInfo, device: str, settings: Settings) -> str:
    if target.kind != "program" and settings.format == "compat":
        return "py"
    return _native_lang(target, device)


@dataclass(frozen=True)
class _Makings:
    """What one target's strategy, policy and critic are made from: the target, where it is
    searched (the project's root, the device), the run's settings and shared context (the
    plugins' hook, the models, the run), and the target's budget, which all three charge."""

    target: TargetInfo
    root: Path
    device: str
    settings: Settings
    ctx: SearchContext
    budget: Budget


def _make_strategy(name: str, makings: _Makings) -> Strategy:
    """The strategy by name (a plugin's first), with its qd schedule and its reranker; the light
    reranker's model is read from the project's .maxcode/value/."""
    settings, ctx, target_id, budget = makings.settings, makings.ctx, makings.target.id, makings.budget
    if ctx.hook is not None:
        found = ctx.hook.pytest_maxcode_strategy(name=name, settings=settings)
        if found is not None:
            return found
    try:
        strategy = make_strategy(name)
    except ValueError as e:
        raise MaxcodeError(f"--maxcode-strategy: {e}") from None
    if strategy.name == "qd":
        strategy.stages = settings.qd.for_target(target_id) if settings.qd is not None else []
        strategy.seed = settings.search_seed
    rerank = settings.rerank
    if rerank != "none":
        if not hasattr(strategy, "rerank"):
            raise MaxcodeError(f"--maxcode-rerank={rerank} works with --maxcode-strategy=maxcode, not {name}")
        top = settings.rerank_count()
        if rerank == "light":
            # the budget only plans steps: no LLM calls
            strategy.rerank = LightScorer(makings.root / ".maxcode" / "value", top, budget)
        elif ctx.scorer_llm is None:
            raise MaxcodeError("--maxcode-rerank=llm needs a scoring model: set --maxcode-rerank-llm=openai:MODEL@URL")
        else:
            strategy.rerank = LLMScorer(ctx.scorer_llm, top, target_id=target_id, budget=budget, run_id=ctx.run_id,
                                        concurrency=settings.llm_concurrency)
    return strategy


def _make_critic(makings: _Makings) -> Any:
    """The rule critic, or an LLM critic when a critic model is configured (--maxcode-critic)."""
    target, settings, ctx = makings.target, makings.settings, makings.ctx
    if ctx.critic_llm is None:
        return RuleCritic()
    lang = _candidate_lang(target, makings.device, settings)
    return LLMCritic(ctx.critic_llm, reference=target_reference_text(target), lang=lang, run_id=ctx.run_id,
                     target_id=target.id, budget=makings.budget, thinking_tokens=settings.critic_thinking_tokens,
                     concurrency=settings.llm_concurrency)


def _make_policy(name: str, makings: _Makings, workloads: list[dict[str, Any]], result: SearchResult, build: str = "",
                 described: Callable[[], dict[str, Any] | None] | None = None) -> Proposer:
    """The policy by name (a plugin's first), else the LLM policy: its prompt's context (the
    target, its workloads, the machine, the build command) and its observation; names the model
    and the observation in ``result``."""
    target, root, device, settings, llm = makings.target, makings.root, makings.device, makings.settings, makings.ctx.llm
    if makings.ctx.hook is not None:
        found = makings.ctx.hook.pytest_maxcode_policy(name=name, target=target, settings=settings)
        if found is not None:
            return found
    if name != "llm":
        raise MaxcodeError(f"--maxcode-policy: no policy named {name!r} (built in: builtin, llm; plugins add more)")
    if llm is None:
        raise MaxcodeError("--maxcode-policy=llm needs a model: set --maxcode-llm (anthropic:MODEL, openai:MODEL@URL, replay:PATH) or ANTHROPIC_API_KEY")
    fmt = "program" if target.kind == "program" else settings.format
    lang = _candidate_lang(target, device, settings)
    entry = {"native": "maxcode_run", "program": "main"}.get(fmt) or ("ModelNew" if target.kind == "module" else target.qualname.split(".")[-1])
    try:
        parts = parse_observation(settings.observation)
    except ValueError as e:
        raise MaxcodeError(f"--maxcode-observation: {e}") from None
    ctx = PromptContext(
        target_id=target.id, kind=target.kind, reference_source=target_reference_text(target),
        fmt=fmt, lang=lang, entry=entry, workloads=workloads, device=describe_device(device, root), build=build,
        atol=target.atol, rtol=target.rtol, max_tokens=settings.max_tokens,
        temperature=settings.temperature, thinking_tokens=settings.thinking_tokens,
        inputs=described() if described is not None else describe_target(target, workloads, root),
    )
    result.llm = f"{llm.client.provider}:{llm.client.model}"
    result.observation = "+".join(parts)
    return LLMPolicy(llm, ctx, candidates_dir(root, target.id), observation=parts, budget=makings.budget,
                     run_id=makings.ctx.run_id, concurrency=settings.llm_concurrency, seed=settings.search_seed)


#: the machine descriptions a project's prompts were written with, by kind of machine
DEVICES_FILE = Path(".maxcode") / "devices.json"


def describe_device(device: str, root: Path | None = None) -> dict[str, Any]:
    """What the prompt says about the machine: name, parallelism, measured bandwidth. With a
    project ``root``, the description its prompts were written with on this kind of machine (a
    runner of the same model and size): a fresh CI runner measures the bandwidth a few percent
    apart, and a prompt that differs in that figure misses the response cache the action
    restores, so every model call would be paid again."""
    d: dict[str, Any] = {}
    gpu = device == "cuda" and torch.cuda.is_available()
    if gpu:
        props = torch.cuda.get_device_properties(0)
        d.update(name=props.name, sms=props.multi_processor_count)
    else:
        d.update(name=probe.cpu_model(), cores=os.cpu_count())
    kind = json.dumps(d, sort_keys=True)
    known = _known_devices(root) if root is not None else {}
    if isinstance(known.get(kind), dict):
        return dict(known[kind])
    try:
        d["bytes_per_s"] = float(probe.bandwidth(probe.cache_dir(), "cuda" if gpu else "cpu")["bytes_per_s"])
    except (OSError, RuntimeError):
        pass
    if root is not None:
        with contextlib.suppress(OSError):
            write_atomic(root / DEVICES_FILE, json.dumps({**known, kind: d}, indent=1) + "\n")
    return d


def _known_devices(root: Path) -> dict[str, Any]:
    try:
        known = json.loads((root / DEVICES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _format_verdict(p: Proposal) -> Verdict:
    return Verdict(candidate="", status="format", reasons=[p.error or "no usable code"])


@dataclass
class Judge:
    """Where one target's proposals are judged and recorded: its oracle (behind the lock that
    targets searched side by side share), the store and run, and the result they add to."""

    target: TargetInfo
    oracle: OracleLike[CandidateSpec]
    store: SearchStore | None
    run_id: int | None
    lock: Any
    progress: Callable[[str], None]
    result: SearchResult
    remeasure: bool = False


def _run(strategy: Strategy, policy: Proposer, state: SearchState, budget: Budget, judge: Judge, hook: Any, uses_llm: bool,
         critic: Any) -> str:
    """The search loop: propose, judge, critique, record, until the budget, the policy or the
    strategy stops it. Eight parameters because the strategy, policy, critic and hook are the
    parts a user chooses, and the state, budget and judge what they share."""
    target, store = judge.target, judge.store
    step = 0
    critiques: dict[int, Critique] = {}  # by node index: a repeat's row names who critiqued its node
    while True:
        why = budget.exhausted() or _unavailable(policy) or strategy.should_stop()
        if why:
            return why
        # an LLM critic spends one call per evaluated proposal, on top of the proposal's own
        room = budget.room(calls_each=int(uses_llm) + int(critic.name == "llm"))
        if room <= 0:
            return budget.exhausted() or "the budget is spent"
        batch = strategy.propose(room)[:room]
        if not batch:
            return budget.exhausted() or _unavailable(policy) or strategy.should_stop() or "the policy has no more candidates"
        verdicts = _evaluate(batch, state, judge)
        nodes = [state.add(p, v, step) for p, v in zip(batch, verdicts)]
        # a repeat of a held source brings its node's verdict, or a new one where that was too
        # noisy to decide and was timed again
        retimed = {id(n): v for n, v in zip(nodes, verdicts) if n.verdict is not v}
        for node in nodes:
            if id(node) in retimed:
                state.remeasured(node, retimed[id(node)])
        # a repeated source is one more sample of its node: critiqued and hooked only when timed again
        fresh = list({id(n): n for n, p in zip(nodes, batch) if n.proposal is p or id(n) in retimed}.values())
        for node, c in zip(fresh, critic.critique_all(fresh)):
            node.critique, node.critique_flags = c.text(), list(c.unsupported)
            critiques[node.index] = c
        if store is not None:  # the store keeps every sample: one row each, repeats included
            for node, p in zip(nodes, batch):
                _record(judge, node, p, critiques.get(node.index), strategy, policy, step)
        if hook is not None:
            for node in fresh:
                hook.pytest_maxcode_evaluation(target=target, node=node)
        # the budget counts proposals, repeats too: a model that keeps repeating itself still ends the search
        budget.charge(evaluations=len(batch))
        strategy.update(list({id(n): n for n in nodes}.values()))
        step += 1


def _record(judge: Judge, node: Node, p: Proposal, c: Critique | None, strategy: Strategy, policy: Proposer, step: int) -> None:
    """One sample's row: the node's own, or a repeat's (its own parent, step and LLM call, the
    node's candidate and verdict). The node keeps the id of its first row. Seven parameters because
    the row's fields come from the node, the sample and its critique, and the rest from the loop."""
    store, run_id, target = judge.store, judge.run_id, judge.target
    if store is None:  # the loop records only into a store; a search without one keeps no rows
        return
    v, spec, parent = node.verdict, node.proposal.spec, p.parent
    if spec is not None and node.proposal is p:
        store.add_candidate(spec.hash, spec.format, spec.lang, spec.text, origin=p.origin)
    row = store.add_node(NodeRow(
        run_id=run_id, target_id=target.id, parent_id=parent.id if parent else None,
        strategy=strategy.name, policy=policy.name, step=step, depth=parent.depth + 1 if parent else 0, origin=p.origin,
        candidate_hash=spec.hash if spec else None, status=v.status, reward=node.reward,
        speedup=v.speedup, candidate_s=v.candidate_s, reasons=(v.reasons or [])[:3], llm_call_id=p.llm_call_id,
        critique=node.critique, critic=c.critic if c else None, critique_flags=list(node.critique_flags),
        critique_call_id=c.llm_call_id if c and node.proposal is p else None,
    ))
    if node.proposal is p:
        node.id = row


def _unavailable(policy: Any) -> str | None:
    """The model stayed unavailable after the SDK's retries: why, as the stop reason."""
    why = getattr(policy, "unavailable", None) or getattr(getattr(policy, "inner", None), "unavailable", None)
    return f"the model is unavailable: {why}" if why else None


def _accepted(p: Proposal) -> bool:
    """The kernel the lock accepts (the search starts from it): see :func:`policy.AcceptedFirst`."""
    return p.origin.startswith("accepted:")


def _decided(v: Verdict, min_speedup: float) -> bool:
    """Whether a verdict settles its candidate (``reusable``'s rule for a stored one)."""
    return not v.diagnostics.get("undecided") and not undecided(v.status, v.speedup_ci, min_speedup)


def _evaluate(batch: list[Proposal], state: SearchState, judge: Judge) -> list[Verdict]:
    """Each proposal's verdict, with one oracle run per source (``source_key``: identical up to
    trailing whitespace): a source the search already holds takes its node's verdict (timed
    again only when that was too noisy to decide), and one that comes twice in the batch (k
    samples that agree) is checked once."""
    oracle, store, target, result, remeasure = judge.oracle, judge.store, judge.target, judge.result, judge.remeasure
    known: dict[str, Verdict] = {}  # by source: the held nodes' and the store's verdicts
    todo: dict[str, CandidateSpec] = {}  # by source: what the oracle runs
    retimed = repeats = stored = 0
    for p in batch:
        if p.spec is None:
            continue
        key = source_key(p.spec)
        held = state.find(p)
        if key in known or key in todo:
            repeats += 1
            continue
        if held is not None:
            repeats += 1
            if _decided(held.verdict, oracle.config.min_speedup):
                known[key] = held.verdict
            else:  # evidence too weak to decide: this sample's run is worth its time
                retimed += 1
                todo[key] = held.proposal.spec  # type: ignore[assignment]
            continue
        # the accepted kernel is this run's bar for a replacement: timed in this run, never from the store
        row = store.find_evaluation(target.id, p.spec.hash, oracle.eval_key) if store and not _accepted(p) else None
        if row is not None and reusable(row, oracle.config.min_speedup, remeasure):
            known[key] = verdict_from_row(row, str(p.spec.path))
            result.resumed += 1
            stored += 1
        else:
            retimed += row is not None
            todo[key] = p.spec
    formats = sum(p.spec is None for p in batch)
    judge.progress(
        f"{target.id}: evaluating {len(todo)} candidate(s)"
        + (f", {stored} from the store" if stored else "")
        + (f", {retimed} earlier one(s) timed again ({'--maxcode-remeasure' if remeasure else 'too noisy to decide'})" if retimed else "")
        + (f", {repeats} repeat(s) of a candidate already in hand (not run again)" if repeats else "")
        + (f", {formats} repl{'y' if formats == 1 else 'ies'} without code" if formats else "")
    )
    if todo:
        with judge.lock:
            t0 = time.monotonic()
            known.update(zip(todo, oracle.check(list(todo.values()))))
            result.timings["oracle_s"] += time.monotonic() - t0
    return [known[source_key(p.spec)] if p.spec is not None else _format_verdict(p) for p in batch]
