"""``toporoute serve`` against the real server on a loopback port (uvicorn in a thread, or the command in a
subprocess for the shutdown test): every endpoint against the same work done in process, the limits and their
errors, auth (and that the token never reaches the logs), unexpected errors, graceful shutdown with requests in
flight, a curl call, and shared encoder batches for concurrent text requests."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _procs import run_python

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
pytest.importorskip("uvicorn", reason="the serve extra (uvicorn) is not installed")
import _inputs as inp
import httpx
import uvicorn
from _conductor_plans import SIMPLE, fenced
from _paths import ROOT

from toporoute import backends, ops
from toporoute.embed import Encoder, Router
from toporoute.serve import ServeConfig, create_app
from toporoute.types.qmix_params import QMixConfig

TOKEN = "tr-test-7f3c9a1e5b2d4c68"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

NEEDS, OFFERS = inp.NEEDS, inp.OFFERS


class _Records(logging.Handler):
    """Every formatted log record of the server (uvicorn's and toporoute's), exceptions included."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def text(self) -> str:
        return "\n".join(self.lines)


@contextmanager
def running(app: Any, records: _Records | None = None) -> Iterator[str]:
    """Serves ``app`` with uvicorn in a thread on a free loopback port; yields the base URL."""
    loggers = [logging.getLogger(n) for n in ("uvicorn", "uvicorn.error", "uvicorn.access", "toporoute")]
    saved = [(lg, lg.level) for lg in loggers]
    if records is not None:
        for lg in loggers:
            lg.addHandler(records)
            lg.setLevel(logging.DEBUG)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_config=None, log_level="debug", access_log=True, lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        for lg, level in saved:
            lg.setLevel(level)
            if records is not None:
                lg.removeHandler(records)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qmix") / "policy.safetensors"
    cfg = QMixConfig(obs_dim=7, hidden=16, n_actions=4, head_hidden=8)
    ops.QMixParams.random(cfg, seed=3).save(path)
    return path


@pytest.fixture(scope="module")
def records() -> _Records:
    return _Records()


@pytest.fixture(scope="module")
def served(encoder: Encoder, checkpoint: Path, records: _Records) -> Iterator[tuple[str, Any]]:
    """(base URL, app) of a server with a token and a Q-Mix checkpoint; coalescing waits 20 ms for joiners."""
    app = create_app(ServeConfig(token=TOKEN, qmix_checkpoint=checkpoint, max_wait=0.02), encoder=encoder)
    with running(app, records) as url:
        yield url, app


@pytest.fixture(scope="module")
def limited(encoder: Encoder) -> Iterator[str]:
    """A server without a token, with small limits and no checkpoint."""
    cfg = ServeConfig(max_body_bytes=4096, max_episodes=2, max_agents=3, max_text_chars=40)
    with running(create_app(cfg, encoder=encoder)) as url:
        yield url


@pytest.fixture
def client(served: tuple[str, Any]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[0], headers=AUTH, timeout=30) as c:
        yield c


def _b64(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a, dtype="<f4")
    return {"b64": base64.b64encode(a.tobytes()).decode(), "shape": list(a.shape)}


def _from_b64(d: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(d["b64"]), dtype="<f4").reshape(d["shape"])


def _expected_episode(adj: np.ndarray, inbox: np.ndarray, in_degree: np.ndarray) -> dict[str, Any]:
    """What /v1/route must answer for one episode, from in-process arrays of its own n agents."""
    order = ops.toposort(adj)
    return {
        "edges": np.argwhere(adj).tolist(),
        "inbox": [[int(j) for j in row if j >= 0] for row in inbox],
        "in_degree": in_degree.tolist(),
        "order": order.order.tolist(),
        "level": order.level.tolist(),
        "removed": np.argwhere(order.removed).tolist(),
    }


def _text_episodes(n: int, seed: int) -> list[dict[str, list[str]]]:
    rng = np.random.default_rng(seed)
    out = []
    for e in range(n):
        size = int(rng.integers(1, 6))
        out.append(
            {
                "needs": [f"{NEEDS[int(rng.integers(4))]} for task {e}" for _ in range(size)],
                "offers": [f"{OFFERS[int(rng.integers(4))]} for task {e}" for _ in range(size)],
            }
        )
    return out


def _check_text_routes(got: list[dict[str, Any]], episodes: list[dict[str, Any]], router: Router) -> None:
    for ep, g in zip(episodes, got):
        want = router.route_texts(ep["needs"], ep["offers"])  # one episode, in process
        scores = np.asarray(g.pop("scores"))
        assert g == _expected_episode(want.adjacency, want.inbox, want.in_degree)
        np.testing.assert_allclose(scores, want.scores, atol=1e-5)


# -- endpoints against in-process results ------------------------------------------------------------------


