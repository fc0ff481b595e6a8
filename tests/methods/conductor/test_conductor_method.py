"""AgentConductor's loop, reward and training hooks on the scripted engine (the real run with vLLM is in
tests/methods/conductor/test_conductor_vllm.py). The tester runs real code in the real sandbox on real
HumanEval tasks."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import _humaneval
import numpy as np
import pytest
from _conductor_plans import PLAN_FIX, yaml_block
from _letters import LetterEncoder

from toporoute import ops
from toporoute.errors import InvalidArgumentError
from toporoute.llm.scripted import ScriptedEngine
from toporoute.llm.types import Request
from toporoute.methods import make_method
from toporoute.methods.conductor import (
    EXEC_REWARD,
    Conductor,
    ConductorSettings,
    RewardConfig,
    grpo_advantages,
    trajectory_return,
    turn_rewards,
)
from toporoute.methods.conductor._prompts import plan_regex
from toporoute.methods.conductor.training import (
    PlanReward,
    canonical_form,
    collect_rollouts,
    load_rollouts,
    sft_records,
)
from toporoute.methods.harness import run_method
from toporoute.tasks import Task
from toporoute.types.conductor_topology import (
    LOGIC,
    NO_YAML,
    PARSE,
    SCHEMA,
    CheckOptions,
    Context,
    extract_yaml,
)

PLAN_PCT = "I think a planner helps.\n" + yaml_block(
    (1, [("<planner>", []), ("<algorithmer>", [])]),
    (2, [("<coder>", ["<planner>"])]),
    (3, [("<tester>", ["<coder>"])]),
)
BAD_LOGIC = "```yaml\n- step: 1\n  agents:\n    - agent: <coder>\n      ref: [<planner>]\n```"


he = _humaneval.tasks_fixture(2)
solutions = _humaneval.solutions


class Team:
    """Scripted replies by role; records each agent's prompt."""

    def __init__(
        self, tasks: list[Task], solutions: dict[str, str], plans: list[str], coder_ok: bool = False
    ):
        self.tasks, self.solutions, self.plans, self.coder_ok = tasks, solutions, plans, coder_ok
        self.prompts: dict[str, str] = {}

    def task_of(self, req: Request) -> Task:
        text = req.messages[-1].content
        return next(t for t in self.tasks if t.prompt.strip() in text)

    def __call__(self, req: Request) -> str:
        role, agent = req.tags.role, req.tags.agent
        task = self.task_of(req)
        self.prompts[f"{task.id}|{req.tags.round}|{agent}"] = req.messages[-1].content
        if role == "orchestrator":
            return self.plans[min(req.tags.round, len(self.plans) - 1)]
        if role == "coder":
            body = self.solutions[task.id] if self.coder_ok else "    return None\n"
            return f"Here it is.\n```python\n{task.prompt}{body}```"
        if role == "debugger":
            return f"```python\n{task.prompt}{self.solutions[task.id]}```"
        return f"{role} output for {task.entry_point} ({agent})"


def run_episodes(method: Conductor, tasks: list[Task], engine: ScriptedEngine, out: Path) -> dict:
    # a batch waits for every live episode (not a 0.25 s timer): an episode still in the sandbox on a loaded
    # machine must not split the round's batch the tests check
    return asyncio.run(run_method(method, tasks, engine, out, max_wait=30.0, progress=False))


def traces(out: Path, episode: str) -> list[dict]:
    return [json.loads(line) for line in (out / "traces" / f"{episode}.jsonl").read_text().splitlines()]


