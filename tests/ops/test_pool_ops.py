"""mean_pool and route_indexed (with its fused pool= form) on every backend (tests/_backends.py): what the
ops promise beyond parity with the reference (tests/ops/test_parity.py) and the float64 definition
(tests/ops/test_properties.py): mask values are not weights, padding tokens and unreferenced rows are never
read, in-place writes to given rows only, pool= equals mean_pool then route_indexed; and their errors."""

from __future__ import annotations

import _inputs as inp
import numpy as np
import pytest
from _backends import Backend, assert_matches, core, mean_pool_f64, needs_core, on_backends
from _checks import check

from toporoute import errors, ops
from toporoute.backends import cpu

# ---------------------------------------------------------------------------------------------------- mean_pool


@on_backends("mean_pool")
def test_mean_pool_mask_values_are_not_weights(backend: Backend) -> None:
    rng = np.random.default_rng(1)
    hidden = inp.hidden_states(rng, 4, 6, 8)
    m = inp.attention_mask(rng, 4, 6, np.bool_)
    base = backend.mean_pool(hidden, m)
    for values in (m.astype(np.int32) * 5, m.astype(np.int64) * -3):
        assert_matches(
            "mean_pool", backend.mean_pool(hidden, values), base, f"{values.dtype} mask", exact=True
        )


@on_backends("mean_pool")
def test_mean_pool_uncounted_tokens_may_hold_anything(backend: Backend) -> None:
    rng = np.random.default_rng(2)
    hidden = inp.hidden_states(rng, 5, 7, 9)
    mask = inp.attention_mask(rng, 5, 7, np.int64)
    dirty = hidden.copy()
    dirty[mask == 0] = np.nan
    dirty[0, (mask[0] == 0)] = np.inf
    assert_matches("mean_pool", backend.mean_pool(dirty, mask), backend.mean_pool(hidden, mask), exact=True)


@on_backends("mean_pool")
@pytest.mark.parametrize("rows_dtype", [np.int32, np.int64])
def test_mean_pool_out_rows(backend: Backend, rows_dtype) -> None:
    rng = np.random.default_rng(3)
    n, L, D, M = 6, 5, 12, 10
    hidden = inp.hidden_states(rng, n, L, D)
    mask = inp.attention_mask(rng, n, L, np.int64)
    want = backend.mean_pool(hidden, mask)
    rows = rng.permutation(M)[:n].astype(rows_dtype)
    before = rng.standard_normal((M, D)).astype(np.float32)
    out = before.copy()
    got = backend.mean_pool(hidden, mask, out=out, rows=rows)
    assert got is out
    np.testing.assert_array_equal(out[rows], want)
    untouched = np.setdiff1d(np.arange(M), rows)
    np.testing.assert_array_equal(out[untouched], before[untouched])
    # rows=None with out: row i goes to out[i]
    out = before.copy()
    assert backend.mean_pool(hidden, mask, out=out) is out
    np.testing.assert_array_equal(out[:n], want)
    np.testing.assert_array_equal(out[n:], before[n:])


# ---------------------------------------------------------------------------------------------------- route_indexed


@on_backends("route_indexed", simd_levels=False)
def test_route_indexed_ignores_unreferenced_rows(backend: Backend) -> None:
    # a table allocated with numpy.empty and filled only where referenced is fine
    rng = np.random.default_rng(24)
    table = np.full((10, 6), np.nan, np.float32)
    table[[1, 4, 7]] = rng.standard_normal((3, 6)).astype(np.float32)
    q_rows = np.array([[1, 4, 7, -1]])
    k_rows = np.array([[7, -1, 1, 4]])
    got = backend.route_indexed(table, q_rows, k_rows, tau=-1.0, k_in=0)
    assert np.isfinite(got.scores).all()


# ---------------------------------------------------------------------------------------------------- pool=


@on_backends("route_indexed", simd_levels=False)
def test_pool_form_equals_mean_pool_then_route_indexed(backend: Backend) -> None:
    rng = np.random.default_rng(30)
    table0, pool, q_rows, k_rows = inp.pool_route(rng, 40, 16, 4, 6)
    # the routes read the freshly pooled rows
    q_rows[0, :3] = pool[0][2][:3]
    k_rows[0, :3] = pool[2][2][:3]

    expected_table = table0.copy()
    for hidden, mask, rows in pool:
        backend.mean_pool(hidden, mask, out=expected_table, rows=rows)
    want = backend.route_indexed(expected_table, q_rows, k_rows, tau=0.0, k_in=3)

    table = table0.copy()
    got = backend.route_indexed(table, q_rows, k_rows, tau=0.0, k_in=3, pool=pool)
    assert_matches("route_indexed", got, want, exact=True)
    np.testing.assert_array_equal(table, expected_table)
    written = np.concatenate([rows for _, _, rows in pool])
    changed = np.nonzero((table != table0).any(axis=1))[0]
    assert set(changed.tolist()) <= set(written.tolist())
    untouched = np.setdiff1d(np.arange(len(table0)), written)
    np.testing.assert_array_equal(table[untouched], table0[untouched])
    # a single-episode call with pool= too
    table = table0.copy()
    one = backend.route_indexed(table, q_rows[0], k_rows[0], tau=0.0, k_in=3, pool=pool)
    want_one = backend.route_indexed(expected_table, q_rows[:1], k_rows[:1], tau=0.0, k_in=3)
    assert_matches("route_indexed", one, type(want_one)(*(f[0] for f in vars(want_one).values())), exact=True)
    np.testing.assert_array_equal(table, expected_table)


