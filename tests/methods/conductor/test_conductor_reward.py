"""AgentConductor's ``PlanReward`` on later turns: a plan is checked in the context of its turn, given by the
``turn`` and ``earlier_agents`` columns a GRPO trainer passes from the dataset, as the loop checks it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _conductor_plans import PLAN_FIX, yaml_block

from toporoute import ops
from toporoute.errors import InvalidArgumentError
from toporoute.llm.scripted import ScriptedEngine
from toporoute.llm.types import Request
from toporoute.methods.conductor import Conductor
from toporoute.methods.conductor.training import PlanReward, agents_json, collect_rollouts, context_of
from toporoute.tasks import load_tasks
from toporoute.types.conductor_topology import Context, Node

FIRST = yaml_block(
    (1, [("<planner>", [])]), (2, [("<coder>", ["<planner>"])]), (3, [("<tester>", ["<coder>"])])
)


def first_turn_agents() -> list[Node]:
    graph = ops.conductor_check(FIRST).item(0).graph
    assert graph is not None
    return list(graph.nodes)


def test_a_valid_second_turn_plan_scores_as_valid_in_its_context() -> None:
    fn = PlanReward()
    earlier = agents_json(first_turn_agents())
    assert earlier[1] == {"id": "coder", "role": "coder", "step": 2, "turn": 0}
    got = fn(completions=[PLAN_FIX], turn=[1], earlier_agents=[earlier], verdict=["PASSED"])
    # the loop's reward for this turn: |V| 2, |E| 3 (two cross-turn refs, one intra), 2 steps
    chk = ops.conductor_check(PLAN_FIX, context=Context(1, tuple(first_turn_agents()))).item(0)
    assert chk.ok and chk.graph is not None
    assert (chk.graph.n_nodes, chk.graph.n_edges, chk.graph.n_steps) == (2, 3, 2)
    assert got == pytest.approx([1.5 + float(ops.conductor_density(2, 3, 2, 4).reward)])
    # Nodes work as well as their JSON form, and the trace's name for the column ("round") too
    assert (
        fn(completions=[PLAN_FIX], round=[1], earlier_agents=[first_turn_agents()], verdict=["PASSED"]) == got
    )
    # without the turn info the plan counts as a first turn: refs in its first step break L1
    assert fn(completions=[PLAN_FIX], verdict=["PASSED"]) == [-0.5]


def test_turn_info_per_row() -> None:
    fn = PlanReward()
    earlier = agents_json(first_turn_agents())
    got = fn(
        completions=[FIRST, PLAN_FIX, PLAN_FIX, FIRST],
        turn=[0, 1, 1, 1],
        earlier_agents=[[], earlier, [], earlier],
    )
    d_first = float(ops.conductor_density(3, 2, 3, 4).reward)
    # row 2: a second turn after an invalid first one has no coder before its debugger (L5); row 3: a later
    # turn may start afresh (its own agents shadow the earlier ones)
    assert got[0] == pytest.approx(d_first) and got[3] == pytest.approx(d_first)
    assert got[1] == pytest.approx(float(ops.conductor_density(2, 3, 2, 4).reward)) and got[2] == -0.5


def test_bad_turn_columns_name_the_row() -> None:
    fn = PlanReward()
    earlier = agents_json(first_turn_agents())
    with pytest.raises(InvalidArgumentError, match="row 0: Context.nodes must be Nodes of turns before 0"):
        fn(completions=[PLAN_FIX], earlier_agents=[earlier])  # agents of turn 0 given for a first turn
    with pytest.raises(InvalidArgumentError, match=r"row 1: earlier_agents\[0\] must be a Node or a mapping"):
        fn(completions=[FIRST, PLAN_FIX], turn=[0, 1], earlier_agents=[[], [{"id": "coder"}]])
    with pytest.raises(InvalidArgumentError, match="row 0: turn must be an int; got str"):
        fn(completions=[PLAN_FIX], turn=["1"])
    with pytest.raises(InvalidArgumentError, match="column 'turn' has 2 rows for 1 completions"):
        fn(completions=[PLAN_FIX], turn=[1, 1])
    assert context_of(2, earlier).turn == 2 and context_of(0) == Context()


def test_rollout_rows_carry_the_context_plan_reward_needs(tmp_path: Path) -> None:
    """Rows of collect_rollouts score again under PlanReward, later turns included, as the loop scored them."""
    (task,) = load_tasks("humaneval", limit=1)

    def reply(req: Request) -> str:
        if req.tags.role == "orchestrator":
            return FIRST if req.tags.round == 0 else PLAN_FIX
        if req.tags.role in ("coder", "debugger"):  # wrong programs: both turns run
            return f"```python\n{task.prompt}    return None\n```"
        return "a plan"

    rows = asyncio.run(
        collect_rollouts(Conductor(), [task], ScriptedEngine(reply), tmp_path, group_size=2, progress=False)
    )
    assert len(rows) == 2
    for row in rows:
        turns = row["turns"]
        assert [t["round"] for t in turns] == [0, 1] and [t["error"] for t in turns] == [None, None]
        assert turns[0]["earlier_agents"] == [] and turns[1]["earlier_agents"] == agents_json(
            first_turn_agents()
        )
        got = PlanReward()(
            completions=[t["plan"] for t in turns],
            round=[t["round"] for t in turns],
            earlier_agents=[t["earlier_agents"] for t in turns],
            verdict=[t["verdict"] for t in turns],
            level=[row["level"]] * 2,
        )
        assert got == pytest.approx([t["reward"]["r"] for t in turns], abs=1e-5)
