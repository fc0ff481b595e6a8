"""Reference (numpy) semantics of the HiVA bandit ops: Thompson selection of successors, the edge weights it is
given (knowledge distance and synergy), the Beta update with decay toward the prior, and the edge synergy update.
Imported by :mod:`.reference`; the compiled kernels
(``cpp/src/bandit.cpp``) follow every step below, in the same order, so that their results are equal bit for bit.

Random draws of :func:`bandit_select`
-------------------------------------
The generator is Philox4x32-10 (Salmon et al., SC'11): a bijection of a 128-bit counter ``(c0, c1, c2, c3)``
(four uint32) under a 64-bit key ``(k0, k1)``, ten rounds of::

    hi0:lo0 = 0xD2511F53 * c0        hi1:lo1 = 0xCD9E8D57 * c2     (32 x 32 -> 64-bit products)
    (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
    k0 += 0x9E3779B9, k1 += 0xBB67AE85                              (mod 2**32)

giving four uint32 words ``(w0, w1, w2, w3)``. The key is the seed, ``k0 = seed mod 2**32`` and
``k1 = seed >> 32``. The counter of a block is::

    c0 = t                 attempt index of the gamma draw (0, 1, 2, ...), or 0xFFFFFFFF for the boost uniform
    c1 = 2 * node + part   part 0: X ~ Gamma(alpha), part 1: Y ~ Gamma(beta)
    c2 = graph_offset + b  the graph's index in the whole (chunked) batch
    c3 = step

so a node's draws depend on nothing but (seed, step, graph, node): not on the batch, the other graphs, the
backend or the thread count. Uniforms, never 0 so that logarithms stay finite::

    u53(a, b) = ((a >> 5) * 2**26 + (b >> 6) + 1) * 2**-53      in (0, 1], 53 random bits
    u32(w)    = (w + 1) * 2**-32                                in (0, 1], 32 random bits
    u31(w)    = ((w & 0x7FFFFFFF) + 1) * 2**-31                 in (0, 1], the low 31 bits

Box-Muller's ``cos(2 pi U)`` is drawn as ``+-cos(pi/2 V)`` with an independent sign (the top bit of ``w2``) and
``V = u31(w2)``: the same distribution by the cosine's symmetries, with the argument kept in (0, pi/2], where the
C library's ``cos`` takes its short path (arguments up to 2 pi need a range reduction that costs twice as much).

Gamma(a) by Marsaglia and Tsang (2000), in float64 (``a`` the float32 shape widened): with ``a1 = a + 1`` when
``a < 1`` (the boost) else ``a``, ``d = a1 - 1/3`` and ``c = 1 / sqrt(9 d)``, attempt ``t = 0, 1, ...`` reads the
block ``t`` and computes::

    z  = sqrt(-2 log u53(w0, w1)) * cos(pi/2 * u31(w2))       (Box-Muller, the cosine half, see above)
    z  = -z when the top bit of w2 is set
    u  = u32(w3)
    v  = 1 + c z;  reject if v <= 0
    v  = v * v * v;  reject if v == 0 (underflow)
    x2 = z * z
    accept if u < 1 - 0.0331 * x2 * x2  (squeeze), else if log(u) < 0.5 * x2 + d * (1 - v + log(v))

and the draw is ``d * v``; a boosted draw is then multiplied by ``pow(u53(w0, w1) of block 0xFFFFFFFF, 1 / a)``.
``theta = X / (X + Y)`` rounded to float32. When both draws underflow to 0 (tiny shapes, both boosted),
``theta = 1 / (1 + exp(log Y - log X))`` with ``log X = log(d v) + log(u_boost) / a``.

The transcendental functions are those of the C library (``math.log``, ``math.cos``, ``math.exp``, ``math.pow``:
the ones ``std::log`` etc. call in the compiled core), not numpy's SIMD versions, which may differ in the last
bit and could flip an acceptance test or the float32 rounding of theta. ``sqrt`` and the arithmetic are
correctly rounded everywhere; the compiled core is built without FMA contraction.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..errors import NonFiniteError, OutOfRangeError
from ..types.results import BanditSelection, BetaState, EdgeWeights, SynergyState
from .samples import Call, Sample, bandit_inputs

__all__ = ["bandit_select", "bandit_update", "bandit_weights", "beta_draws", "philox4x32", "synergy_update"]

_MASK32 = np.uint64(0xFFFFFFFF)
_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)
_W1 = np.uint64(0xBB67AE85)
_SHIFT32 = np.uint64(32)
BOOST_BLOCK = 0xFFFFFFFF  # c0 of the block whose first uniform boosts a gamma draw of shape < 1
HALF_PI = math.pi / 2.0


def philox4x32(
    c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Philox4x32-10 of the counters ``(c0, c1, c2, c3)`` (uint64 arrays holding uint32 values, broadcast
    together) under the key ``seed`` (a uint64); returns the four output words as uint64 arrays."""
    x0, x1, x2, x3 = (np.asarray(c, dtype=np.uint64) & _MASK32 for c in (c0, c1, c2, c3))
    x0, x1, x2, x3 = np.broadcast_arrays(x0, x1, x2, x3)
    k0 = np.uint64(seed & 0xFFFFFFFF)
    k1 = np.uint64(seed >> 32)
    for _ in range(10):
        p0 = _M0 * x0  # < 2**64: exact in uint64
        p1 = _M1 * x2
        x0, x1, x2, x3 = (p1 >> _SHIFT32) ^ x1 ^ k0, p1 & _MASK32, (p0 >> _SHIFT32) ^ x3 ^ k1, p0 & _MASK32
        k0 = (k0 + _W0) & _MASK32
        k1 = (k1 + _W1) & _MASK32
    return x0, x1, x2, x3


