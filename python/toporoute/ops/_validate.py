"""Argument checks shared by every backend: shapes, dtypes and scalar ranges.

Works on numpy arrays and on device arrays (CuPy, PyTorch) alike, reading only ``shape`` and ``dtype``; checks
that need a pass over the data (non-finite values) run inside each backend's fused pass.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ..errors import DTypeError, InvalidArgumentError, OutOfRangeError, ShapeError
from ..types.qmix_params import QMixParams
from ..types.team_codes import TEAM_MAX_NODES

Args = tuple[Any, ...]


def dtype_name(x: Any) -> str:
    """'float32', 'bool', ... for numpy, CuPy and PyTorch arrays."""
    dt = getattr(x, "dtype", None)
    if dt is None:
        return type(x).__name__
    name = getattr(dt, "name", None)
    if isinstance(name, str):
        return name
    return str(dt).removeprefix("torch.")


def _shape(x: Any, name: str) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None or not hasattr(x, "dtype"):
        raise DTypeError(
            f"{name} must be an array (numpy, CuPy or PyTorch); got {type(x).__name__}", arg=name
        )
    return tuple(int(s) for s in shape)


def _fmt(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


_NP_DTYPES = {name: np.dtype(name) for name in ("float32", "bool")}
# The common case of every op (numpy arrays of the right dtype and rank, no optional arrays or of the right
# shape, Python scalars in range) is decided by one chain of comparisons per op, below and in the op families'
# modules (which share these dtype singletons); anything else runs the full checks, which alone word the errors.
# These ops take microseconds, so the chain is kept short.
F32 = _NP_DTYPES["float32"]
BOOL = _NP_DTYPES["bool"]
I32 = np.dtype(np.int32)
ND = np.ndarray
# The dtype objects of the device frameworks (torch.float32, CuPy's float32) that array() has seen named
# "float32": a device array's common case is then decided by one set look-up, like numpy's by an identity test.
# Filled by the full checks, never changes an answer.
_DEVICE_F32: set[Any] = set()


def array(x: Any, name: str, dtype: str, ndims: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Checks dtype and rank; returns the shape. ``layout`` describes the expected shape for messages."""
    if type(x) is np.ndarray:  # fast path: this runs on every call of a microsecond op
        shape: tuple[int, ...] = x.shape
        if x.dtype is _NP_DTYPES[dtype] and x.ndim in ndims:
            return shape
    else:
        shape = _shape(x, name)
    if dtype_name(x) != dtype:
        raise DTypeError(f"{name} must have dtype {dtype}; got {dtype_name(x)}", arg=name)
    if dtype == "float32":
        _DEVICE_F32.add(x.dtype)
    if len(shape) not in ndims:
        raise ShapeError(f"{name} must have shape {layout}; got {_fmt(shape)}", arg=name)
    return shape


def integer(
    value: Any, name: str, minimum: int, maximum: int | None = None, *, hint: str | None = None
) -> int:
    """A Python or numpy integer (not bool) in [minimum, maximum]; ``hint`` words the range in the messages
    (``"in [0, 2**64)"``; default ``>= minimum`` or ``in [minimum, maximum]``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(
            f"{name} must be an integer{' ' + hint if hint else ''}; got {value!r}", arg=name
        )
    v = int(value)
    if v < minimum or (maximum is not None and v > maximum):
        bound = hint or (f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]")
        raise OutOfRangeError(f"{name} must be {bound}; got {v}", arg=name)
    return v


def real(value: Any, name: str, minimum: float, maximum: float = math.inf, *, open_lo: bool = False) -> float:
    """A finite real number (not bool) in [minimum, maximum] ((minimum, maximum] with ``open_lo``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name} must be a real number; got {value!r}", arg=name)
    v = float(value)
    if not math.isfinite(v) or not minimum <= v <= maximum or (open_lo and v == minimum):
        lo = f"> {minimum}" if open_lo else f">= {minimum}"
        bound = lo if maximum == math.inf else f"in {'(' if open_lo else '['}{minimum}, {maximum}]"
        raise OutOfRangeError(f"{name} must be a finite number {bound}; got {value!r}", arg=name)
    return v


