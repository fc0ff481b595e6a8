"""Bad input raises a ValueError subclass from toporoute.errors that names the argument (``.arg`` and the
message) and states the actual value, dtype or shape, on every backend; a failed call leaves nothing broken."""

from __future__ import annotations

import numpy as np
import pytest
from _backends import on_backend_names
from _checks import check

from toporoute import errors, ops
from toporoute.backends import cpu
from toporoute.backends import reference as ref

RNG = np.random.default_rng(42)
Q = RNG.standard_normal((2, 4, 5)).astype(np.float32)
K = RNG.standard_normal((2, 4, 5)).astype(np.float32)
ADJ = RNG.random((2, 4, 4)) < 0.5
W = RNG.random((2, 4, 4)).astype(np.float32)


def good_route(backend: str) -> None:
    """A valid call after a failed one works and matches the reference."""
    got = ops.route(Q, K, tau=0.0, k_in=2, backend=backend)
    want = ref.route(Q, K, tau=0.0, k_in=2, active=None)
    np.testing.assert_array_equal(got.adjacency, want.adjacency)
    np.testing.assert_array_equal(got.inbox, want.inbox)


# ---------------------------------------------------------------------------------------------------- route


@on_backend_names("route")
def test_route_wrong_dtypes(backend: str) -> None:
    with pytest.raises(errors.DTypeError) as e:
        ops.route(Q.astype(np.float64), K, backend=backend)
    check(e, errors.DTypeError, "q", "float64", "float32")
    with pytest.raises(errors.DTypeError) as e:
        ops.route(Q, K.astype(np.float16), backend=backend)
    check(e, errors.DTypeError, "k", "float16")
    with pytest.raises(errors.DTypeError) as e:
        ops.route(Q, K, active=np.ones((2, 4), np.float32), backend=backend)
    check(e, errors.DTypeError, "active", "float32", "bool")
    with pytest.raises(errors.DTypeError) as e:
        ops.route(Q, K, active=np.ones((2, 4), np.int8), backend=backend)
    check(e, errors.DTypeError, "active", "int8")
    good_route(backend)


@on_backend_names("route")
def test_route_list_input_is_dtype_error(backend: str) -> None:
    with pytest.raises(errors.DTypeError) as e:
        ops.route(Q.tolist(), K, backend=backend)
    check(e, errors.DTypeError, "q", "list")
    with pytest.raises(errors.DTypeError) as e:  # both lists: past the device arrays' fast path too
        ops.route(Q.tolist(), K.tolist(), tau=0.3, k_in=2, backend=backend)
    check(e, errors.DTypeError, "q", "list")
    with pytest.raises(errors.DTypeError) as e:
        ops.route(Q, K, active=[[True] * 4] * 2, backend=backend)
    check(e, errors.DTypeError, "active", "list")
    good_route(backend)


@on_backend_names("route")
def test_route_wrong_ndim(backend: str) -> None:
    with pytest.raises(errors.ShapeError) as e:
        ops.route(Q[0, 0], K[0, 0], backend=backend)
    check(e, errors.ShapeError, "q", "(5,)")
    with pytest.raises(errors.ShapeError) as e:
        ops.route(Q[None], K[None], backend=backend)
    check(e, errors.ShapeError, "q", "(1, 2, 4, 5)")
    with pytest.raises(errors.ShapeError) as e:
        ops.route(Q, K, active=np.ones(4, bool), backend=backend)
    check(e, errors.ShapeError, "active", "(4,)")
    good_route(backend)


@on_backend_names("route")
def test_route_shape_mismatch(backend: str) -> None:
    with pytest.raises(errors.ShapeError) as e:
        ops.route(Q, K[:, :, :4], backend=backend)
    check(e, errors.ShapeError, "k", "(2, 4, 4)", "(2, 4, 5)")
    with pytest.raises(errors.ShapeError) as e:
        ops.route(Q, K[:, :3], backend=backend)
    check(e, errors.ShapeError, "k", "(2, 3, 5)")
    with pytest.raises(errors.ShapeError) as e:
        ops.route(Q, K[0], backend=backend)
    check(e, errors.ShapeError, "k", "(4, 5)")
    with pytest.raises(errors.ShapeError) as e:
        ops.route(Q, K, active=np.ones((2, 5), bool), backend=backend)
    check(e, errors.ShapeError, "active", "(2, 5)", "(2, 4)")
    with pytest.raises(errors.ShapeError) as e:
        ops.route(Q[0], K[0], active=np.ones(3, bool), backend=backend)
    check(e, errors.ShapeError, "active", "(3,)")
    good_route(backend)


