"""The prompting baselines (cot, self-consistency, self-refine, debate) on the scripted engine, and the shared
answer selection: votes and ties, the test-based pick on visible examples (a stand-in runner and the real
sandbox), batching, seeds, self-refine's early stop, debate's message passing, malformed outputs, the CLI."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from _tasks import code_task
from test_methods import MATH, TASK, one_episode

from toporoute.errors import InvalidArgumentError
from toporoute.llm import Request, Structured
from toporoute.llm.scripted import ScriptedEngine
from toporoute.methods import make_method
from toporoute.methods.episode import request_seed
from toporoute.methods.harness import run_method
from toporoute.methods.prompting import (
    Debate,
    DebateSettings,
    SelfConsistency,
    SelfConsistencySettings,
    SelfRefineSettings,
)
from toporoute.methods.prompting.self_refine import VERDICT_REGEX, parse_verdict
from toporoute.methods.registry import REGISTRY
from toporoute.methods.selection import (
    answer_clusters,
    majority_vote,
    pick_by_tests,
    program_key,
    public_test_reports,
    select_answer,
)
from toporoute.runtime import Runtime
from toporoute.tasks import Task
from toporoute.tasks.codetest import TestReport

CHOICE = Task(
    id="demo/c1",
    kind="choice",
    prompt="Which number is even?",
    choices=("3", "4", "5"),
    answer="B",
)
# visible examples in the prompt; the hidden test asks for more than they show
SQUARE = code_task(
    "demo/square",
    "square",
    'def square(x: int) -> int:\n    """Return x squared.\n    >>> square(2)\n    4\n    >>> square(3)\n    9\n    """\n',
    "candidate(-4) == 16",
)
WRONG = "def square(x):\n    return x + 2\n"  # passes square(2) only
RIGHT = "def square(x):\n    return x * x\n"
RIGHT_TOO = "def square(x):\n    # the product\n    return x*x\n"
ABS_ONLY = "def square(x):\n    return abs(x) * x\n"  # passes the visible examples, fails the hidden test


def fenced(code: str) -> str:
    return f"Let me think step by step.\n```python\n{code}```"


def report(passed: int, total: int = 2) -> TestReport:
    return TestReport("PASSED" if passed == total else "[WRONG ANSWER]", "", "public", passed, total)


# -- selection: votes and ties ---------------------------------------------------------------------------


def test_majority_vote_clusters_equal_math_answers_and_ties_go_to_the_earliest() -> None:
    pick = majority_vote(MATH, ["41", "42", "", "42.0", "\\frac{84}{2}", "41"])
    assert (pick.index, pick.answer) == (1, "42")  # 42, 42.0 and 84/2 are one cluster of 3
    assert pick.clusters == (0, 1, -1, 1, 1, 0) and pick.votes == (2, 3, 0, 3, 3, 2)
    tie = majority_vote(MATH, ["", "7", "8", "8", "7"])
    assert (tie.index, tie.answer) == (1, "7")  # 2 against 2: the cluster seen first
    none = majority_vote(MATH, ["", " "])
    assert (none.index, none.answer, none.votes) == (-1, "", (0, 0))
    letters = majority_vote(CHOICE, ["A", "b", "B", ""])
    assert (letters.index, letters.answer) == (1, "b") and letters.votes == (1, 2, 2, 0)
    assert majority_vote(MATH, ["5"]).to_json() == {
        "rule": "majority",
        "chosen": 0,
        "clusters": [0],
        "votes": [1],
    }


def test_program_key_ignores_formatting_comments_and_docstrings() -> None:
    assert program_key(RIGHT) == program_key(RIGHT_TOO)
    documented = 'def square(x):\n    """Squares."""\n    return x * x\n'
    assert program_key(documented) == program_key(RIGHT)
    assert program_key(WRONG) != program_key(RIGHT)
    assert program_key("def broken(:\n") == "def broken(:"  # unparsable: its stripped text
    assert answer_clusters(SQUARE, [RIGHT, WRONG, RIGHT_TOO, ""]) == [0, 1, 0, -1]


def test_pick_by_tests_prefers_passes_then_cluster_size_then_the_earliest() -> None:
    answers = [WRONG, RIGHT, ABS_ONLY, RIGHT_TOO]
    # the most passed examples win, whatever the clusters
    pick = pick_by_tests(SQUARE, answers, [report(2), report(1), report(1), report(1)])
    assert pick.index == 0 and pick.rule == "tests"
    # a tie on passes goes to the largest cluster (RIGHT and RIGHT_TOO are one program)
    pick = pick_by_tests(SQUARE, answers, [report(1), report(2), report(2), report(2)])
    assert (pick.index, pick.answer) == (1, RIGHT) and pick.votes == (1, 2, 1, 2)
    # a tie on both goes to the earliest
    pick = pick_by_tests(SQUARE, [ABS_ONLY, WRONG, RIGHT], [report(0), report(0), report(0)])
    assert pick.index == 0
    pick = pick_by_tests(SQUARE, ["", WRONG], [None, report(0)])
    assert pick.index == 1 and pick.passed == (None, 0) and pick.verdicts == (None, "[WRONG ANSWER]")
    assert pick_by_tests(SQUARE, ["", ""], [None, None]).index == -1
    with pytest.raises(InvalidArgumentError, match="reports"):
        pick_by_tests(SQUARE, [RIGHT], [])


def test_visible_tests_run_once_per_distinct_program() -> None:
    calls: list[str] = []

    def fake(task: Task, code: str, *, timeout_s: float, memory_mb: int) -> TestReport:
        calls.append(code)
        return report(2 if "x * x" in program_key(code) else 0)

    answers = [WRONG, RIGHT, "", RIGHT_TOO, WRONG]
    reports = asyncio.run(public_test_reports(SQUARE, answers, run=fake))
    assert calls == [WRONG, RIGHT]  # copies share their program's report; no code, no run
    assert [r.passed if r else None for r in reports] == [0, 2, None, 2, 0]
    pick = asyncio.run(select_answer(SQUARE, answers, run=fake))
    assert (pick.index, pick.passed) == (1, (0, 2, None, 2, 0))
    assert asyncio.run(select_answer(MATH, ["42"], run=fake)).rule == "majority" and len(calls) == 4


def test_pick_runs_the_visible_examples_in_the_real_sandbox_never_the_hidden_tests() -> None:
    answers = [WRONG, ABS_ONLY, RIGHT]
    # A roomy limit: the subject is the verdicts, and a loaded 2-core CI machine once took over the default 5 s
    # to start a sandboxed interpreter
    reports = asyncio.run(public_test_reports(SQUARE, answers, timeout_s=60))
    assert all(r is not None and r.tests == "public" and r.total == 2 for r in reports)
    assert [r.passed for r in reports if r] == [1, 2, 2]
    pick = asyncio.run(select_answer(SQUARE, answers, timeout_s=60))
    # ABS_ONLY passes every visible example (it fails only the hidden test) and comes first
    assert (pick.index, pick.verdicts) == (1, ("[WRONG ANSWER]", "PASSED", "PASSED"))
    assert pick.to_json()["passed"] == [1, 2, 2] and pick.test_s > 0


# -- cot ---------------------------------------------------------------------------------------------------


def test_cot_is_one_reasoning_call_on_code_math_and_choice() -> None:
    def reply(request: Request) -> str:
        user = request.messages[-1].content
        if "square" in user:
            return fenced(RIGHT)
        return "4 is divisible by 2.\nAnswer: B" if "Options:" in user else "6*7 = 42, so \\boxed{42}"

    for task, want in ((SQUARE, "return x * x"), (MATH, "42"), (CHOICE, "B")):
        engine = ScriptedEngine(reply)
        out, records, _ = asyncio.run(one_episode(make_method("cot", seed=3), task, engine))
        assert [len(b) for b in engine.batches] == [1] and want in out.answer
        request = engine.batches[0][0]
        assert "step by step" in request.messages[0].content
        assert request.sampling.seed == request_seed(3, task.episode_id, 0, "Assistant")
        assert len(records) == 1 and records[0].graph.agents == ["Assistant"]
    assert "C. 5" in engine.batches[0][0].messages[-1].content  # the options shown
    out, records, _ = asyncio.run(one_episode(make_method("cot"), MATH, ScriptedEngine(["no idea"])))
    assert out.answer == "" and records[0].messages["Assistant"].parse_error == "no answer found in the reply"


# -- self-consistency --------------------------------------------------------------------------------------


def test_self_consistency_sends_the_samples_in_one_call_and_votes() -> None:
    replies = {
        "Sample1": "\\boxed{41}",
        "Sample2": "so the answer is \\boxed{42}",
        "Sample3": "nonsense without a number",
        "Sample4": "\\boxed{42.0}",
        "Sample5": "",
    }
    engine = ScriptedEngine(lambda r: replies[r.tags.agent or ""])
    method = make_method("self-consistency", seed=7)
    out, records, summary = asyncio.run(one_episode(method, MATH, engine))
    assert [len(b) for b in engine.batches] == [5]  # one generate call, batched
    seeds = [r.sampling.seed for r in engine.batches[0]]
    assert seeds == [request_seed(7, MATH.episode_id, 0, f"Sample{i}") for i in range(1, 6)]
    assert len(set(seeds)) == 5 and engine.batches[0][0].sampling.temperature == 0.7
    assert out.answer == "42" and out.extra["self_consistency"]["chosen"] == "Sample2"
    (rec,) = records
    sel = rec.extra["selection"]
    assert sel["rule"] == "majority" and sel["chosen"] == 1 and sel["votes"] == [1, 2, 0, 2, 0]
    assert rec.messages["Sample3"].parse_error and rec.messages["Sample5"].answer is None
    assert set(rec.usage.agents) == set(replies) and summary.outcomes[0].usage["calls"] == 5
    assert json.loads(json.dumps(rec.to_json()))["selection"] == sel  # written as a top-level field


def test_self_consistency_on_code_picks_by_visible_examples() -> None:
    replies = [fenced(WRONG), fenced(WRONG), fenced(RIGHT), "I give up.", fenced(RIGHT_TOO)]
    engine = ScriptedEngine(lambda r: replies[int((r.tags.agent or "0")[-1]) - 1])
    seen: list[str] = []

    def fake(task: Task, code: str, *, timeout_s: float, memory_mb: int) -> TestReport:
        seen.append(code)
        assert timeout_s == 4.0
        return report(2 if "x * x" in program_key(code) else 1)

    method = SelfConsistency(SelfConsistencySettings(test_timeout_s=4.0), run_tests=fake)
    out, records, _ = asyncio.run(one_episode(method, SQUARE, engine))
    sel = records[0].extra["selection"]
    # WRONG is the largest cluster, but RIGHT passes more examples
    assert out.answer.strip() == RIGHT.strip() and sel["chosen"] == 2
    assert sel["passed"] == [1, 1, 2, None, 2] and sel["verdicts"][3] is None and len(seen) == 2


def test_self_consistency_survives_failed_calls() -> None:
    def fail(request: Request) -> str | None:
        return "engine down" if request.tags.agent in ("Sample1", "Sample2") else None

    engine = ScriptedEngine(lambda r: "\\boxed{9}", fail=fail)
    out, records, _ = asyncio.run(one_episode(make_method("self-consistency", samples=3), MATH, engine))
    assert out.answer == "9" and records[0].extra["selection"]["votes"] == [0, 0, 1]
    assert records[0].messages["Sample1"].parse_error and "engine down" in str(
        records[0].messages["Sample1"].parse_error
    )


# -- self-refine -------------------------------------------------------------------------------------------


def refine_engine(verdicts: list[str], answers: list[str]) -> ScriptedEngine:
    """The critic replies ``verdicts[i]`` in iteration i + 1; the answerer ``answers[round]``."""

    def reply(request: Request) -> str:
        t = request.tags.round or 0
        if request.tags.agent == "Critic":
            return verdicts[t - 1]
        return answers[t]

    return ScriptedEngine(reply)


def test_self_refine_stops_when_the_feedback_says_correct() -> None:
    engine = refine_engine(["Looks right.\nVERDICT: CORRECT"], ["\\boxed{42}"])
    out, records, _ = asyncio.run(one_episode(make_method("self-refine"), MATH, engine))
    assert (out.answer, out.rounds, out.halted) == ("42", 2, True)
    assert [len(b) for b in engine.batches] == [1, 1]  # answer, feedback; no refinement
    critic = engine.batches[1][0]
    assert critic.regex == VERDICT_REGEX and "\\boxed{42}" in critic.messages[-1].content
    assert [r.round for r in records] == [0, 1]
    assert records[1].extra["refine"] == {
        "iteration": 1,
        "verdict": "CORRECT",
        "stopped": True,
        "kept_previous": False,
    }
    assert [(e.src, e.dst) for e in records[1].graph.edges] == [("Assistant", "Critic")]


def test_self_refine_runs_every_iteration_and_keeps_the_last_answer() -> None:
    engine = refine_engine(
        [
            "The arithmetic is off.\nVERDICT: INCORRECT",
            "I cannot tell.",  # malformed: no verdict line, so the loop goes on
            "Still wrong.\n**VERDICT:** incorrect",
        ],
        ["\\boxed{40}", "fixed: \\boxed{41}", "no answer in this one", "\\boxed{42}"],
    )
    method = make_method("self-refine", guided_verdict=False)
    out, records, summary = asyncio.run(one_episode(method, MATH, engine))
    assert (out.answer, out.rounds, out.halted) == ("42", 4, False)
    assert [len(b) for b in engine.batches] == [1, 1, 1, 1, 1, 1, 1]  # answer + 3 x (feedback, refine)
    assert engine.batches[1][0].regex is None
    # the refiner sees its answer and the feedback; the critic sees the latest answer with an answer
    refine_1 = engine.batches[2][0].messages[-1].content
    assert "\\boxed{40}" in refine_1 and "The arithmetic is off." in refine_1
    assert "fixed: \\boxed{41}" in engine.batches[5][0].messages[-1].content  # round 2 kept no answer
    r1, r2, r3 = (r.extra["refine"] for r in records[1:])
    assert r1["verdict"] == "INCORRECT" and r3["verdict"] == "INCORRECT"
    assert r2["verdict"] is None and r2["kept_previous"] is True
    assert records[2].messages["Critic"].parse_error == "no VERDICT line in the feedback"
    assert records[2].messages["Assistant"].parse_error == "no answer found in the reply"
    assert all(
        {(e.src, e.dst) for e in r.graph.edges} == {("Assistant", "Critic"), ("Critic", "Assistant")}
        for r in records[1:]
    )
    assert summary.outcomes[0].usage["messages_routed"] == 6
    assert records[1].usage.edges[1].tokens == 6  # the feedback's words (scripted token count)


def test_self_refine_with_the_engine_down_is_an_error_not_an_answer() -> None:
    engine = ScriptedEngine(lambda r: "", fail=lambda r: "down")

    async def fn(ctx) -> dict:
        await make_method("self-refine").episode(ctx, MATH, lambda record: None)
        return {}

    summary = asyncio.run(Runtime(engine, progress=False).run([("ep", fn)]))
    (outcome,) = summary.outcomes
    assert outcome.status == "error" and "engine: down" in (outcome.cause or "")
    assert len(engine.batches) == 1  # nothing critiqued or refined after the lost answer


def test_parse_verdict() -> None:
    assert parse_verdict("ok\nVERDICT: CORRECT") == "CORRECT"
    assert parse_verdict("VERDICT: CORRECT\nwait, no.\nVerdict: **INCORRECT**") == "INCORRECT"
    assert parse_verdict("the answer is correct") is None
    assert re.fullmatch(VERDICT_REGEX, "A critique.\nMore.\nVERDICT: INCORRECT\n")
    assert re.fullmatch(VERDICT_REGEX, "VERDICT: CORRECT") and not re.fullmatch(
        VERDICT_REGEX, "VERDICT: maybe"
    )


# -- debate ------------------------------------------------------------------------------------------------


def debate_engine(
    answers: dict[tuple[str, int], str], fail: set[tuple[str, int]] = frozenset()
) -> ScriptedEngine:
    def reply(request: Request) -> str:
        return answers[(request.tags.agent or "", request.tags.round or 0)]

    def failing(request: Request) -> str | None:
        return "down" if (request.tags.agent, request.tags.round) in fail else None

    return ScriptedEngine(reply, fail=failing)


def test_debate_passes_each_agents_answer_to_the_others_and_votes_on_the_last_round() -> None:
    said = {
        ("Agent1", 0): "I think \\boxed{40}",
        ("Agent2", 0): "I think \\boxed{42}",
        ("Agent3", 0): "I think \\boxed{41}",
        ("Agent1", 1): "now \\boxed{42}",
        ("Agent2", 1): "still \\boxed{42}",
        ("Agent3", 1): "now \\boxed{40}",
        ("Agent1", 2): "final \\boxed{42}",
        ("Agent2", 2): "final \\boxed{41}",
        ("Agent3", 2): "final \\boxed{42}",
    }
    engine = debate_engine(said)
    out, records, summary = asyncio.run(one_episode(make_method("debate", seed=1), MATH, engine))
    assert [len(b) for b in engine.batches] == [3, 3, 3]  # each round's calls batch
    assert (out.answer, out.rounds) == ("42", 3) and out.extra["debate"]["chosen"] == "Agent1"
    a1 = next(r for r in engine.batches[1] if r.tags.agent == "Agent1")
    roles = [m.role for m in a1.messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert a1.messages[2].content == "I think \\boxed{40}"  # its own previous answer
    update = a1.messages[3].content
    assert "--- Agent2 ---\nI think \\boxed{42}" in update and "--- Agent3 ---\nI think \\boxed{41}" in update
    assert "Agent1 ---" not in update
    a3_r2 = next(r for r in engine.batches[2] if r.tags.agent == "Agent3").messages[3].content
    assert "now \\boxed{42}" in a3_r2 and "still \\boxed{42}" in a3_r2 and "I think" not in a3_r2
    assert a1.sampling.seed == request_seed(1, MATH.episode_id, 1, "Agent1")
    assert records[0].graph.edges == [] and records[0].stats and records[0].stats.edges == 0
    for r in records[1:]:
        pairs = {(e.src, e.dst) for e in r.graph.edges}
        assert pairs == {
            (a, b) for a in ("Agent1", "Agent2", "Agent3") for b in ("Agent1", "Agent2", "Agent3") if a != b
        }
        assert r.graph.inbox["Agent1"] == ["Agent2", "Agent3"] and r.graph.is_dag is False
        assert len(r.usage.edges) == 6
    assert records[1].stats and records[1].stats.jaccard_similarity_prev == 0.0
    assert records[2].stats and records[2].stats.jaccard_similarity_prev == 1.0
    assert summary.outcomes[0].usage["messages_routed"] == 12
    sel = records[2].extra["selection"]
    assert sel["votes"] == [2, 1, 2] and sel["chosen"] == 0 and sel["round"] == 2
    assert "selection" not in records[0].extra


def test_debate_leaves_out_failed_agents_and_falls_back_to_an_earlier_round() -> None:
    said = {
        (a, t): f"{a} round {t}: \\boxed{{{t}}}" for a in ("Agent1", "Agent2", "Agent3") for t in range(2)
    }
    said.update({("Agent1", 1): "no number", ("Agent2", 1): "no number", ("Agent3", 1): "no number"})
    engine = debate_engine(said, fail={("Agent2", 0)})
    method = Debate(DebateSettings(rounds=2))
    out, records, _ = asyncio.run(one_episode(method, MATH, engine))
    # Agent2 said nothing in round 0: nobody receives from it, and it answers from the task and the others
    assert {(e.src, e.dst) for e in records[1].graph.edges} == {
        ("Agent1", "Agent3"),
        ("Agent3", "Agent1"),
        ("Agent1", "Agent2"),
        ("Agent3", "Agent2"),
    }
    a2 = next(r for r in engine.batches[1] if r.tags.agent == "Agent2")
    assert [m.role for m in a2.messages] == ["system", "user"] and "--- Agent1 ---" in a2.messages[1].content
    assert records[0].messages["Agent2"].parse_error == "down"
    # no answer in the last round: the vote falls back to round 0's answers
    assert out.answer == "0" and records[1].extra["selection"]["round"] == 0


def test_debate_on_code_uses_the_test_based_pick_over_the_last_round() -> None:
    said = {(a, t): fenced(WRONG) for a in ("Agent1", "Agent2", "Agent3") for t in range(3)}
    said[("Agent3", 2)] = fenced(RIGHT)

    def fake(task: Task, code: str, *, timeout_s: float, memory_mb: int) -> TestReport:
        return report(2 if "x * x" in code else 1)

    out, records, _ = asyncio.run(one_episode(Debate(run_tests=fake), SQUARE, debate_engine(said)))
    assert out.answer.strip() == RIGHT.strip()
    assert (
        records[2].extra["selection"]["passed"] == [1, 1, 2]
        and records[2].extra["selection"]["rule"] == "tests"
    )


# -- registry, settings, harness, CLI ---------------------------------------------------------------------


def test_registry_settings_and_rounds() -> None:
    for name in ("cot", "self-consistency", "self-refine", "debate"):
        assert REGISTRY[name].kinds == ("code", "math", "choice")
        assert make_method(name).params()["method"] == name
    assert make_method("self-consistency").params()["samples"] == 5
    assert make_method("self-refine").params()["iterations"] == 3
    assert make_method("self-refine", rounds=2).params()["iterations"] == 2
    assert make_method("self-refine", rounds=2, iterations=1).params()["iterations"] == 1
    params = make_method("debate", rounds=4).params()
    assert (params["agents"], params["rounds"], params["temperature"]) == (3, 4, 0.7)
    assert make_method("cot").params()["temperature"] == 0.3
    with pytest.raises(InvalidArgumentError, match="samples"):
        make_method("self-consistency", samples=0)
    with pytest.raises(InvalidArgumentError, match="iterations"):
        SelfRefineSettings(iterations=0)
    with pytest.raises(InvalidArgumentError, match="agents"):
        make_method("debate", agents=1)
    with pytest.raises(InvalidArgumentError, match="has no setting"):
        make_method("cot", samples=3)


def test_the_baselines_run_on_the_harness_and_are_scored(tmp_path: Path) -> None:
    def reply(request: Request) -> str:
        if request.tags.agent == "Critic":
            return "Fine.\nVERDICT: CORRECT"
        return "Step by step.\n```python\ndef add(a: int, b: int) -> int:\n    return a + b\n```"

    engine = ScriptedEngine(reply)
    for name in ("cot", "self-consistency", "self-refine", "debate"):
        out = tmp_path / name
        summary = asyncio.run(
            run_method(
                make_method(name), [TASK], Structured(engine), out, info={"tasks": "inline"}, progress=False
            )
        )
        assert summary["passed"] == 1, name
        run = json.loads((out / "run.json").read_text())
        assert run["method"] == name and run["params"]["method"] == name
        lines = (out / "traces" / f"{TASK.episode_id}.jsonl").read_text().splitlines()
        assert len(lines) == {"cot": 1, "self-consistency": 1, "self-refine": 2, "debate": 3}[name]


def test_cli_lists_the_baselines_and_their_options(capsys: pytest.CaptureFixture[str]) -> None:
    from toporoute.cli import _parse, main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    plain = capsys.readouterr().out
    for name in ("cot", "self-consistency", "self-refine", "debate"):
        assert f"\n  {name} " in plain
    assert "--samples" not in plain
    with pytest.raises(SystemExit):
        main(["run", "dytopo", "cot", "self-consistency", "self-refine", "debate", "--help"])
    both = capsys.readouterr().out
    for flag in (
        "--samples",
        "--refine-iterations",
        "--debate-agents",
        "--debate-rounds",
        "--no-guided-verdict",
    ):
        assert flag in both
    args = _parse(
        ["run", "self-consistency", "debate", "--samples", "3", "--debate-rounds", "2", "--out", "x"]
    )
    sc = REGISTRY["self-consistency"].options
    db = REGISTRY["debate"].options
    assert sc is not None and db is not None
    assert sc.read(args, Path("x")) == {"test_timeout_s": 10.0, "samples": 3}
    assert db.read(args, Path("x")) == {"test_timeout_s": 10.0, "debate_rounds": 2}
    # as the command builds them: the options' settings and --rounds (the own option wins)
    for rounds in (None, 5):
        debate = make_method("debate", rounds=rounds, **db.read(args, Path("x")))
        assert debate.params()["rounds"] == 2
    assert make_method("self-consistency", rounds=5, **sc.read(args, Path("x"))).params()["samples"] == 3
    with pytest.raises(SystemExit):
        _parse(["run", "cot", "--samples", "3", "--out", "x"])
    assert "--samples is an option of self-consistency" in capsys.readouterr().err
