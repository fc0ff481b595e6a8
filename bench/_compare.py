"""Same-run timing of two implementations and the printed ratio (no timing assertions: machines are noisy)."""

from __future__ import annotations

import os
from collections.abc import Callable

from toporoute.benchmark import measure

from ._scale import mode


def seconds(fn: Callable[[], object], *, min_time: float = 0.2, repeat: int = 7) -> float:
    """Median over ``repeat`` rounds of the mean call time, each round lasting at least ``min_time``, after
    warm-up calls until the call stops getting faster, garbage collector off (:func:`toporoute.benchmark.measure`, which ``toporoute bench`` uses
    too). At smoke size (see :mod:`bench._scale`): one short round."""
    if mode() == "smoke":
        min_time, repeat = 0.0, 1
    return measure(fn, repeats=repeat, round_time=min_time).median


def report(
    what: str, slow_name: str, slow: float, fast_name: str, fast: float, target: float | None
) -> float:
    """Prints ``[ratio] what: slow / fast = ratio`` and whether it meets ``target`` (None: DESIGN.md and the
    issues state none for this case, and the line says so rather than inventing one); returns the ratio."""
    ratio = slow / fast
    if target is None:
        verdict = "no target stated"
    else:
        verdict = f"{'meets' if ratio >= target else 'BELOW'} target >= {target:g}x"
    shown = f"{ratio:.2f}" if ratio < 1 else f"{ratio:.1f}"  # 0.04x, not 0.0x
    print(
        f"\n[ratio] {what}: {slow_name} {slow * 1e6:.1f} us / {fast_name} {fast * 1e6:.1f} us = {shown}x "
        f"({verdict})"
    )
    return ratio


def machine(*, omp: bool = False, flags: bool = False) -> str:
    """The CPU a benchmark names beside its figures: the model and the logical CPUs, with ``omp`` the
    ``OMP_NUM_THREADS`` setting, with ``flags`` each SIMD flag :func:`toporoute.llm.cpu.cpu_info` reports."""
    from toporoute.llm.cpu import cpu_info

    cpu = cpu_info()
    text = f"{cpu.model}, {os.cpu_count()} logical CPUs"
    if omp:
        text += f", OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'default')}"
    if flags:
        text += "; " + " ".join(f"{f}={'yes' if on else 'no'}" for f, on in cpu.reported().items())
    return text
