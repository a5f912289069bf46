"""Native builds: parallel through ninja, cached by content, compile errors trimmed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_maxcode.native import build

KERNEL = """#include <dlpack/dlpack.h>
#include <cstdint>
extern "C" int maxcode_run(const DLTensor* in, int32_t n_in, DLTensor* out, int32_t n_out, void* s) {
  return %d;
}
"""


def _src(tmp_path: Path, name: str, text: str, lang: str = "cpp") -> build.Source:
    p = tmp_path / name
    p.write_text(text)
    return build.Source(p, lang)


def test_parallel_build_then_cache_hit(tmp_path: Path) -> None:
    sources = [_src(tmp_path, f"k{i}.cpp", KERNEL % i) for i in range(4)]
    first = build.build_all(sources, tmp_path / "cache")
    assert all(r.ok and not r.cached and r.library.exists() for r in first)
    assert len({r.key for r in first}) == 4
    again = build.build_all(sources, tmp_path / "cache")
    assert all(r.ok and r.cached for r in again)
    assert [r.library for r in again] == [r.library for r in first]
    assert [r.sha256 for r in again] == [r.sha256 for r in first] and all(len(r.sha256) == 64 for r in first)


def test_flags_change_the_cache_key(tmp_path: Path) -> None:
    src = _src(tmp_path, "k.cpp", KERNEL % 0)
    a = build.build_all([src], tmp_path / "cache", cxxflags=["-O1"])[0]
    b = build.build_all([src], tmp_path / "cache", cxxflags=["-O2"])[0]
    assert a.key != b.key and "-O1" in a.command and "-O2" in b.command


def test_compile_error_is_trimmed_and_named_after_the_candidate(tmp_path: Path) -> None:
    bad = "\n".join(f"int f{i}() {{ return undefined_{i}; }}" for i in range(10))
    r = build.build_all([_src(tmp_path, "broken.cpp", bad)], tmp_path / "cache")[0]
    assert not r.ok and r.library is None
    assert len(r.errors) == build.MAX_ERRORS
    assert r.errors[0].startswith("broken.cpp:1:")
    assert "undefined_0" in r.errors[0]
    assert str(tmp_path / "cache") not in "\n".join(r.errors)


def test_a_failed_build_is_not_cached(tmp_path: Path) -> None:
    r1 = build.build_all([_src(tmp_path, "b.cpp", "int x(")], tmp_path / "cache")[0]
    r2 = build.build_all([_src(tmp_path, "b.cpp", "int x(")], tmp_path / "cache")[0]
    assert not r1.ok and not r2.ok and not r2.cached


def test_build_timeout(tmp_path: Path) -> None:
    # a template instantiation bomb: g++ would run for a very long time
    bomb = (
        "template<int N> struct F { static const long v = F<N-1>::v + F<N-2>::v; };\n"
        "template<> struct F<0> { static const long v = 0; };\n"
        "template<> struct F<1> { static const long v = 1; };\n"
        "template<int N, int M> struct G { static const long v = G<N-1, M>::v + G<N, M-1>::v; };\n"
        "template<int N> struct G<N, 0> { static const long v = 1; };\n"
        "template<int M> struct G<0, M> { static const long v = 1; };\n"
        "long x = G<400, 400>::v;\n"
    )
    r = build.build_all([_src(tmp_path, "bomb.cpp", bomb)], tmp_path / "cache", timeout=2)[0]
    assert not r.ok
    assert r.compile_s < 10


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_compiles_without_a_gpu(tmp_path: Path) -> None:
    good = _src(
        tmp_path,
        "k.cu",
        '#include <dlpack/dlpack.h>\n__global__ void k(float* y) { y[threadIdx.x] = 1.f; }\n'
        'extern "C" int maxcode_run(const DLTensor* in, int n_in, DLTensor* out, int n_out, void* s) {\n'
        "  k<<<1, 32, 0, (cudaStream_t)s>>>((float*)out[0].data); return (int)cudaGetLastError(); }\n",
        "cuda",
    )
    bad = _src(tmp_path, "bad.cu", "__global__ void k(float* y) { y[threadIdx.x] = undeclared; }\n", "cuda")
    ok, err = build.build_all([good, bad], tmp_path / "cache")
    assert ok.ok, ok.log
    assert any(f.startswith("-arch=sm_") for f in ok.command)
    assert not err.ok
    assert "bad.cu" in err.errors[0] and "undeclared" in err.errors[0]
