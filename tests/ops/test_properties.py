"""Property tests (hypothesis) on every backend (tests/_backends.py): invariants that must hold for any input,
checked directly on each backend's outputs (route, toposort, mean_pool, route_indexed). The compiled core runs
at this process's SIMD level only: tests/ops/test_parity.py holds every level to the reference, on random
inputs too."""

from __future__ import annotations

import heapq

import _inputs as inp
import hypothesis.extra.numpy as hnp
import numpy as np
from _backends import Backend, assert_matches, mean_pool_f64, on_backends
from hypothesis import given, settings
from hypothesis import strategies as st

# ---------------------------------------------------------------------------------------------------- route


def _check_route_invariants(r, q, k, *, active, tau, k_in) -> None:
    B, N, _ = q.shape
    t32 = np.float32(tau)
    adj, scores, inbox, deg = r.adjacency, r.scores, r.inbox, r.in_degree
    act = np.ones((B, N), bool) if active is None else active
    q_ok = act & (q != 0).any(axis=-1)
    k_ok = act & (k != 0).any(axis=-1)
    assert scores.dtype == np.float32 and (np.abs(scores) <= 1).all()
    # zero rows and inactive agents score 0
    valid = k_ok[:, :, None] & q_ok[:, None, :]
    assert (scores[~valid] == 0).all()
    # no self-loops, nothing touching an inactive agent or a zero row
    assert not adj[:, np.arange(N), np.arange(N)].any()
    assert not (adj & ~valid).any()
    # every edge beats tau strictly (in float32)
    assert (scores[adj] > t32).all()
    # degrees and the cap
    np.testing.assert_array_equal(deg, adj.sum(axis=-2))
    if k_in > 0:
        assert (deg <= k_in).all()
    assert inbox.shape == (B, N, k_in if k_in > 0 else max(N - 1, 0))
    cand = valid & (scores > t32) & ~np.eye(N, dtype=bool)[None]
    for b in range(B):
        for i in range(N):
            providers = [int(j) for j in np.nonzero(adj[b, :, i])[0]]
            ranked = sorted(providers, key=lambda j: (-scores[b, j, i], j))
            row = inbox[b, i].tolist()
            assert row == ranked + [-1] * (len(row) - len(ranked)), (b, i, row, ranked)
            # the kept providers are the best candidates: any dropped candidate ranks after every kept one
            dropped = [int(j) for j in np.nonzero(cand[b, :, i] & ~adj[b, :, i])[0]]
            if dropped:
                assert k_in > 0 and deg[b, i] == k_in
                worst_kept = (-scores[b, ranked[-1], i], ranked[-1])
                assert all((-scores[b, j, i], j) > worst_kept for j in dropped)


@on_backends("route", simd_levels=False)
@settings(max_examples=120, **inp.DETERMINISTIC)
@given(case=inp.route_cases())
def test_route_invariants(backend: Backend, case: tuple) -> None:
    q, k, kw = case
    _check_route_invariants(backend.route(q, k, **kw), q, k, **kw)


@on_backends("route", simd_levels=False)
@settings(max_examples=80, **inp.DETERMINISTIC)
@given(case=inp.route_cases(), data=st.data())
def test_route_invariant_under_power_of_two_scaling(
    backend: Backend, case: tuple, data: st.DataObject
) -> None:
    # multiplying rows by powers of two scales every float64 product and norm exactly: scores are identical
    q, k, kw = case
    B, N, _ = q.shape
    eq = data.draw(hnp.arrays(np.int32, (B, N, 1), elements=st.integers(-8, 8)))
    ek = data.draw(hnp.arrays(np.int32, (B, N, 1), elements=st.integers(-8, 8)))
    qs = (q * np.exp2(eq)).astype(np.float32)
    ks = (k * np.exp2(ek)).astype(np.float32)
    a, b = backend.route(q, k, **kw), backend.route(qs, ks, **kw)
    assert_matches("route", b, a, "scaled by powers of two", exact=True)