def test_health_is_open_and_describes_the_server(served: tuple[str, Any], encoder: Encoder) -> None:
    r = httpx.get(served[0] + "/health")  # no token
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["qmix"] is True and body["encoder"] == encoder.name
    assert body["backend"] in backends.NAMES and body["version"]


def test_route_texts_matches_the_router(client: httpx.Client, encoder: Encoder) -> None:
    episodes = _text_episodes(6, seed=1)
    r = client.post("/v1/route", json={"episodes": episodes, "tau": 0.25, "k_in": 2, "scores": True})
    assert r.status_code == 200, r.text
    got = r.json()["episodes"]
    assert len(got) == len(episodes)
    _check_text_routes(got, episodes, Router(encoder, tau=0.25, k_in=2))


def test_route_texts_uncapped_and_binary_scores(client: httpx.Client, encoder: Encoder) -> None:
    episodes = _text_episodes(3, seed=2)
    r = client.post("/v1/route", json={"episodes": episodes, "k_in": 0, "scores": True, "binary": True})
    assert r.status_code == 200, r.text
    got = r.json()["episodes"]
    for g in got:
        g["scores"] = _from_b64(g["scores"])
    _check_text_routes(got, episodes, Router(encoder, tau=0.3, k_in=0))


@pytest.mark.parametrize("form", ["json", "b64"])
def test_route_embeddings_matches_ops(client: httpx.Client, form: str) -> None:
    rng = np.random.default_rng(7)
    sizes = [5, 3, 5, 1]
    qs = [rng.standard_normal((n, 16)).astype(np.float32) for n in sizes]
    ks = [rng.standard_normal((n, 16)).astype(np.float32) for n in sizes]
    enc = _b64 if form == "b64" else (lambda a: a.tolist())
    body = {
        "episodes": [{"q": enc(q), "k": enc(k)} for q, k in zip(qs, ks)],
        "tau": 0.1,
        "k_in": 2,
        "scores": True,
        "binary": form == "b64",
    }
    r = client.post("/v1/route", json=body)
    assert r.status_code == 200, r.text
    for q, k, g in zip(qs, ks, r.json()["episodes"]):
        want = ops.route(q, k, tau=0.1, k_in=2)
        scores = g.pop("scores")
        scores = _from_b64(scores) if form == "b64" else np.asarray(scores, dtype=np.float32)
        assert g == _expected_episode(want.adjacency, want.inbox, want.in_degree)
        np.testing.assert_allclose(scores, want.scores, atol=1e-6)


@pytest.mark.parametrize("binary", [False, True])
def test_embed_matches_the_encoder(client: httpx.Client, encoder: Encoder, binary: bool) -> None:
    texts = [*NEEDS, "", "a short one"]
    r = client.post("/v1/embed", json={"texts": texts, "binary": binary})
    assert r.status_code == 200, r.text
    body = r.json()
    got = _from_b64(body["vectors"]) if binary else np.asarray(body["vectors"], dtype=np.float32)
    assert body["dim"] == encoder.dim and got.shape == (len(texts), encoder.dim)
    np.testing.assert_allclose(got, np.asarray(encoder.encode(texts, use_cache=False)), atol=1e-5)


def test_toposort_matches_ops(client: httpx.Client) -> None:
    rng = np.random.default_rng(11)
    adj = rng.random((4, 6, 6)) < 0.35
    weights = rng.random((4, 6, 6)).astype(np.float32)
    active = np.ones((4, 6), dtype=bool)
    active[2, 4:] = False
    for body, want in (
        ({"graphs": adj.tolist()}, ops.toposort(adj)),
        (
            {"graphs": adj.tolist(), "weights": _b64(weights), "active": active.tolist()},
            ops.toposort(adj, weights=weights, active=active),
        ),
    ):
        r = client.post("/v1/toposort", json=body)
        assert r.status_code == 200, r.text
        got = r.json()["graphs"]
        assert got == [
            {
                "order": want.order[b].tolist(),
                "level": want.level[b].tolist(),
                "removed": np.argwhere(want.removed[b]).tolist(),
                "is_dag": bool(want.is_dag[b]),
            }
            for b in range(4)
        ]
    one = client.post("/v1/toposort", json={"graphs": adj[0].tolist()}).json()["graphs"]
    want1 = ops.toposort(adj[0])
    assert one == [
        {
            "order": want1.order.tolist(),
            "level": want1.level.tolist(),
            "removed": np.argwhere(want1.removed).tolist(),
            "is_dag": bool(want1.is_dag),
        }
    ]


