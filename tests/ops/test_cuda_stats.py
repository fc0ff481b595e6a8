"""The CUDA kernels of graph_stats, conductor_density and bandit_select beyond the parity grid: batches of many
blocks, empty inputs, bad input on both paths, the host path's chunks, and how often the device's theta differs
from the CPU's (the device's log/cos/exp/pow are CUDA's, not the C library's).

Every test is marked ``cuda``: tests/conftest.py skips them with the reason when no GPU is usable (and fails
them under ``--require-cuda``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _backends import REFERENCE, Backend, assert_matches, backend_params

from toporoute import errors, ops
from toporoute.backends import _cuda_stats as stats
from toporoute.backends import cuda

pytestmark = pytest.mark.cuda

# numpy in and out, and CuPy arrays / PyTorch tensors through DLPack (each skips when not installed)
ALL = backend_params("graph_stats", reference=False)
CUDA = [p for p in ALL if p.id.startswith("cuda")]
DEVICE_ARRAYS = [p for p in CUDA if p.id in ("cuda-cupy", "cuda-torch")]


def _graphs(rng: np.random.Generator, B: int, N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return rng.random((B, N, N)) < 0.3, rng.random((B, N, N)) < 0.3, rng.random((B, N)) < 0.8


@pytest.mark.parametrize("backend", CUDA)
@pytest.mark.parametrize("N", [5, 8, 11, 32, 33, 70])
def test_graph_stats_many_blocks(backend: Backend, N: int) -> None:
    # 32 // N graphs per warp for N <= 32 (none idle at 8 and 32, idle lanes at 5 and 11), a warp per graph
    # above; B spans many blocks and ends in a partly filled warp
    rng = np.random.default_rng(N)
    B = 20011 if N <= 32 else 3001
    adj, prev, active = _graphs(rng, B, N)
    for act, p in ((None, None), (active, prev)):
        want = ops.graph_stats(adj, act, prev=p, backend="cpu")
        assert_matches("graph_stats", backend.graph_stats(adj, act, prev=p), want, f"B={B} N={N}", exact=True)


@pytest.mark.parametrize("backend", CUDA)
@pytest.mark.parametrize(("B", "N"), [(0, 0), (0, 4), (3, 0), (0, 40)])
def test_graph_stats_empty(backend: Backend, B: int, N: int) -> None:
    adj, prev, active = _graphs(np.random.default_rng(1), B, N)
    for act, p in ((None, None), (active, prev)):
        assert_matches(
            "graph_stats", backend.graph_stats(adj, act, prev=p), REFERENCE.graph_stats(adj, act, prev=p)
        )


@pytest.mark.parametrize("backend", CUDA)
def test_conductor_density_many_blocks_and_empty(backend: Backend) -> None:
    rng = np.random.default_rng(5)
    n = 300_007
    nodes = rng.integers(1, 200, n)
    steps = (rng.random(n) * nodes).astype(np.int64) + 1
    edges = rng.integers(0, 5000, n)
    n_max = rng.integers(1, 150, n)
    args = (nodes, edges, steps, n_max)
    flat = [backend.put(x) for x in args]  # the kernel itself: ops' checks take numpy arrays
    got = backend.fetch(stats.conductor_density(*flat))
    assert_matches("conductor_density", got, REFERENCE.conductor_density(*args))
    empty = [backend.put(np.zeros(0, np.int64)) for _ in range(4)]
    got = backend.fetch(stats.conductor_density(*empty))
    assert got.reward.shape == (0,) and got.reward.dtype == np.float64


def test_conductor_density_bad_input_on_the_host_path_is_the_cpus() -> None:
    from toporoute import _core

    ok = np.array([3, 4, 5, 6], np.int64)
    for arg, at, value in (("edges", 2, -1), ("steps", 1, 9), ("n_max", 3, 0), ("nodes", 0, 0)):
        args = {"nodes": ok.copy(), "edges": ok.copy(), "steps": ok - 2, "n_max": ok.copy()}
        args[arg][at] = value
        with pytest.raises(errors.InvalidArgumentError) as want:
            _core.conductor_density(*args.values())
        with pytest.raises(type(want.value)) as got:
            stats.conductor_density(*args.values())
        assert str(got.value) == str(want.value) and got.value.arg == arg


@pytest.mark.parametrize("backend", DEVICE_ARRAYS)
def test_conductor_density_bad_input_on_device_arrays(backend: Backend) -> None:
    nodes = np.array([3, 4, 5, 6, 7], np.int64)
    steps = np.array([1, 9, 1, 1, 8], np.int64)  # index 1 (and 4) outside [1, nodes]
    edges = np.array([0, 0, -2, 0, 0], np.int64)  # index 2 negative, after index 1
    stats.conductor_density(*(backend.put(x) for x in (nodes, edges, steps, nodes)))
    with pytest.raises(errors.OutOfRangeError, match=r"steps must be in \[1, nodes\].* at index 1") as e:
        cuda.synchronize()
    assert e.value.arg == "steps"


# -------------------------------------------------------------------------------------------- bandit_select


def _bandit_inputs(
    rng: np.random.Generator, B: int, N: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shapes from 0.01 to 100 (a third below 1: boosted draws, some underflowing both), weights with zeros and
    ties, 80% active nodes."""
    adj = rng.random((B, N, N)) < 0.4
    alpha = np.exp(rng.uniform(np.log(0.01), np.log(100.0), (B, N))).astype(np.float32)
    beta = np.exp(rng.uniform(np.log(0.01), np.log(100.0), (B, N))).astype(np.float32)
    weights = rng.choice(np.array([0.0, 0.5, 1.0, 2.0], np.float32), (B, N, N))
    free = rng.random((B, N, N)) < 0.5
    weights[free] = rng.random(int(free.sum()), dtype=np.float32)
    return adj, alpha, beta, weights, rng.random((B, N)) < 0.8


