"""What the LangGraph and AutoGen adapters share; imports neither framework.

- Roles and prompts: each agent is a DyTopo worker (:func:`worker_spec`): its system prompt asks for one JSON
  object with a public message, private messages and one-sentence need (``q_vector``) and offer (``k_vector``)
  descriptors; :func:`worker_prompt` / :func:`manager_prompt` render DyTopo's user turns; :func:`parse_reply` /
  :func:`parse_decision` read a reply with DyTopo's lenient parser (a reply that is no JSON object becomes the
  public message, with no descriptors: that agent neither sends nor receives).
- Routings (one round's graph from the agents' outputs): :class:`DescriptorRouting` (DyTopo: the Router in
  process, or a ``toporoute serve`` URL through :class:`~toporoute.client.Client` / ``AsyncClient``),
  :class:`FixedRouting` (chain, star, full or any adjacency) and :class:`QMixRouting` (an Agent Q-Mix checkpoint's
  communication actions).
- Records: :func:`round_record` builds the trace record of a round as ``toporoute run`` writes it, and
  :class:`RunRecorder` writes the method folder (``run.json``, ``traces/<episode>.jsonl``,
  ``episodes/<episode>.json``, ``summary.json``) that ``toporoute report`` reads.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .. import ops
from .._atomic import write_bytes_atomic, write_json_atomic
from ..errors import InvalidArgumentError
from ..llm.replies import extract_json, strip_reasoning
from ..llm.types import Result
from ..llm.types import Usage as CallTokens
from ..methods.dytopo.graphs import FIXED_TOPOLOGIES, RoundGraph, fixed_adjacency, round_graph
from ..methods.dytopo.messages import (
    ManagerOutput,
    MemoryBlock,
    Routed,
    WorkerOutput,
    format_memory,
    parse_manager,
    parse_worker,
)
from ..methods.dytopo.team import AgentSpec, agent_spec, load_team, prompt_text
from ..tasks import Task
from ..trace.schema import (
    Descriptors,
    EdgeUsage,
    EpisodeRecord,
    ManagerDecision,
    Message,
    RoundRecord,
    Stats,
    Timing,
    Usage,
)

if TYPE_CHECKING:
    from ..embed import Router
    from ..methods.qmix import QMixPolicy

__all__ = [
    "DescriptorRouting",
    "FixedRouting",
    "QMixRouting",
    "Routing",
    "RunRecorder",
    "delivered",
    "manager_prompt",
    "manager_spec",
    "parse_decision",
    "parse_reply",
    "round_record",
    "task_fields",
    "task_of",
    "worker_prompt",
    "worker_spec",
]

_EPISODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

# ------------------------------------------------------------------------------------------------ roles, prompts


def worker_spec(
    name: str,
    title: str | None = None,
    description: str | None = None,
    *,
    domain: str = "code",
    max_tokens: int = 4096,
) -> AgentSpec:
    """A worker's role: DyTopo's team agent of that name (``Developer``, ``Tester``, ... of ``domain``'s team)
    unless ``title`` or ``description`` is given, else a new role with DyTopo's prompt and output schema."""
    if title is None and description is None:
        team = load_team(domain, max_tokens)
        for w in team.workers:
            if w.name == name:
                return w
        raise InvalidArgumentError(
            f"agent {name!r} is not in DyTopo's {domain} team ({', '.join(team.names)}); give it a title and "
            "a description",
            "agents",
        )
    return agent_spec(
        name, title or name, description or f"Contribute to the task as the {name}.", max_tokens=max_tokens
    )


def manager_spec(domain: str = "code", max_tokens: int = 4096) -> AgentSpec:
    """DyTopo's manager of ``domain`` (its prompt asks for ``is_complete`` and ``next_goal``)."""
    return load_team(domain, max_tokens).manager


def worker_prompt(
    spec: AgentSpec, task: str, goal: str, round: int, max_rounds: int, memory: Sequence[MemoryBlock]
) -> tuple[str, str]:
    """``(system, user)`` of a worker's call in round ``round`` (0-based), as DyTopo's loop writes them."""
    user = prompt_text("worker_user.txt").format(
        task=task.strip(),
        round=round + 1,
        max_rounds=max_rounds,
        goal=goal,
        memory=format_memory(memory),
        field_names=", ".join(spec.fields),
    )
    return spec.system, user.strip()


def manager_prompt(
    spec: AgentSpec,
    task: str,
    goal: str,
    round: int,
    max_rounds: int,
    publics: Sequence[tuple[str, str, str]],
) -> tuple[str, str]:
    """``(system, user)`` of the manager's call: the task, the goal and ``publics`` (``(name, title, public
    message)`` in sigma order)."""
    messages = "\n\n".join(f"From {n} ({t}):\n{p or '(no message)'}" for n, t, p in publics)
    user = prompt_text("manager_user.txt").format(
        task=task.strip(),
        earlier_goals="",
        round=round + 1,
        max_rounds=max_rounds,
        goal=goal,
        messages=messages,
        routed="",
        field_names=", ".join(spec.fields),
    )
    return spec.system, user.strip()


def _result(text: str, prompt_tokens: int, completion_tokens: int, latency_s: float) -> Result:
    """The reply as an engine result; ``parsed`` is the JSON object in it, if any (a framework's model has no
    schema check: a reply is parsed or not, and DyTopo's parser then records no error for a parsed one)."""
    try:
        value = extract_json(strip_reasoning(text))
    except ValueError:
        value = None
    return Result(
        text=text,
        usage=CallTokens(prompt_tokens, completion_tokens),
        latency_s=latency_s,
        parsed=value if isinstance(value, Mapping) else None,
    )


def parse_reply(
    reply: str | Mapping[str, Any], prompt_tokens: int = 0, completion_tokens: int = 0, latency_s: float = 0.0
) -> tuple[WorkerOutput, Result]:
    """A worker's output from its reply text (or an already structured dict with DyTopo's fields), and the
    call as a :class:`~toporoute.llm.Result` for the usage records."""
    if isinstance(reply, Mapping):
        result = Result(
            text=json.dumps(reply, ensure_ascii=False, default=str),
            usage=CallTokens(prompt_tokens, completion_tokens),
            latency_s=latency_s,
            parsed=dict(reply),
        )
    else:
        result = _result(reply, prompt_tokens, completion_tokens, latency_s)
    return parse_worker(result), result


def parse_decision(
    reply: str | Mapping[str, Any],
    previous_goal: str,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    latency_s: float = 0.0,
) -> tuple[ManagerOutput, Result]:
    """The manager's decision from its reply (an unusable reply keeps the goal and does not halt)."""
    if isinstance(reply, Mapping):
        text = json.dumps(reply, ensure_ascii=False, default=str)
        result = Result(
            text=text,
            usage=CallTokens(prompt_tokens, completion_tokens),
            latency_s=latency_s,
            parsed=dict(reply),
        )
    else:
        result = _result(reply, prompt_tokens, completion_tokens, latency_s)
    return parse_manager(result, previous_goal), result


def delivered(
    outs: Sequence[WorkerOutput],
    graph: RoundGraph,
    names: Sequence[str],
    titles: Sequence[str],
    *,
    mode: str = "full",
) -> list[list[Routed]]:
    """Each agent's routed private messages of the round, in its inbox order (empty messages are not sent)."""
    inboxes: list[list[Routed]] = []
    for i, recipient in enumerate(names):
        routed = []
        for j in graph.inbox[i]:
            text = outs[j].private_text(recipient, mode)
            if text:
                score = None if graph.scores is None else float(graph.scores[j, i])
                routed.append(Routed(names[j], titles[j], score, text))
        inboxes.append(routed)
    return inboxes


# ------------------------------------------------------------------------------------------------------- routings


class Routing(Protocol):
    """One round's graph over ``n`` agents from their need (``queries``) and offer (``keys``) descriptors.

    ``memo`` is the routing's own JSON-ready state of the episode (None before the first round), carried by the
    framework between rounds (a LangGraph checkpoint holds it); each call returns the next one.
    """

    name: str

    def params(self) -> dict[str, Any]: ...

    def route(
        self, queries: Sequence[str], keys: Sequence[str], memo: Any = None
    ) -> tuple[RoundGraph, Any]: ...

    async def aroute(
        self, queries: Sequence[str], keys: Sequence[str], memo: Any = None
    ) -> tuple[RoundGraph, Any]: ...


class DescriptorRouting:
    """DyTopo's routing: edge ``j -> i`` iff ``cos(key_j, query_i) > tau``, at most ``k_in`` providers per
    recipient; sigma and inboxes as DyTopo's loop orders them.

    Parameters
    ----------
    router : Router, optional
        The in-process Router (its ``tau`` and ``k_in`` apply). Default: ``Router(tau=tau, k_in=k_in)`` on the
        default encoder, made on first use.
    client : toporoute.client.Client or AsyncClient, optional
        Route through a ``toporoute serve`` service instead (the service embeds the descriptors).
    tau, k_in : float, int
        Used when no ``router`` is given.
    inbox_order : {"relevance", "sigma"}
        Delivery order of a recipient's messages.
    """

    name = "dytopo"

    def __init__(
        self,
        router: Router | None = None,
        *,
        client: Any = None,
        tau: float = 0.3,
        k_in: int = 3,
        inbox_order: str = "relevance",
    ) -> None:
        if router is not None and client is not None:
            raise InvalidArgumentError("give router or client, not both", "client")
        if inbox_order not in ("relevance", "sigma"):
            raise InvalidArgumentError(
                f"inbox_order must be 'relevance' or 'sigma'; got {inbox_order!r}", "inbox_order"
            )
        self.client = client
        self._router = router
        self._lock = threading.Lock()
        self.tau = float(router.tau if router is not None else tau)
        self.k_in = int(router.k_in if router is not None else k_in)
        self.inbox_order = inbox_order

    @property
    def router(self) -> Router:
        """The in-process Router (made on first use)."""
        with self._lock:
            if self._router is None:
                from ..embed import Router

                self._router = Router(tau=self.tau, k_in=self.k_in)
            return self._router

    def params(self) -> dict[str, Any]:
        return {
            "routing": self.name,
            "tau": self.tau,
            "k_in": self.k_in,
            "inbox_order": self.inbox_order,
            "service": self.client is not None,
        }

    def _graph(self, adjacency: np.ndarray, scores: np.ndarray | None) -> RoundGraph:
        return round_graph(adjacency, scores, inbox_order=self.inbox_order)

    def route(self, queries: Sequence[str], keys: Sequence[str], memo: Any = None) -> tuple[RoundGraph, Any]:
        if self.client is not None:
            if inspect.iscoroutinefunction(self.client.route):
                raise InvalidArgumentError(
                    "an AsyncClient routes only in async code (ainvoke/astream); use Client for invoke/stream",
                    "client",
                )
            ep = self.client.route(
                needs=list(queries), offers=list(keys), tau=self.tau, k_in=self.k_in, scores=True
            )
            return self._graph(ep.adjacency(), ep.scores), memo
        routes = self.router.route_texts(list(queries), list(keys))
        return self._graph(routes.adjacency, routes.scores), memo

    async def aroute(
        self, queries: Sequence[str], keys: Sequence[str], memo: Any = None
    ) -> tuple[RoundGraph, Any]:
        if self.client is not None:
            call: dict[str, Any] = {
                "needs": list(queries),
                "offers": list(keys),
                "tau": self.tau,
                "k_in": self.k_in,
                "scores": True,
            }
            if inspect.iscoroutinefunction(self.client.route):
                ep = await self.client.route(**call)
            else:
                ep = await asyncio.to_thread(self.client.route, **call)
            return self._graph(ep.adjacency(), ep.scores), memo
        routes = await self.router.aroute_texts(list(queries), list(keys))
        return self._graph(routes.adjacency, routes.scores), memo


class FixedRouting:
    """The same graph every round: ``"chain"``, ``"star"``, ``"full"`` (:func:`~toporoute.methods.dytopo.
    fixed_adjacency`, over the agents in order) or an ``(n, n)`` bool ``adj[src, dst]``."""

    def __init__(self, topology: str | np.ndarray = "chain") -> None:
        if isinstance(topology, str):
            if topology not in FIXED_TOPOLOGIES:
                raise InvalidArgumentError(
                    f"topology must be one of {FIXED_TOPOLOGIES} or an (n, n) bool array; got {topology!r}",
                    "topology",
                )
            self.kind, self.adjacency = topology, None
        else:
            adj = np.asarray(topology, dtype=bool)
            if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
                raise InvalidArgumentError(
                    f"topology must be an (n, n) array; got shape {list(adj.shape)}", "topology"
                )
            self.kind, self.adjacency = "custom", adj & ~np.eye(len(adj), dtype=bool)
        self.name = f"fixed-{self.kind}"

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"routing": self.name}
        if self.adjacency is not None:
            out["adjacency"] = self.adjacency.astype(int).tolist()
        return out

    def route(self, queries: Sequence[str], keys: Sequence[str], memo: Any = None) -> tuple[RoundGraph, Any]:
        n = len(queries)
        if self.adjacency is None:
            return round_graph(fixed_adjacency(self.kind, n), None, inbox_order="sigma"), memo
        if len(self.adjacency) != n:
            raise InvalidArgumentError(
                f"the fixed graph has {len(self.adjacency)} agents; the team has {n}", "topology"
            )
        return round_graph(self.adjacency, None, inbox_order="sigma"), memo

    async def aroute(
        self, queries: Sequence[str], keys: Sequence[str], memo: Any = None
    ) -> tuple[RoundGraph, Any]:
        return self.route(queries, keys, memo)


