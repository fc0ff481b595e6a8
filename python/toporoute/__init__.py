"""toporoute: a routing engine for LLM multi-agent systems.

The core ops live in :mod:`toporoute.ops`; :func:`build_info` reports how the compiled core was built.
"""

from __future__ import annotations

from . import errors, ops
from ._info import build_info
from .results import Density, GraphStats, Order, Routes

__version__ = "0.1.0"

__all__ = ["Density", "GraphStats", "Order", "Routes", "__version__", "build_info", "errors", "ops"]
