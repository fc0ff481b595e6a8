"""The typed trace schema: one definition of the per-round record and the episode record, for every method.

Methods build records from the shared blocks here (:class:`Graph`, :class:`Usage`, :class:`Timing`,
:class:`Message`, :class:`Edge`, :class:`Stats`); the trace writer and the harness serialise them with
``to_json()``; the reader parses files back with ``from_json()``, which accepts every record written since format
v1 (a field a method did not write reads as its default; a malformed value reads as its default too, so a
damaged file still shows what it can). The on-disk layout is documented in :mod:`toporoute.trace`.

A method's own per-round fields (Q-Mix's actions, AgentConductor's plan and verdicts, ...) sit at the top level
of the JSON record beside the shared ones; in memory they are :attr:`RoundRecord.extra`.

This module imports nothing of the LLM layer: it reads results by their attributes only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .._checks import is_finite_number, is_int, is_number

if TYPE_CHECKING:
    from typing_extensions import Self  # not typing's: Python 3.10 has none (annotations are never evaluated)

    from ..llm.types import Result
    from ..types.results import GraphStats

__all__ = [
    "FORMAT_VERSION",
    "TEXT_LIMIT",
    "CallUsage",
    "Descriptors",
    "Edge",
    "EdgeUsage",
    "EpisodeFile",
    "EpisodeRecord",
    "Graph",
    "ManagerDecision",
    "Message",
    "RoundRecord",
    "Stats",
    "Timing",
    "Usage",
    "UsageSummary",
    "clip",
]

FORMAT_VERSION = 1
TEXT_LIMIT = 20000
"""Longest model text kept in a trace field (characters); the rest is marked as cut."""


def clip(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, with the number of characters cut appended."""
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


# ------------------------------------------------------------------------------------------ tolerant readers


def _int(value: Any, default: int = 0) -> int:
    return int(value) if is_int(value) else default


def _float(value: Any, default: float = 0.0) -> float:
    return float(value) if is_finite_number(value) else default


def _opt_float(value: Any) -> float | None:
    return _float(value) if is_number(value) else None


def _opt_int(value: Any) -> int | None:
    return int(value) if is_int(value) else None


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _strs(value: Any) -> list[str]:
    return [str(v) for v in _list(value)]


def _round(value: float, digits: int) -> float:
    return round(float(value), digits)


def _bool(value: Any, default: bool) -> bool:
    return value if isinstance(value, bool) else default


# a flat record's field type -> how a JSON value is read into it, and the value of a missing or damaged
# field without a default of its own
_READERS: dict[str, tuple[Callable[[Any, Any], Any], Any]] = {
    "int": (_int, 0),
    "float": (_float, 0.0),
    "str": (_str, ""),
    "bool": (_bool, False),
    "int | None": (lambda v, default: _opt_int(v), None),
    "float | None": (lambda v, default: _opt_float(v), None),
    "str | None": (lambda v, default: _opt_str(v), None),
}

_T = TypeVar("_T")


def _read_flat(cls: type[_T], d: Any) -> _T:
    """A flat record (fields of the types in ``_READERS``) from a JSON object, field by field."""
    d = _dict(d)
    values = {}
    for f in fields(cls):  # type: ignore[arg-type]
        read, zero = _READERS[str(f.type)]
        values[f.name] = read(d.get(f.name), zero if f.default is MISSING else f.default)
    return cls(**values)


class _Flat:
    """A flat block (fields of the types in ``_READERS``): written field by field in declaration order, read
    back with :func:`_read_flat`."""

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, d: Any) -> Self:
        return _read_flat(cls, d)


# ---------------------------------------------------------------------------------------------- the blocks


@dataclass(frozen=True)
class Edge(_Flat):
    """A directed edge of a round graph between two named agents.

    ``score`` is the routing score where the topology is scored (DyTopo), else None; ``kind`` is
    AgentConductor's ``intra`` / ``cross`` / ``self`` (None elsewhere, and then not written).
    """

    src: str
    dst: str
    score: float | None = None
    kind: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"src": self.src, "dst": self.dst}
        if self.kind is not None:
            out["kind"] = self.kind
        out["score"] = None if self.score is None else _round(self.score, 4)
        return out


