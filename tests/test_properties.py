"""Property tests (hypothesis) of route and toposort on every backend: invariants that must hold for any input,
checked directly on the outputs, plus agreement with the numpy reference."""

from __future__ import annotations

import heapq

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toporoute import _core, ops
from toporoute.backends import cpu
from toporoute.backends import reference as ref

BACKENDS = ["reference", "cpu"]
ISAS = list(_core.build_info()["simd"]["supported"])

# deterministic runs (same examples every time) and no example database written into the checkout
SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow],
}

# ---------------------------------------------------------------------------------------------------- strategies

# small, exactly representable values make ties, zero rows and exact +-1 / 0 scores common
_SIMPLE = st.sampled_from([-3.0, -2.0, -1.0, -0.5, 0.0, 0.0, 0.0, 0.25, 0.5, 1.0, 2.0, 4.0])
# normal float32 magnitudes in [2^-20, 8] or 0: scaling by 2^+-8 stays exact (no overflow, no subnormals)
_WIDE = st.floats(-8, 8, width=32, allow_subnormal=False).map(lambda x: x if abs(x) >= 2.0**-20 else 0.0)
ELEMENTS = st.one_of(_SIMPLE, _WIDE)


@st.composite
def route_inputs(draw):
    B = draw(st.integers(1, 3))
    N = draw(st.integers(1, 9))
    D = draw(st.integers(1, 9))
    q = draw(hnp.arrays(np.float32, (B, N, D), elements=ELEMENTS))
    k = draw(hnp.arrays(np.float32, (B, N, D), elements=ELEMENTS))
    # occasionally copy rows (exact ties across providers) or zero whole rows
    if draw(st.booleans()) and N >= 2:
        src, dst = draw(st.integers(0, N - 1)), draw(st.integers(0, N - 1))
        k[:, dst] = k[:, src]
    zero = draw(hnp.arrays(np.bool_, (B, N), elements=st.sampled_from([False, False, False, True])))
    q[zero] = 0
    active = draw(st.none() | hnp.arrays(np.bool_, (B, N)))
    tau = draw(st.sampled_from([-1.0, -0.5, 0.0, 0.3, 0.5, 1.0]) | st.floats(-1.0, 1.0))
    k_in = draw(st.integers(0, N + 1))
    return q, k, active, tau, k_in


def _run_route(backend: str, q, k, active, tau, k_in):
    return ops.route(q, k, tau=tau, k_in=k_in, active=active, backend=backend)


# ---------------------------------------------------------------------------------------------------- route


@settings(max_examples=150, **SETTINGS)
@given(route_inputs())
def test_route_cpu_equals_reference(inputs) -> None:
    q, k, active, tau, k_in = inputs
    want = ref.route(q, k, tau=tau, k_in=k_in, active=active)
    for isa in ISAS + [""]:
        got = cpu.route(q, k, tau=tau, k_in=k_in, active=active, isa=isa)
        np.testing.assert_allclose(got.scores, want.scores, rtol=0, atol=1e-6, err_msg=isa)
        np.testing.assert_array_equal(got.adjacency, want.adjacency, err_msg=isa)
        np.testing.assert_array_equal(got.inbox, want.inbox, err_msg=isa)
        np.testing.assert_array_equal(got.in_degree, want.in_degree, err_msg=isa)
    got = ops.route(q, k, tau=tau, k_in=k_in, active=active, backend="reference")
    np.testing.assert_array_equal(got.scores, want.scores)


def _check_route_invariants(r, q, k, active, tau, k_in) -> None:
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


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=120, **SETTINGS)
@given(inputs=route_inputs())
def test_route_invariants(backend: str, inputs) -> None:
    q, k, active, tau, k_in = inputs
    r = _run_route(backend, q, k, active, tau, k_in)
    _check_route_invariants(r, q, k, active, tau, k_in)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=80, **SETTINGS)
