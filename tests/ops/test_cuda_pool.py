"""The CUDA kernels of mean_pool and route_indexed beyond parity (tests/ops/test_parity.py holds ``cuda``,
``cuda-cupy`` and ``cuda-torch`` to the reference): bad input reported with the reference's exception and message
(numpy inputs at the call, device arrays at :func:`toporoute.backends.cuda.synchronize`), nothing written when a
check fails, the caller's device arrays written in place, empty inputs, every kernel variant (vector and scalar
loads, wide rows) and batches large enough for many blocks and several gather chunks.

Every test is marked ``cuda``: tests/conftest.py skips them with the reason when no GPU is usable (and fails them
under ``--require-cuda``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import _inputs as inp
import numpy as np
import pytest
from _backends import REFERENCE, Backend, assert_matches, backend_params

from toporoute import errors
from toporoute.backends import cuda, reference
from toporoute.backends._cuda_pool import mean_pool, route_indexed

pytestmark = pytest.mark.cuda

# numpy (host path) and the device-array frameworks (each skips when not installed)
BACKENDS = [p for p in backend_params("mean_pool", reference=False) if p.id.startswith("cuda")]
DEVICE_ARRAYS = [p for p in BACKENDS if p.id in ("cuda-cupy", "cuda-torch")]


def _expected(call: Callable[[], Any]) -> errors.ToporouteError:
    """The reference's exception for a bad call."""
    with pytest.raises(errors.ToporouteError) as e:
        call()
    return e.value


def _raises_like(want: errors.ToporouteError, call: Callable[[], Any], backend: Backend) -> None:
    """``call`` (numpy: at once; device arrays: at synchronize) raises the reference's class, arg and message."""
    with pytest.raises(type(want), match="^" + re.escape(str(want))) as e:
        call()
        if not backend.host:
            cuda.synchronize()
    assert e.value.arg == want.arg
    cuda.synchronize()  # reported once


def _pool_inputs(rng: np.random.Generator, n: int, L: int, D: int) -> tuple[np.ndarray, np.ndarray]:
    return inp.hidden_states(rng, n, L, D), inp.attention_mask(rng, n, L, np.int64)


# ------------------------------------------------------------------------------------------------- mean_pool


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows_dtype", [np.int32, np.int64])
def test_mean_pool_errors_match_the_reference(backend: Backend, rows_dtype: Any) -> None:
    rng = np.random.default_rng(41)
    n, L, D, M = 9, 6, 16, 20
    hidden, mask = _pool_inputs(rng, n, L, D)
    mask[:, 0] = 1
    rows = rng.permutation(M)[:n].astype(rows_dtype)
    nan_hidden = hidden.copy()
    nan_hidden[5, 0, 3] = np.nan  # counted: reported
    nan_hidden[2, 0, 1] = np.inf  # counted, an earlier row: reported first
    padded = hidden.copy()
    padded[4, :, :] = np.nan
    padded_mask = mask.copy()
    padded_mask[4] = 0  # uncounted tokens may hold anything
    cases: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
        "row below 0": (hidden, mask, np.where(np.arange(n) == 3, -2, rows).astype(rows_dtype)),
        "row past M, after a NaN": (
            nan_hidden,
            mask,
            np.where(np.arange(n) == 7, M + 5, rows).astype(rows_dtype),
        ),
        "repeated rows": (hidden, mask, np.where(np.arange(n) >= 6, rows[1], rows).astype(rows_dtype)),
        "non-finite tokens": (nan_hidden, mask, rows),
    }
    for desc, (h, m, r) in cases.items():
        out0 = rng.standard_normal((M, D)).astype(np.float32)
        want = _expected(lambda h=h, m=m, r=r, o=out0: reference.mean_pool(h, m, o.copy(), r))
        out = backend.put(out0.copy())
        _raises_like(
            want,
            lambda h=h, m=m, r=r, o=out: mean_pool(*map(backend.put, (h, m)), o, backend.put(r)),
            backend,
        )
        np.testing.assert_array_equal(backend.fetch(out), out0, err_msg=f"{desc}: out was written")
    # uncounted tokens are never read
    got = backend.fetch(mean_pool(backend.put(padded), backend.put(padded_mask), None, None))
    assert_matches("mean_pool", got, REFERENCE.mean_pool(padded, padded_mask))


