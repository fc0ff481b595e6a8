"""The Agent Q-Mix trainer (targets, target updates, checkpoints, resume) and a trained checkpoint in the benchmark
harness and report. Training runs PyTorch: this module skips, with that reason, where torch is not installed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import _humaneval
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the Q-Mix trainer needs torch (in the test extras)")

from test_qmix_method import reply  # the scripted replies

from toporoute import ops
from toporoute.errors import InvalidArgumentError
from toporoute.llm.scripted import ScriptedEngine
from toporoute.methods import make_method
from toporoute.methods.harness import run_method
from toporoute.methods.qmix import ACTIONS
from toporoute.methods.qmix.model import QMixNets
from toporoute.methods.qmix.train import TrainConfig, Trainer, epsilon_at
from toporoute.tasks import Task
from toporoute.types.qmix_params import QMixParams

he = _humaneval.tasks_fixture(3)


def he_engine() -> ScriptedEngine:
    return ScriptedEngine(reply)


def test_trainer_trains_saves_and_resumes(he, tmp_path: Path) -> None:
    out = tmp_path / "train"
    train = TrainConfig(episodes=3, batch_size=2, seed=1)
    dtype = {"dtype": "bfloat16", "dtype_reason": "bfloat16: this CPU has native bf16 (avx512_bf16)"}
    trainer = Trainer(he, he_engine(), out, train=train, info=dtype, progress=False)
    result = asyncio.run(trainer.run())
    assert result["grad_steps"] == 2
    assert {k: json.loads((out / "train.json").read_text())[k] for k in dtype} == dtype
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [e["episode"] for e in log] == [0, 1, 2]
    assert log[0]["accuracy"] == 1.0 and log[1]["accuracy"] == 0.0  # only HumanEval/0 has the right answer
    assert log[0]["reward"] == pytest.approx(1.25 - 0.10 * min(log[0]["tokens"] / 10000, 1), abs=1e-5)
    assert [e["epsilon"] for e in log] == pytest.approx([epsilon_at(train, k) for k in range(3)])
    assert log[0]["loss"] is None and log[1]["loss"] is not None
    for name in ("policy.safetensors", "best.safetensors", "state.pt", "train.json", "figures/reward.png"):
        assert (out / name).is_file(), name

    # the checkpoint drives the compiled forward exactly like the trained torch network
    params = QMixParams.load(out / "policy.safetensors")
    assert params.has_mixer and params.metadata["episodes"] == "3" and params.metadata["domains"] == "code"
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 3, 51)).astype(np.float32)
    adj = rng.random((4, 3, 3)) < 0.5
    q, h = ops.qmix_forward(params, obs, adj)
    trainer.nets.eval()
    with torch.no_grad():
        tq, th = trainer.nets.agent(torch.from_numpy(obs), torch.from_numpy(adj))
    assert np.abs(q - tq.numpy()).max() < 1e-5 and np.abs(h - th.numpy()).max() < 1e-5

    # resume: more episodes continue from the saved state; other settings are refused
    # (on a machine whose engine runs in another dtype: recorded, not a setting that must match)
    more = Trainer(
        he,
        he_engine(),
        out,
        train=TrainConfig(episodes=5, batch_size=2, seed=1),
        info={"dtype": "float32", "dtype_reason": "float32: forced by --dtype"},
        progress=False,
    )
    asyncio.run(more.run())
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [e["episode"] for e in log] == [0, 1, 2, 3, 4] and more.grad_steps == 4
    other = Trainer(he, he_engine(), out, train=TrainConfig(episodes=5, batch_size=4, seed=1), progress=False)
    with pytest.raises(InvalidArgumentError, match="other settings"):
        asyncio.run(other.run())


def test_trained_checkpoint_runs_in_the_harness_and_report(he, tmp_path: Path) -> None:
    out = tmp_path / "train"
    asyncio.run(
        Trainer(he[1:2], he_engine(), out, train=TrainConfig(episodes=2, batch_size=2), progress=False).run()
    )
    # evaluated on the other tasks: the one it was trained on is left out (test_qmix_training_tasks.py)
    method = make_method("qmix", checkpoint=out / "policy.safetensors", drop_trained_tasks=True)
    run = tmp_path / "run"
    summary = asyncio.run(run_method(method, he, he_engine(), run / "qmix", progress=False))
    assert summary["episodes"] == 2 and summary["passed"] == 1
    trace = [
        json.loads(line) for line in (run / "qmix" / "traces" / "HumanEval-0.jsonl").read_text().splitlines()
    ]
    assert len(trace) == 2 and all(set(r["actions"].values()) <= set(ACTIONS) for r in trace)
    assert all("waves" in r and "edges" in r for r in trace)
    cfg = json.loads((run / "qmix" / "run.json").read_text())
    assert cfg["params"]["checkpoint"]["episodes"] == "2"
    assert cfg["task_ids"] == ["HumanEval/0", "HumanEval/2"] and cfg["task_selection"]["dropped"] == [
        "HumanEval/1"
    ]
    pytest.importorskip("matplotlib", reason="the report's figures need matplotlib (report extra)")
    from toporoute.trace.report import write_report

    paths = write_report(run)
    html = paths.html.read_text()
    assert "qmix" in html and "CodeWriter_0" in html


def make_trainer(tmp_path: Path, **train) -> Trainer:
    task = Task(id="t", prompt="p", kind="math", answer="1")
    return Trainer([task], he_engine(), tmp_path, train=TrainConfig(**train), progress=False)


def fake_steps(T: int, n: int = 3) -> list[dict]:
    rng = np.random.default_rng(T)
    return [
        {
            "obs": rng.normal(size=(n, 51)).tolist(),
            "adj": np.eye(n, dtype=int).tolist(),
            "actions": rng.integers(0, 6, n).tolist(),
            "state": rng.normal(size=3 * 51 + 3).tolist(),
        }
        for _ in range(T)
    ]


def test_targets_terminal_reward_versus_legacy_broadcast(tmp_path: Path) -> None:
    for legacy in (False, True):
        tr = make_trainer(tmp_path / str(legacy), batch_size=2, legacy_reward_broadcast=legacy)
        tr.push(fake_steps(2), 0.7)
        tr.push(fake_steps(3), -0.2)
        b = tr._batch()
        order = b["mask"].sum(1).argsort()  # the batch is shuffled
        reward, done, mask = (b[k][order].numpy() for k in ("reward", "done", "mask"))
        long = 0.0 if legacy else 1.0
        if legacy:
            assert np.allclose(reward, [[0.7, 0.7, 0], [-0.2, -0.2, -0.2]])
            assert np.allclose(mask, [[1, 0, 0], [1, 1, 0]])
        else:
            assert np.allclose(reward, [[0, 0.7, 0], [0, 0, -0.2]])
            assert np.allclose(mask, [[1, 1, 0], [1, 1, long]])
        assert np.allclose(done, [[0, 1, 0], [0, 0, 1]])


def test_td_loss_matches_a_hand_computation(tmp_path: Path) -> None:
    tr = make_trainer(tmp_path, batch_size=1, gamma=0.9, dropout=0.0, lr=1e-9)
    tr.nets = QMixNets(tr.net_config, dropout=0.0)
    tr.optimizer = torch.optim.Adam(tr.nets.parameters(), lr=1e-9)
    steps = fake_steps(2)
    tr.push(steps, 0.5)
    with torch.no_grad():
        obs = torch.tensor(np.array([s["obs"] for s in steps], np.float32))[None]
        adj = torch.tensor(np.array([s["adj"] for s in steps], np.float32))[None]
        state = torch.tensor(np.array([s["state"] for s in steps], np.float32))
        q = Trainer._unroll(tr.nets, obs, adj)[0]  # (T, n, A)
        acts = torch.tensor([s["actions"] for s in steps])
        q_tot = tr.nets.mixer(q.gather(-1, acts[..., None]).squeeze(-1), state)
        tq = Trainer._unroll(tr.target, obs, adj)[0].max(-1).values
        t_tot = tr.target.mixer(tq, state)
        y = torch.tensor([0.0 + 0.9 * float(t_tot[1]), 0.5])
        expected = float(((q_tot - y) ** 2).mean())
    assert tr.update() == pytest.approx(expected, rel=1e-5)


def test_soft_and_hard_target_updates(tmp_path: Path) -> None:
    tr = make_trainer(tmp_path / "soft", batch_size=1, target_tau=0.5)
    before = [p.detach().clone() for p in tr.target.parameters()]
    tr.push(fake_steps(2), 1.0)
    tr.update()
    for b, t, p in zip(before, tr.target.parameters(), tr.nets.parameters()):
        assert torch.allclose(t, 0.5 * b + 0.5 * p, atol=1e-6)
    hard = make_trainer(tmp_path / "hard", batch_size=1, target_update="hard", target_interval=2)
    hard.push(fake_steps(2), 1.0)
    start = [p.detach().clone() for p in hard.target.parameters()]
    hard.update()
    assert all(torch.equal(a, b) for a, b in zip(start, hard.target.parameters()))
    hard.update()
    assert all(torch.equal(t, p) for t, p in zip(hard.target.parameters(), hard.nets.parameters()))


def test_train_config_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="episodes"):
        TrainConfig(episodes=0)
    with pytest.raises(InvalidArgumentError, match="target_update"):
        TrainConfig(target_update="sometimes")
    assert epsilon_at(TrainConfig(episodes=10), 0) == 1.0
    assert epsilon_at(TrainConfig(episodes=10), 10) == pytest.approx(0.05)
    assert epsilon_at(TrainConfig(episodes=10), 5) == pytest.approx(1.0 - 5 * 0.095)
