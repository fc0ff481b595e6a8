"""The CUDA backend beyond parity (tests/ops/test_parity.py holds ``cuda``, ``cuda-cupy`` and ``cuda-torch`` to the
numpy reference, and checks that device results stay on the device): availability, device arrays choosing the
backend, the host path's chunked streaming, errors that name the row like the reference's, and errors of
device inputs (DLPack).

Every test is marked ``cuda``: tests/conftest.py skips them with the reason when no GPU is usable (and fails
them under ``--require-cuda``).
"""

from __future__ import annotations

import _inputs as inp
import numpy as np
import pytest
from _backends import REFERENCE, Backend, assert_matches, backend_params

from toporoute import errors, ops
from toporoute.backends import cuda
from toporoute.types.qmix_params import QMixConfig, QMixParams

# cuda-cupy and cuda-torch: CuPy arrays and PyTorch tensors through DLPack (each skips when not installed)
DEVICE_ARRAYS = [p for p in backend_params("route", reference=False) if p.id in ("cuda-cupy", "cuda-torch")]


@pytest.mark.cuda
def test_available() -> None:
    assert cuda.available() == (True, "")


@pytest.mark.cuda
@pytest.mark.parametrize("backend", DEVICE_ARRAYS)
def test_device_arrays_choose_the_cuda_backend(backend: Backend) -> None:
    # no backend= argument: device inputs go to the CUDA backend and their results stay on the device
    rng = np.random.default_rng(21)
    q, k = inp.qk(rng, 20, 9, 40)
    got = backend.fetch(ops.route(backend.put(q), backend.put(k), tau=0.2, k_in=2))
    assert_matches("route", got, REFERENCE.route(q, k, tau=0.2, k_in=2))
    adj = inp.graphs(rng, 20, 9)
    assert_matches("toposort", backend.fetch(ops.toposort(backend.put(adj))), REFERENCE.toposort(adj))
    p = QMixParams.random(QMixConfig(), seed=37)
    obs, adj, hidden, active = inp.qmix_obs(rng, p.config, 40, 4)
    step = ops.qmix_forward(p, *(backend.put(x) for x in (obs, adj, hidden)), active=backend.put(active))
    want = REFERENCE.qmix_forward(p, obs, adj, hidden, active=active)
    assert_matches("qmix_forward", backend.fetch(step), want)
    q_taken, state = inp.qmix_mix_inputs(rng, p.config, 40)
    got = backend.fetch(ops.qmix_mix(p, backend.put(q_taken), backend.put(state)))
    assert_matches("qmix_mix", got, REFERENCE.qmix_mix(p, q_taken, state))


# ---------------------------------------------------------------------------------------------- host path


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
        want = REFERENCE.route(q[part], k[part], tau=0.02, k_in=3)
        sliced = type(got)(*(x[part] for x in vars(got).values()))
        assert_matches("route", sliced, want, f"episodes {lo}..{lo + 9}")
    q[577, 3, 100] = np.nan  # in the last chunk: the message counts episodes from the batch start
    with pytest.raises(
        errors.NonFiniteError, match="q must be finite; got NaN or infinity at episode 577, agent 3"
    ):
        cuda.route(q, k, tau=0.02, k_in=3, active=None)


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
        want = REFERENCE.toposort(adj[part], weights=weights[part])
        sliced = type(got)(*(x[part] for x in vars(got).values()))
        assert_matches("toposort", sliced, want, f"graphs {lo}..{lo + 3}")


# -------------------------------------------------------------------------------------------------- errors


@pytest.mark.cuda
def test_route_non_finite_names_the_row_like_the_reference() -> None:
    rng = np.random.default_rng(11)
    q, k = inp.qk(rng, 6, 4, 8)
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
            REFERENCE.route(qq, kk, tau=0.3, k_in=3)
        with pytest.raises(errors.NonFiniteError) as got:
            cuda.route(qq, kk, tau=0.3, k_in=3, active=None)
        assert got.value.arg == name
        assert where in str(got.value)
        assert str(got.value) == str(want.value)


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


