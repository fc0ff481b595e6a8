"""One HiVA iteration's state and its trace record, engine-free.

:class:`Pass` is the working state the forward pass fills (instructions, outputs, tool runs, routed tokens) with
its call log; :class:`Iteration` is what the iteration learned, from the graph it started on to the repair at its
end. :func:`iteration_record` turns both into the trace record's parts: the graph of the pass, the agents'
messages and the ``hiva`` block. The episode loop (:mod:`.method`) fills them; nothing here calls an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...tasks.tools import ToolRun
from ...trace.schema import EdgeUsage, Graph, Message, clip
from ..episode import call_error
from ..waves import Call, CallLog
from . import parsing, steps
from .environment import Outcome
from .graph import SINK, HiVAGraph

__all__ = ["Iteration", "Pass", "bandit_entry", "broadcast_entry", "iteration_record", "routing_summary"]


@dataclass
class Pass(CallLog):
    """One iteration's working state, its calls (keyed ``<agent>:<step>``) and its errors."""

    instructions: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    inputs: dict[int, str] = field(default_factory=dict)
    outputs: dict[int, str] = field(default_factory=dict)
    tools: dict[int, ToolRun] = field(default_factory=dict)
    executed: list[int] = field(default_factory=list)
    edge_tokens: list[EdgeUsage] = field(default_factory=list)
    bandit: list[dict[str, Any]] = field(default_factory=list)
    forward_tokens: dict[int, int] = field(default_factory=dict)
    tool_used: dict[int, tuple[str, int]] = field(default_factory=dict)
    aggregator_tools: list[tuple[int, ToolRun]] = field(default_factory=list)


@dataclass
class Iteration:
    """What one iteration started from and what it learned, in the order the loop learns it.

    The graph's shape at the start (``start`` snapshot, ``nodes`` with their ``names`` and ``roles``, the
    topological order ``sigma`` and each node's ``level``) is what the record shows, since the edits and the
    repair change the graph before the record is written. ``routed[i, j]`` counts the instructions ``i`` routed
    to ``j`` in the forward pass.
    """

    t: int
    step: int
    start: dict[str, Any]
    nodes: list[int]
    names: dict[int, str]
    roles: dict[int, str]
    sigma: list[int]
    level: dict[int, int]
    routed: np.ndarray
    contributors: list[int] = field(default_factory=list)
    answer: str = ""
    outcome: Outcome | None = None
    loss: str = ""
    global_grad: str = ""
    grads: dict[int, parsing.Gradient] = field(default_factory=dict)
    prompt_updates: list[dict[str, Any]] = field(default_factory=list)
    tool_updates: list[dict[str, Any]] = field(default_factory=list)
    parallel: dict[int, parsing.Parallelism] = field(default_factory=dict)
    sentiment: dict[int, dict[str, Any]] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    synthesised: list[dict[str, Any]] = field(default_factory=list)
    repair: dict[str, Any] = field(default_factory=dict)
    ablations: list[str] = field(default_factory=list)
    backward: str = "ran"

    @classmethod
    def begin(cls, t: int, g: HiVAGraph, sigma: list[int], level: dict[int, int]) -> Iteration:
        """The iteration ``t`` of ``g``, which has just stepped its iteration counter, on the levels given."""
        nodes = g.nodes()
        return cls(
            t,
            g.iteration,
            g.snapshot(),
            nodes,
            {i: g.name(i) for i in nodes},
            {i: g.agents[i].role for i in nodes},
            sigma,
            level,
            np.zeros((g.capacity, g.capacity), np.int32),
        )


def bandit_entry(
    g: HiVAGraph,
    nodes: Sequence[int],
    level: int,
    theta: np.ndarray,
    weights: np.ndarray,
    psi: np.ndarray,
    chosen: dict[int, list[int]],
    *,
    k: int,
) -> dict[str, Any]:
    """The trace's account of one level's bandit routing: Thompson samples, candidate weights, the chosen
    successors and the routing prior ``psi``, by agent name; ``over_k`` names the sources whose candidates (the
    successors the distance threshold kept, weight > 0) outnumbered ``k``, the routing decisions where the
    bandit chose, and ``dropped`` the successors the threshold dropped."""
    return {
        "level": level,
        "sources": [g.name(i) for i in nodes],
        "theta": {g.name(i): round(float(theta[i]), 4) for i in g.nodes()},
        "candidates": {
            g.name(i): {g.name(j): round(float(weights[i, j]), 4) for j in g.successors(i)} for i in nodes
        },
        "chosen": {g.name(i): [g.name(j) for j in chosen[i]] for i in nodes},
        "psi": {g.name(i): round(float(psi[i]), 4) for i in g.nodes()},
        "k": k,
        "over_k": [g.name(i) for i in nodes if sum(weights[i, j] > 0 for j in g.successors(i)) > k],
        "dropped": {
            g.name(i): [g.name(j) for j in g.successors(i) if not weights[i, j] > 0]
            for i in nodes
            if any(not weights[i, j] > 0 for j in g.successors(i))
        },
    }


