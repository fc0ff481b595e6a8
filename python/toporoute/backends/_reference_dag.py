"""Reference (numpy) DAG evolution ops of HiVA (methods/hiva.md §3.3 ``f_G`` and RepairTopology): the definition
of :func:`toporoute.ops.dag_edit` and :func:`toporoute.ops.dag_repair` and the oracle of the compiled kernels.

Plain per-graph loops, written for reading; the compiled core does the same with bitset rows. Arrays arrive
batched and validated by the facade (shapes, dtypes, scalars); this module checks what needs a pass over the
data (dead source or sink, edges touching dead nodes, non-finite or non-positive edge Betas).

Graph conventions: ``adj[b, src, dst]`` bool, ``alive[b, n]`` marks the nodes that exist, ``source`` is the entry
agent and ``sink`` the aggregator. Reachability ("u reaches v") includes u == v.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError, NonFiniteError, OutOfRangeError
from ..types import dag_codes as c
from ..types.results import DagEdits, DagRepair
from ._reference_graph import reaches
from .samples import DAG_DEFAULTS, Call, Sample, dag_inputs

__all__ = ["check_alive_ends", "check_consistent", "dag_edit", "dag_repair"]


def check_alive_ends(alive: np.ndarray, source: int, sink: int) -> None:
    """The source and the sink must be alive in every graph (first bad graph reported, source first)."""
    for b in range(alive.shape[0]):
        for node, name in ((source, "source"), (sink, "sink")):
            if not alive[b, node]:
                raise InvalidArgumentError(
                    f"alive[{b}, {node}] (the {name}) must be True; got False", arg="alive"
                )


def check_consistent(adj: np.ndarray, alive: np.ndarray, names: tuple[str, str] = ("adj", "alive")) -> None:
    """No edge may touch a dead node (the first such edge in C order is reported, naming ``names[0]``)."""
    bad = adj & ~(alive[:, :, None] & alive[:, None, :])
    if bad.any():
        b, s, d = (int(x) for x in np.argwhere(bad)[0])
        dead = s if not alive[b, s] else d
        g, a = names
        raise InvalidArgumentError(
            f"{g} must have no edge touching a dead node; got {g}[{b}, {s}, {d}] with {a}[{b}, {dead}] False",
            arg=g,
        )


def _edit_one(
    g: np.ndarray, alive: np.ndarray, kind: int, node: int, arg: int, source: int, sink: int, max_out: int
) -> tuple[int, int]:
    """Applies one edit to graph ``g`` / ``alive`` in place when accepted; returns (reason, new node or -1).
    A rejected edit leaves both arrays as they were."""
    N = g.shape[0]
    if kind == c.EDIT_PADDING:
        return c.REASON_PADDING, -1
    if not c.EDIT_NO_CHANGE <= kind <= c.EDIT_CONNECT_TO_AGGREGATOR:
        return c.REASON_BAD_KIND, -1
    if kind == c.EDIT_NO_CHANGE:
        return c.REASON_NO_CHANGE, -1
    if not (0 <= node < N and alive[node]):
        return c.REASON_UNKNOWN_NODE, -1
    if node == sink:
        return c.REASON_SINK, -1
    out_degree = int(g[node].sum())

    if kind in (c.EDIT_ADD_PARALLEL, c.EDIT_ADD_SERIAL):
        sibling = sink
        if kind == c.EDIT_ADD_PARALLEL:
            if arg == -1:
                others = [int(v) for v in np.flatnonzero(g[node]) if v != sink]
                sibling = others[0] if others else sink
            elif not (0 <= arg < N and alive[arg]):
                return c.REASON_UNKNOWN_NODE, -1
            elif not g[node, arg]:
                return c.REASON_NOT_A_SUCCESSOR, -1
            else:
                sibling = arg
        if out_degree >= max_out:
            return c.REASON_OUT_DEGREE, -1
        free = np.flatnonzero(~alive)
        if free.size == 0:
            return c.REASON_NO_CAPACITY, -1
        d = int(free[0])
        h = g.copy()
        if kind == c.EDIT_ADD_PARALLEL:
            # D copies its sibling's out-edges; beside the sink (A's only successor) it feeds the sink
            if sibling == sink:
                h[d, sink] = True
            else:
                h[d] = g[sibling]
        else:
            # D takes over A's out-edges (or feeds the sink when A had none), then A -> D
            if out_degree == 0:
                h[d, sink] = True
            else:
                h[d] = g[node]
            h[node] = False
        h[node, d] = True
        # every new edge touches D, whose only in-edge is A -> D: a new cycle exists iff D reaches A
        if reaches(h, [d], node):
            return c.REASON_CYCLE, -1
        g[:] = h
        alive[d] = True
        return c.REASON_OK, d

    if kind == c.EDIT_REMOVE_SUCCESSOR:
        if not (0 <= arg < N and alive[arg]):
            return c.REASON_UNKNOWN_NODE, -1
        if not g[node, arg]:
            return c.REASON_NOT_A_SUCCESSOR, -1
        if arg == sink:
            return c.REASON_SINK, -1
        had_path = reaches(g, [source], sink)
        h = g.copy()
        h[node, arg] = False
        linked = []
        degree = out_degree - 1
        for y in (int(v) for v in np.flatnonzero(g[arg])):
            if degree >= max_out:
                break
            if y == arg or h[node, y]:
                continue
            h[node, y] = True
            linked.append(y)
            degree += 1
        deleted = arg != source and not h[:, arg].any()
        if deleted:
            h[arg] = False
        if linked and reaches(h, linked, node):
            return c.REASON_CYCLE, -1
        if had_path and not reaches(h, [source], sink):
            return c.REASON_LAST_PATH, -1
        g[:] = h
        if deleted:
            alive[arg] = False
        return c.REASON_OK, -1

    # CONNECT_TO_AGGREGATOR
    if g[node, sink]:
        return c.REASON_DUPLICATE_EDGE, -1
    if out_degree >= max_out:
        return c.REASON_OUT_DEGREE, -1
    h = g.copy()
    h[node, sink] = True
    if reaches(h, [sink], node):
        return c.REASON_CYCLE, -1
    g[:] = h
    return c.REASON_OK, -1


def dag_edit(
    adj: np.ndarray, alive: np.ndarray, edits: np.ndarray, source: int, sink: int, max_out: int
) -> DagEdits:
    """Applies the topology edits ``edits[b, e] = (kind, node, arg)`` of each graph in order, each checked at once.

    Check order of one edit (the first failing check gives the reason; a rejected edit changes nothing):

    1. kind -1: ``padding`` (skipped, not accepted); kind outside -1 .. 4: ``bad_kind``; kind 0
       (NO_CHANGE): accepted with reason ``no_change``, whatever node and arg hold;
    2. ``node`` outside [0, N) or dead: ``unknown_node``; ``node == sink``: ``sink`` (the aggregator never edits);
    3. by kind:

       - ADD_PARALLEL: ``arg`` -1 picks the lowest-index successor of node that is not the sink (none: the sink);
         else ``arg`` dead or outside [0, N): ``unknown_node``, not a successor of node: ``not_a_successor``.
         Then out-degree of node >= max_out: ``out_degree``; no dead slot: ``no_capacity``. The new node D (the
         lowest dead slot) gets ``node -> D`` and a copy of the sibling's out-edges (``D -> sink`` when the
         sibling is the sink). ``cycle`` when D then reaches node.
       - ADD_SERIAL (arg ignored): ``out_degree``, ``no_capacity`` as above; D takes over node's out-edges (or
         gets ``D -> sink`` when node had none), then ``node -> D``. ``cycle`` when D reaches node.
       - REMOVE_SUCCESSOR: ``arg`` dead or outside [0, N): ``unknown_node``; not a successor: ``not_a_successor``;
         the sink: ``sink``. Removes ``node -> arg``, then links node to each successor y of arg in ascending
         index (y != arg, skipping existing edges) while node's out-degree < max_out; arg is deleted (its
         out-edges cleared, alive False) when no in-edge is left and it is not the source. ``cycle`` when a
         linked node reaches node; ``last_path`` when the source reached the sink before and no longer does.
       - CONNECT_TO_AGGREGATOR (arg ignored): ``node -> sink`` exists: ``duplicate_edge``; ``out_degree`` as
         above; ``cycle`` when the sink reaches node.
    """
    check_alive_ends(alive, source, sink)
    check_consistent(adj, alive)
    B, E = edits.shape[:2]
    out_adj = adj.copy()
    out_alive = alive.copy()
    accepted = np.zeros((B, E), dtype=bool)
    reason = np.zeros((B, E), dtype=np.int8)
    new_node = np.full((B, E), -1, dtype=np.int32)
    for b in range(B):
        for e in range(E):
            kind, node, arg = (int(x) for x in edits[b, e])
            r, d = _edit_one(out_adj[b], out_alive[b], kind, node, arg, source, sink, max_out)
            reason[b, e] = r
            accepted[b, e] = r in (c.REASON_OK, c.REASON_NO_CHANGE)
            new_node[b, e] = d
    return DagEdits(out_adj, out_alive, accepted, reason, new_node)


def _check_betas(edge_alpha: np.ndarray, edge_beta: np.ndarray) -> None:
    """Edge Betas must be finite (checked first, alpha then beta) and > 0."""
    for name, x in (("edge_alpha", edge_alpha), ("edge_beta", edge_beta)):
        bad = ~np.isfinite(x)
        if bad.any():
            b, s, d = (int(i) for i in np.argwhere(bad)[0])
            raise NonFiniteError(f"{name} must be finite; got {x[b, s, d]} at [{b}, {s}, {d}]", arg=name)
    for name, x in (("edge_alpha", edge_alpha), ("edge_beta", edge_beta)):
        bad = ~(x > 0)
        if bad.any():
            b, s, d = (int(i) for i in np.argwhere(bad)[0])
            raise OutOfRangeError(f"{name} must be > 0; got {x[b, s, d]} at [{b}, {s}, {d}]", arg=name)


def _break_cycles(g: np.ndarray, alive: np.ndarray, source: int) -> None:
    """Depth-first search from the source, then from each unvisited live node in index order, successors in
    ascending index; every edge into a node on the search stack (a back edge) is dropped."""
    N = g.shape[0]
    state = np.zeros(N, dtype=np.int8)  # 0 unseen, 1 on the stack, 2 finished
    for root in [source] + [n for n in range(N) if alive[n] and n != source]:
        if state[root]:
            continue
        state[root] = 1
        stack = [[root, 0]]  # node, next successor index to scan
        while stack:
            top = stack[-1]
            u, v = top
            while v < N:
                if g[u, v]:
                    if state[v] == 1:
                        g[u, v] = False
                    elif state[v] == 0:
                        break
                v += 1
            if v < N:
                top[1] = v + 1
                state[v] = 1
                stack.append([v, 0])
            else:
                state[u] = 2
                stack.pop()


def _repair_one(
    g: np.ndarray,
    alive: np.ndarray,
    mean: np.ndarray | None,
    prunable: np.ndarray | None,
    source: int,
    sink: int,
    max_out: int,
) -> None:
    N = g.shape[0]
    # 1. consistency: no self-loops, edges only between live nodes, none into the source or out of the sink
    g &= alive[:, None] & alive[None, :]
    np.fill_diagonal(g, False)
    g[:, source] = False
    g[sink, :] = False
    # 2. a DAG (the search starts at the source, so its tree keeps every node the source reached)
    _break_cycles(g, alive, source)
    # 3. the source reaches the sink
    if not reaches(g, [source], sink):
        g[source, sink] = True
    # 4. out-degree cap: drop the lowest-mean edges first (ties: the higher index), never the last path
    for u in range(N):
        targets = [int(v) for v in np.flatnonzero(g[u])]
        if len(targets) <= max_out:
            continue
        if mean is None:
            order = sorted(targets, key=lambda v: -v)
        else:
            order = sorted(targets, key=lambda v: (float(mean[u, v]), -v))
        degree = len(targets)
        for v in order:
            if degree <= max_out:
                break
            g[u, v] = False
            if reaches(g, [source], sink):
                degree -= 1
            else:
                g[u, v] = True
    # 5. low-success edges, in C order, never the last path
    if prunable is not None:
        for u, v in np.argwhere(g & prunable):
            g[u, v] = False
            if not reaches(g, [source], sink):
                g[u, v] = True
    # 6. degree-zero pruning to a fixpoint (such a node is on no source -> sink path)
    changed = True
    while changed:
        changed = False
        for n in range(N):
            if n in (source, sink) or not alive[n]:
                continue
            if not g[n].any() or not g[:, n].any():
                g[n] = False
                g[:, n] = False
                alive[n] = False
                changed = True


def dag_repair(
    adj: np.ndarray,
    alive: np.ndarray,
    edge_alpha: np.ndarray | None,
    edge_beta: np.ndarray | None,
    source: int,
    sink: int,
    threshold: float,
    min_obs: float,
    prior: float,
    max_out: int,
) -> DagRepair:
    """RepairTopology (methods/hiva.md §3.3) of each graph, in this order:

    1. consistency: self-loops, edges touching a dead node, edges into the source and out of the sink dropped;
    2. cycles broken: a depth-first search from the source, then from each unvisited live node in index order,
       successors in ascending index, drops every back edge (its tree keeps whatever the source reached);
    3. when the source does not reach the sink: ``source -> sink`` added;
    4. out-degree cap: a node with more than ``max_out`` out-edges drops them by ascending Beta mean
       ``ea / (ea + eb)`` (float64; without Betas all equal), ties to the higher index first, until it has
       ``max_out``; an edge whose removal would cut the last source -> sink path is kept;
    5. with Betas: each edge with ``ea + eb - 2 prior >= min_obs`` and mean ``< threshold``, in C order, is
       dropped unless that cuts the last source -> sink path;
    6. live nodes other than the source and the sink with in- or out-degree 0 are pruned (edges cleared, alive
       False) until none is left.

    Steps 3 to 6 never cut the last path and never create a degree-zero node that step 6 leaves, so the result
    is a fixpoint: a DAG where every live node lies on a source -> sink path, out-degree <= max_out; repairing
    it again changes nothing.
    """
    check_alive_ends(alive, source, sink)
    mean = prunable = None
    if edge_alpha is not None and edge_beta is not None:
        _check_betas(edge_alpha, edge_beta)
        ea = edge_alpha.astype(np.float64)
        eb = edge_beta.astype(np.float64)
        mean = ea / (ea + eb)
        prunable = (ea + eb - 2.0 * float(prior) >= float(min_obs)) & (mean < float(threshold))
    out_adj = adj.copy()
    out_alive = alive.copy()
    for b in range(adj.shape[0]):
        _repair_one(
            out_adj[b],
            out_alive[b],
            None if mean is None else mean[b],
            None if prunable is None else prunable[b],
            source,
            sink,
            max_out,
        )
    return DagRepair(
        out_adj,
        out_alive,
        alive & ~out_alive,
        adj & ~out_adj,
        out_adj & ~adj,
    )


# -- samples (toporoute.backends.samples) -----------------------------------------------------------------------


def _edit_sample(B: int) -> Call:
    adj, alive, edits, _, _ = dag_inputs(B)
    return (adj, alive, edits), {}


def _repair_sample(B: int) -> Call:
    adj, alive, edits, ea, eb = dag_inputs(B)
    source, sink, *_, max_out = DAG_DEFAULTS
    edited = dag_edit(adj, alive, edits, source, sink, max_out)
    return (edited.adj, edited.alive, ea, eb), {}


SAMPLES = {
    "dag_edit": Sample("B DAGs of N=32 slots, E=8 edits each", _edit_sample),
    "dag_repair": Sample("B DAGs of N=32 slots with edge Betas", _repair_sample),
}
