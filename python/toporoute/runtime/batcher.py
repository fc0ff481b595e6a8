"""Round-synchronous batching: the LLM requests of all episodes in flight go to the engine together.

Each running episode registers with the :class:`RoundBatcher`. Its ``generate`` calls queue their requests; the
queue is flushed as ONE ``engine.generate`` call as soon as every live episode is blocked on the LLM (so one
round of all episodes becomes one batch), or ``max_wait`` seconds after the oldest queued request (so an
episode busy elsewhere, e.g. running tests in a sandbox, never stalls the others for long).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..llm.base import Engine
from ..llm.types import Request, Result

__all__ = ["BatchStats", "RoundBatcher"]


@dataclass(frozen=True)
class BatchStats:
    """What one flush sent: its size, how many episodes it served, and the engine call's wall time."""

    requests: int
    episodes: int
    seconds: float


class RoundBatcher:
    """Gathers requests across episodes into engine calls (see the module docstring).

    Parameters
    ----------
    engine : Engine
    max_wait : float
        Longest a queued request waits for the other episodes, in seconds.
    max_batch : int, optional
        Most requests per engine call (default: no limit).
    on_batch : callable, optional
        Called with each engine call's results (in request order) as soon as the call returns, before the
        episodes waiting on them resume; the runtime's progress bar counts calls and tokens here.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        max_wait: float = 0.25,
        max_batch: int | None = None,
        on_batch: Callable[[Sequence[Result]], None] | None = None,
    ) -> None:
        if max_wait < 0:
            raise ValueError(f"max_wait must be >= 0; got {max_wait}")
        if max_batch is not None and max_batch < 1:
            raise ValueError(f"max_batch must be >= 1; got {max_batch}")
        self.engine = engine
        self.max_wait = max_wait
        self.max_batch = max_batch
        self.on_batch = on_batch
        self.flushes: list[BatchStats] = []
        self._live = 0
        self._blocked = 0  # live episodes awaiting a generate call (queued or in flight)
        self._queue: list[tuple[str, list[Request], asyncio.Future[list[Result]]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._check_scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    def enter(self) -> None:
        """An episode starts."""
        self._live += 1

    def leave(self) -> None:
        """An episode ends (finished, failed or cancelled): the others may now be the whole round."""
        self._live -= 1
        self._maybe_flush()

    async def generate(self, episode: str, requests: Sequence[Request]) -> list[Result]:
        """Queues one episode's requests and waits for their results (in order)."""
        if not requests:
            return []
        future: asyncio.Future[list[Result]] = asyncio.get_running_loop().create_future()
        self._queue.append((episode, list(requests), future))
        self._blocked += 1
        try:
            if self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(self.max_wait, self._flush)
            self._maybe_flush()
            return await future
        finally:
            self._blocked -= 1

    def _maybe_flush(self) -> None:
        # Checked on the next loop iteration, not now: episodes that became ready in the same step (all of a
        # run's episodes at start, or every caller woken by the previous batch) first get to queue theirs.
        if not self._check_scheduled:
            self._check_scheduled = True
            asyncio.get_running_loop().call_soon(self._check)

    def _check(self) -> None:
        self._check_scheduled = False
        if self._queue and self._blocked >= self._live:
            self._flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        queue = [q for q in self._queue if not q[2].done()]  # drop cancelled callers
        self._queue = []
        while queue:
            batch: list[tuple[str, list[Request], asyncio.Future[list[Result]]]] = []
            size = 0
            while queue and (
                not batch or self.max_batch is None or size + len(queue[0][1]) <= self.max_batch
            ):
                batch.append(queue.pop(0))
                size += len(batch[-1][1])
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[str, list[Request], asyncio.Future[list[Result]]]]) -> None:
        requests = [r for _, reqs, _ in batch for r in reqs]
        start = time.perf_counter()
        try:
            results = await self.engine.generate(requests)
        except Exception as exc:  # noqa: BLE001 - a broken engine fails every caller of this batch
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        self.flushes.append(
            BatchStats(len(requests), len({e for e, _, _ in batch}), time.perf_counter() - start)
        )
        if self.on_batch is not None:
            self.on_batch(results)
        offset = 0
        for _, reqs, future in batch:
            if not future.done():
                future.set_result(results[offset : offset + len(reqs)])
            offset += len(reqs)
