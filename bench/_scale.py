"""How big the benchmarks run: ``full`` (the comparisons of DESIGN.md's performance table at their sizes) or
``smoke`` (every benchmark at small sizes with one timed round, still asserting its results: what CI runs;
``bench._compare.seconds`` times one short round).

The mode is ``$TOPOROUTE_BENCH`` (``full`` or ``smoke``); when it is unset, bench/conftest.py sets it to
``smoke`` under ``--benchmark-disable`` (as CI runs) and to ``full`` otherwise. Sizes are read when a benchmark
module is imported, so parametrisations can depend on them.
"""

from __future__ import annotations

import os
from typing import TypeVar

__all__ = ["ENV", "MODES", "mode", "pick"]

ENV = "TOPOROUTE_BENCH"
MODES = ("full", "smoke")

T = TypeVar("T")


def mode() -> str:
    """``"full"`` or ``"smoke"`` (``$TOPOROUTE_BENCH``; ``full`` when unset)."""
    value = os.environ.get(ENV) or "full"
    if value not in MODES:
        raise ValueError(f"{ENV} must be one of {', '.join(MODES)}; got {value!r}")
    return value


def pick(full: T, smoke: T) -> T:
    """``full`` or ``smoke``, by the mode."""
    return smoke if mode() == "smoke" else full
