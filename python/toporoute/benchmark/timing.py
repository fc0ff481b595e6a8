"""Timing one call: warm-up calls until the call stops getting faster, then rounds of back-to-back calls, each
round long enough for the clock; the statistics are over the rounds' mean call times.

Warm-up: a first call can take fifty times a warm one (PyTorch's first few calls of a network; thread pools
started, caches filled), and PyTorch needs several calls to get there, so one warm-up call is not enough: the
calls go on while each is more than 20% faster than every call before it, and for at least three calls (a first
slow call may be followed by another as slow), within a time budget (``max_time``, else 1 s).

Asynchronous calls (CUDA on device arrays) return before the device has finished: ``sync`` (e.g.
``torch.cuda.synchronize``) is then called after each warm-up call and once after each round's calls, inside the
timed span, so a round measures the wall time of back-to-back calls, host overhead and queueing included.

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

SETTLED = 0.8
"""Warm-up ends at a call that takes at least this share of the fastest call before it (no longer warming)."""
MIN_WARMUP_CALLS = 3
MAX_WARMUP_CALLS = 50
WARMUP_BUDGET = 1.0
"""Seconds of warm-up calls at most when ``measure`` has no ``max_time``."""


@dataclass(frozen=True)
class Timing:
    """Seconds per call, over ``rounds`` rounds of ``number`` calls each, after ``warmup`` untimed calls.

    ``q1`` and ``q3`` are the quartiles of the round means (both equal the median with one round), so
    ``iqr / median`` is the run's relative noise; ``capped`` says the time budget cut the rounds short;
    ``round_times`` are the rounds' mean call times in the order they ran (empty in result files written before
    schema version 2)."""

    median: float
    min: float
    q1: float
    q3: float
    rounds: int
    number: int
    capped: bool = False
    warmup: int = 0
    round_times: tuple[float, ...] = ()

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
    sync: Callable[[], object] | None = None,
) -> Timing:
    """Times ``fn()`` once it is warm (see the module docstring).

    Parameters
    ----------
    fn : callable
        The call, inputs prepared beforehand.
    repeats : int >= 1
        Rounds timed.
    round_time : float >= 0
        Least seconds per round: a round repeats the call ``max(1, round_time / once)`` times, where ``once`` is
        the fastest warm-up call's time.
    max_time : float, optional
        Budget in seconds for the timed rounds, and for the warm-up calls (default 1 s): a slow call gets fewer
        rounds (at least one) of one call each.
    once : float, optional
        Seconds of a call the caller has just made (e.g. to check its result): it counts as the first warm-up
        call. At least one more call is made either way.
    sync : callable, optional
        For asynchronous calls: waits until their work is done; called after each warm-up call and once at
        the end of each round, inside the timed span (default: none, the call is synchronous).
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
        return _measure(fn, repeats, round_time, max_time, once, sync or _no_sync)
    finally:
        if enabled:
            gc.enable()


def _no_sync() -> None:
    return None


def _warm_up(
    fn: Callable[[], object], once: float | None, budget: float, sync: Callable[[], object]
) -> tuple[float, int]:
    """Calls ``fn`` until a call is no longer clearly faster than all before it; ``(fastest call, calls)``."""
    times = [] if once is None else [once]
    spent = 0.0
    while True:
        t0 = time.perf_counter()
        fn()
        sync()
        t = time.perf_counter() - t0
        times.append(t)
        spent += t
        settled = len(times) >= MIN_WARMUP_CALLS and t >= SETTLED * min(times[:-1])
        if settled or spent >= budget or len(times) >= MAX_WARMUP_CALLS:
            return min(times), len(times)


def _measure(
    fn: Callable[[], object],
    repeats: int,
    round_time: float,
    max_time: float | None,
    once: float | None,
    sync: Callable[[], object],
) -> Timing:
    fastest, warmup = _warm_up(fn, once, WARMUP_BUDGET if max_time is None else max_time, sync)
    once = max(fastest, 1e-7)
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
        sync()
        rounds.append((time.perf_counter() - t0) / number)
    if len(rounds) > 1:
        q1, _, q3 = statistics.quantiles(rounds, n=4, method="inclusive")
    else:
        q1 = q3 = rounds[0]
    return Timing(
        statistics.median(rounds), min(rounds), q1, q3, len(rounds), number, capped, warmup, tuple(rounds)
    )