def finite(value: Any, name: str) -> float:
    """A finite real number (not bool), any sign."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name} must be a real number; got {value!r}", arg=name)
    if not math.isfinite(float(value)):
        raise OutOfRangeError(f"{name} must be finite; got {value!r}", arg=name)
    return float(value)


def team_nodes(shape: tuple[int, ...], name: str) -> None:
    """The team ops' node capacity: ``shape[-1]`` at most :data:`~toporoute.types.team_codes.TEAM_MAX_NODES`
    (one 64-bit word per adjacency row in the core)."""
    if shape[-1] > TEAM_MAX_NODES:
        raise ShapeError(f"{name} must hold at most {TEAM_MAX_NODES} nodes; got N = {shape[-1]}", arg=name)


def graph(adj: Any, alive: Any, adj_name: str = "adj", alive_name: str = "alive") -> tuple[int, ...]:
    """adj (B, N, N) or (N, N) bool and alive (B, N) or (N,) bool; returns the shape of adj. The names are the
    arguments' in the messages."""
    shape = square(adj, adj_name)
    per_node(alive, alive_name, shape[:-1], "bool", of=adj_name)
    return shape


def per_node(x: Any, name: str, batch: tuple[int, ...], dtype: str, *, of: str = "the graph") -> None:
    """``x`` must be a per-node array of ``dtype`` whose shape is ``batch``, the graph's (B, N) or (N,); ``of``
    names what it matches in the messages."""
    shape = array(x, name, dtype, (len(batch),), f"(B, N) or (N,) matching {of}")
    same_shape(shape, name, batch, "(B, N)" if len(batch) == 2 else "(N,)")


def plain_graph(adj: Any, alive: Any) -> bool:
    """The common case of a graph argument: numpy (B, N, N) / (B, N) bool arrays, decided with a few comparisons
    (anything else goes through :func:`graph`, which words the errors)."""
    return (
        type(adj) is ND
        and type(alive) is ND
        and adj.dtype is BOOL
        and alive.dtype is BOOL
        and adj.ndim == 3
        and adj.shape[1] == adj.shape[2]
        and alive.shape == adj.shape[:2]
    )


def _plain_tau_k_in(tau_value: Any, k_in_value: Any) -> bool:
    """The common case of the scalars of ``ops.route`` and ``ops.route_indexed``: a float ``tau`` in [-1, 1]
    and an int ``k_in`` >= 0 (anything else goes through :func:`tau` and :func:`k_in`, which word the errors)."""
    return (
        type(tau_value) is float and type(k_in_value) is int and -1.0 <= tau_value <= 1.0 and k_in_value >= 0
    )


def route(args: Args) -> Args:
    """All checks of ``ops.route`` on ``(q, k, active, tau, k_in)``. The common case (numpy float32 arrays, no
    mask, a float and an int) is decided with a handful of comparisons: route itself takes microseconds."""
    q, k, active, tau_value, k_in_value = args
    if active is None and _plain_tau_k_in(tau_value, k_in_value):
        if (
            type(q) is ND
            and type(k) is ND
            and q.dtype is F32
            and k.dtype is F32
            and 2 <= q.ndim <= 3
            and q.shape == k.shape
        ):
            return args
        # the same for device arrays (CuPy, PyTorch) whose float32 has been seen; a list or a scalar has no
        # dtype: the full checks say why
        if (
            type(q) is type(k)
            and getattr(q, "dtype", None) in _DEVICE_F32
            and getattr(k, "dtype", None) in _DEVICE_F32
            and 2 <= len(shape := q.shape) <= 3
            and shape == k.shape
        ):
            return args
    qs = array(q, "q", "float32", (2, 3), "(B, N, D) or (N, D)")
    ks = array(k, "k", "float32", (2, 3), "(B, N, D) or (N, D)")
    same_shape(ks, "k", qs, "the shape of q")
    active_mask(active, qs[:-1])
    return q, k, active, tau(tau_value), k_in(k_in_value)


