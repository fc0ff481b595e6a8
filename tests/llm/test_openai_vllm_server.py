"""OpenAIEngine against vLLM's own OpenAI-compatible server (``vllm.entrypoints.openai.api_server``) on
loopback, serving the embedded SmolLM2-135M: a plain chat request, a JSON-schema request and the regex extension.

tests/llm/test_llm_engines.py checks the payloads, retries and failures against a fake server; this module
checks that a real server accepts what the engine sends and that the engine reads what the server answers. The
server runs with the CPU settings :mod:`toporoute.llm.vllm_engine` uses (threads bound by vLLM, eager mode,
whole-prompt prefill, the dtype :func:`toporoute.llm.cpu.resolve_dtype` picks for this CPU) and a 1 GiB KV
cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from _procs import free_port, wait_healthy
from _shared_vllm import converted_model_cache

from toporoute.llm import OpenAIEngine, Request, Result, Sampling
from toporoute.llm.cpu import resolve_dtype
from toporoute.llm.models import embedded_model_dir

SERVED = "smollm2-135m"
MAX_MODEL_LEN = 2048
START_TIMEOUT_S = 300.0  # vLLM imports torch in three processes; on 2 busy cores that alone takes a minute

SCHEMA = {
    "title": "Answer",
    "type": "object",
    "properties": {
        "answer": {"type": "integer", "minimum": 0, "maximum": 99},
        "unit": {"type": "string", "enum": ["apples", "pears"]},
    },
    "required": ["answer", "unit"],
    "additionalProperties": False,
}
REGEX = r"(yes|no), [0-9]{1,2}"


def _tail(log: Path, n: int = 6000) -> str:
    return log.read_text(errors="replace")[-n:]


def _stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM to the server's process group (the API server, its EngineCore and worker); SIGKILL to what is
    left of the group after ``grace_s``."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reaps the leader once it exits, so that the group check below can come out empty
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def model(request: pytest.FixtureRequest) -> Path:
    """The embedded model's Hugging Face folder (converted once per session)."""
    return embedded_model_dir(converted_model_cache(request.config))


@pytest.fixture(scope="module")
def server(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of a vLLM server for the embedded model; fails, never
    skips, when it does not come up, with the tail of its log."""
    port = free_port()
    env = {
        **os.environ,
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }
    # the module form: the `vllm` command reads the version of a distribution named vllm, and this one is vllm-cpu
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        SERVED,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        resolve_dtype(on_cpu=True).dtype,
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--max-num-batched-tokens",
        str(MAX_MODEL_LEN),
        "--no-enable-chunked-prefill",
        "--enforce-eager",
        "--seed",
        "0",
        "--disable-log-stats",
        "--uvicorn-log-level",
        "warning",
        # as VLLMEngine(compact_json=True): no free whitespace, so a short reply budget holds the JSON
        "--structured-outputs-config",
        json.dumps({"backend": "guidance", "disable_any_whitespace": True}),
    ]
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    t0 = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_healthy(
            proc,
            f"http://127.0.0.1:{port}",
            what="vLLM's server",
            timeout_s=START_TIMEOUT_S,
            poll_s=0.5,
            detail=lambda: _tail(log),
        )
        print(f"\n[llm] vLLM OpenAI server up in {time.perf_counter() - t0:.1f} s")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)


async def _one(base_url: str, request: Request, **kw) -> Result:
    engine = OpenAIEngine(SERVED, base_url=base_url, max_retries=0, timeout_s=60.0, **kw)
    try:
        (result,) = await engine.generate([request])
    finally:
        await engine.aclose()
    assert result.error is None, result.error
    assert result.attempts == 1
    return result


@pytest.mark.asyncio
async def test_plain_chat(server: str, model: Path) -> None:
    from transformers import AutoTokenizer

    request = Request.chat(
        "You are a helpful assistant.", "Name one fruit.", sampling=Sampling(max_tokens=8, seed=0)
    )
    r = await _one(server, request)
    assert r.text.strip()
    assert r.finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 8
    if r.finish_reason == "length":
        assert r.usage.completion_tokens == 8
    # the server counts the prompt with the model's own chat template: the same count as the tokenizer here
    tok = AutoTokenizer.from_pretrained(model)
    messages = [{"role": m.role, "content": m.content} for m in request.messages]
    assert r.usage.prompt_tokens == len(
        tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    )


@pytest.mark.asyncio
async def test_json_schema_reply_is_valid(server: str) -> None:
    request = Request.chat(
        "Reply in JSON.",
        "I have 3 apples and eat one. How many apples are left?",
        sampling=Sampling(max_tokens=40, seed=0),
        schema=SCHEMA,
    )
    r = await _one(server, request)
    assert r.finish_reason == "stop", r.text  # the grammar closed the object within the budget
    jsonschema.validate(json.loads(r.text), SCHEMA)


@pytest.mark.asyncio
async def test_regex_extension_constrains_the_reply(server: str) -> None:
    request = Request.chat(
        None,
        "Is 7 a prime number? Answer yes or no, then a number.",
        sampling=Sampling(max_tokens=12, seed=0),
        regex=REGEX,
    )
    r = await _one(server, request, guided_regex=True)
    assert r.finish_reason == "stop", r.text
    assert re.fullmatch(REGEX, r.text), r.text


def test_a_ray_run_on_the_real_server(server: str, tmp_path: Path) -> None:
    # toporoute run --ray: two actors of a local Ray cluster, each with its own openai engine on this server
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'toporoute[ray]')")
    from _procs import run_toporoute

    out = tmp_path / "run"
    p = run_toporoute(
        *("run", "cot", "--tasks", "math-demo", "--limit", "2", "--max-tokens", "48", "--out", str(out)),
        *("--engine", "openai", "--model", SERVED, "--base-url", server, "--ray", "--ray-actors", "2"),
        "--no-progress",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads((out / "cot" / "summary.json").read_text())
    assert summary["ok"] == 2 and summary["errors"] == 0 and summary["calls_per_task"] == 1, summary
    assert summary["completion_tokens_per_task"] > 0
    assert json.loads((out / "cot" / "run.json").read_text())["ray"]["actors"] == 2
