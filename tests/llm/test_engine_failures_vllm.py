"""The vLLM engine whose generate raises (issue 31): the real in-process engine of the session
(tests/_shared_vllm.py) with vLLM's generate failing. The ``toporoute run`` episode ends with status error and
the engine's message as its cause, the command exits 1, and once vLLM answers again the resume runs it and it
finishes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import _shared_vllm
from _shared_vllm import NEEDS_VLLM

pytestmark = NEEDS_VLLM


def test_a_vllm_engine_whose_generate_raises_gives_an_error_and_a_resume(
    tmp_path: Path, toporoute_cli
) -> None:
    llm = _shared_vllm._session["engine"]._engine._llm  # the real VLLMEngine's vLLM client

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("EngineCore stopped answering")

    out = tmp_path / "run"
    cmd = ["run", "single", "--tasks", "humaneval", "--limit", "1", "--max-tokens", "16", "--out", str(out)]
    cmd.append("--no-progress")
    llm.generate = broken  # an instance attribute over the class's method, removed below
    try:
        status = toporoute_cli(*cmd)
    finally:
        del llm.generate
    assert status == 1
    saved = json.loads((out / "single" / "episodes" / "HumanEval-0.json").read_text())
    assert saved["status"] == "error" and saved["record"] is None
    assert "engine: RuntimeError: EngineCore stopped answering" in saved["cause"]
    assert json.loads((out / "single" / "summary.json").read_text())["errors"] == 1
    assert toporoute_cli(*cmd) == 0  # vLLM answers again: the resume runs the episode
    saved = json.loads((out / "single" / "episodes" / "HumanEval-0.json").read_text())
    assert saved["status"] == "ok" and saved["usage"]["completion_tokens"] > 0
