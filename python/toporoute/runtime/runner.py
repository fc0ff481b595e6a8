"""Runs many episodes concurrently over one engine, with round-synchronous batching, usage ledgers, progress,
resumable on-disk records and clean cancellation.

An episode is an async function ``fn(ctx) -> dict`` (its JSON-ready record). It calls ``await
ctx.generate(requests)`` for its LLM calls; the runtime batches those across episodes, tags them with the
episode id, and records each call in the episode's :class:`~toporoute.runtime.usage.Ledger`.

With ``out_dir``, every finished episode is written atomically to ``out_dir/episodes/<id>.json`` the moment it
finishes; a rerun skips episodes whose record says ``"status": "ok"``. Ctrl-C (or cancelling :meth:`Runtime.run`)
cancels the episodes in flight: every finished record is already on disk, so a crash or interrupt loses at
most the episodes in flight.

Engine failures are errors, never results: when the engine gives no reply to a call (connection refused, a
timeout or server error after its retries; :attr:`~toporoute.llm.types.ErrorRecord.engine_failure`),
:meth:`EpisodeContext.generate` raises :class:`EngineFailureError` and the episode ends with ``"status":
"error"`` and that cause, so it is not scored and a rerun runs it again. The rule is the runtime's
``engine_failures``: ``"any"`` (the default) ends the episode at the first call the engine failed; ``"all"``
(methods whose calls are independent samples) only when the engine failed every call of one ``generate``, the
calls lost in part being counted in the usage's ``engine_failed_calls``. A reply that did not validate is the
model's answer, not a failure of the engine: it never ends an episode here.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._atomic import write_json_atomic
from ..errors import InvalidArgumentError, ToporouteError
from ..llm.base import Engine
from ..llm.types import Request, Result
from .batcher import BatchStats, RoundBatcher
from .usage import Ledger

__all__ = [
    "ENGINE_FAILURE_RULES",
    "EngineFailureError",
    "EpisodeContext",
    "EpisodeFn",
    "EpisodeOutcome",
    "RunSummary",
    "Runtime",
    "finished_record",
    "progress_bar",
    "write_json_atomic",
]

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

ENGINE_FAILURE_RULES = ("any", "all")
"""When calls the engine failed end an episode: at the first one (``"any"``), or only when every call of one
``generate`` failed (``"all"``)."""


class EngineFailureError(ToporouteError, RuntimeError):
    """The engine gave no reply to calls of an episode, which therefore ends as an error (not a result).

    ``failed`` and ``calls`` count the calls of the ``generate`` that failed; ``first`` is the first failure's
    message (the cause).
    """

    def __init__(self, failed: int, calls: int, first: str) -> None:
        super().__init__(f"the engine failed {failed} of {calls} call(s) of a round: {first}", "engine")
        self.failed, self.calls, self.first = failed, calls, first


@dataclass
class EpisodeContext:
    """What an episode function gets: its id, its ledger and the batched LLM entry.

    ``engine_failures`` is the run's rule (:data:`ENGINE_FAILURE_RULES`) for calls the engine failed.
    """

    episode: str
    ledger: Ledger
    _batcher: RoundBatcher
    engine_failures: str = "any"

    async def generate(self, requests: Sequence[Request]) -> list[Result]:
        """Sends this episode's requests with the current round of every other episode; records usage.

        Raises :class:`EngineFailureError` when the engine failed calls (see the module docstring); their usage
        is recorded first."""
        tagged = [replace(r, tags=replace(r.tags, episode=self.episode)) for r in requests]
        results = await self._batcher.generate(self.episode, tagged)
        for result in results:
            self.ledger.add_call(result)
        failed = [r.error for r in results if r.error is not None and r.error.engine_failure]
        if failed and (self.engine_failures == "any" or len(failed) == len(results)):
            first = failed[0]
            raise EngineFailureError(len(failed), len(results), f"{first.kind}: {first.message}")
        return results


EpisodeFn = Callable[[EpisodeContext], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class EpisodeOutcome:
    """One episode's end: ``status`` is ``"ok"``, ``"error"`` (with the traceback in ``error`` and the
    exception's one line in ``cause``) or ``"skipped"`` (resumed)."""

    episode: str
    status: str
    record: dict[str, Any] | None
    usage: dict[str, Any] | None
    wall_s: float
    error: str | None = None
    cause: str | None = None


