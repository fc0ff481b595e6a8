"""The Agent Q-Mix networks beyond parity (tests/ops/test_parity.py holds every backend to the numpy reference
and the PyTorch training model): episodes computed alone, weights shared by concurrent callers and packed
once, checkpoints, the reference's errors on every host backend, the binding's own checks and
TOPOROUTE_SIMD."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _inputs as inp
import numpy as np
import pytest
from _backends import (
    ACTIVE_ISA,
    ISAS,
    TOLERANCES,
    Backend,
    assert_matches,
    core,
    needs_core,
    on_backend_names,
    on_backends,
)
from _checks import check

from toporoute import errors, ops
from toporoute.backends import cpu
from toporoute.types.qmix_params import QMixConfig, QMixParams

# ------------------------------------------------------------------------------------------------- the core


@on_backends("qmix_forward", reference=False, cuda=False)
def test_every_episode_is_computed_alone(backend: Backend) -> None:
    # Tiles, register blocks and threads never mix rows: a batch gives each episode's B=1 result bit for bit at
    # one SIMD level. Where no level is named and the process's is amx, the batch of 300 runs on the AMX tiles and
    # one episode at avx512 (cpu.simd_level): then they agree within the levels' tolerance.
    p = QMixParams.random(QMixConfig(), seed=8)
    rng = np.random.default_rng(9)
    obs, adj, hid, act = inp.qmix_obs(rng, p.config, 300, 3)
    q_taken, state = inp.qmix_mix_inputs(rng, p.config, 300)
    step = backend.qmix_forward(p, obs, adj, hid, active=act)
    mix = backend.qmix_mix(p, q_taken, state)
    by_size = backend.name == "cpu" and backend.isa == ACTIVE_ISA  # called without isa=: its level by size
    for b in (0, 1, 41, 42, 150, 299):
        one = slice(b, b + 1)
        same = {
            op: not by_size or cpu.simd_level(op, (p, x)) == cpu.simd_level(op, (p, x[one]))
            for op, x in (("qmix_forward", obs), ("qmix_mix", q_taken))
        }
        single = backend.qmix_forward(p, obs[one], adj[one], hid[one], active=act[one])
        want = ops.QMixStep(step.q[one], step.hidden[one])
        assert_matches("qmix_forward", single, want, f"episode {b}", exact=same["qmix_forward"])
        got = backend.qmix_mix(p, q_taken[one], state[one])
        assert_matches("qmix_mix", got, mix[one], f"episode {b}", exact=same["qmix_mix"])


@needs_core
def test_concurrent_callers_share_weights() -> None:
    p = QMixParams.random(QMixConfig(), seed=15)
    rng = np.random.default_rng(16)
    batches = [inp.qmix_obs(rng, p.config, B, 4) for B in (1, 2, 7, 64, 130) * 4]
    want = [cpu.qmix_forward(p, o, a, h, active=m) for o, a, h, m in batches]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda x: cpu.qmix_forward(p, x[0], x[1], x[2], active=x[3]), batches))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g[0], w[0])
        np.testing.assert_array_equal(g[1], w[1])
    assert cpu.qmix_weights(p) is p._packed["cpu"]  # packed once


@on_backends("qmix_forward", simd_levels=False)
def test_checkpoint_round_trip(backend: Backend, tmp_path: Path) -> None:
    p = QMixParams.random(QMixConfig(b1_hidden=True, adj_mode="sym"), seed=17)
    path = tmp_path / "policy.safetensors"
    p.save(path, {"note": "round trip"})
    loaded = QMixParams.load(path)
    assert loaded.config == p.config and loaded.metadata["note"] == "round trip"
    rng = np.random.default_rng(18)
    obs, adj, hid, act = inp.qmix_obs(rng, p.config, 5, 3)
    q_taken, state = inp.qmix_mix_inputs(rng, p.config, 5)
    a = backend.qmix_forward(p, obs, adj, hid, active=act)
    b = backend.qmix_forward(loaded, obs, adj, hid, active=act)
    assert_matches("qmix_forward", b, a, "loaded", exact=True)
    assert_matches(
        "qmix_mix", backend.qmix_mix(loaded, q_taken, state), backend.qmix_mix(p, q_taken, state), exact=True
    )


# ------------------------------------------------------------------------------------------------- errors


@on_backends("qmix_forward", simd_levels=False, cuda=False)
def test_non_finite_inputs_name_the_argument_like_the_reference(backend: Backend) -> None:
    p = QMixParams.random(QMixConfig(), seed=19)
    rng = np.random.default_rng(20)
    obs, adj, hid, act = inp.qmix_obs(rng, p.config, 200, 3)
    cases = [("obs", 150, 2, np.nan), ("hidden", 3, 1, np.inf), ("obs", 199, 0, -np.inf)]
    for name, b, n, value in cases:
        o, h = obs.copy(), hid.copy()
        (o if name == "obs" else h)[b, n, 5] = value
        if name == "obs":
            h[b - 1, 0, 0] = np.nan  # obs is checked over the whole batch before hidden
        act_b = act.copy()
        act_b[b, n] = False  # inactive agents' inputs are checked too
        with pytest.raises(errors.NonFiniteError) as excinfo:
            backend.qmix_forward(p, o, adj, h, active=act_b)
        check(excinfo, errors.NonFiniteError, name, f"episode {b}, agent {n}")
    q_taken, state = inp.qmix_mix_inputs(rng, p.config, 100)
    for name, b in (("q_taken", 70), ("state", 3)):
        qt, st = q_taken.copy(), state.copy()
        (qt if name == "q_taken" else st)[b, 0] = np.nan
        if name == "q_taken":
            st[0, 0] = np.inf
        with pytest.raises(errors.NonFiniteError) as excinfo:
            backend.qmix_mix(p, qt, st)
        check(excinfo, errors.NonFiniteError, name, f"episode {b}")


@on_backend_names("qmix_forward", reference=False)
def test_non_finite_messages_equal_the_reference(backend: str) -> None:
    p = QMixParams.random(QMixConfig(), seed=21)
    obs, adj, hid, _ = inp.qmix_obs(np.random.default_rng(22), p.config, 4, 3)
    hid[2, 1, 0] = np.nan
    messages = []
    for name in ("reference", backend):
        with pytest.raises(errors.NonFiniteError) as excinfo:
            ops.qmix_forward(p, obs, adj, hid, backend=name)
        messages.append(str(excinfo.value))
    assert messages[0] == messages[1]


@on_backends("qmix_forward", simd_levels=False, cuda=False)
def test_bad_shapes_and_dtypes(backend: Backend) -> None:
    p = QMixParams.random(QMixConfig(), seed=23)
    obs, adj, hid, act = inp.qmix_obs(np.random.default_rng(24), p.config, 2, 3)
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
            backend.qmix_forward(p, kw["obs"], kw["adj"], kw["hidden"], active=kw["active"])
        check(excinfo, cls, arg)
    q_taken, state = inp.qmix_mix_inputs(np.random.default_rng(25), p.config, 2)
    for cls, arg, qt, st in (
        (errors.ShapeError, "q_taken", q_taken[:, :2], state),
        (errors.ShapeError, "state", q_taken, state[:, :100]),
        (errors.ShapeError, "state", q_taken, state[:1]),
        (errors.DTypeError, "q_taken", q_taken.astype(np.float64), state),
    ):
        with pytest.raises(cls) as excinfo:
            backend.qmix_mix(p, qt, st)
        check(excinfo, cls, arg)
    with pytest.raises(errors.InvalidArgumentError) as excinfo:
        backend.qmix_forward({"agent.input.weight": 0}, obs, adj)
    check(excinfo, errors.InvalidArgumentError, "params")


@on_backends("qmix_forward", simd_levels=False, cuda=False)
def test_mix_without_mixer(backend: Backend) -> None:
    p = QMixParams.random(QMixConfig(), seed=26, mixer=False)
    assert not p.has_mixer
    obs, adj, _, _ = inp.qmix_obs(np.random.default_rng(27), p.config, 2, 3)
    backend.qmix_forward(p, obs, adj)  # the agent network alone works
    with pytest.raises(errors.InvalidArgumentError) as excinfo:
        backend.qmix_mix(p, np.zeros((2, 3), np.float32), np.zeros((2, 156), np.float32))
    check(excinfo, errors.InvalidArgumentError, "params", "mixer")


@needs_core
def test_core_checks_direct_calls() -> None:
    # The binding is memory-safe on its own: shapes against the packed config, dtypes, ranks.
    p = QMixParams.random(QMixConfig(), seed=28)
    w = cpu.qmix_weights(p)
    obs, adj, hid, act = inp.qmix_obs(np.random.default_rng(29), p.config, 2, 3)
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
            core.qmix_forward(w, *args)
        check(excinfo, cls, arg)
    with pytest.raises(errors.ShapeError) as excinfo:
        core.qmix_mix(w, np.zeros((2, 4), np.float32), np.zeros((2, 156), np.float32))
    check(excinfo, errors.ShapeError, "q_taken")
    with pytest.raises(errors.InvalidArgumentError) as excinfo:
        core.qmix_forward(w, obs, adj, hid, act, "neon")
    check(excinfo, errors.InvalidArgumentError, "isa")
    arrays = p.agent_arrays()
    with pytest.raises(errors.ShapeError) as excinfo:
        core.QMixWeights(p.config, [arrays[0][:, :10], *arrays[1:]], None)
    check(excinfo, errors.ShapeError, "params", "agent.input.weight")
    with pytest.raises(errors.InvalidArgumentError) as excinfo:
        core.QMixWeights(p.config, arrays[:-1], None)
    check(excinfo, errors.InvalidArgumentError, "params")
    with pytest.raises(errors.DTypeError) as excinfo:
        core.QMixWeights(p.config, [np.asfortranarray(arrays[0]), *arrays[1:]], None)
    check(excinfo, errors.DTypeError, "params", "C-contiguous")
    assert not core.QMixWeights(p.config, arrays, None).has_mixer and w.has_mixer and w.nbytes > 4 * 340_000


_SIMD_ENV = """
import json
import numpy as np
from toporoute import errors, ops
from toporoute.types.qmix_params import QMixConfig, QMixParams
p = QMixParams.random(QMixConfig(), seed=0)
try:
    q, h = ops.qmix_forward(p, np.ones((1, 3, 51), np.float32), np.eye(3, dtype=bool)[None], backend="cpu")
    res = ["ok", q.round(5).tolist()]
