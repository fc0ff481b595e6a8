"""Requests and results of the batch-first LLM engine interface (:mod:`toporoute.llm`).

Everything here is a frozen dataclass of plain values, so requests hash stably (replay keys), results can be
written to JSON traces, and nothing is shared mutable state between concurrent episodes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ErrorRecord", "Message", "Request", "Result", "Sampling", "Tags", "Usage"]


@dataclass(frozen=True)
class Message:
    """One chat message. ``role`` is ``"system"``, ``"user"`` or ``"assistant"``."""

    role: str
    content: str


@dataclass(frozen=True)
class Sampling:
    """Sampling settings of one request (engine defaults where None)."""

    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tags:
    """Where a request comes from; carried to its result and the usage ledger, never sent to the model."""

    episode: str | None = None
    round: int | None = None
    agent: str | None = None
    role: str | None = None


@dataclass(frozen=True)
class Request:
    """One LLM call.

    ``schema`` is a JSON Schema (e.g. ``Model.model_json_schema()`` of a pydantic model): engines that support
    guided decoding constrain the output to it, and the structured layer validates every output against it.
    ``regex`` constrains a free-text output to a regular expression where the engine supports it (``vllm``;
    ``openai`` with ``guided_regex=True``); other engines ignore it, so callers still check the output.
    """

    messages: tuple[Message, ...]
    sampling: Sampling = Sampling()
    schema: dict[str, Any] | None = None
    tags: Tags = Tags()
    regex: str | None = None

    @staticmethod
    def chat(
        system: str | None,
        user: str,
        *,
        sampling: Sampling | None = None,
        schema: dict[str, Any] | None = None,
        tags: Tags | None = None,
        regex: str | None = None,
    ) -> Request:
        """A request of an optional system message then one user message (shared text first: prefix caching)."""
        msgs = ((Message("system", system),) if system else ()) + (Message("user", user),)
        return Request(msgs, sampling or Sampling(), schema, tags or Tags(), regex)

    def key(self, model: str = "") -> str:
        """Stable SHA-256 of what determines the output (model, messages, sampling, schema, regex; not the
        tags)."""
        body = {
            "model": model,
            "messages": [[m.role, m.content] for m in self.messages],
            "sampling": asdict(self.sampling),
            "schema": self.schema,
        }
        if self.regex is not None:  # keys of requests without one stay those recorded before it existed
            body["regex"] = self.regex
        blob = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class Usage:
    """Token counts as reported by the engine (the tokenizer's, never estimated)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens
        )


@dataclass(frozen=True)
class ErrorRecord:
    """Why a request produced no usable output.

    ``kind``: ``"engine"`` (the engine failed), ``"http"`` (status ``status``), ``"timeout"``, ``"validation"``
    (the output did not match the schema after every re-prompt) or ``"cancelled"``. Every kind but
    ``"validation"`` is an :attr:`engine_failure`: the engine gave no reply, where a validation error is a reply
    the model got wrong.
    """

    kind: str
    message: str
    attempts: int = 1
    status: int | None = None

    @property
    def engine_failure(self) -> bool:
        """The engine gave no reply (outage, timeout, server or request error), as opposed to a reply that did
        not validate."""
        return self.kind != "validation"


@dataclass(frozen=True)
class Result:
    """The outcome of one :class:`Request`, in the order of the requests.

    ``text`` is the raw completion; ``parsed`` the JSON value when the request had a schema and the output
    validated; ``usage`` sums every attempt (re-prompts included); ``latency_s`` is wall time from submission
    to completion of the last attempt. ``server`` names the server that answered (or, for a failed request, the
    last one it was sent to) where an engine spreads requests over several (``OpenAIEngine`` with several base
    URLs); None elsewhere.
    """

    text: str
    usage: Usage = Usage()
    latency_s: float = 0.0
    parsed: Any = None
    error: ErrorRecord | None = None
    finish_reason: str | None = None
    tags: Tags = field(default_factory=Tags)
    attempts: int = 1
    server: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None
