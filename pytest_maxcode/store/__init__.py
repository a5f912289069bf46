"""Persistent state: one SQLite file per project, ``.maxcode/maxcode.db``."""

from .sqlite import Store, StoreDamaged, damage, default_path, move_aside

__all__ = ["Store", "StoreDamaged", "damage", "default_path", "move_aside"]
