"""Exception hierarchy of toporoute.

Every bad-input error is a :class:`ValueError` subclass whose message names the argument, the expected value and
the actual one. Build or machine limitations and failures inside the compiled core are :class:`RuntimeError`
subclasses; running out of memory is a :class:`MemoryError`. Every exception the compiled core raises is one of
these classes (never a bare ``RuntimeError`` or ``MemoryError``), and a failed call leaves the process usable:

- :class:`OutOfMemoryError` (also a ``MemoryError``): host memory, or a GPU's memory, could not be allocated for a
  call (scratch, staging or output arrays); the message names the op and the bytes it asked for. Retry with a
  smaller batch. Out of *device* memory is this class too, not :class:`DeviceError`, so one ``except
  MemoryError`` covers both and the remedy (a smaller batch) is the same; the message says "device memory".
- :class:`DeviceError` (a ``RuntimeError``): the CUDA runtime failed (kernel launch, copy, driver error).
- :class:`CoreError` (a ``RuntimeError``): any other unexpected failure inside the compiled core.
- :class:`BackendUnavailableError` (a ``RuntimeError``): the backend, SIMD level or device is not available.
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailableError",
    "CoreError",
    "DTypeError",
    "DeviceError",
    "InvalidArgumentError",
    "NonFiniteError",
    "OutOfMemoryError",
    "OutOfRangeError",
    "ShapeError",
    "ToporouteError",
]


class ToporouteError(Exception):
    """Base class of all toporoute errors. ``arg`` names the argument or setting at fault, when there is one."""

    def __init__(self, message: str, arg: str | None = None) -> None:
        super().__init__(message)
        self.arg = arg


class InvalidArgumentError(ToporouteError, ValueError):
    """An argument is wrong. ``arg`` names it."""


class ShapeError(InvalidArgumentError):
    """An array has the wrong number of dimensions or the wrong shape."""


class DTypeError(InvalidArgumentError):
    """An array has the wrong dtype (or memory layout)."""


class NonFiniteError(InvalidArgumentError):
    """A float input holds NaN or infinity."""


class OutOfRangeError(InvalidArgumentError):
    """A scalar or array value lies outside its allowed range."""


class BackendUnavailableError(ToporouteError, RuntimeError):
    """The requested backend (or SIMD level, or CUDA device) is not available in this build or on this machine."""


class OutOfMemoryError(ToporouteError, MemoryError):
    """Host or device memory for a call could not be allocated; the message names the op and the bytes."""


class DeviceError(ToporouteError, RuntimeError):
    """The CUDA runtime failed (kernel launch, copy or driver error); out of device memory is OutOfMemoryError."""


class CoreError(ToporouteError, RuntimeError):
    """An unexpected failure inside the compiled core that is none of the other classes."""
