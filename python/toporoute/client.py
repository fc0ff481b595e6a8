"""Python client of ``toporoute serve``: :class:`Client` (sync) and :class:`AsyncClient` on httpx.

One method per endpoint. Arrays go in and come out as numpy; large float arrays travel as base64 float32
(``binary=True``, the default for ``q``/``k``). Results are the in-process types where one exists
(:class:`~toporoute.types.results.Order`, :class:`~toporoute.types.results.QMixStep`) and :class:`RoutedEpisode`
for ``/v1/route``. A 4xx answer about the request raises the matching :mod:`toporoute.errors` ``ValueError``
subclass by the answer's ``type`` (``shape_mismatch``: ``ShapeError``, ``non_finite``: ``NonFiniteError``,
``out_of_range``: ``OutOfRangeError``; :class:`~toporoute.errors.InvalidArgumentError` otherwise) whose ``arg``
is the server's ``field``; 401 raises :class:`AuthenticationError`, 409/503 :class:`ServiceUnavailableError`,
a server that cannot be reached (connection refused, no answer in time) :class:`ServiceConnectionError` naming
the URL, anything else :class:`ServiceError`. Every raised error carries ``status``, ``error_type`` and
``request_id``.

Examples
--------
>>> with Client("http://127.0.0.1:8080") as c:  # doctest: +SKIP
...     ep = c.route(needs=["unit tests", "a spec"], offers=["a spec", "code"])
...     ep.edges, ep.order
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import httpx
import numpy as np

from . import errors
from .errors import InvalidArgumentError, ToporouteError
from .types.results import Order, QMixStep

if TYPE_CHECKING:  # Python 3.10 has no typing.Self; annotations are not evaluated at run time
    from typing_extensions import Self

__all__ = [
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "RoutedEpisode",
    "ServiceConnectionError",
    "ServiceError",
    "ServiceUnavailableError",
    "decode_array",
    "encode_array",
    "raise_for_error",
]

T = TypeVar("T")


class ServiceError(ToporouteError, RuntimeError):
    """The service failed (5xx) or answered something this client cannot read."""


class AuthenticationError(ServiceError):
    """401: the service needs ``Authorization: Bearer <token>`` and the client's token is missing or wrong."""


class ServiceUnavailableError(ServiceError):
    """409/503: the endpoint cannot serve now (e.g. ``/v1/qmix/act`` without a checkpoint loaded)."""


class ServiceConnectionError(ServiceError, ConnectionError):
    """The service could not be reached (connection refused, name not resolved, no answer in time); the
    message names the URL. Also a :class:`ConnectionError`; the httpx error is its ``__cause__``."""


_VALUE_ERRORS: dict[str, type[InvalidArgumentError]] = {
    "invalid_argument": errors.InvalidArgumentError,
    "shape_mismatch": errors.ShapeError,
    "non_finite": errors.NonFiniteError,
    "out_of_range": errors.OutOfRangeError,
    # the class names older servers sent as the type
    **{
        cls.__name__: cls
        for cls in (
            errors.InvalidArgumentError,
            errors.ShapeError,
            errors.DTypeError,
            errors.NonFiniteError,
            errors.OutOfRangeError,
        )
    },
}


@dataclass(frozen=True)
class RoutedEpisode:
    """One episode of a ``/v1/route`` answer (``n`` agents).

    Attributes
    ----------
    edges : (E, 2) int64
        Message edges ``[src, dst]`` in row-major order of the adjacency.
    inbox : list of (K_i,) int64
        Agent ``i``'s providers by descending score (``inboxes`` is the same list, its former name).
    in_degree, order, level : (n,) int64
        As :class:`~toporoute.types.results.Routes` ``in_degree`` and :class:`~toporoute.types.results.Order`
        (``levels`` is ``level``, its former name).
    removed : (R, 2) int64
        Back edges ``[src, dst]`` dropped to break cycles.
    scores : (n, n) float32 or None
        ``scores[j, i]`` provider ``j`` against recipient ``i``, when asked for.
    """

    edges: np.ndarray
    inbox: list[np.ndarray]
    in_degree: np.ndarray
    order: np.ndarray
    level: np.ndarray
    removed: np.ndarray
    scores: np.ndarray | None

    @property
    def inboxes(self) -> list[np.ndarray]:
        """``inbox`` (the name before it matched :class:`~toporoute.types.results.Routes`)."""
        return self.inbox

    @property
    def levels(self) -> np.ndarray:
        """``level`` (the name before it matched :class:`~toporoute.types.results.Order`)."""
        return self.level

    @property
    def n(self) -> int:
        """Number of agents."""
        return int(self.in_degree.shape[0])

    def adjacency(self) -> np.ndarray:
        """(n, n) bool, ``adjacency[src, dst]`` (as :class:`~toporoute.types.results.Routes` ``adjacency``)."""
        return _edge_matrix(self.edges, self.n)


