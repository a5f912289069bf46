"""The search loop driven by a model: real oracle, real SDK, a scripted server on 127.0.0.1.

The scripted model answers by what the prompt asks for: first implementations cycle
through a reply without code, a kernel that does not compile, a wrong one, a slow correct
one and the fast one; a fix-up gets the slow correct kernel; an improvement gets the fast
one. Every strategy must find the fast kernel and leave its tree in the store.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any, Callable

import llm_fakes
import pytest
import torch
from llm_fakes import code_reply

from conftest import DATA
from pytest_maxcode import options
from pytest_maxcode.llm import make_critic_service, make_scorer_service, make_service
from pytest_maxcode.search.loop import SearchContext, _decided, search_target
from pytest_maxcode.search.policy import TargetInfo
from pytest_maxcode.store import Store
from pytest_maxcode.targets.lock import LockEntry, sha256_text, write_lock
from pytest_maxcode.targets.capture import signature

fake_openai = llm_fakes.fake_openai

PARALLEL = "#pragma omp parallel for if (rows * cols > 1 << 16)\n"
# one thread: an OpenMP team on a loaded machine waits for its slowest, descheduled thread, which
# can make a parallel kernel's median slower than the reference's; one thread keeps it 10x ahead
GOOD = (DATA / "chain" / "good.cpp").read_text().replace("one OpenMP pass", "one pass").replace(PARALLEL, "")
assert "omp parallel" not in GOOD
# clearly slower than the reference (1000 passes: about 10x slower than the row-wise reference,
# which is itself 10x or more slower than GOOD): no verdict may flip with noise, or a replayed
# search would part from the recorded one
SLOW = GOOD.replace("// Correct: the chain fused into one pass.", "// Correct but slow: recomputed 1000 times.").replace(
    "  for (int64_t r = 0; r < rows; ++r) {", "for (int rep = 0; rep < 1000; ++rep)\n  for (int64_t r = 0; r < rows; ++r) {",
).replace("#pragma omp simd\n", "")
assert "rep < 1000" in SLOW and "recomputed" in SLOW
WRONG = GOOD.replace("v * v - 0.5f", "v * v + 0.5f")
BROKEN = GOOD.replace("float v =", "floot v =")
NO_CODE = "I would fuse the four passes into one loop over the tensor."
LIB = '''"""The reference: relu(2x + b)^2 - 0.5 one row at a time, slow on purpose (the same math
in hundreds of small passes), so the fused kernel wins by 10x or more even on a loaded machine."""
import torch


def chain(x, bias):
    out = torch.empty_like(x)
    for r in range(x.shape[0]):
        y = torch.relu(x[r] * 2.0 + bias)
        out[r] = y * y - 0.5
    return out
'''


def task_of(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, list):
        content = "".join(b.get("text", "") for b in content)
    return content.rsplit("## Your task now", 1)[1]


def scripted_model() -> Callable[[dict[str, Any]], str]:
    first = itertools.cycle([NO_CODE, code_reply(BROKEN), code_reply(WRONG), code_reply(SLOW), code_reply(GOOD)])

    def reply(body: dict[str, Any]) -> str:
        task = task_of(body)
        if "first implementation" in task:
            return next(first)
        if "Fix the cause" in task:
            return code_reply(SLOW)
        return code_reply(GOOD)

    return reply


@pytest.fixture(scope="module")
def chain_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project for the module: its build cache serves every test; each test has its own store."""
    root = tmp_path_factory.mktemp("search") / "proj"
    root.mkdir()
    (root / "lib.py").write_text(LIB)
    torch.manual_seed(0)
    # 64 rows, not 256: every reference call and every check of the slow kernel costs a quarter
    # (a builtin search over the three kernels: 31 s against 40 s), and the margins stay wide
    # (the fused kernel about 60x faster, the slow one about 0.15x)
    x, b = torch.randn(64, 1024), torch.randn(1024)
    inputs = root / ".maxcode" / "inputs" / "lib.chain"
    inputs.mkdir(parents=True)
    torch.save({"signature": signature((x, b)), "sets": [[x, b]]}, inputs / "w0.pt")
    return root


