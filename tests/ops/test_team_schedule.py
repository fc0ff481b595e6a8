"""Team graph ops over graphs with cycles: ``ops.team_schedule`` (execution waves, methods/tacomas.md §8 A2),
``ops.team_scores`` (replicator weights and score statistics, §4 Eq 2 / Eq 12, §8 A10) and
``ops.topology_distance`` (|V xor V'| + |E xor E'|), on the reference and the compiled core.

Hand-drawn graphs for the schedule (a chain, a bidirectional pair, a cycle feeding a DAG, the 5-role template
with a sink, dead slots, self-loops), hand cases for the statistics and the distance, input errors naming their
argument, parity of the compiled core with the reference on random batches (cycles, N up to 64, strided inputs,
the thread team), and hypothesis properties of the schedule checked against a Floyd-Warshall closure, of the
distance (a metric on random graphs) and of the weights.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from _backends import CORE_BUILT, backend_names, core, needs_core
from _checks import check
from _paths import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from toporoute import errors, ops
from toporoute.backends import cpu, cuda
from toporoute.types.results import TeamSchedule, TeamScores
from toporoute.types.team_codes import TEAM_MAX_NODES

# the host backends of the grid (tests/_backends.py)
BACKENDS = backend_names("team_schedule", "team_scores", "topology_distance")


def graph(n: int, edges: list[tuple[int, int]], dead: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(N, N) adj with ``edges`` and (N,) alive: every node but ``dead``."""
    adj = np.zeros((n, n), dtype=bool)
    for s, d in edges:
        adj[s, d] = True
    alive = np.ones(n, dtype=bool)
    alive[list(dead)] = False
    return adj, alive


def edge_set(adj: np.ndarray) -> set[tuple[int, int]]:
    return {(int(s), int(d)) for s, d in np.argwhere(adj)}


def closure(adj: np.ndarray, alive: np.ndarray) -> np.ndarray:
    """Floyd-Warshall reachability among alive nodes, reflexive: ``r[u, v]`` = u reaches v."""
    n = adj.shape[0]
    r = (adj | np.eye(n, dtype=bool)) & alive[:, None] & alive[None, :]
    for k in range(n):
        r |= r[:, k, None] & r[None, k, :]
    return r


