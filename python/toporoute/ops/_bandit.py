"""The HiVA bandit ops of :mod:`toporoute.ops`: Thompson selection of successors (:func:`bandit_select`), the edge
weights it is given (:func:`bandit_weights`), the nodes' Beta update (:func:`bandit_update`) and the edges'
synergy update (:func:`synergy_update`). Validate once, add the batch axis, dispatch; the semantics are in
``backends/_reference_bandit.py``."""

from __future__ import annotations

import math
from typing import Any

from ..errors import InvalidArgumentError, ShapeError
from ..types.results import BanditSelection, BetaState, EdgeWeights, SynergyState
from . import _validate as _v
from ._dispatch import Args, dispatcher

__all__ = ["bandit_select", "bandit_update", "bandit_weights", "synergy_update"]

MODES = ("thompson", "mean")
_U32 = 2**32
_U64 = 2**64


def _select_args(args: Args) -> Args:
    """The checks of ``bandit_select`` on its arguments in the op table's order."""
    adj, alpha, beta, k, weights, seed, step, mode, active, graph_offset = args
    shape = _v.square(adj, "adj")
    batch = shape[:-1]
    _v.per_node(alpha, "alpha", batch, "float32")
    _v.per_node(beta, "beta", batch, "float32")
    if weights is not None:
        ws = _v.array(weights, "weights", "float32", (2, 3), "(B, N, N) or (N, N)")
        _v.same_shape(ws, "weights", shape, "the shape of adj")
    _v.active_mask(active, batch)
    k = _v.integer(k, "k", 1, _U32 - 1, hint=">= 1")
    seed = _v.integer(seed, "seed", 0, _U64 - 1, hint="in [0, 2**64)")
    step = _v.integer(step, "step", 0, _U32 - 1, hint="in [0, 2**32)")
    if not isinstance(mode, str) or mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}; got {mode!r}", arg="mode")
    n_graphs = shape[0] if len(shape) == 3 else 1
    graph_offset = _v.integer(
        graph_offset, "graph_offset", 0, _U32 - n_graphs, hint=f"in [0, 2**32 - {n_graphs}]"
    )
    return adj, alpha, beta, k, weights, seed, step, mode, active, graph_offset


def _update_args(args: Args) -> Args:
    """The checks of ``bandit_update`` on its arguments in the op table's order."""
    alpha, beta, selected, reward, dt, km, gamma, delta, prior = args
    shape = _v.array(alpha, "alpha", "float32", (1, 2), "(B, N) or (N,)")
    _v.per_node(beta, "beta", shape, "float32")
    _v.per_node(selected, "selected", shape, "bool")
    _v.per_node(reward, "reward", shape, "float32")
    if dt is not None:
        _v.per_node(dt, "dt", shape, "float32")
    if km is not None:
        _v.per_node(km, "km", shape, "float32")
    gamma = _v.real(gamma, "gamma", 0.0, 1.0)
    delta = _v.real(delta, "delta", 0.0, math.inf)
    prior = _v.real(prior, "prior", 0.0, math.inf, open_lo=True)
    return alpha, beta, selected, reward, dt, km, gamma, delta, prior


def _weights_args(args: Args) -> Args:
    """The checks of ``bandit_weights`` on its arguments in the op table's order."""
    adj, alive, alpha, beta, c_syn, similarity, selected, sink, lam, eta, omega1, omega3, threshold, c0 = args
    shape = _v.graph(adj, alive)
    if shape[-1] < 1:
        raise ShapeError(f"adj must hold at least one node (the sink); got N = {shape[-1]}", arg="adj")
    batch = shape[:-1]
    _v.per_node(alpha, "alpha", batch, "float32")
    _v.per_node(beta, "beta", batch, "float32")
    cs = _v.array(c_syn, "c_syn", "float32", (2, 3), "(B, N, N) or (N, N)")
    _v.same_shape(cs, "c_syn", shape, "the shape of adj")
    ss = _v.typed_array(similarity, "similarity", ("float64",), (2, 3), "(B, N, 2) or (N, 2)")
    _v.same_shape(ss, "similarity", (*batch, 2), "(B, N, 2)" if len(batch) == 2 else "(N, 2)")
    _v.per_node(selected, "selected", batch, "bool")
    sink = _v.integer(sink, "sink", 0, shape[-1] - 1, hint=f"in [0, {shape[-1]}) (a node of adj)")
    return (
        adj, alive, alpha, beta, c_syn, similarity, selected, sink, _v.real(lam, "lam", 0.0, math.inf),
        _v.real(eta, "eta", 0.0, math.inf), _v.real(omega1, "omega1", 0.0, math.inf),
        _v.real(omega3, "omega3", 0.0, math.inf), _v.finite(threshold, "threshold"),
        _v.real(c0, "c0", 0.0, math.inf, open_lo=True),
    )  # fmt: skip


