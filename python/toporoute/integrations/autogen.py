"""Next-speaker selection for AutoGen AgentChat's ``SelectorGroupChat`` by descriptor matching (extra
``autogen``).

:class:`DescriptorSelector` reads the group chat's thread before every turn: each participant's latest reply
(DyTopo's JSON: public message, private messages, need and offer descriptors; a participant that has not spoken
offers its description), and the last message's need (the last speaker's ``q_vector``; for a message from
outside the team, such as the task, its text). It routes them like DyTopo (edge ``j -> i`` iff ``cos(offer_j,
need_i) > tau``, at most ``k_in`` providers per recipient; the Router in process, or a ``toporoute serve`` URL)
and answers with the last message's providers, best first:

- :meth:`~DescriptorSelector.select` (``selector_func``): the best provider; when none passes ``tau``, None (the
  group chat's model then selects) or, with ``fallback="next"``, the next participant in order;
- :meth:`~DescriptorSelector.candidates` (``candidate_func``): every provider, for the group chat's model to
  choose from; when none passes ``tau``, every participant but the last speaker.

Every turn's routing is one trace record (the same records as ``toporoute run``: the round graph over the
participants, their descriptors, the last message and its usage, plus ``selected`` and ``candidates``) when a
:class:`~toporoute.integrations.rounds.RunRecorder` is given; :meth:`~DescriptorSelector.finish` scores the
answer and writes the episode, so ``toporoute report`` draws the run. :func:`build_team` makes the team:
AssistantAgents with DyTopo's role prompts and a SelectorGroupChat that uses the selector.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.base import ChatAgent, TaskResult, TerminationCondition
    from autogen_agentchat.base import Team as GroupTeam
    from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage
    from autogen_agentchat.teams import SelectorGroupChat
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "toporoute.integrations.autogen needs AutoGen AgentChat: pip install 'toporoute[autogen]'"
    ) from exc

from ..errors import InvalidArgumentError
from ..llm.types import Result
from ..llm.types import Usage as CallTokens
from ..methods.dytopo.answer import final_answer
from ..methods.dytopo.graphs import RoundGraph
from ..methods.dytopo.messages import WorkerOutput
from ..methods.dytopo.team import AgentSpec, Team
from ..tasks import Task
from ..trace.schema import EpisodeRecord, Timing, clip
from .rounds import (
    DescriptorRouting,
    RunRecorder,
    parse_reply,
    round_record,
    worker_spec,
)

__all__ = ["DescriptorSelector", "build_team"]

Thread = Sequence[BaseAgentEvent | BaseChatMessage]

_NEED_CHARS = 1000  # a message from outside the team is matched by its text, cut to this length


class DescriptorSelector:
    """``selector_func`` / ``candidate_func`` of a ``SelectorGroupChat`` that route by descriptor matching.

    Parameters
    ----------
    participants : sequence of str or of agents
        The group chat's participants, in its order (agents: their ``name`` and ``description``).
    offers : mapping of str to str, optional
        What each participant offers before it has said so itself (default: the agent's description).
    routing : DescriptorRouting, optional
        Default ``DescriptorRouting(router, client=client)``.
    router, client :
        The in-process Router or a ``toporoute serve`` client (see :class:`~toporoute.integrations.rounds.
        DescriptorRouting`).
    fallback : {"model", "next"}
        What :meth:`select` does when no participant's offer matches: leave the choice to the group chat's model
        (None), or take the participant after the last speaker.
    recorder : RunRecorder or path, optional
        Where the turns are recorded (a path: the method folder).
    episode : str
        The episode id of the records (a file-name-safe id; set it before each run of the team).
    task : Task or str, optional
        The task of the records (its id) and of :meth:`finish`.
    titles : mapping of str to str, optional
        Role titles of the records (default: the names).
    """

    def __init__(
        self,
        participants: Sequence[Any],
        offers: Mapping[str, str] | None = None,
        *,
        routing: DescriptorRouting | None = None,
        router: Any = None,
        client: Any = None,
        fallback: str = "model",
        recorder: RunRecorder | str | Path | None = None,
        episode: str = "team",
        task: Task | str | None = None,
        titles: Mapping[str, str] | None = None,
        method: str = "autogen-dytopo",
    ) -> None:
        names = [p if isinstance(p, str) else str(p.name) for p in participants]
        if len(names) < 2 or len(set(names)) != len(names):
            raise InvalidArgumentError(
                f"participants must be at least two, with distinct names; got {names}", "participants"
            )
        if fallback not in ("model", "next"):
            raise InvalidArgumentError(f"fallback must be 'model' or 'next'; got {fallback!r}", "fallback")
        described = {
            str(p.name): str(getattr(p, "description", "") or "")
            for p in participants
            if not isinstance(p, str)
        }
        self.names = names
        self.offers = {n: (offers or {}).get(n) or described.get(n, "") for n in names}
        self.titles = [(titles or {}).get(n, n) for n in names]
        self.routing = routing if routing is not None else DescriptorRouting(router, client=client)
        self.fallback = fallback
        if recorder is not None and not isinstance(recorder, RunRecorder):
            params = {"framework": "autogen", "agents": names, "fallback": fallback, **self.routing.params()}
            recorder = RunRecorder(recorder, method=method, params=params)
        self.recorder = recorder
        self.episode = episode
        self.task = Task(id=episode, kind="code", prompt=task) if isinstance(task, str) else task
        self._last: float | None = None  # when the previous turn was routed

    # -- the thread -----------------------------------------------------------------------------------------

    def _turn(
        self, thread: Thread
    ) -> tuple[list[str], list[str], list[WorkerOutput], dict[str, Result], int, int, BaseChatMessage | None]:
        """The routing's nodes (participants, plus the last message's source when it is not one), their outputs,
        the last message's call, the recipient node and the turn index."""
        chat = [m for m in thread if isinstance(m, BaseChatMessage)]
        latest: dict[str, BaseChatMessage] = {}
        for m in chat:
            if m.source in self.offers:
                latest[m.source] = m
        outs = []
        for n in self.names:
            mine = latest.get(n)
            out = parse_reply(mine.to_text())[0] if mine is not None else WorkerOutput("")
            outs.append(
                WorkerOutput(out.public, out.private, out.query, out.key or self.offers[n], out.answer)
            )
        names, titles = list(self.names), list(self.titles)
        last = chat[-1] if chat else None
        results: dict[str, Result] = {}
        if last is None or last.source not in self.offers:
            source = last.source if last is not None else "user"
            text = last.to_text() if last is not None else ""
            names, titles = [*names, source], [*titles, source]
            outs.append(WorkerOutput(text, query=text[:_NEED_CHARS]))
            recipient = len(self.names)
        else:
            recipient = self.names.index(last.source)
            usage = last.models_usage
            results[last.source] = Result(
                text=last.to_text(),
                usage=CallTokens(usage.prompt_tokens, usage.completion_tokens) if usage else CallTokens(),
            )
        turn = sum(m.source in self.offers for m in chat)
        return names, titles, outs, results, recipient, turn, last

    def _providers(self, graph: RoundGraph, recipient: int) -> list[str]:
        return [self.names[j] for j in graph.inbox[recipient] if j < len(self.names)]

    def _record(
        self,
        turn: tuple[list[str], list[str], list[WorkerOutput], dict[str, Result], int, int, Any],
        graph: RoundGraph,
        routing_s: float,
        chosen: str | None,
        candidates: list[str],
    ) -> None:
        now = time.perf_counter()
        round_s = now - self._last if self._last is not None else routing_s
        self._last = now
        if self.recorder is None:
            return
        names, titles, outs, results, recipient, t, last = turn
        record = round_record(
            method=self.recorder.method,
            episode=self.episode,
            task_id=self.task.id if self.task is not None else self.episode,
            round=t,
            goal=None,
            names=names,
            titles=titles,
            outs=outs,
            results=results,
            graph=graph,
            inboxes=[[] for _ in names],  # a group chat broadcasts: the graph only picks the speaker
            prev_adjacency=None,
            timing=Timing(round_s, max(round_s - routing_s, 0.0), routing_s),
            extra={
                "speaker": names[recipient] if last is not None else None,
                "selected": chosen,
                "candidates": candidates,
            },
        )
        self.recorder.write(record)

    async def _route(self, thread: Thread) -> tuple[Any, RoundGraph, float]:
        turn = self._turn(thread)
        t0 = time.perf_counter()
        graph, _ = await self.routing.aroute([o.query for o in turn[2]], [o.key for o in turn[2]])
        return turn, graph, time.perf_counter() - t0

    # -- the group chat's hooks -----------------------------------------------------------------------------

    async def select(self, thread: Thread) -> str | None:
        """``selector_func``: the best-matching provider for the last message's need (see the class)."""
        turn, graph, routing_s = await self._route(thread)
        providers = self._providers(graph, turn[4])
        chosen: str | None = providers[0] if providers else None
        if chosen is None and self.fallback == "next":
            last = turn[6]
            i = self.names.index(last.source) if last is not None and last.source in self.names else -1
            chosen = self.names[(i + 1) % len(self.names)]
        self._record(turn, graph, routing_s, chosen, providers)
        return chosen

    async def candidates(self, thread: Thread) -> list[str]:
        """``candidate_func``: every provider matching the last message's need, best first (see the class)."""
        turn, graph, routing_s = await self._route(thread)
        providers = self._providers(graph, turn[4])
        last = turn[6]
        out = providers or [n for n in self.names if last is None or n != last.source]
        self._record(turn, graph, routing_s, None, out)
        return out

    def finish(
        self, result: TaskResult | Thread, *, halted: bool = False, answer_agent: str | None = None
    ) -> EpisodeRecord | None:
        """Scores the run's answer against :attr:`task` and writes the episode's record (``recorder`` only).

        The answer comes from the participants' replies, newest first, as DyTopo's (the code block defining the
        task's entry point, in ``answer_agent``'s replies first: default Developer / Solver, else the first)."""
        if self.recorder is None or self.task is None:
            return None
        thread = result.messages if isinstance(result, TaskResult) else result
        rounds = []
        for m in thread:
            if isinstance(m, BaseChatMessage) and m.source in self.offers:
                outs = [WorkerOutput("") for _ in self.names]
                outs[self.names.index(m.source)] = parse_reply(m.to_text())[0]
                rounds.append((outs, [self.names.index(m.source)]))
        lead = answer_agent or next((n for n in ("Developer", "Solver") if n in self.names), self.names[0])
        specs = tuple(AgentSpec(n, t, "", {}, (), 0) for n, t in zip(self.names, self.titles))
        team = Team(self.task.kind if self.task.kind in ("code", "math") else "code", specs, specs[0], lead)
        answer = final_answer(self.task, team, rounds) if self.task.kind in ("code", "math") else ""
        if not answer and rounds:
            answer = clip(rounds[-1][0][rounds[-1][1][0]].public)
        return self.recorder.finish(self.episode, self.task, answer, halted=halted)


