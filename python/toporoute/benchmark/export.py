"""``toporoute bench --format markdown|csv``: a run (and its comparison with an older run) as a Markdown document
or as CSV, for pasting into a README or an issue, or for a spreadsheet.

- Markdown: the machine line, the run's notes, one table per op and team size (the text tables' columns;
  headed ``route, N=64`` when the run has cases off their op's default N), then the comparison's warnings,
  table, cases in one run only and verdict count.
- CSV: one line per op, size, team size (``agents``: empty for an op without the axis) and side with the timing
  in seconds (full precision), the warm-up calls and the raw round times (space-separated); with a comparison,
  its columns too, and one line per case of the old run only. The machine record is in the ``--json`` file
  and the Markdown, not in the CSV.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from .output import (
    HEADERS,
    case_label,
    cells,
    comparison_names_agents,
    comparison_table,
    describe,
    format_machine,
    names_agents,
    tables,
    title,
)
from .results import BenchRun, Comparison, Row

__all__ = ["CSV_COLUMNS", "CSV_COMPARISON_COLUMNS", "to_csv", "to_markdown"]

CSV_COLUMNS = (
    "op",
    "size",
    "agents",
    "side",
    "kind",
    "status",
    "median_s",
    "min_s",
    "q1_s",
    "q3_s",
    "rounds",
    "number",
    "warmup",
    "vs_reference",
    "vs_alternative",
    "note",
    "round_times_s",
)
CSV_COMPARISON_COLUMNS = ("old_median_s", "new_over_old", "noise", "verdict")
"""Added after :data:`CSV_COLUMNS` when the run is compared with an older one."""


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    head, *body = rows
    lines = ["| " + " | ".join(_md_cell(c) for c in head) + " |"]
    lines.append("|" + "|".join("---:" if r else ":---" for r in right) + "|")
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in body]
    return lines


def to_markdown(run: BenchRun, comparison: Comparison | None = None, old_name: str = "") -> str:
    """``run`` (and ``comparison``, with ``old_name`` the older run's file) as a Markdown document."""
    lines = [_md_cell(format_machine(run.machine))]
    if run.created:
        lines[0] += f" (run {run.created})"
    lines += ["", *(f"- note: {_md_cell(n)}" for n in run.notes)] if run.notes else []
    named = names_agents((r.op, r.agents) for r in run.rows)
    for op, agents, group in tables(run.rows):
        lines += ["", f"### {title(op, agents, named)}", "", _md_cell(describe(op, run.rows, agents)), ""]
        rows = [list(HEADERS)] + [cells(r) for r in group]
        lines += _md_table(rows, [True, False, True, True, True, True, True, True, False])
    if comparison is not None:
        lines += ["", f"### compared with {_md_cell(old_name)}", ""]
        lines += [f"- warning: {_md_cell(w)}" for w in comparison.machine_warnings]
        if comparison.machine_warnings:
            lines.append("")
        if comparison.changes:
            rows, right = comparison_table(comparison, lambda v: f"**{v.upper()}**")
            lines += [*_md_table(rows, right), ""]
        named = comparison_names_agents(comparison)
        for what, cases in (
            ("only in the old run", comparison.only_old),
            ("only in this run", comparison.only_new),
        ):
            if cases:
                lines.append(f"- {what}: " + ", ".join(case_label(k, named) for k in cases))
        if comparison.only_old or comparison.only_new:
            lines.append("")
        n = len(comparison.regressions)
        lines.append(f"{n} regression(s) beyond noise of {len(comparison.changes)} case(s) compared")
    return "\n".join(lines) + "\n"


def _number(x: float | None) -> str:
    return "" if x is None else repr(float(x))


def _csv_row(r: Row) -> list[str]:
    t = r.timing
    timing = (
        ["", "", "", "", "", "", ""]
        if t is None
        else [
            _number(t.median),
            _number(t.min),
            _number(t.q1),
            _number(t.q3),
            str(t.rounds),
            str(t.number),
            str(t.warmup),
        ]
    )
    rounds = "" if t is None else " ".join(map(_number, t.round_times))
    return [
        r.op,
        str(r.size),
        "" if r.agents is None else str(r.agents),
        r.side,
        r.kind,
        r.status,
        *timing,
        _number(r.vs_reference),
        _number(r.vs_alternative),
        r.note,
        rounds,
    ]


def to_csv(run: BenchRun, comparison: Comparison | None = None) -> str:
    """``run`` as CSV (:data:`CSV_COLUMNS`; with ``comparison``, :data:`CSV_COMPARISON_COLUMNS` too, and a line
    per case of the old run only, its other columns empty). Times in seconds, ratios above 1: faster (``vs
    alternative``: the fastest alternative's)."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    if comparison is None:
        out.writerow(CSV_COLUMNS)
        out.writerows(_csv_row(r) for r in run.rows)
        return buf.getvalue()
    out.writerow(CSV_COLUMNS + CSV_COMPARISON_COLUMNS)
    changes = {(c.op, c.size, c.agents, c.side): c for c in comparison.changes}
    only_new = set(comparison.only_new)
    for r in run.rows:
        c = changes.get(r.key)
        if c is not None:
            extra = [_number(c.old), _number(c.ratio), _number(c.noise), c.verdict]
        else:
            extra = ["", "", "", "only in this run" if r.key in only_new else ""]
        out.writerow(_csv_row(r) + extra)
    blank = [""] * (len(CSV_COLUMNS) - 4)
    for op, size, agents, side in comparison.only_old:
        team = "" if agents is None else str(agents)
        out.writerow([op, str(size), team, side, *blank, "", "", "", "only in the old run"])
    return buf.getvalue()