@pytest.mark.cuda
def test_qmix_errors_match_the_reference() -> None:
    p = QMixParams.random(QMixConfig(), seed=35)
    obs, adj, hidden, _ = inp.qmix_obs(np.random.default_rng(36), p.config, 6, 3)
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
@pytest.mark.parametrize("backend", DEVICE_ARRAYS)
def test_dlpack_errors(backend: Backend) -> None:
    rng = np.random.default_rng(23)
    q, k = inp.qk(rng, 5, 4, 8)
    bad_k = k.copy()
    bad_k[4, 3, 0] = np.nan
    # device-array calls do not synchronise: the kernel's report comes at synchronize() ...
    cuda.route(backend.put(q), backend.put(bad_k), tau=0.3, k_in=3, active=None)
    with pytest.raises(
        errors.NonFiniteError, match="k must be finite; got NaN or infinity at episode 4, agent 3"
    ) as e:
        cuda.synchronize()
    assert e.value.arg == "k"
    assert "earlier route call" in str(e.value)
    cuda.synchronize()  # reported once
    # ... or at the next call on the device once the kernel has finished (that call then does not run)
    cuda.route(backend.put(q), backend.put(bad_k), tau=0.3, k_in=3, active=None)
    backend._get(backend.put(q))  # a copy to the host on the same stream waits for the kernel (no toporoute)
    with pytest.raises(errors.NonFiniteError, match="episode 4, agent 3"):
        cuda.route(backend.put(q), backend.put(k), tau=0.3, k_in=3, active=None)
    good = backend.fetch(cuda.route(backend.put(q), backend.put(k), tau=0.3, k_in=3, active=None))
    assert_matches("route", good, REFERENCE.route(q, k, tau=0.3, k_in=3))
    with pytest.raises(errors.InvalidArgumentError, match="must live where q does"):
        cuda.route(backend.put(q), k, tau=0.3, k_in=3, active=None)
    # rows are read as vectors: a strided last axis is refused, as by the CPU backend (no silent copy)
    qd, kd = backend.put(q), backend.put(k)
    with pytest.raises(errors.DTypeError, match="q must be contiguous along its last axis") as e:
        cuda.route(qd[:, :, ::2], kd[:, :, ::2], tau=0.3, k_in=3, active=None)
    assert e.value.arg == "q"
    adj = np.ones((2, 3, 3), dtype=bool)
    w = np.ones((2, 3, 3), dtype=np.float32)
    w[1, 0, 2] = -1.0
    w[1, 2, 2] = np.inf  # non-finite weights are reported before negative ones, like the reference
    cuda.toposort(backend.put(adj), weights=backend.put(w), active=None)
    with pytest.raises(
        errors.NonFiniteError, match=r"weights must be finite; got NaN or infinity at \[1, 2, 2\]"
    ):
        cuda.synchronize()
    w[1, 2, 2] = 1.0
    cuda.toposort(backend.put(adj), weights=backend.put(w), active=None)
    with pytest.raises(
        errors.OutOfRangeError, match=r"weights must be >= 0; got a negative weight at \[1, 0, 2\]"
    ):
        cuda.synchronize()
    p = QMixParams.random(QMixConfig(), seed=37)
    obs, qadj, hidden, _ = inp.qmix_obs(rng, p.config, 6, 3)
    hidden[2, 1, 0] = np.nan
    ops.qmix_forward(p, *(backend.put(x) for x in (obs, qadj, hidden)))
    with pytest.raises(
        errors.NonFiniteError, match="hidden must be finite; got NaN or infinity at episode 2, agent 1"
    ):
        cuda.synchronize()
    q_taken, state = inp.qmix_mix_inputs(rng, p.config, 40)
    state[7, 3] = np.nan
    ops.qmix_mix(p, backend.put(q_taken), backend.put(state))
    with pytest.raises(errors.NonFiniteError, match="state must be finite; got NaN or infinity at episode 7"):
        cuda.synchronize()


@pytest.mark.cuda
@pytest.mark.parametrize("backend", DEVICE_ARRAYS)
def test_many_calls_in_flight_recycle_the_error_slots(backend: Backend) -> None:
    # more calls than the 1024 error slots, none waited for: the slots are reused once their calls are done
    rng = np.random.default_rng(24)
    q, k = inp.qk(rng, 2, 4, 8)
    qd, kd = backend.put(q), backend.put(k)
    for _ in range(2500):
        got = cuda.route(qd, kd, tau=0.3, k_in=3, active=None)
    cuda.synchronize()
    assert_matches("route", backend.fetch(got), REFERENCE.route(q, k, tau=0.3, k_in=3))
    bad = q.copy()
    bad[1, 2, 3] = np.nan
    cuda.route(backend.put(bad), kd, tau=0.3, k_in=3, active=None)
    with pytest.raises(errors.NonFiniteError, match="episode 1, agent 2"):
        cuda.synchronize()


