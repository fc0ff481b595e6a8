"""The op functions of :mod:`toporoute.ops`: validate once, add the batch axis, dispatch to a backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backends import is_device_array
from ..errors import DTypeError, InvalidArgumentError, OutOfRangeError, ShapeError
from ..types.conductor_topology import DEFAULT_OPTIONS, CheckOptions, Context, TopologyBatch
from ..types.qmix_params import QMixParams
from ..types.results import Density, GraphStats, Order, QMixGraph, QMixStep, Routes
from . import _validate as _v
from ._dispatch import Args, dispatcher

__all__ = [
    "conductor_check",
    "conductor_density",
    "graph_stats",
    "mean_pool",
    "nearest",
    "qmix_forward",
    "qmix_graph",
    "qmix_mix",
    "route",
    "route_indexed",
    "toposort",
]


def _density_args(args: Args) -> Args:
    """The checks of ``ops.conductor_density``: integer arrays in range that broadcast together, ``steps <=
    nodes``; returns them broadcast, as int64. Device arrays are checked by dtype and shape here and by value in
    the kernel (its errors come like every device-array call's: see ``toporoute.backends.cuda.synchronize``)."""
    if any(is_device_array(a) for a in args):
        return _device_density_args(args)
    arrays = [
        _v.int_array(args[0], "nodes", 1),
        _v.int_array(args[1], "edges", 0),
        _v.int_array(args[2], "steps", 1),
        _v.int_array(args[3], "n_max", 1),
    ]
    try:
        nodes, edges, steps, n_max = np.broadcast_arrays(*arrays)
    except ValueError as exc:
        raise ShapeError(
            f"nodes, edges, steps and n_max must broadcast together: {exc}", arg="nodes"
        ) from exc
    if (steps > nodes).any():
        i = np.argwhere(steps > nodes)[0]
        raise OutOfRangeError(
            f"steps must be <= nodes (every step holds an agent); got steps={steps[tuple(i)]}, "
            f"nodes={nodes[tuple(i)]} at index {tuple(int(x) for x in i)}",
            arg="steps",
        )
    return nodes, edges, steps, n_max


def _device_density_args(args: Args) -> Args:
    """``conductor_density`` on device arrays: four int64 arrays of one shape on the device (no broadcasting or
    conversion there: a copy per call would cost more than the op)."""
    names = ("nodes", "edges", "steps", "n_max")
    shape = None
    for x, name in zip(args, names):
        if not is_device_array(x):
            raise InvalidArgumentError(
                f"{name} must be a device array like the others (conductor_density on the GPU takes four int64 "
                f"arrays of one shape); got {type(x).__name__}",
                arg=name,
            )
        if _v.dtype_name(x) != "int64":
            raise DTypeError(f"{name} must have dtype int64 on the device; got {_v.dtype_name(x)}", arg=name)
        here = tuple(int(d) for d in x.shape)
        if shape is None:
            shape = here
        elif here != shape:
            raise ShapeError(
                f"{name} must have the shape of nodes {shape} on the device; got {here}", arg=name
            )
    return args


def _plan_args(args: Args) -> Args:
    """The checks of ``ops.conductor_check`` on ``(texts, context, options)``; returns the texts and one
    context per text as lists, and the options."""
    texts, context, options = args
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Sequence) or isinstance(texts, bytes):
        raise InvalidArgumentError(
            f"texts must be a string or a sequence of strings; got {type(texts).__name__}", "texts"
        )
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InvalidArgumentError(f"texts[{i}] must be a string; got {type(t).__name__}", "texts")
    options = options or DEFAULT_OPTIONS
    if not isinstance(options, CheckOptions):
        raise InvalidArgumentError(f"options must be a CheckOptions; got {type(options).__name__}", "options")
    if context is None or isinstance(context, Context):
        contexts = [context or Context()] * len(texts)
    else:
        contexts = list(context)
        if len(contexts) != len(texts):
            raise ShapeError(
                f"context must be one Context or one per text ({len(texts)}); got {len(contexts)}",
                arg="context",
            )
        for i, c in enumerate(contexts):
            if not isinstance(c, Context):
                raise InvalidArgumentError(
                    f"context[{i}] must be a Context; got {type(c).__name__}", "context"
                )
    for c in {id(c): c for c in contexts}.values():
        for n in c.nodes:
            if n.role not in options.pool:
                raise InvalidArgumentError(
                    f"context node {n.token} has role {n.role!r}, which is not in the pool {options.pool}",
                    "context",
                )
    return texts, contexts, options


