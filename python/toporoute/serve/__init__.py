"""``toporoute serve``: the ops and the text Router behind an HTTP API (FastAPI + uvicorn, extra ``serve``).

:func:`create_app` builds the ASGI app from a :class:`ServeConfig`; every piece of state (the Router, the encoder,
the Q-Mix weights, the metrics registry) lives on ``app.state``, so several apps can live in one process.
"""

from __future__ import annotations

from .app import create_app
from .config import ServeConfig

__all__ = ["ServeConfig", "create_app"]
