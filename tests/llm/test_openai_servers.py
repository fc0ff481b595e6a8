"""The OpenAI engine over several servers (issue 37): least-outstanding balancing, failover when a server fails a
request, probes that bring a failed server back, the engine failure when none is left, per-server usage in the
ledger, ``--base-url`` given several times; and a run over two real loopback servers, one of them killed mid-run,
that ends on the other with every request answered. The unit tests run on ``httpx.MockTransport`` (one handler
for every server, told apart by port); the run on :class:`_chat_server.ChatServer`."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from _chat_server import ChatServer

from toporoute.errors import InvalidArgumentError
from toporoute.llm import ErrorRecord, OpenAIEngine, Request, Result, Tags, Usage
from toporoute.runtime import Ledger, Runtime

A, B, C = (f"http://127.0.0.1:{p}/v1" for p in (9101, 9102, 9103))

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


def completion(text: str = "ok") -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "choices": [{"message": {"content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        },
    )


def last_message(request: httpx.Request) -> str:
    return str(json.loads(request.content)["messages"][-1]["content"])


def engine(urls: list[str], handler: Handler, **kw: Any) -> OpenAIEngine:
    opts: dict[str, Any] = {"max_retries": 1, "backoff_s": 0.001, "probe_interval_s": 0.05}
    opts.update(kw)
    return OpenAIEngine("m", base_url=urls, transport=httpx.MockTransport(handler), **opts)


def req(text: str = "hi", **tags: Any) -> Request:
    return Request.chat(None, text, tags=Tags(**tags))


class Servers:
    """The mock transport's handler: each server (by port) answers as ``behaviour[url]`` says, ``"ok"`` by
    default (a list: its entries in turn, the last one from then on); ``"refuse"`` refuses the connection, an int answers that status, ``"hold"`` (or a request whose
    message says "hold") waits for :attr:`release` (a read timeout past the engine's ``timeout_s``). Records the server of every completion request and of every probe."""

    def __init__(self) -> None:
        self.behaviour: dict[str, Any] = {}
        self.posts: list[str] = []
        self.probes: list[tuple[str, float]] = []
        self.release = asyncio.Event()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)  # as on a network: every request of a batch is sent before any answer
        url = f"http://127.0.0.1:{request.url.port}/v1"
        what = self.behaviour.get(url, "ok")
        if request.method == "GET":
            self.probes.append((url, time.monotonic()))
            if what == "refuse":
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        self.posts.append(url)
        if isinstance(what, list):
            what = what.pop(0) if len(what) > 1 else what[0]
        if what == "refuse":
            raise httpx.ConnectError("refused", request=request)
        if isinstance(what, int):
            return httpx.Response(what, json={"error": {"message": f"status {what}"}})
        if what == "hold" or "hold" in last_message(request):
            try:  # the mock transport has no timeouts of its own
                await asyncio.wait_for(self.release.wait(), request.extensions["timeout"]["read"])
            except asyncio.TimeoutError:
                raise httpx.ReadTimeout("no answer", request=request) from None
        return completion(f"{last_message(request)} from {request.url.port}")


async def until(check: Callable[[], bool], timeout_s: float = 3.0) -> None:
    end = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < end, "timed out waiting"
        await asyncio.sleep(0.005)


# ------------------------------------------------------------------------------------------------- balancing


@pytest.mark.asyncio
async def test_each_request_goes_to_the_server_with_the_fewest_in_flight_ties_in_turn() -> None:
    s = Servers()
    e = engine([A, B, C], s)
    held = asyncio.ensure_future(e.generate([req("hold 1"), req("hold 2")]))
    await until(lambda: len(s.posts) == 2)
    assert s.posts == [A, B]  # a tie: in turn
    for _ in range(3):  # A and B each hold one: C, free, gets every quick request
        (r,) = await e.generate([req()])
        assert r.ok and r.server == C
    assert [(x.url, x.outstanding) for x in e.servers()] == [(A, 1), (B, 1), (C, 0)]
    s.release.set()
    assert [r.server for r in await held] == [A, B]
    s.posts.clear()
    results = await e.generate([req() for _ in range(6)])
    assert s.posts == [A, B, C, A, B, C] and [r.server for r in results] == s.posts
    stats = e.servers()
    assert [(x.requests, x.ok, x.failures, x.outstanding, x.up) for x in stats] == [
        (3, 3, 0, 0, True),
        (3, 3, 0, 0, True),
        (5, 5, 0, 0, True),
    ]
    await e.aclose()


