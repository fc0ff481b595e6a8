"""mean_pool and route_indexed (with its fused pool= form): the compiled CPU backend (every supported SIMD
level) against the numpy reference and a direct float64 formula; route_indexed against route on the gathered
arrays (integer and boolean outputs equal, scores bit for bit on one backend); in-place writes; errors."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from _checks import check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toporoute import _core, errors, ops
from toporoute.backends import cpu
from toporoute.backends import cuda as cuda_backend
from toporoute.backends import reference as ref

ISAS = list(_core.build_info()["simd"]["supported"])
BACKENDS = ["reference", "cpu"]
POOL_ATOL = 1e-6
MASK_DTYPES = [np.bool_, np.int32, np.int64]
SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow],
}


# ---------------------------------------------------------------------------------------------------- helpers


def pool_f64(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The definition, written out row by row in float64."""
    n, _, D = hidden.shape
    out = np.zeros((n, D))
    for i in range(n):
        counted = np.asarray(mask[i]) != 0
        v = hidden[i][counted].astype(np.float64).sum(axis=0) / max(int(counted.sum()), 1e-9)
        out[i] = v / max(float(np.sqrt((v * v).sum())), 1e-12)
    return out


def make_hidden(rng: np.random.Generator, n: int, L: int, D: int) -> np.ndarray:
    h = rng.standard_normal((n, L, D)).astype(np.float32)
    if n and L and D:
        h[rng.random((n, L)) < 0.1] *= np.float32(1e3)  # uneven magnitudes
    return h


def make_mask(rng: np.random.Generator, n: int, L: int, dtype) -> np.ndarray:
    """Random right-padded masks (like a tokenizer's) with some arbitrary holes, an all-masked row and, for
    integer masks, non-zero values other than 1 (they count once: the mask is not a weight)."""
    lengths = rng.integers(0, L + 1, size=n)
    m = np.arange(L)[None, :] < lengths[:, None]
    m ^= rng.random((n, L)) < 0.1
    if n >= 2:
        m[1] = False
    if dtype is np.bool_:
        return m
    values = rng.choice(np.array([1, 2, -1, 7]), size=(n, L)).astype(dtype)
    return np.where(m, values, 0).astype(dtype)


def make_table(rng: np.random.Generator, M: int, D: int) -> np.ndarray:
    t = rng.standard_normal((M, D)).astype(np.float32)
    if M >= 3:
        t[rng.random(M) < 0.1] = 0  # zero rows: no edges
        t[1] = t[0] * np.float32(4)  # same direction: exact score ties
    return t


def make_rows(rng: np.random.Generator, B: int, N: int, M: int, dtype=np.int64) -> np.ndarray:
    rows = rng.integers(0, max(M, 1), size=(B, N))
    rows[rng.random((B, N)) < 0.15] = -1
    if M == 0:
        rows[:] = -1
    return rows.astype(dtype)


