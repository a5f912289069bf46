"""Errors that reach the user as one line that says what to do."""


#: ``--device cuda`` where there is no GPU: said before any work starts, by every command
NO_CUDA_DEVICE = "--device cuda: no CUDA device is available on this machine; use --device cpu"


class MaxcodeError(Exception):
    """A usage error or a broken reference: printed as one line, exit status 2."""


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C, raised in a worker thread's search at its next progress line (the signal
    itself reaches only the main thread)."""
