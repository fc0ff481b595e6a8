"""The one recipe behind every op of :mod:`toporoute.ops`, built from the op's declaration in
:data:`toporoute.types.op_table.OPS`: check the arguments, pick the backend's kernel, add the batch axis to a
single graph, call, and drop the axis from the result again.

Each public op is a documented, typed function whose body hands its arguments, in the table's order, to the
dispatcher built here once per op; the checks are the op's own (one validator per op, taking and returning the
argument tuple: the same tuple in the common case, normalised scalars otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ..backends import kernel
from ..errors import InvalidArgumentError
from ..types.op_table import OPS, OpSpec
from ..types.results import maker

__all__ = ["Args", "Check", "dispatcher", "unbatch"]

R = TypeVar("R")
Args = tuple[Any, ...]
Check = Callable[[Args], Args]
_HOST = np.empty(0)  # what picks the backend of an op without array arguments: the host


def unbatch(result: Any) -> Any:
    """Drops the batch axis of a result: each array field of a result class (None stays None), each element of
    a named tuple, or the array itself."""
    if isinstance(result, tuple):
        return type(result)._make(None if f is None else f[0] for f in result)  # type: ignore[attr-defined]
    fields = getattr(result, "__dict__", None)
    if fields is None or not hasattr(
        type(result), "__dataclass_fields__"
    ):  # an array (tensors have a __dict__)
        return result[0]
    make = _MAKERS.get(type(result))
    if make is None:
        make = _MAKERS[type(result)] = maker(type(result))
    return make([None if f is None else f[0] for f in fields.values()])


# The fast constructor of each result class met (types.results.maker), made once: a frozen dataclass's own
# __init__ costs a microsecond of a single graph's call. Filled on first use, never changes an answer.
_MAKERS: dict[type, Callable[[Any], Any]] = {}


def _guard(spec: OpSpec) -> str:
    """A Python expression over the op's arguments (by name) that holds when each has the exact type a kernel that
    checks its own inputs takes as it is: numpy arrays (or None where optional), the lead one at its batched rank,
    ``float`` and ``int`` scalars. Empty for an op with an argument of another kind: its calls always take the
    validator first."""
    terms = []
    for a in spec.args:
        kind = a.layout.split(" ", 1)[0]
        if kind.startswith("("):
            term = f"type({a.name}) is ND" + (
                f" and {a.name}.ndim == {spec.rank}" if a.name == spec.lead else ""
            )
            terms.append(f"({a.name} is None or {term})" if a.layout.endswith(" or None") else term)
        elif kind in ("float", "int"):
            terms.append(f"type({a.name}) is {kind}")
        else:
            return ""
    return " and ".join(terms) if spec.lead else ""


def dispatcher(
    name: str, check: Check, returns: type[R], *, single: Callable[[Any], R] = unbatch
) -> Callable[[str | None, Args], R]:
    """The dispatch of op ``name``: ``run(backend, args)`` with ``args`` in the order of the op's
    :attr:`~toporoute.types.op_table.OpSpec.args`. ``returns`` types the result; ``single`` turns a batch of
    one back into a single graph's result (default: :func:`unbatch`).

    Input is validated once. A kernel that carries ``direct`` (the compiled core's, for the ops whose bindings
    check every argument as the op's validator does: same error class, same argument; ``direct`` is its binding
    and result constructor, called without the kernel's Python frame) gets a batch of plain numpy arrays and
    Python scalars (:func:`_guard`) straight; should it refuse them, the validator runs to raise its
    own error (its wording), and where the validator finds nothing wrong (a value only the kernel reads, like a
    NaN), the kernel's error is raised. Every other call takes the validator first."""
    spec = OPS[name]
    device = spec.index(spec.device) if spec.device else -1
    lead = spec.index(spec.lead) if spec.lead else -1
    rank = spec.rank
    batched = tuple(a.batch for a in spec.args)
    # The direct call (binding, result constructor) of the kernel that checks its own inputs, by backend= value,
    # once a guarded call has resolved it: backend choice and the core's ops are fixed for the life of the
    # process, so this memo never changes an answer.
    checked: dict[str | None, tuple[Callable[..., Any], Callable[[Any], Any]]] = {}

    def slow(backend: str | None, args: Args) -> R:
        args = check(args)
        fn = kernel(name, backend, _HOST if device < 0 else args[device])
        if lead < 0 or len(args[lead].shape) == rank:
            out: R = fn(*args)
            return out
        return single(fn(*[a[None] if b and a is not None else a for a, b in zip(args, batched)]))

    def first(backend: str | None, args: Args) -> R:
        """A guarded call with no memo yet: the validator, then the kernel, whose direct call is remembered."""
        args = check(args)
        fn = kernel(name, backend, _HOST if device < 0 else args[device])
        direct = getattr(fn, "direct", None)
        if direct is not None:
            checked[backend] = direct
        out: R = fn(*args)
        return out

    guard = _guard(spec)
    if not guard:
        slow.__name__ = slow.__qualname__ = f"dispatch_{name}"
        return slow
    src = f"""def dispatch_{name}(backend, args):
    {", ".join(a.name for a in spec.args)}, = args
    if (backend is None or type(backend) is str) and {guard}:
        direct = checked.get(backend)
        if direct is None:
            return first(backend, args)
        binding, make = direct
        try:
            return make(binding(*args))
        except InvalidArgumentError as exc:
            error = exc
        check(args)
        raise error
    return slow(backend, args)
"""
    scope: dict[str, Any] = {
        "ND": np.ndarray, "InvalidArgumentError": InvalidArgumentError, "checked": checked, "check": check,
        "first": first, "slow": slow,
    }  # fmt: skip
    exec(src, scope)  # noqa: S102 - a fixed template over the op table's argument names
    run: Callable[[str | None, Args], R] = scope[f"dispatch_{name}"]
    return run
