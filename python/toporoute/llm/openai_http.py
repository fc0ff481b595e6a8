"""Engine for any OpenAI-compatible chat completions server (``vllm serve``, llama.cpp's server, hosted APIs).

One :class:`httpx.AsyncClient` per engine, at most ``max_concurrency`` requests in flight, retries with
exponential backoff and jitter on 429, 5xx and connection errors (``Retry-After`` honoured), and
``response_format = {"type": "json_schema", ...}`` for requests with a schema. The API key is read when the
engine is built (never at import), sent only in the ``Authorization`` header, and kept out of ``repr``, logs
and error messages.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import random
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ..errors import InvalidArgumentError
from .base import EngineClosedError
from .replies import ReplyChecker
from .types import ErrorRecord, Request, Result, Usage

__all__ = ["OpenAIEngine"]

log = logging.getLogger(__name__)

_RETRY_STATUS = frozenset({408, 409, 429})
_SCHEMA_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class _Failure(Exception):
    """One request's terminal failure inside the engine, turned into its ErrorRecord."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.status = kind, message, status


class _Retry(Exception):
    """A retryable failure; ``after_s`` is the server's Retry-After, when it sent one."""

    def __init__(self, failure: _Failure, after_s: float | None = None) -> None:
        super().__init__(failure.message)
        self.failure, self.after_s = failure, after_s