@pytest.mark.asyncio
async def test_max_concurrency_is_per_server() -> None:
    s = Servers()
    e = engine([A, B], s, max_concurrency=2)
    held = asyncio.ensure_future(e.generate([req(f"hold {i}") for i in range(6)]))
    await until(lambda: len(s.posts) == 4)
    await asyncio.sleep(0.02)
    assert sorted(s.posts) == [A, A, B, B]  # two on each, two waiting for a slot
    s.release.set()
    assert all(r.ok for r in await held)
    await e.aclose()


# -------------------------------------------------------------------------------------------------- failover


@pytest.mark.asyncio
async def test_a_refused_connection_moves_the_request_to_another_server_at_once() -> None:
    s = Servers()
    s.behaviour[A] = "refuse"
    e = engine([A, B], s, max_retries=3, backoff_s=10.0)  # no backoff before moving on
    t0 = time.perf_counter()
    results = await e.generate([req(f"q{i}") for i in range(4)])
    assert time.perf_counter() - t0 < 2.0
    assert [r.text for r in results] == [f"q{i} from 9102" for i in range(4)]
    assert all(r.ok and r.server == B for r in results)
    assert [r.attempts for r in results] == [2, 1, 2, 1]  # the first and third went to A first
    a, b = e.servers()
    assert (a.up, a.requests, a.ok, a.failures) == (False, 2, 0, 2) and "connection error" in str(
        a.last_error
    )
    assert (b.up, b.requests, b.ok, b.failures) == (True, 4, 4, 0)
    (r,) = await e.generate([req()])  # A is down: not tried again
    assert r.server == B and r.attempts == 1 and e.servers()[0].requests == 2
    await e.aclose()


@pytest.mark.asyncio
async def test_a_5xx_is_retried_on_its_server_then_moves_on() -> None:
    s = Servers()
    s.behaviour[A] = 503
    e = engine([A, B], s, max_retries=2)
    (r,) = await e.generate([req()])
    assert r.ok and r.server == B and r.attempts == 4  # three on A (the retries), one on B
    assert s.posts == [A, A, A, B]
    a = e.servers()[0]
    assert not a.up and a.failures == 1 and "HTTP 503" in str(a.last_error)
    await e.aclose()


@pytest.mark.asyncio
async def test_a_4xx_is_the_requests_own_fault_and_no_failover() -> None:
    s = Servers()
    s.behaviour[A] = 400
    e = engine([A, B], s)
    (r,) = await e.generate([req()])
    assert r.error is not None and (r.error.kind, r.error.status, r.server) == ("http", 400, A)
    a = e.servers()[0]
    assert a.up and (a.requests, a.ok, a.failures) == (1, 0, 0) and s.posts == [A]
    await e.aclose()


@pytest.mark.asyncio
async def test_a_timeout_moves_the_request_on() -> None:
    s = Servers()
    s.behaviour[A] = "hold"  # never answers within timeout_s
    e = engine([A, B], s, timeout_s=0.1)
    (r,) = await e.generate([req()])
    assert r.ok and r.server == B and r.attempts == 2
    assert not e.servers()[0].up and "ReadTimeout" in str(e.servers()[0].last_error)
    s.release.set()
    await e.aclose()


# ------------------------------------------------------------------------------------------ probes, recovery


@pytest.mark.asyncio
async def test_a_down_server_is_probed_each_interval_and_back_when_it_answers() -> None:
    s = Servers()
    s.behaviour[A] = "refuse"
    e = engine([A, B], s, probe_interval_s=0.05)
    await e.generate([req()])
    assert not e.servers()[0].up
    await asyncio.sleep(0.28)
    times = [t for url, t in s.probes if url == A]
    assert 3 <= len(times) <= 6 and all(b - a >= 0.045 for a, b in itertools.pairwise(times))
    assert not e.servers()[0].up
    s.behaviour[A] = "ok"
    await until(lambda: e.servers()[0].up, 1.0)
    probes = len(s.probes)
    await asyncio.sleep(0.15)
    assert len(s.probes) == probes  # nothing down: no probes
    results = await e.generate([req(), req()])
    assert {r.server for r in results} == {A, B}
    await e.aclose()


@pytest.mark.asyncio
async def test_aclose_stops_the_prober() -> None:
    s = Servers()
    s.behaviour[A] = "refuse"
    e = engine([A, B], s, probe_interval_s=0.02)
    await e.generate([req()])
    prober = e._prober
    assert prober is not None and not prober.done()
    await e.aclose()
    assert prober.done() and e._prober is None


