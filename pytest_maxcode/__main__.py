"""``python -m pytest_maxcode``: the ``maxcode`` command through the interpreter it is installed
in, so a CI step cannot reach another environment's ``maxcode`` on PATH."""

import sys

from .cli import main

if __name__ == "__main__":  # importing the module (as the dependency checks do) runs nothing
    sys.exit(main())
