"""Round graphs of the worker loop (DyTopo and its baselines): the fixed and random baselines' topologies, and
sigma plus inboxes for any adjacency (pure functions over numpy arrays; graphs are ``adj[src, dst]`` as
everywhere in toporoute)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ... import ops
from ...errors import InvalidArgumentError
from ...trace.schema import Graph

__all__ = ["FIXED_TOPOLOGIES", "RoundGraph", "fixed_adjacency", "random_adjacency", "round_graph"]

FIXED_TOPOLOGIES = ("chain", "star", "full")


def fixed_adjacency(kind: str, n: int) -> np.ndarray:
    """A fixed topology over ``n`` agents in roster order, ``(n, n)`` bool ``adj[src, dst]``.

    ``chain``: ``i -> i+1``; ``star``: agent 0 is the hub, ``0 -> i`` and ``i -> 0``; ``full``: every ordered
    pair ``i != j``.
    """
    if kind not in FIXED_TOPOLOGIES:
        raise InvalidArgumentError(f"kind must be one of {FIXED_TOPOLOGIES}; got {kind!r}", "kind")
    adj = np.zeros((n, n), dtype=bool)
    if kind == "chain":
        idx = np.arange(n - 1)
        adj[idx, idx + 1] = True
    elif kind == "star":
        adj[0, 1:] = True
        adj[1:, 0] = True
    else:
        adj[:] = True
        np.fill_diagonal(adj, False)
    return adj


def random_adjacency(n: int, m: int, k_in: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` distinct off-diagonal edges drawn uniformly, each recipient keeping at most ``k_in`` providers
    (``k_in <= 0``: no cap). ``m`` is clipped to what the cap allows."""
    if m < 0:
        raise InvalidArgumentError(f"m must be >= 0; got {m}", "m")
    pairs = [(s, d) for s in range(n) for d in range(n) if s != d]
    adj = np.zeros((n, n), dtype=bool)
    indeg = np.zeros(n, dtype=np.int64)
    placed = 0
    for p in rng.permutation(len(pairs)):
        if placed >= m:
            break
        s, d = pairs[p]
        if k_in > 0 and indeg[d] >= k_in:
            continue
        adj[s, d] = True
        indeg[d] += 1
        placed += 1
    return adj


@dataclass(frozen=True)
class RoundGraph:
    """One round's graph with its aggregation order and delivery order.

    ``adjacency (N, N) bool``; ``scores (N, N) float32`` or None (unscored topologies); ``order``: sigma, agent
    indices; ``levels``: longest-path layer per agent; ``removed``: back edges ``(src, dst)``; ``inbox[i]``: the
    providers of ``i`` in delivery order.
    """

    adjacency: np.ndarray
    scores: np.ndarray | None
    order: list[int]
    levels: list[int]
    removed: list[tuple[int, int]]
    is_dag: bool
    inbox: list[list[int]]

    @property
    def edges(self) -> list[tuple[int, int]]:
        return [(int(s), int(d)) for s, d in zip(*np.nonzero(self.adjacency))]

    def trace_block(self, agents: Sequence[str], roles: Sequence[str]) -> Graph:
        """The round record's graph block of this graph, its nodes named ``agents`` with ``roles``."""
        return Graph.build(
            agents,
            roles,
            self.edges,
            order=self.order,
            levels=self.levels,
            removed=self.removed,
            is_dag=self.is_dag,
            inbox=self.inbox,
            scores=self.scores,
        )


def round_graph(
    adjacency: np.ndarray, scores: np.ndarray | None = None, *, inbox_order: str = "relevance"
) -> RoundGraph:
    """Sigma (greedy order, ties to the lowest index) from ``ops.toposort`` and each recipient's inbox.

    ``inbox_order="relevance"`` sorts a recipient's providers by descending score, ties by position in sigma
    then index (spec 8.3); ``"sigma"`` (or no scores) sorts them by position in sigma.
    """
    if inbox_order not in ("relevance", "sigma"):
        raise InvalidArgumentError(
            f"inbox_order must be 'relevance' or 'sigma'; got {inbox_order!r}", "inbox_order"
        )
    adj = np.asarray(adjacency, dtype=bool)
    n = adj.shape[0]
    o = ops.toposort(adj)
    order = [int(i) for i in o.order]
    pos = {a: p for p, a in enumerate(order)}
    inbox = []
    for i in range(n):
        providers = [int(j) for j in np.nonzero(adj[:, i])[0]]
        if scores is not None and inbox_order == "relevance":
            providers.sort(key=lambda j: (-float(scores[j, i]), pos[j], j))
        else:
            providers.sort(key=lambda j: (pos[j], j))
        inbox.append(providers)
    removed = [(int(s), int(d)) for s, d in zip(*np.nonzero(o.removed))]
    return RoundGraph(adj, scores, order, [int(x) for x in o.level], removed, bool(o.is_dag), inbox)
