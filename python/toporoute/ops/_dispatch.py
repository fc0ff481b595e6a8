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
from ..types.op_table import OPS
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


def dispatcher(
    name: str, check: Check, returns: type[R], *, single: Callable[[Any], R] = unbatch
) -> Callable[[str | None, Args], R]:
    """The dispatch of op ``name``: ``run(backend, args)`` with ``args`` in the order of the op's
    :attr:`~toporoute.types.op_table.OpSpec.args`. ``returns`` types the result; ``single`` turns a batch of
    one back into a single graph's result (default: :func:`unbatch`)."""
    spec = OPS[name]
    device = spec.index(spec.device) if spec.device else -1
    lead = spec.index(spec.lead) if spec.lead else -1
    rank = spec.rank
    batched = tuple(a.batch for a in spec.args)

    def run(backend: str | None, args: Args) -> R:
        args = check(args)
        fn = kernel(name, backend, _HOST if device < 0 else args[device])
        if lead < 0 or len(args[lead].shape) == rank:
            out: R = fn(*args)
            return out
        return single(fn(*[a[None] if b and a is not None else a for a, b in zip(args, batched)]))

    run.__name__ = run.__qualname__ = f"dispatch_{name}"
    return run