@on_backends("route_indexed", simd_levels=False)
def test_pool_form_empty(backend: Backend) -> None:
    rng = np.random.default_rng(32)
    table = inp.table(rng, 8, 5)
    before = table.copy()
    q_rows, k_rows = inp.table_rows(rng, 2, 4, 8), inp.table_rows(rng, 2, 4, 8)
    want = backend.route_indexed(table, q_rows, k_rows)
    # an empty pool, and a pool input with no rows: nothing written
    for pool in ([], (), [(np.zeros((0, 3, 5), np.float32), np.zeros((0, 3), bool), np.zeros(0, np.int32))]):
        got = backend.route_indexed(table, q_rows, k_rows, pool=pool)
        assert_matches("route_indexed", got, want, repr(pool)[:40], exact=True)
        np.testing.assert_array_equal(table, before)


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


@on_backends("mean_pool")
def test_mean_pool_bad_arrays(backend: Backend) -> None:
    def mp(hidden=H, mask=MASK, **kw):
        return lambda: backend.mean_pool(hidden, mask, **kw)

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
    if backend.arrays != "torch":  # the harness hands PyTorch a contiguous copy
        raises(
            errors.DTypeError,
            "out",
            mp(out=np.zeros((4, 6), np.float32).T, rows=np.arange(3)),
            "C-contiguous",
        )
    read_only = np.zeros((6, 4), np.float32)
    read_only.flags.writeable = False
    if backend.host:  # a device copy of it is writeable
        raises(errors.InvalidArgumentError, "out", mp(out=read_only, rows=np.arange(3)), "read-only")
    raises(errors.DTypeError, "rows", mp(out=out, rows=np.arange(3.0)), "float64")
    raises(errors.DTypeError, "rows", mp(out=out, rows=np.arange(3, dtype=np.uint32)), "uint32")
    raises(errors.ShapeError, "rows", mp(out=out, rows=np.arange(4)), "(4,)", "(3,)")


@on_backends("mean_pool")
def test_mean_pool_bad_values_leave_out_untouched(backend: Backend) -> None:
    out = RNG.standard_normal((6, 4)).astype(np.float32)
    before = out.copy()

    def mp(hidden=H, rows=None):
        rows = np.arange(3) if rows is None else rows
        return lambda: backend.mean_pool(hidden, MASK, out=out, rows=rows)

    raises(errors.OutOfRangeError, "rows", mp(rows=np.array([0, 6, 1])), "[0, 6)", "6", "index 1")
    raises(errors.OutOfRangeError, "rows", mp(rows=np.array([0, 1, -1], np.int32)), "-1", "index 2")
    raises(errors.InvalidArgumentError, "rows", mp(rows=np.array([4, 2, 4])), "distinct", "row 4", "index 2")
    for bad in (np.nan, np.inf, -np.inf):
        h = H.copy()
        h[2, 3, 1] = bad
        raises(errors.NonFiniteError, "hidden", mp(hidden=h), "row 2", "token 3")
        raises(errors.NonFiniteError, "hidden", lambda h=h: backend.mean_pool(h, MASK), "row 2")
    np.testing.assert_array_equal(out, before)
    # a non-finite token in a late row of a batch large enough for the threaded path: nothing written
    rng = np.random.default_rng(0)
    big = rng.standard_normal((2000, 16, 16)).astype(np.float32)
    big[1500, 3, 2] = np.nan
    big[1700, 0, 0] = np.inf
    out = np.zeros((2000, 16), np.float32)
    with pytest.raises(errors.NonFiniteError) as e:
        backend.mean_pool(big, np.ones((2000, 16), bool), out=out)
    check(e, errors.NonFiniteError, "hidden", "row 1500", "token 3")
    assert not out.any()


@on_backends("route_indexed", simd_levels=False)
def test_route_indexed_bad_arrays(backend: Backend) -> None:
    def ri(table=T, q_rows=QR, k_rows=KR, **kw):
        return lambda: backend.route_indexed(table, q_rows, k_rows, **kw)

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


