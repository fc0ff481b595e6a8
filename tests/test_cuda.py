"""Parity of the CUDA backend with the numpy reference: integer and boolean outputs exactly equal, scores within
1e-6. Host (numpy) inputs everywhere; device arrays through DLPack where CuPy or PyTorch is installed.

Every test is marked ``cuda``: tests/conftest.py skips them with the reason when no GPU is usable (and fails
them under ``--require-cuda``).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np
import pytest

from toporoute import errors
from toporoute.backends import cuda, reference

SCORE_ATOL = 1e-6
TAUS = (-0.2, 0.0, 0.3)
K_INS = (0, 1, 3)


def _episodes(rng: np.random.Generator, B: int, N: int, D: int) -> tuple[np.ndarray, np.ndarray]:
    """q, k with zero rows, duplicated rows and, in every third episode, small-integer values that make many
    scores exactly equal (ties broken by the lower index)."""
    q = rng.standard_normal((B, N, D)).astype(np.float32)
    k = rng.standard_normal((B, N, D)).astype(np.float32)
    q[::3] = rng.integers(-1, 2, q[::3].shape)
    k[::3] = rng.integers(-1, 2, k[::3].shape)
    if N >= 3:
        k[:, N - 1] = k[:, 0]  # duplicated provider: equal scores in every column
        q[:, N // 2] = k[:, 1]  # a need equal to an offer: score exactly 1
    q[rng.random((B, N)) < 0.15] = 0.0
    k[rng.random((B, N)) < 0.15] = 0.0
    return q, k


def _active(rng: np.random.Generator, B: int, N: int) -> np.ndarray:
    return rng.random((B, N)) < 0.8


def _assert_routes(got: Any, want: Any, context: str) -> None:
    assert got.scores.dtype == np.float32 and got.scores.shape == want.scores.shape, context
    assert got.adjacency.dtype == np.bool_, context
    assert got.inbox.dtype == np.int32 and got.inbox.shape == want.inbox.shape, context
    assert got.in_degree.dtype == np.int32, context
    np.testing.assert_array_equal(got.adjacency, want.adjacency, err_msg=f"adjacency, {context}")
    np.testing.assert_array_equal(got.inbox, want.inbox, err_msg=f"inbox, {context}")
    np.testing.assert_array_equal(got.in_degree, want.in_degree, err_msg=f"in_degree, {context}")
    np.testing.assert_allclose(got.scores, want.scores, rtol=0, atol=SCORE_ATOL, err_msg=f"scores, {context}")


def _assert_orders(got: Any, want: Any, context: str) -> None:
    assert got.order.dtype == np.int32 and got.level.dtype == np.int32, context
    assert got.removed.dtype == np.bool_ and got.is_dag.dtype == np.bool_, context
    for field in ("order", "level", "removed", "is_dag"):
        np.testing.assert_array_equal(
            getattr(got, field), getattr(want, field), err_msg=f"{field}, {context}"
        )


# --------------------------------------------------------------------------------------------------- route


@pytest.mark.cuda
@pytest.mark.parametrize("D", [1, 16, 384])
@pytest.mark.parametrize("N", [1, 2, 5, 8, 33, 70])
@pytest.mark.parametrize("B", [1, 7, 300])
def test_route_matches_reference(B: int, N: int, D: int) -> None:
    rng = np.random.default_rng(B * 10_007 + N * 101 + D)
    q, k = _episodes(rng, B, N, D)
    mask = _active(rng, B, N)
    for tau, k_in, active in itertools.product(TAUS, K_INS, (None, mask)):
        context = f"B={B} N={N} D={D} tau={tau} k_in={k_in} active={active is not None}"
        got = cuda.route(q, k, tau=tau, k_in=k_in, active=active)
        want = reference.route(q, k, tau=tau, k_in=k_in, active=active)
        _assert_routes(got, want, context)


@pytest.mark.cuda
@pytest.mark.parametrize("D", [3, 5, 17])
def test_route_unaligned_rows_match_reference(D: int) -> None:
    # D % 4 != 0 and offset views take the kernel's scalar-load path
    rng = np.random.default_rng(D)
    q, k = _episodes(rng, 9, 12, D + 1)
    q, k = q[:, :, 1:], k[:, :, 1:]
    for k_in in K_INS:
        got = cuda.route(q, k, tau=0.1, k_in=k_in, active=None)
        want = reference.route(q, k, tau=0.1, k_in=k_in, active=None)
        _assert_routes(got, want, f"D={D} k_in={k_in}")


@pytest.mark.cuda
def test_route_k_in_larger_than_n_pads_inbox() -> None:
    rng = np.random.default_rng(5)
    q, k = _episodes(rng, 4, 3, 8)
    got = cuda.route(q, k, tau=-1.0, k_in=6, active=None)
    want = reference.route(q, k, tau=-1.0, k_in=6, active=None)
    assert got.inbox.shape == (4, 3, 6)
    _assert_routes(got, want, "k_in=6 > N=3")


@pytest.mark.cuda
def test_route_zero_dimension_gives_no_edges() -> None:
    q = np.zeros((3, 4, 0), np.float32)
    got = cuda.route(q, q, tau=-0.5, k_in=2, active=None)
    _assert_routes(got, reference.route(q, q, tau=-0.5, k_in=2, active=None), "D=0")
    assert not got.adjacency.any()


@pytest.mark.cuda
@pytest.mark.parametrize(("B", "N"), [(0, 4), (3, 0), (0, 0)])
def test_route_empty_batches(B: int, N: int) -> None:
    q = np.zeros((B, N, 8), np.float32)
    for k_in in (0, 3):
        got = cuda.route(q, q, tau=0.3, k_in=k_in, active=None)
        _assert_routes(got, reference.route(q, q, tau=0.3, k_in=k_in, active=None), f"B={B} N={N}")


@pytest.mark.cuda
def test_route_host_path_streams_large_batches_in_chunks() -> None:
    # ~2 MB per episode: the host path's 512 MiB device buffer holds ~250 episodes, so this takes 3 trips
    rng = np.random.default_rng(13)
    B, N, D = 600, 64, 4096
    q = rng.standard_normal((B, N, D), dtype=np.float32)
    k = rng.standard_normal((B, N, D), dtype=np.float32)
    k[:, 5] = k[:, 9]
    got = cuda.route(q, k, tau=0.02, k_in=3, active=None)
    for lo in (0, 250, 260, 500, 590):  # around the chunk boundaries (episodes 253 and 506)
        part = slice(lo, lo + 10)
        want = reference.route(q[part], k[part], tau=0.02, k_in=3, active=None)
        sliced = type(got)(*(x[part] for x in vars(got).values()))
        _assert_routes(sliced, want, f"episodes {lo}..{lo + 9}")
    q[577, 3, 100] = np.nan  # in the last chunk: the message counts episodes from the batch start
    with pytest.raises(
        errors.NonFiniteError, match="q must be finite; got NaN or infinity at episode 577, agent 3"
    ):
        cuda.route(q, k, tau=0.02, k_in=3, active=None)


@pytest.mark.cuda
def test_route_non_finite_names_the_row_like_the_reference() -> None:
    rng = np.random.default_rng(11)
    q, k = _episodes(rng, 6, 4, 8)
    cases = []
    bad_q = q.copy()
    bad_q[3, 1, 2] = np.nan
    cases.append((bad_q, k, "q", "episode 3, agent 1"))
    bad_k = k.copy()
    bad_k[2, 0, 7] = np.inf
    cases.append((q, bad_k, "k", "episode 2, agent 0"))
    # the first episode with a bad row wins, whichever of q and k it is in
    early_k_q, early_k_k = q.copy(), k.copy()
    early_k_q[5, 2, 0] = -np.inf
    early_k_k[1, 3, 1] = np.nan
    cases.append((early_k_q, early_k_k, "k", "episode 1, agent 3"))
    # within one episode q is reported before k, whatever the agents
    same_q, same_k = q.copy(), k.copy()
    same_q[4, 3, 0] = np.nan
    same_k[4, 0, 5] = np.nan
    cases.append((same_q, same_k, "q", "episode 4, agent 3"))
    for qq, kk, name, where in cases:
        with pytest.raises(errors.NonFiniteError) as want:
            reference.route(qq, kk, tau=0.3, k_in=3, active=None)
        with pytest.raises(errors.NonFiniteError) as got:
            cuda.route(qq, kk, tau=0.3, k_in=3, active=None)
        assert got.value.arg == name
        assert where in str(got.value)
        assert str(got.value) == str(want.value)


@pytest.mark.cuda
def test_route_concurrent_callers_get_their_own_results() -> None:
    rng = np.random.default_rng(3)
    inputs = [_episodes(rng, 64, 8, 64) for _ in range(6)]
    wants = [reference.route(q, k, tau=0.1, k_in=2, active=None) for q, k in inputs]
    gots: list[Any] = [None] * len(inputs)
    failures: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(5):
                gots[i] = cuda.route(*inputs[i], tau=0.1, k_in=2, active=None)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the main thread below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    for i, (got, want) in enumerate(zip(gots, wants)):
        _assert_routes(got, want, f"thread {i}")


# ------------------------------------------------------------------------------------------------ toposort


def _graphs(rng: np.random.Generator, B: int, N: int) -> np.ndarray:
    """Random graphs of mixed density: cyclic ones, DAGs in a random node order, some self-loops."""
    density = rng.choice([0.03, 0.1, 0.3, 0.7], size=B)
    adj = rng.random((B, N, N)) < density[:, None, None]
    upper = np.triu(np.ones((N, N), dtype=bool), 1)
    for b in range(B // 3):
        perm = rng.permutation(N)
        adj[b] &= upper[np.ix_(perm, perm)]
    adj[B // 3 : B // 2] |= np.eye(N, dtype=bool)
    return adj


def _weights(rng: np.random.Generator, B: int, N: int) -> np.ndarray:
    """Half small integers (tied sums), half uniform floats, with zeros."""
    w = rng.random((B, N, N)).astype(np.float32)
    w[::2] = rng.integers(0, 4, w[::2].shape)
    w[rng.random((B, N, N)) < 0.1] = 0.0
    return w


@pytest.mark.cuda
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("N", [1, 2, 3, 5, 16, 31, 32, 33, 64, 65, 100])
def test_toposort_matches_reference(N: int, weighted: bool) -> None:
    rng = np.random.default_rng(N * 2 + int(weighted))
    B = 48
    adj = _graphs(rng, B, N)
    weights = _weights(rng, B, N) if weighted else None
    for active in (None, _active(rng, B, N)):
        context = f"N={N} weighted={weighted} active={active is not None}"
        got = cuda.toposort(adj, weights=weights, active=active)
        want = reference.toposort(adj, weights=weights, active=active)
        _assert_orders(got, want, context)


@pytest.mark.cuda
def test_toposort_host_path_streams_large_batches_in_chunks() -> None:
    # ~540 kB per weighted graph at N=300: three trips through the host path's device buffer (989 graphs each)
    rng = np.random.default_rng(14)
    B, N = 2400, 300
    adj = rng.random((B, N, N), dtype=np.float32) < 0.01
    weights = rng.random((B, N, N), dtype=np.float32)
    got = cuda.toposort(adj, weights=weights, active=None)
    for lo in (0, 987, 1976, 2396):
        part = slice(lo, lo + 4)
        want = reference.toposort(adj[part], weights=weights[part], active=None)
        sliced = type(got)(*(x[part] for x in vars(got).values()))
        _assert_orders(sliced, want, f"graphs {lo}..{lo + 3}")


@pytest.mark.cuda
def test_toposort_dag_is_kahn_order() -> None:
    N = 12
    adj = np.zeros((1, N, N), dtype=bool)
    for v in range(1, N):
        adj[0, v - 1, v] = True  # a chain 0 -> 1 -> ... -> N-1
    got = cuda.toposort(adj, weights=None, active=None)
    np.testing.assert_array_equal(got.order[0], np.arange(N))
    np.testing.assert_array_equal(got.level[0], np.arange(N))
    assert got.is_dag.all() and not got.removed.any()


@pytest.mark.cuda
@pytest.mark.parametrize(("B", "N"), [(0, 5), (4, 0), (0, 0)])
def test_toposort_empty_batches(B: int, N: int) -> None:
    adj = np.zeros((B, N, N), dtype=bool)
    got = cuda.toposort(adj, weights=None, active=None)
    _assert_orders(got, reference.toposort(adj, weights=None, active=None), f"B={B} N={N}")


@pytest.mark.cuda
def test_toposort_rejects_bad_weights() -> None:
    adj = np.ones((2, 3, 3), dtype=bool)
    w = np.ones((2, 3, 3), dtype=np.float32)
    nan = w.copy()
    nan[0, 1, 2] = np.nan
    with pytest.raises(errors.NonFiniteError, match=r"weights must be finite; got nan at \[0, 1, 2\]") as e:
        cuda.toposort(adj, weights=nan, active=None)
    assert e.value.arg == "weights"
    neg = w.copy()
    neg[1, 2, 0] = -0.5
    with pytest.raises(errors.OutOfRangeError, match=r"weights must be >= 0; got -0.5 at \[1, 2, 0\]") as e:
        cuda.toposort(adj, weights=neg, active=None)
    assert e.value.arg == "weights"


# --------------------------------------------------------------------------------------------- availability


@pytest.mark.cuda
def test_available_and_unsupported_ops() -> None:
    assert cuda.available() == (True, "")
    with pytest.raises(errors.BackendUnavailableError, match="no CUDA kernel"):
        cuda.graph_stats(np.zeros((1, 2, 2), bool), active=None, prev=None)
    one = np.ones(1, np.int64)
    with pytest.raises(errors.BackendUnavailableError, match="no CUDA kernel"):
        cuda.conductor_density(one, one, one, one)


# ------------------------------------------------------------------------------------ device arrays (DLPack)


class _Device:
    """Moves numpy arrays to a CUDA framework and back."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "torch":
            torch = pytest.importorskip("torch", reason="PyTorch is not installed")
            if not torch.cuda.is_available():
                pytest.skip("PyTorch is installed without a usable CUDA device")
            self.mod = torch
        else:
            cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
            try:
                cupy.cuda.runtime.getDeviceCount()
            except Exception as exc:  # noqa: BLE001 - any CuPy/driver failure means: cannot test with CuPy
                pytest.skip(f"CuPy cannot use a CUDA device: {exc}")
            self.mod = cupy

    def put(self, x: np.ndarray | None) -> Any:
        if x is None:
            return None
        return self.mod.from_numpy(x).cuda() if self.name == "torch" else self.mod.asarray(x)

    def get(self, x: Any) -> np.ndarray:
        return x.cpu().numpy() if self.name == "torch" else self.mod.asnumpy(x)

    def on_device(self, x: Any) -> bool:
        return bool(x.is_cuda) if self.name == "torch" else isinstance(x, self.mod.ndarray)

    def fetch(self, result: Any) -> Any:
        for value in vars(result).values():
            assert self.on_device(value), f"{type(value)} is not a {self.name} device array"
        return type(result)(*(self.get(v) for v in vars(result).values()))


