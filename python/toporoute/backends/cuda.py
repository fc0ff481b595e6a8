"""CUDA backend: the kernels of :mod:`toporoute._core` on an NVIDIA GPU.

Arrays are batched and validated by :mod:`toporoute.ops` (shapes, dtypes, scalar ranges); the kernels check what
needs a pass over the data (non-finite values, negative weights) in the same pass as the work.

- numpy inputs are copied to the GPU (``device``, default 0), and the results come back as numpy arrays; the
  call is synchronous and raises for bad input like the CPU backend.
- CuPy arrays and PyTorch CUDA tensors are handed to the kernels without a copy through DLPack, on the
  framework's current stream; the outputs are allocated on the same device and returned as the same framework's
  arrays. **These calls never synchronise with the host**: bad input the kernels find is raised by the next
  toporoute call on that device, or by :func:`synchronize` (which waits for the device first).
- Q-Mix weights are copied to each device once and cached on the :class:`~toporoute.types.qmix_params.QMixParams`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..types.results import Order, QMixStep, Routes, maker, routes_of
from ._cuda_base import device_call, host, load_core, require_core, synchronize
from ._cuda_pool import KERNELS as _POOL_KERNELS
from ._cuda_stats import KERNELS as _STATS_KERNELS

if TYPE_CHECKING:
    from types import ModuleType

    from ..types.qmix_params import QMixParams

__all__ = ["KERNELS", "available", "qmix_forward", "qmix_mix", "route", "synchronize", "toposort"]


def available() -> tuple[bool, str]:
    """``(True, "")`` when the core was built with CUDA and a device is visible, else ``(False, reason)``."""
    core, why = load_core()
    if core is None:
        return False, why
    try:
        info = core.cuda_info()
    except Exception as exc:  # noqa: BLE001 - availability must never raise
        return False, f"toporoute._core.cuda_info() failed: {exc}"
    if not info.get("compiled", False):
        return False, "toporoute was built without CUDA (nvcc was not found when the package was built)"
    if int(info.get("device_count", 0)) < 1:
        return False, "no CUDA device is available (no GPU, or no NVIDIA driver)"
    return True, ""


# ------------------------------------------------------------------------------------------------------ ops


def route(q: Any, k: Any, active: Any | None, tau: float, k_in: int, device: int = 0) -> Routes:
    """Cosine routing on the GPU (semantics: :func:`toporoute.backends.reference.route`).

    Parameters
    ----------
    q, k : (B, N, D) float32
        numpy arrays, CuPy arrays or CUDA PyTorch tensors, all of one kind and on one device.
    tau : float
        Edge ``j -> i`` iff ``scores[b, j, i] > float32(tau)``.
    k_in : int
        Providers kept per recipient; 0 means no cap.
    active : (B, N) bool, optional
    device : int
        GPU used for numpy inputs (device arrays run where they live).

    Returns
    -------
    Routes
        ``scores (B, N, N) float32``, ``adjacency (B, N, N) bool``, ``inbox (B, N, K) int32`` and
        ``in_degree (B, N) int32``: numpy for numpy inputs, else the inputs' framework on their device.
    """
    core = require_core()
    out = device_call(("q", "k", "active"), (q, k, active), core.route_cuda_dlpack, float(tau), int(k_in))
    if out is None:
        out = core.route_cuda_host(host(q), host(k), host(active), float(tau), int(k_in), device)
    return routes_of(out)


def toposort(adj: Any, weights: Any | None, active: Any | None, device: int = 0) -> Order:
    """Greedy topological order with cycle breaking on the GPU (semantics:
    :func:`toporoute.backends.reference.toposort`).

    Parameters
    ----------
    adj : (B, N, N) bool
        ``adj[b, src, dst]``; numpy, CuPy or CUDA PyTorch, like the other arguments.
    weights : (B, N, N) float32, optional
        Finite and >= 0 (checked by the kernels; for device arrays, reported later: see :func:`synchronize`).
    active : (B, N) bool, optional
    device : int
        GPU used for numpy inputs.

    Returns
    -------
    Order
        ``order (B, N) int32``, ``level (B, N) int32``, ``removed (B, N, N) bool``, ``is_dag (B,) bool``:
        numpy for numpy inputs, else the inputs' framework on their device.
    """
    core = require_core()
    out = device_call(("adj", "weights", "active"), (adj, weights, active), core.toposort_cuda_dlpack)
    if out is None:
        out = core.toposort_cuda_host(host(adj), host(weights), host(active), device)
    return _order_of(out)


_order_of = maker(Order)

# ---------------------------------------------------------------------------------------------------- Q-Mix


def _qmix_weights(core: ModuleType, params: QMixParams, device: int) -> Any:
    """The params' weights on ``device`` (``_core.QMixWeightsCuda``), copied once and cached on the params."""
    return params.packed(
        f"cuda:{device}", lambda config, agent, mixer: core.QMixWeightsCuda(config, agent, mixer, device)
    )


