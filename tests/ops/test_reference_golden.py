"""Golden tests of the core ops: small hand-built cases whose expected values are derived by hand (in the
comments), never by calling another backend. Every case runs on every backend of its op (tests/_backends.py): the
numpy reference, the compiled core at each SIMD level, and CUDA with numpy and device inputs."""

from __future__ import annotations

import heapq

import networkx as nx
import numpy as np
import pytest
from _backends import Backend, on_backends

from toporoute import errors

F32 = np.float32


def _vecs(rows: list[list[float]]) -> np.ndarray:
    return np.asarray(rows, dtype=np.float32)


def _graph(n: int, edges: list[tuple[int, int]]) -> np.ndarray:
    adj = np.zeros((n, n), dtype=bool)
    for s, d in edges:
        adj[s, d] = True
    return adj


def _edge_set(m: np.ndarray) -> set[tuple[int, int]]:
    return {(int(s), int(d)) for s, d in zip(*np.nonzero(m))}


# ---------------------------------------------------------------------------------------------------- route


@on_backends("route")
def test_route_ties_duplicate_keys_lower_index_first(backend: Backend) -> None:
    # Only recipient 0 has a non-zero need (1, 0). Offers: k0 = k2 = k3 = (1, 0) -> score 1 (k0 is the
    # recipient itself: no self edge), k1 = k4 = (1, 1) -> 1/sqrt(2) ~ 0.7071. With tau = 0.5 the candidates
    # of recipient 0 are 1, 2, 3, 4; by descending score with ties to the lower index: 2, 3, 1, 4.
    q = _vecs([[1, 0], [0, 0], [0, 0], [0, 0], [0, 0]])
    k = _vecs([[1, 0], [1, 1], [1, 0], [1, 0], [1, 1]])
    s = F32(1 / np.sqrt(2.0))
    expected_col0 = np.array([1, s, 1, 1, s], dtype=np.float32)
    for k_in, inbox0 in [(1, [2]), (2, [2, 3]), (3, [2, 3, 1]), (0, [2, 3, 1, 4]), (6, [2, 3, 1, 4, -1, -1])]:
        r = backend.route(q, k, tau=0.5, k_in=k_in)
        np.testing.assert_allclose(r.scores[:, 0], expected_col0, rtol=1e-6, atol=0)
        assert (r.scores[:, 1:] == 0).all()  # recipients with a zero need score 0
        width = k_in if k_in else 4
        assert r.inbox.shape == (5, width)
        assert r.inbox.dtype == np.int32
        assert r.inbox[0].tolist() == inbox0
        assert (r.inbox[1:] == -1).all()
        kept = [j for j in inbox0 if j >= 0]
        assert _edge_set(r.adjacency) == {(j, 0) for j in kept}
        assert r.in_degree.tolist() == [len(kept), 0, 0, 0, 0]


@on_backends("route")
def test_route_all_identical_rows_keep_lowest_indices(backend: Backend) -> None:
    # Every q and k row is (3, 4): every score is exactly 25 / (5 * 5) = 1. Each recipient keeps the two
    # lowest indices other than itself.
    q = np.tile(_vecs([[3, 4]]), (4, 1))
    r = backend.route(q, q.copy(), tau=0.5, k_in=2)
    np.testing.assert_array_equal(r.scores, np.ones((4, 4), dtype=np.float32))
    assert r.inbox.tolist() == [[1, 2], [0, 2], [0, 1], [0, 1]]
    assert r.in_degree.tolist() == [2, 2, 2, 2]
    assert _edge_set(r.adjacency) == {(1, 0), (2, 0), (0, 1), (2, 1), (0, 2), (1, 2), (0, 3), (1, 3)}


