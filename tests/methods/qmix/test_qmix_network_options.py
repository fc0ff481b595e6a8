"""Choosing the Agent Q-Mix network: ``QMixConfig.original()`` (the original repository's network, spec §4), the
``--legacy-network`` switch and the per-setting flags of ``toporoute train qmix``, and a checkpoint trained with
them (its config and training dropout recorded, loaded back, and driving the compiled forward like the torch
network). Training runs PyTorch: this module skips, with that reason, where torch is not installed."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from _procs import replay_args

torch = pytest.importorskip("torch", reason="the Q-Mix trainer needs torch (in the test extras)")

from test_qmix_method import reply  # the scripted replies

from toporoute import cli, ops
from toporoute.errors import InvalidArgumentError
from toporoute.llm import ReplayEngine, Structured
from toporoute.llm.scripted import ScriptedEngine
from toporoute.methods.qmix.model import QMixNets
from toporoute.methods.qmix.plugin import (
    QMixNetworkChoice,
    add_qmix_network_options,
    read_qmix_network_options,
)
from toporoute.methods.qmix.train import TrainConfig, Trainer
from toporoute.tasks import Task, load_tasks, write_tasks_jsonl
from toporoute.types.qmix_params import QMixConfig, QMixParams

# spec §4 and §6, the "code" column: every field of the original repository's network for its n = 3 team
ORIGINAL = {
    "obs_dim": 51,
    "hidden": 128,
    "n_actions": 6,
    "head_hidden": 64,
    "gnn_layers": 2,
    "adj_mode": "out_rows",  # mean over the rows of A: node i averages its out-neighbours
    "self_loops": False,  # A @ m / max(rowsum(A), 1) with A from phi, which never adds self-loops
    "n_agents": 3,
    "state_dim": 156,  # n * obs + 3
    "mix_hidden": 64,
    "hyper_hidden": 64,
    "b1_hidden": False,  # hyper_b1 is a single Linear(156, 64)
    "ln_eps": 1e-5,  # torch's LayerNorm default
}


def network(*flags: str) -> QMixNetworkChoice:
    parser = argparse.ArgumentParser()
    add_qmix_network_options(parser)
    return read_qmix_network_options(parser.parse_args(list(flags)))


def test_original_config_is_the_original_network_field_by_field() -> None:
    config = QMixConfig.original()
    assert {f.name for f in fields(QMixConfig)} == set(ORIGINAL)
    for name, value in ORIGINAL.items():
        assert getattr(config, name) == value, name
    # the defaults differ from it in the GNN's neighbourhood only
    default = QMixConfig()
    assert {n for n in ORIGINAL if getattr(default, n) != ORIGINAL[n]} == {"adj_mode", "self_loops"}
    assert QMixConfig.original(n_agents=4, obs_dim=40).state_dim == 4 * 40 + 3


def test_legacy_network_switch_gives_the_original_network_and_dropout() -> None:
    chosen = network("--legacy-network")
    assert chosen == QMixNetworkChoice(QMixConfig.original(), 0.1)
    for name, value in ORIGINAL.items():
        assert getattr(chosen.config, name) == value, name
    # without the switch: the paper's in-neighbours with self-loops, same dropout
    assert network() == QMixNetworkChoice(QMixConfig(), 0.1)
    assert network().config.self_loops and network().config.adj_mode == "in"


@pytest.mark.parametrize(
    ("flags", "field", "value"),
    [
        (["--adj-mode", "out_rows"], "adj_mode", "out_rows"),
        (["--adj-mode", "sym"], "adj_mode", "sym"),
        (["--no-self-loops"], "self_loops", False),
        (["--b1-hidden"], "b1_hidden", True),
        (["--agents", "4"], "n_agents", 4),
        # a flag given with the switch overrides the switch's value
        (["--legacy-network", "--self-loops"], "self_loops", True),
        (["--legacy-network", "--adj-mode", "in"], "adj_mode", "in"),
        (["--legacy-network", "--b1-hidden"], "b1_hidden", True),
    ],
)
def test_each_flag_sets_its_field(flags: list[str], field: str, value: object) -> None:
    chosen = network(*flags)
    assert getattr(chosen.config, field) == value
    base = QMixConfig.original() if "--legacy-network" in flags else QMixConfig()
    others = [f.name for f in fields(QMixConfig) if f.name not in (field, "state_dim")]
    assert all(getattr(chosen.config, n) == getattr(base, n) for n in others)


def test_dropout_flag() -> None:
    assert network("--dropout", "0.3").dropout == 0.3
    assert network("--legacy-network", "--dropout", "0.0").dropout == 0.0
    assert network("--adj-mode", "out_rows").config.self_loops  # --adj-mode alone keeps the self-loops


def test_legacy_network_aggregates_out_neighbours_without_self_loops() -> None:
    nets = QMixNets(QMixConfig.original())
    adj = torch.tensor([[[0, 1, 1], [0, 0, 1], [0, 0, 0]]], dtype=torch.float32)
    e = nets.agent.neighbours(adj, torch.ones(1, 3, dtype=torch.bool))
    assert torch.equal(e, adj)  # the rows of A, nothing on the diagonal
    assert isinstance(nets.mixer.hyper_b1, torch.nn.Linear)


def math_tasks() -> list[Task]:
    return [
        Task(id="m1", kind="math", prompt="What is 2 + 3?", answer="5"),
        Task(id="m2", kind="math", prompt="What is 4 * 3?", answer="12"),
    ]


def test_checkpoint_trained_with_the_legacy_network_round_trips(tmp_path: Path) -> None:
    out = tmp_path / "train"
    chosen = network("--legacy-network", "--dropout", "0.25")
    trainer = Trainer(
        math_tasks(),
        ScriptedEngine(reply),
        out,
        net=chosen.config,
        train=TrainConfig(episodes=2, batch_size=2, dropout=chosen.dropout),
        progress=False,
    )
    assert trainer.nets.agent.dropout.p == 0.25
    asyncio.run(trainer.run())
    assert trainer.grad_steps == 1

    params = QMixParams.load(out / "policy.safetensors")
    assert params.config == QMixConfig.original()
    assert json.loads(params.metadata["train"])["dropout"] == 0.25
    assert json.loads((out / "train.json").read_text())["net"] == {**ORIGINAL}
    # the loaded checkpoint rebuilds the same networks and drives the compiled forward like the torch model
    again = QMixNets(params.config)
    again.load_params(params)
    assert isinstance(again.mixer.hyper_b1, torch.nn.Linear)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 3, 51)).astype(np.float32)
    adj = rng.random((4, 3, 3)) < 0.5
    adj[0] = False  # no edge at all: with no self-loops every node aggregates nothing
    q, h = ops.qmix_forward(params, obs, adj)
    again.eval()
    with torch.no_grad():
        tq, th = again.agent(torch.from_numpy(obs), torch.from_numpy(adj))
    assert np.abs(q - tq.numpy()).max() < 1e-5 and np.abs(h - th.numpy()).max() < 1e-5
    default = QMixNets(QMixConfig())
    default.load_params(params)  # same shapes, other semantics: the forward differs
    with torch.no_grad():
        dq, _ = default.agent(torch.from_numpy(obs), torch.from_numpy(adj))
    assert np.abs(dq.numpy() - q).max() > 1e-4

    # resuming with another network is refused
    train = TrainConfig(episodes=3, batch_size=2, dropout=0.25)
    other = Trainer(math_tasks(), ScriptedEngine(reply), out, train=train, progress=False)
    with pytest.raises(
        InvalidArgumentError,
        match=r"other settings \(before → now: net.adj_mode: \"out_rows\" → \"in\"; net.self_loops: false → true\)",
    ):
        asyncio.run(other.run())


def test_train_command_builds_the_legacy_network(tmp_path: Path) -> None:
    tasks_file = write_tasks_jsonl(math_tasks(), tmp_path / "tasks.jsonl")
    transcript = tmp_path / "transcript.jsonl"
    settings = TrainConfig(episodes=2, batch_size=2, dropout=0.2)

    async def record() -> None:  # the same episodes as the command below, recorded from the scripted engine
        engine = Structured(ReplayEngine(transcript, ScriptedEngine(reply)))
        trainer = Trainer(
            load_tasks(str(tasks_file)),
            engine,
            tmp_path / "scratch",
            net=QMixConfig.original(),
            train=settings,
            progress=False,
        )
        await trainer.run()
        await engine.aclose()

    asyncio.run(record())
    out = tmp_path / "train"
    code = cli.main(
        [
            "train",
            "qmix",
            "--legacy-network",
            "--dropout",
            "0.2",
            "--episodes",
            "2",
            "--batch-size",
            "2",
            *replay_args(tasks_file, transcript, out),
            "--no-progress",
        ]
    )
    assert code == 0
    params = QMixParams.load(out / "policy.safetensors")
    assert params.config == QMixConfig.original()
    assert json.loads(params.metadata["train"])["dropout"] == 0.2
    recorded = QMixParams.load(tmp_path / "scratch" / "policy.safetensors")
    assert all(np.array_equal(params.tensors[k], recorded.tensors[k]) for k in recorded.tensors)
