"""HiVA's loop on the scripted engine (the real run with vLLM is in tests/methods/hiva/test_hiva_vllm.py): a full per_instance
run, stream mode, malformed output at every step, the leakage default, batching, topology changes and the
sandboxed tools. Code runs in the real sandbox on real HumanEval tasks."""

from __future__ import annotations

import argparse
import asyncio
import builtins
import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _humaneval
import numpy as np
import pytest

from toporoute.embed import Encoder
from toporoute.errors import InvalidArgumentError
from toporoute.llm.scripted import ScriptedEngine
from toporoute.llm.types import Request
from toporoute.methods import make_method
from toporoute.methods.harness import run_method
from toporoute.methods.hiva import SINK, SOURCE, AgentState, HiVA, HiVASettings, fresh_graph, parsing
from toporoute.methods.hiva.graph import word_similarity, words
from toporoute.methods.registry import REGISTRY
from toporoute.tasks import Task, codetest
from toporoute.tasks import tools as tools_module

Reply = str | Callable[[Request], str]

GRADIENT = "SYSTEM_PROMPT_FEEDBACK: be more careful\nTOOL_FEEDBACK: \nOVERALL_FEEDBACK: check the edge cases"
GRADIENT_TOOL = (
    "SYSTEM_PROMPT_FEEDBACK: \nTOOL_FEEDBACK: report the input length\nOVERALL_FEEDBACK: use the tool better"
)
PARALLEL_HIGH = "CAN_PARALLELIZE: true\nSUBTASKS_COUNT: 2\nCOORDINATION_REQUIRED: false\nPARALLEL_BENEFIT: High\nREASON: two parts"
PARALLEL_NONE = "CAN_PARALLELIZE: false\nSUBTASKS_COUNT: 0\nCOORDINATION_REQUIRED: true\nPARALLEL_BENEFIT: None\nREASON: one step"
GOOD_TOOL = (
    "```python\ndef tool_function(input_data, **kwargs):\n    return 'chars=' + str(len(input_data))\n```"
)


he = _humaneval.tasks_fixture(2)
solutions = _humaneval.solutions


class Script:
    """Scripted replies by call kind (the request's role tag); ``over`` replaces a kind's reply. Every request
    is kept."""

    def __init__(self, tasks: list[Task], solutions: dict[str, str], over: dict[str, Reply] | None = None):
        self.tasks, self.solutions, self.over = tasks, solutions, dict(over or {})
        self.requests: list[Request] = []

    def task_of(self, req: Request) -> Task:
        text = "\n".join(m.content for m in req.messages)
        return next((t for t in self.tasks if f"def {t.entry_point}(" in text), self.tasks[0])

    def __call__(self, req: Request) -> str:
        self.requests.append(req)
        role = req.tags.role or ""
        if role in self.over:
            reply = self.over[role]
            return reply(req) if callable(reply) else reply
        if role in ("agent", "aggregator"):
            t = self.task_of(req)
            if t.kind == "math":
                return "7 * 12 - 25 = 59, so \\boxed{59}"
            return f"```python\n{t.prompt}{self.solutions[t.id]}```"
        if role == "instruction":
            body = req.messages[-1].content
            start = body.find("CURRENT AGENT INPUT:")
            return "Check and complete this:\n" + body[start : start + 1200]
        return {
            "loss": "<FEEDBACK>The answer is plausible; edge cases unverified.</FEEDBACK>",
            "global_gradient": "<FEEDBACK>Test the edge cases.</FEEDBACK>",
            "gradient": GRADIENT,
            "prompt_update": "<IMPROVED_VARIABLE>You are a careful Python programmer.</IMPROVED_VARIABLE>",
            "parallel": PARALLEL_HIGH,
            "decision": "NO_CHANGE: fine",
            "sentiment": "NEUTRAL",
            "new_agent": "You are an edge-case tester.",
            "tool_synthesis": GOOD_TOOL,
            "tool_refine": GOOD_TOOL,
            "critique": "CONSISTENCY: ok\nCOMPLETENESS: ok\nALIGNMENT: ok\nVERDICT: PASS",
        }.get(role, "?")


def decisions(*lines: str) -> Callable[[Request], str]:
    """Decision replies by call order (the last one repeats)."""
    seq = list(lines)

    def reply(req: Request) -> str:
        return seq.pop(0) if len(seq) > 1 else seq[0]

    return reply


def source_decisions(*lines: str) -> Callable[[Request], str]:
    """The source's decisions by iteration (the last one repeats); every other agent: NO_CHANGE."""
    seq = list(lines)

    def reply(req: Request) -> str:
        if req.tags.agent != "source":
            return "NO_CHANGE: fine"
        return seq.pop(0) if len(seq) > 1 else seq[0]

    return reply


def run(method: HiVA, tasks: list[Task], engine: ScriptedEngine, out: Path, **kw: Any) -> dict:
    return asyncio.run(run_method(method, tasks, engine, out, max_wait=30.0, progress=False, **kw))


def traces(out: Path, episode: str) -> list[dict]:
    return [json.loads(line) for line in (out / "traces" / f"{episode}.jsonl").read_text().splitlines()]


def episode_file(out: Path, episode: str) -> dict:
    return json.loads((out / "episodes" / f"{episode}.json").read_text())


def errors_of(records: list[dict]) -> list[tuple[str, str]]:
    return [(e["step"], e["error"]) for r in records for e in r["hiva"]["errors"]]


@functools.cache
def encoder() -> Encoder:
    """One encoder for the module's runs (the embedding similarity, the default)."""
    return Encoder.default()


def hiva(**kw: Any) -> HiVA:
    """HiVA on Algorithm 1's start (the source wired to the aggregator) unless ``initial_workers`` is given."""
    kw.setdefault("tool_retries", 0)
    kw.setdefault("tool_timeout_s", 10.0)
    kw.setdefault("initial_workers", 0)
    return HiVA(HiVASettings(**kw), encoder=encoder())


# ------------------------------------------------------------------------------------------------- a full run


