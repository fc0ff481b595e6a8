"""CPU backend: thin calls into the compiled core. Arrays are batched and validated by :mod:`toporoute.ops`;
the core re-checks dtypes and shapes, never copies its inputs, releases the GIL and raises
:mod:`toporoute.errors` exceptions. ``isa`` selects a SIMD level for tests (default: the process-wide choice)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..results import Density, GraphStats, Order, Routes

if TYPE_CHECKING:
    from ..qmix_params import QMixParams

try:
    from .. import _core
except ImportError as exc:  # built without a C++ compiler, or a broken build
    _core = None
    _IMPORT_ERROR = str(exc)
else:
    _IMPORT_ERROR = ""

__all__ = [
    "available",
    "conductor_density",
    "graph_stats",
    "mean_pool",
    "qmix_forward",
    "qmix_mix",
    "qmix_weights",
    "route",
    "route_indexed",
    "toposort",
]


def available() -> tuple[bool, str]:
    if _core is None:
        return False, f"toporoute._core is not built ({_IMPORT_ERROR}); reinstall with a C++ compiler"
    return True, ""


def route(
    q: np.ndarray, k: np.ndarray, *, tau: float, k_in: int, active: np.ndarray | None, isa: str = ""
) -> Routes:
    return Routes(*_core.route(q, k, active, tau, k_in, isa))


def route_indexed(
    table: np.ndarray,
    q_rows: np.ndarray,
    k_rows: np.ndarray,
    *,
    tau: float,
    k_in: int,
    active: np.ndarray | None = None,
    pool: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
    isa: str = "",
) -> Routes:
    """Indexed routing; with ``pool``, pooling into ``table`` and routing run in one core call."""
    if not pool:
        return Routes(*_core.route_indexed(table, q_rows, k_rows, active, tau, k_in, isa))
    hiddens, masks, rows = (list(x) for x in zip(*pool))
    return Routes(*_core.pool_route(hiddens, masks, rows, table, q_rows, k_rows, active, tau, k_in, isa))


def mean_pool(
    hidden: np.ndarray, mask: np.ndarray, *, out: np.ndarray | None, rows: np.ndarray | None
) -> np.ndarray:
    return _core.mean_pool(hidden, mask, out, rows)


def toposort(adj: np.ndarray, *, weights: np.ndarray | None, active: np.ndarray | None) -> Order:
    return Order(*_core.toposort(adj, weights, active))


def graph_stats(adj: np.ndarray, *, active: np.ndarray | None, prev: np.ndarray | None) -> GraphStats:
    return GraphStats(*_core.graph_stats(adj, active, prev))


def conductor_density(nodes: np.ndarray, edges: np.ndarray, steps: np.ndarray, n_max: np.ndarray) -> Density:
    shape = nodes.shape
    flat = [np.ascontiguousarray(a.reshape(-1)) for a in (nodes, edges, steps, n_max)]
    return Density(*(r.reshape(shape) for r in _core.conductor_density(*flat)))


def qmix_weights(params: QMixParams) -> Any:
    """The params' weights packed for the core (``_core.QMixWeights``), built once and cached on the params."""
    return params.packed("cpu", _core.QMixWeights)


def qmix_forward(
    params: QMixParams,
    obs: np.ndarray,
    adj: np.ndarray,
    hidden: np.ndarray | None,
    *,
    active: np.ndarray | None,
    isa: str = "",
) -> tuple[np.ndarray, np.ndarray]:
    return _core.qmix_forward(qmix_weights(params), obs, adj, hidden, active, isa)


def qmix_mix(params: QMixParams, q_taken: np.ndarray, state: np.ndarray, *, isa: str = "") -> np.ndarray:
    return _core.qmix_mix(qmix_weights(params), q_taken, state, isa)
