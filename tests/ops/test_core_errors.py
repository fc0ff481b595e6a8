"""Failures inside the compiled core surface as toporoute.errors classes and leave the process usable.

Memory a call cannot get (per-thread scratch, a staging buffer, the output arrays) raises OutOfMemoryError, which
is a ToporouteError and a MemoryError and names the op and the bytes; the next call works. (Before, a
std::bad_alloc thrown inside an OpenMP region called std::terminate and aborted the interpreter.) Other C++
failures become CoreError or DeviceError, never a bare RuntimeError.

Allocation failures are provoked by capping the address space (RLIMIT_AS) just above what the process uses,
with room for a call's outputs but not for its scratch: inputs are broadcast views (a few bytes of real memory
for a huge shape) or arrays allocated before the cap.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from toporoute import backends, errors, ops
from toporoute.types.qmix_params import QMixConfig, QMixParams

resource = pytest.importorskip("resource", reason="RLIMIT_AS needs a POSIX system")

pytestmark = [
    pytest.mark.skipif(not backends.available()["cpu"][0], reason="the compiled core is not built"),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="the address-space cap reads /proc/self/status (Linux)"
    ),
]

MB = 1 << 20
SLACK = 160 * MB  # address space left over the outputs: far below every scenario's scratch


def _vm_bytes() -> int:
    """This process's address-space size (what RLIMIT_AS limits)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


@contextlib.contextmanager
def address_space_headroom(headroom: int) -> Iterator[None]:
    """Caps the address space at its current size plus ``headroom`` bytes; the old limit is restored on exit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _vm_bytes() + headroom
    if hard != resource.RLIM_INFINITY and limit > hard:
        pytest.skip(f"RLIMIT_AS hard limit {hard} is below what the test needs")
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _broadcast(shape: tuple[int, ...], dtype: type, fill: float = 0) -> np.ndarray:
    """A read-only array of ``shape`` backed by one element per last-axis entry (zero strides elsewhere)."""
    row = np.full((1,) * (len(shape) - 1) + (shape[-1],), fill, dtype)
    return np.broadcast_to(row, shape)


@dataclass(frozen=True)
class Scenario:
    """A valid call whose outputs fit in ``outputs`` bytes but whose core memory does not fit in SLACK more."""

    name: str
    op: str
    outputs: int
    make: Callable[[], Callable[[], object]]  # builds the inputs (before the cap); returns the call


def _route() -> Callable[[], object]:
    # B = 1, N = 8192: outputs 5 N^2 bytes, per-thread scratch 8 N^2 bytes; N^2 D of work takes the parallel path
    q = np.random.default_rng(0).standard_normal((1, 8192, 1), dtype=np.float32)
    return lambda: ops.route(q, q, backend="cpu")


def _route_outputs() -> Callable[[], object]:
    q = _broadcast((1 << 28, 8, 4), np.float32, 1.0)  # outputs of 64 GiB
    return lambda: ops.route(q, q, backend="cpu")


def _route_indexed() -> Callable[[], object]:
    # one 16 MiB table row gathered for 64 agents: 2 GiB of per-thread scratch, tiny outputs
    table = np.ones((1, 1 << 22), np.float32)
    rows = np.zeros((1, 64), np.int32)
    return lambda: ops.route_indexed(table, rows, rows, backend="cpu")


def _pool_inputs(n: int = 256, d: int = 1 << 20) -> tuple[np.ndarray, ...]:
    hidden = _broadcast((n, 1, d), np.float32, 1.0)
    mask = np.ones((n, 1), bool)
    rows = np.arange(n, dtype=np.int64)
    table = np.zeros((n, d), np.float32)  # 1 GiB of address space, never touched
    return hidden, mask, rows, table


def _pool_route() -> Callable[[], object]:
    hidden, mask, rows, table = _pool_inputs()  # a 1 GiB staging buffer for the pooled rows
    q_rows = np.zeros((1, 4), np.int32)
    return lambda: ops.route_indexed(table, q_rows, q_rows, pool=[(hidden, mask, rows)], backend="cpu")


def _mean_pool() -> Callable[[], object]:
    hidden, mask, rows, table = _pool_inputs()
    return lambda: ops.mean_pool(hidden, mask, out=table, rows=rows, backend="cpu")


def _toposort() -> Callable[[], object]:
    adj = _broadcast((1, 16384, 16384), bool)  # N > 64: the general path, N^2 bytes of scratch per thread
    return lambda: ops.toposort(adj, backend="cpu")


def _qmix_forward() -> Callable[[], object]:
    params = QMixParams.random(QMixConfig(), seed=0)
    n = 16384  # neighbour lists of N^2 int32 (1 GiB) in the tile scratch; outputs N (n_actions + H) floats
    obs = _broadcast((1, n, params.config.obs_dim), np.float32, 0.5)
    adj = _broadcast((1, n, n), bool)
    ops.qmix_forward(params, obs[:, :4], adj[:, :4, :4], backend="cpu")  # pack the weights before the cap
    return lambda: ops.qmix_forward(params, obs, adj, backend="cpu")


def _graph_stats() -> Callable[[], object]:
    adj = _broadcast((1 << 31, 1, 1), bool)  # outputs of 64 GiB
    return lambda: ops.graph_stats(adj, backend="cpu")


N2 = 8192 * 8192
SCENARIOS = [
    Scenario("route", "route", 5 * N2 + 16 * 8192, _route),
    Scenario("route_outputs", "route", 0, _route_outputs),
    Scenario("route_indexed", "route_indexed", 0, _route_indexed),
    Scenario("pool_route", "mean_pool", 0, _pool_route),
    Scenario("mean_pool", "mean_pool", 0, _mean_pool),
    Scenario("toposort", "toposort", 16384 * 16384 + 9 * 16384, _toposort),
    Scenario("qmix_forward", "qmix_forward", 16384 * 134 * 4, _qmix_forward),
    Scenario("graph_stats", "graph_stats", 0, _graph_stats),
]


def _warm_up() -> None:
    """Starts the OpenMP thread team (thread stacks) before any cap: a parallel route of 64 episodes."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((64, 8, 384), dtype=np.float32)
    ops.route(q, q, backend="cpu")