def test_conductor_check_matches_ops(client: httpx.Client) -> None:
    plans = [
        fenced(SIMPLE),
        "no plan here",
        fenced("- step: 1\n  agents:\n    - agent: <coder>\n      ref: [<x>]\n"),
    ]
    r = client.post("/v1/conductor/check", json={"plans": plans, "n_max": [4, 7, 10]})
    assert r.status_code == 200, r.text
    got = r.json()["plans"]
    batch = ops.conductor_check(plans)
    names = {0: "ok", 1: "no_yaml", 2: "parse", 3: "schema", 4: "logic"}
    for b, g in enumerate(got):
        item = batch.item(b)
        assert g["class"] == names[item.error] and g["message"] == item.message and g["tag"] == item.tag
        if item.graph is None:
            assert g["density"] is None and g["layers"] == [] and g["edges"] == []
            continue
        graph = item.graph
        d = ops.conductor_density(graph.n_nodes, graph.n_edges, graph.n_steps, [4, 7, 10][b])
        assert g["density"] == {f: float(getattr(d, f)) for f in g["density"]}
        assert g["layers"] == [list(layer) for layer in graph.layers]
        assert g["edges"] == [[s - graph.base, t - graph.base] for s, t, _ in graph.edges()]
        assert [n["id"] for n in g["nodes"]] == [n.id for n in graph.nodes]
    assert got[0]["class"] == "ok" and got[1]["class"] == "no_yaml" and got[2]["class"] != "ok"


def test_qmix_act_matches_ops_over_two_rounds(client: httpx.Client, checkpoint: Path) -> None:
    params = ops.QMixParams.load(checkpoint)
    rng = np.random.default_rng(5)
    obs = rng.standard_normal((2, 4, 7)).astype(np.float32)
    adj = rng.random((2, 4, 4)) < 0.5
    active = np.ones((2, 4), dtype=bool)
    active[1, 3] = False
    r0 = client.post(
        "/v1/qmix/act", json={"obs": obs.tolist(), "adj": adj.tolist(), "active": active.tolist()}
    )
    assert r0.status_code == 200, r0.text
    want0 = ops.qmix_forward(params, obs, adj, active=active)
    np.testing.assert_allclose(np.asarray(r0.json()["q"]), want0.q, atol=1e-6)
    np.testing.assert_allclose(np.asarray(r0.json()["hidden"]), want0.hidden, atol=1e-6)
    actions = np.where(active, np.asarray(want0.q).argmax(-1), -1)
    assert r0.json()["actions"] == actions.tolist()
    # the client keeps the hidden state: round 1 sends it back (as base64, answered in base64)
    hidden = np.asarray(r0.json()["hidden"], dtype=np.float32)
    body = {
        "obs": _b64(obs),
        "adj": adj.tolist(),
        "hidden": _b64(hidden),
        "active": active.tolist(),
        "binary": True,
    }
    r1 = client.post("/v1/qmix/act", json=body)
    assert r1.status_code == 200, r1.text
    want1 = ops.qmix_forward(params, obs, adj, hidden, active=active)
    np.testing.assert_allclose(_from_b64(r1.json()["q"]), want1.q, atol=1e-6)
    np.testing.assert_allclose(_from_b64(r1.json()["hidden"]), want1.hidden, atol=1e-6)


def test_qmix_without_a_checkpoint_is_503(limited: str) -> None:
    r = httpx.post(limited + "/v1/qmix/act", json={"obs": [[0.0] * 7], "adj": [[False]]})
    assert r.status_code == 503
    assert "--qmix-checkpoint" in r.json()["error"]["message"]
    assert httpx.get(limited + "/health").json()["qmix"] is False


def test_openapi_and_docs(served: tuple[str, Any]) -> None:
    spec = httpx.get(served[0] + "/openapi.json").json()
    for path in ("/v1/route", "/v1/embed", "/v1/toposort", "/v1/conductor/check", "/v1/qmix/act", "/health"):
        assert path in spec["paths"]
    assert "RouteResponse" in spec["components"]["schemas"]
    assert httpx.get(served[0] + "/docs").status_code == 200
    # the op endpoints name the core ops they run, as the op table declares them (the encoder's is no op)
    from toporoute.types.op_table import OPS

    ran = {path: [o["op"] for o in op.get("x-toporoute-ops", [])] for path, item in spec["paths"].items()
           for op in item.values() if "ops" in op.get("tags", [])}  # fmt: skip
    assert ran == {
        "/v1/route": ["toporoute.ops.route", "toporoute.ops.toposort"],
        "/v1/embed": [],
        "/v1/toposort": ["toporoute.ops.toposort"],
        "/v1/conductor/check": ["toporoute.ops.conductor_check", "toporoute.ops.conductor_density"],
        "/v1/qmix/act": ["toporoute.ops.qmix_forward"],
    }
    route_ops = spec["paths"]["/v1/route"]["post"]["x-toporoute-ops"]
    assert route_ops[0]["summary"] == OPS["route"].summary