def _nearest_args(args: Args) -> Args:
    """The checks of ``ops.nearest`` on ``(table, queries, k, keep)``: dtypes, ranks and matching sizes, ``k``
    an integer >= 1 (returned as ``int``); the values (finite) are checked by the backends."""
    table, queries, k, keep = args
    ts = _v.array(table, "table", "float32", (2,), "(M, D)")
    qs = _v.array(queries, "queries", "float32", (1, 2), "(B, D) or (D,)")
    if qs[-1] != ts[1]:
        raise ShapeError(
            f"queries must have D = {ts[1]} columns, as table (M, D) = {tuple(ts)}; got shape {tuple(qs)}",
            "queries",
        )
    if keep is not None:
        ks = _v.array(keep, "keep", "bool", (len(qs),), "(B, M) or (M,) matching queries")
        _v.same_shape(ks, "keep", (*qs[:-1], ts[0]), "(B, M)" if len(qs) == 2 else "(M,)")
    return table, queries, _v.integer(k, "k", 1), keep


QMIX_MAX_AGENTS = 64  # the compiled kernel keeps reachability in one 64-bit word per agent


def _graph_actions(args: Args) -> Args:
    """The shape checks of ``ops.qmix_graph`` on ``(actions,)``; the values are checked by the backends."""
    (actions,) = args
    if type(actions) is np.ndarray and actions.dtype in _v.NP_INDEX_DTYPES and 1 <= actions.ndim <= 2:
        shape = actions.shape
    else:
        shape = _v.typed_array(actions, "actions", _v.INDEX_DTYPES, (1, 2), "(B, N) or (N,)")
    if shape[-1] > QMIX_MAX_AGENTS:
        raise ShapeError(
            f"actions must hold at most {QMIX_MAX_AGENTS} agents; got N = {shape[-1]}", "actions"
        )
    return args


_route = dispatcher("route", _v.route, Routes)
_route_indexed = dispatcher("route_indexed", _v.route_indexed, Routes)
_mean_pool = dispatcher("mean_pool", _v.mean_pool, np.ndarray)
_toposort = dispatcher("toposort", _v.toposort, Order)
_graph_stats = dispatcher("graph_stats", _v.graph_stats, GraphStats)
_conductor_density = dispatcher("conductor_density", _density_args, Density)
_conductor_check = dispatcher("conductor_check", _plan_args, TopologyBatch)
_qmix_forward = dispatcher("qmix_forward", _v.qmix_forward, QMixStep)
_qmix_mix = dispatcher("qmix_mix", _v.qmix_mix, np.ndarray)
_qmix_graph = dispatcher("qmix_graph", _graph_actions, QMixGraph)
_nearest = dispatcher("nearest", _nearest_args, np.ndarray)


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
    return _route(backend, (q, k, active, tau, k_in))


def route_indexed(
    table: Any,
    q_rows: Any,
    k_rows: Any,
    *,
    tau: float = 0.3,
    k_in: int = 3,
    pool: Sequence[tuple[Any, Any, Any]] | None = None,
    backend: str | None = None,
) -> Routes:
    """Route messages between agents whose need and offer embeddings are rows of one shared table.

    Exactly ``route(table[q_rows], table[k_rows], tau=tau, k_in=k_in, active=(q_rows != -1) & (k_rows != -1))``
    with rows of -1 read as zeros, without building the (B, N, D) arrays: the compiled backend gathers each
    episode's rows into per-thread scratch and runs the same kernel, so its results equal ``route``'s bit
    for bit.

    Parameters
    ----------
    table : (M, D) float32
        Embedding rows (unit stride along D for the compiled backend). Only referenced rows are read (and
        must be finite).
    q_rows, k_rows : (B, N) or (N,) int32 or int64
        Table row of each agent's need (query) and offer (key). -1 marks padding: the agent is inactive when
        either of its entries is -1. Any other value must lie in [0, M).
    tau : float in [-1, 1]
        Edge ``j -> i`` iff ``scores[b, j, i] > tau`` (strict, compared in float32), ``j != i``.
    k_in : int >= 0
        Each recipient keeps at most ``k_in`` providers with the highest scores, ties to the lower index;
        0 means no cap.
    pool : sequence of (hidden, mask, rows), optional
        Token states to embed first (one triple per length bucket of the tokenizer): each ``(n, L, D)``
        float32 ``hidden`` with its ``(n, L)`` ``mask`` is mean-pooled and normalised as by :func:`mean_pool`
        into ``table[rows]``. **``table`` is modified in place** (it must then be C-contiguous and
        writeable); ``rows`` must be distinct across all triples. The compiled backend pools and routes in one
        call with the GIL released once. All indices and tokens are checked before the table is written.
    backend : {"reference", "cpu", "cuda"}, optional
        ``"cuda"`` runs on the GPU: device arrays stay there (written in place like numpy's; bad input is
        reported by the next call on the device or by ``toporoute.backends.cuda.synchronize()``).

    Returns
    -------
    Routes
        As :func:`route`: ``scores (B, N, N) float32``, ``adjacency (B, N, N) bool``, ``inbox (B, N, K) int32``
        and ``in_degree (B, N) int32``; without the batch axis for (N,) rows.

    Raises
    ------
    OutOfRangeError
        A ``q_rows`` / ``k_rows`` entry outside {-1} and [0, M) (named), or (on ``pool``) a row outside [0, M).
    NonFiniteError
        NaN or infinity in a referenced table row (on ``table``) or a counted token (on ``pool``).
    """
    return _route_indexed(backend, (table, q_rows, k_rows, tau, k_in, None, pool))


