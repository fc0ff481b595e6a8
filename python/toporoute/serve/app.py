"""The ASGI app: :func:`create_app` wires the :class:`~.service.Service`, errors, limits, auth and metrics.

Errors are JSON ``{"error": {"type", "message", "field"}}``: 400 for a body that is not JSON, 413 for a body over
``max_body_bytes``, 422 for a request the models reject or any toporoute ``ValueError`` (``field`` = its
``arg``), 401 without the right bearer token, and 500 with a generic message and a request id for anything
unexpected (logged here with its traceback; the response never carries one).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__, backends
from ..errors import ToporouteError
from ..types.op_table import OPS
from .config import ServeConfig
from .metrics import Metrics
from .schemas import (
    ConductorRequest,
    ConductorResponse,
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
_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 413, 422, 500)
}


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
        description="Routing engine for LLM multi-agent systems: the ops and the text Router over HTTP.",
        responses=_ERRORS,
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
        return _error(422, "validation_error", f"{field or 'body'}: {first.get('msg')}", field)

    @app.exception_handler(ToporouteError)
    async def _toporoute(request: Request, exc: ToporouteError) -> Response:
        if isinstance(exc, ValueError):
            return _error(422, type(exc).__name__, str(exc), exc.arg)
        raise exc  # a RuntimeError / MemoryError of the core: the generic 500 below

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else {}
        return _error(exc.status_code, "http_error", str(exc.detail), None, **headers)

    @app.exception_handler(QMixUnavailable)
    async def _no_qmix(request: Request, exc: QMixUnavailable) -> JSONResponse:
        return _error(503, "qmix_unavailable", str(exc), None)

    @app.get("/health", response_model=Health, tags=["service"])
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
        responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
    )
    async def metrics_text() -> Response:
        """Prometheus text: requests by endpoint and status, latency and text batch-size histograms, encoder
        cache hits and misses."""
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    def op_endpoint(
        path: str, body: type[BaseModel], reply: type[BaseModel], *ops: str, unavailable: bool = False
    ) -> Callable[[_Endpoint], _Endpoint]:
        """``POST path`` behind the token, tagged "ops": an endpoint that parses ``body`` itself (see
        :func:`_body`) and answers ``reply`` (or a documented 503 ``ErrorResponse`` where ``unavailable``)."""
        responses: dict[int | str, dict[str, Any]] = {200: {"model": reply}}
        if unavailable:
            responses[503] = {"model": ErrorResponse}
        return app.post(
            path,
            response_model=None,
            openapi_extra=_body(body, *ops),
            responses=responses,
            dependencies=[Depends(authorize)],
            tags=["ops"],
        )

    @op_endpoint("/v1/route", RouteRequest, RouteResponse, "route", "toposort")
    async def route(request: Request) -> JSONResponse:
        """Routes episodes of descriptor texts (needs, offers) or of embeddings (q, k): edges, inboxes,
        in-degrees, the topological order and levels of each episode's graph (optionally the scores). Text
        episodes of concurrent requests share encoder batches."""
        req = await _parse(RouteRequest, request)
        return JSONResponse(await service.route(req))

    @op_endpoint("/v1/embed", EmbedRequest, EmbedResponse)
    async def embed(request: Request) -> JSONResponse:
        """Texts to unit vectors (the Router's encoder and its cache)."""
        req = await _parse(EmbedRequest, request)
        return JSONResponse(await service.embed(req))

    @op_endpoint("/v1/toposort", ToposortRequest, ToposortResponse, "toposort")
    async def toposort(request: Request) -> JSONResponse:
        """Topological order with cycle breaking (``ops.toposort``) of one graph or a batch."""
        req = await _parse(ToposortRequest, request)
        return JSONResponse(await _run(service.toposort, req, request))

    @op_endpoint(
        "/v1/conductor/check", ConductorRequest, ConductorResponse, "conductor_check", "conductor_density"
    )
    async def conductor_check(request: Request) -> JSONResponse:
        """Checks AgentConductor YAML plans: class, message, layers, edges and the density reward."""
        req = await _parse(ConductorRequest, request)
        return JSONResponse(await _run(service.conductor_check, req, request))

    @op_endpoint("/v1/qmix/act", QMixRequest, QMixResponse, "qmix_forward", unavailable=True)
    async def qmix_act(request: Request) -> JSONResponse:
        """One Agent Q-Mix round with the checkpoint loaded at start: Q-values, greedy actions, next hidden
        state (the client keeps the hidden state between rounds). 503 without a checkpoint."""
        req = await _parse(QMixRequest, request)
        return JSONResponse(await _run(service.qmix_act, req, request))

    app.add_middleware(_Guard, config=config, metrics=metrics)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign, unused-ignore]
    return app


_BODIES = (RouteRequest, EmbedRequest, ToposortRequest, ConductorRequest, QMixRequest)


def _body(model: type[BaseModel], *ops: str) -> dict[str, Any]:
    """The OpenAPI request body of an endpoint that parses ``model`` itself (see :func:`_parse`), and the core ops
    it runs (``x-toporoute-ops``: each op's name and summary, read from the op table, so the service's
    description of them cannot drift from :mod:`toporoute.ops`)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    extra: dict[str, Any] = {
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}
    }
    if ops:
        extra["x-toporoute-ops"] = [{"op": f"toporoute.ops.{n}", "summary": OPS[n].summary} for n in ops]
    return extra


async def _parse(model: type[_M], request: Request) -> _M:
    """The body as ``model``, parsed by pydantic's own JSON parser (several times faster than ``json.loads``
    then validation on float arrays); errors become the same 400 / 422 as FastAPI's own validation."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from None


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema plus the request models of the endpoints that parse their body themselves."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in _BODIES:
            own = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in own.pop("$defs", {}).items():
                components.setdefault(name, sub)
            components[model.__name__] = own
        app.openapi_schema = schema
    return app.openapi_schema


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
