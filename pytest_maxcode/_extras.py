"""Optional dependencies: what one feature needs is an extra, and a missing one is one line.

A pytest plugin installs into every test environment, so the core stays light; the bot,
the OpenAI client, scikit-learn, Ray and the RL stack come with ``pytest-maxcode[EXTRA]``.
Features import them through :func:`require` at the moment they are used, so the rest of
the package imports without them and the user is told which extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MaxcodeError

#: module -> the extra of pyproject.toml that installs it
EXTRAS: dict[str, str] = {
    "github": "bot",
    "git": "bot",
    "openai": "openai",
    "sklearn": "value",
    "scipy": "value",
    "ray": "ray",
    "trl": "rl",
    "datasets": "rl",
    "transformers": "rl",
}


class MissingExtra(MaxcodeError):
    """A feature was used without the extra that installs its dependency."""


def missing_message(module: str, feature: str) -> str:
    extra = EXTRAS[module.split(".")[0]]
    return f"{feature} needs the '{extra}' extra: pip install 'pytest-maxcode[{extra}]'"


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` or raise one line naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        if e.name is not None and e.name.split(".")[0] != top:
            raise  # the package is there but broken: its own error says more
        raise MissingExtra(missing_message(module, feature)) from None