def build_team(
    agents: Mapping[str, Any],
    model_client: Any,
    *,
    domain: str = "code",
    roles: Mapping[str, tuple[str, str]] | None = None,
    offers: Mapping[str, str] | None = None,
    max_tokens: int = 4096,
    selector: str = "select",
    termination_condition: TerminationCondition | None = None,
    max_turns: int | None = 8,
    **selector_options: Any,
) -> tuple[SelectorGroupChat, DescriptorSelector]:
    """A ``SelectorGroupChat`` of AssistantAgents whose next speaker is picked by :class:`DescriptorSelector`.

    Parameters
    ----------
    agents : mapping of name to ChatCompletionClient
        Each participant's model client (names of DyTopo's team of ``domain``, or any with ``roles``).
    model_client : ChatCompletionClient
        The group chat's own model (it selects when the selector leaves the choice to it).
    roles : mapping of name to (title, description), optional
        New roles; the others are DyTopo's (Developer, Researcher, Tester, Designer; ProblemParser, Solver,
        Verifier). Each agent's system prompt is its role's DyTopo prompt (a JSON reply with its descriptors).
    offers : mapping of name to str, optional
        What each agent offers before its first reply (default: the first line of its role prompt, "You are
        <name>, the <title>. <description>"), also its description in the group chat.
    selector : {"select", "candidates"}
        Hook the selector in as ``selector_func`` or as ``candidate_func``.
    termination_condition, max_turns :
        The group chat's.
    **selector_options :
        :class:`DescriptorSelector`'s keyword arguments (``router``, ``client``, ``recorder``, ``episode``,
        ``task``, ``fallback``, ...).

    Returns
    -------
    (SelectorGroupChat, DescriptorSelector)
    """
    if selector not in ("select", "candidates"):
        raise InvalidArgumentError(f"selector must be 'select' or 'candidates'; got {selector!r}", "selector")
    specs = []
    for name in agents:
        title, description = (roles or {}).get(name, (None, None))
        specs.append(worker_spec(name, title, description, domain=domain, max_tokens=max_tokens))
    # what each role offers before it has said so itself: the first line of its prompt ("You are X, the T. ...")
    offers = {s.name: (offers or {}).get(s.name) or s.system.splitlines()[0] for s in specs}
    participants: list[ChatAgent | GroupTeam] = [
        AssistantAgent(
            s.name, model_client=agents[s.name], system_message=s.system, description=offers[s.name]
        )
        for s in specs
    ]
    chooser = DescriptorSelector(
        [s.name for s in specs], offers=offers, titles={s.name: s.title for s in specs}, **selector_options
    )
    team = SelectorGroupChat(
        participants,
        model_client=model_client,
        termination_condition=termination_condition,
        max_turns=max_turns,
        selector_func=chooser.select if selector == "select" else None,
        candidate_func=chooser.candidates if selector == "candidates" else None,
    )
    return team, chooser
