"""The engine interface every LLM backend implements (``vllm``, ``openai``, ``replay``, ``scripted``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..errors import ToporouteError
from .types import Request, Result

__all__ = ["Engine", "EngineClosedError"]


@runtime_checkable
class Engine(Protocol):
    """Batch-first async LLM engine.

    ``generate`` takes every request of a round at once and returns one :class:`Result` per request, in order.
    A failure of one request is an ``error`` record on its result, never an exception; exceptions are for a
    broken engine (misconfiguration, closed engine). Engines hold no global state; one engine may serve many
    concurrent callers.
    """

    name: str
    """Model identity, part of replay keys (e.g. the model path or id)."""

    supports_guided_json: bool
    """True when ``Request.schema`` constrains decoding (outputs are then still validated)."""

    async def generate(self, requests: Sequence[Request]) -> list[Result]: ...

    async def aclose(self) -> None: ...


class EngineClosedError(ToporouteError, RuntimeError):
    """``generate`` was called on an engine after :meth:`Engine.aclose`."""
