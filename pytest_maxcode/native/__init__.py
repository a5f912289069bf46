"""Native kernels: the candidate ABI and the build, in one place for the oracle and the runtime dispatcher.

``abi.py`` imports nothing from the package, so the sandboxed worker loads the same file by path.
"""
