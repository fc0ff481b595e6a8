"""The team edit projection of TacoMAS-style topology loops (methods/tacomas.md §3 "Validation/apply", §8 A4-A6):
a meta-LLM's proposed births, deaths and edge edits checked against budgets and rules, the accepted ones applied,
the graph repaired so that every node reaches the sink. Validation and batching here; semantics in
``backends/_reference_team.py`` (the oracle), the compiled kernel in ``cpp/src/team_project.cpp``.

Graphs are dense boolean adjacency ``adj[b, src, dst]`` with ``alive[b, n]`` marking the nodes that exist (dead
slots are where new nodes go); cycles are allowed. Codes: :mod:`toporoute.types.team_codes`.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, OutOfRangeError, ShapeError
from ..types.results import TeamProjection
from ..types.team_codes import TEAM_MAX_NODES
from . import _validate as _v
from ._dispatch import Args, dispatcher
from ._validate import BOOL, F32, I32, ND

__all__ = ["team_project"]


_LIMIT = 2**31 - 1  # the budgets and bounds are int32-sized (the core counts in int64: no overflow)
_ARRAYS = (ND, ND, ND, ND, ND)
_DTYPES = (BOOL, BOOL, I32, I32, I32)  # adj, alive, roles, sink, edits


def _plain_option(x: Any, dtype: np.dtype[Any], shape: tuple[int, ...]) -> bool:
    return x is None or (type(x) is ND and x.dtype == dtype and x.shape == shape)


def _plain(
    adj: Any,
    alive: Any,
    roles: Any,
    sink: Any,
    edits: Any,
    opts: tuple[Any, Any, Any, Any],
    ints: tuple[Any, ...],
) -> bool:
    """The common case, decided with a few comparisons (the compiled op takes microseconds): numpy arrays of the
    right dtypes and shapes, a (B,) int32 sink, non-negative Python ints with n_min <= n_max. Anything else goes
    through the full checks, which word the errors. (Tuples compare their items by identity first: the dtype
    singletons make these comparisons cheap.)"""
    if (type(adj), type(alive), type(roles), type(sink), type(edits)) != _ARRAYS or (
        adj.dtype,
        alive.dtype,
        roles.dtype,
        sink.dtype,
        edits.dtype,
    ) != _DTYPES:
        return False
    shape = adj.shape
    es = edits.shape
    if len(shape) != 3 or len(es) != 3:
        return False
    B, N, n2 = shape
    bn = (B, N)
    protected, critical, scores, generation = opts
    budget_pairs, budget_edges, max_removals, max_pure_births, max_pure_deaths, n_min, n_max = ints
    return (
        n2 == N <= TEAM_MAX_NODES
        and es[0] == B
        and es[2] == 4
        and alive.shape == bn
        and roles.shape == bn
        and sink.shape == (B,)
        and (protected is None or _plain_option(protected, BOOL, bn))
        and (
            critical is None
            or (type(critical) is ND and critical.dtype == BOOL and critical.ndim == 2 and len(critical) == B)
        )
        and (scores is None or _plain_option(scores, F32, bn))
        and (generation is None or _plain_option(generation, I32, bn))
        and type(budget_pairs) is int
        and type(budget_edges) is int
        and (max_removals is None or (type(max_removals) is int and 0 <= max_removals <= _LIMIT))
        and type(max_pure_births) is int
        and type(max_pure_deaths) is int
        and type(n_min) is int
        and type(n_max) is int
        and min(budget_pairs, budget_edges, max_pure_births, max_pure_deaths, n_min) >= 0
        and max(budget_pairs, budget_edges, max_pure_births, max_pure_deaths, n_max) <= _LIMIT
        and n_min <= n_max
    )


def _per_node(x: Any, name: str, dtype: str, batch: tuple[int, ...]) -> None:
    """An optional (B, N) / (N,) array of ``dtype`` matching alive."""
    if x is not None:
        layout = "(B, N)" if len(batch) == 2 else "(N,)"
        xs = _v.typed_array(x, name, (dtype,), (len(batch),), f"{layout} matching adj")
        _v.same_shape(xs, name, batch, layout)


def _sink_array(sink: Any, batch: tuple[int, ...]) -> np.ndarray:
    """The (B,) int32 sinks: an integer (every graph; the only form for a single graph) or a (B,) integer array,
    each in [0, N)."""
    n = batch[-1]
    if len(batch) == 1 or isinstance(sink, numbers.Integral):
        return np.full(batch[:-1] or (1,), _v.integer(sink, "sink", 0, n - 1), dtype=np.int32)
    shape = _v.typed_array(sink, "sink", _v.INDEX_DTYPES, (1,), "(B,) matching adj, or an int")
    _v.same_shape(shape, "sink", batch[:1], "(B,)")
    arr = np.asarray(sink)
    bad = np.flatnonzero((arr < 0) | (arr >= n))
    if bad.size:
        i = int(bad[0])
        raise OutOfRangeError(f"sink[{i}] must be in [0, {n}); got {int(arr[i])}", arg="sink")
    return arr.astype(np.int32)


def _project_args(args: Args) -> Args:
    """The checks of ``team_project`` on its arguments in the op table's order; ``sink`` comes back as a (B,)
    int32 array ((1,) for a single graph) and ``max_removals=None`` as ``budget_edges // 2``."""
    adj, alive, roles, sink, edits = args[:5]
    opts = args[5:9]
    ints = args[9:]
    budget_pairs, budget_edges, max_removals, max_pure_births, max_pure_deaths, n_min, n_max = ints
    if _plain(adj, alive, roles, sink, edits, opts, ints):
        if max_removals is None:
            return (*args[:11], budget_edges // 2, *args[12:])
        return args
    shape = _v.square(adj, "adj")
    _v.team_nodes(shape, "adj")
    if shape[-1] < 1:
        raise ShapeError("adj must hold at least 1 node (the sink); got N = 0", arg="adj")
    batch = shape[:-1]
    layout = "(B, N)" if len(batch) == 2 else "(N,)"
    ashape = _v.array(alive, "alive", "bool", (len(batch),), f"{layout} matching adj")
    _v.same_shape(ashape, "alive", batch, layout)
    rshape = _v.typed_array(roles, "roles", ("int32",), (len(batch),), f"{layout} matching adj")
    _v.same_shape(rshape, "roles", batch, layout)
    _v.edit_rows(edits, shape, "P", 4)
    protected, critical, scores, generation = opts
    _per_node(protected, "protected", "bool", batch)
    _per_node(scores, "scores", "float32", batch)
    _per_node(generation, "generation", "int32", batch)
    if critical is not None:
        cs = _v.typed_array(
            critical, "critical", ("bool",), (len(batch),), f"{'(B, R)' if len(batch) == 2 else '(R,)'}"
        )
        if cs[:-1] != batch[:-1]:
            raise ShapeError(f"critical must have shape (B, R) with B of adj; got {cs}", arg="critical")
    sinks = _sink_array(sink, batch)
    pairs = _v.integer(budget_pairs, "budget_pairs", 0, _LIMIT)
    edges = _v.integer(budget_edges, "budget_edges", 0, _LIMIT)
    births = _v.integer(max_pure_births, "max_pure_births", 0, _LIMIT)
    deaths = _v.integer(max_pure_deaths, "max_pure_deaths", 0, _LIMIT)
    low = _v.integer(n_min, "n_min", 0, _LIMIT)
    removals = edges // 2 if max_removals is None else _v.integer(max_removals, "max_removals", 0, _LIMIT)
    high = _v.integer(n_max, "n_max", 0, _LIMIT)
    if high < low:
        raise InvalidArgumentError(f"n_max must be >= n_min = {low}; got {high}", arg="n_max")
    return adj, alive, roles, sinks, edits, *opts, pairs, edges, removals, births, deaths, low, high


_team_project = dispatcher("team_project", _project_args, TeamProjection)


def team_project(
    adj: Any,
    alive: Any,
    roles: Any,
    sink: Any,
    edits: Any,
    *,
    protected: Any = None,
    critical: Any = None,
    scores: Any = None,
    generation: Any = None,
    budget_pairs: int = 2,
    budget_edges: int = 4,
    max_removals: int | None = None,
    max_pure_births: int = 1,
    max_pure_deaths: int = 1,
    n_min: int = 2,
    n_max: int = 20,
    backend: str | None = None,
) -> TeamProjection:
    """Validate a batch of proposed team edits against budgets and rules, apply the accepted ones, repair.

    Each graph's rows run in phases (every phase walks its rows in row order; an accepted row consumes budget, a
    rejected one changes nothing): screening of every row, deaths (REPLACE, DEATH), pure births (BIRTH), then,
    on the graph after births, edge removals and edge adds; finally a repair links isolated nodes to the best
    scorer and every node that does not reach the sink to the sink. Kinds (``toporoute.ops.TEAM_*``):

    - ``TEAM_REPLACE`` (0): ``a`` dies and a new node of role ``role`` takes the lowest fresh slot (not alive in
      the input, not taken this step), inheriting ``a``'s in- and out-edges.
    - ``TEAM_BIRTH`` (1): a new node of role ``role`` with ``a -> child`` and ``child -> sink``; ``a`` = -1 picks
      the best scorer among the surviving nodes other than the sink.
    - ``TEAM_DEATH`` (2): ``a`` dies.
    - ``TEAM_EDGE_ADD`` (3) / ``TEAM_EDGE_REMOVE`` (4): the edge ``a -> b``.
    - ``TEAM_PADDING`` (-1): skipped.

    Node references are slots ``0 .. N-1`` or, in edge rows, placeholders ``-2 - i`` for the node born by row
    ``i`` (:func:`toporoute.types.team_codes.placeholder`). Reasons (names in ``toporoute.ops.TEAM_REASONS``):
    ``padding``, ``bad_kind``, ``unknown_node``, ``placeholder``, ``self_loop``, ``bad_role``, ``sink``,
    ``protected``, ``duplicate``, ``budget_nodes``, ``budget_pure``, ``critical_role``, ``min_nodes``,
    ``max_nodes``, ``no_capacity``, ``dead_node``, ``edge_missing``, ``conflict``, ``edge_exists``,
    ``budget_edges``. The exact check order: ``backends/_reference_team.py``.

    Parameters
    ----------
    adj : (B, N, N) or (N, N) bool
        ``adj[b, src, dst]``, N <= 64. No self-loop, no edge touching a dead node. Cycles are allowed.
    alive : (B, N) or (N,) bool
        The nodes that exist.
    roles : (B, N) or (N,) int32
        Role ids, >= 0 for alive nodes (dead slots are ignored).
    sink : (B,) int array, or int
        The answering node of each graph (an int for a single graph, or for every graph); must be alive. It never
        dies.
    edits : (B, P, 4) or (P, 4) int32
        Rows ``(kind, a, b, role)``. Values are data, not arguments: bad ones are rejected with a reason.
    protected : (B, N) or (N,) bool, optional
        Nodes that may not die (the sink never does).
    critical : (B, R) or (R,) bool, optional
        Critical role ids ``0 .. R-1``: the last alive agent of such a role may not die unless replaced by the
        same role. None: no critical role.
    scores : (B, N) or (N,) float32, optional
        The nodes' scores (finite where alive), for the best scorer. None: zeros (the lowest index wins).
    generation : (B, N) or (N,) int32, optional
        Slot generations in [0, 2**31 - 2]; a child's slot gets + 1. None: zeros.
    budget_pairs : int in [0, 2**31 - 1]
        Births and deaths per step (each at most this many; a REPLACE counts one of each).
    budget_edges : int in [0, 2**31 - 1]
        Accepted edge edits (removals + adds) per step; inherited and repair edges do not count.
    max_removals : int in [0, 2**31 - 1], optional
        Accepted removals per step; None: ``budget_edges // 2``.
    max_pure_births, max_pure_deaths : int in [0, 2**31 - 1]
    n_min, n_max : int, 0 <= n_min <= n_max <= 2**31 - 1
        A pure death never leaves fewer than n_min alive, a pure birth never more than n_max.
    backend : {"reference", "cpu"}, optional
        ``"cuda"`` raises :class:`~toporoute.errors.BackendUnavailableError` (no GPU kernel: graphs are small).

    Returns
    -------
    TeamProjection
        ``adj (B, N, N) bool``, ``alive (B, N) bool``, ``roles (B, N) int32`` (-1 dead), ``generation (B, N)
        int32`` (new arrays), ``accepted (B, P) bool``, ``reason (B, P) int8``, ``new_node (B, P) int32`` (-1
        when none), ``inherited (B, N, N) bool`` and ``repaired (B, N, N) bool``.

    Raises
    ------
    InvalidArgumentError
        A dead sink (on ``sink``), a self-loop or an edge touching a dead node (on ``adj``), a negative role of an
        alive node (on ``roles``), non-finite scores of alive nodes (on ``scores``); shapes, dtypes and scalars are
        named likewise.
    """
    return _team_project(
        backend,
        (
            adj, alive, roles, sink, edits, protected, critical, scores, generation, budget_pairs, budget_edges,
            max_removals, max_pure_births, max_pure_deaths, n_min, n_max,
        ),
    )  # fmt: skip
