"""The AutoGen adapter against a real model: DyTopo's Developer and Tester as AssistantAgents whose model client
is the session's shared vLLM engine (the embedded SmolLM2-135M, guided JSON), in a SelectorGroupChat whose next
speaker the real encoder's routing picks, for two turns on the first HumanEval problem; the run is scored and
``toporoute report`` draws it.

The 135M model's answers are not meaningful; this checks the path. Kept to two calls of at most 192 tokens."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from _shared_vllm import NEEDS_VLLM

pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext.models.replay")

from _framework_models import engine_model_client, engine_workers
from autogen_ext.models.replay import ReplayChatCompletionClient

from toporoute import cli
from toporoute.embed import Router
from toporoute.integrations.autogen import build_team
from toporoute.tasks import load_tasks

pytestmark = NEEDS_VLLM
MAX_TOKENS = 192


def test_autogen_team_on_humaneval_with_vllm(tmp_path: Path, shared_vllm, encoder) -> None:
    task = load_tasks("humaneval", limit=1)[0]
    names = ["Developer", "Tester"]
    clients = engine_workers(engine_model_client, shared_vllm, names, max_tokens=MAX_TOKENS)
    run_dir = tmp_path / "run"
    selector_model = ReplayChatCompletionClient([])  # never asked: fallback="next" when nothing matches
    team, chooser = build_team(
        clients, selector_model, router=Router(encoder), max_tokens=MAX_TOKENS, max_turns=2, fallback="next",
        recorder=run_dir / "autogen", episode=task.episode_id, task=task,
    )  # fmt: skip
    t0 = time.perf_counter()
    result = asyncio.run(team.run(task=task.prompt))
    wall = time.perf_counter() - t0
    speakers = [m.source for m in result.messages]
    assert len(speakers) == 3 and speakers[0] == "user" and set(speakers[1:]) <= set(names)

    record = chooser.finish(result)
    assert record is not None and record.rounds == 2
    assert record.score["status"] in ("passed", "failed", "timeout", "error", "no-answer")
    trace = [
        json.loads(line)
        for line in (run_dir / "autogen" / "traces" / "HumanEval-0.jsonl").read_text().splitlines()
    ]
    assert [r["round"] for r in trace] == [0, 1]
    assert [r["selected"] for r in trace] == speakers[1:]
    assert trace[0]["agents"] == [*names, "user"] and trace[1]["agents"] == names
    speaker = trace[1]["speaker"]
    assert trace[1]["usage"]["agents"][speaker]["prompt_tokens"] > 0
    # guided decoding gives JSON unless the reply is cut at max_tokens: then no descriptors, and no edges from it
    message = trace[1]["messages"][speaker]
    if message["parse_error"] is None:
        assert trace[1]["descriptors"]["key"][names.index(speaker)].strip()
    assert all(e["score"] > 0.3 for r in trace for e in r["edges"])

    assert cli.main(["report", str(run_dir)]) == 0
    assert (run_dir / "report.html").stat().st_size > 1000
    print(f"\n[autogen-vllm] speakers {speakers[1:]} in {wall:.1f} s, score {record.score['status']}")
