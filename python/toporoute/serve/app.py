"""The ASGI app: :func:`create_app` wires the :class:`~.service.Service`, errors, limits, auth and metrics.

Errors are JSON ``{"error": {"type", "message", "field"}}`` with one snake_case ``type`` per kind of error
(:data:`~.schemas.ERROR_TYPES`): 400 ``invalid_json``, 401 ``unauthorized`` without the right bearer token,
404 ``not_found``, 405 ``method_not_allowed`` (with the ``Allow`` header), 413 ``body_too_large`` over
``max_body_bytes``, 422 for a request the models reject (``validation_error``; ``out_of_range`` and
``non_finite`` for those kinds) or a toporoute ``ValueError`` (``invalid_argument``, ``out_of_range``,
``non_finite``, ``shape_mismatch``; ``field`` = its ``arg``), 503 ``qmix_unavailable``, and 500
``internal_error`` with a generic message and a request id for anything unexpected (logged here with its
traceback; the response never carries one).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__, backends
from ..errors import NonFiniteError, OutOfRangeError, ShapeError, ToporouteError
from . import openapi
from .config import ServeConfig
from .docs import add_docs
from .metrics import Metrics
from .schemas import (
    ConductorRequest,
    ConductorResponse,
    EmbeddingsRequest,
    EmbeddingsResponse,
    EmbedRequest,
    EmbedResponse,
    ErrorResponse,
    Health,
    QMixRequest,
    QMixResponse,
    RouteRequest,
    RouteResponse,
    ToposortRequest,
    ToposortResponse,
)
from .service import QMixUnavailable, Service

__all__ = ["create_app"]

log = logging.getLogger("toporoute.serve")

_M = TypeVar("_M", bound=BaseModel)
_Handler = Callable[[Any, Request], Awaitable[dict[str, Any]]]

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 413, 422, 500)
}

# The ``type`` of a toporoute ValueError (first match; any other is ``invalid_argument``).
_VALUE_ERROR_TYPES: tuple[tuple[type[Exception], str], ...] = (
    (ShapeError, "shape_mismatch"),
    (NonFiniteError, "non_finite"),
    (OutOfRangeError, "out_of_range"),
)
# pydantic's error types that are ranges (numbers, list lengths) or non-finite numbers.
_PYDANTIC_TYPES = {
    **dict.fromkeys(
        ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short", "too_long"),
        "out_of_range",
    ),
    "finite_number": "non_finite",
}
_HTTP_TYPES = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed"}


def _error(status: int, type_: str, message: str, field: str | None, **headers: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"type": type_, "message": message, "field": field}}, status_code=status, headers=headers
    )


def _field(loc: tuple[Any, ...]) -> str | None:
    """``('body', 'episodes', 0, 'list[TextEpisode]', 'needs', 1)`` -> ``'episodes[0].needs[1]'``: drops the
    ``body`` prefix and pydantic's union-member tags (type names, never one of our field names)."""
    out = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and not ("[" in part or part[:1].isupper() or "-" in part):
            out += f".{part}" if out else part
    return out or None


