"""A run directory as OpenTelemetry traces (``toporoute export-otel RUN_DIR``; extra ``otel``).

Each episode becomes one trace whose spans follow the OpenTelemetry GenAI semantic conventions, so Jaeger,
Phoenix, Langfuse or any OTLP backend shows a toporoute run without custom code::

    invoke_workflow dytopo      the episode: INTERNAL, gen_ai.operation.name "invoke_workflow",
    |                           gen_ai.workflow.name the method
    +- round 0                  one round (a turn, for AgentConductor): INTERNAL, the routed graph
    |  +- chat <model>          one LLM call (its re-prompts included): CLIENT, gen_ai.operation.name "chat",
    |  +- chat <model>          gen_ai.agent.name the caller, gen_ai.usage.input_tokens / output_tokens
    +- round 1 ...

Every span carries ``gen_ai.conversation.id`` (``<method>/<episode>``). A call span has ``gen_ai.provider.name``
and its predecessor ``gen_ai.system`` (the engine: ``vllm``, ``openai``, ``replay``, ...), ``gen_ai.request.model``
and ``toporoute.attempts``; a call with no valid reply has status ERROR and ``error.type`` ``invalid_reply`` (its
reply did not parse) or ``_OTHER``. A round span has the routed graph: ``toporoute.edges`` (``"src->dst"``, with
``toporoute.edge_scores`` where the topology is scored and ``toporoute.edge_kinds`` where edges have kinds),
``toporoute.removed``, ``toporoute.order``, ``toporoute.levels``, ``toporoute.is_dag``, the messages that were
delivered (``toporoute.routed`` and their sizes ``toporoute.routed_tokens``), the graph statistics, the timings
and the round's token totals. The episode span has the task, its status and score, and the episode's totals;
an episode that ended with an error has status ERROR and ``error.type`` the exception's class. Totals sit under
``toporoute.usage.*``, never ``gen_ai.usage.*``, so a backend that sums token usage counts each call once.

Times. The trace files record durations, not clock times: each episode's wall time, each round's ``round_s`` and
each call's ``latency_s``. The export anchors an episode at the modification time of its episode file (written
when the episode ended; for an episode with a trace and no episode file yet, its trace file, written when its last
round ended) and derives the rest: the episode starts its wall time earlier; its rounds follow one another from
there, each lasting its ``round_s`` (the scoring after the last round fills the rest of the episode); a round's
calls start in the order the record lists them, those of a wave together (the record's ``waves``, TacoMAS's
``tacomas.waves`` or AgentConductor's ``layers``; otherwise the agents that wrote a message this round form one
wave, as one batched call), each wave after the previous one's longest call, and every other call (a manager, an
orchestrator, a judge) on its own, one after another. A layout that would not fit in the round's wall time starts
every call at the round's start instead. So every call lies inside its round and every round inside its episode,
with its recorded duration, but the calls' start times are derived, not measured. A folder copied without its
modification times (``cp`` without ``-p``, a git checkout) shows the time of the copy.

Content. By default no model text leaves the machine: names (methods, tasks, agents, roles, the model), counts,
edges, scores and times only. ``include_content=True`` adds each call's reply as ``gen_ai.output.messages``
(the public and the private message, as text parts), its parse error, the round's goal, descriptors and the
manager's next goal, the episode's answer and its error message. The trace files hold no prompts, so
``gen_ai.input.messages`` is never set.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

try:
    from opentelemetry import trace as otel
    from opentelemetry.context import Context
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        ConsoleSpanExporter,
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON
    from opentelemetry.util.types import AttributeValue
except ImportError as exc:
    raise ImportError(
        f"exporting OpenTelemetry traces needs the otel extra ({exc}): pip install 'toporoute[otel]'"
    ) from exc

from .._info import package_version
from ..errors import InvalidArgumentError, ToporouteError
from .reader import MethodRun, RunData, label, load_run, natural_key
from .schema import CallUsage, EpisodeFile, RoundRecord

__all__ = ["ExportCounts", "ExportError", "call_offsets", "emit_run", "export_run", "make_exporter"]

# GenAI semantic conventions (https://github.com/open-telemetry/semantic-conventions-genai); written out here
# because opentelemetry-semantic-conventions marks its copies deprecated since they moved there
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # gen_ai.provider.name's predecessor, which older backends read
MODEL = "gen_ai.request.model"
AGENT = "gen_ai.agent.name"
AGENT_DESCRIPTION = "gen_ai.agent.description"
CONVERSATION = "gen_ai.conversation.id"
WORKFLOW = "gen_ai.workflow.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"

_BATCH = 512  # spans per OTLP request
_HTTP_PORT, _GRPC_PORT = 4318, 4317


class ExportError(ToporouteError, RuntimeError):
    """The exporter did not take the spans (the collector is unreachable or refused them)."""


@dataclass(frozen=True)
class ExportCounts:
    """How many spans of each kind an export made."""

    episodes: int = 0
    rounds: int = 0
    calls: int = 0

    @property
    def spans(self) -> int:
        return self.episodes + self.rounds + self.calls

    def __add__(self, other: ExportCounts) -> ExportCounts:
        return ExportCounts(
            self.episodes + other.episodes, self.rounds + other.rounds, self.calls + other.calls
        )


# ------------------------------------------------------------------------------------------------- the spans


def emit_run(
    run: RunData | str | os.PathLike[str], tracer: otel.Tracer, *, include_content: bool = False
) -> ExportCounts:
    """Starts and ends, through ``tracer``, the spans of every episode of a run directory (see the module
    docstring for their names, attributes and times).

    Parameters
    ----------
    run : RunData or path
        A loaded run, or a run directory / method folder (:func:`~toporoute.trace.reader.load_run`).
    tracer : opentelemetry.trace.Tracer
        Any tracer: the spans go to its provider's processors (e.g. a backend's own ``register()``).
    include_content : bool
        Also set model text (replies, descriptors, goals, answers, error messages). Default off.

    Returns
    -------
    ExportCounts
    """
    data = run if isinstance(run, RunData) else load_run(run)
    counts = ExportCounts()
    for method_run in data.methods:
        counts += _Method(method_run, tracer, include_content).emit()
    return counts


class _Method:
    """The spans of one method folder."""

    def __init__(self, run: MethodRun, tracer: otel.Tracer, content: bool) -> None:
        self.run, self.tracer, self.content = run, tracer, content
        config = run.config
        self.method = str(config.get("method") or run.name)
        self.model = label(config.get("model"))
        self.engine = _provider(label(config.get("engine")))
        self.started = config.get("started") if isinstance(config.get("started"), str) else None

    def emit(self) -> ExportCounts:
        files = {e.episode: e for e in self.run.episodes}
        counts = ExportCounts()
        for episode in sorted(set(files) | set(self.run.traces), key=natural_key):
            counts += self._episode(episode, files.get(episode), self.run.traces.get(episode, []))
        return counts

    def _episode(self, episode: str, file: EpisodeFile | None, rounds: list[RoundRecord]) -> ExportCounts:
        conversation = f"{self.method}/{episode}"
        durations = [_round_ns(r) for r in rounds]
        start, end = self._window(episode, file, sum(durations))
        span = self.tracer.start_span(
            f"invoke_workflow {self.method}",
            kind=otel.SpanKind.INTERNAL,
            attributes=self._episode_attrs(episode, conversation, file, rounds),
            start_time=start,
        )
        if file is not None and file.status == "error":
            kind, cause = _error_kind(file)
            span.set_attribute(ERROR_TYPE, kind or "_OTHER")
            shown = (
                cause if self.content and cause else f"the episode ended with an error ({kind or 'no cause'})"
            )
            span.set_status(otel.Status(otel.StatusCode.ERROR, shown))
        parent = otel.set_span_in_context(span)
        counts = ExportCounts(episodes=1)
        at = start
        for rec, duration in zip(rounds, durations):
            counts += self._round(rec, conversation, parent, at, duration)
            at += duration
        span.end(end_time=max(end, at))
        return counts

    def _episode_attrs(
        self, episode: str, conversation: str, file: EpisodeFile | None, rounds: list[RoundRecord]
    ) -> dict[str, AttributeValue]:
        record = file.record if file is not None else None
        usage = file.usage if file is not None else None
        attrs: dict[str, AttributeValue] = {
            OPERATION: "invoke_workflow",
            WORKFLOW: self.method,
            CONVERSATION: conversation,
            "toporoute.method": self.method,
            "toporoute.episode": episode,
            "toporoute.status": file.status if file is not None else "partial",
        }
        task = (record.task if record is not None else "") or (rounds[0].task if rounds else "")
        _put(attrs, "toporoute.task", task or None)
        _put(attrs, "toporoute.model", self.model or None)
        _put(attrs, "toporoute.engine", self.engine or None)
        _put(attrs, "toporoute.run.started", self.started)
        _put(attrs, "toporoute.wall_s", file.wall_s if file is not None else None)
        if record is not None:
            passed = record.score.get("passed")
            _put(attrs, "toporoute.passed", passed if isinstance(passed, bool) else None)
            _put(attrs, "toporoute.score.status", _opt_str(record.score.get("status")))
            attrs.update(
                {
                    "toporoute.rounds": record.rounds,
                    "toporoute.halted": record.halted,
                    "toporoute.llm_s": record.llm_s,
                    "toporoute.routing_s": record.routing_s,
                    "toporoute.eval_s": record.eval_s,
                }
            )
            if self.content:
                _put(attrs, "toporoute.answer", record.answer or None)
        if usage is not None:
            attrs.update(
                {
                    "toporoute.usage.prompt_tokens": usage.prompt_tokens,
                    "toporoute.usage.completion_tokens": usage.completion_tokens,
                    "toporoute.usage.calls": usage.calls,
                    "toporoute.usage.failed_calls": usage.failed_calls,
                    "toporoute.usage.reprompts": usage.reprompts,
                    "toporoute.usage.messages_routed": usage.messages_routed,
                    "toporoute.usage.tokens_routed": usage.tokens_routed,
                }
            )
        return attrs

    def _window(self, episode: str, file: EpisodeFile | None, rounds_ns: int) -> tuple[int, int]:
        """The episode's start and end (ns since the epoch): it ends when its file was last written."""
        anchor = self.run.dir / ("episodes" if file is not None else "traces")
        end = _mtime_ns(anchor / (f"{episode}.json" if file is not None else f"{episode}.jsonl"))
        wall = _ns(file.wall_s) if file is not None and file.wall_s is not None else 0
        return end - max(wall, rounds_ns), end

    def _round(
        self, rec: RoundRecord, conversation: str, parent: Context, start: int, duration: int
    ) -> ExportCounts:
        graph = rec.graph
        attrs: dict[str, AttributeValue] = {
            CONVERSATION: conversation,
            "toporoute.round": rec.round,
            "toporoute.agents": list(graph.agents),
            "toporoute.roles": list(graph.roles),
            "toporoute.edges": [f"{e.src}->{e.dst}" for e in graph.edges],
            "toporoute.edge_count": rec.edge_count,
            "toporoute.density": rec.density,
            "toporoute.removed": [f"{e.src}->{e.dst}" for e in graph.removed],
            "toporoute.order": list(graph.order),
            "toporoute.levels": list(graph.levels),
            "toporoute.routed": [f"{e.src}->{e.dst}" for e in rec.usage.edges],
            "toporoute.routed_tokens": [e.tokens for e in rec.usage.edges],
            "toporoute.usage.prompt_tokens": sum(u.prompt_tokens for u in rec.usage.agents.values()),
            "toporoute.usage.completion_tokens": sum(u.completion_tokens for u in rec.usage.agents.values()),
            "toporoute.usage.calls": len(rec.usage.agents),
        }
        scores = [e.score for e in graph.edges]
        if graph.edges and all(s is not None for s in scores):
            attrs["toporoute.edge_scores"] = [float(s) for s in scores if s is not None]
        kinds = [e.kind for e in graph.edges]
        if graph.edges and all(k is not None for k in kinds):
            attrs["toporoute.edge_kinds"] = [str(k) for k in kinds]
        _put(attrs, "toporoute.is_dag", graph.is_dag)
        if rec.stats is not None:
            attrs["toporoute.reciprocity"] = rec.stats.reciprocity
            _put(attrs, "toporoute.jaccard_similarity_prev", rec.stats.jaccard_similarity_prev)
        if rec.timing is not None:
            attrs.update(
                {
                    "toporoute.round_s": rec.timing.round_s,
                    "toporoute.llm_s": rec.timing.llm_s,
                    "toporoute.routing_s": rec.timing.routing_s,
                }
            )
        if rec.manager is not None:
            attrs["toporoute.manager.is_complete"] = rec.manager.is_complete
        if self.content:
            _put(attrs, "toporoute.goal", rec.goal)
            if rec.descriptors is not None:
                attrs["toporoute.descriptors.query"] = list(rec.descriptors.query)
                attrs["toporoute.descriptors.key"] = list(rec.descriptors.key)
            if rec.manager is not None:
                attrs["toporoute.manager.next_goal"] = rec.manager.next_goal
        span = self.tracer.start_span(
            f"round {rec.round}",
            context=parent,
            kind=otel.SpanKind.INTERNAL,
            attributes=attrs,
            start_time=start,
        )
        inner = otel.set_span_in_context(span)
        roles = dict(zip(graph.agents, graph.roles))
        offsets = call_offsets(rec, duration)
        for name, call in rec.usage.agents.items():
            begin = start + offsets[name]
            self._call(rec, name, call, roles.get(name), conversation, inner, begin, start + duration)
        span.end(end_time=start + duration)
        return ExportCounts(rounds=1, calls=len(rec.usage.agents))

    def _call(
        self,
        rec: RoundRecord,
        name: str,
        call: CallUsage,
        role: str | None,
        conversation: str,
        parent: Context,
        start: int,
        round_end: int,
    ) -> None:
        attrs: dict[str, AttributeValue] = {OPERATION: "chat"}
        if self.engine:
            attrs[PROVIDER] = attrs[SYSTEM] = self.engine
        _put(attrs, MODEL, self.model or None)
        attrs.update(
            {
                AGENT: name,
                CONVERSATION: conversation,
                INPUT_TOKENS: call.prompt_tokens,
                OUTPUT_TOKENS: call.completion_tokens,
                "toporoute.round": rec.round,
                "toporoute.attempts": call.attempts,
                "toporoute.latency_s": call.latency_s,
            }
        )
        _put(attrs, AGENT_DESCRIPTION, role or None)
        message = rec.messages.get(name)
        parse_error = message.parse_error if message is not None else None
        if name == _manager_name(rec) and rec.manager is not None:
            parse_error = rec.manager.parse_error
        if self.content:
            parts = _reply_parts(rec, name)
            if parts:
                reply = {"role": "assistant", "parts": parts, "finish_reason": "stop" if call.ok else "error"}
                attrs[OUTPUT_MESSAGES] = json.dumps([reply], ensure_ascii=False)
            _put(attrs, "toporoute.parse_error", parse_error)
        span = self.tracer.start_span(
            f"chat {self.model}" if self.model else "chat",
            context=parent,
            kind=otel.SpanKind.CLIENT,
            attributes=attrs,
            start_time=start,
        )
        if not call.ok:
            span.set_attribute(ERROR_TYPE, "invalid_reply" if parse_error else "_OTHER")
            shown = parse_error if self.content and parse_error else None
            span.set_status(
                otel.Status(
                    otel.StatusCode.ERROR, shown or f"no valid reply after {call.attempts} attempt(s)"
                )
            )
        span.end(end_time=min(start + _ns(call.latency_s), round_end))


