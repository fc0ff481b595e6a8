"""Agent Q-Mix: communication actions -> the round graph (phi) -> execution waves (spec §2.2-2.5). Pure functions.

Actions (index order of the paper and the original code): 0 solo_process, 1 broadcast_all, 2 selective_query,
3 aggregate_refine, 4 execute_verify, 5 debate_check. ``adj[src, dst]`` (row = sender).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ... import ops

__all__ = ["ACTIONS", "Schedule", "actions_to_graph", "schedule"]

ACTIONS = (
    "solo_process",
    "broadcast_all",
    "selective_query",
    "aggregate_refine",
    "execute_verify",
    "debate_check",
)


def actions_to_graph(actions: Sequence[int] | np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """phi(u): the round graph of a joint action (:func:`toporoute.ops.qmix_graph`), and its debate pairs.

    Agents are visited in index order, and inside an action partners in increasing order. An edge ``s -> d``
    is accepted unless it is a self-loop, a duplicate, or ``s`` is already reachable from ``d`` (the greedy
    acyclicity guard: the lower index wins the direction). ``debate_check`` tests only ``d -> ... -> s`` and
    then adds both directions (a deliberate 2-cycle; later edges that would close a longer cycle through the
    pair are refused by the guard).

    Returns
    -------
    adj : (n, n) bool
    debates : list of (i, partner) pairs whose 2-cycle was added, in the order they were added.
    """
    graph = ops.qmix_graph(np.asarray(actions, dtype=np.int64).reshape(-1))
    debates = [(i, int(p)) for i, p in enumerate(graph.debate) if p >= 0]
    return graph.adj, debates


@dataclass(frozen=True)
class Schedule:
    """How one round runs.

    Attributes
    ----------
    waves : list of lists of agent indices
        Run in this order; the agents of a wave run concurrently.
    inbound : list of lists
        ``inbound[i]``: the agents whose output of this round agent i reads (its in-neighbours in the executed
        graph), in increasing index order.
    removed : list of (src, dst)
        Edges of the round graph that deliver nothing this round: the debate tie-break (the lower index of a
        pair runs first, so its partner's edge into it is dropped), and any edge ``ops.toposort`` had to break.
    order : list of int
        The execution order (``ops.toposort``).
    skipped : list of int
        Agents that do not run this round (only with ``legacy_repo_exec``).
    """

    waves: list[list[int]]
    inbound: list[list[int]]
    removed: list[tuple[int, int]]
    order: list[int]
    skipped: list[int]


def schedule(
    adj: np.ndarray, debates: Sequence[tuple[int, int]], *, legacy_repo_exec: bool = False
) -> Schedule:
    """Execution waves of a round graph (spec §2.4): Kahn levels after the debate tie-break.

    With ``legacy_repo_exec`` it reproduces the original code's scheduler bug (§2.5): only agents with no
    incoming edge run, all in one wave and with no message from anyone; the others are skipped.
    """
    n = len(adj)
    if legacy_repo_exec:
        run = [i for i in range(n) if not adj[:, i].any()]
        return Schedule(
            [run] if run else [], [[] for _ in range(n)], [], run, [i for i in range(n) if i not in run]
        )
    executed = adj.copy()
    removed: list[tuple[int, int]] = []
    for i, p in debates:
        lo, hi = min(i, p), max(i, p)
        if executed[hi, lo]:
            executed[hi, lo] = False
            removed.append((hi, lo))
    order = ops.toposort(executed)
    for s, d in zip(*np.nonzero(order.removed)):
        executed[s, d] = False
        removed.append((int(s), int(d)))
    levels = [int(v) for v in order.level]
    waves = [[i for i in range(n) if levels[i] == lv] for lv in range(max(levels, default=-1) + 1)]
    inbound = [[int(j) for j in np.flatnonzero(executed[:, i])] for i in range(n)]
    return Schedule(waves, inbound, removed, [int(v) for v in order.order], [])
