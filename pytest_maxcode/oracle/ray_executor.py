"""Checks on a Ray cluster: a pool of warm oracles for ``--maxcode-executor=ray``.

Why: one machine times one candidate at a time, so a search waits on its oracle; a
cluster with N GPUs can check N candidates at once. Each Ray actor holds a prepared
local :class:`~pytest_maxcode.oracle.check.Oracle` for the same reference and config:
the reference and its expected outputs are computed once per actor, and every candidate
is built, verified and timed there by the same code as locally, so its statistics and
verdict are those of ``--maxcode-executor=local``. The driver (this process) only
schedules, records verdicts in the store and reports progress.

Placement and fair timings:

- device ``cuda`` on a cluster with GPUs: one actor per GPU (``num_gpus=1``), so no two
  timings ever share a GPU;
- otherwise one actor per node (``num_cpus=1``, spread over the nodes), because a CPU
  timing needs the node's cores to itself. ``--maxcode-ray-actors=N`` sets another count:
  more actors per node check more at once, but then time in each other's noise. Other
  Ray work scheduled on the same node disturbs CPU timings as well.
- A batch's native candidates are built on the actors first (split among them), and only
  then checked, so builds do not overlap timings; each check finds its library in the
  build cache.
- With ``--maxcode-parallel-targets=T`` every target holds its own pool, so the default
  pool size is divided by T; their checks still take turns (the search's oracle lock).

Files: a candidate's source text travels with its call and is written on the actor's side
(under ``ROOT/.maxcode/ray/``) unless the same file is already there. The project root, the
reference module, captured workload inputs and the build cache are read by path. On a
single-node (local) cluster they are on the same filesystem. A multi-node cluster needs the
project root on a shared filesystem mounted at the same path on every node, with this
package and the compilers installed there too. Ray's ``runtime_env`` ``working_dir`` ships
a copy of the project to each node, but unpacks it under another path, so it serves only
where that copy is mounted back at the project's path.

Failures: an actor that hangs past the oracle's own limits plus a margin is killed (Ray
refuses ``ray.cancel(force=True)`` for actor tasks, so ``ray.kill`` is the hard cancel) and
replaced, and its candidate gets a ``timeout`` verdict; an actor that dies mid-check is
replaced and its candidate gets a ``crash`` verdict. Neither verdict goes to the store, as
both may be the cluster's fault: a later run checks such a candidate again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._extras import missing_message, require
from ..errors import MaxcodeError
from ..model.protocols import EvaluationStore
from ..model.verdict import Verdict, VerdictStatus
from .check import VALGRIND_SLOWDOWN, CandidateSpec, CheckConfig, Oracle, Workload, resolve_device
from .reference import ReferenceSpec

RAY_MISSING = missing_message("ray", "--maxcode-executor=ray")
#: seconds the pool's actors may take to be placed on the cluster (started, not yet prepared)
PLACEMENT_S = 120.0
#: seconds a zygote takes at most to start again after a crash (the oracle's own wait)
ZYGOTE_START_S = 120.0
_connect_lock = threading.Lock()


def import_ray() -> Any:
    return require("ray", "--maxcode-executor=ray")


def _probe(address: str, flag: str) -> None:
    """Fail fast on an unreachable HOST:PORT: ``ray.init`` itself retries for many minutes."""
    hostport = address.split("://", 1)[1] if "://" in address else address
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5.0).close()
    except OSError as e:
        raise MaxcodeError(f"{flag}: cannot reach a Ray cluster at {hostport} ({e.strerror or e})") from None


def connect(address: str | None) -> Any:
    """Attach this process to a Ray cluster once: ADDRESS, else ``RAY_ADDRESS``, else a local
    instance started here. An existing connection (e.g. a test's ``ray.init``) is kept."""
    ray = import_ray()
    given = address or os.environ.get("RAY_ADDRESS") or None
    flag = f"--maxcode-ray-address={given}" if address else f"--maxcode-ray-address (RAY_ADDRESS={given})"
    with _connect_lock:
        if given:
            _probe(given, flag)
        if ray.is_initialized():
            return ray
        kw: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
        if given in (None, "local"):
            kw["include_dashboard"] = False
        try:
            ray.init(address=given, **kw)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
            where = flag if given else "--maxcode-ray-address (unset: a local Ray instance)"
            raise MaxcodeError(f"{where}: cannot connect to Ray: {_one_line(e)}") from None
    return ray


def _one_line(e: BaseException) -> str:
    lines = [s.strip() for s in str(e).splitlines() if s.strip()]
    because = [s for s in lines if "because" in s]
    return (because or lines or [type(e).__name__])[0][:300]


def _physical_cores() -> int:
    """What torch picks without OMP_NUM_THREADS (cpuinfo's physical cores), from sysfs."""
    cores = set()
    for cpu in range(os.cpu_count() or 1):
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip()))
        except OSError:
            continue
    return len(cores) or os.cpu_count() or 1


