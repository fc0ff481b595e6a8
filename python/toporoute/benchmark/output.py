"""How ``toporoute bench`` shows its results: the machine line, one table per op and team size, the comparison
with an older run, and the latency-against-size figure.

The team size N shows in each table's description (``route (B episodes of N=64 agents, ...)``); headings, the
comparison's table and its lists name it only when some case of the run is off its op's default N (``--agents``),
so a run at the defaults reads as it did before the axis."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ToporouteError
from .cases import OPS
from .results import BenchRun, Comparison, Row

__all__ = [
    "case_label",
    "cells",
    "comparison_names_agents",
    "comparison_table",
    "describe",
    "format_comparison",
    "format_machine",
    "format_run",
    "format_seconds",
    "names_agents",
    "plot_run",
    "tables",
    "title",
]

_COLORS = {"reference": "C0", "cpu": "C1", "cuda": "C2", "cuda-device": "C4"}  # the alternatives: C3, dashed
HEADERS = ("size", "side", "median", "min", "IQR", "rounds", "vs ref", "vs alt", "note")


def format_seconds(s: float) -> str:
    """``s`` seconds with 3 significant digits in ns, us, ms or s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:#.3g} {unit}".replace(". ", " ")
    return f"{s / 1e-9:#.3g} ns".replace(". ", " ")


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x" if x < 10 else f"{x:.1f}x" if x < 100 else f"{x:.0f}x"


def cells(r: Row) -> list[str]:
    """The row's cells under :data:`HEADERS` (times with units, ratios with an x)."""
    t = r.timing
    if t is None:
        return [str(r.size), r.side, "-", "-", "-", "-", "-", "-", f"{r.status}: {r.note}"]
    return [
        str(r.size),
        r.side,
        format_seconds(t.median),
        format_seconds(t.min),
        f"{t.rel_iqr:.1%}" if t.rounds > 1 else "-",
        f"{t.rounds}x{t.number}",
        _ratio(r.vs_reference),
        _ratio(r.vs_alternative),
        r.note,
    ]


def _table(rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right)]
        lines.append("  ".join(cells).rstrip())
    return lines


def format_machine(machine: dict[str, Any]) -> str:
    """One line: CPU model, usable CPUs, the flags present, threads, SIMD level, load."""
    cpu, th = machine.get("cpu", {}), machine.get("threads", {})
    flags = " ".join(f for f, on in cpu.get("flags", {}).items() if on) or "no AVX2"
    simd = machine.get("build_info", {}).get("simd", {}).get("active", "-")
    vm = ", VM" if cpu.get("hypervisor") else ""
    load = cpu.get("load_average_1m")
    other = machine.get("during_run", {}).get("other_cpu_share")
    busy = "" if other is None else f"; other processes used {other:.0%} of the CPUs during the run"
    return (
        f"machine: {cpu.get('model', '?')} ({cpu.get('usable_cpus', '?')} usable CPUs{vm}; {flags}); core "
        f"threads {th.get('core_openmp', '-')}, SIMD {simd}; load {'-' if load is None else f'{load:.2f}'} at "
        f"start{busy}"
    )


def describe(op: str, rows: Sequence[Row], agents: int | None = None) -> str:
    """What ``op``'s table at team size ``agents`` (None: the op's default) measures: its size's meaning, its
    alternatives, and, when ``rows`` (the run's) hold device rows, what their ``vs alt`` compares with."""
    spec = OPS.get(op)
    if spec is None:
        return "size B" + ("" if agents is None else f", N={agents}")
    text = spec.meaning_at(agents)
    if len(spec.alternatives) == 1:
        text += f"; alternative: {spec.alternatives[0]}"
    elif spec.alternatives:
        text += f"; alternatives: {', '.join(spec.alternatives)} (vs alt: the fastest)"
    if spec.device_alternative and any(r.op == op and r.kind == "device alternative" for r in rows):
        text += f"; on device arrays: {spec.device_alternative}"
    return text


def tables(rows: Sequence[Row]) -> list[tuple[str, int | None, list[Row]]]:
    """``rows`` as tables: ``(op, agents, rows)`` per op and team size, in the order the rows come."""
    groups: dict[tuple[str, int | None], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.op, r.agents), []).append(r)
    return [(op, agents, group) for (op, agents), group in groups.items()]


def names_agents(cases: Iterable[tuple[str, int | None]]) -> bool:
    """Whether some ``(op, agents)`` is off the op's default team size: headings and lists then name N."""
    for op, agents in cases:
        spec = OPS.get(op)
        if agents is not None and (spec is None or agents != spec.agents):
            return True
    return False


def title(op: str, agents: int | None, named: bool) -> str:
    """A table's heading: the op, and its team size when ``named`` (:func:`names_agents`)."""
    return f"{op}, N={agents}" if named and agents is not None else op


