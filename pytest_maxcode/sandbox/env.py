"""What untrusted candidate processes may see of ours: a scrubbed environment."""

from __future__ import annotations

import ctypes
import fnmatch
import os
from typing import Mapping

SECRET_PATTERNS = (
    "*KEY*",
    "*TOKEN*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*AUTH*",
    "*COOKIE*",
    "*SESSION*",
    "ANTHROPIC_*",
    "OPENAI_*",
    "GITHUB_*",
    "GH_*",
    "AWS_*",
    "AZURE_*",
    "GOOGLE_*",
    "HF_*",
    "HUGGING*",
    "ACTIONS_*",
    "RUNNER_*",
    "SSH_*",
    "GPG_*",
    "NETRC",
)

_PR_SET_DUMPABLE = 4


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p) for p in SECRET_PATTERNS)


def scrubbed_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for workers: everything secret-looking removed."""
    source = os.environ if env is None else env
    return {k: v for k, v in source.items() if not is_secret(k)}


def hide_own_environment() -> None:
    """Stop same-user processes reading our /proc/PID/environ (which still holds the secrets).

    A candidate could otherwise walk up its parents and read the token there. Root can
    still read it; run untrusted code as an unprivileged user in production.
    """
    try:
        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
