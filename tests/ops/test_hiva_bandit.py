"""The HiVA bandit ops (ops.bandit_select, ops.bandit_weights, ops.bandit_update, ops.synergy_update): the
generator against its published known-answer vectors, the Beta draws against their distribution, the selection,
weight and update semantics on hand-computed cases, parity of the compiled core with the reference (exactly equal
selections, theta, weights and psi), independence of a graph's draws from its batch, chunking and thread count,
and the input errors."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _backends import REFERENCE, Backend, assert_matches, needs_core, on_backend_names, on_backends

import toporoute
from toporoute import errors, ops
from toporoute.backends._reference_bandit import beta_draws, philox4x32


def _graphs(
    rng: np.random.Generator, B: int, N: int, *, p: float = 0.4
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(adj, alpha, beta, weights, active): shapes from Beta(0.05, ...) to Beta(60, ...), about a third of the
    nodes with alpha < 1; weights with zeros and repeated values (ties); 80% active nodes."""
    adj = rng.random((B, N, N)) < p
    alpha = np.exp(rng.uniform(np.log(0.05), np.log(60.0), (B, N))).astype(np.float32)
    beta = np.exp(rng.uniform(np.log(0.05), np.log(60.0), (B, N))).astype(np.float32)
    weights = rng.choice(np.array([0.0, 0.25, 0.5, 1.0, 3.0], np.float32), (B, N, N))
    free = rng.random((B, N, N)) < 0.3
    weights[free] = rng.random(int(free.sum()))
    active = rng.random((B, N)) < 0.8
    return adj, alpha, beta, weights.astype(np.float32), active


# ---------------------------------------------------------------------------------------------- the generator


def test_philox_known_answers() -> None:
    # Random123's known-answer vectors of Philox4x32-10 (counter, key) -> output
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for ctr, (k0, k1), want in cases:
        got = philox4x32(*(np.array([c], np.uint64) for c in ctr), (k1 << 32) | k0)
        assert tuple(int(w[0]) for w in got) == want


