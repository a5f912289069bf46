"""OS isolation for every process that runs candidate code (DESIGN.md section 5.0).

A candidate is a native program: no check inside its own process can hold. What holds is
the kernel's: new user, PID, network, IPC and UTS namespaces, a read-only view of the
filesystem with one private writable job directory, limits that count shared memory and
processes, and one kill that ends everything the sandbox made.

Kinds, strongest first:

- ``bwrap``: bubblewrap (Debian/Ubuntu package ``bubblewrap``). All namespaces, the
  read-only view, a private ``/tmp`` and ``/dev/shm`` (tmpfs of :attr:`Limits.scratch_bytes` each),
  the user's credential files masked, ``--die-with-parent`` so that killing the sandbox's root
  process ends its PID namespace.
- ``unshare``: util-linux ``unshare`` where bubblewrap is missing. User, PID, network, IPC,
  UTS and mount namespaces and a private ``/proc``; every mount remounted read-only but the
  job folder, a private ``/dev/shm``, the credential files covered (:data:`_READ_ONLY_VIEW`).
  Its compilers see the whole filesystem (said so).
- ``none``: only when asked for; every verdict and report says so.

Limits go through the cgroup controllers this process may write (memory, which counts
``MAP_SHARED`` pages; pids, which counts threads), else through rlimits set by the small
shell that starts the sandbox (``RLIMIT_AS`` also counts shared mappings; nothing counts
processes then, and :attr:`Isolation.missing` says it).
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import MaxcodeError

KINDS = ("bwrap", "unshare", "none")
#: what ``auto`` picks from, in order
STRONGEST_FIRST = ("bwrap", "unshare")
#: credential files a candidate has no business reading, masked under bubblewrap
CREDENTIALS = (".ssh", ".aws", ".azure", ".config/gh", ".config/gcloud", ".docker", ".kube", ".gnupg",
               ".netrc", ".git-credentials", ".pypirc", ".npmrc", ".huggingface", ".cache/huggingface")
WHAT = {
    "bwrap": ("user, PID, network, IPC and UTS namespaces", "a read-only filesystem with a private job directory",
              "no network", "one kill ends every process"),
    "unshare": ("user, PID, network, IPC, UTS and mount namespaces", "a read-only filesystem with a private job directory",
                "no network", "one kill ends every process"),
    "none": (),
}
NOT_ENFORCED = {
    "bwrap": (),
    "unshare": ("compilers see the whole filesystem (install bubblewrap: an #include could quote any file of this user)",
                ("C++ programs see the whole filesystem but their test cases (install bubblewrap: a copy of the expected "
                 "outputs elsewhere, such as in the project's git history, stays readable)")),
    "none": ("no namespaces: the candidate sees the network, every process and every file of this user",),
}
#: what a compiler sees of the system under ``view="toolchain"``, besides the interpreter, this
#: package, the folders on PATH and its own job: no home, no project, no other file whose text
#: an ``#include`` could put into an error message, a prompt and a pull request
TOOLCHAIN_VIEW = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache", "/etc/ld.so.conf",
                  "/etc/ld.so.conf.d", "/etc/alternatives")
#: under ``unshare``, run inside the new mount namespace before the command, with the writable
#: folders, ``--``, the credential paths to cover, ``--`` and the command as arguments: the
#: writable folders become mounts of their own, ``/dev/shm`` a private tmpfs, the credentials
#: are covered, and every other mount is remounted read-only (``/tmp`` stays read-only rather
#: than private: the job's folder is its TMPDIR, and a private ``/tmp`` would hide the folders
#: under it that the command must read, which ``unshare`` cannot bind back as bwrap does). The
#: command runs with no capability at all (``setpriv``, bounding set cleared, so not even an exec
#: as the namespace's root gets any): with the namespace's capabilities it could remount the
#: read-only view read-write, and write the project as the user who ran maxcode
_READ_ONLY_VIEW = r"""
shm=$1; shift
keep=" "
while [ "$1" != -- ]; do mount --bind "$1" "$1" || exit 125; keep="$keep$1 "; shift; done
shift
cd "$PWD" || exit 125
mount -t tmpfs -o "$shm" tmpfs /dev/shm || exit 125
while [ "$1" != -- ]; do
  if [ -d "$1" ]; then mount -t tmpfs -o size=1m tmpfs "$1"; elif [ -e "$1" ]; then mount --bind /dev/null "$1"; fi
  shift
