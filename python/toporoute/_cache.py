"""The cache directory of derived model files (the exported ONNX encoder, the converted embedded LLM) and the
file hash that keys and verifies them."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["cache_root", "file_sha256"]


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache directory: ``cache_dir``, else ``$TOPOROUTE_CACHE``, else ``$XDG_CACHE_HOME/toporoute``,
    else ``~/.cache/toporoute``."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("TOPOROUTE_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "toporoute"


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, as hex (read in 4 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()