@pytest.mark.cuda
@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_dlpack_route_stays_on_device_and_matches(framework: str) -> None:
    dev = _Device(framework)
    rng = np.random.default_rng(21)
    q, k = _episodes(rng, 50, 9, 40)
    mask = _active(rng, 50, 9)
    for tau, k_in, active in itertools.product(TAUS, K_INS, (None, mask)):
        got = dev.fetch(cuda.route(dev.put(q), dev.put(k), tau=tau, k_in=k_in, active=dev.put(active)))
        want = reference.route(q, k, tau=tau, k_in=k_in, active=active)
        _assert_routes(got, want, f"{framework} tau={tau} k_in={k_in} active={active is not None}")

    # strided device views: every other episode (batch stride), and every other feature (copied to unit stride)
    qd, kd = dev.put(q), dev.put(k)
    got = dev.fetch(cuda.route(qd[::2], kd[::2], tau=0.2, k_in=2, active=None))
    _assert_routes(got, reference.route(q[::2], k[::2], tau=0.2, k_in=2, active=None), "batch stride")
    got = dev.fetch(cuda.route(qd[:, :, ::2], kd[:, :, ::2], tau=0.2, k_in=2, active=None))
    want = reference.route(q[:, :, ::2], k[:, :, ::2], tau=0.2, k_in=2, active=None)
    _assert_routes(got, want, "feature stride")


