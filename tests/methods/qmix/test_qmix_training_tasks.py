"""Agent Q-Mix is never evaluated on the tasks its policy was trained on: the checkpoint lists its training task
ids, ``toporoute run qmix`` refuses those tasks (naming them and the checkpoint) or, with
``--drop-trained-tasks``, leaves them out and says so (a log line and run.json's ``task_selection``). A checkpoint
written before the ids were recorded reads them from the train.json beside it, else runs with a warning."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import _humaneval
import pytest
from test_qmix_method import forced_params, reply

from toporoute.cli import main
from toporoute.errors import InvalidArgumentError
from toporoute.llm.scripted import ScriptedEngine
from toporoute.methods import make_method
from toporoute.methods.harness import run_method
from toporoute.types.qmix_params import QMixParams

he = _humaneval.tasks_fixture(3)


def checkpoint(path: Path, task_ids: list[str] | None) -> Path:
    """A policy file as ``toporoute train qmix`` writes one (``task_ids`` None: as written before they were
    recorded)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {} if task_ids is None else {"task_ids": json.dumps(task_ids)}
    forced_params(1).save(path, meta)
    return path


def run(method, tasks, out: Path) -> dict:
    asyncio.run(run_method(method, tasks, ScriptedEngine(reply), out, progress=False))
    return json.loads((out / "run.json").read_text())


def test_trainer_checkpoint_lists_its_training_tasks(he, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the Q-Mix trainer needs torch (in the test extras)")
    from toporoute.methods.qmix.train import TrainConfig, Trainer

    out = tmp_path / "train"
    trainer = Trainer(he[:2], ScriptedEngine(reply), out, train=TrainConfig(episodes=1), progress=False)
    asyncio.run(trainer.run())
    for name in ("policy.safetensors", "best.safetensors"):
        meta = QMixParams.load(out / name).metadata
        assert json.loads(meta["task_ids"]) == ["HumanEval/0", "HumanEval/1"], name


def test_run_refuses_the_checkpoints_training_tasks(he, tmp_path: Path) -> None:
    policy = checkpoint(tmp_path / "train" / "policy.safetensors", ["HumanEval/0", "HumanEval/1"])
    method = make_method("qmix", checkpoint=policy)
    with pytest.raises(InvalidArgumentError, match=r"trained on 2 of the 3 task\(s\)") as err:
        run(method, he, tmp_path / "run" / "qmix")
    assert str(policy) in str(err.value) and "HumanEval/0, HumanEval/1" in str(err.value)
    assert "HumanEval/2" not in str(err.value) and "--drop-trained-tasks" in str(err.value)
    assert not (tmp_path / "run" / "qmix" / "run.json").exists()  # refused before anything was written
    # tasks it was not trained on run as before, and run.json says where the training set came from
    config = run(method, he[2:], tmp_path / "other" / "qmix")
    assert config["task_ids"] == ["HumanEval/2"]
    assert config["task_selection"] == {
        "trained_on": "checkpoint",
        "trained_tasks": 2,
        "on_overlap": "refuse",
        "dropped": [],
    }


def test_cli_refuses_before_the_engine_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = checkpoint(tmp_path / "train" / "policy.safetensors", ["HumanEval/0", "HumanEval/1"])
    argv = ["run", "qmix", "--checkpoint", str(policy), "--limit", "3", "--out", str(tmp_path / "run")]
    # an engine nobody serves: the refusal comes before it is used
    status = main([*argv, "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and "toporoute: error:" in err and "Traceback" not in err
    assert str(policy) in err and "HumanEval/0, HumanEval/1" in err and "--drop-trained-tasks" in err
    assert not (tmp_path / "run" / "qmix").exists()


def test_drop_trained_tasks_leaves_them_out_and_says_so(
    he, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = checkpoint(tmp_path / "train" / "policy.safetensors", ["HumanEval/1"])
    method = make_method("qmix", checkpoint=policy, drop_trained_tasks=True)
    with caplog.at_level(logging.WARNING, logger="toporoute"):
        config = run(method, he, tmp_path / "run" / "qmix")
    assert config["task_ids"] == ["HumanEval/0", "HumanEval/2"]
    assert config["task_selection"]["dropped"] == ["HumanEval/1"]
    assert config["task_selection"]["on_overlap"] == "drop"
    assert "left out 1 task(s)" in config["task_selection"]["message"]
    assert any(
        "left out 1 task(s)" in r.getMessage() and "HumanEval/1" in r.getMessage() for r in caplog.records
    )
    episodes = sorted(p.name for p in (tmp_path / "run" / "qmix" / "episodes").glob("*.json"))
    assert episodes == ["HumanEval-0.json", "HumanEval-2.json"]
    # every task trained on: nothing is left to evaluate
    everything = make_method(
        "qmix",
        checkpoint=checkpoint(tmp_path / "all" / "policy.safetensors", [t.id for t in he]),
        drop_trained_tasks=True,
    )
    with pytest.raises(InvalidArgumentError, match="leaves out all 3 task"):
        run(everything, he, tmp_path / "all-run" / "qmix")


def test_old_checkpoint_reads_the_train_json_beside_it(he, tmp_path: Path) -> None:
    # written before checkpoints listed their tasks, in its training folder (toporoute train qmix's train.json)
    policy = checkpoint(tmp_path / "train" / "policy.safetensors", None)
    (tmp_path / "train" / "train.json").write_text(json.dumps({"v": 1, "task_ids": ["HumanEval/0"]}))
    method = make_method("qmix", checkpoint=policy)
    assert method.policy.train_task_ids == ("HumanEval/0",)
    with pytest.raises(InvalidArgumentError, match="HumanEval/0"):
        run(method, he[:2], tmp_path / "run" / "qmix")
    config = run(method, he[1:2], tmp_path / "other" / "qmix")
    assert config["task_selection"]["trained_on"] == str(tmp_path / "train" / "train.json")


def test_old_checkpoint_without_its_training_folder_runs_with_a_warning(
    he, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # refusing would make every such checkpoint unusable; the run says the overlap could not be checked
    policy = checkpoint(tmp_path / "copied" / "policy.safetensors", None)
    method = make_method("qmix", checkpoint=policy)
    assert method.policy.train_task_ids is None
    with caplog.at_level(logging.WARNING, logger="toporoute"):
        config = run(method, he[:1], tmp_path / "run" / "qmix")
    assert config["task_ids"] == ["HumanEval/0"]
    selection = config["task_selection"]
    assert selection["trained_on"] is None and selection["trained_tasks"] is None
    assert "does not record the tasks it was trained on" in selection["message"]
    assert any("does not record the tasks" in r.getMessage() for r in caplog.records)


def test_malformed_task_ids_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "policy.safetensors"
    forced_params(1).save(path, {"task_ids": '{"not": "a list"}'})
    with pytest.raises(InvalidArgumentError, match="task_ids must be a JSON list"):
        make_method("qmix", checkpoint=path)
