"""Same-run timing of two implementations and the printed ratio (no timing assertions: machines are noisy)."""

from __future__ import annotations

from collections.abc import Callable

from toporoute.benchmark import measure

from ._scale import mode


def seconds(fn: Callable[[], object], *, min_time: float = 0.2, repeat: int = 7) -> float:
    """Median over ``repeat`` rounds of the mean call time, each round lasting at least ``min_time``, after a
    warm-up call, garbage collector off (:func:`toporoute.benchmark.measure`, which ``toporoute bench`` uses
    too). At smoke size (see :mod:`bench._scale`): one short round."""
    if mode() == "smoke":
        min_time, repeat = 0.0, 1
    return measure(fn, repeats=repeat, round_time=min_time).median


def report(what: str, slow_name: str, slow: float, fast_name: str, fast: float, target: float) -> float:
    ratio = slow / fast
    verdict = "meets" if ratio >= target else "BELOW"
    print(
        f"\n[ratio] {what}: {slow_name} {slow * 1e6:.1f} us / {fast_name} {fast * 1e6:.1f} us = {ratio:.1f}x "
        f"({verdict} target >= {target:g}x)"
    )
    return ratio