@pytest.mark.cuda
@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_dlpack_toposort_stays_on_device_and_matches(framework: str) -> None:
    dev = _Device(framework)
    rng = np.random.default_rng(22)
    for N in (7, 40, 70):
        adj = _graphs(rng, 30, N)
        weights = _weights(rng, 30, N)
        mask = _active(rng, 30, N)
        for w, active in itertools.product((None, weights), (None, mask)):
            got = dev.fetch(cuda.toposort(dev.put(adj), weights=dev.put(w), active=dev.put(active)))
            want = reference.toposort(adj, weights=w, active=active)
            _assert_orders(
                got, want, f"{framework} N={N} weighted={w is not None} active={active is not None}"
            )


@pytest.mark.cuda
@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_dlpack_errors(framework: str) -> None:
    dev = _Device(framework)
    rng = np.random.default_rng(23)
    q, k = _episodes(rng, 5, 4, 8)
    bad_k = k.copy()
    bad_k[4, 3, 0] = np.nan
    with pytest.raises(
        errors.NonFiniteError, match="k must be finite; got NaN or infinity at episode 4, agent 3"
    ):
        cuda.route(dev.put(q), dev.put(bad_k), tau=0.3, k_in=3, active=None)
    with pytest.raises(errors.InvalidArgumentError, match="must live where q does"):
        cuda.route(dev.put(q), k, tau=0.3, k_in=3, active=None)
    adj = np.ones((2, 3, 3), dtype=bool)
    w = np.ones((2, 3, 3), dtype=np.float32)
    w[1, 0, 2] = -1.0
    with pytest.raises(errors.OutOfRangeError, match=r"weights must be >= 0; got -1.0 at \[1, 0, 2\]"):
        cuda.toposort(dev.put(adj), weights=dev.put(w), active=None)