def _u53(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x = ((a >> np.uint64(5)) << np.uint64(26)) | (b >> np.uint64(6))
    u: np.ndarray = (x + np.uint64(1)).astype(np.float64) * 2.0**-53
    return u


def _u32(w: np.ndarray) -> np.ndarray:
    u: np.ndarray = (w + np.uint64(1)).astype(np.float64) * 2.0**-32
    return u


def _u31(w: np.ndarray) -> np.ndarray:
    u: np.ndarray = ((w & np.uint64(0x7FFFFFFF)) + np.uint64(1)).astype(np.float64) * 2.0**-31
    return u


def _libm(fn: Callable[..., float], nin: int = 1) -> Callable[..., np.ndarray]:
    """``fn`` of :mod:`math` (the C library's) applied elementwise, as float64 (see the module docstring)."""
    ufunc = np.frompyfunc(fn, nin, 1)

    def apply(*args: np.ndarray) -> np.ndarray:
        return np.asarray(ufunc(*args), dtype=np.float64)

    return apply


def _c_exp(x: float) -> float:
    """``exp`` as C returns it: infinity on overflow (``math.exp`` raises)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _c_pow(x: float, y: float) -> float:
    """``pow`` as C returns it: infinity on overflow (``math.pow`` raises)."""
    try:
        return math.pow(x, y)
    except OverflowError:
        return math.inf


_log = _libm(math.log)
_cos = _libm(math.cos)
_exp = _libm(_c_exp)
_pow = _libm(math.pow, 2)


def _gamma(
    shape: np.ndarray, lane: np.ndarray, graph: np.ndarray, step: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Marsaglia-Tsang draws of Gamma(shape) (1-D float64 shapes > 0) on the streams ``(lane, graph)`` (uint64
    counters c1, c2); returns (the draw, ``d v`` before the boost, the boost uniform or 1 when not boosted)."""
    m = shape.shape[0]
    boosted = shape < 1.0
    a1 = np.where(boosted, shape + 1.0, shape)
    d = a1 - 1.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * d)
    dv = np.zeros(m)
    pending = np.arange(m)
    t = 0
    while pending.size:
        w0, w1, w2, w3 = philox4x32(np.uint64(t), lane[pending], graph[pending], np.uint64(step), seed)
        z = np.sqrt(-2.0 * _log(_u53(w0, w1))) * _cos(HALF_PI * _u31(w2))
        z = np.where(w2 >> np.uint64(31) != 0, -z, z)
        u = _u32(w3)
        dp, cp = d[pending], c[pending]
        v = 1.0 + cp * z
        ok = v > 0.0
        v = np.where(ok, v * v * v, 0.0)
        ok &= v != 0.0
        x2 = z * z
        squeeze = ok & (u < 1.0 - 0.0331 * x2 * x2)
        slow = np.flatnonzero(ok & ~squeeze)  # the rare path: the full test needs two logarithms
        accept = squeeze
        if slow.size:
            vs = v[slow]
            accept[slow] = _log(u[slow]) < 0.5 * x2[slow] + dp[slow] * (1.0 - vs + _log(vs))
        dv[pending[accept]] = dp[accept] * v[accept]
        pending = pending[~accept]
        t += 1
    ub = np.ones(m)
    x = dv.copy()
    idx = np.flatnonzero(boosted)
    if idx.size:
        w0, w1, _, _ = philox4x32(np.uint64(BOOST_BLOCK), lane[idx], graph[idx], np.uint64(step), seed)
        ub[idx] = _u53(w0, w1)
        x[idx] = dv[idx] * _pow(ub[idx], 1.0 / shape[idx])
    return x, dv, ub