done
shift
while read -r _ _ _ _ mp _; do
  mp=$(printf '%b' "$mp")
  case "$keep" in *" $mp "*) continue;; esac
  case "$mp" in /proc|/proc/*|/dev/shm|/dev/pts) continue;; esac
  mount -o remount,bind,ro "$mp" 2>/dev/null
done < /proc/self/mountinfo
exec setpriv --inh-caps=-all --ambient-caps=-all --bounding-set=-all --no-new-privs -- "$@"
"""
#: what bwrap gives each sandbox a tmpfs of its own for
PRIVATE_TMPFS = ("/tmp", "/dev/shm")
#: the shell that joins the cgroups and sets the rlimits, then execs the sandbox (no pre-exec
#: hook in Python: that forces a full fork of a process that may hold gigabytes)
_STARTER = 'while [ "$1" != -- ]; do eval "$1" || exit 125; shift; done; shift; exec "$@"'


@dataclass(frozen=True)
class Limits:
    """What a sandbox may use; None leaves a limit off."""

    memory: int | None = 4 << 30
    pids: int | None = 256
    file_size: int | None = 1 << 30
    #: the size of each private tmpfs (``/tmp`` and ``/dev/shm``): RAM a candidate could
    #: otherwise fill with files; None leaves the kernel's default (half the RAM)
    scratch_bytes: int | None = 1 << 30
    cpu_seconds: int | None = None
    #: all the files of the job folder together (``disk.FolderWatch``): ``file_size`` caps each
    #: file only, and the job folder is on the host's disk
    job_bytes: int | None = 2 << 30
    #: a freezer cgroup, so the trusted side can stop everything inside while it times the reference
    freezable: bool = False


@dataclass(frozen=True)
class Isolation:
    """The sandbox in force: named in every verdict and report."""

    kind: str
    enforced: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    reason: str = ""  # why ``auto`` fell back, when it did

    def describe(self) -> str:
        text = self.kind
        if self.missing:
            text += " (not enforced: " + "; ".join(self.missing) + ")"
        return text

    @property
    def weak(self) -> bool:
        return bool(self.missing)

    @property
    def private_scratch(self) -> tuple[str, ...]:
        """The writable folders this kind gives each sandbox its own of (besides its job folder)."""
        return {"bwrap": PRIVATE_TMPFS, "unshare": ("/dev/shm",)}.get(self.kind, ())


@functools.lru_cache(maxsize=None)
def works(kind: str) -> str | None:
    """None if ``kind`` can make its namespaces here, else the one-line reason it cannot."""
    if kind == "none":
        return None
    tool = {"bwrap": "bwrap", "unshare": "unshare"}[kind]
    if shutil.which(tool) is None:
        return f"{tool} is not installed" + (" (apt-get install bubblewrap)" if kind == "bwrap" else "")
    if kind == "unshare" and shutil.which("setpriv") is None:
        return "setpriv is not installed (util-linux): without it the sandbox would keep its namespace's capabilities"
    argv = _namespace_argv(kind, Path("/"), ()) + ["/bin/true"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{tool} failed to start: {e}"
    if r.returncode != 0:
        first = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[0]
        hint = ""
        if "ermission" in first or "Operation not permitted" in first:
            hint = "; user namespaces are off here (sysctl kernel.unprivileged_userns_clone=1, or kernel.apparmor_restrict_unprivileged_userns=0)"
        return f"{tool} cannot make namespaces here: {first}{hint}"
    return None


def resolve(requested: str = "auto") -> Isolation:
    """The isolation for ``requested`` (auto, bwrap, unshare or none), or one line saying why not."""
    if requested not in ("auto", *KINDS):
        raise MaxcodeError(f"sandbox {requested!r}: expected auto, {', '.join(KINDS)}")
    if requested == "auto":
        reasons = []
        for kind in STRONGEST_FIRST:
            why = works(kind)
            if why is None:
                return _isolation(kind, "; ".join(reasons))
            reasons.append(why)
        return _isolation("none", "; ".join(reasons))
    why = works(requested)
    if why is not None:
        raise MaxcodeError(f"sandbox {requested}: {why}; use --maxcode-sandbox=auto to take the strongest available")
    return _isolation(requested, "")


def _isolation(kind: str, reason: str) -> Isolation:
    missing = list(NOT_ENFORCED[kind])
    if kind != "none" and not _cgroup_roots():
        missing.append("no writable cgroup: memory is limited by RLIMIT_AS, the number of processes not at all")
    return Isolation(kind, WHAT[kind], tuple(missing), reason)


def _namespace_argv(kind: str, job_dir: Path, extra_writable: Sequence[Path], readable: Sequence[Path] = (),
                    devices: Sequence[Path] = (), mounts: Sequence[tuple[Path, Path]] = (), view: str = "all",
                    scratch: int | None = Limits.scratch_bytes, hidden: Sequence[Path] = ()) -> list[str]:
    """Nine parameters because they are :func:`prepare`'s mounts, passed on; ``scratch`` sizes each private tmpfs."""
    if kind == "none":
        return []
    hidden = _coverable(hidden, [job_dir, *extra_writable, *readable])
    if kind == "unshare":
        writable = [str(p) for p in (job_dir, *extra_writable) if str(p) != "/"]
        covered = [str(p) for p in (*hidden, *_credentials())]
        return ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc",
                "--net", "--ipc", "--uts", f"--wd={job_dir}", "--", "/bin/sh", "-c", _READ_ONLY_VIEW, "maxcode-view",
                f"size={scratch},mode=1777" if scratch else "mode=1777", *writable, "--", *covered, "--"]
    # no capability inside: run as root, bwrap would otherwise leave the sandbox all of root's,
    # and one remount makes the read-only view writable (the project, the store, the system)
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if view == "toolchain":
        argv += _system_view(TOOLCHAIN_VIEW)
    else:
        argv += ["--ro-bind", "/", "/"]
    size = ["--size", str(scratch)] if scratch else []
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for path in PRIVATE_TMPFS:
        argv += [*size, "--tmpfs", path]
    binds = _beside_the_system(readable) if view == "toolchain" else _hidden_by_tmpfs(readable)
    for path in binds:
        argv += ["--ro-bind", str(path), str(path)]
    for path in [*(h for h in hidden if _in_view(h, view, binds)), *_credentials()]:  # after the binds above: one may hold the home folder
        if path.is_dir():
            argv += ["--tmpfs", str(path)]
        else:
            argv += ["--ro-bind", "/dev/null", str(path)]
    for dev in devices:
        argv += ["--dev-bind", str(dev), str(dev)]
    for path in (job_dir, *extra_writable):
        if str(path) != "/":
            argv += ["--bind", str(path), str(path)]
    for source, dest in mounts:
        argv += ["--bind", str(source), str(dest)]
    if str(job_dir) != "/":
        argv += ["--chdir", str(job_dir)]
    return argv + ["--"]


def _interpreter_paths() -> list[Path]:
    """The Python running us: its prefixes (a virtualenv's and the base installation's)."""
    return [Path(sys.prefix), Path(sys.exec_prefix), Path(sys.base_prefix)]


def _runtime_paths() -> list[Path]:
    """What any sandboxed command of ours needs to read even where it lives under ``/tmp``: the
    Python running us (a virtualenv in ``/tmp`` is common in CI), this package (its headers and
    the worker), the import path, and the executables on PATH (ninja, the compilers)."""
    paths = [*_interpreter_paths(), Path(__file__).resolve().parents[2]]
    paths += [Path(p) for p in sys.path if p]
    paths += [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return paths


def _credentials() -> list[Path]:
    """The user's credential files and folders that exist (:data:`CREDENTIALS`), to be covered."""
    home = Path.home()
    return [home / rel for rel in CREDENTIALS if (home / rel).exists()]


def _system_view(paths: Sequence[str]) -> list[str]:
    """bwrap arguments that show these system paths read-only, links as links (``/lib`` is a
    link to ``usr/lib`` on a merged-/usr system), and nothing else of the root."""
    argv: list[str] = []
    for p in paths:
        if os.path.islink(p):
            argv += ["--symlink", os.readlink(p), p]
        elif os.path.exists(p):
            argv += ["--ro-bind", p, p]
    return argv


def _beside_the_system(paths: Sequence[Path]) -> list[Path]:
    """The folders among ``paths`` that :data:`TOOLCHAIN_VIEW` does not already show (``/bin``
    on PATH is ``/usr/bin``; binding it again over the link would fail)."""
    shown = [Path(os.path.realpath(p)) for p in TOOLCHAIN_VIEW if os.path.isdir(p)]
    return [p for p in _outermost(paths) if not any(Path(os.path.realpath(p)).is_relative_to(v) for v in shown)]


def _toolchain_paths() -> list[Path]:
    """What a compiler run of ours reads outside the system folders: the interpreter (ninja may
    be a Python entry point), this package's own folder (the DLPack header; not its parent, which
    in a source checkout is a project) and the folders on PATH (the compilers, ninja). Unlike
    :func:`_runtime_paths`, not the import path: it names the project."""
    paths = [*_interpreter_paths(), Path(__file__).resolve().parents[1]]
    # a relative entry ("." on PATH) would name the folder maxcode runs in: the project
    return paths + [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(p)]


def _coverable(hidden: Sequence[Path], needed: Sequence[Path]) -> list[Path]:
    """The existing folders among ``hidden`` that hold none of the ``needed`` ones: a cover over
    one that did would take away what the command must read or write. Links resolved: the
    cover goes over the folder itself."""
    need = [Path(os.path.realpath(p)) for p in needed if str(p) != "/"]
    folders = [Path(os.path.realpath(p)) for p in hidden if os.path.isdir(p)]
    return [h for h in folders if not any(n.is_relative_to(h) for n in need)]


def _in_view(path: Path, view: str, binds: Sequence[Path]) -> bool:
    """Whether bwrap's view shows ``path`` (resolved): under a folder bound into it, or under the
    system's folders (``toolchain``) or the root (``all``) but not on a private tmpfs. A cover of a
    folder it does not show would make that folder and its parents, on a writable tmpfs."""
    if any(path.is_relative_to(os.path.realpath(b)) for b in binds):
        return True
    if any(path.is_relative_to(t) for t in PRIVATE_TMPFS):
        return False
    return view != "toolchain" or any(path.is_relative_to(os.path.realpath(v)) for v in TOOLCHAIN_VIEW if os.path.exists(v))


def _hidden_by_tmpfs(paths: Sequence[Path]) -> list[Path]:
    """The folders under the sandbox's private /tmp or /dev/shm that it must still read, outermost only."""
    hidden = [Path(p) for p in PRIVATE_TMPFS]
    return _outermost([p for p in paths if any(Path(os.path.abspath(p)).is_relative_to(h) for h in hidden)])


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """The existing folders among ``paths`` (other than ``/``, ``/tmp`` and ``/dev/shm`` themselves), outermost only."""
    skip = {Path("/"), *map(Path, PRIVATE_TMPFS)}
    inside = sorted({q for q in (Path(os.path.abspath(p)) for p in paths) if q.exists() and q not in skip},
                    key=lambda q: len(q.parts))
    kept: list[Path] = []
    for p in inside:
        if not any(p.is_relative_to(k) for k in kept):
            kept.append(p)
    return kept


@functools.lru_cache(maxsize=None)
def _cgroup_roots() -> tuple[tuple[str, Path], ...]:
    """(controller, this process's writable cgroup folder) for memory, pids and freezer, v1 or v2."""
    out: list[tuple[str, Path]] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return ()
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if controllers == "":  # cgroup v2: one tree, controllers listed in the folder
            base = Path("/sys/fs/cgroup") / rel.lstrip("/")
            try:
                enabled = (base / "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            for c in ("memory", "pids"):
                if c in enabled and os.access(base, os.W_OK):
                    out.append((c, base))
            if os.access(base, os.W_OK):
                out.append(("freezer", base))  # v2: every cgroup but the root can be frozen
            continue
        for c in controllers.split(","):
            if c in ("memory", "pids", "freezer"):
                base = Path("/sys/fs/cgroup") / c / rel.lstrip("/")
                if os.access(base, os.W_OK):
                    out.append((c, base))
    return tuple(dict(out).items())


@dataclass
class Cgroups:
    """The cgroup folders of one sandbox; removed by :meth:`cleanup`."""

    folders: dict[str, Path] = field(default_factory=dict)
    _fd: int | None = field(default=None, repr=False, compare=False)
    _fd_path: str = field(default="", repr=False, compare=False)

    @classmethod
    def make(cls, limits: Limits) -> Cgroups:
        global _swept
        if not _swept:
            _swept = True
            sweep_stale()
        made = cls()
        name = f"maxcode-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        for controller, base in _cgroup_roots():
            value = {"memory": limits.memory, "pids": limits.pids, "freezer": limits.freezable or None}[controller]
            if value is None:
                continue
            folder = base / name
            try:
                folder.mkdir(exist_ok=True)  # v2: one folder serves every controller
                v2 = (folder / "memory.max").exists() or (folder / "cgroup.type").exists()
                if controller == "freezer":
                    pass  # nothing to set: the folder is what gets frozen
                elif controller == "memory":
                    (folder / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(value))
                    if not v2 and (folder / "memory.memsw.limit_in_bytes").exists():
                        (folder / "memory.memsw.limit_in_bytes").write_text(str(value))
                    elif v2 and (folder / "memory.swap.max").exists():
                        (folder / "memory.swap.max").write_text("0")
                else:
                    (folder / "pids.max").write_text(str(value))
            except OSError:
                _rmdir(folder)
                continue
            made.folders[controller] = folder
        return made

    def join_commands(self) -> list[str]:
        return [f"echo $$ > '{folder / 'cgroup.procs'}'" for folder in self.folders.values()]

    @property
    def freezable(self) -> bool:
        return "freezer" in self.folders

    def freeze(self, frozen: bool = True, timeout: float = 5.0) -> bool:
        """Stop (or resume) every process inside at once; True when the kernel confirms it.

        A frozen process cannot run, whatever threads or children it made, so nothing of a
        candidate runs while the reference is timed or its outputs are read. (A thaw that must
        come after a clock reading is :meth:`thaw_call`'s.)
        """
        state = self.freezer_state()
        if state is None:
            return False
        path, thawed, frozen_value = Path(state[0]), state[1], state[2]
        v2 = path.name == "cgroup.freeze"
        if frozen and not v2:
            _hold_freezer_key(path.parent.parent)
        try:
            path.write_bytes(frozen_value if frozen else thawed)
        except OSError:
            return False
        want = ("frozen 1" if frozen else "frozen 0") if v2 else ("FROZEN" if frozen else "THAWED")
        end = time.monotonic() + timeout
        while True:
            try:
                text = (path.parent / ("cgroup.events" if v2 else "freezer.state")).read_text()
            except OSError:
                return False
            if want in text.splitlines() or (not v2 and text.strip() == want):
                return True
            if time.monotonic() > end:
                return False
            time.sleep(0.0001)

    def freezer_state(self) -> tuple[str, bytes, bytes] | None:
        """The freezer's state file, and what a write of it takes to thaw and to freeze (v1 or v2)."""
        folder = self.folders.get("freezer")
        if folder is None:
            return None
        if (folder / "cgroup.freeze").exists():
            return str(folder / "cgroup.freeze"), b"0", b"1"
        return str(folder / "freezer.state"), b"THAWED", b"FROZEN"

    def thaw_call(self) -> Callable[[], None] | None:
        """The thaw as one write to a file held open (the last step of a resume, made after the
        trusted clock has started: the kernel wakes the threads inside one by one within the
        write, and the first one woken could start on its inputs before the clock otherwise).
        None without a freezer cgroup; a failed write raises OSError."""
        state = self.freezer_state()
        if state is None:
            return None
        path, thawed, _ = state
        if self._fd is None or self._fd_path != path:
            self._close_fd()
            self._fd, self._fd_path = os.open(path, os.O_WRONLY | os.O_CLOEXEC), path
        fd = self._fd

        def thaw() -> None:
            os.pwrite(fd, thawed, 0)

        return thaw

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def kill_all(self) -> None:
        """Kill whatever is still inside (a process that left the PID namespace cannot leave these)."""
        self.freeze(False)  # a frozen process does not die until it is thawed
        for folder in self.folders.values():
            for _ in range(50):
                try:
                    pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass

    def pids_refused(self) -> int:
        """How many forks (or threads) the pids controller has refused so far: the limit was hit."""
        folder = self.folders.get("pids")
        if folder is None:
            return 0
        try:
            text = (folder / "pids.events").read_text()
        except OSError:
            return 0
        return sum(int(line.split()[1]) for line in text.splitlines() if line.split()[:1] == ["max"])

    def memory_exceeded(self) -> bool:
        folder = self.folders.get("memory")
        if folder is None:
            return False
        for name in ("memory.failcnt", "memory.events"):
            try:
                text = (folder / name).read_text()
            except OSError:
                continue
            if name == "memory.failcnt":
                return int(text.strip() or 0) > 0
            return any(line.split()[0] in ("max", "oom_kill") and int(line.split()[1]) > 0 for line in text.splitlines())
        return False

    def cleanup(self) -> None:
        self.kill_all()
        self._close_fd()
        for folder in self.folders.values():
            # the killed processes leave the folder a moment later (a PID namespace dies in turn)
            for _ in range(200):
                if _rmdir(folder) or not folder.exists():
                    break
                time.sleep(0.01)
        self.folders.clear()


_swept = False
#: this process's anchor: an empty v1 freezer cgroup kept frozen for its lifetime (see below)
_anchor: tuple[int, Path] | None = None


def _hold_freezer_key(base: Path) -> None:
    """Keep one empty freezer cgroup frozen while this process lives (cgroup v1).

    The v1 freezer switches a kernel static key on when the first cgroup starts freezing and off
    when the last one thaws, and each switch patches kernel code on every CPU: a thaw that
    turned it off took 127 to 133 µs on the 2-core VM, against 10 µs with another cgroup kept
    frozen. A sandbox's thaw is made after the candidate's clock starts, so that cost was the
    candidate's. Named ``maxcode-PID-anchor``: removed at exit, and by :func:`sweep_stale` after
    a run that could not."""
    global _anchor
    if _anchor is not None and _anchor[0] == os.getpid():
        return
    folder = base / f"maxcode-{os.getpid()}-anchor"
    _anchor = (os.getpid(), folder)
    try:
        folder.mkdir(exist_ok=True)
        (folder / "freezer.state").write_text("FROZEN")
    except OSError:
        _rmdir(folder)
        return
    atexit.register(_drop_anchor)


def _drop_anchor() -> None:
    # a forked child inherits the handler: only the process that made the anchor removes it
    if _anchor is not None and _anchor[0] == os.getpid():
        _rmdir(_anchor[1])


def sweep_stale() -> list[Path]:
    """Remove the cgroups of maxcode processes that are gone, killing what is left inside.

    A run killed with SIGKILL cannot clean up: its sandboxes' processes stay in their cgroups,
    frozen forever if they were frozen at that moment (state D, holding memory and a PID). The
    next run clears them: folders named ``maxcode-PID-...`` whose PID no longer exists.
    """
    removed = []
    for _, base in _cgroup_roots():
        try:
            children = [c for c in base.iterdir() if c.is_dir() and c.name.startswith("maxcode-")]
        except OSError:
            continue
        for folder in children:
            try:
                owner = int(folder.name.split("-")[1])
            except (IndexError, ValueError):
                continue
            if _alive(owner):
                continue
            controller = "freezer" if (folder / "freezer.state").exists() or (folder / "cgroup.freeze").exists() else "other"
            stale = Cgroups({controller: folder})
            stale.cleanup()
            if not folder.exists():
                removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: alive
    return True


def _rmdir(folder: Path) -> bool:
    try:
        folder.rmdir()
        return True
    except OSError:
        return False


def rlimit_commands(limits: Limits, have_memory_cgroup: bool) -> list[str]:
    cmds = []
    if limits.memory is not None and not have_memory_cgroup:
        cmds.append(f"ulimit -v {max(1, limits.memory // 1024)}")
    if limits.file_size is not None:
        cmds.append(f"ulimit -f {max(1, limits.file_size // 512)}")
    if limits.cpu_seconds is not None:
        cmds.append(f"ulimit -t {max(1, int(limits.cpu_seconds))}")
    return cmds


@dataclass
class Sandboxed:
    """One command prepared to run in a sandbox: ``argv`` for Popen, ``cleanup`` afterwards."""

    argv: list[str]
    isolation: Isolation
    cgroups: Cgroups

    def cleanup(self) -> None:
        self.cgroups.cleanup()


def prepare(argv: Sequence[str], isolation: Isolation, job_dir: Path, limits: Limits = Limits(),
            extra_writable: Sequence[Path] = (), readable: Sequence[Path] = (), devices: Sequence[Path] = (),
            mounts: Sequence[tuple[Path, Path]] = (), use_cgroups: bool = True, view: str = "all",
            cgroups: Cgroups | None = None, hidden: Sequence[Path] = ()) -> Sandboxed:
    """The command line that runs ``argv`` inside the sandbox, with its limits.

    ``readable``: folders the command must read that the sandbox's private ``/tmp`` would
    hide (a project or a scratch folder under ``/tmp``); read-only. ``devices``: device
    nodes it needs (``/dev/nvidia*`` for a CUDA worker). ``mounts``: (source, seen as)
    writable folders shown at another path, under ``bwrap`` only (the others cannot mount).
    ``use_cgroups=False``: rlimits only; joining a cgroup costs tens of milliseconds, too much
    for a process started once per timed run. ``view="toolchain"`` (compilers): under ``bwrap``
    only the system's toolchain folders (:data:`TOOLCHAIN_VIEW`), the interpreter, this package,
    PATH and ``readable`` are seen, not the whole filesystem. ``cgroups``: ones made once by the
    caller (:meth:`Cgroups.make`) for many such commands, joined instead of new ones (a write of
    the pid, well under a millisecond), and left for the caller to clean up. ``hidden``: folders
    the command must not read (a program's expected outputs), covered by an empty tmpfs like the
    credentials, under ``unshare`` too, which cannot narrow the view otherwise; one that holds
    the job folder, a writable or a ``readable`` folder stays visible.

    Start it in a new session (``start_new_session=True``) and kill its process group (or,
    under a namespace, its root process: the PID namespace goes with it); then call
    :meth:`Sandboxed.cleanup`, which also kills anything left in its cgroups.

    Parameters because they are this one command's mounts and limits, each optional and keyword-
    only.
    """
    own = Cgroups.make(limits) if isolation.kind != "none" and use_cgroups and cgroups is None else Cgroups()
    joined = own if cgroups is None or isolation.kind == "none" else cgroups
    setup = joined.join_commands() + rlimit_commands(limits, "memory" in joined.folders)
    seen = _toolchain_paths() if view == "toolchain" else _runtime_paths()
    readable = [*readable, *seen, *([Path(argv[0]).parent] if argv and os.path.isabs(argv[0]) else [])]
    inner = _namespace_argv(isolation.kind, job_dir, extra_writable, readable, devices, mounts, view,
                            limits.scratch_bytes, hidden) + list(argv)
    if isolation.kind == "none":
        setup.append(f"cd '{job_dir}'")
    return Sandboxed(["/bin/sh", "-c", _STARTER, "maxcode-sandbox", *setup, "--", *inner], isolation, own)