@on_backends("route")
def test_route_distinct_scores_descending_order(backend: Backend) -> None:
    # Recipient 0 needs (1, 0). cos with k1 = (1, 3): 1/sqrt(10) = 0.316; k2 = (3, 1): 3/sqrt(10) = 0.949;
    # k3 = (1, 1): 0.707; k4 = (1, 0): 1; k5 = (-1, 1): -0.707. tau = 0.3 -> candidates 4, 2, 3, 1 in that order.
    q = _vecs([[1, 0]] + [[0, 0]] * 5)
    k = _vecs([[1, 0], [1, 3], [3, 1], [1, 1], [1, 0], [-1, 1]])
    want = np.array(
        [1, 1 / np.sqrt(10), 3 / np.sqrt(10), 1 / np.sqrt(2), 1, -1 / np.sqrt(2)], dtype=np.float32
    )
    r = backend.route(q, k, tau=0.3, k_in=3)
    np.testing.assert_allclose(r.scores[:, 0], want, rtol=1e-6, atol=0)
    assert r.inbox[0].tolist() == [4, 2, 3]
    assert _edge_set(r.adjacency) == {(4, 0), (2, 0), (3, 0)}
    r0 = backend.route(q, k, tau=0.3, k_in=0)
    assert r0.inbox.shape == (6, 5)
    assert r0.inbox[0].tolist() == [4, 2, 3, 1, -1]
    assert r0.in_degree[0] == 4
    # tau = 0.32 drops k1 (0.316) but keeps the rest
    r1 = backend.route(q, k, tau=0.32, k_in=0)
    assert r1.inbox[0].tolist() == [4, 2, 3, -1, -1]


@on_backends("route")
@pytest.mark.parametrize(
    ("qrow", "krow", "tau", "exact"),
    [
        ([1, 0], [0, 1], 0.0, 0.0),  # orthogonal: cos = 0 exactly
        ([1, 0], [2, 0], 1.0, 1.0),  # same direction: cos = 1 exactly
        (
            [0.5, 0.5],
            [3, 3],
            1.0,
            1.0,
        ),  # same direction, non-unit norms: 3 / (sqrt(0.5) sqrt(18)) rounds to 1
        ([1, 0], [3, 4], 0.6, 0.6),  # 3-4-5 triangle: cos = 3/5; float32(0.6) on both sides
        ([0, 1], [3, 4], 0.8, 0.8),  # 4/5
        ([1, 0], [-3, 4], -0.6, -0.6),
        ([1, 0], [-1, 0], -1.0, -1.0),  # opposite: cos = -1 is not > -1
    ],
)
def test_route_strict_threshold(
    backend: Backend, qrow: list[float], krow: list[float], tau: float, exact: float
) -> None:
    # Agent 1 offers krow to agent 0 which needs qrow; the score equals float32(tau) exactly, so no edge.
    q = _vecs([qrow, [0, 0]])
    k = _vecs([[0, 0], krow])
    assert F32(exact) == F32(tau)
    r = backend.route(q, k, tau=tau, k_in=0)
    assert r.scores[1, 0] == F32(exact)
    assert not r.adjacency.any()
    assert r.inbox.tolist() == [[-1], [-1]]
    assert r.in_degree.tolist() == [0, 0]
    # the next float32 below tau gives the edge
    below = float(np.nextafter(F32(tau), F32(-2)))
    if below >= -1.0:
        r = backend.route(q, k, tau=below, k_in=0)
        assert _edge_set(r.adjacency) == {(1, 0)}
        assert r.inbox.tolist() == [[1], [-1]]


@on_backends("route")
def test_route_tau_is_compared_in_float32(backend: Backend) -> None:
    # cos = 0.6 (float64 0.6 rounds to float32 0.60000002384). A float64 tau slightly below 0.6 that still
    # rounds to the same float32 must not create the edge: the comparison is on float32 values.
    q = _vecs([[1, 0], [0, 0]])
    k = _vecs([[0, 0], [3, 4]])
    tau = 0.6 - 1e-12
    assert F32(tau) == F32(0.6)
    r = backend.route(q, k, tau=tau, k_in=0)
    assert not r.adjacency.any()


@on_backends("route")
def test_route_zero_rows_get_no_edges_even_with_tau_minus_one(backend: Backend) -> None:
    # q = [0, (1, 0), (0, 1)], k = [(1, 0), 0, (1, 1)], tau = -1, no cap.
    # scores[j, i] = cos(k_j, q_i): column 0 (zero need) and row 1 (zero offer) are 0;
    # [0, 1] = 1, [0, 2] = 0 (orthogonal, but both rows non-zero), [2, 1] = [2, 2] = 1/sqrt(2).
    # Edges (score > -1, j != i, rows non-zero): 0->1, 2->1, 0->2. Inbox of 1: [0, 2]; of 2: [0].
    q = _vecs([[0, 0], [1, 0], [0, 1]])
    k = _vecs([[1, 0], [0, 0], [1, 1]])
    s = F32(1 / np.sqrt(2.0))
    r = backend.route(q, k, tau=-1.0, k_in=0)
    np.testing.assert_allclose(
        r.scores, np.array([[0, 1, 0], [0, 0, 0], [0, s, s]], np.float32), rtol=1e-6, atol=0
    )
    assert _edge_set(r.adjacency) == {(0, 1), (2, 1), (0, 2)}
    assert r.inbox.tolist() == [[-1, -1], [0, 2], [0, -1]]
    assert r.in_degree.tolist() == [0, 2, 1]


