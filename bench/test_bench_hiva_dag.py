"""HiVA's DAG evolution ops, compiled CPU backend vs the numpy reference in the same run: ``dag_edit`` (8 edits
per graph) and ``dag_repair`` (with edge Betas) on B = 1 and B = 4096 graphs of N = 32 node slots, plus the two
chained (one STEV topology update). The issue sets no target for these ops: the ratios are printed, not judged.

Inputs look like HiVA's: repaired graphs (a DAG from the source to the aggregator, out-degree <= 5) about half
full, edits of every kind on live nodes, a few padding rows and bad ones.

Run: ``python -m pytest bench/test_bench_hiva_dag.py -s``. Under ``--benchmark-disable`` (CI) smoke sizes:
B = 64 instead of 4096, one round. Results are checked equal before timing.
"""

from __future__ import annotations

import numpy as np
import pytest

from toporoute import backends, ops
from toporoute.backends.samples import dag_inputs

from ._compare import seconds
from ._scale import pick

pytestmark = pytest.mark.skipif(not backends.available()["cpu"][0], reason="the compiled core is not built")

N, E = 32, 8


def _pair(what: str, slow: float, fast: float) -> None:
    print(
        f"\n[ratio] {what}: reference {slow * 1e6:.1f} us / cpu {fast * 1e6:.1f} us = {slow / fast:.1f}x "
        "(no target set)"
    )


@pytest.mark.parametrize("B", [1, pick(4096, 64)])
def test_dag_ops_vs_reference(B: int) -> None:
    adj, alive, edits, ea, eb = dag_inputs(B, N, E)
    want = ops.dag_edit(adj, alive, edits, backend="reference")
    got = ops.dag_edit(adj, alive, edits, backend="cpu")
    for f, w in vars(want).items():
        np.testing.assert_array_equal(getattr(got, f), w)
    assert want.accepted.mean() > 0.2 and (want.new_node >= 0).any()
    want_r = ops.dag_repair(want.adj, want.alive, ea, eb, backend="reference")
    got_r = ops.dag_repair(want.adj, want.alive, ea, eb, backend="cpu")
    for f, w in vars(want_r).items():
        np.testing.assert_array_equal(getattr(got_r, f), w)
    print(
        f"\n[inputs] B={B}: {alive.sum() / B:.1f} live nodes and {adj.sum() / B:.1f} edges per graph, "
        f"{want.accepted.mean():.0%} of edits accepted, repair prunes {got_r.pruned_edges.sum() / B:.1f} edges"
    )
    e_adj, e_alive = want.adj, want.alive

    def step(backend: str) -> object:
        r = ops.dag_edit(adj, alive, edits, backend=backend)
        return ops.dag_repair(r.adj, r.alive, ea, eb, backend=backend)

    for what, fn in (
        (f"dag_edit B={B} N={N} E={E}", lambda be: ops.dag_edit(adj, alive, edits, backend=be)),
        (f"dag_repair B={B} N={N}", lambda be: ops.dag_repair(e_adj, e_alive, ea, eb, backend=be)),
        (f"dag_edit + dag_repair B={B} N={N}", step),
    ):
        slow = seconds(
            lambda fn=fn: fn("reference"), min_time=0.2 if B == 1 else 0.0, repeat=7 if B == 1 else 1
        )
        fast = seconds(lambda fn=fn: fn("cpu"))
        _pair(what, slow, fast)
