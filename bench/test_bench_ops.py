"""pytest-benchmark suites of the core ops, grouped per op, parametrised over backend and size. Each benchmark
checks its result against the reference before timing. Smoke sizes (bench/_scale.py) keep B <= 64.

Run: ``python -m pytest bench --benchmark-columns=min,median,ops``.
"""

from __future__ import annotations

import numpy as np
import pytest

from toporoute import backends, ops
from toporoute.backends import reference
from toporoute.backends.samples import random_dags, route_inputs

from ._scale import pick


def host_backends(*op_names: str) -> list[str]:
    """The backends that take numpy arrays, register a kernel for each of ``op_names`` and run here: the package's
    registrations (toporoute.backends.kernels), which tests/_backends.py's grid reads too. CUDA kernels are timed
    in bench/test_bench_gpu.py."""
    return [
        b
        for b in backends.NAMES
        if b != "cuda" and set(op_names) <= backends.kernels(b) and backends.available()[b][0]
    ]


@pytest.mark.parametrize("backend", host_backends("route"))
@pytest.mark.parametrize("B", pick([1, 64, 4096], [1, 64]))
def test_route(benchmark, backend: str, B: int) -> None:
    benchmark.group = f"route N=8 D=384 B={B}"
    q, k = route_inputs(B, 8, 384)
    want = reference.route(q, k, tau=0.0, k_in=3, active=None)
    got = benchmark(ops.route, q, k, tau=0.0, k_in=3, backend=backend)
    np.testing.assert_array_equal(got.adjacency, want.adjacency)
    np.testing.assert_array_equal(got.inbox, want.inbox)
    assert got.adjacency.sum() > 0


@pytest.mark.parametrize("backend", host_backends("toposort"))
@pytest.mark.parametrize("B", pick([1, 4096], [1, 64]))
@pytest.mark.parametrize("N", [16, 64])
def test_toposort(benchmark, backend: str, B: int, N: int) -> None:
    if backend == "reference" and B * N > 4096 * 16:
        pytest.skip("reference toposort at this size takes seconds per call; compared at B=4096, N=16 only")
    benchmark.group = f"toposort N={N} B={B}"
    adj = random_dags(B, N)
    got = benchmark(ops.toposort, adj, backend=backend)
    assert got.is_dag.all()
    pos = np.argsort(got.order, axis=1)
    b, s, d = np.nonzero(adj)
    assert (pos[b, s] < pos[b, d]).all() and (got.level[b, s] < got.level[b, d]).all()


@pytest.mark.parametrize("backend", host_backends("graph_stats"))
def test_graph_stats(benchmark, backend: str) -> None:
    B = pick(4096, 64)
    benchmark.group = f"graph_stats N=8 B={B}"
    rng = np.random.default_rng(1)
    adj, prev = rng.random((2, B, 8, 8)) < 0.3
    want = reference.graph_stats(adj, active=None, prev=prev)
    got = benchmark(ops.graph_stats, adj, prev=prev, backend=backend)
    np.testing.assert_array_equal(got.edges, want.edges)
    np.testing.assert_allclose(got.jaccard, want.jaccard)


@pytest.mark.parametrize("backend", host_backends("conductor_density"))
def test_conductor_density(benchmark, backend: str) -> None:
    n = pick(65536, 1024)
    benchmark.group = f"conductor_density n={n}"
    rng = np.random.default_rng(2)
    nodes = rng.integers(1, 12, n)
    steps = np.minimum(rng.integers(1, 6, n), nodes)
    edges = rng.integers(0, 20, n)
    caps = rng.choice([4, 7, 10], n)
    want = reference.conductor_density(nodes, edges, steps, caps)
    got = benchmark(ops.conductor_density, nodes, edges, steps, caps, backend=backend)
    np.testing.assert_allclose(got.reward, want.reward, rtol=1e-12)
