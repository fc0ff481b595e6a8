"""What the prompting baselines share: the task kinds they solve, the task as the model sees it, the
chain-of-thought request, answer extraction from a reply, per-round records with their graph blocks
(:class:`Baseline`), and the pick among independent samples (:class:`Voting`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ... import ops
from ...llm.structured import strip_reasoning
from ...llm.types import Request, Result, Tags
from ...tasks import Task, choice_prompt
from ...tasks.codetest import run_public_tests
from ...trace.schema import Graph, Message, RoundRecord, Stats, Timing, Usage
from ..episode import SamplingSettings, SandboxSettings, SettingsMethod, answer_from, call_error, domain_of
from ..prompt_files import read_text
from ..selection import Pick, select_answer

if TYPE_CHECKING:
    from ..selection import TestRunner

__all__ = [
    "KINDS",
    "Baseline",
    "Voting",
    "VotingSettings",
    "answer_of",
    "cot_request",
    "cot_system",
    "graph_block",
    "message_of",
    "task_view",
]


@dataclass(frozen=True)
class VotingSettings(SandboxSettings):
    """What the settings of a baseline that chooses among independent samples share (self-consistency,
    debate).

    Parameters
    ----------
    temperature : float
        Sampling temperature of every call (default 0.7: the samples must differ to vote).
    test_timeout_s, test_memory_mb : limits of one sandbox run on the visible examples (code; see
        :class:`~toporoute.methods.episode.SandboxSettings`).
    top_p, max_tokens, seed : see :class:`~toporoute.methods.episode.SamplingSettings`.
    """

    temperature: float = 0.7


S = TypeVar("S", bound=SamplingSettings)
V = TypeVar("V", bound=VotingSettings)

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


class Baseline(SettingsMethod[S]):
    """A prompting baseline: a :class:`~toporoute.methods.episode.SettingsMethod` whose rounds are recorded
    with their graph block and statistics."""

    def record(
        self,
        episode: str,
        task: Task,
        round: int,
        goal: str,
        graph: tuple[list[str], list[str], Sequence[tuple[int, int]], Sequence[tuple[int, int]] | None],
        messages: Mapping[str, Message],
        usage: Usage,
        timing: Timing,
        extra: Mapping[str, Any],
    ) -> RoundRecord:
        """A round's record; ``graph`` is ``(agents, roles, edges, previous round's edges)`` as
        :func:`graph_block` takes them."""
        block, stats = graph_block(*graph)
        return RoundRecord(
            method=self.name,
            episode=episode,
            task=task.id,
            round=round,
            goal=goal,
            graph=block,
            messages=dict(messages),
            usage=usage,
            stats=stats,
            timing=timing,
            extra=dict(extra),
        )


class Voting(Baseline[V]):
    """A baseline that chooses one answer among independent samples (self-consistency, debate): the vote for
    math and choice, the test-based pick on the prompt's visible examples for code
    (:func:`~toporoute.methods.selection.select_answer`, in the settings' sandbox limits).

    ``run_tests`` is the visible-example runner (default :func:`~toporoute.tasks.codetest.run_public_tests`;
    tests pass a stand-in).
    """

    engine_failures = "all"
    """Its calls are independent samples: one the engine failed is left out of the vote and counted in the
    usage's ``engine_failed_calls``; the episode is an error only when the engine failed every call of a
    batch (:mod:`toporoute.runtime`)."""

    def __init__(self, name: str, settings: V, run_tests: TestRunner | None) -> None:
        super().__init__(name, settings)
        self._run_tests = run_tests or run_public_tests

    async def pick(self, task: Task, answers: Sequence[str]) -> Pick:
        """The answer chosen among ``answers`` ("" for a sample without one)."""
        s = self.settings
        return await select_answer(
            task, answers, timeout_s=s.test_timeout_s, memory_mb=s.test_memory_mb, run=self._run_tests
        )
