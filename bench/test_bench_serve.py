"""Loopback load benchmark of ``toporoute serve``: ``/v1/route`` with embeddings (B = 1, N = 8) and with
descriptor texts, against the same work done in process in the same run.

The server is the real CLI (``python -m toporoute serve``) in its own process on a free loopback port; the
clients are httpx ``AsyncClient`` tasks in this process. Every phase has a fixed request count and a duration
cap, so the benchmark stops by itself. Printed: p50/p99 latency and throughput of each phase and the ratios
against in-process:

- embeddings, one client in sequence: p50 latency (target under 1 ms on loopback) vs ``ops.route`` +
  ``ops.toposort`` called directly; measured with a minimal keep-alive HTTP/1.1 socket client (what the service
  adds) and with ``toporoute.client``'s ``Client`` and ``AsyncClient`` (plus httpx's own per-request cost);
- embeddings, 32 concurrent clients: throughput;
- texts (8 agents, every request new descriptors so the encoder works), 32 concurrent clients: throughput vs
  the in-process Router's ``aroute_texts`` from 32 concurrent tasks on the same requests (target >= 0.8x).

The service's answers are checked against the in-process results (equal edges and order).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from _procs import free_port, wait_healthy

from bench._scale import pick
from toporoute import ops
from toporoute.client import AsyncClient, Client, encode_array

CLIENTS = 32
N_AGENTS, DIM = 8, 384
EMBED_SEQUENTIAL = pick(3000, 200)
EMBED_CONCURRENT = pick(6000, 320)
TEXT_REQUESTS = pick(384, 64)
MAX_SECONDS = pick(60.0, 15.0)  # per phase: a slow machine stops here with what it measured

WORDS = [
    "parser",
    "tests",
    "spec",
    "review",
    "patch",
    "bug",
    "api",
    "schema",
    "docs",
    "benchmark",
    "kernel",
    "cache",
    "index",
    "query",
    "plan",
    "graph",
    "proof",
    "summary",
    "data",
    "model",
    "report",
    "fix",
    "trace",
    "log",
    "metric",
    "config",
    "build",
    "deploy",
    "audit",
    "refactor",
]


def _cpu() -> str:
    from toporoute.llm.cpu import cpu_info

    cpu = cpu_info()
    simd = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f in cpu.flags]
    return f"{cpu.model}, {os.cpu_count()} logical CPUs, {' '.join(simd) or 'no AVX2'}"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "python")}
    env.pop("TOPOROUTE_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "toporoute", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning"],
        env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, what="toporoute serve", timeout_s=120)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _texts(n_requests: int, seed: int) -> list[tuple[list[str], list[str]]]:
    """Distinct 8-agent episodes of short descriptors (none repeats, so no request is a cache hit)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(n_requests):
        eps = []
        for kind in ("needs", "offers"):
            eps.append([f"{kind} {r}.{i}: " + " ".join(rng.choice(WORDS, size=6)) for i in range(N_AGENTS)])
        out.append((eps[0], eps[1]))
    return out


async def _load(
    n: int, clients: int, call: Callable[[int], Awaitable[object]], max_seconds: float
) -> tuple[np.ndarray, float, list[object]]:
    """Runs requests ``0..n-1`` from ``clients`` concurrent workers; per-request seconds, wall seconds, results."""
    latencies = np.full(n, np.nan)
    results: list[object] = [None] * n
    next_i = 0
    stop = time.perf_counter() + max_seconds

    async def worker() -> None:
        nonlocal next_i
        while next_i < n and time.perf_counter() < stop:
            i = next_i
            next_i += 1
            t0 = time.perf_counter()
            results[i] = await call(i)
            latencies[i] = time.perf_counter() - t0

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    wall = time.perf_counter() - t0
    done = ~np.isnan(latencies)
    return latencies[done], wall, [r for r, d in zip(results, done) if d]


