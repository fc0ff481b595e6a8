"""TacoMAS's steps that need no engine: the round's answer, whether a reply holds a tool's input, the meta-LLM's
summaries and the slow step's application of a meta plan to the team. The episode loop (:mod:`.method`) makes the LLM calls around them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from ... import ops
from ...tasks import Task
from ...trace.schema import clip
from ...types import team_codes as tc
from ..episode import RoundErrors, answer_from, first_answer
from . import parsing
from .parsing import MetaPlan
from .settings import TacoMASSettings
from .team import Team, role_goal

__all__ = ["apply_plan", "imports_of", "sink_answer", "summaries", "tool_input"]

_SUMMARY_CHARS = 300  # one output in the meta-LLM's per-agent summaries
_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_ARITHMETIC = re.compile(r"\d\s*(?:\*\*|//|[-+*/%^\u00d7\u00f7])\s*\(*\s*\d")


def tool_input(kind: str, text: str, prelude: str = "") -> str | None:
    """What a reply gives its task kind's tool, or None when it holds nothing for it: for code, the last fenced
    code block (a last fence the reply ran out of tokens in counts) after ``prelude`` (the prompt's imports, which
    a reply's function often leaves out), fenced again; for math, the reply when it holds an arithmetic
    expression such as ``7 * 12`` (the calculator finds them)."""
    if kind == "code":
        blocks = [b for b in _CODE_BLOCK.findall(text) if b.strip()]
        head = prelude.strip() + "\n\n" if prelude.strip() else ""
        return f"```python\n{head}{blocks[-1].rstrip()}\n```" if blocks else None
    if kind == "math":
        return text if _ARITHMETIC.search(text) else None
    return None


def imports_of(prompt: str) -> str:
    """The top-level ``import`` / ``from ... import`` lines of a code prompt, in order."""
    return "\n".join(line for line in prompt.splitlines() if re.match(r"(import|from)\s+\w", line))


def sink_answer(
    task: Task, outputs: Mapping[int, str], order: Sequence[int], sink: int
) -> tuple[str, str | None]:
    """The round's answer from the agents' ``outputs`` (by slot; ``order`` the schedule's): what follows the sink's
    last ``Final Answer:`` line, else its whole reply, else the latest upstream agent's answer. Returns the
    answer and what fell back (None: the sink's own final answer)."""
    text = outputs.get(sink, "")
    final = parsing.final_answer_text(text)
    error = None if final is not None else "the sink's reply has no 'Final Answer:' line"
    answer = answer_from(task, final) if final else ""
    if not answer:
        answer = answer_from(task, text)
        if answer and error is None:
            error = "no answer after 'Final Answer:'; the answer elsewhere in the sink's reply taken"
    if not answer:
        answer = first_answer(task, [outputs.get(v, "") for v in reversed(order) if v != sink])
        if answer:
            error = f"{error or 'no answer in the sink reply'}: an upstream agent's answer taken"
    return answer, error


def summaries(team: Team, log: Mapping[str, Mapping[int, Mapping[str, Any]]], t: int, k: int) -> str:
    """The meta-LLM's per-agent summaries of rounds t-K+1..t, oldest first, from ``log`` (agent id -> round ->
    its ``output``, ``score`` and ``reason``)."""
    lines = []
    for v in team.slots():
        a = team.agents[v]
        rows = []
        for r in range(max(0, t - k + 1), t + 1):
            entry = log.get(a.id, {}).get(r)
            if entry is None:
                continue
            sc = "unscored" if entry["score"] is None else f"{entry['score']:.2f}"
            out = clip(" ".join(entry["output"].split()), _SUMMARY_CHARS) or "(no output)"
            rows.append(f"  round {r + 1}: score {sc} ({entry['reason'] or 'no reason'}); output: {out}")
        lines.append(f"{a.id} (role {a.role}):\n" + ("\n".join(rows) or "  (no rounds yet)"))
    return "\n".join(lines)


def apply_plan(
    team: Team,
    plan: MetaPlan,
    s: TacoMASSettings,
    kind: str,
    t: int,
    errors: RoundErrors,
    *,
    routing: Callable[[], AbstractContextManager[None]] = nullcontext,
) -> dict[str, Any]:
    """The slow step of round ``t`` after the meta call: encodes the meta-LLM's ``plan`` as ``ops.team_project``
    rows, projects them onto ``team`` (budgets, protections, N_min/N_max), applies what was accepted (deaths,
    births in the core's slots, the edges), its agent feedback into prompts and memories, and returns the slow
    block (operations with their verdicts, the diff, the topology distance, the feedback) without ``why`` and
    ``meta_raw``. Feedback it cannot place is recorded in ``errors``; ``routing`` times the two core calls."""
    before = team.snapshot()
    encoded = parsing.encode_plan(plan, team, s.max_meta_ops)
    rows = encoded.rows
    if len(rows) == 0:  # one padding row: the core then changes nothing but the repair
        rows = np.array([[tc.TEAM_PADDING, 0, 0, 0]], np.int32)
    last = np.zeros(team.capacity, np.float32)
    for v, a in team.agents.items():
        if t in a.scores:
            last[v] = a.scores[t]
    with routing():
        proj = ops.team_project(
            team.adj[None],
            team.alive[None],
            team.roles[None],
            np.array([team.sink], np.int32),
            rows[None],
            protected=team.protected[None],
            critical=team.critical()[None],
            scores=last[None],
            generation=team.generation[None],
            budget_pairs=s.budget_pairs,
            budget_edges=s.budget_edges,
            max_pure_births=s.max_pure_births,
            max_pure_deaths=s.max_pure_deaths,
            n_min=s.min_agents,
            n_max=s.max_agents,
        )
    accepted, reason, new_node = proj.accepted[0], proj.reason[0], proj.new_node[0]
    inherited, repaired = proj.inherited[0], proj.repaired[0]
    ids_before: dict[int, str] = before["ids"]

    # deaths, then births (the core's slots), then the arrays
    removed = [ids_before[v] for v in ids_before if not proj.alive[0, v]]
    for v in list(team.agents):
        if not proj.alive[0, v]:
            del team.agents[v]
    ops_out = []
    for entry in encoded.ops:
        row = entry["row"]
        out: dict[str, Any] = {"op": entry["op"], "text": entry["text"]}
        if row is None:
            out.update(accepted=False, reason=entry["reason"], new=None)
        else:
            ok = bool(accepted[row])
            out.update(accepted=ok, reason=tc.TEAM_REASONS[int(reason[row])], new=None)
            child = int(new_node[row])
            if ok and child >= 0:
                role = str(entry.get("role") or "agent")
                default_goal, constraint = role_goal(role, kind)
                if entry["op"] == "replace":
                    parent = ids_before.get(int(rows[row, 1]))
                else:
                    parents = [int(u) for u in np.flatnonzero(inherited[:, child]) if int(u) in ids_before]
                    parent = ids_before[parents[0]] if parents else None
                agent = team.place(
                    child, role, entry.get("goal") or default_goal, constraint, born=t, parent=parent
                )
                out["new"] = agent.id
        if "role" in entry:
            out["role"] = entry["role"]
        ops_out.append(out)
    team.adj = proj.adj[0].copy()
    team.alive = proj.alive[0].copy()
    team.roles = proj.roles[0].copy()
    team.generation = proj.generation[0].copy()

    # agent feedback: alive ids and the newborns' placeholders
    feedback: dict[str, dict[str, str]] = {}
    for key, fb in plan.feedback.items():
        slot = team.slot_of(str(key))
        if slot is None and str(key) in encoded.placeholders:
            child = int(new_node[encoded.placeholders[str(key)]])
            slot = child if child >= 0 and child in team.agents else None
        if slot is None:
            errors.error("meta", "agent_feedback", f"feedback for an unknown agent {key!r} dropped")
            continue
        if not isinstance(fb, dict):
            errors.error("meta", "agent_feedback", f"feedback for {key!r} is not an object: dropped")
            continue
        delta = fb.get("prompt_delta") if isinstance(fb.get("prompt_delta"), str) else ""
        seed = fb.get("memory_seed") if isinstance(fb.get("memory_seed"), str) else ""
        team.add_prompt_delta(slot, str(delta)[:400], s.prompt_deltas)
        team.remember(
            slot,
            f"Meta-controller note: {str(seed)[:400]}" if seed and str(seed).strip() else "",
            s.memory_items,
        )
        feedback[team.name(slot)] = {"prompt_delta": str(delta)[:400], "memory_seed": str(seed)[:400]}

    ids_after = {v: a.id for v, a in team.agents.items()}
    e_before = {(ids_before[int(a)], ids_before[int(b)]) for a, b in zip(*np.nonzero(before["adj"]))}
    e_after = {(ids_after[int(a)], ids_after[int(b)]) for a, b in zip(*np.nonzero(team.adj))}
    inh = {(ids_after[int(a)], ids_after[int(b)]) for a, b in zip(*np.nonzero(inherited))}
    rep = {(ids_after[int(a)], ids_after[int(b)]) for a, b in zip(*np.nonzero(repaired))}
    with routing():
        distance = ops.topology_distance(
            before["adj"][None],
            before["alive"][None],
            team.adj[None],
            team.alive[None],
            gen_a=before["generation"][None],
            gen_b=team.generation[None],
        )
    diff = {
        "nodes_added": [i for i in ids_after.values() if i not in set(ids_before.values())],
        "nodes_removed": removed,
        "edges_added": sorted([list(e) for e in e_after - e_before - inh - rep]),
        "edges_removed": sorted([list(e) for e in e_before - e_after]),
        "inherited": sorted([list(e) for e in inh]),
        "repaired": sorted([list(e) for e in rep]),
    }
    return {
        "rationale": plan.rationale,
        "time_control": plan.time_control,
        "ops": ops_out,
        "diff": diff,
        "distance": int(distance[0]),
        "feedback": feedback,
    }
