"""The oracle's batch path: build candidates in parallel, then verify and time each one.

One ``Oracle`` holds a warm fork server for one reference; ``check`` takes any number
of candidates (the search's batch path) and returns one verdict per candidate, in order.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import shutil
import signal
import stat as stat_mod
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..errors import NO_CUDA_DEVICE, MaxcodeError
from ..model.candidate import CandidateSpec
from ..model.jsontypes import json_number
from ..model.protocols import EvaluationStore
from ..model.report import PACKS
from ..model.verdict import UNDECIDED_WIDTH, Verdict, VerdictStatus, undecided
from ..native import build as build_mod
from ..options import MIN_SPEEDUP
from ..sandbox import isolation as isolation_mod
from ..sandbox.isolation import Isolation, Limits, resolve
from . import load as load_mod
from . import drift, plausible, probe, scan, stats, timing
from .compare import compare, tolerances, weak_reasons
from .pool import (
    WORKER,
    ChildGone,
    Job,
    JobTimeout,
    WorkerFailed,
    WorkerSetupError,
    Zygote,
)
from .protocol import ProtocolError
from .reference import ReferenceSpec
from .remote import _maxcode_ranges as ranges
from .remote import _maxcode_shm as shm

GiB = 1 << 30
CALLGRIND_SHIM = build_mod.CALLGRIND_SHIM
#: bumped when the decision rule changes, so verdicts stored under the old rule are not reused;
#: 2: a timed "faster" is confirmed by a second measurement in a fresh worker
#: 3: timed by the trusted side over shared memory, every timed output checked, fresh inputs
#: 4: range sets; a "faster" is judged on several blocks (fresh processes) spread over the run
#: 5: a block timed while other work held the CPU for most of its rounds is retaken, not used
#: 6: blocks timed on a loaded machine quote an interval wide enough for the next run
#: 7: a machine is loaded by its CPU pressure during the timing, where the kernel reports it
#: 8: each side's inputs are written, and its outputs poisoned, from the servers' core
#: 9: blocks timed on a quiet machine also allow for the drift between runs (stats.QUIET_RUN_SPREAD)
#: 10: that drift is taken at 0.1, not 0.04 (a quiet Intel VM's runs differed by more)
#: 11: on a GPU the drift between quiet runs is taken at 0.05 (stats.GPU_RUN_SPREAD), and long
#:     rounds no longer make a block busy
VERDICT_RULE = 11
#: time limits stretch by this much when the worker runs under valgrind
VALGRIND_SLOWDOWN = 50.0
#: two measurements (blocks, or a program's confirmation) whose speedups lie this factor apart disagree
DISAGREE = 1.5
#: a block in which other work held the CPU during this share of the timed rounds (or so long
#: that too few undisturbed rounds could be had) measured the machine's load, not the kernel:
#: it is retaken, at most MAX_RETAKES times per candidate, and used only if no better one came
BUSY_BLOCK = 0.5
MAX_RETAKES = 2
#: blocks in which other work disturbed this share of the timed rounds (on average) were timed
#: on a loaded machine, where whole runs differ more than the blocks of one run do
#: (:data:`stats.LOADED_RUN_SPREAD`). A quiet 2-core VM disturbs 0 to 2 rounds of 32 (at most
#: 0.06); beside a CPU hog 0.09 to 0.36
LOADED_SHARE = 0.08
#: blocks timed while some runnable task waited for a CPU during this share of the time (PSI,
#: :mod:`.load`; on average) were timed on a loaded machine. Where the kernel reports it, it
#: decides instead of LOADED_SHARE: beside a CPU hog most rounds are not preempted (the server
#: wakes ahead of the hog), and CI runs whose blocks saw 0 to 12% of rounds disturbed still
#: measured 2.0x and 2.9x. On the quiet 2-core VM the timing saw 0.10 to 0.12; beside one
#: spinning process 0.45 to 0.51; beside two 0.69 to 0.76
LOADED_PRESSURE = 0.3
#: after each correctness call the worker waits at least this long (longer for a slow call) and
#: compares the outputs with the copy taken on return: work left running on another thread shows
SETTLE_S = 0.005
#: under ``--timer instructions``: the rounds of callgrind counts, alternating reference and candidate
INSTRUCTION_ROUNDS = 9


def resolve_device(requested: str | None, langs: Iterable[str] = (), *,
                   cuda_available: Callable[[], bool] | None = None) -> str:
    """Where candidates run: the one place the oracle decides it, asked at two moments.

    Without ``cuda_available`` (an oracle's construction, the Ray driver, which may have no GPU
    while its actors do): the device asked for, ``requested`` or else CUDA when a candidate is
    CUDA, else the CPU; the sandbox and the actors are sized for it. With it (the machine that
    runs the candidates, once its worker is launched): CUDA asked explicitly but absent is
    :data:`NO_CUDA_DEVICE`; CUDA only implied by a CUDA candidate falls back to the CPU, where
    CUDA candidates are still compiled and reported as such. ``cuda_available`` is called only
    when CUDA is wanted, so a CPU run never queries the driver."""
    device = requested or ("cuda" if "cuda" in set(langs) else "cpu")
    if device != "cuda" or cuda_available is None or cuda_available():
        return device
    if requested == "cuda":
        raise MaxcodeError(NO_CUDA_DEVICE)
    return "cpu"


@dataclass
class CheckConfig:
    device: str | None = None
    atol: float | None = None
    rtol: float | None = None
    min_speedup: float = MIN_SPEEDUP
    timeout: float = 60.0
    build_timeout: float = 300.0
    max_memory: int | None = 4 * GiB
    #: seed of the generated input sets and the model's initialisation; None: a random one per
    #: oracle, recorded in every verdict (``--seed`` reproduces it)
    seed: int | None = None
    n_seeds: int = 3
    time_budget: float = 0.5
    min_rounds: int = 15
    max_rounds: int = 20000
    timer: str = "time"
    cxxflags: list[str] | None = None
    nvccflags: list[str] | None = None
    jobs: int | None = None
    inplace: bool = False
    #: the OS sandbox for everything that runs candidate code: auto, bwrap, unshare or none
    sandbox: str = "auto"
    #: also try range-widened and special-value input sets (a kernel right only on the
    #: captured range is flagged ``range_limited``)
    ranges: bool = True
    #: a "faster" screening is measured in this many independent blocks in all (fresh
    #: processes and buffers); the verdict's interval is built on them
    blocks: int = 3
    #: what a candidate's job folder may hold, all its files together (each file is capped
    #: at 2 GiB by itself): a candidate that writes more is killed and rejected; the compilers
    #: of one batch are held to the same total
    max_job_bytes: int = 2 * GiB
    #: the drift between whole quiet runs that a blocks' interval allows for (sd of the log
    #: speedup); None: the default for the device, or more where this machine's own repeats
    #: showed more (:mod:`oracle.drift`, settled by the oracle)
    run_spread: float | None = None

    def key(self) -> str:
        """What changes a verdict: evaluations under another key are not reused."""
        parts: dict[str, Any] = {k: getattr(self, k) for k in ("device", "atol", "rtol", "min_speedup", "n_seeds", "timer", "cxxflags", "nvccflags", "inplace", "ranges", "blocks")}
        if self.seed is not None:  # a chosen seed is a different experiment; random ones are interchangeable
            parts["seed"] = self.seed
        if self.run_spread is not None:  # wider intervals than the default rule's
            parts["run_spread"] = self.run_spread
        parts["rule"] = VERDICT_RULE
        # a verdict taken in a weaker sandbox is not reused by a stronger one: where auto fell back
        # (no bubblewrap on this runner), what a candidate wrote into the store or the cache then
        # must not be read by a later run that has it
        kind = isolation_mod.resolve("auto").kind if self.sandbox == "auto" else self.sandbox
        if kind != isolation_mod.STRONGEST_FIRST[0]:
            parts["sandbox"] = kind
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Workload:
    """One input signature: its expected outputs per input set (held by the parent only)."""

    name: str
    expected: list[list[Any]]
    in_bytes: int
    weak: list[str] = field(default_factory=list)
    returns: str | None = None  # in-place targets: "none" or "argN"
    pack: str | None = None  # other targets: "bare", "tuple", "list" or "other" (see PACKS)
    flops: int = 0  # per reference call, as torch's flop counter sees it (0: elementwise only)
    #: the call's layout in shared memory: one input set's tensor facts and the outputs' (shape, dtype)
    in_meta: list[Any] = field(default_factory=list)
    out_meta: list[Any] = field(default_factory=list)
    #: timed rounds draw fresh inputs (the reference accepted every generated set), else the pool
    fresh: bool = True
    #: the reference's outputs on the range sets it accepts, by label (``_maxcode_ranges``)
    range_expected: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def out_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.expected[0])

    def bytes_per_call(self) -> int:
        return self.in_bytes + self.out_bytes


#: an oracle's scratch folder (its inputs, the workers' job folders) is named for its process
SCRATCH_PREFIX = "maxcode-oracle-"
#: how long a dead process's scratch folder must have been left alone before it is swept
SCRATCH_IDLE_S = 600.0


def sweep_scratch(tmp: Path, now: float | None = None) -> list[Path]:
    """Remove the scratch folders of oracles whose process is gone (a run killed with SIGKILL
    cannot remove its own: 82 of them, 187 MB, had piled up on a test machine), once nothing
    has touched them for :data:`SCRATCH_IDLE_S` (a /tmp shared with another PID namespace holds
    live runs whose pid means nothing here); what was removed."""
    now = time.time() if now is None else now
    removed = []
    for folder in tmp.glob(f"{SCRATCH_PREFIX}*-*"):
        pid = folder.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or folder.is_symlink() or not folder.is_dir():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or someone else's: not ours to judge)
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            st = folder.stat()
            idle = now - max([st.st_mtime, *(p.stat().st_mtime for p in folder.iterdir())])
        except OSError:
            continue
        if idle >= SCRATCH_IDLE_S and st.st_uid == os.getuid():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class Oracle:
    """Verifies and times candidates against one reference, with a warm worker."""

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
    ) -> None:
        """Parameters because an oracle is one reference under one configuration, joined by what a caller
        already has: the store and run to record into, a progress callback, the candidates to
        build early, the captured workloads; each optional and keyword-only."""
        self.reference = reference
        self.root = Path(root).resolve()  # the sandbox mounts by absolute path
        self.cache_dir = self.root / ".maxcode" / "build"
        self.store = store
        self.run_id = run_id
        self.progress = progress or (lambda _msg: None)
        #: the candidates' languages, which decide the device when the config does not
        self._langs = frozenset(c.lang for c in candidates_hint)
        #: the device asked for; :meth:`_start_workers` settles it on this machine
        self.device = resolve_device(config.device, self._langs)
        if config.run_spread is None and (seen := drift.run_spread(probe.cache_dir(), self.device)) is not None:
            config = replace(config, run_spread=seen)  # this machine's repeats drifted more than the default
        self.config = config
        #: candidates run here; the reference (its inputs, expected outputs, timed calls) runs in
        #: a sandbox of its own, which no candidate can see, signal or slow
        self.zygote: Zygote | None = None
        self.ref_zygote: Zygote | None = None
        self._ref_server: Job | None = None
        self.workload_specs = list(workloads) if workloads else None
        #: evaluations under the same key are interchangeable (the loop resumes from them)
        self.eval_key = config.key()
        self.workloads: list[Workload] = []
        self._bandwidth: float | None = None
        self._flops: float | None = None
        #: the machine's answer to Inductor's vector-instruction probe, once asked (probe.vector_isa_ok)
        self._vec_isa: tuple[bool | None] | None = None
        self._slowdown = 1.0
        self._cg_dir: Path | None = None
        self._inputs_path: Path | None = None
        #: under --timer instructions, the wall-clock oracle that cross-checks a "faster" count
        self._wall: Oracle | None = None
        if config.timer == "instructions":
            self._check_instruction_timer(candidates_hint)
            self._slowdown = VALGRIND_SLOWDOWN
        self._builds: tuple[list[CandidateSpec], Future] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="maxcode-build")
        #: this oracle's seed: inputs, model initialisation; random unless given, always recorded
        self.seed = config.seed if config.seed is not None else secrets.randbelow(2**31 - 1)
        #: the timer's core and the servers' (see timing.Cores)
        self.cores = timing.Cores.split()
        #: threads each side may use while timed: all cores but the timer's
        self.threads = max(1, len(self.cores.servers))
        self.isolation = resolve(config.sandbox)
        self._worker_limits = self._sandbox_limits()
        warning = sandbox_warning(self.isolation)
        if warning:
            print(f"maxcode: warning: {warning}", file=sys.stderr)
        #: this oracle's scratch: the worker's writable job folder, and read-only copies it loads
        self.scratch: Path | None = None
        self._compat_stage: Path | None = None

    def _sandbox_limits(self) -> Limits:
        """The worker's limits; memory through RLIMIT_AS only where that cannot break the worker."""
        c = self.config
        pids = max(256, 8 * (os.cpu_count() or 1))  # threads count: torch starts one per core
        memory = None if c.max_memory is None else int(c.max_memory) + 2 * GiB  # + torch, the inputs, the reference
        by_rlimit = self.isolation.kind == "none" or not any(c == "memory" for c, _ in isolation_mod._cgroup_roots())
        if memory is not None and by_rlimit and (self.device == "cuda" or c.timer == "instructions"):
            # CUDA and valgrind reserve far more address space than they use: RLIMIT_AS would break them
            memory = None
            missing = [m for m in self.isolation.missing if "RLIMIT_AS" not in m]
            missing.append("no writable memory cgroup: memory is limited per candidate by RLIMIT_DATA only "
                           "(CUDA and valgrind reserve more address space than RLIMIT_AS allows)")
            self.isolation = replace(self.isolation, missing=tuple(missing))
        return Limits(memory=memory, pids=pids, file_size=2 * GiB, job_bytes=c.max_job_bytes, freezable=True)

    def _check_instruction_timer(self, candidates: Sequence[CandidateSpec]) -> None:
        if shutil.which("valgrind") is None:
            raise MaxcodeError("--timer instructions needs valgrind on the PATH (e.g. apt-get install valgrind)")
        if self.device != "cpu":
            raise MaxcodeError("--timer instructions counts CPU instructions; use it with --device cpu")
        others = [c.path.name for c in candidates if c.lang != "cpp"]
        if others:
            raise MaxcodeError(
                f"--timer instructions measures native C++ candidates only; {others[0]} needs --timer time"
            )

    def _callgrind_wrapper(self, out_dir: Path) -> list[str]:
        return [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--collect-atstart=no",
            "--dump-instr=no",
            "--dump-line=no",
            f"--callgrind-out-file={out_dir}/cg.%p",
            f"--log-file={out_dir}/valgrind.%p.log",
        ]

    def start_builds(self, candidates: Sequence[CandidateSpec]) -> None:
        """Build the native candidates in the background, e.g. while ``prepare`` runs."""
        natives = [c for c in candidates if c.format == "native"]
        if natives:
            self._builds = (natives, self._executor.submit(self._build, natives))

    def _build(self, natives: list[CandidateSpec]) -> list[build_mod.BuildResult]:
        return build_mod.build_all(
            [build_mod.Source(c.path, c.lang, c.text) for c in natives],
            self.cache_dir,
            cxxflags=self._cxxflags(),
            nvccflags=self.config.nvccflags,
            timeout=self.config.build_timeout,
            jobs=self.config.jobs,
            isolation=self.isolation,
            max_bytes=self.config.max_job_bytes,
        )

    def _cxxflags(self) -> list[str] | None:
        if self.config.cxxflags is None and self.config.timer == "instructions":
            return list(build_mod.VALGRIND_CXXFLAGS)
        return self.config.cxxflags

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> Oracle:
        self.prepare()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._wall is not None:
            self._wall.close()
            self._wall = None
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._stop_reference_server()
        for z in (self.zygote, self.ref_zygote):
            if z is not None:
                z.close()
        self.zygote = self.ref_zygote = None
        self._inputs_path = None
        self._cg_dir = None
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def _limits(self) -> dict[str, Any]:
        c = self.config
        return {
            "device": self.device,
            "model_seed": self.seed,
            "max_memory": c.max_memory,
            "cpu_seconds": int((c.timeout * self._slowdown + c.build_timeout) * (os.cpu_count() or 1)) + 10,
            "max_file_bytes": 2 * GiB,
            "inplace": c.inplace,
        }

    def prepare(self) -> None:
        """Start the workers, generate the seeded input sets and the expected outputs, in the
        order the trust boundary depends on: the two sandboxed workers and their timer
        (:meth:`_start_workers`), the input sets written where candidates cannot rewrite them,
        the reference's expected outputs (:meth:`_workload`)."""
        self.progress(f"loading reference {self.reference.path.name}:{self.reference.name}")
        sweep_scratch(Path(tempfile.gettempdir()))
        scratch = self.scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
        job_dir = scratch / "job"
        job_dir.mkdir()
        ref_dir = scratch / "reference"
        ref_dir.mkdir()
        self._start_workers(scratch, job_dir, ref_dir)
        seeds = [self.seed + 1 + i for i in range(max(2, self.config.n_seeds))]
        specs = self.workload_specs or [{"name": "default"}]
        # every workload: its captured sets (if any), then seeded random ones; written in the
        # worker's job folder, then moved where candidates cannot rewrite them
        ref_zygote = self.ref_zygote or self.zygote
        assert ref_zygote is not None
        written_dir = ref_dir if self.ref_zygote is not None else job_dir
        written, expected_path = written_dir / "inputs.pt", written_dir / "expected.pt"
        inputs_path = scratch / "inputs.pt"
        job = dict(
            self._limits(),
            kind="reference",
            workloads=[dict(w, seeds=seeds) for w in specs],
            ranges=self.config.ranges,
            range_seed=self.seed,
            inputs_out=str(written),
            expected_out=str(expected_path),
        )
        # the inputs file stays until close(), so a replaced zygote can load it again
        self._inputs_path = inputs_path
        try:
            self._run_reference(ref_zygote, job)
            os.replace(written, inputs_path)
            pools = {w["name"]: w["sets"] for w in torch.load(inputs_path, weights_only=True)}
            for w in torch.load(expected_path, weights_only=True):
                self.workloads.append(self._workload(w, pools[w["name"]][0]))
        finally:
            expected_path.unlink(missing_ok=True)
        for z in (self.zygote, self.ref_zygote):
            if z is not None:
                z.load_inputs(str(inputs_path))

    def _workload(self, w: dict[str, Any], first_set: list[Any]) -> Workload:
        """One workload from the reference job's record: its expected outputs, and what makes
        its check weak (outputs that cannot tell a no-op, inputs the reference rejected)."""
        returns = w.get("returns")
        wl = Workload(w["name"], w["expected"], int(w["in_bytes"]), returns=returns and returns.split(":")[0],
                      pack=w.get("pack") if w.get("pack") in PACKS else None, flops=int(w.get("flops") or 0))
        wl.weak = weak_reasons(wl.expected, self.config.atol, self.config.rtol)
        if returns and returns.endswith(":unchanged"):
            wl.weak.append("the in-place reference left its arguments unchanged on the first input set")
        rejected, generated = int(w.get("rejected") or 0), int(w.get("generated") or 0)
        wl.in_meta = shm.tensor_meta(first_set)
        wl.out_meta = [] if self.config.inplace else [(list(t.shape), str(t.dtype).replace("torch.", "")) for t in wl.expected[0]]
        wl.fresh = rejected == 0
        wl.range_expected = dict(w.get("range_expected") or [])
        if rejected and rejected == generated:
            wl.weak.append("the reference rejected every generated input set: only the captured ones check candidates")
        elif rejected:
            self.progress(f"{w['name']}: the reference rejected {rejected} of {generated} generated input set(s); checking on the rest")
        if rejected:
            # no fresh values for the timed calls: they reuse sets the candidate has already been handed
            wl.weak.append(f"the timed calls reuse {len(wl.expected)} known input set(s) (the reference rejects some generated "
                           "ones): a kernel that caches its outputs by input would look fast")
        return wl

    def _start_workers(self, scratch: Path, job_dir: Path, ref_dir: Path) -> None:
        """The candidates' sandboxed worker and the reference's, with what each may read, the
        timer's set-up, and their environment; started, and waited for."""
        ref = self.reference.to_worker()
        readable = [self.root, scratch, Path(sys.prefix), WORKER.parents[2], *map(Path, sys.path[1:])]
        readable += [Path(p).parent for p in (ref["path"], ref["instance"], ref["inputs_path"]) if p]
        readable += [Path(ref["rootdir"])] if ref["rootdir"] else []
        devices = sorted(Path("/dev").glob("nvidia*")) if self.device == "cuda" else []
        mounts = []
        if self.isolation.kind == "bwrap":
            # compat builds: the worker sees its staging folder at the cache's path (torch's build
            # files name that path, so a build cached by an earlier run is up to date); the shared
            # cache itself stays read-only, and only this process copies into it
            (self.cache_dir / "compat").mkdir(parents=True, exist_ok=True)
            (job_dir / "compat").mkdir()
            mounts = [(job_dir / "compat", self.cache_dir / "compat")]
            self._compat_stage = job_dir / "compat"
        self.zygote = Zygote(ref, cwd=self.root, isolation=self.isolation, job_dir=job_dir, readable=readable,
                             devices=devices, limits=self._worker_limits, mounts=mounts, clear_between_jobs=True)
        self.ref_zygote = Zygote(ref, cwd=self.root, isolation=self.isolation, job_dir=ref_dir, readable=readable,
                                 devices=devices, limits=replace(self._worker_limits, freezable=False))
        self._timer_job: dict[str, Any] = {"timer": self.config.timer}
        if self.config.timer == "instructions":
            self._under_callgrind(self.zygote, job_dir)
        # one core stays free for the trusted timer: a server whose threads had to share it
        # would wait a time slice for the timer (or the timer for it) inside the measurement
        threads = str(self.threads)
        for z in (self.zygote, self.ref_zygote):
            # fixed allocator thresholds: glibc's adaptive ones depend on each process's history,
            # and a server whose large tensors come from fresh mmaps pays page faults on every call
            # torch.compile compiles in-process: on a machine with many cores inductor would start
            # a pool of compile workers, and a candidate that leaves processes behind is rejected
            z.env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, MAXCODE_SERVER_CPUS=self.cores.spec,
                         MALLOC_MMAP_THRESHOLD_=str(32 << 20), MALLOC_TRIM_THRESHOLD_=str(1 << 30),
                         TORCHINDUCTOR_COMPILE_THREADS="1")
        self.zygote.launch()  # its torch import overlaps with ours
        if self.config.timer == "time":
            self.ref_zygote.launch()
        else:
            self.ref_zygote = None  # instruction counts are taken in the candidate's worker (not yet split)
        try:
            self.device = resolve_device(self.config.device, self._langs, cuda_available=torch.cuda.is_available)
        except MaxcodeError:
            self.close()
            raise
        try:
            for z in (self.zygote, self.ref_zygote):
                if z is not None:
                    z.wait_ready(timeout=120.0 * self._slowdown)
        except WorkerSetupError as e:
            raise MaxcodeError(f"reference {self.reference.path.name}: cannot be loaded: {e}") from None

    def _under_callgrind(self, zygote: Zygote, job_dir: Path) -> None:
        """``--timer instructions``: the candidates' worker runs under valgrind, with the shim
        that switches counting on around the measured calls only."""
        cg_dir = self._cg_dir = job_dir / "callgrind"
        cg_dir.mkdir()
        shim = build_mod.build_all(
            [build_mod.Source(CALLGRIND_SHIM, "cpp")], self.cache_dir, cxxflags=["-O2"], timeout=self.config.build_timeout
        )[0]
        if not shim.ok:
            raise MaxcodeError(f"--timer instructions: cannot build the callgrind shim: {' '.join(shim.errors)[:300]}")
        zygote.wrapper = self._callgrind_wrapper(cg_dir)
        # one thread: a waiting thread's spin loop would otherwise count as work
        zygote.env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
        self._timer_job.update(callgrind_shim=str(build_mod.verified_library(shim)), callgrind_dir=str(cg_dir))
        self.progress("starting the worker under valgrind (uninstrumented until the first measured call; importing torch there takes 20 s or more)")

    def _run_reference(self, zygote: Zygote, job: dict[str, Any]) -> None:
        child = zygote.spawn(job, timeout=self.config.timeout * self._slowdown + self.config.build_timeout, max_message=1 << 20)
        why = ""
        try:
            child.expect("reference")
        except JobTimeout:
            child.kill()
            raise MaxcodeError(f"reference {self.reference.path.name}: did not finish within {self.config.timeout:.0f} s") from None
        except WorkerFailed as e:
            why = str(e)
        except (ChildGone, ProtocolError):
            why = f"the worker exited ({child.exit_code})"
        finally:
            child.finish()
        if why:
            raise MaxcodeError(f"reference {self.reference.path.name}: failed: {why}")

    def _reference_server(self) -> Job:
        """The reference's serving process (one per oracle, replaced if it died)."""
        assert self.ref_zygote is not None
        if self._ref_server is not None and self._ref_server.exit_code is None and self.ref_zygote.alive:
            return self._ref_server
        self._stop_reference_server()
        job = dict(self._limits(), kind="serve_reference")
        server = self.ref_zygote.spawn(job, timeout=self.config.timeout, max_message=1 << 20)
        server.expect("serving")
        self._ref_server = server
        return server

    def _stop_reference_server(self) -> None:
        server, self._ref_server = self._ref_server, None
        if server is None or server.exit_code is not None:
            return
        try:
            server.send("finish")
        except (OSError, ChildGone):  # a reference server that died is reaped below, not judged
            pass
        server.finish()

    # -- checking ---------------------------------------------------------------------

    def check(self, candidates: Sequence[CandidateSpec]) -> list[Verdict]:
        natives = [c for c in candidates if c.format == "native"]
        builds: dict[int, build_mod.BuildResult] = {}
        if natives:
            self.progress(f"building {len(natives)} native candidate(s)")
            if self._builds is not None and self._builds[0] == natives:
                results = self._builds[1].result()
            else:
                results = self._build(natives)
            self._builds = None
            builds = {id(c): r for c, r in zip(natives, results)}
        verdicts = []
        for i, cand in enumerate(candidates, 1):
            self.progress(f"[{i}/{len(candidates)}] checking {cand.path.name}")
            try:
                v = self._evaluate(cand, builds.get(id(cand)))
            except WorkerSetupError as e:  # replaced once already (Zygote.spawn): the machine, not a candidate
                raise MaxcodeError(f"checking {cand.path.name}: a worker could not be started again ({e}); "
                                   f"the {len(verdicts)} verdict(s) before it are kept") from None
            _note_host_copy(v)
            self._record(cand, v)
            verdicts.append(v)
        return verdicts

    def _blocks(self, cand: CandidateSpec, built: build_mod.BuildResult | None, first: Verdict) -> Verdict:
        """The further blocks of a screening that needs them, each in a fresh candidate
        process with a fresh reference process and fresh buffers; the verdict is built on all
        of them (:func:`combined_blocks`). A block that other work kept off the CPU
        (:data:`BUSY_BLOCK`) is retaken, up to :data:`MAX_RETAKES` more blocks."""
        blocks = [first]
        wanted = self.config.blocks
        while sum(not busy(b) for b in blocks) < wanted and len(blocks) < wanted + MAX_RETAKES:
            n = len(blocks) + 1
            self.progress(f"block {n}/{wanted} of {cand.path.name}" if n <= wanted
                          else f"block {n} of {cand.path.name} (retaking one that other work kept off the CPU)")
            again = second_measurement(first)
            # a later block times for half the budget (the three together cost what a screening
            # and one confirmation did) and skips the range sets, which the screening ran
            self._run(cand, built, again, later_block=True)
            blocks.append(again)
            if not again.correct or not again.speedup_ci:
                break
        return combined_blocks(blocks, self.config.min_speedup, device=self.device, wanted=wanted,
                               learned_spread=self.config.run_spread)

    def _needs_blocks(self, v: Verdict) -> bool:
        """A timed screening that is "faster", or too noisy to decide, is measured in further
        blocks: its speedup is the one a search ranks, a report quotes and a pull request claims.
        One that is decided "not faster" keeps its one block: more would not change what is done
        with it, and most candidates of a search are such."""
        c = self.config
        if c.timer != "time" or c.blocks < 2 or not v.correct or not v.speedup_ci:
            return False
        return v.status == VerdictStatus.FASTER or bool(v.diagnostics.get("undecided"))

    def _record(self, cand: CandidateSpec, v: Verdict) -> None:
        if self.store is None:
            return
        ref = self.reference
        self.store.upsert_target(ref.target_id, ref.kind, str(ref.path), ref.source_hash())
        self.store.add_candidate(cand.hash, cand.format, cand.lang, cand.text, origin=str(cand.path))
        self.store.record_evaluation(
            run_id=self.run_id,
            target_id=ref.target_id,
            config_key=self.eval_key,
            device=self.device,
            verdict=v.to_json(),
        )

    def _evaluate(self, cand: CandidateSpec, built: build_mod.BuildResult | None) -> Verdict:
        v = Verdict(str(cand.path), VerdictStatus.RUNTIME_ERROR, hash=cand.hash, format=cand.format, lang=cand.lang,
                    sandbox=self.isolation.describe())
        v.diagnostics["seed"] = self.seed
        v.diagnostics["threads"] = self.threads
        weak = [r for w in self.workloads for r in w.weak]
        if weak:
            v.weak_check = True
        if built is not None:
            v.compile_s = round(built.compile_s, 4)
            v.diagnostics["build"] = {"cached": built.cached, "command": " ".join(built.command), "sha256": built.sha256,
                                      "build_id": build_mod.build_id(built)}
            if built.integrity:
                v.diagnostics["build"]["integrity"] = built.integrity
            if not built.ok:
                v.status = VerdictStatus.COMPILE_ERROR
                v.reasons = built.errors or ["the build failed"]
                return v
        if cand.lang == "cuda" and self.device != "cuda":
            v.reasons = ["compiled, but a CUDA candidate cannot run without a CUDA device; check it with --device cuda on a GPU machine"]
            return v
        if cand.lang == "cpp" and self.device == "cuda":
            v.reasons = ["a .cpp candidate runs on the CPU; check it with --device cpu"]
            return v
        if self.config.timer == "instructions" and built is not None and built.library is not None:
            try:
                findings = scan.client_request_findings(build_mod.verified_library(built))
            except build_mod.IntegrityError as e:
                findings = [str(e)]
            if findings:
                return scan_rejected(v, findings, "--timer instructions")
        self._run(cand, built, v)
        if v.status == VerdictStatus.FASTER and self.config.timer == "instructions":
            v = self._cross_check_wall(cand, v)
        elif self._needs_blocks(v):
            v = self._blocks(cand, built, v)
        if weak:
            v.reasons += [f"weak check: {r}" for r in weak]
        return v

    def _cross_check_wall(self, cand: CandidateSpec, v: Verdict) -> Verdict:
        """An instruction-count "faster" stands only if the trusted wall clock does not contradict it.

        The counts come from inside the candidate's worker, under valgrind, where a candidate
        could stop the counting around its own work or forge what its worker reports; the wall
        clock is on the trusted side. A "faster" whose wall interval lies wholly below the bar
        is "not_faster"; one whose counts are further from the wall speedup than instructions
        per cycle explain is rejected. The same build (same flags, same seed, so the same inputs)
        is timed by a wall-clock oracle that this one starts once and keeps;
        :func:`plausible.instructions_vs_wall` says how far apart the two may honestly be.
        """
        if self._wall is None:
            config = replace(self.config, timer="time", seed=self.seed, cxxflags=self._cxxflags())
            self._wall = Oracle(self.reference, config, self.root, progress=self.progress, workloads=self.workload_specs)
            self._wall.prepare()
        return counts_against_wall(v, self._wall.check([cand])[0], self.config.min_speedup)

    def _job(self, cand: CandidateSpec, built: build_mod.BuildResult | None, ranges: bool = True) -> dict[str, Any]:
        c = self.config
        assert self.scratch is not None
        compat_dir = self.cache_dir / "compat" / cand.hash[:16]
        # checked against the hash the trusted side recorded when it built it (IntegrityError if not)
        path = str(build_mod.verified_library(built)) if built is not None else str(cand.path.resolve())
        if cand.format == "compat":
            if self._compat_stage is not None:
                # a fresh copy of this candidate's cached build: nothing an earlier candidate left there
                stage = self._compat_stage / cand.hash[:16]
                shutil.rmtree(stage, ignore_errors=True)
                _copy_regular_files(compat_dir, stage)
            else:
                compat_dir.mkdir(parents=True, exist_ok=True)
            # a read-only copy the sandbox can see wherever the candidate lives
            copy = self.scratch / "candidates" / cand.hash[:16] / cand.path.name
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(cand.text)
            path = str(copy)
        compiles = calls_compile(cand)
        return dict(
            self._limits(),
            **self._timer_job,
            kind="candidate",
            format=cand.format,
            path=path,
            build_dir=str(compat_dir),
            time_budget=c.time_budget,
            min_speedup=c.min_speedup,
            min_rounds=c.min_rounds,
            max_rounds=c.max_rounds,
            ranges=ranges,
            settle_s=SETTLE_S,
            instruction_rounds=INSTRUCTION_ROUNDS,
            # the worker loads torch's compiler before the first candidate that calls it, told
            # whether it may skip Inductor's probe of the CPU (measured on this side)
            compiles=compiles,
            vec_isa_ok=self._vec_isa_ok() if compiles else None,
        )

    def _vec_isa_ok(self) -> bool | None:
        """The machine's answer to Inductor's probe of the CPU (:func:`probe.vector_isa_ok`:
        measured once per machine, never in a sandbox), asked once per oracle."""
        if self._vec_isa is None:
            self._vec_isa = (probe.vector_isa_ok(probe.cache_dir()),)
        return self._vec_isa[0]

    def _run(self, cand: CandidateSpec, built: build_mod.BuildResult | None, v: Verdict, later_block: bool = False) -> None:
        """One candidate's run on its sandboxed worker: build, load, every correctness set, the
        range sets, then the timing through the trusted clock (:meth:`_converse`); a failure at
        any step ends the run with that step's status, and what the process left behind
        (:meth:`_settle`) can still turn a pass into a rejection."""
        assert self.zygote is not None
        if calls_compile(cand):
            self._vec_isa_ok()  # the machine's probe, the first time it is asked: not this candidate's time
        start = time.monotonic()
        timeout = self.config.timeout * self._slowdown
        first_timeout = timeout + (self.config.build_timeout if cand.format == "compat" else 0)
        try:
            job = self._job(cand, built, ranges=not later_block)
        except build_mod.IntegrityError as e:
            v.status, v.reasons = VerdictStatus.REJECTED, [str(e)]
            return
        out_bytes = sum(w.out_bytes for w in self.workloads)
        child = self.zygote.spawn(job, timeout=first_timeout, max_message=64 * max(out_bytes, 1) + (16 << 20))
        timings: dict[str, tuple[list[int], list[int], int]] = {}
        range_failed: dict[str, str] = {}
        finished = False
        try:
            finished = self._converse(child, cand, v, timings, range_failed, timeout, later_block)
        except ProtocolError as e:
            child.kill()
            v.status = VerdictStatus.REJECTED
            v.reasons = [f"broke the worker protocol: {e}"]
        except JobTimeout as e:
            child.kill()
            v.status = VerdictStatus.TIMEOUT
            limit = first_timeout if "load" in str(e) else timeout
            v.reasons = [f"did not finish within {limit:.0f} s (during {e})"]
            if "(reference)" in str(e):  # the time ran out in the reference's calls, not the candidate's
                v.reasons.append("the limit covers every input set and the timing of both sides: a large workload "
                                 "may need a longer `timeout` setting")
        except ChildGone as e:
            v.status = VerdictStatus.CRASH
            v.reasons = [f"the worker died during {e}"]
        finally:
            child.finish()
            if cand.format == "compat" and self._compat_stage is not None and not child.overfilled:
                target = self.cache_dir / "compat" / cand.hash[:16]
                shutil.rmtree(target, ignore_errors=True)
                _copy_regular_files(self._compat_stage / cand.hash[:16], target)
        v.eval_s = round(time.monotonic() - start, 4)
        self._settle(child, v)
        if finished and not v.reasons:
            if not later_block:
                self._flag_range(v, range_failed)
            self._score(v, timings)

    def _converse(self, child: Job, cand: CandidateSpec, v: Verdict, timings: dict[str, tuple[list[int], list[int], int]],
                  range_failed: dict[str, str], timeout: float, later_block: bool) -> bool:
        """The worker's events, in the only order the protocol allows: every correctness set,
        the range sets (whose results flag the verdict but do not fail it), the timing, "done".
        True when the run finished; anything out of turn is a :class:`ProtocolError`. Seven
        parameters because it fills the run's verdict, timings and range failures in place,
        under the run's candidate, timeout and mode, which :meth:`_run` then settles."""
        c = self.config
        by_name = {w.name: w for w in self.workloads}
        due = [(w.name, i) for w in self.workloads for i in range(len(w.expected))]
        range_due = [] if later_block else [(w.name, label) for w in self.workloads for label in w.range_expected]
        timed = False
        for ev in child.messages():
            name, kw = ev.name, ev.kwargs
            if name == "loaded":
                if cand.format == "compat":
                    v.compile_s = round(float(kw["load_s"]), 4)
                child.deadline = time.monotonic() + timeout
            elif name == "outputs":
                if not due or (kw["workload"], kw["set"]) != due[0]:
                    raise ProtocolError(f"outputs for {kw['workload']!r} set {kw['set']} out of turn")
                due.pop(0)
                if self._wrong(v, by_name[kw["workload"]], kw["set"], kw["outputs"], f"input set {kw['set']}: "):
                    child.send("stop")
                    return False
                child.send("ok")
            elif name == "range":
                if due or not range_due or (kw["workload"], kw["label"]) != range_due[0]:
                    raise ProtocolError(f"range outputs for {kw['workload']!r} {kw['label']!r} out of turn")
                range_due.pop(0)
                why = range_mismatch(by_name[kw["workload"]].range_expected[kw["label"]], kw["outputs"], kw["raised"], c.atol, c.rtol)
                if why:
                    range_failed.setdefault(kw["label"], why)
            elif range_due and name in ("serving", "counts", "done"):
                raise ProtocolError(f"'{name}' before every range set's outputs")
            elif name == "serving" and not due and not timed and c.timer == "time":
                timed = True
                if not self._time(child, v, timings, cand.format == "native", 0.5 if later_block else 1.0):
                    return False
                child.send("finish")
            elif name == "counts" and not due and c.timer == "instructions" and kw["workload"] in by_name:
                w = by_name[kw["workload"]]
                for set_idx, outs in kw["rechecks"]:
                    if not 0 <= set_idx < len(w.expected):
                        continue
                    if self._wrong(v, w, set_idx, outs, f"a counted call on input set {set_idx} gave a wrong result: ", timed=True):
                        return False
                timings[w.name] = (list(kw["reference"]), list(kw["candidate"]), 1)
            elif name == "error":
                v.status = VerdictStatus(kw["status"])
                v.reasons = [str(kw["message"])]
                if kw["detail"]:
                    v.diagnostics["traceback"] = str(kw["detail"])
                return False
            elif name == "done" and not due and len(timings) == len(self.workloads):
                return True
            else:
                raise ProtocolError(f"'{name}' out of turn")
        return False

    def _wrong(self, v: Verdict, w: Workload, set_idx: int, outputs: Any, prefix: str, **where: Any) -> bool:
        """Whether ``outputs`` differ from the reference's on input set ``set_idx`` (then ``v`` says how)."""
        mismatch = compare(w.expected[set_idx], outputs, self.config.atol, self.config.rtol)
        if mismatch is None:
            return False
        v.status = VerdictStatus.WRONG
        v.reasons = [prefix + mismatch.line()]
        v.diagnostics["mismatch"] = dict(mismatch.details, output=mismatch.output, input_set=set_idx, **where)
        return True

    def _settle(self, child: Job, v: Verdict) -> None:
        """What the finished process tells beyond its messages: how it died, what it printed, and
        what it left running; too much output or a leftover process rejects even a pass."""
        if v.status == VerdictStatus.CRASH:
            code = child.exit_code
            if code is None:
                v.reasons = [f"the worker died during {child.stage}"]
            elif code < 0:
                v.reasons = [f"killed by {_signal_name(code)} during {child.stage}"]
            else:
                v.reasons = [f"the process exited with status {code} during {child.stage} (exit() inside the candidate?)"]
        output = child.output.text()
        if output:
            v.diagnostics["output"] = output[-4000:]
        if child.output.overflowed:
            v.diagnostics["output_bytes"] = child.output.total
            if v.status not in (VerdictStatus.WRONG, VerdictStatus.CRASH, VerdictStatus.TIMEOUT, VerdictStatus.COMPILE_ERROR):
                v.status = VerdictStatus.REJECTED
                v.reasons = [f"wrote {child.output.total} bytes to stdout/stderr (the cap is {child.output.cap})"]
        if child.overfilled:  # the watch killed it: whatever the run said, it is this
            v.status = VerdictStatus.REJECTED
            v.reasons = [child.overfilled]
            return
        if child.leftovers and v.status not in (VerdictStatus.CRASH, VerdictStatus.TIMEOUT):
            left = f"left {child.leftovers} process(es) running after it returned"
            if v.status == VerdictStatus.REJECTED:  # what rejected it first stays its reason
                v.reasons.append(left)
            else:
                v.status = VerdictStatus.REJECTED
                v.reasons = [left]
        if v.status in (VerdictStatus.RUNTIME_ERROR, VerdictStatus.CRASH) and self.config.max_memory and _memory_related(v.reasons):
            v.reasons.append(f"the memory limit was {self.config.max_memory / GiB:.3g} GiB (--max-memory)")

    def _flag_range(self, v: Verdict, failed: dict[str, str]) -> None:
        """``range_limited`` from the range sets the candidate got wrong (the text says what passed)."""
        tried = list(dict.fromkeys(label for w in self.workloads for label in w.range_expected))
        if not tried:
            return
        passed = [label for label in tried if label not in failed]
        v.diagnostics["range"] = {"passed": passed, "failed": failed}
        if failed:
            v.range_limited = ranges.describe(passed, list(failed))
            v.diagnostics["range_limited"] = v.range_limited

    def _time(self, child: Job, v: Verdict, timings: dict[str, tuple[list[int], list[int], int]], native: bool,
              budget_share: float = 1.0) -> bool:
        """Time every workload from this process (the trusted clock); False when that ended the verdict."""
        assert self.zygote is not None
        c = self.config
        cfg = timing.TimingConfig(time_budget=c.time_budget * budget_share, min_rounds=c.min_rounds, max_rounds=c.max_rounds,
                                  min_speedup=c.min_speedup, atol=c.atol, rtol=c.rtol, inplace=c.inplace,
                                  device=self.device, native=native, cores=self.cores)
        checked = 0
        # a fresh reference process for every measurement, as the candidate gets one: a state
        # one of them drifted into (its heap, its caches) cannot carry a verdict, or its confirmation
        self._stop_reference_server()
        self.zygote.ran_while_frozen()  # what ran before this timing is not held against it
        for w in self.workloads:
            child.stage = f"time {w.name}"
            try:
                server = self._reference_server()
                server.deadline = child.deadline
                before = load_mod.read()
                t = timing.time_workload(timing.TimedWorkload(w.name, w.in_meta, w.out_meta, len(w.expected), w.fresh),
                                         server, child, self.zygote, cfg, lambda: child.deadline)
            except timing.TimingRejected as e:
                v.status, v.reasons = e.status, [str(e)]
                if e.details:
                    v.diagnostics["mismatch"] = e.details
                return False
            except timing.ReferenceFailed as e:
                self._stop_reference_server()
                v.status, v.reasons = VerdictStatus.RUNTIME_ERROR, [f"the reference failed while being timed: {e}"]
                return False
            finally:
                self.zygote.freeze(False)
            ran = self.zygote.ran_while_frozen()
            if ran is not None:
                v.status = VerdictStatus.REJECTED
                v.reasons = [f"its sandbox ran while it was to be stopped (the reference being timed, or the outputs checked): {ran}"]
                return False
            timings[w.name] = (t.reference_ns, t.candidate_ns, t.calls_per_sample)
            checked += t.checked_calls
            v.diagnostics.setdefault("disturbed_rounds", {})[w.name] = t.disturbed
            v.diagnostics["busy"] = max(v.diagnostics.get("busy", 0.0), _busy_share(t))
            machine = load_mod.between(before, load_mod.read())
            v.diagnostics["pressure"] = round(max(v.diagnostics.get("pressure", 0.0), machine.share), 3)
            if t.call_overhead_us is not None:  # the call path's own cost, beside the kernel's time
                v.diagnostics["call_overhead_us"] = max(v.diagnostics.get("call_overhead_us", 0.0), t.call_overhead_us)
            if t.call_path:
                v.diagnostics["call_path"] = t.call_path
            if t.notes:
                v.diagnostics.setdefault("timing_notes", []).extend(t.notes)
        v.diagnostics["timed_calls_checked"] = checked
        return True

    def _score(self, v: Verdict, timings: dict[str, tuple[list[int], list[int], int]]) -> None:
        if self.config.timer == "instructions":
            return self._score_instructions(v, timings)
        per = []
        wl_diag = {}
        for w in self.workloads:
            ref_ns, cand_ns, k = timings[w.name]
            ref_s = [x / k / 1e9 for x in ref_ns]
            cand_s = [x / k / 1e9 for x in cand_ns]
            per.append((ref_s, cand_s))
            sp = stats.speedup([(ref_s, cand_s)])
            rs, cs = stats.summary(ref_s), stats.summary(cand_s)
            d = {
                "speedup": sp.point,
                "speedup_ci": [sp.low, sp.high],
                "reference": rs,
                "candidate": cs,
                "calls_per_sample": k,
                "rounds": len(ref_s),
                "bytes_per_call": w.bytes_per_call(),
                "achieved_bytes_per_s": w.bytes_per_call() / max(cs["median_s"], 1e-12),
            }
            wl_diag[w.name] = d
        sp = stats.speedup(per)
        v.reference_s = stats.geomean([d["reference"]["median_s"] for d in wl_diag.values()])
        v.candidate_s = stats.geomean([d["candidate"]["median_s"] for d in wl_diag.values()])
        if self._bandwidth is None:
            self._bandwidth = float(probe.bandwidth(probe.cache_dir(), self.device)["bytes_per_s"])
        for d in wl_diag.values():
            d["bandwidth_fraction"] = d["achieved_bytes_per_s"] / self._bandwidth
        v.diagnostics["workloads"] = wl_diag
        v.diagnostics["machine_bytes_per_s"] = self._bandwidth
        if any(w.flops for w in self.workloads):
            if self._flops is None:
                self._flops = float(probe.flops(probe.cache_dir(), self.device)["flops_per_s"])
            for w in self.workloads:
                d = wl_diag[w.name]
                if w.flops:
                    d["flops_per_call"] = w.flops
                    d["achieved_flops_per_s"] = w.flops / max(d["candidate"]["median_s"], 1e-12)
                    d["flops_fraction"] = d["achieved_flops_per_s"] / self._flops
            v.diagnostics["machine_flops_per_s"] = self._flops
        why = self._implausible(wl_diag)
        if why:
            v.status, v.reasons = VerdictStatus.REJECTED, [why]
            return
        self._decide(v, sp)
        rounds = _rounds(v)
        if v.status == VerdictStatus.FASTER and rounds < timing.FASTER_ROUNDS:
            _hold(v, f"over {rounds} rounds only (a faster verdict needs {timing.FASTER_ROUNDS}; no more fitted in the time budget)")
        if self.device == "cuda":
            # measured on an H200: 64 MiB took 1.2 ms to reach the host, the eager chain's kernels 0.19 ms
            v.diagnostics["host_copy_bytes_per_call"] = max(w.in_bytes if self.config.inplace else w.out_bytes
                                                            for w in self.workloads)

    def _implausible(self, wl_diag: dict[str, dict[str, Any]]) -> str | None:
        """A call faster than this machine's memory can feed it (by a clear margin) is not believed.

        Checked on the fastest sample, so faking only some samples does not slip under it.
        The FLOP roof is not applied: the reference's counted FLOPs are no floor for a
        correct rewrite (reassociation, algebra), so it stays a diagnostic.
        """
        cache = probe.cache_bytes(self.device)
        for w in self.workloads:
            d = wl_diag[w.name]
            why = plausible.roof_violation(bytes_per_call=w.bytes_per_call(), flops_per_call=0,
                                           seconds_per_call=d["candidate"]["min_s"], bandwidth_Bps=self._bandwidth,
                                           flops_per_s=None, cache_bytes=cache)
            if why:
                return f"physically implausible on {w.name}: {why}"
        return None

    def _score_instructions(self, v: Verdict, timings: dict[str, tuple[list[int], list[int], int]]) -> None:
        per = [(timings[w.name][0], timings[w.name][1]) for w in self.workloads]
        v.diagnostics["workloads"] = {
            w.name: {
                "reference_instructions": statistics.median(ref),
                "candidate_instructions": statistics.median(cand),
                "reference_counts": list(ref),
                "candidate_counts": list(cand),
                "rounds": len(ref),
            }
            for w, (ref, cand) in zip(self.workloads, per)
        }
        self._decide(v, stats.speedup(per))

    def _decide(self, v: Verdict, sp: Any) -> None:
        decide(v, sp, self.config.min_speedup, device=self.device, timer=self.config.timer)


