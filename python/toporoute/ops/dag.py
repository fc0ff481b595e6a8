"""The DAG evolution ops of HiVA (methods/hiva.md §3.3): topology edits (``f_G``) checked one at a time, and
RepairTopology. Validation and batching here; semantics in ``backends/_reference_dag.py`` (the oracle), the
compiled kernels in ``cpp/src/dag_edit.cpp`` and ``cpp/src/dag_repair.cpp``.

Graphs are dense boolean adjacency ``adj[b, src, dst]`` with ``alive[b, n]`` marking the nodes that exist (dead
slots are where new nodes go); ``source`` is the entry agent, ``sink`` the aggregator.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import InvalidArgumentError, ShapeError
from ..types.results import DagEdits, DagRepair
from . import _validate as _v
from ._dispatch import Args, dispatcher
from ._validate import F32, I32, ND

__all__ = ["dag_edit", "dag_repair"]


def _plain_batch(adj: Any, alive: Any, source: Any, sink: Any, max_out: Any) -> bool:
    """The common case, decided with a few comparisons (the compiled ops take microseconds): numpy (B, N, N) /
    (B, N) bool arrays and Python ints in range. Anything else goes through the full checks, which word the
    errors."""
    return (
        _v.plain_graph(adj, alive)
        and type(source) is int
        and type(sink) is int
        and type(max_out) is int
        and 0 <= source < adj.shape[1]
        and 0 <= sink < adj.shape[1]
        and source != sink
        and max_out >= 1
    )


def _ends(source: Any, sink: Any, n: int) -> tuple[int, int]:
    if n < 2:
        raise ShapeError(f"adj must hold at least 2 nodes (a source and a sink); got N = {n}", arg="adj")
    s = _v.integer(source, "source", 0, n - 1)
    t = _v.integer(sink, "sink", 0, n - 1)
    if s == t:
        raise InvalidArgumentError(f"source and sink must differ; got both {s}", arg="sink")
    return s, t


def _edit_args(args: Args) -> Args:
    """The checks of ``dag_edit`` on ``(adj, alive, edits, source, sink, max_out)``."""
    adj, alive, edits, source, sink, max_out = args
    if (
        type(edits) is ND
        and edits.dtype is I32
        and _plain_batch(adj, alive, source, sink, max_out)
        and edits.ndim == 3
        and edits.shape[0] == adj.shape[0]
        and edits.shape[2] == 3
    ):
        return args
    shape = _v.graph(adj, alive)
    _v.edit_rows(edits, shape, "E", 3)
    s, t = _ends(source, sink, shape[-1])
    return adj, alive, edits, s, t, _v.integer(max_out, "max_out", 1)


def _repair_args(args: Args) -> Args:
    """The checks of ``dag_repair`` on its arguments in the op table's order."""
    adj, alive, edge_alpha, edge_beta, source, sink, threshold, min_obs, prior, max_out = args
    if (
        _plain_batch(adj, alive, source, sink, max_out)
        and type(threshold) is float
        and 0.0 <= threshold <= 1.0
        and type(prior) is float
        and 0.0 <= prior < math.inf
        and type(min_obs) in (int, float)
        and 0 <= min_obs < math.inf
        and (
            (edge_alpha is None and edge_beta is None)
            or (
                type(edge_alpha) is ND
                and type(edge_beta) is ND
                and edge_alpha.dtype is F32
                and edge_beta.dtype is F32
                and edge_alpha.shape == adj.shape
                and edge_beta.shape == adj.shape
            )
        )
    ):
        return adj, alive, edge_alpha, edge_beta, source, sink, threshold, float(min_obs), prior, max_out
    shape = _v.graph(adj, alive)
    if (edge_alpha is None) != (edge_beta is None):
        missing = "edge_beta" if edge_beta is None else "edge_alpha"
        raise InvalidArgumentError(
            f"edge_alpha and edge_beta must be given together; got {missing}=None", arg=missing
        )
    for name, x in (("edge_alpha", edge_alpha), ("edge_beta", edge_beta)):
        if x is not None:
            xs = _v.array(x, name, "float32", (len(shape),), "(B, N, N) or (N, N) matching adj")
            _v.same_shape(xs, name, shape, "the shape of adj")
    s, t = _ends(source, sink, shape[-1])
    return (
        adj,
        alive,
        edge_alpha,
        edge_beta,
        s,
        t,
        _v.real(threshold, "threshold", 0.0, 1.0),
        _v.real(min_obs, "min_obs", 0.0),
        _v.real(prior, "prior", 0.0),
        _v.integer(max_out, "max_out", 1),
    )


_dag_edit = dispatcher("dag_edit", _edit_args, DagEdits)
_dag_repair = dispatcher("dag_repair", _repair_args, DagRepair)