def test_fail_then_fix_two_turns(tmp_path: Path, he: list[Task], solutions: dict[str, str]) -> None:
    team = Team(he, solutions, [PLAN_PCT, PLAN_FIX])
    engine = ScriptedEngine(team)
    summary = run_episodes(Conductor(), he, engine, tmp_path)
    assert summary["ok"] == 2 and summary["passed"] == 2
    recs = traces(tmp_path, "HumanEval-0")
    assert [r["round"] for r in recs] == [0, 1]
    r0, r1 = recs
    # turn 1: the wrong program fails the public examples; the hidden tests grade the reward
    assert r0["check"]["error"] is None and r0["yaml"].startswith("- step: 1")
    assert r0["layers"] == [["planner@1", "algorithmer@1"], ["coder@2"], ["tester@3"]]
    assert r0["check"]["warnings"] == ["step 1: <algorithmer> feeds no later agent"]
    assert r0["verdict"] == "[WRONG ANSWER]" and r0["reward_verdict"] == "[WRONG ANSWER]"
    assert r0["tester"]["tests"] == "public" and "expected" in r0["tester"]["logs"]
    d = ops.conductor_density(4, 2, 3, 7)  # HumanEval/0 is labelled medium: N_max 7
    assert r0["reward"]["r_g"] == pytest.approx(float(d.reward), abs=1e-6)
    assert r0["reward"]["r"] == pytest.approx(1.0 + float(d.reward), abs=1e-6)
    assert r0["density"] == {
        "nodes": 4,
        "edges": 2,
        "steps": 3,
        "depth": 3,
        "s_complex": pytest.approx(float(d.s_complex)),
    }
    # turn 2: cross-turn refs and the tester's self edge; the debugger's fix passes and stops the loop
    assert {(e["src"], e["dst"], e["kind"]) for e in r1["edges"]} == {
        ("t1:coder@2", "debugger@4", "cross"),
        ("t1:tester@3", "debugger@4", "cross"),
        ("debugger@4", "tester@5", "intra"),
        ("t1:tester@3", "tester@5", "self"),
    }
    assert r1["verdict"] == "PASSED" and r1["reward"]["r_e"] == 1.5
    ep = json.loads((tmp_path / "episodes" / "HumanEval-0.json").read_text())["record"]
    assert ep["rounds"] == 2 and ep["halted"] and ep["score"]["passed"]
    info = ep["conductor"]
    assert info["level"] == "medium" and info["level_source"] == "task" and info["n_max"] == 7
    assert info["return"] == pytest.approx(sum(info["rewards"]))
    assert info["rewards"] == [r0["reward"]["r"], r1["reward"]["r"]]
    # a layer's agents go to the engine together (with the other episode's: round-synchronous batching);
    # the tester makes no LLM call
    roles = [sorted(r.tags.role for r in b) for b in engine.batches]
    assert roles == [["orchestrator"] * 2, ["algorithmer", "algorithmer", "planner", "planner"], ["coder"] * 2,
                     ["orchestrator"] * 2, ["debugger"] * 2]  # fmt: skip


