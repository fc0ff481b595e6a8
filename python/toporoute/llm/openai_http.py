"""Engine for any OpenAI-compatible chat completions server (``vllm serve``, llama.cpp's server, hosted APIs).

One :class:`httpx.AsyncClient` per engine, at most ``max_concurrency`` requests in flight, retries with
exponential backoff and jitter on 429, 5xx and connection errors (``Retry-After`` honoured), and
``response_format = {"type": "json_schema", ...}`` for requests with a schema. The API key is read when the
engine is built (never at import), sent only in the ``Authorization`` header, and kept out of ``repr``, logs
and error messages. Given several base URLs, the engine spreads requests over those servers (least outstanding
requests), fails a request over to another server when one fails, and probes a failed server until it answers
again (see :class:`OpenAIEngine`).
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
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import InvalidArgumentError
from .base import EngineClosedError
from .replies import ReplyChecker
from .types import ErrorRecord, Request, Result, Usage

__all__ = ["OpenAIEngine", "ServerStats"]

log = logging.getLogger(__name__)

_RETRY_STATUS = frozenset({408, 409, 429})
_SCHEMA_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class _Failure(Exception):
    """One request's terminal failure inside the engine, turned into its ErrorRecord; ``unreachable``: the
    server gave no HTTP answer (refused or dropped connection, timeout)."""

    def __init__(self, kind: str, message: str, status: int | None = None, unreachable: bool = False) -> None:
        super().__init__(message)
        self.kind, self.message, self.status, self.unreachable = kind, message, status, unreachable


class _Retry(Exception):
    """A retryable failure; ``after_s`` is the server's Retry-After, when it sent one."""

    def __init__(self, failure: _Failure, after_s: float | None = None) -> None:
        super().__init__(failure.message)
        self.failure, self.after_s = failure, after_s


class _ServerFailed(Exception):
    """A server failed a request (several servers only): the request moves on to another one."""

    def __init__(self, failure: _Failure, attempts: int) -> None:
        super().__init__(failure.message)
        self.failure, self.attempts = failure, attempts


@dataclass(eq=False)
class _Server:
    """One base URL's state: mutated only from the engine's event loop."""

    index: int
    url: str
    up: bool = True
    outstanding: int = 0
    requests: int = 0
    ok: int = 0
    failures: int = 0
    last_error: str | None = None
    next_probe: float = 0.0