def call_offsets(rec: RoundRecord, round_ns: int) -> dict[str, int]:
    """When each call of a round starts, in ns after the round's start (derived; see the module docstring).

    Parameters
    ----------
    rec : RoundRecord
        Its ``usage.agents`` lists the calls in the order they were made.
    round_ns : int
        The round's wall time; a layout longer than it starts every call at 0.

    Returns
    -------
    dict of str to int
        By call name (the keys of ``rec.usage.agents``).
    """
    calls = rec.usage.agents
    wave_of = {name: i for i, wave in enumerate(_waves(rec)) for name in wave}
    offsets: dict[str, int] = {}
    at = 0
    pending: dict[int, list[str]] = {}

    def flush() -> None:
        nonlocal at
        for i in sorted(pending):
            for name in pending[i]:
                offsets[name] = at
            at += max(_ns(calls[name].latency_s) for name in pending[i])
        pending.clear()

    for name, call in calls.items():
        if name in wave_of:
            pending.setdefault(wave_of[name], []).append(name)
        else:
            flush()
            offsets[name] = at
            at += _ns(call.latency_s)
    flush()
    return offsets if at <= round_ns else dict.fromkeys(calls, 0)


def _waves(rec: RoundRecord) -> list[list[str]]:
    """The round's waves of agents that ran together: as recorded, else the agents with a message."""
    tacomas = rec.extra.get("tacomas")
    recorded = (
        rec.extra.get("waves"),
        tacomas.get("waves") if isinstance(tacomas, dict) else None,
        rec.extra.get("layers"),
    )
    for waves in recorded:
        if isinstance(waves, list) and waves and all(isinstance(w, list) for w in waves):
            return [[str(n) for n in w] for w in waves]
    return [[n for n in rec.messages if n in rec.usage.agents]]


