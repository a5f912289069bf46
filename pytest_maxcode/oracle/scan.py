"""Static scan of a built native library for ways to tamper with the instruction timer.

Under ``--timer instructions`` the worker runs under callgrind and brackets each measured
call with client requests (``CALLGRIND_TOGGLE_COLLECT``, ``CALLGRIND_DUMP_STATS_AT``). A
client request is nothing but a magic instruction sequence, so a candidate that contains
one can switch collection off during its own call and look arbitrarily cheap. Valgrind
recognises a request only by its exact bytes (the "special instruction preamble" of
``valgrind.h``), which makes the direct form easy to find: this module looks for every
preamble valgrind decodes, anywhere in the file (in executable code it is a request; in
data it is a request waiting to be copied into executable memory).

A candidate can also make the sequence at run time. For that it needs executable memory
(``mprotect``, ``mmap``, a raw ``syscall``, or a write to ``/proc/self/mem``, which
patches read-only code: any file opening counts), another object's code (``dlopen``/``dlsym``,
``dl_iterate_phdr``), or work done in a process callgrind does not follow (``fork``,
``posix_spawn``, ``system``). The counts themselves travel to the parent on the worker's
channel, so a way to write it is a finding as well: the Python C API (which reaches the
worker's objects) and direct writes to descriptors. Imports of those are findings too: honest
kernels need none of them, and under the instruction timer any finding is a rejection.

What a static scan cannot see: a raw ``syscall`` instruction emitted by inline assembly
(its two bytes also occur inside ordinary instructions, so it is not searched for), and a
candidate that walks the loader's data structures by hand to jump into a client request
that already exists in the process (the timer's own shim, valgrind's preload library).
The instruction timer's verdict is therefore also cross-checked against wall time
(:func:`pytest_maxcode.oracle.plausible.instructions_vs_wall`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
PT_LOAD, PF_X = 1, 0x1
SHT_SYMTAB, SHT_NOBITS, SHT_DYNSYM = 2, 8, 11
SHF_EXECINSTR = 0x4
MAX_HITS = 3  # per preamble: enough to show the lead where, short enough for a verdict


@dataclass(frozen=True)
class Preamble:
    """One architecture's special-instruction preamble and the instructions that may follow it."""

    arch: str
    bytes: bytes
    follow: dict[bytes, str]


# From valgrind.h (__SPECIAL_INSTRUCTION_PREAMBLE), encodings checked with an assembler.
PREAMBLES = (
    Preamble(
        "x86-64",
        bytes.fromhex("48c1c703 48c1c70d 48c1c73d 48c1c733"),  # rolq $3,$13,$61,$51, %rdi
        {
            bytes.fromhex("4887db"): "client request (xchg %rbx,%rbx)",
            bytes.fromhex("4887c9"): "get no-redirect address (xchg %rcx,%rcx)",
            bytes.fromhex("4887d2"): "call without redirection (xchg %rdx,%rdx)",
            bytes.fromhex("4887ff"): "IR injection (xchg %rdi,%rdi)",
        },
    ),
    Preamble(
        "x86",
        bytes.fromhex("c1c703 c1c70d c1c71d c1c713"),  # roll $3,$13,$29,$19, %edi
        {
            bytes.fromhex("87db"): "client request (xchg %ebx,%ebx)",
            bytes.fromhex("87c9"): "get no-redirect address (xchg %ecx,%ecx)",
            bytes.fromhex("87d2"): "call without redirection (xchg %edx,%edx)",
            bytes.fromhex("87ff"): "IR injection (xchg %edi,%edi)",
        },
    ),
    Preamble(
        "aarch64",
        bytes.fromhex("8c0dcc93 8c35cc93 8ccdcc93 8cf5cc93"),  # ror x12,x12,#3,#13,#51,#61
        {
            bytes.fromhex("4a010aaa"): "client request (orr x10,x10,x10)",
            bytes.fromhex("6b010baa"): "get no-redirect address (orr x11,x11,x11)",
            bytes.fromhex("8c010caa"): "call without redirection (orr x12,x12,x12)",
            bytes.fromhex("290109aa"): "IR injection (orr x9,x9,x9)",
        },
    ),
)

