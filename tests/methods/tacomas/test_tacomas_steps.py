"""TacoMAS's steps that need no engine (``toporoute.methods.tacomas.steps``), on a fresh team of the 5-role
template: the slow step's application of a meta plan, the round's answer and its fallbacks, the meta-LLM's
summaries."""

from __future__ import annotations

import copy

from _tasks import code_task
from test_tacomas_method import REPLACE

from toporoute.methods.episode import RoundErrors
from toporoute.methods.tacomas import TacoMASSettings, steps
from toporoute.methods.tacomas.parsing import parse_meta
from toporoute.methods.tacomas.team import Team

SETTINGS = TacoMASSettings()
CODE = code_task("demo/add", "add", "def add(a, b):\n")


def fresh() -> Team:
    return Team(SETTINGS.capacity, "code")


def test_a_replace_plan_swaps_the_agent_edits_edges_and_places_the_feedback() -> None:
    team, errors = fresh(), RoundErrors()
    before = set(team.ids())
    block = steps.apply_plan(team, parse_meta(copy.deepcopy(REPLACE)), SETTINGS, "code", 1, errors)
    assert errors.errors == []
    (born,) = [op["new"] for op in block["ops"] if op["op"] == "replace"]
    assert born is not None and born in team.ids() and "calculator" not in team.ids()
    assert block["diff"]["nodes_added"] == [born] and block["diff"]["nodes_removed"] == ["calculator"]
    assert set(team.ids()) == before - {"calculator"} | {born}
    assert [born, "reflector"] in block["diff"]["edges_added"]
    assert ["planner", "searcher"] in block["diff"]["edges_removed"]
    assert all(op["accepted"] and op["reason"] == "ok" for op in block["ops"])
    assert block["distance"] > 0 and block["time_control"] == "continue"
    # the feedback of a newborn reaches it through its placeholder name
    assert set(block["feedback"]) == {"verifier", born}
    assert team.agents[team.slot_of("verifier")].prompt_deltas == ["Check every example twice."]


def test_feedback_for_an_unknown_agent_is_an_error_and_the_rest_still_applies() -> None:
    plan = copy.deepcopy(REPLACE)
    plan["agent_feedback"] = {"nobody": {"prompt_delta": "x", "memory_seed": ""}, "verifier": "not an object"}
    team, errors = fresh(), RoundErrors()
    block = steps.apply_plan(team, parse_meta(plan), SETTINGS, "code", 1, errors)
    assert [e["error"] for e in errors.errors] == [
        "feedback for an unknown agent 'nobody' dropped",
        "feedback for 'verifier' is not an object: dropped",
    ]
    assert block["feedback"] == {} and block["diff"]["nodes_removed"] == ["calculator"]


def test_an_unusable_plan_changes_nothing() -> None:
    team = fresh()
    adj, ids = team.adj.copy(), team.ids()
    block = steps.apply_plan(team, parse_meta(None, "no JSON object"), SETTINGS, "code", 1, RoundErrors())
    assert block["ops"] == [] and block["distance"] == 0 and team.ids() == ids and (team.adj == adj).all()


def test_the_answer_falls_back_from_the_sinks_final_line_to_its_reply_to_an_upstream_agent() -> None:
    sink, code = 4, "```python\ndef add(a, b):\n    return a + b\n```"
    order = [0, 1, 2, 3, 4]
    assert steps.sink_answer(CODE, {sink: f"Done.\nFinal Answer:\n{code}"}, order, sink)[1] is None
    answer, why = steps.sink_answer(CODE, {sink: f"Here:\n{code}"}, order, sink)
    assert answer.startswith("def add") and why == "the sink's reply has no 'Final Answer:' line"
    answer, why = steps.sink_answer(CODE, {sink: "", 2: code}, order, sink)
    assert answer.startswith("def add")
    assert why == "the sink's reply has no 'Final Answer:' line: an upstream agent's answer taken"
    assert steps.sink_answer(CODE, {}, order, sink)[0] == ""


def test_summaries_cover_the_last_k_rounds_of_every_agent() -> None:
    team = fresh()
    log = {
        "planner": {
            0: {"output": "old", "score": 0.1, "reason": "r0"},
            2: {"output": "new  text", "score": None, "reason": ""},
        }
    }
    text = steps.summaries(team, log, 2, 2)
    assert "planner (role planner):\n  round 3: score unscored (no reason); output: new text" in text
    assert "round 1" not in text and "searcher (role searcher):\n  (no rounds yet)" in text