@on_backends("route", simd_levels=False)
@settings(max_examples=60, **inp.DETERMINISTIC)
@given(case=inp.route_cases())
def test_route_single_graph_equals_batch_slice(backend: Backend, case: tuple) -> None:
    q, k, kw = case
    batch = backend.route(q, k, **kw)
    for b in range(q.shape[0]):
        one = backend.route(q[b], k[b], **{**kw, "active": None if kw["active"] is None else kw["active"][b]})
        episode = type(batch)(*(v[b] for v in vars(batch).values()))
        assert_matches("route", one, episode, f"episode {b}", exact=True)


# ---------------------------------------------------------------------------------------------------- toposort


def _positions(order: np.ndarray) -> np.ndarray:
    pos = np.empty_like(order)
    pos[order] = np.arange(order.size)
    return pos


def _check_order(o, adj, weights, active) -> None:
    B, N, _ = adj.shape
    act = np.ones((B, N), bool) if active is None else active
    for b in range(B):
        order, level, removed = o.order[b], o.level[b], o.removed[b]
        assert sorted(order.tolist()) == list(range(N)), "order is not a permutation"
        n_act = int(act[b].sum())
        # inactive nodes last, in index order, level -1
        assert order[n_act:].tolist() == np.nonzero(~act[b])[0].tolist()
        assert (level[~act[b]] == -1).all() and (level[act[b]] >= 0).all()
        pos = _positions(order)
        e = adj[b] & ~np.eye(N, dtype=bool) & act[b][:, None] & act[b][None, :]
        # removed = exactly the edges that point backwards in the order
        backwards = e & (pos[:, None] > pos[None, :])
        np.testing.assert_array_equal(removed, backwards)
        assert not (removed & ~adj[b]).any()
        kept = e & ~removed
        src, dst = np.nonzero(kept)
        assert (pos[src] < pos[dst]).all(), "graph minus removed edges is not acyclic in this order"
        assert bool(o.is_dag[b]) == (not removed.any())
        # levels: 1 + max level of kept predecessors, 0 for none
        for v in np.nonzero(act[b])[0]:
            preds = np.nonzero(kept[:, v])[0]
            want = 0 if preds.size == 0 else int(level[preds].max()) + 1
            assert level[v] == want, (b, v)
        # greedy choice: each placed node has the smallest key among the unplaced, ties to the lowest index
        unplaced = act[b].copy()
        for t in range(n_act):
            from_unplaced = e & unplaced[:, None]
            if weights is None:
                key = {i: (int(from_unplaced[:, i].sum()), i) for i in np.nonzero(unplaced)[0]}
            else:
                key = {}
                for i in np.nonzero(unplaced)[0]:
                    ins = weights[b, from_unplaced[:, i], i].astype(np.float64).tolist()
                    key[i] = (bool(ins), sum(ins, 0.0), i)  # float64, summed in ascending source order
            assert order[t] == min(key, key=key.get), (b, t)
            unplaced[order[t]] = False


@on_backends("toposort")
@settings(max_examples=100, **inp.DETERMINISTIC)
@given(g=inp.graph_cases())
def test_toposort_invariants(backend: Backend, g: tuple) -> None:
    adj, weights, active = g
    o = backend.toposort(adj, weights=weights, active=active)
    _check_order(o, adj, weights, active)


@on_backends("toposort")
@settings(max_examples=50, **inp.DETERMINISTIC)
@given(g=inp.graph_cases(dag=True))
def test_toposort_dags(backend: Backend, g: tuple) -> None:
    adj, weights, active = g
    B, N, _ = adj.shape
    o = backend.toposort(adj, weights=weights, active=active)
    assert o.is_dag.all()
    assert not o.removed.any()
    act = np.ones((B, N), bool) if active is None else active
    for b in range(B):
        e = adj[b] & act[b][:, None] & act[b][None, :]
        src, dst = np.nonzero(e)
        assert (o.level[b][src] < o.level[b][dst]).all()
        # Kahn's order, smallest ready index first
        indeg = e.sum(axis=0)
        ready = [int(i) for i in np.nonzero(act[b] & (indeg == 0))[0]]
        heapq.heapify(ready)
        kahn = []
        while ready:
            v = heapq.heappop(ready)
            kahn.append(v)
            for d in np.nonzero(e[v])[0]:
                indeg[d] -= 1
                if indeg[d] == 0:
                    heapq.heappush(ready, int(d))
        assert o.order[b][: len(kahn)].tolist() == kahn
    _check_order(o, adj, weights, active)