# ------------------------------------------------------------------------------------------------------ Q-Mix

QMIX_ATOL = 1e-5


def _qmix_inputs(rng: np.random.Generator, c: Any, B: int, N: int) -> tuple[np.ndarray, ...]:
    obs = rng.standard_normal((B, N, c.obs_dim), dtype=np.float32)
    adj = rng.random((B, N, N)) < 0.4
    hidden = rng.standard_normal((B, N, c.hidden), dtype=np.float32)
    return obs, adj, hidden, rng.random((B, N)) < 0.75


def _assert_qmix(got: Any, want: Any, context: str) -> None:
    for name, g, w in zip(("q", "hidden"), got, want):
        assert g.dtype == np.float32 and g.shape == w.shape, f"{name}, {context}"
        np.testing.assert_allclose(g, w, rtol=0, atol=QMIX_ATOL, err_msg=f"{name}, {context}")


@pytest.mark.cuda
@pytest.mark.parametrize("adj_mode", ["in", "out_rows", "sym"])
@pytest.mark.parametrize("self_loops", [True, False])
def test_qmix_forward_matches_reference(adj_mode: str, self_loops: bool) -> None:
    from toporoute.ops.qmix_params import QMixConfig, QMixParams

    p = QMixParams.random(QMixConfig(adj_mode=adj_mode, self_loops=self_loops), seed=31)
    rng = np.random.default_rng(32)
    for B, N in ((1, 1), (1, 3), (3, 4), (64, 3), (257, 16), (5, 64)):
        obs, adj, hidden, active = _qmix_inputs(rng, p.config, B, N)
        for h, act in ((hidden, active), (None, None)):
            got = cuda.qmix_forward(p, obs, adj, h, active=act)
            want = reference.qmix_forward(p, obs, adj, h, active=act)
            _assert_qmix(got, want, f"{adj_mode} self_loops={self_loops} B={B} N={N} hidden={h is not None}")