def test_per_instance_run_grows_the_graph_and_records_everything(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    script = Script(
        he[:1], solutions, {"decision": decisions("ADD_PARALLEL: an edge-case tester", "NO_CHANGE: ok")}
    )
    engine = ScriptedEngine(script)
    summary = run(hiva(iterations=3, seed=3), he[:1], engine, tmp_path)
    assert summary["ok"] == 1 and summary["passed"] == 1
    ep = he[0].episode_id
    recs = traces(tmp_path, ep)
    assert [r["round"] for r in recs] == [0, 1, 2]
    first, second = recs[0]["hiva"], recs[1]["hiva"]
    # iteration 0: source -> aggregator; the source's ADD_PARALLEL adds a worker beside the aggregator
    assert recs[0]["agents"] == ["source", "aggregator"]
    assert first["edits"]["applied"] == [["source", "ADD_PARALLEL", "agent_2"]]
    assert {(e["src"], e["dst"]) for e in first["graph_after"]["edges"]} == {
        ("source", "aggregator"),
        ("source", "agent_2"),
        ("agent_2", "aggregator"),
    }
    assert recs[1]["agents"] == ["source", "aggregator", "agent_2"]
    # the new agent got its LLM-written prompt and a synthesised tool that passed its trial run in the sandbox
    node = next(n for n in first["graph_after"]["nodes"] if n["name"] == "agent_2")
    assert node["prompt"] == "You are an edge-case tester."
    assert node["tool"]["origin"] == "synthesis" and node["tool"]["version"] == 1
    synth = next(u for u in first["tool_updates"] if u["kind"] == "synthesis")
    assert synth["accepted"] and synth["trial"]["ok"] and "audit-hook" in synth["trial"]["isolation"]
    # the bandit's choices, with top-k 2 the source routes to both successors once the worker exists
    assert set(second["bandit"][0]["chosen"]["source"]) == {"aggregator", "agent_2"}
    assert set(second["bandit"][0]["theta"]) == {"source", "aggregator", "agent_2"}
    assert {tuple(e) for e in second["executed_edges"]} == {
        ("source", "aggregator"),
        ("source", "agent_2"),
        ("agent_2", "aggregator"),
    }
    assert second["executed"] == ["source", "agent_2", "aggregator"]
    # gradients: the global one at the aggregator, local ones at every executed worker
    assert set(second["gradients"]) == {"aggregator", "source", "agent_2"}
    assert second["gradients"]["source"]["overall_feedback"] == "check the edge cases"
    # tools ran in the sandbox, once per executed worker, and the aggregator's once per response it integrates
    calls = second["tool_calls"]
    assert sorted(c["agent"] for c in calls) == ["agent_2", "aggregator", "aggregator", "source"]
    assert sorted(c["on_output_of"] for c in calls if c["agent"] == "aggregator") == ["agent_2", "source"]
    assert all(c["ok"] and "audit-hook" in c["isolation"] for c in calls)
    # the source's input holds no fenced code (its built-in tool says so); the worker runs its synthesised tool
    assert next(c for c in calls if c["agent"] == "source")["output"] == "no python code found in the input"
    assert next(c for c in calls if c["agent"] == "agent_2")["output"].startswith("chars=")
    # prompt diffs, sentiment rewards, Beta beliefs moved for the executed nodes
    assert any(
        u["changed"] and u["new"] == "You are a careful Python programmer." for u in first["prompt_updates"]
    )
    assert first["sentiment"]["source"] == {"label": "NEUTRAL", "reward": 1.0, "error": None}
    src = next(n for n in second["graph"]["nodes"] if n["name"] == "source")
    assert src["alpha"] > 1.0
    # the environment used the prompt's visible examples, never the hidden tests
    assert first["environment"]["source"] == "public-tests"
    assert "hidden" not in first["environment"]
    # usage per call with tokens, routed messages with tokens, timing
    usage = recs[1]["usage"]["agents"]
    assert {"source:forward", "agent_2:forward", "aggregator:aggregate", "source:instruction>agent_2"} <= set(
        usage
    )
    assert all(u["prompt_tokens"] > 0 for u in usage.values())
    assert {(e["src"], e["dst"]) for e in recs[1]["usage"]["edges"]} >= {("source", "agent_2")}
    assert recs[1]["timing"]["round_s"] > 0
    record = episode_file(tmp_path, ep)["record"]
    assert record["hiva"]["mode"] == "per_instance" and record["hiva"]["oracle_feedback"] is False
    assert record["hiva"]["best_iteration"] == 2  # ties go to the latest iteration
    assert [n["name"] for n in record["hiva"]["final_graph"]["nodes"]] == ["source", "aggregator", "agent_2"]
    assert errors_of(recs) == []


@pytest.mark.parametrize("similarity", ["embedding", "lexical"])
def test_the_task_similarity_feeds_the_routing_distance(
    tmp_path: Path, he: list[Task], solutions: dict[str, str], similarity: str
) -> None:
    engine = ScriptedEngine(Script(he[:1], solutions, {"decision": decisions("NO_CHANGE: ok")}))
    run(hiva(iterations=1, seed=3, similarity=similarity), he[:1], engine, tmp_path)
    (rec,) = traces(tmp_path, he[0].episode_id)
    prompt = next(n["prompt"] for n in rec["hiva"]["graph"]["nodes"] if n["name"] == "source")
    jac, cos = word_similarity(words(he[0].prompt), words(prompt))
    if similarity == "embedding":  # the cosine of the encoder's embeddings of the task and the agent's prompt
        task_vec, prompt_vec = encoder().encode([he[0].prompt, prompt])
        cos = float(task_vec @ prompt_vec)
    psi1 = 0.5 * (1 - jac) + 0.5 * (1 - cos) / 2
    # Σ ω Ψ with ω renormalised over the indicators that exist: Ψ1 alone (no knowledge graph for Ψ2 and Ψ4;
    # Ψ3 = 1 - α/(α+β) would count θ's success history twice)
    assert rec["hiva"]["bandit"][0]["psi"]["source"] == pytest.approx(psi1, abs=1e-4)


def test_calls_of_a_level_go_out_in_one_batch(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    script = Script(
        he[:1],
        solutions,
        {
            "decision": source_decisions(
                "ADD_PARALLEL: a checker", "ADD_PARALLEL: a second checker", "NO_CHANGE: ok"
            )
        },
    )
    engine = ScriptedEngine(script)
    # four iterations: the third (recs[2]) runs its backward pass, the last one would not
    run(hiva(iterations=4, top_k=3, seed=5, synthesize_tools=False), he[:1], engine, tmp_path)
    recs = traces(tmp_path, he[0].episode_id)
    # the workers' built-in tool ran the source's program (in their instruction) on the prompt's examples
    worker_tools = [c for c in recs[2]["hiva"]["tool_calls"] if c["agent"] not in ("source", "aggregator")]
    assert len(worker_tools) == 2 and all(
        c["output"].startswith("2/2 visible examples pass") for c in worker_tools
    )
    assert recs[2]["agents"] == ["source", "aggregator", "agent_2", "agent_3"]
    assert recs[2]["hiva"]["levels"] == [["source"], ["agent_2", "agent_3"], ["aggregator"]]
    # the two workers of level 1 ran in one engine call, and so did their two gradients
    by_batch = [sorted((r.tags.role, r.tags.agent) for r in batch) for batch in engine.batches]
    assert [("agent", "agent_2"), ("agent", "agent_3")] in by_batch
    assert [("gradient", "agent_2"), ("gradient", "agent_3")] in by_batch
    # and the source's two instructions in one call
    assert [("instruction", "source"), ("instruction", "source")] in by_batch


# ------------------------------------------------------------------------------------------------- topology


def test_add_serial_remove_and_connect(tmp_path: Path, he: list[Task], solutions: dict[str, str]) -> None:
    script = Script(
        he[:1],
        solutions,
        {
            "parallel": PARALLEL_NONE,  # ADD_PARALLEL becomes ADD_SERIAL
            "decision": decisions(
                "ADD_PARALLEL: a planner",  # it. 0, source
                "REMOVE_SUCCESSOR: agent_2",  # it. 1, agent_2's decision first (reverse order): not a successor
                "REMOVE_SUCCESSOR: agent_2",  # it. 1, source: removes agent_2, relinks source -> aggregator
                "NO_CHANGE: ok",
            ),
        },
    )
    run(hiva(iterations=3, seed=2), he[:1], ScriptedEngine(script), tmp_path)
    recs = traces(tmp_path, he[0].episode_id)
    d0 = recs[0]["hiva"]["decisions"][0]
    assert d0["action"] == "ADD_PARALLEL" and d0["applied_action"] == "ADD_SERIAL" and "converted" in d0
    assert {(e["src"], e["dst"]) for e in recs[0]["hiva"]["graph_after"]["edges"]} == {
        ("source", "agent_2"),
        ("agent_2", "aggregator"),
    }
    h1 = recs[1]["hiva"]
    assert ["agent_2", "REMOVE_SUCCESSOR", "not_a_successor"] in h1["edits"]["rejected"]
    assert ["source", "REMOVE_SUCCESSOR", None] in h1["edits"]["applied"]
    assert [n["name"] for n in h1["graph_after"]["nodes"]] == ["source", "aggregator"]
    assert {(e["src"], e["dst"]) for e in h1["graph_after"]["edges"]} == {("source", "aggregator")}
    assert ("edit", "REMOVE_SUCCESSOR rejected: not_a_successor") in errors_of(recs)


# ------------------------------------------------------------------------------------------------- malformed output


BAD_STEPS: dict[str, tuple[dict[str, Reply], str]] = {
    "instruction": (
        {"instruction": "   ", "decision": source_decisions("ADD_PARALLEL: a helper", "NO_CHANGE: ok")},
        "instruction",
    ),
    "gradient": ({"gradient": "Looks fine to me."}, "gradient"),
    "decision": ({"decision": "I would perhaps grow the team."}, "decision"),
    "decision_target": ({"decision": "REMOVE_SUCCESSOR: agent_99"}, "decision"),
    "sentiment": ({"sentiment": "It is hard to say."}, "sentiment"),
    "prompt_update": ({"prompt_update": ""}, "prompt_update"),
    "parallel": ({"parallel": "yes"}, "parallel"),
    "loss": ({"loss": ""}, "loss"),
    "global_gradient": ({"global_gradient": "no tags here"}, "global_gradient"),
    "tool_none": ({"gradient": GRADIENT_TOOL, "tool_refine": "I cannot write code."}, "tool_refine"),
    "tool_syntax": (
        {"gradient": GRADIENT_TOOL, "tool_refine": "```python\ndef tool_function(:\n```"},
        "tool_refine",
    ),
    "tool_denied": (
        {
            "gradient": GRADIENT_TOOL,
            "tool_refine": "```python\nimport os\ndef tool_function(x):\n    return x\n```",
        },
        "tool_refine",
    ),
    "tool_no_function": (
        {"gradient": GRADIENT_TOOL, "tool_refine": "```python\ndef f(x):\n    return x\n```"},
        "tool_refine",
    ),
    "tool_raises": (
        {
            "gradient": GRADIENT_TOOL,
            "tool_refine": "```python\ndef tool_function(x):\n    raise KeyError(x)\n```",
        },
        "tool_refine",
    ),
    "tool_timeout": (
        {
            "gradient": GRADIENT_TOOL,
            "tool_refine": "```python\ndef tool_function(x):\n    while True:\n        pass\n```",
        },
        "tool_refine",
    ),
    "tool_synthesis": (
        {"decision": decisions("ADD_PARALLEL: a helper", "NO_CHANGE: ok"), "tool_synthesis": "no code"},
        "tool_synthesis",
    ),
    "new_agent": (
        {"decision": decisions("ADD_PARALLEL: a helper", "NO_CHANGE: ok"), "new_agent": ""},
        "new_agent",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_STEPS))
def test_malformed_output_at_every_step_is_recorded_and_the_run_goes_on(
    case: str, tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    over, step = BAD_STEPS[case]
    script = Script(he[:1], solutions, over)
    settings = {"tool_timeout_s": 1.0} if case == "tool_timeout" else {}
    summary = run(hiva(iterations=2, seed=1, **settings), he[:1], ScriptedEngine(script), tmp_path)
    assert summary["ok"] == 1 and summary["errors"] == 0
    recs = traces(tmp_path, he[0].episode_id)
    assert len(recs) == 2  # both iterations ran
    steps = [s for s, _ in errors_of(recs)]
    assert step in steps, errors_of(recs)
    h = recs[0]["hiva"]
    if case.startswith("tool_") and case != "tool_synthesis":
        assert all(not u["accepted"] for u in h["tool_updates"])
        node = next(n for n in h["graph_after"]["nodes"] if n["name"] == "source")
        assert node["tool"] == {
            "name": "default_code_tool",
            "version": 0,
            "trusted": True,
            "origin": "builtin",
        }
    if case == "tool_synthesis":
        node = next(n for n in h["graph_after"]["nodes"] if n["name"] == "agent_2")
        assert node["tool"]["origin"] == "builtin"
    if case.startswith("decision"):
        assert all(d["applied_action"] == "NO_CHANGE" for d in h["decisions"])
        assert recs[1]["agents"] == ["source", "aggregator"]
    if case == "prompt_update":
        assert all(not u["changed"] for u in h["prompt_updates"])
        assert recs[1]["hiva"]["graph"]["nodes"][0]["prompt"] == h["graph"]["nodes"][0]["prompt"]
    if case == "sentiment":  # the fallback reward: the environment's success (the visible examples pass)
        assert h["sentiment"]["source"]["label"] is None and h["sentiment"]["source"]["reward"] == 1.0
    if case == "gradient":
        assert h["gradients"]["source"]["error"].startswith("missing field")
        assert h["prompt_updates"] == [u for u in h["prompt_updates"] if u["agent"] == "aggregator"]
    if case == "instruction":
        assert "passing the input and output on" in " ".join(e for _, e in errors_of(recs))


def test_an_engine_failure_ends_the_episode_as_an_error(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    # the engine gives the textual gradient no reply: the episode is an error with that cause (the rounds before
    # it stay in the trace), not a scored answer; a rerun with the engine back runs it again
    engine = ScriptedEngine(
        Script(he[:1], solutions), fail=lambda r: "down" if r.tags.role == "gradient" else None
    )
    summary = run(hiva(iterations=2), he[:1], engine, tmp_path)
    assert (summary["ok"], summary["errors"]) == (0, 1)
    saved = episode_file(tmp_path, he[0].episode_id)
    assert saved["status"] == "error" and saved["record"] is None and "engine: down" in saved["cause"]
    assert saved["usage"]["engine_failed_calls"] >= 1
    summary = run(hiva(iterations=2), he[:1], ScriptedEngine(Script(he[:1], solutions)), tmp_path)
    assert (summary["ok"], summary["errors"]) == (1, 0)


# ------------------------------------------------------------------------------------------------- leakage


def test_hidden_tests_never_run_unless_the_oracle_is_asked_for(
    tmp_path: Path, he: list[Task], solutions: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = codetest.run_hidden_tests

    def spy(task: Task, code: str | None, **kw: Any) -> codetest.TestReport:
        calls.append(task.id)
        return real(task, code, **kw)

    monkeypatch.setattr(codetest, "run_hidden_tests", spy)
    script = Script(he[:1], solutions)
    run(hiva(iterations=2), he[:1], ScriptedEngine(script), tmp_path / "default")
    assert calls == []
    text = "\n".join(m.content for r in script.requests for m in r.messages)
    assert "check(" not in text and he[0].test is not None and he[0].test.strip()[:60] not in text
    recs = traces(tmp_path / "default", he[0].episode_id)
    assert all(r["hiva"]["environment"]["source"] == "public-tests" for r in recs)
    run_json = json.loads((tmp_path / "default" / "run.json").read_text())
    assert run_json["params"]["oracle_feedback"] is False

    run(
        hiva(iterations=2, oracle_feedback=True),
        he[:1],
        ScriptedEngine(Script(he[:1], solutions)),
        tmp_path / "oracle",
    )
    assert calls == [he[0].id, he[0].id]
    recs = traces(tmp_path / "oracle", he[0].episode_id)
    env = recs[0]["hiva"]["environment"]
    assert env["source"] == "hidden-tests" and env["hidden"]["verdict"] == "PASSED"
    assert json.loads((tmp_path / "oracle" / "run.json").read_text())["params"]["oracle_feedback"] is True


def test_math_uses_the_self_critique_and_never_the_gold_answer(
    tmp_path: Path, solutions: dict[str, str]
) -> None:
    task = Task("mathq", "math", "A box holds 7 rows of 12 eggs; 25 break. How many are left?", answer="4217")
    script = Script([task], solutions, {"agent": "So \\boxed{59}", "aggregator": "\\boxed{59}"})
    run(hiva(iterations=2), [task], ScriptedEngine(script), tmp_path / "plain")
    recs = traces(tmp_path / "plain", task.episode_id)
    assert recs[0]["hiva"]["environment"]["source"] == "self-critique"
    assert recs[0]["hiva"]["environment"]["signal_ok"] is True
    assert all("4217" not in m.content for r in script.requests for m in r.messages)
    # the math tool computed the arithmetic of its input in the sandbox
    assert any(r.tags.role == "critique" for r in script.requests)

    oracle = Script([task], solutions, {"agent": "So \\boxed{59}", "aggregator": "\\boxed{59}"})
    run(hiva(iterations=1, oracle_feedback=True), [task], ScriptedEngine(oracle), tmp_path / "oracle")
    env = traces(tmp_path / "oracle", task.episode_id)[0]["hiva"]["environment"]
    assert env["source"] == "gold-answer" and env["gold_match"] is False and "incorrect" in env["text"]
    assert all("4217" not in m.content for r in oracle.requests for m in r.messages)


# ------------------------------------------------------------------------------------------------- stream mode


def test_stream_mode_carries_the_graph_across_tasks(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    script = Script(he, solutions, {"decision": decisions("ADD_PARALLEL: a checker", "NO_CHANGE: ok")})
    method = hiva(iterations=1, mode="stream", seed=4)
    summary = run(method, he, ScriptedEngine(script), tmp_path)
    assert summary["ok"] == 2
    first, second = (traces(tmp_path, t.episode_id)[0] for t in he)
    assert first["agents"] == ["source", "aggregator"]
    # the second task starts from the graph, beliefs and prompts the first one left
    assert second["agents"] == ["source", "aggregator", "agent_2"]
    assert second["hiva"]["step"] == first["hiva"]["step"] + 1
    assert second["hiva"]["graph"] == first["hiva"]["graph_after"]
    graph = method.stream_graph("code")
    assert graph is not None and graph.iteration == 2 and "agent_2" in [a.name for a in graph.agents.values()]
    # per_instance starts every task afresh
    fresh = run(hiva(iterations=1, seed=4), he, ScriptedEngine(Script(he, solutions)), tmp_path / "pi")
    assert fresh["ok"] == 2
    assert all(traces(tmp_path / "pi", t.episode_id)[0]["agents"] == ["source", "aggregator"] for t in he)


# ------------------------------------------------------------------------------------------------- tools


def test_llm_written_tools_run_only_in_the_sandbox(
    tmp_path: Path, he: list[Task], solutions: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sandboxed: list[str] = []
    real = tools_module.run_python

    def spy(source: str, **kw: Any) -> Any:
        sandboxed.append(source)
        return real(source, **kw)

    monkeypatch.setattr(tools_module, "run_python", spy)
    marker = (
        "```python\nimport builtins\n\ndef tool_function(input_data, **kwargs):\n"
        "    builtins.HIVA_TOOL_RAN_HERE = True\n    return 'marked'\n```"
    )
    script = Script(he[:1], solutions, {"gradient": GRADIENT_TOOL, "tool_refine": marker})
    run(hiva(iterations=2, seed=1), he[:1], ScriptedEngine(script), tmp_path)
    recs = traces(tmp_path, he[0].episode_id)
    refine = next(u for u in recs[0]["hiva"]["tool_updates"] if u["agent"] == "source")
    assert refine["accepted"] and refine["trial"]["output"] == "marked"
    assert next(c for c in recs[1]["hiva"]["tool_calls"] if c["agent"] == "source")["output"] == "marked"
    assert not hasattr(builtins, "HIVA_TOOL_RAN_HERE")
    assert any("HIVA_TOOL_RAN_HERE" in s for s in sandboxed)


# ------------------------------------------------------------------------------------------------- report


def test_report_draws_the_graph_growth_and_labels_the_oracle(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    from toporoute.methods.registry import report_sections
    from toporoute.trace.report import write_report

    script = Script(
        he[:1], solutions, {"decision": source_decisions("ADD_PARALLEL: a checker", "NO_CHANGE: ok")}
    )
    run(hiva(iterations=2, seed=1), he[:1], ScriptedEngine(script), tmp_path / "run" / "hiva")
    page = write_report(tmp_path / "run", sections=report_sections()).html.read_text()
    assert page.count("HiVA: graph growth over the iterations") == 1
    assert page.count('<figure class="hiva-step">') == 3  # the start and one drawing per iteration
    assert 'aria-label="after iteration 0"' in page and "source ADD_PARALLEL agent_2" in page
    assert "<td>2 → 3</td>" in page  # iteration 0: two nodes before, three after
    assert "oracle feedback</span>" not in page
    oracle = Script(he[:1], solutions)
    run(hiva(iterations=1, oracle_feedback=True), he[:1], ScriptedEngine(oracle), tmp_path / "o" / "hiva")
    assert (
        "oracle feedback</span>" in write_report(tmp_path / "o", sections=report_sections()).html.read_text()
    )


# ------------------------------------------------------------------------------------------------- pieces


def test_parsers_and_their_fallbacks() -> None:
    g = parsing.parse_gradient(
        "**SYSTEM_PROMPT_FEEDBACK:** none\nTOOL_FEEDBACK: add a parser\nOVERALL_FEEDBACK: ok"
    )
    assert (g.system_prompt, g.tool, g.overall, g.error) == ("", "add a parser", "ok", None)
    assert parsing.parse_gradient("").error is not None
    assert parsing.parse_decision("Sure.\n**ADD_SERIAL**: a verifier") == parsing.Decision(
        "ADD_SERIAL", "a verifier"
    )
    assert parsing.parse_decision("grow").action == "NO_CHANGE"
    p = parsing.parse_parallelism(PARALLEL_HIGH)
    assert p.can and p.subtasks == 2 and p.score == 1.0 and p.error is None
    assert parsing.parse_parallelism("CAN_PARALLELIZE: false\nPARALLEL_BENEFIT: High").score == 0.0
    assert parsing.parse_parallelism("PARALLEL_BENEFIT: Huge\nCAN_PARALLELIZE: true").error is not None
    assert parsing.parse_sentiment("critical.") == ("CRITICAL", None)
    assert parsing.parse_sentiment("meh")[0] is None
    assert parsing.improved_variable("<IMPROVED_VARIABLE> new </IMPROVED_VARIABLE>") == ("new", None)
    assert parsing.improved_variable("just text")[0] == "just text"
    assert parsing.feedback_text("<FEEDBACK>a</FEEDBACK>") == ("a", None)
    code, err = parsing.extract_tool_code(
        "```python\nx = 1\n```\n```python\ndef tool_function(d):\n    return d\n```"
    )
    assert err is None and code.startswith("def tool_function")
    assert parsing.parse_verdict("...\nVERDICT: FAIL") == (False, None)


def test_guides_match_their_own_formats() -> None:
    assert re.fullmatch(parsing.decision_regex(["agent_2", "aggregator"]), "REMOVE_SUCCESSOR: agent_2")
    assert not re.fullmatch(parsing.decision_regex(["agent_2"]), "REMOVE_SUCCESSOR: agent_9")
    assert re.fullmatch(parsing.decision_regex([]), "ADD_PARALLEL: a tester of edge cases")
    assert re.fullmatch(parsing.SENTIMENT_REGEX, "NEUTRAL")
    assert re.fullmatch(parsing.PARALLEL_REGEX, PARALLEL_HIGH)
    assert re.fullmatch(parsing.GRADIENT_REGEX, GRADIENT)


def test_graph_state_routes_and_updates_with_the_core_ops() -> None:
    s = HiVASettings(initial_workers=0)
    g = fresh_graph(s, "code")
    [(ok, reason, new)] = g.apply_edits([(1, SOURCE, -1)], max_out=5)
    assert ok and reason == "ok" and new == 2
    g.add_agent(new, AgentState("agent_2", "worker", "You check list code.", g.agents[SOURCE].tool))
    assert g.alive[new] and g.adj[SOURCE, new] and g.adj[new, SINK]
    # (Jaccard, cosine) to the task per node: the nearer agent gets the larger weight
    near = g.weights({SOURCE}, {SOURCE: (0.2, 0.5), new: (0.5, 0.9)}, 1.0, 1.0, s.omega, s.distance_threshold)
    far = g.weights({SOURCE}, {SOURCE: (0.2, 0.5), new: (0.1, 0.3)}, 1.0, 1.0, s.omega, s.distance_threshold)
    w = near[0]
    assert w[SOURCE, SINK] == 1.0 and 0 < far[0][SOURCE, new] < w[SOURCE, new] <= 1.0
    a = g.select([SOURCE], w, k=2, seed=7, step=1, mode="thompson")
    b = g.select([SOURCE], w, k=2, seed=7, step=1, mode="thompson")
    assert a.chosen == b.chosen and sorted(a.chosen[SOURCE]) == [SINK, new]
    g.iteration = 1
    g.update_beliefs([SOURCE, SINK], {SOURCE: 1.0, SINK: 0.0}, np.zeros(g.capacity), gamma=0.6, delta=0.5)
    assert g.alpha[SOURCE] > 1.0 and g.beta[SINK] > 1.0 and g.alpha[new] == 1.0
    routed = np.zeros((g.capacity, g.capacity), np.int32)
    routed[SOURCE, SINK] = 1
    g.update_synergy(routed, {SINK: 1.0}, lr=0.1)
    assert g.c_syn[SOURCE, SINK] > 1.0 and g.edge_alpha[SOURCE, SINK] == 2.0
    rep = g.repair(threshold=0.3, min_obs=3, max_out=5)
    assert rep == {"pruned_nodes": [], "pruned_edges": [], "added_edges": []}


def test_settings_and_options() -> None:
    with pytest.raises(InvalidArgumentError) as err:
        HiVASettings(top_k=0)
    assert err.value.arg == "top_k"
    with pytest.raises(InvalidArgumentError) as err:
        HiVASettings(mode="batch")
    assert err.value.arg == "mode"
    assert HiVASettings(max_tokens=64).call("aggregator", "e", 0, "a").max_tokens == 64
    assert HiVASettings().call("decision", "e", 0, "a").temperature == 0.3
    spec = REGISTRY["hiva"]
    assert spec.options is not None
    parser = argparse.ArgumentParser()
    parser.add_argument("--eval-timeout", type=float, default=10.0)
    spec.options.add(parser.add_argument_group("hiva"))
    args = parser.parse_args(["--iterations", "3", "--top-k", "3", "--mode", "stream", "--oracle-feedback"])
    settings = spec.options.read(args, Path("."))
    method = make_method("hiva", rounds=7, **settings)
    assert isinstance(method, HiVA)
    assert (method.settings.iterations, method.settings.top_k, method.settings.mode) == (3, 3, "stream")
    assert method.settings.oracle_feedback is True
    given = spec.options.read(parser.parse_args(["--max-out", "2"]), Path("."))
    assert make_method("hiva", **given).settings.max_out == 2  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgumentError, match=r"max_out must be an integer in \[1, 255\]; got 0"):
        make_method("hiva", **spec.options.read(parser.parse_args(["--max-out", "0"]), Path(".")))
    plain = spec.options.read(parser.parse_args([]), Path("."))
    assert make_method("hiva", rounds=4, **plain).settings.iterations == 4  # type: ignore[attr-defined]
    assert make_method("hiva", **plain).settings.iterations == 10  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------------- issue 35


def plain(**kw: Any) -> HiVA:
    """HiVA with its defaults (the initial fan-out included), quick tool limits."""
    kw.setdefault("tool_retries", 0)
    kw.setdefault("tool_timeout_s", 10.0)
    return HiVA(HiVASettings(**kw), encoder=encoder())


def kinds_of(script: Script) -> set[str]:
    return {r.tags.role or "" for r in script.requests}


def test_the_default_graph_makes_the_bandit_choose(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    assert (HiVASettings().initial_workers, HiVASettings().top_k) == (2, 2)
    script = Script(he[:1], solutions)
    run(plain(iterations=3, seed=3), he[:1], ScriptedEngine(script), tmp_path)
    recs = traces(tmp_path, he[0].episode_id)
    # the source starts wired to the aggregator and to two workers that feed it: three candidates for k = 2
    assert recs[0]["agents"] == ["source", "aggregator", "agent_2", "agent_3"]
    for rec in recs:
        h = rec["hiva"]
        assert h["routing"]["over_k"] >= 1 and h["bandit"][0]["over_k"] == ["source"], h["routing"]
        assert h["bandit"][0]["k"] == 2 and len(h["bandit"][0]["chosen"]["source"]) == 2


def test_the_distance_threshold_fires_without_a_knowledge_graph() -> None:
    from toporoute.methods.hiva.graph import distance_weights
    from toporoute.methods.hiva.record import bandit_entry

    # ω renormalised over the indicators that exist: Ψ1 alone (Ψ3 would repeat θ's success history)
    assert distance_weights((0.25, 0.25, 0.25, 0.25)) == (1.0, 0.0, 0.0, 0.0)
    assert distance_weights((0.0, 0.5, 0.5, 0.0)) == (0.0, 0.0, 0.0, 0.0)
    s = HiVASettings(initial_workers=0)
    g = fresh_graph(s, "code")
    [(_, _, near), (_, _, far)] = g.apply_edits([(1, SOURCE, -1), (1, SOURCE, -1)], max_out=5)
    for slot in (near, far):
        g.add_agent(slot, AgentState(f"agent_{slot}", "worker", "a worker", g.agents[SOURCE].tool))
    # far: no shared word and a negative cosine, Ψ1 = 0.5·1 + 0.5·1.2/2 = 0.8 > 0.75: dropped
    sim = {SOURCE: (0.2, 0.5), near: (0.3, 0.6), far: (0.0, -0.2)}
    w, psi = g.weights({SOURCE}, sim, s.lam, s.eta, s.omega, s.distance_threshold)
    assert psi[far] == pytest.approx(0.8) and psi[near] == pytest.approx(0.35 + 0.1)
    assert w[SOURCE, far] == 0.0 and w[SOURCE, near] > 0.0 and w[SOURCE, SINK] == 1.0
    sel = g.select([SOURCE], w, k=2, seed=1, step=1, mode="mean")
    assert sorted(sel.chosen[SOURCE]) == sorted([SINK, near])
    entry = bandit_entry(g, [SOURCE], 0, sel.theta, w, psi, sel.chosen, k=2)
    assert entry["dropped"] == {"source": [g.name(far)]} and entry["over_k"] == []


ABLATIONS: dict[str, tuple[list[str], dict[str, Any], str]] = {
    # flag: (command line, the setting it makes, the report's label)
    "no-topology": (["--no-topology"], {"topology": False}, "w/o TEV"),
    "no-semantic": (["--no-semantic"], {"semantic": False}, "w/o SEV"),
    "broadcast": (["--broadcast"], {"broadcast": True}, "w/o KABB"),
    "no-tools": (["--no-tools"], {"tools": False}, "w/o Tool"),
    "environment": (["--environment", "self-critique"], {"environment": "self-critique"}, "w/o Env"),
}


def ablation_script(tasks: list[Task], solutions: dict[str, str]) -> Script:
    """Replies that exercise every step: tool feedback for the source, a new agent in the first iteration."""
    return Script(
        tasks,
        solutions,
        {
            "gradient": lambda r: GRADIENT_TOOL if r.tags.agent == "source" else GRADIENT,
            "decision": source_decisions("ADD_PARALLEL: an edge-case tester", "NO_CHANGE: ok"),
        },
    )


@pytest.fixture(scope="module")
def baseline(
    tmp_path_factory: pytest.TempPathFactory, he: list[Task], solutions: dict[str, str]
) -> tuple[Path, Script]:
    out = tmp_path_factory.mktemp("hiva-full") / "hiva"
    script = ablation_script(he[:1], solutions)
    run(plain(iterations=3, seed=11, apply_both=True), he[:1], ScriptedEngine(script), out)
    return out, script


@pytest.mark.parametrize("name", sorted(ABLATIONS))
def test_each_ablation_changes_what_it_names_and_nothing_else(
    name: str,
    tmp_path: Path,
    he: list[Task],
    solutions: dict[str, str],
    baseline: tuple[Path, Script],
) -> None:
    from toporoute.methods.registry import report_sections
    from toporoute.trace.report import write_report

    argv, setting, label = ABLATIONS[name]
    spec = REGISTRY["hiva"]
    assert spec.options is not None
    parser = argparse.ArgumentParser()
    parser.add_argument("--eval-timeout", type=float, default=10.0)
    spec.options.add(parser.add_argument_group("hiva"))
    read = spec.options.read(parser.parse_args(argv), Path("."))
    assert {k: read[k] for k in setting} == setting
    full_out, full = baseline
    out = tmp_path / "run" / "hiva"
    script = ablation_script(he[:1], solutions)
    run(plain(iterations=3, seed=11, apply_both=True, **setting), he[:1], ScriptedEngine(script), out)
    # run.json records the switch, and nothing else differs from the full run's params
    params = json.loads((out / "run.json").read_text())["params"]
    full_params = json.loads((full_out / "run.json").read_text())["params"]
    assert {k for k in params if params[k] != full_params[k]} == set(setting)
    ep = he[0].episode_id
    recs, full_recs = traces(out, ep), traces(full_out, ep)
    assert all(r["hiva"]["ablations"] == [label] for r in recs)
    assert all(r["hiva"]["ablations"] == [] for r in full_recs)
    assert episode_file(out, ep)["record"]["hiva"]["ablations"] == [label]
    kinds, full_kinds = kinds_of(script), kinds_of(full)
    tools_ran = [c for r in recs for c in r["hiva"]["tool_calls"]]
    prompts = [[n["prompt"] for n in r["hiva"]["graph"]["nodes"]] for r in recs]
    full_prompts = [[n["prompt"] for n in r["hiva"]["graph"]["nodes"]] for r in full_recs]
    if name == "no-topology":
        assert full_kinds - kinds == {"parallel", "decision", "new_agent", "tool_synthesis"}
        assert kinds <= full_kinds
        assert all(r["agents"] == recs[0]["agents"] for r in recs)
        assert all(r["hiva"]["repair"] == {} and r["hiva"]["decisions"] == [] for r in recs)
        assert any(u["changed"] for r in recs for u in r["hiva"]["prompt_updates"])  # SEV still on
    elif name == "no-semantic":
        assert full_kinds - kinds == {"prompt_update", "tool_refine"} and kinds <= full_kinds
        assert all(not r["hiva"]["prompt_updates"] for r in recs)
        assert prompts[-1][:2] == prompts[0][:2] and full_prompts[-1][:2] != full_prompts[0][:2]
        assert recs[1]["agents"] == full_recs[1]["agents"]  # TEV still on: the same new agent
    elif name == "broadcast":
        assert kinds == full_kinds
        for r in recs:
            for b in r["hiva"]["bandit"]:
                assert b["broadcast"] is True and b["over_k"] == []
        first = recs[0]["hiva"]["bandit"][0]["chosen"]["source"]
        assert sorted(first) == ["agent_2", "agent_3", "aggregator"]
        assert len(full_recs[0]["hiva"]["bandit"][0]["chosen"]["source"]) == 2
    elif name == "no-tools":
        assert full_kinds - kinds == {"tool_refine", "tool_synthesis"} and kinds <= full_kinds
        assert tools_ran == [] and all(not r["hiva"]["tool_updates"] for r in recs)
        forward = [r for r in script.requests if r.tags.role == "agent"]
        assert forward and not any("TOOL RESULT (" in m.content for r in forward for m in r.messages)
        assert recs[1]["agents"] == full_recs[1]["agents"]
    else:
        assert kinds - full_kinds == {"critique"} and full_kinds <= kinds
        assert all(r["hiva"]["environment"]["source"] == "self-critique" for r in recs)
        assert all(r["hiva"]["environment"]["source"] == "public-tests" for r in full_recs)
    page = write_report(tmp_path / "run", sections=report_sections()).html.read_text()
    assert f"<b>Variant:</b> {html_escape(label)}" in page
    if name == "environment":
        assert "self-critique (the paper&#x27;s w/o Env)" in page


def html_escape(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_math_self_critique_is_labelled_as_the_papers_without_env(tmp_path: Path) -> None:
    from toporoute.methods.registry import report_sections
    from toporoute.trace.report import write_report

    task = Task("mathq", "math", "A box holds 7 rows of 12 eggs; 25 break. How many are left?", answer="59")
    script = Script([task], {}, {"agent": "So \\boxed{59}", "aggregator": "\\boxed{59}"})
    run(plain(iterations=1), [task], ScriptedEngine(script), tmp_path / "run" / "hiva")
    episode = episode_file(tmp_path / "run" / "hiva", task.episode_id)
    # it once failed in a loaded CI run with an empty trace: the episode's error says why, should it recur
    assert episode["status"] == "ok", episode["error"]
    (rec,) = traces(tmp_path / "run" / "hiva", task.episode_id)
    assert rec["hiva"]["ablations"] == ["w/o Env"]
    page = write_report(tmp_path / "run", sections=report_sections()).html.read_text()
    assert "<b>Variant:</b> w/o Env" in page and "self-critique (the paper&#x27;s w/o Env)" in page


def test_a_per_instance_tasks_last_iteration_skips_the_backward_pass(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    script = Script(he[:1], solutions)
    run(hiva(iterations=2, seed=2), he[:1], ScriptedEngine(script), tmp_path / "pi")
    first, last = traces(tmp_path / "pi", he[0].episode_id)
    assert first["hiva"]["backward"] == "ran" and last["hiva"]["backward"].startswith("skipped")
    assert any(k.endswith(":gradient") for k in first["usage"]["agents"])
    steps_run = {k.split(":", 1)[1] for k in last["usage"]["agents"]}
    assert steps_run == {"forward", "aggregate"}
    assert last["hiva"]["graph_after"]["edges"] == last["hiva"]["graph"]["edges"]
    assert [n["prompt"] for n in last["hiva"]["graph_after"]["nodes"]] == [
        n["prompt"] for n in last["hiva"]["graph"]["nodes"]
    ]
    assert last["hiva"]["gradients"] == {} and last["hiva"]["decisions"] == []
    # an early stop ends on an iteration that learns nothing either
    run(
        hiva(iterations=3, early_stop=True),
        he[:1],
        ScriptedEngine(Script(he[:1], solutions)),
        tmp_path / "es",
    )
    (only,) = traces(tmp_path / "es", he[0].episode_id)
    assert only["hiva"]["backward"].startswith("skipped")
    # stream mode keeps what the last iteration learns: the next task starts from it
    run(hiva(iterations=1, mode="stream"), he[:1], ScriptedEngine(Script(he[:1], solutions)), tmp_path / "st")
    (rec,) = traces(tmp_path / "st", he[0].episode_id)
    assert rec["hiva"]["backward"] == "ran" and any(k.endswith(":gradient") for k in rec["usage"]["agents"])


def test_agents_sample_at_the_papers_temperature() -> None:
    assert HiVASettings().temperature == 1.0
    assert HiVASettings().call("agent", "e", 0, "a").temperature == 1.0
    assert HiVASettings().call("decision", "e", 0, "a").temperature == 0.3


def test_the_aggregator_runs_its_tool_on_each_response(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    script = Script(he[:1], solutions)
    run(hiva(iterations=1), he[:1], ScriptedEngine(script), tmp_path)
    (rec,) = traces(tmp_path, he[0].episode_id)
    (call,) = [c for c in rec["hiva"]["tool_calls"] if c["agent"] == "aggregator"]
    assert (
        call["on_output_of"] == "source" and call["ok"] and call["output"].startswith("2/2 visible examples")
    )
    (agg,) = [r for r in script.requests if r.tags.role == "aggregator"]
    assert "tool default_code_tool on this response: 2/2 visible examples pass" in agg.messages[-1].content


def test_think_blocks_are_stripped_before_forwarding_and_sentiment(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    task = he[0]
    program = f"```python\n{task.prompt}{solutions[task.id]}```"
    think = "<think>Maybe the answer is CRITICAL; ```python\ndef wrong(): pass\n```</think>\n"
    script = Script(
        he[:1],
        solutions,
        {
            "agent": think + program,
            "aggregator": think + program,
            "sentiment": "<think>this feedback sounds CRITICAL</think>POSITIVE",
            "decision": source_decisions("ADD_PARALLEL: a checker", "NO_CHANGE: ok"),
        },
    )
    summary = run(hiva(iterations=3, seed=1), he[:1], ScriptedEngine(script), tmp_path)
    assert summary["passed"] == 1
    recs = traces(tmp_path, he[0].episode_id)
    later = [
        r for r in script.requests if r.tags.role in ("instruction", "aggregator", "gradient", "critique")
    ]
    assert later and not any(
        "<think>" in m.content or "wrong()" in m.content for r in later for m in r.messages
    )
    assert recs[0]["hiva"]["sentiment"]["source"]["label"] == "POSITIVE"
    assert all("<think>" not in msg["public"] for r in recs for msg in r["messages"].values())


def test_gradients_can_carry_a_code_fix(tmp_path: Path, he: list[Task], solutions: dict[str, str]) -> None:
    task = he[0]
    long_program = f"```python\n# {'x' * 1500}\n{task.prompt}{solutions[task.id]}```"
    script = Script(he[:1], solutions, {"agent": long_program})
    run(hiva(iterations=2), he[:1], ScriptedEngine(script), tmp_path)
    grad = next(r for r in script.requests if r.tags.role == "gradient" and r.tags.agent == "source")
    assert (
        solutions[task.id].strip() in grad.messages[-1].content
    )  # the whole program, not its first 600 chars
    fix = "replace `if distance < threshold` by `if abs(elem - elem2) < threshold`; " * 12
    reply = f"SYSTEM_PROMPT_FEEDBACK: {'p' * 500}\nTOOL_FEEDBACK: {'t' * 300}\nOVERALL_FEEDBACK: {fix}"
    assert len(fix) > 800 and re.fullmatch(parsing.GRADIENT_REGEX, reply.rstrip())
    multi = "SYSTEM_PROMPT_FEEDBACK: \nTOOL_FEEDBACK: \nOVERALL_FEEDBACK: fix it:\n```python\nreturn x\n```"
    assert parsing.parse_gradient(multi).overall == "fix it:\n```python\nreturn x\n```"


def test_the_guided_switch_is_the_no_guide_regex_flag() -> None:
    # --no-guide-regex is the issue's --no-guided (a --no-guided flag would clash with AgentConductor's in a
    # command that runs both): the guides are off
    spec = REGISTRY["hiva"]
    assert spec.options is not None
    parser = argparse.ArgumentParser()
    parser.add_argument("--eval-timeout", type=float, default=10.0)
    spec.options.add(parser.add_argument_group("hiva"))
    assert spec.options.read(parser.parse_args(["--no-guide-regex"]), Path("."))["guided"] is False