@dataclass(frozen=True)
class Graph:
    """A round's graph over its agents (node ``i`` of every matrix is ``agents[i]``).

    Attributes
    ----------
    agents, roles : list of str
        Agent names and role titles, in node order.
    edges : list of Edge
        The edges that route in this round.
    order : list of str
        The aggregation / execution order (DyTopo's sigma; the waves' order elsewhere).
    levels : list of int
        Longest-path layer (wave) of each agent, in node order; -1 for an agent that did not run.
    removed : list of Edge
        Back edges placed against ``order`` (cycles), or edges that delivered nothing; each is also in ``edges``.
    is_dag : bool or None
    inbox : dict of str to list of str
        Each recipient's providers, in delivery order.
    scores : (N, N) nested list of float, or None
        ``scores[src][dst]`` where the topology is scored.
    """

    agents: list[str]
    roles: list[str]
    edges: list[Edge] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    levels: list[int] = field(default_factory=list)
    removed: list[Edge] = field(default_factory=list)
    is_dag: bool | None = None
    inbox: dict[str, list[str]] = field(default_factory=dict)
    scores: list[list[float]] | None = None

    @classmethod
    def build(
        cls,
        agents: Sequence[str],
        roles: Sequence[str],
        edges: Iterable[tuple[int, int]],
        *,
        order: Iterable[int] = (),
        levels: Iterable[int] = (),
        removed: Iterable[tuple[int, int]] = (),
        is_dag: bool | None = None,
        inbox: Sequence[Iterable[int]] | Mapping[int, Iterable[int]] = (),
        scores: np.ndarray | None = None,
        kinds: Sequence[str] | None = None,
    ) -> Graph:
        """The block from node indices: ``edges`` / ``removed`` as ``(src, dst)`` pairs, ``order`` as indices,
        ``inbox[i]`` (a sequence by recipient, or a mapping for a subset) as provider indices, ``scores`` an
        ``(N, N)`` array (each edge takes its score from it), ``kinds`` one edge kind per edge."""
        names = list(agents)
        edges = list(edges)
        kinds = list(kinds) if kinds is not None else [None] * len(edges)  # type: ignore[list-item]
        items = inbox.items() if isinstance(inbox, Mapping) else enumerate(inbox)
        return cls(
            agents=names,
            roles=list(roles),
            edges=[
                Edge(names[s], names[d], None if scores is None else float(scores[s, d]), k)
                for (s, d), k in zip(edges, kinds)
            ],
            order=[names[i] for i in order],
            levels=[int(x) for x in levels],
            removed=[Edge(names[s], names[d]) for s, d in removed],
            is_dag=is_dag,
            inbox={names[i]: [names[j] for j in providers] for i, providers in items},
            scores=None if scores is None else np.round(np.asarray(scores, np.float64), 4).tolist(),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "agents": list(self.agents),
            "roles": list(self.roles),
            "scores": self.scores,
            "edges": [e.to_json() for e in self.edges],
            "order": list(self.order),
            "levels": list(self.levels),
            "removed": [{"src": e.src, "dst": e.dst} for e in self.removed],
            "is_dag": self.is_dag,
            "inbox": {k: list(v) for k, v in self.inbox.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Graph:
        scores = d.get("scores")
        is_dag = d.get("is_dag")
        return cls(
            agents=_strs(d.get("agents")),
            roles=_strs(d.get("roles")),
            edges=[Edge.from_json(e) for e in _list(d.get("edges"))],
            order=_strs(d.get("order")),
            levels=[_int(x, -1) for x in _list(d.get("levels"))],
            removed=[Edge.from_json(e) for e in _list(d.get("removed"))],
            is_dag=is_dag if isinstance(is_dag, bool) else None,
            inbox={str(k): _strs(v) for k, v in _dict(d.get("inbox")).items()},
            scores=[[_float(x) for x in _list(row)] for row in scores] if isinstance(scores, list) else None,
        )


@dataclass(frozen=True)
class Message(_Flat):
    """What one agent said in a round (model text clipped to :data:`TEXT_LIMIT`)."""

    public: str
    private: str = ""
    answer: str | None = None
    parse_error: str | None = None

    @classmethod
    def of(
        cls, public: str, private: str = "", answer: str | None = None, parse_error: str | None = None
    ) -> Message:
        """The message with its texts clipped for the trace."""
        return cls(clip(public), clip(private), answer, parse_error)


@dataclass(frozen=True)
class CallUsage(_Flat):
    """One LLM call: the engine's token counts, its latency and its attempts (re-prompts included)."""

    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    attempts: int = 1
    ok: bool = True

    @classmethod
    def of(cls, result: Result) -> CallUsage:
        """From an engine result."""
        return cls(
            result.usage.prompt_tokens,
            result.usage.completion_tokens,
            result.latency_s,
            result.attempts,
            result.ok,
        )

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "latency_s": _round(self.latency_s, 4)}


@dataclass(frozen=True)
class EdgeUsage(_Flat):
    """A message routed ``src -> dst`` in a round and its size in tokens."""

    src: str
    dst: str
    tokens: int


@dataclass(frozen=True)
class Usage:
    """A round's usage: every call by agent name, and the routed messages."""

    agents: dict[str, CallUsage] = field(default_factory=dict)
    edges: list[EdgeUsage] = field(default_factory=list)

    @classmethod
    def of(cls, results: Iterable[tuple[str, Result]], edges: Iterable[EdgeUsage] = ()) -> Usage:
        """From ``(agent name, result)`` pairs, in call order."""
        return cls({name: CallUsage.of(r) for name, r in results}, list(edges))

    @property
    def tokens(self) -> int:
        """Prompt + completion tokens of every call."""
        return sum(u.tokens for u in self.agents.values())

    def with_call(self, name: str, result: Result) -> Usage:
        """This usage with one more call (a later agent of the round, e.g. a manager or a final node)."""
        return Usage({**self.agents, name: CallUsage.of(result)}, list(self.edges))

    def to_json(self) -> dict[str, Any]:
        return {
            "agents": {k: u.to_json() for k, u in self.agents.items()},
            "edges": [e.to_json() for e in self.edges],
        }

    @classmethod
    def from_json(cls, d: Any) -> Usage:
        d = _dict(d)
        return cls(
            {str(k): CallUsage.from_json(v) for k, v in _dict(d.get("agents")).items()},
            [EdgeUsage.from_json(e) for e in _list(d.get("edges"))],
        )


@dataclass(frozen=True)
class Stats:
    """Graph statistics of a round (``ops.graph_stats``). AgentConductor adds ``intra_edges`` (its ``edges``
    count cross-turn refs too).

    ``jaccard_similarity_prev`` is the Jaccard similarity of the round's edge set E to the previous round's
    E', ``|E & E'| / |E | E'|`` (1 when both are empty), as the spec asks for; None in an episode's first
    round. Traces written before it hold ``jaccard_prev`` instead, the Jaccard distance ``1 - similarity``
    (what ``ops.graph_stats`` returns): :meth:`from_json` reads that field as ``1 - jaccard_prev``, so every
    file gives the similarity. The new name, not a changed meaning under the old one, keeps each file
    self-describing without a format version change.
    """

    edges: int
    density: float
    reciprocity: float
    jaccard_similarity_prev: float | None = None
    intra_edges: int | None = None

    @classmethod
    def of(cls, stats: GraphStats, *, edges: int | None = None, intra: bool = False) -> Stats:
        """From one graph's :class:`~toporoute.ops.GraphStats` (its ``jaccard`` is a distance); ``edges``
        overrides the edge count (then the statistics' own count is kept as ``intra_edges`` when ``intra``)."""
        own = int(stats.edges)
        return cls(
            own if edges is None else edges,
            _round(stats.density, 4),
            _round(stats.reciprocity, 4),
            None if stats.jaccard is None else _round(1.0 - float(stats.jaccard), 4),
            own if intra else None,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"edges": self.edges}
        if self.intra_edges is not None:
            out["intra_edges"] = self.intra_edges
        out.update(
            density=self.density,
            reciprocity=self.reciprocity,
            jaccard_similarity_prev=self.jaccard_similarity_prev,
        )
        return out

    @classmethod
    def from_json(cls, d: Any) -> Stats | None:
        if not isinstance(d, dict):
            return None
        stats = _read_flat(cls, d)
        old = _opt_float(d.get("jaccard_prev"))
        if "jaccard_similarity_prev" not in d and old is not None:
            stats = replace(stats, jaccard_similarity_prev=_round(1.0 - old, 4))
        return stats


@dataclass(frozen=True)
class Timing:
    """Wall time of a round, and the parts of it spent in LLM calls and in routing."""

    round_s: float
    llm_s: float
    routing_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "round_s": _round(self.round_s, 4),
            "llm_s": _round(self.llm_s, 4),
            "routing_s": _round(self.routing_s, 6),
        }

    @classmethod
    def from_json(cls, d: Any) -> Timing | None:
        return _read_flat(cls, d) if isinstance(d, dict) else None