def beta_draws(
    alpha: np.ndarray, beta: np.ndarray, node: np.ndarray, graph: np.ndarray, *, seed: int, step: int
) -> np.ndarray:
    """theta ~ Beta(alpha, beta) as float32 for 1-D float32 ``alpha``, ``beta`` (> 0) of the nodes ``node`` of the
    graphs ``graph`` (int arrays of the same length, ``graph`` counted from the whole batch's start)."""
    a = alpha.astype(np.float64)
    b = beta.astype(np.float64)
    node64 = node.astype(np.uint64)
    graph64 = graph.astype(np.uint64)
    x, xdv, xub = _gamma(a, np.uint64(2) * node64, graph64, step, seed)
    y, ydv, yub = _gamma(b, np.uint64(2) * node64 + np.uint64(1), graph64, step, seed)
    total = x + y
    theta = np.zeros(a.shape[0])
    fine = total > 0.0
    theta[fine] = x[fine] / total[fine]
    under = np.flatnonzero(~fine)
    if under.size:
        lx = _log(xdv[under]) + _log(xub[under]) / a[under]
        ly = _log(ydv[under]) + _log(yub[under]) / b[under]
        with np.errstate(over="ignore"):  # exp(ly - lx) = inf: theta = 0, as in C
            theta[under] = 1.0 / (1.0 + _exp(ly - lx))
    return theta.astype(np.float32)


def _first_bad(bad: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(bad)[0])


def _where(index: tuple[int, ...]) -> str:
    names = ("graph", "node", "successor")
    return ", ".join(f"{n} {i}" for n, i in zip(names, index))


def _check_positive(x: np.ndarray, name: str, mask: np.ndarray | None) -> None:
    """Finite and > 0 (where ``mask``); the first offending entry is named."""
    bad = ~np.isfinite(x)
    if mask is not None:
        bad &= mask
    if bad.any():
        i = _first_bad(bad)
        raise NonFiniteError(f"{name} must be finite; got {x[i]} at {_where(i)}", arg=name)
    bad = ~(x > 0)
    if mask is not None:
        bad &= mask
    if bad.any():
        i = _first_bad(bad)
        raise OutOfRangeError(f"{name} must be > 0; got {x[i]} at {_where(i)}", arg=name)


def _check_finite(x: np.ndarray, name: str) -> None:
    bad = ~np.isfinite(x)
    if bad.any():
        i = _first_bad(bad)
        raise NonFiniteError(f"{name} must be finite; got {x[i]} at {_where(i)}", arg=name)


def _check_range(x: np.ndarray, name: str, lo: float, hi: float | None) -> None:
    """Finite and in [lo, hi] (hi None: no upper bound); the first offending entry is named."""
    _check_finite(x, name)
    bad = x < lo if hi is None else (x < lo) | (x > hi)
    if bad.any():
        i = _first_bad(bad)
        want = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise OutOfRangeError(f"{name} must be {want}; got {x[i]} at {_where(i)}", arg=name)


