"""A pytest fork server for ``maxcode bench-ab``: one per side, each run a fresh forked process.

Interleaving base and head needs several short pytest processes per side, and a new
interpreter pays for Python, pytest, every installed plugin and whatever the tests import
(torch: seconds) again each time; that start-up, not the benchmarks, made the interleaved mode
cost more than re-running the base. This server pays it once: it imports pytest and collects
the tests (so the plugins and the third-party modules the tests import are loaded), forgets the
side's own modules (tests, conftests, the project's code) so each run imports them afresh, and
then forks one process per run. A run's heap, buffers and timings are its own, as in a new
process; what it shares with its siblings is the interpreter's start-up state.

Protocol: started as ``python _pytest_forkserver.py ROOT WARM_ARGS_JSON`` in the project folder;
reads one JSON line per run from stdin (``{"argv": [...], "log": path}``) and answers one line
(``{"rc": exit status, "forked": bool}``) on its original stdout. Where forking would be unsafe
(CUDA initialised while collecting) or unavailable, it runs ``python -m pytest`` instead.

Imports nothing from pytest_maxcode: it runs under the side's own ``sys.path``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from typing import Any

if __name__ == "__main__":
    # as ``python -m pytest`` has it: the working folder first, not this file's folder
    sys.path[0] = os.getcwd()

import pytest  # the side's own pytest, found on the path just set


def _silenced(fn: Any) -> Any:
    """``fn()`` with file descriptors 1 and 2 sent to /dev/null (collection prints)."""
    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        return fn()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def _warm(root: str, args: list[str]) -> None:
    """The tests collected once; the side's own modules forgotten again."""
    # a collection that fails fails again in the run, which reports it
    with contextlib.suppress(BaseException):
        _silenced(lambda: pytest.main([*args, "--collect-only", "-q", "-p", "no:cacheprovider"]))
    inside = os.path.realpath(root) + os.sep
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and os.path.realpath(path).startswith(inside):
            del sys.modules[name]


def _forkable() -> bool:
    """A forked child cannot use a CUDA context its parent made (torch refuses)."""
    if not hasattr(os, "fork"):
        return False
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    return not (cuda is not None and cuda.is_initialized())


def _shifted(rng: random.Random, run: Callable[[], int]) -> int:
    """``run()`` from a heap and stacks laid out afresh: siblings forked from one server would
    otherwise place the run's objects, frames and C stack at the same addresses, so every run
    of a side shares one layout's luck (a few percent either way), its runs agree too well,
    and a t-test between two sides' layouts finds a difference in identical code."""
    ballast = [bytearray(rng.randrange(1, 1024)) for _ in range(rng.randrange(1, 512))]

    def nested(depth: int) -> int:  # each level through C (partial) moves the C stack too
        return run() if depth == 0 else functools.partial(nested, depth - 1)()

    try:
        return nested(rng.randrange(64))
    finally:
        del ballast


def _forked(argv: list[str], log: str) -> int:
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *argv]
            code = _shifted(random.Random(os.urandom(16)), lambda: int(pytest.main(argv)))
        except BaseException as exc:  # noqa: BLE001 - the run's log says what happened
            print(f"bench-ab fork server: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _spawned(argv: list[str], log: str) -> int:
    with open(log, "wb") as out:
        return subprocess.call([sys.executable, "-m", "pytest", *argv], stdin=subprocess.DEVNULL, stdout=out, stderr=out)


def main() -> None:
    root, warm_args = sys.argv[1], json.loads(sys.argv[2])
    answers = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # whatever else is printed stays out of the answers
    _warm(root, warm_args)
    fork = _forkable()
    for line in sys.stdin:
        request = json.loads(line)
        argv, log = list(request["argv"]), str(request["log"])
        rc = _forked(argv, log) if fork else _spawned(argv, log)
        answers.write(json.dumps({"rc": rc, "forked": fork}) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
