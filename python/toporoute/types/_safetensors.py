"""Reads and writes the safetensors format with numpy alone (no torch, no ``safetensors`` package).

Layout: an 8-byte little-endian header length, a UTF-8 JSON header ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}}`` padded with spaces to 8 bytes, then the raw
little-endian tensor bytes. Offsets are relative to the end of the header.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import write_bytes_atomic
from ..errors import InvalidArgumentError

__all__ = ["read_safetensors", "write_safetensors"]

_DTYPES: dict[str, np.dtype[Any]] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_NAMES = {(v.kind, v.itemsize): k for k, v in _DTYPES.items()}
_MAX_HEADER = 100 * 1024 * 1024


def _bad(path: Path, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{path}: not a valid safetensors file: {why}", "checkpoint")


def read_safetensors(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``(tensors, metadata)`` of a safetensors file; bfloat16 tensors are widened to float32.

    Raises InvalidArgumentError (naming the file and the fault) for a truncated or malformed file.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidArgumentError(f"checkpoint {path} does not exist", "checkpoint") from None
    if len(data) < 8:
        raise _bad(path, f"{len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > _MAX_HEADER or 8 + n > len(data):
        raise _bad(path, f"header length {n} exceeds the file ({len(data)} bytes)")
    try:
        header = json.loads(data[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(path, f"header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _bad(path, "header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _bad(path, "__metadata__ must map strings to strings")
    body = memoryview(data)[8 + n :]
    tensors: dict[str, np.ndarray] = {}
    for name, spec in header.items():
        try:
            dtype, shape, (begin, end) = spec["dtype"], [int(s) for s in spec["shape"]], spec["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise _bad(path, f"tensor {name!r} lacks dtype, shape or data_offsets") from None
        if not 0 <= begin <= end <= len(body):
            raise _bad(path, f"tensor {name!r} data_offsets [{begin}, {end}] lie outside the data section")
        if dtype == "BF16":
            raw = np.frombuffer(body[begin:end], dtype="<u2").astype(np.uint32) << 16
            arr = raw.view(np.float32)
        elif dtype in _DTYPES:
            arr = np.frombuffer(body[begin:end], dtype=_DTYPES[dtype])
        else:
            raise _bad(path, f"tensor {name!r} has unsupported dtype {dtype!r}")
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise _bad(
                path, f"tensor {name!r} holds {arr.size} values, its shape {shape} needs another count"
            )
        tensors[name] = arr.reshape(shape).copy()
    return tensors, dict(meta)


def write_safetensors(
    path: str | Path, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None
) -> None:
    """Writes ``tensors`` (numpy arrays, C order, little-endian) and string ``metadata`` atomically."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        key = _NAMES.get((arr.dtype.kind, arr.dtype.itemsize))
        if key is None:
            raise InvalidArgumentError(f"tensor {name!r}: dtype {arr.dtype} cannot be stored", "tensors")
        raw = np.ascontiguousarray(arr, dtype=_DTYPES[key]).tobytes()
        header[name] = {"dtype": key, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    write_bytes_atomic(Path(path), struct.pack("<Q", len(blob)) + blob + b"".join(chunks))