def _manager_name(rec: RoundRecord) -> str | None:
    """The call that made the round's manager decision: the last call without a message of its own."""
    if rec.manager is None:
        return None
    others = [n for n in rec.usage.agents if n not in rec.messages]
    return others[-1] if others else None


def _reply_parts(rec: RoundRecord, name: str) -> list[dict[str, str]]:
    message = rec.messages.get(name)
    if message is not None:
        texts = [message.public, message.private]
    elif name == _manager_name(rec) and rec.manager is not None:
        texts = [rec.manager.public]
    else:
        texts = []
    return [{"type": "text", "content": t} for t in texts if t]


# ------------------------------------------------------------------------------------------------ the export


def export_run(
    run: RunData | str | os.PathLike[str],
    exporter: SpanExporter,
    *,
    service_name: str | None = None,
    include_content: bool = False,
) -> ExportCounts:
    """Builds the spans of a run directory (:func:`emit_run`) and hands them to ``exporter``, then shuts it down.

    Parameters
    ----------
    run : RunData or path
    exporter : SpanExporter
        E.g. from :func:`make_exporter`, or the SDK's ``InMemorySpanExporter``.
    service_name : str, optional
        The resource's ``service.name``. Default: ``$OTEL_SERVICE_NAME``, else ``toporoute``.
    include_content : bool
        See :func:`emit_run`.

    Returns
    -------
    ExportCounts

    Raises
    ------
    ExportError
        The exporter did not take a batch of spans (what it logged says why).
    """
    resource = Resource.create(
        {
            "service.name": service_name or os.environ.get("OTEL_SERVICE_NAME") or "toporoute",
            "service.version": package_version("toporoute") or "unknown",
        }
    )
    collected = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON, resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(collected))
    try:
        tracer = provider.get_tracer("toporoute", package_version("toporoute"))
        counts = emit_run(run, tracer, include_content=include_content)
        spans: Sequence[ReadableSpan] = collected.get_finished_spans()
    finally:
        provider.shutdown()
    try:
        for i in range(0, len(spans), _BATCH):
            if exporter.export(spans[i : i + _BATCH]) is not SpanExportResult.SUCCESS:
                raise ExportError(
                    f"the exporter refused them ({i} of {len(spans)} sent); its log message above says why"
                )
    finally:
        exporter.shutdown()
    return counts


