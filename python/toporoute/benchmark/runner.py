"""Runs the benchmark: for each op, team size and size, the inputs once, then every backend and the alternatives
timed in turn (same run, same inputs), each backend's results checked against the reference's first.

With the ``cuda`` backend, ops with a device placement are also timed on device-resident inputs (side
``cuda-device``: back-to-back calls, one synchronisation per round) against the same computation in PyTorch on the
same GPU where there is one (side ``torch-cuda``; its ``vs alt`` column is the device rows' own), and ``route``
against a device-to-device copy of its inputs (side ``d2d-copy``; both rows note their GB/s)."""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import backends as _backends
from ..backends import cpu as _cpu
from ..errors import BackendUnavailableError, InvalidArgumentError, OutOfRangeError, ToporouteError
from .cases import OPS, Context, DeviceCase, OpCase, Unsupported
from .device import Device, open_device
from .machine import CpuUsage, machine_record, threads
from .results import BenchRun, Row
from .timing import Timing, measure

__all__ = [
    "BACKEND_CHOICES",
    "DEVICE",
    "DEVICE_ALTERNATIVE",
    "DEVICE_COPY",
    "BenchOptions",
    "agent_ops",
    "check_ops",
    "parse_agents",
    "parse_sizes",
    "resolve_backends",
    "result_fields",
    "run_bench",
]

BACKEND_CHOICES = ("all", "reference", "cpu", "cuda")
# Seconds to wait after the reference side before the next side's first call. The reference runs numpy, whose
# OpenBLAS worker threads keep spinning on the CPUs for tens of milliseconds after a matrix product; a side that
# starts meanwhile shares its CPUs with them, and the core's OpenMP team waits for a worker the kernel has not
# scheduled yet (measured: qmix_mix at B = 1024, median 7.98 ms against 304 us after the pause, 2 CPUs).
SETTLE_AFTER_REFERENCE = 0.15
_FAILURES = (ToporouteError, ValueError, RuntimeError, MemoryError, OSError, ImportError)
# Row kinds of the device-array sides, and their side names.
DEVICE = "device"
DEVICE_ALTERNATIVE = "device alternative"
DEVICE_COPY = "device copy"
_DEVICE_SIDES = {DEVICE: "cuda-device", DEVICE_ALTERNATIVE: "torch-cuda", DEVICE_COPY: "d2d-copy"}


@dataclass(frozen=True)
class BenchOptions:
    """What to time and how.

    ``sizes``: per op, the sizes to run (ops absent: their defaults, or their quick sizes when ``quick``).
    ``agents``: the team sizes N of the ops with that axis (:attr:`OpSpec.agents`; empty: each op's own); the
    other ops ignore them, but at least one op of the run must take them. ``repeats`` rounds of at least
    ``round_time`` seconds each; ``max_time``: the budget of one side's timed rounds (a slow call gets fewer
    rounds). ``threads``: the core's OpenMP threads, PyTorch's and ONNX Runtime's (None: unchanged)."""

    ops: tuple[str, ...] = tuple(OPS)
    backends: tuple[str, ...] = ("reference", "cpu")
    sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    quick: bool = False
    repeats: int = 5
    round_time: float = 0.02
    max_time: float = 1.0
    threads: int | None = None
    alternatives: bool = True
    agents: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_ops(list(self.ops) + list(self.sizes))
        self._check_agents()
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

    def agents_of(self, op: str) -> tuple[int | None, ...]:
        """The team sizes ``op`` runs at: ``agents`` (or its own) for an op with the axis, else ``(None,)``."""
        default = OPS[op].agents
        return (None,) if default is None else self.agents or (default,)

    def _check_agents(self) -> None:
        if not self.agents:
            return
        takers = agent_ops(self.ops)
        if not takers:
            raise InvalidArgumentError(
                f"--agents sets the team size of {', '.join(agent_ops(OPS))} (the ops with a team-size axis); "
                f"none of them is timed here (ops: {', '.join(self.ops)})",
                "agents",
            )
        for op in takers:
            spec = OPS[op]
            bad = [n for n in self.agents if not 1 <= n <= spec.max_agents]
            if bad:
                raise OutOfRangeError(
                    f"--agents: {op} takes team sizes in [1, {spec.max_agents}] (agents per episode; "
                    f"{spec.max_agents}: the service's max_agents); got {', '.join(map(str, bad))}",
                    "agents",
                )
            for size in self.sizes_of(op):
                for n in self.agents:
                    if size * n > spec.max_rows:
                        raise OutOfRangeError(
                            f"--agents: {op} at B={size} and N={n} is {size * n} agent rows; it takes at most "
                            f"{spec.max_rows} (B x N) per case: lower --sizes or --agents",
                            "agents",
                        )


