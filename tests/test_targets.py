"""The decorator and the lock file, in process: misuse, handles, hashing, round trips."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

import pytest_maxcode as maxcode
from pytest_maxcode.targets.decorator import REGISTRY, normalized_source, normalized_source_in_file
from pytest_maxcode.targets.lock import LockEntry, read_lock, write_lock


@maxcode.optimize
def plain(x):
    return x + 1


@maxcode.optimize(lang="cpp", atol=1e-3, budget=4)
class Doubler(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_decorated_function_behaves_like_the_original() -> None:
    assert plain(1) == 2
    assert plain.__name__ == "plain" and plain.__wrapped__(1) == 2
    h = plain.maxcode
    assert h.id == f"{__name__}.plain" and h.kind == "function" and h.active == "reference"
    assert "no accepted kernel" in h.reason
    assert REGISTRY[h.id] is h


def test_decorated_module_keeps_its_forward() -> None:
    m = Doubler()
    assert torch.equal(m(torch.ones(3)), torch.full((3,), 2.0))
    h = Doubler.maxcode
    assert h.kind == "module" and h.owner is Doubler and h.options.lang == "cpp" and h.options.budget == 4


def _gen():
    yield 1


async def _coro():
    return 1


class NotAModule:
    def forward(self):
        return 1


@pytest.mark.parametrize(
    "obj, message",
    [
        (42, "expected a function or an nn.Module subclass, got int"),
        (_gen, "is a generator"),
        (_coro, "is async"),
        (NotAModule, "is not an nn.Module subclass"),
        (print, None),
    ],
)
def test_misuse_is_a_type_error_at_decoration(obj, message) -> None:
    if message is None:  # builtins are callables we can wrap, but have no source: no lock can name them
        assert maxcode.optimize(obj).maxcode.source_file is None
        return
    with pytest.raises(TypeError, match=message):
        maxcode.optimize(obj)


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="lang='rust'"):
        maxcode.optimize(lang="rust")
    with pytest.raises(ValueError, match="budget"):
        maxcode.optimize(budget=0)
    with pytest.raises(TypeError, match="inputs="):
        maxcode.optimize(inputs=[1, 2])


def test_module_without_forward_is_rejected() -> None:
    class Empty(torch.nn.Module):
        pass

    with pytest.raises(TypeError, match="defines no forward"):
        maxcode.optimize(Empty)


def test_source_hash_ignores_decorators_comments_and_layout(tmp_path: Path) -> None:
    a = tmp_path / "a.py"
    a.write_text("import x\n@x.optimize(atol=1)\ndef f(v):\n    # a comment\n    return v  +  1\n")
    b = tmp_path / "b.py"
    b.write_text("def f(v):\n    return v + 1\n")
    c = tmp_path / "c.py"
    c.write_text("def f(v):\n    return v + 2\n")
    assert normalized_source_in_file(a, "f") == normalized_source_in_file(b, "f")
    assert normalized_source_in_file(b, "f") != normalized_source_in_file(c, "f")
    assert normalized_source_in_file(b, "g") is None


def test_file_hash_agrees_with_the_imported_object() -> None:
    here = Path(__file__)
    assert normalized_source_in_file(here, "Doubler") == normalized_source(Doubler)
    assert normalized_source_in_file(here, "_gen") == normalized_source(_gen)
    assert inspect.getsourcefile(Doubler) == str(here)


def test_lock_round_trip_and_atomic_write(tmp_path: Path) -> None:
    entry = LockEntry("m.f", "r" * 64, "maxcode_kernels/m.f.cpp", "k" * 64, "cpp", "cpu", "x86_64", 2.5, [2.1, 2.9], "2026-11-21", "0.1.0", {"qualname": "f"})
    path = tmp_path / "maxcode.lock"
    write_lock(path, {"m.f": entry})
    assert read_lock(path) == {"m.f": entry}
    assert not list(tmp_path.glob(".maxcode.lock.tmp*"))
    assert path.read_text().startswith("# Written by pytest-maxcode")


def test_broken_lock_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "maxcode.lock"
    path.write_text("[targets\n")
    with pytest.raises(ValueError, match="not a valid maxcode.lock"):
        read_lock(path)
