"""Engine failures are errors, never results (issue 31): an episode whose engine gave no reply ends with status
``error`` and the cause, is not scored or counted as an attempt, runs again on resume, and makes ``toporoute
run`` exit 1. The rule on the runtime with the scripted engine; the command against a loopback OpenAI-compatible
server that is stopped mid-run, and with no server at all. (The vLLM engine whose generate raises:
tests/llm/test_engine_failures_vllm.py.)"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _chat_server import ChatServer
from _procs import run_toporoute as toporoute

from toporoute.llm import ErrorRecord, Request, Structured, Tags
from toporoute.llm.scripted import ScriptedEngine
from toporoute.llm.vllm_engine import finish_error
from toporoute.runtime import EngineFailureError, Runtime
from toporoute.trace.reader import load_run, summarize

CODE = "def f():\n    return 1\n"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def rounds_episode(rounds: int, agents: int = 3, schema: dict[str, Any] | None = None):
    async def episode(ctx):
        replies = []
        for r in range(rounds):
            results = await ctx.generate(
                [
                    Request.chat(
                        "You are on a team.", f"round {r} agent {a}", schema=schema, tags=Tags(round=r)
                    )
                    for a in range(agents)
                ]
            )
            replies.append([res.text for res in results])
        return {"replies": replies}

    return episode


def failing(when):
    """A scripted engine that answers "fine" except where ``when(request)`` holds: a connection-refused error."""
    return ScriptedEngine(
        lambda r: "fine",
        fail=lambda r: (
            ErrorRecord("engine", "connection error to http://127.0.0.1:9/v1: refused", attempts=5)
            if when(r)
            else None
        ),
    )


def test_an_engine_failure_ends_the_episode_as_an_error_with_its_cause(tmp_path: Path) -> None:
    # agent 1 of round 1 gets no reply: the episode stops there (round 2 is never sent) and is an error
    engine = failing(lambda r: r.messages[-1].content == "round 1 agent 1")
    runtime = Runtime(engine, out_dir=tmp_path, progress=False)
    summary = asyncio.run(runtime.run([("ep", rounds_episode(3))]))
    (outcome,) = summary.outcomes
    assert outcome.status == "error" and outcome.record is None
    assert outcome.cause is not None and "EngineFailureError" in outcome.cause
    assert "connection error to http://127.0.0.1:9/v1" in outcome.cause and "1 of 3" in outcome.cause
    assert len(engine.batches) == 2  # no call after the failed round
    saved = json.loads((tmp_path / "episodes" / "ep.json").read_text())
    assert saved["status"] == "error" and saved["cause"] == outcome.cause and saved["record"] is None
    assert saved["usage"]["engine_failed_calls"] == 1 and saved["usage"]["calls"] == 6
    assert summary.totals()["errors"] == 1 and summary.totals()["ok"] == 0
    # a resume runs it again (the engine is back) and it finishes
    again = asyncio.run(
        Runtime(ScriptedEngine(lambda r: "fine"), out_dir=tmp_path, progress=False).run(
            [("ep", rounds_episode(3))]
        )
    )
    assert again.outcomes[0].status == "ok"
    assert json.loads((tmp_path / "episodes" / "ep.json").read_text())["cause"] is None


def test_a_reply_that_does_not_validate_is_an_answer_not_an_engine_failure(tmp_path: Path) -> None:
    engine = Structured(ScriptedEngine(lambda r: "not json"), max_reprompts=1)
    summary = asyncio.run(
        Runtime(engine, out_dir=tmp_path, progress=False).run([("ep", rounds_episode(2, schema=SCHEMA))])
    )
    (outcome,) = summary.outcomes
    assert outcome.status == "ok", outcome.error
    assert outcome.usage is not None
    assert outcome.usage["failed_calls"] == 6 and outcome.usage["engine_failed_calls"] == 0


def test_the_all_rule_goes_on_when_only_some_calls_of_a_batch_failed(tmp_path: Path) -> None:
    # independent samples: one lost sample is counted, the episode goes on; a batch lost whole is an error
    some = failing(lambda r: r.messages[-1].content.endswith("agent 0"))
    summary = asyncio.run(
        Runtime(some, progress=False, engine_failures="all").run([("ep", rounds_episode(2))])
    )
    (outcome,) = summary.outcomes
    assert outcome.status == "ok" and outcome.record == {"replies": [["", "fine", "fine"]] * 2}
    assert outcome.usage is not None and outcome.usage["engine_failed_calls"] == 2
    every = failing(lambda r: r.messages[-1].content.startswith("round 1"))
    summary = asyncio.run(
        Runtime(every, progress=False, engine_failures="all").run([("ep", rounds_episode(2))])
    )
    assert summary.outcomes[0].status == "error" and "3 of 3" in (summary.outcomes[0].cause or "")
    with pytest.raises(ValueError, match="engine_failures"):
        Runtime(every, engine_failures="some")


def test_a_vllm_completion_that_ended_in_error_is_an_error_not_an_empty_reply() -> None:
    assert finish_error("stop", closed=False) is None and finish_error("length", closed=True) is None
    failed = finish_error("error", closed=False)
    assert failed is not None and failed.kind == "engine" and failed.engine_failure
    for reason in ("abort", "error"):  # at close: the request was cut, or refused by the closing core
        cut = finish_error(reason, closed=True)
        assert cut is not None and cut.kind == "cancelled" and reason in cut.message
    aborted = finish_error("abort", closed=False)
    assert aborted is not None and aborted.kind == "cancelled"


def test_the_methods_rules() -> None:
    from toporoute.methods import make_method

    # rounds that build on each other end at the first failure; independent samples only when all failed
    assert getattr(make_method("dytopo"), "engine_failures", "any") == "any"
    assert getattr(make_method("single"), "engine_failures", "any") == "any"
    assert make_method("self-consistency").engine_failures == "all"  # type: ignore[attr-defined]
    assert make_method("debate").engine_failures == "all"  # type: ignore[attr-defined]
    assert issubclass(EngineFailureError, RuntimeError)


# ------------------------------------------------------------------------------------------- the command, HTTP


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    yield port


def test_a_server_taken_away_mid_run_gives_errors_and_exit_1_and_a_resume_finishes(tmp_path: Path) -> None:
    server = ChatServer(CODE, answers=1)
    out = tmp_path / "run"
    args = [
        "run",
        "single",
        "--tasks",
        "humaneval",
        "--limit",
        "2",
        "--concurrency",
        "1",
        "--engine",
        "openai",
    ]
    args += ["--model", "m", "--base-url", server.url, "--out", str(out), "--no-progress"]
    p = toporoute(*args, cwd=tmp_path)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "1 episode(s) ended with an error" in p.stdout
    first = json.loads((out / "single" / "episodes" / "HumanEval-0.json").read_text())
    lost = json.loads((out / "single" / "episodes" / "HumanEval-1.json").read_text())
    assert first["status"] == "ok" and first["record"]["score"]["passed"] is False  # scored: not its function
    assert lost["status"] == "error" and lost["record"] is None
    assert "connection error" in lost["cause"] and server.url in lost["cause"]
    summary = json.loads((out / "single" / "summary.json").read_text())
    assert (summary["episodes"], summary["ok"], summary["errors"]) == (2, 1, 1)
    run = load_run(out)  # what the report reads: the error and its cause
    rows = {e.episode: e for e in run.methods[0].episodes}
    assert rows["HumanEval-1"].status == "error" and summarize(run.methods[0])["errors"] == 1
    # the server is back: the resume skips the finished episode and runs the lost one
    back = ChatServer(CODE, port=server.port)
    try:
        p = toporoute(*args, cwd=tmp_path)
    finally:
        back.stop()
    assert p.returncode == 0, p.stderr[-2000:]
    assert back.served == 1  # HumanEval-0 was not asked again
    assert json.loads((out / "single" / "episodes" / "HumanEval-1.json").read_text())["status"] == "ok"
    assert json.loads((out / "single" / "summary.json").read_text())["errors"] == 0


def test_dytopo_with_no_server_is_an_error_not_a_success(tmp_path: Path, closed_port: int) -> None:
    out = tmp_path / "run"
    args = ["run", "dytopo", "--tasks", "humaneval", "--limit", "1", "--engine", "openai", "--model", "m"]
    args += ["--base-url", f"http://127.0.0.1:{closed_port}/v1", "--out", str(out), "--no-progress"]
    p = toporoute(*args, cwd=tmp_path)
    assert p.returncode == 1, (p.stdout, p.stderr[-2000:])
    saved = json.loads((out / "dytopo" / "episodes" / "HumanEval-0.json").read_text())
    assert saved["status"] == "error" and "connection error" in saved["cause"]
    assert saved["usage"]["engine_failed_calls"] == saved["usage"]["calls"] > 0
    summary = json.loads((out / "dytopo" / "summary.json").read_text())
    assert (summary["ok"], summary["errors"], summary["accuracy"]) == (0, 1, 0.0)