def counts_against_wall(v: Verdict, wall: Verdict, min_speedup: float) -> Verdict:
    """``v``, an instruction-count "faster", as the trusted wall clock's verdict ``wall`` on the
    same build leaves it (:meth:`Oracle._cross_check_wall`)."""
    v.diagnostics["wall"] = {"status": wall.status, "speedup": wall.speedup, "speedup_ci": wall.speedup_ci,
                             "reasons": wall.reasons}
    if not wall.correct:
        v.status = VerdictStatus.REJECTED
        v.reasons = [f"--timer instructions: the wall-clock cross-check found it {wall.status}: {'; '.join(wall.reasons)[:300]}"]
        return v
    if not wall.speedup_ci:
        return v
    fractions = [d.get("bandwidth_fraction") for d in wall.diagnostics.get("workloads", {}).values()]
    known = [f for f in fractions if f is not None]
    why = plausible.instructions_vs_wall(v.speedup or 0.0, wall.speedup_ci[0], wall.speedup_ci[1],
                                         bandwidth_fraction=max(known) if known else None)
    wall_said = f"{wall.speedup:.3g}x, 95% CI [{wall.speedup_ci[0]:.3g}, {wall.speedup_ci[1]:.3g}]"
    if why:
        v.status = VerdictStatus.REJECTED
        v.reasons = [f"--timer instructions: {why}"]
    elif wall.speedup_ci[1] < min_speedup:
        # the counts come from the candidate's own process: where the trusted clock is sure the
        # bar is not cleared, they do not overrule it (a wide interval on a loaded machine is no
        # such certainty, and there the counts keep the determinism they are chosen for)
        v.status = VerdictStatus.NOT_FASTER
        v.reasons = [f"{v.reasons[0]}; but the trusted wall clock finds it below the bar of {min_speedup:g}x "
                     f"({wall_said}), and counts taken in the candidate's own process do not overrule it"]
    else:
        v.reasons.append(f"the wall clock agrees: {wall_said}")
    return v


