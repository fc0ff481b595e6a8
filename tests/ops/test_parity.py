"""Parity of every compiled backend with the numpy reference, op by op: the one parity suite.

Each test runs on the backends of its op (tests/_backends.py): the compiled core at every SIMD level this machine
supports (``cpu-<isa>``; ``cpu`` for ops dispatched once per process), ``cuda`` with numpy inputs and
``cuda-cupy`` / ``cuda-torch`` with device inputs through DLPack. A backend that cannot run here skips with the
reason. The reference is the oracle: tests that only compare with it leave it out, tests that also compare a
backend with itself (strided against contiguous inputs, one episode against the batch, route_indexed against
route on the gathered rows) run on it too. Integer and boolean outputs must be equal; float outputs agree within
the one table of tolerances (``TOLERANCES`` in tests/_backends.py).

The reference results of the large grids are built once per case: the backend is the fastest-varying parameter
and each grid caches one case.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import itertools
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import _conductor_plans as plans
import _inputs as inp
import numpy as np
import pytest
from _backends import (
    ACTIVE_ISA,
    CUDA_OPS,
    ISAS,
    OPS,
    REFERENCE,
    SIMD_OPS,
    Backend,
    View,
    assert_matches,
    backend_params,
    core,
    mean_pool_f64,
    needs_core,
    on_backends,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toporoute import errors, ops
from toporoute.backends import cpu, cuda, reference
from toporoute.benchmark import cases as bench_cases
from toporoute.types.conductor_topology import CheckOptions, Context
from toporoute.types.op_table import OPS as OP_TABLE
from toporoute.types.qmix_params import ADJ_MODES, QMixConfig, QMixParams

TAUS = (-0.5, 0.0, 0.3)
K_INS = (0, 1, 3)  # uncapped, capped below N, and (for N < 3) above N: a -1 padded inbox
ALL = slice(None)
EVERY_OTHER = slice(None, None, 2)
ODD_ONES = slice(1, None, 2)
REVERSED = slice(None, None, -1)


# ------------------------------------------------------------------------------------------- the backend matrix


@needs_core
def test_simd_levels() -> None:
    # the SIMD grid runs once per supported level; an empty list would test nothing
    assert "generic" in ISAS
    assert set(ISAS) <= set(core.build_info()["simd"]["compiled"])
    assert ACTIVE_ISA in ISAS


def test_every_op_of_the_table_is_on_the_grid() -> None:
    # the grid takes its ops from the op table; each runs on a Backend through a method of its own or the
    # generic one (Backend.__getattr__: toporoute.ops.<op> on the backend), and on the reference at least
    assert OPS == tuple(OP_TABLE)
    missing = [op for op in OP_TABLE if not callable(getattr(REFERENCE, op, None))]
    assert not missing, (
        f"ops of toporoute.types.op_table that tests/_backends.py's Backend cannot run: {missing}"
    )
    for op in OP_TABLE:  # the generic method calls the op's own public function
        if not hasattr(Backend, op):
            assert getattr(REFERENCE, op).args == (getattr(ops, op),), op
    for name in ("not_an_op", "QMixParams", "unbatch"):  # and serves the table's ops alone
        assert not hasattr(REFERENCE, name), name
    unrun = [op for op in OP_TABLE if REFERENCE not in [p.values[0] for p in backend_params(op, cuda=False)]]
    assert not unrun, f"ops of toporoute.types.op_table the grid runs on no reference: {unrun}"


def test_backend_op_sets_match_the_package() -> None:
    # the op table declares every op once; the reference and the CPU backend register a kernel for each, CUDA
    # for CUDA_OPS alone (the grid's reading of backends.kernels); tests/_backends.py's SIMD_OPS, declared
    # there, are exactly the ops whose CPU kernels take isa=
    assert set(reference.KERNELS) == set(cpu.KERNELS) == set(OP_TABLE)
    assert set(cuda.KERNELS) == CUDA_OPS
    assert SIMD_OPS <= set(cpu.KERNELS), SIMD_OPS - set(cpu.KERNELS)
    for op, fn in cpu.KERNELS.items():
        assert fn.__name__ == op and reference.KERNELS[op].__name__ == op
        assert ("isa" in inspect.signature(fn).parameters) == (op in SIMD_OPS), op
    # an op CUDA has no kernel for is refused by name before the GPU is looked for, through toporoute.ops (on
    # the inputs `toporoute bench` times it on, one episode)
    for op in sorted(set(OP_TABLE) - CUDA_OPS):
        case = bench_cases.OPS[op].prepare(1, bench_cases.Context())
        with pytest.raises(
            errors.BackendUnavailableError, match=f"^{op} has no CUDA kernel; use backend='cpu'$"
        ):
            case.call("cuda")()


def _first(result: Any) -> Any:
    """The first graph's result of a batched ``result`` (its fields without the batch axis)."""
    if isinstance(result, np.ndarray):
        return result[0]
    if isinstance(result, tuple):  # QMixStep
        return type(result)(*(None if v is None else v[0] for v in result))
    first = copy.copy(result)
    for name, value in vars(result).items():
        object.__setattr__(first, name, None if value is None else value[0])
    return first


@pytest.mark.parametrize("op", sorted(OP_TABLE))
def test_every_op_matches_the_reference_on_its_bench_case(op: str) -> None:
    """The grid's floor for every op of the table, a new one with nothing but its bench case: on the inputs
    ``toporoute bench`` times it on (3 graphs), every host backend that registers the op equals the reference, and
    for ops with a single-graph form, the first graph alone (each argument that carries the batch axis without
    it) gives the batch's first result."""
    case = bench_cases.OPS[op].prepare(3, bench_cases.Context())
    assert case.op is getattr(ops, op) and case.args is not None
    want = case.call("reference")()
    backends = ["cpu"] if core is not None else []
    for backend in backends:
        assert_matches(op, case.call(backend)(), want, f"{op} on its bench case, backend {backend}")
    spec = OP_TABLE[op]
    if not spec.lead:
        return
    bound = inspect.signature(case.op).bind(*case.args, **case.kwargs).arguments
    single = {  # each argument with a batch axis without it (team_project's (B,) sink becomes an int)
        a.name: bound[a.name][0]
        if bound[a.name] is not None and (a.batch or a.layout.startswith("(B,"))
        else bound[a.name]
        for a in spec.args
        if a.name in bound
    }
    for backend in ["reference", *backends]:
        got = case.op(**single, backend=backend)
        if isinstance(got, int):  # topology_distance: an int for a single graph
            assert got == want[0], f"{op}, the first graph alone, backend {backend}"
            continue
        assert_matches(op, got, _first(want), f"{op}, the first graph alone, backend {backend}")


# ----------------------------------------------------------------------------------------------------- route


@functools.lru_cache(maxsize=1)
def _route_grid(N: int, D: int) -> list[tuple[str, np.ndarray, np.ndarray, dict, Any]]:
    rng = np.random.default_rng(1000 * N + D)
    cases = []
    for B in (1, 7, 64):
        q, k = inp.qk(rng, B, N, D)
        mask = inp.active(rng, B, N)
        for active, tau, k_in in itertools.product((None, mask), TAUS, K_INS):
            kw = {"tau": tau, "k_in": k_in, "active": active}
            ctx = f"B={B} N={N} D={D} tau={tau} k_in={k_in} active={active is not None}"
            cases.append((ctx, q, k, kw, REFERENCE.route(q, k, **kw)))
    return cases


