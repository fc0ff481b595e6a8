"""The compiled Agent Q-Mix networks (backend ``cpu``, every supported SIMD level) against the numpy reference
and the PyTorch training model: outputs within 1e-5, the reference's errors, strided and single-sample inputs,
the OpenMP path, checkpoints."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from _checks import check

from toporoute import _core, errors, ops
from toporoute.backends import cpu
from toporoute.backends import reference as ref
from toporoute.ops.qmix_params import ADJ_MODES, QMixConfig, QMixParams

ISAS = list(_core.build_info()["simd"]["supported"])
ATOL = 1e-5

# Shapes that are not multiples of the 16-float panels, and the spec's variants.
ODD = QMixConfig(
    obs_dim=7, hidden=40, n_actions=5, head_hidden=20, n_agents=5, mix_hidden=24, hyper_hidden=40
)
CONFIGS = {
    "default": QMixConfig(),
    "obs403-h64-L0": QMixConfig(obs_dim=403, hidden=64, gnn_layers=0),
    "obs403-h64-L1": QMixConfig(obs_dim=403, hidden=64, gnn_layers=1),
    "obs403-h64-L3": QMixConfig(obs_dim=403, hidden=64, gnn_layers=3),
    "odd": ODD,
    "odd-b1-hidden": dataclasses.replace(ODD, b1_hidden=True),
}


def inputs(
    rng: np.random.Generator, c: QMixConfig, B: int, N: int, *, hidden: bool = True, active: bool = True
):
    """obs, adj (about 40% edges, some self-loops), hidden (or None), active (about 75%, or None)."""
    obs = rng.standard_normal((B, N, c.obs_dim), dtype=np.float32)
    adj = rng.random((B, N, N)) < 0.4
    hid = rng.standard_normal((B, N, c.hidden), dtype=np.float32) if hidden else None
    act = rng.random((B, N)) < 0.75 if active else None
    return obs, adj, hid, act


def mix_inputs(rng: np.random.Generator, c: QMixConfig, B: int) -> tuple[np.ndarray, np.ndarray]:
    return (
        rng.standard_normal((B, c.n_agents), dtype=np.float32),
        rng.standard_normal((B, c.state_dim), dtype=np.float32),
    )


def assert_close(got: np.ndarray, want: np.ndarray, ctx: str) -> float:
    assert got.dtype == np.float32 and got.shape == want.shape, (
        f"{ctx}: {got.dtype} {got.shape} vs {want.shape}"
    )
    err = float(np.abs(got.astype(np.float64) - want).max(initial=0.0))
    assert err <= ATOL, f"{ctx}: max abs error {err:.3g} > {ATOL}"
    return err


def assert_step(got, want, ctx: str) -> None:
    assert_close(got[0], want[0], f"q, {ctx}")
    assert_close(got[1], want[1], f"hidden, {ctx}")


# ------------------------------------------------------------------------------------------------- parity


@pytest.mark.parametrize("adj_mode", ADJ_MODES)
@pytest.mark.parametrize("self_loops", [True, False])
def test_forward_matches_reference_grid(adj_mode: str, self_loops: bool) -> None:
    p = QMixParams.random(QMixConfig(adj_mode=adj_mode, self_loops=self_loops), seed=1)
    rng = np.random.default_rng(2)
    for B in (1, 3, 64, 257):
        for N in (1, 3, 4, 16):
            if B * N > 1100:
                continue  # the reference takes seconds there; B=257 runs at N=1, 3, 4
            for hidden, active in ((True, True), (False, False), (True, False), (False, True)):
                obs, adj, hid, act = inputs(rng, p.config, B, N, hidden=hidden, active=active)
                want = ref.qmix_forward(p, obs, adj, hid, active=act)
                for isa in ISAS:
                    got = cpu.qmix_forward(p, obs, adj, hid, active=act, isa=isa)
                    assert_step(got, want, f"{adj_mode} self_loops={self_loops} B={B} N={N} isa={isa}")
                    if act is not None:
                        assert not got[0][~act].any() and not got[1][~act].any()


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("isa", ISAS)
def test_forward_and_mix_match_reference_for_other_shapes(name: str, isa: str) -> None:
    p = QMixParams.random(CONFIGS[name], seed=3)
    c = p.config
    rng = np.random.default_rng(4)
    for B, N in ((1, c.n_agents), (5, 4), (70, 3)):
        obs, adj, hid, act = inputs(rng, c, B, N)
        assert_step(
            cpu.qmix_forward(p, obs, adj, hid, active=act, isa=isa),
            ref.qmix_forward(p, obs, adj, hid, active=act),
            f"{name} B={B} N={N} isa={isa}",
        )
    for B in (1, 3, 64, 257):
        q_taken, state = mix_inputs(rng, c, B)
        want = ref.qmix_mix(p, q_taken, state)
        assert_close(cpu.qmix_mix(p, q_taken, state, isa=isa), want, f"mix {name} B={B} isa={isa}")


@pytest.mark.parametrize("b1_hidden", [False, True])
@pytest.mark.parametrize("isa", ISAS)
def test_mix_matches_reference(b1_hidden: bool, isa: str) -> None:
    p = QMixParams.random(QMixConfig(b1_hidden=b1_hidden), seed=5)
    rng = np.random.default_rng(6)
    for B in (1, 3, 64, 257, 1000):
        q_taken, state = mix_inputs(rng, p.config, B)
        want = ref.qmix_mix(p, q_taken, state)
        assert_close(cpu.qmix_mix(p, q_taken, state, isa=isa), want, f"b1_hidden={b1_hidden} B={B} isa={isa}")


@pytest.mark.parametrize("adj_mode", ADJ_MODES)
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("b1_hidden", [False, True])
def test_matches_torch_model(adj_mode: str, self_loops: bool, b1_hidden: bool) -> None:
    torch = pytest.importorskip("torch", reason="the PyTorch training model is the second reference")
    from toporoute.methods.qmix.model import QMixNets

    torch.manual_seed(0)
    cfg = QMixConfig(adj_mode=adj_mode, self_loops=self_loops, b1_hidden=b1_hidden, n_agents=4)
    nets = QMixNets(cfg).eval()
    p = nets.to_params()
    rng = np.random.default_rng(7)
    for B, N, hidden in ((1, 4, False), (8, 4, True), (64, 3, True), (257, 4, True)):
        obs, adj, hid, act = inputs(rng, cfg, B, N, hidden=hidden)
        got = ops.qmix_forward(p, obs, adj, hid, active=act, backend="cpu")
        q_taken, state = mix_inputs(rng, cfg, B)
        with torch.inference_mode():
            tq, th = nets.agent(
                torch.from_numpy(obs),
                torch.from_numpy(adj),
                None if hid is None else torch.from_numpy(hid),
                torch.from_numpy(act),
            )
            tm = nets.mixer(torch.from_numpy(q_taken), torch.from_numpy(state))
        assert_step(got, (tq.numpy(), th.numpy()), f"torch {adj_mode} {self_loops} B={B}")
        mix = ops.qmix_mix(p, q_taken, state, backend="cpu")
        assert_close(mix, tm.numpy().astype(np.float64), f"torch mixer b1_hidden={b1_hidden} B={B}")


def test_every_episode_is_computed_alone() -> None:
    # Tiles, register blocks and threads never mix rows: a batch gives each episode's B=1 result bit for bit.
    p = QMixParams.random(QMixConfig(), seed=8)
    rng = np.random.default_rng(9)
    obs, adj, hid, act = inputs(rng, p.config, 300, 3)
    q_taken, state = mix_inputs(rng, p.config, 300)
    for isa in ISAS:
        q, h = cpu.qmix_forward(p, obs, adj, hid, active=act, isa=isa)
        mix = cpu.qmix_mix(p, q_taken, state, isa=isa)
        for b in (0, 1, 41, 42, 150, 299):
            q1, h1 = cpu.qmix_forward(
                p, obs[b : b + 1], adj[b : b + 1], hid[b : b + 1], active=act[b : b + 1], isa=isa
            )
            np.testing.assert_array_equal(q1[0], q[b], err_msg=f"q episode {b} isa={isa}")
            np.testing.assert_array_equal(h1[0], h[b], err_msg=f"hidden episode {b} isa={isa}")
            np.testing.assert_array_equal(
                cpu.qmix_mix(p, q_taken[b : b + 1], state[b : b + 1], isa=isa)[0], mix[b]
            )


def test_strided_inputs_are_read_in_place() -> None:
    p = QMixParams.random(QMixConfig(), seed=10)
    rng = np.random.default_rng(11)
    obs, adj, hid, act = inputs(rng, p.config, 12, 6)
    want = cpu.qmix_forward(p, obs[:, ::2], adj[:, ::2, ::2], hid[:, ::2], active=act[:, ::2].copy())
    views = (
        np.asfortranarray(obs)[:, ::2],
        np.asfortranarray(adj)[:, ::2, ::2],
        hid[:, ::-1][:, ::-2],
        np.asfortranarray(act)[:, ::2],
    )
    for x, contiguous in zip(views, (obs[:, ::2], adj[:, ::2, ::2], hid[:, ::2], act[:, ::2])):
        np.testing.assert_array_equal(x, contiguous)
    got = ops.qmix_forward(p, *views[:3], active=views[3], backend="cpu")
    np.testing.assert_array_equal(got.q, want[0])
    np.testing.assert_array_equal(got.hidden, want[1])
    q_taken, state = mix_inputs(rng, p.config, 9)
    np.testing.assert_array_equal(
        ops.qmix_mix(p, np.asfortranarray(q_taken), state[::-1][::-1], backend="cpu"),
        cpu.qmix_mix(p, q_taken, state),
    )


def test_single_sample_forms() -> None:
    p = QMixParams.random(QMixConfig(), seed=12)
    rng = np.random.default_rng(13)
    obs, adj, hid, act = inputs(rng, p.config, 1, 3)
    batched = ops.qmix_forward(p, obs, adj, hid, active=act, backend="cpu")
    single = ops.qmix_forward(p, obs[0], adj[0], hid[0], active=act[0], backend="cpu")
    assert isinstance(single, ops.QMixStep)
    assert single.q.shape == (3, 6) and single.hidden.shape == (3, 128)
    np.testing.assert_array_equal(single.q, batched.q[0])
    np.testing.assert_array_equal(single.hidden, batched.hidden[0])
    q, h = ops.qmix_forward(p, obs[0], adj[0], backend="cpu")  # unpacks; round 0
    assert_step((q[None], h[None]), ref.qmix_forward(p, obs, adj, None, active=None), "single, round 0")
    q_taken, state = mix_inputs(rng, p.config, 1)
    one = ops.qmix_mix(p, q_taken[0], state[0], backend="cpu")
    assert one.shape == () and one.dtype == np.float32
    assert abs(float(one) - float(ref.qmix_mix(p, q_taken, state)[0])) <= ATOL


def test_empty_batch() -> None:
    p = QMixParams.random(QMixConfig(), seed=14)
    q, h = ops.qmix_forward(p, np.zeros((0, 3, 51), np.float32), np.zeros((0, 3, 3), bool), backend="cpu")
    assert q.shape == (0, 3, 6) and h.shape == (0, 3, 128)
    assert ops.qmix_mix(
        p, np.zeros((0, 3), np.float32), np.zeros((0, 156), np.float32), backend="cpu"
    ).shape == (0,)


def test_concurrent_callers_share_weights() -> None:
    p = QMixParams.random(QMixConfig(), seed=15)
    rng = np.random.default_rng(16)
    batches = [inputs(rng, p.config, B, 4) for B in (1, 2, 7, 64, 130) * 4]
    want = [cpu.qmix_forward(p, o, a, h, active=m) for o, a, h, m in batches]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda x: cpu.qmix_forward(p, x[0], x[1], x[2], active=x[3]), batches))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g[0], w[0])
        np.testing.assert_array_equal(g[1], w[1])
    assert cpu.qmix_weights(p) is p._packed["cpu"]  # packed once


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    p = QMixParams.random(QMixConfig(b1_hidden=True, adj_mode="sym"), seed=17)
    path = tmp_path / "policy.safetensors"
    p.save(path, {"note": "round trip"})
    loaded = QMixParams.load(path)
    assert loaded.config == p.config and loaded.metadata["note"] == "round trip"
    rng = np.random.default_rng(18)
    obs, adj, hid, act = inputs(rng, p.config, 5, 3)
    q_taken, state = mix_inputs(rng, p.config, 5)
    for backend in ("reference", "cpu"):
        a = ops.qmix_forward(p, obs, adj, hid, active=act, backend=backend)
        b = ops.qmix_forward(loaded, obs, adj, hid, active=act, backend=backend)
        np.testing.assert_array_equal(a.q, b.q)
        np.testing.assert_array_equal(a.hidden, b.hidden)
        np.testing.assert_array_equal(
            ops.qmix_mix(p, q_taken, state, backend=backend),
            ops.qmix_mix(loaded, q_taken, state, backend=backend),
        )


# ------------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_non_finite_inputs_name_the_argument_like_the_reference(backend: str) -> None:
    p = QMixParams.random(QMixConfig(), seed=19)
    rng = np.random.default_rng(20)
    obs, adj, hid, act = inputs(rng, p.config, 200, 3)
    cases = [("obs", 150, 2, np.nan), ("hidden", 3, 1, np.inf), ("obs", 199, 0, -np.inf)]
    for name, b, n, value in cases:
        o, h = obs.copy(), hid.copy()
        (o if name == "obs" else h)[b, n, 5] = value
        if name == "obs":
            h[b - 1, 0, 0] = np.nan  # obs is checked over the whole batch before hidden
        act_b = act.copy()
        act_b[b, n] = False  # inactive agents' inputs are checked too
        with pytest.raises(errors.NonFiniteError) as excinfo:
            ops.qmix_forward(p, o, adj, h, active=act_b, backend=backend)
        check(excinfo, errors.NonFiniteError, name, f"episode {b}, agent {n}")
    q_taken, state = mix_inputs(rng, p.config, 100)
    for name, b in (("q_taken", 70), ("state", 3)):
        qt, st = q_taken.copy(), state.copy()
        (qt if name == "q_taken" else st)[b, 0] = np.nan
        if name == "q_taken":
            st[0, 0] = np.inf
        with pytest.raises(errors.NonFiniteError) as excinfo:
            ops.qmix_mix(p, qt, st, backend=backend)
        check(excinfo, errors.NonFiniteError, name, f"episode {b}")


def test_non_finite_messages_equal_the_reference() -> None:
    p = QMixParams.random(QMixConfig(), seed=21)
    obs, adj, hid, _ = inputs(np.random.default_rng(22), p.config, 4, 3)
    hid[2, 1, 0] = np.nan
    messages = []
    for backend in ("reference", "cpu"):
        with pytest.raises(errors.NonFiniteError) as excinfo:
            ops.qmix_forward(p, obs, adj, hid, backend=backend)
        messages.append(str(excinfo.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_bad_shapes_and_dtypes(backend: str) -> None:
    p = QMixParams.random(QMixConfig(), seed=23)
    obs, adj, hid, act = inputs(np.random.default_rng(24), p.config, 2, 3)
    bad = [
        (errors.DTypeError, "obs", {"obs": obs.astype(np.float64)}),
        (errors.ShapeError, "obs", {"obs": obs[..., :50]}),
        (errors.ShapeError, "obs", {"obs": obs[0, 0]}),
        (errors.ShapeError, "adj", {"adj": adj[:, :, :2]}),
        (errors.ShapeError, "adj", {"adj": adj[:1]}),
        (errors.DTypeError, "adj", {"adj": adj.astype(np.int8)}),
        (errors.ShapeError, "hidden", {"hidden": hid[..., :64]}),
        (errors.DTypeError, "hidden", {"hidden": hid.astype(np.float16)}),
        (errors.ShapeError, "active", {"active": act[:, :2]}),
        (errors.DTypeError, "active", {"active": act.astype(np.int32)}),
    ]
    for cls, arg, change in bad:
        kw = {"obs": obs, "adj": adj, "hidden": hid, "active": act, **change}
        with pytest.raises(cls) as excinfo:
            ops.qmix_forward(p, kw["obs"], kw["adj"], kw["hidden"], active=kw["active"], backend=backend)
        check(excinfo, cls, arg)
    q_taken, state = mix_inputs(np.random.default_rng(25), p.config, 2)
    for cls, arg, qt, st in (
        (errors.ShapeError, "q_taken", q_taken[:, :2], state),
        (errors.ShapeError, "state", q_taken, state[:, :100]),
        (errors.ShapeError, "state", q_taken, state[:1]),
        (errors.DTypeError, "q_taken", q_taken.astype(np.float64), state),
    ):
        with pytest.raises(cls) as excinfo:
            ops.qmix_mix(p, qt, st, backend=backend)
        check(excinfo, cls, arg)
    with pytest.raises(errors.InvalidArgumentError) as excinfo:
        ops.qmix_forward({"agent.input.weight": 0}, obs, adj, backend=backend)
    check(excinfo, errors.InvalidArgumentError, "params")


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_mix_without_mixer(backend: str) -> None:
    p = QMixParams.random(QMixConfig(), seed=26, mixer=False)
    assert not p.has_mixer
    obs, adj, _, _ = inputs(np.random.default_rng(27), p.config, 2, 3)
    ops.qmix_forward(p, obs, adj, backend=backend)  # the agent network alone works
    with pytest.raises(errors.InvalidArgumentError) as excinfo:
        ops.qmix_mix(p, np.zeros((2, 3), np.float32), np.zeros((2, 156), np.float32), backend=backend)
    check(excinfo, errors.InvalidArgumentError, "params", "mixer")


def test_core_checks_direct_calls() -> None:
    # The binding is memory-safe on its own: shapes against the packed config, dtypes, ranks.
    p = QMixParams.random(QMixConfig(), seed=28)
    w = cpu.qmix_weights(p)
    obs, adj, hid, act = inputs(np.random.default_rng(29), p.config, 2, 3)
    calls = [
        (errors.ShapeError, "obs", (obs[..., :40], adj, hid, act)),
        (errors.ShapeError, "adj", (obs, adj[:, :2], hid, act)),
        (errors.ShapeError, "hidden", (obs, adj, hid[:1], act)),
        (errors.ShapeError, "active", (obs, adj, hid, act[:1])),
        (errors.DTypeError, "obs", (obs.astype(np.float64), adj, hid, act)),
        (errors.DTypeError, "adj", (obs, adj.view(np.uint8), hid, act)),
        (errors.ShapeError, "obs", (obs[0], adj, hid, act)),
        (errors.DTypeError, "obs", (obs.tolist(), adj, hid, act)),
    ]
    for cls, arg, args in calls:
        with pytest.raises(cls) as excinfo:
            _core.qmix_forward(w, *args)
        check(excinfo, cls, arg)
    with pytest.raises(errors.ShapeError) as excinfo:
        _core.qmix_mix(w, np.zeros((2, 4), np.float32), np.zeros((2, 156), np.float32))
    check(excinfo, errors.ShapeError, "q_taken")
    with pytest.raises(errors.InvalidArgumentError) as excinfo:
        _core.qmix_forward(w, obs, adj, hid, act, "neon")
    check(excinfo, errors.InvalidArgumentError, "isa")
    arrays = p.agent_arrays()
    with pytest.raises(errors.ShapeError) as excinfo:
        _core.QMixWeights(p.config, [arrays[0][:, :10], *arrays[1:]], None)
    check(excinfo, errors.ShapeError, "params", "agent.input.weight")
    with pytest.raises(errors.InvalidArgumentError) as excinfo:
        _core.QMixWeights(p.config, arrays[:-1], None)
    check(excinfo, errors.InvalidArgumentError, "params")
    with pytest.raises(errors.DTypeError) as excinfo:
        _core.QMixWeights(p.config, [np.asfortranarray(arrays[0]), *arrays[1:]], None)
    check(excinfo, errors.DTypeError, "params", "C-contiguous")
    assert not _core.QMixWeights(p.config, arrays, None).has_mixer and w.has_mixer and w.nbytes > 4 * 340_000


_SIMD_ENV = """
import json
import numpy as np
from toporoute import errors, ops
from toporoute.ops.qmix_params import QMixConfig, QMixParams
p = QMixParams.random(QMixConfig(), seed=0)
try:
    q, h = ops.qmix_forward(p, np.ones((1, 3, 51), np.float32), np.eye(3, dtype=bool)[None], backend="cpu")
    res = ["ok", q.round(5).tolist()]
except errors.ToporouteError as exc:
    res = [type(exc).__name__, exc.arg]
print(json.dumps(res))
"""


def test_simd_environment_override() -> None:
    # TOPOROUTE_SIMD picks the kernels process-wide, exactly as for route (tests/test_layering.py).
    def run(value: str | None) -> list:
        env = {k: v for k, v in os.environ.items() if k not in ("TOPOROUTE_SIMD", "TOPOROUTE_BACKEND")}
        if value is not None:
            env["TOPOROUTE_SIMD"] = value
        out = subprocess.run(
            [sys.executable, "-c", _SIMD_ENV], env=env, capture_output=True, text=True, check=True
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    default = run(None)
    assert default[0] == "ok"
    for isa in ISAS:
        got = run(isa)
        assert got[0] == "ok" and np.abs(np.array(got[1]) - np.array(default[1])).max() <= ATOL
    assert run("bogus") == ["InvalidArgumentError", "TOPOROUTE_SIMD"]