@dataclass(frozen=True)
class ServerStats:
    """One server of an :class:`OpenAIEngine` as :meth:`OpenAIEngine.servers` reports it.

    ``requests`` counts the requests sent to it (a request that fails over counts once on each server it
    reaches), ``ok`` those it answered with a completion, ``failures`` those it failed as a server (no HTTP
    answer, a timeout, or 408/409/429/5xx after the retries; not a 4xx that is the request's own fault),
    ``outstanding`` those in flight on it now. ``up`` is False from a failure until a probe gets an answer
    (never for the last server up, nor with one server); ``last_error`` is its latest failure's message.
    """

    url: str
    up: bool
    outstanding: int
    requests: int
    ok: int
    failures: int
    last_error: str | None


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
    base_url : str or sequence of str
        API root including the version, e.g. ``http://127.0.0.1:8000/v1``; requests go to
        ``{base_url}/chat/completions``. Several roots (servers of the same model) spread the requests over
        them: see Notes.
    api_key : str, optional
        Explicit key (e.g. from the CLI). When None the key is read from the environment variable
        ``api_key_env`` when the engine is built; with neither, no ``Authorization`` header is sent.
    api_key_env : str
        Name of the environment variable holding the key.
    max_concurrency : int
        Most requests in flight at once, per server (the engine's limit and connection pool are
        ``max_concurrency`` times the number of servers).
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
    probe_interval_s : float
        Several servers: seconds between two probes of a server that is down.
    transport : httpx.AsyncBaseTransport, optional
        Custom transport (tests, proxies).

    Notes
    -----
    ``parsed`` holds the JSON value of a schema request's reply when it is valid under the schema
    (:class:`toporoute.llm.replies.ReplyChecker`, as in every engine), else None.
    Usage comes from the response's ``usage`` field (the server's tokenizer); a response without one counts
    zero tokens and logs a warning once per engine. ``Result.attempts`` counts HTTP attempts. The engine must
    be used from one event loop; close it with :meth:`aclose` (or ``async with contextlib.aclosing(engine)``).

    With several servers, each request goes to the server that is up with the fewest requests in flight (ties
    in turn), and ``Result.server`` names the server that answered it (the runtime's ledger totals calls,
    tokens and failures per server). A server fails a request when it gives no HTTP answer (connection refused
    or dropped, connect or read timeout) or answers 408/409/429/5xx through all of the retries above (or asks,
    by ``Retry-After``, for a longer wait than ``backoff_max_s``). While another server that the request has not
    tried is up, the failing server is taken out (down) and the request moves on to that one at once (after no
    answer, without retrying). The last server up is never taken out: there a request is retried as with one
    server (a connection error with backoff like a 5xx; a timeout ends it), so several servers are never less
    patient than one. A request tries each server at most once; one that no server answered fails with
    ``ErrorRecord(kind="engine")`` naming each server's failure, an engine failure that the runtime records as
    the episode's error. A 4xx that is the request's own fault, or a malformed reply, ends the request as with
    one server. A server that is down gets no requests; ``GET {base_url}/models`` probes it every
    ``probe_interval_s`` and it is back at its first answer below 500. :meth:`servers` reports each server's
    state and counters. With one server, it is that last server (and ``Result.server`` stays None): the engine
    behaves as before several servers existed.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | Sequence[str] = "http://127.0.0.1:8000/v1",
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
        probe_interval_s: float = 5.0,
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
        urls = _base_urls(base_url)
        for arg, value in (
            ("timeout_s", timeout_s),
            ("connect_timeout_s", connect_timeout_s),
            ("probe_interval_s", probe_interval_s),
        ):
            if not value > 0:
                raise InvalidArgumentError(f"{arg} must be > 0; got {value}", arg)
        if backoff_s < 0 or backoff_max_s < 0:
            raise InvalidArgumentError(
                f"backoff_s and backoff_max_s must be >= 0; got {backoff_s}, {backoff_max_s}", "backoff_s"
            )
        self.name = model
        self.supports_guided_json = guided_json
        self.supports_guided_regex = guided_regex
        self.base_urls = urls
        self.base_url = urls[0]
        self._servers = [_Server(i, url) for i, url in enumerate(urls)]
        self._turn = 0  # where the next tie between equally loaded servers starts
        self._probe_interval = probe_interval_s
        self._probe_timeout = min(timeout_s, probe_interval_s)
        self._prober: asyncio.Task[None] | None = None
        self._strict = strict_schema
        self._max_retries = max_retries
        self._backoff = (backoff_s, backoff_max_s)
        self._rng = random.Random(seed)
        self._extra = dict(extra_body or {})
        self._sem = asyncio.Semaphore(max_concurrency * len(urls))
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
            limits=httpx.Limits(
                max_connections=max_concurrency * len(urls),
                max_keepalive_connections=max_concurrency * len(urls),
            ),
            transport=transport,
        )

    def __repr__(self) -> str:
        key = "set" if self._secret is not None else "none"
        urls = self.base_url if len(self.base_urls) == 1 else list(self.base_urls)
        return f"OpenAIEngine(model={self.name!r}, base_url={urls!r}, api_key={key})"

    def servers(self) -> list[ServerStats]:
        """Each server's state and counters now, in the order of ``base_url``."""
        return [
            ServerStats(s.url, s.up, s.outstanding, s.requests, s.ok, s.failures, s.last_error)
            for s in self._servers
        ]

    async def aclose(self) -> None:
        client, self._client = self._client, None
        prober, self._prober = self._prober, None
        if prober is not None:
            prober.cancel()
            await asyncio.gather(prober, return_exceptions=True)
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
        # a request keeps its slot while it backs off, so retries never add load on a struggling server
        async with self._sem:
            if len(self._servers) == 1:
                return await self._send(client, self._servers[0], payload, request, t0, 0, None)
            tried: list[_Server] = []
            causes: dict[int, str] = {}
            attempts = 0
            # never None on the first pass: the last server up is never taken out
            while (server := self._pick(tried)) is not None:
                tried.append(server)
                try:
                    return await self._send(client, server, payload, request, t0, attempts, tried)
                except _ServerFailed as exc:
                    attempts += exc.attempts
                    causes[server.index] = self._scrub(exc.failure.message)
                    if not self._others_up(tried):
                        break
                    self._mark_down(server, causes[server.index])
                    log.info(
                        "%s: request moves on from %s after: %s", self.name, server.url, causes[server.index]
                    )
            why = "; ".join(
                f"{s.url}: {causes[s.index]}" if s.index in causes else f"{s.url}: down ({s.last_error})"
                for s in self._servers
            )
            failure = _Failure("engine", f"no server answered the request: {why}")
            return self._failed(request, failure, max(1, attempts), t0, tried[-1].url if tried else None)

    def _others_up(self, tried: list[_Server]) -> bool:
        """Whether a server that is up has not been tried by this request yet."""
        return any(s.up and s not in tried for s in self._servers)

    def _pick(self, tried: list[_Server]) -> _Server | None:
        """The server that is up, not yet tried by this request, with the fewest requests in flight (ties in
        turn), or None."""
        up = [s for s in self._servers if s.up and s not in tried]
        if not up:
            return None
        low = min(s.outstanding for s in up)
        n = len(self._servers)
        best = min((s for s in up if s.outstanding == low), key=lambda s: (s.index - self._turn) % n)
        self._turn = best.index + 1
        return best

    async def _send(
        self,
        client: httpx.AsyncClient,
        server: _Server,
        payload: dict[str, Any],
        request: Request,
        t0: float,
        before: int,
        tried: list[_Server] | None,
    ) -> Result:
        """The request on one server, retried there as the class docstring says; ``before`` counts the attempts
        made on other servers. With several servers (``tried``: those this request went to, this one last),
        raises :class:`_ServerFailed` when this one fails it."""
        url = f"{server.url}/chat/completions"
        answered_by = None if tried is None else server.url

        def server_failed(f: _Failure, attempts: int) -> Result:
            server.failures += 1
            server.last_error = self._scrub(f.message)
            if tried is not None:
                raise _ServerFailed(f, attempts)
            return self._failed(request, f, before + attempts, t0)

        server.requests += 1
        server.outstanding += 1
        try:
            attempt = 0
            while True:
                attempt += 1
                try:
                    text, usage, finish = await self._attempt(client, url, payload)
                except _Failure as f:
                    if f.unreachable:  # a timeout: not retried on this server
                        return server_failed(f, attempt)
                    return self._failed(request, f, before + attempt, t0, answered_by)
                except _Retry as r:
                    fail = r.failure
                    # no answer at all (or another request took this server out): on to the next server at once
                    # while there is one; on the last one, retried like a server's error
                    if tried is not None and (fail.unreachable or not server.up) and self._others_up(tried):
                        return server_failed(fail, attempt)
                    if attempt > self._max_retries:
                        return server_failed(fail, attempt)
                    wait = self._delay(attempt - 1, r.after_s)
                    if wait is None:
                        why = f"{fail.message} (Retry-After {r.after_s:g} s exceeds backoff_max_s)"
                        return server_failed(_Failure(fail.kind, why, fail.status), attempt)
                    log.info("%s: retry %d in %.2f s after %s", self.name, attempt, wait, fail.message)
                    await asyncio.sleep(wait)
                    continue
                server.ok += 1
                return Result(
                    text,
                    usage=usage,
                    latency_s=time.perf_counter() - t0,
                    parsed=self._checker.parsed(request, text),
                    finish_reason=finish,
                    tags=request.tags,
                    attempts=before + attempt,
                    server=answered_by,
                )
        finally:
            server.outstanding -= 1

    def _mark_down(self, server: _Server, why: str) -> None:
        """Takes ``server`` out until a probe gets an answer, and starts the prober if it is not running."""
        if server.up:
            server.up = False
            server.next_probe = time.monotonic() + self._probe_interval
            log.warning(
                "%s: server %s is down (%s); probing it every %g s",
                self.name,
                server.url,
                why,
                self._probe_interval,
            )
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(self._probe_down())
            self._prober.add_done_callback(_log_crash)

    async def _probe_down(self) -> None:
        """Probes each server that is down once per probe interval, until none is (or the engine closes)."""
        while (client := self._client) is not None:
            down = [s for s in self._servers if not s.up]
            if not down:
                return
            wait = min(s.next_probe for s in down) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            now = time.monotonic()
            await asyncio.gather(*(self._probe(client, s) for s in down if s.next_probe <= now))

    async def _probe(self, client: httpx.AsyncClient, server: _Server) -> None:
        server.next_probe = time.monotonic() + self._probe_interval
        try:
            resp = await client.get(f"{server.url}/models", timeout=self._probe_timeout)
        except httpx.HTTPError as exc:
            log.debug("%s: probe of %s: %s", self.name, server.url, type(exc).__name__)
            return
        if resp.status_code < 500 and not server.up:
            server.up = True
            log.warning(
                "%s: server %s answers again (HTTP %d); back in use", self.name, server.url, resp.status_code
            )

    def _failed(
        self, request: Request, f: _Failure, attempts: int, t0: float, server: str | None = None
    ) -> Result:
        error = ErrorRecord(f.kind, self._scrub(f.message), attempts=attempts, status=f.status)
        log.warning("%s: request failed after %d attempt(s): %s", self.name, attempts, error.message)
        return Result(
            "",
            latency_s=time.perf_counter() - t0,
            error=error,
            tags=request.tags,
            attempts=attempts,
            server=server,
        )

    async def _attempt(
        self, client: httpx.AsyncClient, url: str, payload: dict[str, Any]
    ) -> tuple[str, Usage, str | None]:
        try:
            resp = await client.post(url, json=payload)
        except httpx.ConnectTimeout as exc:
            raise _Retry(_Failure("engine", f"connect timeout to {url}", unreachable=True)) from exc
        except httpx.TimeoutException as exc:
            raise _Failure("timeout", f"{type(exc).__name__} from {url}", unreachable=True) from exc
        except httpx.TransportError as exc:
            detail = self._scrub(f"{type(exc).__name__}: {exc}")
            raise _Retry(
                _Failure("engine", f"connection error to {url}: {detail}", unreachable=True)
            ) from exc
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


def _log_crash(prober: asyncio.Task[None]) -> None:
    """Logs what ended the prober other than its end or cancellation (nothing awaits it but ``aclose``)."""
    if not prober.cancelled() and prober.exception() is not None:
        log.error("server prober failed; the next server taken out restarts it", exc_info=prober.exception())


def _base_urls(base_url: str | Sequence[str]) -> tuple[str, ...]:
    """The API roots of ``base_url`` (one URL or several), without a trailing slash."""
    given = [base_url] if isinstance(base_url, str) else list(base_url)
    if not given or not all(isinstance(u, str) and u for u in given):
        raise InvalidArgumentError(
            f"base_url must be a URL or a non-empty list of URLs; got {base_url!r}", "base_url"
        )
    urls = tuple(u.rstrip("/") for u in given)
    twice = sorted({u for u in urls if urls.count(u) > 1})
    if twice:
        raise InvalidArgumentError(
            f"base_url must name each server once; got {', '.join(twice)} twice", "base_url"
        )
    return urls


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
