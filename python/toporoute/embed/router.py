"""Text-level Router: descriptors in, communication graph out.

``route_texts`` embeds every distinct non-empty text of every episode in one batched encoder call (texts found
in the encoder's LRU cache are not recomputed), then one compiled call pools the new token states into the
cache table and routes all episodes by row index (:func:`toporoute.ops.route_indexed`).

``aroute_texts`` is the asyncio entry: concurrent callers are coalesced into shared batches (at most
``max_wait`` seconds of waiting, at most ``max_batch`` episodes per batch) that run in a worker thread, so an
event loop is never blocked by encoding.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import ops
from ..errors import InvalidArgumentError, NonFiniteError, OutOfRangeError
from ..types.results import Routes
from .cache import ZERO_ROW
from .encoder import Encoder, check_texts

__all__ = ["Router"]

Episodes = list[tuple[list[str], list[str]]]


def _episodes(queries: Any, keys: Any) -> tuple[Episodes, bool]:
    """Normalises one episode (``list[str]``) or many (``list[list[str]]``); returns (episodes, single)."""
    for name, value in (("queries", queries), ("keys", keys)):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise InvalidArgumentError(
                f"{name} must be a list of str (one episode) or a list of lists of str (many); got "
                f"{type(value).__name__}",
                name,
            )
    if len(queries) != len(keys):
        raise InvalidArgumentError(
            f"queries and keys must have the same length; got {len(queries)} and {len(keys)}", "keys"
        )
    nested = [not isinstance(x, str) and isinstance(x, Sequence) for x in (*queries, *keys)]
    if not any(nested):
        return [(check_texts(queries, "queries"), check_texts(keys, "keys"))], True
    if not all(nested):
        raise InvalidArgumentError(
            "queries and keys must be all str (one episode) or all lists of str (many episodes), not a mix",
            "queries",
        )
    episodes = []
    for b, (q, k) in enumerate(zip(queries, keys)):
        q, k = check_texts(q, f"queries[{b}]"), check_texts(k, f"keys[{b}]")
        if len(q) != len(k):
            raise InvalidArgumentError(
                f"episode {b}: every agent needs one query and one key; got {len(q)} queries and {len(k)} keys",
                f"keys[{b}]",
            )
        episodes.append((q, k))
    return episodes, False


class Router:
    """Routes agents by the cosine match of their need (query) and offer (key) descriptors.

    Parameters
    ----------
    encoder : Encoder, optional
        Default: :meth:`Encoder.default` (all-MiniLM-L6-v2, offline).
    tau : float in [-1, 1]
        Edge ``j -> i`` iff ``cos(key_j, query_i) > tau``.
    k_in : int >= 0
        Providers kept per recipient (highest scores; 0 = no cap).
    max_batch : int
        Most episodes per coalesced batch of :meth:`aroute_texts`.
    max_wait : float
        Seconds the first caller of a coalesced batch waits for others to join.
    backend : str, optional
        Backend of the routing op (see :mod:`toporoute.ops`).
    """

    def __init__(
        self,
        encoder: Encoder | None = None,
        tau: float = 0.3,
        k_in: int = 3,
        *,
        max_batch: int = 1024,
        max_wait: float = 0.002,
        backend: str | None = None,
    ) -> None:
        if not (-1.0 <= float(tau) <= 1.0):
            raise OutOfRangeError(f"tau must be in [-1, 1]; got {tau}", "tau")
        if int(k_in) < 0:
            raise OutOfRangeError(f"k_in must be >= 0; got {k_in}", "k_in")
        if max_batch < 1:
            raise OutOfRangeError(f"max_batch must be >= 1; got {max_batch}", "max_batch")
        if max_wait < 0:
            raise OutOfRangeError(f"max_wait must be >= 0; got {max_wait}", "max_wait")
        self.encoder = encoder if encoder is not None else Encoder.default()
        self.tau, self.k_in = float(tau), int(k_in)
        self.max_batch, self.max_wait = max_batch, max_wait
        self.backend = backend
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batcher] = (
            weakref.WeakKeyDictionary()
        )
        self._batchers_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Router(encoder={self.encoder!r}, tau={self.tau}, k_in={self.k_in})"

    def route_texts(self, queries: Sequence[Any], keys: Sequence[Any]) -> Routes:
        """Routes one episode or many.

        Parameters
        ----------
        queries, keys : list[str] or list[list[str]]
            One episode: agent ``i``'s need ``queries[i]`` and offer ``keys[i]``. Many: ``queries[b][i]``;
            episodes may have different agent counts (padded to the largest, padding inactive). An empty
            descriptor embeds as the zero vector: that agent neither sends nor receives.

        Returns
        -------
        Routes
            As :func:`toporoute.ops.route`: ``(N, N)``-shaped fields for one episode, ``(B, N, N)`` for many.
        """
        episodes, single = _episodes(queries, keys)
        routes = self._route(episodes)
        return _take(routes, 0, routes.in_degree.shape[1], self.k_in) if single else routes

    async def aroute_texts(self, queries: Sequence[Any], keys: Sequence[Any]) -> Routes:
        """:meth:`route_texts` for asyncio code: joins a shared batch and awaits it without blocking the loop."""
        episodes, single = _episodes(queries, keys)  # bad input fails here, in the caller's own call
        loop = asyncio.get_running_loop()
        with self._batchers_lock:
            batcher = self._batchers.get(loop)
            if batcher is None:
                batcher = self._batchers[loop] = _Batcher(self)
        routes = await batcher.submit(episodes)
        return _take(routes, 0, routes.in_degree.shape[1], self.k_in) if single else routes

    # -- the synchronous path -------------------------------------------------------------------------------

    def _route(self, episodes: Episodes) -> Routes:
        n_max = max((len(q) for q, _ in episodes), default=0)
        texts: dict[str, int] = {}  # distinct non-empty texts -> slot in this call
        for q, k in episodes:
            for t in (*q, *k):
                if t.strip():
                    texts.setdefault(t, len(texts))
        distinct = list(texts)
        cache, encoder = self.encoder.cache, self.encoder
        if encoder.device == "cuda":
            return self._route_on_device(episodes, n_max, distinct)
        with cache.lock:
            hits, misses = cache.acquire(distinct) if cache.capacity else ({}, distinct)
        try:
            buckets = encoder.forward(misses)
            with cache.lock:
                rows = cache.allocate(len(misses)) if cache.capacity else None
                try:
                    if rows is None:  # caching off, or more new texts than the cache holds: a private table
                        table = np.zeros((len(distinct) + 1, encoder.dim), dtype=np.float32)
                        if hits:
                            table[1 : len(hits) + 1] = cache.table[list(hits.values())]
                        slot = dict(zip(hits, range(1, len(hits) + 1)))
                        new_rows = list(range(len(hits) + 1, len(distinct) + 1))
                    else:
                        table, slot, new_rows = cache.table, dict(hits), rows
                    slot.update(zip(misses, new_rows))
                    q_rows, k_rows = _row_indices(episodes, n_max, slot)
                    new_rows_arr = np.asarray(new_rows, dtype=np.int64)
                    pool = [(b.hidden, b.mask, new_rows_arr[b.positions]) for b in buckets]
                    try:
                        routes = ops.route_indexed(
                            table,
                            q_rows,
                            k_rows,
                            tau=self.tau,
                            k_in=self.k_in,
                            pool=pool,
                            backend=self.backend,
                        )
                    except NonFiniteError:
                        raise encoder.explain_non_finite(misses, buckets) from None
                    if rows is not None:
                        cache.insert(misses, rows)
                finally:
                    if rows is not None:
                        cache.release(rows)
        finally:
            with cache.lock:
                cache.release(hits.values())
        return routes

    def _route_on_device(self, episodes: Episodes, n_max: int, distinct: list[str]) -> Routes:
        # Embeddings stay on the GPU: gathered into (B, N, D) there and routed by the CUDA kernel via DLPack.
        emb = self.encoder.encode(distinct)
        q_rows, k_rows = _row_indices(episodes, n_max, {t: i + 1 for i, t in enumerate(distinct)})
        active = (q_rows >= 0) & (k_rows >= 0)
        if type(emb).__module__.startswith("torch"):
            import torch

            table = torch.cat([torch.zeros_like(emb[:1]), emb])
            take = lambda rows: table[torch.as_tensor(np.maximum(rows, 0), device=emb.device)]
            mask = torch.as_tensor(active, device=emb.device)
        else:
            import cupy

            table = cupy.concatenate([cupy.zeros_like(emb[:1]), emb])
            take = lambda rows: table[cupy.asarray(np.maximum(rows, 0))]
            mask = cupy.asarray(active)
        return ops.route(
            take(q_rows), take(k_rows), tau=self.tau, k_in=self.k_in, active=mask, backend=self.backend
        )


def _row_indices(episodes: Episodes, n_max: int, slot: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    q_rows = np.full((len(episodes), n_max), -1, dtype=np.int32)
    k_rows = np.full((len(episodes), n_max), -1, dtype=np.int32)
    for b, (q, k) in enumerate(episodes):
        q_rows[b, : len(q)] = [slot.get(t, ZERO_ROW) for t in q]
        k_rows[b, : len(k)] = [slot.get(t, ZERO_ROW) for t in k]
    return q_rows, k_rows


def _take(routes: Routes, b: int | slice, n: int, k_in: int) -> Routes:
    """Episode(s) ``b`` of a batched result, trimmed to ``n`` agents. Exact: padding agents have no edges, and
    an uncapped inbox (``k_in == 0``) of ``n`` agents is ``n - 1`` wide."""
    k = k_in if k_in > 0 else max(n - 1, 0)
    return Routes(
        scores=routes.scores[b, :n, :n],
        adjacency=routes.adjacency[b, :n, :n],
        inbox=routes.inbox[b, :n, :k],
        in_degree=routes.in_degree[b, :n],
    )


@dataclass
class _Request:
    episodes: Episodes
    future: asyncio.Future[Routes]


@dataclass
class _Batcher:
    """Coalesces the concurrent ``aroute_texts`` calls of one event loop into batches run in a worker thread."""

    router: Router
    queue: list[_Request] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def submit(self, episodes: Episodes) -> Routes:
        future: asyncio.Future[Routes] = asyncio.get_running_loop().create_future()
        self.queue.append(_Request(episodes, future))
        self.wake.set()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())
        return await future

    async def _run(self) -> None:
        while self.queue:
            if sum(len(r.episodes) for r in self.queue) < self.router.max_batch:
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), self.router.max_wait)
                except asyncio.TimeoutError:
                    pass
            batch: list[_Request] = []
            total = 0
            while self.queue and (not batch or total + len(self.queue[0].episodes) <= self.router.max_batch):
                request = self.queue.pop(0)
                total += len(request.episodes)
                batch.append(request)
            batch = [r for r in batch if not r.future.done()]  # cancelled callers
            if batch:
                await self._serve(batch)

    async def _serve(self, batch: list[_Request]) -> None:
        episodes = [e for r in batch for e in r.episodes]
        try:
            routes = await asyncio.to_thread(self.router._route, episodes)
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting callers
            if len(batch) == 1:
                if not batch[0].future.done():
                    batch[0].future.set_exception(exc)
                return
            for request in batch:  # find whose input failed: each caller gets its own outcome
                await self._serve([request])
            return
        offset = 0
        for request in batch:
            n = max((len(q) for q, _ in request.episodes), default=0)
            part = _take(routes, slice(offset, offset + len(request.episodes)), n, self.router.k_in)
            offset += len(request.episodes)
            if not request.future.done():
                request.future.set_result(part)
