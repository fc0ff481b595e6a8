"""Running a round's DAG wave by wave, and the keyed log of a round's LLM calls: the plumbing Q-Mix, AgentConductor,
HiVA and TacoMAS share.

:func:`run_waves` runs the levels of a DAG in order: every node of a level that makes an LLM call is asked for
its request (built from what the earlier levels delivered), the level's requests go to the engine as one batch
(the runtime batches them with the other episodes' calls of the same moment), and each reply is handed to the
method, which stores it where the next levels read it. A method's own steps around a level (HiVA's tools before
it and its bandit after it, AgentConductor's tester and searcher) are the ``prepare`` and ``finish`` hooks.

:class:`CallLog` is one round's calls by key, with the kind of each and the errors of the failed ones: the
round's usage (:class:`~toporoute.trace.schema.Usage`) and its error list come from it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..llm.types import Request, Result
from ..trace.schema import CallUsage, EdgeUsage, Usage
from .episode import Clock, RoundErrors, call_error, record_edges

if TYPE_CHECKING:
    from ..runtime import EpisodeContext

__all__ = ["Call", "CallLog", "run_waves"]

K = TypeVar("K")

Generate = Callable[[Sequence[tuple[K, Request]]], Awaitable[list[Result]]]


async def run_waves(
    waves: Iterable[Sequence[K]],
    request: Callable[[K], Request | None],
    generate: Generate[K],
    deliver: Callable[[K, Result], None],
    *,
    prepare: Callable[[Sequence[K]], Awaitable[None]] | None = None,
    finish: Callable[[Sequence[K]], Awaitable[None]] | None = None,
) -> dict[K, Result]:
    """Runs ``waves`` in order and returns every node's reply.

    Parameters
    ----------
    waves : iterable of node sequences
        The levels, in order; it may be a generator that decides the next level from what the earlier ones
        delivered (HiVA routes after each level).
    request : callable
        ``request(node)``: the node's LLM request, built when its level starts; None for a node that makes no
        call (AgentConductor's tester).
    generate : callable
        Sends one level's ``(node, request)`` pairs as one batch and returns the replies in order (a
        :meth:`CallLog.generate` or :meth:`~toporoute.methods.episode.Clock.generate` around the episode's
        context).
    deliver : callable
        ``deliver(node, reply)`` stores a reply where the later levels (and the round record) read it.
    prepare, finish : callable, optional
        ``await prepare(level)`` before the level's requests are built, ``await finish(level)`` after its replies
        are delivered.
    """
    results: dict[K, Result] = {}
    for wave in waves:
        nodes = list(wave)
        if prepare is not None:
            await prepare(nodes)
        keyed = [(k, r) for k in nodes if (r := request(k)) is not None]
        if keyed:
            for (k, _), result in zip(keyed, await generate(keyed)):
                results[k] = result
                deliver(k, result)
        if finish is not None:
            await finish(nodes)
    return results


@dataclass(frozen=True)
class Call:
    """What a logged call is: its ``key`` in the round's usage, the ``agent`` it concerns and its ``kind``."""

    key: str
    agent: str
    kind: str


@dataclass
class CallLog(RoundErrors):
    """One round's LLM calls, each logged under its :class:`Call` with its reply, and the round's errors.

    ``failures``: the kinds of call whose failure is recorded as an error here (None: every kind; a method whose
    parsers record the failures of its structured calls leaves those out).
    """

    failures: Collection[str] | None = None
    calls: list[tuple[Call, Result]] = field(default_factory=list)

    async def generate(
        self, ctx: EpisodeContext, clock: Clock, keyed: Sequence[tuple[Call, Request]]
    ) -> list[Result]:
        """One LLM batch on ``clock``; each call logged, a failure recorded as ``call failed: ...``."""
        if not keyed:
            return []
        results = await clock.generate(ctx, [r for _, r in keyed])
        for (call, _), result in zip(keyed, results):
            self.calls.append((call, result))
            err = call_error(result)
            if err is not None and (self.failures is None or call.kind in self.failures):
                self.error(call.agent, call.kind, f"call failed: {err}")
        return results

    def usage(self, ctx: EpisodeContext, round: int, edges: Iterable[EdgeUsage]) -> Usage:
        """The round's usage: every call by key, and ``edges`` (recorded on the episode's edge ledger)."""
        return Usage({c.key: CallUsage.of(r) for c, r in self.calls}, record_edges(ctx, round, edges))

    def errors_by_key(self) -> dict[str, str | None]:
        """Each call's error (None: it succeeded), by key."""
        return {c.key: call_error(r) for c, r in self.calls}

    def first(self, match: Callable[[Call], bool]) -> Result | None:
        """The reply of the first call that ``match`` accepts (None: no such call)."""
        return next((r for c, r in self.calls if match(c)), None)

    def by_kind(self, kinds: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Calls, prompt and completion tokens and latency per kind (every kind of ``kinds``, zeros included)."""
        out = {k: {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "latency_s": 0.0} for k in kinds}
        for call, r in self.calls:
            c = out[call.kind]
            c["calls"] += 1
            c["prompt_tokens"] += r.usage.prompt_tokens
            c["completion_tokens"] += r.usage.completion_tokens
            c["latency_s"] = round(c["latency_s"] + r.latency_s, 4)
        return out