def edit_rows(edits: Any, adj_shape: tuple[int, ...], rows: str, width: int) -> None:
    """``edits`` must be int32 rows of ``width`` values, ``(B, rows, width)`` with B of adj, or ``(rows,
    width)`` for a single graph (``dag_edit``'s ``(kind, node, arg)``, ``team_project``'s ``(kind, a, b,
    role)``); ``rows`` names their count in the messages."""
    single = f"({rows}, {width})"
    layout = f"(B, {rows}, {width}) or {single} matching adj"
    es = typed_array(edits, "edits", ("int32",), (len(adj_shape),), layout)
    if es[-1] != width or es[:-2] != adj_shape[:-2]:
        want = f"(B, {rows}, {width}) with B of adj" if len(adj_shape) == 3 else single
        raise ShapeError(f"edits must have shape {want}; got {es}", arg="edits")


def square(adj: Any, name: str) -> tuple[int, ...]:
    """``adj`` must be a bool (B, N, N) or (N, N) array; returns its shape."""
    shape = array(adj, name, "bool", (2, 3), "(B, N, N) or (N, N)")
    if shape[-1] != shape[-2]:
        raise ShapeError(f"{name} must be square in its last two axes (N, N); got {shape}", arg=name)
    return shape


def _graph(adj: Any, other: Any, other_name: str, other_dtype: str, active: Any) -> None:
    """The checks of ``ops.toposort`` (other: weights, float32) and ``ops.graph_stats`` (other: prev, bool)."""
    if (
        type(adj) is ND
        and other is None
        and active is None
        and adj.dtype is BOOL
        and 2 <= adj.ndim <= 3
        and (shape := adj.shape)[-1] == shape[-2]
    ):
        return
    shape = square(adj, "adj")
    if other is not None:
        os_ = array(other, other_name, other_dtype, (2, 3), "(B, N, N) or (N, N)")
        same_shape(os_, other_name, shape, "the shape of adj")
    active_mask(active, shape[:-1])


def toposort(args: Args) -> Args:
    """All checks of ``ops.toposort`` on ``(adj, weights, active)``."""
    _graph(args[0], args[1], "weights", "float32", args[2])
    return args


def graph_stats(args: Args) -> Args:
    """All checks of ``ops.graph_stats`` on ``(adj, active, prev)``."""
    _graph(args[0], args[2], "prev", "bool", args[1])
    return args


def _qmix_params(params: Any) -> Any:
    """The config of ``params``, which must be a QMixParams."""
    if not isinstance(params, QMixParams):
        raise InvalidArgumentError(
            f"params must be a toporoute.ops.QMixParams; got {type(params).__name__}", arg="params"
        )
    return params.config


def qmix_forward(args: Args) -> Args:
    """All checks of ``ops.qmix_forward`` on ``(params, obs, adj, hidden, active)``, the arrays against the
    params' config."""
    params, obs, adj, hidden, active = args
    config = _qmix_params(params)
    shape: tuple[int, ...]
    if (
        type(obs) is ND
        and type(adj) is ND
        and active is None
        and obs.dtype is F32
        and adj.dtype is BOOL
        and obs.ndim == 3
        and (shape := obs.shape)[2] == config.obs_dim
        and shape[1] >= 1
        and adj.shape == (shape[0], shape[1], shape[1])
        and (
            hidden is None
            or (
                type(hidden) is ND
                and hidden.dtype is F32
                and hidden.shape == (shape[0], shape[1], config.hidden)
            )
        )
    ):
        return args
    shape = array(obs, "obs", "float32", (2, 3), "(B, N, obs_dim) or (N, obs_dim)")
    if shape[-1] != config.obs_dim:
        raise ShapeError(
            f"obs must have {config.obs_dim} features (params.config.obs_dim); got {shape[-1]}", "obs"
        )
    if shape[-2] < 1:
        raise ShapeError(f"obs must hold at least one agent; got shape {shape}", arg="obs")
    batch = shape[:-1]
    ashape = square(adj, "adj")
    same_shape(ashape, "adj", (*batch, batch[-1]), "(B, N, N) matching obs")
    if hidden is not None:
        hs = array(hidden, "hidden", "float32", (2, 3), "(B, N, H) or (N, H)")
        same_shape(hs, "hidden", (*batch, config.hidden), f"(B, N, {config.hidden}) matching obs")
    active_mask(active, batch)
    return args


