"""toporoute.build_info(): how this installation was built and what it can run."""

from __future__ import annotations

import os
from typing import Any

from . import backends


def package_version(dist: str) -> str | None:
    """The installed version of the distribution ``dist`` (from its metadata, nothing imported), None when it
    is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def build_info() -> dict[str, Any]:
    """Version, compiled SIMD levels and the active one, OpenMP, CUDA (architectures, runtime version,
    visible devices) and which backends are available (with the reason when not)."""
    info: dict[str, Any] = {"version": package_version("toporoute") or "unknown", "core": False}
    try:
        from . import _core
    except ImportError as exc:
        info["core_error"] = str(exc)
    else:
        info.update(_core.build_info())
        info["core"] = True
    info["backends"] = {
        name: {"available": ok, "reason": why} for name, (ok, why) in backends.available().items()
    }
    info["env"] = {k: os.environ[k] for k in ("TOPOROUTE_BACKEND", "TOPOROUTE_SIMD") if k in os.environ}
    return info