def test_metrics_count_requests_and_cache(client: httpx.Client) -> None:
    client.post("/v1/embed", json={"texts": ["metrics probe"]})
    client.post("/v1/embed", json={"texts": ["metrics probe"]})
    client.post("/v1/toposort", json={"graphs": [True]})  # one dimension: a 422
    text = client.get("/metrics").text
    assert re.search(r'toporoute_requests_total\{endpoint="/v1/embed",status="200"\} [1-9]', text)
    assert re.search(r'toporoute_requests_total\{endpoint="/v1/toposort",status="422"\} [1-9]', text)
    assert 'toporoute_request_seconds_bucket{endpoint="/v1/embed",le="0.001"}' in text
    hits = float(re.search(r"^toporoute_encoder_cache_hits_total (\S+)$", text, re.MULTILINE).group(1))  # type: ignore[union-attr]
    assert hits >= 1
    assert re.search(r"^toporoute_encoder_cache_misses_total \S+$", text, re.MULTILINE)
    assert "toporoute_batch_size_bucket" in text


def test_concurrent_text_requests_share_encoder_batches(served: tuple[str, Any], encoder: Encoder) -> None:
    url, app = served
    episodes = _text_episodes(24, seed=9)
    histogram = app.state.metrics.batch_size

    def counts() -> tuple[float, float]:
        samples = {s.name: s.value for s in histogram.collect()[0].samples}
        return samples["toporoute_batch_size_count"], samples["toporoute_batch_size_sum"]

    before = counts()

    async def main() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=30) as c:
            rs = await asyncio.gather(
                *(c.post("/v1/route", json={"episodes": [ep], "k_in": 3, "scores": True}) for ep in episodes)
            )
        assert all(r.status_code == 200 for r in rs), [r.text for r in rs if r.status_code != 200]
        return [r.json()["episodes"][0] for r in rs]

    got = asyncio.run(main())
    after = counts()
    batches, routed = after[0] - before[0], after[1] - before[1]
    assert routed == len(episodes)  # every episode went through the Router's batches
    assert batches < len(episodes)  # ... and some requests shared one
    _check_text_routes(got, episodes, Router(encoder, tau=0.3, k_in=3))


# -- limits and errors -------------------------------------------------------------------------------------


