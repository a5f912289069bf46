"""What persists cannot be forged (issue 13, class 10): a cached library overwritten after it
was built is detected, rebuilt and never loaded, by the oracle's helper and by the runtime
dispatcher; a forged store row with the largest rowid does not become the stored verdict."""

from __future__ import annotations

import ctypes
import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_dispatch import KERNEL as CHAIN_KERNEL
from test_dispatch import LIB, USE, WARN_USE, _state

from pytest_maxcode.native import build
from pytest_maxcode.store import Store
from pytest_maxcode.store.sqlite import MIGRATIONS
from pytest_maxcode.targets.accept import accept
from pytest_maxcode.targets.lock import read_lock, write_lock

KERNEL = """#include <dlpack/dlpack.h>
#include <cstdint>
extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* s) {
  return %d;
}
"""


def _src(tmp_path: Path, text: str, name: str = "k.cpp") -> build.Source:
    p = tmp_path / name
    p.write_text(text)
    return build.Source(p, "cpp")


def _forge(lib: Path, tmp_path: Path) -> bytes:
    """Overwrite ``lib`` in place with another valid library, as a candidate with write access would."""
    other = build.build_all([_src(tmp_path, KERNEL % 7, "evil.cpp")], tmp_path / "evil")[0]
    data = other.library.read_bytes()
    lib.write_bytes(data)
    return data


def test_a_build_records_the_hash_of_its_library_outside_the_build_folder(tmp_path: Path) -> None:
    r = build.build_all([_src(tmp_path, KERNEL % 0)], tmp_path / "cache")[0]
    assert r.ok and r.library is not None and len(r.sha256) == 64
    assert r.library.name == f"lib-{r.sha256}.so"  # content-addressed
    assert build.file_sha256(r.library) == r.sha256
    record = build.record_path(tmp_path / "cache" / "native", r.key)
    assert record.is_file() and r.library.parent not in record.parents  # the compiler cannot write it
    assert build.read_record(tmp_path / "cache" / "native", r.key).sha256 == r.sha256
    assert build.verified_library(r) == r.library
    assert r.command[-1] == str(r.library)


def test_a_library_overwritten_after_the_build_is_refused_before_loading(tmp_path: Path) -> None:
    r = build.build_all([_src(tmp_path, KERNEL % 0)], tmp_path / "cache")[0]
    _forge(r.library, tmp_path)
    with pytest.raises(build.IntegrityError) as e:
        build.verified_library(r)
    assert "changed since it was built" in str(e.value) and "\n" not in str(e.value)
    r.library.unlink()
    with pytest.raises(build.IntegrityError, match="cannot be read"):
        build.verified_library(r)


