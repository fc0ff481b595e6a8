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
from ..._checks import at_least, int_at_least, one_of, within
from ...errors import InvalidArgumentError
from ...llm.types import Request, Result, Tags
from ...tasks import Task
from ...trace.schema import (
    Descriptors,
    EdgeUsage,
    Graph,
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
    SamplingSettings,
    domain_of,
    record_edges,
    request_seed,
)
from ..options import option
from .answer import final_answer
from .graphs import FIXED_TOPOLOGIES, RoundGraph, fixed_adjacency, random_adjacency, round_graph
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
from .team import Team, agent_names, load_team, prompt_text

if TYPE_CHECKING:
    from ...embed import Encoder, Router
    from ...runtime import EpisodeContext

__all__ = ["TAU_PRESETS", "TOPOLOGIES", "DyTopo", "LoopConfig", "WorkerLoop", "role_max_tokens"]

TOPOLOGIES = ("semantic", "random", *FIXED_TOPOLOGIES, "none")
TAU_PRESETS = {"code": 0.3, "math": 0.4}


def role_max_tokens(items: Sequence[str]) -> dict[str, int]:
    """``--role-max-tokens ROLE=N`` items as a mapping, with errors naming the bad item."""
    known = agent_names()
    out: dict[str, int] = {}
    for item in items:
        role, sep, value = item.partition("=")
        role = role.strip()
        if not sep or not role:
            raise InvalidArgumentError(
                f"--role-max-tokens takes ROLE=N (e.g. Solver=5000); got {item!r}", "role_max_tokens"
            )
        if role not in known:
            raise InvalidArgumentError(
                f"--role-max-tokens {item!r}: unknown role {role!r}; the roles: {', '.join(known)}",
                "role_max_tokens",
            )
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise InvalidArgumentError(
                f"--role-max-tokens {item!r}: N must be an integer >= 1; got {value!r}", "role_max_tokens"
            )
        if role in out:
            raise InvalidArgumentError(
                f"--role-max-tokens names {role!r} twice ({out[role]} and {n})", "role_max_tokens"
            )
        out[role] = n
    return out


