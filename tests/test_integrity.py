"""What persists cannot be forged (issue 13, class 10): a cached library overwritten after it
was built is detected, rebuilt and never loaded, by the oracle's helper and by the runtime
dispatcher; a forged store row with the largest rowid does not become the stored verdict."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_maxcode.oracle import build

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