@on_backends("route")
def test_route_all_zero_inputs(backend: Backend) -> None:
    q = np.zeros((2, 4, 3), np.float32)
    r = backend.route(q, q.copy(), tau=-1.0, k_in=0)
    assert (r.scores == 0).all()
    assert not r.adjacency.any()
    assert (r.inbox == -1).all()
    assert r.inbox.shape == (2, 4, 3)
    assert (r.in_degree == 0).all()


@on_backends("route")
def test_route_inactive_agents(backend: Backend) -> None:
    # Three identical agents (1, 0); agent 1 inactive. Scores touching agent 1 are 0, all others 1.
    # Edges 0->2 and 2->0 only (tau = 0, no cap).
    q = np.tile(_vecs([[1, 0]]), (3, 1))
    active = np.array([True, False, True])
    r = backend.route(q, q.copy(), tau=0.0, k_in=0, active=active)
    np.testing.assert_array_equal(r.scores, np.array([[1, 0, 1], [0, 0, 0], [1, 0, 1]], np.float32))
    assert _edge_set(r.adjacency) == {(0, 2), (2, 0)}
    assert r.inbox.tolist() == [[2, -1], [-1, -1], [0, -1]]
    assert r.in_degree.tolist() == [1, 0, 1]
    # with tau = -1 the inactive agent still gets nothing
    r = backend.route(q, q.copy(), tau=-1.0, k_in=0, active=active)
    assert _edge_set(r.adjacency) == {(0, 2), (2, 0)}


@on_backends("route")
def test_route_single_agent(backend: Backend) -> None:
    q = _vecs([[1, 2]])
    r = backend.route(q, q.copy(), tau=0.0, k_in=3)
    assert r.scores.shape == (1, 1) and r.scores[0, 0] == F32(1)
    assert r.adjacency.shape == (1, 1) and not r.adjacency.any()
    assert r.inbox.shape == (1, 3) and r.inbox.tolist() == [[-1, -1, -1]]
    assert r.in_degree.shape == (1,) and r.in_degree.tolist() == [0]
    r = backend.route(q, q.copy(), tau=0.0, k_in=0)
    assert r.inbox.shape == (1, 0)
    assert r.inbox.dtype == np.int32
    # batched: one episode of one agent
    r = backend.route(q[None], q[None].copy(), tau=0.0, k_in=0)
    assert r.inbox.shape == (1, 1, 0)
    assert r.in_degree.shape == (1, 1)


@on_backends("route")
@pytest.mark.parametrize(
    ("n", "k_in", "width"), [(5, 0, 4), (5, 1, 1), (5, 3, 3), (5, 4, 4), (5, 7, 7), (2, 0, 1)]
)
def test_route_inbox_width(backend: Backend, n: int, k_in: int, width: int) -> None:
    # All agents identical: every other agent is a candidate with score 1; ties to the lower index.
    q = np.ones((3, n, 4), np.float32)
    r = backend.route(q, q.copy(), tau=0.0, k_in=k_in)
    assert r.inbox.shape == (3, n, width)
    assert r.scores.shape == (3, n, n) and r.scores.dtype == np.float32
    assert r.adjacency.shape == (3, n, n) and r.adjacency.dtype == np.bool_
    assert r.in_degree.shape == (3, n) and r.in_degree.dtype == np.int32
    kept = n - 1 if k_in == 0 else min(k_in, n - 1)
    for i in range(n):
        providers = [j for j in range(n) if j != i][:kept]
        assert r.inbox[0, i].tolist() == providers + [-1] * (width - kept)
    assert (r.in_degree == kept).all()
    assert (r.adjacency.sum(axis=1) == kept).all()


