"""The OS sandbox: hostile programs, written the way a reward-hacking candidate would, achieve nothing.

Each test runs a small program inside the sandbox this machine offers (bubblewrap in CI,
which installs it) and checks from outside that the attack did not land.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from pytest_maxcode.errors import MaxcodeError
from pytest_maxcode.sandbox.isolation import Isolation, Limits, prepare, resolve, works

STRONG = [k for k in ("bwrap", "unshare") if works(k) is None]
needs_namespaces = pytest.mark.skipif(not STRONG, reason="this machine can make no namespaces (install bubblewrap)")


def run_in(isolation: Isolation, job: Path, code: str, limits: Limits = Limits(), timeout: float = 60) -> subprocess.CompletedProcess[str]:
    job.mkdir(parents=True, exist_ok=True)
    box = prepare([sys.executable, "-c", textwrap.dedent(code)], isolation, job, limits)
    proc = subprocess.Popen(box.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            stdin=subprocess.DEVNULL, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        box.cleanup()
    return subprocess.CompletedProcess(box.argv, proc.returncode, out, err)


@pytest.fixture(params=STRONG or ["none"])
def iso(request: pytest.FixtureRequest) -> Isolation:
    if request.param == "none":
        pytest.skip("this machine can make no namespaces (install bubblewrap)")
    return resolve(request.param)


def test_auto_takes_the_strongest_kind_that_works_here() -> None:
    auto = resolve("auto")
    assert auto.kind == (STRONG[0] if STRONG else "none")
    if auto.kind == "none":
        assert auto.reason and auto.weak
    assert resolve("none").missing and "no namespaces" in resolve("none").describe()


def test_an_unknown_or_missing_kind_is_one_line() -> None:
    with pytest.raises(MaxcodeError, match="^sandbox 'jail': expected auto, bwrap, unshare, none$"):
        resolve("jail")


@needs_namespaces
def test_an_honest_program_runs_and_writes_its_job_directory(iso: Isolation, tmp_path: Path) -> None:
    r = run_in(iso, tmp_path / "job", "open('out.txt', 'w').write('ok'); print(open('out.txt').read())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
    assert (tmp_path / "job" / "out.txt").read_text() == "ok"


@needs_namespaces
def test_a_helper_process_that_escapes_into_the_background_dies_with_the_sandbox(iso: Isolation, tmp_path: Path) -> None:
    marker = f"maxcode-escapee-{uuid.uuid4().hex}"
    r = run_in(iso, tmp_path / "job", f"""
        import os, subprocess
        # double fork, new session, a new name: the shapes that outrun a list-then-kill cleanup
        subprocess.Popen(["/bin/sh", "-c", "exec -a {marker} sleep 300"], start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("/bin/sh", ["/bin/sh", "-c", "exec -a {marker} sleep 300"])
            os._exit(0)
        print("spawned")
    """)
    assert r.stdout.strip() == "spawned", r.stderr
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == "", "a process of the sandbox outlived it"


@needs_namespaces
def test_the_secrets_of_its_ancestors_are_out_of_reach(iso: Isolation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sk-fake-{uuid.uuid4().hex}"
    monkeypatch.setenv("MAXCODE_TEST_FAKE_SECRET", secret)  # in this process's environ, the sandbox's ancestor
    r = run_in(iso, tmp_path / "job", f"""
        import glob
        found = 0
        for path in glob.glob("/proc/[0-9]*/environ"):
            try:
                found += b"{secret}" in open(path, "rb").read()
            except OSError:
                pass
        print("found", found)
    """)
    assert r.stdout.strip() == "found 0", r.stdout + r.stderr
    assert secret not in r.stdout + r.stderr


@needs_namespaces
def test_a_connection_to_a_listener_on_loopback_never_arrives(iso: Isolation, tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    r = run_in(iso, tmp_path / "job", f"""
        import socket
        try:
            s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
            s.sendall(b"stolen")
            print("sent")
        except OSError as e:
            print("refused")
    """)
    # a connection that reached the listener waits in its queue, accepted or not: no need to
    # wait for one after the process has ended
    server.setblocking(False)
    arrived: list[bytes] = []
    try:
        conn, _ = server.accept()
        conn.settimeout(2)
        arrived.append(conn.recv(100))
    except BlockingIOError:
        pass
    server.close()
    assert arrived == [] and r.stdout.strip() == "refused", r.stdout + r.stderr


@needs_namespaces
def test_files_outside_the_job_directory_cannot_be_written(iso: Isolation, tmp_path: Path) -> None:
    victim = tmp_path / "project.py"  # under /tmp: bwrap's is an empty tmpfs of its own, unshare's read-only
    victim.write_text("original")
    planted = Path.cwd() / f"maxcode-planted-{uuid.uuid4().hex}.so"  # outside /tmp: read-only inside
    r = run_in(iso, tmp_path / "job", f"""
        for path in ({str(victim)!r}, {str(planted)!r}):
            try:
                open(path, "w").write("forged")
                print("wrote", path)
            except OSError:
                print("refused")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "refused", r.stdout
    assert victim.read_text() == "original" and not planted.exists()


@needs_namespaces
def test_no_capability_inside_so_no_remount_makes_the_view_writable(iso: Isolation, tmp_path: Path) -> None:
    # as root (CI, containers), bwrap left the sandbox all of root's capabilities, and unshare
    # leaves its namespace's: "mount -o remount,rw /" then made the project writable
    planted = Path.cwd() / f"maxcode-planted-{uuid.uuid4().hex}.txt"
    r = run_in(iso, tmp_path / "job", f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        caps = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff:"))
        remounted = 0
        for line in open("/proc/self/mountinfo"):
            mp = line.split()[4].encode()
            for flags in (32 | 4096, 32):  # MS_REMOUNT | MS_BIND, MS_REMOUNT: read-write again
                remounted += libc.mount(None, mp, None, flags, None) == 0
        def plant():
            try:
                open({str(planted)!r}, "w").write("forged")
                return 1
            except OSError:
                return 0
        wrote = plant()
        # a user namespace of its own has every capability again, over copies of mounts that stay read-only
        nested = libc.unshare(0x10000000 | 0x00020000) == 0  # CLONE_NEWUSER | CLONE_NEWNS
        for line in open("/proc/self/mountinfo"):
            for flags in (32 | 4096, 32):
                libc.mount(None, line.split()[4].encode(), None, flags, None)
        print(caps, remounted, wrote, plant() if nested else "no-nested-namespace")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:3] == ["0000000000000000", "0", "0"], r.stdout
    assert r.stdout.split()[3] in ("0", "no-nested-namespace"), r.stdout
    assert not planted.exists()


@needs_namespaces
def test_it_cannot_signal_the_process_that_started_it(iso: Isolation, tmp_path: Path) -> None:
    r = run_in(iso, tmp_path / "job", f"""
        import os, signal
        try:
            os.kill({os.getpid()}, signal.SIGSTOP)
            print("signalled")
        except OSError:
            print("no such process")
    """)
    assert r.stdout.strip() == "no such process", r.stdout + r.stderr


@needs_namespaces
def test_shared_memory_counts_against_the_memory_limit(iso: Isolation, tmp_path: Path) -> None:
    r = run_in(iso, tmp_path / "job", """
        import mmap
        size = 1 << 30
        m = mmap.mmap(-1, size, flags=mmap.MAP_SHARED)
        for i in range(0, size, 4096):
            m[i] = 1
        print("held 1 GiB of shared memory")
    """, limits=Limits(memory=256 << 20))
    assert "held" not in r.stdout, "MAP_SHARED memory escaped the limit"
    assert r.returncode != 0


@needs_namespaces
def test_a_huge_file_in_the_job_directory_is_stopped(iso: Isolation, tmp_path: Path) -> None:
    r = run_in(iso, tmp_path / "job", """
        with open("big", "wb") as f:
            for _ in range(64):
                f.write(b"x" * (1 << 20))
        print("wrote 64 MiB")
    """, limits=Limits(file_size=4 << 20))
    assert "wrote" not in r.stdout and r.returncode != 0
    assert (tmp_path / "job" / "big").stat().st_size <= 4 << 20



@needs_namespaces
def test_many_files_in_the_private_tmp_and_shm_stop_at_their_size(iso: Isolation, tmp_path: Path) -> None:
    # 64 files of 32 MiB, each under the per-file limit: only the size of the tmpfs stops them
    # (under unshare /tmp is the read-only one of the host, and writing there fails at once)
    folders = ["/dev/shm"] + (["/tmp"] if iso.kind == "bwrap" else [])
    for folder in folders:
        r = run_in(iso, tmp_path / "job", f"""
            import sys
            for k in range(64):
                with open("{folder}/fill.%d" % k, "wb") as f:
                    for _ in range(32):
                        f.write(b"x" * (1 << 20))
                print(k + 1, flush=True)
            print("wrote 2 GiB")
        """, limits=Limits(file_size=64 << 20, scratch_bytes=64 << 20))
        assert "wrote" not in r.stdout and r.returncode != 0, folder
        assert max(map(int, r.stdout.split() or ["0"])) <= 2, (folder, r.stdout)
        assert r.stderr.strip().splitlines()[-1] == "OSError: [Errno 28] No space left on device", r.stderr[-500:]


@needs_namespaces
def test_a_fork_bomb_meets_the_process_limit(iso: Isolation, tmp_path: Path) -> None:
    if "processes not at all" in " ".join(iso.missing):
        pytest.skip("no writable pids cgroup here: the limit on processes is not enforced (Isolation.missing says so)")
    r = run_in(iso, tmp_path / "job", """
        import os, time
        n = 0
        try:
            for _ in range(500):
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                n += 1
        except OSError:
            pass
        print("forked", n)
    """, limits=Limits(pids=40), timeout=60)
    forked = int(r.stdout.split()[-1]) if r.stdout.strip() else 0
    assert forked < 40, r.stdout + r.stderr


def _freezer_root() -> Path | None:
    from pytest_maxcode.sandbox.isolation import _cgroup_roots

    return next((base for controller, base in _cgroup_roots() if controller == "freezer"), None)


@pytest.mark.skipif(_freezer_root() is None, reason="no writable freezer cgroup on this machine")
def test_the_frozen_leftovers_of_a_killed_run_are_swept() -> None:
    """A run killed while its sandbox was frozen leaves processes frozen forever; the next
    run's first sandbox kills them and removes the cgroup. A live run's cgroups are left alone."""
    from pytest_maxcode.sandbox.isolation import Cgroups, sweep_stale

    root = _freezer_root()
    assert root is not None
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a maxcode process that no longer exists
    stale, live = root / f"maxcode-{gone.pid}-{uuid.uuid4().hex[:8]}", root / f"maxcode-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    sleepers = []
    for folder in (stale, live):
        folder.mkdir()
        p = subprocess.Popen(["sleep", "300"])
        (folder / "cgroup.procs").write_text(str(p.pid))
        sleepers.append(p)
        assert Cgroups({"freezer": folder}).freeze(True)
    try:
        removed = sweep_stale()
        assert stale in removed and not stale.exists()
        assert sleepers[0].wait(timeout=10) == -9  # killed, not left frozen
        assert live.exists() and sleepers[1].poll() is None
    finally:
        Cgroups({"freezer": live}).cleanup()
        for p in sleepers:
            p.kill()
            p.wait()
    assert not live.exists()


def test_a_fallback_warning_says_what_is_and_is_not_enforced() -> None:
    """Where ``auto`` cannot make the strongest sandbox, its one line names what it fell back
    to, what that enforces and what it does not, and why."""
    from pytest_maxcode.oracle.check import sandbox_warning
    from pytest_maxcode.sandbox.isolation import _isolation

    line = sandbox_warning(_isolation("unshare", "bwrap is not installed (apt-get install bubblewrap)"))
    assert line is not None and "\n" not in line
    assert line.startswith("sandbox unshare (not enforced: compilers see the whole filesystem")
    assert ("enforced: user, PID, network, IPC, UTS and mount namespaces, a read-only filesystem with a private job "
            "directory, no network, one kill ends every process") in line
    assert line.endswith("(fell back: bwrap is not installed (apt-get install bubblewrap))")
    none = sandbox_warning(_isolation("none", "bwrap is not installed; unshare: no user namespaces"))
    assert none is not None and none.startswith("candidates run WITHOUT a sandbox (bwrap is not installed; unshare")