def _line(what: str, lat: np.ndarray, wall: float) -> str:
    return (
        f"{what}: {len(lat)} requests in {wall:.2f} s = {len(lat) / wall:.0f} req/s, "
        f"p50 {np.percentile(lat, 50) * 1e3:.2f} ms, p99 {np.percentile(lat, 99) * 1e3:.2f} ms"
    )


class _RawHTTP:
    """A minimal HTTP/1.1 keep-alive client over one socket (pre-built request bytes): the latency the service
    itself adds on loopback, without the Python HTTP client's own ~0.5-1 ms per request."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        head = f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        self.sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += self.sock.recv(65536)
        header, _, rest = buf.partition(b"\r\n\r\n")
        lines = header.split(b"\r\n")
        length = next(int(x.split(b":")[1]) for x in lines if x.lower().startswith(b"content-length:"))
        while len(rest) < length:
            rest += self.sock.recv(65536)
        return int(lines[0].split()[1]), rest

    def close(self) -> None:
        self.sock.close()


def _raw_sequential(url: str, bodies: list[bytes], n: int) -> tuple[np.ndarray, list[bytes]]:
    raw = _RawHTTP(url)
    try:
        for i in range(50):
            raw.post("/v1/route", bodies[i % len(bodies)])
        lat = np.empty(n)
        answers = []
        stop = time.perf_counter() + MAX_SECONDS
        for i in range(n):
            t0 = time.perf_counter()
            status, answer = raw.post("/v1/route", bodies[i % len(bodies)])
            lat[i] = time.perf_counter() - t0
            assert status == 200, answer[:300]
            if i < len(bodies):
                answers.append(answer)
            if t0 > stop:
                return lat[: i + 1], answers
        return lat, answers
    finally:
        raw.close()


def test_route_embeddings(server: str) -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((64, N_AGENTS, DIM)).astype(np.float32)
    k = rng.standard_normal((64, N_AGENTS, DIM)).astype(np.float32)

    def in_process(i: int) -> object:
        routes = ops.route(q[i % 64][None], k[i % 64][None], tau=0.0, k_in=3)
        return ops.toposort(routes.adjacency)

    for i in range(50):  # warm-up
        in_process(i)
    lat_local = np.empty(EMBED_SEQUENTIAL)
    for i in range(EMBED_SEQUENTIAL):
        t0 = time.perf_counter()
        in_process(i)
        lat_local[i] = time.perf_counter() - t0

    async def run() -> tuple[tuple[np.ndarray, float, list[object]], tuple[np.ndarray, float, list[object]]]:
        async with AsyncClient(server) as client:

            async def call(i: int) -> object:
                return await client.route(q[i % 64], k[i % 64], tau=0.0, k_in=3)

            await _load(50, 1, call, MAX_SECONDS)  # warm-up: connection, Router, code paths
            sequential = await _load(EMBED_SEQUENTIAL, 1, call, MAX_SECONDS)
            concurrent = await _load(EMBED_CONCURRENT, CLIENTS, call, MAX_SECONDS)
            return sequential, concurrent

    (lat_seq, wall_seq, results), (lat_con, wall_con, _) = asyncio.run(run())
    bodies = [
        json.dumps(
            {
                "episodes": [{"q": encode_array(q[i], True, "q"), "k": encode_array(k[i], True, "k")}],
                "tau": 0.0,
            }
        ).encode()
        for i in range(64)
    ]
    lat_raw, raw_answers = _raw_sequential(server, bodies, EMBED_SEQUENTIAL)
    with Client(server) as sync_client:
        for i in range(50):
            sync_client.route(q[i % 64], k[i % 64], tau=0.0, k_in=3)
        lat_sync = np.empty(EMBED_SEQUENTIAL)
        for i in range(EMBED_SEQUENTIAL):
            t0 = time.perf_counter()
            sync_client.route(q[i % 64], k[i % 64], tau=0.0, k_in=3)
            lat_sync[i] = time.perf_counter() - t0
    for i, answer in enumerate(raw_answers):
        edges = json.loads(answer)["episodes"][0]["edges"]
        assert edges == np.argwhere(results[i].adjacency()).tolist()  # type: ignore[attr-defined]
    for i, ep in enumerate(results[:64]):
        want = ops.route(q[i % 64][None], k[i % 64][None], tau=0.0, k_in=3)
        np.testing.assert_array_equal(ep.adjacency(), np.asarray(want.adjacency)[0])  # type: ignore[attr-defined]

    p50_local, p50_service = np.percentile(lat_local, 50), np.percentile(lat_raw, 50)
    p50_client = np.percentile(lat_seq, 50)
    print(f"\n[info] CPU: {_cpu()}; load average {os.getloadavg()[0]:.1f}; server: python -m toporoute serve")
    print(
        f"[info] {_line('in process, ops.route + ops.toposort, B=1 N=8 D=384', lat_local, lat_local.sum())}"
    )
    print(f"[info] {_line('service, raw HTTP/1.1 keep-alive socket, in sequence', lat_raw, lat_raw.sum())}")
    print(f"[info] {_line('service, toporoute.client.Client (sync), in sequence', lat_sync, lat_sync.sum())}")
    print(f"[info] {_line('service, toporoute.client.AsyncClient, in sequence', lat_seq, wall_seq)}")
    print(f"[info] {_line(f'service, {CLIENTS} concurrent clients', lat_con, wall_con)}")
    print(
        f"[ratio] /v1/route embeddings B=1 N=8: service p50 {p50_service * 1e3:.3f} ms on loopback (target < 1 ms; "
        f"{np.percentile(lat_sync, 50) * 1e3:.3f} ms through the Python Client, {p50_client * 1e3:.3f} ms through "
        f"AsyncClient) vs in process {p50_local * 1e3:.3f} ms = "
        f"{p50_service / p50_local:.0f}x the in-process latency; {CLIENTS} clients {len(lat_con) / wall_con:.0f} req/s"
    )


def test_route_texts(server: str, tmp_path: Path) -> None:
    from toporoute.embed import Encoder, Router

    requests = _texts(TEXT_REQUESTS, seed=1)
    warm = _texts(CLIENTS, seed=2)
    router = Router(Encoder.default(cache_dir=tmp_path), 0.3, 3)

    async def local(reqs: list[tuple[list[str], list[str]]]) -> tuple[np.ndarray, float, list[object]]:
        return await _load(len(reqs), CLIENTS, lambda i: router.aroute_texts(*reqs[i]), MAX_SECONDS)

    async def remote(reqs: list[tuple[list[str], list[str]]]) -> tuple[np.ndarray, float, list[object]]:
        async with AsyncClient(server, timeout=120) as client:
            return await _load(
                len(reqs),
                CLIENTS,
                lambda i: client.route(needs=reqs[i][0], offers=reqs[i][1], tau=0.3, k_in=3),
                MAX_SECONDS,
            )

    asyncio.run(local(warm))
    asyncio.run(remote(warm))
    # Each side has its own encoder cache, cold for `requests` (both see them once, in the same order).
    lat_local, wall_local, local_results = asyncio.run(local(requests))
    lat_remote, wall_remote, remote_results = asyncio.run(remote(requests))
    for want, got in zip(local_results[:16], remote_results[:16]):
        np.testing.assert_array_equal(got.adjacency(), np.asarray(want.adjacency))  # type: ignore[attr-defined]

    rate_local, rate_remote = len(lat_local) / wall_local, len(lat_remote) / wall_remote
    print(f"\n[info] CPU: {_cpu()}; load average {os.getloadavg()[0]:.1f}; server: python -m toporoute serve")
    print(f"[info] {_line(f'in process, Router.aroute_texts, {CLIENTS} tasks, N=8', lat_local, wall_local)}")
    print(f"[info] {_line(f'service, {CLIENTS} concurrent clients, N=8', lat_remote, wall_remote)}")
    print(
        f"[ratio] /v1/route texts N=8 under {CLIENTS} clients: service {rate_remote:.0f} req/s vs in-process Router "
        f"{rate_local:.0f} req/s = {rate_remote / rate_local:.2f}x (target >= 0.8x)"
    )
