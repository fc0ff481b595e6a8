"""The encoder's runtime choice (ONNX Runtime or OpenVINO) and the OpenVINO runtime against
sentence-transformers; the OpenVINO tests skip when the ``openvino`` package (the ``openvino`` extra) is absent."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from toporoute import errors
from toporoute.embed import Encoder, _model_files, _runtime

TEXTS = [
    "I need the problem statement and its constraints.",
    "I provide a step-by-step plan for the algorithm.",
    "Offer: équations résolues, 数学 and emoji 🚀 handled",
    "short",
    "a " * 400 + "tail words beyond the truncation limit",
    "UPPER case and lower CASE are the same to an uncased model",
]

HAVE_OPENVINO = importlib.util.find_spec("openvino") is not None
needs_openvino = pytest.mark.skipif(
    not HAVE_OPENVINO, reason="openvino is not installed (pip install 'toporoute[openvino]')"
)


def test_choice_follows_argument_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_runtime.ENV, raising=False)
    assert _runtime.choose("onnxruntime", "cpu") == "onnxruntime"
    assert _runtime.choose(None, "cuda") == "onnxruntime"  # auto never takes OpenVINO for a GPU
    auto = _runtime.choose(None, "cpu")
    assert auto == ("openvino" if HAVE_OPENVINO and _runtime._intel_cpu() else "onnxruntime")
    monkeypatch.setenv(_runtime.ENV, "onnxruntime")
    assert _runtime.choose(None, "cpu") == "onnxruntime"
    monkeypatch.setenv(_runtime.ENV, "tensorrt")
    with pytest.raises(errors.InvalidArgumentError, match=_runtime.ENV) as e:
        _runtime.choose(None, "cpu")
    assert e.value.arg == "runtime"
    with pytest.raises(errors.InvalidArgumentError, match="'auto', 'onnxruntime' or 'openvino'"):
        _runtime.choose("torch", "cpu")
    with pytest.raises(errors.InvalidArgumentError, match="device='cpu' only"):
        _runtime.choose("openvino", "cuda")


def test_missing_openvino_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(_runtime.ENV, raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name, *a)
    )
    assert _runtime.choose(None, "cpu") == "onnxruntime"  # auto falls back silently
    with pytest.raises(errors.BackendUnavailableError, match=r"toporoute\[openvino\]") as e:
        Encoder.default(cache_dir=tmp_path, runtime="openvino")
    assert e.value.arg == "runtime"


@pytest.fixture(scope="module")
def ov_encoder(tmp_path_factory: pytest.TempPathFactory) -> Encoder:
    return Encoder.default(cache_dir=tmp_path_factory.mktemp("ov-cache"), runtime="openvino")


@needs_openvino
def test_openvino_agrees_with_sentence_transformers(ov_encoder: Encoder, encoder: Encoder) -> None:
    from sentence_transformers import SentenceTransformer

    assert ov_encoder.runtime == "openvino" and ov_encoder.onnx_path.name.endswith("-tokens-standard.onnx")
    st = SentenceTransformer(str(_model_files.resolve(None).tokenizer.parent), device="cpu")
    ours = ov_encoder.encode(TEXTS + [""], use_cache=False)
    assert ours.shape == (len(TEXTS) + 1, 384) and ours.dtype == np.float32 and not ours[-1].any()
    ref = st.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=True)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    assert np.max(np.abs(ours[:-1] @ ours[:-1].T - ref @ ref.T)) <= 1e-5
    np.testing.assert_allclose(ours, encoder.encode(TEXTS + [""], use_cache=False), atol=1e-5)


@needs_openvino
def test_openvino_runs_buckets_on_every_stream(ov_encoder: Encoder) -> None:
    # Few texts are split across the streams; many texts keep batch_size; every text lands in one bucket.
    texts = [f"I need step {i} of the plan" + " and more" * (i % 7) for i in range(40)]
    few = ov_encoder.forward(texts[:5])
    assert len(few) == min(5, ov_encoder._streams)
    many = ov_encoder.forward(texts)
    assert max(len(b.positions) for b in many) <= ov_encoder.batch_size
    assert sorted(int(p) for b in many for p in b.positions) == list(range(40))
    one_by_one = np.stack([ov_encoder.encode([t], use_cache=False)[0] for t in texts[:5]])
    np.testing.assert_allclose(ov_encoder.encode(texts[:5], use_cache=False), one_by_one, atol=1e-5)


@needs_openvino
def test_openvino_is_thread_safe(ov_encoder: Encoder) -> None:
    from concurrent.futures import ThreadPoolExecutor

    want = ov_encoder.encode(TEXTS, use_cache=False)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: ov_encoder.encode(TEXTS, use_cache=False), range(8)))
    for g in got:
        np.testing.assert_allclose(g, want, atol=1e-6)
