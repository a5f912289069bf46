"""Errors that reach the user as one line that says what to do."""


class MaxcodeError(Exception):
    """A usage error or a broken reference: printed as one line, exit status 2."""


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C, raised in a worker thread's search at its next progress line (the signal
    itself reaches only the main thread)."""