@pytest.mark.cuda
@pytest.mark.parametrize("b1_hidden", [False, True])
def test_qmix_other_shapes_and_mixer_match_reference(b1_hidden: bool) -> None:
    from toporoute.ops.qmix_params import QMixConfig, QMixParams

    rng = np.random.default_rng(33)
    for cfg in (
        QMixConfig(b1_hidden=b1_hidden),
        QMixConfig(obs_dim=403, hidden=64, gnn_layers=3, b1_hidden=b1_hidden),
        QMixConfig(
            obs_dim=7,
            hidden=40,
            n_actions=5,
            head_hidden=20,
            gnn_layers=0,
            n_agents=5,
            mix_hidden=24,
            hyper_hidden=40,
            b1_hidden=b1_hidden,
        ),
    ):
        p = QMixParams.random(cfg, seed=34)
        obs, adj, hidden, active = _qmix_inputs(rng, cfg, 20, 5)
        got = cuda.qmix_forward(p, obs, adj, hidden, active=active)
        _assert_qmix(got, reference.qmix_forward(p, obs, adj, hidden, active=active), f"{cfg}")
        for B in (1, 17, 1000):
            q_taken = rng.standard_normal((B, cfg.n_agents), dtype=np.float32)
            state = rng.standard_normal((B, cfg.state_dim), dtype=np.float32)
            np.testing.assert_allclose(
                cuda.qmix_mix(p, q_taken, state),
                reference.qmix_mix(p, q_taken, state),
                rtol=0,
                atol=QMIX_ATOL,
            )