# ---------------------------------------------------------------------------------------------- none is left


@pytest.mark.asyncio
async def test_the_last_server_up_stays_in_and_gets_the_one_server_retries() -> None:
    s = Servers()
    s.behaviour[A] = "refuse"
    s.behaviour[B] = ["refuse", "refuse", "ok"]
    e = engine([A, B], s, max_retries=3)
    (r,) = await e.generate([req("q")])
    assert r.ok and r.server == B and r.attempts == 4 and s.posts == [A, B, B, B]
    a, b = e.servers()
    assert not a.up and b.up and (b.requests, b.ok, b.failures) == (1, 1, 0)
    await e.aclose()


@pytest.mark.asyncio
async def test_when_no_server_answers_the_request_is_an_engine_failure_naming_each() -> None:
    s = Servers()
    s.behaviour[A] = s.behaviour[B] = "refuse"
    e = engine([A, B], s, max_retries=1)
    (r,) = await e.generate([req()])
    assert r.error is not None and r.error.kind == "engine" and r.error.engine_failure and r.text == ""
    assert r.error.attempts == 3 and r.server == B and s.posts == [A, B, B]
    assert r.error.message.startswith("no server answered the request: ")
    assert f"{A}: connection error" in r.error.message and f"{B}: connection error" in r.error.message
    a, b = e.servers()
    assert (a.up, a.failures, b.up, b.failures) == (False, 1, True, 1)
    # A is down: the next request goes to B alone, and names A's last failure
    (r,) = await e.generate([req()])
    assert r.error is not None and r.error.kind == "engine" and r.attempts == 2 and r.server == B
    assert f"{A}: down (connection error" in r.error.message and s.posts == [A, B, B, B, B]
    await e.aclose()


@pytest.mark.asyncio
async def test_the_runtime_ends_an_episode_as_an_error_when_no_server_is_left(tmp_path: Path) -> None:
    s = Servers()
    s.behaviour[A] = s.behaviour[B] = "refuse"
    e = engine([A, B], s)

    async def episode(ctx: Any) -> dict[str, Any]:
        await ctx.generate([req()])
        return {}

    summary = await Runtime(e, progress=False, out_dir=tmp_path).run([("ep", episode)])
    (outcome,) = summary.outcomes
    assert outcome.status == "error" and "no server answered" in str(outcome.cause)
    saved = json.loads((tmp_path / "episodes" / "ep.json").read_text())
    assert saved["usage"]["engine_failed_calls"] == 1
    assert saved["usage"]["servers"] == {
        B: {"calls": 1, "failed_calls": 1, "prompt_tokens": 0, "completion_tokens": 0}
    }
    await e.aclose()


# ------------------------------------------------------------------------------------------------ one server


@pytest.mark.asyncio
async def test_one_server_keeps_todays_retries_and_names_no_server() -> None:
    s = Servers()
    s.behaviour[A] = "refuse"
    e = engine([A], s, max_retries=2)
    assert e.base_url == A and repr(e) == f"OpenAIEngine(model='m', base_url='{A}', api_key=none)"
    (r,) = await e.generate([req()])
    assert r.error is not None and r.error.kind == "engine" and r.attempts == 3 and r.server is None
    assert r.error.message.startswith(f"connection error to {A}/chat/completions")
    (a,) = e.servers()
    assert a.up and (a.requests, a.failures) == (1, 1) and e._prober is None
    s.behaviour[A] = "ok"
    (r,) = await e.generate([req()])
    assert r.ok and r.server is None
    await e.aclose()


def test_base_url_arguments() -> None:
    e = OpenAIEngine("m", base_url=(A + "/", B))
    assert e.base_urls == (A, B) and e.base_url == A and f"base_url=['{A}', '{B}']" in repr(e)
    for bad in ([], [A, A + "/"], [A, ""]):
        with pytest.raises(InvalidArgumentError, match="base_url"):
            OpenAIEngine("m", base_url=bad)
    with pytest.raises(InvalidArgumentError, match="probe_interval_s"):
        OpenAIEngine("m", base_url=[A, B], probe_interval_s=0)