@on_backends("route")
def test_route_batch_episodes_are_independent(backend: Backend) -> None:
    # Episode 0: the distinct-score case (recipient 0 gets [4, 2, 3]); episode 1: everything zero except
    # agents 0 and 1 with identical rows (edges 0->1 and 1->0).
    q = np.zeros((2, 6, 2), np.float32)
    k = np.zeros((2, 6, 2), np.float32)
    q[0, 0] = [1, 0]
    k[0] = _vecs([[1, 0], [1, 3], [3, 1], [1, 1], [1, 0], [-1, 1]])
    q[1, :2] = k[1, :2] = [2, -1]
    r = backend.route(q, k, tau=0.3, k_in=3)
    assert r.inbox[0, 0].tolist() == [4, 2, 3]
    assert _edge_set(r.adjacency[0]) == {(4, 0), (2, 0), (3, 0)}
    assert _edge_set(r.adjacency[1]) == {(0, 1), (1, 0)}
    assert r.inbox[1].tolist() == [[1, -1, -1], [0, -1, -1]] + [[-1, -1, -1]] * 4
    assert r.in_degree.tolist() == [[3, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0]]


# ---------------------------------------------------------------------------------------------------- toposort


def _kahn_min_index(adj: np.ndarray) -> tuple[list[int], list[int]]:
    """Kahn's algorithm taking the smallest ready index, and longest-path levels (self-loops ignored)."""
    n = adj.shape[0]
    e = adj & ~np.eye(n, dtype=bool)
    indeg = e.sum(axis=0).tolist()
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    level = [0] * n
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for d in np.nonzero(e[v])[0]:
            level[d] = max(level[d], level[v] + 1)
            indeg[d] -= 1
            if indeg[d] == 0:
                heapq.heappush(ready, int(d))
    assert len(order) == n, "not a DAG"
    return order, level


@on_backends("toposort")
def test_toposort_only_self_loops(backend: Backend) -> None:
    adj = np.eye(4, dtype=bool)
    o = backend.toposort(adj)
    assert o.order.tolist() == [0, 1, 2, 3]
    assert o.level.tolist() == [0, 0, 0, 0]
    assert not o.removed.any()
    assert bool(o.is_dag) is True


@on_backends("toposort")
def test_toposort_chain_with_self_loops(backend: Backend) -> None:
    # 2 -> 1 -> 0 plus self-loops on 1 and 0: a DAG once self-loops are ignored.
    adj = _graph(3, [(2, 1), (1, 0), (1, 1), (0, 0)])
    o = backend.toposort(adj)
    assert o.order.tolist() == [2, 1, 0]
    assert o.level.tolist() == [2, 1, 0]
    assert not o.removed.any()
    assert bool(o.is_dag)


@on_backends("toposort")
def test_toposort_two_cycle(backend: Backend) -> None:
    # 0 <-> 1: both have in-degree 1, tie -> 0 first; edge 1 -> 0 comes from an unplaced node: removed.
    o = backend.toposort(_graph(2, [(0, 1), (1, 0)]))
    assert o.order.tolist() == [0, 1]
    assert o.level.tolist() == [0, 1]
    assert _edge_set(o.removed) == {(1, 0)}
    assert not bool(o.is_dag)
    assert o.order.dtype == np.int32 and o.level.dtype == np.int32
    assert o.removed.dtype == np.bool_ and o.is_dag.dtype == np.bool_
    assert o.is_dag.shape == ()


@on_backends("toposort")
@pytest.mark.parametrize("length", [3, 4, 5, 6, 65, 100])
def test_toposort_forward_ring(backend: Backend, length: int) -> None:
    # i -> i+1 (mod L): all in-degree 1, node 0 first, edge L-1 -> 0 removed, then the chain 1, 2, ...
    adj = _graph(length, [(i, (i + 1) % length) for i in range(length)])
    o = backend.toposort(adj)
    assert o.order.tolist() == list(range(length))
    assert o.level.tolist() == list(range(length))
    assert _edge_set(o.removed) == {(length - 1, 0)}
    assert not bool(o.is_dag)


@on_backends("toposort")
@pytest.mark.parametrize("length", [3, 4, 5, 6, 65])
def test_toposort_backward_ring(backend: Backend, length: int) -> None:
    # i -> i-1 (mod L): node 0 first (tie), edge 1 -> 0 removed; then L-1 has no unplaced predecessor, then
    # L-2, ..., 1. Levels: 0 -> 0, node i -> L - i.
    adj = _graph(length, [(i, (i - 1) % length) for i in range(length)])
    o = backend.toposort(adj)
    assert o.order.tolist() == [0] + list(range(length - 1, 0, -1))
    assert o.level.tolist() == [0] + [length - i for i in range(1, length)]
    assert _edge_set(o.removed) == {(1, 0)}
    assert not bool(o.is_dag)