# D around the SIMD widths and the GPU's 4-float loads; N up to a warp, and past the 64-agent bitsets; teams of
# 16 agents and more with rows of 128 columns and more take the CPU's float32 pass (its 16 lanes, its pieces of
# 512 columns, its tiles of q rows: (64, 700) spans two pieces and several tiles)
ROUTE_SHAPES = [(N, D) for N in (1, 2, 3, 5, 8, 13, 33) for D in (1, 3, 7, 8, 9, 16, 384)]
ROUTE_SHAPES += [(70, 1), (70, 16), (70, 384), (130, 384), (64, 700)]


@on_backends("route", reference=False)
@pytest.mark.parametrize(("N", "D"), ROUTE_SHAPES)
def test_route_grid(N: int, D: int, backend: Backend) -> None:
    for ctx, q, k, kw, want in _route_grid(N, D):
        assert_matches("route", backend.route(q, k, **kw), want, ctx)


@functools.lru_cache(maxsize=1)
def _route_ties() -> list[tuple[str, np.ndarray, np.ndarray, dict, Any]]:
    # small integer vectors: many exactly equal scores (ties), scores of exactly 0 and +-1
    rng = np.random.default_rng(7)
    cases = []
    for D, N in [*itertools.product((1, 2, 3, 8, 17), (2, 5, 9, 16)), (130, 40)]:
        q = rng.integers(-2, 3, size=(32, N, D)).astype(np.float32)
        k = rng.integers(-2, 3, size=(32, N, D)).astype(np.float32)
        if D > 17:  # long rows rarely tie by chance: a team of 40 drawn from 6 rows (the CPU's float32 pass)
            q, k = (x[:, rng.integers(0, 6, N)] for x in (q, k))
        mask = inp.active(rng, 32, N)
        for tau, k_in in itertools.product((-1.0, -0.5, 0.0, 0.5, 1.0), (0, 1, 2, 4)):
            kw = {"tau": tau, "k_in": k_in, "active": mask}
            cases.append((f"N={N} D={D} tau={tau} k_in={k_in}", q, k, kw, REFERENCE.route(q, k, **kw)))
    return cases


@on_backends("route", reference=False)
def test_route_many_ties(backend: Backend) -> None:
    for ctx, q, k, kw, want in _route_ties():
        assert_matches("route", backend.route(q, k, **kw), want, ctx)


@on_backends("route", reference=False)
@pytest.mark.parametrize(("N", "D"), [(6, 9), (40, 130)])
def test_route_extreme_magnitudes(N: int, D: int, backend: Backend) -> None:
    # very large and very small (but normal) float32 values: float64 norms neither overflow nor underflow (a
    # team of 40 takes the float64 path then: its float32 pass would overflow or lose the products)
    q, k = inp.qk(np.random.default_rng(11), 8, N, D)
    for scale in (np.float32(1e-19), np.float32(1e19), np.float32(3e38 / 16)):
        qs = np.clip(q * scale, -3e38, 3e38).astype(np.float32)
        ks = np.clip(k * scale, -3e38, 3e38).astype(np.float32)
        assert np.isfinite(qs).all() and np.isfinite(ks).all()
        want = REFERENCE.route(qs, ks, tau=0.0, k_in=2)
        assert_matches("route", backend.route(qs, ks, tau=0.0, k_in=2), want, f"scale={scale}")


@needs_core
@pytest.mark.parametrize(("N", "D"), [(40, 130), (96, 384), (33, 1100)])
def test_route_float32_pass_agrees_across_levels(N: int, D: int) -> None:
    # Large teams take a float32 pass that settles every decision the float64 way (the grids above): its scores
    # are the same bit for bit at every level that has it (AVX2's two registers of 8 lanes and AVX-512's one of
    # 16 sum in the same order), and its decisions equal the generic level's, which has no such pass.
    rng = np.random.default_rng(N * D)
    q, k = inp.qk(rng, 5, N, D)
    active = inp.active(rng, 5, N)
    levels = [isa for isa in ISAS if isa != "generic"]
    if not levels:
        pytest.skip("this CPU has no SIMD level with the float32 pass (AVX2 or better)")
    for tau, k_in in ((0.0, 3), (0.3, 1), (-0.5, 0)):
        generic = core.route(q, k, active, tau, k_in, "generic")
        first = core.route(q, k, active, tau, k_in, levels[0])
        for isa in levels:
            got = core.route(q, k, active, tau, k_in, isa)
            for name, g, f, gen in zip(("scores", "adjacency", "inbox", "in_degree"), got, first, generic):
                assert np.array_equal(g, f), (
                    f"{isa} and {levels[0]} differ in {name} (tau={tau}, k_in={k_in})"
                )
                if name != "scores":
                    assert np.array_equal(g, gen), f"{isa}'s {name} differs from the generic level's"


@on_backends("route", reference=False)
@pytest.mark.parametrize(("B", "N", "D"), [(2, 3, 0), (2, 0, 3), (3, 0, 0), (0, 4, 5), (0, 0, 8)])
def test_route_empty_dimensions(B: int, N: int, D: int, backend: Backend) -> None:
    # degenerate but valid shapes: D = 0 (every row zero: no edges), N = 0 (no agents), B = 0 (no episodes)
    q = np.zeros((B, N, D), np.float32)
    for tau, k_in in ((-1.0, 0), (0.3, 3)):
        got = backend.route(q, q.copy(), tau=tau, k_in=k_in)
        assert_matches(
            "route", got, REFERENCE.route(q, q.copy(), tau=tau, k_in=k_in), f"tau={tau} k_in={k_in}"
        )
        assert not got.adjacency.any()


def _route_views(
    B: int, N: int, D: int
) -> dict[str, tuple[tuple[int, ...], View, View, tuple[int, ...], View]]:
    """Non-contiguous (B, N, D) views of q and k and (B, N) views of active, with unit stride along D (the
    compiled backends refuse anything else): name -> (q and k base shape, q view, k view, active base shape,
    active view)."""
    rows, agents = (B, N, D), (B, N)
    return {
        "every other agent": (
            (B, 2 * N, D),
            View((ALL, EVERY_OTHER)),
            View((ALL, ODD_ONES)),
            (B, 2 * N),
            View((ALL, EVERY_OTHER)),
        ),
        "transposed batch": (
            (N, B, D),
            View(perm=(1, 0, 2)),
            View(perm=(1, 0, 2)),
            (N, B),
            View(perm=(1, 0)),
        ),
        "every other episode": (
            (2 * B, N, D),
            View((EVERY_OTHER,)),
            View((ODD_ONES,)),
            (2 * B, N),
            View((ODD_ONES,)),
        ),
        "offset rows": (
            (B, N, D + 5),
            View((ALL, ALL, slice(None, D))),
            View((ALL, ALL, slice(5, None))),
            agents,
            View(),
        ),
        "reversed agents and episodes": (
            rows,
            View((ALL, REVERSED)),
            View((REVERSED,)),
            agents,
            View((REVERSED, REVERSED)),
        ),
        "broadcast episode": ((1, N, D), View(shape=rows), View(shape=rows), (1, N), View(shape=agents)),
    }


