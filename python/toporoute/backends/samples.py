"""Sample inputs of the core ops: what the numpy reference and every backend are run on together.

Each op's family module in the reference (:mod:`toporoute.backends.reference` and its ``_reference_*`` modules)
declares its op's :class:`Sample` beside the op's reference function, from the builders here. From them
``toporoute bench`` times an op on every backend (checking each result against the reference) and the tests'
backend grid checks every backend against the reference on them: a new op is timed and checked with its sample,
and no line elsewhere.

Every builder is a pure function of its sizes and a seed. Shapes follow :mod:`toporoute.ops` (``adj[b, src,
dst]``); the builders mimic what the methods feed the ops: DyTopo's need/offer embeddings, HiVA's DAGs and Beta
parameters, TacoMAS's teams with cycles and meta edits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..types import team_codes as tc

__all__ = [
    "DAG_DEFAULTS",
    "TEAM",
    "Call",
    "Sample",
    "bandit_inputs",
    "dag_inputs",
    "random_dags",
    "route_inputs",
    "team_graph_inputs",
    "team_project_inputs",
]


Call = tuple[tuple[Any, ...], dict[str, Any]]
"""An op's call: ``(args, kwargs)``, the call being ``op(*args, **kwargs)``."""


@dataclass(frozen=True)
class Sample:
    """Sample inputs of one op.

    Attributes
    ----------
    meaning : str
        What the batch size ``B`` counts, with the fixed sizes (``toporoute bench`` prints it).
    make : callable
        ``make(B)`` gives ``(args, kwargs)``: the op's call on a batch of ``B`` is ``op(*args, **kwargs)``.
    """

    meaning: str
    make: Callable[[int], Call]


DAG_DEFAULTS = (0, 1, 0.3, 3.0, 1.0, 5)
"""``source, sink, threshold, min_obs, prior, max_out`` of the DAG samples' repair: ``toporoute.ops.dag_repair``'s
defaults (HiVA's), which the reference's kernels take positionally."""

TEAM = "graphs of N=32 agent slots"
"""What the batch of the TacoMAS team ops' samples counts."""