def _synergy_args(args: Args) -> Args:
    """The checks of ``synergy_update`` on its arguments in the op table's order."""
    c_syn, edge_alpha, edge_beta, routed, reward, lr = args
    shape = _v.array(c_syn, "c_syn", "float32", (2, 3), "(B, N, N) or (N, N)")
    if shape[-1] != shape[-2]:
        raise ShapeError(f"c_syn must be square in its last two axes (N, N); got {shape}", arg="c_syn")
    for x, name in ((edge_alpha, "edge_alpha"), (edge_beta, "edge_beta"), (routed, "routed")):
        xs = _v.array(x, name, "float32", (2, 3), "(B, N, N) or (N, N)")
        _v.same_shape(xs, name, shape, "the shape of c_syn")
    _v.per_node(reward, "reward", shape[:-1], "float32")
    return c_syn, edge_alpha, edge_beta, routed, reward, _v.real(lr, "lr", 0.0, math.inf)


_bandit_select = dispatcher("bandit_select", _select_args, BanditSelection)
_bandit_update = dispatcher("bandit_update", _update_args, BetaState)
_synergy_update = dispatcher("synergy_update", _synergy_args, SynergyState)
_bandit_weights = dispatcher("bandit_weights", _weights_args, EdgeWeights)


def bandit_select(
    adj: Any,
    alpha: Any,
    beta: Any,
    k: int,
    *,
    weights: Any = None,
    seed: int,
    step: int = 0,
    mode: str = "thompson",
    active: Any = None,
    graph_offset: int = 0,
    backend: str | None = None,
) -> BanditSelection:
    """Thompson sampling of each node's belief and each source's top-``k`` successors (HiVA, spec §3.1).

    ``theta[b, n] ~ Beta(alpha[b, n], beta[b, n])`` comes from a counter-based generator (Philox4x32-10) keyed
    by ``seed`` with the counter (step, graph ``graph_offset + b``, node, draw index): a graph's draws depend on
    nothing else, so every backend, thread count and batch split gives the same theta and the same selection
    (chunks of one batch pass their start as ``graph_offset``). Gamma draws by Marsaglia-Tsang in float64,
    theta rounded to float32; the exact draw sequence is documented in ``backends/_reference_bandit.py``.
    ``score[b, s, d] = theta[b, d] * weights[b, s, d]`` (float32). The candidates of source ``s`` are the ``d``
    with ``adj[b, s, d]``, ``d != s``, both active and ``weights > 0``; ``s`` keeps its ``k`` best by score,
    ties to the lower index.

    Parameters
    ----------
    adj : (B, N, N) or (N, N) bool
        ``adj[b, src, dst]``: the successors each node may route to.
    alpha, beta : (B, N) or (N,) float32
        Beta parameters of each node; finite and > 0 at active nodes (others are not read).
    k : int >= 1
        Successors kept per source.
    weights : (B, N, N) or (N, N) float32, finite and >= 0, optional
        Edge factor (``exp(-lambda Dist) * zeta**eta``); None means 1. A weight of 0 removes the edge.
    seed : int in [0, 2**64)
    step : int in [0, 2**32)
        The routing step (iteration); another step gives independent draws.
    mode : {"thompson", "mean"}
        ``"mean"``: ``theta = alpha / (alpha + beta)`` (float64, rounded to float32), no draws.
    active : (B, N) or (N,) bool, optional
        Inactive nodes get ``theta = 0``, no choices and are never chosen.
    graph_offset : int >= 0
        Index of this batch's first graph in the whole batch; ``graph_offset + B <= 2**32``.
    backend : {"reference", "cpu", "cuda"}, optional
        ``"cuda"`` draws the same counter-based Philox streams on the GPU (CuPy / PyTorch arrays stay on the
        device; its ``log``/``exp``/``cos`` may differ from the C library's by an ulp, which can move a rare
        ``theta`` by one float32 step: see tests/ops/test_cuda_stats.py for the measured rate).

    Returns
    -------
    BanditSelection
        ``chosen (B, N, N) bool``, ``choices (B, N, k) int32`` (best first, -1 padded) and ``theta (B, N)
        float32``; without the batch axis for a single graph.

    Raises
    ------
    NonFiniteError, OutOfRangeError
        ``alpha`` / ``beta`` not finite or <= 0 at an active node, ``weights`` not finite or negative (the first
        offending graph and node are named).
    """
    return _bandit_select(backend, (adj, alpha, beta, k, weights, seed, step, mode, active, graph_offset))