def case_label(key: tuple[str, int, int | None, str], named: bool) -> str:
    """A case (:attr:`Row.key`) in the comparison's lists: ``route 64 cpu``, ``route 64 N=128 cpu``."""
    op, size, agents, side = key
    return f"{op} {size}{f' N={agents}' if named and agents is not None else ''} {side}"


def format_run(run: BenchRun) -> str:
    """The machine line, then per op and team size its meaning and a table of one row per size and side.
    ``vs ref`` and ``vs alt`` are the reference's and the fastest alternative's medians over the row's (same
    run)."""
    lines = [format_machine(run.machine)]
    lines += [f"note: {n}" for n in run.notes]
    for op, agents, group in tables(run.rows):
        lines += ["", f"{op} ({describe(op, run.rows, agents)})"]
        rows = [list(HEADERS)] + [cells(r) for r in group]
        lines += _table(rows, [True, False, True, True, True, True, True, True, False])
    return "\n".join(lines)


def _wrap_items(head: str, items: Sequence[str], width: int) -> list[str]:
    """``head`` then the items, comma-separated, in lines of at most ``width`` characters (an item is never
    split: one longer than the width gets a line of its own), continued with an indent of two spaces."""
    lines = [head]
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines.append("  " + piece)
    return lines


def comparison_names_agents(cmp: Comparison) -> bool:
    """:func:`names_agents` of the compared cases and those in one run only."""
    keys = [(c.op, c.agents) for c in cmp.changes]
    keys += [(op, agents) for op, _, agents, _ in (*cmp.only_old, *cmp.only_new)]
    return names_agents(keys)


def comparison_table(cmp: Comparison, regression: Callable[[str], str]) -> tuple[list[list[str]], list[bool]]:
    """The comparison's table, header first: op, size, N (when :func:`names_agents`; ``-`` for an op without
    the axis), side, old, new, new/old, noise, verdict, a regression's verdict written by ``regression`` (e.g.
    upper case); and which columns are right-aligned."""
    named = comparison_names_agents(cmp)
    team = ["N"] if named else []
    rows = [["op", "size", *team, "side", "old", "new", "new/old", "noise", "verdict"]]
    for c in cmp.changes:
        rows.append(
            [
                c.op,
                str(c.size),
                *(["-" if c.agents is None else str(c.agents)] if named else []),
                c.side,
                format_seconds(c.old),
                format_seconds(c.new),
                f"{c.ratio:.2f}",
                f"±{c.noise:.0%}",
                regression(c.verdict) if c.verdict == "regression" else c.verdict,
            ]
        )
    return rows, [False, True, *([True] if named else []), False, True, True, True, True, False]


def format_comparison(cmp: Comparison, old_name: str, width: int | None = None) -> str:
    """The comparison with the older run: per case both medians, new / old and the verdict; the lists of cases
    in one run only are wrapped to ``width`` columns (default: the terminal's, 100 when not a terminal)."""
    if width is None:
        width = shutil.get_terminal_size((100, 24)).columns
    lines = [f"compared with {old_name}:"]
    lines += [f"warning: {w}" for w in cmp.machine_warnings]
    if cmp.changes:
        lines += _table(*comparison_table(cmp, str.upper))
    named = comparison_names_agents(cmp)
    for what, keys in (("only in the old run", cmp.only_old), ("only in this run", cmp.only_new)):
        if keys:
            lines += _wrap_items(f"{what}:", [case_label(k, named) for k in keys], width)
    n = len(cmp.regressions)
    lines.append(f"{n} regression(s) beyond noise of {len(cmp.changes)} case(s) compared")
    return "\n".join(lines)


def check_plotting() -> None:
    """Raises when matplotlib is missing (before a run spends its time)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise ToporouteError(
            "--plot needs matplotlib: pip install 'toporoute[report]' (or matplotlib)", "plot"
        )


def plot_run(run: BenchRun, path: Path) -> None:
    """Median latency against size, log-log, one panel per op and team size and one line per side; written
    atomically."""
    import io
    import math
    import textwrap

    check_plotting()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .._atomic import write_bytes_atomic

    panels = [(op, agents, group) for op, agents, group in tables(run.rows) if any(r.timing for r in group)]
    if not panels:
        raise ToporouteError("--plot: no case was timed, nothing to draw", "plot")
    named = names_agents((r.op, r.agents) for r in run.rows)
    cols = min(4, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3.2 * nrows), squeeze=False)
    for ax, (op, agents, group) in zip(axes.flat, panels):
        sides = {r.side: r.kind for r in group if r.timing is not None}
        for side, kind in sides.items():
            pts = sorted((r.size, r.timing.median) for r in group if r.side == side and r.timing)
            style = {
                "color": _COLORS.get(side, "C3"),
                "linestyle": "--" if kind.endswith("alternative") else "-",
            }
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=side, **style)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title(op, agents, named), fontsize=10)
        ax.set_xlabel("size (B)")
        ax.set_ylabel("median s / call")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle("\n".join(textwrap.wrap(format_machine(run.machine), 40 * cols)), fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())
