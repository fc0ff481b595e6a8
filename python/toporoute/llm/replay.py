"""Record and replay engine results through a JSONL transcript, for deterministic reruns.

Each line is one request and its result, keyed by :meth:`Request.key` of the engine's model (messages, sampling
and schema; not the tags, which come from the replaying request). Identical requests keep a FIFO list, so
repeated calls replay in the order they were recorded. Appends are one ``write`` of whole lines per batch,
then flush and fsync; a torn last line (a crash mid-write) is ignored on load with a warning.

Line format::

    {"key": ..., "model": ..., "guided": bool,
     "request": {"messages": [[role, content], ...], "sampling": {...}, "schema": ..., "tags": {...}},
     "result": {"text": ..., "usage": [prompt, completion], "latency_s": ..., "parsed": ...,
                "error": {"kind", "message", "attempts", "status"} | null, "finish_reason": ..., "attempts": ...}}
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError, ToporouteError
from .base import Engine, EngineClosedError
from .replies import ReplyChecker
from .types import ErrorRecord, Request, Result, Tags, Usage

__all__ = ["ReplayEngine", "ReplayMissError"]

log = logging.getLogger(__name__)


class ReplayMissError(ToporouteError, LookupError):
    """A replayed request has no (or no more) recorded result in the transcript.

    ``key`` is the request's replay key, ``tags`` its :class:`Tags`, ``path`` the transcript.
    """

    def __init__(self, message: str, *, key: str, tags: Tags, path: Path) -> None:
        super().__init__(message, "requests")
        self.key, self.tags, self.path = key, tags, path


def _tags_text(tags: Tags) -> str:
    parts = [f"{k}={v}" for k, v in asdict(tags).items() if v is not None]
    return " ".join(parts) if parts else "(no tags)"


def _encode(key: str, model: str, guided: bool, request: Request, result: Result) -> str:
    record = {
        "key": key,
        "model": model,
        "guided": guided,
        "request": {
            "messages": [[m.role, m.content] for m in request.messages],
            "sampling": asdict(request.sampling),
            "schema": request.schema,
            "tags": asdict(request.tags),
        },
        "result": {
            "text": result.text,
            "usage": [result.usage.prompt_tokens, result.usage.completion_tokens],
            "latency_s": result.latency_s,
            "parsed": result.parsed,
            "error": asdict(result.error) if result.error is not None else None,
            "finish_reason": result.finish_reason,
            "attempts": result.attempts,
        },
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def _decode(result: dict[str, Any], request: Request, checker: ReplyChecker) -> Result:
    error = result.get("error")
    tags = request.tags
    return Result(
        result["text"],
        usage=Usage(*result["usage"]),
        latency_s=result["latency_s"],
        # checked again rather than read back: transcripts recorded before every engine filled it hold None
        parsed=None if error is not None else checker.parsed(request, result["text"]),
        error=ErrorRecord(**error) if error is not None else None,
        finish_reason=result.get("finish_reason"),
        tags=tags,
        attempts=result.get("attempts", 1),
    )


class ReplayEngine:
    """Records another engine's results to a JSONL transcript, or replays them from one.

    Parameters
    ----------
    path : str or path
        The transcript. Record mode creates it (and its folder) when missing and appends to it; replay mode
        needs it to exist.
    engine : Engine, optional
        The engine to record (record mode). None replays (replay mode): a request without a recorded result
        left raises :class:`ReplayMissError`. The wrapper owns ``engine``: :meth:`aclose` closes it.
    name : str, optional
        Model identity used in the replay keys. Record mode: ``engine.name`` (an explicit name must match it).
        Replay mode: default the model recorded in the transcript (which must then hold a single model).
    reuse_recorded : bool
        Record mode only: serve requests that have a recorded result left from the transcript and send only
        the others to ``engine`` (resuming an interrupted run).

    Notes
    -----
    Replayed results carry the recorded text, usage, latency, error, finish reason and attempts, the tags of
    the replaying request, and ``parsed`` checked from the text as every engine checks it. Results with an error are recorded and replayed too.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        engine: Engine | None = None,
        *,
        name: str | None = None,
        reuse_recorded: bool = False,
    ) -> None:
        self.path = Path(path)
        self._engine = engine
        self._reuse = reuse_recorded or engine is None
        self._closed = False
        self._lock = asyncio.Lock()
        self._checker = ReplyChecker()
        if engine is None and not self.path.is_file():
            raise InvalidArgumentError(f"replay transcript {str(self.path)!r} does not exist", "path")
        if engine is not None and name is not None and name != engine.name:
            raise InvalidArgumentError(
                f"name must match the recorded engine's name {engine.name!r}; got {name!r}", "name"
            )
        if engine is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._index: dict[str, deque[dict[str, Any]]] = {}
        models, guided = self._load(truncate_torn=engine is not None)
        if engine is not None:
            self.name: str = engine.name
            self.supports_guided_json: bool = engine.supports_guided_json
        else:
            if name is None:
                if len(models) > 1:
                    raise InvalidArgumentError(
                        f"transcript {str(self.path)!r} holds several models {sorted(models)}; pass name=",
                        "name",
                    )
                name = next(iter(models), "replay")
            self.name = name
            self.supports_guided_json = guided.get(name, False)

    def __repr__(self) -> str:
        mode = f"record {self._engine!r}" if self._engine is not None else "replay"
        return f"ReplayEngine({str(self.path)!r}, {mode}, name={self.name!r})"

    @property
    def recording(self) -> bool:
        return self._engine is not None

    def _load(self, truncate_torn: bool) -> tuple[set[str], dict[str, bool]]:
        """Indexes the transcript; returns its models and whether each was recorded with guided decoding."""
        models: set[str] = set()
        guided: dict[str, bool] = {}
        if not self.path.is_file():
            return models, guided
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        offset = 0
        for lineno, raw in enumerate(lines, 1):
            last = lineno == len(lines)
            if raw.strip():
                try:
                    rec = json.loads(raw)
                    key, model, result = rec["key"], rec["model"], rec["result"]
                except (ValueError, KeyError, TypeError) as exc:
                    if not last:
                        raise InvalidArgumentError(
                            f"replay transcript {str(self.path)!r} line {lineno} is not a valid record: {exc}",
                            "path",
                        ) from exc
                    log.warning(
                        "replay transcript %s: ignoring a torn last line %d (%d bytes)",
                        self.path,
                        lineno,
                        len(raw),
                    )
                    if truncate_torn:
                        with open(self.path, "r+b") as f:
                            f.truncate(offset)
                    break
                models.add(model)
                guided[model] = bool(rec.get("guided", False))
                self._index.setdefault(key, deque()).append(result)
                if last and truncate_torn:  # a complete record without its newline: finish the line
                    with open(self.path, "ab") as f:
                        f.write(b"\n")
            offset += len(raw) + 1
        return models, guided

    def _lookup(self, keys: Sequence[str]) -> list[dict[str, Any] | None]:
        """The next recorded result for each key (FIFO per key, repeats in a batch in order), None when none is
        left. Consumes nothing: see :meth:`_consume`."""
        out: list[dict[str, Any] | None] = []
        seen: Counter[str] = Counter()
        for key in keys:
            left = self._index.get(key, ())
            out.append(left[seen[key]] if seen[key] < len(left) else None)
            seen[key] += 1
        return out

    def _consume(self, keys: Sequence[str], found: list[dict[str, Any] | None]) -> None:
        for key, f in zip(keys, found):
            if f is not None:
                self._index[key].popleft()

    def _miss(
        self, requests: Sequence[Request], keys: Sequence[str], found: list[dict[str, Any] | None]
    ) -> ReplayMissError:
        missing = [i for i, f in enumerate(found) if f is None]
        r, key = requests[missing[0]], keys[missing[0]]
        last = r.messages[-1].content if r.messages else ""
        more = f" ({len(missing) - 1} more request(s) of this batch missing too)" if len(missing) > 1 else ""
        return ReplayMissError(
            f"no recorded result left in {str(self.path)!r} for the request with tags {_tags_text(r.tags)}, "
            f"last message {last[:80]!r} (model {self.name!r}, key {key[:16]}){more}",
            key=key,
            tags=r.tags,
            path=self.path,
        )

    def _append(self, text: str) -> None:
        data = text.encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    async def generate(self, requests: Sequence[Request]) -> list[Result]:
        if self._closed:
            raise EngineClosedError(f"{self!r} is closed")
        if not requests:
            return []
        keys = [r.key(self.name) for r in requests]
        found: list[dict[str, Any] | None] = self._lookup(keys) if self._reuse else [None] * len(requests)
        if self._engine is None and any(f is None for f in found):
            # raised before consuming, so a failed batch leaves the index as it was
            raise self._miss(requests, keys, found)
        self._consume(keys, found)
        out = [None if f is None else _decode(f, r, self._checker) for r, f in zip(requests, found)]
        todo = [i for i, f in enumerate(found) if f is None]
        if self._engine is None or not todo:
            return [r for r in out if r is not None]
        fresh = await self._engine.generate([requests[i] for i in todo])
        if len(fresh) != len(todo):
            raise ToporouteError(f"{self._engine!r} returned {len(fresh)} results for {len(todo)} requests")
        lines = []
        for i, res in zip(todo, fresh):
            out[i] = res
            lines.append(_encode(keys[i], self.name, self.supports_guided_json, requests[i], res))
        async with self._lock:
            await asyncio.to_thread(self._append, "".join(lines))
        return [r for r in out if r is not None]

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            if self._engine is not None:
                await self._engine.aclose()