def bandit_weights(
    adj: Any,
    alive: Any,
    alpha: Any,
    beta: Any,
    c_syn: Any,
    similarity: Any,
    selected: Any,
    *,
    sink: int = 1,
    lam: float = 1.0,
    eta: float = 1.0,
    omega1: float = 0.25,
    omega3: float = 0.25,
    threshold: float = 0.75,
    c0: float = 1.0,
    backend: str | None = None,
) -> EdgeWeights:
    """HiVA's edge weights, the ``weights`` of :func:`bandit_select` (spec §3.1, the no-KG fallback: d_I = 1,
    Psi2 = Psi4 = 0)::

        psi[n]   = omega1 Psi1 + omega3 Psi3,  Psi1 = 0.5 (1 - jaccard) + 0.5 (1 - cosine) / 2,
                                               Psi3 = 1 - alpha / (alpha + beta)
        w[s, d]  = exp(-lam log(2) psi[d]) * max(zeta(S + {d}), 0) ** eta        (1 into the sink)
        zeta(G)  = sum of c_syn[u, w] over u != w in G / (|G| (|G| - 1)) / top   (1 for |G| = 1)

    for each live edge ``s -> d`` (``adj``, ``d != s``, both alive). ``S`` is the set of selected nodes other
    than the sink; ``top`` is the largest ``c_syn`` among the live nodes other than the sink (``c0`` with fewer
    than two of them, at least 1e-12). The sink stays out of zeta and is never dropped. The distance threshold
    drops (weight 0) every successor with ``psi > threshold``, except that a source whose successors are all
    beyond it keeps the nearest (smallest psi, ties to the lower index). Computed in float64, the weights
    rounded to float32 once; the exact steps (numpy's pairwise sums, the C library's ``exp`` and ``pow``) are
    in ``backends/_reference_bandit.py``, which every backend follows bit for bit.

    Parameters
    ----------
    adj : (B, N, N) or (N, N) bool
        ``adj[b, src, dst]``: the graph's edges.
    alive : (B, N) or (N,) bool
        The nodes that exist (dead ones get no weights and psi 0).
    alpha, beta : (B, N) or (N,) float32
        The nodes' Beta beliefs; finite and > 0 at alive nodes (others are not read).
    c_syn : (B, N, N) or (N, N) float32, finite
        ``c_syn[b, u, w]``: the synergy of the pair.
    similarity : (B, N, 2) or (N, 2) float64
        ``(Jaccard in [0, 1], cosine in [-1, 1])`` of each node to the task; 0, 0 for a node without one.
    selected : (B, N) or (N,) bool
        The set S: the nodes selected so far in this pass.
    sink : int in [0, N)
        The aggregator.
    lam, eta : float >= 0
        lambda (knowledge distance) and eta (synergy exponent).
    omega1, omega3 : float >= 0
        The weights of Psi1 (semantic mismatch) and Psi3 (historical mismatch).
    threshold : float
        The distance threshold on psi (finite).
    c0 : float > 0
        The synergy scale with fewer than two live nodes other than the sink.
    backend : {"reference", "cpu"}, optional

    Returns
    -------
    EdgeWeights
        ``weights (B, N, N) float32`` and ``psi (B, N) float64``; without the batch axis for a single graph.

    Raises
    ------
    NonFiniteError, OutOfRangeError
        ``alpha`` / ``beta`` not finite or <= 0 at an alive node, ``c_syn`` not finite, ``similarity`` not
        finite or out of range (the first offending graph and node are named).
    """
    args = (
        adj,
        alive,
        alpha,
        beta,
        c_syn,
        similarity,
        selected,
        sink,
        lam,
        eta,
        omega1,
        omega3,
        threshold,
        c0,
    )
    return _bandit_weights(backend, args)


