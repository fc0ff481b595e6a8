"""JSON <-> numpy for the HTTP API: float arrays in either form (nested lists or base64 float32), with the
shape and limit checks that name the request field, and the per-episode response of a routing result."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sized
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, NonFiniteError, OutOfRangeError, ShapeError
from .schemas import B64Array

__all__ = ["FLOAT32_MAX", "array_in", "array_out", "bool_array", "check_count", "edge_list", "routed_episode"]

# The largest float32: a JSON number beyond it is refused (as float32 it would round to this or to infinity).
FLOAT32_MAX = float(np.finfo(np.float32).max)


def bool_array(value: Any, field: str) -> np.ndarray:
    """A boolean array from nested JSON lists (ragged lists raise :class:`ShapeError` naming ``field``)."""
    try:
        arr = np.asarray(value, dtype=bool)
    except ValueError:
        raise ShapeError(f"{field} must be a rectangular array; its rows differ in length", field) from None
    return arr


def array_in(value: Any, field: str, ndim: int | None) -> np.ndarray:
    """A float32 array of ``ndim`` dimensions (None: any) from a request field (nested lists or
    :class:`B64Array`).

    Raises
    ------
    ShapeError
        Ragged lists, the wrong number of dimensions, or base64 bytes that do not match ``shape``.
    NonFiniteError
        NaN or infinity (from base64; JSON numbers are checked by the request model).
    OutOfRangeError
        A JSON number beyond float32's range.
    """
    if isinstance(value, B64Array):
        try:
            raw = base64.b64decode(value.b64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgumentError(
                f"{field}.b64 must be valid base64; it is not", f"{field}.b64"
            ) from None
        shape = tuple(value.shape)
        if ndim is not None and len(shape) != ndim:
            raise ShapeError(
                f"{field}.shape must have {ndim} dimensions; got {list(shape)}", f"{field}.shape"
            )
        expected = 4
        for n in shape:  # Python ints: no overflow
            expected *= int(n)
        if len(raw) != expected:
            raise ShapeError(
                f"{field}.b64 must hold {expected} bytes (float32 of shape {list(shape)}); got {len(raw)}",
                f"{field}.b64",
            )
        try:
            arr = np.frombuffer(raw, dtype="<f4").reshape(shape)
        except ValueError:  # an empty array whose other dimensions overflow numpy's index type
            raise ShapeError(
                f"{field}.shape must describe an array numpy can hold; got {list(shape)}", f"{field}.shape"
            ) from None
    else:
        try:
            wide = np.asarray(value, dtype=np.float64)
        except ValueError:
            raise ShapeError(
                f"{field} must be a rectangular {ndim}-d array; its rows differ in length", field
            ) from None
        if ndim is not None and wide.ndim != ndim:
            raise ShapeError(f"{field} must be a {ndim}-d array; got {wide.ndim} dimension(s)", field)
        # the schema's bound: anything larger rounds to float32's largest value or to infinity
        outside = np.abs(wide) > FLOAT32_MAX
        if outside.any():
            bad = np.argwhere(outside)[0].tolist()
            raise OutOfRangeError(
                f"{field} must hold float32 values (|x| <= {FLOAT32_MAX:.9g}); got {wide[tuple(bad)]} at "
                f"index {bad}",
                field,
            )
        arr = wide.astype(np.float32)
    if not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0].tolist()
        raise NonFiniteError(f"{field} must be finite; got {arr[tuple(bad)]} at index {bad}", field)
    return arr


def array_out(arr: np.ndarray, binary: bool) -> Any:
    """A float array for a response: nested lists, or ``{"b64", "shape"}`` (little-endian float32)."""
    arr = np.ascontiguousarray(arr, dtype="<f4")
    if binary:
        return {"b64": base64.b64encode(arr.tobytes()).decode("ascii"), "shape": list(arr.shape)}
    return arr.tolist()


def edge_list(adj: np.ndarray) -> list[list[int]]:
    """``[[src, dst], ...]`` of a boolean ``(N, N)`` adjacency, in row-major order."""
    return np.argwhere(adj).tolist()


def routed_episode(
    adjacency: np.ndarray,
    inbox: np.ndarray,
    in_degree: np.ndarray,
    order: np.ndarray,
    level: np.ndarray,
    removed: np.ndarray,
    scores: np.ndarray | None,
    binary: bool,
) -> dict[str, Any]:
    """One episode of a ``/v1/route`` response from the arrays of ``n`` agents (already trimmed)."""
    out: dict[str, Any] = {
        "edges": edge_list(adjacency),
        "inbox": [[int(j) for j in row if j >= 0] for row in inbox.tolist()],
        "in_degree": in_degree.tolist(),
        "order": order.tolist(),
        "level": level.tolist(),
        "removed": edge_list(removed),
    }
    if scores is not None:
        out["scores"] = array_out(scores, binary)
    return out


def check_count(items: Sized, limit: int, field: str, what: str) -> None:
    """422 ``out_of_range`` naming ``field`` when ``items`` has more than ``limit`` entries."""
    if len(items) > limit:
        raise OutOfRangeError(f"{field} must have at most {limit} {what}; got {len(items)}", field)