def test_visibility_is_direct_refs_view_and_memory(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    plan = PLAN_PCT.replace("ref: [<planner>]\n- step: 3", "ref: [<planner>]\n- step: 3")
    chain = plan.replace(
        "- step: 2\n  agents:\n    - agent: <coder>\n      ref: [<planner>]",
        "- step: 2\n  agents:\n    - agent: <planner_2>\n      ref: [<planner>]\n- step: 3\n  agents:\n    - agent: <coder>\n      ref: [<planner_2>]",
    ).replace("- step: 3\n  agents:\n    - agent: <tester>", "- step: 4\n  agents:\n    - agent: <tester>")
    second = "```yaml\n- step: 5\n  agents:\n    - agent: <planner>\n      ref: [<tester>]\n- step: 6\n  agents:\n    - agent: <coder>\n      ref: [<planner>]\n- step: 7\n  agents:\n    - agent: <tester>\n      ref: [<coder>]\n```"
    team = Team(he[:1], solutions, [chain, second])
    run_episodes(Conductor(), he[:1], ScriptedEngine(team), tmp_path)
    p = team.prompts
    coder = p["HumanEval/0|0|coder@3"]
    assert "[planner_2@2]" in coder and "planner output" not in coder.split("[planner_2@2]")[0]
    assert "[planner@1]" not in coder  # not transitive
    assert "previous round" not in coder.lower()
    # turn 2: the view of turn 1 (plan, verdict, logs), the planner's own turn-1 output as memory
    planner2 = p["HumanEval/0|1|planner@5"]
    assert "The previous round's plan" in planner2 and "[WRONG ANSWER]" in planner2
    assert "Your earlier outputs:\n[t1:planner@1]" in planner2
    assert "[t1:tester@4]" in planner2 and "Status: [WRONG ANSWER]" in planner2
    orch2 = p["HumanEval/0|1|orchestrator"]
    assert "Round 1 plan:" in orch2 and "Tester result: [WRONG ANSWER]" in orch2
    assert "Number its steps from 5 on" in orch2


def test_invalid_plans_cost_a_turn_and_feed_back(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    team = Team(he[:1], solutions, [BAD_LOGIC, "no yaml at all"])
    run_episodes(Conductor(), he[:1], ScriptedEngine(team), tmp_path)
    r0, r1 = traces(tmp_path, "HumanEval-0")
    assert r0["check"]["error"] == "[YAML LOGIC INVALID]" and "(L1)" in r0["check"]["message"]
    assert r0["reward"] == {"r_e": -0.5, "r_g": 0.0, "r": -0.5}
    assert r1["check"]["error"] == "[NO YAML FOUND]" and r1["reward"]["r"] == -2.0
    assert "[YAML LOGIC INVALID]" in team.prompts["HumanEval/0|1|orchestrator"]
    ep = json.loads((tmp_path / "episodes" / "HumanEval-0.json").read_text())["record"]
    assert ep["answer"] == "" and ep["score"]["status"] == "no-answer"
    assert ep["conductor"]["return"] == pytest.approx(-2.5)


def test_orchestrator_requests_carry_the_plan_grammar(he: list[Task]) -> None:
    m = Conductor()
    req = m._orchestrator_request("e", he[0], 0, [], first=True)
    assert req.regex == plan_regex(m.settings.check_options, True, "validator")
    assert re.fullmatch(req.regex, PLAN_PCT.split("\n", 1)[1])
    assert re.fullmatch(req.regex, BAD_LOGIC)  # refs in the first step: the checker's L1, not the grammar's
    assert not re.fullmatch(plan_regex(m.settings.check_options, True, "strict"), BAD_LOGIC)
    assert re.fullmatch(plan_regex(m.settings.check_options, False), PLAN_FIX)
    assert (
        Conductor(ConductorSettings(guided=False))._orchestrator_request("e", he[0], 0, [], first=True).regex
        is None
    )
    assert "Task:" in req.messages[-1].content and "<debugger>" in req.messages[0].content
    # requests without a regex keep their replay keys
    plain = Request.chat("s", "u")
    assert plain.key() == Request.chat("s", "u", regex=None).key() != Request.chat("s", "u", regex="x").key()


def test_hidden_feedback_and_levels(tmp_path: Path, he: list[Task], solutions: dict[str, str]) -> None:
    team = Team(he[:1], solutions, [PLAN_PCT], coder_ok=True)
    method = Conductor(ConductorSettings(feedback_tests="hidden", level="hard", max_turns=1))
    run_episodes(method, he[:1], ScriptedEngine(team), tmp_path)
    (r0,) = traces(tmp_path, "HumanEval-0")
    assert r0["tester"]["tests"] == "hidden" and r0["verdict"] == "PASSED" and r0["n_max"] == 10
    labelled = Task(
        "t/1", "code", he[0].prompt, he[0].entry_point, he[0].test, meta={"difficulty": "interview"}
    )
    assert ConductorSettings().level_of(labelled) == ("medium", "task")
    with pytest.raises(InvalidArgumentError, match="level"):
        ConductorSettings(level="extreme")
    with pytest.raises(InvalidArgumentError, match="feedback_tests"):
        ConductorSettings(feedback_tests="oracle")
    math = Task("m", "math", "1+1?", answer="2")
    with pytest.raises(InvalidArgumentError, match="code tasks"):
        asyncio.run(Conductor().episode(None, math, print))  # type: ignore[arg-type]


def test_searcher_retrieves_without_the_problem_itself(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    from toporoute.methods.conductor._retrieval import Document, Retriever

    corpus = (
        Document(he[0].id, he[0].prompt, solutions[he[0].id]),
        Document("other/1", "Sort a list of numbers.", "def f(x):\n    return sorted(x)\n"),
    )
    plan = PLAN_PCT.replace("<algorithmer>", "<searcher>").replace(
        "ref: [<planner>]", "ref: [<planner>, <searcher>]"
    )
    team = Team(he[:1], solutions, [plan], coder_ok=True)
    method = Conductor(retriever=Retriever(LetterEncoder(), corpus, top_k=3))
    run_episodes(method, he[:1], ScriptedEngine(team), tmp_path)
    (r0,) = traces(tmp_path, "HumanEval-0")
    found = r0["messages"]["searcher@1"]["public"]
    assert found.startswith("Query: searcher output") and "other/1" in found and he[0].id not in found
    assert "other/1" in team.prompts["HumanEval/0|0|coder@2"]


def test_make_method_and_params() -> None:
    m = make_method("conductor", rounds=3, level="medium", return_mode="mean")
    assert isinstance(m, Conductor) and m.settings.max_turns == 3
    p = m.params()
    assert p["method"] == "conductor" and p["level"] == "medium" and p["pool"][0] == "planner"
    json.dumps(p)


# --------------------------------------------------------------------------------------------- rewards


def test_turn_rewards_table_and_modes() -> None:
    r = turn_rewards([NO_YAML, PARSE, SCHEMA, LOGIC], [None] * 4, [0] * 4, [0] * 4, [0] * 4, 4)
    assert r.r.tolist() == [-2.0, -1.5, -1.0, -0.5] and r.r_g.tolist() == [0.0] * 4
    verdicts = list(EXEC_REWARD)
    r = turn_rewards([0] * 6, verdicts, [2] * 6, [1] * 6, [2] * 6, 4)
    np.testing.assert_allclose(r.r_e, [1.5, 1.0, 0.9, 0.8, 0.7, 0.6])
    np.testing.assert_allclose(r.r_g, 7.6875, atol=1e-4)
    over = turn_rewards([0], ["PASSED"], [5], [4], [5], 4)
    assert over.r_g[0] == pytest.approx(-0.2449, abs=1e-4)
    norm = turn_rewards([0], ["PASSED"], [2], [1], [2], 4, RewardConfig(density_mode="normalized", w_g=2.0))
    assert norm.r_g[0] == pytest.approx((np.exp(-0.5) + 2 * np.exp(-1 / 3) + 0) / 4)
    assert norm.r[0] == pytest.approx(1.5 + 2 * norm.r_g[0])
    assert turn_rewards([0], [None], [2], [1], [2], 4).r_e[0] == 0.0
    with pytest.raises(InvalidArgumentError, match="verdicts"):
        turn_rewards([0], ["OK"], [2], [1], [2], 4)


def test_returns_and_advantages() -> None:
    fail_fail, pass_once = [1.0 + 7.0, 1.0 + 7.0], [1.5 + 7.0]
    assert trajectory_return(fail_fail) > trajectory_return(pass_once)  # spec §9.8: the paper's sum
    mean = RewardConfig(return_mode="mean")
    assert trajectory_return(fail_fail, mean) < trajectory_return(pass_once, mean)
    assert trajectory_return([1.0, 2.0], RewardConfig(gamma=0.5)) == pytest.approx(2.0)
    assert trajectory_return([1.0, 2.0], RewardConfig(return_mode="last")) == 2.0
    adv = grpo_advantages(np.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]))
    np.testing.assert_allclose(adv[0], [-1.0, 0.0, 1.0], atol=1e-5)
    assert adv[1].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(InvalidArgumentError):
        grpo_advantages(np.ones((2, 1)))


# --------------------------------------------------------------------------------------------- training hooks


def test_plan_reward_for_grpo_trainers() -> None:
    fn = PlanReward()
    completions = [PLAN_PCT, [{"role": "assistant", "content": PLAN_FIX}], BAD_LOGIC, "nothing"]
    got = fn(prompts=["p"] * 4, completions=completions, level=["easy", "easy", "hard", "hard"])
    d = ops.conductor_density(4, 2, 3, 4)
    # PLAN_FIX alone (a first turn) refs nothing earlier: LOGIC
    assert got == pytest.approx([float(d.reward), -0.5, -0.5, -2.0])
    with_verdict = fn(completions=[PLAN_PCT], verdict=["PASSED"])
    assert with_verdict == pytest.approx([1.5 + float(d.reward)])
    called = []
    fn2 = PlanReward(
        verdict_fn=lambda i, g, row: called.append((i, g.n_nodes, row["level"])) or "[RUNTIME ERROR]"
    )
    assert fn2(completions=[PLAN_PCT], level=["medium"]) == pytest.approx(
        [0.7 + float(ops.conductor_density(4, 2, 3, 7).reward)]
    )
    assert called == [(0, 4, "medium")]
    with pytest.raises(InvalidArgumentError, match="level"):
        fn(completions=[PLAN_PCT], level=["galactic"])


def test_collect_rollouts_and_sft(tmp_path: Path, he: list[Task], solutions: dict[str, str]) -> None:
    plans = {0: [PLAN_PCT, PLAN_FIX], 1: [BAD_LOGIC, PLAN_PCT]}

    def reply(req: Request) -> str:
        team = Team(he, solutions, plans[req.sampling.seed % 2])  # members differ by seed
        return team(req)

    seeds = {}

    def by_member(req: Request) -> str:
        if req.tags.role == "orchestrator":
            member = seeds.setdefault(req.sampling.seed, len(seeds)) % 2
            return plans[member][min(req.tags.round, 1)]
        return Team(he, solutions, [PLAN_PCT])(req)

    method = Conductor(ConductorSettings(return_mode="mean"))
    rows = asyncio.run(
        collect_rollouts(method, he, ScriptedEngine(by_member), tmp_path, group_size=2, progress=False)
    )
    assert len(rows) == 4 and (tmp_path / "rollouts.jsonl").is_file()
    by_task = {}
    for r in rows:
        by_task.setdefault(r["task"], []).append(r)
        assert r["segments"][0]["train"] is False and r["segments"][1]["train"] is True
        assert [s["train"] for s in r["segments"]].count(True) == len(r["turns"])
        assert r["turns"][0]["prompt"][0][0] == "system"
    for group in by_task.values():
        returns = np.array([[g["return"] for g in group]])
        np.testing.assert_allclose([g["advantage"] for g in group], grpo_advantages(returns)[0])
    # the recorded rollouts' rewards are the reward function's
    for ro in load_rollouts(tmp_path / "g0") + load_rollouts(tmp_path / "g1"):
        for t, rw in zip(ro["turns"], ro["rewards"]):
            err = {
                None: 0,
                "[NO YAML FOUND]": NO_YAML,
                "[YAML PARSE ERROR]": PARSE,
                "[YAML SCHEMA INVALID]": SCHEMA,
                "[YAML LOGIC INVALID]": LOGIC,
            }[t["check"]["error"]]
            d = t.get("density") or {"nodes": 0, "edges": 0, "steps": 0}
            want = turn_rewards(
                [err], [t.get("reward_verdict")], [d["nodes"]], [d["edges"]], [d["steps"]], ro["n_max"]
            )
            assert rw == pytest.approx(float(want.r[0]), abs=1e-6)
    all_turns = [t for r in rows for t in r["turns"]]
    sft = sft_records(all_turns, require_pass=False)
    # valid first-turn plans, de-duplicated by canonical form, plus valid later turns
    firsts = [s for s in sft if s["meta"]["turn"] == 0]
    assert len(firsts) == 1 and firsts[0]["messages"][-1]["content"].startswith("```yaml\n- step: 1")
    for s in sft:  # the target is a well-formed plan block; later turns keep their turn and were valid
        target = s["messages"][-1]["content"]
        assert target.endswith("\n```") and extract_yaml(target) is not None
    assert {s["meta"]["turn"] for s in sft} == {0, 1}
    assert ops.conductor_check(firsts[0]["messages"][-1]["content"]).item(0).ok
    assert firsts[0]["messages"][0]["role"] == "system"
    passed = sft_records(all_turns)
    assert all(s["meta"]["verdict"] == "PASSED" for s in passed)
    banded = sft_records(all_turns, require_pass=False, density_band=(100.0, 200.0))
    assert banded == []


def test_canonical_form_ignores_numbering_and_order() -> None:
    a = ops.conductor_check(PLAN_PCT).item(0).graph
    swapped = PLAN_PCT.replace(
        "<planner>\n      ref: []\n    - agent: <algorithmer>",
        "<algorithmer>\n      ref: []\n    - agent: <planner>",
    )
    renumbered = (
        swapped.replace("step: 1", "step: 10").replace("step: 2", "step: 20").replace("step: 3", "step: 30")
    )
    b = ops.conductor_check(renumbered).item(0).graph
    assert a != b and canonical_form(a) == canonical_form(b)
    c = ops.conductor_check(PLAN_PCT.replace("ref: [<planner>]", "ref: [<algorithmer>]")).item(0).graph
    assert canonical_form(c) != canonical_form(a)
    ctx = Context().next(a)
    fix = ops.conductor_check(PLAN_FIX, context=ctx, options=CheckOptions()).item(0).graph
    assert "prev" in canonical_form(fix, ctx)


def test_an_invalid_plan_is_shown_back_with_its_error(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    # spec §2.5: after an invalid plan the history holds the orchestrator's own output and the checker's message
    team = Team(he[:1], solutions, [BAD_LOGIC, "no yaml at all", PLAN_PCT])
    run_episodes(Conductor(ConductorSettings(max_turns=3)), he[:1], ScriptedEngine(team), tmp_path)
    second = team.prompts["HumanEval/0|1|orchestrator"]
    assert BAD_LOGIC in second and "[YAML LOGIC INVALID]" in second and "(L1)" in second
    third = team.prompts["HumanEval/0|2|orchestrator"]
    assert BAD_LOGIC in third and "no yaml at all" in third and "[NO YAML FOUND]" in third
    assert third.index(BAD_LOGIC) < third.index("no yaml at all") < third.index("Task:")
    recs = traces(tmp_path, "HumanEval-0")
    assert [r["check"]["error"] for r in recs] == ["[YAML LOGIC INVALID]", "[NO YAML FOUND]", None]
    assert all(r["orchestrator"]["guided"] and r["orchestrator"]["grammar"] == "validator" for r in recs)


class ThinkingTeam(Team):
    """The planner and the coder reason in ``<think>`` blocks; the coder's program is only in its reasoning."""

    def __call__(self, req: Request) -> str:
        reply = super().__call__(req)
        if req.tags.role == "planner":
            return "<think>secret musings about the plan</think>\n" + reply
        if req.tags.role == "coder":
            task = self.task_of(req)
            return f"<think>\n```python\n{task.prompt}{self.solutions[task.id]}```\n</think>\nNo program this time."
        return reply


def test_agent_outputs_are_forwarded_without_reasoning(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    team = ThinkingTeam(he[:1], solutions, [PLAN_PCT])
    method = Conductor(ConductorSettings(max_turns=1, feedback_tests="hidden"))
    run_episodes(method, he[:1], ScriptedEngine(team), tmp_path)
    coder = team.prompts["HumanEval/0|0|coder@2"]
    assert "[planner@1]\nplanner output for has_close_elements" in coder
    assert "secret musings" not in coder and "<think>" not in coder
    (r0,) = traces(tmp_path, "HumanEval-0")
    assert r0["messages"]["planner@1"]["public"].startswith("planner output")
    assert r0["messages"]["coder@2"]["public"] == "No program this time."
    # the program inside the reasoning is not the answer: the tester finds no code
    assert r0["tester"]["code"] == "" and r0["verdict"] == "[COMPILATION ERROR]"
    ep = json.loads((tmp_path / "episodes" / "HumanEval-0.json").read_text())["record"]
    assert ep["answer"] == ""


@pytest.mark.parametrize(
    ("settings", "guided", "grammar"),
    [({"grammar": "strict"}, True, "strict"), ({"guided": False}, False, None)],
)
def test_traces_name_the_plan_grammar(
    tmp_path: Path,
    he: list[Task],
    solutions: dict[str, str],
    settings: dict,
    guided: bool,
    grammar: str | None,
) -> None:
    method = Conductor(ConductorSettings(max_turns=1, **settings))
    run_episodes(method, he[:1], ScriptedEngine(Team(he[:1], solutions, [PLAN_PCT])), tmp_path)
    (r0,) = traces(tmp_path, "HumanEval-0")
    assert r0["orchestrator"]["guided"] is guided and r0["orchestrator"]["grammar"] == grammar
    assert json.loads((tmp_path / "run.json").read_text())["params"].get("grammar") == settings.get(
        "grammar", "validator"
    )
