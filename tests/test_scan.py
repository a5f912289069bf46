"""The instruction timer's static scan: built libraries that carry or can make valgrind
client requests (or hide work from callgrind) are found; an honest kernel is clean."""

from __future__ import annotations

import platform
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from pytest_maxcode.native import build
from pytest_maxcode.oracle.scan import PREAMBLES, client_request_findings

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
DATA = Path(__file__).parent / "data"

CLEAN = r"""
#include <cmath>
#include <cstdint>
#include <vector>
extern "C" int kernel(const float* a, float* b, int64_t n) {
  std::vector<float> t(n);
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) t[i] = std::exp(a[i]);
  for (int64_t i = 0; i < n; ++i) b[i] = t[i] * 2.0f;
  return 0;
}
"""

CALLGRIND = r"""
#include <valgrind/callgrind.h>
#include <cstdint>
extern "C" int kernel(const float* a, float* b, int64_t n) {
  CALLGRIND_TOGGLE_COLLECT;  // collection off: the work below is not counted
  for (int64_t i = 0; i < n; ++i) b[i] = a[i] * 2.0f;
  CALLGRIND_TOGGLE_COLLECT;
  return 0;
}
"""


def _bytes(data: bytes) -> str:
    return ",".join(f"{b:#04x}" for b in data)


def _x86_64_request() -> bytes:
    p = next(p for p in PREAMBLES if p.arch == "x86-64")
    return p.bytes + bytes.fromhex("4887db")


def _aarch64_request() -> bytes:
    p = next(p for p in PREAMBLES if p.arch == "aarch64")
    return p.bytes + bytes.fromhex("4a010aaa")


# the preamble as raw bytes in the text section, no valgrind header: GNU as takes .byte on every target
INLINE_ASM = (
    r"""
#include <cstdint>
asm(".text\n.globl hidden_request\nhidden_request:\n.byte X86_64\n.byte AARCH64\n");
extern "C" int kernel(const float* a, float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) b[i] = a[i] * 2.0f;
  return 0;
}
""".replace("X86_64", _bytes(_x86_64_request())).replace("AARCH64", _bytes(_aarch64_request()))
)

# the request kept as data, to be copied into executable memory later
IN_DATA = (
    r"""
extern "C" const unsigned char request_bytes[] = {BYTES};
extern "C" const unsigned char* kernel(void) { return request_bytes; }
""".replace("BYTES", _bytes(_aarch64_request()))
)

MPROTECT = r"""
#include <sys/mman.h>
#include <cstdint>
#include <cstring>
extern "C" int kernel(unsigned char* code, const unsigned char* bytes, int64_t n) {
  std::memcpy(code, bytes, n);
  return mprotect(code, 4096, PROT_READ | PROT_EXEC);
}
"""

DLSYM = r"""
#include <dlfcn.h>
extern "C" int kernel(void) {
  void* h = dlopen("libanything.so", RTLD_NOW);
  return dlsym(h, "maxcode_cg_toggle") != nullptr;
}
"""

FORK = r"""
#include <unistd.h>
extern "C" int kernel(void) { return fork(); }
"""

SYSCALL = r"""
#include <unistd.h>
#include <sys/syscall.h>
extern "C" long kernel(void* p) { return syscall(SYS_mprotect, p, 4096, 7); }
"""

# /proc/self/mem writes past page protections: the preamble can be patched into read-only code
PROC_SELF_MEM = r"""
#include <fcntl.h>
#include <unistd.h>
#include <cstdint>
extern "C" long kernel(void* code, const unsigned char* bytes, long n) {
  int fd = open("/proc/self/mem", O_RDWR);
  return pwrite(fd, bytes, n, (off_t)(uintptr_t)code);
}
"""

PROC_SELF_MEM_STREAM = r"""
#include <fstream>
#include <cstdint>
extern "C" int kernel(void* code, const char* bytes, long n) {
  std::ofstream f("/proc/self/mem", std::ios::binary);
  f.seekp((intptr_t)code);
  f.write(bytes, n);
  return f.good();
}
"""

