"""A ``pytest --maxcode`` run: capture while the tests run, then search, verify, report, apply.

Imported and registered by the plugin only when ``--maxcode`` is given, so the heavy layers
it imports at its top (the search, the oracle, torch) load only then.
"""

from __future__ import annotations

import fnmatch
import json
import platform
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from ._styles import terminal_safe
from ._version import __version__
from .apply import apply_report
from .errors import MaxcodeError, SearchInterrupted
from .llm import make_critic_service, make_scorer_service, make_service
from .model.report import (
    BenchmarkResult,
    BestKernel,
    CandidateCounts,
    Evaluation,
    Measurement,
    ReferenceInfo,
    Remeasure,
    Report,
    RerunResult,
    SearchSummary,
    TargetResult,
    TargetStatus,
    WorkloadResult,
    parse_report,
    parse_target,
)
from .model.jsontypes import json_number
from .model.search import Node, NodeRow
from .model.verdict import Verdict
from .native.build import cuda_arch
from .options import Settings, accepts_range_limited
from .oracle.check import noise_note
from .oracle.probe import machine_fingerprint
from .oracle.program import rerun_test_cases
from .report import remeasure_command, validate, write_reports
from .report.tree import best_so_far_curve, curves_by_strategy
from .search.budget import Meter
from .search.loop import (
    SearchContext,
    SearchResult,
    run_limits,
    search_names,
    search_program,
    search_target,
)
from .search.policy import TargetInfo
from .search.reward import reward
from .search.strategies import STRATEGIES
from .store import Store, damage, default_path, move_aside
from .targets.capture import Recorder, TargetCapture, signature
from .targets.decorator import ON_REGISTER, REGISTRY, TargetHandle
from .targets.dispatch import dispatch_overhead_us
from .targets.introspect import module_state, reads_training
from .targets.lock import sha256_text
from .value.model import MODEL_FILE
from .verify import run_tests_with_file, verify

EXT = {"cpp": ".cpp", "cuda": ".cu", "py": ".py"}
#: the tests passed but maxcode failed: a search failed, or --maxcode-target matched nothing
MAXCODE_FAILED = 6


