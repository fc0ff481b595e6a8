"""CUDA kernels of the per-graph statistics ops: :func:`graph_stats`, :func:`conductor_density` and
:func:`bandit_select` (semantics: :mod:`toporoute.backends.reference`).

numpy inputs are copied to the GPU (``device``, default 0) and the results come back as numpy arrays,
synchronously; CuPy arrays and CUDA PyTorch tensors run where they live, on the framework's current stream, and
return the same framework's arrays without synchronising (see :mod:`toporoute.backends.cuda`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..types.results import BanditSelection, Density, GraphStats
from ._cuda_base import device_call, host, require_core

__all__ = ["KERNELS", "bandit_select", "conductor_density", "graph_stats"]


def graph_stats(adj: Any, active: Any | None, prev: Any | None, device: int = 0) -> GraphStats:
    """Edges, density, degrees, reciprocity and Jaccard distance to ``prev`` on the GPU.

    Parameters
    ----------
    adj : (B, N, N) bool
        ``adj[b, src, dst]``; numpy, CuPy or CUDA PyTorch, like the other arguments.
    active : (B, N) bool, optional
    prev : (B, N, N) bool, optional
        The previous round's graphs (gives ``jaccard``).
    device : int
        GPU used for numpy inputs.

    Returns
    -------
    GraphStats
        ``edges (B,) int64``, ``density (B,) float64``, ``in_degree``/``out_degree (B, N) int32``,
        ``reciprocity (B,) float64`` and ``jaccard (B,) float64`` (None without ``prev``).
    """
    core = require_core()
    out = device_call(("adj", "active", "prev"), (adj, active, prev), core.graph_stats_cuda_dlpack)
    if out is None:
        return GraphStats(*core.graph_stats_cuda_host(host(adj), host(active), host(prev), device))
    return GraphStats(out[0], out[1], out[2], out[3], out[4], out[5] if len(out) == 6 else None)


def _flat(x: Any) -> Any:
    """A contiguous 1-D int64 copy-or-view of an array of any framework (broadcast views are copied)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x.reshape(-1), dtype=np.int64)
    if type(x).__module__.partition(".")[0] == "torch":
        return x.reshape(-1).long().contiguous()
    import cupy

    return cupy.ascontiguousarray(x.reshape(-1), dtype=cupy.int64)


def conductor_density(nodes: Any, edges: Any, steps: Any, n_max: Any, device: int = 0) -> Density:
    """AgentConductor's density terms and reward r_g on the GPU, elementwise over integer arrays of one shape
    (:func:`toporoute.ops.conductor_density` broadcasts them first).

    Returns
    -------
    Density
        Five float64 arrays of the inputs' shape: numpy for numpy inputs, else the inputs' framework.
    """
    core = require_core()
    shape = tuple(nodes.shape)
    flat = [_flat(x) for x in (nodes, edges, steps, n_max)]
    out = device_call(("nodes", "edges", "steps", "n_max"), flat, core.conductor_density_cuda_dlpack)
    if out is None:
        out = core.conductor_density_cuda_host(*flat, device)
    return Density(*(r.reshape(shape) for r in out))


_MODES = {"thompson": 0, "mean": 1}


def bandit_select(
    adj: Any,
    alpha: Any,
    beta: Any,
    k: int,
    weights: Any | None,
    seed: int,
    step: int,
    mode: str,
    active: Any | None,
    graph_offset: int,
    device: int = 0,
) -> BanditSelection:
    """HiVA's Thompson-sampling top-``k`` successors on the GPU (semantics:
    :func:`toporoute.backends.reference.bandit_select`).

    theta is drawn with the CPU's Philox counters and float64 steps (``toporoute/bandit_draw.hpp``, shared by
    both); only the device's log/cos/exp/pow may differ from the C library's by an ulp, which changes a theta
    very rarely (``tests/ops/test_cuda_stats.py`` measures the rate).

    Parameters
    ----------
    adj : (B, N, N) bool
    alpha, beta : (B, N) float32
    k : int >= 1
    weights : (B, N, N) float32, optional
    seed, step, mode, graph_offset
        As for :func:`toporoute.ops.bandit_select`.
    active : (B, N) bool, optional
        numpy arrays, CuPy arrays or CUDA PyTorch tensors, all of one kind and on one device.
    device : int
        GPU used for numpy inputs.

    Returns
    -------
    BanditSelection
        ``chosen (B, N, N) bool``, ``choices (B, N, k) int32``, ``theta (B, N) float32``: numpy for numpy inputs,
        else the inputs' framework on their device.
    """
    core = require_core()
    scalars = (int(k), int(seed), int(step), _MODES[mode], int(graph_offset))
    arrays = (adj, alpha, beta, weights, active)
    out = device_call(
        ("adj", "alpha", "beta", "weights", "active"), arrays, core.bandit_select_cuda_dlpack, *scalars
    )
    if out is None:
        out = core.bandit_select_cuda_host(*(host(x) for x in arrays), *scalars, device)
    return BanditSelection(*out)


# the ops of this module registered by the CUDA backend (merged into backends.cuda.KERNELS)
KERNELS: dict[str, Callable[..., Any]] = {
    "graph_stats": graph_stats,
    "conductor_density": conductor_density,
    "bandit_select": bandit_select,
}
