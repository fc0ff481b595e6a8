"""The graph ops against N, the agents per graph, at a fixed B * N = 65,536 agents (issue 38): the compiled
CPU backend against the numpy reference in the same run, graphs/s of each and the ratio, for N = 8 to 256 or
up to the op's limit (README, "Largest graph per op"):

- ``toposort``: one 64-bit word per node up to N = 64; beyond, the general path, O(N^2) per graph;
- ``toposort`` with weights: O(N^3) per graph on every backend (each candidate's weight sum is recomputed);
- ``graph_stats`` with ``prev``: O(N^2) per graph;
- ``dag_repair``: one reachability search of O(N * ceil(N / 64)) words per edge it considers;
- ``team_schedule``: at most 64 nodes; past the limit both backends must raise ``ShapeError`` (asserted).

Graphs: each agent keeps about 3 random providers (like ``route`` with ``k_in=3``), every other graph cut down
to a DAG, so the DAG path and the cycle breaking both run. HiVA's DAGs for ``dag_repair``: a few graphs of
``samples.dag_inputs``, edited once, tiled to the batch.

The reference runs on the first 8,192 agents of the batch (all 65,536 would take it about 30 s a call at
N = 256 weighted); its graphs/s come from that sub-batch, large enough to amortise its per-call overhead (at
least 32 graphs a call), and the CPU's result on it is checked equal to the reference's before timing. A call
of 0.5 s or more is timed once (the weighted sort at N >= 128); the others by ``bench._compare.seconds``.

Run: ``python -m pytest bench/test_bench_graph_sizes.py -s`` (``TOPOROUTE_BENCH=full``: about a minute on two
quiet cores). Under ``--benchmark-disable`` (CI) or ``TOPOROUTE_BENCH=smoke``: B * N = 2,048 agents, the
reference on 512, N up to 128, one round.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from toporoute import backends, ops
from toporoute.backends.samples import dag_inputs
from toporoute.errors import ShapeError
from toporoute.types.team_codes import TEAM_MAX_NODES

from ._compare import machine, seconds
from ._scale import pick

pytestmark = pytest.mark.skipif(not backends.available()["cpu"][0], reason="the compiled core is not built")

AGENTS = pick(65_536, 2_048)  # B * N of the CPU's batch
REF_AGENTS = pick(8_192, 512)  # B * N of the reference's sub-batch
SIZES = pick((8, 16, 32, 64, 128, 256), (8, 16, 32, 64, 128))  # N


def _graphs(B: int, N: int, seed: int = 0) -> np.ndarray:
    """``(B, N, N)`` bool: about 3 providers per agent, no self-loops, the even graphs cut to a DAG."""
    rng = np.random.default_rng(seed)
    adj = rng.random((B, N, N)) < min(1.0, 3.0 / max(N - 1, 1))
    adj &= ~np.eye(N, dtype=bool)
    rank = rng.permutation(N)
    adj[::2] &= rank[:, None] < rank[None, :]
    return adj


@dataclass(frozen=True)
class Case:
    """An op timed against N: ``make(B, N)`` gives its call (``args, kwargs``); ``limit``: its largest N."""

    label: str
    op: str
    make: Callable[[int, int], tuple[tuple[Any, ...], dict[str, Any]]]
    limit: int | None = None


def _toposort(B: int, N: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (_graphs(B, N),), {}


def _toposort_weighted(B: int, N: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    weights = np.random.default_rng(1).random((B, N, N), dtype=np.float32)
    return (_graphs(B, N),), {"weights": weights}


def _graph_stats(B: int, N: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    adj = _graphs(B, N)
    prev = adj ^ (np.random.default_rng(1).random(adj.shape) < 0.01)
    return (adj,), {"prev": prev}


def _dag_repair(B: int, N: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    base = min(B, pick(16, 2))  # dag_inputs repairs its graphs with the reference: build a few, tile them
    adj, alive, edits, ea, eb = dag_inputs(base, N)
    edited = ops.dag_edit(adj, alive, edits, backend="cpu")
    reps = -(-B // base)

    def tile(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.tile(x, (reps,) + (1,) * (x.ndim - 1))[:B])

    return (tile(edited.adj), tile(edited.alive)), {"edge_alpha": tile(ea), "edge_beta": tile(eb)}


def _team_schedule(B: int, N: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (_graphs(B, N), np.ones((B, N), dtype=bool)), {}


CASES = (
    Case("toposort", "toposort", _toposort),
    Case("toposort weighted", "toposort", _toposort_weighted),
    Case("graph_stats prev=", "graph_stats", _graph_stats),
    Case("dag_repair", "dag_repair", _dag_repair),
    Case("team_schedule", "team_schedule", _team_schedule, limit=TEAM_MAX_NODES),
)


def _head(args: tuple[Any, ...], kwargs: dict[str, Any], b: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call on the first ``b`` graphs (every array argument carries the batch axis first)."""
    return tuple(a[:b] for a in args), {k: v[:b] for k, v in kwargs.items()}


