"""Persistent state: one SQLite file per project, ``.maxcode/maxcode.db``."""

from .sqlite import Store, default_path

__all__ = ["Store", "default_path"]