def make_exporter(
    endpoint: str | None = None,
    *,
    protocol: str = "http",
    timeout_s: float = 10.0,
    console: bool = False,
    environ: Mapping[str, str] | None = None,
) -> tuple[SpanExporter, str]:
    """An OTLP span exporter and where it sends.

    Parameters
    ----------
    endpoint : str, optional
        ``http://`` or ``https://`` URL of the collector. ``http``: ``/v1/traces`` is appended unless the path
        ends with it (``http://localhost:4318``, Phoenix's ``http://localhost:6006/v1/traces``, Langfuse's
        ``https://cloud.langfuse.com/api/public/otel``); ``grpc``: used as is. Default:
        ``$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (as is), ``$OTEL_EXPORTER_OTLP_ENDPOINT`` (as ``endpoint``),
        else localhost on the protocol's port (4318, 4317).
    protocol : {"http", "grpc"}
        OTLP over HTTP with protobuf, or over gRPC (needs ``opentelemetry-exporter-otlp-proto-grpc``).
    timeout_s : float
        Per request, retries included.
    console : bool
        Print the spans as JSON on stdout instead (``endpoint`` and ``protocol`` unused).
    environ : mapping, optional
        Where the ``OTEL_*`` settings are read (default ``os.environ``). Headers (an API key) come from
        ``OTEL_EXPORTER_OTLP_HEADERS`` / ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``, read by the exporter itself.

    Returns
    -------
    (SpanExporter, str)
        The exporter and the URL it sends to (``"stdout"`` for ``console``).
    """
    if console:
        return ConsoleSpanExporter(out=sys.stdout), "stdout"
    if protocol not in ("http", "grpc"):
        raise InvalidArgumentError(f"protocol must be 'http' or 'grpc'; got {protocol!r}", "protocol")
    env = os.environ if environ is None else environ
    if endpoint is None and env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        url = env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]  # the signal's own URL, used as is (the OTLP spec)
    else:
        port = _HTTP_PORT if protocol == "http" else _GRPC_PORT
        source = "endpoint" if endpoint is not None else "OTEL_EXPORTER_OTLP_ENDPOINT"
        url = endpoint or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or f"http://localhost:{port}"
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidArgumentError(
                f"{source} must be an http:// or https:// URL, e.g. http://localhost:{_HTTP_PORT}; got {url!r}",
                "endpoint",
            )
        if protocol == "http" and not parts.path.rstrip("/").endswith("/v1/traces"):
            url = url.rstrip("/") + "/v1/traces"
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=url, timeout=timeout_s), url
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
    except ImportError as exc:
        raise ToporouteError(
            f"OTLP over gRPC needs opentelemetry-exporter-otlp-proto-grpc ({exc}): "
            "pip install opentelemetry-exporter-otlp-proto-grpc, or use the http protocol",
            "protocol",
        ) from exc
    return GrpcExporter(endpoint=url, timeout=timeout_s), url