@on_backends("route_indexed", simd_levels=False)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_route_indexed_rows_out_of_range(backend: Backend, dtype) -> None:
    def ri(q_rows, k_rows):
        return lambda: backend.route_indexed(T, q_rows.astype(dtype), k_rows.astype(dtype))

    q = QR.copy()
    q[1, 2] = 10
    raises(errors.OutOfRangeError, "q_rows", ri(q, KR), "[0, 10)", "got 10", "episode 1", "agent 2")
    q[0, 1] = -2
    raises(errors.OutOfRangeError, "q_rows", ri(q, KR), "got -2", "episode 0", "agent 1")
    k = KR.copy()
    k[0, 0] = -5
    raises(errors.OutOfRangeError, "k_rows", ri(QR, k), "got -5", "episode 0", "agent 0")
    raises(errors.OutOfRangeError, "q_rows", ri(q, k))  # q_rows is checked first
    raises(errors.OutOfRangeError, "k_rows", lambda: backend.route_indexed(T, QR[0], k[0]), "-5")
    if dtype is np.int64:
        k = KR.copy()
        k[1, 1] = 2**40  # not an int32 either: reported as it is
        raises(errors.OutOfRangeError, "k_rows", ri(QR, k), str(2**40), "episode 1", "agent 1")


@on_backends("route_indexed", simd_levels=False)
def test_route_indexed_non_finite_table(backend: Backend) -> None:
    for bad in (np.nan, np.inf):
        t = T.copy()
        t[5, 2] = bad  # referenced by q_rows[1, 2] (and nothing else)
        raises(
            errors.NonFiniteError,
            "table",
            lambda t=t: backend.route_indexed(t, QR, KR),
            "row 5",
            "q_rows",
            "episode 1",
            "agent 2",
        )
        t[8, 0] = bad  # k_rows[0, 2]: an earlier episode
        raises(
            errors.NonFiniteError,
            "table",
            lambda t=t: backend.route_indexed(t, QR, KR),
            "row 8",
            "k_rows",
            "episode 0",
            "agent 2",
        )
        raises(
            errors.NonFiniteError,
            "table",
            lambda t=t: backend.route_indexed(t, QR[1], KR[1]),
            "row 5",
        )


@on_backends("route_indexed", simd_levels=False)
def test_route_indexed_bad_pool(backend: Backend) -> None:
    table = T.copy()
    before = table.copy()
    rows = np.array([1, 4, 7])

    def ri(pool, q_rows=QR, table=table):
        return lambda: backend.route_indexed(table, q_rows, KR, pool=pool)

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
    # a strided table: the host backends write C-contiguous tables only; the CUDA kernels write rows at their
    # stride but need unit stride along D (the harness hands PyTorch a contiguous copy, so only CuPy shows it)
    if backend.arrays != "torch":
        raises(
            errors.DTypeError,
            "table",
            ri([(H, MASK, rows)], table=np.zeros((4, 10), np.float32).T),
            "C-contiguous" if backend.host else "contiguous along its last axis",
        )
    if backend.host:  # a device copy of a read-only array is writeable
        read_only = T.copy()
        read_only.flags.writeable = False
        raises(errors.InvalidArgumentError, "table", ri([(H, MASK, rows)], table=read_only), "read-only")
    np.testing.assert_array_equal(table, before)


@needs_core
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
        lambda: core.route_indexed(T.copy(), QR, KR, 0.0, 1, None, [(H.astype(np.float64), MASK, rows)]),
        "pool[0] hidden",
    )
    raises(
        errors.InvalidArgumentError,
        "pool",
        lambda: core.route_indexed(T.copy(), QR, KR, 0.0, 1, None, [(H, MASK)]),
        "pool[0] must be a (hidden, mask, rows) triple",
    )
    raises(
        errors.InvalidArgumentError,
        "pool",
        lambda: core.route_indexed(T.copy(), QR, KR, 0.0, 1, None, 7),
        "pool must be a sequence of (hidden, mask, rows) triples or None",
    )
    raises(
        errors.InvalidArgumentError,
        "pool",
        lambda: core.route_indexed(T.copy(), QR, KR, 0.0, 1, None, [(H, MASK, None)]),
        "None",
    )
    # the scalars are checked before the table is written
    table = T.copy()
    raises(
        errors.OutOfRangeError,
        "tau",
        lambda: core.route_indexed(table, QR, KR, 2.0, 1, None, [(H, MASK, rows)]),
    )
    raises(
        errors.OutOfRangeError,
        "k_in",
        lambda: core.route_indexed(table, QR, KR, 0.0, -1, None, [(H, MASK, rows)]),
    )
    np.testing.assert_array_equal(table, T)
    # still usable afterwards
    want = mean_pool_f64(H, MASK).astype(np.float32)
    assert_matches("mean_pool", cpu.mean_pool(H, MASK, out=None, rows=None), want, "after the errors")


def test_new_ops_are_public() -> None:
    assert {"mean_pool", "route_indexed"} <= set(ops.__all__)
