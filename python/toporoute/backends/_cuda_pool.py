"""CUDA kernels of the pool ops: ``mean_pool`` and ``route_indexed`` (with its ``pool=`` form).

numpy arguments run synchronously through the core's host entries (copied to the GPU and back; arrays the op
writes in place, ``out`` and the pooled ``table``, are written back into the caller's numpy array). CuPy arrays
and CUDA PyTorch tensors are handed over through DLPack and never synchronised: ``out`` and ``table`` are the
caller's device arrays, written in place on the framework's current stream, and bad input is reported by the
next toporoute call on the device or by :func:`toporoute.backends.cuda.synchronize`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..types.results import Routes
from ._cuda_base import framework_of, host, placement, require_core

__all__ = ["KERNELS", "mean_pool", "route_indexed"]


def mean_pool(hidden: Any, mask: Any, out: Any | None, rows: Any | None, device: int = 0) -> Any:
    """Masked mean pooling and L2 normalisation on the GPU (semantics:
    :func:`toporoute.backends.reference.mean_pool`).

    Parameters
    ----------
    hidden : (n, L, D) float32
        numpy, CuPy or CUDA PyTorch, like every array argument (all of one kind, on one device).
    mask : (n, L) bool, int32 or int64
        Non-zero where the token counts.
    out : (M, D) float32, optional
        Written in place at ``rows`` (C-contiguous).
    rows : (n,) int32 or int64, optional
        Distinct rows of ``out`` in [0, M); only with ``out``.
    device : int
        GPU used for numpy inputs (device arrays run where they live).

    Returns
    -------
    ``out``, or a new ``(n, D)`` float32 array of the inputs' kind (numpy for numpy inputs).
    """
    core = require_core()
    where = placement({"hidden": hidden, "mask": mask, "out": out, "rows": rows})
    if where[0] == "numpy":
        return core.mean_pool_cuda_host(host(hidden), host(mask), out, host(rows), device)
    fw = framework_of(where)
    stream = fw.stream()
    capsules = [None if x is None else fw.export(x, stream) for x in (hidden, mask, out, rows)]
    made = core.mean_pool_cuda_dlpack(*capsules, stream)
    return out if out is not None else fw.wrap(made)


def route_indexed(
    table: Any,
    q_rows: Any,
    k_rows: Any,
    tau: float,
    k_in: int,
    active: Any | None = None,
    pool: Sequence[tuple[Any, Any, Any]] | None = None,
    device: int = 0,
) -> Routes:
    """Routing over rows of one embedding table on the GPU (semantics:
    :func:`toporoute.backends.reference.route_indexed`).

    Parameters
    ----------
    table : (M, D) float32
        Unit stride along D for device arrays; with ``pool``, written in place (C-contiguous).
    q_rows, k_rows : (B, N) int32 or int64
        Table row of each agent's need and offer; -1 marks an inactive agent.
    tau : float
        Edge ``j -> i`` iff ``scores[b, j, i] > float32(tau)``.
    k_in : int
        Providers kept per recipient; 0 means no cap.
    active : (B, N) bool, optional
        ANDed with the -1 padding.
    pool : sequence of (hidden, mask, rows), optional
        Pooled into ``table[rows]`` first, as by :func:`mean_pool`.
    device : int
        GPU used for numpy inputs.

    Returns
    -------
    Routes
        numpy for numpy inputs, else the inputs' framework on their device.
    """
    core = require_core()
    triples = list(pool) if pool else []
    arrays = {"table": table, "q_rows": q_rows, "k_rows": k_rows, "active": active}
    for i, (hidden, mask, rows) in enumerate(triples):
        arrays.update({f"pool[{i}] hidden": hidden, f"pool[{i}] mask": mask, f"pool[{i}] rows": rows})
    where = placement(arrays)

    def inputs(convert: Callable[[Any], Any]) -> tuple[Any, ...]:
        """q_rows, k_rows, active and the pool's hiddens, masks and rows (a list each), as both entries take
        them after the table."""
        pooled = ([convert(t[j]) for t in triples] for j in range(3))
        return (convert(q_rows), convert(k_rows), convert(active), *pooled)

    if where[0] == "numpy":
        # with a pool, the table is pooled in place: the caller's own array
        out = core.route_indexed_cuda_host(
            table if triples else host(table), *inputs(host), float(tau), int(k_in), device
        )
        return Routes(*out)
    fw = framework_of(where)
    stream = fw.stream()

    def export(x: Any) -> Any:
        return None if x is None else fw.export(x, stream)

    made = core.route_indexed_cuda_dlpack(export(table), *inputs(export), None, float(tau), int(k_in), stream)
    return Routes(*(fw.wrap(c) for c in made))


KERNELS: dict[str, Callable[..., Any]] = {"mean_pool": mean_pool, "route_indexed": route_indexed}
