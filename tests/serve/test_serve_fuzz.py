"""Property-based fuzzing of the live service from its own ``/openapi.json`` (schemathesis) with all of its
checks: the ``schemathesis run --checks all`` command against a live server (its coverage phase: boundary
values, undeclared methods and the ``Allow`` header, missing auth), and every operation in process with valid
and invalid bodies (derandomized: the same cases every run). No answer may be a 5xx, every answer must match
the schema, a schema-invalid body must be refused and a schema-valid one accepted: the schema declares every
limit the server checks. The one exception is arrays whose shapes disagree (a cross-field rule no JSON Schema
keyword states), answered 422 ``shape_mismatch``; ``schemathesis.toml`` beside this file allows that 422 (and
413 for a body over the size limit) on the command line, and the in-process tests check that such a 422 is
``shape_mismatch`` and nothing else."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests._serve import live_server
from toporoute.serve import ServeConfig
from toporoute.types.qmix_params import QMixConfig, QMixParams

TOKEN = "fuzz-token"
CONFIG = Path(__file__).with_name("schemathesis.toml")
# Examples per operation and mode: small, as the command's coverage phase already walks every boundary.
EXAMPLES = 25


# What schemathesis' positive_data_acceptance lets a schema-valid request get, plus 413 (the body-size limit
# lies outside any JSON Schema); a 422 must be shape_mismatch (see accepted_unless_shapes_disagree).
_ACCEPTED = {401, 403, 404, 409, 413, 429}


def accepted_unless_shapes_disagree(ctx: Any, response: Any, case: schemathesis.Case) -> None:
    """``positive_data_acceptance``, narrowed: a schema-valid body gets a 2xx, or a 422 ``shape_mismatch``
    (shapes that disagree, the one rule the schema cannot state); any other refusal is a limit the schema
    fails to declare."""
    status = response.status_code
    if case.meta is None or not case.meta.generation.mode.is_positive or status < 400 or status in _ACCEPTED:
        return
    try:
        body = response.json()
    except ValueError:
        body = None
    type_ = (body.get("error") or {}).get("type") if isinstance(body, dict) else None
    assert status == 422 and type_ == "shape_mismatch", (
        f"a schema-valid request was refused: {status} {response.text[:300]}"
    )


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    checkpoint: Path = tmp_path_factory.mktemp("qmix") / "agents.safetensors"
    # small widths and limits keep the generated bodies (and their generation) small
    QMixParams.random(QMixConfig(obs_dim=5, hidden=8, n_actions=3, head_hidden=4), seed=3).save(checkpoint)
    # Small limits so the fuzzer reaches them (413 / 422) as well as the valid paths.
    config = ServeConfig(
        port=0,
        token=TOKEN,
        qmix_checkpoint=checkpoint,
        max_body_bytes=64 * 1024,
        max_agents=8,
        max_episodes=4,
    )
    with live_server(config) as url:
        yield url


@pytest.fixture(scope="module")
def api(base_url: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(
        f"{base_url}/openapi.json", config=SchemathesisConfig.from_path(CONFIG)
    )


OPERATIONS = [
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("POST", "/v1/route"),
    ("POST", "/v1/embed"),
    ("POST", "/v1/embeddings"),
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


def test_schemathesis_command_with_all_checks_finds_nothing(base_url: str, tmp_path: Path) -> None:
    """The command an outside user runs (``schemathesis run --checks all``), with a small example count."""
    command = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which(
        "schemathesis"
    )
    if command is None:
        pytest.skip("the schemathesis command is not installed (the test extra has it)")
    out = subprocess.run(
        [
            command, "--config-file", str(CONFIG), "--no-color", "run", f"{base_url}/openapi.json",
            "--checks", "all", "--max-examples", "5", "--seed", "1", "--workers", "1",
            "-H", f"Authorization: Bearer {TOKEN}", "--suppress-health-check", "all",
        ],
        capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"}, check=False,
        cwd=tmp_path,  # its crash cache (.schemathesis/) lands there
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "No issues found" in out.stdout, out.stdout[-3000:]


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_every_check_in_process(
    api: schemathesis.BaseSchema, base_url: str, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api[path][method]
    headers = {"Authorization": f"Bearer {TOKEN}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    def fuzz(case: schemathesis.Case) -> None:
        case.call_and_validate(
            base_url=base_url,
            headers=headers,
            excluded_checks=[positive_data_acceptance],
            additional_checks=[accepted_unless_shapes_disagree],
        )

    fuzz()


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_without_token_every_protected_operation_answers_401(
    api: schemathesis.BaseSchema, base_url: str, method: str, path: str
) -> None:
    operation = api[path][method]
    # 413 when the body is over the size limit: refused from its Content-Length before anything else
    expected = {200} if path == "/health" else {401, 413}

    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    @settings(max_examples=5, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    def fuzz(case: schemathesis.Case) -> None:
        response = case.call_and_validate(
            base_url=base_url,
            excluded_checks=[positive_data_acceptance],
            additional_checks=[accepted_unless_shapes_disagree],
        )
        assert response.status_code in expected, response.text[:300]

    fuzz()
