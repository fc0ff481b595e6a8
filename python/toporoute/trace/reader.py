"""Reads a run directory (see :mod:`toporoute.trace` for the layout) into the typed records of
:mod:`toporoute.trace.schema`, for the report and for analysis.

Everything here tolerates a run that is still going or that crashed: unreadable or half-written files are
skipped and described in ``problems`` instead of raising, so a partial run still reports what it has. Records of
every format version since v1 are read (fields an older writer did not write take their defaults).
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._checks import is_finite_number, is_int
from ..errors import InvalidArgumentError
from .schema import FORMAT_VERSION, EpisodeFile, RoundRecord

__all__ = [
    "EpisodeRow",
    "MethodRun",
    "RoundStats",
    "RunData",
    "episode_rows",
    "label",
    "load_run",
    "natural_key",
    "round_stats",
    "summarize",
    "wall_from_summary",
]


@dataclass(frozen=True)
class MethodRun:
    """One method folder of a run directory.

    Attributes
    ----------
    name : str
        The folder name (``dytopo``, ``single``, ...).
    dir : Path
        The folder.
    config : dict
        ``run.json`` (empty when it could not be read; see ``problems``).
    episodes : list of EpisodeFile
        The readable ``episodes/*.json`` files, in natural order of their episode ids (``X-2`` before
        ``X-10``).
    traces : dict of str to list of RoundRecord
        Episode id -> its round records from ``traces/<episode>.jsonl``, sorted by round. Episodes still in
        flight have a trace and no episode file.
    summary_file : dict or None
        ``summary.json`` when present and readable.
    problems : list of str
        What could not be read, one readable sentence each.
    """

    name: str
    dir: Path
    config: dict[str, Any]
    episodes: list[EpisodeFile]
    traces: dict[str, list[RoundRecord]]
    summary_file: dict[str, Any] | None
    problems: list[str]


@dataclass(frozen=True)
class RunData:
    """A run directory: its method runs, ``dytopo`` first, then by name."""

    root: Path
    methods: list[MethodRun]

    @property
    def problems(self) -> list[str]:
        """Every method's problems, each prefixed with the method name."""
        return [f"{m.name}: {p}" for m in self.methods for p in m.problems]


@dataclass(frozen=True)
class EpisodeRow:
    """One line of a method's episode table.

    ``status`` is ``"ok"``, ``"error"`` or ``"partial"`` (a trace with no episode record yet: still running,
    or the run stopped mid-episode). Fields the records do not hold are None.
    """

    episode: str
    task: str
    status: str
    passed: bool | None
    score_status: str | None
    rounds: int | None
    halted: bool | None
    tokens: int | None
    calls: int | None
    wall_s: float | None
    llm_s: float | None
    routing_s: float | None
    error: str | None


@dataclass(frozen=True)
class RoundStats:
    """Means over the episodes that reached round ``round`` (``episodes`` of them)."""

    round: int
    episodes: int
    edges: float
    density: float
    reciprocity: float
    tokens: float
    round_s: float
    llm_s: float
    routing_s: float


# ------------------------------------------------------------------------------------------------------ loading


def load_run(path: str | os.PathLike[str]) -> RunData:
    """Reads a run directory, or a single method folder (one that holds ``run.json``).

    Parameters
    ----------
    path : path
        ``RUN_DIR`` (holding ``<method>/run.json`` folders) or one method folder.

    Returns
    -------
    RunData

    Raises
    ------
    InvalidArgumentError
        ``path`` does not exist, is not a folder, or holds no ``run.json`` (neither itself nor any direct
        subfolder).
    """
    root = Path(path)
    if not root.exists():
        raise InvalidArgumentError(
            f"run_dir {str(root)!r} does not exist; expected a run directory (RUN_DIR/<method>/run.json) "
            "or a method folder holding run.json",
            "run_dir",
        )
    if not root.is_dir():
        raise InvalidArgumentError(
            f"run_dir {str(root)!r} is not a folder; expected RUN_DIR/<method>/run.json "
            "or a method folder holding run.json",
            "run_dir",
        )
    if (root / "run.json").is_file():
        folders = [root]
    else:
        folders = sorted(p for p in root.iterdir() if p.is_dir() and (p / "run.json").is_file())
    if not folders:
        raise InvalidArgumentError(
            f"run_dir {str(root)!r} holds no run.json: expected RUN_DIR/<method>/run.json (one folder per method) "
            "or a method folder holding run.json",
            "run_dir",
        )
    methods = [_load_method(folder) for folder in folders]
    methods.sort(key=lambda m: (not _is_dytopo(m), m.name))
    return RunData(root=root, methods=methods)


def _is_dytopo(m: MethodRun) -> bool:
    return m.name == "dytopo" or m.config.get("method") == "dytopo"


def _load_method(folder: Path) -> MethodRun:
    problems: list[str] = []
    config = _read_json_object(folder / "run.json", problems)
    summary_file = (
        _read_json_object(folder / "summary.json", problems) if (folder / "summary.json").exists() else None
    )

    episodes: list[EpisodeFile] = []
    for file in sorted((folder / "episodes").glob("*.json")):
        content = _read_json_object(file, problems)
        if content is None:
            continue
        if not isinstance(content.get("status"), str):
            problems.append(f"{_rel(file)} has no status; skipped")
            continue
        episodes.append(EpisodeFile.from_json(content, file.stem))
    episodes.sort(key=lambda e: natural_key(e.episode))

    traces: dict[str, list[RoundRecord]] = {}
    for file in sorted((folder / "traces").glob("*.jsonl"), key=lambda p: natural_key(p.stem)):
        rounds = _read_trace(file, problems)
        if rounds:
            traces[file.stem] = rounds
    return MethodRun(
        name=folder.name,
        dir=folder,
        config=config or {},
        episodes=episodes,
        traces=traces,
        summary_file=summary_file,
        problems=problems,
    )


def _read_json_object(file: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problems.append(f"{_rel(file)} is missing")
        return None
    except (OSError, ValueError) as exc:  # ValueError covers bad JSON and bad UTF-8
        problems.append(f"{_rel(file)} could not be read ({_short(exc)}); skipped")
        return None
    if not isinstance(value, dict):
        problems.append(f"{_rel(file)} does not hold a JSON object; skipped")
        return None
    return value


def _read_trace(file: Path, problems: list[str]) -> list[RoundRecord]:
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        problems.append(f"{_rel(file)} could not be read ({_short(exc)}); skipped")
        return []
    lines = text.split("\n")
    # the runtime appends whole lines, so only a last line without its newline can be torn (a crash mid-write)
    torn_tail = not text.endswith("\n")
    records: list[RoundRecord] = []
    newer = False
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last = i == len(lines)
        try:
            rec = json.loads(line)
        except ValueError:
            if last and torn_tail:
                problems.append(f"{_rel(file)}: torn last line (an unfinished write) ignored")
            else:
                problems.append(f"{_rel(file)} line {i} is not JSON; skipped")
            continue
        if not isinstance(rec, dict) or not is_int(rec.get("round")):
            problems.append(f"{_rel(file)} line {i} is not a round record (no integer 'round'); skipped")
            continue
        if is_int(rec.get("v")) and rec["v"] > FORMAT_VERSION:
            newer = True
        records.append(RoundRecord.from_json(rec))
    if newer:
        problems.append(
            f"{_rel(file)} was written in a newer trace format (v > {FORMAT_VERSION}); shown as far as understood"
        )
    # The writer truncates when an episode reruns, but a file stitched from two attempts (copied, merged) would
    # repeat rounds: keep the last attempt only.
    start = 0
    for i in range(1, len(records)):
        if records[i].round <= records[i - 1].round:
            start = i
    if start:
        problems.append(f"{_rel(file)} holds more than one attempt; showing the last one")
    return sorted(records[start:], key=lambda r: r.round)


# ---------------------------------------------------------------------------------------------------- summaries


def summarize(method_run: MethodRun, *, wall_s: float | None = None) -> dict[str, Any]:
    """The ``summary.json`` fields, computed from the episode records (so a partial run reports too).

    Accuracy is passed / ok episodes; the per-task means are over ok episodes; ``llm_s`` and ``routing_s`` are
    summed over the episode records. ``routing_share`` is the share of the episodes' own wall time spent
    routing: ``routing_s`` over the sum of the episodes' ``wall_s`` (episodes run concurrently, so the run's
    wall time would count the routing of many episodes against one clock). Means over no episodes are 0.

    Parameters
    ----------
    method_run : MethodRun
    wall_s : float, optional
        The run's wall-clock time, when the caller measured it. Default: ``summary.json``'s ``wall_s`` when
        present, else the sum of the episodes' wall times (an upper bound when episodes ran concurrently; see
        :func:`wall_from_summary`).

    Returns
    -------
    dict
        ``method, tasks, model, episodes, ok, errors, passed, accuracy, tokens_per_task,
        prompt_tokens_per_task, completion_tokens_per_task, calls_per_task, rounds_per_task, wall_s, llm_s,
        routing_s, routing_share``.
    """
    eps = method_run.episodes
    ok = [e for e in eps if e.status == "ok"]
    records = [e.record for e in ok if e.record is not None]
    usages = [e.usage for e in ok if e.usage is not None]
    passed = sum(r.passed for r in records)
    prompt = [float(u.prompt_tokens) for u in usages]
    completion = [float(u.completion_tokens) for u in usages]
    all_records = [e.record for e in eps if e.record is not None]
    llm_s = sum(r.llm_s for r in all_records)
    routing_s = sum(r.routing_s for r in all_records)
    episode_wall = sum(e.wall_s or 0.0 for e in eps)
    if wall_s is None:
        wall_s = _summary_wall(method_run)
        if wall_s is None:
            wall_s = episode_wall

    config = method_run.config
    return {
        "method": str(config.get("method") or method_run.name),
        "tasks": label(config.get("tasks")),
        "model": label(config.get("model")),
        "episodes": len(eps),
        "ok": len(ok),
        "errors": sum(e.status == "error" for e in eps),
        "passed": passed,
        "accuracy": passed / len(ok) if ok else 0.0,
        "tokens_per_task": _mean([p + c for p, c in zip(prompt, completion)]),
        "prompt_tokens_per_task": _mean(prompt),
        "completion_tokens_per_task": _mean(completion),
        "calls_per_task": _mean([float(u.calls) for u in usages]),
        "rounds_per_task": _mean([float(r.rounds) for r in records]),
        "wall_s": float(wall_s),
        "llm_s": llm_s,
        "routing_s": routing_s,
        "episode_wall_s": episode_wall,
        "routing_share": routing_s / episode_wall if episode_wall > 0 else 0.0,
    }


def wall_from_summary(method_run: MethodRun) -> bool:
    """Whether :func:`summarize` takes ``wall_s`` from ``summary.json`` (else it sums the episodes')."""
    return _summary_wall(method_run) is not None


def _summary_wall(method_run: MethodRun) -> float | None:
    wall = (method_run.summary_file or {}).get("wall_s")
    return float(wall) if is_finite_number(wall) else None


def episode_rows(method_run: MethodRun) -> list[EpisodeRow]:
    """One row per episode record, then one per trace without a record (``status="partial"``), in natural
    order of episode ids."""
    rows: list[EpisodeRow] = []
    for e in method_run.episodes:
        rec, usage = e.record, e.usage
        score = rec.score if rec is not None else {}
        trace = method_run.traces.get(e.episode, [])
        rows.append(
            EpisodeRow(
                episode=e.episode,
                task=(rec.task if rec is not None and rec.task else "") or _first_task(trace) or e.episode,
                status=e.status,
                passed=bool(score["passed"]) if "passed" in score else None,
                score_status=str(score["status"]) if score.get("status") is not None else None,
                rounds=rec.rounds if rec is not None and rec.rounds > 0 else (len(trace) or None),
                halted=rec.halted if rec is not None else None,
                tokens=usage.tokens if usage is not None else None,
                calls=usage.calls if usage is not None else None,
                wall_s=e.wall_s,
                llm_s=rec.llm_s if rec is not None else None,
                routing_s=rec.routing_s if rec is not None else None,
                error=e.error,
            )
        )
    recorded = {e.episode for e in method_run.episodes}
    for episode, trace in method_run.traces.items():
        if episode in recorded:
            continue
        rows.append(
            EpisodeRow(
                episode=episode,
                task=_first_task(trace) or episode,
                status="partial",
                passed=None,
                score_status=None,
                rounds=len(trace),
                halted=None,
                tokens=sum(r.usage.tokens for r in trace),
                calls=None,
                wall_s=None,
                llm_s=None,
                routing_s=None,
                error=None,
            )
        )
    rows.sort(key=lambda r: natural_key(r.episode))
    return rows


def round_stats(method_run: MethodRun) -> list[RoundStats]:
    """Per round index, means over every traced episode that reached it: edges, density, reciprocity, tokens
    (prompt + completion of all calls in the round, the manager's included) and timings."""
    by_round: dict[int, list[RoundRecord]] = defaultdict(list)
    for trace in method_run.traces.values():
        for rec in trace:
            by_round[rec.round].append(rec)
    out = []
    for r in sorted(by_round):
        recs = by_round[r]
        timing = [x.timing for x in recs if x.timing is not None]
        out.append(
            RoundStats(
                round=r,
                episodes=len(recs),
                edges=_mean([float(x.edge_count) for x in recs]),
                density=_mean([x.density for x in recs]),
                reciprocity=_mean([x.stats.reciprocity if x.stats is not None else 0.0 for x in recs]),
                tokens=_mean([float(x.usage.tokens) for x in recs]),
                round_s=_mean([t.round_s for t in timing]),
                llm_s=_mean([t.llm_s for t in timing]),
                routing_s=_mean([t.routing_s for t in timing]),
            )
        )
    return out


# ------------------------------------------------------------------------------------------------------ helpers


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key that orders digit runs by value: ``HumanEval-2`` before ``HumanEval-10``."""
    # re.split with a group alternates text and digit runs, so equal positions always compare like with like
    parts = re.split(r"(\d+)", text)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def label(value: Any) -> str:
    """A short text for a run.json value that may be a string, a number, a list or a dict."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("name", "id", "model", "set"):
            if isinstance(value.get(key), str):
                return str(value[key])
        return ", ".join(f"{k}={label(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(label(v) for v in value)
    return str(value)


def _first_task(trace: list[RoundRecord]) -> str:
    return trace[0].task if trace else ""


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _rel(file: Path) -> str:
    # method/episodes/x.json reads better in a problem list than an absolute path
    return "/".join(file.parts[-2:]) if file.parent.name in ("episodes", "traces") else file.name


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
