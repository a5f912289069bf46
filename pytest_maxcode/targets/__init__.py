"""The targets layer: the decorator, target ids, the lock file and runtime dispatch."""