class QMixRouting:
    """An Agent Q-Mix policy's communication actions as the round graph (phi(u), :func:`~toporoute.methods.
    qmix.actions_to_graph`), chosen greedily from each agent's observation over the previous round's graph.

    The adapters keep DyTopo's barrier (every agent speaks once per round, the graph routes what it said to the
    next round); the Q-Mix method's in-round execution waves are not reproduced. The episode's memo holds the
    GRU hidden state, the previous graph and the agents' cumulative tokens, so a checkpointed graph resumes it.

    Parameters
    ----------
    policy : QMixPolicy or path
        A checkpoint written by ``toporoute train qmix`` (its ``n_agents`` must be the team size).
    task : str
        The text the policy's task feature is computed from (default: set per episode by the adapter).
    """

    name = "qmix"

    def __init__(self, policy: QMixPolicy | str | Path) -> None:
        from ..methods.qmix import QMixPolicy

        self.policy = policy if isinstance(policy, QMixPolicy) else QMixPolicy.load(policy)
        self.n_agents = self.policy.n_agents

    def params(self) -> dict[str, Any]:
        return {"routing": self.name, "n_agents": self.n_agents, "features": asdict(self.policy.features)}

    def start(self, task: str) -> dict[str, Any]:
        """The memo of a new episode on ``task``."""
        n, hidden = self.n_agents, self.policy.params.config.hidden
        return {
            "task_vec": self.policy.task_vector(task).round(7).tolist(),
            "adj": np.zeros((n, n), dtype=int).tolist(),
            "hidden": np.zeros((n, hidden), dtype=np.float32).tolist(),
            "tokens": [0] * n,
            "actions": [],
        }

    def route(self, queries: Sequence[str], keys: Sequence[str], memo: Any = None) -> tuple[RoundGraph, Any]:
        from ..methods.qmix import ACTIONS, actions_to_graph, observations

        n = len(queries)
        if n != self.n_agents:
            raise InvalidArgumentError(
                f"the Q-Mix checkpoint acts for {self.n_agents} agents; the team has {n}", "agents"
            )
        if not isinstance(memo, Mapping) or "task_vec" not in memo:
            raise InvalidArgumentError(
                "QMixRouting needs the episode memo of QMixRouting.start(task)", "memo"
            )
        adj_prev = np.asarray(memo["adj"], dtype=bool)
        obs = observations(
            self.policy.features,
            np.asarray(memo["task_vec"], dtype=np.float32),
            adj_prev,
            np.ones(n, dtype=bool),
            np.asarray(memo["tokens"], dtype=np.int64),
            after_round=True,
        )
        hidden = np.asarray(memo["hidden"], dtype=np.float32)
        actions, _, hidden, _ = self.policy.act(
            obs, adj_prev, hidden, epsilon=0.0, rng=np.random.default_rng(0)
        )
        adj, _ = actions_to_graph(actions)
        graph = round_graph(adj, None, inbox_order="sigma")
        names = [ACTIONS[int(a)] for a in actions]
        return graph, {
            **memo,
            "adj": adj.astype(int).tolist(),
            "hidden": hidden.astype(np.float32).tolist(),
            "actions": [*memo.get("actions", []), names],
        }

    async def aroute(
        self, queries: Sequence[str], keys: Sequence[str], memo: Any = None
    ) -> tuple[RoundGraph, Any]:
        return self.route(queries, keys, memo)

    @staticmethod
    def add_tokens(memo: Any, tokens: Sequence[int]) -> Any:
        """The memo with each agent's tokens of the round added (the policy observes cumulative tokens)."""
        if not isinstance(memo, Mapping) or "tokens" not in memo:
            return memo
        return {**memo, "tokens": [int(a) + int(b) for a, b in zip(memo["tokens"], tokens)]}


