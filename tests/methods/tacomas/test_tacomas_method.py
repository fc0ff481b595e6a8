"""TacoMAS's loop on the scripted engine (the real-model run is the report helper's CI test): a full run with a slow
step that replaces an agent and edits edges, the τ stop, time_control stop and slow_again, malformed judge, coach
and meta output, the answer scorers (the oracle only when asked), batching across episodes, resume and the CLI."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toporoute.errors import InvalidArgumentError
from toporoute.llm.scripted import ScriptedEngine
from toporoute.llm.types import Request
from toporoute.methods import make_method
from toporoute.methods.harness import run_method
from toporoute.methods.tacomas import CALL_KINDS, TacoMAS, TacoMASSettings, Team, parsing, scorer
from toporoute.tasks import Task, load_tasks

Reply = str | Callable[[Request], str]

JUDGE = '{"score": 0.6, "reason": "useful"}'
REFLECT = "Run every visible example before sending my message."
COACH = '{"errors": "missed an edge case", "plan": "check empty inputs first"}'
VERIFY = '{"score": 0.5, "reason": "unsure"}'
REPLACE = {
    "birth_death_pairs": [
        {"v_dead": "calculator", "v_new": {"role": "researcher", "goal": "find the facts", "tools": []}}
    ],
    "graph_edit": [
        {"op": "edge_add", "from": "new_researcher", "to": "reflector"},
        {"op": "edge_remove", "from": "planner", "to": "searcher"},
    ],
    "agent_feedback": {
        "verifier": {"prompt_delta": "Check every example twice.", "memory_seed": "watch the empty list"},
        "new_researcher": {"prompt_delta": "", "memory_seed": "start from the docstring"},
    },
    "global_rationale": "the calculator adds nothing; a researcher does",
    "time_control": "continue",
}


class Script:
    """Replies by call kind (the request's role tag); ``over`` replaces a kind's reply (a str, a callable, or a
    list handed out in order, the last one repeating). Every request is kept."""

    def __init__(self, tasks: list[Task], solutions: dict[str, str], **over: Any) -> None:
        self.tasks, self.solutions, self.over = tasks, solutions, over
        self.requests: list[Request] = []

    def task_of(self, req: Request) -> Task:
        text = "\n".join(m.content for m in req.messages)
        return next(
            (t for t in self.tasks if t.entry_point and f"def {t.entry_point}(" in text), self.tasks[0]
        )

    def __call__(self, req: Request) -> str:
        self.requests.append(req)
        role = req.tags.role or ""
        if role in self.over:
            reply = self.over[role]
            if isinstance(reply, list):
                reply = reply.pop(0) if len(reply) > 1 else reply[0]
            return reply(req) if callable(reply) else reply
        if role == "agent":
            if "Final Answer:" in req.messages[-1].content:
                t = self.task_of(req)
                if t.kind == "math":
                    return "So 7 * 12 - 25 = 59.\nFinal Answer: \\boxed{59}"
                return f"All checks agree.\nFinal Answer:\n```python\n{t.prompt}{self.solutions[t.id]}```"
            return f"{req.tags.agent} says: work on the task"
        replies = {"judge": JUDGE, "coach": COACH, "verifier": VERIFY, "meta": json.dumps(REPLACE)}
        return {**replies, "reflect": REFLECT}.get(role, "?")

    def of(self, role: str, agent: str | None = None) -> list[Request]:
        return [r for r in self.requests if r.tags.role == role and (agent is None or r.tags.agent == agent)]


def run(method: TacoMAS, tasks: list[Task], engine: ScriptedEngine, out: Path) -> dict[str, Any]:
    return asyncio.run(run_method(method, tasks, engine, out, max_wait=30.0, progress=False))


def traces(out: Path, task: Task) -> list[dict[str, Any]]:
    lines = (out / "traces" / f"{task.episode_id}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def episode(out: Path, task: Task) -> dict[str, Any]:
    return json.loads((out / "episodes" / f"{task.episode_id}.json").read_text())["record"]


PLAIN = {"template": "pipeline", "tool_calls": 0, "reflect": False}
"""The loop's mechanics are tested on the pipeline template without tools or self-reflection (their own tests,
in test_tacomas_fidelity.py, run the defaults)."""


def taco(**kw: Any) -> TacoMAS:
    return TacoMAS(TacoMASSettings(**{**PLAIN, **kw}))


# ------------------------------------------------------------------------------------------------- a full run


def test_a_full_run_replaces_an_agent_edits_edges_and_records_everything(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    script = Script(he[:1], solutions)
    summary = run(taco(rounds=3), he[:1], ScriptedEngine(script), tmp_path)
    assert summary["ok"] == 1 and summary["passed"] == 1
    recs = traces(tmp_path, he[0])
    assert [r["round"] for r in recs] == [0, 1, 2]
    r0, r1, r2 = (r["tacomas"] for r in recs)
    # the 5-role template, the reflector the protected sink; waves from ops.team_schedule
    assert [m["id"] for m in r0["team"]] == ["planner", "searcher", "calculator", "verifier", "reflector"]
    assert [m["id"] for m in r0["team"] if m["sink"]] == ["reflector"]
    assert r0["waves"] == [["planner"], ["calculator"], ["searcher", "verifier"], ["reflector"]]
    lagged = {(e["src"], e["dst"]) for e in r0["edges"] if e["lagged"]}
    assert lagged == {("searcher", "verifier"), ("verifier", "searcher")}
    kinds = {(e["src"], e["dst"]): e["kind"] for e in recs[0]["edges"]}
    assert kinds[("searcher", "verifier")] == "lagged" and kinds[("planner", "searcher")] == "same_round"
    assert recs[0]["is_dag"] is False
    # judged scores, coaching, π and the answer score every round; no slow step at round 0 (K = 2)
    assert r0["scores"]["planner"] == {"score": 0.6, "reason": "useful", "error": None}
    assert r0["coaching"]["verifier"]["plan"] == "check empty inputs first"
    assert sum(r0["pi"].values()) == pytest.approx(1.0, abs=1e-3)
    assert r0["mean"] == pytest.approx(0.6) and r0["var"] == pytest.approx(0.0)
    assert r0["answer_score"] == 0.5 and r0["scorer"] == "verifier" and r0["slow"] is None
    assert r0["answer"].startswith("def ") or "return" in r0["answer"]
    # every agent judged 0.6 twice: a flat trend
    assert set(r1["trend"]) == set(r1["scores"]) and not any(r1["trend"].values())
    # round 1: the slow step (cadence), every op accepted; the replacement inherits the calculator's edges
    slow = r1["slow"]
    assert slow["why"] == "cadence" and slow["meta_error"] is None and slow["time_control"] == "continue"
    assert [(o["op"], o["accepted"], o["reason"], o["new"]) for o in slow["ops"]] == [
        ("replace", True, "ok", "researcher"),
        ("edge_add", True, "ok", None),
        ("edge_remove", True, "ok", None),
    ]
    diff = slow["diff"]
    assert diff["nodes_added"] == ["researcher"] and diff["nodes_removed"] == ["calculator"]
    assert diff["inherited"] == [["planner", "researcher"], ["researcher", "verifier"]]
    assert diff["edges_added"] == [["researcher", "reflector"]]
    assert ["planner", "searcher"] in diff["edges_removed"]
    assert (
        slow["distance"] > 0 and slow["feedback"]["researcher"]["memory_seed"] == "start from the docstring"
    )
    assert "unknown" not in json.dumps(r1["errors"])
    # round 2 runs the new team; the newborn and the verifier got the feedback
    assert [m["id"] for m in r2["team"]] == ["planner", "searcher", "verifier", "reflector", "researcher"]
    born = next(m for m in r2["team"] if m["id"] == "researcher")
    assert (
        born["parent"] == "calculator"
        and born["born"] == 1
        and born["gen"] == 1
        and born["goal"] == "find the facts"
    )
    assert {"src": "researcher", "dst": "reflector", "lagged": False} in r2["edges"]
    verifier_r2 = next(r for r in script.of("agent", "verifier") if r.tags.round == 2)
    assert "Check every example twice." in verifier_r2.messages[0].content
    assert "watch the empty list" in verifier_r2.messages[-1].content
    assert "check empty inputs first" in verifier_r2.messages[-1].content  # the coach's plan in its memory
    researcher = next(r for r in script.of("agent", "researcher"))
    assert "start from the docstring" in researcher.messages[-1].content
    # the lagged edge carries the previous round's message, a same-round edge this round's
    searcher = {r.tags.round: r.messages[-1].content for r in script.of("agent", "searcher")}
    assert "[verifier, previous round]" not in searcher[0] and "[verifier, previous round]" in searcher[1]
    assert "[planner, this round]" in searcher[0]
    # usage per call, calls per role kind, no coaching in the last round (its plan would never be read)
    usage = recs[1]["usage"]["agents"]
    assert {"planner", "judge:planner", "coach:planner", "verifier", "scorer:verifier", "meta"} <= set(usage)
    assert usage["verifier"] != usage["scorer:verifier"]  # the verifier agent's call and the scorer's apart
    calls = r1["calls"]
    assert calls["agent"]["calls"] == 5 and calls["judge"]["calls"] == 5 and calls["coach"]["calls"] == 5
    assert (
        calls["meta"]["calls"] == 1 and calls["verifier"]["calls"] == 1 and calls["meta"]["prompt_tokens"] > 0
    )
    assert r2["coaching"] == {} and r2["calls"]["coach"]["calls"] == 0
    assert {(e["src"], e["dst"]) for e in recs[1]["usage"]["edges"]} >= {("planner", "searcher")}
    rec = episode(tmp_path, he[0])
    assert rec["tacomas"] == {
        **rec["tacomas"],
        "scorer": "verifier",
        "oracle": False,
        "slow_steps": 1,
        "stopped": "rounds",
        "final": "sink_last",
        "rounds": 3,
    }
    params = json.loads((tmp_path / "run.json").read_text())["params"]
    assert params["scorer"] == "verifier" and params["k"] == 2 and params["budget_edges"] == 4


def test_the_meta_schema_admits_only_the_team_ids_and_placeholders() -> None:
    import jsonschema

    schema = parsing.meta_schema(2, 4, ["planner", "verifier", "researcher#2"])

    def reply(dead: Any, src: str, dst: str) -> dict[str, Any]:
        return {
            "birth_death_pairs": [{"v_dead": dead, "v_new": {"role": "researcher", "goal": "find facts"}}],
            "graph_edit": [{"op": "edge_add", "from": src, "to": dst}],
            "agent_feedback": {},
            "global_rationale": "",
            "time_control": "continue",
        }

    for good in (reply("planner", "new_researcher", "verifier"), reply(None, "researcher#2", "planner")):
        jsonschema.validate(good, schema)
    for bad in (
        reply("1.0", "planner", "verifier"),
        reply(None, "coder", "planner"),
        reply(None, "new_", "x"),
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    open_schema = parsing.meta_schema(2, 4)  # no ids: any string, for the core to judge
    jsonschema.validate(reply("1.0", "coder", "x"), open_schema)

    # the feedback's keys are bounded too: the team's ids (escaped: "#" and "." are not patterns) or a placeholder
    def feedback(*keys: str) -> dict[str, Any]:
        return {
            **reply(None, "planner", "verifier"),
            "agent_feedback": {k: {"prompt_delta": "x"} for k in keys},
        }

    jsonschema.validate(feedback("planner", "researcher#2", "new_researcher"), schema)
    for bad_keys in (
        ("nobody",),
        ("researcher#22",),
        ("new_" + "r" * 40,),
        ("planner", "new_a", "new_b", "new_c", "new_d"),
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(feedback(*bad_keys), schema)
    jsonschema.validate(feedback("nobody"), open_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(feedback("k" * 41), open_schema)


def _unbounded(schema: Any, path: str = "$") -> list[str]:
    """Where a guided reply could grow without end: an object that admits other keys with an unbounded value,
    a string without maxLength, an array without maxItems."""
    if isinstance(schema, list):
        return [p for i, s in enumerate(schema) for p in _unbounded(s, f"{path}[{i}]")]
    if not isinstance(schema, dict):
        return []
    found: list[str] = []
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "object" in kinds and schema.get("additionalProperties", True) is True:
        found.append(f"{path}: an open object")
    if "string" in kinds and "maxLength" not in schema and "enum" not in schema and "pattern" not in schema:
        found.append(f"{path}: a string without maxLength")
    if "array" in kinds and "maxItems" not in schema:
        found.append(f"{path}: an array without maxItems")
    for key, sub in schema.items():
        if isinstance(sub, dict) and key in ("properties", "patternProperties"):
            found += [p for name, s in sub.items() for p in _unbounded(s, f"{path}.{name}")]
        elif key in ("items", "additionalProperties", "anyOf", "oneOf"):
            found += _unbounded(sub, f"{path}.{key}")
    return found


@pytest.mark.parametrize("name", ["judge", "coach", "meta", "meta with ids"])
def test_every_guided_schema_is_closed_and_bounded(name: str) -> None:
    # an open judge or coach object let the embedded model add a key whose string ran to max_tokens, and
    # every such reply cost three attempts
    schema = {
        "judge": parsing.JUDGE_SCHEMA,
        "coach": parsing.COACH_SCHEMA,
        "meta": parsing.meta_schema(2, 4),
        "meta with ids": parsing.meta_schema(2, 4, ["planner", "verifier"]),
    }[name]
    assert _unbounded(schema) == []


def _longest(schema: dict[str, Any]) -> str:
    """The longest compact JSON a flat object schema admits: its strings at maxLength, the score 0.12345."""
    fill = {"string": lambda p: "x" * p["maxLength"], "number": lambda p: 0.12345}
    value = {k: fill[p["type"]](p) for k, p in schema["properties"].items()}
    return json.dumps(value, separators=(",", ":"))


def test_json_calls_get_the_tokens_of_their_longest_reply() -> None:
    # at one token per character (the embedded model writes "1.1.1." up to a string's bound) the longest valid
    # verdict, coaching and regex verdict still close; before, 160 and 320 tokens cut them off, and each cut
    # reply cost three attempts
    import jsonschema

    s = TacoMASSettings(max_tokens=48)
    longest_regex = '{"score": 0.000, "reason": "' + "x" * 200 + '"}'
    assert re.fullmatch(parsing.JUDGE_REGEX, longest_regex)
    for kind, schema, extra in (
        ("judge", parsing.JUDGE_SCHEMA, longest_regex),
        ("verifier", parsing.JUDGE_SCHEMA, longest_regex),
        ("coach", parsing.COACH_SCHEMA, ""),
    ):
        reply = _longest(schema)
        jsonschema.validate(json.loads(reply), schema)
        tokens = s.call(kind, "e", 0, "j").max_tokens
        assert tokens == CALL_KINDS[kind][1]
        assert tokens >= max(len(reply), len(extra)), (kind, tokens, len(reply), len(extra))


def test_the_meta_prompt_carries_the_graph_summaries_and_scores(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    script = Script(he[:1], solutions)
    run(taco(rounds=3), he[:1], ScriptedEngine(script), tmp_path)
    (meta,) = script.of("meta")
    template = ["planner", "searcher", "calculator", "verifier", "reflector"]
    assert meta.schema == parsing.meta_schema(2, 4, template)  # the team's ids, for a guided engine
    assert meta.schema["properties"]["graph_edit"]["maxItems"] == 6 and meta.sampling.temperature == 0.3
    user = meta.messages[-1].content
    graph = json.loads(user.split("Current graph:\n", 1)[1].split("\n\nAgent ids", 1)[0])
    assert (
        "Agent ids (v_dead, from, to and agent_feedback name these or a newborn): planner, searcher," in user
    )
    assert graph["sink"] == "reflector" and ["verifier", "reflector"] in graph["edges"]
    assert {a["id"] for a in graph["agents"]} == {
        "planner",
        "searcher",
        "calculator",
        "verifier",
        "reflector",
    }
    assert "round 1: score 0.60 (useful)" in user and "round 2: score 0.60" in user
    assert '"answer_score": 0.5' in user
    assert "never delete the sink (reflector)" in meta.messages[0].content
    judge = script.of("judge")[0]
    assert judge.schema == parsing.JUDGE_SCHEMA and judge.regex == parsing.JUDGE_REGEX
    assert script.of("agent")[0].sampling.temperature == 0.0


# ------------------------------------------------------------------------------------------------- stopping


def test_the_run_stops_at_tau_and_takes_no_slow_step(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    script = Script(he[:1], solutions, verifier='{"score": 1.0, "reason": "correct"}')
    run(taco(rounds=5, k=1), he[:1], ScriptedEngine(script), tmp_path)
    (rec,) = traces(tmp_path, he[0])
    assert rec["tacomas"]["slow"] is None and rec["tacomas"]["answer_score"] == 1.0
    assert rec["tacomas"]["coaching"] == {}  # the run ends: nobody reads a plan
    assert script.of("meta") == [] and script.of("coach") == []
    ep = episode(tmp_path, he[0])
    assert ep["tacomas"]["stopped"] == "tau" and ep["rounds"] == 1 and ep["halted"] is True


def test_a_slow_step_is_gated_by_tau_but_not_the_other_rounds(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    scores = ['{"score": 0.2, "reason": "no"}', '{"score": 0.95, "reason": "good"}']
    script = Script(he[:1], solutions, verifier=scores)
    run(taco(rounds=4, k=2, tau=0.9), he[:1], ScriptedEngine(script), tmp_path)
    recs = traces(tmp_path, he[0])
    assert len(recs) == 2 and recs[1]["tacomas"]["answer_score"] == 0.95
    assert all(r["tacomas"]["slow"] is None for r in recs) and script.of("meta") == []


def test_time_control_slow_again_then_stop(tmp_path: Path, he: list[Task], solutions: dict[str, str]) -> None:
    again = {**REPLACE, "birth_death_pairs": [], "graph_edit": [], "time_control": "slow_again"}
    stop = {**again, "time_control": "stop"}
    script = Script(he[:1], solutions, meta=[json.dumps(again), json.dumps(stop)])
    run(taco(rounds=8, k=2), he[:1], ScriptedEngine(script), tmp_path)
    recs = traces(tmp_path, he[0])
    assert [r["round"] for r in recs] == [0, 1, 2]
    assert recs[1]["tacomas"]["slow"]["why"] == "cadence"
    assert recs[1]["tacomas"]["slow"]["time_control"] == "slow_again"
    assert recs[2]["tacomas"]["slow"]["why"] == "slow_again"  # one round later instead of K
    assert recs[2]["tacomas"]["slow"]["time_control"] == "stop"
    ep = episode(tmp_path, he[0])
    assert ep["tacomas"]["stopped"] == "meta_stop" and ep["tacomas"]["slow_steps"] == 2 and ep["rounds"] == 3


def test_coach_every_zero_coaches_only_before_a_slow_step(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    script = Script(he[:1], solutions)
    run(taco(rounds=4, k=2, coach_every=0), he[:1], ScriptedEngine(script), tmp_path)
    recs = traces(tmp_path, he[0])
    assert [bool(r["tacomas"]["coaching"]) for r in recs] == [False, True, False, False]
    # none after the last round: its edits would never run
    assert [r["tacomas"]["slow"] is not None for r in recs] == [False, True, False, False]


# ------------------------------------------------------------------------------------------------- malformed


def test_malformed_judge_and_coach_output_is_recorded_and_the_run_goes_on(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    judged = {
        "planner": "no json here",
        "searcher": '{"score": 7, "reason": "huge"}',
        "calculator": '{"score": NaN, "reason": "nan"}',
        "verifier": '{"score": true, "reason": "bool"}',
        "reflector": '{"score": -0.5, "reason": "negative"}',
    }
    script = Script(
        he[:1],
        solutions,
        judge=lambda r: judged.get(r.tags.agent or "", JUDGE),
        coach=lambda r: "{broken" if r.tags.agent == "planner" else COACH,
        verifier='{"reason": "no score"}',
    )
    summary = run(taco(rounds=3), he[:1], ScriptedEngine(script), tmp_path)
    assert summary["ok"] == 1
    recs = traces(tmp_path, he[0])
    assert len(recs) == 3
    scores = recs[0]["tacomas"]["scores"]
    assert scores["planner"]["score"] is None and "no JSON" in scores["planner"]["error"]
    assert scores["searcher"]["score"] == 1.0 and "clamped" in scores["searcher"]["error"]
    assert scores["calculator"]["score"] is None and "NaN" in scores["calculator"]["error"]
    assert scores["verifier"]["score"] is None and scores["reflector"]["score"] == 0.0
    # the unscored agents are left out of the statistics; the clamped ones count
    pi = recs[0]["tacomas"]["pi"]
    assert set(pi) == {"searcher", "reflector"} and pi["searcher"] > pi["reflector"]
    assert recs[0]["tacomas"]["mean"] == pytest.approx(0.5)
    assert "reflector" in recs[0]["tacomas"]["death_candidates"]
    coaching = recs[0]["tacomas"]["coaching"]
    assert coaching["planner"]["error"] is not None and coaching["searcher"]["error"] is None
    planner_r1 = next(r for r in script.of("agent", "planner") if r.tags.round == 1)
    assert "check empty inputs first" not in planner_r1.messages[-1].content  # no memory update
    assert recs[0]["tacomas"]["answer_score"] is None
    steps = {(e["agent"], e["step"]) for e in recs[0]["tacomas"]["errors"]}
    assert {
        ("planner", "judge"),
        ("searcher", "judge"),
        ("planner", "coach"),
        ("scorer:verifier", "answer_score"),
    } <= steps
    # without s_t the slow step still runs (it is not gated by a missing score)
    assert recs[1]["tacomas"]["slow"] is not None


def test_adversarial_meta_output_is_projected_with_reasons(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    edits = [{"op": "edge_add", "from": "planner", "to": "reflector"}] + [
        {"op": "edge_remove", "from": "searcher", "to": "verifier"} for _ in range(199)
    ]
    meta = {
        "birth_death_pairs": [
            {"v_dead": "reflector", "v_new": None},  # the sink
            {"v_dead": "ghost", "v_new": {"role": "analyst", "goal": "x"}},  # unknown id
            {"v_dead": None, "v_new": {"role": "", "goal": "no role"}},  # unusable role
            {"v_dead": "calculator", "v_new": {"role": "Data Researcher", "goal": "dig"}},
            "not an object",
        ],
        "graph_edit": [
            {"op": "edge_add", "from": "new_data_researcher", "to": "planner"},
            {"op": "edge_add", "from": "new_analyst", "to": "planner"},  # a birth that was rejected
            {"op": "edge_add", "from": "planner", "to": "planner"},
            {"op": "teleport", "from": "planner", "to": "searcher"},
            *edits,
        ],
        "agent_feedback": {"nobody": {"prompt_delta": "x", "memory_seed": "y"}, "planner": "not an object"},
        "time_control": "sometimes",
    }
    script = Script(he[:1], solutions, meta=json.dumps(meta))
    summary = run(taco(rounds=3), he[:1], ScriptedEngine(script), tmp_path)
    assert summary["ok"] == 1
    recs = traces(tmp_path, he[0])
    assert len(recs) == 3
    slow = recs[1]["tacomas"]["slow"]
    got = [(o["op"], o["accepted"], o["reason"]) for o in slow["ops"]]
    assert got[:9] == [
        ("death", False, "sink"),
        ("replace", False, "unknown_node"),
        ("birth", False, "unknown_role_name"),
        ("replace", True, "ok"),
        ("birth", False, "unparsed"),
        ("edge_add", True, "ok"),
        ("edge_add", False, "placeholder"),
        ("edge_add", False, "self_loop"),
        ("edge_add", False, "unparsed"),
    ]
    assert len(got) == 5 + 4 + 200
    assert sum(o["reason"] == "over_row_limit" for o in slow["ops"]) == 209 - 32
    assert slow["time_control"] == "continue"  # an unknown time_control
    new = next(o["new"] for o in slow["ops"] if o["accepted"] and o["op"] == "replace")
    assert new == "data_researcher" and ["data_researcher", "planner"] in slow["diff"]["edges_added"]
    # the sink survives and every agent still reaches it; the budgets hold
    team = {m["id"] for m in recs[2]["tacomas"]["team"]}
    assert "reflector" in team and "calculator" not in team and "ghost" not in team
    assert sum(o["accepted"] and o["op"].startswith("edge") for o in slow["ops"]) <= 4
    assert slow["feedback"] == {}
    errors = [e["error"] for e in recs[1]["tacomas"]["errors"]]
    assert any("unknown agent 'nobody'" in e for e in errors) and any("sometimes" in e for e in errors)
    edges = {(e["src"], e["dst"]) for e in recs[2]["tacomas"]["edges"]}
    reach = {"reflector"}
    while True:
        more = {s for s, d in edges if d in reach} - reach
        if not more:
            break
        reach |= more
    assert reach == team


def test_bad_meta_json_is_reprompted_once_then_recorded(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    script = Script(he[:1], solutions, meta=["I think we should add a researcher.", json.dumps(REPLACE)])
    run(taco(rounds=3), he[:1], ScriptedEngine(script), tmp_path)
    recs = traces(tmp_path, he[0])
    slow = recs[1]["tacomas"]["slow"]
    assert slow["meta_error"] is None and slow["ops"][0]["accepted"]
    assert {"meta", "meta:reprompt"} <= set(recs[1]["usage"]["agents"])
    retry = script.of("meta")[1]
    assert retry.messages[-2].content == "I think we should add a researcher."
    assert "not a valid JSON object" in retry.messages[-1].content

    out = tmp_path / "bad"
    script = Script(he[:1], solutions, meta="still no json")
    summary = run(taco(rounds=3), he[:1], ScriptedEngine(script), out)
    assert summary["ok"] == 1
    recs = traces(out, he[0])
    slow = recs[1]["tacomas"]["slow"]
    assert slow["meta_error"] is not None and slow["ops"] == [] and slow["distance"] == 0
    assert len(script.of("meta")) == 2  # one re-prompt only
    assert [m["id"] for m in recs[2]["tacomas"]["team"]] == [m["id"] for m in recs[1]["tacomas"]["team"]]
    assert ("meta", "meta") in {(e["agent"], e["step"]) for e in recs[1]["tacomas"]["errors"]}


def test_an_engine_failure_ends_the_episode_as_an_error(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    # the engine gives the meta-LLM no reply: the episode is an error with that cause, not a scored answer, and
    # a rerun with the engine back runs it again
    script = Script(he[:1], solutions)
    engine = ScriptedEngine(script, fail=lambda req: "engine down" if req.tags.role == "meta" else None)
    summary = run(taco(rounds=3), he[:1], engine, tmp_path)
    assert (summary["ok"], summary["errors"], summary["passed"]) == (0, 1, 0)
    saved = json.loads((tmp_path / "episodes" / f"{he[0].episode_id}.json").read_text())
    assert saved["status"] == "error" and saved["record"] is None
    assert "engine down" in saved["cause"] and saved["usage"]["engine_failed_calls"] == 1
    assert len(script.of("meta")) == 1  # the episode ended at the failed call
    summary = run(taco(rounds=3), he[:1], ScriptedEngine(Script(he[:1], solutions)), tmp_path)
    assert (summary["ok"], summary["errors"], summary["passed"]) == (1, 0, 1)


def test_a_sink_reply_without_final_answer_is_recorded_and_the_answer_extracted(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    task = he[0]
    code = f"```python\n{task.prompt}{solutions[task.id]}```"

    def agent(req: Request) -> str:
        if req.tags.agent == "reflector":
            return "I did not follow the format."
        return f"here is a draft:\n{code}" if req.tags.agent == "calculator" else "notes"

    script = Script(he[:1], solutions, agent=agent)
    summary = run(taco(rounds=1), he[:1], ScriptedEngine(script), tmp_path)
    assert summary["passed"] == 1  # the upstream agent's code
    (rec,) = traces(tmp_path, task)
    (err,) = [e for e in rec["tacomas"]["errors"] if e["step"] == "answer"]
    assert "no 'Final Answer:' line" in err["error"] and "upstream" in err["error"]
    assert rec["messages"]["reflector"]["parse_error"] == err["error"]


# ------------------------------------------------------------------------------------------------- scorers


def test_the_oracle_is_consulted_only_when_asked(
    tmp_path: Path, he: list[Task], solutions: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    consulted: list[str] = []
    real = scorer.score

    def spy(task: Task, answer: str | None, **kw: Any) -> Any:
        consulted.append(task.id)
        return real(task, answer, **kw)

    monkeypatch.setattr(scorer, "score", spy)
    for name in ("verifier", "tests"):
        run(taco(rounds=2, scorer=name), he[:1], ScriptedEngine(Script(he[:1], solutions)), tmp_path / name)
        assert consulted == []
        assert episode(tmp_path / name, he[0])["tacomas"]["oracle"] is False
    tests = traces(tmp_path / "tests", he[0])
    assert tests[0]["tacomas"]["scorer"] == "tests" and tests[0]["tacomas"]["answer_score"] == 1.0
    assert "visible examples" in tests[0]["tacomas"]["scorer_detail"]

    script = Script(he[:1], solutions)
    run(taco(rounds=2, scorer="oracle"), he[:1], ScriptedEngine(script), tmp_path / "oracle")
    assert consulted == [he[0].id]  # the canonical solution passes: s_t = 1 stops the run
    recs = traces(tmp_path / "oracle", he[0])
    assert recs[0]["tacomas"]["scorer"] == "oracle" and recs[0]["tacomas"]["answer_score"] == 1.0
    assert script.of("verifier") == []
    ep = episode(tmp_path / "oracle", he[0])
    assert ep["tacomas"]["oracle"] is True and ep["tacomas"]["scorer"] == "oracle"
    assert json.loads((tmp_path / "oracle" / "run.json").read_text())["params"]["scorer"] == "oracle"


def test_the_tests_scorer_falls_back_to_the_verifier_without_examples(
    tmp_path: Path, solutions: dict[str, str]
) -> None:
    math = load_tasks("math-demo", limit=1)
    script = Script(math, solutions)
    run(taco(rounds=1, scorer="tests"), math, ScriptedEngine(script), tmp_path)
    (rec,) = traces(tmp_path, math[0])
    assert rec["tacomas"]["scorer"] == "verifier" and "tests:" in rec["tacomas"]["scorer_detail"]
    assert rec["tacomas"]["answer_score"] == 0.5 and len(script.of("verifier")) == 1


def test_final_best_takes_the_best_scored_round(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    task = he[0]
    wrong = f"Final Answer:\n```python\n{task.prompt}    return None\n```"
    right = f"Final Answer:\n```python\n{task.prompt}{solutions[task.id]}```"

    def agent(req: Request) -> str:
        if req.tags.agent != "reflector":
            return "notes"
        return right if req.tags.round == 1 else wrong

    verdicts = [
        '{"score": 0.1, "reason": "a"}',
        '{"score": 0.8, "reason": "b"}',
        '{"score": 0.3, "reason": "c"}',
    ]
    for final, passed in (("best", 1), ("last", 0)):
        script = Script(he[:1], solutions, agent=agent, verifier=list(verdicts))
        summary = run(taco(rounds=3, final=final), he[:1], ScriptedEngine(script), tmp_path / final)
        assert summary["passed"] == passed
        ep = episode(tmp_path / final, task)["tacomas"]
        assert ep["final"] == ("best_scored" if final == "best" else "sink_last")
        assert ep["final_round"] == (1 if final == "best" else 2)


# ------------------------------------------------------------------------------------------------- batching


def test_calls_batch_by_wave_judge_and_meta_across_episodes(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    script = Script(he, solutions)
    engine = ScriptedEngine(script)
    run(taco(rounds=3), he, engine, tmp_path)
    kinds = [[r.tags.role for r in batch] for batch in engine.batches]
    episodes = [{r.tags.episode for r in batch} for batch in engine.batches]
    assert all(
        len(set(k) - {"verifier"}) == 1 for k in kinds
    )  # one kind per batch (the verifier joins the judge)
    both = {he[0].episode_id, he[1].episode_id}
    assert all(e == both for e in episodes)  # every batch holds both episodes' calls
    agents = [[r.tags.agent for r in b] for b in engine.batches if b[0].tags.role == "agent"]
    assert sorted(agents[2]) == ["searcher", "searcher", "verifier", "verifier"]  # a wave: one call
    judge = [b for b in engine.batches if b[0].tags.role == "judge"]
    assert len(judge) == 3 and all(len(b) == 2 * (5 + 1) for b in judge)
    (meta,) = [b for b in engine.batches if b[0].tags.role == "meta"]
    assert len(meta) == 2
    # 4 waves + judge per round, coach after rounds 0 and 1 (not the last), meta once
    assert len(engine.batches) == 3 * (4 + 1) + 2 + 1


def test_resume_skips_finished_episodes(tmp_path: Path, he: list[Task], solutions: dict[str, str]) -> None:
    run(taco(rounds=2), he, ScriptedEngine(Script(he, solutions)), tmp_path)
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("episodes/*.json")}
    engine = ScriptedEngine(Script(he, solutions))
    summary = asyncio.run(run_method(taco(rounds=2), he, engine, tmp_path, max_wait=30.0, progress=False))
    assert summary["episodes"] == 2 and engine.batches == []
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("episodes/*.json")} == stamps
    with pytest.raises(InvalidArgumentError, match="other settings"):
        asyncio.run(run_method(taco(rounds=3), he, engine, tmp_path, progress=False))


# ------------------------------------------------------------------------------------------------- pure parts


def test_encode_plan_maps_ids_placeholders_and_the_row_limit() -> None:
    team = Team(22, "code")
    plan = parsing.parse_meta(
        {
            "birth_death_pairs": [
                {"v_dead": None, "v_new": {"role": "Auditor", "goal": "audit"}},
                {"v_dead": "searcher", "v_new": None},
            ],
            "graph_edit": [
                {"op": "edge_add", "from": "auditor", "to": "reflector"},
                {"op": "edge_remove", "from": "planner", "to": "gone"},
                {"op": "edge_add", "from": "new_1", "to": "verifier"},
            ],
            "time_control": "stop",
        }
    )
    enc = parsing.encode_plan(plan, team, row_limit=4)
    from toporoute.types import team_codes as tc

    far = enc.rows[3, 2]
    assert enc.rows.tolist() == [
        [tc.TEAM_BIRTH, -1, 0, team.table.id_of("auditor")],
        [tc.TEAM_DEATH, 1, 0, -1],
        [tc.TEAM_EDGE_ADD, -2, 4, 0],
        [tc.TEAM_EDGE_REMOVE, 0, far, 0],
    ]
    assert far >= team.capacity  # an unknown id: the core rejects it as unknown_node
    assert [o["reason"] for o in enc.ops] == [None, None, None, None, "over_row_limit"]
    assert plan.time_control == "stop" and team.table.names[-1] == "auditor"


@pytest.mark.parametrize(
    ("value", "score", "error"),
    [
        ({"score": 0.25, "reason": "r"}, 0.25, None),
        ({"score": 1.5, "reason": "r"}, 1.0, "clamped"),
        ({"score": float("nan"), "reason": "r"}, None, "NaN"),
        ({"score": "high", "reason": "r"}, None, "number"),
        ([0.5], None, "object"),
    ],
)
def test_parse_verdict(value: Any, score: float | None, error: str | None) -> None:
    v = parsing.parse_verdict(value)
    assert v.score == score and (v.error is None if error is None else error in v.error)


def test_settings_validate_and_cap_the_call_kinds() -> None:
    s = TacoMASSettings(max_tokens=48)
    assert s.call("agent", "e", 0, "planner").max_tokens == 48
    assert s.call("judge", "e", 0, "j").max_tokens == 240  # a JSON verdict keeps room to close
    assert s.call("meta", "e", 0, "m").max_tokens == 1024 and s.call("meta", "e", 0, "m").temperature == 0.3
    assert TacoMASSettings().call("meta", "e", 0, "m").max_tokens == 1024
    for bad in ({"scorer": "gold"}, {"k": 0}, {"tau": 1.5}, {"max_agents": 63}, {"final": "first"}):
        with pytest.raises(InvalidArgumentError):
            TacoMASSettings(**bad)
    team = Team(TacoMASSettings().capacity, "code", "pipeline")
    assert team.capacity == 22 and np.flatnonzero(team.alive).tolist() == [0, 1, 2, 3, 4]
    assert team.critical().tolist() == [False, False, False, False, True]


# ------------------------------------------------------------------------------------------------- CLI


def test_cli_options_reach_the_settings_beside_the_baselines(tmp_path: Path) -> None:
    from toporoute.cli import _parse
    from toporoute.methods.registry import REGISTRY

    args = _parse(
        [
            "run", "tacomas", "dytopo", "hiva", "single", "--out", str(tmp_path), "--tau", "0.8",
            "--max-agents", "12", "--k", "3", "--coach-every", "0", "--budget-edges", "6",
            "--scorer", "tests", "--final", "best",
        ]
    )  # fmt: skip
    taco_opts = REGISTRY["tacomas"].options
    assert taco_opts is not None
    got = taco_opts.read(args, tmp_path)
    assert got["tau"] == 0.8 and got["max_agents"] == 12 and got["k"] == 3 and got["coach_every"] == 0
    method = make_method("tacomas", rounds=4, **got)
    assert isinstance(method, TacoMAS)
    assert (
        method.settings.rounds == 4 and method.settings.scorer == "tests" and method.settings.final == "best"
    )
    hiva_opts = REGISTRY["hiva"].options
    assert hiva_opts is not None and hiva_opts.read(args, tmp_path)["max_agents"] == 12
    alone = _parse(["run", "hiva", "--out", str(tmp_path)])
    assert hiva_opts is not None and "max_agents" not in hiva_opts.read(alone, tmp_path)  # HiVA's default
    default = taco_opts.read(_parse(["run", "tacomas", "--out", str(tmp_path)]), tmp_path)
    assert "tau" not in default and make_method("tacomas", **default).settings.tau == 1.0


def test_tau_given_with_dytopo_and_tacomas_in_one_run_is_refused(tmp_path: Path) -> None:
    """``--tau`` is DyTopo's edge threshold and TacoMAS's stop threshold: one value cannot mean both."""
    from toporoute import errors
    from toporoute.cli import _parse, main
    from toporoute.methods.registry import check_shared_options

    both = _parse(["run", "tacomas", "random", "--out", str(tmp_path), "--tau", "0.8"])
    with pytest.raises(errors.ToporouteError, match=r"--tau is the edge threshold of random .* tacomas"):
        check_shared_options(both, ["tacomas", "random"])
    check_shared_options(_parse(["run", "tacomas", "dytopo", "--out", str(tmp_path)]), ["tacomas", "dytopo"])
    check_shared_options(both, ["tacomas", "hiva"])  # --tau is TacoMAS's alone there
    assert main(["run", "tacomas", "dytopo", "--out", str(tmp_path / "r"), "--tau", "0.5"]) == 2


def test_final_answer_text_takes_the_last_marker() -> None:
    assert (
        parsing.final_answer_text("draft\nFinal Answer: 1\nrevised\nfinal answer:  \\boxed{2}")
        == "\\boxed{2}"
    )
    assert parsing.final_answer_text("the final answer is 3") is None