def nearest(table: Any, queries: Any, *, k: int, keep: Any = None, backend: str | None = None) -> np.ndarray:
    """The ``k`` rows of ``table`` nearest each query by cosine, best first: retrieval of the agents, tools or
    documents whose embeddings match a need.

    ``cos(table[m], queries[b])`` is accumulated in float64, clamped to [-1, 1] and rounded to float32 (0 where
    either row is zero); rows are ranked by that float32 score, ties to the lower row, so every backend returns
    the same rows.

    Parameters
    ----------
    table : (M, D) float32
        The candidates' embeddings (rows need not be normalised; a zero row scores 0). Must be finite.
    queries : (B, D) or (D,) float32
        One embedding per query. Must be finite.
    k : int >= 1
        How many rows each query gets (fewer kept rows than ``k``: the rest of its row is -1).
    keep : (B, M) or (M,) bool, optional
        The rows each query may get (default: all), e.g. to leave out the query's own row or rows already used.
    backend : {"reference", "cpu"}, optional
        There is no CUDA kernel: device arrays are refused, naming the op.

    Returns
    -------
    ndarray
        ``(B, k)`` int64 row indices, best first, -1 padded; ``(k,)`` for one ``(D,)`` query.

    Raises
    ------
    NonFiniteError
        NaN or infinity in ``table`` (the first such row is named) or in ``queries`` (the first query).
    """
    return _nearest(backend, (table, queries, k, keep))


def mean_pool(
    hidden: Any, mask: Any, *, out: Any = None, rows: Any = None, backend: str | None = None
) -> np.ndarray:
    """Masked mean pooling and L2 normalisation of transformer token states (sentence-transformers
    semantics): one unit-length embedding per sequence.

    Row ``i`` is ``v / max(|v|_2, 1e-12)`` with ``v`` the mean of ``hidden[i, l]`` over the tokens ``l``
    whose ``mask[i, l]`` is non-zero (accumulated in float64, rounded to float32 once). A row without counted
    tokens is a zero vector. Uncounted (padding) tokens are never read into the result and may hold anything.

    Parameters
    ----------
    hidden : (n, L, D) float32
        Token states (unit stride along D for the compiled backend; other strides are read in place).
    mask : (n, L) bool, int32 or int64
        Attention mask: non-zero where the token counts (its value is not a weight).
    out : (M, D) float32, C-contiguous and writeable, optional
        Written in place: row ``i`` goes to ``out[rows[i]]``. Without ``out`` a new array is returned.
    rows : (n,) int32 or int64, optional
        Distinct rows of ``out`` in [0, M); only with ``out``. Default ``arange(n)`` (then ``M >= n``).
    backend : {"reference", "cpu", "cuda"}, optional
        ``"cuda"`` runs on the GPU: device arrays stay there (written in place like numpy's; bad input is
        reported by the next call on the device or by ``toporoute.backends.cuda.synchronize()``).

    Returns
    -------
    numpy.ndarray
        A new C-contiguous ``(n, D)`` float32 array, or ``out``. Nothing is written to ``out`` when a check
        fails.

    Raises
    ------
    OutOfRangeError
        A ``rows`` entry outside [0, M).
    InvalidArgumentError
        Repeated ``rows`` entries, or ``rows`` without ``out``.
    NonFiniteError
        NaN or infinity in a counted token of ``hidden`` (the first row and token are named).
    """
    return _mean_pool(backend, (hidden, mask, out, rows))


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
    return _toposort(backend, (adj, weights, active))


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
    return _graph_stats(backend, (adj, active, prev))


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
    return _conductor_density(backend, (nodes, edges, steps, n_max))