def run_search(root: Path, store: Store, llm_spec: str | None, **overrides: Any) -> Any:
    settings = options.load_settings({}, None).replace(llm=llm_spec, llm_concurrency=1, k=2, budget=8)
    settings = settings.replace(**overrides)
    target = TargetInfo("lib.chain", "lib", "chain", root / "lib.py", "function", "cpp")
    service = make_service(settings, root, store.path)
    critic = make_critic_service(settings, root, store.path, service)
    scorer = make_scorer_service(settings, root, store.path, service)
    run_id = store.begin_run("test", "0")
    try:
        return search_target(target, sorted((root / ".maxcode" / "inputs" / "lib.chain").glob("*.pt")), root, settings,
                             SearchContext(store, run_id, lambda m: None, llm=service, critic_llm=critic, scorer_llm=scorer))
    finally:
        for s in {id(s): s for s in (service, critic, scorer) if s is not None}.values():
            s.close()


def tree(store: Store) -> list[dict[str, Any]]:
    return store.nodes("lib.chain")


@pytest.mark.parametrize("strategy", ["best-of-n", "refine", "effi", "maxcode", "beam"])
def test_each_strategy_reaches_the_scripted_best_and_records_its_tree(
    strategy: str, chain_root: Path, tmp_path: Path, fake_openai: Any
) -> None:
    fake_openai.respond_with(scripted_model())
    with Store(tmp_path / "maxcode.db") as store:
        result = run_search(chain_root, store, fake_openai.spec("local-model"), strategy=strategy)
        nodes = tree(store)
    assert result.error is None, result.error
    best = result.state.best
    assert best is not None and best.code == GOOD.rstrip() + "\n", [n.verdict.status for n in result.state.trajectory]
    assert best.verdict.status == "faster"
    # the tree in the store is the state's tree, with a row more for each repeat of a source
    assert len(nodes) == sum(n.samples for n in result.state.trajectory)
    by_id = {n["id"]: n for n in nodes}
    for node in result.state.trajectory:
        row = by_id[node.id]
        # the latest row of its source has the node's verdict (a repeat may have timed a noisy one again)
        same = [r for r in nodes if r["id"] == node.id or (node.proposal.spec and r["candidate_hash"] == node.proposal.spec.hash)]
        assert same[-1]["status"] == node.verdict.status
        assert row["parent_id"] == (node.parent.id if node.parent else None)
        if row["parent_id"] is not None:
            assert by_id[row["parent_id"]]["step"] < row["step"]
        assert row["strategy"] == strategy and row["policy"] == "llm"
        # the latest row of its source holds the critique the node has now (of its latest verdict)
        assert same[-1]["critique"] == node.critique and node.critique.startswith("[")  # the rule-based critic ran
        assert row["llm_call_id"] is not None
    statuses = {n["status"] for n in nodes}
    assert "format" in statuses or strategy in ("refine", "effi", "beam", "maxcode")  # the cycle starts without code
    if strategy == "best-of-n":
        assert all(n["parent_id"] is None for n in nodes)
    else:
        assert any(n["parent_id"] is not None for n in nodes)
        assert by_id[best.id]["parent_id"] is not None  # the fast kernel was an improvement on a node
    assert len(nodes) <= 8 and result.stop_reason
    assert result.llm_calls == len(fake_openai.requests)


def test_a_model_improves_on_the_kernel_the_lock_accepts(chain_root: Path, tmp_path: Path, fake_openai: Any) -> None:
    """Once a kernel is merged, a model's search starts from it: measured again as the first
    node, and shown to the model as the kernel to improve on, not the reference alone."""
    root = tmp_path / "proj"
    shutil.copytree(chain_root, root)
    (root / "maxcode_kernels").mkdir()
    merged = SLOW.replace("rep < 1000", "rep < 2")  # correct, and not the fastest
    (root / "maxcode_kernels" / "lib.chain.cpp").write_text(merged)
    write_lock(root / "maxcode.lock", {"lib.chain": LockEntry(
        "lib.chain", sha256_text(LIB), "maxcode_kernels/lib.chain.cpp", sha256_text(merged), "cpp", "cpu", "", 1.2,
        [1.1, 1.3], "2026-11-25", "0")})
    fake_openai.respond_with(scripted_model())
    with Store(tmp_path / "maxcode.db") as store:
        result = run_search(root, store, fake_openai.spec("local-model"), strategy="maxcode", budget=3)
    assert result.error is None, result.error
    first = result.state.trajectory[0]
    assert first.proposal.origin == "accepted:maxcode_kernels/lib.chain.cpp" and "rep < 2" in (first.code or "")
    assert first.verdict.correct
    assert fake_openai.requests, "the model was never asked"
    prompt = "".join(str(m.get("content")) for m in fake_openai.requests[0]["messages"])
    assert "rep < 2" in prompt  # the merged kernel's source is in the model's first prompt
    assert result.state.trajectory[1].parent is first  # and the first reply improves on it
    # the next run times the merged kernel again, though the store holds its verdict: it is
    # that run's bar for a replacement
    with Store(tmp_path / "maxcode.db") as store:
        again = run_search(root, store, fake_openai.spec("local-model"), strategy="maxcode", budget=3)
    first_again = again.state.trajectory[0]
    assert first_again.proposal.origin == first.proposal.origin, first_again.proposal.origin
    assert not first_again.verdict.diagnostics.get("resumed"), "the merged kernel's verdict came from the store"


