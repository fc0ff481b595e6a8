"""Reference backend in numpy: the definition of every op's semantics and the oracle for the compiled kernels.

All functions take batched, already validated arrays (the public facade :mod:`toporoute.ops` validates and adds
the batch axis); they check only what needs a pass over the data (non-finite values, negative weights).

Floating-point policy (shared by every backend): row norms and dot products are computed in float64, the
score is rounded to float32 once, and every decision (threshold, ranking, ties) is taken on that float32 value.
Backends differ only in float64 summation order, which the rounding hides, so their integer and boolean outputs
agree exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidArgumentError, NonFiniteError, OutOfRangeError
from ..types.op_table import OPS
from ..types.results import Density, GraphStats, Order, QMixGraph, QMixStep, Routes

# the ops defined beside this module, by family (each module's __all__), registered in KERNELS below by name: an
# op added to a family touches no line here
from ._reference_bandit import *
from ._reference_bandit import SAMPLES as _BANDIT_SAMPLES
from ._reference_dag import *
from ._reference_dag import SAMPLES as _DAG_SAMPLES
from ._reference_graph import reaches
from ._reference_schedule import *
from ._reference_schedule import SAMPLES as _SCHEDULE_SAMPLES
from ._reference_team import *
from ._reference_team import SAMPLES as _TEAM_SAMPLES
from .samples import Call, Sample

if TYPE_CHECKING:
    from ..types.qmix_params import QMixParams

# and a function per op (KERNELS)
__all__ = ["KERNELS", "QMIX_ACTIONS", "SAMPLES", "available", "inbox_width"]


def inbox_width(n: int, k_in: int) -> int:
    """Width K of the inbox: ``k_in`` when capped, else ``N - 1`` (0 for N = 0)."""
    return int(k_in) if k_in > 0 else max(n - 1, 0)


def _check_finite(q: np.ndarray, k: np.ndarray) -> None:
    """Reports the first episode with a non-finite row, naming q before k (the order every backend uses)."""
    bad_q = ~np.isfinite(q).all(axis=-1)
    bad_k = ~np.isfinite(k).all(axis=-1)
    episodes = (bad_q | bad_k).any(axis=-1)
    if not episodes.any():
        return
    b = int(np.argmax(episodes))
    name, bad = ("q", bad_q) if bad_q[b].any() else ("k", bad_k)
    n = int(np.argmax(bad[b]))
    raise NonFiniteError(f"{name} must be finite; got NaN or infinity at episode {b}, agent {n}", arg=name)


def route(q: np.ndarray, k: np.ndarray, active: np.ndarray | None, tau: float, k_in: int) -> Routes:
    """Cosine routing for (B, N, D) float32 ``q`` (needs) and ``k`` (offers).

    ``scores[b, j, i] = cos(k[b, j], q[b, i])`` (float64, clamped to [-1, 1], rounded to float32; 0 for a zero
    or inactive row). Candidate edge ``j -> i`` iff ``scores > float32(tau)``, ``j != i``, both agents active
    and both rows non-zero. Each recipient keeps its ``k_in`` best candidates (``k_in <= 0``: all), ordered by
    descending score with ties to the lower index.
    """
    _check_finite(q, k)
    B, N, _ = q.shape
    K = inbox_width(N, k_in)
    q64 = q.astype(np.float64)
    k64 = k.astype(np.float64)
    qn = np.sqrt(np.einsum("bnd,bnd->bn", q64, q64))
    kn = np.sqrt(np.einsum("bnd,bnd->bn", k64, k64))
    dots = np.matmul(k64, q64.transpose(0, 2, 1))  # [b, j, i] = k_j . q_i
    denom = kn[:, :, None] * qn[:, None, :]
    valid = denom > 0
    if active is not None:
        valid &= active[:, :, None] & active[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        s64 = np.where(valid, dots / np.where(valid, denom, 1.0), 0.0)
    scores = np.clip(s64, -1.0, 1.0).astype(np.float32)

    cand = valid & (scores > np.float32(tau))
    cand &= ~np.eye(N, dtype=bool)[None]
    # rank providers per recipient (axis 1): descending score, ties to the lower index (stable sort)
    key = np.where(cand, -scores, np.float32(np.inf))
    order = np.argsort(key, axis=1, kind="stable")  # [b, rank, i]
    n_cand = cand.sum(axis=1)  # (B, N)
    kept = n_cand if k_in <= 0 else np.minimum(n_cand, k_in)
    rank = np.arange(N)[None, :, None]
    keep_sorted = rank < kept[:, None, :]  # [b, rank, i]

    adjacency = np.zeros((B, N, N), dtype=bool)
    bb, rr, ii = np.nonzero(keep_sorted)
    adjacency[bb, order[bb, rr, ii], ii] = True

    inbox = np.full((B, N, K), -1, dtype=np.int32)
    width = min(K, N)
    if width:
        top = np.where(keep_sorted[:, :width, :], order[:, :width, :], -1)  # [b, rank, i]
        inbox[:, :, :width] = top.transpose(0, 2, 1)
    return Routes(scores, adjacency, inbox, kept.astype(np.int32))


def _pooled_rows(
    inputs: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray | None]], M: int, group: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """Checks and pools every (hidden, mask, rows) input; returns (target rows, pooled rows) concatenated.

    Checks in order, before anything is written: each input's rows in [0, M) (None: row i goes to i), all
    targets distinct, then every counted token finite (first input, row and token reported)."""

    def label(b: int, name: str) -> str:
        return name if group is None else f"{group}[{b}] {name}"

    def arg(name: str) -> str:
        return name if group is None else group

    targets = []
    for b, (hidden, _, rows) in enumerate(inputs):
        n = hidden.shape[0]
        if rows is None:
            if n > M:
                raise InvalidArgumentError(
                    f"out must have at least {n} rows (one per row of {label(b, 'hidden')}); got {M}",
                    arg("out"),
                )
            targets.append(np.arange(n, dtype=np.int64))
            continue
        r = np.asarray(rows).astype(np.int64)
        bad = (r < 0) | (r >= M)
        if bad.any():
            i = int(np.argmax(bad))
            raise OutOfRangeError(
                f"{label(b, 'rows')} must be in [0, {M}); got {r[i]} at index {i}", arg("rows")
            )
        targets.append(r)
    target = np.concatenate(targets) if targets else np.zeros(0, np.int64)
    if target.size > 1:
        order = np.argsort(target, kind="stable")
        repeats = order[1:][target[order[1:]] == target[order[:-1]]]
        if repeats.size:
            g = int(repeats.min())
            b = 0
            i = g
            while i >= inputs[b][0].shape[0]:
                i -= inputs[b][0].shape[0]
                b += 1
            across = " across all inputs" if group is not None else ""
            raise InvalidArgumentError(
                f"{label(b, 'rows')} must be distinct{across}; got row {target[g]} again at index {i}",
                arg("rows"),
            )
    pooled = []
    for b, (hidden, mask, _) in enumerate(inputs):
        counted = np.asarray(mask) != 0  # (n, L)
        bad = counted & ~np.isfinite(hidden).all(axis=-1)
        if bad.any():
            i, t = (int(v) for v in np.argwhere(bad)[0])
            raise NonFiniteError(
                f"{label(b, 'hidden')} must be finite at counted tokens (mask != 0); got NaN or infinity at "
                f"row {i}, token {t}",
                arg("hidden"),
            )
        total = np.where(counted[:, :, None], hidden.astype(np.float64), 0.0).sum(axis=1)  # (n, D)
        v = total / np.maximum(counted.sum(axis=1), 1e-9)[:, None]
        norm = np.sqrt((v * v).sum(axis=1))
        pooled.append((v / np.maximum(norm, 1e-12)[:, None]).astype(np.float32))
    D = inputs[0][0].shape[2] if inputs else 0
    return target, (np.concatenate(pooled) if pooled else np.zeros((0, D), np.float32))


def mean_pool(
    hidden: np.ndarray, mask: np.ndarray, out: np.ndarray | None, rows: np.ndarray | None
) -> np.ndarray:
    """Masked mean pooling and L2 normalisation (sentence-transformers semantics) of (n, L, D) float32 token
    states, ``mask`` (n, L) non-zero where a token counts.

    Row ``i`` is ``v / max(|v|_2, 1e-12)`` with ``v = sum(hidden[i, l] for counted l) / max(count, 1e-9)``,
    computed in float64 and rounded to float32 once; a row without counted tokens is zero. Without ``out``,
    returns a new (n, D) array; with ``out`` (M, D), writes row ``i`` to ``out[rows[i]]`` (``rows`` None:
    ``out[i]``) and returns ``out``. Rows must lie in [0, M) and be distinct, counted tokens finite; nothing
    is written when a check fails (uncounted tokens may hold anything).
    """
    n, _, D = hidden.shape
    if out is None:
        return _pooled_rows([(hidden, mask, None)], n, None)[1].reshape(n, D)
    target, pooled = _pooled_rows([(hidden, mask, rows)], out.shape[0], None)
    out[target] = pooled
    return out


def route_indexed(
    table: np.ndarray,
    q_rows: np.ndarray,
    k_rows: np.ndarray,
    tau: float,
    k_in: int,
    active: np.ndarray | None = None,
    pool: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
) -> Routes:
    """Routing over rows of a shared (M, D) float32 embedding ``table``: agent ``n`` of episode ``b`` needs
    ``table[q_rows[b, n]]`` and offers ``table[k_rows[b, n]]`` ((B, N) int32 / int64).

    Exactly ``route(table[q_rows], table[k_rows], active=(q_rows != -1) & (k_rows != -1) [& active])`` with
    rows of -1 gathered as zeros. Checks, in order: every q_rows then k_rows entry is -1 or in [0, M); with
    ``pool``, the mean_pool checks of every (hidden, mask, rows) input; then ``table[rows] = mean_pool(...)``
    for each input, in place; then every referenced table row finite (reported on ``table`` with the first
    episode, q before k, and agent, like route).
    """
    M = table.shape[0]
    for name, rows in (("q_rows", q_rows), ("k_rows", k_rows)):
        bad = (rows < -1) | (rows >= M)
        if bad.any():
            b, n = (int(v) for v in np.argwhere(bad)[0])
            raise OutOfRangeError(
                f"{name} must be -1 (inactive) or a table row in [0, {M}); got {rows[b, n]} at episode {b}, "
                f"agent {n}",
                name,
            )
    if pool:
        target, pooled = _pooled_rows(list(pool), M, "pool")
        table[target] = pooled
    q, k = _gather(table, q_rows), _gather(table, k_rows)
    bad_q = ~np.isfinite(q).all(axis=-1)
    bad_k = ~np.isfinite(k).all(axis=-1)
    episodes = (bad_q | bad_k).any(axis=-1)
    if episodes.any():
        b = int(np.argmax(episodes))
        name, bad, rows = ("q_rows", bad_q, q_rows) if bad_q[b].any() else ("k_rows", bad_k, k_rows)
        n = int(np.argmax(bad[b]))
        raise NonFiniteError(
            f"table must be finite; got NaN or infinity in row {rows[b, n]}, used by {name} at episode {b}, "
            f"agent {n}",
            "table",
        )
    act = (q_rows != -1) & (k_rows != -1)
    if active is not None:
        act &= active
    return route(q, k, tau=tau, k_in=k_in, active=act)


def nearest(table: np.ndarray, queries: np.ndarray, k: int, keep: np.ndarray | None) -> np.ndarray:
    """The ``k`` rows of the (M, D) float32 ``table`` nearest each (B, D) float32 query, as (B, k) int64.

    ``score[b, m] = cos(table[m], queries[b])`` (float64, clamped to [-1, 1], rounded to float32; 0 when either
    row is zero). Each query's rows with ``keep[b, m]`` (all without ``keep``) are ranked by descending score,
    ties to the lower row; its first ``k`` are returned, -1 padding the rest. Checks, in order: every table row
    finite (the first bad row is reported), then every query (the first bad query).
    """
    bad_rows = ~np.isfinite(table).all(axis=1)
    if bad_rows.any():
        m = int(np.argmax(bad_rows))
        raise NonFiniteError(f"table must be finite; got NaN or infinity in row {m}", "table")
    bad_queries = ~np.isfinite(queries).all(axis=1)
    if bad_queries.any():
        b = int(np.argmax(bad_queries))
        raise NonFiniteError(f"queries must be finite; got NaN or infinity at query {b}", "queries")
    t64 = table.astype(np.float64)
    q64 = queries.astype(np.float64)
    tn = np.sqrt(np.einsum("md,md->m", t64, t64))
    qn = np.sqrt(np.einsum("bd,bd->b", q64, q64))
    denom = qn[:, None] * tn[None, :]
    valid = denom > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        s64 = np.where(valid, (q64 @ t64.T) / np.where(valid, denom, 1.0), 0.0)
    scores = np.clip(s64, -1.0, 1.0).astype(np.float32)
    B, M = scores.shape
    out = np.full((B, k), -1, dtype=np.int64)
    for b in range(B):
        rows = np.arange(M) if keep is None else np.flatnonzero(keep[b])
        best = rows[np.argsort(-scores[b, rows], kind="stable")[:k]]
        out[b, : len(best)] = best
    return out


def _gather(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``table[rows]`` as (B, N, D) float32 with zero rows where ``rows`` is -1."""
    out = np.zeros(rows.shape + table.shape[1:], dtype=np.float32)
    used = rows >= 0
    out[used] = table[rows[used]]
    return out