@on_backends("route")
@pytest.mark.parametrize(("B", "N", "D"), [(3, 5, 7), (4, 8, 16), (9, 12, 17), (2, 13, 384)])
@pytest.mark.parametrize("view", list(_route_views(1, 1, 1)))
def test_route_strided_inputs(B: int, N: int, D: int, view: str, backend: Backend) -> None:
    rng = np.random.default_rng(B * N * D)
    base_shape, q_view, k_view, active_shape, active_view = _route_views(B, N, D)[view]
    qb, kb = inp.qk(rng, *base_shape)
    ab = inp.active(rng, *active_shape)
    q, k, act = backend.view(qb, q_view), backend.view(kb, k_view), backend.view(ab, active_view)
    qc, kc, ac = (np.ascontiguousarray(v.of(b)) for v, b in ((q_view, qb), (k_view, kb), (active_view, ab)))
    assert qc.shape == (B, N, D) and ac.shape == (B, N)
    for active, active_c in ((None, None), (act, ac)):
        ctx = f"{view} B={B} N={N} D={D} active={active is not None}"
        got = backend.route(q, k, tau=0.0, k_in=3, active=active)
        assert_matches("route", got, REFERENCE.route(qc, kc, tau=0.0, k_in=3, active=active_c), ctx)
        if backend.in_place:
            contiguous = backend.route(qc, kc, tau=0.0, k_in=3, active=active_c)
            assert_matches("route", got, contiguous, f"contiguous {ctx}", exact=True)
    # one episode of the views: no batch axis
    one = backend.route(q[1], k[1], tau=0.3, k_in=2)
    assert one.scores.ndim == 2 and one.inbox.ndim == 2 and one.in_degree.ndim == 1
    want = REFERENCE.route(qc[1], kc[1], tau=0.3, k_in=2)
    assert_matches("route", one, want, f"{view}: episode 1 alone")


def _peak_bytes(fn: Any) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base


@needs_core
def test_route_cpu_reads_strided_inputs_in_place() -> None:
    # q and k are 3 MiB views each; the outputs are ~0.1 MiB. A copy of either input would show in the peak
    # of traced (numpy) allocations.
    rng = np.random.default_rng(3)
    B, N, D = 256, 8, 384
    qb, kb = inp.qk(rng, B, 2 * N, D, special=False)
    q, k = qb[:, ::2], kb[:, 1::2]
    active = inp.active(rng, B, 2 * N)[:, ::2]
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


@functools.lru_cache(maxsize=1)
def _route_large(B: int, N: int, D: int) -> list[tuple[str, np.ndarray, np.ndarray, dict, Any]]:
    rng = np.random.default_rng(2024 + N)
    q, k = inp.qk(rng, B, N, D)
    mask = inp.active(rng, B, N)
    cases = []
    for active, (tau, k_in) in itertools.product((None, mask), ((0.0, 3), (-0.5, 0), (0.3, 1))):
        kw = {"tau": tau, "k_in": k_in, "active": active}
        cases.append(
            (f"tau={tau} k_in={k_in} active={active is not None}", q, k, kw, REFERENCE.route(q, k, **kw))
        )
    return cases


@on_backends("route", reference=False)
@pytest.mark.parametrize(("B", "N", "D"), [(5000, 8, 64), (300, 70, 16)])
def test_route_large_batch(B: int, N: int, D: int, backend: Backend) -> None:
    # the OpenMP path across episodes, and a GPU grid of many blocks with N > 64
    for ctx, q, k, kw, want in _route_large(B, N, D):
        assert_matches("route", backend.route(q, k, **kw), want, f"B={B} N={N} D={D} {ctx}")


