"""Plain types at the bottom of the package: every layer may import them, none owns them.

They import nothing from the package at run time (annotations name the oracle's types only
under ``TYPE_CHECKING``), so the search, the critics and the value models can all share
them without importing each other.
"""
