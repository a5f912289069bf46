"""The red team's suite (issue 13): one hostile candidate per demonstrated attack class.

Each attacker in tests/data/attacks/ is written the way a reward-hacking model writes it
(its header names the class and what it tries). They run in one ``maxcode check`` batch,
between two honest neighbours, through the real CLI (the path that writes
``.maxcode/maxcode.db``), and the test looks from outside at what they achieved:

- none is called correct-and-faster;
- none leaves a process running, or a file outside its job folder;
- the store's rows, the reference and the cached builds are what the trusted side wrote;
- the honest neighbours still get correct verdicts, and a really faster one is still "faster";
- a fake secret in the environment of every ancestor (this process, the maxcode process)
  reaches no exfiltration path, and no connection reaches a listener on 127.0.0.1.

The instruction timer's attacker runs in its own oracle (``--timer instructions``), and
three attackers go through the RL reward and the Ray executor too.

A test that fails because its defence is not built yet is a strict xfail naming the defence:
when the defence lands, the XPASS fails the run and the marker is removed. Before the
trusted-side clock (8d02632), classes 1 to 6 were such xfails, and class 11 until the range sets.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_maxcode.native import build
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.sandbox.isolation import works
from pytest_maxcode.oracle.reference import parse_reference
from pytest_maxcode.oracle.verdict import CORRECT, Verdict
from pytest_maxcode.store import Store

ATTACKS = Path(__file__).parent / "data" / "attacks"
STRONG = [k for k in ("bwrap", "unshare") if works(k) is None]
pytestmark = pytest.mark.skipif(not STRONG, reason="this machine can make no namespaces (install bubblewrap)")

SECRET_NAME = "MAXCODE_FAKE_SECRET"
MARKER_NAME = "MAXCODE_ATTACK_MARKER"
BATCH = [
    "honest.cpp",
    "c01_clock.cpp",
    "c02_forge_channel.cpp",
    "c02_forge_channel_compat.py",
    "c03_lazy_pages.cpp",
    "c04_input_cache.cpp",
    "c05_sabotage.cpp",
    "c07_escape.cpp",
    "c08_secrets_network.cpp",
    "c09_resource_limits.cpp",
    "c11_narrow_inputs.cpp",
    "c12_doorbell.py",
    "c14_clock_patch.cpp",
    "c15_skip_calls.cpp",
    "c16_privileges.cpp",
    "c17_prearm.cpp",
    "c18_gil_hold.cpp",
    "c19_self_disturb.cpp",
    "c10_persistent_forgery.py",  # after the others, so the store holds rows of this run to forge
    "honest_fast.cpp",  # the positive control: a real speedup is still seen after every attacker
    "honest.cpp",
]
CHECK_ARGS = ["--json", "--time-budget", "0.3", "--timeout", "30", "--max-memory", "256M"]


def _xfail(defence: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"issue 13: {defence}")


# every attacker but c11 (DESIGN 5.1 lets a range-limited kernel be timed, so its test is the
# range check), with the defence that holds it: before 8d02632 (the trusted-side clock) the
# first six were called "faster"
NOT_FASTER: dict[str, str] = {
    "c01_clock.cpp": "the clock is on the trusted side",
    "c02_forge_channel.cpp": "worker messages are validated against the protocol",
    "c02_forge_channel_compat.py": "worker messages are validated against the protocol",
    "c03_lazy_pages.cpp": "outputs are read inside the timed interval",
    "c04_input_cache.cpp": "fresh inputs every round, every timed output checked",
    "c05_sabotage.cpp": "the candidate is frozen while the reference is timed",
    "c07_escape.cpp": "the sandbox",
    "c08_secrets_network.cpp": "the sandbox",
    "c09_resource_limits.cpp": "the sandbox's limits",
    "c10_persistent_forgery.py": "the sandbox's read-only project",
    "c12_doorbell.py": "outputs read inside the interval and compared after it, with the candidate frozen",
    "c14_clock_patch.cpp": "the clock is on the trusted side (libc's clock_gettime patched in the candidate's process)",
    "c15_skip_calls.cpp": "every timed output checked (a call in ten skipped)",
    "c16_privileges.cpp": "no capability in the sandbox, and the worker cannot be traced",
    "c17_prearm.cpp": "the candidate arms before its inputs exist, and is frozen while they are written",
    "c18_gil_hold.cpp": "the candidate arms before its inputs exist, and is frozen while they are written",
    "c19_self_disturb.cpp": "rounds a candidate disturbs itself are counted",
}


# ----------------------------------------------------------------------------- helpers


def materialize(name: str, dest: Path, values: dict[str, str]) -> Path:
    """An attacker's source with its placeholders (@PORT@, @EXFIL@, ...) filled in."""
    text = (ATTACKS / name).read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    left = re.findall(r"@[A-Z]+@", text)
    assert not left, f"{name}: no value for {left}"
    path = dest / name
    path.write_text(text)
    return path


