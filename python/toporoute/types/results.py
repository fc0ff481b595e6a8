"""Typed results of the core ops. Arrays are numpy on host backends and device arrays (CuPy/PyTorch) on CUDA
inputs; a single-graph call returns arrays without the batch axis."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

__all__ = [
    "BanditSelection",
    "BetaState",
    "DagEdits",
    "DagRepair",
    "Density",
    "EdgeWeights",
    "GraphStats",
    "Order",
    "QMixGraph",
    "QMixStep",
    "Routes",
    "SynergyState",
    "TeamProjection",
    "TeamSchedule",
    "TeamScores",
]

Array = Any  # numpy.ndarray, or a CuPy / PyTorch device array for CUDA inputs
_T = TypeVar("_T")


@dataclass(frozen=True)
class Routes:
    """Result of :func:`toporoute.ops.route`.

    Attributes
    ----------
    scores : (B, N, N) float32
        ``scores[b, j, i] = cos(k[b, j], q[b, i])``: provider ``j``'s offer against recipient ``i``'s need.
        0 where either row is all zeros or either agent is inactive.
    adjacency : (B, N, N) bool
        ``adjacency[b, j, i]``: message edge ``j -> i`` (sender row, receiver column).
    inbox : (B, N, K) int32
        Each recipient's providers by descending score (ties to the lower index), padded with -1.
    in_degree : (B, N) int32
        Number of providers kept per recipient.
    """

    scores: Array
    adjacency: Array
    inbox: Array
    in_degree: Array


@dataclass(frozen=True)
class Order:
    """Result of :func:`toporoute.ops.toposort`.

    Attributes
    ----------
    order : (B, N) int32
        Node placed at each position; inactive nodes last, in index order.
    level : (B, N) int32
        Longest-path layer in the graph minus removed edges (sources 0); -1 for inactive nodes.
    removed : (B, N, N) bool
        Back edges dropped to break cycles (``removed[b, src, dst]``).
    is_dag : (B,) bool
        True when nothing was removed.
    """

    order: Array
    level: Array
    removed: Array
    is_dag: Array


@dataclass(frozen=True)
class Density:
    """Result of :func:`toporoute.ops.conductor_density`; every field float64 with the broadcast shape."""

    s_node: Array
    s_edge: Array
    s_depth: Array
    s_complex: Array
    reward: Array


@dataclass(frozen=True)
class GraphStats:
    """Result of :func:`toporoute.ops.graph_stats` (self-loops and inactive nodes ignored).

    Attributes
    ----------
    edges : (B,) int64
    density : (B,) float64
        ``edges / (n (n - 1))`` with ``n`` active nodes; 0 when ``n < 2``.
    in_degree, out_degree : (B, N) int32
    reciprocity : (B,) float64
        Share of edges whose reverse edge also exists; 0 with no edges.
    jaccard : (B,) float64 or None
        Jaccard distance ``1 - |E & E_prev| / |E | E_prev|`` to ``prev`` (0 when both are empty); None without prev.
    """

    edges: Array
    density: Array
    in_degree: Array
    out_degree: Array
    reciprocity: Array
    jaccard: Array | None


@dataclass(frozen=True)
class QMixGraph:
    """Result of :func:`toporoute.ops.qmix_graph`.

    Attributes
    ----------
    adj : (B, N, N) bool
        The round graph ``adj[b, src, dst]``.
    debate : (B, N) int32
        The partner of agent ``i`` whose ``debate_check`` added the 2-cycle ``i <-> debate[b, i]``, else -1
        (in index order this is the round's list of debate pairs).
    """

    adj: Array
    debate: Array


class QMixStep(NamedTuple):
    """Result of :func:`toporoute.ops.qmix_forward` (unpacks as ``q, hidden``).

    Attributes
    ----------
    q : (B, N, n_actions) float32
        Each agent's action values; 0 for inactive agents.
    hidden : (B, N, H) float32
        The new GRU memory; 0 for inactive agents.
    """

    q: Array
    hidden: Array


@dataclass(frozen=True)
class BanditSelection:
    """Result of :func:`toporoute.ops.bandit_select`.

    Attributes
    ----------
    chosen : (B, N, N) bool
        ``chosen[b, s, d]``: source ``s`` routes to successor ``d``.
    choices : (B, N, k) int32
        Each source's chosen successors, best score first (ties to the lower index), padded with -1.
    theta : (B, N) float32
        Each node's belief: a Beta(alpha, beta) draw (``mode="thompson"``) or the mean; 0 for inactive nodes.
    """

    chosen: Array
    choices: Array
    theta: Array


@dataclass(frozen=True)
class BetaState:
    """Result of :func:`toporoute.ops.bandit_update`: the nodes' new Beta parameters, ``(B, N) float32`` each."""

    alpha: Array
    beta: Array


@dataclass(frozen=True)
class SynergyState:
    """Result of :func:`toporoute.ops.synergy_update`: ``c_syn``, ``edge_alpha``, ``edge_beta``, each
    ``(B, N, N) float32`` (``[b, i, j]`` for the edge ``i -> j``)."""

    c_syn: Array
    edge_alpha: Array
    edge_beta: Array


@dataclass(frozen=True)
class EdgeWeights:
    """Result of :func:`toporoute.ops.bandit_weights`.

    Attributes
    ----------
    weights : (B, N, N) float32
        ``weights[b, s, d]``: the factor ``exp(-lam Dist(d)) * zeta(S + {d})**eta`` of the live edge ``s -> d``
        (1 into the sink; 0 for a candidate the distance threshold drops, and off the live edges).
    psi : (B, N) float64
        ``omega1 Psi1 + omega3 Psi3`` of each live node (0 for dead ones): the distance the threshold is taken on.
    """

    weights: Array
    psi: Array


@dataclass(frozen=True)
class DagEdits:
    """Result of :func:`toporoute.ops.dag_edit`.

    Attributes
    ----------
    adj : (B, N, N) bool
        The graphs after the accepted edits (a new array), ``adj[b, src, dst]``.
    alive : (B, N) bool
        The nodes that exist afterwards (new nodes added, removed successors deleted).
    accepted : (B, E) bool
        True for an applied edit and for NO_CHANGE; False for a rejected edit and for padding.
    reason : (B, E) int8
        Outcome code, a name in ``toporoute.ops.EDIT_REASONS[reason]`` (0 "ok").
    new_node : (B, E) int32
        The node an accepted ADD_PARALLEL / ADD_SERIAL created; -1 otherwise.
    """

    adj: Array
    alive: Array
    accepted: Array
    reason: Array
    new_node: Array


@dataclass(frozen=True)
class DagRepair:
    """Result of :func:`toporoute.ops.dag_repair`.

    Attributes
    ----------
    adj : (B, N, N) bool
        The repaired graphs (a new array): DAGs where the source reaches the sink, out-degree <= max_out.
    alive : (B, N) bool
        The nodes left alive.
    pruned_nodes : (B, N) bool
        Nodes alive before and not after.
    pruned_edges : (B, N, N) bool
        Edges of the input that the repair removed (cycles, consistency, cap, low success, pruned nodes).
    added_edges : (B, N, N) bool
        Edges the repair added (only ``source -> sink`` when the source did not reach the sink).
    """

    adj: Array
    alive: Array
    pruned_nodes: Array
    pruned_edges: Array
    added_edges: Array


@dataclass(frozen=True)
class TeamProjection:
    """Result of :func:`toporoute.ops.team_project`.

    Attributes
    ----------
    adj : (B, N, N) bool
        The graphs after the accepted edits and the repair (a new array), ``adj[b, src, dst]``.
    alive : (B, N) bool
        The nodes that exist afterwards (dead nodes removed, children added).
    roles : (B, N) int32
        Each alive node's role; -1 for dead slots.
    generation : (B, N) int32
        A child's slot generation is the input's + 1, other slots keep theirs: ``(slot, generation)`` names a node.
    accepted : (B, P) bool
        True for an applied row; False for a rejected or padding row.
    reason : (B, P) int8
        Outcome code, a name in ``toporoute.ops.TEAM_REASONS[reason]`` (0 "ok").
    new_node : (B, P) int32
        The child slot of an accepted REPLACE / BIRTH row; -1 otherwise.
    inherited : (B, N, N) bool
        Edges the births added: a replacement's inherited edges, a pure birth's ``parent -> child -> sink``
        (those still in ``adj``: a wiring edge an accepted row then removed is not reported).
    repaired : (B, N, N) bool
        Edges the repair added (isolated node -> best scorer, node -> sink).
    """

    adj: Array
    alive: Array
    roles: Array
    generation: Array
    accepted: Array
    reason: Array
    new_node: Array
    inherited: Array
    repaired: Array


@dataclass(frozen=True)
class TeamSchedule:
    """Result of :func:`toporoute.ops.team_schedule`: the execution waves of a graph with cycles.

    Attributes
    ----------
    component : (B, N) int32
        Strongly connected component of each node, numbered in a topological order of the condensation
        (among ready components the one holding the lowest node index first); -1 for dead nodes.
    level : (B, N) int32
        The wave: the longest path, counted in components, from a component without in-edges (0); all nodes
        of a component share it; -1 for dead nodes.
    n_levels : (B,) int32
        Number of waves (0 for a graph without alive nodes).
    lagged : (B, N, N) bool
        Edges inside one component (self-loops excluded): their message is the previous round's. Every other
        edge carries the same round's message from a lower level to a higher one.
    cyclic : (B,) bool
        Some component has two nodes or more.
    order : (B, N) int32
        The alive nodes sorted by (level, component, index), padded with -1.
    """

    component: Array
    level: Array
    n_levels: Array
    lagged: Array
    cyclic: Array
    order: Array


@dataclass(frozen=True)
class TeamScores:
    """Result of :func:`toporoute.ops.team_scores` (computed in float64, returned float32).

    Attributes
    ----------
    mean, var : (B, T) float32
        Mean and population variance of each round's present scores; NaN for a round with none.
    pi : (B, N) float32
        Replicator weights: softmax over the nodes present in the last round of ``eta`` times each node's summed
        excess over the round means; 0 elsewhere (all 0 when nobody is present).
    trend : (B, N) float32
        Least-squares slope of a node's scores against the round over its last ``window`` present rounds; 0
        with fewer than two.
    mean_trend : (B,) float32
        The same for the round means over the last ``window`` rounds that have a present node.
    last : (B, N) float32
        The last round's scores; NaN where not present.
    death : (B, N) bool
        Present in the last round with ``last < death_threshold``.
    delta_mean : (B,) float32
        ``mean[T-1] - mean[T-2]``; NaN when either is missing (or T = 1).
    """

    mean: Array
    var: Array
    pi: Array
    trend: Array
    mean_trend: Array
    last: Array
    death: Array
    delta_mean: Array


def maker(cls: type[_T]) -> Callable[[Sequence[Array]], _T]:
    """A constructor of the result class ``cls`` from a sequence of its fields in order: ``cls(*arrays)``
    without the generated ``__init__``'s ``object.__setattr__`` per field (a third of a microsecond of a
    four-microsecond route). The compiled backend builds one result per call of a microsecond op."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    targets = ", ".join(f"d[{n!r}]" for n in names)
    src = f"def make(arrays):\n    r = new(cls)\n    d = r.__dict__\n    {targets}{',' if len(names) == 1 else ''} = arrays\n    return r\n"
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    exec(src, scope)  # noqa: S102 - a fixed template over the dataclass's own field names
    make: Callable[[Sequence[Array]], _T] = scope["make"]
    make.__qualname__ = f"maker({cls.__name__})"
    return make


routes_of = maker(Routes)
