"""The typed trace schema: records round-trip through JSON, records written before it re-serialise to what was
written, and damaged values read as defaults instead of raising."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _paths import DATA

from toporoute.trace.schema import (
    CallUsage,
    Descriptors,
    Edge,
    EdgeUsage,
    EpisodeFile,
    EpisodeRecord,
    Graph,
    ManagerDecision,
    Message,
    RoundRecord,
    Stats,
    Timing,
    Usage,
    UsageSummary,
    clip,
)

RUN_V1 = DATA / "run_v1"


def full_record() -> RoundRecord:
    scores = np.array([[0.0, 0.81234], [0.25, 0.0]], np.float32)
    return RoundRecord(
        method="dytopo",
        episode="e-1",
        task="t/1",
        round=2,
        graph=Graph.build(
            ["A", "B"],
            ["Alpha", "Beta"],
            [(0, 1), (1, 0)],
            order=[1, 0],
            levels=[1, 0],
            removed=[(0, 1)],
            is_dag=False,
            inbox=[[1], [0]],
            scores=scores,
        ),
        messages={"A": Message.of("hi", "-> B: x", "42", None), "B": Message.of("", parse_error="bad")},
        usage=Usage({"A": CallUsage(10, 5, 0.123456, 2, True)}, [EdgeUsage("A", "B", 3)]),
        stats=Stats(2, 1.0, 1.0, 0.5),
        timing=Timing(1.5, 1.0, 0.0001234),
        goal="g",
        descriptors=Descriptors(["need a", "need b"], ["offer a", "offer b"]),
        manager=ManagerDecision(True, "next", "pub", None, "q", "k"),
        extra={"actions": {"A": "broadcast_all"}},
    )


def test_round_record_round_trips() -> None:
    rec = full_record()
    data = json.loads(json.dumps(rec.to_json()))
    again = RoundRecord.from_json(data)
    assert again.to_json() == data
    assert again.graph.edges == [Edge("A", "B", pytest.approx(0.8123, abs=1e-4)), Edge("B", "A", 0.25)]
    assert data["edges"][0] == {"src": "A", "dst": "B", "score": 0.8123}  # scores rounded to 4 places
    assert data["usage"]["agents"]["A"]["latency_s"] == 0.1235 and data["timing"]["routing_s"] == 0.000123
    assert again.extra == {"actions": {"A": "broadcast_all"}} and data["actions"] == {"A": "broadcast_all"}
    assert again.usage.tokens == 15 and again.edge_count == 2 and again.density == 1.0


def test_extra_must_not_shadow_shared_fields() -> None:
    rec = RoundRecord("m", "e", "t", 0, Graph([], []), extra={"edges": []})
    with pytest.raises(ValueError, match="edges"):
        rec.to_json()
    ep = EpisodeRecord("m", "t", "code", 1, False, "", {}, 0.0, 0.0, 0.0, extra={"answer": "x"})
    with pytest.raises(ValueError, match="answer"):
        ep.to_json()


def _as_written_now(old: dict) -> dict:
    """A v1 record as it is written today: the one converted field is ``stats.jaccard_prev`` (a distance),
    now ``stats.jaccard_similarity_prev`` = 1 - distance."""
    stats = old.get("stats")
    if not isinstance(stats, dict) or "jaccard_prev" not in stats:
        return old
    stats = dict(stats)
    distance = stats.pop("jaccard_prev")
    stats["jaccard_similarity_prev"] = None if distance is None else 1.0 - distance
    return {**old, "stats": stats}


def test_v1_records_reserialise_to_what_was_written() -> None:
    files = sorted(RUN_V1.glob("*/traces/*.jsonl"))
    assert len(files) == 8
    for file in files:
        for line in file.read_text(encoding="utf-8").splitlines():
            old = _as_written_now(json.loads(line))
            new = RoundRecord.from_json(json.loads(line)).to_json()
            # every field written then comes back unchanged (the converted one as converted); fields v1 left
            # out come back null or empty
            assert {k: new[k] for k in old} == old, file
            assert all(new[k] in (None, [], {}) for k in set(new) - set(old)), file
    for file in sorted(RUN_V1.glob("*/episodes/*.json")):
        old = json.loads(file.read_text(encoding="utf-8"))
        parsed = EpisodeFile.from_json(old, file.stem)
        assert parsed.record is not None and parsed.record.to_json() == old["record"]
        assert parsed.usage == UsageSummary(**old["usage"])


@pytest.mark.parametrize(
    "damaged",
    [
        {"round": 3, "edges": "not a list", "usage": {"agents": {"A": {"prompt_tokens": "x"}}}, "timing": 5},
        {
            "round": 3,
            "agents": [1, None],
            "messages": {"A": None},
            "stats": {"edges": True, "density": "nan"},
        },
        {"round": 3, "scores": [[1, "x"]], "manager": {"is_complete": "yes"}, "levels": ["a"], "v": "2"},
    ],
)
def test_damaged_values_read_as_defaults(damaged: dict) -> None:
    rec = RoundRecord.from_json(damaged)
    assert rec.round == 3
    json.dumps(rec.to_json())  # still a writable record
    if "usage" in damaged:
        assert (
            rec.usage.agents["A"] == CallUsage(0, 0, 0.0, 1, True)
            and rec.graph.edges == []
            and rec.timing is None
        )
    if "stats" in damaged:
        assert rec.stats == Stats(0, 0.0, 0.0) and rec.graph.agents == ["1", "None"]
        assert rec.messages["A"] == Message("")
    if "manager" in damaged:
        assert rec.manager is not None and rec.manager.is_complete is False
        assert rec.graph.scores == [[1.0, 0.0]] and rec.graph.levels == [-1] and rec.v == 1


def test_episode_file_tolerates_missing_parts() -> None:
    f = EpisodeFile.from_json({"status": "error", "error": "Traceback ...", "record": None, "usage": 3}, "ep")
    assert (f.episode, f.status, f.record, f.usage, f.wall_s) == ("ep", "error", None, None, None)


def test_clip_marks_the_cut() -> None:
    assert clip("abc", 5) == "abc"
    assert clip("abcdefgh", 5) == "abcde... [3 more characters]"