def qmix_forward(
    params: QMixParams, obs: Any, adj: Any, hidden: Any | None, active: Any | None, device: int = 0
) -> QMixStep:
    """The Agent Q-Mix agent network on the GPU (semantics: :func:`toporoute.backends.reference.qmix_forward`).

    Parameters
    ----------
    obs : (B, N, obs_dim) float32
    adj : (B, N, N) bool
    hidden : (B, N, H) float32, optional
    active : (B, N) bool, optional
        numpy arrays, CuPy arrays or CUDA PyTorch tensors, all of one kind and on one device (N <= 64).
    device : int
        GPU used for numpy inputs (device arrays run where they live).

    Returns
    -------
    (q (B, N, n_actions) float32, hidden (B, N, H) float32): numpy for numpy inputs, else the inputs' framework.
    """
    core = require_core()
    arrays = (obs, adj, hidden, active)
    out = device_call(
        ("obs", "adj", "hidden", "active"), arrays, _bound(core, params, obs, core.qmix_forward_cuda_dlpack)
    )
    if out is None:
        weights = _qmix_weights(core, params, device)
        out = core.qmix_forward_cuda_host(weights, *(host(x) for x in arrays))
    return QMixStep._make(out)


def _bound(core: ModuleType, params: QMixParams, first: Any, entry: Callable[..., Any]) -> Callable[..., Any]:
    """``entry`` with the params' weights on the device of ``first`` bound as its first argument (numpy:
    unused, the host entry is called instead)."""

    def call(*args: Any) -> Any:
        return entry(_qmix_weights(core, params, _device_index(first)), *args)

    return call


def _device_index(x: Any) -> int:
    """CUDA device index of a CuPy array or a PyTorch tensor (0 for anything else: never used then)."""
    device = getattr(x, "device", None)
    index = getattr(device, "index", None)
    if index is not None:
        return int(index)
    return int(getattr(device, "id", 0) or 0)


def qmix_mix(params: QMixParams, q_taken: Any, state: Any, *, device: int = 0) -> Any:
    """The monotonic QMIX mixer on the GPU (semantics: :func:`toporoute.backends.reference.qmix_mix`):
    ``q_taken (B, n_agents)`` and ``state (B, S)`` float32 -> ``(B,)`` float32, numpy for numpy inputs, else
    the inputs' framework on their device."""
    core = require_core()
    out = device_call(
        ("q_taken", "state"), (q_taken, state), _bound(core, params, q_taken, core.qmix_mix_cuda_dlpack)
    )
    if out is None:
        return core.qmix_mix_cuda_host(_qmix_weights(core, params, device), host(q_taken), host(state))
    return out[0]


# the ops with a CUDA kernel; the others are not registered (toporoute.backends.kernel refuses them)
KERNELS: dict[str, Callable[..., Any]] = {
    "route": route,
    "toposort": toposort,
    "qmix_forward": qmix_forward,
    "qmix_mix": qmix_mix,
    **_POOL_KERNELS,
    **_STATS_KERNELS,
}