def toposort(adj: np.ndarray, weights: np.ndarray | None, active: np.ndarray | None) -> Order:
    """Greedy topological order with cycle breaking for (B, N, N) bool ``adj[b, src, dst]``.

    Self-loops and edges touching inactive nodes are ignored. Repeatedly place the unplaced active node with
    the smallest key, ties to the lowest index. The key is the number of edges into the node from unplaced
    nodes; with ``weights`` it is (has any such edge, sum of their weights), the sum taken in float64 over
    ascending source index, so a source is always placed before a node that still has in-edges and the
    weights only decide which edges a cycle loses. On a DAG this is Kahn's order (smallest index first).
    Edges into a placed node from still-unplaced nodes are ``removed``. ``level`` is the longest-path layer
    in the graph minus removed edges. Inactive nodes come last in index order with level -1.
    """
    B, N, _ = adj.shape
    if weights is not None:
        if not np.isfinite(weights).all():
            b, s, d = np.argwhere(~np.isfinite(weights))[0]
            raise NonFiniteError(
                f"weights must be finite; got {weights[b, s, d]} at [{b}, {s}, {d}]", "weights"
            )
        if (weights < 0).any():
            b, s, d = np.argwhere(weights < 0)[0]
            raise OutOfRangeError(
                f"weights must be >= 0; got {weights[b, s, d]} at [{b}, {s}, {d}]", "weights"
            )
    act = np.ones((B, N), dtype=bool) if active is None else active.astype(bool)
    e = adj.astype(bool) & ~np.eye(N, dtype=bool)[None] & act[:, :, None] & act[:, None, :]
    w = None if weights is None else np.where(e, weights.astype(np.float64), 0.0)

    order = np.full((B, N), -1, dtype=np.int32)
    level = np.full((B, N), -1, dtype=np.int32)
    removed = np.zeros((B, N, N), dtype=bool)
    placed = ~act  # inactive nodes never compete
    n_active = act.sum(axis=1)
    bidx = np.arange(B)

    for t in range(N):
        live = t < n_active  # episodes still placing active nodes
        if not live.any():
            break
        from_unplaced = e & ~placed[:, :, None]  # [b, src, dst]
        count = from_unplaced.sum(axis=1)  # (B, N)
        if w is None:
            v = np.argmin(np.where(placed, N + 1, count), axis=1)
        else:
            wsum = np.zeros((B, N))
            for j in range(N):  # ascending source order: the summation order every backend uses
                wsum += np.where(from_unplaced[:, j, :], w[:, j, :], 0.0)
            # lexicographic key (placed, has in-edges, weight sum, index)
            keys = (np.arange(N)[None].repeat(B, 0), wsum, count > 0, placed)
            v = np.lexsort(keys, axis=1)[:, 0]
        lb, lv = bidx[live], v[live]
        order[lb, t] = lv
        back = from_unplaced[lb, :, lv]  # (L, N): edges into v from unplaced nodes
        back[np.arange(lb.size), lv] = False
        removed[lb, :, lv] = back
        preds = e[lb, :, lv] & placed[lb]
        level[lb, lv] = np.where(preds, level[lb], -1).max(axis=1) + 1
        placed[lb, lv] = True
    for b in np.nonzero(n_active < N)[0]:
        order[b, n_active[b] :] = np.nonzero(~act[b])[0]
    return Order(order, level, removed, ~removed.any(axis=(1, 2)))