class MaxcodeSession:
    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.root = Path(config.rootpath)
        self.recorder = Recorder()
        #: the run's report, as ``report_json`` reads (what apply and the terminal summary read)
        self.report: Report | None = None
        #: the report's JSON after the ``pytest_maxcode_report`` hooks: what report.json holds, and the renderers read
        self.report_json: dict[str, Any] | None = None
        self.report_paths: dict[str, Path] = {}
        self._say_lock = threading.Lock()
        self._oracle_lock = threading.Lock()
        #: set on Ctrl-C: searches in worker threads stop at their next progress line
        self._stop = threading.Event()
        #: whether the searches are running: then the main thread, too, stops at its next
        #: progress line once Ctrl-C was seen (see :meth:`_progress`)
        self._searching = False
        #: why ``pytest --maxcode`` exits 6 although the tests passed (None: it does not)
        self.problem: str | None = None
        #: set when Ctrl-C ended the search: the number of targets whose report was written
        self.interrupted: int | None = None
        self._finished: list[TargetResult] = []
        self._notes: list[str] = []
        self._check_store(default_path(self.root))
        # configuration problems (no key, a bad spec) stop the run here, before any test runs
        self.llm = make_service(settings, self.root, default_path(self.root))
        self.critic_llm = make_critic_service(settings, self.root, default_path(self.root), self.llm)
        self.scorer_llm = make_scorer_service(settings, self.root, default_path(self.root), self.llm)
        self.policy_name, self.strategy_name = search_names(settings, has_llm=self.llm is not None)
        self._check_policy()
        self._check_strategy()
        self.programs = [p for p in settings.programs or () if self._selected(p.id)]
        for handle in list(REGISTRY.values()):
            self._maybe_attach(handle)
        ON_REGISTER.append(self._maybe_attach)

    def _check_store(self, path: Path) -> None:
        """A damaged store is moved aside (kept) before any test runs: the search starts afresh."""
        why = damage(path) if path.is_file() else None
        if why is not None:
            dest = move_aside(path)
            self._notes.append(f"{path} was damaged ({why}); moved it to {dest.name} and started a fresh store "
                               "(earlier evaluations are not reused)")

    def _check_policy(self) -> None:
        """An unknown --maxcode-policy is a usage error now, not a failed search per target."""
        name = self.policy_name
        if name == "builtin":
            return
        if name == "llm":
            if self.llm is None:
                raise MaxcodeError("--maxcode-policy=llm needs a model: set --maxcode-llm (anthropic:MODEL, openai:MODEL@URL, "
                                   "replay:PATH) or ANTHROPIC_API_KEY")
            return
        hook = self.config.hook.pytest_maxcode_policy
        found: Any = None
        if hook.get_hookimpls():
            try:  # a plugin that needs the target to decide is given the benefit of the doubt
                found = hook(name=name, target=None, settings=self.settings)
            except Exception:
                found = True
        if found is None:
            raise MaxcodeError(f"--maxcode-policy={name}: no such policy (built in: builtin, llm; a plugin can add one with "
                               "pytest_maxcode_policy)")

    def _check_strategy(self) -> None:
        if self.settings.rerank == "llm" and self.strategy_name != "maxcode":
            raise MaxcodeError("--maxcode-rerank=llm reranks the maxcode strategy's proposals; add --maxcode-strategy=maxcode")
        if self.settings.rerank == "light":
            model = self.root / ".maxcode" / "value" / MODEL_FILE
            if not model.is_file():
                raise MaxcodeError(f"--maxcode-rerank=light: no value model at {model}; train one with maxcode value train")
            if self.strategy_name != "maxcode":
                raise MaxcodeError("--maxcode-rerank=light reranks the maxcode strategy's proposals; add --maxcode-strategy=maxcode")
        name = self.strategy_name
        if name in STRATEGIES:
            return
        if self.config.hook.pytest_maxcode_strategy(name=name, settings=self.settings) is None:
            known = ", ".join(STRATEGIES)
            raise MaxcodeError(f"--maxcode-strategy={name}: no such strategy (built in: {known}; a plugin can add one with pytest_maxcode_strategy)")

    def _selected(self, target_id: str) -> bool:
        patterns = self.settings.target
        return not patterns or any(fnmatch.fnmatchcase(target_id, p) for p in patterns)

    def _maybe_attach(self, handle: TargetHandle) -> None:
        if self._selected(handle.id):
            self.recorder.attach(handle)

    def _say(self, message: str) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            with self._say_lock:
                tr.write_line(terminal_safe(f"maxcode: {message}"))

    def _progress(self, message: str) -> None:
        """The searches' progress line; after Ctrl-C it stops a search running in a worker
        thread (KeyboardInterrupt reaches only the main thread), and one in the main thread
        whose KeyboardInterrupt was lost: raised inside a finalizer, Python prints "Exception
        ignored" and goes on, and cleanup that fails in a ``finally`` replaces it with an
        error the oracle judges (a full suite once saw a run go on to its end after Ctrl-C)."""
        if self._stop.is_set() and (self._searching or threading.current_thread() is not threading.main_thread()):
            raise SearchInterrupted("interrupted")
        self._say(message)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        for note in self._notes:
            self._say(f"warning: {note}")

    # -- while the tests run --------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        self.recorder.current_test = item.nodeid
        self.recorder.current_uses_benchmark = "benchmark" in getattr(item, "fixturenames", ())
        try:
            return (yield)
        finally:
            self.recorder.current_test = None

    # -- after the tests ------------------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._maybe_attach in ON_REGISTER:
            ON_REGISTER.remove(self._maybe_attach)
        for cap in self.recorder.targets.values():
            cap.handle.use_reference("pytest --maxcode finished recording")
        started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        targets = []
        if exitstatus == pytest.ExitCode.INTERRUPTED:  # Ctrl-C while the tests ran: nothing to search, nor to report
            return
        if exitstatus not in (0, pytest.ExitCode.NO_TESTS_COLLECTED):
            why = "the test session failed; maxcode optimizes only behind a green test suite"
            targets = [TargetResult.skipped(cap.handle.id, why, cap.callers) for cap in self.recorder.targets.values()]
            targets += [TargetResult.skipped(p.id, why, [], kind="program") for p in self.programs]
        elif self.settings.target and not self.recorder.targets and not self.programs:
            known = sorted(REGISTRY) + sorted(p.id for p in self.settings.programs or ())
            patterns = " ".join(f"--maxcode-target={p}" for p in self.settings.target)
            self.problem = (f"{patterns} matched no target (targets: {', '.join(known) or 'none'}); "
                            "the report was left as it was")
            self._set_exitstatus(session)
            return
        else:
            try:
                targets = self._optimize_all()
            except KeyboardInterrupt:
                targets = list(self._finished)
                self.interrupted = len(targets)
        report = Report(
            tool_version=__version__, created_at=started, machine=_machine(self.settings.device),
            options={
                "budget": self.settings.budget, "time": self.settings.time, "min_speedup": self.settings.min_speedup,
                "apply": self.settings.apply, "policy": self.policy_name, "device": self.settings.device,
            },
            # a filtered or interrupted run keeps the previous report's other targets
            targets=self._merged(targets) if self.settings.target or self.interrupted is not None else targets,
        )
        self.report_json = self._published(report)
        self.report = self._read_back(self.report_json, report)
        out = self.root / ".maxcode" / "reports"
        self.report_paths = write_reports(self.report_json, out)
        if self.settings.json_path:
            dest = self.root / self.settings.json_path
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.report_paths["json"], dest)
        if self.settings.apply and self.interrupted is None:
            for line in apply_report(self.report, self.root):
                self._say(line)
        failed = [t for t in targets if t.status == TargetStatus.FAILED]
        if failed:
            first = failed[0]
            self.problem = (f"the search of {len(failed)} target(s) failed: {first.id}: {first.reason}"
                            + (f" (and {len(failed) - 1} more; see the report)" if len(failed) > 1 else ""))
        self._set_exitstatus(session)

    def _set_exitstatus(self, session: pytest.Session) -> None:
        """2 after Ctrl-C; 6 when the tests passed but maxcode failed (see the exit-status table)."""
        if self.interrupted is not None:
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        elif self.problem is not None and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = MAXCODE_FAILED

    def _published(self, report: Report) -> dict[str, Any]:
        """The report's JSON after plugins added to it (``pytest_maxcode_report``), checked
        against the published schema when jsonschema is installed: a plugin that breaks the
        contract is named here, not by ``maxcode apply`` or the bot later. Without jsonschema
        (a dependency, so only a broken install lacks it) one line says the check was skipped."""
        data = report.to_json()
        self.config.hook.pytest_maxcode_report(report=data, config=self.config)
        try:
            errors = validate(data)
        except ImportError:
            self._say("warning: the report was not checked against its schema: jsonschema is not installed "
                      "(pip install jsonschema)")
            errors = []
        if errors:
            self._say(f"the report does not match its schema ({errors[0]}); a pytest_maxcode_report hook may have changed it")
        return data

    def _read_back(self, data: dict[str, Any], built: Report) -> Report:
        """The published JSON as a :class:`Report`, so what is applied is what was written; where a
        hook left it unreadable, one line says so and the report as built stands in."""
        try:
            return parse_report(data, "the report after the pytest_maxcode_report hooks")
        except MaxcodeError as e:
            self._say(str(e))
            return built

    def _merged(self, targets: list[TargetResult]) -> list[TargetResult]:
        """A filtered run's targets over the previous report's: the others are kept as they were,
        each one that still reads; one line names any that does not (it is not carried over)."""
        path = self.root / ".maxcode" / "reports" / "report.json"
        try:
            rows = json.loads(path.read_text()).get("targets")
        except (OSError, ValueError, AttributeError):
            return targets
        fresh = {t.id for t in targets}
        kept = []
        for row in rows if isinstance(rows, list) else []:
            try:
                target = parse_target(row, str(path))
            except MaxcodeError as e:
                self._say(f"{e}: that earlier target is left out of this report")
                continue
            if target.id not in fresh:
                kept.append(target)
        return sorted(kept + targets, key=lambda t: str(t.id))

    def _optimize_all(self) -> list[TargetResult]:
        files = self.recorder.save(self.root)
        path = default_path(self.root)
        with Store(path) as store:
            run_id = store.begin_run("pytest --maxcode", __version__)
            killed = store.killed
        if killed:
            self._say(f"run(s) {', '.join(map(str, killed))} ended without finishing (killed); marked so, their evaluations are reused")
        run_meter = Meter(run_limits(self.settings), "per run")

        def one(item: tuple[str, Any]) -> TargetResult:
            with Store(path) as store:  # one connection per thread
                if isinstance(item[1], TargetCapture):
                    entry = self._optimize(item[1], files.get(item[0], []), store, run_id, run_meter)
                else:
                    entry = self._optimize_program(item[1], store, run_id, run_meter)
            self._finished.append(entry)
            return entry

        items: list[tuple[str, Any]] = sorted(self.recorder.targets.items())
        items += sorted((p.id, p) for p in self.programs)
        workers = max(1, min(self.settings.parallel_targets, len(items) or 1))
        status = "finished"
        previous = self._catch_ctrl_c()
        self._searching = True
        try:
            if workers == 1:  # in this thread, so Ctrl-C stops the search where it is
                out = [one(item) for item in items]
            else:
                pool = ThreadPoolExecutor(max_workers=workers)
                futures = [pool.submit(one, item) for item in items]
                try:
                    out = [f.result() for f in futures]
                except KeyboardInterrupt:
                    self._stop.set()
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
                pool.shutdown()
        except KeyboardInterrupt:
            self._searching = False
            status = "interrupted"
            with Store(path) as store:
                self._keep_cut_batch(store, run_id)
            raise
        finally:
            self._searching = False
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            for service in self._services():
                if status == "finished":
                    for model in sorted(service.unpriced_models):
                        self._say(f"no price is known for {model}: its calls count as $0 and --maxcode-cost cannot stop them; set [tool.maxcode.prices]")
                service.close()
            with Store(path) as store:
                store.finish_run(run_id, status)
        return out

    def _services(self) -> list[Any]:
        return list({id(s): s for s in (self.llm, self.critic_llm, self.scorer_llm) if s is not None}.values())

    def _catch_ctrl_c(self) -> Any:
        """Ctrl-C during the search: stop the worker threads' searches, abort the model
        requests in flight (a thread waiting on one would hold the run for up to
        --maxcode-llm-timeout), then KeyboardInterrupt here. A second Ctrl-C is pytest's."""
        if threading.current_thread() is not threading.main_thread():
            return None
        previous = signal.getsignal(signal.SIGINT)
        if previous is not signal.default_int_handler:  # someone else's handler: leave it
            return None

        def on_sigint(signum: int, frame: Any) -> None:
            signal.signal(signal.SIGINT, previous)
            self._stop.set()
            threading.Thread(target=self._abort_requests, name="maxcode-abort", daemon=True).start()
            raise KeyboardInterrupt

        signal.signal(signal.SIGINT, on_sigint)
        return previous

    def _abort_requests(self) -> None:
        """A model request in flight fails at once instead of running on for --maxcode-llm-timeout."""
        for service in self._services():
            service.abort()

    def _keep_cut_batch(self, store: Store, run_id: int) -> None:
        """The evaluations of the batch Ctrl-C cut short become nodes (without a parent), so
        ``maxcode show`` lists every finished evaluation of an interrupted run."""
        steps: dict[str, int] = {}
        for row in store.evaluations_without_nodes(run_id):
            target = row["target_id"]
            if target not in steps:
                steps[target] = max((n["step"] for n in store.nodes(target, run_id)), default=-1) + 1
            v = Verdict(candidate="", status=row["status"], speedup=row["speedup"], diagnostics=row["diagnostics"])
            try:
                r = reward(v)
            except KeyError:
                r = 0.0
            store.add_node(NodeRow(run_id=run_id, target_id=target, parent_id=None, strategy=self.strategy_name,
                                   policy=self.policy_name, step=steps[target], depth=0, origin=row["origin"] or "unknown",
                                   candidate_hash=row["candidate_hash"], status=row["status"], reward=r, speedup=row["speedup"],
                                   candidate_s=row["candidate_s"], reasons=(row["reasons"] or [])[:3]))

    def _search_context(self, store: Store, run_id: int, run_meter: Any) -> Any:
        return SearchContext(store, run_id, self._progress, hook=self.config.hook, llm=self.llm, run_meter=run_meter,
                             oracle_lock=self._oracle_lock, critic_llm=self.critic_llm, scorer_llm=self.scorer_llm)

    def _optimize(self, cap: TargetCapture, captured: list[Path], store: Store, run_id: int, run_meter: Any = None) -> TargetResult:
        h = cap.handle
        if h.options.inplace and h.kind == "module":
            return TargetResult.skipped(cap.handle.id, "inplace=True is for functions that write into their tensor arguments, not nn.Modules", cap.callers)
        if h.kind == "module" and h.options.inputs is not None:
            return TargetResult.skipped(cap.handle.id, "inputs= is for plain functions; an nn.Module target is optimized on the calls its tests make", cap.callers)
        qualname = h.owner.__qualname__ if h.owner is not None else h.reference.__qualname__
        module_name = h.owner.__module__ if h.owner is not None else h.reference.__module__
        if "<locals>" in qualname or h.source_file is None:
            return TargetResult.skipped(cap.handle.id, "defined inside a function: a worker cannot import it", cap.callers)
        if self.settings.device_for(h.options.lang) == "cuda" and not _cuda_available():
            return TargetResult.skipped(cap.handle.id, "lang='cuda' needs a CUDA device, and this machine has none", cap.callers)
        if h.options.inputs is not None:
            captured = captured + [self._declared_inputs(cap)]
        if not captured:
            why = "no test called it and it has no inputs=" if not cap.calls else "no call could be captured (" + ", ".join(cap.skipped) + ")"
            return TargetResult.skipped(cap.handle.id, why, cap.callers)
        o = h.options
        info = TargetInfo(h.id, module_name, qualname, Path(h.source_file), h.kind, o.lang, o.atol, o.rtol, o.min_speedup, o.budget, o.inplace)
        self._say(f"{h.id}: {len(captured)} workload(s) from {len(cap.callers)} test(s)")
        result = search_target(info, captured, self.root, self.settings, self._search_context(store, run_id, run_meter))
        entry = _target_report(result, cap.handle.id, cap.callers, self.root, store)
        _write_kernel(result, entry, self.root)
        entry.kind = h.kind
        if h.kind == "module" and cap.module is not None and entry.best is not None:
            entry.module_state = module_state(cap.module)
            entry.eval_only = reads_training(cap.module) or None
        if entry.range_limited:
            entry.accept_range_limited = accepts_range_limited(h.id, o.accept_range_limited, self.settings.accept_range_limited)
        if entry.status == TargetStatus.FASTER:
            with self._oracle_lock:  # the re-run benchmarks time too
                self._verify(cap, entry)
                self._dispatch_overhead(cap, captured[0], entry)
        return entry

    def _dispatch_overhead(self, cap: TargetCapture, first: Path, entry: TargetResult) -> None:
        """What a call through the dispatcher costs user code besides the kernel, measured here on
        the captured inputs with a kernel that does nothing: the report states it beside the
        oracle's figure, the compiled call alone (a module's parameters and buffers, the
        signature and the plan come on top of that)."""
        if entry.best is None or entry.best.lang != "cpp" or entry.device not in (None, "cpu") or entry.measurement is None:
            return
        if cap.handle.kind == "module" and (cap.module is None or entry.eval_only and cap.module.training):
            return  # no instance, or one the kernel would not serve (its reference would run, and warn)
        values = tuple(torch.load(first, weights_only=True)["sets"][0])
        args = (cap.module, *values) if cap.handle.kind == "module" else values
        # the entry's fields as accept will write them: an absent pack is the lock's own default
        extra = {"outputs": entry.outputs or {}, "pack": entry.pack, "module_state": entry.module_state,
                 "eval_only": entry.eval_only}
        try:
            measured = dispatch_overhead_us(cap.handle, args, {k: v for k, v in extra.items() if v is not None})
        except Exception:  # noqa: BLE001 - a figure for the report: without it, the oracle's stays
            measured = None
        entry.measurement.dispatch_overhead_us = measured

    def _optimize_program(self, program: Any, store: Store, run_id: int, run_meter: Any = None) -> TargetResult:
        if program.id in self.recorder.targets:
            why = f"a marked Python target is also called {program.id}; rename [tool.maxcode.programs.{program.id}]"
            return TargetResult.skipped(program.id, why, [], kind="program")
        self._say(f"{program.id}: program {program.source}, test cases in {program.testcases}")
        result = search_program(program, self.root, self.settings, self._search_context(store, run_id, run_meter))
        entry = _target_report(result, program.id, [w["name"] for w in result.workloads], self.root, store)
        _write_kernel(result, entry, self.root)
        entry.kind = "program"
        if entry.range_limited:
            entry.accept_range_limited = accepts_range_limited(program.id, None, self.settings.accept_range_limited)
        # from_json: the row holds these keys only, as a program's reference always has
        entry.reference = ReferenceInfo.from_json({"program": True, "file": program.source.as_posix(),
                                                   "testcases": program.testcases.as_posix(),
                                                   "hash": sha256_text(result.state.reference_source)})
        if entry.status == TargetStatus.FASTER:
            with self._oracle_lock:
                self._verify_program(program, entry)
        return entry

    def _verify_program(self, program: Any, entry: TargetResult) -> None:
        """The written rewrite, compiled afresh, on every test case once more: what apply and the bot ship."""
        assert entry.best is not None  # only a target with a faster kernel is verified
        best = entry.best
        text = (self.root / best.source_path).read_text()
        self._say(f"{program.id}: re-running its test cases with {Path(best.source_path).name}")
        passed, summary = rerun_test_cases(program, self.root, text, self.settings.sandbox)
        tests = RerunResult(rerun=entry.tests.rerun, passed=passed, summary=summary)
        reason = entry.reason
        if not passed:
            reason = f"the program's test cases did not pass on a fresh build: {summary}"
        elif program.tests:
            self._say(f"{program.id}: re-running {' '.join(program.tests)} with the rewrite in a copy of the project")
            run = run_tests_with_file(self.root, program.source, text, list(program.tests), program.id, self.settings.sandbox)
            passed = run.passed
            tests = RerunResult(rerun=tests.rerun + list(program.tests), passed=passed, pytest=list(program.tests),
                             summary=f"{summary}; {' '.join(program.tests)}: {run.summary}")
            if not passed:
                reason = f"the project's tests failed with the rewrite in place: {run.summary}"
        verified = passed and not entry.weak_check
        if passed and entry.weak_check:
            reason = "weak check: the test cases could not tell a program that prints the expected output from a real one"
        entry.tests, entry.verified, entry.reason = tests, verified, reason
        entry.status = TargetStatus.VERIFIED if verified else TargetStatus.NOT_VERIFIED

    def _declared_inputs(self, cap: TargetCapture) -> Path:
        values = list(cap.handle.options.inputs())
        sig = signature(tuple(values))
        path = self.root / ".maxcode" / "inputs" / cap.handle.id / "declared.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"signature": sig, "sets": [values]}, path)
        return path

    def _verify(self, cap: TargetCapture, entry: TargetResult) -> None:
        """The user's tests (and benchmarks) re-run with the written kernel forced in."""
        assert entry.best is not None  # only a target with a faster kernel is verified
        best = entry.best
        self._say(f"{cap.handle.id}: re-running {len(cap.callers)} test(s) with {Path(best.source_path).name}")
        checked = verify(
            self.root, cap.handle.id, cap.callers, cap.benchmark_callers, self.root / best.source_path,
            best.lang, entry.device_or_default(), entry.outputs or {}, entry.returns, entry.pack,
            {"module_state": entry.module_state, "eval_only": entry.eval_only}, sandbox=self.settings.sandbox,
        )
        tests = checked["tests"]
        entry.tests = RerunResult(rerun=list(tests["rerun"]), passed=tests["passed"], summary=tests["summary"],
                               kernel_calls=tests.get("kernel_calls"))
        entry.benchmarks = [BenchmarkResult.from_json(b) for b in checked["benchmarks"]]
        entry.verified = bool(tests["passed"]) and not entry.weak_check
        entry.status = TargetStatus.VERIFIED if entry.verified else TargetStatus.NOT_VERIFIED
        if not tests["passed"]:
            entry.reason = f"the user's tests did not pass with it: {tests['summary']}"
        elif entry.weak_check:
            entry.reason = "weak check: the outputs could not tell a no-op kernel from a real one"