# --------------------------------------------------------------------------------------------------- helpers


def _provider(engine: str) -> str:
    """gen_ai.provider.name from run.json's engine: ``vllm``, ``openai``, ``replay``; an engine class's name
    (a run started from Python) without its ``Engine`` suffix, lower-cased."""
    name = engine.strip().lower()
    return name[: -len("engine")] if name.endswith("engine") and len(name) > len("engine") else name


def _error_kind(file: EpisodeFile) -> tuple[str, str]:
    """An errored episode's exception class (``""`` when unknown) and its one-line cause."""
    # files written before ``cause`` have the traceback only, whose last line is the same
    lines = [x.strip() for x in (file.error or "").splitlines() if x.strip()]
    cause = file.cause or (lines[-1] if lines else "")
    kind = cause.split(":", 1)[0].strip() if ":" in cause else ""
    return (kind if all(part.isidentifier() for part in kind.split(".")) else ""), cause


def _round_ns(rec: RoundRecord) -> int:
    """A round's wall time in ns; a record without timing lasts as long as its calls laid out."""
    if rec.timing is not None:
        return _ns(rec.timing.round_s)
    offsets = call_offsets(rec, sys.maxsize)
    return max((offsets[n] + _ns(u.latency_s) for n, u in rec.usage.agents.items()), default=0)


def _ns(seconds: float) -> int:
    return max(0, round(seconds * 1e9))


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:  # gone since the run was read: now is the best guess
        return time.time_ns()


def _put(attrs: dict[str, AttributeValue], key: str, value: AttributeValue | None) -> None:
    """Sets ``key`` unless ``value`` is None (OpenTelemetry attributes have no null)."""
    if value is not None:
        attrs[key] = value


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
