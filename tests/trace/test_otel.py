"""``toporoute export-otel`` and :mod:`toporoute.trace.otel`: a run directory as OpenTelemetry spans named by the
GenAI semantic conventions, checked with the SDK's in-memory exporter, on a scripted DyTopo run, the fabricated
run of the report tests (an errored and an unfinished episode), the recorded v1 run, and over OTLP/HTTP to a
collector on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from _paths import DATA
from _procs import run_python
from _runs import make_run
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from test_methods import MATH, TASK, team_engine

from toporoute.cli import main
from toporoute.errors import InvalidArgumentError
from toporoute.llm import Structured
from toporoute.methods import make_method
from toporoute.methods.harness import run_method
from toporoute.trace.otel import ExportCounts, ExportError, call_offsets, emit_run, export_run, make_exporter
from toporoute.trace.schema import CallUsage, Graph, Message, RoundRecord, Usage

END_NS = 1_800_000_000_000_000_000  # when the episodes' files were written (set with os.utime)
MODEL = "my-model"


def _spans(run: Any, *, include_content: bool = False) -> tuple[ExportCounts, list[ReadableSpan]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    counts = emit_run(run, provider.get_tracer("test"), include_content=include_content)
    return counts, list(exporter.get_finished_spans())


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory, encoder) -> Path:
    """DyTopo (its Tester never answers valid JSON) and single on a code and a math task, as `toporoute run`
    writes them, each episode file dated END_NS + i seconds."""
    root = tmp_path_factory.mktemp("otel") / "run"
    info = {"tasks": "inline", "engine": "openai", "model": MODEL}

    async def go() -> None:
        for method in (make_method("dytopo", encoder=encoder), make_method("single")):
            engine = Structured(team_engine(done_at=2, broken={"Tester"}))
            await run_method(method, [TASK, MATH], engine, root / method.name, info=info, progress=False)

    asyncio.run(go())
    for i, file in enumerate(sorted(root.glob("*/episodes/*.json"))):
        os.utime(file, ns=(END_NS + i * 10**9, END_NS + i * 10**9))
    return root


def test_one_trace_per_episode_with_a_span_per_round_and_call(scripted: Path) -> None:
    counts, spans = _spans(scripted)
    episodes = sorted(scripted.glob("*/episodes/*.json"))
    traces = {p.parent.parent.name + "/" + p.stem: _lines(p) for p in scripted.glob("*/traces/*.jsonl")}
    calls = sum(json.loads(p.read_text())["usage"]["calls"] for p in episodes)
    assert counts == ExportCounts(len(episodes), sum(len(t) for t in traces.values()), calls)
    assert len(spans) == counts.spans
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == len(episodes) and len({s.context.trace_id for s in roots}) == len(roots)
    for root in roots:
        method, episode = root.attributes["toporoute.method"], root.attributes["toporoute.episode"]
        assert root.name == f"invoke_workflow {method}" and root.kind is SpanKind.INTERNAL
        assert root.attributes["gen_ai.operation.name"] == "invoke_workflow"
        assert root.attributes["gen_ai.workflow.name"] == method
        assert root.attributes["gen_ai.conversation.id"] == f"{method}/{episode}"
        saved = json.loads((scripted / method / "episodes" / f"{episode}.json").read_text())
        assert root.attributes["toporoute.status"] == "ok"
        assert root.attributes["toporoute.passed"] is saved["record"]["score"]["passed"]
        assert root.attributes["toporoute.usage.prompt_tokens"] == saved["usage"]["prompt_tokens"]
        rounds = _children(spans, root)
        trace = traces[f"{method}/{episode}"]
        assert [r.name for r in rounds] == [f"round {rec['round']}" for rec in trace]
        for span, rec in zip(rounds, trace):
            assert span.context.trace_id == root.context.trace_id
            assert span.attributes["toporoute.edges"] == tuple(
                f"{e['src']}->{e['dst']}" for e in rec["edges"]
            )
            assert span.attributes["toporoute.removed"] == tuple(
                f"{e['src']}->{e['dst']}" for e in rec["removed"]
            )
            assert span.attributes["toporoute.routed"] == tuple(
                f"{e['src']}->{e['dst']}" for e in rec["usage"]["edges"]
            )
            if rec["edges"] and rec["scores"] is not None:
                assert span.attributes["toporoute.edge_scores"] == tuple(e["score"] for e in rec["edges"])
            calls = _children(spans, span)
            assert {
                c.attributes["gen_ai.agent.name"]: c.attributes["gen_ai.usage.input_tokens"] for c in calls
            } == {name: u["prompt_tokens"] for name, u in rec["usage"]["agents"].items()}
            for call in calls:
                usage = rec["usage"]["agents"][call.attributes["gen_ai.agent.name"]]
                assert call.name == f"chat {MODEL}" and call.kind is SpanKind.CLIENT
                assert call.attributes["gen_ai.operation.name"] == "chat"
                assert call.attributes["gen_ai.request.model"] == MODEL
                assert call.attributes["gen_ai.provider.name"] == call.attributes["gen_ai.system"] == "openai"
                assert call.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
                assert call.attributes["toporoute.attempts"] == usage["attempts"]
                assert (call.status.status_code is StatusCode.ERROR) is (not usage["ok"])


def test_dytopo_routing_and_a_failing_agent(scripted: Path) -> None:
    _, spans = _spans(scripted / "dytopo")
    rounds = [s for s in spans if s.name.startswith("round ")]
    assert any(r.attributes["toporoute.edges"] for r in rounds)  # descriptors were routed
    assert all(
        len(r.attributes["toporoute.edge_scores"]) == len(r.attributes["toporoute.edges"]) for r in rounds
    )
    tester = [s for s in spans if s.attributes.get("gen_ai.agent.name") == "Tester"]
    assert tester and all(s.status.status_code is StatusCode.ERROR for s in tester)
    assert all(s.attributes["error.type"] == "invalid_reply" for s in tester)
    assert all(s.attributes["toporoute.attempts"] == 3 for s in tester)  # two re-prompts
    developer = next(s for s in spans if s.attributes.get("gen_ai.agent.name") == "Developer")
    assert developer.attributes["gen_ai.agent.description"] == "Code Developer"
    assert developer.status.status_code is StatusCode.UNSET


def test_times_come_from_the_files_and_the_recorded_durations(scripted: Path) -> None:
    _, spans = _spans(scripted / "dytopo")
    for root in (s for s in spans if s.parent is None):
        file = scripted / "dytopo" / "episodes" / f"{root.attributes['toporoute.episode']}.json"
        saved = json.loads(file.read_text())
        assert root.end_time == file.stat().st_mtime_ns
        assert root.end_time - root.start_time == round(saved["wall_s"] * 1e9)
        trace = _lines(scripted / "dytopo" / "traces" / f"{root.attributes['toporoute.episode']}.jsonl")
        at = root.start_time
        for span, rec in zip(_children(spans, root), trace):  # back to back from the episode's start
            assert (span.start_time, span.end_time) == (at, at + round(rec["timing"]["round_s"] * 1e9))
            at = span.end_time
            calls = {c.attributes["gen_ai.agent.name"]: c for c in _children(spans, span)}
            for name, call in calls.items():
                assert span.start_time <= call.start_time <= call.end_time <= span.end_time
                assert call.end_time - call.start_time <= round(
                    rec["usage"]["agents"][name]["latency_s"] * 1e9
                )
            workers = [c for n, c in calls.items() if n != "Manager"]
            assert {c.start_time for c in workers} == {span.start_time}  # one batched call
            if "Manager" in calls:  # the manager reads the workers' messages: it starts after them
                assert calls["Manager"].start_time >= max(c.end_time for c in workers)
        assert at <= root.end_time


def test_no_model_text_unless_asked(scripted: Path) -> None:
    texts: set[str] = set()
    for path in scripted.glob("*/traces/*.jsonl"):
        for rec in _lines(path):
            texts.update(m[k] for m in rec["messages"].values() for k in ("public", "private") if m[k])
            texts.update(
                rec["descriptors"]["query"] + rec["descriptors"]["key"] if rec["descriptors"] else []
            )
            texts.update([rec["goal"]] if rec["goal"] else [])
            texts.update([rec["manager"]["next_goal"], rec["manager"]["public"]] if rec["manager"] else [])
    for path in scripted.glob("*/episodes/*.json"):
        texts.add(json.loads(path.read_text())["record"]["answer"])
    texts = {t for t in texts if len(t) > 24}  # not an agent's name that a scripted agent says as its message
    assert len(texts) > 10

    def values(spans: list[ReadableSpan]) -> set[str]:
        out = set()
        for s in spans:
            out.add(s.status.description or "")
            for key, v in s.attributes.items():
                out.update(str(x) for x in (v if isinstance(v, tuple) else (v,)))
                if key == "gen_ai.output.messages":  # JSON: its texts are escaped
                    out.update(p["content"] for m in json.loads(str(v)) for p in m["parts"])
        return out

    _, spans = _spans(scripted)
    leaked = {t for t in texts for v in values(spans) if t in v}
    assert leaked == set()

    _, spans = _spans(scripted, include_content=True)
    shown = " ".join(values(spans))
    assert {t for t in texts if t not in shown} == set()
    trace = _lines(scripted / "dytopo" / "traces" / "demo-add.jsonl")
    call = next(
        s
        for s in spans
        if s.attributes.get("gen_ai.agent.name") == "Developer"
        and s.attributes["gen_ai.conversation.id"] == "dytopo/demo-add"
        and s.attributes["toporoute.round"] == 0
    )
    (reply,) = json.loads(call.attributes["gen_ai.output.messages"])
    message = trace[0]["messages"]["Developer"]
    assert reply["role"] == "assistant" and reply["finish_reason"] == "stop"
    assert [p["content"] for p in reply["parts"]] == [t for t in (message["public"], message["private"]) if t]
    round0 = next(s for s in spans if s.context.span_id == call.parent.span_id)
    assert round0.attributes["toporoute.goal"] == trace[0]["goal"]
    assert list(round0.attributes["toporoute.descriptors.query"]) == trace[0]["descriptors"]["query"]


def test_an_errored_and_an_unfinished_episode(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    counts, spans = _spans(run / "dytopo")
    roots = {s.attributes["toporoute.episode"]: s for s in spans if s.parent is None}
    # HumanEval-99.json is damaged (the reader reports it) and has no trace: nothing to show
    assert sorted(roots) == ["HumanEval-0", "HumanEval-1", "HumanEval-10", "HumanEval-2", "HumanEval-3"]
    assert counts.episodes == 5
    failed = roots["HumanEval-2"]
    assert failed.attributes["toporoute.status"] == "error"
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "RuntimeError"  # from the traceback's last line
    assert "engine died" not in (failed.status.description or "")  # the message is content
    assert len(_children(spans, failed)) == 1  # its torn second round is skipped
    _, shown = _spans(run / "dytopo", include_content=True)
    described = next(
        s for s in shown if s.parent is None and s.attributes["toporoute.episode"] == "HumanEval-2"
    )
    assert "RuntimeError: engine died" in (described.status.description or "")
    running = roots["HumanEval-3"]  # a trace, no episode file: it ends when its trace was last written
    assert running.attributes["toporoute.status"] == "partial"
    assert running.status.status_code is StatusCode.UNSET
    assert running.end_time == (run / "dytopo" / "traces" / "HumanEval-3.jsonl").stat().st_mtime_ns
    assert "toporoute.passed" not in running.attributes


def test_the_recorded_v1_run_exports(tmp_path: Path) -> None:
    run = shutil.copytree(DATA / "run_v1", tmp_path / "run")
    exporter = InMemorySpanExporter()
    counts = export_run(run, exporter, service_name="v1-run")
    spans = exporter.get_finished_spans()
    assert len(spans) == counts.spans and counts == ExportCounts(episodes=8, rounds=14, calls=49)
    assert {s.resource.attributes["service.name"] for s in spans} == {"v1-run"}
    assert {s.attributes["gen_ai.workflow.name"] for s in spans if s.parent is None} == {
        "dytopo",
        "chain",
        "conductor",
        "qmix",
        "single",
    }
    by_id = {s.context.span_id: s for s in spans}
    for s in spans:  # every span inside its parent
        if s.parent is not None:
            parent = by_id[s.parent.span_id]
            assert parent.start_time <= s.start_time <= s.end_time <= parent.end_time
    conductor = [s for s in spans if s.name.startswith("round ") and "toporoute.edge_kinds" in s.attributes]
    assert conductor and all(
        len(s.attributes["toporoute.edge_kinds"]) == len(s.attributes["toporoute.edges"]) for s in conductor
    )
    assert exporter.export(spans) is SpanExportResult.FAILURE  # export_run shut the exporter down


def test_service_name_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = shutil.copytree(DATA / "run_v1" / "single", tmp_path / "single")
    exporter = InMemorySpanExporter()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    export_run(run, exporter)
    assert {s.resource.attributes["service.name"] for s in exporter.get_finished_spans()} == {"from-env"}
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    exporter = InMemorySpanExporter()
    export_run(run, exporter)
    assert {s.resource.attributes["service.name"] for s in exporter.get_finished_spans()} == {"toporoute"}


class _Refusing(SpanExporter):
    def __init__(self) -> None:
        self.closed = False

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.closed = True


def test_a_refused_export_raises_and_closes_the_exporter(tmp_path: Path) -> None:
    run = shutil.copytree(DATA / "run_v1" / "single", tmp_path / "single")
    exporter = _Refusing()
    with pytest.raises(ExportError, match="0 of 6 sent"):
        export_run(run, exporter)
    assert exporter.closed


# ----------------------------------------------------------------------------------------------- call layout


def _round(calls: dict[str, float], messages: list[str], **extra: Any) -> RoundRecord:
    """A round whose calls (name -> latency in seconds) are listed in call order."""
    return RoundRecord(
        method="m",
        episode="e",
        task="t",
        round=0,
        graph=Graph(agents=list(messages), roles=list(messages)),
        messages={n: Message(f"said by {n}") for n in messages},
        usage=Usage({n: CallUsage(10, 5, s) for n, s in calls.items()}),
        extra=extra,
    )


def test_calls_of_a_batch_start_together_and_a_manager_after_them() -> None:
    rec = _round({"A": 2.0, "B": 3.0, "Manager": 1.0}, ["A", "B"])
    assert call_offsets(rec, 10 * 10**9) == {"A": 0, "B": 0, "Manager": 3 * 10**9}


def test_recorded_waves_run_one_after_another() -> None:
    qmix = _round(
        {"x": 1.0, "y": 2.0, "z": 1.0, "FinalRefer": 1.0}, ["x", "y", "z"], waves=[["y"], ["x", "z"]]
    )
    assert call_offsets(qmix, 10**10) == {"y": 0, "x": 2 * 10**9, "z": 2 * 10**9, "FinalRefer": 3 * 10**9}
    taco = _round({"p": 1.0, "q": 1.0, "judge:p": 1.0}, ["p", "q"], tacomas={"waves": [["p"], ["q"]]})
    assert call_offsets(taco, 10**10) == {"p": 0, "q": 10**9, "judge:p": 2 * 10**9}
    # AgentConductor: the orchestrator writes the plan (listed first), then the plan's layers run
    plan = _round({"orchestrator": 2.0, "a@1": 1.0, "b@2": 1.0}, ["a@1", "b@2"], layers=[["a@1"], ["b@2"]])
    assert call_offsets(plan, 10**10) == {"orchestrator": 0, "a@1": 2 * 10**9, "b@2": 3 * 10**9}


def test_a_layout_longer_than_its_round_starts_every_call_at_the_start() -> None:
    rec = _round({"judge:a": 2.0, "judge:b": 2.0}, [])  # really one batch: 2 s, not 4
    assert call_offsets(rec, 3 * 10**9) == {"judge:a": 0, "judge:b": 0}


# -------------------------------------------------------------------------------------------------- exporter


@pytest.mark.parametrize(
    ("endpoint", "protocol", "env", "url"),
    [
        ("http://localhost:4318", "http", {}, "http://localhost:4318/v1/traces"),
        ("http://localhost:6006/v1/traces", "http", {}, "http://localhost:6006/v1/traces"),  # Phoenix
        (
            "https://cloud.langfuse.com/api/public/otel/",
            "http",
            {},
            "https://cloud.langfuse.com/api/public/otel/v1/traces",
        ),
        (None, "http", {}, "http://localhost:4318/v1/traces"),
        (
            None,
            "http",
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
            "http://collector:4318/v1/traces",
        ),
        (None, "http", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:1/x"}, "http://c:1/x"),
        (None, "grpc", {}, "http://localhost:4317"),
        ("http://collector:4317", "grpc", {}, "http://collector:4317"),
    ],
)
def test_exporter_endpoint(endpoint: str | None, protocol: str, env: dict[str, str], url: str) -> None:
    exporter, where = make_exporter(endpoint, protocol=protocol, environ=env)
    exporter.shutdown()
    assert where == url


def test_exporter_refuses_an_endpoint_without_scheme() -> None:
    with pytest.raises(InvalidArgumentError, match="'localhost:4318'") as exc:
        make_exporter("localhost:4318", environ={})
    assert exc.value.arg == "endpoint"


# ------------------------------------------------------------------------------------------------------ CLI


class _Collector(BaseHTTPRequestHandler):
    requests: list[tuple[str, bytes]]

    def do_POST(self) -> None:  # http.server calls it by this name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def collector() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """An OTLP/HTTP collector on loopback that keeps what it receives."""
    requests: list[tuple[str, bytes]] = []
    handler = type("Handler", (_Collector,), {"requests": requests})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()


def test_cli_sends_otlp_http(scripted: Path, collector, capsys: pytest.CaptureFixture[str]) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    url, requests = collector
    assert main(["export-otel", str(scripted), "--endpoint", url, "--service-name", "cli-test"]) == 0
    out = capsys.readouterr().out
    counts, _ = _spans(scripted)
    assert f"sent {counts.spans} spans" in out and f"to {url}/v1/traces" in out
    assert requests and {path for path, _ in requests} == {"/v1/traces"}
    spans, services = [], set()
    for _, body in requests:
        message = ExportTraceServiceRequest.FromString(body)
        for resource_spans in message.resource_spans:
            attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            services.add(attrs["service.name"])
            spans += [s for scope in resource_spans.scope_spans for s in scope.spans]
    assert services == {"cli-test"} and len(spans) == counts.spans
    chat = next(s for s in spans if s.name == f"chat {MODEL}")
    attrs = {a.key: a.value for a in chat.attributes}
    assert attrs["gen_ai.usage.input_tokens"].int_value > 0
    assert attrs["gen_ai.operation.name"].string_value == "chat"


def test_cli_console_prints_the_spans(scripted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export-otel", str(scripted / "single"), "--console"]) == 0
    captured = capsys.readouterr()
    assert '"gen_ai.operation.name": "invoke_workflow"' in captured.out
    assert "sent 6 spans (2 episodes, 2 rounds, 2 LLM calls) to stdout" in captured.err


def test_cli_names_an_endpoint_that_does_not_answer(
    scripted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(
        ["export-otel", str(scripted / "single"), "--endpoint", f"http://127.0.0.1:{port}", "--timeout", "1"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"toporoute: error: could not send the spans to http://127.0.0.1:{port}/v1/traces" in err


def test_cli_bad_run_dir_and_endpoint(
    tmp_path: Path, scripted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export-otel", str(tmp_path / "nothing")]) == 2
    assert "nothing" in capsys.readouterr().err
    assert main(["export-otel", str(scripted), "--endpoint", "localhost:4318"]) == 2
    assert "http:// or https://" in capsys.readouterr().err


_WITHOUT_OTEL = """
import sys
class NoOtel:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NoOtel())
from toporoute.cli import main
sys.exit(main(["export-otel", sys.argv[1]]))
"""


def test_cli_without_the_extra_says_what_to_install(scripted: Path, tmp_path: Path) -> None:
    code = _WITHOUT_OTEL.replace("sys.argv[1]", repr(str(scripted)))
    p = run_python(code, tmp_path)
    assert p.returncode == 2, p.stderr
    assert "pip install 'toporoute[otel]'" in p.stderr and "Traceback" not in p.stderr