def agent_ops(names: Iterable[str]) -> tuple[str, ...]:
    """The ops among ``names`` with a team-size axis (:attr:`OpSpec.agents`)."""
    return tuple(n for n in names if OPS[n].agents is not None)


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


def parse_agents(spec: str | None) -> tuple[int, ...]:
    """``--agents`` value: ``8,64,256`` (team sizes of the ops with that axis); None: ``()``, each op's own."""
    if spec is None:
        return ()
    out = []
    for v in spec.split(","):
        try:
            n = int(v)
        except ValueError:
            n = 0  # refused below, with the values under 1
        if n < 1:
            raise InvalidArgumentError(
                f"--agents {spec!r}: {v!r} is not a team size; expected positive integers like 8,64,256",
                "agents",
            )
        out.append(n)
    return tuple(dict.fromkeys(out))


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


def result_fields(result: Any) -> list[tuple[str, Any]]:
    """An op result as ``(name, value)`` pairs: a named tuple's or a dataclass's fields, a plain tuple's items
    by index, or the whole result (one array, numpy or a device array, or a scalar) as ``"result"``."""
    if isinstance(result, np.ndarray) or hasattr(result, "__dlpack__"):  # an array (device arrays too)
        return [("result", result)]
    if isinstance(result, tuple) and hasattr(result, "_fields"):
        return list(zip(result._fields, result))
    if isinstance(result, tuple):
        return [(str(i), v) for i, v in enumerate(result)]
    if hasattr(result, "__dict__"):
        return list(vars(result).items())
    return [("result", result)]


def _differs(got: Any, want: Any, host: Callable[[Any], np.ndarray] = np.asarray) -> str:
    """The first field where ``got`` differs from ``want`` (floats within rtol 1e-4, atol 1e-5), else "";
    ``host`` brings a field of ``got`` to a numpy array (e.g. from the device)."""
    got_fields, want_fields = result_fields(got), result_fields(want)
    if len(got_fields) != len(want_fields):
        return f"{len(got_fields)} result fields vs {len(want_fields)}"
    for (name, g), (_, w) in zip(got_fields, want_fields):
        if isinstance(w, np.ndarray):
            g = host(g)
            if g.shape != w.shape:
                return f"{name} shape {g.shape} vs {w.shape}"
            same = (
                np.allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True)
                if w.dtype.kind == "f"
                else np.array_equal(g, w)
            )
        else:
            same = g == w
        if not same:
            return name
    return ""


@dataclass(frozen=True)
class _Where:
    """What rows are of: the op, its size B and its team size N (None: the op has no such axis); ``named``:
    whether progress lines name N (when ``--agents`` is given)."""

    op: str
    size: int
    agents: int | None
    named: bool = False

    def row(self, side: str, kind: str, status: str, note: str = "", timing: Timing | None = None) -> Row:
        return Row(self.op, self.size, side, kind, status, note, timing, agents=self.agents)

    def label(self, side: str) -> str:
        """The progress line's case and side: ``route B=64 N=128 cpu``."""
        team = f" N={self.agents}" if self.named and self.agents is not None else ""
        return f"{self.op} B={self.size}{team} {side}"


def _row(
    where: _Where,
    side: str,
    kind: str,
    fn: Callable[[], object],
    opts: BenchOptions,
    once: float | None = None,
    sync: Callable[[], object] | None = None,
) -> Row:
    try:
        t = measure(
            fn, repeats=opts.repeats, round_time=opts.round_time, max_time=opts.max_time, once=once, sync=sync
        )
    except (Unsupported, BackendUnavailableError) as exc:
        return where.row(side, kind, "skipped", str(exc))
    except _FAILURES as exc:  # a failing side is reported in its row; the others still run
        return where.row(side, kind, "error", f"{type(exc).__name__}: {exc}")
    note = "time budget cut the rounds" if t.capped else ""
    return where.row(side, kind, "ok", note, t)


