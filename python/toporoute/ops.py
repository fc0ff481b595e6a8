"""Public, typed core ops. Array conventions are the same everywhere:

- graphs are dense boolean adjacency ``adj[b, src, dst]`` (row = sender, column = receiver), batch-first,
  padded to N with an ``active[b, n]`` mask; scores use the same layout;
- every op also accepts a single graph (no batch axis) and then returns results without it;
- ``backend=`` is ``"reference"`` (numpy), ``"cpu"`` (compiled core) or ``"cuda"``; ``None`` uses the
  ``TOPOROUTE_BACKEND`` environment variable, else CUDA for device arrays, else the compiled core when built,
  else the reference;
- bad input raises a :class:`ValueError` subclass from :mod:`toporoute.errors` naming the argument.

See ``backends/reference.py`` for the exact semantics of each op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _validate as _v
from . import backends
from .results import Density, GraphStats, Order, Routes

__all__ = [
    "Density",
    "GraphStats",
    "Order",
    "Routes",
    "conductor_density",
    "graph_stats",
    "route",
    "toposort",
]


def _unbatch(result: Any, single: bool) -> Any:
    """Drops the batch axis that the facade added to a single-graph call."""
    if not single:
        return result
    return type(result)(*[None if f is None else f[0] for f in vars(result).values()])


def route(
    q: Any,
    k: Any,
    *,
    tau: float = 0.3,
    k_in: int = 3,
    active: Any = None,
    backend: str | None = None,
) -> Routes:
    """Route messages by cosine match of needs (``q``) and offers (``k``).

    Parameters
    ----------
    q, k : (B, N, D) or (N, D) float32
        Each agent's need (query) and offer (key) embedding. Rows need not be normalised; an all-zero row
        gets no edges.
    tau : float in [-1, 1]
        Edge ``j -> i`` iff ``scores[b, j, i] > tau`` (strict, compared in float32), ``j != i``.
    k_in : int >= 0
        Each recipient keeps at most ``k_in`` providers with the highest scores, ties to the lower index;
        0 means no cap.
    active : (B, N) or (N,) bool, optional
        Inactive (padding) agents get no edges and zero scores.
    backend : {"reference", "cpu", "cuda"}, optional

    Returns
    -------
    Routes
        ``scores (B, N, N) float32``, ``adjacency (B, N, N) bool``, ``inbox (B, N, K) int32`` (providers by
        descending score, -1 padded; ``K = k_in``, or ``N - 1`` when uncapped) and ``in_degree (B, N) int32``.
    """
    qs, tau, k_in = _v.route_args(q, k, active, tau, k_in)
    impl = backends.select(backend, q)
    single = len(qs) == 2
    if single:
        q, k = q[None], k[None]
        active = None if active is None else active[None]
    return _unbatch(impl.route(q, k, tau=tau, k_in=k_in, active=active), single)


def toposort(adj: Any, *, weights: Any = None, active: Any = None, backend: str | None = None) -> Order:
    """Greedy topological order with cycle breaking.

    Repeatedly places the unplaced node with the smallest in-degree from unplaced nodes (ties to the lowest
    index); with ``weights``, a node that still has in-edges is ranked by their weight sum, so cycles lose
    their lightest edges. On a DAG this is Kahn's order. Edges into a node from nodes placed after it are
    ``removed``; ``level`` is the longest-path layer of what remains (nodes of a level can run concurrently).
    Self-loops are ignored.

    Parameters
    ----------
    adj : (B, N, N) or (N, N) bool
        ``adj[b, src, dst]``.
    weights : same shape float32, finite and >= 0, optional
    active : (B, N) or (N,) bool, optional
        Inactive nodes are placed last in index order with level -1; their edges are ignored.
    backend : {"reference", "cpu", "cuda"}, optional

    Returns
    -------
    Order
        ``order (B, N) int32``, ``level (B, N) int32``, ``removed (B, N, N) bool``, ``is_dag (B,) bool``.
    """
    shape = _square(adj, "adj")
    if weights is not None:
        ws = _v.array(weights, "weights", "float32", (2, 3), "(B, N, N) or (N, N)")
        _v.same_shape(ws, "weights", shape, "the shape of adj")
    _v.active_mask(active, shape[:-1])
    impl = backends.select(backend, adj)
    single = len(shape) == 2
    if single:
        adj = adj[None]
        weights = None if weights is None else weights[None]
        active = None if active is None else active[None]
    return _unbatch(impl.toposort(adj, weights=weights, active=active), single)


def graph_stats(adj: Any, active: Any = None, *, prev: Any = None, backend: str | None = None) -> GraphStats:
    """Edge count, density, in/out degree and reciprocity of each graph, and the Jaccard distance of its edge
    set to ``prev`` (the previous round's graph) when given. Self-loops and inactive nodes are ignored.

    Parameters
    ----------
    adj, prev : (B, N, N) or (N, N) bool
    active : (B, N) or (N,) bool, optional
    backend : {"reference", "cpu"}, optional

    Returns
    -------
    GraphStats
    """
    shape = _square(adj, "adj")
    if prev is not None:
        ps = _v.array(prev, "prev", "bool", (2, 3), "(B, N, N) or (N, N)")
        _v.same_shape(ps, "prev", shape, "the shape of adj")
    _v.active_mask(active, shape[:-1])
    impl = backends.select(backend, adj)
    single = len(shape) == 2
    if single:
        adj = adj[None]
        prev = None if prev is None else prev[None]
        active = None if active is None else active[None]
    return _unbatch(impl.graph_stats(adj, active=active, prev=prev), single)


def conductor_density(
    nodes: Any, edges: Any, steps: Any, n_max: Any, *, backend: str | None = None
) -> Density:
    """AgentConductor topology density and its reward term r_g (methods/agentconductor.md §4), elementwise.

    Parameters
    ----------
    nodes : int array, >= 1
        |V|, agents in the turn.
    edges : int array, >= 0
        |E|, declared refs (intra- and cross-turn).
    steps : int array, 1 <= steps <= nodes
        s, steps (layers) in the turn.
    n_max : int array, >= 1
        Difficulty cap (4 / 7 / 10).
    backend : {"reference", "cpu"}, optional

    Returns
    -------
    Density
        float64 arrays of the broadcast shape: ``s_node = exp(-V/N_max)``, ``s_edge = exp(-E/(V(V-0.5)))``,
        ``s_depth = 1 - s/V``, ``s_complex = exp(s_node + 2 s_edge + s_depth)`` and ``reward`` = s_complex
        within the cap, else ``tanh((N_max - V)/N_max)``.
    """
    arrays = [
        _v.int_array(nodes, "nodes", 1),
        _v.int_array(edges, "edges", 0),
        _v.int_array(steps, "steps", 1),
        _v.int_array(n_max, "n_max", 1),
    ]
    try:
        nodes, edges, steps, n_max = np.broadcast_arrays(*arrays)
    except ValueError as exc:
        raise _v.ShapeError(
            f"nodes, edges, steps and n_max must broadcast together: {exc}", arg="nodes"
        ) from exc
    if (steps > nodes).any():
        i = np.argwhere(steps > nodes)[0]
        raise _v.OutOfRangeError(
            f"steps must be <= nodes (every step holds an agent); got steps={steps[tuple(i)]}, "
            f"nodes={nodes[tuple(i)]} at index {tuple(int(x) for x in i)}",
            arg="steps",
        )
    impl = backends.select(backend, nodes)
    return impl.conductor_density(nodes, edges, steps, n_max)


def _square(adj: Any, name: str) -> tuple[int, ...]:
    shape = _v.array(adj, name, "bool", (2, 3), "(B, N, N) or (N, N)")
    if shape[-1] != shape[-2]:
        raise _v.ShapeError(f"{name} must be square in its last two axes (N, N); got {shape}", arg=name)
    return shape
