"""Usage accounting: a per-episode ledger of LLM calls and routed messages, returned as a value.

There are no global counters: each episode owns a :class:`Ledger`; the runtime sums them into a run summary.
Token counts are the engine's own (prompt and completion tokens as reported per call). Where the engine names
the server that answered a call (``Result.server``: an OpenAI engine over several servers), the call records it
and the summary totals each server; elsewhere neither shows, so such records read as before.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from ..llm.types import Result, Usage

__all__ = ["CallRecord", "EdgeRecord", "Ledger"]


@dataclass(frozen=True)
class CallRecord:
    """One LLM call (all its re-prompts together); ``server`` is the one that answered its last attempt, where
    the engine names one."""

    round: int | None
    agent: str | None
    role: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    attempts: int
    ok: bool
    engine_failure: bool = False
    server: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON, without ``server`` when no server is named (records of single-server engines)."""
        d = asdict(self)
        if self.server is None:
            del d["server"]
        return d


@dataclass(frozen=True)
class EdgeRecord:
    """One message routed ``src -> dst`` in a round, with its size in completion tokens of the sender."""

    round: int
    src: str
    dst: str
    tokens: int


@dataclass
class Ledger:
    """Calls and routed messages of one episode, with totals per agent, round and edge."""

    calls: list[CallRecord] = field(default_factory=list)
    edges: list[EdgeRecord] = field(default_factory=list)

    def add_call(self, result: Result) -> None:
        t = result.tags
        self.calls.append(
            CallRecord(
                t.round,
                t.agent,
                t.role,
                result.usage.prompt_tokens,
                result.usage.completion_tokens,
                result.latency_s,
                result.attempts,
                result.ok,
                result.error is not None and result.error.engine_failure,
                result.server,
            )
        )

    def add_edge(self, round: int, src: str, dst: str, tokens: int) -> None:
        self.edges.append(EdgeRecord(round, src, dst, tokens))

    def total(self) -> Usage:
        return sum((Usage(c.prompt_tokens, c.completion_tokens) for c in self.calls), Usage())

    def by_agent(self) -> dict[str, Usage]:
        return self._group(lambda c: str(c.agent))

    def by_round(self) -> dict[int, Usage]:
        return self._group(lambda c: -1 if c.round is None else c.round)

    def by_edge(self) -> dict[tuple[str, str], int]:
        """Tokens routed per ``(src, dst)`` over the episode."""
        out: dict[tuple[str, str], int] = defaultdict(int)
        for e in self.edges:
            out[(e.src, e.dst)] += e.tokens
        return dict(out)

    def by_server(self) -> dict[str, dict[str, int]]:
        """Per server that answered calls: ``calls``, ``failed_calls``, ``prompt_tokens``,
        ``completion_tokens``; empty when the engine names no servers."""
        out: dict[str, dict[str, int]] = {}
        for c in self.calls:
            if c.server is None:
                continue
            row = out.setdefault(
                c.server, {"calls": 0, "failed_calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
            )
            row["calls"] += 1
            row["failed_calls"] += not c.ok
            row["prompt_tokens"] += c.prompt_tokens
            row["completion_tokens"] += c.completion_tokens
        return out

    def _group(self, key: Any) -> dict[Any, Usage]:
        out: dict[Any, Usage] = defaultdict(Usage)
        for c in self.calls:
            out[key(c)] += Usage(c.prompt_tokens, c.completion_tokens)
        return dict(out)

    def summary(self) -> dict[str, Any]:
        """JSON-ready totals: tokens, calls, failed calls (``engine_failed_calls`` of them without a reply from
        the engine), re-prompts, LLM latency, routed messages, and ``servers`` (:meth:`by_server`) where the
        engine named the servers."""
        total = self.total()
        out: dict[str, Any] = {
            "prompt_tokens": total.prompt_tokens,
            "completion_tokens": total.completion_tokens,
            "calls": len(self.calls),
            "failed_calls": sum(not c.ok for c in self.calls),
            "engine_failed_calls": sum(c.engine_failure for c in self.calls),
            "reprompts": sum(c.attempts - 1 for c in self.calls),
            "llm_latency_s": sum(c.latency_s for c in self.calls),
            "messages_routed": len(self.edges),
            "tokens_routed": sum(e.tokens for e in self.edges),
        }
        servers = self.by_server()
        if servers:
            out["servers"] = servers
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "calls": [c.to_dict() for c in self.calls],
            "edges": [asdict(e) for e in self.edges],
        }