def qmix_mix(args: Args) -> Args:
    """All checks of ``ops.qmix_mix`` on ``(params, q_taken, state)``: params with a mixer, the arrays against
    its config."""
    params, q_taken, state = args
    config = _qmix_params(params)
    if not params.has_mixer:
        params.mixer_arrays()  # raises the error
    qs: tuple[int, ...]
    if (
        type(q_taken) is ND
        and type(state) is ND
        and q_taken.dtype is F32
        and state.dtype is F32
        and q_taken.ndim == 2
        and (qs := q_taken.shape)[1] == config.n_agents
        and state.shape == (qs[0], config.state_dim)
    ):
        return args
    qs = array(q_taken, "q_taken", "float32", (1, 2), "(B, n_agents) or (n_agents,)")
    if qs[-1] != config.n_agents:
        raise ShapeError(
            f"q_taken must have {config.n_agents} agents (params.config.n_agents); got {qs[-1]}", "q_taken"
        )
    ss = array(state, "state", "float32", (1, 2), "(B, state_dim) or (state_dim,)")
    same_shape(ss, "state", (*qs[:-1], config.state_dim), f"(B, {config.state_dim}) matching q_taken")
    return args


def same_shape(
    x_shape: tuple[int, ...], name: str, expected: tuple[int, ...], layout: str, *, arg: str | None = None
) -> None:
    if x_shape != expected:
        # "k must have the shape of q, (2, 3, 4)" or "state must have shape (B, 156) matching q_taken = (4, 156)"
        what = f"{layout}," if layout.startswith("the shape of") else f"shape {layout} ="
        raise ShapeError(
            f"{name} must have {what} {_fmt(expected)}; got {_fmt(x_shape)}", arg=name if arg is None else arg
        )


def active_mask(active: Any, batch_shape: tuple[int, ...]) -> None:
    """``active`` must be a bool array of shape ``batch_shape`` (``(B, N)`` or ``(N,)``)."""
    if active is not None:
        per_node(active, "active", batch_shape, "bool")


def tau(value: Any) -> float:
    if type(value) is float and -1.0 <= value <= 1.0:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"tau must be a real number in [-1, 1]; got {value!r}", arg="tau")
    v = float(value)
    if not math.isfinite(v) or not -1.0 <= v <= 1.0:
        raise OutOfRangeError(f"tau must be in [-1, 1]; got {value!r}", arg="tau")
    return v


def k_in(value: Any) -> int:
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"k_in must be an integer >= 0 (0: no cap); got {value!r}", arg="k_in")
    v = int(value)
    if v < 0:
        raise OutOfRangeError(f"k_in must be >= 0 (0: no cap); got {v}", arg="k_in")
    return v


