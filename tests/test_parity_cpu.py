"""Parity of the compiled CPU backend (every supported SIMD level) with the numpy reference: integer and
boolean outputs exactly equal, scores within 1e-6; strided inputs read in place; the OpenMP path."""

from __future__ import annotations

import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from toporoute import _core, ops
from toporoute.backends import cpu
from toporoute.backends import reference as ref

ISAS = list(_core.build_info()["simd"]["supported"])
SCORE_ATOL = 1e-6


def test_supported_isas_include_generic() -> None:
    # the parity grid below runs once per supported level; an empty list would test nothing
    assert "generic" in ISAS
    assert set(ISAS) <= set(_core.build_info()["simd"]["compiled"])


# ---------------------------------------------------------------------------------------------------- helpers


def make_qk(
    rng: np.random.Generator, B: int, N: int, D: int, *, special: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Random (B, N, D) float32 needs and offers with some zero rows, duplicated rows and rows scaled by a
    power of two (exact score ties)."""
    q = rng.standard_normal((B, N, D)).astype(np.float32)
    k = rng.standard_normal((B, N, D)).astype(np.float32)
    if not special:
        return q, k
    q[rng.random((B, N)) < 0.12] = 0
    k[rng.random((B, N)) < 0.12] = 0
    if N >= 2:
        for b in range(B):
            s, d = rng.choice(N, size=2, replace=False)
            k[b, d] = k[b, s]  # duplicate offer: tie for every recipient
            s, d = rng.choice(N, size=2, replace=False)
            q[b, d] = q[b, s]
            if N >= 3 and rng.random() < 0.5:
                s, d = rng.choice(N, size=2, replace=False)
                k[b, d] = k[b, s] * np.float32(4)  # same direction: same score exactly
            if rng.random() < 0.3:
                j = rng.integers(N)
                k[b, j] = q[b, j]  # an agent offering exactly what it needs
    return q, k


def make_active(rng: np.random.Generator, B: int, N: int) -> np.ndarray:
    return rng.random((B, N)) < 0.75


def assert_routes_equal(got, want, ctx: str) -> None:
    assert got.scores.shape == want.scores.shape, ctx
    assert got.scores.dtype == np.float32, ctx
    np.testing.assert_allclose(got.scores, want.scores, rtol=0, atol=SCORE_ATOL, err_msg=ctx)
    for name in ("adjacency", "inbox", "in_degree"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.dtype == w.dtype, f"{ctx}: {name} dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"{ctx}: {name} shape {g.shape} != {w.shape}"
        if not np.array_equal(g, w):
            idx = np.argwhere(g != w)[0]
            raise AssertionError(
                f"{ctx}: {name} differs at {tuple(idx)}: cpu {g[tuple(idx)]}, reference {w[tuple(idx)]}"
            )


def assert_orders_equal(got, want, ctx: str) -> None:
    for name in ("order", "level", "removed", "is_dag"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.dtype == w.dtype, f"{ctx}: {name} dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"{ctx}: {name} shape"
        if not np.array_equal(g, w):
            b = int(np.argwhere((g != w).reshape(g.shape[0], -1).any(axis=1))[0][0]) if g.ndim else 0
            raise AssertionError(f"{ctx}: {name} differs in graph {b}: cpu {g[b]}, reference {w[b]}")


def assert_stats_equal(got, want, ctx: str) -> None:
    for name in ("edges", "in_degree", "out_degree"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"{ctx}: {name}")
        assert getattr(got, name).dtype == getattr(want, name).dtype, f"{ctx}: {name} dtype"
    for name in ("density", "reciprocity"):
        np.testing.assert_allclose(
            getattr(got, name), getattr(want, name), rtol=1e-12, atol=0, err_msg=f"{ctx}: {name}"
        )
    if want.jaccard is None:
        assert got.jaccard is None, ctx
    else:
        np.testing.assert_allclose(got.jaccard, want.jaccard, rtol=1e-12, atol=0, err_msg=f"{ctx}: jaccard")


# ---------------------------------------------------------------------------------------------------- route


BS = [1, 3, 64]
NS = [1, 2, 3, 5, 8, 13, 33]
DS = [1, 3, 7, 8, 9, 16, 384]
TAUS = [-0.5, 0.0, 0.3]
K_INS = [0, 1, 3]


@pytest.mark.parametrize("D", DS)
@pytest.mark.parametrize("N", NS)
def test_route_parity_grid(N: int, D: int) -> None:
    rng = np.random.default_rng(1000 * N + D)
    for B in BS:
        q, k = make_qk(rng, B, N, D)
        act = make_active(rng, B, N)
        for active in (None, act):
            for tau in TAUS:
                for k_in in K_INS:
                    want = ref.route(q, k, tau=tau, k_in=k_in, active=active)
                    base = f"B={B} N={N} D={D} tau={tau} k_in={k_in} active={active is not None}"
                    for isa in ISAS:
                        got = cpu.route(q, k, tau=tau, k_in=k_in, active=active, isa=isa)
                        assert_routes_equal(got, want, f"{base} isa={isa}")
                    got = ops.route(q, k, tau=tau, k_in=k_in, active=active, backend="cpu")
                    assert_routes_equal(got, want, f"{base} default isa")


@pytest.mark.parametrize("isa", ISAS)
def test_route_parity_many_ties(isa: str) -> None:
    # small integer vectors: many exactly equal scores (ties), scores of exactly 0 and +-1
    rng = np.random.default_rng(7)
    for D in (1, 2, 3, 8, 17):
        for N in (2, 5, 9, 16):
            q = rng.integers(-2, 3, size=(32, N, D)).astype(np.float32)
            k = rng.integers(-2, 3, size=(32, N, D)).astype(np.float32)
            act = make_active(rng, 32, N)
            for tau in (-1.0, -0.5, 0.0, 0.5, 1.0):
                for k_in in (0, 1, 2, 4):
                    want = ref.route(q, k, tau=tau, k_in=k_in, active=act)
                    got = cpu.route(q, k, tau=tau, k_in=k_in, active=act, isa=isa)
                    assert_routes_equal(got, want, f"ties N={N} D={D} tau={tau} k_in={k_in} isa={isa}")


@pytest.mark.parametrize("isa", ISAS)
def test_route_parity_extreme_magnitudes(isa: str) -> None:
    # very large and very small (but normal) float32 values: float64 norms neither overflow nor underflow
    rng = np.random.default_rng(11)
    q, k = make_qk(rng, 8, 6, 9)
    for scale in (np.float32(1e-19), np.float32(1e19), np.float32(3e38 / 16)):
        qs = np.clip(q * scale, -3e38, 3e38).astype(np.float32)
        ks = np.clip(k * scale, -3e38, 3e38).astype(np.float32)
        assert np.isfinite(qs).all() and np.isfinite(ks).all()
        want = ref.route(qs, ks, tau=0.0, k_in=2, active=None)
        got = cpu.route(qs, ks, tau=0.0, k_in=2, active=None, isa=isa)
        assert_routes_equal(got, want, f"scale={scale} isa={isa}")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(("B", "N", "D"), [(2, 3, 0), (2, 0, 3), (3, 0, 0), (0, 4, 5)])
def test_route_parity_empty_dimensions(isa: str, B: int, N: int, D: int) -> None:
    # degenerate but valid shapes: D = 0 (every row zero: no edges), N = 0 (no agents), B = 0 (no episodes)
    q = np.zeros((B, N, D), np.float32)
    want = ref.route(q, q.copy(), tau=-1.0, k_in=0, active=None)
    got = cpu.route(q, q.copy(), tau=-1.0, k_in=0, active=None, isa=isa)
    assert_routes_equal(got, want, f"B={B} N={N} D={D} isa={isa}")


def _strided_views(
    rng: np.random.Generator, B: int, N: int, D: int
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Non-contiguous (B, N, D) views of q and k and (B, N) views of active, keyed by a description."""
    views = {}
    qb, kb = make_qk(rng, B, 2 * N, D)
    ab = make_active(rng, B, 2 * N)
    views["every other agent"] = (qb[:, ::2], kb[:, 1::2], ab[:, ::2])
    qt, kt = make_qk(rng, N, B, D)  # (N, B, D) storage, viewed batch-first
    views["transposed batch"] = (qt.transpose(1, 0, 2), kt.transpose(1, 0, 2), make_active(rng, N, B).T)
    qb2, kb2 = make_qk(rng, 2 * B, N, D)
    views["every other episode"] = (qb2[::2], kb2[1::2], make_active(rng, 2 * B, N)[1::2])
    qw, kw = make_qk(rng, B, N, D + 5)
    views["padded rows"] = (qw[:, :, :D], kw[:, :, 5:], make_active(rng, B, N))
    qr, kr = make_qk(rng, B, N, D)
    views["reversed agents and episodes"] = (qr[:, ::-1], kr[::-1], make_active(rng, B, N)[::-1, ::-1])
    q1, k1 = make_qk(rng, 1, N, D)
    views["broadcast episode"] = (
        np.broadcast_to(q1, (B, N, D)),
        np.broadcast_to(k1, (B, N, D)),
        np.broadcast_to(make_active(rng, 1, N), (B, N)),
    )
    return views


@pytest.mark.parametrize("isa", ISAS)
def test_route_strided_inputs(isa: str) -> None:
    rng = np.random.default_rng(99)
    for B, N, D in [(3, 5, 7), (4, 8, 16), (2, 13, 384)]:
        for desc, (q, k, active) in _strided_views(rng, B, N, D).items():
            assert q.shape == (B, N, D) and k.shape == (B, N, D) and active.shape == (B, N)
            qc, kc, ac = np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(active)
            assert not (q.flags.c_contiguous and k.flags.c_contiguous and active.flags.c_contiguous), desc
            for act, actc in ((None, None), (active, ac)):
                ctx = f"{desc} B={B} N={N} D={D} active={act is not None} isa={isa}"
                want = ref.route(qc, kc, tau=0.0, k_in=3, active=actc)
                assert_routes_equal(ref.route(q, k, tau=0.0, k_in=3, active=act), want, f"reference {ctx}")
                got = cpu.route(q, k, tau=0.0, k_in=3, active=act, isa=isa)
                assert_routes_equal(got, want, ctx)
                assert_routes_equal(
                    cpu.route(qc, kc, tau=0.0, k_in=3, active=actc, isa=isa), want, f"contig {ctx}"
                )


def test_route_strided_inputs_through_ops() -> None:
    rng = np.random.default_rng(5)
    for desc, (q, k, active) in _strided_views(rng, 4, 6, 9).items():
        want = ref.route(
            np.ascontiguousarray(q),
            np.ascontiguousarray(k),
            tau=0.3,
            k_in=2,
            active=np.ascontiguousarray(active),
        )
        got = ops.route(q, k, tau=0.3, k_in=2, active=active, backend="cpu")
        assert_routes_equal(got, want, desc)
        # single-episode views too: the result has no batch axis
        want1 = ref.route(
            np.ascontiguousarray(q[1:2]), np.ascontiguousarray(k[1:2]), tau=0.3, k_in=2, active=None
        )
        got1 = ops.route(q[1], k[1], tau=0.3, k_in=2, backend="cpu")
        assert got1.scores.ndim == 2 and got1.inbox.ndim == 2 and got1.in_degree.ndim == 1
        assert_routes_equal(_batched(got1), want1, f"single {desc}")


def _batched(r):
    return type(r)(*[f[None] for f in vars(r).values()])


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base


def test_route_strided_inputs_are_not_copied() -> None:
    # q and k are 3 MiB views each; the outputs are ~0.1 MiB. A copy of either input would show in the peak
    # of traced (numpy) allocations.
    rng = np.random.default_rng(3)
    B, N, D = 256, 8, 384
    qb, kb = make_qk(rng, B, 2 * N, D, special=False)
    q, k = qb[:, ::2], kb[:, 1::2]
    active = make_active(rng, B, 2 * N)[:, ::2]
    assert not q.flags.c_contiguous and not k.flags.c_contiguous
    out_bytes = B * N * N * (4 + 1) + B * N * 3 * 4 + B * N * 4
    cpu.route(q, k, tau=0.0, k_in=3, active=active)  # warm-up (thread pools, first-call allocations)
    peak = _peak_bytes(lambda: cpu.route(q, k, tau=0.0, k_in=3, active=active))
    assert peak < out_bytes + q.nbytes // 4, f"peak {peak} bytes: an input was copied (q is {q.nbytes} bytes)"
    peak = _peak_bytes(lambda: ops.route(q, k, tau=0.0, k_in=3, active=active, backend="cpu"))
    assert peak < out_bytes + q.nbytes // 4, f"ops.route peak {peak} bytes: an input was copied"
    # the check has teeth: a contiguous copy of q is caught
    peak = _peak_bytes(lambda: cpu.route(np.ascontiguousarray(q), k, tau=0.0, k_in=3, active=active))
    assert peak >= q.nbytes


@pytest.mark.parametrize("isa", ISAS)
def test_route_large_batch_openmp(isa: str) -> None:
    rng = np.random.default_rng(2024)
    B, N, D = 5000, 8, 64
    q, k = make_qk(rng, B, N, D)
    active = make_active(rng, B, N)
    for act in (None, active):
        for tau, k_in in ((0.0, 3), (-0.5, 0), (0.3, 1)):
            want = ref.route(q, k, tau=tau, k_in=k_in, active=act)
            got = cpu.route(q, k, tau=tau, k_in=k_in, active=act, isa=isa)
            assert_routes_equal(got, want, f"B={B} tau={tau} k_in={k_in} active={act is not None} isa={isa}")


def test_route_concurrent_calls() -> None:
    # the core releases the GIL: concurrent calls on different inputs must not interfere
    rng = np.random.default_rng(8)
    inputs = [make_qk(rng, 600, 8, 32) for _ in range(8)]
    wants = [ref.route(q, k, tau=0.1, k_in=3, active=None) for q, k in inputs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        gots = list(pool.map(lambda qk: ops.route(qk[0], qk[1], tau=0.1, k_in=3, backend="cpu"), inputs * 3))
    for i, got in enumerate(gots):
        assert_routes_equal(got, wants[i % len(inputs)], f"call {i}")


# ---------------------------------------------------------------------------------------------------- toposort


def random_graphs(
    rng: np.random.Generator, B: int, N: int, density: float, *, dag_share: float = 0.3
) -> np.ndarray:
    """Random (B, N, N) bool graphs (self-loops included); a share of them are DAGs (upper-triangular after a
    random permutation)."""
    adj = rng.random((B, N, N)) < density
    for b in range(B):
        if rng.random() < dag_share:
            p = rng.permutation(N)
            adj[b] = False
            adj[b][np.ix_(p, p)] = np.triu(rng.random((N, N)) < density, k=1)
    return adj


def random_weights(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    w = rng.random(shape).astype(np.float32)
    coarse = rng.random(shape) < 0.5
    w[coarse] = np.round(w[coarse] * 4) / 4  # quarter steps: exact, with many equal sums
    return w


TOPO_NS = [1, 2, 7, 16, 63, 64, 65, 100]
DENSITIES = [0.05, 0.2, 0.5, 0.9]


@pytest.mark.parametrize("N", TOPO_NS)
def test_toposort_parity(N: int) -> None:
    rng = np.random.default_rng(500 + N)
    B = 12 if N <= 65 else 6
    for density in DENSITIES:
        adj = random_graphs(rng, B, N, density)
        act = make_active(rng, B, N)
        w = random_weights(rng, (B, N, N))
        for active in (None, act):
            for weights in (None, w):
                ctx = f"N={N} density={density} active={active is not None} weighted={weights is not None}"
                want = ref.toposort(adj, weights=weights, active=active)
                assert_orders_equal(cpu.toposort(adj, weights=weights, active=active), want, ctx)
                got = ops.toposort(adj, weights=weights, active=active, backend="cpu")
                assert_orders_equal(got, want, f"ops {ctx}")


@pytest.mark.parametrize("N", [7, 16, 64, 65])
def test_toposort_parity_non_contiguous(N: int) -> None:
    rng = np.random.default_rng(77 + N)
    B = 8
    for density in (0.1, 0.5):
        big = random_graphs(rng, 2 * B, 2 * N, density)
        wbig = random_weights(rng, (2 * B, 2 * N, 2 * N))
        abig = make_active(rng, 2 * B, 2 * N)
        views = {
            "strided": (big[::2, ::2, 1::2], wbig[1::2, 1::2, ::2], abig[::2, 1::2]),
            "transposed": (
                big[:B, :N, :N].transpose(0, 2, 1),
                wbig[:B, :N, :N].transpose(0, 2, 1),
                make_active(rng, N, B).T,
            ),
            "reversed": (big[:B, ::-2, ::-2], wbig[:B, ::-2, ::-2], abig[:B, ::-2]),
            "fortran": (
                np.asfortranarray(big[:B, :N, :N]),
                np.asfortranarray(wbig[:B, :N, :N]),
                np.asfortranarray(abig[:B, :N]),
            ),
        }
        for desc, (adj, w, act) in views.items():
            assert adj.shape == (B, N, N) and not adj.flags.c_contiguous
            for active in (None, act):
                for weights in (None, w):
                    ctx = f"{desc} N={N} density={density} active={active is not None} weighted={weights is not None}"
                    want = ref.toposort(
                        np.ascontiguousarray(adj),
                        weights=None if weights is None else np.ascontiguousarray(weights),
                        active=None if active is None else np.ascontiguousarray(active),
                    )
                    assert_orders_equal(
                        ops.toposort(adj, weights=weights, active=active, backend="cpu"), want, ctx
                    )


def test_toposort_large_batch_openmp() -> None:
    rng = np.random.default_rng(4096)
    for N, weighted in ((16, False), (16, True), (70, False)):
        B = 5000 if N == 16 else 600
        adj = random_graphs(rng, B, N, 0.15)
        act = make_active(rng, B, N)
        w = random_weights(rng, (B, N, N)) if weighted else None
        want = ref.toposort(adj, weights=w, active=act)
        assert_orders_equal(
            cpu.toposort(adj, weights=w, active=act), want, f"B={B} N={N} weighted={weighted}"
        )


def test_toposort_parity_empty() -> None:
    for shape in ((0, 5, 5), (3, 0, 0)):
        adj = np.zeros(shape, bool)
        assert_orders_equal(
            cpu.toposort(adj, weights=None, active=None),
            ref.toposort(adj, weights=None, active=None),
            str(shape),
        )


# ---------------------------------------------------------------------------------------------------- graph_stats


@pytest.mark.parametrize("N", [1, 2, 3, 8, 33, 64, 65])
def test_graph_stats_parity(N: int) -> None:
    rng = np.random.default_rng(300 + N)
    for B in (1, 7, 2000):
        for density in (0.0, 0.1, 0.5, 1.0):
            adj = rng.random((B, N, N)) < density
            prev = rng.random((B, N, N)) < density
            act = make_active(rng, B, N)
            for active in (None, act):
                for p in (None, prev):
                    ctx = f"B={B} N={N} density={density} active={active is not None} prev={p is not None}"
                    want = ref.graph_stats(adj, active=active, prev=p)
                    assert_stats_equal(ops.graph_stats(adj, active, prev=p, backend="cpu"), want, ctx)
    # non-contiguous inputs
    big = rng.random((6, 2 * N, 2 * N)) < 0.4
    adj, prev, act = (
        big[::2, ::2, ::2],
        big[1::2, 1::2, ::2].transpose(0, 2, 1),
        make_active(rng, 6, 2 * N)[::2, ::2],
    )
    want = ref.graph_stats(
        np.ascontiguousarray(adj), active=np.ascontiguousarray(act), prev=np.ascontiguousarray(prev)
    )
    assert_stats_equal(ops.graph_stats(adj, act, prev=prev, backend="cpu"), want, "strided")


def test_graph_stats_single_graph_parity() -> None:
    rng = np.random.default_rng(12)
    adj, prev = rng.random((2, 9, 9)) < 0.3
    act = make_active(rng, 1, 9)[0]
    r = ops.graph_stats(adj, act, prev=prev, backend="reference")
    c = ops.graph_stats(adj, act, prev=prev, backend="cpu")
    assert c.edges.shape == () and c.in_degree.shape == (9,) and c.jaccard.shape == ()
    assert_stats_equal(c, r, "single graph")


# ---------------------------------------------------------------------------------------------------- density


def test_conductor_density_parity() -> None:
    v = np.arange(1, 26)
    nodes, steps, edges, n_max = np.meshgrid(v, v, np.arange(0, 61, 3), np.array([4, 7, 10]), indexing="ij")
    ok = steps <= nodes
    nodes, steps, edges, n_max = nodes[ok], steps[ok], edges[ok], n_max[ok]
    want = ops.conductor_density(nodes, edges, steps, n_max, backend="reference")
    got = ops.conductor_density(nodes, edges, steps, n_max, backend="cpu")
    for name in ("s_node", "s_edge", "s_depth", "s_complex", "reward"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.dtype == np.float64 and g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15, err_msg=name)
    # broadcast and non-contiguous inputs, several dtypes
    nodes2 = np.arange(1, 13, dtype=np.int32).reshape(3, 1, 4)
    edges2 = np.arange(0, 24, dtype=np.uint16).reshape(4, 6)[:, ::2].T  # (3, 4), not contiguous
    a = ops.conductor_density(nodes2, edges2, 1, np.int8(7), backend="reference")
    b = ops.conductor_density(nodes2, edges2, 1, np.int8(7), backend="cpu")
    assert a.reward.shape == b.reward.shape == (3, 3, 4)
    for name in ("s_node", "s_edge", "s_depth", "s_complex", "reward"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-12, atol=1e-15, err_msg=name)
