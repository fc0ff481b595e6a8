"""toporoute.client against a real server on a loopback port: every endpoint equals the in-process op,
errors arrive as toporoute.errors subclasses carrying the server's field, and the token is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests._conductor_plans import fenced, plan_text
from tests._serve import live_server
from toporoute import errors, ops
from toporoute.client import (
    AsyncClient,
    AuthenticationError,
    Client,
    RoutedEpisode,
    ServiceUnavailableError,
    raise_for_error,
)
from toporoute.serve import ServeConfig
from toporoute.types.qmix_params import QMixConfig, QMixParams

TOKEN = "s3cret-token"
NEEDS = [
    ["unit tests for the parser", "a specification of the API", "a code review"],
    ["a bug report", "a fix for the failing test"],
]
OFFERS = [
    ["the API specification", "parser code", "test results"],
    ["a patch that fixes the test", "a bug triage"],
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qmix") / "agents.safetensors"
    QMixParams.random(QMixConfig(), seed=7).save(path)
    return path


@pytest.fixture(scope="module")
def url(checkpoint: Path) -> Iterator[str]:
    with live_server(ServeConfig(port=0, qmix_checkpoint=checkpoint)) as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[Client]:
    with Client(url) as c:
        yield c


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _assert_episode(ep: RoutedEpisode, routes: ops.Routes, b: int, n: int) -> None:
    """``ep`` equals episode ``b`` of in-process ``routes`` trimmed to ``n`` agents and its ``ops.toposort``."""
    adj = np.asarray(routes.adjacency)[b, :n, :n]
    order = ops.toposort(adj[None])
    np.testing.assert_array_equal(ep.adjacency(), adj)
    np.testing.assert_array_equal(ep.in_degree, np.asarray(routes.in_degree)[b, :n])
    for i, inbox in enumerate(ep.inboxes):
        want = np.asarray(routes.inbox)[b, i]
        np.testing.assert_array_equal(inbox, want[want >= 0])
    np.testing.assert_array_equal(ep.order, order.order[0])
    np.testing.assert_array_equal(ep.levels, order.level[0])
    removed = np.zeros((n, n), dtype=bool)
    if len(ep.removed):
        removed[ep.removed[:, 0], ep.removed[:, 1]] = True
    np.testing.assert_array_equal(removed, order.removed[0])


@pytest.mark.parametrize("binary", [True, False])
def test_route_embeddings_equal_in_process(client: Client, binary: bool) -> None:
    q = _rng(0).standard_normal((4, 8, 16)).astype(np.float32)
    k = _rng(1).standard_normal((4, 8, 16)).astype(np.float32)
    eps = client.route(q, k, tau=0.1, k_in=2, scores=True, binary=binary)
    routes = ops.route(q, k, tau=0.1, k_in=2)
    assert len(eps) == 4
    for b, ep in enumerate(eps):
        _assert_episode(ep, routes, b, 8)
        assert ep.scores is not None and ep.scores.dtype == np.float32
        np.testing.assert_allclose(ep.scores, np.asarray(routes.scores)[b], rtol=0, atol=1e-6)
    one = client.route(q[0], k[0], tau=0.1, k_in=2)
    assert isinstance(one, RoutedEpisode) and one.scores is None
    np.testing.assert_array_equal(one.edges, eps[0].edges)
    nested = client.route(q[0].tolist(), k[0].tolist(), tau=0.1, k_in=2)  # nested lists: one episode too
    np.testing.assert_array_equal(nested.edges, eps[0].edges)
    with pytest.raises(errors.ShapeError) as info:
        client.route(q[0, 0], k[0, 0])
    assert info.value.arg == "q"


def test_route_ragged_embeddings(client: Client) -> None:
    q = [_rng(2).standard_normal((n, 8)).astype(np.float32) for n in (3, 6)]
    k = [_rng(3).standard_normal((n, 8)).astype(np.float32) for n in (3, 6)]
    eps = client.route(q, k, tau=0.0, k_in=3)
    for ep, qb, kb in zip(eps, q, k):
        routes = ops.route(qb[None], kb[None], tau=0.0, k_in=3)
        _assert_episode(ep, routes, 0, qb.shape[0])


def test_route_texts_equal_router(client: Client, encoder) -> None:
    from toporoute.embed import Router

    eps = client.route(needs=NEEDS, offers=OFFERS, tau=0.2, k_in=2)
    routes = Router(encoder, 0.2, 2).route_texts(NEEDS, OFFERS)
    assert len(eps) == len(NEEDS)
    for b, ep in enumerate(eps):
        _assert_episode(ep, routes, b, len(NEEDS[b]))
    one = client.route(needs=NEEDS[0], offers=OFFERS[0], tau=0.2, k_in=2)
    np.testing.assert_array_equal(one.edges, eps[0].edges)


def test_embed_equals_encoder(client: Client, encoder) -> None:
    texts = ["write unit tests", "review the patch", ""]
    want = encoder.encode(texts)
    for binary in (True, False):
        got = client.embed(texts, binary=binary)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_toposort_equals_op(client: Client) -> None:
    graphs = _rng(4).random((3, 6, 6)) < 0.35
    want = ops.toposort(graphs)
    got = client.toposort(graphs)
    assert isinstance(got, ops.Order)
    for field in ("order", "level", "removed", "is_dag"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
    single = client.toposort(graphs[1])
    np.testing.assert_array_equal(single.order, want.order[1])
    assert bool(single.is_dag) == bool(want.is_dag[1])


def test_conductor_check_equals_ops(client: Client) -> None:
    good = fenced(plan_text((1, [("CODER", None), ("TESTER", None)]), (2, [("REVIEWER", ["step1_agent1"])])))
    plans = [good, "no plan here"]
    got = client.conductor_check(plans, n_max=7)
    batch = ops.conductor_check(plans)
    assert [p["class"] for p in got][1] != "ok"
    item = batch.item(0)
    assert got[0]["message"] == item.message and got[1]["message"] == batch.item(1).message
    if item.graph is not None:
        d = ops.conductor_density(batch.nodes[:1], batch.edges[:1], batch.steps[:1], np.array([7]))
        assert got[0]["density"]["reward"] == pytest.approx(float(d.reward[0]))
        assert got[0]["layers"] == [list(layer) for layer in item.graph.layers]
    else:
        assert got[0]["density"] is None
    assert client.conductor_check(good, n_max=7) == got[0]


def test_qmix_act_equals_forward(client: Client, checkpoint: Path) -> None:
    params = QMixParams.load(checkpoint)
    cfg = params.config
    obs = _rng(5).standard_normal((2, cfg.n_agents, cfg.obs_dim)).astype(np.float32)
    adj = _rng(6).random((2, cfg.n_agents, cfg.n_agents)) < 0.5
    step, actions = client.qmix_act(obs, adj)
    want = ops.qmix_forward(params, obs, adj)
    np.testing.assert_allclose(step.q, want.q, rtol=0, atol=1e-5)
    np.testing.assert_allclose(step.hidden, want.hidden, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(actions, np.argmax(np.asarray(want.q), axis=-1))
    step2, _ = client.qmix_act(obs, adj, hidden=step.hidden, binary=False)
    want2 = ops.qmix_forward(params, obs, adj, want.hidden)
    np.testing.assert_allclose(step2.q, want2.q, rtol=0, atol=1e-5)


def test_health_and_metrics(client: Client) -> None:
    health = client.health()
    assert health["status"] == "ok" and health["qmix"] is True and health["encoder"]
    client.route(needs=NEEDS[0], offers=OFFERS[0])
    text = client.metrics()
    assert "toporoute_requests_total" in text and 'endpoint="/v1/route"' in text


def test_errors_carry_field_and_type(client: Client) -> None:
    q = np.ones((4, 8), dtype=np.float32)
    with pytest.raises(errors.InvalidArgumentError) as info:
        client.route(q, np.ones((5, 8), dtype=np.float32))
    assert info.value.arg == "episodes[0].k" and info.value.status == 422  # type: ignore[attr-defined]
    assert info.value.request_id  # type: ignore[attr-defined]
    with pytest.raises(errors.InvalidArgumentError) as info:
        client.route(needs=["x" * 5000], offers=["y"])
    assert info.value.arg is not None and info.value.arg.startswith("episodes[0]")
    with pytest.raises(errors.ShapeError) as shape:
        client.toposort(np.zeros((2, 2, 3), dtype=bool))
    assert shape.value.arg == "graphs"  # rejected by the client before sending
    with pytest.raises(errors.NonFiniteError):
        client.route(np.full((2, 4), np.nan), np.ones((2, 4)))


def test_server_side_shape_error_class(url: str) -> None:
    import httpx

    body = {"episodes": [{"q": {"b64": "AAAAAA==", "shape": [2, 2]}, "k": [[1.0, 0.0], [0.0, 1.0]]}]}
    with httpx.Client(base_url=url) as http:
        response = http.post("/v1/route", json=body)
    with pytest.raises(errors.ShapeError) as info:
        raise_for_error(response)
    assert info.value.arg == "episodes[0].q.b64"


def test_token_is_sent_and_required(checkpoint: Path) -> None:
    with live_server(ServeConfig(port=0, token=TOKEN)) as base:
        with Client(base) as anonymous:
            assert anonymous.health()["status"] == "ok"
            with pytest.raises(AuthenticationError) as info:
                anonymous.toposort(np.zeros((2, 2), dtype=bool))
            assert info.value.status == 401  # type: ignore[attr-defined]
        with Client(base, token="wrong") as wrong, pytest.raises(AuthenticationError):
            wrong.metrics()
        with Client(base, token=TOKEN) as good:
            assert good.toposort(np.zeros((2, 2), dtype=bool)).is_dag
            assert "toporoute_requests_total" in good.metrics()
            with pytest.raises(ServiceUnavailableError) as info:
                good.qmix_act(np.zeros((3, 51), np.float32), np.zeros((3, 3), bool))
            assert info.value.status in (409, 503)  # type: ignore[attr-defined]


def test_async_client_concurrent_texts(url: str, encoder) -> None:
    from toporoute.embed import Router

    async def main() -> list[RoutedEpisode]:
        async with AsyncClient(url) as c:
            health = await c.health()
            assert health["status"] == "ok"
            return list(
                await asyncio.gather(
                    *(c.route(needs=NEEDS[i % 2], offers=OFFERS[i % 2], tau=0.2, k_in=2) for i in range(16))
                )
            )

    eps = asyncio.run(main())
    router = Router(encoder, 0.2, 2)
    for i, ep in enumerate(eps):
        want = router.route_texts(NEEDS[i % 2], OFFERS[i % 2])
        np.testing.assert_array_equal(ep.adjacency(), np.asarray(want.adjacency))


def test_async_client_raises_the_same_errors(url: str) -> None:
    async def main() -> None:
        async with AsyncClient(url) as c:
            with pytest.raises(errors.InvalidArgumentError) as info:
                await c.route(needs=["a", "b"], offers=["c"])
            assert info.value.arg == "episodes[0].offers" and info.value.status == 422  # type: ignore[attr-defined]
            order = await c.toposort(np.eye(3, k=1, dtype=bool))
            np.testing.assert_array_equal(order.order, [0, 1, 2])

    asyncio.run(main())


def _unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_is_a_toporoute_error_naming_the_url() -> None:
    from toporoute.client import ServiceConnectionError

    base = f"http://127.0.0.1:{_unused_port()}"  # nothing listens there
    with Client(base) as c, pytest.raises(ServiceConnectionError) as info:
        c.toposort(np.zeros((2, 2), dtype=bool))
    err = info.value
    assert f"{base}/v1/toposort" in str(err) and "refused" in str(err).lower()
    assert isinstance(err, errors.ToporouteError) and isinstance(err, ConnectionError)
    assert err.status is None and err.error_type == "connection_error"  # type: ignore[attr-defined]

    async def main() -> None:
        async with AsyncClient(base) as ac:
            with pytest.raises(ServiceConnectionError) as async_info:
                await ac.health()
            assert f"{base}/health" in str(async_info.value)

    asyncio.run(main())


def test_routed_episodes_use_the_python_names_and_keep_the_former_ones(client: Client) -> None:
    import httpx

    ep = client.route(needs=NEEDS[0], offers=OFFERS[0], tau=0.2, k_in=2)
    assert ep.inboxes is ep.inbox and ep.levels is ep.level
    former = {  # what a server before the rename answers
        "episodes": [
            {"edges": [[1, 0]], "inboxes": [[1], []], "in_degree": [1, 0], "order": [1, 0], "levels": [1, 0],
             "removed": []}
        ]
    }  # fmt: skip
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=former))
    with Client("http://old-server", transport=transport) as old:
        got = old.route(needs=["a", "b"], offers=["c", "d"])
    np.testing.assert_array_equal(got.level, [1, 0])
    assert [row.tolist() for row in got.inbox] == [[1], []]
