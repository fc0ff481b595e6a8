"""``python -m toporoute``: the command line (see :mod:`toporoute.cli`)."""

import sys

from toporoute.cli import main  # absolute: a spawned child runs this file by path (below)

if __name__ == "__main__":
    # vLLM's engine core and worker are spawned processes. A spawned child re-imports the parent's main module
    # before its work, by path for a script but not at all for a package's __main__ named as a module; as a
    # path, this file imports toporoute there before vLLM, which quiets vLLM's import-time warnings in a quiet
    # start (toporoute._engine_child). Nothing else reads the main module's spec.
    sys.modules["__main__"].__spec__ = None
    sys.exit(main())