@on_backends("toposort")
def test_toposort_hand_dag(backend: Backend) -> None:
    # 3->1, 3->0, 1->0, 2->0, 4 isolated. Greedy: 2 (in 0, lowest), 3, 1, 0, 4.
    # Levels: 2, 3, 4 are sources (0); 1 -> 1; 0 -> 1 + max(0, 1, 0) = 2.
    adj = _graph(5, [(3, 1), (3, 0), (1, 0), (2, 0)])
    o = backend.toposort(adj)
    assert o.order.tolist() == [2, 3, 1, 0, 4]
    assert o.level.tolist() == [2, 1, 0, 0, 0]
    assert not o.removed.any()
    assert bool(o.is_dag)


@on_backends("toposort")
@pytest.mark.parametrize("n", [5, 12, 64, 70])
def test_toposort_random_dags_match_kahn(backend: Backend, n: int) -> None:
    rng = np.random.default_rng(1234 + n)
    for _ in range(10):
        perm = rng.permutation(n)
        upper = np.triu(rng.random((n, n)) < 0.3, k=1)
        adj = np.zeros((n, n), bool)
        adj[np.ix_(perm, perm)] = upper  # edge perm[a] -> perm[b] for a < b
        order, level = _kahn_min_index(adj)
        g = nx.DiGraph()
        g.add_nodes_from(range(n))
        g.add_edges_from(_edge_set(adj))
        assert order == list(nx.lexicographical_topological_sort(g))
        o = backend.toposort(adj)
        assert o.order.tolist() == order
        assert o.level.tolist() == level
        assert not o.removed.any()
        assert bool(o.is_dag)


@on_backends("toposort")
def test_toposort_weighted_breaks_cycle_at_lightest_in_edges(backend: Backend) -> None:
    # Ring 0 -> 1 -> 2 -> 0 with weights w01 = 5, w12 = 1, w20 = 3. In-weight sums: 0: 3, 1: 5, 2: 1, so node 2
    # goes first and loses 1 -> 2. Then 0 (no unplaced predecessor), then 1.
    adj = _graph(3, [(0, 1), (1, 2), (2, 0)])
    w = np.zeros((3, 3), np.float32)
    w[0, 1], w[1, 2], w[2, 0] = 5, 1, 3
    o = backend.toposort(adj, weights=w)
    assert o.order.tolist() == [2, 0, 1]
    assert o.level.tolist() == [1, 2, 0]
    assert _edge_set(o.removed) == {(1, 2)}
    assert not bool(o.is_dag)
    # unweighted: node 0 first, edge 2 -> 0 removed
    o = backend.toposort(adj)
    assert o.order.tolist() == [0, 1, 2]
    assert _edge_set(o.removed) == {(2, 0)}


@on_backends("toposort")
def test_toposort_weighted_two_cycles(backend: Backend) -> None:
    # 0->1 (2), 1->2 (2), 2->0 (2), 2->3 (1), 3->1 (0.5).
    # Weighted sums: 0: 2, 1: 2.5, 2: 2, 3: 1 -> place 3, remove 2->3. Then 0: 2, 1: 2, 2: 2 -> tie, place 0,
    # remove 2->0. Then 1 has no unplaced predecessor -> 1 (level 1 + max(0, 0)), then 2 (level 2).
    adj = _graph(4, [(0, 1), (1, 2), (2, 0), (2, 3), (3, 1)])
    w = np.zeros((4, 4), np.float32)
    w[0, 1], w[1, 2], w[2, 0], w[2, 3], w[3, 1] = 2, 2, 2, 1, 0.5
    o = backend.toposort(adj, weights=w)
    assert o.order.tolist() == [3, 0, 1, 2]
    assert o.level.tolist() == [0, 1, 2, 0]
    assert _edge_set(o.removed) == {(2, 3), (2, 0)}
    # Unweighted: in-degrees 1, 2, 1, 1 -> 0 (remove 2->0); then 1, 2, 3 all 1 -> 1 (remove 3->1); then 2, 3.
    o = backend.toposort(adj)
    assert o.order.tolist() == [0, 1, 2, 3]
    assert o.level.tolist() == [0, 1, 2, 3]
    assert _edge_set(o.removed) == {(2, 0), (3, 1)}