def bandit_select(
    adj: np.ndarray,
    alpha: np.ndarray,
    beta: np.ndarray,
    k: int,
    weights: np.ndarray | None,
    seed: int,
    step: int,
    mode: str,
    active: np.ndarray | None,
    graph_offset: int,
) -> BanditSelection:
    """Thompson (or mean) scoring of every node and each source's top-``k`` successors.

    ``theta[b, n] ~ Beta(alpha, beta)`` drawn as the module docstring says (``mode="mean"``:
    ``alpha / (alpha + beta)`` in float64), rounded to float32, 0 for inactive nodes. ``score[b, s, d] =
    theta[b, d] * weights[b, s, d]`` in float32. Candidates of ``s``: ``d`` with ``adj[b, s, d]``, ``d != s``,
    both active, ``weights > 0``. Each source keeps its ``k`` best candidates, descending score, ties to the lower
    index. Checks: ``alpha`` then ``beta`` finite and > 0 at active nodes, ``weights`` finite and >= 0.
    """
    B, N, _ = adj.shape
    act = np.ones((B, N), dtype=bool) if active is None else active
    _check_positive(alpha, "alpha", act)
    _check_positive(beta, "beta", act)
    if weights is not None:
        _check_range(weights, "weights", 0.0, None)

    theta = np.zeros((B, N), dtype=np.float32)
    gb, gn = np.nonzero(act)
    if mode == "mean":
        a = alpha[gb, gn].astype(np.float64)
        theta[gb, gn] = (a / (a + beta[gb, gn].astype(np.float64))).astype(np.float32)
    else:
        theta[gb, gn] = beta_draws(alpha[gb, gn], beta[gb, gn], gn, gb + graph_offset, seed=seed, step=step)

    cand = adj & ~np.eye(N, dtype=bool)[None] & act[:, :, None] & act[:, None, :]
    if weights is None:
        score = np.broadcast_to(theta[:, None, :], (B, N, N))
    else:
        score = theta[:, None, :] * weights  # float32 product
        cand &= weights > 0
    key = np.where(cand, -score, np.float32(np.inf))
    order = np.argsort(key, axis=2, kind="stable")  # [b, s, rank]: descending score, ties to the lower index
    kept = np.minimum(cand.sum(axis=2), k)  # (B, N)
    width = min(k, N)
    keep = np.arange(width)[None, None, :] < kept[:, :, None]  # [b, s, rank]
    choices = np.full((B, N, k), -1, dtype=np.int32)
    choices[:, :, :width] = np.where(keep, order[:, :, :width], -1)
    chosen = np.zeros((B, N, N), dtype=bool)
    bb, ss, rr = np.nonzero(keep)
    chosen[bb, ss, order[bb, ss, rr]] = True
    return BanditSelection(chosen, choices, theta)


def _check_similarity(similarity: np.ndarray) -> None:
    """Finite, then the Jaccard (``[..., 0]``) in [0, 1], then the cosine (``[..., 1]``) in [-1, 1]."""
    bad = ~np.isfinite(similarity)
    if bad.any():
        b, n, k = _first_bad(bad)
        raise NonFiniteError(
            f"similarity must be finite; got {similarity[b, n, k]} at graph {b}, node {n}", arg="similarity"
        )
    for k, what, lo in ((0, "Jaccard", 0.0), (1, "cosine", -1.0)):
        x = similarity[..., k]
        bad = (x < lo) | (x > 1.0)
        if bad.any():
            b, n = _first_bad(bad)
            raise OutOfRangeError(
                f"similarity[..., {k}] ({what}) must be in [{lo:g}, 1]; got {x[b, n]} at graph {b}, node {n}",
                arg="similarity",
            )


