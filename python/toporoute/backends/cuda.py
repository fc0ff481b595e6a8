"""CUDA backend: the kernels of :mod:`toporoute._core` on an NVIDIA GPU.

Arrays are batched and validated by :mod:`toporoute.ops` (shapes, dtypes, scalar ranges); this module checks
what needs a pass over the data (non-finite values, negative weights) and where the arrays live.

- numpy inputs are copied to the GPU (``device``, default 0), and the results come back as numpy arrays.
- CuPy arrays and PyTorch CUDA tensors are handed to the kernels without a copy through DLPack. Outputs are
  allocated with the same framework on the same device and stay there; the kernels run on the framework's
  current stream. ``route`` and the Q-Mix ops read one error word back afterwards (a synchronisation) to
  report NaN or infinity in their inputs; ``toposort`` on device arrays validates ``weights`` with the
  framework first.
- Q-Mix weights are copied to each device once and cached on the :class:`~toporoute.types.qmix_params.QMixParams`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import errors
from ..types.results import Order, QMixStep, Routes
from .reference import inbox_width

if TYPE_CHECKING:
    from ..types.qmix_params import QMixParams

__all__ = ["KERNELS", "available", "qmix_forward", "qmix_mix", "route", "toposort"]

_NO_ERROR = 2**64 - 1  # the err word's initial value: no non-finite row seen
_LEGACY_STREAM = 1  # DLPack's name for CUDA's legacy default stream (0 is reserved there)


def _load_core() -> tuple[ModuleType | None, str]:
    """The compiled core, or None and why not (it is optional: a build without a compiler has none)."""
    try:
        from .. import _core as core
    except ImportError as exc:
        return None, f"toporoute._core is not built ({exc}); reinstall with a C++ compiler and nvcc"
    return core, ""


def available() -> tuple[bool, str]:
    """``(True, "")`` when the core was built with CUDA and a device is visible, else ``(False, reason)``."""
    core, why = _load_core()
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


def _require_core() -> ModuleType:
    core, why = _load_core()
    if core is None:
        raise errors.BackendUnavailableError(f"backend 'cuda' is not available: {why}")
    return core


# ------------------------------------------------------------------------------------------------ frameworks


class _Framework(ABC):
    """What the DLPack path needs from CuPy or PyTorch: allocation, the current stream, a few reductions."""

    name = ""

    def __init__(self, device: int) -> None:
        self.device = device

    @abstractmethod
    def context(self) -> Any: ...

    @abstractmethod
    def stream(self) -> int: ...

    def borrow(self, x: Any | None) -> Any | None:
        """``x`` as something DLPack can export (no autograd history)."""
        return x

    def prepare(self, x: Any, name: str) -> Any:
        """``x`` as a kernel input; rows of q/k are read as vectors, so the last axis must have unit stride
        (like the CPU backend, a strided last axis is an error rather than a silent copy)."""
        x = self.borrow(x)
        if len(x.shape) and x.shape[-1] > 1 and self.last_stride(x) != 1:
            raise errors.DTypeError(
                f"{name} must be contiguous along its last axis (stride 1); got stride {self.last_stride(x)} "
                f"elements: pass a contiguous copy of {name}",
                arg=name,
            )
        return x

    @abstractmethod
    def last_stride(self, x: Any) -> int:
        """Stride of the last axis in elements."""

    @abstractmethod
    def empty(self, shape: tuple[int, ...], dtype: str) -> Any: ...

    @abstractmethod
    def err_word(self) -> Any: ...

    @abstractmethod
    def read_err(self, err: Any) -> int: ...

    @abstractmethod
    def first_true(self, mask: Any) -> tuple[int, ...] | None:
        """Index of the first True in C order, or None."""
        ...

    @abstractmethod
    def isfinite(self, x: Any) -> Any: ...

    def capsule(self, x: Any | None, stream: int) -> Any:
        if x is None:
            return None
        return x.__dlpack__(stream=stream if stream != 0 else _LEGACY_STREAM)


class _Cupy(_Framework):
    name = "cupy"

    def __init__(self, device: int) -> None:
        import cupy

        super().__init__(device)
        self.xp = cupy

    def context(self) -> Any:
        return self.xp.cuda.Device(self.device)

    def stream(self) -> int:
        return int(self.xp.cuda.get_current_stream().ptr)

    def last_stride(self, x: Any) -> int:
        return int(x.strides[-1]) // int(x.itemsize)

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.xp.empty(shape, dtype=dtype)

    def err_word(self) -> Any:
        return self.xp.full((1,), _NO_ERROR, dtype=self.xp.uint64)

    def read_err(self, err: Any) -> int:
        return int(err.get()[0])

    def first_true(self, mask: Any) -> tuple[int, ...] | None:
        idx = self.xp.argwhere(mask)
        return None if idx.shape[0] == 0 else tuple(int(v) for v in idx[0].get())

    def isfinite(self, x: Any) -> Any:
        return self.xp.isfinite(x)


class _Torch(_Framework):
    name = "torch"

    def __init__(self, device: int) -> None:
        import torch

        super().__init__(device)
        self.torch = torch
        self.dev = torch.device("cuda", device)

    def context(self) -> Any:
        return self.torch.cuda.device(self.dev)

    def stream(self) -> int:
        return int(self.torch.cuda.current_stream(self.dev).cuda_stream)

    def borrow(self, x: Any | None) -> Any | None:
        # DLPack refuses tensors that require grad; the kernels never need the graph
        return None if x is None else x.detach()

    def last_stride(self, x: Any) -> int:
        return int(x.stride(-1))

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.empty(shape, dtype=getattr(self.torch, dtype), device=self.dev)

    def err_word(self) -> Any:
        # int64 -1 has the bits of 2**64 - 1; torch has few uint64 kernels, the core accepts both
        return self.torch.full((1,), -1, dtype=self.torch.int64, device=self.dev)

    def read_err(self, err: Any) -> int:
        return int(err.item()) & _NO_ERROR

    def first_true(self, mask: Any) -> tuple[int, ...] | None:
        idx = self.torch.nonzero(mask)
        return None if idx.shape[0] == 0 else tuple(int(v) for v in idx[0].tolist())

    def isfinite(self, x: Any) -> Any:
        return self.torch.isfinite(x)


def _where(x: Any, name: str) -> tuple[str, int]:
    """(framework, device index) of an input array."""
    if isinstance(x, np.ndarray):
        return "numpy", -1
    module = type(x).__module__.partition(".")[0]
    if module == "cupy":
        return "cupy", int(x.device.id)
    if module == "torch" and getattr(x, "is_cuda", False):
        return "torch", int(x.device.index)
    raise errors.InvalidArgumentError(
        f"{name} must be a numpy array, a CuPy array or a CUDA PyTorch tensor for backend 'cuda'; "
        f"got {type(x).__module__}.{type(x).__name__}" + (" on the CPU" if module == "torch" else ""),
        arg=name,
    )


def _placement(arrays: dict[str, Any]) -> tuple[str, int]:
    """The common (framework, device) of the given arrays (None entries skipped); mixing is an error."""
    first: tuple[str, tuple[str, int]] | None = None
    for name, x in arrays.items():
        if x is None:
            continue
        here = _where(x, name)
        if first is None:
            first = (name, here)
        elif here != first[1]:
            raise errors.InvalidArgumentError(
                f"{name} must live where {first[0]} does ({_describe(first[1])}); got {_describe(here)}",
                arg=name,
            )
    if first is None:
        raise errors.InvalidArgumentError("no array argument given")
    return first[1]


def _describe(where: tuple[str, int]) -> str:
    framework, device = where
    return "numpy (host)" if framework == "numpy" else f"{framework} on cuda:{device}"


def _framework(where: tuple[str, int]) -> _Framework:
    framework, device = where
    return _Cupy(device) if framework == "cupy" else _Torch(device)


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
    core = _require_core()
    where = _placement({"q": q, "k": k, "active": active})
    if where[0] == "numpy":
        act = None if active is None else np.ascontiguousarray(active)
        out = core.route_cuda_host(
            np.ascontiguousarray(q), np.ascontiguousarray(k), act, float(tau), int(k_in), device
        )
        return Routes(*out)

    fw = _framework(where)
    with fw.context():
        q, k, active = fw.prepare(q, "q"), fw.prepare(k, "k"), fw.borrow(active)
        B, N, _ = q.shape
        K = inbox_width(N, k_in)
        scores = fw.empty((B, N, N), "float32")
        adjacency = fw.empty((B, N, N), "bool")
        inbox = fw.empty((B, N, K), "int32")
        in_degree = fw.empty((B, N), "int32")
        err = fw.err_word()
        stream = fw.stream()
        core.route_cuda_dlpack(
            *(fw.capsule(x, stream) for x in (q, k, active, scores, adjacency, inbox, in_degree, err)),
            float(tau),
            int(k_in),
            stream,
        )
        code = fw.read_err(err)
        if code != _NO_ERROR:
            raise _non_finite(code, N)
    return Routes(scores, adjacency, inbox, in_degree)


def _non_finite(code: int, n_agents: int) -> errors.NonFiniteError:
    """The reference's error for the kernel's code ``(b * 2 + which) * N + n`` (the smallest one: the first
    episode with a non-finite row, q before k, then the agent; the row the reference reports)."""
    b, rest = divmod(code, 2 * n_agents)
    which, n = divmod(rest, n_agents)
    name = "k" if which else "q"
    return errors.NonFiniteError(
        f"{name} must be finite; got NaN or infinity at episode {b}, agent {n}", arg=name
    )


def toposort(adj: Any, weights: Any | None, active: Any | None, device: int = 0) -> Order:
    """Greedy topological order with cycle breaking on the GPU (semantics:
    :func:`toporoute.backends.reference.toposort`).

    Parameters
    ----------
    adj : (B, N, N) bool
        ``adj[b, src, dst]``; numpy, CuPy or CUDA PyTorch, like the other arguments.
    weights : (B, N, N) float32, optional
        Finite and >= 0 (checked here).
    active : (B, N) bool, optional
    device : int
        GPU used for numpy inputs.

    Returns
    -------
    Order
        ``order (B, N) int32``, ``level (B, N) int32``, ``removed (B, N, N) bool``, ``is_dag (B,) bool``:
        numpy for numpy inputs, else the inputs' framework on their device.
    """
    core = _require_core()
    where = _placement({"adj": adj, "weights": weights, "active": active})
    if where[0] == "numpy":
        w = None if weights is None else np.ascontiguousarray(weights)
        act = None if active is None else np.ascontiguousarray(active)
        return Order(*core.toposort_cuda_host(np.ascontiguousarray(adj), w, act, device))

    fw = _framework(where)
    with fw.context():
        adj, weights, active = fw.borrow(adj), fw.borrow(weights), fw.borrow(active)
        if weights is not None:
            _check_weights(fw, weights)
        B, N = adj.shape[0], adj.shape[1]
        order = fw.empty((B, N), "int32")
        level = fw.empty((B, N), "int32")
        removed = fw.empty((B, N, N), "bool")
        is_dag = fw.empty((B,), "bool")
        stream = fw.stream()
        core.toposort_cuda_dlpack(
            *(fw.capsule(x, stream) for x in (adj, weights, active, order, level, removed, is_dag)), stream
        )
    return Order(order, level, removed, is_dag)


def _check_weights(fw: _Framework, weights: Any) -> None:
    """The reference's weight checks and messages, run with the framework: one fused pass and one
    synchronisation when the weights are fine."""
    if not bool((~(fw.isfinite(weights) & (weights >= 0))).any()):
        return
    at = fw.first_true(~fw.isfinite(weights))
    if at is not None:
        raise errors.NonFiniteError(
            f"weights must be finite; got {np.float32(float(weights[at]))} at [{at[0]}, {at[1]}, {at[2]}]",
            arg="weights",
        )
    at = fw.first_true(weights < 0)
    if at is not None:
        raise errors.OutOfRangeError(
            f"weights must be >= 0; got {np.float32(float(weights[at]))} at [{at[0]}, {at[1]}, {at[2]}]",
            arg="weights",
        )


# ---------------------------------------------------------------------------------------------------- Q-Mix


def _qmix_weights(core: ModuleType, params: QMixParams, device: int) -> Any:
    """The params' weights on ``device`` (``_core.QMixWeightsCuda``), copied once and cached on the params."""
    return params.packed(
        f"cuda:{device}", lambda config, agent, mixer: core.QMixWeightsCuda(config, agent, mixer, device)
    )


