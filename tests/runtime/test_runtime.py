"""The runtime on the scripted engine: round-synchronous batching across episodes, the concurrency bound, usage
ledgers, resumable records, and cancellation (Ctrl-C in a real subprocess)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from toporoute.llm import Request, Tags
from toporoute.llm.scripted import ScriptedEngine, word_count
from toporoute.runtime import RoundBatcher, Runtime

AGENTS = ["planner", "coder", "tester", "critic"]


def reply(request: Request) -> str:
    return f"{request.tags.agent} answers {request.messages[-1].content}"


def team_episode(rounds: int, *, busy: float = 0.0):
    async def episode(ctx):
        for r in range(rounds):
            results = await ctx.generate(
                [
                    Request.chat("You are on a team.", f"round {r}", tags=Tags(round=r, agent=a))
                    for a in AGENTS
                ]
            )
            assert [res.tags.agent for res in results] == AGENTS
            ctx.ledger.add_edge(r, "planner", "coder", results[0].usage.completion_tokens)
            if busy:
                await asyncio.sleep(busy)
        return {"rounds": rounds}

    return episode


def test_one_engine_call_per_round_across_all_episodes() -> None:
    engine = ScriptedEngine(reply)
    runtime = Runtime(engine, concurrency=8, max_wait=5.0, progress=False)
    summary = asyncio.run(runtime.run([(f"ep{i}", team_episode(3)) for i in range(8)]))
    assert [len(b) for b in engine.batches] == [32, 32, 32]  # 8 episodes x 4 agents, once per round
    assert all({r.tags.episode for r in b} == {f"ep{i}" for i in range(8)} for b in engine.batches)
    totals = summary.totals()
    assert (totals["ok"], totals["calls"], totals["engine_calls"], totals["mean_batch"]) == (8, 96, 3, 32.0)


def test_a_busy_episode_does_not_stall_the_others() -> None:
    engine = ScriptedEngine(reply)
    runtime = Runtime(engine, max_wait=0.05, progress=False)

    async def slow(ctx):
        await asyncio.sleep(1.0)  # e.g. running tests in a sandbox
        return {}

    start = time.perf_counter()
    summary = asyncio.run(runtime.run([("fast", team_episode(2)), ("slow", slow)]))
    assert [o.status for o in summary.outcomes] == ["ok", "ok"]
    fast = summary.outcomes[0]
    assert fast.wall_s < 0.6, fast.wall_s  # two rounds at max_wait each, not behind the 1 s episode
    assert time.perf_counter() - start >= 1.0


def test_concurrency_bound() -> None:
    live = peak = 0

    async def episode(ctx):
        nonlocal live, peak
        live += 1
        peak = max(peak, live)
        await ctx.generate([Request.chat(None, "hi", tags=Tags(round=0, agent="a"))])
        await asyncio.sleep(0.01)
        live -= 1
        return {}

    runtime = Runtime(ScriptedEngine(reply), concurrency=3, max_wait=0.01, progress=False)
    summary = asyncio.run(runtime.run([(f"e{i}", episode) for i in range(10)]))
    assert peak == 3 and summary.totals()["ok"] == 10


def test_ledger_counts_the_engines_tokens() -> None:
    engine = ScriptedEngine(reply)
    summary = asyncio.run(Runtime(engine, progress=False).run([("only", team_episode(2))]))
    usage = summary.outcomes[0].usage
    sent = [r for b in engine.batches for r in b]
    assert usage["calls"] == 8 == len(sent)
    assert usage["completion_tokens"] == sum(word_count(reply(r)) for r in sent)
    assert usage["prompt_tokens"] > 0 and usage["messages_routed"] == 2


def test_records_are_written_and_a_rerun_resumes(tmp_path: Path) -> None:
    calls: list[str] = []

    def make(i: int, fail: bool):
        async def episode(ctx):
            calls.append(f"e{i}")
            await ctx.generate([Request.chat(None, f"task {i}", tags=Tags(round=0, agent="a"))])
            if fail:
                raise RuntimeError("boom")
            return {"i": i}

        return episode

    runtime = Runtime(ScriptedEngine(reply), out_dir=tmp_path, max_wait=0.01, progress=False)
    first = asyncio.run(runtime.run([(f"e{i}", make(i, i == 2)) for i in range(4)]))
    assert [o.status for o in first.outcomes] == ["ok", "ok", "error", "ok"]
    assert "RuntimeError: boom" in first.outcomes[2].error
    saved = json.loads((tmp_path / "episodes" / "e1.json").read_text())
    assert (
        saved["status"] == "ok" and saved["record"] == {"i": 1} and saved["ledger"]["summary"]["calls"] == 1
    )
    assert not list((tmp_path / "episodes").glob("*.tmp"))
    calls.clear()
    second = asyncio.run(runtime.run([(f"e{i}", make(i, False)) for i in range(4)]))
    assert calls == ["e2"]  # only the failed one runs again
    assert [o.status for o in second.outcomes] == ["skipped", "skipped", "ok", "skipped"]
    assert second.outcomes[0].record == {"i": 0}


def test_bad_episode_ids(tmp_path: Path) -> None:
    runtime = Runtime(ScriptedEngine(reply), out_dir=tmp_path, progress=False)
    for bad in (["../escape"], ["a", "a"], [""]):
        with pytest.raises(ValueError, match="episode"):
            asyncio.run(runtime.run([(e, team_episode(1)) for e in bad]))


def test_engine_failure_fails_its_episodes_not_the_run() -> None:
    class Broken(ScriptedEngine):
        async def generate(self, requests):
            raise ConnectionError("engine went away")

    summary = asyncio.run(Runtime(Broken(reply), progress=False).run([("a", team_episode(1))]))
    assert summary.outcomes[0].status == "error" and "engine went away" in summary.outcomes[0].error


def test_batcher_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="max_wait"):
        RoundBatcher(ScriptedEngine(reply), max_wait=-1)


def test_ctrl_c_keeps_every_finished_episode(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, signal, sys
        # Ctrl-C as a terminal sends it, whatever this test process passed on: a child inherits ignored
        # and blocked signals (a fresh-clone CI run once started it with SIGINT ignored, and it hung)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGINT}})
        from toporoute.llm import Request, Tags
        from toporoute.llm.scripted import ScriptedEngine
        from toporoute.runtime import Runtime

        async def quick(ctx):
            await ctx.generate([Request.chat(None, "q", tags=Tags(round=0, agent="a"))])
            return {{"done": True}}

        async def hang(ctx):
            await asyncio.sleep(3600)

        episodes = [(f"q{{i}}", quick) for i in range(3)] + [("hang", hang)]
        Runtime(ScriptedEngine(lambda r: "ok"), out_dir={str(tmp_path)!r}, max_wait=0.01, progress=False).run_sync(episodes)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    folder = tmp_path / "episodes"
    try:
        deadline = time.monotonic() + 60
        while len(list(folder.glob("q*.json"))) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()  # a child that did not stop must not outlive the test
        proc.wait()
    assert proc.returncode != 0 and b"KeyboardInterrupt" in err
    assert sorted(p.name for p in folder.iterdir()) == ["q0.json", "q1.json", "q2.json"]
    assert all(json.loads(p.read_text())["status"] == "ok" for p in folder.iterdir())
    assert os.path.exists(folder)


def test_progress_bar_shows_rounds_calls_and_tokens_per_batch(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    engine = ScriptedEngine(reply)
    asyncio.run(
        Runtime(engine, max_wait=5.0, progress=True).run([("a", team_episode(3)), ("b", team_episode(3))])
    )
    err = capsys.readouterr().err
    # one postfix per engine call (2 episodes x 4 agents each round), shown while the episodes still run
    for rnd, calls in ((1, 8), (2, 16), (3, 24)):
        assert re.search(rf"0/2 .*round {rnd} · {calls} calls · \d+ tok/s", err), err
    assert re.search(r"2/2 .*round 3 · 24 calls · \d+ tok/s", err), err


def test_no_progress_output_when_progress_is_off(capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(Runtime(ScriptedEngine(reply), max_wait=5.0, progress=False).run([("a", team_episode(2))]))
    assert capsys.readouterr().err == ""


def test_batcher_reports_each_engine_call() -> None:
    seen: list[list[int | None]] = []

    async def main() -> None:
        batcher = RoundBatcher(
            ScriptedEngine(reply), max_wait=5.0, on_batch=lambda rs: seen.append([r.tags.round for r in rs])
        )
        batcher.enter()
        await batcher.generate("e", [Request.chat(None, "x", tags=Tags(round=r, agent="a")) for r in (0, 1)])
        await batcher.generate("e", [Request.chat(None, "y", tags=Tags(round=2, agent="a"))])
        batcher.leave()

    asyncio.run(main())
    assert seen == [[0, 1], [2]]