def bandit_weights(
    adj: np.ndarray,
    alive: np.ndarray,
    alpha: np.ndarray,
    beta: np.ndarray,
    c_syn: np.ndarray,
    similarity: np.ndarray,
    selected: np.ndarray,
    sink: int,
    lam: float,
    eta: float,
    omega1: float,
    omega3: float,
    threshold: float,
    c0: float,
) -> EdgeWeights:
    """HiVA's edge weights (spec §3.1, no-KG fallback), each graph as ``HiVAGraph.weights`` computes them, in
    float64 (``psi`` is returned as computed, the weights are rounded to float32 once)::

        psi[n]  = omega1 * (0.5 * (1 - jac[n]) + 0.5 * (1 - cos[n]) / 2)
                  + omega3 * (1 - alpha[n] / float32(alpha[n] + beta[n]))      alive n; 0 for the others
        top     = float64(max of c_syn[i, j] over live i, j), live = alive and not the sink; c0 with fewer than
                  two live nodes; then max(top, 1e-12)
        zeta[d] = (sum(C) - trace(C)) / (g (g - 1)) / top, C = c_syn[G, G] in float64 with G the sorted group
                  S + {d} of g >= 2 nodes, S the selected nodes other than the sink (alive or not); 1 when g = 1
        w[s, d] = 1 into the sink, else exp(-lam * (log(2) * psi[d])) * pow(max(zeta[d], 0), eta)

    for every live edge ``s -> d`` (``adj``, ``d != s``, both alive). Then the distance threshold: when every
    successor of ``s`` has ``psi > threshold`` (so the sink is not one of them), all but the nearest (smallest
    psi, ties to the lower index) get weight 0; otherwise those beyond it do.

    The sums are numpy's: ``0.0 + pairwise(x)`` over the ``g * g`` entries of C in row-major order, and over
    its diagonal, where ``pairwise`` of ``n`` values is their sum from 0.0 left to right for ``n < 8``; for
    ``n <= 128`` eight running sums ``r[j]`` (of entries ``j, j + 8, ...`` up to the last multiple of 8),
    ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``, then the remaining entries left to right; above,
    ``pairwise`` of the first ``m = n // 2 - (n // 2) % 8`` entries plus ``pairwise`` of the rest. ``exp``,
    ``log`` and ``pow`` are the C library's (``math``; infinity on overflow). Checks, in order: ``alpha``, then
    ``beta`` finite and > 0 at alive nodes; ``c_syn`` finite; ``similarity`` finite, Jaccard in [0, 1], cosine
    in [-1, 1].
    """
    _check_positive(alpha, "alpha", alive)
    _check_positive(beta, "beta", alive)
    _check_finite(c_syn, "c_syn")
    _check_similarity(similarity)
    B, N, _ = adj.shape
    with np.errstate(all="ignore"):  # dead nodes' beliefs are not read
        psi1 = 0.5 * (1.0 - similarity[..., 0]) + 0.5 * (1.0 - similarity[..., 1]) / 2.0
        psi3 = 1.0 - alpha.astype(np.float64) / (alpha + beta).astype(np.float64)
        psi = np.where(alive, omega1 * psi1 + omega3 * psi3, 0.0)
    weights = np.zeros((B, N, N), np.float32)
    for b in range(B):
        _graph_weights(
            adj[b], alive[b], c_syn[b], selected[b], psi[b], sink, lam, eta, threshold, c0, weights[b]
        )
    return EdgeWeights(weights, psi)


def _graph_weights(
    adj: np.ndarray,
    alive: np.ndarray,
    c_syn: np.ndarray,
    selected: np.ndarray,
    psi: np.ndarray,
    sink: int,
    lam: float,
    eta: float,
    threshold: float,
    c0: float,
    w: np.ndarray,
) -> None:
    """One graph of :func:`bandit_weights`, written into ``w`` (N, N) float32 zeros."""
    nodes = [int(i) for i in np.flatnonzero(alive)]
    live = [i for i in nodes if i != sink]
    top = float(c_syn[np.ix_(live, live)].max()) if len(live) > 1 else c0
    top = max(top, 1e-12)
    base = {int(i) for i in np.flatnonzero(selected) if i != sink}
    zeta = np.ones(len(alive))
    for d in live:
        group = sorted(base | {d})
        if len(group) >= 2:
            sub = c_syn[np.ix_(group, group)].astype(np.float64)
            zeta[d] = (sub.sum() - np.trace(sub)) / (len(group) * (len(group) - 1)) / top
    dist = math.log(2.0) * psi
    for s in nodes:
        succ = [int(d) for d in np.flatnonzero(adj[s] & alive) if d != s]
        for d in succ:
            w[s, d] = 1.0 if d == sink else _c_exp(-lam * dist[d]) * _c_pow(max(zeta[d], 0.0), eta)
        far = [d for d in succ if d != sink and psi[d] > threshold]
        if far and len(far) == len(succ):  # the threshold always keeps the nearest candidate
            far.remove(min(far, key=lambda d: psi[d]))
        w[s, far] = 0.0


def bandit_update(
    alpha: np.ndarray,
    beta: np.ndarray,
    selected: np.ndarray,
    reward: np.ndarray,
    dt: np.ndarray | None,
    km: np.ndarray | None,
    gamma: float,
    delta: float,
    prior: float,
) -> BetaState:
    """Eq. B1 with decay toward the prior, in float64, rounded to float32 once::

        g  = gamma ** dt                    (C library pow; dt None: g = gamma)
        a' = prior + g * (alpha - prior) + sel * (r + delta * km)
        b' = prior + g * (beta - prior) + sel * (1 - r + delta * (1 - km))

    (``km`` None: both delta terms are 0). Checks, in order: ``alpha``, ``beta`` finite and > 0; ``reward`` in
    [0, 1]; ``dt`` finite and >= 0; ``km`` in [0, 1].
    """
    _check_positive(alpha, "alpha", None)
    _check_positive(beta, "beta", None)
    _check_range(reward, "reward", 0.0, 1.0)
    if dt is not None:
        _check_range(dt, "dt", 0.0, None)
    if km is not None:
        _check_range(km, "km", 0.0, 1.0)
    g = (
        np.full(alpha.shape, gamma)
        if dt is None
        else _pow(np.full(dt.shape, gamma), dt.astype(np.float64)).reshape(dt.shape)
    )
    sel = selected.astype(np.float64)
    r = reward.astype(np.float64)
    if km is None:
        win, loss = r, 1.0 - r
    else:
        m = km.astype(np.float64)
        win, loss = r + delta * m, 1.0 - r + delta * (1.0 - m)
    a = prior + g * (alpha.astype(np.float64) - prior) + sel * win
    b = prior + g * (beta.astype(np.float64) - prior) + sel * loss
    return BetaState(a.astype(np.float32), b.astype(np.float32))