@on_backends("toposort")
@settings(max_examples=40, **inp.DETERMINISTIC)
@given(g=inp.graph_cases(weighted=False), scale=st.sampled_from([0.5, 1.0, 3.0]))
def test_toposort_uniform_weights_equal_unweighted(backend: Backend, g: tuple, scale: float) -> None:
    # equal weights make the weighted key (has in-edges, c * count, index), the same ranking as count
    adj, _, active = g
    w = np.full(adj.shape, scale, np.float32)
    a = backend.toposort(adj, active=active)
    b = backend.toposort(adj, weights=w, active=active)
    assert_matches("toposort", b, a, f"uniform weights {scale}")


# ------------------------------------------------------------------------------------------ mean_pool


@on_backends("mean_pool")
@settings(max_examples=120, **inp.DETERMINISTIC)
@given(data=st.data())
def test_mean_pool_equals_its_definition(backend: Backend, data: st.DataObject) -> None:
    n, L, D = data.draw(st.integers(0, 5)), data.draw(st.integers(0, 6)), data.draw(st.integers(0, 9))
    elements = st.floats(-1e4, 1e4, width=32, allow_subnormal=False)
    hidden = data.draw(hnp.arrays(np.float32, (n, L, D), elements=elements))
    values = data.draw(hnp.arrays(np.int64, (n, L), elements=st.integers(0, 2)))
    mask = values.astype(data.draw(st.sampled_from([np.bool_, np.int32, np.int64])))
    want = mean_pool_f64(hidden, mask).astype(np.float32)
    assert_matches("mean_pool", backend.mean_pool(hidden, mask), want)
    # with out= and rows: those rows written (the same values), every other row untouched
    M = n + data.draw(st.integers(0, 3))
    rows = data.draw(st.permutations(range(M)))[:n]
    out = np.full((M, D), -7, np.float32)
    backend.mean_pool(hidden, mask, out=out, rows=np.array(rows, np.int64))
    assert_matches("mean_pool", out[rows], want, "out[rows]")
    assert (np.delete(out, rows, axis=0) == -7).all()


# -------------------------------------------------------------------------------------- route_indexed


@st.composite
def indexed_cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, int]:
    """(table, q_rows, k_rows, tau, k_in): small tables of tie-prone values (M = 0 included), int32 or int64
    rows with -1 padding."""
    M = draw(st.integers(0, 8))
    D = draw(st.integers(1, 7))
    B = draw(st.integers(1, 3))
    N = draw(st.integers(1, 7))
    table = draw(
        hnp.arrays(np.float32, (M, D), elements=st.sampled_from([-2.0, -1.0, 0.0, 0.0, 0.5, 1.0, 3.0]))
    )
    rows = st.integers(-1, M - 1) if M else st.just(-1)
    dtype = draw(st.sampled_from([np.int32, np.int64]))
    q_rows = draw(hnp.arrays(dtype, (B, N), elements=rows))
    k_rows = draw(hnp.arrays(dtype, (B, N), elements=rows))
    tau = draw(st.sampled_from([-1.0, -0.5, 0.0, 0.3, 1.0]))
    k_in = draw(st.integers(0, N + 1))
    return table, q_rows, k_rows, tau, k_in


@on_backends("route_indexed", simd_levels=False)
@settings(max_examples=150, **inp.DETERMINISTIC)
@given(case=indexed_cases())
def test_route_indexed_equals_route_on_gathered_rows(backend: Backend, case: tuple) -> None:
    # bit for bit: the backend's own route on table[rows] (zeros and inactive where a row is -1)
    table, q_rows, k_rows, tau, k_in = case
    got = backend.route_indexed(table, q_rows, k_rows, tau=tau, k_in=k_in)
    active = (q_rows >= 0) & (k_rows >= 0)
    want = backend.route(
        inp.gather(table, q_rows), inp.gather(table, k_rows), tau=tau, k_in=k_in, active=active
    )
    assert_matches("route_indexed", got, want, exact=True)