def _concurrently(op: str, call: Any, cases: list, wants: list) -> None:
    """``call(case)`` from four threads, every case three times: each result is its own case's. The compiled
    backends release the GIL, so concurrent calls on different inputs must not interfere."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        gots = list(pool.map(call, cases * 3))
    for i, got in enumerate(gots):
        assert_matches(op, got, wants[i % len(cases)], f"call {i}")


@on_backends("route", reference=False)
def test_route_concurrent_callers(backend: Backend) -> None:
    rng = np.random.default_rng(8)
    cases = [inp.qk(rng, 600, 8, 32) for _ in range(6)]
    wants = [REFERENCE.route(q, k, tau=0.1, k_in=3) for q, k in cases]
    _concurrently("route", lambda qk: backend.route(qk[0], qk[1], tau=0.1, k_in=3), cases, wants)


@on_backends("route", reference=False)
@settings(max_examples=150, **inp.DETERMINISTIC)
@given(case=inp.route_cases())
def test_route_random_inputs(backend: Backend, case: tuple) -> None:
    q, k, kw = case
    assert_matches("route", backend.route(q, k, **kw), REFERENCE.route(q, k, **kw))


# --------------------------------------------------------------------------------------------- route_indexed


def _gathered(backend: Backend, table: np.ndarray, q_rows: np.ndarray, k_rows: np.ndarray, **kw: Any) -> Any:
    """``backend.route`` on the rows route_indexed reads (padding: -1 rows are zero and inactive)."""
    padding = (q_rows >= 0) & (k_rows >= 0)
    active = kw.pop("active", None)
    active = padding if active is None else padding & active
    return backend.route(inp.gather(table, q_rows), inp.gather(table, k_rows), active=active, **kw)


@functools.lru_cache(maxsize=1)
def _route_indexed_grid(N: int, D: int) -> list[tuple[str, tuple, dict, Any]]:
    rng = np.random.default_rng(10 * N + D)
    cases = []
    for B in (1, 3, 64):
        M = int(rng.integers(1, 2 * N + 3))
        args = (inp.table(rng, M, D), inp.table_rows(rng, B, N, M), inp.table_rows(rng, B, N, M, np.int32))
        for tau, k_in in itertools.product(TAUS, K_INS):
            kw = {"tau": tau, "k_in": k_in}
            ctx = f"B={B} N={N} D={D} M={M} tau={tau} k_in={k_in}"
            cases.append((ctx, args, kw, REFERENCE.route_indexed(*args, **kw)))
    return cases


@on_backends("route_indexed", reference=False)
@pytest.mark.parametrize("N", [1, 2, 5, 9, 48])  # 48 agents: the CPU's float32 pass on the gathered rows
@pytest.mark.parametrize("D", [1, 8, 9, 384])
def test_route_indexed_grid(N: int, D: int, backend: Backend) -> None:
    # against the reference, and bit for bit against the same backend's route on the gathered rows
    for ctx, args, kw, want in _route_indexed_grid(N, D):
        got = backend.route_indexed(*args, **kw)
        assert_matches("route_indexed", got, want, ctx)
        assert_matches("route_indexed", got, _gathered(backend, *args, **kw), f"gathered {ctx}", exact=True)


@on_backends("route_indexed")
def test_route_indexed_single_episode(backend: Backend) -> None:
    rng = np.random.default_rng(20)
    table = inp.table(rng, 12, 16)
    q_rows = np.array([0, 3, -1, 5, 1, 7], np.int64)
    k_rows = np.array([2, 3, 4, -1, 0, 11], np.int32)
    got = backend.route_indexed(table, q_rows, k_rows, tau=0.0, k_in=2)
    assert got.scores.shape == (6, 6) and got.inbox.shape == (6, 2) and got.in_degree.shape == (6,)
    assert_matches(
        "route_indexed", got, _gathered(backend, table, q_rows, k_rows, tau=0.0, k_in=2), exact=True
    )
    assert_matches("route_indexed", got, REFERENCE.route_indexed(table, q_rows, k_rows, tau=0.0, k_in=2))
    assert not got.adjacency[2].any() and not got.adjacency[:, 2].any()  # padding: no edges either way
    assert not got.adjacency[3].any() and not got.adjacency[:, 3].any()


@on_backends("route_indexed")
def test_route_indexed_strided_inputs(backend: Backend) -> None:
    rng = np.random.default_rng(21)
    M, D, B, N = 20, 24, 5, 7
    big = inp.table(rng, 2 * M, D + 3)
    views = {
        "every other row": big[::2, :D],
        "offset columns": big[:M, 3:],
        "reversed rows": big[:M, :D][::-1],
    }
    q_rows = inp.table_rows(rng, N, B, M).T  # (B, N) view of (N, B) storage
    k_rows = inp.table_rows(rng, B, 2 * N, M, np.int32)[:, ::2]
    assert not q_rows.flags.c_contiguous and not k_rows.flags.c_contiguous
    for desc, table in views.items():
        contiguous = (np.ascontiguousarray(table), q_rows.copy(), k_rows.copy())
        got = backend.route_indexed(table, q_rows, k_rows, tau=0.1, k_in=3)
        assert_matches("route_indexed", got, REFERENCE.route_indexed(*contiguous, tau=0.1, k_in=3), desc)
        if backend.in_place:
            same = backend.route_indexed(*contiguous, tau=0.1, k_in=3)
            assert_matches("route_indexed", got, same, f"contiguous {desc}", exact=True)


@on_backends("route_indexed")
def test_route_indexed_active_mask(backend: Backend) -> None:
    # the backends also take an explicit active mask (toporoute.ops does not), ANDed with the -1 padding
    rng = np.random.default_rng(23)
    B, N, D, M = 6, 7, 10, 15
    table = inp.table(rng, M, D)
    q_rows, k_rows = inp.table_rows(rng, B, N, M), inp.table_rows(rng, B, N, M)
    active = rng.random((B, N)) < 0.7
    got = backend.route_indexed(table, q_rows, k_rows, tau=0.0, k_in=2, active=active)
    want = _gathered(backend, table, q_rows, k_rows, tau=0.0, k_in=2, active=active)
    assert_matches("route_indexed", got, want, exact=True)
    want = REFERENCE.route_indexed(table, q_rows, k_rows, tau=0.0, k_in=2, active=active)
    assert_matches("route_indexed", got, want)


@on_backends("route_indexed", reference=False)
def test_route_indexed_large_batch(backend: Backend) -> None:
    rng = np.random.default_rng(22)
    B, N, D, M = 5000, 8, 64, 300
    table = inp.table(rng, M, D)
    q_rows, k_rows = inp.table_rows(rng, B, N, M), inp.table_rows(rng, B, N, M)
    for tau, k_in in ((0.0, 3), (-0.5, 0)):
        got = backend.route_indexed(table, q_rows, k_rows, tau=tau, k_in=k_in)
        gathered = _gathered(backend, table, q_rows, k_rows, tau=tau, k_in=k_in)
        assert_matches("route_indexed", got, gathered, f"gathered tau={tau}", exact=True)
        want = REFERENCE.route_indexed(table, q_rows, k_rows, tau=tau, k_in=k_in)
        assert_matches("route_indexed", got, want, f"tau={tau}")


@on_backends("route_indexed", reference=False)
def test_route_indexed_concurrent_callers(backend: Backend) -> None:
    rng = np.random.default_rng(25)
    table = inp.table(rng, 200, 32)
    cases = [(inp.table_rows(rng, 600, 8, 200), inp.table_rows(rng, 600, 8, 200)) for _ in range(6)]
    wants = [REFERENCE.route_indexed(table, q, k, tau=0.1, k_in=3) for q, k in cases]
    _concurrently(
        "route_indexed", lambda qk: backend.route_indexed(table, *qk, tau=0.1, k_in=3), cases, wants
    )


@on_backends("route_indexed")
@pytest.mark.parametrize(
    ("B", "N", "M", "D"), [(0, 4, 5, 3), (2, 0, 5, 3), (2, 3, 0, 3), (2, 3, 4, 0), (0, 0, 0, 0)]
)
def test_route_indexed_empty_dimensions(B: int, N: int, M: int, D: int, backend: Backend) -> None:
    table = np.zeros((M, D), np.float32)
    rows = np.full((B, N), -1 if M == 0 else 0, np.int64)
    got = backend.route_indexed(table, rows, rows, tau=-1.0, k_in=0)
    assert_matches(
        "route_indexed",
        got,
        REFERENCE.route(inp.gather(table, rows), inp.gather(table, rows), tau=-1.0, k_in=0),
    )
    assert not got.adjacency.any()


@on_backends("route_indexed", reference=False)
def test_route_indexed_pool_form(backend: Backend) -> None:
    # pool= pools three length buckets into the table, then routes: the table against the reference's (within
    # mean_pool's tolerance), the routes bit for bit against route_indexed on the table the call produced
    rng = np.random.default_rng(31)
    table0, pool, q_rows, k_rows = inp.pool_route(rng, 60, 384, 16, 8, np.int32)
    t_ref, t_got = table0.copy(), table0.copy()
    want = REFERENCE.route_indexed(t_ref, q_rows, k_rows, tau=0.05, k_in=2, pool=pool)
    got = backend.route_indexed(t_got, q_rows, k_rows, tau=0.05, k_in=2, pool=pool)
    assert_matches("mean_pool", t_got, t_ref, "pooled table")
    assert_matches(
        "route_indexed", got, backend.route_indexed(t_got, q_rows, k_rows, tau=0.05, k_in=2), exact=True
    )
    assert_matches("route_indexed", got, want)


# ------------------------------------------------------------------------------------------------- mean_pool

MASK_DTYPES = (np.bool_, np.int32, np.int64)


@on_backends("mean_pool")
@pytest.mark.parametrize("L", [1, 2, 9, 33])
@pytest.mark.parametrize("D", [1, 3, 8, 17, 384])
def test_mean_pool_grid(L: int, D: int, backend: Backend) -> None:
    # against the float64 definition (and the reference); rows without counted tokens are zero, others unit
    rng = np.random.default_rng(100 * L + D)
    for n in (0, 1, 3, 17):
        hidden = inp.hidden_states(rng, n, L, D)
        for dtype in MASK_DTYPES:
            mask = inp.attention_mask(rng, n, L, dtype)
            ctx = f"n={n} L={L} D={D} mask={np.dtype(dtype).name}"
            got = backend.mean_pool(hidden, mask)
            assert got.flags.c_contiguous, ctx
            assert_matches("mean_pool", got, mean_pool_f64(hidden, mask).astype(np.float32), ctx)
            if backend is not REFERENCE:
                assert_matches("mean_pool", got, REFERENCE.mean_pool(hidden, mask), ctx)
            counted = (mask != 0).any(axis=1)
            assert not got[~counted].any(), f"{ctx}: rows without tokens must be zero"
            if D:
                np.testing.assert_allclose(np.linalg.norm(got[counted], axis=1), 1.0, atol=1e-5, err_msg=ctx)


def _strided_hidden(
    rng: np.random.Generator, n: int, L: int, D: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {
        "every other token": (
            inp.hidden_states(rng, n, 2 * L, D)[:, ::2],
            inp.attention_mask(rng, n, 2 * L, np.int64)[:, 1::2],
        ),
        "transposed batch": (
            inp.hidden_states(rng, L, n, D).transpose(1, 0, 2),
            inp.attention_mask(rng, L, n, np.bool_).T,
        ),
        "offset rows": (
            inp.hidden_states(rng, n, L, D + 5)[:, :, 5:],
            inp.attention_mask(rng, n, L, np.int32),
        ),
        "reversed": (
            inp.hidden_states(rng, n, L, D)[::-1, ::-1],
            inp.attention_mask(rng, n, L, np.int64)[::-1, ::-1],
        ),
        "every other row": (
            inp.hidden_states(rng, 2 * n, L, D)[::2],
            inp.attention_mask(rng, 2 * n, L, np.bool_)[1::2],
        ),
    }


@on_backends("mean_pool")
@pytest.mark.parametrize(("n", "L", "D"), [(3, 4, 5), (6, 9, 16), (4, 3, 384)])
def test_mean_pool_strided_inputs(n: int, L: int, D: int, backend: Backend) -> None:
    rng = np.random.default_rng(n * L * D)
    for desc, (hidden, mask) in _strided_hidden(rng, n, L, D).items():
        assert hidden.shape == (n, L, D) and mask.shape == (n, L), desc
        assert not (hidden.flags.c_contiguous and mask.flags.c_contiguous), desc
        hc, mc = np.ascontiguousarray(hidden), np.ascontiguousarray(mask)
        got = backend.mean_pool(hidden, mask)
        assert_matches("mean_pool", got, mean_pool_f64(hc, mc).astype(np.float32), desc)
        if backend.in_place:
            assert_matches("mean_pool", got, backend.mean_pool(hc, mc), f"contiguous {desc}", exact=True)


@on_backends("mean_pool", reference=False)
def test_mean_pool_large_batch(backend: Backend) -> None:
    # big enough for the compiled core's threaded path (and its staging buffer with out=)
    rng = np.random.default_rng(4)
    n, L, D = 3000, 24, 64
    hidden = inp.hidden_states(rng, n, L, D)
    mask = inp.attention_mask(rng, n, L, np.int64)
    got = backend.mean_pool(hidden, mask)
    assert_matches("mean_pool", got, REFERENCE.mean_pool(hidden, mask))
    rows = rng.permutation(2 * n)[:n]
    out, out_ref = np.zeros((2 * n, D), np.float32), np.zeros((2 * n, D), np.float32)
    backend.mean_pool(hidden, mask, out=out, rows=rows)
    REFERENCE.mean_pool(hidden, mask, out=out_ref, rows=rows)
    np.testing.assert_array_equal(out[rows], got)
    assert_matches("mean_pool", out, out_ref, "out=")


@on_backends("mean_pool")
@pytest.mark.parametrize(("n", "L", "D"), [(0, 3, 4), (3, 0, 4), (3, 4, 0), (0, 0, 0)])
def test_mean_pool_empty_dimensions(n: int, L: int, D: int, backend: Backend) -> None:
    hidden = np.zeros((n, L, D), np.float32)
    mask = np.ones((n, L), bool)
    got = backend.mean_pool(hidden, mask)
    assert_matches("mean_pool", got, np.zeros((n, D), np.float32), exact=True)
    out = np.full((n + 2, D), 5, np.float32)
    backend.mean_pool(hidden, mask, out=out, rows=np.arange(n)[::-1].copy())
    assert not out[:n].any() and (out[n:] == 5).all()


# -------------------------------------------------------------------------------------------------- toposort


@functools.lru_cache(maxsize=1)
def _toposort_grid(N: int) -> list[tuple[str, np.ndarray, dict, Any]]:
    rng = np.random.default_rng(500 + N)
    B = 48 if N <= 65 else 24
    adj = inp.graphs(rng, B, N)
    w, mask = inp.weights(rng, (B, N, N)), inp.active(rng, B, N)
    cases = []
    for weights, active in itertools.product((None, w), (None, mask)):
        kw = {"weights": weights, "active": active}
        ctx = f"N={N} weighted={weights is not None} active={active is not None}"
        cases.append((ctx, adj, kw, REFERENCE.toposort(adj, **kw)))
    return cases


@on_backends("toposort", reference=False)
@pytest.mark.parametrize("N", [1, 2, 3, 5, 7, 16, 31, 32, 33, 63, 64, 65, 100])
def test_toposort_grid(N: int, backend: Backend) -> None:
    # N around the warp size and the 64-node bitsets; DAGs, cycles, self-loops, densities 0.03 to 0.9
    for ctx, adj, kw, want in _toposort_grid(N):
        assert_matches("toposort", backend.toposort(adj, **kw), want, ctx)


def _graph_views(B: int, N: int) -> dict[str, tuple[tuple[int, ...], View, View, tuple[int, ...], View]]:
    """Non-contiguous (B, N, N) views of adj and weights and (B, N) views of active: name -> (adj and weights
    base shape, adj view, weights view, active base shape, active view)."""
    return {
        "strided": (
            (2 * B, 2 * N, 2 * N),
            View((EVERY_OTHER, EVERY_OTHER, ODD_ONES)),
            View((ODD_ONES, ODD_ONES, EVERY_OTHER)),
            (2 * B, 2 * N),
            View((EVERY_OTHER, ODD_ONES)),
        ),
        "transposed": ((B, N, N), View(perm=(0, 2, 1)), View(perm=(0, 2, 1)), (N, B), View(perm=(1, 0))),
        "reversed": (
            (B, 2 * N, 2 * N),
            View((ALL, slice(None, None, -2), slice(None, None, -2))),
            View((ALL, slice(None, None, -2), slice(None, None, -2))),
            (B, 2 * N),
            View((ALL, slice(None, None, -2))),
        ),
        "fortran order": ((N, N, B), View(perm=(2, 1, 0)), View(perm=(2, 1, 0)), (N, B), View(perm=(1, 0))),
    }


@on_backends("toposort", reference=False)
@pytest.mark.parametrize("N", [7, 16, 64, 65])
@pytest.mark.parametrize("view", list(_graph_views(1, 1)))
def test_toposort_strided_inputs(N: int, view: str, backend: Backend) -> None:
    rng = np.random.default_rng(77 + N)
    B = 8
    base_shape, adj_view, w_view, active_shape, active_view = _graph_views(B, N)[view]
    for density in (0.1, 0.5):
        bases = (
            rng.random(base_shape) < density,
            inp.weights(rng, base_shape),
            inp.active(rng, *active_shape),
        )
        views = (adj_view, w_view, active_view)
        adj, w, act = (backend.view(b, v) for b, v in zip(bases, views))
        adj_c, w_c, act_c = (np.ascontiguousarray(v.of(b)) for b, v in zip(bases, views))
        assert adj_c.shape == (B, N, N)
        for weighted, active in itertools.product((False, True), repeat=2):
            ctx = f"{view} N={N} density={density} weighted={weighted} active={active}"
            got = backend.toposort(adj, weights=w if weighted else None, active=act if active else None)
            want = REFERENCE.toposort(
                adj_c, weights=w_c if weighted else None, active=act_c if active else None
            )
            assert_matches("toposort", got, want, ctx)


@functools.lru_cache(maxsize=1)
def _toposort_large(B: int, N: int, weighted: bool) -> tuple[np.ndarray, dict, Any]:
    rng = np.random.default_rng(4096 + N)
    adj = inp.graphs(rng, B, N, 0.15)
    kw = {"weights": inp.weights(rng, (B, N, N)) if weighted else None, "active": inp.active(rng, B, N)}
    return adj, kw, REFERENCE.toposort(adj, **kw)


@on_backends("toposort", reference=False)
@pytest.mark.parametrize(("B", "N", "weighted"), [(5000, 16, False), (5000, 16, True), (600, 70, False)])
def test_toposort_large_batch(B: int, N: int, weighted: bool, backend: Backend) -> None:
    adj, kw, want = _toposort_large(B, N, weighted)
    assert_matches("toposort", backend.toposort(adj, **kw), want)


@on_backends("toposort", reference=False)
@pytest.mark.parametrize(("B", "N"), [(0, 5), (3, 0), (0, 0)])
def test_toposort_empty_dimensions(B: int, N: int, backend: Backend) -> None:
    adj = np.zeros((B, N, N), bool)
    assert_matches("toposort", backend.toposort(adj), REFERENCE.toposort(adj))


@on_backends("toposort", reference=False)
@settings(max_examples=120, **inp.DETERMINISTIC)
@given(case=inp.graph_cases())
def test_toposort_random_inputs(backend: Backend, case: tuple) -> None:
    adj, weights, active = case
    want = REFERENCE.toposort(adj, weights=weights, active=active)
    assert_matches("toposort", backend.toposort(adj, weights=weights, active=active), want)


# ----------------------------------------------------------------------------------------------- graph_stats


@on_backends("graph_stats", reference=False)
@pytest.mark.parametrize("N", [1, 2, 3, 8, 33, 64, 65])
def test_graph_stats_grid(N: int, backend: Backend) -> None:
    rng = np.random.default_rng(300 + N)
    for B in (1, 7, 2000):
        for density in (0.0, 0.1, 0.5, 1.0):
            adj = rng.random((B, N, N)) < density
            prev = rng.random((B, N, N)) < density
            mask = inp.active(rng, B, N)
            for active, p in itertools.product((None, mask), (None, prev)):
                ctx = f"B={B} N={N} density={density} active={active is not None} prev={p is not None}"
                want = REFERENCE.graph_stats(adj, active, prev=p)
                assert_matches("graph_stats", backend.graph_stats(adj, active, prev=p), want, ctx)
    # non-contiguous inputs
    big = rng.random((6, 2 * N, 2 * N)) < 0.4
    adj, prev = big[::2, ::2, ::2], big[1::2, 1::2, ::2].transpose(0, 2, 1)
    act = inp.active(rng, 6, 2 * N)[::2, ::2]
    want = REFERENCE.graph_stats(
        *(np.ascontiguousarray(x) for x in (adj, act)), prev=np.ascontiguousarray(prev)
    )
    assert_matches("graph_stats", backend.graph_stats(adj, act, prev=prev), want, "strided")


@on_backends("graph_stats", reference=False)
def test_graph_stats_single_graph(backend: Backend) -> None:
    rng = np.random.default_rng(12)
    adj, prev = rng.random((2, 9, 9)) < 0.3
    act = inp.active(rng, 1, 9)[0]
    got = backend.graph_stats(adj, act, prev=prev)
    assert got.edges.shape == () and got.in_degree.shape == (9,) and got.jaccard.shape == ()
    assert_matches("graph_stats", got, REFERENCE.graph_stats(adj, act, prev=prev))


# ----------------------------------------------------------------------------------------- conductor_density


@on_backends("conductor_density", reference=False)
def test_conductor_density_grid(backend: Backend) -> None:
    v = np.arange(1, 26)
    nodes, steps, edges, n_max = np.meshgrid(v, v, np.arange(0, 61, 3), np.array([4, 7, 10]), indexing="ij")
    ok = steps <= nodes
    args = (nodes[ok], edges[ok], steps[ok], n_max[ok])
    assert_matches("conductor_density", backend.conductor_density(*args), REFERENCE.conductor_density(*args))
    # broadcast and non-contiguous inputs, several dtypes
    nodes2 = np.arange(1, 13, dtype=np.int32).reshape(3, 1, 4)
    edges2 = np.arange(0, 24, dtype=np.uint16).reshape(4, 6)[:, ::2].T  # (3, 4), not contiguous
    got = backend.conductor_density(nodes2, edges2, 1, np.int8(7))
    assert got.reward.shape == (3, 3, 4)
    assert_matches("conductor_density", got, REFERENCE.conductor_density(nodes2, edges2, 1, np.int8(7)))


# ----------------------------------------------------------------------------------------------------- Q-Mix

QMIX_SHAPES = [(1, 1), (1, 3), (1, 4), (1, 16), (3, 1), (3, 3), (3, 4), (3, 16)]
QMIX_SHAPES += [(64, 1), (64, 3), (64, 4), (64, 16), (257, 1), (257, 3), (257, 4), (5, 64)]


@functools.lru_cache(maxsize=1)
def _qmix_grid(adj_mode: str, self_loops: bool) -> tuple[QMixParams, list[tuple[str, tuple, Any]]]:
    p = QMixParams.random(QMixConfig(adj_mode=adj_mode, self_loops=self_loops), seed=1)
    rng = np.random.default_rng(2)
    cases = []
    for (B, N), hidden, active in itertools.product(QMIX_SHAPES, (True, False), (True, False)):
        args = inp.qmix_obs(rng, p.config, B, N, hidden=hidden, active=active)
        ctx = f"{adj_mode} self_loops={self_loops} B={B} N={N} hidden={hidden} active={active}"
        cases.append((ctx, args, REFERENCE.qmix_forward(p, *args[:3], active=args[3])))
    return p, cases


@on_backends("qmix_forward", reference=False)
@pytest.mark.parametrize("adj_mode", ADJ_MODES)
@pytest.mark.parametrize("self_loops", [True, False])
def test_qmix_forward_grid(adj_mode: str, self_loops: bool, backend: Backend) -> None:
    # batches around the kernels' register blocks and threads, N up to the GPU's 64 agents
    p, cases = _qmix_grid(adj_mode, self_loops)
    for ctx, (obs, adj, hidden, active), want in cases:
        got = backend.qmix_forward(p, obs, adj, hidden, active=active)
        assert_matches("qmix_forward", got, want, ctx)
        if active is not None:
            assert not got.q[~active].any() and not got.hidden[~active].any(), ctx


# Shapes that are not multiples of the 16-float panels, and the spec's variants (b1_hidden: the mixer's first
# bias through a hidden layer).
ODD = QMixConfig(
    obs_dim=7, hidden=40, n_actions=5, head_hidden=20, n_agents=5, mix_hidden=24, hyper_hidden=40
)
QMIX_CONFIGS = {
    "default": QMixConfig(),
    "default-b1-hidden": QMixConfig(b1_hidden=True),
    "obs403-h64-L0": QMixConfig(obs_dim=403, hidden=64, gnn_layers=0),
    "obs403-h64-L1": QMixConfig(obs_dim=403, hidden=64, gnn_layers=1),
    "obs403-h64-L3": QMixConfig(obs_dim=403, hidden=64, gnn_layers=3),
    "odd": ODD,
    "odd-L0": dataclasses.replace(ODD, gnn_layers=0),
    "odd-b1-hidden": dataclasses.replace(ODD, b1_hidden=True),
}


@functools.lru_cache(maxsize=1)
def _qmix_config_cases(name: str) -> tuple[QMixParams, list, list]:
    p = QMixParams.random(QMIX_CONFIGS[name], seed=3)
    c = p.config
    rng = np.random.default_rng(4)
    forward = []
    for B, N in ((1, c.n_agents), (5, 4), (20, 5), (70, 3)):
        args = inp.qmix_obs(rng, c, B, N)
        forward.append((f"{name} B={B} N={N}", args, REFERENCE.qmix_forward(p, *args[:3], active=args[3])))
    mix = []
    for B in (1, 3, 17, 64, 257, 1000):
        args = inp.qmix_mix_inputs(rng, c, B)
        mix.append((f"mix {name} B={B}", args, REFERENCE.qmix_mix(p, *args)))
    return p, forward, mix


@on_backends("qmix_forward", reference=False)
@pytest.mark.parametrize("name", sorted(QMIX_CONFIGS))
def test_qmix_configs(name: str, backend: Backend) -> None:
    p, forward, mix = _qmix_config_cases(name)
    for ctx, (obs, adj, hidden, active), want in forward:
        assert_matches("qmix_forward", backend.qmix_forward(p, obs, adj, hidden, active=active), want, ctx)
    for ctx, args, want in mix:
        assert_matches("qmix_mix", backend.qmix_mix(p, *args), want, ctx)


def _qmix_views(B: int, N: int, c: QMixConfig) -> dict[str, list[tuple[tuple[int, ...], View]]]:
    """Non-contiguous views of obs, adj, hidden and active: name -> [(base shape, view)] in that order."""
    return {
        "every other agent": [
            ((B, 2 * N, c.obs_dim), View((ALL, EVERY_OTHER))),
            ((B, 2 * N, 2 * N), View((ALL, EVERY_OTHER, EVERY_OTHER))),
            ((B, 2 * N, c.hidden), View((ALL, ODD_ONES))),
            ((B, 2 * N), View((ALL, EVERY_OTHER))),
        ],
        "fortran order": [
            ((c.obs_dim, N, B), View(perm=(2, 1, 0))),
            ((N, N, B), View(perm=(2, 1, 0))),
            ((c.hidden, N, B), View(perm=(2, 1, 0))),
            ((N, B), View(perm=(1, 0))),
        ],
        "reversed agents": [
            ((B, N, c.obs_dim), View((ALL, REVERSED))),
            ((B, N, N), View((ALL, REVERSED, REVERSED))),
            ((B, 2 * N, c.hidden), View((ALL, slice(None, None, -2)))),
            ((B, N), View((ALL, REVERSED))),
        ],
    }


@on_backends("qmix_forward")
@pytest.mark.parametrize("view", list(_qmix_views(1, 1, QMixConfig())))
def test_qmix_strided_inputs(view: str, backend: Backend) -> None:
    p = QMixParams.random(QMixConfig(), seed=10)
    c = p.config
    rng = np.random.default_rng(11)
    B, N = 12, 3
    bases = [rng.standard_normal(shape, dtype=np.float32) for shape, _ in _qmix_views(B, N, c)[view]]
    bases[1], bases[3] = bases[1] < 0.5, bases[3] < 1.0  # adj about 70% edges, active about 84%
    views = [v for _, v in _qmix_views(B, N, c)[view]]
    obs, adj, hidden, active = (backend.view(b, v) for b, v in zip(bases, views))
    contiguous = [np.ascontiguousarray(v.of(b)) for b, v in zip(bases, views)]
    got = backend.qmix_forward(p, obs, adj, hidden, active=active)
    want = REFERENCE.qmix_forward(p, *contiguous[:3], active=contiguous[3])
    assert_matches("qmix_forward", got, want, view)
    if backend.in_place:
        same = backend.qmix_forward(p, *contiguous[:3], active=contiguous[3])
        assert_matches("qmix_forward", got, same, f"contiguous {view}", exact=True)
    # the mixer: q_taken in Fortran order, every other state
    q_base = rng.standard_normal((c.n_agents, 9), dtype=np.float32)
    s_base = rng.standard_normal((18, c.state_dim), dtype=np.float32)
    q_view, s_view = View(perm=(1, 0)), View((EVERY_OTHER,))
    got = backend.qmix_mix(p, backend.view(q_base, q_view), backend.view(s_base, s_view))
    contiguous = (np.ascontiguousarray(q_view.of(q_base)), np.ascontiguousarray(s_view.of(s_base)))
    assert_matches("qmix_mix", got, REFERENCE.qmix_mix(p, *contiguous), "mixer")
    if backend.in_place:
        assert_matches("qmix_mix", got, backend.qmix_mix(p, *contiguous), "contiguous mixer", exact=True)


@on_backends("qmix_forward")
def test_qmix_single_sample(backend: Backend) -> None:
    # a single episode without the batch axis: the batch of one, bit for bit
    p = QMixParams.random(QMixConfig(), seed=12)
    rng = np.random.default_rng(13)
    obs, adj, hidden, active = inp.qmix_obs(rng, p.config, 1, 3)
    batched = backend.qmix_forward(p, obs, adj, hidden, active=active)
    single = backend.qmix_forward(p, obs[0], adj[0], hidden[0], active=active[0])
    assert isinstance(single, ops.QMixStep)
    assert single.q.shape == (3, 6) and single.hidden.shape == (3, 128)
    assert_matches("qmix_forward", single, ops.QMixStep(batched.q[0], batched.hidden[0]), exact=True)
    q, h = backend.qmix_forward(p, obs[0], adj[0])  # unpacks; round 0
    want = REFERENCE.qmix_forward(p, obs, adj)
    assert_matches("qmix_forward", ops.QMixStep(q[None], h[None]), want, "single, round 0")
    q_taken, state = inp.qmix_mix_inputs(rng, p.config, 1)
    one = backend.qmix_mix(p, q_taken[0], state[0])
    assert one.shape == () and one.dtype == np.float32
    assert_matches("qmix_mix", one[None], REFERENCE.qmix_mix(p, q_taken, state))


@on_backends("qmix_forward")
def test_qmix_empty_batch(backend: Backend) -> None:
    p = QMixParams.random(QMixConfig(), seed=14)
    q, h = backend.qmix_forward(p, np.zeros((0, 3, 51), np.float32), np.zeros((0, 3, 3), bool))
    assert q.shape == (0, 3, 6) and h.shape == (0, 3, 128)
    assert backend.qmix_mix(p, np.zeros((0, 3), np.float32), np.zeros((0, 156), np.float32)).shape == (0,)


@functools.lru_cache(maxsize=1)
def _torch_model_cases(adj_mode: str, self_loops: bool, b1_hidden: bool) -> tuple[QMixParams, list]:
    """The PyTorch training model's outputs (the second reference of the Q-Mix networks)."""
    torch = pytest.importorskip("torch", reason="the PyTorch training model is the second reference of Q-Mix")
    from toporoute.methods.qmix.model import QMixNets

    torch.manual_seed(0)
    cfg = QMixConfig(adj_mode=adj_mode, self_loops=self_loops, b1_hidden=b1_hidden, n_agents=4)
    nets = QMixNets(cfg).eval()
    rng = np.random.default_rng(7)
    cases = []
    for B, N, hidden in ((1, 4, False), (8, 4, True), (64, 3, True), (257, 4, True)):
        obs, adj, hid, act = inp.qmix_obs(rng, cfg, B, N, hidden=hidden)
        q_taken, state = inp.qmix_mix_inputs(rng, cfg, B)
        with torch.inference_mode():
            tq, th = nets.agent(
                *(None if x is None else torch.from_numpy(x) for x in (obs, adj, hid)), torch.from_numpy(act)
            )
            tm = nets.mixer(torch.from_numpy(q_taken), torch.from_numpy(state))
        want = (ops.QMixStep(tq.numpy(), th.numpy()), tm.numpy())
        cases.append(
            (f"torch {adj_mode} self_loops={self_loops} B={B}", (obs, adj, hid, act), (q_taken, state), want)
        )
    return nets.to_params(), cases