# the result channel forged from the kernel: the worker's counts are reported on a descriptor,
# and the Python C API reaches the worker's own objects (declared extern: no dlsym needed)
PYTHON_API = r"""
extern "C" int PyRun_SimpleString(const char*);
extern "C" int PyGILState_Ensure(void);
extern "C" int kernel(void) { PyGILState_Ensure(); return PyRun_SimpleString("import os"); }
"""

CHANNEL_WRITE = r"""
#include <unistd.h>
#include <sys/socket.h>
extern "C" long kernel(int fd, const char* msg, long n) { return write(fd, msg, n) + send(fd, msg, n, 0); }
"""

SHIM_SYMBOL = r"""
extern "C" void maxcode_cg_toggle(void);
extern "C" int kernel(void) { maxcode_cg_toggle(); return 0; }
"""


def _build(tmp_path: Path, name: str, source: str) -> Path:
    src = tmp_path / f"{name}.cpp"
    src.write_text(source)
    lib = tmp_path / f"lib{name}.so"
    subprocess.run(
        ["g++", "-O3", "-fopenmp", "-std=c++17", "-shared", "-fPIC", str(src), "-o", str(lib)],
        check=True, capture_output=True, text=True,
    )
    return lib


def test_an_honest_kernel_is_clean(tmp_path: Path) -> None:
    assert client_request_findings(_build(tmp_path, "clean", CLEAN)) == []


@pytest.mark.skipif(not Path("/usr/include/valgrind/callgrind.h").exists(), reason="needs valgrind's headers")
@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="preambles known for x86-64 and aarch64")
def test_callgrind_toggle_from_the_header_is_found(tmp_path: Path) -> None:
    findings = client_request_findings(_build(tmp_path, "toggle", CALLGRIND))
    arch = "x86-64" if platform.machine() == "x86_64" else "aarch64"
    assert findings and all(f"valgrind {arch} preamble, client request" in f for f in findings)
    assert all("in executable code" in f for f in findings)


def test_preamble_bytes_emitted_by_inline_asm_are_found(tmp_path: Path) -> None:
    findings = client_request_findings(_build(tmp_path, "asm", INLINE_ASM))
    assert any(f.startswith("valgrind x86-64 preamble, client request (xchg %rbx,%rbx), in executable code") for f in findings)
    assert any(f.startswith("valgrind aarch64 preamble, client request (orr x10,x10,x10), in executable code") for f in findings)
    assert len(findings) == 2


def test_preamble_kept_as_data_is_found(tmp_path: Path) -> None:
    findings = client_request_findings(_build(tmp_path, "data", IN_DATA))
    assert len(findings) == 1 and findings[0].startswith("valgrind aarch64 preamble, client request")
    assert "in data" in findings[0]


@pytest.mark.parametrize(
    ("name", "source", "imports"),
    [
        ("mprotect", MPROTECT, {"mprotect"}),
        ("dlsym", DLSYM, {"dlopen", "dlsym"}),
        ("fork", FORK, {"fork"}),
        ("syscall", SYSCALL, {"syscall"}),
        ("shim", SHIM_SYMBOL, {"maxcode_cg_toggle"}),
        ("python", PYTHON_API, {"PyRun_SimpleString", "PyGILState_Ensure"}),
        ("channel", CHANNEL_WRITE, {"write", "send"}),
    ],
)
def test_imports_that_can_make_or_reach_a_request_are_found(tmp_path: Path, name: str, source: str, imports: set[str]) -> None:
    findings = client_request_findings(_build(tmp_path, name, source))
    assert {f.split(":", 1)[0].removeprefix("imports ") for f in findings} == imports
    assert all(f.startswith("imports ") for f in findings)