except errors.ToporouteError as exc:
    res = [type(exc).__name__, exc.arg]
print(json.dumps(res))
"""


@needs_core
def test_simd_environment_override() -> None:
    # TOPOROUTE_SIMD picks the kernels process-wide, exactly as for route (tests/project/test_layering.py).
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
        assert (
            got[0] == "ok"
            and np.abs(np.array(got[1]) - np.array(default[1])).max() <= TOLERANCES["qmix_forward.q"].atol
        )
    assert run("bogus") == ["InvalidArgumentError", "TOPOROUTE_SIMD"]


_LEVEL = """
import json
from toporoute import _core
print(json.dumps([_core.qmix_level(op, rows) for op in ("qmix_forward", "qmix_mix") for rows in (1, 15, 16, 63, 64)]))
"""


@needs_core
def test_the_level_of_a_qmix_call_follows_its_size_unless_one_is_named() -> None:
    # the AMX tiles only from enough rows (forward: B * N >= 64, mixer: B >= 16), where the process default is amx;
    # a level named per call or by TOPOROUTE_SIMD runs whatever the size (the parity tests name amx at B = 1)
    from toporoute import _core

    active = _core.build_info()["simd"]["active"]
    small = "avx512" if active == "amx" else active
    want = [small, small, small, small, active] + [small, small, active, active, active]
    assert [
        _core.qmix_level(op, rows) for op in ("qmix_forward", "qmix_mix") for rows in (1, 15, 16, 63, 64)
    ] == want
    for isa in ISAS:
        assert _core.qmix_level("qmix_forward", 1, isa) == isa
        assert cpu.simd_level("qmix_mix", (None, np.zeros((1, 3), np.float32))) == small
    with pytest.raises(ValueError, match="qmix_forward or qmix_mix"):
        _core.qmix_level("route", 1)
    env = {k: v for k, v in os.environ.items() if k != "TOPOROUTE_SIMD"}
    for isa in ISAS:
        out = subprocess.run(
            [sys.executable, "-c", _LEVEL],
            env={**env, "TOPOROUTE_SIMD": isa},
            capture_output=True,
            text=True,
            check=False,
        )
        assert json.loads(out.stdout.strip().splitlines()[-1]) == [isa] * 10, out.stderr[-2000:]
