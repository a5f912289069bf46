"""How each verdict status is coloured in a terminal (rich styles): one table for ``maxcode
check`` and the search tree of ``maxcode show``. A leaf module: it imports nothing."""

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
