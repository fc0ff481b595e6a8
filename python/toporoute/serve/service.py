"""The work behind the endpoints, free of HTTP: validated numpy in, JSON-ready dicts out.

One :class:`Service` per app (on ``app.state.service``). It holds the encoder (shared by every Router, so they
share one embedding cache), one Router per ``(tau, k_in)`` pair seen (each coalesces its own concurrent
requests; a bounded LRU of them), and the Q-Mix weights when a checkpoint was given.

Errors name the request field: :class:`~toporoute.errors.OutOfRangeError` for a count or value beyond a limit
(each one declared in the OpenAPI document), :class:`~toporoute.errors.ShapeError` for arrays whose shapes
disagree (the one rule JSON Schema cannot state).
"""

from __future__ import annotations

import asyncio
import base64
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import ops
from ..errors import InvalidArgumentError, OutOfRangeError, ShapeError
from ..types.results import Routes
from .config import ServeConfig
from .convert import array_in, array_out, bool_array, check_count, edge_list, routed_episode
from .schemas import (
    ArrayEpisode,
    ConductorOptions,
    ConductorRequest,
    EmbeddingsRequest,
    EmbedRequest,
    QMixRequest,
    RouteRequest,
    TextEpisode,
    ToposortRequest,
)

__all__ = ["QMixUnavailable", "Service"]

_NO_OPTIONS = ConductorOptions()
_DENSITY_FIELDS = ("s_node", "s_edge", "s_depth", "s_complex", "reward")
_CLASSES = {0: "ok", 1: "no_yaml", 2: "parse", 3: "schema", 4: "logic"}


class QMixUnavailable(Exception):
    """``/v1/qmix/act`` without a checkpoint: the server answers 503."""


# Routers kept for distinct (tau, k_in) pairs; the least recently used one is dropped beyond this.
_MAX_ROUTERS = 32
# Array requests with more float elements than this are computed in a worker thread, smaller ones inline.
_INLINE_ELEMENTS = 1 << 16


