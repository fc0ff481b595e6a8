"""Same-run timing of two implementations and the printed ratio (no timing assertions: machines are noisy)."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

from ._scale import mode


def seconds(fn: Callable[[], object], *, min_time: float = 0.2, repeat: int = 7) -> float:
    """Median over ``repeat`` rounds of the mean call time, each round lasting at least ``min_time`` (at smoke size,
    see :mod:`bench._scale`: one short round).

    The garbage collector is off while timing (as in ``timeit``): otherwise a collection triggered by one side
    scans every object the other side keeps alive (networkx graphs hold millions) and lands in the wrong timing.
    """
    if mode() == "smoke":
        min_time, repeat = 0.0, 1
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _seconds(fn, min_time, repeat)
    finally:
        if enabled:
            gc.enable()


def _seconds(fn: Callable[[], object], min_time: float, repeat: int) -> float:
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    number = max(1, int(min_time / once))
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - t0) / number)
    return statistics.median(rounds)


def report(what: str, slow_name: str, slow: float, fast_name: str, fast: float, target: float) -> float:
    ratio = slow / fast
    verdict = "meets" if ratio >= target else "BELOW"
    print(
        f"\n[ratio] {what}: {slow_name} {slow * 1e6:.1f} us / {fast_name} {fast * 1e6:.1f} us = {ratio:.1f}x "
        f"({verdict} target >= {target:g}x)"
    )
    return ratio
