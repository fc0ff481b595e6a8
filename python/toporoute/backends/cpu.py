"""CPU backend: thin calls into the compiled core. Arrays are batched and validated by :mod:`toporoute.ops`;
the core re-checks dtypes and shapes, never copies its inputs, releases the GIL and raises
:mod:`toporoute.errors` exceptions. ``isa`` selects a SIMD level for tests (default: the process-wide choice)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..types import results
from ..types.op_table import OPS
from ..types.results import Density, QMixStep, maker

if TYPE_CHECKING:
    from ..types.qmix_params import QMixParams

try:
    from .. import _core
except ImportError as exc:  # built without a C++ compiler, or a broken build
    _core = None  # type: ignore[assignment]
    _IMPORT_ERROR = str(exc)
else:
    _IMPORT_ERROR = ""

__all__ = [
    "CHECKS_INPUTS",
    "DEFERRED",
    "KERNELS",
    "available",
    "conductor_raw",
    "has_op",
    "qmix_weights",
    "simd_level",
]


def available() -> tuple[bool, str]:
    if _core is None:
        return False, f"toporoute._core is not built ({_IMPORT_ERROR}); reinstall with a C++ compiler"
    return True, ""


def has_op(name: str) -> bool:
    """Whether this build of the core has the op ``name`` (a core built before the op was added lacks it)."""
    return _core is not None and hasattr(_core, name)


def conductor_density(nodes: np.ndarray, edges: np.ndarray, steps: np.ndarray, n_max: np.ndarray) -> Density:
    shape = nodes.shape
    flat = [np.ascontiguousarray(a.reshape(-1)) for a in (nodes, edges, steps, n_max)]
    return Density(*(r.reshape(shape) for r in _core.conductor_density(*flat)))


def qmix_weights(params: QMixParams) -> Any:
    """The params' weights packed for the core (``_core.QMixWeights``), built once and cached on the params."""
    return params.packed("cpu", _core.QMixWeights)


def simd_level(op: str, args: tuple[Any, ...]) -> str | None:
    """The SIMD level a call of ``op`` on ``args`` (the op table's order) runs at when no level is named, for the
    ops whose level depends on the call's size: the qmix networks, on the AMX tiles only from enough rows
    (``_core.qmix_level``; rows = B * N agent rows for the forward, B episodes for the mixer). None for the
    other ops: they run at the process's level (``toporoute info``)."""
    if _core is None or op not in ("qmix_forward", "qmix_mix"):
        return None
    first = args[1]  # obs (B, N, obs_dim) or (N, obs_dim); q_taken (B, n_agents)
    shape = np.shape(first)
    rows = int(np.prod(shape[:-1])) if op == "qmix_forward" else int(shape[0])
    return str(_core.qmix_level(op, rows))


DEFERRED = 255  # the core's code for a plan outside its block layout: checked by the reference


def conductor_raw(texts: list[str], contexts: list[Any], options: Any) -> dict[str, Any]:
    """The core's own output for a batch of plans: :data:`DEFERRED` where it hands a plan back."""
    shared = list({id(c): c for c in contexts}.values())
    index = {id(c): k for k, c in enumerate(shared)}
    pool = {r: i for i, r in enumerate(options.pool)}
    nodes = [n for c in shared for n in c.nodes]
    return _core.conductor_check(
        [t.encode("utf-8", "surrogatepass") for t in texts],
        list(options.pool),
        np.asarray([index[id(c)] for c in contexts], np.int64),
        np.asarray([c.turn for c in shared], np.int32),
        np.cumsum([0] + [len(c.nodes) for c in shared]).astype(np.int64),
        [n.id for n in nodes],
        np.asarray([pool[n.role] for n in nodes], np.int16),
        np.asarray([n.turn for n in nodes], np.int32),
        options.lenient,
        options.strict_tester,
        options.concise,
        options.max_bytes,
        options.max_depth,
        options.max_agents,
        options.max_refs,
    )