@on_backends("qmix_forward")
@pytest.mark.parametrize("adj_mode", ADJ_MODES)
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("b1_hidden", [False, True])
def test_qmix_matches_torch_model(adj_mode: str, self_loops: bool, b1_hidden: bool, backend: Backend) -> None:
    p, cases = _torch_model_cases(adj_mode, self_loops, b1_hidden)
    for ctx, (obs, adj, hidden, active), mix_args, (want, want_mix) in cases:
        assert_matches("qmix_forward", backend.qmix_forward(p, obs, adj, hidden, active=active), want, ctx)
        assert_matches(
            "qmix_mix", backend.qmix_mix(p, *mix_args), want_mix, f"mixer b1_hidden={b1_hidden} {ctx}"
        )


# ------------------------------------------------------------------------------------------- conductor_check


def _core_codes(texts: list[str], contexts: list[Context], options: CheckOptions) -> np.ndarray:
    """The compiled core's own error codes: cpu.DEFERRED where it hands a plan to the reference (which would
    make the parity below hold trivially)."""
    return cpu.conductor_raw(texts, contexts, options)["error"]


def _same_as_reference(backend: Backend, texts: list[str], context: Any = None, options: Any = None) -> Any:
    want = REFERENCE.conductor_check(texts, context, options)
    assert_matches("conductor_check", backend.conductor_check(texts, context, options), want)
    return want


