"""The comparisons of DESIGN.md's performance table, timed in one run and printed as ratios:

- ``route`` (B=1 and B=4096, N=8, D=384), compiled CPU backend vs the numpy reference (targets 10x, 3x), and at
  B=4096 vs a same-run copy of the inputs (memory-bandwidth bound: target within 2x of the copy);
- ``toposort`` (B=4096, N=16) vs networkx per graph (``topological_generations``, which gives the same order
  and levels; graphs prebuilt, so graph construction is not charged to networkx) (target 100x);
- the per-call floor of ``route``, ``toposort``, ``graph_stats`` and ``qmix_forward`` at one episode: the compiled
  backend vs the reference, and how much of the call is the compiled ``_core`` function (binding, validation in
  C++, output allocation, kernel) and how much the Python facade around it.

Run: ``python -m pytest bench/test_compare.py -s``. Results are asserted; the ratios are printed, not asserted.
Under ``--benchmark-disable`` (CI) it runs at smoke sizes (bench/_scale.py): B = 64 instead of 4096, one round.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from toporoute import backends, ops
from toporoute.backends import cpu, reference
from toporoute.types.qmix_params import QMixConfig, QMixParams

from ._compare import report, seconds
from ._scale import pick

pytestmark = pytest.mark.skipif(not backends.available()["cpu"][0], reason="the compiled core is not built")


@pytest.mark.parametrize("B, target", [(1, 10.0), (pick(4096, 64), 3.0)])
def test_route_vs_reference(B: int, target: float) -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((B, 8, 384), dtype=np.float32)
    k = rng.standard_normal((B, 8, 384), dtype=np.float32)
    want = ops.route(q, k, backend="reference")
    got = ops.route(q, k, backend="cpu")
    np.testing.assert_array_equal(got.adjacency, want.adjacency)
    np.testing.assert_array_equal(got.inbox, want.inbox)
    slow = seconds(lambda: ops.route(q, k, backend="reference"))
    fast = seconds(lambda: ops.route(q, k, backend="cpu"))
    report(f"route B={B} N=8 D=384", "reference", slow, "cpu", fast, target)
    if B > 1:
        copy = seconds(lambda: (q.copy(), k.copy()))
        print(
            f"[ratio] route B={B}: cpu {fast * 1e6:.0f} us vs copying the inputs {copy * 1e6:.0f} us = "
            f"{fast / copy:.2f}x the copy time (target <= 2x)"
        )


def test_toposort_vs_networkx() -> None:
    nx = pytest.importorskip("networkx", reason="networkx is the comparison baseline")
    rng = np.random.default_rng(0)
    B, N = pick(4096, 64), 16
    adj = np.triu(rng.random((B, N, N)) < 0.3, 1)
    perm = rng.permutation(N)
    adj = np.ascontiguousarray(adj[:, perm][:, :, perm])
    graphs = [nx.from_numpy_array(a.astype(np.uint8), create_using=nx.DiGraph) for a in adj]

    def run_nx() -> list[list[list[int]]]:
        return [[sorted(gen) for gen in nx.topological_generations(g)] for g in graphs]

    got = ops.toposort(adj, backend="cpu")
    generations = run_nx()
    for b in range(0, B, pick(97, 1)):  # same levels as networkx's generations
        levels = [sorted(np.nonzero(got.level[b] == lv)[0].tolist()) for lv in range(got.level[b].max() + 1)]
        assert levels == generations[b]
    assert got.is_dag.all()
    slow = seconds(run_nx, min_time=0.5, repeat=3)
    fast = seconds(lambda: ops.toposort(adj, backend="cpu"))
    report(f"toposort B={B} N={N}", "networkx", slow, "cpu", fast, 100.0)
    ref = seconds(lambda: reference.toposort(adj, weights=None, active=None), repeat=3)
    report(f"toposort B={B} N={N}", "reference", ref, "cpu", fast, None)


def _cpu_name() -> str:
    """The CPU model and whether it has AVX-512 (figures differ between machines of one kind)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    model = next(
        (ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "?"
    )
    return f"{model}, {'with' if ' avx512f ' in info else 'without'} AVX-512"


def _floor_cases() -> dict[str, tuple[Callable[[str], object], Callable[[], object]]]:
    """One episode per op: (call on a backend, the same call straight into the compiled module)."""
    from toporoute import _core

    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 8, 384), dtype=np.float32)
    k = rng.standard_normal((1, 8, 384), dtype=np.float32)
    dag = np.triu(rng.random((1, 16, 16)) < 0.3, 1)
    adj = rng.random((1, 8, 8)) < 0.3
    params = QMixParams.random(QMixConfig(), seed=0)
    obs = rng.standard_normal((1, 4, params.config.obs_dim), dtype=np.float32)
    qadj = rng.random((1, 4, 4)) < 0.5
    weights = cpu.qmix_weights(params)
    return {
        "route B=1 N=8 D=384": (
            lambda b: ops.route(q, k, backend=b),
            lambda: _core.route(q, k, None, 0.3, 3, ""),
        ),
        "toposort B=1 N=16": (
            lambda b: ops.toposort(dag, backend=b),
            lambda: _core.toposort(dag, None, None),
        ),
        "graph_stats B=1 N=8": (
            lambda b: ops.graph_stats(adj, backend=b),
            lambda: _core.graph_stats(adj, None, None),
        ),
        "qmix_forward B=1 N=4": (
            lambda b: ops.qmix_forward(params, obs, qadj, backend=b),
            lambda: _core.qmix_forward(weights, obs, qadj, None, None, ""),
        ),
    }


@pytest.mark.parametrize("case", list(_floor_cases()))
def test_per_call_floor(case: str) -> None:
    call, core = _floor_cases()[case]
    got, want = call("cpu"), call("reference")
    for name, value in vars(got).items() if not isinstance(got, tuple) else zip(got._fields, got):
        expected = getattr(want, name)
        if expected is not None and value.dtype.kind == "f":
            np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5, err_msg=name)
        elif expected is not None:
            np.testing.assert_array_equal(value, expected, err_msg=name)
    slow = seconds(lambda: call("reference"))
    fast = seconds(lambda: call("cpu"))
    inner = seconds(core)
    report(case, "reference", slow, "cpu", fast, 10.0 if case.startswith("route") else None)
    print(
        f"[floor] {case}: ops {fast * 1e6:.2f} us = _core {inner * 1e6:.2f} us + facade {(fast - inner) * 1e6:.2f} us"
        f" (CPU: {_cpu_name()})"
    )
