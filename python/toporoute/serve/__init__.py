"""``toporoute serve``: the ops and the text Router behind an HTTP API (FastAPI + uvicorn, extra ``serve``).

:func:`create_app` builds the ASGI app from a :class:`ServeConfig`; every piece of state (the Router per
``(tau, k_in)``, the encoder and its cache, the Q-Mix weights, the metrics registry) lives on ``app.state``, so
several apps can live in one process. This layer knows :mod:`toporoute.ops` and :mod:`toporoute.embed`, never
the methods or the LLM engines.

Endpoints (JSON; a float array field may be ``{"b64": base64 of little-endian float32, "shape": [...]}``, and
responses use that form when the request sets ``"binary": true``):

- ``POST /v1/route``: ``episodes`` of texts ``{"needs", "offers"}`` (through ``Router.aroute_texts``: concurrent
  requests share encoder batches) or of embeddings ``{"q", "k"}`` (``ops.route``), ``tau``, ``k_in``,
  ``scores`` -> per episode ``edges``, ``inbox``, ``in_degree``, ``order``, ``level``, ``removed`` (the
  ``ops.toposort`` of its graph) and optionally ``scores``.
- ``POST /v1/embed``: ``texts`` -> ``{"dim", "vectors"}``.
- ``POST /v1/embeddings``: OpenAI's embeddings request and answer, from the same encoder.
- ``POST /v1/toposort``: ``graphs`` ``(N, N)`` or ``(B, N, N)`` (optional ``weights``, ``active``) ->
  ``{"graphs": [{"order", "level", "removed", "is_dag"}, ...]}`` (a list even for one graph).
- ``POST /v1/conductor/check``: ``plans``, ``n_max`` (alias ``n_agents``; one or one per plan), ``options`` ->
  ``{"plans": [{"class", "tag", "message", "nodes", "layers", "edges", "density"}, ...]}``.
- ``POST /v1/qmix/act``: ``obs``, ``adj``, ``hidden``, ``active`` -> ``{"q", "actions", "hidden"}`` (503 without
  ``--qmix-checkpoint``, and then left out of the schema).
- ``GET /health`` (open), ``GET /metrics`` (Prometheus text), ``GET /openapi.json`` (every limit declared, see
  :mod:`.openapi`), ``GET /docs`` and ``GET /redoc`` (assets served locally, see :mod:`.docs`).

Errors are ``{"error": {"type", "message", "field"}}`` with a snake_case ``type`` (see :mod:`.app`): 400 (not
JSON), 401 (token), 404, 405 (with ``Allow``), 413 (body size), 422 (type, limit, non-finite number, shapes that
disagree, or any toporoute ``ValueError``; ``field`` names the request field), 503 (no Q-Mix checkpoint), 500
(unexpected: a generic message with the request id, the traceback in the server log only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import ServeConfig

if TYPE_CHECKING:
    from .app import create_app

__all__ = ["ServeConfig", "create_app"]


def __getattr__(name: str) -> Any:
    # create_app is imported on first use, so that the settings (and the CLI's flags made from them) load without
    # FastAPI, the extra's package
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