@dataclass
class RunSummary:
    """Everything a run returns: outcomes in input order and the engine calls it made."""

    outcomes: list[EpisodeOutcome] = field(default_factory=list)
    batches: list[BatchStats] = field(default_factory=list)
    wall_s: float = 0.0

    def totals(self) -> dict[str, Any]:
        done = [o for o in self.outcomes if o.usage is not None]
        keys = ("prompt_tokens", "completion_tokens", "calls", "failed_calls", "reprompts", "messages_routed")
        out: dict[str, Any] = {k: sum(o.usage[k] for o in done) for k in keys}  # type: ignore[index]
        out.update(
            episodes=len(self.outcomes),
            ok=sum(o.status == "ok" for o in self.outcomes),
            errors=sum(o.status == "error" for o in self.outcomes),
            skipped=sum(o.status == "skipped" for o in self.outcomes),
            engine_calls=len(self.batches),
            mean_batch=(sum(b.requests for b in self.batches) / len(self.batches)) if self.batches else 0.0,
            wall_s=self.wall_s,
        )
        return out


class Runtime:
    """Runs episodes concurrently over one engine.

    Parameters
    ----------
    engine : Engine
    concurrency : int
        Most episodes in flight.
    max_wait : float
        See :class:`RoundBatcher`.
    out_dir : path, optional
        Where finished episode records go (``episodes/<id>.json``); enables resuming.
    progress : bool
        A progress bar (tqdm, on stderr) while running: finished episodes, and after each engine call the
        latest round (the highest round tag of that call's requests, counted from 1), the LLM calls so far and
        completion tokens per second since the run started, e.g. ``round 3 · 42 calls · 118 tok/s``.
    engine_failures : {"any", "all"}
        When calls the engine failed end an episode as an error (see the module docstring).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        concurrency: int = 16,
        max_wait: float = 0.25,
        max_batch: int | None = None,
        out_dir: str | os.PathLike[str] | None = None,
        progress: bool = True,
        engine_failures: str = "any",
    ) -> None:
        if concurrency < 1:
            raise InvalidArgumentError(f"concurrency must be >= 1; got {concurrency}", "concurrency")
        if engine_failures not in ENGINE_FAILURE_RULES:
            raise InvalidArgumentError(
                f"engine_failures must be one of {ENGINE_FAILURE_RULES}; got {engine_failures!r}",
                "engine_failures",
            )
        self.engine_failures = engine_failures
        self.engine = engine
        self.concurrency = concurrency
        self.max_wait, self.max_batch = max_wait, max_batch
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.progress = progress

    def record_path(self, episode: str) -> Path | None:
        return None if self.out_dir is None else self.out_dir / "episodes" / f"{episode}.json"

    def finished(self, episode: str) -> dict[str, Any] | None:
        """The saved record of a finished episode, or None (absent, unreadable, or not ok)."""
        return None if self.out_dir is None else finished_record(self.out_dir, episode)

    async def run(self, episodes: Iterable[tuple[str, EpisodeFn]]) -> RunSummary:
        """Runs ``(episode_id, fn)`` pairs; returns outcomes in input order."""
        items = list(episodes)
        seen: set[str] = set()
        for episode, _ in items:
            if not isinstance(episode, str) or not _SAFE_ID.match(episode):
                raise InvalidArgumentError(
                    f"episode ids must match {_SAFE_ID.pattern} (they name files); got {episode!r}",
                    "episodes",
                )
            if episode in seen:
                raise InvalidArgumentError(f"episode id {episode!r} appears twice", "episodes")
            seen.add(episode)
        start = time.perf_counter()
        bar = progress_bar(len(items), self.progress)
        progress = _Progress(bar, start) if self.progress else None
        batcher = self.batcher(None if progress is None else progress.batch)
        gate = asyncio.Semaphore(self.concurrency)
        outcomes: dict[str, EpisodeOutcome] = {}

        async def one(episode: str, fn: EpisodeFn) -> None:
            saved = self.finished(episode)
            if saved is not None:
                outcomes[episode] = EpisodeOutcome(
                    episode, "skipped", saved.get("record"), saved.get("usage"), 0.0
                )
                bar.update(1)
                return
            async with gate:
                outcomes[episode] = await self.run_episode(episode, fn, batcher)
                bar.update(1)

        tasks = [asyncio.ensure_future(one(e, fn)) for e, fn in items]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            bar.close()
        return RunSummary([outcomes[e] for e, _ in items], list(batcher.flushes), time.perf_counter() - start)

    def batcher(self, on_batch: Callable[[Sequence[Result]], None] | None = None) -> RoundBatcher:
        """A :class:`RoundBatcher` over this runtime's engine with its ``max_wait`` and ``max_batch``: the one
        :meth:`run` makes for its episodes, or one that episodes started one at a time share through
        :meth:`run_episode` (a Ray actor's, :mod:`toporoute.distributed`)."""
        return RoundBatcher(self.engine, max_wait=self.max_wait, max_batch=self.max_batch, on_batch=on_batch)

    async def run_episode(self, episode: str, fn: EpisodeFn, batcher: RoundBatcher) -> EpisodeOutcome:
        """Runs one episode now, its LLM calls batched with the other episodes on ``batcher``, and writes its
        record (with ``out_dir``). It neither checks for a finished record nor waits for a slot: :meth:`run`
        does both; a caller of this method does its own."""
        ctx = EpisodeContext(episode, Ledger(), batcher, self.engine_failures)
        start = time.perf_counter()
        batcher.enter()
        cause = None
        try:
            record = await fn(ctx)
            status, error = "ok", None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one broken episode must not end the run; its traceback is kept
            record, status, error = None, "error", traceback.format_exc()
            cause = f"{type(exc).__name__}: {exc}"
        finally:
            batcher.leave()
        outcome = EpisodeOutcome(
            episode, status, record, ctx.ledger.summary(), time.perf_counter() - start, error, cause
        )
        path = self.record_path(episode)
        if path is not None:
            write_json_atomic(
                path,
                {
                    "episode": episode,
                    "status": status,
                    "error": error,
                    "cause": cause,
                    "wall_s": outcome.wall_s,
                    "record": record,
                    "usage": outcome.usage,
                    "ledger": ctx.ledger.to_dict(),
                },
            )
        return outcome

    def run_sync(self, episodes: Iterable[tuple[str, EpisodeFn]]) -> RunSummary:
        """:meth:`run` from synchronous code. On Ctrl-C the episodes in flight are cancelled and
        KeyboardInterrupt propagates; every finished episode's record is already on disk."""
        return asyncio.run(self.run(episodes))


def finished_record(out_dir: Path, episode: str) -> dict[str, Any] | None:
    """The saved record ``out_dir/episodes/<episode>.json`` of a finished episode, or None (absent, unreadable,
    or not ok): what a resumed run skips."""
    path = out_dir / "episodes" / f"{episode}.json"
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) and saved.get("status") == "ok" else None