@dataclass(frozen=True)
class Descriptors:
    """Each agent's need (query) and offer (key) descriptor, in node order."""

    query: list[str]
    key: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"query": list(self.query), "key": list(self.key)}

    @classmethod
    def from_json(cls, d: Any) -> Descriptors | None:
        return cls(_strs(d.get("query")), _strs(d.get("key"))) if isinstance(d, dict) else None


@dataclass(frozen=True)
class ManagerDecision:
    """A manager's round decision (DyTopo)."""

    is_complete: bool
    next_goal: str
    public: str
    parse_error: str | None = None
    query: str = ""
    key: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "is_complete": self.is_complete,
            "next_goal": self.next_goal,
            "public": self.public,
            "parse_error": self.parse_error,
            "descriptors": {"query": self.query, "key": self.key},
        }

    @classmethod
    def from_json(cls, d: Any) -> ManagerDecision | None:
        if not isinstance(d, dict):
            return None
        desc = _dict(d.get("descriptors"))
        return cls(
            d.get("is_complete") is True,
            _str(d.get("next_goal")),
            _str(d.get("public")),
            _opt_str(d.get("parse_error")),
            _str(desc.get("query")),
            _str(desc.get("key")),
        )


# ---------------------------------------------------------------------------------------------- the records

_GRAPH_KEYS = ("agents", "roles", "scores", "edges", "order", "levels", "removed", "is_dag", "inbox")
_ROUND_KEYS = frozenset(
    (
        "v",
        "method",
        "episode",
        "task",
        "round",
        "goal",
        "descriptors",
        "messages",
        "usage",
        "manager",
        "stats",
    )
    + ("timing",)
    + _GRAPH_KEYS
)