def _note_host_copy(v: Verdict) -> None:
    """On a GPU, the final verdict says how much of each timed call was the copy of its results
    to the host (blocks and confirmations rebuild the reasons, so this comes last)."""
    copied = v.diagnostics.get("host_copy_bytes_per_call")
    if copied and v.speedup_ci and not any("MiB of results to the host" in r for r in v.reasons):
        v.reasons.append(f"each timed call includes copying its {copied / 2**20:.3g} MiB of results to the host "
                         "(docs: the oracle, 'On a GPU'): a kernel much shorter than that copy shows a speedup "
                         "closer to 1 than its own")


def decide(v: Verdict, sp: Any, min_speedup: float, *, device: str, timer: str, width_rule: bool = True) -> None:
    """The timed verdict: faster only when the interval (and each half of the run) clears the bar.

    ``width_rule``: a within-run interval wider than UNDECIDED_WIDTH whose low end is just over
    the bar is luck, not a speedup. Off for blocks: their prediction interval is wide by
    construction (t with two degrees of freedom), and every block must clear the bar anyway."""
    v.speedup = round(sp.point, 4)
    v.speedup_ci = [round(sp.low, 4), round(sp.high, 4)]
    v.diagnostics["device"] = device
    v.diagnostics["timer"] = timer
    if width_rule and sp.faster(min_speedup) and sp.high / sp.low > UNDECIDED_WIDTH and sp.low < 1.5 * min_speedup:
        # an interval this wide says the machine was too noisy: a low end just over the bar is luck
        v.status = VerdictStatus.NOT_FASTER
        v.diagnostics["undecided"] = True
        v.reasons = [f"{sp.point:.3g}x, 95% CI [{sp.low:.3g}, {sp.high:.3g}] would clear {min_speedup}, but too noisy to "
                     f"decide (the interval spans a factor of {sp.high / sp.low:.3g}; 'faster' needs at most {UNDECIDED_WIDTH:g})"]
    elif sp.faster(min_speedup):
        v.status = VerdictStatus.FASTER
        v.reasons = [f"{sp.point:.3g}x, 95% CI [{sp.low:.3g}, {sp.high:.3g}] clears {min_speedup}"]
    else:
        v.status = VerdictStatus.NOT_FASTER
        v.reasons = [f"{sp.point:.3g}x, 95% CI [{sp.low:.3g}, {sp.high:.3g}] does not clear {min_speedup}"]
        if undecided(v.status, v.speedup_ci, min_speedup):
            v.diagnostics["undecided"] = True
            v.reasons[0] += f": too noisy to decide (the interval spans a factor of {sp.high / sp.low:.3g})"