class _NoBar:
    def update(self, n: int) -> None: ...

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None: ...

    def close(self) -> None: ...


class _Progress:
    """Counts one run's engine calls for its bar; fed by the batcher after each engine call."""

    def __init__(self, bar: Any, start: float) -> None:
        self.bar, self.start = bar, start
        self.round: int | None = None
        self.calls = 0
        self.completion_tokens = 0

    def batch(self, results: Sequence[Result]) -> None:
        rounds = [r.tags.round for r in results if r.tags.round is not None]
        if rounds:
            self.round = max(rounds) + 1
        self.calls += len(results)
        self.completion_tokens += sum(r.usage.completion_tokens for r in results)
        self.bar.set_postfix_str(self.text(time.perf_counter() - self.start))

    def text(self, elapsed_s: float) -> str:
        rate = self.completion_tokens / elapsed_s if elapsed_s > 0 else 0.0
        parts = [] if self.round is None else [f"round {self.round}"]
        parts += [f"{self.calls} call{'s' if self.calls != 1 else ''}", f"{rate:.0f} tok/s"]
        return " · ".join(parts)


def progress_bar(total: int, enabled: bool) -> Any:
    """An episode bar (tqdm on stderr) over ``total`` episodes, or a bar that shows nothing (``enabled`` off,
    or tqdm missing): what :meth:`Runtime.run` and a Ray run's driver show."""
    if not enabled:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc="episodes", unit="ep", dynamic_ncols=True)