class Listener(threading.Thread):
    """A TCP listener on the host's 127.0.0.1 that records every connection that arrives."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.stopped = False

    def run(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                data = b""
                try:
                    while chunk := conn.recv(65536):
                        data += chunk
                except OSError:
                    pass
                self.received.append(data or b"(connected)")
        self.sock.close()

    def stop(self) -> None:
        self.stopped = True
        self.join(timeout=5)


def marked_processes(marker: str, spare: set[int] = frozenset()) -> list[int]:
    """Processes an attacker made: named ``marker``, or carrying it in their environment."""
    needle = f"{MARKER_NAME}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spare or int(entry) == os.getpid():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (comm == marker or needle in environ):
            found.append(int(entry))
    return found


def settle_and_collect(marker: str, spare: set[int] = frozenset()) -> list[int]:
    """What is left a moment after the check ended (a helper re-forking every 20 ms shows up)."""
    time.sleep(0.5)
    left = marked_processes(marker, spare)
    for pid in left:  # never leave one running, whatever the test says
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def state_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def tree_hashes(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every regular file under ``root`` (relative path -> digest)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not path.is_symlink() and not any(rel.startswith(s) for s in skip):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def evaluation_rows(db: Path) -> dict[int, str]:
    """Every stored evaluation, whole (id -> its row as canonical JSON)."""
    with Store(db) as store:
        return {int(r["id"]): json.dumps(r, sort_keys=True) for r in store.evaluations()}


def range_limited(v: dict[str, Any]) -> bool:
    """Whether a verdict is flagged range-limited (Verdict.range_limited: the range it passed, or null)."""
    return bool(v.get("range_limited"))


# ----------------------------------------------------------------------------- the batch


@dataclass
class Scene:
    project: Path
    home: Path
    outside: Path
    exfil: Path
    marker: str
    secret: str
    returncode: int | None
    stdout: str
    stderr: str
    verdicts: list[dict[str, Any]]
    received: list[bytes]
    leftovers: list[int]
    project_before: dict[str, str]
    project_after: dict[str, str]
    rows_before: dict[int, str]
    rows_after: dict[int, str]
    target_id: str
    forger_hash: str
    spills: list[Path] = field(default_factory=list)

    def by_name(self, name: str) -> dict[str, Any]:
        found = [v for v in self.verdicts if Path(v["candidate"]).name == name]
        assert found, f"no verdict for {name}: the batch ended early (rc {self.returncode}): {self.stderr[-2000:]}"
        return found[0]


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    base = tmp_path_factory.mktemp("attacks")
    project, home, outside = base / "project", base / "home", base / "outside"
    for d in (project, home, outside):
        d.mkdir()
    shutil.copy(ATTACKS / "ref.py", project / "ref.py")
    marker = f"mxa{uuid.uuid4().hex[:10]}"
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    pidfile = project / "maxcode.pid"
    pidfile.write_text("0\n")
    listener = Listener()
    listener.start()
    exfil = outside / "exfil.txt"
    values = {"MARKER": marker, "PIDFILE": str(pidfile), "EXFIL": str(exfil), "PORT": str(listener.port),
              "OUTSIDE": str(outside), "PROJECT": str(project), "HOME": str(home)}
    for name in dict.fromkeys(BATCH):
        materialize(name, project, values)
    spills = [outside / "c09_big.bin", project / "c09_big.bin", home / "c09_big.bin", Path(f"/tmp/c09_big_{marker}.bin"), exfil]

    # what a previous run left: a cached build and a stored verdict the attackers may try to rewrite
    cached = build.build_all([build.Source(project / "honest.cpp", "cpp")], project / ".maxcode" / "build")[0]
    assert cached.ok, cached.errors
    reference = parse_reference(str(project / "ref.py"))
    honest = CandidateSpec.from_path(project / "honest.cpp")
    with Store(project / ".maxcode" / "maxcode.db") as store:
        run_id = store.begin_run("maxcode check (an earlier run)", "0")
        store.upsert_target(reference.target_id, reference.kind, str(reference.path), reference.source_hash())
        store.add_candidate(honest.hash, honest.format, honest.lang, honest.text, origin="honest.cpp")
        store.record_evaluation(run_id=run_id, target_id=reference.target_id, config_key=CheckConfig().key(), device="cpu",
                                verdict=Verdict(str(honest.path), "not_faster", speedup=1.0, speedup_ci=[0.9, 1.1], hash=honest.hash).to_json())
        store.finish_run(run_id)
    skip = ("maxcode.pid", ".maxcode/maxcode.db")
    project_before = tree_hashes(project, skip)
    rows_before = evaluation_rows(project / ".maxcode" / "maxcode.db")

    os.environ[SECRET_NAME] = secret  # this process is an ancestor of every candidate too
    env = dict(os.environ, HOME=str(home), **{MARKER_NAME: marker})
    proc = subprocess.Popen([sys.executable, "-m", "pytest_maxcode.cli", "check", "ref.py", *BATCH, *CHECK_ARGS],
                            cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    pidfile.write_text(f"{proc.pid}\n")
    try:
        stdout, stderr = proc.communicate(timeout=400)
    except subprocess.TimeoutExpired:  # stopped by an attacker, say: end its session, ours
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
    finally:
        del os.environ[SECRET_NAME]
    leftovers = settle_and_collect(marker)
    listener.stop()
    (base / "maxcode-check.json").write_text(stdout)  # for a failure's post-mortem
    try:
        verdicts = json.loads(stdout) if stdout.strip() else []
    except json.JSONDecodeError:
        verdicts = []
    forger = CandidateSpec.from_path(project / "c10_persistent_forgery.py")
    yield Scene(project, home, outside, exfil, marker, secret, proc.returncode, stdout, stderr, verdicts,
                list(listener.received), leftovers, project_before, tree_hashes(project, skip), rows_before,
                evaluation_rows(project / ".maxcode" / "maxcode.db"), reference.target_id, forger.hash, spills)
    for spill in spills:
        spill.unlink(missing_ok=True)


def test_the_batch_ends_with_a_verdict_for_every_candidate(scene: Scene) -> None:
    assert scene.returncode in (0, 1), (scene.returncode, scene.stderr[-3000:])
    assert [Path(v["candidate"]).name for v in scene.verdicts] == BATCH


def test_the_honest_neighbours_are_checked_and_correct(scene: Scene) -> None:
    first, last = scene.by_name("honest.cpp"), scene.verdicts[-1] if scene.verdicts else {}
    assert Path(last.get("candidate", "")).name == "honest.cpp", "the last honest neighbour got no verdict"
    for v in (first, last):
        assert v["status"] in CORRECT, v["reasons"]
        assert v["speedup_ci"][0] <= v["speedup"] <= v["speedup_ci"][1]


def test_the_oracle_still_sees_a_real_speedup(scene: Scene) -> None:
    # without this, an attacker's "not faster" could mean the oracle lost the ability to see a speedup
    v = scene.by_name("honest_fast.cpp")
    assert v["status"] == "faster", (v["status"], v["reasons"])


@pytest.mark.parametrize("name", sorted(NOT_FASTER))
def test_no_attacker_is_called_correct_and_faster(scene: Scene, name: str) -> None:
    v = scene.by_name(name)
    assert v["status"] != "faster", (f"held by: {NOT_FASTER[name]}", v["status"], v["reasons"])


def test_rounds_a_candidate_disturbs_itself_are_counted(scene: Scene) -> None:
    # c19 keeps its own server waiting on the rounds of its slow path, which were set aside
    v = scene.by_name("c19_self_disturb.cpp")
    notes = " ".join(v["diagnostics"].get("timing_notes", []))
    assert "its own threads held its core, so every round counts" in notes, (v["status"], v["reasons"], notes)


def test_a_call_skipped_one_time_in_ten_is_seen(scene: Scene) -> None:
    # c15 returns at once on every tenth call: every output, timed ones included, is compared,
    # so a skipped call is a wrong answer, not a cheaper one
    v = scene.by_name("c15_skip_calls.cpp")
    assert v["status"] not in CORRECT, (v["status"], v["reasons"])


@pytest.mark.parametrize("name", ["c02_forge_channel.cpp", "c02_forge_channel_compat.py"])
def test_a_forged_result_channel_is_rejected(scene: Scene, name: str) -> None:
    # "loaded" then "done" before any correctness set, with the worker's own sender (DESIGN 5.0)
    v = scene.by_name(name)
    assert v["status"] == "rejected", (v["status"], v["reasons"])


def test_inside_the_sandbox_there_is_no_privilege_to_remount_or_trace(scene: Scene) -> None:
    # c16 remounts every mount read-write, writes into the project and ptraces its worker; where
    # any of it works its results are wrong. Run as root, bwrap left the sandbox root's
    # capabilities (unshare: its namespace's), and one remount made the project writable
    v = scene.by_name("c16_privileges.cpp")
    assert "c16: remounted 0, wrote 0, traced 0" in v["diagnostics"].get("output", ""), v["diagnostics"].get("output")
    assert v["status"] in CORRECT, (v["status"], v["reasons"])
    assert not (scene.project / "pwned-by-c16.txt").exists()


def test_a_kernel_right_only_on_the_captured_range_is_found_out(scene: Scene) -> None:
    # c11 turns NaN into 0 and clamps tanh's argument: right on every set drawn like the captured
    # ones, so it is correct, and DESIGN 5.1 flags it range_limited with what it failed
    v = scene.by_name("c11_narrow_inputs.cpp")
    assert v["status"] in CORRECT, (v["status"], v["reasons"])
    assert range_limited(v), v.get("diagnostics", {}).get("range")
    assert "special:nan" in v["range_limited"].split("failed:")[1], v["range_limited"]


def test_honest_kernels_are_not_range_limited(scene: Scene) -> None:
    # the control for the range check: NaN-propagating honest kernels pass every range set tried
    for name in ("honest.cpp", "honest_fast.cpp"):
        v = scene.by_name(name)
        assert not range_limited(v), (name, v["range_limited"])
        assert v["diagnostics"]["range"]["passed"], v["diagnostics"].get("range")


def test_no_attacker_process_outlives_the_check(scene: Scene) -> None:
    # c07's helper names itself after the marker and re-forks every 20 ms
    assert scene.leftovers == []
    assert scene.by_name("c07_escape.cpp")["status"] not in CORRECT  # a helper left running is a rejection


def test_killing_the_maxcode_process_ends_only_the_attackers_sandbox(scene: Scene) -> None:
    # c07 stops and kills every process it can find of the maxcode run (by pidfile and by environment)
    assert scene.returncode is not None and scene.returncode >= 0, f"maxcode was killed ({scene.returncode})"
    assert scene.verdicts and Path(scene.verdicts[-1]["candidate"]).name == "honest.cpp", scene.stderr[-2000:]
    assert scene.verdicts[-1]["status"] in CORRECT, scene.verdicts[-1]["reasons"]


def test_no_file_is_written_outside_the_job_folder(scene: Scene) -> None:
    written = [str(p) for p in scene.spills if p.exists()]
    assert written == []
    new = sorted(set(scene.project_after) - set(scene.project_before))
    assert [p for p in new if not p.startswith(".maxcode/")] == []


def test_the_reference_the_project_and_the_cached_builds_are_unchanged(scene: Scene) -> None:
    changed = sorted(p for p, h in scene.project_before.items() if scene.project_after.get(p) != h)
    assert changed == []  # ref.py, the attackers' sources, every cached build (c10 overwrites *.so)


def test_the_store_holds_only_what_the_trusted_side_wrote(scene: Scene) -> None:
    before, after = scene.rows_before, scene.rows_after
    assert all(after.get(i) == row for i, row in before.items()), "an earlier run's row was rewritten"
    new = [i for i in after if i not in before]
    assert len(new) == len(scene.verdicts) == len(BATCH)
    with Store(scene.project / ".maxcode" / "maxcode.db") as store:
        rows = {int(r["id"]): r for r in store.evaluations()}
        statuses = [rows[i]["status"] for i in sorted(new)]
        assert statuses == [v["status"] for v in scene.verdicts]
        key = rows[max(new)]["config_key"]
        current = store.find_evaluation(scene.target_id, scene.forger_hash, key)
    assert current is not None and current["status"] == scene.by_name("c10_persistent_forgery.py")["status"]
    assert current["status"] != "faster"


def test_the_secret_never_reaches_a_candidate(scene: Scene) -> None:
    assert not scene.exfil.exists() or scene.secret not in scene.exfil.read_text(errors="replace")
    assert not any(scene.secret.encode() in data for data in scene.received)
    assert scene.secret not in scene.stdout  # c08 prints what it found: it would land in the diagnostics
    assert scene.secret not in scene.stderr


def test_no_connection_reaches_a_listener_on_the_host_loopback(scene: Scene) -> None:
    assert scene.received == []


def test_shared_memory_counts_against_the_memory_limit(scene: Scene) -> None:
    # c09 maps and touches 3 GiB of MAP_SHARED memory under --max-memory 256M; computes honestly if granted
    v = scene.by_name("c09_resource_limits.cpp")
    assert v["status"] in ("crash", "runtime_error", "rejected"), (v["status"], v["reasons"])


# ----------------------------------------------------------------------------- the instruction timer


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> list[Verdict]:
    if shutil.which("valgrind") is None:
        pytest.skip("--timer instructions needs valgrind")
    project = tmp_path_factory.mktemp("counted")
    shutil.copy(ATTACKS / "ref.py", project / "ref.py")
    names = ("honest.cpp", "c06_callgrind_toggle.cpp", "c13_uncounted_child.cpp")
    specs = [CandidateSpec.from_path(materialize(n, project, {})) for n in names]
    config = CheckConfig(timer="instructions", timeout=60, time_budget=0.1)
    with Oracle(parse_reference(str(project / "ref.py")), config, project, candidates_hint=specs) as oracle:
        return oracle.check(specs)


def test_the_instruction_timer_still_counts_an_honest_kernel(counted: list[Verdict]) -> None:
    honest = counted[0]
    assert honest.correct, honest.reasons


def test_a_candidate_cannot_switch_the_instruction_timer_off(counted: list[Verdict]) -> None:
    v = counted[1]
    assert v.status != "faster", v.reasons


def test_work_the_instruction_timer_cannot_see_is_caught_by_the_wall_clock(counted: list[Verdict]) -> None:
    # c13 works in a child process per call: few instructions counted, slower on the wall clock
    v = counted[2]
    assert v.status == "rejected", (v.status, v.reasons)
    assert "wall time says" in v.reasons[0], v.reasons
    assert v.diagnostics["wall"]["status"] in ("faster", "not_faster"), v.diagnostics["wall"]


# ----------------------------------------------------------------------------- RL reward and Ray


@dataclass
class Elsewhere:
    """Three attackers checked by another front end: clock (c01), escape (c07), exfiltration (c08)."""

    verdicts: list[Verdict]
    leftovers: list[int]
    bystander_state: str
    received: list[bytes]
    spills: list[Path]
    secret: str


def _elsewhere(tmp: Path, run: Any) -> Elsewhere:
    """Materialize c01, c07 and c08 under ``tmp`` and hand them to ``run(root, sources)``.

    c07's victim is a bystander process of ours (its pid in the pidfile, the marker in its
    environment), never this test process.
    """
    root, outside = tmp / "root", tmp / "outside"
    root.mkdir()
    outside.mkdir()
    shutil.copy(ATTACKS / "ref.py", root / "ref.py")
    marker, secret = f"mxa{uuid.uuid4().hex[:10]}", f"s3cr3t-{uuid.uuid4().hex}"
    bystander = subprocess.Popen(["sleep", "600"], env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), MARKER_NAME: marker,
                                                        SECRET_NAME: secret}, start_new_session=True)
    pidfile = root / "victim.pid"
    pidfile.write_text(f"{bystander.pid}\n")
    listener = Listener()
    listener.start()
    exfil = outside / "exfil.txt"
    values = {"MARKER": marker, "PIDFILE": str(pidfile), "EXFIL": str(exfil), "PORT": str(listener.port)}
    sources = [materialize(n, tmp, values) for n in ("c01_clock.cpp", "c07_escape.cpp", "c08_secrets_network.cpp")]
    os.environ[SECRET_NAME] = secret
    try:
        verdicts = run(root, sources)
    finally:
        del os.environ[SECRET_NAME]
        leftovers = settle_and_collect(marker, spare={bystander.pid})
        listener.stop()
        state = state_of(bystander.pid)
        bystander.kill()
        bystander.wait()
    return Elsewhere(verdicts, leftovers, state, list(listener.received), [exfil], secret)


@pytest.fixture(scope="module")
def via_rl(tmp_path_factory: pytest.TempPathFactory) -> Elsewhere:
    from pytest_maxcode.rl import OracleReward

    def run(root: Path, sources: list[Path]) -> list[Verdict]:
        problem = root / "KernelBench" / "level1" / "1_chain.py"
        problem.parent.mkdir(parents=True)
        shutil.copy(root / "ref.py", problem)
        completions = [f"Fused it.\n\n```cpp\n{p.read_text().rstrip()}\n```\n" for p in sources]
        with OracleReward(root, CheckConfig(time_budget=0.3, timeout=30), device="cpu") as reward:
            values = reward(prompts=["p"] * len(sources), completions=completions, problem=[str(problem)] * len(sources))
            assert len(values) == len(sources)
            return list(reward.last_verdicts)

    return _elsewhere(tmp_path_factory.mktemp("rl"), run)


@pytest.fixture(scope="module")
def via_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Elsewhere]:
    ray = pytest.importorskip("ray")
    from pytest_maxcode.oracle.ray_executor import RayOracle
    from pytest_maxcode.oracle.reference import ReferenceSpec

    started = not ray.is_initialized()

    def run(root: Path, sources: list[Path]) -> list[Verdict]:
        if started:  # here, so Ray's own processes (the candidates' ancestors) hold the secret too
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        specs = [CandidateSpec.from_path(p) for p in sources]
        ref = ReferenceSpec("module", root / "ref.py", "Model")
        with RayOracle(ref, CheckConfig(time_budget=0.3, timeout=30), root, candidates_hint=specs, actors=1) as pool:
            return pool.check(specs)

    try:
        yield _elsewhere(tmp_path_factory.mktemp("ray"), run)
    finally:
        if started:
            ray.shutdown()


@pytest.fixture(params=["rl", "ray"])
def elsewhere(request: pytest.FixtureRequest) -> Elsewhere:
    return request.getfixturevalue(f"via_{request.param}")


def test_the_clock_attack_gets_no_reward_through_rl_or_ray(elsewhere: Elsewhere) -> None:
    assert elsewhere.verdicts[0].status != "faster", elsewhere.verdicts[0].reasons


def test_no_process_outlives_an_rl_or_ray_check_and_the_victim_lives(elsewhere: Elsewhere) -> None:
    assert elsewhere.leftovers == []
    assert elsewhere.verdicts[1].status not in CORRECT, elsewhere.verdicts[1].reasons
    assert elsewhere.bystander_state in ("R", "S", "D"), elsewhere.bystander_state  # neither killed (Z: our child) nor stopped (T)


def test_nothing_leaves_an_rl_or_ray_check(elsewhere: Elsewhere) -> None:
    assert [p for p in elsewhere.spills if p.exists()] == []
    assert elsewhere.received == []
    assert not any(elsewhere.secret in r for v in elsewhere.verdicts for r in [json.dumps(v.to_json())])
    assert elsewhere.verdicts[2].status in CORRECT, elsewhere.verdicts[2].reasons  # c08 itself is an honest kernel