@on_backends("conductor_check", reference=False)
@pytest.mark.parametrize(
    ("text", "context", "options", "expected", "definitive"),
    [c[1:] for c in plans.CASES],
    ids=[c[0] for c in plans.CASES],
)
def test_conductor_case(
    text: str,
    context: Context | None,
    options: CheckOptions | None,
    expected: int,
    definitive: bool,
    backend: Backend,
) -> None:
    want = _same_as_reference(backend, [text], context, options)
    assert int(want.error[0]) == expected, want.message[0]
    code = int(_core_codes([text], plans.contexts_of(context, 1), options or CheckOptions())[0])
    if definitive:
        assert code == expected, f"the core deferred or disagreed: {code}"
    else:
        assert code in (expected, cpu.DEFERRED)


@on_backends("conductor_check", reference=False)
def test_conductor_empty_batch_and_shared_contexts(backend: Backend) -> None:
    got = backend.conductor_check([])
    assert len(got) == 0 and got.node_off.tolist() == [0]
    texts = [
        plans.fenced(plans.SIMPLE),
        plans.fenced(plans.plan_text((3, [("<tester>", ["<coder>"])]))),
        "no plan",
        plans.fenced(plans.SIMPLE),
    ]
    c1 = Context()
    _same_as_reference(backend, texts, [c1, plans.CTX2, plans.CTX2, c1])
    _same_as_reference(backend, texts * 20, [c1, plans.CTX2, plans.CTX_PLANNER, plans.CTX2] * 20)  # OpenMP