def test_refine_fixes_the_failure_it_saw(chain_root: Path, tmp_path: Path, fake_openai: Any) -> None:
    fake_openai.respond_with(scripted_model())
    with Store(tmp_path / "maxcode.db") as store:
        result = run_search(chain_root, store, fake_openai.spec("local-model"), strategy="refine", budget=6)
    fixes = [n for n in result.state.trajectory if n.proposal.mode == "fix"]
    assert fixes and fixes[0].parent.verdict.status == "compile_error"
    fix_prompt = [r for r in fake_openai.requests if "Fix the cause" in task_of(r)][0]
    user = fix_prompt["messages"][-1]["content"]
    assert "floot" in user and "## Last attempt" in user and "## Trajectory" in user  # feedback+trajectory
    assert "error" in user.split("## Last attempt", 1)[1]  # the compiler's message is fed back


def test_a_rerun_is_served_by_the_response_cache_and_the_evaluation_store(chain_root: Path, tmp_path: Path, fake_openai: Any) -> None:
    fake_openai.respond_with(scripted_model())
    with Store(tmp_path / "maxcode.db") as store:
        first = run_search(chain_root, store, fake_openai.spec("local-model"), strategy="maxcode", budget=6)
        sent = len(fake_openai.requests)
        fake_openai.respond_with("the server must not be asked again")
        second = run_search(chain_root, store, fake_openai.spec("local-model"), strategy="maxcode", budget=6)
        calls = list(store.db.execute("SELECT source, cost_usd FROM llm_calls ORDER BY id"))
    assert len(fake_openai.requests) == sent
    assert [n.code for n in second.state.trajectory] == [n.code for n in first.state.trajectory]
    # a decided verdict is served from the store; an undecided one (a busy machine) is timed again
    min_speedup = options.load_settings({}, None).min_speedup
    served = [n.proposal.spec is not None and _decided(n.verdict, min_speedup) for n in first.state.trajectory]
    assert any(served)
    assert second.resumed == sum(served)
    assert [n.verdict.status for n, s in zip(second.state.trajectory, served) if s] == [
        n.verdict.status for n, s in zip(first.state.trajectory, served) if s
    ]
    assert all(n.verdict.diagnostics.get("resumed") for n, s in zip(second.state.trajectory, served) if s)
    assert [c[0] for c in calls[sent:]] == ["cache"] * sent and all(c[1] == 0 for c in calls[sent:])
    assert second.llm_calls == 0


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"llm_calls": 3}, "LLM-call budget of 3 per target reached"),
        ({"tokens": 1500}, "token budget of 1500 per target reached"),
        ({"cost": 0.002, "prices": {"scripted-local-model": {"input": 1.0, "output": 1.0}}}, "money budget of $0.002 per target reached"),
        ({"budget": 3}, "evaluation budget of 3 per target reached"),
    ],
)
def test_budgets_stop_the_search_and_say_which(
    overrides: dict[str, Any], reason: str, chain_root: Path, tmp_path: Path, fake_openai: Any
) -> None:
    fake_openai.respond_with(NO_CODE)  # format failures only: no oracle work, just the loop
    with Store(tmp_path / "maxcode.db") as store:
        result = run_search(chain_root, store, fake_openai.spec("local-model"), strategy="best-of-n", k=1, **{"budget": 50, **overrides})
        totals = store.llm_totals(target_id="lib.chain")
        calls = [dict(r) for r in store.db.execute("SELECT * FROM llm_calls ORDER BY id")]
    assert result.stop_reason == reason
    assert all(n.verdict.status == "format" for n in result.state.trajectory)
    # identical replies are one node with a sample count (issue 17)
    assert len(calls) == len(fake_openai.requests) == sum(n.samples for n in result.state.trajectory)
    # costs add up: each call priced from its own tokens, the totals are their sum
    priced = "prices" in overrides
    for c in calls:
        # $1/Mtok in and out; cache writes at the input price, cache reads at a tenth of it
        tokens = c["input_tokens"] + c["output_tokens"] + c["cache_write_tokens"] + 0.1 * c["cache_read_tokens"]
        assert c["cost_usd"] == pytest.approx(tokens / 1e6 if priced else 0.0)
    assert totals["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in calls))
    assert totals["tokens"] == sum(c["input_tokens"] + c["output_tokens"] for c in calls)
    assert result.cost_usd == pytest.approx(totals["cost_usd"]) and result.tokens == totals["tokens"]
    if "llm_calls" in overrides:
        assert len(calls) == 3


def test_a_run_budget_is_shared_by_targets(chain_root: Path, tmp_path: Path, fake_openai: Any) -> None:
    from pytest_maxcode.search.budget import Meter
    from pytest_maxcode.search.loop import run_limits

    fake_openai.respond_with(NO_CODE)
    settings = options.load_settings({}, None)
    meter = Meter(run_limits(settings.replace(run_llm_calls=3)), "per run")
    with Store(tmp_path / "maxcode.db") as store:
        target = TargetInfo("lib.chain", "lib", "chain", chain_root / "lib.py", "function", "cpp")
        service = make_service(settings.replace(llm=fake_openai.spec("local-model")), chain_root, store.path)
        files = sorted((chain_root / ".maxcode" / "inputs" / "lib.chain").glob("*.pt"))
        common = settings.replace(llm=fake_openai.spec("local-model"), strategy="best-of-n", k=2, budget=20, llm_concurrency=1)
        ctx = SearchContext(store, None, lambda m: None, llm=service, run_meter=meter)
        one = search_target(target, files, chain_root, common, ctx)
        two = search_target(target, files, chain_root, common, ctx)
        service.close()
    assert one.stop_reason == "LLM-call budget of 3 per run reached"
    assert sum(n.samples for n in one.state.trajectory) == 3 and len(one.state.trajectory) == 1
    assert two.stop_reason == "LLM-call budget of 3 per run reached" and not two.state.trajectory


def test_an_unavailable_model_ends_the_search_with_the_reason(chain_root: Path, tmp_path: Path, fake_openai: Any) -> None:
    fake_openai.fail(503, times=20)
    with Store(tmp_path / "maxcode.db") as store:
        result = run_search(chain_root, store, fake_openai.spec("local-model"), strategy="maxcode", llm_retries=1)
    assert not result.state.trajectory and result.error is None
    assert "503" in result.stop_reason or "unavailable" in result.stop_reason.lower()


def test_without_a_model_the_builtin_policy_still_searches(chain_root: Path, tmp_path: Path) -> None:
    seeds = chain_root / "maxcode_kernels" / "seeds" / "lib.chain"
    seeds.mkdir(parents=True, exist_ok=True)
    (seeds / "fused.cpp").write_text(GOOD)
    try:
        with Store(tmp_path / "maxcode.db") as store:
            result = run_search(chain_root, store, None, torch_compile=False)
    finally:
        shutil.rmtree(chain_root / "maxcode_kernels")
    assert result.policy == "builtin" and result.strategy == "sweep" and result.llm is None
    assert result.state.best is not None and result.state.best.verdict.status == "faster"


def test_targets_searched_concurrently_overlap_their_requests(
    chain_root: Path, tmp_path: Path, fake_openai: Any
) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import time

    model = scripted_model()

    def held(body: dict[str, Any]) -> str:
        """Each reply waits (a minute at most) until both targets' requests were in flight at once:
        whether they overlap is then up to the search, not to how loaded this machine is."""
        deadline = time.monotonic() + 60
        while fake_openai.max_in_flight < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        return model(body)

    fake_openai.respond_with(held)
    settings = options.load_settings({}, None).replace(llm=fake_openai.spec("local-model"), strategy="best-of-n", k=2, budget=4)
    files = sorted((chain_root / ".maxcode" / "inputs" / "lib.chain").glob("*.pt"))
    lock = threading.Lock()  # the session's: oracle work takes turns
    service = make_service(settings, chain_root, tmp_path / "maxcode.db")

    def one(target_id: str) -> Any:
        with Store(tmp_path / "maxcode.db") as store:
            target = TargetInfo(target_id, "lib", "chain", chain_root / "lib.py", "function", "cpp")
            return search_target(target, files, chain_root, settings, SearchContext(store, None, lambda m: None, llm=service, oracle_lock=lock))

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, ["lib.chain", "lib.chain_twin"]))
    service.close()
    assert fake_openai.max_in_flight >= 3  # both targets' requests were in flight together (k=2 each)
    assert all(sum(n.samples for n in r.state.trajectory) == 4 and r.error is None for r in results)