@dataclass(frozen=True)
class RoundRecord:
    """One line of ``traces/<episode>.jsonl``: one round (a turn, for AgentConductor) of one episode.

    Attributes
    ----------
    method, episode, task : str
    round : int
        0-based.
    graph : Graph
    messages : dict of str to Message
        By agent name.
    usage : Usage
    stats : Stats or None
    timing : Timing or None
        None only while a record is being built (every written round has its timing).
    goal : str or None
        The round goal every worker saw (DyTopo and its loop baselines).
    descriptors : Descriptors or None
        DyTopo's need/offer descriptors.
    manager : ManagerDecision or None
    extra : dict
        The method's own fields, JSON-ready, written at the top level of the record (see
        :mod:`toporoute.trace`).
    v : int
        Format version.
    """

    method: str
    episode: str
    task: str
    round: int
    graph: Graph
    messages: dict[str, Message] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    stats: Stats | None = None
    timing: Timing | None = None
    goal: str | None = None
    descriptors: Descriptors | None = None
    manager: ManagerDecision | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    v: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "v": self.v,
            "method": self.method,
            "episode": self.episode,
            "task": self.task,
            "round": self.round,
            "goal": self.goal,
            "descriptors": None if self.descriptors is None else self.descriptors.to_json(),
        }
        out.update(self.graph.to_json())
        out.update(
            messages={k: m.to_json() for k, m in self.messages.items()},
            usage=self.usage.to_json(),
            manager=None if self.manager is None else self.manager.to_json(),
            stats=None if self.stats is None else self.stats.to_json(),
            timing=None if self.timing is None else self.timing.to_json(),
        )
        clash = _ROUND_KEYS.intersection(self.extra)
        if clash:
            raise ValueError(f"RoundRecord.extra must not hold shared fields; got {sorted(clash)}")
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RoundRecord:
        """A record read back (any version since v1); ``d`` must hold an integer ``round``."""
        return cls(
            method=_str(d.get("method")),
            episode=_str(d.get("episode")),
            task=_str(d.get("task")),
            round=_int(d.get("round")),
            graph=Graph.from_json(d),
            messages={str(k): Message.from_json(v) for k, v in _dict(d.get("messages")).items()},
            usage=Usage.from_json(d.get("usage")),
            stats=Stats.from_json(d.get("stats")),
            timing=Timing.from_json(d.get("timing")),
            goal=_opt_str(d.get("goal")),
            descriptors=Descriptors.from_json(d.get("descriptors")),
            manager=ManagerDecision.from_json(d.get("manager")),
            extra={k: v for k, v in d.items() if k not in _ROUND_KEYS},
            v=_int(d.get("v"), FORMAT_VERSION),
        )

    @property
    def edge_count(self) -> int:
        """``stats.edges``, else the number of edges."""
        return self.stats.edges if self.stats is not None else len(self.graph.edges)

    @property
    def density(self) -> float:
        """``stats.density``, else edges / (n (n - 1)) over the round's agents (0 with fewer than two)."""
        if self.stats is not None:
            return self.stats.density
        n = len(self.graph.agents)
        return self.edge_count / (n * (n - 1)) if n > 1 else 0.0


