"""DyTopo: a manager-driven worker loop that rebuilds the communication graph every round from the workers'
need/offer descriptors (Lu et al., arXiv 2602.06039; resolutions of the paper's gaps in the project's spec).

One round: every worker makes one structured LLM call (all at once: barrier semantics) returning a public
message, a private message and two one-sentence descriptors; the descriptors are embedded and routed
(``Router``: edge ``j -> i`` iff ``cos(key_j, query_i) > tau``, at most ``k_in`` providers per recipient); sigma
comes from ``ops.toposort``; each worker's memory gains its own public message and the private messages routed to
it, ordered by relevance; the manager reads the goal and the public messages in sigma order, decides whether the
task is complete and sets the next goal. At most ``max_rounds`` rounds; the answer comes from the last round.

Options from the spec's resolutions, all off by default (:class:`LoopConfig`): the manager matched as a sink-only
node, no manager call in the last round, role-prefixed descriptors, the manager's earlier goals in its prompt, and
per-role completion limits.

The same loop with another topology gives the multi-round baselines (random graph with DyTopo's per-round edge
count; chain, star, fully connected): :class:`WorkerLoop` with ``topology=...``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import ops
from ...llm.types import Request, Result, Tags
from ...tasks import Task
from ...trace.schema import (
    Descriptors,
    EdgeUsage,
    ManagerDecision,
    Message,
    RoundRecord,
    Stats,
    Usage,
)
from ..episode import (
    Clock,
    Emit,
    EpisodeOutput,
    domain_of,
    record_edges,
    request_seed,
)
from .answer import final_answer
from .graphs import RoundGraph, fixed_adjacency, random_adjacency, round_graph
from .messages import (
    ManagerOutput,
    MemoryBlock,
    Routed,
    WorkerOutput,
    format_memory,
    format_routed,
    parse_manager,
    parse_worker,
)
from .settings import LoopConfig
from .team import Team, load_team, prompt_text

if TYPE_CHECKING:
    from ...embed import Encoder, Router
    from ...runtime import EpisodeContext

__all__ = ["DyTopo", "WorkerLoop"]


@dataclass(frozen=True)
class _Round:
    """One round's inputs and worker outputs, as the manager call and the trace record need them.

    ``sink`` is the manager's need descriptor as matched (None: the manager is not a node of the graph);
    ``to_manager`` the private messages routed to it; ``earlier_goals`` the goals of the rounds before.
    """

    task: Task
    episode: str
    t: int
    goal: str
    team: Team
    outs: list[WorkerOutput]
    results: list[Result]
    graph: RoundGraph
    sink: str | None = None
    to_manager: tuple[Routed, ...] = ()
    earlier_goals: tuple[str, ...] = ()


def _with_role(title: str, descriptor: str) -> str:
    """A descriptor enriched with its agent's role (spec 8.18); an empty one stays empty (no edges)."""
    return f"{title}: {descriptor}" if descriptor.strip() else descriptor


def _routed_tokens(result: Result, text: str) -> int:
    """Tokens of a routed message, estimated as its share (by characters) of the sender's completion tokens."""
    raw = max(len(result.text), 1)
    return round(result.usage.completion_tokens * min(len(text) / raw, 1.0))