def synergy_update(
    c_syn: np.ndarray,
    edge_alpha: np.ndarray,
    edge_beta: np.ndarray,
    routed: np.ndarray,
    reward: np.ndarray,
    lr: float,
) -> SynergyState:
    """Eq. B2: for every edge ``i -> j`` with ``routed[b, i, j] > 0``, in float64 with float32 results::

        ea' = float32(ea + r_j);  eb' = float32(eb + (1 - r_j))
        c'  = float32(c + lr * (ea' / (ea' + eb')) * R_ij)

    other entries unchanged. Checks, in order: ``c_syn`` finite; ``edge_alpha``, ``edge_beta`` finite and >= 0;
    ``routed`` finite and >= 0; ``reward`` in [0, 1].
    """
    _check_finite(c_syn, "c_syn")
    _check_range(edge_alpha, "edge_alpha", 0.0, None)
    _check_range(edge_beta, "edge_beta", 0.0, None)
    _check_range(routed, "routed", 0.0, None)
    _check_range(reward, "reward", 0.0, 1.0)
    hit = routed > 0
    r = np.broadcast_to(reward.astype(np.float64)[:, None, :], hit.shape)
    ea = np.where(hit, (edge_alpha.astype(np.float64) + r).astype(np.float32), edge_alpha)
    eb = np.where(hit, (edge_beta.astype(np.float64) + (1.0 - r)).astype(np.float32), edge_beta)
    ea64 = ea.astype(np.float64)
    eb64 = eb.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = lr * (ea64 / (ea64 + eb64)) * routed.astype(np.float64)
    c = np.where(hit, (c_syn.astype(np.float64) + gain).astype(np.float32), c_syn)
    return SynergyState(c.astype(np.float32), ea.astype(np.float32), eb.astype(np.float32))


# -- samples (toporoute.backends.samples): what toporoute bench times and the backend grid checks ---------------


def _select_sample(B: int) -> Call:
    adj, alpha, beta = bandit_inputs(B)
    return (adj, alpha, beta, 2), {"seed": 2026, "step": 3}


def _update_sample(B: int) -> Call:
    _, alpha, beta = bandit_inputs(B)
    rng = np.random.default_rng(1)
    selected = rng.random(alpha.shape) < 0.5
    return (alpha, beta, selected, rng.random(alpha.shape).astype(np.float32)), {}


def _weights_sample(B: int) -> Call:
    adj, alpha, beta = bandit_inputs(B)
    rng = np.random.default_rng(1)
    alive = np.ones(alpha.shape, bool)
    c_syn = rng.uniform(0.5, 2.0, adj.shape).astype(np.float32)
    similarity = np.stack([rng.random(alpha.shape), rng.uniform(-1.0, 1.0, alpha.shape)], axis=-1)
    selected = rng.random(alpha.shape) < 0.2
    return (adj, alive, alpha, beta, c_syn, similarity, selected), {}


def _synergy_sample(B: int) -> Call:
    adj, _, _ = bandit_inputs(B)
    reward = np.random.default_rng(1).random(adj.shape[:2]).astype(np.float32)
    c = np.ones(adj.shape, np.float32)
    return (c, c, c, adj.astype(np.float32), reward), {}


SAMPLES = {
    "bandit_select": Sample("B DAGs of N=32 nodes, k=2, Thompson", _select_sample),
    "bandit_update": Sample("B graphs of N=32 nodes", _update_sample),
    "synergy_update": Sample("B graphs of N=32 nodes", _synergy_sample),
    "bandit_weights": Sample("B DAGs of N=32 nodes, about 6 of them selected", _weights_sample),
}