@on_backend_names("route")
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_route_non_finite(backend: str, bad: float) -> None:
    q = Q.copy()
    q[1, 2, 3] = bad
    with pytest.raises(errors.NonFiniteError) as e:
        ops.route(q, K, backend=backend)
    check(e, errors.NonFiniteError, "q", "episode 1", "agent 2")
    k = K.copy()
    k[0, 3, 0] = bad
    with pytest.raises(errors.NonFiniteError) as e:
        ops.route(Q, k, backend=backend)
    check(e, errors.NonFiniteError, "k", "episode 0", "agent 3")
    # single-graph input
    with pytest.raises(errors.NonFiniteError) as e:
        ops.route(Q[0], k[0], backend=backend)
    check(e, errors.NonFiniteError, "k")
    good_route(backend)


@on_backend_names("route")
def test_route_non_finite_reports_first_episode_q_before_k(backend: str) -> None:
    q, k = Q.copy(), K.copy()
    q[1, 0, 0] = np.nan
    k[0, 2, 1] = np.nan
    with pytest.raises(errors.NonFiniteError) as e:
        ops.route(q, k, backend=backend)
    check(e, errors.NonFiniteError, "k", "episode 0")  # episode 0 comes first
    q[0, 3, 4] = np.inf
    with pytest.raises(errors.NonFiniteError) as e:
        ops.route(q, k, backend=backend)
    check(e, errors.NonFiniteError, "q", "episode 0", "agent 3")  # same episode: q named before k


@on_backend_names("route")
def test_route_non_finite_in_inactive_row_is_rejected(backend: str) -> None:
    q = Q.copy()
    q[0, 1, 2] = np.nan
    active = np.ones((2, 4), bool)
    active[0, 1] = False
    with pytest.raises(errors.NonFiniteError) as e:
        ops.route(q, K, active=active, backend=backend)
    check(e, errors.NonFiniteError, "q")


@on_backend_names("route")
def test_route_non_finite_in_large_batch(backend: str) -> None:
    # big enough for the compiled core's threaded path; the lowest bad episode is reported
    rng = np.random.default_rng(0)
    q = rng.standard_normal((3000, 8, 32)).astype(np.float32)
    k = rng.standard_normal((3000, 8, 32)).astype(np.float32)
    q[2999, 7, 31] = np.nan
    k[1700, 0, 0] = np.inf
    with pytest.raises(errors.NonFiniteError) as e:
        ops.route(q, k, backend=backend)
    check(e, errors.NonFiniteError, "k", "episode 1700", "agent 0")
    good_route(backend)


@on_backend_names("route")
@pytest.mark.parametrize("tau", [1.5, -1.0001, 2, float("inf"), -float("inf"), np.float64(3.0)])
def test_route_tau_out_of_range(backend: str, tau: float) -> None:
    with pytest.raises(errors.OutOfRangeError) as e:
        ops.route(Q, K, tau=tau, backend=backend)
    check(
        e, errors.OutOfRangeError, "tau", repr(tau) if not isinstance(tau, np.floating) else "3.0", "[-1, 1]"
    )


@on_backend_names("route")
def test_route_tau_nan(backend: str) -> None:
    with pytest.raises(errors.InvalidArgumentError) as e:
        ops.route(Q, K, tau=float("nan"), backend=backend)
    check(e, errors.InvalidArgumentError, "tau", "nan")


@on_backend_names("route")
@pytest.mark.parametrize("tau", ["0.3", None, True, [0.3], 1j])
def test_route_tau_wrong_type(backend: str, tau: object) -> None:
    with pytest.raises(errors.InvalidArgumentError) as e:
        ops.route(Q, K, tau=tau, backend=backend)
    check(e, errors.InvalidArgumentError, "tau", repr(tau))