@pytest.mark.parametrize("backend", CUDA)
@pytest.mark.parametrize("k", [1, 2, 3, 8, 9, 40])
@pytest.mark.parametrize("mode", ["thompson", "mean"])
def test_bandit_select_equals_the_cpu(backend: Backend, k: int, mode: str) -> None:
    # k <= 8 keeps the top in registers, larger k ranks the candidates; equal theta gives equal choices
    rng = np.random.default_rng(k)
    adj, alpha, beta, weights, active = _bandit_inputs(rng, 777, 33)
    for kw in ({}, {"weights": weights, "active": active}):
        want = ops.bandit_select(
            adj, alpha, beta, k, seed=99, step=5, mode=mode, graph_offset=3, backend="cpu", **kw
        )
        got = backend.bandit_select(adj, alpha, beta, k, seed=99, step=5, mode=mode, graph_offset=3, **kw)
        assert_matches("bandit_select", got, want, f"k={k} mode={mode} {sorted(kw)}")


@pytest.mark.parametrize("backend", CUDA)
@pytest.mark.parametrize(("B", "N", "k"), [(0, 0, 1), (0, 5, 2), (4, 0, 3), (3, 1, 2)])
def test_bandit_select_empty(backend: Backend, B: int, N: int, k: int) -> None:
    adj, alpha, beta, weights, active = _bandit_inputs(np.random.default_rng(2), B, N)
    want = REFERENCE.bandit_select(adj, alpha, beta, k, weights=weights, seed=1, active=active)
    got = backend.bandit_select(adj, alpha, beta, k, weights=weights, seed=1, active=active)
    assert_matches("bandit_select", got, want)


def _bad_select_inputs() -> dict[str, Any]:
    adj, alpha, beta, weights, active = _bandit_inputs(np.random.default_rng(8), 6, 5)
    active[:] = True
    alpha[4, 1] = -1.0  # alpha <= 0 in graph 4 ...
    beta[2, 3] = np.nan  # ... is reported before beta's NaN in graph 2 (each kind over every graph in turn)
    weights[1, 0, 2] = np.inf
    return {"adj": adj, "alpha": alpha, "beta": beta, "weights": weights, "active": active}


