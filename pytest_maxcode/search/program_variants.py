"""The built-in policy's rewrites of a C++ program: what a judge's veteran tries first.

Stream I/O synchronised with C stdio and ``endl`` flushing every line dominate many slow
programs' time (PIE's most common single edit); loop unrolling sometimes helps the rest.
Each is a candidate like any other: the oracle decides whether it is correct and faster.
"""

from __future__ import annotations

import re

MAIN = re.compile(r"\bint\s+main\s*\([^)]*\)\s*\{")
ENDL = re.compile(r"(?:\bstd::)?\bendl\b")
C_STDIO = re.compile(r"\b(?:printf|scanf|puts|getchar|putchar|fgets|fputs|gets)\s*\(")
FAST_IO = "\n    std::ios_base::sync_with_stdio(false);\n    std::cin.tie(nullptr);"
UNROLL = '#pragma GCC optimize("O3,unroll-loops")\n'


def fast_io(source: str) -> str | None:
    """Unsynchronised, untied streams and no per-line flush; None when it does not apply
    (no iostream use, or C stdio mixed in, whose order unsynchronised streams would break)."""
    m = MAIN.search(source)
    if m is None or not re.search(r"\b(?:cin|cout)\b", source) or C_STDIO.search(source):
        return None
    if "sync_with_stdio" in source and not ENDL.search(source):
        return None
    text = source if "sync_with_stdio" in source else source[: m.end()] + FAST_IO + source[m.end() :]
    return ENDL.sub(lambda _m: "'\\n'", text)


def unrolled(source: str) -> str:
    return UNROLL + source


def program_variants(source: str) -> list[tuple[str, str, dict[str, str]]]:
    """(file stem, program text, parameters) for each rewrite that applies, in the order tried."""
    out = []
    fast = fast_io(source)
    if fast is not None:
        out.append(("fast-io", fast, {"rewrite": "fast-io"}))
    out.append(("unroll", unrolled(source), {"rewrite": "unroll-loops"}))
    if fast is not None:
        out.append(("fast-io-unroll", unrolled(fast), {"rewrite": "fast-io+unroll-loops"}))
    return out