class _Secret:
    """An API key that shows as ``***`` in any repr, so dumping the engine's attributes cannot leak it."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "_Secret('***')"

    __str__ = __repr__


class OpenAIEngine:
    """Chat completions over HTTP against an OpenAI-compatible server.

    Parameters
    ----------
    model : str
        The server's model id (sent as ``model``; also the engine's :attr:`name`, part of replay keys).
    base_url : str
        API root including the version, e.g. ``http://127.0.0.1:8000/v1``; requests go to
        ``{base_url}/chat/completions``.
    api_key : str, optional
        Explicit key (e.g. from the CLI). When None the key is read from the environment variable
        ``api_key_env`` when the engine is built; with neither, no ``Authorization`` header is sent.
    api_key_env : str
        Name of the environment variable holding the key.
    max_concurrency : int
        Most requests in flight at once (also the connection pool size).
    timeout_s : float
        Read/write/pool timeout of one HTTP attempt; a request that runs past it gets
        ``ErrorRecord(kind="timeout")`` and is not retried.
    connect_timeout_s : float
        Connect timeout of one attempt (a connect timeout is retried like a refused connection).
    max_retries : int
        Retries after the first attempt on 408/409/429, 5xx and connection errors.
    backoff_s, backoff_max_s : float
        Retry ``i`` (from 0) waits ``min(backoff_max_s, backoff_s * 2**i)`` scaled by a jitter factor in
        [0.5, 1). A ``Retry-After`` (or ``retry-after-ms``) from the server replaces that wait; one longer than
        ``backoff_max_s`` ends the retries at once.
    seed : int, optional
        Seed of the jitter's random generator.
    guided_json : bool
        Whether the server honours ``response_format`` json_schema (sets :attr:`supports_guided_json`); when
        False, schemas are not sent and only the structured layer validates.
    strict_schema : bool
        ``strict`` flag of the json_schema response format (hosted OpenAI requires strict-mode schemas for it).
    guided_regex : bool
        Send ``Request.regex`` as ``structured_outputs: {"regex": ...}`` (a vLLM server's extension; sets
        :attr:`supports_guided_regex`); off by default because hosted APIs reject unknown fields.
    extra_body : mapping, optional
        Extra JSON fields of every request (e.g. ``{"top_k": 20}`` for vLLM).
    headers : mapping, optional
        Extra HTTP headers.
    transport : httpx.AsyncBaseTransport, optional
        Custom transport (tests, proxies).

    Notes
    -----
    ``parsed`` holds the JSON value of a schema request's reply when it is valid under the schema
    (:class:`toporoute.llm.replies.ReplyChecker`, as in every engine), else None.
    Usage comes from the response's ``usage`` field (the server's tokenizer); a response without one counts
    zero tokens and logs a warning once per engine. ``Result.attempts`` counts HTTP attempts. The engine must
    be used from one event loop; close it with :meth:`aclose` (or ``async with contextlib.aclosing(engine)``).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "http://127.0.0.1:8000/v1",
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 16,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 10.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
        seed: int | None = None,
        guided_json: bool = True,
        strict_schema: bool = False,
        guided_regex: bool = False,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not model:
            raise InvalidArgumentError("model must be a non-empty model id; got ''", "model")
        if max_concurrency < 1:
            raise InvalidArgumentError(
                f"max_concurrency must be >= 1; got {max_concurrency}", "max_concurrency"
            )
        if max_retries < 0:
            raise InvalidArgumentError(f"max_retries must be >= 0; got {max_retries}", "max_retries")
        for arg, value in (("timeout_s", timeout_s), ("connect_timeout_s", connect_timeout_s)):
            if not value > 0:
                raise InvalidArgumentError(f"{arg} must be > 0; got {value}", arg)
        if backoff_s < 0 or backoff_max_s < 0:
            raise InvalidArgumentError(
                f"backoff_s and backoff_max_s must be >= 0; got {backoff_s}, {backoff_max_s}", "backoff_s"
            )
        self.name = model
        self.supports_guided_json = guided_json
        self.supports_guided_regex = guided_regex
        self.base_url = base_url.rstrip("/")
        self._strict = strict_schema
        self._max_retries = max_retries
        self._backoff = (backoff_s, backoff_max_s)
        self._rng = random.Random(seed)
        self._extra = dict(extra_body or {})
        self._sem = asyncio.Semaphore(max_concurrency)
        self._warned_usage = False
        self._checker = ReplyChecker()
        key = api_key if api_key is not None else os.environ.get(api_key_env)
        # kept only to scrub it from server messages; the header itself lives in the client
        self._secret = _Secret(key) if key else None
        all_headers = dict(headers or {})
        if self._secret is not None:
            all_headers["Authorization"] = f"Bearer {self._secret.value}"
        self._client: httpx.AsyncClient | None = httpx.AsyncClient(
            headers=all_headers,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
            transport=transport,
        )

    def __repr__(self) -> str:
        key = "set" if self._secret is not None else "none"
        return f"OpenAIEngine(model={self.name!r}, base_url={self.base_url!r}, api_key={key})"

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def generate(self, requests: Sequence[Request]) -> list[Result]:
        if self._client is None:
            raise EngineClosedError(f"{self!r} is closed")
        if not requests:
            return []
        t0 = time.perf_counter()
        return list(await asyncio.gather(*(self._one(self._client, r, t0) for r in requests)))

    # ------------------------------------------------------------------------------------------------- internals

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret.value, "***") if self._secret is not None else text

    def _payload(self, request: Request) -> dict[str, Any]:
        s = request.sampling
        body: dict[str, Any] = {
            "model": self.name,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
        }
        if s.seed is not None:
            body["seed"] = s.seed
        if s.stop:
            body["stop"] = list(s.stop)
        if request.schema is not None and self.supports_guided_json:
            name = _SCHEMA_NAME.sub("_", str(request.schema.get("title") or "output"))[:64]
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": request.schema, "strict": self._strict},
            }
        elif request.regex is not None and self.supports_guided_regex:
            body["structured_outputs"] = {"regex": request.regex}
        body.update(self._extra)
        return body

    def _delay(self, retry: int, after_s: float | None) -> float | None:
        """Seconds to wait before retry ``retry`` (from 0), or None when the server asks for too long."""
        base, cap = self._backoff
        if after_s is not None:
            return after_s if after_s <= cap else None
        return min(cap, base * 2.0**retry) * (0.5 + 0.5 * self._rng.random())

    async def _one(self, client: httpx.AsyncClient, request: Request, t0: float) -> Result:
        payload = self._payload(request)
        attempt = 0
        # a request keeps its slot while it backs off, so retries never add load on a struggling server
        async with self._sem:
            while True:
                attempt += 1
                try:
                    text, usage, finish = await self._attempt(client, payload)
                except _Failure as f:
                    return self._failed(request, f, attempt, t0)
                except _Retry as r:
                    if attempt > self._max_retries:
                        return self._failed(request, r.failure, attempt, t0)
                    wait = self._delay(attempt - 1, r.after_s)
                    if wait is None:
                        fail = r.failure
                        why = f"{fail.message} (Retry-After {r.after_s:g} s exceeds backoff_max_s)"
                        return self._failed(request, _Failure(fail.kind, why, fail.status), attempt, t0)
                    log.info("%s: retry %d in %.2f s after %s", self.name, attempt, wait, r.failure.message)
                    await asyncio.sleep(wait)
                    continue
                return Result(
                    text,
                    usage=usage,
                    latency_s=time.perf_counter() - t0,
                    parsed=self._checker.parsed(request, text),
                    finish_reason=finish,
                    tags=request.tags,
                    attempts=attempt,
                )

    def _failed(self, request: Request, f: _Failure, attempts: int, t0: float) -> Result:
        error = ErrorRecord(f.kind, self._scrub(f.message), attempts=attempts, status=f.status)
        log.warning("%s: request failed after %d attempt(s): %s", self.name, attempts, error.message)
        return Result(
            "", latency_s=time.perf_counter() - t0, error=error, tags=request.tags, attempts=attempts
        )

    async def _attempt(
        self, client: httpx.AsyncClient, payload: dict[str, Any]
    ) -> tuple[str, Usage, str | None]:
        url = f"{self.base_url}/chat/completions"
        try:
            resp = await client.post(url, json=payload)
        except httpx.ConnectTimeout as exc:
            raise _Retry(_Failure("engine", f"connect timeout to {url}")) from exc
        except httpx.TimeoutException as exc:
            raise _Failure("timeout", f"{type(exc).__name__} from {url}") from exc
        except httpx.TransportError as exc:
            detail = self._scrub(f"{type(exc).__name__}: {exc}")
            raise _Retry(_Failure("engine", f"connection error to {url}: {detail}")) from exc
        if resp.status_code != 200:
            body = self._scrub(resp.text)[:500]
            failure = _Failure("http", f"HTTP {resp.status_code} from {url}: {body}", resp.status_code)
            if resp.status_code in _RETRY_STATUS or resp.status_code >= 500:
                raise _Retry(failure, _retry_after(resp.headers))
            raise failure
        try:
            data = resp.json()
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            finish = choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise _Failure(
                "engine", f"malformed response from {url}: {self._scrub(resp.text)[:500]}"
            ) from exc
        usage = data.get("usage") if isinstance(data, dict) else None
        if isinstance(usage, dict):
            return (
                text,
                Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
                finish,
            )
        if not self._warned_usage:
            self._warned_usage = True
            log.warning("%s: response from %s has no usage; counting 0 tokens", self.name, url)
        return text, Usage(), finish


def _retry_after(headers: httpx.Headers) -> float | None:
    """The server's requested wait in seconds (``retry-after-ms``, or ``Retry-After`` in seconds or as a date)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