def _error(r: httpx.Response, status: int, field: str | None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["field"] == field, err
    assert err["type"] and err["message"]
    assert "Traceback" not in r.text
    return err


def test_limits_name_the_field(limited: str) -> None:
    c = httpx.Client(base_url=limited, timeout=30)
    ep = {"needs": ["a", "b"], "offers": ["c", "d"]}
    _error(c.post("/v1/route", json={"episodes": [ep] * 3}), 422, "episodes")
    big = {"needs": ["a"] * 4, "offers": ["b"] * 4}
    _error(c.post("/v1/route", json={"episodes": [big]}), 422, "episodes[0].needs")
    long = {"needs": ["a", "b"], "offers": ["c", "x" * 41]}
    _error(c.post("/v1/route", json={"episodes": [long]}), 422, "episodes[0].offers[1]")
    _error(
        c.post("/v1/route", json={"episodes": [{"needs": ["a"], "offers": []}]}), 422, "episodes[0].offers"
    )
    _error(c.post("/v1/embed", json={"texts": ["y" * 41]}), 422, "texts[0]")
    q = [[1.0, 0.0], [0.0, 1.0]]
    _error(c.post("/v1/route", json={"episodes": [{"q": q * 2, "k": q * 2}]}), 422, "episodes[0].q")
    _error(
        c.post("/v1/route", json={"episodes": [{"q": q, "k": [[1.0, 0.0, 0.0]] * 2}]}), 422, "episodes[0].k"
    )
    _error(c.post("/v1/route", json={"episodes": [{"q": [[1.0], [0.0, 1.0]], "k": q}]}), 422, "episodes[0].q")
    _error(c.post("/v1/route", json={"episodes": [{"q": q, "k": q}], "tau": 1.5}), 422, "tau")
    _error(c.post("/v1/route", json={"episodes": [{"q": q, "k": q}], "k_in": -1}), 422, "k_in")
    _error(c.post("/v1/route", json={"episodes": [{"q": q, "k": q}], "k_in": 2**40}), 422, "k_in")
    _error(c.post("/v1/route", json={"episodes": [{"q": q, "k": q}], "k_in": 4}), 422, "k_in")  # > max_agents
    huge = {"b64": "", "shape": [2**40, 2**40]}
    _error(c.post("/v1/route", json={"episodes": [{"q": huge, "k": q}]}), 422, "episodes[0].q.shape[0]")
    opts = {"plans": ["x"], "options": {"pool": ["coder"]}}
    _error(c.post("/v1/conductor/check", json=opts), 422, "options.pool")
    _error(c.post("/v1/conductor/check", json={"plans": ["x"], "n_max": 10**30}), 422, "n_max")
    _error(c.post("/v1/route", json={"episodes": [{"q": q, "k": q}, ep]}), 422, "episodes[1]")
    _error(c.post("/v1/route", json={"episodes": [{"q": q, "k": q}], "bogus": 1}), 422, "bogus")
    _error(c.post("/v1/toposort", json={"graphs": [[True, False]]}), 422, "graphs")


def test_non_finite_numbers_are_422(limited: str) -> None:
    c = httpx.Client(base_url=limited, timeout=30)
    raw = b'{"episodes": [{"q": [[1.0, NaN], [0.0, 1.0]], "k": [[1.0, 0.0], [0.0, 1.0]]}]}'
    headers = {"content-type": "application/json"}
    _error(c.post("/v1/route", content=raw, headers=headers), 422, "episodes[0].q[0][1]")
    raw = b'{"episodes": [{"q": [[1.0, 0.0], [0.0, 1.0]], "k": [[1e999, 0.0], [0.0, 1.0]]}]}'
    _error(c.post("/v1/route", content=raw, headers=headers), 422, "episodes[0].k[0][0]")
    bad = np.array([[1.0, np.inf], [0.0, 1.0]], dtype=np.float32)
    body = {"episodes": [{"q": _b64(bad), "k": _b64(np.eye(2))}]}
    err = _error(c.post("/v1/route", json=body), 422, "episodes[0].q")
    assert "finite" in err["message"]
    short = {"b64": base64.b64encode(b"\0" * 12).decode(), "shape": [2, 2]}
    _error(
        c.post("/v1/route", json={"episodes": [{"q": short, "k": _b64(np.eye(2))}]}), 422, "episodes[0].q.b64"
    )


def test_body_over_the_limit_is_413(limited: str) -> None:
    c = httpx.Client(base_url=limited, timeout=30)
    body = {"texts": ["z" * 30] * 200}  # about 6.6 kB > 4096
    _error(c.post("/v1/embed", json=body), 413, "body")

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked, counted as it arrives
        yield b'{"texts": ['
        for _ in range(300):
            yield b'"zzzzzzzzzzzzzzzzzzzz",'
        yield b'"z"]}'

    _error(c.post("/v1/embed", content=chunks(), headers={"content-type": "application/json"}), 413, "body")
    _error(
        c.post("/v1/embed", content=b"{not json", headers={"content-type": "application/json"}), 400, "body"
    )
    assert c.get("/health").status_code == 200  # still serving


def test_auth(served: tuple[str, Any], records: _Records) -> None:
    url = served[0]
    body = {"texts": ["auth probe"]}
    for path, method in (("/v1/embed", "post"), ("/metrics", "get")):
        kwargs: dict[str, Any] = {"json": body} if method == "post" else {}
        no = httpx.request(method, url + path, **kwargs)
        _error(no, 401, None)
        assert no.headers["www-authenticate"] == "Bearer"
        wrong = httpx.request(
            method, url + path, headers={"Authorization": "Bearer " + TOKEN[:-1] + "x"}, **kwargs
        )
        _error(wrong, 401, None)
        basic = httpx.request(method, url + path, headers={"Authorization": "Basic " + TOKEN}, **kwargs)
        _error(basic, 401, None)
        assert httpx.request(method, url + path, headers=AUTH, **kwargs).status_code == 200
    assert httpx.get(url + "/health").status_code == 200
    assert records.lines, "the server's logs were not captured"
    assert TOKEN not in records.text() and TOKEN[:-1] not in records.text()


def test_non_loopback_needs_a_token_or_allow_remote() -> None:
    from toporoute.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError) as info:
        ServeConfig(host="0.0.0.0")
    assert info.value.arg == "host"
    assert ServeConfig(host="0.0.0.0", allow_remote=True).allow_remote
    assert TOKEN not in repr(ServeConfig(host="0.0.0.0", token=TOKEN))


