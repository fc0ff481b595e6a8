"""toporoute: a routing engine for LLM multi-agent systems.

The core ops live in :mod:`toporoute.ops`; :func:`build_info` reports how the compiled core was built.
:class:`Router` and :class:`Encoder` (text -> graph, in :mod:`toporoute.embed`) load on first use, so importing
toporoute does not import ONNX Runtime.
"""

from __future__ import annotations

from typing import Any

from . import errors, ops
from ._engine_child import quiet_if_engine_child
from ._info import build_info
from .types.results import Density, GraphStats, Order, Routes

__version__ = "0.1.0"

quiet_if_engine_child()  # only in a child process of a quietly started vLLM engine (see _engine_child)

__all__ = [
    "Density",
    "Encoder",
    "GraphStats",
    "Order",
    "Router",
    "Routes",
    "__version__",
    "build_info",
    "errors",
    "ops",
]


def __getattr__(name: str) -> Any:
    if name in ("Router", "Encoder"):
        from . import embed

        return getattr(embed, name)
    raise AttributeError(f"module 'toporoute' has no attribute {name!r}")