def qmix_forward(
    params: QMixParams,
    obs: Any,
    adj: Any,
    hidden: Any = None,
    *,
    active: Any = None,
    backend: str | None = None,
) -> QMixStep:
    """One round of the Agent Q-Mix agent network for B episodes of N agents (inference: no dropout).

    Input projection + ReLU, ``gnn_layers`` message-passing layers over the round graph (message Linear + ReLU,
    mean over the neighbours chosen by ``params.config.adj_mode`` / ``self_loops``, GRUCell update, shared
    LayerNorm), the GRUCell memory, and the Q-head. Exact semantics: ``backends/reference.py``.

    Parameters
    ----------
    params : QMixParams
        Weights, e.g. ``QMixParams.load("policy.safetensors")``.
    obs : (B, N, obs_dim) or (N, obs_dim) float32
    adj : (B, N, N) or (N, N) bool
        ``adj[b, src, dst]``: the previous round's graph (round 0: the identity or no edges).
    hidden : (B, N, H) or (N, H) float32, optional
        GRU memory from the previous round; None means zeros (round 0).
    active : (B, N) or (N,) bool, optional
        Padding agents: they send no message and get ``q = 0``, ``hidden = 0``.
    backend : {"reference", "cpu", "cuda"}, optional

    Returns
    -------
    QMixStep
        ``q (B, N, n_actions) float32`` and the new ``hidden (B, N, H) float32`` (a named tuple).
    """
    return _qmix_forward(backend, (params, obs, adj, hidden, active))


def qmix_mix(params: QMixParams, q_taken: Any, state: Any, *, backend: str | None = None) -> Any:
    """The monotonic QMIX mixer: ``Q_tot`` from each agent's chosen-action value and the global state.

    Parameters
    ----------
    params : QMixParams
        Must hold the mixer (training checkpoints do).
    q_taken : (B, n_agents) or (n_agents,) float32
    state : (B, state_dim) or (state_dim,) float32
    backend : {"reference", "cpu", "cuda"}, optional

    Returns
    -------
    (B,) float32, or a 0-d array for a single sample. ``dQ_tot/dq_i >= 0`` (absolute hypernetwork weights).
    """
    return _qmix_mix(backend, (params, q_taken, state))


def qmix_graph(actions: Any, *, backend: str | None = None) -> QMixGraph:
    """Agent Q-Mix's round graph phi(u) from each agent's communication action (methods/agentqmix.md §2.2).

    Actions: 0 solo_process, 1 broadcast_all (``i -> j`` for every j), 2 selective_query (``i -> i+1 mod N``),
    3 aggregate_refine (``j -> i`` for every j), 4 execute_verify (``i -> i+1`` when ``i+1 < N``), 5
    debate_check (both ``i -> p`` and ``p -> i`` with ``p = (i + N // 2) mod N``). Agents are visited in index
    order, partners in increasing order. An edge ``s -> d`` is kept unless it is a self-loop, already there, or
    ``s`` is reachable from ``d`` (the greedy acyclicity guard: the earlier agent wins the direction); a debate
    pair is added unless ``i`` is reachable from ``p`` (``p == i`` adds nothing). Like the original code, the
    debate tests only ``p -> ... -> i``, so besides its 2-cycle it can close a longer cycle through an earlier
    path (``ops.toposort`` breaks it when the round is scheduled).

    Parameters
    ----------
    actions : (B, N) or (N,) int32 or int64
        Each agent's action in [0, 6); N <= 64.
    backend : {"reference", "cpu"}, optional

    Returns
    -------
    QMixGraph
        ``adj (B, N, N) bool`` (``adj[b, src, dst]``) and ``debate (B, N) int32`` (the partner each agent's
        debate_check paired it with, else -1); without the batch axis for a single joint action.

    Raises
    ------
    OutOfRangeError
        An action outside [0, 6) (the first one is named, with its episode and agent).
    """
    return _qmix_graph(backend, (actions,))


def conductor_check(
    texts: str | Sequence[str],
    *,
    context: Context | Sequence[Context] | None = None,
    options: CheckOptions | None = None,
    backend: str | None = None,
) -> TopologyBatch:
    """Extracts, parses, validates and decodes AgentConductor YAML plans (methods/agentconductor.md §3.1, §3.2).

    The semantics are those of :func:`toporoute.types.conductor_topology.check` (PyYAML-based, the reference): the
    error classes, the checks and their order, ids, ref resolution, cross-turn and self edges. The compiled
    core parses the plain block layout orchestrators write and checks it in parallel; a plan outside that
    layout (flow mappings, anchors, escapes, ...) is handed to the reference, so the result never depends on
    the backend.

    Parameters
    ----------
    texts : str or sequence of str (B,)
        Orchestrator outputs (reasoning around the YAML is allowed).
    context : Context or sequence of Context (B,), optional
        The turn each plan is written for and the earlier turns' agents (default: the first turn).
    options : CheckOptions, optional
    backend : {"reference", "cpu"}, optional

    Returns
    -------
    TopologyBatch
        ``error (B,) uint8`` (0 valid, else the class), ``nodes, edges, steps, depth (B,)`` (the inputs of
        :func:`conductor_density`), the decoded graphs in CSR arrays, and ``item(b)`` for one
        :class:`~toporoute.types.conductor_topology.TopologyCheck`.
    """
    return _conductor_check(backend, (texts, context, options))