def calls_compile(cand: CandidateSpec) -> bool:
    """Whether a Python candidate's source calls ``torch.compile`` (read as text, never run)."""
    return cand.format != "native" and "torch.compile" in cand.text


def range_mismatch(expected: list[Any], got: list[Any], raised: str, atol: float | None, rtol: float | None) -> str | None:
    """Why a candidate's outputs on a range set differ from the reference's, or None.

    NaN and inf must sit where the reference has them; finite values within the tolerances."""
    if raised:
        return f"raised: {raised[:200]}"
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got)):
        a, r = tolerances(e.dtype, atol, rtol)
        if not ranges.special_equal(e, g, a, r):
            return f"output {i} differs"
    return None


def sandbox_warning(isolation: Isolation) -> str | None:
    """The one line every run without a full sandbox prints, or None."""
    if isolation.kind == "none":
        why = f" ({isolation.reason})" if isolation.reason else " (--sandbox none)"
        return f"candidates run WITHOUT a sandbox{why}: they can read this user's files, reach the network and signal any process"
    if isolation.weak:
        why = f" (fell back: {isolation.reason})" if isolation.reason else ""
        enforced = f"; enforced: {', '.join(isolation.enforced)}" if isolation.enforced else ""
        return f"sandbox {isolation.describe()}{enforced}{why}"
    return None