@on_backends("toposort")
def test_toposort_weighted_source_before_zero_weight_in_edge(backend: Backend) -> None:
    # 1 -> 0 with weight 0: node 0 still has an in-edge, so source 1 goes first despite its higher index.
    adj = _graph(2, [(1, 0)])
    o = backend.toposort(adj, weights=np.zeros((2, 2), np.float32))
    assert o.order.tolist() == [1, 0]
    assert o.level.tolist() == [1, 0]
    assert bool(o.is_dag)


@on_backends("toposort")
def test_toposort_weighted_equal_weights_follow_index(backend: Backend) -> None:
    adj = _graph(4, [(i, (i + 1) % 4) for i in range(4)])
    o = backend.toposort(adj, weights=np.full((4, 4), 0.25, np.float32))
    assert o.order.tolist() == [0, 1, 2, 3]
    assert _edge_set(o.removed) == {(3, 0)}


@on_backends("toposort")
def test_toposort_inactive_nodes(backend: Backend) -> None:
    # Node 1 inactive: edges 0->1, 1->2 are ignored, 3->0 remains. Active greedy: 2 (in 0), 3, 0; then 1.
    adj = _graph(4, [(0, 1), (1, 2), (3, 0)])
    active = np.array([True, False, True, True])
    o = backend.toposort(adj, active=active)
    assert o.order.tolist() == [2, 3, 0, 1]
    assert o.level.tolist() == [1, -1, 0, 0]
    assert not o.removed.any()
    assert bool(o.is_dag)
    # a cycle through an inactive node is no cycle
    ring = _graph(3, [(0, 1), (1, 2), (2, 0)])
    o = backend.toposort(ring, active=np.array([True, False, True]))
    assert o.order.tolist() == [2, 0, 1]
    assert o.level.tolist() == [1, -1, 0]
    assert not o.removed.any() and bool(o.is_dag)
    # all inactive: index order, every level -1
    o = backend.toposort(ring, active=np.zeros(3, bool))
    assert o.order.tolist() == [0, 1, 2]
    assert o.level.tolist() == [-1, -1, -1]
    assert bool(o.is_dag)


@on_backends("toposort")
def test_toposort_batch_mixed(backend: Backend) -> None:
    # Batch of the 2-cycle (padded to 3 with an inactive node 2), the hand DAG restricted to 3 nodes and an
    # empty graph: each graph is sorted independently.
    adj = np.zeros((3, 3, 3), bool)
    adj[0] = _graph(3, [(0, 1), (1, 0), (2, 0)])
    adj[1] = _graph(3, [(2, 1), (1, 0), (2, 0)])
    active = np.array([[True, True, False], [True, True, True], [True, True, True]])
    o = backend.toposort(adj, active=active)
    assert o.order.tolist() == [[0, 1, 2], [2, 1, 0], [0, 1, 2]]
    assert o.level.tolist() == [[0, 1, -1], [2, 1, 0], [0, 0, 0]]
    assert _edge_set(o.removed[0]) == {(1, 0)}
    assert not o.removed[1:].any()
    assert o.is_dag.tolist() == [False, True, True]


# ---------------------------------------------------------------------------------------------------- graph_stats


@on_backends("graph_stats")
def test_graph_stats_small(backend: Backend) -> None:
    # 0->1, 1->0, 1->2 (+ a self-loop on 2, ignored): 3 edges of 6 pairs; 0<->1 mutual -> 2 of 3 edges.
    adj = _graph(3, [(0, 1), (1, 0), (1, 2), (2, 2)])
    prev = _graph(3, [(0, 1), (2, 0), (0, 0)])
    st = backend.graph_stats(adj, prev=prev)
    assert int(st.edges) == 3
    assert float(st.density) == pytest.approx(0.5, abs=1e-12)
    assert st.in_degree.tolist() == [1, 1, 1]
    assert st.out_degree.tolist() == [1, 2, 0]
    assert float(st.reciprocity) == pytest.approx(2 / 3, abs=1e-12)
    # intersection {0->1}, union {0->1, 1->0, 1->2, 2->0}: 1 - 1/4
    assert float(st.jaccard) == pytest.approx(0.75, abs=1e-12)
    assert backend.graph_stats(adj).jaccard is None