@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_pool_writes_the_callers_out_in_place(backend: Backend) -> None:
    rng = np.random.default_rng(42)
    n, L, D, M = 50, 7, 384, 80
    hidden, mask = _pool_inputs(rng, n, L, D)
    out0 = rng.standard_normal((M, D)).astype(np.float32)
    for rows in (rng.permutation(M)[:n].astype(np.int32), None):
        want = REFERENCE.mean_pool(hidden, mask, out=out0.copy(), rows=rows)
        out = backend.put(out0.copy())
        got = mean_pool(
            backend.put(hidden), backend.put(mask), out, None if rows is None else backend.put(rows)
        )
        assert got is out
        assert_matches("mean_pool", backend.fetch(out), want, f"rows={rows is not None}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("n", "L", "D"),
    [
        (8000, 12, 384),  # many blocks, float4 loads
        (3000, 40, 5),  # scalar loads, several ballots per row
        (5, 3, 4100),  # two chunks per thread
        (4, 3, 8200),  # four
        (3, 2, 16400),  # eight
    ],
)
def test_mean_pool_sizes(backend: Backend, n: int, L: int, D: int) -> None:
    rng = np.random.default_rng(n + L + D)
    hidden, mask = _pool_inputs(rng, n, L, D)
    got = backend.fetch(mean_pool(backend.put(hidden), backend.put(mask), None, None))
    assert got.shape == (n, D)
    assert_matches("mean_pool", got, REFERENCE.mean_pool(hidden, mask), f"n={n} L={L} D={D}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("n", "L", "D"), [(0, 3, 4), (3, 0, 4), (3, 4, 0), (0, 0, 0)])
def test_mean_pool_empty(backend: Backend, n: int, L: int, D: int) -> None:
    hidden, mask = np.zeros((n, L, D), np.float32), np.ones((n, L), bool)
    got = backend.fetch(mean_pool(backend.put(hidden), backend.put(mask), None, None))
    assert got.shape == (n, D) and not got.any()
    out = backend.put(np.full((n + 2, D), 5, np.float32))
    mean_pool(backend.put(hidden), backend.put(mask), out, backend.put(np.arange(n)[::-1].copy()))
    got = backend.fetch(out)
    assert not got[:n].any() and (got[n:] == 5).all()
    # the rows are checked even when there is nothing to pool (D = 0 or L = 0), as by the reference
    if n:
        bad = np.full(n, n + 2)
        want = _expected(lambda: reference.mean_pool(hidden, mask, np.zeros((n + 2, D), np.float32), bad))
        call = lambda: mean_pool(backend.put(hidden), backend.put(mask), out, backend.put(bad))
        _raises_like(want, call, backend)


# --------------------------------------------------------------------------------------------- route_indexed


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows_dtype", [np.int32, np.int64])
def test_route_indexed_errors_match_the_reference(backend: Backend, rows_dtype: Any) -> None:
    rng = np.random.default_rng(43)
    M, D, B, N = 30, 24, 7, 5
    table = inp.table(rng, M, D)
    q_rows, k_rows = inp.table_rows(rng, B, N, M, rows_dtype), inp.table_rows(rng, B, N, M, rows_dtype)
    nan_table = table.copy()
    used = int(k_rows[4, 2]) if k_rows[4, 2] >= 0 else 0
    k_rows[4, 2] = used
    nan_table[used, 7] = np.nan
    cases = {
        "q_rows below -1": (table, np.where(q_rows == q_rows[3, 1], -7, q_rows), k_rows),
        "k_rows past M": (
            table,
            q_rows,
            np.where(np.arange(N) == 4, 10**9 if rows_dtype == np.int64 else M, k_rows),
        ),
        "q_rows and k_rows": (table, np.full_like(q_rows, M), np.full_like(k_rows, -3)),
        "table not finite": (nan_table, q_rows, k_rows),
    }
    for t, q, k in cases.values():
        q, k = q.astype(rows_dtype), k.astype(rows_dtype)
        want = _expected(lambda t=t, q=q, k=k: reference.route_indexed(t, q, k, tau=0.1, k_in=2))
        call = lambda t=t, q=q, k=k: route_indexed(*map(backend.put, (t, q, k)), 0.1, 2)
        _raises_like(want, call, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_route_indexed_pool_errors_leave_the_table(backend: Backend) -> None:
    rng = np.random.default_rng(44)
    table0, pool, q_rows, k_rows = inp.pool_route(rng, 60, 32, 6, 5, np.int32)
    bad_range = [(h, m, r.copy()) for h, m, r in pool]
    bad_range[1][2][2] = 60
    repeated = [(h, m, r.copy()) for h, m, r in pool]
    repeated[2][2][3] = repeated[0][2][1]
    nan_pool = [(h.copy(), m.copy(), r) for h, m, r in pool]
    nan_pool[1][0][2, 0, 5] = np.nan
    nan_pool[1][1][2, 0] = 1
    bad_q = np.where(np.arange(5) == 2, 60, q_rows)
    cases = {
        "pool rows out of range": (bad_range, q_rows),
        "pool rows repeated across inputs": (repeated, q_rows),
        "pool token not finite": (nan_pool, q_rows),
        "q_rows out of range (checked before the pool)": (nan_pool, bad_q),
    }
    for desc, (p, q) in cases.items():
        want = _expected(
            lambda p=p, q=q: reference.route_indexed(table0.copy(), q, k_rows, tau=0.0, k_in=2, pool=p)
        )
        table = backend.put(table0.copy())
        dev_pool = [tuple(backend.put(x) for x in triple) for triple in p]
        call = lambda q=q, t=table, p=dev_pool: route_indexed(
            t, backend.put(q), backend.put(k_rows), 0.0, 2, pool=p
        )
        _raises_like(want, call, backend)
        np.testing.assert_array_equal(backend.fetch(table), table0, err_msg=f"{desc}: the table was written")
    # a non-finite table row is checked after pooling: the table is written, as by the reference
    unpooled = int(np.setdiff1d(np.arange(60), np.concatenate([r for _, _, r in pool]))[0])
    t_ref = table0.copy()
    t_ref[unpooled] = np.inf
    table = backend.put(t_ref.copy())
    q_bad = np.where(np.arange(5) == 0, unpooled, q_rows)  # agent 0 of every episode needs the bad row
    want = _expected(lambda: reference.route_indexed(t_ref, q_bad, k_rows, tau=0.0, k_in=2, pool=pool))
    dev_pool = [tuple(backend.put(x) for x in triple) for triple in pool]
    call = lambda: route_indexed(table, backend.put(q_bad), backend.put(k_rows), 0.0, 2, pool=dev_pool)
    _raises_like(want, call, backend)
    got_table, keep = backend.fetch(table), np.arange(60) != unpooled
    assert np.isinf(got_table[unpooled]).all()
    assert_matches("mean_pool", got_table[keep], t_ref[keep], "pooled before the table check")


@pytest.mark.parametrize("backend", BACKENDS)
def test_route_indexed_pool_form_writes_the_callers_table(backend: Backend) -> None:
    rng = np.random.default_rng(45)
    table0, pool, q_rows, k_rows = inp.pool_route(rng, 60, 384, 16, 8, np.int32)
    t_ref = table0.copy()
    want = reference.route_indexed(t_ref, q_rows, k_rows, tau=0.05, k_in=2, pool=pool)
    table = backend.put(table0.copy())
    got = route_indexed(
        table,
        backend.put(q_rows),
        backend.put(k_rows),
        0.05,
        2,
        pool=[tuple(map(backend.put, t)) for t in pool],
    )
    pooled = backend.fetch(table)
    assert_matches("mean_pool", pooled, t_ref, "pooled table")
    assert_matches("route_indexed", backend.fetch(got), want)
    again = route_indexed(backend.put(pooled), backend.put(q_rows), backend.put(k_rows), 0.05, 2)
    assert_matches("route_indexed", backend.fetch(got), backend.fetch(again), "the pooled table", exact=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_route_indexed_active_and_empty(backend: Backend) -> None:
    rng = np.random.default_rng(46)
    B, N, D, M = 40, 9, 12, 25
    table = inp.table(rng, M, D)
    q_rows, k_rows = inp.table_rows(rng, B, N, M), inp.table_rows(rng, B, N, M, np.int32)
    active = rng.random((B, N)) < 0.7
    got = route_indexed(*map(backend.put, (table, q_rows, k_rows)), 0.0, 3, active=backend.put(active))
    want = REFERENCE.route_indexed(table, q_rows, k_rows, tau=0.0, k_in=3, active=active)
    assert_matches("route_indexed", backend.fetch(got), want)
    for b, n, m, d in [(0, 4, 5, 3), (2, 0, 5, 3), (2, 3, 0, 3), (2, 3, 4, 0)]:
        t, rows = np.zeros((m, d), np.float32), np.full((b, n), -1 if m == 0 else 0, np.int64)
        got = backend.fetch(route_indexed(backend.put(t), backend.put(rows), backend.put(rows), -1.0, 0))
        assert_matches("route_indexed", got, REFERENCE.route_indexed(t, rows, rows, tau=-1.0, k_in=0))
    # a pool into an empty batch still writes the table
    table0, pool, _, _ = inp.pool_route(rng, 40, 16, 1, 1)
    t_ref, none = table0.copy(), np.zeros((0, 3), np.int64)
    REFERENCE.route_indexed(t_ref, none, none, tau=0.0, k_in=2, pool=pool)
    t_got = backend.put(table0.copy())
    dev_pool = [tuple(map(backend.put, t)) for t in pool]
    route_indexed(t_got, backend.put(none), backend.put(none), 0.0, 2, pool=dev_pool)
    assert_matches("mean_pool", backend.fetch(t_got), t_ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_route_indexed_gathers_in_chunks(backend: Backend) -> None:
    # 64 agents x 2 x 1024 floats = 512 kB per episode: the 256 MiB gather scratch holds 511 episodes, so 700
    # episodes take two chunks; the results equal route() on the gathered rows bit for bit
    rng = np.random.default_rng(47)
    B, N, D, M = 700, 64, 1024, 300
    table = inp.table(rng, M, D)
    q_rows, k_rows = inp.table_rows(rng, B, N, M), inp.table_rows(rng, B, N, M)
    got = backend.fetch(route_indexed(*map(backend.put, (table, q_rows, k_rows)), 0.02, 3))
    active = (q_rows >= 0) & (k_rows >= 0)
    q, k = inp.gather(table, q_rows), inp.gather(table, k_rows)
    want = backend.fetch(cuda.route(*map(backend.put, (q, k, active)), 0.02, 3))
    assert_matches("route_indexed", got, want, "gathered", exact=True)
    for lo in (0, 505, 690):
        part = slice(lo, lo + 10)
        ref = REFERENCE.route_indexed(table, q_rows[part], k_rows[part], tau=0.02, k_in=3)
        assert_matches(
            "route_indexed", type(got)(*(x[part] for x in vars(got).values())), ref, f"episodes {lo}.."
        )
    # a bad row used only in the second chunk: the message counts episodes from the batch start
    bad = table.copy()
    unused = np.setdiff1d(np.arange(M), np.concatenate([q_rows.ravel(), k_rows.ravel()]))
    row = int(unused[0]) if unused.size else 0
    bad[row, 3] = np.nan
    k_bad = k_rows.copy()
    k_bad[612, 40] = row
    want_e = _expected(lambda: reference.route_indexed(bad, q_rows, k_bad, tau=0.02, k_in=3))
    call = lambda: route_indexed(*map(backend.put, (bad, q_rows, k_bad)), 0.02, 3)
    _raises_like(want_e, call, backend)