class WorkerLoop:
    """The worker/manager round loop over any topology (DyTopo when ``topology="semantic"``).

    Parameters
    ----------
    config : LoopConfig
    encoder : Encoder, optional
        Descriptor encoder for the semantic topology (default: ``Encoder.default()``, loaded on first use).
    edge_counts : mapping of episode id to per-round edge counts, optional
        The random baseline draws this many edges in each round (DyTopo's counts for the same episode; rounds
        past the end reuse the last count). Episodes missing here use ``config.random_edges``.
    name : str
        The method's name in traces and records.
    """

    def __init__(
        self,
        config: LoopConfig | None = None,
        *,
        encoder: Encoder | None = None,
        edge_counts: Mapping[str, Sequence[int]] | None = None,
        name: str = "dytopo",
    ) -> None:
        self.config = config or LoopConfig()
        self.name = name
        self._encoder = encoder
        self._routers: dict[float, Router] = {}
        self.edge_counts = dict(edge_counts or {})

    def params(self) -> dict[str, Any]:
        """The settings that determine this method's results (recorded in run.json)."""
        return {"method": self.name, **asdict(self.config)}

    def router(self, domain: str) -> Router:
        from ...embed import Encoder, Router

        tau = self.config.tau_for(domain)
        if tau not in self._routers:
            if self._encoder is None:
                self._encoder = Encoder.default()
            self._routers[tau] = Router(self._encoder, tau=tau, k_in=self.config.k_in)
        return self._routers[tau]

    async def _graph(
        self, domain: str, episode: str, round_: int, team: Team, outs: list[WorkerOutput], sink: str | None
    ) -> RoundGraph:
        """The round's graph over the workers, plus the manager as a last, sink-only node when ``sink`` (its
        need descriptor) is given."""
        c, n = self.config, len(outs)
        if c.topology == "semantic":
            titles = [w.title for w in team.workers]
            queries, keys = [o.query for o in outs], [o.key for o in outs]
            if sink is not None:  # an empty offer: the manager never provides
                titles, queries, keys = [*titles, team.manager.title], [*queries, sink], [*keys, ""]
            if c.role_prefix:
                queries = [_with_role(r, q) for r, q in zip(titles, queries)]
                keys = [_with_role(r, k) for r, k in zip(titles, keys)]
            routes = await self.router(domain).aroute_texts(queries, keys)
            return round_graph(routes.adjacency, routes.scores, inbox_order=c.inbox_order)
        if c.topology == "random":
            counts = self.edge_counts.get(episode)
            m = c.random_edges if not counts else int(counts[min(round_, len(counts) - 1)])
            rng = np.random.Generator(np.random.Philox(key=request_seed(c.seed, episode, round_, "graph")))
            return round_graph(random_adjacency(n, m, c.k_in, rng), None, inbox_order="sigma")
        if c.topology == "none":
            return round_graph(np.zeros((n, n), dtype=bool), None, inbox_order="sigma")
        return round_graph(fixed_adjacency(c.topology, n), None, inbox_order="sigma")

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        """Runs one task; ``emit`` receives one trace record per round (see :mod:`toporoute.trace`)."""
        c = self.config
        domain = domain_of(task)
        team = load_team(domain, c.max_tokens, c.role_max_tokens)
        workers, names = team.workers, team.names
        n = len(workers)
        memory: list[list[MemoryBlock]] = [[] for _ in range(n)]
        goal = c.initial_goal
        goals: list[str] = []
        manager_need = team.manager.query
        history: list[tuple[list[WorkerOutput], list[int]]] = []
        clock = Clock()
        prev_adj: np.ndarray | None = None
        halted = False
        worker_user = prompt_text("worker_user.txt")
        for t in range(c.max_rounds):
            rc = clock.round()
            requests = [
                Request.chat(
                    w.system,
                    worker_user.format(
                        task=task.prompt.strip(),
                        round=t + 1,
                        max_rounds=c.max_rounds,
                        goal=goal,
                        memory=format_memory(memory[i]),
                        field_names=", ".join(w.fields),
                    ).strip(),
                    sampling=c.sampling(ctx.episode, t, w.name, max_tokens=w.max_tokens),
                    schema=w.schema,
                    tags=Tags(round=t, agent=w.name, role=w.title),
                )
                for i, w in enumerate(workers)
            ]
            results = await rc.generate(ctx, requests)
            outs = [parse_worker(r) for r in results]
            call_manager = c.manager and not (c.skip_last_manager and t == c.max_rounds - 1)
            # the sink stays a node in a round without a manager call (no need: no edges), so that every round's
            # graph has the same nodes
            sink = (manager_need if call_manager else "") if c.manager_sink else None

            with rc.routing():
                graph = await self._graph(domain, ctx.episode, t, team, outs, sink)
                stats = ops.graph_stats(graph.adjacency, prev=prev_adj)

            edges: list[EdgeUsage] = []
            for i in range(n):
                routed = self._deliver(team, outs, results, graph, i, names[i], edges)
                memory[i].append(MemoryBlock(t, outs[i].public, routed))
            to_manager: tuple[Routed, ...] = ()
            if sink is not None:
                to_manager = self._deliver(team, outs, results, graph, n, team.manager.name, edges)
            usage = Usage.of(zip(names, results), record_edges(ctx, t, edges))
            history.append((outs, [i for i in graph.order if i < n]))
            rnd = _Round(
                task, ctx.episode, t, goal, team, outs, results, graph, sink, to_manager, tuple(goals)
            )

            manager: ManagerOutput | None = None
            if call_manager:
                mgr_result = await rc.generate_one(ctx, self._manager_request(rnd))
                manager = parse_manager(mgr_result, goal)
                usage = usage.with_call(team.manager.name, mgr_result)
            emit(self._record(rnd, stats, manager, usage, rc.timing()))
            prev_adj = graph.adjacency
            if manager is None:
                continue
            if c.halting and manager.is_complete:
                halted = True
                break
            goals.append(goal)
            goal = manager.next_goal
            manager_need = manager.query or manager_need
        answer = final_answer(task, team, history)
        return EpisodeOutput(answer, len(history), halted, clock.llm_s, clock.routing_s)

    def _deliver(
        self,
        team: Team,
        outs: list[WorkerOutput],
        results: list[Result],
        graph: RoundGraph,
        i: int,
        recipient: str,
        edges: list[EdgeUsage],
    ) -> tuple[Routed, ...]:
        """The private messages routed to node ``i`` (named ``recipient``), in its inbox order; each one that
        is not empty is also appended to ``edges``."""
        routed = []
        for j in graph.inbox[i]:
            text = outs[j].private_text(recipient, self.config.private_routing)
            if not text:
                continue
            score = None if graph.scores is None else float(graph.scores[j, i])
            routed.append(Routed(team.names[j], team.workers[j].title, score, text))
            edges.append(EdgeUsage(team.names[j], recipient, _routed_tokens(results[j], text)))
        return tuple(routed)

    def _manager_request(self, rnd: _Round) -> Request:
        """The manager's call: the task, the round goal and the workers' public messages in sigma order (plus,
        as configured, the goals of the earlier rounds and the private messages routed to it)."""
        task, team, outs, t = rnd.task, rnd.team, rnd.outs, rnd.t
        names, workers = team.names, team.workers
        publics = "\n\n".join(
            f"From {names[i]} ({workers[i].title}):\n{outs[i].public or '(no message)'}"
            for i in rnd.graph.order
            if i < len(workers)
        )
        earlier = ""
        if self.config.manager_goal_history and rnd.earlier_goals:
            listed = "\n".join(f"Round {r}: {g}" for r, g in enumerate(rnd.earlier_goals, 1))
            earlier = prompt_text("manager_goals.txt").format(goals=listed)
        routed = ""
        if rnd.sink is not None:
            routed = prompt_text("manager_routed.txt").format(
                routed=format_routed(rnd.to_manager) or "(none)"
            )
        return Request.chat(
            team.manager.system,
            prompt_text("manager_user.txt")
            .format(
                task=task.prompt.strip(),
                earlier_goals=earlier,
                round=t + 1,
                max_rounds=self.config.max_rounds,
                goal=rnd.goal,
                messages=publics,
                routed=routed,
                field_names=", ".join(team.manager.fields),
            )
            .strip(),
            sampling=self.config.sampling(
                rnd.episode, t, team.manager.name, max_tokens=team.manager.max_tokens
            ),
            schema=team.manager.schema,
            tags=Tags(round=t, agent=team.manager.name, role=team.manager.title),
        )

    def _record(
        self, rnd: _Round, stats: ops.GraphStats, manager: ManagerOutput | None, usage: Usage, timing: Any
    ) -> RoundRecord:
        team, outs, graph = rnd.team, rnd.outs, rnd.graph
        names, titles = team.names, [w.title for w in team.workers]
        queries, keys = [o.query for o in outs], [o.key for o in outs]
        if rnd.sink is not None:
            names, titles = [*names, team.manager.name], [*titles, team.manager.title]
            queries, keys = [*queries, rnd.sink], [*keys, ""]
        return RoundRecord(
            method=self.name,
            episode=rnd.episode,
            task=rnd.task.id,
            round=rnd.t,
            goal=rnd.goal,
            descriptors=Descriptors(queries, keys),
            graph=graph.trace_block(names, titles),
            messages={
                names[i]: Message.of(o.public, o.private_text(), o.answer, o.parse_error)
                for i, o in enumerate(outs)
            },
            usage=usage,
            manager=None
            if manager is None
            else ManagerDecision(
                manager.is_complete,
                manager.next_goal,
                Message.of(manager.public).public,
                manager.parse_error,
                manager.query,
                manager.key,
            ),
            stats=Stats.of(stats),
            timing=timing,
        )


class DyTopo(WorkerLoop):
    """DyTopo with its defaults (semantic routing, tau preset per domain, k_in 3, T_max 10, manager halting)."""

    def __init__(self, config: LoopConfig | None = None, *, encoder: Encoder | None = None) -> None:
        config = config or LoopConfig()
        if config.topology != "semantic":
            config = replace(config, topology="semantic")
        super().__init__(config, encoder=encoder, name="dytopo")