def gather(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out = np.zeros(rows.shape + (table.shape[1],), np.float32)
    out[rows >= 0] = table[rows[rows >= 0]]
    return out


def assert_routes_identical(got, want, ctx: str, *, exact_scores: bool = True) -> None:
    for name in ("scores", "adjacency", "inbox", "in_degree"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.dtype == w.dtype and g.shape == w.shape, (
            f"{ctx}: {name} {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        )
        if name == "scores" and not exact_scores:
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-6, err_msg=f"{ctx}: scores")
        elif not np.array_equal(g, w):
            idx = tuple(np.argwhere(g != w)[0])
            raise AssertionError(f"{ctx}: {name} differs at {idx}: {g[idx]} != {w[idx]}")


# ---------------------------------------------------------------------------------------------------- mean_pool


@pytest.mark.parametrize("D", [1, 3, 8, 17, 384])
@pytest.mark.parametrize("L", [1, 2, 9, 33])
def test_mean_pool_parity_grid(L: int, D: int) -> None:
    rng = np.random.default_rng(100 * L + D)
    for n in (0, 1, 3, 17):
        hidden = make_hidden(rng, n, L, D)
        for dtype in MASK_DTYPES:
            mask = make_mask(rng, n, L, dtype)
            want = pool_f64(hidden, mask)
            ctx = f"n={n} L={L} D={D} mask={np.dtype(dtype).name}"
            r = ops.mean_pool(hidden, mask, backend="reference")
            c = ops.mean_pool(hidden, mask, backend="cpu")
            for name, got in (("reference", r), ("cpu", c)):
                assert got.dtype == np.float32 and got.shape == (n, D), f"{ctx} {name}"
                assert got.flags.c_contiguous, f"{ctx} {name}"
                np.testing.assert_allclose(got, want, rtol=0, atol=POOL_ATOL, err_msg=f"{ctx} {name}")
            np.testing.assert_allclose(c, r, rtol=0, atol=POOL_ATOL, err_msg=ctx)
            counted = (mask != 0).any(axis=1)
            assert not c[~counted].any(), f"{ctx}: rows without tokens must be zero"
            if D:
                np.testing.assert_allclose(np.linalg.norm(c[counted], axis=1), 1.0, atol=1e-5, err_msg=ctx)


def test_mean_pool_mask_values_are_not_weights() -> None:
    rng = np.random.default_rng(1)
    hidden = make_hidden(rng, 4, 6, 8)
    m = make_mask(rng, 4, 6, np.bool_)
    base = ops.mean_pool(hidden, m, backend="cpu")
    for values in (m.astype(np.int32) * 5, m.astype(np.int64) * -3):
        for backend in BACKENDS:
            np.testing.assert_array_equal(ops.mean_pool(hidden, values, backend=backend) != 0, base != 0)
            np.testing.assert_allclose(ops.mean_pool(hidden, values, backend=backend), base, atol=POOL_ATOL)


def test_mean_pool_uncounted_tokens_may_hold_anything() -> None:
    rng = np.random.default_rng(2)
    hidden = make_hidden(rng, 5, 7, 9)
    mask = make_mask(rng, 5, 7, np.int64)
    dirty = hidden.copy()
    dirty[mask == 0] = np.nan
    dirty[0, (mask[0] == 0)] = np.inf
    for backend in BACKENDS:
        np.testing.assert_array_equal(
            ops.mean_pool(dirty, mask, backend=backend), ops.mean_pool(hidden, mask, backend=backend)
        )


def _strided_hidden(
    rng: np.random.Generator, n: int, L: int, D: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    views = {}
    views["every other token"] = (
        make_hidden(rng, n, 2 * L, D)[:, ::2],
        make_mask(rng, n, 2 * L, np.int64)[:, 1::2],
    )
    views["transposed batch"] = (
        make_hidden(rng, L, n, D).transpose(1, 0, 2),
        make_mask(rng, L, n, np.bool_).T,
    )
    views["padded rows"] = (make_hidden(rng, n, L, D + 5)[:, :, 5:], make_mask(rng, n, L, np.int32))
    views["reversed"] = (make_hidden(rng, n, L, D)[::-1, ::-1], make_mask(rng, n, L, np.int64)[::-1, ::-1])
    views["every other row"] = (make_hidden(rng, 2 * n, L, D)[::2], make_mask(rng, 2 * n, L, np.bool_)[1::2])
    return views


@pytest.mark.parametrize(("n", "L", "D"), [(3, 4, 5), (6, 9, 16), (4, 3, 384)])
def test_mean_pool_strided_inputs(n: int, L: int, D: int) -> None:
    rng = np.random.default_rng(n * L * D)
    for desc, (hidden, mask) in _strided_hidden(rng, n, L, D).items():
        assert hidden.shape == (n, L, D) and mask.shape == (n, L), desc
        assert not (hidden.flags.c_contiguous and mask.flags.c_contiguous), desc
        hc, mc = np.ascontiguousarray(hidden), np.ascontiguousarray(mask)
        contiguous = ops.mean_pool(hc, mc, backend="cpu")
        # read in place, in the same order: bit for bit the contiguous result
        np.testing.assert_array_equal(ops.mean_pool(hidden, mask, backend="cpu"), contiguous, err_msg=desc)
        np.testing.assert_allclose(
            ops.mean_pool(hidden, mask, backend="reference"), contiguous, atol=POOL_ATOL, err_msg=desc
        )
        np.testing.assert_allclose(contiguous, pool_f64(hc, mc), atol=POOL_ATOL, err_msg=desc)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows_dtype", [np.int32, np.int64])
def test_mean_pool_out_rows(backend: str, rows_dtype) -> None:
    rng = np.random.default_rng(3)
    n, L, D, M = 6, 5, 12, 10
    hidden = make_hidden(rng, n, L, D)
    mask = make_mask(rng, n, L, np.int64)
    want = ops.mean_pool(hidden, mask, backend=backend)
    rows = rng.permutation(M)[:n].astype(rows_dtype)
    before = rng.standard_normal((M, D)).astype(np.float32)
    out = before.copy()
    got = ops.mean_pool(hidden, mask, out=out, rows=rows, backend=backend)
    assert got is out
    np.testing.assert_array_equal(out[rows], want)
    untouched = np.setdiff1d(np.arange(M), rows)
    np.testing.assert_array_equal(out[untouched], before[untouched])
    # rows=None with out: row i goes to out[i]
    out = before.copy()
    assert ops.mean_pool(hidden, mask, out=out, backend=backend) is out
    np.testing.assert_array_equal(out[:n], want)
    np.testing.assert_array_equal(out[n:], before[n:])


def test_mean_pool_out_parity_large_batch_openmp() -> None:
    # big enough for the compiled core's threaded path (and its staging buffer with out=)
    rng = np.random.default_rng(4)
    n, L, D = 3000, 24, 64
    hidden = make_hidden(rng, n, L, D)
    mask = make_mask(rng, n, L, np.int64)
    want = ops.mean_pool(hidden, mask, backend="reference")
    got = ops.mean_pool(hidden, mask, backend="cpu")
    np.testing.assert_allclose(got, want, rtol=0, atol=POOL_ATOL)
    rows = rng.permutation(2 * n)[:n]
    out_c = np.zeros((2 * n, D), np.float32)
    out_r = np.zeros((2 * n, D), np.float32)
    ops.mean_pool(hidden, mask, out=out_c, rows=rows, backend="cpu")
    ops.mean_pool(hidden, mask, out=out_r, rows=rows, backend="reference")
    np.testing.assert_array_equal(out_c[rows], got)
    np.testing.assert_allclose(out_c, out_r, rtol=0, atol=POOL_ATOL)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("n", "L", "D"), [(0, 3, 4), (3, 0, 4), (3, 4, 0), (0, 0, 0)])
def test_mean_pool_empty_dimensions(backend: str, n: int, L: int, D: int) -> None:
    hidden = np.zeros((n, L, D), np.float32)
    mask = np.ones((n, L), bool)
    got = ops.mean_pool(hidden, mask, backend=backend)
    assert got.shape == (n, D) and got.dtype == np.float32 and not got.any()
    out = np.full((n + 2, D), 5, np.float32)
    ops.mean_pool(hidden, mask, out=out, rows=np.arange(n)[::-1].copy(), backend=backend)
    assert not out[:n].any() and (out[n:] == 5).all()


# ---------------------------------------------------------------------------------------------------- route_indexed


@pytest.mark.parametrize("D", [1, 8, 9, 384])
@pytest.mark.parametrize("N", [1, 2, 5, 9])
def test_route_indexed_equals_route_on_gathered_rows(N: int, D: int) -> None:
    rng = np.random.default_rng(10 * N + D)
    for B in (1, 3, 64):
        M = int(rng.integers(1, 2 * N + 3))
        table = make_table(rng, M, D)
        q_rows = make_rows(rng, B, N, M)
        k_rows = make_rows(rng, B, N, M, np.int32)
        q, k = gather(table, q_rows), gather(table, k_rows)
        act = (q_rows >= 0) & (k_rows >= 0)
        for tau in (-0.5, 0.0, 0.3):
            for k_in in (0, 1, 3):
                ctx = f"B={B} N={N} D={D} M={M} tau={tau} k_in={k_in}"
                want_ref = ref.route(q, k, tau=tau, k_in=k_in, active=act)
                got_ref = ref.route_indexed(table, q_rows, k_rows, tau=tau, k_in=k_in)
                assert_routes_identical(got_ref, want_ref, f"reference {ctx}")
                for isa in ISAS:
                    want = cpu.route(q, k, tau=tau, k_in=k_in, active=act, isa=isa)
                    got = cpu.route_indexed(table, q_rows, k_rows, tau=tau, k_in=k_in, isa=isa)
                    assert_routes_identical(got, want, f"cpu {ctx} isa={isa}")
                    assert_routes_identical(
                        got, want_ref, f"cpu vs reference {ctx} isa={isa}", exact_scores=False
                    )
                got = ops.route_indexed(table, q_rows, k_rows, tau=tau, k_in=k_in, backend="cpu")
                assert_routes_identical(
                    got, ops.route(q, k, tau=tau, k_in=k_in, active=act, backend="cpu"), f"ops {ctx}"
                )


@pytest.mark.parametrize("backend", BACKENDS)
def test_route_indexed_single_episode(backend: str) -> None:
    rng = np.random.default_rng(20)
    table = make_table(rng, 12, 16)
    q_rows = np.array([0, 3, -1, 5, 1, 7], np.int64)
    k_rows = np.array([2, 3, 4, -1, 0, 11], np.int32)
    got = ops.route_indexed(table, q_rows, k_rows, tau=0.0, k_in=2, backend=backend)
    assert got.scores.shape == (6, 6) and got.inbox.shape == (6, 2) and got.in_degree.shape == (6,)
    want = ops.route(
        gather(table, q_rows),
        gather(table, k_rows),
        tau=0.0,
        k_in=2,
        active=(q_rows >= 0) & (k_rows >= 0),
        backend=backend,
    )
    assert_routes_identical(got, want, backend)
    assert not got.adjacency[2].any() and not got.adjacency[:, 2].any()  # padding: no edges either way
    assert not got.adjacency[3].any() and not got.adjacency[:, 3].any()


@pytest.mark.parametrize("isa", ISAS)
def test_route_indexed_strided_inputs(isa: str) -> None:
    rng = np.random.default_rng(21)
    M, D, B, N = 20, 24, 5, 7
    big = make_table(rng, 2 * M, D + 3)
    views = {
        "every other row": big[::2, :D],
        "offset columns": big[:M, 3:],
        "reversed rows": big[:M, :D][::-1],
    }
    q_rows = make_rows(rng, N, B, M).T  # (B, N) view of (N, B) storage
    k_rows = make_rows(rng, B, 2 * N, M, np.int32)[:, ::2]
    assert not q_rows.flags.c_contiguous and not k_rows.flags.c_contiguous
    for desc, table in views.items():
        tc = np.ascontiguousarray(table)
        want = cpu.route_indexed(tc, q_rows.copy(), k_rows.copy(), tau=0.1, k_in=3, isa=isa)
        got = cpu.route_indexed(table, q_rows, k_rows, tau=0.1, k_in=3, isa=isa)
        assert_routes_identical(got, want, desc)
        assert_routes_identical(
            ref.route_indexed(table, q_rows, k_rows, tau=0.1, k_in=3),
            want,
            f"reference {desc}",
            exact_scores=False,
        )


@pytest.mark.parametrize("isa", ISAS)
def test_route_indexed_large_batch_openmp(isa: str) -> None:
    rng = np.random.default_rng(22)
    B, N, D, M = 5000, 8, 64, 300
    table = make_table(rng, M, D)
    q_rows, k_rows = make_rows(rng, B, N, M), make_rows(rng, B, N, M)
    q, k = gather(table, q_rows), gather(table, k_rows)
    act = (q_rows >= 0) & (k_rows >= 0)
    for tau, k_in in ((0.0, 3), (-0.5, 0)):
        got = cpu.route_indexed(table, q_rows, k_rows, tau=tau, k_in=k_in, isa=isa)
        assert_routes_identical(got, cpu.route(q, k, tau=tau, k_in=k_in, active=act, isa=isa), f"tau={tau}")
        want = ref.route_indexed(table, q_rows, k_rows, tau=tau, k_in=k_in)
        assert_routes_identical(got, want, f"reference tau={tau}", exact_scores=False)


def test_route_indexed_backend_active_mask() -> None:
    # the backends also take an explicit active mask, ANDed with the -1 padding
    rng = np.random.default_rng(23)
    B, N, D, M = 6, 7, 10, 15
    table = make_table(rng, M, D)
    q_rows, k_rows = make_rows(rng, B, N, M), make_rows(rng, B, N, M)
    active = rng.random((B, N)) < 0.7
    act = active & (q_rows >= 0) & (k_rows >= 0)
    want = ref.route(gather(table, q_rows), gather(table, k_rows), tau=0.0, k_in=2, active=act)
    assert_routes_identical(
        ref.route_indexed(table, q_rows, k_rows, tau=0.0, k_in=2, active=active), want, "ref"
    )
    for isa in ISAS:
        got = cpu.route_indexed(table, q_rows, k_rows, tau=0.0, k_in=2, active=active, isa=isa)
        assert_routes_identical(got, want, isa, exact_scores=False)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("B", "N", "M", "D"), [(0, 4, 5, 3), (2, 0, 5, 3), (2, 3, 0, 3), (2, 3, 4, 0), (0, 0, 0, 0)]
)
def test_route_indexed_empty_dimensions(backend: str, B: int, N: int, M: int, D: int) -> None:
    table = np.zeros((M, D), np.float32)
    rows = np.full((B, N), -1 if M == 0 else 0, np.int64)
    got = ops.route_indexed(table, rows, rows, tau=-1.0, k_in=0, backend=backend)
    want = ref.route(gather(table, rows), gather(table, rows), tau=-1.0, k_in=0, active=None)
    assert_routes_identical(got, want, f"B={B} N={N} M={M} D={D}")
    assert not got.adjacency.any()


def test_route_indexed_ignores_unreferenced_rows() -> None:
    # a table allocated with numpy.empty and filled only where referenced is fine
    rng = np.random.default_rng(24)
    table = np.full((10, 6), np.nan, np.float32)
    table[[1, 4, 7]] = rng.standard_normal((3, 6)).astype(np.float32)
    q_rows = np.array([[1, 4, 7, -1]])
    k_rows = np.array([[7, -1, 1, 4]])
    for backend in BACKENDS:
        got = ops.route_indexed(table, q_rows, k_rows, tau=-1.0, k_in=0, backend=backend)
        assert np.isfinite(got.scores).all()


def test_route_indexed_concurrent_calls() -> None:
    rng = np.random.default_rng(25)
    table = make_table(rng, 200, 32)
    inputs = [(make_rows(rng, 600, 8, 200), make_rows(rng, 600, 8, 200)) for _ in range(6)]
    wants = [cpu.route_indexed(table, q, k, tau=0.1, k_in=3) for q, k in inputs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        gots = list(
            pool.map(lambda qk: ops.route_indexed(table, *qk, tau=0.1, k_in=3, backend="cpu"), inputs * 3)
        )
    for i, got in enumerate(gots):
        assert_routes_identical(got, wants[i % len(inputs)], f"call {i}")


# ---------------------------------------------------------------------------------------------------- pool=


def _buckets(rng: np.random.Generator, M: int, D: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Three length buckets (like a tokenizer's) writing distinct table rows."""
    sizes, lengths = (4, 3, 5), (3, 8, 17)
    targets = rng.permutation(M)[: sum(sizes)]
    out, start = [], 0
    for n, L, dtype in zip(sizes, lengths, (np.int64, np.bool_, np.int32)):
        out.append((make_hidden(rng, n, L, D), make_mask(rng, n, L, dtype), targets[start : start + n]))
        start += n
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_pool_form_equals_mean_pool_then_route_indexed(backend: str) -> None:
    rng = np.random.default_rng(30)
    M, D, B, N = 40, 16, 4, 6
    table0 = make_table(rng, M, D)
    pool = _buckets(rng, M, D)
    q_rows, k_rows = make_rows(rng, B, N, M), make_rows(rng, B, N, M)
    # the routes read the freshly pooled rows
    q_rows[0, :3] = pool[0][2][:3]
    k_rows[0, :3] = pool[2][2][:3]

    expected_table = table0.copy()
    for hidden, mask, rows in pool:
        ops.mean_pool(hidden, mask, out=expected_table, rows=rows, backend=backend)
    want = ops.route_indexed(expected_table, q_rows, k_rows, tau=0.0, k_in=3, backend=backend)

    table = table0.copy()
    got = ops.route_indexed(table, q_rows, k_rows, tau=0.0, k_in=3, pool=pool, backend=backend)
    assert_routes_identical(got, want, backend)
    np.testing.assert_array_equal(table, expected_table)
    written = np.concatenate([rows for _, _, rows in pool])
    changed = np.nonzero((table != table0).any(axis=1))[0]
    assert set(changed.tolist()) <= set(written.tolist())
    untouched = np.setdiff1d(np.arange(M), written)
    np.testing.assert_array_equal(table[untouched], table0[untouched])
    # a single-episode call with pool= too
    table = table0.copy()
    one = ops.route_indexed(table, q_rows[0], k_rows[0], tau=0.0, k_in=3, pool=pool, backend=backend)
    want_one = ops.route_indexed(expected_table, q_rows[:1], k_rows[:1], tau=0.0, k_in=3, backend=backend)
    assert_routes_identical(one, _first(want_one), f"single {backend}")
    np.testing.assert_array_equal(table, expected_table)


def _first(r):
    return type(r)(*[f[0] for f in vars(r).values()])


def test_pool_form_cpu_matches_reference() -> None:
    rng = np.random.default_rng(31)
    M, D, B, N = 60, 384, 16, 8
    table0 = make_table(rng, M, D)
    pool = _buckets(rng, M, D)
    q_rows, k_rows = make_rows(rng, B, N, M), make_rows(rng, B, N, M, np.int32)
    t_ref, t_cpu = table0.copy(), table0.copy()
    want = ops.route_indexed(t_ref, q_rows, k_rows, tau=0.05, k_in=2, pool=pool, backend="reference")
    for isa in ISAS:
        t_cpu = table0.copy()
        got = cpu.route_indexed(t_cpu, q_rows, k_rows, tau=0.05, k_in=2, pool=pool, isa=isa)
        np.testing.assert_allclose(t_cpu, t_ref, rtol=0, atol=POOL_ATOL, err_msg=isa)
        # exact against route_indexed on the table the fused call produced
        assert_routes_identical(got, cpu.route_indexed(t_cpu, q_rows, k_rows, tau=0.05, k_in=2, isa=isa), isa)
        assert_routes_identical(got, want, f"reference {isa}", exact_scores=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pool_form_empty(backend: str) -> None:
    rng = np.random.default_rng(32)
    table = make_table(rng, 8, 5)
    before = table.copy()
    q_rows, k_rows = make_rows(rng, 2, 4, 8), make_rows(rng, 2, 4, 8)
    want = ops.route_indexed(table, q_rows, k_rows, backend=backend)
    # an empty pool, and a pool input with no rows: nothing written
    for pool in ([], (), [(np.zeros((0, 3, 5), np.float32), np.zeros((0, 3), bool), np.zeros(0, np.int32))]):
        got = ops.route_indexed(table, q_rows, k_rows, pool=pool, backend=backend)
        assert_routes_identical(got, want, repr(pool)[:40])
        np.testing.assert_array_equal(table, before)


# ---------------------------------------------------------------------------------------------------- properties


@st.composite
def indexed_inputs(draw):
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


@settings(max_examples=150, **SETTINGS)
@given(indexed_inputs())
def test_route_indexed_property(inputs) -> None:
    table, q_rows, k_rows, tau, k_in = inputs
    q, k = gather(table, q_rows), gather(table, k_rows)
    act = (q_rows >= 0) & (k_rows >= 0)
    want_ref = ref.route(q, k, tau=tau, k_in=k_in, active=act)
    assert_routes_identical(
        ref.route_indexed(table, q_rows, k_rows, tau=tau, k_in=k_in), want_ref, "reference"
    )
    for isa in ISAS + [""]:
        got = cpu.route_indexed(table, q_rows, k_rows, tau=tau, k_in=k_in, isa=isa)
        assert_routes_identical(got, cpu.route(q, k, tau=tau, k_in=k_in, active=act, isa=isa), isa)
        assert_routes_identical(got, want_ref, f"reference {isa}", exact_scores=False)


@settings(max_examples=120, **SETTINGS)
@given(data=st.data())
def test_mean_pool_property(data) -> None:
    n, L, D = data.draw(st.integers(0, 5)), data.draw(st.integers(0, 6)), data.draw(st.integers(0, 9))
    elements = st.floats(-1e4, 1e4, width=32, allow_subnormal=False)
    hidden = data.draw(hnp.arrays(np.float32, (n, L, D), elements=elements))
    values = data.draw(hnp.arrays(np.int64, (n, L), elements=st.integers(0, 2)))
    mask = values.astype(data.draw(st.sampled_from(MASK_DTYPES)))
    want = pool_f64(hidden, mask)
    for backend in BACKENDS:
        got = ops.mean_pool(hidden, mask, backend=backend)
        np.testing.assert_allclose(got, want, rtol=0, atol=POOL_ATOL, err_msg=backend)
    M = n + data.draw(st.integers(0, 3))
    rows = data.draw(st.permutations(range(M)))[:n]
    outs = {}
    for backend in BACKENDS:
        out = np.full((M, D), -7, np.float32)
        ops.mean_pool(hidden, mask, out=out, rows=np.array(rows, np.int64), backend=backend)
        outs[backend] = out
    np.testing.assert_allclose(outs["cpu"], outs["reference"], rtol=0, atol=POOL_ATOL)
    assert (np.delete(outs["cpu"], rows, axis=0) == -7).all()


# ---------------------------------------------------------------------------------------------------- errors

RNG = np.random.default_rng(42)
H = RNG.standard_normal((3, 5, 4)).astype(np.float32)
MASK = np.ones((3, 5), np.int64)
T = RNG.standard_normal((10, 4)).astype(np.float32)
QR = np.array([[0, 1, 2], [3, -1, 5]])
KR = np.array([[6, 7, 8], [9, 0, -1]])


def raises(cls: type, arg: str, fn, *fragments: str) -> None:
    with pytest.raises(cls) as e:
        fn()
    check(e, cls, arg, *fragments)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_pool_bad_arrays(backend: str) -> None:
    def mp(hidden=H, mask=MASK, **kw):
        return lambda: ops.mean_pool(hidden, mask, backend=backend, **kw)

    raises(errors.DTypeError, "hidden", mp(hidden=H.astype(np.float64)), "float64", "float32")
    raises(errors.DTypeError, "hidden", mp(hidden=H.tolist()), "list")
    raises(errors.ShapeError, "hidden", mp(hidden=H[0]), "(5, 4)", "(n, L, D)")
    raises(errors.DTypeError, "mask", mp(mask=MASK.astype(np.float32)), "float32", "int64")
    raises(errors.DTypeError, "mask", mp(mask=MASK.astype(np.uint8)), "uint8")
    raises(errors.ShapeError, "mask", mp(mask=MASK[:, :4]), "(3, 4)", "(3, 5)")
    raises(errors.ShapeError, "mask", mp(mask=MASK[0]), "(5,)")
    out = np.zeros((6, 4), np.float32)
    raises(errors.InvalidArgumentError, "rows", mp(rows=np.arange(3)), "out")
    raises(errors.DTypeError, "out", mp(out=out.astype(np.float64)), "float64")
    raises(errors.ShapeError, "out", mp(out=np.zeros((6, 5), np.float32)), "(6, 5)")
    raises(errors.ShapeError, "out", mp(out=np.zeros(4, np.float32)), "(4,)")
    raises(errors.ShapeError, "out", mp(out=np.zeros((2, 4), np.float32)), "at least 3 rows")
    raises(
        errors.DTypeError, "out", mp(out=np.zeros((4, 6), np.float32).T, rows=np.arange(3)), "C-contiguous"
    )
    read_only = np.zeros((6, 4), np.float32)
    read_only.flags.writeable = False
    raises(errors.InvalidArgumentError, "out", mp(out=read_only, rows=np.arange(3)), "read-only")
    raises(errors.DTypeError, "rows", mp(out=out, rows=np.arange(3.0)), "float64")
    raises(errors.DTypeError, "rows", mp(out=out, rows=np.arange(3, dtype=np.uint32)), "uint32")
    raises(errors.ShapeError, "rows", mp(out=out, rows=np.arange(4)), "(4,)", "(3,)")


@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_pool_bad_values_leave_out_untouched(backend: str) -> None:
    out = RNG.standard_normal((6, 4)).astype(np.float32)
    before = out.copy()

    def mp(hidden=H, rows=None):
        rows = np.arange(3) if rows is None else rows
        return lambda: ops.mean_pool(hidden, MASK, out=out, rows=rows, backend=backend)

    raises(errors.OutOfRangeError, "rows", mp(rows=np.array([0, 6, 1])), "[0, 6)", "6", "index 1")
    raises(errors.OutOfRangeError, "rows", mp(rows=np.array([0, 1, -1], np.int32)), "-1", "index 2")
    raises(errors.InvalidArgumentError, "rows", mp(rows=np.array([4, 2, 4])), "distinct", "row 4", "index 2")
    for bad in (np.nan, np.inf, -np.inf):
        h = H.copy()
        h[2, 3, 1] = bad
        raises(errors.NonFiniteError, "hidden", mp(hidden=h), "row 2", "token 3")
        raises(errors.NonFiniteError, "hidden", lambda h=h: ops.mean_pool(h, MASK, backend=backend), "row 2")
    np.testing.assert_array_equal(out, before)
    # a non-finite token in a late row of a batch large enough for the threaded path: nothing written
    rng = np.random.default_rng(0)
    big = rng.standard_normal((2000, 16, 16)).astype(np.float32)
    big[1500, 3, 2] = np.nan
    big[1700, 0, 0] = np.inf
    out = np.zeros((2000, 16), np.float32)
    with pytest.raises(errors.NonFiniteError) as e:
        ops.mean_pool(big, np.ones((2000, 16), bool), out=out, backend=backend)
    check(e, errors.NonFiniteError, "hidden", "row 1500", "token 3")
    assert not out.any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_route_indexed_bad_arrays(backend: str) -> None:
    def ri(table=T, q_rows=QR, k_rows=KR, **kw):
        return lambda: ops.route_indexed(table, q_rows, k_rows, backend=backend, **kw)

    raises(errors.DTypeError, "table", ri(table=T.astype(np.float64)), "float64", "float32")
    raises(errors.ShapeError, "table", ri(table=T[None]), "(1, 10, 4)", "(M, D)")
    raises(errors.DTypeError, "q_rows", ri(q_rows=QR.astype(np.float32)), "float32", "int32 or int64")
    raises(errors.DTypeError, "k_rows", ri(k_rows=KR.astype(np.uint8)), "uint8")
    raises(errors.DTypeError, "q_rows", ri(q_rows=QR.tolist()), "list")
    raises(errors.ShapeError, "q_rows", ri(q_rows=QR[None], k_rows=KR[None]), "(1, 2, 3)")
    raises(errors.ShapeError, "k_rows", ri(k_rows=KR[:, :2]), "(2, 2)", "(2, 3)")
    raises(errors.ShapeError, "k_rows", ri(k_rows=KR[0]), "(3,)")
    raises(errors.OutOfRangeError, "tau", ri(tau=1.5), "[-1, 1]")
    raises(errors.OutOfRangeError, "k_in", ri(k_in=-1), "-1")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_route_indexed_rows_out_of_range(backend: str, dtype) -> None:
    def ri(q_rows, k_rows):
        return lambda: ops.route_indexed(T, q_rows.astype(dtype), k_rows.astype(dtype), backend=backend)

    q = QR.copy()
    q[1, 2] = 10
    raises(errors.OutOfRangeError, "q_rows", ri(q, KR), "[0, 10)", "got 10", "episode 1", "agent 2")
    q[0, 1] = -2
    raises(errors.OutOfRangeError, "q_rows", ri(q, KR), "got -2", "episode 0", "agent 1")
    k = KR.copy()
    k[0, 0] = -5
    raises(errors.OutOfRangeError, "k_rows", ri(QR, k), "got -5", "episode 0", "agent 0")
    raises(errors.OutOfRangeError, "q_rows", ri(q, k))  # q_rows is checked first
    raises(errors.OutOfRangeError, "k_rows", lambda: ops.route_indexed(T, QR[0], k[0], backend=backend), "-5")
    if dtype is np.int64:
        k = KR.copy()
        k[1, 1] = 2**40  # not an int32 either: reported as it is
        raises(errors.OutOfRangeError, "k_rows", ri(QR, k), str(2**40), "episode 1", "agent 1")


@pytest.mark.parametrize("backend", BACKENDS)
def test_route_indexed_non_finite_table(backend: str) -> None:
    for bad in (np.nan, np.inf):
        t = T.copy()
        t[5, 2] = bad  # referenced by q_rows[1, 2] (and nothing else)
        raises(
            errors.NonFiniteError,
            "table",
            lambda t=t: ops.route_indexed(t, QR, KR, backend=backend),
            "row 5",
            "q_rows",
            "episode 1",
            "agent 2",
        )
        t[8, 0] = bad  # k_rows[0, 2]: an earlier episode
        raises(
            errors.NonFiniteError,
            "table",
            lambda t=t: ops.route_indexed(t, QR, KR, backend=backend),
            "row 8",
            "k_rows",
            "episode 0",
            "agent 2",
        )
        raises(
            errors.NonFiniteError,
            "table",
            lambda t=t: ops.route_indexed(t, QR[1], KR[1], backend=backend),
            "row 5",
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_route_indexed_bad_pool(backend: str) -> None:
    table = T.copy()
    before = table.copy()
    rows = np.array([1, 4, 7])

    def ri(pool, q_rows=QR, table=table):
        return lambda: ops.route_indexed(table, q_rows, KR, pool=pool, backend=backend)

    raises(errors.InvalidArgumentError, "pool", ri(H), "triples")
    raises(errors.InvalidArgumentError, "pool", ri(5), "int")
    raises(errors.InvalidArgumentError, "pool", ri([(H, MASK)]), "pool[0]", "length 2")
    raises(errors.InvalidArgumentError, "pool", ri([(H, MASK, None)]), "pool[0] rows", "None")
    raises(
        errors.DTypeError, "pool", ri([(H, MASK, rows), (H.astype(np.float64), MASK, rows)]), "pool[1] hidden"
    )
    raises(errors.DTypeError, "pool", ri([(H, MASK.astype(np.float32), rows)]), "pool[0] mask", "float32")
    raises(errors.ShapeError, "pool", ri([(H, MASK[:2], rows)]), "pool[0] mask", "(2, 5)")
    raises(errors.ShapeError, "pool", ri([(H[:, :, :3], MASK, rows)]), "pool[0] hidden", "D = 4")
    raises(errors.ShapeError, "pool", ri([(H, MASK, rows[:2])]), "pool[0] rows", "(2,)")
    raises(errors.OutOfRangeError, "pool", ri([(H, MASK, np.array([1, 10, 2]))]), "pool[0] rows", "got 10")
    raises(
        errors.InvalidArgumentError,
        "pool",
        ri([(H, MASK, rows), (H, MASK, np.array([0, 2, 7]))]),
        "pool[1] rows",
        "distinct",
        "row 7",
        "index 2",
    )
    h = H.copy()
    h[1, 4, 0] = np.nan
    raises(
        errors.NonFiniteError,
        "pool",
        ri([(H, MASK, rows), (h, MASK, np.array([0, 2, 3]))]),
        "pool[1] hidden",
        "row 1",
        "token 4",
    )
    # an index error is found before the table is written
    q = QR.copy()
    q[0, 0] = 99
    raises(errors.OutOfRangeError, "q_rows", ri([(H, MASK, rows)], q_rows=q), "99")
    raises(
        errors.DTypeError,
        "table",
        ri([(H, MASK, rows)], table=np.zeros((4, 10), np.float32).T),
        "C-contiguous",
    )
    read_only = T.copy()
    read_only.flags.writeable = False
    raises(errors.InvalidArgumentError, "table", ri([(H, MASK, rows)], table=read_only), "read-only")
    np.testing.assert_array_equal(table, before)


def test_cpu_backend_rechecks_its_inputs() -> None:
    # called directly (without the facade's checks), the compiled core validates everything itself
    out = np.zeros((6, 4), np.float32)
    raises(
        errors.DTypeError, "hidden", lambda: cpu.mean_pool(H.astype(np.float64), MASK, out=None, rows=None)
    )
    raises(errors.ShapeError, "hidden", lambda: cpu.mean_pool(H[0], MASK, out=None, rows=None))
    raises(
        errors.DTypeError, "mask", lambda: cpu.mean_pool(H, MASK.astype(np.int8), out=None, rows=None), "int8"
    )
    raises(errors.ShapeError, "mask", lambda: cpu.mean_pool(H, MASK[:2], out=None, rows=None), "(2, 5)")
    raises(errors.InvalidArgumentError, "rows", lambda: cpu.mean_pool(H, MASK, out=None, rows=np.arange(3)))
    raises(errors.ShapeError, "out", lambda: cpu.mean_pool(H, MASK, out=out[:2], rows=None), "at least 3")
    raises(
        errors.ShapeError, "out", lambda: cpu.mean_pool(H, MASK, out=out[:, :3].copy(), rows=None), "(6, 3)"
    )
    raises(errors.DTypeError, "out", lambda: cpu.mean_pool(H, MASK, out=out[::2], rows=None), "C-contiguous")
    raises(errors.OutOfRangeError, "rows", lambda: cpu.mean_pool(H, MASK, out=out, rows=np.array([0, 1, 6])))
    raises(
        errors.InvalidArgumentError, "rows", lambda: cpu.mean_pool(H, MASK, out=out, rows=np.array([0, 1, 0]))
    )
    raises(
        errors.DTypeError,
        "hidden",
        lambda: cpu.mean_pool(np.repeat(H, 2, axis=-1)[..., ::2], MASK, out=None, rows=None),
        "contiguous along its last axis",
    )
    raises(
        errors.DTypeError,
        "table",
        lambda: cpu.route_indexed(np.repeat(T, 2, axis=-1)[:, ::2], QR, KR, tau=0.0, k_in=1),
        "contiguous along its last axis",
    )
    raises(
        errors.ShapeError,
        "q_rows",
        lambda: cpu.route_indexed(T, QR[0], KR[0], tau=0.0, k_in=1),
        "2 dimensions",
    )
    raises(errors.ShapeError, "k_rows", lambda: cpu.route_indexed(T, QR, KR[:1], tau=0.0, k_in=1), "(1, 3)")
    raises(
        errors.ShapeError,
        "active",
        lambda: cpu.route_indexed(T, QR, KR, tau=0.0, k_in=1, active=np.ones(3, bool)),
    )
    raises(errors.OutOfRangeError, "tau", lambda: cpu.route_indexed(T, QR, KR, tau=2.0, k_in=1))
    raises(
        errors.InvalidArgumentError, "isa", lambda: cpu.route_indexed(T, QR, KR, tau=0.0, k_in=1, isa="sse9")
    )
    rows = np.array([1, 4, 7])
    raises(
        errors.DTypeError,
        "pool",
        lambda: _core.pool_route([H.astype(np.float64)], [MASK], [rows], T.copy(), QR, KR, None, 0.0, 1),
        "pool[0] hidden",
    )
    raises(
        errors.InvalidArgumentError,
        "pool",
        lambda: _core.pool_route((H,), [MASK], [rows], T.copy(), QR, KR, None, 0.0, 1),
        "list",
    )
    raises(
        errors.InvalidArgumentError,
        "pool",
        lambda: _core.pool_route([H], [], [rows], T.copy(), QR, KR, None, 0.0, 1),
        "one length",
    )
    raises(
        errors.InvalidArgumentError,
        "pool",
        lambda: _core.pool_route([H], [MASK], [None], T.copy(), QR, KR, None, 0.0, 1),
        "None",
    )
    # the scalars are checked before the table is written
    table = T.copy()
    raises(
        errors.OutOfRangeError,
        "tau",
        lambda: _core.pool_route([H], [MASK], [rows], table, QR, KR, None, 2.0, 1),
    )
    raises(
        errors.OutOfRangeError,
        "k_in",
        lambda: _core.pool_route([H], [MASK], [rows], table, QR, KR, None, 0.0, -1),
    )
    np.testing.assert_array_equal(table, T)
    # still usable afterwards
    np.testing.assert_allclose(cpu.mean_pool(H, MASK, out=None, rows=None), pool_f64(H, MASK), atol=POOL_ATOL)


def test_cuda_backend_has_no_pool_kernels() -> None:
    with pytest.raises(errors.BackendUnavailableError, match="mean_pool"):
        cuda_backend.mean_pool(H, MASK, out=None, rows=None)
    with pytest.raises(errors.BackendUnavailableError, match="route_indexed"):
        cuda_backend.route_indexed(T, QR, KR, tau=0.0, k_in=1)
    with pytest.raises(errors.BackendUnavailableError):
        ops.mean_pool(H, MASK, backend="cuda")
    with pytest.raises(errors.BackendUnavailableError):
        ops.route_indexed(T, QR, KR, backend="cuda")


def test_new_ops_are_public() -> None:
    assert {"mean_pool", "route_indexed"} <= set(ops.__all__)
