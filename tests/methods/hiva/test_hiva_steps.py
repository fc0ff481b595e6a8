"""HiVA's steps that need no engine (``toporoute.methods.hiva.steps``) on a fresh graph (the source wired to
the aggregator): the topology decisions applied through ``ops.dag_edit``, the successor a REMOVE_SUCCESSOR
names, the aggregator's contributors and the levels by name; and an iteration's trace record
(``toporoute.methods.hiva.record``) from its state alone."""

from __future__ import annotations

from typing import Any

import numpy as np

from toporoute.methods.episode import RoundErrors
from toporoute.methods.hiva import HiVASettings, steps
from toporoute.methods.hiva.environment import Outcome
from toporoute.methods.hiva.graph import SINK, SOURCE
from toporoute.methods.hiva.method import fresh_graph
from toporoute.methods.hiva.record import Iteration, Pass, iteration_record

NO_CHANGE, ADD_PARALLEL, ADD_SERIAL, REMOVE_SUCCESSOR = 0, 1, 2, 3


def decision(node: int, action: str, code: int, target: int = -1, description: str = "") -> dict[str, Any]:
    return {
        "agent": "source" if node == SOURCE else f"node{node}",
        "node": node,
        "applied_action": action,
        "edit": [code, node, target],
        "description": description,
    }


def test_decisions_grow_the_graph_and_a_rejected_edit_is_recorded() -> None:
    g, errors = fresh_graph(HiVASettings(initial_workers=0), "code"), RoundErrors()
    grow = decision(SOURCE, "ADD_SERIAL", ADD_SERIAL, description="check the edge cases")
    made = steps.apply_decisions(g, [grow], max_out=5, domain="code", errors=errors)
    ((slot, d),) = made
    assert grow["accepted"] is True and errors.errors == []
    assert d["parent"] == "source" and g.agents[slot].name == grow["new_agent"]
    assert g.agents[slot].prompt == "You are a worker agent. Your job: check the edge cases"
    assert g.agents[slot].tool.name == "default_code_tool" and slot in g.successors(SOURCE)
    # the new agent took the source's edge to the aggregator, which is no successor of the source any more
    assert g.successors(SOURCE) == [slot] and g.successors(slot) == [SINK]
    cut = decision(SOURCE, "REMOVE_SUCCESSOR", REMOVE_SUCCESSOR, target=SINK)
    assert steps.apply_decisions(g, [cut], max_out=5, domain="code", errors=errors) == []
    assert cut["accepted"] is False and cut["reason"] == "not_a_successor"
    assert errors.errors == [
        {"agent": "source", "step": "edit", "error": f"REMOVE_SUCCESSOR rejected: {cut['reason']}"}
    ]


def test_remove_target_reads_an_id_least_visited_or_an_index() -> None:
    g = fresh_graph(HiVASettings(initial_workers=0), "code")
    for text in ("first helper", "second helper"):
        grow = decision(SOURCE, "ADD_PARALLEL", ADD_PARALLEL, description=text)
        steps.apply_decisions(g, [grow], max_out=5, domain="code", errors=RoundErrors())
    succ = g.successors(SOURCE)
    workers = [j for j in succ if j != SINK]
    assert len(workers) == 2
    g.agents[workers[0]].visits = 3
    assert steps.remove_target(g, SOURCE, "least_visited") == (workers[1], None)
    assert steps.remove_target(g, SOURCE, g.name(workers[0])) == (workers[0], None)
    assert steps.remove_target(g, SOURCE, "1") == (succ[0], None)
    assert steps.remove_target(g, SOURCE, "") == (-1, "REMOVE_SUCCESSOR names no successor")
    assert steps.remove_target(g, SOURCE, "nobody") == (
        -1,
        "REMOVE_SUCCESSOR names an unknown agent 'nobody'",
    )


def test_contributors_are_the_agents_routed_to_the_aggregator_else_the_last_ones() -> None:
    routed = np.zeros((8, 8), np.int32)
    routed[SOURCE, 2] = routed[2, 3] = 1
    assert steps.contributors([SOURCE, 2, 3], routed) == [3]  # nothing routed to the aggregator
    routed[2, SINK] = 1
    assert steps.contributors([SOURCE, 2, 3], routed) == [2]
    names = {SOURCE: "source", 2: "a", 3: "b", SINK: "aggregator"}
    assert steps.levels_by_name([SOURCE, 2, 3, SINK], {SOURCE: 0, 2: 1, 3: 1, SINK: 2}, names) == [
        ["source"],
        ["a", "b"],
        ["aggregator"],
    ]


def test_an_iterations_record_shows_the_graph_it_started_on_and_what_it_learned() -> None:
    g = fresh_graph(HiVASettings(initial_workers=0), "code")
    g.iteration += 1
    sigma, level = g.levels()
    it = Iteration.begin(0, g, sigma, level)
    p = Pass(executed=[SOURCE, SINK], inputs={SOURCE: "the task", SINK: "the source's output"})
    p.outputs = {SOURCE: "def f(): return 1", SINK: "final"}
    it.routed[SOURCE, SINK] = 1
    it.contributors, it.answer = [SOURCE], "def f(): return 1"
    it.outcome = Outcome("1 of 1 examples passed", True, 1.0, True, "public-tests")
    it.decisions = [
        {
            "agent": "source",
            "node": SOURCE,
            "applied_action": "ADD_SERIAL",
            "accepted": True,
            "new_agent": "a1",
        },
        {
            "agent": "source",
            "node": SOURCE,
            "applied_action": "REMOVE_SUCCESSOR",
            "accepted": False,
            "reason": "not_a_successor",
        },
    ]
    steps.apply_decisions(
        g,
        [decision(SOURCE, "ADD_SERIAL", ADD_SERIAL, description="x")],
        max_out=5,
        domain="code",
        errors=RoundErrors(),
    )
    graph, messages, block = iteration_record(it, p, g.snapshot())
    # the record's graph is the one the pass ran on (two nodes), not the grown one after the edit
    assert graph.agents == [it.names[SOURCE], it.names[SINK]] and [(e.src, e.dst) for e in graph.edges] == [
        ("source", "aggregator")
    ]
    assert set(messages) == {it.names[SOURCE], it.names[SINK]}
    assert messages[it.names[SINK]].answer == it.answer and messages[it.names[SOURCE]].answer is None
    assert block["graph"] == it.start and block["graph_after"] != it.start and block["step"] == 1
    assert block["executed_edges"] == [[it.names[SOURCE], it.names[SINK]]]
    assert block["aggregation"]["contributors"] == [it.names[SOURCE]]
    assert block["edits"] == {
        "applied": [["source", "ADD_SERIAL", "a1"]],
        "rejected": [["source", "REMOVE_SUCCESSOR", "not_a_successor"]],
    }
    assert all("node" not in d for d in block["decisions"]) and block["environment"]["success"] is True