def combined_blocks(blocks: list[Verdict], min_speedup: float, *, device: str, wanted: int = 3,
                    learned_spread: float | None = None) -> Verdict:
    """The verdict of a candidate whose screening said "faster", from all its blocks.

    A false "faster" is the costly error, and its usual causes (a lucky buffer layout, a burst
    of load on one side) belong to one process and rarely repeat in the next; a speedup that
    does not reproduce from run to run is worth nothing in a pull request or as a reward. The
    screening block only selects; the interval comes from every block (``stats.blocks_speedup``),
    and blocks that disagree by more than ``DISAGREE`` leave it undecided. The last block's
    verdict carries the result; a block that failed (wrong, crashed, rejected) is the verdict.
    ``learned_spread``: this machine's drift between runs where its repeats showed more than the
    default (:mod:`oracle.drift`); it only widens.
    """
    first, last = blocks[0], blocks[-1]
    last.eval_s = round(sum(b.eval_s or 0.0 for b in blocks), 4)
    # the blocks the machine's load spoilt are set aside when as many clean ones came as were
    # wanted: fewer would make the interval from the blocks' spread far wider than it is
    clean = [b for b in blocks if not busy(b)]
    used = clean if len(clean) >= wanted else blocks
    if first.compile_s is not None:  # the build was the first block's; the others loaded it from the cache
        last.compile_s = first.compile_s
    last.diagnostics["screening"] = {"speedup": first.speedup, "speedup_ci": first.speedup_ci, "reasons": first.reasons[:1]}
    last.diagnostics["blocks"] = [{"speedup": b.speedup, "speedup_ci": b.speedup_ci, "status": b.status,
                                   "busy": round(busy_share(b), 3), "pressure": b.diagnostics.get("pressure"), "used": any(b is u for u in used)}
                                  for b in blocks]
    last.range_limited = first.range_limited  # the range sets ran in the first block only
    for key in ("range", "range_limited"):
        if key in first.diagnostics:
            last.diagnostics[key] = first.diagnostics[key]
    if not last.correct or not last.speedup_ci or not last.speedup:
        last.reasons = [f"on block {len(blocks)}, in a fresh worker: {r}" for r in last.reasons]
        return last
    load = sum(busy_share(b) for b in used) / len(used)
    pressure = _pressure(used)
    loaded_machine = pressure >= LOADED_PRESSURE if pressure is not None else load >= LOADED_SHARE
    quiet_spread = max(drift.default_spread(device), learned_spread or 0.0)
    run_spread = max(stats.LOADED_RUN_SPREAD, quiet_spread) if loaded_machine else quiet_spread
    sp = stats.blocks_speedup([(b.speedup or 0.0, *(b.speedup_ci or [0.0, 0.0])) for b in used], run_spread=run_spread)
    spread = sp.halves[1] / max(sp.halves[0], 1e-12)
    last.diagnostics["noise"] = {"blocks": len(used), "spread": round(spread, 4), "set_aside_blocks": len(blocks) - len(used),
                                 "busy": round(load, 3), "pressure": pressure, "run_spread": run_spread, "loaded": loaded_machine,
                                 "run_spread_learned": run_spread == learned_spread}
    loaded = f"; {note}" if (note := noise_note(last.diagnostics["noise"])) else ""
    points = ", ".join(f"{b.speedup:.3g}x" for b in used)
    decide(last, sp, min_speedup, device=device, timer="time", width_rule=False)
    rounds = sum(_rounds(b) for b in used)
    if last.status == VerdictStatus.FASTER and rounds < timing.FASTER_ROUNDS:
        _hold(last, f"over {rounds} rounds in {len(used)} blocks only (a faster verdict needs {timing.FASTER_ROUNDS}){loaded}")
    elif last.status == VerdictStatus.FASTER and spread > DISAGREE and sp.low < 1.5 * min_speedup:
        # blocks far apart whose interval reaches down near the bar: which one is the kernel?
        # (far above it, every block clears the bar and the wide interval says the rest)
        _hold(last, f"its {len(used)} blocks disagree ({points}: {spread:.3g}x apart): too noisy to tell"
                    f"{_set_aside(blocks, used)}{loaded}")
    else:
        last.reasons = [f"{last.reasons[0]}, over {len(used)} blocks in fresh processes ({points}){_set_aside(blocks, used)}{loaded}"]
    return last