def int_array(x: Any, name: str, minimum: int) -> np.ndarray:
    """An integer array (or Python int) with every value >= minimum, as int64."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise DTypeError(f"{name} must be an integer or integer array; got dtype {arr.dtype}", arg=name)
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < minimum:
        raise OutOfRangeError(f"{name} must be >= {minimum}; got {arr.min()}", arg=name)
    return arr


def typed_array(
    x: Any,
    name: str,
    dtypes: tuple[str, ...],
    ndims: tuple[int, ...],
    layout: str,
    *,
    arg: str | None = None,
) -> tuple[int, ...]:
    """Like :func:`array` for several allowed dtypes; ``name`` starts the message, ``arg`` (default ``name``)
    is the argument the exception names (``"pool"`` for ``"pool[1] hidden"``)."""
    arg = name if arg is None else arg
    shape = getattr(x, "shape", None)
    if shape is None or not hasattr(x, "dtype"):
        raise DTypeError(f"{name} must be an array (numpy, CuPy or PyTorch); got {type(x).__name__}", arg=arg)
    shape = tuple(int(s) for s in shape)
    if dtype_name(x) not in dtypes:
        allowed = dtypes[0] if len(dtypes) == 1 else ", ".join(dtypes[:-1]) + " or " + dtypes[-1]
        raise DTypeError(f"{name} must have dtype {allowed}; got {dtype_name(x)}", arg=arg)
    if len(shape) not in ndims:
        raise ShapeError(f"{name} must have shape {layout}; got {_fmt(shape)}", arg=arg)
    return shape


INDEX_DTYPES = ("int32", "int64")
MASK_DTYPES = ("bool", "int32", "int64")
NP_INDEX_DTYPES = tuple(np.dtype(name) for name in INDEX_DTYPES)
_NP_MASK_DTYPES = tuple(np.dtype(name) for name in MASK_DTYPES)


def _writeable_c_contiguous(x: Any, name: str, arg: str) -> None:
    """Arrays written in place must be one C-contiguous, writeable block (checked for numpy arrays)."""
    if type(x) is not np.ndarray:
        return
    if not x.flags.c_contiguous:
        raise DTypeError(
            f"{name} must be C-contiguous (it is written in place); got strides {x.strides} bytes "
            f"for shape {_fmt(x.shape)}",
            arg=arg,
        )
    if not x.flags.writeable:
        raise InvalidArgumentError(
            f"{name} must be writeable (it is written in place); got a read-only array", arg=arg
        )


def pool_input(
    hidden: Any, mask: Any, rows: Any, *, prefix: str = "", arg: str | None = None
) -> tuple[int, int, int]:
    """hidden (n, L, D) float32, mask (n, L) bool / int32 / int64, rows (n,) int32 / int64 or None; returns
    (n, L, D). ``prefix`` (e.g. ``"pool[1] "``) starts every message; ``arg`` is the argument named."""
    hs = typed_array(hidden, f"{prefix}hidden", ("float32",), (3,), "(n, L, D)", arg=arg or "hidden")
    ms = typed_array(mask, f"{prefix}mask", MASK_DTYPES, (2,), "(n, L)", arg=arg or "mask")
    same_shape(ms, f"{prefix}mask", hs[:2], "(n, L) of hidden", arg=arg or "mask")
    if rows is not None:
        rs = typed_array(rows, f"{prefix}rows", INDEX_DTYPES, (1,), "(n,)", arg=arg or "rows")
        same_shape(rs, f"{prefix}rows", hs[:1], "(n,) of hidden", arg=arg or "rows")
    n, length, dim = hs  # rank 3, checked above
    return n, length, dim


def mean_pool(args: Args) -> Args:
    """All shape and dtype checks of ``ops.mean_pool`` on ``(hidden, mask, out, rows)``. Values (row range and
    repeats, non-finite tokens) are checked by the backends."""
    hidden, mask, out, rows = args
    shape: tuple[int, int, int]
    if (
        type(hidden) is ND
        and type(mask) is ND
        and hidden.dtype is F32
        and hidden.ndim == 3
        and mask.dtype in _NP_MASK_DTYPES
        and mask.shape == (shape := hidden.shape)[:2]
        and (
            (out is None and rows is None)
            or (
                type(out) is ND
                and out.dtype is F32
                and out.ndim == 2
                and out.shape[1] == shape[2]
                and out.flags.c_contiguous
                and out.flags.writeable
                and (
                    (rows is None and out.shape[0] >= shape[0])
                    or (type(rows) is ND and rows.dtype in NP_INDEX_DTYPES and rows.shape == shape[:1])
                )
            )
        )
    ):
        return args
    n, _, D = pool_input(hidden, mask, rows)
    if out is None:
        if rows is not None:
            raise InvalidArgumentError(
                "rows needs out (the array whose rows it names); got out=None", arg="rows"
            )
        return args
    os_ = typed_array(out, "out", ("float32",), (2,), "(M, D)")
    if os_[1] != D:
        raise ShapeError(f"out must have shape (M, {D}) (D of hidden); got {_fmt(os_)}", arg="out")
    if rows is None and os_[0] < n:
        raise ShapeError(
            f"out must have at least {n} rows (rows=None writes row i to out[i]); got {_fmt(os_)}", arg="out"
        )
    _writeable_c_contiguous(out, "out", "out")
    return args


def route_indexed(args: Args) -> Args:
    """All checks of ``ops.route_indexed`` on ``(table, q_rows, k_rows, tau, k_in, active, pool)``; the pool
    comes back as a list of triples (None when empty). Like :func:`route`, the common case is decided with a
    handful of comparisons."""
    table, q_rows, k_rows, tau_value, k_in_value, active, pool = args
    if (
        pool is None
        and active is None
        and type(table) is ND
        and type(q_rows) is ND
        and type(k_rows) is ND
        and table.dtype is F32
        and table.ndim == 2
        and q_rows.dtype in NP_INDEX_DTYPES
        and k_rows.dtype in NP_INDEX_DTYPES
        and 1 <= q_rows.ndim <= 2
        and q_rows.shape == k_rows.shape
        and _plain_tau_k_in(tau_value, k_in_value)
    ):
        return args
    typed_array(table, "table", ("float32",), (2,), "(M, D)")
    qs = typed_array(q_rows, "q_rows", INDEX_DTYPES, (1, 2), "(B, N) or (N,)")
    ks = typed_array(k_rows, "k_rows", INDEX_DTYPES, (1, 2), "(B, N) or (N,)")
    same_shape(ks, "k_rows", qs, "the shape of q_rows")
    tau_value, k_in_value = tau(tau_value), k_in(k_in_value)
    active_mask(active, qs)
    return table, q_rows, k_rows, tau_value, k_in_value, active, pool_args(pool, table)


def pool_args(pool: Any, table: Any) -> list[tuple[Any, Any, Any]] | None:
    """``pool`` of ``ops.route_indexed``: None, or a sequence of (hidden, mask, rows) triples pooled into
    ``table`` (which must then be C-contiguous and writeable); returns the triples as a list (None when
    empty). Every error names ``pool``."""
    if pool is None:
        return None
    if (
        isinstance(pool, (str, bytes))
        or hasattr(pool, "dtype")
        or not hasattr(pool, "__len__")
        or not hasattr(pool, "__iter__")
    ):
        raise InvalidArgumentError(
            f"pool must be a sequence of (hidden, mask, rows) triples; got {type(pool).__name__}", arg="pool"
        )
    triples = []
    D = _shape(table, "table")[1]
    for i, item in enumerate(pool):
        if isinstance(item, (str, bytes)) or not hasattr(item, "__len__") or len(item) != 3:
            raise InvalidArgumentError(
                f"pool[{i}] must be a (hidden, mask, rows) triple; got {type(item).__name__}"
                + (f" of length {len(item)}" if hasattr(item, "__len__") else ""),
                arg="pool",
            )
        hidden, mask, rows = item
        prefix = f"pool[{i}] "
        if rows is None:
            raise InvalidArgumentError(
                f"{prefix}rows must be an int32 or int64 array of table rows; got None", arg="pool"
            )
        hs = pool_input(hidden, mask, rows, prefix=prefix, arg="pool")
        if hs[2] != D:
            raise ShapeError(
                f"{prefix}hidden must have D = {D} (columns of table) in its last axis; got {_fmt(hs)}",
                arg="pool",
            )
        triples.append((hidden, mask, rows))
    if not triples:
        return None
    _writeable_c_contiguous(table, "table", "table")
    return triples
