"""``python -m toporoute``: the command line (see :mod:`toporoute.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
