"""Engine conformance: every engine (scripted, replay in record and in replay mode, the structured wrapper, and
the OpenAI-compatible HTTP engine against a local fake server) keeps request order, carries tags, reports
usage, turns failures into error records and answers an empty batch with []. Then the HTTP engine's own
behaviour: payload, API key handling (never leaked), retries with backoff and Retry-After, timeouts, the
concurrency limit and one client per engine."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from _procs import run_python

from toporoute.llm import (
    Engine,
    EngineClosedError,
    OpenAIEngine,
    ReplayEngine,
    Request,
    Sampling,
    ScriptedEngine,
    Structured,
    Tags,
    Usage,
)
from toporoute.llm.scripted import word_count

KEY = "sk-test-0123456789abcdefSECRET"

# ------------------------------------------------------------------------------------------ shared fake behaviour
# A request's last message may carry directives: "[delay=0.03]" (answer after that many seconds), "[fail]"
# (the request fails) and "[json]" (the reply is the JSON object {"echo": <last message>}). Every engine answers
# "echo: <last message>" otherwise.

_DELAY = re.compile(r"\[delay=([0-9.]+)\]")


def reply_for(last: str) -> str:
    return json.dumps({"echo": last}) if "[json]" in last else f"echo: {last}"


def delay_for(last: str) -> float:
    m = _DELAY.search(last)
    return float(m.group(1)) if m else 0.0


def scripted() -> ScriptedEngine:
    return ScriptedEngine(
        lambda r: reply_for(r.messages[-1].content),
        latency_s=lambda r: delay_for(r.messages[-1].content),
        fail=lambda r: "injected failure" if "[fail]" in r.messages[-1].content else None,
    )


# ---------------------------------------------------------------------------------------------- fake HTTP server


class FakeOpenAI:
    """POST /v1/chat/completions on 127.0.0.1 in a background thread.

    ``fail_first`` calls answer ``fail_status`` (with ``retry_after`` as Retry-After when set); ``api_key``
    set: other Authorization headers get 401 with the header echoed back (as some hosted APIs do);
    ``echo_auth_in_errors`` echoes the header in every error body; ``usage=False`` drops the usage field;
    ``malformed`` answers 200 with a body that is not a completion.
    """

    def __init__(self) -> None:
        self.api_key: str | None = None
        self.fail_first = 0
        self.fail_status = 500
        self.retry_after: str | None = None
        self.echo_auth_in_errors = False
        self.usage = True
        self.malformed = False
        self.calls = 0
        self.bodies: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                fake._handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @staticmethod
    def _send(
        h: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str] | None = None
    ) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
            pass

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        auth = h.headers.get("Authorization")
        with self._lock:
            self.calls += 1
            call = self.calls
            self.bodies.append(body)
            self.auth.append(auth)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if h.path != "/v1/chat/completions":
                return self._send(h, 404, {"error": {"message": f"no route {h.path}"}})
            echo = f" (got {auth})" if self.echo_auth_in_errors else ""
            if self.api_key is not None and auth != f"Bearer {self.api_key}":
                return self._send(h, 401, {"error": {"message": f"Incorrect API key provided: {auth}"}})
            if call <= self.fail_first:
                headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
                return self._send(h, self.fail_status, {"error": {"message": f"try later{echo}"}}, headers)
            last = body["messages"][-1]["content"]
            time.sleep(delay_for(last))
            if "[fail]" in last:
                return self._send(h, 400, {"error": {"message": f"bad request{echo}"}})
            if self.malformed:
                return self._send(h, 200, {"object": "not a completion"})
            text = reply_for(last)
            out: dict[str, Any] = {
                "id": f"cmpl-{call}",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
            }
            if self.usage:
                prompt = sum(word_count(m["content"]) + 1 for m in body["messages"])
                out["usage"] = {
                    "prompt_tokens": prompt,
                    "completion_tokens": word_count(text),
                    "total_tokens": prompt + word_count(text),
                }
            return self._send(h, 200, out)
        finally:
            with self._lock:
                self.in_flight -= 1


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    s = FakeOpenAI()
    yield s
    s.close()


def http_engine(server: FakeOpenAI, **kw: Any) -> OpenAIEngine:
    opts: dict[str, Any] = {"base_url": server.url, "max_retries": 2, "backoff_s": 0.005, "timeout_s": 5.0}
    opts.update(kw)
    return OpenAIEngine("fake-model", **opts)


# -------------------------------------------------------------------------------------------------- conformance

KINDS = ["scripted", "replay-record", "replay", "structured", "openai"]


def reqs(lasts: list[str], episode: str = "ep") -> list[Request]:
    return [
        Request.chat(
            f"You are agent {i}.", last, tags=Tags(episode=episode, round=1, agent=f"a{i}", role="r")
        )
        for i, last in enumerate(lasts)
    ]


async def make(kind: str, tmp_path: Path, server: FakeOpenAI, requests: list[Request]) -> Engine:
    """An engine of ``kind``; the replay-mode one has ``requests`` recorded (in a scripted run) beforehand."""
    if kind == "scripted":
        return scripted()
    if kind == "replay-record":
        return ReplayEngine(tmp_path / "rec.jsonl", scripted())
    if kind == "replay":
        path = tmp_path / "play.jsonl"
        rec = ReplayEngine(path, scripted())
        if requests:
            await rec.generate(requests)
        await rec.aclose()
        if not path.exists():
            path.touch()
        return ReplayEngine(path, name="scripted")
    if kind == "structured":
        return Structured(scripted())
    assert kind == "openai"
    return http_engine(server, api_key=KEY)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.asyncio
async def test_empty_batch(kind: str, tmp_path: Path, server: FakeOpenAI) -> None:
    engine = await make(kind, tmp_path, server, [])
    assert isinstance(engine, Engine)
    assert isinstance(engine.name, str) and engine.name
    assert await engine.generate([]) == []
    assert server.calls == 0
    await engine.aclose()


@pytest.mark.asyncio
async def test_order_tags_usage(kind: str, tmp_path: Path, server: FakeOpenAI) -> None:
    # later requests finish first: results must still come back in request order
    n = 6
    requests = reqs([f"task {i} [delay={0.01 * (n - i):.2f}]" for i in range(n)])
    engine = await make(kind, tmp_path, server, requests)
    results = await engine.generate(requests)
    assert len(results) == n
    for r, res in zip(requests, results):
        assert res.ok, res.error
        assert res.text == reply_for(r.messages[-1].content)
        assert res.tags == r.tags
        assert res.usage.prompt_tokens > 0 and res.usage.completion_tokens > 0
        assert res.latency_s >= 0.0
        assert res.attempts >= 1
        assert res.parsed is None
    await engine.aclose()


@pytest.mark.asyncio
async def test_failures_are_records(kind: str, tmp_path: Path, server: FakeOpenAI) -> None:
    requests = reqs(["fine 0", "broken [fail]", "fine 2"])
    engine = await make(kind, tmp_path, server, requests)
    results = await engine.generate(requests)
    assert [r.ok for r in results] == [True, False, True]
    bad = results[1]
    assert bad.error is not None and bad.error.kind in ("engine", "http") and bad.error.message
    assert bad.text == "" and bad.tags == requests[1].tags
    assert results[2].text == reply_for("fine 2")
    await engine.aclose()


ECHO_SCHEMA = {"type": "object", "properties": {"echo": {"type": "string"}}, "required": ["echo"]}


@pytest.mark.asyncio
async def test_parsed_is_the_valid_json_of_schema_requests(
    kind: str, tmp_path: Path, server: FakeOpenAI
) -> None:
    # one path for every engine: parsed holds the reply's JSON value when it is valid under the request's
    # schema, None when the reply is not (or the request has no schema)
    lasts = ["answer [json]", "plain answer", "no schema [json]"]
    requests = [
        Request.chat("You answer in JSON.", last, schema=None if "no schema" in last else ECHO_SCHEMA)
        for last in lasts
    ]
    engine = await make(kind, tmp_path, server, requests)
    good, plain, unschema = await engine.generate(requests)
    assert good.ok and good.parsed == {"echo": "answer [json]"}, good
    assert plain.parsed is None
    if kind == "structured":  # the wrapper re-prompts an invalid reply, then records why it failed
        assert plain.error is not None and plain.error.kind == "validation"
    else:
        assert plain.ok and plain.text == "echo: plain answer"
    assert unschema.ok and unschema.parsed is None and unschema.text == reply_for("no schema [json]")
    await engine.aclose()


@pytest.mark.asyncio
async def test_closed_engine_raises(kind: str, tmp_path: Path, server: FakeOpenAI) -> None:
    engine = await make(kind, tmp_path, server, [])
    await engine.aclose()
    await engine.aclose()  # idempotent
    with pytest.raises(EngineClosedError):
        await engine.generate(reqs(["x"]))


@pytest.mark.asyncio
async def test_concurrent_callers_share_one_engine(kind: str, tmp_path: Path, server: FakeOpenAI) -> None:
    a, b = reqs(["alpha [delay=0.02]", "beta"], "A"), reqs(["gamma", "delta [delay=0.01]"], "B")
    engine = await make(kind, tmp_path, server, a + b)
    ra, rb = await asyncio.gather(engine.generate(a), engine.generate(b))
    assert [r.text for r in ra + rb] == [
        reply_for(x) for x in ["alpha [delay=0.02]", "beta", "gamma", "delta [delay=0.01]"]
    ]
    assert [r.tags.episode for r in ra + rb] == ["A", "A", "B", "B"]
    await engine.aclose()


# ------------------------------------------------------------------------------------------------- scripted only


@pytest.mark.asyncio
async def test_scripted_records_batches_and_canned_replies() -> None:
    engine = ScriptedEngine(["one", "two words", "three more words"])
    first = await engine.generate(reqs(["a", "b"]))
    second = await engine.generate(reqs(["c", "d"]))
    assert [r.text for r in first + second[:1]] == ["one", "two words", "three more words"]
    assert second[1].error is not None and "exhausted" in second[1].error.message
    assert [len(b) for b in engine.batches] == [2, 2]
    assert first[1].usage == Usage(word_count("You are agent 1.") + 1 + word_count("b") + 1, 2)

    by_text = ScriptedEngine({"hi": "hello"})
    ok, missing = await by_text.generate(reqs(["hi", "nope"]))
    assert ok.text == "hello" and missing.error is not None and "'nope'" in missing.error.message


# --------------------------------------------------------------------------------------------------- HTTP engine


@pytest.mark.asyncio
async def test_http_payload(server: FakeOpenAI) -> None:
    schema = {"title": "Vote answer!", "type": "object", "properties": {"a": {"type": "integer"}}}
    r = Request.chat(
        "sys", "q", sampling=Sampling(max_tokens=7, temperature=0.3, seed=5, stop=("\n",)), schema=schema
    )
    e = http_engine(server, extra_body={"top_k": 20})
    await e.generate([r, Request.chat(None, "plain")])
    await e.aclose()
    with_schema, plain = sorted(server.bodies, key=lambda b: len(b["messages"]), reverse=True)
    assert with_schema["model"] == "fake-model"
    assert with_schema["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]
    assert (with_schema["max_tokens"], with_schema["temperature"], with_schema["top_p"]) == (7, 0.3, 1.0)
    assert with_schema["seed"] == 5 and with_schema["stop"] == ["\n"] and with_schema["top_k"] == 20
    fmt = with_schema["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"] == schema and fmt["json_schema"]["name"] == "Vote_answer_"
    assert "response_format" not in plain and "seed" not in plain and "stop" not in plain

    server.bodies.clear()
    e = http_engine(server, guided_json=False)
    assert not e.supports_guided_json
    await e.generate([r])
    await e.aclose()
    assert "response_format" not in server.bodies[0]


@pytest.mark.asyncio
async def test_http_api_key_sources(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("MY_KEY", "sk-custom-env")
    for kw, want in [
        ({}, "Bearer sk-from-env"),
        ({"api_key_env": "MY_KEY"}, "Bearer sk-custom-env"),
        ({"api_key": "sk-explicit"}, "Bearer sk-explicit"),
        ({"api_key_env": "UNSET_KEY_VAR"}, None),
    ]:
        server.auth.clear()
        e = http_engine(server, **kw)
        (res,) = await e.generate(reqs(["x"]))
        await e.aclose()
        assert res.ok and server.auth == [want]


@pytest.mark.asyncio
async def test_http_api_key_never_leaks(server: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    e = http_engine(server, api_key=KEY)
    assert KEY not in repr(e) and KEY not in str(e) and KEY not in repr(vars(e))
    # a server that echoes the Authorization header in its errors: a retried 500, a 400 and a 401
    server.echo_auth_in_errors = True
    server.fail_first = 1
    retried, bad = await e.generate(reqs(["x", "y [fail]"]))
    assert retried.ok and bad.error is not None and bad.error.status == 400
    server.api_key = "sk-some-other-key"
    (denied,) = await e.generate(reqs(["z"]))
    await e.aclose()
    assert denied.error is not None and denied.error.status == 401 and denied.error.attempts == 1
    assert "Incorrect API key" in denied.error.message and "***" in denied.error.message
    assert any("try later" in r.getMessage() for r in caplog.records)  # the retry was logged...
    texts = [repr(res) for res in (retried, bad, denied)] + [r.getMessage() for r in caplog.records]
    texts += [str(r.args) for r in caplog.records]
    for t in texts:
        assert KEY not in t  # ...and nothing holds the key
    assert server.auth[0] == f"Bearer {KEY}"


@pytest.mark.asyncio
@pytest.mark.parametrize(("status", "retry_after"), [(429, "0.05"), (503, None), (500, "0")])
async def test_http_retries_then_succeeds(server: FakeOpenAI, status: int, retry_after: str | None) -> None:
    server.fail_first, server.fail_status, server.retry_after = 2, status, retry_after
    e = http_engine(server, max_retries=3, backoff_s=0.01)
    t0 = time.perf_counter()
    (res,) = await e.generate(reqs(["x"]))
    await e.aclose()
    assert res.ok and res.attempts == 3 and server.calls == 3
    if retry_after == "0.05":
        assert time.perf_counter() - t0 >= 0.1  # Retry-After honoured twice
    assert res.latency_s >= 0.0


@pytest.mark.asyncio
async def test_http_retries_exhausted(server: FakeOpenAI) -> None:
    server.fail_first, server.fail_status = 100, 503
    e = http_engine(server, max_retries=2)
    (res,) = await e.generate(reqs(["x"]))
    await e.aclose()
    assert res.error is not None
    assert (res.error.kind, res.error.status, res.error.attempts, res.attempts) == ("http", 503, 3, 3)
    assert server.calls == 3 and "try later" in res.error.message


@pytest.mark.asyncio
async def test_http_retry_after_too_long_gives_up(server: FakeOpenAI) -> None:
    server.fail_first, server.fail_status, server.retry_after = 100, 429, "3600"
    e = http_engine(server, max_retries=3, backoff_max_s=1.0)
    t0 = time.perf_counter()
    (res,) = await e.generate(reqs(["x"]))
    await e.aclose()
    assert time.perf_counter() - t0 < 1.0
    assert res.error is not None and res.error.status == 429 and res.error.attempts == 1
    assert "Retry-After 3600" in res.error.message


@pytest.mark.asyncio
async def test_http_client_errors_not_retried(server: FakeOpenAI) -> None:
    e = http_engine(server, max_retries=3)
    (res,) = await e.generate(reqs(["x [fail]"]))
    server.malformed = True
    (bad,) = await e.generate(reqs(["y"]))
    await e.aclose()
    assert res.error is not None and (res.error.kind, res.error.status, res.error.attempts) == (
        "http",
        400,
        1,
    )
    assert bad.error is not None and bad.error.kind == "engine" and "malformed" in bad.error.message
    assert server.calls == 2


@pytest.mark.asyncio
async def test_http_timeout(server: FakeOpenAI) -> None:
    e = http_engine(server, timeout_s=0.5, max_retries=3)
    slow, fast = await e.generate(reqs(["slow [delay=3]", "fast"]))
    await e.aclose()
    assert slow.error is not None and slow.error.kind == "timeout" and slow.error.attempts == 1
    assert fast.ok, fast.error
    assert 0.5 <= slow.latency_s < 3.0
    assert server.calls == 2


@pytest.mark.asyncio
async def test_http_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = OpenAIEngine("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_s=0.001)
    (res,) = await e.generate(reqs(["x"]))
    await e.aclose()
    assert res.error is not None and res.error.kind == "engine" and res.error.attempts == 3
    assert "connection error" in res.error.message


@pytest.mark.asyncio
async def test_http_concurrency_limit_and_one_client(server: FakeOpenAI) -> None:
    e = http_engine(server, max_concurrency=2)
    client = e._client
    results = await e.generate(reqs([f"t{i} [delay=0.05]" for i in range(6)]))
    results += await e.generate(reqs(["again"]))
    assert e._client is client
    await e.aclose()
    assert all(r.ok for r in results)
    assert server.max_in_flight == 2


@pytest.mark.asyncio
async def test_http_missing_usage_counts_zero(server: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    server.usage = False
    e = http_engine(server)
    with caplog.at_level(logging.WARNING, logger="toporoute.llm.openai_http"):
        results = await e.generate(reqs(["a", "b", "c"]))
    await e.aclose()
    assert all(r.ok and r.usage == Usage() for r in results)
    assert sum("no usage" in r.getMessage() for r in caplog.records) == 1


def test_http_bad_arguments() -> None:
    from toporoute.errors import InvalidArgumentError

    for kw in ({"max_concurrency": 0}, {"max_retries": -1}, {"timeout_s": 0.0}):
        with pytest.raises(InvalidArgumentError) as e:
            OpenAIEngine("m", **kw)
        assert e.value.arg == next(iter(kw))


def test_import_is_light(tmp_path: Path) -> None:
    # httpx loads with the HTTP engine only; nothing here loads vllm or torch
    code = (
        "import sys, toporoute.llm as L\n"
        "heavy = lambda: sorted({m.split('.')[0] for m in sys.modules} & {'httpx', 'vllm', 'torch'})\n"
        "print(heavy())\n"
        "L.ScriptedEngine, L.ReplayEngine, L.Structured, L.schema_of\n"
        "print(heavy())\n"
        "L.OpenAIEngine\n"
        "print(heavy())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = run_python(code, tmp_path, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["[]", "[]", "['httpx']"]
