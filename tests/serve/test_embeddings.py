"""``POST /v1/embeddings``, the OpenAI-compatible face of the descriptor encoder, on a real server: requests
shaped as OpenAI's Python client sends them (plain httpx, and the ``openai`` client itself when installed)
get OpenAI's response shape with the in-process encoder's vectors; what it cannot serve is refused by name."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")

from tests._serve import live_server
from toporoute.embed import Encoder
from toporoute.serve import ServeConfig

TOKEN = "emb-token-5d1e"
TEXTS = ["I need unit tests for the parser", "I provide an implementation", ""]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with live_server(ServeConfig(port=0, token=TOKEN, max_texts=4, max_text_chars=64)) as base:
        yield base


def _post(url: str, body: dict[str, Any], token: str | None = TOKEN) -> httpx.Response:
    """As OpenAI's client posts: ``{base_url}/embeddings`` with a bearer API key and a JSON body."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{url}/v1/embeddings", json=body, headers=headers, timeout=60)


def _vectors(data: list[dict[str, Any]]) -> np.ndarray:
    rows = []
    for item in data:
        value = item["embedding"]
        rows.append(np.frombuffer(base64.b64decode(value), "<f4") if isinstance(value, str) else value)
    return np.asarray(rows, dtype=np.float32)


@pytest.mark.parametrize("encoding_format", ["float", "base64", None])
def test_embeddings_have_openais_shape_and_the_encoders_vectors(
    url: str, encoder: Encoder, encoding_format: str | None
) -> None:
    body: dict[str, Any] = {"input": TEXTS, "model": "all-MiniLM-L6-v2"}
    if encoding_format is not None:
        body["encoding_format"] = encoding_format
    r = _post(url, body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "list" and out["model"] == encoder.name
    assert [d["object"] for d in out["data"]] == ["embedding"] * len(TEXTS)
    assert [d["index"] for d in out["data"]] == list(range(len(TEXTS)))
    if encoding_format == "base64":
        assert all(isinstance(d["embedding"], str) for d in out["data"])
    got = _vectors(out["data"])
    np.testing.assert_allclose(got, np.asarray(encoder.encode(TEXTS, use_cache=False)), atol=1e-5)
    # word pieces the encoder read: [CLS] and [SEP] around each text's tokens
    assert out["usage"]["prompt_tokens"] == out["usage"]["total_tokens"] > 2 * len(TEXTS)


def test_one_string_and_the_full_model_name(url: str, encoder: Encoder) -> None:
    r = _post(url, {"input": TEXTS[0], "model": encoder.name, "dimensions": encoder.dim})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(
        _vectors(r.json()["data"]), np.asarray(encoder.encode(TEXTS[:1], use_cache=False)), atol=1e-5
    )


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"input": [[101, 2023]], "model": "all-MiniLM-L6-v2"}, "input", "token ids are not supported"),
        ({"input": [17, 4], "model": "all-MiniLM-L6-v2"}, "input", "token ids are not supported"),
        ({"input": "x", "model": "text-embedding-3-small"}, "model", "all-MiniLM-L6-v2"),
        ({"input": [], "model": "all-MiniLM-L6-v2"}, "input", "at least one text"),
        ({"input": ["a"] * 5, "model": "all-MiniLM-L6-v2"}, "input", "at most 4"),
        ({"input": "x" * 65, "model": "all-MiniLM-L6-v2"}, "input[0]", "at most 64 characters"),
        ({"input": "x", "model": "all-MiniLM-L6-v2", "dimensions": 256}, "dimensions", "384"),
    ],
)
def test_what_it_cannot_serve_is_refused_by_name(
    url: str, body: dict[str, Any], field: str, words: str
) -> None:
    r = _post(url, body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["field"] == field and words in err["message"], err


def test_the_token_is_the_api_key(url: str) -> None:
    assert _post(url, {"input": "x", "model": "all-MiniLM-L6-v2"}, token=None).status_code == 401
    assert _post(url, {"input": "x", "model": "all-MiniLM-L6-v2"}, token="wrong").status_code == 401


def test_with_openais_own_client(url: str, encoder: Encoder) -> None:
    openai = pytest.importorskip("openai", reason="the openai package is not installed")
    with openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0) as client:
        out = client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS)  # base64 on the wire
        assert out.model == encoder.name and out.usage.prompt_tokens > 0
        got = np.asarray([d.embedding for d in out.data], dtype=np.float32)
        np.testing.assert_allclose(got, np.asarray(encoder.encode(TEXTS, use_cache=False)), atol=1e-5)
        floats = client.embeddings.create(model="all-MiniLM-L6-v2", input="one", encoding_format="float")
        assert len(floats.data[0].embedding) == encoder.dim
        with pytest.raises(openai.UnprocessableEntityError) as info:
            client.embeddings.create(model="text-embedding-3-small", input="x")
        assert "all-MiniLM-L6-v2" in str(info.value)