@dataclass(frozen=True)
class EpisodeRecord:
    """A method's record of one finished episode (``episodes/<episode>.json``, field ``record``).

    ``score`` is the task's verdict (``passed``, ``status``, ``detail``); ``extra`` holds the method's own
    blocks (``qmix``, ``conductor``), written at the top level.
    """

    method: str
    task: str
    kind: str
    rounds: int
    halted: bool
    answer: str
    score: dict[str, Any]
    llm_s: float
    routing_s: float
    eval_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("method", "task", "kind", "rounds", "halted", "answer", "score", "llm_s", "routing_s", "eval_s")

    @property
    def passed(self) -> bool:
        return self.score.get("passed") is True

    def to_json(self) -> dict[str, Any]:
        clash = set(self._KEYS).intersection(self.extra)
        if clash:
            raise ValueError(f"EpisodeRecord.extra must not hold shared fields; got {sorted(clash)}")
        return {
            "method": self.method,
            "task": self.task,
            "kind": self.kind,
            "rounds": self.rounds,
            "halted": self.halted,
            "answer": self.answer,
            "score": dict(self.score),
            "llm_s": _round(self.llm_s, 4),
            "routing_s": _round(self.routing_s, 6),
            "eval_s": _round(self.eval_s, 4),
            **self.extra,
        }

    @classmethod
    def from_json(cls, d: Any) -> EpisodeRecord | None:
        if not isinstance(d, dict):
            return None
        return cls(
            method=_str(d.get("method")),
            task=_str(d.get("task")),
            kind=_str(d.get("kind")),
            rounds=_int(d.get("rounds")),
            halted=d.get("halted") is True,
            answer=_str(d.get("answer")),
            score=_dict(d.get("score")),
            llm_s=_float(d.get("llm_s")),
            routing_s=_float(d.get("routing_s")),
            eval_s=_float(d.get("eval_s")),
            extra={k: v for k, v in d.items() if k not in cls._KEYS},
        )


@dataclass(frozen=True)
class UsageSummary:
    """An episode's usage totals (the runtime's ledger summary)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    failed_calls: int = 0
    engine_failed_calls: int = 0
    reprompts: int = 0
    llm_latency_s: float = 0.0
    messages_routed: int = 0
    tokens_routed: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def from_json(cls, d: Any) -> UsageSummary | None:
        return _read_flat(cls, d) if isinstance(d, dict) else None


@dataclass(frozen=True)
class EpisodeFile:
    """``episodes/<episode>.json`` as the runtime writes it: status, timing, the method's record and usage.

    ``status`` is ``"ok"`` or ``"error"`` (with the traceback in ``error`` and its one-line ``cause``);
    ``record`` and ``usage`` are None when absent or unreadable; ``ledger`` is kept as written (per call and per
    routed edge).
    """

    episode: str
    status: str
    error: str | None
    wall_s: float | None
    record: EpisodeRecord | None
    usage: UsageSummary | None
    ledger: dict[str, Any] = field(default_factory=dict)
    cause: str | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any], episode: str) -> EpisodeFile:
        """The file's content; ``episode`` (the file name) stands in for a missing id."""
        wall = d.get("wall_s")
        error = d.get("error")
        return cls(
            episode=d["episode"] if isinstance(d.get("episode"), str) else episode,
            status=_str(d.get("status")),
            error=str(error) if error else None,
            wall_s=_opt_float(wall) if wall is not None else None,
            record=EpisodeRecord.from_json(d.get("record")),
            usage=UsageSummary.from_json(d.get("usage")),
            ledger=_dict(d.get("ledger")),
            cause=_opt_str(d.get("cause")),
        )