def route_inputs(B: int, N: int, D: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Queries and keys, each ``(B, N, D)`` float32 standard normal."""
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((B, N, D), dtype=np.float32),
        rng.standard_normal((B, N, D), dtype=np.float32),
    )


def random_dags(B: int, N: int, p: float = 0.3, seed: int = 0) -> np.ndarray:
    """``(B, N, N)`` bool DAGs: edge probability ``p`` in one random topological order (shared by the batch)."""
    rng = np.random.default_rng(seed)
    adj = np.triu(rng.random((B, N, N)) < p, 1)
    perm = rng.permutation(N)
    return np.ascontiguousarray(adj[:, perm][:, :, perm])


def bandit_inputs(B: int, N: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HiVA's bandit state: ``B`` random DAGs of ``N`` nodes (:func:`random_dags`, p = 0.3) and ``(B, N)``
    float32 Beta parameters as a run holds them (prior 1 plus accumulated rewards)."""
    rng = np.random.default_rng(seed)
    adj = np.triu(rng.random((B, N, N)) < 0.3, 1)
    perm = rng.permutation(N)
    adj = np.ascontiguousarray(adj[:, perm][:, :, perm])
    alpha = rng.uniform(1.0, 12.0, (B, N)).astype(np.float32)
    beta = rng.uniform(1.0, 12.0, (B, N)).astype(np.float32)
    return adj, alpha, beta


def dag_inputs(B: int, N: int = 32, E: int = 8, seed: int = 0) -> tuple[np.ndarray, ...]:
    """HiVA's DAG evolution inputs: ``(adj, alive, edits, edge_alpha, edge_beta)``, repaired graphs (a DAG from
    the source 0 to the aggregator 1, out-degree <= 5) about half full, ``(B, E, 3)`` int32 edits of every kind
    on live nodes with a few padding and bad rows, and ``(B, N, N)`` float32 edge Betas (most edges succeed,
    some fail often enough to be pruned)."""
    from ._reference_dag import dag_repair  # the reference imports this module

    rng = np.random.default_rng(seed)
    alive = rng.random((B, N)) < 0.5
    alive[:, :2] = True
    rank = np.arange(N)
    rank[1] = N  # node order 0, 2, 3, ..., N - 1, 1: the source first, the sink last
    dense = rng.random((B, N, N)) < 0.25
    dense[:, 0, :] = rng.random((B, N)) < 0.3  # the source fans out to a few agents
    adj = dense & (rank[:, None] < rank[None, :]) & alive[:, :, None] & alive[:, None, :]
    ea = rng.uniform(1.0, 8.0, (B, N, N)).astype(np.float32)
    eb = rng.uniform(1.0, 4.0, (B, N, N)).astype(np.float32)
    eb[rng.random((B, N, N)) < 0.05] = 20.0
    start = dag_repair(adj, alive, ea, eb, *DAG_DEFAULTS)
    live = [np.flatnonzero(a) for a in start.alive]
    edits = np.empty((B, E, 3), np.int32)
    for b in range(B):
        edits[b, :, 0] = rng.choice([-1, 0, 1, 1, 2, 3, 3, 4, 7], E)
        edits[b, :, 1] = rng.choice(live[b], E)
        edits[b, :, 2] = np.where(rng.random(E) < 0.3, -1, rng.choice(live[b], E))
    return start.adj, start.alive, edits, ea, eb


def _team_node(rng: np.random.Generator, others: np.ndarray, N: int) -> int:
    """A live agent other than the sink, or now and then an id the meta-LLM made up."""
    return int(rng.choice(others)) if rng.random() < 0.9 else int(rng.integers(-1, N + 2))


def team_project_inputs(B: int, N: int = 32, P: int = 8, seed: int = 0) -> tuple[np.ndarray, ...]:
    """A TacoMAS slow step: ``(adj, alive, roles, sink, edits, protected, critical, scores, generation)``.

    Teams of 5 to 12 agents on ``N`` slots (cycles and bidirectional pairs allowed, the sink 0 protected) and a
    meta output of ``P`` rows per graph: a replacement, a birth, a death, edge removals and adds (some through
    placeholders of the newborns), with the usual share of bad rows (unknown ids, the sink's death, repeats,
    padding)."""
    sink_id = 0
    rng = np.random.default_rng(seed)
    alive = np.zeros((B, N), dtype=bool)
    edits = np.full((B, P, 4), tc.TEAM_PADDING, dtype=np.int32)
    for b in range(B):
        size = int(rng.integers(5, 13))
        alive[b, sink_id] = True
        alive[b, rng.choice(np.arange(1, N), size - 1, replace=False)] = True
        live = np.flatnonzero(alive[b])
        others = live[live != sink_id]

        def node(others: np.ndarray = others) -> int:
            return _team_node(rng, others, N)

        rows = [
            (tc.TEAM_REPLACE, node(), 0, int(rng.integers(0, 8))),
            (tc.TEAM_BIRTH, -1 if rng.random() < 0.5 else node(), 0, int(rng.integers(0, 8))),
            (tc.TEAM_DEATH, node() if rng.random() < 0.8 else sink_id, 0, 0),
            (tc.TEAM_EDGE_REMOVE, node(), node(), 0),
            (tc.TEAM_EDGE_ADD, tc.placeholder(0), node(), 0),
            (tc.TEAM_EDGE_ADD, node(), tc.placeholder(1), 0),
            (tc.TEAM_EDGE_ADD, node(), node(), 0),
            (int(rng.choice([tc.TEAM_PADDING, tc.TEAM_EDGE_ADD, tc.TEAM_REPLACE])), node(), node(), 1),
        ][:P]
        rows += [(tc.TEAM_PADDING, 0, 0, 0)] * (P - len(rows))
        edits[b] = np.array(rows, dtype=np.int32)[rng.permutation(P)] if rng.random() < 0.3 else rows
    adj = rng.random((B, N, N)) < 0.3
    adj &= alive[:, :, None] & alive[:, None, :] & ~np.eye(N, dtype=bool)[None]
    roles = np.where(alive, rng.integers(0, 5, (B, N)), -1).astype(np.int32)
    sink = np.full(B, sink_id, dtype=np.int32)
    protected = np.zeros((B, N), dtype=bool)
    protected[:, sink_id] = True
    critical = np.zeros((B, 5), dtype=bool)
    critical[:, 2] = True  # e.g. the verifier
    scores = rng.random((B, N)).astype(np.float32)
    generation = np.zeros((B, N), dtype=np.int32)
    return adj, alive, roles, sink, edits, protected, critical, scores, generation


def team_graph_inputs(B: int, N: int = 32, T: int = 10, seed: int = 0) -> tuple[np.ndarray, ...]:
    """TacoMAS's team graphs over rounds: ``(adj, alive, adj_next, gen, gen_next, history, present)``.

    About 20 live agents of ``N`` slots, random directed edges with cycles and bidirectional pairs (about 2.5
    out-edges per agent), the next round a few edge flips away with a replacement (a new generation) now and
    then, and ``(B, T, N)`` float32 judged scores (NaN where the agent was absent)."""
    rng = np.random.default_rng(seed)
    alive = rng.random((B, N)) < 20 / N
    adj = rng.random((B, N, N)) < 2.5 / 20
    adj &= alive[:, :, None] & alive[:, None, :] & ~np.eye(N, dtype=bool)[None]
    flips = (rng.random((B, N, N)) < 0.01) & alive[:, :, None] & alive[:, None, :]
    adj_next = adj ^ (flips & ~np.eye(N, dtype=bool)[None])
    gen = np.zeros((B, N), np.int32)
    gen_next = gen + ((rng.random((B, N)) < 0.03) & alive).astype(np.int32)
    history = (rng.integers(0, 11, (B, T, N)) / 10).astype(np.float32)
    born = rng.integers(0, T, (B, 1, N)) * (rng.random((B, 1, N)) < 0.2)
    present = (np.arange(T)[None, :, None] >= born) & alive[:, None, :]
    history[~present] = np.nan
    return adj, alive, adj_next, gen, gen_next, history, present