def test_a_symlink_in_place_of_the_library_is_refused(tmp_path: Path) -> None:
    r = build.build_all([_src(tmp_path, KERNEL % 0)], tmp_path / "cache")[0]
    copy = tmp_path / "copy.so"
    copy.write_bytes(r.library.read_bytes())
    r.library.unlink()
    r.library.symlink_to(copy)
    with pytest.raises(build.IntegrityError, match="symbolic link"):
        build.verified_library(r)


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="no memfd on this platform")
def test_the_loaded_copy_is_the_verified_bytes_and_cannot_be_changed(tmp_path: Path) -> None:
    r = build.build_all([_src(tmp_path, KERNEL % 5)], tmp_path / "cache")[0]
    sealed = build.sealed_library(r)
    assert sealed.startswith("/proc/self/fd/")
    with open(sealed, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == r.sha256
    with pytest.raises(PermissionError), open(sealed, "r+b") as f:  # write-sealed: not even this user can change it
        f.write(b"x")
    r.library.write_bytes(b"\x7fELF swapped after the check")  # the cache changes; the sealed copy does not
    assert ctypes.CDLL(sealed).maxcode_run(None, 0, None, 0, None) == 5
    with pytest.raises(build.IntegrityError):
        build.sealed_library(r)


def test_a_tampered_cache_entry_is_rebuilt_not_reused(tmp_path: Path) -> None:
    src = _src(tmp_path, KERNEL % 0)
    first = build.build_all([src], tmp_path / "cache")[0]
    forged = _forge(first.library, tmp_path)
    again = build.build_all([src], tmp_path / "cache")[0]
    assert again.ok and not again.cached
    assert "discarded and rebuilt" in again.integrity
    assert again.library.read_bytes() != forged
    assert build.verified_library(again) == again.library
    third = build.build_all([src], tmp_path / "cache")[0]
    assert third.cached and third.sha256 == again.sha256 and not third.integrity


def test_a_library_merely_gone_is_rebuilt_without_an_alarm(tmp_path: Path) -> None:
    src = _src(tmp_path, KERNEL % 0)
    first = build.build_all([src], tmp_path / "cache")[0]
    first.library.unlink()
    again = build.build_all([src], tmp_path / "cache")[0]
    assert again.ok and not again.cached and again.integrity == "" and again.sha256 == first.sha256


def test_a_library_without_a_trusted_record_is_not_trusted(tmp_path: Path) -> None:
    """An entry whose record is gone (or was never written: an older cache) is built again."""
    src = _src(tmp_path, KERNEL % 0)
    first = build.build_all([src], tmp_path / "cache")[0]
    build.record_path(tmp_path / "cache" / "native", first.key).unlink()
    again = build.build_all([src], tmp_path / "cache")[0]
    assert again.ok and not again.cached and again.sha256 == build.file_sha256(again.library)


def test_a_build_folder_swapped_for_a_link_is_replaced(tmp_path: Path) -> None:
    src = _src(tmp_path, KERNEL % 0)
    first = build.build_all([src], tmp_path / "cache")[0]
    d = first.library.parent
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for p in d.iterdir():
        p.unlink()
    d.rmdir()
    d.symlink_to(elsewhere)
    again = build.build_all([src], tmp_path / "cache")[0]
    assert again.ok and not again.cached
    assert not d.is_symlink() and list(elsewhere.iterdir()) == []


# -- the runtime dispatcher ---------------------------------------------------------------

FORGED = CHAIN_KERNEL.replace("++maxcode_test_calls;", "maxcode_test_calls += 1000;")


@pytest.fixture
def proj(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project with an accepted C++ kernel whose calls the test can count (as in test_dispatch)."""
    pytester.makepyfile(mylib=LIB, test_use=USE)
    accept(pytester.path, target_id="mylib.chain", reference_file=pytester.path / "mylib.py", qualname="chain",
           kernel_source=CHAIN_KERNEL, lang="cpp", device="cpu", arch="x86_64", speedup=2.5, speedup_ci=[2.2, 2.8],
           signatures=[[["float32", 2, True], ["float32", 1, True]]])
    return pytester


def _cached(project: Path) -> tuple[Path, Path]:
    """The project's one cached library and its trusted record."""
    (lib,) = (project / ".maxcode" / "build" / "native").glob("*/*/lib-*.so")
    return lib, lib.parent.with_suffix(".json")


def _forged_bytes(tmp_path: Path) -> bytes:
    r = build.build_all([_src(tmp_path, FORGED, "forged.cpp")], tmp_path / "forger")[0]
    assert r.ok, r.log
    return r.library.read_bytes()


def test_the_dispatcher_rebuilds_a_cached_library_that_was_overwritten(proj: pytest.Pytester, tmp_path: Path) -> None:
    assert _state(proj.runpytest_subprocess("-s"))["CALLS"] == "1"
    lib, _record = _cached(proj.path)
    lib.write_bytes(_forged_bytes(tmp_path))
    result = proj.runpytest_subprocess("-s", "-W", "always")
    result.assert_outcomes(passed=1)
    s = _state(result)
    assert s["STATE"].startswith("kernel") and s["CALLS"] == "1"  # the rebuilt kernel ran, not the forged one
    result.stdout.fnmatch_lines(["*the cached library was discarded and rebuilt: changed since it was built*"])
    assert lib.read_bytes() != _forged_bytes(tmp_path)


def _bind_lock(project: Path, lib: Path, sha: str) -> None:
    """What accepting does once the oracle hands over the verified build's id and hash."""
    (src,) = lib.parent.glob("candidate.cpp")
    result = build.BuildResult(build.Source(src, "cpp"), True, lib, 0.0, True, lib.parent.name)
    entries = dict(read_lock(project / "maxcode.lock"))
    entry = entries["mylib.chain"]
    entry.build_id, entry.library_sha256 = build.build_id(result), sha
    write_lock(project / "maxcode.lock", entries)


def test_a_forged_library_with_a_forged_record_is_caught_by_the_lock(proj: pytest.Pytester, tmp_path: Path) -> None:
    """An unsandboxed candidate can rewrite the cache's record too; the lock (committed) still names the verified hash."""
    proj.runpytest_subprocess("-s")
    lib, record = _cached(proj.path)
    key, verified = lib.parent.name, build.file_sha256(lib)
    _bind_lock(proj.path, lib, verified)
    assert f'library_sha256 = "{verified}"' in (proj.path / "maxcode.lock").read_text()
    forged = _forged_bytes(tmp_path)
    fake = lib.parent / "forged.so"
    fake.write_bytes(forged)
    sha = build.file_sha256(fake)
    fake.rename(lib.parent / f"lib-{sha}.so")
    record.write_text(record.read_text().replace(verified, sha))
    assert build.read_record(lib.parent.parent.parent, key).sha256 == sha  # the cache itself is consistent
    result = proj.runpytest_subprocess("-s", "-W", "always")
    result.assert_outcomes(passed=1)
    s = _state(result)
    assert s["STATE"].startswith("kernel") and s["CALLS"] == "1"  # rebuilt: the verified library, not the forged one
    assert build.read_record(lib.parent.parent.parent, key).sha256 == verified
    out = result.stdout.str()
    assert "differs from the library verified" not in out and "discarded" not in out  # the rebuild reproduced it


def test_a_cached_library_the_lock_does_not_recognise_is_rebuilt_and_the_rebuild_runs(proj: pytest.Pytester) -> None:
    """A compiler that is not reproducible (nvcc's module ids) must not lock a target out of its kernel:
    the fresh build from the verified source runs, with one warning that says why it is rebuilt."""
    proj.runpytest_subprocess("-s")
    lib, _record = _cached(proj.path)
    _bind_lock(proj.path, lib, "0" * 64)  # no build reproduces this hash
    proj.makepyfile(test_warn=WARN_USE)
    result = proj.runpytest_subprocess("-s", "test_warn.py")
    result.assert_outcomes(passed=1)
    line = next(line for line in result.outlines if "WARNINGS" in line)
    assert "WARNINGS 1 | kernel |" in line
    assert "differs from the library verified when it was accepted" in line and "not reproducible" in line


def test_the_lock_renders_the_library_hash_only_where_one_is_bound(proj: pytest.Pytester) -> None:
    text = (proj.path / "maxcode.lock").read_text()
    assert "library_sha256" not in text and "build_id" not in text
    entry = read_lock(proj.path / "maxcode.lock")["mylib.chain"]
    assert entry.library_expected("anything") == ""
    proj.runpytest_subprocess("-s")
    lib, _record = _cached(proj.path)
    _bind_lock(proj.path, lib, "a" * 64)
    entry = read_lock(proj.path / "maxcode.lock")["mylib.chain"]
    assert entry.library_expected(entry.build_id) == "a" * 64 and entry.library_expected("x" * 64) == ""
    assert "build_id" not in entry.extra and 'library_sha256 = "' + "a" * 64 + '"' in (proj.path / "maxcode.lock").read_text()


# -- the store ------------------------------------------------------------------------------

def _verdict(status: str, speedup: float | None, cand: str = "c" * 64) -> dict:
    ci = [speedup * 0.9, speedup * 1.1] if speedup else None
    return {"hash": cand, "status": status, "speedup": speedup, "speedup_ci": ci, "reasons": [status]}


def _store_with_a_verdict(path: Path) -> Store:
    store = Store(path)
    store.upsert_target("m.f", "function", "m.py", "r" * 64)
    store.add_candidate("c" * 64, "native", "cpp", "int x;", "test")
    store.record_evaluation(run_id=None, target_id="m.f", config_key="k", device="cpu", verdict=_verdict("not_faster", 0.99))
    return store


def _forge_row(path: Path, status: str = "faster", speedup: float = 50.0) -> None:
    """What the class-10 candidate does: a row for its own hash with the largest rowid, written behind the store's back."""
    db = sqlite3.connect(str(path))
    top = db.execute("SELECT MAX(id) FROM evaluations").fetchone()[0]
    db.execute(
        "INSERT INTO evaluations(id, run_id, target_id, candidate_hash, config_key, status, speedup, ci_low, ci_high, "
        "device, reasons, diagnostics, created_at) VALUES (?, NULL, 'm.f', ?, 'k', ?, ?, ?, ?, 'cpu', '[]', '{}', 'now')",
        (top + 1000, "c" * 64, status, speedup, speedup * 0.9, speedup * 1.1),
    )
    db.commit()
    db.close()


def test_a_forged_faster_row_with_the_largest_rowid_is_not_the_current_verdict(tmp_path: Path) -> None:
    path = tmp_path / "maxcode.db"
    with _store_with_a_verdict(path) as store:
        _forge_row(path)
        assert max(r["id"] for r in store.evaluations()) > 1000  # the forged row is there...
        row = store.find_evaluation("m.f", "c" * 64, "k")
        assert row is not None and row["status"] == "not_faster" and row["speedup"] == 0.99  # ...and ignored
        # a real later evaluation still becomes current
        store.record_evaluation(run_id=None, target_id="m.f", config_key="k", device="cpu", verdict=_verdict("faster", 1.5))
        assert store.find_evaluation("m.f", "c" * 64, "k")["speedup"] == 1.5


def test_a_current_row_edited_behind_the_stores_back_is_not_reused(tmp_path: Path) -> None:
    path = tmp_path / "maxcode.db"
    with _store_with_a_verdict(path) as store:
        db = sqlite3.connect(str(path))
        db.execute("UPDATE evaluations SET status='faster', speedup=50.0")
        db.commit()
        db.close()
        assert store.find_evaluation("m.f", "c" * 64, "k") is None  # evaluated again, not trusted


def test_a_pointer_moved_to_a_forged_row_without_its_digest_is_not_reused(tmp_path: Path) -> None:
    path = tmp_path / "maxcode.db"
    with _store_with_a_verdict(path) as store:
        _forge_row(path)
        db = sqlite3.connect(str(path))
        db.execute("UPDATE current_evaluations SET evaluation_id=(SELECT MAX(id) FROM evaluations)")
        db.commit()
        db.close()
        assert store.find_evaluation("m.f", "c" * 64, "k") is None


def test_an_older_store_opens_and_keeps_its_current_verdicts(tmp_path: Path) -> None:
    path = tmp_path / "maxcode.db"
    db = sqlite3.connect(str(path))
    for i, sql in enumerate(MIGRATIONS[:4], start=1):
        db.executescript(sql)
        db.execute(f"PRAGMA user_version={i}")
    db.execute("INSERT INTO targets VALUES ('m.f', 'function', 'm.py', 'r', 'now')")
    db.execute("INSERT INTO candidates VALUES (?, 'native', 'cpp', 'int x;', 'test', 'now')", ("c" * 64,))
    for status, speedup in (("not_faster", 0.9), ("faster", 1.3)):
        db.execute(
            "INSERT INTO evaluations(target_id, candidate_hash, config_key, status, speedup, device, created_at) "
            "VALUES ('m.f', ?, 'k', ?, ?, 'cpu', 'now')", ("c" * 64, status, speedup),
        )
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        row = store.find_evaluation("m.f", "c" * 64, "k")
        assert row is not None and row["status"] == "faster" and row["speedup"] == 1.3
        assert store.find_evaluation("m.f", "d" * 64, "k") is None
    with Store(path) as store:  # opening again migrates nothing twice
        assert store.find_evaluation("m.f", "c" * 64, "k")["speedup"] == 1.3


# -- the class-10 attack itself, unsandboxed (the worst case: --maxcode-sandbox=none) ---------

# What a candidate that escaped (or was run without) the sandbox does to what persists: a
# 'faster' row for its own hash above every other id, every other row marked 'wrong', and
# every cached library overwritten.
ATTACK = """
import os, sqlite3, sys
project, own = sys.argv[1], sys.argv[2]
db = sqlite3.connect(os.path.join(project, ".maxcode", "maxcode.db"), timeout=2)
keys = db.execute("SELECT DISTINCT target_id, config_key, device FROM evaluations").fetchall()
top = db.execute("SELECT COALESCE(MAX(id), 0) FROM evaluations").fetchone()[0]
db.execute("UPDATE evaluations SET status='wrong', speedup=NULL")
db.execute("INSERT OR IGNORE INTO candidates VALUES (?, 'compat', 'py', '', 'forged', 'now')", (own,))
for i, (target, key, device) in enumerate(keys):
    db.execute("INSERT INTO evaluations(id, target_id, candidate_hash, config_key, status, speedup, ci_low, ci_high, "
               "device, reasons, diagnostics, created_at) VALUES (?, ?, ?, ?, 'faster', 50.0, 45.0, 55.0, ?, '[]', '{}', 'now')",
               (top + 1_000_000 + i, target, own, key, device))
db.commit()
for folder, _dirs, files in os.walk(os.path.join(project, ".maxcode", "build")):
    for name in files:
        if name.endswith(".so"):
            with open(os.path.join(folder, name), "wb") as f:
                f.write(b"\\x7fELF pwned")
"""


def test_the_persistent_forgery_attack_run_unsandboxed_changes_no_verdict_and_no_loaded_library(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".maxcode").mkdir(parents=True)
    src = _src(tmp_path, KERNEL % 0)
    built = build.build_all([src], project / ".maxcode" / "build")[0]
    own = "f" * 64
    with _store_with_a_verdict(project / ".maxcode" / "maxcode.db") as store:
        before = store.find_evaluation("m.f", "c" * 64, "k")
        subprocess.run([sys.executable, "-c", ATTACK, str(project), own], check=True, capture_output=True, timeout=120)
        rows = list(store.evaluations("m.f"))
        assert [r["status"] for r in rows] == ["wrong", "faster"]  # it did write
        assert before is not None and before["status"] == "not_faster"
        # the candidate's only verdict was edited: it is evaluated again, not read as 'wrong'
        assert store.find_evaluation("m.f", "c" * 64, "k") is None
        assert store.find_evaluation("m.f", own, "k") is None  # the forged 'faster' is nobody's verdict
    assert built.library.read_bytes().endswith(b"pwned")  # it did overwrite the cached library
    with pytest.raises(build.IntegrityError):
        build.verified_library(built)
    again = build.build_all([src], project / ".maxcode" / "build")[0]
    assert again.ok and not again.cached and again.sha256 == built.sha256 and "discarded" in again.integrity


def test_a_row_forged_under_the_current_run_does_not_become_a_node_of_its_tree(tmp_path: Path) -> None:
    path = tmp_path / "maxcode.db"
    with Store(path) as store:
        run = store.begin_run("pytest --maxcode", "0")
        store.upsert_target("m.f", "function", "m.py", "r" * 64)
        store.add_candidate("c" * 64, "native", "cpp", "int x;", "test")
        store.record_evaluation(run_id=run, target_id="m.f", config_key="k", device="cpu", verdict=_verdict("not_faster", 0.99))
        db = sqlite3.connect(str(path))
        db.execute(
            "INSERT INTO evaluations(id, run_id, target_id, candidate_hash, config_key, status, speedup, device, created_at) "
            "VALUES (99999, ?, 'm.f', ?, 'k', 'faster', 50.0, 'cpu', 'now')", (run, "f" * 64),
        )
        db.commit()
        db.close()
        assert [(r["candidate_hash"], r["status"]) for r in store.evaluations_without_nodes(run)] == [("c" * 64, "not_faster")]


def test_a_compiler_run_sandboxed_can_write_only_its_own_build_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even a compromised compiler cannot reach another entry's library, the trusted records or the cache."""
    from pytest_maxcode.sandbox.isolation import resolve, works

    if works("bwrap") is not None and works("unshare") is not None:
        pytest.skip("this machine can make no namespaces (install bubblewrap)")
    cache = tmp_path / "cache"
    a = build.build_all([_src(tmp_path, KERNEL % 1, "a.cpp")], cache)[0]
    root = cache / "native"
    record = build.record_path(root, a.key)
    record_text = record.read_text()
    cc = root / "evil-cc.sh"  # inside the cache: the sandbox shows the cache, read-only
    cc.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then exec g++ --version; fi\n'
        f"echo pwned > '{a.library}' 2>/dev/null\n"
        f"echo pwned > '{record}' 2>/dev/null\n"
        f"echo pwned > '{root}/pwned' 2>/dev/null\n"
        'exec g++ "$@"\n'
    )
    cc.chmod(0o755)
    monkeypatch.setenv("MAXCODE_CXX", str(cc))
    b = build.build_all([_src(tmp_path, KERNEL % 2, "b.cpp")], cache, isolation=resolve("auto"))[0]
    assert b.ok, b.log
    assert build.verified_library(a) == a.library and record.read_text() == record_text
    assert not (root / "pwned").exists()
    # the same script unsandboxed does write: the test's attack is real
    monkeypatch.setenv("MAXCODE_CXX", str(cc))
    build.build_all([_src(tmp_path, KERNEL % 3, "c.cpp")], cache)
    assert (root / "pwned").exists()
    with pytest.raises(build.IntegrityError):
        build.verified_library(a)


def test_a_resumed_verdict_still_names_its_sandbox(tmp_path: Path) -> None:
    """The sandbox in force is a field of every verdict, a verdict resumed from the store included."""
    from pytest_maxcode.search.loop import verdict_from_row

    store = Store(tmp_path / "maxcode.db")
    store.upsert_target("m.f", "function", "m.py", "r" * 64)
    store.add_candidate("c" * 64, "native", "cpp", "int x;", "test")
    store.record_evaluation(run_id=None, target_id="m.f", config_key="k", device="cpu",
                            verdict={**_verdict("not_faster", 0.99), "sandbox": "bwrap", "diagnostics": {"seed": 3}})
    row = store.find_evaluation("m.f", "c" * 64, "k")
    assert row is not None
    v = verdict_from_row(row, "c.cpp")
    assert v.sandbox == "bwrap" and v.diagnostics["seed"] == 3 and v.diagnostics["resumed"]