_PLANS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@on_backends("conductor_check", reference=False)
@_PLANS
@given(batch=plans.batches(), options=plans.OPTIONS)
def test_conductor_random_plans(
    backend: Backend, batch: tuple[list[str], list[Context]], options: CheckOptions
) -> None:
    texts, contexts = batch
    want = _same_as_reference(backend, texts, contexts, options)
    codes = _core_codes(texts, contexts, options)
    for b in range(len(texts)):
        assert codes[b] == want.error[b], f"the core deferred a canonical layout:\n{texts[b]}"


@on_backends("conductor_check", reference=False)
@_PLANS
@given(batch=plans.batches())
def test_conductor_random_plans_default_options(
    backend: Backend, batch: tuple[list[str], list[Context]]
) -> None:
    texts, contexts = batch
    want = _same_as_reference(backend, texts, contexts)
    assert (_core_codes(texts, contexts, CheckOptions()) == want.error).all()


@on_backends("conductor_check", reference=False)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(plans.mutated(), min_size=1, max_size=4))
def test_conductor_mutated_plans(backend: Backend, items: list[tuple[str, Context]]) -> None:
    _same_as_reference(backend, [t for t, _ in items], [c for _, c in items])


@on_backends("conductor_check", reference=False)
@_PLANS
@given(
    pieces=st.lists(
        st.sampled_from(
            plans.MUTATION_CHARS + ["step", "agents", "agent", "ref", "<coder>", "\u2003", "\ud800"]
        ),
        max_size=40,
    )
)
def test_conductor_random_text(backend: Backend, pieces: list[str]) -> None:
    text = "".join(pieces)
    _same_as_reference(backend, [text, "```yaml\n" + text, "- step:" + text])


@on_backends("conductor_check", reference=False)
@pytest.mark.parametrize(
    ("text", "options", "expected"), [h[1:] for h in plans.HOSTILE], ids=[h[0] for h in plans.HOSTILE]
)
def test_conductor_hostile(text: str, options: CheckOptions | None, expected: int, backend: Backend) -> None:
    want = _same_as_reference(backend, [text], None, options)
    assert int(want.error[0]) == expected, want.message[0]