def _normal_calls_work() -> None:
    """Small calls of every op still work and match the reference after a failed one."""
    rng = np.random.default_rng(2)
    q = rng.standard_normal((3, 5, 16), dtype=np.float32)
    k = rng.standard_normal((3, 5, 16), dtype=np.float32)
    got, want = ops.route(q, k, tau=0.0, backend="cpu"), ops.route(q, k, tau=0.0, backend="reference")
    np.testing.assert_array_equal(got.inbox, want.inbox)
    adj = rng.random((3, 70, 70)) < 0.1
    np.testing.assert_array_equal(
        ops.toposort(adj, backend="cpu").order, ops.toposort(adj, backend="reference").order
    )
    np.testing.assert_array_equal(
        ops.graph_stats(adj, backend="cpu").edges, ops.graph_stats(adj, backend="reference").edges
    )
    table = rng.standard_normal((6, 16), dtype=np.float32)
    rows = np.array([[0, 1, 2, -1]], np.int64)
    got = ops.route_indexed(table, rows, rows, tau=0.0, backend="cpu")
    want = ops.route_indexed(table, rows, rows, tau=0.0, backend="reference")
    np.testing.assert_array_equal(got.inbox, want.inbox)
    params = QMixParams.random(QMixConfig(), seed=0)
    obs = rng.standard_normal((2, 3, params.config.obs_dim), dtype=np.float32)
    qadj = rng.random((2, 3, 3)) < 0.5
    np.testing.assert_allclose(
        ops.qmix_forward(params, obs, qadj, backend="cpu").q,
        ops.qmix_forward(params, obs, qadj, backend="reference").q,
        rtol=1e-4,
        atol=1e-5,
    )


def _expect_out_of_memory(scenario: Scenario) -> errors.OutOfMemoryError:
    call = scenario.make()
    try:
        with address_space_headroom(scenario.outputs + SLACK):
            call()
    except errors.OutOfMemoryError as exc:
        return exc
    raise AssertionError(f"{scenario.name}: no OutOfMemoryError")