# -- wire format ---------------------------------------------------------------------------------------------


def encode_array(arr: Any, binary: bool, name: str) -> Any:
    """A float array for a request: ``{"b64", "shape"}`` (little-endian float32) or nested lists."""
    a = np.asarray(arr, dtype="<f4")
    if not np.isfinite(a).all():
        raise errors.NonFiniteError(f"{name} must be finite; it holds NaN or infinity", name)
    if binary:
        a = np.ascontiguousarray(a)
        return {"b64": base64.b64encode(a.tobytes()).decode("ascii"), "shape": list(a.shape)}
    return a.tolist()


def decode_array(value: Any) -> np.ndarray:
    """float32 numpy from a response field in either form."""
    if isinstance(value, dict):
        raw = base64.b64decode(value["b64"])
        return np.frombuffer(raw, dtype="<f4").reshape(value["shape"]).astype(np.float32)
    return np.asarray(value, dtype=np.float32)


def _edges(value: Any) -> np.ndarray:
    return np.asarray(value, dtype=np.int64).reshape(-1, 2)


def _edge_matrix(edges: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, n), dtype=bool)
    if len(edges):
        out[edges[:, 0], edges[:, 1]] = True
    return out


def _renamed(item: dict[str, Any], name: str, former: str) -> Any:
    """``item[name]``, or ``item[former]`` from a server older than the rename."""
    return item[name] if name in item else item[former]


def _routed(ep: dict[str, Any]) -> RoutedEpisode:
    return RoutedEpisode(
        edges=_edges(ep["edges"]),
        inbox=[np.asarray(row, dtype=np.int64) for row in _renamed(ep, "inbox", "inboxes")],
        in_degree=np.asarray(ep["in_degree"], dtype=np.int64),
        order=np.asarray(ep["order"], dtype=np.int64),
        level=np.asarray(_renamed(ep, "level", "levels"), dtype=np.int64),
        removed=_edges(ep["removed"]),
        scores=decode_array(ep["scores"]) if ep.get("scores") is not None else None,
    )


