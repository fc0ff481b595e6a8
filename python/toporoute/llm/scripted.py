"""A deterministic fake engine for unit tests: canned or computed replies, no model, no network.

Token counts are whitespace words (plus one per message for the role), so usage is non-zero and reproducible.
Every non-empty batch it receives is kept in :attr:`ScriptedEngine.batches`, so tests can assert how requests
were batched.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence

from ..errors import InvalidArgumentError
from .base import EngineClosedError
from .replies import ReplyChecker
from .types import ErrorRecord, Request, Result, Usage

__all__ = ["ScriptedEngine", "word_count"]

Replies = Callable[[Request], str] | Sequence[str] | Mapping[str, str]


def word_count(text: str) -> int:
    """The scripted engine's token count of ``text``: its whitespace-separated words."""
    return len(text.split())


class ScriptedEngine:
    """Fake :class:`~toporoute.llm.base.Engine` for tests.

    Parameters
    ----------
    replies : callable, sequence of str or mapping of str to str
        A function ``(Request) -> str``; or a list of replies handed out in order, one per request, across
        batches (in request order within a batch); or a dict from a request's last message content to its reply.
        A request with no reply left (list) or no entry (dict) gets an ``ErrorRecord(kind="engine")``.
    name : str
        Model identity (part of replay keys).
    latency_s : float or callable
        Simulated latency, fixed or per request (``(Request) -> float``); requests of a batch wait concurrently.
    fail : callable, optional
        Failure injection: ``(Request) -> ErrorRecord | str | None``; a str becomes
        ``ErrorRecord(kind="engine", message=...)``, None lets the request succeed.
    supports_guided_json : bool
        What the engine claims (it never constrains its replies).

    A schema request's ``parsed`` is its reply's JSON value when valid under the schema, as in every engine
    (:class:`toporoute.llm.replies.ReplyChecker`).
    """

    def __init__(
        self,
        replies: Replies,
        *,
        name: str = "scripted",
        latency_s: float | Callable[[Request], float] = 0.0,
        fail: Callable[[Request], ErrorRecord | str | None] | None = None,
        supports_guided_json: bool = False,
    ) -> None:
        if isinstance(replies, str) or not isinstance(replies, (Sequence, Mapping)) and not callable(replies):
            raise InvalidArgumentError(
                f"replies must be a callable, a list of str or a dict of str; got {type(replies).__name__}",
                "replies",
            )
        self.name = name
        self.supports_guided_json = supports_guided_json
        self.batches: list[tuple[Request, ...]] = []
        """Every non-empty batch passed to :meth:`generate`, in call order."""
        self._replies = replies
        self._next = 0
        self._latency = latency_s
        self._fail = fail
        self._closed = False
        self._checker = ReplyChecker()

    def __repr__(self) -> str:
        return f"ScriptedEngine(name={self.name!r}, batches={len(self.batches)})"

    def _reply(self, request: Request) -> str | ErrorRecord:
        replies = self._replies
        if isinstance(replies, Mapping):
            last = request.messages[-1].content if request.messages else ""
            if last not in replies:
                return ErrorRecord("engine", f"no scripted reply for last message {last[:80]!r}")
            return replies[last]
        if isinstance(replies, Sequence):
            if self._next >= len(replies):
                return ErrorRecord("engine", f"scripted replies exhausted (all {len(replies)} used)")
            self._next += 1
            return replies[self._next - 1]
        return replies(request)

    async def _one(self, request: Request, reply: str | ErrorRecord, t0: float) -> Result:
        delay = self._latency(request) if callable(self._latency) else self._latency
        if delay > 0:
            await asyncio.sleep(delay)
        injected = self._fail(request) if self._fail is not None else None
        if isinstance(injected, str):
            injected = ErrorRecord("engine", injected)
        error = injected if injected is not None else reply if isinstance(reply, ErrorRecord) else None
        latency = time.perf_counter() - t0
        if error is not None:
            return Result("", latency_s=latency, error=error, tags=request.tags)
        assert isinstance(reply, str)
        usage = Usage(sum(word_count(m.content) + 1 for m in request.messages), word_count(reply))
        return Result(
            reply,
            usage=usage,
            latency_s=latency,
            parsed=self._checker.parsed(request, reply),
            finish_reason="stop",
            tags=request.tags,
        )

    async def generate(self, requests: Sequence[Request]) -> list[Result]:
        if self._closed:
            raise EngineClosedError(f"{self!r} is closed")
        if not requests:
            return []
        t0 = time.perf_counter()
        batch = tuple(requests)
        self.batches.append(batch)
        # replies are drawn before any await, so a list is consumed in request order whatever the latencies
        replies = [self._reply(r) for r in batch]
        return list(await asyncio.gather(*(self._one(r, x, t0) for r, x in zip(batch, replies))))

    async def aclose(self) -> None:
        self._closed = True