def _cuda_available() -> bool:
    return torch.cuda.is_available()


def _machine(device: str) -> dict[str, Any]:
    fp = machine_fingerprint(device if device != "cuda" or torch.cuda.is_available() else "cpu")
    return {k: fp[k] for k in ("host", "cpu", "cores", "torch", "device", "gpu") if k in fp}


def _target_report(result: SearchResult, target_id: str, rerun: list[str], root: Path, store: Store | None = None) -> TargetResult:
    """The report entry for one searched target (verification fills in the rest). It writes no
    file: building a report twice is harmless; :func:`_write_kernel` writes the kernel it names."""
    state = result.state
    entry = TargetResult.skipped(target_id, "", rerun)
    trajectory, failed = _trajectory_rows(result)
    entry.search = SearchSummary(
        strategy=result.strategy, policy=result.policy, llm=result.llm, observation=result.observation,
        critic=result.critic, stop_reason=result.stop_reason, llm_calls=result.llm_calls, tokens=result.tokens,
        cost_usd=round(result.cost_usd, 6), evaluations=len(state.trajectory),
        curves=curves_by_strategy(store.nodes(result.target.id)) if store is not None else {},
    )
    correct = [n.verdict for n in state.trajectory if n.verdict.correct]
    # the sandbox the candidates ran in (one oracle per target, so one value); a weak one is flagged everywhere
    entry.sandbox = next((n.verdict.sandbox for n in state.trajectory if n.verdict.sandbox), "")
    entry.elapsed_s = round(result.elapsed_s, 3)
    entry.trajectory = trajectory
    entry.candidates = CandidateCounts(len(state.trajectory), len(correct), sum(v.status == "faster" for v in correct), failed)
    entry.stop_reason, entry.device = result.stop_reason, result.device
    entry.arch = cuda_arch() if entry.device == "cuda" else platform.machine()
    entry.reference = ReferenceInfo.from_json({"module": result.target.module, "qualname": result.target.qualname,
                                               "file": str(result.target.source_file.resolve().relative_to(root.resolve()))})
    if result.error:
        entry.status, entry.reason = TargetStatus.FAILED, result.error
        return entry
    best = state.best
    if (best is None or not best.verdict.correct) and result.stop_reason.startswith("the model is unavailable"):
        entry.status, entry.reason = TargetStatus.FAILED, result.stop_reason  # the search never really ran
        return entry
    if best is None or not best.verdict.correct:
        entry.status, entry.reason = TargetStatus.NO_SPEEDUP, f"no candidate was correct ({result.stop_reason})"
        return entry
    _with_best(entry, result, best, root)
    return entry


