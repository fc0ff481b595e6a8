"""How big the benchmarks run: ``full`` (the comparisons of DESIGN.md's performance table at their sizes) or
``smoke`` (every benchmark at small sizes with one timed round, still asserting its results: what CI runs).

The mode is ``$TOPOROUTE_BENCH`` (``full`` or ``smoke``); when it is unset, bench/conftest.py sets it to
``smoke`` under ``--benchmark-disable`` (as CI runs) and to ``full`` otherwise. Sizes are read when a benchmark
module is imported, so parametrisations can depend on them.
"""

from __future__ import annotations

import os
from typing import TypeVar

__all__ = ["ENV", "MODES", "mode", "pick", "timing"]

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


def timing(*, min_time: float = 0.2, repeat: int = 7) -> dict[str, float]:
    """Keyword arguments of ``bench._compare.seconds``: as given at full size, one short round at smoke size."""
    return {"min_time": min_time, "repeat": repeat} if mode() == "full" else {"min_time": 0.0, "repeat": 1}
