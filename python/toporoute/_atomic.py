"""Atomic file writes: a temporary file in the same folder, fsynced, then renamed over the target, so a reader
sees the old file or the new one, never a partial one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["write_bytes_atomic", "write_json_atomic"]


def write_bytes_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Writes ``data`` to ``path`` atomically; the file gets ``mode`` (mkstemp alone would leave it 0600, so a
    report or a run record could not be read by anyone else)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, value: Any) -> None:
    write_bytes_atomic(path, json.dumps(value, ensure_ascii=False, indent=1, default=str).encode("utf-8"))