def _trajectory_rows(result: SearchResult) -> tuple[list[Evaluation], dict[str, int]]:
    """One report row per evaluated node, and how many candidates failed, by status."""
    failed: dict[str, int] = {}
    rows = []
    for node in result.state.trajectory:
        p, v = node.proposal, node.verdict
        if not (v.correct and v.speedup is not None):
            failed[v.status] = failed.get(v.status, 0) + 1
        rows.append(Evaluation(
            index=node.index + 1, hash=v.hash, origin=p.origin, status=v.status, speedup=v.speedup,
            candidate_s=v.candidate_s, speedup_ci=v.speedup_ci, undecided=bool(v.diagnostics.get("undecided")),
            sandbox=v.sandbox, params=p.params, reasons=(v.reasons or [p.error or ""])[:2],
            resumed=bool(v.diagnostics.get("resumed")),
            node=node.id, parent=node.parent.index + 1 if node.parent is not None else None,
            depth=node.depth, step=node.step, reward=node.reward, strategy=result.strategy,
            critique=node.critique, critique_flags=list(node.critique_flags), samples=node.samples,
        ))
    # the report's one rule for "best" (a faster node, lowest own time), so the curve ends on the quoted number
    for row, (_, best) in zip(rows, best_so_far_curve(r.to_json() for r in rows)):
        row.best_so_far = best
    return rows, failed