def random_graphs(
    rng: np.random.Generator, B: int, N: int, *, density: float | None = None, self_loops: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Random directed graphs with cycles (and self-loops), dead slots, no edge touching a dead node."""
    alive = rng.random((B, N)) < rng.uniform(0.5, 1.0)
    p = rng.uniform(0.01, 0.25, (B, 1, 1)) if density is None else density
    adj = (rng.random((B, N, N)) < p) & alive[:, :, None] & alive[:, None, :]
    if not self_loops:
        adj &= ~np.eye(N, dtype=bool)[None]
    return adj, alive


def assert_same(got, want, *, ulp: dict[str, int] | None = None) -> None:
    for f, w in vars(want).items():
        g = getattr(got, f)
        assert g.dtype == w.dtype and g.shape == w.shape, f
        if ulp and f in ulp:
            np.testing.assert_array_max_ulp(g, w, maxulp=ulp[f])
        else:
            np.testing.assert_array_equal(g, w, err_msg=f)


def test_capacity_is_mirrored_in_the_cpp_header() -> None:
    header = (ROOT / "cpp/include/toporoute/team_schedule.hpp").read_text()
    found = re.search(r"constexpr std::int64_t kTeamMaxNodes = (\d+);", header)
    assert found is not None and int(found.group(1)) == TEAM_MAX_NODES == 64


def test_compiled_core_has_the_team_ops() -> None:
    """The CPU backend runs the reference on a stale core; a built core must carry the kernels themselves."""
    if not CORE_BUILT:
        pytest.skip("the compiled core is not built")
    for op in ("team_schedule", "team_scores", "topology_distance"):
        assert hasattr(core, op) and cpu.has_op(op), op


# ------------------------------------------------------------------------------------------------ schedule


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_is_one_node_per_wave(backend: str) -> None:
    adj, alive = graph(4, [(0, 1), (1, 2), (2, 3)])
    r = ops.team_schedule(adj, alive, backend=backend)
    assert r.component.tolist() == [0, 1, 2, 3] and r.level.tolist() == [0, 1, 2, 3]
    assert int(r.n_levels) == 4 and not r.cyclic and not r.lagged.any()
    assert r.order.tolist() == [0, 1, 2, 3]
    # the same chain drawn from the highest index down: components follow the edges, not the indices
    back = ops.team_schedule(adj.T.copy(), alive, backend=backend)
    assert back.component.tolist() == [3, 2, 1, 0] and back.level.tolist() == [3, 2, 1, 0]
    assert back.order.tolist() == [3, 2, 1, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_bidirectional_pair_is_one_component_with_both_edges_lagged(backend: str) -> None:
    adj, alive = graph(3, [(0, 1), (1, 0), (1, 2)])
    r = ops.team_schedule(adj, alive, backend=backend)
    assert r.component.tolist() == [0, 0, 1] and r.level.tolist() == [0, 0, 1]
    assert edge_set(r.lagged) == {(0, 1), (1, 0)} and bool(r.cyclic) and int(r.n_levels) == 2
    assert r.order.tolist() == [0, 1, 2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cycle_feeding_a_dag(backend: str) -> None:
    # 3 -> 4 -> 5 -> 3 is a cycle; it feeds 1 directly and through 0; 2 hangs off 1; slot 6 is isolated
    adj, alive = graph(7, [(3, 4), (4, 5), (5, 3), (5, 0), (0, 1), (4, 1), (1, 2)])
    r = ops.team_schedule(adj, alive, backend=backend)
    # ready first: {3, 4, 5} (holds 3) and {6}; the lowest node index first, so the cycle is component 0
    assert r.component.tolist() == [1, 2, 3, 0, 0, 0, 4]
    assert r.level.tolist() == [1, 2, 3, 0, 0, 0, 0]
    assert edge_set(r.lagged) == {(3, 4), (4, 5), (5, 3)}
    assert r.order.tolist() == [3, 4, 5, 6, 0, 1, 2]
    assert bool(r.cyclic) and int(r.n_levels) == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_five_role_template_with_a_sink(backend: str) -> None:
    # spec §9: planner -> searcher, planner -> verifier, searcher <-> verifier, searcher -> calculator,
    # verifier -> reflector; calculator and reflector feed an added summary sink
    planner, searcher, verifier, calculator, reflector, sink = range(6)
    edges = [
        (planner, searcher),
        (planner, verifier),
        (searcher, verifier),
        (verifier, searcher),
        (searcher, calculator),
        (verifier, reflector),
        (calculator, sink),
        (reflector, sink),
    ]
    adj, alive = graph(6, edges)
    r = ops.team_schedule(adj, alive, backend=backend)
    assert r.level.tolist() == [0, 1, 1, 2, 2, 3] and int(r.n_levels) == 4
    assert r.component.tolist() == [0, 1, 1, 2, 3, 4]
    assert edge_set(r.lagged) == {(searcher, verifier), (verifier, searcher)}
    assert r.order.tolist() == [0, 1, 2, 3, 4, 5] and bool(r.cyclic)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dead_slots_are_left_out(backend: str) -> None:
    adj, alive = graph(6, [(4, 0), (0, 2)], dead=(1, 3, 5))
    r = ops.team_schedule(adj, alive, backend=backend)
    assert r.component.tolist() == [1, -1, 2, -1, 0, -1] and r.level.tolist() == [1, -1, 2, -1, 0, -1]
    assert r.order.tolist() == [4, 0, 2, -1, -1, -1] and int(r.n_levels) == 3
    none = ops.team_schedule(np.zeros((3, 3), bool), np.zeros(3, bool), backend=backend)
    assert none.component.tolist() == [-1] * 3 and none.order.tolist() == [-1] * 3
    assert int(none.n_levels) == 0 and not none.cyclic


@pytest.mark.parametrize("backend", BACKENDS)
def test_self_loops_are_ignored(backend: str) -> None:
    adj, alive = graph(3, [(0, 0), (0, 1), (2, 2)])
    r = ops.team_schedule(adj, alive, backend=backend)
    assert r.component.tolist() == [0, 1, 2] and r.level.tolist() == [0, 1, 0]
    assert not r.lagged.any() and not r.cyclic and r.order.tolist() == [0, 2, 1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_ready_components_go_lowest_node_first(backend: str) -> None:
    adj, alive = graph(4, [(3, 0)])  # 1 and 2 are isolated
    r = ops.team_schedule(adj, alive, backend=backend)
    assert r.component.tolist() == [3, 0, 1, 2] and r.level.tolist() == [1, 0, 0, 0]
    assert r.order.tolist() == [1, 2, 3, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_schedule_single_graph_and_batch_agree(backend: str) -> None:
    adj, alive = graph(5, [(0, 1), (1, 0), (1, 2), (3, 4)], dead=())
    one = ops.team_schedule(adj, alive, backend=backend)
    many = ops.team_schedule(np.stack([adj] * 3), np.stack([alive] * 3), backend=backend)
    assert one.lagged.shape == (5, 5) and many.lagged.shape == (3, 5, 5) and many.n_levels.shape == (3,)
    for f in vars(one):
        for b in range(3):
            np.testing.assert_array_equal(getattr(many, f)[b], getattr(one, f), err_msg=f)
    assert one.component.dtype == np.int32 and one.level.dtype == np.int32 and one.order.dtype == np.int32
    assert many.n_levels.dtype == np.int32 and many.cyclic.dtype == bool and one.lagged.dtype == bool
    empty = ops.team_schedule(np.zeros((0, 4, 4), bool), np.zeros((0, 4), bool), backend=backend)
    assert (
        empty.component.shape == (0, 4) and empty.lagged.shape == (0, 4, 4) and empty.n_levels.shape == (0,)
    )
    zero = ops.team_schedule(np.zeros((2, 0, 0), bool), np.zeros((2, 0), bool), backend=backend)
    assert zero.order.shape == (2, 0) and zero.n_levels.tolist() == [0, 0]


def check_schedule(adj: np.ndarray, alive: np.ndarray, r: TeamSchedule) -> None:
    """Every property of a schedule of one graph, against a Floyd-Warshall closure."""
    n = adj.shape[0]
    live = np.flatnonzero(alive)
    comp, level = r.component, r.level
    assert (comp[~alive] == -1).all() and (level[~alive] == -1).all()
    assert (comp[alive] >= 0).all() and (level[alive] >= 0).all()
    reach = closure(adj & ~np.eye(n, dtype=bool), alive)
    mutual = reach & reach.T
    # components are the strongly connected components, numbered 0.. without gaps
    for u in live:
        for v in live:
            assert (comp[u] == comp[v]) == bool(mutual[u, v]), (u, v)
    assert sorted(set(comp[alive].tolist())) == list(range(len(set(comp[alive].tolist()))))
    sizes = np.bincount(comp[alive], minlength=1)
    assert bool(r.cyclic) == bool((sizes >= 2).any())
    for u, v in np.argwhere(adj):
        if u == v:
            assert not r.lagged[u, v]  # self-loops ignored
        elif comp[u] == comp[v]:
            assert r.lagged[u, v] and level[u] == level[v]  # lagged edges stay inside a component
        else:
            assert not r.lagged[u, v] and level[u] < level[v] and comp[u] < comp[v]
    assert not (r.lagged & ~adj).any()
    # a component shares its level; levels are minimal
    for u in live:
        assert level[u] == level[comp == comp[u]].max()
        group = np.flatnonzero(comp == comp[u])
        preds = [int(p) for g in group for p in np.flatnonzero(adj[:, g]) if comp[p] != comp[u]]
        if level[u] == 0:
            assert preds == []
        else:
            assert any(level[p] == level[u] - 1 for p in preds)
    assert int(r.n_levels) == (int(level.max()) + 1 if live.size else 0)
    # order: the alive nodes sorted by (level, component, index), then -1
    k = live.size
    assert sorted(r.order[:k].tolist()) == live.tolist() and (r.order[k:] == -1).all()
    keys = [(int(level[v]), int(comp[v]), int(v)) for v in r.order[:k]]
    assert keys == sorted(keys)


@st.composite
def small_graphs(draw):
    n = draw(st.integers(1, 14))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.05, 0.12, 0.25, 0.5]))
    rng = np.random.default_rng(seed)
    adj, alive = random_graphs(rng, 1, n, density=density)
    return adj[0], alive[0]


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=120, deadline=None)
@given(small_graphs())
def test_property_schedule_is_a_minimal_wave_order_of_the_sccs(backend: str, g) -> None:
    adj, alive = g
    check_schedule(adj, alive, ops.team_schedule(adj, alive, backend=backend))


@pytest.mark.parametrize("N", [33, 64])
def test_property_schedule_on_large_graphs(N: int) -> None:
    rng = np.random.default_rng(N)
    adj, alive = random_graphs(rng, 12, N)
    r = ops.team_schedule(adj, alive, backend="reference")
    for b in range(12):
        check_schedule(adj[b], alive[b], TeamSchedule(*(x[b] for x in vars(r).values())))


@needs_core
@pytest.mark.parametrize("N", [1, 2, 7, 20, 32, 63, 64])
def test_schedule_cpu_equals_reference_on_random_batches(N: int) -> None:
    rng = np.random.default_rng(N)
    adj, alive = random_graphs(rng, 96, N)
    want = ops.team_schedule(adj, alive, backend="reference")
    assert N < 7 or want.cyclic.any()
    assert_same(ops.team_schedule(adj, alive, backend="cpu"), want)
    perm = rng.permutation(N)
    dag = adj & (perm[:, None] < perm[None, :])[None]  # acyclic, in a shuffled topological order
    want_dag = ops.team_schedule(dag, alive, backend="reference")
    assert not want_dag.cyclic.any() and not want_dag.lagged.any()
    assert_same(ops.team_schedule(dag, alive, backend="cpu"), want_dag)
    dense, live = random_graphs(rng, 16, N, density=0.6)  # mostly one big component
    assert_same(
        ops.team_schedule(dense, live, backend="cpu"), ops.team_schedule(dense, live, backend="reference")
    )


@needs_core
def test_schedule_cpu_on_strided_inputs_and_the_thread_team() -> None:
    rng = np.random.default_rng(5)
    adj, alive = random_graphs(rng, 40, 20)
    holder = np.zeros((40, 20, 40), dtype=bool)
    holder[:, :, ::2] = adj
    adj_s, alive_s = holder[:, :, ::2], np.repeat(alive, 2, axis=1)[:, ::2]
    assert not adj_s.flags.c_contiguous and not alive_s.flags.c_contiguous
    assert_same(
        ops.team_schedule(adj_s, alive_s, backend="cpu"), ops.team_schedule(adj, alive, backend="reference")
    )
    big, live = random_graphs(rng, 2048, 32)  # big enough for the thread team
    batch = ops.team_schedule(big, live, backend="cpu")
    for b in rng.choice(2048, 16, replace=False):
        one = ops.team_schedule(big[b], live[b], backend="reference")
        assert_same(TeamSchedule(*(x[b] for x in vars(batch).values())), one)


# -------------------------------------------------------------------------------------------------- scores


def rounds(*rows: list[float | None]) -> tuple[np.ndarray, np.ndarray]:
    """(T, N) history and present from rows of scores, None = absent (NaN in the history)."""
    h = np.array([[np.nan if x is None else x for x in r] for r in rows], dtype=np.float32)
    return h, ~np.isnan(h)


def replicator(h: np.ndarray, eta: float) -> np.ndarray:
    """Eq 12 applied round by round from uniform weights on a fixed team (every node present every round)."""
    n = h.shape[1]
    pi = np.full(n, 1.0 / n)
    for c in h.astype(np.float64):
        w = pi * np.exp(eta * c)
        pi = w / w.sum()
    return pi


@pytest.mark.parametrize("backend", BACKENDS)
def test_uniform_scores_keep_pi_uniform(backend: str) -> None:
    h, present = rounds([0.3] * 4, [0.9] * 4, [0.1] * 4)
    r = ops.team_scores(h, present, backend=backend)
    np.testing.assert_array_equal(r.pi, np.full(4, 0.25, np.float32))
    np.testing.assert_allclose(r.mean, [0.3, 0.9, 0.1], rtol=1e-7)
    np.testing.assert_array_equal(r.var, [0, 0, 0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("eta", [0.5, 1.0, 3.0])
def test_pi_is_eq12_from_uniform_for_a_fixed_team(backend: str, eta: float) -> None:
    rng = np.random.default_rng(int(eta * 10))
    h = rng.random((6, 5)).astype(np.float32)
    r = ops.team_scores(h, np.ones_like(h, bool), eta=eta, backend=backend)
    np.testing.assert_allclose(r.pi, replicator(h, eta), rtol=2e-6)
    assert abs(float(r.pi.astype(np.float64).sum()) - 1.0) < 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_newborn_starts_at_the_mean(backend: str) -> None:
    # node 2 is born in the last round and scores the round's mean: its log-weight is 0, as for a node that
    # always scored the mean (node 3)
    h, present = rounds([0.2, 0.8, None, 0.5], [0.2, 0.8, None, 0.5], [0.5, 0.5, 0.5, 0.5])
    r = ops.team_scores(h, present, backend=backend)
    w = np.exp([-0.6, 0.6, 0.0, 0.0])
    np.testing.assert_allclose(r.pi, w / w.sum(), rtol=1e-6)
    assert r.pi[2] == r.pi[3]
    # a node absent from the last round has no weight, whatever it scored before
    h2, p2 = rounds([0.9, 0.1, 0.5], [None, 0.1, 0.5])
    r2 = ops.team_scores(h2, p2, backend=backend)
    assert r2.pi[0] == 0 and abs(float(r2.pi.sum()) - 1) < 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_trend_of_a_line_is_its_slope(backend: str) -> None:
    h, present = rounds(
        [0.1, 0.9, 0.1, 0.5],
        [0.2, None, None, None],
        [0.3, 0.7, 0.3, None],
        [0.4, None, None, None],
        [0.5, 0.5, None, 0.4],
    )
    r = ops.team_scores(h, present, window=3, backend=backend)
    # node 0: rounds 2, 3, 4 on a line of slope 0.1; node 1: rounds 0, 2, 4 on a slope of -0.1;
    # node 2: two points, (0, 0.1) and (2, 0.3); node 3: two points (rounds 0 and 4)
    np.testing.assert_allclose(r.trend, [0.1, -0.1, 0.1, -0.025], rtol=1e-6)
    one, p1 = rounds([0.4, 0.3], [None, 0.6])
    assert ops.team_scores(one, p1, backend=backend).trend.tolist()[0] == 0  # a single point
    # the means 0.4, 0.2, 0.4333, 0.4, 0.4667: the slope over the last three rounds
    m = r.mean.astype(np.float64)[2:]
    np.testing.assert_allclose(r.mean_trend, (m[2] - m[0]) / 2, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_window_longer_than_the_history_sees_every_round(backend: str) -> None:
    h, present = rounds([0.1, 0.9], [0.3, None], [0.2, 0.8], [0.6, 0.5])
    full = ops.team_scores(h, present, window=4, backend=backend)
    for window in (5, 10**6, 2**70):
        assert_same(ops.team_scores(h, present, window=window, backend=backend), full)
    t = np.arange(4.0)
    np.testing.assert_allclose(full.trend[0], np.polyfit(t, h[:, 0].astype(np.float64), 1)[0], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_last_death_and_delta_mean(backend: str) -> None:
    h, present = rounds([0.1, 0.5, 0.05, 0.9], [0.19, 0.2, None, 0.25])
    r = ops.team_scores(h, present, backend=backend)
    assert r.death.tolist() == [True, False, False, False]  # node 2 is gone: not a candidate
    np.testing.assert_array_equal(np.isnan(r.last), [False, False, True, False])
    np.testing.assert_allclose(r.last[[0, 1, 3]], [0.19, 0.2, 0.25])
    np.testing.assert_allclose(
        r.delta_mean, (0.19 + 0.2 + 0.25) / 3 - (0.1 + 0.5 + 0.05 + 0.9) / 4, rtol=1e-6
    )
    np.testing.assert_allclose(r.var[0], np.var([0.1, 0.5, 0.05, 0.9]), rtol=1e-6)
    higher = ops.team_scores(h, present, death_threshold=0.21, backend=backend)
    assert higher.death.tolist() == [True, True, False, False]


@pytest.mark.parametrize("backend", BACKENDS)
def test_rounds_without_anybody_present(backend: str) -> None:
    h, present = rounds([0.4, 0.6], [None, None], [0.2, None], [None, None])
    r = ops.team_scores(h, present, backend=backend)
    np.testing.assert_array_equal(np.isnan(r.mean), [False, True, False, True])
    np.testing.assert_array_equal(np.isnan(r.var), [False, True, False, True])
    assert np.isnan(r.delta_mean) and np.isnan(r.last).all() and not r.death.any()
    assert r.pi.tolist() == [0, 0]  # nobody in the last round
    np.testing.assert_allclose(r.mean_trend, (0.2 - 0.5) / 2, rtol=1e-6)  # rounds 0 and 2
    single = ops.team_scores(h[:1], present[:1], backend=backend)
    assert np.isnan(single.delta_mean) and single.mean_trend == 0 and single.trend.tolist() == [0, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_scores_single_graph_and_batch_agree(backend: str) -> None:
    h, present = rounds([0.1, 0.5, None], [0.3, None, 0.8], [0.7, 0.2, 0.1])
    one = ops.team_scores(h, present, backend=backend)
    many = ops.team_scores(np.stack([h] * 3), np.stack([present] * 3), backend=backend)
    assert one.mean.shape == (3,) and one.pi.shape == (3,) and many.mean_trend.shape == (3,)
    for f in vars(one):
        for b in range(3):
            np.testing.assert_array_equal(getattr(many, f)[b], getattr(one, f), err_msg=f)
    assert all(getattr(one, f).dtype == np.float32 for f in vars(one) if f != "death")
    assert one.death.dtype == bool
    empty = ops.team_scores(np.zeros((0, 2, 3), np.float32), np.zeros((0, 2, 3), bool), backend=backend)
    assert empty.mean.shape == (0, 2) and empty.pi.shape == (0, 3) and empty.delta_mean.shape == (0,)


@pytest.mark.parametrize("backend", BACKENDS)
def test_absent_scores_may_be_anything(backend: str) -> None:
    h, present = rounds([0.2, 0.4], [0.6, 0.8])
    junk = h.copy()
    junk[0, 0], junk[1, 1] = np.nan, 7.5
    mask = present.copy()
    mask[0, 0] = mask[1, 1] = False
    assert_same(ops.team_scores(junk, mask, backend=backend), ops.team_scores(h, mask, backend=backend))


@needs_core
@pytest.mark.parametrize("T", [1, 2, 5, 12])
@pytest.mark.parametrize("N", [1, 6, 33, 100])
def test_scores_cpu_equals_reference_on_random_batches(T: int, N: int) -> None:
    rng = np.random.default_rng(T * 1000 + N)
    h = rng.random((64, T, N)).astype(np.float32)
    h[:, :, : N // 3] = rng.integers(0, 11, (64, T, N // 3)) / np.float32(10)  # judge-like anchors, ties
    present = rng.random((64, T, N)) < rng.uniform(0.3, 1.0, (64, 1, 1))
    h[~present & (rng.random(present.shape) < 0.5)] = np.nan
    for eta, window, thr in ((1.0, 3, 0.2), (0.25, 2, 0.5), (5.0, 7, 0.0)):
        kw = {"eta": eta, "window": window, "death_threshold": thr}
        want = ops.team_scores(h, present, backend="reference", **kw)
        # every statistic equal; pi within 1 float32 ulp (exp is libm's in the core, numpy's here)
        assert_same(ops.team_scores(h, present, backend="cpu", **kw), want, ulp={"pi": 1})


@needs_core
def test_scores_cpu_on_strided_inputs_and_the_thread_team() -> None:
    rng = np.random.default_rng(3)
    h = rng.random((4096, 6, 12)).astype(np.float32)  # big enough for the thread team
    present = rng.random(h.shape) < 0.8
    want = ops.team_scores(h, present, backend="reference")
    assert_same(ops.team_scores(h, present, backend="cpu"), want, ulp={"pi": 1})
    hs = np.asfortranarray(h[:40])
    ps = np.repeat(present[:40], 2, axis=2)[:, :, ::2]
    assert not hs.flags.c_contiguous and not ps.flags.c_contiguous
    assert_same(
        ops.team_scores(hs, ps, backend="cpu"),
        ops.team_scores(h[:40], present[:40], backend="reference"),
        ulp={"pi": 1},
    )


@st.composite
def score_tables(draw):
    t = draw(st.integers(1, 8))
    n = draw(st.integers(1, 10))
    cells = st.one_of(
        st.none(), st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.7, 1.0]), st.floats(0.0, 1.0, width=32)
    )
    rows = draw(st.lists(st.lists(cells, min_size=n, max_size=n), min_size=t, max_size=t))
    return rounds(*rows)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=120, deadline=None)
@given(score_tables(), st.sampled_from([0.5, 1.0, 2.0]))
def test_property_weights_and_statistics(backend: str, table, eta: float) -> None:
    h, present = table
    r = ops.team_scores(h, present, eta=eta, backend=backend)
    now = present[-1]
    assert (r.pi[~now] == 0).all() and (r.pi >= 0).all()
    if now.any():
        assert abs(float(r.pi.astype(np.float64).sum()) - 1.0) < 1e-5
        # a node that beat another in every round both attended ranks at least as high
        for u in np.flatnonzero(now):
            for v in np.flatnonzero(now):
                if (present[:, u] == present[:, v]).all() and (
                    h[present[:, u], u] >= h[present[:, v], v]
                ).all():
                    assert r.pi[u] >= r.pi[v]
    else:
        assert (r.pi == 0).all()
    have = present.any(axis=1)
    assert (np.isnan(r.mean) == ~have).all() and (r.var[have] >= 0).all()
    assert (r.death == (now & (np.nan_to_num(h[-1].astype(np.float64), nan=1.0) < 0.2))).all()


@needs_core
@settings(max_examples=80, deadline=None)
@given(score_tables(), st.sampled_from([0.5, 1.0, 2.0]), st.integers(2, 5))
def test_property_scores_cpu_equals_reference(table, eta: float, window: int) -> None:
    h, present = table
    kw = {"eta": eta, "window": window}
    want = ops.team_scores(h, present, backend="reference", **kw)
    assert_same(ops.team_scores(h, present, backend="cpu", **kw), want, ulp={"pi": 1})


# ------------------------------------------------------------------------------------------------ distance


@pytest.mark.parametrize("backend", BACKENDS)
def test_identical_graphs_are_at_distance_zero(backend: str) -> None:
    adj, alive = graph(5, [(0, 1), (1, 0), (1, 2), (3, 3)], dead=(4,))
    gen = np.array([0, 2, 1, 0, 7], np.int32)
    d = ops.topology_distance(adj, alive, adj, alive, gen_a=gen, gen_b=gen, backend=backend)
    assert d == 0 and isinstance(d, int)
    other_dead_gen = gen.copy()
    other_dead_gen[4] = 9  # generations of dead slots are not read
    assert (
        ops.topology_distance(adj, alive, adj, alive, gen_a=gen, gen_b=other_dead_gen, backend=backend) == 0
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_death_counts_one_plus_its_edges(backend: str) -> None:
    adj, alive = graph(5, [(0, 1), (1, 2), (2, 1), (3, 1), (1, 1), (0, 4)])
    after, alive_after = adj.copy(), alive.copy()
    after[1, :] = after[:, 1] = False
    alive_after[1] = False
    # node 1 touches 0->1, 1->2, 2->1, 3->1 and its self-loop
    assert ops.topology_distance(adj, alive, after, alive_after, backend=backend) == 1 + 5
    assert ops.topology_distance(after, alive_after, adj, alive, backend=backend) == 1 + 5


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_replacement_in_the_same_slot_counts_two_plus_two_per_edge(backend: str) -> None:
    adj, alive = graph(4, [(0, 1), (1, 2), (2, 1), (2, 3)])
    gen_a = np.zeros(4, np.int32)
    gen_b = gen_a.copy()
    gen_b[1] = 1  # the child inherits every edge of the node it replaces
    assert (
        ops.topology_distance(adj, alive, adj, alive, gen_a=gen_a, gen_b=gen_b, backend=backend) == 2 + 2 * 3
    )
    assert ops.topology_distance(adj, alive, adj, alive, gen_b=gen_b, backend=backend) == 2 + 2 * 3
    # and one edge edit beside it
    edited = adj.copy()
    edited[0, 3] = True
    assert ops.topology_distance(adj, alive, edited, alive, gen_a=gen_a, gen_b=gen_b, backend=backend) == 9


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=80, deadline=None)
@given(st.integers(1, 64), st.integers(0, 2**32 - 1))
def test_property_distance_is_a_metric(backend: str, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    adj, alive = random_graphs(rng, 3, n)
    gen = rng.integers(0, 2, (3, n)).astype(np.int32)
    d = np.zeros((3, 3), dtype=np.int64)
    for i in range(3):
        for j in range(3):
            d[i, j] = ops.topology_distance(
                adj[i], alive[i], adj[j], alive[j], gen_a=gen[i], gen_b=gen[j], backend=backend
            )
    assert (np.diag(d) == 0).all() and (d == d.T).all()
    for i in range(3):
        for j in range(3):
            for k in range(3):
                assert d[i, k] <= d[i, j] + d[j, k]
    # by hand: nodes and edges as (slot, generation) identities
    ids = [{(int(v), int(gen[i, v])) for v in np.flatnonzero(alive[i])} for i in range(3)]
    es = [
        {((int(u), int(gen[i, u])), (int(v), int(gen[i, v]))) for u, v in np.argwhere(adj[i])}
        for i in range(3)
    ]
    assert d[0, 1] == len(ids[0] ^ ids[1]) + len(es[0] ^ es[1])


@needs_core
@pytest.mark.parametrize("N", [1, 9, 32, 64])
def test_distance_cpu_equals_reference_on_random_batches(N: int) -> None:
    rng = np.random.default_rng(N + 100)
    adj_a, alive_a = random_graphs(rng, 300, N)
    adj_b, alive_b = adj_a.copy(), alive_a.copy()
    flip = rng.random(adj_b.shape) < 0.05
    adj_b ^= flip & alive_b[:, :, None] & alive_b[:, None, :]
    gen_a = rng.integers(0, 3, (300, N)).astype(np.int32)
    gen_b = np.where(rng.random((300, N)) < 0.1, gen_a + 1, gen_a).astype(np.int32)
    for ga, gb in ((None, None), (gen_a, gen_b), (None, gen_b)):
        want = ops.topology_distance(adj_a, alive_a, adj_b, alive_b, gen_a=ga, gen_b=gb, backend="reference")
        got = ops.topology_distance(adj_a, alive_a, adj_b, alive_b, gen_a=ga, gen_b=gb, backend="cpu")
        assert got.dtype == want.dtype == np.int32 and got.shape == (300,)
        np.testing.assert_array_equal(got, want)
    big_a, live_a = random_graphs(rng, 4096, N)  # the thread team
    big_b, live_b = random_graphs(rng, 4096, N)
    np.testing.assert_array_equal(
        ops.topology_distance(big_a, live_a, big_b, live_b, backend="cpu"),
        ops.topology_distance(big_a, live_a, big_b, live_b, backend="reference"),
    )


# ---------------------------------------------------------------------------------------------- input errors


def _bad_calls():
    adj, alive = graph(4, [(0, 1), (1, 2)])
    dangling = adj.copy()
    dangling[2, 3] = True
    half = alive.copy()
    half[3] = False
    h, present = rounds([0.1, 0.2], [0.3, 0.4])
    nan, over = h.copy(), h.copy()
    nan[1, 0], over[0, 1] = np.nan, 1.5
    big = np.zeros((65, 65), bool), np.ones(65, bool)
    gen = np.zeros(4, np.int32)
    return [
        ("adj", errors.DTypeError, lambda b: ops.team_schedule(adj.astype(np.int8), alive, backend=b)),
        ("adj", errors.ShapeError, lambda b: ops.team_schedule(adj[:, :3], alive, backend=b)),
        ("alive", errors.ShapeError, lambda b: ops.team_schedule(adj, alive[:3], backend=b)),
        ("adj", errors.ShapeError, lambda b: ops.team_schedule(*big, backend=b)),
        ("adj", errors.InvalidArgumentError, lambda b: ops.team_schedule(dangling, half, backend=b)),
        ("history", errors.DTypeError, lambda b: ops.team_scores(h.astype(np.float64), present, backend=b)),
        ("present", errors.ShapeError, lambda b: ops.team_scores(h, present[:, :1], backend=b)),
        ("present", errors.DTypeError, lambda b: ops.team_scores(h, h, backend=b)),
        ("history", errors.ShapeError, lambda b: ops.team_scores(h[:0], present[:0], backend=b)),
        ("history", errors.NonFiniteError, lambda b: ops.team_scores(nan, present, backend=b)),
        ("history", errors.OutOfRangeError, lambda b: ops.team_scores(over, present, backend=b)),
        ("eta", errors.OutOfRangeError, lambda b: ops.team_scores(h, present, eta=0.0, backend=b)),
        ("eta", errors.OutOfRangeError, lambda b: ops.team_scores(h, present, eta=float("inf"), backend=b)),
        ("eta", errors.InvalidArgumentError, lambda b: ops.team_scores(h, present, eta=True, backend=b)),
        ("window", errors.OutOfRangeError, lambda b: ops.team_scores(h, present, window=1, backend=b)),
        ("window", errors.InvalidArgumentError, lambda b: ops.team_scores(h, present, window=2.5, backend=b)),
        (
            "death_threshold",
            errors.OutOfRangeError,
            lambda b: ops.team_scores(h, present, death_threshold=1.2, backend=b),
        ),
        (
            "adj_b",
            errors.ShapeError,
            lambda b: ops.topology_distance(adj, alive, adj[:3, :3], alive[:3], backend=b),
        ),
        (
            "alive_b",
            errors.ShapeError,
            lambda b: ops.topology_distance(adj, alive, adj, alive[:3], backend=b),
        ),
        ("adj_a", errors.ShapeError, lambda b: ops.topology_distance(*big, *big, backend=b)),
        (
            "gen_a",
            errors.DTypeError,
            lambda b: ops.topology_distance(adj, alive, adj, alive, gen_a=gen + 0.0, backend=b),
        ),
        (
            "gen_b",
            errors.ShapeError,
            lambda b: ops.topology_distance(adj, alive, adj, alive, gen_b=gen[:2], backend=b),
        ),
        (
            "adj_a",
            errors.InvalidArgumentError,
            lambda b: ops.topology_distance(dangling, half, adj, alive, backend=b),
        ),
        (
            "adj_b",
            errors.InvalidArgumentError,
            lambda b: ops.topology_distance(adj, alive, dangling, half, backend=b),
        ),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("index", range(len(_bad_calls())))
def test_input_errors_name_the_argument(backend: str, index: int) -> None:
    arg, cls, call = _bad_calls()[index]
    with pytest.raises(errors.InvalidArgumentError) as info:
        call(backend)
    check(info, cls, arg)


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_errors_report_the_first_bad_place(backend: str) -> None:
    adj, alive = np.zeros((3, 4, 4), bool), np.ones((3, 4), bool)
    alive[1, 2] = alive[2, 0] = False
    adj[2, 0, 1] = adj[1, 3, 2] = True
    with pytest.raises(errors.InvalidArgumentError, match=r"adj\[1, 3, 2\] with alive\[1, 2\] False"):
        ops.team_schedule(adj, alive, backend=backend)
    h = np.full((2, 3, 2), 0.5, np.float32)
    present = np.ones_like(h, bool)
    h[1, 2, 0], h[1, 1, 1], h[0, 2, 1] = 2.0, -0.25, np.nan
    present[0, 2, 1] = False
    with pytest.raises(errors.OutOfRangeError, match=r"got -0\.25 at \[1, 1, 1\]"):
        ops.team_scores(h, present, backend=backend)
    ok = np.zeros((3, 4, 4), bool)
    with pytest.raises(errors.InvalidArgumentError, match=r"adj_a\[1, 3, 2\]"):
        ops.topology_distance(adj, alive, adj, alive, backend=backend)
    with pytest.raises(errors.InvalidArgumentError, match=r"adj_b\[1, 3, 2\] with alive_b"):
        ops.topology_distance(ok, alive, adj, alive, backend=backend)


@needs_core
def test_core_checks_its_inputs_too() -> None:
    with pytest.raises(errors.InvalidArgumentError) as info:
        core.team_schedule(np.zeros((1, 65, 65), bool), np.ones((1, 65), bool))
    assert info.value.arg == "adj"
    with pytest.raises(errors.ShapeError):
        core.team_schedule(np.zeros((1, 4, 4), bool), np.ones((1, 3), bool))
    h, present = np.full((1, 2, 3), 0.5, np.float32), np.ones((1, 2, 3), bool)
    for kw, arg in (
        ({"eta": 0.0}, "eta"),
        ({"window": 1}, "window"),
        ({"death_threshold": float("nan")}, "death_threshold"),
    ):
        args = {"eta": 1.0, "window": 3, "death_threshold": 0.2} | kw
        with pytest.raises(errors.OutOfRangeError) as info:
            core.team_scores(h, present, args["eta"], args["window"], args["death_threshold"])
        assert info.value.arg == arg
    with pytest.raises(errors.InvalidArgumentError) as info:
        core.team_scores(h[:, :0], present[:, :0], 1.0, 3, 0.2)
    assert info.value.arg == "history"
    adj, alive = np.zeros((2, 4, 4), bool), np.ones((2, 4), bool)
    with pytest.raises(errors.ShapeError) as info:
        core.topology_distance(adj, alive, adj[:1], alive[:1], None, None)
    assert info.value.arg == "adj_b"


def test_cuda_backend_has_no_team_kernels() -> None:
    adj, alive = graph(3, [(0, 1)])
    h, present = rounds([0.5, 0.5, 0.5])
    calls = {
        "team_schedule": lambda: ops.team_schedule(adj, alive, backend="cuda"),
        "team_scores": lambda: ops.team_scores(h, present, backend="cuda"),
        "topology_distance": lambda: ops.topology_distance(adj, alive, adj, alive, backend="cuda"),
    }
    for op, call in calls.items():
        assert op not in cuda.KERNELS
        with pytest.raises(errors.BackendUnavailableError, match=f"{op} has no CUDA kernel"):
            call()


def test_results_are_frozen() -> None:
    adj, alive = graph(2, [(0, 1)])
    r = ops.team_schedule(adj, alive, backend="reference")
    s = ops.team_scores(*rounds([0.5, 0.5]), backend="reference")
    assert isinstance(r, TeamSchedule) and isinstance(s, TeamScores)
    with pytest.raises(AttributeError):
        r.level = None  # type: ignore[misc]
