"""The results of a ``toporoute bench`` run, their JSON form (schema ``toporoute-bench``, versioned) and the
comparison of two runs.

Noise: a case is a regression when its new median exceeds the old one by more than
``max(min_change, 3 x the larger relative IQR of the two runs)`` (``min_change`` 10% by default); an improvement
symmetrically. One-round timings have no IQR, so only ``min_change`` guards them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._atomic import write_json_atomic
from ..errors import InvalidArgumentError
from .timing import Timing

__all__ = [
    "BUSY",
    "SCHEMA",
    "SCHEMA_VERSION",
    "BenchRun",
    "CaseChange",
    "Comparison",
    "Row",
    "compare_runs",
    "read_run",
]

SCHEMA = "toporoute-bench"
SCHEMA_VERSION = 3
READS = (1, 2, 3)
"""Schema versions this toporoute reads (version 1 files lack the warm-up count and the round times, versions 1
and 2 the team size: their rows get their op's default N)."""
BUSY = 0.2
"""Above this share of the CPUs used by other processes during a run, its timings are flagged as disturbed."""


@dataclass(frozen=True)
class Row:
    """One op at one size on one side: a backend (``kind == "backend"``) or one of the op's usual alternatives.

    ``agents``: the team size N of an op with that axis (agents per episode), else None. ``status``:
    ``"ok"``, ``"skipped"`` (``note`` says why: not installed, no kernel on that backend) or ``"error"``; a
    backend whose results differ from the reference's is ``"ok"`` with a ``note`` saying so.
    ``vs_reference`` / ``vs_alternative``: the reference's / the fastest alternative's median over this row's,
    same run (above 1: this side is faster)."""

    op: str
    size: int
    side: str
    kind: str
    status: str
    note: str = ""
    timing: Timing | None = None
    vs_reference: float | None = None
    vs_alternative: float | None = None
    agents: int | None = None

    @property
    def key(self) -> tuple[str, int, int | None, str]:
        """``(op, size, agents, side)``: what ``--compare`` matches rows on."""
        return (self.op, self.size, self.agents, self.side)


@dataclass(frozen=True)
class BenchRun:
    """A whole run: the machine record, the options, the rows (in table order) and run-level notes."""

    machine: dict[str, Any]
    options: dict[str, Any]
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = ()
    created: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "created": self.created,
            "machine": self.machine,
            "options": self.options,
            "notes": list(self.notes),
            "results": [
                {
                    **asdict(r),
                    "timing": None
                    if r.timing is None
                    else {**asdict(r.timing), "round_times": list(r.timing.round_times), "iqr": r.timing.iqr},
                }
                for r in self.rows
            ],
        }

    def write(self, path: Path) -> None:
        """Writes the JSON form atomically."""
        write_json_atomic(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: Any, source: str = "data", arg: str = "compare") -> BenchRun:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise InvalidArgumentError(f'{source}: not a {SCHEMA} result file (no "schema": "{SCHEMA}")', arg)
        if data.get("schema_version") not in READS:
            raise InvalidArgumentError(
                f"{source}: schema_version {data.get('schema_version')!r}; this toporoute reads "
                f"{', '.join(map(str, READS))}",
                arg,
            )
        rows = []
        before_agents = data["schema_version"] < 3  # then every op was timed at its default team size
        try:
            for r in data["results"]:
                t = r.get("timing")
                timing: Timing | None = None
                if t is not None:
                    fields = {k: v for k, v in t.items() if k != "iqr"}
                    timing = Timing(**{**fields, "round_times": tuple(fields.get("round_times", ()))})
                agents = _default_agents(r["op"]) if before_agents else r.get("agents")
                rows.append(Row(**{**r, "timing": timing, "agents": agents}))
        except (KeyError, TypeError, AttributeError) as exc:
            raise InvalidArgumentError(f"{source}: malformed results entry ({exc})", arg) from exc
        return cls(
            data.get("machine", {}),
            data.get("options", {}),
            tuple(rows),
            tuple(data.get("notes", ())),
            data.get("created", ""),
        )


def _default_agents(op: str) -> int | None:
    from .cases import OPS

    spec = OPS.get(op)
    return None if spec is None else spec.agents


def read_run(path: Path, arg: str = "compare") -> BenchRun:
    """Reads a result file written by ``toporoute bench --json``; errors name the option ``arg`` it came from."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidArgumentError(f"{arg}: cannot read {path}: {exc.strerror}", arg) from exc
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{arg}: {path} is not JSON ({exc})", arg) from exc
    return BenchRun.from_dict(data, str(path), arg)


@dataclass(frozen=True)
class CaseChange:
    """One case in both runs (``op``, ``size``, ``agents``, ``side``: :attr:`Row.key`): ``ratio`` = new median /
    old median; ``noise`` the relative change below which the difference counts as noise; ``verdict``
    ``"regression"``, ``"improvement"`` or ``"same"``."""

    op: str
    size: int
    agents: int | None
    side: str
    old: float
    new: float
    ratio: float
    noise: float
    verdict: str


@dataclass(frozen=True)
class Comparison:
    """Changes per case, cases (:attr:`Row.key`) in only one run, and warnings that the two machines differ (or
    that one of the runs shared its machine with busy processes)."""

    changes: tuple[CaseChange, ...]
    only_old: tuple[tuple[str, int, int | None, str], ...]
    only_new: tuple[tuple[str, int, int | None, str], ...]
    machine_warnings: tuple[str, ...] = field(default=())

    @property
    def regressions(self) -> tuple[CaseChange, ...]:
        return tuple(c for c in self.changes if c.verdict == "regression")


def _machine_warnings(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    def get(d: dict[str, Any], *path: str) -> Any:
        for p in path:
            d = d.get(p, {}) if isinstance(d, dict) else {}
        return d if d != {} else None

    checks = [
        ("CPU model", ("cpu", "model")),
        ("usable CPUs", ("cpu", "usable_cpus")),
        ("core OpenMP threads", ("threads", "core_openmp")),
        ("active SIMD level", ("build_info", "simd", "active")),
        ("toporoute version", ("versions", "toporoute")),
    ]
    out = []
    for what, path in checks:
        a, b = get(old, *path), get(new, *path)
        if a != b:
            out.append(f"{what} differs: old {a!r}, new {b!r}")
    for which, m in (("old", old), ("new", new)):
        share = get(m, "during_run", "other_cpu_share")
        if share is not None and share > BUSY:
            out.append(f"other processes used {share:.0%} of the CPUs during the {which} run")
    return out


def compare_runs(old: BenchRun, new: BenchRun, *, min_change: float = 0.10) -> Comparison:
    """Compares the timed cases present in both runs (see the module docstring for the noise rule)."""
    old_rows = {r.key: r for r in old.rows if r.timing is not None}
    new_rows = {r.key: r for r in new.rows if r.timing is not None}
    changes = []
    for key, n in new_rows.items():
        o = old_rows.get(key)
        if o is None:
            continue
        assert o.timing is not None and n.timing is not None
        ratio = n.timing.median / o.timing.median
        noise = max(min_change, 3 * max(o.timing.rel_iqr, n.timing.rel_iqr))
        verdict = "regression" if ratio > 1 + noise else "improvement" if ratio < 1 / (1 + noise) else "same"
        changes.append(CaseChange(*key, o.timing.median, n.timing.median, ratio, noise, verdict))
    return Comparison(
        tuple(changes),
        tuple(k for k in old_rows if k not in new_rows),
        tuple(k for k in new_rows if k not in old_rows),
        tuple(_machine_warnings(old.machine, new.machine)),
    )