@dataclass(frozen=True)
class LoopConfig(SamplingSettings):
    """Settings of the worker/manager loop (DyTopo's defaults; the baselines change ``topology`` and rounds).

    Parameters
    ----------
    temperature, top_p, max_tokens, seed : see :class:`~toporoute.methods.episode.SamplingSettings` (the
        paper: 0.3, 1.0, 3000-5000 tokens); ``seed`` also roots the random baseline's graphs.
    topology : {"semantic", "random", "chain", "star", "full", "none"}
        ``semantic`` is DyTopo's descriptor routing; ``none`` routes nothing (independent agents).
    tau : float, optional
        Edge threshold; None takes the domain preset (code 0.3, math 0.4).
    k_in : int
        Most providers per recipient (0: no cap). Also caps the random baseline.
    max_rounds : int
        T_max.
    halting : bool
        Stop when the manager says ``is_complete``; False runs exactly ``max_rounds`` rounds.
    manager : bool
        Call the manager after every round (False: no manager; the goal stays the initial one).
    inbox_order : {"relevance", "sigma"}
        Delivery order of a recipient's routed messages.
    private_routing : {"full", "addressed"}
        Send the whole private dict to every out-neighbour, or only the entries addressed to it.
    random_edges : int
        Edges per round of the random baseline when no DyTopo edge counts are given.
    manager_sink : bool
        Match the manager as a sink-only node (spec 8.6; semantic topology only): its latest need descriptor
        (before its first decision, the team file's) is matched against the workers' offers with the same
        ``tau`` and ``k_in``, it offers nothing, and the private messages routed to it go into its prompt. The
        round graph then has the manager as its last node. Off: the manager is not matched, its descriptors
        are only logged.
    skip_last_manager : bool
        Do not call the manager in the last round (t = T_max - 1, spec 8.14): its decision could only halt an
        episode that ends anyway. That round's record has no manager decision.
    role_prefix : bool
        Embed each descriptor as ``"<role title>: <descriptor>"`` (spec 8.18); off: the raw descriptor. The
        trace keeps the raw descriptors either way; empty descriptors stay empty (no edges).
    manager_goal_history : bool
        Show the manager the goals of the earlier rounds, oldest first, besides the current one (spec 8.10).
    role_max_tokens : mapping of str to int
        Completion-token limit of named agents (e.g. ``{"Solver": 5000}``; the spec's proposal for the math
        Solver), overriding ``max_tokens`` for them; keys are agent names of any domain's team (an agent of
        another domain's team is unaffected).
    """

    topology: str = "semantic"
    tau: float | None = option(
        None, shared=True, type=float, help="dytopo: edge threshold (default: code 0.3, math 0.4)"
    )
    k_in: int = option(3, help="most providers per recipient (0: no cap; default 3)")
    max_rounds: int = 10
    halting: bool = True
    manager: bool = True
    inbox_order: str = option(
        "relevance",
        choices=("relevance", "sigma"),
        help="delivery order of a recipient's routed messages (default relevance)",
    )
    private_routing: str = option(
        "full",
        choices=("full", "addressed"),
        help="send every private entry to each out-neighbour, or only those addressed to it (default full)",
    )
    initial_goal: str = "Define the initial approach and produce a first complete solution."
    random_edges: int = 3
    manager_sink: bool = option(
        False,
        help="dytopo: match the manager as a sink-only node by its need descriptor; the private messages "
        "routed to it go into its prompt (the baselines match nothing and keep it out)",
    )
    skip_last_manager: bool = option(False, help="no manager call in the last round")
    role_prefix: bool = option(
        False,
        help="dytopo: embed each descriptor as '<role title>: <descriptor>' (default: the raw descriptor)",
    )
    manager_goal_history: bool = option(
        False, help="show the manager the goals of the earlier rounds besides the current one"
    )
    role_max_tokens: dict[str, int] = option(
        factory=dict,
        repeat=True,
        convert=role_max_tokens,
        metavar="ROLE=N",
        help="completion tokens of one agent instead of --max-tokens, e.g. Solver=5000 (the spec's math "
        "Solver); repeat it for more roles",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_role_max_tokens()
        one_of("topology", self.topology, TOPOLOGIES)
        if self.tau is not None:
            within("tau", self.tau, -1, 1)
        at_least("k_in", self.k_in, 0)
        at_least("max_rounds", self.max_rounds, 1)
        at_least("random_edges", self.random_edges, 0)
        if self.manager_sink and (self.topology != "semantic" or not self.manager):
            raise InvalidArgumentError(
                "manager_sink matches the manager's descriptors, so it needs topology 'semantic' and the manager "
                f"on; got topology={self.topology!r}, manager={self.manager}",
                "manager_sink",
            )

    def _check_role_max_tokens(self) -> None:
        if not isinstance(self.role_max_tokens, Mapping):
            raise InvalidArgumentError(
                "role_max_tokens must map agent names to token counts; "
                f"got {type(self.role_max_tokens).__name__}",
                "role_max_tokens",
            )
        known = agent_names()
        unknown = sorted(str(r) for r in self.role_max_tokens if r not in known)
        if unknown:
            raise InvalidArgumentError(
                f"role_max_tokens names unknown role(s) {unknown}; the roles: {list(known)}",
                "role_max_tokens",
            )
        for role, n in self.role_max_tokens.items():
            int_at_least(f"role_max_tokens[{role!r}]", n, 1, field="role_max_tokens")
        # a copy in name order: the recorded params do not depend on the caller's order or later changes
        object.__setattr__(self, "role_max_tokens", dict(sorted(self.role_max_tokens.items())))

    def tau_for(self, domain: str) -> float:
        return TAU_PRESETS[domain] if self.tau is None else self.tau


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
            graph=Graph.build(
                names,
                titles,
                graph.edges,
                order=graph.order,
                levels=graph.levels,
                removed=graph.removed,
                is_dag=graph.is_dag,
                inbox=graph.inbox,
                scores=graph.scores,
            ),
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
