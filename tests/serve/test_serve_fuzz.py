"""Property-based fuzzing of the live service from its own ``/openapi.json`` (schemathesis): every operation,
valid and invalid bodies, a bounded number of examples each (derandomized: the same cases every run). No
answer may be a 5xx and every answer must match the schema (status code, content type, body)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests._serve import live_server
from toporoute.serve import ServeConfig
from toporoute.types.qmix_params import QMixConfig, QMixParams

TOKEN = "fuzz-token"
# Examples per operation and mode: 7 operations x 2 modes stay well under a minute on one CI core.
EXAMPLES = 100
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    checkpoint: Path = tmp_path_factory.mktemp("qmix") / "agents.safetensors"
    QMixParams.random(QMixConfig(), seed=3).save(checkpoint)
    # Small limits so the fuzzer reaches them (413 / 422) as well as the valid paths.
    config = ServeConfig(
        port=0,
        token=TOKEN,
        qmix_checkpoint=checkpoint,
        max_body_bytes=64 * 1024,
        max_agents=32,
        max_episodes=16,
    )
    with live_server(config) as url:
        yield url


@pytest.fixture(scope="module")
def api(base_url: str) -> schemathesis.BaseSchema:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    return schema


OPERATIONS = [
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("POST", "/v1/route"),
    ("POST", "/v1/embed"),
    ("POST", "/v1/toposort"),
    ("POST", "/v1/conductor/check"),
    ("POST", "/v1/qmix/act"),
]


def test_openapi_lists_every_operation(api: schemathesis.BaseSchema) -> None:
    listed = {(op.method.upper(), op.path) for op in (r.ok() for r in api.get_all_operations())}
    assert listed == set(OPERATIONS)


# GET operations take no parameters: there is nothing to make invalid, so they are fuzzed with valid cases only.
CASES = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode.value}")
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if method == "POST" or mode is GenerationMode.POSITIVE
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_no_server_error_and_schema_conformance(
    api: schemathesis.BaseSchema, base_url: str, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api[path][method]
    headers = {"Authorization": f"Bearer {TOKEN}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    def fuzz(case: schemathesis.Case) -> None:
        case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS)

    fuzz()


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_without_token_every_protected_operation_answers_401(
    api: schemathesis.BaseSchema, base_url: str, method: str, path: str
) -> None:
    operation = api[path][method]
    expected = 200 if path == "/health" else 401

    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    @settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    def fuzz(case: schemathesis.Case) -> None:
        response = case.call_and_validate(base_url=base_url, checks=CHECKS)
        assert response.status_code == expected, response.text[:300]

    fuzz()
