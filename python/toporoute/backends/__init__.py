"""Backends of the core ops.

- ``reference``: numpy; defines the semantics; always available.
- ``cpu``: the compiled core (``toporoute._core``): fused SIMD kernels, OpenMP across the batch.
- ``cuda``: CUDA kernels on device arrays (CuPy/PyTorch via DLPack) or host arrays (copied to the GPU).

Choice: the ``backend=`` argument; else the ``TOPOROUTE_BACKEND`` environment variable; else ``cuda`` for
device-array inputs, ``cpu`` when the core is built, ``reference`` otherwise. Like ``TOPOROUTE_SIMD``, the
environment is read once, at the first op call of the process (reading it costs more than a small route).
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, InvalidArgumentError

NAMES = ("reference", "cpu", "cuda")
ENV = "TOPOROUTE_BACKEND"

__all__ = ["ENV", "NAMES", "available", "get", "is_device_array", "kernel", "kernels", "select"]

_LABELS = {"reference": "reference", "cpu": "CPU", "cuda": "CUDA"}


def is_device_array(x: Any) -> bool:
    """True for arrays that live on a CUDA device (DLPack device type 2)."""
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None or type(x).__module__.startswith("numpy"):
        return False
    try:
        return int(dev()[0]) == 2
    except Exception:  # noqa: BLE001 - foreign objects: treat as host
        return False


def get(name: str) -> ModuleType:
    """The backend module ``name``, or BackendUnavailableError saying why it cannot run here."""
    if name not in NAMES:
        raise InvalidArgumentError(f"backend must be one of {', '.join(NAMES)}; got {name!r}", arg="backend")
    module, why = _load(name)
    if module is None:
        raise BackendUnavailableError(f"backend {name!r} is not available: {why}")
    return module


@functools.cache
def _load(name: str) -> tuple[ModuleType | None, str]:
    """Imports a backend once; availability is fixed for the life of the process."""
    module = importlib.import_module(f"{__name__}.{name}")
    ok, why = module.available()
    return (module if ok else None), why


@functools.cache
def _defaults() -> tuple[str | None, str]:
    """(the TOPOROUTE_BACKEND value or None, the default host backend), read once per process."""
    return os.environ.get(ENV) or None, "cpu" if _load("cpu")[0] is not None else "reference"


def available() -> dict[str, tuple[bool, str]]:
    """``{name: (available, reason)}`` for every backend."""
    return {n: importlib.import_module(f"{__name__}.{n}").available() for n in NAMES}


# The backend chosen for numpy inputs, by ``backend=`` value (None: the default), filled by the first call that
# resolves each value: availability and the environment are fixed for the life of the process, so this memo never
# changes an answer; it spares every microsecond op the environment and registry look-ups.
_HOST_CHOICE: dict[str | None, ModuleType] = {}


def select(backend: str | None, first: Any) -> ModuleType:
    """Resolves the backend for a call whose first array argument is ``first``."""
    if type(first) is np.ndarray and (backend is None or type(backend) is str):
        module = _HOST_CHOICE.get(backend)
        if module is not None:
            return module
    return _select(backend, first)


def kernel(op: str, backend: str | None, first: Any) -> Callable[..., Any]:
    """The kernel of ``op`` (a name of :data:`toporoute.types.op_table.OPS`) on the backend chosen for a call
    whose first array argument is ``first``.

    A backend that registers no kernel for ``op`` (its ``KERNELS``) refuses a call that names it, before
    anything else is checked, with :class:`~toporoute.errors.BackendUnavailableError` naming the op and the
    backend. A compiled core built before the op existed counts as not having it: the default backend then
    falls back to the reference (same results, slower), an explicit ``backend="cpu"`` raises.
    """
    if type(first) is np.ndarray:
        if backend is None:  # the common case: one look-up by the op's (interned) name
            fn = _DEFAULT_KERNEL.get(op)
        else:
            fn = _HOST_KERNEL.get((backend, op)) if type(backend) is str else None
        if fn is not None:
            return fn
    else:  # a device array: one look-up by (backend= value, op, array type) once its kind has been resolved
        fn = _DEVICE_KERNEL.get((backend, op, type(first)))
        if fn is not None and getattr(first, "is_cuda", True):
            return fn
    return _kernel(op, backend, first)


# The kernel chosen for numpy inputs, by op for the default backend and by (backend= value, op) for a named one,
# filled by the first call that resolves each; like _HOST_CHOICE, they never change an answer (the core's ops and
# the environment are fixed for the life of the process).
_DEFAULT_KERNEL: dict[str, Callable[..., Any]] = {}
_HOST_KERNEL: dict[tuple[str, str], Callable[..., Any]] = {}
# The CUDA kernel chosen for a CuPy array or a CUDA PyTorch tensor, by (backend= value, op, array type); a
# PyTorch tensor also needs is_cuda (a CPU tensor of the same type takes the full path and its error).
_DEVICE_KERNEL: dict[tuple[str | None, str, type], Callable[..., Any]] = {}
_DEVICE_MODULES = ("torch", "cupy")


def _kernel(op: str, backend: str | None, first: Any) -> Callable[..., Any]:
    """:func:`kernel` in full; remembers its answer for numpy inputs."""
    if type(backend) is str and backend in NAMES and op not in kernels(backend):
        other = "cpu" if op in kernels("cpu") else "reference"
        raise BackendUnavailableError(
            f"{op} has no {_LABELS[backend]} kernel; use backend={other!r}", arg="backend"
        )
    impl = select(backend, first)
    has = getattr(impl, "has_op", None)
    if has is not None and not has(op):
        if backend is not None:
            raise BackendUnavailableError(
                f"{op}: this build of toporoute._core has no {op} kernel; rebuild the core or use "
                "backend='reference'",
                arg="backend",
            )
        impl = get("reference")
    fn: Callable[..., Any] | None = impl.KERNELS.get(op)
    if fn is None:  # the default chose CUDA for a device array, and CUDA has no kernel for op
        raise BackendUnavailableError(
            f"{op} has no {_LABELS[impl.__name__.rsplit('.', 1)[-1]]} kernel; pass host (numpy) arrays",
            arg="backend",
        )
    if type(first) is np.ndarray:
        if backend is None:
            _DEFAULT_KERNEL[op] = fn
        elif type(backend) is str:
            _HOST_KERNEL[(backend, op)] = fn
    elif (
        (backend is None or type(backend) is str)
        and type(first).__module__.partition(".")[0] in _DEVICE_MODULES
        and impl.__name__.endswith(".cuda")
        and is_device_array(first)
    ):
        _DEVICE_KERNEL[(backend, op, type(first))] = fn
    return fn


@functools.cache
def kernels(name: str) -> frozenset[str]:
    """The ops backend ``name`` registers a kernel for (whether or not it can run here)."""
    return frozenset(importlib.import_module(f"{__name__}.{name}").KERNELS)


def _select(backend: str | None, first: Any) -> ModuleType:
    """:func:`select` in full; remembers its answer for numpy inputs."""
    requested = backend
    host = type(first) is np.ndarray
    if backend is None:
        env, default_host = _defaults()
        if env is not None:
            if env not in NAMES:
                raise InvalidArgumentError(
                    f"environment variable {ENV} must be one of {', '.join(NAMES)}; got {env!r}", arg=ENV
                )
            backend = env
        elif not host and is_device_array(first):
            backend = "cuda"
        else:
            backend = default_host
    module = get(backend)
    if backend != "cuda" and not host and is_device_array(first):
        raise InvalidArgumentError(
            f"backend {backend!r} needs host (numpy) arrays; got a device array "
            f"({type(first).__module__}.{type(first).__name__}): use backend='cuda' or copy it to the host",
            arg="backend",
        )
    if host:
        _HOST_CHOICE[requested] = module
    return module
