"""What the prompting baselines share: the task kinds they solve, the task as the model sees it, the
chain-of-thought request, answer extraction from a reply, per-round graph blocks, and their recorded params."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from ... import ops
from ...llm.structured import strip_reasoning
from ...llm.types import Request, Result, Tags
from ...tasks import Task, choice_prompt
from ...trace.schema import Graph, Message, Stats
from ..episode import SamplingSettings, answer_from, call_error, domain_of
from ..prompt_files import read_text

__all__ = [
    "KINDS",
    "answer_of",
    "cot_request",
    "cot_system",
    "graph_block",
    "message_of",
    "params_of",
    "task_view",
]

KINDS = ("code", "math", "choice")
"""The task kinds the prompting baselines solve."""

NO_ANSWER = "no answer found in the reply"


def kind_of(task: Task) -> str:
    """The task's kind, or an error naming the task when the baselines do not solve it."""
    return domain_of(task, KINDS)


def task_view(task: Task) -> str:
    """The task as the model sees it: a choice task's question with its lettered options, else its prompt."""
    return choice_prompt(task) if task.kind == "choice" else task.prompt.strip()


def cot_system(kind: str) -> str:
    """The chain-of-thought system prompt of a task kind (``prompts/cot/<kind>.txt``)."""
    return read_text("cot", f"{kind}.txt").strip()


def cot_request(
    settings: SamplingSettings, episode: str, task: Task, round: int, agent: str, role: str, user: str = ""
) -> Request:
    """A chain-of-thought call on ``task`` by ``agent`` in ``round``, seeded by (seed, episode, round, agent);
    ``user`` is appended to the task in the user message."""
    view = task_view(task)
    return Request.chat(
        cot_system(kind_of(task)),
        f"{view}\n\n{user.strip()}" if user.strip() else view,
        sampling=settings.sampling(episode, round, agent),
        tags=Tags(round=round, agent=agent, role=role),
    )


def reply_text(result: Result) -> str:
    """The reply without its reasoning block ("" for a failed call)."""
    return strip_reasoning(result.text) if result.ok else ""


def answer_of(task: Task, result: Result) -> str:
    """The answer in a reply ("" for a failed call or a reply that holds none)."""
    text = reply_text(result)
    return answer_from(task, text) if text else ""


def message_of(task: Task, result: Result, answer: str) -> Message:
    """The trace message of one reply: its text, its answer, and the call's error or a missing answer."""
    error = call_error(result) or (None if answer else NO_ANSWER)
    return Message.of(result.text, "", answer or None, error)


def graph_block(
    agents: Sequence[str],
    roles: Sequence[str],
    edges: Sequence[tuple[int, int]],
    prev: Sequence[tuple[int, int]] | None = None,
) -> tuple[Graph, Stats]:
    """A round's graph block and statistics (``ops.graph_stats``) over ``agents`` with ``edges`` (src, dst)
    pairs, each a reply of the previous round delivered to ``dst``; ``prev`` the previous round's edges (None
    in the first round)."""
    n = len(agents)
    adj = np.zeros((n, n), dtype=bool)
    for s, d in edges:
        adj[s, d] = True
    before = None
    if prev is not None:
        before = np.zeros((n, n), dtype=bool)
        for s, d in prev:
            before[s, d] = True
    stats = Stats.of(ops.graph_stats(adj, prev=before))
    inbox = [[s for s, d in edges if d == i] for i in range(n)]
    # every agent of a round runs at once (one batch) on what the previous round delivered: one level
    is_dag = bool(ops.toposort(adj).is_dag)
    graph = Graph.build(agents, roles, edges, order=range(n), levels=[0] * n, is_dag=is_dag, inbox=inbox)
    return graph, stats


def params_of(name: str, settings: Any) -> dict[str, Any]:
    """The recorded params of a baseline: its name and every field of its settings."""
    return {"method": name, **asdict(settings)}
