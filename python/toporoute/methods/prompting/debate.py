"""``debate`` (Du et al.): ``agents`` agents answer the task independently (one batched call), then in each of
``rounds - 1`` more rounds every agent sees the other agents' previous replies and updates its own (the round's
calls batched). The answer is chosen among the last round's answers (:func:`~toporoute.methods.selection.
select_answer`: the majority vote for math and choice, the test-based pick on the prompt's visible examples for
code); when no agent of the last round gave one, among the round before, and so on.

An agent's update call holds the task, its own previous reply (as its assistant turn) and the others' previous
replies; only the previous round is shown, which keeps every prompt within a small model's context. A failed
call or an empty reply sends nothing: the others do not see it, and the agent answers from the task and what it
receives. Each round's graph: every agent receives from every other agent that replied in the previous round
(round 0 has no edges); the edges are recorded in the episode's ledger with the sender's completion tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..._checks import int_at_least
from ...llm.types import Message as ChatMessage
from ...llm.types import Request, Result
from ...tasks import Task
from ...trace.schema import EdgeUsage, Usage, clip
from ..episode import Clock, Emit, EpisodeOutput, SamplingSettings, record_edges
from ..options import option
from ..prompt_files import read_json, read_text
from ._common import Voting, VotingSettings, answer_of, cot_request, kind_of, message_of, reply_text

if TYPE_CHECKING:
    from ...runtime import EpisodeContext
    from ..selection import Pick, TestRunner

__all__ = ["Debate", "DebateSettings", "agent_name", "update_request"]

_ROLE = "Debater"
_GOALS = ("Answer the task.", "Update your answer given the other agents' answers.")
_SHOWN = 4000  # characters of one reply shown to the other agents


def agent_name(i: int) -> str:
    """The trace's name of agent ``i`` (0-based): ``Agent1``, ``Agent2``, ..."""
    return f"Agent{i + 1}"


@dataclass(frozen=True)
class DebateSettings(VotingSettings):
    """Settings of ``debate``: the agents and the rounds (the sampling and the sandbox limits: see
    :class:`~toporoute.methods.prompting._common.VotingSettings`; the first answers are independent samples).

    Parameters
    ----------
    agents : int
        Agents of the debate (>= 2; the paper's comparison: 3).
    rounds : int
        Rounds, the independent first answers included (>= 1; the paper's comparison: 3).
    """

    agents: int = option(3, name="--debate-agents", unset=True, help="agents of the debate (default 3)")
    rounds: int = option(
        3,
        name="--debate-rounds",
        unset=True,
        key="debate_rounds",  # not make_method's own "rounds" (--rounds); the builder maps it
        help="rounds, the independent first answers included (default 3; else --rounds)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        int_at_least("agents", self.agents, 2)
        int_at_least("rounds", self.rounds, 1)


def update_request(
    settings: SamplingSettings,
    episode: str,
    task: Task,
    round: int,
    agent: str,
    own: str,
    others: list[tuple[str, str]],
) -> Request:
    """Agent ``agent``'s update call in ``round`` (>= 1): the task, its own previous reply ``own`` (its assistant
    turn; left out when empty) and the others' previous replies ``(name, reply)``."""
    first = cot_request(settings, episode, task, round, agent, _ROLE)
    shown = "\n\n".join(
        read_text("debate", "other.txt").format(agent=name, reply=clip(text, _SHOWN)).strip()
        for name, text in others
    )
    update = read_text("debate", "update.txt").format(
        others=shown or "(no other agent answered)", format=read_json("debate", "formats.json")[task.kind]
    )
    if own:  # its own previous reply is its assistant turn, the others' replies the next user turn
        messages = (*first.messages, ChatMessage("assistant", own), ChatMessage("user", update.strip()))
    else:  # nothing of its own to update: the task and the others' replies in one user message
        task_turn = ChatMessage("user", f"{first.messages[-1].content}\n\n{update.strip()}")
        messages = (*first.messages[:-1], task_turn)
    return Request(messages, first.sampling, None, first.tags)


class Debate(Voting[DebateSettings]):
    """Multi-agent debate: independent answers, then rounds of updates given the others' answers, then the vote
    (math, choice) or the test-based pick (code) over the last round; ``run_tests`` as
    :class:`~toporoute.methods.prompting._common.Voting` takes it."""

    def __init__(
        self, settings: DebateSettings | None = None, *, run_tests: TestRunner | None = None
    ) -> None:
        super().__init__("debate", settings or DebateSettings(), run_tests)

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        kind_of(task)
        s = self.settings
        n = s.agents
        names = [agent_name(i) for i in range(n)]
        clock = Clock()
        replies = [""] * n  # each agent's previous reply (reasoning stripped)
        tokens = [0] * n  # and its completion tokens
        history: list[list[str]] = []  # each round's answers
        prev_edges: list[tuple[int, int]] | None = None
        pick: Pick | None = None
        chosen_round = 0
        for t in range(s.rounds):
            rc = clock.round()
            if t == 0:
                requests = [cot_request(s, ctx.episode, task, 0, a, _ROLE) for a in names]
                edges: list[tuple[int, int]] = []
            else:
                requests = [
                    update_request(
                        s,
                        ctx.episode,
                        task,
                        t,
                        names[i],
                        replies[i],
                        [(names[j], replies[j]) for j in range(n) if j != i and replies[j]],
                    )
                    for i in range(n)
                ]
                edges = [(j, i) for i in range(n) for j in range(n) if j != i and replies[j]]
            routed = record_edges(ctx, t, (EdgeUsage(names[j], names[i], tokens[j]) for j, i in edges))
            results: list[Result] = await rc.generate(ctx, requests)  # the round's calls batch
            answers = [answer_of(task, r) for r in results]
            history.append(answers)
            for i, r in enumerate(results):
                replies[i], tokens[i] = reply_text(r), r.usage.completion_tokens if r.ok else 0
            extra: dict[str, Any] = {}
            if t == s.rounds - 1:
                pick, chosen_round = await self._select(task, history)
                extra = {"selection": {**pick.to_json(), "round": chosen_round}}
            emit(
                self.record(
                    ctx.episode,
                    task,
                    t,
                    _GOALS[min(t, 1)],
                    (names, [_ROLE] * n, edges, prev_edges),
                    {a: message_of(task, r, ans) for a, r, ans in zip(names, results, answers)},
                    Usage.of(zip(names, results), routed),
                    rc.timing(),
                    extra,
                )
            )
            prev_edges = edges
        assert pick is not None  # rounds >= 1
        agreed = max(pick.votes, default=0)
        return EpisodeOutput(
            pick.answer,
            s.rounds,
            False,
            clock.llm_s,
            0.0,
            extra={
                "debate": {
                    "rule": pick.rule,
                    "chosen": names[pick.index] if pick.index >= 0 else None,
                    "votes": agreed,
                    "round": chosen_round,
                }
            },
        )

    async def _select(self, task: Task, history: list[list[str]]) -> tuple[Pick, int]:
        """The pick over the last round holding an answer, and that round (the last one when none does)."""
        last: tuple[Pick, int] | None = None
        for t in range(len(history) - 1, -1, -1):
            pick = await self.pick(task, history[t])
            if pick.index >= 0:
                return pick, t
            last = last or (pick, t)
        assert last is not None  # history holds at least one round
        return last