def _host(x: Any | None) -> np.ndarray | None:
    return None if x is None else np.ascontiguousarray(x)


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
    core = _require_core()
    where = _placement({"obs": obs, "adj": adj, "hidden": hidden, "active": active})
    if where[0] == "numpy":
        weights = _qmix_weights(core, params, device)
        return QMixStep._make(
            core.qmix_forward_cuda_host(weights, *(_host(x) for x in (obs, adj, hidden, active)))
        )

    fw = _framework(where)
    c = params.config
    with fw.context():
        weights = _qmix_weights(core, params, fw.device)
        obs, adj, hidden, active = (fw.borrow(x) for x in (obs, adj, hidden, active))
        B, N = int(obs.shape[0]), int(obs.shape[1])
        q = fw.empty((B, N, c.n_actions), "float32")
        h = fw.empty((B, N, c.hidden), "float32")
        err = fw.err_word()
        stream = fw.stream()
        core.qmix_forward_cuda_dlpack(
            weights, *(fw.capsule(x, stream) for x in (obs, adj, hidden, active, q, h, err)), stream
        )
        code = fw.read_err(err)
        if code != _NO_ERROR:
            which, rest = divmod(code, B * N)
            b, n = divmod(rest, N)
            name = "hidden" if which else "obs"
            raise errors.NonFiniteError(
                f"{name} must be finite; got NaN or infinity at episode {b}, agent {n}", arg=name
            )
    return QMixStep(q, h)