def _check_message(scenario: Scenario, exc: errors.OutOfMemoryError) -> None:
    assert isinstance(exc, MemoryError) and isinstance(exc, errors.ToporouteError)
    msg = str(exc)
    assert msg.startswith(f"{scenario.op}: could not allocate "), msg
    assert " bytes " in msg, msg


@pytest.fixture(scope="module", autouse=True)
def _threads_started() -> None:
    _warm_up()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_out_of_memory_is_an_error_and_the_process_lives(scenario: Scenario) -> None:
    exc = _expect_out_of_memory(scenario)
    _check_message(scenario, exc)
    _normal_calls_work()


def run_scenarios() -> None:
    """Every scenario in this process, as the subprocess test runs it (an assertion fails the process)."""
    _warm_up()
    for scenario in SCENARIOS:
        _check_message(scenario, _expect_out_of_memory(scenario))
        _normal_calls_work()
        print("ok", scenario.name, flush=True)


def test_out_of_memory_in_a_fresh_process_exits_cleanly() -> None:
    """The same failures in a fresh interpreter (a fresh OpenMP team): the process ends with status 0 (it used
    to die of SIGABRT from std::terminate)."""
    here = Path(__file__).resolve().parent  # this module's own folder (tests/ops)
    script = f"import sys; sys.path.insert(0, {str(here)!r}); import test_core_errors as t; t.run_scenarios()"
    proc = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.split() == [w for s in SCENARIOS for w in ("ok", s.name)]


# ------------------------------------------------------------------------------ the error-conversion point


@pytest.mark.parametrize(
    ("kind", "cls", "builtin", "fragment"),
    [
        ("status_runtime", errors.CoreError, RuntimeError, "status_runtime"),
        ("status_out_of_memory", errors.OutOfMemoryError, MemoryError, "status_out_of_memory"),
        ("status_device", errors.DeviceError, RuntimeError, "status_device"),
        ("bad_alloc", errors.OutOfMemoryError, MemoryError, "could not allocate memory"),
        ("length_error", errors.OutOfMemoryError, MemoryError, "could not allocate memory"),
        ("runtime_error", errors.CoreError, RuntimeError, "a failure inside the core"),
        ("cast_error", errors.CoreError, RuntimeError, "Unable to cast"),
        ("unknown", errors.CoreError, RuntimeError, "unknown C++ exception"),
        (
            "core_bad_alloc",
            errors.OutOfMemoryError,
            MemoryError,
            "_raise_for_test: could not allocate memory",
        ),
        ("core_runtime_error", errors.CoreError, RuntimeError, "_raise_for_test failed in the core"),
    ],
)
def test_every_core_failure_is_a_toporoute_error(kind: str, cls: type, builtin: type, fragment: str) -> None:
    from toporoute import _core

    with pytest.raises(cls) as e:
        _core._raise_for_test(kind)
    assert type(e.value) is cls
    assert isinstance(e.value, builtin) and isinstance(e.value, errors.ToporouteError)
    assert fragment in str(e.value)


def test_a_cast_failure_in_a_binding_is_a_core_error_not_a_bare_runtime_error() -> None:
    """A reachable C++ exception: the Q-Mix binding reads its config with pybind11 casts."""
    from toporoute import _core

    good = QMixConfig()
    bad = types.SimpleNamespace(**{**vars(good), "obs_dim": "fifty-one"})
    with pytest.raises(errors.CoreError, match="Unable to cast"):
        _core.QMixWeights(bad, [])
    params = QMixParams.random(good, seed=0)
    assert _core.QMixWeights(good, params.agent_arrays()).has_mixer is False


def test_error_classes_are_exported_with_their_builtin_bases() -> None:
    for cls, base in [
        (errors.OutOfMemoryError, MemoryError),
        (errors.DeviceError, RuntimeError),
        (errors.CoreError, RuntimeError),
    ]:
        assert cls.__name__ in errors.__all__
        assert issubclass(cls, errors.ToporouteError) and issubclass(cls, base)
    assert not issubclass(errors.DeviceError, MemoryError)
    exc = errors.OutOfMemoryError("route: could not allocate 8 bytes for x")
    assert exc.arg is None and str(exc) == "route: could not allocate 8 bytes for x"