@given(inputs=route_inputs(), data=st.data())
def test_route_invariant_under_power_of_two_scaling(backend: str, inputs, data) -> None:
    # multiplying rows by powers of two scales every float64 product and norm exactly: scores are identical
    q, k, active, tau, k_in = inputs
    B, N, _ = q.shape
    eq = data.draw(hnp.arrays(np.int32, (B, N, 1), elements=st.integers(-8, 8)))
    ek = data.draw(hnp.arrays(np.int32, (B, N, 1), elements=st.integers(-8, 8)))
    qs = (q * np.exp2(eq)).astype(np.float32)
    ks = (k * np.exp2(ek)).astype(np.float32)
    a = _run_route(backend, q, k, active, tau, k_in)
    b = _run_route(backend, qs, ks, active, tau, k_in)
    np.testing.assert_array_equal(b.scores, a.scores)
    np.testing.assert_array_equal(b.adjacency, a.adjacency)
    np.testing.assert_array_equal(b.inbox, a.inbox)
    np.testing.assert_array_equal(b.in_degree, a.in_degree)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, **SETTINGS)
@given(inputs=route_inputs())
def test_route_single_graph_equals_batch_slice(backend: str, inputs) -> None:
    q, k, active, tau, k_in = inputs
    batch = _run_route(backend, q, k, active, tau, k_in)
    for b in range(q.shape[0]):
        one = _run_route(backend, q[b], k[b], None if active is None else active[b], tau, k_in)
        for name in ("scores", "adjacency", "inbox", "in_degree"):
            np.testing.assert_array_equal(getattr(one, name), getattr(batch, name)[b], err_msg=name)


# ---------------------------------------------------------------------------------------------------- toposort


@st.composite
def graphs(draw, *, dag: bool = False, weighted: bool | None = None):
    """(adj, weights, active): a batch of random graphs from a drawn seed, density and size (including sizes
    around the 64-node bitset limit); DAGs are random upper-triangular graphs under a random permutation."""
    B = draw(st.integers(1, 3))
    N = draw(st.integers(1, 12) | st.sampled_from([63, 64, 65, 70]))
    density = draw(st.sampled_from([0.0, 0.05, 0.2, 0.5, 0.9, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dag:
        adj = np.zeros((B, N, N), bool)
        for b in range(B):
            p = rng.permutation(N)
            adj[b][np.ix_(p, p)] = np.triu(rng.random((N, N)) < density, k=1)
    else:
        adj = rng.random((B, N, N)) < density
    if weighted is None:
        weighted = draw(st.booleans())
    weights = None
    if weighted:
        weights = rng.random((B, N, N)).astype(np.float32)
        if draw(st.booleans()):
            weights = np.floor(weights * 4) / np.float32(4)  # coarse: many equal sums, zeros
    active = rng.random((B, N)) < 0.8 if draw(st.booleans()) else None
    return adj, weights, active


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


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=100, **SETTINGS)
@given(g=graphs())
def test_toposort_invariants(backend: str, g) -> None:
    adj, weights, active = g
    o = ops.toposort(adj, weights=weights, active=active, backend=backend)
    _check_order(o, adj, weights, active)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=50, **SETTINGS)
@given(g=graphs(dag=True))
def test_toposort_dags(backend: str, g) -> None:
    adj, weights, active = g
    B, N, _ = adj.shape
    o = ops.toposort(adj, weights=weights, active=active, backend=backend)
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


@settings(max_examples=120, **SETTINGS)
@given(g=graphs())
def test_toposort_cpu_equals_reference(g) -> None:
    adj, weights, active = g
    want = ref.toposort(adj, weights=weights, active=active)
    got = ops.toposort(adj, weights=weights, active=active, backend="cpu")
    for name in ("order", "level", "removed", "is_dag"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=40, **SETTINGS)
@given(g=graphs(weighted=False), scale=st.sampled_from([0.5, 1.0, 3.0]))
def test_toposort_uniform_weights_equal_unweighted(backend: str, g, scale: float) -> None:
    # equal weights make the weighted key (has in-edges, c * count, index), the same ranking as count
    adj, _, active = g
    w = np.full(adj.shape, scale, np.float32)
    a = ops.toposort(adj, active=active, backend=backend)
    b = ops.toposort(adj, weights=w, active=active, backend=backend)
    for name in ("order", "level", "removed", "is_dag"):
        np.testing.assert_array_equal(getattr(b, name), getattr(a, name), err_msg=name)