def test_unexpected_error_is_a_generic_500_and_the_server_goes_on(
    client: httpx.Client, served: tuple[str, Any], records: _Records, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = served[1].state.service

    def broken(req: Any) -> Any:
        raise RuntimeError("internal detail that must stay in the server log")

    monkeypatch.setattr(service, "toposort", broken)
    r = client.post("/v1/toposort", json={"graphs": [[False]]})
    err = _error(r, 500, None)
    assert "internal detail" not in r.text and "RuntimeError" not in r.text
    request_id = r.headers["x-request-id"]
    assert request_id in err["message"]
    log = records.text()
    assert request_id in log and "internal detail" in log and "Traceback" in log  # logged server-side
    monkeypatch.undo()
    assert client.post("/v1/toposort", json={"graphs": [[False]]}).status_code == 200


# -- a non-Python client -----------------------------------------------------------------------------------


def test_curl_call(served: tuple[str, Any], encoder: Encoder) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed: the non-Python client check needs it")
    episode = {"needs": NEEDS, "offers": OFFERS}
    out = subprocess.run(
        [
            curl, "-sS", "--fail-with-body", "-X", "POST", served[0] + "/v1/route",
            "-H", f"Authorization: Bearer {TOKEN}", "-H", "Content-Type: application/json",
            "-d", json.dumps({"episodes": [episode], "scores": True}),
        ],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    got = json.loads(out.stdout)["episodes"]
    _check_text_routes(got, [episode], Router(encoder))


# -- graceful shutdown -------------------------------------------------------------------------------------


def test_sigterm_finishes_requests_in_flight_and_refuses_new_ones(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "TOPOROUTE_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "toporoute", "serve", "--port", "0", "--graceful-timeout", "60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        port = None
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r"running on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        assert port is not None, "".join(lines)
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
        reader.start()
        url = f"http://127.0.0.1:{port}"
        started = threading.Barrier(4)
        results: list[httpx.Response | BaseException] = []

        def slow_request(i: int) -> None:
            def body() -> Iterator[bytes]:  # the upload takes about 3 s: the request is in flight meanwhile
                yield b'{"graphs": '
                started.wait()
                for _ in range(15):
                    time.sleep(0.2)
                    yield b" "
                yield json.dumps([[False, True], [False, False]]).encode() + b"}"

            try:
                results.append(
                    httpx.post(
                        url + "/v1/toposort",
                        content=body(),
                        headers={**AUTH, "content-type": "application/json"},
                        timeout=60,
                    )
                )
            except BaseException as exc:  # noqa: BLE001 - checked below
                results.append(exc)

        clients = [threading.Thread(target=slow_request, args=(i,)) for i in range(3)]
        for t in clients:
            t.start()
        started.wait()
        time.sleep(1.0)  # the server has accepted the three connections and read their headers
        proc.send_signal(signal.SIGTERM)
        refused = False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not refused:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                time.sleep(0.05)
            except (ConnectionRefusedError, ConnectionResetError):
                # refused, or reset while waiting in the backlog of the listener as it closed: not accepted
                refused = True
        in_flight = sum(t.is_alive() for t in clients)
        for t in clients:
            t.join(60)
        assert refused, "new connections were still accepted after SIGTERM"
        assert in_flight > 0, "the slow requests finished before the listener closed: nothing was in flight"
        assert len(results) == 3
        for r in results:
            assert isinstance(r, httpx.Response), repr(r)
            assert r.status_code == 200, r.text
            assert r.json()["graphs"][0]["order"] == [0, 1]
        assert proc.wait(60) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert TOKEN not in "".join(lines)


def test_the_server_never_imports_the_methods_or_the_llm_layer(tmp_path: Path) -> None:
    code = (
        "import sys, toporoute.serve, toporoute.serve.server; "
        "print(sorted(m for m in sys.modules if m.startswith(('toporoute.methods', 'toporoute.llm', 'toporoute.runtime'))))"
    )
    out = run_python(code, tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- the service as other systems see it: HTTP semantics, the schema, the docs page, the command ----------------


def _spec(url: str) -> dict[str, Any]:
    return httpx.get(url + "/openapi.json").json()


def test_405_names_the_allowed_methods_on_every_path(served: tuple[str, Any]) -> None:
    url = served[0]
    paths = _spec(url)["paths"]
    assert len(paths) == 8
    for path, item in paths.items():
        allowed = {m.upper() for m in item}
        for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "TRACE"):
            if method in allowed:
                continue
            r = httpx.request(method, url + path, headers=AUTH)
            err = _error(r, 405, None)
            assert err["type"] == "method_not_allowed"
            assert {m.strip() for m in r.headers["allow"].split(",")} == allowed, (path, method)


def test_error_types_are_one_documented_snake_case_scheme(served: tuple[str, Any], limited: str) -> None:
    from toporoute.serve.schemas import ERROR_TYPES

    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", t) for t in ERROR_TYPES)
    spec = _spec(served[0])
    assert spec["components"]["schemas"]["ErrorBody"]["properties"]["type"]["enum"] == list(ERROR_TYPES)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(f"`{t}`" in readme for t in ERROR_TYPES), "the README's error table names every type"
    c = httpx.Client(base_url=limited, timeout=30)
    q = [[1.0, 0.0], [0.0, 1.0]]
    json_body = {"content-type": "application/json"}
    cases = [
        (c.post("/v1/embed", content=b"{", headers=json_body), 400, "invalid_json"),
        (c.get("/nowhere"), 404, "not_found"),
        (c.put("/v1/embed"), 405, "method_not_allowed"),
        (c.post("/v1/embed", json={"texts": ["z" * 30] * 200}), 413, "body_too_large"),
        (c.post("/v1/embed", json={"texts": "one"}), 422, "validation_error"),
        (c.post("/v1/embed", json={"texts": ["a"], "binary": 0}), 422, "validation_error"),  # no bool
        (c.post("/v1/route", json={"episodes": [], "k_in": -1}), 422, "out_of_range"),
        (c.post("/v1/route", json={"episodes": [], "k_in": 4}), 422, "out_of_range"),  # > max_agents
        (c.post("/v1/route", json={"episodes": [{"q": q, "k": [[1e39, 0.0], [0.0, 1.0]]}]}), 422, "out_of_range"),
        (c.post("/v1/route", content=b'{"episodes": [{"q": [[NaN]], "k": [[1.0]]}]}', headers=json_body), 422,
         "non_finite"),
        (c.post("/v1/route", json={"episodes": [{"q": q, "k": [[1.0, 0.0]]}]}), 422, "shape_mismatch"),
        (c.post("/v1/route", json={"episodes": [{"q": q, "k": q}, {"needs": ["a"], "offers": ["b"]}]}), 422,
         "invalid_argument"),
        (c.post("/v1/qmix/act", json={"obs": [[0.0]], "adj": [[False]]}), 503, "qmix_unavailable"),
    ]  # fmt: skip
    for r, status, type_ in cases:
        assert r.status_code == status, r.text
        assert r.json()["error"]["type"] == type_, r.text
    no_token = httpx.post(served[0] + "/v1/embed", json={"texts": ["a"]})
    assert no_token.json()["error"]["type"] == "unauthorized"


def test_text_and_embeddings_in_one_episode_name_the_problem(limited: str) -> None:
    for episode in (
        {"needs": ["a"], "offers": ["b"], "q": [[1.0]]},
        {"needs": ["a"], "q": [[1.0]]},
        {"offers": ["b"], "k": [[1.0]], "q": [[1.0]]},
    ):
        r = httpx.post(limited + "/v1/route", json={"episodes": [episode]})
        err = _error(r, 422, "episodes[0]")
        assert "either texts (needs, offers) or embeddings (q, k), not both" in err["message"], err
        assert "Field required" not in err["message"]


def _validator(spec: dict[str, Any], name: str) -> Any:
    jsonschema_rs = pytest.importorskip("jsonschema_rs", reason="jsonschema-rs comes with schemathesis")
    return jsonschema_rs.Draft202012Validator(
        {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}
    )


def test_the_schema_declares_the_limits_the_server_checks(limited: str) -> None:
    """Around each limit of the ``limited`` server (3 agents, 2 episodes, 40 characters, no checkpoint): the
    schema admits a body exactly when the server accepts it."""
    from toporoute.types.conductor_topology import ROLES

    spec = _spec(limited)
    two = {"needs": ["a", "b"], "offers": ["c", "d"]}
    q2 = [[1.0, 0.0], [0.0, 1.0]]
    pool = list(ROLES)
    bodies: dict[str, list[dict[str, Any]]] = {
        "/v1/route": [
            {"episodes": [two], "k_in": 3},
            {"episodes": [two], "k_in": 4},
            {"episodes": [two, two]},
            {"episodes": [two, two, two]},
            {"episodes": [{"needs": ["a"] * 3, "offers": ["b"] * 3}]},
            {"episodes": [{"needs": ["a"] * 4, "offers": ["b"] * 4}]},
            {"episodes": [{"needs": [], "offers": []}]},
            {"episodes": [{"needs": ["x" * 40], "offers": ["y"]}]},
            {"episodes": [{"needs": ["x" * 41], "offers": ["y"]}]},
            {"episodes": [{"q": q2, "k": q2}], "tau": 1.0},
            {"episodes": [{"q": q2, "k": q2}], "tau": 1.01},
            {"episodes": [{"q": [[1.0]] * 4, "k": [[1.0]] * 4}]},
            {"episodes": [{"q": [[3.4e38]], "k": [[1.0]]}]},
            {"episodes": [{"q": [[3.5e38]], "k": [[1.0]]}]},
            {"episodes": [{"q": {"b64": "AACAPw==", "shape": [1, 1]}, "k": [[1.0]]}]},
            {"episodes": [{"q": {"b64": "AACAP", "shape": [1, 1]}, "k": [[1.0]]}]},
            {"episodes": [{"q": {"b64": "AACAPw==", "shape": [1, 1, 1]}, "k": [[1.0]]}]},
            {"episodes": [{"q": q2, "k": q2}, two]},
        ],
        "/v1/embed": [{"texts": ["x" * 40]}, {"texts": ["x" * 41]}, {"texts": []}],
        "/v1/toposort": [
            {"graphs": [[False]]},
            {"graphs": []},
            {"graphs": [[]]},
            {"graphs": [[[False] * 3] * 3] * 2},
            {"graphs": [[[False] * 3] * 3] * 3},
            {"graphs": [[False] * 4] * 4},
            {"graphs": [[False, True], [False, False]], "weights": [[0.0, 1.0], [0.0, 0.0]]},
            {"graphs": [[False, True], [False, False]], "weights": [[0.0, -1.0], [0.0, 0.0]]},
        ],
        "/v1/conductor/check": [
            {"plans": ["x"], "options": {"pool": pool}},
            {"plans": ["x"], "options": {"pool": [*pool, "a-b c"]}},
            {"plans": ["x"], "options": {"pool": [*pool, "2nd"]}},
            {"plans": ["x"], "options": {"pool": [*pool, "x_y"]}},
            {"plans": ["x"], "options": {"pool": ["coder", "tester"]}},
            {"plans": ["x"], "options": {"pool": [*pool, "coder"]}},
            {"plans": ["x", "y"]},
            {"plans": ["x", "y", "z"]},
            {"plans": ["x"], "n_max": [4]},
            {"plans": ["x"], "n_max": 0},
        ],
    }
    validators = {
        path: _validator(spec, spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]
                         ["schema"]["$ref"].rsplit("/", 1)[-1])
        for path in bodies
    }  # fmt: skip
    for path, cases in bodies.items():
        for body in cases:
            r = httpx.post(limited + path, json=body, timeout=30)
            admitted = validators[path].is_valid(body)
            assert admitted == (r.status_code == 200), (path, body, admitted, r.status_code, r.text[:300])


def test_qmix_is_in_the_schema_only_with_a_checkpoint(served: tuple[str, Any], limited: str) -> None:
    with_checkpoint = _spec(served[0])["paths"]["/v1/qmix/act"]["post"]
    assert "503" in with_checkpoint["responses"]
    assert with_checkpoint["responses"]["503"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"
    }
    assert "/v1/qmix/act" not in _spec(limited)["paths"]
    assert httpx.post(limited + "/v1/qmix/act", json={"obs": [[0.0]], "adj": [[False]]}).status_code == 503


def test_security_scheme_operation_ids_and_descriptions(served: tuple[str, Any], limited: str) -> None:
    spec = _spec(served[0])
    assert spec["components"]["securitySchemes"] == {
        "bearer": {"type": "http", "scheme": "bearer", "description": ANY_TEXT}
    }
    ids = {}
    for path, item in spec["paths"].items():
        for method, op in item.items():
            ids[(method.upper(), path)] = op["operationId"]
            assert op["description"].strip(), (method, path)
            assert op.get("security") == (None if path == "/health" else [{"bearer": []}]), (method, path)
    assert ids == {
        ("GET", "/health"): "health",
        ("GET", "/metrics"): "metrics",
        ("POST", "/v1/route"): "route",
        ("POST", "/v1/embed"): "embed",
        ("POST", "/v1/embeddings"): "create_embeddings",
        ("POST", "/v1/toposort"): "toposort",
        ("POST", "/v1/conductor/check"): "conductor_check",
        ("POST", "/v1/qmix/act"): "qmix_act",
    }
    undescribed = [
        f"{name}.{prop}"
        for name, model in spec["components"]["schemas"].items()
        for prop, sub in model.get("properties", {}).items()
        if not sub.get("description")
    ]
    assert not undescribed
    assert sum(len(m.get("properties", {})) for m in spec["components"]["schemas"].values()) > 75
    open_spec = _spec(limited)  # no token: nothing to declare
    assert "securitySchemes" not in open_spec["components"]
    assert all("security" not in op for item in open_spec["paths"].values() for op in item.values())


class _AnyText:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)


ANY_TEXT = _AnyText()


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_work_offline(served: tuple[str, Any], page: str) -> None:
    pytest.importorskip("fastapi_offline", reason="the serve extra's fastapi-offline ships the page's assets")
    url = served[0]
    r = httpx.get(url + page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert not re.search(r"(?:src|href)=['\"]?(?:https?:)?//", r.text), "the page loads something remotely"
    quoted = r"['\"]([^'\"]+)['\"]"
    assets = re.findall(r"(?:src|href)=" + quoted, r.text) + re.findall(r"url: ?" + quoted, r.text)
    assert any(a.endswith(".js") for a in assets), r.text
    for asset in assets:
        got = httpx.get(url + asset)
        assert got.status_code == 200 and got.content, asset
    assert "/openapi.json" in r.text


def test_a_busy_port_is_one_error_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
        env.pop("TOPOROUTE_TOKEN", None)
        out = subprocess.run(
            [sys.executable, "-m", "toporoute", "serve", "--port", str(port), "--log-level", "warning"],
            env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
        )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("toporoute: error: "), out.stderr
    assert f"127.0.0.1:{port}" in lines[-1] and "--port" in lines[-1], lines[-1]
    assert "Traceback" not in out.stderr
