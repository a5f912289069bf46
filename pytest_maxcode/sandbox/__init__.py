"""Running untrusted code: OS sandboxes with limits (``isolation``) and scrubbed environments (``env``).

At the bottom of the package: the oracle, the build and the program checks all run candidate code
through it, and it imports nothing above ``errors``.
"""
