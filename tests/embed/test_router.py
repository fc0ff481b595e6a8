"""The text-level Router on the real encoder: agreement with the op it wraps, batching, ragged episodes,
caching, thread safety, the coalescing async entry, and bad input."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import _inputs as inp
import numpy as np
import pytest

from toporoute import errors, ops
from toporoute.embed import Encoder, Router

NEEDS, OFFERS = inp.NEEDS, inp.OFFERS


def _episodes(n: int, seed: int = 0) -> tuple[list[list[str]], list[list[str]]]:
    rng = np.random.default_rng(seed)
    qs, ks = [], []
    for e in range(n):
        size = int(rng.integers(1, 6))
        qs.append([f"{NEEDS[int(rng.integers(4))]} for task {e}" for _ in range(size)])
        ks.append([f"{OFFERS[int(rng.integers(4))]} for task {e}" for _ in range(size)])
    return qs, ks


def _expected(encoder: Encoder, q: list[str], k: list[str], tau: float, k_in: int):
    return ops.route(
        encoder.encode(q, use_cache=False), encoder.encode(k, use_cache=False), tau=tau, k_in=k_in
    )


@pytest.fixture
def cache_dir(encoder: Encoder) -> Path:
    """The session encoder's cache: a new encoder loads the graph exported there instead of exporting again."""
    return encoder.onnx_path.parent.parent


def _assert_same(got, want) -> None:
    np.testing.assert_array_equal(got.adjacency, want.adjacency)
    np.testing.assert_array_equal(got.inbox, want.inbox)
    np.testing.assert_array_equal(got.in_degree, want.in_degree)
    np.testing.assert_allclose(got.scores, want.scores, atol=1e-6)


def test_one_episode_matches_encode_then_route(encoder: Encoder) -> None:
    router = Router(encoder, tau=0.3, k_in=2)
    got = router.route_texts(NEEDS, OFFERS)
    assert got.scores.shape == (4, 4) and got.inbox.shape == (4, 2)
    _assert_same(got, _expected(encoder, NEEDS, OFFERS, 0.3, 2))
    assert got.adjacency.any()  # these descriptors do match: the test is not vacuous
    assert not np.diagonal(got.adjacency).any()


@pytest.mark.parametrize("k_in", [0, 1, 3])
def test_many_ragged_episodes_match_per_episode_routing(encoder: Encoder, k_in: int) -> None:
    qs, ks = _episodes(12)
    router = Router(encoder, tau=0.25, k_in=k_in)
    got = router.route_texts(qs, ks)
    n_max = max(len(q) for q in qs)
    assert got.adjacency.shape == (12, n_max, n_max)
    for b, (q, k) in enumerate(zip(qs, ks)):
        n = len(q)
        want = _expected(encoder, q, k, 0.25, k_in)
        np.testing.assert_array_equal(got.adjacency[b, :n, :n], want.adjacency)
        np.testing.assert_array_equal(got.in_degree[b, :n], want.in_degree)
        np.testing.assert_array_equal(got.inbox[b, :n, : want.inbox.shape[1]], want.inbox)
        assert not got.adjacency[b, n:].any() and not got.adjacency[b, :, n:].any()


def test_one_batched_encoder_call_for_all_episodes(cache_dir: Path) -> None:
    enc = Encoder.default(cache_dir=cache_dir)
    calls = []
    forward = enc.forward
    enc.forward = lambda texts: calls.append(len(texts)) or forward(texts)
    router = Router(enc)
    qs, ks = _episodes(20)
    router.route_texts(qs, ks)
    distinct = len({t for ep in (*qs, *ks) for t in ep})
    assert calls == [distinct]
    first = router.route_texts(qs, ks)
    assert calls == [distinct, 0]  # the warm round computes nothing
    assert enc.cache_info().hits == distinct
    _assert_same(first, Router(Encoder.default(cache_dir=cache_dir, cache_size=0)).route_texts(qs, ks))


def test_empty_descriptor_gets_no_edges(encoder: Encoder) -> None:
    router = Router(encoder, tau=-1.0, k_in=0)  # every pair of non-empty descriptors would connect
    got = router.route_texts(
        ["I need a plan", "", "I need code"], ["I provide a plan", "I provide code", " "]
    )
    assert not got.adjacency[:, 1].any()  # agent 1 has no need: receives nothing
    assert not got.adjacency[2].any()  # agent 2 offers nothing: sends nothing
    assert got.adjacency[0, 2]


