"""A/A: a compat candidate whose ModelNew is the reference itself."""

from ref import Model as ModelNew  # noqa: F401