def _constant_batch(a: float, b: float, draws: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    B, N = draws // 40, 40
    adj = np.zeros((B, N, N), bool)
    return adj, np.full((B, N), a, np.float32), np.full((B, N), b, np.float32)


@on_backends("bandit_select", cuda=False)
@pytest.mark.parametrize(
    ("a", "b"), [(0.3, 0.7), (0.5, 0.5), (1.0, 1.0), (2.0, 5.0), (30.0, 3.0), (0.05, 2.0)]
)
def test_thompson_theta_follows_the_beta_distribution(backend: Backend, a: float, b: float) -> None:
    # 20000 draws (500 graphs x 40 nodes) with a fixed seed: mean, variance and a Kolmogorov-Smirnov test
    adj, alpha, beta = _constant_batch(a, b, 20000)
    theta = backend.bandit_select(adj, alpha, beta, 1, seed=20260518).theta.astype(np.float64).ravel()
    n = theta.size
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    assert abs(theta.mean() - mean) < 5 * math.sqrt(var / n), (theta.mean(), mean)
    assert abs(theta.var() - var) < 0.08 * var, (theta.var(), var)
    assert ((theta >= 0) & (theta <= 1)).all()
    stats = pytest.importorskip("scipy.stats", reason="scipy gives the Beta CDF of the KS test")
    assert stats.kstest(theta, stats.beta(a, b).cdf).pvalue > 1e-3


def test_beta_draws_are_independent_across_nodes_graphs_steps_and_seeds() -> None:
    n = 20000
    one = np.ones(n, np.float32)
    node, graph = np.arange(n) % 64, np.arange(n) // 64
    base = beta_draws(one, one, node, graph, seed=1, step=0).astype(np.float64)
    for other in (
        beta_draws(one, one, node, graph, seed=1, step=1),
        beta_draws(one, one, node, graph, seed=2, step=0),
        beta_draws(one, one, (node + 1) % 64, graph, seed=1, step=0),
        beta_draws(one, one, node, graph + 1, seed=1, step=0),
    ):
        # uniform(0, 1) draws: independent streams have correlation ~ N(0, 1/n)
        assert abs(np.corrcoef(base, other.astype(np.float64))[0, 1]) < 5 / math.sqrt(n)
    assert abs(np.corrcoef(base[:-1], base[1:])[0, 1]) < 5 / math.sqrt(n)


def test_seed_spans_64_bits() -> None:
    one = np.ones(64, np.float32)
    idx = np.arange(64)
    low = beta_draws(one, one, idx, idx, seed=5, step=0)
    high = beta_draws(one, one, idx, idx, seed=5 + 2**40, step=0)
    assert not np.array_equal(low, high)
    adj, alpha, beta = _constant_batch(1.0, 1.0, 80)
    assert ops.bandit_select(adj, alpha, beta, 1, seed=2**64 - 1).theta.shape == (2, 40)


# -------------------------------------------------------------------------------------------------- semantics


@on_backends("bandit_select", cuda=False)
def test_selection_on_a_hand_computed_graph(backend: Backend) -> None:
    # mode="mean": theta = alpha / (alpha + beta) = [0.5, 0.8, 0.2, 0.8, 0.5, 0.9] (node 5 inactive)
    alpha = np.array([1, 4, 1, 4, 2, 9], np.float32)
    beta = np.array([1, 1, 4, 1, 2, 1], np.float32)
    active = np.array([1, 1, 1, 1, 1, 0], bool)
    adj = np.zeros((6, 6), bool)
    adj[0, [0, 1, 2, 3, 4, 5]] = True  # self-loop and an inactive successor are never candidates
    adj[1, [2, 4]] = True
    adj[2, [3]] = True
    adj[3, [1, 4]] = True
    adj[5, [0, 1]] = True  # an inactive source chooses nothing
    weights = np.ones((6, 6), np.float32)
    weights[3, 1] = 0.0  # a weight of 0 removes the edge
    weights[1, 4] = 2.0  # 0.5 * 2 = 1.0 beats 0.2
    got = backend.bandit_select(adj, alpha, beta, 2, weights=weights, seed=0, mode="mean", active=active)
    theta = (alpha.astype(np.float64) / (alpha + beta.astype(np.float64))).astype(np.float32)
    theta[5] = 0
    np.testing.assert_array_equal(got.theta, theta)
    # source 0: 1 and 3 tie at 0.8, the lower index first; 4 (0.5) and 2 (0.2) are cut at k = 2
    np.testing.assert_array_equal(got.choices, [[1, 3], [4, 2], [3, -1], [4, -1], [-1, -1], [-1, -1]])
    want = np.zeros((6, 6), bool)
    for s, row in enumerate(got.choices):
        want[s, row[row >= 0]] = True
    np.testing.assert_array_equal(got.chosen, want)
    assert got.choices.dtype == np.int32 and got.chosen.dtype == bool and got.theta.dtype == np.float32


@on_backends("bandit_select", cuda=False)
def test_k_above_the_candidates_pads_with_minus_one(backend: Backend) -> None:
    rng = np.random.default_rng(3)
    adj, alpha, beta, _, _ = _graphs(rng, 4, 5)
    got = backend.bandit_select(adj, alpha, beta, 9, seed=3)
    assert got.choices.shape == (4, 5, 9)
    n_cand = (adj & ~np.eye(5, dtype=bool)).sum(axis=2)
    np.testing.assert_array_equal((got.choices >= 0).sum(axis=2), n_cand)
    np.testing.assert_array_equal(got.chosen.sum(axis=2), n_cand)
    # best first: the chosen successors' theta is non-increasing along each row
    th = np.where(
        got.choices >= 0, np.take_along_axis(got.theta[:, None, :], np.maximum(got.choices, 0), 2), -1
    )
    assert (np.diff(th, axis=2) <= 0).all()


def test_thompson_depends_on_seed_and_step_and_mean_does_not() -> None:
    rng = np.random.default_rng(4)
    adj, alpha, beta, _, _ = _graphs(rng, 8, 16)
    a = ops.bandit_select(adj, alpha, beta, 2, seed=1)
    assert not np.array_equal(a.theta, ops.bandit_select(adj, alpha, beta, 2, seed=2).theta)
    assert not np.array_equal(a.theta, ops.bandit_select(adj, alpha, beta, 2, seed=1, step=1).theta)
    np.testing.assert_array_equal(a.theta, ops.bandit_select(adj, alpha, beta, 2, seed=1).theta)
    m1 = ops.bandit_select(adj, alpha, beta, 2, seed=1, mode="mean")
    m2 = ops.bandit_select(adj, alpha, beta, 2, seed=9, step=4, mode="mean")
    np.testing.assert_array_equal(m1.theta, m2.theta)


@on_backends("bandit_update", cuda=False)
def test_bandit_update_by_hand(backend: Backend) -> None:
    alpha = np.array([3.0, 1.0, 5.0], np.float32)
    beta = np.array([2.0, 1.0, 0.5], np.float32)
    selected = np.array([True, False, True])
    reward = np.array([0.75, 1.0, 0.0], np.float32)
    # g = 0.5: alpha' = 1 + 0.5 (alpha - 1) + sel r, beta' = 1 + 0.5 (beta - 1) + sel (1 - r)
    got = backend.bandit_update(alpha, beta, selected, reward, gamma=0.5)
    np.testing.assert_array_equal(got.alpha, np.array([2.75, 1.0, 3.0], np.float32))
    np.testing.assert_array_equal(got.beta, np.array([1.75, 1.0, 1.75], np.float32))
    # with km and dt: g = 0.5 ** dt = [0.25, 1, 1], delta = 0.5
    km = np.array([0.5, 1.0, 0.25], np.float32)
    dt = np.array([2.0, 0.0, 0.0], np.float32)
    got = backend.bandit_update(alpha, beta, selected, reward, dt=dt, gamma=0.5, km=km, delta=0.5)
    np.testing.assert_array_equal(got.alpha, np.array([1.5 + 1.0, 1.0, 5.0 + 0.125], np.float32))
    np.testing.assert_array_equal(got.beta, np.array([1.25 + 0.5, 1.0, 0.5 + 1.375], np.float32))
    # the spec's default gamma = 0.6 decays toward the prior (here 2)
    got = backend.bandit_update(alpha, beta, np.zeros(3, bool), reward, prior=2.0)
    want = (2.0 + 0.6 * (alpha.astype(np.float64) - 2.0)).astype(np.float32)
    np.testing.assert_array_equal(got.alpha, want)
    # inputs unchanged, new arrays returned
    assert alpha[0] == 3.0 and got.alpha is not alpha


@on_backends("synergy_update", cuda=False)
def test_synergy_update_by_hand(backend: Backend) -> None:
    c = np.ones((3, 3), np.float32)
    ea = np.ones((3, 3), np.float32)
    eb = np.ones((3, 3), np.float32)
    routed = np.zeros((3, 3), np.float32)
    routed[0, 1] = 2.0
    routed[2, 1] = 1.0
    routed[1, 2] = 1.0
    reward = np.array([0.0, 1.0, 0.5], np.float32)
    got = backend.synergy_update(c, ea, eb, routed, reward, lr=0.5)
    # edge 0->1: ea = 2, eb = 1, c = 1 + 0.5 * 2/3 * 2; edge 2->1 likewise with R = 1; edge 1->2: ea = eb = 1.5
    want_ea = np.ones((3, 3), np.float32)
    want_eb = np.ones((3, 3), np.float32)
    want_c = np.ones((3, 3), np.float32)
    want_ea[0, 1] = want_ea[2, 1] = 2.0
    want_ea[1, 2] = want_eb[1, 2] = 1.5
    want_c[0, 1] = np.float32(1 + 0.5 * (2 / 3) * 2)
    want_c[2, 1] = np.float32(1 + 0.5 * (2 / 3) * 1)
    want_c[1, 2] = np.float32(1 + 0.5 * 0.5 * 1)
    np.testing.assert_array_equal(got.edge_alpha, want_ea)
    np.testing.assert_array_equal(got.edge_beta, want_eb)
    np.testing.assert_array_equal(got.c_syn, want_c)
    assert c[0, 1] == 1.0


def _weights(backend: Backend, **kw: Any) -> Any:
    """``bandit_weights`` of a 5-node graph (sink 1, node 4 dead): ``0 -> 1, 2, 3``, ``2 -> 3``, ``3 -> 1, 4``,
    uniform synergy and beliefs, node 2 like the task and node 3 half like it; ``kw`` changes any argument."""
    adj = np.zeros((5, 5), bool)
    adj[0, [1, 2, 3]] = adj[2, 3] = adj[3, [1, 4]] = True
    similarity = np.zeros((5, 2))
    similarity[2] = (1.0, 1.0)
    similarity[3] = (0.0, 1.0)
    args = {
        "adj": adj, "alive": np.array([1, 1, 1, 1, 0], bool), "alpha": np.ones(5, np.float32),
        "beta": np.ones(5, np.float32), "c_syn": np.ones((5, 5), np.float32), "similarity": similarity,
        "selected": np.array([1, 0, 0, 0, 0], bool), **kw,
    }  # fmt: skip
    return _weights_call(backend, args)


@on_backends("bandit_weights", cuda=False)
def test_bandit_weights_by_hand(backend: Backend) -> None:
    # omega = (1, 0): psi = 0.5 (1 - jaccard) + 0.25 (1 - cosine) = [0.75, 0.75, 0, 0.5, 0 (dead)]; synergy 1
    # everywhere: zeta = 1, w = exp(-log(2) psi) = 2**-psi into the non-sink nodes, 1 into the sink
    got = _weights(backend, omega1=1.0, omega3=0.0, threshold=0.4)
    np.testing.assert_array_equal(got.psi, [0.75, 0.75, 0.0, 0.5, 0.0])
    half = np.float32(math.exp(-math.log(2.0) * 0.5))
    want = np.zeros((5, 5), np.float32)
    want[0, 1] = want[0, 2] = want[3, 1] = 1.0  # 0 -> 3 is beyond the threshold (0.5 > 0.4); 3 -> 4 is dead
    want[2, 3] = half  # every successor of 2 is beyond it: the nearest is kept
    np.testing.assert_array_equal(got.weights, want)
    assert got.weights.dtype == np.float32 and got.psi.dtype == np.float64
    # no threshold in reach: 0 -> 3 keeps its weight
    np.testing.assert_array_equal(
        _weights(backend, omega1=1.0, omega3=0.0, threshold=0.5).weights[0, 3], half
    )
    # omega3: Psi3 = 1 - alpha / (alpha + beta) = 1 - 3/4 for node 2
    got = _weights(backend, alpha=np.array([1, 1, 3, 1, 1], np.float32), omega1=0.0, omega3=1.0)
    np.testing.assert_array_equal(got.psi, [0.5, 0.5, 0.25, 0.5, 0.0])


@on_backends("bandit_weights", cuda=False)
def test_bandit_weights_synergy_by_hand(backend: Backend) -> None:
    # omega = 0 (psi = 0, w = zeta**eta); S = {0}: zeta[d] = (c[0, d] + c[d, 0]) / 2 / top, top = 3 the largest
    # synergy among the live nodes 0, 2, 3 (the sink left out, its 5 ignored)
    c = np.ones((5, 5), np.float32)
    c[0, 2], c[1, 2] = 3.0, 5.0
    got = _weights(backend, c_syn=c, omega1=0.0, omega3=0.0, eta=2.0)
    assert got.weights[0, 2] == np.float32(((3.0 + 1.0) / 2 / 3) ** 2)
    assert got.weights[0, 3] == got.weights[2, 3] == np.float32((2.0 / 2 / 3) ** 2)
    assert got.weights[0, 1] == 1.0
    # a single live node but the sink: top = c0; a dead selected node still counts in the group
    adj = np.zeros((5, 5), bool)
    adj[1, 2] = True  # the sink routing on (never by HiVA, but defined)
    c = np.ones((5, 5), np.float32)
    c[0, 2] = c[2, 0] = 3.0
    got = _weights(
        backend, adj=adj, alive=np.array([0, 1, 1, 0, 0], bool), c_syn=c, selected=np.array([1, 0, 1, 0, 0], bool),
        omega1=0.0, omega3=0.0, c0=2.0,
    )  # fmt: skip
    assert got.weights[1, 2] == np.float32((3.0 + 3.0) / 2 / 2.0)
    # nothing selected: zeta = 1 for every node; eta = 0 gives 1 even for a zero synergy
    got = _weights(
        backend, selected=np.zeros(5, bool), omega1=0.0, omega3=0.0, c_syn=np.zeros((5, 5), np.float32)
    )
    assert got.weights[0, 2] == got.weights[0, 3] == 1.0
    got = _weights(backend, omega1=0.0, omega3=0.0, c_syn=np.zeros((5, 5), np.float32), eta=0.0)
    assert got.weights[0, 2] == got.weights[0, 3] == 1.0


# ----------------------------------------------------------------------------------------------------- parity


def _select_cases() -> list[tuple[str, tuple, dict[str, Any]]]:
    rng = np.random.default_rng(18)
    cases = []
    for B, N in [(1, 1), (1, 2), (3, 5), (40, 17), (64, 32), (7, 64), (3, 70)]:
        adj, alpha, beta, weights, active = _graphs(rng, B, N)
        for k in (1, 2, 3, N + 2):
            for extra in (
                {},
                {"weights": weights},
                {"active": active},
                {"weights": weights, "active": active, "step": 7},
                {"mode": "mean"},
                {"mode": "mean", "weights": weights},  # many exact ties
            ):
                kw = {"seed": int(rng.integers(2**63)) * 2 + 1, **extra}
                cases.append((f"B={B} N={N} k={k} {sorted(extra)}", (adj, alpha, beta, k), kw))
    return cases


@needs_core
@on_backends("bandit_select", reference=False, cuda=False)
def test_bandit_select_parity(backend: Backend) -> None:
    for ctx, args, kw in _select_cases():
        want = REFERENCE.bandit_select(*args, **kw)
        assert_matches("bandit_select", backend.bandit_select(*args, **kw), want, ctx)


@needs_core
@on_backends("bandit_select", reference=False, cuda=False)
def test_bandit_select_parity_over_many_seeds(backend: Backend) -> None:
    # one graph of 64 nodes with shapes down to 1e-3 (boosted draws), 200 seeds
    rng = np.random.default_rng(5)
    adj, alpha, beta, weights, _ = _graphs(rng, 1, 64)
    alpha[0, :8] = np.float32(1e-3)
    beta[0, 4:12] = np.float32(2e-3)
    seeds = rng.integers(0, 2**63, 200)
    adj_b = np.repeat(adj, 200, axis=0)
    args = (adj_b, np.repeat(alpha, 200, 0), np.repeat(beta, 200, 0), 3)
    for seed in seeds[:20]:
        kw = {"seed": int(seed), "weights": np.repeat(weights, 200, 0), "step": 3}
        assert_matches(
            "bandit_select", backend.bandit_select(*args, **kw), REFERENCE.bandit_select(*args, **kw)
        )


@needs_core
@on_backends("bandit_select", reference=False, cuda=False)
def test_bandit_select_reads_strided_inputs(backend: Backend) -> None:
    rng = np.random.default_rng(6)
    adj, alpha, beta, weights, active = _graphs(rng, 12, 20)
    view = np.s_[::2, ::-1, ::-1]
    args = (adj[view], alpha[::2, ::-1], beta[::2, ::-1], 2)
    kw = {"weights": weights[view], "active": active[::2, ::-1], "seed": 11}
    want = REFERENCE.bandit_select(*(np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in args),
                                   **{k: np.ascontiguousarray(v) if isinstance(v, np.ndarray) else v
                                      for k, v in kw.items()})  # fmt: skip
    assert_matches("bandit_select", backend.bandit_select(*args, **kw), want)


@needs_core
@on_backends("bandit_update", reference=False, cuda=False)
def test_bandit_update_parity(backend: Backend) -> None:
    rng = np.random.default_rng(7)
    for B, N in [(1, 1), (5, 9), (600, 40)]:
        alpha = rng.uniform(0.01, 50, (B, N)).astype(np.float32)
        beta = rng.uniform(0.01, 50, (B, N)).astype(np.float32)
        selected = rng.random((B, N)) < 0.5
        reward = rng.random((B, N)).astype(np.float32)
        reward[:, 0] = 1.0
        dt = rng.integers(0, 5, (B, N)).astype(np.float32) * np.float32(0.7)
        km = rng.random((B, N)).astype(np.float32)
        for kw in (
            {},
            {"dt": dt},
            {"km": km, "delta": 0.3},
            {"dt": dt, "km": km, "gamma": 0.0, "prior": 0.5},
            {"gamma": 1.0},
        ):
            want = REFERENCE.bandit_update(alpha, beta, selected, reward, **kw)
            got = backend.bandit_update(alpha, beta, selected, reward, **kw)
            assert_matches("bandit_update", got, want, f"B={B} N={N} {sorted(kw)}")


@needs_core
@on_backends("synergy_update", reference=False, cuda=False)
def test_synergy_update_parity(backend: Backend) -> None:
    rng = np.random.default_rng(8)
    for B, N in [(1, 1), (4, 7), (300, 24)]:
        c = rng.standard_normal((B, N, N)).astype(np.float32)
        ea = rng.uniform(0, 10, (B, N, N)).astype(np.float32)
        eb = rng.uniform(0, 10, (B, N, N)).astype(np.float32)
        routed = (rng.integers(0, 3, (B, N, N)) * (rng.random((B, N, N)) < 0.4)).astype(np.float32)
        reward = rng.random((B, N)).astype(np.float32)
        for lr in (0.0, 0.1, 2.5):
            want = REFERENCE.synergy_update(c, ea, eb, routed, reward, lr=lr)
            got = backend.synergy_update(c, ea, eb, routed, reward, lr=lr)
            assert_matches("synergy_update", got, want, f"B={B} N={N} lr={lr}")


def _weights_inputs(
    rng: np.random.Generator, B: int, N: int, *, sink: int, p_selected: float
) -> dict[str, Any]:
    """Random batches for bandit_weights with its edge cases: graph 0 has only the sink alive, graph 1 one live
    node besides it, graph 2 nothing selected, graph 3 every node far from the task (psi >= omega1: every
    candidate beyond a lower threshold); synergies repeat (ties for the maximum) and some are negative (zeta <= 0)."""
    adj = rng.random((B, N, N)) < 0.4
    alive = rng.random((B, N)) < 0.8
    alive[:, sink] = True
    alpha = np.exp(rng.uniform(np.log(0.05), np.log(60.0), (B, N))).astype(np.float32)
    beta = np.exp(rng.uniform(np.log(0.05), np.log(60.0), (B, N))).astype(np.float32)
    c_syn = rng.choice(np.array([-0.5, 0.0, 1.0, 2.0], np.float32), (B, N, N))
    free = rng.random((B, N, N)) < 0.5
    c_syn[free] = rng.uniform(-1.0, 4.0, int(free.sum()))
    similarity = np.stack([rng.random((B, N)), rng.uniform(-1.0, 1.0, (B, N))], axis=-1)
    similarity[rng.random((B, N)) < 0.2] = 0.0  # nodes without one
    similarity[..., 0][rng.random((B, N)) < 0.1] = 1.0
    selected = rng.random((B, N)) < p_selected
    edge = [b for b in range(4) if b < B]
    if 0 in edge:
        alive[0] = False
        alive[0, sink] = True
    if 1 in edge and N > 1:
        alive[1] = False
        alive[1, [sink, (sink + 1) % N]] = True
    if 2 in edge:
        selected[2] = False
    if 3 in edge:
        similarity[3] = (0.0, -1.0)
    return {"adj": adj, "alive": alive, "alpha": alpha, "beta": beta, "c_syn": c_syn.astype(np.float32),
            "similarity": similarity, "selected": selected, "sink": sink}  # fmt: skip


def _weights_cases() -> list[tuple[str, dict[str, Any]]]:
    rng = np.random.default_rng(19)
    cases = []
    # N from one node to 70 (groups S + {d} up to ~65 nodes: every branch of the pairwise sums); B = 64, N = 24
    # takes the core's OpenMP path
    for B, N, p_sel in [
        (1, 1, 0.5),
        (2, 2, 0.5),
        (5, 5, 0.3),
        (20, 17, 0.2),
        (64, 24, 0.3),
        (6, 40, 0.7),
        (3, 70, 0.9),
    ]:
        for sink in sorted({0, 1 % N, N - 1}):
            arrays = _weights_inputs(rng, B, N, sink=sink, p_selected=p_sel)
            for lam, eta, omega1, omega3, threshold, c0 in [
                (1.0, 1.0, 0.25, 0.25, 0.75, 1.0),
                (0.0, 0.0, 1.0, 0.0, 0.3, 0.5),
                (3.5, 2.5, 0.7, 1.3, 0.0, 1.0),
                (1.0, 0.5, 0.25, 0.25, -1.0, 2.0),
                (1.0, 1.0, 0.0, 0.0, 2.0, 1.0),
            ]:
                kw = {**arrays, "lam": lam, "eta": eta, "omega1": omega1, "omega3": omega3,
                      "threshold": threshold, "c0": c0}  # fmt: skip
                cases.append((f"B={B} N={N} sink={sink} lam={lam} eta={eta} threshold={threshold}", kw))
    return cases


def _weights_call(backend: Backend, kw: dict[str, Any]) -> Any:
    return _call_positional(backend.bandit_weights, _WEIGHT_ARRAYS, kw)


_WEIGHT_ARRAYS = ("adj", "alive", "alpha", "beta", "c_syn", "similarity", "selected")


def _call_positional(fn: Callable[..., Any], positional: tuple[str, ...], kw: dict[str, Any]) -> Any:
    rest = {k: v for k, v in kw.items() if k not in positional}
    return fn(*(kw[name] for name in positional), **rest)


@needs_core
@on_backends("bandit_weights", reference=False, cuda=False)
def test_bandit_weights_parity(backend: Backend) -> None:
    for ctx, kw in _weights_cases():
        want = _weights_call(REFERENCE, kw)
        assert_matches("bandit_weights", _weights_call(backend, kw), want, ctx)


@on_backends("bandit_weights", cuda=False)
def test_bandit_weights_edge_cases(backend: Backend) -> None:
    kw = _weights_inputs(np.random.default_rng(20), 4, 9, sink=1, p_selected=0.4)
    got = _weights_call(backend, {**kw, "threshold": 0.2})
    live_edges = kw["adj"] & kw["alive"][:, :, None] & kw["alive"][:, None, :] & ~np.eye(9, dtype=bool)
    assert not got.weights[~live_edges].any() and not got.psi[~kw["alive"]].any()
    # graph 0: only the sink is alive; graph 1: one live node, its edge into the sink weighs 1
    assert not got.weights[0].any()
    assert got.weights[1, 2, 1] == (1.0 if live_edges[1, 2, 1] else 0.0)
    # graph 3: every node is beyond the threshold (psi >= 0.25 with omega 0.25, 0.25, Jaccard 0 and cosine -1):
    # a source keeps its nearest successor, unless the sink is one of them (then the sink alone)
    for s in range(9):
        succ = [d for d in np.flatnonzero(live_edges[3, s]) if d != 1]
        kept = [d for d in succ if got.weights[3, s, d] > 0]
        if succ and not live_edges[3, s, 1]:
            nearest = min(succ, key=lambda d: got.psi[3, d])
            assert kept in ([nearest], []), (s, kept, nearest)
        else:
            assert kept == [], (s, kept)
        assert got.weights[3, s, 1] == (1.0 if live_edges[3, s, 1] else 0.0)


@on_backends("bandit_weights", cuda=False)
def test_bandit_weights_single_graph_and_strided_inputs(backend: Backend) -> None:
    kw = _weights_inputs(np.random.default_rng(21), 12, 14, sink=1, p_selected=0.3)
    whole = _weights_call(backend, kw)
    for b in (0, 5, 11):
        one = _weights_call(backend, {k: v[b] if isinstance(v, np.ndarray) else v for k, v in kw.items()})
        assert_matches(
            "bandit_weights", one, type(whole)(whole.weights[b], whole.psi[b]), f"graph {b}", exact=True
        )
    # every other graph, nodes in reverse order: the result of the same graphs laid out contiguously
    views = {"adj": np.s_[::2, ::-1, ::-1], "c_syn": np.s_[::2, ::-1, ::-1], "similarity": np.s_[::2, ::-1]}
    sink = 14 - 1 - 1
    strided = {
        k: v[views.get(k, np.s_[::2, ::-1])] if isinstance(v, np.ndarray) else v for k, v in kw.items()
    }
    strided["sink"] = sink
    contiguous = {k: np.ascontiguousarray(v) if isinstance(v, np.ndarray) else v for k, v in strided.items()}
    assert_matches(
        "bandit_weights", _weights_call(backend, strided), _weights_call(backend, contiguous), exact=True
    )


@on_backend_names("bandit_weights")
def test_bandit_weights_of_dead_nodes_are_not_read(backend: str) -> None:
    kw = _weights_inputs(np.random.default_rng(22), 3, 6, sink=1, p_selected=0.4)
    alive = kw["alive"].copy()
    alive[2, 4] = False
    alpha, beta = kw["alpha"].copy(), kw["beta"].copy()
    alpha[2, 4], beta[2, 4] = np.nan, 0.0
    got = _call(
        "bandit_weights", _WEIGHT_ARRAYS, backend, {**kw, "alive": alive, "alpha": alpha, "beta": beta}
    )
    want = _call("bandit_weights", _WEIGHT_ARRAYS, backend, {**kw, "alive": alive})
    assert_matches("bandit_weights", got, want, exact=True)
    assert got.psi[2, 4] == 0 and not got.weights[2, :, 4].any()


# ------------------------------------------------------------------------------- batch, chunks and threads


@on_backends("bandit_select", cuda=False)
def test_single_graph_and_chunks_equal_the_batch(backend: Backend) -> None:
    rng = np.random.default_rng(9)
    adj, alpha, beta, weights, active = _graphs(rng, 50, 12)
    kw = {"seed": 77, "step": 2, "weights": weights, "active": active}
    whole = backend.bandit_select(adj, alpha, beta, 2, **kw)
    for b in (0, 17, 49):
        one = backend.bandit_select(
            adj[b],
            alpha[b],
            beta[b],
            2,
            seed=77,
            step=2,
            weights=weights[b],
            active=active[b],
            graph_offset=b,
        )
        for name in ("chosen", "choices", "theta"):
            np.testing.assert_array_equal(getattr(one, name), getattr(whole, name)[b], err_msg=f"{b} {name}")
    parts = [
        backend.bandit_select(
            adj[lo:hi],
            alpha[lo:hi],
            beta[lo:hi],
            2,
            seed=77,
            step=2,
            weights=weights[lo:hi],
            active=active[lo:hi],
            graph_offset=lo,
        )
        for lo, hi in ((0, 13), (13, 14), (14, 50))
    ]
    for name in ("chosen", "choices", "theta"):
        np.testing.assert_array_equal(np.concatenate([getattr(p, name) for p in parts]), getattr(whole, name))
    # a graph's draws do not depend on its neighbours in the batch
    other = alpha.copy()
    other[1:] = 1.0
    np.testing.assert_array_equal(backend.bandit_select(adj, other, beta, 2, **kw).theta[0], whole.theta[0])


_DIGEST = """
import hashlib, numpy as np
from toporoute import ops
rng = np.random.default_rng(10)
B, N = 512, 32
adj = rng.random((B, N, N)) < 0.3
alpha = rng.uniform(0.05, 8, (B, N)).astype(np.float32)
beta = rng.uniform(0.05, 8, (B, N)).astype(np.float32)
r = ops.bandit_select(adj, alpha, beta, 2, seed=123, step=5, backend="{backend}")
h = hashlib.sha256()
for a in (r.chosen, r.choices, r.theta):
    h.update(np.ascontiguousarray(a).tobytes())
print(h.hexdigest())
"""


def _digest(backend: str, threads: int) -> str:
    # the toporoute this process imported (an installed package in CI, the source tree in a dev build)
    where = Path(toporoute.__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(where)}
    out = subprocess.run(
        [sys.executable, "-c", _DIGEST.format(backend=backend)], env=env, capture_output=True, text=True,
        check=True, timeout=300,
    )  # fmt: skip
    return out.stdout.strip()


@needs_core
def test_selection_does_not_depend_on_the_thread_count() -> None:
    # B = 512 graphs of 32 nodes take the core's OpenMP path; 1, 2 and 3 threads and the reference agree
    digests = {_digest("cpu", t) for t in (1, 2, 3)}
    assert digests == {_digest("reference", 1)}


@needs_core
def test_concurrent_callers() -> None:
    rng = np.random.default_rng(11)
    cases = [_graphs(rng, 200, 16) for _ in range(4)]
    wants = [REFERENCE.bandit_select(c[0], c[1], c[2], 2, seed=i) for i, c in enumerate(cases)]

    def call(i: int) -> Any:
        adj, alpha, beta, _, _ = cases[i % 4]
        return ops.bandit_select(adj, alpha, beta, 2, seed=i % 4, backend="cpu")

    with ThreadPoolExecutor(max_workers=4) as pool:
        gots = list(pool.map(call, range(12)))
    for i, got in enumerate(gots):
        assert_matches("bandit_select", got, wants[i % 4], f"call {i}")


# ----------------------------------------------------------------------------------------------------- errors


def _select_inputs() -> dict[str, Any]:
    rng = np.random.default_rng(12)
    adj, alpha, beta, weights, active = _graphs(rng, 2, 4)
    return {"adj": adj, "alpha": alpha, "beta": beta, "k": 2, "weights": weights, "active": active, "seed": 1}


def _call(op: str, positional: tuple[str, ...], backend: str, kw: dict[str, Any]) -> Any:
    """``ops.<op>`` with the arguments named in ``positional`` taken from ``kw`` in order, the rest by keyword."""
    args = [kw.pop(name) for name in positional]
    return getattr(ops, op)(*args, backend=backend, **kw)


def _select(backend: str, **changes: Any) -> Any:
    return _call("bandit_select", ("adj", "alpha", "beta", "k"), backend, {**_select_inputs(), **changes})


SELECT_ERRORS = [
    ("adj", {"adj": np.zeros((2, 4, 4), np.int32)}, errors.DTypeError),
    ("adj", {"adj": np.zeros((2, 4, 3), bool)}, errors.ShapeError),
    ("alpha", {"alpha": np.ones((2, 5), np.float32)}, errors.ShapeError),
    ("beta", {"beta": np.ones((2, 4), np.float64)}, errors.DTypeError),
    ("weights", {"weights": np.ones((2, 4, 5), np.float32)}, errors.ShapeError),
    ("active", {"active": np.ones((2, 4), np.int8)}, errors.DTypeError),
    ("k", {"k": 0}, errors.OutOfRangeError),
    ("k", {"k": 1.5}, errors.InvalidArgumentError),
    ("k", {"k": True}, errors.InvalidArgumentError),
    ("seed", {"seed": -1}, errors.OutOfRangeError),
    ("seed", {"seed": 2**64}, errors.OutOfRangeError),
    ("seed", {"seed": "1"}, errors.InvalidArgumentError),
    ("step", {"step": -1}, errors.OutOfRangeError),
    ("step", {"step": 2**32}, errors.OutOfRangeError),
    ("mode", {"mode": "greedy"}, errors.InvalidArgumentError),
    ("graph_offset", {"graph_offset": -1}, errors.OutOfRangeError),
    ("graph_offset", {"graph_offset": 2**32 - 1}, errors.OutOfRangeError),  # B = 2 graphs do not fit
]


def _bad(name: str, value: float, at: tuple[int, ...]) -> dict[str, Any]:
    x = _select_inputs()[name].copy()
    x[at] = value
    return {name: x}


VALUE_ERRORS = [
    ("alpha", _bad("alpha", 0.0, (1, 2)), errors.OutOfRangeError),
    ("alpha", _bad("alpha", np.nan, (1, 2)), errors.NonFiniteError),
    ("beta", _bad("beta", -1.0, (0, 0)), errors.OutOfRangeError),
    ("beta", _bad("beta", np.inf, (0, 3)), errors.NonFiniteError),
    ("weights", _bad("weights", -0.5, (1, 0, 1)), errors.OutOfRangeError),
    ("weights", _bad("weights", np.nan, (1, 3, 3)), errors.NonFiniteError),
    # the first fault kind in the reference's order wins: alpha's NaN in graph 1 over beta's 0 in graph 0
    ("alpha", {**_bad("alpha", np.nan, (1, 1)), **_bad("beta", 0.0, (0, 0))}, errors.NonFiniteError),
]


@pytest.mark.parametrize(("arg", "change", "cls"), VALUE_ERRORS)
@on_backend_names("bandit_select")
def test_bandit_select_value_errors(backend: str, arg: str, change: dict[str, Any], cls: type) -> None:
    active = np.ones((2, 4), bool)
    with pytest.raises(cls) as err:
        _select(backend, active=active, **change)
    assert err.value.arg == arg
    assert "graph" in str(err.value)


@on_backend_names("bandit_select")
def test_parameters_of_inactive_nodes_are_not_read(backend: str) -> None:
    kw = _select_inputs()
    alpha, beta = kw["alpha"].copy(), kw["beta"].copy()
    active = np.ones((2, 4), bool)
    active[1, 2] = False
    alpha[1, 2], beta[1, 2] = np.nan, 0.0
    got = _select(backend, alpha=alpha, beta=beta, active=active)
    assert got.theta[1, 2] == 0 and not got.chosen[:, :, 2][1].any()


def test_cuda_backend_is_refused() -> None:
    # bandit_select has a CUDA kernel (tests/ops/test_cuda_stats.py); the two update ops have none
    a = np.ones((2, 3), np.float32)
    with pytest.raises(errors.BackendUnavailableError):
        ops.bandit_update(a, a, np.ones((2, 3), bool), a * 0.5, backend="cuda")
    c = np.ones((3, 3), np.float32)
    with pytest.raises(errors.BackendUnavailableError):
        ops.synergy_update(c, c, c, c, np.ones(3, np.float32), backend="cuda")


def _update(backend: str, **changes: Any) -> Any:
    a = np.ones((2, 3), np.float32)
    kw = {"alpha": a, "beta": a, "selected": np.ones((2, 3), bool), "reward": a * 0.5, **changes}
    return _call("bandit_update", ("alpha", "beta", "selected", "reward"), backend, kw)


def _at(value: float, shape: tuple[int, ...] = (2, 3), at: tuple[int, ...] = (1, 1)) -> np.ndarray:
    x = np.full(shape, 0.5, np.float32)
    x[at] = value
    return x


UPDATE_ERRORS = [
    ("alpha", {"alpha": np.ones((2, 3), np.float64)}, errors.DTypeError),
    ("beta", {"beta": np.ones((3, 2), np.float32)}, errors.ShapeError),
    ("selected", {"selected": np.ones((2, 3), np.float32)}, errors.DTypeError),
    ("reward", {"reward": np.ones(3, np.float32)}, errors.ShapeError),
    ("dt", {"dt": np.ones((2, 4), np.float32)}, errors.ShapeError),
    ("km", {"km": np.ones((2, 3), np.int32)}, errors.DTypeError),
    ("gamma", {"gamma": 1.5}, errors.OutOfRangeError),
    ("gamma", {"gamma": "0.5"}, errors.InvalidArgumentError),
    ("delta", {"delta": -0.1}, errors.OutOfRangeError),
    ("prior", {"prior": 0.0}, errors.OutOfRangeError),
    ("prior", {"prior": math.nan}, errors.OutOfRangeError),
    ("alpha", {"alpha": _at(0.0)}, errors.OutOfRangeError),
    ("beta", {"beta": _at(np.nan)}, errors.NonFiniteError),
    ("reward", {"reward": _at(1.5)}, errors.OutOfRangeError),
    ("reward", {"reward": _at(-0.1)}, errors.OutOfRangeError),
    ("dt", {"dt": _at(-1.0)}, errors.OutOfRangeError),
    ("km", {"km": _at(np.inf)}, errors.NonFiniteError),
    ("km", {"km": _at(2.0)}, errors.OutOfRangeError),
]


def _synergy(backend: str, **changes: Any) -> Any:
    c = np.ones((2, 3, 3), np.float32)
    kw = {
        "c_syn": c,
        "edge_alpha": c,
        "edge_beta": c,
        "routed": c,
        "reward": np.ones((2, 3), np.float32),
        **changes,
    }
    return _call("synergy_update", ("c_syn", "edge_alpha", "edge_beta", "routed", "reward"), backend, kw)


SYNERGY_ERRORS = [
    ("c_syn", {"c_syn": np.ones((2, 3, 4), np.float32)}, errors.ShapeError),
    ("edge_alpha", {"edge_alpha": np.ones((2, 3, 3), np.float64)}, errors.DTypeError),
    ("edge_beta", {"edge_beta": np.ones((2, 3), np.float32)}, errors.ShapeError),
    ("routed", {"routed": np.ones((1, 3, 3), np.float32)}, errors.ShapeError),
    ("reward", {"reward": np.ones((2, 4), np.float32)}, errors.ShapeError),
    ("lr", {"lr": -1.0}, errors.OutOfRangeError),
    ("lr", {"lr": None}, errors.InvalidArgumentError),
    ("c_syn", {"c_syn": _at(np.nan, (2, 3, 3), (1, 2, 0))}, errors.NonFiniteError),
    ("edge_alpha", {"edge_alpha": _at(-1.0, (2, 3, 3), (0, 0, 1))}, errors.OutOfRangeError),
    ("edge_beta", {"edge_beta": _at(np.inf, (2, 3, 3), (0, 0, 1))}, errors.NonFiniteError),
    ("routed", {"routed": _at(-2.0, (2, 3, 3), (1, 1, 1))}, errors.OutOfRangeError),
    ("reward", {"reward": _at(1.01)}, errors.OutOfRangeError),
]


def _weights_kw(backend: str, **changes: Any) -> Any:
    kw = _weights_inputs(np.random.default_rng(23), 2, 4, sink=1, p_selected=0.5)
    kw["alive"][:] = True
    return _call("bandit_weights", _WEIGHT_ARRAYS, backend, {**kw, **changes})


def _w_at(name: str, value: float, at: tuple[int, ...]) -> dict[str, Any]:
    x = _weights_inputs(np.random.default_rng(23), 2, 4, sink=1, p_selected=0.5)[name].copy()
    x[at] = value
    return {name: x}


WEIGHTS_ERRORS = [
    ("adj", {"adj": np.zeros((2, 4, 4), np.int32)}, errors.DTypeError),
    ("adj", {"adj": np.zeros((2, 4, 3), bool)}, errors.ShapeError),
    ("adj", {"adj": np.zeros((2, 0, 0), bool), "alive": np.zeros((2, 0), bool)}, errors.ShapeError),
    ("alive", {"alive": np.ones((2, 3), bool)}, errors.ShapeError),
    ("alpha", {"alpha": np.ones((2, 4), np.float64)}, errors.DTypeError),
    ("beta", {"beta": np.ones((2, 5), np.float32)}, errors.ShapeError),
    ("c_syn", {"c_syn": np.ones((2, 4, 4), np.float64)}, errors.DTypeError),
    ("c_syn", {"c_syn": np.ones((2, 4, 3), np.float32)}, errors.ShapeError),
    ("similarity", {"similarity": np.zeros((2, 4, 2), np.float32)}, errors.DTypeError),
    ("similarity", {"similarity": np.zeros((2, 4, 3))}, errors.ShapeError),
    ("similarity", {"similarity": np.zeros((2, 4))}, errors.ShapeError),
    ("selected", {"selected": np.ones((2, 4), np.int8)}, errors.DTypeError),
    ("sink", {"sink": 4}, errors.OutOfRangeError),
    ("sink", {"sink": -1}, errors.OutOfRangeError),
    ("sink", {"sink": 1.0}, errors.InvalidArgumentError),
    ("lam", {"lam": -0.1}, errors.OutOfRangeError),
    ("eta", {"eta": math.inf}, errors.OutOfRangeError),
    ("omega1", {"omega1": -1.0}, errors.OutOfRangeError),
    ("omega3", {"omega3": "0.25"}, errors.InvalidArgumentError),
    ("threshold", {"threshold": math.nan}, errors.OutOfRangeError),
    ("threshold", {"threshold": None}, errors.InvalidArgumentError),
    ("c0", {"c0": 0.0}, errors.OutOfRangeError),
    ("alpha", _w_at("alpha", 0.0, (1, 2)), errors.OutOfRangeError),
    ("beta", _w_at("beta", np.nan, (0, 3)), errors.NonFiniteError),
    ("c_syn", _w_at("c_syn", np.inf, (1, 0, 2)), errors.NonFiniteError),
    ("similarity", _w_at("similarity", np.nan, (1, 1, 1)), errors.NonFiniteError),
    ("similarity", _w_at("similarity", 1.5, (0, 2, 0)), errors.OutOfRangeError),
    ("similarity", _w_at("similarity", -1.01, (1, 3, 1)), errors.OutOfRangeError),
    # the first fault kind in the reference's order wins: alpha's 0 in graph 1 over c_syn's NaN in graph 0
    ("alpha", {**_w_at("alpha", 0.0, (1, 1)), **_w_at("c_syn", np.nan, (0, 0, 0))}, errors.OutOfRangeError),
]


def _argument_errors(call: Callable[..., Any], table: list[tuple[str, dict[str, Any], type]]) -> list[Any]:
    return [pytest.param(call, *row, id=f"{call.__name__[1:]}-{row[0]}-{i}") for i, row in enumerate(table)]


@pytest.mark.parametrize(
    ("call", "arg", "change", "cls"),
    _argument_errors(_select, SELECT_ERRORS)
    + _argument_errors(_update, UPDATE_ERRORS)
    + _argument_errors(_synergy, SYNERGY_ERRORS)
    + _argument_errors(_weights_kw, WEIGHTS_ERRORS),
)
@on_backend_names("bandit_select", "bandit_update", "synergy_update", "bandit_weights")
def test_argument_errors(
    backend: str, call: Callable[..., Any], arg: str, change: dict[str, Any], cls: type
) -> None:
    with pytest.raises(cls) as err:
        call(backend, **change)
    assert err.value.arg == arg, (backend, err.value)
    assert arg in str(err.value)


@needs_core
def test_a_core_without_the_kernels_falls_back_to_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    # a compiled core built before these ops: the default backend is the reference, backend="cpu" says why not
    from toporoute import backends
    from toporoute.backends import cpu

    monkeypatch.setattr(cpu, "has_op", lambda name: False)
    # what earlier calls resolved, with the real core
    monkeypatch.setattr(backends, "_DEFAULT_KERNEL", {})
    monkeypatch.setattr(backends, "_HOST_KERNEL", {})
    kw = _select_inputs()
    args = (kw["adj"], kw["alpha"], kw["beta"], 2)
    want = REFERENCE.bandit_select(*args, seed=3)
    assert_matches("bandit_select", ops.bandit_select(*args, seed=3), want)
    with pytest.raises(errors.BackendUnavailableError, match="no bandit_select kernel") as err:
        ops.bandit_select(*args, seed=3, backend="cpu")
    assert err.value.arg == "backend"
    # the DAG ops go through the same check (backends.kernel)
    adj = np.zeros((4, 4), bool)
    adj[0, 1] = True
    alive = np.array([True, True, False, False])
    edits = np.array([[1, 0, -1]], np.int32)
    got = ops.dag_edit(adj, alive, edits)
    want_edit = ops.dag_edit(adj, alive, edits, backend="reference")
    np.testing.assert_array_equal(got.adj, want_edit.adj)
    with pytest.raises(errors.BackendUnavailableError, match="no dag_repair kernel"):
        ops.dag_repair(adj, alive, backend="cpu")


@pytest.mark.parametrize(("B", "N"), [(0, 3), (2, 0), (0, 0)])
@on_backend_names("bandit_select", "bandit_update", "synergy_update", "bandit_weights")
def test_empty_batches_and_graphs(backend: str, B: int, N: int) -> None:
    adj = np.zeros((B, N, N), bool)
    ones = np.ones((B, N), np.float32)
    sel = ops.bandit_select(adj, ones, ones, 2, seed=1, backend=backend)
    assert (sel.chosen.shape, sel.choices.shape, sel.theta.shape) == ((B, N, N), (B, N, 2), (B, N))
    upd = ops.bandit_update(ones, ones, np.zeros((B, N), bool), ones, backend=backend)
    assert upd.alpha.shape == upd.beta.shape == (B, N)
    f = adj.astype(np.float32)
    assert ops.synergy_update(f, f, f, f, ones, backend=backend).c_syn.shape == (B, N, N)
    if N:  # bandit_weights needs a sink
        alive = np.ones((B, N), bool)
        got = ops.bandit_weights(
            adj, alive, ones, ones, f, np.zeros((B, N, 2)), alive, sink=0, backend=backend
        )
        assert (got.weights.shape, got.psi.shape) == ((B, N, N), (B, N))
