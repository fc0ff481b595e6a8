"""Replay engine: recording then replaying gives identical results; repeated identical requests replay in
order; a missing entry raises ReplayMissError naming the request and the file; a torn last line is ignored
(and cut off before the next append); a resumed recording only sends what is missing."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from toporoute.errors import InvalidArgumentError, ToporouteError
from toporoute.llm import (
    Engine,
    ReplayEngine,
    ReplayMissError,
    Request,
    Result,
    ScriptedEngine,
    Structured,
    Tags,
)

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def reply(r: Request) -> str:
    last = r.messages[-1].content
    if r.schema is not None:
        return '{"n": 1}' if r.messages[-1].role == "user" and "could not be used" in last else "not json"
    return f"reply to {last}"


def inner(**kw) -> ScriptedEngine:
    return ScriptedEngine(
        kw.pop("replies", reply), fail=lambda r: "boom" if "[fail]" in r.messages[-1].content else None, **kw
    )


def batch(*lasts: str, episode: str = "e1", schema: dict | None = None) -> list[Request]:
    return [
        Request.chat("sys", x, schema=schema, tags=Tags(episode, 3, f"agent{i}", "solver"))
        for i, x in enumerate(lasts)
    ]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.asyncio
async def test_record_then_replay_is_identical(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "t.jsonl"
    rec = ReplayEngine(path, inner(supports_guided_json=True))
    assert rec.recording and rec.name == "scripted" and rec.supports_guided_json
    first = await rec.generate(batch("a", "b [fail]", "c"))
    second = await rec.generate(batch("d"))
    await rec.aclose()
    assert [r.ok for r in first] == [True, False, True]
    assert len(lines(path)) == 4 and path.read_text().endswith("\n")

    play = ReplayEngine(path)
    assert not play.recording and play.name == "scripted" and play.supports_guided_json
    assert isinstance(play, Engine)
    assert await play.generate(batch("a", "b [fail]", "c")) == first
    assert await play.generate(batch("d")) == second
    # tags are not part of the key: they come from the replaying request
    (other,) = await ReplayEngine(path).generate(batch("d", episode="e2"))
    assert other.text == second[0].text and other.tags.episode == "e2"


@pytest.mark.asyncio
async def test_structured_over_replay_is_deterministic(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    rec = Structured(ReplayEngine(path, inner()))
    want = await rec.generate(batch("x", "y", schema=SCHEMA))
    assert [r.parsed for r in want] == [{"n": 1}, {"n": 1}] and want[0].attempts == 2
    assert len(lines(path)) == 4  # two first attempts and two re-prompts
    got = await Structured(ReplayEngine(path)).generate(batch("x", "y", schema=SCHEMA))
    assert got == want


@pytest.mark.asyncio
async def test_repeated_requests_replay_in_order(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rec = ReplayEngine(path, inner(replies=["first", "second", "third"]))
    await rec.generate(batch("same"))
    await rec.generate(batch("same", "same"))
    play = ReplayEngine(path)
    assert [r.text for r in await play.generate(batch("same", "same"))] == ["first", "second"]
    assert [r.text for r in await play.generate(batch("same"))] == ["third"]
    with pytest.raises(ReplayMissError):
        await play.generate(batch("same"))


@pytest.mark.asyncio
async def test_missing_entry_raises_and_consumes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    await ReplayEngine(path, inner()).generate(batch("known"))
    play = ReplayEngine(path)
    long = "L" * 80 + "TAIL-NOT-SHOWN"
    with pytest.raises(ReplayMissError) as e:
        await play.generate(batch("known", long, "also missing"))
    err = e.value
    assert isinstance(err, LookupError) and isinstance(err, ToporouteError)
    msg = str(err)
    assert str(path) in msg and "L" * 80 in msg and "TAIL" not in msg
    assert "episode=e1" in msg and "round=3" in msg and "agent=agent1" in msg and "role=solver" in msg
    assert "1 more" in msg
    assert err.tags == Tags("e1", 3, "agent1", "solver") and err.path == path
    assert err.key == batch("known", long)[1].key("scripted")
    # the failed batch consumed nothing: "known" still replays
    (ok,) = await play.generate(batch("known"))
    assert ok.text == "reply to known"
    # another model's key misses
    with pytest.raises(ReplayMissError, match="other-model"):
        await ReplayEngine(path, name="other-model").generate(batch("known"))


@pytest.mark.asyncio
async def test_torn_last_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "t.jsonl"
    await ReplayEngine(path, inner()).generate(batch("a", "b"))
    whole = path.read_bytes()
    path.write_bytes(whole + whole.splitlines(keepends=True)[0][:37])  # a crash mid-append
    with caplog.at_level(logging.WARNING, logger="toporoute.llm.replay"):
        play = ReplayEngine(path)
    assert any("torn" in r.getMessage() for r in caplog.records)
    assert [r.text for r in await play.generate(batch("a", "b"))] == ["reply to a", "reply to b"]
    assert path.read_bytes() != whole  # replay mode leaves the file as it is

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="toporoute.llm.replay"):
        rec = ReplayEngine(path, inner())  # record mode cuts the torn tail before appending
    assert any("torn" in r.getMessage() for r in caplog.records)
    assert path.read_bytes() == whole
    await rec.generate(batch("c"))
    assert [x["request"]["messages"][-1][1] for x in lines(path)] == ["a", "b", "c"]


@pytest.mark.asyncio
async def test_complete_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    await ReplayEngine(path, inner()).generate(batch("a"))
    path.write_text(path.read_text().rstrip("\n"))
    rec = ReplayEngine(path, inner(), reuse_recorded=True)
    await rec.generate(batch("a", "b"))
    assert [x["request"]["messages"][-1][1] for x in lines(path)] == ["a", "b"]


def test_corrupt_middle_line_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with pytest.raises(InvalidArgumentError) as e:
        ReplayEngine(path)
    assert e.value.arg == "path" and "does not exist" in str(e.value)
    path.write_text(
        '{"key": "k", "model": "m", "result": {}}\nnot json\n{"key": "k2", "model": "m", "result": {}}\n'
    )
    with pytest.raises(InvalidArgumentError, match="line 2"):
        ReplayEngine(path)


def test_several_models_need_a_name(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"key": "k", "model": "m1", "result": {}}\n{"key": "k", "model": "m2", "result": {}}\n')
    with pytest.raises(InvalidArgumentError, match="several models"):
        ReplayEngine(path)
    assert ReplayEngine(path, name="m2").name == "m2"
    with pytest.raises(InvalidArgumentError, match="name"):
        ReplayEngine(path, inner(), name="m2")


@pytest.mark.asyncio
async def test_resume_sends_only_missing_requests(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    await ReplayEngine(path, inner()).generate(batch("a", "b"))
    engine = inner()
    rec = ReplayEngine(path, engine, reuse_recorded=True)
    results = await rec.generate(batch("a", "new", "b"))
    assert [r.text for r in results] == ["reply to a", "reply to new", "reply to b"]
    assert [[m.messages[-1].content for m in b] for b in engine.batches] == [["new"]]
    assert len(lines(path)) == 3
    # without reuse every request goes to the engine and is appended
    plain = inner()
    await ReplayEngine(path, plain).generate(batch("a"))
    assert len(plain.batches) == 1 and len(lines(path)) == 4


@pytest.mark.asyncio
async def test_concurrent_batches_append_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rec = ReplayEngine(path, inner())
    out = await asyncio.gather(*(rec.generate(batch(f"q{i}", f"r{i}", episode=f"e{i}")) for i in range(8)))
    assert all(isinstance(r, Result) for rs in out for r in rs)
    recorded = lines(path)
    assert len(recorded) == 16
    assert {x["request"]["tags"]["episode"] for x in recorded} == {f"e{i}" for i in range(8)}
    play = ReplayEngine(path)
    for i in range(8):
        assert [r.text for r in await play.generate(batch(f"q{i}", f"r{i}"))] == [
            f"reply to q{i}",
            f"reply to r{i}",
        ]
