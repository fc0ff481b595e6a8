"""Exception hierarchy of toporoute.

Every bad-input error is a :class:`ValueError` subclass whose message names the argument, the expected value and
the actual one. Build or machine limitations are :class:`RuntimeError` subclasses.
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailableError",
    "DTypeError",
    "InvalidArgumentError",
    "NonFiniteError",
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