def test_opening_proc_self_mem_is_found(tmp_path: Path) -> None:
    findings = client_request_findings(_build(tmp_path, "procmem", PROC_SELF_MEM))
    opens = {"open", "open64", "__open_2", "__open64_2"}  # the name depends on _FORTIFY_SOURCE and the libc
    named = {f.split(":", 1)[0].removeprefix("imports "): f for f in findings}
    (open_name,) = set(named) & opens
    assert set(named) == {open_name, "pwrite"} and "/proc/self/mem" in named[open_name]
    assert "a descriptor" in named["pwrite"]


def test_cpp_file_streams_are_one_finding(tmp_path: Path) -> None:
    findings = client_request_findings(_build(tmp_path, "stream", PROC_SELF_MEM_STREAM))
    assert len(findings) == 1 and findings[0].startswith("imports C++ file streams (")
    assert "/proc/self/mem" in findings[0]


def _without_section_headers(lib: Path) -> Path:
    data = bytearray(lib.read_bytes())
    assert data[4] == 2 and data[5] == 1, "the test patches a little-endian ELF64 header"
    struct.pack_into("<Q", data, 0x28, 0)  # e_shoff
    struct.pack_into("<H", data, 0x3C, 0)  # e_shnum
    out = lib.with_name(f"noshdr-{lib.name}")
    out.write_bytes(bytes(data))
    return out


def test_without_section_headers_the_names_are_searched_as_strings(tmp_path: Path) -> None:
    findings = client_request_findings(_without_section_headers(_build(tmp_path, "mprotect", MPROTECT)))
    assert findings == [f for f in findings if f.startswith("mentions ")] and any("mprotect" in f for f in findings)
    assert client_request_findings(_without_section_headers(_build(tmp_path, "clean", CLEAN))) == []


def test_truncated_elf_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    lib = _build(tmp_path, "clean", CLEAN)
    cut = tmp_path / "cut.so"
    cut.write_bytes(lib.read_bytes()[:40])
    findings = client_request_findings(cut)
    assert findings and findings[0].startswith("malformed ELF headers")
    zero = bytearray(lib.read_bytes())
    struct.pack_into("<H", zero, 0x3A, 0)  # e_shentsize 0: every section header at one offset
    (tmp_path / "zero.so").write_bytes(bytes(zero))
    assert client_request_findings(tmp_path / "zero.so")[0].startswith("malformed ELF headers")


def test_a_file_that_is_not_elf_is_a_one_line_error(tmp_path: Path) -> None:
    src = tmp_path / "kernel.cpp"
    src.write_text(CLEAN)
    with pytest.raises(ValueError, match="not an ELF file; pass the shared library"):
        client_request_findings(src)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the instruction timer's flags target x86-64-v3")
@pytest.mark.skipif(not Path("/usr/include/valgrind/callgrind.h").exists(), reason="needs valgrind's headers")
def test_libraries_as_the_instruction_timer_builds_them(tmp_path: Path) -> None:
    good = (DATA / "chain" / "good.cpp").read_text()
    toggled = good.replace("#include <cstdint>", "#include <cstdint>\n#include <valgrind/callgrind.h>").replace(
        "#pragma omp parallel for", "CALLGRIND_TOGGLE_COLLECT;\n#pragma omp parallel for"
    )
    assert toggled.count("CALLGRIND_TOGGLE_COLLECT") == 1
    sources = []
    for name, text in (("good.cpp", good), ("toggled.cpp", toggled)):
        (tmp_path / name).write_text(text)
        sources.append(build.Source(tmp_path / name, "cpp"))
    built = build.build_all(sources, tmp_path / "cache", cxxflags=list(build.VALGRIND_CXXFLAGS))
    assert all(r.ok for r in built), [r.errors for r in built]
    assert client_request_findings(built[0].library) == []
    assert [f.split(",")[0] for f in client_request_findings(built[1].library)] == ["valgrind x86-64 preamble"]