@on_backends("graph_stats")
def test_graph_stats_active_mask(backend: Backend) -> None:
    # Node 2 inactive: only 0<->1 remains, 2 edges of 2 pairs, fully reciprocal.
    adj = _graph(3, [(0, 1), (1, 0), (1, 2), (2, 0)])
    st = backend.graph_stats(adj, np.array([True, True, False]))
    assert int(st.edges) == 2
    assert float(st.density) == pytest.approx(1.0, abs=1e-12)
    assert float(st.reciprocity) == pytest.approx(1.0, abs=1e-12)
    assert st.in_degree.tolist() == [1, 1, 0]
    assert st.out_degree.tolist() == [1, 1, 0]


@on_backends("graph_stats")
def test_graph_stats_jaccard_edge_cases(backend: Backend) -> None:
    n = 4
    empty = np.zeros((n, n), bool)
    ring = _graph(n, [(i, (i + 1) % n) for i in range(n)])
    back = _graph(n, [((i + 1) % n, i) for i in range(n)])
    adj = np.stack([empty, ring, ring, ring, empty])
    prev = np.stack([empty, ring, back, empty, np.eye(n, dtype=bool)])
    st = backend.graph_stats(adj, prev=prev)
    # both empty -> 0; identical -> 0; disjoint -> 1; against empty -> 1; self-loops only count as empty -> 0
    np.testing.assert_allclose(st.jaccard, [0.0, 0.0, 1.0, 1.0, 0.0], atol=1e-12)
    assert st.edges.tolist() == [0, 4, 4, 4, 0]
    np.testing.assert_allclose(st.density, [0, 4 / 12, 4 / 12, 4 / 12, 0], atol=1e-12)
    np.testing.assert_allclose(st.reciprocity, [0, 0, 0, 0, 0], atol=1e-12)
    assert st.edges.dtype == np.int64 and st.density.dtype == np.float64
    assert st.in_degree.dtype == np.int32 and st.in_degree.shape == (5, n)
    # a complete graph is fully reciprocal, density 1
    full = backend.graph_stats(np.ones((n, n), bool))
    assert int(full.edges) == n * (n - 1)
    assert float(full.density) == pytest.approx(1.0, abs=1e-12)
    assert float(full.reciprocity) == pytest.approx(1.0, abs=1e-12)


@on_backends("graph_stats")
def test_graph_stats_fewer_than_two_nodes(backend: Backend) -> None:
    st = backend.graph_stats(np.ones((1, 1), bool))
    assert int(st.edges) == 0 and float(st.density) == 0.0 and float(st.reciprocity) == 0.0
    # two nodes, one active
    st = backend.graph_stats(np.ones((2, 2), bool), np.array([True, False]))
    assert int(st.edges) == 0 and float(st.density) == 0.0


# ---------------------------------------------------------------------------------------------------- density

# methods/agentconductor.md §4.7: (|V|, |E|, s, N_max) -> S_node, S_edge, S_depth, S_complex = r_g
TABLE = [
    ((2, 1, 2, 4), (0.6065, 0.7165, 0.0, 7.6875)),
    ((3, 2, 3, 4), (0.4724, 0.7659, 0.0, 7.4203)),
    ((4, 3, 3, 4), (0.3679, 0.8071, 0.25, 9.3196)),
    ((7, 11, 5, 10), (0.4966, 0.7852, 0.2857, 10.5149)),
    ((3, 8, 3, 10), (0.7408, 0.3442, 0.0, 4.1750)),
    ((1, 0, 1, 4), (0.7788, 1.0, 0.0, 16.0997)),
]
# over the cap: (N_max, |V|) -> r_g
OVER_CAP = [((4, 5), -0.2449), ((4, 6), -0.4621), ((7, 8), -0.1419), ((7, 9), -0.2782), ((10, 11), -0.0997)]


@on_backends("conductor_density")
@pytest.mark.parametrize(("args", "want"), TABLE)
def test_conductor_density_table(backend: Backend, args: tuple[int, ...], want: tuple[float, ...]) -> None:
    d = backend.conductor_density(*args)
    got = (float(d.s_node), float(d.s_edge), float(d.s_depth), float(d.s_complex))
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    assert float(d.reward) == pytest.approx(want[3], abs=1e-4)


@on_backends("conductor_density")
def test_conductor_density_table_vectorised(backend: Backend) -> None:
    cols = np.array([a for a, _ in TABLE], dtype=np.int64).T
    want = np.array([w for _, w in TABLE]).T
    d = backend.conductor_density(*cols)
    for got, exp in zip((d.s_node, d.s_edge, d.s_depth, d.s_complex, d.reward), (*want, want[3])):
        assert got.shape == (len(TABLE),) and got.dtype == np.float64
        np.testing.assert_allclose(got, exp, atol=1e-4, rtol=0)


