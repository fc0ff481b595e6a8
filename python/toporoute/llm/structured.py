"""Structured outputs: JSON Schemas from pydantic models, and validation with a bounded re-prompt.

:class:`Structured` wraps any engine. For each request with a schema it strips the reasoning text
(``<think>...</think>``), extracts the JSON value of the reply and validates it with ``jsonschema``; the
requests that failed are re-prompted together, in one batch, with the bad reply and the validation error
appended to their conversation, up to ``max_reprompts`` times. A request that still fails gets
``ErrorRecord(kind="validation")``. Engines with guided decoding are validated too. The checks are
:class:`toporoute.llm.replies.ReplyChecker`'s, the same every engine fills ``Result.parsed`` with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from importlib import resources
from typing import Any

from ..errors import InvalidArgumentError, ToporouteError
from .base import Engine
from .replies import ReplyChecker, extract_json, strip_reasoning
from .types import ErrorRecord, Message, Request, Result, Usage

__all__ = ["Structured", "extract_json", "schema_of", "strip_reasoning"]


def schema_of(tp: Any) -> dict[str, Any]:
    """The JSON Schema of a pydantic model (or of any type pydantic can adapt: dataclass, TypedDict, ...).

    Validate a parsed result back into the model with ``Model.model_validate(result.parsed)``.
    """
    from pydantic import BaseModel, TypeAdapter

    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.model_json_schema()
    return TypeAdapter(tp).json_schema()


class _Attempts:
    """What one schema'd request has gone through so far."""

    __slots__ = ("attempts", "latency_s", "request", "usage")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.usage = Usage()
        self.latency_s = 0.0
        self.attempts = 0

    def add(self, result: Result) -> None:
        self.usage += result.usage
        self.latency_s += result.latency_s
        self.attempts += 1


class Structured:
    """An :class:`~toporoute.llm.base.Engine` that validates structured outputs of another engine.

    Parameters
    ----------
    engine : Engine
        The engine to wrap; the wrapper owns it (:meth:`aclose` closes it).
    max_reprompts : int
        Re-prompts after the first attempt for requests whose reply does not validate.
    reprompt : str, optional
        The user message of a re-prompt, with ``{error}`` where the validation error goes; default
        ``prompts/reprompt.txt`` of this package.

    Notes
    -----
    For a request with a schema, the result's ``parsed`` is the validated JSON value, ``text`` the last raw
    reply, ``usage`` the sum over all attempts, ``latency_s`` the sum of the attempts' latencies and
    ``attempts`` the number of generations (1 + re-prompts). A failed attempt with an engine error (not a
    validation error) is returned as is, with those sums. Requests without a schema pass through untouched.
    An invalid schema raises :class:`~toporoute.errors.InvalidArgumentError` before anything is generated.
    """

    def __init__(self, engine: Engine, *, max_reprompts: int = 2, reprompt: str | None = None) -> None:
        if max_reprompts < 0:
            raise InvalidArgumentError(f"max_reprompts must be >= 0; got {max_reprompts}", "max_reprompts")
        if reprompt is None:
            reprompt = (resources.files(__package__) / "prompts" / "reprompt.txt").read_text(encoding="utf-8")
        if "{error}" not in reprompt:
            raise InvalidArgumentError(f"reprompt must contain '{{error}}'; got {reprompt!r}", "reprompt")
        self.engine = engine
        self.name = engine.name
        self.supports_guided_json = engine.supports_guided_json
        self.max_reprompts = max_reprompts
        self._reprompt = reprompt.strip()
        self._checker = ReplyChecker()

    def __repr__(self) -> str:
        return f"Structured({self.engine!r}, max_reprompts={self.max_reprompts})"

    def check(self, text: str, schema: dict[str, Any]) -> tuple[Any, str | None]:
        """``(value, None)`` when ``text`` holds a JSON value valid under ``schema``, else ``(None, why)``."""
        return self._checker.check(text, schema)

    async def generate(self, requests: Sequence[Request]) -> list[Result]:
        if not requests:
            return []
        for r in requests:
            if r.schema is not None:
                self._checker.validator(r.schema)
        results = await self._generate(requests)
        state = {i: _Attempts(r) for i, r in enumerate(requests) if r.schema is not None}
        pending: list[int] = list(state)
        failed: dict[int, str] = {}
        for round_ in range(self.max_reprompts + 1):
            if round_ > 0:
                retry = {
                    i: self._reprompted(state[i].request, results[i].text, why) for i, why in failed.items()
                }
                fresh = await self._generate(list(retry.values()))
                for (i, r), res in zip(retry.items(), fresh):
                    state[i].request, results[i] = r, res
                pending, failed = list(failed), {}
            for i in pending:
                st, res = state[i], results[i]
                st.add(res)
                results[i] = replace(res, usage=st.usage, latency_s=st.latency_s, attempts=st.attempts)
                if not res.ok:
                    continue
                assert st.request.schema is not None
                value, why = self.check(res.text, st.request.schema)
                if why is None:
                    results[i] = replace(results[i], parsed=value)
                else:
                    failed[i] = why + (
                        " (the reply was cut off at max_tokens)" if res.finish_reason == "length" else ""
                    )
            if not failed:
                break
        for i, why in failed.items():
            n = state[i].attempts
            error = ErrorRecord("validation", f"no valid output after {n} attempt(s): {why}", attempts=n)
            results[i] = replace(results[i], parsed=None, error=error)
        return results

    async def _generate(self, requests: Sequence[Request]) -> list[Result]:
        results = list(await self.engine.generate(requests))
        if len(results) != len(requests):
            raise ToporouteError(
                f"{self.engine!r} returned {len(results)} results for {len(requests)} requests"
            )
        return results

    def _reprompted(self, request: Request, reply: str, why: str) -> Request:
        """``request`` with the bad reply and the validation error appended to its conversation."""
        extra = (
            Message("assistant", strip_reasoning(reply)),
            Message("user", self._reprompt.format(error=why)),
        )
        return replace(request, messages=request.messages + extra)

    async def aclose(self) -> None:
        await self.engine.aclose()