def scan_rejected(v: Verdict, findings: list[str], timer: str) -> Verdict:
    """``v`` rejected for what the scan found in its build: under the instruction timer
    (``timer``, as the user spelt it) it could switch the counter off around its own work."""
    v.status = VerdictStatus.REJECTED
    v.reasons = [f"{timer}: {f}" for f in findings[:3]]
    v.diagnostics["scan"] = findings
    return v


def _hold(v: Verdict, but: str) -> None:
    """A "faster" that cannot stand: not faster and undecided, its reason saying what it would
    have cleared, ``but`` why it does not."""
    v.status = VerdictStatus.NOT_FASTER
    v.diagnostics["undecided"] = True
    v.reasons = [f"{v.reasons[0].replace(' clears ', ' would clear ')}, but {but}"]


def _rounds(v: Verdict) -> int:
    """A block's timed rounds: those of its workload with the fewest."""
    workloads = v.diagnostics.get("workloads") or {}
    return min((int(d.get("rounds", 0)) for d in workloads.values() if isinstance(d, dict)), default=0)


def _set_aside(blocks: list[Verdict], used: list[Verdict]) -> str:
    n = len(blocks) - len(used)
    if n:
        return f"; {n} more block(s) set aside: other work held the CPU during most of their rounds"
    if all(busy(b) for b in blocks):
        return "; other work held the CPU during most rounds of every block"
    return ""