def conductor_check(texts: list[str], contexts: list[Any], options: Any) -> Any:
    """Plans in the compiled core (OpenMP over the batch); those it hands back go to the reference."""
    from ..types.conductor_topology import TopologyBatch, assemble, check

    out = conductor_raw(texts, contexts, options)

    def text(b: bytes | None) -> str | None:
        return None if b is None else b.decode("utf-8", "surrogatepass")

    batch = TopologyBatch(
        **{name: out[name] for name in TopologyBatch.ARRAYS},
        node_id=tuple(out["node_id"]),
        message=tuple(text(m) or "" for m in out["message"]),
        yaml=tuple(text(y) for y in out["yaml"]),
        warnings=tuple(tuple(text(w) or "" for w in ws) for ws in out["warnings"]),
        contexts=tuple(contexts),
        options=options,
    )
    if not (batch.error == DEFERRED).any():
        return batch
    items = [
        check(texts[b], contexts[b], options) if batch.error[b] == DEFERRED else batch.item(b)
        for b in range(len(batch))
    ]
    return assemble(items, contexts, options)


def _thin(
    name: str, convert: Callable[[Any], Any] | None = None, *, call: str = "", isa: bool = False
) -> Callable[..., Any]:
    """The kernel of op ``name``: a call of ``_core.<name>`` with the op table's arguments in order (or the
    expression ``call`` over them), its tuple turned into the result by ``convert``; ``isa=''`` last for the
    ops with a kernel per SIMD level. Made from the table, its signature (keywords, and None defaults for the
    trailing optional arguments) is the table's: no second copy to keep in step."""
    names = [a.name for a in OPS[name].args]
    optional = 0
    while optional < len(names) and OPS[name].args[len(names) - 1 - optional].layout.endswith(" or None"):
        optional += 1
    params = [*names[: len(names) - optional], *(f"{n}=None" for n in names[len(names) - optional :])]
    signature = ", ".join([*params, "isa=''"] if isa else params)
    expr = call or f"_core.{name}({', '.join([*names, 'isa'] if isa else names)})"
    src = f"def {name}({signature}):\n    return {f'convert({expr})' if convert else expr}\n"
    scope: dict[str, Any] = {"convert": convert, **globals()}
    exec(src, scope)  # noqa: S102 - a fixed template over the op table's argument names
    fn: Callable[..., Any] = scope[name]
    fn.__doc__ = f"``toporoute._core``: {OPS[name].summary}."
    return fn


def _result(returns: str) -> Callable[[Any], Any] | None:
    """The constructor of the op table's result type ``returns`` from the core's tuple (None: the array itself):
    ``_core.result`` bound to the class, a C call (a core built before it had: the Python ``maker``)."""
    if returns == "ndarray":
        return None
    cls = getattr(results, returns)
    make = getattr(_core, "result", None)
    return functools.partial(make, cls) if make is not None else maker(cls)


# The kernels that do more than call _core.<op> with the table's arguments and build the table's result type
# from its tuple; every other op of the table gets that call (_thin), so an op whose binding follows the table
# needs no line here.
_SPECIAL: dict[str, Callable[..., Any]] = {
    "route": _thin("route", _result("Routes"), isa=True),
    "route_indexed": _thin("route_indexed", _result("Routes"), isa=True),
    "conductor_density": conductor_density,
    "conductor_check": conductor_check,
    "qmix_forward": _thin(
        "qmix_forward",
        QMixStep._make,
        call="_core.qmix_forward(qmix_weights(params), obs, adj, hidden, active, isa)",
        isa=True,
    ),
    "qmix_mix": _thin("qmix_mix", call="_core.qmix_mix(qmix_weights(params), q_taken, state, isa)", isa=True),
}

# every op of the op table (one an older build of the core lacks: has_op, checked by backends.kernel)
KERNELS: dict[str, Callable[..., Any]] = {
    name: _SPECIAL.get(name) or _thin(name, _result(spec.returns)) for name, spec in OPS.items()
}

# The ops whose bindings check every argument the op's validator checks, raising the same error class for the same
# argument (tests/ops/test_op_table.py holds each to it): given numpy arrays and Python scalars, ops.<op> calls the
# binding without running the validator first, and runs it only to word an error (toporoute.ops._dispatch). Their
# kernels carry ``direct``: (the binding, the result constructor), the kernel's call without its Python frame.
CHECKS_INPUTS = frozenset({"route", "toposort", "graph_stats"})
for _name in CHECKS_INPUTS:
    _binding, _make = getattr(_core, _name, None), _result(OPS[_name].returns)
    if _binding is not None and _make is not None:  # else: no core, or one built before the op (has_op)
        KERNELS[_name].direct = (_binding, _make)  # type: ignore[attr-defined]


def __getattr__(name: str) -> Callable[..., Any]:
    """``cpu.<op>``: the kernel registered for the op (tests call them with ``isa=``)."""
    try:
        return KERNELS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