def _assert_same(got: Any, want: Any, b: int) -> None:
    """The CPU's result on the whole batch, cut to its first ``b`` graphs, equals the reference's on them."""
    for field, w in vars(want).items():
        if isinstance(w, np.ndarray):
            np.testing.assert_array_equal(getattr(got, field)[:b], w, err_msg=field)


def _timed(fn: Callable[[], object]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _seconds(fn: Callable[[], object], once: float) -> float:
    """bench._compare.seconds, with fewer rounds for a call that takes a while; a call of 0.5 s or more (the
    weighted sort at N >= 128) is timed by the one call already made, ``once``."""
    if once >= 0.5:
        return once
    if once >= 0.05:
        return seconds(fn, min_time=0.0, repeat=3)
    return seconds(fn)


def _rate(graphs_per_s: float) -> str:
    for scale, unit in ((1e6, "M/s"), (1e3, "k/s")):
        if graphs_per_s >= scale:
            return f"{graphs_per_s / scale:.3g} {unit}"
    return f"{graphs_per_s:.3g} /s"


def _compare_at(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], b_ref: int
) -> tuple[Any, float, float]:
    """The reference's result on the first ``b_ref`` graphs (checked against the CPU's on the whole batch) and
    the seconds per graph of the reference and of the CPU."""
    B = len(args[0])
    sub_args, sub_kwargs = _head(args, kwargs, b_ref)
    want, ref_once = _timed(lambda: fn(*sub_args, backend="reference", **sub_kwargs))
    got, cpu_once = _timed(lambda: fn(*args, backend="cpu", **kwargs))
    _assert_same(got, want, b_ref)
    slow = _seconds(lambda: fn(*sub_args, backend="reference", **sub_kwargs), ref_once) / b_ref
    fast = _seconds(lambda: fn(*args, backend="cpu", **kwargs), cpu_once) / B
    return want, slow, fast


@pytest.mark.parametrize("case", CASES, ids=[c.label.split(" prev")[0].replace(" ", "_") for c in CASES])
def test_graph_size_scaling(case: Case) -> None:
    fn = getattr(ops, case.op)
    print(f"\n[cpu] {machine(omp=True)}")
    print(
        f"[graphs/s] {case.label}: B * N = {AGENTS:,} agents on cpu, the reference on the first "
        f"{REF_AGENTS:,}" + (f"; largest N = {case.limit}" if case.limit else "")
    )
    for N in SIZES:
        B, b_ref = AGENTS // N, max(1, min(AGENTS // N, REF_AGENTS // N))
        if case.limit is not None and N > case.limit:
            args, kwargs = case.make(1, N)
            for be in ("reference", "cpu"):
                with pytest.raises(ShapeError, match=f"at most {case.limit} nodes; got N = {N}"):
                    fn(*args, backend=be, **kwargs)
            print(
                f"  N = {N:>3}: refused with ShapeError on both backends (past the op's limit, {case.limit})"
            )
            continue
        want, slow, fast = _compare_at(fn, *case.make(B, N), b_ref)
        extra = f", {np.mean(~want.is_dag):.0%} cyclic" if hasattr(want, "is_dag") else ""
        print(
            f"  N = {N:>3} B = {B:>5}: cpu {_rate(1 / fast):>11}, reference {_rate(1 / slow):>11} "
            f"({b_ref} graphs{extra}) = {slow / fast:.1f}x"
        )