# -------------------------------------------------------------------------------------------------------- records


def task_fields(task: Task | str, task_id: str = "task") -> dict[str, Any]:
    """A task as JSON-ready fields (what a framework's state or checkpoint holds); a plain string is a code
    task without tests, named ``task_id``."""
    if isinstance(task, str):
        task = Task(id=task_id, kind="code", prompt=task)
    return {
        "id": task.id,
        "kind": task.kind,
        "prompt": task.prompt,
        "entry_point": task.entry_point,
        "test": task.test,
        "answer": task.answer,
        "choices": list(task.choices) if task.choices is not None else None,
    }


def task_of(fields: Mapping[str, Any]) -> Task:
    """The task of :func:`task_fields`."""
    choices = fields.get("choices")
    return Task(
        id=str(fields["id"]),
        kind=str(fields.get("kind") or "code"),
        prompt=str(fields.get("prompt") or ""),
        entry_point=fields.get("entry_point"),
        test=fields.get("test"),
        answer=fields.get("answer"),
        choices=tuple(choices) if choices else None,
    )


def _routed_tokens(result: Result, text: str) -> int:
    """A routed message's tokens: its share (by characters) of the sender's completion tokens."""
    raw = max(len(result.text), 1)
    return round(result.usage.completion_tokens * min(len(text) / raw, 1.0))