def graph_stats(adj: np.ndarray, active: np.ndarray | None, prev: np.ndarray | None) -> GraphStats:
    """Edge count, density, degrees, reciprocity and Jaccard distance to ``prev`` for (B, N, N) bool graphs."""
    B, N, _ = adj.shape
    act = np.ones((B, N), dtype=bool) if active is None else active.astype(bool)
    mask = ~np.eye(N, dtype=bool)[None] & act[:, :, None] & act[:, None, :]
    e = adj.astype(bool) & mask
    edges = e.sum(axis=(1, 2)).astype(np.int64)
    n = act.sum(axis=1).astype(np.float64)
    pairs = n * (n - 1)
    density = np.divide(edges, pairs, out=np.zeros(B), where=pairs > 0)
    mutual = (e & e.transpose(0, 2, 1)).sum(axis=(1, 2))
    reciprocity = np.divide(mutual, edges, out=np.zeros(B), where=edges > 0)
    jaccard = None
    if prev is not None:
        p = prev.astype(bool) & mask
        inter = (e & p).sum(axis=(1, 2))
        union = (e | p).sum(axis=(1, 2))
        jaccard = 1.0 - np.divide(inter, union, out=np.ones(B), where=union > 0)
    return GraphStats(
        edges, density, e.sum(axis=1).astype(np.int32), e.sum(axis=2).astype(np.int32), reciprocity, jaccard
    )


