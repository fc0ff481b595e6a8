"""HiVA bandit ops in the compiled core against the numpy reference backend, timed in the same run
(bench/_compare.py) at B = 1 and B = 4096 graphs of N = 32 nodes, ratios printed (no timing assertion, as
everywhere in bench/):

- ``ops.bandit_select`` (random DAGs, k = 2, Thompson draws) against issue 18's targets (>= 10x at B = 1, >= 20x
  at B = 4096), after checking that both backends select exactly the same successors;
- one HiVA update step, ``ops.bandit_update`` then ``ops.synergy_update`` (no target stated), after checking that
  both backends give the same Beta and synergy states.

Run: ``python -m pytest bench/test_bench_hiva.py -s`` (``TOPOROUTE_BENCH=smoke``: B = 1 and 64, one round).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from toporoute import backends, ops
from toporoute.backends.samples import bandit_inputs

from ._compare import machine, report, seconds
from ._scale import pick
from .test_bench_ops import host_backends

N = 32
K = 2
BATCHES = pick([1, 4096], [1, 64])
TARGETS = {1: 10.0, 4096: 20.0}  # issue 18

needs_core = pytest.mark.skipif(not backends.available()["cpu"][0], reason="the compiled core is not built")


@needs_core
@pytest.mark.parametrize("B", BATCHES)
def test_bandit_select_cpu_vs_reference(B: int) -> None:
    adj, alpha, beta = bandit_inputs(B, N)

    def run(backend: str) -> ops.BanditSelection:
        return ops.bandit_select(adj, alpha, beta, K, seed=2026, step=3, backend=backend)

    want, got = run("reference"), run("cpu")
    np.testing.assert_array_equal(got.choices, want.choices)
    np.testing.assert_array_equal(got.theta, want.theta)
    assert (got.choices[:, :, 0] >= 0).any()
    slow = seconds(lambda: run("reference"))
    fast = seconds(lambda: run("cpu"))
    report(
        f"bandit_select B={B} N={N} k={K} thompson [{machine(omp=True)}]",
        "reference",
        slow,
        "cpu",
        fast,
        TARGETS.get(B),
    )


@needs_core
@pytest.mark.parametrize("B", BATCHES)
def test_bandit_and_synergy_updates_cpu_vs_reference(B: int) -> None:
    step = _update_step(B)
    (want_state, want_syn), (got_state, got_syn) = step("reference"), step("cpu")
    for got, want in ((got_state, want_state), (got_syn, want_syn)):
        for name, value in vars(want).items():
            np.testing.assert_allclose(getattr(got, name), value, rtol=1e-6, atol=1e-6, err_msg=name)
    slow = seconds(lambda: step("reference"))
    fast = seconds(lambda: step("cpu"))
    report(
        f"bandit_update + synergy_update B={B} N={N} [{machine(omp=True)}]",
        "reference",
        slow,
        "cpu",
        fast,
        None,
    )


@pytest.mark.parametrize("backend", host_backends("bandit_select"))
@pytest.mark.parametrize("B", BATCHES)
def test_bandit_select(benchmark, backend: str, B: int) -> None:
    benchmark.group = f"bandit_select N={N} k={K} B={B}"
    adj, alpha, beta = bandit_inputs(B, N)
    got = benchmark(ops.bandit_select, adj, alpha, beta, K, seed=2026, backend=backend)
    assert got.chosen.sum(axis=2).max() <= K


def _update_step(B: int) -> Callable[[str], tuple[ops.BetaState, ops.SynergyState]]:
    """One HiVA update on a backend: the Beta posteriors of the selected edges, then the synergy statistics."""
    rng = np.random.default_rng(1)
    adj, alpha, beta = bandit_inputs(B, N)
    selected = rng.random((B, N)) < 0.5
    reward = rng.random((B, N)).astype(np.float32)
    routed = adj.astype(np.float32)
    c = np.ones((B, N, N), np.float32)

    def step(backend: str) -> tuple[ops.BetaState, ops.SynergyState]:
        return (
            ops.bandit_update(alpha, beta, selected, reward, backend=backend),
            ops.synergy_update(c, c, c, routed, reward, backend=backend),
        )

    return step


@pytest.mark.parametrize("backend", host_backends("bandit_update", "synergy_update"))
def test_bandit_and_synergy_updates(benchmark, backend: str) -> None:
    B = pick(4096, 64)
    benchmark.group = f"bandit_update + synergy_update N={N} B={B}"
    state, syn = benchmark(_update_step(B), backend)
    assert (state.alpha > 0).all() and (syn.c_syn >= 1).all()
