"""The team edit projection ``ops.team_project``, compiled CPU backend vs the numpy reference in the same run, on
B = 1 and B = 4096 graphs of N = 32 node slots with P = 8 rows each. Targets (issue 19): >= 10x at B = 1 (the
binding's per-call overhead decides it) and >= 20x at B = 4096.

Inputs look like a TacoMAS slow step: teams of 5 to 12 agents (cycles and bidirectional pairs allowed, the sink
protected) on 32 slots, and a meta output of 8 rows: a replacement, a pure birth from the best scorer, a pure
death, edge removals and adds (some through placeholders of the newborns), with the usual share of bad rows
(unknown ids, the sink's death, repeats, padding).

Run: ``TOPOROUTE_BENCH=full python -m pytest bench/test_bench_team.py -s``. Under ``--benchmark-disable`` (CI)
smoke sizes: B = 64 instead of 4096, one round. Results are checked equal before timing.
"""

from __future__ import annotations

import numpy as np
import pytest

from toporoute import backends, ops
from toporoute.backends.samples import team_project_inputs
from toporoute.types import team_codes as c

from ._compare import machine, report, seconds
from ._scale import pick

pytestmark = pytest.mark.skipif(not backends.available()["cpu"][0], reason="the compiled core is not built")

N, P = 32, 8


@pytest.mark.parametrize(("B", "target"), [(1, 10.0), (pick(4096, 64), 20.0)])
def test_team_project_vs_reference(B: int, target: float) -> None:
    adj, alive, roles, sink, edits, protected, critical, scores, generation = team_project_inputs(B, N, P)
    kw = {"protected": protected, "critical": critical, "scores": scores, "generation": generation}
    want = ops.team_project(adj, alive, roles, sink, edits, backend="reference", **kw)
    got = ops.team_project(adj, alive, roles, sink, edits, backend="cpu", **kw)
    for f, w in vars(want).items():
        np.testing.assert_array_equal(getattr(got, f), w, err_msg=f)
    kinds = edits[..., 0]
    print(
        f"\n[inputs] B={B}: {alive.sum() / B:.1f} live agents and {adj.sum() / B:.1f} edges per graph, "
        f"{want.accepted.mean():.0%} of rows accepted ({want.accepted[kinds == c.TEAM_REPLACE].mean():.0%} of "
        f"replacements), {want.inherited.sum() / B:.1f} inherited and {want.repaired.sum() / B:.1f} repair edges "
        "per graph"
    )
    print(f"[cpu] {machine(omp=True, flags=True)}")

    def run(backend: str) -> object:
        return ops.team_project(adj, alive, roles, sink, edits, backend=backend, **kw)

    slow = seconds(lambda: run("reference"), min_time=0.2 if B == 1 else 0.0, repeat=7 if B == 1 else 1)
    fast = seconds(lambda: run("cpu"))
    report(f"team_project B={B} N={N} P={P}", "reference", slow, "cpu", fast, target)