@on_backend_names("route")
def test_route_k_in_invalid(backend: str) -> None:
    with pytest.raises(errors.OutOfRangeError) as e:
        ops.route(Q, K, k_in=-1, backend=backend)
    check(e, errors.OutOfRangeError, "k_in", "-1")
    with pytest.raises(errors.OutOfRangeError) as e:
        ops.route(Q, K, k_in=np.int64(-3), backend=backend)
    check(e, errors.OutOfRangeError, "k_in", "-3")
    for bad in (2.0, 2.5, True, False, "3", None):
        with pytest.raises(errors.InvalidArgumentError) as e:
            ops.route(Q, K, k_in=bad, backend=backend)
        check(e, errors.InvalidArgumentError, "k_in", repr(bad))
    good_route(backend)


@on_backend_names("route")
def test_valid_numpy_scalars_are_accepted(backend: str) -> None:
    # the good twins of the bad scalars above: numpy scalar types are fine
    got = ops.route(Q, K, tau=np.float32(0.0), k_in=np.int64(2), backend=backend)
    want = ref.route(Q, K, tau=0.0, k_in=2, active=None)
    np.testing.assert_array_equal(got.inbox, want.inbox)


def test_route_unknown_backend() -> None:
    for bad in ("gpu2", "CPU", "", "numpy"):
        with pytest.raises(errors.InvalidArgumentError) as e:
            ops.route(Q, K, backend=bad)
        check(e, errors.InvalidArgumentError, "backend", repr(bad), "reference")
    with pytest.raises(errors.InvalidArgumentError) as e:
        ops.toposort(ADJ, backend="bogus")
    check(e, errors.InvalidArgumentError, "backend", "'bogus'")
    with pytest.raises(errors.InvalidArgumentError) as e:
        ops.graph_stats(ADJ, backend="bogus")
    check(e, errors.InvalidArgumentError, "backend", "'bogus'")
    with pytest.raises(errors.InvalidArgumentError) as e:
        ops.conductor_density(3, 2, 1, 4, backend="bogus")
    check(e, errors.InvalidArgumentError, "backend", "'bogus'")
    good_route("cpu")


def test_remembered_backend_choice_answers_only_for_its_own_value() -> None:
    """backends.select remembers its answer for numpy inputs per backend= value: alternating values keep their
    own backend, and a bad value (unhashable ones included) is still refused with its name."""
    from toporoute import backends

    for _ in range(2):
        assert backends.select("reference", Q) is ref
        assert backends.select("cpu", Q) is cpu
    for bad in (["cpu"], 3, "CPU"):
        with pytest.raises(errors.InvalidArgumentError) as e:
            ops.route(Q, K, backend=bad)
        check(e, errors.InvalidArgumentError, "backend", repr(bad))
    good_route("reference")
    good_route("cpu")