@pytest.mark.cuda
def test_synchronize_without_device_work_is_a_no_op() -> None:
    cuda.synchronize()
    cuda.synchronize(0)


# --------------------------------------------------------------------------------------- large Q-Mix batches

# The CUDA Q-Mix kernels size their blocks from the batch and the GPU's SM count: only large batches reach the
# full blocks (64 agent rows), padding rows and a partial last block, so these run where the parity grid does not.
_QMIX_LARGE = [
    pytest.param(QMixConfig(), 2001, 3, id="default-B2001-N3"),
    pytest.param(QMixConfig(), 3001, 5, id="default-B3001-N5"),
    pytest.param(QMixConfig(obs_dim=403, hidden=64, gnn_layers=1), 1500, 7, id="obs403-h64-L1-B1500-N7"),
    pytest.param(
        QMixConfig(obs_dim=5, hidden=8, n_actions=3, head_hidden=6, gnn_layers=2, adj_mode="sym"),
        2500,
        3,
        id="small-sym-B2500-N3",
    ),
]


@pytest.mark.cuda
@pytest.mark.parametrize(("config", "B", "N"), _QMIX_LARGE)
@pytest.mark.parametrize("backend", DEVICE_ARRAYS)
def test_qmix_forward_large_batches(config: QMixConfig, B: int, N: int, backend: Backend) -> None:
    p = QMixParams.random(config, seed=B)
    rng = np.random.default_rng(B + N)
    obs, adj, hidden, active = inp.qmix_obs(rng, p.config, B, N)
    want = REFERENCE.qmix_forward(p, obs, adj, hidden, active=active)
    got = ops.qmix_forward(p, *(backend.put(x) for x in (obs, adj, hidden)), active=backend.put(active))
    assert_matches("qmix_forward", backend.fetch(got), want, f"B={B} N={N}")
    # no hidden state and no mask: the other branches of the kernel
    want = REFERENCE.qmix_forward(p, obs, adj, None)
    got = ops.qmix_forward(p, backend.put(obs), backend.put(adj))
    assert_matches("qmix_forward", backend.fetch(got), want, f"B={B} N={N}, no hidden")
    cuda.synchronize()


@pytest.mark.cuda
@pytest.mark.parametrize(
    ("config", "B"),
    [
        pytest.param(QMixConfig(), 5000, id="default-B5000"),
        pytest.param(QMixConfig(), 70_001, id="default-B70001"),  # the wide mixer blocks (B >= 64 per SM)
        pytest.param(QMixConfig(b1_hidden=True), 70_001, id="b1-hidden-B70001"),
        pytest.param(
            QMixConfig(
                obs_dim=7, hidden=40, n_actions=5, head_hidden=20, n_agents=5, mix_hidden=24, hyper_hidden=40
            ),
            40_000,
            id="odd-B40000",
        ),
    ],
)
@pytest.mark.parametrize("backend", DEVICE_ARRAYS)
def test_qmix_mix_large_batches(config: QMixConfig, B: int, backend: Backend) -> None:
    p = QMixParams.random(config, seed=B)
    q_taken, state = inp.qmix_mix_inputs(np.random.default_rng(B), p.config, B)
    got = backend.fetch(ops.qmix_mix(p, backend.put(q_taken), backend.put(state)))
    assert_matches("qmix_mix", got, REFERENCE.qmix_mix(p, q_taken, state), f"B={B}")
    cuda.synchronize()


@pytest.mark.cuda
@pytest.mark.parametrize("B", [1, 64, 4099])
def test_qmix_numpy_path_large_batches(B: int) -> None:
    p = QMixParams.random(QMixConfig(), seed=5)
    rng = np.random.default_rng(6)
    obs, adj, hidden, active = inp.qmix_obs(rng, p.config, B, 3)
    got = ops.qmix_forward(p, obs, adj, hidden, active=active, backend="cuda")
    assert_matches("qmix_forward", got, REFERENCE.qmix_forward(p, obs, adj, hidden, active=active))
    q_taken, state = inp.qmix_mix_inputs(rng, p.config, B)
    got = ops.qmix_mix(p, q_taken, state, backend="cuda")
    assert_matches("qmix_mix", got, REFERENCE.qmix_mix(p, q_taken, state))