def dag_edit(
    adj: Any,
    alive: Any,
    edits: Any,
    *,
    source: int = 0,
    sink: int = 1,
    max_out: int = 5,
    backend: str | None = None,
) -> DagEdits:
    """Apply batches of topology edits, each checked at once; a rejected edit leaves the graph unchanged.

    Each graph's edits run in order, each on the graph the previous ones left. Kinds (``toporoute.ops.EDIT_*``):

    - ``EDIT_ADD_PARALLEL`` (1): ``A->B->C`` becomes ``A->(B, D)->C``. ``arg`` is the sibling B, a successor of
      A, or -1 for A's lowest-index successor that is not the sink. The new node D takes the lowest dead slot,
      gets ``A->D`` and a copy of B's out-edges (``D->sink`` when the sibling is the sink, e.g. when A's only
      successor is the sink: generalist -> {Extractor, Searcher} -> sink).
    - ``EDIT_ADD_SERIAL`` (2): ``A->B->C`` becomes ``A->D->B->C``: D takes over all of A's out-edges
      (``D->sink`` when A had none), then ``A->D``. ``arg`` is ignored.
    - ``EDIT_REMOVE_SUCCESSOR`` (3): removes ``A->arg``, links A to arg's successors (ascending index, skipping
      existing edges, while A's out-degree < max_out) and deletes arg (edges cleared, alive False) when no
      in-edge is left. Never the sink.
    - ``EDIT_CONNECT_TO_AGGREGATOR`` (4): adds ``A->sink``. ``arg`` is ignored.
    - ``EDIT_NO_CHANGE`` (0): accepted, nothing changes; ``EDIT_PADDING`` (-1): skipped (not accepted).

    Rejections (``reason``, names in ``toporoute.ops.EDIT_REASONS``): ``bad_kind``, ``unknown_node`` (node or
    arg outside [0, N) or dead), ``sink`` (the aggregator never edits; its in-edge is never removed),
    ``not_a_successor``, ``out_degree`` (an ADD or CONNECT when A has ``max_out`` successors already),
    ``no_capacity`` (no dead slot for D), ``duplicate_edge`` (``A->sink`` exists), ``cycle`` (a new edge would
    lie on a cycle: "can dst reach src" after the edit) and ``last_path`` (the source reached the sink before a
    REMOVE and would not after). The exact check order: ``backends/_reference_dag.py``.

    Parameters
    ----------
    adj : (B, N, N) or (N, N) bool
        ``adj[b, src, dst]``. No edge may touch a dead node.
    alive : (B, N) or (N,) bool
        The nodes that exist; the source and the sink must be alive.
    edits : (B, E, 3) or (E, 3) int32
        Rows ``(kind, node, arg)``. Values are data, not arguments: bad ones are rejected with a reason.
    source, sink : int in [0, N), distinct
    max_out : int >= 1
        Out-degree cap for adds.
    backend : {"reference", "cpu"}, optional
        ``"cuda"`` raises :class:`~toporoute.errors.BackendUnavailableError` (no GPU kernel: graphs are small).

    Returns
    -------
    DagEdits
        ``adj (B, N, N) bool`` and ``alive (B, N) bool`` (new arrays), ``accepted (B, E) bool``,
        ``reason (B, E) int8`` and ``new_node (B, E) int32`` (-1 when none).

    Raises
    ------
    InvalidArgumentError
        A dead source or sink (on ``alive``), an edge touching a dead node (on ``adj``); shapes, dtypes and
        scalars are named likewise.
    """
    return _dag_edit(backend, (adj, alive, edits, source, sink, max_out))


def dag_repair(
    adj: Any,
    alive: Any,
    edge_alpha: Any = None,
    edge_beta: Any = None,
    *,
    source: int = 0,
    sink: int = 1,
    threshold: float = 0.3,
    min_obs: float = 3,
    prior: float = 1.0,
    max_out: int = 5,
    backend: str | None = None,
) -> DagRepair:
    """RepairTopology (methods/hiva.md §3.3): make each graph a DAG in which the source reaches the sink.

    Steps, in order (exact rules: ``backends/_reference_dag.py``): drop self-loops, edges touching dead nodes,
    edges into the source and out of the sink; break cycles (a depth-first search from the source drops back
    edges); add ``source->sink`` when the source does not reach the sink; cap out-degrees at ``max_out``
    (lowest Beta mean dropped first); drop edges whose Beta mean ``ea / (ea + eb)`` is below ``threshold``
    once observed ``ea + eb - 2 prior >= min_obs`` times; prune live non-source/sink nodes with in- or
    out-degree 0 to a fixpoint. No step ever cuts the last source -> sink path. The result is a fixpoint:
    repairing it again changes nothing.

    Parameters
    ----------
    adj : (B, N, N) or (N, N) bool
        ``adj[b, src, dst]``.
    alive : (B, N) or (N,) bool
        The source and the sink must be alive.
    edge_alpha, edge_beta : same shape as adj, float32, finite and > 0, optional
        Per-edge success Betas (``ops.synergy_update``); both or neither. Without them no edge is dropped for
        low success, and the cap drops the highest-index edges first.
    source, sink : int in [0, N), distinct
    threshold : float in [0, 1]
    min_obs : float >= 0
    prior : float >= 0
        The Betas' prior, subtracted twice from ``ea + eb`` to count observations.
    max_out : int >= 1
    backend : {"reference", "cpu"}, optional
        ``"cuda"`` raises :class:`~toporoute.errors.BackendUnavailableError`.

    Returns
    -------
    DagRepair
        ``adj (B, N, N) bool``, ``alive (B, N) bool`` (new arrays), ``pruned_nodes (B, N) bool``,
        ``pruned_edges (B, N, N) bool`` (input edges removed) and ``added_edges (B, N, N) bool``.
    """
    return _dag_repair(
        backend, (adj, alive, edge_alpha, edge_beta, source, sink, threshold, min_obs, prior, max_out)
    )