def test_bandit_select_bad_input_on_the_host_path_is_the_cpus() -> None:
    kw = _bad_select_inputs()
    for _ in range(3):
        with pytest.raises(errors.InvalidArgumentError) as want:
            ops.bandit_select(
                kw["adj"],
                kw["alpha"],
                kw["beta"],
                2,
                weights=kw["weights"],
                seed=1,
                active=kw["active"],
                backend="cpu",
            )
        with pytest.raises(type(want.value)) as got:
            _select_on(Backend("cuda", "cuda"), kw)
        assert str(got.value) == str(want.value) and got.value.arg == want.value.arg
        # fix the reported fault: the next one comes up, in the CPU's order
        if want.value.arg == "alpha":
            kw["alpha"][4, 1] = 1.0
        elif want.value.arg == "beta":
            kw["beta"][2, 3] = 1.0
    assert want.value.arg == "weights"


def _select_on(backend: Backend, kw: dict[str, Any]) -> Any:
    """The CUDA kernel on ``kw``'s arrays as ``backend``'s inputs (k = 2, thompson, seed 1)."""
    put = backend.put
    return stats.bandit_select(
        put(kw["adj"]),
        put(kw["alpha"]),
        put(kw["beta"]),
        2,
        put(kw["weights"]),
        1,
        0,
        "thompson",
        put(kw["active"]),
        0,
    )


@pytest.mark.parametrize("backend", DEVICE_ARRAYS)
def test_bandit_select_bad_input_on_device_arrays(backend: Backend) -> None:
    kw = _bad_select_inputs()
    _select_on(backend, kw)
    with pytest.raises(errors.OutOfRangeError, match="alpha must be > 0.* at graph 4, node 1") as e:
        cuda.synchronize()
    assert e.value.arg == "alpha"
    kw["alpha"][4, 1] = 1.0
    _select_on(backend, kw)
    with pytest.raises(errors.NonFiniteError, match="beta must be finite.* at graph 2, node 3"):
        cuda.synchronize()
    kw["beta"][2, 3] = 1.0
    _select_on(backend, kw)
    with pytest.raises(
        errors.NonFiniteError, match="weights must be finite.* at graph 1, node 0, successor 2"
    ):
        cuda.synchronize()
    cuda.synchronize()  # reported once


def test_bandit_theta_agreement_over_a_million_draws(capsys: pytest.CaptureFixture[str]) -> None:
    """1.28M Thompson draws (20000 graphs x 64 nodes) against the CPU's, bit for bit. The host path streams
    this batch in two chunks (about 27 kB per graph with weights and k = 8), so the second chunk's draws also
    check its graph counter. The device's log/cos/exp/pow are CUDA's: a theta differs only where an ulp of one
    of them moves it across a float32 rounding boundary or flips an acceptance test; the rate is printed."""
    rng = np.random.default_rng(2026)
    B, N, k = 20000, 64, 8
    adj, alpha, beta, weights, active = _bandit_inputs(rng, B, N)
    active[:] = True
    args = (adj, alpha, beta, k)
    kw: dict[str, Any] = {"weights": weights, "seed": 123456789012345, "step": 7, "graph_offset": 11}
    want = ops.bandit_select(*args, backend="cpu", **kw)
    got = ops.bandit_select(*args, backend="cuda", **kw)
    differ = got.theta != want.theta
    n_diff, total = int(differ.sum()), differ.size
    with capsys.disabled():
        print(
            f"\nbandit_select: {n_diff} of {total} CUDA theta differ from the CPU's (rate {n_diff / total:.2e})"
        )
    assert n_diff <= 10, f"{n_diff} of {total} theta differ, e.g. at {np.argwhere(differ)[:5].tolist()}"
    same = ~differ.any(axis=1)  # graphs whose theta agree everywhere must agree in every choice
    np.testing.assert_array_equal(got.choices[same], want.choices[same])
    np.testing.assert_array_equal(got.chosen[same], want.chosen[same])