def round_record(
    *,
    method: str,
    episode: str,
    task_id: str,
    round: int,
    goal: str | None,
    names: Sequence[str],
    titles: Sequence[str],
    outs: Sequence[WorkerOutput],
    results: Mapping[str, Result],
    graph: RoundGraph,
    inboxes: Sequence[Sequence[Routed]],
    prev_adjacency: np.ndarray | None,
    timing: Timing,
    manager: tuple[AgentSpec, ManagerOutput, Result] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> RoundRecord:
    """The trace record of one round, as DyTopo's loop writes it (``toporoute report`` draws it).

    ``names``, ``titles`` and ``outs`` are the graph's nodes in order; ``results`` the calls made in the round by
    agent name (their messages are recorded, in node order); ``inboxes[i]`` the messages delivered to node ``i``.
    """
    edges = [
        EdgeUsage(m.sender, names[i], _routed_tokens(results[m.sender], m.text) if m.sender in results else 0)
        for i, routed in enumerate(inboxes)
        for m in routed
    ]
    usage = Usage.of(((n, results[n]) for n in names if n in results), edges)
    decision = None
    if manager is not None:
        spec, out, result = manager
        usage = usage.with_call(spec.name, result)
        decision = ManagerDecision(
            out.is_complete,
            out.next_goal,
            Message.of(out.public).public,
            out.parse_error,
            out.query,
            out.key,
        )
    stats = ops.graph_stats(graph.adjacency, prev=prev_adjacency)
    return RoundRecord(
        method=method,
        episode=episode,
        task=task_id,
        round=round,
        goal=goal,
        descriptors=Descriptors([o.query for o in outs], [o.key for o in outs]),
        graph=graph.trace_block(names, titles),
        messages={
            names[i]: Message.of(o.public, o.private_text(), o.answer, o.parse_error)
            for i, o in enumerate(outs)
            if names[i] in results
        },
        usage=usage,
        manager=decision,
        stats=Stats.of(stats),
        timing=timing,
        extra=dict(extra or {}),
    )


@dataclass
class RunRecorder:
    """Writes an adapter's runs as one method folder of a run directory (layout in :mod:`toporoute.trace`).

    ``run.json`` is written on creation (an existing one is kept, its task ids extended); each round record
    replaces the episode's rounds from its round on, so a round run again after a resume (LangGraph replays a
    node that was interrupted) is not recorded twice; :meth:`finish` scores the answer (code in the sandbox),
    writes ``episodes/<episode>.json`` and rewrites ``summary.json``. Safe to share between threads.

    Parameters
    ----------
    out_dir : path
        The method folder, e.g. ``RUN_DIR/langgraph-dytopo``.
    method : str
        The method name in the records.
    params : dict
        The settings recorded in ``run.json``.
    model, engine : str, optional
        What answered the calls, for ``run.json``.
    """

    out_dir: str | Path
    method: str
    params: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    engine: str | None = None

    def __post_init__(self) -> None:
        self.dir = Path(self.out_dir)
        self._lock = threading.Lock()
        with self._lock:
            config = self._config()
            if not config:
                from ..methods.harness import versions

                config = {
                    "v": 1,
                    "method": self.method,
                    "params": dict(self.params),
                    "tasks": None,
                    "model": self.model,
                    "engine": self.engine,
                    "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "versions": versions(),
                    "task_ids": [],
                }
                write_json_atomic(self.dir / "run.json", config)

    def _config(self) -> dict[str, Any]:
        try:
            value = json.loads((self.dir / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def trace_path(self, episode: str) -> Path:
        if not _EPISODE.fullmatch(episode):
            raise InvalidArgumentError(
                f"episode must be a file-name-safe id ({_EPISODE.pattern}, e.g. Task.episode_id); got {episode!r}",
                "episode",
            )
        return self.dir / "traces" / f"{episode}.jsonl"

    def rounds(self, episode: str) -> list[RoundRecord]:
        """The episode's round records written so far."""
        path = self.trace_path(episode)
        if not path.exists():
            return []
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(RoundRecord.from_json(json.loads(line)))
        return out

    def write(self, record: RoundRecord) -> None:
        """Records one round of ``record.episode`` (replacing that round and any later one already there)."""
        with self._lock:
            kept = [r for r in self.rounds(record.episode) if r.round < record.round]
            lines = [
                json.dumps(r.to_json(), ensure_ascii=False, separators=(",", ":")) for r in (*kept, record)
            ]
            write_bytes_atomic(self.trace_path(record.episode), ("\n".join(lines) + "\n").encode("utf-8"))
            config = self._config()
            ids = config.get("task_ids")
            if isinstance(ids, list) and record.task not in ids:
                config["task_ids"] = [*ids, record.task]
                write_json_atomic(self.dir / "run.json", config)

    def finish(
        self,
        episode: str,
        task: Task | Mapping[str, Any],
        answer: str,
        *,
        halted: bool,
        score: bool = True,
        timeout_s: float = 10.0,
    ) -> EpisodeRecord:
        """Writes the episode's record: ``answer`` scored against ``task`` (its tests, or its reference answer;
        no score when it has neither or ``score`` is False), totals from its round records."""
        from ..tasks import score as score_answer
        from ..trace.reader import load_run, summarize

        task = task if isinstance(task, Task) else task_of(task)
        t0 = time.perf_counter()
        scorable = task.test if task.kind == "code" else task.answer
        verdict = asdict(score_answer(task, answer, timeout_s=timeout_s)) if score and scorable else {}
        eval_s = time.perf_counter() - t0
        rounds = self.rounds(episode)
        timings = [r.timing for r in rounds if r.timing is not None]
        record = EpisodeRecord(
            method=self.method,
            task=task.id,
            kind=task.kind,
            rounds=len(rounds),
            halted=halted,
            answer=answer,
            score=verdict,
            llm_s=sum(t.llm_s for t in timings),
            routing_s=sum(t.routing_s for t in timings),
            eval_s=eval_s,
        )
        calls = [u for r in rounds for u in r.usage.agents.values()]
        usage = {
            "prompt_tokens": sum(u.prompt_tokens for u in calls),
            "completion_tokens": sum(u.completion_tokens for u in calls),
            "calls": len(calls),
            "failed_calls": sum(not u.ok for u in calls),
            "engine_failed_calls": 0,
            "reprompts": sum(u.attempts - 1 for u in calls),
            "llm_latency_s": round(sum(u.latency_s for u in calls), 4),
            "messages_routed": sum(len(r.usage.edges) for r in rounds),
            "tokens_routed": sum(e.tokens for r in rounds for e in r.usage.edges),
        }
        with self._lock:
            write_json_atomic(
                self.dir / "episodes" / f"{episode}.json",
                {
                    "episode": episode,
                    "status": "ok",
                    "error": None,
                    "wall_s": round(sum(t.round_s for t in timings), 4),
                    "record": record.to_json(),
                    "usage": usage,
                    "ledger": {},
                },
            )
            write_json_atomic(self.dir / "summary.json", summarize(load_run(self.dir).methods[0]))
        return record
