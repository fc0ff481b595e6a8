"""What every method's episode loop shares: the :class:`Method` protocol and its :class:`EpisodeOutput`, request
seeds and sampling settings, the method and episode plumbing (:class:`SettingsMethod`, :class:`KindEpisode`,
:class:`RoundErrors`), timed LLM calls (:class:`Clock`), the routed-edge ledger, and answer extraction. A method
is its own loop over these; its trace records are built with :mod:`toporoute.trace.schema`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .._checks import above, at_least, ints_in
from ..errors import InvalidArgumentError
from ..llm.types import Request, Result, Sampling, Tags
from ..tasks import Task, extract_choice, extract_code, extract_math_answer
from ..trace.schema import EdgeUsage, Graph, Message, RoundRecord, Stats, Timing, Usage
from .options import DOMAINS, check_fields, option

if TYPE_CHECKING:
    from ..runtime import EpisodeContext

__all__ = [
    "DOMAINS",
    "Clock",
    "Emit",
    "EpisodeOutput",
    "KindEpisode",
    "KindSampling",
    "Method",
    "RoundErrors",
    "SamplingSettings",
    "SandboxSettings",
    "SettingsMethod",
    "answer_from",
    "call_error",
    "domain_of",
    "first_answer",
    "one_reply_round",
    "record_edges",
    "request_seed",
]

Emit = Callable[[RoundRecord], None]
"""Receives one trace record per round, as the round finishes."""


@dataclass(frozen=True)
class EpisodeOutput:
    """What a method returns for one task; the harness scores ``answer`` and records the rest.

    ``extra`` holds the method's own JSON-ready blocks of the episode record (e.g. ``{"qmix": {...}}``).
    """

    answer: str
    rounds: int
    halted: bool
    llm_s: float
    routing_s: float
    extra: Mapping[str, Any] = field(default_factory=dict)


class Method(Protocol):
    """What the harness runs: a name, the settings to record, and one episode per task.

    A method may also set ``engine_failures`` (:data:`toporoute.runtime.ENGINE_FAILURE_RULES`): when calls the
    engine gave no reply to end its episode as an error. The default, ``"any"``, ends it at the first such call
    (every method whose rounds build on each other); ``"all"`` only when every call of one ``generate`` failed
    (independent samples: self-consistency, debate). ``sequential = True`` runs its tasks one at a time, in
    order (HiVA's stream mode).
    """

    name: str

    def params(self) -> dict[str, Any]:
        """The settings that determine the results (recorded in run.json; a resumed run must match them)."""
        ...

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        """Runs one task; ``emit`` receives each round's record as the round finishes."""
        ...


def request_seed(seed: int, *parts: Any) -> int:
    """A stable 31-bit seed for one request from the run seed and its coordinates (episode, round, agent)."""
    blob = "\x1f".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "little") & 0x7FFFFFFF


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling fields every method's settings share (each method's dataclass extends this one and may
    change the defaults).

    Parameters
    ----------
    temperature, top_p, max_tokens : sampling of every call.
    seed : int
        Root of every request seed (and of the method's other random choices).
    """

    temperature: float = 0.3
    top_p: float = 1.0
    max_tokens: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        at_least("max_tokens", self.max_tokens, 1)
        at_least("temperature", self.temperature, 0)
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidArgumentError(f"top_p must be in (0, 1]; got {self.top_p}", "top_p")
        check_fields(self)  # the ranges and choices that the fields declare (every subclass's too)

    def params(self) -> dict[str, Any]:
        """The settings as run.json records them: every field, in the order the dataclass declares them."""
        return asdict(self)

    def sampling(
        self,
        episode: str,
        round: int,
        agent: str,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Sampling:
        """The sampling of one call, seeded by (seed, episode, round, agent); ``max_tokens`` and
        ``temperature`` override the settings' (e.g. an orchestrator's own)."""
        return Sampling(
            max_tokens=self.max_tokens if max_tokens is None else max_tokens,
            temperature=self.temperature if temperature is None else temperature,
            top_p=self.top_p,
            seed=request_seed(self.seed, episode, round, agent),
        )


@dataclass(frozen=True)
class SandboxSettings(SamplingSettings):
    """The sampling settings and the limits of the sandboxed runs of a method that runs code (the visible
    examples, a scorer's tests): AgentConductor, HiVA, TacoMAS, self-consistency and debate extend this one.

    Parameters
    ----------
    test_timeout_s : float
        Wall-clock limit of one sandboxed run (> 0; 5 s).
    test_memory_mb : int
        Its address-space limit (64 MB to 1 TB; 1024 MB).
    """

    test_timeout_s: float = option(5.0, name="--eval-timeout", command=True, help="toporoute run's own flag")
    test_memory_mb: int = 1024

    def __post_init__(self) -> None:
        super().__post_init__()
        ints_in({"test_memory_mb": (self.test_memory_mb, 64, 1 << 20)})
        above("test_timeout_s", self.test_timeout_s, 0)

    def params(self) -> dict[str, Any]:
        """As :meth:`SamplingSettings.params`, with the two limits last (where each method recorded them before
        they were shared, so that a resumed run's params and the report's order stay the same)."""
        d = super().params()
        for name in ("test_timeout_s", "test_memory_mb"):
            d[name] = d.pop(name)
        return d


class Recorded(Protocol):
    """Settings that record themselves as a run's params."""

    def params(self) -> dict[str, Any]: ...


_S = TypeVar("_S", bound=Recorded)


class SettingsMethod(Generic[_S]):
    """A method built from one settings object: its ``name`` in the run folder and its ``settings``, recorded
    as the run's params (``{"method": name, **settings.params()}``)."""

    def __init__(self, name: str, settings: _S) -> None:
        self.name = name
        self.settings = settings

    def params(self) -> dict[str, Any]:
        return {"method": self.name, **self.settings.params()}


class KindSampling(Protocol):
    """Settings that sample each kind of call their own way (HiVA's and TacoMAS's ``CALL_KINDS``)."""

    @property
    def guided(self) -> bool:
        """Whether calls send their regular expression (for engines that constrain with one)."""
        ...

    def call(self, kind: str, episode: str, round: int, who: str, /) -> Sampling:
        """The sampling of one call of ``kind`` by ``who`` in ``round``."""
        ...


_K = TypeVar("_K", bound=KindSampling)


class KindEpisode(Generic[_K]):
    """One episode of a method whose calls are sampled by kind (HiVA, TacoMAS): the method's name, its settings
    ``s``, the runtime's context, the task and the trace callback, and the requests and round records built
    from them."""

    def __init__(self, method: str, settings: _K, ctx: EpisodeContext, task: Task, emit: Emit) -> None:
        self.method, self.s, self.ctx, self.task, self.emit = method, settings, ctx, task, emit

    def request(
        self,
        kind: str,
        t: int,
        who: str,
        system: str | None,
        user: str,
        *,
        schema: dict[str, Any] | None = None,
        regex: str | None = None,
    ) -> Request:
        """A call of ``kind`` by ``who`` in round ``t``, sampled as the settings say for its kind; ``regex`` is
        sent only when the settings are ``guided``."""
        return Request.chat(
            system,
            user,
            sampling=self.s.call(kind, self.ctx.episode, t, who),
            tags=Tags(round=t, agent=who, role=kind),
            schema=schema,
            regex=regex if self.s.guided else None,
        )

    def record(
        self,
        t: int,
        graph: Graph,
        messages: dict[str, Message],
        usage: Usage,
        timing: Timing,
        extra: dict[str, Any],
    ) -> RoundRecord:
        """Round ``t``'s trace record (the method's own block in ``extra``)."""
        return RoundRecord(
            method=self.method,
            episode=self.ctx.episode,
            task=self.task.id,
            round=t,
            graph=graph,
            messages=messages,
            usage=usage,
            timing=timing,
            extra=extra,
        )


@dataclass
class RoundErrors:
    """The errors a round records in its trace (a failed call, an output that could not be read), each with the
    agent and the step it concerns."""

    errors: list[dict[str, Any]] = field(default_factory=list)

    def error(self, agent: str, step: str, message: str) -> None:
        self.errors.append({"agent": agent, "step": step, "error": message})


class Clock:
    """Times an episode or one of its rounds: wall time since it started, LLM calls made through it
    (:meth:`generate`) and routing work inside :meth:`routing`. A round's clock (:meth:`round`) adds its parts
    to the episode's totals as well."""

    def __init__(self, parent: Clock | None = None) -> None:
        self._parent = parent
        self._start = time.perf_counter()
        self.llm_s = 0.0
        self.routing_s = 0.0

    def round(self) -> Clock:
        """A clock for the next round, started now."""
        return Clock(self)

    async def generate(self, ctx: EpisodeContext, requests: Sequence[Request]) -> list[Result]:
        """``ctx.generate(requests)``, its wall time counted as LLM time."""
        t0 = time.perf_counter()
        results = await ctx.generate(requests)
        self._add(time.perf_counter() - t0, 0.0)
        return results

    async def generate_one(self, ctx: EpisodeContext, request: Request) -> Result:
        return (await self.generate(ctx, [request]))[0]

    @contextmanager
    def routing(self) -> Iterator[None]:
        """Counts the block's wall time as routing time."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._add(0.0, time.perf_counter() - t0)

    def _add(self, llm_s: float, routing_s: float) -> None:
        self.llm_s += llm_s
        self.routing_s += routing_s
        if self._parent is not None:
            self._parent._add(llm_s, routing_s)

    def timing(self) -> Timing:
        """The timing block, as of now."""
        return Timing(time.perf_counter() - self._start, self.llm_s, self.routing_s)


def call_error(result: Result | None) -> str | None:
    """The error message of a failed call (None for a call that succeeded, or was not made)."""
    if result is None or result.ok:
        return None
    return result.error.message if result.error else "failed"


def record_edges(ctx: EpisodeContext, round: int, edges: Iterable[EdgeUsage]) -> list[EdgeUsage]:
    """Adds each routed message to the episode's ledger and returns them (the round's ``usage.edges``)."""
    out = list(edges)
    for e in out:
        ctx.ledger.add_edge(round, e.src, e.dst, e.tokens)
    return out


def domain_of(task: Task, domains: Sequence[str] = DOMAINS) -> str:
    """The task's domain (its kind) when the method solves it, or an error naming the task and its kind.

    ``domains`` are the kinds the method solves (default :data:`DOMAINS`: code and math).
    """
    if task.kind not in domains:
        raise InvalidArgumentError(
            f"task {task.id!r}: this method solves {' and '.join(domains)} tasks; got kind {task.kind!r}",
            "task",
        )
    return task.kind


def answer_from(task: Task, text: str) -> str:
    """The answer in one reply: the code for the task's entry point, the math answer, or the chosen option's
    letter ("" when none)."""
    if task.kind == "code":
        return extract_code(text, task.entry_point) or ""
    if task.kind == "choice" and task.choices is not None:
        return extract_choice(text, len(task.choices)) or ""
    return extract_math_answer(text) or ""


def first_answer(task: Task, texts: Iterable[str]) -> str:
    """The answer of the first of ``texts`` that holds one ("" when none does)."""
    for text in texts:
        if text:
            found = answer_from(task, text)
            if found:
                return found
    return ""


def one_reply_round(
    method: str,
    episode: str,
    task: Task,
    round: int,
    goal: str,
    agent: str,
    result: Result,
    message: Message,
    timing: Timing,
) -> RoundRecord:
    """The record of a round made of one agent's one reply (a one-node graph, no routing): the single-call
    baselines' rounds and self-refine's first answer."""
    return RoundRecord(
        method=method,
        episode=episode,
        task=task.id,
        round=round,
        goal=goal,
        graph=Graph.build([agent], [agent], [], order=[0], levels=[0], is_dag=True, inbox=[[]]),
        messages={agent: message},
        usage=Usage.of([(agent, result)]),
        stats=Stats(0, 0.0, 0.0),
        timing=timing,
    )
