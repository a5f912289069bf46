"""How text looks in a terminal: each verdict status's colour (rich styles), one table for
``maxcode check`` and the search tree of ``maxcode show``, and :func:`terminal_safe` for the
text a candidate chose. A leaf module: it imports nothing of the package."""

import re

STATUS_STYLE: dict[str, str] = {
    "faster": "bold green",
    "not_faster": "yellow",
    "wrong": "red",
    "compile_error": "red",
    "runtime_error": "red",
    "crash": "red",
    "timeout": "red",
    "rejected": "bold red",
}

#: C0 controls but tab and newline, DEL, C1 controls (CSI, OSC as one byte), and the bidi
#: overrides and isolates that reorder what a line shows
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _visible(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every control character a terminal would act on shown as its escape (``\\x1b``).

    A compile error, a reason or a file name can hold what the candidate wrote: raw, an escape
    sequence clears the screen, recolours or retitles it, or plants a hyperlink (OSC 8). Only
    what is written to a terminal goes through here; the JSON and the store keep the text as it was.
    """
    return _UNSAFE.sub(_visible, text)
