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
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, InvalidArgumentError

NAMES = ("reference", "cpu", "cuda")
ENV = "TOPOROUTE_BACKEND"

__all__ = ["ENV", "NAMES", "available", "get", "is_device_array", "select", "select_op"]


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


def select_op(backend: str | None, first: Any, op: str) -> ModuleType:
    """:func:`select` for ``op``, where a compiled core built before the op existed counts as not having it:
    the default then falls back to the reference (same results, slower), an explicit ``backend="cpu"`` raises."""
    impl = select(backend, first)
    has = getattr(impl, "has_op", None)
    if has is None or has(op):
        return impl
    if backend is None:
        return get("reference")
    raise BackendUnavailableError(
        f"{op}: this build of toporoute._core has no {op} kernel; rebuild the core or use backend='reference'",
        arg="backend",
    )


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