@on_backends("conductor_density")
@pytest.mark.parametrize(("cap_v", "want"), OVER_CAP)
def test_conductor_density_over_cap_reward(backend: Backend, cap_v: tuple[int, int], want: float) -> None:
    n_max, v = cap_v
    for edges, steps in [(0, 1), (v - 1, v), (3, 2)]:
        d = backend.conductor_density(v, edges, steps, n_max)
        assert float(d.reward) == pytest.approx(want, abs=1e-4)
        # S_complex is still reported, and it is positive while the reward is negative
        assert float(d.s_complex) > 0
        assert float(d.s_complex) == pytest.approx(
            np.exp(np.exp(-v / n_max) + 2 * np.exp(-edges / (v * (v - 0.5))) + 1 - steps / v), rel=1e-12
        )


@on_backends("conductor_density")
def test_conductor_density_broadcasts(backend: Backend) -> None:
    # nodes (2, 1) x edges (3,) with scalar steps and n_max -> shape (2, 3). At the cap (V = N_max = 4) the
    # reward is still S_complex.
    nodes = np.array([[2], [4]])
    edges = np.array([0, 1, 2])
    d = backend.conductor_density(nodes, edges, 1, 4)
    assert d.reward.shape == (2, 3)
    np.testing.assert_allclose(d.s_node, np.exp(-np.array([[2, 2, 2], [4, 4, 4]]) / 4), rtol=1e-12)
    np.testing.assert_allclose(d.reward, d.s_complex, rtol=0, atol=0)
    assert float(d.s_edge[1, 0]) == 1.0  # E = 0
    assert float(d.s_depth[1, 2]) == pytest.approx(0.75, abs=1e-15)


@on_backends("nearest")
def test_nearest_hand_computed(backend: Backend) -> None:
    table = np.array([[1, 0], [0, 1], [0, 0], [2, 0], [1, 1], [-1, 0]], np.float32)
    queries = np.array([[3, 0], [0, 0], [1, 1]], np.float32)
    # query 0: rows 0 and 3 tie at 1 (the lower row first), then row 4 (0.707), rows 1 and 2 at 0, row 5 at -1;
    # the zero query scores every row 0 (ties: row order); query 2: row 4 (1), then 0, 1, 3 (0.707)
    got = backend.nearest(table, queries, k=4)
    assert np.asarray(got).tolist() == [[0, 3, 4, 1], [0, 1, 2, 3], [4, 0, 1, 3]]
    keep = np.ones((3, 6), bool)
    keep[0, [0, 4]] = False  # query 0 may not get rows 0 and 4
    keep[1] = False  # query 1 may get nothing
    keep[2, 1:] = False  # query 2 only row 0
    got = backend.nearest(table, queries, k=8, keep=keep)
    assert np.asarray(got).tolist() == [
        [3, 1, 2, 5, -1, -1, -1, -1],
        [-1] * 8,
        [0, -1, -1, -1, -1, -1, -1, -1],
    ]
    # one query (D,) gives (k,)
    assert np.asarray(backend.nearest(table, queries[2], k=2)).tolist() == [4, 0]


@on_backends("nearest")
def test_nearest_errors(backend: Backend) -> None:
    table = np.ones((4, 3), np.float32)
    queries = np.ones((2, 3), np.float32)
    with pytest.raises(errors.OutOfRangeError, match="k must be >= 1"):
        backend.nearest(table, queries, k=0)
    with pytest.raises(errors.ShapeError, match="queries must have D = 3"):
        backend.nearest(table, queries[:, :2], k=1)
    with pytest.raises(errors.ShapeError, match="keep must have shape"):
        backend.nearest(table, queries, k=1, keep=np.ones((2, 3), bool))
    bad = table.copy()
    bad[2, 1] = np.inf
    with pytest.raises(errors.NonFiniteError, match="table must be finite; got NaN or infinity in row 2"):
        backend.nearest(bad, queries, k=1)
    queries[1, 0] = np.nan
    with pytest.raises(errors.NonFiniteError, match="queries must be finite; got NaN or infinity at query 1"):
        backend.nearest(table, queries, k=1)
