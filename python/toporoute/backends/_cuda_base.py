"""What every CUDA kernel wrapper shares: the compiled core, where the arguments live, and the device-array call.

A device-array call hands each input to the core as one DLPack capsule (PyTorch's and CuPy's own exports, no
copy), takes the framework's current stream once, and gets its outputs back as capsules of one stream-ordered
device allocation, wrapped as the inputs' framework's arrays. It never synchronises: bad input the kernels find
(a NaN row, a negative weight) is reported by the next toporoute call on that device, or by
:func:`synchronize`, which waits for the device first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from .. import errors

__all__ = [
    "Framework",
    "device_call",
    "framework_of",
    "host",
    "load_core",
    "placement",
    "require_core",
    "synchronize",
]

_LEGACY_STREAM = 1  # DLPack's name for CUDA's legacy default stream (0 is reserved there)
_DLPACK_CUDA = 2


@functools.cache
def load_core() -> tuple[ModuleType | None, str]:
    """The compiled core, or None and why not (it is optional: a build without a compiler has none); imported
    once per process (every call looks it up)."""
    try:
        from .. import _core as core
    except ImportError as exc:
        return None, f"toporoute._core is not built ({exc}); reinstall with a C++ compiler and nvcc"
    return core, ""


def require_core() -> ModuleType:
    core, why = load_core()
    if core is None:
        raise errors.BackendUnavailableError(f"backend 'cuda' is not available: {why}")
    return core


class _Capsule:
    """A DLPack producer around a capsule made by the core, for ``from_dlpack`` functions that want one."""

    __slots__ = ("capsule", "device")

    def __init__(self, capsule: Any, device: int) -> None:
        self.capsule, self.device = capsule, device

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return _DLPACK_CUDA, self.device


class Framework:
    """Device arrays of one framework on one device: export to the core, the current stream, wrap results (the core
    allocates the outputs)."""

    name = ""

    def __init__(self, device: int) -> None:
        self.device = device

    def export(self, x: Any, stream: int) -> Any:
        """``x`` as a DLPack capsule the core reads on ``stream`` (no copy)."""
        return x.__dlpack__(stream=stream if stream != 0 else _LEGACY_STREAM)

    def stream(self) -> int:
        raise NotImplementedError

    def wrap(self, capsule: Any) -> Any:
        raise NotImplementedError


class _Torch(Framework):
    name = "torch"

    def __init__(self, device: int) -> None:
        import torch

        super().__init__(device)
        self.torch = torch
        self.dev = torch.device("cuda", device)
        c = torch._C
        # the raw cudaStream_t of the current stream, and the legacy-capsule converters: one C call each
        raw = getattr(c, "_cuda_getCurrentRawStream", None)
        self._raw_stream = raw
        self._to = getattr(c, "_to_dlpack", None)
        self._from = getattr(c, "_from_dlpack", None)

    def export(self, x: Any, stream: int) -> Any:
        if x.requires_grad:  # the kernels never need the autograd graph
            x = x.detach()
        if self._to is not None:
            return self._to(x)  # on the tensor's current stream: the stream the call runs on
        return x.__dlpack__(stream=stream if stream != 0 else _LEGACY_STREAM)

    def stream(self) -> int:
        if self._raw_stream is not None:
            return int(self._raw_stream(self.device))
        return int(self.torch.cuda.current_stream(self.dev).cuda_stream)

    def wrap(self, capsule: Any) -> Any:
        if self._from is not None:
            return self._from(capsule)
        return self.torch.from_dlpack(_Capsule(capsule, self.device))


class _Cupy(Framework):
    name = "cupy"

    def __init__(self, device: int) -> None:
        import cupy

        super().__init__(device)
        self.xp = cupy

    def stream(self) -> int:
        with self.xp.cuda.Device(self.device):
            return int(self.xp.cuda.get_current_stream().ptr)

    def wrap(self, capsule: Any) -> Any:
        return self.xp.from_dlpack(_Capsule(capsule, self.device))


# One adapter per (framework, device), made on first use; adapters hold no state that changes.
_FRAMEWORKS: dict[tuple[str, int], Framework] = {}


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


def _describe(where: tuple[str, int]) -> str:
    framework, device = where
    return "numpy (host)" if framework == "numpy" else f"{framework} on cuda:{device}"


def placement(arrays: dict[str, Any]) -> tuple[str, int]:
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


def framework_of(where: tuple[str, int]) -> Framework:
    """The adapter of a device placement from :func:`placement`."""
    fw = _FRAMEWORKS.get(where)
    if fw is None:
        framework, device = where
        fw = _FRAMEWORKS[where] = _Cupy(device) if framework == "cupy" else _Torch(device)
    return fw


def _fast_framework(arrays: Sequence[Any]) -> Framework | None:
    """The adapter when every given array is a CUDA PyTorch tensor on one device (the common device case,
    decided with attribute reads); None otherwise (numpy, CuPy, a mix: :func:`placement` decides)."""
    first = arrays[0]
    if type(first).__module__ != "torch" or not first.is_cuda:
        return None
    device = first.get_device()
    for x in arrays[1:]:
        if x is not None and (type(x) is not type(first) or not x.is_cuda or x.get_device() != device):
            return None
    return framework_of(("torch", device))


def device_call(
    names: Sequence[str], arrays: Sequence[Any], entry: Callable[..., Any], *scalars: Any
) -> tuple[Any, ...] | None:
    """Runs a DLPack entry of the core on device arrays: ``entry(*capsules, None, *scalars, stream)``, its
    outputs allocated by the core and returned as the inputs' framework's arrays. None when the arrays are
    numpy (the caller runs the host entry instead); mixed or foreign arrays raise naming the argument."""
    fw = _fast_framework(arrays)
    if fw is None:
        where = placement(dict(zip(names, arrays)))
        if where[0] == "numpy":
            return None
        fw = framework_of(where)
    stream = fw.stream()
    capsules = [None if x is None else fw.export(x, stream) for x in arrays]
    wrap = fw.wrap
    return tuple(wrap(c) for c in entry(*capsules, None, *scalars, stream))


def host(x: Any | None) -> np.ndarray | None:
    """A C-contiguous numpy array (or None) for the core's host entries."""
    return None if x is None else np.ascontiguousarray(x)


def synchronize(device: int | None = None) -> None:
    """Waits for the GPU work of toporoute's device-array calls and raises the first bad input their kernels
    found (e.g. :class:`~toporoute.errors.NonFiniteError` naming the row), as the numpy path would have.

    Device-array calls return before their kernels run; their errors are otherwise reported by the next
    toporoute call on the same device. ``device``: one CUDA device index, or None for every device used.
    """
    require_core().cuda_synchronize(-1 if device is None else int(device))
