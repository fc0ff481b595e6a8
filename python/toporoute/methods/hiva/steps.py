"""HiVA's steps that need no engine: which executed agents the aggregator integrates, the successor a
REMOVE_SUCCESSOR decision names, the application of the topology decisions to the graph, and the levels as
names. The episode loop (:mod:`.method`) makes the LLM calls around them."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..episode import RoundErrors
from . import _prompts
from .graph import SINK, AgentState, HiVAGraph, Tool

__all__ = ["apply_decisions", "contributors", "levels_by_name", "remove_target"]


def contributors(executed: list[int], routed: np.ndarray) -> list[int]:
    """The executed agents the aggregator integrates: those routed to it, else those that routed to no executed
    agent (the pass's last ones)."""
    chosen = [i for i in executed if routed[i, SINK] > 0]
    return chosen or [i for i in executed if not any(routed[i, j] > 0 for j in executed)]


def remove_target(g: HiVAGraph, node: int, arg: str) -> tuple[int, str | None]:
    """The successor slot a REMOVE_SUCCESSOR decision of ``node`` names in ``arg``: an agent id,
    ``least_visited`` or a 1-based index into its successors; (-1, why) when it names none."""
    succ = g.successors(node)
    key = arg.strip().strip(".'\"`").split()[0] if arg.strip() else ""
    if not key:
        return -1, "REMOVE_SUCCESSOR names no successor"
    if key.lower() == "least_visited":
        workers = [j for j in succ if j != SINK]
        if not workers:
            return -1, "REMOVE_SUCCESSOR least_visited: no successor but the aggregator"
        return min(workers, key=lambda j: (g.agents[j].visits, j)), None
    slot = g.slot_of(key)
    if slot is None and key.isdigit() and 1 <= int(key) <= len(succ):
        slot = succ[int(key) - 1]
    if slot is None:
        return -1, f"REMOVE_SUCCESSOR names an unknown agent {key!r}"
    return slot, None  # a non-successor is left to ops.dag_edit to reject, with its reason


def apply_decisions(
    g: HiVAGraph, decisions: list[dict[str, Any]], *, max_out: int, domain: str, errors: RoundErrors
) -> list[tuple[int, dict[str, Any]]]:
    """Applies every decision's edit to ``g`` in order (``ops.dag_edit``), marking each accepted or rejected
    with its reason (a rejection also in ``errors``); a new node gets a worker agent with the domain's built-in
    tool. Returns the new slots with their decision (and its parent's name)."""
    results = g.apply_edits([tuple(d["edit"]) for d in decisions], max_out=max_out)
    made = []
    for d, (ok, reason, new) in zip(decisions, results):
        d.update(accepted=ok, reason=reason)
        if not ok:
            errors.error(d["agent"], "edit", f"{d['applied_action']} rejected: {reason}")
        if new >= 0:
            parent = g.agents.get(d["node"])
            desc = d["description"] or "help the team solve the task"
            tool = Tool(f"default_{domain}_tool", _prompts.default_tool_source(domain))
            agent = AgentState(
                g.new_name(),
                "worker",
                f"You are a worker agent. Your job: {desc}",
                tool,
                created=g.iteration,
                description=desc,
            )
            g.add_agent(new, agent)
            d["new_agent"] = agent.name
            made.append((new, {"parent": parent.name if parent else "", **d}))
    return made


def levels_by_name(sigma: list[int], level: dict[int, int], names: dict[int, str]) -> list[list[str]]:
    """The pass's levels as lists of agent names, each in sigma order."""
    out: dict[int, list[str]] = {}
    for i in sigma:
        out.setdefault(level[i], []).append(names[i])
    return [out[k] for k in sorted(out)]
