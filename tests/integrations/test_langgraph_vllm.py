"""The LangGraph adapter against a real model: DyTopo's Developer and Tester and its manager as LangChain chat
models over the session's shared vLLM engine (the embedded SmolLM2-135M, guided JSON), routed by the real encoder,
for one round on the first HumanEval problem; the run folder is scored and ``toporoute report`` draws it.

The 135M model's answers are not meaningful; this checks the path: real replies parsed into descriptors, routed,
recorded and reported. Kept to three calls of at most 192 tokens."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from _shared_vllm import NEEDS_VLLM

pytest.importorskip("langgraph")

from _framework_models import engine_chat_model, engine_workers
from langgraph.checkpoint.memory import InMemorySaver

from toporoute import cli
from toporoute.embed import Router
from toporoute.integrations.langgraph import build_graph, team_input
from toporoute.integrations.rounds import manager_spec
from toporoute.tasks import load_tasks

pytestmark = NEEDS_VLLM
MAX_TOKENS = 192


def test_langgraph_team_on_humaneval_with_vllm(tmp_path: Path, shared_vllm, encoder) -> None:
    task = load_tasks("humaneval", limit=1)[0]
    names = ["Developer", "Tester"]
    agents = engine_workers(engine_chat_model, shared_vllm, names, max_tokens=MAX_TOKENS)
    manager = engine_chat_model(
        shared_vllm, max_tokens=MAX_TOKENS, schema=manager_spec(max_tokens=MAX_TOKENS).schema
    )
    run_dir = tmp_path / "run"
    graph = build_graph(
        agents, manager=manager, router=Router(encoder), max_rounds=1, max_tokens=MAX_TOKENS,
        recorder=run_dir / "langgraph",
    )  # fmt: skip
    app = graph.compile(checkpointer=InMemorySaver())
    t0 = time.perf_counter()
    state = asyncio.run(app.ainvoke(team_input(task), {"configurable": {"thread_id": "he0"}}))
    wall = time.perf_counter() - t0

    assert state["round"] == 1 and isinstance(state["answer"], str)
    trace = [
        json.loads(line)
        for line in (run_dir / "langgraph" / "traces" / "HumanEval-0.jsonl").read_text().splitlines()
    ]
    assert len(trace) == 1
    r0 = trace[0]
    assert r0["agents"] == names and r0["task"] == "HumanEval/0"
    parsed = [a for a, m in r0["messages"].items() if m["parse_error"] is None]
    assert parsed, r0["messages"]  # guided decoding gives JSON unless a reply is cut at max_tokens
    for a in parsed:
        i = names.index(a)
        assert r0["descriptors"]["query"][i].strip() and r0["descriptors"]["key"][i].strip()
    assert all(e["score"] > 0.3 for e in r0["edges"])
    assert {(e["src"], e["dst"]) for e in r0["edges"]} == {(e["src"], e["dst"]) for e in state["routed"]}
    assert r0["usage"]["agents"]["Developer"]["prompt_tokens"] > 0 and "Manager" in r0["usage"]["agents"]
    episode = json.loads((run_dir / "langgraph" / "episodes" / "HumanEval-0.json").read_text())
    assert episode["record"]["score"]["status"] in ("passed", "failed", "timeout", "error", "no-answer")
    assert episode["usage"]["calls"] == 3 and episode["usage"]["completion_tokens"] > 0

    assert cli.main(["report", str(run_dir)]) == 0
    assert (run_dir / "report.html").stat().st_size > 1000
    print(f"\n[langgraph-vllm] 1 round, 3 calls in {wall:.1f} s, {len(r0['edges'])} edges, "
          f"score {episode['record']['score']['status']}")  # fmt: skip
