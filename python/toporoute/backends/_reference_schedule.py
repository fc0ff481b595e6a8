"""Reference (numpy) team ops: execution waves of a graph with cycles, score statistics of judged contributions
and the topology distance between two graphs. The definition of :func:`toporoute.ops.team_schedule`,
:func:`toporoute.ops.team_scores` and :func:`toporoute.ops.topology_distance`, and the oracle of the compiled
kernels (``cpp/src/team_schedule.cpp``).

Written for reading: the schedule is a per-graph Tarjan plus Kahn over the condensation, the statistics loop
over rounds and nodes in a fixed order. Arrays arrive batched and validated by the facade (shapes, dtypes,
scalars); this module checks what needs a pass over the data (edges touching dead nodes, scores of present
nodes outside [0, 1]).

Floating-point policy of ``team_scores``: every statistic is computed in float64 with sums taken one term at a
time in ascending node index (means, variances) or ascending round (log-weights, slopes), then rounded to
float32 once. The compiled kernel adds in the same order, so its outputs equal these exactly, except ``pi``,
whose ``exp`` may differ by one float64 ulp between libm and numpy: ``pi`` agrees to 1 float32 ulp.
"""

from __future__ import annotations

import numpy as np

from ..errors import NonFiniteError, OutOfRangeError
from ..types.results import TeamSchedule, TeamScores
from ._reference_dag import check_consistent
from .samples import TEAM, Call, Sample, team_graph_inputs

__all__ = ["team_schedule", "team_scores", "topology_distance"]


def _tarjan(g: np.ndarray, alive: np.ndarray) -> list[list[int]]:
    """Strongly connected components of the alive nodes of ``g`` (N, N) (self-loops ignored), iterative Tarjan
    started from each unvisited node in index order. Components come in Tarjan's (reverse topological) order."""
    N = g.shape[0]
    succ = [[int(v) for v in np.flatnonzero(g[u]) if v != u] for u in range(N)]
    index = [-1] * N
    low = [0] * N
    on_stack = [False] * N
    stack: list[int] = []
    comps: list[list[int]] = []
    counter = 0
    for root in range(N):
        if not alive[root] or index[root] >= 0:
            continue
        work = [(root, 0)]  # (node, next successor position)
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            u, i = work[-1]
            if i < len(succ[u]):
                work[-1] = (u, i + 1)
                v = succ[u][i]
                if index[v] < 0:
                    index[v] = low[v] = counter
                    counter += 1
                    stack.append(v)
                    on_stack[v] = True
                    work.append((v, 0))
                elif on_stack[v]:
                    low[u] = min(low[u], index[v])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[u])
            if low[u] == index[u]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp.append(w)
                    if w == u:
                        break
                comps.append(sorted(comp))
    return comps


