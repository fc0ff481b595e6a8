"""Two engines behind one: the calls of some kinds (a request's ``tags.role``) go to a second engine.

TacoMAS's judge, coach and meta-LLM run on a stronger model than its agents in the paper: the method tags each
request with its kind, and the command line (``--meta-model``) wraps the run's engine in a :class:`RoutedEngine`
for that method only. The runtime still sees one engine and batches as before; each batch is split by kind,
both parts go out at once, and the replies come back in the batch's order.

:func:`parse_engine_spec` reads the one-string engine spec ``[ENGINE:]MODEL[@BASE_URL]``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ..errors import InvalidArgumentError
from .base import Engine
from .types import Request, Result

__all__ = ["ENGINES", "EngineSpec", "RoutedEngine", "parse_engine_spec"]

ENGINES = ("vllm", "openai", "replay")
"""The engine names a spec may start with (``--engine``'s choices)."""


@dataclass(frozen=True)
class EngineSpec:
    """An engine named in one string: ``engine`` None means the run's own ``--engine``; ``base_url`` None the
    run's ``--base-url``; for ``replay`` the model is the transcript's path."""

    engine: str | None
    model: str
    base_url: str | None = None


def parse_engine_spec(spec: str, arg: str = "meta_model") -> EngineSpec:
    """``[ENGINE:]MODEL[@BASE_URL]``: ``openai:gpt-4o@https://api.openai.com/v1``, ``vllm:/models/qwen``,
    ``replay:meta.jsonl``, or a bare model (on the run's engine). A prefix that is not an engine name stays part
    of the model (``llama3:8b``). Raises :class:`InvalidArgumentError` (naming ``arg``) for an empty model or a
    base URL on an engine other than openai."""
    text = spec.strip()
    engine: str | None = None
    head, sep, rest = text.partition(":")
    if sep and head in ENGINES:
        engine, text = head, rest.strip()
    base_url: str | None = None
    if "@" in text and engine in (None, "openai"):
        text, _, base_url = text.rpartition("@")
        text, base_url = text.strip(), base_url.strip() or None
    if not text:
        raise InvalidArgumentError(
            f"{arg} must name a model: [ENGINE:]MODEL[@BASE_URL] with ENGINE one of {', '.join(ENGINES)}; "
            f"got {spec!r}",
            arg,
        )
    return EngineSpec(engine, text, base_url)


class RoutedEngine:
    """An :class:`~toporoute.llm.base.Engine` that sends the requests whose ``tags.role`` is in ``kinds`` to
    ``other`` and the rest to ``main``.

    ``name`` and ``supports_guided_json`` are ``main``'s (``other`` is recorded by whoever built it);
    :meth:`aclose` closes neither engine: their owner does.
    """

    def __init__(self, main: Engine, other: Engine, kinds: Collection[str]) -> None:
        self.main, self.other, self.kinds = main, other, frozenset(kinds)
        self.name = main.name
        self.supports_guided_json = main.supports_guided_json

    async def generate(self, requests: Sequence[Request]) -> list[Result]:
        picks = [r.tags.role in self.kinds for r in requests]
        mine = [r for r, p in zip(requests, picks) if not p]
        theirs = [r for r, p in zip(requests, picks) if p]
        a, b = await asyncio.gather(
            self.main.generate(mine) if mine else _none(),
            self.other.generate(theirs) if theirs else _none(),
        )
        ia, ib = iter(a), iter(b)
        return [next(ib) if p else next(ia) for p in picks]

    async def aclose(self) -> None:
        return None


async def _none() -> list[Result]:
    return []
