"""pytest-maxcode: verified C++/CUDA speedups for hot PyTorch and C++ code.

    import pytest_maxcode as maxcode

The public surface is this module; everything else is private to the package.
Heavy parts (torch, the oracle) are imported only when used.
"""

from ._version import __version__
from .errors import MaxcodeError
from .targets.decorator import MaxcodeWarning, optimize

__all__ = ["MaxcodeError", "MaxcodeWarning", "__version__", "optimize"]