def bandit_update(
    alpha: Any,
    beta: Any,
    selected: Any,
    reward: Any,
    *,
    dt: Any = None,
    gamma: float = 0.6,
    km: Any = None,
    delta: float = 0.5,
    prior: float = 1.0,
    backend: str | None = None,
) -> BetaState:
    """The nodes' Beta update (HiVA Eq. B1) with decay toward the prior, elementwise::

        g      = gamma ** dt
        alpha' = prior + g (alpha - prior) + selected (reward + delta km)
        beta'  = prior + g (beta - prior) + selected (1 - reward + delta (1 - km))

    computed in float64 and rounded to float32 once.

    Parameters
    ----------
    alpha, beta : (B, N) or (N,) float32, finite and > 0
    selected : (B, N) or (N,) bool
        Nodes that ran this iteration (only they get the reward terms).
    reward : (B, N) or (N,) float32 in [0, 1]
    dt : (B, N) or (N,) float32, finite and >= 0, optional
        Iterations since each node's last update; None means 1.
    gamma : float in [0, 1]
        Decay per iteration.
    km : (B, N) or (N,) float32 in [0, 1], optional
        Knowledge match; None drops both delta terms.
    delta : float >= 0
    prior : float > 0
    backend : {"reference", "cpu"}, optional

    Returns
    -------
    BetaState
        New ``alpha, beta (B, N) float32`` arrays (the inputs are not modified).
    """
    return _bandit_update(backend, (alpha, beta, selected, reward, dt, km, gamma, delta, prior))


def synergy_update(
    c_syn: Any,
    edge_alpha: Any,
    edge_beta: Any,
    routed: Any,
    reward: Any,
    *,
    lr: float = 0.1,
    backend: str | None = None,
) -> SynergyState:
    """The edges' synergy update (HiVA Eq. B2). For every edge ``i -> j`` with ``routed[b, i, j] > 0``::

        edge_alpha += reward[j];  edge_beta += 1 - reward[j]
        c_syn      += lr * edge_alpha / (edge_alpha + edge_beta) * routed[b, i, j]   (with the updated Beta)

    computed in float64, each result rounded to float32; other entries are copied unchanged.

    Parameters
    ----------
    c_syn : (B, N, N) or (N, N) float32, finite
        ``c_syn[b, i, j]``: synergy of the edge ``i -> j``.
    edge_alpha, edge_beta : same shape float32, finite and >= 0
        The edges' success Beta.
    routed : same shape float32, finite and >= 0
        ``R_ij``: how often the edge was routed this iteration.
    reward : (B, N) or (N,) float32 in [0, 1]
        Reward of each destination node.
    lr : float >= 0
        The synergy learning rate gamma'.
    backend : {"reference", "cpu"}, optional

    Returns
    -------
    SynergyState
        New ``c_syn, edge_alpha, edge_beta`` arrays (the inputs are not modified).
    """
    return _synergy_update(backend, (c_syn, edge_alpha, edge_beta, routed, reward, lr))