def test_the_command_takes_several_base_urls(tmp_path: Path) -> None:
    from toporoute import cli

    argv = ["run", "single", "--out", str(tmp_path), "--engine", "openai", "--model", "m"]
    args = cli._parse([*argv, "--base-url", A, "--base-url", f"{B}, {C}"])
    opened = asyncio.run(_opened(cli, args))
    assert opened.base_urls == (A, B, C) and args.engine_info == {"base_urls": [A, B, C]}  # run.json's
    opened = asyncio.run(_opened(cli, cli._parse(argv)))
    assert opened.base_urls == ("http://127.0.0.1:8000/v1",)


async def _opened(cli: Any, args: Any) -> OpenAIEngine:
    structured = await cli._engine(args)
    await structured.aclose()
    assert isinstance(structured.engine, OpenAIEngine)
    return structured.engine


# ---------------------------------------------------------------------------------------------------- ledger


def test_the_ledger_totals_each_server_only_where_one_is_named() -> None:
    plain = Ledger()
    plain.add_call(Result("x", usage=Usage(3, 2), tags=Tags(round=0, agent="a")))
    assert "servers" not in plain.summary() and "server" not in plain.to_dict()["calls"][0]
    ledger = Ledger()
    ledger.add_call(Result("x", usage=Usage(3, 2), server=A))
    ledger.add_call(Result("y", usage=Usage(4, 1), server=A))
    ledger.add_call(Result("", error=ErrorRecord("engine", "down"), server=B))
    assert ledger.summary()["servers"] == {
        A: {"calls": 2, "failed_calls": 0, "prompt_tokens": 7, "completion_tokens": 3},
        B: {"calls": 1, "failed_calls": 1, "prompt_tokens": 0, "completion_tokens": 0},
    }
    assert [c["server"] for c in ledger.to_dict()["calls"]] == [A, A, B]


# ------------------------------------------------------------------- two real servers, one killed mid-run


def test_a_run_over_two_servers_ends_on_one_when_the_other_is_killed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Done when of issue 37: 8 episodes of 4 rounds of 5 calls (160 requests, up to 40 in flight) over two
    loopback servers; the first is killed when its 30th request arrives, dropping the requests in flight on it.
    Every episode finishes, every request gets its own reply, and the ledger shows both servers."""
    caplog.set_level(logging.INFO, "toporoute.llm.openai_http")
    first = ChatServer(lambda last: f"echo: {last}", delay_s=0.02, kill_at=30)
    second = ChatServer(lambda last: f"echo: {last}", delay_s=0.02)
    episodes, rounds, agents = 8, 4, 5

    def episode(name: str) -> Callable[[Any], Awaitable[dict[str, Any]]]:
        async def run(ctx: Any) -> dict[str, Any]:
            for r in range(rounds):
                asked = [req(f"{name} round {r} agent {a}", round=r, agent=f"a{a}") for a in range(agents)]
                results = await ctx.generate(asked)
                assert [x.text for x in results] == [f"echo: {q.messages[-1].content}" for q in asked]
            return {"rounds": rounds}

        return run

    async def main() -> tuple[Any, list[Any]]:
        e = OpenAIEngine("m", base_url=[first.url, second.url], backoff_s=0.01)
        try:
            runtime = Runtime(e, concurrency=episodes, progress=False, out_dir=tmp_path)
            summary = await runtime.run([(f"ep{i}", episode(f"ep{i}")) for i in range(episodes)])
            return summary, e.servers()
        finally:
            await e.aclose()

    try:
        summary, servers = asyncio.run(main())
    finally:
        first.stop()
        second.stop()
    assert [o.status for o in summary.outcomes] == ["ok"] * episodes, [o.cause for o in summary.outcomes]
    totals = summary.totals()
    assert totals["calls"] == episodes * rounds * agents and totals["failed_calls"] == 0
    assert first.served + second.served == episodes * rounds * agents  # no request answered twice
    assert first.killed and first.served < 30 <= first.received
    one, two = servers
    assert not one.up and one.failures >= 1 and one.ok == first.served
    moved = [
        m.getMessage()
        for m in caplog.records
        if m.getMessage().startswith(f"m: request moves on from {first.url}")
    ]
    assert any("RemoteProtocolError" in m or "ReadError" in m for m in moved), moved  # dropped in flight
    assert two.up and two.failures == 0 and two.ok == second.served
    per_server: dict[str, int] = {}
    for i in range(episodes):
        saved = json.loads((tmp_path / "episodes" / f"ep{i}.json").read_text())
        for url, row in saved["usage"]["servers"].items():
            assert row["failed_calls"] == 0
            per_server[url] = per_server.get(url, 0) + row["calls"]
    assert per_server == {first.url: first.served, second.url: second.served}