_EXEC_MEMORY = "can make memory executable and issue a client request from it"
_FOREIGN_CODE = "can reach code in other loaded objects, the timer's own client requests included"
_PROCESS = "can do its work in a process callgrind does not count"
_FILES = "opens files, and writing /proc/self/mem rewrites its own code past page protections"
_CHANNEL = "writes to a descriptor directly: the worker's channel, where the counts are reported, is one"
_PYTHON = ("calls the Python C API: the worker's own objects (its channel, its counters) are one call away, and a "
           "native kernel needs none of it")
SUSPICIOUS_IMPORTS: dict[str, str] = {
    **dict.fromkeys(
        ("write", "__write", "writev", "pwrite", "pwrite64", "pwritev", "pwritev2", "send", "sendto", "sendmsg",
         "sendmmsg", "fdopen", "dup", "dup2", "dup3", "splice", "vmsplice", "tee"),
        _CHANNEL,
    ),
    **dict.fromkeys(
        ("mprotect", "pkey_mprotect", "mmap", "mmap64", "__mmap", "mremap", "memfd_create", "syscall"),
        _EXEC_MEMORY,
    ),
    **dict.fromkeys(
        (
            "dlopen", "dlmopen", "dlsym", "dlvsym", "dlinfo", "dladdr", "dladdr1", "dl_iterate_phdr",
            "_dl_find_object", "__libc_dlopen_mode", "__libc_dlsym", "__libc_dlvsym", "_r_debug", "getauxval",
        ),
        _FOREIGN_CODE,
    ),
    **dict.fromkeys(
        (
            "fork", "vfork", "_Fork", "__fork", "clone", "clone3", "__clone", "posix_spawn", "posix_spawnp",
            "execve", "execv", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve", "system", "popen",
        ),
        _PROCESS,
    ),
    **dict.fromkeys(
        (
            "open", "open64", "openat", "openat64", "__open", "__open64", "__open_2", "__open64_2", "__openat_2",
            "__openat64_2", "fopen", "fopen64", "freopen", "freopen64", "creat", "creat64", "process_vm_writev",
            "ptrace",
        ),
        _FILES,
    ),
}
# C++ file streams open files inside libstdc++: their mangled names are what the candidate imports
_FILE_STREAM_PARTS = ("basic_filebuf", "__basic_file", "stdio_filebuf", "stdio_sync_filebuf")
# valgrind's own preload objects and the timer's shim: any reference to them reaches a client request
_VALGRIND_NAME_PARTS = ("valgrind", "callgrind", "vgplain", "maxcode_cg")


@dataclass(frozen=True)
class _Elf:
    data: bytes
    exec_ranges: list[tuple[int, int]]  # file offsets [start, end) mapped or marked executable
    imports: set[str] | None  # undefined symbol names; None when the file has no symbol table


def _parse(data: bytes) -> _Elf:
    """Executable file ranges and undefined symbols, from the program and section headers."""
    cls, enc = data[4], data[5]
    if cls not in (1, 2) or enc not in (1, 2):
        raise struct.error(f"unknown ELF class {cls} / data encoding {enc}")
    end = "<" if enc == 1 else ">"
    wide = cls == 2
    hdr = struct.unpack_from(end + ("HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH"), data, 16)
    phoff, shoff, phentsize, phnum, shentsize, shnum = hdr[4], hdr[5], hdr[8], hdr[9], hdr[10], hdr[11]
    if (phnum and phentsize < (56 if wide else 32)) or (shoff and shentsize < (64 if wide else 40)):
        raise struct.error(f"header entries too small ({phentsize}, {shentsize} bytes)")
    ranges: list[tuple[int, int]] = []
    for i in range(phnum):
        if wide:
            p_type, p_flags, p_offset, _, _, p_filesz, _, _ = struct.unpack_from(end + "IIQQQQQQ", data, phoff + i * phentsize)
        else:
            p_type, p_offset, _, _, p_filesz, _, p_flags, _ = struct.unpack_from(end + "IIIIIIII", data, phoff + i * phentsize)
        if p_type == PT_LOAD and p_flags & PF_X:
            ranges.append((p_offset, p_offset + p_filesz))
    shfmt = end + ("IIQQQQIIQQ" if wide else "IIIIIIIIII")
    if shoff and shnum == 0:  # extended numbering: the count lives in section 0's sh_size
        shnum = struct.unpack_from(shfmt, data, shoff)[5]
    sections = [struct.unpack_from(shfmt, data, shoff + i * shentsize) for i in range(shnum)] if shoff else []
    imports: set[str] | None = None
    symfmt = end + ("IBBHQQ" if wide else "IIIBBH")
    symsize = struct.calcsize(symfmt)
    for _, sh_type, sh_flags, _, sh_offset, sh_size, sh_link, _, _, _ in sections:
        if sh_flags & SHF_EXECINSTR and sh_type != SHT_NOBITS:
            ranges.append((sh_offset, sh_offset + sh_size))
        if sh_type in (SHT_SYMTAB, SHT_DYNSYM) and sh_link < len(sections):
            imports = set() if imports is None else imports
            strtab = sections[sh_link]
            str_lo, str_hi = strtab[4], strtab[4] + strtab[5]
            for sym in struct.iter_unpack(symfmt, data[sh_offset : sh_offset + sh_size - sh_size % symsize]):
                name_off, shndx = (sym[0], sym[3]) if wide else (sym[0], sym[5])
                if shndx != 0 or not name_off:
                    continue
                stop = data.find(b"\0", str_lo + name_off, str_hi)
                imports.add(data[str_lo + name_off : stop if stop >= 0 else str_hi].decode("latin-1"))
    return _Elf(data, ranges, imports)


