"""Runs the benchmark: for each op and size, the inputs once, then every backend and the alternative timed in
turn (same run, same inputs), each backend's results checked against the reference's first."""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import backends as _backends
from ..errors import BackendUnavailableError, InvalidArgumentError, OutOfRangeError, ToporouteError
from .cases import OPS, Context, OpCase, Unsupported
from .machine import CpuUsage, machine_record, threads
from .results import BenchRun, Row
from .timing import measure

__all__ = ["BACKEND_CHOICES", "BenchOptions", "check_ops", "parse_sizes", "resolve_backends", "run_bench"]

BACKEND_CHOICES = ("all", "reference", "cpu", "cuda")
# Seconds to wait after the reference side before the next side's first call. The reference runs numpy, whose
# OpenBLAS worker threads keep spinning on the CPUs for tens of milliseconds after a matrix product; a side that
# starts meanwhile shares its CPUs with them, and the core's OpenMP team waits for a worker the kernel has not
# scheduled yet (measured: qmix_mix at B = 1024, median 7.98 ms against 304 us after the pause, 2 CPUs).
SETTLE_AFTER_REFERENCE = 0.15
_FAILURES = (ToporouteError, ValueError, RuntimeError, MemoryError, OSError, ImportError)


@dataclass(frozen=True)
class BenchOptions:
    """What to time and how.

    ``sizes``: per op, the sizes to run (ops absent: their defaults, or their quick sizes when ``quick``).
    ``repeats`` rounds of at least ``round_time`` seconds each; ``max_time``: the budget of one side's timed
    rounds (a slow call gets fewer rounds). ``threads``: the core's OpenMP threads, PyTorch's and ONNX
    Runtime's (None: unchanged)."""

    ops: tuple[str, ...] = tuple(OPS)
    backends: tuple[str, ...] = ("reference", "cpu")
    sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    quick: bool = False
    repeats: int = 5
    round_time: float = 0.02
    max_time: float = 1.0
    threads: int | None = None
    alternatives: bool = True

    def __post_init__(self) -> None:
        check_ops(list(self.ops) + list(self.sizes))
        bad = [b for b in self.backends if b not in BACKEND_CHOICES[1:]]
        if bad or not self.backends:
            raise InvalidArgumentError(
                f"backends must be some of {', '.join(BACKEND_CHOICES[1:])}; got {list(self.backends)}",
                "backends",
            )
        for name, value, low in (("repeats", self.repeats, 1), ("threads", self.threads, 1)):
            if value is not None and value < low:
                raise OutOfRangeError(f"{name} must be >= {low}; got {value}", name)
        if self.round_time < 0 or self.max_time <= 0:
            raise OutOfRangeError(
                f"round_time must be >= 0 and max_time > 0; got {self.round_time} and {self.max_time}",
                "max_time",
            )

    def sizes_of(self, op: str) -> tuple[int, ...]:
        spec = OPS[op]
        return self.sizes.get(op, spec.quick if self.quick else spec.defaults)


def check_ops(names: Sequence[str]) -> tuple[str, ...]:
    """The op names, checked (none: every op)."""
    bad = [n for n in names if n not in OPS]
    if bad:
        raise InvalidArgumentError(
            f"unknown op(s) {', '.join(repr(b) for b in bad)}; choose from {', '.join(OPS)}", "ops"
        )
    return tuple(dict.fromkeys(names)) or tuple(OPS)


def parse_sizes(specs: Sequence[str], ops: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """``--sizes`` values: ``1,64,4096`` (every op named) or ``OP=1,64`` (one op), later ones winning."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        target, _, values = spec.rpartition("=")
        names = [target] if target else list(ops)
        if target and target not in OPS:
            raise InvalidArgumentError(
                f"--sizes {spec!r}: unknown op {target!r}; choose from {', '.join(OPS)}", "sizes"
            )
        if target and target not in ops:
            raise InvalidArgumentError(
                f"--sizes {spec!r}: names {target}, which this run does not time (ops: {', '.join(ops)})",
                "sizes",
            )
        sizes = []
        for v in values.split(","):
            try:
                n = int(v)
            except ValueError:
                raise InvalidArgumentError(
                    f"--sizes {spec!r}: {v!r} is not a size; expected positive integers like 1,64,4096",
                    "sizes",
                ) from None
            sizes.append(n)
        for name in names:
            limit = OPS[name].max_size
            bad = [n for n in sizes if not 1 <= n <= limit]
            if bad:
                raise OutOfRangeError(
                    f"--sizes {spec!r}: {name} takes sizes in [1, {limit}] ({OPS[name].meaning}); got "
                    f"{', '.join(map(str, bad))}",
                    "sizes",
                )
            out[name] = tuple(dict.fromkeys(sizes))
    return out


def resolve_backends(choice: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(backends to time, notes)``: ``all`` is every available backend (the others noted); a named backend
    that is not available here is an error with the reason."""
    if choice not in BACKEND_CHOICES:
        raise InvalidArgumentError(
            f"--backend {choice!r}: choose from {', '.join(BACKEND_CHOICES)}", "backend"
        )
    available = _backends.available()
    if choice != "all":
        ok, why = available[choice]
        if not ok:
            raise BackendUnavailableError(f"--backend {choice}: not available here: {why}", "backend")
        return (choice,), ()
    names = tuple(n for n in ("reference", "cpu", "cuda") if available[n][0])
    notes = tuple(
        f"backend {n} not available: {available[n][1]}" for n in ("cpu", "cuda") if not available[n][0]
    )
    return names, notes


def _fields(result: Any) -> list[tuple[str, Any]]:
    if isinstance(result, np.ndarray):
        return [("", result)]
    if isinstance(result, tuple) and hasattr(result, "_fields"):
        return list(zip(result._fields, result))
    if isinstance(result, tuple):
        return [(str(i), v) for i, v in enumerate(result)]
    if hasattr(result, "__dict__"):
        return list(vars(result).items())
    return [("", result)]


def _differs(got: Any, want: Any) -> str:
    """The first field where ``got`` differs from ``want`` (floats within rtol 1e-4, atol 1e-5), else ""."""
    for (name, g), (_, w) in zip(_fields(got), _fields(want)):
        if isinstance(w, np.ndarray):
            g = np.asarray(g)
            if g.shape != w.shape:
                return f"{name or 'result'} shape {g.shape} vs {w.shape}"
            same = (
                np.allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True)
                if w.dtype.kind == "f"
                else np.array_equal(g, w)
            )
        else:
            same = g == w
        if not same:
            return name or "result"
    return ""