def _schedule_one(g: np.ndarray, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """(component, level, n_levels, cyclic) of one graph; see :func:`team_schedule`."""
    N = g.shape[0]
    comps = _tarjan(g, alive)
    raw = np.full(N, -1, dtype=np.int64)
    for c, members in enumerate(comps):
        raw[members] = c
    # condensation: predecessors of each raw component
    preds: list[set[int]] = [set() for _ in comps]
    for u, v in zip(*np.nonzero(g)):
        if raw[u] != raw[v]:
            preds[raw[v]].add(int(raw[u]))
    # Kahn over the condensation; among ready components, the one holding the lowest node index first
    component = np.full(N, -1, dtype=np.int32)
    level = np.full(N, -1, dtype=np.int32)
    comp_level = [-1] * len(comps)
    done = [False] * len(comps)
    for number in range(len(comps)):
        ready = [c for c in range(len(comps)) if not done[c] and all(done[p] for p in preds[c])]
        c = min(ready, key=lambda r: comps[r][0])
        done[c] = True
        comp_level[c] = max((comp_level[p] + 1 for p in preds[c]), default=0)
        component[comps[c]] = number
        level[comps[c]] = comp_level[c]
    n_levels = max(comp_level, default=-1) + 1
    return component, level, n_levels, any(len(m) >= 2 for m in comps)


def team_schedule(adj: np.ndarray, alive: np.ndarray) -> TeamSchedule:
    """Execution waves of (B, N, N) bool ``adj[b, src, dst]`` with (B, N) bool ``alive``.

    Self-loops are ignored; no edge may touch a dead node. ``component``: strongly connected components numbered
    in a topological order of the condensation, choosing among the ready components (all predecessors numbered)
    the one that holds the lowest node index; ``level``: 0 for a component without in-edges from other
    components, else 1 + the highest level among its predecessors (the longest path counted in components);
    ``lagged``: the edges inside one component (their message is the previous round's); ``cyclic``: some
    component has two nodes or more; ``order``: the alive nodes sorted by (level, component, index), then -1.
    Dead nodes get component and level -1.
    """
    check_consistent(adj, alive)
    B, N, _ = adj.shape
    component = np.full((B, N), -1, dtype=np.int32)
    level = np.full((B, N), -1, dtype=np.int32)
    n_levels = np.zeros(B, dtype=np.int32)
    cyclic = np.zeros(B, dtype=bool)
    order = np.full((B, N), -1, dtype=np.int32)
    off_diagonal = ~np.eye(N, dtype=bool)
    for b in range(B):
        g = adj[b] & off_diagonal
        component[b], level[b], n_levels[b], cyclic[b] = _schedule_one(g, alive[b])
        nodes = np.flatnonzero(alive[b])
        keys = (nodes, component[b, nodes], level[b, nodes])
        order[b, : nodes.size] = nodes[np.lexsort(keys)]
    same = component[:, :, None] == component[:, None, :]
    lagged = adj & off_diagonal[None] & same
    return TeamSchedule(component, level, n_levels, lagged, cyclic, order)


def _check_scores(history: np.ndarray, present: np.ndarray) -> None:
    """Scores of present nodes must be finite and in [0, 1] (the first bad one in C order is reported)."""
    h = history.astype(np.float64)
    bad = present & ~(np.isfinite(h) & (h >= 0.0) & (h <= 1.0))
    if bad.any():
        b, t, n = (int(x) for x in np.argwhere(bad)[0])
        v = float(history[b, t, n])
        cls = OutOfRangeError if np.isfinite(v) else NonFiniteError
        raise cls(
            f"history must be finite and in [0, 1] where present; got {v:.9g} at [{b}, {t}, {n}]",
            arg="history",
        )


def _slope(t: np.ndarray, y: np.ndarray, use: np.ndarray) -> np.ndarray:
    """Least-squares slope of ``y`` against ``t`` over the points where ``use``, along the last-but-one axis
    (rounds), for every other index; 0 with fewer than 2 points. ``t`` (T,) float64, ``y`` and ``use``
    (..., T, M). Sums run one round at a time in ascending order."""
    T = t.shape[0]
    k = np.zeros(y.shape[:-2] + y.shape[-1:])
    st = np.zeros_like(k)
    sy = np.zeros_like(k)
    for r in range(T):
        u = use[..., r, :]
        k += u
        st += np.where(u, t[r], 0.0)
        sy += np.where(u, y[..., r, :], 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tbar = st / k
        ybar = sy / k
    num = np.zeros_like(k)
    den = np.zeros_like(k)
    for r in range(T):
        u = use[..., r, :]
        dt = np.where(u, t[r] - tbar, 0.0)
        num += dt * np.where(u, y[..., r, :] - ybar, 0.0)
        den += dt * dt
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k >= 2, num / np.where(k >= 2, den, 1.0), 0.0)


def _last_rounds(use: np.ndarray, window: int) -> np.ndarray:
    """``use`` (..., T, M) restricted to each column's last ``window`` rounds where it is True."""
    from_end = np.cumsum(use[..., ::-1, :], axis=-2)[..., ::-1, :]
    return use & (from_end <= window)


def team_scores(
    history: np.ndarray, present: np.ndarray, eta: float, window: int, death_threshold: float
) -> TeamScores:
    """Score statistics of (B, T, N) float32 ``history`` where (B, T, N) bool ``present``.

    Per round ``m_t`` = mean and ``var`` = population variance of the present scores (NaN when none). Per node
    ``log phi_v = eta * sum over rounds where v is present of (c_v,t - m_t)`` (a newborn starts at the mean);
    ``pi`` = softmax of ``log phi`` over the nodes present in the last round (0 elsewhere; all 0 when none):
    from uniform weights this is the normalised replicator of Eq 12 applied round by round (``m_t`` cancels).
    ``trend``: least-squares slope of ``c_v,t`` against ``t`` over v's last ``window`` present rounds (0 with
    fewer than 2); ``mean_trend``: the same for ``m_t`` over the last ``window`` rounds with a present node.
    ``last``: the last round's scores (NaN where absent); ``death``: present in the last round with ``last <
    death_threshold``; ``delta_mean``: ``m_{T-1} - m_{T-2}`` (NaN when either is missing or T = 1).
    """
    _check_scores(history, present)
    B, T, N = history.shape
    c = np.where(present, history.astype(np.float64), 0.0)
    count = present.sum(axis=2)  # (B, T)
    total = np.zeros((B, T))
    for n in range(N):
        total += c[:, :, n]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    sq = np.zeros((B, T))
    for n in range(N):
        d = np.where(present[:, :, n], c[:, :, n] - mean, 0.0)
        sq += d * d
    var = np.where(count > 0, sq / np.maximum(count, 1), np.nan)

    log_phi = np.zeros((B, N))
    for t in range(T):
        log_phi += np.where(present[:, t, :], c[:, t, :] - mean[:, t, None], 0.0)
    log_phi *= eta
    now = present[:, T - 1, :]
    top = np.where(now, log_phi, -np.inf).max(axis=1)  # -inf when nobody is present
    w = np.exp(np.where(now, log_phi - top[:, None], -np.inf))
    z = np.zeros(B)
    for n in range(N):
        z += w[:, n]
    pi = np.where(now, w / np.where(z > 0, z, 1.0)[:, None], 0.0)

    rounds = np.arange(T, dtype=np.float64)
    trend = _slope(rounds, c, _last_rounds(present, window))
    have = count > 0
    m = np.where(have, mean, 0.0)
    mean_trend = _slope(rounds, m[:, :, None], _last_rounds(have[:, :, None], window))[:, 0]

    last = np.where(now, history[:, T - 1, :], np.float32(np.nan)).astype(np.float32)
    death = now & (history[:, T - 1, :].astype(np.float64) < death_threshold)
    if T >= 2:
        delta = mean[:, T - 1] - mean[:, T - 2]
    else:
        delta = np.full(B, np.nan)
    f32 = np.float32
    return TeamScores(
        mean.astype(f32),
        var.astype(f32),
        pi.astype(f32),
        trend.astype(f32),
        mean_trend.astype(f32),
        last,
        death,
        delta.astype(f32),
    )


def topology_distance(
    adj_a: np.ndarray,
    alive_a: np.ndarray,
    adj_b: np.ndarray,
    alive_b: np.ndarray,
    gen_a: np.ndarray | None,
    gen_b: np.ndarray | None,
) -> np.ndarray:
    """``|V xor V'| + |E xor E'|`` per graph, (B,) int32, between (B, N, N) bool graphs with (B, N) alive masks
    and (B, N) int32 generations (None = zeros). A node is (slot, generation): a slot alive in one graph counts
    1, alive in both with different generations 2. An edge (self-loops included) counts 1 when present in one
    graph only, 2 when present in both and an endpoint's identity differs. No edge may touch a dead node."""
    check_consistent(adj_a, alive_a, ("adj_a", "alive_a"))
    check_consistent(adj_b, alive_b, ("adj_b", "alive_b"))
    both = alive_a & alive_b
    if gen_a is None and gen_b is None:
        same = both
    else:
        ga = np.zeros(alive_a.shape, np.int32) if gen_a is None else gen_a
        gb = np.zeros(alive_b.shape, np.int32) if gen_b is None else gen_b
        same = both & (ga == gb)
    nodes = (alive_a ^ alive_b).sum(axis=1) + 2 * (both & ~same).sum(axis=1)
    kept = same[:, :, None] & same[:, None, :]
    edges = (adj_a ^ adj_b).sum(axis=(1, 2)) + 2 * (adj_a & adj_b & ~kept).sum(axis=(1, 2))
    distance: np.ndarray = (nodes + edges).astype(np.int32)
    return distance


# -- samples (toporoute.backends.samples) -----------------------------------------------------------------------


def _schedule_sample(B: int) -> Call:
    adj, alive, *_ = team_graph_inputs(B)
    return (adj, alive), {}


def _scores_sample(B: int) -> Call:
    *_, history, present = team_graph_inputs(B)
    return (history, present), {}


def _distance_sample(B: int) -> Call:
    adj, alive, adj_next, gen, gen_next, _, _ = team_graph_inputs(B)
    return (adj, alive, adj_next, alive), {"gen_a": gen, "gen_b": gen_next}


SAMPLES = {
    "team_schedule": Sample(f"B {TEAM} with cycles", _schedule_sample),
    "team_scores": Sample(f"B {TEAM}, T=10 judged rounds", _scores_sample),
    "topology_distance": Sample(f"B pairs of {TEAM}", _distance_sample),
}