def test_small_cache_and_concurrent_threads(cache_dir: Path) -> None:
    enc = Encoder.default(cache_dir=cache_dir, cache_size=64)  # one call fits; all of them do not: eviction
    router = Router(enc, tau=0.2, k_in=2)
    batches = [_episodes(6, seed=s) for s in range(8)]
    uncached = Router(Encoder.default(cache_dir=cache_dir, cache_size=0), tau=0.2, k_in=2)
    want = [uncached.route_texts(*b) for b in batches]
    results: dict[int, object] = {}
    failures = []

    def work(i: int) -> None:
        try:
            for _ in range(3):
                results[i] = router.route_texts(*batches[i])
        except Exception as exc:  # noqa: BLE001 - reported by the assert below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    for i, w in enumerate(want):
        _assert_same(results[i], w)
    assert enc.cache_info().evictions > 0


def test_aroute_texts_coalesces_callers_and_keeps_the_loop_free(cache_dir: Path) -> None:
    enc = Encoder.default(cache_dir=cache_dir, cache_size=0)
    calls = []
    forward = enc.forward
    enc.forward = lambda texts: calls.append(len(texts)) or forward(texts)
    router = Router(enc, tau=0.25, k_in=2, max_wait=0.05)
    qs, ks = _episodes(16, seed=3)
    want = [router.route_texts(q, k) for q, k in zip(qs, ks)]
    calls.clear()

    async def main():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        tick = asyncio.create_task(ticker())
        got = await asyncio.gather(*(router.aroute_texts(q, k) for q, k in zip(qs, ks)))
        stop.set()
        await tick
        return got, ticks

    got, ticks = asyncio.run(main())
    assert len(calls) < len(qs)  # shared batches, not one encoder call per caller
    assert ticks > 1  # the event loop kept running while the batch was encoded
    for g, w in zip(got, want):
        _assert_same(g, w)


def test_aroute_texts_errors_reach_only_their_caller(encoder: Encoder) -> None:
    router = Router(encoder, max_wait=0.02)

    async def main():
        return await asyncio.gather(
            router.aroute_texts(NEEDS, OFFERS),
            router.aroute_texts(NEEDS, OFFERS[:2]),
            router.aroute_texts([NEEDS], [OFFERS]),
            return_exceptions=True,
        )

    ok, bad, ok2 = asyncio.run(main())
    assert isinstance(bad, errors.InvalidArgumentError)
    _assert_same(ok, router.route_texts(NEEDS, OFFERS))
    assert ok2.adjacency.shape == (1, 4, 4)


@pytest.mark.parametrize(
    "queries, keys, arg",
    [
        ("I need", ["x"], "queries"),
        (["a", "b"], ["a"], "keys"),
        ([["a", "b"]], [["a"]], "keys[0]"),
        ([["a"], "b"], [["a"], ["b"]], "queries"),
        (["a", None], ["a", "b"], "queries[1]"),
        ([["a", 1]], [["a", "b"]], "queries[0][1]"),
        (None, None, "queries"),
    ],
)
def test_bad_input_is_a_clear_error(encoder: Encoder, queries, keys, arg: str) -> None:
    with pytest.raises(errors.InvalidArgumentError) as e:
        Router(encoder).route_texts(queries, keys)
    assert e.value.arg == arg


def test_bad_router_settings(encoder: Encoder) -> None:
    with pytest.raises(errors.OutOfRangeError, match="tau"):
        Router(encoder, tau=1.5)
    with pytest.raises(errors.OutOfRangeError, match="k_in"):
        Router(encoder, k_in=-1)


def test_no_agents(encoder: Encoder) -> None:
    got = Router(encoder).route_texts([], [])
    assert got.adjacency.shape == (0, 0)
    got = Router(encoder).route_texts([[], ["a"]], [[], ["b"]])
    assert got.adjacency.shape == (2, 1, 1) and not got.adjacency.any()


def test_toporoute_exports_router_lazily() -> None:
    import toporoute

    assert toporoute.Router is Router and toporoute.Encoder is Encoder


def _host(x) -> np.ndarray:
    return x.cpu().numpy() if hasattr(x, "cpu") else x.get()


@pytest.mark.cuda
def test_gpu_encoder_and_router_match_cpu(tmp_path: Path) -> None:
    qs, ks = _episodes(8, seed=5)
    gpu = Router(Encoder.default(cache_dir=tmp_path, device="cuda"), tau=0.25, k_in=2)
    cpu = Router(Encoder.default(cache_dir=tmp_path), tau=0.25, k_in=2)
    texts = [t for ep in qs for t in ep] + [""]
    np.testing.assert_allclose(_host(gpu.encoder.encode(texts)), cpu.encoder.encode(texts), atol=1e-5)
    got, want = gpu.route_texts(qs, ks), cpu.route_texts(qs, ks)
    near_tau = np.abs(want.scores - 0.25) < 1e-5
    assert np.array_equal(_host(got.adjacency) | near_tau, want.adjacency | near_tau)
    np.testing.assert_allclose(_host(got.scores), want.scores, atol=1e-5)