def conductor_density(nodes: np.ndarray, edges: np.ndarray, steps: np.ndarray, n_max: np.ndarray) -> Density:
    """AgentConductor density (methods/agentconductor.md §4.2, §4.4), elementwise over int64 arrays.

    ``S_node = exp(-V / N_max)``, ``S_edge = exp(-E / (V (V - 0.5)))``, ``S_depth = 1 - s / V``,
    ``S_complex = exp(S_node + 2 S_edge + S_depth)``; ``reward = S_complex`` when ``V <= N_max``, else
    ``tanh((N_max - V) / N_max)``.
    """
    v = nodes.astype(np.float64)
    s_node = np.exp(-v / n_max)
    s_edge = np.exp(-edges / (v * (v - 0.5)))
    s_depth = 1.0 - steps / v
    s_complex = np.exp(s_node + 2.0 * s_edge + s_depth)
    reward = np.where(nodes <= n_max, s_complex, np.tanh((n_max - v) / n_max))
    return Density(s_node, s_edge, s_depth, s_complex, reward)


def _gru(x: np.ndarray, h: np.ndarray, w: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    """PyTorch GRUCell (gates r, z, n): h' = (1 - z) n + z h."""
    gi = x @ w[f"{prefix}.weight_ih"].T + w[f"{prefix}.bias_ih"]
    gh = h @ w[f"{prefix}.weight_hh"].T + w[f"{prefix}.bias_hh"]
    H = h.shape[-1]
    r = 1.0 / (1.0 + np.exp(-(gi[..., :H] + gh[..., :H])))
    z = 1.0 / (1.0 + np.exp(-(gi[..., H : 2 * H] + gh[..., H : 2 * H])))
    n = np.tanh(gi[..., 2 * H :] + r * gh[..., 2 * H :])
    out: np.ndarray = (1.0 - z) * n + z * h
    return out


def qmix_neighbours(adj: np.ndarray, active: np.ndarray, adj_mode: str, self_loops: bool) -> np.ndarray:
    """(B, N, N) float64 ``E[b, i, j] = 1`` iff node i averages node j's message (both active)."""
    a = adj.astype(bool)
    if adj_mode == "in":
        e = np.swapaxes(a, 1, 2)
    elif adj_mode == "out_rows":
        e = a
    else:
        e = a | np.swapaxes(a, 1, 2)
    if self_loops:
        e = e | np.eye(a.shape[-1], dtype=bool)[None]
    e = e & active[:, :, None] & active[:, None, :]
    weights: np.ndarray = e.astype(np.float64)
    return weights


def qmix_forward(
    params: QMixParams,
    obs: np.ndarray,
    adj: np.ndarray,
    hidden: np.ndarray | None,
    active: np.ndarray | None,
) -> QMixStep:
    """The Agent Q-Mix agent network over (B, N) agents, in float64, results rounded to float32.

    ``obs (B, N, obs_dim)``, ``adj (B, N, N)`` bool (``adj[b, src, dst]``), ``hidden (B, N, H)`` (None: zeros)
    -> ``q (B, N, A)``, ``hidden (B, N, H)``. Per layer: ``m = relu(h Wm + bm)``; ``agg_i`` = mean of ``m_j``
    over ``E[i, j]`` (see :func:`qmix_neighbours`; 0 when i has none); ``h = LN(GRUCell(agg, h))`` (one
    LayerNorm shared by the layers; no dropout: inference). Then ``z' = GRUCell(h, z)`` and
    ``q = relu(z' W1 + b1) W2 + b2``. Inactive agents send nothing and get ``q = 0``, ``hidden = 0``.
    """
    c = params.config
    w = {k: v.astype(np.float64) for k, v in params.tensors.items() if k.startswith("agent.")}
    B, N, _ = obs.shape
    act = np.ones((B, N), bool) if active is None else active.astype(bool)
    x = obs.astype(np.float64)
    if not np.isfinite(x).all():
        b, n = np.argwhere(~np.isfinite(x).all(axis=-1))[0]
        raise NonFiniteError(f"obs must be finite; got NaN or infinity at episode {b}, agent {n}", arg="obs")
    z = np.zeros((B, N, c.hidden)) if hidden is None else hidden.astype(np.float64)
    if hidden is not None and not np.isfinite(z).all():
        b, n = np.argwhere(~np.isfinite(z).all(axis=-1))[0]
        raise NonFiniteError(
            f"hidden must be finite; got NaN or infinity at episode {b}, agent {n}", arg="hidden"
        )
    e = qmix_neighbours(adj, act, c.adj_mode, c.self_loops)
    deg = np.maximum(e.sum(axis=-1, keepdims=True), 1.0)
    h = np.maximum(x @ w["agent.input.weight"].T + w["agent.input.bias"], 0.0)
    for layer in range(c.gnn_layers):
        p = f"agent.gnn.{layer}"
        m = np.maximum(h @ w[f"{p}.message.weight"].T + w[f"{p}.message.bias"], 0.0)
        agg = (e @ m) / deg
        h = _gru(agg, h, w, f"{p}.update")
        mu = h.mean(axis=-1, keepdims=True)
        var = ((h - mu) ** 2).mean(axis=-1, keepdims=True)
        h = (h - mu) / np.sqrt(var + c.ln_eps) * w["agent.norm.weight"] + w["agent.norm.bias"]
    z = _gru(h, z, w, "agent.rnn")
    q = np.maximum(z @ w["agent.head.0.weight"].T + w["agent.head.0.bias"], 0.0)
    q = q @ w["agent.head.2.weight"].T + w["agent.head.2.bias"]
    q[~act] = 0.0
    z[~act] = 0.0
    return QMixStep(q.astype(np.float32), z.astype(np.float32))


def _mlp(x: np.ndarray, w: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    """Linear -> ReLU -> Linear (the hypernetworks), or a single Linear when ``prefix.weight`` exists."""
    y: np.ndarray
    if f"{prefix}.weight" in w:
        y = x @ w[f"{prefix}.weight"].T + w[f"{prefix}.bias"]
        return y
    h = np.maximum(x @ w[f"{prefix}.0.weight"].T + w[f"{prefix}.0.bias"], 0.0)
    y = h @ w[f"{prefix}.2.weight"].T + w[f"{prefix}.2.bias"]
    return y


def qmix_mix(params: QMixParams, q_taken: np.ndarray, state: np.ndarray) -> np.ndarray:
    """The monotonic QMIX mixer: ``(B, n_agents)`` chosen-action values and ``(B, S)`` states -> ``(B,)``.

    ``w1 = |hyper_w1(s)|`` as (n, M), ``b1 = hyper_b1(s)``, ``hid = elu(q w1 + b1)``, ``w2 = |hyper_w2(s)|``,
    ``b2 = hyper_b2(s)``, ``q_tot = hid . w2 + b2``; float64, rounded to float32.
    """
    c = params.config
    w = {k: v.astype(np.float64) for k, v in params.tensors.items() if k.startswith("mixer.")}
    q = q_taken.astype(np.float64)
    s = state.astype(np.float64)
    for name, arr in (("q_taken", q), ("state", s)):
        if not np.isfinite(arr).all():
            b = int(np.argwhere(~np.isfinite(arr).all(axis=-1))[0][0])
            raise NonFiniteError(f"{name} must be finite; got NaN or infinity at episode {b}", arg=name)
    B = q.shape[0]
    w1 = np.abs(_mlp(s, w, "mixer.hyper_w1")).reshape(B, c.n_agents, c.mix_hidden)
    b1 = _mlp(s, w, "mixer.hyper_b1")
    pre = np.einsum("bn,bnm->bm", q, w1) + b1
    hid = np.where(pre > 0, pre, np.expm1(np.minimum(pre, 0.0)))
    w2 = np.abs(_mlp(s, w, "mixer.hyper_w2"))
    b2 = _mlp(s, w, "mixer.hyper_b2")[:, 0]
    q_tot: np.ndarray = ((hid * w2).sum(axis=-1) + b2).astype(np.float32)
    return q_tot


QMIX_ACTIONS = (
    6  # solo_process, broadcast_all, selective_query, aggregate_refine, execute_verify, debate_check
)


def _add_edge(adj: np.ndarray, s: int, d: int) -> None:
    """Adds ``s -> d`` unless it is a self-loop, already there, or would close a cycle."""
    if s != d and not adj[s, d] and not reaches(adj, [d], s):
        adj[s, d] = True


def qmix_graph(actions: np.ndarray) -> QMixGraph:
    """Agent Q-Mix's phi for ``(B, N)`` joint actions (semantics: ``ops.qmix_graph``).

    Checks every action first: the first outside [0, 6) in (episode, agent) order is named.
    """
    bad = np.argwhere((actions < 0) | (actions >= QMIX_ACTIONS))
    if len(bad):
        b, i = (int(x) for x in bad[0])
        raise OutOfRangeError(
            f"actions must be in 0..{QMIX_ACTIONS - 1}; got {int(actions[b, i])} at episode {b}, agent {i}",
            arg="actions",
        )
    B, n = actions.shape
    out = np.zeros((B, n, n), dtype=bool)
    debate = np.full((B, n), -1, dtype=np.int32)
    for b in range(B):
        adj = out[b]
        for i, a in enumerate(int(x) for x in actions[b]):
            if a == 1:
                for j in range(n):
                    _add_edge(adj, i, j)
            elif a == 2:
                _add_edge(adj, i, (i + 1) % n)
            elif a == 3:
                for j in range(n):
                    _add_edge(adj, j, i)
            elif a == 4 and i + 1 < n:
                _add_edge(adj, i, i + 1)
            elif a == 5:
                p = (i + n // 2) % n
                if p != i and not reaches(adj, [p], i):
                    adj[i, p] = adj[p, i] = True
                    debate[b, i] = p
    return QMixGraph(out, debate)


def available() -> tuple[bool, str]:
    """The reference backend needs only numpy."""
    return True, ""


def conductor_check(texts: list[str], contexts: list[Any], options: Any) -> Any:
    """AgentConductor plans, one at a time with PyYAML (:func:`toporoute.types.conductor_topology.check`)."""
    from ..types.conductor_topology import check_batch

    return check_batch(texts, contexts, options)


# every op of the op table: the reference defines them all
KERNELS: dict[str, Callable[..., Any]] = {name: globals()[name] for name in OPS}


# -- samples (toporoute.backends.samples): the inputs toporoute bench times every backend on and the tests' backend
# grid checks every backend against the reference on; an op without one has its bench case written out in
# toporoute.benchmark.cases (an alternative to compare with, or inputs that need more than numpy).


def _route_indexed_sample(B: int) -> Call:
    rng = np.random.default_rng(0)
    table = rng.standard_normal((2 * B * 8, 384), dtype=np.float32)
    table /= np.linalg.norm(table, axis=1, keepdims=True)
    rows = rng.permutation(2 * B * 8).astype(np.int32).reshape(2, B, 8)
    return (table, rows[0], rows[1]), {"tau": 0.0, "k_in": 3}


def _nearest_sample(B: int) -> Call:
    rng = np.random.default_rng(0)
    table = rng.standard_normal((1024, 384), dtype=np.float32)
    queries = rng.standard_normal((B, 384), dtype=np.float32)
    return (table, queries), {"k": 8, "keep": rng.random((B, 1024)) < 0.9}


def _mean_pool_sample(B: int) -> Call:
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((B, 32, 384), dtype=np.float32)
    mask = np.arange(32)[None, :] < rng.integers(4, 33, size=(B, 1))
    return (hidden, mask), {}


def _graph_stats_sample(B: int) -> Call:
    adj, prev = np.random.default_rng(1).random((2, B, 8, 8)) < 0.3
    return (adj,), {"prev": prev}


def _density_sample(B: int) -> Call:
    rng = np.random.default_rng(2)
    nodes = rng.integers(1, 12, B)
    steps = np.minimum(rng.integers(1, 6, B), nodes)
    edges = rng.integers(0, 20, B)
    return (nodes, edges, steps, rng.choice([4, 7, 10], B)), {}


def _qmix_graph_sample(B: int) -> Call:
    return (np.random.default_rng(0).integers(0, 6, size=(B, 5), dtype=np.int64),), {}


SAMPLES: dict[str, Sample] = {
    "route_indexed": Sample(
        "B episodes of N=8 agents whose rows index a (2*B*N, 384) table", _route_indexed_sample
    ),
    "nearest": Sample(
        "B queries against M=1024 rows, D=384, k=8, about 90% of the rows kept", _nearest_sample
    ),
    "mean_pool": Sample("B sequences of L=32 tokens (4-32 counted), D=384", _mean_pool_sample),
    "graph_stats": Sample("B graphs of N=8 agents with the previous round", _graph_stats_sample),
    "conductor_density": Sample("B plans' node, edge and step counts", _density_sample),
    "qmix_graph": Sample("B joint actions of N=5 agents (uniform)", _qmix_graph_sample),
    **_BANDIT_SAMPLES,
    **_DAG_SAMPLES,
    **_TEAM_SAMPLES,
    **_SCHEDULE_SAMPLES,
}
"""The samples of the ops, by name (each family module's ``SAMPLES`` with this module's)."""