def raise_for_error(response: httpx.Response) -> None:
    """Raises the error an answer of the service carries (see the module docstring); nothing for a 2xx/3xx.

    For callers that talk to the service with their own httpx client.
    """
    if response.status_code < 400:
        return
    request_id = response.headers.get("x-request-id")
    try:
        err = response.json()["error"]
        type_, message, field = str(err.get("type")), str(err.get("message")), err.get("field")
    except (ValueError, KeyError, TypeError, AttributeError):
        type_, message, field = "http_error", response.text[:500], None
    status = response.status_code
    exc: ToporouteError
    if status == 401:
        exc = AuthenticationError(message, field)
    elif status in (409, 503):
        exc = ServiceUnavailableError(message, field)
    elif 400 <= status < 500 and status not in (404, 405):
        exc = _VALUE_ERRORS.get(type_, InvalidArgumentError)(message, field)
    else:
        exc = ServiceError(f"HTTP {status}: {message}", field)
    # Plain attributes on the raised instance: the ValueError classes are toporoute.errors' own, not subclasses.
    vars(exc).update(status=status, error_type=type_, request_id=request_id)
    raise exc


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One request and how to read its answer; the sync and async clients only differ in how they send it."""

    method: str
    path: str
    body: dict[str, Any] | None
    parse: Callable[[httpx.Response], T]


def _json(response: httpx.Response) -> Any:
    return response.json()


def _episode_arrays(value: Any, name: str) -> tuple[list[Any], bool]:
    """Episodes of ``value``: one (N, D), a (B, N, D) array, or a list of (N_b, D) (ragged); and whether one."""
    try:
        arr = np.asarray(value, dtype=np.float32)
    except ValueError:  # ragged: a list of episodes of different sizes
        return list(value), False
    if arr.ndim == 2:
        return [arr], True
    if arr.ndim == 3:
        return list(arr), False
    raise errors.ShapeError(
        f"{name} must be (N, D), (B, N, D) or a list of (N_b, D); got shape {list(arr.shape)}", name
    )


def _route_call(
    q: Any,
    k: Any,
    needs: Any,
    offers: Any,
    tau: float,
    k_in: int,
    scores: bool,
    binary: bool,
) -> _Call[Any]:
    if (q is None) != (k is None) or (needs is None) != (offers is None) or (q is None) == (needs is None):
        raise InvalidArgumentError(
            "route takes either q and k (embeddings) or needs and offers (texts); got "
            f"q={'set' if q is not None else None}, k={'set' if k is not None else None}, "
            f"needs={'set' if needs is not None else None}, offers={'set' if offers is not None else None}",
            "q" if q is not None or k is not None else "needs",
        )
    episodes: list[dict[str, Any]]
    if q is not None:
        qs, single = _episode_arrays(q, "q")
        ks, _ = _episode_arrays(k, "k")
        if len(qs) != len(ks):
            raise InvalidArgumentError(f"k must have {len(qs)} episodes like q; got {len(ks)}", "k")
        episodes = [
            {"q": encode_array(a, binary, f"q[{b}]"), "k": encode_array(c, binary, f"k[{b}]")}
            for b, (a, c) in enumerate(zip(qs, ks))
        ]
    else:
        single = bool(needs) and isinstance(needs[0], str)
        ns = [needs] if single else list(needs)
        os_ = [offers] if single else list(offers)
        if len(ns) != len(os_):
            raise InvalidArgumentError(
                f"offers must have {len(ns)} episodes like needs; got {len(os_)}", "offers"
            )
        episodes = [{"needs": list(a), "offers": list(c)} for a, c in zip(ns, os_)]
    body = {
        "episodes": episodes,
        "tau": float(tau),
        "k_in": int(k_in),
        "scores": bool(scores),
        "binary": binary,
    }

    def parse(response: httpx.Response) -> Any:
        out = [_routed(ep) for ep in response.json()["episodes"]]
        return out[0] if single else out

    return _Call("POST", "/v1/route", body, parse)


def _embed_call(texts: Sequence[str], binary: bool) -> _Call[np.ndarray]:
    if isinstance(texts, str):
        raise InvalidArgumentError("texts must be a list of strings; got one str", "texts")

    def parse(response: httpx.Response) -> np.ndarray:
        data = response.json()
        return decode_array(data["vectors"]).reshape(-1, int(data["dim"]))

    return _Call("POST", "/v1/embed", {"texts": list(texts), "binary": binary}, parse)


def _toposort_call(graphs: Any, weights: Any, active: Any) -> _Call[Order]:
    adj = np.asarray(graphs, dtype=bool)
    if adj.ndim not in (2, 3) or adj.shape[-1] != adj.shape[-2]:
        raise errors.ShapeError(f"graphs must be (N, N) or (B, N, N); got shape {list(adj.shape)}", "graphs")
    single = adj.ndim == 2
    n = adj.shape[-1]

    def parse(response: httpx.Response) -> Order:
        data = response.json()
        items = data["graphs"] if isinstance(data, dict) and "graphs" in data else data
        if isinstance(items, dict):
            items = [items]

        def removed(value: Any) -> np.ndarray:
            arr = np.asarray(value)
            if arr.ndim == 2 and arr.shape == (n, n) and arr.dtype == bool:
                return arr
            return _edge_matrix(_edges(value), n)

        order = Order(
            order=np.asarray([g["order"] for g in items], dtype=np.int32),
            level=np.asarray([_renamed(g, "level", "levels") for g in items], dtype=np.int32),
            removed=np.stack([removed(g["removed"]) for g in items]) if items else np.zeros((0, n, n), bool),
            is_dag=np.asarray([g["is_dag"] for g in items], dtype=bool),
        )
        if single:
            return Order(order.order[0], order.level[0], order.removed[0], order.is_dag[0])
        return order

    body: dict[str, Any] = {"graphs": adj.tolist()}
    if weights is not None:
        body["weights"] = encode_array(weights, True, "weights")
    if active is not None:
        body["active"] = np.asarray(active, dtype=bool).tolist()
    return _Call("POST", "/v1/toposort", body, parse)


def _conductor_call(plans: Any, n_max: Any, options: dict[str, Any]) -> _Call[Any]:
    single = isinstance(plans, str)
    body: dict[str, Any] = {"plans": [plans] if single else list(plans)}
    if n_max is not None:
        body["n_max"] = n_max
    if options:
        body["options"] = options

    def parse(response: httpx.Response) -> Any:
        data = response.json()
        items = data["plans"] if isinstance(data, dict) and "plans" in data else data
        return items[0] if single else items

    return _Call("POST", "/v1/conductor/check", body, parse)


def _qmix_call(
    obs: Any, adj: Any, hidden: Any, active: Any, binary: bool
) -> _Call[tuple[QMixStep, np.ndarray]]:
    body: dict[str, Any] = {
        "obs": encode_array(obs, binary, "obs"),
        "adj": np.asarray(adj, dtype=bool).tolist(),
        "binary": binary,
    }
    if hidden is not None:
        body["hidden"] = encode_array(hidden, binary, "hidden")
    if active is not None:
        body["active"] = np.asarray(active, dtype=bool).tolist()

    def parse(response: httpx.Response) -> tuple[QMixStep, np.ndarray]:
        data = response.json()
        step = QMixStep(decode_array(data["q"]), decode_array(data["hidden"]))
        return step, np.asarray(data["actions"], dtype=np.int64)

    return _Call("POST", "/v1/qmix/act", body, parse)


def _text(response: httpx.Response) -> str:
    return response.text


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


def _unreachable(base_url: httpx.URL, call: _Call[Any], exc: httpx.TransportError) -> ServiceConnectionError:
    """The error for a request that got no answer, naming the URL and why."""
    url = str(base_url.join(call.path))
    if isinstance(exc, httpx.TimeoutException):
        why = f"no answer in time ({type(exc).__name__})"
    else:
        why = str(exc) or type(exc).__name__
    hint = " (is `toporoute serve` running there?)" if isinstance(exc, httpx.ConnectError) else ""
    err = ServiceConnectionError(f"cannot reach the toporoute service at {call.method} {url}: {why}{hint}")
    vars(err).update(status=None, error_type="connection_error", request_id=None, url=url)
    return err


# -- the clients ---------------------------------------------------------------------------------------------


class Client:
    """Synchronous client of ``toporoute serve`` (one pooled httpx connection set; use as a context manager).

    Parameters
    ----------
    base_url : str
        E.g. ``"http://127.0.0.1:8080"``.
    token : str, optional
        Bearer token, when the server has one.
    timeout : float
        Seconds per request (connect, read, write).
    transport : httpx.BaseTransport, optional
        E.g. ``httpx.WSGITransport``/a mock in tests; the network by default.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(token), timeout=timeout, transport=transport
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections."""
        self._http.close()

    def _do(self, call: _Call[T]) -> T:
        try:
            response = self._http.request(call.method, call.path, json=call.body)
        except httpx.TransportError as exc:
            raise _unreachable(self._http.base_url, call, exc) from exc
        raise_for_error(response)
        return call.parse(response)

    def health(self) -> dict[str, Any]:
        """``GET /health``: ``{"status", "version", "backend", "encoder", "qmix"}``."""
        return self._do(_Call("GET", "/health", None, _json))

    def metrics(self) -> str:
        """``GET /metrics``: the Prometheus text exposition."""
        return self._do(_Call("GET", "/metrics", None, _text))

    def route(
        self,
        q: Any = None,
        k: Any = None,
        *,
        needs: Any = None,
        offers: Any = None,
        tau: float = 0.3,
        k_in: int = 3,
        scores: bool = False,
        binary: bool = True,
    ) -> Any:
        """``POST /v1/route``: routes episodes of embeddings or of descriptor texts.

        Parameters
        ----------
        q, k : (N, D) or (B, N, D) float32, or a list of (N_b, D)
            Needs and offers as embeddings (one episode when 2-D); or
        needs, offers : list[str] or list[list[str]]
            Descriptor texts (one episode when a flat list); the server's Router coalesces them with other
            clients' requests.
        tau, k_in : float, int
            As :func:`toporoute.ops.route`.
        scores : bool
            Also return the (N, N) scores.
        binary : bool
            Send q/k and receive scores as base64 float32 (faster than JSON lists).

        Returns
        -------
        RoutedEpisode or list[RoutedEpisode]
            One per episode (a single one for a single episode).
        """
        return self._do(_route_call(q, k, needs, offers, tau, k_in, scores, binary))

    def embed(self, texts: Sequence[str], *, binary: bool = True) -> np.ndarray:
        """``POST /v1/embed``: (T, D) float32 unit vectors of ``texts`` (as the in-process Encoder)."""
        return self._do(_embed_call(texts, binary))

    def toposort(self, graphs: Any, *, weights: Any = None, active: Any = None) -> Order:
        """``POST /v1/toposort``: ``graphs`` (N, N) or (B, N, N) bool ``adj[src, dst]`` (optional ``weights`` of
        the same shape, ``active`` (N,) / (B, N)) -> :class:`Order` as :func:`toporoute.ops.toposort` (without
        the batch axis for one graph)."""
        return self._do(_toposort_call(graphs, weights, active))

    def conductor_check(self, plans: str | Sequence[str], *, n_max: Any = None, **options: Any) -> Any:
        """``POST /v1/conductor/check``: per plan a dict ``{"class", "tag", "message", "nodes", "layers",
        "edges", "density"}`` (one dict for one plan string), as :func:`toporoute.ops.conductor_check` and
        :func:`toporoute.ops.conductor_density`.

        Parameters
        ----------
        plans : str or list[str]
            Orchestrator outputs (YAML plans).
        n_max : int or list[int], optional
            Density cap, one for all plans or one per plan (the server's default when omitted).
        **options
            :class:`toporoute.ops.CheckOptions` fields (``lenient``, ``max_agents``, ...).
        """
        return self._do(_conductor_call(plans, n_max, options))

    def qmix_act(
        self, obs: Any, adj: Any, hidden: Any = None, active: Any = None, *, binary: bool = True
    ) -> tuple[QMixStep, np.ndarray]:
        """``POST /v1/qmix/act``: obs (B, N, obs_dim), adj (B, N, N), hidden (B, N, H) -> (:class:`QMixStep`
        ``q, hidden``, greedy actions (B, N)) for the checkpoint loaded at the server's start."""
        return self._do(_qmix_call(obs, adj, hidden, active, binary))


class AsyncClient:
    """Asynchronous :class:`Client` (same methods and parameters, awaitable); use ``async with``."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        limits: httpx.Limits | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=_headers(token),
            timeout=timeout,
            transport=transport,
            limits=limits or httpx.Limits(max_connections=100, max_keepalive_connections=100),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connections."""
        await self._http.aclose()

    async def _do(self, call: _Call[T]) -> T:
        try:
            response = await self._http.request(call.method, call.path, json=call.body)
        except httpx.TransportError as exc:
            raise _unreachable(self._http.base_url, call, exc) from exc
        raise_for_error(response)
        return call.parse(response)

    async def health(self) -> dict[str, Any]:
        """See :meth:`Client.health`."""
        return await self._do(_Call("GET", "/health", None, _json))

    async def metrics(self) -> str:
        """See :meth:`Client.metrics`."""
        return await self._do(_Call("GET", "/metrics", None, _text))

    async def route(
        self,
        q: Any = None,
        k: Any = None,
        *,
        needs: Any = None,
        offers: Any = None,
        tau: float = 0.3,
        k_in: int = 3,
        scores: bool = False,
        binary: bool = True,
    ) -> Any:
        """See :meth:`Client.route`."""
        return await self._do(_route_call(q, k, needs, offers, tau, k_in, scores, binary))

    async def embed(self, texts: Sequence[str], *, binary: bool = True) -> np.ndarray:
        """See :meth:`Client.embed`."""
        return await self._do(_embed_call(texts, binary))

    async def toposort(self, graphs: Any, *, weights: Any = None, active: Any = None) -> Order:
        """See :meth:`Client.toposort`."""
        return await self._do(_toposort_call(graphs, weights, active))

    async def conductor_check(self, plans: str | Sequence[str], *, n_max: Any = None, **options: Any) -> Any:
        """See :meth:`Client.conductor_check`."""
        return await self._do(_conductor_call(plans, n_max, options))

    async def qmix_act(
        self, obs: Any, adj: Any, hidden: Any = None, active: Any = None, *, binary: bool = True
    ) -> tuple[QMixStep, np.ndarray]:
        """See :meth:`Client.qmix_act`."""
        return await self._do(_qmix_call(obs, adj, hidden, active, binary))
