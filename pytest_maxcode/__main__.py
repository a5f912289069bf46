"""``python -m pytest_maxcode``: the ``maxcode`` command through the interpreter it is installed
in, so a CI step cannot reach another environment's ``maxcode`` on PATH."""

import sys

from .cli import main

sys.exit(main())