def _case_rows(
    where: _Where,
    case: OpCase,
    opts: BenchOptions,
    say: Callable[[str], None],
    device: Device | None = None,
) -> list[Row]:
    op = where.op
    spec = OPS[op]
    rows: list[Row] = []
    want: Any = None
    for backend in opts.backends:
        if backend not in spec.backends:
            continue
        say(where.label(backend))
        if rows and rows[-1].side == "reference":
            time.sleep(SETTLE_AFTER_REFERENCE)
        try:
            fn = case.call(backend)
            t0 = time.perf_counter()
            result = fn()  # the warm-up call too
            once = time.perf_counter() - t0
        except (Unsupported, BackendUnavailableError) as exc:
            rows.append(where.row(backend, "backend", "skipped", str(exc)))
            continue
        except _FAILURES as exc:
            rows.append(where.row(backend, "backend", "error", f"{type(exc).__name__}: {exc}"))
            continue
        mismatch = ""
        if backend == "reference":
            want = result
        elif want is not None:
            field_name = _differs(result, want)
            mismatch = f"results differ from the reference ({field_name})" if field_name else ""
        row = _row(where, backend, "backend", fn, opts, once)
        # the level of an op that picks one per call size (the qmix networks); empty notes are left out
        level = _cpu.simd_level(op, case.args) if backend == "cpu" else None
        note = _join(mismatch, f"SIMD {level}" if level else "", case.note, row.note)
        rows.append(replace(row, note=note))
    for alt in case.alternatives if opts.alternatives else ():
        if alt.call is None:
            rows.append(where.row(alt.name, "alternative", "skipped", alt.note))
        else:
            say(where.label(alt.name))
            rows.append(_row(where, alt.name, "alternative", alt.call, opts))
    # an op without a kernel on the device's backend gets no device rows (its backend row says so already)
    if device is not None and case.on_device is not None and op in _backends.kernels(device.backend):
        if want is None:  # the device rows are checked against the reference too (untimed)
            want = case.call("reference")()
        rows += _device_rows(where, case, opts, say, device, want)
    return _with_ratios(rows)


def _device_rows(
    where: _Where,
    case: OpCase,
    opts: BenchOptions,
    say: Callable[[str], None],
    device: Device,
    want: Any,
) -> list[Row]:
    """The op on device-resident inputs, its PyTorch alternative on the same device and, for a memory-bound
    op, the device-to-device copy of its inputs; every call is timed back-to-back with one synchronisation per
    round (the CUDA backend does not synchronise)."""
    side = _DEVICE_SIDES[DEVICE]
    if case.on_device is None:
        return []
    say(where.label(side))
    try:
        dcase: DeviceCase = case.on_device(device)
        fn = dcase.call
        t0 = time.perf_counter()
        result = fn()
        device.finish()  # the warm-up call's errors, reported here (the call itself does not wait)
        once = time.perf_counter() - t0
        mismatch = _differs(result, want, device.host)
    except (Unsupported, BackendUnavailableError) as exc:
        return [where.row(side, DEVICE, "skipped", str(exc))]
    except _FAILURES as exc:
        return [where.row(side, DEVICE, "error", f"{type(exc).__name__}: {exc}")]
    del result
    rows: list[Row] = []
    copy_seconds = None
    if dcase.copy is not None and dcase.bytes_moved:
        copy_side = _DEVICE_SIDES[DEVICE_COPY]
        say(where.label(copy_side))
        copy_row = _row(where, copy_side, DEVICE_COPY, dcase.copy, opts, sync=device.synchronize)
        if copy_row.timing is not None:
            copy_seconds = copy_row.timing.median
            copy_row = replace(
                copy_row, note=_join(f"{_gbps(dcase.copy_bytes, copy_seconds)}", copy_row.note)
            )
        rows.append(copy_row)
    row = _finished(_row(where, side, DEVICE, fn, opts, once, sync=device.synchronize), device)
    notes = [f"results differ from the reference ({mismatch})" if mismatch else ""]
    if row.timing is not None and dcase.bytes_moved:
        moved = _gbps(dcase.bytes_moved, row.timing.median)
        if copy_seconds is not None:
            share = (dcase.bytes_moved / row.timing.median) / (dcase.copy_bytes / copy_seconds)
            moved += f", {share:.0%} of the copy's"
        notes.append(moved)
    rows.insert(0, replace(row, note=_join(*notes, row.note)))
    if opts.alternatives:
        alt_side = _DEVICE_SIDES[DEVICE_ALTERNATIVE]
        if dcase.alternative is None:
            if dcase.alternative_note:
                rows.append(where.row(alt_side, DEVICE_ALTERNATIVE, "skipped", dcase.alternative_note))
        else:
            say(where.label(alt_side))
            rows.append(
                _row(where, alt_side, DEVICE_ALTERNATIVE, dcase.alternative, opts, sync=device.synchronize)
            )
    return rows


