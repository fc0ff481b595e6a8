"""Timing one call: warm-up calls, then rounds of back-to-back calls, each round long enough for the clock; the
statistics are over the rounds' mean call times.

The garbage collector is off while timing (as in ``timeit``): otherwise a collection triggered by one side scans
every object another side keeps alive (networkx graphs hold millions) and lands in the wrong timing.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import OutOfRangeError

__all__ = ["Timing", "measure"]


@dataclass(frozen=True)
class Timing:
    """Seconds per call, over ``rounds`` rounds of ``number`` calls each (after the warm-up calls).

    ``q1`` and ``q3`` are the quartiles of the round means (both equal the median with one round), so
    ``iqr / median`` is the run's relative noise; ``capped`` says the time budget cut the rounds short."""

    median: float
    min: float
    q1: float
    q3: float
    rounds: int
    number: int
    capped: bool = False

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def rel_iqr(self) -> float:
        """IQR / median (0 with one round)."""
        return self.iqr / self.median if self.median > 0 else 0.0


def measure(
    fn: Callable[[], object],
    *,
    repeats: int = 5,
    round_time: float = 0.02,
    max_time: float | None = None,
    once: float | None = None,
) -> Timing:
    """Times ``fn()``.

    Parameters
    ----------
    fn : callable
        The call, inputs prepared beforehand.
    repeats : int >= 1
        Rounds timed.
    round_time : float >= 0
        Least seconds per round: a round repeats the call ``max(1, round_time / once)`` times, where ``once`` is
        the faster warm-up call's time.
    max_time : float, optional
        Budget in seconds for the timed rounds: a slow call gets fewer rounds (at least one) of one call each.
    once : float, optional
        Seconds of a call the caller has just made (e.g. to check its result). One more call is timed either
        way, and the faster of the two sets the round length.
    """
    if repeats < 1:
        raise OutOfRangeError(f"repeats must be >= 1; got {repeats}", "repeats")
    if round_time < 0:
        raise OutOfRangeError(f"round_time must be >= 0; got {round_time}", "round_time")
    if max_time is not None and max_time <= 0:
        raise OutOfRangeError(f"max_time must be > 0; got {max_time}", "max_time")
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _measure(fn, repeats, round_time, max_time, once)
    finally:
        if enabled:
            gc.enable()


def _measure(
    fn: Callable[[], object], repeats: int, round_time: float, max_time: float | None, once: float | None
) -> Timing:
    # the round length comes from the faster of the caller's call and one more: a single cold call (threads
    # woken, caches filled) can take a hundred times a warm one, and would leave rounds of one call each
    t0 = time.perf_counter()
    fn()
    again = time.perf_counter() - t0
    once = max(again if once is None else min(once, again), 1e-7)
    number = max(1, int(round_time / once))
    capped = False
    if max_time is not None and once * number * repeats > max_time:
        number = max(1, int(max_time / (once * repeats)))
        if once * repeats > max_time:
            repeats, capped = max(1, int(max_time / once)), True
    rounds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - t0) / number)
    if len(rounds) > 1:
        q1, _, q3 = statistics.quantiles(rounds, n=4, method="inclusive")
    else:
        q1 = q3 = rounds[0]
    return Timing(statistics.median(rounds), min(rounds), q1, q3, len(rounds), number, capped)