def create_app(config: ServeConfig, *, encoder: Any = None) -> FastAPI:
    """The HTTP app for ``config``; all its state lives on ``app.state`` (``config``, ``service``, ``metrics``).

    Parameters
    ----------
    config : ServeConfig
    encoder : toporoute.embed.Encoder, optional
        The text encoder (default: all-MiniLM-L6-v2 with ``config.encoder_cache_size`` cached texts).

    Returns
    -------
    FastAPI
        Serve it with uvicorn (``toporoute serve`` does); on shutdown uvicorn stops accepting connections and
        lets in-flight requests finish.
    """
    metrics = Metrics()
    service = Service(config, on_batch=metrics.batch_size.observe, encoder=encoder)
    metrics.watch_cache(service.encoder)
    app = FastAPI(
        title="toporoute",
        version=__version__,
        description="Routing engine for LLM multi-agent systems: the ops and the text Router over HTTP. "
        "Every limit the server checks is declared here; arrays whose shapes disagree (ragged rows, `needs` "
        "and `offers` of different lengths, `k` not shaped like `q`, base64 bytes not matching `shape`) are "
        "answered 422 `shape_mismatch`, the one rule this schema cannot state.",
        responses=_ERRORS,
        docs_url=None,
        redoc_url=None,
    )
    app.state.config = config
    app.state.service = service
    app.state.metrics = metrics
    backend_name = backends.select(config.backend, np.zeros(1, dtype=np.float32)).__name__.rsplit(".", 1)[-1]

    async def authorize(request: Request) -> None:
        if config.token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), config.token.encode())
        if not ok:
            raise StarletteHTTPException(401, "a valid 'Authorization: Bearer <token>' header is required")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": "invalid"}
        if first.get("type") == "json_invalid":
            return _error(400, "invalid_json", f"the body is not valid JSON: {first.get('msg')}", "body")
        field = _field(tuple(first.get("loc", ())))
        type_ = _PYDANTIC_TYPES.get(str(first.get("type")), "validation_error")
        return _error(422, type_, f"{field or 'body'}: {first.get('msg')}", field)

    @app.exception_handler(ToporouteError)
    async def _toporoute(request: Request, exc: ToporouteError) -> Response:
        if isinstance(exc, ValueError):
            type_ = next((t for cls, t in _VALUE_ERROR_TYPES if isinstance(exc, cls)), "invalid_argument")
            return _error(422, type_, str(exc), exc.arg)
        raise exc  # a RuntimeError / MemoryError of the core: the generic 500 below

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})  # Starlette's, e.g. the Allow of a 405 (RFC 9110)
        if exc.status_code == 401:
            headers["WWW-Authenticate"] = "Bearer"
        type_ = _HTTP_TYPES.get(exc.status_code, "http_error")
        return _error(exc.status_code, type_, str(exc.detail), None, **headers)

    @app.exception_handler(QMixUnavailable)
    async def _no_qmix(request: Request, exc: QMixUnavailable) -> JSONResponse:
        return _error(503, "qmix_unavailable", str(exc), None)

    @app.get("/health", response_model=Health, tags=["service"], operation_id="health")
    async def health() -> dict[str, Any]:
        """Liveness and what this server runs; open even when a token is set."""
        return {
            "status": "ok",
            "version": __version__,
            "backend": backend_name,
            "encoder": service.encoder.name,
            "qmix": service.qmix is not None,
        }

    @app.get(
        "/metrics",
        # no text response_class: the route's errors (a 401 without the token) are JSON and documented as JSON;
        # the 200 is documented as Prometheus text below
        dependencies=[Depends(authorize)],
        tags=["service"],
        operation_id="metrics",
        responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
    )
    async def metrics_text() -> Response:
        """Prometheus text: requests by endpoint and status, latency and text batch-size histograms, encoder
        cache hits and misses."""
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    def op_endpoint(
        path: str,
        operation_id: str,
        body: type[BaseModel],
        reply: type[BaseModel],
        *ops: str,
        unavailable: bool = False,
        listed: bool = True,
        tag: str = "ops",
    ) -> Callable[[_Handler], _Handler]:
        """``POST path`` behind the token: the endpoint parses the body as ``body`` itself (see :func:`_parse`),
        passes it and the request to the decorated handler and answers the handler's result as JSON ``reply``
        (or a documented 503 ``ErrorResponse`` where ``unavailable``); left out of the schema unless
        ``listed``. The handler's name and docstring are the endpoint's."""
        responses: dict[int | str, dict[str, Any]] = {200: {"model": reply}}
        if unavailable:
            responses[503] = {"model": ErrorResponse}
        protected.add(path)
        post = app.post(
            path,
            response_model=None,
            openapi_extra=openapi.body(body, *ops),
            responses=responses,
            dependencies=[Depends(authorize)],
            tags=[tag],
            operation_id=operation_id,
            include_in_schema=listed,
        )

        def register(handler: _Handler) -> _Handler:
            async def endpoint(request: Request) -> JSONResponse:
                return JSONResponse(await handler(await _parse(body, request), request))

            endpoint.__name__, endpoint.__doc__ = handler.__name__, handler.__doc__
            post(endpoint)
            return handler

        return register

    protected = {"/metrics"}

    @op_endpoint("/v1/route", "route", RouteRequest, RouteResponse, "route", "toposort")
    async def route(req: RouteRequest, request: Request) -> dict[str, Any]:
        """Routes episodes of descriptor texts (needs, offers) or of embeddings (q, k): edges, inboxes,
        in-degrees, the topological order and levels of each episode's graph (optionally the scores). Text
        episodes of concurrent requests share encoder batches."""
        return await service.route(req)

    @op_endpoint("/v1/embed", "embed", EmbedRequest, EmbedResponse)
    async def embed(req: EmbedRequest, request: Request) -> dict[str, Any]:
        """Texts to unit vectors (the Router's encoder and its cache)."""
        return await service.embed(req)

    @op_endpoint("/v1/embeddings", "create_embeddings", EmbeddingsRequest, EmbeddingsResponse, tag="openai")
    async def embeddings(req: EmbeddingsRequest, request: Request) -> dict[str, Any]:
        """OpenAI-compatible embeddings (the descriptor encoder), so OpenAI, LangChain and AutoGen embedding
        clients can point at this server as they are (`base_url` = this server's `/v1`, `model` = the
        encoder's name, the token as the API key)."""
        return await service.embeddings(req)

    @op_endpoint("/v1/toposort", "toposort", ToposortRequest, ToposortResponse, "toposort")
    async def toposort(req: ToposortRequest, request: Request) -> dict[str, Any]:
        """Topological order with cycle breaking (``ops.toposort``) of one graph or a batch."""
        return await _run(service.toposort, req, request)

    @op_endpoint(
        "/v1/conductor/check",
        "conductor_check",
        ConductorRequest,
        ConductorResponse,
        "conductor_check",
        "conductor_density",
    )
    async def conductor_check(req: ConductorRequest, request: Request) -> dict[str, Any]:
        """Checks AgentConductor YAML plans: class, message, layers, edges and the density reward."""
        return await _run(service.conductor_check, req, request)

    # Without a checkpoint the path still answers (503) but is left out of the schema: no request to it can
    # succeed, so a generated client should not offer it.
    @op_endpoint(
        "/v1/qmix/act",
        "qmix_act",
        QMixRequest,
        QMixResponse,
        "qmix_forward",
        unavailable=True,
        listed=service.qmix is not None,
    )
    async def qmix_act(req: QMixRequest, request: Request) -> dict[str, Any]:
        """One Agent Q-Mix round with the checkpoint loaded at start: Q-values, greedy actions, next hidden
        state (the client keeps the hidden state between rounds). 503 `qmix_unavailable` without a
        checkpoint (and then the path is not in this schema)."""
        return await _run(service.qmix_act, req, request)

    add_docs(app)

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = openapi.document(
                app,
                config,
                encoder_names=service.model_names(),
                dim=int(service.encoder.dim),
                qmix=service.qmix,
                protected=protected,
            )
        return app.openapi_schema

    app.add_middleware(_Guard, config=config, metrics=metrics)
    app.openapi = document  # type: ignore[method-assign, unused-ignore]
    return app