@pytest.mark.cuda
def test_qmix_errors_match_the_reference() -> None:
    from toporoute import ops
    from toporoute.ops.qmix_params import QMixConfig, QMixParams

    p = QMixParams.random(QMixConfig(), seed=35)
    obs, adj, hidden, _ = _qmix_inputs(np.random.default_rng(36), p.config, 6, 3)
    obs[4, 2, 0] = np.nan
    hidden[1, 0, 3] = np.inf  # obs is checked over the whole batch first
    with pytest.raises(
        errors.NonFiniteError, match="obs must be finite; got NaN or infinity at episode 4, agent 2"
    ):
        cuda.qmix_forward(p, obs, adj, hidden, active=None)
    obs[4, 2, 0] = 0.0
    with pytest.raises(
        errors.NonFiniteError, match="hidden must be finite; got NaN or infinity at episode 1, agent 0"
    ):
        cuda.qmix_forward(p, obs, adj, hidden, active=None)
    with pytest.raises(errors.BackendUnavailableError, match="at most 64 agents"):
        cuda.qmix_forward(
            p, np.zeros((1, 65, 51), np.float32), np.zeros((1, 65, 65), bool), None, active=None
        )
    no_mixer = QMixParams.random(QMixConfig(), seed=35, mixer=False)
    with pytest.raises(errors.InvalidArgumentError, match="no mixer"):
        ops.qmix_mix(no_mixer, np.zeros((2, 3), np.float32), np.zeros((2, 156), np.float32), backend="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_dlpack_qmix_stays_on_device_and_matches(framework: str) -> None:
    from toporoute import ops
    from toporoute.ops.qmix_params import QMixConfig, QMixParams

    dev = _Device(framework)
    p = QMixParams.random(QMixConfig(), seed=37)
    rng = np.random.default_rng(38)
    obs, adj, hidden, active = _qmix_inputs(rng, p.config, 40, 4)
    step = ops.qmix_forward(p, dev.put(obs), dev.put(adj), dev.put(hidden), active=dev.put(active))
    assert dev.on_device(step.q) and dev.on_device(step.hidden)
    want = reference.qmix_forward(p, obs, adj, hidden, active=active)
    _assert_qmix((dev.get(step.q), dev.get(step.hidden)), want, framework)
    q_taken = rng.standard_normal((40, 3), dtype=np.float32)
    state = rng.standard_normal((40, 156), dtype=np.float32)
    got = ops.qmix_mix(p, dev.put(q_taken), dev.put(state))
    assert dev.on_device(got)
    np.testing.assert_allclose(dev.get(got), reference.qmix_mix(p, q_taken, state), rtol=0, atol=QMIX_ATOL)
    state[7, 3] = np.nan
    with pytest.raises(errors.NonFiniteError, match="state must be finite; got NaN or infinity at episode 7"):
        ops.qmix_mix(p, dev.put(q_taken), dev.put(state))