def broadcast_entry(
    g: HiVAGraph, nodes: Sequence[int], level: int, chosen: dict[int, list[int]]
) -> dict[str, Any]:
    """The trace's account of one level's routing without the bandit (``broadcast``): every successor."""
    return {
        "level": level,
        "sources": [g.name(i) for i in nodes],
        "broadcast": True,
        "chosen": {g.name(i): [g.name(j) for j in chosen[i]] for i in nodes},
        "over_k": [],
        "dropped": {},
    }


def routing_summary(bandit: Sequence[dict[str, Any]]) -> dict[str, int]:
    """One iteration's routing counts: ``decisions`` (executed nodes that routed), ``over_k`` (those whose
    candidates outnumbered k: the bandit chose) and ``dropped`` (successors the distance threshold dropped)."""
    return {
        "decisions": sum(len(b["sources"]) for b in bandit),
        "over_k": sum(len(b["over_k"]) for b in bandit),
        "dropped": sum(len(v) for b in bandit for v in b["dropped"].values()),
    }


def _own_reply(name: str) -> Callable[[Call], bool]:
    """Whether a logged call is agent ``name``'s own reply of the pass (its forward or aggregate call)."""
    return lambda c: c.key.startswith(f"{name}:") and c.key.endswith(("forward", "aggregate"))


def iteration_record(
    it: Iteration, p: Pass, graph_after: dict[str, Any]
) -> tuple[Graph, dict[str, Message], dict[str, Any]]:
    """The trace record's graph (the pass's routed edges over the starting nodes), the executed agents'
    messages and the ``hiva`` block of iteration ``it``; ``graph_after`` is the graph's snapshot after the
    edits and the repair."""
    nodes, names, routed = it.nodes, it.names, it.routed
    index = {slot: k for k, slot in enumerate(nodes)}
    executed = set(p.executed)
    run_edges = [(index[s], index[d]) for s, d in zip(*np.nonzero(routed)) if s in index and d in index]
    inbox = {index[d]: [index[s] for s in nodes if routed[s, d] > 0] for d in nodes if d in executed}
    graph = Graph.build(
        [names[i] for i in nodes],
        [it.roles[i] for i in nodes],
        run_edges,
        order=[index[i] for i in it.sigma if i in index],
        levels=[it.level[i] if i in executed else -1 for i in nodes],
        is_dag=True,
        inbox=inbox,
    )
    messages = {
        names[i]: Message.of(
            p.outputs.get(i, ""),
            p.inputs.get(i, ""),
            it.answer if i == SINK else None,
            call_error(p.first(_own_reply(names[i]))),
        )
        for i in nodes
        if i in executed
    }
    assert it.outcome is not None, "the iteration is recorded after its environment step"
    block = {
        "iteration": it.t,
        "step": it.step,
        "graph": it.start,
        "graph_after": graph_after,
        "levels": steps.levels_by_name(it.sigma, it.level, names),
        "executed": [names[i] for i in p.executed],
        "executed_edges": [[names[int(s)], names[int(d)]] for s, d in zip(*np.nonzero(routed))],
        "bandit": p.bandit,
        "routing": routing_summary(p.bandit),
        "instructions": {names[i]: clip(p.inputs[i], 4000) for i in p.executed if i in p.inputs},
        "tool_calls": [
            {"agent": names[i], "tool": p.tool_used[i][0], "version": p.tool_used[i][1], **run.to_json()}
            for i, run in p.tools.items()
        ]
        + [
            {
                "agent": names[SINK],
                "tool": p.tool_used[SINK][0],
                "version": p.tool_used[SINK][1],
                "on_output_of": names[i],
                **run.to_json(),
            }
            for i, run in p.aggregator_tools
        ],
        "aggregation": {"contributors": [names[i] for i in it.contributors], "answer": clip(it.answer, 4000)},
        "environment": it.outcome.to_json(),
        "ablations": it.ablations,
        "backward": it.backward,
        "loss": it.loss,
        "global_gradient": it.global_grad,
        "gradients": {names[i]: gr.to_json() for i, gr in it.grads.items() if i in names},
        "prompt_updates": it.prompt_updates,
        "tool_updates": it.tool_updates + it.synthesised,
        "parallelism": {
            names[i]: {"score": par.score, "text": par.describe(), "error": par.error}
            for i, par in it.parallel.items()
        },
        "decisions": [{k: v for k, v in d.items() if k != "node"} for d in it.decisions],
        "edits": {
            "applied": [
                [d["agent"], d["applied_action"], d.get("new_agent")]
                for d in it.decisions
                if d.get("accepted") and d["applied_action"] != "NO_CHANGE"
            ],
            "rejected": [
                [d["agent"], d["applied_action"], d.get("reason")]
                for d in it.decisions
                if not d.get("accepted")
            ],
        },
        "sentiment": {names[i]: v for i, v in it.sentiment.items()},
        "repair": it.repair,
        "errors": p.errors,
        "answer": clip(it.answer, 4000),
    }
    return graph, messages, block
