"""Quiet child processes of a quietly started vLLM engine.

vLLM starts its engine core and CPU worker as spawned processes. A spawned child imports the parent's main
module (which imports toporoute) before it unpickles its own work, and vLLM logs a few warnings while importing
(Triton's missing CPU backend among them) before it configures its logging, so Python's last-resort handler
prints them. When the engine was started quietly (``llm.vllm_engine.engine_environment`` sets
:data:`QUIET_ENV` for its children), this sets the child's ``vllm`` logger to errors on import; vLLM's own
configuration, at ``VLLM_LOGGING_LEVEL=ERROR``, takes over from there. Nothing changes in any other process.
"""

from __future__ import annotations

import logging
import os
import sys

QUIET_ENV = "TOPOROUTE_QUIET_ENGINE"


def is_spawned_child() -> bool:
    """Whether this process was started by multiprocessing's spawn (its command line ends in
    ``--multiprocessing-fork``; ``multiprocessing.parent_process()`` is only set after the main module's import)."""
    return "--multiprocessing-fork" in getattr(sys, "orig_argv", ())


def quiet_if_engine_child() -> bool:
    """Sets the ``vllm`` logger to errors in a spawned child whose environment asks for it; returns whether
    it did."""
    if os.environ.get(QUIET_ENV) != "1" or not is_spawned_child():
        return False
    logging.getLogger("vllm").setLevel(logging.ERROR)
    return True