def _row(
    op: str,
    size: int,
    side: str,
    kind: str,
    fn: Callable[[], object],
    opts: BenchOptions,
    once: float | None = None,
) -> Row:
    try:
        t = measure(fn, repeats=opts.repeats, round_time=opts.round_time, max_time=opts.max_time, once=once)
    except (Unsupported, BackendUnavailableError) as exc:
        return Row(op, size, side, kind, "skipped", str(exc))
    except _FAILURES as exc:  # a failing side is reported in its row; the others still run
        return Row(op, size, side, kind, "error", f"{type(exc).__name__}: {exc}")
    note = "time budget cut the rounds" if t.capped else ""
    return Row(op, size, side, kind, "ok", note, t)


def _case_rows(op: str, size: int, case: OpCase, opts: BenchOptions, say: Callable[[str], None]) -> list[Row]:
    spec = OPS[op]
    rows: list[Row] = []
    want: Any = None
    for backend in opts.backends:
        if backend not in spec.backends:
            continue
        say(f"{op} B={size} {backend}")
        if rows and rows[-1].side == "reference":
            time.sleep(SETTLE_AFTER_REFERENCE)
        try:
            fn = case.call(backend)
            t0 = time.perf_counter()
            result = fn()  # the warm-up call too
            once = time.perf_counter() - t0
        except (Unsupported, BackendUnavailableError) as exc:
            rows.append(Row(op, size, backend, "backend", "skipped", str(exc)))
            continue
        except _FAILURES as exc:
            rows.append(Row(op, size, backend, "backend", "error", f"{type(exc).__name__}: {exc}"))
            continue
        mismatch = ""
        if backend == "reference":
            want = result
        elif want is not None:
            field_name = _differs(result, want)
            mismatch = f"results differ from the reference ({field_name})" if field_name else ""
        row = _row(op, size, backend, "backend", fn, opts, once)
        if mismatch:
            row = replace(row, note="; ".join(filter(None, (mismatch, row.note))))
        rows.append(row)
    if spec.alternative is not None and opts.alternatives:
        if case.alternative is None:
            rows.append(Row(op, size, spec.alternative, "alternative", "skipped", case.alternative_note))
        else:
            say(f"{op} B={size} {spec.alternative}")
            rows.append(_row(op, size, spec.alternative, "alternative", case.alternative, opts))
    return _with_ratios(rows)


def _median(rows: list[Row], kind: str, side: str | None = None) -> float | None:
    for r in rows:
        if r.kind == kind and (side is None or r.side == side) and r.timing is not None:
            return r.timing.median
    return None


def _with_ratios(rows: list[Row]) -> list[Row]:
    ref = _median(rows, "backend", "reference")
    alt = _median(rows, "alternative")
    return [
        r
        if r.timing is None
        else replace(
            r,
            vs_reference=None if ref is None else ref / r.timing.median,
            vs_alternative=None if alt is None else alt / r.timing.median,
        )
        for r in rows
    ]


def run_bench(
    opts: BenchOptions, progress: Callable[[str], None] | None = None, notes: Sequence[str] = ()
) -> BenchRun:
    """Times every op of ``opts`` at its sizes on its backends and against its alternative.

    ``progress`` gets a line before each side is timed (``"[3/40] route B=64 cpu"``); ``notes`` are recorded
    with the run (e.g. the backends ``all`` left out)."""
    cases = [(op, size) for op in opts.ops for size in opts.sizes_of(op)]
    start = time.perf_counter()
    ctx = Context(threads=opts.threads)
    rows: list[Row] = []
    usage = CpuUsage()
    with threads(opts.threads):
        machine = machine_record(opts.threads)
        for i, (op, size) in enumerate(cases, 1):

            def say(what: str, i: int = i) -> None:
                if progress is not None:
                    progress(f"[{i}/{len(cases)} {time.perf_counter() - start:.0f} s] {what}")

            try:
                case = OPS[op].prepare(size, ctx)
            except Unsupported as exc:  # every side of this op lacks the same thing
                spec = OPS[op]
                sides = [(b, "backend") for b in opts.backends if b in spec.backends]
                if spec.alternative is not None and opts.alternatives:
                    sides.append((spec.alternative, "alternative"))
                rows.extend(Row(op, size, side, kind, "skipped", str(exc)) for side, kind in sides)
                continue
            rows.extend(_case_rows(op, size, case, opts, say))
            del case
    machine["during_run"] = {
        "seconds": round(time.perf_counter() - start, 1),
        "other_cpu_share": usage.share(),
        "load_average_1m_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    options = {
        "ops": list(opts.ops),
        "backends": list(opts.backends),
        "sizes": {op: list(opts.sizes_of(op)) for op in opts.ops},
        "repeats": opts.repeats,
        "round_time": opts.round_time,
        "max_time": opts.max_time,
        "threads": opts.threads,
        "alternatives": opts.alternatives,
    }
    return BenchRun(machine, options, tuple(rows), tuple(notes), created)