async def _parse(model: type[_M], request: Request) -> _M:
    """The body as ``model``, parsed by pydantic's own JSON parser (several times faster than ``json.loads``
    then validation on float arrays); errors become the same 400 / 422 as FastAPI's own validation."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from None


# Bodies up to this size are computed on the event loop (microseconds of work: a thread hop would cost more);
# larger ones in a worker thread, so one big request does not stall the others.
_INLINE_BYTES = 64 * 1024


async def _run(fn: Any, req: Any, request: Request) -> Any:
    """``fn(req)``: inline for a small body, in a worker thread for a large one."""
    try:
        size = int(request.headers.get("content-length", "0"))
    except ValueError:
        size = _INLINE_BYTES + 1
    if size > _INLINE_BYTES:
        return await asyncio.to_thread(fn, req)
    return fn(req)


class _Guard:
    """Outermost ASGI layer: request id, body-size limit (413), metrics, and the 500 for unexpected errors."""

    def __init__(self, app: ASGIApp, config: ServeConfig, metrics: Metrics) -> None:
        self.app, self.config, self.metrics = app, config, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex[:16]
        started = time.perf_counter()
        status = {"code": 500, "sent": False}

        async def send_wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["sent"] = message["status"], True
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        async def respond(response: Response) -> None:
            await response(scope, receive, send_wrapped)

        try:
            body = await self._read_body(scope, receive)
            if body is None:
                await respond(
                    _error(
                        413,
                        "body_too_large",
                        f"the request body must be at most {self.config.max_body_bytes} bytes",
                        "body",
                    )
                )
                return
            replay = _Replay(body, receive)
            await self.app(scope, replay, send_wrapped)
        except Exception:
            log.exception("request %s (%s %s) failed", request_id, scope.get("method"), scope.get("path"))
            if not status["sent"]:
                await respond(
                    _error(500, "internal_error", f"internal server error (request id {request_id})", None)
                )
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "other"
            self.metrics.observe(endpoint, int(status["code"]), time.perf_counter() - started)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None when it is (or is announced to be) over the limit."""
        limit = self.config.max_body_bytes
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    if int(value) > limit:
                        return None
                except ValueError:
                    pass
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


class _Replay:
    """An ASGI ``receive`` that hands the buffered body over once, then waits on the real one (disconnects)."""

    def __init__(self, body: bytes, receive: Receive) -> None:
        self.body, self.receive, self.done = body, receive, False

    async def __call__(self) -> Message:
        if not self.done:
            self.done = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        return await self.receive()