def _where(offset: int, ranges: list[tuple[int, int]]) -> str:
    return "executable code" if any(lo <= offset < hi for lo, hi in ranges) else "data"


def _preamble_findings(elf: _Elf) -> list[str]:
    found = []
    for p in PREAMBLES:
        start, hits = 0, 0
        while hits < MAX_HITS and (at := elf.data.find(p.bytes, start)) >= 0:
            tail = elf.data[at + len(p.bytes) : at + len(p.bytes) + 4]
            kind = next((k for b, k in p.follow.items() if tail.startswith(b)), "special instruction")
            found.append(f"valgrind {p.arch} preamble, {kind}, in {_where(at, elf.exec_ranges)} at file offset {at:#x}")
            start, hits = at + 1, hits + 1
    return found


def _import_findings(elf: _Elf, channel: bool = True) -> list[str]:
    suspicious = {n: why for n, why in SUSPICIOUS_IMPORTS.items() if channel or why != _CHANNEL}
    if elf.imports is None:  # no symbol table: look for the names as strings anywhere (conservative)
        names = {n for n in suspicious if b"\0" + n.encode() + b"\0" in elf.data}
        return [f"mentions {n} (no symbol table to tell an import from a string): {suspicious[n]}" for n in sorted(names)]
    found = []
    for base in sorted({name.split("@", 1)[0] for name in elf.imports}):  # .symtab spells versions in
        if base in suspicious:
            found.append(f"imports {base}: {suspicious[base]}")
        elif any(part in base.lower() for part in _VALGRIND_NAME_PARTS) or base.startswith("_vg"):
            found.append(f"imports {base}: a valgrind or timer symbol, a client request one call away")
        elif base.startswith(("Py", "_Py")):
            found.append(f"imports {base}: {_PYTHON}")
    streams = sorted(n for n in elf.imports if any(part in n for part in _FILE_STREAM_PARTS))
    if streams:
        found.append(f"imports C++ file streams ({streams[0].split('@', 1)[0]}): {_FILES}")
    return found


def client_request_findings(path: str | Path, *, channel: bool = True) -> list[str]:
    """One short reason per way the library (or program) at ``path`` could issue a valgrind
    client request (or hide work from callgrind); empty when none is found.

    ``channel=False`` leaves out direct writes to descriptors, which matter where a worker
    reports its counts on one: a program's counts are written by callgrind itself, which keeps
    its descriptors from the program, and a program's writes to stdout are its output.

    Raises ValueError when ``path`` is not an ELF file. A file whose headers do not parse is
    a finding, not an error: the scan cannot vouch for it."""
    data = Path(path).read_bytes()
    if data[:4] != ELF_MAGIC:
        raise ValueError(f"{path} is not an ELF file; pass the shared library or program g++ built from the candidate")
    try:
        elf = _parse(data)
    except (struct.error, IndexError, ValueError) as e:
        elf = _Elf(data, [], None)
        return [f"malformed ELF headers ({e}); the scan cannot vouch for it"] + _preamble_findings(elf) + _import_findings(elf, channel)
    return _preamble_findings(elf) + _import_findings(elf, channel)