def _shapes_only(w: Workload) -> Workload:
    """The driver needs outputs' shapes and dtypes; the values stay where they are compared."""
    return dataclasses.replace(w, expected=[[t.to("meta") if isinstance(t, torch.Tensor) else t for t in outs] for outs in w.expected])


class OracleActor:
    """Runs inside a Ray worker process: one prepared Oracle, one candidate at a time."""

    def __init__(self, omp_num_threads: str | None) -> None:
        # Ray sets OMP_NUM_THREADS to the actor's CPU share (1); the zygote and its
        # children must see the driver's setting, or OpenMP and torch time differently
        set_by_ray = os.environ.get("OMP_NUM_THREADS")
        if omp_num_threads is None:
            os.environ.pop("OMP_NUM_THREADS", None)
            threads = _physical_cores()
        else:
            os.environ["OMP_NUM_THREADS"] = omp_num_threads
            threads = int(omp_num_threads) if omp_num_threads.isdigit() else 0
        if set_by_ray != omp_num_threads and threads > 0:
            torch.set_num_threads(threads)  # this process runs the bandwidth probe
        self.oracle: Oracle | None = None
        self.root = Path()

    def ping(self) -> bool:
        return True

    def prepare(self, reference: ReferenceSpec, config: CheckConfig, root: Path, hint: list[CandidateSpec],
                workloads: list[dict[str, Any]] | None) -> dict[str, Any]:
        import ray  # the optional extra, present in every actor; deferred so the module loads without it (and start-up stays fast)

        self.root = root
        try:
            self.oracle = Oracle(reference, config, root, candidates_hint=hint, workloads=workloads)
            self.oracle.prepare()
        except MaxcodeError as e:
            if self.oracle is not None:
                self.oracle.close()
            return {"error": str(e)}
        return {
            "device": self.oracle.device,
            "workloads": [_shapes_only(w) for w in self.oracle.workloads],
            "inputs_path": str(self.oracle._inputs_path) if self.oracle._inputs_path else None,
            "pid": os.getpid(),
            "node": ray.util.get_node_ip_address(),
        }

    def _local(self, spec: CandidateSpec) -> CandidateSpec:
        """The candidate as a file on this node: its own path when it holds the same text."""
        p = spec.path
        try:
            if p.is_absolute() and p.is_file() and p.read_text(errors="replace") == spec.text:
                return spec
        except OSError:
            pass
        dest = self.root / ".maxcode" / "ray" / spec.hash[:16] / p.name
        if not dest.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
            tmp.write_text(spec.text)
            os.replace(tmp, dest)
        return dataclasses.replace(spec, path=dest)

    def build(self, specs: list[CandidateSpec]) -> int:
        assert self.oracle is not None
        natives = [self._local(s) for s in specs if s.format == "native"]
        return sum(r.ok for r in self.oracle._build(natives)) if natives else 0

    def check(self, spec: CandidateSpec) -> Verdict:
        assert self.oracle is not None
        return self.oracle.check([self._local(spec)])[0]

    def close(self) -> None:
        if self.oracle is not None:
            self.oracle.close()
            self.oracle = None


@dataclass
class Worker:
    """One actor of the pool, as the driver sees it."""

    actor: Any
    number: int
    pending: Any = None  # its prepare call, while it starts
    deadline: float = 0.0  # when that call is given up
    pid: int | None = None
    node: str = ""
    inputs_path: str | None = None