def _finished(row: Row, device: Device) -> Row:
    """``row``, or an error row when the device reports an error of the timed calls (reported late: the calls
    do not wait for the device)."""
    try:
        device.finish()
    except _FAILURES as exc:
        return replace(row, status="error", note=f"{type(exc).__name__}: {exc}", timing=None)
    return row


def _gbps(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 1e9:.0f} GB/s"


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _median(rows: list[Row], kind: str, side: str | None = None) -> float | None:
    """The least median of the timed rows of ``kind`` (and ``side``): of several alternatives, the fastest's."""
    medians = [
        r.timing.median
        for r in rows
        if r.kind == kind and (side is None or r.side == side) and r.timing is not None
    ]
    return min(medians, default=None)


def _with_ratios(rows: list[Row]) -> list[Row]:
    """Each timed row with the reference's median over its own and the alternative's: the fastest host
    alternative's for host rows, the device alternative's for device rows (a copy row gets none: it computes
    nothing)."""
    ref = _median(rows, "backend", "reference")
    host_alt = _median(rows, "alternative")
    device_alt = _median(rows, DEVICE_ALTERNATIVE)
    out = []
    for r in rows:
        if r.timing is None or r.kind == DEVICE_COPY:
            out.append(r)
            continue
        alt = device_alt if r.kind in (DEVICE, DEVICE_ALTERNATIVE) else host_alt
        out.append(
            replace(
                r,
                vs_reference=None if ref is None else ref / r.timing.median,
                vs_alternative=None if alt is None else alt / r.timing.median,
            )
        )
    return out


def run_bench(
    opts: BenchOptions,
    progress: Callable[[str], None] | None = None,
    notes: Sequence[str] = (),
    device: Device | None = None,
) -> BenchRun:
    """Times every op of ``opts`` at its team sizes and sizes on its backends and against its alternatives.

    ``progress`` gets a line before each side is timed (``"[3/40] route B=64 cpu"``; ``route B=64 N=128 cpu``
    with ``opts.agents``); ``notes`` are recorded with the run (e.g. the backends ``all`` left out).
    ``device``: where the device-array rows run (default: the GPU when ``opts.backends`` has ``cuda``, opened
    through PyTorch or CuPy; none otherwise)."""
    named = bool(opts.agents)
    cases = [
        _Where(op, size, n, named)
        for op in opts.ops
        for n in opts.agents_of(op)
        for size in opts.sizes_of(op)
    ]
    start = time.perf_counter()
    ctx = Context(threads=opts.threads)
    rows: list[Row] = []
    notes = list(notes)
    fixed = [op for op in opts.ops if op not in agent_ops(opts.ops)]
    if opts.agents and fixed:
        notes.append(f"--agents applies to {', '.join(agent_ops(opts.ops))}; not to {', '.join(fixed)}")
    if device is None and "cuda" in opts.backends:
        try:
            device = open_device()
        except Unsupported as exc:
            notes.append(f"no device-array rows: {exc}")
    if device is not None:
        notes.append(
            f"device: {device.name()} ({device.framework} arrays); the device rows time back-to-back calls on "
            "device-resident inputs, one synchronisation per round"
        )
    usage = CpuUsage()
    with threads(opts.threads):
        machine = machine_record(opts.threads)
        if device is not None:
            machine["device"] = {"name": device.name(), "framework": device.framework}
        for i, where in enumerate(cases, 1):

            def say(what: str, i: int = i) -> None:
                if progress is not None:
                    progress(f"[{i}/{len(cases)} {time.perf_counter() - start:.0f} s] {what}")

            spec = OPS[where.op]
            try:
                team = () if where.agents is None else (where.agents,)
                case = spec.prepare(where.size, ctx, *team)
            except Unsupported as exc:  # every side of this op lacks the same thing
                sides = [(b, "backend") for b in opts.backends if b in spec.backends]
                if opts.alternatives:
                    sides += [(name, "alternative") for name in spec.alternatives]
                rows.extend(where.row(side, kind, "skipped", str(exc)) for side, kind in sides)
                continue
            rows.extend(_case_rows(where, case, opts, say, device))
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
        "agents": {op: list(opts.agents_of(op)) for op in agent_ops(opts.ops)},
        "repeats": opts.repeats,
        "round_time": opts.round_time,
        "max_time": opts.max_time,
        "threads": opts.threads,
        "alternatives": opts.alternatives,
    }
    return BenchRun(machine, options, tuple(rows), tuple(notes), created)