class FakeArray:
    """Has shape and dtype (so the facade's checks pass) and slicing, but is not a numpy array."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a
        self.shape = a.shape
        self.dtype = a.dtype

    def __getitem__(self, idx):
        return FakeArray(self._a[idx])


def test_cpu_backend_rejects_non_numpy_objects() -> None:
    with pytest.raises(errors.DTypeError) as e:
        ops.route(FakeArray(Q), FakeArray(K), backend="cpu")
    check(e, errors.DTypeError, "q", "numpy", "FakeArray")
    with pytest.raises(errors.DTypeError) as e:
        ops.route(Q, FakeArray(K), backend="cpu")
    check(e, errors.DTypeError, "k", "FakeArray")
    with pytest.raises(errors.DTypeError) as e:
        ops.route(FakeArray(Q[0]), FakeArray(K[0]), backend="cpu")
    check(e, errors.DTypeError, "q", "FakeArray")
    with pytest.raises(errors.DTypeError) as e:
        ops.toposort(FakeArray(ADJ), backend="cpu")
    check(e, errors.DTypeError, "adj", "FakeArray")
    with pytest.raises(errors.DTypeError) as e:
        ops.toposort(ADJ, weights=FakeArray(W), backend="cpu")
    check(e, errors.DTypeError, "weights", "FakeArray")
    with pytest.raises(errors.DTypeError) as e:
        ops.graph_stats(FakeArray(ADJ), backend="cpu")
    check(e, errors.DTypeError, "adj", "FakeArray")
    good_route("cpu")


def test_cpu_route_last_axis_must_be_contiguous() -> None:
    # the compiled core reads rows in place: a strided last axis is refused with a hint, never copied silently
    with pytest.raises(errors.DTypeError) as e:
        ops.route(np.repeat(Q, 2, axis=-1)[..., ::2], K, backend="cpu")
    check(e, errors.DTypeError, "q", "contiguous", "ascontiguousarray")
    with pytest.raises(errors.DTypeError) as e:
        ops.route(Q, np.repeat(K, 2, axis=-1)[..., 1::2], backend="cpu")
    check(e, errors.DTypeError, "k", "contiguous")
    good_route("cpu")


def test_cpu_backend_rechecks_its_inputs() -> None:
    # called directly (without the facade's checks), the compiled core still validates everything
    def raises(cls, arg, fn, *fragments):
        with pytest.raises(cls) as e:
            fn()
        check(e, cls, arg, *fragments)

    raises(
        errors.DTypeError,
        "q",
        lambda: cpu.route(Q.astype(np.float64), K, tau=0.0, k_in=1, active=None),
        "float64",
    )
    raises(errors.ShapeError, "q", lambda: cpu.route(Q[0], K[0], tau=0.0, k_in=1, active=None), "3")
    raises(errors.ShapeError, "k", lambda: cpu.route(Q, K[:, :3], tau=0.0, k_in=1, active=None), "(2, 3, 5)")
    raises(
        errors.ShapeError,
        "active",
        lambda: cpu.route(Q, K, tau=0.0, k_in=1, active=np.ones((2, 3), bool)),
        "(2, 3)",
    )
    raises(
        errors.DTypeError,
        "active",
        lambda: cpu.route(Q, K, tau=0.0, k_in=1, active=np.ones((2, 4), np.uint8)),
    )
    raises(errors.OutOfRangeError, "tau", lambda: cpu.route(Q, K, tau=1.5, k_in=1, active=None), "1.5")
    raises(errors.OutOfRangeError, "tau", lambda: cpu.route(Q, K, tau=float("nan"), k_in=1, active=None))
    raises(errors.OutOfRangeError, "k_in", lambda: cpu.route(Q, K, tau=0.0, k_in=-2, active=None), "-2")
    raises(
        errors.InvalidArgumentError,
        "isa",
        lambda: cpu.route(Q, K, tau=0.0, k_in=1, active=None, isa="sse9"),
        "sse9",
    )
    raises(
        errors.ShapeError,
        "adj",
        lambda: cpu.toposort(np.ones((2, 3, 4), bool), weights=None, active=None),
        "(2, 3, 4)",
    )
    raises(
        errors.DTypeError,
        "adj",
        lambda: cpu.toposort(ADJ.astype(np.uint8), weights=None, active=None),
        "uint8",
    )
    raises(
        errors.DTypeError,
        "weights",
        lambda: cpu.toposort(ADJ, weights=W.astype(np.float64), active=None),
        "float64",
    )
    raises(
        errors.ShapeError, "weights", lambda: cpu.toposort(ADJ, weights=W[:, :3], active=None), "(2, 3, 4)"
    )
    raises(errors.ShapeError, "prev", lambda: cpu.graph_stats(ADJ, active=None, prev=ADJ[:1]), "(1, 4, 4)")
    one = np.ones(1, np.int64)
    raises(errors.OutOfRangeError, "nodes", lambda: cpu.conductor_density(one * 0, one, one, one), "0")
    raises(errors.OutOfRangeError, "steps", lambda: cpu.conductor_density(one * 2, one, one * 3, one))
    raises(
        errors.DTypeError,
        "nodes",
        lambda: cpu.conductor_density(one.astype(np.float64), one, one, one),
        "float64",
    )
    good_route("cpu")


# ---------------------------------------------------------------------------------------------------- toposort / stats


@on_backend_names("toposort")
def test_toposort_bad_adj(backend: str) -> None:
    with pytest.raises(errors.DTypeError) as e:
        ops.toposort(ADJ.astype(np.int64), backend=backend)
    check(e, errors.DTypeError, "adj", "int64", "bool")
    with pytest.raises(errors.DTypeError) as e:
        ops.toposort(ADJ.tolist(), backend=backend)
    check(e, errors.DTypeError, "adj", "list")
    with pytest.raises(errors.ShapeError) as e:
        ops.toposort(np.ones((3, 4), bool), backend=backend)
    check(e, errors.ShapeError, "adj", "(3, 4)", "square")
    with pytest.raises(errors.ShapeError) as e:
        ops.toposort(np.ones((2, 3, 4), bool), backend=backend)
    check(e, errors.ShapeError, "adj", "(2, 3, 4)")
    with pytest.raises(errors.ShapeError) as e:
        ops.toposort(np.ones(4, bool), backend=backend)
    check(e, errors.ShapeError, "adj", "(4,)")
    with pytest.raises(errors.ShapeError) as e:
        ops.toposort(np.ones((1, 2, 3, 3), bool), backend=backend)
    check(e, errors.ShapeError, "adj", "(1, 2, 3, 3)")
    with pytest.raises(errors.DTypeError) as e:
        ops.toposort(ADJ, active=np.ones((2, 4)), backend=backend)
    check(e, errors.DTypeError, "active", "float64")
    with pytest.raises(errors.ShapeError) as e:
        ops.toposort(ADJ, active=np.ones((2, 3), bool), backend=backend)
    check(e, errors.ShapeError, "active", "(2, 3)")


@on_backend_names("toposort")
def test_toposort_bad_weights(backend: str) -> None:
    with pytest.raises(errors.DTypeError) as e:
        ops.toposort(ADJ, weights=W.astype(np.float64), backend=backend)
    check(e, errors.DTypeError, "weights", "float64")
    with pytest.raises(errors.ShapeError) as e:
        ops.toposort(ADJ, weights=W[0], backend=backend)
    check(e, errors.ShapeError, "weights", "(4, 4)", "(2, 4, 4)")
    with pytest.raises(errors.ShapeError) as e:
        ops.toposort(ADJ, weights=np.ones((2, 4, 5), np.float32), backend=backend)
    check(e, errors.ShapeError, "weights", "(2, 4, 5)")
    w = W.copy()
    w[1, 2, 3] = -0.5
    with pytest.raises(errors.OutOfRangeError) as e:
        ops.toposort(ADJ, weights=w, backend=backend)
    check(e, errors.OutOfRangeError, "weights", "-0.5", "[1, 2, 3]")
    for bad in (np.nan, np.inf, -np.inf):
        w = W.copy()
        w[0, 1, 1] = bad  # on the diagonal (a self-loop weight): still checked
        with pytest.raises(errors.NonFiniteError) as e:
            ops.toposort(ADJ, weights=w, backend=backend)
        check(e, errors.NonFiniteError, "weights", "inf" if np.isinf(bad) else "nan", "[0, 1, 1]")
    # single graph
    with pytest.raises(errors.OutOfRangeError) as e:
        ops.toposort(ADJ[0], weights=-W[0] - 1, backend=backend)
    check(e, errors.OutOfRangeError, "weights")
    good = ops.toposort(ADJ, weights=W, backend=backend)
    np.testing.assert_array_equal(good.order, ref.toposort(ADJ, weights=W, active=None).order)


@on_backend_names("toposort")
def test_toposort_weights_nan_and_negative_raise_the_same_error(backend: str) -> None:
    # a negative weight before a NaN one: the reference reports the non-finite value first; every backend
    # must raise the same exception type for the same input
    w = W.copy()
    w[0, 0, 1] = -1.0
    w[0, 0, 2] = np.nan
    with pytest.raises(errors.InvalidArgumentError) as e:
        ops.toposort(ADJ, weights=w, backend=backend)
    check(e, errors.NonFiniteError, "weights", "nan")


@on_backend_names("graph_stats")
def test_graph_stats_bad_input(backend: str) -> None:
    with pytest.raises(errors.DTypeError) as e:
        ops.graph_stats(ADJ.astype(np.int32), backend=backend)
    check(e, errors.DTypeError, "adj", "int32")
    with pytest.raises(errors.ShapeError) as e:
        ops.graph_stats(np.ones((2, 3, 4), bool), backend=backend)
    check(e, errors.ShapeError, "adj", "(2, 3, 4)")
    with pytest.raises(errors.DTypeError) as e:
        ops.graph_stats(ADJ, prev=ADJ.astype(np.float32), backend=backend)
    check(e, errors.DTypeError, "prev", "float32")
    with pytest.raises(errors.ShapeError) as e:
        ops.graph_stats(ADJ, prev=ADJ[0], backend=backend)
    check(e, errors.ShapeError, "prev", "(4, 4)")
    with pytest.raises(errors.ShapeError) as e:
        ops.graph_stats(ADJ, np.ones((4,), bool), backend=backend)
    check(e, errors.ShapeError, "active", "(4,)")


# ---------------------------------------------------------------------------------------------------- density


@on_backend_names("conductor_density")
def test_conductor_density_out_of_range(backend: str) -> None:
    cases = [
        ((0, 1, 1, 4), errors.OutOfRangeError, "nodes", ("0", ">= 1")),
        ((np.array([3, -2]), 1, 1, 4), errors.OutOfRangeError, "nodes", ("-2",)),
        ((3, -1, 1, 4), errors.OutOfRangeError, "edges", ("-1",)),
        ((3, 1, 0, 4), errors.OutOfRangeError, "steps", ("0",)),
        ((3, 1, 1, 0), errors.OutOfRangeError, "n_max", ("0",)),
        ((3, 1, 5, 4), errors.OutOfRangeError, "steps", ("steps=5", "nodes=3")),
        (
            (np.array([4, 3]), 1, np.array([2, 4]), 4),
            errors.OutOfRangeError,
            "steps",
            ("steps=4", "nodes=3", "(1,)"),
        ),
    ]
    for args, cls, arg, frags in cases:
        with pytest.raises(cls) as e:
            ops.conductor_density(*args, backend=backend)
        check(e, cls, arg, *frags)


@on_backend_names("conductor_density")
def test_conductor_density_bad_types_and_shapes(backend: str) -> None:
    with pytest.raises(errors.DTypeError) as e:
        ops.conductor_density(3.0, 1, 1, 4, backend=backend)
    check(e, errors.DTypeError, "nodes", "float64")
    with pytest.raises(errors.DTypeError) as e:
        ops.conductor_density(3, np.array([1.5]), 1, 4, backend=backend)
    check(e, errors.DTypeError, "edges", "float64")
    with pytest.raises(errors.DTypeError) as e:
        ops.conductor_density(3, 1, 1, np.float32(4), backend=backend)
    check(e, errors.DTypeError, "n_max", "float32")
    with pytest.raises(errors.DTypeError) as e:
        ops.conductor_density(3, 1, True, 4, backend=backend)
    check(e, errors.DTypeError, "steps", "bool")
    with pytest.raises(errors.DTypeError) as e:
        ops.conductor_density(3, "1", 1, 4, backend=backend)
    check(e, errors.DTypeError, "edges")
    with pytest.raises(errors.ShapeError) as e:
        ops.conductor_density(np.array([3, 4]), np.array([1, 2, 3]), 1, 4, backend=backend)
    check(e, errors.ShapeError, "nodes", "(2,)", "(3,)")
    d = ops.conductor_density(np.array([3, 4]), np.array([[1], [2]]), 1, 4, backend=backend)
    assert d.reward.shape == (2, 2)


# ---------------------------------------------------------------------------------------------------- recovery


@on_backend_names("route", "toposort", "conductor_density")
def test_failed_calls_leave_no_trace(backend: str) -> None:
    q, k = Q.copy(), K.copy()
    q_nan = Q.copy()
    q_nan[0, 0, 0] = np.nan
    before = (q.copy(), k.copy(), q_nan.copy())
    bad_calls = [
        lambda: ops.route(q_nan, k, backend=backend),
        lambda: ops.route(q, k, tau=7.0, backend=backend),
        lambda: ops.route(q, k[:, :2], backend=backend),
        lambda: ops.toposort(ADJ, weights=-W, backend=backend),
        lambda: ops.conductor_density(0, 0, 0, 0, backend=backend),
    ]
    for _ in range(50):
        for call in bad_calls:
            with pytest.raises(ValueError):
                call()
    # inputs untouched, good calls still correct
    for a, b in zip((q, k, q_nan), before):
        np.testing.assert_array_equal(a, b)
    good_route(backend)
    o = ops.toposort(ADJ, weights=W, backend=backend)
    np.testing.assert_array_equal(o.order, ref.toposort(ADJ, weights=W, active=None).order)
    d = ops.conductor_density(2, 1, 2, 4, backend=backend)
    assert float(d.reward) == pytest.approx(7.6875, abs=1e-4)