class RayOracle:
    """The :class:`Oracle` interface the search uses, served by a pool of Ray actors."""

    def __init__(
        self,
        reference: ReferenceSpec,
        config: CheckConfig,
        root: Path,
        *,
        store: EvaluationStore | None = None,
        run_id: int | None = None,
        progress: Callable[[str], None] | None = None,
        candidates_hint: Sequence[CandidateSpec] = (),
        workloads: Sequence[dict[str, Any]] | None = None,
        address: str | None = None,
        actors: int | None = None,
        targets_at_once: int = 1,
        margin_s: float = 30.0,
        deadline_s: float | None = None,
    ) -> None:
        """Parameters because it takes the local Oracle's arguments and the Ray pool's own (address,
        actors, targets at once, margin, deadline), all keyword-only: a caller switches
        executors without changing anything else."""
        self.reference = reference
        self.config = config
        self.root = Path(root).resolve()
        self.store = store
        self.run_id = run_id
        self.progress = progress or (lambda _msg: None)
        self.candidates_hint = list(candidates_hint)
        self.workload_specs = list(workloads) if workloads else None
        #: the device asked for (actors are placed for it); each actor settles it on its machine
        self.device = resolve_device(config.device, (c.lang for c in candidates_hint))
        self.eval_key = config.key()
        self.workloads: list[Workload] = []
        self.address = address
        self.actors = actors
        self.targets_at_once = max(1, targets_at_once)
        self.margin_s = margin_s
        #: the Ray-side limit on one check; default: the oracle's own limits plus the margin
        self.deadline_s = deadline_s
        self.workers: list[Worker] = []
        self._slowdown = VALGRIND_SLOWDOWN if config.timer == "instructions" else 1.0
        self._ray: Any = None
        self._actor_cls: Any = None
        self._options: dict[str, Any] = {}
        self._size = 0
        self._numbered = 0
        self._oracle_error: str | None = None

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> RayOracle:
        self.prepare()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_builds(self, candidates: Sequence[CandidateSpec]) -> None:
        """Nothing to start here: ``check`` builds a batch on the actors before timing it."""

    def _plan(self) -> tuple[int, dict[str, Any], str]:
        ray = self._ray
        total = ray.cluster_resources()
        gpus = int(total.get("GPU", 0))
        if self.device == "cuda" and gpus:
            size, cap = max(1, gpus // self.targets_at_once), gpus
            return min(self.actors or size, cap), {"num_gpus": 1, "num_cpus": 1}, "1 GPU"
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU")]
        size, cap = max(1, len(nodes) // self.targets_at_once), max(1, int(total.get("CPU", 1)))
        return min(self.actors or size, cap), {"num_cpus": 1, "num_gpus": 0, "scheduling_strategy": "SPREAD"}, "1 CPU"

    def _prepare_limit(self) -> float:
        c = self.config
        return ZYGOTE_START_S * self._slowdown + c.timeout * self._slowdown + 2 * c.build_timeout + self.margin_s

    def _check_limit(self, cand: CandidateSpec) -> float:
        if self.deadline_s is not None:
            return self.deadline_s
        c = self.config
        runs = 2 if c.timer == "time" else 1  # a "faster" is measured again
        run = c.timeout * self._slowdown + (c.build_timeout if cand.format == "compat" else 0.0)
        build = c.build_timeout if cand.format == "native" else 0.0
        return build + runs * run + ZYGOTE_START_S * self._slowdown + self.margin_s

    def _new_actor(self) -> Worker:
        self._numbered += 1
        actor = self._actor_cls.options(max_restarts=0, max_concurrency=1, **self._options).remote(os.environ.get("OMP_NUM_THREADS"))
        return Worker(actor, self._numbered)

    def _start(self, w: Worker, extra: float = 0.0) -> None:
        w.pending = w.actor.prepare.remote(self.reference, self.config, self.root, self.candidates_hint, self.workload_specs)
        w.deadline = time.monotonic() + extra + self._prepare_limit()

    def prepare(self) -> None:
        """Connect, place the actors, and prepare the reference on each of them at once."""
        self._ray = ray = connect(self.address)
        self._actor_cls = ray.remote(OracleActor)
        self._size, self._options, each = self._plan()
        self.progress(f"starting {self._size} Ray worker(s) ({each} each) for {self.reference.path.name}:{self.reference.name}")
        workers = [self._new_actor() for _ in range(self._size)]
        pings = {w.actor.ping.remote(): w for w in workers}
        placed, late = ray.wait(list(pings), num_returns=len(pings), timeout=PLACEMENT_S)
        for ref in late:
            self._kill(pings[ref])
        if not placed:
            raise MaxcodeError(
                f"--maxcode-executor=ray: no Ray worker ({each} each) could be placed within {PLACEMENT_S:.0f} s; "
                f"the cluster has {_resources(ray.cluster_resources())}, of which {_resources(ray.available_resources())} free"
            )
        self.workers = [pings[ref] for ref in placed]
        for w in self.workers:
            self._start(w)
        deaths: list[str] = []
        while any(w.pending is not None for w in self.workers):
            pending = {w.pending: w for w in self.workers if w.pending is not None}
            timeout = max(0.0, min(w.deadline for w in pending.values()) - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
            for ref in ready:
                why = self._started(pending[ref], ref)
                if why:
                    deaths.append(why)
            self._expire_starting(set(ready))
        if self._oracle_error or not self.workers:
            self.close()
            raise MaxcodeError(self._oracle_error or (deaths[0] if deaths else
                                                      "--maxcode-executor=ray: no Ray worker prepared the reference in time"))
        self._size = len(self.workers)  # what check() keeps up: the workers that could be placed
        nodes = sorted({w.node for w in self.workers})
        self.progress(f"{len(self.workers)} Ray worker(s) ready on {', '.join(nodes)} (device {self.device})")

    def _started(self, w: Worker, ref: Any) -> str | None:
        """Take a finished prepare call: the worker joins the pool, or is dropped and why."""
        w.pending = None
        try:
            info = self._ray.get(ref)
        except self._ray.exceptions.RayError as e:
            self._drop(w)
            return f"--maxcode-executor=ray: a Ray worker died while preparing the reference: {_one_line(e)}"
        if "error" in info:  # the reference itself: every worker would say the same
            self._drop(w)
            self._oracle_error = self._oracle_error or str(info["error"])
            return self._oracle_error
        if not self.workloads:
            self.device, self.workloads = info["device"], info["workloads"]
        w.pid, w.node, w.inputs_path = info["pid"], info["node"], info["inputs_path"]
        return None

    def _expire_starting(self, ready: set[Any]) -> None:
        now = time.monotonic()
        for w in list(self.workers):
            if w.pending is not None and w.pending not in ready and w.deadline <= now:
                self.progress(f"Ray worker {w.number} did not prepare the reference in time; dropped")
                self._drop(w)

    def _kill(self, w: Worker) -> None:
        try:
            self._ray.kill(w.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone: nothing left to stop
            pass
        if w.inputs_path:  # the killed oracle could not remove its inputs file
            Path(w.inputs_path).unlink(missing_ok=True)

    def _drop(self, w: Worker) -> None:
        self._kill(w)
        if w in self.workers:
            self.workers.remove(w)

    def _replace(self, w: Worker) -> None:
        """Kill a worker that hung or died, and start a fresh one in its place."""
        self._drop(w)
        fresh = self._new_actor()
        self._start(fresh, extra=PLACEMENT_S)
        self.workers.append(fresh)

    def close(self) -> None:
        workers, self.workers = self.workers, []
        if not workers:
            return
        calls = [w.actor.close.remote() for w in workers if w.pending is None]
        if calls:
            self._ray.wait(calls, num_returns=len(calls), timeout=30.0)
        for w in workers:
            self._kill(w)

    # -- checking ---------------------------------------------------------------------

    def check(self, candidates: Sequence[CandidateSpec]) -> list[Verdict]:
        """Fan the candidates out over the actors; verdicts come back in input order."""
        if not candidates:
            return []
        if self._ray is None:
            raise MaxcodeError("RayOracle.check before prepare()")
        for _ in range(self._size - len(self.workers)):  # workers lost in an earlier batch
            fresh = self._new_actor()
            self._start(fresh, extra=PLACEMENT_S)
            self.workers.append(fresh)
        self._build(candidates)
        ray = self._ray
        verdicts: list[Verdict | None] = [None] * len(candidates)
        queue = deque(range(len(candidates)))
        idle = [w for w in self.workers if w.pending is None]
        running: dict[Any, tuple[Worker, int, float, float]] = {}
        while queue or running:
            while queue and idle:
                w, i = idle.pop(0), queue.popleft()
                cand = candidates[i]
                self.progress(f"[{i + 1}/{len(candidates)}] checking {cand.path.name} on Ray worker {w.number} ({w.node})")
                start = time.monotonic()
                running[w.actor.check.remote(cand)] = (w, i, start, start + self._check_limit(cand))
            starting = {w.pending: w for w in self.workers if w.pending is not None}
            if not running and not starting:
                for i in queue:
                    verdicts[i] = self._failed(candidates[i], VerdictStatus.CRASH, "no Ray worker is left to check it: each one started died or could not prepare the reference")
                break
            deadlines = [d for *_, d in running.values()] + [w.deadline for w in starting.values()]
            timeout = max(0.0, min(deadlines) - time.monotonic())
            ready, _ = ray.wait([*running, *starting], num_returns=1, timeout=timeout)
            for ref in ready:
                if ref in starting:
                    if self._started(starting[ref], ref) is None:
                        idle.append(starting[ref])
                    continue
                w, i, start, _ = running.pop(ref)
                verdicts[i], healthy = self._collect(ref, candidates[i], w, start)
                if healthy:
                    idle.append(w)
                else:
                    self._replace(w)
            now = time.monotonic()
            for ref, (w, i, start, deadline) in list(running.items()):
                if deadline <= now:
                    del running[ref]
                    limit = deadline - start
                    v = self._failed(candidates[i], VerdictStatus.TIMEOUT, f"the Ray worker did not return within {limit:.0f} s (the Ray-side "
                                     "limit on one check); it was killed and replaced")
                    v.eval_s = round(now - start, 4)
                    verdicts[i] = v
                    self._replace(w)
            self._expire_starting(set(ready))
        assert all(v is not None for v in verdicts)
        return [v for v in verdicts if v is not None]

    def _build(self, candidates: Sequence[CandidateSpec]) -> None:
        """Build the batch's native candidates on the ready actors, before any timing starts."""
        ray = self._ray
        natives = [c for c in candidates if c.format == "native"]
        ready = [w for w in self.workers if w.pending is None]
        if not natives or not ready:
            return
        self.progress(f"building {len(natives)} native candidate(s) on {len(ready)} Ray worker(s)")
        calls = {w.actor.build.remote(natives[k :: len(ready)]): w for k, w in enumerate(ready) if natives[k :: len(ready)]}
        per = -(-len(natives) // len(ready))
        done, late = ray.wait(list(calls), num_returns=len(calls), timeout=per * self.config.build_timeout + self.margin_s)
        for ref in done:
            try:
                ray.get(ref)
            except ray.exceptions.RayError:
                self._replace(calls[ref])
        for ref in late:
            self._replace(calls[ref])

    def _collect(self, ref: Any, cand: CandidateSpec, w: Worker, start: float) -> tuple[Verdict, bool]:
        """A finished check: its verdict, and whether its worker is fit for the next one."""
        ray = self._ray
        try:
            v: Verdict = ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            v = self._failed(cand, VerdictStatus.CRASH, f"the oracle on Ray worker {w.number} failed: {_one_line(e)}")
        except ray.exceptions.RayError as e:
            v = self._failed(cand, VerdictStatus.CRASH, f"the Ray worker died while checking it ({_one_line(e)}); a fresh one took its place")
        else:
            v.candidate = str(cand.path)
            v.diagnostics["ray"] = {"node": w.node}
            self._record(cand, v)
            return v, True
        v.eval_s = round(time.monotonic() - start, 4)
        return v, False

    def _failed(self, cand: CandidateSpec, status: VerdictStatus, reason: str) -> Verdict:
        return Verdict(str(cand.path), status, reasons=[reason], hash=cand.hash, format=cand.format, lang=cand.lang,
                       diagnostics={"ray": {"executor_failure": True}})

    def _record(self, cand: CandidateSpec, v: Verdict) -> None:
        if self.store is None:
            return
        ref = self.reference
        self.store.upsert_target(ref.target_id, ref.kind, str(ref.path), ref.source_hash())
        self.store.add_candidate(cand.hash, cand.format, cand.lang, cand.text, origin=str(cand.path))
        self.store.record_evaluation(run_id=self.run_id, target_id=ref.target_id, config_key=self.eval_key, device=self.device,
                                     verdict=v.to_json())


def _resources(res: dict[str, float]) -> str:
    shown = {k: v for k, v in res.items() if k in ("CPU", "GPU")}
    return ", ".join(f"{v:g} {k}" for k, v in sorted(shown.items())) or "no CPU or GPU"
