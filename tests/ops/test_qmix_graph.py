"""ops.qmix_graph (Agent Q-Mix's phi): the compiled kernel against the reference, its checks, and the method's
use of it. The semantics themselves (which edges the guard keeps) are pinned in
tests/methods/qmix/test_qmix_method.py."""

from __future__ import annotations

import numpy as np
import pytest
from _backends import REFERENCE, Backend, backend_names, needs_core, on_backends

from toporoute import errors, ops
from toporoute.backends import reference


def _joint(rng: np.random.Generator, B: int, N: int, dtype: type) -> np.ndarray:
    return rng.integers(0, 6, size=(B, N)).astype(dtype)


@on_backends("qmix_graph", reference=False)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_every_backend_equals_the_reference(backend: Backend, dtype: type) -> None:
    rng = np.random.default_rng(7)
    for N in (1, 2, 3, 5, 8, 17, 33, 64):
        actions = _joint(rng, 50, N, dtype)
        got, want = backend.qmix_graph(actions), REFERENCE.qmix_graph(actions)
        np.testing.assert_array_equal(got.adj, want.adj, err_msg=f"N={N}")
        np.testing.assert_array_equal(got.debate, want.debate, err_msg=f"N={N}")
        assert got.adj.dtype == np.bool_ and got.debate.dtype == np.int32


@needs_core
def test_a_large_batch_runs_in_parallel_with_the_same_graphs() -> None:
    actions = _joint(np.random.default_rng(1), 4096, 40, np.int64)
    got = ops.qmix_graph(actions, backend="cpu")
    want = reference.qmix_graph(actions[:64])
    np.testing.assert_array_equal(got.adj[:64], want.adj)
    np.testing.assert_array_equal(got.debate[:64], want.debate)


@pytest.mark.parametrize("backend", backend_names("qmix_graph"))
def test_single_joint_action_and_strided_input(backend: str) -> None:
    actions = np.array([[1, 0, 5, 3], [9, 9, 9, 9]], dtype=np.int64)[0]  # a row view
    one = ops.qmix_graph(actions, backend=backend)
    batch = ops.qmix_graph(actions[None], backend=backend)
    assert one.adj.shape == (4, 4) and one.debate.shape == (4,)
    np.testing.assert_array_equal(one.adj, batch.adj[0])
    # agent 0 broadcasts to everyone; agent 2 debates with agent 0 (2 + 4 // 2) % 4: 0 reaches 2 already, so no
    assert one.adj[0, 1:].all() and one.debate.tolist() == [-1, -1, -1, -1]
    transposed = np.asfortranarray(np.tile(actions, (3, 1)))
    np.testing.assert_array_equal(ops.qmix_graph(transposed, backend=backend).adj, np.stack([one.adj] * 3))


@pytest.mark.parametrize("backend", backend_names("qmix_graph"))
def test_bad_actions_are_named(backend: str) -> None:
    with pytest.raises(
        errors.OutOfRangeError, match=r"actions must be in 0\.\.5; got 6 at episode 1, agent 2"
    ):
        ops.qmix_graph(np.array([[0, 0, 0], [1, 2, 6], [-1, 0, 0]]), backend=backend)
    with pytest.raises(errors.OutOfRangeError, match="got -1 at episode 0, agent 0"):
        ops.qmix_graph(np.array([-1, 0]), backend=backend)
    with pytest.raises(errors.ShapeError, match="at most 64 agents; got N = 65"):
        ops.qmix_graph(np.zeros(65, np.int64), backend=backend)
    with pytest.raises(errors.DTypeError, match="actions must have dtype int32 or int64; got float64"):
        ops.qmix_graph(np.zeros(3), backend=backend)
    with pytest.raises(errors.ShapeError, match="actions"):
        ops.qmix_graph(np.zeros((1, 2, 3), np.int64), backend=backend)
