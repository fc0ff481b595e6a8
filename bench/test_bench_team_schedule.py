"""TacoMAS's team graph ops, compiled CPU backend vs the numpy reference in the same run: ``team_schedule``
(execution waves of graphs with cycles), ``team_scores`` (replicator weights and score statistics over 10
rounds) and ``topology_distance`` on B = 1 and B = 4096 graphs of N = 32 node slots. Issue 19's target for the
schedule: >= 10x at B = 1 and >= 20x at B = 4096 (printed as meets / BELOW, never asserted); the other two have
none (their ratios are printed, not judged).

Inputs look like TacoMAS's: about 20 live agents of 32 slots, random directed edges with cycles and
bidirectional pairs (about 2.5 out-edges per agent), judge-like scores with a newborn or a dead agent now and
then, the next round's graph a few edits away.

Run: ``python -m pytest bench/test_bench_team_schedule.py -s``. Under ``--benchmark-disable`` (CI) smoke sizes:
B = 64 instead of 4096, one round. Results are checked equal before timing.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from toporoute import backends, ops
from toporoute.backends.samples import team_graph_inputs

from ._compare import report, seconds
from ._scale import pick

pytestmark = pytest.mark.skipif(not backends.available()["cpu"][0], reason="the compiled core is not built")

N, T = 32, 10
TARGETS = {1: 10.0, 4096: 20.0}  # the schedule's targets (issue 19), by batch size


def _cpu() -> str:
    """The CPU model and its SIMD flags (figures differ between machines of one kind)."""
    from toporoute.llm.cpu import cpu_info

    cpu = cpu_info()
    flags = " ".join(f"{f}={'yes' if on else 'no'}" for f, on in cpu.reported().items())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu.model} ({cores} cores usable); {flags}"


@pytest.mark.parametrize("B", [1, pick(4096, 64)])
def test_team_ops_vs_reference(B: int) -> None:
    adj, alive, adj_next, gen, gen_next, history, present = team_graph_inputs(B, N, T)
    want = ops.team_schedule(adj, alive, backend="reference")
    got = ops.team_schedule(adj, alive, backend="cpu")
    for f, w in vars(want).items():
        np.testing.assert_array_equal(getattr(got, f), w)
    want_s = ops.team_scores(history, present, backend="reference")
    got_s = ops.team_scores(history, present, backend="cpu")
    for f, w in vars(want_s).items():  # equal; pi within 1 float32 ulp (libm's exp against numpy's)
        check = np.testing.assert_array_max_ulp if f == "pi" else np.testing.assert_array_equal
        check(getattr(got_s, f), w)
    dist = {"gen_a": gen, "gen_b": gen_next}
    want_d = ops.topology_distance(adj, alive, adj_next, alive, backend="reference", **dist)
    np.testing.assert_array_equal(
        ops.topology_distance(adj, alive, adj_next, alive, backend="cpu", **dist), want_d
    )
    print(f"\n[info] CPU: {_cpu()}")
    print(
        f"[inputs] B={B}: {alive.sum() / B:.1f} live agents and {adj.sum() / B:.1f} edges per graph, "
        f"{want.cyclic.mean():.0%} cyclic, {want.n_levels.mean():.1f} waves, {want.lagged.sum() / B:.1f} lagged "
        f"edges; distance to the next round {want_d.mean():.1f}"
    )
    cases = (
        ("team_schedule", f"B={B} N={N}", lambda be: ops.team_schedule(adj, alive, backend=be)),
        ("team_scores", f"B={B} T={T} N={N}", lambda be: ops.team_scores(history, present, backend=be)),
        (
            "topology_distance",
            f"B={B} N={N}",
            lambda be: ops.topology_distance(adj, alive, adj_next, alive, backend=be, **dist),
        ),
    )
    for op, size, fn in cases:
        slow = seconds(
            lambda fn=fn: fn("reference"), min_time=0.2 if B == 1 else 0.0, repeat=7 if B == 1 else 1
        )
        fast = seconds(lambda fn=fn: fn("cpu"))
        target = TARGETS.get(B, TARGETS[4096]) if op == "team_schedule" else None
        report(f"{op} {size}", "reference", slow, "cpu", fast, target)