def qmix_mix(params: QMixParams, q_taken: Any, state: Any, *, device: int = 0) -> Any:
    """The monotonic QMIX mixer on the GPU (semantics: :func:`toporoute.backends.reference.qmix_mix`):
    ``q_taken (B, n_agents)`` and ``state (B, S)`` float32 -> ``(B,)`` float32, numpy for numpy inputs, else
    the inputs' framework on their device."""
    core = _require_core()
    where = _placement({"q_taken": q_taken, "state": state})
    if where[0] == "numpy":
        return core.qmix_mix_cuda_host(_qmix_weights(core, params, device), _host(q_taken), _host(state))

    fw = _framework(where)
    with fw.context():
        weights = _qmix_weights(core, params, fw.device)
        q_taken, state = fw.borrow(q_taken), fw.borrow(state)
        B = int(q_taken.shape[0])
        out = fw.empty((B,), "float32")
        err = fw.err_word()
        stream = fw.stream()
        core.qmix_mix_cuda_dlpack(
            weights, *(fw.capsule(x, stream) for x in (q_taken, state, out, err)), stream
        )
        code = fw.read_err(err)
        if code != _NO_ERROR:
            which, b = divmod(code, B)
            name = "state" if which else "q_taken"
            raise errors.NonFiniteError(
                f"{name} must be finite; got NaN or infinity at episode {b}", arg=name
            )
    return out


# the ops with a CUDA kernel; the others are not registered (toporoute.backends.kernel refuses them)
KERNELS: dict[str, Callable[..., Any]] = {
    "route": route,
    "toposort": toposort,
    "qmix_forward": qmix_forward,
    "qmix_mix": qmix_mix,
}