def _kernel_path(root: Path, target_id: str, lang: str) -> Path:
    """Where a run keeps a target's best kernel: the report names it, verify, apply and the bot read it."""
    return root / ".maxcode" / "reports" / "kernels" / f"{target_id}{EXT[lang]}"


def _write_kernel(result: SearchResult, entry: TargetResult, root: Path) -> None:
    """The best kernel's source at the path its report entry names (none: the entry names no kernel).

    Kept apart from :func:`_target_report` so that building the report is pure: the optimize path
    writes the file once, before verification re-runs the tests with it."""
    best = result.state.best
    if entry.best is None or best is None or best.proposal.spec is None:
        return
    path = root / entry.best.source_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(best.proposal.spec.text)


def _with_best(entry: TargetResult, result: SearchResult, best: Node, root: Path) -> None:
    """The best correct node's numbers, kernel path and measurement, and the target's status from it."""
    p, v = best.proposal, best.verdict
    assert p.spec is not None  # a correct verdict was measured on code
    wl_diag = v.diagnostics.get("workloads", {})
    outputs = {key: w.get("outputs", []) for w in result.workloads for key in w["arg_keys"]}
    signatures = [w["layout"] for w in result.workloads]
    entry.workloads = [
        WorkloadResult(
            name=w["name"], signature=w["signature"], n_sets=w.get("n_sets", 0),
            speedup=wl_diag.get(w["name"], {}).get("speedup"), speedup_ci=wl_diag.get(w["name"], {}).get("speedup_ci"),
            reference_s=wl_diag.get(w["name"], {}).get("reference", {}).get("median_s"),
            candidate_s=wl_diag.get(w["name"], {}).get("candidate", {}).get("median_s"),
        )
        for w in result.workloads
    ]
    path = _kernel_path(root, entry.id, p.spec.lang)
    build = v.diagnostics.get("build") or {}  # the verified library's hash, for the lock
    entry.speedup, entry.speedup_ci, entry.weak_check = v.speedup, v.speedup_ci, v.weak_check
    entry.baseline_s, entry.best_s, entry.range_limited = v.reference_s, v.candidate_s, v.range_limited
    entry.best = BestKernel(str(path.relative_to(root)), v.hash, p.spec.lang, p.origin, dict(p.params),
                            build_id=build.get("build_id") or None, sha256=build.get("sha256") or None)
    entry.outputs, entry.signatures = outputs, signatures
    if result.target.inplace:
        entry.returns = next((w.get("returns") for w in result.workloads if w.get("returns")), "none")
    else:  # one way for every signature, else the reference's own per call ("other")
        packs = {w.get("pack") for w in result.workloads}
        entry.pack = packs.pop() if len(packs) == 1 else "other"
    entry.measurement = _measurement(v)
    if v.speedup is not None and v.speedup_ci:
        entry.remeasure = Remeasure(remeasure_command(entry.id), list(v.speedup_ci))
    if v.status == "faster":
        entry.status, entry.reason = TargetStatus.FASTER, v.reasons[0] if v.reasons else ""
    else:
        entry.status = TargetStatus.NO_SPEEDUP
        entry.reason = f"the best correct candidate is not faster: {v.reasons[0] if v.reasons else ''}"


def _measurement(v: Verdict) -> Measurement:
    """The best verdict's blocks and the machine's noise meanwhile, for every rendering of the report."""
    d = v.diagnostics
    blocks = [float(b["speedup"]) for b in d.get("blocks") or []
              if isinstance(b, dict) and b.get("speedup") is not None and b.get("used", True)]
    overhead = json_number(d.get("call_overhead_us"))
    # the timed call includes the call path: the kernel's own time is what is left of it
    call_us = v.candidate_s * 1e6 if v.candidate_s else None
    kernel_us = round(call_us - overhead, 3) if call_us and overhead is not None and call_us > overhead else None
    noise = d.get("noise") or {}
    note = noise_note(noise)
    threads = d.get("threads")
    return Measurement(
        blocks=blocks, spread=noise.get("spread"),
        set_aside=sum(int(n) for n in (d.get("disturbed_rounds") or {}).values() if isinstance(n, (int, float))),
        notes=([note] if note else []) + [str(n) for n in d.get("timing_notes") or []][:3],
        call_overhead_us=overhead, kernel_us=kernel_us,
        threads=int(threads) if isinstance(threads, int) and threads > 0 else None,
    )
