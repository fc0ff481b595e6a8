"""Team graph ops over directed graphs with cycles: execution waves (``team_schedule``), statistics of judged
contributions (``team_scores``) and the topology distance between two graphs (``topology_distance``). (The module
is ``schedule``, not ``team_schedule``: ``toporoute.ops.team_schedule`` is the op.)
Validation and batching here; semantics in ``backends/_reference_schedule.py`` (the oracle), the compiled
kernels in ``cpp/src/team_schedule.cpp``.

Graphs are dense boolean adjacency ``adj[b, src, dst]`` (row = sender) with ``alive[b, n]`` marking the nodes
that exist, at most 64 nodes (one 64-bit word per adjacency row in the core).
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import ShapeError
from ..types.results import TeamSchedule, TeamScores
from ..types.team_codes import TEAM_MAX_NODES
from . import _validate as _v
from ._dispatch import Args, dispatcher
from ._validate import BOOL, F32, I32, ND

__all__ = ["team_schedule", "team_scores", "topology_distance"]


def _plain_graph(adj: Any, alive: Any) -> bool:
    """numpy (B, N, N) / (B, N) bool arrays with N <= 64, decided with a few comparisons."""
    return _v.plain_graph(adj, alive) and adj.shape[1] <= TEAM_MAX_NODES


def team_schedule(adj: Any, alive: Any, *, backend: str | None = None) -> TeamSchedule:
    """Execution waves of graphs with cycles (methods/tacomas.md §8 A2).

    Strongly connected components run as one unit: messages along an edge inside a component (a cycle, a
    bidirectional pair) are the previous round's (``lagged``); every other edge goes from a lower ``level``
    to a higher one and carries the same round's message. The nodes of one level are independent: one wave of
    concurrent calls. Self-loops are ignored.

    Parameters
    ----------
    adj : (B, N, N) or (N, N) bool
        ``adj[b, src, dst]``, N <= 64. No edge may touch a dead node.
    alive : (B, N) or (N,) bool
    backend : {"reference", "cpu"}, optional
        ``"cuda"`` raises :class:`~toporoute.errors.BackendUnavailableError` (no GPU kernel: graphs are small).

    Returns
    -------
    TeamSchedule
        ``component (B, N) int32`` (numbered in a topological order of the condensation, among ready
        components the one holding the lowest node index first; -1 dead), ``level (B, N) int32`` (longest
        path counted in components from a component without in-edges; -1 dead), ``n_levels (B,) int32``,
        ``lagged (B, N, N) bool``, ``cyclic (B,) bool`` (a component of two nodes or more) and
        ``order (B, N) int32`` (alive nodes by (level, component, index), padded with -1).

    Raises
    ------
    InvalidArgumentError
        An edge touching a dead node (on ``adj``); shapes and dtypes are named likewise (N > 64: ShapeError).
    """
    return _team_schedule(backend, (adj, alive))


def team_scores(
    history: Any,
    present: Any,
    *,
    eta: float = 1.0,
    window: int = 3,
    death_threshold: float = 0.2,
    backend: str | None = None,
) -> TeamScores:
    """Statistics of the judged contributions of a team over rounds (methods/tacomas.md §4 Eq 2 / Eq 12, §8 A10).

    With ``m_t`` the mean of round t's present scores, each node's log-weight is ``eta`` times the sum of its
    excess ``c_v,t - m_t`` over the rounds where it is present (a newborn starts at the mean), and ``pi`` is
    the softmax of the log-weights over the nodes present in the last round: starting from uniform weights,
    the normalised replicator update of Eq 12 applied every round. Computed in float64, returned float32;
    the compiled kernel sums in the reference's order (``mean``, ``var``, ``trend``, ``mean_trend``,
    ``delta_mean`` equal; ``pi`` within 1 float32 ulp, its ``exp`` being libm's).

    Parameters
    ----------
    history : (B, T, N) or (T, N) float32
        ``history[b, t, v]``: node v's judged score in round t, in [0, 1] where present, anything (NaN
        included) where not. T >= 1.
    present : (B, T, N) or (T, N) bool
        The node existed and was scored in that round.
    eta : float > 0
        Replicator step size (the spec's η = 1).
    window : int >= 2
        Rounds of the trend slopes.
    death_threshold : float in [0, 1]
        A node present in the last round with a score below it is a death candidate.
    backend : {"reference", "cpu"}, optional
        ``"cuda"`` raises :class:`~toporoute.errors.BackendUnavailableError`.

    Returns
    -------
    TeamScores
        ``mean (B, T)``, ``var (B, T)`` (population; NaN for a round with nobody present), ``pi (B, N)``,
        ``trend (B, N)`` (slope over a node's last ``window`` present rounds; 0 with fewer than two),
        ``mean_trend (B,)``, ``last (B, N)`` (NaN where absent), all float32; ``death (B, N) bool``;
        ``delta_mean (B,) float32`` (``mean[T-1] - mean[T-2]``, NaN when either is missing).

    Raises
    ------
    InvalidArgumentError
        A present score outside [0, 1] or not finite (on ``history``); shapes, dtypes and scalars likewise.
    """
    return _team_scores(backend, (history, present, eta, window, death_threshold))


def _generation(gen: Any, name: str, batch: tuple[int, ...], alive_name: str) -> None:
    if gen is None:
        return
    gs = _v.typed_array(gen, name, ("int32",), (len(batch),), f"(B, N) or (N,) matching {alive_name}")
    _v.same_shape(gs, name, batch, f"the shape of {alive_name}")


def _schedule_args(args: Args) -> Args:
    """The checks of ``team_schedule`` on ``(adj, alive)``."""
    if not _plain_graph(*args):
        _v.team_nodes(_v.graph(*args), "adj")
    return args


def _scores_args(args: Args) -> Args:
    """The checks of ``team_scores`` on ``(history, present, eta, window, death_threshold)``; a window longer
    than the history comes back shortened (it sees every round either way)."""
    history, present, eta, window, death_threshold = args
    if (
        type(history) is ND
        and type(present) is ND
        and history.dtype is F32
        and present.dtype is BOOL
        and history.ndim == 3
        and history.shape == present.shape
        and history.shape[1] >= 1
        and type(eta) is float
        and 0.0 < eta < math.inf
        and type(window) is int
        and 2 <= window <= history.shape[1] + 2
        and type(death_threshold) is float
        and 0.0 <= death_threshold <= 1.0
    ):
        return args
    hs = _v.array(history, "history", "float32", (2, 3), "(B, T, N) or (T, N)")
    ps = _v.array(present, "present", "bool", (len(hs),), "(B, T, N) or (T, N) matching history")
    _v.same_shape(ps, "present", hs, "the shape of history")
    if hs[-2] < 1:
        raise ShapeError(f"history must hold at least one round (T >= 1); got shape {hs}", arg="history")
    return (
        history,
        present,
        _v.real(eta, "eta", 0.0, open_lo=True),
        min(_v.integer(window, "window", 2), max(hs[-2], 2)),
        _v.real(death_threshold, "death_threshold", 0.0, 1.0),
    )


def _distance_args(args: Args) -> Args:
    """The checks of ``topology_distance`` on ``(adj_a, alive_a, adj_b, alive_b, gen_a, gen_b)``."""
    adj_a, alive_a, adj_b, alive_b, gen_a, gen_b = args
    if (
        _plain_graph(adj_a, alive_a)
        and type(adj_b) is ND
        and type(alive_b) is ND
        and adj_b.dtype is BOOL
        and alive_b.dtype is BOOL
        and adj_b.shape == adj_a.shape
        and alive_b.shape == alive_a.shape
        and (gen_a is None or (type(gen_a) is ND and gen_a.dtype is I32 and gen_a.shape == alive_a.shape))
        and (gen_b is None or (type(gen_b) is ND and gen_b.dtype is I32 and gen_b.shape == alive_a.shape))
    ):
        return args
    shape = _v.graph(adj_a, alive_a, "adj_a", "alive_a")
    _v.team_nodes(shape, "adj_a")
    shape_b = _v.graph(adj_b, alive_b, "adj_b", "alive_b")
    _v.same_shape(shape_b, "adj_b", shape, "the shape of adj_a")
    _generation(gen_a, "gen_a", shape[:-1], "alive_a")
    _generation(gen_b, "gen_b", shape[:-1], "alive_b")
    return args


_team_schedule = dispatcher("team_schedule", _schedule_args, TeamSchedule)
_team_scores = dispatcher("team_scores", _scores_args, TeamScores)
_topology_distance = dispatcher("topology_distance", _distance_args, object, single=lambda out: int(out[0]))


def topology_distance(
    adj_a: Any,
    alive_a: Any,
    adj_b: Any,
    alive_b: Any,
    *,
    gen_a: Any = None,
    gen_b: Any = None,
    backend: str | None = None,
) -> Any:
    """Topology distance ``|V xor V'| + |E xor E'|`` between two graphs on the same slots (methods/tacomas.md
    §4 Eq 16's ``d``, between rounds).

    A node is its (slot, generation): a slot alive in one graph only counts 1; alive in both with different
    generations it counts 2 (one node removed, one added). An edge counts 1 when present in one graph only,
    2 when present in both but an endpoint's identity differs; self-loops count like any edge.

    Parameters
    ----------
    adj_a, adj_b : (B, N, N) or (N, N) bool, the same shape
        ``adj[b, src, dst]``, N <= 64. No edge may touch a dead node.
    alive_a, alive_b : (B, N) or (N,) bool
    gen_a, gen_b : (B, N) or (N,) int32, optional
        Generation of each slot's node (None = zeros); read only where the slot is alive in both graphs.
    backend : {"reference", "cpu"}, optional
        ``"cuda"`` raises :class:`~toporoute.errors.BackendUnavailableError`.

    Returns
    -------
    (B,) int32 array, or an int for single graphs
    """
    return _topology_distance(backend, (adj_a, alive_a, adj_b, alive_b, gen_a, gen_b))
