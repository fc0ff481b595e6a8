"""A LangGraph team whose message passing each superstep is decided by toporoute (extra ``langgraph``).

:func:`build_graph` returns a ``StateGraph`` (compile it with any checkpointer) of one node per agent (any
LangChain chat model, or any runnable), a ``route`` node, an optional ``manager`` node and a ``finish`` node.
One round is three supersteps:

1. every agent node runs at once, each started by a ``Send`` that carries its private input: the task, the
   round goal and its memory, which holds the private messages routed to it in earlier rounds. It answers with
   DyTopo's JSON (public message, private messages, need and offer descriptors);
2. ``route`` routes the round (:class:`~toporoute.integrations.rounds.DescriptorRouting` by default: the
   descriptors matched by the Router in process, or by a ``toporoute serve`` URL with ``client=``; or a fixed
   graph, or a Q-Mix checkpoint) and delivers each private message to its routed recipients' memories;
3. ``manager`` reads the public messages in sigma order and decides whether the task is complete (that ends the
   graph through ``finish``) and the next goal; the next round's ``Send`` s go out from there.

State lives in the graph state only (the agents' memories, the routing's memo), so a checkpointer can interrupt
and resume a run anywhere (``interrupt_before=["route"]``, a crash, a human in the loop). Streaming with
``stream_mode="custom"`` yields one event per superstep of the router and the manager: ``{"event": "route",
"round", "edges": [{"src", "dst", "score"}], "order", "inbox"}``, ``{"event": "manager", "round", "is_complete",
"next_goal"}`` and ``{"event": "finish", "answer", "halted", "rounds"}``; ``stream_mode="updates"`` shows the
same edges in the ``route`` node's update (``routed``).

With ``recorder=`` (a folder or a :class:`~toporoute.integrations.rounds.RunRecorder`) every round is written
as ``toporoute run`` writes it, and every finished episode is scored: ``toporoute report`` draws the runs.

Examples
--------
>>> from langgraph.checkpoint.memory import InMemorySaver  # doctest: +SKIP
>>> graph = build_graph({"Developer": model, "Tester": model}, manager=model, max_rounds=3)  # doctest: +SKIP
>>> app = graph.compile(checkpointer=InMemorySaver())  # doctest: +SKIP
>>> app.invoke(team_input("Write fib(n)."), {"configurable": {"thread_id": "1"}})["answer"]  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import operator
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import numpy as np

try:
    from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
    from langchain_core.runnables import RunnableConfig, RunnableLambda
    from langgraph.config import get_stream_writer
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "toporoute.integrations.langgraph needs LangGraph: pip install 'toporoute[langgraph]'"
    ) from exc

from ..errors import InvalidArgumentError
from ..methods.dytopo.answer import final_answer
from ..methods.dytopo.graphs import FIXED_TOPOLOGIES, RoundGraph
from ..methods.dytopo.messages import MemoryBlock, Routed, WorkerOutput
from ..methods.dytopo.settings import LoopConfig
from ..methods.dytopo.team import AgentSpec, Team
from ..tasks import Task
from ..trace.schema import Timing
from .rounds import (
    DescriptorRouting,
    FixedRouting,
    QMixRouting,
    Routing,
    RunRecorder,
    delivered,
    manager_prompt,
    manager_spec,
    parse_decision,
    parse_reply,
    round_record,
    task_fields,
    task_of,
    worker_prompt,
    worker_spec,
)

__all__ = ["Agent", "TeamState", "build_graph", "team_input"]


@dataclass(frozen=True)
class Agent:
    """One agent node: a LangChain chat model or any runnable, and its role.

    The node invokes ``model`` with ``[SystemMessage, HumanMessage]`` (DyTopo's role prompt and round prompt)
    and reads its output: a message or a string is parsed as DyTopo's JSON; a dict with DyTopo's fields
    (``public_content``, ``private_content``, ``q_vector``, ``k_vector``) is taken as it is.

    ``title`` and ``description`` make a new role; without them ``name`` must be an agent of DyTopo's team of the
    graph's domain (code: Developer, Researcher, Tester, Designer; math: ProblemParser, Solver, Verifier).
    """

    name: str
    model: Any
    title: str | None = None
    description: str | None = None


def _merge(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    return {**(old or {}), **(new or {})}


class TeamState(TypedDict, total=False):
    """The graph's state (JSON-ready values only, so any checkpointer stores it).

    ``outputs``: each agent's latest reply by name; ``memory``: each agent's memory blocks; ``history``: each
    round's outputs and sigma (for the final answer); ``graph``: the current round's graph; ``memo``: the
    routing's episode state; ``adjacency``: the previous round's graph.
    """

    task: dict[str, Any]
    episode: str
    goal: str
    round: int
    outputs: Annotated[dict[str, dict[str, Any]], _merge]
    memory: dict[str, list[dict[str, Any]]]
    history: Annotated[list[dict[str, Any]], operator.add]
    graph: dict[str, Any]
    routed: list[dict[str, Any]]
    memo: Any
    adjacency: list[list[bool]] | None
    routing_s: float
    halted: bool
    answer: str


def team_input(task: Task | str, *, episode: str | None = None, goal: str | None = None) -> dict[str, Any]:
    """The graph's input for one task (a toporoute :class:`~toporoute.tasks.Task`, or the task's text).

    ``episode`` names the run's trace files (default: ``task.episode_id``, or ``"task"`` for a text).
    """
    fields = task_fields(task)
    ep = episode or (task.episode_id if isinstance(task, Task) else "task")
    out: dict[str, Any] = {"task": fields, "episode": ep, "round": 0, "memory": {}, "adjacency": None}
    if goal is not None:
        out["goal"] = goal
    return out


# --------------------------------------------------------------------------------------------- conversions


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content if b)
    return str(content)


def _reply(out: Any) -> tuple[str | dict[str, Any], int, int]:
    """(text or structured dict, prompt tokens, completion tokens) of a model's or runnable's output."""
    if isinstance(out, BaseMessage):
        usage = getattr(out, "usage_metadata", None) or {}
        return _text(out.content), int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    if isinstance(out, Mapping):
        return dict(out), 0, 0
    return _text(out), 0, 0


def _blocks(raw: Sequence[Mapping[str, Any]]) -> list[MemoryBlock]:
    return [
        MemoryBlock(
            int(b["round"]),
            str(b["public"]),
            tuple(Routed(r["sender"], r["title"], r["score"], r["text"]) for r in b["routed"]),
        )
        for b in raw
    ]


def _graph_json(g: RoundGraph) -> dict[str, Any]:
    return {
        "adjacency": g.adjacency.astype(bool).tolist(),
        "scores": None if g.scores is None else np.asarray(g.scores, np.float64).tolist(),
        "order": g.order,
        "levels": g.levels,
        "removed": [list(e) for e in g.removed],
        "is_dag": g.is_dag,
        "inbox": g.inbox,
    }


def _graph_of(d: Mapping[str, Any]) -> RoundGraph:
    scores = d.get("scores")
    return RoundGraph(
        np.asarray(d["adjacency"], dtype=bool),
        None if scores is None else np.asarray(scores, dtype=np.float32),
        list(d["order"]),
        list(d["levels"]),
        [(int(s), int(t)) for s, t in d["removed"]],
        bool(d["is_dag"]),
        [list(x) for x in d["inbox"]],
    )


def _writer() -> Any:
    try:
        return get_stream_writer()
    except RuntimeError:  # outside a graph run (a node called directly)
        return lambda _event: None


# ------------------------------------------------------------------------------------------------------ the team


class _Team:
    """The nodes' shared, read-only configuration (no per-run state: that is in the graph state)."""

    def __init__(
        self,
        agents: Sequence[Agent],
        specs: Sequence[AgentSpec],
        manager: Any,
        manager_spec: AgentSpec,
        routing: Routing,
        *,
        max_rounds: int,
        halting: bool,
        initial_goal: str,
        private_routing: str,
        answer_agent: str,
        domain: str,
        recorder: RunRecorder | None,
        score: bool,
    ) -> None:
        self.agents, self.specs = list(agents), list(specs)
        self.names = [s.name for s in specs]
        self.titles = [s.title for s in specs]
        self.manager, self.manager_spec = manager, manager_spec
        self.routing = routing
        self.max_rounds, self.halting, self.initial_goal = max_rounds, halting, initial_goal
        self.private_routing = private_routing
        self.team = Team(domain, tuple(specs), manager_spec, answer_agent)
        self.recorder, self.score = recorder, score

    def goal(self, state: Mapping[str, Any]) -> str:
        return str(state.get("goal") or self.initial_goal)

    # -- agents ---------------------------------------------------------------------------------------------

    def agent_node(self, i: int) -> RunnableLambda:
        agent, spec = self.agents[i], self.specs[i]

        def prepare(payload: Mapping[str, Any]) -> list[BaseMessage]:
            system, user = worker_prompt(
                spec,
                payload["task"],
                payload["goal"],
                payload["round"],
                self.max_rounds,
                _blocks(payload["memory"]),
            )
            return [SystemMessage(system), HumanMessage(user)]

        def update(payload: Mapping[str, Any], out: Any, started: float, latency: float) -> dict[str, Any]:
            reply, prompt_tokens, completion_tokens = _reply(out)
            parsed, result = parse_reply(reply, prompt_tokens, completion_tokens, latency)
            return {
                "outputs": {
                    spec.name: {
                        "round": payload["round"],
                        "output": asdict(parsed),
                        "text": result.text,
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "started": started,
                        "latency_s": latency,
                    }
                }
            }

        def run(payload: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
            started, t0 = time.time(), time.perf_counter()
            out = agent.model.invoke(prepare(payload), config)
            return update(payload, out, started, time.perf_counter() - t0)

        async def arun(payload: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
            started, t0 = time.time(), time.perf_counter()
            out = await agent.model.ainvoke(prepare(payload), config)
            return update(payload, out, started, time.perf_counter() - t0)

        return RunnableLambda(run, afunc=arun, name=spec.name)

    def sends(self, state: Mapping[str, Any]) -> list[Send]:
        """The round's ``Send`` s: each agent's private input (its memory holds its routed messages)."""
        memory = state.get("memory") or {}
        t = int(state.get("round") or 0)
        return [
            Send(
                name,
                {
                    "task": state["task"]["prompt"],
                    "goal": self.goal(state),
                    "round": t,
                    "memory": memory.get(name, []),
                },
            )
            for name in self.names
        ]

    def after_round(self, state: Mapping[str, Any]) -> Any:
        if state.get("halted") or int(state.get("round") or 0) >= self.max_rounds:
            return "finish"
        return self.sends(state)

    # -- route ----------------------------------------------------------------------------------------------

    def _round_outputs(self, state: Mapping[str, Any]) -> tuple[list[WorkerOutput], list[Any]]:
        t = int(state.get("round") or 0)
        outputs = state.get("outputs") or {}
        missing = [n for n in self.names if (outputs.get(n) or {}).get("round") != t]
        if missing:
            raise InvalidArgumentError(f"round {t}: no output of {missing} in the graph state", "state")
        outs = [WorkerOutput(**outputs[n]["output"]) for n in self.names]
        _, results = zip(
            *(
                parse_reply(
                    outputs[n]["text"],
                    outputs[n]["prompt_tokens"],
                    outputs[n]["completion_tokens"],
                    outputs[n]["latency_s"],
                )
                for n in self.names
            )
        )
        return outs, list(results)

    def _memo(self, state: Mapping[str, Any]) -> Any:
        memo = state.get("memo")
        if memo is None and isinstance(self.routing, QMixRouting):
            memo = self.routing.start(state["task"]["prompt"])
        return memo

    def _routed(
        self,
        state: Mapping[str, Any],
        outs: list[WorkerOutput],
        results: list[Any],
        graph: RoundGraph,
        memo: Any,
        routing_s: float,
    ) -> dict[str, Any]:
        t = int(state.get("round") or 0)
        if isinstance(self.routing, QMixRouting):
            memo = QMixRouting.add_tokens(memo, [r.usage.total_tokens for r in results])
        inboxes = delivered(outs, graph, self.names, self.titles, mode=self.private_routing)
        memory = {k: list(v) for k, v in (state.get("memory") or {}).items()}
        for i, name in enumerate(self.names):
            block = {"round": t, "public": outs[i].public, "routed": [asdict(m) for m in inboxes[i]]}
            memory[name] = [*memory.get(name, []), block]
        edges = [
            {
                "src": self.names[s],
                "dst": self.names[d],
                "score": None if graph.scores is None else round(float(graph.scores[s, d]), 4),
            }
            for s, d in graph.edges
        ]
        event = {
            "event": "route",
            "episode": state.get("episode"),
            "round": t,
            "edges": edges,
            "order": [self.names[i] for i in graph.order],
            "inbox": {self.names[i]: [self.names[j] for j in graph.inbox[i]] for i in range(len(self.names))},
        }
        _writer()(event)
        update: dict[str, Any] = {
            "memory": memory,
            "memo": memo,
            "graph": _graph_json(graph),
            "routed": edges,
            "routing_s": routing_s,
        }
        if self.manager is None:
            update.update(self._close_round(state, outs, results, graph, routing_s, None, memo))
        return update

    def route(self, state: TeamState) -> dict[str, Any]:
        outs, results = self._round_outputs(state)
        t0 = time.perf_counter()
        graph, memo = self.routing.route([o.query for o in outs], [o.key for o in outs], self._memo(state))
        return self._routed(state, outs, results, graph, memo, time.perf_counter() - t0)

    async def aroute(self, state: TeamState) -> dict[str, Any]:
        outs, results = self._round_outputs(state)
        t0 = time.perf_counter()
        graph, memo = await self.routing.aroute(
            [o.query for o in outs], [o.key for o in outs], self._memo(state)
        )
        return self._routed(state, outs, results, graph, memo, time.perf_counter() - t0)

    # -- manager --------------------------------------------------------------------------------------------

    def _manager_messages(
        self, state: Mapping[str, Any], outs: list[WorkerOutput], graph: RoundGraph
    ) -> list[Any]:
        publics = [(self.names[i], self.titles[i], outs[i].public) for i in graph.order]
        system, user = manager_prompt(
            self.manager_spec, state["task"]["prompt"], self.goal(state), int(state.get("round") or 0),
            self.max_rounds, publics,
        )  # fmt: skip
        return [SystemMessage(system), HumanMessage(user)]

    def _decided(
        self,
        state: Mapping[str, Any],
        outs: list[WorkerOutput],
        results: list[Any],
        graph: RoundGraph,
        out: Any,
        latency: float,
    ) -> dict[str, Any]:
        reply, prompt_tokens, completion_tokens = _reply(out)
        decision = parse_decision(reply, self.goal(state), prompt_tokens, completion_tokens, latency)
        t = int(state.get("round") or 0)
        _writer()(
            {
                "event": "manager",
                "episode": state.get("episode"),
                "round": t,
                "is_complete": decision[0].is_complete,
                "next_goal": decision[0].next_goal,
            }
        )
        routing_s = float(state.get("routing_s") or 0.0)
        return self._close_round(state, outs, results, graph, routing_s, decision, state.get("memo"))

    def manage(self, state: TeamState, config: RunnableConfig) -> dict[str, Any]:
        outs, results = self._round_outputs(state)
        graph = _graph_of(state["graph"])
        t0 = time.perf_counter()
        out = self.manager.invoke(self._manager_messages(state, outs, graph), config)
        return self._decided(state, outs, results, graph, out, time.perf_counter() - t0)

    async def amanage(self, state: TeamState, config: RunnableConfig) -> dict[str, Any]:
        outs, results = self._round_outputs(state)
        graph = _graph_of(state["graph"])
        t0 = time.perf_counter()
        out = await self.manager.ainvoke(self._manager_messages(state, outs, graph), config)
        return self._decided(state, outs, results, graph, out, time.perf_counter() - t0)

    def _close_round(
        self,
        state: Mapping[str, Any],
        outs: list[WorkerOutput],
        results: list[Any],
        graph: RoundGraph,
        routing_s: float,
        decision: Any,
        memo: Any,
    ) -> dict[str, Any]:
        """The end of a round: its trace record, the next goal and round, and whether the graph halts."""
        t = int(state.get("round") or 0)
        goal = self.goal(state)
        if self.recorder is not None:
            outputs = state.get("outputs") or {}
            started = min(float(outputs[n]["started"]) for n in self.names)
            llm_s = max(r.latency_s for r in results) + (
                decision[1].latency_s if decision is not None else 0.0
            )
            prev = state.get("adjacency")
            record = round_record(
                method=self.recorder.method,
                episode=str(state.get("episode") or "task"),
                task_id=str(state["task"]["id"]),
                round=t,
                goal=goal,
                names=self.names,
                titles=self.titles,
                outs=outs,
                results=dict(zip(self.names, results)),
                graph=graph,
                inboxes=delivered(outs, graph, self.names, self.titles, mode=self.private_routing),
                prev_adjacency=None if prev is None else np.asarray(prev, dtype=bool),
                timing=Timing(max(time.time() - started, 0.0), llm_s, routing_s),
                manager=None if decision is None else (self.manager_spec, decision[0], decision[1]),
                extra=self._extra(memo),
            )
            self.recorder.write(record)
        update: dict[str, Any] = {
            "round": t + 1,
            "adjacency": graph.adjacency.astype(bool).tolist(),
            "history": [{"outputs": [asdict(o) for o in outs], "order": list(graph.order)}],
        }
        if decision is not None:
            update["goal"] = decision[0].next_goal
            update["halted"] = bool(self.halting and decision[0].is_complete)
        return update

    def _extra(self, memo: Any) -> dict[str, Any]:
        if isinstance(self.routing, QMixRouting) and isinstance(memo, Mapping) and memo.get("actions"):
            return {"actions": dict(zip(self.names, memo["actions"][-1]))}
        return {}

    # -- finish ---------------------------------------------------------------------------------------------

    def _answer(self, state: Mapping[str, Any]) -> tuple[Task, str]:
        task = task_of(state["task"])
        rounds = [
            ([WorkerOutput(**o) for o in h["outputs"]], list(h["order"])) for h in state.get("history") or []
        ]
        if task.kind not in ("code", "math"):
            return task, rounds[-1][0][self.names.index(self.team.answer_agent)].public if rounds else ""
        return task, final_answer(task, self.team, rounds)

    def _finished(self, state: Mapping[str, Any], answer: str) -> dict[str, Any]:
        halted = bool(state.get("halted"))
        _writer()(
            {
                "event": "finish",
                "episode": state.get("episode"),
                "answer": answer,
                "halted": halted,
                "rounds": len(state.get("history") or []),
            }
        )
        return {"answer": answer}

    def _record(self, state: Mapping[str, Any], task: Task, answer: str) -> None:
        """Score the answer and write the episode (with a recorder)."""
        if self.recorder is not None:
            self.recorder.finish(
                str(state.get("episode") or "task"),
                task,
                answer,
                halted=bool(state.get("halted")),
                score=self.score,
            )

    def finish(self, state: TeamState) -> dict[str, Any]:
        task, answer = self._answer(state)
        self._record(state, task, answer)
        return self._finished(state, answer)

    async def afinish(self, state: TeamState) -> dict[str, Any]:
        task, answer = self._answer(state)
        if self.recorder is not None:  # scoring (code in the sandbox) and writing block: off the event loop
            await asyncio.to_thread(self._record, state, task, answer)
        return self._finished(state, answer)


def _agents(agents: Mapping[str, Any] | Sequence[Agent]) -> list[Agent]:
    if isinstance(agents, Mapping):
        out = [Agent(str(name), model) for name, model in agents.items()]
    else:
        out = list(agents)
        if not all(isinstance(a, Agent) for a in out):
            raise InvalidArgumentError(
                "agents must be a mapping of name to model, or a list of Agent", "agents"
            )
    names = [a.name for a in out]
    if len(out) < 2 or len(set(names)) != len(names):
        raise InvalidArgumentError(f"agents must be at least two, with distinct names; got {names}", "agents")
    reserved = {"route", "manager", "finish", START, END}
    if reserved & set(names):
        raise InvalidArgumentError(f"agent names must not be {sorted(reserved)}; got {names}", "agents")
    return out


def _routing(routing: Routing | str | np.ndarray | None, router: Any, client: Any) -> Routing:
    if routing is None or (isinstance(routing, str) and routing == "dytopo"):
        return DescriptorRouting(router, client=client)
    if router is not None or client is not None:
        raise InvalidArgumentError("router and client apply to the 'dytopo' routing only", "routing")
    if isinstance(routing, str):
        if routing in FIXED_TOPOLOGIES:
            return FixedRouting(routing)
        raise InvalidArgumentError(
            f"routing must be 'dytopo', one of {FIXED_TOPOLOGIES}, an (n, n) bool array or a Routing; got "
            f"{routing!r}",
            "routing",
        )
    if isinstance(routing, np.ndarray):
        return FixedRouting(routing)
    return routing


def build_graph(
    agents: Mapping[str, Any] | Sequence[Agent],
    *,
    manager: Any = None,
    routing: Routing | str | np.ndarray | None = None,
    router: Any = None,
    client: Any = None,
    max_rounds: int = 5,
    halting: bool = True,
    domain: str = "code",
    max_tokens: int = 4096,
    initial_goal: str | None = None,
    private_routing: str = "full",
    answer_agent: str | None = None,
    recorder: RunRecorder | str | Path | None = None,
    method: str | None = None,
    score: bool = True,
) -> StateGraph:
    """The team as a LangGraph ``StateGraph`` (compile it, with a checkpointer to interrupt and resume).

    Parameters
    ----------
    agents : mapping of name to model, or list of Agent
        The agent nodes, in node order (node ``i`` of every graph): LangChain chat models or runnables.
    manager : chat model or runnable, optional
        DyTopo's manager: its ``is_complete`` ends the graph (with ``halting``), its ``next_goal`` is the next
        round's goal. None: no manager; the graph runs ``max_rounds`` rounds.
    routing : "dytopo", "chain", "star", "full", (n, n) bool array, or a Routing
        How each round's messages are routed (default DyTopo's descriptor matching).
    router : Router, optional
        The in-process Router of the ``dytopo`` routing (default ``Router()`` on the default encoder).
    client : toporoute.client.Client or AsyncClient, optional
        Route through a ``toporoute serve`` URL instead of in process (an AsyncClient needs ``ainvoke``).
    max_rounds : int
        T_max.
    halting : bool
        Stop when the manager says the task is complete.
    domain : {"code", "math"}
        The team whose roles and manager prompt are used.
    max_tokens : int
        Sizes the roles' output schemas (the models' own limits apply to the calls).
    initial_goal : str, optional
        The first round's goal (default DyTopo's).
    private_routing : {"full", "addressed"}
        Send every private entry to each routed recipient, or only the entries addressed to it.
    answer_agent : str, optional
        The agent whose messages hold the answer (default the team's: Developer / Solver, else the first).
    recorder : RunRecorder or path, optional
        Where the rounds and episodes are written (a path: the method folder, e.g. ``RUN_DIR/langgraph``).
    method : str, optional
        The method name in the records (default ``langgraph-<routing name>``).
    score : bool
        Score finished episodes against their task's tests (``recorder`` only).
    """
    members = _agents(agents)
    route = _routing(routing, router, client)
    if isinstance(route, QMixRouting) and route.n_agents != len(members):
        raise InvalidArgumentError(
            f"the Q-Mix checkpoint acts for {route.n_agents} agents; got {len(members)} agents", "routing"
        )
    if max_rounds < 1:
        raise InvalidArgumentError(f"max_rounds must be >= 1; got {max_rounds}", "max_rounds")
    if private_routing not in ("full", "addressed"):
        raise InvalidArgumentError(
            f"private_routing must be 'full' or 'addressed'; got {private_routing!r}", "private_routing"
        )
    specs = [
        worker_spec(a.name, a.title, a.description, domain=domain, max_tokens=max_tokens) for a in members
    ]
    names = [s.name for s in specs]
    if answer_agent is None:
        default = "Developer" if domain == "code" else "Solver"
        answer_agent = default if default in names else names[0]
    elif answer_agent not in names:
        raise InvalidArgumentError(
            f"answer_agent must be one of {names}; got {answer_agent!r}", "answer_agent"
        )
    if recorder is not None and not isinstance(recorder, RunRecorder):
        params = {"framework": "langgraph", "agents": names, "max_rounds": max_rounds, **route.params()}
        recorder = RunRecorder(recorder, method=method or f"langgraph-{route.name}", params=params)
    team = _Team(
        members,
        specs,
        manager,
        manager_spec(domain, max_tokens),
        route,
        max_rounds=max_rounds,
        halting=halting,
        initial_goal=initial_goal or LoopConfig().initial_goal,
        private_routing=private_routing,
        answer_agent=answer_agent,
        domain=domain,
        recorder=recorder,
        score=score,
    )
    graph = StateGraph(TeamState)
    for i, name in enumerate(names):
        graph.add_node(name, team.agent_node(i))
        graph.add_edge(name, "route")
    graph.add_node("route", RunnableLambda(team.route, afunc=team.aroute, name="route"))
    graph.add_node("finish", RunnableLambda(team.finish, afunc=team.afinish, name="finish"))
    last = "route"
    if manager is not None:
        graph.add_node("manager", RunnableLambda(team.manage, afunc=team.amanage, name="manager"))
        graph.add_edge("route", "manager")
        last = "manager"
    graph.add_conditional_edges(START, team.sends, names)
    graph.add_conditional_edges(last, team.after_round, [*names, "finish"])
    graph.add_edge("finish", END)
    return graph