def _busy_share(t: timing.WorkloadTiming) -> float:
    """The share of a workload's timed rounds that other work disturbed; 1.0 when there were
    so few undisturbed ones that the disturbed had to be counted too."""
    if t.disturbed and t.counted == timing.Disturbed.TOO_BUSY:
        return 1.0
    if t.counted == timing.Disturbed.OWN:
        return 0.0  # the candidate's own doing: no sign of other work, and no reason to retake the block
    return t.disturbed / max(1, len(t.reference_ns) + (t.disturbed if t.counted == timing.Disturbed.SET_ASIDE else 0))


def busy_share(v: Verdict) -> float:
    """The share of a block's timed rounds that other work disturbed (:func:`_busy_share`)."""
    return float(v.diagnostics.get("busy", 0.0))


def busy(v: Verdict) -> bool:
    """Whether a block measured the machine's load rather than the kernel (:data:`BUSY_BLOCK`)."""
    return busy_share(v) >= BUSY_BLOCK


def _pressure(blocks: list[Verdict]) -> float | None:
    """The blocks' mean CPU pressure during their timing; None where a block has no reading."""
    seen = [b.diagnostics.get("pressure") for b in blocks]
    if not seen or not all(isinstance(p, (int, float)) for p in seen):
        return None
    return round(sum(float(p) for p in seen) / len(seen), 3)


