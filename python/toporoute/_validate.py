"""Argument checks shared by every backend: shapes, dtypes and scalar ranges.

Works on numpy arrays and on device arrays (CuPy, PyTorch) alike, reading only ``shape`` and ``dtype``; checks
that need a pass over the data (non-finite values) run inside each backend's fused pass.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .errors import DTypeError, InvalidArgumentError, OutOfRangeError, ShapeError


def dtype_name(x: Any) -> str:
    """'float32', 'bool', ... for numpy, CuPy and PyTorch arrays."""
    dt = getattr(x, "dtype", None)
    if dt is None:
        return type(x).__name__
    name = getattr(dt, "name", None)
    if isinstance(name, str):
        return name
    return str(dt).removeprefix("torch.")


def _shape(x: Any, name: str) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None or not hasattr(x, "dtype"):
        raise DTypeError(
            f"{name} must be an array (numpy, CuPy or PyTorch); got {type(x).__name__}", arg=name
        )
    return tuple(int(s) for s in shape)


def _fmt(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


_NP_DTYPES = {name: np.dtype(name) for name in ("float32", "bool")}


def array(x: Any, name: str, dtype: str, ndims: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Checks dtype and rank; returns the shape. ``layout`` describes the expected shape for messages."""
    if type(x) is np.ndarray:  # fast path: this runs on every call of a microsecond op
        if x.dtype == _NP_DTYPES[dtype] and x.ndim in ndims:
            return x.shape
        shape = x.shape
    else:
        shape = _shape(x, name)
    if dtype_name(x) != dtype:
        raise DTypeError(f"{name} must have dtype {dtype}; got {dtype_name(x)}", arg=name)
    if len(shape) not in ndims:
        raise ShapeError(f"{name} must have shape {layout}; got {_fmt(shape)}", arg=name)
    return shape


def route_args(
    q: Any, k: Any, active: Any, tau_value: Any, k_in_value: Any
) -> tuple[tuple[int, ...], float, int]:
    """All checks of ``ops.route``; returns (shape of q, tau, k_in). The common case (numpy float32 arrays, no
    mask, a float and an int) is decided with a handful of comparisons: route itself takes microseconds."""
    if (
        type(q) is np.ndarray
        and type(k) is np.ndarray
        and active is None
        and type(tau_value) is float
        and type(k_in_value) is int
        and q.dtype == _NP_DTYPES["float32"]
        and k.dtype == _NP_DTYPES["float32"]
        and q.shape == k.shape
        and 2 <= q.ndim <= 3
        and -1.0 <= tau_value <= 1.0
        and k_in_value >= 0
    ):
        return q.shape, tau_value, k_in_value
    qs = array(q, "q", "float32", (2, 3), "(B, N, D) or (N, D)")
    ks = array(k, "k", "float32", (2, 3), "(B, N, D) or (N, D)")
    same_shape(ks, "k", qs, "the shape of q")
    active_mask(active, qs[:-1])
    return qs, tau(tau_value), k_in(k_in_value)


def same_shape(x_shape: tuple[int, ...], name: str, expected: tuple[int, ...], layout: str) -> None:
    if x_shape != expected:
        raise ShapeError(f"{name} must have shape {layout} = {_fmt(expected)}; got {_fmt(x_shape)}", arg=name)


def active_mask(active: Any, batch_shape: tuple[int, ...]) -> None:
    """``active`` must be a bool array of shape ``batch_shape`` (``(B, N)`` or ``(N,)``)."""
    if active is None:
        return
    shape = array(active, "active", "bool", (len(batch_shape),), "(B, N) or (N,) matching the graph")
    same_shape(shape, "active", batch_shape, "(B, N)" if len(batch_shape) == 2 else "(N,)")


def tau(value: Any) -> float:
    if type(value) is float and -1.0 <= value <= 1.0:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"tau must be a real number in [-1, 1]; got {value!r}", arg="tau")
    v = float(value)
    if not math.isfinite(v) or not -1.0 <= v <= 1.0:
        raise OutOfRangeError(f"tau must be in [-1, 1]; got {value!r}", arg="tau")
    return v


def k_in(value: Any) -> int:
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"k_in must be an integer >= 0 (0: no cap); got {value!r}", arg="k_in")
    v = int(value)
    if v < 0:
        raise OutOfRangeError(f"k_in must be >= 0 (0: no cap); got {v}", arg="k_in")
    return v


def int_array(x: Any, name: str, minimum: int) -> np.ndarray:
    """An integer array (or Python int) with every value >= minimum, as int64."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise DTypeError(f"{name} must be an integer or integer array; got dtype {arr.dtype}", arg=name)
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < minimum:
        raise OutOfRangeError(f"{name} must be >= {minimum}; got {arr.min()}", arg=name)
    return arr