class Service:
    """The endpoints' computations (see module docstring).

    Parameters
    ----------
    config : ServeConfig
    on_batch : callable, optional
        Called with the episode count of every coalesced text batch (the batch-size metric).
    encoder : Encoder, optional
        Default: :meth:`Encoder.default` with ``config.encoder_cache_size`` (tests pass one to share it).
    """

    def __init__(
        self,
        config: ServeConfig,
        on_batch: Callable[[int], None] | None = None,
        encoder: Any = None,
    ) -> None:
        from ..embed import Encoder

        self.config = config
        self.encoder = (
            encoder if encoder is not None else Encoder.default(cache_size=config.encoder_cache_size)
        )
        self.qmix = ops.QMixParams.load(config.qmix_checkpoint) if config.qmix_checkpoint else None
        self._on_batch = on_batch
        self._routers: OrderedDict[tuple[float, int], Any] = OrderedDict()

    # -- /v1/embed ------------------------------------------------------------------------------------------

    async def embed(self, req: EmbedRequest) -> dict[str, Any]:
        """``/v1/embed``: unit vectors ``(len(texts), dim)`` from the shared encoder (and its cache)."""
        check_count(req.texts, self.config.max_texts, "texts", "texts")
        self._check_lengths(req.texts, "texts")
        vectors = await asyncio.to_thread(self.encoder.encode, req.texts) if req.texts else None
        if vectors is None:
            vectors = np.zeros((0, self.encoder.dim), dtype=np.float32)
        return {"dim": int(self.encoder.dim), "vectors": array_out(np.asarray(vectors), req.binary)}

    # -- /v1/embeddings (OpenAI-compatible) -----------------------------------------------------------------

    def model_names(self) -> tuple[str, ...]:
        """The ``model`` values ``/v1/embeddings`` accepts: the encoder's name and its last path part."""
        name = str(self.encoder.name)
        return (name,) if "/" not in name else (name, name.rsplit("/", 1)[-1])

    async def embeddings(self, req: EmbeddingsRequest) -> dict[str, Any]:
        """``/v1/embeddings``: OpenAI's embeddings answer from the shared encoder (and its cache)."""
        if req.model not in self.model_names():
            raise InvalidArgumentError(
                f"model must be one of {list(self.model_names())} (this server's encoder); got {req.model!r}",
                "model",
            )
        if req.dimensions is not None and req.dimensions != self.encoder.dim:
            raise OutOfRangeError(
                f"dimensions must be {self.encoder.dim} (the encoder's; it does not shorten vectors); got "
                f"{req.dimensions}",
                "dimensions",
            )
        texts = [req.input] if isinstance(req.input, str) else req.input
        if not texts:
            raise OutOfRangeError("input must hold at least one text; got an empty list", "input")
        check_count(texts, self.config.max_texts, "input", "texts")
        self._check_lengths(texts, "input")
        vectors, tokens = await asyncio.to_thread(self._encode_counted, texts)
        data = []
        for i, row in enumerate(np.asarray(vectors, dtype="<f4")):
            value: Any = row.tolist()
            if req.encoding_format == "base64":
                value = base64.b64encode(np.ascontiguousarray(row).tobytes()).decode("ascii")
            data.append({"object": "embedding", "index": i, "embedding": value})
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"object": "list", "data": data, "model": str(self.encoder.name), "usage": usage}

    def _encode_counted(self, texts: list[str]) -> tuple[Any, int]:
        """The vectors of ``texts`` and the word pieces the encoder read (truncated as it truncates)."""
        # The Encoder has no public token count; its tokenizer (truncating at max_tokens) is what it reads.
        tokenizer = getattr(self.encoder, "_tokenizer", None)
        tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts)) if tokenizer is not None else 0
        return self.encoder.encode(texts), tokens

    # -- /v1/toposort ---------------------------------------------------------------------------------------

    def toposort(self, req: ToposortRequest) -> dict[str, Any]:
        """``/v1/toposort``: ``ops.toposort`` of one graph or a batch; always a list of graphs back."""
        adj = bool_array(req.graphs, "graphs")
        single = adj.ndim == 2
        if single:
            adj = adj[None]
        if adj.ndim != 3 or adj.shape[1] != adj.shape[2]:
            raise ShapeError(f"graphs must be (N, N) or (B, N, N); got shape {list(adj.shape)}", "graphs")
        check_count(adj, self.config.max_episodes, "graphs", "graphs")
        if adj.shape[1] > self.config.max_agents:
            raise OutOfRangeError(
                f"graphs must have at most {self.config.max_agents} nodes; got {adj.shape[1]}", "graphs"
            )
        weights = active = None
        if req.weights is not None:
            weights = array_in(req.weights, "weights", None)
            weights = weights[None] if single and weights.ndim == 2 else weights
            if weights.shape != adj.shape:
                raise ShapeError(
                    f"weights must have the shape of graphs {list(adj.shape[single:])}; got "
                    f"{list(weights.shape[single:])}",
                    "weights",
                )
        if req.active is not None:
            active = bool_array(req.active, "active")
            active = active[None] if single and active.ndim == 1 else active
            if active.shape != adj.shape[:2]:
                raise ShapeError(
                    f"active must have shape {list(adj.shape[single:2])}; got {list(active.shape[single:])}",
                    "active",
                )
        order = ops.toposort(adj, weights=weights, active=active, backend=self.config.backend)
        return {
            "graphs": [
                {
                    "order": order.order[b].tolist(),
                    "level": order.level[b].tolist(),
                    "removed": edge_list(order.removed[b]),
                    "is_dag": bool(order.is_dag[b]),
                }
                for b in range(adj.shape[0])
            ]
        }

    # -- /v1/conductor/check --------------------------------------------------------------------------------

    def conductor_check(self, req: ConductorRequest) -> dict[str, Any]:
        """``/v1/conductor/check``: ``ops.conductor_check`` (first turn) and ``ops.conductor_density``."""
        check_count(req.plans, self.config.max_episodes, "plans", "plans")
        given: dict[str, Any] = {
            k: (tuple(v) if k == "pool" else v)
            for k, v in (req.options or _NO_OPTIONS).model_dump().items()
            if v is not None
        }
        try:
            options = ops.CheckOptions(**given)
        except InvalidArgumentError as exc:
            raise type(exc)(str(exc), f"options.{exc.arg}") from None
        n_max = np.asarray(req.n_max, dtype=np.int64)
        if n_max.ndim == 1 and n_max.shape[0] != len(req.plans):
            raise ShapeError(
                f"n_max must be one int or one per plan ({len(req.plans)}); got {n_max.shape[0]}", "n_max"
            )
        if (n_max < 1).any():
            raise OutOfRangeError(f"n_max must be >= 1; got {n_max.tolist()}", "n_max")
        if not req.plans:
            return {"plans": []}
        batch = ops.conductor_check(req.plans, options=options, backend=self.config.backend)
        valid = batch.error == 0
        density = None
        if valid.any():
            caps = np.broadcast_to(n_max, batch.nodes.shape)
            density = ops.conductor_density(
                batch.nodes[valid],
                batch.edges[valid],
                batch.steps[valid],
                caps[valid],
                backend=self.config.backend,
            )
        out = []
        row = 0
        for b in range(len(req.plans)):
            item = batch.item(b)
            g = item.graph
            d = None
            if g is not None and density is not None:
                d = {f: float(getattr(density, f)[row]) for f in _DENSITY_FIELDS}
                row += 1
            out.append(
                {
                    "class": _CLASSES.get(item.error, str(item.error)),
                    "tag": item.tag,
                    "message": item.message,
                    "nodes": [{"id": n.id, "role": n.role, "step": n.step} for n in g.nodes] if g else [],
                    "layers": [list(layer) for layer in g.layers] if g else [],
                    "edges": [[src - g.base, dst - g.base] for src, dst, _ in g.edges()] if g else [],
                    "density": d,
                }
            )
        return {"plans": out}

    # -- /v1/qmix/act ---------------------------------------------------------------------------------------

    def qmix_act(self, req: QMixRequest) -> dict[str, Any]:
        """``/v1/qmix/act``: one ``ops.qmix_forward`` round with the loaded checkpoint and the greedy actions.

        Raises
        ------
        QMixUnavailable
            No checkpoint was given at start (the endpoint answers 503).
        """
        if self.qmix is None:
            raise QMixUnavailable(
                "no Q-Mix checkpoint is loaded: start the server with --qmix-checkpoint PATH"
            )
        obs = array_in(req.obs, "obs", None)
        if obs.ndim not in (2, 3):
            raise ShapeError(
                f"obs must be (N, obs_dim) or (B, N, obs_dim); got shape {list(obs.shape)}", "obs"
            )
        n = obs.shape[-2]
        if n > self.config.max_agents:
            raise OutOfRangeError(f"obs must have at most {self.config.max_agents} agents; got {n}", "obs")
        if obs.ndim == 3:
            check_count(obs, self.config.max_episodes, "obs", "episodes")
        adj = bool_array(req.adj, "adj")
        hidden = array_in(req.hidden, "hidden", None) if req.hidden is not None else None
        active = bool_array(req.active, "active") if req.active is not None else None
        step = ops.qmix_forward(self.qmix, obs, adj, hidden, active=active, backend=self.config.backend)
        q = np.asarray(step.q)
        actions = q.argmax(axis=-1).astype(np.int64)
        if active is not None:
            actions = np.where(active, actions, -1)
        return {
            "q": array_out(q, req.binary),
            "actions": actions.tolist(),
            "hidden": array_out(np.asarray(step.hidden), req.binary),
        }

    # -- /v1/route ------------------------------------------------------------------------------------------

    def router(self, tau: float, k_in: int) -> Any:
        """The shared Router for ``(tau, k_in)`` (created on first use; bad values raise naming the field)."""
        key = (float(tau), int(k_in))
        router = self._routers.get(key)
        if router is None:
            router = _metered_router(self.encoder, key[0], key[1], self.config, self._on_batch)
            self._routers[key] = router
            while len(self._routers) > _MAX_ROUTERS:
                self._routers.popitem(last=False)
        else:
            self._routers.move_to_end(key)
        return router

    async def route(self, req: RouteRequest) -> dict[str, Any]:
        """``/v1/route``: text episodes through the Router's coalescing, array episodes through ``ops.route``."""
        cfg = self.config
        check_count(req.episodes, cfg.max_episodes, "episodes", "episodes")
        if req.k_in > cfg.max_agents:  # beyond the agents of any episode it only widens the padding
            raise OutOfRangeError(f"k_in must be <= {cfg.max_agents} (max_agents); got {req.k_in}", "k_in")
        if not req.episodes:
            return {"episodes": []}
        kind = type(req.episodes[0])
        for b, ep in enumerate(req.episodes):
            if type(ep) is not kind:
                raise InvalidArgumentError(
                    f"episodes must be all texts (needs, offers) or all embeddings (q, k); episode 0 is "
                    f"{kind.__name__}, episode {b} is {type(ep).__name__}",
                    f"episodes[{b}]",
                )
            if isinstance(ep, TextEpisode):
                self._check_text_episode(ep, b)
        if isinstance(req.episodes[0], TextEpisode):
            texts: list[TextEpisode] = req.episodes  # type: ignore[assignment]
            router = self.router(req.tau, req.k_in)
            routes = await router.aroute_texts([e.needs for e in texts], [e.offers for e in texts])
            sizes = [len(e.needs) for e in texts]
            return {"episodes": self._episodes(routes, sizes, req.k_in, req.scores, req.binary)}
        arrays: list[ArrayEpisode] = req.episodes  # type: ignore[assignment]
        q, k, active, sizes = self._stack(arrays)
        if q.size > _INLINE_ELEMENTS:
            return await asyncio.to_thread(self._route_arrays, q, k, active, sizes, req)
        return self._route_arrays(q, k, active, sizes, req)

    def _check_text_episode(self, ep: TextEpisode, b: int) -> None:
        cfg = self.config
        field = f"episodes[{b}]"
        if len(ep.needs) != len(ep.offers):
            raise ShapeError(
                f"{field}: every agent needs one need and one offer; got {len(ep.needs)} needs and "
                f"{len(ep.offers)} offers",
                f"{field}.offers",
            )
        if not ep.needs:
            raise OutOfRangeError(f"{field}.needs must list at least one agent; got none", f"{field}.needs")
        check_count(ep.needs, cfg.max_agents, f"{field}.needs", "agents")
        self._check_lengths(ep.needs, f"{field}.needs")
        self._check_lengths(ep.offers, f"{field}.offers")

    def _check_lengths(self, texts: list[str], field: str) -> None:
        limit = self.config.max_text_chars
        for i, t in enumerate(texts):
            if len(t) > limit:
                raise OutOfRangeError(
                    f"{field}[{i}] must have at most {limit} characters; got {len(t)}", f"{field}[{i}]"
                )

    def _stack(self, episodes: list[ArrayEpisode]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """(B, N, D) q and k padded to the largest N, the (B, N) active mask, and each episode's N."""
        cfg = self.config
        qs, ks = [], []
        dim: int | None = None
        for b, ep in enumerate(episodes):
            q = array_in(ep.q, f"episodes[{b}].q", 2)
            k = array_in(ep.k, f"episodes[{b}].k", 2)
            if q.shape != k.shape:
                raise ShapeError(
                    f"episodes[{b}].k must have the shape of q {list(q.shape)}; got {list(k.shape)}",
                    f"episodes[{b}].k",
                )
            if q.shape[0] < 1:
                raise OutOfRangeError(
                    f"episodes[{b}].q must have at least one agent (row); got 0", f"episodes[{b}].q"
                )
            if q.shape[0] > cfg.max_agents:
                raise OutOfRangeError(
                    f"episodes[{b}].q must have at most {cfg.max_agents} agents (rows); got {q.shape[0]}",
                    f"episodes[{b}].q",
                )
            if dim is None:
                dim = q.shape[1]
            elif q.shape[1] != dim:
                raise ShapeError(
                    f"episodes[{b}].q must have {dim} columns like episode 0; got {q.shape[1]}",
                    f"episodes[{b}].q",
                )
            qs.append(q)
            ks.append(k)
        sizes = [q.shape[0] for q in qs]
        n = max(sizes)
        assert dim is not None
        if all(s == n for s in sizes):
            return np.stack(qs), np.stack(ks), np.ones((len(qs), n), dtype=bool), sizes
        q_all = np.zeros((len(qs), n, dim), dtype=np.float32)
        k_all = np.zeros_like(q_all)
        active = np.zeros((len(qs), n), dtype=bool)
        for b, (q, k) in enumerate(zip(qs, ks)):
            q_all[b, : q.shape[0]], k_all[b, : k.shape[0]], active[b, : q.shape[0]] = q, k, True
        return q_all, k_all, active, sizes

    def _route_arrays(
        self, q: np.ndarray, k: np.ndarray, active: np.ndarray, sizes: list[int], req: RouteRequest
    ) -> dict[str, Any]:
        if not (-1.0 <= req.tau <= 1.0):
            raise OutOfRangeError(f"tau must be in [-1, 1]; got {req.tau}", "tau")
        padded = any(s != q.shape[1] for s in sizes)
        routes = ops.route(
            q, k, tau=req.tau, k_in=req.k_in, active=active if padded else None, backend=self.config.backend
        )
        return {"episodes": self._episodes(routes, sizes, req.k_in, req.scores, req.binary)}

    def _episodes(
        self, routes: Routes, sizes: list[int], k_in: int, scores: bool, binary: bool
    ) -> list[dict[str, Any]]:
        """Per-episode results trimmed to each episode's agents; the order is computed per group of equal
        size on the trimmed graphs (exactly ``ops.toposort`` of each episode's own adjacency)."""
        adjacency = np.asarray(routes.adjacency)
        out: list[dict[str, Any] | None] = [None] * len(sizes)
        for n in sorted(set(sizes)):
            idx = [b for b, s in enumerate(sizes) if s == n]
            adj = adjacency[idx, :n, :n]
            order = ops.toposort(adj, backend=self.config.backend)
            width = k_in if k_in > 0 else max(n - 1, 0)
            for j, b in enumerate(idx):
                out[b] = routed_episode(
                    adj[j],
                    np.asarray(routes.inbox)[b, :n, :width],
                    np.asarray(routes.in_degree)[b, :n],
                    order.order[j],
                    order.level[j],
                    order.removed[j],
                    np.asarray(routes.scores)[b, :n, :n] if scores else None,
                    binary,
                )
        return [e for e in out if e is not None]


def _metered_router(
    encoder: Any, tau: float, k_in: int, config: ServeConfig, on_batch: Callable[[int], None] | None
) -> Any:
    """A Router whose coalesced batches report their episode count to ``on_batch``."""
    from ..embed import Router

    class _MeteredRouter(Router):
        def _route(self, episodes: Any) -> Routes:
            if on_batch is not None:
                on_batch(len(episodes))
            return super()._route(episodes)

    return _MeteredRouter(encoder, tau, k_in, max_wait=config.max_wait, backend=config.backend)