def loaded_note(load: float, run_spread: float, pressure: float | None = None) -> str:
    """What a verdict and its report say about blocks timed on a loaded machine
    (:data:`LOADED_PRESSURE`, or :data:`LOADED_SHARE` where the kernel reports no pressure)."""
    waited = f"some task waited for a CPU during {pressure:.0%} of the timing, " if pressure is not None else ""
    return (f"the machine was loaded ({waited}{load:.0%} of the timed rounds disturbed), so the interval allows "
            f"for whole runs that differ by about {math.expm1(run_spread):.0%}, as runs beside other work do")


def noise_note(noise: dict[str, Any]) -> str | None:
    """What a verdict and its report say about the run-to-run spread its interval allows for
    (``diagnostics.noise``): a loaded machine's, or this machine's learned drift; None for the default."""
    # verdicts before rule 9 have no "loaded": only a loaded machine's had a run spread then
    if noise.get("loaded", bool(noise.get("run_spread"))):
        return loaded_note(float(noise.get("busy", 0.0)), float(noise["run_spread"]), json_number(noise.get("pressure")))
    if noise.get("run_spread_learned"):
        return drift.note(float(noise["run_spread"]))
    return None


def second_measurement(first: Verdict) -> Verdict:
    """A blank verdict for confirming ``first``: same candidate, same build facts."""
    again = Verdict(first.candidate, VerdictStatus.RUNTIME_ERROR, hash=first.hash, format=first.format, lang=first.lang,
                    sandbox=first.sandbox)
    again.compile_s, again.weak_check = first.compile_s, first.weak_check
    again.diagnostics = {k: v for k, v in first.diagnostics.items() if k in ("build", "seed", "threads")}
    return again


def confirmed(first: Verdict, again: Verdict, where: str) -> Verdict:
    """The second measurement is the verdict; the first stays in the diagnostics as screening."""
    again.eval_s = round((first.eval_s or 0.0) + (again.eval_s or 0.0), 4)
    if first.compile_s is not None:  # the build was the first run's; the second loaded it from the cache
        again.compile_s = first.compile_s
    again.diagnostics["screening"] = {"speedup": first.speedup, "speedup_ci": first.speedup_ci, "reasons": first.reasons}
    if again.status == VerdictStatus.FASTER and first.speedup_ci and again.speedup_ci and (
            first.speedup_ci[0] > DISAGREE * again.speedup_ci[1] or again.speedup_ci[0] > DISAGREE * first.speedup_ci[1]):
        # two measurements whose intervals lie far apart disagree: something in one of them (a
        # process, a burst of load) was not the kernel, and neither number can be quoted (a few
        # percent apart is the usual offset between two pairs of processes, not a disagreement)
        _hold(again, f"the first measurement ({first.reasons[0]}) lies far from it {where}: the two disagree, too noisy to decide")
        return again
    if again.status == VerdictStatus.FASTER:
        again.reasons = [f"{again.reasons[0]}, confirmed by a second measurement {where} (the first measured {first.reasons[0]})"]
    elif again.status == VerdictStatus.NOT_FASTER:
        again.reasons = [f"{again.reasons[0]} when measured again {where} (the first run's {first.reasons[0]} did not repeat)"]
    else:
        again.reasons = [f"on a second run {where}: {r}" for r in again.reasons]
    return again


def _copy_regular_files(source: Path, dest: Path) -> None:
    """Copy a tree the sandbox wrote: regular files only (a link it planted could name any file of ours)."""
    dest.mkdir(parents=True, exist_ok=True)
    for folder, dirs, files in os.walk(source):
        rel = Path(folder).relative_to(source)
        for name in dirs:
            if not os.path.islink(os.path.join(folder, name)):
                (dest / rel / name).mkdir(exist_ok=True)
        for name in files:
            src = os.path.join(folder, name)
            try:
                if stat_mod.S_ISREG(os.lstat(src).st_mode):
                    shutil.copy2(src, dest / rel / name, follow_symlinks=False)
            except OSError:
                continue


def _memory_related(reasons: list[str]) -> bool:
    text = " ".join(reasons).lower()
    return any(s in text for s in ("memory", "alloc", "sigsegv", "sigabrt", "sigkill", "bad_alloc"))
